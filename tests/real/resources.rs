//! What is watched on the real server: built-in types over protobuf, a custom resource (made
//! through the API) over JSON as `DynamicObject` and as a typed struct, metadata-only watchers,
//! aggregated discovery, and managedFields that server-side apply wrote.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube_watcher::{
    Api, ApiResource, Config, DynamicObject, ListParams, ObjectRef, PartialObjectMetadata, Watcher, WireFormat,
    metadata_watcher,
};
use serde::{Deserialize, Serialize};

use crate::bed::{Bed, same_as_server, until};
use crate::common::{WAIT, collect_until};
use crate::lists::config_map;

const CRD: &str = "apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.testbed.kube-watcher.dev}
spec:
  group: testbed.kube-watcher.dev
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, shortNames: [wd]}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size: {type: integer}
              color: {type: string}
";

/// The custom resource as a user's own typed struct.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Widget {
    metadata: ObjectMeta,
    #[serde(default)]
    spec: WidgetSpec,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct WidgetSpec {
    #[serde(default)]
    size: i64,
    #[serde(default)]
    color: String,
}

kube_watcher::resource!(
    Widget,
    group = "testbed.kube-watcher.dev",
    version = "v1",
    kind = "Widget",
    plural = "widgets",
    namespaced
);

/// Creates the Widget CRD (once per bed) and waits until the server serves it.
pub fn widgets(bed: &Bed) {
    bed.kubectl_ok(&["apply", "-f", "-"], Some(CRD));
    bed.kubectl_ok(
        &["wait", "--for=condition=Established", "--timeout=60s", "crd/widgets.testbed.kube-watcher.dev"],
        None,
    );
}

#[test]
fn built_in_types_come_as_protobuf() {
    let Some(bed) = Bed::shared() else { return };
    let ns = bed.namespace("proto");
    let api: Api<ConfigMap> = Api::namespaced(bed.client(), &ns);
    api.create(&config_map(&ns, "a", "1")).unwrap();
    for (format, name) in [(None, "b-default"), (Some(WireFormat::Json), "b-json")] {
        let config = match format {
            Some(f) => Config::default().wire_format(f),
            None => Config::default(),
        };
        // With managedFields (skipped by default), so that the whole object is compared.
        let watcher = Watcher::builder(api.clone()).config(config).with_managed_fields().start().unwrap();
        watcher.receiver(); // a consumer from the start: every event, not a replay of the store
        watcher.store().wait_until_ready(WAIT).unwrap();
        assert_eq!(watcher.stats().wire_format, Some(format.unwrap_or(WireFormat::Protobuf)));
        api.create(&config_map(&ns, name, "1")).unwrap();
        same_as_server(&watcher.store(), &api, &ListParams::default());
        // The decoded objects are the same whichever format carried them.
        let json: ConfigMap = api.get("a").unwrap();
        let cached = watcher.store().get(&ObjectRef::new("a").within(&ns)).unwrap();
        assert_eq!(*cached, json);
    }
}

#[test]
fn a_custom_resource_is_watched_as_json_both_dynamic_and_typed() {
    let Some(bed) = Bed::shared() else { return };
    widgets(&bed);
    let ns = bed.namespace("crd");
    let client = bed.client();
    // Found by discovery under its short name, as kubectl finds it.
    let resource = client.discover("wd").unwrap();
    assert_eq!(
        (resource.group.as_str(), resource.version.as_str(), resource.kind.as_str(), resource.plural.as_str()),
        ("testbed.kube-watcher.dev", "v1", "Widget", "widgets")
    );
    assert!(resource.namespaced);
    let dynamic: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &resource);
    let typed: Api<Widget> = Api::namespaced(client.clone(), &ns);
    let mut w = Widget::default();
    w.metadata.name = Some("first".into());
    w.spec = WidgetSpec { size: 3, color: "red".into() };
    typed.create(&w).unwrap();

    let d = Watcher::new(dynamic.clone(), Config::default()).unwrap();
    d.receiver(); // a consumer from the start: every event, not a replay of the store
    let t = Watcher::new(typed.clone(), Config::default()).unwrap();
    t.receiver(); // a consumer from the start: every event, not a replay of the store
    d.store().wait_until_ready(WAIT).unwrap();
    t.store().wait_until_ready(WAIT).unwrap();
    assert_eq!(d.stats().wire_format, Some(WireFormat::Json));
    assert_eq!(t.stats().wire_format, Some(WireFormat::Json), "no protobuf form for a custom resource");
    w.metadata.name = Some("second".into());
    w.spec.size = 5;
    typed.create(&w).unwrap();
    collect_until(&t, |seen| seen.iter().any(|e| e == "Apply(second)"));
    collect_until(&d, |seen| seen.iter().any(|e| e == "Apply(second)"));
    let second = t.store().get(&ObjectRef::new("second").within(&ns)).unwrap();
    assert_eq!((second.spec.size, second.spec.color.as_str()), (5, "red"));
    let raw = d.store().get(&ObjectRef::new("second").within(&ns)).unwrap();
    assert_eq!(raw.data["spec"]["size"], 5);
    assert_eq!(raw.types.as_ref().map(|t| t.kind.as_str()), Some("Widget"));
    same_as_server(&t.store(), &typed, &ListParams::default());
    same_as_server(&d.store(), &dynamic, &ListParams::default());
}

#[test]
fn metadata_watchers_hold_metadata_only() {
    let Some(bed) = Bed::shared() else { return };
    let ns = bed.namespace("meta");
    let api: Api<ConfigMap> = Api::namespaced(bed.client(), &ns);
    for i in 0..3 {
        api.create(&config_map(&ns, &format!("cm-{i}"), "some data")).unwrap();
    }
    let watcher = metadata_watcher(api.clone(), Config::default()).unwrap();
    watcher.store().wait_until_ready(WAIT).unwrap();
    assert_eq!(watcher.stats().wire_format, Some(WireFormat::Protobuf));
    api.create(&config_map(&ns, "cm-3", "x")).unwrap();
    api.delete("cm-0").unwrap();
    until("the delete arrives", || watcher.store().get(&ObjectRef::new("cm-0").within(&ns)).is_none());
    let meta: Api<PartialObjectMetadata<ConfigMap>> = api.clone().into_metadata();
    same_as_server(&watcher.store(), &meta, &ListParams::default());
    let one = watcher.store().get(&ObjectRef::new("cm-1").within(&ns)).unwrap();
    assert_eq!(one.metadata.labels.as_ref().unwrap()["app"], "web");
}

#[test]
fn discovery_finds_built_in_types_by_every_name_kubectl_takes() {
    let Some(bed) = Bed::shared() else { return };
    let client = bed.client();
    for name in ["deploy", "deployments", "deployment", "Deployment", "deployments.apps", "deployments.v1.apps"] {
        let found = client.discover(name).unwrap();
        assert_eq!(found, ApiResource::of::<Deployment>(), "{name}");
    }
    assert_eq!(client.discover("po").unwrap().plural, "pods");
    assert_eq!(client.discover("leases").unwrap().group, "coordination.k8s.io");
    let e = client.discover("deploymnets").unwrap_err();
    assert_eq!(e.status(), Some(404), "{e}");
    assert!(e.to_string().contains("deployments"), "a suggestion: {e}");
}

#[test]
fn managed_fields_of_a_server_side_apply_are_never_held() {
    let Some(bed) = Bed::shared() else { return };
    let ns = bed.namespace("ssa");
    for i in 0..3 {
        let manifest = format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: cm-{i}, namespace: {ns}, labels: {{app: web}}}}\ndata: {{k: v}}\n"
        );
        bed.kubectl_ok(&["apply", "--server-side", "--field-manager=testbed", "-f", "-"], Some(&manifest));
    }
    let api: Api<ConfigMap> = Api::namespaced(bed.client(), &ns);
    let listed = api.get("cm-0").unwrap();
    let managers = listed.metadata.managed_fields.as_ref().expect("server-side apply records its fields");
    assert_eq!(managers[0].manager.as_deref(), Some("testbed"));
    assert_eq!(managers[0].operation.as_deref(), Some("Apply"));
    for format in [WireFormat::Protobuf, WireFormat::Json] {
        let watcher = Watcher::builder(api.clone())
            .config(Config::default().wire_format(format))
            .without_managed_fields()
            .start()
            .unwrap();
        watcher.store().wait_until_ready(WAIT).unwrap();
        let label = format!("seen-{format:?}").to_lowercase();
        bed.kubectl_ok(&["-n", &ns, "label", "configmap", "cm-1", &format!("{label}=yes")], None);
        until("the label's change arrives", || {
            let cm = watcher.store().get(&ObjectRef::new("cm-1").within(&ns)).unwrap();
            cm.metadata.labels.as_ref().is_some_and(|l| l.contains_key(&label))
        });
        for cm in watcher.store().state() {
            assert!(cm.metadata.managed_fields.is_none(), "{format:?}: {:?}", cm.metadata);
            assert_eq!(cm.data.as_ref().unwrap()["k"], "v");
        }
        same_as_server(&watcher.store(), &api, &ListParams::default());
    }
}
