//! Shard groups on the real server when things go wrong: a member killed (its connections
//! refused for good), a member's Lease deleted under it, a follower whose list hangs while its
//! member's lead ends, a member stopped while its follower is held up by a consumer. Each member speaks through proxies of its own (tests/real/proxy.rs), one
//! for its group's Leases and one for its watcher, so that a test can fail either alone.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crossbeam_channel::Receiver;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube_watcher::{Api, Client, Config, KubeconfigOptions, ListParams, ShardGroup, Watcher};

use crate::bed::{Bed, list_all, until};
use crate::proxy::Proxy;

/// Short leases, so that a test takes seconds; `margin` is how much longer a Lease lasts in the
/// others' eyes than its holder's lead does.
fn timings(margin: Duration) -> kube_watcher::LeaseTimings {
    kube_watcher::LeaseTimings {
        lease_duration: Duration::from_secs(3) + margin,
        renew_deadline: Duration::from_secs(3),
        retry_period: Duration::from_millis(500),
    }
}

/// One member: its group and its watcher, each through a proxy of its own.
struct Member {
    group: ShardGroup,
    watcher: Watcher<Pod>,
    leases: Proxy,
    pods: Proxy,
}

fn member(bed: &Bed, ns: &str, identity: &str) -> Member {
    member_with(bed, ns, identity, Duration::from_secs(1))
}

fn member_with(bed: &Bed, ns: &str, identity: &str, margin: Duration) -> Member {
    let via = |proxy: &Proxy| {
        Client::from_kubeconfig_yaml(&bed.kubeconfig_via(proxy.port()), &KubeconfigOptions::default()).unwrap()
    };
    let (leases, pods) = (Proxy::start(bed.port("apiserver")), Proxy::start(bed.port("apiserver")));
    let group =
        ShardGroup::join(Api::<Lease>::namespaced(via(&leases), ns), "pods", identity, timings(margin)).unwrap();
    let watcher = Watcher::new(Api::namespaced(via(&pods), ns), Config::default().shard_group(&group)).unwrap();
    Member { group, watcher, leases, pods }
}

fn uids(member: &Member) -> BTreeSet<String> {
    member.watcher.store().state().iter().map(|p| p.metadata.uid.clone().unwrap()).collect()
}

/// Waits until `holders` together hold the server's pods, each in one store; at every sample
/// no pod is in two stores of `all` (each store read twice, a pod counted only when both
/// readings hold it).
fn settle(what: &str, api: &Api<Pod>, all: &[&Member], holders: &[&Member]) {
    until(what, || {
        for m in all {
            while m.watcher.try_recv().is_ok() {}
        }
        let first: Vec<_> = all.iter().map(|m| uids(m)).collect();
        let second: Vec<_> = all.iter().map(|m| uids(m)).collect();
        let mut seen = BTreeMap::new();
        for (a, b) in first.iter().zip(&second) {
            for uid in a.intersection(b) {
                *seen.entry(uid.clone()).or_insert(0) += 1;
            }
        }
        assert!(seen.values().all(|n| *n <= 1), "{what}: a pod in two stores at once");
        let server: BTreeSet<String> =
            list_all(api, &ListParams::default()).iter().map(|p| p.metadata.uid.clone().unwrap()).collect();
        let held: Vec<BTreeSet<String>> = holders.iter().map(|m| uids(m)).collect();
        let union: BTreeSet<String> = held.iter().flatten().cloned().collect();
        union == server && held.iter().map(BTreeSet::len).sum::<usize>() == server.len()
    });
}

/// Waits until `events` has brought the `Delete` of `n` distinct pods: a follower that let go
/// of its share dropped each pod itself.
fn every_delete_arrives(events: &Receiver<kube_watcher::Result<kube_watcher::Event<Pod>>>, n: usize) {
    let mut deleted = BTreeSet::new();
    until("the follower drops every pod", || {
        while let Ok(event) = events.try_recv() {
            if let Ok(kube_watcher::Event::Delete(p)) = event {
                deleted.insert(p.metadata.uid.clone().unwrap());
            }
        }
        deleted.len() == n
    });
}

fn pods(bed: &Bed, what: &str, n: usize) -> (String, Api<Pod>) {
    let ns = bed.namespace(what);
    let api: Api<Pod> = Api::namespaced(bed.client(), &ns);
    for i in 0..n {
        api.create(&crate::scale_out::pod(&ns, &format!("p{i}"))).unwrap();
    }
    (ns, api)
}

/// A member killed (every connection of it refused from then on, so it never releases its
/// Lease): its own store empties as its lead ends, and the others take its share over once its
/// Lease has expired in their eyes; no pod is ever in two stores.
#[test]
fn a_killed_members_share_is_taken_over() {
    let Some(bed) = Bed::shared() else { return };
    let (ns, api) = pods(&bed, "group-kill", 30);
    let members = [member(&bed, &ns, "a"), member(&bed, &ns, "b"), member(&bed, &ns, "c")];
    let all: Vec<&Member> = members.iter().collect();
    until("three members", || members.iter().all(|m| m.group.members().len() == 3));
    settle("three members", &api, &all, &all);
    let killed = &members[2];
    for proxy in [&killed.leases, &killed.pods] {
        proxy.refuse(true);
        proxy.cut();
    }
    until("the killed member's store empties as its lead ends", || uids(killed).is_empty());
    settle("the two left hold every pod", &api, &all, &all[..2]);
    until("the two left see each other only", || members[..2].iter().all(|m| m.group.members().len() == 2));
}

/// A member's Lease deleted under it (found by its holder, through the API): the group settles
/// again with every member in it and every pod in one store.
#[test]
fn a_deleted_member_lease_is_made_again() {
    let Some(bed) = Bed::shared() else { return };
    let (ns, api) = pods(&bed, "group-delete", 20);
    let members = [member(&bed, &ns, "a"), member(&bed, &ns, "b")];
    let all: Vec<&Member> = members.iter().collect();
    until("two members", || members.iter().all(|m| m.group.members().len() == 2));
    settle("two members", &api, &all, &all);
    let leases: Api<Lease> = Api::namespaced(bed.client(), &ns);
    let holder = |l: &Lease| l.spec.as_ref().and_then(|s| s.holder_identity.clone());
    let of_b = list_all(&leases, &ListParams::default())
        .into_iter()
        .find(|l| holder(l).as_deref() == Some("b"))
        .expect("b's Lease");
    leases.delete(of_b.metadata.name.as_deref().unwrap()).unwrap();
    until("b's Lease is made again", || {
        list_all(&leases, &ListParams::default()).iter().any(|l| holder(l).as_deref() == Some("b"))
    });
    until("two members again", || members.iter().all(|m| m.group.members().len() == 2));
    settle("two members again", &api, &all, &all);
}

/// A follower whose list hangs (its answer held back) while its member's lead ends (its
/// Leases refused): its store reads empty from then on, no pod is ever in its store and the
/// other's, the hanging request is cut and the follower drops every pod (its consumer gets
/// the `Delete`s); the other then holds every pod.
#[test]
fn a_follower_whose_list_hangs_still_lets_go_when_its_lead_ends() {
    let Some(bed) = Bed::shared() else { return };
    let (ns, api) = pods(&bed, "group-hang", 20);
    // A margin of 5 s between a's lead and its Lease's expiry in b's eyes. a's store reads
    // empty from the end of its lead whatever its follower does; the margin gives the cut
    // follower the time to drop its pods itself before b takes them, where an uncut list
    // would hang for the 70 s of a request's silence.
    let margin = Duration::from_secs(5);
    let a = member_with(&bed, &ns, "a", margin);
    settle("a alone", &api, &[&a], &[&a]);
    // a's watcher goes silent; a new member makes a's share shrink, so a's follower relists,
    // and that list hangs: sent on a new connection, its answer held back (past the connect
    // timeout, which would end a hanging handshake on its own).
    a.pods.hold_answers(true);
    let b = member_with(&bed, &ns, "b", margin);
    until("two members", || [&a, &b].iter().all(|m| m.group.members().len() == 2));
    // a's lead ends: its renewals are refused.
    a.leases.refuse(true);
    a.leases.cut();
    // Until a's store is empty, b holds none of its pods: b takes the share only once a's
    // Lease has expired in its eyes, by when a's follower must have let go, its list cut.
    until("a's store empties although its list hangs", || {
        let (a1, b1, a2) = (uids(&a), uids(&b), uids(&a));
        let both: Vec<_> = a1.intersection(&a2).filter(|u| b1.contains(*u)).collect();
        assert!(both.is_empty(), "a pod in a's hung store and in b's: {both:?}");
        a2.is_empty()
    });
    // a's store reads empty from the end of its lead whatever its follower does; the
    // `Delete`s say that the follower let go itself, its list cut (uncut, it would hang for
    // the 70 s of a request's silence).
    every_delete_arrives(a.watcher.receiver(), 20);
    settle("b holds every pod", &api, &[&a, &b], &[&b]);
    a.pods.hold_answers(false);
}

/// A member stopped while its follower is held up where no cut reaches it (delivering to a
/// consumer that does not read): its store reads empty once `stop()` returns, not only from the
/// end of the lead it last renewed (up to a renew deadline later), since the release lets
/// another member take the share before then. Once the consumer reads, the follower drops every
/// pod, and the consumer gets each one's `Delete`.
#[test]
fn a_stopped_members_held_up_follower_reads_empty_at_once() {
    let Some(bed) = Bed::shared() else { return };
    let (ns, api) = pods(&bed, "group-held", 20);
    let client = bed.client();
    let group =
        ShardGroup::join(Api::<Lease>::namespaced(client.clone(), &ns), "pods", "a", timings(Duration::from_secs(1)))
            .unwrap();
    let watcher = Watcher::builder(Api::<Pod>::namespaced(client, &ns))
        .config(Config::default().shard_group(&group))
        .channel_capacity(1)
        .start()
        .unwrap();
    let held = || watcher.store().state().len();
    until("a holds every pod", || held() == 20);
    // A consumer that does not read: its channel (the replay and room for one event) fills
    // with the changes of two new pods, and the follower waits for it.
    let slow = watcher.subscribe();
    for i in 20..22 {
        api.create(&crate::scale_out::pod(&ns, &format!("p{i}"))).unwrap();
    }
    // Held up only once it applied the second one (whose event no longer fits): before, a
    // stop would find it still reading the watch, with that pod never in its store.
    until("the follower waits for the consumer", || slow.is_full() && held() == 22);
    let queued = slow.len();
    group.stop();
    assert_eq!(held(), 0, "a's store reads empty once its member stopped");
    assert!(watcher.store().is_empty() && watcher.store().snapshot().is_empty());
    assert_eq!(slow.len(), queued, "the follower is still held up: it delivered nothing since");
    every_delete_arrives(&slow, 22);
}
