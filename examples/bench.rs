//! Measures kube-watcher against an API server: initial sync, watch throughput, memory.
//!
//! ```text
//! # terminal 1: a server with 10k realistic pods that sends 100k MODIFIED events on the first watch
//! cargo run --release --example bench -- --serve --pods 10000 --events 100000 --port 18080
//! # terminal 2: the client; prints one JSON line
//! cargo run --release --example bench -- --url http://127.0.0.1:18080 --pods 10000 --events 100000
//! # or against a real API server, which something else fills and writes to (benches/real.sh)
//! cargo run --release --example bench -- --kubeconfig "$KUBECONFIG" --pods 10000 --events 20000
//! ```
//!
//! `--mode typed` (default), `compact` (compact store), `compressed` (compressed store),
//! `projection` (a struct of five pod fields, made a resource with `kube_watcher::resource!`:
//! the rest of each pod is skipped by the decoder) or `metadata` (`--metadata`:
//! `metadata_watcher`, keeping `PartialObjectMetadata<Pod>`; this server ignores the `Accept`
//! header, so it measures the memory saving, not the bandwidth).
//!
//! Client: watches pods in all namespaces and receives every event on the main thread, as a
//! program iterating `for event in &watcher` does: the initial sync ends at the `InitDone` after
//! which the store holds `--pods` objects (`initial_sync_ms`, from start), the watch phase at the
//! `--events`th `Apply`/`Delete` received (`watch_ms`, from the first to the last). With
//! `--store-only`, no consumer is attached: it waits until the store is ready and counts applied
//! events in `stats()` instead (what a cache-only program pays). The consumer path also writes
//! `{"consumer_switches_per_event":…,"worker_switches_per_event":…,"consumer_us_per_event":…}` to
//! stderr: the consumer thread's run time per event, and how often the
//! hand-off put the consumer to sleep (Linux `/proc` context-switch counts). It prints
//! `{"peer":"kube-watcher","wire":"protobuf"|"json","allocator":"glibc"|"mimalloc"|"jemalloc","path":"consumer"|"store","list":"paged"|"streaming","parallel_sync":…,"n":…,"m":…,"initial_sync_ms":…,"watch_ms":…,"events_per_s":…,"skip":…,"sync_cpu_s":…,"watch_cpu_s":…,"watch_us_per_event":…,"cpu_s_per_100k_synced":…,"cpu_s_per_100k_events":…,"cache_len":…,"max_rss_kb":…,"get_us_median":…,"get_us_p99":…}`
//! with the peak RSS from `/proc/self/status` (VmHWM), then `"stop_us":…` at the end: how long
//! `stop()` took, called while idle in the watch (after the last event, and a 50 ms pause).
//! The CPU figures are the client process's user + system time (`/proc/self/stat`, every thread,
//! 10 ms resolution): until the initial sync ends, and over the watch phase, each also per 100k
//! objects synced or events received; `watch_us_per_event` is the watch phase's again, per
//! event and to the nanosecond (its threads' run time, `/proc/self/task/*/schedstat`). On a machine shared with the server (and with other
//! work) wall time hides what the program costs its host; CPU time does not.
//!
//! `--with-managed-fields` (client): `WatcherBuilder::with_managed_fields`, so that
//! `metadata.managedFields` (a quarter of a realistic pod's decoded memory, more with more
//! managers), which a watcher skips by default, is decoded; `--skip-managed-fields` says
//! `without_managed_fields` (the default) explicitly. The JSON line's `"skip"` says
//! `"managedFields"` or `"none"`.
//!
//! `--fields SELECTOR` (client): `Config::fields`, e.g. `spec.nodeName=node-1` for a node
//! agent's pods (benches/real.sh `--mode agent`; this bench's own server ignores it).
//!
//! At the end of the initial sync the client writes `{"synced_ms":…,"sync_cpu_s":…}` to
//! stderr (benches/real.sh starts its writer then, so that each event it times comes alone).
//!
//! `--paged-lists` (client): `InitialListStrategy::ListWatch`, the initial state in pages of
//! 500, instead of the default streaming list (one watch with `sendInitialEvents=true`, how
//! client-go's informers fetch it by default); `--streaming-lists` says the default explicitly.
//! The JSON line's `"list"` says `"streaming"` or `"paged"`.
//!
//! `--parallel-sync N` decodes list items on N helper threads (`WatcherBuilder::parallel_sync`;
//! default 0, none); the JSON line says which. `--page-size N` sets `Config::page_size` (0: the
//! whole list in one page, as every relist after a 410 is).
//!
//! `--consumer-rate R` (with `--url`): a consumer attached from the start reads R events a
//! second; the bench times the list until the store is ready (a consumer that is behind must not
//! slow it) and prints `{"path":"behind-a-list","list_ms":…,"lists":…,"max_rss_kb":…}`
//! instead.
//!
//! `--idle-check SECONDS` (with `--url`): after the same sync and events, reads the worker
//! thread's (`kw-pods`) context switches from `/proc/self/task/*/status` before and after
//! SECONDS of idle watching, then stops, and prints instead
//! `{"peer":"kube-watcher","mode":"idle-check","idle_s":…,"worker_voluntary_switches":…,"worker_nonvoluntary_switches":…,"worker_wakeups_per_s":…,"process_wakeups_per_s":…,"stop_us":…}`
//! (process: all threads, the sleeping main thread's one switch included).
//!
//! Server (`--serve`): a minimal HTTP/1.1 server with `--pods` pods of about
//! 6.4 KB of JSON each (rendered at start up to 200k pods; above that, each as it is sent,
//! from its index alone, so that a million cost neither 10 GB nor minutes before the first
//! answer: a template per kind of pod with holes for its own values, ~15 µs a pod, checked
//! against the generators at start) (labels, annotations, managedFields, two containers with env and
//! resources, status with conditions), served in pages of `limit` with continue tokens, and
//! `--events` MODIFIED events (rendered as they are sent, in chunks like a busy apiserver) on
//! the first watch; later watches stay open and quiet. It prints its URL and runs until killed.
//! A watch with `sendInitialEvents=true` (a streaming list: client-go's informers ask for one by
//! default, its `WatchListClient` gate being on since 1.35) gets every pod as ADDED and then the
//! BOOKMARK annotated `k8s.io/initial-events-end: "true"` at the list's resourceVersion before
//! the watch goes on as above; without `allowWatchBookmarks=true` and
//! `resourceVersionMatch=NotOlderThan` it is refused with a 422, as kube-apiserver refuses it.
//! Watch events' objects carry `kind` and `apiVersion`, as kube-apiserver's do.
//! A list body goes out as kube-apiserver sends one: `Content-Type: application/json`, chunked,
//! written through a buffer in chunks of `--chunk-kib` (64 by default; 0: one chunk per pod, as
//! this server once did: benches/peers/kube-rs/README.md says what that cost kube-rs). `--gzip`: gzip (fastest level) list bodies above 128 KiB when
//! the request says `Accept-Encoding: gzip`, as kube-apiserver does. `--page-cap N`: at most N
//! pods per page whatever `limit` asks (with a continue token), as a server that caps lists does.
//! It is deliberately not the general fake server (`kube_watcher::testing`): it must not be the
//! bottleneck. To a client that lists `application/vnd.kubernetes.protobuf` first in `Accept`
//! it answers the same in protobuf (docs/protocol.md §12): pods encoded once at start, list
//! pages as enveloped `PodList`s, events as length-delimited frames; kube-watcher asks for it by
//! default, and the client's `--wire json|protobuf` sets `Config::wire_format` (the JSON line's
//! `"wire"` says which the watcher read).
//!
//! `--relists K`: the server answers the K watches after the first with an in-stream 410
//! (`Expired`), each of which makes the client relist, and lists the same pods again (with
//! `--relist-changed PCT`, that percentage of them at a new resourceVersion in each relist);
//! the client, which then lists in pages (the server expires watches that follow a list),
//! after the `--events`, waits for K relists and prints instead
//! `{"peer":"kube-watcher","mode":"relists",…,"initial_sync_ms":…,"relists":K,"relist_ms_median":…,"relist_ms":[…],"steady_rss_kb":…,"relist_peak_rss_kb":…}`:
//! each relist timed from its `Notice::Relisting` to its `Notice::Synced` (on the consumer path
//! a thread receives every event meanwhile; `--store-only`: nothing attached), the resident memory once synced
//! (VmRSS) and the peak during the relists (VmHWM, reset through `/proc/self/clear_refs` after
//! the sync). Use `--events 0`: events change the pods the store holds, so a relist of the
//! listed pods would find them all changed.
//!
//! `--event-rate R` (server): the first watch's `--events` go out one at a time, each in its
//! own chunk and flushed, at R a second, as a server sends the events of writes that come one
//! at a time, instead of back to back in chunks of 64 KiB (docs/performance.md, "Events one at
//! a time").
//!
//! `--render-as-sent` (server): render every pod as it is sent, from a template (filled in a few
//! microseconds, checked against the generator at start), as above 200k pods; by default
//! pods up to 200k are rendered at start.
//!
//! `--varied` (server): pods of 50 deployments that differ as a real cluster's do
//! (`benches/support/varied_pod.rs`: random uids, container ids and image digests) instead of
//! copies of one pod that differ in a few numbers; the client needs `--varied` too, to look
//! them up when it times `get()` and, with `--shard`, to know which are its shard's.
//!
//! A replica of a 1M-pod cluster (docs/performance.md, "A replica of a 1M-pod cluster"):
//! `--serve --pods 1000000 --events 0 --varied [--filter-shards]` and `--url … --pods 1000000
//! --events 0 --varied --shard 0/4 --mode compressed --skip-managed-fields`.
//!
//! The global allocator is the application's choice (the library never sets one): built here,
//! glibc's malloc. `benches/alloc` is a cargo project of its own that builds this same file with
//! mimalloc or jemalloc installed (`benches/compare.sh --alloc`), so that neither allocator is a
//! dependency or a feature of the library.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube_watcher::{Api, Client, Event, Notice, ObjectRef, RelistReason, Watchable, Watcher};

struct Args {
    /// The global allocator's name, for the JSON line (set by `run`'s caller).
    allocator: &'static str,
    serve: bool,
    url: Option<String>,
    /// A kubeconfig instead of `--url`: a real API server, with its credentials.
    kubeconfig: Option<String>,
    pods: usize,
    events: usize,
    port: u16,
    mode: String,
    idle_check: Option<f64>,
    /// Count events in `stats()` with no consumer attached (the store-only path).
    store_only: bool,
    /// `WatcherBuilder::parallel_sync`: helper threads that decode list items (0: none).
    parallel_sync: usize,
    /// Server: gzip list bodies above 128 KiB when the request accepts gzip.
    gzip: bool,
    /// Server: at most this many pods per page, whatever `limit` asks.
    page_cap: Option<usize>,
    /// Server: chunk size of a list body in KiB (0: one chunk per pod).
    chunk_kib: usize,
    /// Server: varied pods (benches/support/varied_pod.rs); client: look those up in `get()`.
    varied: bool,
    /// Server: answer this many watches after the first with a 410 (each makes the client
    /// relist); client: wait for and time this many relists after the events.
    relists: usize,
    /// Server: the percentage of pods whose resourceVersion is new in each relist's list.
    relist_changed: usize,
    /// Client: the encoding to ask for (`Config::wire_format`); `None`: the default.
    wire: Option<kube_watcher::WireFormat>,
    /// Client: watch shard I of N (`Config::shard`); the pods and events it waits for are
    /// those of its shard (their uids are known: see `realistic_pod::uid`).
    shard: Option<(u32, u32)>,
    /// Server: filter lists and watches by `shardSelector` and echo `shardInfo`, as a
    /// Kubernetes 1.36 server with `ShardedListAndWatch` does (without it, it is ignored).
    filter_shards: bool,
    /// Server: render pods as they are sent (from templates) whatever their number; by
    /// default only above [`RENDER_AT_START`].
    render_as_sent: bool,
    /// Client: the pods and watch events it waits for (`--pods` and `--events`, or their
    /// shard's part).
    want: (usize, usize),
    /// Client: `Config::page_size` (0: one page); `None`: the default.
    page_size: Option<u32>,
    /// Client: a consumer that reads at most this many events a second during the sync; the
    /// bench times the list (until the store is ready) instead of the events.
    consumer_rate: Option<u32>,
    /// Client: `WatcherBuilder::with_managed_fields` (true) or `without_managed_fields` (false);
    /// `None`: the watcher's default (skipped).
    managed_fields: Option<bool>,
    /// Client: paged lists (`InitialListStrategy::ListWatch`) instead of the default streaming
    /// list (the initial state as a watch with `sendInitialEvents=true`, as client-go's
    /// informers fetch it).
    paged_lists: bool,
    /// Client: a field selector (`Config::fields`), e.g. a node agent's `spec.nodeName=node-1`.
    fields: Option<String>,
    /// Server: send the watch events one at a time, each in its own chunk, at this many a
    /// second (`--event-rate`), as a real server under a steady stream of writes does; `None`:
    /// back to back, in chunks of 64 KiB.
    event_rate: Option<f64>,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        allocator: "glibc",
        serve: false,
        url: None,
        kubeconfig: None,
        pods: 10_000,
        events: 100_000,
        port: 0,
        mode: "typed".into(),
        idle_check: None,
        store_only: false,
        parallel_sync: 0,
        gzip: false,
        page_cap: None,
        chunk_kib: 64,
        varied: false,
        relists: 0,
        relist_changed: 0,
        wire: None,
        shard: None,
        filter_shards: false,
        render_as_sent: false,
        want: (0, 0),
        page_size: None,
        consumer_rate: None,
        managed_fields: None,
        paged_lists: false,
        event_rate: None,
        fields: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "--serve" => a.serve = true,
            "--url" => a.url = Some(value()?),
            "--kubeconfig" => a.kubeconfig = Some(value()?),
            "--pods" => a.pods = value()?.parse().map_err(|e| format!("--pods: {e}"))?,
            "--events" => a.events = value()?.parse().map_err(|e| format!("--events: {e}"))?,
            "--port" => a.port = value()?.parse().map_err(|e| format!("--port: {e}"))?,
            "--mode" => a.mode = value()?,
            "--metadata" => a.mode = "metadata".into(),
            "--store-only" => a.store_only = true,
            "--streaming-lists" => a.paged_lists = false,
            "--paged-lists" => a.paged_lists = true,
            "--parallel-sync" => {
                a.parallel_sync = value()?.parse().map_err(|e| format!("--parallel-sync: {e}"))?;
            }
            "--idle-check" => {
                a.idle_check = Some(value()?.parse().map_err(|e| format!("--idle-check: {e}"))?);
            }
            "--gzip" => a.gzip = true,
            "--wire" => {
                a.wire = Some(match value()?.as_str() {
                    "json" => kube_watcher::WireFormat::Json,
                    "protobuf" => kube_watcher::WireFormat::Protobuf,
                    other => return Err(format!("--wire {other}: expected json or protobuf")),
                });
            }
            "--varied" => a.varied = true,
            "--filter-shards" => a.filter_shards = true,
            "--render-as-sent" => a.render_as_sent = true,
            "--shard" => {
                let v = value()?;
                let (i, n) = v.split_once('/').ok_or("--shard: I/N")?;
                let (i, n) =
                    (i.parse().map_err(|e| format!("--shard: {e}"))?, n.parse().map_err(|e| format!("--shard: {e}"))?);
                a.shard = Some((i, n));
            }
            "--relists" => a.relists = value()?.parse().map_err(|e| format!("--relists: {e}"))?,
            "--relist-changed" => {
                a.relist_changed = value()?.parse().map_err(|e| format!("--relist-changed: {e}"))?;
                if a.relist_changed > 100 {
                    return Err("--relist-changed: a percentage, at most 100".into());
                }
            }
            "--page-cap" => {
                let cap: usize = value()?.parse().map_err(|e| format!("--page-cap: {e}"))?;
                if cap == 0 {
                    return Err("--page-cap: must be at least 1".into());
                }
                a.page_cap = Some(cap);
            }
            "--chunk-kib" => {
                a.chunk_kib = value()?.parse().map_err(|e| format!("--chunk-kib: {e}"))?;
                if a.chunk_kib > 16 * 1024 {
                    return Err("--chunk-kib: at most 16384".into());
                }
            }
            "--page-size" => a.page_size = Some(value()?.parse().map_err(|e| format!("--page-size: {e}"))?),
            "--consumer-rate" => {
                let rate: u32 = value()?.parse().map_err(|e| format!("--consumer-rate: {e}"))?;
                if rate == 0 {
                    return Err("--consumer-rate: events a second, at least 1".into());
                }
                a.consumer_rate = Some(rate);
            }
            "--skip-managed-fields" => a.managed_fields = Some(false),
            "--with-managed-fields" => a.managed_fields = Some(true),
            "--fields" => a.fields = Some(value()?),
            "--event-rate" => {
                let rate: f64 = value()?.parse().map_err(|e| format!("--event-rate: {e}"))?;
                if !(rate > 0.0 && rate <= 1e6) {
                    return Err("--event-rate: events a second, above 0 and at most 1000000".into());
                }
                a.event_rate = Some(rate);
            }
            "-h" | "--help" => {
                return Err("usage: bench --serve [--pods N] [--events M] [--port P] [--gzip] [--page-cap N] [--chunk-kib K] [--varied] [--event-rate R]\n       bench --url URL|--kubeconfig FILE [--pods N] [--events M] [--mode typed|compact|compressed|metadata|projection] [--metadata] [--store-only] [--parallel-sync N] [--varied] [--idle-check SECONDS] [--wire json|protobuf] [--page-size N] [--consumer-rate EVENTS_PER_S] [--shard I/N] [--skip-managed-fields|--with-managed-fields] [--streaming-lists|--paged-lists] [--fields SELECTOR]\n       --serve also takes --filter-shards".into());
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    a.want = (a.pods, a.events);
    // The server expires the watches that follow a list (see `--relists` in the module docs).
    if a.relists > 0 {
        a.paged_lists = true;
    }
    if let Some((i, n)) = a.shard {
        let shard = kube_watcher::Shard::of(i, n).map_err(|e| e.to_string())?;
        let ours: Vec<bool> = (0..a.pods).map(|p| shard.contains(&pod_uid_of(p, a.varied))).collect();
        a.want = (ours.iter().filter(|o| **o).count(), (0..a.events).filter(|e| ours[e % a.pods.max(1)]).count());
    }
    Ok(a)
}

fn main() {
    run("glibc");
}

/// The bench, with `allocator` naming the global allocator in the JSON line: `main` here, and
/// `benches/alloc/src/main.rs` after installing another one.
pub fn run(allocator: &'static str) {
    let args = match parse_args() {
        Ok(a) => Args { allocator, ..a },
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    };
    if args.serve {
        serve(&args);
    } else if let Err(e) = client(&args) {
        eprintln!("bench: {e}");
        std::process::exit(1);
    }
}

// ---------------------------------------------------------------- client

fn client(args: &Args) -> Result<(), Box<dyn std::error::Error>> {
    let connect = || -> Result<Client, Box<dyn std::error::Error>> {
        match (&args.url, &args.kubeconfig) {
            (Some(url), None) => Ok(Client::from_url(url)?),
            (None, Some(path)) => Ok(Client::from_kubeconfig_path(path, &kube_watcher::KubeconfigOptions::default())?),
            _ => Err("--url or --kubeconfig is required (one of them), or --serve".into()),
        }
    };
    let start = Instant::now();
    let api: Api<Pod> = Api::all(connect()?);
    let parallel = args.parallel_sync;
    let mut config = match args.wire {
        Some(format) => kube_watcher::Config::default().wire_format(format),
        None => kube_watcher::Config::default(),
    };
    if let Some((i, n)) = args.shard {
        config = config.shard(kube_watcher::Shard::of(i, n)?);
    }
    if let Some(n) = args.page_size {
        config = config.page_size(n);
    }
    if args.paged_lists {
        config = config.initial_list_strategy(kube_watcher::InitialListStrategy::ListWatch);
    }
    if let Some(fields) = &args.fields {
        config = config.fields(fields);
    }
    let builder = managed_fields(Watcher::builder(api.clone()).config(config.clone()).parallel_sync(parallel), args);
    match args.mode.as_str() {
        "typed" => measure(builder.start()?, args, start),
        "compact" => measure(builder.compact_store().start()?, args, start),
        "compressed" => measure(builder.compressed_store().start()?, args, start),
        // Only metadata is decoded and kept (as `metadata_watcher` does); this bench's server
        // ignores the Accept header and sends full pods, so the saving measured is memory, not
        // bandwidth.
        "metadata" => {
            let builder = Watcher::builder(api.into_metadata()).config(config).parallel_sync(parallel);
            measure(managed_fields(builder, args).start()?, args, start)
        }
        // A struct of five pod fields (name and namespace in its metadata, node, phase, IP):
        // everything else is skipped by the decoder (`kube_watcher::resource!`).
        "projection" => {
            let api: Api<PodView> = Api::all(connect()?);
            let builder = Watcher::builder(api).config(config).parallel_sync(parallel);
            measure(managed_fields(builder, args).start()?, args, start)
        }
        other => Err(format!("--mode {other}: expected typed, compact, compressed, metadata or projection").into()),
    }
}

/// `--with-managed-fields` or `--skip-managed-fields`, if either was given.
fn managed_fields<K: Watchable>(
    builder: kube_watcher::WatcherBuilder<K>,
    args: &Args,
) -> kube_watcher::WatcherBuilder<K> {
    match args.managed_fields {
        Some(true) => builder.with_managed_fields(),
        Some(false) => builder.without_managed_fields(),
        None => builder,
    }
}

/// A pod as a program that reads five of its fields sees it (`--mode projection`). The bench
/// only holds them (as `typed` holds whole pods), hence `dead_code`.
#[allow(dead_code)]
#[derive(Debug, serde::Deserialize)]
struct PodView {
    metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    spec: Option<PodViewSpec>,
    status: Option<PodViewStatus>,
}

#[allow(dead_code)]
#[derive(Debug, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct PodViewSpec {
    node_name: Option<String>,
}

#[allow(dead_code)]
#[derive(Debug, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct PodViewStatus {
    phase: Option<String>,
    #[serde(rename = "podIP")]
    pod_ip: Option<String>,
}

kube_watcher::resource!(PodView, group = "", version = "v1", kind = "Pod", plural = "pods", namespaced);

/// The two phases a run times: wall time, and the CPU time of the whole process (user + system,
/// every thread) spent in each.
struct Phases {
    /// From start until the store holds `--pods` objects.
    initial_sync: Duration,
    /// From the first watch event to the `--events`th.
    watch: Duration,
    /// CPU seconds from the process's start to the end of the initial sync.
    sync_cpu_s: f64,
    /// CPU seconds over the watch phase.
    watch_cpu_s: f64,
    /// The threads' run time over the watch phase, in nanoseconds (see [`threads_run_ns`]).
    watch_run_ns: u64,
}

/// The CPU time this process has used so far, user + system, all its threads (those that
/// exited too), in seconds: fields 14 and 15 of `/proc/self/stat`, in clock ticks of `USER_HZ`,
/// which Linux fixes at 100 for user space on every common architecture (so 10 ms resolution).
fn cpu_s() -> f64 {
    const USER_HZ: f64 = 100.0;
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The command name (field 2) may hold spaces: count from the `)` that ends it.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let field = |n: usize| rest.split_whitespace().nth(n - 3).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    (field(14) + field(15)) as f64 / USER_HZ
}

/// Tells whoever runs the bench that the initial sync is over (`{"synced_ms":…,"sync_cpu_s":…}`
/// on stderr, as the kube-rs and client-go peers write it): benches/real.sh starts its writer
/// then, so that every event it times comes alone.
fn synced(after: Duration, cpu_s: f64) {
    eprintln!(r#"{{"synced_ms":{},"sync_cpu_s":{cpu_s:.2}}}"#, after.as_millis());
}

/// The store-only path: no consumer attached (nothing is queued); waits for the store, then
/// counts applied watch events in `stats()`.
fn store_only<K: Watchable>(watcher: &Watcher<K>, args: &Args, start: Instant) -> Result<Phases, String> {
    let store = watcher.store();
    store.wait_until_ready(Duration::from_secs(600)).map_err(|e| e.to_string())?;
    while store.len() < args.want.0 {
        std::thread::sleep(Duration::from_millis(1));
    }
    let initial_sync = start.elapsed();
    let sync_cpu_s = cpu_s();
    synced(initial_sync, sync_cpu_s);
    // Count watch events applied (store-only: no consumer attached, nothing queued).
    let mut first = None;
    let mut cpu_at_first = sync_cpu_s;
    let mut run_at_first = 0;
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let e = watcher.stats().events;
        let n = (e.added + e.modified + e.deleted) as usize;
        if n >= 1 && first.is_none() {
            first = Some(Instant::now());
            cpu_at_first = cpu_s();
            run_at_first = threads_run_ns();
        }
        if n >= args.want.1 {
            break;
        }
        if Instant::now() > deadline {
            return Err(format!("only {n} of {} events arrived", args.want.1));
        }
        std::thread::sleep(Duration::from_micros(500));
    }
    let watch = first.map(|t| t.elapsed()).unwrap_or_default();
    let watch_run_ns = threads_run_ns().saturating_sub(run_at_first);
    Ok(Phases { initial_sync, watch, sync_cpu_s, watch_cpu_s: cpu_s() - cpu_at_first, watch_run_ns })
}

/// Receives every event, as `for event in &watcher` does: the initial sync ends at the
/// `InitDone` after which the store holds `--pods` objects, the watch phase at the `--events`th
/// `Apply`/`Delete` received (timed from the first).
fn consume<K: Watchable>(watcher: &Watcher<K>, args: &Args, start: Instant) -> Result<Phases, String> {
    let deadline = Instant::now() + Duration::from_secs(600);
    let mut initial_sync = None;
    let (mut sync_cpu_s, mut cpu_at_first, mut run_at_first) = (0.0, 0.0, 0);
    let (mut first, mut n) = (None, 0usize);
    // Context switches of this (consumer) thread and of the worker over the watch phase: how
    // often the hand-off put the consumer to sleep and woke it again.
    let mut switches_at_first = None;
    while initial_sync.is_none() || n < args.want.1 {
        let left = deadline.saturating_duration_since(Instant::now());
        let event = match watcher.recv_timeout(left) {
            Ok(Ok(event)) => event,
            Ok(Err(e)) => return Err(format!("watch error: {e}")),
            Err(_) => return Err(format!("only {n} of {} events arrived", args.want.1)),
        };
        match event {
            Event::InitDone if initial_sync.is_none() && watcher.store().len() >= args.want.0 => {
                initial_sync = Some(start.elapsed());
                sync_cpu_s = cpu_s();
                synced(start.elapsed(), sync_cpu_s);
            }
            Event::Apply(_) | Event::Delete(_) if initial_sync.is_some() => {
                if first.is_none() {
                    first = Some(Instant::now());
                    cpu_at_first = cpu_s();
                    run_at_first = threads_run_ns();
                    switches_at_first =
                        Some((own_switches(), thread_switches("kw-pods").unwrap_or_default(), own_run_ns()));
                }
                n += 1;
            }
            _ => {}
        }
    }
    let watch = first.map(|t| t.elapsed()).unwrap_or_default();
    let watch_cpu_s = cpu_s() - cpu_at_first;
    let watch_run_ns = threads_run_ns().saturating_sub(run_at_first);
    if let Some((consumer, worker, consumer_run)) = switches_at_first {
        let (consumer_now, worker_now) = (own_switches(), thread_switches("kw-pods").unwrap_or_default());
        let per_event = |a: (u64, u64), b: (u64, u64)| ((b.0 + b.1) - (a.0 + a.1)) as f64 / n.max(1) as f64;
        eprintln!(
            r#"{{"consumer_switches_per_event":{:.3},"worker_switches_per_event":{:.3},"consumer_us_per_event":{:.1}}}"#,
            per_event(consumer, consumer_now),
            per_event(worker, worker_now),
            own_run_ns().saturating_sub(consumer_run) as f64 / 1e3 / n.max(1) as f64,
        );
    }
    Ok(Phases { initial_sync: initial_sync.unwrap_or_default(), watch, sync_cpu_s, watch_cpu_s, watch_run_ns })
}

/// `--consumer-rate`: a consumer attached from the start reads `rate` events a second, far
/// slower than the list arrives; times the list (from start until the store is ready, which a
/// consumer that is behind must not delay) and prints it with the peak RSS. The consumer is
/// still reading when the watcher stops.
fn behind_a_list<K: Watchable>(watcher: &Watcher<K>, args: &Args, rate: u32, start: Instant) -> Result<(), String> {
    let rx = watcher.receiver().clone();
    let pause = Duration::from_secs(1) / rate;
    let consumer = std::thread::spawn(move || {
        let mut read = 0u64;
        for _ in rx.iter() {
            read += 1;
            std::thread::sleep(pause);
        }
        read
    });
    watcher.store().wait_until_ready(Duration::from_secs(600)).map_err(|e| e.to_string())?;
    let list = start.elapsed();
    let (stats, max_rss) = (watcher.stats(), max_rss_kb());
    watcher.stop();
    let read = consumer.join().map_err(|_| "the consumer panicked".to_owned())?;
    println!(
        r#"{{"peer":"kube-watcher","path":"behind-a-list","consumer_rate":{rate},"page_size":{},"n":{},"list_ms":{},"lists":{},"consumer_read":{read},"cache_len":{},"max_rss_kb":{max_rss}}}"#,
        args.page_size.map_or(-1, i64::from),
        args.pods,
        list.as_millis(),
        stats.lists,
        stats.objects,
    );
    Ok(())
}

/// The calling thread's run time so far (user and system), in nanoseconds (see [`threads_run_ns`]).
fn own_run_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse().ok()))
        .unwrap_or(0)
}

/// The context switches of the calling thread.
fn own_switches() -> (u64, u64) {
    std::fs::read_to_string("/proc/thread-self/status").map(|s| switches(&s)).unwrap_or_default()
}

/// Times `args.relists` relists (each from its `Notice::Relisting` to its `Notice::Synced`),
/// then prints them with the resident memory before and the peak during them. On the consumer
/// path a thread receives every event meanwhile; on the store-only path nothing is attached.
fn relists<K: Watchable>(watcher: &Watcher<K>, args: &Args, initial_sync: Duration) -> Result<(), String> {
    // The notices channel holds them all from the start: the first relist may be under way.
    let notices = watcher.notices();
    let mut synced = false;
    let drain = (!args.store_only).then(|| {
        let rx = watcher.receiver().clone();
        std::thread::spawn(move || rx.iter().count())
    });
    // The resident memory now, and the peak from now on.
    let steady = rss_kb("VmRSS:");
    std::fs::write("/proc/self/clear_refs", "5").map_err(|e| format!("reset the peak RSS: {e}"))?;
    let deadline = Instant::now() + Duration::from_secs(600);
    let mut times = Vec::new();
    let mut began = None;
    while times.len() < args.relists {
        let left = deadline.saturating_duration_since(Instant::now());
        match notices.recv_timeout(left) {
            Ok(Notice::Synced { reason: RelistReason::Initial, .. }) => synced = true,
            Ok(Notice::Relisting { .. }) if synced => began = Some(Instant::now()),
            Ok(Notice::Synced { .. }) => times.extend(began.take().map(|t| t.elapsed())),
            Ok(_) => {}
            Err(_) => return Err(format!("only {} of {} relists came", times.len(), args.relists)),
        }
    }
    let peak = rss_kb("VmHWM:");
    watcher.stop();
    if let Some(drain) = drain {
        let _ = drain.join();
    }
    let ms: Vec<u128> = times.iter().map(Duration::as_millis).collect();
    let mut sorted = ms.clone();
    sorted.sort_unstable();
    println!(
        r#"{{"peer":"kube-watcher","mode":"relists","allocator":"{}","path":"{}","store":"{}","parallel_sync":{},"n":{},"initial_sync_ms":{},"relists":{},"relist_ms_median":{},"relist_ms":{ms:?},"steady_rss_kb":{steady},"relist_peak_rss_kb":{peak}}}"#,
        args.allocator,
        if args.store_only { "store" } else { "consumer" },
        args.mode,
        args.parallel_sync,
        args.pods,
        initial_sync.as_millis(),
        args.relists,
        sorted[sorted.len() / 2],
    );
    Ok(())
}

/// Waits for the sync and the events, then prints the figures.
fn measure<K: Watchable>(watcher: Watcher<K>, args: &Args, start: Instant) -> Result<(), Box<dyn std::error::Error>> {
    if let Some(rate) = args.consumer_rate {
        return Ok(behind_a_list(&watcher, args, rate, start)?);
    }
    let store = watcher.store();
    let phases = if args.store_only { store_only(&watcher, args, start)? } else { consume(&watcher, args, start)? };
    let (initial_sync, watch) = (phases.initial_sync, phases.watch);
    if args.relists > 0 {
        return Ok(relists(&watcher, args, initial_sync)?);
    }
    let events_per_s = if watch.is_zero() { 0.0 } else { args.want.1 as f64 / watch.as_secs_f64() };
    let (cache_len, max_rss, cpu_total_ms) = (store.len(), max_rss_kb(), cpu_ms());
    let (get_median, get_p99) = get_latency(&store, args)?;
    // Idle in the watch: the server sends nothing after the last event.
    std::thread::sleep(Duration::from_millis(50));
    if let Some(secs) = args.idle_check {
        let worker_before = thread_switches("kw-pods").ok_or("no kw-pods thread in /proc/self/task")?;
        let process_before = process_switches();
        std::thread::sleep(Duration::from_secs_f64(secs));
        let worker_after = thread_switches("kw-pods").ok_or("the kw-pods thread is gone")?;
        let process_after = process_switches();
        let stop_us = timed_stop(&watcher);
        let (vol, nonvol) = (worker_after.0 - worker_before.0, worker_after.1 - worker_before.1);
        let process = (process_after.0 + process_after.1) - (process_before.0 + process_before.1);
        println!(
            r#"{{"peer":"kube-watcher","mode":"idle-check","idle_s":{secs},"worker_voluntary_switches":{vol},"worker_nonvoluntary_switches":{nonvol},"worker_wakeups_per_s":{:.3},"process_wakeups_per_s":{:.3},"stop_us":{stop_us}}}"#,
            (vol + nonvol) as f64 / secs,
            process as f64 / secs,
        );
        return Ok(());
    }
    let wire = match watcher.stats().wire_format {
        Some(kube_watcher::WireFormat::Protobuf) => "protobuf",
        Some(_) => "json",
        None => "none",
    };
    let shard = match (args.shard, watcher.stats().shard_filter) {
        (None, _) => String::new(),
        (Some((i, n)), by) => {
            let by = match by {
                Some(kube_watcher::ShardFilter::Server) => "server",
                Some(kube_watcher::ShardFilter::Client) => "client",
                _ => "unknown",
            };
            format!(r#""shard":"{i}/{n}","shard_filter":"{by}","#)
        }
    };
    let stop_us = timed_stop(&watcher);
    // CPU seconds per 100k: what the program costs its host, which wall time on a machine
    // shared with the server hides.
    let per_100k = |cpu: f64, n: usize| cpu * 100_000.0 / n.max(1) as f64;
    let cpu = format!(
        r#""skip":"{}","sync_cpu_s":{:.2},"watch_cpu_s":{:.2},"watch_us_per_event":{:.1},"cpu_s_per_100k_synced":{:.2},"cpu_s_per_100k_events":{:.2}"#,
        if args.managed_fields == Some(true) { "none" } else { "managedFields" },
        phases.sync_cpu_s,
        phases.watch_cpu_s,
        phases.watch_run_ns as f64 / 1e3 / args.want.1.max(1) as f64,
        per_100k(phases.sync_cpu_s, args.pods),
        per_100k(phases.watch_cpu_s, args.events),
    );
    println!(
        r#"{{"peer":"kube-watcher",{shard}"wire":"{wire}","allocator":"{}","path":"{}","list":"{}","parallel_sync":{},"n":{},"m":{},"initial_sync_ms":{},"watch_ms":{},"events_per_s":{:.0},{cpu},"cache_len":{},"max_rss_kb":{},"cpu_ms":{cpu_total_ms},"get_us_median":{get_median:.1},"get_us_p99":{get_p99:.1},"stop_us":{}}}"#,
        args.allocator,
        if args.store_only { "store" } else { "consumer" },
        if args.paged_lists { "paged" } else { "streaming" },
        args.parallel_sync,
        args.pods,
        args.events,
        initial_sync.as_millis(),
        watch.as_millis(),
        events_per_s,
        cache_len,
        max_rss,
        stop_us
    );
    // The measurement is over: exit without freeing the cache, as the kube-rs peer does
    // (benches/peers/kube-rs). Its client CPU time (benches/compare.sh) then covers the same
    // work; freeing 10k cached pods at exit took ~0.3 s of this process's CPU.
    std::process::exit(0)
}

/// The median and 99th percentile of one `Store::get`'s wall time in microseconds, over 1000
/// pods spread across the cache (in the compact modes each get decodes); with `--shard`, 1000
/// pods of the shard.
fn get_latency<K: Watchable>(store: &kube_watcher::Store<K>, args: &Args) -> Result<(f64, f64), String> {
    let shard = args.shard.map(|(i, n)| kube_watcher::Shard::of(i, n)).transpose().map_err(|e| e.to_string())?;
    let n = args.pods.max(1);
    // Spread over the pods, each moved on to the next one of the shard.
    let pods: Vec<usize> = (0..1000)
        .filter_map(|k| {
            (k * n / 1000..n).find(|&i| shard.as_ref().is_none_or(|s| s.contains(&pod_uid_of(i, args.varied))))
        })
        .collect();
    let mut missing = 0;
    let mut times: Vec<f64> = pods
        .into_iter()
        .map(|i| {
            let (ns, name) =
                if args.varied { varied_key(i) } else { (format!("ns-{}", i % 50), format!("web-{i:06}")) };
            let key = ObjectRef::<K>::new(&name).within(&ns);
            let t = Instant::now();
            let found = store.get(&key);
            let us = t.elapsed().as_secs_f64() * 1e6;
            missing += usize::from(found.is_none());
            drop(found);
            us
        })
        .collect();
    if missing > 0 {
        eprintln!("get(): {missing} of 1000 pods not found (a server with --varied needs a client with --varied)");
    }
    if times.is_empty() {
        return Ok((0.0, 0.0));
    }
    times.sort_by(f64::total_cmp);
    Ok((times[times.len() / 2], times[times.len() * 99 / 100]))
}

/// `stop()`'s wall time in microseconds.
fn timed_stop<K: Watchable>(watcher: &Watcher<K>) -> u128 {
    let t = Instant::now();
    watcher.stop();
    t.elapsed().as_micros()
}

/// (voluntary, nonvoluntary) context switches of one `/proc/self/task/*/status`.
fn switches(status: &str) -> (u64, u64) {
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim_start_matches(':').trim().parse().ok())
            .unwrap_or(0)
    };
    (field("voluntary_ctxt_switches"), field("nonvoluntary_ctxt_switches"))
}

fn task_statuses() -> Vec<String> {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else { return Vec::new() };
    dir.flatten().filter_map(|t| std::fs::read_to_string(t.path().join("status")).ok()).collect()
}

/// The context switches of the thread named `name`.
fn thread_switches(name: &str) -> Option<(u64, u64)> {
    task_statuses()
        .iter()
        .find(|s| s.lines().next().and_then(|l| l.strip_prefix("Name:")).map(str::trim) == Some(name))
        .map(|s| switches(s))
}

/// The context switches of every thread of this process, summed.
fn process_switches() -> (u64, u64) {
    task_statuses().iter().map(|s| switches(s)).fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1))
}

/// The run time of this process's threads alive now (user and system), summed, in nanoseconds:
/// the first field of each `/proc/self/task/*/schedstat`. Precise where [`cpu_s`] counts 10 ms
/// ticks, but blind to threads that have ended, so it times the watch phase, whose threads (the
/// worker and the consumer) live throughout.
fn threads_run_ns() -> u64 {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else { return 0 };
    dir.flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next().and_then(|v| v.parse::<u64>().ok()))
        .sum()
}

/// The process's CPU time so far (user and system) in milliseconds (see [`cpu_s`]).
fn cpu_ms() -> u64 {
    (cpu_s() * 1000.0).round() as u64
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

// ---------------------------------------------------------------- server

/// The list RV; watch events continue from here.
const LIST_RV: u64 = 1_000_000;

/// The object of the BOOKMARK that ends a streaming list's initial events: a pod with only the
/// list's resourceVersion and the annotation that marks it.
const INITIAL_EVENTS_END: &str = r#"{"kind":"Pod","apiVersion":"v1","metadata":{"resourceVersion":"1000000","annotations":{"k8s.io/initial-events-end":"true"}}}"#;

fn serve(args: &Args) {
    let listener = TcpListener::bind(("127.0.0.1", args.port)).expect("bind");
    let addr = listener.local_addr().expect("addr");
    let started = Instant::now();
    let at_start = args.pods <= RENDER_AT_START && !args.render_as_sent;
    let pods = Arc::new(Pods::new(args.pods, args.varied, at_start));
    let sample = pods.n.min(1000);
    let avg =
        |f: &dyn Fn(usize) -> usize| (0..sample).map(|k| f(k * pods.n / sample.max(1))).sum::<usize>() / sample.max(1);
    let (json, pb) = (avg(&|i| pods.json(i).len()), avg(&|i| pods.pb(i).len()));
    println!("http://{addr}");
    eprintln!(
        "serving {} pods (about {json} bytes of JSON and {pb} of protobuf each, {}), {} events on the first watch",
        pods.n,
        if pods.json.is_empty() {
            "rendered as they are sent".to_owned()
        } else {
            format!("rendered and encoded in {:?}", started.elapsed())
        },
        args.events
    );
    let opts = ServerOpts {
        events: args.events,
        gzip: args.gzip,
        page_cap: args.page_cap.unwrap_or(usize::MAX),
        chunk: args.chunk_kib * 1024,
        varied: args.varied,
        relists: args.relists,
        relist_changed: args.relist_changed,
        filter_shards: args.filter_shards,
        event_rate: args.event_rate,
    };
    let state = Arc::new(ServerState::default());
    for conn in listener.incoming().flatten() {
        let pods = Arc::clone(&pods);
        let state = Arc::clone(&state);
        std::thread::spawn(move || {
            let _ = handle(conn, &pods, opts, &state);
        });
    }
}

/// Up to this many pods the server renders and encodes them all at start; above it, each pod
/// is made as it is sent, from its index alone (from a [`Template`]), so that a million pods
/// (6 GB of JSON and 3-4 GB of protobuf) cost the server neither that memory nor minutes
/// before its first answer. It then spends ~15 µs of CPU on every pod it sends (on a machine
/// shared with the client, a fraction of what the client spends on it).
const RENDER_AT_START: usize = 200_000;

/// The pods the server serves: pod `i` at resourceVersion `LIST_RV - 1 - i`.
struct Pods {
    n: usize,
    varied: bool,
    /// Every pod's JSON, rendered at start; empty above [`RENDER_AT_START`] pods.
    json: Vec<String>,
    /// Every pod's protobuf (a bare `Pod` message), likewise.
    pb: Vec<Vec<u8>>,
    /// Rendered as they are sent, pods come from one template per deployment and restart
    /// count (varied) or one for all (see [`Template`]), made when first needed.
    templates: std::sync::Mutex<std::collections::HashMap<(usize, u64), Arc<Template>>>,
}

/// A pod with holes for the values each pod has of its own (`realistic_pod::Values`,
/// `varied_pod::PodValues`), as JSON and as protobuf, each cut once into pieces: producing a
/// pod copies the pieces and writes the values in the holes, a few microseconds where
/// rendering and encoding it costs ~0.5 ms (serde_json values, then the crate's JSON-to-protobuf
/// encoder), which made the server, not the client, the bottleneck of a million-pod sync.
/// Values may differ in width from pod to pod (IPs, resourceVersions): the protobuf pieces say
/// which length prefixes hold holes, and those are written anew for each pod. [`Pods::new`]
/// checks templated pods against the generators at start, byte for byte.
struct Template {
    json: Vec<u8>,
    pb: Vec<u8>,
    json_pieces: Vec<Piece>,
    pb_pieces: Vec<Piece>,
}

/// A piece of a [`Template`].
enum Piece {
    /// The template's bytes `start..end`, as they are.
    Bytes(usize, usize),
    /// Hole `k`'s value.
    Hole(usize),
    /// The creation time's seconds (protobuf: a varint).
    Seconds,
    /// A length-delimited protobuf payload that holds holes: its length (a varint), then it.
    Len(Vec<Piece>),
}

/// The placeholder of the creation time (a hole of varied pods): a real time, since protobuf
/// encodes times as seconds, one before any pod's and whose seconds take as many bytes.
const PLACEHOLDER_CREATED: &str = "2000-01-01T00:00:00Z";
const PLACEHOLDER_SECONDS: u64 = 946_684_800;

/// The placeholder of hole `k`: a string no pod holds.
fn placeholder(k: usize) -> String {
    format!("~{k:02}~")
}

/// Varied pods' holes, in this order (the creation time is hole 2).
const VARIED_HOLES: usize = 11;
/// Realistic pods' holes.
const REALISTIC_HOLES: usize = 9;

impl Template {
    /// The template of pod `i`'s kind: its deployment's and restart count's (varied), or the
    /// one of every realistic pod.
    fn of(i: usize, varied: bool) -> Template {
        let p = placeholder;
        let json = if varied {
            let placeholders = PodValues {
                name: p(0),
                token_volume: p(1),
                created: PLACEHOLDER_CREATED.into(),
                uid: p(3),
                node: p(4),
                pod_ip: p(5),
                host_ip: p(6),
                restarts: PodValues::of(i).restarts,
                container_ids: (7..10).map(p).collect(),
            };
            render_varied_with(i, &placeholders, &p(10))
        } else {
            let placeholders = RealisticValues {
                namespace: p(0),
                name: p(1),
                uid: p(2),
                volume: p(3),
                node: p(4),
                host_ip: p(5),
                pod_ip: p(6),
                container_id: p(7),
            };
            render_pod_with(&placeholders, &p(8))
        };
        let holes = if varied { VARIED_HOLES } else { REALISTIC_HOLES };
        let mut markers: Vec<Vec<u8>> = (0..holes).map(|k| p(k).into_bytes()).collect();
        if varied {
            markers[2] = PLACEHOLDER_CREATED.as_bytes().to_vec();
        }
        let markers: Vec<&[u8]> = markers.iter().map(Vec::as_slice).collect();
        let pb = protobuf::pod(&json);
        let mut json_pieces = Vec::new();
        split_at_holes(json.as_bytes(), 0, &markers, &mut json_pieces);
        let seconds = varied.then_some(PLACEHOLDER_SECONDS);
        let pb_pieces = protobuf::pieces(&pb, 0, &markers, seconds).expect("a pod's protobuf is a message");
        Template { json: json.into_bytes(), pb, json_pieces, pb_pieces }
    }

    /// The JSON of the pod with the hole values `values`.
    fn json(&self, values: &[String]) -> String {
        let mut out = Vec::with_capacity(self.json.len() + 256);
        write_pieces(&self.json_pieces, &self.json, values, 0, &mut out);
        // OK: the template is JSON text and the values are strings.
        String::from_utf8(out).expect("JSON text")
    }

    /// The protobuf of the pod with the hole values `values` (the creation time's, hole 2 of a
    /// varied pod, is also written as seconds).
    fn pb(&self, values: &[String]) -> Vec<u8> {
        let seconds = values.get(2).map_or(0, |t| unix_seconds(t));
        let mut out = Vec::with_capacity(self.pb.len() + 256);
        write_pieces(&self.pb_pieces, &self.pb, values, seconds, &mut out);
        out
    }
}

/// `b` (the template's bytes from `base`) as pieces, cut at every placeholder of `markers`.
fn split_at_holes(b: &[u8], base: usize, markers: &[&[u8]], out: &mut Vec<Piece>) {
    let (mut at, mut i) = (0, 0);
    while i < b.len() {
        match markers.iter().position(|m| b[i..].starts_with(m)) {
            Some(k) => {
                if at < i {
                    out.push(Piece::Bytes(base + at, base + i));
                }
                out.push(Piece::Hole(k));
                i += markers[k].len();
                at = i;
            }
            None => i += 1,
        }
    }
    if at < b.len() {
        out.push(Piece::Bytes(base + at, base + b.len()));
    }
}

/// The number of bytes `pieces` write.
fn pieces_len(pieces: &[Piece], values: &[String], seconds: u64) -> usize {
    pieces
        .iter()
        .map(|p| match p {
            Piece::Bytes(start, end) => end - start,
            Piece::Hole(k) => values[*k].len(),
            Piece::Seconds => protobuf::varint_len(seconds),
            Piece::Len(inner) => {
                let n = pieces_len(inner, values, seconds);
                protobuf::varint_len(n as u64) + n
            }
        })
        .sum()
}

fn write_pieces(pieces: &[Piece], template: &[u8], values: &[String], seconds: u64, out: &mut Vec<u8>) {
    for p in pieces {
        match p {
            Piece::Bytes(start, end) => out.extend_from_slice(&template[*start..*end]),
            Piece::Hole(k) => out.extend_from_slice(values[*k].as_bytes()),
            Piece::Seconds => protobuf::varint(out, seconds),
            Piece::Len(inner) => {
                protobuf::varint(out, pieces_len(inner, values, seconds) as u64);
                write_pieces(inner, template, values, seconds, out);
            }
        }
    }
}

/// Seconds since 1970 of a `YYYY-MM-DDTHH:MM:SSZ` time (the varied pods' form).
fn unix_seconds(t: &str) -> u64 {
    let n = |r: std::ops::Range<usize>| t.get(r).and_then(|v| v.parse::<i64>().ok()).unwrap_or(0);
    let (y, m, d) = (n(0..4), n(5..7), n(8..10));
    // Days from the civil date (the proleptic Gregorian calendar; March-based years).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    (days * 86_400 + n(11..13) * 3600 + n(14..16) * 60 + n(17..19)) as u64
}

impl Pods {
    /// `n` pods, rendered at start if `at_start`, else as they are sent.
    fn new(n: usize, varied: bool, at_start: bool) -> Pods {
        let templates = Default::default();
        let mut pods = Pods { n, varied, json: Vec::new(), pb: Vec::new(), templates };
        if at_start {
            pods.json = (0..n).map(|i| pods.render(i)).collect();
            pods.pb = pods.json.iter().map(|p| protobuf::pod(p)).collect();
        } else {
            // The templates must give what the generators do: checked on a sample, and on the
            // last pods (the shortest resourceVersions).
            for i in (0..n).step_by(n / 200 + 1).chain(n.saturating_sub(3)..n) {
                let json = pods.render(i);
                assert_eq!(pods.json(i), json, "pod {i}'s JSON from its template");
                assert_eq!(pods.pb(i), protobuf::pod(&json), "pod {i}'s protobuf from its template");
            }
        }
        pods
    }

    /// Pod `i`'s template and hole values.
    fn templated(&self, i: usize) -> (Arc<Template>, Vec<String>) {
        let rv = (LIST_RV - 1 - i as u64).to_string();
        let (key, values) = if self.varied {
            let v = PodValues::of(i);
            let key = (deployment(i), v.restarts);
            let PodValues { name, token_volume, created, uid, node, pod_ip, host_ip, container_ids, .. } = v;
            let mut values = vec![name, token_volume, created, uid, node, pod_ip, host_ip];
            values.extend(container_ids);
            values.push(rv);
            (key, values)
        } else {
            let RealisticValues { namespace, name, uid, volume, node, host_ip, pod_ip, container_id } =
                RealisticValues::of(i);
            ((0, 0), vec![namespace, name, uid, volume, node, host_ip, pod_ip, container_id, rv])
        };
        let mut templates = self.templates.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let template = templates.entry(key).or_insert_with(|| Arc::new(Template::of(i, self.varied)));
        (Arc::clone(template), values)
    }

    /// Pod `i` from the generator (slow: serde_json values for varied pods).
    fn render(&self, i: usize) -> String {
        let rv = LIST_RV - 1 - i as u64;
        if self.varied { render_varied_pod(i, rv) } else { render_pod(i, rv) }
    }

    /// Pod `i`'s JSON.
    fn json(&self, i: usize) -> std::borrow::Cow<'_, str> {
        match self.json.get(i) {
            Some(p) => p.as_str().into(),
            None => {
                let (template, values) = self.templated(i);
                template.json(&values).into()
            }
        }
    }

    /// Pod `i`'s protobuf.
    fn pb(&self, i: usize) -> std::borrow::Cow<'_, [u8]> {
        match self.pb.get(i) {
            Some(p) => p.as_slice().into(),
            None => {
                let (template, values) = self.templated(i);
                template.pb(&values).into()
            }
        }
    }

    /// Pod `i`'s uid, without rendering it.
    fn uid(&self, i: usize) -> String {
        pod_uid_of(i, self.varied)
    }
}

/// The uid of the bench's pod `i` (`--varied` or not), without rendering the pod.
fn pod_uid_of(i: usize, varied: bool) -> String {
    if varied { varied_uid(i) } else { pod_uid(i) }
}

/// What the server's connections share.
#[derive(Default)]
struct ServerState {
    /// The first watch has been answered (with the events).
    watched: AtomicBool,
    /// Watches answered with a 410 so far (`--relists`).
    expired: AtomicUsize,
    /// The last shard selector asked for, and which pods it holds (`--filter-shards`).
    shard: std::sync::Mutex<Option<(String, Arc<ShardPods>)>>,
}

/// The pods of the shard `selector` names (percent-encoded, as in the query), computed once
/// per selector; `None` for a selector that does not parse (a real server would refuse it).
fn shard_pods(selector: &str, pods: &Pods, state: &ServerState) -> Option<Arc<ShardPods>> {
    let mut text = Vec::with_capacity(selector.len());
    let mut bytes = selector.bytes();
    while let Some(b) = bytes.next() {
        match b {
            b'%' => {
                let hex: String = bytes.by_ref().take(2).map(char::from).collect();
                text.push(u8::from_str_radix(&hex, 16).ok()?);
            }
            b => text.push(b),
        }
    }
    let text = String::from_utf8(text).ok()?;
    let mut cached = state.shard.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(known) = cached.as_ref().filter(|(s, _)| *s == text) {
        return Some(Arc::clone(&known.1));
    }
    let shard = kube_watcher::Shard::parse(&text).ok()?;
    // Each pod's uid is hashed from its index, without rendering the pod.
    let keep: Vec<bool> = (0..pods.n).map(|i| shard.contains(&pods.uid(i))).collect();
    let ours = (0..pods.n).filter(|&i| keep[i]).collect();
    let known = Arc::new(ShardPods { selector: shard.selector(), keep, ours });
    *cached = Some((text, Arc::clone(&known)));
    Some(known)
}

/// The pods of one shard (`--filter-shards`).
struct ShardPods {
    /// The shard's selector, as `Shard::selector` writes it.
    selector: String,
    /// Whether each pod is the shard's.
    keep: Vec<bool>,
    /// The shard's pods, in order.
    ours: Vec<usize>,
}

/// How the server answers (see the module docs).
#[derive(Clone, Copy)]
struct ServerOpts {
    events: usize,
    gzip: bool,
    page_cap: usize,
    /// Bytes per chunk of a list body; 0: one chunk per pod.
    chunk: usize,
    /// Varied pods (`--varied`).
    varied: bool,
    /// Watches after the first to answer with a 410 (`--relists`).
    relists: usize,
    /// Pods at a new resourceVersion in each relist's list, in percent (`--relist-changed`).
    relist_changed: usize,
    /// Filter by `shardSelector` (`--filter-shards`).
    filter_shards: bool,
    /// Events one at a time at this many a second (`--event-rate`); `None`: back to back.
    event_rate: Option<f64>,
}

/// How the watch events of the first watch go out: back to back in chunks of 64 KiB, as a busy
/// server sends them, or (`--event-rate`) each alone in its own chunk at a steady rate, as a
/// server sends the events of writes that come one at a time.
struct Pace {
    every: Option<Duration>,
    start: Instant,
    sent: u32,
}

impl Pace {
    fn new(opts: ServerOpts) -> Pace {
        Pace { every: opts.event_rate.map(|r| Duration::from_secs_f64(1.0 / r)), start: Instant::now(), sent: 0 }
    }

    /// The chunk size of the events' body.
    fn chunk(&self) -> usize {
        if self.every.is_some() { 0 } else { 64 * 1024 }
    }

    /// One event was written to `body`: with a rate, it goes out now and the next waits its turn.
    fn sent(&mut self, body: &mut impl Write) -> std::io::Result<()> {
        let Some(every) = self.every else { return Ok(()) };
        body.flush()?;
        self.sent = self.sent.saturating_add(1);
        if let Some(wait) = (self.start + every * self.sent).checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        Ok(())
    }
}

/// kube-apiserver compresses a response only above this size (and only when asked).
const GZIP_ABOVE: usize = 128 * 1024;

/// A chunked (`Transfer-Encoding: chunked`) body writer: what is written is buffered and goes
/// out as one chunk per `cap` bytes (with `cap` 0, one chunk per write: per pod in a list).
struct Chunked<W: Write> {
    out: W,
    buf: Vec<u8>,
    cap: usize,
}

impl<W: Write> Chunked<W> {
    fn new(out: W, cap: usize) -> Self {
        Chunked { out, buf: Vec::with_capacity(cap), cap }
    }

    fn emit(&mut self) -> std::io::Result<()> {
        if !self.buf.is_empty() {
            write!(self.out, "{:x}\r\n", self.buf.len())?;
            self.out.write_all(&self.buf)?;
            self.out.write_all(b"\r\n")?;
            self.buf.clear();
        }
        Ok(())
    }

    /// Sends what is buffered and the last (empty) chunk.
    fn finish(mut self) -> std::io::Result<W> {
        self.emit()?;
        self.out.write_all(b"0\r\n\r\n")?;
        Ok(self.out)
    }
}

impl<W: Write> Write for Chunked<W> {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(data);
        // A one-byte write (the comma between two pods) waits for what follows it.
        if self.buf.len() >= self.cap && data.len() > 1 {
            self.emit()?;
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.emit()?;
        self.out.flush()
    }
}

/// Answers one request with a JSON `Status` body and `status` (`"404 Not Found"`).
fn answer_status(out: &mut impl Write, status: &str, body: &[u8]) -> std::io::Result<()> {
    write!(out, "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n", body.len())?;
    out.write_all(body)?;
    out.flush()
}

fn handle(conn: TcpStream, pods: &Pods, opts: ServerOpts, state: &ServerState) -> std::io::Result<()> {
    conn.set_nodelay(true)?;
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut out = std::io::BufWriter::with_capacity(256 * 1024, conn);
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            return Ok(());
        }
        let target = line.split_whitespace().nth(1).unwrap_or("/").to_owned();
        let mut accepts_gzip = false;
        let mut pb = false;
        loop {
            let mut h = String::new();
            if reader.read_line(&mut h)? == 0 || h == "\r\n" || h == "\n" {
                break;
            }
            if let Some((name, value)) = h.split_once(':')
                && name.trim().eq_ignore_ascii_case("accept-encoding")
            {
                accepts_gzip |= value.split(',').any(|v| v.split(';').next().unwrap_or("").trim() == "gzip");
            }
            if let Some((name, value)) = h.split_once(':')
                && name.trim().eq_ignore_ascii_case("accept")
            {
                // Protobuf to a client that lists it first, as kube-apiserver answers.
                pb = value.split(',').next().is_some_and(|m| m.trim() == protobuf::MEDIA_TYPE);
            }
        }
        let (path, query) = target.split_once('?').unwrap_or((&target, ""));
        let param = |k: &str| query.split('&').find_map(|kv| kv.strip_prefix(k)?.strip_prefix('='));
        if path != "/api/v1/pods" {
            let body = br#"{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}"#;
            answer_status(&mut out, "404 Not Found", body)?;
            continue;
        }
        let shard = param("shardSelector").filter(|_| opts.filter_shards).and_then(|s| shard_pods(s, pods, state));
        let keep = shard.as_ref().map(|s| s.keep.as_slice());
        // A streaming list (a watch with `sendInitialEvents=true`, what client-go's informers
        // ask for by default since 1.35): every pod as ADDED, then the BOOKMARK that ends the
        // initial events, then the watch goes on as any other (docs/protocol.md §7.4).
        let initial = param("watch").is_some() && param("sendInitialEvents") == Some("true");
        if initial
            && (param("allowWatchBookmarks") != Some("true") || param("resourceVersionMatch") != Some("NotOlderThan"))
        {
            // What kube-apiserver's validation answers.
            let body = br#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"sendInitialEvents requires allowWatchBookmarks=true and resourceVersionMatch=NotOlderThan","reason":"Invalid","code":422}"#;
            answer_status(&mut out, "422 Unprocessable Entity", body)?;
            continue;
        }
        if param("watch").is_some() && pb {
            if protobuf::watch(&mut out, &mut reader, pods, keep, initial, opts, state)? {
                continue;
            }
            return Ok(());
        }
        if param("watch").is_some() {
            write!(out, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")?;
            out.flush()?;
            if initial {
                let mut body = Chunked::new(&mut out, 64 * 1024);
                for i in 0..pods.n {
                    if keep.is_none_or(|k| k[i]) {
                        body.write_all(br#"{"type":"ADDED","object":{"kind":"Pod","apiVersion":"v1","#)?;
                        body.write_all(&pods.json(i).as_bytes()[1..])?;
                        body.write_all(b"}\n")?;
                    }
                }
                write!(body, r#"{{"type":"BOOKMARK","object":{INITIAL_EVENTS_END}}}"#)?;
                body.write_all(b"\n")?;
                body.flush()?;
            }
            let first = !state.watched.swap(true, Ordering::SeqCst);
            if first {
                // Events go out in chunks of 64 KiB, as a busy apiserver's do, or paced.
                let mut pace = Pace::new(opts);
                let mut body = Chunked::new(&mut out, pace.chunk());
                let mut line = String::with_capacity(16 * 1024);
                for e in 0..opts.events {
                    let i = e % pods.n.max(1);
                    if keep.is_some_and(|k| !k[i]) {
                        continue;
                    }
                    let rv = LIST_RV + 1 + e as u64;
                    line.clear();
                    // A watch event's object says its kind, as kube-apiserver's do (a list's
                    // items need not: the list says it).
                    line.push_str(r#"{"type":"MODIFIED","object":{"kind":"Pod","apiVersion":"v1","#);
                    if opts.varied {
                        // Rendering a varied pod costs this server more than the client spends
                        // on it: an event is the listed pod with its resourceVersion changed.
                        let listed = format!(r#""resourceVersion":"{}""#, LIST_RV - 1 - i as u64);
                        line.push_str(&pods.json(i).replacen(&listed, &format!(r#""resourceVersion":"{rv}""#), 1)[1..]);
                    } else {
                        line.push_str(&render_pod(i, rv)[1..]);
                    }
                    line.push_str("}\n");
                    body.write_all(line.as_bytes())?;
                    pace.sent(&mut body)?;
                }
                body.flush()?;
            }
            if !initial && state.expired.load(Ordering::SeqCst) < opts.relists {
                // Expired (after the events, on the first watch): the client relists.
                state.expired.fetch_add(1, Ordering::SeqCst);
                let mut body = Chunked::new(&mut out, 0);
                body.write_all(
                    br#"{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","status":"Failure","message":"too old resource version","reason":"Expired","code":410}}"#,
                )?;
                body.write_all(b"\n")?;
                body.finish()?.flush()?;
                continue;
            }
            // Stay open and quiet, as a healthy watch does, until the client leaves.
            let mut sink = [0u8; 1];
            let _ = reader.read(&mut sink);
            return Ok(());
        }
        let limit: usize = param("limit").and_then(|v| v.parse().ok()).filter(|l| *l > 0).unwrap_or(pods.n);
        let limit = limit.min(opts.page_cap);
        if let Some(ShardPods { selector, ours, .. }) = shard.as_deref() {
            // The shard's pods, paged by their position among them; `shardInfo` echoes the
            // selector. (No relists or gzip here.)
            let start: usize = param("continue").and_then(|v| v.parse().ok()).unwrap_or(0).min(ours.len());
            let end = start.saturating_add(limit).min(ours.len());
            let next = (end < ours.len()).then_some(end);
            if pb {
                protobuf::list_of(&mut out, pods, &ours[start..end], next, selector, opts)?;
                continue;
            }
            let cont = next.map(|n| format!(r#","continue":"{n}""#)).unwrap_or_default();
            let head = format!(
                r#"{{"kind":"PodList","apiVersion":"v1","metadata":{{"resourceVersion":"{LIST_RV}"{cont},"shardInfo":{{"selector":"{selector}"}}}},"items":["#
            );
            write!(out, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")?;
            let mut body = Chunked::new(&mut out, opts.chunk);
            body.write_all(head.as_bytes())?;
            for (n, &i) in ours[start..end].iter().enumerate() {
                if n > 0 {
                    body.write_all(b",")?;
                }
                body.write_all(pods.json(i).as_bytes())?;
            }
            body.write_all(b"]}")?;
            body.finish()?;
            out.flush()?;
            continue;
        }
        let start: usize = param("continue").and_then(|v| v.parse().ok()).unwrap_or(0).min(pods.n);
        let end = start.saturating_add(limit).min(pods.n);
        if pb {
            protobuf::list(&mut out, pods, (start, end), opts, state)?;
            continue;
        }
        let cont = if end < pods.n { format!(r#","continue":"{end}""#) } else { String::new() };
        let head = format!(
            r#"{{"kind":"PodList","apiVersion":"v1","metadata":{{"resourceVersion":"{LIST_RV}"{cont}}},"items":["#
        );
        // `--relist-changed`: in a relist's list, every so many pods have a new version.
        let relist = state.expired.load(Ordering::SeqCst);
        let every = if relist > 0 && opts.relist_changed > 0 { (100 / opts.relist_changed).max(1) } else { 0 };
        let rv = |i: usize| LIST_RV + 10_000_000 * relist as u64 + i as u64;
        let page: Vec<std::borrow::Cow<'_, str>> = (start..end)
            .map(|i| {
                if every > 0 && i % every == 0 {
                    render_relisted(&pods.json(i), i, rv(i), opts.varied).into()
                } else {
                    pods.json(i)
                }
            })
            .collect();
        let size = head.len() + page.iter().map(|p| p.len() + 1).sum::<usize>() + 2;
        let gzip = opts.gzip && accepts_gzip && size > GZIP_ABOVE;
        write!(out, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n")?;
        if gzip {
            write!(out, "Content-Encoding: gzip\r\nVary: Accept-Encoding\r\n")?;
        }
        write!(out, "Transfer-Encoding: chunked\r\n\r\n")?;
        let body = Chunked::new(&mut out, opts.chunk);
        let body = if gzip {
            let mut z = flate2::write::GzEncoder::new(body, flate2::Compression::fast());
            write_list(&mut z, &head, &page)?;
            z.finish()?
        } else {
            let mut body = body;
            write_list(&mut body, &head, &page)?;
            body
        };
        body.finish()?;
        out.flush()?;
    }
}

/// Pod `i` (as listed: `listed`) at resourceVersion `rv`.
fn render_relisted(listed: &str, i: usize, rv: u64, varied: bool) -> String {
    if varied {
        let old = format!(r#""resourceVersion":"{}""#, LIST_RV - 1 - i as u64);
        listed.replacen(&old, &format!(r#""resourceVersion":"{rv}""#), 1)
    } else {
        render_pod(i, rv)
    }
}

/// A page of the pod list: `head`, the pods separated by commas, `]}`.
fn write_list(w: &mut impl Write, head: &str, page: &[std::borrow::Cow<'_, str>]) -> std::io::Result<()> {
    w.write_all(head.as_bytes())?;
    for (n, pod) in page.iter().enumerate() {
        if n > 0 {
            w.write_all(b",")?;
        }
        w.write_all(pod.as_bytes())?;
    }
    w.write_all(b"]}")
}

/// The protobuf side of the server (docs/protocol.md §12): pods encoded once at start (by the
/// crate's encoder, `kube_watcher::fuzzing::protobuf_encode`), a page of them written as a
/// `PodList` in its envelope, and watch events as length-delimited frames, each pod's
/// resourceVersion rewritten in its encoded metadata (as cheap as the JSON path's rendering).
mod protobuf {
    use super::*;

    pub const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";

    pub fn varint(out: &mut Vec<u8>, mut v: u64) {
        while v >= 0x80 {
            out.push((v as u8) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }

    fn field(out: &mut Vec<u8>, number: u8, bytes: &[u8]) {
        out.push(number << 3 | 2);
        varint(out, bytes.len() as u64);
        out.extend_from_slice(bytes);
    }

    /// The fields of a message (our own encoding, so well-formed): (number, the whole field as
    /// encoded, the payload of a length-delimited one).
    fn fields(mut b: &[u8]) -> Vec<(u8, &[u8], &[u8])> {
        let read = |b: &mut &[u8]| {
            let mut v = 0u64;
            for shift in (0..64).step_by(7) {
                let byte = b[0];
                *b = &b[1..];
                v |= u64::from(byte & 0x7f) << shift;
                if byte & 0x80 == 0 {
                    break;
                }
            }
            v
        };
        let mut out = Vec::new();
        while !b.is_empty() {
            let whole = b;
            let key = read(&mut b);
            let payload: &[u8] = match key & 7 {
                0 => {
                    read(&mut b);
                    &[]
                }
                2 => {
                    let len = read(&mut b) as usize;
                    let (payload, rest) = b.split_at(len);
                    b = rest;
                    payload
                }
                other => panic!("wire type {other}: not in a pod"),
            };
            let used = whole.len() - b.len();
            out.push(((key >> 3) as u8, &whole[..used], payload));
        }
        out
    }

    /// The varint at `b[*pos..]`, moving `pos` past it; `None` past the end.
    fn read_varint(b: &[u8], pos: &mut usize) -> Option<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = *b.get(*pos)?;
            *pos += 1;
            v |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Some(v);
            }
        }
        None
    }

    /// The bytes of `v` as a varint.
    pub fn varint_len(v: u64) -> usize {
        (64 - v.max(1).leading_zeros() as usize).div_ceil(7)
    }

    /// The message `b` (a template's protobuf from `base`, with the placeholders `markers`) as
    /// [`Piece`]s: a length-delimited field that holds a placeholder is a [`Piece::Len`] of
    /// the hole (exactly a placeholder), of its fields (a payload that reads as a message whose
    /// fields are all varints and length-delimited, as this server writes them), or else of a
    /// string cut at its placeholders; a field 1 varint of `seconds` (a time's) is
    /// [`Piece::Seconds`]. `None` if `b` does not read as such a message. A string that happened
    /// to read as one would come out wrong: [`Pods::new`]'s check at start would say so.
    pub fn pieces(b: &[u8], base: usize, markers: &[&[u8]], seconds: Option<u64>) -> Option<Vec<Piece>> {
        let sentinel = seconds.map(|s| {
            let mut key_and_value = vec![1 << 3];
            varint(&mut key_and_value, s);
            key_and_value
        });
        let holds = |payload: &[u8], pattern: &[u8]| payload.windows(pattern.len()).any(|w| w == pattern);
        let (mut out, mut pos, mut copied) = (Vec::new(), 0, 0);
        let flush = |out: &mut Vec<Piece>, copied: &mut usize, to: usize| {
            if *copied < to {
                out.push(Piece::Bytes(base + *copied, base + to));
            }
        };
        while pos < b.len() {
            let key = read_varint(b, &mut pos)?;
            if key >> 3 == 0 {
                return None;
            }
            match key & 7 {
                0 => {
                    let at = pos;
                    let v = read_varint(b, &mut pos)?;
                    if key == 1 << 3 && Some(v) == seconds {
                        flush(&mut out, &mut copied, at);
                        out.push(Piece::Seconds);
                        copied = pos;
                    }
                }
                2 => {
                    let at = pos;
                    let len = usize::try_from(read_varint(b, &mut pos)?).ok()?;
                    let payload = b.get(pos..pos.checked_add(len)?)?;
                    let start = pos;
                    pos += len;
                    let has_hole = markers.iter().any(|m| holds(payload, m))
                        || sentinel.as_ref().is_some_and(|s| holds(payload, s));
                    if !has_hole {
                        continue;
                    }
                    flush(&mut out, &mut copied, at);
                    let inner = match markers.iter().position(|m| *m == payload) {
                        Some(k) => vec![Piece::Hole(k)],
                        None => pieces(payload, base + start, markers, seconds).unwrap_or_else(|| {
                            let mut inner = Vec::new();
                            split_at_holes(payload, base + start, markers, &mut inner);
                            inner
                        }),
                    };
                    out.push(Piece::Len(inner));
                    copied = pos;
                }
                _ => return None,
            }
        }
        flush(&mut out, &mut copied, b.len());
        Some(out)
    }

    /// A rendered pod's bare `Pod` message (no envelope, as a list item).
    pub fn pod(json: &str) -> Vec<u8> {
        let mut value: serde_json::Value = serde_json::from_str(json).expect("a rendered pod is JSON");
        value["apiVersion"] = "v1".into();
        value["kind"] = "Pod".into();
        let body = kube_watcher::fuzzing::protobuf_encode(&value).expect("a rendered pod encodes");
        let raw = fields(&body[4..]).into_iter().find(|(n, ..)| *n == 2).map(|(.., raw)| raw.to_vec());
        raw.expect("an envelope holds the object")
    }

    /// `pod` with `metadata.resourceVersion` (`1`.`6`) set to `rv`.
    fn with_rv(pod: &[u8], rv: u64) -> Vec<u8> {
        let mut out = Vec::with_capacity(pod.len() + 8);
        for (n, whole, payload) in fields(pod) {
            if n != 1 {
                out.extend_from_slice(whole);
                continue;
            }
            let mut meta = Vec::with_capacity(payload.len() + 8);
            for (m, whole, _) in fields(payload) {
                if m == 6 {
                    field(&mut meta, 6, rv.to_string().as_bytes());
                } else {
                    meta.extend_from_slice(whole);
                }
            }
            field(&mut out, 1, &meta);
        }
        out
    }

    /// `k8s\0` and the `runtime.Unknown` envelope around `raw`.
    fn envelope(kind: &str, raw_len: usize, out: &mut Vec<u8>) {
        let mut type_meta = Vec::new();
        field(&mut type_meta, 1, b"v1");
        field(&mut type_meta, 2, kind.as_bytes());
        out.extend_from_slice(b"k8s\0");
        field(out, 1, &type_meta);
        out.push(2 << 3 | 2);
        varint(out, raw_len as u64);
    }

    /// One page of pods `start..end` as an enveloped `PodList`.
    pub fn list(
        out: &mut impl Write,
        pods: &Pods,
        (start, end): (usize, usize),
        opts: ServerOpts,
        state: &ServerState,
    ) -> std::io::Result<()> {
        let mut meta = Vec::new();
        field(&mut meta, 2, LIST_RV.to_string().as_bytes());
        if end < pods.n {
            field(&mut meta, 3, end.to_string().as_bytes());
        }
        let relist = state.expired.load(Ordering::SeqCst);
        let every = if relist > 0 && opts.relist_changed > 0 { (100 / opts.relist_changed).max(1) } else { 0 };
        let items: Vec<std::borrow::Cow<'_, [u8]>> = (start..end)
            .map(|i| {
                if every > 0 && i % every == 0 {
                    with_rv(&pods.pb(i), LIST_RV + 10_000_000 * relist as u64 + i as u64).into()
                } else {
                    pods.pb(i)
                }
            })
            .collect();
        write_list(out, &meta, &items, opts)
    }

    /// One page of a shard's pods (`items`, by index) as an enveloped `PodList` whose
    /// `ListMeta` carries `shardInfo` (field 5, `ShardInfo` {1 selector}).
    pub fn list_of(
        out: &mut impl Write,
        pods: &Pods,
        items: &[usize],
        next: Option<usize>,
        selector: &str,
        opts: ServerOpts,
    ) -> std::io::Result<()> {
        let mut meta = Vec::new();
        field(&mut meta, 2, LIST_RV.to_string().as_bytes());
        if let Some(next) = next {
            field(&mut meta, 3, next.to_string().as_bytes());
        }
        let mut info = Vec::new();
        field(&mut info, 1, selector.as_bytes());
        field(&mut meta, 5, &info);
        let items: Vec<std::borrow::Cow<'_, [u8]>> = items.iter().map(|&i| pods.pb(i)).collect();
        write_list(out, &meta, &items, opts)
    }

    /// An enveloped `PodList` of `items` (each an encoded pod) with the `ListMeta` `meta`, as a
    /// chunked 200 response.
    fn write_list(
        out: &mut impl Write,
        meta: &[u8],
        items: &[std::borrow::Cow<'_, [u8]>],
        opts: ServerOpts,
    ) -> std::io::Result<()> {
        let mut list = Vec::new();
        field(&mut list, 1, meta);
        let mut head = Vec::with_capacity(64);
        envelope("PodList", list.len() + items_len_exact(items), &mut head);
        write!(out, "HTTP/1.1 200 OK\r\nContent-Type: {MEDIA_TYPE}\r\nTransfer-Encoding: chunked\r\n\r\n")?;
        let mut body = Chunked::new(out, opts.chunk.max(1));
        body.write_all(&head)?;
        body.write_all(&list)?;
        let mut item = Vec::new();
        for i in items {
            item.clear();
            field(&mut item, 2, i);
            body.write_all(&item)?;
        }
        body.write_all(&[0x1a, 0, 0x22, 0])?; // contentEncoding and contentType, empty
        body.finish()?.flush()
    }

    fn items_len_exact(items: &[std::borrow::Cow<'_, [u8]>]) -> usize {
        items
            .iter()
            .map(|i| {
                let mut len = Vec::new();
                varint(&mut len, i.len() as u64);
                1 + len.len() + i.len()
            })
            .sum()
    }

    /// One watch event frame: `WatchEvent` {type, RawExtension {the enveloped object}}.
    fn frame(event_type: &str, kind: &str, raw: &[u8], out: &mut Vec<u8>) {
        let mut object = Vec::with_capacity(raw.len() + 32);
        envelope(kind, raw.len(), &mut object);
        object.extend_from_slice(raw);
        object.extend_from_slice(&[0x1a, 0, 0x22, 0]);
        let mut extension = Vec::with_capacity(object.len() + 8);
        field(&mut extension, 1, &object);
        let mut event = Vec::with_capacity(extension.len() + 16);
        field(&mut event, 1, event_type.as_bytes());
        field(&mut event, 2, &extension);
        out.extend_from_slice(&(event.len() as u32).to_be_bytes());
        out.extend_from_slice(&event);
    }

    /// A watch: with `initial` (a streaming list) every pod as ADDED and the BOOKMARK that ends
    /// them first; the events on the first, a 410 on the next `--relists` (true: the
    /// connection goes on), then quiet until the client leaves (false).
    pub fn watch(
        out: &mut impl Write,
        reader: &mut impl Read,
        pods: &Pods,
        keep: Option<&[bool]>,
        initial: bool,
        opts: ServerOpts,
        state: &ServerState,
    ) -> std::io::Result<bool> {
        let media = format!("{MEDIA_TYPE};stream=watch");
        write!(out, "HTTP/1.1 200 OK\r\nContent-Type: {media}\r\nTransfer-Encoding: chunked\r\n\r\n")?;
        out.flush()?;
        if initial {
            let mut body = Chunked::new(&mut *out, 64 * 1024);
            let mut ev = Vec::with_capacity(16 * 1024);
            for i in 0..pods.n {
                if keep.is_none_or(|k| k[i]) {
                    ev.clear();
                    frame("ADDED", "Pod", &pods.pb(i), &mut ev);
                    body.write_all(&ev)?;
                }
            }
            ev.clear();
            frame("BOOKMARK", "Pod", &pod(INITIAL_EVENTS_END), &mut ev);
            body.write_all(&ev)?;
            body.flush()?;
        }
        if !state.watched.swap(true, Ordering::SeqCst) {
            let mut pace = Pace::new(opts);
            let mut body = Chunked::new(&mut *out, pace.chunk());
            let mut ev = Vec::with_capacity(16 * 1024);
            for e in 0..opts.events {
                let i = e % pods.n.max(1);
                if keep.is_some_and(|k| !k[i]) {
                    continue;
                }
                ev.clear();
                frame("MODIFIED", "Pod", &with_rv(&pods.pb(i), LIST_RV + 1 + e as u64), &mut ev);
                body.write_all(&ev)?;
                pace.sent(&mut body)?;
            }
            body.flush()?;
        }
        if !initial && state.expired.load(Ordering::SeqCst) < opts.relists {
            state.expired.fetch_add(1, Ordering::SeqCst);
            let mut status = Vec::new();
            field(&mut status, 2, b"Failure");
            field(&mut status, 3, b"too old resource version");
            field(&mut status, 4, b"Expired");
            status.extend_from_slice(&[6 << 3, 0x9a, 0x03]); // code 410
            let mut ev = Vec::new();
            frame("ERROR", "Status", &status, &mut ev);
            let mut body = Chunked::new(&mut *out, 0);
            body.write_all(&ev)?;
            body.finish()?.flush()?;
            return Ok(true);
        }
        let mut sink = [0u8; 1];
        let _ = reader.read(&mut sink);
        Ok(false)
    }
}

#[path = "../benches/support/realistic_pod.rs"]
mod realistic_pod;
use realistic_pod::{Values as RealisticValues, render_pod, render_pod_with, uid as pod_uid};
#[path = "../benches/support/varied_pod.rs"]
mod varied_pod;
use varied_pod::{PodValues, deployment, render_varied_pod, render_varied_with, varied_key, varied_uid};
