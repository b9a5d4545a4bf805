//! Watch streams opened by the transport (`http.rs`) against the fake API server: reads that
//! time out inside a line, over plain TCP and TLS, and how a silent server's timeout reads.

use std::time::Instant;

use k8s_openapi::api::core::v1::Pod;
use serde_json::Value;

use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::auth::Connection;
use crate::resource::ApiResource;
use crate::testing::{FakeApiServer, Fault, Match};
use crate::wire::client::Client;
use crate::wire::http::Http;
use crate::wire::request::{self, WatchParams};

/// The bound on any wait: generous for a slow, noisy 2-core CI machine.
const WAIT: Duration = Duration::from_secs(20);

/// Every object of `resource`, in all namespaces.
fn all(resource: &ApiResource) -> request::Target<'_> {
    request::Target { resource, namespace: None, metadata_only: false, shard: None }
}

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

/// Each read of the streams below times out after this: short, so that a pause inside a line
/// outlasts it.
const IDLE: Duration = Duration::from_millis(100);

/// Opens a watch of every pod, whose reads time out after [`IDLE`], with `fault` on it.
///
/// That timeout bounds every read of the request, the wait for the answer's headers (and a TLS
/// handshake's) included, which a loaded machine can outlast: such an attempt is abandoned and
/// another made, with the fault pushed again (an attempt that reached the server took one).
/// Returns once the stream returned is the only one open, so that no abandoned one pauses in
/// its place.
fn open_watch(server: &FakeApiServer, http: &Http, params: &WatchParams, fault: Fault) -> WatchStream {
    let pods = ApiResource::of::<Pod>();
    let deadline = Instant::now() + WAIT;
    let stream = loop {
        server.push_fault(Match::Watch, fault.clone());
        match http.watch(all(&pods), params, IDLE) {
            Ok(stream) => break stream,
            Err(e) if e.to_string().contains("timed out (per read)") && Instant::now() < deadline => {}
            Err(e) => panic!("{e}"),
        }
    };
    while server.open_watches() > 1 {
        assert!(Instant::now() < deadline, "an abandoned watch stayed open");
        std::thread::sleep(Duration::from_millis(10));
    }
    stream
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
    let client = Client::from_url(&server.url()).unwrap();
    let http = Http::new(Arc::clone(&client.conn));
    let params = WatchParams {
        timeout: Duration::from_secs(600),
        bookmarks: true,
        send_initial_events: true,
        ..WatchParams::default()
    };
    // ADDED a, then the end marker, then the line to pause in.
    let mut stream = open_watch(&server, &http, &params, Fault::PauseInLine { after: 2 });
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
    let client =
        Client::from_kubeconfig_yaml(&server.kubeconfig(), &crate::auth::KubeconfigOptions::default()).unwrap();
    let http = Http::new(Arc::clone(&client.conn));
    let params =
        WatchParams { resource_version: Some(rv), timeout: Duration::from_secs(600), ..WatchParams::default() };
    let mut stream = open_watch(&server, &http, &params, Fault::PauseInLine { after: 0 });
    server.create(&pod("a")).unwrap();
    let event = read_through_a_pause(&server, &mut stream);
    assert_eq!(event["type"], "ADDED");
    assert_eq!(event["object"]["metadata"]["name"], "a");
}
