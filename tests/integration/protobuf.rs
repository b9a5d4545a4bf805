//! Protobuf on the wire (docs/protocol.md §12): a watcher of a built-in type asks for it without
//! being told and keeps every guarantee; JSON where the type, the settings or the server say so.
#![cfg(feature = "testing")]

use crate::common;

use common::*;
use k8s_openapi::api::core::v1::Pod;
use kube_watcher::testing::{FakeApiServer, Fault, Match, RecordedRequest, ResourceType};
use kube_watcher::{Api, ApiResource, Client, Config, DynamicObject, Watcher, WireFormat};
use serde_json::json;

const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";

fn accepts_protobuf(r: &RecordedRequest) -> bool {
    r.header("accept").is_some_and(|a| a.contains(PROTOBUF))
}

/// The list and watch requests the server received for pods.
fn pod_requests(server: &FakeApiServer) -> Vec<RecordedRequest> {
    server.requests().into_iter().filter(|r| r.path.ends_with("/pods")).collect()
}

#[test]
fn a_pod_watcher_uses_protobuf_without_being_told_in_every_configuration() {
    for_each_config(|label, config| {
        let server = server();
        create_pods(&server, 0..5);
        let w = Watcher::new(pods(&server), config).unwrap();
        // Attached from the start: every event, none folded into a replay of the state.
        collect_until(&w, |seen| seen.last().is_some_and(|e| e == "InitDone"));
        assert_eq!(w.stats().wire_format, Some(WireFormat::Protobuf), "{label}");
        server.create(&pod("apps", "new")).unwrap();
        server.replace(&labelled(pod("apps", "p1"), "tier", "db")).unwrap();
        server.delete::<Pod>(Some("apps"), "p2").unwrap();
        let seen = collect_until(&w, |seen| seen.iter().any(|e| e == "Delete(p2)"));
        assert_eq!(seen, ["Apply(new)", "Apply(p1)", "Delete(p2)"], "{label}");
        let p1 = w.store().get(&kube_watcher::ObjectRef::new("p1").within("apps")).unwrap();
        assert_eq!(p1.metadata.labels.as_ref().unwrap()["tier"], "db", "{label}");
        store_matches_server(&w, &server);
        assert_eq!(w.stats().errors.total(), 0, "{label}: {:?}", w.stats().last_error);
        let requests = pod_requests(&server);
        assert!(!requests.is_empty() && requests.iter().all(accepts_protobuf), "{label}");
    });
}

#[test]
fn objects_read_over_protobuf_equal_those_read_over_json() {
    let server = server();
    let mut p = pod("apps", "full");
    p.spec = Some(
        serde_json::from_value(json!({
            "containers": [{"name": "c", "image": "nginx", "ports": [{"containerPort": 80, "hostPort": 8080}],
                            "resources": {"limits": {"cpu": "500m", "memory": "1Gi"}}}],
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 0
        }))
        .unwrap(),
    );
    server.create(&p).unwrap();
    create_pods(&server, 0..3);
    let read = |format| {
        let w = Watcher::new(pods(&server), Config::default().wire_format(format)).unwrap();
        w.store().wait_until_ready(WAIT).unwrap();
        assert_eq!(w.stats().wire_format, Some(format));
        let mut state: Vec<Pod> = w.store().state().iter().map(|p| (**p).clone()).collect();
        state.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        state
    };
    assert_eq!(read(WireFormat::Protobuf), read(WireFormat::Json));
    // The one-shot calls too.
    let api: Api<Pod> = Api::namespaced(Client::from_url(&server.url()).unwrap(), "apps");
    let got = api.get("full").unwrap();
    let listed = api.list(&Default::default()).unwrap();
    assert!(listed.items.contains(&got));
    let last = server.requests().into_iter().next_back().unwrap();
    assert!(accepts_protobuf(&last));
}

#[test]
fn an_in_stream_410_in_protobuf_relists() {
    let server = server();
    create_pods(&server, 0..3);
    let w = Watcher::new(pods(&server), Config::default()).unwrap();
    w.store().wait_until_ready(WAIT).unwrap();
    server.push_fault(
        Match::Watch,
        Fault::InStreamError { code: 410, reason: "Expired".into(), message: "too old resource version".into() },
    );
    server.end_watches();
    eventually("a relist after the in-stream 410", || w.stats().relists.expired == 1);
    assert_eq!(w.stats().wire_format, Some(WireFormat::Protobuf));
    server.create(&pod("apps", "after")).unwrap();
    collect_until(&w, |seen| seen.iter().any(|e| e == "Apply(after)"));
    store_matches_server(&w, &server);
}

#[test]
fn an_http_error_in_protobuf_is_the_same_api_error() {
    let server = server();
    let api: Api<Pod> = Api::namespaced(Client::from_url(&server.url()).unwrap(), "apps");
    let e = api.get("missing").unwrap_err();
    assert_eq!(e.status(), Some(404));
    assert!(e.to_string().contains("pods \"missing\" not found"), "{e}");
    server.push_fault(
        Match::List,
        Fault::Status {
            code: 403,
            reason: "Forbidden".into(),
            message: "pods is forbidden: no".into(),
            retry_after: None,
        },
    );
    let e = api.list(&Default::default()).unwrap_err();
    assert_eq!(e.status(), Some(403));
    assert!(e.to_string().contains("pods is forbidden: no"), "{e}");
}

#[test]
fn bookmarks_and_a_streaming_list_in_protobuf_move_the_resource_version() {
    let server = server();
    create_pods(&server, 0..4);
    let w = Watcher::new(pods(&server), Config::default().streaming_lists()).unwrap();
    w.store().wait_until_ready(WAIT).unwrap();
    assert_eq!(w.store().len(), 4);
    assert!(server.requests().iter().all(|r| r.watch), "a streaming list needs no list request");
    assert_eq!(w.stats().wire_format, Some(WireFormat::Protobuf));
    // A write elsewhere moves the revision: a bookmark brings the store's version along.
    let other = kube_watcher::testing::ResourceType::of::<k8s_openapi::api::core::v1::ConfigMap>();
    let cm = server
        .create_value(
            &other,
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": "apps"}}),
        )
        .unwrap();
    let rv = cm["metadata"]["resourceVersion"].as_str().unwrap().to_owned();
    w.store().wait_for_version(&rv, WAIT).unwrap();
    assert!(w.stats().events.bookmarks >= 2, "{:?}", w.stats().events);
}

#[test]
fn a_json_only_server_is_watched_over_json() {
    let server = FakeApiServer::builder().bookmark_interval(ms(100)).json_only(true).start();
    create_pods(&server, 0..3);
    let w = Watcher::new(pods(&server), Config::default()).unwrap();
    w.store().wait_until_ready(WAIT).unwrap();
    server.create(&pod("apps", "new")).unwrap();
    collect_until(&w, |seen| seen.iter().any(|e| e == "Apply(new)"));
    assert_eq!(w.stats().wire_format, Some(WireFormat::Json));
    // Protobuf was offered with JSON as the fallback: no request was refused or repeated.
    let requests = pod_requests(&server);
    assert_eq!(requests.len() as u64, w.stats().lists + w.stats().watches, "{requests:?}");
    assert!(requests.iter().all(accepts_protobuf));
}

#[test]
fn a_refused_protobuf_request_is_asked_again_in_json_and_the_refusal_remembered() {
    let server = server();
    create_pods(&server, 0..3);
    server.push_fault(
        Match::List,
        Fault::Status {
            code: 406,
            reason: "NotAcceptable".into(),
            message: "no protobuf here".into(),
            retry_after: None,
        },
    );
    let w = Watcher::new(pods(&server), Config::default()).unwrap();
    w.store().wait_until_ready(WAIT).unwrap();
    server.create(&pod("apps", "new")).unwrap();
    collect_until(&w, |seen| seen.iter().any(|e| e == "Apply(new)"));
    assert_eq!(w.stats().wire_format, Some(WireFormat::Json));
    assert_eq!(w.stats().errors.total(), 0, "the refusal is no error: {:?}", w.stats().last_error);
    let requests = pod_requests(&server);
    // One list refused, asked again at once in JSON; the watch asks JSON from the start.
    assert_eq!(requests.iter().filter(|r| accepts_protobuf(r)).count(), 1, "{requests:?}");
    assert!(!requests[1].watch && !accepts_protobuf(&requests[1]));
    assert!(requests[2..].iter().all(|r| !accepts_protobuf(r)), "{requests:?}");
}

#[test]
fn json_settings_dynamic_objects_and_compact_stores_stay_json() {
    let server = server();
    create_pods(&server, 0..2);
    let client = Client::from_url(&server.url()).unwrap();
    let json = Watcher::new(pods(&server), Config::default().wire_format(WireFormat::Json)).unwrap();
    let dynamic: Api<DynamicObject> = Api::all_with(client.clone(), &ApiResource::of::<Pod>());
    let dynamic = Watcher::new(dynamic, Config::default()).unwrap();
    let compact = Watcher::builder(pods(&server)).compressed_store().start().unwrap();
    json.store().wait_until_ready(WAIT).unwrap();
    dynamic.store().wait_until_ready(WAIT).unwrap();
    compact.store().wait_until_ready(WAIT).unwrap();
    assert_eq!(json.stats().wire_format, Some(WireFormat::Json));
    assert_eq!(dynamic.stats().wire_format, Some(WireFormat::Json));
    assert_eq!(compact.stats().wire_format, Some(WireFormat::Json));
    assert!(pod_requests(&server).iter().all(|r| !accepts_protobuf(r)));
    assert_eq!(dynamic.store().len(), 2);
}

#[test]
fn a_custom_resource_stays_json() {
    let server = server();
    let widgets = ResourceType::new("example.com", "v1", "widgets", "Widget", true);
    server.register(widgets.clone());
    server
        .create_value(
            &widgets,
            json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w", "namespace": "apps"}}),
        )
        .unwrap();
    let ar = ApiResource::new("example.com", "v1", "Widget", "widgets", true);
    let api: Api<DynamicObject> = Api::all_with(Client::from_url(&server.url()).unwrap(), &ar);
    let w = Watcher::new(api, Config::default()).unwrap();
    w.store().wait_until_ready(WAIT).unwrap();
    assert_eq!(w.store().len(), 1);
    assert_eq!(w.stats().wire_format, Some(WireFormat::Json));
}

#[test]
fn a_frame_longer_than_max_line_is_a_clear_error_not_an_allocation() {
    let server = server();
    create_pods(&server, 0..1);
    let w = Watcher::new(pods(&server), Config::default().max_line(1024)).unwrap();
    w.store().wait_until_ready(WAIT).unwrap();
    let mut big = pod("apps", "big");
    big.metadata.annotations = Some([("note".to_owned(), "x".repeat(4000))].into());
    server.create(&big).unwrap();
    let seen = collect_until(&w, |seen| seen.iter().any(|e| e.contains("protobuf frame announces")));
    let e = seen.iter().find(|e| e.contains("protobuf frame announces")).unwrap();
    assert!(e.contains("more than the 1024 byte limit (Config::max_line)"), "{e}");
}

#[test]
fn an_undecodable_object_in_protobuf_is_skipped_and_reported_never_deleted() {
    let rt = ResourceType::of::<Pod>();
    let bad = |name: &str| json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "apps"}, "spec": {"containers": 5}});
    let server = server();
    create_pods(&server, 0..2);
    server.create_value(&rt, bad("bad-listed")).unwrap();
    let w = Watcher::new(pods(&server), Config::default()).unwrap();
    let listed = collect_until(&w, |seen| seen.last().is_some_and(|e| e == "InitDone"));
    assert_eq!(w.stats().wire_format, Some(WireFormat::Protobuf));
    assert_eq!(w.store().len(), 2);
    assert!(listed.iter().any(|e| e.contains("apps/bad-listed") && e.contains(" skipped (")), "{listed:?}");
    server.create_value(&rt, bad("bad-watched")).unwrap();
    server.create(&pod("apps", "good")).unwrap();
    let seen = collect_until(&w, |seen| seen.iter().any(|e| e == "Apply(good)"));
    let reports: Vec<_> = seen.iter().filter(|e| e.contains(" skipped (")).collect();
    assert!(reports.iter().any(|e| e.contains("apps/bad-watched")), "{seen:?}");
    assert!(!seen.iter().any(|e| e.starts_with("Delete(")), "{seen:?}");
    assert_eq!(w.stats().undecodable, 2, "{:?}", w.stats());
}
