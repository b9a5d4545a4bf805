//! A cache with no event loop: start a watcher, wait for the first list, then read the store
//! whenever the program needs it — by name, by index, or all of it.
//!
//! ```text
//! cargo run --example cache --features testing               # embedded fake cluster
//! cargo run --example cache --features testing -- --cluster   # your kubeconfig / in-cluster
//! ```

use std::collections::BTreeSet;
use std::thread;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube_watcher::testing::DemoWorkload;
use kube_watcher::{Api, Client, ObjectRef, Store, Watcher};

fn main() -> Result<(), kube_watcher::Error> {
    let cluster = std::env::args().any(|a| a == "--cluster");
    let mut demo = (!cluster).then(DemoWorkload::start);
    let client = match &demo {
        Some(demo) => Client::from_url(&demo.url())?,
        None => Client::try_default()?,
    };

    // Nobody calls recv() on this watcher, so it queues no events at all: the store alone is
    // kept current. The "node" index answers "which pods run on node X?" without a scan.
    let pods: Api<Pod> = Api::all(client);
    let watcher = Watcher::builder(pods)
        .index("node", |pod: &Pod| pod.spec.iter().filter_map(|s| s.node_name.clone()).collect())
        .transform(|pod: &mut Pod| pod.metadata.managed_fields = None) // not needed here: save memory
        .start()?;
    let store = watcher.store();
    // Blocks until the first full list is in; on failure the error says why (a 403, say).
    store.wait_until_ready(Duration::from_secs(30))?;
    report(&store);

    // By name: ObjectRef::new("web-0").within("default") is the same key.
    if let Some(pod) = store.state().first() {
        let key = ObjectRef::from_obj(pod.as_ref());
        let again = store.get(&key).map(|p| p.metadata.resource_version.clone());
        println!("get {}/{}: resourceVersion {:?}", key.namespace().unwrap_or(""), key.name(), again.flatten());
    }

    // The store follows the cluster in the background; here the demo workload moves on.
    if let Some(demo) = demo.as_mut() {
        let before = store.generation();
        for _ in 0..12 {
            demo.step();
            thread::sleep(DemoWorkload::STEP);
        }
        println!("after 3 s of workload (store generation {before} -> {}):", store.generation());
        report(&store);
    }
    Ok(())
}

fn report(store: &Store<Pod>) {
    println!("{} pods cached", store.len());
    let nodes: BTreeSet<String> =
        store.state().iter().filter_map(|p| p.spec.as_ref().and_then(|s| s.node_name.clone())).collect();
    for node in &nodes {
        let mut names: Vec<String> = store.index("node", node).iter().filter_map(|p| p.metadata.name.clone()).collect();
        names.sort();
        println!("  on {node}: {}", names.join(", "));
    }
    println!("  in namespace default: {}", store.index("namespace", "default").len());
}
