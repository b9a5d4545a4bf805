//! `Config`: what a watcher selects, how it lists and watches, and how it recovers.

use std::time::Duration;

use crate::error::{Error, Result};
use crate::shard::Shard;

/// Default page size: client-go's pager uses 500
/// (`k8s.io/client-go/tools/pager`, `defaultPageSize = 500`).
pub(crate) const DEFAULT_PAGE_SIZE: u32 = 500;

/// Default server-side watch timeout range, in seconds: a random value in `[60, 90)`.
///
/// A healthy quiet watch sends no bytes until the server ends it at this timeout, so the stall
/// detector cannot fire earlier than the timeout. Keeping it near a minute lets a stalled
/// connection be found within two minutes (timeout + [`STALL_MARGIN`] < 120 s); a restart resumes
/// from the last resourceVersion, one cheap request. (client-go picks 5–10 min and relies on
/// HTTP/2 pings, which HTTP/1.1 does not have.)
pub(crate) const DEFAULT_TIMEOUT_SECS: (u64, u64) = (60, 90);

/// Extra silence tolerated after the server's watch timeout before the connection is declared dead.
pub(crate) const STALL_MARGIN: Duration = Duration::from_secs(30);

/// Default bound on one watch line (one event): 16 MiB. kube-apiserver objects are at most about
/// 1.5 MiB in etcd; their JSON can be larger, so leave ample room.
pub(crate) const DEFAULT_MAX_LINE: usize = 16 << 20;

/// Default bound on one list page body after decompression: 1 GiB. A watch-cache list ignores
/// `limit` (RV=0), so a "page" can be the whole collection; items are decoded one at a time, so
/// this bounds bytes read, not memory held.
pub(crate) const DEFAULT_MAX_LIST_BYTES: u64 = 1 << 30;

/// Upper bound on the watch timeout and the stall timeout: 24 h. Both become deadlines on the
/// worker thread (and ureq's per-read timer, which panics on an `Instant` overflow); a watch
/// timeout beyond a day would also leave a dead connection unnoticed for that long.
pub(crate) const MAX_TIMEOUT: Duration = Duration::from_secs(24 * 60 * 60);

/// How the initial and recovery lists choose their `resourceVersion`.
///
/// See the Kubernetes docs on
/// [resource version semantics](https://kubernetes.io/docs/reference/using-api/api-concepts/#resource-versions).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ListSemantic {
    /// A consistent read of the newest state (`resourceVersion` unset). Costs the server more,
    /// never goes back in time. The default.
    #[default]
    MostRecent,
    /// Whatever the server has cached (`resourceVersion=0`): cheap, possibly stale, and the
    /// watch cache ignores `limit` (the whole collection comes in one page).
    Any,
}

/// How a watcher fetches the state it starts from (and the state of every relist), as kube-rs
/// names it (`kube::runtime::watcher::InitialListStrategy`). Set with
/// [`Config::initial_list_strategy`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum InitialListStrategy {
    /// Paged lists ([`Config::page_size`] objects a request, `limit` and `continue`), then a
    /// watch from the list's resourceVersion.
    ListWatch,
    /// One watch with `sendInitialEvents=true` that sends the current state as `ADDED` events,
    /// ends it with a bookmark and goes on with the live events, as client-go's informers ask
    /// by default since v0.35. The default. A server that refuses it, fails it or ignores it is
    /// remembered as not supporting it, and the watcher uses [`ListWatch`](Self::ListWatch)
    /// from then on (see [`Config::initial_list_strategy`]).
    #[default]
    StreamingList,
}

/// Exponential backoff with full jitter, used between failed attempts.
///
/// The delay before attempt `n` (from 0) is a uniformly random duration in
/// `[0, min(max, initial × factor^n)]`. After `reset_after` without failures it starts over.
/// The defaults are client-go's reflector values: 0.8 s, ×2, capped at 30 s, reset after 2 min.
///
/// Two failures do not wait their turn (docs/protocol.md §6.10). A connection the server's
/// host refuses (nothing listens: the server is restarting) is retried within `initial`,
/// whatever `n` is, and does not raise it: a server that comes back is found at once. And the
/// relist after a 410 Gone goes out at once, after an outage too; only a 410 that repeats with
/// no watch taking hold in between waits.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backoff {
    /// First (largest possible) delay. Defaults to 800 ms.
    pub initial: Duration,
    /// Growth factor per consecutive failure. Defaults to 2.0.
    pub factor: f64,
    /// Cap on any delay. Defaults to 30 s.
    pub max: Duration,
    /// A healthy period this long resets the delay to `initial`. Defaults to 120 s.
    pub reset_after: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            initial: Duration::from_millis(800),
            factor: 2.0,
            max: Duration::from_secs(30),
            reset_after: Duration::from_secs(120),
        }
    }
}

/// What a watcher watches and how: selectors, paging, timeouts, recovery.
///
/// Plain data with by-value builder methods; every default is documented on its setter.
/// Values are validated when the watcher starts.
///
/// **Coming from kube-rs:** this is the counterpart of `kube::runtime::watcher::Config` (label
/// and field selectors, page size, list semantic, streaming lists, bookmarks), not of
/// `kube::Config`. Where to connect and with which credentials (kube-rs's `kube::Config`,
/// `kube::Client`) is [`Client`](crate::Client) here: [`Client::try_default`](crate::Client::try_default)
/// for what `Client::try_default().await` does, [`Client::from_kubeconfig`](crate::Client::from_kubeconfig)
/// with [`KubeconfigOptions`](crate::KubeconfigOptions) for `Config::from_kubeconfig`. The
/// other names migrate as they are: `docs/comparison.md` has the list.
///
/// ```
/// use std::time::Duration;
/// use kube_watcher::Config;
///
/// let config = Config::default()
///     .labels("app=web,tier in (front,edge)")
///     .page_size(200)
///     .timeout(Duration::from_secs(120));
/// # let _ = config;
/// ```
#[derive(Debug, Clone, PartialEq)]
#[must_use]
pub struct Config {
    pub(crate) label_selector: Option<String>,
    pub(crate) field_selector: Option<String>,
    /// `None`: jittered in [`DEFAULT_TIMEOUT_SECS`] for every watch.
    pub(crate) timeout: Option<Duration>,
    pub(crate) page_size: u32,
    pub(crate) list_semantic: ListSemantic,
    /// `None`: the default, a streaming list, or paged lists for a watcher that decodes list
    /// items on helper threads (`WatcherBuilder::parallel_sync`).
    pub(crate) initial_list: Option<InitialListStrategy>,
    pub(crate) bookmarks: bool,
    pub(crate) backoff: Backoff,
    pub(crate) relist_interval: Option<Duration>,
    pub(crate) drift_check: Option<Duration>,
    /// `None`: the watch timeout plus [`STALL_MARGIN`].
    pub(crate) stall_timeout: Option<Duration>,
    pub(crate) max_retries: Option<u32>,
    pub(crate) max_line: usize,
    /// How long a streaming list may go without its end marker before we conclude the server
    /// ignores `sendInitialEvents` and fall back to list + watch.
    pub(crate) streaming_marker_timeout: Duration,
    pub(crate) wire_format: WireFormat,
    /// Only this shard's objects (`None`: all).
    pub(crate) shard: Option<Shard>,
    /// The shard group whose share the watcher follows (`Config::shard_group`, in
    /// `lease/group.rs`); it overrides `shard`.
    pub(crate) follow: Option<crate::shard::FollowHandle>,
}

/// The encoding a watcher asks the API server for ([`Config::wire_format`]).
///
/// With [`WireFormat::Protobuf`], the default, lists, gets and watches of a built-in
/// (k8s-openapi) type ask for `application/vnd.kubernetes.protobuf` with JSON as the fallback
/// in the same `Accept` header, and decode whichever the server answers (docs/protocol.md,
/// section 12): objects are read straight into their types, as from JSON, and every guarantee
/// holds the same (the compact and compressed store modes keep the protobuf bytes as they
/// came). Metadata-only requests ([`metadata_watcher`](crate::metadata_watcher),
/// [`Api::into_metadata`](crate::Api::into_metadata), and the drift checks of
/// [`Config::drift_check`]) ask for it too, for every type, custom resources included, as
/// client-go's metadata client does: `PartialObjectMetadata` is a `meta.k8s.io` type, which
/// the server writes in protobuf whatever the resource. JSON is used for full custom resources,
/// [`DynamicObject`](crate::DynamicObject), and after a server refused protobuf (406 or 415:
/// remembered, not asked again). [`Stats::wire_format`](crate::Stats::wire_format) says which
/// one a watcher is reading.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum WireFormat {
    /// JSON (`application/json`) for every request.
    Json,
    /// Protobuf (`application/vnd.kubernetes.protobuf`) where the type has a protobuf form and
    /// the server offers it, JSON otherwise (see the type's documentation).
    #[default]
    Protobuf,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            label_selector: None,
            field_selector: None,
            timeout: None,
            page_size: DEFAULT_PAGE_SIZE,
            list_semantic: ListSemantic::MostRecent,
            initial_list: None,
            bookmarks: true,
            backoff: Backoff::default(),
            relist_interval: None,
            drift_check: None,
            stall_timeout: None,
            max_retries: None,
            max_line: DEFAULT_MAX_LINE,
            streaming_marker_timeout: Duration::from_secs(10),
            wire_format: WireFormat::default(),
            shard: None,
            follow: None,
        }
    }
}

impl Config {
    /// Only watch objects whose labels match this selector (`app=web,tier!=db,env in (a,b)`).
    ///
    /// Defaults to none: every object.
    pub fn labels(mut self, selector: &str) -> Self {
        self.label_selector = Some(selector.to_owned());
        self
    }

    /// Only watch objects whose fields match this selector (`metadata.name=web`,
    /// `spec.nodeName=node-1` for pods). Defaults to none.
    pub fn fields(mut self, selector: &str) -> Self {
        self.field_selector = Some(selector.to_owned());
        self
    }

    /// The server-side watch timeout (`timeoutSeconds`, sent in whole seconds, at least 1).
    ///
    /// The server ends a healthy watch after this long and the watcher re-watches from the last
    /// resourceVersion (no relist). Defaults to a random value in [60 s, 90 s) per watch, so that
    /// a stalled connection is detected within two minutes and many watchers do not reconnect
    /// in step.
    ///
    /// Must be between 1 s and 24 h (a longer one would leave a dead connection unnoticed for
    /// as long); [`Watcher::new`](crate::Watcher::new) refuses others with [`Error::Config`].
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Items per list page (`limit`). Defaults to 500, client-go's page size. `0` disables paging.
    pub fn page_size(mut self, page_size: u32) -> Self {
        self.page_size = page_size;
        self
    }

    /// How lists choose their resourceVersion. Defaults to [`ListSemantic::MostRecent`].
    pub fn list_semantic(mut self, semantic: ListSemantic) -> Self {
        self.list_semantic = semantic;
        self
    }

    /// Shorthand for `list_semantic(ListSemantic::Any)`: list from the server's cache.
    pub fn any_semantic(self) -> Self {
        self.list_semantic(ListSemantic::Any)
    }

    /// How the watcher fetches the state it starts from, and that of every relist. Defaults to
    /// [`InitialListStrategy::StreamingList`]: one watch with `sendInitialEvents=true` instead
    /// of a list per page, as client-go's informers ask by default since v0.35; a watcher that
    /// decodes list items on helper threads
    /// ([`WatcherBuilder::parallel_sync`](crate::WatcherBuilder::parallel_sync)) lists in pages
    /// by default instead, since its helpers decode the items of pages (a streaming list's
    /// events are decoded on the watcher thread).
    ///
    /// Against kube-apiserver a streaming list syncs faster: one request instead of one per page
    /// (0.67–0.70× the time for 10k pods: docs/performance.md, "Streaming lists against paged
    /// lists, and against client-go", and "The defaults"). The server's `WatchList` gate is on by
    /// default in Kubernetes 1.32 and from 1.34 on.
    ///
    /// Where the server does not stream, the watcher falls back to paged lists
    /// ([`InitialListStrategy::ListWatch`]) and remembers it for its lifetime, without probing
    /// again: a server with the gate off (1.27 to 1.31, 1.33) refuses the request and the
    /// watcher lists in pages at once, as after a failed streaming list; one that ignores the
    /// parameter (older than 1.27, or a proxy or aggregated API that drops it) is found out by
    /// the first event a streaming list never sends before its end marker, or else by
    /// [`streaming_marker_timeout`](Self::streaming_marker_timeout) (10 s) of silence, which
    /// delays that watcher's first sync once. Against such servers
    /// `initial_list_strategy(InitialListStrategy::ListWatch)` saves that wait.
    ///
    /// ```
    /// use kube_watcher::{Config, InitialListStrategy};
    ///
    /// // Pages of 500, as before streaming lists were the default.
    /// let config = Config::default().initial_list_strategy(InitialListStrategy::ListWatch);
    /// # let _ = config;
    /// ```
    pub fn initial_list_strategy(mut self, strategy: InitialListStrategy) -> Self {
        self.initial_list = Some(strategy);
        self
    }

    /// Shorthand for `initial_list_strategy(InitialListStrategy::StreamingList)`, the default:
    /// fetch the initial state with a streaming list (`sendInitialEvents=true`) rather than
    /// paged lists (see [`initial_list_strategy`](Self::initial_list_strategy)). Said
    /// explicitly, it holds with `parallel_sync` too.
    pub fn streaming_lists(self) -> Self {
        self.initial_list_strategy(InitialListStrategy::StreamingList)
    }

    /// Do not ask for bookmarks (`allowWatchBookmarks`). Bookmarks are on by default: they keep
    /// the resume resourceVersion fresh so a restart rarely needs a relist.
    ///
    /// Streaming lists need bookmarks (the end marker is one), so this also turns them off.
    pub fn disable_bookmarks(mut self) -> Self {
        self.bookmarks = false;
        self
    }

    /// How long to wait between failed attempts. Defaults to [`Backoff::default`].
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// Relist everything this often even when the watch is healthy, reconciling the store with
    /// the server (objects missing from the new list are reported deleted). Defaults to never.
    pub fn relist_interval(mut self, interval: Duration) -> Self {
        self.relist_interval = Some(interval);
        self
    }

    /// Every `interval`, check that the store still matches the server, and relist only if it
    /// does not: a cheap alternative to [`relist_interval`](Self::relist_interval) against lost
    /// events (a buggy proxy, a server bug). Defaults to never.
    ///
    /// The check is one metadata-only list (`PartialObjectMetadata`, served from the API
    /// server's watch cache with `resourceVersionMatch=NotOlderThan` the store's own
    /// resourceVersion, in protobuf unless [`wire_format`](Self::wire_format) says JSON),
    /// compared with the store by key and resourceVersion; no object bodies
    /// cross the wire and only keys and versions are held. Differences explained by changes newer than the store
    /// are not drift; how far the store has come is its last event or bookmark, or, when newer,
    /// the last check's list version once a watch opened after that check ended cleanly (so a
    /// quiet namespace without bookmarks is judged too). A mismatch relists with [`RelistReason::Drift`](crate::RelistReason::Drift);
    /// every check is counted in [`Stats::drift_checks`](crate::Stats::drift_checks) and announced
    /// by [`Notice::DriftChecked`](crate::Notice::DriftChecked). It runs between two watches,
    /// so the watch timeout is shortened to let it run on time.
    pub fn drift_check(mut self, interval: Duration) -> Self {
        self.drift_check = Some(interval);
        self
    }

    /// Declare a connection dead after this long without a byte from the server.
    ///
    /// Defaults to the watch timeout plus 30 s. It must exceed the watch timeout: a healthy watch
    /// may be silent until the server ends it.
    pub fn stall_timeout(mut self, timeout: Duration) -> Self {
        self.stall_timeout = Some(timeout);
        self
    }

    /// The longest watch line or list item accepted, in bytes: one object, as JSON. Defaults to
    /// 16 MiB (the API server's own limit on an object is about 1.5 MiB in etcd, more for
    /// custom resources on other storage). A longer line is reported as a decode error and the
    /// watcher relists; a longer list item fails that list. Between 1 KiB and 1 GiB.
    pub fn max_line(mut self, bytes: usize) -> Self {
        self.max_line = bytes;
        self
    }

    /// How long a streaming list ([`initial_list_strategy`](Self::initial_list_strategy)) may go without a
    /// byte before its end-of-initial-events marker, before the watcher concludes that the
    /// server ignores streaming lists and falls back to paged lists for good. Defaults to 10 s;
    /// between 1 s and 1 h.
    pub fn streaming_marker_timeout(mut self, timeout: Duration) -> Self {
        self.streaming_marker_timeout = timeout;
        self
    }

    /// The encoding to ask the API server for. Defaults to [`WireFormat::Protobuf`], where the
    /// type and the server offer it, JSON otherwise (see [`WireFormat`]).
    pub fn wire_format(mut self, format: WireFormat) -> Self {
        self.wire_format = format;
        self
    }

    /// End the watcher with a terminal [`Error::GaveUp`] after this many consecutive failures
    /// without progress. Defaults to retrying forever.
    ///
    /// Refused connections (nothing listens: the server is restarting) are retried sooner than
    /// the backoff's step but count only as often as it would have retried, so the limit
    /// gives a restarting server as long as any other failing one (docs/protocol.md §6.10).
    pub fn max_retries(mut self, retries: u32) -> Self {
        self.max_retries = Some(retries);
        self
    }

    /// List and watch only the objects of `shard` (see [`Shard`]): the store and the events
    /// hold those objects and no other.
    ///
    /// Every list and watch sends the shard's selector (`shardSelector`). A server with sharded
    /// lists and watches (Kubernetes 1.36 and later, feature gate `ShardedListAndWatch`) sends
    /// only the shard's objects; any other server sends all of them, and the watcher drops
    /// the others itself, reading only their uid (or namespace) off their bytes, before
    /// decoding. [`Stats::shard_filter`](crate::Stats::shard_filter) says which happened, and a
    /// [`Notice::ShardFilter`](crate::Notice::ShardFilter) says it once. Either way an object
    /// of another shard never reaches the store or a consumer.
    ///
    /// ```
    /// use kube_watcher::{Config, Shard};
    ///
    /// // Replica 2 of 3 of a StatefulSet: its ordinal is the shard.
    /// let config = Config::default().shard(Shard::of(2, 3)?);
    /// # let _ = config;
    /// # Ok::<(), kube_watcher::Error>(())
    /// ```
    ///
    /// Defaults to none: every object.
    pub fn shard(mut self, shard: Shard) -> Self {
        self.shard = Some(shard);
        self
    }

    /// Checks the values once, when the watcher is built; the error names the field.
    pub(crate) fn validate(&self) -> Result<()> {
        let b = &self.backoff;
        if b.initial.is_zero() {
            return Err(Error::config("backoff.initial", "must be greater than zero"));
        }
        if !(b.factor.is_finite() && b.factor >= 1.0) {
            return Err(Error::config("backoff.factor", format!("must be at least 1.0, got {}", b.factor)));
        }
        if b.max < b.initial {
            return Err(Error::config("backoff.max", "must be at least backoff.initial"));
        }
        if !(1 << 10..=1 << 30).contains(&self.max_line) {
            return Err(Error::config(
                "max_line",
                format!("must be between 1 KiB and 1 GiB, got {} bytes", self.max_line),
            ));
        }
        if !(Duration::from_secs(1)..=Duration::from_secs(3600)).contains(&self.streaming_marker_timeout) {
            return Err(Error::config(
                "streaming_marker_timeout",
                format!("must be between 1 s and 1 h, got {:?}", self.streaming_marker_timeout),
            ));
        }
        if let Some(t) = self.timeout
            && !(Duration::from_secs(1)..=MAX_TIMEOUT).contains(&t)
        {
            return Err(Error::config("timeout", format!("must be between 1 s and 24 h, got {t:?}")));
        }
        if let Some(stall) = self.stall_timeout
            && stall > MAX_TIMEOUT.saturating_add(STALL_MARGIN)
        {
            return Err(Error::config("stall_timeout", format!("must be at most 24 h 30 s, got {stall:?}")));
        }
        if let (Some(stall), Some(timeout)) = (self.stall_timeout, self.timeout)
            && stall <= timeout
        {
            return Err(Error::config(
                "stall_timeout",
                format!(
                    "must exceed the watch timeout ({timeout:?}), got {stall:?}: a healthy quiet watch is silent until then"
                ),
            ));
        }
        if let Some(stall) = self.stall_timeout
            && self.timeout.is_none()
            && stall <= Duration::from_secs(DEFAULT_TIMEOUT_SECS.1)
        {
            return Err(Error::config(
                "stall_timeout",
                format!(
                    "must exceed the default watch timeout (up to {} s), got {stall:?}; set timeout() too",
                    DEFAULT_TIMEOUT_SECS.1
                ),
            ));
        }
        if let Some(r) = self.relist_interval
            && r < Duration::from_secs(1)
        {
            return Err(Error::config("relist_interval", format!("must be at least 1 s, got {r:?}")));
        }
        if let Some(d) = self.drift_check
            && d < Duration::from_secs(1)
        {
            return Err(Error::config("drift_check", format!("must be at least 1 s, got {d:?}")));
        }
        for (field, sel) in [("labels", &self.label_selector), ("fields", &self.field_selector)] {
            if let Some(s) = sel
                && s.chars().any(char::is_control)
            {
                return Err(Error::config(field, "selector contains a control character"));
            }
        }
        Ok(())
    }

    /// Streaming lists need bookmarks: the end of the initial state is a bookmark.
    pub(crate) fn wants_streaming(&self) -> bool {
        self.initial_list.unwrap_or_default() == InitialListStrategy::StreamingList && self.bookmarks
    }

    /// A watcher that decodes list items on helper threads lists in pages unless its
    /// configuration chose otherwise (see [`Config::initial_list_strategy`]).
    pub(crate) fn paged_unless_chosen(mut self) -> Self {
        self.initial_list.get_or_insert(InitialListStrategy::ListWatch);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_config_is_valid() {
        Config::default().validate().unwrap();
    }

    #[test]
    fn stall_timeout_must_exceed_watch_timeout() {
        let err = Config::default()
            .timeout(Duration::from_secs(60))
            .stall_timeout(Duration::from_secs(30))
            .validate()
            .unwrap_err();
        assert!(err.to_string().contains("stall_timeout"), "{err}");
    }

    #[test]
    fn bad_backoff_names_the_field() {
        let err = Config::default().backoff(Backoff { factor: 0.5, ..Backoff::default() }).validate().unwrap_err();
        assert!(err.to_string().contains("backoff.factor"), "{err}");
    }

    #[test]
    fn durations_that_would_overflow_a_deadline_are_refused_by_name() {
        let err = Config::default().timeout(Duration::MAX).validate().unwrap_err();
        assert!(err.to_string().contains("timeout: must be between 1 s and 24 h"), "{err}");
        let err = Config::default().stall_timeout(Duration::MAX).validate().unwrap_err();
        assert!(err.to_string().contains("stall_timeout: must be at most"), "{err}");
        // Intervals mean "this rarely": any length is accepted (the machine saturates them).
        let err = Config::default().max_line(100).validate().unwrap_err();
        assert!(err.to_string().contains("max_line"), "{err}");
        let err = Config::default().streaming_marker_timeout(Duration::ZERO).validate().unwrap_err();
        assert!(err.to_string().contains("streaming_marker_timeout"), "{err}");
        Config::default().max_line(1 << 20).streaming_marker_timeout(Duration::from_secs(30)).validate().unwrap();
        Config::default().relist_interval(Duration::MAX).drift_check(Duration::MAX).validate().unwrap();
        Config::default()
            .backoff(Backoff { max: Duration::MAX, reset_after: Duration::MAX, ..Backoff::default() })
            .validate()
            .unwrap();
    }

    #[test]
    fn disabling_bookmarks_disables_streaming_lists() {
        assert!(Config::default().streaming_lists().wants_streaming());
        assert!(!Config::default().streaming_lists().disable_bookmarks().wants_streaming());
    }

    #[test]
    fn streaming_lists_are_the_default_and_list_watch_turns_them_off() {
        assert!(Config::default().wants_streaming());
        let paged = Config::default().initial_list_strategy(InitialListStrategy::ListWatch);
        assert!(!paged.wants_streaming());
        assert!(paged.streaming_lists().wants_streaming());
        assert!(!Config::default().paged_unless_chosen().wants_streaming());
        assert!(Config::default().streaming_lists().paged_unless_chosen().wants_streaming());
    }
}
