//! Writes on the real server: create, replace with a stale resourceVersion, delete, and
//! read-your-writes through the store.

use k8s_openapi::api::core::v1::ConfigMap;
use kube_watcher::{Api, Config, Error, ListParams, ObjectRef, Watcher};

use crate::bed::{Bed, same_as_server};
use crate::common::WAIT;
use crate::lists::config_map;

#[test]
fn create_replace_and_delete_answer_as_documented() {
    let Some(bed) = Bed::shared() else { return };
    let ns = bed.namespace("writes");
    let api: Api<ConfigMap> = Api::namespaced(bed.client(), &ns);
    let created = api.create(&config_map(&ns, "a", "1")).unwrap();
    let rv = created.metadata.resource_version.clone().unwrap();
    assert!(created.metadata.uid.is_some());

    let again = api.create(&config_map(&ns, "a", "1")).unwrap_err();
    assert!(again.is_already_exists() && !again.is_conflict(), "{again}");

    let mut newer = created.clone();
    newer.data = Some([("k".to_owned(), "2".to_owned())].into());
    let replaced = api.replace(&newer).unwrap();
    assert_ne!(replaced.metadata.resource_version.as_deref(), Some(rv.as_str()));
    // The same write again carries the version the first replace made stale.
    let stale = api.replace(&newer).unwrap_err();
    assert!(stale.is_conflict(), "{stale}");
    let Error::Api(e) = &stale else { panic!("{stale:?}") };
    assert_eq!((e.code, e.reason.as_str()), (409, "Conflict"));
    assert!(e.message.contains("the object has been modified"), "{}", e.message);

    api.delete("a").unwrap();
    let gone = api.get("a").unwrap_err();
    assert!(gone.is_not_found(), "{gone}");
    let twice = api.delete("a").unwrap_err();
    assert!(twice.is_not_found(), "{twice}");
}

#[test]
fn the_store_reads_its_own_writes() {
    let Some(bed) = Bed::shared() else { return };
    let ns = bed.namespace("ryw");
    let api: Api<ConfigMap> = Api::namespaced(bed.client(), &ns);
    let watcher = Watcher::new(api.clone(), Config::default()).unwrap();
    let store = watcher.store();
    store.wait_until_ready(WAIT).unwrap();
    for i in 0..5 {
        let written = api.create(&config_map(&ns, &format!("cm-{i}"), "1")).unwrap();
        store.wait_for_version(written.metadata.resource_version.as_deref().unwrap(), WAIT).unwrap();
        let cached = store.get(&ObjectRef::new(&format!("cm-{i}")).within(&ns)).expect("written, then waited for");
        assert_eq!(cached.metadata.resource_version, written.metadata.resource_version);
    }
    // A version written to another namespace (another resource's events move the same etcd
    // revision) is reached too, through a bookmark or a later event.
    let mut last = api.get("cm-4").unwrap();
    last.data = Some([("k".to_owned(), "2".to_owned())].into());
    let written = api.replace(&last).unwrap();
    store.wait_for_version(written.metadata.resource_version.as_deref().unwrap(), WAIT).unwrap();
    assert_eq!(store.get(&ObjectRef::new("cm-4").within(&ns)).unwrap().data.as_ref().unwrap()["k"], "2");
    same_as_server(&store, &api, &ListParams::default());
}
