//! The running test bed: where `scripts/apiserver.sh` left its kubeconfigs, clients for each of
//! its users, namespaces of a test's own, kubectl, and the script's own verbs (stop and start a
//! process, compact etcd).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube_watcher::{Api, Client, Config, InitialListStrategy, KubeconfigOptions, ListParams, Store, Watchable};
use parking_lot::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::common::WAIT;

/// The bed's users, each with a kubeconfig of its own (see scripts/apiserver.sh).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum User {
    /// A static token in `system:masters`, on the server with `ShardedListAndWatch`.
    Admin,
    /// The same token on the server without the gate.
    NoGate,
    /// A static token with no RBAC grant.
    Restricted,
    /// A client certificate in `system:masters`.
    Cert,
}

impl User {
    fn file(self) -> &'static str {
        match self {
            User::Admin => "admin.kubeconfig",
            User::NoGate => "nogate.kubeconfig",
            User::Restricted => "restricted.kubeconfig",
            User::Cert => "cert.kubeconfig",
        }
    }
}

/// The bed, found through `KUBE_WATCHER_TESTBED`.
#[derive(Debug)]
pub struct Bed {
    root: PathBuf,
    run: PathBuf,
}

/// Tests that stop or restart a server take the bed for themselves; the rest share it.
static TURNS: RwLock<()> = RwLock::new(());

/// A test's hold on the bed: shared, or exclusive for the faults.
pub enum Hold {
    /// Other shared tests run beside this one.
    Shared(#[allow(dead_code)] RwLockReadGuard<'static, ()>),
    /// No other test runs.
    Exclusive(#[allow(dead_code)] RwLockWriteGuard<'static, ()>),
}

/// The bed and the hold a test has on it.
pub struct Turn {
    pub bed: &'static Bed,
    _hold: Hold,
}

/// A request the suite does not know the shape of fails the test that let it go
/// (tests/real/shapes.rs).
impl Drop for Turn {
    fn drop(&mut self) {
        crate::shapes::check_unlisted();
    }
}

impl std::ops::Deref for Turn {
    type Target = Bed;
    fn deref(&self) -> &Bed {
        self.bed
    }
}

fn bed() -> Option<&'static Bed> {
    static BED: OnceLock<Option<Bed>> = OnceLock::new();
    BED.get_or_init(|| {
        let root = PathBuf::from(std::env::var_os("KUBE_WATCHER_TESTBED")?);
        let run = root.join("run");
        assert!(
            run.join("admin.kubeconfig").is_file(),
            "KUBE_WATCHER_TESTBED={} has no running bed (run/admin.kubeconfig): start it with \
             scripts/apiserver.sh up, or run the suite with scripts/apiserver.sh test",
            root.display()
        );
        crate::shapes::install();
        Some(Bed { root, run })
    })
    .as_ref()
}

fn skipped() {
    println!("skipped: no real API server (KUBE_WATCHER_TESTBED is unset; scripts/apiserver.sh test runs this suite)");
}

impl Bed {
    /// The bed, shared with the other tests that do not stop servers; `None` (and a line saying
    /// so) when no bed runs.
    pub fn shared() -> Option<Turn> {
        let Some(bed) = bed() else {
            skipped();
            return None;
        };
        Some(Turn { bed, _hold: Hold::Shared(TURNS.read()) })
    }

    /// The bed for this test alone: it may stop and start servers.
    pub fn exclusive() -> Option<Turn> {
        let Some(bed) = bed() else {
            skipped();
            return None;
        };
        Some(Turn { bed, _hold: Hold::Exclusive(TURNS.write()) })
    }

    /// The kubeconfig of `user`.
    pub fn kubeconfig(&self, user: User) -> PathBuf {
        self.run.join(user.file())
    }

    /// A program scripts/apiserver.sh built for the bed's minor (`leaderelect`: that minor's
    /// client-go leader elector).
    pub fn bin(&self, name: &str) -> PathBuf {
        self.root.join("bin").join(format!("1.{}", self.minor())).join(name)
    }

    /// A file of the bed's run folder (`admin.token`, `certs/ca.crt`).
    pub fn run_file(&self, name: &str) -> PathBuf {
        self.run.join(name)
    }

    /// A client of `user`.
    pub fn client_of(&self, user: User) -> Client {
        Client::from_kubeconfig_path(self.kubeconfig(user), &KubeconfigOptions::default()).unwrap()
    }

    /// The administrator's client on the server with the sharding gate.
    pub fn client(&self) -> Client {
        self.client_of(User::Admin)
    }

    /// The port a process of the bed listens on (`apiserver`, `nogate`, `etcd`).
    pub fn port(&self, name: &str) -> u16 {
        let text = std::fs::read_to_string(self.run.join(format!("{name}.port"))).unwrap();
        text.trim().parse().unwrap()
    }

    /// The administrator's kubeconfig with another server address (a proxy in front of the
    /// gated server), as YAML.
    pub fn kubeconfig_via(&self, port: u16) -> String {
        let text = std::fs::read_to_string(self.kubeconfig(User::Admin)).unwrap();
        text.replace(&format!("127.0.0.1:{}", self.port("apiserver")), &format!("127.0.0.1:{port}"))
    }

    /// A new namespace for one test, named after `what`.
    pub fn namespace(&self, what: &str) -> String {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let name = format!("{what}-{}-{}", std::process::id() % 100_000, NEXT.fetch_add(1, Ordering::SeqCst));
        let ns = Namespace {
            metadata: ObjectMeta { name: Some(name.clone()), ..ObjectMeta::default() },
            ..Namespace::default()
        };
        Api::<Namespace>::all(self.client()).create(&ns).unwrap();
        name
    }

    /// Runs one verb of scripts/apiserver.sh on this bed (`stop apiserver`, `compact`, ...).
    pub fn script(&self, args: &[&str]) -> String {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/apiserver.sh");
        let out = Command::new("bash")
            .arg(script)
            .args(args)
            .env("KUBE_WATCHER_TESTBED", &self.root)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "scripts/apiserver.sh {args:?}: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Compacts etcd to its current revision: every older resourceVersion of an uncached
    /// resource (PodTemplates here) is gone. Returns the revision.
    pub fn compact(&self) -> u64 {
        self.script(&["compact"]).trim().parse().unwrap()
    }

    /// Runs kubectl as `user` to completion; returns (success, stdout, stderr).
    pub fn kubectl(&self, user: User, args: &[&str], stdin: Option<&str>) -> (bool, String, String) {
        let mut child = Command::new("kubectl")
            .env("KUBECONFIG", self.kubeconfig(user))
            .arg(format!("--cache-dir={}", self.run.join("kubectl-cache").display()))
            .args(args)
            .stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("kubectl is on PATH (.ci/run installs it)");
        if let Some(text) = stdin {
            use std::io::Write;
            child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
        }
        let out = child.wait_with_output().unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// kubectl that must succeed; returns its standard output.
    pub fn kubectl_ok(&self, args: &[&str], stdin: Option<&str>) -> String {
        let (ok, out, err) = self.kubectl(User::Admin, args, stdin);
        assert!(ok, "kubectl {args:?} failed: {err}{out}");
        out
    }
}

/// Who an object is to the comparison: its uid and resourceVersion, by namespace and name.
pub type Identities = BTreeMap<(String, String), (String, String)>;

fn identities<'a, K: Watchable + 'a>(objects: impl IntoIterator<Item = &'a K>) -> Identities {
    objects
        .into_iter()
        .map(|o| {
            let m = o.meta();
            (
                (m.namespace.clone().unwrap_or_default(), m.name.clone().unwrap_or_default()),
                (m.uid.clone().unwrap_or_default(), m.resource_version.clone().unwrap_or_default()),
            )
        })
        .collect()
}

/// Every object `api` lists now, paging through the whole list.
pub fn list_all<K: Watchable + Clone>(api: &Api<K>, params: &ListParams) -> Vec<K> {
    let mut items = Vec::new();
    let mut params = params.clone().limit(500);
    loop {
        let page = api.list(&params).unwrap();
        items.extend(page.items);
        match page.continue_token {
            Some(token) if !token.is_empty() => params = params.continue_token(&token),
            _ => return items,
        }
    }
}

/// Ends a test: the store holds exactly what a fresh list from the server holds (same names,
/// uids and resourceVersions). The store may still be catching up with the last writes, so the
/// comparison is repeated with a new list until both agree or `WAIT` passes.
pub fn same_as_server<K: Watchable + Clone>(store: &Store<K>, api: &Api<K>, params: &ListParams) {
    let deadline = Instant::now() + WAIT;
    loop {
        let server = identities(&list_all(api, params));
        let cached = identities(store.state().iter().map(|o| &**o));
        if server == cached {
            return;
        }
        if Instant::now() > deadline {
            let missing: Vec<_> = server.iter().filter(|(k, v)| cached.get(*k) != Some(v)).collect();
            let extra: Vec<_> = cached.iter().filter(|(k, v)| server.get(*k) != Some(v)).collect();
            panic!(
                "the store differs from the server after {WAIT:?}: {} listed, {} cached; \
                 listed but not cached as listed: {missing:?}; cached but not listed so: {extra:?}",
                server.len(),
                cached.len()
            );
        }
        thread::sleep(Duration::from_millis(100));
    }
}

/// Waits (bounded by `WAIT`) until `cond` holds; panics with `what` otherwise.
/// The default configuration with paged lists (the default is a streaming list): for the
/// tests of what lists do page by page, their tokens and their compression.
pub fn paged() -> Config {
    Config::default().initial_list_strategy(InitialListStrategy::ListWatch)
}

pub fn until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !cond() {
        assert!(Instant::now() < deadline, "not within {WAIT:?}: {what}");
        thread::sleep(Duration::from_millis(50));
    }
}

/// What the bed's Kubernetes minor does, where minors differ (docs/protocol.md, "What differs
/// from one Kubernetes minor to the next", has the table; scripts/apiserver.sh runs each).
impl Bed {
    /// The minor of the running kube-apiserver (`34` for 1.34), as scripts/apiserver.sh
    /// recorded it when it started the bed.
    pub fn minor(&self) -> u32 {
        let file = self.run.join("minor");
        let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let minor = text.trim().strip_prefix("1.").and_then(|m| m.parse().ok());
        minor.unwrap_or_else(|| panic!("{}: not a Kubernetes minor: {text:?}", file.display()))
    }

    /// Whether the server with the gate (`User::Admin`) filters a shard: `ShardedListAndWatch`
    /// exists from 1.36 (alpha); before, the gated server is one without it.
    pub fn filters_shards(&self) -> bool {
        self.minor() >= 36
    }

    /// Who filters a shard on the server with the gate.
    pub fn shard_filter(&self) -> kube_watcher::ShardFilter {
        if self.filters_shards() { kube_watcher::ShardFilter::Server } else { kube_watcher::ShardFilter::Client }
    }
}
