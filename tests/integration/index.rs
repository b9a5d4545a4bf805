//! Store indexes: named index functions and the built-in namespace index, kept right through
//! apply, delete and relists, in the typed, the compact and the compressed store mode.
#![cfg(feature = "testing")]

use crate::common;

use std::time::Duration;

use common::*;
use k8s_openapi::api::core::v1::{Pod, PodSpec};
use kube_watcher::testing::{FakeApiServer, Fault, Match};
use kube_watcher::{Api, Client, Config, Store, Watcher};

fn on_node(ns: &str, name: &str, node: &str) -> Pod {
    let mut p = pod(ns, name);
    p.spec = Some(PodSpec { node_name: Some(node.into()), ..PodSpec::default() });
    p
}

fn node_of(p: &Pod) -> Vec<String> {
    p.spec.iter().filter_map(|s| s.node_name.clone()).collect()
}

fn names(store: &Store<Pod>, index: &str, value: &str) -> Vec<String> {
    let mut n: Vec<String> =
        store.index(index, value).iter().map(|p| p.metadata.name.clone().unwrap_or_default()).collect();
    n.sort();
    n
}

fn start(server: &FakeApiServer, mode: &str) -> Watcher<Pod> {
    let api: Api<Pod> = Api::all(Client::from_url(&server.url()).unwrap());
    let config = Config::default().timeout(Duration::from_secs(1)).stall_timeout(Duration::from_secs(2));
    let b = Watcher::builder(api).config(config).index("node", node_of);
    let b = match mode {
        "compact" => b.compact_store(),
        "compressed" => b.compressed_store(),
        _ => b,
    };
    b.start().unwrap()
}

#[test]
fn indexes_follow_apply_delete_and_a_relist_in_every_store_mode() {
    for label in ["typed", "compact", "compressed"] {
        let server = server();
        server.create(&on_node("apps", "a", "n1")).unwrap();
        server.create(&on_node("apps", "b", "n1")).unwrap();
        server.create(&on_node("db", "c", "n2")).unwrap();
        let w = start(&server, label);
        let store = w.store();
        store.wait_until_ready(WAIT).unwrap();
        assert_eq!(names(&store, "node", "n1"), ["a", "b"], "{label}");
        assert_eq!(names(&store, "namespace", "apps"), ["a", "b"], "{label}");
        assert_eq!(names(&store, "namespace", "db"), ["c"], "{label}");

        // Apply moves an object between values; delete removes it.
        let mut a = server.get::<Pod>(Some("apps"), "a").unwrap();
        a.spec.as_mut().unwrap().node_name = Some("n2".into());
        server.replace(&a).unwrap();
        server.delete::<Pod>(Some("apps"), "b").unwrap();
        // Both changes, in whichever order they are seen: wait for the state after both.
        eventually("a moves to n2 and b goes", || {
            names(&store, "node", "n2") == ["a", "c"] && names(&store, "node", "n1").is_empty()
        });
        assert_eq!(names(&store, "namespace", "apps"), ["a"], "{label}");

        // An outage with a change missed: the relist rebuilds the indexes at InitDone.
        server.push_fault(Match::Watch, Fault::Stall);
        server.end_watches();
        eventually("the stalled watch is requested", || server.pending_faults() == 0);
        server.delete::<Pod>(Some("db"), "c").unwrap();
        server.create(&on_node("db", "d", "n3")).unwrap();
        server.compact();
        eventually("the relist brings d", || names(&store, "node", "n3") == ["d"]);
        assert_eq!(names(&store, "node", "n2"), ["a"], "{label}: c is gone from the index");
        assert_eq!(names(&store, "namespace", "db"), ["d"], "{label}");
        assert!(names(&store, "no such index", "n2").is_empty(), "{label}");
        w.stop();
    }
}

#[test]
fn several_named_indexes_and_an_override_of_the_built_in_one() {
    let server = server();
    server.create(&labelled(on_node("apps", "a", "n1"), "tier", "web")).unwrap();
    server.create(&on_node("apps", "b", "n1")).unwrap();
    let api: Api<Pod> = Api::all(Client::from_url(&server.url()).unwrap());
    let w = Watcher::builder(api)
        .index("node", node_of)
        .index("tier", |p: &Pod| p.metadata.labels.iter().filter_map(|l| l.get("tier").cloned()).collect())
        .index("namespace", |_: &Pod| vec!["everything".to_owned()])
        .start()
        .unwrap();
    let store = w.store();
    store.wait_until_ready(WAIT).unwrap();
    assert_eq!(names(&store, "node", "n1"), ["a", "b"]);
    assert_eq!(names(&store, "tier", "web"), ["a"]);
    assert_eq!(names(&store, "namespace", "everything"), ["a", "b"], "the registered function replaces the built-in");
    assert!(names(&store, "namespace", "apps").is_empty());
}
