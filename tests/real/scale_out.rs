//! Scale-out on the real server: the sharded watch with the `ShardedListAndWatch` gate (the
//! server filters) and without it (the client does), leader election on real Leases, and a shard
//! group whose watchers split the pods.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube_watcher::{
    Api, Client, Config, GroupChange, KubeconfigOptions, LeaderElector, LeaseTimings, ListParams, Shard, ShardFilter,
    ShardGroup, Watcher,
};
use parking_lot::Mutex;

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

/// Three electors on one real Lease: one leads; a paused leader (its connection silent) steps
/// down before anyone else leads; a clean stop hands over within about a retry period; a
/// crashed leader (its connections refused for good) is replaced after the lease duration. At
/// every sample every elector is checked, the outgoing leader included: never two leaders.
#[test]
fn three_electors_keep_one_leader_through_stop_crash_and_pause() {
    let Some(bed) = Bed::shared() else { return };
    let ns = bed.namespace("elect");
    let proxies: Vec<Proxy> = (0..3).map(|_| Proxy::start(bed.port("apiserver"))).collect();
    let electors: Vec<LeaderElector> =
        proxies.iter().enumerate().map(|(i, p)| elector_via(&bed, &ns, p, &format!("e{i}"), timings())).collect();
    let leases: Api<Lease> = Api::namespaced(bed.client(), &ns);
    let holder = || leases.get("lock").ok().and_then(|l| l.spec.and_then(|s| s.holder_identity));
    let leaders = || (0..electors.len()).filter(|i| electors[*i].is_leader()).collect::<Vec<_>>();
    // Waits until one of `among` leads and holds the Lease; at every sample, at most one of
    // all three leads. Returns it and how long it took.
    let one_leader = |among: &[usize]| -> (usize, Duration) {
        let started = Instant::now();
        let mut found = None;
        until("one leader", || {
            let l = leaders();
            assert!(l.len() <= 1, "two leaders at once: {l:?}");
            found = l.first().copied().filter(|i| among.contains(i));
            found.is_some_and(|i| holder().as_deref() == Some(format!("e{i}").as_str()))
        });
        (found.unwrap(), started.elapsed())
    };
    let alive = [0, 1, 2];

    // A pause: the leader's connection goes silent past its lease; it steps down, another leads.
    let (first, _) = one_leader(&alive);
    proxies[first].stall(true);
    let others: Vec<usize> = alive.iter().copied().filter(|i| *i != first).collect();
    let (second, took) = one_leader(&others);
    println!("a paused leader was replaced after {took:?} (lease duration {:?})", timings().lease_duration);
    proxies[first].cut();
    proxies[first].stall(false);
    // Back from its pause, the old leader finds the lease taken and follows.
    until("after the pause, only the new leader leads", || {
        assert!(leaders().len() <= 1, "two leaders at once: {:?}", leaders());
        leaders() == [second]
    });

    // A clean stop hands over: the lease is released at once.
    electors[second].stop();
    // Released by the time stop() returns: empty, or already taken by another elector.
    let after_stop = holder();
    assert_ne!(after_stop, Some(format!("e{second}")), "a stopped leader releases the lease");
    let rest: Vec<usize> = alive.iter().copied().filter(|i| *i != second).collect();
    let (third, took) = one_leader(&rest);
    println!("a stopped leader was replaced after {took:?}");

    // A crash: its connections are refused from now on; it never releases. The last one takes
    // the lease once it has seen it unchanged for a lease duration.
    proxies[third].refuse(true);
    proxies[third].cut();
    let last: Vec<usize> = rest.iter().copied().filter(|i| *i != third).collect();
    let (fourth, took) = one_leader(&last);
    println!("a crashed leader was replaced after {took:?} (lease duration {:?})", timings().lease_duration);
    until("the cut-off leader knows it lost", || !electors[third].is_leader());
    assert_eq!(holder(), Some(format!("e{fourth}")));
}

/// An elector on the Lease `lock` in `ns` whose connections go through `proxy`.
fn elector_via(bed: &Bed, ns: &str, proxy: &Proxy, identity: &str, timings: LeaseTimings) -> LeaderElector {
    let client =
        Client::from_kubeconfig_yaml(&bed.kubeconfig_via(proxy.port()), &KubeconfigOptions::default()).unwrap();
    LeaderElector::start(Api::<Lease>::namespaced(client, ns), "lock", identity, timings).unwrap()
}

/// Samples `a` and `b` until `done`, checking at every sample that they do not both lead.
fn never_both_until(what: &str, a: &LeaderElector, b: &LeaderElector, mut done: impl FnMut() -> bool) {
    until(what, || {
        assert!(!(a.is_leader() && b.is_leader()), "{what}: {} and {} both lead", a.identity(), b.identity());
        done()
    });
}

/// A second process under the leader's identity (a restarted pod whose old process is not
/// dead yet), started while the leader is one renewal late (its connection silent): it waits
/// out the leader's whole lease, never leading beside it, then takes over as a new holder; the
/// first, back, finds the Lease another's. A third, stopped before it ever wrote, releases
/// nothing.
#[test]
fn a_second_process_with_the_leaders_identity_never_leads_beside_it() {
    let Some(bed) = Bed::shared() else { return };
    let ns = bed.namespace("twin");
    let leases: Api<Lease> = Api::namespaced(bed.client(), &ns);
    let proxy = Proxy::start(bed.port("apiserver"));
    let first = elector_via(&bed, &ns, &proxy, "same", timings());
    assert!(first.wait_until_leader(WAIT));
    proxy.stall(true);
    let second = LeaderElector::start(leases.clone(), "lock", "same", timings()).unwrap();
    never_both_until("the silent leader reaches its renew deadline", &first, &second, || !first.is_leader());
    never_both_until("the second takes over once the first's lease ran out", &first, &second, || second.is_leader());
    proxy.cut();
    proxy.stall(false);
    let renewed = |n: usize| {
        let mut seen = BTreeSet::new();
        until("renewals", || {
            assert!(!(first.is_leader() && second.is_leader()), "both lead");
            seen.insert(leases.get("lock").unwrap().metadata.resource_version.unwrap());
            seen.len() > n
        });
    };
    renewed(4);
    assert!(second.is_leader() && !first.is_leader());
    // A third, stopped right after its first read: the record names its identity, but it is
    // the second's.
    let third_proxy = Proxy::start(bed.port("apiserver"));
    let third = elector_via(&bed, &ns, &third_proxy, "same", timings());
    until("the third reads the Lease", || third_proxy.downstream_bytes() > 0);
    third.stop();
    let spec = leases.get("lock").unwrap().spec.unwrap();
    assert_eq!(spec.holder_identity.as_deref(), Some("same"), "not released by the third");
    assert_eq!(spec.lease_duration_seconds, Some(4));
    assert!(second.is_leader());
    renewed(2);
    second.stop();
    assert!(first.wait_until_leader(WAIT), "the first takes the released Lease");
}

/// A Lease deleted while its leader leads (its connection silent: it learns of nothing) is not
/// recreated by the standby that saw it until it has stayed missing for a lease duration:
/// never two leaders.
#[test]
fn a_deleted_lease_is_not_recreated_while_its_holder_may_lead() {
    let Some(bed) = Bed::shared() else { return };
    let ns = bed.namespace("deleted");
    let leases: Api<Lease> = Api::namespaced(bed.client(), &ns);
    let proxy = Proxy::start(bed.port("apiserver"));
    let a = elector_via(&bed, &ns, &proxy, "a", timings());
    assert!(a.wait_until_leader(WAIT));
    let b = LeaderElector::start(leases.clone(), "lock", "b", timings()).unwrap();
    // b has read the Lease: a renewal of a's later, it still stands by.
    let before = leases.get("lock").unwrap().metadata.resource_version;
    until("a renews", || leases.get("lock").unwrap().metadata.resource_version != before);
    assert!(!b.is_leader());
    proxy.stall(true);
    leases.delete("lock").unwrap();
    let deleted = Instant::now();
    never_both_until("a reaches its renew deadline", &a, &b, || !a.is_leader());
    never_both_until("b recreates the Lease and leads", &a, &b, || b.is_leader());
    println!("recreated {:?} after the deletion (lease duration {:?})", deleted.elapsed(), timings().lease_duration);
    assert_eq!(leases.get("lock").unwrap().spec.unwrap().holder_identity.as_deref(), Some("b"));
    proxy.cut();
    proxy.stall(false);
    let before = leases.get("lock").unwrap().metadata.resource_version;
    until("b renews", || {
        assert!(!(a.is_leader() && b.is_leader()), "both lead");
        leases.get("lock").unwrap().metadata.resource_version != before
    });
}

/// A member cut off from the server past its renew deadline (its every request refused: a
/// renewal each retry period, fifteen of them, more than it used to remember), then back: the
/// Lease it reads is its own. It renews it at once, holds its share again, and says no
/// `Conflict`. It took its own Lease for a twin's before, and waited a lease duration.
#[test]
fn a_member_cut_off_for_a_while_keeps_its_lease_as_its_own() {
    let Some(bed) = Bed::shared() else { return };
    let ns = bed.namespace("cutoff");
    let proxy = Proxy::start(bed.port("apiserver"));
    let client =
        Client::from_kubeconfig_yaml(&bed.kubeconfig_via(proxy.port()), &KubeconfigOptions::default()).unwrap();
    let quick = LeaseTimings {
        lease_duration: Duration::from_secs(4),
        renew_deadline: Duration::from_secs(3),
        retry_period: Duration::from_millis(200),
    };
    let group = ShardGroup::join(Api::namespaced(client, &ns), "pods", "a", quick).unwrap();
    let all = Some(Shard::of(0, 1).unwrap());
    until("a holds everything", || group.shard() == all);
    let leases: Api<Lease> = Api::namespaced(bed.client(), &ns);
    let version = || leases.get(group.lease_name()).unwrap().metadata.resource_version;
    let before = version();
    proxy.refuse(true);
    proxy.cut();
    // A renewal each retry period, refused, until the renew deadline ends its lead.
    until("a's lead ends", || group.shard().is_none());
    assert_eq!(version(), before, "nothing written meanwhile");
    proxy.refuse(false);
    until("a renews again", || version() != before);
    until("a holds everything again", || group.shard() == all);
    let conflicts: Vec<GroupChange> =
        group.changes().try_iter().filter(|c| matches!(c, GroupChange::Conflict(_))).collect();
    assert!(conflicts.is_empty(), "{conflicts:?}");
}

/// A client-go leader elector (`testbed/leaderelect`: k8s.io/client-go/tools/leaderelection)
/// running as a process of its own, and the state it last printed.
struct GoElector {
    child: Child,
    identity: String,
    lines: Arc<Mutex<Vec<String>>>,
}

impl GoElector {
    fn start(bed: &Bed, ns: &str, identity: &str, t: LeaseTimings) -> GoElector {
        let mut child = Command::new(bed.bin("leaderelect"))
            .arg(bed.kubeconfig(User::Admin))
            .args([ns, "lock", identity])
            .arg(t.lease_duration.as_secs().to_string())
            .arg(t.renew_deadline.as_millis().to_string())
            .arg(t.retry_period.as_millis().to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("testbed/leaderelect (scripts/apiserver.sh build makes it)");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let out = BufReader::new(child.stdout.take().unwrap());
        let seen = Arc::clone(&lines);
        std::thread::spawn(move || {
            for line in out.lines().map_while(Result::ok) {
                seen.lock().push(line);
            }
            seen.lock().push("exited".to_owned());
        });
        GoElector { child, identity: identity.to_owned(), lines }
    }

    /// Whether it leads, as it last said.
    fn leads(&self) -> bool {
        self.lines.lock().last().is_some_and(|l| l == "leading")
    }

    /// SIGTERM: it stops leading, releases the Lease and exits.
    fn stop(mut self) {
        let pid = self.child.id().to_string();
        assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
        until("the client-go elector exits", || self.child.try_wait().unwrap().is_some());
    }

    /// SIGKILL: it never releases.
    fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for GoElector {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A client-go elector and ours share one Lease, each writing the fields the other reads, and
/// hand it over to each other through clean stops and kills, each way: never both lead. A
/// client-go leader keeps our annotation as it read it (its update replaces the spec of the
/// Lease it read), and ours never takes that record for its own.
#[test]
fn a_client_go_elector_and_ours_share_a_lease_through_stops_and_kills() {
    let Some(bed) = Bed::shared() else { return };
    let ns = bed.namespace("clientgo");
    let t = LeaseTimings {
        lease_duration: Duration::from_secs(5),
        renew_deadline: Duration::from_secs(3),
        retry_period: Duration::from_millis(500),
    };
    let leases: Api<Lease> = Api::namespaced(bed.client(), &ns);
    let holder = || leases.get("lock").ok().and_then(|l| l.spec?.holder_identity).unwrap_or_default();
    let check = |go: &[&GoElector], ours: &[&LeaderElector]| {
        let leaders: Vec<String> = go
            .iter()
            .filter(|g| g.leads())
            .map(|g| g.identity.clone())
            .chain(ours.iter().filter(|e| e.is_leader()).map(|e| e.identity().to_owned()))
            .collect();
        assert!(leaders.len() <= 1, "both lead: {leaders:?}");
        leaders
    };
    let takeover = |what: &str, go: &[&GoElector], ours: &[&LeaderElector], to: &str| {
        let started = Instant::now();
        until(what, || check(go, ours) == [to] && holder() == to);
        println!("{what}: {:?}", started.elapsed());
    };

    let go1 = GoElector::start(&bed, &ns, "go-1", t);
    takeover("client-go leads alone", &[&go1], &[], "go-1");
    let p1 = Proxy::start(bed.port("apiserver"));
    let kw1 = elector_via(&bed, &ns, &p1, "kw-1", t);
    // A clean stop of client-go's leader: ours takes the released Lease.
    go1.stop();
    takeover("client-go stopped, ours leads", &[], &[&kw1], "kw-1");
    let mark = || {
        leases.get("lock").unwrap().metadata.annotations.unwrap_or_default().get("kube-watcher.io/incarnation").cloned()
    };
    assert!(mark().is_some(), "ours marks its record");
    // Ours crashes (its connections refused for good): client-go takes over after the lease
    // duration, keeping our annotation.
    let go2 = GoElector::start(&bed, &ns, "go-2", t);
    p1.refuse(true);
    p1.cut();
    takeover("ours crashed, client-go leads", &[&go2], &[&kw1], "go-2");
    assert!(mark().is_some(), "client-go kept the annotation it read");
    drop(kw1);
    // client-go's leader is killed: ours takes over after the lease duration, the record
    // carrying its own mark again.
    let kw2 = LeaderElector::start(leases.clone(), "lock", "kw-2", t).unwrap();
    until("ours reads a record that is not its own", || {
        check(&[&go2], &[&kw2]);
        !kw2.is_leader() && mark().is_some()
    });
    go2.kill();
    takeover("client-go killed, ours leads", &[], &[&kw2], "kw-2");
    // Ours stops: client-go takes the released Lease.
    let go3 = GoElector::start(&bed, &ns, "go-3", t);
    until("client-go stands by", || {
        check(&[&go3], &[&kw2]);
        go3.lines.lock().is_empty() && kw2.is_leader()
    });
    kw2.stop();
    takeover("ours stopped, client-go leads", &[&go3], &[&kw2], "go-3");
    go3.stop();
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
    // A leave: d stops, its watcher first (the guide's order): its store is empty at once, and
    // its pods go to the others.
    d.watcher.stop();
    assert!(d.watcher.store().is_empty(), "a stopped follower's store is empty");
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
/// with its identity does, and holds nothing. Groups whose member names read alike (member
/// `b-c` of `a`, member `c` of `a-b`), and an elector whose Lease would have read like a
/// member's (`pods-leader`), all run, each on a Lease of its own; an elector started on a
/// member's very Lease name refuses it, and the member is not disturbed.
#[test]
fn twins_and_clashing_lease_names_are_refused_and_hold_nothing() {
    let Some(bed) = Bed::shared() else { return };
    let ns = bed.namespace("twins");
    let leases: Api<Lease> = Api::namespaced(bed.client_of(User::Admin), &ns);
    let first = ShardGroup::join(leases.clone(), "pods", "same", timings()).unwrap();
    until("the first holds everything", || first.shard() == Some(Shard::of(0, 1).unwrap()));
    // Renewed many times since: its own writes, as the server stored them, are its own.
    let renewals = |n: usize| {
        let before = leases.get(first.lease_name()).unwrap().metadata.resource_version.unwrap();
        let mut seen = BTreeSet::from([before]);
        until("renewals", || {
            seen.insert(leases.get(first.lease_name()).unwrap().metadata.resource_version.unwrap());
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

    let all = Some(Shard::of(0, 1).unwrap());
    let (a, ab) = (
        ShardGroup::join(leases.clone(), "a", "b-c", timings()).unwrap(),
        ShardGroup::join(leases.clone(), "a-b", "c", timings()).unwrap(),
    );
    let elector = LeaderElector::start(leases.clone(), "pods-leader", "e", timings()).unwrap();
    let member = ShardGroup::join(leases.clone(), "other", "leader", timings()).unwrap();
    assert!(elector.wait_until_leader(WAIT));
    until("groups named alike both hold their space", || {
        a.shard() == all && ab.shard() == all && member.shard() == all
    });
    let refused = LeaderElector::start(leases.clone(), member.lease_name(), "e", timings()).unwrap();
    renewals(4);
    assert!(!refused.is_leader());
    assert!(elector.is_leader() && member.shard() == all);
    for g in [&a, &ab, &member] {
        let conflicts: Vec<GroupChange> =
            g.changes().try_iter().filter(|c| matches!(c, GroupChange::Conflict(_))).collect();
        assert!(conflicts.is_empty(), "{}: {conflicts:?}", g.lease_name());
    }
}
