//! Servers that die under a watch: kube-apiserver killed and started again while changes go on
//! through the other API server (both share one etcd), and etcd itself restarted. The watcher
//! resumes or relists; nothing is lost and nothing that exists is reported deleted.

use k8s_openapi::api::core::v1::ConfigMap;
use kube_watcher::{Api, Config, ListParams, Watcher};

use crate::bed::{Bed, User, same_as_server, until};
use crate::common::{WAIT, collect_until};
use crate::lists::config_map;

#[test]
fn a_killed_and_restarted_apiserver_loses_nothing_and_deletes_nothing() {
    let Some(bed) = Bed::exclusive() else { return };
    let ns = bed.namespace("restart");
    let api: Api<ConfigMap> = Api::namespaced(bed.client(), &ns);
    for i in 0..5 {
        api.create(&config_map(&ns, &format!("cm-{i}"), "1")).unwrap();
    }
    let watcher = Watcher::new(api.clone(), Config::default()).unwrap();
    watcher.receiver(); // a consumer from the start: every event, not a replay of the store
    watcher.store().wait_until_ready(WAIT).unwrap();
    until("the watch is open", || watcher.stats().watches >= 1);
    bed.script(&["stop", "apiserver"]);
    // Meanwhile, through the other server: a create, a change and a delete.
    let other: Api<ConfigMap> = Api::namespaced(bed.client_of(User::NoGate), &ns);
    other.create(&config_map(&ns, "while-down", "1")).unwrap();
    let mut changed = other.get("cm-1").unwrap();
    changed.data = Some([("k".to_owned(), "2".to_owned())].into());
    other.replace(&changed).unwrap();
    other.delete("cm-2").unwrap();
    bed.script(&["start", "apiserver"]);
    let seen = collect_until(&watcher, |seen| {
        seen.iter().any(|e| e == "Delete(cm-2)") && seen.iter().any(|e| e.ends_with("(while-down)"))
    });
    let deletes: Vec<_> = seen.iter().filter(|e| e.starts_with("Delete")).collect();
    assert_eq!(deletes, ["Delete(cm-2)"], "no phantom delete: {seen:?}");
    assert!(watcher.stats().errors.transport >= 1, "{:?}", watcher.stats());
    same_as_server(&watcher.store(), &api, &ListParams::default());
}

#[test]
fn a_restarted_etcd_is_survived() {
    let Some(bed) = Bed::exclusive() else { return };
    let ns = bed.namespace("etcd");
    let api: Api<ConfigMap> = Api::namespaced(bed.client(), &ns);
    api.create(&config_map(&ns, "before", "1")).unwrap();
    let watcher = Watcher::new(api.clone(), Config::default()).unwrap();
    watcher.receiver(); // a consumer from the start: every event, not a replay of the store
    watcher.store().wait_until_ready(WAIT).unwrap();
    bed.script(&["stop", "etcd"]);
    bed.script(&["start", "etcd"]);
    // The API server reconnects to etcd by itself; writes work again once it has.
    until("the API server writes again", || api.create(&config_map(&ns, "after", "1")).is_ok());
    let seen = collect_until(&watcher, |seen| seen.iter().any(|e| e.ends_with("(after)")));
    assert!(!seen.iter().any(|e| e == "Delete(before)"), "no phantom delete: {seen:?}");
    same_as_server(&watcher.store(), &api, &ListParams::default());
}
