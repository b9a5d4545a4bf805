//! Hostile input: randomized decoder tests (the stable-Rust counterpart of `fuzz/`), regression
//! tests for what fuzzing found, and memory bounds against endless lines, endless lists and
//! gzip bombs from the server.

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::ErrorKind;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicIsize, Ordering};
use std::time::Instant;

use crate::common::*;
use k8s_openapi::api::core::v1::Pod;
use kube_watcher::fuzzing;
use kube_watcher::testing::{Fault, Match};
use kube_watcher::{Event, Watcher};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// Counts live heap bytes and their peak, so memory bounds are asserted on what the process
/// holds, not on RSS (which the allocator may keep after frees). It is the allocator of the
/// whole test binary but counts only in a process that [`alone`] started for one test: there
/// no other test's allocations blur the peak, and elsewhere the cost is one load of a flag.
struct Counting;

/// Whether [`Counting`] counts: set by [`alone`] in the process it starts, never cleared.
static COUNTING: AtomicBool = AtomicBool::new(false);
/// Signed: what was allocated before counting began may be freed after it.
static LIVE: AtomicIsize = AtomicIsize::new(0);
static PEAK: AtomicIsize = AtomicIsize::new(0);

fn grew(n: usize) {
    let n = n as isize;
    let now = LIVE.fetch_add(n, Ordering::Relaxed) + n;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

fn shrank(n: usize) {
    LIVE.fetch_sub(n as isize, Ordering::Relaxed);
}

// SAFETY: forwards every call to the system allocator unchanged; only counts sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() && COUNTING.load(Ordering::Relaxed) {
            grew(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) };
        if COUNTING.load(Ordering::Relaxed) {
            shrank(layout.size());
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() && COUNTING.load(Ordering::Relaxed) {
            shrank(layout.size());
            grew(new_size);
        }
        p
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// The tests of this module run one at a time: each computes (one core of two), and while one
/// runs the other tests of the binary still have a core to wait on their servers with.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Names the test that a process started by [`alone`] is to run.
const ALONE: &str = "KUBE_WATCHER_TEST_ALONE";

/// Runs `test`, the body of this module's test `name`, in a process of its own with the heap
/// counted ([`peak_growth`]): this test binary again, running that one test. Its output
/// (the fuzz seed among it) is passed on; its failure fails the test here.
fn alone(name: &str, test: impl FnOnce()) {
    let _serial = serial();
    if std::env::var_os(ALONE).is_some_and(|v| v == name) {
        COUNTING.store(true, Ordering::Relaxed);
        test();
        return;
    }
    // The harness names a test by its path below the crate: `decode::<name>`.
    let module = module_path!().split_once("::").map_or(module_path!(), |(_, m)| m);
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([&format!("{module}::{name}"), "--exact", "--nocapture", "--test-threads=1"])
        .env(ALONE, name)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    print!("{stdout}");
    eprint!("{stderr}");
    assert!(out.status.success(), "{name}, run alone: {}", out.status);
    assert!(stdout.contains("test result: ok. 1 passed"), "{name} did not run alone: no test of that name");
}

const MIB: usize = 1 << 20;

/// Runs `f` and returns the peak growth of live heap bytes while it ran. Only inside [`alone`].
fn peak_growth(f: impl FnOnce()) -> usize {
    assert!(COUNTING.load(Ordering::Relaxed), "the heap is counted only in a test run alone()");
    let base = LIVE.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    f();
    PEAK.load(Ordering::Relaxed).saturating_sub(base) as usize
}

/// Random cases per test: each run draws new ones (the seed is printed), so runs add up; a
/// deeper run sets `KUBE_WATCHER_FUZZ_ITERATIONS` (CONTRIBUTING.md has the command). The default keeps
/// this module near 20 s of a debug `cargo test` on two cores.
fn iterations() -> usize {
    std::env::var("KUBE_WATCHER_FUZZ_ITERATIONS").ok().and_then(|v| v.parse().ok()).unwrap_or(1_000)
}

fn seed() -> u64 {
    let seed = std::env::var("KUBE_WATCHER_FUZZ_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| SmallRng::from_os_rng().random());
    eprintln!("fuzz seed: {seed} (replay with KUBE_WATCHER_FUZZ_SEED={seed})");
    seed
}

/// Numbers the two JSON parsers might read differently, for mutations.
const NUMBERS: &[&str] = &[
    "-0",
    "-0.0",
    "0.0",
    "-0e0",
    "1e2",
    "1E+2",
    "1.0",
    "1.5",
    "1e22",
    "1e23",
    "1e400",
    "-1e400",
    "1e-400",
    "5e-324",
    "1.7976931348623157e308",
    "0.1",
    "0.30000000000000004",
    "123456789.123456",
    "9007199254740993",
    "2147483647",
    "2147483648",
    "-2147483649",
    "9223372036854775807",
    "9223372036854775808",
    "-9223372036854775808",
    "-9223372036854775809",
    "18446744073709551615",
    "18446744073709551616",
    "123456789012345678901234567890",
    "0e999999999999",
    "1e-99999999999999999",
];

/// A random number: one of [`NUMBERS`], or digits, a fraction and an exponent of random lengths.
fn number(rng: &mut SmallRng) -> String {
    if rng.random_bool(0.5) {
        return NUMBERS[rng.random_range(0..NUMBERS.len())].to_owned();
    }
    let mut n = String::new();
    if rng.random_bool(0.3) {
        n.push('-');
    }
    let digits = |rng: &mut SmallRng, n: &mut String, count: usize| {
        for _ in 0..count {
            n.push(char::from(b'0' + rng.random_range(0..10u8)));
        }
    };
    if rng.random_bool(0.2) {
        n.push('0');
    } else {
        n.push(char::from(b'1' + rng.random_range(0..9u8)));
        let count = rng.random_range(0..20);
        digits(rng, &mut n, count);
    }
    if rng.random_bool(0.5) {
        n.push('.');
        let count = rng.random_range(1..20);
        digits(rng, &mut n, count);
    }
    if rng.random_bool(0.4) {
        n.push(if rng.random_bool(0.5) { 'e' } else { 'E' });
        match rng.random_range(0..3) {
            0 => n.push('-'),
            1 => n.push('+'),
            _ => {}
        }
        let count = rng.random_range(1..4);
        digits(rng, &mut n, count);
    }
    n
}

/// Where the numbers of `input` are (outside strings; `input` need not be valid JSON).
fn number_spans(input: &[u8]) -> Vec<std::ops::Range<usize>> {
    let mut spans = Vec::new();
    let (mut i, mut in_str) = (0, false);
    while i < input.len() {
        let c = input[i];
        if in_str {
            match c {
                b'\\' => i += 1,
                b'"' => in_str = false,
                _ => {}
            }
        } else if c == b'"' {
            in_str = true;
        } else if c == b'-' || c.is_ascii_digit() {
            let len =
                input[i..].iter().take_while(|b| matches!(b, b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9')).count();
            spans.push(i..i + len);
            i += len;
            continue;
        }
        i += 1;
    }
    spans
}

/// Whether `input` holds a number the strict syntax check may refuse though serde_json
/// accepts it: `-0`, or a float (whose value the two parsers may read differently).
fn has_odd_number(input: &[u8]) -> bool {
    number_spans(input).into_iter().any(|span| {
        let n = &input[span];
        n == b"-0" || n.iter().any(|b| matches!(b, b'.' | b'e' | b'E'))
    })
}

/// Replaces one number of `input` (outside strings) with [`number`]; `None` if it has none.
fn swap_number(rng: &mut SmallRng, input: &[u8]) -> Option<Vec<u8>> {
    let mut spans = number_spans(input);
    if spans.is_empty() {
        return None;
    }
    let span = spans.swap_remove(rng.random_range(0..spans.len()));
    let mut out = input.to_vec();
    out.splice(span, number(rng).into_bytes());
    Some(out)
}

/// One random edit of `input`: bit flips, interesting bytes, insertions, deletions,
/// truncation, duplication, splicing with another valid input and odd numbers.
fn mutate(rng: &mut SmallRng, input: &[u8], other: &[u8]) -> Vec<u8> {
    const INTERESTING: &[u8] = b"{}[]\",:\\0123456789-+.eEtrufalsn \n\r\t\x00\xff\xc3\xa9u";
    let mut out = input.to_vec();
    for _ in 0..rng.random_range(1..=4) {
        let len = out.len();
        let at = if len == 0 { 0 } else { rng.random_range(0..len) };
        match rng.random_range(0..10) {
            8 | 9 => {
                if let Some(swapped) = swap_number(rng, &out) {
                    out = swapped;
                }
            }
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
    r#"{"type":"MODIFIED","object":{"kind":"Pod","apiVersion":"v1","metadata":{"name":"n","namespace":"ns","resourceVersion":"8","generation":3},"spec":{"containers":[{"name":"c","ports":[{"containerPort":8080}]}],"terminationGracePeriodSeconds":30,"priority":0},"status":{"containerStatuses":[{"name":"c","restartCount":2,"ready":true,"image":"i","imageID":""}]},"x":[0.5,-1.25e-3,1e5]}}"#,
];

/// The seed files of fuzz target `target` (fuzz/seeds/<target>/*), each whole.
fn seed_files(target: &str) -> Vec<Vec<u8>> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds").join(target);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no seeds in {}", dir.display());
    files.into_iter().map(|f| std::fs::read(&f).unwrap_or_else(|e| panic!("{}: {e}", f.display()))).collect()
}

/// Every watch line seed: [`WATCH_SEEDS`] and each line of the watch_line seed files.
fn watch_seeds() -> Vec<Vec<u8>> {
    let mut seeds: Vec<Vec<u8>> = WATCH_SEEDS.iter().map(|s| s.as_bytes().to_vec()).collect();
    for file in seed_files("watch_line") {
        seeds.extend(file.split(|b| *b == b'\n').filter(|l| !l.is_empty()).map(<[u8]>::to_vec));
    }
    seeds
}

/// Every list body seed: [`LIST_SEEDS`] and the list seed files (whose first byte is the
/// fuzz target's read size, not part of the body).
fn list_seeds() -> Vec<Vec<u8>> {
    let mut seeds: Vec<Vec<u8>> = LIST_SEEDS.iter().map(|s| s.as_bytes().to_vec()).collect();
    seeds.extend(seed_files("list").into_iter().map(|file| file.get(1..).unwrap_or_default().to_vec()));
    seeds
}

const LIST_SEEDS: &[&str] = &[
    r#"{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"12","continue":"abc","remainingItemCount":2},"items":[{"metadata":{"name":"a","namespace":"ns"}},{"metadata":{"name":"b\"]}","namespace":"ns"},"spec":{"containers":[]}}]}"#,
    r#"{"apiVersion":"v1","items":[],"kind":"PodList","metadata":{"resourceVersion":"3"}}"#,
    r#"{"items":null,"metadata":{}}"#,
    "  {\n \"metadata\" : { \"resourceVersion\" : \"1\" } ,\n \"items\" : [ { \"metadata\" : { \"name\" : \"x\" } } ] }\n",
    r#"{"metadata":{"resourceVersion":"4"},"items":[{"metadata":{"name":"n","generation":1},"spec":{"containers":[{"name":"c","ports":[{"containerPort":80}]}]},"x":0.25},{"metadata":{"name":"m","generation":2},"spec":{"containers":[]},"x":-1e-3}]}"#,
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

/// Like [`Trickle`], and before some reads fails with a timeout, as a socket with a read
/// timeout does when the server pauses: the reader must go on where it stopped.
struct Pausing<'a> {
    data: &'a [u8],
    step: usize,
    rng: SmallRng,
}

impl std::io::Read for Pausing<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if !self.data.is_empty() && self.rng.random_bool(0.3) {
            let kind = if self.rng.random_bool(0.5) { ErrorKind::TimedOut } else { ErrorKind::WouldBlock };
            return Err(kind.into());
        }
        let n = self.step.min(buf.len()).min(self.data.len());
        buf[..n].copy_from_slice(&self.data[..n]);
        self.data = &self.data[n..];
        Ok(n)
    }
}

/// The complete lines of `stream` that a line reader with limit `max` returns: up to the first
/// line longer than `max`, without a last line that has no newline.
fn expected_lines(stream: &[u8], max: usize) -> Vec<Vec<u8>> {
    let mut parts: Vec<&[u8]> = stream.split(|b| *b == b'\n').collect();
    parts.pop(); // after the last newline: incomplete (or empty)
    parts.into_iter().take_while(|l| l.len() <= max).map(<[u8]>::to_vec).collect()
}

fn pick<'a>(rng: &mut SmallRng, seeds: &'a [Vec<u8>]) -> &'a [u8] {
    &seeds[rng.random_range(0..seeds.len())]
}

#[test]
fn randomized_watch_lines_never_panic_and_lines_stay_bounded() {
    let _serial = serial();
    let mut rng = SmallRng::seed_from_u64(seed());
    let seeds = watch_seeds();
    for _ in 0..iterations() {
        let (a, b) = (pick(&mut rng, &seeds), pick(&mut rng, &seeds));
        let mut stream = mutate(&mut rng, a, b);
        for _ in 0..rng.random_range(0..4) {
            stream.push(b'\n');
            stream.extend_from_slice(&mutate(&mut rng, b, a));
        }
        if rng.random_bool(0.5) {
            stream.push(b'\n');
        }
        let max = rng.random_range(1..512);
        let capacity = rng.random_range(1..32);
        let whole = fuzzing::lines(std::io::BufReader::with_capacity(capacity, &stream[..]), max);
        assert_eq!(whole, expected_lines(&stream, max));
        let paused =
            Pausing { data: &stream, step: rng.random_range(1..64), rng: SmallRng::seed_from_u64(rng.random()) };
        let resumed = fuzzing::lines(std::io::BufReader::with_capacity(capacity, paused), max);
        assert_eq!(resumed, whole, "lines read with pauses differ from lines read at once");
    }
}

#[test]
fn randomized_list_bodies_never_panic_and_items_stay_bounded() {
    let _serial = serial();
    let mut rng = SmallRng::seed_from_u64(seed());
    for seed in LIST_SEEDS {
        fuzzing::list::<Pod, _>(seed.as_bytes(), 4096).unwrap_or_else(|e| panic!("valid seed rejected: {e}: {seed}"));
    }
    let seeds = list_seeds();
    for seed in &seeds {
        let _ = fuzzing::list::<Pod, _>(&seed[..], 4096);
        let _ = fuzzing::list::<serde_json::Value, _>(&seed[..], 1 << 20);
    }
    for _ in 0..iterations() {
        let (a, b) = (pick(&mut rng, &seeds), pick(&mut rng, &seeds));
        let body = mutate(&mut rng, a, b);
        let step = rng.random_range(1..17);
        let _ = fuzzing::list::<Pod, _>(Trickle { data: &body, step }, rng.random_range(1..4096));
        let _ = fuzzing::list::<serde_json::Value, _>(&body[..], 1 << 20);
    }
}

/// Every protobuf seed file (fuzz/seeds/protobuf/*): whole bodies, envelope included.
fn protobuf_seeds() -> Vec<Vec<u8>> {
    seed_files("protobuf")
}

/// Appends protobuf field `number` as length-delimited bytes (wire type 2).
fn put_bytes(out: &mut Vec<u8>, number: u64, bytes: &[u8]) {
    fn varint(out: &mut Vec<u8>, mut v: u64) {
        while v >= 0x80 {
            out.push((v as u8) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }
    varint(out, number << 3 | 2);
    varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

/// The length-delimited fields of a message whose every field is one (as `runtime.Unknown`,
/// `TypeMeta` and the seeds' envelopes are): (number, bytes), in order.
fn bytes_fields(mut message: &[u8]) -> Vec<(u64, &[u8])> {
    fn varint(input: &mut &[u8]) -> u64 {
        let mut value = 0;
        for shift in (0..64).step_by(7) {
            let (byte, rest) = input.split_first().expect("a varint runs past the end");
            *input = rest;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                break;
            }
        }
        value
    }
    let mut fields = Vec::new();
    while !message.is_empty() {
        let key = varint(&mut message);
        assert_eq!(key & 7, 2, "field {} is not length-delimited", key >> 3);
        let len = usize::try_from(varint(&mut message)).unwrap();
        let (bytes, rest) = message.split_at(len);
        fields.push((key >> 3, bytes));
        message = rest;
    }
    fields
}

/// `k8s\0` and a `runtime.Unknown` envelope (`1` TypeMeta {`1` apiVersion, `2` kind}, `2` raw)
/// around `raw`, written here field by field, so that mutations of an object's own bytes reach
/// the decoder past a valid envelope.
fn protobuf_envelope(api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
    let mut type_meta = Vec::new();
    put_bytes(&mut type_meta, 1, api_version.as_bytes());
    put_bytes(&mut type_meta, 2, kind.as_bytes());
    let mut body = b"k8s\0".to_vec();
    put_bytes(&mut body, 1, &type_meta);
    put_bytes(&mut body, 2, raw);
    body
}

#[test]
fn randomized_protobuf_bodies_never_panic_and_memory_stays_linear() {
    alone("randomized_protobuf_bodies_never_panic_and_memory_stays_linear", || {
        let mut rng = SmallRng::seed_from_u64(seed());
        let seeds = protobuf_seeds();
        for seed in &seeds {
            fuzzing::protobuf_object::<serde_json::Value>(seed).unwrap_or_else(|e| panic!("valid seed rejected: {e}"));
        }
        // The objects inside the seeds, to mutate behind a valid envelope.
        let raws: Vec<(String, String, Vec<u8>)> = seeds
            .iter()
            .map(|body| {
                let (mut api_version, mut kind, mut raw) = (String::new(), String::new(), Vec::new());
                for (number, bytes) in bytes_fields(&body[4..]) {
                    match number {
                        1 => {
                            for (n, text) in bytes_fields(bytes) {
                                let text = String::from_utf8(text.to_vec()).unwrap();
                                if n == 1 {
                                    api_version = text
                                } else if n == 2 {
                                    kind = text
                                }
                            }
                        }
                        2 => raw = bytes.to_vec(),
                        _ => {}
                    }
                }
                (api_version, kind, raw)
            })
            .collect();
        let objects: Vec<Vec<u8>> = raws.iter().map(|(_, _, raw)| raw.clone()).collect();
        for _ in 0..iterations() {
            let body = if rng.random_bool(0.5) {
                let (a, b) = (pick(&mut rng, &seeds), pick(&mut rng, &seeds));
                mutate(&mut rng, a, b)
            } else {
                let (api_version, kind, raw) = &raws[rng.random_range(0..raws.len())];
                let other = pick(&mut rng, &objects);
                protobuf_envelope(api_version, kind, &mutate(&mut rng, raw, other))
            };
            // No allocation follows from a length read in the input: what is held stays linear in
            // the input (an empty message on the wire is 2 bytes, a decoded Container some KiB, as
            // `{}` is in JSON).
            let peak = peak_growth(|| {
                let _ = fuzzing::protobuf_object::<Pod>(&body);
                let _ = fuzzing::protobuf_object::<k8s_openapi::List<Pod>>(&body);
                let _ = fuzzing::protobuf_object::<serde_json::Value>(&body);
            });
            assert!(peak <= 4096 * body.len() + MIB, "{peak} bytes held decoding {} bytes: {body:?}", body.len());
        }
    });
}

/// One protobuf watch frame around an enveloped object (docs/protocol.md §12.3): a `WatchEvent`
/// (`1` type, `2` object: a `RawExtension` whose `1` raw is the body), written field by field.
fn protobuf_frame(event_type: &str, body: &[u8]) -> Vec<u8> {
    let mut object = Vec::new();
    put_bytes(&mut object, 1, body);
    let mut bytes = Vec::new();
    put_bytes(&mut bytes, 1, event_type.as_bytes());
    put_bytes(&mut bytes, 2, &object);
    let mut frame = u32::try_from(bytes.len()).unwrap().to_be_bytes().to_vec();
    frame.extend(bytes);
    frame
}

/// The messages of the complete frames of `stream` that a frame reader with limit `max`
/// returns: up to the first frame longer than `max` or cut short.
fn expected_frames(stream: &[u8], max: usize) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut rest = stream;
    while let Some((header, body)) = rest.split_first_chunk::<4>() {
        let n = u32::from_be_bytes(*header) as usize;
        if n > max || body.len() < n {
            break;
        }
        out.push(body[..n].to_vec());
        rest = &body[n..];
    }
    out
}

#[test]
fn randomized_protobuf_watch_frames_and_lists_never_panic_and_stay_bounded() {
    alone("randomized_protobuf_watch_frames_and_lists_never_panic_and_stay_bounded", || {
        let mut rng = SmallRng::seed_from_u64(seed());
        let seeds = protobuf_seeds();
        let (lists, objects): (Vec<Vec<u8>>, Vec<Vec<u8>>) =
            seeds.into_iter().partition(|body| body.windows(7).any(|w| w == b"PodList"));
        assert!(!lists.is_empty() && !objects.is_empty());
        for list in &lists {
            let (n, _) = fuzzing::protobuf_list::<Pod, _>(&list[..], 1 << 20, ("v1", "Pod"))
                .unwrap_or_else(|e| panic!("valid list seed rejected: {e}"));
            assert!(n > 0);
        }
        const TYPES: [&str; 5] = ["ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"];
        for body in &objects {
            fuzzing::protobuf_watch_event::<serde_json::Value>(&protobuf_frame("ADDED", body)[4..])
                .unwrap_or_else(|e| panic!("valid event rejected: {e}"));
        }
        for _ in 0..iterations() {
            // A stream of frames, its bytes mutated or (keeping the framing) an object's.
            let mut stream = Vec::new();
            for _ in 0..rng.random_range(1..5) {
                let ty = TYPES[rng.random_range(0..TYPES.len())];
                let (a, b) = (pick(&mut rng, &objects), pick(&mut rng, &objects));
                let body = if rng.random_bool(0.5) { mutate(&mut rng, a, b) } else { a.to_vec() };
                stream.extend(protobuf_frame(ty, &body));
            }
            if rng.random_bool(0.3) {
                let other = pick(&mut rng, &objects).to_vec();
                stream = mutate(&mut rng, &stream, &other);
            }
            let max = rng.random_range(1..(stream.len() + 64));
            let capacity = rng.random_range(1..64);
            let whole = fuzzing::protobuf_frames(std::io::BufReader::with_capacity(capacity, &stream[..]), max);
            assert_eq!(whole, expected_frames(&stream, max));
            let paused =
                Pausing { data: &stream, step: rng.random_range(1..64), rng: SmallRng::seed_from_u64(rng.random()) };
            let resumed = fuzzing::protobuf_frames(std::io::BufReader::with_capacity(capacity, paused), max);
            assert_eq!(resumed, whole, "frames read with pauses differ from frames read at once");
            for frame in &whole {
                let peak = peak_growth(|| {
                    let _ = fuzzing::protobuf_watch_event::<Pod>(frame);
                    let _ = fuzzing::protobuf_watch_event::<serde_json::Value>(frame);
                });
                assert!(peak <= 4096 * frame.len() + MIB, "{peak} bytes held decoding a {} byte frame", frame.len());
            }
            // A list body, mutated, read in small steps.
            let (a, b) = (pick(&mut rng, &lists), pick(&mut rng, &objects));
            let body = mutate(&mut rng, a, b);
            let max_item = rng.random_range(1..(1 << 16));
            let step = rng.random_range(1..17);
            let peak = peak_growth(|| {
                let _ = fuzzing::protobuf_list::<Pod, _>(Trickle { data: &body, step }, max_item, ("v1", "Pod"));
            });
            assert!(peak <= 4096 * body.len() + MIB, "{peak} bytes held reading a {} byte list", body.len());
        }
    });
}

#[test]
fn randomized_kubeconfigs_never_panic() {
    let _serial = serial();
    let mut rng = SmallRng::seed_from_u64(seed());
    let mut seeds = vec![KUBECONFIG_SEED.as_bytes().to_vec()];
    seeds.extend(seed_files("kubeconfig"));
    for seed in &seeds {
        fuzzing::kubeconfig(std::str::from_utf8(seed).unwrap()).unwrap();
    }
    // Each one builds a TLS client: fewer iterations than the decoders get.
    for _ in 0..iterations() / 10 {
        let (a, b) = (pick(&mut rng, &seeds), pick(&mut rng, &seeds));
        let text = mutate(&mut rng, a, b);
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
    alone("an_endless_watch_line_is_cut_at_the_line_limit_with_bounded_memory", || {
        let server = server();
        server.create(&pod("apps", "a")).unwrap();
        server.push_fault(Match::Watch, Fault::EndlessLine);
        let grew = peak_growth(|| {
            let w = Watcher::new(pods(&server), paged()).unwrap();
            let (_, err) = until_error(&w, "line longer than", None);
            assert!(err.contains("decode watch pods"), "{err}");
            server.create(&pod("apps", "after")).unwrap();
            store_matches_server(&w, &server);
            w.stop();
        });
        // The 16 MiB line limit (a Vec may double past it) plus buffers, never the endless line.
        assert!(grew < 64 * MIB, "heap grew by {} MiB", grew / MIB);
    });
}

#[test]
fn an_endless_list_is_streamed_with_bounded_memory() {
    alone("an_endless_list_is_streamed_with_bounded_memory", || {
        let server = server();
        server.push_fault(Match::List, Fault::EndlessList);
        // About 110 bytes per item: 150 000 items is over 16 MiB of body.
        let items = 150_000;
        let grew = peak_growth(|| {
            let w = Watcher::new(pods(&server), paged()).unwrap();
            let (seen, _) = until_error(&w, "", Some(items));
            assert_eq!(seen, items);
            w.stop();
        });
        assert!(grew < 32 * MIB, "heap grew by {} MiB while streaming an endless list", grew / MIB);
    });
}

#[test]
fn a_gzip_bomb_list_is_cut_at_the_item_limit_with_bounded_memory() {
    alone("a_gzip_bomb_list_is_cut_at_the_item_limit_with_bounded_memory", || {
        let server = server();
        server.create(&pod("apps", "a")).unwrap();
        // 4 GiB once inflated, about 4 MiB on the wire.
        server.push_fault(Match::List, Fault::GzipBomb { bytes: 4 << 30 });
        let grew = peak_growth(|| {
            let w = Watcher::new(pods(&server), paged()).unwrap();
            let (_, err) = until_error(&w, "list item larger than", None);
            assert!(err.contains("decode list pods"), "{err}");
            store_matches_server(&w, &server);
            w.stop();
        });
        // The 16 MiB item limit (a Vec may double past it) plus buffers.
        assert!(grew < 64 * MIB, "heap grew by {} MiB", grew / MIB);
    });
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

/// Every decoding path (simd-json straight into the type, serde_json through the raw bytes, a
/// compact store's read-back, plain serde_json) gives the same verdict and the same value;
/// `fuzzing::watch_line` panics otherwise.
#[test]
fn randomized_watch_lines_decode_to_the_same_value_every_way() {
    let _serial = serial();
    let mut rng = SmallRng::seed_from_u64(seed());
    for seed in WATCH_SEEDS {
        fuzzing::watch_line::<Pod>(seed.as_bytes()).unwrap_or_else(|e| panic!("valid seed rejected: {e}: {seed}"));
        fuzzing::watch_line::<serde_json::Value>(seed.as_bytes())
            .unwrap_or_else(|e| panic!("valid seed rejected: {e}: {seed}"));
    }
    // The seed files hold odd cases too (`-0` in an integer field): they need only agreement.
    let seeds = watch_seeds();
    for seed in &seeds {
        let _ = fuzzing::watch_line::<Pod>(seed);
        let _ = fuzzing::watch_line::<serde_json::Value>(seed);
    }
    for _ in 0..iterations() {
        let (a, b) = (pick(&mut rng, &seeds), pick(&mut rng, &seeds));
        let line = mutate(&mut rng, a, b);
        let _ = fuzzing::watch_line::<Pod>(&line);
        let _ = fuzzing::watch_line::<serde_json::Value>(&line);
    }
}

/// Numbers of every shape, in integer fields (i64 `generation`, i32 `containerPort`) and in
/// untyped JSON, decode alike every way (the two regression tests below hold the forms found).
#[test]
fn randomized_numbers_decode_to_the_same_value_every_way() {
    let _serial = serial();
    let mut rng = SmallRng::seed_from_u64(seed());
    let (mut accepted, mut refused) = (0, 0);
    for _ in 0..iterations() * 3 {
        let (g, p, x) = (number(&mut rng), number(&mut rng), number(&mut rng));
        let object = format!(
            r#"{{"metadata":{{"name":"n","generation":{g}}},"spec":{{"containers":[{{"name":"c","ports":[{{"containerPort":{p}}}]}}]}},"x":[{x}]}}"#
        );
        let line = format!(r#"{{"type":"ADDED","object":{object}}}"#);
        match fuzzing::watch_line::<Pod>(line.as_bytes()) {
            Ok(_) => accepted += 1,
            Err(_) => refused += 1,
        }
        let _ = fuzzing::watch_line::<serde_json::Value>(line.as_bytes());
        let body = format!(r#"{{"metadata":{{}},"items":[{object}]}}"#);
        let _ = fuzzing::list::<Pod, _>(body.as_bytes(), 1 << 20);
        let _ = fuzzing::list::<serde_json::Value, _>(body.as_bytes(), 1 << 20);
    }
    assert!(accepted > 0 && refused > 0, "{accepted} accepted, {refused} refused");
}

#[test]
fn randomized_json_passes_the_strict_syntax_check_only_if_serde_json_accepts_it() {
    let _serial = serial();
    let mut rng = SmallRng::seed_from_u64(seed());
    let (watch, list) = (watch_seeds(), list_seeds());
    let mut agreed = 0;
    for _ in 0..iterations() * 10 {
        let (a, b) = (pick(&mut rng, &watch), pick(&mut rng, &list));
        let input = mutate(&mut rng, a, b);
        let strict = fuzzing::strict_syntax(&input);
        // The walk that leaves skipped fields out of a copy checks by the same rules.
        assert_eq!(fuzzing::pruned_json(&input), strict);
        let serde = serde_json::from_slice::<serde::de::IgnoredAny>(&input).is_ok();
        assert!(
            !strict || serde,
            "strict check accepts what serde_json refuses: {:?}",
            String::from_utf8_lossy(&input)
        );
        // It refuses numbers the two parsers read differently on purpose.
        agreed += usize::from(strict == serde || (serde && has_odd_number(&input)));
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

/// A pod line with `number` as its `metadata.generation` (i64) and, separately, as a
/// container's `containerPort` (i32).
fn pods_with(number: &str) -> [String; 2] {
    [
        format!(r#"{{"type":"ADDED","object":{{"metadata":{{"name":"a","generation":{number}}}}}}}"#),
        format!(
            r#"{{"type":"ADDED","object":{{"metadata":{{"name":"a"}},"spec":{{"containers":[{{"name":"c","ports":[{{"containerPort":{number}}}]}}]}}}}}}"#
        ),
    ]
}

/// Each number form is judged alike by the watcher's direct decoder
/// (simd-json), its raw path (serde_json, compact store), a compact store's read-back, a list
/// item and plain serde_json (`fuzzing::watch_line` and `fuzzing::list` panic otherwise), with
/// the verdict serde_json gives: `-0` is the float -0.0 to serde_json, and a float is never an
/// integer, whatever its value.
#[test]
fn regression_number_forms_in_integer_fields_are_judged_alike_by_every_decoding_path() {
    for (number, generation_ok, port_ok) in [
        ("-0", false, false),
        ("-0.0", false, false),
        ("0.0", false, false),
        ("-0e0", false, false),
        ("1e2", false, false),
        ("1.0", false, false),
        ("1e400", false, false),
        ("0e999999999999", false, false),
        ("0", true, true),
        ("2147483647", true, true),
        ("2147483648", true, false),
        ("-9223372036854775808", true, false),
        ("-9223372036854775809", false, false),
        ("9223372036854775807", true, false),
        ("9223372036854775808", false, false),
        ("18446744073709551615", false, false),
        ("18446744073709551616", false, false),
    ] {
        for (line, ok) in pods_with(number).iter().zip([generation_ok, port_ok]) {
            let got = fuzzing::watch_line::<Pod>(line.as_bytes());
            assert_eq!(got.is_ok(), ok, "{line}: {got:?}");
            if number == "-9223372036854775808" && ok {
                assert!(got.unwrap().contains("generation: Some(-9223372036854775808)"));
            }
            let object = &line[r#"{"type":"ADDED","object":"#.len()..line.len() - 1];
            let body = format!(r#"{{"metadata":{{"resourceVersion":"1"}},"items":[{object}]}}"#);
            assert_eq!(fuzzing::list::<Pod, _>(body.as_bytes(), 1 << 20).is_ok(), ok, "{body}");
        }
    }
}

/// Untyped JSON keeps each number as serde_json reads it, on every path:
/// `-0` stays the float -0.0 (simd-json alone reads the integer 0), and long floats get
/// serde_json's rounding.
#[test]
fn regression_number_forms_in_untyped_json_decode_to_serde_json_values() {
    for (number, value) in [
        ("-0", "Number(-0.0)"),
        ("-0.0", "Number(-0.0)"),
        ("1e2", "Number(100.0)"),
        ("1.0", "Number(1.0)"),
        ("-9223372036854775808", "Number(-9223372036854775808)"),
        ("18446744073709551615", "Number(18446744073709551615)"),
        ("18446744073709551616", "Number(1.8446744073709552e+19)"),
        ("0.000000000000000000000000000000000000000000001", "Number(1.0000000000000001e-45)"),
    ] {
        let line = format!(r#"{{"type":"ADDED","object":{{"n":{number}}}}}"#);
        let got = fuzzing::watch_line::<serde_json::Value>(line.as_bytes()).unwrap();
        assert!(got.contains(&format!(r#""n": {value}"#)), "{number}: {got}");
        let body = format!(r#"{{"metadata":{{}},"items":[{{"n":{number}}}]}}"#);
        fuzzing::list::<serde_json::Value, _>(body.as_bytes(), 1 << 20).unwrap();
    }
    let line = r#"{"type":"ADDED","object":{"n":1e400}}"#;
    assert!(fuzzing::watch_line::<serde_json::Value>(line.as_bytes()).is_err());
}
