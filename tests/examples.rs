//! Runs the examples as a new user would — no arguments, against the embedded fake API server —
//! so they cannot rot, and checks that each shows what it promises.
//!
//! The binaries are the ones `cargo test --all-features` builds next to this test (a plain
//! `cargo test` builds every example first). Run alone, build them first:
//! `cargo build --examples --all-features && cargo test --all-features --test examples`.
#![cfg(feature = "testing")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use kube_watcher::testing::{FakeApiServer, Fault, Match};

/// kwatch's own unit tests (argument parsing, kubectl's columns) run from here: with
/// `test = true` cargo would build the example as a test harness instead of the binary the
/// tests below run.
#[allow(dead_code, unused_imports)]
#[path = "../examples/kwatch.rs"]
mod kwatch;

/// Bound on one example run; the longest (watch_pods) takes about 10 s on an idle machine.
const RUN_TIMEOUT: Duration = Duration::from_secs(90);

/// The example binary `name`, next to this test's own binary (`target/<profile>/examples`).
fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().and_then(|deps| deps.parent()).unwrap();
    let path = profile_dir.join("examples").join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    assert!(
        path.exists(),
        "{} is not built: run `cargo build --examples --all-features` (a plain `cargo test --all-features` builds it)",
        path.display()
    );
    let source = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples").join(format!("{name}.rs"));
    let modified = |p: &PathBuf| std::fs::metadata(p).and_then(|m| m.modified()).unwrap();
    assert!(
        modified(&source) <= modified(&path),
        "{} is older than its source: run `cargo build --examples --all-features` first",
        path.display()
    );
    path
}

fn command(name: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new(example(name));
    // The examples talk to 127.0.0.1 only; a proxy from the environment must not get in between.
    for var in ["HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "https_proxy", "http_proxy", "all_proxy"] {
        cmd.env_remove(var);
    }
    cmd.args(args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    cmd
}

/// A finished run.
#[derive(Debug)]
struct Output {
    status: ExitStatus,
    stdout: String,
    stderr: String,
}

/// Reads a pipe to the end on its own thread.
fn drain(mut pipe: impl Read + Send + 'static) -> thread::JoinHandle<String> {
    thread::spawn(move || {
        let mut text = String::new();
        let _ = pipe.read_to_string(&mut text);
        text
    })
}

/// Waits for `child` to exit within `timeout`; kills it and panics if it does not.
fn wait(mut child: Child, stdout: thread::JoinHandle<String>, timeout: Duration, what: &str) -> Output {
    let stderr = drain(child.stderr.take().unwrap());
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            let (out, err) = (stdout.join().unwrap(), stderr.join().unwrap());
            panic!("{what} did not finish within {timeout:?}\nstdout:\n{out}\nstderr:\n{err}");
        }
        thread::sleep(Duration::from_millis(50));
    };
    Output { status, stdout: stdout.join().unwrap(), stderr: stderr.join().unwrap() }
}

fn run(name: &str, args: &[&str]) -> Output {
    let mut child = command(name, args).spawn().unwrap();
    let stdout = drain(child.stdout.take().unwrap());
    let out = wait(child, stdout, RUN_TIMEOUT, name);
    assert!(out.status.success(), "{name} failed: {}\nstdout:\n{}\nstderr:\n{}", out.status, out.stdout, out.stderr);
    out
}

fn assert_shows(out: &Output, name: &str, expected: &[&str]) {
    for text in expected {
        assert!(
            out.stdout.contains(text),
            "{name} did not print {text:?}\nstdout:\n{}\nstderr:\n{}",
            out.stdout,
            out.stderr
        );
    }
}

#[test]
fn watch_pods_shows_the_workload_an_outage_and_a_relist_after_410() {
    let out = run("watch_pods", &[]);
    assert_shows(
        &out,
        "watch_pods",
        &[
            "listed   default/web-0",
            "-- demo: outage",
            "trouble (retrying)",
            "-- demo: history compaction",
            "deleted  default/debug-0",
        ],
    );
    let lists = out.stdout.matches("-- (re)list started").count();
    assert!(lists >= 2, "the 410 should cause a relist:\n{}", out.stdout);
}

#[test]
fn cache_reads_the_store_by_name_and_by_index_without_an_event_loop() {
    let out = run("cache", &[]);
    assert_shows(&out, "cache", &["3 pods cached", "on node-1: web-0, web-2", "get default/", "after 3 s of workload"]);
}

#[test]
fn select_loop_skips_the_frames_in_which_nothing_changed() {
    let out = run("select_loop", &["--seconds", "4"]);
    assert_shows(&out, "select_loop", &["frame 1: 3 pods; node-1: 2 running, node-2: 1 running", "frames,"]);
    let summary = out.stdout.lines().last().unwrap();
    let skipped: u64 = summary.split_whitespace().nth(2).and_then(|n| n.parse().ok()).unwrap();
    assert!(skipped > 0, "{summary}");
}

#[test]
fn dynamic_discovers_a_custom_resource_by_short_name_and_watches_it() {
    let out = run("dynamic", &[]);
    assert_shows(
        &out,
        "dynamic",
        &["\"wd\" is example.com/v1 Widget", "medium: spec {\"size\":5}", "changed: medium is now size 8"],
    );
}

#[test]
fn metadata_shows_metadata_only_stores_holding_less() {
    let out = run("metadata", &[]);
    let kb = |label: &str| -> u64 {
        let line = out.stdout.lines().find(|l| l.contains(label)).unwrap_or_else(|| panic!("{label}: {}", out.stdout));
        line.split_whitespace().rev().nth(1).and_then(|n| n.parse().ok()).unwrap()
    };
    let full = kb("full Pod objects");
    assert!(kb("metadata_watcher ") < full / 2, "{}", out.stdout);
    assert!(kb("no managedFields") < kb("metadata_watcher "), "{}", out.stdout);
}

/// kwatch --demo: kubectl's pod columns, the outage and the 410 recovered from, and Ctrl-C.
#[test]
#[cfg(unix)]
fn kwatch_demo_prints_changes_like_kubectl_and_stops_on_ctrl_c() {
    let mut child = command("kwatch", &["--demo", "--stats"]).spawn().unwrap();
    let (tx, rx) = mpsc::channel();
    let lines = BufReader::new(child.stdout.take().unwrap());
    let stdout = thread::spawn(move || {
        let mut all = String::new();
        for line in lines.lines().map_while(Result::ok) {
            let _ = tx.send(line.clone());
            all.push_str(&line);
            all.push('\n');
        }
        all
    });
    // The debug pod's deletion only reaches kwatch through the relist after the 410.
    let deadline = Instant::now() + RUN_TIMEOUT;
    let mut seen = Vec::new();
    while !seen.iter().any(|l: &String| l.starts_with("DELETED") && l.contains("debug-0")) {
        match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(line) => seen.push(line),
            Err(_) => {
                let _ = child.kill();
                panic!("no DELETED debug-0 line in time; stdout so far:\n{}", seen.join("\n"));
            }
        }
    }
    let interrupted = Instant::now();
    let pid = child.id().to_string();
    assert!(Command::new("kill").args(["-INT", &pid]).status().unwrap().success());
    let out = wait(child, stdout, Duration::from_secs(10), "kwatch after Ctrl-C");
    let stop_time = interrupted.elapsed();

    assert!(out.status.success(), "{}\n{}", out.status, out.stderr);
    assert!(stop_time < Duration::from_secs(3), "stopping took {stop_time:?}");
    let header = out.stdout.lines().next().unwrap();
    assert_eq!(header.split_whitespace().collect::<Vec<_>>(), ["EVENT", "NAME", "READY", "STATUS", "RESTARTS", "AGE"]);
    for expected in ["ADDED      web-0   1/1     Running", "Completed", "CrashLoopBackOff", "Terminating", "DELETED"] {
        assert!(out.stdout.contains(expected), "no {expected:?} in:\n{}", out.stdout);
    }
    let stats =
        ["# stats: reconnecting in", "# stats: relisting: 410 Gone", "deletions inferred: 1", "# stats: stopped after"];
    for expected in ["# demo: outage", "(retrying)"].into_iter().chain(stats) {
        assert!(out.stderr.contains(expected), "no {expected:?} in stderr:\n{}", out.stderr);
    }
}

/// Runs `kwatch po -n shop` against `server` through a kubeconfig file, until it exits.
fn kwatch_pods_in_shop(server: &FakeApiServer, label: &str) -> Output {
    let dir = std::env::temp_dir().join(format!("kube-watcher-kwatch-{label}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = dir.join("config");
    std::fs::write(&kubeconfig, server.kubeconfig()).unwrap();
    let mut child =
        command("kwatch", &["po", "-n", "shop", "--kubeconfig", kubeconfig.to_str().unwrap()]).spawn().unwrap();
    let stdout = drain(child.stdout.take().unwrap());
    let out = wait(child, stdout, RUN_TIMEOUT, &format!("kwatch po -n shop ({label})"));
    std::fs::remove_dir_all(&dir).unwrap();
    out
}

/// A forbidden list ends kwatch with one line naming the verb, the resource and how to check.
#[test]
fn kwatch_explains_a_forbidden_list_in_one_line() {
    let server = FakeApiServer::start();
    let message =
        r#"pods is forbidden: User "jane" cannot list resource "pods" in API group "" in the namespace "shop""#;
    server.push_fault(
        Match::Path("/api/v1/namespaces/shop/pods".into()),
        Fault::Status { code: 403, reason: "Forbidden".into(), message: message.into(), retry_after: None },
    );
    let out = kwatch_pods_in_shop(&server, "forbidden");

    assert_eq!(out.status.code(), Some(1), "{}", out.stderr);
    assert_eq!(out.stdout, "");
    assert_eq!(out.stderr.lines().count(), 1, "one line: {}", out.stderr);
    for expected in ["HTTP 403 Forbidden", "User \"jane\" cannot list", "kubectl auth can-i list pods -n shop"] {
        assert!(out.stderr.contains(expected), "no {expected:?} in: {}", out.stderr);
    }
}

#[test]
fn kwatch_rejects_an_unknown_flag_before_connecting() {
    let mut child = command("kwatch", &["pods", "--follow"]).spawn().unwrap();
    let stdout = drain(child.stdout.take().unwrap());
    let out = wait(child, stdout, RUN_TIMEOUT, "kwatch --follow");
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(out.stderr.trim(), "kwatch: unknown flag \"--follow\" (see kwatch --help)");
}

/// Issue 16 item 5: a transient error during start-up (here a 429 on discovery) is retried with
/// backoff and said on stderr; an error retrying cannot fix (the 403 on the list) ends kwatch.
#[test]
fn kwatch_retries_a_transient_error_at_start_up() {
    let server = FakeApiServer::start();
    server.push_fault(
        Match::Any,
        Fault::Status { code: 429, reason: "TooManyRequests".into(), message: "slow down".into(), retry_after: None },
    );
    let message =
        r#"pods is forbidden: User "jane" cannot list resource "pods" in API group "" in the namespace "shop""#;
    server.push_fault(
        Match::Path("/api/v1/namespaces/shop/pods".into()),
        Fault::Status { code: 403, reason: "Forbidden".into(), message: message.into(), retry_after: None },
    );
    let out = kwatch_pods_in_shop(&server, "retry");

    assert_eq!(out.status.code(), Some(1), "{}", out.stderr);
    let lines: Vec<&str> = out.stderr.lines().collect();
    assert_eq!(lines.len(), 2, "{}", out.stderr);
    assert!(lines[0].contains("429") && lines[0].contains("retrying in"), "{}", out.stderr);
    assert!(lines[1].contains("HTTP 403 Forbidden"), "{}", out.stderr);
}
