//! kwatch: watch any Kubernetes resource from the command line, like `kubectl get -w`, with the
//! event type on every line.
//!
//! ```text
//! cargo run --example kwatch --features testing -- --demo --stats  # no cluster needed
//! cargo run --example kwatch -- pods -A                             # your kubeconfig's cluster
//! cargo run --example kwatch -- deployments.apps -n shop -o wide --stats
//! ```
//!
//! Resource names are resolved by discovery as kubectl resolves them (`pods`, `po`, `pod`,
//! `Deployment`, `deployments.apps`, a custom resource's plural). Pods get kubectl's columns
//! (NAME READY STATUS RESTARTS AGE, computed as kubectl computes them); other types NAME and
//! AGE (`-o wide` adds LABELS). The initial list is printed as `ADDED` lines (not with
//! `--watch-only`); after a relist, only what differs from what was printed is shown. Table
//! rows go to standard output, errors and `--stats` lines (prefixed `#`) to standard error.

use std::collections::HashMap;
use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crossbeam_channel::{Receiver, never, select, tick};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube_watcher::{
    Api, ApiError, ApiResource, Client, Config, DynamicObject, Error, Event, GroupChange, KubeconfigOptions,
    LeaseTimings, Notice, RelistReason, ShardGroup, Watcher,
};
use serde::{Deserialize, Serialize};

const USAGE: &str = "\
usage: kwatch [RESOURCE] [options]

Watch a resource type and print one line per change, like `kubectl get -w`.
RESOURCE is what kubectl accepts: pods, po, deployments.apps, a custom resource's plural, ...
(default with --demo: pods).

options:
  -n, --namespace NS        watch namespace NS (default: the kubeconfig context's namespace)
  -A, --all-namespaces      watch every namespace
  -l, --selector S          label selector, e.g. app=web,tier!=db
      --field-selector S    field selector, e.g. spec.nodeName=node-1
  -o, --output FORMAT       wide, json, yaml or name (default: a table). As kubectl: json
                            prints each object indented over many lines (read it with
                            `jq`, not line by line), yaml as documents after `---`, name
                            one KIND/NAME per line with no event type (for pipes)
      --context C           kubeconfig context to use
      --kubeconfig F        kubeconfig file to use (instead of $KUBECONFIG or ~/.kube/config)
      --watch-only          do not print the objects that exist at the start
      --output-watch-events with -o json or yaml: wrap each object in
                            {\"type\": ..., \"object\": ...} (kubectl's flag of that name)
      --shard I/N           watch only shard I of N equal shares of the objects (0 <= I < N),
                            by a hash of each uid; the server filters if it can (Kubernetes
                            1.36+, gate ShardedListAndWatch), else kwatch drops the others
      --shard-by FIELD      with --shard: uid (default) or namespace (keeps each namespace
                            in one shard)
      --shard-group NAME    join the shard group NAME (a Lease per replica in the namespace)
                            and watch only this replica's share, which follows the replicas
                            alive; shows the share, the members and when the store caught up
                            with a new share (to stderr). Pods that left the share for another
                            replica's print as MOVED, not DELETED (json and yaml keep DELETED)
      --identity ID         with --shard-group: this replica's name in the group (default:
                            the host name, the process id and a random suffix, which two
                            processes never share; a pod's name is a good choice)
      --stats               print reconnects, relists and lag as they happen, and who
                            filtered a shard (to stderr)
      --demo                watch an in-process fake cluster with a simulated workload
                            (needs the `testing` feature)
  -h, --help                print this help

Ctrl-C stops.";

fn main() -> ExitCode {
    let opts = match Options::parse(std::env::args().skip(1)) {
        Ok(Some(opts)) => opts,
        Ok(None) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("kwatch: {e} (see kwatch --help)");
            return ExitCode::from(2);
        }
    };
    match run(&opts) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("kwatch: {message}");
            ExitCode::FAILURE
        }
    }
}

/// The command line.
#[derive(Debug, Default)]
struct Options {
    resource: Option<String>,
    namespace: Option<String>,
    all_namespaces: bool,
    labels: Option<String>,
    fields: Option<String>,
    output: Output,
    context: Option<String>,
    kubeconfig: Option<PathBuf>,
    watch_only: bool,
    /// `--output-watch-events`: json and yaml lines carry the event type, as kubectl's do.
    watch_events: bool,
    stats: bool,
    demo: bool,
    /// `--shard I/N`: the index and the total.
    shard: Option<(u32, u32)>,
    /// `--shard-by namespace`.
    shard_by_namespace: bool,
    /// `--shard-group NAME`.
    shard_group: Option<String>,
    /// `--identity ID` (with `--shard-group`).
    identity: Option<String>,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Output {
    #[default]
    Table,
    Wide,
    Json,
    Yaml,
    Name,
}

impl Options {
    /// Parses the arguments; `Ok(None)` for `--help`. Accepts `--flag value`, `--flag=value`
    /// and, for short flags, `-nVALUE`.
    fn parse(args: impl IntoIterator<Item = String>) -> Result<Option<Options>, String> {
        let mut opts = Options::default();
        let mut args = args.into_iter();
        while let Some(arg) = args.next() {
            let (flag, inline) = match arg.split_once('=') {
                Some((f, v)) if f.starts_with("--") => (f.to_owned(), Some(v.to_owned())),
                _ if arg.len() > 2 && arg.starts_with('-') && !arg.starts_with("--") => {
                    (arg[..2].to_owned(), Some(arg[2..].to_owned()))
                }
                _ => (arg.clone(), None),
            };
            let mut value = |name: &str| -> Result<String, String> {
                match inline.clone().or_else(|| args.next()) {
                    Some(v) if !v.is_empty() => Ok(v),
                    _ => Err(format!("{name} needs a value")),
                }
            };
            match flag.as_str() {
                "-h" | "--help" => return Ok(None),
                "-n" | "--namespace" => opts.namespace = Some(value("--namespace")?),
                "-A" | "--all-namespaces" => opts.all_namespaces = true,
                "-l" | "--selector" => opts.labels = Some(value("--selector")?),
                "--field-selector" => opts.fields = Some(value("--field-selector")?),
                "-o" | "--output" => {
                    opts.output = match value("--output")?.as_str() {
                        "wide" => Output::Wide,
                        "json" => Output::Json,
                        "yaml" => Output::Yaml,
                        "name" => Output::Name,
                        other => return Err(format!("unknown output format {other:?}: use wide, json, yaml or name")),
                    }
                }
                "--context" => opts.context = Some(value("--context")?),
                "--kubeconfig" => opts.kubeconfig = Some(PathBuf::from(value("--kubeconfig")?)),
                "--watch-only" => opts.watch_only = true,
                "--output-watch-events" => opts.watch_events = true,
                "--stats" => opts.stats = true,
                "--demo" => opts.demo = true,
                "--shard" => {
                    let v = value("--shard")?;
                    let parsed = v.split_once('/').and_then(|(i, n)| Some((i.parse().ok()?, n.parse().ok()?)));
                    let Some((i, n)) = parsed else {
                        return Err(format!("--shard takes I/N, such as 0/3, got {v:?}"));
                    };
                    let _valid = kube_watcher::Shard::of(i, n).map_err(|e| format!("--shard {v}: {e}"))?;
                    opts.shard = Some((i, n));
                }
                "--shard-group" => opts.shard_group = Some(value("--shard-group")?),
                "--identity" => opts.identity = Some(value("--identity")?),
                "--shard-by" => {
                    opts.shard_by_namespace = match value("--shard-by")?.as_str() {
                        "uid" => false,
                        "namespace" => true,
                        other => return Err(format!("--shard-by takes uid or namespace, got {other:?}")),
                    }
                }
                f if f.starts_with('-') => return Err(format!("unknown flag {arg:?}")),
                // kubectl takes `pods,configmaps`; a watch here is of one type.
                _ if arg.contains(',') => {
                    return Err(format!("one resource type at a time: got {arg:?} (run one kwatch per type)"));
                }
                _ if opts.resource.is_none() => opts.resource = Some(arg),
                _ => {
                    return Err(format!(
                        "one resource type at a time: got {:?} and {arg:?}",
                        opts.resource.unwrap_or_default()
                    ));
                }
            }
            if matches!(
                flag.as_str(),
                "-A" | "--all-namespaces" | "--watch-only" | "--output-watch-events" | "--stats" | "--demo"
            ) && inline.is_some()
            {
                return Err(format!("{flag} takes no value"));
            }
        }
        if opts.shard_group.is_some() && opts.shard.is_some() {
            return Err("--shard and --shard-group exclude each other".into());
        }
        if opts.identity.is_some() && opts.shard_group.is_none() {
            return Err("--identity needs --shard-group".into());
        }
        if opts.shard_by_namespace && opts.shard.is_none() {
            return Err("--shard-by needs --shard".into());
        }
        if opts.all_namespaces && opts.namespace.is_some() {
            return Err("--namespace and --all-namespaces exclude each other".into());
        }
        if opts.resource.is_none() && !opts.demo {
            return Err(
                "which resource? for example: kwatch pods, or kwatch --demo to watch a simulated cluster".into()
            );
        }
        Ok(Some(opts))
    }
}

/// Where the watch runs, for messages and hints.
struct Target {
    resource: ApiResource,
    /// `None`: every namespace, or a cluster-scoped type.
    namespace: Option<String>,
}

impl Target {
    /// `pods` or `deployments.apps`, as `kubectl auth can-i` wants it.
    fn resource_name(&self) -> String {
        match self.resource.group.as_str() {
            "" => self.resource.plural.clone(),
            group => format!("{}.{group}", self.resource.plural),
        }
    }

    fn namespace_flag(&self) -> String {
        match (&self.namespace, self.resource.namespaced) {
            (Some(ns), _) => format!(" -n {ns}"),
            (None, true) => " -A".to_owned(),
            (None, false) => String::new(),
        }
    }
}

fn run(opts: &Options) -> Result<(), String> {
    let stop = ctrl_c()?;
    let mut demo = if opts.demo { Some(demo::start()?) } else { None };
    let client = connect(opts, demo.as_ref()).map_err(|e| explain_connect(&e, opts))?;
    let name = opts.resource.as_deref().unwrap_or("pods");
    let started = Instant::now();
    let (found, failures) = discover(&client, name, &stop)?;
    let Some(resource) = found else {
        // Ctrl-C while start-up was still retrying: a normal stop, with the summary it asked for.
        if opts.stats {
            eprintln!(
                "# stats: stopped after {:.1} s, before the watch started: {failures} failed attempts to discover {name:?}",
                started.elapsed().as_secs_f64()
            );
        }
        return Ok(());
    };
    let namespace = match (resource.namespaced, opts.all_namespaces, &opts.namespace) {
        (false, _, _) | (true, true, _) => None,
        (true, false, Some(ns)) => Some(ns.clone()),
        (true, false, None) => Some(client.default_namespace().to_owned()),
    };
    let target = Target { resource, namespace };
    let mut config = Config::default();
    if let Some(labels) = &opts.labels {
        config = config.labels(labels);
    }
    if let Some(fields) = &opts.fields {
        config = config.fields(fields);
    }
    if let Some((i, n)) = opts.shard {
        // Checked when the flag was read.
        let shard = kube_watcher::Shard::of(i, n).map_err(|e| e.to_string())?;
        config = config.shard(if opts.shard_by_namespace { shard.by_namespace() } else { shard });
    }
    // --shard-group: this replica's Lease lives in the watched namespace (or the context's).
    let group = match &opts.shard_group {
        Some(name) => {
            let ns = target.namespace.clone().unwrap_or_else(|| client.default_namespace().to_owned());
            let identity = opts.identity.clone().unwrap_or_else(identity);
            let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);
            let group = ShardGroup::join(leases, name, &identity, LeaseTimings::default())
                .map_err(|e| format!("--shard-group {name}: {e}"))?;
            eprintln!("# shard group {name}: joined as {identity} (Lease {} in {ns})", group.lease_name());
            config = config.shard_group(&group);
            Some(group)
        }
        None => None,
    };
    if demo.is_some() {
        // The demo injects two failures every 9 s round; with the default backoff (up to 30 s,
        // reset only after 120 s of health) the waits would grow until the demo went quiet.
        // Retries after up to 0.2 s, doubling to at most 2 s: each round's outage and 410 are
        // recovered from within the round.
        let fast = kube_watcher::Backoff {
            initial: Duration::from_millis(200),
            max: Duration::from_secs(2),
            ..kube_watcher::Backoff::default()
        };
        config = config.backoff(fast);
    }
    let ticks = match (&demo, opts.stats) {
        (Some(_), _) => tick(demo::STEP),
        (None, true) => tick(Duration::from_millis(500)),
        (None, false) => never(),
    };
    let session = Session { opts, target: &target, stop, ticks, demo: demo.as_mut(), group: group.as_ref() };
    // Every type is a DynamicObject, pods too: kubectl's pod columns read the few fields they
    // need from it (`PodView`). A typed `Pod` watcher would make this program's debug build,
    // the README's demo, ~15 s slower on two cores (its decoders are generated here).
    let api: Api<DynamicObject> = match &target.namespace {
        Some(ns) => Api::namespaced_with(client, ns, &target.resource),
        None => Api::all_with(client, &target.resource),
    };
    session.watch(api, config)
}

/// This replica's identity in a shard group when `--identity` names none: `HOST-PID-RANDOM`.
/// `$HOSTNAME` alone is shared by every process of a container (and of a pod), and so is a
/// process id by processes on different hosts or in different containers of one pod; the
/// random part, new at each start, tells those apart. `HOST` is `$HOSTNAME` if it can start a
/// Lease name, else `kwatch`.
fn identity() -> String {
    use std::hash::{BuildHasher, Hasher};
    let host = std::env::var("HOSTNAME").unwrap_or_default().to_ascii_lowercase();
    let ok = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    let host = if !host.is_empty()
        && host.len() <= 40
        && host.chars().all(|c| ok(c) || c == '-' || c == '.')
        && host.starts_with(ok)
        && host.ends_with(ok)
    {
        host
    } else {
        "kwatch".to_owned()
    };
    // std's RandomState is seeded from the operating system's randomness once per process.
    let random = std::collections::hash_map::RandomState::new().build_hasher().finish();
    format!("{host}-{}-{:06x}", std::process::id(), random & 0xff_ffff)
}

/// A client for `--demo`, `--kubeconfig`/`--context`, or wherever kubectl would connect.
fn connect(opts: &Options, demo: Option<&demo::Demo>) -> Result<Client, Error> {
    let options = KubeconfigOptions { context: opts.context.clone(), ..KubeconfigOptions::default() };
    match (demo, &opts.kubeconfig) {
        (Some(demo), _) => Client::from_url(&demo.url()),
        (None, Some(path)) => Client::from_kubeconfig_path(path, &options),
        (None, None) if opts.context.is_some() => Client::from_kubeconfig(&options),
        (None, None) => Client::try_default(),
    }
}

/// [`explain`] for a failure to build the client: a `--context` the kubeconfig does not define
/// is answered with the contexts it does define, as `kubectl config get-contexts` would show.
fn explain_connect(e: &Error, opts: &Options) -> String {
    let text = e.to_string().replace("(from KubeconfigOptions::context)", "(from --context)");
    if opts.context.is_none() || !text.contains("(from --context) is not defined") {
        return explain(e, None, false);
    }
    match known_contexts(opts).as_slice() {
        [] => format!("{text} (hint: the kubeconfig defines no context)"),
        names => format!("{text} (hint: the kubeconfig defines {})", names.join(", ")),
    }
}

/// The names of the contexts in the kubeconfig files kwatch reads (`--kubeconfig`, else
/// `$KUBECONFIG`'s list, else `~/.kube/config`), in order, without repeats. Files that cannot be
/// read or parsed are skipped: the library has already said what is wrong with them.
fn known_contexts(opts: &Options) -> Vec<String> {
    #[derive(Deserialize)]
    struct File {
        #[serde(default)]
        contexts: Option<Vec<Named>>,
    }
    #[derive(Deserialize)]
    struct Named {
        name: String,
    }
    let paths: Vec<PathBuf> = match (&opts.kubeconfig, std::env::var_os("KUBECONFIG")) {
        (Some(path), _) => vec![path.clone()],
        (None, Some(list)) if !list.is_empty() => std::env::split_paths(&list).collect(),
        (None, _) => {
            std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".kube").join("config")).into_iter().collect()
        }
    };
    let mut names: Vec<String> = Vec::new();
    for path in paths {
        let Ok(text) = std::fs::read_to_string(&path) else { continue };
        let Ok(file) = serde_norway::from_str::<File>(&text) else { continue };
        for context in file.contexts.into_iter().flatten() {
            if !names.contains(&context.name) {
                names.push(context.name);
            }
        }
    }
    names
}

/// Discovers `name`, retrying what retrying can fix (429, 5xx, a refused or dropped connection)
/// with the library's backoff (0.8 s doubling to 30 s), saying so on stderr; a 403, an unknown
/// resource or a bad configuration ends kwatch at once. Ctrl-C interrupts the wait.
/// Returns the resource (`None` if Ctrl-C came first) and the number of failed attempts.
fn discover(client: &Client, name: &str, stop: &Receiver<()>) -> Result<(Option<ApiResource>, u32), String> {
    let backoff = kube_watcher::Backoff::default();
    let mut delay = backoff.initial;
    let mut failures = 0;
    loop {
        match client.discover(name) {
            Ok(resource) => return Ok((Some(resource), failures)),
            Err(e) if e.is_retryable() => {
                failures += 1;
                eprintln!("kwatch: {}; retrying in {:.1} s", explain(&e, None, false), delay.as_secs_f64());
                if stop.recv_timeout(delay).is_ok() {
                    return Ok((None, failures));
                }
                delay = delay.mul_f64(backoff.factor).min(backoff.max);
            }
            Err(e) => return Err(explain(&e, None, false)),
        }
    }
}

/// A channel that receives `()` on the first Ctrl-C; a second Ctrl-C exits at once.
fn ctrl_c() -> Result<Receiver<()>, String> {
    let (tx, rx) = crossbeam_channel::bounded(1);
    let pressed = AtomicBool::new(false);
    ctrlc::set_handler(move || {
        if pressed.swap(true, Ordering::SeqCst) {
            std::process::exit(130);
        }
        let _ = tx.try_send(());
    })
    .map_err(|e| format!("cannot handle Ctrl-C: {e}"))?;
    Ok(rx)
}

struct Session<'a> {
    opts: &'a Options,
    target: &'a Target,
    stop: Receiver<()>,
    ticks: Receiver<Instant>,
    demo: Option<&'a mut demo::Demo>,
    group: Option<&'a ShardGroup>,
}

impl Session<'_> {
    /// The watch loop: events, Ctrl-C and ticks (demo steps, `--stats`) in one `select!`.
    fn watch(mut self, api: Api<DynamicObject>, config: Config) -> Result<(), String> {
        let watcher = Watcher::new(api, config).map_err(|e| explain(&e, Some(self.target), false))?;
        let mut printer = Printer::new(self.opts, self.target);
        printer.group = self.group;
        // --stats (and --demo, whose point is the recovery): the watcher's lifecycle notices.
        let show_notices = self.opts.stats || self.demo.is_some();
        let notices = if show_notices { watcher.notices() } else { never() };
        let mut waiting = 0;
        let mut out = io::stdout().lock();
        let mut synced = false;
        let started = Instant::now();
        let group_changes = self.group.map_or_else(never, |g| g.changes().clone());
        // The share the store last caught up with (`--shard-group`).
        let mut caught_up = None;
        let result = loop {
            select! {
                recv(group_changes) -> change => match change {
                    Ok(GroupChange::Members(members)) => eprintln!("# shard group: members {}", members.join(", ")),
                    Ok(GroupChange::Shard(Some(shard))) => eprintln!("# shard group: this replica's share: {shard}"),
                    Ok(GroupChange::Shard(None)) => eprintln!("# shard group: this replica holds no share"),
                    // Two members with one identity, or a Lease name taken: a mistake to fix,
                    // not a state to wait out.
                    Ok(GroupChange::Conflict(why)) => break Err(format!("shard group: {why}")),
                    Ok(other) => eprintln!("# shard group: {other:?}"),
                    Err(_) => {}
                },
                recv(watcher.receiver()) -> msg => match msg {
                    Ok(Ok(event)) => {
                        synced |= matches!(event, Event::InitDone);
                        if let (Event::InitDone, Some(group)) = (&event, self.group) {
                            // The store holds the group's share now (the relist after a
                            // change of share, or the first list): say so once per share.
                            let stats = watcher.stats();
                            if stats.synced_shard == group.shard() && stats.synced_shard != caught_up {
                                caught_up.clone_from(&stats.synced_shard);
                                eprintln!("# shard group: caught up with this replica's share: {} objects", stats.objects);
                            }
                        }
                        if let Err(e) = printer.event(&event, &mut out) {
                            // A closed pipe (`kwatch pods | head`) is a normal way to stop.
                            break if e.kind() == io::ErrorKind::BrokenPipe { Ok(()) } else { Err(format!("write: {e}")) };
                        }
                    }
                    // Before the first sync, an error retrying cannot fix (401, 403, 404) ends
                    // kwatch, as kubectl would; later ones are reported while the watcher retries.
                    Ok(Err(e)) if e.is_terminal() || (!synced && !e.is_retryable()) => {
                        break Err(explain(&e, Some(self.target), synced));
                    }
                    Ok(Err(e)) => eprintln!("kwatch: {} (retrying)", explain(&e, Some(self.target), synced)),
                    Err(_) => break Ok(()), // the watcher ended
                },
                recv(self.stop) -> _ => break Ok(()),
                recv(notices) -> notice => {
                    if let Ok(notice) = notice {
                        eprintln!("# stats: {}", describe(&notice));
                    }
                },
                recv(self.ticks) -> _ => {
                    if let Some(note) = self.demo.as_deref_mut().and_then(demo::Demo::step) {
                        eprintln!("# demo: {note}");
                    }
                    if self.opts.stats {
                        let queued = watcher.stats().queued;
                        if queued != waiting && (queued >= 16 || waiting >= 16) {
                            eprintln!("# stats: lag: {queued} events waiting for kwatch");
                        }
                        waiting = queued;
                    }
                },
            }
        };
        watcher.stop();
        if show_notices {
            for notice in notices.try_iter() {
                eprintln!("# stats: {}", describe(&notice));
            }
        }
        if self.opts.stats {
            let s = watcher.stats();
            let events = s.events.added + s.events.modified + s.events.deleted;
            eprintln!(
                "# stats: stopped after {:.1} s: {events} watch events, {} watches, {} relists after the initial list, {} errors, {} objects cached",
                started.elapsed().as_secs_f64(),
                s.watches,
                s.relists.total().saturating_sub(s.relists.initial),
                s.errors.total(),
                s.objects,
            );
            if let Some(by) = s.shard_filter {
                eprintln!("# stats: {}", shard_line(by));
            }
            if let Some(group) = self.group {
                let share = group.shard().map_or_else(|| "none".to_owned(), |share| share.to_string());
                eprintln!("# stats: shard group {}: this replica's share: {share}", group.group());
            }
        }
        result
    }
}

/// One `--stats` line for a lifecycle notice.
fn describe(notice: &Notice) -> String {
    match notice {
        Notice::Connected => "connected".to_owned(),
        Notice::Reconnecting { delay, .. } => format!("reconnecting in {:.1} s", delay.as_secs_f64()),
        Notice::Relisting { reason } => format!("relisting: {}", why(*reason)),
        Notice::Synced { reason, objects, inferred_deletes } => {
            format!("synced ({}): {objects} objects; deletions inferred: {inferred_deletes}", why(*reason))
        }
        Notice::DriftChecked { mismatched } => format!("drift check: {mismatched} objects out of step"),
        Notice::Stale { .. } => "stale: the watch is lost; changes on the server are not in the store".to_owned(),
        Notice::Fresh { stale_for } => format!("fresh again, after {:.1} s stale", stale_for.as_secs_f64()),
        Notice::Lagged { dropped } => format!("lagged: {dropped} events dropped"),
        Notice::GaveUp { error } => format!("gave up: {error}"),
        Notice::ShardFilter { by } => shard_line(*by),
        other => format!("{other:?}"),
    }
}

/// Who dropped the other shards' objects, for `--stats`.
fn shard_line(by: kube_watcher::ShardFilter) -> String {
    match by {
        kube_watcher::ShardFilter::Server => "shard: the server filters (it answered with shardInfo)".to_owned(),
        kube_watcher::ShardFilter::Client => {
            "shard: the server sends everything; kwatch drops other shards' objects before decoding them".to_owned()
        }
        other => format!("shard: {other:?}"),
    }
}

fn why(reason: RelistReason) -> &'static str {
    match reason {
        RelistReason::Initial => "initial list",
        RelistReason::Expired => "410 Gone, the resourceVersion expired",
        RelistReason::TooLarge => "the server was behind the resourceVersion",
        RelistReason::StreamingFallback => "streaming lists not supported",
        RelistReason::Periodic => "relist interval",
        RelistReason::Drift => "the drift check found differences",
        RelistReason::Error => "retrying after an error (see the error above)",
        RelistReason::ShardChanged => "the shard group moved this replica's share",
        _ => "another reason",
    }
}

/// One readable line for an error, with a hint when we can tell what would fix it.
/// `target` is `None` before discovery; `connected` once the first list succeeded.
fn explain(e: &Error, target: Option<&Target>, connected: bool) -> String {
    let hint = match (e.status(), target) {
        (Some(401), _) => {
            Some("the server rejected the credentials: log in again or pick another --context".to_owned())
        }
        (Some(403), Some(t)) => {
            let verb = api_error(e).and_then(|a| a.context.split_whitespace().next()).unwrap_or("list");
            let resource = t.resource_name();
            let place = match &t.namespace {
                Some(ns) => format!(" in namespace {ns:?}"),
                None if t.resource.namespaced => " in all namespaces".to_owned(),
                None => String::new(),
            };
            Some(format!(
                "RBAC does not allow you to {verb} {resource}{place}; check with: kubectl auth can-i {verb} {resource}{}",
                t.namespace_flag()
            ))
        }
        (Some(404), None) => Some("`kubectl api-resources` lists the resource types the server has".to_owned()),
        (Some(404), Some(t)) => {
            Some(format!("the server does not serve {} here; does the namespace exist?", t.resource_name()))
        }
        (None, _) => match e {
            Error::Transport { .. } if !connected => {
                Some("is the API server reachable? `kubectl cluster-info` shows the server kubeconfig points at".into())
            }
            Error::Auth { .. } => Some("check --kubeconfig, --context and $KUBECONFIG".into()),
            _ => None,
        },
        _ => None,
    };
    // An unknown resource type is found out by discovery, not by a request that returned 404:
    // say what the server lacks (and what is close), without an HTTP status.
    let text = match (api_error(e), target) {
        (Some(api), None) if api.code == 404 && api.context.starts_with("discover") => api.message.clone(),
        // The library names its own option; on this command line it is the --context flag.
        _ => e.to_string().replace("(from KubeconfigOptions::context)", "(from --context)"),
    };
    match hint {
        Some(hint) => format!("{text} (hint: {hint})"),
        None => text,
    }
}

/// The API server's answer inside an error, if there is one.
fn api_error(e: &Error) -> Option<&ApiError> {
    match e {
        Error::Api(api) => Some(api),
        Error::GaveUp { last, .. } => api_error(last),
        Error::NotReady { last_error: Some(last), .. } => api_error(last),
        _ => None,
    }
}

/// Whether `resource` is the core pods, shown with kubectl's pod columns.
fn is_pods(resource: &ApiResource) -> bool {
    resource.group.is_empty() && resource.plural == "pods"
}

/// The table's columns after EVENT (and NAMESPACE).
fn columns(pods: bool, wide: bool) -> Vec<&'static str> {
    match (pods, wide) {
        (false, false) => vec!["NAME", "AGE"],
        (false, true) => vec!["NAME", "AGE", "LABELS"],
        (true, false) => vec!["NAME", "READY", "STATUS", "RESTARTS", "AGE"],
        (true, true) => {
            vec!["NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP", "NODE", "NOMINATED NODE", "READINESS GATES"]
        }
    }
}

/// An object's cells under [`columns`].
fn cells(obj: &DynamicObject, pods: bool, wide: bool, now: i64) -> Vec<String> {
    let meta = &obj.metadata;
    if !pods {
        let mut cells = vec![name(meta), age(meta.creation_timestamp.as_ref(), now)];
        if wide {
            let labels = meta.labels.iter().flatten().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>();
            cells.push(if labels.is_empty() { "<none>".to_owned() } else { labels.join(",") });
        }
        return cells;
    }
    // A pod whose spec or status does not read as one shows what could be read (kubectl too
    // prints what it can).
    let pod = PodView::deserialize(&obj.data).unwrap_or_default();
    let summary = pod_summary(meta, &pod);
    let restarts = match summary.last_restart {
        Some(at) if summary.restarts > 0 => format!("{} ({} ago)", summary.restarts, human_duration(now - at)),
        _ => summary.restarts.to_string(),
    };
    let mut cells = vec![
        name(meta),
        format!("{}/{}", summary.ready, summary.total),
        summary.reason,
        restarts,
        age(meta.creation_timestamp.as_ref(), now),
    ];
    if wide {
        let spec = pod.spec.as_ref();
        let status = pod.status.as_ref();
        let or_none = |s: Option<&str>| s.filter(|s| !s.is_empty()).unwrap_or("<none>").to_owned();
        let ip = status.and_then(|s| s.pod_ips.as_ref()).and_then(|ips| ips.first()).map(|ip| ip.ip.as_str());
        let gates = spec.and_then(|s| s.readiness_gates.as_ref()).filter(|g| !g.is_empty()).map(|gates| {
            let conditions = status.and_then(|s| s.conditions.as_ref());
            let met = gates
                .iter()
                .filter(|g| {
                    conditions
                        .and_then(|cs| cs.iter().find(|c| c.type_ == g.condition_type))
                        .is_some_and(|c| c.status == "True")
                })
                .count();
            format!("{met}/{}", gates.len())
        });
        cells.extend([
            or_none(ip),
            or_none(spec.and_then(|s| s.node_name.as_deref())),
            or_none(status.and_then(|s| s.nominated_node_name.as_deref())),
            gates.unwrap_or_else(|| "<none>".to_owned()),
        ]);
    }
    cells
}

/// The fields of a pod that kubectl's columns read, and nothing else (the rest of the object
/// is skipped when it is read from the watched `DynamicObject`).
#[derive(Debug, Default, Deserialize)]
struct PodView {
    spec: Option<PodSpecView>,
    status: Option<PodStatusView>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct PodSpecView {
    #[serde(default)]
    containers: Vec<serde::de::IgnoredAny>,
    init_containers: Option<Vec<InitContainerView>>,
    node_name: Option<String>,
    readiness_gates: Option<Vec<ReadinessGateView>>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct InitContainerView {
    #[serde(default)]
    name: String,
    restart_policy: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ReadinessGateView {
    #[serde(default)]
    condition_type: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct PodStatusView {
    phase: Option<String>,
    reason: Option<String>,
    conditions: Option<Vec<ConditionView>>,
    init_container_statuses: Option<Vec<ContainerStatusView>>,
    container_statuses: Option<Vec<ContainerStatusView>>,
    #[serde(rename = "podIPs")]
    pod_ips: Option<Vec<PodIpView>>,
    nominated_node_name: Option<String>,
}

#[derive(Debug, Deserialize)]
struct ConditionView {
    #[serde(rename = "type", default)]
    type_: String,
    #[serde(default)]
    status: String,
    reason: Option<String>,
}

#[derive(Debug, Deserialize)]
struct PodIpView {
    #[serde(default)]
    ip: String,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ContainerStatusView {
    #[serde(default)]
    name: String,
    #[serde(default)]
    ready: bool,
    #[serde(default)]
    restart_count: i32,
    started: Option<bool>,
    state: Option<ContainerStateView>,
    last_state: Option<ContainerStateView>,
}

#[derive(Debug, Clone, Default, Deserialize)]
struct ContainerStateView {
    waiting: Option<WaitingView>,
    running: Option<serde::de::IgnoredAny>,
    terminated: Option<TerminatedView>,
}

#[derive(Debug, Clone, Deserialize)]
struct WaitingView {
    reason: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
struct TerminatedView {
    #[serde(default)]
    exit_code: i32,
    reason: Option<String>,
    signal: Option<i32>,
    finished_at: Option<Time>,
}

/// READY, STATUS and RESTARTS of a pod, worked out the way `kubectl get pods` does
/// (kubernetes/pkg/printers/internalversion/printers.go, `printPod`).
struct PodSummary {
    ready: usize,
    total: usize,
    reason: String,
    restarts: i64,
    /// When a container last terminated before a restart (seconds since the epoch).
    last_restart: Option<i64>,
}

fn pod_summary(meta: &ObjectMeta, pod: &PodView) -> PodSummary {
    let empty = Default::default();
    let spec = pod.spec.as_ref().unwrap_or(&empty);
    let empty_status = Default::default();
    let status = pod.status.as_ref().unwrap_or(&empty_status);
    let conditions = status.conditions.as_deref().unwrap_or_default();
    let condition_true = |kind: &str| conditions.iter().any(|c| c.type_ == kind && c.status == "True");
    let finished_at = |c: &ContainerStatusView| {
        c.last_state.as_ref().and_then(|s| s.terminated.as_ref()).and_then(|t| t.finished_at.as_ref()).map(seconds)
    };

    let phase = status.phase.clone().unwrap_or_default();
    let mut reason = status.reason.clone().filter(|r| !r.is_empty()).unwrap_or_else(|| phase.clone());
    if conditions.iter().any(|c| c.type_ == "PodScheduled" && c.reason.as_deref() == Some("SchedulingGated")) {
        reason = "SchedulingGated".to_owned();
    }
    // Init containers that keep running beside the app (sidecars) count as containers.
    let is_sidecar = |name: &str| {
        spec.init_containers.iter().flatten().any(|c| c.name == name && c.restart_policy.as_deref() == Some("Always"))
    };
    let sidecars = spec.init_containers.iter().flatten().filter(|c| c.restart_policy.as_deref() == Some("Always"));
    let total = spec.containers.len() + sidecars.count();
    let mut ready = 0;
    let (mut restarts, mut last_restart) = (0i64, None::<i64>);
    let (mut sidecar_restarts, mut sidecar_last_restart) = (0i64, None::<i64>);

    let init_count = spec.init_containers.as_ref().map_or(0, Vec::len);
    let mut initializing = false;
    for (i, c) in status.init_container_statuses.iter().flatten().enumerate() {
        restarts += i64::from(c.restart_count);
        last_restart = last_restart.max(finished_at(c));
        if is_sidecar(&c.name) {
            sidecar_restarts += i64::from(c.restart_count);
            sidecar_last_restart = sidecar_last_restart.max(finished_at(c));
        }
        let state = c.state.clone().unwrap_or_default();
        let terminated = state.terminated.as_ref();
        if terminated.is_some_and(|t| t.exit_code == 0) {
            continue;
        }
        if is_sidecar(&c.name) && c.started == Some(true) {
            ready += usize::from(c.ready);
            continue;
        }
        initializing = true;
        reason = if let Some(t) = terminated {
            match (t.reason.as_deref().filter(|r| !r.is_empty()), t.signal.filter(|s| *s != 0)) {
                (Some(r), _) => format!("Init:{r}"),
                (None, Some(signal)) => format!("Init:Signal:{signal}"),
                (None, None) => format!("Init:ExitCode:{}", t.exit_code),
            }
        } else if let Some(r) = state.waiting.and_then(|w| w.reason).filter(|r| !r.is_empty() && r != "PodInitializing")
        {
            format!("Init:{r}")
        } else {
            format!("Init:{i}/{init_count}")
        };
        break;
    }

    if !initializing || condition_true("Initialized") {
        restarts = sidecar_restarts;
        last_restart = sidecar_last_restart;
        let mut has_running = false;
        for c in status.container_statuses.iter().flatten().rev() {
            restarts += i64::from(c.restart_count);
            last_restart = last_restart.max(finished_at(c));
            let state = c.state.as_ref();
            let waiting =
                state.and_then(|s| s.waiting.as_ref()).and_then(|w| w.reason.clone()).filter(|r| !r.is_empty());
            let terminated = state.and_then(|s| s.terminated.as_ref());
            if let Some(r) = waiting {
                reason = r;
            } else if let Some(t) = terminated {
                reason = match (t.reason.as_deref().filter(|r| !r.is_empty()), t.signal.filter(|s| *s != 0)) {
                    (Some(r), _) => r.to_owned(),
                    (None, Some(signal)) => format!("Signal:{signal}"),
                    (None, None) => format!("ExitCode:{}", t.exit_code),
                };
            } else if c.ready && state.is_some_and(|s| s.running.is_some()) {
                has_running = true;
                ready += 1;
            }
        }
        if reason == "Completed" && has_running {
            reason = if condition_true("Ready") { "Running" } else { "NotReady" }.to_owned();
        }
    }

    if meta.deletion_timestamp.is_some() {
        if status.reason.as_deref() == Some("NodeLost") {
            reason = "Unknown".to_owned();
        } else if phase != "Succeeded" && phase != "Failed" {
            reason = "Terminating".to_owned();
        }
    }
    PodSummary { ready, total, reason, restarts, last_restart }
}

fn seconds(t: &Time) -> i64 {
    t.0.as_second()
}

fn name(meta: &ObjectMeta) -> String {
    meta.name.clone().unwrap_or_default()
}

/// AGE: time since `created`, or `<unknown>`.
fn age(created: Option<&Time>, now: i64) -> String {
    created.map_or_else(|| "<unknown>".to_owned(), |t| human_duration(now - seconds(t)))
}

/// A duration as kubectl shows it (apimachinery's `duration.HumanDuration`): precise when
/// short, coarser as it grows (`45s`, `3m12s`, `5h10m`, `3d4h`, `2y30d`).
fn human_duration(secs: i64) -> String {
    if secs < -1 {
        return "<invalid>".to_owned();
    }
    let secs = secs.max(0);
    let (minutes, hours, days) = (secs / 60, secs / 3600, secs / 86_400);
    let with = |big: i64, unit: &str, small: i64, small_unit: &str| {
        if small == 0 { format!("{big}{unit}") } else { format!("{big}{unit}{small}{small_unit}") }
    };
    match () {
        () if secs < 120 => format!("{secs}s"),
        () if minutes < 10 => with(minutes, "m", secs % 60, "s"),
        () if minutes < 180 => format!("{minutes}m"),
        () if hours < 8 => with(hours, "h", minutes % 60, "m"),
        () if hours < 48 => format!("{hours}h"),
        () if hours < 24 * 8 => with(days, "d", hours % 24, "h"),
        () if hours < 24 * 365 * 2 => format!("{days}d"),
        () if hours < 24 * 365 * 8 => with(days / 365, "y", days % 365, "d"),
        () => format!("{}y", days / 365),
    }
}

fn unix_now() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// Turns events into output lines: decides ADDED/MODIFIED/DELETED, aligns table columns.
struct Printer<'a> {
    output: Output,
    target: &'a Target,
    watch_only: bool,
    watch_events: bool,
    /// resourceVersion of every object as last printed, by namespace/name.
    seen: HashMap<String, String>,
    /// A (re)list is in progress: table rows wait for `InitDone`, to be aligned together.
    listing: bool,
    synced_once: bool,
    pending: Vec<Vec<String>>,
    /// Column widths so far; they only grow, so later lines line up with earlier ones.
    widths: Vec<usize>,
    header_done: bool,
    /// `--shard-group`: a deleted object outside this replica's share moved to another's.
    group: Option<&'a ShardGroup>,
}

/// The `--output-watch-events` envelope kubectl prints for json and yaml.
#[derive(Serialize)]
struct WatchEvent<'a> {
    #[serde(rename = "type")]
    kind: &'a str,
    object: serde_json::Value,
}

impl<'a> Printer<'a> {
    fn new(opts: &Options, target: &'a Target) -> Self {
        Printer {
            output: opts.output,
            target,
            watch_only: opts.watch_only,
            watch_events: opts.watch_events,
            seen: HashMap::new(),
            listing: false,
            synced_once: false,
            pending: Vec::new(),
            widths: Vec::new(),
            header_done: false,
            group: None,
        }
    }

    fn event(&mut self, event: &Event<DynamicObject>, out: &mut impl Write) -> io::Result<()> {
        match event {
            Event::Init => {
                self.listing = true;
                self.pending.clear();
                Ok(())
            }
            Event::InitApply(obj) => {
                let kind = self.remember(&obj.metadata);
                match kind {
                    Some(_) if self.watch_only && !self.synced_once => Ok(()),
                    Some(kind) => self.line(kind, obj.as_ref(), out),
                    None => Ok(()),
                }
            }
            Event::InitDone => {
                self.listing = false;
                let rows = std::mem::take(&mut self.pending);
                self.rows(rows, out)?;
                if !self.synced_once && self.seen.is_empty() {
                    match &self.target.namespace {
                        Some(ns) => eprintln!("No resources found in {ns} namespace."),
                        None => eprintln!("No resources found"),
                    }
                }
                self.synced_once = true;
                out.flush()
            }
            Event::Apply(obj) => match self.remember(&obj.metadata) {
                Some(kind) => self.line(kind, obj.as_ref(), out),
                None => Ok(()),
            },
            Event::Delete(obj) => {
                self.seen.remove(&key(&obj.metadata));
                let kind = if self.moved(&obj.metadata) { "MOVED" } else { "DELETED" };
                self.line(kind, obj.as_ref(), out)
            }
        }
    }

    /// Whether a deleted object only left this replica's share (`--shard-group`): a watch
    /// reports the deletions of the share's objects only, so one outside the share now was
    /// taken out by the relist that followed a change of share (the group's newest share is
    /// the one that relist listed, or a later one).
    fn moved(&self, meta: &ObjectMeta) -> bool {
        let uid = meta.uid.as_deref().unwrap_or_default();
        self.group.is_some_and(|g| !g.shard().is_some_and(|share| share.contains(uid)))
    }

    /// Records an object's resourceVersion; `None` when it is exactly what was printed last.
    fn remember(&mut self, meta: &ObjectMeta) -> Option<&'static str> {
        let rv = meta.resource_version.clone().unwrap_or_default();
        match self.seen.insert(key(meta), rv.clone()) {
            None => Some("ADDED"),
            Some(old) if old != rv => Some("MODIFIED"),
            Some(_) => None,
        }
    }

    fn line(&mut self, kind: &str, obj: &DynamicObject, out: &mut impl Write) -> io::Result<()> {
        match self.output {
            Output::Table | Output::Wide => {
                let mut row = vec![kind.to_owned()];
                if self.target.namespace.is_none() && self.target.resource.namespaced {
                    row.push(obj.metadata.namespace.clone().unwrap_or_default());
                }
                row.extend(cells(obj, is_pods(&self.target.resource), self.output == Output::Wide, unix_now()));
                if self.listing {
                    self.pending.push(row);
                    return Ok(());
                }
                self.rows(vec![row], out)?;
            }
            // KIND/NAME alone, as `kubectl get -w -o name` prints it, so it can be piped.
            Output::Name => {
                let r = &self.target.resource;
                let kind_name = match r.group.as_str() {
                    "" => r.kind.to_lowercase(),
                    group => format!("{}.{group}", r.kind.to_lowercase()),
                };
                writeln!(out, "{kind_name}/{}", name(&obj.metadata))?;
            }
            Output::Json | Output::Yaml => {
                let mut object = serde_json::to_value(obj).map_err(io::Error::other)?;
                if let Some(map) = object.as_object_mut() {
                    let r = &self.target.resource;
                    map.entry("apiVersion").or_insert_with(|| r.api_version.clone().into());
                    map.entry("kind").or_insert_with(|| r.kind.clone().into());
                }
                // kubectl prints the object alone; with --output-watch-events, in an envelope.
                let value = if self.watch_events {
                    // kubectl's event types only: a moved object is a deletion here.
                    let kind = if kind == "MOVED" { "DELETED" } else { kind };
                    serde_json::to_value(WatchEvent { kind, object }).map_err(io::Error::other)?
                } else {
                    object
                };
                if self.output == Output::Json {
                    serde_json::to_writer_pretty(&mut *out, &value).map_err(io::Error::other)?;
                    writeln!(out)?;
                } else {
                    let yaml = serde_norway::to_string(&value).map_err(io::Error::other)?;
                    write!(out, "---\n{yaml}")?;
                }
            }
        }
        if !self.listing {
            out.flush()?;
        }
        Ok(())
    }

    /// Prints table rows (and the header before the first), padded like kubectl's tabwriter:
    /// three spaces between columns.
    fn rows(&mut self, rows: Vec<Vec<String>>, out: &mut impl Write) -> io::Result<()> {
        if rows.is_empty() {
            return Ok(());
        }
        let mut lines = Vec::new();
        if !self.header_done {
            let mut header = vec!["EVENT".to_owned()];
            if self.target.namespace.is_none() && self.target.resource.namespaced {
                header.push("NAMESPACE".to_owned());
            }
            let pods = is_pods(&self.target.resource);
            header.extend(columns(pods, self.output == Output::Wide).into_iter().map(str::to_owned));
            // Columns start as wide as the values they usually hold (MODIFIED, a generated pod
            // name, ContainerCreating, "3 (12m ago)"), so later rows rarely push them right, as
            // they would if the widths came from the first rows alone. They still grow if needed.
            self.widths = header.iter().map(|h| h.len().max(typical_width(h))).collect();
            lines.push(header);
            self.header_done = true;
        }
        lines.extend(rows);
        for line in &lines {
            for (i, cell) in line.iter().enumerate() {
                match self.widths.get_mut(i) {
                    Some(w) => *w = (*w).max(cell.len()),
                    None => self.widths.push(cell.len()),
                }
            }
        }
        for line in &lines {
            let mut text = String::new();
            for (i, cell) in line.iter().enumerate() {
                if i + 1 == line.len() {
                    text.push_str(cell);
                } else {
                    text.push_str(&format!("{cell:<width$}", width = self.widths[i] + 3));
                }
            }
            writeln!(out, "{text}")?;
        }
        Ok(())
    }
}

/// The width a column's values usually need, by header.
fn typical_width(header: &str) -> usize {
    match header {
        "EVENT" => "MODIFIED".len(),
        "NAMESPACE" => 16,
        "NAME" => 24,
        "STATUS" => "ContainerCreating".len(),
        "RESTARTS" => "10 (59m ago)".len(),
        "AGE" => 5,
        "IP" => 15,
        "NODE" => 16,
        _ => 0,
    }
}

fn key(meta: &ObjectMeta) -> String {
    format!("{}/{}", meta.namespace.as_deref().unwrap_or(""), meta.name.as_deref().unwrap_or(""))
}

/// `--demo`: the library's scripted fake cluster, when built with the `testing` feature.
#[cfg(feature = "testing")]
mod demo {
    pub use kube_watcher::testing::DemoWorkload as Demo;

    pub const STEP: std::time::Duration = Demo::STEP;

    pub fn start() -> Result<Demo, String> {
        eprintln!(
            "# demo: a fake API server with a simulated workload (an outage and a 410 every 9 s); \
             retries wait at most 2 s here (30 s by default); `# stats:` lines show what the watcher does; Ctrl-C stops (with --stats, after a summary)"
        );
        Ok(Demo::start())
    }
}

/// Without the `testing` feature there is no fake server to run.
#[cfg(not(feature = "testing"))]
mod demo {
    /// Never constructed.
    pub enum Demo {}

    pub const STEP: std::time::Duration = std::time::Duration::from_millis(250);

    impl Demo {
        pub fn url(&self) -> String {
            match *self {}
        }

        pub fn step(&mut self) -> Option<&'static str> {
            match *self {}
        }
    }

    pub fn start() -> Result<Demo, String> {
        Err("--demo needs the fake API server: cargo run --example kwatch --features testing -- --demo".into())
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Pod;

    use super::*;

    fn parse(args: &[&str]) -> Result<Option<Options>, String> {
        Options::parse(args.iter().map(|s| s.to_string()))
    }

    #[test]
    fn flags_take_values_in_every_spelling_kubectl_accepts() {
        let o = parse(&["po", "-n", "shop", "-lapp=web", "--field-selector=spec.nodeName=n1", "-o", "wide"])
            .unwrap()
            .unwrap();
        assert_eq!(o.resource.as_deref(), Some("po"));
        assert_eq!(o.namespace.as_deref(), Some("shop"));
        assert_eq!(o.labels.as_deref(), Some("app=web"));
        assert_eq!(o.fields.as_deref(), Some("spec.nodeName=n1"));
        assert_eq!(o.output, Output::Wide);
    }

    /// Two processes with one `$HOSTNAME` (a container's) and even one process id (two
    /// containers of a pod) still get two identities, each fit for a Lease name.
    #[test]
    fn default_identities_differ_and_name_a_lease() {
        let (a, b) = (identity(), identity());
        assert_ne!(a, b);
        assert!(a.contains(&format!("-{}-", std::process::id())), "{a}");
        let ok = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.';
        assert!(a.len() <= 63 && a.chars().all(ok), "{a}");
    }

    #[test]
    fn bad_command_lines_get_one_clear_message() {
        assert_eq!(parse(&["pods", "--bogus"]).unwrap_err(), "unknown flag \"--bogus\"");
        let o = parse(&["pods", "--shard", "1/3", "--shard-by=namespace"]).unwrap().unwrap();
        assert_eq!((o.shard, o.shard_by_namespace), (Some((1, 3)), true));
        assert!(parse(&["pods", "--shard", "3/3"]).unwrap_err().contains("0 to 2"));
        assert!(parse(&["pods", "--shard", "1"]).unwrap_err().contains("I/N"));
        assert!(parse(&["pods", "--shard-by", "namespace"]).unwrap_err().contains("needs --shard"));
        assert!(parse(&["pods", "--shard", "0/2", "--shard-by", "name"]).unwrap_err().contains("uid or namespace"));
        let o = parse(&["pods", "--shard-group", "indexers"]).unwrap().unwrap();
        assert_eq!(o.shard_group.as_deref(), Some("indexers"));
        assert!(parse(&["pods", "--shard-group", "x", "--shard", "0/2"]).unwrap_err().contains("exclude each other"));
        let o = parse(&["pods", "--shard-group", "indexers", "--identity", "replica-1"]).unwrap().unwrap();
        assert_eq!(o.identity.as_deref(), Some("replica-1"));
        assert!(parse(&["pods", "--identity", "replica-1"]).unwrap_err().contains("needs --shard-group"));
        assert_eq!(parse(&["pods", "-n"]).unwrap_err(), "--namespace needs a value");
        assert!(parse(&["pods", "-o", "xml"]).unwrap_err().contains("unknown output format \"xml\""));
        assert!(parse(&["pods", "-A", "-n", "x"]).unwrap_err().contains("exclude each other"));
        assert!(parse(&[]).unwrap_err().contains("kwatch --demo"));
        assert!(parse(&["--help"]).unwrap().is_none());
    }

    #[test]
    fn a_comma_separated_list_of_types_is_refused_as_one_type_at_a_time() {
        let e = parse(&["pods,configmaps"]).unwrap_err();
        assert!(e.starts_with("one resource type at a time: got \"pods,configmaps\""), "{e}");
        let e = parse(&["pods", "configmaps"]).unwrap_err();
        assert!(e.starts_with("one resource type at a time"), "{e}");
    }

    /// Prints `events` for a pod watch in `output` format and returns the text.
    fn printed(output: Output, events: &[Event<DynamicObject>]) -> String {
        let opts = Options { output, ..Options::default() };
        let target = Target { resource: ApiResource::of::<Pod>(), namespace: Some("shop".into()) };
        let mut printer = Printer::new(&opts, &target);
        let mut out = Vec::new();
        for event in events {
            printer.event(event, &mut out).unwrap();
        }
        String::from_utf8(out).unwrap()
    }

    fn a_pod(name: &str, rv: &str) -> std::sync::Arc<DynamicObject> {
        let pod = serde_json::json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "shop", "resourceVersion": rv}});
        std::sync::Arc::new(serde_json::from_value(pod).unwrap())
    }

    #[test]
    fn name_output_is_kind_slash_name_alone_as_kubectl_prints_it() {
        let events = [
            Event::Init,
            Event::InitApply(a_pod("a", "1")),
            Event::InitDone,
            Event::Apply(a_pod("b", "2")),
            Event::Delete(a_pod("a", "3")),
        ];
        assert_eq!(printed(Output::Name, &events), "pod/a\npod/b\npod/a\n");
    }

    #[test]
    fn json_output_is_indented_over_many_lines_as_the_help_says() {
        let text = printed(Output::Json, &[Event::Apply(a_pod("a", "1"))]);
        assert!(text.starts_with("{\n  \"") && text.lines().count() > 3, "{text}");
        let value: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!((value["kind"].as_str(), value["metadata"]["name"].as_str()), (Some("Pod"), Some("a")));
        assert!(
            USAGE.contains("json\n                            prints each object indented over many lines"),
            "{USAGE}"
        );
        assert!(!USAGE.contains("each line is the object"), "{USAGE}");
    }

    #[test]
    fn durations_read_like_kubectl() {
        let cases = [(5, "5s"), (119, "119s"), (125, "2m5s"), (600, "10m"), (3 * 3600 + 60, "3h1m"), (9 * 3600, "9h")];
        for (secs, text) in cases {
            assert_eq!(human_duration(secs), text);
        }
        assert_eq!(human_duration(3 * 86_400 + 4 * 3600), "3d4h");
        assert_eq!(human_duration(400 * 86_400), "400d");
        assert_eq!(human_duration(-5), "<invalid>");
    }

    #[test]
    fn pod_status_follows_kubectl_for_crash_loops_and_deletion() {
        let pod: DynamicObject = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web-1"},
            "spec": {"containers": [{"name": "a"}, {"name": "b"}]},
            "status": {"phase": "Running", "containerStatuses": [
                {"name": "a", "ready": true, "restartCount": 0, "image": "", "imageID": "",
                 "state": {"running": {}}},
                {"name": "b", "ready": false, "restartCount": 3, "image": "", "imageID": "",
                 "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                 "lastState": {"terminated": {"exitCode": 1, "finishedAt": "2024-01-01T00:00:00Z"}}}
            ]}
        }))
        .unwrap();
        let view = PodView::deserialize(&pod.data).unwrap();
        let s = pod_summary(&pod.metadata, &view);
        assert_eq!((s.ready, s.total, s.reason.as_str(), s.restarts), (1, 2, "CrashLoopBackOff", 3));
        assert_eq!(s.last_restart, Some(1_704_067_200));
        let mut gone = pod.metadata.clone();
        gone.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        assert_eq!(pod_summary(&gone, &view).reason, "Terminating");
        // The wide columns, read from the same object.
        let wide = cells(&pod, true, true, 1_704_067_260);
        assert_eq!(wide[1..4], ["1/2", "CrashLoopBackOff", "3 (60s ago)"]);
        assert_eq!(wide[5..], ["<none>", "<none>", "<none>", "<none>"]);
    }
}
