//! How long after a restarted kube-apiserver is ready kube-watcher's stores are fresh again
//! (benches/outage.sh runs it; docs/performance.md, "After an outage", has the method and the
//! numbers).
//!
//! ```text
//! outage --script scripts/apiserver.sh --setup
//! outage --script scripts/apiserver.sh --label NAME [--parallel-sync N] [--down SECS]
//! ```
//!
//! `--setup` makes the bench's objects where they are missing: `CONFIG_MAPS` ConfigMaps in the
//! namespace `outage-bench` and `NODES` Nodes labelled `kube-watcher-bench=outage`.
//!
//! A run: two store-only watchers with the default configuration (plus `parallel_sync(N)` when
//! asked), one of the namespace's ConfigMaps and one of the labelled Nodes (cluster-scoped).
//! Once both watch, kube-apiserver (`apiserver` of scripts/apiserver.sh, the watchers' server)
//! is killed; for SECS seconds (10 by default) changes go on through the bed's other API server
//! (`nogate`, on the same etcd): a ConfigMap changed every 100 ms, one created and the one
//! before deleted every second, a Node relabelled every 500 ms. Then it is started again. Its
//! readiness is the first `/readyz` that answers ok (polled every 20 ms from when it is
//! started); a store is fresh when it reflects the last change made to its type
//! (`Store::wait_for_version`: every change up to that one is in it), and it must then hold what
//! a list from the server holds. Prints one JSON line: the milliseconds from readiness to each
//! store's freshness (negative if a store got there before `/readyz` said ok).
//!
//! It uses only API that kube-watcher had before `Store::stale_since`, so that benches/outage.sh
//! can build it against an older kube-watcher for before/after numbers.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube_watcher::{Api, Client, Config, KubeconfigOptions, ListParams, Store, Watchable, Watcher};

const NAMESPACE: &str = "outage-bench";
const LABEL: &str = "kube-watcher-bench";
const CONFIG_MAPS: usize = 300;
const NODES: usize = 30;
/// The longest a store may take to be fresh before the run counts as failed.
const PATIENCE: Duration = Duration::from_secs(120);

type Fail = Box<dyn std::error::Error>;

struct Args {
    script: PathBuf,
    setup: bool,
    label: String,
    parallel_sync: usize,
    down: Duration,
}

fn args() -> Result<Args, Fail> {
    let mut a = Args {
        script: PathBuf::new(),
        setup: false,
        label: "kube-watcher".into(),
        parallel_sync: 0,
        down: Duration::from_secs(10),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--script" => a.script = value()?.into(),
            "--setup" => a.setup = true,
            "--label" => a.label = value()?,
            "--parallel-sync" => a.parallel_sync = value()?.parse()?,
            "--down" => a.down = Duration::from_secs_f64(value()?.parse()?),
            other => return Err(format!("unknown argument {other}").into()),
        }
    }
    if a.script.as_os_str().is_empty() {
        return Err("--script scripts/apiserver.sh is needed".into());
    }
    Ok(a)
}

fn main() {
    if let Err(e) = run() {
        eprintln!("outage: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), Fail> {
    let args = args()?;
    let bed = PathBuf::from(std::env::var("KUBE_WATCHER_TESTBED").map_err(|_| "KUBE_WATCHER_TESTBED is not set")?);
    let run_dir = bed.join("run");
    let client_of = |file: &str| Client::from_kubeconfig_path(run_dir.join(file), &KubeconfigOptions::default());
    let (admin, other) = (client_of("admin.kubeconfig")?, client_of("nogate.kubeconfig")?);
    let selector = format!("{LABEL}=outage");
    if args.setup {
        return setup(&admin);
    }

    let config_maps: Api<ConfigMap> = Api::namespaced(admin.clone(), NAMESPACE);
    let nodes: Api<Node> = Api::all(admin);
    let cms = watch(&args, config_maps.clone(), Config::default())?;
    let nds = watch(&args, nodes.clone(), Config::default().labels(&selector))?;

    script(&args, &["stop", "apiserver"])?;
    let down = Instant::now();
    let (cm_rv, node_rv) = changes(&other, &args, down)?;
    let started = Instant::now();
    let mut start = Command::new("bash")
        .arg(&args.script)
        .args(["start", "apiserver"])
        .env("KUBE_WATCHER_TESTBED", &bed)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    // Each store is waited for on a thread of its own, from now on: one may be fresh before
    // the other, or before `/readyz` says ok.
    let (ready, fresh) = thread::scope(|s| {
        let cm = s.spawn(|| fresh_at(&cms.store(), &cm_rv));
        let node = s.spawn(|| fresh_at(&nds.store(), &node_rv));
        let ready = ready_at(&run_dir);
        let joined =
            |h: thread::ScopedJoinHandle<'_, Result<Instant, String>>| h.join().unwrap_or(Err("panicked".into()));
        (ready, [("configmaps", joined(cm)), ("nodes", joined(node))])
    });
    let ready = ready?;
    if !start.wait()?.success() {
        return Err("scripts/apiserver.sh start apiserver failed".into());
    }
    let mut fields = vec![
        format!("\"label\":\"{}\"", args.label),
        format!("\"parallel_sync\":{}", args.parallel_sync),
        format!("\"down_s\":{:.1}", started.duration_since(down).as_secs_f64()),
        format!("\"start_to_ready_s\":{:.2}", ready.duration_since(started).as_secs_f64()),
    ];
    let mut worst = i64::MIN;
    for (what, at) in fresh {
        let at = at.map_err(|e| format!("{what}: {e}"))?;
        let ms = signed_ms(ready, at);
        worst = worst.max(ms);
        fields.push(format!("\"{what}_ms\":{ms}"));
    }
    fields.push(format!("\"fresh_ms\":{worst}"));
    same(&cms.store(), &config_maps, &ListParams::default())?;
    same(&nds.store(), &nodes, &ListParams::default().labels(&selector))?;
    let stats = [cms.stats(), nds.stats()];
    fields.push(format!("\"relists\":{}", stats.iter().map(|s| s.relists.total()).sum::<u64>()));
    fields.push(format!("\"backoff_s\":{:.1}", stats.iter().map(|s| s.backoff_time.as_secs_f64()).sum::<f64>()));
    fields.push(format!(
        "\"load_before\":{}",
        std::fs::read_to_string("/proc/loadavg")?.split(' ').next().unwrap_or("0")
    ));
    println!("{{{}}}", fields.join(","));
    Ok(())
}

/// A store-only watcher of `api`, synced and watching.
fn watch<K: Watchable + Clone>(args: &Args, api: Api<K>, config: Config) -> Result<Watcher<K>, Fail> {
    let mut builder = Watcher::builder(api).config(config);
    if args.parallel_sync > 0 {
        builder = builder.parallel_sync(args.parallel_sync);
    }
    let watcher = builder.start()?;
    let store = watcher.store();
    store.wait_until_ready(PATIENCE)?;
    let deadline = Instant::now() + PATIENCE;
    while watcher.stats().watches == 0 {
        if Instant::now() > deadline {
            return Err("no watch within the patience".into());
        }
        thread::sleep(Duration::from_millis(10));
    }
    Ok(watcher)
}

/// The changes made while kube-apiserver is down, through the other server, for `args.down`
/// from `down`; returns the resourceVersion of the last change to each type.
fn changes(other: &Client, args: &Args, down: Instant) -> Result<(String, String), Fail> {
    let cms: Api<ConfigMap> = Api::namespaced(other.clone(), NAMESPACE);
    let nodes: Api<Node> = Api::all(other.clone());
    let (mut cm_rv, mut node_rv) = (String::new(), String::new());
    let mut tick = 0usize;
    let stamp = std::process::id();
    while down.elapsed() < args.down || cm_rv.is_empty() || node_rv.is_empty() {
        let mut cm = config_map(&format!("cm-{}", tick % CONFIG_MAPS));
        cm.data = Some(BTreeMap::from([("v".to_owned(), format!("{stamp}-{tick}"))]));
        cm.metadata.resource_version = None;
        cm_rv = version(&cms.replace(&cm)?)?;
        if tick.is_multiple_of(10) {
            let _ = cms.delete(&format!("gone-{}", tick / 10 - usize::from(tick > 0)));
            cm_rv = version(&cms.create(&config_map(&format!("gone-{}", tick / 10)))?)?;
        }
        if tick.is_multiple_of(5) {
            let mut node = nodes.get(&format!("outage-bench-{}", (tick / 5) % NODES))?;
            // A value of this run's own: a write that changes nothing gets no new version.
            node.metadata.labels.get_or_insert_with(BTreeMap::new).insert("turn".into(), format!("{stamp}-{tick}"));
            node_rv = version(&nodes.replace(&node)?)?;
        }
        tick += 1;
        thread::sleep(Duration::from_millis(100));
    }
    // The namespace holds no `gone-` ConfigMap after a run.
    let _ = cms.delete(&format!("gone-{}", (tick - 1) / 10));
    let mut cm = config_map("cm-0");
    cm.data = Some(BTreeMap::from([("v".to_owned(), format!("{stamp}-last"))]));
    cm_rv = version(&cms.replace(&cm)?)?;
    Ok((cm_rv, node_rv))
}

/// When kube-apiserver's `/readyz` first answers ok.
fn ready_at(run_dir: &std::path::Path) -> Result<Instant, Fail> {
    let port = std::fs::read_to_string(run_dir.join("apiserver.port"))?.trim().to_owned();
    let deadline = Instant::now() + PATIENCE;
    loop {
        let ok = Command::new("curl")
            .args(["-fsS", "--max-time", "1", "--cacert"])
            .arg(run_dir.join("certs/ca.crt"))
            .arg("-H")
            .arg(format!("@{}", run_dir.join("auth.header").display()))
            .arg(format!("https://127.0.0.1:{port}/readyz"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()?
            .success();
        let now = Instant::now();
        if ok {
            return Ok(now);
        }
        if now > deadline {
            return Err("kube-apiserver not ready within the patience".into());
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// When `store` reflects `rv` (every change up to it is in it).
fn fresh_at<K: Watchable>(store: &Store<K>, rv: &str) -> Result<Instant, String> {
    store.wait_for_version(rv, PATIENCE).map_err(|e| e.to_string())?;
    Ok(Instant::now())
}

/// The store holds what the server lists: the same names at the same resourceVersions.
fn same<K: Watchable + Clone>(store: &Store<K>, api: &Api<K>, params: &ListParams) -> Result<(), Fail> {
    let key = |o: &K| {
        let m = o.meta();
        (m.name.clone().unwrap_or_default(), m.resource_version.clone().unwrap_or_default())
    };
    let mut listed: Vec<_> = api.list(params)?.items.iter().map(key).collect();
    let mut held: Vec<_> = store.state().iter().map(|o| key(o)).collect();
    listed.sort();
    held.sort();
    if listed != held {
        return Err(format!("the store differs from the server: {} listed, {} held", listed.len(), held.len()).into());
    }
    Ok(())
}

fn setup(admin: &Client) -> Result<(), Fail> {
    let namespaces: Api<Namespace> = Api::all(admin.clone());
    if namespaces.get(NAMESPACE).is_err() {
        let ns = Namespace { metadata: meta(NAMESPACE, None), ..Namespace::default() };
        namespaces.create(&ns)?;
    }
    let cms: Api<ConfigMap> = Api::namespaced(admin.clone(), NAMESPACE);
    for i in 0..CONFIG_MAPS {
        let name = format!("cm-{i}");
        if cms.get(&name).is_err() {
            cms.create(&config_map(&name))?;
        }
    }
    let nodes: Api<Node> = Api::all(admin.clone());
    for i in 0..NODES {
        let name = format!("outage-bench-{i}");
        if nodes.get(&name).is_err() {
            let mut node = Node { metadata: meta(&name, None), ..Node::default() };
            node.metadata.labels = Some(BTreeMap::from([(LABEL.to_owned(), "outage".to_owned())]));
            nodes.create(&node)?;
        }
    }
    eprintln!("outage: {CONFIG_MAPS} ConfigMaps in {NAMESPACE}, {NODES} Nodes labelled {LABEL}=outage");
    Ok(())
}

fn meta(name: &str, namespace: Option<&str>) -> ObjectMeta {
    ObjectMeta { name: Some(name.into()), namespace: namespace.map(Into::into), ..ObjectMeta::default() }
}

fn config_map(name: &str) -> ConfigMap {
    ConfigMap {
        metadata: meta(name, Some(NAMESPACE)),
        data: Some(BTreeMap::from([("v".to_owned(), "0".to_owned())])),
        ..ConfigMap::default()
    }
}

fn version<K: Watchable>(obj: &K) -> Result<String, Fail> {
    obj.meta().resource_version.clone().ok_or_else(|| "a write without a resourceVersion".into())
}

/// Milliseconds from `from` to `to`, negative when `to` came first.
fn signed_ms(from: Instant, to: Instant) -> i64 {
    match to.checked_duration_since(from) {
        Some(d) => i64::try_from(d.as_millis()).unwrap_or(i64::MAX),
        None => -i64::try_from(from.duration_since(to).as_millis()).unwrap_or(i64::MAX),
    }
}

fn script(args: &Args, verbs: &[&str]) -> Result<(), Fail> {
    let status = Command::new("bash").arg(&args.script).args(verbs).stdout(Stdio::null()).status()?;
    if !status.success() {
        return Err(format!("scripts/apiserver.sh {verbs:?} failed").into());
    }
    Ok(())
}
