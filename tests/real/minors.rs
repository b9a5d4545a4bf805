//! What differs from one Kubernetes minor to the next, checked on the minor the bed runs
//! (`scripts/apiserver.sh MINOR test`; `matrix` runs every one). docs/protocol.md, "What
//! differs from one Kubernetes minor to the next", is the table this follows.

use k8s_openapi::api::core::v1::Pod;
use kube_watcher::{Api, Config, Shard, Watcher};
use serde_json::{Value, json};

use crate::bed::{Bed, User};
use crate::common::WAIT;
use crate::differential::Raw;

/// The running kube-apiserver is the minor the bed says (so a test that expects a minor's
/// behaviour never runs against another one's binary).
#[test]
fn the_bed_runs_the_minor_it_says() {
    let Some(bed) = Bed::shared() else { return };
    let version = Raw::real(&bed).send("GET", "/version", None);
    assert_eq!(version.status, 200, "{version:?}");
    assert_eq!(version.body["major"], "1", "{version:?}");
    assert_eq!(version.body["minor"], json!(bed.minor().to_string()), "{version:?}");
}

/// The server with the bed's defaults (`User::Admin`): streaming lists on every supported minor
/// (`WatchList` is on by default from 1.34; it was off in 1.33), `shardSelector` honoured from
/// 1.36 (`ShardedListAndWatch`, alpha, turned on by the bed) and ignored before; and what the
/// library makes of each.
#[test]
fn each_minor_streams_and_shards_as_the_table_says() {
    let Some(bed) = Bed::shared() else { return };
    let ns = bed.namespace("minor");
    let raw = Raw::real(&bed);
    for name in ["a", "b", "c", "d"] {
        let pod = json!({"metadata": {"name": name}, "spec": {"containers": [{"name": "c", "image": "registry.example/app:1"}]}});
        assert_eq!(raw.send("POST", &format!("/api/v1/namespaces/{ns}/pods"), Some(&pod)).status, 201);
    }
    // A streaming list: the initial events end at the annotated bookmark.
    let events = raw.watch_until(
        &format!(
            "/api/v1/namespaces/{ns}/pods?watch=true&sendInitialEvents=true&allowWatchBookmarks=true\
             &resourceVersionMatch=NotOlderThan"
        ),
        |e| e["type"] == "BOOKMARK",
    );
    let types: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(types, ["ADDED", "ADDED", "ADDED", "ADDED", "BOOKMARK"], "{events:?}");
    assert_eq!(events[4]["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"], "true", "{}", events[4]);
    let api: Api<Pod> = Api::namespaced(bed.client_of(User::Admin), &ns);
    let watcher = Watcher::new(api.clone(), Config::default().streaming_lists()).unwrap();
    watcher.store().wait_until_ready(WAIT).unwrap();
    assert_eq!(watcher.stats().relists.streaming_fallback, 0, "{:?}", watcher.stats());
    watcher.stop();

    // A shard: filtered and echoed from 1.36, ignored before.
    let shard = Shard::of(0, 2).unwrap();
    let selector = shard.selector().replace(' ', "%20").replace('\'', "%27").replace(',', "%2C");
    let list = raw.send("GET", &format!("/api/v1/namespaces/{ns}/pods?shardSelector={selector}"), None);
    assert_eq!(list.status, 200, "{list:?}");
    let items = list.body["items"].as_array().unwrap();
    let in_shard = items.iter().filter(|p| shard.contains(p["metadata"]["uid"].as_str().unwrap())).count();
    let echo = list.body["metadata"].get("shardInfo").cloned();
    if bed.filters_shards() {
        assert_eq!(echo, Some(json!({"selector": shard.selector()})), "{}", list.body["metadata"]);
        assert_eq!(items.len(), in_shard);
    } else {
        assert_eq!(echo, None::<Value>, "{}", list.body["metadata"]);
        assert_eq!(items.len(), 4);
    }
    let watcher = Watcher::new(api, Config::default().shard(shard)).unwrap();
    watcher.store().wait_until_ready(WAIT).unwrap();
    assert_eq!(watcher.stats().shard_filter, Some(bed.shard_filter()));
    assert_eq!(watcher.store().len(), in_shard);
}
