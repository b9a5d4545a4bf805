//! The compact and compressed store modes: the same answers as the default mode, with objects
//! kept as their bytes off the wire (compressed in the second), protobuf or JSON.
#![cfg(feature = "testing")]

use crate::common;

use std::collections::BTreeMap;
use std::sync::Arc;

use common::*;
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube_watcher::testing::{Fault, Match};
use kube_watcher::{Api, Client, Config, ObjectRef, Watcher, WatcherBuilder, WireFormat};

/// The two modes that keep encoded objects, by name, each over both wire formats (the pods of
/// the fake server have a protobuf form: `WireFormat::Protobuf` reads it).
const MODES: [(&str, WireFormat); 4] = [
    ("compact", WireFormat::Protobuf),
    ("compressed", WireFormat::Protobuf),
    ("compact", WireFormat::Json),
    ("compressed", WireFormat::Json),
];

/// The builder in `mode`, its configuration `config` asking for `wire`.
fn in_mode(b: WatcherBuilder<Pod>, (mode, wire): (&str, WireFormat), config: Config) -> WatcherBuilder<Pod> {
    let b = b.config(config.wire_format(wire));
    if mode == "compressed" { b.compressed_store() } else { b.compact_store() }
}

#[test]
fn a_compact_store_answers_like_a_typed_one() {
    for mode in MODES {
        answers_like_a_typed_store(mode);
    }
}

fn answers_like_a_typed_store(mode: (&str, WireFormat)) {
    let server = server();
    for i in 0..5 {
        server.create(&pod("apps", &format!("p{i}"))).unwrap();
    }
    let api: Api<Pod> = Api::all(Client::from_url(&server.url()).unwrap());
    let w = in_mode(Watcher::builder(api), mode, Config::default().page_size(2)).start().unwrap();
    let seen = collect_until(&w, |s| s.last().is_some_and(|e| e == "InitDone"));
    assert_eq!(seen.len(), 7, "{seen:?}");
    assert_eq!(w.stats().wire_format, Some(mode.1), "{mode:?}");
    server.create(&pod("apps", "new")).unwrap();
    let mut p1 = server.get::<Pod>(Some("apps"), "p1").unwrap();
    p1.metadata.labels.get_or_insert_default().insert("v".into(), "2".into());
    server.replace(&p1).unwrap();
    server.delete::<Pod>(Some("apps"), "p2").unwrap();
    let seen = collect_until(&w, |s| s.iter().any(|e| e == "Delete(p2)"));
    assert_eq!(seen, ["Apply(new)", "Apply(p1)", "Delete(p2)"], "{mode:?}");
    store_matches_server(&w, &server);
    for name in ["p0", "p1", "new"] {
        let got = w.store().get(&ObjectRef::new(name).within("apps")).unwrap();
        assert_eq!(
            *got,
            server.get::<Pod>(Some("apps"), name).unwrap(),
            "{mode:?} {name}: decoded, equal to the truth"
        );
    }
    let got = w.store().get(&ObjectRef::new("p1").within("apps")).unwrap();
    let again = w.store().get(&ObjectRef::new("p1").within("apps")).unwrap();
    assert!(!Arc::ptr_eq(&got, &again), "each get decodes anew");
}

#[test]
fn a_compact_store_keeps_the_transformed_object() {
    for mode in MODES {
        keeps_the_transformed_object(mode);
    }
}

fn keeps_the_transformed_object(mode: (&str, WireFormat)) {
    let server = server();
    server.create(&pod("apps", "a")).unwrap();
    let api: Api<Pod> = Api::all(Client::from_url(&server.url()).unwrap());
    let w = in_mode(Watcher::builder(api).transform(|p: &mut Pod| p.metadata.labels = None), mode, Config::default())
        .start()
        .unwrap();
    w.store().wait_until_ready(WAIT).unwrap();
    server.create(&pod("apps", "b")).unwrap();
    eventually("b arrives", || w.store().len() == 2);
    for name in ["a", "b"] {
        let p = w.store().get(&ObjectRef::new(name).within("apps")).unwrap();
        assert!(p.metadata.labels.is_none(), "{mode:?} {name}");
    }
}

#[test]
fn a_compact_store_reports_deletes_missed_during_an_outage() {
    for mode in MODES {
        reports_deletes_missed_during_an_outage(mode);
    }
}

fn reports_deletes_missed_during_an_outage(mode: (&str, WireFormat)) {
    let server = server();
    for i in 0..3 {
        server.create(&pod("apps", &format!("p{i}"))).unwrap();
    }
    server.push_fault(Match::Watch, Fault::Stall);
    let api: Api<Pod> = Api::all(Client::from_url(&server.url()).unwrap());
    // A list, then the watch that stalls.
    let config = paged().timeout(std::time::Duration::from_secs(1)).stall_timeout(std::time::Duration::from_secs(2));
    let w = in_mode(Watcher::builder(api), mode, config).start().unwrap();
    collect_until(&w, |s| s.last().is_some_and(|e| e == "InitDone"));
    eventually("the stalled watch is requested", || server.requests().iter().any(|r| r.watch));
    server.delete::<Pod>(Some("apps"), "p1").unwrap();
    server.compact();
    let seen = collect_until(&w, |s| s.iter().any(|e| e == "Delete(p1)"));
    assert!(seen.iter().any(|e| e == "InitDone"), "reported by the relist: {seen:?}");
    store_matches_server(&w, &server);
}

/// A pod of one of several deployments, each with its own image and a long, distinct command
/// line: the compressed store's dictionary grows as new deployments come.
fn deployment_pod(i: usize) -> Pod {
    let team = i / 40;
    let command: Vec<String> =
        (0..60).map(|k| format!("--flag-{team}-{k}={}", (team * 7919 + k * 104_729) % 65_521)).collect();
    Pod {
        metadata: ObjectMeta {
            name: Some(format!("team{team}-{i:04}")),
            namespace: Some("apps".into()),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "app".into(),
                image: Some(format!("registry.example.com/team-{team}/app:1.{team}")),
                command: Some(command),
                ..Container::default()
            }],
            node_name: Some(format!("node-{}", i % 7)),
            ..PodSpec::default()
        }),
        ..Pod::default()
    }
}

#[test]
fn a_compressed_store_returns_every_object_as_the_server_has_it() {
    for wire in [WireFormat::Protobuf, WireFormat::Json] {
        returns_every_object_as_the_server_has_it(wire);
    }
}

fn returns_every_object_as_the_server_has_it(wire: WireFormat) {
    let server = server();
    for i in 0..200 {
        server.create(&deployment_pod(i)).unwrap();
    }
    let api: Api<Pod> = Api::all(Client::from_url(&server.url()).unwrap());
    let w = in_mode(Watcher::builder(api), ("compressed", wire), Config::default().page_size(50)).start().unwrap();
    w.store().wait_until_ready(WAIT).unwrap();
    // Objects changed after the sync are compressed against the grown dictionary.
    for i in (0..200).step_by(3) {
        let mut p = deployment_pod(i);
        p.metadata.labels = Some(BTreeMap::from([("changed".to_owned(), i.to_string())]));
        server.replace(&p).unwrap();
    }
    for i in 200..260 {
        server.create(&deployment_pod(i)).unwrap();
    }
    eventually("the changes arrive", || {
        w.store().len() == 260
            && w.store().get(&ObjectRef::new("team4-0198").within("apps")).is_some_and(|p| p.metadata.labels.is_some())
    });
    store_matches_server(&w, &server);
    for p in server.list::<Pod>() {
        let name = p.metadata.name.clone().unwrap();
        let got = w.store().get(&ObjectRef::new(&name).within("apps")).unwrap();
        assert_eq!(*got, p, "{wire:?} {name}");
    }
}

/// The objects of the `InitApply` events on `rx` up to the first `InitDone`, by name.
fn listed(
    rx: &crossbeam_channel::Receiver<Result<kube_watcher::Event<Pod>, kube_watcher::Error>>,
) -> BTreeMap<String, Pod> {
    let deadline = std::time::Instant::now() + WAIT;
    let mut seen = BTreeMap::new();
    loop {
        match rx.recv_deadline(deadline) {
            Ok(Ok(kube_watcher::Event::InitApply(p))) => {
                let name = p.metadata.name.clone().unwrap_or_default();
                assert!(seen.insert(name.clone(), (*p).clone()).is_none(), "{name} listed twice");
            }
            Ok(Ok(kube_watcher::Event::InitDone)) => return seen,
            Ok(Ok(_)) => {}
            Ok(Err(e)) => panic!("error event: {e}"),
            Err(e) => panic!("no InitDone ({e}) after {} objects", seen.len()),
        }
    }
}

/// While a list is read, an `InitApply` goes to a consumer that keeps up with the object decoded
/// off the wire, and to one that is behind as its entry, decoded when it goes out: both must
/// receive the same objects, those the store answers with (after the transform, if any).
#[test]
fn a_compact_stores_consumer_gets_the_same_objects_whether_it_keeps_up_or_not() {
    for mode in MODES {
        for transform in [false, true] {
            gets_the_same_objects_whether_it_keeps_up_or_not(mode, transform);
        }
    }
}

fn gets_the_same_objects_whether_it_keeps_up_or_not(mode: (&str, WireFormat), transform: bool) {
    let server = server();
    // Far more than a channel holds before entries stay undecoded (128), in one page.
    let n = 600;
    for i in 0..n {
        server.create(&deployment_pod(i)).unwrap();
    }
    let relabel = |p: &mut Pod| p.metadata.labels = Some(BTreeMap::from([("seen".to_owned(), "1".to_owned())]));
    let start = || {
        let api: Api<Pod> = Api::all(Client::from_url(&server.url()).unwrap());
        let b = Watcher::builder(api);
        let b = if transform { b.transform(relabel) } else { b };
        in_mode(b, mode, Config::default().page_size(0)).start().unwrap()
    };
    // Read from the start, on a thread of its own.
    let prompt = start();
    let rx = prompt.receiver().clone();
    let reader = std::thread::spawn(move || listed(&rx));
    // Read only once the store is ready: the list went by without it.
    let late = start();
    let rx = late.receiver().clone();
    late.store().wait_until_ready(WAIT).unwrap();
    let behind = listed(&rx);
    let kept_up = reader.join().unwrap();
    let what = format!("{mode:?}, transform: {transform}");
    assert_eq!(kept_up.len(), n, "{what}");
    assert_eq!(behind.len(), n, "{what}");
    for mut truth in server.list::<Pod>() {
        if transform {
            relabel(&mut truth);
        }
        let name = truth.metadata.name.clone().unwrap();
        assert_eq!(kept_up[&name], truth, "{what}: {name}, to the consumer that kept up");
        assert_eq!(behind[&name], truth, "{what}: {name}, to the consumer that was behind");
        let stored = prompt.store().get(&ObjectRef::new(&name).within("apps")).unwrap();
        assert_eq!(*stored, truth, "{what}: {name}, in the store");
    }
}
