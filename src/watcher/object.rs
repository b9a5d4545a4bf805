//! `watch_object`: one named object, delivered as `Option<Arc<K>>` updates.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{RecvTimeoutError, TryRecvError};
use parking_lot::Mutex;

use crate::config::Config;
use crate::error::{Error, Result};
use crate::event::Event;
use crate::resource::Watchable;
use crate::watcher::Watcher;
use crate::wire::api::Api;

/// What identifies one delivered state: uid and resourceVersion, or `None` for "absent".
type Seen = Option<(Option<String>, Option<String>)>;

/// Watches the one object called `name`: its state as `Some(Arc<K>)` whenever it is created or
/// changes, `None` when it does not exist or is deleted.
///
/// The watch uses the field selector `metadata.name=<name>`. The first update arrives once the
/// initial list is done, so a missing object is reported as `None` rather than by silence. Each
/// update is the object's current state; states already delivered are not repeated (a relist
/// that finds the object unchanged delivers nothing).
///
/// Use a namespaced [`Api`] for a namespaced type: with [`Api::all`] the name may match objects
/// in several namespaces, which is an [`Error::Config`] on the channel, after which the watch
/// ends.
///
/// ```
/// # let server = kube_watcher::testing::FakeApiServer::start();
/// use std::time::Duration;
/// use kube_watcher::{Api, Client, watch_object};
/// use k8s_openapi::api::core::v1::ConfigMap;
/// use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
///
/// let cms: Api<ConfigMap> = Api::namespaced(Client::from_url(&server.url())?, "apps");
/// let settings = watch_object(cms, "settings")?;
/// assert!(settings.recv_timeout(Duration::from_secs(30)).unwrap()?.is_none()); // not there yet
/// # let cm = ConfigMap { metadata: ObjectMeta { name: Some("settings".into()), namespace: Some("apps".into()), ..Default::default() }, ..Default::default() };
/// server.create(&cm).unwrap();
/// let now = settings.recv_timeout(Duration::from_secs(30)).unwrap()?;
/// assert_eq!(now.unwrap().metadata.name.as_deref(), Some("settings"));
/// # Ok::<(), kube_watcher::Error>(())
/// ```
///
/// # Errors
/// As [`Watcher::new`].
pub fn watch_object<K: Watchable>(api: Api<K>, name: &str) -> Result<ObjectWatcher<K>> {
    let config = Config::default().fields(&format!("metadata.name={name}"));
    let context = api.describe(&format!("watch {name:?} in"));
    let watcher = Watcher::new(api, config)?;
    Ok(ObjectWatcher { watcher, name: name.to_owned(), context, last: Mutex::new(None) })
}

/// The updates of one named object; see [`watch_object`].
///
/// The methods follow [`Watcher`]'s: [`recv`](Self::recv) blocks, [`try_recv`](Self::try_recv)
/// never does, [`recv_timeout`](Self::recv_timeout) is bounded. Updates are computed while
/// receiving, so there is no raw receiver for `select!`; [`watcher`](Self::watcher) gives the
/// underlying watcher's events and store for that.
#[must_use = "dropping an ObjectWatcher stops its thread"]
pub struct ObjectWatcher<K> {
    watcher: Watcher<K>,
    name: String,
    /// How errors name the watch: `watch "web" in pods in namespace "apps"`.
    context: String,
    /// The last state delivered; `None` before the first update.
    last: Mutex<Option<Seen>>,
}

impl<K> fmt::Debug for ObjectWatcher<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ObjectWatcher").field("name", &self.name).field("watcher", &self.watcher).finish()
    }
}

impl<K: Watchable> ObjectWatcher<K> {
    /// Blocks until the next update; `None` once the watch has ended (after
    /// [`stop`](Self::stop) or a terminal error).
    pub fn recv(&self) -> Option<Result<Option<Arc<K>>>> {
        loop {
            let ev = self.watcher.recv()?;
            if let Some(update) = self.update(ev) {
                return Some(update);
            }
        }
    }

    /// Waits at most `timeout` for the next update.
    ///
    /// # Errors
    /// `Timeout` when nothing arrived in time; `Disconnected` once the watch has ended.
    pub fn recv_timeout(&self, timeout: Duration) -> Result<Result<Option<Arc<K>>>, RecvTimeoutError> {
        let deadline = Instant::now().checked_add(timeout);
        loop {
            let left = deadline.map_or(timeout, |d| d.saturating_duration_since(Instant::now()));
            let ev = self.watcher.recv_timeout(left)?;
            if let Some(update) = self.update(ev) {
                return Ok(update);
            }
        }
    }

    /// Returns the next update if one is ready, without blocking.
    ///
    /// # Errors
    /// `Empty` when none is ready; `Disconnected` once the watch has ended.
    pub fn try_recv(&self) -> Result<Result<Option<Arc<K>>>, TryRecvError> {
        loop {
            let ev = self.watcher.try_recv()?;
            if let Some(update) = self.update(ev) {
                return Ok(update);
            }
        }
    }

    /// The object's current state in the cache, without waiting for an update (`None` also
    /// before the first list is done).
    #[must_use]
    pub fn get(&self) -> Option<Arc<K>> {
        let state = self.watcher.store().state();
        if state.len() == 1 { state.into_iter().next() } else { None }
    }

    /// The underlying watcher (its events, store and stats).
    pub fn watcher(&self) -> &Watcher<K> {
        &self.watcher
    }

    /// Stops the watch; see [`Watcher::stop`]. Idempotent; `Drop` does it too.
    pub fn stop(&self) {
        self.watcher.stop();
    }

    /// The update an event makes, if any: the store's state after it, unless already delivered.
    fn update(&self, ev: Result<Event<K>>) -> Option<Result<Option<Arc<K>>>> {
        match ev {
            Err(e) => return Some(Err(e)),
            // Until `InitDone` the store still shows the previous state.
            Ok(Event::Init | Event::InitApply(_)) => return None,
            Ok(Event::InitDone | Event::Apply(_) | Event::Delete(_)) => {}
        }
        let mut state = self.watcher.store().state();
        if state.len() > 1 {
            let mut keys: Vec<String> =
                state.iter().map(|o| crate::key::ObjectRef::from_obj(&**o).to_string()).collect();
            keys.sort();
            self.watcher.stop();
            return Some(Err(Error::config(
                "name",
                format!(
                    "{}: the server returned {} objects ({}); watch_object needs one: use a namespaced Api",
                    self.context,
                    keys.len(),
                    keys.join(", ")
                ),
            )));
        }
        let current = state.pop();
        let seen: Seen = current.as_ref().map(|o| (o.meta().uid.clone(), o.meta().resource_version.clone()));
        let mut last = self.last.lock();
        if last.as_ref() == Some(&seen) {
            return None;
        }
        *last = Some(seen);
        Some(Ok(current))
    }
}
