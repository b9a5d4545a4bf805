//! `WatcherBuilder::parallel_sync`: list items prepared (decoded, transformed, indexed) on helper
//! threads and applied on the watcher thread in list order. Everything a consumer or a reader
//! of the store sees is the same as without it: the events in the same order, the same store,
//! the same reports of objects that do not decode, the same end on a panicking callback, the
//! same prompt stop.
#![cfg(feature = "testing")]

use crate::common;

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};
use std::thread::ThreadId;
use std::time::{Duration, Instant};

use common::*;
use k8s_openapi::api::core::v1::Pod;
use kube_watcher::testing::{FakeApiServer, Fault, Match, ResourceType};
use kube_watcher::{Config, Error, Event, Watchable, Watcher};
use serde_json::json;

/// A pod whose `spec.containers` is a number: valid JSON, valid metadata, not a `Pod`.
fn bad_pod(name: &str) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "apps"}, "spec": {"containers": 5}})
}

/// 150 pods in "apps" with three that do not decode among them (first, middle, last by
/// name), built the same way each time so that resourceVersions match between servers.
fn populated() -> FakeApiServer {
    let server = server();
    let rt = ResourceType::of::<Pod>();
    server.create_value(&rt, bad_pod("a-bad")).unwrap();
    create_pods(&server, 0..75);
    server.create_value(&rt, bad_pod("p5-bad")).unwrap();
    create_pods(&server, 75..150);
    server.create_value(&rt, bad_pod("z-bad")).unwrap();
    server.create(&pod("other", "o1")).unwrap();
    server
}

fn describe_any<K: Watchable>(item: &kube_watcher::Result<Event<K>>) -> String {
    let name = |o: &K| o.meta().name.clone().unwrap_or_default();
    match item {
        Ok(Event::Init) => "Init".into(),
        Ok(Event::InitApply(o)) => format!("InitApply({})", name(o)),
        Ok(Event::InitDone) => "InitDone".into(),
        Ok(Event::Apply(o)) => format!("Apply({})", name(o)),
        Ok(Event::Delete(o)) => format!("Delete({})", name(o)),
        // A skipped object's report quotes its bytes (a uid of the fake server's choosing): up
        // to the object's name and version is what a comparison between servers can use.
        Err(e) => format!("Err({})", e.to_string().split(" skipped (").next().unwrap_or_default()),
    }
}

fn collect<K: Watchable>(w: &Watcher<K>, mut done: impl FnMut(&[String]) -> bool) -> Vec<String> {
    let deadline = Instant::now() + WAIT;
    let mut seen = Vec::new();
    while !done(&seen) {
        match w.receiver().recv_deadline(deadline) {
            Ok(item) => seen.push(describe_any(&item)),
            Err(e) => panic!("no more events ({e}); seen so far: {seen:?}"),
        }
    }
    seen
}

/// The store: key → (resourceVersion, the label the transform sets), and the index's values.
type Contents = (BTreeMap<String, (String, String)>, Vec<(String, usize)>);

fn contents<K: Watchable>(w: &Watcher<K>) -> Contents {
    let objects = w
        .store()
        .state()
        .iter()
        .map(|o| {
            let m = o.meta();
            let label = m.labels.as_ref().and_then(|l| l.get("prepared")).cloned().unwrap_or_default();
            (
                format!("{}/{}", m.namespace.as_deref().unwrap_or(""), m.name.as_deref().unwrap_or("")),
                (m.resource_version.clone().unwrap_or_default(), label),
            )
        })
        .collect();
    (objects, w.store().index_values("first"))
}

/// What one watcher saw: the initial sync's events, the store after it, a relist's events after
/// a 410, the store after that; and the threads that prepared list items, and watch events.
#[derive(Debug, PartialEq)]
struct Seen {
    sync: Vec<String>,
    synced: Contents,
    relist: Vec<String>,
    relisted: Contents,
    undecodable: usize,
}

fn sync_and_relist(parallel: usize, compact: bool, namespaced: bool) -> (Seen, HashSet<ThreadId>, ThreadId) {
    let server = populated();
    let threads: Arc<Mutex<Vec<(String, ThreadId)>>> = Arc::default();
    let record = Arc::clone(&threads);
    let mut builder = Watcher::builder(pods(&server))
        .config(paged().page_size(7))
        .parallel_sync(parallel)
        .transform(move |p: &mut Pod| {
            let name = p.metadata.name.clone().unwrap_or_default();
            record.lock().unwrap().push((name, std::thread::current().id()));
            p.metadata.labels.get_or_insert_default().insert("prepared".into(), "yes".into());
        })
        .index("first", |p: &Pod| p.metadata.name.iter().map(|n| n[..1].to_owned()).collect());
    if compact {
        builder = builder.compact_store();
    }
    if namespaced {
        builder = builder.namespaces(&["apps", "other"]).start_spread(Duration::ZERO);
    }
    // Attach before the first list is answered: the errors it reports are not part of the
    // replay a consumer attaching later would get.
    let hold = server.hold(Match::List);
    let w = builder.start().unwrap();
    let _ = w.receiver();
    hold.release();
    let sync = collect(&w, |s| s.iter().filter(|e| *e == "InitDone").count() == if namespaced { 2 } else { 1 });
    let synced = contents(&w);

    // A watch event marks the watcher thread; then a 410 makes it relist.
    server.create(&pod("apps", "marker")).unwrap();
    collect(&w, |s| s.last().is_some_and(|e| e == "Apply(marker)"));
    let (marker_thread, listed) = {
        let threads = threads.lock().unwrap();
        let marker = threads.iter().find(|(n, _)| n == "marker").unwrap().1;
        (marker, threads.iter().filter(|(n, _)| n != "marker").map(|(_, t)| *t).collect::<HashSet<_>>())
    };
    server.push_fault(
        Match::Watch,
        Fault::Status { code: 410, reason: "Expired".into(), message: "too old".into(), retry_after: None },
    );
    server.end_watches();
    let relist = collect(&w, |s| s.last().is_some_and(|e| e == "InitDone"));
    let relisted = contents(&w);
    let undecodable = w.stats().undecodable;
    w.stop();
    (Seen { sync, synced, relist, relisted, undecodable }, listed, marker_thread)
}

#[test]
fn a_parallel_sync_and_relist_give_the_same_events_and_store_as_one_thread() {
    for compact in [false, true] {
        let (one, listed, worker) = sync_and_relist(0, compact, false);
        assert_eq!(listed, HashSet::from([worker]), "compact={compact}: one thread prepares everything");
        // The policy held: three objects skipped, each reported once, no phantom delete.
        assert_eq!(one.undecodable, 3);
        assert_eq!(one.sync.iter().filter(|e| e.starts_with("Err(")).count(), 3, "{:?}", one.sync);
        assert!(one.relist.iter().all(|e| !e.starts_with("Delete") && !e.starts_with("Err(")), "{:?}", one.relist);
        assert_eq!(one.synced.0.len(), 151);
        assert!(one.synced.0.values().all(|(_, label)| label == "yes"));
        for parallel in [1, 3] {
            let (many, listed, worker) = sync_and_relist(parallel, compact, false);
            assert_eq!(many, one, "compact={compact} parallel={parallel}");
            assert!(!listed.contains(&worker), "compact={compact} parallel={parallel}: items prepared on helpers");
        }
    }
}

#[test]
fn a_multi_namespace_watcher_shares_the_helpers_and_fills_the_same_store() {
    let (one, _, _) = sync_and_relist(0, false, true);
    let (many, listed, worker) = sync_and_relist(2, false, true);
    // The namespaces' events interleave differently from run to run; the store does not.
    assert_eq!((many.synced, many.relisted, many.undecodable), (one.synced, one.relisted, one.undecodable));
    assert!(!listed.contains(&worker));
    assert!(listed.len() <= 2, "two helpers for the whole watcher: {listed:?}");
}

#[test]
fn a_metadata_watcher_lists_in_parallel() {
    let server = populated();
    let w = Watcher::builder(pods(&server).into_metadata()).config(Config::default().page_size(7)).parallel_sync(2);
    let w = w.start().unwrap();
    let seen = collect(&w, |s| s.iter().any(|e| e == "InitDone"));
    // Metadata decodes for every object, the broken ones included.
    assert_eq!(seen.iter().filter(|e| e.starts_with("InitApply(")).count(), 154);
    assert_eq!(w.store().len(), 154);
}

#[test]
fn a_panicking_transform_or_index_on_a_helper_ends_the_watcher_naming_it() {
    let server = server();
    create_pods(&server, 0..100);
    let check = |w: Watcher<Pod>, callback: &str, message: &str| {
        let err = w.store().wait_until_ready(Duration::from_secs(600)).unwrap_err();
        assert!(matches!(&err, Error::Panicked { .. }), "{err}");
        assert!(err.to_string().starts_with(&format!("{callback} panicked: {message}")), "{err}");
        let last = w.receiver().iter().last().expect("the channel carries the error");
        assert!(matches!(&last, Err(Error::Panicked { callback: c, .. }) if &**c == callback), "{last:?}");
    };
    let w = Watcher::builder(pods(&server))
        .parallel_sync(2)
        .transform(|p: &mut Pod| assert_ne!(p.metadata.name.as_deref(), Some("p57"), "boom"))
        .start()
        .unwrap();
    check(w, "transform", "assertion");
    let w = Watcher::builder(pods(&server))
        .parallel_sync(2)
        .index("node", |p: &Pod| if p.metadata.name.as_deref() == Some("p3") { panic!("no node") } else { vec![] })
        .start()
        .unwrap();
    check(w, "index \"node\"", "no node");
}

#[test]
fn stop_in_the_middle_of_a_large_parallel_list_is_prompt_and_joins_the_helpers() {
    let server = server();
    server.push_fault(Match::List, Fault::EndlessList);
    let w = Watcher::builder(pods(&server)).parallel_sync(3).start().unwrap();
    // Items flow through the helpers (the list never ends).
    let seen = collect(&w, |s| s.len() >= 2000);
    assert!(seen[1..].iter().all(|e| e == "InitApply(endless)"), "{:?}", &seen[..3]);
    // The list never ends: `stop()` returns with every thread ended only if it cut it and
    // joined the helpers (how fast is measured in `examples/bench.rs`).
    w.stop();
    assert!(drained_after_stop(w.receiver()) <= 4096);
}

#[test]
fn an_out_of_range_setting_is_refused_by_name() {
    let server = server();
    let e = Watcher::builder(pods(&server)).parallel_sync(65).start().unwrap_err();
    assert!(matches!(&e, Error::Config { .. }), "{e}");
    assert!(e.to_string().contains("parallel_sync"), "{e}");
    let w = Watcher::builder(pods(&server)).parallel_sync(64).start().unwrap();
    w.store().wait_until_ready(WAIT).unwrap();
    w.stop();
}

/// A page cut off midway: the items read before the cut are applied, the list is abandoned
/// (what was in flight is discarded) and retried, exactly as with one thread.
#[test]
fn a_page_cut_off_midway_is_abandoned_and_retried_as_with_one_thread() {
    let run = |parallel: usize| {
        let server = populated();
        server.push_fault(Match::List, Fault::TruncateBody);
        let w = Watcher::builder(pods(&server)).config(paged().page_size(100)).parallel_sync(parallel);
        // Attach before the first list is answered (as in `sync_and_relist`): the cut page's
        // events and its error are not part of the replay a consumer attaching later gets.
        let hold = server.hold(Match::List);
        let w = w.start().unwrap();
        let _ = w.receiver();
        hold.release();
        let seen = collect(&w, |s| s.iter().any(|e| e == "InitDone"));
        let store = contents(&w);
        assert_eq!(w.stats().lists, 3, "one cut page, then two pages");
        (seen, store)
    };
    let (one, many) = (run(0), run(2));
    assert!(one.0.iter().filter(|e| *e == "Init").count() == 2, "{:?}", one.0);
    assert_eq!(many, one);
}
