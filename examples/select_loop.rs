//! A game-style main loop: one thread, one `select!` over two watchers (pods and nodes) and a
//! frame tick. Events are handled as they arrive; the per-frame work runs only when a store's
//! generation says something changed since the last frame.
//!
//! ```text
//! cargo run --example select_loop --features testing [-- --seconds N]
//! ```
//!
//! It runs against the embedded demo cluster; with a real one, build the client with
//! `Client::try_default()` instead.

use std::time::Duration;

use crossbeam_channel::{after, select, tick};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube_watcher::testing::DemoWorkload;
use kube_watcher::{Api, Client, Config, Event, Watcher};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let seconds = match std::env::args().skip(1).collect::<Vec<_>>().as_slice() {
        [] => 12,
        [flag, n] if flag == "--seconds" => n.parse()?,
        _ => return Err("usage: select_loop [--seconds N]".into()),
    };
    let mut demo = DemoWorkload::start();
    let client = Client::from_url(&demo.url())?;
    let pods = Watcher::new(Api::<Pod>::all(client.clone()), Config::default())?;
    let nodes = Watcher::new(Api::<Node>::all(client), Config::default())?;
    let (pod_store, node_store) = (pods.store(), nodes.store());

    let frame = tick(Duration::from_millis(100)); // 10 frames a second
    let workload = tick(DemoWorkload::STEP);
    let end = after(Duration::from_secs(seconds));
    let mut last_seen = (u64::MAX, u64::MAX); // store generations the last frame worked on
    let (mut frames, mut idle_frames) = (0u64, 0u64);
    loop {
        select! {
            recv(pods.receiver()) -> msg => match msg {
                Ok(Ok(Event::Delete(pod))) => println!("  pod {} is gone", pod.metadata.name.as_deref().unwrap_or("")),
                Ok(Ok(_)) => {} // the store has it already; the frame will look
                Ok(Err(e)) => println!("  pods: {e} (retrying)"),
                Err(_) => break, // the watcher ended
            },
            recv(nodes.receiver()) -> msg => match msg {
                Ok(Ok(Event::Apply(node))) => println!("  node {} changed", node.metadata.name.as_deref().unwrap_or("")),
                Ok(Ok(_)) => {}
                Ok(Err(e)) => println!("  nodes: {e} (retrying)"),
                Err(_) => break,
            },
            recv(frame) -> _ => {
                frames += 1;
                let now = (pod_store.generation(), node_store.generation());
                if now == last_seen {
                    idle_frames += 1; // nothing changed: skip the work
                } else {
                    last_seen = now;
                    // The per-frame work: here, running pods per node.
                    let mut nodes = node_store.state();
                    nodes.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
                    let summary: Vec<String> = nodes.iter().filter_map(|node| {
                        let name = node.metadata.name.as_deref()?;
                        let running = pod_store.state().iter().filter(|p| {
                            p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(name)
                                && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
                        }).count();
                        Some(format!("{name}: {running} running"))
                    }).collect();
                    println!("frame {frames}: {} pods; {}", pod_store.len(), summary.join(", "));
                }
            },
            recv(workload) -> _ => {
                if let Some(note) = demo.step() {
                    println!("  demo: {note}");
                }
            },
            recv(end) -> _ => break,
        }
    }
    println!("{frames} frames, {idle_frames} of them skipped because nothing had changed");
    Ok(())
}
