//! Hostile but realistic inputs — a huge `Retry-After`, durations that overflow a
//! deadline, panicking callbacks, full channels at the end, dropped lag subscribers, a user index
//! named "namespace", recreates during aborted lists — never wedge, kill or freeze a watcher.
#![cfg(feature = "testing")]

use crate::common;

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
    let w = Watcher::new(pods(&server), paged().backoff(fast_backoff())).unwrap();
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

mod panics {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;
    use kube_watcher::Notice;

    /// The watcher ends at once with an error naming the callback and its message: waiters,
    /// consumers and the notices all learn it; nothing hangs until a timeout.
    fn assert_ends_with_panic(w: &Watcher<Pod>, callback: &str, message: &str) {
        let notices = w.notices();
        let rx = w.receiver().clone();
        let err = w.store().wait_until_ready(Duration::from_secs(600)).unwrap_err();
        let expected = format!("{callback} panicked: {message}");
        assert!(matches!(&err, Error::Panicked { .. }), "{err}");
        assert!(err.to_string().starts_with(&expected), "{err}");
        assert!(err.is_terminal());
        let last = rx.iter().last().expect("the channel carries the error");
        assert!(matches!(&last, Err(e) if e.to_string().starts_with(&expected)), "{last:?}");
        let gave_up = notices.try_iter().find_map(|n| match n {
            Notice::GaveUp { error } => Some(error),
            _ => None,
        });
        assert!(gave_up.is_some_and(|e| e.to_string().starts_with(&expected)));
    }

    #[test]
    fn a_panicking_transform_ends_the_watcher_with_a_named_error() {
        let server = server();
        create_pods(&server, 0..2);
        let w = Watcher::builder(pods(&server)).transform(|_: &mut Pod| panic!("boom")).start().unwrap();
        assert_ends_with_panic(&w, "transform", "boom");
    }

    #[test]
    fn a_panicking_index_function_is_named_with_its_index() {
        let server = server();
        create_pods(&server, 0..2);
        let w = Watcher::builder(pods(&server)).index("node", |_: &Pod| panic!("no node")).start().unwrap();
        assert_ends_with_panic(&w, "index \"node\"", "no node");
    }

    #[test]
    fn a_panicking_predicate_ends_the_watcher_after_the_sync() {
        let server = server();
        create_pods(&server, 0..1);
        let w = Watcher::builder(pods(&server)).predicate(|_: &Pod, _: &Pod| panic!("bad predicate")).start().unwrap();
        w.store().wait_until_ready(WAIT).unwrap();
        let rx = w.receiver().clone();
        server.replace(&labelled(pod("apps", "p0"), "v", "2")).unwrap();
        let last = rx.iter().last().expect("events, then the error");
        assert!(matches!(&last, Err(Error::Panicked { callback, .. }) if &**callback == "predicate"), "{last:?}");
    }

    /// Callbacks run outside the hub lock: one that asks for stats or subscribes does not
    /// deadlock the watcher.
    #[test]
    fn callbacks_may_call_back_into_the_watcher() {
        let server = server();
        create_pods(&server, 0..3);
        let slot: std::sync::Arc<std::sync::OnceLock<std::sync::Weak<Watcher<Pod>>>> = Default::default();
        let (in_index, in_predicate) = (slot.clone(), slot.clone());
        let w = std::sync::Arc::new(
            Watcher::builder(pods(&server))
                .index("calls-back", move |_: &Pod| {
                    if let Some(w) = in_index.get().and_then(std::sync::Weak::upgrade) {
                        let _ = w.stats();
                        drop(w.subscribe());
                    }
                    Vec::new()
                })
                .predicate(move |_: &Pod, _: &Pod| {
                    if let Some(w) = in_predicate.get().and_then(std::sync::Weak::upgrade) {
                        let _ = w.stats();
                    }
                    true
                })
                .start()
                .unwrap(),
        );
        slot.set(std::sync::Arc::downgrade(&w)).unwrap();
        w.store().wait_until_ready(WAIT).unwrap();
        // Attached before the change: attached after it, a fast watcher has already applied it,
        // and the consumer's replay of the state carries it as an `InitApply`.
        let _ = w.receiver();
        server.replace(&labelled(pod("apps", "p1"), "v", "2")).unwrap();
        collect_until(&w, |seen| seen.iter().any(|e| e == "Apply(p1)"));
    }
}

mod endings {
    use super::*;
    use kube_watcher::SlowConsumer;

    fn forbidden() -> Fault {
        Fault::Status { code: 403, reason: "Forbidden".into(), message: "no".into(), retry_after: None }
    }

    /// A consumer whose channel is full when the watcher gives up still gets
    /// the terminal error, after what was queued.
    #[test]
    fn the_terminal_error_reaches_a_consumer_whose_channel_was_full() {
        let server = server();
        for _ in 0..3 {
            server.push_fault(Match::List, forbidden());
        }
        let w = Watcher::builder(pods(&server))
            .config(paged().backoff(fast_backoff()).max_retries(1))
            // Room for Init, the first 403 and the second Init: full when the watcher gives up.
            .channel_capacity(3)
            .start()
            .unwrap();
        let rx = w.receiver().clone();
        // Ended (waiters learn at once), while the consumer has not read anything yet.
        let err = w.store().wait_until_ready(WAIT).unwrap_err();
        assert!(matches!(err, Error::GaveUp { .. }), "{err}");
        let items: Vec<String> =
            rx.iter().map(|i| i.map(|e| describe(&e)).unwrap_or_else(|e| format!("Err({e})"))).collect();
        assert_eq!(items.len(), 4, "{items:?}");
        assert!(items[3].starts_with("Err(gave up after 2 consecutive failures"), "{items:?}");
        // A consumer attaching after the end learns why, too.
        let late = w.subscribe();
        assert!(matches!(late.recv_timeout(WAIT), Ok(Err(Error::GaveUp { .. }))));
    }

    /// A dropped lagging subscription is forgotten like a blocking one.
    #[test]
    fn a_dropped_lagging_subscription_is_forgotten() {
        let server = server();
        let w = Watcher::builder(pods(&server)).channel_capacity(2).start().unwrap();
        w.store().wait_until_ready(WAIT).unwrap();
        let lagging = w.subscribe_with(SlowConsumer::Lag);
        assert_eq!(w.stats().subscribers, 1);
        drop(lagging);
        create_pods(&server, 0..3);
        eventually("the dropped subscription is forgotten", || w.stats().subscribers == 0);
        assert_eq!(w.stats().lagged, 0, "nothing was dropped for a consumer that is gone");
    }
}

/// A slow blocking consumer must not slow a list download (an unpaged relist could
/// then be cut by the server's request deadline, again and again). Events wait for the consumer
/// once the body is read; the store is ready meanwhile.
#[test]
fn a_consumer_that_does_not_read_does_not_hold_up_an_unpaged_list() {
    let server = server();
    create_pods(&server, 0..20);
    let w = Watcher::builder(pods(&server)).config(Config::default().page_size(0)).channel_capacity(1).start().unwrap();
    let rx = w.receiver().clone(); // attached, but nobody reads yet
    w.store().wait_until_ready(WAIT).unwrap();
    assert_eq!(w.store().len(), 20);
    let first: Vec<String> = rx.iter().take(22).map(|i| describe(&i.unwrap())).collect();
    assert_eq!(first[0], "Init");
    assert_eq!(first[21], "InitDone", "every InitApply, in order, then InitDone: {first:?}");
}

/// `Config::max_line` bounds list items as well as watch lines (lists used to ignore it).
#[test]
fn max_line_bounds_list_items_too() {
    let server = server();
    let mut big = pod("apps", "big");
    big.metadata.annotations = Some([("blob".to_owned(), "x".repeat(4096))].into());
    server.create(&big).unwrap();
    let w = Watcher::new(pods(&server), Config::default().max_line(2048).backoff(fast_backoff())).unwrap();
    let seen = collect_until(&w, |s| s.iter().any(|e| e.starts_with("Err(")));
    let e = seen.last().unwrap();
    assert!(e.contains("2048"), "names the limit: {seen:?}");
    assert!(!w.store().is_ready());
}

/// A consumer that attaches while the watcher waits to retry after an error gets that error
/// after the replay of the state, until the watcher reaches the server again: its retries may
/// never report again (a refused connection is reported once per run of refusals), and such a
/// consumer would otherwise wait in silence.
mod late_consumers {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;
    use kube_watcher::{Api, Client, Event};

    #[test]
    fn a_consumer_attached_while_connections_are_refused_is_told_why() {
        let refused = refused_port();
        let client = Client::from_url(&format!("http://127.0.0.1:{}", refused.port)).unwrap();
        let w = Watcher::new(Api::<Pod>::all(client), Config::default().backoff(fast_backoff())).unwrap();
        // The first refusal is reported (and counted) before anyone reads; the next are not.
        eventually("the first refusal is counted", || w.stats().errors.total() >= 1);
        let e = loop {
            match w.recv_timeout(WAIT).expect("the error the watcher retries after, not silence") {
                Err(e) => break e,
                Ok(Event::Init) => {}
                Ok(event) => panic!("an event from a port nothing listens on: {event:?}"),
            }
        };
        assert!(e.to_string().contains("refused"), "{e}");
    }

    #[test]
    fn a_consumer_attached_after_the_watcher_reached_the_server_again_gets_no_old_error() {
        let server = server();
        create_pods(&server, 0..2);
        let unavailable =
            Fault::Status { code: 503, reason: "ServiceUnavailable".into(), message: "down".into(), retry_after: None };
        server.push_fault(Match::Any, unavailable);
        let w = Watcher::new(pods(&server), Config::default().backoff(fast_backoff())).unwrap();
        w.store().wait_until_ready(WAIT).unwrap();
        assert_eq!(w.stats().errors.server, 1, "{:?}", w.stats());
        let rx = w.receiver();
        let replay: Vec<String> = std::iter::from_fn(|| rx.try_recv().ok())
            .map(|i| i.map(|e| describe(&e)).unwrap_or_else(|e| format!("Err({e})")))
            .collect();
        assert_eq!(replay.first().map(String::as_str), Some("Init"), "{replay:?}");
        assert_eq!(replay.last().map(String::as_str), Some("InitDone"), "{replay:?}");
        assert!(!replay.iter().any(|i| i.starts_with("Err")), "an error of the past: {replay:?}");
    }
}
