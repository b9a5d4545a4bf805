//! The watcher against the fake API server: listing, watching, resuming, relisting, errors.
#![cfg(feature = "testing")]

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use k8s_openapi::api::core::v1::Pod;
use kube_watcher::testing::{FakeApiServer, Fault, Match, StreamingLists, Watch410};
use kube_watcher::{Api, Client, Config, Error, ListParams, ObjectRef, Watcher};

#[test]
fn initial_state_then_changes_reach_store_and_events_in_every_configuration() {
    for_each_config(|label, config| {
        let server = server();
        for i in 0..5 {
            server.create(&pod("apps", &format!("p{i}"))).unwrap();
        }
        let w = Watcher::new(pods(&server), config).unwrap();
        let seen = collect_until(&w, |s| s.last().is_some_and(|e| e == "InitDone"));
        assert_eq!(seen.first().map(String::as_str), Some("Init"), "{label}: {seen:?}");
        assert_eq!(seen.iter().filter(|e| e.starts_with("InitApply")).count(), 5, "{label}: {seen:?}");
        assert_eq!(w.store().len(), 5, "{label}");

        server.create(&pod("apps", "new")).unwrap();
        let mut changed = server.get::<Pod>(Some("apps"), "p1").unwrap();
        changed.metadata.labels.get_or_insert_default().insert("v".into(), "2".into());
        server.replace(&changed).unwrap();
        server.delete::<Pod>(Some("apps"), "p2").unwrap();
        let seen = collect_until(&w, |s| s.iter().any(|e| e == "Delete(p2)"));
        assert_eq!(seen, ["Apply(new)", "Apply(p1)", "Delete(p2)"], "{label}");
        store_matches_server(&w, &server);
        let p1 = w.store().get(&ObjectRef::new("p1").within("apps")).unwrap();
        assert_eq!(p1.metadata.labels.as_ref().unwrap()["v"], "2", "{label}");
        w.stop();
    });
}

#[test]
fn pages_are_requested_with_limit_and_continue_without_resource_version() {
    let server = server();
    for i in 0..5 {
        server.create(&pod("apps", &format!("p{i}"))).unwrap();
    }
    let w = Watcher::new(pods(&server), paged().page_size(2)).unwrap();
    w.store().wait_until_ready(WAIT).unwrap();
    let lists: Vec<_> = server.requests().into_iter().filter(|r| !r.watch && r.method == "GET").collect();
    assert_eq!(lists.len(), 3, "{lists:#?}");
    assert!(lists.iter().all(|r| r.query_param("limit") == Some("2")));
    assert_eq!(lists[0].query_param("continue"), None);
    assert!(
        lists[1..].iter().all(|r| r.query_param("continue").is_some() && r.query_param("resourceVersion").is_none())
    );
    eventually("a watch follows the list", || server.requests().iter().any(|r| r.watch));
    let watch = server.requests().into_iter().find(|r| r.watch).unwrap();
    assert_eq!(watch.query_param("allowWatchBookmarks"), Some("true"));
    let timeout: u64 = watch.query_param("timeoutSeconds").unwrap().parse().unwrap();
    assert!((60..90).contains(&timeout), "default timeout {timeout}");
}

#[test]
fn a_late_consumer_first_gets_the_current_state() {
    let server = server();
    for i in 0..3 {
        server.create(&pod("apps", &format!("p{i}"))).unwrap();
    }
    let w = Watcher::new(pods(&server), Config::default()).unwrap();
    w.store().wait_until_ready(WAIT).unwrap();
    server.create(&pod("apps", "p3")).unwrap();
    eventually("the store sees p3", || w.store().len() == 4);
    let seen = collect_until(&w, |s| s.last().is_some_and(|e| e == "InitDone"));
    assert_eq!(seen.len(), 6, "Init, four InitApply, InitDone: {seen:?}");
    server.create(&pod("apps", "p4")).unwrap();
    assert_eq!(collect_until(&w, |s| !s.is_empty()), ["Apply(p4)"]);
}

#[test]
fn a_store_only_watcher_never_blocks_on_its_channel() {
    let server = server();
    let w = Watcher::builder(pods(&server)).channel_capacity(1).start().unwrap();
    let store = w.store();
    store.wait_until_ready(WAIT).unwrap();
    for i in 0..40 {
        server.create(&pod("apps", &format!("p{i}"))).unwrap();
    }
    eventually("the store holds all 40 pods", || store.len() == 40);
    assert_eq!(w.stats().queued, 0, "nothing is buffered for a consumer that never came");
}

#[test]
fn a_large_late_replay_goes_through_a_small_channel() {
    let server = server();
    for i in 0..30 {
        server.create(&pod("apps", &format!("p{i}"))).unwrap();
    }
    let w = Watcher::builder(pods(&server)).channel_capacity(2).start().unwrap();
    w.store().wait_until_ready(WAIT).unwrap();
    let seen = collect_until(&w, |s| s.last().is_some_and(|e| e == "InitDone"));
    assert_eq!(seen.len(), 32, "{seen:?}");
    server.create(&pod("apps", "late")).unwrap();
    assert_eq!(collect_until(&w, |s| !s.is_empty()), ["Apply(late)"]);
}

#[test]
fn a_watch_broken_during_an_outage_relists_and_reports_missed_deletes() {
    for mode in [Watch410::InStream, Watch410::Http] {
        let server = FakeApiServer::builder().bookmark_interval(ms(100)).watch_410(mode).start();
        for i in 0..3 {
            server.create(&pod("apps", &format!("p{i}"))).unwrap();
        }
        // The first watch stalls (socket open, no bytes): the outage.
        server.push_fault(Match::Watch, Fault::Stall);
        let config = paged().timeout(Duration::from_secs(1)).stall_timeout(Duration::from_secs(2));
        let w = Watcher::new(pods(&server), config).unwrap();
        collect_until(&w, |s| s.last().is_some_and(|e| e == "InitDone"));
        eventually("the stalled watch is requested", || server.requests().iter().any(|r| r.watch));
        server.delete::<Pod>(Some("apps"), "p1").unwrap();
        server.create(&pod("apps", "p9")).unwrap();
        server.compact();
        // The stall is detected, the re-watch from the old RV gets 410, the relist tells us.
        let seen = collect_until(&w, |s| s.iter().any(|e| e == "Delete(p1)"));
        let tail: Vec<&str> = seen.iter().map(String::as_str).filter(|e| !e.starts_with("Err(")).collect();
        assert!(tail.ends_with(&["InitDone", "Delete(p1)"]), "{mode:?}: {seen:?}");
        assert!(seen.iter().any(|e| e == "InitApply(p9)"), "{mode:?}: {seen:?}");
        assert!(seen.iter().any(|e| e.starts_with("Err(") && e.contains("no data")), "the stall is reported: {seen:?}");
        store_matches_server(&w, &server);
        let relist = server.requests().into_iter().filter(|r| !r.watch).nth(1).expect("a relist");
        assert!(relist.query_param("resourceVersion").is_some(), "relist not older than the last RV: {relist:?}");
        assert_eq!(relist.query_param("limit"), None, "{relist:?}");
    }
}

#[test]
fn a_clean_end_rewatches_from_the_last_resource_version_without_relisting() {
    let server = server();
    server.create(&pod("apps", "a")).unwrap();
    server.push_fault(Match::Watch, Fault::CloseAfter { events: 1 });
    let w = Watcher::new(pods(&server), paged()).unwrap();
    w.store().wait_until_ready(WAIT).unwrap();
    server.create(&pod("apps", "b")).unwrap(); // delivered, then the stream ends
    eventually("a second watch", || server.requests().iter().filter(|r| r.watch).count() >= 2);
    server.create(&pod("apps", "c")).unwrap();
    store_matches_server(&w, &server);
    let reqs = server.requests();
    assert_eq!(reqs.iter().filter(|r| !r.watch).count(), 1, "no relist: {reqs:#?}");
    let b_rv = server.get::<Pod>(Some("apps"), "b").unwrap().metadata.resource_version.unwrap();
    let second = reqs.iter().filter(|r| r.watch).nth(1).unwrap();
    assert_eq!(second.query_param("resourceVersion"), Some(b_rv.as_str()));
}

/// The watch follows the versions the server sent, whatever a transform makes of the objects'.
#[test]
fn a_transform_that_rewrites_versions_leaves_the_watch_on_the_servers() {
    let server = server();
    server.create(&pod("apps", "a")).unwrap();
    server.push_fault(Match::Watch, Fault::CloseAfter { events: 1 });
    let w = Watcher::builder(pods(&server))
        .config(paged())
        .transform(|p: &mut Pod| p.metadata.resource_version = Some("mine".into()))
        .start()
        .unwrap();
    w.store().wait_until_ready(WAIT).unwrap();
    server.create(&pod("apps", "b")).unwrap(); // delivered, then the stream ends
    eventually("a second watch", || server.requests().iter().filter(|r| r.watch).count() >= 2);
    let b_rv = server.get::<Pod>(Some("apps"), "b").unwrap().metadata.resource_version.unwrap();
    let second = server.requests().into_iter().filter(|r| r.watch).nth(1).unwrap();
    assert_eq!(second.query_param("resourceVersion"), Some(b_rv.as_str()));
    assert_eq!(w.store().resource_version(), Some(b_rv));
}

#[test]
fn a_reset_mid_stream_is_reported_and_resumed_without_relisting() {
    let server = server();
    server.push_fault(Match::Watch, Fault::ResetAfter { events: 1 });
    let w = Watcher::new(pods(&server), paged()).unwrap();
    collect_until(&w, |s| s.last().is_some_and(|e| e == "InitDone"));
    server.create(&pod("apps", "a")).unwrap();
    let seen = collect_until(&w, |s| s.iter().any(|e| e.starts_with("Err(")));
    assert_eq!(seen[0], "Apply(a)");
    server.create(&pod("apps", "b")).unwrap();
    collect_until(&w, |s| s.iter().any(|e| e == "Apply(b)"));
    assert_eq!(server.requests().iter().filter(|r| !r.watch).count(), 1, "no relist");
}

#[test]
fn malformed_and_oversized_lines_are_reported_and_the_watcher_recovers() {
    for fault in [Fault::MalformedLine, Fault::OversizedLine { bytes: 17 << 20 }] {
        let server = server();
        server.push_fault(Match::Watch, fault.clone());
        let w = Watcher::new(pods(&server), paged()).unwrap();
        let seen = collect_until(&w, |s| s.iter().any(|e| e.starts_with("Err(")));
        let err = seen.iter().find(|e| e.starts_with("Err(")).unwrap();
        assert!(err.contains("decode watch pods"), "{fault:?}: {err}");
        server.create(&pod("apps", "after")).unwrap();
        collect_until(&w, |s| s.iter().any(|e| e.contains("(after)")));
        store_matches_server(&w, &server);
    }
}

#[test]
fn an_in_stream_error_relists() {
    let server = server();
    server.create(&pod("apps", "a")).unwrap();
    server.push_fault(
        Match::Watch,
        Fault::InStreamError { code: 500, reason: "InternalError".into(), message: "etcd is sad".into() },
    );
    let w = Watcher::new(pods(&server), paged()).unwrap();
    let seen = collect_until(&w, |s| s.iter().filter(|e| *e == "InitDone").count() == 2);
    let err = seen.iter().find(|e| e.starts_with("Err(")).expect("the error is reported");
    assert!(err.contains("watch ERROR event 500 InternalError: etcd is sad"), "{err}");
}

#[test]
fn too_large_resource_version_relists_from_scratch() {
    let server = server();
    server.push_fault(Match::Watch, Fault::TooLargeResourceVersion);
    let w = Watcher::new(pods(&server), paged()).unwrap();
    collect_until(&w, |s| s.iter().filter(|e| *e == "InitDone").count() == 2);
    let lists: Vec<_> = server.requests().into_iter().filter(|r| !r.watch).collect();
    assert_eq!(lists.len(), 2);
    assert_eq!(lists[1].query_param("resourceVersion"), None, "the RV was forgotten");
    assert_eq!(lists[1].query_param("limit"), Some("500"));
}

#[test]
fn an_expired_continue_token_restarts_the_list() {
    let server = server();
    for i in 0..3 {
        server.create(&pod("apps", &format!("p{i}"))).unwrap();
    }
    server.push_fault(Match::List, Fault::DelayHeaders(ms(0)));
    server.push_fault(Match::List, Fault::DelayHeaders(ms(1500))); // page 2 is held back...
    let w = Watcher::new(pods(&server), paged().page_size(1)).unwrap();
    eventually("page 2 is requested", || server.requests().iter().filter(|r| !r.watch).count() >= 2);
    // ...while its token's revision is compacted away.
    server.create(&pod("apps", "p3")).unwrap();
    server.compact();
    let seen = collect_until(&w, |s| s.last().is_some_and(|e| e == "InitDone"));
    assert_eq!(seen.iter().filter(|e| *e == "Init").count(), 2, "the list started over: {seen:?}");
    assert_eq!(w.store().len(), 4);
    let restarted = server.requests().into_iter().filter(|r| !r.watch).nth(2).unwrap();
    assert_eq!(restarted.query_param("continue"), None, "{restarted:?}");
}

#[test]
fn throttling_honours_retry_after() {
    let server = server();
    server.push_fault(
        Match::List,
        Fault::PlainText { code: 429, body: "Too many requests, please try again later.".into(), retry_after: Some(1) },
    );
    let started = Instant::now();
    let w = Watcher::new(pods(&server), paged()).unwrap();
    let seen = collect_until(&w, |s| s.last().is_some_and(|e| e == "InitDone"));
    assert!(seen.iter().any(|e| e.contains("HTTP 429 TooManyRequests: Too many requests")), "{seen:?}");
    assert!(started.elapsed() >= Duration::from_secs(1), "waited at least Retry-After");
}

#[test]
fn forbidden_is_reported_retried_and_explained_by_wait_until_ready() {
    let server = server();
    for _ in 0..50 {
        server.push_fault(
            Match::List,
            Fault::Status {
                code: 403,
                reason: "Forbidden".into(),
                message: "pods is forbidden: User \"bob\" cannot list resource \"pods\"".into(),
                retry_after: None,
            },
        );
    }
    let config = paged().backoff(kube_watcher::Backoff { initial: ms(10), max: ms(20), ..Default::default() });
    let w = Watcher::new(pods(&server), config).unwrap();
    let err = w.store().wait_until_ready(ms(300)).unwrap_err();
    assert!(err.to_string().contains("HTTP 403 Forbidden: pods is forbidden"), "{err}");
    assert_eq!(err.status(), Some(403));
    let first = w.iter().find_map(Result::err).unwrap();
    assert_eq!(first.status(), Some(403));
    assert!(!first.is_terminal());
    // Once permissions are granted (the faults run out) the watcher recovers by itself.
    w.store().wait_until_ready(WAIT).unwrap();
}

#[test]
fn max_retries_ends_the_iterator_with_a_terminal_error() {
    let server = server();
    for _ in 0..10 {
        server.push_fault(
            Match::List,
            Fault::PlainText { code: 503, body: "<html>503 Service Unavailable</html>".into(), retry_after: None },
        );
    }
    let config = paged().max_retries(2).backoff(kube_watcher::Backoff { initial: ms(5), ..Default::default() });
    let w = Watcher::new(pods(&server), config).unwrap();
    let items: Vec<_> = w.iter().collect();
    let last = items.last().unwrap().as_ref().unwrap_err();
    assert!(matches!(last, Error::GaveUp { attempts: 3, .. }), "{last}");
    assert!(last.is_terminal());
    assert!(last.to_string().contains("503"), "{last}");
    assert!(w.recv().is_none(), "the iterator has ended");
    assert!(w.store().wait_until_ready(ms(10)).unwrap_err().is_terminal());
}

#[test]
fn label_selectors_filter_and_an_object_leaving_the_selection_is_deleted() {
    let server = server();
    server.create(&labelled(pod("apps", "in"), "tier", "front")).unwrap();
    server.create(&labelled(pod("apps", "out"), "tier", "back")).unwrap();
    let w = Watcher::new(pods(&server), Config::default().labels("tier=front")).unwrap();
    w.store().wait_until_ready(WAIT).unwrap();
    assert_eq!(w.store().len(), 1);
    collect_until(&w, |s| s.last().is_some_and(|e| e == "InitDone"));
    let moved = labelled(server.get::<Pod>(Some("apps"), "in").unwrap(), "tier", "back");
    server.replace(&moved).unwrap();
    assert_eq!(collect_until(&w, |s| !s.is_empty()), ["Delete(in)"]);
    assert!(w.store().is_empty());
    let req = &server.requests()[0];
    assert_eq!(req.query_param("labelSelector"), Some("tier=front"));
}

#[test]
fn namespaced_watchers_see_only_their_namespace() {
    let server = server();
    server.create(&pod("apps", "a")).unwrap();
    server.create(&pod("other", "b")).unwrap();
    let api: Api<Pod> = Api::namespaced(Client::from_url(&server.url()).unwrap(), "apps");
    let w = Watcher::new(api, Config::default()).unwrap();
    w.store().wait_until_ready(WAIT).unwrap();
    assert_eq!(w.store().len(), 1);
    assert!(server.requests()[0].path.ends_with("/api/v1/namespaces/apps/pods"));
}

#[test]
fn a_transform_runs_before_the_store_and_the_events() {
    let server = server();
    server.create(&pod("apps", "a")).unwrap();
    let w = Watcher::builder(pods(&server))
        .transform(|p: &mut Pod| {
            p.metadata.labels = None;
            p.metadata.annotations.get_or_insert_default().insert("seen".into(), "yes".into());
        })
        .start()
        .unwrap();
    w.store().wait_until_ready(WAIT).unwrap();
    let a = w.store().get(&ObjectRef::new("a").within("apps")).unwrap();
    assert!(a.metadata.labels.is_none());
    assert_eq!(a.metadata.annotations.as_ref().unwrap()["seen"], "yes");
}

#[test]
fn events_and_the_store_share_one_decoded_object() {
    let server = server();
    let w = Watcher::new(pods(&server), Config::default()).unwrap();
    collect_until(&w, |s| s.last().is_some_and(|e| e == "InitDone"));
    server.create(&pod("apps", "a")).unwrap();
    let ev = w.recv_timeout(WAIT).unwrap().unwrap();
    let from_store = w.store().get(&ObjectRef::new("a").within("apps")).unwrap();
    assert!(std::sync::Arc::ptr_eq(ev.object().unwrap(), &from_store));
}

mod streaming {
    use super::*;

    fn watcher(mode: StreamingLists) -> (FakeApiServer, Watcher<Pod>) {
        let server = FakeApiServer::builder().bookmark_interval(ms(100)).streaming_lists(mode).start();
        for i in 0..3 {
            server.create(&pod("apps", &format!("p{i}"))).unwrap();
        }
        let w = Watcher::new(pods(&server), Config::default().streaming_lists()).unwrap();
        (server, w)
    }

    #[test]
    fn a_supported_streaming_list_needs_no_list_request() {
        let (server, w) = watcher(StreamingLists::Supported);
        let seen = collect_until(&w, |s| s.last().is_some_and(|e| e == "InitDone"));
        assert_eq!(seen.len(), 5, "{seen:?}");
        server.create(&pod("apps", "p3")).unwrap();
        collect_until(&w, |s| s.iter().any(|e| e == "Apply(p3)"));
        let reqs = server.requests();
        assert!(reqs.iter().all(|r| r.watch), "{reqs:#?}");
        assert_eq!(reqs[0].query_param("sendInitialEvents"), Some("true"));
        assert_eq!(reqs[0].query_param("resourceVersionMatch"), Some("NotOlderThan"));
    }

    #[test]
    fn rejected_and_failing_streaming_lists_fall_back_to_list_and_watch() {
        for mode in [StreamingLists::Rejected, StreamingLists::InStreamError] {
            let (server, w) = watcher(mode);
            w.store().wait_until_ready(WAIT).unwrap();
            assert_eq!(w.store().len(), 3, "{mode:?}");
            // A later relist does not probe again. Faults reach only new requests, and the
            // watch may already be open (for a minute): end it, so the next one takes the 410.
            server.push_fault(
                Match::Watch,
                Fault::InStreamError { code: 410, reason: "Expired".into(), message: "too old".into() },
            );
            server.end_watches();
            eventually("the 410 is taken", || server.pending_faults() == 0);
            server.create(&pod("apps", "p3")).unwrap();
            store_matches_server(&w, &server);
            eventually("a relist", || server.requests().iter().filter(|r| !r.watch).count() >= 2);
            let probes = server.requests().iter().filter(|r| r.query_param("sendInitialEvents").is_some()).count();
            assert_eq!(probes, 1, "{mode:?}");
        }
    }

    #[test]
    fn an_ignored_streaming_list_is_detected_and_replaced() {
        let (server, w) = watcher(StreamingLists::Ignored);
        eventually("the streaming request", || server.requests().iter().any(|r| r.watch));
        // A MODIFIED before the end marker proves the server ignored sendInitialEvents.
        let mut p = server.get::<Pod>(Some("apps"), "p0").unwrap();
        p.metadata.annotations.get_or_insert_default().insert("x".into(), "y".into());
        server.replace(&p).unwrap();
        w.store().wait_until_ready(WAIT).unwrap();
        store_matches_server(&w, &server);
        assert!(server.requests().iter().any(|r| !r.watch), "fell back to a list");
    }
}

mod one_shot {
    use super::*;

    #[test]
    fn list_and_get_are_blocking_calls() {
        let server = server();
        for i in 0..3 {
            server.create(&pod("apps", &format!("p{i}"))).unwrap();
        }
        let api = pods(&server);
        let page = api.list(&ListParams::default().limit(2)).unwrap();
        assert_eq!(page.items.len(), 2);
        assert!(page.continue_token.is_some());
        assert!(page.resource_version.is_some());
        let api: Api<Pod> = Api::namespaced(Client::from_url(&server.url()).unwrap(), "apps");
        let p = api.get("p1").unwrap();
        assert_eq!(p.metadata.name.as_deref(), Some("p1"));
        let missing = api.get("nope").unwrap_err();
        assert_eq!(missing.status(), Some(404));
        assert!(missing.to_string().contains("get Pod \"nope\": HTTP 404 NotFound"), "{missing}");
    }

    #[test]
    fn a_truncated_list_is_an_error_not_a_partial_result() {
        let server = server();
        for i in 0..50 {
            server.create(&pod("apps", &format!("p{i}"))).unwrap();
        }
        server.push_fault(Match::List, Fault::TruncateBody);
        let err = pods(&server).list(&ListParams::default()).unwrap_err();
        assert!(matches!(err, Error::Transport { .. }), "{err}");
        assert!(err.to_string().starts_with("list pods: "), "{err}");
    }

    #[test]
    fn an_unreachable_server_is_a_transport_error() {
        let url = {
            let s = server();
            s.url()
        };
        let err = Api::<Pod>::all(Client::from_url(&url).unwrap()).list(&ListParams::default()).unwrap_err();
        assert!(matches!(err, Error::Transport { .. }), "{err}");
    }
}

/// A burst of watch events goes out in batches (one consumer wake-up per batch), in order, and
/// the end of a burst is never held back waiting for more lines: after the burst the server is
/// silent, and every event must still arrive.
#[test]
fn a_burst_of_events_arrives_whole_in_order_and_nothing_waits_for_the_next_line() {
    let server = server();
    let w = Watcher::new(pods(&server), Config::default()).unwrap();
    collect_until(&w, |s| s.last().is_some_and(|e| e == "InitDone"));
    server.batch(|b| {
        for i in 0..150 {
            b.create(&pod("apps", &format!("burst-{i:03}"))).unwrap();
        }
    });
    let seen = collect_until(&w, |s| s.len() == 150);
    let expected: Vec<String> = (0..150).map(|i| format!("Apply(burst-{i:03})")).collect();
    assert_eq!(seen, expected);
    // One more change after the burst, alone on the wire, arrives by itself too.
    server.create(&pod("apps", "after")).unwrap();
    assert_eq!(collect_until(&w, |s| !s.is_empty()), ["Apply(after)"]);
    w.stop();
}
