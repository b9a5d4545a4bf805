//! kube-rs peer for kube-watcher's `examples/bench.rs`: the same client CLI and the
//! same JSON line, measured with kube-rs's `watcher` + `reflector` over `Api::<Pod>::all`.
//!
//! ```text
//! kube-rs-peer --url http://127.0.0.1:18080 --pods 10000 --events 100000 [--current-thread]
//! kube-rs-peer --kubeconfig "$KUBECONFIG" --pods 10000 --events 20000   (a real API server)
//! ```
//!
//! `--strip-managed-fields`: clears each pod's `managedFields` before the reflector stores it,
//! as kube-rs users write it (`WatchStreamExt::modify`); the JSON line's `"skip"` says so, as
//! kube-watcher's bench does for `--skip-managed-fields`.
//!
//! `--fields SELECTOR`: a field selector (`spec.nodeName=node-1`: a node agent's pods), as
//! kube-watcher's bench takes it.
//!
//! At the end of the initial sync it writes `{"synced_ms":…,"sync_cpu_s":…}` to stderr, as
//! kube-watcher's bench does: benches/real.sh starts its writer then, so that every event it
//! times comes alone.
//!
//! `--relists K` (with a server started with `--relists K`): after the events, times K relists
//! (each from its `Init` to its `InitDone`) and prints them with the resident memory before
//! and the peak during them, as kube-watcher's bench does.
//!
//! `initial_sync_ms`: from start until the reflector's store is ready (the first `InitDone`)
//! and holds `--pods` objects. `watch_ms`: from the first applied watch event (`Apply` or
//! `Delete` after the initial sync; the reflector has already written it into the store when
//! the stream yields it) to the `--events`-th. `max_rss_kb`: VmHWM from `/proc/self/status`.
//!
//! The stream is consumed in the main future, as kube-rs's own reflector examples do, with
//! `watcher::Config::default()` (pages of 500) and no extra stream adapters.

use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Api, Client};

// The global allocator (features `jemalloc`, `mimalloc`; neither: glibc's malloc; both: jemalloc),
// named in the JSON line as `"allocator"`, as kube-watcher's examples/bench.rs does.
#[cfg(feature = "jemalloc")]
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;
#[cfg(all(feature = "mimalloc", not(feature = "jemalloc")))]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const ALLOCATOR: &str = if cfg!(feature = "jemalloc") {
    "jemalloc"
} else if cfg!(feature = "mimalloc") {
    "mimalloc"
} else {
    "glibc"
};

struct Args {
    /// The server's URL (plain HTTP, no credentials); empty with `--kubeconfig`.
    url: String,
    /// A kubeconfig (a real API server, with its credentials) instead of `--url`.
    kubeconfig: Option<String>,
    pods: usize,
    events: usize,
    current_thread: bool,
    /// Relists to time after the events (the server answers watches with a 410).
    relists: usize,
    /// Clear `managedFields` with `modify` before the reflector.
    strip_managed_fields: bool,
    /// Watch `PodView` (five fields) instead of `Pod`.
    projection: bool,
    /// A field selector (`--fields`).
    fields: Option<String>,
}

const USAGE: &str = "usage: kube-rs-peer --url URL|--kubeconfig FILE [--pods N] [--events M] [--mode typed|projection] [--current-thread] [--relists K] [--strip-managed-fields] [--fields SELECTOR]";

fn parse_args() -> Result<Args, String> {
    let mut url = None;
    let mut a = Args {
        url: String::new(),
        kubeconfig: None,
        pods: 10_000,
        events: 100_000,
        current_thread: false,
        relists: 0,
        strip_managed_fields: false,
        projection: false,
        fields: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "--url" => url = Some(value()?),
            "--kubeconfig" => a.kubeconfig = Some(value()?),
            "--pods" => a.pods = value()?.parse().map_err(|e| format!("--pods: {e}"))?,
            "--events" => a.events = value()?.parse().map_err(|e| format!("--events: {e}"))?,
            "--mode" => {
                let m = value()?;
                match m.as_str() {
                    "typed" => {}
                    "projection" => a.projection = true,
                    _ => return Err(format!("--mode {m}: kube-rs has typed objects and projections")),
                }
            }
            "--current-thread" => a.current_thread = true,
            "--strip-managed-fields" => a.strip_managed_fields = true,
            "--fields" => a.fields = Some(value()?),
            "--relists" => a.relists = value()?.parse().map_err(|e| format!("--relists: {e}"))?,
            "--serve" => return Err("--serve: run the server with kube-watcher's `examples/bench.rs --serve`".into()),
            "-h" | "--help" => return Err(USAGE.into()),
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        }
    }
    match (url, &a.kubeconfig) {
        (Some(url), None) => a.url = url,
        (None, Some(_)) => {}
        _ => return Err(format!("--url or --kubeconfig is required (one of them)\n{USAGE}")),
    }
    Ok(a)
}

fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    };
    let runtime = if args.current_thread {
        tokio::runtime::Builder::new_current_thread().enable_all().build()
    } else {
        tokio::runtime::Builder::new_multi_thread().enable_all().build()
    }
    .expect("tokio runtime");
    let run = async { if args.projection { client::<PodView>(&args).await } else { client::<Pod>(&args).await } };
    match runtime.block_on(async { tokio::time::timeout(Duration::from_secs(1200), run).await }) {
        Ok(Ok(line)) => {
            println!("{line}");
            // Don't wait for the open watch to wind down: the measurement is over.
            std::process::exit(0);
        }
        Ok(Err(e)) => {
            eprintln!("kube-rs-peer: {e}");
            std::process::exit(1);
        }
        Err(_) => {
            eprintln!("kube-rs-peer: timed out");
            std::process::exit(1);
        }
    }
}

/// A pod as a program that reads five of its fields sees it (`--mode projection`): the same
/// struct as kube-watcher's examples/bench.rs, made a resource by implementing k8s-openapi's
/// traits (kube-rs's `Resource` follows from them). serde skips the rest of each pod's JSON.
#[allow(dead_code)]
#[derive(Debug, Clone, serde::Deserialize)]
struct PodView {
    metadata: ObjectMeta,
    spec: Option<PodViewSpec>,
    status: Option<PodViewStatus>,
}

#[allow(dead_code)]
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct PodViewSpec {
    node_name: Option<String>,
}

#[allow(dead_code)]
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct PodViewStatus {
    phase: Option<String>,
    #[serde(rename = "podIP")]
    pod_ip: Option<String>,
}

impl k8s_openapi::Resource for PodView {
    const API_VERSION: &'static str = "v1";
    const GROUP: &'static str = "";
    const KIND: &'static str = "Pod";
    const VERSION: &'static str = "v1";
    const URL_PATH_SEGMENT: &'static str = "pods";
    type Scope = k8s_openapi::NamespaceResourceScope;
}

impl k8s_openapi::Metadata for PodView {
    type Ty = ObjectMeta;
    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

async fn client<K>(args: &Args) -> Result<String, Box<dyn std::error::Error>>
where
    K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
{
    let start = Instant::now();
    let config = match &args.kubeconfig {
        Some(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path)?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &kube::config::KubeConfigOptions::default()).await?
        }
        None => kube::Config::new(args.url.parse()?),
    };
    let client = Client::try_from(config)?;
    let api: Api<K> = Api::all(client);
    let (reader, writer) = reflector::store::<K>();
    let config = match &args.fields {
        Some(fields) => watcher::Config::default().fields(fields),
        None => watcher::Config::default(),
    };
    let events = watcher::watcher(api, config);
    let events = if args.strip_managed_fields {
        events.modify(|obj| obj.meta_mut().managed_fields = None).left_stream()
    } else {
        events.right_stream()
    };
    let stream = reflector::reflector(writer, events);
    let mut stream = std::pin::pin!(stream);

    let mut initial_sync: Option<Duration> = None;
    let mut seen = 0usize;
    let mut first: Option<Instant> = None;
    let mut last: Option<Instant> = None;
    let (mut sync_cpu_s, mut cpu_at_first, mut cpu_at_last) = (0.0, 0.0, 0.0);
    while let Some(event) = stream.next().await {
        let event = match event {
            Ok(e) => e,
            Err(e) => {
                // The watcher retries on the next poll; report and carry on, as a reflector would.
                eprintln!("kube-rs-peer: watcher error: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        match event {
            watcher::Event::InitDone if initial_sync.is_none() => {
                if reader.len() < args.pods {
                    return Err(format!("initial sync holds {} of {} pods", reader.len(), args.pods).into());
                }
                initial_sync = Some(start.elapsed());
                sync_cpu_s = cpu_s();
                eprintln!(r#"{{"synced_ms":{},"sync_cpu_s":{sync_cpu_s:.2}}}"#, start.elapsed().as_millis());
                if args.events == 0 && args.relists == 0 {
                    break;
                }
                if args.events == 0 {
                    return relists(&mut stream, &reader, args, start.elapsed()).await;
                }
            }
            watcher::Event::Apply(_) | watcher::Event::Delete(_) if initial_sync.is_some() => {
                seen += 1;
                let now = Instant::now();
                if first.is_none() {
                    first = Some(now);
                    cpu_at_first = cpu_s();
                }
                if seen >= args.events {
                    last = Some(now);
                    cpu_at_last = cpu_s();
                    if args.relists > 0 {
                        return relists(&mut stream, &reader, args, initial_sync.unwrap_or_default()).await;
                    }
                    break;
                }
            }
            _ => {}
        }
    }
    let initial_sync = initial_sync.ok_or("the watch stream ended before the initial sync")?;
    if seen < args.events {
        return Err(format!("only {seen} of {} events arrived", args.events).into());
    }
    // Keep the store alive until here (and ready: the first InitDone made it so).
    reader.wait_until_ready().await?;
    let watch = match (first, last) {
        (Some(f), Some(l)) => l - f,
        _ => Duration::ZERO,
    };
    let events_per_s = if watch.is_zero() { 0.0 } else { args.events as f64 / watch.as_secs_f64() };
    let peer = if args.current_thread { "kube-rs-current-thread" } else { "kube-rs" };
    Ok(format!(
        r#"{{"peer":"{peer}","allocator":"{ALLOCATOR}","store":"{}","gzip":{},"skip":"{}","n":{},"m":{},"initial_sync_ms":{},"watch_ms":{},"events_per_s":{:.0},"sync_cpu_s":{:.2},"watch_cpu_s":{:.2},"cache_len":{},"max_rss_kb":{}}}"#,
        if args.projection { "projection" } else { "typed" },
        cfg!(feature = "gzip"),
        if args.strip_managed_fields { "managedFields" } else { "none" },
        args.pods,
        args.events,
        initial_sync.as_millis(),
        watch.as_millis(),
        events_per_s,
        sync_cpu_s,
        cpu_at_last - cpu_at_first,
        reader.len(),
        max_rss_kb()
    ))
}

/// The CPU time this process has used so far, user + system, all its threads, in seconds: fields
/// 14 and 15 of `/proc/self/stat`, in clock ticks of `USER_HZ` (100 on every common
/// architecture), as kube-watcher's bench reads it.
fn cpu_s() -> f64 {
    const USER_HZ: f64 = 100.0;
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The command name (field 2) may hold spaces: count from the `)` that ends it.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let field = |n: usize| rest.split_whitespace().nth(n - 3).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    (field(14) + field(15)) as f64 / USER_HZ
}

fn max_rss_kb() -> u64 {
    rss_kb("VmHWM:")
}

/// A memory figure of `/proc/self/status` in KiB (`VmHWM:` the peak, `VmRSS:` now).
fn rss_kb(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with(field)).map(str::to_owned))
        .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        .unwrap_or(0)
}

/// `--relists K`, as kube-watcher's bench does: times K relists (each from its `Init` to its
/// `InitDone`), with the resident memory before them and the peak during them.
async fn relists<K, S, E>(
    stream: &mut std::pin::Pin<&mut S>,
    reader: &reflector::Store<K>,
    args: &Args,
    initial_sync: Duration,
) -> Result<String, Box<dyn std::error::Error>>
where
    K: kube::Resource<DynamicType = ()> + Clone + 'static,
    S: futures::Stream<Item = Result<watcher::Event<K>, E>>,
    E: std::fmt::Display,
{
    let steady = rss_kb("VmRSS:");
    std::fs::write("/proc/self/clear_refs", "5")?;
    let mut times = Vec::new();
    let mut began = None;
    while times.len() < args.relists {
        match stream.next().await {
            Some(Ok(watcher::Event::Init)) => began = Some(Instant::now()),
            Some(Ok(watcher::Event::InitDone)) => times.extend(began.take().map(|t: Instant| t.elapsed())),
            Some(Ok(_)) => {}
            // The 410 that starts each relist arrives as an error first.
            Some(Err(_)) => {}
            None => return Err("the watch stream ended".into()),
        }
    }
    let peak = rss_kb("VmHWM:");
    let ms: Vec<u128> = times.iter().map(Duration::as_millis).collect();
    let mut sorted = ms.clone();
    sorted.sort_unstable();
    let peer = if args.current_thread { "kube-rs-current-thread" } else { "kube-rs" };
    Ok(format!(
        r#"{{"peer":"{peer}","mode":"relists","allocator":"{ALLOCATOR}","path":"consumer","store":"typed","n":{},"initial_sync_ms":{},"relists":{},"relist_ms_median":{},"relist_ms":{ms:?},"steady_rss_kb":{steady},"relist_peak_rss_kb":{peak},"cache_len":{}}}"#,
        args.pods,
        initial_sync.as_millis(),
        args.relists,
        sorted[sorted.len() / 2],
        reader.len(),
    ))
}
