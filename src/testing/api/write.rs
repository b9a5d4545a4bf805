//! Reads and writes of single objects: get, create, update, patch (merge, strategic, JSON), delete, and delete of a collection.

use super::*;

pub(super) fn get(shared: &ServerCore, req: &Request, idx: usize, key: &str, name: &str) -> Response {
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

pub(super) fn create(shared: &ServerCore, req: &Request, idx: usize, ns: Option<&str>) -> Response {
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

pub(super) fn update(
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

pub(super) fn delete_collection(shared: &ServerCore, req: &Request, idx: usize, ns: Option<&str>) -> Response {
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
