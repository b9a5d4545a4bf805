//! What the store has applied reaches every consumer promptly and in order, in every store mode,
//! and every channel a watcher hands out ends with it (README "Recovery": what a consumer can
//! and cannot hold up). Each test here failed before the fix it names.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube_watcher::testing::{Chunking, FakeApiServer, Fault, Match};
use kube_watcher::{Api, Client, Config, Error, Event, Notice, SlowConsumer, Watcher};

/// The store modes a consumer must see alike.
fn modes() -> [(&'static str, Mode); 4] {
    [
        ("typed", |b| b),
        ("compact", |b| b.compact_store()),
        ("compressed", |b| b.compressed_store()),
        ("parallel", |b| b.parallel_sync(2)),
    ]
}

/// Receives until `Init…InitDone` of the first sync have gone by.
fn drain_sync(w: &Watcher<Pod>) {
    collect_until(w, |s| s.last().is_some_and(|e| e == "InitDone"));
}

/// A blank keep-alive line after an event, then silence: the event must not wait for the next
/// bytes (the stall timeout, 90 s and more by default) before it reaches the consumer. The
/// batched hand-off used to take the buffered blank line for more events to come.
#[test]
fn an_event_followed_by_a_blank_line_reaches_the_consumer_at_once() {
    // No bookmarks in the test's time: nothing but the blank line follows the event.
    let server = FakeApiServer::builder().chunking(Chunking::BlankLines).start();
    for (mode, with) in modes() {
        let w = with(Watcher::builder(pods(&server))).start().unwrap();
        drain_sync(&w);
        // `\n` after one event, `\r\n` after the next.
        for name in [format!("{mode}-1"), format!("{mode}-2")] {
            server.create(&pod("apps", &name)).unwrap();
            let seen = collect_until(&w, |s| s.iter().any(|e| e.ends_with(&format!("({name})"))));
            assert_eq!(seen.last().map(String::as_str), Some(format!("Apply({name})").as_str()), "{mode}: {seen:?}");
        }
    }
}

/// A consumer that does not read must not hold up a list in any store mode: the compact modes
/// used to wait for it in the middle of the body (which a server's request deadline then cuts,
/// again and again, so the store was never ready).
#[test]
fn a_consumer_that_does_not_read_holds_up_no_list_in_any_store_mode() {
    let server = server();
    create_pods(&server, 0..40);
    for (mode, with) in modes() {
        for (list, config) in
            [("unpaged", Config::default().page_size(0)), ("streaming", Config::default().streaming_lists())]
        {
            let w = with(Watcher::builder(pods(&server)).config(config).channel_capacity(1)).start().unwrap();
            let rx = w.receiver().clone(); // attached, but nobody reads yet
            w.store().wait_until_ready(WAIT).unwrap_or_else(|e| panic!("{mode}, {list}: {e}"));
            assert_eq!(w.store().len(), 40, "{mode}, {list}");
            let first: Vec<String> = rx.iter().take(42).map(|i| describe(&i.unwrap())).collect();
            assert_eq!(first[0], "Init", "{mode}, {list}");
            assert_eq!(first[41], "InitDone", "{mode}, {list}: every InitApply, in order: {first:?}");
            let mut names: Vec<&str> = first[1..41].iter().map(String::as_str).collect();
            names.sort_unstable();
            let mut want: Vec<String> = (0..40).map(|i| format!("InitApply(p{i})")).collect();
            want.sort_unstable();
            assert_eq!(names, want, "{mode}, {list}");
        }
    }
}

/// A lagging subscription dropped in the middle of a lag episode (its channel holding events
/// and the marker) is forgotten at the next event, and nothing more is counted as dropped for
/// it. Its queue used to pin it for good: never empty, so never tried, so never found gone.
#[test]
fn a_lagging_subscription_dropped_while_lagging_is_forgotten() {
    let server = server();
    let w = Watcher::builder(pods(&server)).channel_capacity(2).start().unwrap();
    let keeps_up = w.subscribe();
    w.store().wait_until_ready(WAIT).unwrap();
    let lagging = w.subscribe_with(SlowConsumer::Lag);
    create_pods(&server, 0..10);
    collect_from(&keeps_up, |s| s.iter().filter(|e| e.starts_with("Apply(")).count() == 10);
    assert!(w.stats().lagged > 0, "the lagging subscription lagged");
    assert_eq!(w.stats().subscribers, 2);
    drop(lagging);
    let lagged = w.stats().lagged;
    create_pods(&server, 10..12);
    collect_from(&keeps_up, |s| s.iter().filter(|e| e.starts_with("Apply(")).count() == 2);
    let stats = w.stats();
    assert_eq!(stats.subscribers, 1, "{stats:?}");
    assert_eq!(stats.lagged, lagged, "nothing dropped for a consumer that is gone");
    assert_eq!(stats.queued, 0, "{stats:?}");
}

/// A blocking subscription whose channel was full when it was dropped is not counted, nor its
/// dead events, and it holds no other consumer back during a list.
#[test]
fn a_full_blocking_subscription_that_was_dropped_is_not_counted() {
    let server = server();
    let w = Watcher::builder(pods(&server)).channel_capacity(1).start().unwrap();
    w.store().wait_until_ready(WAIT).unwrap();
    let full = w.subscribe(); // gets `Init`, `InitDone` and room for one event
    server.create(&pod("apps", "a")).unwrap();
    eventually("the subscription is full", || full.is_full());
    drop(full);
    let stats = w.stats();
    assert_eq!((stats.subscribers, stats.queued), (0, 0), "{stats:?}");
}

/// A callback that panics ends the watcher, but the events the store applied before it still
/// reach the consumer, then the panic. The batch they waited in used to be dropped.
#[test]
fn a_panicking_transform_delivers_what_was_applied_before_it() {
    let server = FakeApiServer::builder().chunking(Chunking::Coalesce).start();
    let w = Watcher::builder(pods(&server))
        .transform(|p: &mut Pod| assert_ne!(p.metadata.name.as_deref(), Some("boom"), "transform refuses boom"))
        .start()
        .unwrap();
    drain_sync(&w);
    server.batch(|b| {
        for i in 1..=5 {
            b.create(&pod("apps", &format!("p{i}"))).unwrap();
        }
        b.create(&pod("apps", "boom")).unwrap();
    });
    let seen: Vec<String> = w.iter().map(|i| i.map(|e| describe(&e)).unwrap_or_else(|e| format!("Err({e})"))).collect();
    assert_eq!(seen[..5], ["Apply(p1)", "Apply(p2)", "Apply(p3)", "Apply(p4)", "Apply(p5)"], "{seen:?}");
    assert_eq!(seen.len(), 6, "{seen:?}");
    assert!(seen[5].starts_with("Err(") && seen[5].contains("transform"), "{seen:?}");
    for i in 1..=5 {
        assert!(w.store().state().iter().any(|p| p.metadata.name.as_deref() == Some(&format!("p{i}"))));
    }
}

/// Runs `f` on another thread; panics if it has not returned within `WAIT`.
fn returns_within_wait<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = crossbeam_channel::bounded(1);
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(WAIT).unwrap_or_else(|_| panic!("{what} never returned"))
}

/// `for n in watcher.notices()` ends once the watcher has, with the handle still alive: after
/// `stop()` and after a terminal error. The control block used to hold the sender for good.
#[test]
fn the_notices_channel_ends_with_the_watcher() {
    let server = server();
    let w = Watcher::new(pods(&server), paged()).unwrap();
    w.store().wait_until_ready(WAIT).unwrap();
    let notices = w.notices();
    w.stop();
    let seen = returns_within_wait("notices after stop", move || notices.iter().collect::<Vec<_>>());
    assert!(seen.iter().any(|n| matches!(n, Notice::Synced { .. })), "{seen:?}");

    let server = FakeApiServer::start();
    for _ in 0..3 {
        server.push_fault(
            Match::List,
            Fault::Status { code: 500, reason: "InternalError".into(), message: "down".into(), retry_after: None },
        );
    }
    let fast = kube_watcher::Backoff { initial: ms(1), max: ms(5), ..kube_watcher::Backoff::default() };
    let w = Watcher::new(pods(&server), paged().max_retries(1).backoff(fast)).unwrap();
    let notices = w.notices();
    let seen = returns_within_wait("notices after giving up", move || notices.iter().collect::<Vec<_>>());
    assert!(matches!(seen.last(), Some(Notice::GaveUp { .. })), "{seen:?}");
    // The events channel and a late subscription end too.
    let events: Vec<_> = w.iter().collect();
    assert!(matches!(events.last(), Some(Err(Error::GaveUp { .. }))), "{events:?}");
    assert!(w.subscribe().iter().all(|i| i.is_err()));
}

/// The compact modes keep a reference to recently delivered objects (so that the worker, not
/// the consumer, frees them); that is bounded by bytes as well as by count, so big objects the
/// consumer let go are freed. Eight 1 MiB objects used to stay (up to 128, whatever their size).
#[test]
fn the_compact_modes_keep_no_big_objects_the_consumer_let_go() {
    let server = server();
    let cms: Api<ConfigMap> = Api::all(Client::from_url(&server.url()).unwrap());
    for mode in ["compact", "compressed"] {
        let builder = Watcher::builder(cms.clone());
        let w = if mode == "compact" { builder.compact_store() } else { builder.compressed_store() }.start().unwrap();
        w.store().wait_until_ready(WAIT).unwrap();
        let rx = w.receiver().clone();
        let mut released = Vec::new();
        for i in 0..8 {
            let name = format!("{mode}-{i}");
            let cm = ConfigMap {
                metadata: ObjectMeta {
                    name: Some(name.clone()),
                    namespace: Some("apps".into()),
                    ..ObjectMeta::default()
                },
                data: Some([("blob".to_owned(), format!("{i}").repeat(1 << 20))].into()),
                ..ConfigMap::default()
            };
            server.create(&cm).unwrap();
            loop {
                if let Event::Apply(cm) = rx.recv_timeout(WAIT).unwrap().unwrap()
                    && cm.metadata.name.as_deref() == Some(&name)
                {
                    released.push(Arc::downgrade(&cm));
                    break;
                }
            }
        }
        // The consumer let go of all of them: the watcher holds at most the last one or two.
        eventually("the watcher lets go of the big objects", || {
            released.iter().filter(|w| w.strong_count() > 0).count() <= 2
        });
        w.stop();
    }
}

/// The README's promise, measured against a server that cuts long lists (a request deadline):
/// a consumer reading far slower than the list arrives never makes the list miss the deadline,
/// in any store mode. The body is far bigger than the socket buffers, so a client that waited
/// for its consumer in the middle of it would be cut off, again and again. The deadline is half
/// the consumer's minute: a list held by its consumer misses it, while one read at the pace of a
/// loaded machine (a debug build gzips and reads 12 MB in a few seconds alone, several times
/// that beside the CPU-bound tests of this binary on two cores) makes it.
#[test]
fn a_slow_consumer_never_holds_a_list_past_the_servers_deadline() {
    const DEADLINE: Duration = Duration::from_secs(30);
    let server = FakeApiServer::builder().request_deadline(DEADLINE).start();
    // Incompressible, so that gzip does not shrink the body below the socket buffers.
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut blob = || {
        (0..512)
            .map(|_| {
                x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
                format!("{:08x}", x >> 32)
            })
            .collect::<String>()
    };
    server.batch(|b| {
        for i in 0..3000 {
            let mut p = pod("apps", &format!("p{i}"));
            p.metadata.annotations = Some([("blob".to_owned(), blob())].into());
            b.create(&p).unwrap();
        }
    });
    for (mode, with) in modes() {
        let config = Config::default().page_size(0).backoff(kube_watcher::Backoff {
            initial: ms(10),
            max: ms(50),
            ..kube_watcher::Backoff::default()
        });
        let w = with(Watcher::builder(pods(&server)).config(config).channel_capacity(16)).start().unwrap();
        let rx = w.receiver().clone();
        // About 50 events a second: the whole list would take the consumer a minute.
        let consumer = std::thread::spawn(move || {
            let mut seen = 0;
            for item in rx.iter() {
                if matches!(item, Ok(Event::InitDone)) {
                    return seen;
                }
                seen += 1;
                std::thread::sleep(ms(20));
            }
            seen
        });
        w.store().wait_until_ready(DEADLINE).unwrap_or_else(|e| panic!("{mode}: {e}"));
        assert_eq!(w.store().len(), 3000, "{mode}");
        assert_eq!(w.stats().relists.total(), 1, "{mode}: one list, never cut: {:?}", w.stats());
        w.stop();
        let _ = consumer.join();
    }
}

/// Drains `rx` without waiting: each item described, lag markers as `Lagged(n)`.
fn drain_now(rx: &crossbeam_channel::Receiver<kube_watcher::Result<Event<Pod>>>) -> Vec<String> {
    rx.try_iter()
        .map(|i| match i {
            Ok(e) => describe(&e),
            Err(Error::Lagged { dropped }) => format!("Lagged({dropped})"),
            Err(e) => format!("Err({e})"),
        })
        .collect()
}

/// A lagging consumer that subscribes in the middle of the first list (the watcher's own
/// channel does so when it is first read then) and reads its marker before the list ends gets
/// a second marker after `InitDone`, and catching up from the store then gives it every pod.
/// Its delivery state used to start outside any relist: no second marker, and 12 of 16 pods
/// missing from its picture.
#[test]
fn a_lagging_consumer_that_subscribes_mid_list_is_told_again_when_the_list_ends() {
    let server = server();
    create_pods(&server, 0..16);
    let page3 = server.hold_nth(Match::List, 2);
    let w = Watcher::builder(pods(&server)).config(paged().page_size(4)).channel_capacity(1).start().unwrap();
    assert!(page3.wait_until_held(WAIT), "the third page is asked for");
    // The list is in progress, 8 pods read: the replay ends inside it.
    let rx = w.subscribe_with(SlowConsumer::Lag);
    let page4 = server.hold(Match::List);
    page3.release(); // one more event fits, then the marker, then drops
    assert!(page4.wait_until_held(WAIT), "the fourth page is asked for");
    let mut picture: std::collections::BTreeSet<String> = Default::default();
    let mut seen = drain_now(&rx);
    assert_eq!(seen.last().map(String::as_str), Some("Lagged(1)"), "{seen:?}");
    // Catch up from the store, as the marker says: the list is not in it yet.
    picture.extend(w.store().state().iter().map(|p| key(p)));
    page4.release();
    w.store().wait_until_ready(WAIT).unwrap();
    loop {
        let item = rx.recv_timeout(WAIT).expect("the second marker");
        match item {
            Err(Error::Lagged { .. }) => {
                picture = w.store().state().iter().map(|p| key(p)).collect();
                break;
            }
            Ok(e) => {
                if let Some(p) = e.object() {
                    picture.insert(key(p));
                }
                seen.push(describe(&e));
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert!(seen.contains(&"InitDone".to_owned()), "the marker comes after InitDone: {seen:?}");
    assert_eq!(picture.len(), 16, "{picture:?}");
}

/// A consumer that subscribes after a first list was abandoned (a 410 on its second page) is
/// shown what that list delivered to the others, so the `Delete` that the next list's end
/// gives everyone for a pod deleted meanwhile is for a pod it was shown. It used to get that
/// `Delete` for a pod it had never been given.
#[test]
fn a_consumer_attached_after_an_abandoned_first_list_is_deleted_only_what_it_was_shown() {
    let server = server();
    for name in ["a", "b", "c"] {
        server.create(&pod("apps", name)).unwrap();
    }
    let page2 = server.hold_nth(Match::List, 1);
    let fast = kube_watcher::Backoff { initial: ms(1), max: ms(5), ..kube_watcher::Backoff::default() };
    let w = Watcher::new(pods(&server), paged().page_size(2).backoff(fast)).unwrap();
    let all = w.subscribe(); // there from the start
    assert!(page2.wait_until_held(WAIT), "the second page is asked for");
    // The first page was delivered (before the second was asked for). Delete one of its pods
    // and compact the history, so that the held page's continue token has expired.
    let first = collect_from(&all, |s| s.len() == 3);
    assert_eq!(first[0], "Init", "{first:?}");
    let deleted = first[1].trim_start_matches("InitApply(").trim_end_matches(')').to_owned();
    server.delete::<Pod>(Some("apps"), &deleted).unwrap();
    server.compact();
    let next_list = server.hold(Match::List);
    page2.release();
    assert!(next_list.wait_until_held(WAIT), "the list starts again");
    let late = w.subscribe();
    next_list.release();
    w.store().wait_until_ready(WAIT).unwrap();
    for (name, rx, before) in [("from the start", &all, first), ("late", &late, Vec::new())] {
        let gone = format!("Delete({deleted})");
        let events: Vec<String> = before.into_iter().chain(collect_from(rx, |s| s.contains(&gone))).collect();
        let mut shown = std::collections::BTreeSet::new();
        for e in &events {
            if let Some(n) = e.strip_prefix("InitApply(").and_then(|n| n.strip_suffix(')')) {
                shown.insert(n.to_owned());
            }
            if let Some(n) = e.strip_prefix("Delete(").and_then(|n| n.strip_suffix(')')) {
                assert!(shown.contains(n), "{name}: a Delete for {n}, never shown: {events:?}");
            }
        }
    }
}

/// A callback that panics ends the watcher; `wait_until_ready` learns it, and why, at once,
/// even while an attached consumer is not reading (the watcher then waits for that consumer to
/// hand over the events it held back). The wait used to run out its whole timeout with
/// `NotReady`, saying nothing of the panic.
#[test]
fn a_panic_reaches_wait_until_ready_while_a_consumer_is_not_reading() {
    let server = server();
    create_pods(&server, 0..20);
    server.create(&pod("apps", "zz-boom")).unwrap(); // listed last
    let list = server.hold(Match::List);
    let w = Watcher::builder(pods(&server))
        .config(Config::default().page_size(0))
        .transform(|p: &mut Pod| assert_ne!(p.metadata.name.as_deref(), Some("zz-boom"), "transform refuses zz-boom"))
        .channel_capacity(1)
        .start()
        .unwrap();
    let rx = w.receiver().clone(); // attached before the list, never read until the end
    list.release();
    match w.store().wait_until_ready(WAIT) {
        Err(e) => assert!(e.to_string().contains("transform"), "{e}"),
        Ok(()) => panic!("ready, though the transform panicked"),
    }
    // The consumer still gets what was delivered, then the panic.
    let last = rx.iter().last().expect("items");
    assert!(matches!(&last, Err(e) if e.to_string().contains("transform")), "{last:?}");
}
