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
use crate::guard;
use crate::key::{ObjectKey, ObjectRef};
use crate::resource::Watchable;

type Map<K> = HashMap<ObjectKey, Entry<K>>;

/// A user index function: the index values of one object (`Watcher::builder(..).index(..)`).
pub(crate) type IndexFn<K> = Arc<dyn Fn(&K) -> Vec<String> + Send + Sync>;

/// A user predicate: did anything that matters change from `old` to `new`?
pub(crate) type PredicateFn<K> = Arc<dyn Fn(&K, &K) -> bool + Send + Sync>;

/// The name of the built-in index by namespace.
pub(crate) const NAMESPACE_INDEX: &str = "namespace";

/// One named index: value → keys, and key → values (to remove an entry without its object).
/// Invariant: `values` and `of` describe the same pairs, and no set in `values` is empty.
#[derive(Default)]
struct Index {
    values: HashMap<String, HashSet<ObjectKey>>,
    of: HashMap<ObjectKey, Vec<String>>,
}

impl Index {
    fn insert(&mut self, key: &ObjectKey, values: Vec<String>) {
        // A modified object mostly keeps its values (in the namespace index, always): then there
        // is nothing to move, and no key or value to clone.
        if self.of.get(key).is_some_and(|old| *old == values) {
            return;
        }
        self.remove(key);
        if values.is_empty() {
            return;
        }
        for v in &values {
            self.values.entry(v.clone()).or_default().insert(key.clone());
        }
        self.of.insert(key.clone(), values);
    }

    fn remove(&mut self, key: &ObjectKey) {
        for v in self.of.remove(key).into_iter().flatten() {
            if let Some(keys) = self.values.get_mut(&v) {
                keys.remove(key);
                if keys.is_empty() {
                    self.values.remove(&v);
                }
            }
        }
    }
}

/// Every index of one map, positionally matching `Shared::index_names`.
type Indexes = Vec<Index>;

fn new_indexes(n: usize) -> Indexes {
    (0..n).map(|_| Index::default()).collect()
}

/// Adds (or replaces) `key`'s computed values in every index.
fn index_insert(indexes: &mut Indexes, key: &ObjectKey, values: Vec<Vec<String>>) {
    for (index, values) in indexes.iter_mut().zip(values) {
        index.insert(key, values);
    }
}

fn index_remove(indexes: &mut Indexes, key: &ObjectKey) {
    for index in indexes {
        index.remove(key);
    }
}

/// How the store holds one object.
pub(crate) enum Entry<K> {
    /// Decoded once and shared with the events (the default).
    Typed(Arc<K>),
    /// Compact JSON, decoded on access (compact store mode): a fraction of the memory.
    /// Invariant: `json` decoded as `K` when it was stored. Shared, so that handing an entry
    /// out of the lock (to decode it there) copies no bytes.
    Compact { json: Arc<[u8]>, uid: Option<Box<str>>, rv: Option<Box<str>> },
}

impl<K: Watchable> Entry<K> {
    /// What the store keeps for `obj`: the object itself, or its compact JSON when given.
    pub(crate) fn new(obj: &Arc<K>, json: Option<Arc<[u8]>>) -> Entry<K> {
        match json {
            None => Entry::Typed(Arc::clone(obj)),
            Some(json) => {
                let meta = obj.meta();
                Entry::Compact {
                    json,
                    uid: meta.uid.as_deref().map(Into::into),
                    rv: meta.resource_version.as_deref().map(Into::into),
                }
            }
        }
    }

    fn uid(&self) -> Option<&str> {
        match self {
            Entry::Typed(o) => o.meta().uid.as_deref(),
            Entry::Compact { uid, .. } => uid.as_deref(),
        }
    }

    fn resource_version(&self) -> Option<&str> {
        match self {
            Entry::Typed(o) => o.meta().resource_version.as_deref(),
            Entry::Compact { rv, .. } => rv.as_deref(),
        }
    }

    /// A second handle on the same entry (an `Arc` clone either way), to decode after the lock
    /// is released.
    pub(crate) fn share(&self) -> Entry<K> {
        match self {
            Entry::Typed(o) => Entry::Typed(Arc::clone(o)),
            Entry::Compact { json, uid, rv } => {
                Entry::Compact { json: Arc::clone(json), uid: uid.clone(), rv: rv.clone() }
            }
        }
    }

    /// The object; a compact entry is decoded (about as costly as decoding it off the wire), so
    /// call this outside the store's lock.
    pub(crate) fn object(&self) -> Option<Arc<K>> {
        match self {
            Entry::Typed(o) => Some(Arc::clone(o)),
            Entry::Compact { json, .. } => {
                match crate::wire::decode::object::<K>(json, &mut crate::wire::decode::Scratch::default()) {
                    Ok(o) => Some(Arc::new(o)),
                    Err(e) => {
                        // Cannot happen: compact JSON is only stored after it decoded as K.
                        log::error!("bug: a compact store entry no longer decodes: {e}");
                        None
                    }
                }
            }
        }
    }
}

struct Shared<K> {
    objects: RwLock<Objects<K>>,
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
}

struct Objects<K> {
    /// What readers see.
    live: Map<K>,
    /// The indexes of `live`.
    live_index: Indexes,
    /// Each writer's relist in progress (between `Init` and `InitDone`) and its indexes;
    /// invisible to readers, swapped in at `InitDone`.
    pending: Vec<Option<(Map<K>, Indexes)>>,
    /// Per writer: what consumers were told since its last `InitDone` that `live` does not
    /// show, by relists that were then abandoned: `Some(entry)` delivered by `InitApply`, `None`
    /// reported deleted. Consumers believe in `pending` first, then this, then `live`; the next
    /// completed relist reports against that belief, so every incarnation a consumer was given
    /// gets exactly one `Delete` (issue 13: recreates during aborted lists).
    told: Vec<HashMap<ObjectKey, Option<Entry<K>>>>,
}

impl<K> Objects<K> {
    /// What consumers believe is at `key` in `part`: the relist in progress, an abandoned
    /// relist, or the live store, in that order; `None` when they believe it absent.
    fn believed(&self, part: usize, key: &ObjectKey) -> Option<&Entry<K>> {
        if let Some(e) = self.pending[part].as_ref().and_then(|(p, _)| p.get(key)) {
            return Some(e);
        }
        match self.told[part].get(key) {
            Some(told) => told.as_ref(),
            None => self.live.get(key),
        }
    }
}

#[derive(Default)]
struct Readiness {
    /// Which writers have completed a sync; the store is ready once all have.
    synced: Vec<bool>,
    last_error: Option<Error>,
    /// Set when the watcher has ended; nothing will make the store ready any more.
    ended: Option<Error>,
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
    shared: Arc<Shared<K>>,
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
    /// In compact store mode the object is decoded from its stored JSON on each call.
    #[must_use]
    pub fn get(&self, key: &ObjectRef<K>) -> Option<Arc<K>> {
        // Take a handle and let go of the lock at once: a compact entry decodes outside it.
        let entry = self.shared.objects.read().live.get(&key.key)?.share();
        entry.object()
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
        let objects = self.shared.objects.read();
        let entries: Vec<Entry<K>> = match objects.live_index.get(i).and_then(|index| index.values.get(value)) {
            Some(keys) => keys.iter().filter_map(|k| objects.live.get(k)).map(Entry::share).collect(),
            None => return Vec::new(),
        };
        drop(objects); // decode (compact mode) outside the lock
        decode_all(entries)
    }

    /// Every object in the store, in no particular order.
    ///
    /// In compact store mode every object is decoded: prefer [`get`](Self::get) for a few.
    #[must_use]
    pub fn state(&self) -> Vec<Arc<K>> {
        let entries: Vec<Entry<K>> = self.shared.objects.read().live.values().map(Entry::share).collect();
        decode_all(entries)
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
        // Generations are bumped under the write lock: this one belongs to exactly these objects.
        let generation = self.generation();
        let entries: Vec<(ObjectKey, Entry<K>)> = objects.live.iter().map(|(k, e)| (k.clone(), e.share())).collect();
        drop(objects); // decode (compact mode) outside the lock
        let map = entries.into_iter().filter_map(|(k, e)| Some((k, e.object()?))).collect();
        Snapshot { generation, objects: Arc::new(map) }
    }

    /// The events that bring a new subscriber to what the other consumers believe: `Init`,
    /// `InitApply` for each object (the visible ones, as abandoned relists left them), `InitDone`,
    /// then `Init` and the pending objects if a relist is in progress. Empty when nothing has
    /// been published yet. Entries are decoded (compact mode) outside the store's lock; the
    /// caller holds the hub lock, so the watcher changes nothing meanwhile.
    pub(crate) fn replay(&self) -> Vec<Event<K>> {
        let objects = self.shared.objects.read();
        let synced = self.shared.readiness.lock().synced.contains(&true);
        let mut told: Vec<Entry<K>> = Vec::new();
        if synced {
            let overridden = |k: &ObjectKey| objects.told.iter().any(|t| t.contains_key(k));
            told.extend(objects.live.iter().filter(|(k, _)| !overridden(k)).map(|(_, e)| e.share()));
            told.extend(objects.told.iter().flat_map(|t| t.values().flatten()).map(Entry::share));
        }
        let pending: Vec<Vec<Entry<K>>> =
            objects.pending.iter().flatten().map(|(p, _)| p.values().map(Entry::share).collect()).collect();
        drop(objects);
        let mut out = Vec::new();
        if synced {
            out.push(Event::Init);
            out.extend(decode_all(told).into_iter().map(Event::InitApply));
            out.push(Event::InitDone);
        }
        for relist in pending {
            out.push(Event::Init);
            out.extend(decode_all(relist).into_iter().map(Event::InitApply));
        }
        out
    }
}

/// `old`, when it is another incarnation than `new` (both have uids, and they differ).
/// Whether two uids may be the same incarnation of an object (an unknown uid may be).
fn same_incarnation(a: Option<&str>, b: Option<&str>) -> bool {
    a.is_none() || b.is_none() || a == b
}

/// An object that does not decode as `K`, known by its metadata alone.
///
/// The policy for such objects, the same in paged lists, streaming lists, watches and drift
/// checks: the store keeps the last version of the same incarnation that did decode (or
/// nothing, if none did), consumers are told once per resourceVersion (an `Err` naming the
/// object), [`Stats::undecodable`](crate::Stats::undecodable) counts them, and they are
/// never taken for deletions or drift: a `Delete` comes only when the server deletes or
/// replaces the object. An object without a name cannot be stored: reported each time.
#[derive(Debug, Clone, Default)]
pub(crate) struct Skipped {
    pub(crate) key: Option<ObjectKey>,
    pub(crate) uid: Option<String>,
    pub(crate) rv: Option<String>,
}

fn other_incarnation<K: Watchable>(old: Option<Entry<K>>, new: &K) -> Option<Entry<K>> {
    old.filter(|old| old.uid().is_some() && new.meta().uid.is_some() && old.uid() != new.meta().uid.as_deref())
}

/// Decodes entries handed out of the lock (an `Arc` clone each in the default mode).
fn decode_all<K: Watchable>(entries: Vec<Entry<K>>) -> Vec<Arc<K>> {
    entries.iter().filter_map(Entry::object).collect()
}

impl<K> Store<K> {
    /// How many objects the store holds.
    #[must_use]
    pub fn len(&self) -> usize {
        self.shared.objects.read().live.len()
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
    /// Each `Apply` and `Delete` that reaches the store and each completed relist bump it.
    #[must_use]
    pub fn generation(&self) -> u64 {
        self.shared.generation.load(Ordering::Acquire)
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

/// Swaps in a relist of one namespace: its objects and index entries replace those of the
/// namespace, the rest of the store is untouched. Returns the namespace's previous objects.
fn replace_namespace<K>(objects: &mut Objects<K>, ns: &str, new: Map<K>, indexes: Indexes) -> Map<K> {
    // By key, not through the namespace index: a user index may replace that one (issue 13).
    let keys: Vec<ObjectKey> = objects.live.keys().filter(|k| k.namespace.as_deref() == Some(ns)).cloned().collect();
    let mut old = HashMap::with_capacity(keys.len());
    for key in keys {
        index_remove(&mut objects.live_index, &key);
        if let Some(entry) = objects.live.remove(&key) {
            old.insert(key, entry);
        }
    }
    objects.live.extend(new);
    for (live, pending) in objects.live_index.iter_mut().zip(indexes) {
        for (key, values) in pending.of {
            live.insert(&key, values);
        }
    }
    old
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

/// The write side, owned by the watcher thread. Each method applies one step and appends the
/// events consumers must see, in order, to `out`. No user code runs under the store's lock:
/// index values are computed before ([`Writer::index_values`]), predicates after
/// ([`Writer::passes`]).
pub(crate) struct Writer<K> {
    shared: Arc<Shared<K>>,
    /// Which of `Shared::parts` this writer fills.
    part: usize,
    /// One per `Shared::index_names`; `None` is the built-in namespace index.
    index_fns: Arc<[Option<IndexFn<K>>]>,
    /// An `Apply` is delivered when any says the object changed (all of them when none is set).
    predicates: Arc<[PredicateFn<K>]>,
    /// Objects of this part that do not decode as `K` now, by key, with the resourceVersion
    /// of that undecodable version ("" when it has none); see [`Skipped`].
    skipped: HashMap<ObjectKey, Box<str>>,
    /// The same for the relist in progress; replaces `skipped` at `InitDone`.
    pending_skipped: HashMap<ObjectKey, Box<str>>,
    /// The undecodable versions already reported, so that each is reported once, however
    /// often relists meet it.
    reported: HashMap<ObjectKey, Box<str>>,
    /// `skipped.len()` as last added to `Shared::undecodable`.
    counted: usize,
}

impl<K: Watchable> Writer<K> {
    #[cfg(test)]
    pub(crate) fn new() -> (Writer<K>, Store<K>) {
        let (mut writers, store) = Writer::partitioned(Vec::new(), Vec::new(), vec![None]);
        (writers.remove(0), store)
    }

    /// One store filled by one writer per part: the whole store (`None`), or one namespace each.
    /// It has the built-in namespace index and `indexes` (a later one of the same name replaces
    /// an earlier one, the built-in one too).
    pub(crate) fn partitioned(
        indexes: Vec<(String, IndexFn<K>)>,
        predicates: Vec<PredicateFn<K>>,
        parts: Vec<Option<Box<str>>>,
    ) -> (Vec<Writer<K>>, Store<K>) {
        let mut index_names = vec![NAMESPACE_INDEX.to_owned()];
        let mut index_fns: Vec<Option<IndexFn<K>>> = vec![None];
        for (name, f) in indexes {
            match index_names.iter().position(|n| *n == name) {
                Some(i) => index_fns[i] = Some(f),
                None => {
                    index_names.push(name);
                    index_fns.push(Some(f));
                }
            }
        }
        let n = parts.len();
        let shared = Arc::new(Shared {
            objects: RwLock::new(Objects {
                live: HashMap::new(),
                live_index: new_indexes(index_names.len()),
                pending: (0..n).map(|_| None).collect(),
                told: (0..n).map(|_| HashMap::new()).collect(),
            }),
            index_names,
            parts,
            generation: AtomicU64::new(0),
            undecodable: AtomicUsize::new(0),
            readiness: Mutex::new(Readiness { synced: vec![false; n], ..Readiness::default() }),
            ready_changed: Condvar::new(),
        });
        let index_fns: Arc<[Option<IndexFn<K>>]> = index_fns.into();
        let predicates: Arc<[PredicateFn<K>]> = predicates.into();
        let writers = (0..n)
            .map(|part| Writer {
                shared: Arc::clone(&shared),
                part,
                index_fns: Arc::clone(&index_fns),
                predicates: Arc::clone(&predicates),
                skipped: HashMap::new(),
                pending_skipped: HashMap::new(),
                reported: HashMap::new(),
                counted: 0,
            })
            .collect();
        (writers, Store { shared })
    }

    /// `obj`'s values for every index, to pass to [`init_apply`](Self::init_apply) or
    /// [`apply`](Self::apply). Runs the user's index functions: call it before taking any lock.
    pub(crate) fn index_values(&self, key: &ObjectKey, obj: &K) -> Vec<Vec<String>> {
        self.index_fns
            .iter()
            .enumerate()
            .map(|(i, f)| match f {
                Some(f) => guard::call(|| format!("index {:?}", self.shared.index_names[i]), || f(obj)),
                None => key.namespace.iter().map(|ns| ns.to_string()).collect(),
            })
            .collect()
    }

    /// A relist starts. A relist already in progress is discarded.
    pub(crate) fn begin_init(&mut self, out: &mut Vec<Event<K>>) {
        self.abort_init();
        self.pending_skipped.clear();
        let indexes = new_indexes(self.index_fns.len());
        self.shared.objects.write().pending[self.part] = Some((HashMap::new(), indexes));
        out.push(Event::Init);
    }

    /// One object of the relist in progress, with its [`index_values`](Self::index_values).
    /// `json`: the object's compact JSON, to store instead of the object (compact store mode).
    /// Returns how many objects the relist in progress holds.
    pub(crate) fn init_apply(
        &mut self,
        obj: Arc<K>,
        json: Option<Arc<[u8]>>,
        values: Vec<Vec<String>>,
        out: &mut Vec<Event<K>>,
    ) -> usize {
        let Some(key) = ObjectKey::of(&*obj) else { return 0 };
        self.pending_skipped.remove(&key);
        self.reported.remove(&key);
        let mut objects = self.shared.objects.write();
        // A new incarnation (new uid) under a name consumers know is a delete of the old one
        // first: the one they were last told about, by this relist, an abandoned one or the store.
        let replaced = objects
            .believed(self.part, &key)
            .filter(|old| old.uid().is_some() && old.uid() != obj.meta().uid.as_deref())
            .map(Entry::share);
        match objects.pending[self.part].as_mut() {
            Some((pending, indexes)) => {
                index_insert(indexes, &key, values);
                pending.insert(key, Entry::new(&obj, json));
            }
            None => {
                log::error!("bug: InitApply outside a relist for {key}; ignored");
                return 0;
            }
        }
        let held = objects.pending[self.part].as_ref().map_or(0, |(p, _)| p.len());
        drop(objects);
        out.extend(replaced.as_ref().and_then(Entry::object).map(Event::Delete));
        out.push(Event::InitApply(obj));
        held
    }

    /// The relist is complete: swap it in, then report what vanished. Returns how many
    /// deletes were inferred.
    pub(crate) fn init_done(&mut self, out: &mut Vec<Event<K>>) -> usize {
        let vanished = {
            let mut objects = self.shared.objects.write();
            let Some((new, indexes)) = objects.pending[self.part].take() else {
                log::error!("bug: InitDone outside a relist; ignored");
                return 0;
            };
            self.shared.generation.fetch_add(1, Ordering::AcqRel);
            let old = match self.shared.parts[self.part].as_deref() {
                None => {
                    objects.live_index = indexes;
                    std::mem::replace(&mut objects.live, new)
                }
                Some(ns) => replace_namespace(&mut objects, ns, new, indexes),
            };
            // What consumers believed before this relist and the new state lacks was deleted
            // while we were not watching: the old state, as abandoned relists left it.
            let told = std::mem::take(&mut objects.told[self.part]);
            let mut vanished: Vec<Entry<K>> = Vec::new();
            vanished.extend(
                old.into_iter().filter(|(k, _)| !told.contains_key(k) && !objects.live.contains_key(k)).map(|(_, e)| e),
            );
            vanished.extend(told.into_iter().filter(|(k, _)| !objects.live.contains_key(k)).filter_map(|(_, e)| e));
            vanished
        };
        self.skipped = std::mem::take(&mut self.pending_skipped);
        let skipped = &self.skipped;
        self.reported.retain(|k, _| skipped.contains_key(k));
        self.count_skipped();
        out.push(Event::InitDone);
        let before = out.len();
        out.extend(vanished.iter().filter_map(Entry::object).map(Event::Delete));
        let mut r = self.shared.readiness.lock();
        if !r.synced[self.part] {
            r.synced[self.part] = true;
            self.shared.ready_changed.notify_all();
        }
        out.len() - before
    }

    /// The relist in progress failed; forget it (the next one starts with `Init` again). What
    /// it delivered is remembered as what consumers believe, for the next relist to reconcile.
    pub(crate) fn abort_init(&mut self) {
        self.pending_skipped.clear();
        let mut objects = self.shared.objects.write();
        if let Some((abandoned, _)) = objects.pending[self.part].take() {
            objects.told[self.part].extend(abandoned.into_iter().map(|(k, e)| (k, Some(e))));
        }
    }

    /// An object was added or modified, with its [`index_values`](Self::index_values). Returns
    /// the entry it replaced, for [`applied`](Self::applied) to turn into events after the
    /// caller has let go of its locks.
    pub(crate) fn apply(
        &mut self,
        obj: &Arc<K>,
        json: Option<Arc<[u8]>>,
        values: Vec<Vec<String>>,
    ) -> Option<Entry<K>> {
        let key = ObjectKey::of(&**obj)?;
        self.forget_skipped(&key);
        let entry = Entry::new(obj, json);
        let mut objects = self.shared.objects.write();
        index_insert(&mut objects.live_index, &key, values);
        let old = objects.live.insert(key, entry);
        self.shared.generation.fetch_add(1, Ordering::AcqRel);
        old
    }

    /// The events for the `Apply` of `new`, which replaced `old`: a `Delete` of `old` first when
    /// it was another incarnation (another uid: events were lost in between), then the `Apply`
    /// unless the predicates hold it back (they compare only two versions of one incarnation).
    /// Returns false when held back. Runs user code: call it without locks.
    pub(crate) fn applied(&self, old: Option<Entry<K>>, new: Arc<K>, out: &mut Vec<Event<K>>) -> bool {
        if let Some(gone) = other_incarnation(old.as_ref().map(Entry::share), &new) {
            out.extend(gone.object().map(Event::Delete));
            out.push(Event::Apply(new));
            return true;
        }
        let passes = self.predicates.is_empty()
            || old.as_ref().and_then(Entry::object).is_none_or(|old| {
                guard::call(|| "predicate".to_owned(), || self.predicates.iter().any(|p| p(&old, &new)))
            });
        if passes {
            out.push(Event::Apply(new));
        }
        passes
    }

    /// An object was deleted; `obj` is its last state as the server sent it. When the store
    /// held another incarnation (another uid: events were lost in between), that one is
    /// reported deleted first.
    pub(crate) fn delete(&mut self, obj: Arc<K>, out: &mut Vec<Event<K>>) {
        if let Some(key) = ObjectKey::of(&*obj) {
            self.forget_skipped(&key);
            let mut objects = self.shared.objects.write();
            index_remove(&mut objects.live_index, &key);
            let old = objects.live.remove(&key);
            self.shared.generation.fetch_add(1, Ordering::AcqRel);
            drop(objects);
            out.extend(other_incarnation(old, &obj).as_ref().and_then(Entry::object).map(Event::Delete));
        }
        out.push(Event::Delete(obj));
    }

    /// An object of the relist in progress that does not decode as `K`. The store keeps the
    /// version consumers know of the same incarnation, if any (delivered again as `InitApply`,
    /// as the relist's state includes it); another incarnation is reported deleted at
    /// `InitDone`, as the server no longer has it. Returns whether this version is new to
    /// consumers: the caller reports it then, and only then.
    pub(crate) fn init_skip(&mut self, s: &Skipped, out: &mut Vec<Event<K>>) -> bool {
        let Some(key) = &s.key else { return true };
        let kept = self
            .shared
            .objects
            .read()
            .believed(self.part, key)
            .filter(|old| same_incarnation(old.uid(), s.uid.as_deref()))
            .map(Entry::share);
        // Decoding a compact entry and the index functions run outside the lock.
        if let Some((entry, obj)) = kept.and_then(|e| e.object().map(|o| (e, o))) {
            let values = self.index_values(key, &obj);
            let mut objects = self.shared.objects.write();
            if let Some((pending, indexes)) = objects.pending[self.part].as_mut() {
                index_insert(indexes, key, values);
                pending.insert(key.clone(), entry);
                drop(objects);
                out.push(Event::InitApply(obj));
            }
        }
        self.pending_skipped.insert(key.clone(), s.rv.as_deref().unwrap_or_default().into());
        self.first_report(key, s)
    }

    /// A watch event added or modified an object into something that does not decode as `K`.
    /// The store keeps the version it has of the same incarnation; another incarnation is
    /// reported deleted (the server replaced it). Returns whether to report it (see
    /// [`init_skip`](Self::init_skip)).
    pub(crate) fn skip(&mut self, s: &Skipped, out: &mut Vec<Event<K>>) -> bool {
        let Some(key) = &s.key else { return true };
        let mut objects = self.shared.objects.write();
        let replaced = objects.live.get(key).is_some_and(|old| !same_incarnation(old.uid(), s.uid.as_deref()));
        let gone = if replaced {
            index_remove(&mut objects.live_index, key);
            self.shared.generation.fetch_add(1, Ordering::AcqRel);
            objects.live.remove(key)
        } else {
            None
        };
        drop(objects);
        out.extend(gone.as_ref().and_then(Entry::object).map(Event::Delete));
        self.skipped.insert(key.clone(), s.rv.as_deref().unwrap_or_default().into());
        self.count_skipped();
        self.first_report(key, s)
    }

    /// A watch event deleted an object whose last version does not decode as `K`: the
    /// version the store holds, if any, is reported deleted.
    pub(crate) fn delete_skipped(&mut self, s: &Skipped, out: &mut Vec<Event<K>>) {
        let Some(key) = &s.key else { return };
        self.forget_skipped(key);
        let mut objects = self.shared.objects.write();
        index_remove(&mut objects.live_index, key);
        let gone = objects.live.remove(key);
        if gone.is_some() {
            self.shared.generation.fetch_add(1, Ordering::AcqRel);
        }
        drop(objects);
        out.extend(gone.as_ref().and_then(Entry::object).map(Event::Delete));
    }

    /// A decodable version of `key` arrived, or it was deleted: it is no longer skipped.
    fn forget_skipped(&mut self, key: &ObjectKey) {
        self.reported.remove(key);
        if self.skipped.remove(key).is_some() {
            self.count_skipped();
        }
    }

    /// Whether `s` is a version of its object not reported yet; remembers it.
    fn first_report(&mut self, key: &ObjectKey, s: &Skipped) -> bool {
        let rv = s.rv.as_deref().unwrap_or_default();
        if self.reported.get(key).is_some_and(|r| **r == *rv) {
            return false;
        }
        self.reported.insert(key.clone(), rv.into());
        true
    }

    /// Publishes this writer's count of skipped objects in the store-wide total.
    fn count_skipped(&mut self) {
        let now = self.skipped.len();
        let before = std::mem::replace(&mut self.counted, now);
        if now >= before {
            self.shared.undecodable.fetch_add(now - before, Ordering::AcqRel);
        } else {
            self.shared.undecodable.fetch_sub(before - now, Ordering::AcqRel);
        }
    }

    /// Records the latest error, for `wait_until_ready` to explain itself.
    pub(crate) fn set_last_error(&self, e: &Error) {
        self.shared.readiness.lock().last_error = Some(e.clone());
    }

    pub(crate) fn store(&self) -> Store<K> {
        Store { shared: Arc::clone(&self.shared) }
    }

    /// Calls `f` with the key and server resourceVersion (`None`: unknown) of every object of
    /// this writer's part, for a drift check: the stored version, or for an object that does not
    /// decode, the server's undecodable version. Runs under the read lock (only this thread
    /// writes, so nothing waits for it but readers, which share it): `f` must be crate code.
    pub(crate) fn versions(&self, mut f: impl FnMut(&ObjectKey, Option<&str>)) {
        fn known(rv: &str) -> Option<&str> {
            Some(rv).filter(|rv| !rv.is_empty())
        }
        let objects = self.shared.objects.read();
        // One namespace of a shared store: only its objects are this writer's to check. By key,
        // not through the namespace index, which a user index may replace.
        let ns = self.shared.parts[self.part].as_deref();
        for (key, entry) in objects.live.iter().filter(|(k, _)| ns.is_none() || k.namespace.as_deref() == ns) {
            match self.skipped.get(key) {
                Some(rv) => f(key, known(rv)),
                None => f(key, entry.resource_version()),
            }
        }
        for (key, rv) in self.skipped.iter().filter(|(k, _)| !objects.live.contains_key(*k)) {
            f(key, known(rv));
        }
    }
}

impl<K> Store<K> {
    /// How many objects on the server do not decode as `K` now (see [`Skipped`]).
    pub(crate) fn undecodable(&self) -> usize {
        self.shared.undecodable.load(Ordering::Acquire)
    }

    /// The watcher has ended: wake anyone waiting for readiness with `reason` (the first one
    /// that says why, when several threads end).
    pub(crate) fn set_ended(&self, reason: Error) {
        let mut r = self.shared.readiness.lock();
        if r.ended.is_none() || matches!(r.ended, Some(Error::Stopped)) {
            r.ended = Some(reason);
        }
        self.shared.ready_changed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn cm(name: &str, uid: &str) -> Arc<ConfigMap> {
        Arc::new(ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                uid: Some(uid.into()),
                ..ObjectMeta::default()
            },
            ..ConfigMap::default()
        })
    }

    fn in_ns(ns: &str, name: &str) -> Arc<ConfigMap> {
        let mut c = (*cm(name, name)).clone();
        c.metadata.namespace = Some(ns.into());
        Arc::new(c)
    }

    #[test]
    fn a_relist_of_one_namespace_replaces_only_that_namespace() {
        let (mut writers, store) =
            Writer::partitioned(Vec::new(), Vec::new(), vec![Some("a".into()), Some("b".into())]);
        let mut out = Vec::new();
        for (w, ns) in writers.iter_mut().zip(["a", "b"]) {
            w.begin_init(&mut out);
            w.init_apply_t(in_ns(ns, "x"), &mut out);
            w.init_apply_t(in_ns(ns, "y"), &mut out);
            assert!(!store.is_ready_in(ns));
            w.init_done(&mut out);
            assert!(store.is_ready_in(ns));
        }
        assert!(store.is_ready() && !store.is_ready_in("c"));
        assert_eq!(store.len(), 4);
        // Namespace a relists without y: y is reported deleted; b keeps both.
        out.clear();
        writers[0].begin_init(&mut out);
        writers[0].init_apply_t(in_ns("a", "x"), &mut out);
        assert_eq!(writers[0].init_done(&mut out), 1);
        let deleted: Vec<_> = out
            .iter()
            .filter_map(|e| match e {
                Event::Delete(o) => Some(ObjectKey::of(&**o).unwrap().to_string()),
                _ => None,
            })
            .collect();
        assert_eq!(deleted, ["a/y"]);
        assert_eq!(store.len(), 3);
        assert_eq!(store.index("namespace", "a").len(), 1);
        assert_eq!(store.index("namespace", "b").len(), 2);
    }

    impl Writer<ConfigMap> {
        fn values(&self, obj: &ConfigMap) -> Vec<Vec<String>> {
            self.index_values(&ObjectKey::of(obj).unwrap(), obj)
        }
        fn init_apply_t(&mut self, obj: Arc<ConfigMap>, out: &mut Vec<Event<ConfigMap>>) {
            let values = self.values(&obj);
            self.init_apply(obj, None, values, out);
        }
        fn apply_t(&mut self, obj: Arc<ConfigMap>, out: &mut Vec<Event<ConfigMap>>) {
            let values = self.values(&obj);
            let old = self.apply(&obj, None, values);
            self.applied(old, obj, out);
        }
    }

    #[test]
    fn compact_entries_decode_on_access_and_report_deletes() {
        let (mut w, store) = Writer::new();
        let mut out = Vec::new();
        let a = cm("a", "1");
        let json: Arc<[u8]> = serde_json::to_vec(&*a).unwrap().into();
        w.begin_init(&mut out);
        let values = w.values(&a);
        w.init_apply(Arc::clone(&a), Some(json), values, &mut out);
        w.init_done(&mut out);
        let got = store.get(&ObjectRef::new("a").within("ns")).unwrap();
        assert_eq!(*got, *a);
        assert!(!Arc::ptr_eq(&got, &a), "decoded from the compact JSON");
        out.clear();
        w.begin_init(&mut out);
        w.init_done(&mut out);
        assert_eq!(kinds(&out), ["Init", "InitDone", "Delete(a)"]);
    }

    fn kinds(events: &[Event<ConfigMap>]) -> Vec<String> {
        events
            .iter()
            .map(|e| match e {
                Event::Init => "Init".to_owned(),
                Event::InitDone => "InitDone".to_owned(),
                Event::InitApply(o) => format!("InitApply({})", o.metadata.name.as_deref().unwrap_or("")),
                Event::Apply(o) => format!("Apply({})", o.metadata.name.as_deref().unwrap_or("")),
                Event::Delete(o) => format!("Delete({})", o.metadata.name.as_deref().unwrap_or("")),
            })
            .collect()
    }

    fn skipped(name: &str, uid: &str, rv: &str) -> Skipped {
        Skipped {
            key: Some(ObjectKey { namespace: Some("ns".into()), name: name.into() }),
            uid: Some(uid.into()),
            rv: Some(rv.into()),
        }
    }

    #[test]
    fn a_relist_keeps_the_last_decodable_version_of_an_undecodable_object() {
        let (mut w, store) = Writer::<ConfigMap>::new();
        let mut out = Vec::new();
        w.begin_init(&mut out);
        w.init_apply_t(cm("a", "ua"), &mut out);
        w.init_apply_t(cm("b", "ub"), &mut out);
        w.init_done(&mut out);
        out.clear();
        // a no longer decodes (same uid), b was replaced by an incarnation that does not.
        w.begin_init(&mut out);
        assert!(w.init_skip(&skipped("a", "ua", "7"), &mut out), "first seen: report");
        assert!(w.init_skip(&skipped("b", "ub2", "8"), &mut out));
        assert_eq!(w.init_done(&mut out), 1);
        assert_eq!(kinds(&out), ["Init", "InitApply(a)", "InitDone", "Delete(b)"]);
        assert_eq!((store.len(), store.undecodable()), (1, 2));
        // The next relist meets the same versions: nothing to report, nothing deleted.
        out.clear();
        w.begin_init(&mut out);
        assert!(!w.init_skip(&skipped("a", "ua", "7"), &mut out), "reported once per version");
        assert!(!w.init_skip(&skipped("b", "ub2", "8"), &mut out));
        assert!(w.init_skip(&skipped("c", "uc", "9"), &mut out), "a new one is reported");
        assert_eq!(w.init_done(&mut out), 0);
        assert_eq!(kinds(&out), ["Init", "InitApply(a)", "InitDone"]);
        assert_eq!((store.len(), store.undecodable()), (1, 3));
        // A relist without them forgets them.
        out.clear();
        w.begin_init(&mut out);
        w.init_done(&mut out);
        assert_eq!(kinds(&out), ["Init", "InitDone", "Delete(a)"]);
        assert_eq!(store.undecodable(), 0);
    }

    #[test]
    fn a_watch_keeps_the_last_decodable_version_until_the_object_is_deleted_or_decodes() {
        let (mut w, store) = Writer::<ConfigMap>::new();
        let mut out = Vec::new();
        w.begin_init(&mut out);
        w.init_apply_t(cm("a", "ua"), &mut out);
        w.init_apply_t(cm("b", "ub"), &mut out);
        w.init_done(&mut out);
        out.clear();
        assert!(w.skip(&skipped("a", "ua", "7"), &mut out));
        assert!(!w.skip(&skipped("a", "ua", "7"), &mut out), "the same version again");
        assert!(w.skip(&skipped("a", "ua", "8"), &mut out), "a new version");
        assert!(out.is_empty(), "{:?}", kinds(&out));
        assert_eq!((store.len(), store.undecodable()), (2, 1));
        // Another incarnation replaced b while events were lost: the old one is deleted.
        assert!(w.skip(&skipped("b", "ub2", "9"), &mut out));
        assert_eq!(kinds(&out), ["Delete(b)"]);
        assert_eq!((store.len(), store.undecodable()), (1, 2));
        out.clear();
        // a decodes again; b is deleted on the server.
        w.apply_t(cm("a", "ua"), &mut out);
        w.delete_skipped(&skipped("b", "ub2", "10"), &mut out);
        assert_eq!(kinds(&out), ["Apply(a)"], "b's old incarnation was already reported deleted");
        assert_eq!((store.len(), store.undecodable()), (1, 0));
        out.clear();
        assert!(w.skip(&skipped("a", "ua", "11"), &mut out));
        w.delete_skipped(&skipped("a", "ua", "12"), &mut out);
        assert_eq!(kinds(&out), ["Delete(a)"]);
        assert_eq!((store.len(), store.undecodable()), (0, 0));
    }

    #[test]
    fn a_drift_check_compares_undecodable_objects_at_their_server_version() {
        let (mut w, _store) = Writer::<ConfigMap>::new();
        let mut out = Vec::new();
        w.begin_init(&mut out);
        let mut a = (*cm("a", "ua")).clone();
        a.metadata.resource_version = Some("5".into());
        w.init_apply_t(Arc::new(a), &mut out);
        w.init_done(&mut out);
        w.skip(&skipped("a", "ua", "7"), &mut out);
        w.skip(&skipped("n", "un", "8"), &mut out);
        let listed: HashMap<ObjectKey, Box<str>> = [("a", "7"), ("n", "8")]
            .into_iter()
            .map(|(n, rv)| (ObjectKey { namespace: Some("ns".into()), name: n.into() }, rv.into()))
            .collect();
        let mut seen: Vec<(String, Option<String>)> = Vec::new();
        w.versions(|k, rv| seen.push((k.to_string(), rv.map(str::to_owned))));
        seen.sort();
        let want: Vec<(String, Option<String>)> = listed
            .iter()
            .map(|(k, rv)| (k.to_string(), Some(rv.to_string())))
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        assert_eq!(seen, want);
    }

    #[test]
    fn readers_see_a_relist_only_at_init_done() {
        let (mut w, store) = Writer::new();
        let mut out = Vec::new();
        w.begin_init(&mut out);
        w.init_apply_t(cm("a", "1"), &mut out);
        assert_eq!(store.len(), 0);
        assert!(!store.is_ready());
        w.init_done(&mut out);
        assert_eq!(store.len(), 1);
        assert!(store.is_ready());
        assert!(store.get(&ObjectRef::new("a").within("ns")).is_some());
    }

    #[test]
    fn objects_missing_from_a_relist_are_reported_deleted_after_init_done() {
        let (mut w, store) = Writer::new();
        let mut out = Vec::new();
        w.begin_init(&mut out);
        w.init_apply_t(cm("a", "1"), &mut out);
        w.init_apply_t(cm("b", "2"), &mut out);
        w.init_done(&mut out);
        out.clear();
        w.begin_init(&mut out);
        w.init_apply_t(cm("a", "1"), &mut out);
        w.init_done(&mut out);
        assert_eq!(kinds(&out), ["Init", "InitApply(a)", "InitDone", "Delete(b)"]);
        assert_eq!(store.len(), 1);
    }

    #[test]
    fn a_new_uid_under_a_known_name_is_a_delete_then_an_add() {
        let (mut w, _store) = Writer::new();
        let mut out = Vec::new();
        w.begin_init(&mut out);
        w.init_apply_t(cm("a", "1"), &mut out);
        w.init_done(&mut out);
        out.clear();
        w.begin_init(&mut out);
        w.init_apply_t(cm("a", "2"), &mut out);
        w.init_done(&mut out);
        assert_eq!(kinds(&out), ["Init", "Delete(a)", "InitApply(a)", "InitDone"]);
    }

    #[test]
    fn an_aborted_relist_leaves_the_store_untouched() {
        let (mut w, store) = Writer::new();
        let mut out = Vec::new();
        w.begin_init(&mut out);
        w.init_apply_t(cm("a", "1"), &mut out);
        w.init_done(&mut out);
        w.begin_init(&mut out);
        w.init_apply_t(cm("b", "2"), &mut out);
        w.abort_init();
        assert_eq!(store.len(), 1);
        assert!(store.get(&ObjectRef::new("b").within("ns")).is_none());
        // A new consumer still hears of b, as the others did: the next relist reconciles it.
        assert_eq!(store.replay().len(), 4, "Init, InitApply(a), InitApply(b), InitDone");
    }

    #[test]
    fn objects_of_an_abandoned_relist_missing_from_the_next_are_reported_deleted() {
        let (mut w, _store) = Writer::new();
        let mut out = Vec::new();
        w.begin_init(&mut out);
        w.init_apply_t(cm("a", "1"), &mut out);
        w.abort_init();
        w.begin_init(&mut out);
        w.init_apply_t(cm("b", "2"), &mut out);
        w.init_done(&mut out);
        assert_eq!(kinds(&out), ["Init", "InitApply(a)", "Init", "InitApply(b)", "InitDone", "Delete(a)"]);
        out.clear();
        w.begin_init(&mut out);
        w.init_apply_t(cm("b", "2"), &mut out);
        w.init_done(&mut out);
        assert_eq!(kinds(&out), ["Init", "InitApply(b)", "InitDone"], "orphans are reported once");
    }

    /// Issue 13 item 12: an object delivered by an abandoned relist, then deleted and recreated
    /// under the same name before the next relist completes, is reported deleted by uid.
    #[test]
    fn an_incarnation_delivered_by_an_abandoned_relist_and_then_replaced_is_reported_deleted() {
        let (mut w, store) = Writer::new();
        let mut out = Vec::new();
        w.begin_init(&mut out);
        w.init_apply_t(cm("x", "old-uid"), &mut out);
        w.abort_init();
        w.begin_init(&mut out);
        w.init_apply_t(cm("x", "new-uid"), &mut out);
        w.init_done(&mut out);
        let uids: Vec<String> = out
            .iter()
            .map(|e| match e {
                Event::Delete(o) => format!("Delete({})", o.metadata.uid.as_deref().unwrap()),
                Event::InitApply(o) => format!("InitApply({})", o.metadata.uid.as_deref().unwrap()),
                Event::Init => "Init".into(),
                Event::InitDone => "InitDone".into(),
                Event::Apply(_) => "Apply".into(),
            })
            .collect();
        assert_eq!(uids, ["Init", "InitApply(old-uid)", "Init", "Delete(old-uid)", "InitApply(new-uid)", "InitDone"]);
        assert_eq!(store.get(&ObjectRef::new("x").within("ns")).unwrap().metadata.uid.as_deref(), Some("new-uid"));
    }

    /// The mirror image: an abandoned relist that already reported the old uid deleted does not
    /// make the next relist report it again.
    #[test]
    fn a_replaced_uid_is_reported_deleted_once_across_an_abandoned_relist() {
        let (mut w, _store) = Writer::new();
        let mut out = Vec::new();
        w.begin_init(&mut out);
        w.init_apply_t(cm("x", "1"), &mut out);
        w.init_done(&mut out);
        out.clear();
        w.begin_init(&mut out);
        w.init_apply_t(cm("x", "2"), &mut out);
        w.abort_init();
        w.begin_init(&mut out);
        w.init_apply_t(cm("x", "2"), &mut out);
        w.init_done(&mut out);
        assert_eq!(kinds(&out), ["Init", "Delete(x)", "InitApply(x)", "Init", "InitApply(x)", "InitDone"]);
    }

    /// A new subscriber is brought to what the others believe: an abandoned relist's objects
    /// included, so the deletes that follow are about objects it knows.
    #[test]
    fn the_replay_shows_what_an_abandoned_relist_delivered() {
        let (mut w, store) = Writer::new();
        let mut out = Vec::new();
        w.begin_init(&mut out);
        w.init_apply_t(cm("a", "1"), &mut out);
        w.init_done(&mut out);
        w.begin_init(&mut out);
        w.init_apply_t(cm("a", "2"), &mut out);
        w.init_apply_t(cm("b", "3"), &mut out);
        w.abort_init();
        let mut replay: Vec<String> = store
            .replay()
            .iter()
            .filter_map(|e| {
                e.object()
                    .map(|o| format!("{}:{}", o.metadata.name.as_deref().unwrap(), o.metadata.uid.as_deref().unwrap()))
            })
            .collect();
        replay.sort();
        assert_eq!(replay, ["a:2", "b:3"]);
    }

    /// Issue 13 item 6: a user index named "namespace" replaces the built-in one; a relist of
    /// one namespace must still remove that namespace's vanished objects.
    #[test]
    fn a_user_index_named_namespace_does_not_break_per_namespace_relists() {
        let by_name: IndexFn<ConfigMap> = Arc::new(|c: &ConfigMap| c.metadata.name.iter().cloned().collect());
        let (mut writers, store) = Writer::partitioned(
            vec![(NAMESPACE_INDEX.to_owned(), by_name)],
            Vec::new(),
            vec![Some("a".into()), Some("b".into())],
        );
        let mut out = Vec::new();
        for (w, ns) in writers.iter_mut().zip(["a", "b"]) {
            w.begin_init(&mut out);
            w.init_apply_t(in_ns(ns, "x"), &mut out);
            w.init_apply_t(in_ns(ns, "y"), &mut out);
            w.init_done(&mut out);
        }
        out.clear();
        writers[0].begin_init(&mut out);
        writers[0].init_apply_t(in_ns("a", "x"), &mut out);
        assert_eq!(writers[0].init_done(&mut out), 1, "{:?}", kinds(&out));
        assert_eq!(kinds(&out), ["Init", "InitApply(x)", "InitDone", "Delete(y)"]);
        assert_eq!(store.len(), 3);
        assert_eq!(store.index("namespace", "y").len(), 1, "the user's index, by name: b/y only");
    }

    /// Events lost between two incarnations of one name (the DELETED of the old one, say) must
    /// not make the old incarnation disappear unreported.
    #[test]
    fn a_watch_event_for_another_incarnation_reports_the_stored_one_deleted() {
        let (mut w, _store) = Writer::new();
        let mut out = Vec::new();
        w.apply_t(cm("x", "1"), &mut out);
        w.apply_t(cm("x", "2"), &mut out);
        w.delete(cm("x", "3"), &mut out);
        let uids: Vec<String> = out
            .iter()
            .map(|e| match e {
                Event::Apply(o) => format!("Apply({})", o.metadata.uid.as_deref().unwrap()),
                Event::Delete(o) => format!("Delete({})", o.metadata.uid.as_deref().unwrap()),
                other => format!("{other:?}"),
            })
            .collect();
        assert_eq!(uids, ["Apply(1)", "Delete(1)", "Apply(2)", "Delete(2)", "Delete(3)"]);
    }

    fn names(objs: Vec<Arc<ConfigMap>>) -> Vec<String> {
        let mut n: Vec<String> = objs.iter().map(|o| o.metadata.name.clone().unwrap_or_default()).collect();
        n.sort();
        n
    }

    fn labelled(name: &str, uid: &str, tier: &str) -> Arc<ConfigMap> {
        let mut c = (*cm(name, uid)).clone();
        c.metadata.labels = Some([("tier".to_owned(), tier.to_owned())].into());
        Arc::new(c)
    }

    fn tier_writer() -> (Writer<ConfigMap>, Store<ConfigMap>) {
        let tier: IndexFn<ConfigMap> =
            Arc::new(|c: &ConfigMap| c.metadata.labels.iter().flat_map(|l| l.get("tier").cloned()).collect());
        let (mut writers, store) = Writer::partitioned(vec![("tier".to_owned(), tier)], Vec::new(), vec![None]);
        (writers.remove(0), store)
    }

    #[test]
    fn indexes_follow_apply_change_and_delete() {
        let (mut w, store) = tier_writer();
        let mut out = Vec::new();
        w.apply_t(labelled("a", "1", "web"), &mut out);
        w.apply_t(labelled("b", "2", "web"), &mut out);
        assert_eq!(names(store.index("tier", "web")), ["a", "b"]);
        w.apply_t(labelled("a", "1", "db"), &mut out);
        assert_eq!(names(store.index("tier", "web")), ["b"]);
        assert_eq!(names(store.index("tier", "db")), ["a"]);
        w.delete(labelled("b", "2", "web"), &mut out);
        assert!(store.index("tier", "web").is_empty());
        assert_eq!(names(store.index("namespace", "ns")), ["a"]);
        assert!(store.index("unknown", "db").is_empty(), "an unknown index is empty");
    }

    #[test]
    fn a_relist_replaces_the_indexes_only_at_init_done() {
        let (mut w, store) = tier_writer();
        let mut out = Vec::new();
        w.begin_init(&mut out);
        w.init_apply_t(labelled("a", "1", "web"), &mut out);
        w.init_apply_t(labelled("b", "2", "web"), &mut out);
        w.init_done(&mut out);
        w.begin_init(&mut out);
        w.init_apply_t(labelled("a", "1", "db"), &mut out);
        assert_eq!(names(store.index("tier", "web")), ["a", "b"], "the relist is invisible until InitDone");
        w.abort_init();
        w.begin_init(&mut out);
        w.init_apply_t(labelled("a", "1", "db"), &mut out);
        w.init_done(&mut out);
        assert!(store.index("tier", "web").is_empty());
        assert_eq!(names(store.index("tier", "db")), ["a"]);
    }

    #[test]
    fn wait_until_ready_explains_the_last_error() {
        let (w, store) = Writer::<ConfigMap>::new();
        w.set_last_error(&Error::transport("list configmaps", "connection refused"));
        let err = store.wait_until_ready(Duration::from_millis(10)).unwrap_err();
        assert!(err.to_string().contains("connection refused"), "{err}");
    }

    #[test]
    fn wait_until_ready_returns_when_the_watcher_ends() {
        let (w, store) = Writer::<ConfigMap>::new();
        w.store().set_ended(Error::Stopped);
        assert!(matches!(store.wait_until_ready(Duration::from_secs(60)), Err(Error::Stopped)));
    }

    #[test]
    fn generation_moves_on_every_visible_change() {
        let (mut w, store) = Writer::new();
        let mut out = Vec::new();
        let g0 = store.generation();
        w.apply_t(cm("a", "1"), &mut out);
        let g1 = store.generation();
        assert_ne!(g0, g1);
        w.delete(cm("a", "1"), &mut out);
        assert_ne!(g1, store.generation());
    }
}
