//! Every request shape the library sends, recorded while the suite runs, and each one replayed
//! against the fake and the real server, their answers compared by structure.
//!
//! The library logs each request it makes at trace level under the target
//! `kube_watcher::request`, with its method, URL, Accept and Content-Type as key-values
//! (`src/wire/http.rs`). The suite's logger (installed with the bed) reduces each to a
//! [`Shape`]: the method, the path with the namespace and the object's name taken out, the set
//! of query parameters, and the two headers. `tests/real/shapes.txt` lists every shape the
//! suite may send: a request of any other shape fails the test that is running when it is
//! seen (`check_unlisted`, called as each test lets go of the bed), naming the line to add. So a
//! new kind of request cannot escape the comparison below, which replays every listed shape.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::OnceLock;

use parking_lot::Mutex;

/// One kind of request, whatever its values.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Shape {
    pub method: String,
    /// The path with `{ns}` for the namespace and `{name}` for an object's name.
    pub path: String,
    /// The names of the query parameters, sorted.
    pub query: Vec<String>,
    pub accept: String,
    /// Empty for a request without a body.
    pub content_type: String,
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let query = if self.query.is_empty() { "-".to_owned() } else { self.query.join("&") };
        let content_type = if self.content_type.is_empty() { "-" } else { &self.content_type };
        write!(f, "{} {} {query} | {} | {content_type}", self.method, self.path, self.accept)
    }
}

impl Shape {
    /// The shape of a request to `url` (scheme and authority are dropped).
    pub fn of(method: &str, url: &str, accept: &str, content_type: &str) -> Shape {
        let rest = url.split_once("://").map_or(url, |(_, r)| r);
        let path_and_query = rest.find('/').map_or("/", |i| &rest[i..]);
        let (path, query) = path_and_query.split_once('?').unwrap_or((path_and_query, ""));
        let query: BTreeSet<String> =
            query.split('&').filter(|p| !p.is_empty()).map(|p| p.split('=').next().unwrap().to_owned()).collect();
        Shape {
            method: method.to_owned(),
            path: pattern(path),
            query: query.into_iter().collect(),
            accept: accept.to_owned(),
            content_type: content_type.to_owned(),
        }
    }

    /// A line of `shapes.txt` (as `Display` writes it).
    pub fn parse(line: &str) -> Result<Shape, String> {
        let fields: Vec<&str> = line.split(" | ").collect();
        let [head, accept, content_type] = fields[..] else {
            return Err(format!("not `METHOD PATH QUERY | ACCEPT | CONTENT-TYPE`: {line:?}"));
        };
        let head: Vec<&str> = head.split(' ').collect();
        let [method, path, query] = head[..] else { return Err(format!("not `METHOD PATH QUERY`: {line:?}")) };
        let query = if query == "-" { Vec::new() } else { query.split('&').map(str::to_owned).collect() };
        let content_type = if content_type == "-" { "" } else { content_type };
        Ok(Shape {
            method: method.to_owned(),
            path: path.to_owned(),
            query,
            accept: accept.to_owned(),
            content_type: content_type.to_owned(),
        })
    }

    /// The group-version prefix, the namespace placeholder (if any), the resource, whether an
    /// object is named, and the subresource: `/api/v1`, true, `pods`, true, None.
    pub fn parts(&self) -> Parts<'_> {
        let segments: Vec<&str> = self.path.split('/').filter(|s| !s.is_empty()).collect();
        let prefix_len = match segments.first() {
            Some(&"api") => 2,
            Some(&"apis") => 3,
            _ => segments.len(),
        };
        let prefix_len = prefix_len.min(segments.len());
        let prefix = &self.path[..self.path.match_indices('/').nth(prefix_len).map_or(self.path.len(), |(i, _)| i)];
        let rest = &segments[prefix_len..];
        let (namespaced, rest) = match rest {
            ["namespaces", "{ns}", tail @ ..] if !tail.is_empty() => (true, tail),
            _ => (false, rest),
        };
        Parts {
            prefix,
            namespaced,
            resource: rest.first().copied(),
            named: rest.get(1).is_some(),
            subresource: rest.get(2).copied(),
        }
    }
}

/// What a shape's path addresses (`Shape::parts`).
#[derive(Debug)]
pub struct Parts<'a> {
    pub prefix: &'a str,
    pub namespaced: bool,
    pub resource: Option<&'a str>,
    pub named: bool,
    pub subresource: Option<&'a str>,
}

/// `path` with the namespace and the object's name replaced by `{ns}` and `{name}`.
fn pattern(path: &str) -> String {
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let prefix = match segments.first() {
        Some(&"api") => 2,
        Some(&"apis") => 3,
        _ => return path.to_owned(),
    };
    if segments.len() <= prefix {
        return path.to_owned();
    }
    let mut out: Vec<String> = segments[..prefix].iter().map(|s| (*s).to_owned()).collect();
    let mut rest = &segments[prefix..];
    if rest.len() >= 3 && rest[0] == "namespaces" {
        out.push("namespaces".into());
        out.push("{ns}".into());
        rest = &rest[2..];
    }
    for (i, s) in rest.iter().enumerate() {
        out.push(if i == 1 { "{name}".to_owned() } else { (*s).to_owned() });
    }
    format!("/{}", out.join("/"))
}

/// The shapes `tests/real/shapes.txt` lists.
pub fn listed() -> &'static BTreeSet<Shape> {
    static LISTED: OnceLock<BTreeSet<Shape>> = OnceLock::new();
    LISTED.get_or_init(|| {
        include_str!("shapes.txt")
            .lines()
            .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
            .map(|l| Shape::parse(l).unwrap_or_else(|e| panic!("tests/real/shapes.txt: {e}")))
            .collect()
    })
}

/// What the suite's requests looked like so far: every shape seen (with the first URL of each),
/// and those not listed, not yet reported.
#[derive(Default)]
struct Seen {
    all: BTreeMap<Shape, String>,
    unlisted: BTreeSet<Shape>,
    /// Requests of each shape so far.
    counts: BTreeMap<Shape, u64>,
}

fn seen() -> &'static Mutex<Seen> {
    static SEEN: OnceLock<Mutex<Seen>> = OnceLock::new();
    SEEN.get_or_init(Mutex::default)
}

/// Records the library's request log lines (and passes nothing else on).
struct Recorder;

impl log::Log for Recorder {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        metadata.target() == "kube_watcher::request"
    }

    fn log(&self, record: &log::Record<'_>) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let kv = record.key_values();
        let get = |key: &str| kv.get(log::kv::Key::from_str(key)).map(|v| v.to_string()).unwrap_or_default();
        let shape = Shape::of(&get("method"), &get("url"), &get("accept"), &get("content_type"));
        let mut seen = seen().lock();
        if !listed().contains(&shape) {
            seen.unlisted.insert(shape.clone());
        }
        *seen.counts.entry(shape.clone()).or_default() += 1;
        seen.all.entry(shape).or_insert_with(|| get("url"));
    }

    fn flush(&self) {}
}

/// Installs the recorder (once; the bed does it when it is first found).
pub fn install() {
    static INSTALLED: OnceLock<()> = OnceLock::new();
    INSTALLED.get_or_init(|| {
        log::set_logger(&Recorder).expect("no other logger in the real suite");
        log::set_max_level(log::LevelFilter::Trace);
    });
}

/// Fails the running test (called as it lets go of the bed) if a request of a shape that
/// `shapes.txt` does not list was sent since the last check: each is reported once. When
/// `KUBE_WATCHER_SHAPES` names a file, every shape seen so far is written to it instead, as
/// `shapes.txt` lines (to write the list anew: the whole suite with it set).
pub fn check_unlisted() {
    let mut seen = seen().lock();
    if let Some(file) = std::env::var_os("KUBE_WATCHER_SHAPES") {
        let lines: String = seen.all.keys().map(|s| format!("{s}\n")).collect();
        std::fs::write(&file, lines).unwrap_or_else(|e| panic!("KUBE_WATCHER_SHAPES={}: {e}", file.display()));
        return;
    }
    if seen.unlisted.is_empty() || std::thread::panicking() {
        return;
    }
    let unlisted = std::mem::take(&mut seen.unlisted);
    let lines: Vec<String> = unlisted.iter().map(|s| format!("{s}    (first: {})", seen.all[s])).collect();
    drop(seen);
    panic!(
        "the library sent requests of shapes tests/real/shapes.txt does not list; add them (and teach \
         shapes::every_listed_shape_answers_alike_on_the_fake_and_the_real_server to replay them):\n{}",
        lines.join("\n")
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_take_out_namespaces_and_names() {
        let s = Shape::of(
            "GET",
            "https://127.0.0.1:4/api/v1/namespaces/x-1/pods/p0?watch=true&resourceVersion=5&watch=1",
            "application/json",
            "",
        );
        assert_eq!(s.path, "/api/v1/namespaces/{ns}/pods/{name}");
        assert_eq!(s.query, ["resourceVersion", "watch"]);
        assert_eq!(Shape::parse(&s.to_string()).unwrap(), s);
        let n = Shape::of("GET", "https://h/api/v1/namespaces/kube-system", "a", "");
        assert_eq!(n.path, "/api/v1/namespaces/{name}");
        let l =
            Shape::of("PUT", "https://h/apis/coordination.k8s.io/v1/namespaces/n/leases/l", "a", "application/json");
        assert_eq!(l.path, "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{name}");
        let p = l.parts();
        assert_eq!(
            (p.prefix, p.namespaced, p.resource, p.named),
            ("/apis/coordination.k8s.io/v1", true, Some("leases"), true)
        );
        assert_eq!(Shape::of("GET", "https://h/apis", "a", "").path, "/apis");
        assert_eq!(Shape::of("GET", "https://h/api/v1/pods", "a", "").parts().resource, Some("pods"));
    }
}

/// What one answer looked like, reduced to what both servers must agree on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    pub status: u16,
    pub content_type: String,
    /// `reason` of a Status (an error answer).
    pub reason: String,
    /// `apiVersion` and `kind` of the body (the protobuf envelope's, for protobuf).
    pub kind: String,
    /// The list metadata's fields (names for JSON, numbers for protobuf).
    pub list_meta: BTreeSet<String>,
    /// The fields of the items (or the object), and of their metadata.
    pub fields: BTreeSet<String>,
    pub metadata: BTreeSet<String>,
    /// The events of a watch, in order, a run of one type once, without bookmarks but the one
    /// that ends a streaming list's initial events (`BOOKMARK(initial-events-end)`): the others
    /// come when a timer says.
    pub events: Vec<String>,
}

impl Summary {
    fn empty(status: u16, content_type: &str) -> Summary {
        Summary {
            status,
            content_type: content_type.to_owned(),
            reason: String::new(),
            kind: String::new(),
            list_meta: BTreeSet::new(),
            fields: BTreeSet::new(),
            metadata: BTreeSet::new(),
            events: Vec::new(),
        }
    }

    /// The summary of an answer to a request of `shape`.
    pub fn of(shape: &Shape, status: u16, content_type: &str, body: &[u8]) -> Summary {
        let mut s = Summary::empty(status, content_type);
        let watch = shape.query.iter().any(|q| q == "watch");
        let protobuf = content_type.starts_with("application/vnd.kubernetes.protobuf");
        if watch && status == 200 {
            if protobuf {
                let mut b = body;
                while b.len() >= 4 {
                    let n = u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize;
                    s.event_protobuf(&b[4..4 + n]);
                    b = &b[4 + n..];
                }
            } else {
                for line in body.split(|c| *c == b'\n').filter(|l| !l.is_empty()) {
                    let event: serde_json::Value = serde_json::from_slice(line).unwrap();
                    let marker = event["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"] == "true";
                    let kind = event["type"].as_str().unwrap_or_default();
                    s.event(kind, marker);
                    if kind != "BOOKMARK" {
                        s.object_json(&event["object"]);
                    }
                }
            }
        } else if protobuf {
            s.protobuf(body);
        } else if let Ok(doc) = serde_json::from_slice::<serde_json::Value>(body) {
            s.json(&doc);
        }
        s
    }

    /// What of `self` differs from `other`, field by field (for a failure's message).
    fn versus(&self, other: &Summary) -> String {
        let mut out = Vec::new();
        let mut field = |name: &str, a: String, b: String| {
            if a != b {
                out.push(format!("{name}: {a}"));
            }
        };
        field("status", self.status.to_string(), other.status.to_string());
        field("content type", self.content_type.clone(), other.content_type.clone());
        field("reason", self.reason.clone(), other.reason.clone());
        field("kind", self.kind.clone(), other.kind.clone());
        field("list metadata", format!("{:?}", self.list_meta), format!("{:?}", other.list_meta));
        field("fields", format!("{:?}", self.fields), format!("{:?}", other.fields));
        field("metadata", format!("{:?}", self.metadata), format!("{:?}", other.metadata));
        field("events", format!("{:?}", self.events), format!("{:?}", other.events));
        out.join("; ")
    }

    /// One event of a watch: a run of the same type counts once (how many objects a shard
    /// holds depends on their uids, which each server makes its own).
    fn event(&mut self, kind: &str, marker: bool) {
        let kind = match (kind, marker) {
            ("BOOKMARK", true) => "BOOKMARK(initial-events-end)",
            ("BOOKMARK", false) => return,
            (other, _) => other,
        };
        if self.events.last().is_none_or(|last| last != kind) {
            self.events.push(kind.to_owned());
        }
    }

    /// A protobuf watch frame: a `WatchEvent` (type 1, object 2: a `RawExtension` whose raw
    /// bytes are the object in its envelope).
    fn event_protobuf(&mut self, frame: &[u8]) {
        use crate::differential::{payload, proto_fields};
        let event = proto_fields(frame);
        let kind = event.iter().find(|(n, _)| *n == 1).map(|(_, b)| String::from_utf8_lossy(payload(b)).into_owned());
        let object = event.iter().find(|(n, _)| *n == 2).map_or(&[][..], |(_, b)| payload(b));
        let marker = object.windows(25).any(|w| w == b"k8s.io/initial-events-end");
        let kind = kind.unwrap_or_default();
        self.event(&kind, marker);
        if kind != "BOOKMARK" {
            // The RawExtension's raw bytes (1): the object in its envelope.
            let raw = proto_fields(object).into_iter().find(|(n, _)| *n == 1).map(|(_, b)| payload(&b).to_vec());
            let unknown = proto_fields(raw.as_deref().unwrap_or_default().strip_prefix(b"k8s\0").unwrap_or_default());
            let object = unknown.iter().find(|(n, _)| *n == 2).map_or(Vec::new(), |(_, b)| proto_fields(payload(b)));
            self.object_protobuf(&object);
        }
    }

    fn object_json(&mut self, object: &serde_json::Value) {
        let keys =
            |v: &serde_json::Value| v.as_object().map(|o| o.keys().cloned().collect::<Vec<_>>()).unwrap_or_default();
        self.fields.extend(keys(object));
        self.metadata.extend(keys(&object["metadata"]));
    }

    /// An object's fields by number, and its metadata's (field 1).
    fn object_protobuf(&mut self, object: &[(u64, Vec<u8>)]) {
        use crate::differential::{payload, proto_fields};
        self.fields.extend(object.iter().map(|(n, _)| n.to_string()));
        if let Some((_, meta)) = object.iter().find(|(n, _)| *n == 1) {
            self.metadata.extend(proto_fields(payload(meta)).iter().map(|(n, _)| n.to_string()));
        }
    }

    fn json(&mut self, doc: &serde_json::Value) {
        self.kind =
            format!("{} {}", doc["apiVersion"].as_str().unwrap_or_default(), doc["kind"].as_str().unwrap_or_default());
        if doc["kind"] == "Status" {
            self.reason = doc["reason"].as_str().unwrap_or_default().to_owned();
            return;
        }
        let keys =
            |v: &serde_json::Value| v.as_object().map(|o| o.keys().cloned().collect::<Vec<_>>()).unwrap_or_default();
        match doc.get("items").and_then(|i| i.as_array()) {
            Some(items) => {
                self.list_meta.extend(keys(&doc["metadata"]));
                for item in items {
                    self.object_json(item);
                }
            }
            None if doc["kind"].as_str().is_some_and(|k| !k.ends_with("DiscoveryList")) => self.object_json(doc),
            None => {}
        }
    }

    /// A protobuf answer: the envelope's type (field 1: apiVersion 1, kind 2), and the
    /// object's (field 2) fields by number: a list's metadata (1) and items (2).
    fn protobuf(&mut self, body: &[u8]) {
        use crate::differential::{payload, proto_fields};
        let Some(body) = body.strip_prefix(b"k8s\0") else { return };
        let unknown = proto_fields(body);
        let field =
            |fields: &[(u64, Vec<u8>)], n: u64| fields.iter().find(|(k, _)| *k == n).map(|(_, b)| payload(b).to_vec());
        let type_meta = proto_fields(&field(&unknown, 1).unwrap_or_default());
        let text = |n| String::from_utf8_lossy(&field(&type_meta, n).unwrap_or_default()).into_owned();
        self.kind = format!("{} {}", text(1), text(2));
        let object = proto_fields(&field(&unknown, 2).unwrap_or_default());
        let numbers = |fields: &[(u64, Vec<u8>)]| fields.iter().map(|(n, _)| n.to_string()).collect::<Vec<_>>();
        if self.kind.ends_with("List") {
            self.list_meta.extend(numbers(&proto_fields(&field(&object, 1).unwrap_or_default())));
            for (_, item) in object.iter().filter(|(n, _)| *n == 2) {
                self.object_protobuf(&proto_fields(payload(item)));
            }
        } else if self.kind.ends_with("Status") {
            // Status: reason is field 4.
            self.reason = String::from_utf8_lossy(&field(&object, 4).unwrap_or_default()).into_owned();
        } else {
            self.object_protobuf(&object);
        }
    }
}

/// An object of `resource` named `name`, labelled `app=web` and `shape=<label>`.
fn body(resource: &str, name: &str, label: &str) -> serde_json::Value {
    use serde_json::json;
    let meta = json!({"name": name, "labels": {"app": "web", "shape": label}});
    let containers = json!([{"name": "c", "image": "registry.example/app:1"}]);
    match resource {
        "configmaps" => json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"k": "v"}}),
        "pods" => json!({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {"containers": containers}}),
        "podtemplates" => json!({"apiVersion": "v1", "kind": "PodTemplate", "metadata": meta,
                                 "template": {"spec": {"containers": containers}}}),
        "leases" => json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta,
                           "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15}}),
        "widgets" => json!({"apiVersion": "testbed.kube-watcher.dev/v1", "kind": "Widget", "metadata": meta,
                            "spec": {"size": 3, "color": "red"}}),
        "namespaces" => json!({"apiVersion": "v1", "kind": "Namespace", "metadata": meta}),
        "nodes" => json!({"apiVersion": "v1", "kind": "Node", "metadata": meta}),
        other => panic!("the replay cannot make {other}: teach shapes::body"),
    }
}

/// Sends one request of `shape` to `raw` in namespace `ns`, having made what it needs there
/// (objects `o0`, `o1`, ... labelled `app=web`, of the shape's resource; a continue token), and
/// sums up the answer.
fn replay(raw: &crate::differential::Raw, shape: &Shape, ns: &str) -> Summary {
    let parts = shape.parts();
    assert!(parts.subresource.is_none(), "the replay knows no subresources yet: teach shapes::replay {shape}");
    let json = "application/json";
    let send = |method: &str, path: &str, body: Option<&serde_json::Value>| {
        let bytes = body.map(|b| b.to_string().into_bytes()).unwrap_or_default();
        let (status, _, answer) = raw.request(method, path, json, if body.is_some() { json } else { "" }, &bytes);
        assert!((200..300).contains(&status), "{method} {path}: {status} {}", String::from_utf8_lossy(&answer));
        serde_json::from_slice::<serde_json::Value>(&answer).unwrap()
    };
    let Some(resource) = parts.resource.filter(|r| *r != "namespaces" || parts.named) else {
        // Discovery, and a create of a namespace.
        let body = (shape.method == "POST").then(|| body("namespaces", &format!("{ns}-made"), ns));
        let bytes = body.map(|b| b.to_string().into_bytes()).unwrap_or_default();
        let (status, content_type, answer) =
            raw.request(&shape.method, &shape.path, &shape.accept, &shape.content_type, &bytes);
        return Summary::of(shape, status, &content_type, &answer);
    };
    let collection = match shape.path.find("/{name}") {
        Some(i) => shape.path[..i].replace("{ns}", ns),
        None => shape.path.replace("{ns}", ns),
    };
    // The objects are made in the namespace, also for a request across all of them (whose
    // label selector then finds only these). Cluster-scoped objects are named after the
    // namespace, so that each replay makes its own.
    let cluster_scoped = resource == "nodes";
    let home = if parts.namespaced || cluster_scoped {
        collection.clone()
    } else {
        format!("{}/namespaces/{ns}/{resource}", parts.prefix)
    };
    let named = |name: &str| if cluster_scoped { format!("{ns}-{name}") } else { name.to_owned() };
    if resource == "namespaces" {
        // The namespace itself, by name.
        let (status, content_type, answer) =
            raw.request(&shape.method, &format!("{collection}/{ns}"), &shape.accept, &shape.content_type, &[]);
        return Summary::of(shape, status, &content_type, &answer);
    }
    let version = |s: &serde_json::Value| s["metadata"]["resourceVersion"].as_str().unwrap().to_owned();
    let before = version(&send("GET", &home, None));
    // Enough objects that half of them by uid is never none.
    let n = if shape.query.iter().any(|q| q == "shardSelector") { 16 } else { 3 };
    for i in 0..n {
        send("POST", &home, Some(&body(resource, &named(&format!("o{i}")), ns)));
    }
    let now = version(&send("GET", &home, None));
    let object = format!("{home}/{}", named("o0"));
    let query = |q: &str| -> String {
        let watch = shape.query.iter().any(|q| q == "watch");
        let value = match q {
            "watch" | "allowWatchBookmarks" | "sendInitialEvents" => "true".to_owned(),
            // Every watch ends within a second, with whatever it sent.
            "timeoutSeconds" => "1".to_owned(),
            "resourceVersionMatch" => "NotOlderThan".to_owned(),
            // A watch from before the objects were made sees them come.
            "resourceVersion" if watch => before.clone(),
            "resourceVersion" => now.clone(),
            "limit" => "2".to_owned(),
            "continue" => {
                let first = send("GET", &format!("{home}?limit=1"), None);
                first["metadata"]["continue"].as_str().unwrap().to_owned()
            }
            "labelSelector" => format!("shape%3D{ns}"),
            "fieldSelector" => format!("metadata.name%3D{}", named("o0")),
            "shardSelector" => kube_watcher::Shard::of(0, 2)
                .unwrap()
                .selector()
                .replace(' ', "%20")
                .replace('\'', "%27")
                .replace(',', "%2C"),
            other => panic!("the replay has no value for the query parameter {other}: teach shapes::replay"),
        };
        format!("{q}={value}")
    };
    let query: Vec<String> = shape.query.iter().map(|q| query(q)).collect();
    let query = if query.is_empty() { String::new() } else { format!("?{}", query.join("&")) };
    let body = match shape.method.as_str() {
        "POST" => Some(body(resource, &named("new"), ns)),
        "PUT" => {
            let mut current = send("GET", &object, None);
            current["metadata"]["labels"]["changed"] = serde_json::json!("yes");
            Some(current)
        }
        _ => None,
    };
    let path = if parts.named { &object } else { &collection };
    let bytes = body.map(|b| b.to_string().into_bytes()).unwrap_or_default();
    let (status, content_type, answer) =
        raw.request(&shape.method, &format!("{path}{query}"), &shape.accept, &shape.content_type, &bytes);
    Summary::of(shape, status, &content_type, &answer)
}

/// The minor whose kube-apiserver the fake answers as (docs/fidelity.md); on an older one the
/// differences docs/protocol.md section 16 lists are expected, and the table is not checked.
const FAKE_FOLLOWS: u32 = 37;

/// Where the fake answers a shape otherwise on purpose: why, when the only difference is one
/// of those listed (docs/fidelity.md names each; those of an older minor, docs/protocol.md
/// section 16).
fn kept_difference(shape: &Shape, fake: &Summary, real: &Summary, minor: u32) -> Option<&'static str> {
    // 1.36 counts the objects after a shard-selected page as if nothing were selected
    // (`remainingItemCount`, protobuf ListMeta field 4); 1.37 leaves the count out, as for a
    // label or field selector.
    let real = if minor == 36 && shape.query.iter().any(|q| q == "shardSelector") {
        let list_meta = real.list_meta.iter().filter(|k| *k != "remainingItemCount" && *k != "4").cloned().collect();
        &Summary { list_meta, ..real.clone() }
    } else {
        real
    };
    // kube-apiserver records an `Update` entry in `metadata.managedFields` (protobuf field 17)
    // for every create and update; the fake writes none (it has no field manager, and refuses
    // server-side apply).
    let without = |s: &BTreeSet<String>, also: &[&str]| {
        s.iter().filter(|f| *f != "managedFields" && *f != "17" && !also.contains(&f.as_str())).cloned().collect()
    };
    let fake = Summary { metadata: without(&fake.metadata, &[]), ..fake.clone() };
    let trimmed = Summary { metadata: without(&real.metadata, &[]), ..real.clone() };
    if fake == trimmed {
        return Some("no `managedFields` (the fake keeps no field managers)");
    }
    // A page across every namespace without a label or field selector (a sharded watcher's
    // probe before its streaming list: a list of one) holds whichever object the server lists
    // first: on the real server another test's, on the fake the replay's own.
    let anyones = !shape.parts().namespaced
        && shape.query.iter().any(|q| q == "limit")
        && !shape.query.iter().any(|q| q == "labelSelector" || q == "fieldSelector");
    let unnamed = |s: &Summary| Summary { metadata: BTreeSet::new(), ..s.clone() };
    if anyones && unnamed(&fake) == unnamed(real) {
        return Some("a list of one across every namespace holds another test's object on the real server");
    }
    // A pod's DELETE: kube-apiserver marks it terminating (`deletionTimestamp`, a grace period)
    // for its kubelet to end and remove; the fake has no kubelet and removes it at once.
    let terminating = ["deletionTimestamp", "deletionGracePeriodSeconds"];
    let trimmed = Summary { metadata: without(&real.metadata, &terminating), ..real.clone() };
    (shape.method == "DELETE" && shape.parts().resource == Some("pods") && fake == trimmed).then_some(
        "no `managedFields`; a pod is removed at once, not marked terminating for a kubelet (the fake has none)",
    )
}

/// Every shape in `shapes.txt`, sent to the fake and to the real server alike, answers alike:
/// status, `reason`, `Content-Type`, the body's kind, the list metadata's fields, the fields of
/// the items (or the object) and of their metadata, and a watch's events with the marker at the
/// end of a streaming list. docs/fidelity.md lists every shape with the verdict, as this test
/// writes it (`KUBE_WATCHER_WRITE_FIDELITY=1` writes it there).
#[test]
fn every_listed_shape_answers_alike_on_the_fake_and_the_real_server() {
    let Some(bed) = crate::bed::Bed::shared() else { return };
    // The recorder hears the library: a list made here is recorded with its shape.
    let hook = bed.namespace("shape-hook");
    let api = kube_watcher::Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(bed.client(), &hook);
    let shape = Shape::of(
        "GET",
        &format!("/api/v1/namespaces/{hook}/configmaps?limit=1"),
        "application/vnd.kubernetes.protobuf, application/json",
        "",
    );
    let count = || seen().lock().counts.get(&shape).copied().unwrap_or_default();
    let before = count();
    api.list(&kube_watcher::ListParams::default().limit(1)).unwrap();
    assert!(
        count() > before,
        "the library's requests are not recorded (its trace line: src/wire/http.rs, REQUEST_LOG)"
    );
    crate::resources::widgets(&bed);
    let shapes: Vec<&Shape> = listed().iter().collect();
    let results: Vec<(Summary, Summary)> = std::thread::scope(|scope| {
        let handles: Vec<_> = shapes
            .chunks(shapes.len().div_ceil(6))
            .map(|chunk| {
                let bed = &bed;
                scope.spawn(move || {
                    chunk
                        .iter()
                        .map(|shape| {
                            let server = kube_watcher::testing::FakeApiServer::builder()
                                .sharded_list_and_watch(bed.filters_shards())
                                .start();
                            server.register(kube_watcher::testing::ResourceType::of::<
                                k8s_openapi::api::core::v1::PodTemplate,
                            >());
                            server.register(kube_watcher::testing::ResourceType::new(
                                "testbed.kube-watcher.dev",
                                "v1",
                                "widgets",
                                "Widget",
                                true,
                            ));
                            let fake = replay(&crate::differential::Raw::fake(&server), shape, "shapes");
                            let ns = bed.namespace("shape");
                            let real = replay(&crate::differential::Raw::real(bed), shape, &ns);
                            (fake, real)
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles.into_iter().flat_map(|h| h.join().unwrap()).collect()
    });
    let mut differ = Vec::new();
    let mut table = vec!["| request shape (method, path, query parameters \\| Accept \\| Content-Type) | the fake against kube-apiserver |".to_owned(), "|---|---|".to_owned()];
    for (shape, (fake, real)) in shapes.iter().zip(&results) {
        let verdict = if fake == real {
            "same".to_owned()
        } else if let Some(why) = kept_difference(shape, fake, real, bed.minor()) {
            format!("differs on purpose: {why}")
        } else {
            differ.push(format!("{shape}\n  fake: {}\n  real: {}", fake.versus(real), real.versus(fake)));
            "DIFFERS".to_owned()
        };
        let escaped = shape.to_string().replace('|', "\\|");
        table.push(format!("| `{escaped}` | {verdict} |"));
    }
    assert!(differ.is_empty(), "{} shapes answer otherwise on the fake:\n{}", differ.len(), differ.join("\n"));
    if bed.minor() != FAKE_FOLLOWS {
        return;
    }
    let doc_path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/fidelity.md");
    let doc = std::fs::read_to_string(&doc_path).unwrap();
    let (begin, end) = ("<!-- shapes: begin -->\n", "<!-- shapes: end -->");
    let start = doc.find(begin).expect("docs/fidelity.md has the shapes table's markers") + begin.len();
    let stop = doc.find(end).unwrap();
    let block = format!("{}\n", table.join("\n"));
    if doc[start..stop] != block {
        if std::env::var_os("KUBE_WATCHER_WRITE_FIDELITY").is_some() {
            std::fs::write(&doc_path, format!("{}{block}{}", &doc[..start], &doc[stop..])).unwrap();
        } else {
            panic!(
                "docs/fidelity.md's shapes table is not what this run saw (KUBE_WATCHER_WRITE_FIDELITY=1 writes it):\n{block}"
            );
        }
    }
}
