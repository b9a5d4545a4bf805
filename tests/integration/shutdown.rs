//! `stop()` and `Drop` end the watcher thread promptly in every state, leaking nothing.
#![cfg(feature = "testing")]

use crate::common;

use std::time::Duration;

use common::*;
use k8s_openapi::api::core::v1::Pod;
use kube_watcher::testing::{FakeApiServer, Fault, Match};
use kube_watcher::{Config, Watcher};

/// `stop()` returns once the watcher's threads have ended (it gives up joining them after 2 s):
/// then every channel it handed out is closed, so what is queued drains and the channel reads
/// disconnected, never empty. How fast it stops is measured in `examples/bench.rs`, not here.
fn assert_stops_promptly(w: &Watcher<Pod>, server: &FakeApiServer, state: &str) {
    w.stop();
    let rest = drained_after_stop(w.receiver());
    assert!(rest <= 2048, "{state}");
    assert!(w.store().wait_until_ready(ms(1)).is_err() || w.store().is_ready(), "{state}");
    eventually(&format!("{state}: the server sees the watch closed"), || server.open_watches() == 0);
    assert!(w.recv().is_none(), "{state}: the channel is closed");
}

#[test]
fn stop_interrupts_an_idle_watch() {
    let server = server();
    server.create(&pod("apps", "a")).unwrap();
    let w = Watcher::new(pods(&server), Config::default()).unwrap();
    w.store().wait_until_ready(WAIT).unwrap();
    eventually("the watch is open", || server.open_watches() == 1);
    assert_stops_promptly(&w, &server, "idle watch");
}

#[test]
fn stop_interrupts_a_stalled_list_download() {
    let server = server();
    server.push_fault(Match::List, Fault::Stall);
    let w = Watcher::new(pods(&server), paged()).unwrap();
    eventually("the list is requested", || !server.requests().is_empty());
    assert_stops_promptly(&w, &server, "list download");
}

#[test]
fn stop_interrupts_a_request_waiting_for_headers() {
    let server = server();
    server.push_fault(Match::List, Fault::StallBeforeHeaders);
    let w = Watcher::new(pods(&server), Config::default()).unwrap();
    eventually("the list is requested", || !server.requests().is_empty());
    assert_stops_promptly(&w, &server, "waiting for headers");
}

#[test]
fn stop_interrupts_a_backoff_wait() {
    let server = server();
    server.push_fault(
        Match::List,
        Fault::Status {
            code: 429,
            reason: "TooManyRequests".into(),
            message: "slow down".into(),
            retry_after: Some(600),
        },
    );
    let w = Watcher::new(pods(&server), paged()).unwrap();
    let err = w.iter().find_map(Result::err).unwrap();
    assert_eq!(err.status(), Some(429));
    assert_stops_promptly(&w, &server, "backoff");
}

#[test]
fn stop_interrupts_a_watcher_blocked_on_a_full_channel() {
    let server = server();
    let w = Watcher::builder(pods(&server)).channel_capacity(1).start().unwrap();
    // Attach as a consumer, then stop reading. A consumer that attaches after the first sync
    // gets that sync's events as a replay, in room beyond the capacity: wait for whatever room
    // the channel has to fill up, not for one event.
    assert!(w.recv_timeout(WAIT).is_ok());
    create_pods(&server, 0..20);
    eventually("the channel is full", || w.receiver().capacity().is_some_and(|room| w.receiver().len() == room));
    assert_stops_promptly(&w, &server, "blocked on the channel");
}

#[test]
fn stop_interrupts_a_wait_for_a_subscriber_still_behind_its_replay() {
    let server = server();
    create_pods(&server, 0..20);
    let w = Watcher::builder(pods(&server)).channel_capacity(1).start().unwrap();
    w.store().wait_until_ready(WAIT).unwrap();
    let unread = w.subscribe(); // 22 replayed events fill its channel; one more slot is left
    create_pods(&server, 20..23);
    eventually("the subscriber's channel is full", || unread.len() == 23);
    assert_stops_promptly(&w, &server, "blocked behind a replay");
}

#[test]
fn stop_is_idempotent_and_drop_after_stop_is_fine() {
    let server = server();
    let w = Watcher::new(pods(&server), Config::default()).unwrap();
    w.stop();
    w.stop();
    drop(w);
}

#[test]
fn dropping_a_watcher_closes_its_watch() {
    let server = server();
    let w = Watcher::new(pods(&server), Config::default()).unwrap();
    w.store().wait_until_ready(WAIT).unwrap();
    eventually("the watch is open", || server.open_watches() == 1);
    let store = w.store();
    drop(w);
    eventually("the server sees the watch closed", || server.open_watches() == 0);
    assert!(store.is_ready(), "a store outlives its watcher");
}

#[test]
fn a_stopped_watcher_tells_waiters_it_stopped() {
    let server = server();
    server.push_fault(Match::List, Fault::Stall);
    let w = Watcher::new(pods(&server), paged()).unwrap();
    let store = w.store();
    let waiter = std::thread::spawn(move || store.wait_until_ready(Duration::from_secs(600)));
    eventually("the list is requested", || !server.requests().is_empty());
    w.stop();
    let result = waiter.join().unwrap();
    assert!(matches!(result, Err(kube_watcher::Error::Stopped)), "{result:?}");
}
