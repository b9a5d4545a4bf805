//! `watch_object`: one named object as `Option<Arc<K>>` updates.
#![cfg(feature = "testing")]

use crate::common;

use common::*;
use k8s_openapi::api::core::v1::Pod;
use kube_watcher::testing::{Fault, Match};
use kube_watcher::{Api, Client, ObjectWatcher, watch_object};

/// The next update's resourceVersion. Non-terminal errors (a watch the test ended may report
/// "ended at once") are skipped: they are retried, and what follows is what the test checks.
fn next(w: &ObjectWatcher<Pod>) -> Option<String> {
    loop {
        match w.recv_timeout(WAIT).expect("an update in time") {
            Ok(update) => return update.map(|p| p.metadata.resource_version.clone().unwrap_or_default()),
            Err(e) => assert!(!e.is_terminal(), "{e}"),
        }
    }
}

fn client(server: &kube_watcher::testing::FakeApiServer) -> Client {
    Client::from_url(&server.url()).unwrap()
}

#[test]
fn a_missing_object_is_none_then_follows_create_change_and_delete() {
    let server = server();
    server.create(&pod("apps", "other")).unwrap();
    let w = watch_object(Api::<Pod>::namespaced(client(&server), "apps"), "web").unwrap();
    assert_eq!(next(&w), None, "not there: None once the list is done");
    let created = server.create(&pod("apps", "web")).unwrap();
    assert_eq!(next(&w), created.metadata.resource_version);
    let changed = server.replace(&labelled(created, "v", "2")).unwrap();
    assert_eq!(next(&w), changed.metadata.resource_version);
    assert_eq!(w.get().unwrap().metadata.labels.as_ref().unwrap()["v"], "2");
    server.create(&pod("apps", "unrelated")).unwrap();
    server.delete::<Pod>(Some("apps"), "web").unwrap();
    assert_eq!(next(&w), None, "deleted; the unrelated pod never showed up");
    assert!(w.get().is_none());
    let watch = server.requests().into_iter().find(|r| r.watch).unwrap();
    assert_eq!(watch.query_param("fieldSelector"), Some("metadata.name=web"));
    w.stop();
    assert!(w.recv().is_none(), "ends after stop");
}

#[test]
fn an_object_present_at_start_is_the_first_update_and_a_relist_repeats_nothing() {
    let server = server();
    let web = server.create(&pod("apps", "web")).unwrap();
    let w = watch_object(Api::<Pod>::namespaced(client(&server), "apps"), "web").unwrap();
    assert_eq!(next(&w), web.metadata.resource_version);
    // Break the watch with a 410: the relist finds the same object and delivers nothing new.
    // Lists (a streaming list is a watch that asks for the initial events) are counted first:
    // the relist may come before this thread looks again.
    let lists = || {
        let streaming = |r: &kube_watcher::testing::RecordedRequest| r.query_param("sendInitialEvents") == Some("true");
        server.requests().iter().filter(|r| !r.watch || streaming(r)).count()
    };
    let lists_before = lists();
    server.push_fault(
        Match::Watch,
        Fault::Status { code: 410, reason: "Expired".into(), message: "too old".into(), retry_after: None },
    );
    server.end_watches();
    eventually("a relist happens", || lists() > lists_before);
    let changed = server.replace(&labelled(web, "v", "2")).unwrap();
    assert_eq!(next(&w), changed.metadata.resource_version, "the next update is the change, not a repeat");
}

#[test]
fn the_same_name_in_two_namespaces_is_an_error_that_ends_the_watch() {
    let server = server();
    server.create(&pod("apps", "web")).unwrap();
    server.create(&pod("other", "web")).unwrap();
    let w = watch_object(Api::<Pod>::all(client(&server)), "web").unwrap();
    let err = w.recv_timeout(WAIT).unwrap().unwrap_err();
    let text = err.to_string();
    assert!(text.contains("2 objects") && text.contains("apps/web") && text.contains("other/web"), "{text}");
    assert!(err.is_terminal(), "{err}");
    assert!(w.recv().is_none(), "the watch ended");
}
