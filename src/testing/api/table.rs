//! Server-side printing: the `meta.k8s.io` Table kubectl asks for (`Accept:
//! application/json;as=Table;v=v1;g=meta.k8s.io`), so `kubectl get` shows the columns a real
//! server computes (pods: READY, STATUS, RESTARTS, AGE; `-o wide`: IP, NODE, ...).
//!
//! Pods, deployments, config maps, secrets, namespaces and services have their own columns,
//! worked out as the API server's printers do; every other type gets NAME and AGE, which is what
//! the real server shows for a custom resource without printer columns.

use std::time::SystemTime;

use serde_json::{Map, Value, json};

use super::super::ResourceType;

/// What each row carries besides its cells (`includeObject`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Include {
    None,
    /// `PartialObjectMetadata` (the default).
    Metadata,
    Object,
}

impl Include {
    /// Parses `includeObject`; an unknown value is the 400's message.
    pub(crate) fn parse(value: Option<&str>) -> Result<Include, String> {
        match value.unwrap_or_default() {
            "" | "Metadata" => Ok(Include::Metadata),
            "None" => Ok(Include::None),
            "Object" => Ok(Include::Object),
            other => Err(format!("includeObject: unsupported value {other:?}: must be None, Metadata or Object")),
        }
    }
}

/// A column: its header, its type, and whether only `-o wide` shows it (priority 1).
struct Column {
    name: &'static str,
    ty: &'static str,
    description: &'static str,
    wide: bool,
}

const fn col(name: &'static str, ty: &'static str, description: &'static str, wide: bool) -> Column {
    Column { name, ty, description, wide }
}

const NAME: Column = col("Name", "string", "Name must be unique within a namespace.", false);
const AGE: Column = col(
    "Age",
    "string",
    "CreationTimestamp is a timestamp representing the server time when this object was created.",
    false,
);

fn columns(rt: &ResourceType) -> Vec<Column> {
    if !rt.built_in {
        return vec![NAME, AGE];
    }
    match (rt.group.as_str(), rt.plural.as_str()) {
        ("", "pods") => vec![
            NAME,
            col("Ready", "string", "The aggregate readiness state of this pod for accepting traffic.", false),
            col("Status", "string", "The aggregate status of the containers in this pod.", false),
            col("Restarts", "string", "The number of times the containers in this pod have been restarted.", false),
            AGE,
            col("IP", "string", "IP address allocated to the pod.", true),
            col("Node", "string", "Name of the Node this pod is assigned to.", true),
            col("Nominated Node", "string", "Name of the node nominated by the scheduler.", true),
            col("Readiness Gates", "string", "Pod readiness gates.", true),
        ],
        ("apps", "deployments") => vec![
            NAME,
            col("Ready", "string", "Number of the pod with ready state", false),
            col(
                "Up-to-date",
                "string",
                "Total number of non-terminated pods targeted by this deployment that have the desired template spec.",
                false,
            ),
            col(
                "Available",
                "string",
                "Total number of available pods (ready for at least minReadySeconds) targeted by this deployment.",
                false,
            ),
            AGE,
            col("Containers", "string", "Names of each container in the template.", true),
            col("Images", "string", "Images referenced by each container in the template.", true),
            col("Selector", "string", "Label selector for pods.", true),
        ],
        ("", "configmaps") => vec![NAME, col("Data", "string", "Number of keys.", false), AGE],
        ("", "secrets") => vec![
            NAME,
            col("Type", "string", "The type of secret", false),
            col("Data", "string", "Number of keys.", false),
            AGE,
        ],
        ("", "namespaces") => {
            vec![NAME, col("Status", "string", "The status of the namespace", false), AGE]
        }
        ("", "services") => vec![
            NAME,
            col("Type", "string", "The type of the service.", false),
            col("Cluster-IP", "string", "The cluster IP of the service.", false),
            col("External-IP", "string", "The external IP of the service.", false),
            col("Port(s)", "string", "The ports of the service.", false),
            AGE,
            col("Selector", "string", "The label selector of the service.", true),
        ],
        ("coordination.k8s.io", "leases") => vec![
            NAME,
            col("Holder", "string", "holderIdentity contains the identity of the holder of a current lease.", false),
            AGE,
        ],
        _ => vec![NAME, AGE],
    }
}

/// The cells of one object's row, in the order of [`columns`].
fn cells(rt: &ResourceType, obj: &Value, now: SystemTime) -> Vec<Value> {
    let name = Value::String(text(obj, "/metadata/name").to_string());
    let age = Value::String(age(obj, now));
    if !rt.built_in {
        return vec![name, age];
    }
    match (rt.group.as_str(), rt.plural.as_str()) {
        ("", "pods") => pod_cells(obj, name, age, now),
        ("apps", "deployments") => {
            let num = |p: &str| obj.pointer(p).and_then(Value::as_i64).unwrap_or(0);
            let containers = list(obj, "/spec/template/spec/containers");
            let join = |field: &str| {
                containers
                    .iter()
                    .map(|c| c.get(field).and_then(Value::as_str).unwrap_or_default())
                    .collect::<Vec<_>>()
                    .join(",")
            };
            vec![
                name,
                json!(format!(
                    "{}/{}",
                    num("/status/readyReplicas"),
                    obj.pointer("/spec/replicas").and_then(Value::as_i64).unwrap_or(1)
                )),
                json!(num("/status/updatedReplicas")),
                json!(num("/status/availableReplicas")),
                age,
                json!(join("name")),
                json!(join("image")),
                json!(selector(obj.pointer("/spec/selector/matchLabels"))),
            ]
        }
        ("", "configmaps") => vec![name, json!(count(obj, "/data") + count(obj, "/binaryData")), age],
        ("", "secrets") => vec![name, json!(text(obj, "/type")), json!(count(obj, "/data")), age],
        ("", "namespaces") => {
            let phase = match text(obj, "/status/phase") {
                "" => "Active",
                phase => phase,
            };
            vec![name, json!(phase), age]
        }
        ("", "services") => {
            let ports: Vec<String> = list(obj, "/spec/ports")
                .iter()
                .map(|p| {
                    let port = p.get("port").and_then(Value::as_i64).unwrap_or(0);
                    let protocol = p.get("protocol").and_then(Value::as_str).unwrap_or("TCP");
                    match p.get("nodePort").and_then(Value::as_i64) {
                        Some(node) => format!("{port}:{node}/{protocol}"),
                        None => format!("{port}/{protocol}"),
                    }
                })
                .collect();
            let ty = match text(obj, "/spec/type") {
                "" => "ClusterIP",
                ty => ty,
            };
            let external =
                list(obj, "/spec/externalIPs").iter().filter_map(Value::as_str).collect::<Vec<_>>().join(",");
            vec![
                name,
                json!(ty),
                json!(none_if_empty(text(obj, "/spec/clusterIP"))),
                json!(none_if_empty(&external)),
                json!(none_if_empty(&ports.join(","))),
                age,
                json!(none_if_empty(&selector(obj.pointer("/spec/selector")))),
            ]
        }
        // An empty holder (a released lease) prints as an empty cell, as the real printer does.
        ("coordination.k8s.io", "leases") => vec![name, json!(text(obj, "/spec/holderIdentity")), age],
        _ => vec![name, age],
    }
}

/// The pod printer: READY counts ready containers, STATUS is the most telling reason (a waiting
/// or terminated container's, an init container's progress, `Terminating` once deleted),
/// RESTARTS adds up restarts and says how long ago the last one ended.
fn pod_cells(obj: &Value, name: Value, age: Value, now: SystemTime) -> Vec<Value> {
    let containers = list(obj, "/spec/containers");
    let statuses = list(obj, "/status/containerStatuses");
    let ready = statuses.iter().filter(|s| s.get("ready").and_then(Value::as_bool) == Some(true)).count();
    let mut restarts = 0;
    let mut last_restart: Option<SystemTime> = None;
    let mut reason = match text(obj, "/status/reason") {
        "" => text(obj, "/status/phase").to_string(),
        reason => reason.to_string(),
    };
    let mut note_restart = |status: &Value| {
        restarts += status.get("restartCount").and_then(Value::as_i64).unwrap_or(0);
        let finished = status.pointer("/lastState/terminated/finishedAt").and_then(Value::as_str).and_then(parse_time);
        if finished.is_some_and(|f| last_restart.is_none_or(|l| f > l)) {
            last_restart = finished;
        }
    };
    let init = list(obj, "/spec/initContainers");
    let mut initializing = false;
    for (i, status) in list(obj, "/status/initContainerStatuses").iter().enumerate() {
        note_restart(status);
        let terminated = status.pointer("/state/terminated");
        let waiting = status.pointer("/state/waiting/reason").and_then(Value::as_str).unwrap_or_default();
        match terminated {
            Some(t) if t.get("exitCode").and_then(Value::as_i64) == Some(0) => continue,
            Some(t) => {
                reason = match t.get("reason").and_then(Value::as_str).unwrap_or_default() {
                    "" => match t.get("signal").and_then(Value::as_i64).unwrap_or(0) {
                        0 => format!("Init:ExitCode:{}", t.get("exitCode").and_then(Value::as_i64).unwrap_or(0)),
                        signal => format!("Init:Signal:{signal}"),
                    },
                    r => format!("Init:{r}"),
                }
            }
            None if !waiting.is_empty() && waiting != "PodInitializing" => reason = format!("Init:{waiting}"),
            None => reason = format!("Init:{i}/{}", init.len()),
        }
        initializing = true;
        break;
    }
    if !initializing {
        let mut running = false;
        for status in statuses.iter().rev() {
            note_restart(status);
            let waiting = status.pointer("/state/waiting/reason").and_then(Value::as_str).unwrap_or_default();
            let terminated = status.pointer("/state/terminated");
            if !waiting.is_empty() {
                reason = waiting.to_string();
            } else if let Some(t) = terminated {
                reason = match t.get("reason").and_then(Value::as_str).unwrap_or_default() {
                    "" => match t.get("signal").and_then(Value::as_i64).unwrap_or(0) {
                        0 => format!("ExitCode:{}", t.get("exitCode").and_then(Value::as_i64).unwrap_or(0)),
                        signal => format!("Signal:{signal}"),
                    },
                    r => r.to_string(),
                };
            } else if status.get("ready").and_then(Value::as_bool) == Some(true)
                && status.pointer("/state/running").is_some()
            {
                running = true;
            }
        }
        if reason == "Completed" && running {
            reason = "Running".to_string();
        }
    }
    if obj.pointer("/metadata/deletionTimestamp").is_some_and(|t| !t.is_null()) {
        reason = if text(obj, "/status/reason") == "NodeLost" { "Unknown".into() } else { "Terminating".into() };
    }
    let restarts = match last_restart {
        Some(at) => {
            format!("{restarts} ({} ago)", human_duration(now.duration_since(at).unwrap_or_default().as_secs()))
        }
        None => restarts.to_string(),
    };
    let gates = list(obj, "/spec/readinessGates");
    let gates = if gates.is_empty() {
        "<none>".to_string()
    } else {
        let conditions = list(obj, "/status/conditions");
        let met = gates
            .iter()
            .filter(|g| {
                let ty = g.get("conditionType");
                conditions
                    .iter()
                    .any(|c| c.get("type") == ty && c.get("status").and_then(Value::as_str) == Some("True"))
            })
            .count();
        format!("{met}/{}", gates.len())
    };
    vec![
        name,
        json!(format!("{ready}/{}", containers.len())),
        json!(reason),
        json!(restarts),
        age,
        json!(none_if_empty(text(obj, "/status/podIP"))),
        json!(none_if_empty(text(obj, "/spec/nodeName"))),
        json!(none_if_empty(text(obj, "/status/nominatedNodeName"))),
        json!(gates),
    ]
}

fn text<'a>(obj: &'a Value, pointer: &str) -> &'a str {
    obj.pointer(pointer).and_then(Value::as_str).unwrap_or_default()
}

fn list<'a>(obj: &'a Value, pointer: &str) -> &'a [Value] {
    obj.pointer(pointer).and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default()
}

fn count(obj: &Value, pointer: &str) -> usize {
    obj.pointer(pointer).and_then(Value::as_object).map_or(0, Map::len)
}

fn none_if_empty(s: &str) -> String {
    if s.is_empty() { "<none>".to_string() } else { s.to_string() }
}

/// `k=v,k2=v2` from a map of labels.
pub(super) fn selector(labels: Option<&Value>) -> String {
    let Some(Value::Object(labels)) = labels else { return String::new() };
    labels.iter().map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default())).collect::<Vec<_>>().join(",")
}

fn parse_time(text: &str) -> Option<SystemTime> {
    let t: k8s_openapi::jiff::Timestamp = text.parse().ok()?;
    let secs = u64::try_from(t.as_second()).ok()?;
    SystemTime::UNIX_EPOCH.checked_add(std::time::Duration::from_secs(secs))
}

fn age(obj: &Value, now: SystemTime) -> String {
    match obj.pointer("/metadata/creationTimestamp").and_then(Value::as_str).and_then(parse_time) {
        Some(created) => human_duration(now.duration_since(created).unwrap_or_default().as_secs()),
        None => "<unknown>".to_string(),
    }
}

/// A duration the way kubectl prints ages: `45s`, `5m30s`, `3h`, `2d4h`, `1y30d`; the precision
/// drops as the duration grows.
pub(crate) fn human_duration(seconds: u64) -> String {
    let (minutes, hours) = (seconds / 60, seconds / 3600);
    let days = hours / 24;
    match () {
        _ if seconds < 120 => format!("{seconds}s"),
        _ if minutes < 10 && !seconds.is_multiple_of(60) => format!("{minutes}m{}s", seconds % 60),
        _ if minutes < 180 => format!("{minutes}m"),
        _ if hours < 8 && !minutes.is_multiple_of(60) => format!("{hours}h{}m", minutes % 60),
        _ if hours < 48 => format!("{hours}h"),
        _ if hours < 24 * 8 && !hours.is_multiple_of(24) => format!("{days}d{}h", hours % 24),
        _ if hours < 24 * 365 * 2 => format!("{days}d"),
        _ if hours < 24 * 365 * 8 && !days.is_multiple_of(365) => format!("{}y{}d", days / 365, days % 365),
        _ => format!("{}y", days / 365),
    }
}

/// The `meta.k8s.io` Table of `objects`, with `metadata` (resourceVersion, continue) as given.
pub(crate) fn table(
    rt: &ResourceType,
    objects: &[&Value],
    include: Include,
    api_version: &str,
    metadata: Map<String, Value>,
) -> Value {
    let now = SystemTime::now();
    let definitions: Vec<Value> = columns(rt)
        .iter()
        .map(|c| {
            let mut d = json!({"name": c.name, "type": c.ty, "format": "", "description": c.description,
                               "priority": i32::from(c.wide)});
            if c.name == "Name" {
                d["format"] = json!("name");
            }
            d
        })
        .collect();
    let rows: Vec<Value> = objects
        .iter()
        .map(|obj| {
            let mut row = json!({"cells": cells(rt, obj, now)});
            match include {
                Include::None => {}
                Include::Metadata => row["object"] = super::partial(obj),
                Include::Object => row["object"] = (*obj).clone(),
            }
            row
        })
        .collect();
    json!({"kind": "Table", "apiVersion": api_version, "metadata": metadata,
           "columnDefinitions": definitions, "rows": rows})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_print_as_kubectl_prints_them() {
        let cases = [
            (0, "0s"),
            (119, "119s"),
            (120, "2m"),
            (330, "5m30s"),
            (600, "10m"),
            (3 * 3600, "3h"),
            (3 * 3600 + 25 * 60, "3h25m"),
            (30 * 3600, "30h"),
            (52 * 3600, "2d4h"),
            (10 * 86_400, "10d"),
            (400 * 86_400, "400d"),
            (3 * 365 * 86_400 + 5 * 86_400, "3y5d"),
            (9 * 365 * 86_400, "9y"),
        ];
        for (secs, want) in cases {
            assert_eq!(human_duration(secs), want, "{secs}s");
        }
    }

    fn pod_rt() -> ResourceType {
        ResourceType::of::<k8s_openapi::api::core::v1::Pod>()
    }

    #[test]
    fn a_pod_row_shows_readiness_status_and_restarts() {
        let pod = json!({
            "metadata": {"name": "web-1", "creationTimestamp": "2020-01-01T00:00:00Z"},
            "spec": {"containers": [{"name": "a"}, {"name": "b"}], "nodeName": "node-1"},
            "status": {"phase": "Running", "podIP": "10.0.0.7", "containerStatuses": [
                {"name": "a", "ready": true, "restartCount": 2, "state": {"running": {}}},
                {"name": "b", "ready": false, "restartCount": 1, "state": {"waiting": {"reason": "CrashLoopBackOff"}}},
            ]},
        });
        let row = cells(&pod_rt(), &pod, SystemTime::now());
        assert_eq!(row[0], "web-1");
        assert_eq!(row[1], "1/2");
        assert_eq!(row[2], "CrashLoopBackOff");
        assert_eq!(row[3], "3");
        assert!(row[4].as_str().unwrap().contains('y'), "{row:?}");
        assert_eq!(row[5], "10.0.0.7");
        assert_eq!(row[6], "node-1");
        assert_eq!(row[7], "<none>");
        assert_eq!(row[8], "<none>");
    }

    #[test]
    fn a_pod_in_init_or_deleted_says_so() {
        let init = json!({
            "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "a"}], "initContainers": [{"name": "i1"}, {"name": "i2"}]},
            "status": {"phase": "Pending", "initContainerStatuses": [
                {"name": "i1", "state": {"terminated": {"exitCode": 0}}},
                {"name": "i2", "state": {"running": {}}},
            ]},
        });
        assert_eq!(cells(&pod_rt(), &init, SystemTime::now())[2], "Init:1/2");
        let deleted = json!({"metadata": {"name": "p", "deletionTimestamp": "2020-01-01T00:00:00Z"},
                             "spec": {"containers": [{"name": "a"}]}, "status": {"phase": "Running"}});
        let row = cells(&pod_rt(), &deleted, SystemTime::now());
        assert_eq!(row[2], "Terminating");
        assert_eq!(row[4], "<unknown>");
    }

    #[test]
    fn a_table_has_one_definition_per_cell_and_the_row_object_asked_for() {
        let pod = json!({"metadata": {"name": "p", "namespace": "ns"}, "spec": {"containers": []}});
        let t = table(&pod_rt(), &[&pod], Include::Metadata, "meta.k8s.io/v1", Map::new());
        assert_eq!(t["columnDefinitions"].as_array().unwrap().len(), t["rows"][0]["cells"].as_array().unwrap().len());
        assert_eq!(t["rows"][0]["object"]["kind"], "PartialObjectMetadata");
        assert_eq!(t["rows"][0]["object"]["metadata"]["namespace"], "ns");
        let t = table(&pod_rt(), &[&pod], Include::None, "meta.k8s.io/v1", Map::new());
        assert!(t["rows"][0].get("object").is_none());
        assert!(Include::parse(Some("Everything")).is_err());
    }
}
