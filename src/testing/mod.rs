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
//! * writes (POST, PUT, merge PATCH, DELETE with finalizers), discovery, bearer tokens and client
//!   certificates;
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
mod demo;
mod hostile;
mod http;
mod selectors;
mod server;
mod state;
mod store;
mod tls;
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

pub use self::demo::DemoWorkload;
use self::state::{Shared, State};
use self::store::Deleted;

/// Which requests a scripted [`Fault`] applies to.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Match {
    /// Any request (that the fault can apply to; watch-only faults skip non-watch requests).
    Any,
    /// A collection GET that is not a watch.
    List,
    /// A watch (`?watch=1|true` or a legacy `/watch/` path).
    Watch,
    /// A GET of a single object.
    Get,
    /// Any request whose path (without the query) equals this string.
    Path(String),
}

/// A scripted failure for the next request matching a [`Match`] (see
/// [`FakeApiServer::push_fault`]).
///
/// Faults that only make sense on a watch (`InStreamError`, `CloseAfter`, `ResetAfter`,
/// `MalformedLine`, `Line`, `OversizedLine`, `EndlessLine`, `PauseInLine`, `DropEvents`) are only
/// taken by watch requests;
/// `TruncateBody` is only taken by non-watch GETs, `EndlessList` and `GzipBomb` only by lists.
/// All others apply to any request.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Fault {
    /// An HTTP error with a JSON `Status` body (and a `Retry-After` header when set).
    Status {
        /// HTTP status code, also the Status `code`.
        code: u16,
        /// Status `reason`, e.g. `Expired`.
        reason: String,
        /// Status `message`.
        message: String,
        /// Seconds for `Retry-After` and `details.retryAfterSeconds`.
        retry_after: Option<u32>,
    },
    /// An HTTP error with a plain-text (or HTML) body, like overload protection or a proxy.
    PlainText {
        /// HTTP status code.
        code: u16,
        /// The body, sent as is; `text/html` if it starts with `<`, else `text/plain`.
        body: String,
        /// Seconds for `Retry-After`.
        retry_after: Option<u32>,
    },
    /// 504 "Too large resource version" with the `ResourceVersionTooLarge` cause and
    /// `Retry-After: 1`.
    TooLargeResourceVersion,
    /// Watch: 200, then one `ERROR` event carrying this Status, then a clean end.
    InStreamError {
        /// Status `code`.
        code: u16,
        /// Status `reason`.
        reason: String,
        /// Status `message`.
        message: String,
    },
    /// Watch: send this many events, then end cleanly (terminating chunk).
    CloseAfter {
        /// Events to send first.
        events: usize,
    },
    /// Watch: send this many events, then a partial chunk, then reset the TCP connection.
    ResetAfter {
        /// Events to send first.
        events: usize,
    },
    /// List or GET: send the headers and part of the body, then drop the connection.
    TruncateBody,
    /// Send `200` headers (chunked) and then nothing until the client leaves or the server
    /// shuts down.
    Stall,
    /// Read the request and send nothing at all until the client leaves or shutdown.
    StallBeforeHeaders,
    /// Watch: one line that is not JSON (`<html>oops</html>`), then the stream goes on.
    MalformedLine,
    /// Watch: this line (a newline is added), then the stream goes on: an event the server's
    /// store cannot hold, such as an object without a name.
    Line(String),
    /// Watch: one line of this many bytes with no newline, then a clean end.
    OversizedLine {
        /// Length of the line.
        bytes: usize,
    },
    /// Wait this long before handling the request normally.
    DelayHeaders(Duration),
    /// Watch: 200, then one line that never ends (no newline), until the client leaves.
    EndlessLine,
    /// Watch: after `after` whole lines (events and bookmarks), the next line is cut in the
    /// middle: its first half is sent, then nothing until [`FakeApiServer::resume_lines`] (or
    /// the client leaves, or shutdown), then the rest, and the stream goes on. A slow or
    /// congested connection can pause a client's read anywhere; this pauses it where a line
    /// is half read. [`FakeApiServer::paused_lines`] tells when the pause has begun.
    PauseInLine {
        /// Whole lines to send first.
        after: usize,
    },
    /// Watch: the next `events` object events of this watch are silently lost (later events
    /// still flow and move the client past them), as a buggy proxy or server could do: the drift that
    /// [`Config::drift_check`](crate::Config::drift_check) exists to find.
    DropEvents {
        /// How many `ADDED`/`MODIFIED`/`DELETED` events to lose.
        events: usize,
    },
    /// List: 200, then an `items` array that never ends (the same small object over and over),
    /// until the client leaves.
    EndlessList,
    /// List: a gzip body (sent even if the client did not offer gzip) that inflates about
    /// 1000:1 to `bytes`: a list whose first item's name never ends.
    GzipBomb {
        /// Size once inflated.
        bytes: u64,
    },
}

/// How a `410 Gone` for a too-old watch `resourceVersion` is reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Watch410 {
    /// 200, then an `ERROR` event with code 410 (what kube-apiserver does).
    #[default]
    InStream,
    /// A plain HTTP 410 response (older or non-standard servers).
    Http,
}

/// How the server treats streaming-list requests (`sendInitialEvents=true`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum StreamingLists {
    /// Initial `ADDED` events, then the annotated bookmark, then live events.
    #[default]
    Supported,
    /// 422 Invalid, like a 1.27–1.31 (or 1.33) server with the feature gate off.
    Rejected,
    /// The parameters are ignored: a legacy watch (like servers up to 1.18 and many fakes).
    Ignored,
    /// 200, then an in-stream `ERROR` 500, like a server whose etcd is too old.
    InStreamError,
}

/// How watch events are mapped onto HTTP chunks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Chunking {
    /// One chunk per event.
    #[default]
    PerEvent,
    /// All events that are ready at once share one chunk.
    Coalesce,
    /// Every event is split over three chunks, mid-object.
    Split,
}

/// A resource type the fake serves.
///
/// Built-in types ([`ResourceType::of`]) are listed without per-item `kind`/`apiVersion`;
/// custom types ([`ResourceType::new`]) are listed with them, like CRDs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceType {
    /// API group; empty for the core group.
    pub group: String,
    /// API version, e.g. `v1`.
    pub version: String,
    /// Lowercase plural resource name used in paths, e.g. `configmaps`.
    pub plural: String,
    /// Kind, e.g. `ConfigMap`.
    pub kind: String,
    /// Whether objects live in namespaces.
    pub namespaced: bool,
    /// Kind of lists; `None` means kind + `List`.
    pub list_kind: Option<String>,
    /// Singular name for discovery; `None` means the lowercase kind.
    pub singular: Option<String>,
    /// Short names for discovery (`po`, `cm`, …).
    pub short_names: Vec<String>,
    /// Field paths usable in field selectors besides `metadata.name`/`metadata.namespace`
    /// (dotted paths into the object, e.g. `status.phase`).
    pub selectable_fields: Vec<String>,
    /// Whether this is a built-in type (list items then lack `kind`/`apiVersion`).
    pub built_in: bool,
}

impl ResourceType {
    /// A custom (CRD-like) type.
    #[must_use]
    pub fn new(group: &str, version: &str, plural: &str, kind: &str, namespaced: bool) -> Self {
        ResourceType {
            group: group.to_string(),
            version: version.to_string(),
            plural: plural.to_string(),
            kind: kind.to_string(),
            namespaced,
            list_kind: None,
            singular: None,
            short_names: Vec::new(),
            selectable_fields: Vec::new(),
            built_in: false,
        }
    }

    /// The type of a typed k8s-openapi resource, with well-known short names and selectable
    /// fields filled in.
    #[must_use]
    pub fn of<K: k8s_openapi::Resource>() -> Self {
        // The scope is a marker type; its name is the only way to read it without `'static`.
        let namespaced = std::any::type_name::<K::Scope>().ends_with("NamespaceResourceScope");
        let mut rt = ResourceType::new(K::GROUP, K::VERSION, K::URL_PATH_SEGMENT, K::KIND, namespaced);
        rt.built_in = true;
        api::well_known(&mut rt);
        rt
    }

    /// Sets the list kind.
    #[must_use]
    pub fn with_list_kind(mut self, list_kind: &str) -> Self {
        self.list_kind = Some(list_kind.to_string());
        self
    }

    /// Sets the short names reported by discovery.
    #[must_use]
    pub fn with_short_names(mut self, names: &[&str]) -> Self {
        self.short_names = names.iter().map(|s| s.to_string()).collect();
        self
    }

    /// Adds field paths usable in field selectors.
    #[must_use]
    pub fn with_selectable_fields(mut self, fields: &[&str]) -> Self {
        self.selectable_fields.extend(fields.iter().map(|s| s.to_string()));
        self
    }

    /// `group/version`, or just `version` for the core group.
    #[must_use]
    pub fn api_version(&self) -> String {
        if self.group.is_empty() { self.version.clone() } else { format!("{}/{}", self.group, self.version) }
    }

    /// The name the real server uses in messages: `plural` or `plural.group`.
    #[must_use]
    pub fn resource_name(&self) -> String {
        if self.group.is_empty() { self.plural.clone() } else { format!("{}.{}", self.plural, self.group) }
    }

    pub(crate) fn effective_list_kind(&self) -> String {
        self.list_kind.clone().unwrap_or_else(|| format!("{}List", self.kind))
    }
}

/// One request as the fake received it, with secrets redacted.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RecordedRequest {
    /// HTTP method.
    pub method: String,
    /// Path without the query, as sent (not percent-decoded).
    pub path: String,
    /// Decoded query pairs in order.
    pub query: Vec<(String, String)>,
    /// The raw query string (without `?`).
    pub raw_query: String,
    /// Headers in order, names lowercased; `Authorization`, `Proxy-Authorization` and `Cookie`
    /// values are `<redacted>`.
    pub headers: Vec<(String, String)>,
    /// Whether the request was a watch.
    pub watch: bool,
    /// The authenticated identity (token user or client-certificate common name), if any.
    pub user: Option<String>,
}

impl RecordedRequest {
    /// The first value of a query parameter.
    #[must_use]
    pub fn query_param(&self, key: &str) -> Option<&str> {
        self.query.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    /// The first value of a header (name case-insensitive).
    #[must_use]
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
}

/// Errors of the typed and untyped helpers ([`FakeApiServer::create`] and friends).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FakeError {
    /// The object does not exist.
    #[error("{resource} {name:?} not found")]
    NotFound {
        /// `plural` or `plural.group`.
        resource: String,
        /// Object name.
        name: String,
    },
    /// An object with that name exists already.
    #[error("{resource} {name:?} already exists")]
    AlreadyExists {
        /// `plural` or `plural.group`.
        resource: String,
        /// Object name.
        name: String,
    },
    /// The sent `metadata.resourceVersion` (or uid) is not the stored one.
    #[error("conflict on {resource} {name:?}: the object has been modified")]
    Conflict {
        /// `plural` or `plural.group`.
        resource: String,
        /// Object name.
        name: String,
    },
    /// The object is not acceptable.
    #[error("invalid object: {message}")]
    Invalid {
        /// What is wrong.
        message: String,
    },
    /// The object could not be converted to or from JSON.
    #[error("convert object: {message}")]
    Serde {
        /// serde_json's message.
        message: String,
    },
}

impl FakeError {
    /// The HTTP status code the real server would answer with.
    #[must_use]
    pub fn code(&self) -> u16 {
        match self {
            FakeError::NotFound { .. } => 404,
            FakeError::AlreadyExists { .. } | FakeError::Conflict { .. } => 409,
            FakeError::Invalid { .. } => 422,
            FakeError::Serde { .. } => 400,
        }
    }
}

/// Builder for [`FakeApiServer`]; by-value setters, then [`FakeApiServerBuilder::start`].
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until start() is called"]
pub struct FakeApiServerBuilder {
    settings: Settings,
}

/// Server settings (private; set through the builder).
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub bookmark_interval: Duration,
    pub history: usize,
    pub watch_410: Watch410,
    pub streaming_lists: StreamingLists,
    pub continue_ttl: Duration,
    pub watch_cache_ignores_limit: bool,
    pub max_watch_timeout: Duration,
    pub tls: bool,
    pub client_ca_required: bool,
    pub tokens: Vec<(String, String)>,
    pub chunking: Chunking,
    pub seed: u64,
    pub watcher_buffer: usize,
    pub idle_timeout: Duration,
    pub too_large_wait: Duration,
    pub port: u16,
    pub register_defaults: bool,
    pub legacy_watch_marker: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            bookmark_interval: Duration::from_secs(60),
            history: 1000,
            watch_410: Watch410::InStream,
            streaming_lists: StreamingLists::Supported,
            continue_ttl: Duration::from_secs(300),
            watch_cache_ignores_limit: true,
            max_watch_timeout: Duration::from_secs(3600),
            tls: false,
            client_ca_required: false,
            tokens: Vec::new(),
            chunking: Chunking::PerEvent,
            seed: 0x6b75_6265,
            watcher_buffer: 1000,
            idle_timeout: Duration::from_secs(90),
            too_large_wait: Duration::from_millis(300),
            port: 0,
            register_defaults: true,
            legacy_watch_marker: false,
        }
    }
}

impl FakeApiServerBuilder {
    /// How often a watcher that asked for bookmarks gets one (only if the revision moved since
    /// the last event or bookmark it was sent). Defaults to 60 s, like the real server.
    pub fn bookmark_interval(mut self, interval: Duration) -> Self {
        self.settings.bookmark_interval = interval;
        self
    }

    /// How many changes per type are retained for watch resume and for lists at older
    /// revisions; older revisions get 410. Defaults to 1000.
    pub fn history(mut self, events: usize) -> Self {
        self.settings.history = events;
        self
    }

    /// How a too-old watch revision is reported. Defaults to [`Watch410::InStream`].
    pub fn watch_410(mut self, mode: Watch410) -> Self {
        self.settings.watch_410 = mode;
        self
    }

    /// How streaming lists are treated. Defaults to [`StreamingLists::Supported`].
    pub fn streaming_lists(mut self, mode: StreamingLists) -> Self {
        self.settings.streaming_lists = mode;
        self
    }

    /// How long a continue token stays valid once a newer write has superseded its revision
    /// (then 410 with an inconsistent-continue token). A token at the current revision never
    /// expires, as etcd's compaction always keeps the latest revision; `Duration::ZERO` expires
    /// tokens at the first write after their list started. Defaults to 5 minutes, etcd's
    /// compaction interval. [`FakeApiServer::compact`] and trimmed history also expire them.
    pub fn continue_ttl(mut self, ttl: Duration) -> Self {
        self.settings.continue_ttl = ttl;
        self
    }

    /// Whether a list with `resourceVersion=0` ignores `limit` and returns everything in one
    /// page, like the real watch cache. Defaults to true.
    pub fn watch_cache_ignores_limit(mut self, ignores: bool) -> Self {
        self.settings.watch_cache_ignores_limit = ignores;
        self
    }

    /// Cap on a watch's `timeoutSeconds`; a watch without one lasts a random time between half
    /// of this and this. Defaults to 60 minutes (the real server: 30–60 minutes).
    pub fn max_watch_timeout(mut self, max: Duration) -> Self {
        self.settings.max_watch_timeout = max;
        self
    }

    /// Serve HTTPS with a generated CA ([`FakeApiServer::ca_pem`]). Defaults to false.
    pub fn tls(mut self, tls: bool) -> Self {
        self.settings.tls = tls;
        self
    }

    /// With TLS, require a client certificate signed by the CA
    /// ([`FakeApiServer::issue_client_cert`]). Defaults to false (certificates are then
    /// optional but verified when sent).
    pub fn client_ca_required(mut self, required: bool) -> Self {
        self.settings.client_ca_required = required;
        self
    }

    /// Require `Authorization: Bearer <token>` (or a client certificate); others get 401.
    /// Can be called more than once. No token is required by default.
    pub fn token(mut self, token: &str) -> Self {
        let user = format!("token-user-{}", self.settings.tokens.len() + 1);
        self.settings.tokens.push((token.to_string(), user));
        self
    }

    /// How watch events map to HTTP chunks. Defaults to [`Chunking::PerEvent`].
    pub fn chunking(mut self, chunking: Chunking) -> Self {
        self.settings.chunking = chunking;
        self
    }

    /// Seed for uids, generated names and random watch timeouts. Defaults to a fixed value.
    pub fn seed(mut self, seed: u64) -> Self {
        self.settings.seed = seed;
        self
    }

    /// How many undelivered changes a watcher may fall behind before the server closes its
    /// stream cleanly (the real server's slow-watcher policy). Defaults to 1000.
    pub fn watcher_buffer(mut self, events: usize) -> Self {
        self.settings.watcher_buffer = events.max(1);
        self
    }

    /// How long an idle keep-alive connection stays open. Defaults to 90 s.
    pub fn idle_timeout(mut self, idle: Duration) -> Self {
        self.settings.idle_timeout = idle;
        self
    }

    /// How long a request with a too-large resourceVersion waits for the store to catch up
    /// before the 504. Defaults to 300 ms (the real server: about 3 s).
    pub fn too_large_wait(mut self, wait: Duration) -> Self {
        self.settings.too_large_wait = wait;
        self
    }

    /// Port to listen on (on 127.0.0.1). Defaults to 0, an ephemeral port.
    pub fn port(mut self, port: u16) -> Self {
        self.settings.port = port;
        self
    }

    /// Whether the common built-in types are registered at start. Defaults to true.
    pub fn register_defaults(mut self, register: bool) -> Self {
        self.settings.register_defaults = register;
        self
    }

    /// Whether a plain watch with `resourceVersion` unset or `"0"` and
    /// `allowWatchBookmarks=true` ends its synthetic `ADDED` burst with the
    /// `k8s.io/initial-events-end` bookmark, as 1.32 and 1.34+ servers do (they default such
    /// watches to streaming lists). Defaults to false.
    pub fn initial_events_end_on_plain_watches(mut self, enabled: bool) -> Self {
        self.settings.legacy_watch_marker = enabled;
        self
    }

    /// Starts the server.
    ///
    /// # Panics
    ///
    /// If it cannot bind a port on 127.0.0.1, spawn its accept thread, or generate its TLS
    /// material; use [`FakeApiServerBuilder::try_start`] to get an error instead.
    pub fn start(self) -> FakeApiServer {
        match self.try_start() {
            Ok(server) => server,
            Err(e) => panic!("start fake api server: {e}"),
        }
    }

    /// Starts the server, reporting bind, thread or TLS failures as an error.
    ///
    /// # Errors
    ///
    /// When binding, spawning the accept thread or generating certificates fails.
    pub fn try_start(self) -> std::io::Result<FakeApiServer> {
        server::start(self.settings)
    }
}

/// An in-process fake Kubernetes API server. See the [module docs](self).
///
/// Dropping it shuts the server down: every connection (including stalled watches) is shut
/// down and every thread joined.
pub struct FakeApiServer {
    shared: Arc<Shared>,
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
    /// events, deployments and a few more).
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
        FakeApiServerBuilder { settings: Settings::default() }
    }

    pub(crate) fn from_parts(shared: Arc<Shared>, addr: SocketAddr, accept: JoinHandle<()>) -> Self {
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
    /// stream; watches opened afterwards are not affected.
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
    shared: Arc<Shared>,
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
