//! The fake server's shared state: the objects, faults and request log behind one mutex, the
//! settings, and what every connection thread needs to know (shutdown, open watches). The
//! request handlers (`api`, `watch`, `hostile`) and the connection loop (`server`) build on it.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use super::http::{Conn, Stream};
use super::store::Store;
use super::tls::TlsMaterial;
use super::util::Rng;
use super::{Fault, Match, RecordedRequest, Settings};

/// What to do with a connection after a response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flow {
    /// Read the next request.
    KeepAlive,
    /// Close the connection (FIN).
    Close,
    /// Reset the connection (RST where possible).
    Reset,
}

/// Mutable server state, behind one mutex.
#[derive(Debug)]
pub(crate) struct State {
    /// Objects and history.
    pub store: Store,
    /// Scripted faults, first in first out.
    pub faults: VecDeque<(Match, Fault)>,
    /// The request log.
    pub requests: VecDeque<RecordedRequest>,
    /// Accepted bearer tokens and the user each authenticates as.
    pub tokens: Vec<(String, String)>,
    /// Users without any grant: their requests on resources get 403
    /// ([`FakeApiServer::add_restricted_token`](super::FakeApiServer::add_restricted_token)).
    pub restricted: Vec<String>,
    /// Randomness for watch timeouts.
    pub rng: Rng,
    /// Armed and holding request gates ([`FakeApiServer::hold`]).
    pub holds: Vec<HoldSlot>,
    /// Bumped by [`FakeApiServer::end_watches`]: watches requested under an older value end.
    pub watch_epoch: u64,
    /// Source of hold ids.
    pub next_hold: u64,
    /// Watches paused inside a line ([`Fault::PauseInLine`]).
    pub paused_lines: usize,
    /// Bumped by [`FakeApiServer::resume_lines`]: paused watches send the rest of their line.
    pub line_resumes: u64,
}

/// One gate of [`FakeApiServer::hold`].
#[derive(Debug)]
pub(crate) struct HoldSlot {
    pub id: u64,
    pub when: Match,
    /// Matching requests to let through before holding one.
    pub skip: usize,
    /// Whether a request is waiting at this gate (it was armed before).
    pub holding: bool,
}

/// Open sockets and connection threads.
#[derive(Debug, Default)]
pub(crate) struct Conns {
    pub(crate) next_id: u64,
    pub(crate) sockets: HashMap<u64, TcpStream>,
    pub(crate) handles: Vec<JoinHandle<()>>,
}

/// State shared by the handle and every server thread.
#[derive(Debug)]
pub(crate) struct ServerCore {
    /// Settings fixed at start.
    pub settings: Settings,
    pub(crate) state: Mutex<State>,
    pub(crate) changed: Condvar,
    pub(crate) shutdown: AtomicBool,
    /// Connected watch streams.
    pub open_watches: AtomicUsize,
    /// Accepted connections.
    pub connections: AtomicUsize,
    /// TLS material in TLS mode.
    pub tls: Option<TlsMaterial>,
    pub(crate) conns: Mutex<Conns>,
}

impl ServerCore {
    /// Locks the state (a panicked holder does not poison it for the rest of the test).
    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Wakes every thread waiting for changes.
    pub(crate) fn notify(&self) {
        self.changed.notify_all();
    }

    /// Waits for a change or the timeout.
    pub(crate) fn wait<'a>(&self, guard: MutexGuard<'a, State>, timeout: Duration) -> MutexGuard<'a, State> {
        match self.changed.wait_timeout(guard, timeout) {
            Ok((g, _)) => g,
            Err(e) => e.into_inner().0,
        }
    }

    /// Whether the server is shutting down.
    pub(crate) fn is_shutdown(&self) -> bool {
        self.shutdown.load(Ordering::SeqCst)
    }

    pub(crate) fn conns(&self) -> MutexGuard<'_, Conns> {
        self.conns.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Whether the peer closed or reset the connection (checked without blocking).
pub(crate) fn peer_gone(conn: &Conn) -> bool {
    let tcp = conn.stream().tcp();
    if tcp.set_nonblocking(true).is_err() {
        return true;
    }
    let mut buf = [0u8; 1];
    let gone = match tcp.peek(&mut buf) {
        Ok(0) => true,
        // Bytes on a TLS watch connection can only be a close_notify: treat as gone.
        Ok(_) => matches!(conn.stream(), Stream::Tls(_)),
        Err(e) => e.kind() != io::ErrorKind::WouldBlock,
    };
    let _ = tcp.set_nonblocking(false);
    gone
}

/// Blocks until the peer leaves or the server shuts down.
pub(crate) fn wait_until_gone(shared: &ServerCore, conn: &Conn) {
    while !shared.is_shutdown() && !peer_gone(conn) {
        let guard = shared.lock();
        drop(shared.wait(guard, Duration::from_millis(50)));
    }
}
