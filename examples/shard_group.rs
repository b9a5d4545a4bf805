//! A shard group: replicas that split the pods among the members alive now, each with a
//! watcher that follows its share. Three replicas start; a fourth joins late; it leaves
//! cleanly; then one is killed (the server refuses its Lease from then on, so it can neither
//! renew nor release: the others take over once its Lease expires). After each change every
//! replica prints its share, with how long the group took to settle and how many pods moved.
//!
//! ```text
//! cargo run --example shard_group --features testing                      # 3000 pods, quick timings
//! cargo run --release --example shard_group --features testing -- --pods 100000 --default-timings
//! cargo run --example shard_group --features testing -- --default-timings --rest-periods 60  # requests at rest, 2 minutes
//! ```
//!
//! "Settled" means: every replica sees the new members, and every pod on the server is in
//! exactly one replica's store, the one whose share holds it. The check reads the stores every
//! 20 ms (no consumer is attached: the watchers only keep their stores).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube_watcher::testing::{FakeApiServer, Fault, Match};
use kube_watcher::{Api, Client, Config, LeaseTimings, ShardGroup, Watcher};

struct Replica {
    name: String,
    group: ShardGroup,
    watcher: Watcher<Pod>,
}

fn timings(default: bool) -> LeaseTimings {
    if default {
        return LeaseTimings::default();
    }
    // Quick, for a demo: a killed replica's pods move after 3 s instead of 15 s.
    LeaseTimings {
        lease_duration: Duration::from_secs(3),
        renew_deadline: Duration::from_secs(2),
        retry_period: Duration::from_millis(500),
    }
}

fn start(server: &FakeApiServer, name: &str, timings: LeaseTimings) -> Replica {
    let client = Client::from_url(&server.url()).unwrap();
    let group = ShardGroup::join(Api::<Lease>::namespaced(client.clone(), "default"), "pods", name, timings).unwrap();
    let watcher = Watcher::new(Api::<Pod>::all(client), Config::default().shard_group(&group)).unwrap();
    Replica { name: name.to_owned(), group, watcher }
}

fn uids(pods: impl IntoIterator<Item = Pod>) -> BTreeSet<String> {
    pods.into_iter().filter_map(|p| p.metadata.uid).collect()
}

/// Waits until every replica sees `members` members and its store holds exactly the pods of
/// its share, each pod in one store; returns who holds each.
fn settle(server: &FakeApiServer, replicas: &[&Replica], members: usize) -> (Duration, BTreeMap<String, String>) {
    let start = Instant::now();
    let all = uids(server.list::<Pod>());
    loop {
        let mut owner = BTreeMap::new();
        let mut twice = 0;
        let mut exact = true;
        // Cheap first: the members and the number of objects (no consumer is attached to the
        // watchers, so nothing waits for this loop).
        let counted: usize = replicas.iter().map(|r| r.watcher.store().len()).sum();
        let seen = replicas.iter().all(|r| r.group.shard().is_none() || r.group.members().len() == members);
        if counted != all.len() || !seen {
            assert!(start.elapsed() < Duration::from_secs(300), "the group did not settle within 300 s");
            std::thread::sleep(Duration::from_millis(20));
            continue;
        }
        for r in replicas {
            let held: BTreeSet<String> =
                r.watcher.store().state().iter().filter_map(|p| p.metadata.uid.clone()).collect();
            let shard = r.group.shard();
            let want: BTreeSet<String> =
                all.iter().filter(|u| shard.as_ref().is_some_and(|s| s.contains(u))).cloned().collect();
            exact &= held == want && (shard.is_none() || r.group.members().len() == members);
            for uid in held {
                twice += usize::from(owner.insert(uid, r.name.clone()).is_some());
            }
        }
        // The stores are read one after the other, and a handover takes several requests
        // between the giver's drop and the taker's list: a pod seen twice is a bug.
        if twice > 0 {
            println!("BUG: {twice} pods in two stores at once");
        }
        if exact && twice == 0 && owner.keys().eq(all.iter()) {
            return (start.elapsed(), owner);
        }
        assert!(start.elapsed() < Duration::from_secs(300), "the group did not settle within 300 s");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn report(what: &str, took: Duration, before: &BTreeMap<String, String>, after: &BTreeMap<String, String>) {
    let moved = after.iter().filter(|(uid, owner)| before.get(*uid).is_some_and(|b| b != *owner)).count();
    let total = after.len().max(1);
    println!(
        "{what}: settled in {:.2} s; {moved} of {total} pods moved ({:.1}%)",
        took.as_secs_f64(),
        100.0 * moved as f64 / total as f64
    );
    let mut shares: BTreeMap<&str, usize> = BTreeMap::new();
    for owner in after.values() {
        *shares.entry(owner).or_default() += 1;
    }
    for (name, n) in shares {
        println!("  {name}: {n} pods ({:.1}%)", 100.0 * n as f64 / total as f64);
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let default_timings = args.iter().any(|a| a == "--default-timings");
    let pods: usize = args
        .iter()
        .position(|a| a == "--pods")
        .and_then(|i| args.get(i + 1))
        .map(|n| n.parse().expect("--pods N"))
        .unwrap_or(3000);
    // How many retry periods the requests at rest are counted over.
    let rest_periods: u32 = args
        .iter()
        .position(|a| a == "--rest-periods")
        .and_then(|i| args.get(i + 1))
        .map(|n| n.parse().expect("--rest-periods N"))
        .unwrap_or(5);
    let timings = timings(default_timings);
    let server =
        FakeApiServer::builder().bookmark_interval(Duration::from_secs(1)).sharded_list_and_watch(true).start();
    server.batch(|b| {
        for i in 0..pods {
            let mut pod = Pod::default();
            pod.metadata.name = Some(format!("pod-{i}"));
            pod.metadata.namespace = Some(format!("ns-{}", i % 50));
            b.create(&pod).unwrap();
        }
    });
    println!("{pods} pods; lease {:?}, retry {:?}", timings.lease_duration, timings.retry_period);

    let a = start(&server, "replica-a", timings);
    let b = start(&server, "replica-b", timings);
    let c = start(&server, "replica-c", timings);
    let (took, three) = settle(&server, &[&a, &b, &c], 3);
    report("3 replicas", took, &BTreeMap::new(), &three);

    let d = start(&server, "replica-d", timings);
    let (took, four) = settle(&server, &[&a, &b, &c, &d], 4);
    report("replica-d joined (3 -> 4)", took, &three, &four);

    // At rest: the group's requests per member and second, by kind (a watch is counted when
    // it is opened).
    server.clear_requests();
    let window = timings.retry_period * rest_periods;
    std::thread::sleep(window);
    let requests = server.requests();
    let leases: Vec<_> = requests.iter().filter(|r| r.path.contains("/leases")).collect();
    let rate = |n: usize| n as f64 / 4.0 / window.as_secs_f64();
    let count = |f: &dyn Fn(&kube_watcher::testing::RecordedRequest) -> bool| leases.iter().filter(|r| f(r)).count();
    println!(
        "at rest: {:.3} lease requests per member per second over {:?} (retry period {:?}): \
         {:.3} PUT, {:.3} LIST, {:.3} WATCH, {:.3} other",
        rate(leases.len()),
        window,
        timings.retry_period,
        rate(count(&|r| r.method == "PUT")),
        rate(count(&|r| r.method == "GET" && !r.watch && r.path.ends_with("/leases"))),
        rate(count(&|r| r.watch)),
        rate(count(&|r| r.method != "PUT" && !(r.method == "GET" && r.path.ends_with("/leases")))),
    );

    d.group.stop();
    let (took, back) = settle(&server, &[&a, &b, &c, &d], 3);
    report("replica-d stopped (4 -> 3)", took, &four, &back);
    println!("replica-d: share {:?}, {} pods in its store", d.group.shard().map(|_| "some"), d.watcher.store().len());

    // Killed: its watcher is gone, and from now on the server refuses every request on its
    // Lease, so it can neither renew nor release it (its Lease stays as it was).
    c.watcher.stop();
    for _ in 0..10_000 {
        server.push_fault(
            Match::Path(format!("/apis/coordination.k8s.io/v1/namespaces/default/leases/{}", c.group.lease_name())),
            Fault::Status {
                code: 503,
                reason: "ServiceUnavailable".into(),
                message: "killed".into(),
                retry_after: None,
            },
        );
    }
    let (took, two) = settle(&server, &[&a, &b], 2);
    report("replica-c killed (3 -> 2)", took, &back, &two);
    println!("members in replica-a's eyes: {:?}", a.group.members());
    server.clear_faults();
}
