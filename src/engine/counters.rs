//! The lock-free counters the watcher threads write, and their snapshot as public [`Stats`].

use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::error::Error;
use crate::notice::RelistReason;
use crate::shard::{Shard, ShardFilter};
use crate::stats::{ErrorCounts, EventCounts, RelistCounts, Stats};

/// The watcher thread's counters: plain atomics, so counting never takes a lock.
pub(crate) struct Counters {
    start: Instant,
    pub(crate) lists: AtomicU64,
    pub(crate) watches: AtomicU64,
    relists: [AtomicU64; 8],
    pub(crate) added: AtomicU64,
    pub(crate) modified: AtomicU64,
    pub(crate) deleted: AtomicU64,
    pub(crate) bookmarks: AtomicU64,
    pub(crate) inferred_deletes: AtomicU64,
    pub(crate) filtered: AtomicU64,
    errors: [AtomicU64; 5],
    pub(crate) bytes: AtomicU64,
    backoff_nanos: AtomicU64,
    /// Nanoseconds after `start` of the last event, plus one; 0 = none yet.
    last_event: AtomicU64,
    pub(crate) drift_checks: AtomicU64,
    last_error: Mutex<Option<String>>,
    /// Who filters the shard's objects: 0 not known yet (or no shard), 1 the server, 2 this
    /// client (see `Counters::shard_filter`).
    shard_filter: AtomicU8,
    /// Per part of the store (one per namespace of a `namespaces(..)` watcher): the shard of
    /// its last complete sync (`Some(None)`: synced without one); `None` before its first.
    synced: Mutex<Vec<Option<Option<Shard>>>>,
}

impl Default for Counters {
    fn default() -> Self {
        Counters {
            start: Instant::now(),
            lists: AtomicU64::new(0),
            watches: AtomicU64::new(0),
            relists: Default::default(),
            added: AtomicU64::new(0),
            modified: AtomicU64::new(0),
            deleted: AtomicU64::new(0),
            bookmarks: AtomicU64::new(0),
            inferred_deletes: AtomicU64::new(0),
            filtered: AtomicU64::new(0),
            errors: Default::default(),
            bytes: AtomicU64::new(0),
            backoff_nanos: AtomicU64::new(0),
            last_event: AtomicU64::new(0),
            drift_checks: AtomicU64::new(0),
            last_error: Mutex::new(None),
            shard_filter: AtomicU8::new(0),
            synced: Mutex::new(Vec::new()),
        }
    }
}

/// Adds `n` to a counter (the watcher thread is the only writer of most counters; relaxed
/// ordering is enough for numbers read as a snapshot).
pub(crate) fn add(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}

fn get(counter: &AtomicU64) -> u64 {
    counter.load(Ordering::Relaxed)
}

impl Counters {
    pub(crate) fn relist(&self, reason: RelistReason) {
        let i = match reason {
            RelistReason::Initial => 0,
            RelistReason::Expired => 1,
            RelistReason::TooLarge => 2,
            RelistReason::StreamingFallback => 3,
            RelistReason::Periodic => 4,
            RelistReason::Drift => 5,
            RelistReason::Error => 6,
            RelistReason::ShardChanged => 7,
        };
        add(&self.relists[i], 1);
    }

    pub(crate) fn error(&self, e: &Error) {
        let i = match e {
            Error::Api(a) if a.code == 429 => 1,
            Error::Api(a) if a.code >= 500 => 2,
            Error::Api(_) => 3,
            Error::Decode(_) => 4,
            _ => 0,
        };
        add(&self.errors[i], 1);
        *self.last_error.lock() = Some(e.to_string());
    }

    pub(crate) fn backoff(&self, d: Duration) {
        add(&self.backoff_nanos, u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    }

    /// Records who filtered the last list of a sharded watcher; true when that changed (the
    /// first time, or a server that started or stopped filtering), for a notice.
    pub(crate) fn shard_filter(&self, by: ShardFilter) -> bool {
        let code = match by {
            ShardFilter::Server => 1,
            ShardFilter::Client => 2,
        };
        self.shard_filter.swap(code, Ordering::Relaxed) != code
    }

    /// Who filters the shard, as last recorded.
    pub(crate) fn snapshot_shard_filter(&self) -> Option<ShardFilter> {
        match self.shard_filter.load(Ordering::Relaxed) {
            1 => Some(ShardFilter::Server),
            2 => Some(ShardFilter::Client),
            _ => None,
        }
    }

    /// Counters for a watcher whose store has `parts` parts (`Stats::synced_shard`).
    pub(crate) fn with_parts(self, parts: usize) -> Self {
        *self.synced.lock() = vec![None; parts];
        self
    }

    /// Part `part` of the store completed a sync with `shard` (`None`: without one).
    pub(crate) fn synced(&self, part: usize, shard: Option<&Shard>) {
        if let Some(slot) = self.synced.lock().get_mut(part) {
            *slot = Some(shard.cloned());
        }
    }

    /// The shard every part of the store last synced with, when they agree.
    fn snapshot_synced_shard(&self) -> Option<Shard> {
        let synced = self.synced.lock();
        match synced.split_first() {
            Some((first @ Some(Some(shard)), rest)) if rest.iter().all(|p| p == first) => Some(shard.clone()),
            _ => None,
        }
    }

    pub(crate) fn event_seen(&self, now: Instant) {
        let nanos = u64::try_from(now.saturating_duration_since(self.start).as_nanos()).unwrap_or(u64::MAX - 1);
        self.last_event.store(nanos + 1, Ordering::Relaxed);
    }

    /// The counters as plain data; the caller fills in what the counters do not hold (the
    /// store's and the consumers' figures).
    pub(crate) fn snapshot(&self) -> Stats {
        let r = |i: usize| get(&self.relists[i]);
        let e = |i: usize| get(&self.errors[i]);
        let last_event_age = match get(&self.last_event) {
            0 => None,
            n => Some(self.start.elapsed().saturating_sub(Duration::from_nanos(n - 1))),
        };
        Stats {
            lists: get(&self.lists),
            watches: get(&self.watches),
            relists: RelistCounts {
                initial: r(0),
                expired: r(1),
                too_large: r(2),
                streaming_fallback: r(3),
                periodic: r(4),
                drift: r(5),
                error: r(6),
                shard_changed: r(7),
            },
            events: EventCounts {
                added: get(&self.added),
                modified: get(&self.modified),
                deleted: get(&self.deleted),
                bookmarks: get(&self.bookmarks),
                inferred_deletes: get(&self.inferred_deletes),
                filtered: get(&self.filtered),
            },
            errors: ErrorCounts { transport: e(0), throttled: e(1), server: e(2), client: e(3), decode: e(4) },
            last_error: self.last_error.lock().clone(),
            bytes: get(&self.bytes),
            backoff_time: Duration::from_nanos(get(&self.backoff_nanos)),
            last_event_age,
            drift_checks: get(&self.drift_checks),
            objects: 0,
            undecodable: 0,
            queued: 0,
            lagged: 0,
            subscribers: 0,
            #[cfg(feature = "fuzzing")]
            delivery_work: 0,
            wire_format: None,
            shard_filter: self.snapshot_shard_filter(),
            synced_shard: self.snapshot_synced_shard(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_are_counted_by_class() {
        let c = Counters::default();
        c.error(&Error::transport("watch", "reset"));
        c.error(&Error::Api(Box::new(crate::error::ApiError { code: 429, ..Default::default() })));
        c.error(&Error::Api(Box::new(crate::error::ApiError { code: 503, ..Default::default() })));
        c.error(&Error::Api(Box::new(crate::error::ApiError { code: 403, ..Default::default() })));
        let s = c.snapshot();
        assert_eq!((s.errors.transport, s.errors.throttled, s.errors.server, s.errors.client), (1, 1, 1, 1));
        assert_eq!(s.errors.total(), 4);
        assert!(s.last_error.is_some_and(|m| m.contains("403") || !m.is_empty()));
    }

    #[test]
    fn relists_are_counted_by_reason_and_ages_measured() {
        let c = Counters::default();
        c.relist(RelistReason::Initial);
        c.relist(RelistReason::Expired);
        c.relist(RelistReason::Expired);
        assert_eq!(c.snapshot().last_event_age, None);
        c.event_seen(Instant::now());
        let s = c.snapshot();
        assert_eq!((s.relists.initial, s.relists.expired, s.relists.total()), (1, 2, 3));
        assert!(s.last_event_age.is_some_and(|a| a < Duration::from_secs(60)));
    }
}
