//! Your own struct, only your fields: a game server's view of the pods it schedules players on
//! (name, namespace, node, phase, IP) and of the nodes they run on (name, Ready), kept current by
//! two watchers and read once per frame. `kube_watcher::resource!` makes each struct a resource,
//! namespaced (pods) or cluster-scoped (nodes); every field it does not name is skipped by the
//! decoder (protobuf or JSON), never built, so each cached object costs a fraction of a `Pod` or
//! a `Node` (docs/performance.md, "Projections").
//!
//! ```text
//! cargo run --example projection --features testing               # embedded fake cluster
//! cargo run --example projection --features testing -- --cluster   # your kubeconfig / in-cluster
//! ```

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube_watcher::crossbeam_channel::{after, select, tick};
use kube_watcher::testing::DemoWorkload;
use kube_watcher::{Api, Client, Event, Watcher};
use serde::Deserialize;

/// A pod, as far as the game server cares.
#[derive(Debug, Deserialize)]
struct GamePod {
    metadata: ObjectMeta,
    spec: Option<GamePodSpec>,
    status: Option<GamePodStatus>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct GamePodSpec {
    node_name: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct GamePodStatus {
    phase: Option<String>,
    #[serde(rename = "podIP")]
    pod_ip: Option<String>,
}

kube_watcher::resource!(GamePod, group = "", version = "v1", kind = "Pod", plural = "pods", namespaced);

/// A node, as far as the game server cares: is it Ready?
#[derive(Debug, Deserialize)]
struct GameNode {
    metadata: ObjectMeta,
    status: Option<GameNodeStatus>,
}

#[derive(Debug, Deserialize)]
struct GameNodeStatus {
    conditions: Option<Vec<GameNodeCondition>>,
}

#[derive(Debug, Deserialize)]
struct GameNodeCondition {
    // `type` is a Rust keyword: the field takes another name and serde the API's.
    #[serde(rename = "type")]
    kind: String,
    status: String,
}

// Nodes belong to no namespace: `cluster` instead of `namespaced`.
kube_watcher::resource!(GameNode, group = "", version = "v1", kind = "Node", plural = "nodes", cluster);

impl GamePod {
    fn node(&self) -> &str {
        self.spec.as_ref().and_then(|s| s.node_name.as_deref()).unwrap_or("(unscheduled)")
    }
    /// The address players connect to, once the pod runs.
    fn address(&self) -> Option<&str> {
        let status = self.status.as_ref()?;
        (status.phase.as_deref() == Some("Running")).then_some(status.pod_ip.as_deref()).flatten()
    }
}

impl GameNode {
    fn name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or("")
    }
    fn ready(&self) -> bool {
        let conditions = self.status.as_ref().and_then(|s| s.conditions.as_deref()).unwrap_or_default();
        conditions.iter().any(|c| c.kind == "Ready" && c.status == "True")
    }
}

fn main() -> Result<(), kube_watcher::Error> {
    let cluster = std::env::args().any(|a| a == "--cluster");
    let mut demo = (!cluster).then(DemoWorkload::start);
    let client = match &demo {
        Some(demo) => Client::from_url(&demo.url())?,
        None => Client::try_default()?,
    };
    let pods: Api<GamePod> = Api::all(client.clone());
    // managedFields are metadata, which the struct keeps whole: skip them too.
    let watcher = Watcher::builder(pods).without_managed_fields().start()?;
    let store = watcher.store();
    // Only its store is read: a watcher nobody receives from queues no events.
    let node_watcher = Watcher::builder(Api::<GameNode>::all(client)).without_managed_fields().start()?;
    let nodes = node_watcher.store();
    store.wait_until_ready(Duration::from_secs(30))?;
    nodes.wait_until_ready(Duration::from_secs(30))?;

    let frame = tick(Duration::from_millis(100)); // 10 frames a second
    let workload = tick(DemoWorkload::STEP);
    let end = after(Duration::from_secs(if cluster { 3600 } else { 3 }));
    let (mut frames, mut seen) = (0u64, (u64::MAX, u64::MAX));
    loop {
        select! {
            recv(watcher.receiver()) -> event => match event {
                Ok(Ok(Event::Delete(pod))) => println!("gone: {}", pod.metadata.name.as_deref().unwrap_or("")),
                Ok(Ok(_)) => {}
                Ok(Err(e)) => eprintln!("pods: {e} (retrying)"),
                Err(_) => break,
            },
            recv(workload) -> _ => {
                if let Some(demo) = demo.as_mut() {
                    demo.step();
                }
            }
            recv(frame) -> _ => {
                frames += 1;
                let generation = (store.generation(), nodes.generation());
                if generation == seen {
                    continue; // nothing changed since the last frame
                }
                seen = generation;
                let ready: Vec<_> = nodes.state().into_iter().filter(|n| n.ready()).collect();
                let mut by_node: BTreeMap<&str, Vec<String>> = BTreeMap::new();
                let pods = store.state();
                for pod in &pods {
                    if !ready.iter().any(|n| n.name() == pod.node()) {
                        continue; // no players on a node that is not Ready
                    }
                    if let Some(ip) = pod.address() {
                        by_node.entry(pod.node()).or_default().push(format!(
                            "{}={ip}",
                            pod.metadata.name.as_deref().unwrap_or("")
                        ));
                    }
                }
                let running: usize = by_node.values().map(Vec::len).sum();
                let mut ready: Vec<&str> = ready.iter().map(|n| n.name()).collect();
                ready.sort_unstable();
                println!("frame {frames}: {running} of {} pods take players; ready nodes: {}", pods.len(), ready.join(", "));
                for (node, servers) in &by_node {
                    println!("  {node}: {}", servers.join(" "));
                }
            }
            recv(end) -> _ => break,
        }
    }
    let with_managed_fields = store.state().iter().filter(|p| p.metadata.managed_fields.is_some()).count();
    println!("{} pods cached, {with_managed_fields} with managedFields", store.len());
    Ok(())
}
