//! Fields never decoded (`WatcherBuilder::skip_fields`): every store mode, both wire formats,
//! events, store, transform, indexes and predicates see the object without them, and equal to
//! the server's object with them removed; bad paths are refused when the watcher is built.

use crate::common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use common::*;
use k8s_openapi::api::core::v1::{Container, EnvVar, Pod, PodCondition, PodSpec, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry, ObjectMeta};
use kube_watcher::testing::{FakeApiServer, ResourceType};
use kube_watcher::{Api, Client, Config, DynamicObject, Error, Event, ObjectRef, Watcher, WatcherBuilder, WireFormat};
use serde_json::json;

const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

const PATHS: [&str; 4] = [
    "metadata.managedFields",
    "metadata.annotations[kubectl.kubernetes.io/last-applied-configuration]",
    "spec.containers.env",
    "status.conditions",
];

/// A pod with every field [`PATHS`] names, and others beside them.
fn full_pod(name: &str) -> Pod {
    let env = |v: &str| Some(vec![EnvVar { name: "A".into(), value: Some(v.into()), ..Default::default() }]);
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("apps".into()),
            labels: Some(BTreeMap::from([("app".to_owned(), "web".to_owned())])),
            annotations: Some(BTreeMap::from([
                (LAST_APPLIED.to_owned(), r#"{"apiVersion":"v1","kind":"Pod"}"#.to_owned()),
                ("team".to_owned(), "a".to_owned()),
            ])),
            managed_fields: Some(vec![ManagedFieldsEntry {
                manager: Some("kubectl".into()),
                operation: Some("Apply".into()),
                fields_type: Some("FieldsV1".into()),
                fields_v1: Some(FieldsV1(json!({"f:spec": {"f:containers": {}}}))),
                ..Default::default()
            }]),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers: vec![
                Container { name: "c1".into(), image: Some("i1".into()), env: env("1"), ..Default::default() },
                Container { name: "c2".into(), image: Some("i2".into()), env: env("2"), ..Default::default() },
            ],
            ..Default::default()
        }),
        status: Some(PodStatus {
            phase: Some("Running".into()),
            conditions: Some(vec![PodCondition { type_: "Ready".into(), status: "True".into(), ..Default::default() }]),
            ..Default::default()
        }),
    }
}

/// `pod` with the fields of [`PATHS`] cleared: what a watcher that skips them must hold.
fn cleared(mut pod: Pod) -> Pod {
    pod.metadata.managed_fields = None;
    if let Some(a) = &mut pod.metadata.annotations {
        a.remove(LAST_APPLIED);
    }
    for c in &mut pod.spec.as_mut().unwrap().containers {
        c.env = None;
    }
    pod.status.as_mut().unwrap().conditions = None;
    pod
}

fn skips_nothing_it_should_not(p: &Pod) -> bool {
    p.metadata.managed_fields.is_none()
        && p.metadata.annotations.as_ref().is_some_and(|a| !a.contains_key(LAST_APPLIED) && a["team"] == "a")
        && p.spec.as_ref().is_some_and(|s| s.containers.iter().all(|c| c.env.is_none() && c.image.is_some()))
        && p.status.as_ref().is_some_and(|s| s.conditions.is_none() && s.phase.is_some())
}

type Modes = [(&'static str, fn(WatcherBuilder<Pod>) -> WatcherBuilder<Pod>); 4];

const MODES: Modes = [
    ("typed", |b| b),
    ("compact", |b| b.compact_store()),
    ("compressed", |b| b.compressed_store()),
    ("parallel_sync", |b| b.parallel_sync(2)),
];

#[test]
fn skipped_fields_are_absent_everywhere_in_every_mode_and_wire_format() {
    for wire in [WireFormat::Protobuf, WireFormat::Json] {
        for (mode, with) in MODES {
            absent_everywhere(&format!("{mode}, {wire:?}"), wire, with);
        }
    }
}

fn absent_everywhere(label: &str, wire: WireFormat, with: fn(WatcherBuilder<Pod>) -> WatcherBuilder<Pod>) {
    let server = server();
    for i in 0..3 {
        server.create(&full_pod(&format!("p{i}"))).unwrap();
    }
    let transform_saw_a_skipped_field = Arc::new(AtomicBool::new(false));
    let saw = Arc::clone(&transform_saw_a_skipped_field);
    let predicate_saw_a_skipped_field = Arc::new(AtomicBool::new(false));
    let saw_in_predicate = Arc::clone(&predicate_saw_a_skipped_field);
    let w = with(Watcher::builder(pods(&server)))
        .config(Config::default().page_size(2).wire_format(wire))
        .skip_fields(PATHS)
        .transform(move |p: &mut Pod| {
            if !skips_nothing_it_should_not(p) {
                saw.store(true, Ordering::Relaxed);
            }
        })
        .index("env", |p: &Pod| {
            let spec = p.spec.as_ref();
            vec![
                if spec.is_some_and(|s| s.containers.iter().any(|c| c.env.is_some())) { "some" } else { "none" }.into(),
            ]
        })
        .predicate(move |old: &Pod, new: &Pod| {
            if !skips_nothing_it_should_not(old) || !skips_nothing_it_should_not(new) {
                saw_in_predicate.store(true, Ordering::Relaxed);
            }
            old != new
        })
        .start()
        .unwrap();
    let mut initial = Vec::new();
    loop {
        match w.recv_timeout(WAIT).unwrap().unwrap() {
            Event::InitApply(p) => initial.push(p),
            Event::InitDone => break,
            Event::Init => {}
            other => panic!("{label}: {}", describe(&other)),
        }
    }
    assert_eq!(initial.len(), 3, "{label}");
    assert_eq!(w.stats().wire_format, Some(wire), "{label}");
    for p in &initial {
        let truth = server.get::<Pod>(Some("apps"), p.metadata.name.as_deref().unwrap()).unwrap();
        assert!(truth.metadata.managed_fields.is_some(), "{label}: the server keeps them");
        assert_eq!(**p, cleared(truth), "{label}: a skipped decode equals the object with the fields cleared");
    }
    // A change by watch, to a kept field and a skipped one.
    let mut p1 = server.get::<Pod>(Some("apps"), "p1").unwrap();
    p1.metadata.labels.get_or_insert_default().insert("v".into(), "2".into());
    p1.spec.as_mut().unwrap().containers[0].env = Some(vec![EnvVar { name: "B".into(), ..Default::default() }]);
    server.replace(&p1).unwrap();
    let applied = loop {
        if let Event::Apply(p) = w.recv_timeout(WAIT).unwrap().unwrap() {
            break p;
        }
    };
    let truth = server.get::<Pod>(Some("apps"), "p1").unwrap();
    assert_eq!(*applied, cleared(truth.clone()), "{label}: watched");
    let stored = w.store().get(&ObjectRef::new("p1").within("apps")).unwrap();
    assert_eq!(*stored, cleared(truth), "{label}: stored");
    assert_eq!(w.store().index("env", "none").len(), 3, "{label}: indexes see no env");
    assert!(!transform_saw_a_skipped_field.load(Ordering::Relaxed), "{label}: the transform saw a skipped field");
    assert!(!predicate_saw_a_skipped_field.load(Ordering::Relaxed), "{label}: a predicate saw a skipped field");
}

/// A map whose every entry is skipped is an empty map, and the compact stores keep it so: the
/// store reads what the events carry (protobuf cannot write an empty map, so such an object is
/// kept re-encoded), also for a predicate comparing the two.
#[test]
fn a_map_left_empty_by_skipping_reads_the_same_from_the_store_as_from_the_events() {
    for wire in [WireFormat::Protobuf, WireFormat::Json] {
        // The compact and the compressed store.
        for &(mode, with) in &MODES[1..3] {
            let label = format!("{mode}, {wire:?}");
            let server = server();
            let mut only = full_pod("only");
            only.metadata.annotations = Some(BTreeMap::from([(LAST_APPLIED.to_owned(), "{}".to_owned())]));
            server.create(&only).unwrap();
            server.create(&full_pod("two")).unwrap();
            let w = with(Watcher::builder(pods(&server)))
                .config(Config::default().wire_format(wire))
                .with_managed_fields()
                .skip_fields([PATHS[1]])
                .predicate(|old: &Pod, new: &Pod| old.metadata.annotations != new.metadata.annotations)
                .start()
                .unwrap();
            let mut initial = Vec::new();
            loop {
                match w.recv_timeout(WAIT).unwrap().unwrap() {
                    Event::InitApply(p) => initial.push(p),
                    Event::InitDone => break,
                    _ => {}
                }
            }
            for p in &initial {
                let name = p.metadata.name.as_deref().unwrap();
                let stored = w.store().get(&ObjectRef::new(name).within("apps")).unwrap();
                assert_eq!(stored, *p, "{label}: {name}");
                let mut want = server.get::<Pod>(Some("apps"), name).unwrap();
                want.metadata.annotations.as_mut().unwrap().remove(LAST_APPLIED);
                assert_eq!(**p, want, "{label}: {name}");
            }
            let only = initial.iter().find(|p| p.metadata.name.as_deref() == Some("only")).unwrap();
            assert_eq!(only.metadata.annotations, Some(BTreeMap::new()), "{label}");
            // A change elsewhere: the predicate compares the stored object with the new one and
            // sees the same (empty) annotations, so nothing is delivered; a change of a kept
            // annotation is.
            let mut changed = server.get::<Pod>(Some("apps"), "only").unwrap();
            changed.metadata.labels.get_or_insert_default().insert("v".into(), "2".into());
            server.replace(&changed).unwrap();
            changed = server.get::<Pod>(Some("apps"), "only").unwrap();
            changed.metadata.annotations.get_or_insert_default().insert("team".into(), "b".into());
            server.replace(&changed).unwrap();
            let applied = loop {
                if let Event::Apply(p) = w.recv_timeout(WAIT).unwrap().unwrap() {
                    break p;
                }
            };
            assert_eq!(applied.metadata.annotations.as_ref().unwrap()["team"], "b", "{label}: the label change passed");
        }
    }
}

#[test]
fn a_metadata_watcher_skips_managed_fields_over_both_wire_formats() {
    for wire in [WireFormat::Protobuf, WireFormat::Json] {
        let server = server();
        server.create(&full_pod("p0")).unwrap();
        let w = Watcher::builder(pods(&server).into_metadata())
            .config(Config::default().wire_format(wire))
            .without_managed_fields()
            .skip_fields(["metadata.annotations[kubectl.kubernetes.io/last-applied-configuration]"])
            .start()
            .unwrap();
        w.store().wait_until_ready(WAIT).unwrap();
        let got = w.store().get(&ObjectRef::new("p0").within("apps")).unwrap();
        let mut want = server.get::<Pod>(Some("apps"), "p0").unwrap().metadata;
        want.managed_fields = None;
        want.annotations.as_mut().unwrap().remove(LAST_APPLIED);
        assert_eq!(got.metadata, want, "{wire:?}");
    }
}

/// A watcher skips `metadata.managedFields` unless asked for them: by default it holds none,
/// `with_managed_fields` holds them as the server sent them (`without_managed_fields` after it
/// undoes it), and a path inside them given to `skip_fields` skips that part only.
#[test]
fn watchers_skip_managed_fields_unless_asked_for_them() {
    for wire in [WireFormat::Protobuf, WireFormat::Json] {
        let server = server();
        server.create(&full_pod("p0")).unwrap();
        let served = server.get::<Pod>(Some("apps"), "p0").unwrap().metadata.managed_fields;
        assert!(served.as_ref().is_some_and(|m| !m.is_empty()), "{served:?}");
        let held = |builder: WatcherBuilder<Pod>| {
            let w = builder.config(Config::default().wire_format(wire)).start().unwrap();
            w.store().wait_until_ready(WAIT).unwrap();
            let pod = w.store().get(&ObjectRef::new("p0").within("apps")).unwrap();
            pod.metadata.managed_fields.clone()
        };
        let new = Watcher::new(pods(&server), Config::default().wire_format(wire)).unwrap();
        new.store().wait_until_ready(WAIT).unwrap();
        let pod = new.store().get(&ObjectRef::new("p0").within("apps")).unwrap();
        assert_eq!(pod.metadata.managed_fields, None, "{wire:?}: Watcher::new");
        assert_eq!(held(Watcher::builder(pods(&server))), None, "{wire:?}: the default");
        assert_eq!(held(Watcher::builder(pods(&server)).with_managed_fields()), served, "{wire:?}");
        let undone = Watcher::builder(pods(&server)).with_managed_fields().without_managed_fields();
        assert_eq!(held(undone), None, "{wire:?}");
        let named = Watcher::builder(pods(&server)).skip_fields(["metadata.managedFields"]);
        assert_eq!(held(named), None, "{wire:?}: named by the user as well");
        let part = Watcher::builder(pods(&server)).skip_fields(["metadata.managedFields.fieldsV1"]);
        let mut without_sets = served.clone().unwrap();
        for entry in &mut without_sets {
            entry.fields_v1 = None;
        }
        assert_eq!(held(part), Some(without_sets), "{wire:?}: a part of them skipped");
    }
}

#[test]
fn dynamic_objects_skip_paths_their_type_does_not_declare() {
    let server = server();
    let rt = ResourceType::new("example.com", "v1", "widgets", "Widget", true);
    server.register(rt.clone());
    let widget = json!({
        "metadata": {"name": "a", "namespace": "shop", "managedFields": [{"manager": "m"}]},
        "spec": {"size": 1, "blob": {"big": "x"}, "parts": [{"name": "p", "secret": "s"}]}
    });
    server.create_value(&rt, widget).unwrap();
    let client = Client::from_url(&server.url()).unwrap();
    let ar = client.discover("widgets.example.com").unwrap();
    let w = Watcher::builder(Api::<DynamicObject>::all_with(client, &ar))
        .skip_fields(["spec.blob", "spec.parts.secret"])
        .without_managed_fields()
        .compressed_store()
        .start()
        .unwrap();
    w.store().wait_until_ready(WAIT).unwrap();
    let a = w.store().get(&ObjectRef::new("a").within("shop")).unwrap();
    assert_eq!(a.data["spec"], json!({"size": 1, "parts": [{"name": "p"}]}));
    assert!(a.metadata.managed_fields.is_none());
    assert_eq!(a.metadata.name.as_deref(), Some("a"));
}

#[test]
fn bad_paths_are_refused_when_the_watcher_is_built_naming_the_path() {
    let server = FakeApiServer::start();
    for (paths, want) in [
        (vec![""], "skip_fields: \"\": a path is empty"),
        (vec!["metadata.name"], "\"metadata.name\": the cache needs metadata.name"),
        (vec!["metadata.resourceVersion"], "the cache needs metadata.resourceVersion"),
        (vec!["metadata.uid"], "the cache needs metadata.uid"),
        (vec!["status.phase.x"], "\"status.phase.x\": status.phase holds no fields"),
        (vec!["status", "status"], "\"status\": named twice"),
        (vec!["spec.contianers"], "PodSpec has no field \"contianers\"; the closest are containers"),
    ] {
        let err = Watcher::builder(pods(&server)).skip_fields(&paths).start().unwrap_err();
        assert!(matches!(err, Error::Config { .. }), "{paths:?}: {err:?}");
        assert!(err.to_string().contains(want), "{paths:?}: {err}");
    }
    // Asking for managedFields twice is asking once.
    let w = Watcher::builder(pods(&server)).without_managed_fields().without_managed_fields().start();
    assert!(w.is_ok());
}

#[test]
fn a_drift_check_repairs_a_store_that_skips_fields_and_keeps_skipping() {
    use kube_watcher::testing::{Fault, Match};
    use kube_watcher::{Notice, RelistReason};
    let server = server();
    server.create(&full_pod("a")).unwrap();
    server.push_fault(Match::Watch, Fault::DropEvents { events: 1 }); // the first watch loses one
    let w = Watcher::builder(pods(&server))
        .config(paged().drift_check(std::time::Duration::from_secs(1)))
        .skip_fields(PATHS)
        .start()
        .unwrap();
    let notices = w.notices();
    w.store().wait_until_ready(WAIT).unwrap();
    eventually("the first watch is open", || server.requests().iter().any(|r| r.watch));
    server.create(&full_pod("lost")).unwrap();
    server.create(&full_pod("next")).unwrap(); // delivered: the watch moves past "lost"
    loop {
        match notices.recv_timeout(WAIT).expect("no drift relist") {
            Notice::Synced { reason: RelistReason::Drift, .. } => break,
            _ => continue,
        }
    }
    store_matches_server(&w, &server);
    for name in ["a", "lost", "next"] {
        let got = w.store().get(&ObjectRef::new(name).within("apps")).unwrap();
        assert_eq!(*got, cleared(server.get::<Pod>(Some("apps"), name).unwrap()), "{name}");
    }
}
