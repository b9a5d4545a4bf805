//! Watch Kubernetes resources and keep a live, in-memory cache of them — without async.
//!
//! A [`Watcher`] runs one background thread that lists, pages, watches, resumes and relists a
//! resource over blocking HTTP, keeps a [`Store`] current, and delivers [`Event`]s on a
//! crossbeam channel.
//!
//! ```
//! # let server = kube_watcher::testing::FakeApiServer::start();
//! # for name in ["web-0", "web-1"] {
//! #     let mut pod = k8s_openapi::api::core::v1::Pod::default();
//! #     pod.metadata.name = Some(name.into());
//! #     pod.metadata.namespace = Some("default".into());
//! #     pod.metadata.labels = Some([("app".to_owned(), "web".to_owned())].into());
//! #     server.create(&pod).unwrap();
//! # }
//! use k8s_openapi::api::core::v1::Pod;
//! use kube_watcher::{Api, Client, Config, Event, Watcher};
//!
//! # let client = Client::from_url(&server.url())?;
//! # /*
//! let client = Client::try_default()?; // KUBECONFIG, ~/.kube/config, else in-cluster
//! # */
//! let pods: Api<Pod> = Api::namespaced(client, "default");
//! let watcher = Watcher::new(pods, Config::default().labels("app=web"))?;
//! let store = watcher.store(); // always current; cheap to clone
//! # std::thread::scope(|s| {
//! #     // The loop below runs until the watcher is stopped; stop it once the first list is in.
//! #     s.spawn(|| {
//! #         store.wait_until_ready(std::time::Duration::from_secs(30)).unwrap();
//! #         watcher.stop();
//! #     });
//! // Every event from the start: the current state (Init, InitApply…, InitDone), then changes.
//! // Errors are retried by the watcher; they arrive here so that you can see them.
//! for event in &watcher {
//!     match event {
//!         Ok(Event::InitApply(pod)) => println!("listed   {}", pod.metadata.name.as_deref().unwrap_or("")),
//!         Ok(Event::InitDone) => println!("in sync: {} pods cached", store.len()),
//!         Ok(Event::Apply(pod)) => println!("changed  {}", pod.metadata.name.as_deref().unwrap_or("")),
//!         Ok(Event::Delete(pod)) => println!("deleted  {}", pod.metadata.name.as_deref().unwrap_or("")),
//!         Ok(Event::Init) => {} // a (re)list starts
//!         Err(e) => eprintln!("watch trouble, retrying: {e}"),
//!     }
//! }
//! # });
//! # Ok::<(), kube_watcher::Error>(())
//! ```
//!
//! This is the README's quick start (`examples/watch_pods.rs`): it runs until the watcher is
//! stopped ([`Watcher::stop`], or dropping it), and only [`Error::is_terminal`] errors, which
//! the default [`Config`] never produces, end it on their own.
//!
//! To see it run without a cluster: `cargo run --example kwatch --features testing -- --demo`.
//!
//! # Watching
//!
//! Connect with [`Client::try_default`] (kubeconfig, else in-cluster), pick the objects with an
//! [`Api`] (typed k8s-openapi types, or [`DynamicObject`] with an [`ApiResource`] that
//! [`Client::discover`] finds from a name such as `deploy` or `widgets.example.com`), and start
//! a [`Watcher`] with a [`Config`] (selectors, page size, timeouts, backoff). The thread starts
//! at once and runs until stopped. Read events with `recv`, `recv_timeout`, `try_recv` or
//! `for event in &watcher`; [`Event`] documents what a consumer may rely on, notably that a
//! relist reports every object that vanished meanwhile as a `Delete`. One named object:
//! [`watch_object`]. Only the `Apply`s that matter: [`WatcherBuilder::predicate`] with
//! [`predicates`]. Several namespaces into one store, for namespaced permissions:
//! [`WatcherBuilder::namespaces`].
//!
//! # Caching
//!
//! [`Watcher::store`] is a cheap, cloneable read view: [`Store::get`] by [`ObjectRef`],
//! [`Store::state`], [`Store::index`] (indexes are registered with
//! [`WatcherBuilder::index`]), [`Store::wait_until_ready`] for the first full list, and
//! [`Store::generation`] to learn in O(1) whether anything changed, [`Store::snapshot`] for a
//! consistent copy to read without locks. [`Store::resource_version`] says how fresh the store is,
//! and [`Store::wait_for_version`] waits until it shows a write you made (read-your-writes).
//! A relist becomes visible all at once. A watcher that
//! nobody receives events from queues none: the store alone is kept. [`Config::drift_check`]
//! verifies now and then that the store still matches the server.
//!
//! # `select!` over watchers
//!
//! [`Watcher::receiver`] is a `crossbeam_channel::Receiver`, so several watchers, timers and
//! your own channels can share one `select!` loop (the crate is re-exported as
//! [`crossbeam_channel`]; the `select_loop` example is a game-style loop with a frame tick).
//! A full channel (1024 events by default, [`WatcherBuilder::channel_capacity`]) makes the
//! watcher wait for you: backpressure, never silent loss. More consumers:
//! [`Watcher::subscribe`], each with its own [`SlowConsumer`] policy (block, or lag and catch up
//! from the store).
//!
//! # Stopping
//!
//! [`Watcher::stop`] or dropping the watcher interrupts whatever the thread is doing (a quiet
//! watch, a list download, a backoff wait) and joins it, normally well under a millisecond. Only
//! a TCP connect in progress cannot be interrupted; `stop` then gives up waiting after about 2 s.
//!
//! # Errors and recovery
//!
//! Failures arrive on the channel as `Err(`[`Error`]`)` and are counted in [`Watcher::stats`]
//! (by class, with relists by reason); [`Watcher::notices`] tells connected, reconnecting,
//! relisting and why, stale and fresh again, as it happens; [`Store::stale_since`] says at any
//! moment whether the store is in step with the server. The watcher retries failures itself. Only [`Error::is_terminal`] errors end it (the retry limit
//! of [`Config::max_retries`], off by default). A dropped connection resumes from the last
//! resourceVersion; a 410 Gone relists; a connection silent for longer than the server's watch
//! timeout plus 30 s is declared dead and re-watched. The defaults, and why:
//!
//! | setting | default | why |
//! |---|---|---|
//! | [`Config::timeout`] | random in [60 s, 90 s) | a stalled connection is found within two minutes; resuming costs one request |
//! | [`Config::stall_timeout`] | watch timeout + 30 s | a healthy quiet watch is silent until the server ends it |
//! | [`Config::backoff`] | 0.8 s × 2 up to 30 s, full jitter, reset after 120 s | client-go's reflector values; `Retry-After` is honoured |
//! | [`Config::max_retries`] | none | permissions get fixed and servers come back |
//! | [`Config::page_size`] | 500 | client-go's pager |
//! | connect timeout | 10 s | DNS and TCP connect cannot be interrupted |
//!
//! Every error message says what was being done and why it failed, and never holds a secret.
//!
//! # Memory
//!
//! Objects are decoded once and shared as `Arc`s between events and the store. To hold less:
//! [`metadata_watcher`] keeps only metadata; [`WatcherBuilder::compressed_store`] keeps each
//! object's bytes as they came off the wire (protobuf for built-in types, JSON otherwise),
//! compressed, and decodes on read (100k realistic pods in about 0.1 GiB);
//! [`WatcherBuilder::compact_store`] keeps those bytes uncompressed; and a
//! [`WatcherBuilder::transform`] can drop fields you never read (`managedFields` above all)
//! before anything is stored. Better still, [`WatcherBuilder::skip_fields`] never decodes
//! them: the decoder steps over their bytes, which saves the memory and most of the CPU time
//! they cost (with a compact store, the entry is then kept as JSON without them).
//! `metadata.managedFields` are skipped so by default
//! ([`WatcherBuilder::with_managed_fields`] keeps them).
//!
//! # Writes and leader election
//!
//! [`Api::create`], [`Api::replace`] (optimistic: a changed object is a 409,
//! [`Error::is_conflict`]) and [`Api::delete`] write one object. A program that runs as several
//! replicas elects one leader with a [`LeaderElector`] over a Lease, with client-go's semantics
//! ([`LeaseTimings`]: 15 s, 10 s, 2 s): [`LeaderElector::is_leader`],
//! [`LeaderElector::changes`] (for `select!`: [`Leadership::Acquired`], [`Leadership::Lost`]),
//! and [`LeaderElector::stop`], which releases the lease so a standby takes over within one
//! retry period. A leader that cannot renew says `Lost` before anyone else can take the lease.
//!
//! # Testing
//!
//! With the cargo feature `testing`, `kube_watcher::testing::FakeApiServer` is an in-process
//! API server speaking the real list/watch protocol, with scripted faults (429s, 410s, resets,
//! stalls); point [`Client::from_url`] at it to test code built on this crate.
//! `testing::DemoWorkload` adds a scripted workload for demos.
//!
//! # Differences from kube-rs and client-go
//!
//! - Blocking threads and channels instead of async streams or goroutines: no runtime.
//! - Deletions missed during an outage are ordinary `Delete` events after the relist, with
//!   the last known state (client-go wraps them in tombstones; kube-rs reports none).
//! - The default server watch timeout is about a minute, not 5–10 (client-go) or 290 s
//!   (kube-rs): HTTP/1.1 has no pings, so silence is the only sign of a dead connection.
#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![warn(missing_debug_implementations)]
#![cfg_attr(not(test), warn(clippy::unwrap_used, clippy::expect_used))]

// Layers, top to bottom; a module imports only from layers below it (see ARCHITECTURE.md).
// Blank lines keep rustfmt from sorting them.

// Leases: one leader among replicas (the pure decision, the elector's thread and handle), and
// shard groups, whose members learn of each other through a `Watcher` of their Leases.
mod lease;

// The public face: `Watcher`, its builder, `watch_object`.
mod watcher;

// The thread that runs a watcher, the control block, delivery to subscribers.
mod engine;

// Side by side, neither importing the other: the store (read side, writer, indexes), and the
// pure state machine (what to request next, backoff, drift verdicts).
mod cache;
mod machine;

// HTTP: requests, the transport, watch streams, the client, discovery.
mod wire;

// Side by side, neither importing the other: where the server is and how to trust and
// authenticate to it (kubeconfig, in-cluster, exec plugins, TLS, proxies), and the codec (bytes
// in, values out: lists, watch events, `Status`, protobuf, skipped fields, the JSON check).
mod auth;
mod codec;

// The vocabulary every layer shares.
mod config;
mod error;
mod event;
mod guard;
mod key;
mod notice;
pub mod predicates;
mod resource;
mod shard;
mod spelling;
mod stats;

#[cfg(feature = "testing")]
pub mod testing;

#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;

pub use crate::auth::KubeconfigOptions;
pub use crate::cache::{Snapshot, Store};
pub use crate::config::{Backoff, Config, InitialListStrategy, ListSemantic, WireFormat};
pub use crate::error::{ApiError, DecodeError, Error, Result};
pub use crate::event::Event;
pub use crate::key::ObjectRef;
pub use crate::lease::elector::LeaderElector;
pub use crate::lease::group::{GroupChange, ShardGroup};
pub use crate::lease::{Leadership, LeaseTimings};
pub use crate::notice::{Notice, RelistReason, SlowConsumer};
pub use crate::resource::{ApiResource, DynamicObject, PartialObjectMetadata, TypeMeta, Watchable};
pub use crate::shard::{Shard, ShardFilter};
pub use crate::stats::{ErrorCounts, EventCounts, RelistCounts, Stats};
pub use crate::watcher::object::{ObjectWatcher, watch_object};
pub use crate::watcher::{Watcher, WatcherBuilder, metadata_watcher};
pub use crate::wire::api::{Api, ObjectList};
pub use crate::wire::client::Client;
pub use crate::wire::request::{ListParams, VersionMatch};
/// The channel crate of [`Watcher::receiver`] and [`Watcher::subscribe`], for `select!`, `tick`
/// and `after` without a dependency of your own (`use kube_watcher::crossbeam_channel::select;`).
pub use crossbeam_channel;
pub use crossbeam_channel::{RecvTimeoutError, TryRecvError};
/// The Kubernetes types watchers are typed with; enable one of its version features (such as
/// `latest`) in your application.
pub use k8s_openapi;

/// The README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

/// The guide's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../docs/guide.md")]
struct GuideDoctests;
