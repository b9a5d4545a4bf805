//! Compact store mode: the same answers as the default mode, with objects kept as JSON.
#![cfg(feature = "testing")]

mod common;

use std::sync::Arc;

use common::*;
use k8s_openapi::api::core::v1::Pod;
use kube_watcher::testing::{Fault, Match};
use kube_watcher::{Api, Client, Config, ObjectRef, Watcher};

#[test]
fn a_compact_store_answers_like_a_typed_one() {
    let server = server();
    for i in 0..5 {
        server.create(&pod("apps", &format!("p{i}"))).unwrap();
    }
    let api: Api<Pod> = Api::all(Client::from_url(&server.url()).unwrap());
    let w = Watcher::builder(api).config(Config::default().page_size(2)).compact_store().start().unwrap();
    let seen = collect_until(&w, |s| s.last().is_some_and(|e| e == "InitDone"));
    assert_eq!(seen.len(), 7, "{seen:?}");
    server.create(&pod("apps", "new")).unwrap();
    let mut p1 = server.get::<Pod>(Some("apps"), "p1").unwrap();
    p1.metadata.labels.get_or_insert_default().insert("v".into(), "2".into());
    server.replace(&p1).unwrap();
    server.delete::<Pod>(Some("apps"), "p2").unwrap();
    let seen = collect_until(&w, |s| s.iter().any(|e| e == "Delete(p2)"));
    assert_eq!(seen, ["Apply(new)", "Apply(p1)", "Delete(p2)"]);
    store_matches_server(&w, &server);
    let got = w.store().get(&ObjectRef::new("p1").within("apps")).unwrap();
    assert_eq!(*got, server.get::<Pod>(Some("apps"), "p1").unwrap(), "decoded from JSON, equal to the truth");
    let again = w.store().get(&ObjectRef::new("p1").within("apps")).unwrap();
    assert!(!Arc::ptr_eq(&got, &again), "each get decodes anew");
}

#[test]
fn a_compact_store_keeps_the_transformed_object() {
    let server = server();
    server.create(&pod("apps", "a")).unwrap();
    let api: Api<Pod> = Api::all(Client::from_url(&server.url()).unwrap());
    let w = Watcher::builder(api).transform(|p: &mut Pod| p.metadata.labels = None).compact_store().start().unwrap();
    w.store().wait_until_ready(WAIT).unwrap();
    server.create(&pod("apps", "b")).unwrap();
    eventually("b arrives", || w.store().len() == 2);
    for name in ["a", "b"] {
        let p = w.store().get(&ObjectRef::new(name).within("apps")).unwrap();
        assert!(p.metadata.labels.is_none(), "{name}");
    }
}

#[test]
fn a_compact_store_reports_deletes_missed_during_an_outage() {
    let server = server();
    for i in 0..3 {
        server.create(&pod("apps", &format!("p{i}"))).unwrap();
    }
    server.push_fault(Match::Watch, Fault::Stall);
    let api: Api<Pod> = Api::all(Client::from_url(&server.url()).unwrap());
    let config =
        Config::default().timeout(std::time::Duration::from_secs(1)).stall_timeout(std::time::Duration::from_secs(2));
    let w = Watcher::builder(api).config(config).compact_store().start().unwrap();
    collect_until(&w, |s| s.last().is_some_and(|e| e == "InitDone"));
    eventually("the stalled watch is requested", || server.requests().iter().any(|r| r.watch));
    server.delete::<Pod>(Some("apps"), "p1").unwrap();
    server.compact();
    let seen = collect_until(&w, |s| s.iter().any(|e| e == "Delete(p1)"));
    assert!(seen.iter().any(|e| e == "InitDone"), "reported by the relist: {seen:?}");
    store_matches_server(&w, &server);
}
