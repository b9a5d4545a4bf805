//! Seeded chaos: random writes and random faults against two watchers (one with a label
//! selector), then quiet; the stores and two model consumers must end equal to the server.
//!
//! The seed is fixed (printed first); `KUBE_WATCHER_CHAOS_SEED=<n>` runs another and replays the
//! same writes, faults and configurations (thread timing still varies). `KUBE_WATCHER_CHAOS_ROUNDS=<n>` sets the number
//! of rounds (default 200: a few seconds).
#![cfg(feature = "testing")]

use crate::common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::random::{Write, Writes};
use common::*;
use k8s_openapi::api::core::v1::Pod;
use kube_watcher::testing::{Chunking, FakeApiServer, Fault, Match, Watch410};
use kube_watcher::{Api, Backoff, Client, Config, Event, Watcher};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// How long the quiet phase may take to converge (bounded even on a slow 2-core machine).
const CONVERGE: Duration = Duration::from_secs(90);
const DEFAULT_ROUNDS: usize = 200;
const DEFAULT_SEED: u64 = 20_261_124;
const NAMES: usize = 12;

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

/// `namespace/name` → resourceVersion.
type Truth = BTreeMap<String, String>;

fn key_of(p: &Pod) -> String {
    format!("{}/{}", p.metadata.namespace.as_deref().unwrap_or(""), p.metadata.name.as_deref().unwrap_or(""))
}

fn rv_of(p: &Pod) -> String {
    p.metadata.resource_version.clone().unwrap_or_default()
}

fn selected(p: &Pod) -> bool {
    p.metadata.labels.as_ref().and_then(|l| l.get("chaos")).is_some_and(|v| v == "in")
}

fn truth(server: &FakeApiServer, only_selected: bool) -> Truth {
    server.list::<Pod>().iter().filter(|p| !only_selected || selected(p)).map(|p| (key_of(p), rv_of(p))).collect()
}

/// What a consumer of the events reconstructs, two ways.
#[derive(Default)]
struct Model {
    /// `Init` starts a new map, `InitApply` fills it, `InitDone` replaces; `Apply`/`Delete` edit.
    replace: Truth,
    pending: Option<Truth>,
    /// Only `Apply`/`InitApply` (insert) and `Delete` (remove): event.rs promises this misses no
    /// deletion, even across outages.
    apply_only: Truth,
    /// Contract violations seen (duplicate keys in one relist, terminal errors, …).
    violations: Vec<String>,
    errors: usize,
}

impl Model {
    fn on(&mut self, item: kube_watcher::Result<Event<Pod>>) {
        match item {
            Ok(Event::Init) => self.pending = Some(Truth::new()),
            Ok(Event::InitApply(p)) => {
                self.apply_only.insert(key_of(&p), rv_of(&p));
                match self.pending.as_mut() {
                    Some(pending) => {
                        if pending.insert(key_of(&p), rv_of(&p)).is_some() {
                            self.violations.push(format!("key {} twice in one relist", key_of(&p)));
                        }
                    }
                    None => self.violations.push(format!("InitApply({}) outside a relist", key_of(&p))),
                }
            }
            Ok(Event::InitDone) => match self.pending.take() {
                Some(pending) => self.replace = pending,
                None => self.violations.push("InitDone without Init".into()),
            },
            Ok(Event::Apply(p)) => {
                self.replace.insert(key_of(&p), rv_of(&p));
                self.apply_only.insert(key_of(&p), rv_of(&p));
            }
            Ok(Event::Delete(p)) => {
                self.replace.remove(&key_of(&p));
                self.apply_only.remove(&key_of(&p));
            }
            Err(e) => {
                self.errors += 1;
                if e.is_terminal() {
                    self.violations.push(format!("terminal error: {e}"));
                }
            }
        }
    }
}

/// A watcher configuration drawn from the seed.
fn random_config(rng: &mut SmallRng) -> (String, Config) {
    let page = [1u32, 2, 500][rng.random_range(0..3)];
    let bookmarks = rng.random_bool(0.7);
    let streaming = bookmarks && rng.random_bool(0.5);
    let timeout = rng.random_range(1..=3u64);
    let mut c = Config::default()
        .page_size(page)
        .timeout(Duration::from_secs(timeout))
        .stall_timeout(Duration::from_secs(timeout + 2))
        .backoff(Backoff { initial: ms(10), max: ms(200), ..Backoff::default() });
    if !bookmarks {
        c = c.disable_bookmarks();
    }
    if streaming {
        c = c.streaming_lists();
    }
    (format!("page_size={page} bookmarks={bookmarks} streaming={streaming} timeout={timeout}s"), c)
}

fn random_fault(rng: &mut SmallRng) -> (Match, Fault) {
    let watch = |f| (Match::Watch, f);
    let list = |f| (Match::List, f);
    let any = |f| (Match::Any, f);
    let status = |code: u16, reason: &str, retry_after| Fault::Status {
        code,
        reason: reason.into(),
        message: format!("chaos {code}"),
        retry_after,
    };
    let in_stream = |code: u16, reason: &str| Fault::InStreamError {
        code,
        reason: reason.into(),
        message: format!("chaos {code}"),
    };
    match rng.random_range(0..22) {
        0 => any(status(500, "InternalError", None)),
        1 => any(status(503, "ServiceUnavailable", None)),
        2 => any(status(403, "Forbidden", None)),
        3 => list(status(410, "Expired", None)),
        4 => watch(status(410, "Gone", None)),
        5 => any(Fault::PlainText {
            code: 429,
            body: "Too many requests, please try again later.".into(),
            retry_after: Some(rng.random_range(0..=1)),
        }),
        6 => any(Fault::PlainText { code: 502, body: "<html>502 Bad Gateway</html>".into(), retry_after: None }),
        7 => any(Fault::TooLargeResourceVersion),
        8 => watch(in_stream(410, "Expired")),
        9 => watch(in_stream(500, "InternalError")),
        10 => watch(Fault::InStreamError {
            code: 504,
            reason: "Timeout".into(),
            message: "Timeout: Too large resource version: 99999, current: 1".into(),
        }),
        11 => watch(Fault::CloseAfter { events: rng.random_range(0..4) }),
        12 => watch(Fault::ResetAfter { events: rng.random_range(0..4) }),
        13 => list(Fault::TruncateBody),
        14 => watch(Fault::Stall),
        15 => watch(Fault::StallBeforeHeaders),
        16 => watch(Fault::MalformedLine),
        17 => watch(Fault::OversizedLine { bytes: 17 << 20 }),
        18 => any(Fault::DelayHeaders(ms(rng.random_range(10..300)))),
        19 => watch(Fault::EndlessLine),
        20 => list(Fault::GzipBomb { bytes: 24 << 20 }),
        // An endless list is only stopped by the 1 GiB body cap: too slow for this test (the
        // memory tests in decode.rs cover it).
        _ => any(status(504, "Timeout", None)),
    }
}

/// The pods `c0`..`c11` in two namespaces, half of them selected by `chaos=in`, and their writes.
const WRITES: Writes = Writes {
    namespaces: &["a", "b"],
    prefix: "c",
    names: NAMES,
    finalizer: "example.com/chaos",
    selector: Some("chaos"),
    mix: &[
        (3, Write::Create),
        (2, Write::Modify),
        (2, Write::Delete),
        (1, Write::DropFinalizers),
        (1, Write::Recreate),
        (1, Write::Batch),
    ],
    batch: 2..6,
};

#[test]
fn random_writes_and_faults_end_with_every_store_equal_to_the_server() {
    chaos(false);
}

/// Also checks the stricter promise of src/event.rs: a consumer that treats `InitApply` as
/// `Apply` and ignores `Init`/`InitDone` misses no deletion. (It failed for about half the seeds
/// until abandoned relists' objects were tracked; tests/integration/scenarios.rs has the deterministic case.)
#[test]
fn random_writes_and_faults_miss_no_delete_for_an_apply_only_consumer() {
    chaos(true);
}

fn chaos(apply_only: bool) {
    // A fixed seed by default, so CI is reproducible; model.rs covers hundreds of seeds.
    let seed = env_u64("KUBE_WATCHER_CHAOS_SEED").unwrap_or(DEFAULT_SEED);
    let rounds = env_u64("KUBE_WATCHER_CHAOS_ROUNDS").map_or(DEFAULT_ROUNDS, |n| n as usize);
    eprintln!("chaos seed: {seed} ({rounds} rounds; replay with KUBE_WATCHER_CHAOS_SEED={seed})");
    let mut rng = SmallRng::seed_from_u64(seed);

    let chunking = [Chunking::PerEvent, Chunking::Coalesce, Chunking::Split][rng.random_range(0..3)];
    let watch_410 = if rng.random_bool(0.5) { Watch410::InStream } else { Watch410::Http };
    let continue_ttl = [Duration::ZERO, ms(50), Duration::from_secs(300)][rng.random_range(0..3)];
    let history = rng.random_range(5..200);
    let server = FakeApiServer::builder()
        .seed(seed)
        .bookmark_interval(ms(rng.random_range(20..300)))
        .chunking(chunking)
        .watch_410(watch_410)
        .continue_ttl(continue_ttl)
        .history(history)
        .watcher_buffer(rng.random_range(2..50))
        .start();
    let setup = format!(
        "seed={seed} chunking={chunking:?} watch_410={watch_410:?} continue_ttl={continue_ttl:?} history={history}"
    );
    for _ in 0..NAMES {
        WRITES.write(&server, &mut rng);
    }
    let client = Client::from_url(&server.url()).unwrap();
    let (all_label, all_config) = random_config(&mut rng);
    let (sel_label, sel_config) = random_config(&mut rng);
    let watchers = [
        (format!("all: {all_label}"), false, Watcher::new(Api::<Pod>::all(client.clone()), all_config).unwrap()),
        (
            format!("chaos=in: {sel_label}"),
            true,
            Watcher::new(Api::<Pod>::all(client), sel_config.labels("chaos=in")).unwrap(),
        ),
    ];
    eprintln!("chaos setup: {setup}; watchers: {}; {}", watchers[0].0, watchers[1].0);
    let models: Vec<Arc<Mutex<Model>>> = watchers.iter().map(|_| Arc::default()).collect();
    let quiet = AtomicBool::new(false);

    std::thread::scope(|s| {
        // Consumers: one thread per watcher, reading every event until told to stop.
        for ((_, _, w), model) in watchers.iter().zip(&models) {
            let quiet = &quiet;
            s.spawn(move || {
                loop {
                    match w.recv_timeout(ms(20)) {
                        Ok(item) => model.lock().unwrap().on(item),
                        Err(_) if quiet.load(Ordering::Acquire) => return,
                        Err(_) => {}
                    }
                }
            });
        }
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            // Chaos.
            for _ in 0..rounds {
                WRITES.write(&server, &mut rng);
                if rng.random_bool(0.12) {
                    let (m, f) = random_fault(&mut rng);
                    server.push_fault(m, f);
                }
                if rng.random_bool(0.03) {
                    server.compact();
                }
                if rng.random_bool(0.03) {
                    server.end_watches();
                }
                std::thread::sleep(ms(rng.random_range(0..8)));
            }
            // Quiet: no more writes or faults; everything must converge.
            server.clear_faults();
            let deadline = Instant::now() + CONVERGE;
            for ((label, only_selected, w), model) in watchers.iter().zip(&models) {
                let want = truth(&server, *only_selected);
                loop {
                    let state = w.store().state();
                    let store: Truth = state.iter().map(|p| (key_of(p), rv_of(p))).collect();
                    let m = model.lock().unwrap();
                    assert!(m.violations.is_empty(), "{setup} {label}: {:?}", m.violations);
                    if store == want
                        && m.replace == want
                        && (!apply_only || m.apply_only == want)
                        && m.pending.is_none()
                    {
                        assert_eq!(state.len(), store.len(), "{setup} {label}: duplicate keys in the store");
                        break;
                    }
                    assert!(
                        Instant::now() < deadline,
                        "{setup} {label}: no convergence\n truth:      {want:?}\n store:      {store:?}\n \
                         replace:    {:?}\n apply-only: {:?}\n stats: {:?}",
                        m.replace,
                        m.apply_only,
                        w.stats()
                    );
                    drop(m);
                    std::thread::sleep(ms(20));
                }
            }
        }));
        quiet.store(true, Ordering::Release);
        if let Err(panic) = result {
            std::panic::resume_unwind(panic);
        }
    });
    for ((label, _, w), model) in watchers.iter().zip(&models) {
        let stats = w.stats();
        eprintln!("chaos {label}: {stats:?}; consumer saw {} errors", model.lock().unwrap().errors);
        assert!(stats.last_error.as_deref().is_none_or(|e| !e.contains("panicked")), "{setup} {label}: {stats:?}");
        w.stop();
    }
}
