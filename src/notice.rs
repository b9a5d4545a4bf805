//! What a watcher tells besides events: why it relists ([`RelistReason`]), changes in its health
//! ([`Notice`]), and what it does with a consumer that falls behind ([`SlowConsumer`]).

use std::time::{Duration, Instant};

use crate::error::Error;

/// Why a full sync (relist) happens: logged, counted in [`Stats::relists`](crate::Stats::relists)
/// and announced by [`Notice::Relisting`](crate::Notice::Relisting).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RelistReason {
    /// The watcher's first sync.
    Initial,
    /// The resume resourceVersion or a continue token expired (410 Gone).
    Expired,
    /// The server had not reached the requested resourceVersion ("too large").
    TooLarge,
    /// A streaming list was rejected or ignored; a paged list replaces it.
    StreamingFallback,
    /// `Config::relist_interval` came due.
    Periodic,
    /// A drift check (`Config::drift_check`) found the store out of step with the server.
    Drift,
    /// An error that the watch cannot resume from (4xx, in-stream error, a broken watch line).
    Error,
    /// The watcher's shard changed (`Config::shard_group`): the relist lists the new shard;
    /// objects that left it arrive as `Delete` at its end, objects of a grown range as
    /// `InitApply`.
    ShardChanged,
}

/// What the watcher does when a consumer's channel is full.
///
/// ```
/// # let server = kube_watcher::testing::FakeApiServer::start();
/// use kube_watcher::{Api, Client, Config, Error, SlowConsumer, Watcher};
/// use k8s_openapi::api::core::v1::Pod;
///
/// let watcher = Watcher::new(Api::<Pod>::all(Client::from_url(&server.url())?), Config::default())?;
/// let dashboard = watcher.subscribe_with(SlowConsumer::Lag); // never holds the watcher up
/// for event in dashboard.try_iter() {
///     if let Err(Error::Lagged { .. }) = event {
///         let _all = watcher.store().state(); // fell behind: catch up from the store
///     }
/// }
/// # Ok::<(), kube_watcher::Error>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum SlowConsumer {
    /// Wait until the consumer makes room (backpressure): nothing is ever lost, and the
    /// watcher, its store and every other consumer wait for the slowest one. The default.
    #[default]
    Block,
    /// Never wait: an event that does not fit in the channel is dropped, and one
    /// [`Error::Lagged`] marker is queued after the last event that fitted. Events that arrive
    /// while the marker is still queued are dropped too; once the consumer has received the
    /// marker, events flow again. The store stays exact, so a consumer that reads the store
    /// after the marker has the effect of every event it missed.
    ///
    /// One exception is handled for you: the events of a relist in progress reach the store
    /// only when the relist completes, so catching up from the store during a relist misses
    /// them (those dropped, and those received before the marker). Such a consumer gets a
    /// second marker right after that relist's `InitDone`, and catching up again then is
    /// exact. The rule, per relist (a watcher over several namespaces relists each on its own,
    /// and an abandoned relist's next attempt counts as the same relist): a marker that goes
    /// out between its `Init` and its `InitDone`, when the consumer had received or dropped
    /// any of its events, owes a second marker after its `InitDone`, unless the first one is
    /// still unread when that `InitDone` is dropped behind it (then reading it covers the
    /// relist). This holds as well for a subscription that starts in the middle of a relist,
    /// the watcher's own channel first read during the first list included. The second
    /// marker's `dropped` counts the relist's events the catching up missed.
    ///
    /// A dropped subscription is forgotten at the next event, and its queue is freed at once.
    Lag,
}

/// A change in a watcher's health: for logs, dashboards and status lines
/// (see [`Watcher::notices`](crate::Watcher::notices)).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Notice {
    /// A request succeeded: the first one, and the first after each [`Notice::Reconnecting`].
    ///
    /// It says that the server answers, not that the store is in step with it again: after an
    /// outage the server may answer that the watcher's resourceVersion is gone, and a relist
    /// follows. [`Notice::Fresh`] says when the store is in step again.
    Connected,
    /// A request failed or a connection dropped; the watcher tries again after `delay`.
    Reconnecting {
        /// What went wrong (also delivered on the event channel).
        error: Error,
        /// The backoff before the next attempt.
        delay: Duration,
    },
    /// A full sync (relist) starts.
    Relisting {
        /// Why.
        reason: RelistReason,
    },
    /// A full sync completed: the store now holds `objects` objects.
    Synced {
        /// Why the sync happened.
        reason: RelistReason,
        /// Objects in the store.
        objects: usize,
        /// Objects that vanished while the watcher was not watching, each reported as an
        /// inferred `Delete` right after `InitDone`.
        inferred_deletes: usize,
    },
    /// A drift check compared the store with the server.
    DriftChecked {
        /// Objects found out of step (0: in step; otherwise a relist follows).
        mismatched: usize,
    },
    /// A consumer with [`SlowConsumer::Lag`] fell behind and caught up again: `dropped` events
    /// were dropped meanwhile (sent when the consumer has received its marker and the next
    /// event arrives).
    Lagged {
        /// How many events were dropped.
        dropped: u64,
    },
    /// A watcher of one shard ([`Config::shard`](crate::Config::shard)) learned who drops the
    /// objects of other shards (see [`Stats::shard_filter`](crate::Stats::shard_filter)): sent
    /// once, after the first list, and again only if that changes.
    ShardFilter {
        /// The server, or this watcher.
        by: crate::ShardFilter,
    },
    /// The store, in step with the server until now, is stale: the watcher lost its watch
    /// (a dropped connection, a failed request, an error or a 410 Gone from the server), or a
    /// drift check found the store out of step. It keeps serving the state it had; changes on
    /// the server since then are not in it. [`Store::stale_since`](crate::Store::stale_since)
    /// says the same at any time; [`Notice::Fresh`] follows when the store is in step again.
    /// The rule, in full: docs/guide.md, "Stale and fresh".
    Stale {
        /// When the store became stale (for a reader that reads notices late).
        since: Instant,
    },
    /// The stale store is in step with the server again: a relist completed, or a watch
    /// resumed from the store's resourceVersion took hold (it delivered an event, or the
    /// server kept it to its deadline, two seconds for such a watch). Follows each
    /// [`Notice::Stale`].
    Fresh {
        /// How long the store was stale.
        stale_for: Duration,
    },
    /// The watcher ended with a terminal error (for instance [`Error::GaveUp`]).
    GaveUp {
        /// The terminal error.
        error: Error,
    },
}
