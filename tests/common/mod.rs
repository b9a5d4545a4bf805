//! Helpers shared by the integration tests: objects, bounded waits, event collection.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube_watcher::testing::FakeApiServer;
use kube_watcher::{Api, Client, Config, Error, Event, InitialListStrategy, Watchable, Watcher, WatcherBuilder};

pub mod modules;
pub mod random;

/// Puts a builder in one store mode (the tests that run a scenario in every mode).
pub type Mode = fn(WatcherBuilder<Pod>) -> WatcherBuilder<Pod>;

/// Milliseconds, to keep durations short to write.
pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// The bound on any single wait in a test: generous for a slow, noisy 2-core CI machine.
pub const WAIT: Duration = Duration::from_secs(20);

pub fn pod(ns: &str, name: &str) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(ns.into()),
            labels: Some(BTreeMap::from([("app".to_owned(), "web".to_owned())])),
            ..ObjectMeta::default()
        },
        ..Pod::default()
    }
}

/// Creates pods `p{i}` in namespace `apps` for each `i` of `numbers`.
pub fn create_pods(server: &FakeApiServer, numbers: std::ops::Range<usize>) {
    for i in numbers {
        server.create(&pod("apps", &format!("p{i}"))).unwrap();
    }
}

pub fn labelled(mut p: Pod, key: &str, value: &str) -> Pod {
    p.metadata.labels.get_or_insert_with(BTreeMap::new).insert(key.into(), value.into());
    p
}

/// Pods in every namespace of `server`.
pub fn pods(server: &FakeApiServer) -> Api<Pod> {
    Api::all(Client::from_url(&server.url()).unwrap())
}

/// A fake server with short bookmark intervals, as tests want.
pub fn server() -> FakeApiServer {
    FakeApiServer::builder().bookmark_interval(ms(100)).start()
}

/// A compact description of an event, for assertions.
pub fn describe<K: Watchable>(ev: &Event<K>) -> String {
    let name = |o: &K| o.meta().name.clone().unwrap_or_default();
    match ev {
        Event::Init => "Init".into(),
        Event::InitApply(p) => format!("InitApply({})", name(p)),
        Event::InitDone => "InitDone".into(),
        Event::Apply(p) => format!("Apply({})", name(p)),
        Event::Delete(p) => format!("Delete({})", name(p)),
    }
}

/// Receives events until `done` says so, returning everything seen (errors as `Err(..)`).
/// Panics with what was seen if `WAIT` passes first.
pub fn collect_until<K: Watchable>(w: &Watcher<K>, done: impl FnMut(&[String]) -> bool) -> Vec<String> {
    collect_from(w.receiver(), done)
}

/// [`collect_until`] for any event channel, such as a subscription.
pub fn collect_from<K: Watchable>(
    rx: &crossbeam_channel::Receiver<Result<Event<K>, Error>>,
    mut done: impl FnMut(&[String]) -> bool,
) -> Vec<String> {
    let deadline = Instant::now() + WAIT;
    let mut seen = Vec::new();
    while !done(&seen) {
        match rx.recv_deadline(deadline) {
            Ok(Ok(ev)) => seen.push(describe(&ev)),
            Ok(Err(e)) => seen.push(format!("Err({e})")),
            Err(e) => panic!("no more events ({e}); seen so far: {seen:?}"),
        }
    }
    seen
}

/// Waits (bounded) until the store's names equal the server's truth.
pub fn store_matches_server(w: &Watcher<Pod>, server: &FakeApiServer) {
    let deadline = Instant::now() + WAIT;
    loop {
        let mut truth: Vec<String> = server.list::<Pod>().iter().map(key).collect();
        truth.sort();
        let mut ours: Vec<String> = w.store().state().iter().map(|p| key(p)).collect();
        ours.sort();
        if truth == ours && w.store().is_ready() {
            return;
        }
        assert!(Instant::now() < deadline, "store never matched the server: store {ours:?}, server {truth:?}");
        // Drain events so a consumer-attached watcher is never blocked by us.
        let _ = w.try_recv();
        std::thread::sleep(ms(5));
    }
}

pub fn key(p: &Pod) -> String {
    format!(
        "{}/{}@{}",
        p.metadata.namespace.as_deref().unwrap_or(""),
        p.metadata.name.as_deref().unwrap_or(""),
        p.metadata.resource_version.as_deref().unwrap_or("")
    )
}

/// The default configuration with paged lists: for the tests of what a list does page by page
/// (its faults, continue tokens, relists), which a streaming list, the default, never asks for.
pub fn paged() -> Config {
    Config::default().initial_list_strategy(InitialListStrategy::ListWatch)
}

/// Polls `cond` (bounded by `WAIT`): for facts of the fake server, which has no events.
pub fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        std::thread::sleep(ms(5));
    }
}

/// One scenario, many configurations (style rule 25): page sizes 1, 2 and 500, bookmarks on and
/// off, list-then-watch and streaming lists. Each run is labelled.
pub fn for_each_config(mut scenario: impl FnMut(&str, Config)) {
    for page in [1u32, 2, 500] {
        for bookmarks in [true, false] {
            for streaming in [false, true] {
                if streaming && !bookmarks {
                    continue; // streaming lists need bookmarks
                }
                let strategy = if streaming { InitialListStrategy::StreamingList } else { InitialListStrategy::ListWatch };
                let mut c = Config::default().page_size(page).initial_list_strategy(strategy);
                if !bookmarks {
                    c = c.disable_bookmarks();
                }
                let label = format!("page_size={page} bookmarks={bookmarks} streaming={streaming}");
                scenario(&label, c);
            }
        }
    }
}
