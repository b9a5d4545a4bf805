//! Outages and watches that keep ending, on the real server. kube-apiserver killed for about ten
//! seconds while changes go on through the bed's other API server: a namespaced and a
//! cluster-scoped watcher with the default configuration both come back to the server's state,
//! and each says it was stale and then fresh, in that order (docs/protocol.md §6.10;
//! benches/outage.sh measures how soon). And minutes of writes under watches that the server
//! ends every two seconds: every change arrives once, none twice, without a relist.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Node};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube_watcher::{Api, Config, Event, ListParams, Notice, Watcher};

use crate::bed::{Bed, User, same_as_server, until};
use crate::common::{WAIT, notices_until};
use crate::lists::config_map;

/// A Node of this test, labelled `label`.
fn node(name: &str, label: &str) -> Node {
    let (key, value) = label.split_once('=').unwrap();
    Node {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(BTreeMap::from([(key.to_owned(), value.to_owned())])),
            ..ObjectMeta::default()
        },
        ..Node::default()
    }
}

/// Starts kube-apiserver again if the test fails while it is down, so that the bed stays whole
/// for the tests after it; `back` once the test started it itself.
struct Restart {
    back: bool,
}

impl Drop for Restart {
    fn drop(&mut self) {
        if !self.back {
            // Not `Bed::script`, which panics on failure: this runs while unwinding.
            let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/apiserver.sh");
            let _ = Command::new("bash").arg(script).args(["start", "apiserver"]).status();
        }
    }
}

/// The stale and fresh notices among `seen`, in order.
fn freshness(seen: &[Notice]) -> Vec<&'static str> {
    seen.iter()
        .filter_map(|n| match n {
            Notice::Stale { .. } => Some("stale"),
            Notice::Fresh { .. } => Some("fresh"),
            _ => None,
        })
        .collect()
}

#[test]
fn after_a_restart_both_stores_come_back_and_say_they_were_stale_until_then() {
    let Some(bed) = Bed::exclusive() else { return };
    let ns = bed.namespace("outage");
    let label = format!("kube-watcher-test={ns}");
    let names: Vec<String> = (0..3).map(|i| format!("{ns}-{i}")).collect();
    let cms: Api<ConfigMap> = Api::namespaced(bed.client(), &ns);
    let nodes: Api<Node> = Api::all(bed.client());
    for i in 0..5 {
        cms.create(&config_map(&ns, &format!("cm-{i}"), "1")).unwrap();
    }
    for name in &names {
        nodes.create(&node(name, &label)).unwrap();
    }
    let namespaced = Watcher::new(cms.clone(), Config::default()).unwrap();
    let cluster = Watcher::new(nodes.clone(), Config::default().labels(&label)).unwrap();
    let notices = [namespaced.notices(), cluster.notices()];
    for store in [namespaced.store().wait_until_ready(WAIT), cluster.store().wait_until_ready(WAIT)] {
        store.unwrap();
    }
    until("both watch", || namespaced.stats().watches >= 1 && cluster.stats().watches >= 1);

    let mut restart = Restart { back: false };
    bed.script(&["stop", "apiserver"]);
    let down = Instant::now();
    // About ten seconds of changes through the other server, which shares the etcd.
    let other_cms: Api<ConfigMap> = Api::namespaced(bed.client_of(User::NoGate), &ns);
    let other_nodes: Api<Node> = Api::all(bed.client_of(User::NoGate));
    let mut turn = 0;
    while down.elapsed() < Duration::from_secs(10) {
        let mut cm = other_cms.get(&format!("cm-{}", turn % 4)).unwrap();
        cm.data = Some(BTreeMap::from([("k".to_owned(), turn.to_string())]));
        other_cms.replace(&cm).unwrap();
        let mut n = other_nodes.get(&names[turn % 2]).unwrap();
        n.metadata.labels.get_or_insert_with(BTreeMap::new).insert("turn".into(), turn.to_string());
        other_nodes.replace(&n).unwrap();
        if turn == 3 {
            other_cms.delete("cm-4").unwrap();
            other_cms.create(&config_map(&ns, "while-down", "1")).unwrap();
            other_nodes.delete(&names[2]).unwrap();
        }
        turn += 1;
        thread::sleep(Duration::from_millis(500));
    }
    assert!(namespaced.store().stale_since().is_some_and(|since| since <= Instant::now()));
    bed.script(&["start", "apiserver"]);
    restart.back = true;

    same_as_server(&namespaced.store(), &cms, &ListParams::default());
    same_as_server(&cluster.store(), &nodes, &ListParams::default().labels(&label));
    for (which, rx) in ["namespaced", "cluster-scoped"].iter().zip(&notices) {
        let seen = notices_until(rx, |n| matches!(n, Notice::Fresh { .. }));
        assert_eq!(freshness(&seen), ["stale", "fresh"], "{which}: {seen:?}");
        let stale_for = seen.iter().find_map(|n| match n {
            Notice::Fresh { stale_for } => Some(*stale_for),
            _ => None,
        });
        assert!(stale_for.is_some_and(|d| d >= Duration::from_secs(10)), "{which}: down ten seconds: {seen:?}");
    }
    assert_eq!(namespaced.store().stale_since(), None);
    assert_eq!(cluster.store().stale_since(), None);
    for name in &names[..2] {
        nodes.delete(name).unwrap();
    }
}

/// Kubernetes' own test of watch restarts (`TestWatchRestartsIfTimeoutNotReached`) runs
/// kube-apiserver with `--min-request-timeout` of seconds, so that every watch ends early. That
/// flag sets the deadline only of watches that ask for none (docs/protocol.md §6.1), and the
/// watcher always asks: so here the watchers ask for two seconds, and the server ends each
/// watch at that deadline, by the same path. Two minutes of writes: every change reaches each
/// watcher exactly once, each deletion once, and the stores end as the server is, with no
/// relist, error or stale store.
#[test]
fn under_watches_the_server_keeps_ending_every_change_arrives_once() {
    let Some(bed) = Bed::shared() else { return };
    let ns = bed.namespace("restarts");
    let api: Api<ConfigMap> = Api::namespaced(bed.client(), &ns);
    let config = Config::default().timeout(Duration::from_secs(2));
    let watchers = [
        ("paged lists", Watcher::new(api.clone(), config.clone()).unwrap()),
        ("streaming lists", Watcher::new(api.clone(), config.streaming_lists()).unwrap()),
    ];
    // Each consumer counts what it receives: (name, resourceVersion) of every Apply, the name of
    // every Delete.
    let readers: Vec<_> = watchers
        .iter()
        .map(|(_, w)| {
            let rx = w.receiver().clone();
            thread::spawn(move || {
                let (mut applied, mut deleted) = (HashMap::<(String, String), usize>::new(), HashMap::new());
                for event in rx.iter() {
                    let (map, key) = match event {
                        Ok(Event::Apply(cm) | Event::InitApply(cm)) => {
                            let m = &cm.metadata;
                            (&mut applied, (m.name.clone().unwrap(), m.resource_version.clone().unwrap()))
                        }
                        Ok(Event::Delete(cm)) => {
                            *deleted.entry(cm.metadata.name.clone().unwrap()).or_insert(0usize) += 1;
                            continue;
                        }
                        Ok(_) => continue,
                        Err(e) => panic!("an error under watches that end cleanly: {e}"),
                    };
                    *map.entry(key).or_insert(0usize) += 1;
                }
                (applied, deleted)
            })
        })
        .collect();
    for (_, w) in &watchers {
        w.store().wait_until_ready(WAIT).unwrap();
    }

    let (mut written, mut deletes) = (Vec::new(), Vec::new());
    let start = Instant::now();
    let mut i = 0usize;
    while start.elapsed() < Duration::from_secs(120) {
        let created = api.create(&config_map(&ns, &format!("cm-{i}"), "1")).unwrap();
        written.push((format!("cm-{i}"), created.metadata.resource_version.clone().unwrap()));
        if i % 3 == 1 {
            let mut cm = created;
            cm.data = Some(BTreeMap::from([("k".to_owned(), "2".to_owned())]));
            let changed = api.replace(&cm).unwrap();
            written.push((format!("cm-{i}"), changed.metadata.resource_version.unwrap()));
        }
        if i % 3 == 2 {
            api.delete(&format!("cm-{}", i - 2)).unwrap();
            deletes.push(format!("cm-{}", i - 2));
        }
        i += 1;
        thread::sleep(Duration::from_millis(50));
    }
    let last = api.create(&config_map(&ns, "last", "1")).unwrap();
    written.push(("last".into(), last.metadata.resource_version.clone().unwrap()));

    for (which, w) in &watchers {
        w.store().wait_for_version(last.metadata.resource_version.as_deref().unwrap(), WAIT).unwrap();
        same_as_server(&w.store(), &api, &ListParams::default());
        let stats = w.stats();
        assert_eq!(stats.relists.total(), 1, "{which}: only the first list: {stats:?}");
        assert_eq!(stats.errors.total(), 0, "{which}: {stats:?}");
        assert!(stats.watches >= 30, "{which}: the server ended the watches: {stats:?}");
        let seen: Vec<Notice> = w.notices().try_iter().collect();
        assert!(freshness(&seen).is_empty(), "{which}: a watch ended cleanly is no outage: {seen:?}");
        w.stop();
    }
    for ((which, _), reader) in watchers.iter().zip(readers) {
        let (applied, deleted) = reader.join().unwrap();
        let twice: Vec<_> = applied.iter().filter(|(_, n)| **n > 1).collect();
        assert!(twice.is_empty(), "{which}: changes delivered more than once: {twice:?}");
        let missing: Vec<_> = written.iter().filter(|k| !applied.contains_key(*k)).collect();
        assert!(
            missing.is_empty(),
            "{which}: {} of {} changes never delivered: {missing:?}",
            missing.len(),
            written.len()
        );
        assert_eq!(applied.len(), written.len(), "{which}: changes delivered that were never made");
        let expected: HashMap<String, usize> = deletes.iter().map(|n| (n.clone(), 1)).collect();
        assert_eq!(deleted, expected, "{which}: each deletion once");
    }
}
