//! `FakeApiServerBuilder`: the server's settings, set by value, then `start` (in `server.rs`,
//! which builds the server from them).

use std::time::Duration;

#[cfg(doc)]
use super::FakeApiServer; // the doc links
use super::types::{Chunking, StreamingLists, Watch410};

/// Builder for [`FakeApiServer`]; by-value setters, then [`FakeApiServerBuilder::start`].
#[derive(Debug, Clone, Default)]
#[must_use = "a builder does nothing until start() is called"]
pub struct FakeApiServerBuilder {
    pub(super) settings: Settings,
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
    pub request_deadline: Option<Duration>,
    pub aggregated_discovery: bool,
    /// Answer JSON only (`FakeApiServerBuilder::json_only`).
    pub json_only: bool,
    /// Filter lists and watches by `shardSelector` (`FakeApiServerBuilder::sharded_list_and_watch`).
    pub sharded_list_and_watch: bool,
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
            request_deadline: None,
            aggregated_discovery: true,
            json_only: false,
            sharded_list_and_watch: false,
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

    /// Cut off a list whose response is not written in full this long after the request
    /// arrived (the connection is reset midway), as kube-apiserver's request timeout (60 s by
    /// default) cuts a long list that its client reads too slowly. Defaults to none.
    pub fn request_deadline(mut self, deadline: Duration) -> Self {
        self.settings.request_deadline = Some(deadline);
        self
    }

    /// How long a request with a too-large resourceVersion waits for the store to catch up
    /// before the 504. Defaults to 300 ms (the real server: about 3 s).
    pub fn too_large_wait(mut self, wait: Duration) -> Self {
        self.settings.too_large_wait = wait;
        self
    }

    /// Port to listen on (on 127.0.0.1). Defaults to 0, an ephemeral port.
    ///
    /// A server started again on the port of one just dropped (a restart, as in a CA rotation
    /// test) may find it taken for a moment: a child process started at that instant by another
    /// thread holds a copy of the closed listener until it runs its program. Retry
    /// [`FakeApiServerBuilder::try_start`] while it fails with `ErrorKind::AddrInUse`, as
    /// `tls_server_on` in tests/integration/auth.rs does.
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

    /// Whether `/api` and `/apis` answer a client that accepts it with aggregated discovery
    /// (`apidiscovery.k8s.io/v2`: every group, version and resource in one document), as
    /// servers since Kubernetes 1.30 do. When false they answer with the plain documents
    /// only, like older servers, and clients walk `/api/v1` and `/apis/<group>/<version>`.
    /// Defaults to true.
    pub fn aggregated_discovery(mut self, enabled: bool) -> Self {
        self.settings.aggregated_discovery = enabled;
        self
    }

    /// Whether the server answers JSON only, like an aggregated API or a proxy that cannot
    /// produce protobuf: a request that accepts nothing else gets 406 Not Acceptable. By default
    /// it answers protobuf (`application/vnd.kubernetes.protobuf`) to a client whose `Accept`
    /// header lists it first, as kube-apiserver does for its built-in kinds, for lists, gets,
    /// watches (bookmarks, streaming lists and in-stream errors too) and error `Status`es, and
    /// for metadata-only requests (`…protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1`)
    /// of every type, custom resources included; full custom resources and everything else stay
    /// JSON (docs/protocol.md §12). Defaults to false.
    pub fn json_only(mut self, enabled: bool) -> Self {
        self.settings.json_only = enabled;
        self
    }

    /// Whether the server has sharded lists and watches, as kube-apiserver 1.36 and later with
    /// the `ShardedListAndWatch` feature gate (alpha, off by default; docs/protocol.md,
    /// "Sharded lists and watches"). When true, lists and watches (streaming lists included)
    /// send only the objects whose `metadata.uid` (or `metadata.namespace`) hashes into the
    /// ranges of the `shardSelector` parameter, and lists echo it in
    /// `metadata.shardInfo.selector`; a malformed selector is refused with a 500 whose message
    /// starts with "invalid shard selector:", as the real server does. When false, like a
    /// server without the gate, the parameter is ignored. Defaults to false.
    pub fn sharded_list_and_watch(mut self, enabled: bool) -> Self {
        self.settings.sharded_list_and_watch = enabled;
        self
    }
}
