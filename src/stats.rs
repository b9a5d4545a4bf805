//! `Stats`: counters a watcher keeps about its own work, readable at any time.

use std::time::Duration;

/// A snapshot of a watcher's counters (see [`Watcher::stats`](crate::Watcher::stats)).
///
/// Plain data: every field is public and counts from the watcher's start.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// List requests made (one per page).
    pub lists: u64,
    /// Watch requests made (streaming lists included).
    pub watches: u64,
    /// Full syncs started, the first one included.
    pub relists: u64,
    /// `Apply` and `Delete` events applied from watches.
    pub events: u64,
    /// Bookmarks received.
    pub bookmarks: u64,
    /// Bytes of watch lines read.
    pub bytes: u64,
    /// Errors reported (each is also delivered on the channel).
    pub errors: u64,
    /// The last error reported, as its message.
    pub last_error: Option<String>,
    /// Total time spent waiting in backoff.
    pub backoff_time: Duration,
    /// Objects in the store after the last full sync.
    pub objects: usize,
    /// Events waiting in the channel for the consumer.
    pub queued: usize,
}
