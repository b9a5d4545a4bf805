//! The fake against the real server: the same raw requests to `FakeApiServer` and to
//! kube-apiserver, and what a client can observe of the answers compared (status, `reason`,
//! message, list metadata, the streaming list's end marker, Lease conflicts, RBAC's 403, the end
//! of a watch at its timeout, protobuf bytes, aggregated discovery). docs/fidelity.md is the
//! table of what was compared and of what differs on purpose.

use std::io::{BufRead, BufReader};

use std::collections::BTreeMap;
use std::io::Read;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube_watcher::testing::{FakeApiServer, ResourceType};
use serde_json::{Value, json};

use crate::bed::Bed;

/// One server, spoken to over raw HTTP.
pub struct Raw {
    base: String,
    token: Option<String>,
    agent: ureq::Agent,
}

/// A server's answer: status, and the body as JSON (`Null` when it is not JSON).
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub body: Value,
}

impl Answer {
    fn reason(&self) -> &str {
        self.body["reason"].as_str().unwrap_or_default()
    }
    fn message(&self) -> &str {
        self.body["message"].as_str().unwrap_or_default()
    }
}

impl Raw {
    pub fn fake(server: &FakeApiServer) -> Raw {
        let agent = ureq::Agent::config_builder().http_status_as_error(false).build().into();
        Raw { base: server.url(), token: None, agent }
    }

    /// The fake, with a bearer token.
    fn fake_as(server: &FakeApiServer, token: &str) -> Raw {
        Raw { token: Some(token.to_owned()), ..Raw::fake(server) }
    }

    /// The real server, as the user of the token in the bed's file `token_file`.
    fn real_as(bed: &Bed, token_file: &str) -> Raw {
        let token = std::fs::read_to_string(bed.run_file(token_file)).unwrap();
        Raw { token: Some(token.trim().to_owned()), ..Raw::real(bed) }
    }

    /// The server without `ShardedListAndWatch` and `WatchList`, as the administrator.
    fn real_nogate(bed: &Bed) -> Raw {
        Raw { base: format!("https://127.0.0.1:{}", bed.port("nogate")), ..Raw::real(bed) }
    }

    pub fn real(bed: &Bed) -> Raw {
        let pem = std::fs::read(bed.run_file("certs/ca.crt")).unwrap();
        let certs: Vec<_> = ureq::tls::parse_pem(&pem)
            .filter_map(|item| match item {
                Ok(ureq::tls::PemItem::Certificate(c)) => Some(c),
                _ => None,
            })
            .collect();
        let tls = ureq::tls::TlsConfig::builder().root_certs(ureq::tls::RootCerts::new_with_certs(&certs)).build();
        let agent = ureq::Agent::config_builder().tls_config(tls).http_status_as_error(false).build().into();
        let token = std::fs::read_to_string(bed.run_file("admin.token")).unwrap();
        Raw { base: format!("https://127.0.0.1:{}", bed.port("apiserver")), token: Some(token), agent }
    }

    pub fn send(&self, method: &str, path: &str, body: Option<&Value>) -> Answer {
        let url = format!("{}{path}", self.base);
        let auth = self.token.as_ref().map(|t| format!("Bearer {t}")).unwrap_or_default();
        let mut response = match (method, body) {
            ("GET", _) => self.agent.get(&url).header("authorization", &auth).call(),
            ("DELETE", _) => self.agent.delete(&url).header("authorization", &auth).call(),
            ("POST", Some(b)) => self
                .agent
                .post(&url)
                .header("authorization", &auth)
                .header("content-type", "application/json")
                .send(b.to_string()),
            ("PUT", Some(b)) => self
                .agent
                .put(&url)
                .header("authorization", &auth)
                .header("content-type", "application/json")
                .send(b.to_string()),
            other => panic!("unsupported request {other:?}"),
        }
        .unwrap();
        let status = response.status().as_u16();
        let text = response.body_mut().read_to_string().unwrap_or_default();
        Answer { status, body: serde_json::from_str(&text).unwrap_or(Value::Null) }
    }

    /// Any request with exactly these headers (an empty `content_type`: none, and no body):
    /// status, `Content-Type`, and the whole body.
    pub fn request(
        &self,
        method: &str,
        path: &str,
        accept: &str,
        content_type: &str,
        body: &[u8],
    ) -> (u16, String, Vec<u8>) {
        let url = format!("{}{path}", self.base);
        let auth = self.token.as_ref().map(|t| format!("Bearer {t}")).unwrap_or_default();
        let request = ureq::http::Request::builder().method(method).uri(&url).header("authorization", &auth);
        let request = request.header("accept", accept);
        let response = if content_type.is_empty() {
            self.agent.run(request.body(()).unwrap())
        } else {
            self.agent.run(request.header("content-type", content_type).body(body.to_vec()).unwrap())
        }
        .unwrap();
        let content_type = response.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or_default();
        let (status, content_type) = (response.status().as_u16(), content_type.to_owned());
        let mut bytes = Vec::new();
        response.into_body().into_reader().read_to_end(&mut bytes).expect("the body ends cleanly");
        (status, content_type, bytes)
    }

    /// A POST of `body` with the given `Content-Type` header, or none.
    fn post_as(&self, path: &str, content_type: Option<&str>, body: &Value) -> Answer {
        let url = format!("{}{path}", self.base);
        let auth = self.token.as_ref().map(|t| format!("Bearer {t}")).unwrap_or_default();
        let request = self.agent.post(&url).header("authorization", &auth);
        let request = match content_type {
            Some(t) => request.header("content-type", t),
            None => request,
        };
        // ureq adds no Content-Type of its own.
        let mut response = request.send(body.to_string()).unwrap();
        let status = response.status().as_u16();
        let text = response.body_mut().read_to_string().unwrap_or_default();
        Answer { status, body: serde_json::from_str(&text).unwrap_or(Value::Null) }
    }

    /// A GET with `accept`: status, `Content-Type`, `Transfer-Encoding`, and the body's bytes
    /// (an error reading the body, such as a chunked body cut short, fails the test).
    fn get_bytes(&self, path: &str, accept: &str) -> (u16, String, Option<String>, Vec<u8>) {
        let url = format!("{}{path}", self.base);
        let auth = self.token.as_ref().map(|t| format!("Bearer {t}")).unwrap_or_default();
        let response = self.agent.get(&url).header("authorization", &auth).header("accept", accept).call().unwrap();
        let header = |name: &str| response.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
        let (status, content_type, encoding) =
            (response.status().as_u16(), header("content-type").unwrap_or_default(), header("transfer-encoding"));
        let mut body = Vec::new();
        response.into_body().into_reader().read_to_end(&mut body).expect("the body ends cleanly");
        (status, content_type, encoding, body)
    }

    /// The lines of a watch, until `done` says so (each line one event, as JSON).
    pub fn watch_until(&self, path: &str, mut done: impl FnMut(&Value) -> bool) -> Vec<Value> {
        let url = format!("{}{path}", self.base);
        let auth = self.token.as_ref().map(|t| format!("Bearer {t}")).unwrap_or_default();
        let response = self.agent.get(&url).header("authorization", &auth).call().unwrap();
        assert_eq!(response.status().as_u16(), 200, "{path}");
        let mut lines = Vec::new();
        for line in BufReader::new(response.into_body().into_reader()).lines() {
            let event: Value = serde_json::from_str(&line.unwrap()).unwrap();
            let stop = done(&event);
            lines.push(event);
            if stop {
                break;
            }
        }
        lines
    }
}

fn cm(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": {"app": "web"}}, "data": {"k": "v"}})
}

fn lease(name: &str) -> Value {
    json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": name}, "spec": {"holderIdentity": "a"}})
}

/// Runs `scenario` against the fake (in namespace `ns`) and the real server (in a namespace of
/// its own), returning both answers' lists.
fn both<T>(bed: &Bed, what: &str, scenario: impl Fn(&Raw, &str) -> T) -> (T, T) {
    let server = FakeApiServer::start();
    let fake = scenario(&Raw::fake(&server), "diff");
    let ns = bed.namespace(what);
    let real = scenario(&Raw::real(bed), &ns);
    (fake, real)
}

/// The message with the namespace's name taken out, where the real server's names differ.
fn plain(message: &str, ns: &str) -> String {
    message.replace(ns, "NS")
}

#[test]
fn error_answers_match_the_real_servers() {
    let Some(bed) = Bed::shared() else { return };
    let (fake, real) = both(&bed, "diff-errors", |raw, ns| {
        let cms = format!("/api/v1/namespaces/{ns}/configmaps");
        let leases = format!("/apis/coordination.k8s.io/v1/namespaces/{ns}/leases");
        let created = raw.send("POST", &cms, Some(&cm("a")));
        assert_eq!(created.status, 201, "{created:?}");
        let mut stale = created.body.clone();
        stale["data"]["k"] = json!("w");
        let first = raw.send("PUT", &format!("{cms}/a"), Some(&stale));
        assert_eq!(first.status, 200, "{first:?}");
        vec![
            ("get of a missing object", raw.send("GET", &format!("{cms}/nope"), None)),
            ("create of an existing name", raw.send("POST", &cms, Some(&cm("a")))),
            ("replace from a stale read", raw.send("PUT", &format!("{cms}/a"), Some(&stale))),
            ("delete of a missing object", raw.send("DELETE", &format!("{cms}/nope"), None)),
            ("a malformed label selector", raw.send("GET", &format!("{cms}?labelSelector=app%3D%3D%3Dweb"), None)),
            (
                "an unknown field in a field selector",
                raw.send("GET", &format!("{cms}?fieldSelector=spec.nope%3Dx"), None),
            ),
            ("a name that is not an RFC 1123 subdomain", raw.send("POST", &cms, Some(&cm("a..b")))),
            ("an upper-case name", raw.send("POST", &cms, Some(&cm("A")))),
            ("a name of 254 characters", raw.send("POST", &cms, Some(&cm(&"a".repeat(254))))),
            (
                "no name",
                raw.send("POST", &cms, Some(&json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}}))),
            ),
            ("a Lease name that is not a subdomain", raw.send("POST", &leases, Some(&lease("pods-a..b")))),
            // A body without a Content-Type is read as JSON (the first media type the server
            // takes); one named as something it does not read is refused with a 415.
            ("a body without a Content-Type", raw.post_as(&cms, None, &cm("untyped"))),
            ("a JSON body named text/plain", raw.post_as(&cms, Some("text/plain"), &cm("plain"))),
            // JSON is YAML too.
            ("a body named application/yaml", raw.post_as(&cms, Some("application/yaml"), &cm("yaml"))),
        ]
        .into_iter()
        .map(|(what, a)| (what, a.status, a.reason().to_owned(), plain(a.message(), ns)))
        .collect::<Vec<_>>()
    });
    for (f, r) in fake.iter().zip(&real) {
        assert_eq!((f.1, &f.2), (r.1, &r.2), "{}: status and reason: fake {f:?}, real {r:?}", f.0);
        if f.0 == "a malformed label selector" {
            // The one known difference (docs/fidelity.md): the fake's selector parser words its
            // complaint its own way; the status and reason are the real server's.
            assert!(r.3.starts_with("unable to parse requirement: "), "{r:?}");
            continue;
        }
        assert_eq!(f.3, r.3, "{}: message", f.0);
    }
}

#[test]
fn list_metadata_matches_the_real_servers() {
    let Some(bed) = Bed::shared() else { return };
    let (fake, real) = both(&bed, "diff-lists", |raw, ns| {
        let cms = format!("/api/v1/namespaces/{ns}/configmaps");
        for name in ["a", "b", "c"] {
            assert_eq!(raw.send("POST", &cms, Some(&cm(name))).status, 201);
        }
        let page = raw.send("GET", &format!("{cms}?limit=1"), None);
        let selected = raw.send("GET", &format!("{cms}?limit=1&labelSelector=app%3Dweb"), None);
        let last = raw.send(
            "GET",
            &format!("{cms}?limit=2&continue={}", page.body["metadata"]["continue"].as_str().unwrap()),
            None,
        );
        let items = |a: &Answer| a.body["items"].as_array().map(Vec::len);
        (
            (page.body["kind"].clone(), items(&page), page.body["metadata"]["remainingItemCount"].clone()),
            // With a selector the server cannot count what is left.
            (items(&selected), selected.body["metadata"].get("remainingItemCount").cloned()),
            (
                items(&last),
                last.body["metadata"].get("continue").cloned(),
                last.body["metadata"].get("remainingItemCount").cloned(),
            ),
            page.body["metadata"]["continue"].is_string(),
        )
    });
    assert_eq!(fake, real);
}

#[test]
fn a_streaming_list_ends_with_the_same_marker() {
    let Some(bed) = Bed::shared() else { return };
    let (fake, real) = both(&bed, "diff-stream", |raw, ns| {
        let cms = format!("/api/v1/namespaces/{ns}/configmaps");
        for name in ["a", "b"] {
            assert_eq!(raw.send("POST", &cms, Some(&cm(name))).status, 201);
        }
        let events = raw.watch_until(
            &format!(
                "{cms}?watch=true&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan"
            ),
            |e| e["type"] == "BOOKMARK",
        );
        let types: Vec<String> = events.iter().map(|e| e["type"].as_str().unwrap().to_owned()).collect();
        let marker = events.last().unwrap()["object"].clone();
        (
            types,
            marker["kind"].clone(),
            marker["metadata"]["annotations"].clone(),
            marker["metadata"]["resourceVersion"].is_string(),
        )
    });
    assert_eq!(fake, real);
}

/// A body that says nothing of its kind: accepted for a built-in type, by both.
#[test]
fn a_built_in_type_takes_a_body_without_kind() {
    let Some(bed) = Bed::shared() else { return };
    let (fake, real) = both(&bed, "diff-kind", |raw, ns| {
        let a =
            raw.send("POST", &format!("/api/v1/namespaces/{ns}/configmaps"), Some(&json!({"metadata": {"name": "x"}})));
        (a.status, a.body["kind"].clone(), a.body["apiVersion"].clone())
    });
    assert_eq!(fake, real);
}

/// Lease writes as leader election makes them: an update of a Lease that does not exist creates
/// it (Leases allow create-on-update), unless the update carries a uid; a create of an existing
/// one and an update from a stale read are refused with 409, an update without a
/// resourceVersion with 422 (Leases allow no unconditional update).
#[test]
fn lease_conflicts_match_the_real_servers() {
    let Some(bed) = Bed::shared() else { return };
    let lease = |name: &str, holder: &str| {
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": name},
               "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15}})
    };
    let (fake, real) = both(&bed, "diff-leases", |raw, ns| {
        let leases = format!("/apis/coordination.k8s.io/v1/namespaces/{ns}/leases");
        let created = raw.send("PUT", &format!("{leases}/lock"), Some(&lease("lock", "a")));
        let mut stale = created.body.clone();
        stale["spec"]["holderIdentity"] = json!("b");
        let renewed = raw.send("PUT", &format!("{leases}/lock"), Some(&stale));
        let mut with_uid = lease("gone", "a");
        with_uid["metadata"]["uid"] = json!("0a6f8d1e-0000-4000-8000-000000000000");
        let mut with_version = lease("later", "a");
        with_version["metadata"]["resourceVersion"] = json!("5");
        let mut cm = cm("missing");
        cm["metadata"]["namespace"] = json!(ns);
        vec![
            ("an update of a missing Lease", created),
            ("an update from the current read", renewed),
            ("a create of an existing Lease", raw.send("POST", &leases, Some(&lease("lock", "c")))),
            ("an update from a stale read", raw.send("PUT", &format!("{leases}/lock"), Some(&stale))),
            (
                "an update without a resourceVersion",
                raw.send("PUT", &format!("{leases}/lock"), Some(&lease("lock", "d"))),
            ),
            ("an update of a missing Lease with a uid", raw.send("PUT", &format!("{leases}/gone"), Some(&with_uid))),
            (
                "an update of a missing Lease with a resourceVersion",
                raw.send("PUT", &format!("{leases}/later"), Some(&with_version)),
            ),
            (
                "an update of a missing ConfigMap",
                raw.send("PUT", &format!("/api/v1/namespaces/{ns}/configmaps/missing"), Some(&cm)),
            ),
        ]
        .into_iter()
        .map(|(what, a)| {
            let holder = a.body["spec"]["holderIdentity"].clone();
            (what, a.status, a.reason().to_owned(), plain(a.message(), ns), a.body["details"].clone(), holder)
        })
        .collect::<Vec<_>>()
    });
    assert_eq!(fake.len(), real.len());
    for (f, r) in fake.iter().zip(&real) {
        assert_eq!(f, r, "{}", f.0);
    }
}

/// A user without any RBAC grant: 403 `Forbidden` naming the verb, the resource, its group and
/// the namespace (or the cluster scope); the fake's restricted tokens answer the same.
#[test]
fn rbac_refusals_match_the_real_servers() {
    let Some(bed) = Bed::shared() else { return };
    let scenario = |raw: &Raw, ns: &str| {
        let cms = format!("/api/v1/namespaces/{ns}/configmaps");
        vec![
            ("a list", raw.send("GET", &format!("/api/v1/namespaces/{ns}/pods"), None)),
            ("a get", raw.send("GET", &format!("{cms}/x"), None)),
            ("a create", raw.send("POST", &cms, Some(&cm("x")))),
            ("a delete", raw.send("DELETE", &format!("{cms}/x"), None)),
            ("a watch across namespaces", raw.send("GET", "/apis/coordination.k8s.io/v1/leases?watch=true", None)),
            ("a cluster-scoped get", raw.send("GET", "/api/v1/namespaces/kube-system", None)),
        ]
        .into_iter()
        .map(|(what, a)| (what, a.status, a.reason().to_owned(), plain(a.message(), ns), a.body["details"].clone()))
        .collect::<Vec<_>>()
    };
    let server = FakeApiServer::builder().token("admin-token").start();
    server.add_restricted_token("restricted-token", "kw-restricted");
    let fake = scenario(&Raw::fake_as(&server, "restricted-token"), "diff");
    let ns = bed.namespace("diff-forbidden");
    let real = scenario(&Raw::real_as(&bed, "restricted.token"), &ns);
    for (f, r) in fake.iter().zip(&real) {
        assert_eq!(f, r, "{}", f.0);
    }
    // Discovery stays open to it on both.
    let accept = "application/json";
    assert_eq!(Raw::fake_as(&server, "restricted-token").get_bytes("/api", accept).0, 200);
    assert_eq!(Raw::real_as(&bed, "restricted.token").get_bytes("/api", accept).0, 200);
}

/// When `timeoutSeconds` runs out with nothing to send, both end the watch's chunked body
/// cleanly (the last, empty chunk), with no Status and no line at all.
#[test]
fn a_watch_ends_cleanly_at_its_timeout() {
    let Some(bed) = Bed::shared() else { return };
    let (fake, real) = both(&bed, "diff-timeout", |raw, ns| {
        let cms = format!("/api/v1/namespaces/{ns}/configmaps");
        assert_eq!(raw.send("POST", &cms, Some(&cm("a"))).status, 201);
        let listed = raw.send("GET", &cms, None);
        let rv = listed.body["metadata"]["resourceVersion"].as_str().unwrap().to_owned();
        let (status, content_type, encoding, body) =
            raw.get_bytes(&format!("{cms}?watch=true&timeoutSeconds=1&resourceVersion={rv}"), "application/json");
        (status, content_type, encoding, String::from_utf8_lossy(&body).into_owned())
    });
    assert_eq!(fake, real);
    assert_eq!(real, (200, "application/json".to_owned(), Some("chunked".to_owned()), String::new()));
}

/// The fields of a protobuf message, each as (field number, its bytes as written: key and all).
pub type Fields = Vec<(u64, Vec<u8>)>;

/// The [`Fields`] of the message `b`.
pub fn proto_fields(mut b: &[u8]) -> Fields {
    fn varint(b: &mut &[u8]) -> u64 {
        let (mut v, mut shift) = (0u64, 0);
        loop {
            let byte = b[0];
            *b = &b[1..];
            v |= u64::from(byte & 0x7f) << shift;
            if byte < 0x80 {
                return v;
            }
            shift += 7;
        }
    }
    let mut fields = Vec::new();
    while !b.is_empty() {
        let start = b;
        let key = varint(&mut b);
        match key & 7 {
            0 => {
                varint(&mut b);
            }
            2 => {
                let n = usize::try_from(varint(&mut b)).unwrap();
                b = &b[n..];
            }
            1 => b = &b[8..],
            5 => b = &b[4..],
            w => panic!("wire type {w}"),
        }
        fields.push((key >> 3, start[..start.len() - b.len()].to_vec()));
    }
    fields
}

/// The payload of a length-delimited field as `proto_fields` returns it.
pub fn payload(field: &[u8]) -> &[u8] {
    let mut b = field;
    for _ in 0..2 {
        // the key, then the length: one varint each
        while b[0] >= 0x80 {
            b = &b[1..];
        }
        b = &b[1..];
    }
    b
}

/// A GET answer in protobuf with what must differ between two servers taken out: the
/// envelope's `raw` object, with `metadata.uid` (5), `resourceVersion` (6), `creationTimestamp`
/// (8) and `managedFields` (17) dropped. Returns the envelope's other fields and the rest of
/// the object, field by field.
fn normalised(envelope: &[u8]) -> (Fields, Fields, Fields) {
    assert_eq!(&envelope[..4], b"k8s\0", "the protobuf envelope's magic");
    let unknown = proto_fields(&envelope[4..]);
    let raw = unknown.iter().find(|(n, _)| *n == 2).expect("raw");
    let object = proto_fields(payload(&raw.1));
    let meta = object.iter().find(|(n, _)| *n == 1).expect("metadata");
    let meta: Vec<_> = proto_fields(payload(&meta.1)).into_iter().filter(|(n, _)| ![5, 6, 8, 17].contains(n)).collect();
    let rest = object.into_iter().filter(|(n, _)| *n != 1).collect();
    (unknown.into_iter().filter(|(n, _)| *n != 2).collect(), meta, rest)
}

/// The same objects in protobuf, from both: each is created on the real server, read back as
/// JSON (with the server's defaults), created as that JSON on the fake, and read in protobuf
/// from both. The bytes must be the same but for uid, resourceVersion, creation time and
/// managedFields, which each server writes its own.
#[test]
fn objects_in_protobuf_match_the_real_servers_bytes() {
    let Some(bed) = Bed::shared() else { return };
    let ns = bed.namespace("diff-protobuf");
    let real = Raw::real(&bed);
    let server = FakeApiServer::start();
    let fake = Raw::fake(&server);
    let objects = [
        (
            format!("/api/v1/namespaces/{ns}/configmaps"),
            json!({"metadata": {"name": "settings", "labels": {"app": "web"}, "annotations": {"note": "hi"}},
                   "data": {"mode": "fast", "empty": ""}, "binaryData": {"blob": "AAEC"}}),
            ResourceType::of::<ConfigMap>(),
        ),
        (
            format!("/api/v1/namespaces/{ns}/pods"),
            json!({"metadata": {"name": "web", "labels": {"app": "web"}},
                   "spec": {"containers": [{"name": "c", "image": "registry.example/app:1",
                                            "ports": [{"containerPort": 8080}],
                                            "env": [{"name": "MODE", "value": "fast"}],
                                            "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}}),
            ResourceType::of::<Pod>(),
        ),
        (
            format!("/apis/coordination.k8s.io/v1/namespaces/{ns}/leases"),
            json!({"metadata": {"name": "lock"},
                   "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15,
                            "renewTime": "2026-11-28T21:00:00.123456Z", "leaseTransitions": 2}}),
            ResourceType::of::<Lease>(),
        ),
    ];
    const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";
    for (collection, body, rt) in objects {
        let name = body["metadata"]["name"].as_str().unwrap().to_owned();
        let created = real.send("POST", &collection, Some(&body));
        assert_eq!(created.status, 201, "{created:?}");
        let mut stored = created.body.clone();
        let meta = stored["metadata"].as_object_mut().unwrap();
        for key in ["uid", "resourceVersion", "creationTimestamp", "managedFields"] {
            meta.remove(key);
        }
        meta.insert("namespace".into(), json!("diff"));
        server.create_value(&rt, stored).unwrap();
        let fake_path = format!("{}/{name}", collection.replace(&ns, "diff"));
        let (f_status, f_type, _, f_bytes) = fake.get_bytes(&fake_path, PROTOBUF);
        let (r_status, r_type, _, r_bytes) = real.get_bytes(&format!("{collection}/{name}"), PROTOBUF);
        assert_eq!((f_status, f_type.as_str()), (r_status, r_type.as_str()), "{collection}");
        let (f_envelope, f_meta, f_rest) = normalised(&f_bytes);
        let (r_envelope, r_meta, r_rest) = normalised(&r_bytes);
        assert_eq!(f_envelope, r_envelope, "{collection}: the envelope's type and encoding");
        // The namespace's name differs: compare it apart.
        let ns_field = |m: &[(u64, Vec<u8>)]| m.iter().find(|(n, _)| *n == 3).map(|(_, b)| payload(b).to_vec());
        assert_eq!(ns_field(&f_meta), Some(b"diff".to_vec()));
        assert_eq!(ns_field(&r_meta), Some(ns.as_bytes().to_vec()));
        let other = |m: Vec<(u64, Vec<u8>)>| m.into_iter().filter(|(n, _)| *n != 3).collect::<BTreeMap<_, _>>();
        assert_eq!(other(f_meta), other(r_meta), "{collection}: metadata");
        assert_eq!(f_rest, r_rest, "{collection}: the object's other fields, byte for byte");
    }
}

/// Aggregated discovery, entry by entry, for every resource the fake serves: scope, singular
/// name, kind, verbs, short names, categories, and the subresources the fake serves.
#[test]
fn aggregated_discovery_matches_the_real_servers_for_the_fakes_types() {
    let Some(bed) = Bed::shared() else { return };
    const ACCEPT: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json";
    let entries = |raw: &Raw| {
        let mut out = BTreeMap::new();
        for path in ["/api", "/apis"] {
            let (status, content_type, _, body) = raw.get_bytes(path, ACCEPT);
            assert_eq!(status, 200);
            assert!(content_type.contains("as=APIGroupDiscoveryList"), "{content_type}");
            let doc: Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(doc["kind"], "APIGroupDiscoveryList");
            for group in doc["items"].as_array().unwrap() {
                let g = group["metadata"]["name"].as_str().unwrap_or_default().to_owned();
                for version in group["versions"].as_array().unwrap() {
                    let v = version["version"].as_str().unwrap().to_owned();
                    for r in version["resources"].as_array().unwrap() {
                        let sorted = |key: &str| {
                            let mut l: Vec<String> = r[key]
                                .as_array()
                                .map(|a| a.iter().map(|s| s.as_str().unwrap().to_owned()).collect())
                                .unwrap_or_default();
                            l.sort();
                            l
                        };
                        let subresources: BTreeMap<String, (Value, Value)> = r["subresources"]
                            .as_array()
                            .map(|subs| {
                                subs.iter()
                                    .map(|s| {
                                        let mut verbs = s["verbs"].clone();
                                        verbs.as_array_mut().unwrap().sort_by_key(|v| v.to_string());
                                        (
                                            s["subresource"].as_str().unwrap().to_owned(),
                                            (verbs, s["responseKind"].clone()),
                                        )
                                    })
                                    .collect()
                            })
                            .unwrap_or_default();
                        let entry = (
                            r["scope"].clone(),
                            r["singularResource"].clone(),
                            r["responseKind"].clone(),
                            sorted("verbs"),
                            sorted("shortNames"),
                            sorted("categories"),
                            subresources,
                        );
                        out.insert((g.clone(), v.clone(), r["resource"].as_str().unwrap().to_owned()), entry);
                    }
                }
            }
        }
        out
    };
    let server = FakeApiServer::start();
    let fake = entries(&Raw::fake(&server));
    let real = entries(&Raw::real(&bed));
    assert!(fake.len() >= 10, "{fake:?}");
    for (key, f) in &fake {
        let r = real.get(key).unwrap_or_else(|| panic!("{key:?}: served by the fake, not by the real server"));
        assert_eq!((&f.0, &f.1, &f.2, &f.3, &f.4, &f.5), (&r.0, &r.1, &r.2, &r.3, &r.4, &r.5), "{key:?}");
        // The real server has subresources the fake does not serve (pods/exec, pods/log, ...):
        // each one the fake lists must be the real one.
        for (sub, fs) in &f.6 {
            assert_eq!(Some(fs), r.6.get(sub), "{key:?}: subresource {sub}");
        }
    }
}

/// A watch from a version older than the watch cache holds, on a resource with a watch cache
/// (pods): both answer 200 and then one in-stream `ERROR` event, a 410 `Expired` Status, and
/// end the stream. A restarted kube-apiserver's cache starts at the version it first lists, so
/// the version of a pod made before the restart (and two writes before it) is older than it
/// holds; the fake's history is compacted past it.
#[test]
fn a_watch_older_than_the_watch_cache_gets_an_in_stream_410() {
    let Some(bed) = Bed::exclusive() else { return };
    let server = FakeApiServer::start();
    let fake = Raw::fake(&server);
    let old = server.resource_version();
    assert_eq!(fake.send("POST", "/api/v1/namespaces/diff/pods", Some(&pod_body("a"))).status, 201);
    server.compact();
    let path = |ns: &str, rv: &str| format!("/api/v1/namespaces/{ns}/pods?watch=true&resourceVersion={rv}");
    let shape = |events: &[Value], rv: &str| {
        assert_eq!(events.len(), 1, "{events:?}");
        let status = &events[0]["object"];
        let message = status["message"].as_str().unwrap_or_default();
        // "too old resource version: <asked> (<oldest held>)"
        let asked = message.strip_prefix("too old resource version: ").and_then(|m| m.split_once(" ("));
        assert!(asked.is_some_and(|(asked, _)| asked == rv), "{message}");
        (
            events[0]["type"].clone(),
            status["kind"].clone(),
            status["status"].clone(),
            status["code"].clone(),
            status["reason"].clone(),
        )
    };
    let fake_shape = shape(&fake.watch_until(&path("diff", &old), |_| false), &old);

    let ns = bed.namespace("diff-too-old");
    let real = Raw::real(&bed);
    let made = real.send("POST", &format!("/api/v1/namespaces/{ns}/pods"), Some(&pod_body("a")));
    assert_eq!(made.status, 201, "{made:?}");
    let rv = made.body["metadata"]["resourceVersion"].as_str().unwrap().to_owned();
    for name in ["b", "c"] {
        assert_eq!(real.send("POST", &format!("/api/v1/namespaces/{ns}/pods"), Some(&pod_body(name))).status, 201);
    }
    bed.script(&["stop", "apiserver"]);
    bed.script(&["start", "apiserver"]);
    // Until its pods cache has synced, the restarted server serves a watch from etcd, which
    // still holds that version (it replays the pods): the cache's answer is awaited.
    let mut events = Vec::new();
    crate::bed::until("the pods watch cache answers", || {
        events = real.watch_until(&format!("{}&timeoutSeconds=1", path(&ns, &rv)), |_| false);
        events.first().is_some_and(|e| e["type"] == "ERROR")
    });
    let real_shape = shape(&events, &rv);
    assert_eq!(fake_shape, real_shape);
    assert_eq!(real_shape.3, json!(410));
    assert_eq!(real_shape.4, json!("Expired"));
}

fn pod_body(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
           "spec": {"containers": [{"name": "c", "image": "registry.example/app:1"}]}})
}

/// A streaming list asked of a server without `WatchList`: 422 `Invalid` on `ListOptions`, one
/// `FieldValueForbidden` cause on `sendInitialEvents`; the fake refuses alike when told to
/// (`StreamingLists::Rejected`), word for word.
#[test]
fn a_streaming_list_refused_without_watch_list_matches_the_real_servers() {
    let Some(bed) = Bed::shared() else { return };
    let path = |ns: &str| {
        format!(
            "/api/v1/namespaces/{ns}/configmaps?watch=true&sendInitialEvents=true&allowWatchBookmarks=true\
             &resourceVersionMatch=NotOlderThan"
        )
    };
    let server = FakeApiServer::builder().streaming_lists(kube_watcher::testing::StreamingLists::Rejected).start();
    let fake = Raw::fake(&server).send("GET", &path("diff"), None);
    let ns = bed.namespace("diff-no-watch-list");
    let real = Raw::real_nogate(&bed).send("GET", &path(&ns), None);
    assert_eq!(real.status, 422, "{real:?}");
    assert_eq!(real.reason(), "Invalid", "{real:?}");
    assert_eq!(real.body["details"]["causes"][0]["field"], "sendInitialEvents", "{real:?}");
    assert_eq!(real.body["details"]["causes"][0]["reason"], "FieldValueForbidden", "{real:?}");
    assert_eq!((fake.status, &fake.body), (real.status, &real.body));
}
