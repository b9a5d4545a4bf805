//! Protocol tests for the fake API server (`kube_watcher::testing`), driven over raw HTTP/1.1 so
//! that status codes, headers, chunking and connection behaviour are visible.
#![cfg(feature = "testing")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube_watcher::testing::{Chunking, FakeApiServer, Fault, Match, ResourceType, StreamingLists, Watch410};
use serde_json::{Value, json};

/// Generous bound for every blocking read in these tests.
const READ_TIMEOUT: Duration = Duration::from_secs(10);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A complete response.
#[derive(Debug)]
struct Resp {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Resp {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("body is not json ({e}): {}", String::from_utf8_lossy(&self.body)))
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
}

/// A connection that can carry several requests (keep-alive).
struct Client {
    reader: BufReader<TcpStream>,
}

impl Client {
    fn connect(server: &FakeApiServer) -> Client {
        let stream = TcpStream::connect(server.addr()).unwrap();
        stream.set_read_timeout(Some(READ_TIMEOUT)).unwrap();
        Client { reader: BufReader::new(stream) }
    }

    fn send(&mut self, method: &str, target: &str, headers: &[(&str, &str)], body: Option<&[u8]>) {
        let mut req = format!("{method} {target} HTTP/1.1\r\nHost: 127.0.0.1\r\n");
        for (k, v) in headers {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
        if let Some(b) = body {
            req.push_str(&format!("Content-Length: {}\r\n", b.len()));
        }
        req.push_str("\r\n");
        let s = self.reader.get_mut();
        s.write_all(req.as_bytes()).unwrap();
        if let Some(b) = body {
            s.write_all(b).unwrap();
        }
    }

    fn read_head(&mut self) -> (u16, Vec<(String, String)>) {
        let mut line = String::new();
        self.reader.read_line(&mut line).unwrap();
        let status: u16 = line.split(' ').nth(1).unwrap_or_else(|| panic!("status line {line:?}")).parse().unwrap();
        let mut headers = Vec::new();
        loop {
            let mut h = String::new();
            self.reader.read_line(&mut h).unwrap();
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            let (k, v) = h.split_once(':').unwrap();
            headers.push((k.trim().to_string(), v.trim().to_string()));
        }
        (status, headers)
    }

    /// Reads one chunk; `None` for the terminating chunk.
    fn read_chunk(&mut self) -> std::io::Result<Option<Vec<u8>>> {
        let mut size = String::new();
        if self.reader.read_line(&mut size)? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        let n = usize::from_str_radix(size.trim(), 16)
            .map_err(|_| std::io::Error::other(format!("bad chunk size {size:?}")))?;
        if n == 0 {
            let mut end = String::new();
            self.reader.read_line(&mut end)?;
            return Ok(None);
        }
        let mut data = vec![0; n + 2];
        self.reader.read_exact(&mut data)?;
        data.truncate(n);
        Ok(Some(data))
    }

    fn response(&mut self, method: &str, target: &str, headers: &[(&str, &str)], body: Option<&[u8]>) -> Resp {
        self.send(method, target, headers, body);
        let (status, headers) = self.read_head();
        let mut resp = Resp { status, headers, body: Vec::new() };
        if resp.header("transfer-encoding").is_some_and(|t| t.contains("chunked")) {
            while let Some(c) = self.read_chunk().unwrap() {
                resp.body.extend(c);
            }
        } else if let Some(len) = resp.header("content-length") {
            let mut body = vec![0; len.parse().unwrap()];
            self.reader.read_exact(&mut body).unwrap();
            resp.body = body;
        }
        resp
    }
}

fn get(server: &FakeApiServer, target: &str) -> Resp {
    Client::connect(server).response("GET", target, &[], None)
}

fn get_with(server: &FakeApiServer, target: &str, headers: &[(&str, &str)]) -> Resp {
    Client::connect(server).response("GET", target, headers, None)
}

/// A watch stream: de-chunks and splits into lines.
struct Watch {
    client: Client,
    status: u16,
    pending: Vec<u8>,
    ended: bool,
    /// Sizes of the chunks received (to check chunking modes).
    chunk_sizes: Vec<usize>,
}

/// How a watch stream ended.
#[derive(Debug, PartialEq, Eq)]
enum End {
    Clean,
    Broken,
}

impl Watch {
    fn open(server: &FakeApiServer, target: &str) -> Watch {
        Watch::open_with(server, target, &[])
    }

    fn open_with(server: &FakeApiServer, target: &str, headers: &[(&str, &str)]) -> Watch {
        let mut client = Client::connect(server);
        client.send("GET", target, headers, None);
        let (status, _) = client.read_head();
        Watch { client, status, pending: Vec::new(), ended: false, chunk_sizes: Vec::new() }
    }

    /// The next line, `Err` when the stream ended (cleanly or not).
    fn line(&mut self) -> Result<Vec<u8>, End> {
        loop {
            if let Some(i) = self.pending.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.pending.drain(..=i).collect();
                return Ok(line[..line.len() - 1].to_vec());
            }
            if self.ended {
                return Err(End::Clean);
            }
            match self.client.read_chunk() {
                Ok(Some(c)) => {
                    self.chunk_sizes.push(c.len());
                    self.pending.extend(c);
                }
                Ok(None) => {
                    self.ended = true;
                    if !self.pending.is_empty() {
                        return Err(End::Broken);
                    }
                }
                Err(_) => return Err(End::Broken),
            }
        }
    }

    fn event(&mut self) -> Value {
        let line = self.line().unwrap_or_else(|e| panic!("stream ended: {e:?}"));
        serde_json::from_slice(&line).unwrap_or_else(|e| panic!("bad line {e}: {}", String::from_utf8_lossy(&line)))
    }

    fn end(&mut self) -> End {
        match self.line() {
            Ok(l) => panic!("expected the end, got {}", String::from_utf8_lossy(&l)),
            Err(e) => e,
        }
    }
}

fn cm(ns: &str, name: &str, labels: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": ns, "labels": labels}})
}

fn cm_type() -> ResourceType {
    ResourceType::of::<ConfigMap>()
}

fn seed(server: &FakeApiServer, n: usize) {
    for i in 0..n {
        server.create_value(&cm_type(), cm("shop", &format!("cm-{i:02}"), json!({"i": i.to_string()}))).unwrap();
    }
}

fn names(list: &Value) -> Vec<String> {
    list["items"].as_array().unwrap().iter().map(|i| i["metadata"]["name"].as_str().unwrap().to_string()).collect()
}

fn typ(ev: &Value) -> &str {
    ev["type"].as_str().unwrap()
}

fn rv_of(v: &Value) -> String {
    v["metadata"]["resourceVersion"].as_str().unwrap().to_string()
}

fn wait_until(mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + READ_TIMEOUT;
    while !cond() {
        assert!(Instant::now() < deadline, "condition not reached in time");
        std::thread::sleep(ms(10));
    }
}

// ---------------------------------------------------------------------------------------------
// Lists and pagination

#[test]
fn paginated_lists_report_the_same_resource_version_on_every_page() {
    let server = FakeApiServer::start();
    seed(&server, 5);
    let first = get(&server, "/api/v1/namespaces/shop/configmaps?limit=2").json();
    let list_rv = rv_of(&first);
    assert_eq!(first["kind"], "ConfigMapList");
    assert_eq!(first["metadata"]["remainingItemCount"], 3);
    assert!(first["items"][0].get("kind").is_none(), "built-in list items lack kind");
    let mut all = names(&first);
    let mut token = first["metadata"]["continue"].as_str().unwrap().to_string();
    // A write between pages must not show up.
    server.create_value(&cm_type(), cm("shop", "zz-late", json!({}))).unwrap();
    loop {
        let page = get(&server, &format!("/api/v1/namespaces/shop/configmaps?limit=2&continue={token}")).json();
        assert_eq!(rv_of(&page), list_rv);
        all.extend(names(&page));
        match page["metadata"]["continue"].as_str() {
            Some(t) if !t.is_empty() => token = t.to_string(),
            _ => {
                assert!(page["metadata"].get("remainingItemCount").is_none());
                break;
            }
        }
    }
    assert_eq!(all, vec!["cm-00", "cm-01", "cm-02", "cm-03", "cm-04"]);
}

#[test]
fn remaining_item_count_is_omitted_when_selectors_are_used() {
    let server = FakeApiServer::start();
    seed(&server, 4);
    let page = get(&server, "/api/v1/configmaps?limit=1&labelSelector=i").json();
    assert!(page["metadata"]["continue"].as_str().is_some());
    assert!(page["metadata"].get("remainingItemCount").is_none());
}

#[test]
fn expired_continue_tokens_get_410_with_an_inconsistent_token() {
    // TTL zero: a token expires as soon as a write supersedes its revision (no sleeping).
    let server = FakeApiServer::builder().continue_ttl(Duration::ZERO).start();
    seed(&server, 3);
    let first = get(&server, "/api/v1/configmaps?limit=1").json();
    let token = first["metadata"]["continue"].as_str().unwrap().to_string();
    server.create_value(&cm_type(), cm("shop", "cm-99", json!({}))).unwrap();
    let expired = get(&server, &format!("/api/v1/configmaps?limit=1&continue={token}"));
    assert_eq!(expired.status, 410);
    let st = expired.json();
    assert_eq!(st["reason"], "Expired");
    let inconsistent = st["metadata"]["continue"].as_str().unwrap().to_string();
    let rest = get(&server, &format!("/api/v1/configmaps?limit=10&continue={inconsistent}")).json();
    assert_eq!(names(&rest), vec!["cm-01", "cm-02", "cm-99"]);
    assert_ne!(rv_of(&rest), rv_of(&first), "an inconsistent continuation reports the latest revision");
}

/// Pages through a whole list, returning the names and each page's resourceVersion.
fn page_through(server: &FakeApiServer, limit: usize) -> Result<(Vec<String>, Vec<String>), Resp> {
    let mut all = Vec::new();
    let mut rvs = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let target = match &token {
            Some(t) => format!("/api/v1/configmaps?limit={limit}&continue={t}"),
            None => format!("/api/v1/configmaps?limit={limit}"),
        };
        let resp = get(server, &target);
        if resp.status != 200 {
            return Err(resp);
        }
        let page = resp.json();
        all.extend(names(&page));
        rvs.push(rv_of(&page));
        match page["metadata"]["continue"].as_str() {
            Some(t) if !t.is_empty() => token = Some(t.to_string()),
            _ => return Ok((all, rvs)),
        }
    }
}

#[test]
fn tokens_at_the_current_revision_never_expire() {
    let server = FakeApiServer::builder().continue_ttl(Duration::ZERO).start();
    seed(&server, 3);
    let (all, rvs) = page_through(&server, 1).unwrap_or_else(|r| panic!("HTTP {}", r.status));
    assert_eq!(all, vec!["cm-00", "cm-01", "cm-02"]);
    assert!(rvs.iter().all(|rv| *rv == rvs[0]), "{rvs:?}");
}

#[test]
fn a_fresh_list_after_an_expiry_works() {
    for compact in [false, true] {
        let server = FakeApiServer::builder().continue_ttl(Duration::ZERO).start();
        seed(&server, 3);
        let first = get(&server, "/api/v1/configmaps?limit=1").json();
        let token = first["metadata"]["continue"].as_str().unwrap().to_string();
        server.create_value(&cm_type(), cm("shop", "cm-03", json!({}))).unwrap();
        if compact {
            server.compact();
        }
        let resp = get(&server, &format!("/api/v1/configmaps?limit=1&continue={token}"));
        assert_eq!(resp.status, 410, "compact={compact}");
        // The store is quiet now, at the revision the expiry happened at: a new list works,
        // over and over (it used to get 410 forever once a token at its revision had expired).
        for attempt in 0..3 {
            let (all, rvs) = page_through(&server, 1)
                .unwrap_or_else(|r| panic!("compact={compact} attempt {attempt}: HTTP {}", r.status));
            assert_eq!(all, vec!["cm-00", "cm-01", "cm-02", "cm-03"], "compact={compact}");
            assert!(rvs.iter().all(|rv| *rv == server.resource_version()), "compact={compact}: {rvs:?}");
        }
    }
}

#[test]
fn compaction_expires_continue_tokens() {
    let server = FakeApiServer::start();
    seed(&server, 3);
    let first = get(&server, "/api/v1/configmaps?limit=1").json();
    let token = first["metadata"]["continue"].as_str().unwrap().to_string();
    server.create_value(&cm_type(), cm("shop", "after", json!({}))).unwrap();
    server.compact();
    let resp = get(&server, &format!("/api/v1/configmaps?limit=1&continue={token}"));
    assert_eq!(resp.status, 410);
    assert!(resp.json()["metadata"]["continue"].is_string());
}

#[test]
fn garbage_continue_tokens_are_rejected_with_400() {
    let server = FakeApiServer::start();
    for token in ["garbage!", "eyJ2IjoieCJ9", ""] {
        if token.is_empty() {
            continue;
        }
        let resp = get(&server, &format!("/api/v1/configmaps?limit=1&continue={token}"));
        assert_eq!(resp.status, 400, "{token}");
        assert_eq!(resp.json()["reason"], "BadRequest");
    }
}

#[test]
fn the_resource_version_table_is_enforced() {
    let server = FakeApiServer::start();
    seed(&server, 3);
    let rv_before = server.resource_version();
    server.create_value(&cm_type(), cm("shop", "later", json!({}))).unwrap();
    let cont = get(&server, "/api/v1/configmaps?limit=1").json()["metadata"]["continue"].as_str().unwrap().to_string();
    let cases: Vec<(String, u16)> = vec![
        ("resourceVersionMatch=NotOlderThan".into(), 422),
        ("resourceVersionMatch=Exact".into(), 422),
        ("resourceVersionMatch=Exact&resourceVersion=0".into(), 422),
        ("resourceVersionMatch=Bogus&resourceVersion=1".into(), 422),
        (format!("resourceVersionMatch=NotOlderThan&resourceVersion=1&continue={cont}"), 422),
        (format!("resourceVersion=1&continue={cont}"), 400),
        (format!("resourceVersion=0&limit=1&continue={cont}"), 200),
        ("resourceVersion=abc".into(), 400),
        ("limit=abc".into(), 400),
        ("timeout=soon".into(), 400),
        ("sendInitialEvents=true".into(), 422),
        ("resourceVersionMatch=NotOlderThan&resourceVersion=0".into(), 200),
        ("resourceVersionMatch=NotOlderThan&resourceVersion=1&limit=1".into(), 200),
    ];
    for (query, want) in cases {
        let resp = get(&server, &format!("/api/v1/configmaps?{query}"));
        assert_eq!(resp.status, want, "{query}: {}", String::from_utf8_lossy(&resp.body));
        if want == 422 {
            let st = resp.json();
            assert_eq!(st["reason"], "Invalid");
            assert_eq!(st["details"]["group"], "meta.k8s.io");
            assert_eq!(st["details"]["kind"], "ListOptions");
            assert!(!st["details"]["causes"].as_array().unwrap().is_empty());
        }
    }
    // Exact N: the snapshot at N, list RV == N.
    let exact =
        get(&server, &format!("/api/v1/configmaps?resourceVersion={rv_before}&resourceVersionMatch=Exact")).json();
    assert_eq!(rv_of(&exact), rv_before);
    assert_eq!(names(&exact).len(), 3);
    // Legacy quirk: RV=N + limit is an exact, paged read.
    let legacy = get(&server, &format!("/api/v1/configmaps?resourceVersion={rv_before}&limit=10")).json();
    assert_eq!(rv_of(&legacy), rv_before);
    // Not older than N: the current state.
    let not_older = get(&server, &format!("/api/v1/configmaps?resourceVersion={rv_before}")).json();
    assert_eq!(rv_of(&not_older), server.resource_version());
    assert_eq!(names(&not_older).len(), 4);
    // RV=0 + limit: the watch cache ignores the limit.
    let any = get(&server, "/api/v1/configmaps?resourceVersion=0&limit=1").json();
    assert_eq!(names(&any).len(), 4);
    assert!(any["metadata"].get("continue").is_none());
    // After compaction, an exact read of an old revision is gone.
    server.compact();
    let gone = get(&server, &format!("/api/v1/configmaps?resourceVersion={rv_before}&limit=10"));
    assert_eq!(gone.status, 410);
    assert_eq!(gone.json()["reason"], "Expired");
}

#[test]
fn the_watch_cache_limit_quirk_can_be_turned_off() {
    let server = FakeApiServer::builder().watch_cache_ignores_limit(false).start();
    seed(&server, 3);
    let page = get(&server, "/api/v1/configmaps?resourceVersion=0&limit=1").json();
    assert_eq!(names(&page).len(), 1);
}

#[test]
fn too_large_resource_versions_get_504_with_the_cause_and_retry_after() {
    let server = FakeApiServer::start();
    let resp = get(&server, "/api/v1/configmaps?resourceVersion=999999");
    assert_eq!(resp.status, 504);
    assert_eq!(resp.header("retry-after"), Some("1"));
    let st = resp.json();
    assert_eq!(st["reason"], "Timeout");
    assert_eq!(st["details"]["causes"][0]["reason"], "ResourceVersionTooLarge");
    assert!(st["message"].as_str().unwrap().contains("Too large resource version"));
}

#[test]
fn label_selectors_support_every_form() {
    let server = FakeApiServer::start();
    for (name, labels) in [
        ("a", json!({"app": "web", "tier": "front"})),
        ("b", json!({"app": "api", "tier": "back"})),
        ("c", json!({"app": "web"})),
    ] {
        server.create_value(&cm_type(), cm("shop", name, labels)).unwrap();
    }
    for (sel, want) in [
        ("app%3Dweb", vec!["a", "c"]),
        ("app%3D%3Dweb", vec!["a", "c"]),
        ("app!%3Dweb", vec!["b"]),
        ("tier%20in%20(front%2Cedge)", vec!["a"]),
        ("tier%20notin%20(front)", vec!["b", "c"]),
        ("tier", vec!["a", "b"]),
        ("!tier", vec!["c"]),
        ("app%3Dweb%2Ctier", vec!["a"]),
    ] {
        let list = get(&server, &format!("/api/v1/namespaces/shop/configmaps?labelSelector={sel}")).json();
        assert_eq!(names(&list), want, "{sel}");
    }
    for bad in ["app%3D%3D%3D", "tier%20in%20front", "a%20b"] {
        let resp = get(&server, &format!("/api/v1/configmaps?labelSelector={bad}"));
        assert_eq!(resp.status, 400, "{bad}");
    }
}

#[test]
fn field_selectors_support_name_namespace_and_registered_fields() {
    let server = FakeApiServer::start();
    server.create_value(&cm_type(), cm("shop", "a", json!({}))).unwrap();
    server.create_value(&cm_type(), cm("other", "a", json!({}))).unwrap();
    server.create_value(&cm_type(), cm("shop", "b", json!({}))).unwrap();
    let by_name = get(&server, "/api/v1/configmaps?fieldSelector=metadata.name%3Da").json();
    assert_eq!(names(&by_name), vec!["a", "a"]);
    let by_ns = get(&server, "/api/v1/configmaps?fieldSelector=metadata.namespace!%3Dshop").json();
    assert_eq!(names(&by_ns), vec!["a"]);
    assert_eq!(get(&server, "/api/v1/configmaps?fieldSelector=spec.foo%3Dx").status, 400);
    // Pods support status.phase out of the box; custom types can register fields.
    let pods = get(&server, "/api/v1/pods?fieldSelector=status.phase%3DRunning");
    assert_eq!(pods.status, 200);
    let widgets =
        ResourceType::new("example.com", "v1", "widgets", "Widget", true).with_selectable_fields(&["spec.color"]);
    server.register(widgets.clone());
    server
        .create_value(&widgets, json!({"metadata": {"name": "w", "namespace": "shop"}, "spec": {"color": "red"}}))
        .unwrap();
    let red = get(&server, "/apis/example.com/v1/widgets?fieldSelector=spec.color%3Dred").json();
    assert_eq!(names(&red), vec!["w"]);
    assert_eq!(red["items"][0]["kind"], "Widget", "custom-type list items carry kind");
}

/// kube-apiserver words an unknown field label by type (tests/real/differential.rs): a type
/// with only the metadata fields lists them, pods (with field labels of their own) say "not
/// supported".
#[test]
fn unknown_field_labels_are_refused_in_the_real_servers_words() {
    let server = FakeApiServer::start();
    let cms = get(&server, "/api/v1/namespaces/shop/configmaps?fieldSelector=spec.nope%3Dx").json();
    assert_eq!(
        cms["message"],
        r#""spec.nope" is not a known field selector: only "metadata.name", "metadata.namespace""#
    );
    let pods = get(&server, "/api/v1/pods?fieldSelector=spec.nope%3Dx").json();
    assert_eq!(pods["message"], "field label not supported: spec.nope");
}

#[test]
fn missing_objects_and_unknown_paths_get_the_real_404_shapes() {
    let server = FakeApiServer::start();
    let missing = get(&server, "/api/v1/namespaces/shop/configmaps/nope");
    assert_eq!(missing.status, 404);
    assert_eq!(missing.json()["reason"], "NotFound");
    let unknown_type = get(&server, "/apis/example.com/v1/widgets");
    assert_eq!(unknown_type.status, 404);
    assert_eq!(unknown_type.json()["kind"], "Status");
    let outside = get(&server, "/metrics-nope");
    assert_eq!(outside.status, 404);
    assert_eq!(outside.body, b"404 page not found\n");
}

/// Bodies as kube-apiserver reads them (tests/real/differential.rs compares the answers): JSON
/// with or without a `Content-Type`, YAML, and a 415 naming what it reads for anything else.
#[test]
fn write_bodies_are_read_by_their_content_type() {
    let server = FakeApiServer::start();
    let post = |content_type: Option<&str>, body: &str| {
        let headers: Vec<(&str, &str)> = content_type.map(|t| ("Content-Type", t)).into_iter().collect();
        Client::connect(&server).response("POST", "/api/v1/namespaces/shop/configmaps", &headers, Some(body.as_bytes()))
    };
    let json = |name: &str| cm("shop", name, json!({})).to_string();
    assert_eq!(post(None, &json("untyped")).status, 201);
    assert_eq!(post(Some("application/json"), &json("typed")).status, 201);
    let yaml = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: yaml\ndata:\n  k: v\n";
    let created = post(Some("application/yaml"), yaml);
    assert_eq!((created.status, &created.json()["data"]["k"]), (201, &json!("v")), "{}", created.json());
    let refused = post(Some("text/plain"), &json("plain"));
    assert_eq!((refused.status, &refused.json()["reason"]), (415, &json!("UnsupportedMediaType")));
    assert!(refused.json()["message"].as_str().unwrap().ends_with(
        "accepted media types include: application/json, application/yaml, application/vnd.kubernetes.protobuf"
    ));
}

// ---------------------------------------------------------------------------------------------
// Watches

#[test]
fn a_watch_from_a_resource_version_replays_every_later_change() {
    let server = FakeApiServer::start();
    seed(&server, 1);
    let start = server.resource_version();
    server.create_value(&cm_type(), cm("shop", "x", json!({}))).unwrap();
    server
        .replace_value(&cm_type(), json!({"metadata": {"name": "x", "namespace": "shop"}, "data": {"k": "v"}}))
        .unwrap();
    server.delete_value(&cm_type(), Some("shop"), "x").unwrap();
    let mut w = Watch::open(&server, &format!("/api/v1/configmaps?watch=1&resourceVersion={start}&timeoutSeconds=5"));
    assert_eq!(w.status, 200);
    let evs: Vec<Value> = (0..3).map(|_| w.event()).collect();
    assert_eq!(evs.iter().map(typ).collect::<Vec<_>>(), ["ADDED", "MODIFIED", "DELETED"]);
    assert_eq!(evs[0]["object"]["kind"], "ConfigMap", "event objects carry kind");
    assert_eq!(evs[2]["object"]["data"]["k"], "v", "DELETED carries the last state");
    assert_eq!(rv_of(&evs[2]["object"]), server.resource_version(), "DELETED carries the delete's revision");
}

#[test]
fn a_watch_without_resource_version_starts_with_the_current_state_then_goes_live() {
    let server = FakeApiServer::start();
    seed(&server, 2);
    let mut w = Watch::open(&server, "/api/v1/namespaces/shop/configmaps?watch=true&timeoutSeconds=5");
    assert_eq!(typ(&w.event()), "ADDED");
    assert_eq!(typ(&w.event()), "ADDED");
    wait_until(|| server.open_watches() == 1);
    server.create_value(&cm_type(), cm("shop", "live", json!({}))).unwrap();
    let live = w.event();
    assert_eq!(live["object"]["metadata"]["name"], "live");
}

#[test]
fn a_compacted_watch_gets_an_in_stream_410_by_default() {
    let server = FakeApiServer::start();
    let old = server.resource_version();
    seed(&server, 1);
    server.compact();
    let mut w = Watch::open(&server, &format!("/api/v1/configmaps?watch=1&resourceVersion={old}"));
    assert_eq!(w.status, 200);
    let ev = w.event();
    assert_eq!(typ(&ev), "ERROR");
    assert_eq!(ev["object"]["code"], 410);
    assert_eq!(ev["object"]["reason"], "Expired");
    assert_eq!(w.end(), End::Clean);
}

#[test]
fn a_compacted_watch_gets_an_http_410_when_configured() {
    let server = FakeApiServer::builder().watch_410(Watch410::Http).start();
    let old = server.resource_version();
    seed(&server, 1);
    server.compact();
    let resp = get(&server, &format!("/api/v1/configmaps?watch=1&resourceVersion={old}"));
    assert_eq!(resp.status, 410);
    assert_eq!(resp.json()["reason"], "Expired");
}

#[test]
fn short_history_makes_old_watch_revisions_too_old() {
    let server = FakeApiServer::builder().history(2).start();
    let old = server.resource_version();
    seed(&server, 5);
    let mut w = Watch::open(&server, &format!("/api/v1/configmaps?watch=1&resourceVersion={old}"));
    assert_eq!(w.event()["object"]["code"], 410);
}

#[test]
fn bookmarks_are_sent_only_when_asked_for_and_only_when_the_revision_moved() {
    let server = FakeApiServer::builder().bookmark_interval(ms(50)).start();
    let start = server.resource_version();
    let mut w = Watch::open(
        &server,
        &format!("/api/v1/configmaps?watch=1&resourceVersion={start}&allowWatchBookmarks=true&timeoutSeconds=30"),
    );
    let mut plain =
        Watch::open(&server, &format!("/api/v1/configmaps?watch=1&resourceVersion={start}&timeoutSeconds=1"));
    wait_until(|| server.open_watches() == 2);
    // Several intervals pass with no progress: nothing may be sent. Then another type changes.
    std::thread::sleep(ms(300));
    server.create_value(&ResourceType::of::<Pod>(), json!({"metadata": {"name": "p", "namespace": "shop"}})).unwrap();
    let ev = w.event();
    assert_eq!(typ(&ev), "BOOKMARK", "the first thing on the stream is the bookmark");
    assert_eq!(rv_of(&ev["object"]), server.resource_version());
    assert_eq!(ev["object"]["kind"], "ConfigMap");
    assert_eq!(plain.end(), End::Clean, "no bookmarks without allowWatchBookmarks");
}

#[test]
fn a_bookmark_is_sent_shortly_before_the_deadline() {
    let server = FakeApiServer::start();
    let start = server.resource_version();
    let mut w = Watch::open(
        &server,
        &format!("/api/v1/configmaps?watch=1&resourceVersion={start}&allowWatchBookmarks=true&timeoutSeconds=2"),
    );
    wait_until(|| server.open_watches() == 1);
    server.create_value(&ResourceType::of::<Pod>(), json!({"metadata": {"name": "p", "namespace": "shop"}})).unwrap();
    assert_eq!(typ(&w.event()), "BOOKMARK");
    assert_eq!(w.end(), End::Clean);
}

#[test]
fn timeout_seconds_ends_the_stream_cleanly_and_keeps_the_connection_usable() {
    let server = FakeApiServer::start();
    let mut w = Watch::open(&server, "/api/v1/configmaps?watch=1&timeoutSeconds=1");
    assert_eq!(w.end(), End::Clean);
    let again = w.client.response("GET", "/api/v1/configmaps", &[], None);
    assert_eq!(again.status, 200);
    assert_eq!(server.connections(), 1);
}

/// `end_watches` ends every watch the server has received, also one that is not streaming yet
/// (held here at a gate between its arrival and its answer, where a busy server thread can
/// also be): a client that saw its watch in the request log can count on the call ending it.
#[test]
fn end_watches_ends_every_watch_received_even_one_not_streaming_yet() {
    let server = FakeApiServer::start();
    let target = format!("/api/v1/configmaps?watch=1&resourceVersion={}&timeoutSeconds=30", server.resource_version());
    let mut streaming = Watch::open(&server, &target);
    wait_until(|| server.open_watches() == 1);
    let hold = server.hold(Match::Watch);
    let mut client = Client::connect(&server);
    client.send("GET", &target, &[], None);
    assert!(hold.wait_until_held(READ_TIMEOUT), "the second watch never arrived");
    server.end_watches();
    hold.release();
    let (status, _) = client.read_head();
    let mut received = Watch { client, status, pending: Vec::new(), ended: false, chunk_sizes: Vec::new() };
    assert_eq!(received.status, 200);
    assert_eq!(streaming.end(), End::Clean, "the streaming watch ends");
    assert_eq!(received.end(), End::Clean, "the watch received before the call ends too");
    // A watch requested afterwards is not affected.
    let mut later = Watch::open(&server, &target);
    wait_until(|| server.open_watches() == 1);
    server.create_value(&cm_type(), cm("shop", "after", json!({}))).unwrap();
    assert_eq!(later.event()["object"]["metadata"]["name"], "after");
}

#[test]
fn selector_transitions_follow_the_table() {
    let server = FakeApiServer::start();
    let start = server.resource_version();
    let put = |labels: Value| {
        server.apply_value(&cm_type(), cm("shop", "x", labels)).unwrap();
    };
    put(json!({"app": "db"})); // created, not matching: nothing
    put(json!({"app": "web"})); // starts matching: ADDED
    put(json!({"app": "web", "v": "2"})); // still matching: MODIFIED
    put(json!({"app": "db"})); // stops matching: DELETED with old state and new RV
    let stop_rv = server.resource_version();
    put(json!({"app": "db", "v": "3"})); // neither: nothing
    server.delete_value(&cm_type(), Some("shop"), "x").unwrap();
    server.create_value(&cm_type(), cm("shop", "y", json!({"app": "web"}))).unwrap();
    let mut w = Watch::open(
        &server,
        &format!("/api/v1/configmaps?watch=1&resourceVersion={start}&labelSelector=app%3Dweb&timeoutSeconds=5"),
    );
    let evs: Vec<Value> = (0..4).map(|_| w.event()).collect();
    assert_eq!(evs.iter().map(typ).collect::<Vec<_>>(), ["ADDED", "MODIFIED", "DELETED", "ADDED"]);
    assert_eq!(evs[2]["object"]["metadata"]["labels"]["app"], "web", "old state");
    assert_eq!(rv_of(&evs[2]["object"]), stop_rv, "new revision");
    assert_eq!(evs[3]["object"]["metadata"]["name"], "y");
}

#[test]
fn finalizers_turn_a_delete_into_a_modification() {
    let server = FakeApiServer::start();
    let start = server.resource_version();
    server
        .create_value(&cm_type(), json!({"metadata": {"name": "f", "namespace": "shop", "finalizers": ["x/y"]}}))
        .unwrap();
    server.delete_value(&cm_type(), Some("shop"), "f").unwrap();
    assert!(server.get_value(&cm_type(), Some("shop"), "f").unwrap()["metadata"]["deletionTimestamp"].is_string());
    let mut obj = server.get_value(&cm_type(), Some("shop"), "f").unwrap();
    obj["metadata"]["finalizers"] = json!([]);
    server.replace_value(&cm_type(), obj).unwrap();
    assert!(server.get_value(&cm_type(), Some("shop"), "f").is_none());
    let mut w = Watch::open(&server, &format!("/api/v1/configmaps?watch=1&resourceVersion={start}&timeoutSeconds=5"));
    let evs: Vec<Value> = (0..3).map(|_| w.event()).collect();
    assert_eq!(evs.iter().map(typ).collect::<Vec<_>>(), ["ADDED", "MODIFIED", "DELETED"]);
    assert!(evs[2]["object"]["metadata"]["deletionTimestamp"].is_string());
}

#[test]
fn streaming_lists_end_the_initial_burst_with_the_annotated_bookmark() {
    let server = FakeApiServer::start();
    seed(&server, 3);
    let list_rv = server.resource_version();
    let mut w = Watch::open(
        &server,
        "/api/v1/configmaps?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=5",
    );
    for _ in 0..3 {
        assert_eq!(typ(&w.event()), "ADDED");
    }
    let marker = w.event();
    assert_eq!(typ(&marker), "BOOKMARK");
    assert_eq!(marker["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"], "true");
    assert_eq!(rv_of(&marker["object"]), list_rv);
    server.create_value(&cm_type(), cm("shop", "after", json!({}))).unwrap();
    assert_eq!(typ(&w.event()), "ADDED");
}

#[test]
fn streaming_lists_can_be_rejected_ignored_or_fail_in_stream() {
    let target = "/api/v1/configmaps?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=1";
    let rejected = FakeApiServer::builder().streaming_lists(StreamingLists::Rejected).start();
    let resp = get(&rejected, target);
    assert_eq!(resp.status, 422);
    assert!(resp.json()["message"].as_str().unwrap().contains("sendInitialEvents"));

    let ignored = FakeApiServer::builder().streaming_lists(StreamingLists::Ignored).start();
    seed(&ignored, 1);
    let mut w = Watch::open(&ignored, target);
    assert_eq!(typ(&w.event()), "ADDED");
    assert_eq!(w.end(), End::Clean, "no end marker from a server that ignores streaming lists");

    let failing = FakeApiServer::builder().streaming_lists(StreamingLists::InStreamError).start();
    let mut w = Watch::open(&failing, target);
    let ev = w.event();
    assert_eq!(typ(&ev), "ERROR");
    assert_eq!(ev["object"]["code"], 500);
}

#[test]
fn watch_parameter_combinations_are_validated() {
    let server = FakeApiServer::start();
    for (query, want) in [
        ("watch=1&resourceVersionMatch=NotOlderThan", 422),
        ("watch=1&sendInitialEvents=true&resourceVersionMatch=Exact", 422),
        ("watch=1&resourceVersion=abc", 400),
        ("watch=1&timeoutSeconds=abc", 400),
        ("watch=1&labelSelector=a%20b", 400),
    ] {
        let resp = get(&server, &format!("/api/v1/configmaps?{query}"));
        assert_eq!(resp.status, want, "{query}");
    }
}

#[test]
fn metadata_only_lists_and_watches_return_partial_object_metadata() {
    let server = FakeApiServer::start();
    seed(&server, 2);
    let list = get_with(
        &server,
        "/api/v1/configmaps",
        &[("Accept", "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1, application/json")],
    )
    .json();
    assert_eq!(list["kind"], "PartialObjectMetadataList");
    assert_eq!(list["apiVersion"], "meta.k8s.io/v1");
    assert_eq!(list["items"][0]["kind"], "PartialObjectMetadata");
    assert!(list["items"][0].get("data").is_none());
    let mut w = Watch::open_with(
        &server,
        "/api/v1/configmaps?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=5",
        &[("Accept", "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1, application/json")],
    );
    assert_eq!(w.event()["object"]["kind"], "PartialObjectMetadata");
    w.event();
    let marker = w.event();
    assert_eq!(typ(&marker), "BOOKMARK");
    assert_eq!(marker["object"]["kind"], "PartialObjectMetadata");
    let strict = get_with(
        &server,
        "/api/v1/configmaps",
        &[("Accept", "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1")],
    );
    assert_eq!(strict.status, 406, "the singular form is not acceptable for a list");
}

/// client-go's metadata client lists protobuf first (`metadata/metadata.go`): the real server
/// answers `PartialObjectMetadata` in protobuf for every resource, custom ones included, and so
/// does the fake, unless it is JSON-only. Only the bytes are checked here: reading them is the
/// client's job (tests/integration/protobuf.rs).
#[test]
fn metadata_only_requests_that_list_protobuf_first_are_answered_in_protobuf() {
    const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";
    let list_accept = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json";
    let one_accept = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json";
    let contains = |body: &[u8], text: &str| body.windows(text.len()).any(|w| w == text.as_bytes());
    let server = FakeApiServer::start();
    seed(&server, 2);
    let widgets = ResourceType::new("example.com", "v1", "widgets", "Widget", true);
    server.register(widgets.clone());
    server
        .create_value(&widgets, json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w", "namespace": "shop"}, "spec": {"size": 3}}))
        .unwrap();
    for path in ["/api/v1/namespaces/shop/configmaps", "/apis/example.com/v1/namespaces/shop/widgets"] {
        let list = get_with(&server, path, &[("Accept", list_accept)]);
        assert_eq!((list.status, list.header("content-type")), (200, Some(PROTOBUF)), "{path}");
        assert!(list.body.starts_with(b"k8s\0"), "{path}");
        assert!(contains(&list.body, "meta.k8s.io/v1") && contains(&list.body, "PartialObjectMetadataList"), "{path}");
        assert!(!contains(&list.body, "\"size\"") && !contains(&list.body, "\"i\""), "{path}: metadata only");
        let name = if path.ends_with("widgets") { "w" } else { "cm-00" };
        let one = get_with(&server, &format!("{path}/{name}"), &[("Accept", one_accept)]);
        assert_eq!((one.status, one.header("content-type")), (200, Some(PROTOBUF)), "{path}");
        assert!(contains(&one.body, "PartialObjectMetadata") && !contains(&one.body, "PartialObjectMetadataList"));
        let watch = get_with(&server, &format!("{path}?watch=1&timeoutSeconds=1"), &[("Accept", one_accept)]);
        assert_eq!(watch.header("content-type"), Some("application/vnd.kubernetes.protobuf;stream=watch"), "{path}");
        assert!(contains(&watch.body, "ADDED") && contains(&watch.body, "PartialObjectMetadata"), "{path}");
        // A Table is JSON only: a protobuf Table range is passed over.
        let table = get_with(
            &server,
            path,
            &[(
                "Accept",
                "application/vnd.kubernetes.protobuf;as=Table;g=meta.k8s.io;v=v1,application/json;as=Table;g=meta.k8s.io;v=v1",
            )],
        );
        assert_eq!((table.status, table.json()["kind"].as_str()), (200, Some("Table")), "{path}");
    }
    let json_only = FakeApiServer::builder().json_only(true).start();
    seed(&json_only, 1);
    let list = get_with(&json_only, "/api/v1/configmaps", &[("Accept", list_accept)]);
    assert_eq!(list.header("content-type"), Some("application/json"));
    assert_eq!(list.json()["kind"], "PartialObjectMetadataList");
    let refused = get_with(
        &json_only,
        "/api/v1/configmaps",
        &[("Accept", "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1")],
    );
    assert_eq!(refused.status, 406);
}

#[test]
fn every_chunking_mode_yields_the_same_events() {
    for chunking in [Chunking::PerEvent, Chunking::Coalesce, Chunking::Split] {
        let server = FakeApiServer::builder().chunking(chunking).start();
        seed(&server, 3);
        let mut w = Watch::open(&server, "/api/v1/configmaps?watch=1&timeoutSeconds=1");
        let evs: Vec<Value> = (0..3).map(|_| w.event()).collect();
        assert!(evs.iter().all(|e| typ(e) == "ADDED"), "{chunking:?}");
        assert_eq!(w.end(), End::Clean);
        match chunking {
            Chunking::Coalesce => assert_eq!(w.chunk_sizes.len(), 1, "{chunking:?}"),
            Chunking::Split => assert_eq!(w.chunk_sizes.len(), 9, "{chunking:?}"),
            _ => assert_eq!(w.chunk_sizes.len(), 3, "{chunking:?}"),
        }
    }
}

#[test]
fn a_slow_watcher_is_closed_cleanly() {
    let server = FakeApiServer::builder().watcher_buffer(5).start();
    let start = server.resource_version();
    let mut w = Watch::open(&server, &format!("/api/v1/configmaps?watch=1&resourceVersion={start}"));
    wait_until(|| server.open_watches() == 1);
    // Big objects fill the socket buffers while the client does not read.
    let big = "x".repeat(256 * 1024);
    for i in 0..64 {
        server
            .create_value(
                &cm_type(),
                json!({"metadata": {"name": format!("big-{i}"), "namespace": "shop"}, "data": {"b": big}}),
            )
            .unwrap();
    }
    let mut received = 0;
    while w.line().is_ok() {
        received += 1;
    }
    assert!(received < 64, "the stream ended early ({received} events)");
}

// ---------------------------------------------------------------------------------------------
// Faults

#[test]
fn status_and_plain_text_faults_are_served_once() {
    let server = FakeApiServer::start();
    server.push_fault(
        Match::List,
        Fault::Status {
            code: 429,
            reason: "TooManyRequests".into(),
            message: "slow down".into(),
            retry_after: Some(3),
        },
    );
    server.push_fault(
        Match::Any,
        Fault::PlainText { code: 429, body: "Too many requests, please try again later.".into(), retry_after: Some(1) },
    );
    server.push_fault(
        Match::Path("/api/v1/pods".into()),
        Fault::PlainText { code: 502, body: "<html>bad gateway</html>".into(), retry_after: None },
    );
    let first = get(&server, "/api/v1/configmaps");
    assert_eq!(first.status, 429);
    assert_eq!(first.header("retry-after"), Some("3"));
    assert_eq!(first.json()["details"]["retryAfterSeconds"], 3);
    let second = get(&server, "/version");
    assert_eq!(second.status, 429);
    assert_eq!(second.body, b"Too many requests, please try again later.");
    assert!(second.header("content-type").unwrap().starts_with("text/plain"));
    let third = get(&server, "/api/v1/pods");
    assert_eq!(third.status, 502);
    assert_eq!(third.header("content-type"), Some("text/html"));
    assert_eq!(get(&server, "/api/v1/pods").status, 200);
    assert_eq!(server.pending_faults(), 0);
}

#[test]
fn the_too_large_fault_carries_the_cause_and_retry_after() {
    let server = FakeApiServer::start();
    server.push_fault(Match::Any, Fault::TooLargeResourceVersion);
    let resp = get(&server, "/api/v1/configmaps?resourceVersion=5");
    assert_eq!(resp.status, 504);
    assert_eq!(resp.header("retry-after"), Some("1"));
    assert_eq!(resp.json()["details"]["causes"][0]["reason"], "ResourceVersionTooLarge");
}

#[test]
fn watch_faults_shape_the_stream() {
    let server = FakeApiServer::start();
    seed(&server, 3);
    let target = "/api/v1/configmaps?watch=1&timeoutSeconds=5";

    server.push_fault(
        Match::Watch,
        Fault::InStreamError { code: 500, reason: "InternalError".into(), message: "boom".into() },
    );
    let mut w = Watch::open(&server, target);
    assert_eq!(w.event()["object"]["message"], "boom");
    assert_eq!(w.end(), End::Clean);

    server.push_fault(Match::Watch, Fault::CloseAfter { events: 2 });
    let mut w = Watch::open(&server, target);
    w.event();
    w.event();
    assert_eq!(w.end(), End::Clean);

    server.push_fault(Match::Watch, Fault::ResetAfter { events: 1 });
    let mut w = Watch::open(&server, target);
    w.event();
    assert_eq!(w.end(), End::Broken);

    server.push_fault(Match::Watch, Fault::MalformedLine);
    let mut w = Watch::open(&server, target);
    assert_eq!(w.line().unwrap(), b"<html>oops</html>");
    assert_eq!(typ(&w.event()), "ADDED");

    server.push_fault(Match::Watch, Fault::OversizedLine { bytes: 200_000 });
    let mut w = Watch::open(&server, target);
    assert_eq!(w.end(), End::Broken, "a line without a newline until the end");
    assert_eq!(w.chunk_sizes.iter().sum::<usize>(), 200_000);
}

#[test]
fn watch_only_faults_skip_other_requests() {
    let server = FakeApiServer::start();
    server.push_fault(Match::Any, Fault::CloseAfter { events: 0 });
    assert_eq!(get(&server, "/api/v1/configmaps").status, 200);
    assert_eq!(server.pending_faults(), 1);
    let mut w = Watch::open(&server, "/api/v1/configmaps?watch=1");
    assert_eq!(w.end(), End::Clean);
}

#[test]
fn a_truncated_list_body_ends_early() {
    let server = FakeApiServer::start();
    seed(&server, 20);
    server.push_fault(Match::List, Fault::TruncateBody);
    let mut client = Client::connect(&server);
    client.send("GET", "/api/v1/configmaps", &[], None);
    let (status, headers) = client.read_head();
    assert_eq!(status, 200);
    let len: usize = headers.iter().find(|(k, _)| k.eq_ignore_ascii_case("content-length")).unwrap().1.parse().unwrap();
    let mut body = Vec::new();
    client.reader.read_to_end(&mut body).ok();
    assert!(body.len() < len);
}

#[test]
fn stalls_hold_the_socket_open_until_the_client_leaves() {
    let server = FakeApiServer::start();
    server.push_fault(Match::Watch, Fault::Stall);
    let mut client = Client::connect(&server);
    client.reader.get_mut().set_read_timeout(Some(ms(300))).unwrap();
    client.send("GET", "/api/v1/configmaps?watch=1", &[], None);
    let (status, _) = client.read_head();
    assert_eq!(status, 200);
    let mut byte = [0u8; 1];
    let err = client.reader.read(&mut byte).unwrap_err();
    assert!(matches!(err.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut));

    server.push_fault(Match::Any, Fault::StallBeforeHeaders);
    let mut silent = Client::connect(&server);
    silent.reader.get_mut().set_read_timeout(Some(ms(300))).unwrap();
    silent.send("GET", "/version", &[], None);
    assert!(silent.reader.read(&mut byte).is_err());
    // Dropping the server with stalled connections still returns.
    drop(server);
}

#[test]
fn delayed_headers_then_a_normal_response() {
    let server = FakeApiServer::start();
    server.push_fault(Match::Any, Fault::DelayHeaders(ms(100)));
    assert_eq!(get(&server, "/version").status, 200);
}

#[test]
fn a_closed_client_socket_closes_its_watch() {
    let server = FakeApiServer::start();
    let w = Watch::open(&server, "/api/v1/configmaps?watch=1");
    wait_until(|| server.open_watches() == 1);
    drop(w);
    wait_until(|| server.open_watches() == 0);
}

// ---------------------------------------------------------------------------------------------
// Writes, typed helpers, request log

#[test]
fn typed_helpers_create_replace_and_delete() {
    let server = FakeApiServer::start();
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some("app".into());
    cm.metadata.namespace = Some("shop".into());
    let created = server.create(&cm).unwrap();
    assert!(created.metadata.uid.is_some() && created.metadata.creation_timestamp.is_some());
    assert!(matches!(server.create(&cm), Err(kube_watcher::testing::FakeError::AlreadyExists { .. })));
    let rv = server.resource_version();
    assert_eq!(server.replace(&created).unwrap().metadata.resource_version, created.metadata.resource_version);
    assert_eq!(server.resource_version(), rv, "a no-op write does not bump the revision");
    let mut stale = created.clone();
    stale.data = Some([("k".to_string(), "v".to_string())].into());
    server.replace(&stale).unwrap();
    assert!(matches!(server.replace(&stale), Err(kube_watcher::testing::FakeError::Conflict { .. })));
    assert_eq!(server.list::<ConfigMap>().len(), 1);
    server.delete::<ConfigMap>(Some("shop"), "app").unwrap();
    assert!(server.get::<ConfigMap>(Some("shop"), "app").is_none());
}

#[test]
fn http_writes_create_update_patch_and_delete() {
    let server = FakeApiServer::start();
    let mut c = Client::connect(&server);
    let json_ct = [("Content-Type", "application/json")];
    let body = serde_json::to_vec(
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "w"}, "data": {"a": "1"}}),
    )
    .unwrap();
    let created = c.response("POST", "/api/v1/namespaces/shop/configmaps", &json_ct, Some(&body));
    assert_eq!(created.status, 201);
    assert_eq!(c.response("POST", "/api/v1/namespaces/shop/configmaps", &json_ct, Some(&body)).status, 409);
    let patch = br#"{"data":{"b":"2","a":null}}"#;
    let patched = c.response(
        "PATCH",
        "/api/v1/namespaces/shop/configmaps/w",
        &[("Content-Type", "application/merge-patch+json")],
        Some(patch),
    );
    assert_eq!(patched.status, 200);
    assert_eq!(patched.json()["data"], json!({"b": "2"}));
    let mut stale = created.json();
    stale["data"] = json!({"c": "3"});
    let conflict =
        c.response("PUT", "/api/v1/namespaces/shop/configmaps/w", &json_ct, Some(&serde_json::to_vec(&stale).unwrap()));
    assert_eq!(conflict.status, 409);
    let deleted = c.response("DELETE", "/api/v1/namespaces/shop/configmaps/w", &[], None);
    assert_eq!(deleted.status, 200);
    assert_eq!(deleted.json()["status"], "Success");
    assert_eq!(c.response("GET", "/api/v1/namespaces/shop/configmaps/w", &[], None).status, 404);
}

#[test]
fn discovery_lists_groups_and_resources_with_short_names() {
    let server = FakeApiServer::start();
    let core = get(&server, "/api/v1").json();
    let pods = core["resources"].as_array().unwrap().iter().find(|r| r["name"] == "pods").unwrap().clone();
    assert_eq!(pods["shortNames"], json!(["po"]));
    assert_eq!(pods["namespaced"], true);
    let groups = get(&server, "/apis").json();
    assert!(groups["groups"].as_array().unwrap().iter().any(|g| g["name"] == "apps"));
    let apps = get(&server, "/apis/apps/v1").json();
    assert!(
        apps["resources"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["name"] == "deployments" && r["shortNames"] == json!(["deploy"]))
    );
    assert_eq!(get(&server, "/version").json()["major"], "1");
}

#[test]
fn the_request_log_redacts_credentials() {
    let server = FakeApiServer::start();
    get_with(
        &server,
        "/api/v1/pods?limit=5&labelSelector=app%3Dweb",
        &[("Authorization", "Bearer s3cret"), ("Cookie", "c=1"), ("Impersonate-User", "jane")],
    );
    let reqs = server.requests();
    let r = reqs.last().unwrap();
    assert_eq!(r.method, "GET");
    assert_eq!(r.path, "/api/v1/pods");
    assert_eq!(r.query_param("labelSelector"), Some("app=web"));
    assert_eq!(r.header("authorization"), Some("<redacted>"));
    assert_eq!(r.header("cookie"), Some("<redacted>"));
    assert_eq!(r.header("impersonate-user"), Some("jane"));
    assert!(!format!("{reqs:?}").contains("s3cret"));
    assert!(!r.watch);
    server.clear_requests();
    assert!(server.requests().is_empty());
}

#[test]
fn large_lists_are_gzipped_when_accepted() {
    let server = FakeApiServer::start();
    let big = "y".repeat(2048);
    for i in 0..100 {
        server
            .create_value(
                &cm_type(),
                json!({"metadata": {"name": format!("g{i}"), "namespace": "shop"}, "data": {"b": big}}),
            )
            .unwrap();
    }
    let gz = get_with(&server, "/api/v1/configmaps", &[("Accept-Encoding", "gzip")]);
    assert_eq!(gz.header("content-encoding"), Some("gzip"));
    let mut decoded = Vec::new();
    flate2::read::MultiGzDecoder::new(&gz.body[..]).read_to_end(&mut decoded).unwrap();
    let list: Value = serde_json::from_slice(&decoded).unwrap();
    assert_eq!(names(&list).len(), 100);
    let small = get_with(&server, "/api/v1/pods", &[("Accept-Encoding", "gzip")]);
    assert!(small.header("content-encoding").is_none());
}

// ---------------------------------------------------------------------------------------------
// Authentication and TLS

#[test]
fn a_required_token_gets_401_without_it() {
    let server = FakeApiServer::builder().token("t0ken").start();
    let denied = get(&server, "/api/v1/pods");
    assert_eq!(denied.status, 401);
    assert_eq!(denied.json()["reason"], "Unauthorized");
    let ok = get_with(&server, "/api/v1/pods", &[("Authorization", "Bearer t0ken")]);
    assert_eq!(ok.status, 200);
    server.revoke_token("t0ken");
    assert_eq!(get_with(&server, "/api/v1/pods", &[("Authorization", "Bearer t0ken")]).status, 401);
    server.add_token("n3w", "alice");
    assert_eq!(get_with(&server, "/api/v1/pods", &[("Authorization", "Bearer n3w")]).status, 200);
    assert_eq!(server.requests().last().unwrap().user.as_deref(), Some("alice"));
}

fn tls_agent(ca_pem: &str, client: Option<(String, String)>) -> ureq::Agent {
    let certs: Vec<_> = ureq::tls::parse_pem(ca_pem.as_bytes())
        .filter_map(|i| match i {
            Ok(ureq::tls::PemItem::Certificate(c)) => Some(c),
            _ => None,
        })
        .collect();
    let mut tls = ureq::tls::TlsConfig::builder()
        .provider(ureq::tls::TlsProvider::Rustls)
        .root_certs(ureq::tls::RootCerts::new_with_certs(&certs));
    if let Some((cert, key)) = client {
        let chain: Vec<_> = ureq::tls::parse_pem(cert.as_bytes())
            .filter_map(|i| match i {
                Ok(ureq::tls::PemItem::Certificate(c)) => Some(c),
                _ => None,
            })
            .collect();
        let key = ureq::tls::PrivateKey::from_pem(key.as_bytes()).unwrap();
        tls = tls.client_cert(Some(ureq::tls::ClientCert::new_with_certs(&chain, key)));
    }
    ureq::Agent::config_builder()
        .tls_config(tls.build())
        .http_status_as_error(false)
        .timeout_global(Some(READ_TIMEOUT))
        .build()
        .into()
}

#[test]
fn tls_with_a_required_client_certificate() {
    let server = FakeApiServer::builder().tls(true).client_ca_required(true).start();
    assert!(server.url().starts_with("https://127.0.0.1:"));
    let ca = server.ca_pem().unwrap();
    let creds = server.issue_client_cert("jane", &["devs"]);
    let agent = tls_agent(&ca, Some(creds));
    let resp = agent.get(format!("{}/api/v1/pods", server.url())).call().unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(server.requests().last().unwrap().user.as_deref(), Some("jane"));
    let anonymous = tls_agent(&ca, None);
    assert!(anonymous.get(format!("{}/api/v1/pods", server.url())).call().is_err());
}

#[test]
fn tls_with_a_token_watches_over_https() {
    let server = FakeApiServer::builder().tls(true).token("abc").start();
    seed(&server, 1);
    let agent = tls_agent(&server.ca_pem().unwrap(), None);
    let url = format!("{}/api/v1/configmaps?watch=1&timeoutSeconds=1", server.url());
    assert_eq!(agent.get(&url).call().unwrap().status(), 401);
    let resp = agent.get(&url).header("Authorization", "Bearer abc").call().unwrap();
    assert_eq!(resp.status(), 200);
    let body = resp.into_body().read_to_string().unwrap();
    assert_eq!(body.lines().count(), 1);
    assert!(server.kubeconfig().contains("certificate-authority-data"));
}

#[test]
fn plain_watches_can_end_their_burst_with_the_marker_like_newer_servers() {
    let server = FakeApiServer::builder().initial_events_end_on_plain_watches(true).start();
    seed(&server, 1);
    let mut w = Watch::open(&server, "/api/v1/configmaps?watch=1&allowWatchBookmarks=true&timeoutSeconds=5");
    assert_eq!(typ(&w.event()), "ADDED");
    let marker = w.event();
    assert_eq!(marker["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"], "true");
    let mut without = Watch::open(&server, "/api/v1/configmaps?watch=1&timeoutSeconds=1");
    assert_eq!(typ(&without.event()), "ADDED");
    assert_eq!(without.end(), End::Clean, "no marker without allowWatchBookmarks");
}

#[test]
fn plain_text_429s_carry_the_priority_and_fairness_headers() {
    let server = FakeApiServer::start();
    server.push_fault(
        Match::Any,
        Fault::PlainText { code: 429, body: "Too many requests, please try again later.".into(), retry_after: Some(1) },
    );
    let resp = get(&server, "/api/v1/pods");
    assert!(resp.header("x-kubernetes-pf-flowschema-uid").is_some());
    assert_eq!(resp.header("retry-after"), Some("1"));
}

#[test]
fn the_server_handle_is_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<FakeApiServer>();
    assert_send_sync::<kube_watcher::testing::RecordedRequest>();
    assert_send_sync::<kube_watcher::testing::FakeError>();
}

/// `request_deadline`: a list the client reads too slowly is cut off midway (reset), as
/// kube-apiserver's request timeout does; one read at once arrives whole.
#[test]
fn a_list_not_read_by_its_deadline_is_cut_off() {
    // The deadline leaves a list read at once ample time on a loaded 2-core machine (500 ms
    // did not: the whole read below was cut off mid-suite).
    let server = FakeApiServer::builder().request_deadline(ms(3000)).start();
    let rt = ResourceType::of::<ConfigMap>();
    let blob = "x".repeat(64 * 1024);
    for i in 0..200 {
        server
            .create_value(&rt, json!({"metadata": {"name": format!("c{i}"), "namespace": "a"}, "data": {"b": blob}}))
            .unwrap();
    }
    // Read at once: whole.
    let whole = get(&server, "/api/v1/configmaps");
    assert_eq!(whole.status, 200);
    assert_eq!(names(&whole.json()).len(), 200);
    // Not read until well after the deadline: the body (13 MB) stops short.
    let mut stream = TcpStream::connect(server.addr()).unwrap();
    stream.write_all(b"GET /api/v1/configmaps HTTP/1.1\r\nHost: fake\r\n\r\n").unwrap();
    let until = Instant::now() + Duration::from_secs(6);
    while Instant::now() < until {
        std::thread::sleep(ms(50));
    }
    let mut body = Vec::new();
    let _ = stream.read_to_end(&mut body);
    assert!(body.len() < 200 * blob.len(), "read {} bytes", body.len());
}

// ---------------------------------------------------------------------------------------------
// Sharded lists and watches (`FakeApiServerBuilder::sharded_list_and_watch`)

/// `shardSelector` for shard `i` of `n`, percent-encoded for a query.
fn shard_query(i: u32, n: u32) -> String {
    let selector = kube_watcher::Shard::of(i, n).unwrap().selector();
    selector.replace(' ', "%20").replace('\'', "%27").replace('(', "%28").replace(')', "%29").replace(',', "%2C")
}

fn uid_in(shard: &kube_watcher::Shard, item: &Value) -> bool {
    shard.contains(item["metadata"]["uid"].as_str().unwrap())
}

#[test]
fn a_sharding_server_lists_only_the_shards_objects_and_echoes_the_selector() {
    let server = FakeApiServer::builder().sharded_list_and_watch(true).start();
    seed(&server, 24);
    let mut seen = 0;
    for i in 0..3 {
        let shard = kube_watcher::Shard::of(i, 3).unwrap();
        let list = get(&server, &format!("/api/v1/configmaps?shardSelector={}", shard_query(i, 3)));
        assert_eq!(list.status, 200);
        let list = list.json();
        assert_eq!(list["metadata"]["shardInfo"]["selector"], shard.selector());
        let items = list["items"].as_array().unwrap();
        assert!(items.iter().all(|item| uid_in(&shard, item)), "{items:?}");
        seen += items.len();
    }
    assert_eq!(seen, 24, "the three shards together are the whole collection");
    // Paged: every page echoes it.
    let page = get(&server, &format!("/api/v1/configmaps?limit=2&shardSelector={}", shard_query(0, 2))).json();
    assert!(page["metadata"]["shardInfo"]["selector"].is_string());
    assert!(page["metadata"].get("remainingItemCount").is_none());
    // A metadata-only list is filtered as well, but kube-apiserver does not carry `shardInfo`
    // over into a `PartialObjectMetadataList` (tests/real/promises.rs sees it): nor does the fake.
    let shard = kube_watcher::Shard::of(0, 2).unwrap();
    let meta = get_with(
        &server,
        &format!("/api/v1/configmaps?shardSelector={}", shard_query(0, 2)),
        &[("Accept", "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1")],
    )
    .json();
    assert_eq!(meta["kind"], "PartialObjectMetadataList");
    assert!(meta["metadata"].get("shardInfo").is_none(), "{}", meta["metadata"]);
    let items = meta["items"].as_array().unwrap();
    assert!(!items.is_empty() && items.iter().all(|item| uid_in(&shard, item)), "{items:?}");
}

#[test]
fn a_sharding_server_watches_only_the_shards_objects() {
    let server = FakeApiServer::builder().sharded_list_and_watch(true).start();
    let shard = kube_watcher::Shard::of(1, 2).unwrap();
    let mut watch = Watch::open(&server, &format!("/api/v1/configmaps?watch=true&shardSelector={}", shard_query(1, 2)));
    assert_eq!(watch.status, 200);
    seed(&server, 16);
    let theirs = server.list_values(&cm_type()).iter().filter(|v| uid_in(&shard, v)).count();
    assert!(theirs > 0 && theirs < 16, "{theirs} of 16 in the shard");
    for _ in 0..theirs {
        let ev = watch.event();
        assert_eq!(typ(&ev), "ADDED");
        assert!(uid_in(&shard, &ev["object"]), "{ev}");
    }
    // Streaming lists too: the initial events are the shard's.
    let mut stream = Watch::open(
        &server,
        &format!(
            "/api/v1/configmaps?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&shardSelector={}",
            shard_query(1, 2)
        ),
    );
    for _ in 0..theirs {
        let ev = stream.event();
        assert_eq!(typ(&ev), "ADDED");
        assert!(uid_in(&shard, &ev["object"]), "{ev}");
    }
    assert_eq!(typ(&stream.event()), "BOOKMARK");
}

#[test]
fn a_malformed_shard_selector_is_refused_as_kube_apiserver_refuses_it() {
    let server = FakeApiServer::builder().sharded_list_and_watch(true).start();
    for (selector, why) in [
        ("shardRange(object.metadata.uid,%20%270x0%27,%20%270x8000000000000000%27)", "16-digit"),
        ("shardRange(object.metadata.name,%20%270x0000000000000000%27,%20%270x8000000000000000%27)", "field path"),
        ("nonsense", "only shardRange()"),
    ] {
        for watch in ["", "&watch=true"] {
            let resp = get(&server, &format!("/api/v1/configmaps?shardSelector={selector}{watch}"));
            assert_eq!(resp.status, 500, "{selector}{watch}");
            let status = resp.json();
            let message = status["message"].as_str().unwrap();
            assert!(message.starts_with("invalid shard selector: ") && message.contains(why), "{message}");
            assert!(status.get("reason").is_none(), "{status}");
        }
    }
}

#[test]
fn without_the_option_the_shard_selector_is_ignored() {
    let server = FakeApiServer::start();
    seed(&server, 6);
    let list = get(&server, &format!("/api/v1/configmaps?shardSelector={}", shard_query(0, 4))).json();
    assert_eq!(names(&list).len(), 6);
    assert!(list["metadata"].get("shardInfo").is_none());
    // Not even a malformed one is looked at.
    assert_eq!(get(&server, "/api/v1/configmaps?shardSelector=nonsense").status, 200);
}
