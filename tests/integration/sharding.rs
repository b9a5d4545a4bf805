//! Sharded watchers (`Config::shard`): against a server that filters by `shardSelector` and one
//! that ignores it, every shard's store holds its objects and no other, and together the shards
//! hold the collection; what `stats()` and the notices say about who filtered.
#![cfg(feature = "testing")]

use crate::common;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;

use common::*;
use k8s_openapi::api::core::v1::Pod;
use kube_watcher::testing::FakeApiServer;
use kube_watcher::{
    Api, ApiResource, Client, Config, DynamicObject, Error, Notice, Shard, ShardFilter, Watchable, Watcher, WireFormat,
    metadata_watcher,
};

fn sharded_server(filtering: bool) -> FakeApiServer {
    FakeApiServer::builder().bookmark_interval(ms(100)).sharded_list_and_watch(filtering).start()
}

fn uid<K: Watchable>(o: &K) -> String {
    o.meta().uid.clone().unwrap_or_default()
}

/// The uids the server holds, and those of one shard.
fn server_uids(server: &FakeApiServer) -> BTreeSet<String> {
    server.list::<Pod>().iter().map(uid).collect()
}

fn store_uids<K: Watchable>(w: &Watcher<K>) -> BTreeSet<String> {
    w.store().state().iter().map(|o| uid(&**o)).collect()
}

/// Waits until each shard's store holds exactly the server's objects of that shard.
fn shards_converge<K: Watchable>(label: &str, server: &FakeApiServer, watchers: &[(Shard, Watcher<K>)]) {
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let all = server_uids(server);
        let ok = watchers.iter().all(|(shard, w)| {
            let want: BTreeSet<String> = all.iter().filter(|u| shard.contains(u)).cloned().collect();
            w.store().is_ready() && store_uids(w) == want
        });
        if ok {
            return;
        }
        for (_, w) in watchers {
            while w.try_recv().is_ok() {}
        }
        assert!(std::time::Instant::now() < deadline, "{label}: the shards never matched the server");
        thread::sleep(ms(10));
    }
}

#[test]
fn each_shard_holds_its_objects_and_no_other_with_and_without_a_filtering_server() {
    for filtering in [true, false] {
        for format in [WireFormat::Protobuf, WireFormat::Json] {
            for_each_config(|config_label, config| {
                let label = format!("filtering={filtering} {format:?} {config_label}");
                let server = sharded_server(filtering);
                create_pods(&server, 0..12);
                let watchers: Vec<(Shard, Watcher<Pod>)> = (0..3)
                    .map(|i| {
                        let shard = Shard::of(i, 3).unwrap();
                        let config = config.clone().wire_format(format).shard(shard.clone());
                        (shard, Watcher::new(pods(&server), config).unwrap())
                    })
                    .collect();
                shards_converge(&label, &server, &watchers);
                // Changes: each reaches the one shard that holds the object.
                server.create(&pod("apps", "new")).unwrap();
                server.delete::<Pod>(Some("apps"), "p3").unwrap();
                let mut p5 = server.get::<Pod>(Some("apps"), "p5").unwrap();
                p5.metadata.annotations = Some([("n".to_owned(), "1".to_owned())].into());
                server.replace(&p5).unwrap();
                shards_converge(&label, &server, &watchers);
                let expected = if filtering { ShardFilter::Server } else { ShardFilter::Client };
                for (shard, w) in &watchers {
                    let stats = w.stats();
                    assert_eq!(stats.shard_filter, Some(expected), "{label} {shard:?}");
                    assert_eq!(stats.errors.total(), 0, "{label}: {:?}", stats.last_error);
                }
                for r in server.requests().iter().filter(|r| r.path.ends_with("/pods")) {
                    let sent = r.query.iter().find(|(k, _)| k == "shardSelector").map(|(_, v)| v.as_str());
                    assert!(sent.is_some_and(|v| v.starts_with("shardRange(")), "{label}: {:?}", r.query);
                }
                for (_, w) in &watchers {
                    w.stop();
                }
            });
        }
    }
}

#[test]
fn a_shards_events_are_only_its_objects() {
    for filtering in [true, false] {
        let server = sharded_server(filtering);
        let shard = Shard::of(0, 2).unwrap();
        let w = Watcher::new(pods(&server), Config::default().shard(shard.clone())).unwrap();
        collect_until(&w, |s| s.last().is_some_and(|e| e == "InitDone"));
        create_pods(&server, 0..20);
        // In the order they were created.
        let ours: Vec<String> = (0..20)
            .map(|i| server.get::<Pod>(Some("apps"), &format!("p{i}")).unwrap())
            .filter(|p| shard.contains(&uid(p)))
            .map(|p| format!("Apply({})", p.metadata.name.as_deref().unwrap_or("")))
            .collect();
        assert!(!ours.is_empty() && ours.len() < 20, "{ours:?}");
        let seen = collect_until(&w, |s| s.len() >= ours.len());
        assert_eq!(seen, ours, "filtering={filtering}");
        // Nothing of the other shard follows: the next event is a change of ours.
        let first = server.list::<Pod>().into_iter().find(|p| shard.contains(&uid(p))).unwrap();
        let name = first.metadata.name.clone().unwrap();
        for p in server.list::<Pod>() {
            server.delete::<Pod>(Some("apps"), p.metadata.name.as_deref().unwrap()).unwrap();
        }
        let seen = collect_until(&w, |s| s.len() >= ours.len());
        assert!(seen.iter().all(|e| e.starts_with("Delete(")), "{seen:?}");
        assert!(seen.contains(&format!("Delete({name})")), "{seen:?}");
        let stats = w.stats();
        assert_eq!(
            stats.events.added,
            ours.len() as u64,
            "filtering={filtering}: other shards' events are not counted"
        );
        w.stop();
    }
}

/// What the `ShardFilter` notices received so far said.
fn said(notices: &kube_watcher::crossbeam_channel::Receiver<Notice>) -> Vec<ShardFilter> {
    notices
        .try_iter()
        .filter_map(|n| match n {
            Notice::ShardFilter { by } => Some(by),
            _ => None,
        })
        .collect()
}

#[test]
fn the_notice_says_once_who_filters() {
    for (filtering, by) in [(true, ShardFilter::Server), (false, ShardFilter::Client)] {
        let server = sharded_server(filtering);
        create_pods(&server, 0..4);
        let w = Watcher::new(pods(&server), Config::default().page_size(1).shard(Shard::of(1, 2).unwrap())).unwrap();
        let notices = w.notices();
        w.store().wait_until_ready(WAIT).unwrap();
        server.create(&pod("apps", "later")).unwrap();
        // A relist lists again: the notice is not repeated.
        server.push_fault(
            kube_watcher::testing::Match::Watch,
            kube_watcher::testing::Fault::Status {
                code: 410,
                reason: "Gone".into(),
                message: "too old".into(),
                retry_after: None,
            },
        );
        server.end_watches();
        eventually("a second sync", || w.stats().relists.total() >= 2);
        assert_eq!(said(&notices), [by], "filtering={filtering}");
        w.stop();
    }
}

#[test]
fn shards_by_namespace_keep_a_namespace_together() {
    for filtering in [true, false] {
        let server = sharded_server(filtering);
        for ns in ["a", "b", "c", "d", "e", "f"] {
            for n in 0..3 {
                server.create(&pod(ns, &format!("p{n}"))).unwrap();
            }
        }
        let watchers: Vec<(Shard, Watcher<Pod>)> = (0..2)
            .map(|i| {
                let shard = Shard::of(i, 2).unwrap().by_namespace();
                (shard.clone(), Watcher::new(pods(&server), Config::default().shard(shard)).unwrap())
            })
            .collect();
        for (shard, w) in &watchers {
            w.store().wait_until_ready(WAIT).unwrap();
            let want: BTreeSet<String> = server
                .list::<Pod>()
                .iter()
                .filter(|p| shard.contains(p.metadata.namespace.as_deref().unwrap()))
                .map(uid)
                .collect();
            eventually("the namespace shard", || store_uids(w) == want);
            for p in w.store().state() {
                assert!(shard.contains(p.metadata.namespace.as_deref().unwrap()));
            }
        }
        let total: usize = watchers.iter().map(|(_, w)| w.store().len()).sum();
        assert_eq!(total, 18, "filtering={filtering}");
    }
}

#[test]
fn metadata_and_dynamic_watchers_are_sharded_too() {
    for filtering in [true, false] {
        let server = sharded_server(filtering);
        create_pods(&server, 0..10);
        let shard = Shard::of(1, 2).unwrap();
        let want: BTreeSet<String> = server_uids(&server).into_iter().filter(|u| shard.contains(u)).collect();
        let meta = metadata_watcher(pods(&server), Config::default().shard(shard.clone())).unwrap();
        meta.store().wait_until_ready(WAIT).unwrap();
        eventually("metadata shard", || store_uids(&meta) == want);
        let ar = ApiResource::of::<Pod>();
        let dynamic: Api<DynamicObject> = Api::all_with(Client::from_url(&server.url()).unwrap(), &ar);
        let dynamic = Watcher::new(dynamic, Config::default().shard(shard.clone())).unwrap();
        dynamic.store().wait_until_ready(WAIT).unwrap();
        eventually("dynamic shard", || store_uids(&dynamic) == want);
        let expected = if filtering { ShardFilter::Server } else { ShardFilter::Client };
        assert_eq!(meta.stats().shard_filter, Some(expected));
        assert_eq!(dynamic.stats().shard_filter, Some(expected));
    }
}

#[test]
fn drift_checks_of_a_shard_see_no_drift_from_other_shards() {
    for filtering in [true, false] {
        let server = sharded_server(filtering);
        create_pods(&server, 0..10);
        let config = Config::default().shard(Shard::of(0, 2).unwrap()).drift_check(std::time::Duration::from_secs(1));
        let w = Watcher::new(pods(&server), config).unwrap();
        let notices = w.notices();
        w.store().wait_until_ready(WAIT).unwrap();
        let checked = notices
            .iter()
            .find_map(|n| match n {
                Notice::DriftChecked { mismatched } => Some(mismatched),
                _ => None,
            })
            .unwrap();
        assert_eq!(checked, 0, "filtering={filtering}");
        assert_eq!(w.stats().relists.drift, 0);
        w.stop();
    }
}

#[test]
fn unsharded_watchers_send_no_selector_and_say_nothing_about_shards() {
    let server = sharded_server(true);
    create_pods(&server, 0..3);
    let w = Watcher::new(pods(&server), Config::default()).unwrap();
    w.store().wait_until_ready(WAIT).unwrap();
    assert_eq!(w.store().len(), 3);
    assert_eq!(w.stats().shard_filter, None);
    assert!(server.requests().iter().all(|r| r.query.iter().all(|(k, _)| k != "shardSelector")));
}

/// A server that says it filtered by another selector than the one sent: each list is refused
/// with an error naming both, and the store is never filled.
#[test]
fn a_server_that_echoes_another_selector_is_an_error() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let url = format!("http://{addr}");
    let other = Shard::of(0, 2).unwrap().selector();
    let done = Arc::new(AtomicBool::new(false));
    let server_done = Arc::clone(&done);
    let server = thread::spawn(move || {
        // Answers every request as a list, until the test is done (and connects to say so).
        loop {
            let Ok((mut conn, _)) = listener.accept() else { return };
            if server_done.load(Ordering::SeqCst) {
                return;
            }
            let mut reader = BufReader::new(conn.try_clone().unwrap());
            let mut line = String::new();
            loop {
                line.clear();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
            }
            let body = serde_json::json!({"kind": "PodList", "apiVersion": "v1",
                "metadata": {"resourceVersion": "5", "shardInfo": {"selector": other}},
                "items": [{"metadata": {"name": "a", "namespace": "x", "uid": "u1", "resourceVersion": "5"}}]})
            .to_string();
            let _ = write!(
                conn,
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    let api: Api<Pod> = Api::all(Client::from_url(&url).unwrap());
    let w = Watcher::new(api, Config::default().wire_format(WireFormat::Json).shard(Shard::of(1, 2).unwrap())).unwrap();
    let err = loop {
        match w.recv_timeout(WAIT).expect("an event or error in time") {
            Err(e) => break e,
            Ok(ev) => assert!(!describe(&ev).starts_with("InitDone"), "the store was filled: {}", describe(&ev)),
        }
    };
    assert!(matches!(err, Error::Decode(_)), "{err}");
    let msg = err.to_string();
    assert!(msg.contains("another shard selector") && msg.contains("0x8000000000000000"), "{msg}");
    assert!(!w.store().is_ready());
    w.stop();
    done.store(true, Ordering::SeqCst);
    let _ = std::net::TcpStream::connect(addr);
    server.join().unwrap();
}

/// What a consumer believes from the events alone: uid → resourceVersion.
#[derive(Default)]
struct Told {
    live: std::collections::BTreeMap<String, String>,
    pending: Option<std::collections::BTreeMap<String, String>>,
}

impl Told {
    fn on(&mut self, item: kube_watcher::Result<kube_watcher::Event<Pod>>) {
        use kube_watcher::Event;
        let entry = |p: &Pod| (uid(p), p.metadata.resource_version.clone().unwrap_or_default());
        match item {
            Ok(Event::Init) => self.pending = Some(Default::default()),
            Ok(Event::InitApply(p)) => {
                let (u, rv) = entry(&p);
                self.pending.get_or_insert_default().insert(u, rv);
            }
            Ok(Event::InitDone) => self.live = self.pending.take().unwrap_or_default(),
            Ok(Event::Apply(p)) => {
                let (u, rv) = entry(&p);
                self.live.insert(u, rv);
            }
            Ok(Event::Delete(p)) => {
                self.live.remove(&uid(&*p));
            }
            Err(_) => {}
        }
    }
}

fn entries(w: &Watcher<Pod>) -> std::collections::BTreeMap<String, String> {
    w.store().state().iter().map(|p| (uid(&**p), p.metadata.resource_version.clone().unwrap_or_default())).collect()
}

/// The model test across shards: several sharded watchers and one unsharded one over one
/// churning server with faults, filtering or not. After each run the union of the shards'
/// stores equals the unsharded store (and the server), no object is in two stores, each object
/// is in the shard its hash names, and each store equals what its own events said. Seeds 0..8
/// by default (`KUBE_WATCHER_SHARD_SEEDS=n` for more, `KUBE_WATCHER_SHARD_SEED=s` for one).
#[test]
fn shards_partition_the_collection_under_churn_and_faults() {
    use common::random::{Write as W, Writes};
    use kube_watcher::testing::{Fault, Match};
    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};

    let env = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<u64>().ok());
    let seeds: Vec<u64> = match env("KUBE_WATCHER_SHARD_SEED") {
        Some(s) => vec![s],
        None => (0..env("KUBE_WATCHER_SHARD_SEEDS").unwrap_or(16)).collect(),
    };
    let writes = Writes {
        namespaces: &["a", "b", "c"],
        prefix: "p",
        names: 12,
        finalizer: "example.com/hold",
        selector: None,
        mix: &[(4, W::Create), (3, W::Modify), (2, W::Delete), (1, W::DropFinalizers), (1, W::Recreate), (1, W::Batch)],
        batch: 2..5,
    };
    for seed in seeds {
        let mut rng = SmallRng::seed_from_u64(seed);
        let filtering = seed % 2 == 0;
        let total = rng.random_range(2..=4u32);
        let by_namespace = rng.random_bool(0.25);
        let mut config = Config::default().page_size([1, 2, 500][rng.random_range(0..3)]);
        if rng.random_bool(0.3) {
            config = config.streaming_lists();
        }
        if rng.random_bool(0.5) {
            config = config.wire_format(WireFormat::Json);
        }
        config =
            config.backoff(kube_watcher::Backoff { initial: ms(10), max: ms(200), ..kube_watcher::Backoff::default() });
        let label = format!("seed {seed}: filtering={filtering} shards={total} by_namespace={by_namespace} {config:?}");
        let server =
            FakeApiServer::builder().bookmark_interval(ms(100)).sharded_list_and_watch(filtering).seed(seed).start();
        for _ in 0..8 {
            writes.write(&server, &mut rng);
        }
        let shards: Vec<Shard> = (0..total)
            .map(|i| {
                let s = Shard::of(i, total).unwrap();
                if by_namespace { s.by_namespace() } else { s }
            })
            .collect();
        let sharded: Vec<Watcher<Pod>> =
            shards.iter().map(|s| Watcher::new(pods(&server), config.clone().shard(s.clone())).unwrap()).collect();
        let whole = Watcher::new(pods(&server), config.clone()).unwrap();
        let mut told: Vec<Told> = (0..total).map(|_| Told::default()).collect();
        let drain = |told: &mut Vec<Told>| {
            for (w, t) in sharded.iter().zip(told.iter_mut()) {
                while let Ok(item) = w.try_recv() {
                    t.on(item);
                }
            }
            while whole.try_recv().is_ok() {}
        };
        for _ in 0..25 {
            writes.write(&server, &mut rng);
            if rng.random_bool(0.15) {
                let fault = match rng.random_range(0..6) {
                    0 => (
                        Match::Any,
                        Fault::Status {
                            code: 500,
                            reason: "InternalError".into(),
                            message: "model".into(),
                            retry_after: None,
                        },
                    ),
                    1 => (
                        Match::Watch,
                        Fault::Status { code: 410, reason: "Gone".into(), message: "model".into(), retry_after: None },
                    ),
                    2 => (Match::Watch, Fault::ResetAfter { events: rng.random_range(0..3) }),
                    3 => (Match::Watch, Fault::CloseAfter { events: rng.random_range(0..3) }),
                    4 => (Match::List, Fault::TruncateBody),
                    _ => (
                        Match::Watch,
                        Fault::InStreamError { code: 410, reason: "Expired".into(), message: "model".into() },
                    ),
                };
                server.push_fault(fault.0, fault.1);
            }
            drain(&mut told);
            if rng.random_bool(0.3) {
                thread::sleep(ms(rng.random_range(1..20)));
            }
        }
        server.clear_faults();
        // Converged: the server's objects, in the whole store and across the shards.
        let deadline = std::time::Instant::now() + WAIT;
        loop {
            drain(&mut told);
            let truth: std::collections::BTreeMap<String, String> = server
                .list::<Pod>()
                .iter()
                .map(|p| (uid(p), p.metadata.resource_version.clone().unwrap_or_default()))
                .collect();
            let mut union = std::collections::BTreeMap::new();
            let mut twice = Vec::new();
            for w in &sharded {
                for (u, rv) in entries(w) {
                    if union.insert(u.clone(), rv).is_some() {
                        twice.push(u);
                    }
                }
            }
            let ready = sharded.iter().all(|w| w.store().is_ready()) && whole.store().is_ready();
            let told_ok = sharded.iter().zip(&told).all(|(w, t)| entries(w) == t.live);
            if ready && entries(&whole) == truth && union == truth && twice.is_empty() && told_ok {
                break;
            }
            assert!(twice.is_empty(), "{label}: in two stores: {twice:?}");
            assert!(
                std::time::Instant::now() < deadline,
                "{label}: never converged: truth {truth:?}, union {union:?}, whole {:?}",
                entries(&whole)
            );
            thread::sleep(ms(10));
        }
        for (shard, w) in shards.iter().zip(&sharded) {
            for p in w.store().state() {
                let value = if by_namespace { p.metadata.namespace.clone().unwrap_or_default() } else { uid(&*p) };
                assert!(shard.contains(&value), "{label}: {value} is not in {shard:?}");
            }
            let expected = if filtering { ShardFilter::Server } else { ShardFilter::Client };
            // Before a streaming list the watcher asks with a small list; when a fault took
            // that answer, it asks again before its next watch, which may not have come yet.
            let said = w.stats().shard_filter;
            let streaming = format!("{config:?}").contains("streaming_lists: true");
            assert!(said == Some(expected) || (streaming && said.is_none()), "{label}: {said:?}");
            w.stop();
        }
        whole.stop();
    }
}

/// A server that says it filters (its lists echo the selector) but then sends an object of
/// another shard: the object never reaches the store or the events, and the consumer is told
/// once, with an error that says what happened. It used to be dropped with only a log line.
#[test]
fn another_shards_object_from_a_filtering_server_is_dropped_and_reported_once() {
    let server =
        FakeApiServer::builder().bookmark_interval(ms(100)).sharded_list_and_watch(true).json_only(true).start();
    let shard = Shard::of(0, 2).unwrap();
    let w = Watcher::new(pods(&server), Config::default().shard(shard.clone()).wire_format(WireFormat::Json)).unwrap();
    // The watcher's own channel is attached before the object is sent: a report made before it
    // is attached is not replayed (only the store's state is), and the worker may read the
    // object before this thread first receives.
    let _ = w.receiver();
    w.store().wait_until_ready(WAIT).unwrap();
    let foreign_uid = (0..).map(|i| format!("uid-{i}")).find(|u| !shard.contains(u)).unwrap();
    // At the server's current version, as an event the server sent would be: the watch resumes
    // from a dropped event's version too (docs/protocol.md §14.4).
    let line = serde_json::json!({
        "type": "ADDED",
        "object": {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "intruder", "namespace": "apps", "uid": foreign_uid,
                         "resourceVersion": server.resource_version()}
        }
    });
    for _ in 0..2 {
        server.push_fault(kube_watcher::testing::Match::Watch, kube_watcher::testing::Fault::Line(line.to_string()));
    }
    server.end_watches();
    let seen = collect_until(&w, |s| s.iter().any(|e| e.contains("other shards")));
    assert!(seen.iter().all(|e| !e.contains("intruder")), "{seen:?}");
    // The second one (on the next watch) is dropped without another report: by the time a pod
    // of this shard created after it arrives, no second error came.
    server.end_watches();
    let ours = (0..)
        .map(|i| server.create(&pod("apps", &format!("after-{i}"))).unwrap())
        .find(|p| shard.contains(&uid(p)))
        .and_then(|p| p.metadata.name)
        .unwrap();
    let more = collect_until(&w, |s| s.iter().any(|e| *e == format!("Apply({ours})")));
    assert!(more.iter().all(|e| !e.contains("other shards") && !e.contains("intruder")), "{more:?}");
    assert!(w.store().state().iter().all(|p| p.metadata.name.as_deref() != Some("intruder")));
    assert_eq!(w.stats().shard_filter, Some(ShardFilter::Server));
}

/// `stats().synced_shard` says which shard the store holds in full: none for a watcher of every
/// object, the shard once a sharded watcher synced, and a shard group member's share once its
/// store caught up with it (alone in its group: the whole hash space).
#[test]
fn synced_shard_is_the_shard_of_the_last_complete_sync() {
    let server = server();
    create_pods(&server, 0..20);
    let client = Client::from_url(&server.url()).unwrap();
    let all = Watcher::new(Api::<Pod>::all(client.clone()), Config::default()).unwrap();
    let third = Shard::of(1, 3).unwrap();
    let one = Watcher::new(Api::<Pod>::all(client.clone()), Config::default().shard(third.clone())).unwrap();
    eventually("the sharded watcher's sync", || one.stats().synced_shard.as_ref() == Some(&third));
    all.store().wait_until_ready(WAIT).unwrap();
    eventually("the watcher of every pod's sync", || all.stats().relists.initial == 1);
    assert_eq!(all.stats().synced_shard, None);

    let timings = kube_watcher::LeaseTimings {
        lease_duration: std::time::Duration::from_secs(6),
        renew_deadline: std::time::Duration::from_secs(4),
        retry_period: ms(100),
    };
    let leases = Api::namespaced(client.clone(), "default");
    let group = kube_watcher::ShardGroup::join(leases, "pods", "alone", timings).unwrap();
    let member = Watcher::new(Api::<Pod>::all(client), Config::default().shard_group(&group)).unwrap();
    eventually("the member's store to catch up with its share", || {
        let synced = member.stats().synced_shard;
        synced.is_some() && synced == group.shard()
    });
    assert_eq!(group.shard(), Some(Shard::of(0, 1).unwrap()));
    assert_eq!(member.store().len(), 20);
    member.stop();
    group.stop();
}

/// A consumer that reads `stats()` when a sync's `Notice::Synced` (or its `InitDone`) arrives
/// already sees the shard that sync was of: the counters are told before either goes out. Each
/// of many watchers checks its first sync, several at once so that threads compete for the cores.
#[test]
fn synced_shard_is_set_when_the_sync_is_announced() {
    let server = server();
    create_pods(&server, 0..8);
    let client = Client::from_url(&server.url()).unwrap();
    for round in 0..10 {
        let checks: Vec<_> = (0..4)
            .map(|i| {
                let client = client.clone();
                thread::spawn(move || {
                    let shard = Shard::of(i % 3, 3).unwrap();
                    let w = Watcher::new(Api::<Pod>::all(client), Config::default().shard(shard.clone())).unwrap();
                    let notices = w.notices();
                    loop {
                        if let Notice::Synced { .. } = notices.recv_timeout(WAIT).expect("a notice") {
                            break w.stats().synced_shard == Some(shard);
                        }
                    }
                })
            })
            .collect();
        for (i, check) in checks.into_iter().enumerate() {
            assert!(
                check.join().unwrap(),
                "round {round}, watcher {i}: the sync was announced before stats() knew its shard"
            );
        }
    }
}

/// A sharded watcher whose server does not filter drops the other shards' events unread, but
/// the watch has come as far as each of them: it resumes from the newest event the server
/// sent, not from the last one of its own shard (docs/protocol.md §14.4). A quiet shard
/// without bookmarks used to resume from its last own version and, once the history was
/// compacted past it, meet 410 Gone and relist although nothing it missed was gone.
#[test]
fn events_of_other_shards_move_the_version_the_watch_resumes_from() {
    for format in [WireFormat::Json, WireFormat::Protobuf] {
        let server = sharded_server(false);
        create_pods(&server, 0..8);
        let shard = Shard::of(0, 2).unwrap();
        // Long watches: the only end is the one this test makes.
        let config = Config::default()
            .shard(shard.clone())
            .disable_bookmarks()
            .timeout(std::time::Duration::from_secs(300))
            .wire_format(format);
        let w = Watcher::new(pods(&server), config).unwrap();
        w.store().wait_until_ready(WAIT).unwrap();
        let listed = w.store().resource_version().unwrap();
        // Changes of the other shard's objects only.
        let theirs: Vec<Pod> = server.list::<Pod>().into_iter().filter(|p| !shard.contains(&uid(p))).collect();
        assert!(!theirs.is_empty());
        for mut p in theirs {
            p.metadata.annotations = Some([("touched".to_owned(), "1".to_owned())].into());
            server.replace(&p).unwrap();
        }
        let newest = server.resource_version();
        assert_ne!(newest, listed);
        // The store reflects them as it would a bookmark: every change of its shard up to there.
        w.store().wait_for_version(&newest, WAIT).expect("the dropped events move the store's version");
        // Resuming from the list's version is 410 Gone from now on; from the newest, it is not.
        server.compact();
        server.end_watches();
        let from_newest = |r: &kube_watcher::testing::RecordedRequest| {
            r.watch && r.query_param("resourceVersion") == Some(newest.as_str())
        };
        eventually("a watch from the newest version", || server.requests().iter().any(from_newest));
        // A change of its own shard arrives over that watch, with no relist.
        let mine = (0..)
            .map(|i| server.create(&pod("apps", &format!("mine{i}"))).unwrap())
            .find(|p| shard.contains(&uid(p)))
            .unwrap();
        eventually("the shard's new object", || store_uids(&w).contains(&uid(&mine)));
        let stats = w.stats();
        assert_eq!((stats.relists.total(), stats.relists.expired), (1, 0), "{format:?}: {stats:?}");
        w.stop();
    }
}

/// A streaming list carries no list metadata: before it, a sharded watcher asks whether the
/// server filters (a list of at most one object). When that question meets a fault, the
/// streaming list waits until it is answered, so `stats().shard_filter` is known once the list
/// is complete, as after a paged list. It used to stay `None` until the stream ended.
#[test]
fn the_shard_filter_is_known_once_a_streaming_list_completes_after_its_probe_failed() {
    use kube_watcher::testing::{Fault, Match};
    let faults = || {
        [
            (
                "503",
                Fault::Status {
                    code: 503,
                    reason: "ServiceUnavailable".into(),
                    message: "busy".into(),
                    retry_after: None,
                },
            ),
            ("truncated", Fault::TruncateBody),
            (
                "403",
                Fault::Status { code: 403, reason: "Forbidden".into(), message: "not now".into(), retry_after: None },
            ),
        ]
    };
    for (filtering, by) in [(true, ShardFilter::Server), (false, ShardFilter::Client)] {
        for (label, fault) in faults() {
            let label = format!("filtering={filtering} {label}");
            let server = sharded_server(filtering);
            create_pods(&server, 0..6);
            server.push_fault(Match::List, fault);
            // The stream outlives the test: nothing but the probe's retry can tell the filter.
            let config = Config::default()
                .streaming_lists()
                .shard(Shard::of(0, 2).unwrap())
                .timeout(std::time::Duration::from_secs(300))
                .backoff(kube_watcher::Backoff { initial: ms(5), max: ms(20), ..Default::default() });
            let w = Watcher::new(pods(&server), config).unwrap();
            w.store().wait_until_ready(WAIT).unwrap();
            let stats = w.stats();
            assert_eq!(stats.shard_filter, Some(by), "{label}: {stats:?}");
            assert_eq!(stats.relists.streaming_fallback, 0, "{label}: streaming lists were not given up");
            assert_eq!(server.pending_faults(), 0, "{label}: the probe met the fault");
            w.stop();
        }
    }
}

/// A metadata-only list has no `shardInfo` whoever filtered (kube-apiserver copies only the
/// resourceVersion, the continue token and the remaining count into it): a sharded metadata
/// watcher asks with a list of one full object first, and its list waits until that is
/// answered, through a fault too. It used to read the missing `shardInfo` as `Client`.
#[test]
fn a_metadata_watcher_learns_who_filters_from_a_list_of_full_objects() {
    use kube_watcher::testing::{Fault, Match};
    for (filtering, by) in [(true, ShardFilter::Server), (false, ShardFilter::Client)] {
        for fault in [None, Some(Fault::TruncateBody)] {
            let label = format!("filtering={filtering} fault={fault:?}");
            let server = sharded_server(filtering);
            create_pods(&server, 0..6);
            if let Some(fault) = fault {
                server.push_fault(Match::List, fault);
            }
            let config = Config::default().shard(Shard::of(0, 2).unwrap()).backoff(kube_watcher::Backoff {
                initial: ms(5),
                max: ms(20),
                ..Default::default()
            });
            let w = metadata_watcher(pods(&server), config).unwrap();
            let notices = w.notices();
            w.store().wait_until_ready(WAIT).unwrap();
            assert_eq!(w.stats().shard_filter, Some(by), "{label}");
            assert_eq!(said(&notices), [by], "{label}");
            assert_eq!(server.pending_faults(), 0, "{label}: the probe met the fault");
            w.stop();
        }
    }
}
