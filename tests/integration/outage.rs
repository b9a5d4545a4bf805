//! After an outage: the watcher is fresh again as soon as the server answers, whatever the
//! outage built up (docs/protocol.md §6.10), against the fake server.
#![cfg(feature = "testing")]

use crate::common;

use std::time::Duration;

use common::*;
use k8s_openapi::api::core::v1::Pod;
use kube_watcher::testing::{Fault, Match};
use kube_watcher::{Backoff, Config, Notice, RelistReason, Watcher};

/// A backoff whose first step is a millisecond and whose second is an hour: a failure that
/// waits a second step never ends within a test's `WAIT`.
fn cliff() -> Backoff {
    Backoff { initial: ms(1), factor: 1e7, max: Duration::from_secs(3600), ..Backoff::default() }
}

/// The watch breaks (a failure: the backoff takes its step), and when the watcher comes back
/// the server has compacted past its version: a 410. That answer relists at once, not after
/// the hour the next step of the backoff would wait.
#[test]
fn the_relist_after_a_410_that_follows_a_failure_goes_out_at_once() {
    let server = server();
    create_pods(&server, 0..3);
    server.push_fault(Match::Watch, Fault::ResetAfter { events: 0 });
    let back = server.hold_nth(Match::Watch, 1);
    // A list, then the watch that breaks (a streaming list would be the first watch).
    let w = Watcher::new(pods(&server), paged().backoff(cliff())).unwrap();
    let notices = w.notices();
    w.store().wait_until_ready(WAIT).unwrap();
    assert!(back.wait_until_held(WAIT), "the watch after the broken one");
    server.delete::<Pod>(Some("apps"), "p1").unwrap();
    server.compact();
    back.release();
    let seen = notices_until(&notices, |n| matches!(n, Notice::Synced { reason: RelistReason::Expired, .. }));
    assert!(seen.iter().any(|n| matches!(n, Notice::Reconnecting { .. })), "{seen:?}");
    store_matches_server(&w, &server);
}

/// The server goes away (its port refuses connections) while changes go on, and comes back
/// on the same port with its history compacted past the watcher's version. However far the
/// outage raised the backoff (its second step is an hour here), a refused connection is
/// retried within the first step, so the watcher reaches the server as soon as it listens, and
/// the 410 it gets relists at once. The store says it is stale from the moment the watch broke
/// until the relist completes, and the notices say so in order.
#[test]
fn a_server_back_on_its_port_is_reached_at_once_and_the_store_is_fresh_again() {
    let server = server();
    create_pods(&server, 0..3);
    let mut relay = Relay::to(server.addr());
    let api = kube_watcher::Api::<Pod>::all(kube_watcher::Client::from_url(&relay.url()).unwrap());
    let backoff = Backoff { initial: ms(50), factor: 1e5, max: Duration::from_secs(3600), ..Backoff::default() };
    let w = Watcher::new(api, Config::default().backoff(backoff)).unwrap();
    let (notices, store) = (w.notices(), w.store());
    store.wait_until_ready(WAIT).unwrap();
    eventually("the watch is open", || server.open_watches() == 1);
    assert_eq!(store.stale_since(), None, "in step");

    relay.stop();
    let seen = notices_until(&notices, |n| matches!(n, Notice::Stale { .. }));
    assert!(store.stale_since().is_some(), "stale once the watch broke: {seen:?}");
    // While it is down: changes the watcher cannot see, and the history it would resume from
    // goes. Then a while for the backoff to grow, as an outage does.
    server.delete::<Pod>(Some("apps"), "p1").unwrap();
    server.create(&pod("apps", "while-down")).unwrap();
    server.compact();
    std::thread::sleep(ms(300));
    assert!(store.stale_since().is_some());
    relay.start();

    let seen = notices_until(&notices, |n| matches!(n, Notice::Fresh { .. }));
    let order: Vec<&str> = seen
        .iter()
        .filter_map(|n| match n {
            Notice::Connected => Some("connected"),
            Notice::Relisting { reason: RelistReason::Expired } => Some("relisting"),
            Notice::Synced { reason: RelistReason::Expired, .. } => Some("synced"),
            Notice::Fresh { .. } => Some("fresh"),
            _ => None,
        })
        .collect();
    assert_eq!(order, ["connected", "relisting", "synced", "fresh"], "{seen:?}");
    assert_eq!(store.stale_since(), None);
    store_matches_server(&w, &server);
}
