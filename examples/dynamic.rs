//! Custom resources without a Rust type: find the type by discovery, as kubectl does
//! (`widgets`, the short name `wd`, the kind `Widget`, `widgets.example.com`), then watch it
//! as [`DynamicObject`]s.
//!
//! ```text
//! cargo run --example dynamic --features testing                        # a CRD on the fake server
//! cargo run --example dynamic --features testing -- --cluster RESOURCE   # any type on your cluster
//! ```

use std::time::Duration;

use kube_watcher::testing::{FakeApiServer, ResourceType};
use kube_watcher::{Api, Client, Config, DynamicObject, Event, Watcher};
use serde_json::json;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (server, client, name) = match args.as_slice() {
        [] => {
            // A fake API server serving a custom resource type, with three objects.
            let server = FakeApiServer::start();
            let widgets = ResourceType::new("example.com", "v1", "widgets", "Widget", true).with_short_names(&["wd"]);
            server.register(widgets.clone());
            for (name, size) in [("small", 1), ("medium", 5), ("large", 20)] {
                server.create_value(
                    &widgets,
                    json!({"metadata": {"name": name, "namespace": "shop"}, "spec": {"size": size}}),
                )?;
            }
            let client = Client::from_url(&server.url())?;
            (Some((server, widgets)), client, "wd".to_owned())
        }
        [flag, resource] if flag == "--cluster" => (None, Client::try_default()?, resource.clone()),
        _ => return Err("usage: dynamic [--cluster RESOURCE]".into()),
    };

    // Discovery: a few GETs of /api/v1 and /apis; keep the ApiResource it returns.
    let resource = client.discover(&name)?;
    println!(
        "{name:?} is {} {} (plural {:?}, namespaced: {})",
        resource.api_version, resource.kind, resource.plural, resource.namespaced
    );

    let api: Api<DynamicObject> = Api::all_with(client, &resource);
    let watcher = Watcher::new(api, Config::default())?;
    watcher.store().wait_until_ready(Duration::from_secs(30))?;
    let mut objects = watcher.store().state();
    objects.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    for obj in &objects {
        // Metadata is typed; everything else is JSON.
        println!(
            "  {}: spec {}",
            obj.metadata.name.as_deref().unwrap_or(""),
            obj.data.get("spec").unwrap_or(&json!(null))
        );
    }

    // On the fake server, someone resizes a widget; the watcher delivers the new state.
    if let Some((server, widgets)) = &server {
        // Attach the consumer first: a change made before it is part of the state it is
        // replayed (an `InitApply`), not an event of its own.
        let events = watcher.receiver();
        server
            .apply_value(widgets, json!({"metadata": {"name": "medium", "namespace": "shop"}, "spec": {"size": 8}}))?;
        loop {
            match events.recv_timeout(Duration::from_secs(10))? {
                Ok(Event::Apply(obj)) => {
                    println!(
                        "changed: {} is now size {}",
                        obj.metadata.name.as_deref().unwrap_or(""),
                        obj.data["spec"]["size"]
                    );
                    break;
                }
                Ok(_) => {} // the current state, replayed to a new consumer first
                Err(e) => println!("trouble (retrying): {e}"),
            }
        }
    }
    Ok(())
}
