//! Saving memory: the same pods cached four ways, with what each store holds measured (as the
//! size of its objects in JSON, a proxy: decoded objects take several times more heap).
//!
//! ```text
//! cargo run --example metadata --features testing
//! ```
//!
//! `metadata_watcher` asks the server for `PartialObjectMetadata`, so spec and status never
//! cross the wire; a watcher steps over `managedFields` (the server's record of which client set
//! which field) without decoding it, so nothing of it is ever allocated, unless
//! `with_managed_fields()` asks for them. (A `transform` could clear them too, but only after
//! decoding them: the same store, more work.)

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube_watcher::testing::FakeApiServer;
use kube_watcher::{Api, Client, Config, Watcher, metadata_watcher};
use serde::Serialize;
use serde_json::json;

const PODS: usize = 300;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let server = FakeApiServer::start();
    for i in 0..PODS {
        server.create(&realistic_pod(i))?;
    }
    let client = Client::from_url(&server.url())?;
    let pods = || Api::<Pod>::all(client.clone());

    let full = Watcher::builder(pods()).with_managed_fields().start()?;
    let trimmed = Watcher::new(pods(), Config::default())?;
    let metadata = Watcher::builder(pods().into_metadata()).with_managed_fields().start()?;
    let metadata_trimmed = metadata_watcher(pods(), Config::default())?;

    println!("{PODS} pods, what each store holds:");
    show("full Pod objects, with_managed_fields()", json_bytes(&full)?);
    show("Pod, by default (no managedFields)", json_bytes(&trimmed)?);
    show("metadata_watcher, with_managed_fields()", json_bytes(&metadata)?);
    show("metadata_watcher, no managedFields", json_bytes(&metadata_trimmed)?);
    Ok(())
}

fn show(what: &str, bytes: usize) {
    println!("  {what:<40} {:>6} KB", bytes / 1024);
}

/// Waits for the watcher's first list, then adds up the JSON size of what its store holds.
fn json_bytes<K: kube_watcher::Watchable + Serialize>(w: &Watcher<K>) -> Result<usize, Box<dyn std::error::Error>> {
    w.store().wait_until_ready(Duration::from_secs(30))?;
    let mut total = 0;
    for obj in w.store().state() {
        total += serde_json::to_vec(obj.as_ref())?.len();
    }
    Ok(total)
}

/// A pod shaped like one a Deployment makes: labels, owner, managedFields, two containers
/// and a status.
fn realistic_pod(i: usize) -> Pod {
    let name = format!("web-{i}");
    let container = |name: &str| {
        json!({"name": name, "image": format!("registry.example/{name}:1.4.2"),
               "env": (0..8).map(|e| json!({"name": format!("SETTING_{e}"), "value": "a value of some length"})).collect::<Vec<_>>(),
               "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}},
               "ports": [{"containerPort": 8080, "protocol": "TCP"}]})
    };
    let spec = json!({"containers": [container("app"), container("proxy")], "nodeName": format!("node-{}", i % 3)});
    let managed = json!([{"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1",
                          "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:labels": {"f:app": {}, "f:pod-template-hash": {}}},
                          "f:spec": {"f:containers": {"k:{\"name\":\"app\"}": {"f:image": {}, "f:env": {}, "f:resources": {}}}}}},
                         {"manager": "kubelet", "operation": "Update", "apiVersion": "v1", "subresource": "status",
                          "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {"f:conditions": {}, "f:containerStatuses": {}, "f:phase": {}, "f:podIP": {}}}}]);
    let pod = json!({
        "metadata": {
            "name": name, "namespace": "shop",
            "labels": BTreeMap::from([("app", "web"), ("pod-template-hash", "5d9c7b8f6")]),
            "annotations": {"prometheus.io/scrape": "true", "prometheus.io/port": "8080"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-5d9c7b8f6", "uid": "0b7e-11", "controller": true}],
            "managedFields": managed,
        },
        "spec": spec,
        "status": {"phase": "Running", "podIP": format!("10.0.{}.{}", i / 250, i % 250),
                   "conditions": [{"type": "Ready", "status": "True"}, {"type": "ContainersReady", "status": "True"}]},
    });
    // The JSON above is a valid Pod.
    serde_json::from_value(pod).unwrap_or_default()
}
