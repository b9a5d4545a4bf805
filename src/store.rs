//! `Writer<K>` applies events and swaps in a relist at `InitDone`; `Store<K>` is the cheap,
//! cloneable read side.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, RwLock};

use crate::error::{Error, Result};
use crate::event::Event;
use crate::key::{ObjectKey, ObjectRef};
use crate::resource::Watchable;

type Map<K> = HashMap<ObjectKey, Entry<K>>;

/// How the store holds one object.
pub(crate) enum Entry<K> {
    /// Decoded once and shared with the events (the default).
    Typed(Arc<K>),
    /// Compact JSON, decoded on access (compact store mode): a fraction of the memory.
    /// Invariant: `json` decoded as `K` when it was stored.
    Compact { json: Box<[u8]>, uid: Option<Box<str>> },
}

impl<K: Watchable> Entry<K> {
    /// What the store keeps for `obj`: the object itself, or its compact JSON when given.
    pub(crate) fn new(obj: &Arc<K>, json: Option<Box<[u8]>>) -> Entry<K> {
        match json {
            None => Entry::Typed(Arc::clone(obj)),
            Some(json) => Entry::Compact { json, uid: obj.meta().uid.as_deref().map(Into::into) },
        }
    }

    fn uid(&self) -> Option<&str> {
        match self {
            Entry::Typed(o) => o.meta().uid.as_deref(),
            Entry::Compact { uid, .. } => uid.as_deref(),
        }
    }

    /// The object; a compact entry is decoded (about as costly as decoding it off the wire).
    fn object(&self) -> Option<Arc<K>> {
        match self {
            Entry::Typed(o) => Some(Arc::clone(o)),
            Entry::Compact { json, .. } => {
                match crate::decode::object::<K>(json, &mut crate::decode::Scratch::default()) {
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
    /// Bumped on every change to the visible state; lets callers ask "anything new?" in O(1).
    generation: AtomicU64,
    readiness: Mutex<Readiness>,
    ready_changed: Condvar,
}

struct Objects<K> {
    /// What readers see.
    live: Map<K>,
    /// The relist in progress (between `Init` and `InitDone`); invisible to readers.
    pending: Option<Map<K>>,
}

#[derive(Default)]
struct Readiness {
    ready: bool,
    last_error: Option<Error>,
    /// Set when the watcher has ended; nothing will make the store ready any more.
    ended: Option<Error>,
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
        let objects = self.shared.objects.read();
        match objects.live.get(&key.key)? {
            // Clone the Arc to let go of the lock at once.
            Entry::Typed(o) => Some(Arc::clone(o)),
            Entry::Compact { json, uid } => {
                let entry = Entry::<K>::Compact { json: json.clone(), uid: uid.clone() };
                drop(objects); // decode outside the lock
                entry.object()
            }
        }
    }

    /// Every object in the store, in no particular order.
    ///
    /// In compact store mode every object is decoded: prefer [`get`](Self::get) for a few.
    #[must_use]
    pub fn state(&self) -> Vec<Arc<K>> {
        self.shared.objects.read().live.values().filter_map(Entry::object).collect()
    }

    /// The events that bring a new subscriber to the current state: `Init`, `InitApply` for each
    /// visible object, `InitDone`, then `Init` and the pending objects if a relist is in progress.
    /// Empty when nothing has been published yet.
    pub(crate) fn replay(&self) -> Vec<Event<K>> {
        let objects = self.shared.objects.read();
        let mut out = Vec::new();
        if self.shared.readiness.lock().ready {
            out.push(Event::Init);
            out.extend(objects.live.values().filter_map(Entry::object).map(Event::InitApply));
            out.push(Event::InitDone);
        }
        if let Some(pending) = &objects.pending {
            out.push(Event::Init);
            out.extend(pending.values().filter_map(Entry::object).map(Event::InitApply));
        }
        out
    }
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
    #[must_use]
    pub fn is_ready(&self) -> bool {
        self.shared.readiness.lock().ready
    }

    /// A counter that changes whenever the visible state changes; compare two readings to learn
    /// in O(1) whether anything happened in between.
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
            if r.ready {
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
            if timed_out && !r.ready {
                return Err(Error::NotReady { waited: timeout, last_error: r.last_error.clone().map(Box::new) });
            }
        }
    }
}

/// The write side, owned by the watcher thread. Each method applies one step and appends the
/// events consumers must see, in order, to `out`.
pub(crate) struct Writer<K> {
    shared: Arc<Shared<K>>,
    /// Objects delivered (`InitApply`) by relists that were then abandoned, since the last
    /// `InitDone`. A consumer may have applied them, so any that the next completed relist
    /// lacks must be reported deleted too.
    orphans: Map<K>,
}

impl<K: Watchable> Writer<K> {
    pub(crate) fn new() -> (Writer<K>, Store<K>) {
        let shared = Arc::new(Shared {
            objects: RwLock::new(Objects { live: HashMap::new(), pending: None }),
            generation: AtomicU64::new(0),
            readiness: Mutex::new(Readiness::default()),
            ready_changed: Condvar::new(),
        });
        (Writer { shared: Arc::clone(&shared), orphans: HashMap::new() }, Store { shared })
    }

    /// A relist starts. A relist already in progress is discarded.
    pub(crate) fn begin_init(&mut self, out: &mut Vec<Event<K>>) {
        self.abort_init();
        self.shared.objects.write().pending = Some(HashMap::new());
        out.push(Event::Init);
    }

    /// One object of the relist in progress.
    /// `json`: the object's compact JSON, to store instead of the object (compact store mode).
    pub(crate) fn init_apply(&mut self, obj: Arc<K>, json: Option<Box<[u8]>>, out: &mut Vec<Event<K>>) {
        let Some(key) = ObjectKey::of(&*obj) else { return };
        let mut objects = self.shared.objects.write();
        // A new incarnation (new uid) under a known name is a delete of the old one first.
        if let Some(old) = objects.live.get(&key)
            && old.uid().is_some()
            && old.uid() != obj.meta().uid.as_deref()
            && objects.pending.as_ref().is_some_and(|p| !p.contains_key(&key))
            && let Some(old) = old.object()
        {
            out.push(Event::Delete(old));
        }
        match objects.pending.as_mut() {
            Some(pending) => {
                pending.insert(key, Entry::new(&obj, json));
            }
            None => log::error!("bug: InitApply outside a relist for {key}; ignored"),
        }
        out.push(Event::InitApply(obj));
    }

    /// The relist is complete: swap it in, then report what vanished.
    pub(crate) fn init_done(&mut self, out: &mut Vec<Event<K>>) {
        let old = {
            let mut objects = self.shared.objects.write();
            let Some(new) = objects.pending.take() else {
                log::error!("bug: InitDone outside a relist; ignored");
                return;
            };
            std::mem::replace(&mut objects.live, new)
        };
        self.shared.generation.fetch_add(1, Ordering::AcqRel);
        out.push(Event::InitDone);
        // Keys gone from the new state were deleted while we were not watching; so were those
        // that only an abandoned relist delivered.
        let objects = self.shared.objects.read();
        let mut gone = old;
        for (key, entry) in self.orphans.drain() {
            gone.entry(key).or_insert(entry);
        }
        for (key, entry) in gone {
            if !objects.live.contains_key(&key)
                && let Some(obj) = entry.object()
            {
                out.push(Event::Delete(obj));
            }
        }
        drop(objects);
        let mut r = self.shared.readiness.lock();
        if !r.ready {
            r.ready = true;
            self.shared.ready_changed.notify_all();
        }
    }

    /// The relist in progress failed; forget it (the next one starts with `Init` again).
    pub(crate) fn abort_init(&mut self) {
        let abandoned = self.shared.objects.write().pending.take();
        self.orphans.extend(abandoned.into_iter().flatten());
    }

    /// An object was added or modified.
    pub(crate) fn apply(&mut self, obj: Arc<K>, json: Option<Box<[u8]>>, out: &mut Vec<Event<K>>) {
        let Some(key) = ObjectKey::of(&*obj) else { return };
        let entry = Entry::new(&obj, json);
        // The replaced entry is dropped after the lock is released.
        let _old = self.shared.objects.write().live.insert(key, entry);
        self.shared.generation.fetch_add(1, Ordering::AcqRel);
        out.push(Event::Apply(obj));
    }

    /// An object was deleted; `obj` is its last state as the server sent it.
    pub(crate) fn delete(&mut self, obj: Arc<K>, out: &mut Vec<Event<K>>) {
        if let Some(key) = ObjectKey::of(&*obj) {
            let _old = self.shared.objects.write().live.remove(&key);
            self.shared.generation.fetch_add(1, Ordering::AcqRel);
        }
        out.push(Event::Delete(obj));
    }

    /// Records the latest error, for `wait_until_ready` to explain itself.
    pub(crate) fn set_last_error(&self, e: &Error) {
        self.shared.readiness.lock().last_error = Some(e.clone());
    }

    /// The watcher has ended: wake anyone waiting for readiness with `reason`.
    pub(crate) fn set_ended(&self, reason: Error) {
        let mut r = self.shared.readiness.lock();
        r.ended = Some(reason);
        self.shared.ready_changed.notify_all();
    }

    pub(crate) fn store(&self) -> Store<K> {
        Store { shared: Arc::clone(&self.shared) }
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

    impl Writer<ConfigMap> {
        fn init_apply_t(&mut self, obj: Arc<ConfigMap>, out: &mut Vec<Event<ConfigMap>>) {
            self.init_apply(obj, None, out);
        }
        fn apply_t(&mut self, obj: Arc<ConfigMap>, out: &mut Vec<Event<ConfigMap>>) {
            self.apply(obj, None, out);
        }
    }

    #[test]
    fn compact_entries_decode_on_access_and_report_deletes() {
        let (mut w, store) = Writer::new();
        let mut out = Vec::new();
        let a = cm("a", "1");
        let json = serde_json::to_vec(&*a).unwrap().into_boxed_slice();
        w.begin_init(&mut out);
        w.init_apply(Arc::clone(&a), Some(json), &mut out);
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
        assert!(store.replay().len() == 3, "replay is Init, InitApply(a), InitDone");
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
        w.set_ended(Error::Stopped);
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
