//! The fake's storage: a store-wide revision counter, objects per type sorted by namespace and
//! name, and a per-type change log used for watch resume and for snapshots at older revisions.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use serde_json::{Map, Value, json};

use super::util::{Rng, rfc3339};
use super::{FakeError, ResourceType};

/// Object key within one type: `namespace/name`, or `name` for cluster-scoped objects. Ordering
/// by this string is the real server's storage-key order.
pub(crate) type Key = String;

/// Builds a key from a namespace (empty for cluster-scoped) and a name.
pub(crate) fn make_key(namespace: &str, name: &str) -> Key {
    if namespace.is_empty() { name.to_string() } else { format!("{namespace}/{name}") }
}

/// The name part of a key.
pub(crate) fn key_name(key: &str) -> &str {
    key.rsplit_once('/').map_or(key, |(_, name)| name)
}

/// One write as the change log records it.
#[derive(Debug, Clone)]
pub(crate) struct Change {
    /// The revision of the write.
    pub rv: u64,
    /// The object's key.
    pub key: Key,
    /// The state before the write (`None` for a create).
    pub old: Option<Arc<Value>>,
    /// The state after the write (`None` for a delete).
    pub new: Option<Arc<Value>>,
}

/// Everything the fake knows about one resource type.
#[derive(Debug)]
pub(crate) struct TypeState {
    /// The registered type.
    pub rt: ResourceType,
    /// Current objects; each always carries `kind` and `apiVersion`.
    pub objects: BTreeMap<Key, Arc<Value>>,
    /// Changes after `horizon`, oldest first; at most `history` entries.
    pub log: VecDeque<Change>,
    /// Oldest revision a watch may start from or a snapshot may be taken at.
    pub horizon: u64,
}

/// What a delete did.
#[derive(Debug)]
pub(crate) enum Deleted {
    /// The object is gone; this is its last state (with the delete's revision).
    Gone(Arc<Value>),
    /// The object has finalizers; it now carries a `deletionTimestamp`.
    Pending(Arc<Value>),
}

/// The whole store. Lives inside the server's state mutex.
#[derive(Debug)]
pub(crate) struct Store {
    /// The store-wide revision: the revision of the latest write.
    pub revision: u64,
    /// Registered types.
    pub types: Vec<TypeState>,
    /// How many changes per type are retained.
    history: usize,
    /// Source of uids and generated names.
    rng: Rng,
    /// `(revision, when the next write superseded it)`, oldest first, at most
    /// [`MAX_SUPERSEDED`] entries: how long a revision has been history (continue-token expiry).
    superseded: VecDeque<(u64, Instant)>,
}

/// How many supersede times the store remembers; older revisions count as long superseded.
const MAX_SUPERSEDED: usize = 100_000;

/// Returned when a revision is older than what the store retains.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TooOld {
    /// The oldest revision still usable.
    pub horizon: u64,
}

fn meta(obj: &Value) -> Option<&Map<String, Value>> {
    obj.get("metadata").and_then(Value::as_object)
}

fn meta_str<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    meta(obj).and_then(|m| m.get(field)).and_then(Value::as_str)
}

#[allow(clippy::expect_used)]
pub(crate) fn meta_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj.is_object() {
        *obj = json!({});
    }
    let map = obj.as_object_mut().expect("OK: just made it an object");
    let entry = map.entry("metadata").or_insert_with(|| json!({}));
    if !entry.is_object() {
        *entry = json!({});
    }
    entry.as_object_mut().expect("OK: just made it an object")
}

/// Sets `metadata.resourceVersion` on a copy of `obj`.
pub(crate) fn with_rv(obj: &Value, rv: u64) -> Value {
    let mut copy = obj.clone();
    meta_mut(&mut copy).insert("resourceVersion".into(), Value::String(rv.to_string()));
    copy
}

/// Whether the object's finalizer list is non-empty.
/// The defaults the real server fills in on create that clients show (a new pod is `Pending`, a
/// secret `Opaque`, a namespace `Active`, a service `ClusterIP`); only where the field is absent.
fn defaults(rt: &ResourceType, obj: &mut Value) {
    let (parent, field, value) = match (rt.group.as_str(), rt.plural.as_str()) {
        ("", "pods") => (Some("status"), "phase", "Pending"),
        ("", "nodes") => {
            // What a new Node gets without a kubelet: the not-ready taint (the admission plugin
            // TaintNodesByCondition), and the status structs Go writes even when empty.
            if let Some(top) = obj.as_object_mut() {
                let spec = top.entry("spec").or_insert_with(|| json!({}));
                if let Some(spec) = spec.as_object_mut().filter(|s| s.get("taints").is_none_or(Value::is_null)) {
                    spec.insert(
                        "taints".into(),
                        json!([{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}]),
                    );
                }
                let status = top.entry("status").or_insert_with(|| json!({}));
                if let Some(status) = status.as_object_mut() {
                    status.entry("daemonEndpoints").or_insert_with(|| json!({"kubeletEndpoint": {"Port": 0}}));
                    let fields = [
                        "machineID",
                        "systemUUID",
                        "bootID",
                        "kernelVersion",
                        "osImage",
                        "containerRuntimeVersion",
                        "kubeletVersion",
                        "kubeProxyVersion",
                        "operatingSystem",
                        "architecture",
                    ];
                    status.entry("nodeInfo").or_insert_with(|| {
                        Value::Object(fields.iter().map(|f| ((*f).to_owned(), json!(""))).collect())
                    });
                }
            }
            return;
        }
        ("", "secrets") => (None, "type", "Opaque"),
        ("", "namespaces") => {
            // The namespace controller's finalizer, which the real server adds to every new
            // namespace (without that controller, as on the test bed, it stays).
            if let Some(top) = obj.as_object_mut() {
                let spec = top.entry("spec").or_insert_with(|| json!({}));
                if let Some(spec) = spec.as_object_mut().filter(|s| s.get("finalizers").is_none_or(Value::is_null)) {
                    spec.insert("finalizers".into(), json!(["kubernetes"]));
                }
            }
            (Some("status"), "phase", "Active")
        }
        ("", "services") => (Some("spec"), "type", "ClusterIP"),
        _ => return,
    };
    let Some(top) = obj.as_object_mut() else { return };
    let target = match parent {
        None => top,
        Some(p) => {
            let slot = top.entry(p).or_insert_with(|| json!({}));
            if slot.is_null() {
                *slot = json!({});
            }
            let Some(map) = slot.as_object_mut() else { return };
            map
        }
    };
    if target.get(field).is_none_or(Value::is_null) {
        target.insert(field.into(), json!(value));
    }
}

/// Leaves out what the real server's JSON leaves out: a zero (`""`, `0`, `false`) in a field
/// that Go's `omitempty` drops (a non-pointer field; the schema table's `?`, generated from
/// upstream: src/codec/protobuf/table.txt). A client that sends `"hostPort": 0` reads the pod
/// back without it from a real server, which holds the object as a Go struct; so does the fake,
/// over JSON and protobuf alike (docs/protocol.md §12.4). Values of another type than the table's
/// are left as they are.
fn omit_zeros(obj: &mut Value) {
    use crate::codec::protobuf::schema::{Schema, Type, schema};
    fn walk(schema: &Schema, index: usize, value: &mut Value, depth: u32) {
        let (Some(message), Value::Object(map)) = (schema.messages.get(index), value) else { return };
        if depth > 64 {
            return;
        }
        for field in &message.fields {
            let Some(name) = field.name else {
                if let Type::Message(inner) = &field.ty {
                    let mut own = Value::Object(std::mem::take(map));
                    walk(schema, *inner, &mut own, depth + 1);
                    if let Value::Object(back) = own {
                        *map = back;
                    }
                }
                continue;
            };
            let zero = |v: &Value| match v {
                Value::Bool(b) => !b,
                Value::Number(n) => n.as_i64() == Some(0),
                Value::String(s) => s.is_empty(),
                _ => false,
            };
            if field.omit_zero && map.get(name).is_some_and(zero) {
                map.remove(name);
                continue;
            }
            let Some(v) = map.get_mut(name) else { continue };
            match (&field.ty, v) {
                (Type::Message(inner), v) => walk(schema, *inner, v, depth + 1),
                (Type::Repeated(element), Value::Array(items)) => {
                    if let Type::Message(inner) = **element {
                        items.iter_mut().for_each(|item| walk(schema, inner, item, depth + 1));
                    }
                }
                (Type::Map(element), Value::Object(entries)) => {
                    if let Type::Message(inner) = **element {
                        entries.values_mut().for_each(|item| walk(schema, inner, item, depth + 1));
                    }
                }
                _ => {}
            }
        }
    }
    let text = |key: &str| obj.get(key).and_then(Value::as_str).unwrap_or_default().to_owned();
    let schema = schema();
    if let Some(index) = schema.kind(&text("apiVersion"), &text("kind")) {
        walk(schema, index, obj, 0);
    }
}

fn has_finalizers(obj: &Value) -> bool {
    meta(obj).and_then(|m| m.get("finalizers")).and_then(Value::as_array).is_some_and(|f| !f.is_empty())
}

/// Removes fields that are not part of the object's content for no-op detection.
fn content_without_server_fields(obj: &Value) -> Value {
    let mut copy = obj.clone();
    let m = meta_mut(&mut copy);
    for f in ["resourceVersion", "managedFields", "generation"] {
        m.remove(f);
    }
    copy
}

/// Whether kube-apiserver keeps a `metadata.generation` for objects of `rt`: custom resources
/// and the built-in types whose spec a controller acts on do; ConfigMaps, Secrets, Services,
/// Namespaces, Leases, Nodes and the like have none (seen on the real server: their protobuf
/// carries generation 0, compared in tests/real/differential.rs).
fn has_generation(rt: &ResourceType) -> bool {
    const WITH_GENERATION: [&str; 13] = [
        "pods",
        "podtemplates",
        "replicationcontrollers",
        "deployments",
        "replicasets",
        "statefulsets",
        "daemonsets",
        "jobs",
        "cronjobs",
        "horizontalpodautoscalers",
        "poddisruptionbudgets",
        "ingresses",
        "networkpolicies",
    ];
    !rt.built_in || WITH_GENERATION.contains(&rt.plural.as_str())
}

/// Everything but metadata and status (what bumps `generation`).
fn spec_part(obj: &Value) -> Value {
    let mut copy = obj.clone();
    if let Some(map) = copy.as_object_mut() {
        map.remove("metadata");
        map.remove("status");
    }
    copy
}

impl Store {
    /// Creates an empty store at revision 1.
    pub(crate) fn new(seed: u64, history: usize) -> Store {
        Store {
            revision: 1,
            types: Vec::new(),
            history: history.max(1),
            rng: Rng::new(seed),
            superseded: VecDeque::new(),
        }
    }

    /// Registers (or updates) a type and returns its index.
    pub(crate) fn register(&mut self, rt: ResourceType) -> usize {
        if let Some(i) = self.find(&rt.group, &rt.version, &rt.plural) {
            self.types[i].rt = rt;
            return i;
        }
        self.types.push(TypeState { rt, objects: BTreeMap::new(), log: VecDeque::new(), horizon: 0 });
        self.types.len() - 1
    }

    /// Finds a type by group, version and plural.
    pub(crate) fn find(&self, group: &str, version: &str, plural: &str) -> Option<usize> {
        self.types.iter().position(|t| t.rt.group == group && t.rt.version == version && t.rt.plural == plural)
    }

    /// Forgets all change history: older revisions become unusable.
    pub(crate) fn compact(&mut self) {
        for t in &mut self.types {
            t.log.clear();
            t.horizon = self.revision;
        }
    }

    fn bump(&mut self) -> u64 {
        self.superseded.push_back((self.revision, Instant::now()));
        if self.superseded.len() > MAX_SUPERSEDED {
            self.superseded.pop_front();
        }
        self.revision += 1;
        self.revision
    }

    /// When a later write superseded revision `rv`: `None` while `rv` is the current revision
    /// (or ahead of it). Revisions older than the remembered window report the oldest time known.
    pub(crate) fn superseded_at(&self, rv: u64) -> Option<Instant> {
        if rv >= self.revision {
            return None;
        }
        let i = self.superseded.partition_point(|(r, _)| *r < rv);
        self.superseded.get(i).or(self.superseded.front()).map(|(_, t)| *t)
    }

    fn record(&mut self, idx: usize, change: Change) {
        let t = &mut self.types[idx];
        match &change.new {
            Some(obj) => {
                t.objects.insert(change.key.clone(), obj.clone());
            }
            None => {
                t.objects.remove(&change.key);
            }
        }
        t.log.push_back(change);
        while t.log.len() > self.history {
            if let Some(dropped) = t.log.pop_front() {
                t.horizon = t.horizon.max(dropped.rv);
            }
        }
    }

    /// Works out the key of an object being written and normalises its namespace.
    fn key_for(&self, idx: usize, obj: &mut Value, ns_hint: Option<&str>) -> Result<(String, String), FakeError> {
        let rt = &self.types[idx].rt;
        let m = meta_mut(obj);
        let ns = if rt.namespaced {
            let from_obj = m.get("namespace").and_then(Value::as_str).filter(|s| !s.is_empty());
            match (ns_hint, from_obj) {
                (Some(hint), Some(own)) if hint != own => {
                    return Err(FakeError::Invalid {
                        message:
                            "the namespace of the provided object does not match the namespace sent on the request"
                                .into(),
                    });
                }
                (Some(hint), _) => hint.to_string(),
                (None, Some(own)) => own.to_string(),
                (None, None) => "default".to_string(),
            }
        } else {
            String::new()
        };
        if rt.namespaced {
            m.insert("namespace".into(), Value::String(ns.clone()));
        } else {
            m.remove("namespace");
        }
        let name = m.get("name").and_then(Value::as_str).unwrap_or_default().to_string();
        Ok((ns, name))
    }

    /// Creates an object; assigns uid, creationTimestamp, generation and resourceVersion.
    pub(crate) fn create(
        &mut self,
        idx: usize,
        mut obj: Value,
        ns_hint: Option<&str>,
    ) -> Result<Arc<Value>, FakeError> {
        if !obj.is_object() {
            return Err(FakeError::Invalid { message: "object must be a JSON object".into() });
        }
        let (ns, mut name) = self.key_for(idx, &mut obj, ns_hint)?;
        if name.is_empty() {
            let prefix = meta_str(&obj, "generateName").unwrap_or_default().to_string();
            if prefix.is_empty() {
                return Err(FakeError::Invalid {
                    message: "metadata.name: Required value: name or generateName is required".into(),
                });
            }
            name = format!("{prefix}{}", self.rng.suffix(5));
        }
        let rt = self.types[idx].rt.clone();
        if let Some(problem) = name_problem(&rt, &name) {
            return Err(FakeError::Invalid { message: format!("metadata.name: Invalid value: {name:?}: {problem}") });
        }
        let key = make_key(&ns, &name);
        if self.types[idx].objects.contains_key(&key) {
            return Err(FakeError::AlreadyExists { resource: rt.resource_name(), name });
        }
        let rv = self.bump();
        let uid = self.rng.uuid();
        {
            #[allow(clippy::expect_used)]
            let map = obj.as_object_mut().expect("OK: checked is_object above");
            map.insert("apiVersion".into(), Value::String(rt.api_version()));
            map.insert("kind".into(), Value::String(rt.kind.clone()));
        }
        let m = meta_mut(&mut obj);
        m.insert("name".into(), Value::String(name));
        m.insert("uid".into(), Value::String(uid));
        m.insert("resourceVersion".into(), Value::String(rv.to_string()));
        if has_generation(&rt) {
            m.insert("generation".into(), json!(1));
        } else {
            m.remove("generation");
        }
        m.insert("creationTimestamp".into(), Value::String(rfc3339(SystemTime::now())));
        m.remove("deletionTimestamp");
        m.remove("deletionGracePeriodSeconds");
        if rt.built_in {
            defaults(&rt, &mut obj);
            omit_zeros(&mut obj);
        }
        let obj = Arc::new(obj);
        self.record(idx, Change { rv, key, old: None, new: Some(obj.clone()) });
        Ok(obj)
    }

    /// Replaces an existing object. A stale `metadata.resourceVersion` is a conflict; a write
    /// that changes nothing keeps the old revision and records no change. Removing the last
    /// finalizer of an object being deleted deletes it.
    pub(crate) fn replace(
        &mut self,
        idx: usize,
        mut obj: Value,
        ns_hint: Option<&str>,
    ) -> Result<Arc<Value>, FakeError> {
        if !obj.is_object() {
            return Err(FakeError::Invalid { message: "object must be a JSON object".into() });
        }
        let (ns, name) = self.key_for(idx, &mut obj, ns_hint)?;
        let key = make_key(&ns, &name);
        let rt = self.types[idx].rt.clone();
        let Some(old) = self.types[idx].objects.get(&key).cloned() else {
            return Err(FakeError::NotFound { resource: rt.resource_name(), name });
        };
        let old_rv = meta_str(&old, "resourceVersion").unwrap_or_default().to_string();
        if let Some(sent) = meta_str(&obj, "resourceVersion").filter(|s| !s.is_empty())
            && sent != old_rv
        {
            return Err(FakeError::Conflict { resource: rt.resource_name(), name });
        }
        if let Some(sent_uid) = meta_str(&obj, "uid").filter(|s| !s.is_empty())
            && Some(sent_uid) != meta_str(&old, "uid")
        {
            return Err(FakeError::Conflict { resource: rt.resource_name(), name });
        }
        {
            #[allow(clippy::expect_used)]
            let map = obj.as_object_mut().expect("OK: checked is_object above");
            map.insert("apiVersion".into(), Value::String(rt.api_version()));
            map.insert("kind".into(), Value::String(rt.kind.clone()));
        }
        if rt.built_in {
            omit_zeros(&mut obj);
        }
        let old_meta = meta(&old).cloned().unwrap_or_default();
        let generation = old_meta.get("generation").and_then(Value::as_i64).unwrap_or(1);
        let bump_generation = spec_part(&obj) != spec_part(&old);
        {
            let m = meta_mut(&mut obj);
            for f in ["uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds"] {
                match old_meta.get(f) {
                    Some(v) => m.insert(f.into(), v.clone()),
                    None => m.remove(f),
                };
            }
            if has_generation(&rt) {
                m.insert("generation".into(), json!(if bump_generation { generation + 1 } else { generation }));
            } else {
                m.remove("generation");
            }
            m.insert("resourceVersion".into(), Value::String(old_rv.clone()));
        }
        if content_without_server_fields(&obj) == content_without_server_fields(&old) {
            return Ok(old);
        }
        let rv = self.bump();
        meta_mut(&mut obj).insert("resourceVersion".into(), Value::String(rv.to_string()));
        let deleting = meta(&obj).is_some_and(|m| m.contains_key("deletionTimestamp"));
        let obj = Arc::new(obj);
        if deleting && !has_finalizers(&obj) {
            self.record(idx, Change { rv, key, old: Some(obj.clone()), new: None });
        } else {
            self.record(idx, Change { rv, key, old: Some(old), new: Some(obj.clone()) });
        }
        Ok(obj)
    }

    /// Deletes an object: with finalizers it gains a `deletionTimestamp`, otherwise it is removed.
    pub(crate) fn delete(&mut self, idx: usize, key: &Key) -> Result<Deleted, FakeError> {
        let rt = self.types[idx].rt.clone();
        let Some(old) = self.types[idx].objects.get(key).cloned() else {
            return Err(FakeError::NotFound { resource: rt.resource_name(), name: key_name(key).to_string() });
        };
        if has_finalizers(&old) {
            if meta(&old).is_some_and(|m| m.contains_key("deletionTimestamp")) {
                return Ok(Deleted::Pending(old));
            }
            let rv = self.bump();
            let mut obj = (*old).clone();
            let m = meta_mut(&mut obj);
            m.insert("deletionTimestamp".into(), Value::String(rfc3339(SystemTime::now())));
            m.insert("deletionGracePeriodSeconds".into(), json!(0));
            m.insert("resourceVersion".into(), Value::String(rv.to_string()));
            let obj = Arc::new(obj);
            self.record(idx, Change { rv, key: key.clone(), old: Some(old), new: Some(obj.clone()) });
            return Ok(Deleted::Pending(obj));
        }
        let rv = self.bump();
        self.record(idx, Change { rv, key: key.clone(), old: Some(old.clone()), new: None });
        Ok(Deleted::Gone(Arc::new(with_rv(&old, rv))))
    }

    /// The objects of a type as they were at revision `rv` (which must not exceed the current
    /// revision).
    pub(crate) fn snapshot(&self, idx: usize, rv: u64) -> Result<BTreeMap<Key, Arc<Value>>, TooOld> {
        let t = &self.types[idx];
        if rv < t.horizon {
            return Err(TooOld { horizon: t.horizon });
        }
        let mut objects = t.objects.clone();
        for change in t.log.iter().rev().take_while(|c| c.rv > rv) {
            match &change.old {
                Some(old) => {
                    objects.insert(change.key.clone(), old.clone());
                }
                None => {
                    objects.remove(&change.key);
                }
            }
        }
        Ok(objects)
    }

    /// Changes of a type after revision `rv`, oldest first.
    pub(crate) fn changes_after(&self, idx: usize, rv: u64) -> Result<Vec<Change>, TooOld> {
        let t = &self.types[idx];
        if rv < t.horizon {
            return Err(TooOld { horizon: t.horizon });
        }
        let start = t.log.partition_point(|c| c.rv <= rv);
        Ok(t.log.range(start..).cloned().collect())
    }
}

/// What kube-apiserver says of an object name it refuses, in its words: most types' names are
/// RFC 1123 subdomains of at most 253 characters. Namespaces and Services have rules of their
/// own, which the fake does not check.
fn name_problem(rt: &ResourceType, name: &str) -> Option<&'static str> {
    if rt.built_in && rt.group.is_empty() && (rt.plural == "namespaces" || rt.plural == "services") {
        return None;
    }
    if name.len() > 253 {
        return Some("must be no more than 253 characters");
    }
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    let part = |p: &str| {
        !p.is_empty() && p.chars().all(|c| alnum(c) || c == '-') && p.starts_with(alnum) && p.ends_with(alnum)
    };
    if name.split('.').all(part) {
        return None;
    }
    Some(
        "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cm_type() -> ResourceType {
        ResourceType::new("", "v1", "configmaps", "ConfigMap", true)
    }

    #[test]
    fn snapshots_rewind_later_changes() {
        let mut s = Store::new(1, 100);
        let i = s.register(cm_type());
        s.create(i, json!({"metadata": {"name": "a"}}), Some("ns")).unwrap();
        let at = s.revision;
        s.create(i, json!({"metadata": {"name": "b"}}), Some("ns")).unwrap();
        s.replace(i, json!({"metadata": {"name": "a"}, "data": {"x": "1"}}), Some("ns")).unwrap();
        let snap = s.snapshot(i, at).unwrap();
        assert_eq!(snap.len(), 1);
        assert!(snap.values().next().unwrap().get("data").is_none());
    }

    #[test]
    fn no_op_replace_keeps_the_revision() {
        let mut s = Store::new(1, 100);
        let i = s.register(cm_type());
        s.create(i, json!({"metadata": {"name": "a"}, "data": {"x": "1"}}), None).unwrap();
        let rv = s.revision;
        s.replace(i, json!({"metadata": {"name": "a"}, "data": {"x": "1"}}), None).unwrap();
        assert_eq!(s.revision, rv);
    }

    #[test]
    fn trimmed_history_makes_old_revisions_too_old() {
        let mut s = Store::new(1, 2);
        let i = s.register(cm_type());
        let start = s.revision;
        for n in 0..4 {
            s.create(i, json!({"metadata": {"name": format!("o{n}")}}), None).unwrap();
        }
        assert!(s.changes_after(i, start).is_err());
        assert_eq!(s.changes_after(i, s.revision - 2).unwrap().len(), 2);
    }
}
