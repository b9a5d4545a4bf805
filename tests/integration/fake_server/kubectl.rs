//! Runs the real `kubectl` against the fake API server: if kubectl is happy with discovery,
//! chunked lists, watches, tables and its everyday write verbs, the fake speaks the protocol well
//! enough for real clients.
//!
//! kubectl is looked up on `PATH`. Where it is absent the tests say so and pass, except under
//! `CI=true`, where a missing kubectl is a failure (CI must not go green by skipping them;
//! `.ci/run` fetches one when the machine has none).
#![cfg(feature = "testing")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use kube_watcher::testing::FakeApiServer;

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
        let mut cmd = Command::new(kubectl().expect("checked by kubectl_missing"));
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

/// The first `kubectl` on `PATH`.
fn kubectl() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join("kubectl")).find(|p| p.is_file())
}

fn kubectl_missing() -> bool {
    if kubectl().is_some() {
        return false;
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "kubectl is not on PATH and CI=true: these tests must run in CI (.ci/run fetches kubectl)"
    );
    println!("skipping: kubectl is not on PATH");
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

/// `kubectl get --raw` with a `shardSelector`: a sharding fake answers the shard's pods with
/// `metadata.shardInfo`, and refuses a malformed selector with kube-apiserver's message.
#[test]
fn kubectl_raw_requests_with_a_shard_selector_get_the_shard() {
    if kubectl_missing() {
        return;
    }
    let server = FakeApiServer::builder().sharded_list_and_watch(true).start();
    for i in 0..10 {
        server.create(&pod("a", &format!("p{i}"))).unwrap();
    }
    let kc = Kubeconfig::for_server(&server);
    let shard = kube_watcher::Shard::of(0, 2).unwrap();
    let selector = shard.selector().replace(' ', "%20").replace('\'', "%27").replace(',', "%2C");
    let out = run(&kc, &["get", "--raw", &format!("/api/v1/pods?shardSelector={selector}")]);
    assert!(out.success, "{out:?}");
    let list: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(list["metadata"]["shardInfo"]["selector"], shard.selector());
    let uids: Vec<&str> =
        list["items"].as_array().unwrap().iter().map(|i| i["metadata"]["uid"].as_str().unwrap()).collect();
    let want = server.list::<Pod>().iter().filter(|p| shard.contains(p.metadata.uid.as_deref().unwrap())).count();
    assert_eq!(uids.len(), want);
    assert!(uids.iter().all(|u| shard.contains(u)), "{uids:?}");
    let out = run(&kc, &["get", "--raw", "/api/v1/pods?shardSelector=nonsense"]);
    assert!(!out.success && out.stderr.contains("invalid shard selector"), "{out:?}");
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

/// kubectl asks for aggregated discovery and reads the fake's documents (no per-group
/// requests), and walks the groups when the server has none.
#[test]
fn kubectl_reads_aggregated_discovery_and_walks_the_groups_without_it() {
    if kubectl_missing() {
        return;
    }
    for aggregated in [true, false] {
        let server = FakeApiServer::builder().aggregated_discovery(aggregated).start();
        let kc = Kubeconfig::for_server(&server);
        let out = run(&kc, &["api-resources", "-o", "wide"]);
        assert!(out.success, "aggregated {aggregated}: {out:?}");
        for expected in ["deployments", "deploy", "apps/v1", "configmaps", "cm", "all"] {
            assert!(out.stdout.contains(expected), "aggregated {aggregated}: {expected}: {out:?}");
        }
        let group_versions = server.requests().iter().filter(|r| r.path.starts_with("/apis/")).count();
        if aggregated {
            assert_eq!(group_versions, 0, "kubectl read everything from /api and /apis");
            let accept = server
                .requests()
                .iter()
                .find(|r| r.path == "/apis")
                .and_then(|r| r.header("accept").map(str::to_owned));
            assert!(accept.unwrap_or_default().contains("g=apidiscovery.k8s.io;v=v2;"));
        } else {
            assert!(group_versions > 1, "kubectl walked the groups");
        }
    }
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

/// Runs kubectl and fails the test with its output unless it succeeded.
fn ok(kc: &Kubeconfig, args: &[&str]) -> Output {
    let out = run(kc, args);
    assert!(out.success, "kubectl {args:?}: {out:?}");
    out
}

/// kubectl 1.2x and later send these as protobuf (older ones as JSON): either way they land.
#[test]
fn kubectl_typed_create_commands_land_whole() {
    if kubectl_missing() {
        return;
    }
    let server = FakeApiServer::start();
    let kc = Kubeconfig::for_server(&server);
    ok(&kc, &["create", "configmap", "cm-1", "--from-literal=k=v", "--from-literal=x=y"]);
    ok(&kc, &["create", "secret", "generic", "s-1", "--from-literal=user=admin"]);
    ok(&kc, &["create", "deployment", "web", "--image=nginx:1.27", "--replicas=2"]);
    ok(&kc, &["run", "one", "--image=busybox", "--labels=tier=batch"]);
    let protobuf = server
        .requests()
        .iter()
        .filter(|r| r.method == "POST" && r.header("content-type") == Some("application/vnd.kubernetes.protobuf"))
        .count();
    println!("{protobuf} of the creates were protobuf");

    let cm: ConfigMap = server.get(Some("default"), "cm-1").unwrap();
    assert_eq!(cm.data.unwrap().into_iter().collect::<Vec<_>>(), [("k".into(), "v".into()), ("x".into(), "y".into())]);
    let secret: Secret = server.get(Some("default"), "s-1").unwrap();
    assert_eq!(secret.data.unwrap()["user"].0, b"admin");
    assert_eq!(secret.type_.as_deref(), Some("Opaque"));
    let web: Deployment = server.get(Some("default"), "web").unwrap();
    let spec = web.spec;
    assert_eq!(spec.replicas, Some(2));
    let containers = spec.template.spec.unwrap().containers;
    assert_eq!(containers[0].image.as_deref(), Some("nginx:1.27"));
    assert_eq!(spec.selector.match_labels.unwrap()["app"], "web");
    let one: Pod = server.get(Some("default"), "one").unwrap();
    assert_eq!(one.metadata.labels.unwrap()["tier"], "batch");
    assert_eq!(one.spec.unwrap().containers[0].image.as_deref(), Some("busybox"));
}

#[test]
fn kubectl_label_annotate_scale_patch_and_delete() {
    if kubectl_missing() {
        return;
    }
    let server = FakeApiServer::start();
    server.create(&pod("default", "p")).unwrap();
    let kc = Kubeconfig::for_server(&server);
    ok(&kc, &["label", "pod", "p", "team=blue"]);
    ok(&kc, &["annotate", "pod", "p", "note=hello"]);
    ok(&kc, &["patch", "pod", "p", "-p", r#"{"metadata":{"labels":{"strategic":"yes"}}}"#]);
    ok(&kc, &["patch", "pod", "p", "--type=merge", "-p", r#"{"metadata":{"labels":{"merge":"yes"}}}"#]);
    ok(
        &kc,
        &["patch", "pod", "p", "--type=json", "-p", r#"[{"op":"add","path":"/metadata/labels/json","value":"yes"}]"#],
    );
    let p: Pod = server.get(Some("default"), "p").unwrap();
    let labels = p.metadata.labels.unwrap();
    for key in ["team", "strategic", "merge", "json"] {
        assert!(labels.contains_key(key), "{key} in {labels:?}");
    }
    assert_eq!(p.metadata.annotations.unwrap()["note"], "hello");

    // A JSON patch whose test fails is refused with the reason.
    let out =
        run(&kc, &["patch", "pod", "p", "--type=json", "-p", r#"[{"op":"test","path":"/metadata/name","value":"q"}]"#]);
    assert!(!out.success && out.stderr.contains("test of \"/metadata/name\" failed"), "{out:?}");

    ok(&kc, &["create", "deployment", "web", "--image=nginx"]);
    ok(&kc, &["scale", "deployment", "web", "--replicas=4"]);
    let web: Deployment = server.get(Some("default"), "web").unwrap();
    assert_eq!(web.spec.replicas, Some(4));
    let out = ok(&kc, &["get", "--raw", "/apis/apps/v1/namespaces/default/deployments/web/scale"]);
    let scale: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!((scale["kind"].as_str(), scale["spec"]["replicas"].as_i64()), (Some("Scale"), Some(4)));
    assert_eq!(scale["status"]["selector"], "app=web");

    ok(&kc, &["delete", "pod", "p"]);
    assert!(server.get::<Pod>(Some("default"), "p").is_none());
}

#[test]
fn kubectl_server_side_apply_gets_a_clear_415() {
    if kubectl_missing() {
        return;
    }
    let server = FakeApiServer::start();
    let kc = Kubeconfig::for_server(&server);
    let manifest = kc.path("cm.yaml");
    std::fs::write(&manifest, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ssa\ndata:\n  a: b\n").unwrap();
    let out = run(&kc, &["apply", "--server-side", "-f", manifest.to_str().unwrap()]);
    assert!(!out.success, "{out:?}");
    assert!(out.stderr.contains("no server-side apply"), "the error says what the fake lacks: {out:?}");
}

#[test]
fn kubectl_get_pods_shows_the_columns_a_real_server_computes() {
    if kubectl_missing() {
        return;
    }
    let server = FakeApiServer::start();
    let mut p: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "web-1", "namespace": "default"},
        "spec": {"nodeName": "node-a", "containers": [{"name": "a", "image": "x"}, {"name": "b", "image": "y"}]},
        "status": {"phase": "Running", "podIP": "10.1.2.3", "containerStatuses": [
            {"name": "a", "ready": true, "restartCount": 3, "image": "x", "imageID": "", "state": {"running": {}}},
            {"name": "b", "ready": false, "restartCount": 0, "image": "y", "imageID": "",
             "state": {"waiting": {"reason": "CrashLoopBackOff"}}}
        ]}
    }))
    .unwrap();
    p = server.create(&p).unwrap();
    assert!(p.metadata.creation_timestamp.is_some());
    let kc = Kubeconfig::for_server(&server);
    let out = ok(&kc, &["get", "pods"]);
    let lines: Vec<Vec<&str>> = out.stdout.lines().map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(lines[0], ["NAME", "READY", "STATUS", "RESTARTS", "AGE"], "{out:?}");
    assert_eq!(lines[1][..4], ["web-1", "1/2", "CrashLoopBackOff", "3"], "{out:?}");
    let out = ok(&kc, &["get", "pods", "-o", "wide"]);
    let header = out.stdout.lines().next().unwrap();
    for column in ["IP", "NODE", "NOMINATED NODE", "READINESS GATES"] {
        assert!(header.contains(column), "{out:?}");
    }
    assert!(out.stdout.contains("10.1.2.3") && out.stdout.contains("node-a"), "{out:?}");
    let asked_for_tables = server.requests().iter().any(|r| {
        r.path == "/api/v1/namespaces/default/pods" && r.header("accept").is_some_and(|a| a.contains("as=Table"))
    });
    assert!(asked_for_tables);
}

/// kubectl (client-go) asks for protobuf first on typed requests and reads the fake's protobuf
/// answers (docs/protocol.md §12): a typed create prints what the server stored; gets and lists
/// (JSON: kubectl reads them unstructured) print the objects whole.
#[test]
fn kubectl_reads_the_fakes_protobuf_answers() {
    if kubectl_missing() {
        return;
    }
    let server = FakeApiServer::start();
    let kc = Kubeconfig::for_server(&server);
    let created = ok(&kc, &["create", "configmap", "cm-pb", "--from-literal=k=v", "-o", "yaml"]);
    assert!(created.stdout.contains("name: cm-pb") && created.stdout.contains("k: v"), "{created:?}");
    let stored: ConfigMap = server.get(Some("default"), "cm-pb").unwrap();
    let rv = stored.metadata.resource_version.unwrap();
    assert!(created.stdout.contains(&format!("resourceVersion: \"{rv}\"")), "{created:?}");
    ok(&kc, &["run", "one", "--image=busybox", "--labels=tier=batch"]);
    let got = ok(&kc, &["get", "pod", "one", "-o", "yaml"]);
    assert!(got.stdout.contains("image: busybox") && got.stdout.contains("tier: batch"), "{got:?}");
    let listed = ok(&kc, &["get", "pods", "-o", "yaml"]);
    assert!(listed.stdout.contains("name: one") && listed.stdout.contains("image: busybox"), "{listed:?}");
    let protobuf_first = server
        .requests()
        .iter()
        .filter(|r| r.header("accept").is_some_and(|a| a.starts_with("application/vnd.kubernetes.protobuf")))
        .count();
    // kubectl's typed create asks for protobuf first; its get and list (`-o yaml`, `-w`) read
    // unstructured objects and ask for JSON.
    assert!(protobuf_first > 0, "{:?}", server.requests().iter().map(|r| r.header("accept")).collect::<Vec<_>>());
}

/// Leases, as leader election leaves them: kubectl finds the type by discovery (full name and
/// plural), prints the holder column the real server computes, reads one back as YAML, and
/// deletes one.
#[test]
fn kubectl_gets_leases_with_their_holders() {
    if kubectl_missing() {
        return;
    }
    use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
    let server = FakeApiServer::start();
    let kc = Kubeconfig::for_server(&server);
    let leases: kube_watcher::Api<Lease> =
        kube_watcher::Api::namespaced(kube_watcher::Client::from_url(&server.url()).unwrap(), "default");
    for (name, holder) in [("controller", Some("replica-a")), ("released", None)] {
        let mut lease = Lease::default();
        lease.metadata.name = Some(name.into());
        lease.spec = Some(LeaseSpec {
            holder_identity: holder.map(Into::into),
            lease_duration_seconds: Some(15),
            ..Default::default()
        });
        leases.create(&lease).unwrap();
    }
    let out = ok(&kc, &["get", "leases"]);
    let rows: Vec<Vec<&str>> = out.stdout.lines().map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(rows[0], ["NAME", "HOLDER", "AGE"], "{out:?}");
    assert_eq!(rows[1][..2], ["controller", "replica-a"], "{out:?}");
    assert_eq!(rows[2][0], "released", "{out:?}");
    assert_eq!(rows[2].len(), 2, "an empty holder is an empty cell: {out:?}");
    let yaml = ok(&kc, &["get", "leases.coordination.k8s.io", "controller", "-o", "yaml"]).stdout;
    assert!(yaml.contains("holderIdentity: replica-a"), "{yaml}");
    assert!(yaml.contains("leaseDurationSeconds: 15"), "{yaml}");
    ok(&kc, &["delete", "lease", "released"]);
    assert!(server.get::<Lease>(Some("default"), "released").is_none());
}
