//! `Event<K>`: what the watcher delivers and the store applies, with the guarantees consumers get.

use std::sync::Arc;

/// A change seen by a [`Watcher`](crate::Watcher).
///
/// Objects are `Arc`s shared with the [`Store`](crate::Store): decoded once, never deep-copied.
///
/// # What a consumer may assume
/// - A (re)list arrives as `Init`, then one `InitApply` per object, then `InitDone`. The store
///   switches to the new state atomically at `InitDone`; until then it keeps the previous state.
/// - After `InitDone`, every object the store held before the relist that is no longer there is
///   reported as a `Delete` carrying its last known state. An object recreated under the same
///   name with a new uid is reported as a `Delete` of the old one before its `InitApply`. So a
///   consumer that only reads `Apply` and `Delete` (treating `InitApply` as `Apply`) misses no
///   deletion, even across outages.
/// - Those inferred deletes are marked by their place: they are exactly the `Delete`s between
///   an `InitDone` and the next `Init`, `Apply` or watch `Delete` — no tombstone type to unwrap.
///   Their number and the relist's reason are also in [`Notice::Synced`](crate::Notice::Synced)
///   and [`Stats`](crate::Stats) (`events.inferred_deletes`, `relists` by reason).
/// - `Delete` can also mean "no longer matches the selectors".
/// - A consumer gets a `Delete` only for an incarnation (uid) it was given (by `InitApply` or
///   `Apply`, or in the state a subscription starts with), and one for every such incarnation
///   that goes away. A watch `DELETED` for an object the store never held (its `ADDED` was lost
///   on the way) is therefore not reported.
/// - Between relists, `Apply` and `Delete` arrive in the server's order for each object.
#[derive(Debug)]
pub enum Event<K> {
    /// A (re)list starts; `InitApply` events follow, then `InitDone`.
    Init,
    /// An object of the list in progress.
    InitApply(Arc<K>),
    /// The (re)list is complete and the store now holds exactly its objects.
    InitDone,
    /// An object was added or modified.
    Apply(Arc<K>),
    /// An object was deleted (or stopped matching); its last known state.
    Delete(Arc<K>),
}

impl<K> Event<K> {
    /// The object carried by `InitApply`, `Apply` or `Delete`.
    #[must_use]
    pub fn object(&self) -> Option<&Arc<K>> {
        match self {
            Event::InitApply(o) | Event::Apply(o) | Event::Delete(o) => Some(o),
            Event::Init | Event::InitDone => None,
        }
    }
}

impl<K> Clone for Event<K> {
    fn clone(&self) -> Self {
        match self {
            Event::Init => Event::Init,
            Event::InitApply(o) => Event::InitApply(Arc::clone(o)),
            Event::InitDone => Event::InitDone,
            Event::Apply(o) => Event::Apply(Arc::clone(o)),
            Event::Delete(o) => Event::Delete(Arc::clone(o)),
        }
    }
}
