//! The public face: `Watcher<K>` (recv/try_recv/recv_timeout/iter, receiver(), subscribe(),
//! notices(), store(), stats(), stop() and Drop), its builder, and `watch_object`. It holds a
//! running [`Engine`] and never reaches past it.

mod builder;
pub(crate) mod object;

pub use builder::WatcherBuilder;

use std::fmt;
use std::sync::OnceLock;
use std::time::Duration;

use crossbeam_channel::{Receiver, RecvTimeoutError, TryRecvError};

use crate::cache::Store;
use crate::config::Config;
use crate::engine::Engine;
use crate::engine::delivery::Item;
use crate::error::Result;
use crate::event::Event;
use crate::notice::{Notice, SlowConsumer};
use crate::resource::{PartialObjectMetadata, Watchable};
use crate::stats::Stats;
use crate::wire::api::Api;

/// Watches one resource type in a background thread, keeping a [`Store`] current and
/// delivering [`Event`]s.
///
/// The thread starts in [`Watcher::new`] and lists, watches, resumes and relists on its own,
/// with backoff on errors. Read events with the crossbeam-style methods ([`recv`](Self::recv),
/// [`try_recv`](Self::try_recv), [`recv_timeout`](Self::recv_timeout), [`iter`](Self::iter) or
/// `for event in &watcher`), or [`receiver`](Self::receiver) for `select!`; read the cache with
/// [`store`](Self::store).
///
/// Events are only queued once a consumer has called one of those methods; it then first gets
/// the current state as `Init`, `InitApply`…, `InitDone`. A watcher used only through its store
/// buffers nothing. When the consumer is slower than the server, the channel (1024 events by
/// default) fills and the watcher waits for it: backpressure, never lost events (or, with
/// [`WatcherBuilder::slow_consumer`], a lag marker instead of waiting). More consumers:
/// [`subscribe`](Self::subscribe); health: [`notices`](Self::notices) and [`stats`](Self::stats).
///
/// Errors arrive on the channel as `Err` items; most are retried (see
/// [`Error::is_terminal`](crate::Error::is_terminal)). A consumer that attaches while the watcher
/// waits to retry after an error gets that error after the current state, so it is never left
/// waiting in silence (a server that refuses connections is reported once per outage, not at
/// every retry). The iterator ends after [`stop`](Self::stop) or a terminal error.
///
/// ```
/// # let server = kube_watcher::testing::FakeApiServer::start();
/// # server.create(&k8s_openapi::api::core::v1::Pod { metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta { name: Some("web-0".into()), namespace: Some("apps".into()), ..Default::default() }, ..Default::default() }).unwrap();
/// use std::time::Duration;
/// use kube_watcher::{Api, Client, Config, Event, ObjectRef, Watcher};
/// use k8s_openapi::api::core::v1::Pod;
///
/// let client = Client::from_url(&server.url())?;
/// let watcher = Watcher::new(Api::<Pod>::namespaced(client, "apps"), Config::default())?;
/// let store = watcher.store();
/// store.wait_until_ready(Duration::from_secs(30))?;
/// assert!(store.get(&ObjectRef::new("web-0").within("apps")).is_some());
/// watcher.stop();
/// # Ok::<(), kube_watcher::Error>(())
/// ```
#[must_use = "dropping a Watcher stops its thread"]
pub struct Watcher<K> {
    /// The watcher's own channel, created when a consumer first uses it.
    rx: OnceLock<Receiver<Item<K>>>,
    capacity: usize,
    policy: SlowConsumer,
    store: Store<K>,
    engine: Engine<K>,
}

impl<K> fmt::Debug for Watcher<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Watcher")
            .field("name", &self.engine.name())
            .field("stopping", &self.engine.is_stopping())
            .field("store", &self.store)
            .finish()
    }
}

impl<K: Watchable> Watcher<K> {
    /// Starts watching `api` with `config`. The thread starts here.
    ///
    /// # Errors
    /// [`Error::Config`](crate::Error::Config) naming an invalid setting; [`Error::Spawn`](crate::Error::Spawn) if no thread can start.
    pub fn new(api: Api<K>, config: Config) -> Result<Watcher<K>> {
        Watcher::builder(api).config(config).start()
    }

    /// A builder for the options `new` does not take: transform, indexes, predicates, compact
    /// store, channel capacity, slow-consumer policy.
    pub fn builder(api: Api<K>) -> WatcherBuilder<K> {
        WatcherBuilder::new(api)
    }
}

impl<K: Watchable> Watcher<K> {
    /// Blocks until the next event; `None` once the watcher has ended and the channel is drained.
    pub fn recv(&self) -> Option<Result<Event<K>>> {
        self.attach().recv().ok()
    }

    /// Waits at most `timeout` for the next event.
    ///
    /// Two layers of `Result`: the outer one says whether an item arrived, the inner one is the
    /// item (an event, or an error the watcher reports and retries). In a function returning
    /// `Result<_, Box<dyn Error>>`, `watcher.recv_timeout(t)??` gives the event and passes both
    /// kinds of failure up; match the outer one to treat a timeout as "nothing yet".
    ///
    /// # Errors
    /// `Timeout` when nothing arrived in time; `Disconnected` once the watcher has ended.
    pub fn recv_timeout(&self, timeout: Duration) -> Result<Result<Event<K>>, RecvTimeoutError> {
        self.attach().recv_timeout(timeout)
    }

    /// Returns the next event if one is queued, without blocking.
    ///
    /// # Errors
    /// `Empty` when nothing is queued; `Disconnected` once the watcher has ended.
    pub fn try_recv(&self) -> Result<Result<Event<K>>, TryRecvError> {
        self.attach().try_recv()
    }

    /// A blocking iterator over events; it ends when the watcher ends.
    pub fn iter(&self) -> crossbeam_channel::Iter<'_, Result<Event<K>>> {
        self.attach().iter()
    }

    /// The channel itself, for `crossbeam_channel::select!` over several watchers and timers.
    ///
    /// Calling this attaches the consumer (see the type docs): receive from it.
    pub fn receiver(&self) -> &Receiver<Result<Event<K>>> {
        self.attach()
    }

    /// Another consumer of the same events, with backpressure ([`SlowConsumer::Block`]): for
    /// fan-out to several threads. Each subscription gets every event; it starts with the
    /// current state (`Init`, `InitApply`…, `InitDone`, as a late consumer of the watcher's own
    /// channel does), then live events, so it never misses anything.
    ///
    /// The watcher waits for the slowest blocking consumer; drop a subscription you no longer
    /// read (the watcher forgets it at its next event). Once the watcher has ended, a new
    /// subscription is already closed.
    ///
    /// ```
    /// # let server = kube_watcher::testing::FakeApiServer::start();
    /// # server.create(&k8s_openapi::api::core::v1::Pod { metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta { name: Some("web-0".into()), namespace: Some("apps".into()), ..Default::default() }, ..Default::default() }).unwrap();
    /// use std::time::Duration;
    /// use kube_watcher::{Api, Client, Config, Event, Watcher};
    /// use k8s_openapi::api::core::v1::Pod;
    ///
    /// let watcher = Watcher::new(Api::<Pod>::all(Client::from_url(&server.url())?), Config::default())?;
    /// watcher.store().wait_until_ready(Duration::from_secs(30))?;
    /// let late = watcher.subscribe(); // subscribed after the sync: still sees the pod
    /// let names: Vec<String> = std::thread::spawn(move || {
    ///     late.iter()
    ///         .map_while(|ev| match ev {
    ///             Ok(Event::InitDone) => None,
    ///             Ok(ev) => Some(ev.object().and_then(|p| p.metadata.name.clone())),
    ///             Err(_) => Some(None),
    ///         })
    ///         .flatten()
    ///         .collect()
    /// })
    /// .join()
    /// .unwrap();
    /// assert_eq!(names, ["web-0"]);
    /// # Ok::<(), kube_watcher::Error>(())
    /// ```
    #[must_use = "an unread subscription holds the watcher up; drop it to unsubscribe"]
    pub fn subscribe(&self) -> Receiver<Result<Event<K>>> {
        self.subscribe_with(SlowConsumer::Block)
    }

    /// Another consumer, like [`subscribe`](Self::subscribe), with its own slow-consumer policy:
    /// [`SlowConsumer::Lag`] for a consumer that must never hold the watcher up.
    #[must_use = "drop a subscription to unsubscribe"]
    pub fn subscribe_with(&self, policy: SlowConsumer) -> Receiver<Result<Event<K>>> {
        self.engine.subscribe(&self.store, self.capacity, policy)
    }

    /// Lifecycle notices: connected, reconnecting (with the error and the backoff), relisting
    /// (with the reason), synced, drift checked, lagged, gave up. For status lines, logs and
    /// dashboards; events and the store do not depend on them.
    ///
    /// The channel keeps the latest 256 notices from the watcher's start, so reading it later
    /// still shows how it started; older unread ones are dropped, and notices never hold the
    /// watcher up. Every call returns a handle on the same channel (each notice goes to one
    /// reader). Like every channel a watcher hands out, it ends once the watcher has ended
    /// (after [`stop`](Self::stop) or a terminal error, announced by [`Notice::GaveUp`]): a
    /// reader gets the notices still queued, then `for n in watcher.notices()` finishes.
    ///
    /// ```
    /// # let server = kube_watcher::testing::FakeApiServer::start();
    /// use std::time::Duration;
    /// use kube_watcher::{Api, Client, Config, Notice, RelistReason, Watcher};
    /// use k8s_openapi::api::core::v1::Pod;
    ///
    /// let watcher = Watcher::new(Api::<Pod>::all(Client::from_url(&server.url())?), Config::default())?;
    /// let notices = watcher.notices();
    /// watcher.store().wait_until_ready(Duration::from_secs(30))?;
    /// let first = notices.recv_timeout(Duration::from_secs(30)).unwrap();
    /// assert!(matches!(first, Notice::Relisting { reason: RelistReason::Initial }), "{first:?}");
    /// # Ok::<(), kube_watcher::Error>(())
    /// ```
    #[must_use]
    pub fn notices(&self) -> Receiver<Notice> {
        self.engine.notices()
    }

    /// The watcher's cache. Cheap to clone; stays current for as long as the watcher runs.
    #[must_use]
    pub fn store(&self) -> Store<K> {
        self.store.clone()
    }

    /// A snapshot of the watcher's counters.
    #[must_use]
    pub fn stats(&self) -> Stats {
        self.engine.stats()
    }

    /// Stops the thread and waits for it (normally well under a millisecond; a connect in
    /// progress cannot be interrupted, so at most about 2 s). Idempotent; `Drop` calls it too.
    ///
    /// Events already queued can still be received; then the iterator ends. The store keeps
    /// what it holds, but for a watcher that follows a shard group
    /// ([`Config::shard_group`]): its store is empty when `stop` returns, since its member no
    /// longer claims that share for it.
    pub fn stop(&self) {
        self.engine.stop();
    }

    /// The watcher's own channel, attached on first use: the current state, then live events.
    fn attach(&self) -> &Receiver<Item<K>> {
        self.rx.get_or_init(|| self.engine.subscribe(&self.store, self.capacity, self.policy))
    }
}

impl<K> Drop for Watcher<K> {
    fn drop(&mut self) {
        self.engine.stop();
    }
}

impl<'a, K: Watchable> IntoIterator for &'a Watcher<K> {
    type Item = Result<Event<K>>;
    type IntoIter = crossbeam_channel::Iter<'a, Result<Event<K>>>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

/// Watches only the metadata of `api`'s objects: a [`Watcher`] of [`PartialObjectMetadata<K>`].
///
/// Lists and watches ask for `PartialObjectMetadata` with the `Accept` header (docs/protocol.md §8),
/// so spec and status never cross the wire nor reach memory: for a typical pod the store holds
/// a fraction of the bytes. They ask for it in protobuf first, for every type (custom resources
/// too), as client-go's metadata client does, unless [`Config::wire_format`] says JSON
/// (docs/protocol.md §12.1). Use it when names, labels, annotations, owners or resource versions
/// are all you need. A server that ignores the header (it is allowed to, and then sends full
/// objects) still gives a correct store, since only the metadata is decoded; the watcher logs a
/// warning once.
///
/// Equivalent to `Watcher::new(api.into_metadata(), config)`; for transforms or indexes use
/// [`Watcher::builder`] with [`Api::into_metadata`].
///
/// ```
/// # let server = kube_watcher::testing::FakeApiServer::start();
/// # server.create(&k8s_openapi::api::core::v1::Pod { metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta { name: Some("web-0".into()), namespace: Some("apps".into()), ..Default::default() }, ..Default::default() }).unwrap();
/// use std::time::Duration;
/// use kube_watcher::{Api, Client, Config, ObjectRef, metadata_watcher};
/// use k8s_openapi::api::core::v1::Pod;
///
/// let pods: Api<Pod> = Api::all(Client::from_url(&server.url())?);
/// let watcher = metadata_watcher(pods, Config::default())?;
/// watcher.store().wait_until_ready(Duration::from_secs(30))?;
/// let web = watcher.store().get(&ObjectRef::new("web-0").within("apps")).unwrap();
/// assert!(web.metadata.resource_version.is_some()); // metadata only: no spec, no status
/// # Ok::<(), kube_watcher::Error>(())
/// ```
///
/// # Errors
/// As [`Watcher::new`].
#[doc(alias = "PartialObjectMetadata")]
pub fn metadata_watcher<K: 'static>(api: Api<K>, config: Config) -> Result<Watcher<PartialObjectMetadata<K>>> {
    Watcher::new(api.into_metadata(), config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watchers_and_stores_are_send_and_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<Watcher<k8s_openapi::api::core::v1::Pod>>();
        assert_send_sync::<Store<k8s_openapi::api::core::v1::Pod>>();
        assert_send_sync::<crate::Client>();
        assert_send_sync::<Api<k8s_openapi::api::core::v1::Pod>>();
        assert_send_sync::<crate::Shard>();
        assert_send_sync::<crate::ShardFilter>();
    }
}
