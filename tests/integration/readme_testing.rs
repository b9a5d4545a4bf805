//! The README's "Testing your own code" example, as it is (examples.rs checks that the README
//! shows this file after these lines): a test file of a user's, run by `cargo test`; here a
//! module of this binary, whose `use` lines and test read the same.

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube_watcher::testing::FakeApiServer;
use kube_watcher::{Api, Client, Config, ObjectRef, Watcher};

#[test]
fn the_watcher_caches_the_settings_config_map() -> Result<(), kube_watcher::Error> {
    let server = FakeApiServer::start();
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some("settings".into());
    cm.metadata.namespace = Some("shop".into());
    server.create(&cm).unwrap();
    let api: Api<ConfigMap> = Api::namespaced(Client::from_url(&server.url())?, "shop");
    let watcher = Watcher::new(api, Config::default())?;
    watcher.store().wait_until_ready(Duration::from_secs(10))?;
    let cached = watcher.store().get(&ObjectRef::new("settings").within("shop"));
    assert!(cached.is_some());
    assert_eq!(watcher.store().len(), 1);
    Ok(())
}
