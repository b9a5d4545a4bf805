//! `WatcherBuilder`: every option beyond [`Config`], validated, then handed to the engine.

use std::fmt;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use super::Watcher;
use crate::cache::{IndexFn, PredicateFn};
use crate::codec::skip::Paths;
use crate::config::Config;
use crate::engine::parallel::MAX_THREADS as MAX_PARALLEL_SYNC;
use crate::engine::prepare::{Compaction, Transform};
use crate::engine::{Engine, Spec};
use crate::error::{Error, Result};
use crate::notice::SlowConsumer;
use crate::resource::Watchable;
use crate::wire::api::Api;

/// The path of the field a watcher skips unless [`WatcherBuilder::with_managed_fields`] asks for
/// it.
const MANAGED_FIELDS: &str = "metadata.managedFields";

/// Default number of events the channel holds before the watcher waits for the consumer.
const DEFAULT_CHANNEL_CAPACITY: usize = 1024;

/// List requests in flight at once by default when watching several namespaces.
const DEFAULT_MAX_LISTS: usize = 4;

/// Default spread of the start times of the namespaces' threads.
const DEFAULT_START_SPREAD: Duration = Duration::from_secs(1);

/// Builds a [`Watcher`] with options beyond [`Config`].
///
/// ```
/// # let server = kube_watcher::testing::FakeApiServer::start();
/// use kube_watcher::{Api, Client, Config, Watcher};
/// use k8s_openapi::api::core::v1::Pod;
///
/// let pods: Api<Pod> = Api::all(Client::from_url(&server.url())?);
/// let watcher = Watcher::builder(pods)
///     .config(Config::default().labels("app=web"))
///     .transform(|pod: &mut Pod| pod.metadata.managed_fields = None) // save memory
///     .channel_capacity(256)
///     .start()?;
/// # drop(watcher);
/// # Ok::<(), kube_watcher::Error>(())
/// ```
#[must_use]
pub struct WatcherBuilder<K> {
    api: Api<K>,
    config: Config,
    transform: Option<Transform<K>>,
    /// The paths of `skip_fields`, as given; checked by `start`.
    skip: Vec<String>,
    /// `with_managed_fields`: decode `metadata.managedFields` (skipped by default).
    managed_fields: bool,
    compact: Option<Compaction<K>>,
    indexes: Vec<(String, IndexFn<K>)>,
    predicates: Vec<PredicateFn<K>>,
    capacity: usize,
    policy: SlowConsumer,
    namespaces: Vec<String>,
    max_lists: Option<usize>,
    start_spread: Duration,
    parallel_sync: usize,
}

impl<K> fmt::Debug for WatcherBuilder<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WatcherBuilder")
            .field("api", &self.api)
            .field("config", &self.config)
            .field("transform", &self.transform.is_some())
            .field("skip_fields", &self.skip)
            .field("managed_fields", &self.managed_fields)
            .field(
                "store",
                &match self.compact {
                    None => "typed",
                    Some(c) if c.compress => "compressed",
                    Some(_) => "compact",
                },
            )
            .field("indexes", &self.indexes.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>())
            .field("predicates", &self.predicates.len())
            .field("capacity", &self.capacity)
            .field("slow_consumer", &self.policy)
            .field("namespaces", &self.namespaces)
            .field("max_concurrent_lists", &self.max_lists)
            .field("start_spread", &self.start_spread)
            .field("parallel_sync", &self.parallel_sync)
            .finish()
    }
}

impl<K: Watchable> WatcherBuilder<K> {
    pub(crate) fn new(api: Api<K>) -> Self {
        WatcherBuilder {
            api,
            config: Config::default(),
            transform: None,
            skip: Vec::new(),
            managed_fields: false,
            compact: None,
            indexes: Vec::new(),
            predicates: Vec::new(),
            capacity: DEFAULT_CHANNEL_CAPACITY,
            policy: SlowConsumer::Block,
            namespaces: Vec::new(),
            max_lists: None,
            start_spread: Duration::ZERO,
            parallel_sync: 0,
        }
    }

    /// The watch configuration. Defaults to [`Config::default`].
    pub fn config(mut self, config: Config) -> Self {
        self.config = config;
        self
    }

    /// Changes every object before it is stored and delivered, on the watcher thread (for
    /// example to drop `managedFields` and save memory). Defaults to none.
    pub fn transform(mut self, f: impl Fn(&mut K) + Send + Sync + 'static) -> Self {
        self.transform = Some(Arc::new(f));
        self
    }

    /// Never decodes the fields at `paths`: each object gets their default (`None`, empty), and
    /// neither the store, the events, the [`transform`](Self::transform), the indexes nor the
    /// predicates see them. Defaults to none. For fields a program never reads this saves the
    /// memory they take in the cache and most of the time spent decoding and freeing them:
    /// unlike a transform that clears them, the decoder steps over their bytes (JSON or
    /// protobuf) without building anything.
    ///
    /// A path is written as the API writes the field: names joined by dots
    /// (`status.conditions`), and a map entry by its key in brackets
    /// (`metadata.annotations[kubectl.kubernetes.io/last-applied-configuration]`). A path through
    /// a list applies to every element (`spec.containers.env`: every container's). Calls add up.
    ///
    /// In the [`compact_store`](Self::compact_store) and
    /// [`compressed_store`](Self::compressed_store) modes those fields' bytes are not kept
    /// either. Over protobuf the store keeps the object's protobuf with the skipped fields
    /// left out, copied without decoding it again; over JSON it keeps the object re-encoded
    /// as JSON without them (as after a transform). An object protobuf cannot show as it was
    /// decoded (a map whose every entry is skipped, which decodes as an empty map; a path into
    /// embedded JSON) is kept re-encoded as JSON too. `get()` then decodes a smaller object
    /// (docs/performance.md, "Fields never decoded", has the figures).
    /// [`Watcher::store`](crate::Watcher::store) and every consumer see the same
    /// object. A change to a skipped field alone still arrives as an
    /// [`Event::Apply`](crate::Event::Apply) whose object differs from the one before only in
    /// its resourceVersion; a [`predicate`](Self::predicate) can drop it.
    ///
    /// # Errors
    ///
    /// [`start`](Self::start) returns [`Error::Config`] (field `skip_fields`) naming the path
    /// when one is empty or malformed, names no field of `K` (with the closest names that
    /// exist), goes below a field that has none (a string, a number), is given twice or lies
    /// inside another, or would take what the cache needs: `metadata.name`,
    /// `metadata.namespace`, `metadata.uid`, `metadata.resourceVersion` (or `metadata` whole).
    /// For [`DynamicObject`](crate::DynamicObject), which declares only its metadata, paths
    /// elsewhere are taken as given.
    ///
    /// # Examples
    ///
    /// ```
    /// # let server = kube_watcher::testing::FakeApiServer::start();
    /// # server.create(&k8s_openapi::api::core::v1::Pod {
    /// #     metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
    /// #         name: Some("web".into()), namespace: Some("apps".into()),
    /// #         annotations: Some([("team".to_string(), "a".to_string())].into()),
    /// #         ..Default::default() },
    /// #     ..Default::default() }).unwrap();
    /// use kube_watcher::{Api, Client, ObjectRef, Watcher};
    /// use k8s_openapi::api::core::v1::Pod;
    ///
    /// let pods: Api<Pod> = Api::all(Client::from_url(&server.url())?);
    /// let watcher = Watcher::builder(pods)
    ///     .skip_fields(["status.conditions", "metadata.annotations[team]", "spec.containers.env"])
    ///     .start()?;
    /// watcher.store().wait_until_ready(std::time::Duration::from_secs(30))?;
    /// let pod = watcher.store().get(&ObjectRef::new("web").within("apps")).unwrap();
    /// assert!(pod.metadata.annotations.as_ref().is_none_or(|a| a.is_empty()));
    ///
    /// // A wrong name is refused, with the names that come closest.
    /// let pods: Api<Pod> = Api::all(Client::from_url(&server.url())?);
    /// let err = Watcher::builder(pods).skip_fields(["status.conditons"]).start().unwrap_err();
    /// assert!(err.to_string().contains("PodStatus has no field \"conditons\"; the closest are conditions"));
    /// # Ok::<(), kube_watcher::Error>(())
    /// ```
    pub fn skip_fields<I, S>(mut self, paths: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.skip.extend(paths.into_iter().map(|p| p.as_ref().to_owned()));
        self
    }

    /// Decodes `metadata.managedFields`, which a watcher skips by default: the objects in the
    /// store and in the events then hold them as the server sent them.
    ///
    /// By default a watcher never decodes `metadata.managedFields` (as if
    /// [`skip_fields`](Self::skip_fields) named it): every object's `managed_fields` is `None`.
    /// They are the field ownership of server-side apply, which the server keeps and uses and
    /// which few programs read, and often the biggest part of an object: k8s-openapi holds each
    /// entry's `fieldsV1` as a tree of JSON values, so a pod that three managers wrote takes
    /// about 76 KB at a watcher's peak with them and 30 KB without (client-go, which keeps
    /// `fieldsV1` as raw bytes, about 6 KB more with them than without); docs/performance.md,
    /// "The defaults", has the figures. A program that reads
    /// them (which manager owns which field) asks for them here. Writing back an object read
    /// from the store (`Api::replace`) is safe either way: a server that gets an object without
    /// managedFields keeps the ones it has, as for any client that does not know them.
    ///
    /// Watchers used to decode them by default, and
    /// [`without_managed_fields`](Self::without_managed_fields) asked for what is now the
    /// default. A path inside `metadata.managedFields` given to `skip_fields` skips that part
    /// and decodes the rest of them, whether or not this was called; beware of writing such an
    /// object back: the server takes managedFields that are present as they are, so entries
    /// without their `fieldsV1` would tell it that no manager owns any field. Skipped whole,
    /// as by default, they are absent, and the server keeps its own.
    ///
    /// # Examples
    ///
    /// ```
    /// # let server = kube_watcher::testing::FakeApiServer::start();
    /// use kube_watcher::{Api, Client, Watcher};
    /// use k8s_openapi::api::core::v1::Pod;
    ///
    /// let pods: Api<Pod> = Api::all(Client::from_url(&server.url())?);
    /// // Who applied which field: the field managers, as the server sent them.
    /// let watcher = Watcher::builder(pods).with_managed_fields().start()?;
    /// # drop(watcher);
    /// # Ok::<(), kube_watcher::Error>(())
    /// ```
    pub fn with_managed_fields(mut self) -> Self {
        self.managed_fields = true;
        self
    }

    /// Never decodes `metadata.managedFields`: the default (see
    /// [`with_managed_fields`](Self::with_managed_fields)), which this restores after
    /// `with_managed_fields`. Asking twice is asking once.
    ///
    /// # Examples
    ///
    /// ```
    /// # let server = kube_watcher::testing::FakeApiServer::start();
    /// use kube_watcher::{Api, Client, Watcher};
    /// use k8s_openapi::api::core::v1::Pod;
    ///
    /// let pods: Api<Pod> = Api::all(Client::from_url(&server.url())?);
    /// let watcher = Watcher::builder(pods).without_managed_fields().compressed_store().start()?;
    /// # drop(watcher);
    /// # Ok::<(), kube_watcher::Error>(())
    /// ```
    pub fn without_managed_fields(mut self) -> Self {
        self.managed_fields = false;
        self
    }

    /// Keep each object in the store encoded, as it came off the wire, and decode it on access:
    /// for programs that mostly read the cache. Off by default.
    ///
    /// The bytes kept are the object's protobuf where the watcher reads protobuf (built-in
    /// types, by default: see [`WireFormat`](crate::WireFormat)), in the envelope a GET answer
    /// carries, and its JSON otherwise. A realistic 6 KB pod (its size in JSON) takes about
    /// 3.5 KB in protobuf, 6 KB in JSON, instead of about 45 KB decoded, so 100k pods fit in
    /// well under 1 GiB. [`Store::get`](crate::Store::get) and
    /// [`Store::state`](crate::Store::state) then decode on every call (about as costly as
    /// decoding off the wire, ~20 µs for such a pod in either form) and return a fresh `Arc`
    /// each time; events still carry objects decoded once. Objects are still decoded on
    /// arrival, so one that does not decode as `K` is reported and skipped as in the default
    /// mode. With a [`transform`](Self::transform), the transformed object is re-encoded, as
    /// JSON; with [`skip_fields`](Self::skip_fields), the skipped fields are left out of the
    /// bytes kept (see there).
    ///
    /// A consumer that attaches after the first sync (the first `recv`, or
    /// [`Watcher::subscribe`]) is sent the current state at once, so every object is decoded
    /// then and held until that consumer has read it: attach early, or read the store instead,
    /// where memory matters most.
    ///
    /// Delivery is the same as in the default mode: every event reaches every consumer, in
    /// order, as soon as it is applied, and a consumer that falls behind during a list never
    /// holds the list up (its events wait as the store's compact entries, decoded when they
    /// go out, and no more than 128 decoded ones wait in its channel while the list is read, so
    /// a list that a consumer is behind on holds few decoded objects). So that the
    /// watcher thread, not the consumer, frees the objects of delivered events, it keeps a
    /// reference to the last ones for a moment: at most 128 of them and 1 MiB of their encoded
    /// bytes (a bigger object is not kept), those nobody else holds are freed before each wait for the
    /// network, and all of them between requests.
    pub fn compact_store(mut self) -> Self
    where
        K: serde::Serialize,
    {
        self.compact = Some(Compaction::json(false));
        self
    }

    /// Keep each object in the store encoded and compressed, decoded on access: the smallest
    /// store, for big caches that are mostly read. Off by default; everything said of
    /// [`compact_store`](Self::compact_store) holds, and the bytes are also compressed (LZ4)
    /// against a dictionary of sample objects that the watcher picks from the first objects it
    /// receives, and adds to while new objects are unlike those it holds (up to what LZ4 reaches
    /// beside an object of their size: about 59 KiB for 2.6 KB protobuf pods).
    ///
    /// Objects of one kind repeat each other's keys, labels, images and managedFields, so a
    /// realistic 6 KB pod takes from a few hundred bytes to about 1 KB: 100k varied pods over
    /// protobuf took 0.11 GiB of peak RSS with managedFields
    /// ([`with_managed_fields`](Self::with_managed_fields)) and 0.095 GiB without, a quarter to
    /// a third of `compact_store` (docs/performance.md has the measurements). A
    /// [`Store::get`](crate::Store::get) decompresses first (a few µs) and then decodes as in
    /// compact mode; storing an object costs a compression on the watcher thread. Events reach
    /// consumers exactly as in compact mode (events a consumer is behind on during a list wait
    /// compressed).
    pub fn compressed_store(mut self) -> Self
    where
        K: serde::Serialize,
    {
        self.compact = Some(Compaction::json(true));
        self
    }

    /// Adds the index `name`: `f` gives each object's values (none, one or several), and
    /// [`Store::index`](crate::Store::index) then finds the objects with a given value in O(1).
    ///
    /// `f` runs on the watcher thread for every object that arrives (after the
    /// [`transform`](Self::transform), on the decoded object also in compact store mode), never
    /// under the store's lock. The built-in index `"namespace"` always exists; an index added
    /// under an existing name replaces it. Defaults to no index but `"namespace"`.
    pub fn index(mut self, name: &str, f: impl Fn(&K) -> Vec<String> + Send + Sync + 'static) -> Self {
        self.indexes.push((name.to_owned(), Arc::new(f)));
        self
    }

    /// Delivers an `Apply` only when `changed(old, new)` says so, where `old` is the object the
    /// store held before (see [`predicates`](crate::predicates) for ready-made ones, such as
    /// [`predicates::generation`](crate::predicates::generation): spec changes only).
    ///
    /// The store is always updated; only the event is held back (and counted in
    /// [`Stats::events`](crate::Stats::events)`.filtered`). New objects, deletes and relists are
    /// always delivered. With several predicates an `Apply` is delivered when any of them sees
    /// a change. They compare with the store's copy, so no second cache is kept; in compact
    /// store mode that copy is decoded for the comparison. Defaults to none: every `Apply`.
    ///
    /// ```
    /// # let server = kube_watcher::testing::FakeApiServer::start();
    /// use kube_watcher::{Api, Client, Watcher, predicates};
    /// use k8s_openapi::api::apps::v1::Deployment;
    ///
    /// let deployments: Api<Deployment> = Api::all(Client::from_url(&server.url())?);
    /// let watcher = Watcher::builder(deployments)
    ///     .predicate(predicates::generation) // spec changed: not every status update
    ///     .predicate(predicates::labels)     // or labels changed
    ///     .start()?;
    /// # drop(watcher);
    /// # Ok::<(), kube_watcher::Error>(())
    /// ```
    pub fn predicate(mut self, changed: impl Fn(&K, &K) -> bool + Send + Sync + 'static) -> Self {
        self.predicates.push(Arc::new(changed));
        self
    }

    /// How many events the channel holds before the watcher waits for the consumer.
    /// Defaults to 1024. Must be at least 1. A consumer that attaches after a sync gets extra
    /// room for the current state it is first sent.
    pub fn channel_capacity(mut self, capacity: usize) -> Self {
        self.capacity = capacity;
        self
    }

    /// Watch these namespaces, and only these, into one store: one watch per namespace, with
    /// their events merged into one channel. For users whose permissions are per namespace
    /// (RBAC Roles, not a ClusterRole), who cannot watch across all namespaces.
    ///
    /// Each namespace is listed, watched, resumed and relisted on its own (a 410 in one does
    /// not relist the others) by its own thread; [`Store::is_ready_in`](crate::Store::is_ready_in) tells which have been
    /// listed, and [`Store::is_ready`](crate::Store::is_ready) is true once all have. Each namespace's relist comes as its
    /// own `Init`…`InitDone`, and those of different namespaces may interleave with each
    /// other's events, so read `InitApply` as `Apply`. A terminal error in one (for instance
    /// `max_retries` running out) stops them all. The watched [`Api`] gives the type and client;
    /// its own namespace, if any, is replaced.
    ///
    /// So that many namespaces do not overload the server: each starts after a random delay up
    /// to [`start_spread`](Self::start_spread) (default 1 s), at most
    /// [`max_concurrent_lists`](Self::max_concurrent_lists) list requests are in flight
    /// (default 4), and a `Retry-After` that the server gives one of them delays every one.
    ///
    /// ```
    /// # let server = kube_watcher::testing::FakeApiServer::start();
    /// # for (ns, name) in [("team-a", "a"), ("team-b", "b"), ("other", "c")] {
    /// #     let mut p = k8s_openapi::api::core::v1::Pod::default();
    /// #     p.metadata.name = Some(name.into()); p.metadata.namespace = Some(ns.into());
    /// #     server.create(&p).unwrap();
    /// # }
    /// use std::time::Duration;
    /// use kube_watcher::{Api, Client, Watcher};
    /// use k8s_openapi::api::core::v1::Pod;
    ///
    /// let pods: Api<Pod> = Api::all(Client::from_url(&server.url())?);
    /// let watcher = Watcher::builder(pods).namespaces(&["team-a", "team-b"]).start()?;
    /// let store = watcher.store();
    /// store.wait_until_ready(Duration::from_secs(30))?;
    /// assert_eq!(store.len(), 2); // not the pod in "other"
    /// assert!(store.is_ready_in("team-a") && store.is_ready_in("team-b"));
    /// # Ok::<(), kube_watcher::Error>(())
    /// ```
    pub fn namespaces<S: AsRef<str>>(mut self, namespaces: &[S]) -> Self {
        self.namespaces = namespaces.iter().map(|n| n.as_ref().to_owned()).collect();
        if self.max_lists.is_none() {
            self.max_lists = Some(DEFAULT_MAX_LISTS);
        }
        if self.start_spread.is_zero() {
            self.start_spread = DEFAULT_START_SPREAD;
        }
        self
    }

    /// At most this many list requests in flight at once across the watcher's namespaces (see
    /// [`namespaces`](Self::namespaces)). Defaults to 4 with several namespaces, no limit with
    /// one. Must be at least 1.
    pub fn max_concurrent_lists(mut self, n: usize) -> Self {
        self.max_lists = Some(n);
        self
    }

    /// Each namespace's thread starts after a random delay up to this (see
    /// [`namespaces`](Self::namespaces)), so that many do not hit the server at the same
    /// instant. Defaults to 1 s with several namespaces, none otherwise.
    pub fn start_spread(mut self, spread: Duration) -> Self {
        self.start_spread = spread;
        self
    }

    /// Decode list items on this many helper threads (at most 64), for a faster initial sync
    /// and relist; 0, the default, decodes them on the watcher thread.
    ///
    /// Each item of every list page (initial sync and relists; not watch events, so not a
    /// streaming list's either, and not the metadata lists of [`Config::drift_check`]) is
    /// decoded, given to the
    /// [`transform`](Self::transform) and the [`index`](Self::index) functions on a helper,
    /// then applied to the store and delivered on the watcher thread strictly in list order:
    /// the events, the store and the handling of objects that do not decode are the same as
    /// without it, and a callback that panics on a helper ends the watcher with
    /// [`Error::Panicked`] naming it. Up to 64 items per helper are in flight (their bytes
    /// copied out of the body). The helpers wait on a channel (no wake-ups while idle), are
    /// shared by the threads of a [`namespaces`](Self::namespaces) watcher, and end with
    /// the watcher. So that there are pages, a watcher with helpers fetches its initial state
    /// in pages ([`InitialListStrategy::ListWatch`](crate::InitialListStrategy::ListWatch))
    /// unless its [`Config`] chose a strategy
    /// ([`Config::initial_list_strategy`]; the default is a streaming list).
    ///
    /// The trade, measured with `examples/bench.rs` on a 2-core machine (realistic ~6 KB pods,
    /// medians of 3 rounds, docs/performance.md): the initial sync of 100k pods took 3.3 s with
    /// 2 helpers instead of 5.2 s (0.64×; 4.6 s, 0.88×, with 1 helper, which then does nearly
    /// all the work), at the same peak RSS (3.8 GB). But once objects turn over, glibc keeps
    /// the freed memory of the versions the helpers decoded in the helpers' malloc arenas
    /// while the watcher thread allocates the new ones in its own: watching 10k pods through
    /// 100k events peaked at 681 MB instead of 390 MB (1.75×), at about the same events/s
    /// (0.94–0.99×). Allocators that hand freed memory back do not strand it: with jemalloc
    /// as the application's global allocator the same watch peaked at 1.01× (docs/performance.md,
    /// "Allocators"). Turn it on where sync time matters more than memory, or with such an
    /// allocator.
    pub fn parallel_sync(mut self, threads: usize) -> Self {
        self.parallel_sync = threads;
        self
    }

    /// What to do when the consumer of the watcher's own channel falls behind. Defaults to
    /// [`SlowConsumer::Block`] (backpressure); [`Watcher::subscribe_with`] chooses for each
    /// further consumer.
    pub fn slow_consumer(mut self, policy: SlowConsumer) -> Self {
        self.policy = policy;
        self
    }

    /// Starts the watcher thread.
    ///
    /// # Errors
    /// [`Error::Config`] naming an invalid setting; [`Error::Spawn`] if no thread can start.
    pub fn start(self) -> Result<Watcher<K>> {
        self.config.validate()?;
        if self.capacity == 0 {
            return Err(Error::config("channel_capacity", "must be at least 1"));
        }
        if self.max_lists == Some(0) {
            return Err(Error::config("max_concurrent_lists", "must be at least 1"));
        }
        if self.parallel_sync > MAX_PARALLEL_SYNC {
            return Err(Error::config(
                "parallel_sync",
                format!("{} helper threads is more than {MAX_PARALLEL_SYNC}", self.parallel_sync),
            ));
        }
        let mut seen = std::collections::HashSet::new();
        for ns in &self.namespaces {
            if ns.is_empty() || !seen.insert(ns.as_str()) {
                return Err(Error::config("namespaces", format!("{ns:?} is empty or listed twice")));
            }
        }
        if !self.namespaces.is_empty() && !self.api.resource.namespaced {
            return Err(Error::config(
                "namespaces",
                format!("{} is cluster-scoped: it has no namespaces to watch", self.api.resource.plural),
            ));
        }
        let skip = skipped::<K>(&self.skip, self.managed_fields)?;
        let config = if self.parallel_sync > 0 { self.config.paged_unless_chosen() } else { self.config };
        let engine = Engine::start(Spec {
            api: self.api,
            config,
            namespaces: self.namespaces,
            indexes: self.indexes,
            predicates: self.predicates,
            transform: self.transform,
            skip,
            compact: self.compact,
            max_lists: self.max_lists,
            start_spread: self.start_spread,
            parallel_sync: self.parallel_sync,
        })?;
        Ok(Watcher { rx: OnceLock::new(), capacity: self.capacity, policy: self.policy, store: engine.store(), engine })
    }
}

/// The fields a watcher never decodes: `paths` (`skip_fields`), and `metadata.managedFields`
/// unless `managed_fields` (`with_managed_fields`) or one of `paths` names them or a part of
/// them (that path says what to skip of them). The default is the watcher's, not the user's:
/// it never makes `start` fail, and for a type whose shape has no `metadata.managedFields` it
/// is left out.
fn skipped<K: Watchable>(paths: &[String], managed_fields: bool) -> Result<Paths> {
    let named =
        |p: &String| p.strip_prefix(MANAGED_FIELDS).is_some_and(|rest| rest.is_empty() || rest.starts_with(['.', '[']));
    let user = || Paths::new::<K>(paths).map_err(|e| Error::config("skip_fields", e));
    if managed_fields || paths.iter().any(named) {
        return user();
    }
    let with_default: Vec<String> = paths.iter().cloned().chain([MANAGED_FIELDS.to_owned()]).collect();
    Paths::new::<K>(&with_default).or_else(|_| user())
}
