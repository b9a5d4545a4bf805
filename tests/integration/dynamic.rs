//! Dynamic objects and discovery: custom resources without a Rust type, names resolved as kubectl
//! resolves them.
#![cfg(feature = "testing")]

use crate::common;

use common::*;
use kube_watcher::testing::{FakeApiServer, Fault, Match, ResourceType};
use kube_watcher::{Api, ApiResource, Client, Config, DynamicObject, Event, ObjectRef, Watcher};
use serde_json::json;

fn widgets() -> ResourceType {
    ResourceType::new("example.com", "v1", "widgets", "Widget", true).with_short_names(&["wd"])
}

fn client(server: &kube_watcher::testing::FakeApiServer) -> Client {
    Client::from_url(&server.url()).unwrap()
}

/// A server with aggregated discovery (`true`, the default) or without it, and a label.
fn discovery_servers() -> [(&'static str, FakeApiServer); 2] {
    [true, false].map(|aggregated| {
        let label = if aggregated { "aggregated" } else { "per group" };
        (label, FakeApiServer::builder().aggregated_discovery(aggregated).start())
    })
}

/// The discovery requests `server` received (the paths under `/api` and `/apis` without a
/// plural), in order.
fn discovery_requests(server: &FakeApiServer) -> Vec<String> {
    let discovery = |path: &str| {
        let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
        matches!(segments.as_slice(), ["api"] | ["apis"] | ["api", _] | ["apis", _, _])
    };
    server.requests().into_iter().map(|r| r.path).filter(|p| discovery(p)).collect()
}

#[test]
fn discovery_resolves_what_kubectl_accepts() {
    for (label, server) in discovery_servers() {
        discovery_resolves_what_kubectl_accepts_on(label, &server);
    }
}

fn discovery_resolves_what_kubectl_accepts_on(label: &str, server: &FakeApiServer) {
    server.register(widgets());
    let c = client(server);
    let cases = [
        ("pods", "", "v1", "pods", "Pod", true),
        ("po", "", "v1", "pods", "Pod", true),
        ("pod", "", "v1", "pods", "Pod", true),
        ("Pod", "", "v1", "pods", "Pod", true),
        ("nodes", "", "v1", "nodes", "Node", false),
        ("deployments.apps", "apps", "v1", "deployments", "Deployment", true),
        ("deployments.v1.apps", "apps", "v1", "deployments", "Deployment", true),
        ("deploy", "apps", "v1", "deployments", "Deployment", true),
        ("Deployment", "apps", "v1", "deployments", "Deployment", true),
        ("widgets", "example.com", "v1", "widgets", "Widget", true),
        ("widgets.example.com", "example.com", "v1", "widgets", "Widget", true),
        ("wd", "example.com", "v1", "widgets", "Widget", true),
    ];
    for (name, group, version, plural, kind, namespaced) in cases {
        let ar = c.discover(name).unwrap_or_else(|e| panic!("{label}: {name}: {e}"));
        assert_eq!(ar, ApiResource::new(group, version, kind, plural, namespaced), "{label}: {name}");
    }
}

#[test]
fn discovery_names_what_it_did_not_find() {
    for (label, server) in discovery_servers() {
        let c = client(&server);
        for name in ["gadgets", "deployments.example.com", "pods/status"] {
            let err = c.discover(name).unwrap_err();
            assert_eq!(err.status(), Some(404), "{label}: {name}: {err}");
            assert!(err.to_string().contains(&format!("{name:?}")), "{label}: {name}: {err}");
            assert!(err.to_string().contains("(plural, singular, short name or kind)"), "whole and unescaped: {err}");
        }
        // A near miss names what the user probably meant.
        let err = c.discover("deploymnets").unwrap_err().to_string();
        assert!(err.ends_with("; close matches: deployments.apps"), "{label}: {err}");
        let err = c.discover("xyzzy").unwrap_err().to_string();
        assert!(!err.contains("close matches"), "{label}: {err}");
    }
}

/// Aggregated discovery: `/apis` and `/api` describe every resource, so a name is found in two
/// requests however many groups the server has.
#[test]
fn discovery_takes_two_requests_on_a_server_with_aggregated_discovery() {
    let server = FakeApiServer::start();
    server.register(widgets());
    for g in 0..40 {
        server.register(ResourceType::new(&format!("group{g}.example.com"), "v1", "things", "Thing", true));
    }
    let c = client(&server);
    for name in ["deploy", "wd", "pods", "widgets.example.com", "things.group39.example.com", "Thing"] {
        server.clear_requests();
        c.discover(name).unwrap();
        assert_eq!(discovery_requests(&server), ["/apis", "/api"], "{name}");
    }
    let accept = server.requests()[0].header("accept").unwrap_or_default().to_owned();
    assert_eq!(accept, "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json");
}

/// An aggregated API server may answer `/apis` in the aggregated form but have no `/api`:
/// the core group is then looked up at `/api/v1` (and skipped if that is missing too).
#[test]
fn discovery_goes_on_when_api_is_missing() {
    let server = FakeApiServer::start();
    server.register(widgets());
    let not_found = |path: &str| {
        let message = "the server could not find the requested resource".to_owned();
        server.push_fault(
            Match::Path(path.into()),
            Fault::Status { code: 404, reason: "NotFound".into(), message, retry_after: None },
        );
    };
    not_found("/api");
    let c = client(&server);
    assert_eq!(c.discover("pods").unwrap().plural, "pods");
    assert_eq!(discovery_requests(&server), ["/apis", "/api", "/api/v1"]);
    server.clear_requests();
    not_found("/api");
    not_found("/api/v1");
    assert_eq!(c.discover("wd").unwrap().plural, "widgets");
    assert_eq!(discovery_requests(&server), ["/apis", "/api", "/api/v1"]);
}

/// Without aggregated discovery (servers before 1.30, or with it turned off), the per-group
/// walk: `/apis`, `/api/v1`, then the preferred version of each group until a plural matches.
#[test]
fn discovery_walks_the_groups_on_a_server_without_aggregated_discovery() {
    let server = FakeApiServer::builder().aggregated_discovery(false).start();
    server.register(widgets());
    let c = client(&server);
    c.discover("pods").unwrap();
    assert_eq!(discovery_requests(&server), ["/apis", "/api/v1"], "a core plural ends the walk");
    server.clear_requests();
    c.discover("wd").unwrap();
    let walked = discovery_requests(&server);
    assert_eq!(walked[..2], ["/apis", "/api/v1"]);
    assert!(walked.len() > 4 && walked[2..].iter().all(|p| p.starts_with("/apis/")), "{walked:?}");
    assert!(walked.contains(&"/apis/example.com/v1".to_owned()), "{walked:?}");
}

#[test]
fn dynamic_objects_of_a_discovered_custom_resource_reach_store_and_events() {
    let server = server();
    let rt = widgets();
    server.register(rt.clone());
    server.create_value(&rt, json!({"metadata": {"name": "a", "namespace": "shop"}, "spec": {"size": 1}})).unwrap();
    let ar = client(&server).discover("widgets.example.com").unwrap();
    let api: Api<DynamicObject> = Api::namespaced_with(client(&server), "shop", &ar);
    let w = Watcher::new(api, Config::default()).unwrap();
    w.store().wait_until_ready(WAIT).unwrap();
    let a = w.store().get(&ObjectRef::new("a").within("shop")).unwrap();
    assert_eq!(a.data["spec"]["size"], 1);
    assert_eq!(a.types.as_ref().map(|t| (t.api_version.as_str(), t.kind.as_str())), Some(("example.com/v1", "Widget")));

    // Attach before the change: a consumer that attaches later gets it as part of the current
    // state (an InitApply), not as an Apply, and the loop below would wait in vain.
    let events = w.receiver();
    server.create_value(&rt, json!({"metadata": {"name": "b", "namespace": "shop"}, "spec": {"size": 2}})).unwrap();
    server.create_value(&rt, json!({"metadata": {"name": "elsewhere", "namespace": "other"}})).unwrap();
    let deadline = std::time::Instant::now() + WAIT;
    let b = loop {
        match events.recv_timeout(deadline.saturating_duration_since(std::time::Instant::now())).unwrap().unwrap() {
            Event::Apply(o) => break o,
            Event::Init | Event::InitApply(_) | Event::InitDone | Event::Delete(_) => {}
        }
    };
    assert_eq!(b.metadata.name.as_deref(), Some("b"));
    assert_eq!(b.data["spec"]["size"], 2);
    assert_eq!(w.store().len(), 2, "only namespace shop");
}

#[test]
fn built_in_types_work_as_dynamic_objects_and_round_trip_through_json() {
    let server = server();
    server.create(&pod("apps", "p")).unwrap();
    let ar = client(&server).discover("po").unwrap();
    let list = Api::<DynamicObject>::all_with(client(&server), &ar).list(&Default::default()).unwrap();
    assert_eq!(list.items.len(), 1);
    let p = &list.items[0];
    assert_eq!(p.metadata.labels.as_ref().unwrap()["app"], "web");
    let again: DynamicObject = serde_json::from_value(serde_json::to_value(p).unwrap()).unwrap();
    assert_eq!(&again, p);
    let compact =
        Watcher::builder(Api::<DynamicObject>::all_with(client(&server), &ar)).compact_store().start().unwrap();
    compact.store().wait_until_ready(WAIT).unwrap();
    assert_eq!(compact.store().get(&ObjectRef::new("p").within("apps")).unwrap().metadata, p.metadata);
}
