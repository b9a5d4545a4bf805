//! `Stats`: counters a watcher keeps about its own work, readable at any time (the engine's
//! `Counters` write them).

use std::time::Duration;

/// A snapshot of a watcher's counters (see [`Watcher::stats`](crate::Watcher::stats)).
///
/// Plain data: every field is public and counts from the watcher's start.
///
/// ```
/// # let server = kube_watcher::testing::FakeApiServer::start();
/// use std::time::Duration;
/// use kube_watcher::{Api, Client, Config, Watcher};
/// use k8s_openapi::api::core::v1::Pod;
///
/// let watcher = Watcher::new(Api::<Pod>::all(Client::from_url(&server.url())?), Config::default())?;
/// watcher.store().wait_until_ready(Duration::from_secs(30))?;
/// let stats = watcher.stats();
/// assert_eq!(stats.relists.initial, 1);
/// assert_eq!(stats.errors.total(), 0);
/// # Ok::<(), kube_watcher::Error>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// List requests made (one per page).
    pub lists: u64,
    /// Watch requests made (streaming lists included).
    pub watches: u64,
    /// Full syncs started, by reason.
    pub relists: RelistCounts,
    /// Watch events received, by type.
    pub events: EventCounts,
    /// Errors reported (each is also delivered on the channel), by class.
    pub errors: ErrorCounts,
    /// The last error reported, as its message.
    pub last_error: Option<String>,
    /// Bytes of list bodies and watch lines read (after decompression).
    pub bytes: u64,
    /// Total time spent waiting in backoff.
    pub backoff_time: Duration,
    /// How long ago the last watch event or bookmark arrived; `None` before the first.
    pub last_event_age: Option<Duration>,
    /// Drift checks made (see [`Config::drift_check`](crate::Config::drift_check)).
    pub drift_checks: u64,
    /// Objects in the store now.
    pub objects: usize,
    /// Objects on the server now that do not decode as the watched type. Each undecodable
    /// version is reported once on the channel (and counted in `errors.decode`); the store
    /// keeps the object's last version that decoded, if any, and never takes one of these
    /// for a deletion.
    pub undecodable: usize,
    /// Events waiting in the channels for their consumers, all subscribers together.
    pub queued: usize,
    /// Events dropped for consumers that fell behind with the lag policy
    /// ([`SlowConsumer::Lag`](crate::SlowConsumer::Lag)); each drop is announced by a lag marker.
    pub lagged: u64,
    /// Consumers attached now: the watcher's own channel once used, plus live subscriptions.
    pub subscribers: usize,
    /// The encoding of the last list or watch answer the watcher read: protobuf for a built-in
    /// type, or for a metadata-only watcher of any type, on a server that speaks it (the
    /// default), JSON for full custom resources, `DynamicObject`, a server that answers JSON or
    /// refused protobuf, or [`WireFormat::Json`](crate::WireFormat::Json). A watcher's drift
    /// checks (metadata-only lists) do not count for a watcher of full objects. `None` before
    /// the first answer.
    pub wire_format: Option<crate::WireFormat>,
    /// For a watcher of one shard ([`Config::shard`](crate::Config::shard)), who dropped the
    /// objects of other shards, as the last list told: [`ShardFilter::Server`](crate::ShardFilter::Server)
    /// when the list answered with the shard's selector in `metadata.shardInfo`,
    /// [`ShardFilter::Client`](crate::ShardFilter::Client) when a list of full objects had
    /// none (the server sent everything; the watcher dropped the others before decoding them).
    /// A streaming list carries no list metadata, and kube-apiserver leaves `shardInfo` out of
    /// every metadata-only list: before the first of either the watcher asks with a list of at
    /// most one full object, and an object of another shard arriving in the stream or among
    /// the metadata says `Client`. `None` for a watcher of every object, and until the answer
    /// is known (it is once the first sync completes).
    pub shard_filter: Option<crate::ShardFilter>,
    /// For a watcher of one shard ([`Config::shard`](crate::Config::shard)) or of a shard
    /// group's share ([`Config::shard_group`](crate::Config::shard_group)), the shard its store
    /// holds in full: the one of its last complete sync (of every part's, for a watcher over
    /// several namespaces, when they agree). `None` before that sync, for a watcher of every
    /// object, and once a group gives its member no share (the store is then empty).
    ///
    /// A shard group member's store has caught up with its share when
    /// `watcher.stats().synced_shard == group.shard()`: after a change of share the store
    /// still holds the old one (and the events of the relist are on their way) until the relist
    /// with the new one completes (`Notice::Synced` with
    /// [`RelistReason::ShardChanged`](crate::RelistReason::ShardChanged)). It is set before
    /// that sync's `Notice::Synced` and `Event::InitDone` go out, so a consumer may read it
    /// when either arrives.
    pub synced_shard: Option<crate::Shard>,
    /// Delivery's work so far, in steps (decisions, and events put into or taken out of the
    /// hold-back queue): tests check that it grows by a constant per event, however far behind
    /// a consumer is. Hidden, outside semver: only with the `fuzzing` feature.
    #[cfg(feature = "fuzzing")]
    #[doc(hidden)]
    pub delivery_work: u64,
}

/// Full syncs (relists) by reason; see [`RelistReason`](crate::RelistReason).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RelistCounts {
    /// The first sync.
    pub initial: u64,
    /// A resourceVersion or continue token expired (410 Gone).
    pub expired: u64,
    /// The server had not reached a requested resourceVersion.
    pub too_large: u64,
    /// A streaming list was rejected or ignored and a paged list replaced it.
    pub streaming_fallback: u64,
    /// `Config::relist_interval` came due.
    pub periodic: u64,
    /// A drift check found the store out of step with the server.
    pub drift: u64,
    /// An error the watch could not resume from.
    pub error: u64,
    /// The shard of a watcher following a shard group changed.
    pub shard_changed: u64,
}

impl RelistCounts {
    /// All relists, whatever the reason.
    #[must_use]
    pub fn total(&self) -> u64 {
        self.initial
            + self.expired
            + self.too_large
            + self.streaming_fallback
            + self.periodic
            + self.drift
            + self.error
            + self.shard_changed
    }
}

/// Watch events by type. `Apply`/`Delete` events that came from lists are not counted here.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct EventCounts {
    /// `ADDED` events.
    pub added: u64,
    /// `MODIFIED` events.
    pub modified: u64,
    /// `DELETED` events.
    pub deleted: u64,
    /// `BOOKMARK` events.
    pub bookmarks: u64,
    /// `Delete`s inferred after a relist: objects that vanished while the watch was down.
    pub inferred_deletes: u64,
    /// `Apply` events applied to the store but not delivered, because no predicate saw a change.
    pub filtered: u64,
}

/// Errors by class.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ErrorCounts {
    /// No answer: connect, TLS, reset or dead connection, truncated body.
    pub transport: u64,
    /// 429 Too Many Requests.
    pub throttled: u64,
    /// 5xx answers.
    pub server: u64,
    /// Other non-success answers and in-stream `ERROR` events (401, 403, 404, 422, ...).
    pub client: u64,
    /// Undecodable list items, watch lines and bodies.
    pub decode: u64,
}

impl ErrorCounts {
    /// All errors, whatever the class.
    #[must_use]
    pub fn total(&self) -> u64 {
        self.transport + self.throttled + self.server + self.client + self.decode
    }
}
