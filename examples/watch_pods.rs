use k8s_openapi::api::core::v1::Pod;
use kube_watcher::{Api, Client, Config, Event, Watcher};

fn main() -> Result<(), kube_watcher::Error> {
    let client = Client::try_default()?; // KUBECONFIG, ~/.kube/config, else in-cluster
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let watcher = Watcher::new(pods, Config::default().labels("app=web"))?;
    let store = watcher.store(); // always current; cheap to clone
    // Every event from the start: the current state (Init, InitApply…, InitDone), then changes.
    for event in &watcher {
        match event {
            Ok(Event::InitApply(pod)) => println!("listed   {}", pod.metadata.name.as_deref().unwrap_or("")),
            Ok(Event::InitDone) => println!("in sync: {} pods cached", store.len()),
            Ok(Event::Apply(pod)) => println!("changed  {}", pod.metadata.name.as_deref().unwrap_or("")),
            Ok(Event::Delete(pod)) => println!("deleted  {}", pod.metadata.name.as_deref().unwrap_or("")),
            Ok(Event::Init) => {} // a (re)list starts
            Err(e) => eprintln!("watch trouble, retrying: {e}"),
        }
    }
    Ok(())
}
