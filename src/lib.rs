//! Watch Kubernetes resources and keep a live, in-memory cache of them — without async.
//!
//! A [`Watcher`] runs one background thread that lists, pages, watches, resumes and relists a
//! resource over blocking HTTP, keeps a [`Store`] current, and delivers [`Event`]s on a
//! crossbeam channel.
//!
//! ```
//! # let server = kube_watcher::testing::FakeApiServer::start();
//! # let url = server.url();
//! use std::time::Duration;
//! use kube_watcher::{Api, Client, Config, Event, Watcher};
//! use k8s_openapi::api::core::v1::Pod;
//!
//! let client = Client::from_url(&url)?; // or Client::try_default()? with a kubeconfig
//! let pods: Api<Pod> = Api::all(client);
//! let watcher = Watcher::new(pods, Config::default())?;
//! watcher.store().wait_until_ready(Duration::from_secs(30))?;
//! while let Ok(event) = watcher.recv_timeout(Duration::from_millis(100)) {
//!     match event? {
//!         Event::Apply(pod) | Event::InitApply(pod) => println!("{:?}", pod.metadata.name),
//!         Event::Delete(pod) => println!("gone: {:?}", pod.metadata.name),
//!         Event::Init | Event::InitDone => {}
//!     }
//! }
//! # Ok::<(), kube_watcher::Error>(())
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![warn(missing_debug_implementations)]
#![cfg_attr(not(test), warn(clippy::unwrap_used, clippy::expect_used))]

mod auth;
mod backoff;
mod client;
mod config;
mod decode;
mod discovery;
mod drift;
mod error;
mod event;
mod hub;
mod key;
mod machine;
mod object_watcher;
pub mod predicates;
mod request;
mod resource;
mod stats;
mod store;
mod watcher;
mod worker;

#[cfg(feature = "testing")]
pub mod testing;

#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;

pub use crate::auth::KubeconfigOptions;
pub use crate::client::{Api, Client, ObjectList};
pub use crate::config::{Backoff, Config, ListSemantic};
pub use crate::error::{ApiError, DecodeError, Error, Result};
pub use crate::event::Event;
pub use crate::hub::{Notice, SlowConsumer};
pub use crate::key::ObjectRef;
pub use crate::machine::RelistReason;
pub use crate::object_watcher::{ObjectWatcher, watch_object};
pub use crate::request::{ListParams, VersionMatch};
pub use crate::resource::{ApiResource, DynamicObject, PartialObjectMetadata, TypeMeta, Watchable};
pub use crate::stats::{ErrorCounts, EventCounts, RelistCounts, Stats};
pub use crate::store::{Snapshot, Store};
pub use crate::watcher::{Watcher, WatcherBuilder, metadata_watcher};
pub use crossbeam_channel::{RecvTimeoutError, TryRecvError};
pub use k8s_openapi;

/// The README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
