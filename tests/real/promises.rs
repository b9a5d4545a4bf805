//! The library's promises on the real server, each where the fake alone had backed it: who
//! filters a shard, whatever way a watcher syncs.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Pod;
use kube_watcher::{Api, Config, ListParams, Notice, Shard, ShardFilter, Watchable, Watcher, metadata_watcher};

use crate::bed::{Bed, User, list_all};
use crate::common::WAIT;

fn pod(ns: &str, name: &str) -> Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": ns, "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "c", "image": "registry.example/app:1"}]}
    }))
    .unwrap()
}

fn create_pods(api: &Api<Pod>, ns: &str, names: std::ops::Range<usize>) {
    for i in names {
        api.create(&pod(ns, &format!("p{i}"))).unwrap();
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
