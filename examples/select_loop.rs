use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube_watcher::crossbeam_channel::{select, tick};
use kube_watcher::{Api, Client, Config, Event, Watcher};

fn main() -> Result<(), kube_watcher::Error> {
    let client = Client::try_default()?;
    let pods = Watcher::new(Api::<Pod>::all(client.clone()), Config::default())?;
    let nodes = Watcher::new(Api::<Node>::all(client), Config::default())?;
    let frame = tick(Duration::from_millis(100)); // 10 frames a second
    let (mut frames, mut seen) = (0, (u64::MAX, u64::MAX));
    loop {
        select! {
            recv(pods.receiver()) -> event => match event {
                Ok(Ok(Event::Delete(pod))) => println!("pod {} is gone", pod.metadata.name.as_deref().unwrap_or("")),
                Ok(Ok(_)) => {} // the store has it already; the next frame will look
                Ok(Err(e)) => eprintln!("pods: {e} (retrying)"),
                Err(_) => break, // the watcher ended
            },
            recv(nodes.receiver()) -> event => match event {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => eprintln!("nodes: {e} (retrying)"),
                Err(_) => break,
            },
            recv(frame) -> _ => {
                frames += 1;
                // Work only when a cache changed since the last frame: O(1) to find out.
                let now = (pods.store().generation(), nodes.store().generation());
                if now != seen {
                    seen = now;
                    println!("frame {frames}: {} pods on {} nodes", pods.store().len(), nodes.store().len());
                }
            }
        }
    }
    Ok(())
}
