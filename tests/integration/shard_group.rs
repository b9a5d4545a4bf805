//! `ShardGroup` against the fake server: members split the hash space without overlap, a late
//! joiner takes about its share, a clean stop hands over at once, a member that cannot renew
//! gives up its share before its lease expires and the others take it after.
#![cfg(feature = "testing")]

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use common::*;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube_watcher::testing::{FakeApiServer, Fault, Match};
use kube_watcher::{Api, Client, Config, GroupChange, LeaseTimings, Shard, ShardGroup, Watcher};

fn timings() -> LeaseTimings {
    LeaseTimings {
        lease_duration: Duration::from_secs(6),
        renew_deadline: Duration::from_secs(4),
        retry_period: ms(100),
    }
}

fn join(server: &FakeApiServer, identity: &str) -> ShardGroup {
    let leases: Api<Lease> = Api::namespaced(Client::from_url(&server.url()).unwrap(), "apps");
    ShardGroup::join(leases, "pods", identity, timings()).unwrap()
}

/// Sample uids, as objects of the resource would have.
fn uids() -> Vec<String> {
    (0..2000).map(|i| format!("5b7d3c1e-{i:04}-uid")).collect()
}

/// How many members hold each uid now: twice read, a uid counts for a member only when both
/// readings have it (so a share handed over between two readings is not seen in two places).
fn owners(groups: &[&ShardGroup], uids: &[String]) -> Vec<usize> {
    let first: Vec<Option<Shard>> = groups.iter().map(|g| g.shard()).collect();
    let second: Vec<Option<Shard>> = groups.iter().map(|g| g.shard()).collect();
    uids.iter()
        .map(|uid| {
            first
                .iter()
                .zip(&second)
                .filter(|(a, b)| [a, b].iter().all(|s| s.as_ref().is_some_and(|s| s.contains(uid))))
                .count()
        })
        .collect()
}

/// Waits until every uid has exactly one owner among `groups`, checking at every sample that
/// none has two.
fn settle(what: &str, groups: &[&ShardGroup], uids: &[String]) {
    eventually(what, || {
        let owners = owners(groups, uids);
        assert!(owners.iter().all(|n| *n <= 1), "{what}: a uid held by two members at once");
        owners.iter().all(|n| *n == 1)
    });
}

/// The path of a member's Lease.
fn lease_path(group: &ShardGroup) -> String {
    format!("/apis/coordination.k8s.io/v1/namespaces/apps/leases/{}", group.lease_name())
}

fn share(group: &ShardGroup, uids: &[String]) -> usize {
    let shard = group.shard();
    uids.iter().filter(|u| shard.as_ref().is_some_and(|s| s.contains(u))).count()
}

#[test]
fn a_lone_member_holds_everything_and_says_so() {
    let server = FakeApiServer::start();
    let a = join(&server, "a");
    let mut seen = Vec::new();
    while !seen.contains(&GroupChange::Shard(Some(Shard::of(0, 1).unwrap()))) {
        seen.push(a.changes().recv_timeout(WAIT).expect("a share"));
    }
    assert!(seen.contains(&GroupChange::Members(vec!["a".into()])), "{seen:?}");
    assert_eq!(a.members(), ["a"]);
    let lease = server.get::<Lease>(Some("apps"), a.lease_name()).unwrap();
    let labels = lease.metadata.labels.unwrap_or_default();
    assert_eq!(labels.get("kube-watcher.io/shard-group").map(String::as_str), Some("pods"));
    a.stop();
    assert_eq!(a.shard(), None);
    let spec = server.get::<Lease>(Some("apps"), a.lease_name()).unwrap().spec.unwrap();
    assert_eq!(spec.holder_identity.as_deref(), Some(""), "released");
    let annotations = server.get::<Lease>(Some("apps"), a.lease_name()).unwrap().metadata.annotations.unwrap();
    assert_eq!(annotations.get("kube-watcher.io/shard-claim").map(String::as_str), Some(""), "nothing claimed");
    // The channel ends with the thread; the last share said is none.
    let rest: Vec<GroupChange> = a.changes().iter().collect();
    let last = rest.iter().rev().find(|c| matches!(c, GroupChange::Shard(_)));
    assert_eq!(last, Some(&GroupChange::Shard(None)), "{rest:?}");
}

/// Three members split the space; a fourth joins late and takes about a quarter, only from
/// the others; one stops and the rest take its share at once; one cannot renew (a crash, as
/// the others see it): it holds nothing from its renew deadline on, and the others take its
/// share once its lease expired. No uid is in two shares at any sampled instant.
#[test]
fn members_join_leave_and_crash_without_overlap_or_loss() {
    let server = FakeApiServer::start();
    let uids = uids();
    let (a, b, c) = (join(&server, "a"), join(&server, "b"), join(&server, "c"));
    settle("three members", &[&a, &b, &c], &uids);
    eventually("three members seen", || [&a, &b, &c].iter().all(|g| g.members() == ["a", "b", "c"]));
    settle("three members, settled", &[&a, &b, &c], &uids);
    let before: BTreeMap<&str, usize> =
        [("a", share(&a, &uids)), ("b", share(&b, &uids)), ("c", share(&c, &uids))].into();

    let d = join(&server, "d");
    eventually("d holds its share", || share(&d, &uids) > 0);
    // Once every member sees four, full coverage means each holds its whole target.
    eventually("four members seen", || [&a, &b, &c, &d].iter().all(|g| g.members().len() == 4));
    settle("four members", &[&a, &b, &c, &d], &uids);
    let taken = share(&d, &uids);
    assert!((200..=900).contains(&taken), "the newcomer took {taken} of 2000");
    for (name, g) in [("a", &a), ("b", &b), ("c", &c)] {
        assert!(share(g, &uids) <= before[name], "{name} did not grow when d joined");
    }

    // A clean stop: the others take d's share.
    d.stop();
    assert_eq!(d.shard(), None);
    settle("d left", &[&a, &b, &c], &uids);

    // c cannot renew: every write to its lease fails.
    for _ in 0..100_000 {
        server.push_fault(
            Match::Path(lease_path(&c)),
            Fault::Status { code: 500, reason: "InternalError".into(), message: "etcd".into(), retry_after: None },
        );
    }
    eventually("c gives up its share", || c.shard().is_none());
    settle("c is gone in a's and b's eyes", &[&a, &b, &c], &uids);
    assert_eq!(share(&c, &uids), 0);
    eventually("a sees c gone", || a.members() == ["a", "b"]);
    server.clear_faults();
    drop(c);
    a.stop();
    b.stop();
}

/// At rest, members renew their Leases and learn of each other from their watches: they list
/// the group only to grow, or while a watch is behind, far less often than they renew (before
/// the watch, every renewal was followed by a list).
#[test]
fn members_at_rest_renew_without_listing_the_group() {
    let server = FakeApiServer::start();
    let uids = uids();
    let (a, b, c) = (join(&server, "a"), join(&server, "b"), join(&server, "c"));
    eventually("three members seen", || [&a, &b, &c].iter().all(|g| g.members() == ["a", "b", "c"]));
    settle("three members", &[&a, &b, &c], &uids);
    server.clear_requests();
    let count = |list: bool| {
        server
            .requests()
            .iter()
            .filter(|r| {
                let collection = r.path == "/apis/coordination.k8s.io/v1/namespaces/apps/leases";
                if list { r.method == "GET" && collection && !r.watch } else { r.method == "PUT" }
            })
            .count()
    };
    eventually("60 renewals", || count(false) >= 60);
    let (renewals, lists) = (count(false), count(true));
    assert!(lists * 4 <= renewals, "{lists} lists of the group for {renewals} renewals");
    for g in [a, b, c] {
        g.stop();
    }
}

/// `stop` ends every thread of a member, also with a renewal held in flight: its group thread
/// (the changes channel disconnects) and the watch of its peers (the server sees it go).
#[test]
fn every_thread_of_a_member_ends_after_stop() {
    let server = FakeApiServer::start();
    let uids = uids();
    let (a, b) = (join(&server, "a"), join(&server, "b"));
    settle("two members", &[&a, &b], &uids);
    eventually("each member watches the group", || server.open_watches() == 2);
    let hold = server.hold(Match::Path(lease_path(&a)));
    assert!(hold.wait_until_held(WAIT));
    for group in [a, b] {
        let changes = group.changes().clone();
        let started = std::time::Instant::now();
        drop(group);
        println!("stopped in {:?}", started.elapsed());
        while changes.recv_timeout(WAIT).is_ok() {}
        assert!(changes.recv_timeout(ms(0)).unwrap_err().is_disconnected());
    }
    eventually("no watch left", || server.open_watches() == 0);
    drop(hold);
}

/// A member with a watcher over pods that follows its share.
struct Replica {
    group: ShardGroup,
    watcher: Watcher<Pod>,
}

fn replica(server: &FakeApiServer, identity: &str) -> Replica {
    let group = join(server, identity);
    let watcher = Watcher::new(pods(server), Config::default().shard_group(&group)).unwrap();
    Replica { group, watcher }
}

fn store_uids(w: &Watcher<Pod>) -> BTreeSet<String> {
    w.store().state().iter().map(|p| p.metadata.uid.clone().unwrap_or_default()).collect()
}

/// Waits until the union of the stores is the server's pods, each in one store; at every
/// sample (each store read twice, a pod counted in a store only when both readings have it),
/// no pod is in two stores.
fn stores_settle(what: &str, server: &FakeApiServer, replicas: &[&Replica]) {
    eventually(what, || {
        for r in replicas {
            while r.watcher.try_recv().is_ok() {}
        }
        let first: Vec<BTreeSet<String>> = replicas.iter().map(|r| store_uids(&r.watcher)).collect();
        let second: Vec<BTreeSet<String>> = replicas.iter().map(|r| store_uids(&r.watcher)).collect();
        let mut seen = BTreeMap::new();
        for (a, b) in first.iter().zip(&second) {
            for uid in a.intersection(b) {
                *seen.entry(uid.clone()).or_insert(0) += 1;
            }
        }
        assert!(seen.values().all(|n| *n <= 1), "{what}: a pod in two stores at once");
        let all: BTreeSet<String> =
            server.list::<Pod>().iter().map(|p| p.metadata.uid.clone().unwrap_or_default()).collect();
        let union: BTreeSet<String> = second.iter().flatten().cloned().collect();
        union == all && second.iter().map(BTreeSet::len).sum::<usize>() == all.len()
    });
}

/// Watchers that follow their group's share: the stores split the pods without overlap
/// through a late join, a clean stop, and a member that cannot renew.
#[test]
fn watchers_following_the_group_split_the_pods_without_overlap_or_loss() {
    let server = FakeApiServer::builder().bookmark_interval(ms(100)).sharded_list_and_watch(true).start();
    create_pods(&server, 0..60);
    let (a, b, c) = (replica(&server, "a"), replica(&server, "b"), replica(&server, "c"));
    stores_settle("three replicas", &server, &[&a, &b, &c]);
    eventually("three members", || [&a, &b, &c].iter().all(|r| r.group.members().len() == 3));
    stores_settle("three replicas, settled", &server, &[&a, &b, &c]);

    // d's arcs come partly from a's (the names fix the points), so a's watcher relists.
    let before = a.watcher.stats().relists.shard_changed;
    let d = replica(&server, "d");
    eventually("d holds pods", || {
        while d.watcher.try_recv().is_ok() {}
        !store_uids(&d.watcher).is_empty()
    });
    // Settled as four: every member sees the newcomer (before that, the stores may already
    // cover the server with d holding only what b and c gave up).
    eventually("four members", || [&a, &b, &c, &d].iter().all(|r| r.group.members().len() == 4));
    stores_settle("four replicas", &server, &[&a, &b, &c, &d]);
    eventually("four members, settled", || {
        stores_settle("four replicas, again", &server, &[&a, &b, &c, &d]);
        [&a, &b, &c, &d].iter().all(|r| {
            let shard = r.group.shard();
            let want = server
                .list::<Pod>()
                .iter()
                .filter_map(|p| p.metadata.uid.clone())
                .filter(|u| shard.as_ref().is_some_and(|s| s.contains(u)))
                .count();
            store_uids(&r.watcher).len() == want
        })
    });
    // Waited for, not read once: the stores may already look settled before a's watcher takes
    // the new share (when none of the random uids is in the arcs that moved).
    eventually("a's watcher relists when d joins", || a.watcher.stats().relists.shard_changed > before);

    // A clean stop: d gives up its share; its store is emptied; the others take it.
    d.group.stop();
    eventually("d's store is empty", || {
        while d.watcher.try_recv().is_ok() {}
        store_uids(&d.watcher).is_empty()
    });
    stores_settle("d left", &server, &[&a, &b, &c, &d]);

    // c cannot renew: its store empties before its lease expires; a and b take its pods.
    for _ in 0..100_000 {
        server.push_fault(
            Match::Path(lease_path(&c.group)),
            Fault::Status { code: 500, reason: "InternalError".into(), message: "etcd".into(), retry_after: None },
        );
    }
    stores_settle("c is gone", &server, &[&a, &b, &c]);
    eventually("a sees c gone", || a.group.members() == ["a", "b"]);
    // New pods land in exactly one store.
    create_pods(&server, 60..70);
    stores_settle("new pods", &server, &[&a, &b, &c]);
    server.clear_faults();
}

/// Faults every renewal of `group`'s Lease from now on (its lead ends at its renew
/// deadline); `clear_faults` lifts them.
fn refuse_renewals(server: &FakeApiServer, group: &ShardGroup) {
    for _ in 0..100_000 {
        server.push_fault(
            Match::Path(lease_path(group)),
            Fault::Status { code: 500, reason: "InternalError".into(), message: "etcd".into(), retry_after: None },
        );
    }
}

/// A follower whose relist hangs when its member's lead ends drops its objects all the same:
/// the lead's end cuts the list in flight, and the follower empties its store (its consumer
/// gets every pod's `Delete`) while the list would still hang.
#[test]
fn a_follower_in_a_hanging_list_empties_its_store_when_the_lead_ends() {
    let server = FakeApiServer::builder().sharded_list_and_watch(true).start();
    create_pods(&server, 0..20);
    let a = replica(&server, "a");
    stores_settle("a holds every pod", &server, &[&a]);
    // The watch is resumed (`end_watches`), answered 410 (its first request on the pods'
    // path), and the relist that follows (the second) hangs.
    let hold = server.hold_nth(Match::Path("/api/v1/pods".into()), 1);
    server.push_fault(
        Match::Path("/api/v1/pods".into()),
        Fault::Status {
            code: 410,
            reason: "Expired".into(),
            message: "too old resource version".into(),
            retry_after: None,
        },
    );
    server.end_watches();
    assert!(hold.wait_until_held(WAIT), "the relist hangs");
    assert_eq!(store_uids(&a.watcher).len(), 20);
    refuse_renewals(&server, &a.group);
    eventually("a's lead ends", || a.group.shard().is_none());
    // The store reads empty from the lead's end whatever the follower does; the `Delete`s
    // say that the follower itself let go, its list cut.
    let mut deleted = BTreeSet::new();
    eventually("a's follower drops every pod while its list still hangs", || {
        while let Ok(event) = a.watcher.try_recv() {
            if let Ok(kube_watcher::Event::Delete(p)) = event {
                deleted.insert(p.metadata.name.clone().unwrap_or_default());
            }
        }
        deleted.len() == 20
    });
    assert!(store_uids(&a.watcher).is_empty());
    assert!(hold.is_held() || server.pending_faults() > 0);
    drop(hold);
    server.clear_faults();
    stores_settle("a takes everything again", &server, &[&a]);
}

/// A consumer's events.
type Events = crossbeam_channel::Receiver<kube_watcher::Result<kube_watcher::Event<Pod>>>;

/// A follower held up: member `a` alone holds pods 0..20 (its watcher's channels hold one
/// event), and a consumer that does not read (`SlowConsumer::Block`) fills its channel with the
/// replay of the store and one more event; once pods 20 and 21 are made, the follower waits to
/// deliver the next one. Also returns how many events the consumer has queued.
fn held_up_follower(server: &FakeApiServer) -> (ShardGroup, Watcher<Pod>, Events, usize) {
    create_pods(server, 0..20);
    let group = join(server, "a");
    let watcher = Watcher::builder(pods(server))
        .config(Config::default().shard_group(&group))
        .channel_capacity(1)
        .start()
        .unwrap();
    eventually("a holds every pod", || store_uids(&watcher).len() == 20);
    let slow = watcher.subscribe();
    create_pods(server, 20..22);
    // Held up only once it applied the second one (whose event no longer fits): before, it
    // may still be reading the watch, with that pod never in its store.
    eventually("the follower waits for the consumer", || slow.is_full() && store_uids(&watcher).len() == 22);
    let queued = slow.len();
    (group, watcher, slow, queued)
}

/// The consumer of `held_up_follower` reads: the follower goes on and drops every pod it
/// held, and the consumer gets each one's `Delete`.
fn every_delete_arrives(slow: &Events) {
    let mut deleted = BTreeSet::new();
    eventually("every pod's Delete", || {
        while let Ok(event) = slow.try_recv() {
            if let Ok(kube_watcher::Event::Delete(p)) = event {
                deleted.insert(p.metadata.name.clone().unwrap_or_default());
            }
        }
        deleted.len() == 22
    });
}

/// A follower held up where no cut reaches it (delivering to a consumer that does not read,
/// `SlowConsumer::Block`) when its member's lead ends: its store reads empty from the lead's
/// end all the same, before the follower gets to drop anything, so no other member that takes
/// the share once the Lease expires finds it there. Once the consumer reads, the follower
/// drops every pod, and the consumer gets each one's `Delete`.
#[test]
fn a_held_up_followers_store_reads_empty_from_the_end_of_its_lead() {
    let server = FakeApiServer::builder().sharded_list_and_watch(true).start();
    let (group, watcher, slow, queued) = held_up_follower(&server);
    refuse_renewals(&server, &group);
    eventually("a's lead ends", || group.shard().is_none());
    eventually("a's store reads empty", || store_uids(&watcher).is_empty() && watcher.store().is_empty());
    assert!(watcher.store().snapshot().is_empty(), "a snapshot holds nothing");
    assert_eq!(watcher.store().generation() % 2, 1, "the generation says the store reads empty");
    assert_eq!(slow.len(), queued, "the follower is still held up: it delivered nothing since");
    every_delete_arrives(&slow);
    assert!(store_uids(&watcher).is_empty());
    server.clear_faults();
}

/// A member that stops while its follower is held up (a consumer that does not read): its
/// store reads empty from the stop, not from the end of the lead it last renewed (up to a
/// renew deadline later). The release lets a twin of this member take the share at once, and
/// any other member a second later, while the follower still holds the objects.
#[test]
fn a_held_up_followers_store_reads_empty_once_its_member_stops() {
    let server = FakeApiServer::builder().sharded_list_and_watch(true).start();
    let (group, watcher, slow, queued) = held_up_follower(&server);
    // The lead renewed last ends a renew deadline (4 s) after its renewal, 100 ms ago at most.
    group.stop();
    assert!(store_uids(&watcher).is_empty() && watcher.store().is_empty(), "a's store reads empty once it stopped");
    assert_eq!(slow.len(), queued, "the follower is still held up: it delivered nothing since");
    every_delete_arrives(&slow);
}

/// A member's Lease deleted under it (by hand, by a cleanup job) is not a member that let
/// go: the others wait a lease duration from when they last saw it change, and by then the
/// member, unable to renew, has emptied its store.
#[test]
fn a_deleted_lease_of_a_live_member_is_not_taken_over_at_once() {
    let server = FakeApiServer::builder().sharded_list_and_watch(true).start();
    create_pods(&server, 0..40);
    let (a, b) = (replica(&server, "a"), replica(&server, "b"));
    eventually("two members", || [&a, &b].iter().all(|r| r.group.members().len() == 2));
    // Settled stores may still be a's alone, before b's claim is written: wait for b's share.
    eventually("b holds a share", || {
        while b.watcher.try_recv().is_ok() {}
        !store_uids(&b.watcher).is_empty()
    });
    stores_settle("two replicas", &server, &[&a, &b]);
    // b cannot renew from now on: it holds its share until its renew deadline, and a must not
    // take it before then. (Here b still reads the group and yields to a's claim as soon as a
    // writes one; the group model, `src/lease/group_model.rs`, reaches the case where it
    // cannot, and fails without the rule that keeps a deleted Lease live.)
    refuse_renewals(&server, &b.group);
    server.delete::<Lease>(Some("apps"), b.group.lease_name()).unwrap();
    // Checked at every sample: no pod in both stores, until a holds them all.
    eventually("a takes b's share, after b dropped it", || {
        stores_settle("the stores split the pods", &server, &[&a, &b]);
        store_uids(&a.watcher).len() == 40
    });
    assert!(store_uids(&b.watcher).is_empty());
    server.clear_faults();
    eventually("b's Lease is back", || server.get::<Lease>(Some("apps"), b.group.lease_name()).is_some());
    eventually("b holds pods again", || {
        while b.watcher.try_recv().is_ok() {}
        !store_uids(&b.watcher).is_empty()
    });
    stores_settle("two replicas again", &server, &[&a, &b]);
}

/// A member that renews but cannot list the group (nor watch it) keeps its share: nothing
/// changed that it knows of, and its claim still covers what it holds.
#[test]
fn a_renewed_member_whose_group_lists_fail_keeps_its_share() {
    let server = FakeApiServer::builder().sharded_list_and_watch(true).start();
    create_pods(&server, 0..20);
    let a = replica(&server, "a");
    stores_settle("a holds every pod", &server, &[&a]);
    while a.watcher.try_recv().is_ok() {}
    for _ in 0..100_000 {
        server.push_fault(
            Match::Path("/apis/coordination.k8s.io/v1/namespaces/apps/leases".into()),
            Fault::Status { code: 500, reason: "InternalError".into(), message: "etcd".into(), retry_after: None },
        );
    }
    // The watch of the group's Leases reconnects, and fails from now on.
    server.end_watches();
    let since = std::time::SystemTime::now();
    // Renewed for longer than a lease duration and a renew deadline since (the watch goes
    // stale within the first, the share published last ends within the second): the lists
    // failed all that time.
    let bound = timings().lease_duration + timings().renew_deadline + ms(2000);
    eventually("a renews for longer than that", || {
        let lease = server.get::<Lease>(Some("apps"), a.group.lease_name()).unwrap();
        let renewed = lease.spec.and_then(|s| s.renew_time).map(|t| t.0.as_millisecond()).unwrap_or(0);
        let since = since.duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
        renewed > since + bound.as_millis() as i64
    });
    let listed = server
        .requests()
        .iter()
        .filter(|r| r.path == "/apis/coordination.k8s.io/v1/namespaces/apps/leases" && !r.watch)
        .count();
    assert!(listed > 0, "the group was listed (and failed)");
    assert_eq!(a.group.shard(), Some(Shard::of(0, 1).unwrap()));
    let mut deleted = 0;
    while let Ok(event) = a.watcher.try_recv() {
        deleted += usize::from(matches!(event, Ok(kube_watcher::Event::Delete(_))));
    }
    assert_eq!(deleted, 0, "no object left the store");
    assert_eq!(store_uids(&a.watcher).len(), 20);
    server.clear_faults();
}

fn join_as(server: &FakeApiServer, group: &str, identity: &str) -> ShardGroup {
    let leases: Api<Lease> = Api::namespaced(Client::from_url(&server.url()).unwrap(), "apps");
    ShardGroup::join(leases, group, identity, timings()).unwrap()
}

/// The first `Conflict` a member reports.
fn conflict(group: &ShardGroup) -> String {
    loop {
        match group.changes().recv_timeout(WAIT).expect("a change") {
            GroupChange::Conflict(why) => return why,
            _ => continue,
        }
    }
}

/// Member `b-c` of group `a` and member `c` of group `a-b` both run, each holding its own
/// group's whole space: their Leases have names of their own. Both wanted the Lease `a-b-c`
/// before, and the second was refused with `Conflict`. So do a member and an elector whose
/// Lease would have read `pods-leader`, and a member with a 253-character identity.
#[test]
fn groups_whose_member_names_read_alike_both_run() {
    let server = FakeApiServer::start();
    let first = join_as(&server, "a", "b-c");
    let second = join_as(&server, "a-b", "c");
    assert_ne!(first.lease_name(), second.lease_name());
    let all = Some(Shard::of(0, 1).unwrap());
    eventually("both hold their group's space", || first.shard() == all && second.shard() == all);
    let leases: Api<Lease> = Api::namespaced(Client::from_url(&server.url()).unwrap(), "apps");
    let elector = kube_watcher::LeaderElector::start(leases, "pods-leader", "e", timings()).unwrap();
    let member = join_as(&server, "pods", "leader");
    let long = join_as(&server, "pods", &"x".repeat(253));
    assert!(long.lease_name().len() <= 253, "{}", long.lease_name());
    assert!(elector.wait_until_leader(WAIT));
    eventually("the members share the pods", || {
        member.shard().is_some() && long.shard().is_some() && member.members().len() == 2
    });
    for g in [&first, &second, &member, &long] {
        let conflicts: Vec<GroupChange> =
            g.changes().try_iter().filter(|c| matches!(c, GroupChange::Conflict(_))).collect();
        assert!(conflicts.is_empty(), "{}: {conflicts:?}", g.lease_name());
    }
    assert!(elector.is_leader());
}

/// A Lease that is not its group's under a member's own name (here an elector's, made on
/// purpose with the member's name) is never written by the other: whichever comes second
/// holds nothing and says why; the first is not disturbed.
#[test]
fn a_members_lease_name_taken_by_an_elector_is_refused_clearly() {
    let server = FakeApiServer::start();
    let leases: Api<Lease> = Api::namespaced(Client::from_url(&server.url()).unwrap(), "apps");
    let member = join_as(&server, "pods", "web-0");
    eventually("the member holds everything", || member.shard() == Some(Shard::of(0, 1).unwrap()));
    let elector = kube_watcher::LeaderElector::start(leases.clone(), member.lease_name(), "e", timings()).unwrap();
    let reads = || {
        let path = format!("/apis/coordination.k8s.io/v1/namespaces/apps/leases/{}", member.lease_name());
        server.requests().iter().filter(|r| r.path == path && r.method == "GET").count()
    };
    let before = reads();
    eventually("the elector read the Lease several times", || reads() >= before + 5);
    assert!(!elector.is_leader());
    assert_eq!(member.shard(), Some(Shard::of(0, 1).unwrap()));
    drop((elector, member));

    let server = FakeApiServer::start();
    let leases: Api<Lease> = Api::namespaced(Client::from_url(&server.url()).unwrap(), "apps");
    let name = {
        let elsewhere = FakeApiServer::start();
        join_as(&elsewhere, "pods", "web-0").lease_name().to_owned()
    };
    let elector = kube_watcher::LeaderElector::start(leases, &name, "e", timings()).unwrap();
    assert!(elector.wait_until_leader(WAIT));
    let member = join_as(&server, "pods", "web-0");
    let why = conflict(&member);
    assert!(why.contains(&format!("{name:?}")) && why.contains("LeaderElector"), "{why}");
    assert_eq!(member.shard(), None);
    assert!(elector.is_leader());
}

/// Two members with one identity share one Lease: the second to come sees it renewed by
/// someone else, says so, and holds nothing, instead of both holding everything.
#[test]
fn two_members_with_one_identity_do_not_both_hold_a_share() {
    let server = FakeApiServer::start();
    let first = join(&server, "same");
    eventually("the first holds everything", || first.shard() == Some(Shard::of(0, 1).unwrap()));
    let second = join(&server, "same");
    let why = conflict(&second);
    assert!(why.contains("another process holds it as \"same\""), "{why}");
    assert_eq!(second.shard(), None);
    assert_eq!(first.shard(), Some(Shard::of(0, 1).unwrap()));
}

/// Names the API server would refuse for the Lease are refused by `join`, naming the field.
#[test]
fn names_that_cannot_name_a_lease_are_refused() {
    let server = FakeApiServer::start();
    let leases: Api<Lease> = Api::namespaced(Client::from_url(&server.url()).unwrap(), "apps");
    for (group, identity, field) in [("pods", "a..b", "identity"), ("pods", "Web-0", "identity"), ("a.", "x", "group")]
    {
        let e = ShardGroup::join(leases.clone(), group, identity, timings()).unwrap_err();
        assert!(matches!(e, kube_watcher::Error::Config { .. }) && e.to_string().contains(field), "{e}");
    }
}

/// A member whose writes are refused for a while (reads still work: an etcd out of space, a
/// webhook down) still knows its Lease as its own when writes work again: it never says
/// `Conflict`, and holds its share on. Before, it remembered its last eight renewTimes only:
/// after eight refused writes it took its own Lease for a twin's, said `Conflict` (kwatch ends
/// on it) and waited a lease duration for its own Lease.
#[test]
fn a_member_whose_writes_fail_for_a_while_keeps_its_lease() {
    let server = FakeApiServer::start();
    let a = join(&server, "a");
    let all = Some(Shard::of(0, 1).unwrap());
    eventually("a holds everything", || a.shard() == all);
    let path = lease_path(&a);
    // 30 writes refused: 15 retry periods, short of the renew deadline (4 s).
    for _ in 0..30 {
        server.push_fault(
            Match::Method { method: "PUT".into(), path: path.clone() },
            Fault::Status { code: 500, reason: "InternalError".into(), message: "etcd".into(), retry_after: None },
        );
    }
    eventually("every refusal is used", || server.pending_faults() == 0);
    let renewals = |n: usize| {
        let mut seen = std::collections::BTreeSet::new();
        eventually("renewals", || {
            seen.insert(server.get::<Lease>(Some("apps"), a.lease_name()).unwrap().metadata.resource_version);
            seen.len() > n
        });
    };
    renewals(3);
    assert_eq!(a.shard(), all);
    let conflicts: Vec<GroupChange> =
        a.changes().try_iter().filter(|c| matches!(c, GroupChange::Conflict(_))).collect();
    assert!(conflicts.is_empty(), "{conflicts:?}");
}

/// The guide's stop order, the watcher first: once `watcher.stop()` returns, the follower's
/// store (and every clone of it) is empty, so when the group then releases its Lease with
/// nothing claimed and the other member takes the share, no pod is in two stores. The stopped
/// store kept every object before, while the other member took them.
#[test]
fn a_stopped_followers_store_holds_nothing_once_its_member_lets_go() {
    let server = FakeApiServer::builder().sharded_list_and_watch(true).start();
    create_pods(&server, 0..40);
    let (a, b) = (replica(&server, "a"), replica(&server, "b"));
    eventually("two members", || [&a, &b].iter().all(|r| r.group.members().len() == 2));
    eventually("a and b hold pods", || {
        for r in [&a, &b] {
            while r.watcher.try_recv().is_ok() {}
        }
        !store_uids(&a.watcher).is_empty() && !store_uids(&b.watcher).is_empty()
    });
    let stopped = a.watcher.store();
    a.watcher.stop();
    assert!(stopped.is_empty(), "stop() empties a follower's store: {} objects", stopped.len());
    a.group.stop();
    // b takes every pod; at no sample is one also in a's store.
    eventually("b holds every pod", || {
        while b.watcher.try_recv().is_ok() {}
        let held: BTreeSet<String> =
            stopped.state().iter().map(|p| p.metadata.uid.clone().unwrap_or_default()).collect();
        let theirs = store_uids(&b.watcher);
        assert!(held.is_disjoint(&theirs), "a pod in the stopped store and in b's");
        theirs.len() == 40
    });
}
