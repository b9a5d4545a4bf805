//! Helpers shared by the integration tests: objects, bounded waits, event collection.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube_watcher::testing::{FakeApiServer, FakeApiServerBuilder};
use kube_watcher::{
    Api, Client, Config, Error, Event, InitialListStrategy, Notice, Watchable, Watcher, WatcherBuilder,
};

pub mod modules;
pub mod random;

/// Puts a builder in one store mode (the tests that run a scenario in every mode).
pub type Mode = fn(WatcherBuilder<Pod>) -> WatcherBuilder<Pod>;

/// Milliseconds, to keep durations short to write.
pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// The bound on any single wait in a test: generous for a slow, noisy 2-core CI machine.
pub const WAIT: Duration = Duration::from_secs(20);

pub fn pod(ns: &str, name: &str) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(ns.into()),
            labels: Some(BTreeMap::from([("app".to_owned(), "web".to_owned())])),
            ..ObjectMeta::default()
        },
        ..Pod::default()
    }
}

/// Creates pods `p{i}` in namespace `apps` for each `i` of `numbers`.
pub fn create_pods(server: &FakeApiServer, numbers: std::ops::Range<usize>) {
    for i in numbers {
        server.create(&pod("apps", &format!("p{i}"))).unwrap();
    }
}

pub fn labelled(mut p: Pod, key: &str, value: &str) -> Pod {
    p.metadata.labels.get_or_insert_with(BTreeMap::new).insert(key.into(), value.into());
    p
}

/// Pods in every namespace of `server`.
pub fn pods(server: &FakeApiServer) -> Api<Pod> {
    Api::all(Client::from_url(&server.url()).unwrap())
}

/// A fake server with short bookmark intervals, as tests want.
pub fn server() -> FakeApiServer {
    FakeApiServer::builder().bookmark_interval(ms(100)).start()
}

/// A compact description of an event, for assertions.
pub fn describe<K: Watchable>(ev: &Event<K>) -> String {
    let name = |o: &K| o.meta().name.clone().unwrap_or_default();
    match ev {
        Event::Init => "Init".into(),
        Event::InitApply(p) => format!("InitApply({})", name(p)),
        Event::InitDone => "InitDone".into(),
        Event::Apply(p) => format!("Apply({})", name(p)),
        Event::Delete(p) => format!("Delete({})", name(p)),
    }
}

/// Receives events until `done` says so, returning everything seen (errors as `Err(..)`).
/// Panics with what was seen if `WAIT` passes first.
pub fn collect_until<K: Watchable>(w: &Watcher<K>, done: impl FnMut(&[String]) -> bool) -> Vec<String> {
    collect_from(w.receiver(), done)
}

/// [`collect_until`] for any event channel, such as a subscription.
pub fn collect_from<K: Watchable>(
    rx: &crossbeam_channel::Receiver<Result<Event<K>, Error>>,
    mut done: impl FnMut(&[String]) -> bool,
) -> Vec<String> {
    let deadline = Instant::now() + WAIT;
    let mut seen = Vec::new();
    while !done(&seen) {
        match rx.recv_deadline(deadline) {
            Ok(Ok(ev)) => seen.push(describe(&ev)),
            Ok(Err(e)) => seen.push(format!("Err({e})")),
            Err(e) => panic!("no more events ({e}); seen so far: {seen:?}"),
        }
    }
    seen
}

/// Receives notices until `done` holds for one (bounded by `WAIT`); returns all seen.
pub fn notices_until(rx: &crossbeam_channel::Receiver<Notice>, mut done: impl FnMut(&Notice) -> bool) -> Vec<Notice> {
    let deadline = Instant::now() + WAIT;
    let mut seen = Vec::new();
    loop {
        match rx.recv_deadline(deadline) {
            Ok(n) => {
                let stop = done(&n);
                seen.push(n);
                if stop {
                    return seen;
                }
            }
            Err(e) => panic!("no more notices ({e}); seen so far: {seen:?}"),
        }
    }
}

/// Waits (bounded) until the store's names equal the server's truth.
pub fn store_matches_server(w: &Watcher<Pod>, server: &FakeApiServer) {
    let deadline = Instant::now() + WAIT;
    loop {
        let mut truth: Vec<String> = server.list::<Pod>().iter().map(key).collect();
        truth.sort();
        let mut ours: Vec<String> = w.store().state().iter().map(|p| key(p)).collect();
        ours.sort();
        if truth == ours && w.store().is_ready() {
            return;
        }
        assert!(Instant::now() < deadline, "store never matched the server: store {ours:?}, server {truth:?}");
        // Drain events so a consumer-attached watcher is never blocked by us.
        let _ = w.try_recv();
        std::thread::sleep(ms(5));
    }
}

pub fn key(p: &Pod) -> String {
    format!(
        "{}/{}@{}",
        p.metadata.namespace.as_deref().unwrap_or(""),
        p.metadata.name.as_deref().unwrap_or(""),
        p.metadata.resource_version.as_deref().unwrap_or("")
    )
}

/// The default configuration with paged lists: for the tests of what a list does page by page
/// (its faults, continue tokens, relists), which a streaming list, the default, never asks for.
pub fn paged() -> Config {
    Config::default().initial_list_strategy(InitialListStrategy::ListWatch)
}

/// Polls `cond` (bounded by `WAIT`): for facts of the fake server, which has no events.
pub fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        std::thread::sleep(ms(5));
    }
}

/// One scenario, many configurations (style rule 25): page sizes 1, 2 and 500, bookmarks on and
/// off, list-then-watch and streaming lists. Each run is labelled.
pub fn for_each_config(mut scenario: impl FnMut(&str, Config)) {
    for page in [1u32, 2, 500] {
        for bookmarks in [true, false] {
            for streaming in [false, true] {
                if streaming && !bookmarks {
                    continue; // streaming lists need bookmarks
                }
                let strategy =
                    if streaming { InitialListStrategy::StreamingList } else { InitialListStrategy::ListWatch };
                let mut c = Config::default().page_size(page).initial_list_strategy(strategy);
                if !bookmarks {
                    c = c.disable_bookmarks();
                }
                let label = format!("page_size={page} bookmarks={bookmarks} streaming={streaming}");
                scenario(&label, c);
            }
        }
    }
}

/// A fake server made by `builder` on `port`: the second server of a restart (the first one,
/// from [`server_to_restart`], dropped), as a server restarting on its port looks to a client.
///
/// Waits for the port to be free. A server that was just dropped has closed its listening socket,
/// but a child process another test is starting at that moment (an exec plugin, an example) holds
/// a copy of every descriptor from its fork until its exec closes them, the listener included:
/// until then a bind to the port fails ("Address already in use").
pub fn server_on(port: u16, builder: impl Fn() -> FakeApiServerBuilder) -> FakeApiServer {
    let deadline = Instant::now() + WAIT;
    let mut tries = 0;
    loop {
        tries += 1;
        match builder().port(port).try_start() {
            Ok(server) => return server,
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => panic!("port {port} still taken after {tries} tries: {e}"),
        }
    }
}

/// The first server of a restart ([`server_on`] its port again once it is dropped), made by
/// `builder`, on a port below the range the system hands out for port 0 and for outgoing
/// connections (`ip_local_port_range`; 32768 and up where it cannot be read), so that no other
/// test's connection or server takes the freed port before the restart binds it. Below it only
/// an explicit bind takes a port: the ports tried start at one of this process's own and step
/// past any taken.
pub fn server_to_restart(builder: impl Fn() -> FakeApiServerBuilder) -> FakeApiServer {
    on_a_low_port(|port| builder().port(port).try_start().ok())
}

/// What `bind` makes of the first port below the ephemeral range it takes (see
/// [`server_to_restart`]).
fn on_a_low_port<T>(mut bind: impl FnMut(u16) -> Option<T>) -> T {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    const LOW: usize = 10_000;
    let first_ephemeral = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse::<usize>().ok())
        .unwrap_or(32_768);
    let span = first_ephemeral.saturating_sub(LOW);
    assert!(span >= 1000, "no room for fixed ports below the ephemeral range ({first_ephemeral})");
    for _ in 0..100 {
        let offset = (std::process::id() as usize * 97 + NEXT.fetch_add(1, Ordering::Relaxed)) % span;
        let port = u16::try_from(LOW + offset).unwrap();
        if let Some(bound) = bind(port) {
            return bound;
        }
    }
    panic!("no free port below {first_ephemeral} in 100 tries");
}

/// A port that refuses connections for as long as this lives, and that no server can be given
/// meanwhile (a port bound and freed again can be: another test's server may bind it, and
/// answer).
///
/// The port is the local end of a connection to a listener of our own: the system keeps it
/// bound while the connection is open, so a bind to it fails (on port 0 the system skips it),
/// and since nothing listens on it, a connection to it is refused at once.
pub struct RefusedPort {
    pub port: u16,
    _held: (TcpListener, TcpStream, TcpStream),
}

pub fn refused_port() -> RefusedPort {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let outgoing = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (incoming, _) = listener.accept().unwrap();
    let port = outgoing.local_addr().unwrap().port();
    RefusedPort { port, _held: (listener, outgoing, incoming) }
}

/// A TCP relay in front of a server, on a port of its own: [`stop`](Relay::stop) closes the
/// port (connections to it are refused, those through it are cut) and [`start`](Relay::start)
/// opens it again. So a server restarting on its port looks to a client, while what it serves
/// lives on behind the relay (as etcd does behind a restarted kube-apiserver).
pub struct Relay {
    port: u16,
    target: SocketAddr,
    running: Option<Running>,
}

/// A relay's open port: its accept thread, and the connections through it.
struct Running {
    stop: Arc<AtomicBool>,
    accept: std::thread::JoinHandle<()>,
    open: Arc<Mutex<Vec<TcpStream>>>,
}

impl Relay {
    /// A relay to `target`, open.
    pub fn to(target: SocketAddr) -> Relay {
        let listener = on_a_low_port(|port| TcpListener::bind(("127.0.0.1", port)).ok());
        let port = listener.local_addr().unwrap().port();
        Relay { port, target, running: Some(Relay::serve(listener, target)) }
    }

    /// The URL a client reaches the server through (plain HTTP).
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Closes the port and cuts every connection through it.
    pub fn stop(&mut self) {
        let Some(running) = self.running.take() else { return };
        running.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop; it sees the flag and drops the listener.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        running.accept.join().unwrap();
        for conn in running.open.lock().unwrap().drain(..) {
            let _ = conn.shutdown(Shutdown::Both);
        }
    }

    /// Opens the port again (waiting for it as [`server_on`] does).
    pub fn start(&mut self) {
        assert!(self.running.is_none(), "the relay is open");
        let deadline = Instant::now() + WAIT;
        let listener = loop {
            match TcpListener::bind(("127.0.0.1", self.port)) {
                Ok(listener) => break listener,
                Err(e) if e.kind() == std::io::ErrorKind::AddrInUse && Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(e) => panic!("port {} still taken: {e}", self.port),
            }
        };
        self.running = Some(Relay::serve(listener, self.target));
    }

    fn serve(listener: TcpListener, target: SocketAddr) -> Running {
        let stop = Arc::new(AtomicBool::new(false));
        let open: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let (flag, conns) = (Arc::clone(&stop), Arc::clone(&open));
        let accept = std::thread::spawn(move || {
            for client in listener.incoming() {
                if flag.load(Ordering::SeqCst) {
                    return;
                }
                let (Ok(client), Ok(server)) = (client, TcpStream::connect(target)) else { continue };
                let mut list = conns.lock().unwrap();
                for (mut from, mut to) in [(&client, &server), (&server, &client)]
                    .map(|(a, b)| (a.try_clone().unwrap(), b.try_clone().unwrap()))
                {
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut from, &mut to);
                        let _ = to.shutdown(Shutdown::Write);
                    });
                }
                list.extend([client, server]);
            }
        });
        Running { stop, accept, open }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop();
    }
}

/// What a watcher's channel still held once `stop()` returned, read without waiting: `stop()`
/// returns after the watcher's threads ended, which closes the channel, so it drains to
/// `Disconnected`. `Empty` means a thread still runs: a `stop()` that gave up joining it.
pub fn drained_after_stop<T>(rx: &crossbeam_channel::Receiver<T>) -> usize {
    let mut queued = 0;
    loop {
        match rx.try_recv() {
            Ok(_) => queued += 1,
            Err(crossbeam_channel::TryRecvError::Disconnected) => return queued,
            Err(crossbeam_channel::TryRecvError::Empty) => {
                panic!("stop() returned with the channel open: a watcher thread still runs")
            }
        }
    }
}
