//! The undecodable-object policy: what the store does with an object that does not decode as
//! `K`, whether consumers are told, and how the error that tells them reads (see [`Skipped`]).

use std::sync::atomic::Ordering;

use super::{Writer, same_incarnation};
use crate::cache::entry::Entry;
use crate::cache::index::{index_insert, index_remove};
use crate::error::{DecodeError, Error};
use crate::event::Event;
use crate::key::ObjectKey;
use crate::resource::Watchable;

/// An object that does not decode as `K`, known by its metadata alone.
///
/// The policy for such objects, the same in paged lists, streaming lists, watches and drift
/// checks: the store keeps the last version of the same incarnation that did decode (or
/// nothing, if none did), consumers are told once per resourceVersion (an `Err` naming the
/// object), [`Stats::undecodable`](crate::Stats::undecodable) counts them, and they are
/// never taken for deletions or drift: a `Delete` comes only when the server deletes or
/// replaces the object. An object without a name cannot be stored: reported each time.
///
/// The engine only carries such objects here ([`Writer::undecodable`]): this file decides what
/// the store does, whether consumers are told, and how the error that tells them reads (the
/// writer's relists carry its bookkeeping from one relist to the next: `Writer::init_done`).
#[derive(Debug, Clone, Default)]
pub(crate) struct Skipped {
    pub(crate) key: Option<ObjectKey>,
    pub(crate) uid: Option<String>,
    pub(crate) rv: Option<String>,
}

/// Where an object that does not decode as `K` was met.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Seen {
    /// In the relist in progress (a list item, or a streaming list's initial event).
    Listed,
    /// In a watch event that added or modified it.
    Changed,
    /// In a watch event that deleted it.
    Deleted,
}

impl Skipped {
    /// The error that reports it: `error` (why it does not decode), prefixed with the object
    /// and what the store does about it.
    fn report(&self, mut error: DecodeError) -> Error {
        let what = match (&self.key, &self.rv) {
            (None, _) => "an object without metadata.name".to_owned(),
            (Some(k), Some(rv)) => format!("{k} at resourceVersion {rv}"),
            (Some(k), None) => k.to_string(),
        };
        let action = if self.key.is_some() {
            "the store keeps its last version that decoded, if any"
        } else {
            "cannot be stored"
        };
        error.message = format!("{what} skipped ({action}): {}", error.message);
        Error::Decode(Box::new(error))
    }
}

impl<K: Watchable> Writer<K> {
    /// An object that does not decode as `K` (`error` says why), met where `seen` says: applies
    /// the policy ([`Skipped`]) and returns the error to report, if consumers are to be told.
    pub(crate) fn undecodable(
        &mut self,
        seen: Seen,
        s: &Skipped,
        error: DecodeError,
        out: &mut Vec<Event<K>>,
    ) -> Option<Error> {
        let new = match seen {
            Seen::Listed => self.init_skip(s, out),
            Seen::Changed => self.skip(s, out),
            Seen::Deleted => {
                self.delete_skipped(s, out);
                // Deleting what is stored needs no report; a nameless object is reported
                // each time.
                s.key.is_none()
            }
        };
        new.then(|| s.report(error))
    }

    /// An object of the relist in progress that does not decode as `K`. The store keeps the
    /// version consumers know of the same incarnation, if any (delivered again as `InitApply`,
    /// as the relist's state includes it); another incarnation is reported deleted at
    /// `InitDone`, as the server no longer has it. Returns whether this version is new to
    /// consumers: the caller reports it then, and only then.
    pub(super) fn init_skip(&mut self, s: &Skipped, out: &mut Vec<Event<K>>) -> bool {
        let Some(key) = &s.key else { return true };
        let kept = self
            .shared
            .objects
            .read()
            .believed(self.part, key)
            .filter(|old| same_incarnation(old.uid(), s.uid.as_deref()))
            .map(Entry::share);
        // Decoding a compact entry and the index functions run outside the lock.
        if let Some((entry, obj)) = kept.and_then(|e| e.object(self.shared.decode).map(|o| (e, o))) {
            let values = self.index_values(&obj);
            let mut objects = self.shared.objects.write();
            if let Some(relist) = objects.pending[self.part].as_mut() {
                relist.carried.remove(key);
                index_insert(&mut relist.indexes, key, values);
                relist.map.insert(key.clone(), entry);
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
    pub(super) fn skip(&mut self, s: &Skipped, out: &mut Vec<Event<K>>) -> bool {
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
        out.extend(gone.as_ref().and_then(|e| e.object(self.shared.decode)).map(Event::Delete));
        self.skipped.insert(key.clone(), s.rv.as_deref().unwrap_or_default().into());
        self.count_skipped();
        self.first_report(key, s)
    }

    /// A watch event deleted an object whose last version does not decode as `K`: the
    /// version the store holds, if any, is reported deleted.
    pub(super) fn delete_skipped(&mut self, s: &Skipped, out: &mut Vec<Event<K>>) {
        let Some(key) = &s.key else { return };
        self.forget_skipped(key);
        let mut objects = self.shared.objects.write();
        index_remove(&mut objects.live_index, key);
        let gone = objects.live.remove(key);
        if gone.is_some() {
            self.shared.generation.fetch_add(1, Ordering::AcqRel);
        }
        drop(objects);
        out.extend(gone.as_ref().and_then(|e| e.object(self.shared.decode)).map(Event::Delete));
    }

    /// A decodable version of `key` arrived, or it was deleted: it is no longer skipped.
    pub(super) fn forget_skipped(&mut self, key: &ObjectKey) {
        // Nearly always nothing is skipped: spare the hot path two lookups.
        if self.skipped.is_empty() && self.reported.is_empty() {
            return;
        }
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
    pub(super) fn count_skipped(&mut self) {
        let now = self.skipped.len();
        let before = std::mem::replace(&mut self.counted, now);
        if now >= before {
            self.shared.undecodable.fetch_add(now - before, Ordering::AcqRel);
        } else {
            self.shared.undecodable.fetch_sub(before - now, Ordering::AcqRel);
        }
    }
}
