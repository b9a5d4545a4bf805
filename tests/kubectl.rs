//! Runs the real `kubectl` against the fake API server: if kubectl is happy with discovery,
//! chunked lists, watches and writes, the fake speaks the protocol well enough for real clients.
//! Skipped (with a message) when `/usr/bin/kubectl` is not installed.
#![cfg(feature = "testing")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube_watcher::testing::FakeApiServer;

const KUBECTL: &str = "/usr/bin/kubectl";
/// Bound on every kubectl run.
const RUN_TIMEOUT: Duration = Duration::from_secs(30);

static NEXT_DIR: AtomicUsize = AtomicUsize::new(0);

/// A temporary directory with a kubeconfig for one server; removed on drop.
struct Kubeconfig {
    dir: PathBuf,
}

impl Kubeconfig {
    fn for_server(server: &FakeApiServer) -> Kubeconfig {
        let dir = std::env::temp_dir().join(format!(
            "kube-watcher-kubectl-{}-{}",
            std::process::id(),
            NEXT_DIR.fetch_add(1, Ordering::SeqCst)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("config"), server.kubeconfig()).unwrap();
        Kubeconfig { dir }
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(KUBECTL);
        cmd.env("KUBECONFIG", self.dir.join("config"))
            .env_remove("HTTPS_PROXY")
            .env_remove("HTTP_PROXY")
            .env_remove("https_proxy")
            .env_remove("http_proxy")
            .arg(format!("--cache-dir={}", self.dir.join("cache").display()))
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

impl Drop for Kubeconfig {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn kubectl_missing() -> bool {
    if Path::new(KUBECTL).exists() {
        return false;
    }
    println!("skipping: {KUBECTL} is not installed");
    true
}

/// Output of a finished kubectl run.
#[derive(Debug)]
struct Output {
    success: bool,
    stdout: String,
    stderr: String,
}

fn drain(mut r: impl Read + Send + 'static) -> thread::JoinHandle<String> {
    thread::spawn(move || {
        let mut s = String::new();
        let _ = r.read_to_string(&mut s);
        s
    })
}

/// Runs kubectl to completion, killing it after `RUN_TIMEOUT`.
fn run(kc: &Kubeconfig, args: &[&str]) -> Output {
    let mut child = kc.command(args).spawn().unwrap();
    let out = drain(child.stdout.take().unwrap());
    let err = drain(child.stderr.take().unwrap());
    let deadline = Instant::now() + RUN_TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        thread::sleep(Duration::from_millis(20));
    };
    let output = Output {
        success: status.is_some_and(|s| s.success()),
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
    };
    assert!(status.is_some(), "kubectl {args:?} timed out: {output:?}");
    output
}

/// Kills a long-running kubectl when dropped.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn pod(ns: &str, name: &str) -> Pod {
    let mut p = Pod::default();
    p.metadata.name = Some(name.to_string());
    p.metadata.namespace = Some(ns.to_string());
    p
}

#[test]
fn kubectl_lists_every_pod_in_chunks() {
    if kubectl_missing() {
        return;
    }
    let server = FakeApiServer::start();
    for (ns, name) in [("a", "p1"), ("a", "p2"), ("b", "p3"), ("b", "p4"), ("c", "p5")] {
        server.create(&pod(ns, name)).unwrap();
    }
    let kc = Kubeconfig::for_server(&server);
    let out = run(&kc, &["get", "pods", "-A", "--chunk-size=2", "-o", "name"]);
    assert!(out.success, "{out:?}");
    let names: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(names, ["pod/p1", "pod/p2", "pod/p3", "pod/p4", "pod/p5"]);
    let pages =
        server.requests().iter().filter(|r| r.path == "/api/v1/pods" && r.query_param("limit") == Some("2")).count();
    assert_eq!(pages, 3, "kubectl followed the continue tokens");
}

#[test]
fn kubectl_watch_prints_a_pod_created_afterwards() {
    if kubectl_missing() {
        return;
    }
    let server = FakeApiServer::start();
    let kc = Kubeconfig::for_server(&server);
    let mut child = Running(kc.command(&["get", "pods", "--watch", "-o", "name"]).spawn().unwrap());
    let stdout = child.0.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    let reader = thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + RUN_TIMEOUT;
    while server.open_watches() == 0 {
        assert!(Instant::now() < deadline, "kubectl never started watching");
        thread::sleep(Duration::from_millis(20));
    }
    server.create(&pod("default", "late")).unwrap();
    let line = rx.recv_timeout(RUN_TIMEOUT).expect("kubectl printed the new pod");
    assert_eq!(line, "pod/late");
    drop(child);
    reader.join().unwrap();
}

#[test]
fn kubectl_creates_applies_and_deletes() {
    if kubectl_missing() {
        return;
    }
    let server = FakeApiServer::start();
    let kc = Kubeconfig::for_server(&server);
    let manifest = kc.path("cm.yaml");
    std::fs::write(&manifest, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  mode: blue\n")
        .unwrap();
    let out = run(&kc, &["create", "-f", manifest.to_str().unwrap()]);
    assert!(out.success, "{out:?}");
    assert!(out.stdout.contains("configmap/settings created"), "{out:?}");
    std::fs::write(&manifest, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  mode: green\n")
        .unwrap();
    let out = run(&kc, &["apply", "-f", manifest.to_str().unwrap()]);
    assert!(out.success, "{out:?}");
    let out = run(&kc, &["get", "configmap", "settings", "-o", "jsonpath={.data.mode}"]);
    assert_eq!(out.stdout, "green", "{out:?}");
    let out = run(&kc, &["delete", "configmap", "settings"]);
    assert!(out.success, "{out:?}");
    assert!(out.stdout.contains("deleted"), "{out:?}");
    let out = run(&kc, &["get", "configmap", "settings"]);
    assert!(!out.success);
    assert!(out.stderr.contains("NotFound") || out.stderr.contains("not found"), "{out:?}");
}

#[test]
fn kubectl_reads_discovery() {
    if kubectl_missing() {
        return;
    }
    let server = FakeApiServer::start();
    let kc = Kubeconfig::for_server(&server);
    let out = run(&kc, &["get", "--raw", "/api/v1"]);
    assert!(out.success, "{out:?}");
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(v["kind"], "APIResourceList");
    let out = run(&kc, &["api-resources", "--api-group=apps"]);
    assert!(out.success, "{out:?}");
    assert!(out.stdout.contains("deployments") && out.stdout.contains("deploy"), "{out:?}");
}

#[test]
fn kubectl_gets_deployments_by_short_name() {
    if kubectl_missing() {
        return;
    }
    let server = FakeApiServer::start();
    let mut d = Deployment::default();
    d.metadata.name = Some("web".into());
    d.metadata.namespace = Some("default".into());
    server.create(&d).unwrap();
    let kc = Kubeconfig::for_server(&server);
    let out = run(&kc, &["get", "deploy", "-o", "name"]);
    assert!(out.success, "{out:?}");
    assert_eq!(out.stdout.trim(), "deployment.apps/web");
}

#[test]
fn kubectl_talks_tls_with_a_bearer_token() {
    if kubectl_missing() {
        return;
    }
    let server = FakeApiServer::builder().tls(true).token("kubectl-token").start();
    server.create(&pod("default", "secure")).unwrap();
    let kc = Kubeconfig::for_server(&server);
    let out = run(&kc, &["get", "pods", "-o", "name"]);
    assert!(out.success, "{out:?}");
    assert_eq!(out.stdout.trim(), "pod/secure");
    assert!(server.requests().iter().all(|r| r.header("authorization") != Some("Bearer kubectl-token")));
}
