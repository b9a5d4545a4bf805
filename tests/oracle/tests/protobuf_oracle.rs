//! The protobuf decoder against an encoder we did not write: k8s-pb's prost types, generated from
//! the same upstream `.proto` files. Each object is built (or randomized) once as data, written
//! both as a k8s-pb message (encoded by prost, wrapped in the `runtime.Unknown` envelope by prost
//! too) and as the JSON the API server would send for it; the protobuf decode must equal the JSON
//! decode into the same k8s-openapi type.
//!
//! The objects are written as Go's encoder writes them: fields that are not pointers in Go are
//! sent even when zero (an empty `generateName`, a zero `hostPort`), and JSON leaves those out
//! where Go's `omitempty` does. A field that k8s-pb's (older) protos do not have is simply not
//! tested here; src/codec/protobuf/tests.rs covers the decoder's rules field by field.

use std::collections::BTreeMap;
use std::fmt::Debug;

use k8s_openapi::{List, ListableResource, Resource};
use k8s_pb::api::apps::v1 as apps;
use k8s_pb::api::core::v1 as core;
use k8s_pb::apimachinery::pkg::api::resource::Quantity;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_pb::apimachinery::pkg::runtime::{RawExtension, TypeMeta, Unknown};
use k8s_pb::apimachinery::pkg::util::intstr::IntOrString;
use kube_watcher::fuzzing;
use prost::Message;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

#[path = "../../../benches/support/realistic_pod.rs"]
mod realistic_pod;
#[path = "../../../benches/support/varied_pod.rs"]
#[allow(dead_code)]
mod varied_pod;

fn s(text: &str) -> Option<String> {
    Some(text.to_string())
}

/// `k8s\0` and the envelope, both written by prost.
fn envelope(api_version: &str, kind: &str, message: &impl Message) -> Vec<u8> {
    let unknown = Unknown {
        type_meta: Some(TypeMeta { api_version: s(api_version), kind: s(kind) }),
        raw: Some(message.encode_to_vec()),
        content_encoding: s(""),
        content_type: s(""),
    };
    let mut body = b"k8s\0".to_vec();
    body.extend(unknown.encode_to_vec());
    body
}

/// The protobuf decode of `message` equals the JSON decode of `json` (apiVersion and kind added).
fn agree<K: DeserializeOwned + PartialEq + Debug>(api_version: &str, kind: &str, message: &impl Message, json: Value) {
    let body = envelope(api_version, kind, message);
    let got: K = fuzzing::protobuf_decode(&body).unwrap_or_else(|e| panic!("{kind}: {e}"));
    let mut json = json;
    json["apiVersion"] = json!(api_version);
    json["kind"] = json!(kind);
    let expected: K = serde_json::from_value(json.clone()).unwrap_or_else(|e| panic!("{kind}: {e}: {json}"));
    assert_eq!(got, expected, "{kind}");
    // The same body through serde_json::Value first gives the same object.
    assert!(fuzzing::protobuf_object::<K>(&body).is_ok());
}

fn agree_kind<K: Resource + DeserializeOwned + PartialEq + Debug>(message: &impl Message, json: Value) {
    agree::<K>(K::API_VERSION, K::KIND, message, json);
}

/// A list of `items`, each given as (message, JSON).
fn agree_list<K>(
    items: Vec<(impl Message + Default + Clone, Value)>,
    wrap: impl Fn(meta::ListMeta, Vec<Vec<u8>>) -> Vec<u8>,
) where
    K: ListableResource + DeserializeOwned + PartialEq + Debug,
{
    let list_meta = meta::ListMeta {
        self_link: s(""),
        resource_version: s("4242"),
        r#continue: s("eyJ2IjoibWV0YS5rOHMuaW8vdjEifQ"),
        remaining_item_count: Some(7),
    };
    let raw_items: Vec<Vec<u8>> = items.iter().map(|(m, _)| m.encode_to_vec()).collect();
    let list_bytes = wrap(list_meta, raw_items);
    let unknown = Unknown {
        type_meta: Some(TypeMeta { api_version: s(K::API_VERSION), kind: s(K::LIST_KIND) }),
        raw: Some(list_bytes),
        content_encoding: s(""),
        content_type: s(""),
    };
    let mut body = b"k8s\0".to_vec();
    body.extend(unknown.encode_to_vec());
    let got: List<K> = fuzzing::protobuf_decode(&body).unwrap_or_else(|e| panic!("{}: {e}", K::LIST_KIND));
    let json = json!({
        "apiVersion": K::API_VERSION, "kind": K::LIST_KIND,
        "metadata": {"resourceVersion": "4242", "continue": "eyJ2IjoibWV0YS5rOHMuaW8vdjEifQ", "remainingItemCount": 7},
        "items": items.iter().map(|(_, j)| j.clone()).collect::<Vec<_>>(),
    });
    let expected: List<K> = serde_json::from_value(json).unwrap();
    assert_eq!(got, expected, "{}", K::LIST_KIND);
}

/// Re-encodes a list message from its parts with prost: every list kind is `1 metadata, 2 items`.
#[derive(Clone, PartialEq, Message)]
struct AnyList {
    #[prost(message, optional, tag = "1")]
    metadata: Option<meta::ListMeta>,
    #[prost(bytes = "vec", repeated, tag = "2")]
    items: Vec<Vec<u8>>,
}

fn any_list(metadata: meta::ListMeta, items: Vec<Vec<u8>>) -> Vec<u8> {
    AnyList { metadata: Some(metadata), items }.encode_to_vec()
}

fn time(seconds: i64) -> Option<meta::Time> {
    Some(meta::Time { seconds: Some(seconds), nanos: Some(0) })
}

fn quantities(pairs: &[(&str, &str)]) -> BTreeMap<String, Quantity> {
    pairs.iter().map(|(k, v)| (k.to_string(), Quantity { string: s(v) })).collect()
}

/// Object metadata as Go sends it: every non-pointer field, zero or not.
fn object_meta(name: &str, namespace: &str) -> meta::ObjectMeta {
    meta::ObjectMeta {
        name: s(name),
        generate_name: s(""),
        namespace: s(namespace),
        self_link: s(""),
        uid: s("6f1c1b1e-8a8e-4a8b-9c52-0d7d8a1f2b3c"),
        resource_version: s("123"),
        generation: Some(0),
        creation_timestamp: time(1_700_000_000),
        deletion_timestamp: None,
        deletion_grace_period_seconds: None,
        labels: [("app".to_string(), "web".to_string()), ("tier".to_string(), "ünïcode ✓".to_string())].into(),
        annotations: [("empty".to_string(), String::new())].into(),
        owner_references: vec![meta::OwnerReference {
            api_version: s("apps/v1"),
            kind: s("ReplicaSet"),
            name: s("web-5d4f"),
            uid: s("0a0b"),
            controller: Some(true),
            block_owner_deletion: Some(false),
        }],
        finalizers: vec!["example.com/keep".into()],
        managed_fields: vec![meta::ManagedFieldsEntry {
            manager: s("kubectl"),
            operation: s("Update"),
            api_version: s("v1"),
            time: time(1_700_000_100),
            fields_type: s("FieldsV1"),
            fields_v1: Some(meta::FieldsV1 { raw: Some(br#"{"f:metadata":{"f:labels":{".":{}}}}"#.to_vec()) }),
            subresource: s(""),
        }],
    }
}

fn object_meta_json(name: &str, namespace: &str) -> Value {
    let mut v = json!({
        "name": name,
        "uid": "6f1c1b1e-8a8e-4a8b-9c52-0d7d8a1f2b3c",
        "resourceVersion": "123",
        "creationTimestamp": "2023-11-14T22:13:20Z",
        "labels": {"app": "web", "tier": "ünïcode ✓"},
        "annotations": {"empty": ""},
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-5d4f", "uid": "0a0b",
                             "controller": true, "blockOwnerDeletion": false}],
        "finalizers": ["example.com/keep"],
        "managedFields": [{"manager": "kubectl", "operation": "Update", "apiVersion": "v1",
                           "time": "2023-11-14T22:15:00Z", "fieldsType": "FieldsV1",
                           "fieldsV1": {"f:metadata": {"f:labels": {".": {}}}}}],
    });
    if !namespace.is_empty() {
        v["namespace"] = json!(namespace);
    }
    v
}

fn pod(name: &str) -> (core::Pod, Value) {
    let container = core::Container {
        name: s("app"),
        image: s("registry.example/app:1.2"),
        command: vec!["/bin/app".into()],
        args: vec!["--port=8080".into(), String::new()],
        working_dir: s(""),
        ports: vec![core::ContainerPort {
            name: s("http"),
            host_port: Some(0),
            container_port: Some(8080),
            protocol: s("TCP"),
            host_ip: s(""),
        }],
        env: vec![
            core::EnvVar { name: s("MODE"), value: s("prod"), value_from: None },
            core::EnvVar { name: s("EMPTY"), value: s(""), value_from: None },
            core::EnvVar {
                name: s("CM"),
                value: s(""),
                value_from: Some(core::EnvVarSource {
                    config_map_key_ref: Some(core::ConfigMapKeySelector {
                        local_object_reference: Some(core::LocalObjectReference { name: s("settings") }),
                        key: s("mode"),
                        optional: Some(false),
                    }),
                    ..Default::default()
                }),
            },
        ],
        resources: Some(core::ResourceRequirements {
            limits: quantities(&[("memory", "128Mi")]),
            requests: quantities(&[("cpu", "250m"), ("memory", "64Mi")]),
            claims: vec![],
        }),
        liveness_probe: Some(core::Probe {
            handler: Some(core::ProbeHandler {
                http_get: Some(core::HttpGetAction {
                    path: s("/healthz"),
                    port: Some(IntOrString { r#type: Some(1), int_val: Some(0), str_val: s("http") }),
                    host: s(""),
                    scheme: s("HTTP"),
                    http_headers: vec![],
                }),
                ..Default::default()
            }),
            initial_delay_seconds: Some(0),
            timeout_seconds: Some(1),
            period_seconds: Some(10),
            success_threshold: Some(1),
            failure_threshold: Some(3),
            termination_grace_period_seconds: None,
        }),
        readiness_probe: Some(core::Probe {
            handler: Some(core::ProbeHandler {
                tcp_socket: Some(core::TcpSocketAction {
                    port: Some(IntOrString { r#type: Some(0), int_val: Some(8080), str_val: s("") }),
                    host: s(""),
                }),
                ..Default::default()
            }),
            period_seconds: Some(5),
            ..Default::default()
        }),
        termination_message_path: s("/dev/termination-log"),
        termination_message_policy: s("File"),
        image_pull_policy: s("IfNotPresent"),
        security_context: Some(core::SecurityContext {
            run_as_user: Some(0),
            run_as_non_root: Some(false),
            read_only_root_filesystem: Some(true),
            capabilities: Some(core::Capabilities { add: vec![], drop: vec!["ALL".into()] }),
            ..Default::default()
        }),
        stdin: Some(false),
        stdin_once: Some(false),
        tty: Some(false),
        volume_mounts: vec![core::VolumeMount {
            name: s("config"),
            read_only: Some(true),
            mount_path: s("/etc/app"),
            sub_path: s(""),
            ..Default::default()
        }],
        ..Default::default()
    };
    let spec = core::PodSpec {
        volumes: vec![
            core::Volume {
                name: s("config"),
                volume_source: Some(core::VolumeSource {
                    config_map: Some(core::ConfigMapVolumeSource {
                        local_object_reference: Some(core::LocalObjectReference { name: s("settings") }),
                        items: vec![core::KeyToPath { key: s("a"), path: s("a.conf"), mode: Some(0o400) }],
                        default_mode: Some(0o644),
                        optional: None,
                    }),
                    ..Default::default()
                }),
            },
            core::Volume {
                name: s("scratch"),
                volume_source: Some(core::VolumeSource {
                    empty_dir: Some(core::EmptyDirVolumeSource {
                        medium: s(""),
                        size_limit: Some(Quantity { string: s("1Gi") }),
                    }),
                    ..Default::default()
                }),
            },
        ],
        containers: vec![container],
        restart_policy: s("Always"),
        termination_grace_period_seconds: Some(30),
        dns_policy: s("ClusterFirst"),
        node_selector: [("kubernetes.io/os".to_string(), "linux".to_string())].into(),
        service_account_name: s("default"),
        service_account: s("default"),
        node_name: s("node-1"),
        host_network: Some(false),
        security_context: Some(core::PodSecurityContext { fs_group: Some(2000), ..Default::default() }),
        scheduler_name: s("default-scheduler"),
        tolerations: vec![core::Toleration {
            key: s("node.kubernetes.io/not-ready"),
            operator: s("Exists"),
            value: s(""),
            effect: s("NoExecute"),
            toleration_seconds: Some(300),
        }],
        priority: Some(0),
        enable_service_links: Some(true),
        preemption_policy: s("PreemptLowerPriority"),
        ..Default::default()
    };
    let status = core::PodStatus {
        phase: s("Running"),
        conditions: vec![core::PodCondition {
            r#type: s("Ready"),
            status: s("True"),
            last_probe_time: Some(meta::Time::default()),
            last_transition_time: time(1_700_000_200),
            reason: s(""),
            message: s(""),
            observed_generation: Some(0),
        }],
        message: s(""),
        reason: s(""),
        host_ip: s("10.0.0.1"),
        host_ips: vec![core::HostIp { ip: s("10.0.0.1") }],
        pod_ip: s("10.244.1.7"),
        pod_ips: vec![core::PodIp { ip: s("10.244.1.7") }, core::PodIp { ip: s("fd00::7") }],
        start_time: time(1_700_000_010),
        container_statuses: vec![core::ContainerStatus {
            name: s("app"),
            state: Some(core::ContainerState {
                running: Some(core::ContainerStateRunning { started_at: time(1_700_000_020) }),
                ..Default::default()
            }),
            last_state: Some(core::ContainerState {
                terminated: Some(core::ContainerStateTerminated {
                    exit_code: Some(-1),
                    signal: Some(0),
                    reason: s("Error"),
                    message: s(""),
                    started_at: time(1_699_999_000),
                    finished_at: time(1_699_999_500),
                    container_id: s("containerd://abc"),
                }),
                ..Default::default()
            }),
            ready: Some(false),
            restart_count: Some(0),
            image: s("registry.example/app:1.2"),
            image_id: s(""),
            container_id: s("containerd://def"),
            started: Some(true),
            ..Default::default()
        }],
        qos_class: s("Burstable"),
        ..Default::default()
    };
    let message = core::Pod { metadata: Some(object_meta(name, "default")), spec: Some(spec), status: Some(status) };
    let json = json!({
        "metadata": object_meta_json(name, "default"),
        "spec": {
            "volumes": [
                {"name": "config", "configMap": {"name": "settings", "items": [{"key": "a", "path": "a.conf", "mode": 256}], "defaultMode": 420}},
                {"name": "scratch", "emptyDir": {"sizeLimit": "1Gi"}},
            ],
            "containers": [{
                "name": "app", "image": "registry.example/app:1.2", "command": ["/bin/app"], "args": ["--port=8080", ""],
                "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
                "env": [
                    {"name": "MODE", "value": "prod"},
                    {"name": "EMPTY"},
                    {"name": "CM", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "mode", "optional": false}}},
                ],
                "resources": {"limits": {"memory": "128Mi"}, "requests": {"cpu": "250m", "memory": "64Mi"}},
                "livenessProbe": {"httpGet": {"path": "/healthz", "port": "http", "scheme": "HTTP"},
                                  "timeoutSeconds": 1, "periodSeconds": 10, "successThreshold": 1, "failureThreshold": 3},
                "readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 5},
                "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
                "imagePullPolicy": "IfNotPresent",
                "securityContext": {"runAsUser": 0, "runAsNonRoot": false, "readOnlyRootFilesystem": true, "capabilities": {"drop": ["ALL"]}},
                "volumeMounts": [{"name": "config", "readOnly": true, "mountPath": "/etc/app"}],
            }],
            "restartPolicy": "Always", "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
            "nodeSelector": {"kubernetes.io/os": "linux"}, "serviceAccountName": "default", "serviceAccount": "default",
            "nodeName": "node-1", "securityContext": {"fsGroup": 2000}, "schedulerName": "default-scheduler",
            "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}],
            "priority": 0, "enableServiceLinks": true, "preemptionPolicy": "PreemptLowerPriority",
        },
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2023-11-14T22:16:40Z"}],
            "hostIP": "10.0.0.1", "hostIPs": [{"ip": "10.0.0.1"}],
            "podIP": "10.244.1.7", "podIPs": [{"ip": "10.244.1.7"}, {"ip": "fd00::7"}],
            "startTime": "2023-11-14T22:13:30Z",
            "containerStatuses": [{
                "name": "app",
                "state": {"running": {"startedAt": "2023-11-14T22:13:40Z"}},
                "lastState": {"terminated": {"exitCode": -1, "reason": "Error", "startedAt": "2023-11-14T21:56:40Z",
                                             "finishedAt": "2023-11-14T22:05:00Z", "containerID": "containerd://abc"}},
                "ready": false, "restartCount": 0, "image": "registry.example/app:1.2", "imageID": "",
                "containerID": "containerd://def", "started": true,
            }],
            "qosClass": "Burstable",
        },
    });
    (message, json)
}

#[test]
fn a_pod_and_a_pod_list_decode_as_their_json() {
    let (message, json) = pod("web-1");
    agree_kind::<k8s_openapi::api::core::v1::Pod>(&message, json);
    agree_list::<k8s_openapi::api::core::v1::Pod>(
        vec![pod("a"), pod("b"), (core::Pod::default(), json!({"metadata": {}}))],
        any_list,
    );
}

#[test]
fn config_maps_and_secrets_with_text_and_bytes_decode_as_their_json() {
    let cm = core::ConfigMap {
        metadata: Some(object_meta("settings", "default")),
        immutable: None,
        data: [("mode".to_string(), "prod".to_string()), ("empty".to_string(), String::new())].into(),
        binary_data: [("blob".to_string(), vec![0, 1, 254, 255])].into(),
    };
    let cm_json = json!({"metadata": object_meta_json("settings", "default"), "data": {"mode": "prod", "empty": ""},
                         "binaryData": {"blob": "AAH+/w=="}});
    agree_kind::<k8s_openapi::api::core::v1::ConfigMap>(&cm, cm_json.clone());
    agree_list::<k8s_openapi::api::core::v1::ConfigMap>(vec![(cm, cm_json)], any_list);

    let secret = core::Secret {
        metadata: Some(object_meta("token", "kube-system")),
        immutable: Some(false),
        data: [("token".to_string(), b"s3cr3t\n".to_vec()), ("empty".to_string(), vec![])].into(),
        string_data: BTreeMap::new(),
        r#type: s("Opaque"),
    };
    let secret_json = json!({"metadata": object_meta_json("token", "kube-system"), "immutable": false,
                             "data": {"token": "czNjcjN0Cg==", "empty": ""}, "type": "Opaque"});
    agree_kind::<k8s_openapi::api::core::v1::Secret>(&secret, secret_json.clone());
    agree_list::<k8s_openapi::api::core::v1::Secret>(vec![(secret, secret_json)], any_list);
}

fn service() -> (core::Service, Value) {
    let message = core::Service {
        metadata: Some(object_meta("web", "default")),
        spec: Some(core::ServiceSpec {
            ports: vec![
                core::ServicePort {
                    name: s("http"),
                    protocol: s("TCP"),
                    app_protocol: None,
                    port: Some(80),
                    target_port: Some(IntOrString { r#type: Some(0), int_val: Some(8080), str_val: s("") }),
                    node_port: Some(0),
                },
                core::ServicePort {
                    name: s("metrics"),
                    protocol: s("TCP"),
                    app_protocol: s("http"),
                    port: Some(9090),
                    target_port: Some(IntOrString { r#type: Some(1), int_val: Some(0), str_val: s("metrics") }),
                    node_port: Some(30_090),
                },
            ],
            selector: [("app".to_string(), "web".to_string())].into(),
            cluster_ip: s("10.96.0.10"),
            cluster_ips: vec!["10.96.0.10".into()],
            r#type: s("NodePort"),
            session_affinity: s("None"),
            load_balancer_ip: s(""),
            external_name: s(""),
            external_traffic_policy: s("Cluster"),
            health_check_node_port: Some(0),
            publish_not_ready_addresses: Some(false),
            ip_families: vec!["IPv4".into()],
            ip_family_policy: s("SingleStack"),
            internal_traffic_policy: s("Cluster"),
            ..Default::default()
        }),
        status: Some(core::ServiceStatus {
            load_balancer: Some(core::LoadBalancerStatus { ingress: vec![] }),
            conditions: vec![meta::Condition {
                r#type: s("Ready"),
                status: s("True"),
                observed_generation: Some(3),
                last_transition_time: time(1_700_000_000),
                reason: s("Ok"),
                message: s(""),
            }],
        }),
    };
    let json = json!({
        "metadata": object_meta_json("web", "default"),
        "spec": {
            "ports": [{"name": "http", "protocol": "TCP", "port": 80, "targetPort": 8080},
                      {"name": "metrics", "protocol": "TCP", "appProtocol": "http", "port": 9090, "targetPort": "metrics", "nodePort": 30090}],
            "selector": {"app": "web"}, "clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10"], "type": "NodePort",
            "sessionAffinity": "None", "externalTrafficPolicy": "Cluster", "ipFamilies": ["IPv4"],
            "ipFamilyPolicy": "SingleStack", "internalTrafficPolicy": "Cluster",
        },
        "status": {"loadBalancer": {}, "conditions": [{"type": "Ready", "status": "True", "observedGeneration": 3,
                   "lastTransitionTime": "2023-11-14T22:13:20Z", "reason": "Ok", "message": ""}]},
    });
    (message, json)
}

#[test]
fn services_with_int_or_string_ports_decode_as_their_json() {
    let (message, json) = service();
    agree_kind::<k8s_openapi::api::core::v1::Service>(&message, json.clone());
    agree_list::<k8s_openapi::api::core::v1::Service>(vec![(message, json)], any_list);
}

#[test]
fn deployments_keep_pointer_zeros_and_drop_omitempty_zeros() {
    let (pod, pod_json) = pod("template");
    let message = apps::Deployment {
        metadata: Some(object_meta("web", "default")),
        spec: Some(apps::DeploymentSpec {
            replicas: Some(0),
            selector: Some(meta::LabelSelector {
                match_labels: [("app".to_string(), "web".to_string())].into(),
                match_expressions: vec![meta::LabelSelectorRequirement {
                    key: s("tier"),
                    operator: s("In"),
                    values: vec!["a".into(), "b".into()],
                }],
            }),
            template: Some(core::PodTemplateSpec { metadata: pod.metadata.clone(), spec: pod.spec.clone() }),
            strategy: Some(apps::DeploymentStrategy {
                r#type: s("RollingUpdate"),
                rolling_update: Some(apps::RollingUpdateDeployment {
                    max_unavailable: Some(IntOrString { r#type: Some(1), int_val: Some(0), str_val: s("25%") }),
                    max_surge: Some(IntOrString { r#type: Some(0), int_val: Some(0), str_val: s("") }),
                }),
            }),
            min_ready_seconds: Some(0),
            revision_history_limit: Some(10),
            paused: Some(false),
            progress_deadline_seconds: Some(600),
        }),
        status: Some(apps::DeploymentStatus {
            observed_generation: Some(4),
            replicas: Some(0),
            updated_replicas: Some(0),
            ready_replicas: Some(0),
            available_replicas: Some(0),
            unavailable_replicas: Some(0),
            terminating_replicas: None,
            conditions: vec![apps::DeploymentCondition {
                r#type: s("Progressing"),
                status: s("True"),
                last_update_time: time(1_700_000_000),
                last_transition_time: time(1_700_000_000),
                reason: s("NewReplicaSetAvailable"),
                message: s(""),
            }],
            collision_count: None,
        }),
    };
    let json = json!({
        "metadata": object_meta_json("web", "default"),
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": {"app": "web"}, "matchExpressions": [{"key": "tier", "operator": "In", "values": ["a", "b"]}]},
            "template": {"metadata": pod_json["metadata"], "spec": pod_json["spec"]},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": 0}},
            "revisionHistoryLimit": 10, "progressDeadlineSeconds": 600,
        },
        "status": {
            "observedGeneration": 4,
            "conditions": [{"type": "Progressing", "status": "True", "lastUpdateTime": "2023-11-14T22:13:20Z",
                            "lastTransitionTime": "2023-11-14T22:13:20Z", "reason": "NewReplicaSetAvailable"}],
        },
    });
    agree_kind::<k8s_openapi::api::apps::v1::Deployment>(&message, json.clone());
    agree_list::<k8s_openapi::api::apps::v1::Deployment>(vec![(message, json)], any_list);
}

#[test]
fn nodes_with_quantities_taints_and_conditions_decode_as_their_json() {
    let message = core::Node {
        metadata: Some(object_meta("node-1", "")),
        spec: Some(core::NodeSpec {
            pod_cidr: s("10.244.1.0/24"),
            pod_cid_rs: vec!["10.244.1.0/24".into()],
            provider_id: s(""),
            unschedulable: Some(false),
            taints: vec![core::Taint {
                key: s("node-role.kubernetes.io/control-plane"),
                value: s(""),
                effect: s("NoSchedule"),
                time_added: None,
            }],
            config_source: None,
            external_id: s(""),
        }),
        status: Some(core::NodeStatus {
            capacity: quantities(&[("cpu", "2"), ("memory", "8148236Ki"), ("pods", "110")]),
            allocatable: quantities(&[("cpu", "1900m"), ("memory", "7.5Gi")]),
            phase: s(""),
            conditions: vec![core::NodeCondition {
                r#type: s("Ready"),
                status: s("True"),
                last_heartbeat_time: time(1_700_000_300),
                last_transition_time: time(1_700_000_000),
                reason: s("KubeletReady"),
                message: s("kubelet is posting ready status"),
            }],
            addresses: vec![core::NodeAddress { r#type: s("InternalIP"), address: s("10.0.0.1") }],
            daemon_endpoints: Some(core::NodeDaemonEndpoints {
                kubelet_endpoint: Some(core::DaemonEndpoint { port: Some(10_250) }),
            }),
            node_info: Some(core::NodeSystemInfo {
                machine_id: s("m"),
                system_uuid: s("u"),
                boot_id: s("b"),
                kernel_version: s("6.1.0"),
                os_image: s("Debian"),
                container_runtime_version: s("containerd://1.7"),
                kubelet_version: s("v1.34.0"),
                kube_proxy_version: s(""),
                operating_system: s("linux"),
                architecture: s("amd64"),
                swap: None,
            }),
            images: vec![core::ContainerImage {
                names: vec!["registry.example/app:1.2".into()],
                size_bytes: Some(12_345_678_901),
            }],
            volumes_in_use: vec![],
            ..Default::default()
        }),
    };
    let json = json!({
        "metadata": object_meta_json("node-1", ""),
        "spec": {"podCIDR": "10.244.1.0/24", "podCIDRs": ["10.244.1.0/24"],
                 "taints": [{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]},
        "status": {
            "capacity": {"cpu": "2", "memory": "8148236Ki", "pods": "110"},
            "allocatable": {"cpu": "1900m", "memory": "7.5Gi"},
            "conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": "2023-11-14T22:18:20Z",
                            "lastTransitionTime": "2023-11-14T22:13:20Z", "reason": "KubeletReady",
                            "message": "kubelet is posting ready status"}],
            "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {"machineID": "m", "systemUUID": "u", "bootID": "b", "kernelVersion": "6.1.0", "osImage": "Debian",
                         "containerRuntimeVersion": "containerd://1.7", "kubeletVersion": "v1.34.0", "kubeProxyVersion": "",
                         "operatingSystem": "linux", "architecture": "amd64"},
            "images": [{"names": ["registry.example/app:1.2"], "sizeBytes": 12_345_678_901_i64}],
        },
    });
    agree_kind::<k8s_openapi::api::core::v1::Node>(&message, json.clone());
    agree_list::<k8s_openapi::api::core::v1::Node>(vec![(message, json)], any_list);
}

#[test]
fn namespaces_and_events_with_micro_times_decode_as_their_json() {
    let ns = core::Namespace {
        metadata: Some(object_meta("team-a", "")),
        spec: Some(core::NamespaceSpec { finalizers: vec!["kubernetes".into()] }),
        status: Some(core::NamespaceStatus { phase: s("Active"), conditions: vec![] }),
    };
    let ns_json = json!({"metadata": object_meta_json("team-a", ""), "spec": {"finalizers": ["kubernetes"]},
                         "status": {"phase": "Active"}});
    agree_kind::<k8s_openapi::api::core::v1::Namespace>(&ns, ns_json.clone());
    agree_list::<k8s_openapi::api::core::v1::Namespace>(vec![(ns, ns_json)], any_list);

    let reference = core::ObjectReference {
        kind: s("Pod"),
        namespace: s("default"),
        name: s("web-1"),
        uid: s("0a0b"),
        api_version: s("v1"),
        resource_version: s("123"),
        field_path: s("spec.containers{app}"),
    };
    let event = core::Event {
        metadata: Some(object_meta("web-1.17a", "default")),
        involved_object: Some(reference),
        reason: s("Pulled"),
        message: s("Successfully pulled image"),
        source: Some(core::EventSource { component: s("kubelet"), host: s("node-1") }),
        first_timestamp: time(1_700_000_000),
        last_timestamp: time(1_700_000_060),
        count: Some(2),
        r#type: s("Normal"),
        event_time: Some(meta::MicroTime { seconds: Some(1_700_000_000), nanos: Some(123_456_789) }),
        series: Some(core::EventSeries {
            count: Some(2),
            last_observed_time: Some(meta::MicroTime { seconds: Some(1_700_000_060), nanos: Some(1_000) }),
        }),
        action: s(""),
        related: None,
        reporting_component: s("kubelet"),
        reporting_instance: s(""),
    };
    let event_json = json!({
        "metadata": object_meta_json("web-1.17a", "default"),
        "involvedObject": {"kind": "Pod", "namespace": "default", "name": "web-1", "uid": "0a0b", "apiVersion": "v1",
                           "resourceVersion": "123", "fieldPath": "spec.containers{app}"},
        "reason": "Pulled", "message": "Successfully pulled image", "source": {"component": "kubelet", "host": "node-1"},
        "firstTimestamp": "2023-11-14T22:13:20Z", "lastTimestamp": "2023-11-14T22:14:20Z", "count": 2, "type": "Normal",
        "eventTime": "2023-11-14T22:13:20.123456Z",
        "series": {"count": 2, "lastObservedTime": "2023-11-14T22:14:20.000001Z"},
        "reportingComponent": "kubelet", "reportingInstance": "",
    });
    agree_kind::<k8s_openapi::api::core::v1::Event>(&event, event_json.clone());
    agree_list::<k8s_openapi::api::core::v1::Event>(vec![(event, event_json)], any_list);
}

#[test]
fn embedded_json_reads_as_json() {
    // ControllerRevision.data is a RawExtension: JSON bytes inside the protobuf message.
    let message = apps::ControllerRevision {
        metadata: Some(object_meta("web-7f", "default")),
        data: Some(RawExtension {
            raw: Some(br#"{"spec":{"template":{"$patch":"replace"}},"n":[1,2.5,null]}"#.to_vec()),
        }),
        revision: Some(3),
    };
    let json = json!({"metadata": object_meta_json("web-7f", "default"),
                      "data": {"spec": {"template": {"$patch": "replace"}}, "n": [1, 2.5, null]}, "revision": 3});
    agree_kind::<k8s_openapi::api::apps::v1::ControllerRevision>(&message, json);
}

/// A random string: ASCII, empty, or with multi-byte characters.
fn text(rng: &mut SmallRng) -> String {
    let len = rng.random_range(0..12);
    (0..len)
        .map(|_| match rng.random_range(0..10) {
            0 => 'é',
            1 => '✓',
            2 => '"',
            3 => '\\',
            4 => '\u{1F600}',
            _ => char::from(rng.random_range(b'a'..=b'z')),
        })
        .collect()
}

fn map(rng: &mut SmallRng) -> BTreeMap<String, String> {
    (0..rng.random_range(0..4)).map(|_| (text(rng), text(rng))).collect()
}

/// Randomized objects of several kinds, built once as data and written both ways.
#[test]
fn randomized_objects_decode_as_their_json() {
    let seed = std::env::var("KUBE_WATCHER_FUZZ_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(25);
    let mut rng = SmallRng::seed_from_u64(seed);
    for _ in 0..300 {
        let (name, labels, data) = (text(&mut rng), map(&mut rng), map(&mut rng));
        let bytes: BTreeMap<String, Vec<u8>> = (0..rng.random_range(0..3))
            .map(|_| (text(&mut rng), (0..rng.random_range(0..20)).map(|_| rng.random()).collect()))
            .collect();
        let generation: i64 = if rng.random_bool(0.3) { 0 } else { rng.random_range(i64::MIN / 2..i64::MAX / 2) };
        let seconds: i64 = rng.random_range(-62_135_596_800..253_402_300_799);
        let meta = meta::ObjectMeta {
            name: Some(name.clone()),
            generate_name: s(""),
            generation: Some(generation),
            creation_timestamp: time(seconds),
            labels: labels.clone(),
            ..Default::default()
        };
        let mut meta_json = json!({"generation": generation, "labels": labels});
        if !name.is_empty() {
            meta_json["name"] = json!(name);
        }
        if generation == 0 {
            meta_json.as_object_mut().unwrap().remove("generation");
        }
        if seconds != 0 {
            meta_json["creationTimestamp"] = json!(rfc3339(seconds));
        }
        if labels.is_empty() {
            meta_json.as_object_mut().unwrap().remove("labels");
        }
        let b64 = |b: &Vec<u8>| {
            use base64::Engine as _;
            base64::engine::general_purpose::STANDARD.encode(b)
        };
        let cm = core::ConfigMap {
            metadata: Some(meta.clone()),
            immutable: rng.random_bool(0.5).then(|| rng.random()),
            data: data.clone(),
            binary_data: bytes.clone(),
        };
        let mut cm_json = json!({"metadata": meta_json.clone()});
        if let Some(immutable) = cm.immutable {
            cm_json["immutable"] = json!(immutable);
        }
        if !data.is_empty() {
            cm_json["data"] = json!(data);
        }
        if !bytes.is_empty() {
            cm_json["binaryData"] = bytes.iter().map(|(k, v)| (k.clone(), json!(b64(v)))).collect();
        }
        agree_kind::<k8s_openapi::api::core::v1::ConfigMap>(&cm, cm_json);

        let port: i32 = rng.random();
        let target = if rng.random_bool(0.5) {
            (IntOrString { r#type: Some(0), int_val: Some(port), str_val: s("") }, json!(port))
        } else {
            let t = text(&mut rng);
            (IntOrString { r#type: Some(1), int_val: Some(0), str_val: Some(t.clone()) }, json!(t))
        };
        let svc = core::Service {
            metadata: Some(meta.clone()),
            spec: Some(core::ServiceSpec {
                ports: vec![core::ServicePort { port: Some(port), target_port: Some(target.0), ..Default::default() }],
                selector: data.clone(),
                ..Default::default()
            }),
            status: None,
        };
        let mut spec_json = json!({"ports": [{"port": port, "targetPort": target.1}]});
        if !data.is_empty() {
            spec_json["selector"] = json!(data);
        }
        agree_kind::<k8s_openapi::api::core::v1::Service>(
            &svc,
            json!({"metadata": meta_json.clone(), "spec": spec_json}),
        );

        let (pod, pod_json) = random_pod(&mut rng, meta.clone(), meta_json.clone());
        agree_kind::<k8s_openapi::api::core::v1::Pod>(&pod, pod_json);
    }
}

/// A pod with random containers: Go's zeros where Go sends them, pointers set or not.
fn random_pod(rng: &mut SmallRng, meta: meta::ObjectMeta, meta_json: Value) -> (core::Pod, Value) {
    let mut containers = Vec::new();
    let mut containers_json = Vec::new();
    for _ in 0..rng.random_range(1..4) {
        let (name, image) = (text(rng), text(rng));
        let args: Vec<String> = (0..rng.random_range(0..3)).map(|_| text(rng)).collect();
        let host_port: i32 = if rng.random_bool(0.5) { 0 } else { rng.random() };
        let container_port: i32 = rng.random();
        let env: Vec<(String, String)> = (0..rng.random_range(0..4)).map(|_| (text(rng), text(rng))).collect();
        let cpu = format!("{}m", rng.random_range(0..4000));
        let run_as_user: Option<i64> = rng.random_bool(0.5).then(|| rng.random_range(-1..70_000));
        let stdin = rng.random_bool(0.5);
        containers.push(core::Container {
            name: Some(name.clone()),
            image: Some(image.clone()),
            args: args.clone(),
            ports: vec![core::ContainerPort {
                name: s(""),
                host_port: Some(host_port),
                container_port: Some(container_port),
                protocol: s("TCP"),
                host_ip: s(""),
            }],
            env: env
                .iter()
                .map(|(k, v)| core::EnvVar { name: Some(k.clone()), value: Some(v.clone()), value_from: None })
                .collect(),
            resources: Some(core::ResourceRequirements {
                requests: quantities(&[("cpu", &cpu)]),
                ..Default::default()
            }),
            security_context: Some(core::SecurityContext { run_as_user, ..Default::default() }),
            stdin: Some(stdin),
            ..Default::default()
        });
        let mut c = json!({"name": name, "ports": [{"containerPort": container_port, "protocol": "TCP"}],
                           "resources": {"requests": {"cpu": cpu}}, "securityContext": {}});
        if !image.is_empty() {
            c["image"] = json!(image);
        }
        if !args.is_empty() {
            c["args"] = json!(args);
        }
        if host_port != 0 {
            c["ports"][0]["hostPort"] = json!(host_port);
        }
        if !env.is_empty() {
            c["env"] = env
                .iter()
                .map(|(k, v)| if v.is_empty() { json!({"name": k}) } else { json!({"name": k, "value": v}) })
                .collect();
        }
        if let Some(uid) = run_as_user {
            c["securityContext"]["runAsUser"] = json!(uid);
        }
        if stdin {
            c["stdin"] = json!(true);
        }
        containers_json.push(c);
    }
    let started: i64 = rng.random_range(0..4_000_000_000);
    let pod = core::Pod {
        metadata: Some(meta),
        spec: Some(core::PodSpec { containers, ..Default::default() }),
        status: Some(core::PodStatus { phase: s(""), start_time: time(started), ..Default::default() }),
    };
    let mut status = json!({});
    if started != 0 {
        status["startTime"] = json!(rfc3339(started));
    }
    (pod, json!({"metadata": meta_json, "spec": {"containers": containers_json}, "status": status}))
}

/// Go's RFC 3339 form of a time, computed with jiff (what k8s-openapi parses with), not with the
/// decoder's own formatting.
fn rfc3339(seconds: i64) -> String {
    jiff_timestamp(seconds)
}

fn jiff_timestamp(seconds: i64) -> String {
    let t: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time =
        serde_json::from_value(json!("1970-01-01T00:00:00Z")).unwrap();
    let shifted = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        t.0.checked_add(k8s_openapi::jiff::SignedDuration::from_secs(seconds)).unwrap(),
    );
    serde_json::to_value(shifted).unwrap().as_str().unwrap().to_string()
}

/// Writes the protobuf fuzz seeds (fuzz/seeds/protobuf/*) from this file's objects:
/// `cargo test -p kube-watcher-oracle -- --ignored write_fuzz_seeds`.
#[test]
#[ignore = "regenerates fuzz/seeds/protobuf; run by hand"]
fn write_fuzz_seeds() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/seeds/protobuf");
    std::fs::create_dir_all(&dir).unwrap();
    let (pod, _) = pod("web-1");
    let (svc, _) = service();
    let small = core::Pod {
        metadata: Some(meta::ObjectMeta {
            name: s("a"),
            labels: [("k".into(), "v".into())].into(),
            ..Default::default()
        }),
        spec: Some(core::PodSpec {
            containers: vec![core::Container { name: s("c"), ..Default::default() }],
            ..Default::default()
        }),
        status: None,
    };
    let list =
        any_list(meta::ListMeta { resource_version: s("9"), ..Default::default() }, vec![small.encode_to_vec(); 2]);
    let seeds: Vec<(&str, Vec<u8>)> = vec![
        ("pod", envelope("v1", "Pod", &pod)),
        ("pod-small", envelope("v1", "Pod", &small)),
        ("service", envelope("v1", "Service", &svc)),
        ("pod-list", {
            let unknown = Unknown {
                type_meta: Some(TypeMeta { api_version: s("v1"), kind: s("PodList") }),
                raw: Some(list),
                ..Default::default()
            };
            let mut body = b"k8s\0".to_vec();
            body.extend(unknown.encode_to_vec());
            body
        }),
    ];
    for (name, body) in seeds {
        std::fs::write(dir.join(name), body).unwrap();
    }
}

/// What Go's JSON would hold for an object that came through protobuf: an empty list or map
/// cannot be told from an absent one there, so Go reads it as nil and leaves it out. (The bench's
/// generator writes `"annotations": {}`, which no API server sends.)
fn go_form(value: &mut Value) {
    match value {
        Value::Object(map) => {
            map.retain(|key, v| {
                let empty_map =
                    matches!(v, Value::Object(m) if m.is_empty()) && matches!(key.as_str(), "annotations" | "labels");
                !(empty_map || matches!(v, Value::Array(a) if a.is_empty()))
            });
            map.values_mut().for_each(go_form);
        }
        Value::Array(items) => items.iter_mut().for_each(go_form),
        _ => {}
    }
}

/// The bench's pods the other way round: written by our encoder (the same table), read by prost
/// (which must accept every byte), written again by prost and read by our decoder: equal to the
/// JSON decode. Catches a table entry whose number or wire type prost would not read as that field.
#[test]
fn realistic_and_varied_pods_survive_a_prost_round_trip() {
    let mut pods: Vec<String> = (0..5).map(|i| realistic_pod::render_pod(i, 100 + i as u64)).collect();
    pods.extend((0..60).map(|i| varied_pod::render_varied_pod(i, 500 + i as u64)));
    for text in pods {
        let mut json: Value = serde_json::from_str(&text).unwrap();
        go_form(&mut json);
        json["apiVersion"] = json!("v1");
        json["kind"] = json!("Pod");
        let ours = fuzzing::protobuf_encode(&json).unwrap();
        let unknown = Unknown::decode(&ours[4..]).unwrap();
        let pod = core::Pod::decode(unknown.raw.as_deref().unwrap_or_default()).unwrap();
        let theirs = envelope("v1", "Pod", &pod);
        let got: k8s_openapi::api::core::v1::Pod = fuzzing::protobuf_decode(&theirs).unwrap();
        let expected: k8s_openapi::api::core::v1::Pod = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(got, expected, "{text}");
        // And our own bytes read the same.
        let direct: k8s_openapi::api::core::v1::Pod = fuzzing::protobuf_decode(&ours).unwrap();
        assert_eq!(direct, expected);
    }
}
