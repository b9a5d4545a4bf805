//! When another process's Lease expires in this process's eyes: its lease duration after this
//! process first saw it as it is now, on this process's monotonic clock. Remote times are never
//! compared, only changes count (docs/protocol.md §13.2). A deletion is a change too, seen
//! when this process first finds the Lease missing: whoever wrote it last may have renewed it
//! after this process last read it, and lead (or hold its share) until its renew deadline,
//! and the deletion hides that write (§13.5). The one rule for the elector's decision
//! (`decide.rs`) and for a shard group member's view of its peers (`handover.rs`).

use std::time::{Duration, Instant};

/// A Lease record as this process last saw it, and when it first saw it as it is; or, once
/// the Lease is gone, its last record and when this process first found it missing.
#[derive(Debug, Clone, PartialEq, Hash)]
pub(crate) struct Seen<T> {
    pub(crate) record: T,
    /// When this process first saw `record` as it is, or the Lease missing (its monotonic
    /// clock): the start of the lease duration in its eyes.
    pub(crate) since: Instant,
    /// The Lease was deleted: `record` is the last one seen, and writes this process never
    /// saw may have followed it.
    pub(crate) gone: bool,
}

impl<T> Seen<T> {
    /// `record` as read at `now`, after `before`: seen since `before`'s time when `same` says it
    /// did not change, else since `now`. A later time is the safe direction (it makes the
    /// record live longer), so a record that comes back unchanged (a list or a watch behind
    /// another read) keeps the time it was first seen; one that comes back after it was found
    /// missing is new.
    pub(crate) fn next(before: Option<Seen<T>>, record: T, now: Instant, same: impl FnOnce(&T, &T) -> bool) -> Seen<T> {
        let since = match before {
            Some(before) if !before.gone && same(&before.record, &record) => before.since,
            _ => now,
        };
        Seen { record, since, gone: false }
    }

    /// The Lease found missing at `now`, after `before`: gone since the first time it was
    /// found missing. Nothing when it was never seen: this process cannot know of it.
    pub(crate) fn gone(before: Option<Seen<T>>, now: Instant) -> Option<Seen<T>> {
        before.map(|seen| if seen.gone { seen } else { Seen { since: now, gone: true, ..seen } })
    }

    /// The lease duration to wait out: the record's own (`stated`); for a Lease gone, at
    /// least `own` too, which stands for the duration of a holder this process never saw (one
    /// that took the Lease after its last read; replicas of one program share their timings).
    pub(crate) fn duration(&self, stated: Duration, own: Duration) -> Duration {
        if self.gone { stated.max(own) } else { stated }
    }

    /// When the lease expires in our eyes, after `duration` (`None`: beyond the clock's
    /// range, never).
    pub(crate) fn expiry(&self, duration: Duration) -> Option<Instant> {
        self.since.checked_add(duration)
    }

    /// Whether the lease is live at `now`: changed (or found gone), in our eyes, less than
    /// `duration` ago.
    pub(crate) fn live(&self, duration: Duration, now: Instant) -> bool {
        self.expiry(duration).is_none_or(|end| now < end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_is_live_for_its_duration_from_its_last_change_or_its_deletion() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let same = |a: &&str, b: &&str| a == b;
        let seen = Seen::next(None, "v1", t0, same);
        let seen = Seen::next(Some(seen), "v1", t0 + s(10), same);
        assert_eq!(seen.since, t0, "unchanged: seen since it first was");
        assert!(seen.live(s(15), t0 + s(14)) && !seen.live(s(15), t0 + s(15)));
        let changed = Seen::next(Some(seen.clone()), "v2", t0 + s(12), same);
        assert_eq!(changed.since, t0 + s(12));
        // Deleted: a change, seen when first found missing, whether it had expired or not.
        let gone = Seen::gone(Some(seen.clone()), t0 + s(20)).unwrap();
        assert_eq!((gone.since, gone.gone, gone.record), (t0 + s(20), true, "v1"));
        assert_eq!(Seen::gone(Some(gone.clone()), t0 + s(25)), Some(gone.clone()), "still since the first 404");
        assert_eq!(gone.duration(s(1), s(15)), s(15), "a holder we never saw has our duration");
        assert_eq!(seen.duration(s(1), s(15)), s(1));
        assert_eq!(Seen::<&str>::gone(None, t0), None, "never seen: unknown");
        // Back after it was gone: new.
        assert_eq!(Seen::next(Some(gone), "v1", t0 + s(30), same).since, t0 + s(30));
    }
}
