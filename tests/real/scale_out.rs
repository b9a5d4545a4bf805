//! Scale-out on the real server: the sharded watch with the `ShardedListAndWatch` gate (the
//! server filters) and without it (the client does), leader election on real Leases, and a shard
//! group whose watchers split the pods.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube_watcher::{
    Api, Client, Config, KubeconfigOptions, LeaderElector, LeaseTimings, ListParams, Shard, ShardFilter, ShardGroup,
    Watcher,
};

use crate::bed::{Bed, User, list_all, until};
use crate::common::WAIT;
use crate::proxy::Proxy;

pub fn pod(ns: &str, name: &str) -> Pod {
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

fn uids<'a>(pods: impl IntoIterator<Item = &'a Pod>) -> BTreeSet<String> {
    pods.into_iter().map(|p| p.metadata.uid.clone().unwrap()).collect()
}

#[test]
fn each_shard_gets_its_own_pods_whether_or_not_the_server_filters() {
    let Some(bed) = Bed::shared() else { return };
    let ns = bed.namespace("shards");
    let api: Api<Pod> = Api::namespaced(bed.client(), &ns);
    create_pods(&api, &ns, 0..40);
    let all = uids(&list_all(&api, &ListParams::default()));
    for (user, filter) in [(User::Admin, bed.shard_filter()), (User::NoGate, ShardFilter::Client)] {
        let api: Api<Pod> = Api::namespaced(bed.client_of(user), &ns);
        let mut union = BTreeSet::new();
        for i in 0..3 {
            let shard = Shard::of(i, 3).unwrap();
            // The server's own answer to the selector, as a one-shot list shows it.
            let watcher = Watcher::new(api.clone(), Config::default().shard(shard.clone())).unwrap();
            watcher.store().wait_until_ready(WAIT).unwrap();
            assert_eq!(watcher.stats().shard_filter, Some(filter), "{user:?} shard {i}");
            let held = uids(watcher.store().state().iter().map(|p| &**p));
            let mine: BTreeSet<String> = all.iter().filter(|u| shard.contains(u)).cloned().collect();
            assert_eq!(held, mine, "{user:?} shard {i}");
            assert!(union.is_disjoint(&held));
            union.extend(held);
        }
        assert_eq!(union, all, "{user:?}: the shards cover the pods");
    }
    // A watch event reaches the shard of its pod only, in both flavours.
    let gated: Api<Pod> = Api::namespaced(bed.client(), &ns);
    let plain: Api<Pod> = Api::namespaced(bed.client_of(User::NoGate), &ns);
    let shard = Shard::of(0, 2).unwrap();
    let watchers = [
        Watcher::new(gated, Config::default().shard(shard.clone())).unwrap(),
        Watcher::new(plain, Config::default().shard(shard.clone())).unwrap(),
    ];
    for w in &watchers {
        w.store().wait_until_ready(WAIT).unwrap();
    }
    create_pods(&api, &ns, 40..60);
    let now = uids(&list_all(&api, &ListParams::default()));
    let mine: BTreeSet<String> = now.iter().filter(|u| shard.contains(u)).cloned().collect();
    for w in &watchers {
        until("the new pods of the shard arrive", || uids(w.store().state().iter().map(|p| &**p)) == mine);
    }
}

fn timings() -> LeaseTimings {
    LeaseTimings {
        lease_duration: Duration::from_secs(4),
        renew_deadline: Duration::from_secs(3),
        retry_period: Duration::from_millis(500),
    }
}

/// Three electors on one real Lease: one leads; a clean stop hands over within about a retry
/// period; a crashed leader (its connections refused for good) is replaced after the lease
/// duration; a paused leader (its connection silent) steps down before anyone else leads.
#[test]
fn three_electors_keep_one_leader_through_stop_crash_and_pause() {
    let Some(bed) = Bed::shared() else { return };
    let ns = bed.namespace("elect");
    let proxies: Vec<Proxy> = (0..3).map(|_| Proxy::start(bed.port("apiserver"))).collect();
    let electors: Vec<LeaderElector> = proxies
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let client =
                Client::from_kubeconfig_yaml(&bed.kubeconfig_via(p.port()), &KubeconfigOptions::default()).unwrap();
            LeaderElector::start(Api::<Lease>::namespaced(client, &ns), "lock", &format!("e{i}"), timings()).unwrap()
        })
        .collect();
    let leases: Api<Lease> = Api::namespaced(bed.client(), &ns);
    let holder = || leases.get("lock").ok().and_then(|l| l.spec.and_then(|s| s.holder_identity));
    let leaders = |alive: &[usize]| alive.iter().copied().filter(|i| electors[*i].is_leader()).collect::<Vec<_>>();
    let one_leader = |alive: &[usize]| -> usize {
        let mut found = None;
        until("one leader", || {
            let l = leaders(alive);
            assert!(l.len() <= 1, "two leaders at once: {l:?}");
            found = l.first().copied();
            found.is_some_and(|i| holder().as_deref() == Some(format!("e{i}").as_str()))
        });
        found.unwrap()
    };
    let alive = [0, 1, 2];

    // A pause: the leader's connection goes silent past its lease; it steps down, another leads.
    let first = one_leader(&alive);
    proxies[first].stall(true);
    until("the paused leader steps down", || !electors[first].is_leader());
    let others: Vec<usize> = alive.iter().copied().filter(|i| *i != first).collect();
    let second = one_leader(&others);
    proxies[first].cut();
    proxies[first].stall(false);
    // Back from its pause, the old leader finds the lease taken and follows.
    until("after the pause, only the new leader leads", || leaders(&alive) == [second]);

    // A clean stop hands over: the lease is released at once.
    electors[second].stop();
    // Released by the time stop() returns: empty, or already taken by another elector.
    let after_stop = holder();
    assert_ne!(after_stop, Some(format!("e{second}")), "a stopped leader releases the lease");
    let rest: Vec<usize> = alive.iter().copied().filter(|i| *i != second).collect();
    let third = one_leader(&rest);

    // A crash: its connections are refused from now on; it never releases. The last one takes
    // the lease once it has seen it unchanged for a lease duration.
    proxies[third].refuse(true);
    proxies[third].cut();
    let last: Vec<usize> = rest.iter().copied().filter(|i| *i != third).collect();
    let fourth = one_leader(&last);
    until("the cut-off leader knows it lost", || !electors[third].is_leader());
    assert_eq!(holder(), Some(format!("e{fourth}")));
}

struct Replica {
    group: ShardGroup,
    watcher: Watcher<Pod>,
}

fn replica(bed: &Bed, ns: &str, identity: &str) -> Replica {
    let leases: Api<Lease> = Api::namespaced(bed.client(), ns);
    let group = ShardGroup::join(leases, "pods", identity, timings()).unwrap();
    let watcher = Watcher::new(Api::namespaced(bed.client(), ns), Config::default().shard_group(&group)).unwrap();
    Replica { group, watcher }
}

/// Waits until the stores together hold the server's pods, each in one store; at every sample no
/// pod is in two stores (each store read twice, a pod counted only when both readings hold it).
fn settle(what: &str, api: &Api<Pod>, replicas: &[&Replica]) {
    until(what, || {
        for r in replicas {
            while r.watcher.try_recv().is_ok() {}
        }
        let read = |r: &&Replica| uids(r.watcher.store().state().iter().map(|p| &**p));
        let first: Vec<_> = replicas.iter().map(read).collect();
        let second: Vec<_> = replicas.iter().map(read).collect();
        let mut seen = BTreeMap::new();
        for (a, b) in first.iter().zip(&second) {
            for uid in a.intersection(b) {
                *seen.entry(uid.clone()).or_insert(0) += 1;
            }
        }
        assert!(seen.values().all(|n| *n <= 1), "{what}: a pod in two stores at once");
        let all = uids(&list_all(api, &ListParams::default()));
        let union: BTreeSet<String> = second.iter().flatten().cloned().collect();
        union == all && second.iter().map(BTreeSet::len).sum::<usize>() == all.len()
    });
}

#[test]
fn a_shard_group_splits_the_pods_through_a_join_and_a_leave() {
    let Some(bed) = Bed::shared() else { return };
    let ns = bed.namespace("group");
    let api: Api<Pod> = Api::namespaced(bed.client(), &ns);
    create_pods(&api, &ns, 0..60);
    let (a, b, c) = (replica(&bed, &ns, "a"), replica(&bed, &ns, "b"), replica(&bed, &ns, "c"));
    until("three members", || [&a, &b, &c].iter().all(|r| r.group.members().len() == 3));
    settle("three replicas", &api, &[&a, &b, &c]);
    for r in [&a, &b, &c] {
        assert_eq!(r.watcher.stats().shard_filter, Some(bed.shard_filter()));
    }
    let d = replica(&bed, &ns, "d");
    until("four members", || [&a, &b, &c, &d].iter().all(|r| r.group.members().len() == 4));
    settle("four replicas", &api, &[&a, &b, &c, &d]);
    // A leave: d stops; its pods go to the others.
    d.watcher.stop();
    d.group.stop();
    settle("d left", &api, &[&a, &b, &c]);
    create_pods(&api, &ns, 60..70);
    settle("new pods", &api, &[&a, &b, &c]);
    let leases: Api<Lease> = Api::namespaced(bed.client(), &ns);
    let holders: BTreeSet<String> = list_all(&leases, &ListParams::default())
        .into_iter()
        .filter_map(|l| l.spec.and_then(|s| s.holder_identity))
        .filter(|h| !h.is_empty())
        .collect();
    assert_eq!(holders.len(), 3, "{holders:?}");
    // Each store is exactly its share of a fresh list.
    for r in [&a, &b, &c] {
        let shard = r.group.shard().unwrap();
        let want: Vec<Pod> = list_all(&api, &ListParams::default())
            .into_iter()
            .filter(|p| shard.contains(p.metadata.uid.as_deref().unwrap()))
            .collect();
        assert_eq!(uids(r.watcher.store().state().iter().map(|p| &**p)), uids(&want));
    }
}

/// The first `GroupChange::Conflict` a member reports.
fn conflict(group: &ShardGroup) -> String {
    loop {
        if let kube_watcher::GroupChange::Conflict(why) = group.changes().recv_timeout(WAIT).expect("a change") {
            return why;
        }
    }
}

/// On real Leases (whose `renewTime` the server keeps in microseconds, and sends back in
/// protobuf or JSON): a member never takes its own renewals for a twin's; a second process
/// with its identity does, and holds nothing; a member whose Lease name is an elector's
/// refuses it, and the elector keeps leading.
#[test]
fn twins_and_clashing_lease_names_are_refused_and_hold_nothing() {
    let Some(bed) = Bed::shared() else { return };
    let ns = bed.namespace("twins");
    let leases: Api<Lease> = Api::namespaced(bed.client_of(User::Admin), &ns);
    let first = ShardGroup::join(leases.clone(), "pods", "same", timings()).unwrap();
    until("the first holds everything", || first.shard() == Some(Shard::of(0, 1).unwrap()));
    // Renewed many times since: its own writes, as the server stored them, are its own.
    let renewals = |n: usize| {
        let before = leases.get("pods-same").unwrap().metadata.resource_version.unwrap();
        let mut seen = BTreeSet::from([before]);
        until("renewals", || {
            seen.insert(leases.get("pods-same").unwrap().metadata.resource_version.unwrap());
            seen.len() > n
        });
    };
    renewals(4);
    assert_eq!(first.shard(), Some(Shard::of(0, 1).unwrap()));

    let second = ShardGroup::join(leases.clone(), "pods", "same", timings()).unwrap();
    let why = conflict(&second);
    assert!(why.contains("another process holds it as \"same\""), "{why}");
    renewals(4);
    assert_eq!(second.shard(), None);
    assert_eq!(first.shard(), Some(Shard::of(0, 1).unwrap()));

    let elector = LeaderElector::start(leases.clone(), "pods-leader", "e", timings()).unwrap();
    assert!(elector.wait_until_leader(WAIT));
    let member = ShardGroup::join(leases, "pods", "leader", timings()).unwrap();
    let why = conflict(&member);
    assert!(why.contains("\"pods-leader\"") && why.contains("LeaderElector"), "{why}");
    assert!(elector.is_leader() && member.shard().is_none());
}
