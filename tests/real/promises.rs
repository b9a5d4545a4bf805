//! The library's promises on the real server, each where the fake alone had backed it: who
//! filters a shard, whatever way a watcher syncs; a quiet shard resumes past the other shards'
//! events; drift checks; the compact and compressed stores; fields skipped by map key.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Pod, PodTemplate};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube_watcher::{
    Api, Client, Config, KubeconfigOptions, ListParams, Notice, ObjectRef, Shard, ShardFilter, Watchable, Watcher,
    WireFormat, metadata_watcher,
};

use crate::bed::{Bed, User, list_all, same_as_server, until};
use crate::common::WAIT;
use crate::proxy::Proxy;

fn create_pods(api: &Api<Pod>, ns: &str, names: std::ops::Range<usize>) {
    for i in names {
        api.create(&crate::scale_out::pod(ns, &format!("p{i}"))).unwrap();
    }
}

fn uids<'a, K: Watchable + 'a>(objects: impl IntoIterator<Item = &'a K>) -> BTreeSet<String> {
    objects.into_iter().map(|o| o.meta().uid.clone().unwrap()).collect()
}

/// What a sharded watcher said of who filtered: `stats().shard_filter` and every
/// `Notice::ShardFilter` so far.
fn told<K: Watchable>(
    w: &Watcher<K>,
    notices: &kube_watcher::crossbeam_channel::Receiver<Notice>,
) -> (Option<ShardFilter>, Vec<ShardFilter>) {
    let said = notices
        .try_iter()
        .filter_map(|n| match n {
            Notice::ShardFilter { by } => Some(by),
            _ => None,
        })
        .collect();
    (w.stats().shard_filter, said)
}

/// A watcher learns who filtered its shard right, whatever way it syncs: a paged list of full
/// objects, a streaming list, a metadata watcher's paged or streaming list. A metadata-only
/// list says nothing about it: kube-apiserver does not carry `metadata.shardInfo` over into a
/// `PartialObjectMetadataList` (docs/protocol.md, "Sharded lists and watches"), and a
/// streaming list has no list metadata at all. (Both used to say `Client` on a filtering
/// server: the metadata-only list's missing `shardInfo` was read as "not filtered".)
#[test]
fn every_way_of_syncing_learns_who_filtered_the_shard() {
    let Some(bed) = Bed::shared() else { return };
    let ns = bed.namespace("filter");
    let api: Api<Pod> = Api::namespaced(bed.client(), &ns);
    create_pods(&api, &ns, 0..16);
    let all = uids(&list_all(&api, &ListParams::default()));
    let shard = Shard::of(1, 2).unwrap();
    let mine: BTreeSet<String> = all.iter().filter(|u| shard.contains(u)).cloned().collect();
    for (user, expected) in [(User::Admin, bed.shard_filter()), (User::NoGate, ShardFilter::Client)] {
        let api: Api<Pod> = Api::namespaced(bed.client_of(user), &ns);
        for streaming in [false, true] {
            let mut config = Config::default().shard(shard.clone());
            if streaming {
                config = config.streaming_lists();
            }
            let label = format!("{user:?}, streaming lists: {streaming}");
            let full = Watcher::new(api.clone(), config.clone()).unwrap();
            let notices = full.notices();
            full.store().wait_until_ready(WAIT).unwrap();
            assert_eq!(told(&full, &notices), (Some(expected), vec![expected]), "{label}: full objects");
            assert_eq!(uids(full.store().state().iter().map(|p| &**p)), mine, "{label}: full objects");
            full.stop();

            let meta = metadata_watcher(api.clone(), config).unwrap();
            let notices = meta.notices();
            meta.store().wait_until_ready(WAIT).unwrap();
            assert_eq!(told(&meta, &notices), (Some(expected), vec![expected]), "{label}: metadata");
            assert_eq!(uids(meta.store().state().iter().map(|p| &**p)), mine, "{label}: metadata");
            meta.stop();
        }
    }
}

/// A client of the server without the gate, through a proxy (to cut its connections).
fn nogate_via(bed: &Bed) -> (Proxy, Client) {
    let proxy = Proxy::start(bed.port("nogate"));
    let text = std::fs::read_to_string(bed.kubeconfig(User::NoGate)).unwrap();
    let text = text.replace(&format!("127.0.0.1:{}", bed.port("nogate")), &format!("127.0.0.1:{}", proxy.port()));
    let client = Client::from_kubeconfig_yaml(&text, &KubeconfigOptions::default()).unwrap();
    (proxy, client)
}

fn template(ns: &str, name: &str, label: &str) -> PodTemplate {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": ns, "labels": {"resume": label}},
        "template": {"spec": {"containers": [{"name": "c", "image": "registry.example/app:1"}]}}
    }))
    .unwrap()
}

/// A quiet shard resumes past the other shards' events without a relist: their events, dropped
/// before decoding, still move the version the watch resumes from (docs/protocol.md, 14.4).
/// PodTemplates have no watch cache on the bed, so a compaction expires every older version at
/// once: the shard's own last event is from before it, the others' after it; a watch resumed
/// from the shard's own last event would meet 410 and relist. On the server that does not
/// filter (on one that does, no other shard's event arrives).
#[test]
fn a_quiet_shard_resumes_past_the_other_shards_events_without_a_relist() {
    // Exclusive: another test's compaction would expire the version this one resumes from.
    let Some(bed) = Bed::exclusive() else { return };
    let shard = Shard::of(0, 2).unwrap().by_namespace();
    let (mut own, mut other) = (None, None);
    while own.is_none() || other.is_none() {
        let ns = bed.namespace("resume");
        let slot = if shard.contains(&ns) { &mut own } else { &mut other };
        slot.get_or_insert(ns);
    }
    let (own, other) = (own.unwrap(), other.unwrap());
    let admin = |ns: &str| Api::<PodTemplate>::namespaced(bed.client_of(User::NoGate), ns);
    admin(&own).create(&template(&own, "t0", &own)).unwrap();
    let (proxy, client) = nogate_via(&bed);
    let config = Config::default().shard(shard).labels(&format!("resume={own}"));
    let watcher = Watcher::new(Api::<PodTemplate>::all(client), config).unwrap();
    watcher.store().wait_until_ready(WAIT).unwrap();
    assert_eq!(watcher.store().len(), 1);
    bed.compact();
    let mut last = String::new();
    for i in 0..3 {
        let made = admin(&other).create(&template(&other, &format!("t{i}"), &own)).unwrap();
        last = made.metadata.resource_version.unwrap();
    }
    let reached = last.clone();
    until("the other shard's events reach the watcher", || {
        watcher.store().resource_version().is_some_and(|rv| rv.parse::<u64>().unwrap() >= reached.parse().unwrap())
    });
    let before = watcher.stats();
    proxy.cut();
    admin(&own).create(&template(&own, "t-after", &own)).unwrap();
    until("the shard's next event arrives", || watcher.store().get(&ObjectRef::new("t-after").within(&own)).is_some());
    let stats = watcher.stats();
    assert!(stats.watches > before.watches, "the watch was resumed: {stats:?}");
    // The gated server refuses the streaming list, and the watcher lists in pages: that relist
    // is not one the resume could have saved.
    let relists = stats.relists.total() - stats.relists.streaming_fallback;
    assert_eq!((relists, stats.relists.expired), (1, 0), "{stats:?}");
    assert_eq!(watcher.store().len(), 2);
}

/// Drift checks on the real server: each compares the store with a metadata-only list and finds
/// it in step, for a watcher of every object and for a shard (whose check drops the other
/// shards' objects, which are no drift), on both servers.
#[test]
fn drift_checks_find_the_store_in_step() {
    let Some(bed) = Bed::shared() else { return };
    let ns = bed.namespace("drift");
    let api: Api<ConfigMap> = Api::namespaced(bed.client(), &ns);
    for i in 0..6 {
        api.create(&crate::lists::config_map(&ns, &format!("cm-{i}"), "v")).unwrap();
    }
    for user in [User::Admin, User::NoGate] {
        for shard in [None, Some(Shard::of(1, 2).unwrap())] {
            let label = format!("{user:?} {shard:?}");
            let mut config = Config::default().drift_check(Duration::from_secs(1));
            if let Some(shard) = &shard {
                config = config.shard(shard.clone());
            }
            let api: Api<ConfigMap> = Api::namespaced(bed.client_of(user), &ns);
            let watcher = Watcher::new(api.clone(), config).unwrap();
            let notices = watcher.notices();
            watcher.store().wait_until_ready(WAIT).unwrap();
            let mut checked = Vec::new();
            until("two drift checks", || {
                checked.extend(notices.try_iter().filter_map(|n| match n {
                    Notice::DriftChecked { mismatched } => Some(mismatched),
                    _ => None,
                }));
                checked.len() >= 2
            });
            assert!(checked.iter().all(|m| *m == 0), "{label}: {checked:?}");
            let stats = watcher.stats();
            // On the gated server the streaming list is refused and the watcher lists in pages.
            let relists = stats.relists.total() - stats.relists.streaming_fallback;
            assert_eq!((relists, stats.relists.drift), (1, 0), "{label}: {stats:?}");
            let held = watcher.store().len();
            let want = list_all(&api, &ListParams::default())
                .iter()
                .filter(|c| shard.as_ref().is_none_or(|s| s.contains(c.metadata.uid.as_deref().unwrap())))
                .count();
            assert_eq!(held, want, "{label}");
            watcher.stop();
        }
    }
}

/// The compact and the compressed stores on the real server: what they hold is what the server
/// lists, through changes and a delete, and an object read back is the one written.
#[test]
fn the_compact_and_compressed_stores_hold_what_the_server_does() {
    let Some(bed) = Bed::shared() else { return };
    let ns = bed.namespace("compact");
    let api: Api<Pod> = Api::namespaced(bed.client(), &ns);
    create_pods(&api, &ns, 0..8);
    let watchers = [
        ("compact", Watcher::builder(api.clone()).compact_store().start().unwrap()),
        ("compressed", Watcher::builder(api.clone()).compressed_store().start().unwrap()),
    ];
    for (_, w) in &watchers {
        w.store().wait_until_ready(WAIT).unwrap();
    }
    let mut changed = api.get("p3").unwrap();
    changed.metadata.labels.get_or_insert_with(BTreeMap::new).insert("tier".into(), "gold".into());
    api.replace(&changed).unwrap();
    api.delete("p5").unwrap();
    create_pods(&api, &ns, 8..10);
    for (what, w) in &watchers {
        same_as_server(&w.store(), &api, &ListParams::default());
        let p3 = w.store().get(&ObjectRef::new("p3").within(&ns)).unwrap();
        assert_eq!(p3.metadata.labels.as_ref().unwrap()["tier"], "gold", "{what}");
        let server = api.get("p3").unwrap();
        assert_eq!(p3.spec, server.spec, "{what}: the pod's spec, read back from the store");
    }
}

/// Fields skipped by map key (`data[big]`, `metadata.annotations[note]`) are never held, over
/// protobuf and over JSON, through the list and a later change; the rest of each map stays.
#[test]
fn fields_skipped_by_map_key_are_never_held() {
    let Some(bed) = Bed::shared() else { return };
    let ns = bed.namespace("skip");
    let api: Api<ConfigMap> = Api::namespaced(bed.client(), &ns);
    let cm = |name: &str, big: &str| ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(ns.clone()),
            annotations: Some(BTreeMap::from([("note".into(), "n".into()), ("keep".into(), "y".into())])),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([("big".into(), big.into()), ("small".into(), "s".into())])),
        ..ConfigMap::default()
    };
    api.create(&cm("a", &"x".repeat(1000))).unwrap();
    for format in [WireFormat::Protobuf, WireFormat::Json] {
        let watcher = Watcher::builder(api.clone())
            .config(Config::default().wire_format(format))
            .skip_fields(["data[big]", "metadata.annotations[note]"])
            .start()
            .unwrap();
        watcher.store().wait_until_ready(WAIT).unwrap();
        assert_eq!(watcher.stats().wire_format, Some(format));
        let name = format!("b-{format:?}").to_lowercase();
        api.create(&cm(&name, "y")).unwrap();
        until("the new one arrives", || watcher.store().get(&ObjectRef::new(&name).within(&ns)).is_some());
        for held in watcher.store().state() {
            let data = held.data.as_ref().unwrap();
            assert_eq!(data.keys().collect::<Vec<_>>(), ["small"], "{format:?}: {held:?}");
            let notes = held.metadata.annotations.as_ref().unwrap();
            assert_eq!(notes.keys().collect::<Vec<_>>(), ["keep"], "{format:?}: {held:?}");
        }
        watcher.stop();
    }
}
