//! Issue 13: hostile but realistic inputs — a huge `Retry-After`, durations that overflow a
//! deadline, panicking callbacks, full channels at the end, dropped lag subscribers, a user index
//! named "namespace", recreates during aborted lists — never wedge, kill or freeze a watcher.
#![cfg(feature = "testing")]

mod common;

use std::time::Duration;

use common::*;
use kube_watcher::testing::{Fault, Match};
use kube_watcher::{Backoff, Config, Error, Watcher};

fn fast_backoff() -> Backoff {
    Backoff { initial: ms(10), max: ms(200), ..Backoff::default() }
}

fn throttled(retry_after: u32) -> Fault {
    Fault::Status {
        code: 429,
        reason: "TooManyRequests".into(),
        message: "slow down".into(),
        retry_after: Some(retry_after),
    }
}

/// A `Retry-After` of 136 years (as a header and as `details.retryAfterSeconds`) is clamped to
/// the backoff maximum: the watcher lists again at once instead of parking.
#[test]
fn a_huge_retry_after_waits_no_longer_than_the_backoff_maximum() {
    let server = server();
    create_pods(&server, 0..3);
    server.push_fault(Match::List, throttled(u32::MAX));
    let w = Watcher::new(pods(&server), Config::default().backoff(fast_backoff())).unwrap();
    w.store().wait_until_ready(WAIT).unwrap();
    assert_eq!(w.store().len(), 3);
    assert_eq!(w.stats().errors.throttled, 1);
}

/// The same through the gate shared by the namespaces of a multi-namespace watcher.
#[test]
fn a_huge_retry_after_does_not_park_every_namespace() {
    let server = server();
    create_pods(&server, 0..2);
    server.create(&pod("db", "d0")).unwrap();
    server.push_fault(Match::List, throttled(u32::MAX));
    let w = Watcher::builder(pods(&server))
        .config(Config::default().backoff(fast_backoff()))
        .namespaces(&["apps", "db"])
        .start_spread(Duration::ZERO)
        .start()
        .unwrap();
    w.store().wait_until_ready(WAIT).unwrap();
    assert_eq!(w.store().len(), 3);
}

/// `relist_interval(Duration::MAX)` and `drift_check(Duration::MAX)` mean "never"; they used to
/// overflow `Instant + Duration` on the worker thread and kill it.
#[test]
fn intervals_of_duration_max_never_come_due_and_never_panic() {
    let server = server();
    create_pods(&server, 0..2);
    let config = Config::default().relist_interval(Duration::MAX).drift_check(Duration::MAX);
    let w = Watcher::new(pods(&server), config).unwrap();
    w.store().wait_until_ready(WAIT).unwrap();
    collect_until(&w, |seen| seen.iter().any(|e| e == "InitDone"));
    server.create(&pod("apps", "late")).unwrap();
    collect_until(&w, |seen| seen.iter().any(|e| e == "Apply(late)"));
}

/// A watch timeout too large to be a deadline is refused when the watcher is built, by name.
#[test]
fn a_watch_timeout_too_large_for_a_deadline_is_a_configuration_error() {
    let server = server();
    let err = Watcher::new(pods(&server), Config::default().timeout(Duration::MAX)).unwrap_err();
    assert!(matches!(&err, Error::Config { field, .. } if &**field == "timeout"), "{err}");
}
