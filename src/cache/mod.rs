//! `Writer<K>` applies events and swaps in a relist at `InitDone`; `Store<K>` is the cheap,
//! cloneable read side.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, RwLock};

use crate::error::{Error, Result};
use crate::event::Event;
use crate::key::{ObjectKey, ObjectRef};
use crate::resource::Watchable;

mod compact;
mod entry;
mod index;
mod lz4;
mod version;
mod writer;

pub(crate) use compact::{Encoded, Packer};
pub(crate) use entry::Decode;
use entry::Entry;
use index::Indexes;
pub(crate) use index::{IndexFn, Values};
#[cfg(feature = "fuzzing")]
pub(crate) use lz4::{Dictionary, compress};
pub(crate) use writer::{Indexer, PredicateFn, Seen, Skipped, Unchanged, Writer};

type Map<K> = HashMap<ObjectKey, Entry<K>>;

struct Inner<K> {
    objects: RwLock<Objects<K>>,
    /// Decodes compact entries.
    decode: Decode<K>,
    /// Index names; `Objects::live_index` and the pending indexes follow this order.
    index_names: Vec<String>,
    /// The namespace each writer fills (`None`: one writer fills the whole store).
    parts: Vec<Option<Box<str>>>,
    /// Bumped on every change to the visible state; lets callers ask "anything new?" in O(1).
    generation: AtomicU64,
    /// Objects on the server that the store does not hold as they are now because they do not
    /// decode as `K` (every writer's [`Writer::skipped`] together).
    undecodable: AtomicUsize,
    readiness: Mutex<Readiness>,
    ready_changed: Condvar,
    /// Signalled when a writer's version (`Readiness::versions`) moves or the watcher ends.
    version_changed: Condvar,
    /// For a watcher that follows a shard group: whether the store must look empty now, its
    /// objects having outlived its member's lead (`Follow::dark`, `src/shard.rs`). Every read
    /// of the objects asks it; the writers do not.
    dark: std::sync::OnceLock<Dark>,
}

/// See `Inner::dark`.
pub(crate) type Dark = Box<dyn Fn() -> bool + Send + Sync>;

struct Objects<K> {
    /// What readers see.
    live: Map<K>,
    /// The indexes of `live`.
    live_index: Indexes,
    /// Each writer's relist in progress (between `Init` and `InitDone`); invisible to
    /// readers, swapped in at `InitDone`.
    pending: Vec<Option<Relist<K>>>,
    /// Per writer: what consumers were told since its last `InitDone` that `live` does not
    /// show, by relists that were then abandoned: `Some(entry)` delivered by `InitApply`, `None`
    /// reported deleted. Consumers believe in `pending` first, then this, then `live`; the next
    /// completed relist reports against that belief, so every incarnation a consumer was given
    /// gets exactly one `Delete`, recreates during abandoned relists included (tests/integration/model.rs
    /// counts them by uid).
    told: Vec<HashMap<ObjectKey, Option<Entry<K>>>>,
}

/// A relist in progress: what it listed so far. A key is in at most one of `map` and
/// `carried`; a key listed twice is where its last listing put it.
struct Relist<K> {
    /// The objects the live store does not hold as listed (new, changed, or kept by the
    /// undecodable-object policy), with their indexes.
    map: Map<K>,
    indexes: Indexes,
    /// The keys whose live entry was listed unchanged (`Writer::init_share`): carried over
    /// at `InitDone` as they are, with their index values, never copied. So a relist of
    /// unchanged objects holds one key per object besides the live store, not a second state.
    carried: HashSet<ObjectKey>,
}

impl<K> Relist<K> {
    fn new(indexes: Indexes) -> Self {
        Relist { map: HashMap::new(), indexes, carried: HashSet::new() }
    }

    /// How many objects it holds.
    fn len(&self) -> usize {
        self.map.len() + self.carried.len()
    }
}

impl<K> Objects<K> {
    /// What consumers believe is at `key` in `part`: the relist in progress, an abandoned
    /// relist, or the live store, in that order; `None` when they believe it absent.
    fn believed(&self, part: usize, key: &ObjectKey) -> Option<&Entry<K>> {
        if let Some(relist) = &self.pending[part] {
            if let Some(e) = relist.map.get(key) {
                return Some(e);
            }
            if relist.carried.contains(key) {
                return self.live.get(key);
            }
        }
        match self.told[part].get(key) {
            Some(told) => told.as_ref(),
            None => self.live.get(key),
        }
    }
}

impl<K: Watchable> Objects<K> {
    /// What consumers believe is at `key` in `part` when it is another incarnation than `uid`
    /// (it has a uid, and not that one): a new incarnation under a name consumers know is a
    /// `Delete` of the old one first, the one they were last told about (by this relist, an
    /// abandoned one, or the store).
    fn replaced(&self, part: usize, key: &ObjectKey, uid: Option<&str>) -> Option<Entry<K>> {
        self.believed(part, key).filter(|old| old.uid().is_some() && old.uid() != uid).map(Entry::share)
    }
}

#[derive(Default)]
struct Readiness {
    /// Which writers have completed a sync; the store is ready once all have.
    synced: Vec<bool>,
    last_error: Option<Error>,
    /// Set when the watcher has ended; nothing will make the store ready any more.
    ended: Option<Error>,
    /// Per writer: the resourceVersion its part of the store reflects (`Writer::reached`);
    /// `None` until its first list is complete.
    versions: Vec<Option<String>>,
    /// Per writer: its part of the store is stale (`Writer::stale`, `Writer::fresh`).
    stale: Vec<bool>,
    /// Since when the store has been stale: since some part became stale, until none is (or,
    /// for a watcher that ended, since its end). `None` while it is in step.
    stale_since: Option<Instant>,
}

impl Readiness {
    /// Every writer has completed a sync.
    fn ready(&self) -> bool {
        self.synced.iter().all(|s| *s)
    }
}

/// A read-only view of a watcher's cache, always as current as the watcher.
///
/// Cheap to clone (an `Arc`), `Send + Sync` when `K` is. Readers never see a half-applied relist:
/// a relist becomes visible all at once at [`Event::InitDone`]. Reads take a short read lock and
/// return `Arc`s, so holding a result never blocks the watcher.
pub struct Store<K> {
    shared: Arc<Inner<K>>,
}

impl<K> Clone for Store<K> {
    fn clone(&self) -> Self {
        Store { shared: Arc::clone(&self.shared) }
    }
}

impl<K> fmt::Debug for Store<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store").field("len", &self.len()).field("ready", &self.is_ready()).finish()
    }
}

impl<K: Watchable> Store<K> {
    /// The object at `key`, if the store holds it.
    ///
    /// In compact store mode the object is decoded from its stored bytes on each call.
    #[must_use]
    pub fn get(&self, key: &ObjectRef<K>) -> Option<Arc<K>> {
        if self.dark() {
            return None;
        }
        // Take a handle and let go of the lock at once: a compact entry decodes outside it.
        let entry = self.shared.objects.read().live.get(&key.key)?.share();
        entry.object(self.shared.decode)
    }

    /// The objects whose index `name` holds `value`, in no particular order: for example
    /// `store.index("namespace", "apps")` (built in) or `store.index("node", "node-1")` for an
    /// index registered with [`WatcherBuilder::index`](crate::WatcherBuilder::index).
    ///
    /// Indexes follow the store exactly: an object appears once its `Apply` is visible, moves
    /// when its values change, leaves when it is deleted, and a relist replaces the indexes at
    /// `InitDone` together with the objects. An index name that was never registered, or a
    /// value no object has, gives an empty `Vec`. In compact store mode the objects are decoded.
    ///
    /// ```
    /// # let server = kube_watcher::testing::FakeApiServer::start();
    /// # for (ns, name, node) in [("apps", "a", "n1"), ("apps", "b", "n2"), ("db", "c", "n1")] {
    /// #     let mut p = k8s_openapi::api::core::v1::Pod::default();
    /// #     p.metadata.name = Some(name.into()); p.metadata.namespace = Some(ns.into());
    /// #     p.spec = Some(k8s_openapi::api::core::v1::PodSpec { node_name: Some(node.into()), ..Default::default() });
    /// #     server.create(&p).unwrap();
    /// # }
    /// use std::time::Duration;
    /// use kube_watcher::{Api, Client, Watcher};
    /// use k8s_openapi::api::core::v1::Pod;
    ///
    /// let pods: Api<Pod> = Api::all(Client::from_url(&server.url())?);
    /// let watcher = Watcher::builder(pods)
    ///     .index("node", |pod: &Pod| pod.spec.iter().filter_map(|s| s.node_name.clone()).collect())
    ///     .start()?;
    /// let store = watcher.store();
    /// store.wait_until_ready(Duration::from_secs(30))?;
    /// assert_eq!(store.index("node", "n1").len(), 2);
    /// assert_eq!(store.index("namespace", "apps").len(), 2);
    /// assert!(store.index("no such index", "n1").is_empty());
    /// # Ok::<(), kube_watcher::Error>(())
    /// ```
    #[must_use]
    pub fn index(&self, name: &str, value: &str) -> Vec<Arc<K>> {
        let Some(i) = self.shared.index_names.iter().position(|n| n == name) else { return Vec::new() };
        if self.dark() {
            return Vec::new();
        }
        let objects = self.shared.objects.read();
        let entries: Vec<Entry<K>> = match objects.live_index.get(i).and_then(|index| index.values.get(value)) {
            Some(keys) => keys.iter().filter_map(|k| objects.live.get(k)).map(Entry::share).collect(),
            None => return Vec::new(),
        };
        drop(objects); // decode (compact mode) outside the lock
        decode_all(entries, self.shared.decode)
    }

    /// The values an index holds now, each with how many objects it lists, sorted by value:
    /// counting objects per team, per node or per namespace without knowing the values first.
    /// Empty for an unknown index name.
    ///
    /// ```
    /// # let server = kube_watcher::testing::FakeApiServer::start();
    /// # for (name, node) in [("a", "n1"), ("b", "n1"), ("c", "n2")] {
    /// #     let spec = k8s_openapi::api::core::v1::PodSpec { node_name: Some(node.into()), ..Default::default() };
    /// #     server.create(&k8s_openapi::api::core::v1::Pod { metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta { name: Some(name.into()), namespace: Some("apps".into()), ..Default::default() }, spec: Some(spec), ..Default::default() }).unwrap();
    /// # }
    /// use std::time::Duration;
    /// use kube_watcher::{Api, Client, Watcher};
    /// use k8s_openapi::api::core::v1::Pod;
    ///
    /// let pods: Api<Pod> = Api::all(Client::from_url(&server.url())?);
    /// let watcher = Watcher::builder(pods)
    ///     .index("node", |pod: &Pod| pod.spec.iter().filter_map(|s| s.node_name.clone()).collect())
    ///     .start()?;
    /// watcher.store().wait_until_ready(Duration::from_secs(30))?;
    /// assert_eq!(watcher.store().index_values("node"), [("n1".to_owned(), 2), ("n2".to_owned(), 1)]);
    /// # Ok::<(), kube_watcher::Error>(())
    /// ```
    #[must_use]
    pub fn index_values(&self, name: &str) -> Vec<(String, usize)> {
        let Some(i) = self.shared.index_names.iter().position(|n| n == name) else { return Vec::new() };
        if self.dark() {
            return Vec::new();
        }
        let objects = self.shared.objects.read();
        let mut values: Vec<(String, usize)> = objects
            .live_index
            .get(i)
            .map(|index| index.values.iter().map(|(v, keys)| (v.clone(), keys.len())).collect())
            .unwrap_or_default();
        drop(objects);
        values.sort();
        values
    }

    /// Every object in the store, in no particular order.
    ///
    /// In compact store mode every object is decoded: prefer [`get`](Self::get) for a few.
    #[must_use]
    pub fn state(&self) -> Vec<Arc<K>> {
        if self.dark() {
            return Vec::new();
        }
        let entries: Vec<Entry<K>> = self.shared.objects.read().live.values().map(Entry::share).collect();
        decode_all(entries, self.shared.decode)
    }

    /// A consistent, immutable copy of the store: the objects and the [`generation`](Self::generation)
    /// they belong to. Reading it takes no lock, so a tick loop can look at many objects while
    /// the watcher goes on; compare generations to take a new one only when something changed.
    ///
    /// Costs one `Arc` clone and one key copy per object (in compact store mode, a decode per
    /// object: take snapshots sparingly there).
    ///
    /// ```
    /// # let server = kube_watcher::testing::FakeApiServer::start();
    /// # server.create(&k8s_openapi::api::core::v1::Pod { metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta { name: Some("web-0".into()), namespace: Some("apps".into()), ..Default::default() }, ..Default::default() }).unwrap();
    /// use std::time::Duration;
    /// use kube_watcher::{Api, Client, Config, ObjectRef, Watcher};
    /// use k8s_openapi::api::core::v1::Pod;
    ///
    /// let watcher = Watcher::new(Api::<Pod>::all(Client::from_url(&server.url())?), Config::default())?;
    /// let store = watcher.store();
    /// store.wait_until_ready(Duration::from_secs(30))?;
    /// let mut view = store.snapshot();
    /// for _tick in 0..3 {
    ///     if store.generation() != view.generation() {
    ///         view = store.snapshot(); // only when something changed
    ///     }
    ///     let running = view.iter().filter(|p| p.status.is_some()).count();
    ///     assert!(view.get(&ObjectRef::new("web-0").within("apps")).is_some());
    ///     # let _ = running;
    /// }
    /// # Ok::<(), kube_watcher::Error>(())
    /// ```
    #[must_use]
    pub fn snapshot(&self) -> Snapshot<K> {
        let objects = self.shared.objects.read();
        // Generations are bumped under the write lock: this one belongs to exactly these objects
        // (or to none, read dark).
        let generation = self.generation();
        if generation % 2 == 1 {
            return Snapshot { generation, objects: Arc::default() };
        }
        let entries: Vec<(ObjectKey, Entry<K>)> = objects.live.iter().map(|(k, e)| (k.clone(), e.share())).collect();
        drop(objects); // decode (compact mode) outside the lock
        let map = entries.into_iter().filter_map(|(k, e)| Some((k, e.object(self.shared.decode)?))).collect();
        Snapshot { generation, objects: Arc::new(map) }
    }

    /// What brings a new subscriber to what the other consumers believe (see [`Replay`]):
    /// once a part has completed a sync, `Init`, `InitApply` for each object (the visible ones,
    /// as abandoned relists left them), `InitDone`; before that, `Init` and the objects that
    /// abandoned relists delivered, if any (the others got them, and will get their `Delete`
    /// if they are gone; tests/integration/delivery.rs); then `Init` and the pending objects
    /// of each relist in progress (each after the `Delete` of the incarnation it replaced, as
    /// the other consumers got it). Entries are decoded (compact mode) outside the store's
    /// lock; the caller holds the consumers' lock (`engine/delivery/subscribers.rs`), so the
    /// watcher changes nothing meanwhile.
    pub(crate) fn replay(&self) -> Replay<K> {
        let objects = self.shared.objects.read();
        let synced = self.shared.readiness.lock().synced.contains(&true);
        let mut told: Vec<Entry<K>> = Vec::new();
        if synced {
            let overridden = |k: &ObjectKey| objects.told.iter().any(|t| t.contains_key(k));
            told.extend(objects.live.iter().filter(|(k, _)| !overridden(k)).map(|(_, e)| e.share()));
        }
        told.extend(objects.told.iter().flat_map(|t| t.values().flatten()).map(Entry::share));
        // Each pending object, after the incarnation it replaced (another uid) in what the lines
        // above show: consumers got that one's `Delete` when the relist met the new one
        // (`Writer::init_insert`), so the replay gives it too.
        let pending: Vec<(usize, Vec<Replacing<K>>)> = objects
            .pending
            .iter()
            .enumerate()
            .filter_map(|(part, p)| p.as_ref().map(|p| (part, p)))
            .map(|(part, p)| {
                let shown = |key: &ObjectKey| match objects.told[part].get(key) {
                    Some(told) => told.as_ref(),
                    None if synced => objects.live.get(key),
                    None => None,
                };
                let carried = p.carried.iter().filter_map(|key| Some((key, objects.live.get(key)?)));
                let items = p
                    .map
                    .iter()
                    .chain(carried)
                    .map(|(key, e)| {
                        let replaced =
                            shown(key).filter(|old| old.uid().is_some() && old.uid() != e.uid()).map(Entry::share);
                        (replaced, e.share())
                    })
                    .collect();
                (part, items)
            })
            .collect();
        drop(objects);
        let decode = self.shared.decode;
        let mut events = Vec::new();
        if synced || !told.is_empty() {
            events.push(Event::Init);
            events.extend(decode_all(told, decode).into_iter().map(Event::InitApply));
            if synced {
                events.push(Event::InitDone);
            }
        }
        let mut relisting = Vec::with_capacity(pending.len());
        for (part, relist) in pending {
            events.push(Event::Init);
            let before = events.len();
            for (replaced, e) in relist {
                events.extend(replaced.and_then(|old| old.object(decode)).map(Event::Delete));
                events.extend(e.object(decode).map(Event::InitApply));
            }
            relisting.push((part, (events.len() - before) as u64));
        }
        Replay { events, relisting }
    }
}

/// What a new subscriber is sent first ([`Store::replay`]), and where that leaves it.
pub(crate) struct Replay<K> {
    /// The events, in order. Empty when nothing has been delivered yet.
    pub(crate) events: Vec<Event<K>>,
    /// The parts (writers) whose relist is in progress, each with the number of events the
    /// replay gives of it after its `Init`: the events end inside them.
    pub(crate) relisting: Vec<(usize, u64)>,
}

/// An object of a relist in progress, after the incarnation it replaced in what a replay shows
/// before it (see `Store::replay`).
type Replacing<K> = (Option<Entry<K>>, Entry<K>);

/// Decodes entries handed out of the lock (an `Arc` clone each in the default mode).
fn decode_all<K: Watchable>(entries: Vec<Entry<K>>, decode: Decode<K>) -> Vec<Arc<K>> {
    entries.iter().filter_map(|e| e.object(decode)).collect()
}

impl<K> Store<K> {
    /// The resourceVersion the store reflects: the store holds every change the server made
    /// up to it (to the objects this watcher watches), and none after it. `None` until the
    /// first list is complete.
    ///
    /// It moves with every watch event and bookmark the watcher applies, and with a completed
    /// relist (to the list's version). A relist in progress does not move it: the store keeps
    /// reporting the version of what it shows until the new state is switched in at
    /// [`Event::InitDone`]. A relist that [`ListSemantic::Any`](crate::ListSemantic::Any) lets
    /// the server answer from its cache may report an older version than before.
    ///
    /// For a watcher over several namespaces ([`WatcherBuilder::namespaces`](crate::WatcherBuilder::namespaces)),
    /// each namespace has its own watch at its own version, and resourceVersions are one
    /// cluster-wide sequence: the store reflects a version only once every namespace has
    /// reached it, so this is the oldest of the namespaces' versions. It is `None` while a
    /// namespace has none yet, or when two of them cannot be compared (a server whose versions
    /// are not decimal integers; see [`wait_for_version`](Self::wait_for_version)). A quiet
    /// namespace moves only with its watch's bookmarks, which the API server sends about once
    /// a minute.
    #[must_use]
    pub fn resource_version(&self) -> Option<String> {
        version::reflected(&self.shared.readiness.lock().versions)
    }

    /// Since when the store has been stale, or `None` while it is in step with the server.
    ///
    /// A stale store keeps serving the state it had when it lost its watch; what changed on the
    /// server since is not in it. It becomes stale when its watcher loses the watch it was in
    /// step with (a dropped connection, a failed request, an error or a 410 Gone from the
    /// server) or a drift check finds it out of step, and is fresh again when a relist
    /// completes or a watch resumed from its resourceVersion takes hold (the full rule: docs/guide.md,
    /// "Stale and fresh"). A watch the server ends cleanly is resumed at once and does not make
    /// it stale. Before the first list completes the store is not ready
    /// ([`is_ready`](Self::is_ready)), not stale; a watcher that ended (stopped, or gave up) no
    /// longer follows the server, and its store is stale from then on. For a watcher over
    /// several namespaces, the store is stale while any of them is.
    ///
    /// [`Notice::Stale`](crate::Notice::Stale) and [`Notice::Fresh`](crate::Notice::Fresh)
    /// announce each change; this answers at any moment, in O(1), as a tick loop asks:
    ///
    /// ```
    /// # let server = kube_watcher::testing::FakeApiServer::start();
    /// use std::time::Duration;
    /// use kube_watcher::{Api, Client, Config, Watcher};
    /// use k8s_openapi::api::core::v1::Pod;
    ///
    /// let watcher = Watcher::new(Api::<Pod>::all(Client::from_url(&server.url())?), Config::default())?;
    /// let store = watcher.store();
    /// store.wait_until_ready(Duration::from_secs(30))?;
    /// match store.stale_since() {
    ///     None => { /* in step with the server: act on it */ }
    ///     Some(since) => eprintln!("the cache is {:?} behind the server; holding off", since.elapsed()),
    /// }
    /// # Ok::<(), kube_watcher::Error>(())
    /// ```
    #[must_use]
    pub fn stale_since(&self) -> Option<Instant> {
        self.shared.readiness.lock().stale_since
    }

    /// Blocks until the store reflects resourceVersion `rv` or a later one, or `timeout`
    /// passes: read-your-writes. Write an object, take the resourceVersion the server returned
    /// for it, wait for it, and [`get`](Self::get) shows that write (or a later state).
    ///
    /// Returns at once if the store is already there; wakes as soon as the watcher applies an
    /// event or bookmark that gets it there ([`resource_version`](Self::resource_version) says
    /// how it moves, and what it means over several namespaces).
    ///
    /// resourceVersions are compared by the rule Kubernetes 1.35 made part of the API: they
    /// are positive decimal integers without leading zeros, the longer one is the later, and
    /// two of one length compare digit by digit. Two versions outside that form cannot be
    /// ordered: equal strings count as reached, anything else is an error, never a guess.
    /// A resourceVersion of one resource type says nothing about another: wait on the store of
    /// the type that was written.
    ///
    /// ```
    /// # let server = kube_watcher::testing::FakeApiServer::start();
    /// use std::time::Duration;
    /// use kube_watcher::{Api, Client, ObjectRef, Watcher};
    /// use k8s_openapi::api::core::v1::ConfigMap;
    ///
    /// let api: Api<ConfigMap> = Api::namespaced(Client::from_url(&server.url())?, "shop");
    /// let watcher = Watcher::builder(api).start()?;
    /// let store = watcher.store();
    /// store.wait_until_ready(Duration::from_secs(30))?;
    ///
    /// let mut cm = ConfigMap::default();
    /// cm.metadata.name = Some("settings".into());
    /// cm.metadata.namespace = Some("shop".into());
    /// let written = server.create(&cm).unwrap(); // or any client's write
    /// let rv = written.metadata.resource_version.unwrap();
    ///
    /// store.wait_for_version(&rv, Duration::from_secs(30))?;
    /// assert!(store.get(&ObjectRef::new("settings").within("shop")).is_some());
    /// # Ok::<(), kube_watcher::Error>(())
    /// ```
    ///
    /// # Errors
    /// - [`Error::VersionNotReached`] when the time runs out, naming `rv` and the version the
    ///   store reflects;
    /// - [`Error::IncomparableVersions`] when `rv` and the store's version (or a namespace's)
    ///   differ and are not both in the form above, naming both;
    /// - the watcher's end (for example [`Error::Stopped`]) when it stops or fails for good
    ///   before the store gets there: waiters are woken.
    pub fn wait_for_version(&self, rv: &str, timeout: Duration) -> Result<()> {
        let deadline = Instant::now().checked_add(timeout);
        let mut r = self.shared.readiness.lock();
        loop {
            match version::reached(&r.versions, rv) {
                Ok(true) => return Ok(()),
                Ok(false) => {}
                Err(store) => return Err(Error::IncomparableVersions { wanted: rv.into(), store: store.into() }),
            }
            if let Some(e) = &r.ended {
                return Err(e.clone());
            }
            let timed_out = match deadline {
                Some(d) => self.shared.version_changed.wait_until(&mut r, d).timed_out(),
                None => {
                    self.shared.version_changed.wait(&mut r);
                    false
                }
            };
            if timed_out && version::reached(&r.versions, rv) == Ok(false) && r.ended.is_none() {
                return Err(Error::VersionNotReached {
                    wanted: rv.into(),
                    reached: version::reflected(&r.versions).map(String::into_boxed_str),
                    waited: timeout,
                });
            }
        }
    }

    /// How many objects the store holds.
    #[must_use]
    pub fn len(&self) -> usize {
        if self.dark() {
            return 0;
        }
        self.held()
    }

    /// True when the store holds no object.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// True once the first full list has been applied. Stays true through later relists.
    ///
    /// For a watcher over several namespaces ([`WatcherBuilder::namespaces`](crate::WatcherBuilder::namespaces)),
    /// once every namespace has been listed; [`is_ready_in`](Self::is_ready_in) tells them apart.
    #[must_use]
    pub fn is_ready(&self) -> bool {
        self.shared.readiness.lock().ready()
    }

    /// True once the objects of `namespace` have been listed: for a watcher over several
    /// namespaces, each becomes ready on its own, and a namespace it does not watch never does.
    /// For any other watcher, the same as [`is_ready`](Self::is_ready).
    #[must_use]
    pub fn is_ready_in(&self, namespace: &str) -> bool {
        let r = self.shared.readiness.lock();
        match self.shared.parts.iter().position(|p| p.as_deref().is_none_or(|p| p == namespace)) {
            Some(i) => r.synced.get(i).copied().unwrap_or(false),
            None => false,
        }
    }

    /// A counter that changes whenever the visible state changes; compare two readings to learn
    /// in O(1) whether anything happened in between (a tick loop's "did anything change?").
    /// Each `Apply` and `Delete` that reaches the store and each completed relist bump it. A
    /// store that follows a shard group ([`Config::shard_group`](crate::Config::shard_group))
    /// reads empty once its member's lead ended; the counter is odd while it does.
    #[must_use]
    pub fn generation(&self) -> u64 {
        // Odd while the store reads empty for a shard group's lead that ended (see `dark`):
        // the visible state changed without a write.
        self.shared.generation.load(Ordering::Acquire) * 2 + u64::from(self.dark())
    }

    /// Blocks until the first full list is applied, or `timeout` passes.
    ///
    /// Returns at once if the store is already ready.
    ///
    /// # Errors
    /// [`Error::NotReady`] when the time runs out, carrying the watcher's last error (for example
    /// the 403 of its list) so the caller learns why; the watcher's terminal error if it ended.
    pub fn wait_until_ready(&self, timeout: Duration) -> Result<()> {
        let deadline = Instant::now().checked_add(timeout);
        let mut r = self.shared.readiness.lock();
        loop {
            if r.ready() {
                return Ok(());
            }
            if let Some(e) = &r.ended {
                return Err(e.clone());
            }
            let timed_out = match deadline {
                Some(d) => self.shared.ready_changed.wait_until(&mut r, d).timed_out(),
                None => {
                    self.shared.ready_changed.wait(&mut r);
                    false
                }
            };
            if timed_out && !r.ready() {
                return Err(Error::NotReady { waited: timeout, last_error: r.last_error.clone().map(Box::new) });
            }
        }
    }
}

/// An immutable, consistent copy of a [`Store`] at one [`generation`](Snapshot::generation)
/// (see [`Store::snapshot`]). Cheap to clone; reading it takes no lock.
pub struct Snapshot<K> {
    generation: u64,
    objects: Arc<HashMap<ObjectKey, Arc<K>>>,
}

impl<K> Clone for Snapshot<K> {
    fn clone(&self) -> Self {
        Snapshot { generation: self.generation, objects: Arc::clone(&self.objects) }
    }
}

impl<K> fmt::Debug for Snapshot<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Snapshot").field("generation", &self.generation).field("len", &self.len()).finish()
    }
}

impl<K> Snapshot<K> {
    /// The store's [`generation`](Store::generation) when the snapshot was taken.
    #[must_use]
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The object at `key`, if the store held it.
    #[must_use]
    pub fn get(&self, key: &ObjectRef<K>) -> Option<&Arc<K>> {
        self.objects.get(&key.key)
    }

    /// Every object, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<K>> {
        self.objects.values()
    }

    /// How many objects the snapshot holds.
    #[must_use]
    pub fn len(&self) -> usize {
        self.objects.len()
    }

    /// True when the snapshot holds no object.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }
}

impl<K> Store<K> {
    /// Whether the store must read empty now: it follows a shard group, and what it holds was
    /// listed for a lead that has ended (docs/protocol.md §13.4). Its followers drop the objects
    /// when they get to; until then, no read shows them.
    fn dark(&self) -> bool {
        self.shared.dark.get().is_some_and(|dark| dark())
    }

    /// Sets what [`dark`](Self::dark) asks (once, before the watcher's threads start).
    pub(crate) fn set_dark(&self, dark: Dark) {
        let _ = self.shared.dark.set(dark);
    }

    /// How many objects the store holds, read dark or not (for the watcher's own notices).
    pub(crate) fn held(&self) -> usize {
        self.shared.objects.read().live.len()
    }

    /// How many objects on the server do not decode as `K` now (see [`Skipped`]).
    pub(crate) fn undecodable(&self) -> usize {
        self.shared.undecodable.load(Ordering::Acquire)
    }

    /// The watcher has ended: wake anyone waiting for readiness or a version with `reason` (the first one
    /// that says why, when several threads end).
    pub(crate) fn set_ended(&self, reason: Error) {
        let mut r = self.shared.readiness.lock();
        if r.ended.is_none() || matches!(r.ended, Some(Error::Stopped)) {
            r.ended = Some(reason);
        }
        // It no longer follows the server (a store that never synced is not ready instead).
        if r.stale_since.is_none() && r.synced.iter().any(|s| *s) {
            r.stale_since = Some(Instant::now());
        }
        self.shared.ready_changed.notify_all();
        self.shared.version_changed.notify_all();
    }
}
