//! Reads and writes of single objects: get, create, update, patch (merge, strategic, JSON), delete, and delete of a collection.

use super::*;

pub(super) fn get(shared: &ServerCore, req: &Request, idx: usize, key: &str, name: &str) -> Response {
    let repr = match negotiate(req, false) {
        Ok(repr) => repr,
        Err(response) => return response,
    };
    let state = shared.lock();
    let rt = state.store.types[idx].rt.clone();
    match state.store.types[idx].objects.get(key) {
        Some(obj) => Response::json(200, &render(&rt, obj, repr)),
        None => {
            error_response(&FakeError::NotFound { resource: rt.resource_name(), name: name.to_string() }, &rt, name)
        }
    }
}

fn parse_body(req: &Request) -> Result<Value, Response> {
    let ct = req.header("content-type").unwrap_or("application/json");
    let media = ct.split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
    if media == protobuf::MEDIA_TYPE {
        return protobuf::decode(&req.body)
            .map_err(|e| bad_request(&format!("the body of the request could not be read as protobuf: {e}")));
    }
    if media == "application/yaml" {
        return serde_norway::from_slice(&req.body)
            .map_err(|e| bad_request(&format!("the body of the request was in an unknown format: {e}")));
    }
    // kube-apiserver reads a body without a Content-Type as JSON, the first type it takes.
    if !(media == "application/json" || media.is_empty()) {
        return Err(status_response(
            415,
            "UnsupportedMediaType",
            &format!(
                "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml, {}",
                protobuf::MEDIA_TYPE
            ),
            None,
        ));
    }
    serde_json::from_slice(&req.body)
        .map_err(|e| bad_request(&format!("the body of the request was in an unknown format: {e}")))
}

/// A custom resource's JSON body must say what it is, as kube-apiserver's decoder for custom
/// resources (unstructured objects) demands; a built-in type's endpoint fills in a missing
/// `kind` and `apiVersion` (its decoder defaults them from the URL). Both answers are the real
/// server's, seen in tests/real/resources.rs.
fn says_its_kind(rt: &ResourceType, req: &Request, obj: &Value) -> Result<(), Response> {
    let media = req.header("content-type").unwrap_or_default();
    if rt.built_in || media.starts_with(protobuf::MEDIA_TYPE) {
        return Ok(());
    }
    let text = |key: &str| obj.get(key).and_then(Value::as_str).unwrap_or_default();
    if text("kind").is_empty() {
        let body = String::from_utf8_lossy(&req.body);
        let short: String = body.chars().take(30).collect();
        let short = if short.len() < body.len() { format!("{short} ...") } else { short };
        return Err(bad_request(&format!(
            "the object provided is unrecognized (must be of type {}): Object 'Kind' is missing in '{body}' ({short})",
            rt.kind
        )));
    }
    if text("apiVersion") != rt.api_version() {
        return Err(bad_request(&format!(
            "the API version in the data ({}) does not match the expected API version ({})",
            text("apiVersion"),
            rt.api_version()
        )));
    }
    Ok(())
}

pub(super) fn create(shared: &ServerCore, req: &Request, idx: usize, ns: Option<&str>) -> Response {
    let obj = match parse_body(req) {
        Ok(v) => v,
        Err(r) => return r,
    };
    let mut state = shared.lock();
    let rt = state.store.types[idx].rt.clone();
    if let Err(response) = says_its_kind(&rt, req, &obj) {
        return response;
    }
    if req.param("dryRun").is_some() {
        return Response::json(201, &obj);
    }
    let name = obj.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default().to_owned();
    let result = state.store.create(idx, obj, ns);
    drop(state);
    shared.notify();
    match result {
        Ok(obj) => Response::json(201, &obj),
        Err(e) => error_response(&e, &rt, &name),
    }
}

pub(super) fn update(
    shared: &ServerCore,
    req: &Request,
    idx: usize,
    ns: Option<&str>,
    name: &str,
    status_only: bool,
    body: Option<Value>,
) -> Response {
    let from_request = body.is_none();
    let mut obj = match body {
        Some(b) => b,
        None => match parse_body(req) {
            Ok(v) => v,
            Err(r) => return r,
        },
    };
    let mut state = shared.lock();
    let rt = state.store.types[idx].rt.clone();
    if from_request && let Err(response) = says_its_kind(&rt, req, &obj) {
        return response;
    }
    let body_name = obj.pointer("/metadata/name").and_then(Value::as_str).unwrap_or(name);
    if body_name != name {
        return bad_request("the name of the object does not match the name on the URL");
    }
    meta_mut(&mut obj).insert("name".into(), json!(name));
    if status_only {
        let key = make_key(ns.unwrap_or_default(), name);
        let Some(current) = state.store.types[idx].objects.get(&key).cloned() else {
            return error_response(
                &FakeError::NotFound { resource: rt.resource_name(), name: name.to_string() },
                &rt,
                name,
            );
        };
        let mut merged = (*current).clone();
        merged["status"] = obj.get("status").cloned().unwrap_or(Value::Null);
        if let Some(rv) = obj.pointer("/metadata/resourceVersion") {
            meta_mut(&mut merged).insert("resourceVersion".into(), rv.clone());
        }
        obj = merged;
    }
    let key = make_key(ns.unwrap_or_default(), name);
    let unversioned = obj.pointer("/metadata/resourceVersion").and_then(Value::as_str).unwrap_or_default().is_empty();
    if unversioned && requires_version(&rt) && state.store.types[idx].objects.contains_key(&key) {
        // The real server's Lease strategy refuses unconditional updates (kubernetes
        // pkg/registry/coordination/lease/strategy.go: AllowUnconditionalUpdate is false).
        return status_response(
            422,
            "Invalid",
            &format!(
                "{}.{} {name:?} is invalid: metadata.resourceVersion: Invalid value: 0: must be specified for an update",
                rt.plural, rt.group
            ),
            Some(json!({"name": name, "group": rt.group, "kind": rt.plural,
                        "causes": [{"reason": "FieldValueInvalid", "message": "Invalid value: 0: must be specified for an update", "field": "metadata.resourceVersion"}]})),
        );
    }
    if !status_only && creates_on_update(&rt) && !state.store.types[idx].objects.contains_key(&key) {
        // The real server's Lease strategy allows a PUT to create (AllowCreateOnUpdate, same
        // file). The update's uid is a precondition, which nothing missing meets (apiserver
        // pkg/storage/etcd3/store.go checks it before the update is tried); otherwise the
        // object is created, whatever resourceVersion the body carries.
        if let Some(uid) = obj.pointer("/metadata/uid").and_then(Value::as_str).filter(|u| !u.is_empty()) {
            let message = format!(
                "Operation cannot be fulfilled on {} {name:?}: StorageError: invalid object, Code: 4, Key: /registry/{}/{}/{name}, ResourceVersion: 0, AdditionalErrorMsg: Precondition failed: UID in precondition: {uid}, UID in object meta: ",
                rt.resource_name(),
                rt.plural,
                ns.unwrap_or_default()
            );
            return status_response(
                409,
                "Conflict",
                &message,
                Some(json!({"name": name, "group": rt.group, "kind": rt.plural})),
            );
        }
        meta_mut(&mut obj).remove("resourceVersion");
        let result = state.store.create(idx, obj, ns);
        drop(state);
        shared.notify();
        return match result {
            Ok(obj) => Response::json(201, &obj),
            Err(e) => error_response(&e, &rt, name),
        };
    }
    let result = state.store.replace(idx, obj, ns);
    drop(state);
    shared.notify();
    match result {
        Ok(obj) => Response::json(200, &obj),
        Err(e) => error_response(&e, &rt, name),
    }
}

/// The real server's Lease strategy (kubernetes pkg/registry/coordination/lease/strategy.go).
fn is_lease(rt: &ResourceType) -> bool {
    rt.built_in && rt.group == "coordination.k8s.io" && rt.plural == "leases"
}

/// Whether a PUT must carry the resourceVersion it read: Leases, whose whole use is optimistic
/// concurrency (`AllowUnconditionalUpdate` is false).
fn requires_version(rt: &ResourceType) -> bool {
    is_lease(rt)
}

/// Whether a PUT to a missing object creates it: Leases (`AllowCreateOnUpdate` is true); the
/// fake's other types answer 404, as most real ones do.
fn creates_on_update(rt: &ResourceType) -> bool {
    is_lease(rt)
}

/// RFC 7386 merge patch, plus the parts of strategic merge patch kubectl relies on: `$`
/// directives are dropped and lists of named objects are merged by `name`.
pub(super) fn merge_patch(target: &mut Value, patch: &Value, strategic: bool) {
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

/// The request's patch and its format (from `Content-Type`); `Err` is the 415, or the 400 for a
/// body that is not JSON. Read before the object is looked up, as the real server does.
fn read_patch(req: &Request) -> Result<(PatchKind, Value), Response> {
    let kind = PatchKind::of(req)?;
    let patch = serde_json::from_slice(&req.body).map_err(|e| bad_request(&format!("error decoding patch: {e}")))?;
    Ok((kind, patch))
}

/// The 422 for a JSON patch that cannot be applied, as the real server words it (older kubectl
/// prints the causes, newer the message).
fn patch_failed(message: &str) -> Response {
    let message = format!("the JSON patch could not be applied: {message}");
    let details = json!({"causes": [{"reason": "UnexpectedServerResponse", "message": message}]});
    status_response(422, "Invalid", &message, Some(details))
}

/// The patch formats the fake reads (no server-side apply).
enum PatchKind {
    Merge,
    Strategic,
    Json,
}

impl PatchKind {
    /// The format `Content-Type` names; `Err` is the 415.
    fn of(req: &Request) -> Result<PatchKind, Response> {
        let ct = req.header("content-type").unwrap_or_default().to_ascii_lowercase();
        match ct.split(';').next().unwrap_or_default().trim() {
            "application/merge-patch+json" => Ok(PatchKind::Merge),
            "application/strategic-merge-patch+json" => Ok(PatchKind::Strategic),
            "application/json-patch+json" => Ok(PatchKind::Json),
            _ => Err(status_response(
                415,
                "UnsupportedMediaType",
                &format!(
                    "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json (the fake server has no server-side apply); got {ct}"
                ),
                None,
            )),
        }
    }

    /// Applies `patch` to `target`; `Err` is the 422 of a JSON patch that does not apply.
    fn apply(&self, target: &mut Value, patch: &Value) -> Result<(), Response> {
        match self {
            PatchKind::Merge => merge_patch(target, patch, false),
            PatchKind::Strategic => merge_patch(target, patch, true),
            PatchKind::Json => json_patch(target, patch).map_err(|message| patch_failed(&message))?,
        }
        Ok(())
    }
}

/// Applies an RFC 6902 JSON patch: `add`, `remove`, `replace`, `move`, `copy`, `test`.
pub(super) fn json_patch(target: &mut Value, patch: &Value) -> Result<(), String> {
    let Value::Array(ops) = patch else {
        return Err("a JSON patch is a list of operations".into());
    };
    for (i, op) in ops.iter().enumerate() {
        let field = |name: &str| {
            op.get(name).and_then(Value::as_str).ok_or_else(|| format!("operation {i} has no string {name:?}"))
        };
        let value = || op.get("value").cloned().ok_or_else(|| format!("operation {i} has no \"value\""));
        let path = field("path")?;
        match field("op")? {
            "add" => pointer_add(target, path, value()?)?,
            "remove" => {
                pointer_remove(target, path)?;
            }
            "replace" => {
                pointer_remove(target, path)?;
                pointer_add(target, path, value()?)?;
            }
            "move" => {
                let moved = pointer_remove(target, field("from")?)?;
                pointer_add(target, path, moved)?;
            }
            "copy" => {
                let from = field("from")?;
                let copied = target.pointer(from).cloned().ok_or_else(|| format!("path {from:?} does not exist"))?;
                pointer_add(target, path, copied)?;
            }
            "test" => {
                if target.pointer(path) != Some(&value()?) {
                    return Err(format!("test of {path:?} failed"));
                }
            }
            other => return Err(format!("operation {i}: unknown op {other:?}")),
        }
    }
    Ok(())
}

/// Splits a JSON pointer into its parent and its last token (unescaped).
fn pointer_parent(path: &str) -> Result<(&str, String), String> {
    let Some(slash) = path.rfind('/') else {
        return Err(format!("path {path:?} is not a JSON pointer"));
    };
    Ok((&path[..slash], path[slash + 1..].replace("~1", "/").replace("~0", "~")))
}

fn pointer_add(target: &mut Value, path: &str, value: Value) -> Result<(), String> {
    let (parent, last) = pointer_parent(path)?;
    match target.pointer_mut(parent) {
        Some(Value::Object(map)) => {
            map.insert(last, value);
            Ok(())
        }
        Some(Value::Array(items)) => {
            let at =
                if last == "-" { items.len() } else { last.parse().map_err(|_| format!("bad index in {path:?}"))? };
            if at > items.len() {
                return Err(format!("index {at} of {path:?} is past the end"));
            }
            items.insert(at, value);
            Ok(())
        }
        _ => Err(format!("the parent of {path:?} does not exist")),
    }
}

fn pointer_remove(target: &mut Value, path: &str) -> Result<Value, String> {
    let (parent, last) = pointer_parent(path)?;
    let removed = match target.pointer_mut(parent) {
        Some(Value::Object(map)) => map.remove(&last),
        Some(Value::Array(items)) => match last.parse::<usize>() {
            Ok(at) if at < items.len() => Some(items.remove(at)),
            _ => None,
        },
        _ => None,
    };
    removed.ok_or_else(|| format!("path {path:?} does not exist"))
}

fn all_named(items: &[Value]) -> bool {
    items.iter().all(|i| i.get("name").is_some_and(Value::is_string))
}

pub(super) fn patch(
    shared: &ServerCore,
    req: &Request,
    idx: usize,
    ns: Option<&str>,
    key: &str,
    name: &str,
    status_only: bool,
) -> Response {
    let (kind, patch) = match read_patch(req) {
        Ok(read) => read,
        Err(response) => return response,
    };
    let state = shared.lock();
    let rt = state.store.types[idx].rt.clone();
    let Some(current) = state.store.types[idx].objects.get(key).cloned() else {
        return error_response(
            &FakeError::NotFound { resource: rt.resource_name(), name: name.to_string() },
            &rt,
            name,
        );
    };
    drop(state);
    let mut obj = (*current).clone();
    if let Err(response) = kind.apply(&mut obj, &patch) {
        return response;
    }
    update(shared, req, idx, ns, name, status_only, Some(obj))
}

/// Whether a type has the `scale` subresource (the built-in workloads with `spec.replicas`).
pub(super) fn has_scale(rt: &ResourceType) -> bool {
    rt.built_in && rt.group == "apps" && matches!(rt.plural.as_str(), "deployments" | "replicasets" | "statefulsets")
}

/// The `autoscaling/v1` Scale of a workload, as the real server derives it.
fn scale_of(obj: &Value) -> Value {
    let meta = obj.get("metadata").cloned().unwrap_or_else(|| json!({}));
    let mut scale_meta = Map::new();
    for field in ["name", "namespace", "uid", "resourceVersion", "creationTimestamp"] {
        if let Some(v) = meta.get(field) {
            scale_meta.insert(field.into(), v.clone());
        }
    }
    let selector = super::table::selector(obj.pointer("/spec/selector/matchLabels"));
    json!({
        "kind": "Scale", "apiVersion": "autoscaling/v1", "metadata": scale_meta,
        "spec": {"replicas": obj.pointer("/spec/replicas").cloned().unwrap_or(json!(1))},
        "status": {"replicas": obj.pointer("/status/replicas").cloned().unwrap_or(json!(0)), "selector": selector},
    })
}

/// GET, PUT and PATCH of `<workload>/scale`: reads and writes `spec.replicas` through a Scale.
pub(super) fn scale(shared: &ServerCore, req: &Request, idx: usize, ns: Option<&str>, name: &str) -> Response {
    let key = make_key(ns.unwrap_or_default(), name);
    let state = shared.lock();
    let rt = state.store.types[idx].rt.clone();
    let Some(current) = state.store.types[idx].objects.get(&key).cloned() else {
        return error_response(
            &FakeError::NotFound { resource: rt.resource_name(), name: name.to_string() },
            &rt,
            name,
        );
    };
    drop(state);
    let mut wanted = scale_of(&current);
    match req.method.as_str() {
        "GET" | "HEAD" => return Response::json(200, &wanted),
        "PUT" => match parse_body(req) {
            Ok(body) => wanted = body,
            Err(r) => return r,
        },
        "PATCH" => {
            if let Err(response) = read_patch(req).and_then(|(kind, patch)| kind.apply(&mut wanted, &patch)) {
                return response;
            }
        }
        _ => return method_not_allowed(),
    }
    let replicas = wanted.pointer("/spec/replicas").and_then(Value::as_i64);
    let Some(replicas) = replicas.filter(|r| (0..=i64::from(i32::MAX)).contains(r)) else {
        return status_response(
            422,
            "Invalid",
            &format!(
                "Scale.autoscaling {name:?} is invalid: spec.replicas: Invalid value: must be a number from 0 to 2147483647"
            ),
            None,
        );
    };
    let mut obj = (*current).clone();
    obj["spec"]["replicas"] = json!(replicas);
    if let Some(rv) = wanted.pointer("/metadata/resourceVersion") {
        meta_mut(&mut obj).insert("resourceVersion".into(), rv.clone());
    }
    let mut state = shared.lock();
    let result = state.store.replace(idx, obj, ns);
    drop(state);
    shared.notify();
    match result {
        Ok(obj) => Response::json(200, &scale_of(&obj)),
        Err(e) => error_response(&e, &rt, name),
    }
}

/// Whether a delete answers with the deleted object rather than a `Success` Status: custom
/// resources, and the built-in types whose registry says so (`ReturnDeletedObject` in
/// kube-apiserver's storage of each; tests/real/shapes.rs compares the answers).
fn returns_deleted(rt: &ResourceType) -> bool {
    const RETURN_THE_OBJECT: [(&str, &str); 18] = [
        ("", "namespaces"),
        ("", "persistentvolumes"),
        ("", "persistentvolumeclaims"),
        ("", "pods"),
        ("", "podtemplates"),
        ("", "resourcequotas"),
        ("", "services"),
        ("", "serviceaccounts"),
        ("resource.k8s.io", "deviceclasses"),
        ("resource.k8s.io", "resourceclaims"),
        ("resource.k8s.io", "resourceclaimtemplates"),
        ("resource.k8s.io", "resourcepoolstatusrequests"),
        ("resource.k8s.io", "resourceslices"),
        ("storage.k8s.io", "csidrivers"),
        ("storage.k8s.io", "csinodes"),
        ("storage.k8s.io", "storageclasses"),
        ("storage.k8s.io", "volumeattachments"),
        ("storage.k8s.io", "volumeattributesclasses"),
    ];
    RETURN_THE_OBJECT.contains(&(rt.group.as_str(), rt.plural.as_str()))
}

pub(super) fn delete(shared: &ServerCore, req: &Request, idx: usize, key: &str) -> Response {
    let opts: Value = serde_json::from_slice(&req.body).unwrap_or(Value::Null);
    let mut state = shared.lock();
    let rt = state.store.types[idx].rt.clone();
    if let (Some(pre), Some(current)) = (opts.get("preconditions"), state.store.types[idx].objects.get(key)) {
        for field in ["uid", "resourceVersion"] {
            if let Some(want) = pre.get(field).and_then(Value::as_str) {
                let have = current.pointer(&format!("/metadata/{field}")).and_then(Value::as_str);
                if have != Some(want) {
                    let name = super::super::store::key_name(key).to_string();
                    return error_response(&FakeError::Conflict { resource: rt.resource_name(), name }, &rt, "");
                }
            }
        }
    }
    let result = state.store.delete(idx, &key.to_string());
    drop(state);
    shared.notify();
    match result {
        Ok(Deleted::Pending(obj)) => Response::json(200, &obj),
        Ok(Deleted::Gone(obj)) if !rt.built_in || returns_deleted(&rt) => Response::json(200, &obj),
        Ok(Deleted::Gone(obj)) => Response::json(
            200,
            &json!({
                "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                "details": {"name": obj.pointer("/metadata/name"), "group": rt.group, "kind": rt.plural,
                            "uid": obj.pointer("/metadata/uid")}
            }),
        ),
        Err(e) => error_response(&e, &rt, super::super::store::key_name(key)),
    }
}

pub(super) fn delete_collection(shared: &ServerCore, req: &Request, idx: usize, ns: Option<&str>) -> Response {
    let mut state = shared.lock();
    let rt = state.store.types[idx].rt.clone();
    let filter = match Filter::parse(req, &rt, ns, None, false) {
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
