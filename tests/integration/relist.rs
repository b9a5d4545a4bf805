//! A relist does not decode again what did not change: an item with the live entry's uid and
//! resourceVersion shares the live object, and its `InitApply` carries that same `Arc`; what
//! changed, appeared or was recreated meanwhile is decoded, and what vanished is deleted.

use crate::common;

use std::collections::HashMap;
use std::sync::Arc;

use common::*;
use k8s_openapi::api::core::v1::Pod;
use kube_watcher::testing::{FakeApiServer, Fault, Match};
use kube_watcher::{Config, Event, Watchable, Watcher, WireFormat};

/// Makes the server answer the next watch with an in-stream 410: the watcher relists.
fn expire_the_watch(server: &FakeApiServer) {
    server.push_fault(
        Match::Watch,
        Fault::InStreamError { code: 410, reason: "Expired".into(), message: "too old resource version".into() },
    );
    server.end_watches();
}

/// The events of the next relist, by name (until its `InitDone` and the deletes after it).
fn next_relist<K: Watchable>(w: &Watcher<K>) -> (HashMap<String, Arc<K>>, Vec<String>) {
    let mut applied = HashMap::new();
    let mut deleted = Vec::new();
    let name = |o: &K| o.meta().name.clone().unwrap_or_default();
    // What went before (the error that caused the relist, too).
    while !matches!(w.recv_timeout(WAIT).expect("the relist never came"), Ok(Event::Init)) {}
    loop {
        match w.recv_timeout(WAIT).expect("the relist never ended").expect("an error during the relist") {
            Event::InitApply(o) => {
                applied.insert(name(&o), o);
            }
            Event::InitDone => break,
            other => panic!("unexpected {} during a relist", other.object().map_or("event".into(), |o| name(o))),
        }
    }
    // Deletes inferred by the relist follow `InitDone` at once.
    while let Ok(Ok(Event::Delete(o))) = w.recv_timeout(ms(300)) {
        deleted.push(name(&o));
    }
    (applied, deleted)
}

fn scenario<K: Watchable>(label: &str, server: &FakeApiServer, w: Watcher<K>, shares: bool) {
    let (first, _) = next_relist(&w);
    assert_eq!(first.len(), 4, "{label}");
    // While the watch is down: one changed, one deleted, one recreated, one new.
    let mut changed = server.get::<Pod>(Some("apps"), "p1").unwrap();
    changed.metadata.labels.get_or_insert_default().insert("v".into(), "2".into());
    server.replace(&changed).unwrap();
    server.delete::<Pod>(Some("apps"), "p2").unwrap();
    server.delete::<Pod>(Some("apps"), "p3").unwrap();
    server.create(&pod("apps", "p3")).unwrap();
    server.create(&pod("apps", "p4")).unwrap();
    // Take the events of those changes first, so the relist's own come next.
    collect_until_any(&w, 5);
    expire_the_watch(server);
    let (second, deleted) = next_relist(&w);
    let mut names: Vec<&String> = second.keys().collect();
    names.sort();
    assert_eq!(names, ["p0", "p1", "p3", "p4"], "{label}");
    assert!(deleted.is_empty(), "{label}: the deletes were already delivered as events: {deleted:?}");
    if shares {
        assert!(Arc::ptr_eq(&second["p0"], &first["p0"]), "{label}: the unchanged object is shared");
        let live = w.store().state().into_iter().find(|o| o.meta().name.as_deref() == Some("p0")).unwrap();
        assert!(Arc::ptr_eq(&live, &first["p0"]), "{label}: the store holds the same object");
    }
    assert!(!Arc::ptr_eq(&second["p1"], &first["p1"]), "{label}: a changed object is decoded again");
    assert_ne!(second["p1"].meta().resource_version, first["p1"].meta().resource_version, "{label}");
    assert_ne!(second["p3"].meta().uid, first["p3"].meta().uid, "{label}: a recreated object is new");
    store_names_match(&w, server, label);
}

/// Receives `n` events (the watch's), whatever they are.
fn collect_until_any<K: Watchable>(w: &Watcher<K>, n: usize) {
    for _ in 0..n {
        w.recv_timeout(WAIT).expect("an event").expect("not an error");
    }
}

fn store_names_match<K: Watchable>(w: &Watcher<K>, server: &FakeApiServer, label: &str) {
    let mut ours: Vec<(String, String)> = w
        .store()
        .state()
        .iter()
        .map(|o| (o.meta().name.clone().unwrap(), o.meta().resource_version.clone().unwrap()))
        .collect();
    ours.sort();
    let mut truth: Vec<(String, String)> = server
        .list::<Pod>()
        .iter()
        .map(|o| (o.metadata.name.clone().unwrap(), o.metadata.resource_version.clone().unwrap()))
        .collect();
    truth.sort();
    assert_eq!(ours, truth, "{label}");
}

fn fresh_server() -> FakeApiServer {
    let server = FakeApiServer::start();
    create_pods(&server, 0..4);
    server
}

#[test]
fn an_unchanged_object_is_shared_by_the_relist_in_every_mode() {
    let modes: [(&str, Mode, bool); 12] = [
        ("typed", |b| b, true),
        // Skipped fields change neither the uid nor the resourceVersion a relist compares.
        ("without managedFields", |b| b.without_managed_fields(), true),
        (
            "without managedFields, JSON",
            |b| b.without_managed_fields().config(Config::default().wire_format(WireFormat::Json)),
            true,
        ),
        ("compressed, without managedFields", |b| b.compressed_store().without_managed_fields(), false),
        ("typed, JSON", |b| b.config(Config::default().wire_format(WireFormat::Json)), true),
        ("transform", |b| b.transform(|p: &mut Pod| p.metadata.managed_fields = None), true),
        ("parallel_sync", |b| b.parallel_sync(2), true),
        ("namespaces", |b| b.namespaces(&["apps"]), true),
        // The compact modes share the stored bytes; their events are decoded from them.
        ("compact", |b| b.compact_store(), false),
        ("compressed", |b| b.compressed_store(), false),
        ("compact, JSON", |b| b.compact_store().config(Config::default().wire_format(WireFormat::Json)), false),
        ("compressed, JSON", |b| b.compressed_store().config(Config::default().wire_format(WireFormat::Json)), false),
    ];
    for (label, with, shares) in modes {
        let server = fresh_server();
        let w = with(Watcher::builder(pods(&server))).start().unwrap();
        scenario(label, &server, w, shares);
    }
}

#[test]
fn an_unchanged_object_is_shared_by_the_relist_of_a_metadata_watcher() {
    let server = fresh_server();
    let w = Watcher::builder(pods(&server).into_metadata()).start().unwrap();
    scenario("metadata", &server, w, true);
}

/// A transform that changes what identifies a version makes its objects never match: they are
/// decoded and transformed again, and the relist is still right.
#[test]
fn a_transform_that_rewrites_the_version_disables_sharing_safely() {
    let server = fresh_server();
    let w = Watcher::builder(pods(&server))
        .transform(|p: &mut Pod| p.metadata.resource_version = Some("mine".into()))
        .start()
        .unwrap();
    let (first, _) = next_relist(&w);
    expire_the_watch(&server);
    let (second, _) = next_relist(&w);
    assert!(!Arc::ptr_eq(&second["p0"], &first["p0"]));
    assert_eq!(second.len(), 4);
}
