//! Projections: a user's own struct that names the resource it stands for and keeps only the
//! fields it reads, watched from protobuf and JSON alike.
#![cfg(feature = "testing")]

use crate::common;

use common::*;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube_watcher::{Api, Client, Config, ObjectRef, Watcher, WireFormat};
use serde::Deserialize;

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
struct PodView {
    metadata: ObjectMeta,
    #[serde(default)]
    spec: Option<SpecView>,
    #[serde(default)]
    status: Option<StatusView>,
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
struct SpecView {
    node_name: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
struct StatusView {
    phase: Option<String>,
    #[serde(rename = "podIP")]
    pod_ip: Option<String>,
}

kube_watcher::resource!(PodView, group = "", version = "v1", kind = "Pod", plural = "pods", namespaced);

#[test]
fn a_projection_holds_the_fields_of_the_full_type() {
    let server = server();
    for i in 0..5 {
        let mut p = pod("apps", &format!("p{i}"));
        p.spec = Some(k8s_openapi::api::core::v1::PodSpec {
            node_name: Some(format!("node-{}", i % 2)),
            ..Default::default()
        });
        p.status = Some(k8s_openapi::api::core::v1::PodStatus {
            phase: Some("Running".into()),
            pod_ip: Some(format!("10.0.0.{i}")),
            ..Default::default()
        });
        server.create(&p).unwrap();
    }
    let client = Client::from_url(&server.url()).unwrap();
    for format in [WireFormat::Protobuf, WireFormat::Json] {
        let full = Watcher::new(Api::<Pod>::namespaced(client.clone(), "apps"), Config::default().wire_format(format))
            .unwrap();
        let view =
            Watcher::new(Api::<PodView>::namespaced(client.clone(), "apps"), Config::default().wire_format(format))
                .unwrap();
        full.store().wait_until_ready(WAIT).unwrap();
        view.store().wait_until_ready(WAIT).unwrap();
        assert_eq!(view.stats().wire_format, Some(format));
        for p in full.store().state() {
            let (name, ns) = (p.metadata.name.as_deref().unwrap(), p.metadata.namespace.as_deref().unwrap());
            let v = view.store().get(&ObjectRef::new(name).within(ns)).unwrap();
            assert_eq!(v.metadata, p.metadata, "{format:?}");
            assert_eq!(v.spec.as_ref().unwrap().node_name, p.spec.as_ref().unwrap().node_name);
            let (vs, ps) = (v.status.as_ref().unwrap(), p.status.as_ref().unwrap());
            assert_eq!((&vs.phase, &vs.pod_ip), (&ps.phase, &ps.pod_ip), "{format:?}");
        }
    }
}
