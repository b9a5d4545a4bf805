//! `Client`, `Api<K>` and the HTTP layer: every request and response goes through here (auth/ builds
//! the agents and their TLS and proxy settings; ARCHITECTURE.md lists every user of ureq).
//!
//! Every request goes through [`Http::call`]: credentials are fetched just before it, a stale
//! pooled connection is retried once, a 401 refreshes credentials once, and any non-2xx answer
//! becomes an [`Error::Api`] built from its `Status` body.

use std::io::{self, BufRead, BufReader, Read};
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::NamespaceResourceScope;
use ureq::http::Response;
use ureq::{Body, BodyReader};

use std::path::Path;

use crate::auth::{self, Connection, Credentials, Failure, KubeconfigOptions, KubeconfigSource, RootSet, Secret};
use crate::config::DEFAULT_MAX_LIST_BYTES;
use crate::error::{Error, Result};
use crate::resource::{ApiResource, PartialObjectMetadata, Watchable};
use crate::wire::decode::{self, Line, ListError, ListMeta};
use crate::wire::request::{self, ListParams, WatchParams};

/// Bound on an error body we read to explain a non-2xx answer.
const MAX_ERROR_BODY: u64 = 1 << 20;
/// Bound on one object from a GET.
const MAX_OBJECT_BYTES: u64 = 64 << 20;
/// Idle limit for non-watch requests: the API server answers them within 60 s or gives up.
const REQUEST_IDLE: Duration = Duration::from_secs(70);

/// A connection to one Kubernetes API server, as one user.
///
/// Cheap to clone: it holds resolved settings and credentials. Each watcher builds its own HTTP
/// agent from them, so stopping one watcher never disturbs another.
///
/// ```
/// # let server = kube_watcher::testing::FakeApiServer::start();
/// # let url = server.url();
/// let client = kube_watcher::Client::from_url(&url)?; // e.g. "http://127.0.0.1:8001" for kubectl proxy
/// assert_eq!(client.default_namespace(), "default");
/// # Ok::<(), kube_watcher::Error>(())
/// ```
#[derive(Clone)]
pub struct Client {
    pub(crate) conn: Arc<Connection>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("server", &self.conn.server)
            .field("default_namespace", &self.conn.default_namespace)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// A client configured the way kubectl finds its configuration: `$KUBECONFIG` (merged),
    /// else `~/.kube/config`, else the in-cluster service account.
    ///
    /// Only reads files and environment variables: exec plugins run before the first request.
    /// The first file that defines a cluster, user or context name wins, and so does the first
    /// non-empty `current-context`; missing files in `$KUBECONFIG` are skipped. The in-cluster
    /// configuration is used only when no kubeconfig exists or none selects a context.
    ///
    /// The default namespace is the context's `namespace`; else, inside a pod, `$POD_NAMESPACE`
    /// or the service account's namespace; else `default`.
    ///
    /// # Errors
    /// [`Error::Auth`] naming the file and field when a kubeconfig is broken, or listing every
    /// source tried when there is no configuration at all.
    ///
    /// # Examples
    /// ```no_run
    /// let client = kube_watcher::Client::try_default()?;
    /// println!("default namespace: {}", client.default_namespace());
    /// # Ok::<(), kube_watcher::Error>(())
    /// ```
    pub fn try_default() -> Result<Client> {
        Ok(Client { conn: Arc::new(auth::default_connection()?) })
    }

    /// A client for the API server of the cluster this process runs in, authenticated as the
    /// pod's service account (token re-read as the kubelet rotates it). `ca.crt` is read again
    /// when the server's certificate is not signed by it, so a rotated cluster CA is trusted
    /// once the kubelet has updated the file (docs/auth.md §7.2).
    ///
    /// # Errors
    /// [`Error::Auth`] when `KUBERNETES_SERVICE_HOST`/`KUBERNETES_SERVICE_PORT` are unset, or the
    /// service-account token or `ca.crt` cannot be read.
    ///
    /// # Examples
    /// ```no_run
    /// let client = kube_watcher::Client::in_cluster()?;
    /// # Ok::<(), kube_watcher::Error>(())
    /// ```
    pub fn in_cluster() -> Result<Client> {
        Ok(Client { conn: Arc::new(auth::in_cluster_connection()?) })
    }

    /// A client from `$KUBECONFIG` (merged) or `~/.kube/config`, with `options` overriding the
    /// context, cluster, user or namespace. Never falls back to the in-cluster configuration.
    ///
    /// # Errors
    /// [`Error::Auth`] naming the file and field at fault, or when no file exists or none
    /// selects a context.
    ///
    /// # Examples
    /// ```no_run
    /// use kube_watcher::{Client, KubeconfigOptions};
    ///
    /// let options = KubeconfigOptions { context: Some("kind-kind".into()), ..Default::default() };
    /// let client = Client::from_kubeconfig(&options)?;
    /// # Ok::<(), kube_watcher::Error>(())
    /// ```
    pub fn from_kubeconfig(options: &KubeconfigOptions) -> Result<Client> {
        Self::from_source(KubeconfigSource::Default, options)
    }

    /// A client from the kubeconfig file at `path` only (like `kubectl --kubeconfig`): the file
    /// must exist, and no other file is merged. Relative paths inside it are resolved against its
    /// directory.
    ///
    /// The kubeconfig is read once. A cluster's `certificate-authority` file is read again when
    /// the server's certificate is not signed by it (a rotated CA, docs/auth.md §7.2); inline
    /// `certificate-authority-data` never is. The same holds for every `from_kubeconfig*` and
    /// [`try_default`](Self::try_default).
    ///
    /// # Errors
    /// [`Error::Auth`] naming the file (and the field) when it is missing, unreadable, invalid,
    /// selects no context, or its credentials cannot be loaded.
    ///
    /// # Examples
    /// ```
    /// # let server = kube_watcher::testing::FakeApiServer::start();
    /// # let dir = std::env::temp_dir().join(format!("kw-doc-{}", std::process::id()));
    /// # std::fs::create_dir_all(&dir).unwrap();
    /// # let path = dir.join("config");
    /// # std::fs::write(&path, server.kubeconfig()).unwrap();
    /// use kube_watcher::{Client, KubeconfigOptions};
    ///
    /// let client = Client::from_kubeconfig_path(&path, &KubeconfigOptions::default())?;
    /// assert_eq!(client.default_namespace(), "default");
    /// # std::fs::remove_dir_all(&dir).unwrap();
    /// # Ok::<(), kube_watcher::Error>(())
    /// ```
    pub fn from_kubeconfig_path(path: impl AsRef<Path>, options: &KubeconfigOptions) -> Result<Client> {
        Self::from_source(KubeconfigSource::Path(path.as_ref()), options)
    }

    /// A client from kubeconfig text held in memory (YAML or JSON). Relative paths in it are
    /// relative to the working directory.
    ///
    /// # Errors
    /// [`Error::Auth`] naming the field at fault, as for a file.
    ///
    /// # Examples
    /// ```
    /// # let server = kube_watcher::testing::FakeApiServer::start();
    /// use kube_watcher::{Client, KubeconfigOptions};
    ///
    /// let yaml = server.kubeconfig(); // a kubeconfig with one cluster, user and context
    /// let options = KubeconfigOptions { namespace: Some("shop".into()), ..Default::default() };
    /// let client = Client::from_kubeconfig_yaml(&yaml, &options)?;
    /// assert_eq!(client.default_namespace(), "shop");
    /// # Ok::<(), kube_watcher::Error>(())
    /// ```
    pub fn from_kubeconfig_yaml(yaml: &str, options: &KubeconfigOptions) -> Result<Client> {
        Self::from_source(KubeconfigSource::Yaml(yaml), options)
    }

    fn from_source(source: KubeconfigSource<'_>, options: &KubeconfigOptions) -> Result<Client> {
        Ok(Client { conn: Arc::new(auth::kubeconfig_connection(source, options)?) })
    }
}

impl Client {
    /// A client for the API server at `url` (`http://` or `https://`, with an optional path
    /// prefix), without credentials: for `kubectl proxy`, the fake server, or an open endpoint.
    ///
    /// User info in the URL (`https://user:password@host`, percent-encoded) is a credential: it
    /// is sent as HTTP Basic authentication, only over `https://`, and is taken out of the URL,
    /// so it never appears in `Debug` output, logs or errors (docs/auth.md §2).
    ///
    /// # Errors
    /// [`Error::Config`] naming `url` when it has no scheme or host, or when it carries user info
    /// over plain `http://`.
    pub fn from_url(url: &str) -> Result<Client> {
        Ok(Client { conn: Arc::new(Connection::from_url(url)?) })
    }

    /// The same client, sending `token` as a bearer token on every request.
    ///
    /// # Errors
    /// [`Error::Config`] when the server URL is plain `http://`: credentials are only sent over
    /// TLS.
    pub fn with_token(self, token: &str) -> Result<Client> {
        if !self.conn.is_https() {
            return Err(Error::config("token", "refusing to send a bearer token over plain http://; use https://"));
        }
        let token = token.trim();
        if token.is_empty() || token.chars().any(|c| c.is_control()) {
            return Err(Error::config("token", "empty or contains control characters"));
        }
        let mut conn = (*self.conn).clone();
        conn.credentials = Credentials::Token(Secret::new(token));
        Ok(Client { conn: Arc::new(conn) })
    }

    /// The namespace that [`Api::default_namespaced`] uses.
    #[must_use]
    pub fn default_namespace(&self) -> &str {
        &self.conn.default_namespace
    }
}

/// One resource type on one server, in one namespace or across all of them.
///
/// ```
/// # let server = kube_watcher::testing::FakeApiServer::start();
/// use kube_watcher::{Api, Client};
/// use k8s_openapi::api::core::v1::Pod;
///
/// let client = Client::from_url(&server.url())?;
/// let pods: Api<Pod> = Api::namespaced(client.clone(), "apps");
/// let all_pods: Api<Pod> = Api::all(client);
/// # let _ = (pods, all_pods);
/// # Ok::<(), kube_watcher::Error>(())
/// ```
pub struct Api<K> {
    pub(crate) client: Client,
    pub(crate) resource: ApiResource,
    pub(crate) namespace: Option<String>,
    /// Ask for `PartialObjectMetadata` instead of full objects (`metadata_watcher`).
    pub(crate) metadata_only: bool,
    _kind: PhantomData<fn() -> K>,
}

impl<K> Clone for Api<K> {
    fn clone(&self) -> Self {
        Api {
            client: self.client.clone(),
            resource: self.resource.clone(),
            namespace: self.namespace.clone(),
            metadata_only: self.metadata_only,
            _kind: PhantomData,
        }
    }
}

impl<K> std::fmt::Debug for Api<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Api")
            .field("resource", &self.resource.plural)
            .field("api_version", &self.resource.api_version)
            .field("namespace", &self.namespace)
            .finish()
    }
}

impl<K: k8s_openapi::Resource> Api<K> {
    /// Every object of this type: across all namespaces, or cluster-scoped.
    #[must_use]
    pub fn all(client: Client) -> Self {
        Self::all_with(client, &ApiResource::of::<K>())
    }

    /// The objects in `namespace`.
    #[must_use]
    pub fn namespaced(client: Client, namespace: &str) -> Self
    where
        K: k8s_openapi::Resource<Scope = NamespaceResourceScope>,
    {
        Self::namespaced_with(client, namespace, &ApiResource::of::<K>())
    }

    /// The objects in the client's default namespace.
    #[must_use]
    pub fn default_namespaced(client: Client) -> Self
    where
        K: k8s_openapi::Resource<Scope = NamespaceResourceScope>,
    {
        let ns = client.default_namespace().to_owned();
        Self::namespaced(client, &ns)
    }
}

impl<K> Api<K> {
    /// Every object of the type `resource` describes (for dynamic objects and custom resources).
    #[must_use]
    pub fn all_with(client: Client, resource: &ApiResource) -> Self {
        Api { client, resource: resource.clone(), namespace: None, metadata_only: false, _kind: PhantomData }
    }

    /// The objects of type `resource` in `namespace`.
    #[must_use]
    pub fn namespaced_with(client: Client, namespace: &str, resource: &ApiResource) -> Self {
        let namespace = resource.namespaced.then(|| namespace.to_owned());
        Api { client, resource: resource.clone(), namespace, metadata_only: false, _kind: PhantomData }
    }

    /// The resource type's address.
    #[must_use]
    pub fn resource(&self) -> &ApiResource {
        &self.resource
    }

    /// The namespace, or `None` for all namespaces / cluster-scoped.
    #[must_use]
    pub fn namespace(&self) -> Option<&str> {
        self.namespace.as_deref()
    }

    /// The same type and namespace, listed, watched and read as metadata only
    /// ([`PartialObjectMetadata`], requested with the `Accept` header; docs/protocol.md §8).
    ///
    /// [`metadata_watcher`](crate::metadata_watcher) is `Watcher::new(api.into_metadata(), config)`;
    /// use this with [`Watcher::builder`](crate::Watcher::builder) for its other options.
    #[must_use]
    pub fn into_metadata(self) -> Api<PartialObjectMetadata<K>> {
        Api {
            client: self.client,
            resource: self.resource,
            namespace: self.namespace,
            metadata_only: true,
            _kind: PhantomData,
        }
    }

    pub(crate) fn describe(&self, verb: &str) -> String {
        request::describe(verb, &self.resource, self.namespace.as_deref())
    }
}

/// One page of a list: its items, the list's resourceVersion and the continue token.
#[derive(Debug, Clone)]
pub struct ObjectList<K> {
    /// The objects.
    pub items: Vec<K>,
    /// The list's resourceVersion: watch from here to see every later change.
    pub resource_version: Option<String>,
    /// The token for the next page, if there is one.
    pub continue_token: Option<String>,
}

impl<K: Watchable> Api<K> {
    /// Lists objects once (one page when `params.limit` is set). Blocks for the request.
    ///
    /// # Errors
    /// [`Error::Api`] when the server refuses (with its status and message), [`Error::Transport`]
    /// when it cannot be reached, [`Error::Decode`] when an item does not decode as `K`.
    pub fn list(&self, params: &ListParams) -> Result<ObjectList<K>> {
        let http = Http::new(Arc::clone(&self.client.conn));
        let mut items = Vec::new();
        let context = self.describe("list");
        let mut scratch = decode::Scratch::default();
        let meta = http.list::<_, Error>(self, params, |item| {
            let obj = decode::item::<K>(item, &mut scratch)
                .map_err(|e| Error::Decode(Box::new(decode::decode_error(&context, None, item.bytes, e))))?;
            items.push(obj);
            Ok(())
        })?;
        Ok(ObjectList { items, resource_version: meta.resource_version, continue_token: meta.continue_token })
    }

    /// Reads one object by name. Blocks for the request.
    ///
    /// # Errors
    /// A missing object is an [`Error::Api`] with `status() == Some(404)`.
    pub fn get(&self, name: &str) -> Result<K> {
        let http = Http::new(Arc::clone(&self.client.conn));
        let context = format!("get {} {name:?}", self.resource.kind);
        let path = request::object_path(&self.resource, self.namespace.as_deref(), name);
        let accept = if self.metadata_only { request::ACCEPT_METADATA } else { request::ACCEPT_JSON };
        let bytes = http.get_bytes(&path, &context, accept)?;
        decode::object(&bytes, &mut decode::Scratch::default())
            .map_err(|e| Error::Decode(Box::new(decode::decode_error(&context, None, &bytes, e))))
    }
}

/// The HTTP side of one watcher (or one call): an agent of its own, so `shutdown` stops only it.
pub(crate) struct Http {
    agent: ureq::Agent,
    /// The CAs `agent` trusts; a request made after the CA file was re-read brings its own TLS
    /// configuration instead ([`Connection::request_tls`]).
    agent_roots: RootSet,
    conn: Arc<Connection>,
    /// The longest watch line or list item accepted (`Config::max_line`).
    max_line: usize,
}

/// What reading a watch stream produced.
pub(crate) enum StreamItem<'a> {
    /// One complete line (an event), without its newline.
    Line(&'a [u8], u64),
    /// The server ended the stream cleanly.
    End,
    /// No byte arrived within the idle time; reading may go on.
    Idle,
    /// The stream broke.
    Failed(Error),
}

/// An open watch response, read line by line with a bounded, reused buffer.
///
/// Its read timeout is fixed when the request is made (ureq cannot change it on an open
/// response): a streaming list keeps the short end-marker wait for the life of the stream. So a
/// read timeout is never the end of a stream: [`next_line`](Self::next_line) answers `Idle`, the
/// line in progress is kept, and the worker's state machine, which knows which phase the stream
/// is in, decides whether the silence has lasted too long.
pub(crate) struct WatchStream {
    reader: BufReader<BodyReader<'static>>,
    buf: Vec<u8>,
    /// `buf` holds the start of a line that a read timeout interrupted (or that
    /// [`line_ready`](Self::line_ready) read as far as the bytes received went): read on into it.
    partial: bool,
    /// What [`line_ready`](Self::line_ready) found without waiting, for the next
    /// [`next_line`](Self::next_line) to return.
    ready: Option<Outcome>,
    line: u64,
    max_line: usize,
    context: String,
}

/// A [`StreamItem`] that does not borrow the line (which stays in `WatchStream::buf`).
enum Outcome {
    Line(u64),
    End,
    Idle,
    Failed(Error),
}

/// The bytes a `BufReader` already holds, readable without waiting for the network: reading
/// past them is `WouldBlock` (and `read_line` keeps what it read of the line).
struct Buffered<'a, R>(&'a mut BufReader<R>);

impl<R: Read> Read for Buffered<'_, R> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        let n = {
            let available = self.fill_buf()?;
            let n = available.len().min(out.len());
            out[..n].copy_from_slice(&available[..n]);
            n
        };
        self.consume(n);
        Ok(n)
    }
}

impl<R: Read> BufRead for Buffered<'_, R> {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        match self.0.buffer() {
            [] => Err(io::ErrorKind::WouldBlock.into()),
            available => Ok(available),
        }
    }

    fn consume(&mut self, n: usize) {
        self.0.consume(n);
    }
}

impl WatchStream {
    /// Reads on as far as the bytes already received go, without waiting for the network
    /// (skipping blank keep-alive lines); true when that completed an event line (or found the
    /// end), so that the next [`next_line`](Self::next_line) returns at once. False means the
    /// next `next_line` waits for the network: the worker hands over what it holds back first.
    pub(crate) fn line_ready(&mut self) -> bool {
        if self.ready.is_none() {
            self.ready = self.advance(false);
        }
        self.ready.is_some()
    }

    pub(crate) fn next_line(&mut self) -> StreamItem<'_> {
        let outcome = match self.ready.take() {
            Some(outcome) => outcome,
            // Cannot be `None`: only a read that must not wait stops short.
            None => self.advance(true).unwrap_or(Outcome::Idle),
        };
        match outcome {
            Outcome::Line(n) => StreamItem::Line(&self.buf, n),
            Outcome::End => StreamItem::End,
            Outcome::Idle => StreamItem::Idle,
            Outcome::Failed(e) => StreamItem::Failed(e),
        }
    }

    /// Reads the next event line into `buf`. `wait`: whether it may wait for the network;
    /// without, `None` when the bytes received so far hold no complete line (what they hold of
    /// one is kept in `buf`).
    fn advance(&mut self, wait: bool) -> Option<Outcome> {
        loop {
            if !std::mem::take(&mut self.partial) {
                self.buf.clear();
            }
            let read = if wait {
                decode::read_line(&mut self.reader, &mut self.buf, self.max_line)
            } else {
                decode::read_line(&mut Buffered(&mut self.reader), &mut self.buf, self.max_line)
            };
            match read {
                Ok(Line::Complete) => {
                    self.line += 1;
                    // Tolerate CRLF and blank keep-alive lines.
                    while self.buf.last() == Some(&b'\r') {
                        self.buf.pop();
                    }
                    if !self.buf.iter().all(u8::is_ascii_whitespace) {
                        return Some(Outcome::Line(self.line));
                    }
                }
                Ok(Line::End) if self.buf.iter().all(u8::is_ascii_whitespace) => return Some(Outcome::End),
                Ok(Line::End) => {
                    return Some(Outcome::Failed(Error::transport(
                        self.context.as_str(),
                        format!(
                            "stream ended inside an event after {} bytes of line {}",
                            self.buf.len(),
                            self.line + 1
                        ),
                    )));
                }
                Ok(Line::TooLong) => {
                    return Some(Outcome::Failed(Error::Decode(Box::new(decode::decode_error(
                        &self.context,
                        Some(self.line + 1),
                        &self.buf,
                        format!("line longer than the {} byte limit", self.max_line),
                    )))));
                }
                Err(e) if !wait && e.kind() == io::ErrorKind::WouldBlock => {
                    self.partial = true;
                    return None;
                }
                Err(e) => {
                    return Some(match ureq::Error::from(e) {
                        ureq::Error::Timeout(ureq::Timeout::PerRead) => {
                            self.partial = true;
                            Outcome::Idle
                        }
                        other => Outcome::Failed(ureq_error(&self.context, other)),
                    });
                }
            }
        }
    }
}

impl Http {
    pub(crate) fn new(conn: Arc<Connection>) -> Http {
        let (agent, agent_roots) = conn.agent();
        Http { agent, agent_roots, conn, max_line: crate::config::DEFAULT_MAX_LINE }
    }

    /// The same, accepting watch lines and list items of up to `max_line` bytes.
    pub(crate) fn with_max_line(conn: Arc<Connection>, max_line: usize) -> Http {
        Http { max_line, ..Http::new(conn) }
    }

    /// The agent; `agent().clone().shutdown()` interrupts any blocked call on it, now and
    /// forever (docs/http.md §3).
    pub(crate) fn agent(&self) -> &ureq::Agent {
        &self.agent
    }

    /// GETs `path` (on the server, e.g. a discovery document) and returns its body, bounded.
    pub(crate) fn get_bytes(&self, path: &str, context: &str, accept: &str) -> Result<Vec<u8>> {
        self.get_typed(path, context, accept).map(|(bytes, _)| bytes)
    }

    /// [`get_bytes`](Self::get_bytes), with the answer's `Content-Type` ("" when it has none):
    /// what tells which of the accepted forms the server chose.
    pub(crate) fn get_typed(&self, path: &str, context: &str, accept: &str) -> Result<(Vec<u8>, String)> {
        let url = self.url(path, "");
        let res = self.call(&url, context, REQUEST_IDLE, false, accept)?;
        let content_type =
            res.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
        let mut bytes = Vec::new();
        res.into_body()
            .into_with_config()
            .limit(MAX_OBJECT_BYTES)
            .reader()
            .read_to_end(&mut bytes)
            .map_err(|e| io_error(context, e))?;
        Ok((bytes, content_type))
    }

    /// The full URL of an API path (keeping the server URL's own path prefix) and query.
    fn url(&self, path: &str, query: &str) -> String {
        format!("{}{path}{query}", self.conn.server)
    }

    /// Lists one page of `api`, handing each item's bytes to `on_item` as it streams in. An
    /// `Err` from `on_item` ends the read and is returned as it is.
    pub(crate) fn list<K, E: From<Error>>(
        &self,
        api: &Api<K>,
        params: &ListParams,
        mut on_item: impl FnMut(decode::Item<'_>) -> Result<(), E>,
    ) -> Result<ListMeta, E> {
        let context = api.describe("list");
        let url = self.url(&request::collection_path(&api.resource, api.namespace.as_deref()), &params.query());
        let accept = if api.metadata_only { request::ACCEPT_METADATA_LIST } else { request::ACCEPT_JSON };
        let res = self.call(&url, &context, REQUEST_IDLE, false, accept)?;
        let reader = Capped { inner: res.into_body().into_reader(), left: DEFAULT_MAX_LIST_BYTES };
        decode::list(reader, self.max_line, &mut on_item).map_err(|e| match e {
            ListError::Io(e) => io_error(&context, e).into(),
            ListError::Malformed { message, offset, snippet } => Error::Decode(Box::new(crate::error::DecodeError {
                context,
                line: None,
                len: offset as usize,
                message: format!("{message} (at byte {offset})"),
                snippet,
            }))
            .into(),
            ListError::Item(e) => e,
        })
    }

    /// Opens a watch on `api`; `idle` bounds the silence between two reads: past it,
    /// [`WatchStream::next_line`] answers `Idle` (for the whole life of the stream).
    pub(crate) fn watch<K>(&self, api: &Api<K>, params: &WatchParams, idle: Duration) -> Result<WatchStream> {
        let context = api.describe("watch");
        let url = self.url(&request::collection_path(&api.resource, api.namespace.as_deref()), &params.query());
        let accept = if api.metadata_only { request::ACCEPT_METADATA } else { request::ACCEPT_JSON };
        let res = self.call(&url, &context, idle, true, accept)?;
        Ok(WatchStream {
            ready: None,
            reader: BufReader::with_capacity(64 * 1024, res.into_body().into_reader()),
            buf: Vec::with_capacity(16 * 1024),
            partial: false,
            line: 0,
            max_line: self.max_line,
            context,
        })
    }

    /// One GET with credentials; non-2xx answers become `Error::Api`.
    fn call(&self, url: &str, context: &str, idle: Duration, watch: bool, accept: &str) -> Result<Response<Body>> {
        let mut refreshed = false;
        let mut retried = false;
        let mut reread_ca = false;
        loop {
            let auth = self.conn.request_auth()?;
            // The CAs of now: the CA file may have been re-read since the agent was built.
            let roots = self.conn.tls.roots();
            let mut req = self.agent.get(url).header("Accept", accept);
            if watch {
                // Watches are not compressed by the server; ask for identity so a future
                // multi-member gzip stream never meets a single-member decoder.
                req = req.header("Accept-Encoding", "identity");
            }
            for (name, value) in &auth.headers {
                req = req.header(name.as_str(), value.expose());
            }
            let mut cfg = req.config().timeout_per_read(Some(idle));
            // A certificate from an exec plugin can change at any refresh, and a CA file can be
            // re-read, so these are set per request (such connections are not pooled; the
            // agent's stop still reaches them).
            if let Some(tls) = self.conn.request_tls(&roots, &self.agent_roots, auth.client_cert) {
                cfg = cfg.tls_config(tls);
            }
            if !watch {
                cfg = cfg.timeout_recv_response(Some(REQUEST_IDLE));
            }
            log::trace!("GET {context}");
            let res = match cfg.build().call() {
                Ok(res) => res,
                Err(ureq::Error::Io(e)) if !retried && is_stale_connection(&e) => {
                    // A pooled connection the server had just closed: retry once (ureq does not).
                    log::debug!("{context}: {e}; retrying once on a fresh connection");
                    retried = true;
                    continue;
                }
                Err(e) => {
                    let failure = Failure::of(&e);
                    if matches!(failure, Some(Failure::CertificateRefused(_)))
                        && !refreshed
                        && self.conn.client_cert_may_refresh()
                    {
                        // An exec plugin's certificate the server no longer accepts: run it again.
                        log::debug!("{context}: client certificate refused; refreshing it once");
                        refreshed = true;
                        continue;
                    }
                    if failure == Some(Failure::Untrusted) && !reread_ca && self.conn.tls.reload_ca(&roots) {
                        // The CA file changed (a rotated cluster CA): retry at once with it. An
                        // unchanged file gives the error, and the caller's backoff spaces the
                        // next read.
                        log::debug!("{context}: server certificate not trusted; the CA file changed, retrying once");
                        reread_ca = true;
                        continue;
                    }
                    let message = match failure {
                        Some(f) => format!("{}: {}", self.conn.explain(&f), ureq_message(&e)),
                        None => ureq_message(&e),
                    };
                    return Err(Error::transport(context, message));
                }
            };
            let code = res.status().as_u16();
            // Deprecation and other advisories (`299 - "text"`): worth a log line, never an error.
            for warning in res.headers().get_all("warning") {
                log::debug!("{context}: server warning: {}", String::from_utf8_lossy(warning.as_bytes()));
            }
            if (200..300).contains(&code) {
                return Ok(res);
            }
            let retry_after = res.headers().get("retry-after").and_then(|v| parse_retry_after(v.as_bytes()));
            let mut body = Vec::new();
            // The body only explains the status; a failure to read it leaves the status standing.
            let _ = res.into_body().into_with_config().limit(MAX_ERROR_BODY).reader().read_to_end(&mut body);
            if code == 401 && !refreshed && self.conn.refresh_after_unauthorized() {
                refreshed = true;
                continue;
            }
            let e = decode::http_error(context, code, &body, retry_after);
            if code == 401 || code == 403 {
                log::warn!("{e}");
            }
            return Err(Error::Api(Box::new(e)));
        }
    }
}

/// A `Retry-After` header as the API server sends it: a whole number of seconds. Anything else
/// (negative, a word, an HTTP date, empty) counts as absent; a huge value is kept as it is and
/// bounded where it is used (`Machine::server_wait`).
fn parse_retry_after(value: &[u8]) -> Option<Duration> {
    let text = std::str::from_utf8(value).ok()?.trim();
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // All digits: only too many of them fails, and that is "wait forever", bounded at use.
    Some(Duration::from_secs(text.parse::<u64>().unwrap_or(u64::MAX)))
}

fn is_stale_connection(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionReset
            | io::ErrorKind::UnexpectedEof
            | io::ErrorKind::BrokenPipe
            | io::ErrorKind::ConnectionAborted
    )
}

fn ureq_message(e: &ureq::Error) -> String {
    match e {
        ureq::Error::Timeout(t) => format!("timed out ({t})"),
        ureq::Error::Io(io) => io.to_string(),
        other => other.to_string(),
    }
}

fn ureq_error(context: &str, e: ureq::Error) -> Error {
    Error::transport(context, ureq_message(&e))
}

fn io_error(context: &str, e: io::Error) -> Error {
    ureq_error(context, ureq::Error::from(e))
}

/// Caps the decoded bytes of a body (gzip limits count compressed bytes; docs/http.md §1).
struct Capped<R> {
    inner: R,
    left: u64,
}

impl<R: Read> Read for Capped<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.left == 0 {
            return Err(io::Error::other(format!("body larger than {DEFAULT_MAX_LIST_BYTES} bytes")));
        }
        let max = buf.len().min(usize::try_from(self.left).unwrap_or(usize::MAX));
        let n = self.inner.read(&mut buf[..max])?;
        self.left -= n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_is_whole_seconds_or_absent() {
        assert_eq!(parse_retry_after(b" 7 "), Some(Duration::from_secs(7)));
        assert_eq!(parse_retry_after(b"18446744073709551615"), Some(Duration::from_secs(u64::MAX)));
        assert_eq!(parse_retry_after(b"99999999999999999999999"), Some(Duration::from_secs(u64::MAX)));
        for absent in [&b""[..], b"-5", b"soon", b"Wed, 21 Oct 2026 07:28:00 GMT", b"1.5", b"+3", b"\xff"] {
            assert_eq!(parse_retry_after(absent), None, "{}", String::from_utf8_lossy(absent));
        }
    }
}

#[cfg(all(test, feature = "testing"))]
mod stream_tests {
    use std::time::Instant;

    use k8s_openapi::api::core::v1::Pod;
    use serde_json::Value;

    use super::*;
    use crate::testing::{FakeApiServer, Fault, Match};

    /// The bound on any wait: generous for a slow, noisy 2-core CI machine.
    const WAIT: Duration = Duration::from_secs(20);

    fn pod(name: &str) -> Pod {
        let mut p = Pod::default();
        p.metadata.name = Some(name.to_owned());
        p.metadata.namespace = Some("apps".to_owned());
        p
    }

    /// The next line that is not `Idle`, as JSON.
    fn next_event(stream: &mut WatchStream) -> Value {
        let deadline = Instant::now() + WAIT;
        loop {
            match stream.next_line() {
                StreamItem::Line(bytes, _) => {
                    return serde_json::from_slice(bytes)
                        .unwrap_or_else(|e| panic!("{e}: {:?}", String::from_utf8_lossy(bytes)));
                }
                StreamItem::Idle => assert!(Instant::now() < deadline, "no line within {WAIT:?}"),
                StreamItem::End => panic!("the stream ended"),
                StreamItem::Failed(e) => panic!("{e}"),
            }
        }
    }

    /// Reads while the server is paused inside a line: a read must time out (nothing else comes),
    /// with the first half of the line kept; then resumes the server and returns the line.
    fn read_through_a_pause(server: &FakeApiServer, stream: &mut WatchStream) -> Value {
        assert!(server.wait_for_paused_lines(1, WAIT), "the server did not pause");
        let deadline = Instant::now() + WAIT;
        let mut half = Vec::new();
        let mut idles_with_half = 0;
        // The half line was sent before the pause began: wait until it has been read, then
        // time out twice more with it kept.
        while idles_with_half < 2 {
            assert!(matches!(stream.next_line(), StreamItem::Idle), "a line arrived during the pause");
            if half.is_empty() {
                half.clone_from(&stream.buf);
            } else {
                let (now, before) = (String::from_utf8_lossy(&stream.buf), String::from_utf8_lossy(&half));
                assert_eq!(now, before, "the start of the line was lost at a read timeout");
                idles_with_half += 1;
            }
            assert!(Instant::now() < deadline, "the half line never arrived");
        }
        server.resume_lines();
        next_event(stream)
    }

    /// After a streaming list the stream keeps the short end-marker read
    /// timeout, so a pause inside a later line times a read out; the line must still arrive
    /// whole (the bytes before the pause were dropped, and the rest decoded as garbage).
    #[test]
    fn a_line_paused_past_the_read_timeout_after_a_streaming_list_arrives_whole() {
        let server = FakeApiServer::builder().bookmark_interval(Duration::from_secs(3600)).start();
        server.create(&pod("a")).unwrap();
        // ADDED a, then the end marker, then the line to pause in.
        server.push_fault(Match::Watch, Fault::PauseInLine { after: 2 });
        let api: Api<Pod> = Api::all(Client::from_url(&server.url()).unwrap());
        let http = Http::new(Arc::clone(&api.client.conn));
        let params = WatchParams {
            timeout: Duration::from_secs(600),
            bookmarks: true,
            send_initial_events: true,
            ..WatchParams::default()
        };
        let mut stream = http.watch(&api, &params, Duration::from_millis(100)).unwrap();
        assert_eq!(next_event(&mut stream)["type"], "ADDED");
        let marker = next_event(&mut stream);
        assert_eq!(marker["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"], "true");
        server.create(&pod("b")).unwrap();
        let event = read_through_a_pause(&server, &mut stream);
        assert_eq!(event["type"], "ADDED");
        assert_eq!(event["object"]["metadata"]["name"], "b");
        // The stream goes on.
        server.create(&pod("c")).unwrap();
        assert_eq!(next_event(&mut stream)["object"]["metadata"]["name"], "c");
    }

    /// A server that accepts the connection and then says nothing: the request times out after
    /// connecting, which must not be explained as a failure to connect.
    #[test]
    fn a_server_that_accepts_and_stays_silent_is_not_called_a_connect_timeout() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = crossbeam_channel::bounded(1);
        let silent = std::thread::spawn(move || {
            let (conn, _) = listener.accept().unwrap();
            // Keep the connection open, silent, until the client has given up.
            let _ = rx.recv_timeout(WAIT);
            drop(conn);
        });
        let conn = Arc::new(Connection::from_url(&format!("http://{addr}")).unwrap());
        let http = Http::new(conn);
        let url = http.url("/api/v1/pods", "");
        let e = http.call(&url, "list pods", Duration::from_millis(200), false, request::ACCEPT_JSON).unwrap_err();
        tx.send(()).unwrap();
        silent.join().unwrap();
        let text = e.to_string();
        assert!(text.contains("timed out (per read)"), "{text}");
        assert!(!text.contains("connecting to"), "{text}");
    }

    /// The same over TLS: a read timeout inside a TLS record leaves the session usable.
    #[test]
    fn a_line_paused_past_the_read_timeout_over_tls_arrives_whole() {
        let server = FakeApiServer::builder().tls(true).token("t0ken").start();
        let rv = server.resource_version();
        server.push_fault(Match::Watch, Fault::PauseInLine { after: 0 });
        let client =
            Client::from_kubeconfig_yaml(&server.kubeconfig(), &crate::auth::KubeconfigOptions::default()).unwrap();
        let api: Api<Pod> = Api::all(client);
        let http = Http::new(Arc::clone(&api.client.conn));
        let params =
            WatchParams { resource_version: Some(rv), timeout: Duration::from_secs(600), ..WatchParams::default() };
        let mut stream = http.watch(&api, &params, Duration::from_millis(100)).unwrap();
        server.create(&pod("a")).unwrap();
        let event = read_through_a_pause(&server, &mut stream);
        assert_eq!(event["type"], "ADDED");
        assert_eq!(event["object"]["metadata"]["name"], "a");
    }
}
