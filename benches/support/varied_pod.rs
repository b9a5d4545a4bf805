//! Varied realistic pods for `examples/bench.rs --serve --varied`: 50 deployments of skewed sizes
//! (a few big ones, many small) with their own apps, registries, images, label sets,
//! annotations, env lists, one to three containers and optional probes and arguments; each pod
//! has its own uid, container ids, IPs, node and timestamps. About 6 KB of JSON on average
//! (4.5–9 KB). Real clusters are less uniform than `realistic_pod.rs`, whose pods differ only
//! in a few numbers: anything that profits from repetition (the compressed store) must be
//! measured on these too.

use serde_json::{Map, Value, json};

/// A small deterministic generator (splitmix64): the same pod for the same index, every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn hex(&mut self, n: usize) -> String {
        (0..n).map(|_| char::from(b"0123456789abcdef"[self.below(16) as usize])).collect()
    }

    fn alnum(&mut self, n: usize) -> String {
        (0..n).map(|_| char::from(ALNUM[self.below(ALNUM.len() as u64) as usize])).collect()
    }

    fn uuid(&mut self) -> String {
        format!("{}-{}-4{}-{}-{}", self.hex(8), self.hex(4), self.hex(3), self.hex(4), self.hex(12))
    }

    fn pick<'a>(&mut self, xs: &[&'a str]) -> &'a str {
        xs[self.below(xs.len() as u64) as usize]
    }
}

/// The letters Kubernetes uses in generated name suffixes.
const ALNUM: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
const APPS: &[&str] = &[
    "checkout",
    "cart",
    "payments",
    "catalog",
    "search",
    "recommender",
    "auth",
    "users",
    "orders",
    "shipping",
    "inventory",
    "notifications",
    "email",
    "frontend",
    "gateway",
    "billing",
    "reports",
    "analytics",
    "ingest",
    "scheduler",
    "worker",
    "api",
    "admin",
    "media",
    "thumbnails",
];
const SUFFIXES: &[&str] = &["", "-v2", "-worker", "-api", "-canary", "-internal"];
const REGISTRIES: &[&str] = &[
    "registry.example.com",
    "gcr.io/acme-prod",
    "123456789012.dkr.ecr.eu-west-1.amazonaws.com",
    "docker.io/library",
    "ghcr.io/acme",
    "quay.io/acme",
];
const TEAMS: &[&str] = &["shop", "platform", "data", "identity", "growth", "infra", "ml"];
const NAMESPACES: &[&str] = &[
    "default",
    "shop",
    "platform",
    "data",
    "identity",
    "growth",
    "infra",
    "ml",
    "monitoring",
    "staging",
    "prod",
    "batch",
];
const ENV_NAMES: &[&str] = &[
    "LOG_LEVEL",
    "DATABASE_URL",
    "REDIS_HOST",
    "REDIS_PORT",
    "KAFKA_BROKERS",
    "FEATURE_FLAGS",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "JAVA_OPTS",
    "GOMAXPROCS",
    "SERVICE_NAME",
    "REGION",
    "CACHE_TTL_SECONDS",
    "MAX_CONNECTIONS",
    "TIMEOUT_MS",
    "S3_BUCKET",
    "SENTRY_DSN",
    "HTTP_PORT",
    "GRPC_PORT",
    "ENVIRONMENT",
    "TZ",
    "WORKERS",
    "QUEUE_NAME",
    "RETRY_LIMIT",
    "API_BASE_URL",
];
const SIDECARS: &[(&str, &str)] = &[
    ("istio-proxy", "docker.io/istio/proxyv2:1.20.3"),
    ("envoy", "registry.example.com/infra/envoy:1.29.1"),
    ("fluent-bit", "cr.fluentbit.io/fluent/fluent-bit:2.2.2"),
    ("cloudsql-proxy", "gcr.io/cloud-sql-connectors/cloud-sql-proxy:2.8.2"),
];

/// What the pods of one deployment share.
struct Deployment {
    d: usize,
    app: String,
    namespace: &'static str,
    team: &'static str,
    replica_set: String,
    /// Everything else about the deployment is drawn from this, in the same order for each pod.
    rng: Rng,
}

impl Deployment {
    /// The deployment of pod `i`, and the generator of that pod's own values.
    fn of(i: usize) -> (Deployment, Rng) {
        let mut pod = Rng(0xABCD_0000_0000 ^ (i as u64).wrapping_mul(0x0100_0193));
        let x = pod.below(1000) as usize;
        let d = if x < 400 {
            x % 5
        } else if x < 750 {
            5 + x % 15
        } else {
            20 + x % 30
        };
        let mut rng = Rng(0x5EED_0000 + d as u64 * 7919);
        let app = format!("{}{}", APPS[d % APPS.len()], SUFFIXES[(d / APPS.len() + d) % SUFFIXES.len()]);
        let namespace = rng.pick(NAMESPACES);
        let team = rng.pick(TEAMS);
        let hash_len = 9 + rng.below(2) as usize;
        let replica_set = format!("{app}-{}", rng.alnum(hash_len));
        (Deployment { d, app, namespace, team, replica_set, rng }, pod)
    }
}

/// Pod `i`'s name suffix: five letters as Kubernetes generates them, distinct for every `i`
/// below 27⁵ (a bijection: 7,777,777 has no factor 3).
fn suffix(i: usize) -> String {
    const SPACE: usize = 27usize.pow(5);
    let mut n = (i % SPACE) * 7_777_777 % SPACE;
    (0..5)
        .map(|_| {
            let c = ALNUM[n % 27];
            n /= 27;
            char::from(c)
        })
        .collect()
}

/// What pod `i` draws first from its own generator (after its deployment): the token volume's
/// name, the creation time and the uid. Drawn first so that [`varied_uid`] needs nothing else.
fn pod_ids(pr: &mut Rng) -> (String, String, String) {
    let token_volume = format!("kube-api-access-{}", pr.alnum(5));
    let created = format!(
        "2025-0{}-{:02}T{:02}:{:02}:{:02}Z",
        1 + pr.below(9),
        1 + pr.below(28),
        pr.below(24),
        pr.below(60),
        pr.below(60)
    );
    let uid = pr.uuid();
    (token_volume, created, uid)
}

/// Pod `i`'s uid (which a sharded bench client and a filtering bench server hash), without
/// rendering the pod.
#[allow(dead_code)] // benches/micro.rs renders pods but never asks their uid
pub fn varied_uid(i: usize) -> String {
    let (_, mut pr) = Deployment::of(i);
    pod_ids(&mut pr).2
}

/// The values pod `i` has of its own; everything else about it is its deployment's, the same
/// for every pod of it (so that a server can render a deployment's pods from one template:
/// examples/bench.rs).
pub struct PodValues {
    pub name: String,
    pub token_volume: String,
    /// The creation time (also the start time, and every condition's and managedFields'
    /// time).
    pub created: String,
    pub uid: String,
    pub node: String,
    pub pod_ip: String,
    pub host_ip: String,
    pub restarts: u64,
    /// Each container's `containerID` (as many as the deployment's pods have containers, or
    /// more).
    pub container_ids: Vec<String>,
}

impl PodValues {
    /// Pod `i`'s.
    pub fn of(i: usize) -> PodValues {
        let (dep, mut pr) = Deployment::of(i);
        let (token_volume, created, uid) = pod_ids(&mut pr);
        let name = format!("{}-{}", dep.replica_set, suffix(i));
        let node = format!("ip-10-{}-{}-{}.eu-west-1.compute.internal", pr.below(4), pr.below(256), pr.below(256));
        let pod_ip = format!("10.{}.{}.{}", 100 + pr.below(4), pr.below(256), pr.below(256));
        let host_ip = format!("10.{}.{}.{}", pr.below(4), pr.below(256), pr.below(256));
        let restarts = if pr.below(10) == 0 { pr.below(5) } else { 0 };
        // The last draws: one more than a pod of the deployment uses changes nothing before.
        let container_ids = (0..3).map(|_| format!("containerd://{}", pr.hex(64))).collect();
        PodValues { name, token_volume, created, uid, node, pod_ip, host_ip, restarts, container_ids }
    }
}

/// The deployment of pod `i` (0..50): its pods differ only in their [`PodValues`].
#[allow(dead_code)] // benches/micro.rs renders pods but never asks their deployment
pub fn deployment(i: usize) -> usize {
    Deployment::of(i).0.d
}

/// Pod `i`'s namespace and name.
pub fn varied_key(i: usize) -> (String, String) {
    let (dep, _) = Deployment::of(i);
    (dep.namespace.to_owned(), format!("{}-{}", dep.replica_set, suffix(i)))
}

/// Pod `i` at resourceVersion `rv` (everything but the resourceVersion is the same for the same
/// `i`: a MODIFIED event of the same pod).
pub fn render_varied_pod(i: usize, rv: u64) -> String {
    render_varied_with(i, &PodValues::of(i), &rv.to_string())
}

/// A pod of pod `i`'s deployment with the values `v` at resourceVersion `rv`.
pub fn render_varied_with(i: usize, v: &PodValues, rv: &str) -> String {
    let (dep, _) = Deployment::of(i);
    let PodValues { name, token_volume, created, uid, node, pod_ip, host_ip, restarts, container_ids } = v;
    let Deployment { d, app, namespace: ns, team, replica_set, mut rng } = dep;
    let dr = &mut rng;
    let rs_uid = dr.uuid();
    let registry = dr.pick(REGISTRIES);
    let version = format!("{}.{}.{}", dr.below(4), dr.below(30), dr.below(20));
    let containers_n = 1 + dr.below(3) as usize;
    let env_n = [0usize, 2, 4, 6, 8, 12, 16, 24][dr.below(8) as usize];

    let mut labels = Map::new();
    labels.insert("app".into(), json!(app));
    labels.insert("pod-template-hash".into(), json!(replica_set.rsplit('-').next().unwrap_or_default()));
    let optional_labels: [(&str, Value); 12] = [
        ("tier", json!(["frontend", "backend", "cache", "batch"][dr.below(4) as usize])),
        ("team", json!(team)),
        ("version", json!(format!("v{version}"))),
        ("app.kubernetes.io/name", json!(app)),
        ("app.kubernetes.io/instance", json!(format!("{app}-{ns}"))),
        ("app.kubernetes.io/component", json!("server")),
        ("app.kubernetes.io/part-of", json!(format!("{team}-platform"))),
        ("app.kubernetes.io/managed-by", json!("Helm")),
        ("helm.sh/chart", json!(format!("{app}-{version}"))),
        ("environment", json!(["prod", "staging", "dev"][dr.below(3) as usize])),
        ("security.istio.io/tlsMode", json!("istio")),
        ("service.istio.io/canonical-name", json!(app)),
    ];
    for (k, v) in optional_labels {
        if dr.below(2) == 0 {
            labels.insert(k.into(), v);
        }
    }
    let mut annotations = Map::new();
    if dr.below(2) == 0 {
        annotations.insert("prometheus.io/scrape".into(), json!("true"));
        annotations.insert("prometheus.io/port".into(), json!((8000 + dr.below(2000)).to_string()));
    }
    if dr.below(2) == 0 {
        let at = format!("2025-0{}-1{}T0{}:1{}:00Z", 1 + dr.below(9), dr.below(10), dr.below(10), dr.below(10));
        annotations.insert("kubectl.kubernetes.io/restartedAt".into(), json!(at));
    }
    if dr.below(3) == 0 {
        annotations.insert("checksum/config".into(), json!(dr.hex(64)));
    }
    if dr.below(3) == 0 {
        annotations.insert(
            "sidecar.istio.io/status".into(),
            json!(
                r#"{"initContainers":["istio-init"],"containers":["istio-proxy"],"volumes":["workload-socket","credential-socket","workload-certs","istio-envoy","istio-data","istio-podinfo","istio-token","istiod-ca-cert"],"imagePullSecrets":null,"revision":"default"}"#
            ),
        );
        annotations.insert("kubectl.kubernetes.io/default-container".into(), json!(app));
    }
    let ports: Vec<Value> = (0..dr.below(4))
        .map(|k| {
            let name = ["http", "grpc", "metrics", "admin"][k as usize];
            json!({"containerPort": 8080 + k * 10 + dr.below(5), "protocol": "TCP", "name": name})
        })
        .collect();
    let env: Vec<Value> = (0..env_n)
        .map(|k| {
            let again = if k >= ENV_NAMES.len() { "_2" } else { "" };
            let name = format!("{}{again}", ENV_NAMES[(d * 3 + k) % ENV_NAMES.len()]);
            match dr.below(5) {
                0 => {
                    let path = ["metadata.name", "metadata.namespace", "status.podIP", "spec.nodeName"][k % 4];
                    json!({"name": name, "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": path}}})
                }
                1 => {
                    let key = name.to_lowercase();
                    json!({"name": name, "valueFrom": {"secretKeyRef": {"name": format!("{app}-secrets"), "key": key}}})
                }
                2 => {
                    let url = format!("https://{}.{ns}.svc.cluster.local:{}", dr.pick(APPS), 8000 + dr.below(1000));
                    json!({"name": name, "value": url})
                }
                3 => json!({"name": name, "value": dr.below(100_000).to_string()}),
                _ => {
                    let len = 8 + dr.below(24) as usize;
                    json!({"name": name, "value": dr.alnum(len)})
                }
            }
        })
        .collect();
    let cpu = ["250m", "500m", "1", "2", "4"][dr.below(5) as usize];
    let memory = ["256Mi", "512Mi", "1Gi", "2Gi", "4Gi"][dr.below(5) as usize];
    let mut containers = Vec::new();
    let mut images = Vec::new();
    for c in 0..containers_n {
        let (name, image) = if c == 0 {
            (app.clone(), format!("{registry}/{team}/{app}:{version}"))
        } else {
            let (n, image) = SIDECARS[(d + c) % SIDECARS.len()];
            (n.to_owned(), image.to_owned())
        };
        let mut container = json!({
            "name": name, "image": image,
            "resources": {"limits": {"cpu": cpu, "memory": memory}, "requests": {"cpu": "100m", "memory": "128Mi"}},
            "volumeMounts": [{"name": token_volume, "readOnly": true, "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}],
            "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
            "imagePullPolicy": (["IfNotPresent", "Always"][dr.below(2) as usize]),
        });
        if c == 0 {
            container["env"] = json!(env);
            if !ports.is_empty() {
                container["ports"] = json!(ports);
            }
            if dr.below(3) != 0 {
                container["livenessProbe"] = json!({"httpGet": {"path": "/healthz", "port": 8080, "scheme": "HTTP"}, "initialDelaySeconds": dr.below(30), "timeoutSeconds": 1, "periodSeconds": 10, "successThreshold": 1, "failureThreshold": 3});
                container["readinessProbe"] = json!({"httpGet": {"path": "/ready", "port": 8080, "scheme": "HTTP"}, "timeoutSeconds": 1, "periodSeconds": 5, "successThreshold": 1, "failureThreshold": 3});
            }
            if dr.below(3) == 0 {
                let level = ["info", "debug", "warn"][dr.below(3) as usize];
                container["args"] =
                    json!(["--config=/etc/app/config.yaml", format!("--log-level={level}"), "--port=8080"]);
            }
        } else {
            container["args"] =
                json!(["proxy", "sidecar", "--domain", format!("{ns}.svc.cluster.local"), "--proxyLogLevel=warning"]);
        }
        containers.push(container);
        images.push((name, image, dr.hex(64)));
    }

    let container_fields: Map<String, Value> = images
        .iter()
        .map(|(n, _, _)| {
            let fields = json!({".": {}, "f:image": {}, "f:name": {}, "f:resources": {}, "f:env": {}, "f:terminationMessagePath": {}, "f:imagePullPolicy": {}});
            (format!("k:{{\"name\":\"{n}\"}}"), fields)
        })
        .collect();
    let label_fields: Map<String, Value> = std::iter::once((".".to_owned(), json!({})))
        .chain(labels.keys().map(|k| (format!("f:{k}"), json!({}))))
        .collect();
    let managed = json!([
        {"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1", "time": created, "fieldsType": "FieldsV1",
         "fieldsV1": {"f:metadata": {"f:generateName": {}, "f:labels": label_fields, "f:ownerReferences": {".": {}, format!("k:{{\"uid\":\"{rs_uid}\"}}"): {}}},
                      "f:spec": {"f:containers": container_fields, "f:dnsPolicy": {}, "f:enableServiceLinks": {}, "f:restartPolicy": {}, "f:schedulerName": {}, "f:securityContext": {}, "f:terminationGracePeriodSeconds": {}, "f:volumes": {}}}},
        {"manager": "kubelet", "operation": "Update", "apiVersion": "v1", "time": created, "fieldsType": "FieldsV1",
         "fieldsV1": {"f:status": {"f:conditions": {"k:{\"type\":\"Ready\"}": {".": {}, "f:lastProbeTime": {}, "f:lastTransitionTime": {}, "f:status": {}, "f:type": {}}}, "f:containerStatuses": {}, "f:hostIP": {}, "f:phase": {}, "f:podIP": {}, "f:podIPs": {}, "f:startTime": {}}},
         "subresource": "status"}
    ]);
    let statuses: Vec<Value> = images
        .iter()
        .zip(container_ids)
        .map(|((n, image, sha), container_id)| {
            let repository = image.split(':').next().unwrap_or_default();
            json!({"name": n, "state": {"running": {"startedAt": created}}, "lastState": {}, "ready": true, "restartCount": restarts,
                   "image": image, "imageID": format!("{repository}@sha256:{sha}"), "containerID": container_id, "started": true})
        })
        .collect();
    let condition =
        |t: &str| json!({"type": t, "status": "True", "lastProbeTime": null, "lastTransitionTime": created});
    let mut volumes = vec![json!({"name": token_volume, "projected": {"sources": [
        {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}
    ], "defaultMode": 420}})];
    if dr.below(2) == 0 {
        volumes.push(json!({"name": "config", "configMap": {"name": format!("{app}-config"), "defaultMode": 420}}));
    }
    let grace = [30, 60, 10][dr.below(3) as usize];
    let pod = json!({
        "metadata": {"name": name, "generateName": format!("{replica_set}-"), "namespace": ns, "uid": uid, "resourceVersion": rv,
            "creationTimestamp": created, "labels": labels, "annotations": annotations,
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": replica_set, "uid": rs_uid, "controller": true, "blockOwnerDeletion": true}],
            "managedFields": managed},
        "spec": {"volumes": volumes, "containers": containers, "restartPolicy": "Always", "terminationGracePeriodSeconds": grace,
            "dnsPolicy": "ClusterFirst", "serviceAccountName": format!("{app}-sa"), "serviceAccount": format!("{app}-sa"), "nodeName": node,
            "securityContext": {}, "schedulerName": "default-scheduler",
            "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
                            {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}],
            "priority": 0, "enableServiceLinks": true, "preemptionPolicy": "PreemptLowerPriority"},
        "status": {"phase": "Running", "conditions": [condition("Initialized"), condition("Ready"), condition("ContainersReady"), condition("PodScheduled")],
            "hostIP": host_ip, "hostIPs": [{"ip": host_ip}], "podIP": pod_ip, "podIPs": [{"ip": pod_ip}], "startTime": created,
            "containerStatuses": statuses, "qosClass": "Burstable"}
    });
    pod.to_string()
}
