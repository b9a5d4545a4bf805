//! Freshness: the resourceVersion a store reflects, and waiting for one (read-your-writes),
//! against the fake server.

use crate::common;

use std::time::Instant;

use common::{WAIT, ms, paged, pod, pods};
use k8s_openapi::api::core::v1::Pod;
use kube_watcher::testing::{FakeApiServer, Fault, Match};
use kube_watcher::{Api, Client, Error, ObjectRef, Watcher};

/// The resourceVersion the server gave a write.
fn rv_of(p: &Pod) -> String {
    p.metadata.resource_version.clone().expect("the server sets a resourceVersion")
}

/// The number a resourceVersion of the fake server stands for.
fn n(rv: &str) -> u64 {
    rv.parse().expect("the fake server's versions are numbers")
}

/// A server that sends no bookmark during a test (the real server's interval), so a version
/// moves only with the events this test causes.
fn quiet_server() -> FakeApiServer {
    FakeApiServer::builder().bookmark_interval(std::time::Duration::from_secs(3600)).start()
}

#[test]
fn a_write_can_be_read_from_the_store_after_waiting_for_its_version() {
    let server = quiet_server();
    let w = Watcher::new(pods(&server), Default::default()).unwrap();
    let store = w.store();
    assert_eq!(store.resource_version(), None, "nothing listed yet");
    store.wait_until_ready(WAIT).unwrap();
    assert_eq!(store.resource_version(), Some(server.resource_version()), "the list's version");

    let key = ObjectRef::new("web").within("apps");
    let created = server.create(&pod("apps", "web")).unwrap();
    store.wait_for_version(&rv_of(&created), WAIT).unwrap();
    assert_eq!(store.get(&key).map(|p| rv_of(&p)), Some(rv_of(&created)));

    let mut changed = created.clone();
    changed.metadata.labels = Some([("tier".to_owned(), "gold".to_owned())].into());
    let replaced = server.replace(&changed).unwrap();
    store.wait_for_version(&rv_of(&replaced), WAIT).unwrap();
    let seen = store.get(&key).unwrap();
    assert_eq!(seen.metadata.labels.as_ref().and_then(|l| l.get("tier")).map(String::as_str), Some("gold"));
    assert!(n(&store.resource_version().unwrap()) >= n(&rv_of(&replaced)));

    server.delete::<Pod>(Some("apps"), "web").unwrap();
    let after_delete = server.resource_version();
    store.wait_for_version(&after_delete, WAIT).unwrap();
    assert!(store.get(&key).is_none());
    // An older version is reached already.
    store.wait_for_version(&rv_of(&created), ms(0)).unwrap();
}

#[test]
fn a_bookmark_moves_the_version_without_any_change_to_the_store() {
    let server = FakeApiServer::builder().bookmark_interval(ms(50)).start();
    let api: Api<Pod> = Api::namespaced(Client::from_url(&server.url()).unwrap(), "apps");
    let w = Watcher::new(api, Default::default()).unwrap();
    let store = w.store();
    store.wait_until_ready(WAIT).unwrap();
    let generation = store.generation();
    // A write this watcher does not see: only a bookmark can tell it the server moved on.
    let elsewhere = server.create(&pod("other", "db")).unwrap();
    store.wait_for_version(&rv_of(&elsewhere), WAIT).unwrap();
    assert!(store.is_empty());
    assert_eq!(store.generation(), generation, "nothing in the store changed");
    assert!(server.requests().iter().any(|r| r.query_param("allowWatchBookmarks") == Some("true")));
}

/// A relist in progress counts from `InitDone`: until its new state is switched in, the store
/// shows the old state and reports the old state's version.
#[test]
fn a_relist_in_progress_keeps_the_old_version_until_init_done() {
    let server = quiet_server();
    server.create(&pod("apps", "a")).unwrap();
    let w = Watcher::new(pods(&server), paged()).unwrap();
    let store = w.store();
    store.wait_until_ready(WAIT).unwrap();
    let before = store.resource_version().unwrap();

    // The watch ends, its successor gets 410, and the relist that follows waits at the gate.
    let gate = server.hold(Match::List);
    let gone = "too old resource version".to_owned();
    server.push_fault(
        Match::Watch,
        Fault::Status { code: 410, reason: "Expired".into(), message: gone, retry_after: None },
    );
    server.end_watches();
    assert!(gate.wait_until_held(WAIT), "the watcher never relisted");
    common::collect_until(&w, |seen| seen.iter().filter(|e| *e == "Init").count() == 2);
    let created = server.create(&pod("apps", "b")).unwrap();
    let rv = rv_of(&created);

    assert_eq!(store.resource_version().as_deref(), Some(before.as_str()), "the relist has not been switched in");
    match store.wait_for_version(&rv, ms(100)) {
        Err(e @ Error::VersionNotReached { .. }) => {
            let text = e.to_string();
            assert!(text.contains(&format!("\"{rv}\"")) && text.contains(&format!("\"{before}\"")), "{text}");
        }
        other => panic!("expected VersionNotReached, got {other:?}"),
    }
    assert!(store.get(&ObjectRef::new("b").within("apps")).is_none());

    gate.release();
    store.wait_for_version(&rv, WAIT).unwrap();
    assert!(store.get(&ObjectRef::new("b").within("apps")).is_some(), "the relist's state is visible with its version");
}

#[test]
fn versions_outside_the_comparable_form_are_an_error_naming_both() {
    let server = quiet_server();
    let w = Watcher::new(pods(&server), Default::default()).unwrap();
    let store = w.store();
    store.wait_until_ready(WAIT).unwrap();
    let current = store.resource_version().unwrap();
    for wanted in ["abc", "0", "007", "", "12a"] {
        match store.wait_for_version(wanted, WAIT) {
            Err(e @ Error::IncomparableVersions { .. }) => {
                let text = e.to_string();
                assert!(text.contains(&format!("\"{wanted}\"")) && text.contains(&format!("\"{current}\"")), "{text}");
                assert!(!e.is_retryable() && !e.is_terminal());
            }
            other => panic!("{wanted:?}: expected IncomparableVersions, got {other:?}"),
        }
    }
    // Equal strings are always the same version.
    store.wait_for_version(&current, ms(0)).unwrap();
}

#[test]
fn a_wait_that_runs_out_names_the_version_waited_for_and_the_stores() {
    let server = quiet_server();
    let w = Watcher::new(pods(&server), Default::default()).unwrap();
    let store = w.store();
    store.wait_until_ready(WAIT).unwrap();
    let current = store.resource_version().unwrap();
    let future = (n(&current) + 1000).to_string();
    let started = Instant::now();
    let e = store.wait_for_version(&future, ms(50)).unwrap_err();
    assert!(started.elapsed() >= ms(50));
    assert_eq!(
        e.to_string(),
        format!("store did not reach resourceVersion \"{future}\" within 50ms: it reflects \"{current}\"")
    );
}

#[test]
fn stopping_the_watcher_wakes_a_waiter_with_an_error() {
    let server = quiet_server();
    let w = Watcher::new(pods(&server), Default::default()).unwrap();
    let store = w.store();
    store.wait_until_ready(WAIT).unwrap();
    let future = (n(&server.resource_version()) + 1000).to_string();
    let (tx, rx) = crossbeam_channel::bounded(1);
    let waiter = std::thread::spawn(move || {
        let _ = tx.send(store.wait_for_version(&future, std::time::Duration::from_secs(3600)));
    });
    w.stop();
    let result = rx.recv_timeout(WAIT).expect("the waiter was not woken");
    assert!(matches!(result, Err(Error::Stopped)), "{result:?}");
    waiter.join().unwrap();
}

/// Over several namespaces each has its own watch; the store reflects a version once all of
/// them have it, and reports the oldest of theirs.
#[test]
fn over_several_namespaces_a_version_is_reached_once_every_namespace_has_it() {
    let server = quiet_server();
    let w = Watcher::builder(pods(&server)).namespaces(&["team-a", "team-b"]).start().unwrap();
    let store = w.store();
    store.wait_until_ready(WAIT).unwrap();
    let listed = n(&store.resource_version().unwrap());

    let in_a = server.create(&pod("team-a", "x")).unwrap();
    common::eventually("team-a's watch applies the write", || {
        store.get(&ObjectRef::new("x").within("team-a")).is_some()
    });
    // team-b has seen nothing since its list: the store as a whole is not at team-a's write.
    let reported = n(&store.resource_version().unwrap());
    assert!(reported >= listed && reported < n(&rv_of(&in_a)), "{reported} (listed at {listed})");
    assert!(matches!(store.wait_for_version(&rv_of(&in_a), ms(50)), Err(Error::VersionNotReached { .. })));

    let in_b = server.create(&pod("team-b", "y")).unwrap();
    store.wait_for_version(&rv_of(&in_a), WAIT).unwrap();
    assert!(matches!(store.wait_for_version(&rv_of(&in_b), ms(50)), Err(Error::VersionNotReached { .. })));
    assert_eq!(store.resource_version(), Some(rv_of(&in_a)), "the oldest namespace's version");
}
