//! Request handling for everything but watches: routing, discovery, lists (with the
//! resourceVersion table and pagination), single GETs, writes, Status bodies.

use std::collections::BTreeMap;
use std::io::{self, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};

use super::http::{Conn, Request, Response, write_response};
use super::selectors::{FieldSelector, LabelSelector};
use super::state::{ServerCore, State};
use super::store::{Deleted, Key, make_key, meta_mut};
use super::util::{base64_std, base64_url, base64_url_decode, parse_go_duration, quote_capped};
use super::{FakeError, ResourceType};

/// Bodies larger than this are gzip-compressed when the client accepts gzip.
const GZIP_THRESHOLD: usize = 128 * 1024;
/// Bodies larger than this are sent chunked.
const CHUNKED_THRESHOLD: usize = 32 * 1024;

/// Fills in short names, singular names and selectable fields of well-known built-in types.
pub(crate) fn well_known(rt: &mut ResourceType) {
    let (short, fields): (&[&str], &[&str]) = match (rt.group.as_str(), rt.plural.as_str()) {
        ("", "pods") => (
            &["po"],
            &[
                "spec.nodeName",
                "spec.restartPolicy",
                "spec.schedulerName",
                "spec.serviceAccountName",
                "spec.hostNetwork",
                "status.phase",
                "status.podIP",
                "status.nominatedNodeName",
            ],
        ),
        ("", "configmaps") => (&["cm"], &[]),
        ("", "secrets") => (&[], &["type"]),
        ("", "services") => (&["svc"], &[]),
        ("", "namespaces") => (&["ns"], &["status.phase"]),
        ("", "nodes") => (&["no"], &["spec.unschedulable"]),
        ("", "events") => (
            &["ev"],
            &[
                "involvedObject.kind",
                "involvedObject.namespace",
                "involvedObject.name",
                "involvedObject.uid",
                "involvedObject.apiVersion",
                "involvedObject.resourceVersion",
                "involvedObject.fieldPath",
                "reason",
                "reportingComponent",
                "source",
                "type",
            ],
        ),
        ("", "serviceaccounts") => (&["sa"], &[]),
        ("", "endpoints") => (&["ep"], &[]),
        ("", "persistentvolumeclaims") => (&["pvc"], &[]),
        ("", "persistentvolumes") => (&["pv"], &[]),
        ("apps", "deployments") => (&["deploy"], &[]),
        ("apps", "replicasets") => (&["rs"], &[]),
        ("apps", "statefulsets") => (&["sts"], &[]),
        ("apps", "daemonsets") => (&["ds"], &[]),
        ("batch", "cronjobs") => (&["cj"], &[]),
        ("apiextensions.k8s.io", "customresourcedefinitions") => (&["crd", "crds"], &[]),
        _ => (&[], &[]),
    };
    if rt.short_names.is_empty() {
        rt.short_names = short.iter().map(|s| s.to_string()).collect();
    }
    for f in fields {
        if !rt.selectable_fields.iter().any(|x| x == f) {
            rt.selectable_fields.push(f.to_string());
        }
    }
}

/// The types `FakeApiServer::start` registers.
pub(crate) fn default_types() -> Vec<ResourceType> {
    use k8s_openapi::api::{apps::v1 as apps, batch::v1 as batch, core::v1 as core};
    vec![
        ResourceType::of::<core::Pod>(),
        ResourceType::of::<core::ConfigMap>(),
        ResourceType::of::<core::Secret>(),
        ResourceType::of::<core::Service>(),
        ResourceType::of::<core::Namespace>(),
        ResourceType::of::<core::Node>(),
        ResourceType::of::<core::Event>(),
        ResourceType::of::<core::ServiceAccount>(),
        ResourceType::of::<core::Endpoints>(),
        ResourceType::of::<apps::Deployment>(),
        ResourceType::of::<apps::ReplicaSet>(),
        ResourceType::of::<apps::StatefulSet>(),
        ResourceType::of::<apps::DaemonSet>(),
        ResourceType::of::<batch::Job>(),
    ]
}

/// A kubeconfig for the server.
pub(crate) fn kubeconfig(url: &str, ca_pem: Option<&str>, token: Option<&str>) -> String {
    let ca = ca_pem
        .map(|pem| format!("    certificate-authority-data: {}\n", base64_std(pem.as_bytes())))
        .unwrap_or_default();
    let user = match token {
        Some(t) => format!("    token: {t}\n"),
        None => "    {}\n".to_string(),
    };
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: {url}\n{ca}contexts:\n- name: fake\n  context:\n    cluster: fake\n    user: fake\n    namespace: default\ncurrent-context: fake\nusers:\n- name: fake\n  user:\n{user}"
    )
}

/// A Status object.
pub(crate) fn status(code: u16, reason: &str, message: &str, details: Option<Value>) -> Value {
    let mut s = json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "code": code,
    });
    if !reason.is_empty() {
        s["reason"] = Value::String(reason.to_string());
    }
    if let Some(d) = details {
        s["details"] = d;
    }
    s
}

/// A Status response (with `Retry-After` when `details.retryAfterSeconds` is set).
pub(crate) fn status_response(code: u16, reason: &str, message: &str, details: Option<Value>) -> Response {
    let retry = details.as_ref().and_then(|d| d.get("retryAfterSeconds")).and_then(Value::as_u64);
    let mut resp = Response::json(code, &status(code, reason, message, details));
    if let Some(r) = retry {
        resp = resp.header("Retry-After", &r.to_string());
    }
    resp
}

pub(crate) fn bad_request(message: &str) -> Response {
    status_response(400, "BadRequest", message, None)
}

/// The 422 for invalid ListOptions, one cause per problem.
pub(crate) fn invalid_list_options(causes: &[(&str, &str, String)]) -> Response {
    let summary = causes.iter().map(|(field, _, msg)| format!("{field}: {msg}")).collect::<Vec<_>>().join(", ");
    let summary = if causes.len() > 1 { format!("[{summary}]") } else { summary };
    let causes: Vec<Value> =
        causes.iter().map(|(field, reason, msg)| json!({"reason": reason, "message": msg, "field": field})).collect();
    status_response(
        422,
        "Invalid",
        &format!("ListOptions.meta.k8s.io \"\" is invalid: {summary}"),
        Some(json!({"group": "meta.k8s.io", "kind": "ListOptions", "causes": causes})),
    )
}

/// The 504 for a resourceVersion the store has not reached.
pub(crate) fn too_large_status(wanted: &str, current: u64) -> Value {
    status(
        504,
        "Timeout",
        &format!("Timeout: Too large resource version: {wanted}, current: {current}"),
        Some(json!({
            "causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
            "retryAfterSeconds": 1
        })),
    )
}

fn error_response(err: &FakeError, rt: &ResourceType) -> Response {
    let (reason, message, details) = match err {
        FakeError::NotFound { resource, name } => (
            "NotFound",
            format!("{resource} {name:?} not found"),
            Some(json!({"name": name, "group": rt.group, "kind": rt.plural})),
        ),
        FakeError::AlreadyExists { resource, name } => (
            "AlreadyExists",
            format!("{resource} {name:?} already exists"),
            Some(json!({"name": name, "group": rt.group, "kind": rt.plural})),
        ),
        FakeError::Conflict { resource, name } => (
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {resource} {name:?}: the object has been modified; please apply your changes to the latest version and try again"
            ),
            Some(json!({"name": name, "group": rt.group, "kind": rt.plural})),
        ),
        FakeError::Invalid { message } => {
            ("Invalid", format!("{} is invalid: {message}", rt.kind), Some(json!({"group": rt.group, "kind": rt.kind})))
        }
        FakeError::Serde { message } => ("BadRequest", message.clone(), None),
    };
    status_response(err.code(), reason, &message, details)
}

/// Where a request goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Route {
    /// `/version`.
    Version,
    /// `/openapi/v3`: the index of group-version documents.
    OpenApiIndex,
    /// `/openapi/v3/api/v1` or `/openapi/v3/apis/{group}/{version}`.
    OpenApiDoc(String, String),
    /// `/api`.
    Api,
    /// `/apis`.
    Apis,
    /// `/apis/{group}`.
    ApiGroup(String),
    /// `/api/v1` or `/apis/{group}/{version}`.
    Resources(String, String),
    /// `/healthz`, `/readyz`, `/livez`.
    Health,
    /// A collection of type `idx`, in one namespace or all.
    Collection { idx: usize, ns: Option<String>, watch_path: bool },
    /// One object (and maybe a subresource).
    Object { idx: usize, ns: Option<String>, name: String, sub: Option<String>, watch_path: bool },
    /// Inside `/api(s)` but not served: JSON Status 404.
    NotFoundJson,
    /// Outside `/api(s)`: text 404.
    NotFoundText,
}

/// Works out the route of a path against the registered types.
pub(crate) fn route(state: &State, path: &str) -> Route {
    let segs: Vec<String> =
        path.split('/').filter(|s| !s.is_empty()).map(|s| super::util::percent_decode(s, false)).collect();
    let segs: Vec<&str> = segs.iter().map(String::as_str).collect();
    let (group, version, rest) = match segs.as_slice() {
        ["version"] => return Route::Version,
        ["openapi", "v3"] => return Route::OpenApiIndex,
        ["openapi", "v3", "api", v] => return Route::OpenApiDoc(String::new(), v.to_string()),
        ["openapi", "v3", "apis", g, v] => return Route::OpenApiDoc(g.to_string(), v.to_string()),
        ["healthz" | "readyz" | "livez", ..] => return Route::Health,
        ["api"] => return Route::Api,
        ["apis"] => return Route::Apis,
        ["apis", g] => {
            return if state.store.types.iter().any(|t| t.rt.group == *g) {
                Route::ApiGroup(g.to_string())
            } else {
                Route::NotFoundJson
            };
        }
        ["api", v, rest @ ..] => ("", *v, rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return Route::NotFoundText,
    };
    let served = state.store.types.iter().any(|t| t.rt.group == group && t.rt.version == version);
    if !served {
        return Route::NotFoundJson;
    }
    let (watch_path, rest) = match rest {
        ["watch", rest @ ..] => (true, rest),
        _ => (false, rest),
    };
    let find = |plural: &str| state.store.find(group, version, plural);
    let namespaced = |idx: usize| state.store.types[idx].rt.namespaced;
    let object = |idx: usize, ns: Option<&str>, name: &str, sub: Option<&str>| Route::Object {
        idx,
        ns: ns.map(str::to_string),
        name: name.to_string(),
        sub: sub.map(str::to_string),
        watch_path,
    };
    match rest {
        [] if !watch_path => Route::Resources(group.to_string(), version.to_string()),
        [res] => match find(res) {
            Some(idx) => Route::Collection { idx, ns: None, watch_path },
            None => Route::NotFoundJson,
        },
        [res, name] => match find(res) {
            Some(idx) if !namespaced(idx) => object(idx, None, name, None),
            _ => Route::NotFoundJson,
        },
        ["namespaces", ns, res] => match find(res) {
            Some(idx) if namespaced(idx) => Route::Collection { idx, ns: Some(ns.to_string()), watch_path },
            _ => match find("namespaces") {
                Some(idx) if *res == "status" || *res == "finalize" => object(idx, None, ns, Some(res)),
                _ => Route::NotFoundJson,
            },
        },
        [res, name, sub] => match find(res) {
            Some(idx) if !namespaced(idx) => object(idx, None, name, Some(sub)),
            _ => Route::NotFoundJson,
        },
        ["namespaces", ns, res, name] => match find(res) {
            Some(idx) if namespaced(idx) => object(idx, Some(ns), name, None),
            _ => Route::NotFoundJson,
        },
        ["namespaces", ns, res, name, sub] => match find(res) {
            Some(idx) if namespaced(idx) => object(idx, Some(ns), name, Some(sub)),
            _ => Route::NotFoundJson,
        },
        _ => Route::NotFoundJson,
    }
}

/// Which representation the client asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Repr {
    /// Full objects.
    Full,
    /// `PartialObjectMetadata` (watch, get) or `PartialObjectMetadataList` (list).
    Metadata,
}

/// Negotiates the representation from `Accept`; `None` means 406.
pub(crate) fn negotiate(req: &Request, list: bool) -> Option<Repr> {
    let Some(accept) = req.header("accept") else {
        return Some(Repr::Full);
    };
    if accept.trim().is_empty() {
        return Some(Repr::Full);
    }
    for range in accept.split(',') {
        let mut parts = range.split(';').map(str::trim);
        let media = parts.next().unwrap_or_default().to_ascii_lowercase();
        let params: Vec<(String, String)> = parts
            .filter_map(|p| p.split_once('='))
            .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().trim_matches('"').to_string()))
            .collect();
        let param = |k: &str| params.iter().find(|(pk, _)| pk == k).map(|(_, v)| v.as_str());
        if !(media == "application/json" || media == "*/*" || media == "application/*") {
            continue;
        }
        match param("as") {
            None => return Some(Repr::Full),
            Some(kind) => {
                if param("g") != Some("meta.k8s.io") || param("v") != Some("v1") {
                    continue;
                }
                match (kind, list) {
                    ("PartialObjectMetadataList", true) => return Some(Repr::Metadata),
                    ("PartialObjectMetadata", false) => return Some(Repr::Metadata),
                    // A watch asking for the list form falls back to full objects.
                    ("PartialObjectMetadataList", false) if req.flag("watch") == Some(true) => {
                        return Some(Repr::Full);
                    }
                    _ => continue,
                }
            }
        }
    }
    None
}

/// An object as `PartialObjectMetadata`.
pub(crate) fn partial(obj: &Value) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj.get("metadata").cloned().unwrap_or_else(|| json!({})),
    })
}

/// Namespace and selector filter for lists and watches.
#[derive(Debug, Clone)]
pub(crate) struct Filter {
    ns: Option<String>,
    name: Option<String>,
    labels: LabelSelector,
    fields: FieldSelector,
}

impl Filter {
    /// Parses `labelSelector`/`fieldSelector`; `Err` is the 400 response.
    pub(crate) fn parse(
        req: &Request,
        rt: &ResourceType,
        ns: Option<&str>,
        name: Option<&str>,
    ) -> Result<Filter, Response> {
        let labels =
            LabelSelector::parse(req.param("labelSelector").unwrap_or_default()).map_err(|e| bad_request(&e))?;
        let mut supported: Vec<&str> = vec!["metadata.name"];
        if rt.namespaced {
            supported.push("metadata.namespace");
        }
        supported.extend(rt.selectable_fields.iter().map(String::as_str));
        let fields = FieldSelector::parse(req.param("fieldSelector").unwrap_or_default(), &supported)
            .map_err(|e| bad_request(&e))?;
        Ok(Filter { ns: ns.map(str::to_string), name: name.map(str::to_string), labels, fields })
    }

    /// Whether selectors were given (then `remainingItemCount` is omitted).
    pub(crate) fn has_selectors(&self) -> bool {
        !self.labels.is_empty() || !self.fields.is_empty()
    }

    /// Whether an object passes the namespace, name and selectors.
    pub(crate) fn matches(&self, obj: &Value) -> bool {
        let meta_ns = obj.pointer("/metadata/namespace").and_then(Value::as_str).unwrap_or_default();
        let meta_name = obj.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default();
        self.ns.as_deref().is_none_or(|ns| ns == meta_ns)
            && self.name.as_deref().is_none_or(|n| n == meta_name)
            && self.labels.matches(obj)
            && self.fields.matches(obj)
    }
}

/// A decoded continue token.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ContinueToken {
    /// The snapshot revision, or -1 for an inconsistent continuation.
    rv: i64,
    /// Items with keys `>=` this are on the next page.
    start: String,
}

fn encode_continue(rv: i64, start: &str) -> String {
    let body = json!({"v": "meta.k8s.io/v1", "rv": rv, "start": start});
    base64_url(body.to_string().as_bytes())
}

fn decode_continue(token: &str) -> Result<ContinueToken, String> {
    let bytes = base64_url_decode(token).ok_or_else(|| "illegal base64 data".to_string())?;
    let v: Value = serde_json::from_slice(&bytes).map_err(|e| e.to_string())?;
    if v.get("v").and_then(Value::as_str) != Some("meta.k8s.io/v1") {
        return Err("continue key is not supported".into());
    }
    let rv = v.get("rv").and_then(Value::as_i64).ok_or("continue key has no resource version")?;
    let start = v.get("start").and_then(Value::as_str).ok_or("continue key has no start")?;
    if start.is_empty() || (rv < 1 && rv != -1) {
        return Err("continue key is not valid".into());
    }
    Ok(ContinueToken { rv, start: start.to_string() })
}

/// Writes a response; large bodies are gzipped (if accepted) and chunked.
pub(crate) fn send(conn: &mut Conn, req: &Request, mut resp: Response) -> io::Result<()> {
    let gzip_ok = req.header("accept-encoding").is_some_and(|e| e.split(',').any(|p| p.trim().starts_with("gzip")));
    if gzip_ok && resp.status == 200 && resp.body.len() > GZIP_THRESHOLD {
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        if enc.write_all(&resp.body).is_ok()
            && let Ok(gz) = enc.finish()
        {
            resp.body = gz;
            resp.headers.push(("Content-Encoding".into(), "gzip".into()));
            resp.headers.push(("Vary".into(), "Accept-Encoding".into()));
        }
    }
    if resp.body.len() > CHUNKED_THRESHOLD {
        resp.chunked = true;
    }
    write_response(conn, &resp, req.method == "HEAD")
}

/// Handles discovery, lists, GETs and writes (watches go to `watch::serve`).
pub(crate) fn handle(shared: &ServerCore, req: &Request, route: &Route) -> Response {
    match route {
        Route::OpenApiIndex => openapi_index(shared),
        Route::OpenApiDoc(g, v) => openapi_doc(shared, g, v),
        Route::Version => Response::json(
            200,
            &json!({
                "major": "1", "minor": "34", "gitVersion": "v1.34.0-fake", "gitCommit": "0000000000000000000000000000000000000000",
                "gitTreeState": "clean", "buildDate": "2025-08-27T00:00:00Z", "goVersion": "go1.24.6",
                "compiler": "gc", "platform": "linux/amd64"
            }),
        ),
        Route::Health => Response::text(200, "ok"),
        Route::Api => Response::json(
            200,
            &json!({"kind": "APIVersions", "versions": ["v1"],
                    "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}]}),
        ),
        Route::Apis => api_groups(shared),
        Route::ApiGroup(g) => api_group(shared, g),
        Route::Resources(g, v) => api_resources(shared, g, v),
        Route::NotFoundJson => {
            status_response(404, "NotFound", "the server could not find the requested resource", Some(json!({})))
        }
        Route::NotFoundText => Response::text(404, "404 page not found\n"),
        Route::Collection { idx, ns, .. } => match req.method.as_str() {
            "GET" | "HEAD" => list(shared, req, *idx, ns.as_deref()),
            "POST" => create(shared, req, *idx, ns.as_deref()),
            "DELETE" => delete_collection(shared, req, *idx, ns.as_deref()),
            _ => method_not_allowed(),
        },
        Route::Object { idx, ns, name, sub, .. } => {
            if sub.as_deref().is_some_and(|s| s != "status") {
                return status_response(
                    404,
                    "NotFound",
                    "the server could not find the requested resource",
                    Some(json!({})),
                );
            }
            let key = make_key(ns.as_deref().unwrap_or_default(), name);
            match req.method.as_str() {
                "GET" | "HEAD" => get(shared, req, *idx, &key, name),
                "PUT" => update(shared, req, *idx, ns.as_deref(), name, sub.is_some(), None),
                "PATCH" => patch(shared, req, *idx, ns.as_deref(), &key, name, sub.is_some()),
                "DELETE" => delete(shared, req, *idx, &key),
                _ => method_not_allowed(),
            }
        }
    }
}

/// `/openapi/v3`: one path per group-version.
fn openapi_index(shared: &ServerCore) -> Response {
    let state = shared.lock();
    let mut paths = Map::new();
    for t in &state.store.types {
        let key = if t.rt.group.is_empty() {
            format!("api/{}", t.rt.version)
        } else {
            format!("apis/{}/{}", t.rt.group, t.rt.version)
        };
        // The hash only changes when the set of types changes (clients cache by it).
        let url = format!("/openapi/v3/{key}?hash={}", state.store.types.len());
        paths.insert(key, json!({"serverRelativeURL": url}));
    }
    Response::json(200, &json!({"paths": paths}))
}

/// `/apis`: every group and its versions.
fn api_groups(shared: &ServerCore) -> Response {
    let state = shared.lock();
    let mut groups: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for t in &state.store.types {
        if !t.rt.group.is_empty() {
            let versions = groups.entry(t.rt.group.clone()).or_default();
            if !versions.contains(&t.rt.version) {
                versions.push(t.rt.version.clone());
            }
        }
    }
    let groups: Vec<Value> = groups.iter().map(|(g, vs)| group_json(g, vs)).collect();
    Response::json(200, &json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}))
}

/// `/apis/<group>`.
fn api_group(shared: &ServerCore, g: &str) -> Response {
    let state = shared.lock();
    let mut versions: Vec<String> = Vec::new();
    for t in state.store.types.iter().filter(|t| t.rt.group == g) {
        if !versions.contains(&t.rt.version) {
            versions.push(t.rt.version.clone());
        }
    }
    let mut body = group_json(g, &versions);
    body["kind"] = json!("APIGroup");
    body["apiVersion"] = json!("v1");
    Response::json(200, &body)
}

/// `/api/v1` or `/apis/<group>/<version>`: the resources of one group-version.
fn api_resources(shared: &ServerCore, g: &str, v: &str) -> Response {
    let state = shared.lock();
    let mut resources = Vec::new();
    for t in state.store.types.iter().filter(|t| t.rt.group == g && t.rt.version == v) {
        let rt = &t.rt;
        let singular = rt.singular.clone().unwrap_or_else(|| rt.kind.to_ascii_lowercase());
        let mut r = json!({
            "name": rt.plural, "singularName": singular, "namespaced": rt.namespaced, "kind": rt.kind,
            "verbs": ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"],
        });
        if !rt.short_names.is_empty() {
            r["shortNames"] = json!(rt.short_names);
        }
        if rt.built_in && matches!(rt.plural.as_str(), "pods" | "deployments" | "services") {
            r["categories"] = json!(["all"]);
        }
        resources.push(r);
        resources.push(json!({
            "name": format!("{}/status", rt.plural), "singularName": "", "namespaced": rt.namespaced,
            "kind": rt.kind, "verbs": ["get", "patch", "update"],
        }));
    }
    let gv = if g.is_empty() { v.to_owned() } else { format!("{g}/{v}") };
    Response::json(
        200,
        &json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}),
    )
}

/// A minimal OpenAPI v3 document for one group-version: just enough for kubectl to see that
/// the server validates fields itself (`fieldValidation` on every PATCH), so it skips
/// client-side schema validation.
fn openapi_doc(shared: &ServerCore, group: &str, version: &str) -> Response {
    let state = shared.lock();
    let mut paths = Map::new();
    let types: Vec<&ResourceType> =
        state.store.types.iter().map(|t| &t.rt).filter(|rt| rt.group == group && rt.version == version).collect();
    if types.is_empty() {
        return Response::text(404, "404 page not found\n");
    }
    let params = json!([
        {"name": "dryRun", "in": "query", "schema": {"type": "string"}},
        {"name": "fieldManager", "in": "query", "schema": {"type": "string"}},
        {"name": "fieldValidation", "in": "query", "schema": {"type": "string"}},
    ]);
    for rt in types {
        let base = if group.is_empty() { format!("/api/{version}") } else { format!("/apis/{group}/{version}") };
        let path = if rt.namespaced {
            format!("{base}/namespaces/{{namespace}}/{}/{{name}}", rt.plural)
        } else {
            format!("{base}/{}/{{name}}", rt.plural)
        };
        let gvk = json!({"group": rt.group, "version": rt.version, "kind": rt.kind});
        let op = |id: &str| {
            json!({"operationId": format!("{id}{}", rt.kind), "parameters": params,
                   "responses": {"200": {"description": "OK"}},
                   "x-kubernetes-action": id, "x-kubernetes-group-version-kind": gvk})
        };
        paths.insert(path, json!({"get": op("get"), "put": op("put"), "patch": op("patch"), "delete": op("delete")}));
        let collection = if rt.namespaced {
            format!("{base}/namespaces/{{namespace}}/{}", rt.plural)
        } else {
            format!("{base}/{}", rt.plural)
        };
        paths.insert(collection, json!({"get": op("list"), "post": op("post")}));
    }
    Response::json(
        200,
        &json!({"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": "v1.34.0"},
                "paths": paths, "components": {"schemas": {}}}),
    )
}

fn group_json(group: &str, versions: &[String]) -> Value {
    let vs: Vec<Value> =
        versions.iter().map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v})).collect();
    json!({"name": group, "versions": vs, "preferredVersion": vs.first().cloned().unwrap_or(Value::Null)})
}

fn method_not_allowed() -> Response {
    status_response(
        405,
        "MethodNotAllowed",
        "the server does not allow this method on the requested resource",
        Some(json!({})),
    )
}

/// Parsed `resourceVersion` of a list or watch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Rv {
    /// Absent or empty.
    Unset,
    /// `"0"`.
    Zero,
    /// A specific revision.
    At(u64),
}

/// Parses `resourceVersion`; `Err` is the 400 response.
pub(crate) fn parse_rv(req: &Request) -> Result<Rv, Response> {
    match req.param("resourceVersion").unwrap_or_default() {
        "" => Ok(Rv::Unset),
        "0" => Ok(Rv::Zero),
        other => match other.parse::<u64>() {
            Ok(n) if !other.starts_with('0') && !other.starts_with('+') => Ok(Rv::At(n)),
            _ => Err(bad_request(&format!("invalid resource version: {}", quote_capped(other)))),
        },
    }
}

/// Waits (briefly) until the store reaches `rv`; `false` if it did not.
pub(crate) fn wait_for_revision(shared: &ServerCore, rv: u64) -> bool {
    let deadline = Instant::now() + shared.settings.too_large_wait;
    let mut state = shared.lock();
    while state.store.revision < rv {
        let now = Instant::now();
        if now >= deadline || shared.is_shutdown() {
            return false;
        }
        state = shared.wait(state, deadline - now);
    }
    true
}

fn list(shared: &ServerCore, req: &Request, idx: usize, ns: Option<&str>) -> Response {
    let limit = match list_options(req) {
        Ok(limit) => limit,
        Err(resp) => return resp,
    };
    let rt = shared.lock().store.types[idx].rt.clone();
    let filter = match Filter::parse(req, &rt, ns, None) {
        Ok(f) => f,
        Err(resp) => return resp,
    };
    let Some(repr) = negotiate(req, true) else {
        return status_response(
            406,
            "NotAcceptable",
            "only the following media types are accepted: application/json, application/yaml, application/vnd.kubernetes.protobuf",
            None,
        );
    };
    let rv = match parse_rv(req) {
        Ok(rv) => rv,
        Err(resp) => return resp,
    };
    let (at, limit) = match list_at(shared, req, rv, limit) {
        Ok(at) => at,
        Err(resp) => return resp,
    };
    let state = shared.lock();
    let (snap_rv, start, consistent) = match at {
        At::Current => (state.store.revision, None, true),
        At::Exact(n) => (n, None, true),
        At::Continue(token) if token.rv == -1 => (state.store.revision, Some(token.start), false),
        At::Continue(token) => {
            let rv = token.rv as u64;
            // A token expires when etcd would have compacted its revision: once history is
            // trimmed or compacted past it, or `continue_ttl` after a newer write superseded it
            // (etcd's compactor runs every 5 minutes and always keeps the latest revision, so a
            // token at the current revision never expires).
            let ttl = shared.settings.continue_ttl;
            let expired = rv < state.store.types[idx].horizon
                || rv > state.store.revision
                || state.store.superseded_at(rv).is_some_and(|t| t.elapsed() >= ttl);
            if expired {
                let inconsistent = encode_continue(-1, &token.start);
                let mut body = status(
                    410,
                    "Expired",
                    "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.",
                    None,
                );
                body["metadata"] = json!({"continue": inconsistent});
                return Response::json(410, &body);
            }
            (rv, Some(token.start), true)
        }
    };
    let snapshot = match state.store.snapshot(idx, snap_rv) {
        Ok(s) => s,
        Err(_) => {
            return status_response(410, "Expired", "The resourceVersion for the provided list is too old.", None);
        }
    };
    let page = paginate(&snapshot, start.as_deref(), limit, &filter);
    drop(state);
    list_body(&rt, repr, &filter, &page, snap_rv, consistent)
}

/// Where a list reads: the current state, an exact revision, or a continue token's snapshot.
enum At {
    Current,
    Exact(u64),
    Continue(ContinueToken),
}

/// Checks a list's options as the API server does: decoding errors first (400), then
/// `ListOptions` validation (422). Returns the page limit.
fn list_options(req: &Request) -> Result<Option<usize>, Response> {
    let limit = match req.param("limit") {
        None | Some("") => None,
        Some(l) => match l.parse::<i64>() {
            Ok(n) if n > 0 => Some(n as usize),
            Ok(_) => None,
            Err(_) => return Err(bad_request(&format!("invalid value for limit: {}", quote_capped(l)))),
        },
    };
    if let Some(t) = req.param("timeoutSeconds")
        && t.parse::<i64>().is_err()
    {
        return Err(bad_request(&format!("invalid value for timeoutSeconds: {}", quote_capped(t))));
    }
    if let Some(t) = req.param("timeout")
        && !t.is_empty()
        && parse_go_duration(t).is_none()
    {
        return Err(bad_request(&format!("invalid timeout: time: invalid duration {}", quote_capped(t))));
    }
    let rv_text = req.param("resourceVersion").unwrap_or_default();
    let rvm = req.param("resourceVersionMatch").unwrap_or_default();
    let cont = req.param("continue").unwrap_or_default();
    let mut causes: Vec<(&str, &str, String)> = Vec::new();
    if req.param("sendInitialEvents").is_some() {
        causes.push((
            "sendInitialEvents",
            "FieldValueForbidden",
            "Forbidden: sendInitialEvents is forbidden for list".into(),
        ));
    }
    match rvm {
        "" => {}
        "NotOlderThan" | "Exact" => {
            if rv_text.is_empty() {
                causes.push((
                    "resourceVersionMatch",
                    "FieldValueForbidden",
                    "Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided".into(),
                ));
            }
            if !cont.is_empty() {
                causes.push((
                    "resourceVersionMatch",
                    "FieldValueForbidden",
                    "Forbidden: resourceVersionMatch is forbidden when continue is provided".into(),
                ));
            }
            if rvm == "Exact" && rv_text == "0" {
                causes.push((
                    "resourceVersionMatch",
                    "FieldValueForbidden",
                    "Forbidden: resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"".into(),
                ));
            }
        }
        other => causes.push((
            "resourceVersionMatch",
            "FieldValueNotSupported",
            format!("Unsupported value: {}: supported values: \"Exact\", \"NotOlderThan\"", quote_capped(other)),
        )),
    }
    if !causes.is_empty() {
        return Err(invalid_list_options(&causes));
    }
    Ok(limit)
}

/// Where the list reads, waiting (briefly) for a revision the server has not reached; the limit
/// to apply (the watch cache ignores it for resourceVersion "0").
fn list_at(shared: &ServerCore, req: &Request, rv: Rv, limit: Option<usize>) -> Result<(At, Option<usize>), Response> {
    let rvm = req.param("resourceVersionMatch").unwrap_or_default();
    let cont = req.param("continue").unwrap_or_default();
    let mut limit = limit;
    let at = if !cont.is_empty() {
        let token = match decode_continue(cont) {
            Ok(t) => t,
            Err(e) => return Err(bad_request(&format!("invalid continue token: {e}"))),
        };
        if !matches!(rv, Rv::Unset | Rv::Zero) {
            return Err(bad_request("specifying resource version is not allowed when using continue"));
        }
        At::Continue(token)
    } else {
        match (rv, rvm) {
            (Rv::Unset, _) => At::Current,
            (Rv::Zero, _) => {
                if shared.settings.watch_cache_ignores_limit {
                    limit = None;
                }
                At::Current
            }
            (Rv::At(n), "Exact") => At::Exact(n),
            (Rv::At(n), "") if limit.is_some() => At::Exact(n),
            (Rv::At(n), _) => {
                if !wait_for_revision(shared, n) {
                    let current = shared.lock().store.revision;
                    return Err(too_large(&n.to_string(), current));
                }
                At::Current
            }
        }
    };
    if let At::Exact(n) = &at
        && !wait_for_revision(shared, *n)
    {
        let current = shared.lock().store.revision;
        return Err(too_large(&n.to_string(), current));
    }
    Ok((at, limit))
}

/// The list answer for one page.
fn list_body(rt: &ResourceType, repr: Repr, filter: &Filter, page: &Page, snap_rv: u64, consistent: bool) -> Response {
    let mut metadata = Map::new();
    metadata.insert("resourceVersion".into(), json!(snap_rv.to_string()));
    if let Some(next) = &page.next {
        metadata.insert("continue".into(), json!(encode_continue(if consistent { snap_rv as i64 } else { -1 }, next)));
        if !filter.has_selectors() {
            metadata.insert("remainingItemCount".into(), json!(page.remaining));
        }
    }
    let items: Vec<Value> = page
        .items
        .iter()
        .map(|o| match repr {
            Repr::Metadata => partial(o),
            Repr::Full if rt.built_in => {
                let mut item = (**o).clone();
                if let Some(m) = item.as_object_mut() {
                    m.remove("kind");
                    m.remove("apiVersion");
                }
                item
            }
            Repr::Full => (**o).clone(),
        })
        .collect();
    let (kind, api_version) = match repr {
        Repr::Metadata => ("PartialObjectMetadataList".to_string(), "meta.k8s.io/v1".to_string()),
        Repr::Full => (rt.effective_list_kind(), rt.api_version()),
    };
    let body = json!({"kind": kind, "apiVersion": api_version, "metadata": metadata, "items": items});
    Response::json(200, &body)
}

fn too_large(wanted: &str, current: u64) -> Response {
    Response::json(504, &too_large_status(wanted, current)).header("Retry-After", "1")
}

/// One page of a list.
struct Page {
    items: Vec<Arc<Value>>,
    /// Start key of the next page.
    next: Option<String>,
    /// Items after this page (unfiltered).
    remaining: usize,
}

fn paginate(snapshot: &BTreeMap<Key, Arc<Value>>, start: Option<&str>, limit: Option<usize>, filter: &Filter) -> Page {
    let iter: Box<dyn Iterator<Item = (&Key, &Arc<Value>)>> = match start {
        Some(s) => Box::new(snapshot.range::<str, _>((std::ops::Bound::Included(s), std::ops::Bound::Unbounded))),
        None => Box::new(snapshot.iter()),
    };
    let mut items = Vec::new();
    let mut last_key: Option<&Key> = None;
    let mut iter = iter.peekable();
    for (key, obj) in iter.by_ref() {
        if filter.matches(obj) {
            items.push(obj.clone());
            last_key = Some(key);
            if limit.is_some_and(|l| items.len() >= l) {
                break;
            }
        }
    }
    // More pages exist only if some later object would match.
    let rest: Vec<_> = iter.collect();
    let more = limit.is_some() && rest.iter().any(|(_, o)| filter.matches(o));
    Page { items, next: if more { last_key.map(|k| format!("{k}\u{0}")) } else { None }, remaining: rest.len() }
}

fn get(shared: &ServerCore, req: &Request, idx: usize, key: &str, name: &str) -> Response {
    let Some(repr) = negotiate(req, false) else {
        return status_response(
            406,
            "NotAcceptable",
            "only the following media types are accepted: application/json",
            None,
        );
    };
    let state = shared.lock();
    let rt = state.store.types[idx].rt.clone();
    match state.store.types[idx].objects.get(key) {
        Some(obj) => Response::json(200, &if repr == Repr::Metadata { partial(obj) } else { (**obj).clone() }),
        None => error_response(&FakeError::NotFound { resource: rt.resource_name(), name: name.to_string() }, &rt),
    }
}

fn parse_body(req: &Request) -> Result<Value, Response> {
    let ct = req.header("content-type").unwrap_or("application/json");
    if ct.contains("yaml") && !ct.contains("apply-patch") {
        return Err(status_response(
            415,
            "UnsupportedMediaType",
            &format!(
                "the body of the request was in an unknown format - accepted media types include: application/json; got {ct}"
            ),
            None,
        ));
    }
    serde_json::from_slice(&req.body)
        .map_err(|e| bad_request(&format!("the body of the request was in an unknown format: {e}")))
}

fn create(shared: &ServerCore, req: &Request, idx: usize, ns: Option<&str>) -> Response {
    let obj = match parse_body(req) {
        Ok(v) => v,
        Err(r) => return r,
    };
    let mut state = shared.lock();
    let rt = state.store.types[idx].rt.clone();
    if req.param("dryRun").is_some() {
        return Response::json(201, &obj);
    }
    let result = state.store.create(idx, obj, ns);
    drop(state);
    shared.notify();
    match result {
        Ok(obj) => Response::json(201, &obj),
        Err(e) => error_response(&e, &rt),
    }
}

fn update(
    shared: &ServerCore,
    req: &Request,
    idx: usize,
    ns: Option<&str>,
    name: &str,
    status_only: bool,
    body: Option<Value>,
) -> Response {
    let mut obj = match body {
        Some(b) => b,
        None => match parse_body(req) {
            Ok(v) => v,
            Err(r) => return r,
        },
    };
    let mut state = shared.lock();
    let rt = state.store.types[idx].rt.clone();
    let body_name = obj.pointer("/metadata/name").and_then(Value::as_str).unwrap_or(name);
    if body_name != name {
        return bad_request("the name of the object does not match the name on the URL");
    }
    meta_mut(&mut obj).insert("name".into(), json!(name));
    if status_only {
        let key = make_key(ns.unwrap_or_default(), name);
        let Some(current) = state.store.types[idx].objects.get(&key).cloned() else {
            return error_response(&FakeError::NotFound { resource: rt.resource_name(), name: name.to_string() }, &rt);
        };
        let mut merged = (*current).clone();
        merged["status"] = obj.get("status").cloned().unwrap_or(Value::Null);
        if let Some(rv) = obj.pointer("/metadata/resourceVersion") {
            meta_mut(&mut merged).insert("resourceVersion".into(), rv.clone());
        }
        obj = merged;
    }
    let result = state.store.replace(idx, obj, ns);
    drop(state);
    shared.notify();
    match result {
        Ok(obj) => Response::json(200, &obj),
        Err(e) => error_response(&e, &rt),
    }
}

/// RFC 7386 merge patch, plus the parts of strategic merge patch kubectl relies on: `$`
/// directives are dropped and lists of named objects are merged by `name`.
fn merge_patch(target: &mut Value, patch: &Value, strategic: bool) {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = json!({});
    }
    let Value::Object(t) = target else { return };
    for (k, v) in p {
        if strategic && k.starts_with('$') {
            continue;
        }
        if v.is_null() {
            t.remove(k);
            continue;
        }
        match (t.get_mut(k), v) {
            (Some(Value::Array(old)), Value::Array(new)) if strategic && all_named(old) && all_named(new) => {
                for item in new {
                    let name = item.get("name").cloned();
                    let delete = item.get("$patch").and_then(Value::as_str) == Some("delete");
                    match old.iter().position(|o| o.get("name") == name.as_ref()) {
                        Some(i) if delete => {
                            old.remove(i);
                        }
                        Some(i) => merge_patch(&mut old[i], item, true),
                        None if delete => {}
                        None => {
                            let mut fresh = json!({});
                            merge_patch(&mut fresh, item, true);
                            old.push(fresh);
                        }
                    }
                }
            }
            (Some(existing), _) if v.is_object() => merge_patch(existing, v, strategic),
            _ => {
                let mut fresh = Value::Null;
                merge_patch(&mut fresh, v, strategic);
                t.insert(k.clone(), fresh);
            }
        }
    }
}

fn all_named(items: &[Value]) -> bool {
    items.iter().all(|i| i.get("name").is_some_and(Value::is_string))
}

fn patch(
    shared: &ServerCore,
    req: &Request,
    idx: usize,
    ns: Option<&str>,
    key: &str,
    name: &str,
    status_only: bool,
) -> Response {
    let ct = req.header("content-type").unwrap_or_default().to_ascii_lowercase();
    let strategic = ct.starts_with("application/strategic-merge-patch+json");
    if !(strategic || ct.starts_with("application/merge-patch+json")) {
        return status_response(
            415,
            "UnsupportedMediaType",
            &format!(
                "the body of the request was in an unknown format - accepted media types include: application/merge-patch+json, application/strategic-merge-patch+json; got {ct}"
            ),
            None,
        );
    }
    let patch: Value = match serde_json::from_slice(&req.body) {
        Ok(v) => v,
        Err(e) => return bad_request(&format!("error decoding patch: {e}")),
    };
    let state = shared.lock();
    let rt = state.store.types[idx].rt.clone();
    let Some(current) = state.store.types[idx].objects.get(key).cloned() else {
        return error_response(&FakeError::NotFound { resource: rt.resource_name(), name: name.to_string() }, &rt);
    };
    drop(state);
    let mut obj = (*current).clone();
    merge_patch(&mut obj, &patch, strategic);
    update(shared, req, idx, ns, name, status_only, Some(obj))
}

fn delete(shared: &ServerCore, req: &Request, idx: usize, key: &str) -> Response {
    let opts: Value = serde_json::from_slice(&req.body).unwrap_or(Value::Null);
    let mut state = shared.lock();
    let rt = state.store.types[idx].rt.clone();
    if let (Some(pre), Some(current)) = (opts.get("preconditions"), state.store.types[idx].objects.get(key)) {
        for field in ["uid", "resourceVersion"] {
            if let Some(want) = pre.get(field).and_then(Value::as_str) {
                let have = current.pointer(&format!("/metadata/{field}")).and_then(Value::as_str);
                if have != Some(want) {
                    let name = super::store::key_name(key).to_string();
                    return error_response(&FakeError::Conflict { resource: rt.resource_name(), name }, &rt);
                }
            }
        }
    }
    let result = state.store.delete(idx, &key.to_string());
    drop(state);
    shared.notify();
    match result {
        Ok(Deleted::Pending(obj)) => Response::json(200, &obj),
        Ok(Deleted::Gone(obj)) if !rt.built_in => Response::json(200, &obj),
        Ok(Deleted::Gone(obj)) => Response::json(
            200,
            &json!({
                "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                "details": {"name": obj.pointer("/metadata/name"), "group": rt.group, "kind": rt.plural,
                            "uid": obj.pointer("/metadata/uid")}
            }),
        ),
        Err(e) => error_response(&e, &rt),
    }
}

fn delete_collection(shared: &ServerCore, req: &Request, idx: usize, ns: Option<&str>) -> Response {
    let mut state = shared.lock();
    let rt = state.store.types[idx].rt.clone();
    let filter = match Filter::parse(req, &rt, ns, None) {
        Ok(f) => f,
        Err(r) => return r,
    };
    let keys: Vec<Key> =
        state.store.types[idx].objects.iter().filter(|(_, o)| filter.matches(o)).map(|(k, _)| k.clone()).collect();
    let mut items = Vec::new();
    for k in keys {
        if let Ok(Deleted::Gone(o) | Deleted::Pending(o)) = state.store.delete(idx, &k) {
            items.push((*o).clone());
        }
    }
    let rv = state.store.revision;
    drop(state);
    shared.notify();
    Response::json(
        200,
        &json!({"kind": rt.effective_list_kind(), "apiVersion": rt.api_version(),
                "metadata": {"resourceVersion": rv.to_string()}, "items": items}),
    )
}

/// How long the watch should last given `timeoutSeconds`.
pub(crate) fn watch_duration(shared: &ServerCore, req: &Request, state: &mut State) -> Result<Duration, Response> {
    let max = shared.settings.max_watch_timeout;
    match req.param("timeoutSeconds") {
        Some(t) if !t.is_empty() => match t.parse::<i64>() {
            Ok(n) if n > 0 => Ok(Duration::from_secs(n as u64).min(max)),
            Ok(_) => Ok(random_timeout(max, state)),
            Err(_) => Err(bad_request(&format!("invalid value for timeoutSeconds: {}", quote_capped(t)))),
        },
        _ => Ok(random_timeout(max, state)),
    }
}

fn random_timeout(max: Duration, state: &mut State) -> Duration {
    let half = max / 2;
    let extra = state.rng.below(half.as_millis().max(1) as u64);
    half + Duration::from_millis(extra)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continue_tokens_round_trip_and_reject_garbage() {
        let t = encode_continue(42, "ns/a\u{0}");
        assert_eq!(decode_continue(&t), Ok(ContinueToken { rv: 42, start: "ns/a\u{0}".into() }));
        assert!(decode_continue("garbage!").is_err());
        assert!(decode_continue(&base64_url(b"{\"v\":\"x\"}")).is_err());
    }

    #[test]
    fn strategic_patches_merge_named_lists() {
        let mut obj = json!({"spec": {"containers": [{"name": "a", "image": "1", "ports": [1]}, {"name": "b"}]}});
        let patch = json!({"spec": {"$setElementOrder/containers": [{"name": "a"}], "containers": [{"name": "a", "image": "2"}, {"name": "b", "$patch": "delete"}]}});
        merge_patch(&mut obj, &patch, true);
        assert_eq!(obj, json!({"spec": {"containers": [{"name": "a", "image": "2", "ports": [1]}]}}));
    }

    #[test]
    fn merge_patches_remove_nulls() {
        let mut obj = json!({"a": 1, "b": {"c": 2, "d": 3}});
        merge_patch(&mut obj, &json!({"a": null, "b": {"c": null, "e": 4}}), false);
        assert_eq!(obj, json!({"b": {"d": 3, "e": 4}}));
    }
}
