//! Objects that do not decode as the watched type. One policy in paged
//! lists, streaming lists, watches and drift checks: the store keeps the last version of the
//! same object that decoded (or nothing), each undecodable version is reported once, naming the
//! object, `stats().undecodable` counts them, and none is taken for a deletion or for drift.
#![cfg(feature = "testing")]

use crate::common;

use common::*;
use k8s_openapi::api::core::v1::Pod;
use kube_watcher::testing::{Fault, Match, ResourceType};
use kube_watcher::{Config, Watcher};
use serde_json::json;

/// A pod whose `spec.containers` is a number: valid JSON, valid metadata, not a `Pod`.
fn bad_pod(name: &str) -> serde_json::Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "apps"},
        "spec": {"containers": 5}
    })
}

fn good_pod(name: &str) -> serde_json::Value {
    serde_json::to_value(pod("apps", name)).unwrap()
}

/// Whether `seen` holds a relist's `InitDone` and the marker `p9` as the store has it: an
/// `Apply` or an `InitApply` followed by `InitDone`.
fn relisted_with_p9(seen: &[String]) -> bool {
    let done = seen.iter().rposition(|e| e == "InitDone");
    let marker = seen.iter().position(|e| e.ends_with("(p9)"));
    match (done, marker) {
        (Some(d), Some(m)) => seen[m] == "Apply(p9)" || d > m,
        _ => false,
    }
}

/// The reports of skipped objects among `seen` (a test may also see, say, a watch that ended).
fn errors(seen: &[String]) -> Vec<&String> {
    seen.iter().filter(|e| e.starts_with("Err(") && e.contains(" skipped (")).collect()
}

/// Ends the open watch with a 410, so the watcher relists.
fn force_relist(server: &kube_watcher::testing::FakeApiServer) {
    server.push_fault(
        Match::Watch,
        Fault::Status { code: 410, reason: "Expired".into(), message: "too old".into(), retry_after: None },
    );
    server.end_watches();
}

#[test]
fn an_undecodable_object_is_skipped_kept_and_reported_once_in_every_list_mode() {
    let rt = ResourceType::of::<Pod>();
    for_each_config(|label, config| {
        let server = server();
        create_pods(&server, 0..2);
        server.create_value(&rt, bad_pod("bad")).unwrap();
        // The watcher's own channel is attached when first read, and a report made before that
        // is not replayed (only the store's state is): hold the first request until it is.
        let first = server.hold(Match::Any);
        let w = Watcher::new(pods(&server), config).unwrap();
        let _ = w.receiver();
        assert!(first.wait_until_held(WAIT), "{label}: the first request is made");
        first.release();

        // Ready despite it (a streaming list used to fail as a whole, forever), and told once.
        let seen = collect_until(&w, |s| s.iter().any(|e| e == "InitDone"));
        w.store().wait_until_ready(WAIT).unwrap();
        assert_eq!(w.store().len(), 2, "{label}");
        assert_eq!(errors(&seen).len(), 1, "{label}: {seen:?}");
        assert!(errors(&seen)[0].contains("apps/bad"), "{label}: names the object: {seen:?}");
        assert_eq!(w.stats().undecodable, 1, "{label}");

        // p1 is updated into something that does not decode: no Delete, the old version stays.
        server.replace_value(&rt, bad_pod("p1")).unwrap();
        let seen = collect_until(&w, |s| s.iter().any(|e| e.starts_with("Err(") && e.contains("apps/p1")));
        assert!(seen.iter().all(|e| !e.starts_with("Delete")), "{label}: {seen:?}");
        assert!(seen.last().unwrap().contains("apps/p1"), "{label}: {seen:?}");
        assert_eq!(w.stats().undecodable, 2, "{label}");
        assert!(w.store().get(&kube_watcher::ObjectRef::new("p1").within("apps")).is_some(), "{label}");

        // A relist meets both again: no phantom Delete, no second report, nothing lost.
        let relists = w.stats().relists.total();
        force_relist(&server);
        server.create(&pod("apps", "p9")).unwrap(); // a marker after the relist
        let seen = collect_until(&w, relisted_with_p9);
        assert!(w.stats().relists.total() > relists, "{label}: relisted");
        assert!(seen.iter().all(|e| !e.starts_with("Delete")) && errors(&seen).is_empty(), "{label}: {seen:?}");
        assert_eq!(w.store().len(), 3, "{label}");
        assert_eq!(w.stats().undecodable, 2, "{label}");

        // The server deletes the undecodable p1: the version the consumer has is deleted.
        server.delete::<Pod>(Some("apps"), "p1").unwrap();
        collect_until(&w, |s| s.iter().any(|e| e == "Delete(p1)"));
        assert_eq!(w.stats().undecodable, 1, "{label}");

        // `bad` becomes a Pod: it arrives, and nothing is skipped any more.
        server.replace_value(&rt, good_pod("bad")).unwrap();
        collect_until(&w, |s| s.iter().any(|e| e == "Apply(bad)"));
        assert_eq!(w.stats().undecodable, 0, "{label}");
        store_matches_server(&w, &server);
        assert_eq!(w.stats().errors.decode, 2, "{label}: one report per undecodable version");
    });
}

/// A drift check sees undecodable objects on the server: neither one the store never held nor
/// one it holds at an older version is drift, so there is no relist loop.
#[test]
fn undecodable_objects_are_not_drift() {
    let rt = ResourceType::of::<Pod>();
    let server = server();
    create_pods(&server, 0..2);
    server.create_value(&rt, bad_pod("bad")).unwrap();
    let w = Watcher::new(pods(&server), paged().drift_check(std::time::Duration::from_secs(1))).unwrap();
    w.store().wait_until_ready(WAIT).unwrap();
    server.replace_value(&rt, bad_pod("p1")).unwrap();
    eventually("p1 is skipped", || w.stats().undecodable == 2);
    let checks = w.stats().drift_checks;
    eventually("two more drift checks", || w.stats().drift_checks >= checks + 2);
    let stats = w.stats();
    assert_eq!(stats.relists.drift, 0, "{stats:?}");
    assert_eq!(stats.relists.total(), 1, "{stats:?}");
}

/// An object replaced (new uid) by one that does not decode: the old incarnation is gone from
/// the server, so it is reported deleted; the new one is skipped.
#[test]
fn a_recreate_into_something_undecodable_deletes_the_old_incarnation() {
    let rt = ResourceType::of::<Pod>();
    let server = server();
    create_pods(&server, 0..2);
    let w = Watcher::new(pods(&server), Config::default()).unwrap();
    collect_until(&w, |s| s.iter().any(|e| e == "InitDone"));
    // The DELETED event is lost (as through a buggy proxy): only the new p1 arrives.
    server.push_fault(Match::Watch, Fault::DropEvents { events: 1 });
    server.end_watches();
    eventually("the lossy watch is open", || server.pending_faults() == 0);
    server.delete::<Pod>(Some("apps"), "p1").unwrap();
    server.create_value(&rt, bad_pod("p1")).unwrap();
    let seen = collect_until(&w, |s| s.iter().any(|e| e.starts_with("Err(") && e.contains("apps/p1")));
    assert_eq!(seen.iter().filter(|e| *e == "Delete(p1)").count(), 1, "{seen:?}");
    assert_eq!(w.store().len(), 1);
}

/// In compact store mode too.
#[test]
fn a_compact_store_keeps_the_last_decodable_version() {
    let rt = ResourceType::of::<Pod>();
    let server = server();
    create_pods(&server, 0..2);
    let w = Watcher::builder(pods(&server)).compact_store().start().unwrap();
    collect_until(&w, |s| s.iter().any(|e| e == "InitDone"));
    server.replace_value(&rt, bad_pod("p1")).unwrap();
    let seen = collect_until(&w, |s| s.iter().any(|e| e.starts_with("Err(") && e.contains("apps/p1")));
    assert!(seen.iter().all(|e| !e.starts_with("Delete")), "{seen:?}");
    force_relist(&server);
    server.create(&pod("apps", "p9")).unwrap();
    let seen = collect_until(&w, relisted_with_p9);
    assert!(seen.iter().all(|e| !e.starts_with("Delete")) && errors(&seen).is_empty(), "{seen:?}");
    assert_eq!(w.store().len(), 3);
    assert!(w.store().get(&kube_watcher::ObjectRef::new("p1").within("apps")).is_some());
}

/// An ADDED or MODIFIED event without `metadata.name` cannot be stored: it is reported, not
/// delivered as an `Apply` the store does not hold, and the watch goes on.
#[test]
fn a_nameless_object_is_reported_not_delivered() {
    let server = server();
    create_pods(&server, 0..1);
    let w = Watcher::new(pods(&server), Config::default()).unwrap();
    collect_until(&w, |s| s.iter().any(|e| e == "InitDone"));
    let rv = server.resource_version();
    server.push_fault(
        Match::Watch,
        Fault::Line(format!(
            r#"{{"type":"ADDED","object":{{"apiVersion":"v1","kind":"Pod","metadata":{{"namespace":"apps","resourceVersion":"{rv}"}}}}}}"#
        )),
    );
    server.end_watches();
    server.create(&pod("apps", "p9")).unwrap();
    let seen = collect_until(&w, |s| s.iter().any(|e| e == "Apply(p9)"));
    assert_eq!(errors(&seen).len(), 1, "{seen:?}");
    assert!(errors(&seen)[0].contains("metadata.name"), "{seen:?}");
    assert!(seen.iter().all(|e| e == "Apply(p9)" || e.starts_with("Err(")), "no Apply of it: {seen:?}");
    assert_eq!(w.store().len(), 2);
}
