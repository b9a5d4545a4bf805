//! Metadata-only watching: `PartialObjectMetadata` through the `Accept` header, and servers that
//! ignore it.
#![cfg(feature = "testing")]

use crate::common;

use std::io::{BufRead, BufReader, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;

use common::*;
use k8s_openapi::api::core::v1::Pod;
use kube_watcher::{Api, Client, Config, ObjectRef, PartialObjectMetadata, metadata_watcher};

fn pods(url: &str) -> Api<Pod> {
    Api::all(Client::from_url(url).unwrap())
}

fn name<K>(m: &PartialObjectMetadata<K>) -> String {
    m.metadata.name.clone().unwrap_or_default()
}

#[test]
fn lists_and_watches_ask_for_partial_object_metadata_in_every_configuration() {
    for_each_config(|label, config| {
        let server = server();
        create_pods(&server, 0..3);
        let w = metadata_watcher(pods(&server.url()), config).unwrap();
        let seen = collect_until(&w, |s| s.last().is_some_and(|e| e == "InitDone"));
        assert_eq!(seen.iter().filter(|e| e.starts_with("InitApply")).count(), 3, "{label}: {seen:?}");
        server.create(&pod("apps", "new")).unwrap();
        server.delete::<Pod>(Some("apps"), "p1").unwrap();
        let seen = collect_until(&w, |s| s.iter().any(|e| e == "Delete(p1)"));
        assert_eq!(seen, ["Apply(new)", "Delete(p1)"], "{label}");

        let truth = server.get::<Pod>(Some("apps"), "new").unwrap();
        let got = w.store().get(&ObjectRef::new("new").within("apps")).unwrap();
        assert_eq!(got.metadata, truth.metadata, "{label}");
        let kind = got.types.as_ref().map(|t| (t.api_version.as_str(), t.kind.as_str()));
        assert_eq!(kind, Some(("meta.k8s.io/v1", "PartialObjectMetadata")), "{label}");
        for r in server.requests().iter().filter(|r| r.path.ends_with("/pods")) {
            let accept = r.header("accept").unwrap_or_default();
            let wanted = if r.watch { "as=PartialObjectMetadata;" } else { "as=PartialObjectMetadataList;" };
            assert!(accept.contains(wanted), "{label}: watch={} Accept: {accept}", r.watch);
            assert!(accept.ends_with(",application/json"), "{label}: a fallback for old servers: {accept}");
        }
        w.stop();
    });
}

#[test]
fn one_shot_list_and_get_return_metadata_only() {
    let server = server();
    server.create(&pod("apps", "a")).unwrap();
    let api = pods(&server.url()).into_metadata();
    let list = api.list(&kube_watcher::ListParams::default()).unwrap();
    assert_eq!(list.items.iter().map(name).collect::<Vec<_>>(), ["a"]);
    assert_eq!(list.items[0].types.as_ref().map(|t| t.kind.as_str()), Some("PartialObjectMetadata"));
    let one =
        Api::<Pod>::namespaced(Client::from_url(&server.url()).unwrap(), "apps").into_metadata().get("a").unwrap();
    assert_eq!(one.types.map(|t| t.kind), Some("PartialObjectMetadata".to_owned()));
}

/// Captures warnings, to check the "server ignored Accept" warning is logged once.
struct Warnings(Mutex<Vec<String>>);

impl log::Log for Warnings {
    fn enabled(&self, m: &log::Metadata<'_>) -> bool {
        m.level() <= log::Level::Warn
    }
    fn log(&self, r: &log::Record<'_>) {
        if self.enabled(r.metadata()) {
            self.0.lock().unwrap().push(r.args().to_string());
        }
    }
    fn flush(&self) {}
}

static WARNINGS: Warnings = Warnings(Mutex::new(Vec::new()));

/// A proxy in front of the fake that rewrites every request's `Accept` to plain JSON: a server
/// that ignores the metadata-only request and sends full objects. Requests are GETs without a
/// body, so each is a header block ending in a blank line. Dropping it joins its threads (the
/// connection threads end when the watcher and the fake close their sides).
struct AcceptStrippingProxy {
    url: String,
    stop: Arc<AtomicBool>,
    threads: Arc<Mutex<Vec<thread::JoinHandle<()>>>>,
}

impl AcceptStrippingProxy {
    fn start(upstream: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let stop = Arc::new(AtomicBool::new(false));
        let threads = Arc::new(Mutex::new(Vec::new()));
        let (handles, stopping) = (Arc::clone(&threads), Arc::clone(&stop));
        let accept = thread::spawn(move || {
            for client in listener.incoming() {
                if stopping.load(Ordering::Acquire) {
                    return;
                }
                let Ok(client) = client else { return };
                let Ok(server) = TcpStream::connect(upstream) else { return };
                let (mut to_client, mut from_server) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                let down = thread::spawn(move || {
                    let _ = std::io::copy(&mut from_server, &mut to_client);
                    let _ = to_client.shutdown(Shutdown::Both);
                });
                let up = thread::spawn(move || {
                    let mut reader = BufReader::new(client);
                    let mut server = server;
                    let mut line = String::new();
                    while matches!(reader.read_line(&mut line), Ok(n) if n > 0) {
                        if line.to_ascii_lowercase().starts_with("accept:") {
                            line = "Accept: application/json\r\n".to_owned();
                        }
                        if server.write_all(line.as_bytes()).is_err() {
                            break;
                        }
                        line.clear();
                    }
                    let _ = server.shutdown(Shutdown::Both);
                });
                handles.lock().unwrap().extend([down, up]);
            }
        });
        threads.lock().unwrap().push(accept);
        AcceptStrippingProxy { url, stop, threads }
    }
}

impl Drop for AcceptStrippingProxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        // Wake the accept loop so it sees the flag.
        let _ = TcpStream::connect(self.url.trim_start_matches("http://"));
        let threads = std::mem::take(&mut *self.threads.lock().unwrap());
        for t in threads {
            let _ = t.join();
        }
    }
}

#[test]
fn a_server_that_ignores_the_accept_header_still_gives_a_right_store_and_one_warning() {
    let _ = log::set_logger(&WARNINGS).map(|()| log::set_max_level(log::LevelFilter::Warn));
    let server = server();
    let widgets = kube_watcher::testing::ResourceType::new("example.com", "v1", "widgets", "Widget", true);
    for i in 0..3 {
        let obj = serde_json::json!({"metadata": {"name": format!("w{i}"), "namespace": "shop"}, "spec": {"big": "x".repeat(1000)}});
        server.create_value(&widgets, obj).unwrap();
    }
    let proxy = AcceptStrippingProxy::start(server.addr());
    let url = proxy.url.clone();
    let ar = kube_watcher::ApiResource::new("example.com", "v1", "Widget", "widgets", true);
    let api: Api<kube_watcher::DynamicObject> = Api::all_with(Client::from_url(&url).unwrap(), &ar);
    let w = metadata_watcher(api, Config::default()).unwrap();
    let seen = collect_until(&w, |s| s.last().is_some_and(|e| e == "InitDone"));
    assert_eq!(seen.len(), 5, "{seen:?}");
    server.create_value(&widgets, serde_json::json!({"metadata": {"name": "w9", "namespace": "shop"}})).unwrap();
    collect_until(&w, |s| s.iter().any(|e| e == "Apply(w9)"));
    let got = w.store().get(&ObjectRef::new("w1").within("shop")).unwrap();
    assert_eq!(got.types.as_ref().map(|t| t.kind.as_str()), Some("Widget"), "the full object came back");
    assert_eq!(got.metadata.name.as_deref(), Some("w1"), "its metadata is still right");
    let warned: Vec<String> = WARNINGS
        .0
        .lock()
        .unwrap()
        .iter()
        .filter(|m| m.contains("metadata only") && m.contains("Widget"))
        .cloned()
        .collect();
    assert_eq!(warned.len(), 1, "warned once: {warned:?}");
    w.stop();
    drop(server);
    drop(proxy);
}
