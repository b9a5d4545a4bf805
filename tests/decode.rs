//! Hostile input: randomized decoder tests (the stable-Rust counterpart of `fuzz/`), regression
//! tests for what fuzzing found, and memory bounds against endless lines, endless lists and
//! gzip bombs from the server.
#![cfg(all(feature = "fuzzing", feature = "testing"))]

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use common::*;
use k8s_openapi::api::core::v1::Pod;
use kube_watcher::fuzzing;
use kube_watcher::testing::{Fault, Match};
use kube_watcher::{Config, Event, Watcher};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Counts live heap bytes and their peak, so memory bounds are asserted on what the process
/// holds, not on RSS (which the allocator may keep after frees).
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grew(n: usize) {
    let now = LIVE.fetch_add(n, Ordering::Relaxed) + n;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

// SAFETY: forwards every call to the system allocator unchanged; only counts sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
            grew(new_size);
        }
        p
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Tests in this file run one at a time, so one test's allocations do not blur another's peak.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

const MIB: usize = 1 << 20;

/// Runs `f` and returns the peak growth of live heap bytes while it ran.
fn peak_growth(f: impl FnOnce()) -> usize {
    let base = LIVE.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    f();
    PEAK.load(Ordering::Relaxed).saturating_sub(base)
}

fn iterations() -> usize {
    std::env::var("KUBE_WATCHER_FUZZ_ITERATIONS").ok().and_then(|v| v.parse().ok()).unwrap_or(3_000)
}

fn seed() -> u64 {
    let seed = std::env::var("KUBE_WATCHER_FUZZ_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or_else(rand::random);
    eprintln!("fuzz seed: {seed} (replay with KUBE_WATCHER_FUZZ_SEED={seed})");
    seed
}

/// One random edit of `input`: bit flips, interesting bytes, insertions, deletions,
/// truncation, duplication and splicing with another valid input.
fn mutate(rng: &mut StdRng, input: &[u8], other: &[u8]) -> Vec<u8> {
    const INTERESTING: &[u8] = b"{}[]\",:\\0123456789-+.eEtrufalsn \n\r\t\x00\xff\xc3\xa9u";
    let mut out = input.to_vec();
    for _ in 0..rng.random_range(1..=4) {
        let len = out.len();
        let at = if len == 0 { 0 } else { rng.random_range(0..len) };
        match rng.random_range(0..8) {
            0 if len > 0 => out[at] ^= 1 << rng.random_range(0..8),
            1 if len > 0 => out[at] = INTERESTING[rng.random_range(0..INTERESTING.len())],
            2 => out.insert(at, INTERESTING[rng.random_range(0..INTERESTING.len())]),
            3 if len > 0 => {
                let end = (at + rng.random_range(1..16)).min(len);
                out.drain(at..end);
            }
            4 => out.truncate(at),
            5 if len > 0 => {
                let end = (at + rng.random_range(1..64)).min(len);
                let piece = out[at..end].to_vec();
                let to = rng.random_range(0..=out.len());
                out.splice(to..to, piece);
            }
            6 if !other.is_empty() => {
                let from = rng.random_range(0..other.len());
                let end = (from + rng.random_range(1..128)).min(other.len());
                out.splice(at..at, other[from..end].iter().copied());
            }
            _ => {
                // Deep nesting, a classic for recursive decoders.
                let depth = rng.random_range(1..200);
                let open = if rng.random_bool(0.5) { b'[' } else { b'{' };
                out.splice(at..at, std::iter::repeat_n(open, depth));
            }
        }
    }
    out
}

const WATCH_SEEDS: &[&str] = &[
    r#"{"type":"ADDED","object":{"kind":"Pod","apiVersion":"v1","metadata":{"name":"a","namespace":"ns","resourceVersion":"5","uid":"u","labels":{"x":"y"}},"spec":{"containers":[{"name":"c","image":"i"}]}}}"#,
    r#"{"type":"MODIFIED","object":{"metadata":{"name":"a","resourceVersion":"6","annotations":{"k":"v\u00e9\n"}}}}"#,
    r#"{"type":"DELETED","object":{"metadata":{"name":"a","resourceVersion":"7","deletionTimestamp":"2025-01-01T00:00:00Z"}}}"#,
    r#"{"type":"BOOKMARK","object":{"kind":"Pod","apiVersion":"v1","metadata":{"resourceVersion":"9","annotations":{"k8s.io/initial-events-end":"true"}},"spec":{"containers":null},"status":{}}}"#,
    r#"{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old","reason":"Expired","code":410,"details":{"causes":[{"reason":"ResourceVersionTooLarge"}],"retryAfterSeconds":1}}}"#,
];

const LIST_SEEDS: &[&str] = &[
    r#"{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"12","continue":"abc","remainingItemCount":2},"items":[{"metadata":{"name":"a","namespace":"ns"}},{"metadata":{"name":"b\"]}","namespace":"ns"},"spec":{"containers":[]}}]}"#,
    r#"{"apiVersion":"v1","items":[],"kind":"PodList","metadata":{"resourceVersion":"3"}}"#,
    r#"{"items":null,"metadata":{}}"#,
    "  {\n \"metadata\" : { \"resourceVersion\" : \"1\" } ,\n \"items\" : [ { \"metadata\" : { \"name\" : \"x\" } } ] }\n",
];

const KUBECONFIG_SEED: &str = "apiVersion: v1
kind: Config
clusters:
- name: c
  cluster:
    server: https://127.0.0.1:6443
    insecure-skip-tls-verify: true
    proxy-url: socks5://127.0.0.1:1080
contexts:
- name: ctx
  context: {cluster: c, user: u, namespace: shop}
current-context: ctx
users:
- name: u
  user:
    token: abc
    as: admin
    as-groups: [a, b]
    as-user-extra: {scopes: [x]}
- name: e
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1
      command: /bin/false
      args: [x]
      env: [{name: A, value: B}]
      interactiveMode: Never
";

/// Hands out at most `step` bytes per read, so values straddle the decoders' refills.
struct Trickle<'a> {
    data: &'a [u8],
    step: usize,
}

impl std::io::Read for Trickle<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.step.min(buf.len()).min(self.data.len());
        buf[..n].copy_from_slice(&self.data[..n]);
        self.data = &self.data[n..];
        Ok(n)
    }
}

fn pick<'a>(rng: &mut StdRng, seeds: &[&'a str]) -> &'a [u8] {
    seeds[rng.random_range(0..seeds.len())].as_bytes()
}

#[test]
fn randomized_watch_lines_never_panic_and_lines_stay_bounded() {
    let _serial = serial();
    let mut rng = StdRng::seed_from_u64(seed());
    for seed in WATCH_SEEDS {
        fuzzing::watch_event::<Pod>(seed.as_bytes()).unwrap_or_else(|e| panic!("valid seed rejected: {e}: {seed}"));
    }
    for _ in 0..iterations() {
        let (a, b) = (pick(&mut rng, WATCH_SEEDS), pick(&mut rng, WATCH_SEEDS));
        let line = mutate(&mut rng, a, b);
        let _ = fuzzing::watch_event_both::<Pod>(&line);
        let _ = fuzzing::watch_event_both::<serde_json::Value>(&line);
        let mut stream = line.clone();
        stream.push(b'\n');
        stream.extend_from_slice(&mutate(&mut rng, b, a));
        let max = rng.random_range(1..512);
        fuzzing::lines(std::io::BufReader::with_capacity(rng.random_range(1..32), &stream[..]), max);
    }
}

#[test]
fn randomized_list_bodies_never_panic_and_items_stay_bounded() {
    let _serial = serial();
    let mut rng = StdRng::seed_from_u64(seed());
    for seed in LIST_SEEDS {
        fuzzing::list::<Pod, _>(seed.as_bytes(), 4096).unwrap_or_else(|e| panic!("valid seed rejected: {e}: {seed}"));
    }
    for _ in 0..iterations() {
        let (a, b) = (pick(&mut rng, LIST_SEEDS), pick(&mut rng, LIST_SEEDS));
        let body = mutate(&mut rng, a, b);
        let step = rng.random_range(1..17);
        let _ = fuzzing::list::<Pod, _>(Trickle { data: &body, step }, rng.random_range(1..4096));
        let _ = fuzzing::list::<serde_json::Value, _>(&body[..], 1 << 20);
    }
}

#[test]
fn randomized_kubeconfigs_never_panic() {
    let _serial = serial();
    let mut rng = StdRng::seed_from_u64(seed());
    fuzzing::kubeconfig(KUBECONFIG_SEED).unwrap();
    // Each one builds a TLS client: fewer iterations than the decoders get.
    for _ in 0..iterations() / 10 {
        let text = mutate(&mut rng, KUBECONFIG_SEED.as_bytes(), KUBECONFIG_SEED.as_bytes());
        if let Ok(text) = std::str::from_utf8(&text) {
            let _ = fuzzing::kubeconfig(text);
        }
    }
}

#[test]
fn deeply_nested_values_are_an_error_not_a_stack_overflow() {
    let _serial = serial();
    let deep = |open: &str, close: &str, n: usize| format!("{}{}", open.repeat(n), close.repeat(n));
    let nested = deep("[", "]", 100_000);
    assert!(fuzzing::watch_event::<Pod>(format!(r#"{{"type":"ADDED","object":{nested}}}"#).as_bytes()).is_err());
    let body = format!(r#"{{"metadata":{{}},"items":[{nested}]}}"#);
    assert!(fuzzing::list::<Pod, _>(body.as_bytes(), 1 << 20).is_err());
    let yaml = deep("[", "]", 100_000);
    assert!(fuzzing::kubeconfig(&yaml).is_err());
}

/// Receives until an error containing `needle` arrives; returns how many `InitApply` came first.
fn until_error(w: &Watcher<Pod>, needle: &str, stop_after_init_applies: Option<usize>) -> (usize, String) {
    let deadline = Instant::now() + WAIT * 3;
    let mut init_applies = 0;
    loop {
        match w.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(Ok(Event::InitApply(_))) => {
                init_applies += 1;
                if stop_after_init_applies.is_some_and(|n| init_applies >= n) {
                    return (init_applies, String::new());
                }
            }
            Ok(Ok(_)) => {}
            Ok(Err(e)) if e.to_string().contains(needle) => return (init_applies, e.to_string()),
            Ok(Err(e)) => panic!("unexpected error {e}"),
            Err(e) => panic!("no error containing {needle:?} ({e}); {init_applies} InitApply"),
        }
    }
}

#[test]
fn an_endless_watch_line_is_cut_at_the_line_limit_with_bounded_memory() {
    let _serial = serial();
    let server = server();
    server.create(&pod("apps", "a")).unwrap();
    server.push_fault(Match::Watch, Fault::EndlessLine);
    let grew = peak_growth(|| {
        let w = Watcher::new(pods(&server), Config::default()).unwrap();
        let (_, err) = until_error(&w, "line longer than", None);
        assert!(err.contains("decode watch pods"), "{err}");
        server.create(&pod("apps", "after")).unwrap();
        store_matches_server(&w, &server);
        w.stop();
    });
    // The 16 MiB line limit (a Vec may double past it) plus buffers, never the endless line.
    assert!(grew < 64 * MIB, "heap grew by {} MiB", grew / MIB);
}

#[test]
fn an_endless_list_is_streamed_with_bounded_memory() {
    let _serial = serial();
    let server = server();
    server.push_fault(Match::List, Fault::EndlessList);
    // About 110 bytes per item: 150 000 items is over 16 MiB of body.
    let items = 150_000;
    let grew = peak_growth(|| {
        let w = Watcher::new(pods(&server), Config::default()).unwrap();
        let (seen, _) = until_error(&w, "", Some(items));
        assert_eq!(seen, items);
        w.stop();
    });
    assert!(grew < 32 * MIB, "heap grew by {} MiB while streaming an endless list", grew / MIB);
}

#[test]
fn a_gzip_bomb_list_is_cut_at_the_item_limit_with_bounded_memory() {
    let _serial = serial();
    let server = server();
    server.create(&pod("apps", "a")).unwrap();
    // 4 GiB once inflated, about 4 MiB on the wire.
    server.push_fault(Match::List, Fault::GzipBomb { bytes: 4 << 30 });
    let grew = peak_growth(|| {
        let w = Watcher::new(pods(&server), Config::default()).unwrap();
        let (_, err) = until_error(&w, "list item larger than", None);
        assert!(err.contains("decode list pods"), "{err}");
        store_matches_server(&w, &server);
        w.stop();
    });
    // The 16 MiB item limit (a Vec may double past it) plus buffers.
    assert!(grew < 64 * MIB, "heap grew by {} MiB", grew / MIB);
}

/// Found by `randomized_watch_lines_never_panic_and_lines_stay_bounded` (seed
/// 2449707150393993206): a truncated line whose object holds a syntax error is accepted when
/// decoded straight into the type, and rejected when decoded through the raw bytes.
const TRUNCATED_DELETED: &str = r#"{"type":"DELETED","object":{"metadata":{"name":"a","reso","object":{"metadata":{"name":"a","reurceVersion":"7","deletionTimestamp":"2025-01-01T00:00:00Z"}}}"#;

#[test]
fn regression_a_truncated_deleted_event_with_a_syntax_error_is_rejected_by_both_decoding_paths() {
    let (direct, raw) = fuzzing::watch_event_both::<Pod>(TRUNCATED_DELETED.as_bytes());
    assert!(raw.is_err(), "{raw:?}");
    assert!(direct.is_err(), "accepted invalid JSON: {direct:?}");
}

#[test]
fn randomized_watch_lines_decode_the_same_both_ways() {
    let _serial = serial();
    let mut rng = StdRng::seed_from_u64(seed());
    for _ in 0..iterations() {
        let (a, b) = (pick(&mut rng, WATCH_SEEDS), pick(&mut rng, WATCH_SEEDS));
        let line = mutate(&mut rng, a, b);
        let (direct, raw) = fuzzing::watch_event_both::<Pod>(&line);
        assert_eq!(direct.is_ok(), raw.is_ok(), "{direct:?} vs {raw:?} on {:?}", String::from_utf8_lossy(&line));
    }
}

#[test]
fn randomized_json_passes_the_strict_syntax_check_only_if_serde_json_accepts_it() {
    let _serial = serial();
    let mut rng = StdRng::seed_from_u64(seed());
    let mut agreed = 0;
    for _ in 0..iterations() * 10 {
        let (a, b) = (pick(&mut rng, WATCH_SEEDS), pick(&mut rng, LIST_SEEDS));
        let input = mutate(&mut rng, a, b);
        let strict = fuzzing::strict_syntax(&input);
        let serde = serde_json::from_slice::<serde::de::IgnoredAny>(&input).is_ok();
        assert!(
            !strict || serde,
            "strict check accepts what serde_json refuses: {:?}",
            String::from_utf8_lossy(&input)
        );
        agreed += usize::from(strict == serde);
    }
    // It may refuse more (lone surrogates, deep nesting), but hardly ever does on these inputs.
    assert!(agreed >= iterations() * 10 * 99 / 100, "agreed on only {agreed}");
}

/// Found by `fuzz/run.sh` (watch_line, 45 s): invalid UTF-8 inside an unknown field name. Both
/// decoding paths must give the same answer (serde_json skips UTF-8 checks in ignored strings
/// when decoding from a slice, but not when it borrows a raw value).
const INVALID_UTF8_IN_UNKNOWN_KEY: &[u8] = b"{\"type\":\"ADDED\",\"object\":{\"kind\":\"Pod\",\"apiVersion\":\"v1\",\"metadata\":{\"name\":\"a\",\"namespace\":\"ns\",\"resourceVeriosn\":\"5\",\"uid\":\"u\"},\"spec\":{\"contaNiners\":[{\"name\":\"c\",\"ima\xff\xff\xff\xff\xff\xff\xff\xffge\":\"i\"}]}}}";

#[test]
fn regression_invalid_utf8_in_an_unknown_key_is_judged_the_same_by_both_decoding_paths() {
    let (direct, raw) = fuzzing::watch_event_both::<Pod>(INVALID_UTF8_IN_UNKNOWN_KEY);
    assert_eq!(direct.is_ok(), raw.is_ok(), "{direct:?} vs {raw:?}");
}
