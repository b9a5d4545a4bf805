//! Protobuf on the wire (docs/protocol.md §12): a watcher of a built-in type, and a metadata-only
//! watcher of any type, asks for it without being told and keeps every guarantee; JSON where the
//! type, the settings or the server say so.
#![cfg(feature = "testing")]

use crate::common;

use common::*;
use k8s_openapi::api::core::v1::Pod;
use kube_watcher::testing::{FakeApiServer, Fault, Match, RecordedRequest, ResourceType};
use kube_watcher::{
    Api, ApiResource, Client, Config, DynamicObject, PartialObjectMetadata, Watchable, Watcher, WireFormat,
    metadata_watcher,
};
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
            "containers": [{"name": "c", "image": "nginx", "ports": [{"containerPort": 80, "hostPort": 0}],
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
    // Attached from the start, so that the change below comes as an `Apply`.
    collect_until(&w, |seen| seen.last().is_some_and(|e| e == "InitDone"));
    server.push_fault(
        Match::Watch,
        Fault::InStreamError { code: 410, reason: "Expired".into(), message: "too old resource version".into() },
    );
    server.end_watches();
    collect_until(&w, |seen| seen.last().is_some_and(|e| e == "InitDone"));
    assert_eq!(w.stats().relists.expired, 1);
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
    collect_until(&w, |seen| seen.last().is_some_and(|e| e == "InitDone"));
    server.create(&pod("apps", "new")).unwrap();
    collect_until(&w, |seen| seen.iter().any(|e| e == "Apply(new)"));
    assert_eq!(w.stats().wire_format, Some(WireFormat::Json));
    // Protobuf was offered with JSON as the fallback: no request was refused or repeated.
    let requests = pod_requests(&server);
    assert_eq!(requests.len() as u64, w.stats().lists + w.stats().watches, "{requests:?}");
    assert!(requests.iter().all(accepts_protobuf));
}

/// A watcher started by `start` against a server that answers its first list `code` (as one
/// that cannot parse the protobuf `Accept` does) syncs, watches and reads JSON, with no error;
/// returns the pod requests the server received.
fn refused_then_json<K: Watchable>(
    code: u16,
    reason: &str,
    start: impl FnOnce(&FakeApiServer) -> kube_watcher::Result<Watcher<K>>,
) -> Vec<RecordedRequest> {
    let server = server();
    create_pods(&server, 0..3);
    let status = Fault::Status { code, reason: reason.into(), message: "no protobuf here".into(), retry_after: None };
    server.push_fault(Match::List, status);
    let w = start(&server).unwrap();
    collect_until(&w, |seen| seen.last().is_some_and(|e| e == "InitDone"));
    server.create(&pod("apps", "new")).unwrap();
    collect_until(&w, |seen| seen.iter().any(|e| e == "Apply(new)"));
    assert_eq!(w.stats().wire_format, Some(WireFormat::Json));
    assert_eq!(w.stats().errors.total(), 0, "the refusal is no error: {:?}", w.stats().last_error);
    pod_requests(&server)
}

#[test]
fn a_refused_protobuf_request_is_asked_again_in_json_and_the_refusal_remembered() {
    let requests = refused_then_json(406, "NotAcceptable", |server| Watcher::new(pods(server), paged()));
    // One list refused, asked again at once in JSON; the watch asks JSON from the start.
    assert_eq!(requests.iter().filter(|r| accepts_protobuf(r)).count(), 1, "{requests:?}");
    assert!(!requests[1].watch && !accepts_protobuf(&requests[1]));
    assert!(requests[2..].iter().all(|r| !accepts_protobuf(r)), "{requests:?}");
}

#[test]
fn json_settings_and_dynamic_objects_stay_json_while_compact_stores_and_metadata_watchers_use_protobuf() {
    let server = server();
    create_pods(&server, 0..2);
    let client = Client::from_url(&server.url()).unwrap();
    let json = Watcher::new(pods(&server), Config::default().wire_format(WireFormat::Json)).unwrap();
    let dynamic: Api<DynamicObject> = Api::all_with(client.clone(), &ApiResource::of::<Pod>());
    let dynamic = Watcher::new(dynamic, Config::default()).unwrap();
    json.store().wait_until_ready(WAIT).unwrap();
    dynamic.store().wait_until_ready(WAIT).unwrap();
    // Neither asked for protobuf, not even as a fallback.
    assert!(!pod_requests(&server).iter().any(accepts_protobuf), "{:?}", pod_requests(&server));
    // The compact modes keep protobuf objects as they came (tests/integration/compact.rs).
    let compact = Watcher::builder(pods(&server)).compressed_store().start().unwrap();
    let metadata = kube_watcher::metadata_watcher(pods(&server), Config::default()).unwrap();
    compact.store().wait_until_ready(WAIT).unwrap();
    metadata.store().wait_until_ready(WAIT).unwrap();
    assert_eq!(json.stats().wire_format, Some(WireFormat::Json));
    assert_eq!(dynamic.stats().wire_format, Some(WireFormat::Json));
    assert_eq!(compact.stats().wire_format, Some(WireFormat::Protobuf));
    assert_eq!(metadata.stats().wire_format, Some(WireFormat::Protobuf));
    // The compressed store's requests ask for full objects, the metadata watcher's for metadata,
    // each in protobuf first.
    let protobuf: Vec<_> = pod_requests(&server).into_iter().filter(accepts_protobuf).collect();
    let (partial, full): (Vec<_>, Vec<_>) =
        protobuf.iter().partition(|r| r.header("accept").is_some_and(|a| a.contains("as=PartialObjectMetadata")));
    assert!(!full.is_empty() && full.len() <= 2, "{protobuf:?}");
    assert!(!partial.is_empty() && partial.len() <= 2, "{protobuf:?}");
    assert_eq!(dynamic.store().len(), 2);
    assert_eq!(metadata.store().len(), 2);
}

/// client-go's metadata client's `Accept` headers (`metadata/metadata.go`).
const METADATA_LIST_ACCEPT: &str = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json";
const METADATA_ACCEPT: &str = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json";

/// A metadata watcher's store, by name.
fn metadata_state<K: 'static>(w: &Watcher<PartialObjectMetadata<K>>) -> Vec<PartialObjectMetadata<K>> {
    let mut all: Vec<_> = w.store().state().iter().map(|o| (**o).clone()).collect();
    all.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    all
}

/// Every object of `api` on `server`, read by a metadata watcher in `format`, by name.
fn read_metadata<K: 'static>(
    server: &FakeApiServer,
    api: &Api<K>,
    format: WireFormat,
) -> Vec<PartialObjectMetadata<K>> {
    let watches = || server.requests().iter().filter(|r| r.watch).count();
    let before = watches();
    let w = metadata_watcher(api.clone(), Config::default().wire_format(format)).unwrap();
    w.store().wait_until_ready(WAIT).unwrap();
    assert_eq!(w.stats().wire_format, Some(format));
    assert_eq!(w.stats().errors.total(), 0, "{:?}", w.stats().last_error);
    // Its watch reaches the server before it goes: a watch request still on its way when the
    // test queues a watch fault would take that fault in place of the watcher under test.
    eventually("the reading watcher's watch", || watches() > before);
    metadata_state(&w)
}

/// An object of `rt` in namespace `apps`, with labels, annotations and a spec.
fn object_of(rt: &ResourceType, name: &str, size: u32) -> serde_json::Value {
    let mut obj = json!({"apiVersion": rt.api_version(), "kind": rt.kind,
        "metadata": {"name": name, "namespace": "apps", "labels": {"app": "web"}, "annotations": {"size": size.to_string()}}});
    if rt.built_in {
        obj["spec"] = json!({"containers": [{"name": "c", "image": "nginx"}]});
    } else {
        obj["spec"] = json!({"size": size});
    }
    obj
}

/// A metadata watcher of `rt` (through `api`) asks for protobuf with client-go's headers and
/// reads it; its store equals the JSON reader's, events and a relist work.
fn metadata_over_protobuf<K: 'static>(server: &FakeApiServer, rt: &ResourceType, api: &Api<K>) {
    let label = &rt.plural;
    for i in 0..3 {
        server.create_value(rt, object_of(rt, &format!("o{i}"), i)).unwrap();
    }
    // Paged lists: the list requests ask for the list's metadata type (a streaming list, the
    // default, is a watch and asks for the object's, as watches do).
    let w = metadata_watcher(api.clone(), paged()).unwrap();
    // Attached from the start: every event.
    collect_until(&w, |seen| seen.last().is_some_and(|e| e == "InitDone"));
    assert_eq!(w.stats().wire_format, Some(WireFormat::Protobuf), "{label}");
    assert_eq!(metadata_state(&w), read_metadata(server, api, WireFormat::Json), "{label}");
    let kind = metadata_state(&w)[0].types.clone().map(|t| (t.api_version, t.kind));
    assert_eq!(kind, Some(("meta.k8s.io/v1".to_owned(), "PartialObjectMetadata".to_owned())), "{label}");
    // Changes: one added, one changed, one deleted.
    server.create_value(rt, object_of(rt, "new", 7)).unwrap();
    server.replace_value(rt, object_of(rt, "o1", 9)).unwrap();
    server.delete_value(rt, Some("apps"), "o2").unwrap();
    let seen = collect_until(&w, |seen| seen.iter().any(|e| e == "Delete(o2)"));
    assert_eq!(seen, ["Apply(new)", "Apply(o1)", "Delete(o2)"], "{label}");
    let o1 = w.store().get(&kube_watcher::ObjectRef::new("o1").within("apps")).unwrap();
    assert_eq!(o1.metadata.annotations.as_ref().unwrap()["size"], "9", "{label}");
    eventually("the stores agree", || metadata_state(&w) == read_metadata(server, api, WireFormat::Json));
    // An in-stream 410 relists, over protobuf.
    server.push_fault(
        Match::Watch,
        Fault::InStreamError { code: 410, reason: "Expired".into(), message: "too old resource version".into() },
    );
    server.end_watches();
    collect_until(&w, |seen| seen.last().is_some_and(|e| e == "InitDone"));
    assert_eq!(w.stats().relists.expired, 1, "{label}");
    server.create_value(rt, object_of(rt, "after", 1)).unwrap();
    collect_until(&w, |seen| seen.iter().any(|e| e == "Apply(after)"));
    assert_eq!(metadata_state(&w), read_metadata(server, api, WireFormat::Protobuf), "{label}");
    assert_eq!(w.stats().wire_format, Some(WireFormat::Protobuf), "{label}");
    // Every request asked with client-go's headers: lists for the list, the singular otherwise.
    let requests: Vec<_> = server.requests().into_iter().filter(|r| r.path.ends_with(&format!("/{label}"))).collect();
    assert!(requests.iter().any(|r| r.watch) && requests.iter().any(|r| !r.watch), "{label}: {requests:?}");
    for r in requests.iter().filter(|r| accepts_protobuf(r)) {
        let wanted = if r.watch { METADATA_ACCEPT } else { METADATA_LIST_ACCEPT };
        assert_eq!(r.header("accept"), Some(wanted), "{label}: watch={}", r.watch);
    }
    // The one-shot calls read it too.
    let listed = api.clone().into_metadata().list(&Default::default()).unwrap();
    let mut items = listed.items;
    items.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    assert_eq!(items, metadata_state(&w), "{label}");
    let namespaced: Api<K> = Api::namespaced_with(Client::from_url(&server.url()).unwrap(), "apps", api.resource());
    let one = namespaced.into_metadata().get("o1").unwrap();
    assert_eq!(one, *o1, "{label}");
    let last = server.requests().into_iter().next_back().unwrap();
    assert_eq!(last.header("accept"), Some(METADATA_ACCEPT), "{label}");
}

#[test]
fn metadata_watchers_of_pods_and_of_a_custom_resource_use_protobuf_and_read_what_json_reads() {
    let server = server();
    metadata_over_protobuf(&server, &ResourceType::of::<Pod>(), &pods(&server));
    let widgets = ResourceType::new("example.com", "v1", "widgets", "Widget", true);
    server.register(widgets.clone());
    let ar = ApiResource::new("example.com", "v1", "Widget", "widgets", true);
    let api: Api<DynamicObject> = Api::all_with(Client::from_url(&server.url()).unwrap(), &ar);
    metadata_over_protobuf(&server, &widgets, &api);
}

#[test]
fn a_metadata_watcher_set_to_json_or_against_a_json_only_server_reads_json() {
    for (label, json_only, format) in
        [("WireFormat::Json", false, WireFormat::Json), ("json_only server", true, WireFormat::Protobuf)]
    {
        let server = FakeApiServer::builder().bookmark_interval(ms(100)).json_only(json_only).start();
        create_pods(&server, 0..3);
        let w = metadata_watcher(pods(&server), Config::default().wire_format(format)).unwrap();
        collect_until(&w, |seen| seen.last().is_some_and(|e| e == "InitDone"));
        server.create(&pod("apps", "new")).unwrap();
        collect_until(&w, |seen| seen.iter().any(|e| e == "Apply(new)"));
        assert_eq!(w.stats().wire_format, Some(WireFormat::Json), "{label}");
        assert_eq!(w.store().len(), 4, "{label}");
        let kind = metadata_state(&w)[0].types.clone().map(|t| t.kind);
        assert_eq!(kind.as_deref(), Some("PartialObjectMetadata"), "{label}");
        let requests = pod_requests(&server);
        assert_eq!(requests.len() as u64, w.stats().lists + w.stats().watches, "{label}: {requests:?}");
        for r in &requests {
            let accept = r.header("accept").unwrap_or_default();
            let (protobuf, json) = if r.watch {
                (METADATA_ACCEPT, "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json")
            } else {
                (
                    METADATA_LIST_ACCEPT,
                    "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json",
                )
            };
            // Set to JSON: the JSON headers; against a JSON-only server: protobuf was offered
            // with JSON as the fallback, so nothing was refused or asked twice.
            assert_eq!(accept, if json_only { protobuf } else { json }, "{label}: watch={}", r.watch);
        }
    }
}

#[test]
fn a_refused_metadata_request_is_asked_again_in_json_and_the_refusal_remembered() {
    let requests = refused_then_json(415, "UnsupportedMediaType", |server| metadata_watcher(pods(server), paged()));
    assert_eq!(requests[0].header("accept"), Some(METADATA_LIST_ACCEPT), "{requests:?}");
    assert!(requests[1..].iter().all(|r| !accepts_protobuf(r)), "{requests:?}");
}

#[test]
fn a_drift_check_reads_protobuf_and_finds_a_lost_event() {
    let server = server();
    server.create(&pod("apps", "a")).unwrap();
    server.push_fault(Match::Watch, Fault::DropEvents { events: 1 }); // the first watch loses one
    let w = Watcher::new(pods(&server), paged().drift_check(std::time::Duration::from_secs(1))).unwrap();
    w.store().wait_until_ready(WAIT).unwrap();
    eventually("the first watch is open", || server.requests().iter().any(|r| r.watch));
    server.create(&pod("apps", "lost")).unwrap();
    server.create(&pod("apps", "next")).unwrap(); // delivered: the watch moves past "lost"
    eventually("a drift relist", || w.stats().relists.drift >= 1);
    store_matches_server(&w, &server);
    let check = server
        .requests()
        .into_iter()
        .find(|r| !r.watch && r.query_param("resourceVersionMatch") == Some("NotOlderThan"))
        .expect("a drift check list");
    assert_eq!(check.header("accept"), Some(METADATA_LIST_ACCEPT));
    // What the watcher reads is still its own: full pods, in protobuf.
    assert_eq!(w.stats().wire_format, Some(WireFormat::Protobuf));
    // A JSON watcher of a custom resource checks over protobuf too, and still says JSON.
    let widgets = ResourceType::new("example.com", "v1", "widgets", "Widget", true);
    server.register(widgets.clone());
    server.create_value(&widgets, object_of(&widgets, "w", 1)).unwrap();
    let ar = ApiResource::new("example.com", "v1", "Widget", "widgets", true);
    let api: Api<DynamicObject> = Api::all_with(Client::from_url(&server.url()).unwrap(), &ar);
    let w = Watcher::new(api, paged().drift_check(std::time::Duration::from_secs(1))).unwrap();
    w.store().wait_until_ready(WAIT).unwrap();
    // The counter moves before the request goes out: wait for the request itself.
    let drift_check = |r: &RecordedRequest| {
        r.path.ends_with("/widgets") && !r.watch && r.query_param("resourceVersionMatch") == Some("NotOlderThan")
    };
    eventually("a drift check list of widgets", || server.requests().iter().any(drift_check));
    let check = server.requests().into_iter().find(drift_check).unwrap();
    assert_eq!(check.header("accept"), Some(METADATA_LIST_ACCEPT));
    assert_eq!(w.stats().relists.drift, 0, "{:?}", w.stats());
    assert_eq!(w.stats().wire_format, Some(WireFormat::Json));
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
    // Attached from the start: an error is reported once, never replayed.
    collect_until(&w, |seen| seen.last().is_some_and(|e| e == "InitDone"));
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

/// Every object of `K` on `server`, read by a watcher in `format`, by name.
fn read_all<K>(server: &FakeApiServer, format: WireFormat) -> Vec<K>
where
    K: k8s_openapi::Resource + kube_watcher::Watchable + Clone + std::fmt::Debug,
{
    let api: Api<K> = Api::all(Client::from_url(&server.url()).unwrap());
    let w = Watcher::new(api, Config::default().wire_format(format)).unwrap();
    w.store().wait_until_ready(WAIT).unwrap();
    assert_eq!(w.stats().wire_format, Some(format), "{}", K::KIND);
    assert_eq!(w.stats().errors.total(), 0, "{}: {:?}", K::KIND, w.stats().last_error);
    let mut all: Vec<K> = w.store().state().iter().map(|o| (**o).clone()).collect();
    all.sort_by_key(|o| o.meta().name.clone());
    all
}

/// The client's decode of the fake's protobuf equals its decode of the fake's JSON, for every
/// kind the fake serves by default, with objects that set zeros, nested messages, maps, bytes,
/// quantities, int-or-strings and times.
#[test]
fn every_kind_the_fake_serves_reads_the_same_over_protobuf_and_json() {
    use k8s_openapi::api::{apps::v1 as apps, batch::v1 as batch, core::v1 as core};
    let server = server();
    let template = json!({
        "metadata": {"labels": {"app": "web"}},
        "spec": {
            "containers": [{
                "name": "c", "image": "nginx:1.27", "args": ["-v"],
                "ports": [{"containerPort": 80, "protocol": "TCP"}],
                "env": [{"name": "A", "value": ""}, {"name": "B", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
                "livenessProbe": {"httpGet": {"path": "/", "port": "http"}, "periodSeconds": 10},
                "readinessProbe": {"tcpSocket": {"port": 8080}}
            }],
            "volumes": [{"name": "v", "emptyDir": {}}, {"name": "s", "secret": {"secretName": "x", "defaultMode": 420}}],
            "terminationGracePeriodSeconds": 30,
            "nodeSelector": {"disk": "ssd"},
            "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoSchedule"}]
        }
    });
    let selector = json!({"matchLabels": {"app": "web"}});
    let objects: Vec<(ResourceType, serde_json::Value)> = vec![
        (ResourceType::of::<core::Pod>(), {
            let mut p = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "apps",
                "annotations": {"a": "b"}, "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "u", "controller": true}]},
                "status": {"phase": "Running", "podIP": "10.0.0.1", "startTime": "2024-05-01T10:00:00Z",
                    "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2024-05-01T10:00:05Z"}],
                    "containerStatuses": [{"name": "c", "ready": true, "restartCount": 0, "image": "nginx:1.27", "imageID": "",
                        "state": {"running": {"startedAt": "2024-05-01T10:00:01Z"}}}]}});
            p["spec"] = template["spec"].clone();
            p
        }),
        (
            ResourceType::of::<core::ConfigMap>(),
            json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "cm", "namespace": "apps"}, "data": {"k": "v", "empty": ""}, "binaryData": {"b": "AAEC"}}),
        ),
        (
            ResourceType::of::<core::Secret>(),
            json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "s", "namespace": "apps"}, "type": "Opaque", "data": {"user": "YWRtaW4="}}),
        ),
        (
            ResourceType::of::<core::Service>(),
            json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "svc", "namespace": "apps"}, "spec": {"selector": {"app": "web"}, "clusterIP": "10.96.0.10",
            "ports": [{"name": "http", "port": 80, "targetPort": "http", "protocol": "TCP"}, {"port": 443, "targetPort": 8443}]}}),
        ),
        (
            ResourceType::of::<core::Namespace>(),
            json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": "apps"}, "spec": {"finalizers": ["kubernetes"]}}),
        ),
        (
            ResourceType::of::<core::Node>(),
            json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"},
            "spec": {"podCIDR": "10.0.0.0/24", "taints": [{"key": "k", "effect": "NoSchedule"}]},
            "status": {"capacity": {"cpu": "4", "memory": "16Gi", "pods": "110"},
                "addresses": [{"type": "InternalIP", "address": "192.168.0.2"}],
                "nodeInfo": {"kubeletVersion": "v1.34.0", "machineID": "", "systemUUID": "", "bootID": "", "kernelVersion": "",
                    "osImage": "", "containerRuntimeVersion": "", "kubeProxyVersion": "", "operatingSystem": "linux", "architecture": "amd64"}}}),
        ),
        (
            ResourceType::of::<core::Event>(),
            json!({"apiVersion": "v1", "kind": "Event",
            "metadata": {"name": "e", "namespace": "apps"}, "involvedObject": {"kind": "Pod", "name": "p", "namespace": "apps"},
            "reason": "Started", "message": "Started container c", "count": 3, "type": "Normal",
            "firstTimestamp": "2024-05-01T10:00:00Z", "eventTime": "2024-05-01T10:00:00.123456Z",
            "source": {"component": "kubelet"}}),
        ),
        (
            ResourceType::of::<core::ServiceAccount>(),
            json!({"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": "sa", "namespace": "apps"}, "automountServiceAccountToken": false, "secrets": [{"name": "t"}]}),
        ),
        (
            ResourceType::of::<core::Endpoints>(),
            json!({"apiVersion": "v1", "kind": "Endpoints",
            "metadata": {"name": "svc", "namespace": "apps"}, "subsets": [{"addresses": [{"ip": "10.0.0.1"}], "ports": [{"port": 80}]}]}),
        ),
        (
            ResourceType::of::<apps::Deployment>(),
            json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "d", "namespace": "apps"}, "spec": {"replicas": 0, "selector": selector, "template": template,
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 0}}},
            "status": {"replicas": 0, "observedGeneration": 1}}),
        ),
        (
            ResourceType::of::<apps::ReplicaSet>(),
            json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": "rs", "namespace": "apps"}, "spec": {"replicas": 2, "selector": selector, "template": template}}),
        ),
        (
            ResourceType::of::<apps::StatefulSet>(),
            json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": "ss", "namespace": "apps"}, "spec": {"serviceName": "svc", "replicas": 1, "selector": selector, "template": template,
            "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}]}}),
        ),
        (
            ResourceType::of::<apps::DaemonSet>(),
            json!({"apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": "ds", "namespace": "apps"}, "spec": {"selector": selector, "template": template}}),
        ),
        (
            ResourceType::of::<batch::Job>(),
            json!({"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "j", "namespace": "apps"}, "spec": {"backoffLimit": 6, "completions": 1, "template": {
                "metadata": {"labels": {"job": "j"}}, "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}},
            "status": {"active": 1, "startTime": "2024-05-01T10:00:00Z"}}),
        ),
    ];
    for (rt, obj) in objects {
        server.create_value(&rt, obj).unwrap_or_else(|e| panic!("{}: {e}", rt.kind));
    }
    macro_rules! same {
        ($($k:ty),*) => {$(
            let protobuf = read_all::<$k>(&server, WireFormat::Protobuf);
            assert!(!protobuf.is_empty(), "{}", <$k as k8s_openapi::Resource>::KIND);
            assert_eq!(protobuf, read_all::<$k>(&server, WireFormat::Json), "{}", <$k as k8s_openapi::Resource>::KIND);
        )*};
    }
    same!(
        core::Pod,
        core::ConfigMap,
        core::Secret,
        core::Service,
        core::Namespace,
        core::Node,
        core::Event,
        core::ServiceAccount,
        core::Endpoints,
        apps::Deployment,
        apps::ReplicaSet,
        apps::StatefulSet,
        apps::DaemonSet,
        batch::Job
    );
}

/// The status line of a GET of `path` with this `Accept`, sent by hand.
fn status_of(server: &FakeApiServer, path: &str, accept: &str) -> (String, String) {
    use std::io::{Read, Write};
    let mut conn = std::net::TcpStream::connect(server.addr()).unwrap();
    conn.set_read_timeout(Some(WAIT)).unwrap();
    write!(conn, "GET {path} HTTP/1.1\r\nHost: fake\r\nAccept: {accept}\r\nConnection: close\r\n\r\n").unwrap();
    let mut answer = Vec::new();
    conn.read_to_end(&mut answer).unwrap();
    let text = String::from_utf8_lossy(&answer);
    let status = text.lines().next().unwrap_or_default().to_owned();
    let content_type = text
        .lines()
        .find_map(|l| l.strip_prefix("Content-Type: ").or_else(|| l.strip_prefix("content-type: ")))
        .unwrap_or_default()
        .to_owned();
    (status, content_type)
}

#[test]
fn a_json_only_server_refuses_a_client_that_accepts_only_protobuf() {
    let json_only = FakeApiServer::builder().json_only(true).start();
    let (status, _) = status_of(&json_only, "/api/v1/pods", PROTOBUF);
    assert!(status.contains(" 406 "), "{status}");
    let (status, content_type) = status_of(&json_only, "/api/v1/pods", &format!("{PROTOBUF}, application/json"));
    assert!(status.contains(" 200 ") && content_type == "application/json", "{status} {content_type}");
    let speaks = FakeApiServer::start();
    let (status, content_type) = status_of(&speaks, "/api/v1/pods", PROTOBUF);
    assert!(status.contains(" 200 ") && content_type == PROTOBUF, "{status} {content_type}");
}
