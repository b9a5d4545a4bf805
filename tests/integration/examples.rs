//! Runs the examples as a new user would — no arguments, against the embedded fake API server —
//! so they cannot rot, and checks that each shows what it promises.
//!
//! The binaries are the ones `cargo test` builds next to this test (it builds every example
//! first). Run alone, build them first: `cargo build --examples && cargo test --test integration
//! examples::`.
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
#[path = "../../examples/kwatch.rs"]
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
        "{} is not built: run `cargo build --examples` (a plain `cargo test` builds it)",
        path.display()
    );
    let source = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples").join(format!("{name}.rs"));
    let modified = |p: &PathBuf| std::fs::metadata(p).and_then(|m| m.modified()).unwrap();
    assert!(
        modified(&source) <= modified(&path),
        "{} is older than its source: run `cargo build --examples` first",
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
fn cache_reads_the_store_by_name_and_by_index_without_an_event_loop() {
    let out = run("cache", &[]);
    assert_shows(&out, "cache", &["3 pods cached", "on node-1: web-0, web-2", "get default/", "after 3 s of workload"]);
}

#[test]
fn projection_keeps_five_fields_of_each_pod_and_follows_the_workload() {
    let out = run("projection", &[]);
    assert_shows(
        &out,
        "projection",
        &["frame ", " pods take players; ready nodes: node-1, node-2", "=10.", "pods cached, 0 with managedFields"],
    );
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
    assert!(kb("Pod, by default") < full, "{}", out.stdout);
    assert!(kb("metadata_watcher, with") < full / 2, "{}", out.stdout);
    assert!(kb("metadata_watcher, no managedFields") < kb("metadata_watcher, with"), "{}", out.stdout);
}

/// Two replicas: one leads, the other stands by reading the lease once per retry period; the
/// leader stops and releases the lease, and the standby takes over.
#[test]
fn leader_hands_over_when_the_leader_stops() {
    let out = run("leader", &[]);
    assert_shows(
        &out,
        "leader",
        &[
            "replica-a: leading",
            "replica-b: standing by",
            "lease: holder \"replica-a\", transitions 0",
            "replica-a: no longer leading",
            "replica-b: leading",
            "takeover after stop:",
            "lease: holder \"replica-b\", transitions 1",
            "lease: holder \"\", transitions 1",
        ],
    );
    // (a's thread prints its `Lost` after its `stop()` returns, so b may print first.)
    let order = ["replica-a: leading", "replica-b: standing by", "replica-b: leading"];
    let at: Vec<usize> = order.iter().map(|line| out.stdout.find(line).unwrap()).collect();
    assert!(at.windows(2).all(|w| w[0] < w[1]), "{}", out.stdout);
}

/// Three replicas of a shard group split the pods; a fourth joins late and leaves; one is
/// killed: after each change every pod is in exactly one store (the example waits for that,
/// checking that none is in two), and each replica prints its share.
#[test]
fn shard_group_rebalances_on_join_leave_and_kill() {
    let out = run("shard_group", &["--pods", "600"]);
    assert_shows(
        &out,
        "shard_group",
        &[
            "3 replicas: settled in",
            "replica-d joined (3 -> 4): settled in",
            "  replica-d: ",
            "at rest: ",
            "replica-d stopped (4 -> 3): settled in",
            "replica-d: share None, 0 pods in its store",
            "replica-c killed (3 -> 2): settled in",
            "members in replica-a's eyes: [\"replica-a\", \"replica-b\"]",
        ],
    );
    assert!(!out.stdout.contains("BUG"), "{}", out.stdout);
}

/// kwatch --demo, with no other flag: kubectl's pod columns in fixed positions, and three rounds
/// of the script (each an outage and a 410) recovered from in view, then Ctrl-C.
#[test]
#[cfg(unix)]
fn kwatch_demo_keeps_showing_life_and_recovery_for_several_rounds() {
    let mut child = command("kwatch", &["--demo"]).spawn().unwrap();
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
    // Each round's debug pod is deleted unseen; its DELETED line comes from the relist after the
    // 410. Wait for the third round's: the demo must not have gone quiet by then.
    let deadline = Instant::now() + RUN_TIMEOUT;
    let mut seen = Vec::new();
    while !seen.iter().any(|l: &String| l.starts_with("DELETED") && l.contains("debug-2")) {
        match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(line) => seen.push(line),
            Err(_) => {
                let _ = child.kill();
                panic!("no DELETED debug-2 line in time; stdout so far:\n{}", seen.join("\n"));
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
    let mut lines = out.stdout.lines();
    let header = lines.next().unwrap();
    assert_eq!(header.split_whitespace().collect::<Vec<_>>(), ["EVENT", "NAME", "READY", "STATUS", "RESTARTS", "AGE"]);
    // Columns do not drift: every row's READY starts where the header's does.
    let ready_at = header.find("READY").unwrap();
    for line in lines {
        let fields: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(line.find(&format!(" {} ", fields[2])).map(|i| i + 1), Some(ready_at), "{line:?}\n{}", out.stdout);
    }
    let first: Vec<&str> = out.stdout.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(first[..4], ["ADDED", "web-0", "1/1", "Running"], "{}", out.stdout);
    for expected in ["Completed", "CrashLoopBackOff", "Terminating", "DELETED"] {
        assert!(out.stdout.contains(expected), "no {expected:?} in:\n{}", out.stdout);
    }
    // The recovery shows without --stats, in every round.
    let count = |text: &str| out.stderr.lines().filter(|l| l.contains(text)).count();
    assert!(count("# demo: outage") >= 3, "{}", out.stderr);
    assert!(count("# stats: relisting: 410 Gone") >= 3, "{}", out.stderr);
    assert!(count("deletions inferred: 1") >= 1, "{}", out.stderr);
    assert!(count("(retrying)") >= 3, "{}", out.stderr);
    assert_eq!(count("# stats: stopped after"), 0, "the summary is --stats only: {}", out.stderr);
}

/// A kubeconfig file for `server` in a directory of its own; removed on drop.
struct KubeconfigFile(PathBuf);

impl KubeconfigFile {
    fn new(server: &FakeApiServer, label: &str) -> KubeconfigFile {
        let dir = std::env::temp_dir().join(format!("kube-watcher-kwatch-{label}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("config"), server.kubeconfig()).unwrap();
        KubeconfigFile(dir)
    }

    fn path(&self) -> String {
        self.0.join("config").display().to_string()
    }
}

impl Drop for KubeconfigFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs kwatch with `args` against `server` through a kubeconfig file, until it exits.
fn kwatch_against(server: &FakeApiServer, label: &str, args: &[&str]) -> Output {
    let kubeconfig = KubeconfigFile::new(server, label);
    let path = kubeconfig.path();
    let args: Vec<&str> = args.iter().copied().chain(["--kubeconfig", path.as_str()]).collect();
    let mut child = command("kwatch", &args).spawn().unwrap();
    let stdout = drain(child.stdout.take().unwrap());
    wait(child, stdout, RUN_TIMEOUT, &format!("kwatch {args:?} ({label})"))
}

/// Runs `kwatch po -n shop` against `server` through a kubeconfig file, until it exits.
fn kwatch_pods_in_shop(server: &FakeApiServer, label: &str) -> Output {
    kwatch_against(server, label, &["po", "-n", "shop"])
}

/// An unknown resource type is named as such, with close matches, and no HTTP status that no
/// request returned; a context that does not exist is named with the flag, not a library type.
#[test]
fn kwatch_names_an_unknown_resource_and_a_missing_context_in_its_own_terms() {
    let server = FakeApiServer::start();
    let out = kwatch_against(&server, "unknown", &["podz"]);
    assert_eq!(out.status.code(), Some(1), "{}", out.stderr);
    assert!(out.stderr.contains("the server has no resource type named \"podz\""), "{}", out.stderr);
    assert!(out.stderr.contains("close matches: pods"), "{}", out.stderr);
    assert!(!out.stderr.contains("404"), "{}", out.stderr);

    let out = kwatch_against(&server, "context", &["pods", "--context", "nosuch"]);
    assert_eq!(out.status.code(), Some(1), "{}", out.stderr);
    assert!(out.stderr.contains("context \"nosuch\" (from --context) is not defined"), "{}", out.stderr);
    assert!(out.stderr.contains("(hint: the kubeconfig defines fake)"), "{}", out.stderr);
    assert!(!out.stderr.contains("KubeconfigOptions"), "{}", out.stderr);
}

/// `-o json` prints bare objects, as kubectl does; `--output-watch-events` wraps them in
/// `{"type", "object"}`. `--stats` does not count the initial list as a relist.
#[test]
#[cfg(unix)]
fn kwatch_json_output_follows_kubectl() {
    let server = FakeApiServer::start();
    let mut pod = k8s_openapi::api::core::v1::Pod::default();
    pod.metadata.name = Some("one".into());
    pod.metadata.namespace = Some("shop".into());
    server.create(&pod).unwrap();
    let kubeconfig = KubeconfigFile::new(&server, "json");
    let path = kubeconfig.path();
    for (extra, wrapped) in [(None, false), (Some("--output-watch-events"), true)] {
        let mut args = vec!["pods", "-n", "shop", "-o", "json", "--stats", "--kubeconfig", path.as_str()];
        args.extend(extra);
        let mut child = command("kwatch", &args).spawn().unwrap();
        let reader = child.stdout.take().unwrap();
        let mut values = serde_json::Deserializer::from_reader(reader).into_iter::<serde_json::Value>();
        let first = values.next().expect("one JSON value").unwrap();
        if wrapped {
            assert_eq!((first["type"].as_str(), first["object"]["kind"].as_str()), (Some("ADDED"), Some("Pod")));
        } else {
            assert_eq!(first["kind"], "Pod", "{first}");
            assert_eq!(first["metadata"]["name"], "one");
            assert!(first.get("type").is_none(), "{first}");
        }
        let pid = child.id().to_string();
        assert!(Command::new("kill").args(["-INT", &pid]).status().unwrap().success());
        let rest = thread::spawn(move || values.count().to_string());
        let out = wait(child, rest, RUN_TIMEOUT, "kwatch -o json");
        assert!(out.status.success(), "{out:?}");
        assert!(out.stderr.contains("0 relists after the initial list"), "{}", out.stderr);
    }
}

/// Two shard group members with one identity: kwatch, the second to come, says so and ends,
/// instead of both holding every pod.
#[test]
fn kwatch_refuses_to_join_a_group_as_an_identity_another_process_holds() {
    let server = FakeApiServer::start();
    let leases = kube_watcher::Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(
        kube_watcher::Client::from_url(&server.url()).unwrap(),
        "shop",
    );
    let timings = kube_watcher::LeaseTimings {
        lease_duration: Duration::from_secs(15),
        renew_deadline: Duration::from_secs(10),
        retry_period: Duration::from_millis(200),
    };
    let first = kube_watcher::ShardGroup::join(leases, "indexers", "replica-1", timings).unwrap();
    let deadline = Instant::now() + RUN_TIMEOUT;
    while first.shard().is_none() {
        assert!(Instant::now() < deadline, "the first member never held a share");
        std::thread::sleep(Duration::from_millis(20));
    }
    let out =
        kwatch_against(&server, "twin", &["po", "-n", "shop", "--shard-group", "indexers", "--identity", "replica-1"]);
    assert_eq!(out.status.code(), Some(1), "{}", out.stderr);
    assert!(out.stderr.contains("another process holds it as \"replica-1\""), "{}", out.stderr);
    assert!(first.shard().is_some(), "the first member kept its share");
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
    // The first request is a streaming list: a watch.
    for expected in ["HTTP 403 Forbidden", "User \"jane\" cannot list", "kubectl auth can-i watch pods -n shop"] {
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

/// A transient error during start-up (here a 429 on discovery) is retried with
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

/// Ctrl-C while kwatch is still retrying at start-up is a normal stop, and `--stats` still
/// prints its closing summary.
#[test]
#[cfg(unix)]
fn kwatch_stats_prints_its_summary_after_ctrl_c_during_start_up_retries() {
    let server = FakeApiServer::start();
    for _ in 0..20 {
        let fault =
            Fault::Status { code: 503, reason: "ServiceUnavailable".into(), message: "down".into(), retry_after: None };
        server.push_fault(Match::Any, fault);
    }
    let kubeconfig = KubeconfigFile::new(&server, "ctrl-c");
    let path = kubeconfig.path();
    let mut child = command("kwatch", &["pods", "--stats", "--kubeconfig", &path]).spawn().unwrap();
    let stdout = drain(child.stdout.take().unwrap());
    let (tx, rx) = mpsc::channel();
    let lines = BufReader::new(child.stderr.take().unwrap());
    let stderr = thread::spawn(move || {
        let mut all = String::new();
        for line in lines.lines().map_while(Result::ok) {
            let _ = tx.send(line.clone());
            all.push_str(&line);
            all.push('\n');
        }
        all
    });
    let first = rx.recv_timeout(RUN_TIMEOUT).expect("a retrying line");
    assert!(first.contains("503") && first.contains("retrying in"), "{first}");
    assert!(Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap().success());
    let deadline = Instant::now() + RUN_TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "kwatch did not stop after Ctrl-C");
        thread::sleep(Duration::from_millis(20));
    };
    let (stdout, stderr) = (stdout.join().unwrap(), stderr.join().unwrap());
    assert!(status.success(), "{status}\n{stderr}");
    assert_eq!(stdout, "");
    let last = stderr.lines().last().unwrap_or_default();
    assert!(last.starts_with("# stats: stopped after") && last.contains("before the watch started"), "{stderr}");
}

/// Starts fake_apiserver with `args` and reads its start-up output up to the `ready:` line.
/// Returns the child, the rest of its stdout, and the URL and kubeconfig path it announced.
fn start_fake_apiserver(args: &[&str], stdin: Stdio) -> (Child, thread::JoinHandle<String>, String, PathBuf) {
    let mut child = command("fake_apiserver", args).stdin(stdin).spawn().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        for line in lines.by_ref().map_while(Result::ok) {
            let ready = line.starts_with("ready: ");
            let _ = tx.send(line);
            if ready {
                break;
            }
        }
        let mut rest = String::new();
        for line in lines.map_while(Result::ok) {
            rest.push_str(&line);
            rest.push('\n');
        }
        let _ = tx.send(rest);
    });
    let ready = loop {
        let line = rx.recv_timeout(RUN_TIMEOUT).expect("fake_apiserver printed its ready line");
        if let Some(ready) = line.strip_prefix("ready: ") {
            break ready.to_string();
        }
    };
    let rest = thread::spawn(move || rx.recv().unwrap_or_default());
    let (url, kubeconfig) = ready.split_once(' ').unwrap();
    let url = url.strip_prefix("url=").unwrap().to_string();
    let kubeconfig = PathBuf::from(kubeconfig.strip_prefix("kubeconfig=").unwrap());
    (child, rest, url, kubeconfig)
}

fn list_pods(kubeconfig: &std::path::Path) -> usize {
    let client = kube_watcher::Client::from_kubeconfig_path(kubeconfig, &Default::default()).unwrap();
    let api: kube_watcher::Api<k8s_openapi::api::core::v1::Pod> = kube_watcher::Api::all(client);
    api.list(&Default::default()).unwrap().items.len()
}

/// Started the way a service is (standard input empty), it keeps serving, writes the kubeconfig
/// where asked, and stops on SIGTERM.
#[test]
#[cfg(unix)]
fn fake_apiserver_runs_as_a_service_until_sigterm() {
    let dir = std::env::temp_dir().join(format!("kube-watcher-fake-service-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let asked = dir.join("fake.kubeconfig");
    let (child, rest, url, kubeconfig) =
        start_fake_apiserver(&["--pods", "4", "--kubeconfig", asked.to_str().unwrap()], Stdio::null());
    assert_eq!(kubeconfig, asked);
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");
    // Standard input is /dev/null and has ended: the server must still answer.
    assert_eq!(list_pods(&kubeconfig), 4);
    assert_eq!(list_pods(&kubeconfig), 4, "still serving");

    let pid = child.id().to_string();
    assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    let out = wait(child, rest, RUN_TIMEOUT, "fake_apiserver after SIGTERM");
    assert!(out.status.success(), "{out:?}");
    assert!(out.stdout.contains("stopping (signal)"), "{out:?}");
    assert!(asked.exists(), "a kubeconfig written where asked stays");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--exit-on-eof` stops at the end of standard input, and a temporary kubeconfig goes with it.
#[test]
fn fake_apiserver_can_stop_at_end_of_input_and_removes_its_temporary_kubeconfig() {
    let (mut child, rest, _url, kubeconfig) = start_fake_apiserver(&["--exit-on-eof"], Stdio::piped());
    assert_eq!(list_pods(&kubeconfig), 10, "ten pods by default");
    drop(child.stdin.take());
    let out = wait(child, rest, RUN_TIMEOUT, "fake_apiserver after end of input");
    assert!(out.status.success(), "{out:?}");
    assert!(out.stdout.contains("stopping (end of input)"), "{out:?}");
    assert!(!kubeconfig.exists(), "{} was left behind", kubeconfig.display());
}

#[test]
fn fake_apiserver_help_describes_every_flag() {
    let out = run("fake_apiserver", &["--help"]);
    assert!(out.status.success(), "{out:?}");
    for flag in
        ["--port", "--tls", "--token", "--pods", "--churn", "--fault-rate", "--seed", "--kubeconfig", "--exit-on-eof"]
    {
        let described = out.stdout.lines().any(|l| l.trim_start().starts_with(flag) && l.len() > flag.len() + 10);
        assert!(described, "--help does not describe {flag}:\n{}", out.stdout);
    }
    let out = command("fake_apiserver", &["--churn", "-1"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("--churn"), "{stderr}");
}

/// `doc` (README.md or docs/guide.md) shows `examples/{name}.rs` as it is, as a `rust,no_run`
/// block (compiled there as a doctest, and here as the example that the tests run).
fn assert_doc_shows_example(doc: &str, name: &str) {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(root.join(doc)).unwrap();
    let source = std::fs::read_to_string(root.join("examples").join(format!("{name}.rs"))).unwrap();
    let block = format!("```rust,no_run\n{source}```\n");
    assert!(text.contains(&block), "{doc} does not show examples/{name}.rs as it is:\n{source}");
}

/// The README's program of several replicas (a shard group, a leader, no managedFields) is
/// examples/scale_out.rs cut short: each line that sets something up or stops it is the
/// example's own, so the two cannot drift apart.
#[test]
fn the_readmes_replica_program_is_the_scale_out_example_cut_short() {
    let readme = read_doc("README.md");
    let example = read_doc("examples/scale_out.rs");
    let start = readme.find("## Several replicas").unwrap();
    let block = &readme[start..];
    let block = &block[block.find("```rust").unwrap()..];
    let block = &block[..block[3..].find("```").unwrap()];
    let mut shared = 0;
    for line in block.lines().map(str::trim) {
        let setup = ["Client::try_default", "Api::namespaced", "ShardGroup::join", "Watcher::builder", ".config("]
            .into_iter()
            .chain([".without_managed_fields()", ".compressed_store()", ".start()?;", "LeaderElector::start"])
            .chain(["watcher.stop();", "group.stop();"])
            .any(|s| line.starts_with(s) || line.contains(&format!("= {s}")));
        if setup {
            assert!(example.lines().any(|l| l.trim() == line), "examples/scale_out.rs has no line {line:?}");
            shared += 1;
        }
    }
    assert!(shared >= 10, "only {shared} lines compared:\n{block}");
}

/// docs/guide.md's table of contents lists every `##` and `###` heading, in order, each with the
/// anchor GitHub gives it, and nothing else: a new section cannot be left out.
#[test]
fn the_guides_table_of_contents_lists_every_heading() {
    let guide = read_doc("docs/guide.md");
    // GitHub's anchors: lower case, punctuation dropped but for `-` and `_`, spaces as `-`.
    let anchor = |title: &str| -> String {
        title
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
            .map(|c| if c == ' ' { '-' } else { c })
            .collect()
    };
    let mut in_code = false;
    let mut headings = Vec::new();
    for line in guide.lines() {
        if line.starts_with("```") {
            in_code = !in_code;
        }
        if in_code {
            continue;
        }
        if let Some(title) = line.strip_prefix("## ") {
            headings.push(format!("- [{title}](#{})", anchor(title)));
        } else if let Some(title) = line.strip_prefix("### ") {
            headings.push(format!("  - [{title}](#{})", anchor(title)));
        }
    }
    let toc: Vec<String> = guide
        .lines()
        .skip_while(|l| !l.starts_with("- ["))
        .take_while(|l| l.starts_with("- [") || l.starts_with("  - ["))
        .map(str::to_owned)
        .collect();
    assert!(headings.len() > 10, "{headings:?}");
    assert_eq!(toc, headings, "docs/guide.md's table of contents (left) is not its headings (right)");
}

/// The README's Cargo.toml lists kube-watcher and k8s-openapi only, so its Rust code may use
/// nothing else (crossbeam's `select!` comes through `kube_watcher::crossbeam_channel`).
#[test]
fn readme_code_uses_only_the_crates_its_cargo_toml_lists() {
    let readme = std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    let mut in_rust = false;
    let mut uses = 0;
    for line in readme.lines() {
        if line.starts_with("```") {
            in_rust = line.starts_with("```rust");
            continue;
        }
        let Some(path) = line.trim_start().strip_prefix("use ").filter(|_| in_rust) else { continue };
        let root = path.split(['{', ':', ';']).next().unwrap();
        assert!(["std", "k8s_openapi", "kube_watcher"].contains(&root), "README uses {root:?}: {line}");
        uses += 1;
    }
    assert!(uses > 5, "found only {uses} use lines in the README's Rust blocks");
}

/// Runs example `name` with `KUBECONFIG=kubeconfig`, as a newcomer runs a README snippet against
/// fake_apiserver, and hands its stdout lines to `until` until it returns true; then kills it.
/// Returns the lines seen.
fn run_against(name: &str, kubeconfig: &std::path::Path, mut until: impl FnMut(&[String]) -> bool) -> Vec<String> {
    let mut child = command(name, &[]).env("KUBECONFIG", kubeconfig).spawn().unwrap();
    let stderr = drain(child.stderr.take().unwrap());
    let (tx, rx) = mpsc::channel();
    let lines = BufReader::new(child.stdout.take().unwrap());
    thread::spawn(move || {
        for line in lines.lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let deadline = Instant::now() + RUN_TIMEOUT;
    let mut seen = Vec::new();
    while !until(&seen) {
        match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(line) => seen.push(line),
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("{name}: not seen in time; stdout:\n{}\nstderr:\n{}", seen.join("\n"), stderr.join().unwrap());
            }
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    seen
}

/// Stops a fake_apiserver started by `start_fake_apiserver` (SIGTERM, or a kill elsewhere).
fn stop_fake_apiserver(mut child: Child) {
    #[cfg(unix)]
    let _ = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
    #[cfg(not(unix))]
    let _ = child.kill();
    let _ = child.wait();
}

/// What examples/scale_out prints of each replica, as last seen.
#[derive(Default)]
struct Replicas {
    /// Per replica: the pods in its store, whether caught up with its share, how many of them
    /// hold managedFields.
    store: [Option<(usize, bool, usize)>; 3],
    leading: [bool; 3],
    stopped: [bool; 3],
    lines: Vec<String>,
}

impl Replicas {
    fn take(&mut self, i: usize, line: &str) {
        self.lines.push(line.to_owned());
        let said = line.split_once(": ").map_or("", |(_, said)| said);
        if let Some((pods, rest)) = said.split_once(" pods in my store, ") {
            let fields = rest.split("; ").nth(1).and_then(|f| f.strip_suffix(" with managedFields"));
            self.store[i] =
                Some((pods.parse().unwrap(), rest.starts_with("caught up"), fields.unwrap().parse().unwrap()));
        }
        match said {
            "leading" => self.leading[i] = true,
            "no longer leading" => self.leading[i] = false,
            "stopped" => self.stopped[i] = true,
            _ => {}
        }
    }

    /// The replicas `alive` hold `total` pods between them, each caught up with its share and
    /// none with managedFields, and one of them leads.
    fn settled(&self, alive: &[usize], total: usize) -> bool {
        let held: Option<Vec<(usize, bool, usize)>> = alive.iter().map(|&i| self.store[i]).collect();
        held.is_some_and(|held| {
            held.iter().all(|&(_, caught_up, fields)| caught_up && fields == 0)
                && held.iter().map(|h| h.0).sum::<usize>() == total
        }) && alive.iter().filter(|&&i| self.leading[i]).count() == 1
    }
}

/// Three replicas of examples/scale_out against one fake_apiserver that filters by shard: they
/// split its pods (each pod in one store, none with managedFields) and one leads; the leader
/// stops on SIGTERM, and the two others take its pods and one of them the lead; then they stop.
#[test]
#[cfg(unix)]
fn scale_out_replicas_share_the_pods_elect_a_leader_and_hand_over_on_sigterm() {
    let (server, _rest, _url, kubeconfig) =
        start_fake_apiserver(&["--pods", "30", "--shard-filter", "--exit-on-eof"], Stdio::piped());
    let total = list_pods(&kubeconfig);
    let (tx, rx) = mpsc::channel::<(usize, String)>();
    let mut children = Vec::new();
    for (i, name) in ["replica-a", "replica-b", "replica-c"].into_iter().enumerate() {
        let mut child = command("scale_out", &["--identity", name]).env("KUBECONFIG", &kubeconfig).spawn().unwrap();
        let lines = BufReader::new(child.stdout.take().unwrap());
        let tx = tx.clone();
        thread::spawn(move || lines.lines().map_while(Result::ok).for_each(|l| drop(tx.send((i, l)))));
        children.push(child);
    }
    let mut seen = Replicas::default();
    let wait_for = |seen: &mut Replicas, what: &str, done: &dyn Fn(&Replicas) -> bool| {
        let deadline = Instant::now() + RUN_TIMEOUT;
        while !done(seen) {
            match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok((i, line)) => seen.take(i, &line),
                Err(_) => panic!("scale_out: {what} not seen in time:\n{}", seen.lines.join("\n")),
            }
        }
    };
    // The leader prints its task after its store's line: the replicas may have settled on
    // that line with the task's still on its way.
    let task = |s: &Replicas| s.lines.iter().any(|l| l.contains("leader's task: "));
    wait_for(&mut seen, "three replicas sharing the pods", &|s| s.settled(&[0, 1, 2], total) && task(s));
    let shares: Vec<&String> = seen.lines.iter().filter(|l| l.contains(": my share: ")).collect();
    assert!(!shares.is_empty() && shares.iter().all(|l| l.ends_with("% of the hash space")), "{shares:?}");

    // The leader is scaled down: SIGTERM, as a pod gets.
    let leader = seen.leading.iter().position(|l| *l).unwrap();
    let pid = children[leader].id().to_string();
    assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    let rest: Vec<usize> = (0..3).filter(|i| *i != leader).collect();
    seen.leading[leader] = false;
    wait_for(&mut seen, "the leader's clean stop", &|s| s.stopped[leader]);
    wait_for(&mut seen, "two replicas taking over", &|s| s.settled(&rest, total));

    for &i in &rest {
        let pid = children[i].id().to_string();
        assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    }
    wait_for(&mut seen, "every replica's clean stop", &|s| s.stopped.iter().all(|s| *s));
    for mut child in children {
        assert!(child.wait().unwrap().success());
    }
    stop_fake_apiserver(server);
}

/// The quick start, run as printed against fake_apiserver (its pods are labelled app=web, api
/// or db): it lists the web pods of namespace default, says it is in sync, then shows changes.
#[test]
fn watch_pods_is_the_readme_quick_start_and_shows_the_fake_servers_web_pods() {
    assert_doc_shows_example("README.md", "watch_pods");
    let (server, _rest, _url, kubeconfig) = start_fake_apiserver(&["--churn", "10", "--exit-on-eof"], Stdio::piped());
    let change = |l: &String| l.starts_with("changed  ") || l.starts_with("deleted  ");
    let lines = run_against("watch_pods", &kubeconfig, |seen| {
        let synced = seen.iter().position(|l| l.starts_with("in sync: "));
        synced.is_some_and(|at| seen[at..].iter().any(change))
    });
    let synced = lines.iter().position(|l| l.starts_with("in sync: ")).unwrap();
    let listed = lines[..synced].iter().filter(|l| l.starts_with("listed   pod-")).count();
    assert!(listed > 0, "no web pod listed:\n{}", lines.join("\n"));
    assert_eq!(lines[synced], format!("in sync: {listed} pods cached"), "{}", lines.join("\n"));
    stop_fake_apiserver(server);
}

/// The guide's select! loop, run as printed against fake_apiserver: a line per frame in which
/// a store changed, and none for the frames in between.
#[test]
fn select_loop_is_the_guides_loop_and_skips_the_frames_in_which_nothing_changed() {
    assert_doc_shows_example("docs/guide.md", "select_loop");
    let (server, _rest, _url, kubeconfig) = start_fake_apiserver(&["--churn", "2", "--exit-on-eof"], Stdio::piped());
    let frame_number = |l: &String| l.strip_prefix("frame ")?.split(':').next()?.parse::<u64>().ok();
    let lines = run_against("select_loop", &kubeconfig, |seen| {
        let frames: Vec<u64> = seen.iter().filter_map(frame_number).collect();
        frames.windows(2).any(|w| w[1] > w[0] + 1) && seen.iter().any(|l| l.ends_with(" pods on 2 nodes"))
    });
    assert!(lines.iter().filter_map(frame_number).count() >= 2, "{}", lines.join("\n"));
    stop_fake_apiserver(server);
}

/// Pods that fake_apiserver's churn writes keep a status, so kubectl shows them as Running.
#[test]
fn fake_apiserver_churn_keeps_pod_status() {
    let (server, _rest, _url, kubeconfig) =
        start_fake_apiserver(&["--pods", "3", "--churn", "20", "--exit-on-eof"], Stdio::piped());
    let client = kube_watcher::Client::from_kubeconfig_path(&kubeconfig, &Default::default()).unwrap();
    let api: kube_watcher::Api<k8s_openapi::api::core::v1::Pod> = kube_watcher::Api::all(client);
    let watcher = kube_watcher::Watcher::new(api, kube_watcher::Config::default()).unwrap();
    let deadline = Instant::now() + RUN_TIMEOUT;
    let (mut synced, mut changed) = (false, 0);
    while changed < 5 {
        let event = watcher.recv_timeout(deadline.saturating_duration_since(Instant::now())).unwrap().unwrap();
        let pod = match event {
            kube_watcher::Event::InitDone => {
                synced = true;
                continue;
            }
            kube_watcher::Event::Apply(pod) | kube_watcher::Event::InitApply(pod) => pod,
            _ => continue,
        };
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        assert_eq!(phase, Some("Running"), "{:?} has no status", pod.metadata.name);
        let ready = pod.status.as_ref().and_then(|s| s.container_statuses.as_ref()).is_some_and(|c| c[0].ready);
        assert!(ready, "{:?}", pod.metadata.name);
        changed += usize::from(synced);
    }
    watcher.stop();
    stop_fake_apiserver(server);
}

/// `-o name` prints KIND/NAME alone, as kubectl does, so the output pipes into other commands.
#[test]
#[cfg(unix)]
fn kwatch_name_output_is_pipeable() {
    let server = FakeApiServer::start();
    let mut pod = k8s_openapi::api::core::v1::Pod::default();
    pod.metadata.name = Some("one".into());
    pod.metadata.namespace = Some("shop".into());
    server.create(&pod).unwrap();
    let kubeconfig = KubeconfigFile::new(&server, "name");
    let path = kubeconfig.path();
    let mut child = command("kwatch", &["pods", "-n", "shop", "-o", "name", "--kubeconfig", &path]).spawn().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    lines.read_line(&mut first).unwrap();
    assert_eq!(first, "pod/one\n");
    let pid = child.id().to_string();
    assert!(Command::new("kill").args(["-INT", &pid]).status().unwrap().success());
    let rest = thread::spawn(move || {
        let mut text = String::new();
        let _ = lines.read_to_string(&mut text);
        text
    });
    let out = wait(child, rest, RUN_TIMEOUT, "kwatch -o name");
    assert!(out.status.success(), "{out:?}");
}

/// One raw HTTP/1.1 GET to the bench server: (headers, chunk sizes, body with the chunked
/// framing removed). The read timeout bounds a server that stops answering.
fn bench_get(url: &str, path: &str, gzip: bool) -> (String, Vec<usize>, Vec<u8>) {
    bench_get_with(url, path, if gzip { "Accept-Encoding: gzip\r\n" } else { "" })
}

/// [`bench_get`] with the request headers `headers` (each line ending in CRLF).
fn bench_get_with(url: &str, path: &str, headers: &str) -> (String, Vec<usize>, Vec<u8>) {
    let (headers, mut reader) = bench_open(url, path, headers);
    assert!(headers.contains("Transfer-Encoding: chunked"), "{headers}");
    let (mut chunks, mut body) = (Vec::new(), Vec::new());
    loop {
        let data = read_chunk(&mut reader);
        if data.is_empty() {
            return (headers, chunks, body);
        }
        chunks.push(data.len());
        body.extend_from_slice(&data);
    }
}

/// Sends one GET of `path` (with `headers`, each line ending in CRLF) to the bench server and
/// reads the answer's head: (the head, the connection to read the body from). The read timeout
/// bounds a server that stops answering.
fn bench_open(url: &str, path: &str, headers: &str) -> (String, BufReader<std::net::TcpStream>) {
    use std::io::Write;
    let addr = url.strip_prefix("http://").unwrap();
    let conn = std::net::TcpStream::connect(addr).unwrap();
    conn.set_read_timeout(Some(RUN_TIMEOUT)).unwrap();
    write!(&conn, "GET {path} HTTP/1.1\r\nHost: {addr}\r\n{headers}\r\n").unwrap();
    let mut reader = BufReader::new(conn);
    let mut head = String::new();
    while !head.ends_with("\r\n\r\n") {
        assert!(reader.read_line(&mut head).unwrap() > 0, "the connection closed in the headers: {head}");
    }
    (head, reader)
}

/// The data of the next chunk of a chunked body; empty for the last chunk.
fn read_chunk(reader: &mut impl BufRead) -> Vec<u8> {
    let mut size = String::new();
    reader.read_line(&mut size).unwrap();
    let size = usize::from_str_radix(size.trim_end(), 16).unwrap();
    let mut data = vec![0; size + 2];
    reader.read_exact(&mut data).unwrap();
    assert_eq!(&data[size..], b"\r\n", "a chunk ends with CRLF");
    data.truncate(size);
    data
}

/// Runs `bench --serve ARGS` and `check` with the URL it printed; the server is killed
/// afterwards, whether `check` passed or panicked.
fn with_bench_server(args: &[&str], check: impl FnOnce(&str)) {
    let mut server = command("bench", args).spawn().unwrap();
    let mut stdout = BufReader::new(server.stdout.take().unwrap());
    let mut url = String::new();
    stdout.read_line(&mut url).unwrap();
    let url = url.trim().to_owned();
    // The panic is resumed below, after the kill: nothing observes a half-done state.
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(&url)));
    let _ = server.kill();
    let _ = server.wait();
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

/// The bench server (examples/bench.rs --serve) caps pages, gzips them when asked (only then),
/// sends a list in large chunks rather than a chunk per pod, and the bench client syncs through
/// it and names its allocator.
#[test]
fn bench_server_caps_pages_gzips_when_asked_and_the_client_syncs_through_it() {
    let args = ["--serve", "--pods", "300", "--events", "20", "--port", "0", "--gzip", "--page-cap", "100"];
    with_bench_server(&args, |url| {
        assert!(url.starts_with("http://127.0.0.1:"), "bench --serve printed {url:?}");
        let page = |gzip: bool| {
            let (headers, chunks, body) = bench_get(url, "/api/v1/pods?limit=500&continue=100", gzip);
            assert_eq!(headers.contains("Content-Encoding: gzip"), gzip, "{headers}");
            let body = if gzip {
                let mut plain = Vec::new();
                flate2::read::GzDecoder::new(&body[..]).read_to_end(&mut plain).unwrap();
                plain
            } else {
                body
            };
            let list: serde_json::Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(list["items"].as_array().unwrap().len(), 100, "--page-cap 100 whatever limit asks");
            assert_eq!(list["metadata"]["continue"], "200");
            chunks
        };
        let plain_chunks = page(false);
        assert!(plain_chunks.len() < 20, "100 pods of ~6 KB in large chunks, not one each: {plain_chunks:?}");
        page(true);
        // Through the capped pages: paged lists (the default is a streaming list).
        let args = ["--url", url, "--pods", "300", "--events", "20", "--paged-lists", "--with-managed-fields"];
        let out = run("bench", &args);
        // Built here, the bench keeps glibc's malloc (benches/alloc builds it with another).
        assert!(out.stdout.contains(r#""allocator":"glibc""#), "{out:?}");
        assert!(out.stdout.contains(r#""list":"paged""#), "{out:?}");
        assert!(out.stdout.contains(r#""cache_len":300"#), "{out:?}");
        assert!(out.stdout.contains(r#""skip":"none","sync_cpu_s":"#), "{out:?}");
        // The server sent its events to the first watch: this client only syncs, by default.
        let skipping = run("bench", &["--url", url, "--pods", "300", "--events", "0"]);
        assert!(skipping.stdout.contains(r#""skip":"managedFields""#), "{skipping:?}");
        assert!(skipping.stdout.contains(r#""list":"streaming""#), "{skipping:?}");
        assert!(skipping.stdout.contains(r#""cpu_s_per_100k_synced":"#), "{skipping:?}");
    });
}

/// Rendered as they are sent (`--render-as-sent`, what the bench server does above 200k pods),
/// pods come from templates with holes for each pod's own values: the lists it sends are the
/// same bytes, JSON and protobuf, realistic and varied pods, as those of the pods the
/// generators render at start; and a filtering server's shard of them is the same pods.
#[test]
fn bench_server_renders_pods_as_sent_as_the_generators_do() {
    const PROTOBUF: &str = "Accept: application/vnd.kubernetes.protobuf, application/json\r\n";
    let shard = kube_watcher::Shard::of(1, 4).unwrap();
    for varied in [&[][..], &["--varied"]] {
        let lists = |extra: &[&str]| {
            let mut args = vec!["--serve", "--pods", "600", "--events", "0", "--port", "0", "--filter-shards"];
            args.extend(varied);
            args.extend(extra);
            let mut bodies = Vec::new();
            with_bench_server(&args, |url| {
                let shard = shard.selector().replace(' ', "%20").replace('\'', "%27");
                for path in
                    ["/api/v1/pods?limit=1000".to_owned(), format!("/api/v1/pods?limit=1000&shardSelector={shard}")]
                {
                    for headers in ["", PROTOBUF] {
                        let (head, _, body) = bench_get_with(url, &path, headers);
                        assert!(head.starts_with("HTTP/1.1 200 "), "{head}");
                        bodies.push(body);
                    }
                }
            });
            bodies
        };
        let (at_start, as_sent) = (lists(&[]), lists(&["--render-as-sent"]));
        let json: serde_json::Value = serde_json::from_slice(&at_start[0]).unwrap();
        assert_eq!(json["items"].as_array().map(Vec::len), Some(600), "{varied:?}");
        let uids = |list: &serde_json::Value| -> Vec<String> {
            let items = list["items"].as_array().unwrap();
            items.iter().map(|p| p["metadata"]["uid"].as_str().unwrap().to_owned()).collect()
        };
        let ours: Vec<String> = uids(&json).into_iter().filter(|uid| shard.contains(uid)).collect();
        assert!(!ours.is_empty() && ours.len() < 600, "{} of 600 pods in shard 1 of 4 ({varied:?})", ours.len());
        assert_eq!(uids(&serde_json::from_slice(&at_start[2]).unwrap()), ours, "{varied:?}");
        for (k, (a, b)) in at_start.iter().zip(&as_sent).enumerate() {
            assert!(a == b, "answer {k} differs as sent ({varied:?}): {} against {} bytes", b.len(), a.len());
        }
    }
}

/// A streaming list (`sendInitialEvents=true`, client-go's informers' default) from the bench
/// server: every pod as ADDED, the BOOKMARK that ends them at the list's resourceVersion, then the
/// watch's events, each object with its kind; without `allowWatchBookmarks` it is refused.
#[test]
fn bench_server_answers_a_streaming_list() {
    let args = ["--serve", "--pods", "3", "--events", "2", "--port", "0"];
    with_bench_server(&args, |url| {
        let get = |query: &str| bench_open(url, &format!("/api/v1/pods?{query}"), "");
        let (refused, _) = get("watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan");
        assert!(refused.starts_with("HTTP/1.1 422 "), "{refused}");
        let (headers, mut reader) =
            get("watch=1&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan");
        assert!(headers.starts_with("HTTP/1.1 200 ") && headers.contains("Transfer-Encoding: chunked"), "{headers}");
        // The watch stays open after its events: read chunks until six lines have come.
        let (mut body, mut events) = (Vec::new(), Vec::<serde_json::Value>::new());
        while events.len() < 6 {
            let data = read_chunk(&mut reader);
            assert!(!data.is_empty(), "the watch ended after {events:?}");
            body.extend_from_slice(&data);
            while let Some(end) = body.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = body.drain(..=end).collect();
                events.push(serde_json::from_slice(&line).unwrap());
            }
        }
        let types: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
        assert_eq!(types, ["ADDED", "ADDED", "ADDED", "BOOKMARK", "MODIFIED", "MODIFIED"]);
        let bookmark = &events[3]["object"]["metadata"];
        assert_eq!(bookmark["annotations"]["k8s.io/initial-events-end"], "true");
        assert_eq!(bookmark["resourceVersion"], "1000000", "the list's resourceVersion");
        for e in &events {
            assert_eq!((e["object"]["kind"].as_str(), e["object"]["apiVersion"].as_str()), (Some("Pod"), Some("v1")));
        }
    });
}

/// `bench --relists`: the server answers watches with a 410 and lists again (some pods changed
/// with `--relist-changed`); the client times each relist on both paths and reports memory.
#[test]
fn bench_relists_are_served_and_timed() {
    for path in [None, Some("--store-only")] {
        let args =
            ["--serve", "--pods", "200", "--events", "0", "--port", "0", "--relists", "2", "--relist-changed", "10"];
        with_bench_server(&args, |url| {
            let mut client = vec!["--url", url, "--pods", "200", "--events", "0", "--relists", "2"];
            client.extend(path);
            let out = run("bench", &client);
            let line: serde_json::Value =
                serde_json::from_str(out.stdout.trim()).unwrap_or_else(|e| panic!("{e}: {out:?}"));
            assert_eq!(line["mode"], "relists", "{out:?}");
            assert_eq!(line["relist_ms"].as_array().map(Vec::len), Some(2), "{out:?}");
            assert!(line["relist_peak_rss_kb"].as_u64().is_some_and(|kb| kb > 0), "{out:?}");
        });
    }
}

/// `text` with every run of whitespace made one space, so that a sentence matches across the
/// line breaks of a Markdown paragraph.
fn prose(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn read_doc(path: &str) -> String {
    std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(path)).unwrap()
}

/// The README's "Testing your own code" example is a test file, readme_testing.rs here as it is
/// (after that file's own `//!` lines): a `#[test]` function, which `cargo test` runs (here as a
/// module of this binary; in a user's `tests/`, as a binary of its own), not a `main` that a
/// tests/ file would never call.
#[test]
fn the_readmes_testing_example_is_a_test_file_that_cargo_test_runs() {
    let readme = read_doc("README.md");
    let file = read_doc("tests/integration/readme_testing.rs");
    let code: String =
        file.lines().skip_while(|l| l.starts_with("//!") || l.is_empty()).map(|l| format!("{l}\n")).collect();
    assert!(code.contains("#[test]\nfn ") && !code.contains("fn main"), "{code}");
    assert!(
        readme.contains(&format!("```rust,no_run\n{code}```\n")),
        "README.md does not show tests/integration/readme_testing.rs as it is:\n{code}"
    );
    assert!(
        prose(&readme)
            .contains("A test file of yours, such as `tests/cache.rs` (`cargo test` runs each `#[test]` function)")
    );
}

/// What the README says of the quick start against fake_apiserver holds: 10 pods in three
/// namespaces, of which the quick start lists the 2 labelled `app=web` in `default`; and a pod
/// created afterwards prints as `changed` (an `Apply`).
#[test]
fn the_readme_explains_the_quick_starts_count_and_why_a_new_pod_prints_as_changed() {
    let readme = prose(&read_doc("README.md"));
    for sentence in [
        "The server holds 10 pods in namespaces default, shop and ops; the quick start watches those labelled `app=web` in `default`, so it lists pod-0 and pod-9: `in sync: 2 pods cached`.",
        "`Apply` is a creation or a change: a new pod prints as `changed`.",
        "cargo run --example watch_pods # runs until Ctrl-C",
    ] {
        assert!(readme.contains(sentence), "README.md no longer says: {sentence}");
    }
    // fake_apiserver's own pods, as the README counts them.
    let (server, _rest, _url, kubeconfig) = start_fake_apiserver(&["--exit-on-eof"], Stdio::piped());
    let lines = run_against("watch_pods", &kubeconfig, |seen| seen.iter().any(|l| l.starts_with("in sync: ")));
    let mut listed: Vec<&str> = lines.iter().filter_map(|l| l.strip_prefix("listed   ")).collect();
    listed.sort_unstable();
    assert_eq!(listed, ["pod-0", "pod-9"], "{}", lines.join("\n"));
    assert_eq!(lines.last().unwrap(), "in sync: 2 pods cached");
    stop_fake_apiserver(server);

    // A pod created after the sync comes as an Apply: "changed".
    let server = FakeApiServer::start();
    let kubeconfig = KubeconfigFile::new(&server, "created");
    let mut created = false;
    let lines = run_against("watch_pods", std::path::Path::new(&kubeconfig.path()), |seen| {
        if !created && seen.iter().any(|l| l.starts_with("in sync: ")) {
            let mut pod = k8s_openapi::api::core::v1::Pod::default();
            pod.metadata.name = Some("new".into());
            pod.metadata.namespace = Some("default".into());
            pod.metadata.labels = Some([("app".to_string(), "web".to_string())].into());
            server.create(&pod).unwrap();
            created = true;
        }
        seen.iter().any(|l| l.starts_with("changed "))
    });
    assert_eq!(lines.last().unwrap(), "changed  new", "{}", lines.join("\n"));
}

/// The README's demo command ends with a summary on Ctrl-C (`--stats`); the real-cluster
/// command is in a block of its own, marked as such.
#[test]
fn the_readmes_demo_command_prints_a_summary_on_ctrl_c() {
    let readme = read_doc("README.md");
    assert!(readme.contains("cargo run --example kwatch --features testing -- --demo --stats"), "{readme}");
    assert!(prose(&readme).contains("Ctrl-C prints a summary"));
    assert!(readme.contains(&format!(
        "```sh\n{REAL_CLUSTER} (wherever kubectl points)\ncargo run --example kwatch -- pods -A --stats\n```"
    )));
}

/// lib.rs, the guide and the builder agree: the compact stores keep protobuf for built-in types;
/// and the guide gives `stop()`'s 2 s as lib.rs does, as the time `stop` waits, not a connect's.
#[test]
fn the_docs_agree_on_what_compact_stores_keep_and_how_long_stop_waits() {
    let lib = prose(&read_doc("src/lib.rs").replace("//!", ""));
    let guide = prose(&read_doc("docs/guide.md"));
    for (name, text) in [("src/lib.rs", &lib), ("docs/guide.md", &guide)] {
        assert!(text.contains("protobuf for built-in types, JSON otherwise"), "{name}");
        assert!(!text.contains("compressed JSON") && !text.contains("plain JSON"), "{name}");
    }
    assert!(lib.contains("`stop` then gives up waiting after about 2 s"));
    assert!(guide.contains("`stop` then gives up waiting for the thread after about 2 s"));
    assert!(!guide.contains("so at most about 2 s"));
    assert!(guide.contains("The fake server runs no controllers"));
}

/// The first line of a shell block meant for a real cluster, which
/// `shell_blocks_for_the_fake_server_run_as_printed` skips.
const REAL_CLUSTER: &str = "# on a real cluster";

/// The first line of a shell block for the real kube-apiserver that scripts/apiserver.sh builds
/// (Go, minutes): skipped too; tests/real/ and `scripts/apiserver.sh test` run that server.
#[cfg_attr(not(all(target_os = "linux", feature = "simd")), allow(dead_code))]
const REAL_API_SERVER: &str = "# on a real API server";

/// A ```` ```sh ```` block of a document: where it starts (1-based line of its first command)
/// and its lines.
#[cfg_attr(not(all(target_os = "linux", feature = "simd")), allow(dead_code))]
struct ShellBlock {
    at: String,
    lines: Vec<String>,
}

#[cfg_attr(not(all(target_os = "linux", feature = "simd")), allow(dead_code))]
fn shell_blocks(doc: &str) -> Vec<ShellBlock> {
    let text = read_doc(doc);
    let mut blocks = Vec::new();
    let mut open: Option<ShellBlock> = None;
    for (i, line) in text.lines().enumerate() {
        match open.take() {
            None if line == "```sh" => open = Some(ShellBlock { at: format!("{doc}:{}", i + 2), lines: Vec::new() }),
            None => {}
            Some(block) if line == "```" => blocks.push(block),
            Some(mut block) => {
                block.lines.push(line.to_string());
                open = Some(block);
            }
        }
    }
    assert!(open.is_none(), "{doc}: a ```sh block is not closed");
    blocks
}

/// What a command that runs until Ctrl-C must have shown before it gets one, and after.
#[cfg_attr(not(all(target_os = "linux", feature = "simd")), allow(dead_code))]
struct Interactive {
    /// The command's output so far (stdout and stderr lines) shows it running as described.
    ready: fn(&[String]) -> bool,
    /// Its whole output, after Ctrl-C.
    after: fn(&[String]) -> bool,
}

/// The commands of the documents that run until Ctrl-C, by what they run.
#[cfg_attr(not(all(target_os = "linux", feature = "simd")), allow(dead_code))]
fn interactive(command: &str) -> Interactive {
    let any = |_: &[String]| true;
    if command.contains("--example watch_pods") {
        // Listed, in sync, then the churn's changes (as the README's sentence under it says).
        Interactive {
            ready: |out| {
                let synced = out.iter().position(|l| l.starts_with("in sync: "));
                synced.is_some_and(|at| {
                    out[at..].iter().any(|l| l.starts_with("changed  ") || l.starts_with("deleted  "))
                })
            },
            after: any,
        }
    } else if command.contains("--example kwatch") && command.contains("--demo") {
        Interactive {
            ready: |out| out.iter().any(|l| l.starts_with("ADDED ")),
            after: |out| out.iter().any(|l| l.starts_with("(stderr) # stats: stopped after")),
        }
    } else if command.contains("kubectl get") && command.contains("--watch") {
        Interactive { ready: |out| out.iter().any(|l| l.starts_with("NAMESPACE ")), after: any }
    } else {
        panic!("no expectation for a command that runs until Ctrl-C: {command}")
    }
}

/// One line of output from the shell or its commands.
#[cfg_attr(not(all(target_os = "linux", feature = "simd")), allow(dead_code))]
enum Said {
    Out(String),
    Err(String),
}

/// The direct children of process `parent` (from /proc).
#[cfg(target_os = "linux")]
#[cfg_attr(not(all(target_os = "linux", feature = "simd")), allow(dead_code))]
fn children(parent: u32) -> Vec<u32> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
        // "pid (comm) state ppid ...": comm may hold spaces and parentheses, so read after the last ')'.
        let ppid = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<u32>().ok());
        if ppid == Some(parent) {
            pids.push(pid);
        }
    }
    pids
}

/// A shell running a block; on drop (a failed assertion included) its jobs and itself are ended.
#[cfg(target_os = "linux")]
#[cfg_attr(not(all(target_os = "linux", feature = "simd")), allow(dead_code))]
struct Shell {
    bash: Child,
    jobs: Vec<u32>,
}

#[cfg(target_os = "linux")]
impl Drop for Shell {
    fn drop(&mut self) {
        for job in &self.jobs {
            let _ = Command::new("kill").args(["-s", "TERM", "--", &format!("-{job}")]).stderr(Stdio::null()).status();
        }
        let _ = self.bash.kill();
        let _ = self.bash.wait();
    }
}

/// Runs `block` as a newcomer runs it in a terminal: one bash, each line in turn, and Ctrl-C
/// (SIGINT to the foreground job only) for a command whose comment says it runs until Ctrl-C,
/// once its output shows it doing what the documents say. `set -m` gives each command a job of
/// its own, as in a terminal, and `trap : INT` keeps the shell going when a job ends on Ctrl-C,
/// as an interactive shell does. The one change to the text: `/tmp/` is a directory of this run,
/// so that runs on one machine do not share files.
#[cfg(target_os = "linux")]
#[cfg_attr(not(all(target_os = "linux", feature = "simd")), allow(dead_code))]
fn run_shell_block(block: &ShellBlock, scratch: &std::path::Path) {
    use std::io::Write;
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    // As from a terminal: Ctrl-C not ignored, even where this test was started with it ignored
    // (by a shell that ran it in the background), which bash could not undo.
    let mut cmd = Command::new("env");
    cmd.args(["--default-signal=INT", "bash", "--noprofile", "--norc", "-s"]);
    cmd.current_dir(&root).env_remove("KUBECONFIG");
    // Nor what cargo sets for this test (a build script that reads CARGO_PKG_NAME would make the
    // blocks' cargo commands rebuild it, and the next `cargo test` rebuild it back).
    for (var, _) in std::env::vars_os() {
        let name = var.to_string_lossy();
        let set_for_tests =
            ["CARGO", "CARGO_MANIFEST_DIR", "CARGO_MANIFEST_PATH", "CARGO_CRATE_NAME", "CARGO_BIN_NAME"]
                .into_iter()
                .chain(["CARGO_PRIMARY_PACKAGE", "CARGO_TARGET_TMPDIR", "CARGO_RUSTC_CURRENT_DIR", "LD_LIBRARY_PATH"])
                .any(|v| v == name);
        if set_for_tests || name.starts_with("CARGO_PKG_") {
            cmd.env_remove(&var);
        }
    }
    for var in ["HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "https_proxy", "http_proxy", "all_proxy"] {
        cmd.env_remove(var);
    }
    cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut shell = Shell { bash: cmd.spawn().unwrap(), jobs: Vec::new() };
    let bash_pid = shell.bash.id();
    let mut stdin = shell.bash.stdin.take().unwrap();
    let (tx, rx) = mpsc::channel();
    let out = BufReader::new(shell.bash.stdout.take().unwrap());
    let err = BufReader::new(shell.bash.stderr.take().unwrap());
    let tx2 = tx.clone();
    thread::spawn(move || out.lines().map_while(Result::ok).for_each(|l| drop(tx.send(Said::Out(l)))));
    thread::spawn(move || err.lines().map_while(Result::ok).for_each(|l| drop(tx2.send(Said::Err(l)))));
    let mut transcript = Vec::new();
    let next = |transcript: &mut Vec<String>, what: &str, deadline: Instant| -> Said {
        let said = rx
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .unwrap_or_else(|_| panic!("{}: no {what} in time; so far:\n{}", block.at, transcript.join("\n")));
        match &said {
            Said::Out(l) => transcript.push(l.clone()),
            Said::Err(l) => transcript.push(format!("(stderr) {l}")),
        }
        said
    };
    writeln!(stdin, "set -m; trap : INT").unwrap();
    let tmp = format!("{}/", scratch.display());
    for line in &block.lines {
        let text = line.replace("/tmp/", &tmp);
        let (command, comment) = text.split_once(" #").unwrap_or((&text, ""));
        let command = command.trim();
        if command.is_empty() || command.starts_with('#') {
            continue;
        }
        transcript.push(format!("$ {line}"));
        let started = transcript.len();
        let deadline = Instant::now() + RUN_TIMEOUT;
        writeln!(stdin, "{text}").unwrap();
        if command.ends_with('&') {
            writeln!(stdin, "echo \"@@job $!\"").unwrap();
        }
        writeln!(stdin, "echo \"@@done $?\"").unwrap();
        let until_ctrl_c = comment.contains("Ctrl-C").then(|| interactive(command));
        if let Some(expect) = &until_ctrl_c {
            while !(expect.ready)(&transcript[started..]) {
                let _ = next(&mut transcript, "output showing it at work", deadline);
            }
            let jobs = shell.jobs.clone();
            let foreground: Vec<u32> = children(bash_pid).into_iter().filter(|p| !jobs.contains(p)).collect();
            assert_eq!(foreground.len(), 1, "{}: one foreground job, not {foreground:?}", block.at);
            let _ = Command::new("kill").args(["-s", "INT", "--", &format!("-{}", foreground[0])]).status();
        }
        let end_by = Instant::now() + RUN_TIMEOUT;
        let status = loop {
            match next(&mut transcript, "end of the command", end_by) {
                Said::Out(l) if l.starts_with("@@job ") => shell.jobs.push(l[6..].parse().unwrap()),
                Said::Out(l) if l.starts_with("@@done ") => break l[7..].parse::<i32>().unwrap(),
                _ => {}
            }
        };
        if let Some(expect) = until_ctrl_c {
            // Ended by Ctrl-C, whatever its status (the signal's 130, kubectl's 1, kwatch's 0).
            // Its last stderr lines may arrive after the shell's `@@done` on stdout: two pipes,
            // two reader threads, so wait for them rather than judge at `@@done`.
            while !(expect.after)(&transcript[started..]) {
                let _ = next(&mut transcript, "output after Ctrl-C", end_by);
            }
        } else {
            assert_eq!(status, 0, "{}: {line} failed:\n{}", block.at, transcript.join("\n"));
        }
    }
    drop(stdin);
    let deadline = Instant::now() + RUN_TIMEOUT;
    let status = loop {
        if let Some(status) = shell.bash.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "{}: the shell did not end:\n{}", block.at, transcript.join("\n"));
        thread::sleep(Duration::from_millis(20));
    };
    while let Ok(said) = rx.recv_timeout(Duration::from_millis(200)) {
        if let Said::Err(l) = said {
            transcript.push(format!("(stderr) {l}"));
        }
    }
    let all = transcript.join("\n");
    assert!(status.success(), "{}: the shell ended with {status}:\n{all}", block.at);
    assert!(!all.contains("No such file or directory"), "{}: an error on the way:\n{all}", block.at);
    // Every job the block started in the background, it also stopped.
    for job in &shell.jobs {
        let deadline = Instant::now() + RUN_TIMEOUT;
        while PathBuf::from(format!("/proc/{job}")).exists() && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(50));
        }
        assert!(!PathBuf::from(format!("/proc/{job}")).exists(), "{}: job {job} still runs:\n{all}", block.at);
    }
}

/// Every shell block in README.md and docs/guide.md runs as printed against the fake API server,
/// except those marked as meant for a real cluster (their first line is [`REAL_CLUSTER`]).
/// The blocks run cargo and name `target/debug`: this runs where `cargo test` built into this
/// repository's own `target/` with the default features (the blocks' own builds then have
/// nothing to do), and is skipped, saying so, elsewhere. A block with kubectl needs kubectl
/// (a failure under `CI=true` without it, as in tests/integration/fake_server/kubectl.rs).
#[test]
#[cfg(all(target_os = "linux", feature = "simd"))]
fn shell_blocks_for_the_fake_server_run_as_printed() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().and_then(|deps| deps.parent()).unwrap().canonicalize().unwrap();
    if profile_dir != root.join("target/debug").canonicalize().unwrap_or_default() {
        println!("skipping: the blocks name target/debug, and this test was built into {}", profile_dir.display());
        return;
    }
    let has_kubectl = Command::new("kubectl").arg("version").arg("--client").output().is_ok();
    let scratch = std::env::temp_dir().join(format!("kube-watcher-shell-blocks-{}", std::process::id()));
    let (mut ran, mut skipped) = (0, 0);
    for doc in ["README.md", "docs/guide.md"] {
        for block in shell_blocks(doc) {
            // Waiting for a file that may not exist yet: `-s`, or grep complains until it does.
            for line in &block.lines {
                assert!(!line.contains("grep -q "), "{}: {line}: use grep -qs", block.at);
            }
            if block.lines.first().is_some_and(|l| l.starts_with(REAL_CLUSTER) || l.starts_with(REAL_API_SERVER)) {
                skipped += 1;
                continue;
            }
            if !has_kubectl && block.lines.iter().any(|l| l.contains("kubectl ")) {
                assert_ne!(
                    std::env::var("CI").as_deref(),
                    Ok("true"),
                    "{}: kubectl is not on PATH and CI=true",
                    block.at
                );
                println!("skipping {}: kubectl is not on PATH", block.at);
                continue;
            }
            let _ = std::fs::remove_dir_all(&scratch);
            std::fs::create_dir_all(&scratch).unwrap();
            run_shell_block(&block, &scratch);
            ran += 1;
        }
    }
    let _ = std::fs::remove_dir_all(&scratch);
    // README: the fake server and the demo; the guide: the fake server with kubectl, the demo.
    assert!(ran >= if has_kubectl { 4 } else { 3 }, "only {ran} blocks ran");
    assert!(skipped >= 2, "only {skipped} blocks marked {REAL_CLUSTER:?}");
}
