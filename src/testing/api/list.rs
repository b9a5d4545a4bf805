//! Lists: options checked as the API server checks them, where a list reads (current, exact, a continue token's snapshot), pagination, and the answer.

use super::*;

/// A decoded continue token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ContinueToken {
    /// The snapshot revision, or -1 for an inconsistent continuation.
    pub(super) rv: i64,
    /// Items with keys `>=` this are on the next page.
    pub(super) start: String,
}

pub(super) fn encode_continue(rv: i64, start: &str) -> String {
    let body = json!({"v": "meta.k8s.io/v1", "rv": rv, "start": start});
    base64_url(body.to_string().as_bytes())
}

pub(super) fn decode_continue(token: &str) -> Result<ContinueToken, String> {
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

pub(super) fn list(shared: &ServerCore, req: &Request, idx: usize, ns: Option<&str>) -> Response {
    let limit = match list_options(req) {
        Ok(limit) => limit,
        Err(resp) => return resp,
    };
    let rt = shared.lock().store.types[idx].rt.clone();
    let filter = match Filter::parse(req, &rt, ns, None, shared.settings.sharded_list_and_watch) {
        Ok(f) => f,
        Err(resp) => return resp,
    };
    let repr = match negotiate(req, true) {
        Ok(repr) => repr,
        Err(response) => return response,
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
    // kube-apiserver carries `shardInfo` over into a list of full objects only: a
    // `PartialObjectMetadataList` and a Table get the resourceVersion, the continue token and
    // the remaining count, nothing else.
    if let (Some(selector), Repr::Full) = (filter.shard_echo(), repr) {
        metadata.insert("shardInfo".into(), json!({ "selector": selector }));
    }
    if let Repr::Table { include, beta } = repr {
        let objects: Vec<&Value> = page.items.iter().map(|o| &**o).collect();
        return Response::json(200, &table(rt, &objects, include, Repr::table_version(beta), metadata));
    }
    let items: Vec<Value> = page
        .items
        .iter()
        .map(|o| match repr {
            Repr::Metadata | Repr::Table { .. } => partial(o),
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
        Repr::Metadata | Repr::Table { .. } => ("PartialObjectMetadataList".to_string(), "meta.k8s.io/v1".to_string()),
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
