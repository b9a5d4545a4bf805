//! Watching on the real server: resuming after a dropped connection, bookmarks, a connection
//! that goes silent, selectors, one named object, several namespaces.

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube_watcher::{Api, Client, Config, KubeconfigOptions, ListParams, Watcher, watch_object};

use crate::bed::{Bed, same_as_server, until};
use crate::common::{WAIT, collect_until};
use crate::lists::config_map;
use crate::proxy::Proxy;

fn via(bed: &Bed, proxy: &Proxy) -> Client {
    Client::from_kubeconfig_yaml(&bed.kubeconfig_via(proxy.port()), &KubeconfigOptions::default()).unwrap()
}

#[test]
fn a_dropped_watch_resumes_from_its_version_without_a_relist() {
    let Some(bed) = Bed::shared() else { return };
    let ns = bed.namespace("resume");
    let api: Api<ConfigMap> = Api::namespaced(bed.client(), &ns);
    api.create(&config_map(&ns, "a", "1")).unwrap();
    let proxy = Proxy::start(bed.port("apiserver"));
    let watcher = Watcher::new(Api::namespaced(via(&bed, &proxy), &ns), Config::default()).unwrap();
    watcher.receiver(); // a consumer from the start: every event, not a replay of the store
    watcher.store().wait_until_ready(WAIT).unwrap();
    until("the watch is open", || watcher.stats().watches >= 1);
    proxy.refuse(true);
    proxy.cut();
    // Changes while the watcher cannot reach the server: the resumed watch replays them.
    api.create(&config_map(&ns, "b", "1")).unwrap();
    api.delete("a").unwrap();
    proxy.refuse(false);
    let seen = collect_until(&watcher, |seen| seen.iter().any(|e| e == "Delete(a)"));
    assert!(seen.contains(&"Apply(b)".to_owned()), "{seen:?}");
    let stats = watcher.stats();
    assert_eq!(stats.relists.total(), 1, "resumed, not relisted: {stats:?}");
    assert!(stats.watches >= 2, "{stats:?}");
    same_as_server(&watcher.store(), &api, &ListParams::default());
}

#[test]
fn the_server_sends_bookmarks_before_its_watch_timeout() {
    let Some(bed) = Bed::shared() else { return };
    let ns = bed.namespace("bookmarks");
    let api: Api<ConfigMap> = Api::namespaced(bed.client(), &ns);
    api.create(&config_map(&ns, "a", "1")).unwrap();
    // The watch cache sends a bookmark about 2 s before the watch's deadline (and once a
    // minute), when the resource's version moved since the last thing this watch was sent: a
    // 5 s timeout and writes elsewhere bring one within seconds.
    let watcher = Watcher::new(api.clone(), Config::default().timeout(Duration::from_secs(5))).unwrap();
    watcher.store().wait_until_ready(WAIT).unwrap();
    let elsewhere = bed.namespace("bookmarks-elsewhere");
    let busy: Api<ConfigMap> = Api::namespaced(bed.client(), &elsewhere);
    let mut writes = 0;
    until("a bookmark arrives", || {
        writes += 1;
        busy.create(&config_map(&elsewhere, &format!("cm-{writes}"), "1")).unwrap();
        std::thread::sleep(Duration::from_millis(200));
        watcher.stats().events.bookmarks >= 1
    });
    // Bookmarks move the version the store reflects as the cluster changes, without an event of
    // this watch: a read-your-writes wait for a write elsewhere returns (while writes go on,
    // since the server sends a bookmark only when the version moved).
    let target = busy.get(&format!("cm-{writes}")).unwrap().metadata.resource_version.unwrap();
    until("the store reflects the writes elsewhere", || {
        writes += 1;
        busy.create(&config_map(&elsewhere, &format!("cm-{writes}"), "1")).unwrap();
        watcher.store().wait_for_version(&target, Duration::from_secs(1)).is_ok()
    });
    until("the watch is renewed after the server's timeout", || watcher.stats().watches >= 2);
    let stats = watcher.stats();
    assert_eq!(stats.relists.total(), 1, "{stats:?}");
    assert_eq!(stats.errors.total(), 0, "{stats:?}");
    same_as_server(&watcher.store(), &api, &ListParams::default());
}

#[test]
fn a_silent_connection_is_found_and_replaced() {
    let Some(bed) = Bed::shared() else { return };
    let ns = bed.namespace("stall");
    let api: Api<ConfigMap> = Api::namespaced(bed.client(), &ns);
    api.create(&config_map(&ns, "a", "1")).unwrap();
    let proxy = Proxy::start(bed.port("apiserver"));
    // Watches of 10 s, silence presumed after 12 s (it must exceed the watch timeout).
    let config = Config::default().timeout(Duration::from_secs(10)).stall_timeout(Duration::from_secs(12));
    let watcher = Watcher::new(Api::namespaced(via(&bed, &proxy), &ns), config).unwrap();
    watcher.receiver(); // a consumer from the start: every event, not a replay of the store
    watcher.store().wait_until_ready(WAIT).unwrap();
    // The silence must fall on an open watch: an event has just come through it. Should the
    // server end that watch in the same instant, the silence falls on the request for the next
    // one instead, which its own read timeout fails (a path that would also hide a watcher that
    // never notices a silent stream): then the scenario runs again.
    for attempt in 1.. {
        let open = format!("open-{attempt}");
        api.create(&config_map(&ns, &open, "1")).unwrap();
        collect_until(&watcher, |seen| seen.iter().any(|e| *e == format!("Apply({open})")));
        let (before, errors) = (proxy.connections(), watcher.stats().errors.transport);
        proxy.stall(true);
        let changed = format!("b-{attempt}");
        api.create(&config_map(&ns, &changed, "1")).unwrap();
        let stalled = std::time::Instant::now();
        while watcher.stats().errors.transport == errors {
            assert!(stalled.elapsed() < Duration::from_secs(60), "a silent watch was never presumed dead");
            std::thread::sleep(Duration::from_millis(50));
        }
        let error = watcher.stats().last_error.unwrap_or_default();
        // New connections must not stall: only the old one was dead.
        proxy.cut();
        proxy.stall(false);
        collect_until(&watcher, |seen| seen.iter().any(|e| *e == format!("Apply({changed})")));
        assert!(proxy.connections() > before);
        if error.contains("presumed dead") {
            break;
        }
        assert!(attempt < 3, "the silence was never found by the watcher's stall check: {error}");
    }
    same_as_server(&watcher.store(), &api, &ListParams::default());
}

#[test]
fn selectors_and_namespaces_are_the_servers() {
    let Some(bed) = Bed::shared() else { return };
    let (one, two, other) = (bed.namespace("sel-a"), bed.namespace("sel-b"), bed.namespace("sel-c"));
    let client = bed.client();
    for ns in [&one, &two, &other] {
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
        api.create(&config_map(ns, "web", "1")).unwrap();
        let mut db = config_map(ns, "db", "1");
        db.metadata.labels = None;
        api.create(&db).unwrap();
    }
    // Labels, and a field selector on the name, in two namespaces of three, in one store.
    let all: Api<ConfigMap> = Api::all(client.clone());
    let watcher = Watcher::builder(all.clone())
        .config(Config::default().labels("app=web"))
        .namespaces(&[&one, &two])
        .start()
        .unwrap();
    watcher.store().wait_until_ready(WAIT).unwrap();
    let mut names: Vec<_> = watcher
        .store()
        .state()
        .iter()
        .map(|c| format!("{}/{}", c.metadata.namespace.as_deref().unwrap(), c.metadata.name.as_deref().unwrap()))
        .collect();
    names.sort();
    assert_eq!(names, [format!("{one}/web"), format!("{two}/web")]);
    let by_name: Api<ConfigMap> = Api::namespaced(client.clone(), &other);
    let fields = Watcher::new(by_name.clone(), Config::default().fields("metadata.name=db")).unwrap();
    fields.receiver(); // a consumer from the start: every event, not a replay of the store
    fields.store().wait_until_ready(WAIT).unwrap();
    assert_eq!(fields.store().len(), 1);
    Api::<ConfigMap>::namespaced(client.clone(), &two).create(&config_map(&two, "web2", "1")).unwrap();
    Api::<ConfigMap>::namespaced(client.clone(), &other).create(&config_map(&other, "web3", "1")).unwrap();
    until("web2 arrives", || watcher.store().get(&kube_watcher::ObjectRef::new("web2").within(&two)).is_some());
    for ns in [&one, &two] {
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
        let scoped = Watcher::new(api.clone(), Config::default().labels("app=web")).unwrap();
        scoped.receiver(); // a consumer from the start: every event, not a replay of the store
        scoped.store().wait_until_ready(WAIT).unwrap();
        let mine: Vec<_> =
            watcher.store().state().into_iter().filter(|c| c.metadata.namespace.as_deref() == Some(ns)).collect();
        assert_eq!(mine.len(), scoped.store().len());
        same_as_server(&scoped.store(), &api, &ListParams::default().labels("app=web"));
    }
    same_as_server(&fields.store(), &by_name, &ListParams::default().fields("metadata.name=db"));
}

#[test]
fn one_named_object_is_followed_through_its_deletion() {
    let Some(bed) = Bed::shared() else { return };
    let ns = bed.namespace("named");
    let api: Api<ConfigMap> = Api::namespaced(bed.client(), &ns);
    api.create(&config_map(&ns, "other", "1")).unwrap();
    let watcher = watch_object(api.clone(), "settings").unwrap();
    // Absent at first, then created, changed, deleted.
    let first = watcher.recv_timeout(WAIT).unwrap().unwrap();
    assert!(first.is_none());
    api.create(&config_map(&ns, "settings", "1")).unwrap();
    let created = watcher.recv_timeout(WAIT).unwrap().unwrap().unwrap();
    assert_eq!(created.data.as_ref().unwrap()["k"], "1");
    let mut changed = (*created).clone();
    changed.data = Some([("k".to_owned(), "2".to_owned())].into());
    api.replace(&changed).unwrap();
    let seen = watcher.recv_timeout(WAIT).unwrap().unwrap().unwrap();
    assert_eq!(seen.data.as_ref().unwrap()["k"], "2");
    api.delete("settings").unwrap();
    assert!(watcher.recv_timeout(WAIT).unwrap().unwrap().is_none());
    assert_eq!(watcher.watcher().store().len(), 0, "only the named object is held");
    same_as_server(&watcher.watcher().store(), &api, &ListParams::default().fields("metadata.name=settings"));
}
