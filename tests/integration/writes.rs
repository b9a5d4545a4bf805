//! `Api::create`, `replace` and `delete`: JSON writes, the optimistic-concurrency 409, and errors
//! worded as for reads.
#![cfg(feature = "testing")]

use crate::common;

use common::*;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube_watcher::testing::FakeApiServer;
use kube_watcher::{Api, Client, Config, Watcher};

fn leases(server: &FakeApiServer, ns: &str) -> Api<Lease> {
    Api::namespaced(Client::from_url(&server.url()).unwrap(), ns)
}

fn lease(name: &str, holder: &str) -> Lease {
    let mut l = Lease::default();
    l.metadata.name = Some(name.into());
    l.spec = Some(LeaseSpec {
        holder_identity: Some(holder.into()),
        lease_duration_seconds: Some(15),
        renew_time: Some(MicroTime("2026-11-26T23:59:01.123456Z".parse().unwrap())),
        lease_transitions: Some(0),
        ..LeaseSpec::default()
    });
    l
}

fn holder(l: &Lease) -> Option<&str> {
    l.spec.as_ref()?.holder_identity.as_deref()
}

#[test]
fn create_replace_and_delete_round_trip_a_lease() {
    let server = FakeApiServer::start();
    let api = leases(&server, "apps");
    let created = api.create(&lease("lock", "a")).unwrap();
    let rv = created.metadata.resource_version.clone().unwrap();
    assert!(created.metadata.uid.is_some());
    assert_eq!(created.metadata.namespace.as_deref(), Some("apps"));
    assert_eq!(holder(&created), Some("a"));
    // MicroTime keeps its microseconds through the server and back.
    let renew = created.spec.as_ref().unwrap().renew_time.clone().unwrap();
    assert_eq!(renew.0.to_string(), "2026-11-26T23:59:01.123456Z");

    let mut next = created.clone();
    next.spec.as_mut().unwrap().holder_identity = Some("b".into());
    let replaced = api.replace(&next).unwrap();
    assert_eq!(holder(&replaced), Some("b"));
    assert_ne!(replaced.metadata.resource_version.as_deref(), Some(rv.as_str()));
    assert_eq!(holder(&api.get("lock").unwrap()), Some("b"));
    assert_eq!(holder(&server.get::<Lease>(Some("apps"), "lock").unwrap()), Some("b"));

    api.delete("lock").unwrap();
    assert!(api.get("lock").unwrap_err().is_not_found());
    assert!(server.get::<Lease>(Some("apps"), "lock").is_none());
}

/// Two writers read the same version; the second to write is refused with a recognisable 409,
/// and the object holds the first one's change.
#[test]
fn a_replace_from_a_stale_read_is_a_conflict_and_changes_nothing() {
    let server = FakeApiServer::start();
    let api = leases(&server, "apps");
    let read = api.create(&lease("lock", "a")).unwrap();
    let (mut first, mut second) = (read.clone(), read);
    first.spec.as_mut().unwrap().holder_identity = Some("first".into());
    second.spec.as_mut().unwrap().holder_identity = Some("second".into());
    api.replace(&first).unwrap();
    let e = api.replace(&second).unwrap_err();
    assert!(e.is_conflict(), "{e}");
    assert!(!e.is_already_exists() && !e.is_retryable());
    assert_eq!(e.status(), Some(409));
    let text = e.to_string();
    assert!(text.starts_with("replace leases \"lock\" in namespace \"apps\": HTTP 409 Conflict: "), "{text}");
    assert!(text.contains("the object has been modified"), "{text}");
    assert_eq!(holder(&api.get("lock").unwrap()), Some("first"));
}

#[test]
fn writes_name_what_failed_as_reads_do() {
    let server = FakeApiServer::start();
    let api = leases(&server, "apps");
    api.create(&lease("lock", "a")).unwrap();
    let e = api.create(&lease("lock", "b")).unwrap_err();
    assert!(e.is_already_exists() && !e.is_conflict(), "{e}");
    assert!(e.to_string().starts_with("create leases \"lock\" in namespace \"apps\": HTTP 409 AlreadyExists: "), "{e}");

    // (A replace of a missing Lease creates it: a_replace_of_a_missing_lease_creates_it_…)
    let config_maps: Api<ConfigMap> = Api::namespaced(Client::from_url(&server.url()).unwrap(), "apps");
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some("missing".into());
    let e = config_maps.replace(&cm).unwrap_err();
    assert!(e.is_not_found(), "{e}");
    assert!(
        e.to_string().starts_with("replace configmaps \"missing\" in namespace \"apps\": HTTP 404 NotFound"),
        "{e}"
    );
    let e = api.delete("missing").unwrap_err();
    assert!(e.is_not_found(), "{e}");
    assert!(e.to_string().starts_with("delete leases \"missing\" in namespace \"apps\": HTTP 404"), "{e}");

    let e = api.replace(&Lease::default()).unwrap_err();
    assert!(e.to_string().contains("metadata.name"), "{e}");

    // Nobody listening: a transport error naming the host and port, as for reads.
    let addr = server.addr();
    drop(server);
    let e = api.create(&lease("other", "a")).unwrap_err();
    assert_eq!(e.status(), None);
    assert!(e.is_retryable(), "{e}");
    assert!(e.to_string().contains(&addr.port().to_string()), "{e}");
}

/// Writes go through the same typed path for any `K`, and a watcher sees them.
#[test]
fn a_watcher_sees_config_maps_written_through_the_api() {
    let server = FakeApiServer::start();
    let api: Api<ConfigMap> = Api::namespaced(Client::from_url(&server.url()).unwrap(), "apps");
    let w = Watcher::new(api.clone(), Config::default()).unwrap();
    collect_until(&w, |seen| seen.last().is_some_and(|s| s == "InitDone"));
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some("settings".into());
    cm.data = Some([("mode".to_owned(), "fast".to_owned())].into());
    let created = api.create(&cm).unwrap();
    let mut changed = created.clone();
    changed.data = Some([("mode".to_owned(), "slow".to_owned())].into());
    api.replace(&changed).unwrap();
    api.delete("settings").unwrap();
    let seen = collect_until(&w, |seen| seen.iter().any(|s| s.starts_with("Delete")));
    assert!(
        seen.ends_with(&["Apply(settings)".into(), "Apply(settings)".into(), "Delete(settings)".into()]),
        "{seen:?}"
    );
}

/// A replace without a resourceVersion is last-writer-wins for most types; Leases refuse it,
/// as the real server's Lease strategy does.
#[test]
fn a_replace_without_a_resource_version_is_refused_for_leases_only() {
    let server = FakeApiServer::start();
    let api = leases(&server, "apps");
    api.create(&lease("lock", "a")).unwrap();
    let mut blind = lease("lock", "b");
    blind.metadata.resource_version = None;
    let e = api.replace(&blind).unwrap_err();
    assert_eq!(e.status(), Some(422), "{e}");
    assert!(e.to_string().contains("metadata.resourceVersion"), "{e}");
    assert_eq!(holder(&api.get("lock").unwrap()), Some("a"));

    let config_maps: Api<ConfigMap> = Api::namespaced(Client::from_url(&server.url()).unwrap(), "apps");
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some("settings".into());
    config_maps.create(&cm).unwrap();
    cm.data = Some([("mode".to_owned(), "fast".to_owned())].into());
    assert_eq!(config_maps.replace(&cm).unwrap().data, cm.data);
}

/// A PUT to a Lease that does not exist creates it, as the real server's Lease strategy allows
/// (whatever resourceVersion the body carries), unless the body names a uid: then it is the
/// update of an object that is gone, a 409. Other types answer 404.
#[test]
fn a_replace_of_a_missing_lease_creates_it_and_of_anything_else_is_not_found() {
    let server = FakeApiServer::start();
    let api = leases(&server, "apps");
    let mut fresh = lease("fresh", "a");
    fresh.metadata.resource_version = Some("9999".into());
    let created = api.replace(&fresh).unwrap();
    assert_eq!(holder(&created), Some("a"));
    assert!(created.metadata.uid.is_some(), "{created:?}");
    let rv = created.metadata.resource_version.clone().unwrap();
    assert_ne!(rv, "9999", "the body's resourceVersion is not kept");
    assert_eq!(api.get("fresh").unwrap().metadata.resource_version, Some(rv));

    // The last copy of a Lease deleted since: its uid is a precondition nothing meets.
    api.delete("fresh").unwrap();
    let e = api.replace(&created).unwrap_err();
    assert!(e.is_conflict(), "{e}");
    assert!(e.to_string().contains("Precondition failed: UID in precondition"), "{e}");
    assert!(api.get("fresh").unwrap_err().is_not_found());

    let config_maps: Api<ConfigMap> = Api::namespaced(Client::from_url(&server.url()).unwrap(), "apps");
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some("settings".into());
    let e = config_maps.replace(&cm).unwrap_err();
    assert!(e.is_not_found(), "{e}");
}

/// A user's own struct for a custom resource, without `apiVersion` and `kind` fields.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
struct Widget {
    metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    #[serde(default)]
    size: i64,
}

kube_watcher::resource!(Widget, group = "example.com", version = "v1", kind = "Widget", plural = "widgets", namespaced);

/// kube-apiserver refuses a custom resource's body without `kind` (400, "Object 'Kind' is
/// missing", tests/real/resources.rs), while built-in types may leave it out. A typed struct of
/// the user's own need not carry it: writes say what the `Api` addresses.
#[test]
fn writes_of_a_struct_without_type_fields_say_their_kind() {
    let server = FakeApiServer::start();
    server.register(kube_watcher::testing::ResourceType::new("example.com", "v1", "widgets", "Widget", true));
    let api: Api<Widget> = Api::namespaced(Client::from_url(&server.url()).unwrap(), "shop");
    let mut w = Widget { size: 3, ..Widget::default() };
    w.metadata.name = Some("first".into());
    let created = api.create(&w).unwrap();
    assert_eq!(created.size, 3);
    let mut bigger = created;
    bigger.size = 4;
    assert_eq!(api.replace(&bigger).unwrap().size, 4);
    // What the server says to a client that does not (raw, as kube-apiserver words it).
    let refused = ureq_post(&server, "/apis/example.com/v1/namespaces/shop/widgets", r#"{"metadata":{"name":"x"}}"#);
    assert_eq!(refused.0, 400);
    assert!(refused.1.contains(r#"the object provided is unrecognized (must be of type Widget): Object 'Kind' is missing in '{\"metadata\":{\"name\":\"x\"}}'"#), "{}", refused.1);
}

/// A raw JSON POST: (status, body).
fn ureq_post(server: &FakeApiServer, path: &str, body: &str) -> (u16, String) {
    let agent: ureq::Agent = ureq::Agent::config_builder().http_status_as_error(false).build().into();
    let mut resp =
        agent.post(&format!("{}{path}", server.url())).header("content-type", "application/json").send(body).unwrap();
    (resp.status().as_u16(), resp.body_mut().read_to_string().unwrap())
}
