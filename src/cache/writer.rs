//! The write side of the store, owned by a watcher thread: relists, changes, deletes, and the
//! bookkeeping that makes every incarnation a consumer was given end in exactly one `Delete`.
//! Objects that do not decode as `K` have a file of their own (`writer/undecodable.rs`).

use std::collections::hash_map::Entry as Slot;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, RwLock};

use super::compact::Encoded;
use super::entry::{Decode, Entry};
use super::index::{IndexFn, NAMESPACE_INDEX, Values, index_insert, index_remove, new_indexes};
use super::{Inner, Map, Objects, Readiness, Relist, Store};
use crate::error::Error;
use crate::event::Event;
use crate::guard;
use crate::key::ObjectKey;
use crate::resource::Watchable;

mod undecodable;

pub(crate) use undecodable::{Seen, Skipped};

/// A user predicate: did anything that matters change from `old` to `new`?
pub(crate) type PredicateFn<K> = Arc<dyn Fn(&K, &K) -> bool + Send + Sync>;

/// Whether two uids may be the same incarnation of an object (an unknown uid may be).
fn same_incarnation(a: Option<&str>, b: Option<&str>) -> bool {
    a.is_none() || b.is_none() || a == b
}

/// `old`, when it is another incarnation than `new` (both have uids, and they differ).
fn other_incarnation<K: Watchable>(old: Option<Entry<K>>, new: &K) -> Option<Entry<K>> {
    old.filter(|old| old.uid().is_some() && new.meta().uid.is_some() && old.uid() != new.meta().uid.as_deref())
}

/// Switches in a relist: of the whole store (`ns`: `None`) or of one namespace, the rest of the
/// store untouched. The part's entries the relist does not carry over leave the live store and
/// its indexes, and its new and changed ones come in. Returns the entries that left.
fn switch<K>(objects: &mut Objects<K>, ns: Option<&str>, relist: Relist<K>) -> Map<K> {
    let Relist { map, indexes, carried } = relist;
    if ns.is_none() && carried.is_empty() {
        // Nothing carried over: the relist is the new store, indexes and all.
        objects.live_index = indexes;
        return std::mem::replace(&mut objects.live, map);
    }
    // By key, not through the namespace index: a user index may replace that one (see the test
    // a_user_index_named_namespace_does_not_break_per_namespace_relists below).
    let in_part = |k: &ObjectKey| ns.is_none_or(|ns| k.namespace.as_deref() == Some(ns));
    let leaving: Vec<ObjectKey> =
        objects.live.keys().filter(|k| in_part(k) && !carried.contains(*k)).cloned().collect();
    let mut old = HashMap::with_capacity(leaving.len());
    for key in leaving {
        index_remove(&mut objects.live_index, &key);
        if let Some(entry) = objects.live.remove(&key) {
            old.insert(key, entry);
        }
    }
    objects.live.extend(map);
    for (live, pending) in objects.live_index.iter_mut().zip(indexes) {
        live.extend(pending);
    }
    old
}

/// The user's index functions: what [`Writer::index_values`] runs. Cloned for the helper
/// threads that prepare list items (`WatcherBuilder::parallel_sync`).
pub(crate) struct Indexer<K> {
    shared: Arc<Inner<K>>,
    /// One per `Inner::index_names`; `None` is the built-in namespace index.
    fns: Arc<[Option<IndexFn<K>>]>,
}

impl<K> Clone for Indexer<K> {
    fn clone(&self) -> Self {
        Indexer { shared: Arc::clone(&self.shared), fns: Arc::clone(&self.fns) }
    }
}

/// What the live store holds of an object a relist lists again unchanged (see
/// [`Indexer::unchanged`]): what its `InitApply` carries. The entry itself, with its index
/// values, stays where it is ([`Writer::init_share`]).
pub(crate) enum Unchanged<K> {
    /// The decoded object (the default mode).
    Object(Arc<K>),
    /// A compact entry's bytes (the compact modes), not decoded.
    Compact(Encoded),
}

impl<K: Watchable> Indexer<K> {
    /// Whether the live store holds anything (a first list finds nothing to share).
    pub(crate) fn holds_any(&self) -> bool {
        !self.shared.objects.read().live.is_empty()
    }

    /// The live entry at `key`, if it is the incarnation `uid` at `resource_version` (a relist
    /// lists it again unchanged), so that it need not be decoded, transformed or indexed again:
    /// the relist carries the entry over as it is, and its `InitApply` shares the object (in
    /// the compact modes, the encoded bytes). Objects without a uid or a resourceVersion are
    /// never taken for unchanged. A transform that changes either makes its objects never
    /// match: they are decoded and transformed again, as before.
    pub(crate) fn unchanged(&self, key: &ObjectKey, uid: &str, resource_version: &str) -> Option<Unchanged<K>> {
        let objects = self.shared.objects.read();
        let entry = objects.live.get(key)?;
        if entry.uid() != Some(uid) || entry.resource_version() != Some(resource_version) {
            return None;
        }
        Some(match entry {
            Entry::Typed(obj) => Unchanged::Object(Arc::clone(obj)),
            Entry::Compact(encoded) => Unchanged::Compact(encoded.clone()),
        })
    }
}

impl<K> Indexer<K> {
    /// `obj`'s values for every user index (the namespace index's come from the key: see
    /// [`Values`]; with no user index, nothing is allocated). Runs the user's index functions
    /// (guarded: a panic names its index): call it before taking any lock.
    pub(crate) fn values(&self, obj: &K) -> Values {
        if self.fns.iter().all(Option::is_none) {
            return Vec::new();
        }
        self.fns
            .iter()
            .enumerate()
            .map(|(i, f)| {
                f.as_ref().map(|f| guard::call(|| format!("index {:?}", self.shared.index_names[i]), || f(obj)))
            })
            .collect()
    }
}

/// The write side, owned by the watcher thread. Each method applies one step and appends the
/// events consumers must see, in order, to `out`. No user code runs under the store's lock:
/// index values are computed before ([`Writer::index_values`]), predicates after
/// ([`Writer::applied`]).
pub(crate) struct Writer<K> {
    shared: Arc<Inner<K>>,
    /// Which of `Inner::parts` this writer fills.
    part: usize,
    /// The index functions (`Indexer::values`).
    indexer: Indexer<K>,
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
    /// `skipped.len()` as last added to `Inner::undecodable`.
    counted: usize,
    /// The namespaces of the keys this writer stored, one allocation each, which every key in
    /// the namespace shares (100k pods in 50 namespaces hold 50); those no key holds any more
    /// are let go at each `InitDone`.
    namespaces: HashSet<Arc<str>>,
}

impl<K: Watchable> Writer<K> {
    #[cfg(test)]
    pub(crate) fn new() -> (Writer<K>, Store<K>) {
        fn test_decode<K: Watchable>(json: &[u8]) -> std::result::Result<K, String> {
            serde_json::from_slice(json).map_err(|e| e.to_string())
        }
        let (mut writers, store) = Writer::partitioned(Vec::new(), Vec::new(), vec![None], test_decode);
        (writers.remove(0), store)
    }

    /// One store filled by one writer per part: the whole store (`None`), or one namespace each.
    /// It has the built-in namespace index and `indexes` (a later one of the same name replaces
    /// an earlier one, the built-in one too).
    /// `decode`: how compact entries are decoded.
    pub(crate) fn partitioned(
        indexes: Vec<(String, IndexFn<K>)>,
        predicates: Vec<PredicateFn<K>>,
        parts: Vec<Option<Box<str>>>,
        decode: Decode<K>,
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
        let shared = Arc::new(Inner {
            decode,
            objects: RwLock::new(Objects {
                live: HashMap::new(),
                live_index: new_indexes(&index_fns),
                pending: (0..n).map(|_| None).collect(),
                told: (0..n).map(|_| HashMap::new()).collect(),
            }),
            index_names,
            parts,
            generation: AtomicU64::new(0),
            undecodable: AtomicUsize::new(0),
            readiness: Mutex::new(Readiness {
                synced: vec![false; n],
                versions: vec![None; n],
                stale: vec![false; n],
                ..Readiness::default()
            }),
            ready_changed: Condvar::new(),
            version_changed: Condvar::new(),
            dark: std::sync::OnceLock::new(),
        });
        let index_fns: Arc<[Option<IndexFn<K>>]> = index_fns.into();
        let predicates: Arc<[PredicateFn<K>]> = predicates.into();
        let writers = (0..n)
            .map(|part| Writer {
                shared: Arc::clone(&shared),
                part,
                indexer: Indexer { shared: Arc::clone(&shared), fns: Arc::clone(&index_fns) },
                predicates: Arc::clone(&predicates),
                skipped: HashMap::new(),
                pending_skipped: HashMap::new(),
                reported: HashMap::new(),
                counted: 0,
                namespaces: HashSet::new(),
            })
            .collect();
        (writers, Store { shared })
    }

    /// `obj`'s values for every index, to pass to [`init_apply`](Self::init_apply) or
    /// [`apply`](Self::apply). Runs the user's index functions: call it before taking any lock.
    pub(crate) fn index_values(&self, obj: &K) -> Values {
        self.indexer.values(obj)
    }

    /// The index functions, for preparing objects (on this thread or a helper).
    /// How the store decodes a compact entry.
    pub(crate) fn decoder(&self) -> Decode<K> {
        self.shared.decode
    }

    pub(crate) fn indexer(&self) -> &Indexer<K> {
        &self.indexer
    }

    /// A relist starts. A relist already in progress is discarded.
    pub(crate) fn begin_init(&mut self, out: &mut Vec<Event<K>>) {
        self.abort_init();
        self.pending_skipped.clear();
        self.shared.objects.write().pending[self.part] = Some(Relist::new(new_indexes(&self.indexer.fns)));
        out.push(Event::Init);
    }

    /// One object of the relist in progress, under its key (`ObjectKey::of(obj)`), with its
    /// [`index_values`](Self::index_values).
    /// `encoded`: the object's encoded form, to store instead of the object (compact store mode).
    /// Returns how many objects the relist in progress holds.
    pub(crate) fn init_apply(
        &mut self,
        key: ObjectKey,
        obj: Arc<K>,
        encoded: Option<Encoded>,
        values: Values,
        out: &mut Vec<Event<K>>,
    ) -> usize {
        let key = self.share(key);
        let entry = Entry::new(&obj, encoded);
        let held = self.init_insert(key, entry, values, out);
        out.push(Event::InitApply(obj));
        held
    }

    /// [`init_apply`](Self::init_apply) of an object the live store holds as listed (see
    /// [`Indexer::unchanged`]): its entry is carried over at `InitDone`, not copied. The
    /// `InitApply` of a decoded object is appended to `out`; that of a compact entry is the
    /// caller's to hand over, decoded from the entry when it goes out (the `Delete` of a
    /// replaced incarnation, if any, comes first, in `out`). Returns how many objects the
    /// relist in progress holds.
    pub(crate) fn init_share(&mut self, key: ObjectKey, unchanged: Unchanged<K>, out: &mut Vec<Event<K>>) -> usize {
        self.forget_pending_skipped(&key);
        let mut objects = self.shared.objects.write();
        // Only the part's own writer changes its live entries, never during its relist: the
        // entry is still the one `Indexer::unchanged` found.
        let Some(live) = objects.live.get(&key) else {
            log::error!("bug: an unchanged list item is no longer in the store: {key}; ignored");
            return objects.pending[self.part].as_ref().map_or(0, Relist::len);
        };
        let replaced = objects.replaced(self.part, &key, live.uid());
        let Some(relist) = objects.pending[self.part].as_mut() else {
            log::error!("bug: InitApply outside a relist for {key}; ignored");
            return 0;
        };
        if relist.map.remove(&key).is_some() {
            index_remove(&mut relist.indexes, &key);
        }
        relist.carried.insert(key);
        let held = relist.len();
        drop(objects);
        out.extend(replaced.as_ref().and_then(|e| e.object(self.shared.decode)).map(Event::Delete));
        if let Unchanged::Object(obj) = unchanged {
            out.push(Event::InitApply(obj));
        }
        held
    }

    /// `key` as the store keeps it: its namespace shared with the other keys in it (see
    /// `namespaces`).
    fn share(&mut self, mut key: ObjectKey) -> ObjectKey {
        if let Some(ns) = &mut key.namespace {
            match self.namespaces.get(&**ns) {
                Some(shared) => *ns = Arc::clone(shared),
                None => {
                    self.namespaces.insert(Arc::clone(ns));
                }
            }
        }
        key
    }

    /// A key listed again is no longer undecodable, nor reported as such.
    fn forget_pending_skipped(&mut self, key: &ObjectKey) {
        if !self.pending_skipped.is_empty() || !self.reported.is_empty() {
            self.pending_skipped.remove(key);
            self.reported.remove(key);
        }
    }

    /// Puts `entry` into the relist in progress, after the `Delete` of another incarnation
    /// consumers believe in under its key; returns how many objects the relist holds.
    fn init_insert(&mut self, key: ObjectKey, entry: Entry<K>, values: Values, out: &mut Vec<Event<K>>) -> usize {
        self.forget_pending_skipped(&key);
        let mut objects = self.shared.objects.write();
        let replaced = objects.replaced(self.part, &key, entry.uid());
        let Some(relist) = objects.pending[self.part].as_mut() else {
            log::error!("bug: InitApply outside a relist for {key}; ignored");
            return 0;
        };
        relist.carried.remove(&key);
        let known = relist.map.contains_key(&key);
        index_insert(&mut relist.indexes, &key, values, known);
        relist.map.insert(key, entry);
        let held = relist.len();
        drop(objects);
        out.extend(replaced.as_ref().and_then(|e| e.object(self.shared.decode)).map(Event::Delete));
        held
    }

    /// The relist is complete: swap it in, then report what vanished. The store then reflects
    /// resourceVersion `rv` (the list's; `None`: unknown, the version stays), from the moment
    /// it is ready. Returns how many deletes were inferred.
    pub(crate) fn init_done(&mut self, rv: Option<&str>, out: &mut Vec<Event<K>>) -> usize {
        let vanished = {
            let mut objects = self.shared.objects.write();
            let Some(relist) = objects.pending[self.part].take() else {
                log::error!("bug: InitDone outside a relist; ignored");
                return 0;
            };
            self.shared.generation.fetch_add(1, Ordering::AcqRel);
            let old = switch(&mut objects, self.shared.parts[self.part].as_deref(), relist);
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
        // The namespaces no key holds any more.
        self.namespaces.retain(|ns| Arc::strong_count(ns) > 1);
        out.push(Event::InitDone);
        let before = out.len();
        out.extend(vanished.iter().filter_map(|e| e.object(self.shared.decode)).map(Event::Delete));
        let mut r = self.shared.readiness.lock();
        // Readiness and the version change together: a store that is ready has a version.
        if let Some(rv) = rv {
            self.set_version(&mut r, rv);
        }
        if !r.synced[self.part] {
            r.synced[self.part] = true;
            self.shared.ready_changed.notify_all();
        }
        out.len() - before
    }

    /// The watcher ends, and this part's objects must not outlive it (it followed a shard
    /// group's share, which its member no longer claims once it is gone): they leave the store,
    /// a relist in progress with them. Readiness and the version stay as they were, and
    /// consumers are told nothing (the watcher has ended).
    pub(crate) fn empty_at_end(&mut self) {
        self.abort_init();
        let mut objects = self.shared.objects.write();
        let empty = Relist::new(new_indexes(&self.indexer.fns));
        switch(&mut objects, self.shared.parts[self.part].as_deref(), empty);
        objects.told[self.part].clear();
        self.shared.generation.fetch_add(1, Ordering::AcqRel);
    }

    /// The relist in progress failed; forget it (the next one starts with `Init` again). What
    /// it delivered is remembered as what consumers believe, for the next relist to reconcile.
    pub(crate) fn abort_init(&mut self) {
        self.pending_skipped.clear();
        let mut objects = self.shared.objects.write();
        if let Some(abandoned) = objects.pending[self.part].take() {
            let carried: Vec<(ObjectKey, Option<Entry<K>>)> = abandoned
                .carried
                .into_iter()
                .filter_map(|k| {
                    let e = objects.live.get(&k)?.share();
                    Some((k, Some(e)))
                })
                .collect();
            let told = &mut objects.told[self.part];
            told.extend(abandoned.map.into_iter().map(|(k, e)| (k, Some(e))));
            told.extend(carried);
        }
    }

    /// An object was added or modified, under its key (`ObjectKey::of(obj)`), with its
    /// [`index_values`](Self::index_values). Returns the entry it replaced, for
    /// [`applied`](Self::applied) to turn into events after the caller has let go of its locks.
    pub(crate) fn apply(
        &mut self,
        key: ObjectKey,
        obj: &Arc<K>,
        encoded: Option<Encoded>,
        values: Values,
    ) -> Option<Entry<K>> {
        let key = self.share(key);
        self.forget_skipped(&key);
        let entry = Entry::new(obj, encoded);
        let mut guard = self.shared.objects.write();
        let objects = &mut *guard;
        // One lookup: the slot says whether the key is known (then the namespace index holds it).
        let old = match objects.live.entry(key) {
            Slot::Occupied(mut slot) => {
                index_insert(&mut objects.live_index, slot.key(), values, true);
                Some(slot.insert(entry))
            }
            Slot::Vacant(slot) => {
                index_insert(&mut objects.live_index, slot.key(), values, false);
                slot.insert(entry);
                None
            }
        };
        self.shared.generation.fetch_add(1, Ordering::AcqRel);
        old
    }

    /// The events for the `Apply` of `new`, which replaced `old`: a `Delete` of `old` first when
    /// it was another incarnation (another uid: events were lost in between), then the `Apply`
    /// unless the predicates hold it back (they compare only two versions of one incarnation).
    /// Returns false when held back. Runs user code: call it without locks.
    pub(crate) fn applied(&self, old: Option<Entry<K>>, new: Arc<K>, out: &mut Vec<Event<K>>) -> bool {
        if let Some(gone) = other_incarnation(old.as_ref().map(Entry::share), &new) {
            out.extend(gone.object(self.shared.decode).map(Event::Delete));
            out.push(Event::Apply(new));
            return true;
        }
        let passes = self.predicates.is_empty()
            || old.as_ref().and_then(|e| e.object(self.shared.decode)).is_none_or(|old| {
                guard::call(|| "predicate".to_owned(), || self.predicates.iter().any(|p| p(&old, &new)))
            });
        if passes {
            out.push(Event::Apply(new));
        }
        passes
    }

    /// An object was deleted; `obj` is its last state as the server sent it, `key` its key
    /// (`ObjectKey::of(obj)`). Consumers are told
    /// only of what they were given: the store's incarnation, with `obj` as its last state when
    /// it is the same one; when the store held another incarnation (another uid: events were
    /// lost in between), that one is reported deleted; when it held nothing under the key (its
    /// `ADDED` was lost, or it never decoded), nobody was given it and nothing is reported.
    pub(crate) fn delete(&mut self, key: &ObjectKey, obj: Arc<K>, out: &mut Vec<Event<K>>) {
        self.forget_skipped(key);
        let mut objects = self.shared.objects.write();
        index_remove(&mut objects.live_index, key);
        let old = objects.live.remove(key);
        self.shared.generation.fetch_add(1, Ordering::AcqRel);
        drop(objects);
        if old.is_none() {
            return;
        }
        match other_incarnation(old, &obj) {
            Some(other) => out.extend(other.object(self.shared.decode).map(Event::Delete)),
            None => out.push(Event::Delete(obj)),
        }
    }

    /// This writer's part of the store now reflects resourceVersion `rv`: after the event it
    /// follows is applied, or at a bookmark (`Store::resource_version`). Wakes
    /// `wait_for_version`.
    pub(crate) fn reached(&self, rv: &str) {
        self.set_version(&mut self.shared.readiness.lock(), rv);
    }

    /// Sets this writer's version and wakes `wait_for_version`.
    fn set_version(&self, r: &mut Readiness, rv: &str) {
        let version = r.versions[self.part].get_or_insert_with(String::new);
        // Reuses the buffer: this runs once per event.
        version.clear();
        version.push_str(rv);
        self.shared.version_changed.notify_all();
    }

    /// This writer's part of the store became stale at `now` (`Effect::Stale`). Returns when the
    /// store became stale if that made it so (it was in step until now), for a notice.
    pub(crate) fn stale(&self, now: Instant) -> Option<Instant> {
        let mut r = self.shared.readiness.lock();
        r.stale[self.part] = true;
        if r.stale_since.is_some() {
            return None;
        }
        r.stale_since = Some(now);
        r.stale_since
    }

    /// This writer's part of the store is in step again at `now` (`Effect::Fresh`). Returns
    /// how long the store was stale if that made it fresh (no other part is stale), for a
    /// notice.
    pub(crate) fn fresh(&self, now: Instant) -> Option<Duration> {
        let mut r = self.shared.readiness.lock();
        r.stale[self.part] = false;
        if r.stale.iter().any(|s| *s) || r.ended.is_some() {
            return None;
        }
        r.stale_since.take().map(|since| now.saturating_duration_since(since))
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::DecodeError;
    use crate::key::ObjectRef;
    use std::time::Duration;

    fn test_decode<K: Watchable>(json: &[u8]) -> std::result::Result<K, String> {
        serde_json::from_slice(json).map_err(|e| e.to_string())
    }
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

    /// The keys of one namespace share its name, and the writer lets go of a namespace once no
    /// key is in it; the namespace index holds no copy of a key's values.
    #[test]
    fn keys_share_their_namespace_and_the_index_reads_it_off_the_key() {
        let (mut w, store) = Writer::<ConfigMap>::new();
        let mut out = Vec::new();
        w.begin_init(&mut out);
        for (ns, name) in [("a", "x"), ("a", "y"), ("b", "z")] {
            w.init_apply_t(in_ns(ns, name), &mut out);
        }
        w.init_done(None, &mut out);
        {
            let objects = store.shared.objects.read();
            let in_a: Vec<&Arc<str>> =
                objects.live.keys().filter_map(|k| k.namespace.as_ref()).filter(|ns| &***ns == "a").collect();
            assert_eq!(in_a.len(), 2);
            assert!(Arc::ptr_eq(in_a[0], in_a[1]), "one allocation for the namespace");
            assert!(objects.live_index[0].of.is_empty(), "the namespace index keeps no values beside the keys");
        }
        assert_eq!(store.index("namespace", "a").len(), 2);
        w.delete_t(in_ns("a", "x"), &mut out);
        assert_eq!(store.index("namespace", "a").len(), 1);
        w.begin_init(&mut out);
        w.init_apply_t(in_ns("b", "z"), &mut out);
        w.init_done(None, &mut out);
        assert!(store.index("namespace", "a").is_empty());
        let kept: Vec<&str> = w.namespaces.iter().map(|ns| &**ns).collect();
        assert_eq!(kept, ["b"], "a namespace no key is in is let go");
    }

    #[test]
    fn a_relist_of_one_namespace_replaces_only_that_namespace() {
        let (mut writers, store) =
            Writer::partitioned(Vec::new(), Vec::new(), vec![Some("a".into()), Some("b".into())], test_decode);
        let mut out = Vec::new();
        for (w, ns) in writers.iter_mut().zip(["a", "b"]) {
            w.begin_init(&mut out);
            w.init_apply_t(in_ns(ns, "x"), &mut out);
            w.init_apply_t(in_ns(ns, "y"), &mut out);
            assert!(!store.is_ready_in(ns));
            w.init_done(None, &mut out);
            assert!(store.is_ready_in(ns));
        }
        assert!(store.is_ready() && !store.is_ready_in("c"));
        assert_eq!(store.len(), 4);
        // Namespace a relists without y: y is reported deleted; b keeps both.
        out.clear();
        assert_eq!(writers[0].relist_t(&[in_ns("a", "x")], &mut out), 1);
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

    /// Over several namespaces, the store is stale from the first part that becomes stale until
    /// the last one is in step again, and each change is told once; a store that ended is stale
    /// for good.
    #[test]
    fn the_store_is_stale_from_its_first_stale_part_to_its_last() {
        let (writers, store) = Writer::<ConfigMap>::partitioned(
            Vec::new(),
            Vec::new(),
            vec![Some("a".into()), Some("b".into())],
            test_decode,
        );
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        assert_eq!(store.stale_since(), None);
        assert_eq!(writers[0].stale(at(1)), Some(at(1)), "the store became stale");
        assert_eq!(writers[1].stale(at(2)), None, "it already was");
        assert_eq!(writers[0].fresh(at(3)), None, "b is still stale");
        assert_eq!(store.stale_since(), Some(at(1)), "since the first");
        assert_eq!(writers[1].fresh(at(5)), Some(Duration::from_secs(4)));
        assert_eq!(store.stale_since(), None);
        assert_eq!(writers[1].fresh(at(6)), None, "told once");
        // A watcher that ended no longer follows the server (a store that never synced is only
        // not ready).
        store.set_ended(Error::Stopped);
        assert_eq!(store.stale_since(), None, "never synced");
        let mut out = Vec::new();
        let (mut w, synced) = Writer::<ConfigMap>::new();
        w.begin_init(&mut out);
        w.init_done(Some("1"), &mut out);
        synced.set_ended(Error::Stopped);
        assert!(synced.stale_since().is_some());
        assert_eq!(w.fresh(Instant::now()), None, "an ended store stays stale");
        assert!(synced.stale_since().is_some());
    }

    impl Writer<ConfigMap> {
        fn values(&self, obj: &ConfigMap) -> Values {
            self.index_values(obj)
        }
        fn init_apply_t(&mut self, obj: Arc<ConfigMap>, out: &mut Vec<Event<ConfigMap>>) {
            let values = self.values(&obj);
            self.init_apply(key(&obj), obj, None, values, out);
        }
        /// A whole relist of `objs`: `Init`, an `InitApply` each, `InitDone`; returns the
        /// number of objects it reported deleted.
        fn relist_t(&mut self, objs: &[Arc<ConfigMap>], out: &mut Vec<Event<ConfigMap>>) -> usize {
            self.begin_init(out);
            for obj in objs {
                self.init_apply_t(Arc::clone(obj), out);
            }
            self.init_done(None, out)
        }
        fn apply_t(&mut self, obj: Arc<ConfigMap>, out: &mut Vec<Event<ConfigMap>>) {
            let values = self.values(&obj);
            let old = self.apply(key(&obj), &obj, None, values);
            self.applied(old, obj, out);
        }
        fn delete_t(&mut self, obj: Arc<ConfigMap>, out: &mut Vec<Event<ConfigMap>>) {
            self.delete(&key(&obj), obj, out);
        }
    }

    fn key(obj: &ConfigMap) -> ObjectKey {
        ObjectKey::of(obj).unwrap()
    }

    #[test]
    fn compact_entries_decode_on_access_and_report_deletes() {
        let (mut w, store) = Writer::new();
        let mut out = Vec::new();
        let a = cm("a", "1");
        let encoded = Encoded::plain(
            a.metadata.uid.as_deref(),
            a.metadata.resource_version.as_deref(),
            &serde_json::to_vec(&*a).unwrap(),
        );
        w.begin_init(&mut out);
        let values = w.values(&a);
        w.init_apply(key(&a), Arc::clone(&a), Some(encoded), values, &mut out);
        w.init_done(None, &mut out);
        let got = store.get(&ObjectRef::new("a").within("ns")).unwrap();
        assert_eq!(*got, *a);
        assert!(!Arc::ptr_eq(&got, &a), "decoded from the compact entry");
        out.clear();
        w.begin_init(&mut out);
        w.init_done(None, &mut out);
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

    fn why() -> DecodeError {
        DecodeError { context: "watch".into(), line: Some(1), len: 3, message: "bad".into(), snippet: "abc".into() }
    }

    #[test]
    fn an_undecodable_version_is_reported_once_naming_the_object_and_what_the_store_does() {
        let (mut w, _store) = Writer::<ConfigMap>::new();
        let mut out = Vec::new();
        let e = w.undecodable(Seen::Changed, &skipped("a", "ua", "7"), why(), &mut out).map(|e| e.to_string());
        assert!(
            e.as_deref().is_some_and(|e| e.contains(
                "ns/a at resourceVersion 7 skipped (the store keeps its last version that decoded, if any): bad"
            )),
            "{e:?}"
        );
        assert!(w.undecodable(Seen::Changed, &skipped("a", "ua", "7"), why(), &mut out).is_none());
        // Deleting it needs no report; a nameless object is reported every time it is met.
        assert!(w.undecodable(Seen::Deleted, &skipped("a", "ua", "8"), why(), &mut out).is_none());
        let nameless = Skipped::default();
        for seen in [Seen::Listed, Seen::Changed, Seen::Deleted, Seen::Changed] {
            let e = w.undecodable(seen, &nameless, why(), &mut out).map(|e| e.to_string());
            assert!(
                e.as_deref().is_some_and(|e| e.contains("an object without metadata.name skipped (cannot be stored)"))
            );
        }
    }

    #[test]
    fn a_relist_keeps_the_last_decodable_version_of_an_undecodable_object() {
        let (mut w, store) = Writer::<ConfigMap>::new();
        let mut out = Vec::new();
        w.relist_t(&[cm("a", "ua"), cm("b", "ub")], &mut out);
        out.clear();
        // a no longer decodes (same uid), b was replaced by an incarnation that does not.
        w.begin_init(&mut out);
        assert!(w.init_skip(&skipped("a", "ua", "7"), &mut out), "first seen: report");
        assert!(w.init_skip(&skipped("b", "ub2", "8"), &mut out));
        assert_eq!(w.init_done(None, &mut out), 1);
        assert_eq!(kinds(&out), ["Init", "InitApply(a)", "InitDone", "Delete(b)"]);
        assert_eq!((store.len(), store.undecodable()), (1, 2));
        // The next relist meets the same versions: nothing to report, nothing deleted.
        out.clear();
        w.begin_init(&mut out);
        assert!(!w.init_skip(&skipped("a", "ua", "7"), &mut out), "reported once per version");
        assert!(!w.init_skip(&skipped("b", "ub2", "8"), &mut out));
        assert!(w.init_skip(&skipped("c", "uc", "9"), &mut out), "a new one is reported");
        assert_eq!(w.init_done(None, &mut out), 0);
        assert_eq!(kinds(&out), ["Init", "InitApply(a)", "InitDone"]);
        assert_eq!((store.len(), store.undecodable()), (1, 3));
        // A relist without them forgets them.
        out.clear();
        w.begin_init(&mut out);
        w.init_done(None, &mut out);
        assert_eq!(kinds(&out), ["Init", "InitDone", "Delete(a)"]);
        assert_eq!(store.undecodable(), 0);
    }

    #[test]
    fn a_watch_keeps_the_last_decodable_version_until_the_object_is_deleted_or_decodes() {
        let (mut w, store) = Writer::<ConfigMap>::new();
        let mut out = Vec::new();
        w.relist_t(&[cm("a", "ua"), cm("b", "ub")], &mut out);
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
        w.init_done(None, &mut out);
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
        w.init_done(None, &mut out);
        assert_eq!(store.len(), 1);
        assert!(store.is_ready());
        assert!(store.get(&ObjectRef::new("a").within("ns")).is_some());
    }

    #[test]
    fn objects_missing_from_a_relist_are_reported_deleted_after_init_done() {
        let (mut w, store) = Writer::new();
        let mut out = Vec::new();
        w.relist_t(&[cm("a", "1"), cm("b", "2")], &mut out);
        out.clear();
        w.relist_t(&[cm("a", "1")], &mut out);
        assert_eq!(kinds(&out), ["Init", "InitApply(a)", "InitDone", "Delete(b)"]);
        assert_eq!(store.len(), 1);
    }

    #[test]
    fn a_new_uid_under_a_known_name_is_a_delete_then_an_add() {
        let (mut w, _store) = Writer::new();
        let mut out = Vec::new();
        w.relist_t(&[cm("a", "1")], &mut out);
        out.clear();
        w.relist_t(&[cm("a", "2")], &mut out);
        assert_eq!(kinds(&out), ["Init", "Delete(a)", "InitApply(a)", "InitDone"]);
    }

    #[test]
    fn an_aborted_relist_leaves_the_store_untouched() {
        let (mut w, store) = Writer::new();
        let mut out = Vec::new();
        w.relist_t(&[cm("a", "1")], &mut out);
        w.begin_init(&mut out);
        w.init_apply_t(cm("b", "2"), &mut out);
        w.abort_init();
        assert_eq!(store.len(), 1);
        assert!(store.get(&ObjectRef::new("b").within("ns")).is_none());
        // A new consumer still hears of b, as the others did: the next relist reconciles it.
        assert_eq!(store.replay().events.len(), 4, "Init, InitApply(a), InitApply(b), InitDone");
    }

    #[test]
    fn objects_of_an_abandoned_relist_missing_from_the_next_are_reported_deleted() {
        let (mut w, _store) = Writer::new();
        let mut out = Vec::new();
        w.begin_init(&mut out);
        w.init_apply_t(cm("a", "1"), &mut out);
        w.abort_init();
        w.relist_t(&[cm("b", "2")], &mut out);
        assert_eq!(kinds(&out), ["Init", "InitApply(a)", "Init", "InitApply(b)", "InitDone", "Delete(a)"]);
        out.clear();
        w.relist_t(&[cm("b", "2")], &mut out);
        assert_eq!(kinds(&out), ["Init", "InitApply(b)", "InitDone"], "orphans are reported once");
    }

    /// An object delivered by an abandoned relist, then deleted and recreated
    /// under the same name before the next relist completes, is reported deleted by uid.
    #[test]
    fn an_incarnation_delivered_by_an_abandoned_relist_and_then_replaced_is_reported_deleted() {
        let (mut w, store) = Writer::new();
        let mut out = Vec::new();
        w.begin_init(&mut out);
        w.init_apply_t(cm("x", "old-uid"), &mut out);
        w.abort_init();
        w.relist_t(&[cm("x", "new-uid")], &mut out);
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
        w.relist_t(&[cm("x", "1")], &mut out);
        out.clear();
        w.begin_init(&mut out);
        w.init_apply_t(cm("x", "2"), &mut out);
        w.abort_init();
        w.relist_t(&[cm("x", "2")], &mut out);
        assert_eq!(kinds(&out), ["Init", "Delete(x)", "InitApply(x)", "Init", "InitApply(x)", "InitDone"]);
    }

    /// A new subscriber is brought to what the others believe: an abandoned relist's objects
    /// included, so the deletes that follow are about objects it knows.
    #[test]
    fn the_replay_shows_what_an_abandoned_relist_delivered() {
        let (mut w, store) = Writer::new();
        let mut out = Vec::new();
        w.relist_t(&[cm("a", "1")], &mut out);
        w.begin_init(&mut out);
        w.init_apply_t(cm("a", "2"), &mut out);
        w.init_apply_t(cm("b", "3"), &mut out);
        w.abort_init();
        let mut replay: Vec<String> = store
            .replay()
            .events
            .iter()
            .filter_map(|e| {
                e.object()
                    .map(|o| format!("{}:{}", o.metadata.name.as_deref().unwrap(), o.metadata.uid.as_deref().unwrap()))
            })
            .collect();
        replay.sort();
        assert_eq!(replay, ["a:2", "b:3"]);
    }

    /// A first list that was abandoned delivered its objects to the consumers there; one that
    /// subscribes before the next attempt completes is shown them too, since it gets the
    /// `Delete` of those that are gone with the others. The replay used to show nothing before
    /// the first sync: a `Delete` for an object it was never given.
    #[test]
    fn the_replay_before_the_first_sync_shows_what_an_abandoned_first_list_delivered() {
        let (mut w, store) = Writer::<ConfigMap>::new();
        let mut out = Vec::new();
        w.begin_init(&mut out);
        w.init_apply_t(cm("a", "1"), &mut out);
        w.init_apply_t(cm("b", "2"), &mut out);
        w.abort_init();
        w.begin_init(&mut out);
        w.init_apply_t(cm("a", "1"), &mut out);
        let replay = store.replay();
        let mut events = kinds(&replay.events);
        events[1..3].sort();
        assert_eq!(events, ["Init", "InitApply(a)", "InitApply(b)", "Init", "InitApply(a)"]);
        assert_eq!(replay.relisting, [(0, 1)]);
        out.clear();
        w.init_done(Some("5"), &mut out);
        assert_eq!(kinds(&out), ["InitDone", "Delete(b)"], "b, which the replay showed, is gone");
    }

    /// A subscriber that attaches while a relist is in progress, after the relist replaced an
    /// incarnation (whose `Delete` the others got then), is told of the replacement by its
    /// replay: every incarnation it was given still ends in exactly one `Delete` (tests/integration/model.rs
    /// found this with a late subscriber, seed 621 of 1000).
    #[test]
    fn the_replay_of_a_relist_in_progress_deletes_the_incarnations_it_replaced() {
        let (mut w, store) = Writer::new();
        let mut out = Vec::new();
        w.relist_t(&[cm("a", "1"), cm("b", "2")], &mut out);
        out.clear();
        w.begin_init(&mut out);
        w.init_apply_t(cm("a", "3"), &mut out);
        w.init_apply_t(cm("b", "2"), &mut out);
        assert_eq!(kinds(&out), ["Init", "Delete(a)", "InitApply(a)", "InitApply(b)"]);
        let uids = |events: &[Event<ConfigMap>]| -> Vec<String> {
            let uid = |o: &ConfigMap| {
                format!("{}:{}", o.metadata.name.as_deref().unwrap(), o.metadata.uid.as_deref().unwrap())
            };
            events
                .iter()
                .map(|e| match e {
                    Event::Init => "Init".to_owned(),
                    Event::InitDone => "InitDone".to_owned(),
                    Event::InitApply(o) => format!("InitApply({})", uid(o)),
                    Event::Apply(o) => format!("Apply({})", uid(o)),
                    Event::Delete(o) => format!("Delete({})", uid(o)),
                })
                .collect()
        };
        let mut replay = uids(&store.replay().events);
        // The order within each block is the map's.
        replay[1..3].sort();
        let rest = &mut replay[4..];
        let a = rest.iter().position(|e| e == "Delete(a:1)").unwrap();
        assert_eq!(rest.get(a + 1).map(String::as_str), Some("InitApply(a:3)"), "{rest:?}");
        rest.sort();
        assert_eq!(replay[..4], ["Init", "InitApply(a:1)", "InitApply(b:2)", "InitDone"]);
        assert_eq!(replay[4..], ["Delete(a:1)", "Init", "InitApply(a:3)", "InitApply(b:2)"]);
        // The relist ends without a second `Delete` of the replaced incarnation.
        out.clear();
        w.init_done(None, &mut out);
        assert_eq!(kinds(&out), ["InitDone"]);
    }

    /// A user index named "namespace" replaces the built-in one; a relist of
    /// one namespace must still remove that namespace's vanished objects.
    #[test]
    fn a_user_index_named_namespace_does_not_break_per_namespace_relists() {
        let by_name: IndexFn<ConfigMap> = Arc::new(|c: &ConfigMap| c.metadata.name.iter().cloned().collect());
        let (mut writers, store) = Writer::partitioned(
            vec![(NAMESPACE_INDEX.to_owned(), by_name)],
            Vec::new(),
            vec![Some("a".into()), Some("b".into())],
            test_decode,
        );
        let mut out = Vec::new();
        for (w, ns) in writers.iter_mut().zip(["a", "b"]) {
            w.relist_t(&[in_ns(ns, "x"), in_ns(ns, "y")], &mut out);
        }
        out.clear();
        assert_eq!(writers[0].relist_t(&[in_ns("a", "x")], &mut out), 1, "{:?}", kinds(&out));
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
        w.delete_t(cm("x", "3"), &mut out);
        let uids: Vec<String> = out
            .iter()
            .map(|e| match e {
                Event::Apply(o) => format!("Apply({})", o.metadata.uid.as_deref().unwrap()),
                Event::Delete(o) => format!("Delete({})", o.metadata.uid.as_deref().unwrap()),
                other => format!("{other:?}"),
            })
            .collect();
        // Uid 3 was never given to anyone: its `Delete` would be for an object never shown.
        assert_eq!(uids, ["Apply(1)", "Delete(1)", "Apply(2)", "Delete(2)"]);
    }

    /// A watch `DELETED` for an object the store does not hold (its `ADDED` was lost) tells
    /// nobody: no consumer was given it. It used to be reported as a `Delete`.
    #[test]
    fn a_delete_of_an_object_the_store_never_held_is_not_reported() {
        let (mut w, store) = Writer::new();
        let mut out = Vec::new();
        w.apply_t(cm("x", "1"), &mut out);
        out.clear();
        w.delete_t(cm("lost", "2"), &mut out);
        assert!(out.is_empty(), "{:?}", kinds(&out));
        assert_eq!(store.len(), 1);
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
        let (mut writers, store) =
            Writer::partitioned(vec![("tier".to_owned(), tier)], Vec::new(), vec![None], test_decode);
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
        w.delete_t(labelled("b", "2", "web"), &mut out);
        assert!(store.index("tier", "web").is_empty());
        assert_eq!(names(store.index("namespace", "ns")), ["a"]);
        assert!(store.index("unknown", "db").is_empty(), "an unknown index is empty");
    }

    /// The namespace index's value is read off the key when the key is new, not computed per
    /// event (`Values`): it must still follow every key in and out, through watch events and
    /// relists, beside a user index whose values do change.
    #[test]
    fn the_namespace_index_follows_keys_that_no_event_computes_it_for() {
        let (mut w, store) = Writer::<ConfigMap>::new();
        assert!(w.values(&cm("a", "1")).is_empty(), "no user index: nothing is computed");
        let (mut w2, store2) = tier_writer();
        assert_eq!(w2.values(&labelled("a", "1", "web")), [None, Some(vec!["web".to_owned()])]);
        let mut out = Vec::new();
        for (w, store) in [(&mut w, &store), (&mut w2, &store2)] {
            w.relist_t(&[labelled("a", "1", "web")], &mut out);
            w.apply_t(labelled("a", "1", "db"), &mut out);
            w.apply_t(labelled("b", "2", "web"), &mut out);
            assert_eq!(names(store.index("namespace", "ns")), ["a", "b"]);
            w.delete_t(labelled("a", "1", "db"), &mut out);
            assert_eq!(names(store.index("namespace", "ns")), ["b"]);
            w.apply_t(labelled("a", "3", "db"), &mut out);
            assert_eq!(names(store.index("namespace", "ns")), ["a", "b"], "a key back after its delete");
            w.relist_t(&[labelled("b", "2", "web"), labelled("c", "4", "web"), labelled("c", "4", "db")], &mut out);
            assert_eq!(names(store.index("namespace", "ns")), ["b", "c"], "a key listed twice, and one gone");
            assert_eq!(store.index_values("namespace"), [("ns".to_owned(), 2)]);
        }
        assert_eq!(names(store2.index("tier", "db")), ["c"]);
        assert_eq!(names(store2.index("tier", "web")), ["b"]);
    }

    #[test]
    fn a_relist_replaces_the_indexes_only_at_init_done() {
        let (mut w, store) = tier_writer();
        let mut out = Vec::new();
        w.relist_t(&[labelled("a", "1", "web"), labelled("b", "2", "web")], &mut out);
        w.begin_init(&mut out);
        w.init_apply_t(labelled("a", "1", "db"), &mut out);
        assert_eq!(names(store.index("tier", "web")), ["a", "b"], "the relist is invisible until InitDone");
        w.abort_init();
        w.relist_t(&[labelled("a", "1", "db")], &mut out);
        assert!(store.index("tier", "web").is_empty());
        assert_eq!(names(store.index("tier", "db")), ["a"]);
    }

    /// What `Indexer::unchanged` found, carried by the relist in progress.
    fn share_t(w: &mut Writer<ConfigMap>, obj: &ConfigMap, out: &mut Vec<Event<ConfigMap>>) -> usize {
        let (key, meta) = (ObjectKey::of(obj).unwrap(), obj.meta());
        let rv = meta.resource_version.as_deref().unwrap_or_default();
        let unchanged = w.indexer().unchanged(&key, meta.uid.as_deref().unwrap(), rv).expect("held unchanged");
        w.init_share(key, unchanged, out)
    }

    /// A relist carries unchanged entries over (the same object, its index values) without a
    /// copy in the relist; a key listed again after a change, or changed after being carried,
    /// ends where its last listing put it; an abandoned relist leaves consumers believing what
    /// it carried.
    #[test]
    fn a_relist_carries_unchanged_entries_over_with_their_index_values() {
        let (mut w, store) = tier_writer();
        let mut out = Vec::new();
        let with_rv = |o: Arc<ConfigMap>| {
            let mut o = (*o).clone();
            o.metadata.resource_version = Some("1".into());
            Arc::new(o)
        };
        let (a, b, c) = (with_rv(labelled("a", "1", "web")), with_rv(labelled("b", "2", "web")), with_rv(cm("c", "3")));
        w.relist_t(&[Arc::clone(&a), Arc::clone(&b), Arc::clone(&c)], &mut out);
        out.clear();
        w.begin_init(&mut out);
        assert_eq!(share_t(&mut w, &a, &mut out), 1);
        // b: carried, then listed changed; c: listed changed, then carried (a server repeating
        // keys): the last listing wins. d is new; nothing else of the old state is listed.
        share_t(&mut w, &b, &mut out);
        w.init_apply_t(labelled("b", "2", "db"), &mut out);
        w.init_apply_t(cm("c", "3"), &mut out);
        assert_eq!(share_t(&mut w, &c, &mut out), 3);
        w.init_apply_t(labelled("d", "4", "web"), &mut out);
        assert_eq!(names(store.index("tier", "web")), ["a", "b"], "the relist is invisible until InitDone");
        assert_eq!(w.init_done(None, &mut out), 0);
        assert_eq!(
            kinds(&out),
            [
                "Init",
                "InitApply(a)",
                "InitApply(b)",
                "InitApply(b)",
                "InitApply(c)",
                "InitApply(c)",
                "InitApply(d)",
                "InitDone"
            ]
        );
        let get = |n: &str| store.get(&ObjectRef::new(n).within("ns")).unwrap();
        assert!(Arc::ptr_eq(&get("a"), &a) && Arc::ptr_eq(&get("c"), &c), "carried over as they were");
        assert_eq!(names(store.index("tier", "web")), ["a", "d"]);
        assert_eq!(names(store.index("tier", "db")), ["b"]);
        assert_eq!(store.len(), 4);
        // An abandoned relist that carried a: the next one, without a, reports it deleted once.
        out.clear();
        w.begin_init(&mut out);
        share_t(&mut w, &a, &mut out);
        w.abort_init();
        assert_eq!(w.relist_t(&[labelled("b", "2", "db")], &mut out), 3);
        let deleted: Vec<_> = kinds(&out).into_iter().filter(|k| k.starts_with("Delete")).collect();
        assert_eq!(deleted.len(), 3, "a, c and d, once each: {deleted:?}");
        assert!(store.index("tier", "web").is_empty());
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
        w.delete_t(cm("a", "1"), &mut out);
        assert_ne!(g1, store.generation());
    }
}
