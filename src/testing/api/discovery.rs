//! Discovery answers: API groups, versions, resources (plain, and aggregated into one document
//! for `/api` and one for `/apis`), and the minimal OpenAPI documents kubectl reads.

use super::*;

/// The `Content-Type` of an aggregated discovery document (`apidiscovery.k8s.io/v2`).
const AGGREGATED: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

/// Whether the client accepts the aggregated form: one of its media ranges is
/// `application/json` with `g=apidiscovery.k8s.io`, `v=v2` and `as=APIGroupDiscoveryList`
/// (in any order), as the real server reads it.
fn accepts_aggregated(req: &Request) -> bool {
    let Some(accept) = req.header("accept") else { return false };
    accept.split(',').any(|range| {
        let mut parts = range.split(';').map(str::trim);
        let json = parts.next().is_some_and(|base| base.eq_ignore_ascii_case("application/json"));
        let params: Vec<(&str, &str)> = parts.filter_map(|p| p.split_once('=')).collect();
        let has = |k: &str, v: &str| params.iter().any(|(pk, pv)| pk.trim() == k && pv.trim() == v);
        json && has("g", "apidiscovery.k8s.io") && has("v", "v2") && has("as", "APIGroupDiscoveryList")
    })
}

/// An `APIGroupDiscoveryList` of `groups` (name and versions, in order), with a `Vary: Accept`
/// as the real server sends (the same URL has two forms).
fn aggregated_list(state: &State, groups: &[(String, Vec<String>)]) -> Response {
    let items: Vec<Value> = groups
        .iter()
        .map(|(g, versions)| {
            let versions: Vec<Value> = versions
                .iter()
                .map(|v| {
                    let resources: Vec<Value> = state
                        .store
                        .types
                        .iter()
                        .map(|t| &t.rt)
                        .filter(|rt| rt.group == *g && rt.version == *v)
                        .map(aggregated_resource)
                        .collect();
                    json!({"version": v, "resources": resources, "freshness": "Current"})
                })
                .collect();
            // The core group's name is empty, and Go's encoder leaves an empty name (and the
            // zero creation time) out.
            let metadata = if g.is_empty() { json!({}) } else { json!({"name": g}) };
            json!({"metadata": metadata, "versions": versions})
        })
        .collect();
    let body = json!({"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2", "metadata": {}, "items": items});
    Response::new(200, AGGREGATED, serde_json::to_vec(&body).unwrap_or_default()).header("Vary", "Accept")
}

/// One resource of an aggregated document: the fields of [`api_resources`]' entries, with its
/// subresources nested. A built-in type's `responseKind` names the kind only (group and
/// version empty: the resource's own), a custom resource's names all three, as kube-apiserver
/// writes them (tests/real/differential.rs compares the two documents).
fn aggregated_resource(rt: &ResourceType) -> Value {
    let kind = if rt.built_in {
        json!({"group": "", "version": "", "kind": rt.kind})
    } else {
        json!({"group": rt.group, "version": rt.version, "kind": rt.kind})
    };
    let mut subresources = Vec::new();
    if has_status(rt) {
        subresources.push(json!({"subresource": "status", "responseKind": kind, "verbs": ["get", "patch", "update"]}));
    }
    if super::write::has_scale(rt) {
        subresources.push(json!({
            "subresource": "scale", "responseKind": {"group": "autoscaling", "version": "v1", "kind": "Scale"},
            "verbs": ["get", "patch", "update"],
        }));
    }
    let mut r = json!({
        "resource": rt.plural, "responseKind": kind,
        "scope": if rt.namespaced { "Namespaced" } else { "Cluster" },
        "singularResource": singular(rt), "verbs": verbs(rt), "subresources": subresources,
    });
    if !rt.short_names.is_empty() {
        r["shortNames"] = json!(rt.short_names);
    }
    if let Some(categories) = categories(rt) {
        r["categories"] = json!(categories);
    }
    r
}

/// The verbs every served type allows.
const VERBS: [&str; 8] = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"];

/// The verbs of `rt`: all of [`VERBS`], but namespaces cannot be deleted as a collection.
fn verbs(rt: &ResourceType) -> Vec<&'static str> {
    let namespaces = rt.built_in && rt.group.is_empty() && rt.plural == "namespaces";
    VERBS.into_iter().filter(|v| !(namespaces && *v == "deletecollection")).collect()
}

/// Whether discovery lists a `status` subresource for `rt`: built-in types without a status
/// (ConfigMaps, Secrets, Leases, ...) have none on the real server; custom resources keep it
/// (the fake does not know whether their definition declares one).
fn has_status(rt: &ResourceType) -> bool {
    const NO_STATUS: [&str; 16] = [
        "configmaps",
        "secrets",
        "events",
        "endpoints",
        "serviceaccounts",
        "leases",
        "podtemplates",
        "limitranges",
        "controllerrevisions",
        "endpointslices",
        "roles",
        "rolebindings",
        "clusterroles",
        "clusterrolebindings",
        "priorityclasses",
        "storageclasses",
    ];
    !(rt.built_in && NO_STATUS.contains(&rt.plural.as_str()))
}

fn singular(rt: &ResourceType) -> String {
    rt.singular.clone().unwrap_or_else(|| rt.kind.to_ascii_lowercase())
}

/// `kubectl get all` lists these.
fn categories(rt: &ResourceType) -> Option<[&'static str; 1]> {
    let all = matches!(
        rt.plural.as_str(),
        "pods"
            | "services"
            | "replicationcontrollers"
            | "deployments"
            | "replicasets"
            | "statefulsets"
            | "daemonsets"
            | "jobs"
            | "cronjobs"
            | "horizontalpodautoscalers"
    );
    (rt.built_in && all).then_some(["all"])
}

/// The named groups and their versions, in the order `/apis` lists them.
fn named_groups(state: &State) -> Vec<(String, Vec<String>)> {
    let mut groups: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for t in &state.store.types {
        if !t.rt.group.is_empty() {
            let versions = groups.entry(t.rt.group.clone()).or_default();
            if !versions.contains(&t.rt.version) {
                versions.push(t.rt.version.clone());
            }
        }
    }
    groups.into_iter().collect()
}

/// `/api`: the core group's versions, aggregated (with its resources) when the client accepts
/// that and the server offers it.
pub(super) fn api_versions(shared: &ServerCore, req: &Request) -> Response {
    let state = shared.lock();
    if shared.settings.aggregated_discovery && accepts_aggregated(req) {
        return aggregated_list(&state, &[(String::new(), vec!["v1".to_owned()])]);
    }
    Response::json(
        200,
        &json!({"kind": "APIVersions", "versions": ["v1"],
                "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}]}),
    )
}

/// `/openapi/v3`: one path per group-version.
pub(super) fn openapi_index(shared: &ServerCore) -> Response {
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

/// `/openapi/v2`: a swagger document with no definitions. Older kubectl (before 1.27) fetches it,
/// as protobuf, to validate manifests, and skips validation for a kind the document does not
/// describe; an empty protobuf message is a valid, empty document.
pub(super) fn openapi_v2(req: &Request) -> Response {
    const PROTOBUF: &str = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf";
    if req.header("accept").is_some_and(|a| a.contains(PROTOBUF)) {
        // Go cannot parse the media type with its `@`; the real server answers octet-stream too.
        return Response::new(200, "application/octet-stream", Vec::new());
    }
    Response::json(
        200,
        &json!({"swagger": "2.0", "info": {"title": "Kubernetes", "version": "v1.34.0-fake"}, "paths": {}, "definitions": {}}),
    )
}

/// `/apis`: every group and its versions; aggregated (with every resource) when the client
/// accepts that and the server offers it.
pub(super) fn api_groups(shared: &ServerCore, req: &Request) -> Response {
    let state = shared.lock();
    let groups = named_groups(&state);
    if shared.settings.aggregated_discovery && accepts_aggregated(req) {
        return aggregated_list(&state, &groups);
    }
    let groups: Vec<Value> = groups.iter().map(|(g, vs)| group_json(g, vs)).collect();
    Response::json(200, &json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}))
}

/// `/apis/<group>`.
pub(super) fn api_group(shared: &ServerCore, g: &str) -> Response {
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
pub(super) fn api_resources(shared: &ServerCore, g: &str, v: &str) -> Response {
    let state = shared.lock();
    let mut resources = Vec::new();
    for t in state.store.types.iter().filter(|t| t.rt.group == g && t.rt.version == v) {
        let rt = &t.rt;
        let mut r = json!({
            "name": rt.plural, "singularName": singular(rt), "namespaced": rt.namespaced, "kind": rt.kind,
            "verbs": verbs(rt),
        });
        if !rt.short_names.is_empty() {
            r["shortNames"] = json!(rt.short_names);
        }
        if let Some(categories) = categories(rt) {
            r["categories"] = json!(categories);
        }
        resources.push(r);
        if has_status(rt) {
            resources.push(json!({
                "name": format!("{}/status", rt.plural), "singularName": "", "namespaced": rt.namespaced,
                "kind": rt.kind, "verbs": ["get", "patch", "update"],
            }));
        }
        if super::write::has_scale(rt) {
            resources.push(json!({
                "name": format!("{}/scale", rt.plural), "singularName": "", "namespaced": rt.namespaced,
                "group": "autoscaling", "version": "v1", "kind": "Scale", "verbs": ["get", "patch", "update"],
            }));
        }
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
pub(super) fn openapi_doc(shared: &ServerCore, group: &str, version: &str) -> Response {
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
