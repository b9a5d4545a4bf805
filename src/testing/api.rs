//! Request handling for everything but watches: routing, discovery, lists (with the
//! resourceVersion table and pagination), single GETs, writes, Status bodies.

mod discovery;
mod list;
pub(crate) mod protobuf;
mod table;
mod write;

use discovery::{api_group, api_groups, api_resources, api_versions, openapi_doc, openapi_index, openapi_v2};
use list::list;
pub(crate) use table::{Include, table};
use write::{create, delete, delete_collection, get, has_scale, patch, scale, update};

use std::collections::BTreeMap;
use std::io::{self, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};

use super::http::{Request, Response, write_response};
use super::selectors::{FieldSelector, LabelSelector};
use super::shard::ShardSelector;
use super::state::{ServerCore, State};
use super::store::{Deleted, Key, make_key, meta_mut};
use super::util::{base64_std, base64_url, base64_url_decode, parse_go_duration, quote_capped};
use super::{FakeError, ResourceType};

/// Bodies larger than this are gzip-compressed when the client accepts gzip.
const GZIP_THRESHOLD: usize = 128 * 1024;
/// Bodies larger than this are sent chunked.
const CHUNKED_THRESHOLD: usize = 32 * 1024;

/// The types `FakeApiServer::start` registers.
pub(crate) fn default_types() -> Vec<ResourceType> {
    use k8s_openapi::api::{apps::v1 as apps, batch::v1 as batch, coordination::v1 as coordination, core::v1 as core};
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
        // Leader election and shard groups (`LeaderElector`) hold their Leases here.
        ResourceType::of::<coordination::Lease>(),
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
    if let Some(mut d) = details {
        // Go leaves an empty group out: the core group's details have none.
        if let Some(map) = d.as_object_mut()
            && map.get("group").and_then(Value::as_str) == Some("")
        {
            map.remove("group");
        }
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

/// The real server's answer to `err`; `name`: the object's, for an invalid one (`""` when
/// the request named none).
fn error_response(err: &FakeError, rt: &ResourceType, name: &str) -> Response {
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
            // `field: detail`, as kube-apiserver's field errors read; the kind qualified by its
            // group, as its `Invalid` status names it.
            let kind = if rt.group.is_empty() { rt.kind.clone() } else { format!("{}.{}", rt.kind, rt.group) };
            let mut details = json!({"name": name, "group": rt.group, "kind": rt.kind});
            if let Some((field, detail)) = message.split_once(": ").filter(|(f, _)| f.starts_with("metadata.")) {
                let reason =
                    if detail.starts_with("Required value") { "FieldValueRequired" } else { "FieldValueInvalid" };
                details["causes"] = json!([{"reason": reason, "message": detail, "field": field}]);
            }
            ("Invalid", format!("{kind} {name:?} is invalid: {message}"), Some(details))
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
    /// `/openapi/v2`: an empty swagger document (kubectl before 1.27 validates with it).
    OpenApiV2,
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
        ["openapi", "v2"] => return Route::OpenApiV2,
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
    /// A `meta.k8s.io` Table (kubectl's `get`), `v1` or `v1beta1`.
    Table { include: Include, beta: bool },
}

impl Repr {
    /// The Table's `apiVersion`.
    pub(crate) fn table_version(beta: bool) -> &'static str {
        if beta { "meta.k8s.io/v1beta1" } else { "meta.k8s.io/v1" }
    }
}

/// Negotiates the representation from `Accept`; `Err` is the 406 (or the 400 for a bad
/// `includeObject`).
pub(crate) fn negotiate(req: &Request, list: bool) -> Result<Repr, Response> {
    let not_acceptable = || {
        status_response(
            406,
            "NotAcceptable",
            "only the following media types are accepted: application/json, application/json;as=Table;v=v1;g=meta.k8s.io, application/json;as=PartialObjectMetadata;v=v1;g=meta.k8s.io",
            None,
        )
    };
    let accept = req.header("accept").unwrap_or_default();
    if accept.trim().is_empty() {
        return Ok(Repr::Full);
    }
    for range in accept.split(',') {
        let mut parts = range.split(';').map(str::trim);
        let media = parts.next().unwrap_or_default().to_ascii_lowercase();
        let params: Vec<(String, String)> = parts
            .filter_map(|p| p.split_once('='))
            .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().trim_matches('"').to_string()))
            .collect();
        let param = |k: &str| params.iter().find(|(pk, _)| pk == k).map(|(_, v)| v.as_str());
        // Full objects and metadata in protobuf (`send` encodes them; `protobuf::accepted_first`
        // decided that this range comes first), unless the server is JSON-only.
        let protobuf = media == protobuf::MEDIA_TYPE;
        if protobuf && !req.protobuf {
            continue;
        }
        if !(protobuf || media == "application/json" || media == "*/*" || media == "application/*") {
            continue;
        }
        let Some(kind) = param("as") else {
            return Ok(Repr::Full);
        };
        if param("g") != Some("meta.k8s.io") {
            continue;
        }
        match (kind, param("v"), list) {
            // Tables are JSON (or YAML) only, as on the real server.
            ("Table", Some(v @ ("v1" | "v1beta1")), _) if !protobuf => {
                let include = Include::parse(req.param("includeObject")).map_err(|e| bad_request(&e))?;
                return Ok(Repr::Table { include, beta: v == "v1beta1" });
            }
            ("PartialObjectMetadataList", Some("v1"), true) => return Ok(Repr::Metadata),
            ("PartialObjectMetadata", Some("v1"), false) => return Ok(Repr::Metadata),
            // A watch asking for the list form falls back to full objects.
            ("PartialObjectMetadataList", Some("v1"), false) if req.flag("watch") == Some(true) => {
                return Ok(Repr::Full);
            }
            _ => continue,
        }
    }
    Err(not_acceptable())
}

/// One object in the representation asked for (a Table holds one row): GET answers and watch
/// events.
pub(crate) fn render(rt: &ResourceType, obj: &Value, repr: Repr) -> Value {
    match repr {
        Repr::Metadata => partial(obj),
        Repr::Full => obj.clone(),
        Repr::Table { include, beta } => {
            let rv = obj.pointer("/metadata/resourceVersion").cloned().unwrap_or_default();
            let metadata = Map::from_iter([("resourceVersion".to_string(), rv)]);
            table(rt, &[obj], include, Repr::table_version(beta), metadata)
        }
    }
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
    /// `shardSelector`, read only when the server has sharded lists and watches.
    shard: Option<ShardSelector>,
}

impl Filter {
    /// Parses `labelSelector`/`fieldSelector`; `Err` is the 400 response. With `sharding`
    /// (`FakeApiServerBuilder::sharded_list_and_watch`), `shardSelector` too: a malformed one is
    /// refused as kube-apiserver refuses it, with a 500 whose `Status` has no reason (its
    /// registry returns a plain error, not a `Status`).
    pub(crate) fn parse(
        req: &Request,
        rt: &ResourceType,
        ns: Option<&str>,
        name: Option<&str>,
        sharding: bool,
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
        let shard = match req.param("shardSelector").filter(|s| sharding && !s.is_empty()) {
            None => None,
            Some(text) => Some(
                ShardSelector::parse(text)
                    .map_err(|e| status_response(500, "", &format!("invalid shard selector: {e}"), None))?,
            ),
        };
        Ok(Filter { ns: ns.map(str::to_string), name: name.map(str::to_string), labels, fields, shard })
    }

    /// The shard selector applied, as `metadata.shardInfo.selector` echoes it.
    pub(crate) fn shard_echo(&self) -> Option<String> {
        self.shard.as_ref().map(ShardSelector::echo)
    }

    /// Whether selectors were given (then `remainingItemCount` is omitted).
    pub(crate) fn has_selectors(&self) -> bool {
        !self.labels.is_empty() || !self.fields.is_empty() || self.shard.is_some()
    }

    /// Whether an object passes the namespace, name and selectors.
    pub(crate) fn matches(&self, obj: &Value) -> bool {
        let meta_ns = obj.pointer("/metadata/namespace").and_then(Value::as_str).unwrap_or_default();
        let meta_name = obj.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default();
        self.ns.as_deref().is_none_or(|ns| ns == meta_ns)
            && self.name.as_deref().is_none_or(|n| n == meta_name)
            && self.labels.matches(obj)
            && self.fields.matches(obj)
            && self.shard.as_ref().is_none_or(|s| s.matches(obj))
    }
}

/// Writes a response; large bodies are gzipped (if accepted) and chunked.
pub(crate) fn send(conn: &mut impl Write, req: &Request, mut resp: Response) -> io::Result<()> {
    if req.protobuf {
        resp = protobuf::transcode(resp);
    }
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
        Route::OpenApiV2 => openapi_v2(req),
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
        Route::Api => api_versions(shared, req),
        Route::Apis => api_groups(shared, req),
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
            if sub.as_deref() == Some("scale") && has_scale(&shared.lock().store.types[*idx].rt) {
                return scale(shared, req, *idx, ns.as_deref(), name);
            }
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
    use super::list::{ContinueToken, decode_continue, encode_continue};
    use super::write::merge_patch;
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
    fn json_patches_follow_rfc_6902() {
        use super::write::json_patch;
        let mut obj = json!({"metadata": {"labels": {"a": "1"}}, "spec": {"items": [1, 2]}});
        let patch = json!([
            {"op": "add", "path": "/metadata/labels/b~1c", "value": "2"},
            {"op": "replace", "path": "/metadata/labels/a", "value": "3"},
            {"op": "add", "path": "/spec/items/-", "value": 4},
            {"op": "remove", "path": "/spec/items/0"},
            {"op": "copy", "from": "/spec/items", "path": "/spec/copy"},
            {"op": "move", "from": "/spec/copy", "path": "/spec/moved"},
            {"op": "test", "path": "/spec/moved/1", "value": 4},
        ]);
        json_patch(&mut obj, &patch).unwrap();
        assert_eq!(
            obj,
            json!({"metadata": {"labels": {"a": "3", "b/c": "2"}}, "spec": {"items": [2, 4], "moved": [2, 4]}})
        );
        let err = json_patch(&mut obj, &json!([{"op": "remove", "path": "/nope/x"}])).unwrap_err();
        assert!(err.contains("/nope/x"), "{err}");
        assert!(json_patch(&mut obj, &json!([{"op": "test", "path": "/spec/items/0", "value": 9}])).is_err());
    }

    #[test]
    fn merge_patches_remove_nulls() {
        let mut obj = json!({"a": 1, "b": {"c": 2, "d": 3}});
        merge_patch(&mut obj, &json!({"a": null, "b": {"c": null, "e": 4}}), false);
        assert_eq!(obj, json!({"b": {"d": 3, "e": 4}}));
    }
}
