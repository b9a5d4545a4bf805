//! A TCP proxy on loopback between the library and the real API server, so a test can do to a
//! connection what networks do: drop it, refuse new ones, or go silent with the socket open.
//! It passes TLS through untouched (the server's certificate names 127.0.0.1, as the proxy does).

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

#[derive(Default)]
struct State {
    /// New connections are closed at once.
    refuse: AtomicBool,
    /// Bytes are held back in both directions (the sockets stay open).
    stalled: Mutex<bool>,
    /// The server's answers are held back: on a connection opened while this is on, all but
    /// its first burst (the server's TLS handshake), on the others, all.
    answers_held: AtomicBool,
    resumed: Condvar,
    /// Both halves of every live connection, to cut them.
    live: Mutex<Vec<(TcpStream, TcpStream)>>,
    accepted: AtomicUsize,
    /// Bytes passed from the server to the client (TLS records: compressed bodies stay small).
    downstream: AtomicUsize,
    closed: AtomicBool,
}

/// The proxy; stops and closes every connection on drop.
pub struct Proxy {
    port: u16,
    state: Arc<State>,
}

impl Proxy {
    /// A proxy to `127.0.0.1:target`.
    pub fn start(target: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let state = Arc::new(State::default());
        let shared = state.clone();
        thread::spawn(move || {
            for client in listener.incoming() {
                if shared.closed.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(client) = client else { continue };
                // The list of live connections stays locked from the check of `refuse` until the
                // new connection is on it: `refuse(true)` then `cut()` leaves no connection open,
                // also one accepted while they ran (else it could be checked before the one and
                // listed after the other, and pass the test's cut).
                let mut live = shared.live.lock();
                if shared.refuse.load(Ordering::SeqCst) {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                }
                let Ok(server) = TcpStream::connect(("127.0.0.1", target)) else {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                };
                shared.accepted.fetch_add(1, Ordering::SeqCst);
                live.push((client.try_clone().unwrap(), server.try_clone().unwrap()));
                drop(live);
                pipe(shared.clone(), client.try_clone().unwrap(), server.try_clone().unwrap(), false);
                pipe(shared.clone(), server, client, true);
            }
        });
        Proxy { port, state }
    }

    /// The port to point a client at.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Connections accepted and passed on so far.
    pub fn connections(&self) -> usize {
        self.state.accepted.load(Ordering::SeqCst)
    }

    /// Bytes the server has sent through the proxy so far.
    pub fn downstream_bytes(&self) -> usize {
        self.state.downstream.load(Ordering::SeqCst)
    }

    /// Drops every live connection (both sides see it closed).
    pub fn cut(&self) {
        for (a, b) in self.state.live.lock().drain(..) {
            let _ = a.shutdown(Shutdown::Both);
            let _ = b.shutdown(Shutdown::Both);
        }
    }

    /// While on, new connections are closed as soon as they are accepted.
    pub fn refuse(&self, on: bool) {
        self.state.refuse.store(on, Ordering::SeqCst);
    }

    /// While on, no byte passes in either direction; the sockets stay open (a dead peer).
    pub fn stall(&self, on: bool) {
        *self.state.stalled.lock() = on;
        self.state.resumed.notify_all();
    }

    /// While on, the server's answers are held back, and a new connection gets only the
    /// server's first burst (its TLS handshake): a request made then is sent, and hangs
    /// waiting for its answer, past the client's connect timeout.
    pub fn hold_answers(&self, on: bool) {
        let _stalled = self.state.stalled.lock();
        self.state.answers_held.store(on, Ordering::SeqCst);
        self.state.resumed.notify_all();
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.state.closed.store(true, Ordering::SeqCst);
        self.stall(false);
        self.cut();
        let _ = TcpStream::connect(("127.0.0.1", self.port)); // wakes the accept loop
    }
}

/// Copies `from` to `to` until either side closes, holding bytes back while stalled.
fn pipe(state: Arc<State>, mut from: TcpStream, mut to: TcpStream, downstream: bool) {
    thread::spawn(move || {
        let mut buf = vec![0u8; 64 * 1024];
        // A connection opened while answers are held passes its first burst downstream.
        let mut first = downstream && state.answers_held.load(Ordering::SeqCst);
        loop {
            let n = match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            {
                let mut stalled = state.stalled.lock();
                let held =
                    |stalled: bool| stalled || (downstream && !first && state.answers_held.load(Ordering::SeqCst));
                while held(*stalled) && !state.closed.load(Ordering::SeqCst) {
                    state.resumed.wait_for(&mut stalled, Duration::from_millis(200));
                }
            }
            first = false;
            if to.write_all(&buf[..n]).is_err() {
                break;
            }
            if downstream {
                state.downstream.fetch_add(n, Ordering::SeqCst);
            }
        }
        let _ = to.shutdown(Shutdown::Write);
    });
}
