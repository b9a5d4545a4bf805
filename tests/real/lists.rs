//! Initial state on the real server: paged lists, streaming lists, an expired continue token,
//! and the relist after a 410 that reuses what did not change.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{ConfigMap, PodTemplate};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube_watcher::{Api, Client, Config, KubeconfigOptions, ListParams, ObjectRef, Watcher};

use crate::bed::{Bed, User, paged, same_as_server, until};
use crate::common::{WAIT, collect_until};
use crate::proxy::Proxy;

pub fn config_map(ns: &str, name: &str, data: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(ns.into()),
            labels: Some(BTreeMap::from([("app".to_owned(), "web".to_owned())])),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([("k".to_owned(), data.to_owned())])),
        ..ConfigMap::default()
    }
}

pub fn pod_template(ns: &str, name: &str) -> PodTemplate {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": ns},
        "template": {"spec": {"containers": [{"name": "c", "image": "registry.example/app:1"}]}}
    }))
    .unwrap()
}

#[test]
fn a_paged_list_fills_the_store_page_by_page() {
    let Some(bed) = Bed::shared() else { return };
    let ns = bed.namespace("paged");
    let api: Api<ConfigMap> = Api::namespaced(bed.client(), &ns);
    for i in 0..10 {
        api.create(&config_map(&ns, &format!("cm-{i}"), "v")).unwrap();
    }
    let watcher = Watcher::new(api.clone(), paged().page_size(3)).unwrap();
    watcher.receiver(); // a consumer from the start: every event, not a replay of the store
    watcher.store().wait_until_ready(WAIT).unwrap();
    assert_eq!(watcher.store().len(), 10);
    // 10 objects in pages of 3: four pages, each a request (the server honours `limit`).
    assert_eq!(watcher.stats().lists, 4, "{:?}", watcher.stats());
    assert_eq!(watcher.stats().wire_format, Some(kube_watcher::WireFormat::Protobuf));
    api.create(&config_map(&ns, "cm-late", "v")).unwrap();
    same_as_server(&watcher.store(), &api, &ListParams::default());
}

#[test]
fn a_streaming_list_ends_at_the_servers_initial_events_bookmark() {
    let Some(bed) = Bed::shared() else { return };
    let ns = bed.namespace("streaming");
    let api: Api<ConfigMap> = Api::namespaced(bed.client(), &ns);
    for i in 0..7 {
        api.create(&config_map(&ns, &format!("cm-{i}"), "v")).unwrap();
    }
    let watcher = Watcher::new(api.clone(), Config::default().streaming_lists()).unwrap();
    watcher.receiver(); // a consumer from the start: every event, not a replay of the store
    let seen = collect_until(&watcher, |seen| seen.iter().any(|e| e == "InitDone"));
    assert_eq!(seen.iter().filter(|e| e.starts_with("InitApply")).count(), 7, "{seen:?}");
    let stats = watcher.stats();
    // The server took sendInitialEvents: no LIST was sent and nothing fell back.
    assert_eq!((stats.lists, stats.relists.streaming_fallback), (0, 0), "{stats:?}");
    assert_eq!(stats.relists.total(), 1, "{stats:?}");
    api.delete("cm-3").unwrap();
    same_as_server(&watcher.store(), &api, &ListParams::default());
}

/// A server without streaming lists (the bed's `nogate`: WatchList off, as before 1.27 or where
/// an operator turned it off) refuses `sendInitialEvents`; the watcher lists instead.
#[test]
fn a_server_without_streaming_lists_gets_a_paged_list_instead() {
    let Some(bed) = Bed::shared() else { return };
    let ns = bed.namespace("fallback");
    let api: Api<ConfigMap> = Api::namespaced(bed.client_of(User::NoGate), &ns);
    for i in 0..4 {
        api.create(&config_map(&ns, &format!("cm-{i}"), "v")).unwrap();
    }
    let watcher = Watcher::new(api.clone(), Config::default().streaming_lists()).unwrap();
    watcher.receiver(); // a consumer from the start: every event, not a replay of the store
    let seen = collect_until(&watcher, |seen| seen.iter().any(|e| e == "InitDone"));
    assert_eq!(seen.iter().filter(|e| e.starts_with("InitApply")).count(), 4, "{seen:?}");
    let stats = watcher.stats();
    assert_eq!(stats.relists.streaming_fallback, 1, "{stats:?}");
    assert!(stats.lists >= 1, "{stats:?}");
    api.create(&config_map(&ns, "cm-late", "v")).unwrap();
    collect_until(&watcher, |seen| seen.iter().any(|e| e == "Apply(cm-late)"));
    same_as_server(&watcher.store(), &api, &ListParams::default());
}

/// kube-apiserver gzips a list body above 128 KiB when asked; the watcher asks and reads it.
/// Through the proxy the bytes on the wire are counted: far fewer than the body's.
#[test]
fn a_large_list_arrives_compressed() {
    let Some(bed) = Bed::shared() else { return };
    let ns = bed.namespace("gzip");
    let api: Api<ConfigMap> = Api::namespaced(bed.client(), &ns);
    let filler = "the same words again and again ".repeat(100);
    for i in 0..100 {
        api.create(&config_map(&ns, &format!("cm-{i}"), &filler)).unwrap();
    }
    let proxy = Proxy::start(bed.port("apiserver"));
    let client =
        Client::from_kubeconfig_yaml(&bed.kubeconfig_via(proxy.port()), &KubeconfigOptions::default()).unwrap();
    // A list: a streaming list is a watch, whose events the server does not compress.
    let watcher = Watcher::new(Api::namespaced(client, &ns), paged()).unwrap();
    watcher.store().wait_until_ready(WAIT).unwrap();
    let (wire, body) = (proxy.downstream_bytes(), watcher.stats().bytes as usize);
    assert!(body > 300_000, "{body}");
    assert!(wire * 4 < body, "{wire} bytes on the wire for a {body}-byte list: not compressed");
    same_as_server(&watcher.store(), &api, &ListParams::default());
}

/// PodTemplates have no watch cache on the bed, so lists with a continue token go to etcd, and a
/// compaction expires the token. etcd keeps the revision it compacted at readable, so a write
/// comes between the token and each compaction: without one (when no other test happened to
/// write meanwhile) the token stayed valid and the test failed.
#[test]
fn an_expired_continue_token_restarts_the_list() {
    let Some(bed) = Bed::shared() else { return };
    let ns = bed.namespace("expired");
    let api: Api<PodTemplate> = Api::namespaced(bed.client(), &ns);
    let others: Api<ConfigMap> = Api::namespaced(bed.client(), &ns);
    let mut writes = 0;
    let mut compact_past_now = || {
        writes += 1;
        others.create(&config_map(&ns, &format!("revision-{writes}"), "v")).unwrap();
        bed.compact();
    };
    for i in 0..12 {
        api.create(&pod_template(&ns, &format!("t-{i}"))).unwrap();
    }
    // The one-shot call shows the server's answer itself.
    let first = api.list(&ListParams::default().limit(2)).unwrap();
    let token = first.continue_token.clone().expect("a continue token");
    compact_past_now();
    let e = api.list(&ListParams::default().limit(2).continue_token(&token)).unwrap_err();
    assert_eq!(e.status(), Some(410), "{e}");

    // A watcher whose consumer holds it after the first page: the next page's token expires.
    let watcher = Watcher::builder(api.clone()).config(paged().page_size(2)).channel_capacity(1).start().unwrap();
    watcher.receiver(); // a consumer that does not read yet: the list waits for it
    until("the first page is read", || watcher.stats().lists >= 1);
    compact_past_now();
    let seen = collect_until(&watcher, |seen| seen.iter().any(|e| e == "InitDone"));
    let stats = watcher.stats();
    assert_eq!(stats.relists.expired, 1, "{stats:?} {seen:?}");
    assert_eq!(watcher.store().len(), 12);
    same_as_server(&watcher.store(), &api, &ListParams::default());
}

#[test]
fn a_watch_resumed_after_a_compaction_relists_and_reuses_what_did_not_change() {
    let Some(bed) = Bed::shared() else { return };
    let ns = bed.namespace("gone");
    let api: Api<PodTemplate> = Api::namespaced(bed.client(), &ns);
    for i in 0..6 {
        api.create(&pod_template(&ns, &format!("t-{i}"))).unwrap();
    }
    let proxy = Proxy::start(bed.port("apiserver"));
    let client =
        Client::from_kubeconfig_yaml(&bed.kubeconfig_via(proxy.port()), &KubeconfigOptions::default()).unwrap();
    let watched: Api<PodTemplate> = Api::namespaced(client, &ns);
    let watcher = Watcher::new(watched, Config::default()).unwrap();
    watcher.receiver(); // a consumer from the start: every event, not a replay of the store
    let store = watcher.store();
    store.wait_until_ready(WAIT).unwrap();
    let before = store.get(&ObjectRef::new("t-0").within(&ns)).unwrap();
    // The watch is cut and cannot come back until the versions it would resume from are gone.
    proxy.refuse(true);
    proxy.cut();
    api.delete("t-5").unwrap();
    let mut changed = api.get("t-1").unwrap();
    changed.metadata.labels = Some(BTreeMap::from([("changed".to_owned(), "yes".to_owned())]));
    api.replace(&changed).unwrap();
    bed.compact();
    proxy.refuse(false);
    let seen = collect_until(&watcher, |seen| seen.iter().any(|e| e == "Delete(t-5)"));
    let stats = watcher.stats();
    assert_eq!(stats.relists.expired, 1, "{stats:?} {seen:?}");
    assert_eq!(stats.events.inferred_deletes, 1, "{stats:?}");
    let after = store.get(&ObjectRef::new("t-0").within(&ns)).unwrap();
    assert!(Arc::ptr_eq(&before, &after), "an unchanged object is not decoded again");
    let relisted = seen.iter().skip_while(|e| *e != "Init").cloned().collect::<Vec<_>>();
    assert!(relisted.contains(&"InitApply(t-1)".to_owned()), "{seen:?}");
    same_as_server(&store, &api, &ListParams::default());
    // One more sanity check that the watch after the relist is live.
    api.delete("t-2").unwrap();
    collect_until(&watcher, |seen| seen.iter().any(|e| e == "Delete(t-2)"));
    same_as_server(&store, &api, &ListParams::default());
}
