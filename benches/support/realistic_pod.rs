//! A realistic pod of about 6 KB of JSON, shared by `examples/bench.rs` and `benches/micro.rs`.

/// The uid of pod `i` (which a sharded bench client hashes to know its pods).
#[allow(dead_code)] // benches/micro.rs renders pods but never asks their uid
pub fn uid(i: usize) -> String {
    format!("6f1c2a8e-0d1b-4c55-9b8e-{i:012}")
}

/// The values pod `i` has of its own; everything else is the same for every pod (so that a
/// server can render them from one template: examples/bench.rs).
#[allow(dead_code)] // benches/micro.rs only renders pods
pub struct Values {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// The service account token volume's name.
    pub volume: String,
    pub node: String,
    pub host_ip: String,
    pub pod_ip: String,
    /// Both containers' `containerID`.
    pub container_id: String,
}

impl Values {
    /// Pod `i`'s.
    pub fn of(i: usize) -> Values {
        Values {
            namespace: format!("ns-{}", i % 50),
            name: format!("web-{i:06}"),
            uid: uid(i),
            volume: format!("kube-api-access-{i}"),
            node: format!("node-{}", i % 100),
            host_ip: format!("10.0.{}.{}", i % 250, i % 200),
            pod_ip: format!("10.244.{}.{}", i % 250, i % 200),
            container_id: format!("containerd://{i:064}"),
        }
    }
}

/// A realistic pod of about 6.4 KB of JSON: labels, annotations, managedFields, two containers
/// with env and resources, status with conditions.
pub fn render_pod(i: usize, rv: u64) -> String {
    render_pod_with(&Values::of(i), &rv.to_string())
}

/// A pod with the values `v` at resourceVersion `rv`.
pub fn render_pod_with(v: &Values, rv: &str) -> String {
    let Values { namespace: ns, name, uid, volume, node, host_ip, pod_ip, container_id } = v;
    let env: String = (0..8)
        .map(|k| format!(r#"{{"name":"SETTING_{k}","value":"value-{k}-for-{name}"}}"#))
        .collect::<Vec<_>>()
        .join(",");
    let container = |cname: &str, image: &str| {
        format!(
            r#"{{"name":"{cname}","image":"{image}","ports":[{{"containerPort":8080,"protocol":"TCP","name":"http"}}],"env":[{env}],"resources":{{"limits":{{"cpu":"500m","memory":"512Mi"}},"requests":{{"cpu":"100m","memory":"128Mi"}}}},"volumeMounts":[{{"name":"{volume}","readOnly":true,"mountPath":"/var/run/secrets/kubernetes.io/serviceaccount"}}],"livenessProbe":{{"httpGet":{{"path":"/healthz","port":8080,"scheme":"HTTP"}},"initialDelaySeconds":10,"timeoutSeconds":1,"periodSeconds":10,"successThreshold":1,"failureThreshold":3}},"terminationMessagePath":"/dev/termination-log","terminationMessagePolicy":"File","imagePullPolicy":"IfNotPresent"}}"#
        )
    };
    let managed = format!(
        r#"[{{"manager":"kube-controller-manager","operation":"Update","apiVersion":"v1","time":"2025-03-01T10:00:00Z","fieldsType":"FieldsV1","fieldsV1":{{"f:metadata":{{"f:generateName":{{}},"f:labels":{{".":{{}},"f:app":{{}},"f:pod-template-hash":{{}},"f:tier":{{}}}},"f:ownerReferences":{{".":{{}},"k:{{\"uid\":\"{uid}\"}}":{{}}}}}},"f:spec":{{"f:containers":{{"k:{{\"name\":\"app\"}}":{{".":{{}},"f:env":{{}},"f:image":{{}},"f:name":{{}},"f:ports":{{}},"f:resources":{{}}}},"k:{{\"name\":\"sidecar\"}}":{{".":{{}},"f:image":{{}},"f:name":{{}}}}}},"f:dnsPolicy":{{}},"f:restartPolicy":{{}},"f:schedulerName":{{}},"f:terminationGracePeriodSeconds":{{}}}}}}}},{{"manager":"kubelet","operation":"Update","apiVersion":"v1","time":"2025-03-01T10:00:05Z","fieldsType":"FieldsV1","fieldsV1":{{"f:status":{{"f:conditions":{{"k:{{\"type\":\"Ready\"}}":{{".":{{}},"f:lastProbeTime":{{}},"f:lastTransitionTime":{{}},"f:status":{{}},"f:type":{{}}}}}},"f:containerStatuses":{{}},"f:hostIP":{{}},"f:phase":{{}},"f:podIP":{{}},"f:podIPs":{{}},"f:startTime":{{}}}}}},"subresource":"status"}}]"#
    );
    let cond = |t: &str| {
        format!(r#"{{"type":"{t}","status":"True","lastProbeTime":null,"lastTransitionTime":"2025-03-01T10:00:05Z"}}"#)
    };
    let cstatus = |cname: &str, image: &str| {
        format!(
            r#"{{"name":"{cname}","state":{{"running":{{"startedAt":"2025-03-01T10:00:04Z"}}}},"lastState":{{}},"ready":true,"restartCount":0,"image":"{image}","imageID":"docker.io/library/{image}@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef","containerID":"{container_id}","started":true}}"#
        )
    };
    format!(
        r#"{{"metadata":{{"name":"{name}","generateName":"web-7d4b9c8f6-","namespace":"{ns}","uid":"{uid}","resourceVersion":"{rv}","creationTimestamp":"2025-03-01T10:00:00Z","labels":{{"app":"web","pod-template-hash":"7d4b9c8f6","tier":"frontend","team":"shop"}},"annotations":{{"kubectl.kubernetes.io/restartedAt":"2025-03-01T09:59:00Z","prometheus.io/scrape":"true","prometheus.io/port":"8080"}},"ownerReferences":[{{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-7d4b9c8f6","uid":"{uid}","controller":true,"blockOwnerDeletion":true}}],"managedFields":{managed}}},"spec":{{"volumes":[{{"name":"{volume}","projected":{{"sources":[{{"serviceAccountToken":{{"expirationSeconds":3607,"path":"token"}}}},{{"configMap":{{"name":"kube-root-ca.crt","items":[{{"key":"ca.crt","path":"ca.crt"}}]}}}}],"defaultMode":420}}}}],"containers":[{},{}],"restartPolicy":"Always","terminationGracePeriodSeconds":30,"dnsPolicy":"ClusterFirst","serviceAccountName":"default","serviceAccount":"default","nodeName":"{node}","securityContext":{{}},"schedulerName":"default-scheduler","tolerations":[{{"key":"node.kubernetes.io/not-ready","operator":"Exists","effect":"NoExecute","tolerationSeconds":300}},{{"key":"node.kubernetes.io/unreachable","operator":"Exists","effect":"NoExecute","tolerationSeconds":300}}],"priority":0,"enableServiceLinks":true,"preemptionPolicy":"PreemptLowerPriority"}},"status":{{"phase":"Running","conditions":[{},{},{},{}],"hostIP":"{host_ip}","podIP":"{pod_ip}","podIPs":[{{"ip":"{pod_ip}"}}],"startTime":"2025-03-01T10:00:00Z","containerStatuses":[{},{}],"qosClass":"Burstable"}}}}"#,
        container("app", "registry.example.com/shop/web:1.24.3"),
        container("sidecar", "registry.example.com/infra/envoy:1.29.1"),
        cond("Initialized"),
        cond("Ready"),
        cond("ContainersReady"),
        cond("PodScheduled"),
        cstatus("app", "registry.example.com/shop/web:1.24.3"),
        cstatus("sidecar", "registry.example.com/infra/envoy:1.29.1"),
    )
}
