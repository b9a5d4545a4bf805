//! The HTTP transport: every request and response goes through here (auth/ builds the agents and
//! their TLS and proxy settings; ARCHITECTURE.md lists every user of ureq).
//!
//! Every request goes through [`Http::call`]: credentials are fetched just before it, a stale
//! pooled connection is retried once, a 401 refreshes credentials once, and any non-2xx answer
//! becomes an [`Error::Api`] built from its `Status` body. Bodies are bounded: an error body, one
//! object, a list (its decoded bytes, [`Capped`]); a watch is read by [`WatchStream`]
//! (`wire/stream.rs`).

use std::cell::Cell;
use std::io::{self, BufReader, Read};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::time::Duration;

use ureq::http::Response;
use ureq::{Body, RequestBuilder};

use crate::auth::{Connection, Failure, RootSet};
use crate::codec::decode::{self, Encoding, ListError, ListMeta};
use crate::config::DEFAULT_MAX_LIST_BYTES;
use crate::error::{Error, Result};
use crate::resource::Watchable;
use crate::wire::request::{ListParams, Target, WatchParams};
use crate::wire::stream::{WatchStream, ureq_error, ureq_message};

/// Bound on an error body we read to explain a non-2xx answer.
const MAX_ERROR_BODY: u64 = 1 << 20;
/// Bound on one object from a GET.
const MAX_OBJECT_BYTES: u64 = 64 << 20;
/// `Content-Type` of a write's body.
const CONTENT_JSON: &str = "application/json";

/// The log target of the line each request sends (trace level), whose key-values are its
/// `method`, `url`, `accept` and `content_type` (empty without a body): what the real-server
/// suite records of every request the library makes (tests/real/shapes.rs).
pub(crate) const REQUEST_LOG: &str = "kube_watcher::request";
/// Idle limit for non-watch requests: the API server answers them within 60 s or gives up.
const REQUEST_IDLE: Duration = Duration::from_secs(70);

/// The HTTP side of one watcher (or one call): an agent of its own, so `shutdown` stops only it.
pub(crate) struct Http {
    agent: ureq::Agent,
    /// The CAs `agent` trusts; a request made after the CA file was re-read brings its own TLS
    /// configuration instead ([`Connection::request_tls`]).
    agent_roots: RootSet,
    conn: Arc<Connection>,
    /// The longest watch line or list item accepted (`Config::max_line`).
    max_line: usize,
    /// Whether lists, gets and watches ask for protobuf, and what came back.
    negotiation: Arc<Negotiation>,
    /// A bound on the whole of each non-watch request (connect, send, answer, body), when its
    /// owner needs one: the lease elector, whose every request must end before its renew
    /// deadline. `None`: only the idle limits.
    timeout: Option<Duration>,
    /// The last request failed because the server's host (or the proxy) refused the
    /// connection: see [`refused`](Self::refused).
    refused: Cell<bool>,
}

/// Interrupts every request of one [`Http`], now and forever (its agent's shutdown), from
/// another thread: how a lease elector's `stop` cuts a request in flight.
#[derive(Clone)]
pub(crate) struct Interrupt(ureq::Agent);

impl Interrupt {
    pub(crate) fn interrupt(&self) {
        self.0.clone().shutdown();
    }
}

/// How the requests of one watcher (all its threads) or one call choose their encoding
/// (docs/protocol.md §12.1): protobuf, with JSON as the fallback in the same `Accept` header,
/// unless the settings say JSON: for full objects of a type with a protobuf form, and for
/// metadata-only requests of any type (`PartialObjectMetadata` is a `meta.k8s.io` type, which the
/// server writes in protobuf for every resource, custom ones included). A server that refuses it
/// (406 or 415) is asked for JSON from then on, not probed on every request.
#[derive(Debug, Default)]
pub(crate) struct Negotiation {
    /// Full objects may be asked for in protobuf: the settings allow it and the type has a
    /// protobuf form.
    objects: bool,
    /// Metadata-only requests may ask for protobuf: the settings allow it.
    metadata: bool,
    /// The owner's own requests are metadata-only (a metadata watcher): what [`in_use`](Self::in_use)
    /// reports, and not the other kind (a full watcher's drift checks, which are metadata-only).
    metadata_owner: bool,
    /// A server refused a protobuf `Accept`: JSON from now on.
    refused: AtomicBool,
    /// The encoding of the last list or watch answer: 0 none yet, 1 JSON, 2 protobuf.
    last: AtomicU8,
}

impl Negotiation {
    /// For requests about `target` decoded as `K`: `wanted` is the settings' say
    /// (`WireFormat::Protobuf`). Full objects of `DynamicObject` and of kinds the schema table
    /// does not know (custom resources) stay JSON; metadata-only requests (`target`'s own, or a
    /// drift check's) ask for protobuf whenever it is wanted.
    pub(crate) fn new<K: Watchable>(target: Target<'_>, wanted: bool) -> Arc<Negotiation> {
        let objects = wanted
            && !target.metadata_only
            && K::protobuf_form()
            && decode::has_protobuf_form(&target.resource.api_version, &target.resource.kind);
        Arc::new(Negotiation {
            objects,
            metadata: wanted,
            metadata_owner: target.metadata_only,
            ..Negotiation::default()
        })
    }

    /// Whether a request about `target` asks for protobuf now.
    fn offers(&self, target: Target<'_>) -> bool {
        let offered = if target.metadata_only { self.metadata } else { self.objects };
        offered && !self.refused.load(Ordering::Relaxed)
    }

    /// The encoding of the last list or watch answer read; `None` before the first.
    pub(crate) fn in_use(&self) -> Option<Encoding> {
        match self.last.load(Ordering::Relaxed) {
            1 => Some(Encoding::Json),
            2 => Some(Encoding::Protobuf),
            _ => None,
        }
    }

    /// Notes the encoding of an answer to a request about `target`, if it is of the owner's kind.
    fn saw(&self, target: Target<'_>, encoding: Encoding) {
        if target.metadata_only != self.metadata_owner {
            return;
        }
        let code = match encoding {
            Encoding::Json => 1,
            Encoding::Protobuf => 2,
        };
        self.last.store(code, Ordering::Relaxed);
    }
}

impl Http {
    pub(crate) fn new(conn: Arc<Connection>) -> Http {
        let (agent, agent_roots) = conn.agent();
        Http {
            agent,
            agent_roots,
            conn,
            max_line: crate::config::DEFAULT_MAX_LINE,
            negotiation: Arc::default(),
            timeout: None,
            refused: Cell::new(false),
        }
    }

    /// Bounds the whole of each later non-watch request by `timeout` (`None`: idle limits only).
    pub(crate) fn set_timeout(&mut self, timeout: Option<Duration>) {
        self.timeout = timeout;
    }

    /// A handle that interrupts this `Http`'s requests from another thread.
    pub(crate) fn interrupt(&self) -> Interrupt {
        Interrupt(self.agent.clone())
    }

    /// The same, negotiating the encoding of lists, gets and watches with `negotiation`.
    pub(crate) fn negotiating(self, negotiation: Arc<Negotiation>) -> Http {
        Http { negotiation, ..self }
    }

    /// The same settings on a new agent: for a caller whose agent was shut down to cut a
    /// request (a shutdown is for good), to go on.
    pub(crate) fn fresh(&self) -> Http {
        let (agent, agent_roots) = self.conn.agent();
        Http {
            agent,
            agent_roots,
            conn: Arc::clone(&self.conn),
            max_line: self.max_line,
            negotiation: Arc::clone(&self.negotiation),
            timeout: self.timeout,
            refused: Cell::new(false),
        }
    }

    /// The same, accepting watch lines and list items of up to `max_line` bytes.
    pub(crate) fn with_max_line(conn: Arc<Connection>, max_line: usize) -> Http {
        Http { max_line, ..Http::new(conn) }
    }

    /// Whether the last request failed because its connection was refused: nothing listens on
    /// the server's port (or the proxy's), so the request never reached a server. The
    /// watcher's machine retries such a failure sooner (docs/protocol.md §6.10); the error
    /// itself says "connection to ... refused".
    pub(crate) fn refused(&self) -> bool {
        self.refused.get()
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
        Ok((read_object(res, context)?, content_type))
    }

    /// GETs one object of `target`: its bytes and their encoding (protobuf when asked for and given).
    pub(crate) fn get_object(&self, target: Target<'_>, path: &str, context: &str) -> Result<(Vec<u8>, Encoding)> {
        let url = self.url(path, "");
        let (res, encoding) = self.negotiated(&url, context, REQUEST_IDLE, false, target, false)?;
        Ok((read_object(res, context)?, encoding))
    }

    /// One GET about `target` in the encoding negotiated (see [`Negotiation`]), with the `Accept`
    /// headers of a list (`list`) or of a get or watch. Returns the answer and the encoding its
    /// `Content-Type` names.
    fn negotiated(
        &self,
        url: &str,
        context: &str,
        idle: Duration,
        watch: bool,
        target: Target<'_>,
        list: bool,
    ) -> Result<(Response<Body>, Encoding)> {
        let n = &self.negotiation;
        let accepts = target.accepts(list);
        let mut res = None;
        if n.offers(target) {
            match self.call(url, context, idle, watch, accepts.protobuf) {
                Err(Error::Api(e)) if matches!(e.code, 406 | 415) => {
                    // JSON was listed as the fallback, so only a server that cannot parse the
                    // header at all answers this: ask it for JSON, now and from now on.
                    log::debug!(
                        "{context}: the server refused protobuf (HTTP {}); asking for JSON from now on",
                        e.code
                    );
                    n.refused.store(true, Ordering::Relaxed);
                }
                other => res = Some(other?),
            }
        }
        let res = match res {
            Some(res) => res,
            None => self.call(url, context, idle, watch, accepts.json)?,
        };
        let content_type = res.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or_default();
        let encoding = Encoding::of_content_type(content_type);
        n.saw(target, encoding);
        Ok((res, encoding))
    }

    /// The full URL of an API path (keeping the server URL's own path prefix) and query.
    pub(super) fn url(&self, path: &str, query: &str) -> String {
        format!("{}{path}{query}", self.conn.server)
    }

    /// Lists one page of `api`, handing each item's bytes to `on_item` as it streams in. An
    /// `Err` from `on_item` ends the read and is returned as it is.
    pub(crate) fn list<E: From<Error>>(
        &self,
        target: Target<'_>,
        params: &ListParams,
        mut on_item: impl FnMut(decode::Item<'_>) -> Result<(), E>,
    ) -> Result<ListMeta, E> {
        let context = target.describe("list");
        let url = self.url(&target.collection_path(), &target.query(&params.query()));
        let (res, encoding) = self.negotiated(&url, &context, REQUEST_IDLE, false, target, true)?;
        let reader = Capped { inner: res.into_body().into_reader(), left: DEFAULT_MAX_LIST_BYTES };
        let listed = match encoding {
            Encoding::Json => decode::list(reader, self.max_line, &mut on_item),
            Encoding::Protobuf => {
                let resource = (target.resource.api_version.as_str(), target.resource.kind.as_str());
                // Metadata only: `PartialObjectMetadataList`, or the full list from a server
                // that ignored the `as=` parameter (docs/protocol.md §8), read as metadata.
                let kinds: &[(&str, &str)] =
                    if target.metadata_only { &[decode::PARTIAL_OBJECT_METADATA, resource] } else { &[resource] };
                decode::protobuf_list(reader, self.max_line, kinds, &mut on_item)
            }
        };
        listed.map_err(|e| match e {
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
    pub(crate) fn watch(&self, target: Target<'_>, params: &WatchParams, idle: Duration) -> Result<WatchStream> {
        let context = target.describe("watch");
        let url = self.url(&target.collection_path(), &target.query(&params.query()));
        let (res, encoding) = self.negotiated(&url, &context, idle, true, target, false)?;
        let reader = BufReader::with_capacity(64 * 1024, res.into_body().into_reader());
        Ok(WatchStream::new(reader, self.max_line, context, encoding))
    }

    /// One GET with credentials; non-2xx answers become `Error::Api`.
    pub(super) fn call(
        &self,
        url: &str,
        context: &str,
        idle: Duration,
        watch: bool,
        accept: &str,
    ) -> Result<Response<Body>> {
        self.send(Verb::Get, url, context, idle, watch, accept)
    }

    /// Writes one object: POSTs, PUTs or DELETEs `path` with a JSON body (`Verb`), and returns
    /// the body of the answer, bounded like a GET's. A non-2xx answer is an `Error::Api`, as
    /// for reads: a 409 Conflict is recognised by [`Error::is_conflict`].
    pub(crate) fn write(&self, verb: Verb<'_>, path: &str, context: &str) -> Result<Vec<u8>> {
        let url = self.url(path, "");
        let res = self.send(verb, &url, context, REQUEST_IDLE, false, crate::wire::request::ACCEPT_JSON)?;
        read_object(res, context)
    }

    /// One request with credentials; non-2xx answers become `Error::Api`.
    fn send(
        &self,
        verb: Verb<'_>,
        url: &str,
        context: &str,
        idle: Duration,
        watch: bool,
        accept: &str,
    ) -> Result<Response<Body>> {
        let mut refreshed = false;
        let mut retried = false;
        let mut reread_ca = false;
        self.refused.set(false);
        loop {
            let auth = self.conn.request_auth()?;
            // The CAs of now: the CA file may have been re-read since the agent was built.
            let roots = self.conn.tls.roots();
            // A certificate from an exec plugin can change at any refresh, and a CA file can be
            // re-read, so these are set per request (such connections are not pooled; the
            // agent's stop still reaches them).
            let tls = self.conn.request_tls(&roots, &self.agent_roots, auth.client_cert);
            let whole = self.timeout.filter(|_| !watch);
            let how = Prepared { accept, watch, idle, whole, headers: &auth.headers, tls };
            let content_type = if matches!(verb, Verb::Post(_) | Verb::Put(_)) { CONTENT_JSON } else { "" };
            log::trace!(
                target: REQUEST_LOG,
                method = verb.method(), url = url, accept = accept, content_type = content_type;
                "{} {context}",
                verb.method()
            );
            let sent = match verb {
                Verb::Get => how.apply(self.agent.get(url)).call(),
                Verb::Delete => how.apply(self.agent.delete(url)).call(),
                Verb::Post(body) => how.apply(self.agent.post(url)).header("Content-Type", CONTENT_JSON).send(body),
                Verb::Put(body) => how.apply(self.agent.put(url)).header("Content-Type", CONTENT_JSON).send(body),
            };
            let res = match sent {
                Ok(res) => res,
                Err(ureq::Error::Io(e)) if !retried && verb.idempotent() && is_stale_connection(&e) => {
                    // A pooled connection the server had just closed: retry once (ureq does not).
                    // Not a POST: the server may have acted on it (a PUT carries its
                    // resourceVersion, so a repeat that already applied answers 409).
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
                    self.refused.set(failure == Some(Failure::Refused));
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

/// What every request of one attempt carries, whatever its method.
struct Prepared<'a> {
    accept: &'a str,
    watch: bool,
    idle: Duration,
    /// Bound on the whole request ([`Http::set_timeout`]).
    whole: Option<Duration>,
    headers: &'a [(String, crate::auth::Secret)],
    tls: Option<ureq::tls::TlsConfig>,
}

impl Prepared<'_> {
    fn apply<B>(&self, req: RequestBuilder<B>) -> RequestBuilder<B> {
        let mut req = req.header("Accept", self.accept);
        if self.watch {
            // Watches are not compressed by the server; ask for identity so a future
            // multi-member gzip stream never meets a single-member decoder.
            req = req.header("Accept-Encoding", "identity");
        }
        for (name, value) in self.headers {
            req = req.header(name.as_str(), value.expose());
        }
        let mut cfg = req.config().timeout_per_read(Some(self.idle));
        if let Some(tls) = &self.tls {
            cfg = cfg.tls_config(tls.clone());
        }
        if !self.watch {
            cfg = cfg.timeout_recv_response(Some(REQUEST_IDLE));
        }
        if let Some(whole) = self.whole {
            cfg = cfg.timeout_global(Some(whole));
        }
        cfg.build()
    }
}

/// The method of one request, with the JSON body of a write.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Verb<'a> {
    /// A read (lists, gets, watches, discovery).
    Get,
    /// A create, with the object.
    Post(&'a [u8]),
    /// A replace, with the object (carrying the resourceVersion it was read at).
    Put(&'a [u8]),
    /// A delete.
    Delete,
}

impl Verb<'_> {
    fn method(self) -> &'static str {
        match self {
            Verb::Get => "GET",
            Verb::Post(_) => "POST",
            Verb::Put(_) => "PUT",
            Verb::Delete => "DELETE",
        }
    }

    /// Whether repeating it after an unanswered attempt is harmless (RFC 9110 §9.2.2).
    fn idempotent(self) -> bool {
        match self {
            Verb::Get | Verb::Put(_) | Verb::Delete => true,
            Verb::Post(_) => false,
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

/// The body of a one-object answer, bounded by `MAX_OBJECT_BYTES`.
fn read_object(res: Response<Body>, context: &str) -> Result<Vec<u8>> {
    let mut bytes = Vec::new();
    res.into_body()
        .into_with_config()
        .limit(MAX_OBJECT_BYTES)
        .reader()
        .read_to_end(&mut bytes)
        .map_err(|e| io_error(context, e))?;
    Ok(bytes)
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
    use crate::resource::{ApiResource, DynamicObject, PartialObjectMetadata};
    use k8s_openapi::api::core::v1::Pod;

    /// Full objects ask for protobuf where the type has it; metadata-only requests wherever the
    /// settings allow, custom resources and a `DynamicObject` watcher's drift checks included.
    #[test]
    fn metadata_requests_offer_protobuf_for_every_type_unless_the_settings_say_json() {
        let pods = ApiResource::of::<Pod>();
        let widgets = ApiResource::new("example.com", "v1", "Widget", "widgets", true);
        let target = |resource, metadata_only| Target { resource, namespace: None, metadata_only, shard: None };
        for wanted in [true, false] {
            let pod = Negotiation::new::<Pod>(target(&pods, false), wanted);
            assert_eq!(pod.offers(target(&pods, false)), wanted);
            assert_eq!(pod.offers(target(&pods, true)), wanted, "a pod watcher's drift check");
            let dynamic = Negotiation::new::<DynamicObject>(target(&widgets, false), wanted);
            assert!(!dynamic.offers(target(&widgets, false)));
            assert_eq!(dynamic.offers(target(&widgets, true)), wanted, "a custom resource's drift check");
            let metadata = Negotiation::new::<PartialObjectMetadata<DynamicObject>>(target(&widgets, true), wanted);
            assert_eq!(metadata.offers(target(&widgets, true)), wanted);
        }
        let pod = Negotiation::new::<Pod>(target(&pods, false), true);
        pod.refused.store(true, Ordering::Relaxed);
        assert!(!pod.offers(target(&pods, false)) && !pod.offers(target(&pods, true)), "one refusal for all");
    }

    /// `Stats::wire_format` is what the watcher reads: a full watcher's drift checks do not count.
    #[test]
    fn the_encoding_in_use_is_that_of_the_owners_own_requests() {
        let pods = ApiResource::of::<Pod>();
        let (full, metadata) = (
            Target { resource: &pods, namespace: None, metadata_only: false, shard: None },
            Target { resource: &pods, namespace: None, metadata_only: true, shard: None },
        );
        let n = Negotiation::new::<DynamicObject>(full, true);
        assert_eq!(n.in_use(), None);
        n.saw(full, Encoding::Json);
        n.saw(metadata, Encoding::Protobuf);
        assert_eq!(n.in_use(), Some(Encoding::Json));
        let m = Negotiation::new::<PartialObjectMetadata<Pod>>(metadata, true);
        m.saw(metadata, Encoding::Protobuf);
        assert_eq!(m.in_use(), Some(Encoding::Protobuf));
    }

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
