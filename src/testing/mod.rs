//! An in-process fake Kubernetes API server for tests (cargo feature `testing`).
//!
//! [`FakeApiServer`] speaks the real API server's list/watch protocol over HTTP/1.1 (optionally
//! TLS) on `127.0.0.1`, so the library, users' code built on it, and real clients such as
//! `kubectl` can run against it. It keeps objects in memory with a store-wide revision counter,
//! retains a bounded history of changes per type, and reproduces the behaviour a watcher has to
//! cope with:
//!
//! * lists with label/field selectors, `limit`/`continue` pagination (every page at the same
//!   resourceVersion, tokens that expire), the full `resourceVersion`/`resourceVersionMatch`
//!   table including its 400/410/422/504 answers;
//! * watches from "now", from a revision (410 `Expired` once history is gone, in-stream or as an
//!   HTTP status), bookmarks (only when asked for and only when the revision moved), selector
//!   transitions (`DELETED` with the old state when an object stops matching), `timeoutSeconds`,
//!   streaming lists with the `k8s.io/initial-events-end` bookmark, and slow-watcher closes;
//! * metadata-only (`PartialObjectMetadata`) lists and watches, gzip for large lists;
//! * protobuf answers (built-in kinds, and metadata of any kind) to a client that asks for them
//!   first, unless [`FakeApiServerBuilder::json_only`] says otherwise;
//! * writes (POST, PUT, merge PATCH, DELETE with finalizers), discovery (aggregated, or per group
//!   as older servers have it), bearer tokens and client certificates;
//! * scripted faults ([`Fault`]) for the next matching request: Status errors, plain-text 429s,
//!   HTML 502s, in-stream errors, resets and truncations, stalls, malformed lines.
//!
//! Every request is recorded ([`FakeApiServer::requests`]) with credentials redacted.
//!
//! For demos there is also [`DemoWorkload`]: a server with pods that come, crash, restart and
//! go, plus a scripted outage and a 410, as `kwatch --demo` and the examples show.
//!
//! # Example
//!
//! ```
//! use k8s_openapi::api::core::v1::ConfigMap;
//! use kube_watcher::testing::FakeApiServer;
//!
//! let server = FakeApiServer::start();
//! let mut cm = ConfigMap::default();
//! cm.metadata.name = Some("app".into());
//! cm.metadata.namespace = Some("shop".into());
//! let created = server.create(&cm).expect("create");
//! assert!(created.metadata.resource_version.is_some());
//!
//! // Point a client at server.url(); for example list the collection over plain HTTP:
//! let url = format!("{}/api/v1/namespaces/shop/configmaps", server.url());
//! # let _ = url;
//! assert_eq!(server.list::<ConfigMap>().len(), 1);
//! ```
//!
//! # Scripting failures and checking requests
//!
//! ```
//! use kube_watcher::testing::{Fault, FakeApiServer, Match};
//!
//! let server = FakeApiServer::builder().history(100).start();
//! // The next watch gets one event and then a reset connection; the next list a 429.
//! server.push_fault(Match::Watch, Fault::ResetAfter { events: 1 });
//! server.push_fault(
//!     Match::List,
//!     Fault::PlainText { code: 429, body: "Too many requests, please try again later.".into(), retry_after: Some(1) },
//! );
//! // Force the client's next resume to get 410 Gone:
//! server.compact();
//! // ... run the code under test against server.url() ...
//! let watches = server.requests().iter().filter(|r| r.watch).count();
//! # let _ = watches;
//! ```
//!
//! # Settings
//!
//! [`FakeApiServer::builder`] sets the bookmark interval, retained history, how 410s and
//! streaming lists are reported, continue-token lifetime, TLS, tokens, how watch events are
//! chunked, and the slow-watcher buffer; each setter documents its default (which mirrors the
//! real server where there is one).
//!
//! # Threads
//!
//! The server runs one accept thread and one thread per connection. Dropping the
//! [`FakeApiServer`] shuts every socket down (also stalled watches) and joins every thread.

mod api;
mod builder;
mod demo;
mod hostile;
mod http;
mod selectors;
mod server;
mod shard;
mod state;
mod store;
mod tls;
mod types;
mod util;
mod watch;

use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread::JoinHandle;
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

pub use self::builder::FakeApiServerBuilder;
pub(crate) use self::builder::Settings;
pub use self::demo::DemoWorkload;
use self::state::{ServerCore, State};
use self::store::Deleted;
pub use self::types::{Chunking, FakeError, Fault, Match, RecordedRequest, ResourceType, StreamingLists, Watch410};

/// An in-process fake Kubernetes API server. See the [module docs](self).
///
/// Dropping it shuts the server down: every connection (including stalled watches) is shut
/// down and every thread joined.
pub struct FakeApiServer {
    shared: Arc<ServerCore>,
    addr: SocketAddr,
    accept: Option<JoinHandle<()>>,
}

impl fmt::Debug for FakeApiServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FakeApiServer")
            .field("url", &self.url())
            .field("connections", &self.connections())
            .field("open_watches", &self.open_watches())
            .finish_non_exhaustive()
    }
}

fn to_value<K: Serialize>(obj: &K) -> Result<Value, FakeError> {
    serde_json::to_value(obj).map_err(|e| FakeError::Serde { message: e.to_string() })
}

fn from_value<K: DeserializeOwned>(value: &Value) -> Result<K, FakeError> {
    K::deserialize(value).map_err(|e| FakeError::Serde { message: e.to_string() })
}

impl FakeApiServer {
    /// Starts a plain-HTTP server on an ephemeral port with default settings and the common
    /// built-in types registered (pods, configmaps, secrets, services, namespaces, nodes,
    /// events, deployments, leases (coordination.k8s.io/v1) and a few more).
    ///
    /// # Panics
    ///
    /// If it cannot bind a port on 127.0.0.1 or spawn its accept thread.
    #[must_use = "dropping the server shuts it down"]
    pub fn start() -> FakeApiServer {
        FakeApiServer::builder().start()
    }

    /// A builder for non-default settings.
    pub fn builder() -> FakeApiServerBuilder {
        FakeApiServerBuilder::default()
    }

    pub(crate) fn from_parts(shared: Arc<ServerCore>, addr: SocketAddr, accept: JoinHandle<()>) -> Self {
        FakeApiServer { shared, addr, accept: Some(accept) }
    }

    /// The base URL: `http://127.0.0.1:PORT` or `https://127.0.0.1:PORT`.
    #[must_use]
    pub fn url(&self) -> String {
        let scheme = if self.shared.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://{}", self.addr)
    }

    /// The socket address the server listens on.
    #[must_use]
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Registers (or re-registers) a resource type, e.g. a CRD.
    pub fn register(&self, rt: ResourceType) {
        self.shared.lock().store.register(rt);
    }

    fn type_index(&self, rt: &ResourceType) -> usize {
        let mut state = self.shared.lock();
        match state.store.find(&rt.group, &rt.version, &rt.plural) {
            Some(i) => i,
            None => state.store.register(rt.clone()),
        }
    }

    /// Creates an object (registering its type if needed), assigning uid, creationTimestamp
    /// and resourceVersion. A namespaced object without a namespace goes to `default`.
    ///
    /// # Errors
    ///
    /// [`FakeError::AlreadyExists`] if the name is taken; [`FakeError::Invalid`] without a name.
    pub fn create<K>(&self, obj: &K) -> Result<K, FakeError>
    where
        K: k8s_openapi::Resource + Serialize + DeserializeOwned,
    {
        let created = self.create_value(&ResourceType::of::<K>(), to_value(obj)?)?;
        from_value(&created)
    }

    /// Replaces an object (a `MODIFIED` event). A write that changes nothing keeps the
    /// resourceVersion and sends no event.
    ///
    /// # Errors
    ///
    /// [`FakeError::NotFound`]; [`FakeError::Conflict`] if `metadata.resourceVersion` is set
    /// and stale.
    pub fn replace<K>(&self, obj: &K) -> Result<K, FakeError>
    where
        K: k8s_openapi::Resource + Serialize + DeserializeOwned,
    {
        let replaced = self.replace_value(&ResourceType::of::<K>(), to_value(obj)?)?;
        from_value(&replaced)
    }

    /// Creates the object, or replaces it if it exists (ignoring its resourceVersion).
    ///
    /// # Errors
    ///
    /// As [`FakeApiServer::create`] and [`FakeApiServer::replace`].
    pub fn apply<K>(&self, obj: &K) -> Result<K, FakeError>
    where
        K: k8s_openapi::Resource + Serialize + DeserializeOwned,
    {
        let applied = self.apply_value(&ResourceType::of::<K>(), to_value(obj)?)?;
        from_value(&applied)
    }

    /// Deletes an object: with finalizers it gets a `deletionTimestamp` (`MODIFIED`),
    /// otherwise it is removed (`DELETED` with its last state and the delete's revision).
    ///
    /// # Errors
    ///
    /// [`FakeError::NotFound`].
    pub fn delete<K>(&self, namespace: Option<&str>, name: &str) -> Result<(), FakeError>
    where
        K: k8s_openapi::Resource,
    {
        self.delete_value(&ResourceType::of::<K>(), namespace, name).map(|_| ())
    }

    /// The current state of one object.
    #[must_use]
    pub fn get<K>(&self, namespace: Option<&str>, name: &str) -> Option<K>
    where
        K: k8s_openapi::Resource + DeserializeOwned,
    {
        let value = self.get_value(&ResourceType::of::<K>(), namespace, name)?;
        from_value(&value).ok()
    }

    /// Every object of the type as the server currently holds it, in key order.
    #[must_use]
    pub fn list<K>(&self) -> Vec<K>
    where
        K: k8s_openapi::Resource + DeserializeOwned,
    {
        self.list_values(&ResourceType::of::<K>()).iter().filter_map(|v| from_value(v).ok()).collect()
    }

    /// Untyped [`FakeApiServer::create`].
    ///
    /// # Errors
    ///
    /// As [`FakeApiServer::create`].
    pub fn create_value(&self, rt: &ResourceType, obj: Value) -> Result<Value, FakeError> {
        let idx = self.type_index(rt);
        let created = self.shared.lock().store.create(idx, obj, None)?;
        self.shared.notify();
        Ok((*created).clone())
    }

    /// Untyped [`FakeApiServer::replace`].
    ///
    /// # Errors
    ///
    /// As [`FakeApiServer::replace`].
    pub fn replace_value(&self, rt: &ResourceType, obj: Value) -> Result<Value, FakeError> {
        let idx = self.type_index(rt);
        let replaced = self.shared.lock().store.replace(idx, obj, None)?;
        self.shared.notify();
        Ok((*replaced).clone())
    }

    /// Untyped [`FakeApiServer::apply`].
    ///
    /// # Errors
    ///
    /// As [`FakeApiServer::apply`].
    pub fn apply_value(&self, rt: &ResourceType, mut obj: Value) -> Result<Value, FakeError> {
        let idx = self.type_index(rt);
        if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
            m.remove("resourceVersion");
        }
        let result = {
            let mut state = self.shared.lock();
            match state.store.replace(idx, obj.clone(), None) {
                Err(FakeError::NotFound { .. }) => state.store.create(idx, obj, None),
                other => other,
            }
        };
        self.shared.notify();
        Ok((*result?).clone())
    }

    /// Untyped [`FakeApiServer::delete`]; returns the object's state after the call (with a
    /// `deletionTimestamp` if finalizers keep it, else its last state).
    ///
    /// # Errors
    ///
    /// [`FakeError::NotFound`].
    pub fn delete_value(&self, rt: &ResourceType, namespace: Option<&str>, name: &str) -> Result<Value, FakeError> {
        let idx = self.type_index(rt);
        let key = store::make_key(if rt.namespaced { namespace.unwrap_or("default") } else { "" }, name);
        let result = self.shared.lock().store.delete(idx, &key);
        self.shared.notify();
        match result? {
            Deleted::Gone(obj) | Deleted::Pending(obj) => Ok((*obj).clone()),
        }
    }

    /// Untyped [`FakeApiServer::get`].
    #[must_use]
    pub fn get_value(&self, rt: &ResourceType, namespace: Option<&str>, name: &str) -> Option<Value> {
        let idx = self.type_index(rt);
        let key = store::make_key(if rt.namespaced { namespace.unwrap_or("default") } else { "" }, name);
        let state = self.shared.lock();
        state.store.types[idx].objects.get(&key).map(|v| (**v).clone())
    }

    /// Untyped [`FakeApiServer::list`].
    #[must_use]
    pub fn list_values(&self, rt: &ResourceType) -> Vec<Value> {
        let idx = self.type_index(rt);
        let state = self.shared.lock();
        state.store.types[idx].objects.values().map(|v| (**v).clone()).collect()
    }

    /// The current store-wide revision (the resourceVersion a list would report now).
    #[must_use]
    pub fn resource_version(&self) -> String {
        self.shared.lock().store.revision.to_string()
    }

    /// Forgets all change history: watches and lists from older revisions get 410, and
    /// outstanding continue tokens of older revisions expire (those at the current revision
    /// stay valid, as etcd keeps the latest revision).
    pub fn compact(&self) {
        self.shared.lock().store.compact();
        self.shared.notify();
    }

    /// Scripts a fault for the next request matching `when` (first in, first out; each fault
    /// is used once).
    pub fn push_fault(&self, when: Match, fault: Fault) {
        self.shared.lock().faults.push_back((when, fault));
    }

    /// Holds the next request matching `when` (after it is recorded in the request log, before
    /// it is handled) until the returned [`Hold`] is released or dropped, so a test can change
    /// the server while a client is between two requests. Gates are taken first in, first out.
    ///
    /// ```
    /// # use kube_watcher::testing::{FakeApiServer, Match};
    /// # use std::time::Duration;
    /// let server = FakeApiServer::start();
    /// let hold = server.hold(Match::Watch);
    /// // ... a client sends a watch; it waits at the gate ...
    /// assert!(!hold.wait_until_held(Duration::from_millis(10)));
    /// hold.release();
    /// ```
    pub fn hold(&self, when: Match) -> Hold {
        self.hold_nth(when, 0)
    }

    /// Like [`FakeApiServer::hold`], but lets the first `skip` matching requests through and
    /// holds the one after them.
    pub fn hold_nth(&self, when: Match, skip: usize) -> Hold {
        let mut state = self.shared.lock();
        let id = state.next_hold;
        state.next_hold += 1;
        state.holds.push(state::HoldSlot { id, when, skip, holding: false });
        Hold { shared: Arc::clone(&self.shared), id }
    }

    /// How many watches are paused inside a line right now ([`Fault::PauseInLine`]): the
    /// first half of the line has been sent and flushed.
    #[must_use]
    pub fn paused_lines(&self) -> usize {
        self.shared.lock().paused_lines
    }

    /// Waits up to `timeout` until at least `n` watches are paused inside a line
    /// ([`Fault::PauseInLine`]); `true` if they are.
    #[must_use]
    pub fn wait_for_paused_lines(&self, n: usize, timeout: Duration) -> bool {
        let deadline = std::time::Instant::now() + timeout;
        let mut state = self.shared.lock();
        loop {
            if state.paused_lines >= n {
                return true;
            }
            let now = std::time::Instant::now();
            if now >= deadline || self.shared.is_shutdown() {
                return false;
            }
            state = self.shared.wait(state, (deadline - now).min(Duration::from_millis(50)));
        }
    }

    /// Lets every watch paused inside a line ([`Fault::PauseInLine`]) send the rest of it.
    pub fn resume_lines(&self) {
        self.shared.lock().line_resumes += 1;
        self.shared.notify();
    }

    /// Ends every open watch cleanly (the terminating chunk), as the real server does when its
    /// watch cache is re-initialised or it shuts down gracefully. Clients see a normal end of
    /// stream. "Open" means every watch request the server has received, as
    /// [`requests`](Self::requests) shows it: also one not streaming yet, or waiting at a
    /// [`hold`](Self::hold) gate, which ends as soon as it is answered. Watches requested
    /// afterwards are not affected.
    pub fn end_watches(&self) {
        self.shared.lock().watch_epoch += 1;
        self.shared.notify();
    }

    /// Runs several writes as one burst: watches see none of them until `f` returns, and then
    /// all at once (a burst larger than [`FakeApiServerBuilder::watcher_buffer`] closes the
    /// watchers as too slow). Do not call other methods of the server inside `f`: it would
    /// deadlock.
    pub fn batch<R>(&self, f: impl FnOnce(&mut Batch<'_>) -> R) -> R {
        let result = {
            let mut batch = Batch { state: self.shared.lock() };
            f(&mut batch)
        };
        self.shared.notify();
        result
    }

    /// Forgets every fault pushed but not used yet.
    pub fn clear_faults(&self) {
        self.shared.lock().faults.clear();
    }

    /// Faults pushed but not used yet.
    #[must_use]
    pub fn pending_faults(&self) -> usize {
        self.shared.lock().faults.len()
    }

    /// Every request received so far (up to the last 100 000), oldest first.
    #[must_use]
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared.lock().requests.iter().cloned().collect()
    }

    /// Forgets the recorded requests.
    pub fn clear_requests(&self) {
        self.shared.lock().requests.clear();
    }

    /// In TLS mode, the CA certificate (PEM) that signed the server certificate.
    #[must_use]
    pub fn ca_pem(&self) -> Option<String> {
        self.shared.tls.as_ref().map(|t| t.ca_pem.clone())
    }

    /// Mints a client certificate and key (both PEM) signed by the server's CA, with the given
    /// common name (the user) and organizations (Kubernetes groups). Requests presenting it are
    /// authenticated as `common_name` (see [`RecordedRequest::user`]).
    ///
    /// # Panics
    ///
    /// If the server was not started with [`FakeApiServerBuilder::tls`], or if certificate
    /// generation fails (it does not with valid names).
    #[must_use]
    pub fn issue_client_cert(&self, common_name: &str, groups: &[&str]) -> (String, String) {
        let Some(tls) = self.shared.tls.as_ref() else {
            panic!("issue_client_cert needs a server started with tls(true)");
        };
        match tls.issue_client_cert(common_name, groups) {
            Ok(pair) => pair,
            Err(e) => panic!("{e}"),
        }
    }

    /// Accepts another bearer token, authenticating as `user`.
    pub fn add_token(&self, token: &str, user: &str) {
        self.shared.lock().tokens.push((token.to_string(), user.to_string()));
    }

    /// Accepts another bearer token, authenticating as `user`, a user with no RBAC grant: every
    /// request on a resource (list, get, watch, create, update, patch, delete) is refused with
    /// 403 `Forbidden` in kube-apiserver's words, `pods is forbidden: User "u" cannot list
    /// resource "pods" in API group "" in the namespace "ns"`. Discovery, `/version` and the
    /// health endpoints stay open to it, as the real server's default roles leave them to any
    /// authenticated user.
    ///
    /// # Examples
    /// ```
    /// use k8s_openapi::api::core::v1::Pod;
    /// use kube_watcher::{Api, Client, KubeconfigOptions, ListParams};
    ///
    /// let server = kube_watcher::testing::FakeApiServer::builder().token("admin-token").start();
    /// server.add_restricted_token("nobody-token", "nobody");
    /// let kubeconfig = server.kubeconfig().replace("admin-token", "nobody-token");
    /// let options = KubeconfigOptions { allow_http_credentials: true, ..KubeconfigOptions::default() };
    /// let client = Client::from_kubeconfig_yaml(&kubeconfig, &options)?;
    /// let pods: Api<Pod> = Api::namespaced(client, "shop");
    /// let e = pods.list(&ListParams::default()).unwrap_err();
    /// assert_eq!(e.status(), Some(403));
    /// assert!(e.to_string().contains(r#"User "nobody" cannot list resource "pods""#), "{e}");
    /// # Ok::<(), kube_watcher::Error>(())
    /// ```
    pub fn add_restricted_token(&self, token: &str, user: &str) {
        let mut state = self.shared.lock();
        state.tokens.push((token.to_string(), user.to_string()));
        state.restricted.push(user.to_string());
    }

    /// Stops accepting a bearer token (requests with it get 401 from now on).
    pub fn revoke_token(&self, token: &str) {
        self.shared.lock().tokens.retain(|(t, _)| t != token);
    }

    /// A kubeconfig (YAML) for this server, with its CA and the first token if any.
    #[must_use]
    pub fn kubeconfig(&self) -> String {
        let state = self.shared.lock();
        let token = state.tokens.first().map(|(t, _)| t.clone());
        drop(state);
        api::kubeconfig(&self.url(), self.ca_pem().as_deref(), token.as_deref())
    }

    /// How many watch streams are connected right now.
    #[must_use]
    pub fn open_watches(&self) -> usize {
        self.shared.open_watches.load(Ordering::SeqCst)
    }

    /// How many TCP connections were accepted so far.
    #[must_use]
    pub fn connections(&self) -> usize {
        self.shared.connections.load(Ordering::SeqCst)
    }
}

impl Drop for FakeApiServer {
    fn drop(&mut self) {
        server::shutdown(&self.shared, self.addr, self.accept.take());
    }
}

/// A request gate from [`FakeApiServer::hold`]; releasing or dropping it lets the held request
/// (or, if none arrived yet, the gate itself) go.
#[must_use = "dropping a Hold releases it at once"]
pub struct Hold {
    shared: Arc<ServerCore>,
    id: u64,
}

impl fmt::Debug for Hold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Hold").field("id", &self.id).field("held", &self.is_held()).finish()
    }
}

impl Hold {
    /// Whether a request is waiting at the gate right now.
    #[must_use]
    pub fn is_held(&self) -> bool {
        self.shared.lock().holds.iter().any(|h| h.id == self.id && h.holding)
    }

    /// Waits up to `timeout` for a matching request to arrive at the gate; `true` if one did.
    #[must_use]
    pub fn wait_until_held(&self, timeout: Duration) -> bool {
        let deadline = std::time::Instant::now() + timeout;
        let mut state = self.shared.lock();
        loop {
            if state.holds.iter().any(|h| h.id == self.id && h.holding) {
                return true;
            }
            let now = std::time::Instant::now();
            if now >= deadline || self.shared.is_shutdown() {
                return false;
            }
            state = self.shared.wait(state, (deadline - now).min(Duration::from_millis(50)));
        }
    }

    /// Lets the held request go (the same as dropping the `Hold`).
    pub fn release(self) {}
}

impl Drop for Hold {
    fn drop(&mut self) {
        self.shared.lock().holds.retain(|h| h.id != self.id);
        self.shared.notify();
    }
}

/// Writes made inside [`FakeApiServer::batch`]; watches see them all at once.
pub struct Batch<'a> {
    state: std::sync::MutexGuard<'a, State>,
}

impl fmt::Debug for Batch<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Batch").field("revision", &self.state.store.revision).finish()
    }
}

impl Batch<'_> {
    fn type_index(&mut self, rt: &ResourceType) -> usize {
        match self.state.store.find(&rt.group, &rt.version, &rt.plural) {
            Some(i) => i,
            None => self.state.store.register(rt.clone()),
        }
    }

    /// As [`FakeApiServer::create`].
    ///
    /// # Errors
    ///
    /// As [`FakeApiServer::create`].
    pub fn create<K>(&mut self, obj: &K) -> Result<K, FakeError>
    where
        K: k8s_openapi::Resource + Serialize + DeserializeOwned,
    {
        let idx = self.type_index(&ResourceType::of::<K>());
        let created = self.state.store.create(idx, to_value(obj)?, None)?;
        from_value(&created)
    }

    /// As [`FakeApiServer::replace`].
    ///
    /// # Errors
    ///
    /// As [`FakeApiServer::replace`].
    pub fn replace<K>(&mut self, obj: &K) -> Result<K, FakeError>
    where
        K: k8s_openapi::Resource + Serialize + DeserializeOwned,
    {
        let idx = self.type_index(&ResourceType::of::<K>());
        let replaced = self.state.store.replace(idx, to_value(obj)?, None)?;
        from_value(&replaced)
    }

    /// As [`FakeApiServer::delete`].
    ///
    /// # Errors
    ///
    /// As [`FakeApiServer::delete`].
    pub fn delete<K>(&mut self, namespace: Option<&str>, name: &str) -> Result<(), FakeError>
    where
        K: k8s_openapi::Resource,
    {
        let rt = ResourceType::of::<K>();
        let idx = self.type_index(&rt);
        let key = store::make_key(if rt.namespaced { namespace.unwrap_or("default") } else { "" }, name);
        self.state.store.delete(idx, &key).map(|_| ())
    }
}
