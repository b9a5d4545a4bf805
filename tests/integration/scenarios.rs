//! Watcher scenarios against the fake API server, each run in every configuration
//! (`for_each_config`: page sizes 1, 2 and 500 × bookmarks on/off × list+watch / streaming list).
#![cfg(feature = "testing")]

use crate::common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::*;
use k8s_openapi::api::core::v1::Pod;
use kube_watcher::testing::{Chunking, FakeApiServer, Hold, Match, RecordedRequest, Watch410};
use kube_watcher::{Config, Event, ObjectRef, Watcher};

fn seed(server: &FakeApiServer, n: usize) {
    for i in 0..n {
        server.create(&pod("apps", &format!("p{i}"))).unwrap();
    }
}

/// Receives events (the objects kept) until `done`; panics with what was seen after `WAIT`.
fn collect_events(w: &Watcher<Pod>, label: &str, mut done: impl FnMut(&[Event<Pod>]) -> bool) -> Vec<Event<Pod>> {
    let deadline = Instant::now() + WAIT;
    let mut seen = Vec::new();
    while !done(&seen) {
        match w.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(Ok(ev)) => seen.push(ev),
            Ok(Err(e)) => panic!("{label}: unexpected error {e}; seen {:?}", names(&seen)),
            Err(e) => panic!("{label}: no more events ({e}); seen {:?}", names(&seen)),
        }
    }
    seen
}

fn names(events: &[Event<Pod>]) -> Vec<String> {
    events.iter().map(describe).collect()
}

fn is(events: &[Event<Pod>], what: &str) -> bool {
    events.iter().any(|e| describe(e) == what)
}

fn uid(p: &Pod) -> String {
    p.metadata.uid.clone().unwrap_or_default()
}

/// Waits for the (re)list to complete: the events up to and including `InitDone`.
fn synced(w: &Watcher<Pod>, label: &str) -> Vec<Event<Pod>> {
    collect_events(w, label, |s| s.last().is_some_and(|e| matches!(e, Event::InitDone)))
}

/// Makes the watcher go between two watches and holds its next watch request at a gate: a
/// marker pod proves the open stream is live (so its end is not a "very short watch"), then
/// the server ends every watch cleanly.
fn park_next_watch(server: &FakeApiServer, w: &Watcher<Pod>, label: &str, marker: &str) -> Hold {
    server.create(&pod("apps", marker)).unwrap();
    collect_events(w, label, |s| is(s, &format!("Apply({marker})")));
    let hold = server.hold(Match::Watch);
    server.end_watches();
    assert!(hold.wait_until_held(WAIT), "{label}: the watcher never came back to watch");
    hold
}

/// The requests from the `n`th on.
fn requests_after(server: &FakeApiServer, n: usize) -> Vec<RecordedRequest> {
    server.requests().into_iter().skip(n).collect()
}

fn is_relist(r: &RecordedRequest) -> bool {
    (!r.watch && r.method == "GET") || r.query_param("sendInitialEvents") == Some("true")
}

#[test]
fn a_relist_after_410_reports_the_deletes_missed_while_away() {
    for mode in [Watch410::InStream, Watch410::Http] {
        for_each_config(|label, config| {
            let label = &format!("{label} watch_410={mode:?}");
            let server = FakeApiServer::builder().bookmark_interval(ms(100)).watch_410(mode).start();
            seed(&server, 5);
            let w = Watcher::new(pods(&server), config).unwrap();
            synced(&w, label);
            let hold = park_next_watch(&server, &w, label, "marker");
            let before = server.requests().len();
            server.delete::<Pod>(Some("apps"), "p1").unwrap();
            server.create(&pod("apps", "p9")).unwrap();
            server.compact();
            hold.release();
            let seen = collect_events(&w, label, |s| is(s, "Delete(p1)"));
            let seen = names(&seen);
            let init = seen.iter().rposition(|e| e == "Init").unwrap_or_else(|| panic!("{label}: no relist {seen:?}"));
            let tail = &seen[init..];
            assert!(tail.iter().any(|e| e == "InitApply(p9)"), "{label}: {seen:?}");
            assert!(tail.ends_with(&["InitDone".to_string(), "Delete(p1)".to_string()]), "{label}: {seen:?}");
            store_matches_server(&w, &server);
            let after = requests_after(&server, before);
            assert!(after.iter().any(is_relist), "{label}: no relist request in {after:#?}");
            w.stop();
        });
    }
}

#[test]
fn a_new_uid_under_the_same_name_is_a_delete_then_an_init_apply() {
    for_each_config(|label, config| {
        let server = FakeApiServer::builder().bookmark_interval(ms(100)).start();
        seed(&server, 3);
        let old_uid = uid(&server.get::<Pod>(Some("apps"), "p1").unwrap());
        let w = Watcher::new(pods(&server), config).unwrap();
        synced(&w, label);
        let hold = park_next_watch(&server, &w, label, "marker");
        server.delete::<Pod>(Some("apps"), "p1").unwrap();
        let new_uid = uid(&server.create(&pod("apps", "p1")).unwrap());
        assert_ne!(old_uid, new_uid);
        server.compact();
        hold.release();
        let seen = synced(&w, label);
        let init = seen.iter().rposition(|e| matches!(e, Event::Init)).unwrap();
        let tail = &seen[init..];
        let deleted = tail.iter().position(|e| matches!(e, Event::Delete(p) if uid(p) == old_uid));
        let added = tail.iter().position(|e| matches!(e, Event::InitApply(p) if uid(p) == new_uid));
        match (deleted, added) {
            (Some(d), Some(a)) => assert!(d < a, "{label}: delete after add: {:?}", names(tail)),
            _ => panic!("{label}: missing delete or add: {:?}", names(tail)),
        }
        assert!(!tail.iter().any(|e| matches!(e, Event::Apply(p) if uid(p) == new_uid)), "{label}: not a modification");
        let stored = w.store().get(&ObjectRef::new("p1").within("apps")).unwrap();
        assert_eq!(uid(&stored), new_uid, "{label}");
        store_matches_server(&w, &server);
        w.stop();
    });
}

#[test]
fn objects_moving_across_the_label_selector_are_added_and_deleted() {
    for_each_config(|label, config| {
        let server = FakeApiServer::builder().bookmark_interval(ms(100)).start();
        server.create(&labelled(pod("apps", "in"), "tier", "front")).unwrap();
        server.create(&labelled(pod("apps", "out"), "tier", "back")).unwrap();
        let w = Watcher::new(pods(&server), config.labels("tier=front")).unwrap();
        let seen = names(&synced(&w, label));
        assert_eq!(seen, ["Init", "InitApply(in)", "InitDone"], "{label}");

        // in → out: a DELETED with the old state; out → in: an ADDED; out → out: nothing.
        server.replace(&labelled(server.get::<Pod>(Some("apps"), "in").unwrap(), "tier", "back")).unwrap();
        server.replace(&labelled(server.get::<Pod>(Some("apps"), "out").unwrap(), "tier", "front")).unwrap();
        server.replace(&labelled(server.get::<Pod>(Some("apps"), "in").unwrap(), "color", "red")).unwrap();
        server.replace(&labelled(server.get::<Pod>(Some("apps"), "out").unwrap(), "color", "blue")).unwrap();
        let seen = collect_events(&w, label, |s| s.len() == 3);
        assert_eq!(names(&seen), ["Delete(in)", "Apply(out)", "Apply(out)"], "{label}");
        if let Event::Delete(p) = &seen[0] {
            assert_eq!(p.metadata.labels.as_ref().unwrap()["tier"], "front", "{label}: the old state");
        }
        let keys: Vec<String> = w.store().state().iter().map(|p| p.metadata.name.clone().unwrap()).collect();
        assert_eq!(keys, ["out"], "{label}");
        assert!(w.try_recv().is_err(), "{label}: nothing for an object that never matched");
        w.stop();
    });
}

#[test]
fn objects_with_finalizers_stay_until_deleted() {
    for_each_config(|label, config| {
        let server = FakeApiServer::builder().bookmark_interval(ms(100)).start();
        let mut p = pod("apps", "guarded");
        p.metadata.finalizers = Some(vec!["example.com/keep".into()]);
        server.create(&p).unwrap();
        let w = Watcher::new(pods(&server), config).unwrap();
        synced(&w, label);
        let key = ObjectRef::new("guarded").within("apps");

        server.delete::<Pod>(Some("apps"), "guarded").unwrap();
        let seen = collect_events(&w, label, |s| !s.is_empty());
        assert_eq!(names(&seen), ["Apply(guarded)"], "{label}");
        let terminating = w.store().get(&key).unwrap_or_else(|| panic!("{label}: gone too early"));
        assert!(terminating.metadata.deletion_timestamp.is_some(), "{label}");

        let mut released = server.get::<Pod>(Some("apps"), "guarded").unwrap();
        released.metadata.finalizers = Some(Vec::new());
        server.replace(&released).unwrap();
        let seen = collect_events(&w, label, |s| !s.is_empty());
        assert_eq!(names(&seen), ["Delete(guarded)"], "{label}");
        assert!(w.store().get(&key).is_none(), "{label}");
        assert!(server.get::<Pod>(Some("apps"), "guarded").is_none(), "{label}");
        w.stop();
    });
}

/// Runs a fixed story and returns what a consumer saw and what the store ended with.
fn story(label: &str, config: Config, chunking: Chunking) -> (Vec<String>, Vec<String>) {
    let server = FakeApiServer::builder().bookmark_interval(ms(100)).chunking(chunking).start();
    seed(&server, 4);
    let w = Watcher::new(pods(&server), config).unwrap();
    let mut seen = names(&synced(&w, label));
    server.create(&pod("apps", "new")).unwrap();
    let mut p2 = server.get::<Pod>(Some("apps"), "p2").unwrap();
    p2.metadata.annotations = Some(BTreeMap::from([("big".to_owned(), "x".repeat(100_000))]));
    server.replace(&p2).unwrap();
    server.delete::<Pod>(Some("apps"), "p0").unwrap();
    seen.extend(names(&collect_events(&w, label, |s| is(s, "Delete(p0)"))));
    store_matches_server(&w, &server);
    let mut stored: Vec<String> = w.store().state().iter().map(|p| key(p)).collect();
    stored.sort();
    let big = w.store().get(&ObjectRef::new("p2").within("apps")).unwrap();
    assert_eq!(big.metadata.annotations.as_ref().unwrap()["big"].len(), 100_000, "{label}");
    w.stop();
    (seen, stored)
}

#[test]
fn every_chunking_of_the_watch_stream_gives_the_same_result() {
    for_each_config(|label, config| {
        let per_event = story(label, config.clone(), Chunking::PerEvent);
        for chunking in [Chunking::Coalesce, Chunking::Split] {
            let other = story(&format!("{label} chunking={chunking:?}"), config.clone(), chunking);
            assert_eq!(other, per_event, "{label} chunking={chunking:?}");
        }
    });
}

#[test]
fn a_watch_ended_by_its_timeout_resumes_without_a_relist() {
    for_each_config(|label, config| {
        let server = FakeApiServer::builder().bookmark_interval(ms(100)).start();
        seed(&server, 3);
        let w = Watcher::new(pods(&server), config.timeout(Duration::from_secs(1))).unwrap();
        synced(&w, label);
        let relists = |server: &FakeApiServer| server.requests().iter().filter(|r| is_relist(r)).count();
        let syncs = relists(&server);
        let watches = |server: &FakeApiServer| server.requests().iter().filter(|r| r.watch).count();
        let before = watches(&server);
        eventually("the watch times out and is resumed twice", || watches(&server) >= before + 2);
        server.create(&pod("apps", "after")).unwrap();
        assert_eq!(names(&collect_events(&w, label, |s| !s.is_empty())), ["Apply(after)"], "{label}");
        store_matches_server(&w, &server);
        let reqs = server.requests();
        assert_eq!(relists(&server), syncs, "{label}: no relist: {reqs:#?}");
        let resumed: Vec<&RecordedRequest> =
            reqs.iter().filter(|r| r.watch && r.query_param("sendInitialEvents").is_none()).collect();
        assert!(resumed.len() >= 2, "{label}: {reqs:#?}");
        for r in &resumed {
            assert_eq!(r.query_param("timeoutSeconds"), Some("1"), "{label}");
            assert!(r.query_param("resourceVersion").is_some_and(|rv| rv != "0"), "{label}: resumes from an RV");
        }
        w.stop();
    });
}

#[test]
fn a_watcher_closed_by_the_server_as_too_slow_catches_up() {
    for_each_config(|label, config| {
        let server = FakeApiServer::builder().bookmark_interval(ms(100)).watcher_buffer(3).start();
        seed(&server, 2);
        let w = Watcher::new(pods(&server), config).unwrap();
        synced(&w, label);
        let relists = |server: &FakeApiServer| server.requests().iter().filter(|r| is_relist(r)).count();
        let syncs = relists(&server);
        // One event first: the stream is live, so its end is not a "very short watch".
        server.create(&pod("apps", "marker")).unwrap();
        collect_events(&w, label, |s| is(s, "Apply(marker)"));
        let watches = server.requests().iter().filter(|r| r.watch).count();
        // A burst of ten changes at once is more than the watcher's buffer of three.
        server.batch(|b| {
            for i in 0..10 {
                b.create(&pod("apps", &format!("burst{i}"))).unwrap();
            }
        });
        let seen = collect_events(&w, label, |s| is(s, "Apply(burst9)"));
        let applied: Vec<String> = names(&seen).into_iter().filter(|e| e.starts_with("Apply(burst")).collect();
        let expected: Vec<String> = (0..10).map(|i| format!("Apply(burst{i})")).collect();
        assert_eq!(applied, expected, "{label}: every change once, in order");
        store_matches_server(&w, &server);
        let reqs = server.requests();
        assert!(reqs.iter().filter(|r| r.watch).count() > watches, "{label}: the slow watch was closed: {reqs:#?}");
        assert_eq!(relists(&server), syncs, "{label}: resumed from history, no relist");
        w.stop();
    });
}

#[test]
fn a_consumer_attached_late_sees_one_object_per_key() {
    for_each_config(|label, config| {
        let server = FakeApiServer::builder().bookmark_interval(ms(100)).start();
        seed(&server, 6);
        let w = Watcher::new(pods(&server), config).unwrap();
        w.store().wait_until_ready(WAIT).unwrap();
        let seen = synced(&w, label);
        let mut keys: Vec<String> = seen.iter().filter_map(|e| e.object().map(|p| key(p))).collect();
        let n = keys.len();
        keys.sort();
        keys.dedup();
        assert_eq!(keys.len(), n, "{label}: duplicate keys in {:?}", names(&seen));
        assert_eq!(n, 6, "{label}");
        w.stop();
    });
}

/// The event contract (src/event.rs): "a consumer that only reads `Apply` and `Delete`
/// (treating `InitApply` as `Apply`) misses no deletion, even across outages". A relist that
/// fails after some `InitApply` events is discarded by the store, so an object it delivered and
/// that is deleted before the next relist completes is never reported deleted.
#[test]
fn an_object_from_an_aborted_relist_that_is_deleted_meanwhile_is_reported_deleted() {
    for streaming in [false, true] {
        let label = &format!("streaming={streaming}");
        let server = FakeApiServer::builder().bookmark_interval(ms(100)).start();
        seed(&server, 2);
        let backoff = kube_watcher::Backoff { initial: ms(10), max: ms(20), ..Default::default() };
        let hold = if streaming {
            // The streaming list breaks after its first object.
            server.push_fault(Match::Watch, kube_watcher::testing::Fault::ResetAfter { events: 1 });
            server.hold_nth(Match::Watch, 1)
        } else {
            // Page one (p0) arrives, page two fails.
            server.push_fault(Match::List, kube_watcher::testing::Fault::DelayHeaders(ms(0)));
            server.push_fault(
                Match::List,
                kube_watcher::testing::Fault::Status {
                    code: 500,
                    reason: "InternalError".into(),
                    message: "etcd hiccup".into(),
                    retry_after: None,
                },
            );
            server.hold_nth(Match::List, 2)
        };
        let mut config = paged().page_size(1).backoff(backoff);
        if streaming {
            config = config.streaming_lists();
        }
        let w = Watcher::new(pods(&server), config).unwrap();
        let mut seen = Vec::new();
        let deadline = Instant::now() + WAIT;
        // The watcher's own channel attaches at the first read: read before the retry can be held
        // and released, so the consumer has been told of p0 (live or by the replay of the aborted
        // relist) and is owed its Delete. Attached only after the next relist, it would never
        // have seen p0, and no Delete would be due.
        loop {
            if let Ok(item) = w.try_recv() {
                seen.push(item.map(|e| describe(&e)).unwrap_or_else(|e| format!("Err({e})")));
            }
            if hold.wait_until_held(ms(10)) {
                break;
            }
            assert!(Instant::now() < deadline, "{label}: no retry: {seen:?}");
        }
        // While the watcher waits to retry, p0 is deleted.
        server.delete::<Pod>(Some("apps"), "p0").unwrap();
        hold.release();
        // Deletions found by a relist follow its InitDone (src/event.rs).
        let rest = collect_until(&w, |s| s.iter().any(|e| e == "Delete(p0)"));
        seen.extend(rest);
        // (Whether InitApply(p0) came live or in the replay depends on when the consumer
        // attached; the Delete is reported either way.)
        assert!(seen.iter().any(|e| e == "Delete(p0)"), "{label}: p0 was delivered and then deleted: {seen:?}");
        w.stop();
    }
}
