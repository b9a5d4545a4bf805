//! The server shell: shared state, the accept loop, one thread per connection, authentication,
//! the request log, scripted faults, and shutdown.

use std::collections::VecDeque;
use std::io::{self, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use log::{debug, trace};

use super::api::{self, Route, send, status_response};
use super::http::{Conn, ReadError, Request, Response, Stream, read_request, write_head};
use super::state::{Conns, Flow, ServerCore, State, peer_gone, wait_until_gone};
use super::store::Store;
use super::tls::TlsMaterial;
use super::util::Rng;
use super::{FakeApiServer, FakeApiServerBuilder, Fault, Match, RecordedRequest, Settings, hostile, watch};

/// How many requests the log keeps.
const MAX_RECORDED: usize = 100_000;

impl FakeApiServerBuilder {
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
        start(self.settings)
    }
}

/// Starts the server.
pub(crate) fn start(settings: Settings) -> io::Result<FakeApiServer> {
    let listener = TcpListener::bind(("127.0.0.1", settings.port))?;
    let addr = listener.local_addr()?;
    let tls = if settings.tls {
        Some(TlsMaterial::generate(settings.client_ca_required).map_err(io::Error::other)?)
    } else {
        None
    };
    let mut store = Store::new(settings.seed, settings.history);
    if settings.register_defaults {
        for rt in api::default_types() {
            store.register(rt);
        }
    }
    let shared = Arc::new(ServerCore {
        state: Mutex::new(State {
            store,
            faults: VecDeque::new(),
            requests: VecDeque::new(),
            tokens: settings.tokens.clone(),
            restricted: Vec::new(),
            rng: Rng::new(settings.seed.wrapping_add(1)),
            holds: Vec::new(),
            watch_epoch: 0,
            next_hold: 0,
            paused_lines: 0,
            line_resumes: 0,
        }),
        settings,
        changed: Condvar::new(),
        shutdown: AtomicBool::new(false),
        open_watches: AtomicUsize::new(0),
        connections: AtomicUsize::new(0),
        tls,
        conns: Mutex::new(Conns::default()),
    });
    let accept_shared = shared.clone();
    let accept =
        thread::Builder::new().name("fake-api-accept".into()).spawn(move || accept_loop(&accept_shared, &listener))?;
    debug!("fake api server listening on {addr}");
    Ok(FakeApiServer::from_parts(shared, addr, accept))
}

fn accept_loop(shared: &Arc<ServerCore>, listener: &TcpListener) {
    for stream in listener.incoming() {
        if shared.is_shutdown() {
            break;
        }
        let stream = match stream {
            Ok(s) => s,
            Err(e) => {
                debug!("fake api server: accept failed: {e}");
                thread::sleep(Duration::from_millis(10));
                continue;
            }
        };
        shared.connections.fetch_add(1, Ordering::SeqCst);
        let mut conns = shared.conns();
        // Join finished connection threads as we go (they have exited, so this does not block).
        let (done, live): (Vec<_>, Vec<_>) =
            std::mem::take(&mut conns.handles).into_iter().partition(|h| h.is_finished());
        conns.handles = live;
        for h in done {
            let _ = h.join();
        }
        let id = conns.next_id;
        conns.next_id += 1;
        match stream.try_clone() {
            Ok(clone) => {
                conns.sockets.insert(id, clone);
            }
            Err(e) => {
                debug!("fake api server: clone socket: {e}");
                continue;
            }
        }
        let conn_shared = shared.clone();
        let spawned = thread::Builder::new()
            .name(format!("fake-api-conn-{id}"))
            .spawn(move || serve_connection(&conn_shared, id, stream));
        match spawned {
            Ok(handle) => conns.handles.push(handle),
            Err(e) => {
                debug!("fake api server: spawn connection thread: {e}");
                if let Some(s) = conns.sockets.remove(&id) {
                    let _ = s.shutdown(Shutdown::Both);
                }
            }
        }
    }
}

/// Shuts the server down and joins every thread.
pub(crate) fn shutdown(shared: &Arc<ServerCore>, addr: SocketAddr, accept: Option<JoinHandle<()>>) {
    shared.shutdown.store(true, Ordering::SeqCst);
    shared.notify();
    // Wake the accept loop.
    let _ = TcpStream::connect_timeout(&addr, Duration::from_secs(1));
    if let Some(h) = accept {
        let _ = h.join();
    }
    let handles = {
        let mut conns = shared.conns();
        for s in conns.sockets.values() {
            let _ = s.shutdown(Shutdown::Both);
        }
        std::mem::take(&mut conns.handles)
    };
    shared.notify();
    for h in handles {
        let _ = h.join();
    }
    debug!("fake api server on {addr} stopped");
}

/// Sleeps up to `d`, returning early on shutdown.
fn interruptible_sleep(shared: &ServerCore, d: Duration) {
    let deadline = Instant::now() + d;
    let mut guard = shared.lock();
    loop {
        let now = Instant::now();
        if now >= deadline || shared.is_shutdown() {
            return;
        }
        guard = shared.wait(guard, deadline - now);
    }
}

fn serve_connection(shared: &Arc<ServerCore>, id: u64, tcp: TcpStream) {
    let _ = tcp.set_nodelay(true);
    let _ = tcp.set_read_timeout(Some(shared.settings.idle_timeout));
    let stream = match &shared.tls {
        Some(tls) => match rustls::ServerConnection::new(tls.config.clone()) {
            Ok(c) => Stream::Tls(Box::new(rustls::StreamOwned::new(c, tcp))),
            Err(e) => {
                debug!("fake api server: tls session: {e}");
                shared.conns().sockets.remove(&id);
                return;
            }
        },
        None => Stream::Plain(tcp),
    };
    let mut conn = Conn::new(stream);
    let mut reset = false;
    loop {
        if shared.is_shutdown() {
            break;
        }
        let req = match read_request(&mut conn) {
            Ok(r) => r,
            Err(ReadError::Closed) => break,
            Err(ReadError::Io(e)) => {
                trace!("fake api server: connection {id}: {e}");
                break;
            }
            Err(ReadError::Bad(code, msg)) => {
                let mut resp = Response::text(code, &msg);
                resp.close = true;
                let _ = super::http::write_response(&mut conn, &resp, false);
                break;
            }
        };
        let close = req.close;
        match handle_request(shared, &mut conn, req) {
            Ok(Flow::KeepAlive) if !close => {}
            Ok(Flow::Reset) => {
                reset = true;
                break;
            }
            Ok(_) => break,
            Err(e) => {
                trace!("fake api server: connection {id}: write failed: {e}");
                break;
            }
        }
    }
    // Unregister before the stream drops, so that the drop closes the last descriptor.
    shared.conns().sockets.remove(&id);
    if reset {
        let _ = socket2::SockRef::from(conn.stream().tcp()).set_linger(Some(Duration::ZERO));
    } else {
        let _ = conn.stream().tcp().shutdown(Shutdown::Write);
    }
    drop(conn);
}

/// Request classes faults and the log care about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    List,
    Watch,
    Get,
    Other,
}

fn fault_matches(m: &Match, class: Class, method: &str, path: &str) -> bool {
    match m {
        Match::Any => true,
        Match::List => class == Class::List,
        Match::Watch => class == Class::Watch,
        Match::Get => class == Class::Get,
        Match::Path(p) => p == path,
        Match::Method { method: m, path: p } => m == method && p == path,
    }
}

fn fault_applies(f: &Fault, class: Class) -> bool {
    match f {
        Fault::InStreamError { .. }
        | Fault::CloseAfter { .. }
        | Fault::ResetAfter { .. }
        | Fault::MalformedLine
        | Fault::Line(_)
        | Fault::OversizedLine { .. }
        | Fault::EndlessLine
        | Fault::PauseInLine { .. }
        | Fault::DropEvents { .. } => class == Class::Watch,
        Fault::TruncateBody => matches!(class, Class::List | Class::Get),
        Fault::EndlessList | Fault::GzipBomb { .. } => class == Class::List,
        Fault::Status { .. }
        | Fault::PlainText { .. }
        | Fault::TooLargeResourceVersion
        | Fault::Stall
        | Fault::StallBeforeHeaders
        | Fault::DelayHeaders(_) => true,
    }
}

fn redact(headers: &[(String, String)]) -> Vec<(String, String)> {
    headers
        .iter()
        .map(|(k, v)| match k.as_str() {
            "authorization" | "proxy-authorization" | "cookie" => (k.clone(), "<redacted>".to_string()),
            _ => (k.clone(), v.clone()),
        })
        .collect()
}

/// What the server decided about a request on arrival, under one lock.
struct Admitted {
    route: Route,
    class: Class,
    authorized: bool,
    /// The 403 of a user without grants, for a request on a resource.
    forbidden: Option<Response>,
    /// The scripted fault it takes, if any.
    fault: Option<Fault>,
    /// The hold gate it waits at, if any.
    gate: Option<u64>,
    /// [`FakeApiServer::end_watches`](super::FakeApiServer::end_watches) calls so far: a watch
    /// ends at the next one. Taken here, with the request's entry in the log, so that a call
    /// after the request is in the log ends it even if it is not streaming yet.
    epoch: u64,
}

fn handle_request(shared: &Arc<ServerCore>, conn: &mut Conn, mut req: Request) -> io::Result<Flow> {
    let arrived = Instant::now();
    req.protobuf = !shared.settings.json_only && api::protobuf::accepted_first(&req);
    let Admitted { route, class, authorized, forbidden, fault, gate, epoch } = admit(shared, conn, &req);
    if let Some(id) = gate
        && let Some(flow) = wait_at_gate(shared, conn, id)
    {
        return Ok(flow);
    }
    if !authorized {
        let resp = status_response(401, "Unauthorized", "Unauthorized", None);
        send(conn, &req, resp)?;
        return Ok(Flow::KeepAlive);
    }
    if let Some(resp) = forbidden {
        send(conn, &req, resp)?;
        return Ok(Flow::KeepAlive);
    }
    let mut fault = fault;
    if let Some(Fault::DelayHeaders(d)) = fault {
        interruptible_sleep(shared, d);
        fault = None;
    }
    if let Some(flow) = answer_with_fault(shared, conn, &req, &route, &fault)? {
        return Ok(flow);
    }
    if class == Class::Watch {
        return watch::serve(shared, conn, &req, &route, fault, epoch);
    }
    let resp = api::handle(shared, &req, &route);
    if let Some(Fault::TruncateBody) = fault {
        let mut headers = resp.headers.clone();
        headers.push(("Content-Length".into(), resp.body.len().to_string()));
        write_head(conn, resp.status, &headers)?;
        conn.write_all(&resp.body[..resp.body.len() / 2])?;
        conn.flush()?;
        return Ok(Flow::Close);
    }
    if class == Class::List
        && let Some(limit) = shared.settings.request_deadline
    {
        let mut out = Deadline { conn, until: arrived + limit };
        return match send(&mut out, &req, resp) {
            Ok(()) => {
                out.conn.stream().tcp().set_write_timeout(None)?;
                Ok(Flow::KeepAlive)
            }
            Err(e) if matches!(e.kind(), io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock) => {
                trace!("fake api server: list cut off at its deadline ({limit:?})");
                Ok(Flow::Reset)
            }
            Err(e) => Err(e),
        };
    }
    send(conn, &req, resp)?;
    Ok(Flow::KeepAlive)
}

/// Writes to a connection until a deadline (`FakeApiServerBuilder::request_deadline`): each
/// write waits at most for what is left of it.
struct Deadline<'a> {
    conn: &'a mut Conn,
    until: Instant,
}

impl Write for Deadline<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let left = self.until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        self.conn.stream().tcp().set_write_timeout(Some(left))?;
        self.conn.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.conn.flush()
    }
}

/// Routes, authenticates, records the request, and takes its fault and hold gate.
fn admit(shared: &Arc<ServerCore>, conn: &Conn, req: &Request) -> Admitted {
    let cert_user = conn.stream().peer_cert().and_then(|der| shared.tls.as_ref().and_then(|t| t.user_for_cert(&der)));
    let mut state = shared.lock();
    let route = api::route(&state, &req.path);
    let class = match &route {
        Route::Collection { watch_path, .. } | Route::Object { watch_path, .. }
            if req.method == "GET" && (*watch_path || req.flag("watch") == Some(true)) =>
        {
            Class::Watch
        }
        Route::Collection { .. } if req.method == "GET" => Class::List,
        Route::Object { .. } if req.method == "GET" => Class::Get,
        _ => Class::Other,
    };
    let bearer = req
        .header("authorization")
        .and_then(|a| a.strip_prefix("Bearer ").or_else(|| a.strip_prefix("bearer ")))
        .map(str::trim);
    let token_user = bearer.and_then(|b| state.tokens.iter().find(|(t, _)| t == b).map(|(_, u)| u.clone()));
    let user = cert_user.or(token_user);
    let auth_required =
        !state.tokens.is_empty() || !shared.settings.tokens.is_empty() || shared.settings.client_ca_required;
    let authorized = !auth_required || user.is_some();
    let forbidden =
        user.as_ref().filter(|u| state.restricted.contains(u)).and_then(|u| forbid(&state, req, &route, class, u));
    trace!("fake api server: {} {} ({class:?})", req.method, req.path);
    state.requests.push_back(RecordedRequest {
        method: req.method.clone(),
        path: req.path.clone(),
        query: req.query.clone(),
        raw_query: req.raw_query.clone(),
        headers: redact(&req.headers),
        watch: class == Class::Watch,
        user: user.clone(),
    });
    while state.requests.len() > MAX_RECORDED {
        state.requests.pop_front();
    }
    let fault = if authorized {
        let pos = state
            .faults
            .iter()
            .position(|(m, f)| fault_matches(m, class, &req.method, &req.path) && fault_applies(f, class));
        pos.and_then(|p| state.faults.remove(p)).map(|(_, f)| f)
    } else {
        None
    };
    let gate = state.holds.iter_mut().find(|h| !h.holding && fault_matches(&h.when, class, &req.method, &req.path));
    let gate = gate.and_then(|h| {
        if h.skip > 0 {
            h.skip -= 1;
            return None;
        }
        h.holding = true;
        Some(h.id)
    });
    if gate.is_some() {
        shared.notify();
    }
    Admitted { route, class, authorized, forbidden, fault, gate, epoch: state.watch_epoch }
}

/// RBAC's refusal of a request on a resource by `user`, who has no grant, in kube-apiserver's
/// words (seen in tests/real/auth.rs and compared in tests/real/differential.rs): `pods is
/// forbidden: User "u" cannot list resource "pods" in API group "" in the namespace "ns"`, the
/// object's name quoted after the resource when the request names one. `None` for what any
/// authenticated user may read (discovery, `/version`, health), as the real default roles allow.
fn forbid(state: &State, req: &Request, route: &Route, class: Class, user: &str) -> Option<Response> {
    let (idx, ns, name, sub) = match route {
        Route::Collection { idx, ns, .. } => (*idx, ns, None, None),
        Route::Object { idx, ns, name, sub, .. } => (*idx, ns, Some(name), sub.as_ref()),
        _ => return None,
    };
    let rt = &state.store.types.get(idx)?.rt;
    let verb = match (req.method.as_str(), class, name.is_some()) {
        (_, Class::Watch, _) => "watch",
        ("GET", _, false) => "list",
        ("GET", _, true) => "get",
        ("POST", ..) => "create",
        ("PUT", ..) => "update",
        ("PATCH", ..) => "patch",
        ("DELETE", _, false) => "deletecollection",
        ("DELETE", _, true) => "delete",
        _ => return None,
    };
    let what = match (name, class) {
        (Some(n), c) if c != Class::Watch => format!("{} {n:?}", rt.resource_name()),
        _ => rt.resource_name(),
    };
    let resource = match sub {
        Some(s) => format!("{}/{s}", rt.plural),
        None => rt.plural.clone(),
    };
    // A namespace is its own namespace, to the authorizer.
    let own_namespace = (rt.built_in && rt.group.is_empty() && rt.plural == "namespaces").then_some(name).flatten();
    let scope = match (ns, own_namespace) {
        (Some(ns), _) if rt.namespaced => format!("in the namespace {ns:?}"),
        (_, Some(name)) => format!("in the namespace {name:?}"),
        _ => "at the cluster scope".to_owned(),
    };
    let message = format!(
        "{what} is forbidden: User {user:?} cannot {verb} resource {resource:?} in API group {:?} {scope}",
        rt.group
    );
    let mut details = serde_json::Map::new();
    if let Some(n) = name.filter(|_| class != Class::Watch) {
        details.insert("name".into(), n.as_str().into());
    }
    if !rt.group.is_empty() {
        details.insert("group".into(), rt.group.as_str().into());
    }
    details.insert("kind".into(), rt.plural.as_str().into());
    Some(api::status_response(403, "Forbidden", &message, Some(serde_json::Value::Object(details))))
}

/// Holds the request until the test releases the gate; `Some` when the client left first.
fn wait_at_gate(shared: &ServerCore, conn: &Conn, id: u64) -> Option<Flow> {
    let mut state = shared.lock();
    while state.holds.iter().any(|h| h.id == id) && !shared.is_shutdown() {
        state = shared.wait(state, Duration::from_millis(50));
        if peer_gone(conn) {
            state.holds.retain(|h| h.id != id);
            return Some(Flow::Close);
        }
    }
    None
}

/// Answers in place of the server for faults that replace the answer; `Some` when it did.
fn answer_with_fault(
    shared: &Arc<ServerCore>,
    conn: &mut Conn,
    req: &Request,
    route: &Route,
    fault: &Option<Fault>,
) -> io::Result<Option<Flow>> {
    match fault.clone() {
        Some(Fault::Status { code, reason, message, retry_after }) => {
            let details = retry_after.map(|r| serde_json::json!({"retryAfterSeconds": r}));
            send(conn, req, status_response(code, &reason, &message, details))?;
            return Ok(Some(Flow::KeepAlive));
        }
        Some(Fault::PlainText { code, body, retry_after }) => {
            let ct = if body.trim_start().starts_with('<') { "text/html" } else { "text/plain; charset=utf-8" };
            let mut resp = Response::new(code, ct, body.into_bytes());
            if let Some(r) = retry_after {
                resp = resp.header("Retry-After", &r.to_string());
            }
            if code == 429 {
                // What kube-apiserver's priority & fairness adds to its plain-text 429s.
                resp = resp
                    .header("X-Kubernetes-Pf-Flowschema-Uid", "fake-flowschema")
                    .header("X-Kubernetes-Pf-Prioritylevel-Uid", "fake-prioritylevel");
            }
            send(conn, req, resp)?;
            return Ok(Some(Flow::KeepAlive));
        }
        Some(Fault::TooLargeResourceVersion) => {
            let current = shared.lock().store.revision;
            let wanted = req.param("resourceVersion").unwrap_or_default().to_string();
            let body = api::too_large_status(&wanted, current);
            send(conn, req, Response::json(504, &body).header("Retry-After", "1"))?;
            return Ok(Some(Flow::KeepAlive));
        }
        Some(Fault::StallBeforeHeaders) => {
            wait_until_gone(shared, conn);
            return Ok(Some(Flow::Close));
        }
        Some(Fault::Stall) => {
            let headers = vec![
                ("Content-Type".to_string(), "application/json".to_string()),
                ("Transfer-Encoding".to_string(), "chunked".to_string()),
            ];
            write_head(conn, 200, &headers)?;
            conn.flush()?;
            wait_until_gone(shared, conn);
            return Ok(Some(Flow::Close));
        }
        Some(Fault::EndlessLine) => return hostile::endless_line(shared, conn).map(Some),
        Some(f @ (Fault::EndlessList | Fault::GzipBomb { .. })) => {
            let rt = match route {
                Route::Collection { idx, .. } => shared.lock().store.types[*idx].rt.clone(),
                _ => return Ok(Some(Flow::Close)),
            };
            return match f {
                Fault::GzipBomb { bytes } => hostile::gzip_bomb(shared, conn, &rt.kind, bytes),
                _ => hostile::endless_list(shared, conn, &rt.kind, &rt.api_version()),
            }
            .map(Some);
        }
        _ => {}
    }
    Ok(None)
}
