//! kubectl's checks of tests/integration/fake_server/kubectl.rs, against the real server: what the fake is
//! held to, the real server does too (and where the two differ, docs/fidelity.md says why).

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::thread;

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube_watcher::{Api, ListParams, Shard, Watcher};

use crate::bed::{Bed, User, list_all, same_as_server};
use crate::common::{WAIT, collect_until};
use crate::scale_out::pod;

#[test]
fn kubectl_lists_in_chunks_and_reads_the_shard_selector() {
    let Some(bed) = Bed::shared() else { return };
    let ns = bed.namespace("kubectl-chunks");
    let api: Api<Pod> = Api::namespaced(bed.client(), &ns);
    for i in 0..5 {
        api.create(&pod(&ns, &format!("p{i}"))).unwrap();
    }
    let out = bed.kubectl_ok(&["-n", &ns, "get", "pods", "--chunk-size=2", "-o", "name"], None);
    assert_eq!(out.lines().collect::<Vec<_>>(), ["pod/p0", "pod/p1", "pod/p2", "pod/p3", "pod/p4"]);

    let shard = Shard::of(0, 2).unwrap();
    let selector = shard.selector().replace(' ', "%20").replace('\'', "%27").replace(',', "%2C");
    let out =
        bed.kubectl_ok(&["get", "--raw", &format!("/api/v1/namespaces/{ns}/pods?shardSelector={selector}")], None);
    let list: serde_json::Value = serde_json::from_str(&out).unwrap();
    let uids: Vec<&str> =
        list["items"].as_array().unwrap().iter().map(|i| i["metadata"]["uid"].as_str().unwrap()).collect();
    if bed.filters_shards() {
        let echoed = list["metadata"]["shardInfo"]["selector"].as_str().expect("shardInfo on a gated server");
        assert_eq!(echoed, shard.selector());
        let want = list_all(&api, &ListParams::default())
            .iter()
            .filter(|p| shard.contains(p.metadata.uid.as_deref().unwrap()))
            .count();
        assert_eq!(uids.len(), want);
        let (ok, _, err) = bed.kubectl(User::Admin, &["get", "--raw", "/api/v1/pods?shardSelector=nonsense"], None);
        assert!(!ok && err.contains("invalid shard selector"), "{err}");
    } else {
        // A minor without the gate ignores the parameter, a malformed one too.
        assert!(list["metadata"].get("shardInfo").is_none(), "{}", list["metadata"]);
        assert_eq!(uids.len(), 5);
        let (ok, _, err) = bed.kubectl(User::Admin, &["get", "--raw", "/api/v1/pods?shardSelector=nonsense"], None);
        assert!(ok, "{err}");
    }
    // Without the gate the parameter is ignored: every pod, no shardInfo.
    let (ok, out, err) = bed.kubectl(
        User::NoGate,
        &["get", "--raw", &format!("/api/v1/namespaces/{ns}/pods?shardSelector={selector}")],
        None,
    );
    assert!(ok, "{err}");
    let list: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(list["metadata"].get("shardInfo").is_none(), "{}", list["metadata"]);
    assert_eq!(list["items"].as_array().unwrap().len(), 5);
}

#[test]
fn kubectl_watch_prints_a_pod_created_afterwards() {
    let Some(bed) = Bed::shared() else { return };
    let ns = bed.namespace("kubectl-watch");
    let mut child = Command::new("kubectl")
        .env("KUBECONFIG", bed.kubeconfig(User::Admin))
        .args(["-n", &ns, "get", "pods", "--watch", "-o", "name"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    // kubectl lists first (nothing here) and then watches; a pod created in between arrives
    // either way. Keep creating until one shows, so the test waits for kubectl, not a guess.
    let api: Api<Pod> = Api::namespaced(bed.client(), &ns);
    api.create(&pod(&ns, "late")).unwrap();
    let line = rx.recv_timeout(WAIT).expect("kubectl printed the new pod");
    assert_eq!(line, "pod/late");
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn kubectl_creates_applies_patches_and_deletes() {
    let Some(bed) = Bed::shared() else { return };
    let ns = bed.namespace("kubectl-writes");
    // A watcher follows what kubectl does, from creation to deletion.
    let api: Api<ConfigMap> = Api::namespaced(bed.client(), &ns);
    let watcher = Watcher::new(api.clone(), kube_watcher::Config::default()).unwrap();
    watcher.receiver(); // a consumer from the start: every event, not a replay of the store
    watcher.store().wait_until_ready(WAIT).unwrap();
    let manifest = |mode: &str| {
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  namespace: {ns}\ndata:\n  mode: {mode}\n"
        )
    };
    let out = bed.kubectl_ok(&["create", "-f", "-"], Some(&manifest("blue")));
    assert!(out.contains("configmap/settings created"), "{out}");
    bed.kubectl_ok(&["apply", "-f", "-"], Some(&manifest("green")));
    let out = bed.kubectl_ok(&["-n", &ns, "get", "configmap", "settings", "-o", "jsonpath={.data.mode}"], None);
    assert_eq!(out, "green");
    bed.kubectl_ok(&["-n", &ns, "label", "configmap", "settings", "tier=gold"], None);
    bed.kubectl_ok(&["-n", &ns, "annotate", "configmap", "settings", "note=hi"], None);
    bed.kubectl_ok(
        &["-n", &ns, "patch", "configmap", "settings", "--type=merge", "-p", r#"{"data":{"mode":"red"}}"#],
        None,
    );
    let out = bed.kubectl_ok(
        &[
            "-n",
            &ns,
            "get",
            "configmap",
            "settings",
            "-o",
            "jsonpath={.metadata.labels.tier} {.metadata.annotations.note} {.data.mode}",
        ],
        None,
    );
    assert_eq!(out, "gold hi red");
    // Server-side apply, which the fake answers with 415 (docs/fidelity.md).
    // It takes over the field `kubectl patch` set, hence --force-conflicts.
    bed.kubectl_ok(&["apply", "--server-side", "--force-conflicts", "-f", "-"], Some(&manifest("ssa")));
    let out = bed.kubectl_ok(&["-n", &ns, "delete", "configmap", "settings"], None);
    assert!(out.contains("deleted"), "{out}");
    let (ok, _, err) = bed.kubectl(User::Admin, &["-n", &ns, "get", "configmap", "settings"], None);
    assert!(!ok && err.contains("NotFound"), "{err}");
    let seen = collect_until(&watcher, |seen| seen.iter().any(|e| e == "Delete(settings)"));
    let changes = seen.iter().filter(|e| *e == "Apply(settings)").count();
    // create, apply, label, annotate, patch and the server-side apply: each changed the object,
    // and a watch sends every change.
    assert!(changes >= 6, "{seen:?}");
    same_as_server(&watcher.store(), &api, &ListParams::default());
}

#[test]
fn kubectl_reads_discovery_and_short_names() {
    let Some(bed) = Bed::shared() else { return };
    let out = bed.kubectl_ok(&["get", "--raw", "/api/v1"], None);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["kind"], "APIResourceList");
    let out = bed.kubectl_ok(&["api-resources", "-o", "wide"], None);
    for expected in ["deployments", "deploy", "apps/v1", "configmaps", "cm", "leases", "coordination.k8s.io/v1"] {
        assert!(out.contains(expected), "{expected}: {out}");
    }
    // Every short name kubectl lists names, through the library's discovery, what it names
    // for kubectl (the columns are aligned: cut each row at the header's positions). A short
    // name two types share (`ev`: core events and events.k8s.io's) is the one `kubectl explain`
    // picks, which says GROUP only outside the core group.
    let mut lines = out.lines();
    let header = lines.next().unwrap();
    let column = |name: &str| header.find(name).unwrap();
    let (short_at, version_at, namespaced_at) = (column("SHORTNAMES"), column("APIVERSION"), column("NAMESPACED"));
    let mut owners: std::collections::BTreeMap<String, Vec<(String, String)>> = Default::default();
    for row in lines {
        let cell = |from: usize, to: usize| row.get(from..to.min(row.len())).unwrap_or_default().trim();
        let (plural, version) = (cell(0, short_at), cell(version_at, namespaced_at));
        let group = version.rsplit_once('/').map_or("", |(group, _)| group);
        for short in cell(short_at, version_at).split(',').filter(|s| !s.is_empty()) {
            owners.entry(short.to_owned()).or_default().push((group.to_owned(), plural.to_owned()));
        }
    }
    let client = bed.client();
    let mut checked = 0;
    for (short, rows) in &owners {
        let found = client.discover(short).unwrap_or_else(|e| panic!("{short}: {e}"));
        let found = (found.group, found.plural);
        if let [only] = rows.as_slice() {
            assert_eq!(&found, only, "{short}");
        } else {
            let explained = bed.kubectl_ok(&["explain", short], None);
            let group = explained.lines().find_map(|l| l.strip_prefix("GROUP:")).map_or("", str::trim);
            let kubectls = rows.iter().find(|(g, _)| g == group).unwrap_or_else(|| panic!("{short}: {explained}"));
            assert_eq!(&found, kubectls, "{short}: one of {rows:?}");
        }
        checked += 1;
    }
    assert!(checked >= 20, "{checked} short names in {out}");
    let ns = bed.namespace("kubectl-short");
    bed.kubectl_ok(&["-n", &ns, "create", "deployment", "web", "--image=registry.example/web:1"], None);
    let out = bed.kubectl_ok(&["-n", &ns, "get", "deploy", "-o", "name"], None);
    assert_eq!(out.trim(), "deployment.apps/web");
    bed.kubectl_ok(&["-n", &ns, "scale", "deploy", "web", "--replicas=3"], None);
    let out = bed.kubectl_ok(&["-n", &ns, "get", "deploy", "web", "-o", "jsonpath={.spec.replicas}"], None);
    assert_eq!(out, "3");
}

#[test]
fn kubectl_get_pods_shows_the_servers_columns() {
    let Some(bed) = Bed::shared() else { return };
    let ns = bed.namespace("kubectl-columns");
    let api: Api<Pod> = Api::namespaced(bed.client(), &ns);
    api.create(&pod(&ns, "web")).unwrap();
    let out = bed.kubectl_ok(&["-n", &ns, "get", "pods"], None);
    let mut lines = out.lines();
    let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]);
    let row: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    // No scheduler runs on the bed: the pod stays Pending.
    assert_eq!(&row[..4], ["web", "0/1", "Pending", "0"]);
}
