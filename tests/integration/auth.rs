//! Connecting and authenticating, end to end against the fake API server: kubeconfig files and
//! fixtures, TLS (CA data and file, client certificates, wrong CA, tls-server-name, insecure),
//! token files rotating under a running watch, exec plugins, proxies, and secrets kept out of
//! Debug output and errors.
#![cfg(feature = "testing")]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use crate::common::{WAIT, refused_port, server_on, server_to_restart};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube_watcher::testing::FakeApiServer;
use kube_watcher::{Api, Client, Config, Event, KubeconfigOptions, ListParams, Watcher};

fn b64(data: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(data)
}

/// A fresh directory under the system temp dir, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("kw-auth-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
    fn write(&self, name: &str, content: &str) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, content).unwrap();
        path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn pod(ns: &str, name: &str) -> Pod {
    Pod {
        metadata: ObjectMeta { name: Some(name.into()), namespace: Some(ns.into()), ..ObjectMeta::default() },
        ..Pod::default()
    }
}

fn tls_server() -> FakeApiServer {
    FakeApiServer::builder().tls(true).start()
}

/// A one-context kubeconfig; `cluster` and `user` are the indented bodies of those entries.
fn kubeconfig(cluster: &str, user: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: test\nclusters:\n- name: c\n  cluster:\n{cluster}\ncontexts:\n\
         - name: test\n  context: {{cluster: c, user: u}}\nusers:\n- name: u\n  user:\n{user}\n"
    )
}

fn ca_data_cluster(server: &FakeApiServer) -> String {
    format!("    server: {}\n    certificate-authority-data: {}", server.url(), b64(&server.ca_pem().unwrap()))
}

fn list_pods(client: Client) -> kube_watcher::Result<usize> {
    Api::<Pod>::all(client).list(&ListParams::default()).map(|l| l.items.len())
}

fn yaml_client(yaml: &str) -> kube_watcher::Result<Client> {
    Client::from_kubeconfig_yaml(yaml, &KubeconfigOptions::default())
}

#[test]
fn tls_with_ca_data_and_a_token_lists_pods() {
    let server = FakeApiServer::builder().tls(true).token("t0ken-abc").start();
    server.create(&pod("a", "p1")).unwrap();
    let client = yaml_client(&kubeconfig(&ca_data_cluster(&server), "    token: t0ken-abc")).unwrap();
    assert_eq!(list_pods(client).unwrap(), 1);
    let last = server.requests().pop().unwrap();
    assert_eq!(last.user.as_deref(), Some("token-user-1"));
}

#[test]
fn tls_with_a_ca_file_relative_to_the_kubeconfig_lists_pods() {
    let server = tls_server();
    let dir = TempDir::new("cafile");
    std::fs::create_dir_all(dir.0.join("pki")).unwrap();
    dir.write("pki/ca.pem", &server.ca_pem().unwrap());
    let path = dir.write(
        "config",
        &kubeconfig(&format!("    server: {}\n    certificate-authority: pki/ca.pem", server.url()), "    {}"),
    );
    let client = Client::from_kubeconfig_path(&path, &KubeconfigOptions::default()).unwrap();
    assert_eq!(list_pods(client).unwrap(), 0);
}

#[test]
fn a_required_client_certificate_is_presented() {
    let server = FakeApiServer::builder().tls(true).client_ca_required(true).start();
    let (cert, key) = server.issue_client_cert("alice", &["devs"]);
    let user = format!("    client-certificate-data: {}\n    client-key-data: {}", b64(&cert), b64(&key));
    let client = yaml_client(&kubeconfig(&ca_data_cluster(&server), &user)).unwrap();
    assert_eq!(list_pods(client).unwrap(), 0);
    assert_eq!(server.requests().pop().unwrap().user.as_deref(), Some("alice"));

    let without = yaml_client(&kubeconfig(&ca_data_cluster(&server), "    {}")).unwrap();
    let e = list_pods(without).unwrap_err().to_string();
    assert!(e.contains("asks for a client certificate") && e.contains("none is configured"), "{e}");
}

#[test]
fn client_certificate_files_are_read_relative_to_the_kubeconfig() {
    let server = FakeApiServer::builder().tls(true).client_ca_required(true).start();
    let (cert, key) = server.issue_client_cert("bob", &[]);
    let dir = TempDir::new("certfiles");
    dir.write("bob.crt", &cert);
    dir.write("bob.key", &key);
    let user = "    client-certificate: bob.crt\n    client-key: bob.key";
    let path = dir.write("config", &kubeconfig(&ca_data_cluster(&server), user));
    let client = Client::from_kubeconfig_path(&path, &KubeconfigOptions::default()).unwrap();
    assert_eq!(list_pods(client).unwrap(), 0);
    assert_eq!(server.requests().pop().unwrap().user.as_deref(), Some("bob"));
}

#[test]
fn a_key_that_does_not_match_its_certificate_is_refused_when_loading() {
    let server = tls_server();
    let (cert, _) = server.issue_client_cert("a", &[]);
    let (_, other_key) = server.issue_client_cert("b", &[]);
    let user = format!("    client-certificate-data: {}\n    client-key-data: {}", b64(&cert), b64(&other_key));
    let e = yaml_client(&kubeconfig(&ca_data_cluster(&server), &user)).unwrap_err();
    assert_eq!(
        e.to_string(),
        "kubeconfig (in memory): users[0].user.client-key-data: the private key does not match the certificate"
    );
}

#[test]
fn a_wrong_ca_fails_with_a_message_about_the_certificate() {
    let server = tls_server();
    let other = tls_server();
    let cluster =
        format!("    server: {}\n    certificate-authority-data: {}", server.url(), b64(&other.ca_pem().unwrap()));
    let client = yaml_client(&kubeconfig(&cluster, "    {}")).unwrap();
    let e = list_pods(client).unwrap_err().to_string();
    assert!(e.contains("UnknownIssuer") || e.to_lowercase().contains("certificate"), "{e}");
}

#[test]
fn insecure_skip_tls_verify_accepts_an_unknown_ca() {
    let server = tls_server();
    let cluster = format!("    server: {}\n    insecure-skip-tls-verify: true", server.url());
    assert_eq!(list_pods(yaml_client(&kubeconfig(&cluster, "    {}")).unwrap()).unwrap(), 0);
    let both = format!("{}\n    insecure-skip-tls-verify: true", ca_data_cluster(&server));
    let e = yaml_client(&kubeconfig(&both, "    {}")).unwrap_err().to_string();
    assert!(e.contains("clusters[0].cluster.insecure-skip-tls-verify: cannot be combined"), "{e}");
}

#[test]
fn tls_server_name_is_used_for_verification() {
    // The fake's certificate names localhost and 127.0.0.1; the URL stays the IP address.
    let server = tls_server();
    let good = format!("{}\n    tls-server-name: localhost", ca_data_cluster(&server));
    assert_eq!(list_pods(yaml_client(&kubeconfig(&good, "    {}")).unwrap()).unwrap(), 0);
    let wrong = format!("{}\n    tls-server-name: apiserver.example", ca_data_cluster(&server));
    let e = list_pods(yaml_client(&kubeconfig(&wrong, "    {}")).unwrap()).unwrap_err().to_string();
    assert!(e.contains("apiserver.example") || e.contains("NotValidForName"), "{e}");
}

#[test]
fn credentials_are_not_sent_over_plain_http_unless_allowed() {
    let server = FakeApiServer::builder().token("plain-tok").start();
    let yaml = kubeconfig(&format!("    server: {}", server.url()), "    token: plain-tok");
    let e = yaml_client(&yaml).unwrap_err().to_string();
    assert!(e.contains("clusters[0].cluster.server") && e.contains("plain http://"), "{e}");
    assert!(!e.contains("plain-tok"), "{e}");
    let options = KubeconfigOptions { allow_http_credentials: true, ..KubeconfigOptions::default() };
    assert_eq!(list_pods(Client::from_kubeconfig_yaml(&yaml, &options).unwrap()).unwrap(), 0);
}

/// `server` with `user:password@` put in front of its host.
fn with_userinfo(url: &str, userinfo: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap();
    format!("{scheme}://{userinfo}@{rest}")
}

#[test]
fn credentials_in_the_server_url_are_refused_over_plain_http_unless_allowed() {
    let server = FakeApiServer::start();
    let url = with_userinfo(&server.url(), "admin:url-s3cret");
    // No user entry at all: the URL's user info is the only credential.
    let yaml = format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: test\nclusters:\n- name: c\n  cluster:\n    server: {url}\n\
         contexts:\n- name: test\n  context: {{cluster: c}}\n"
    );
    let e = yaml_client(&yaml).unwrap_err().to_string();
    assert!(e.contains("clusters[0].cluster.server") && e.contains("plain http://"), "{e}");
    assert!(e.contains("user name and password"), "{e}");
    assert!(!e.contains("url-s3cret"), "{e}");
    let options = KubeconfigOptions { allow_http_credentials: true, ..KubeconfigOptions::default() };
    let client = Client::from_kubeconfig_yaml(&yaml, &options).unwrap();
    for text in [format!("{client:?}"), format!("{client:#?}")] {
        assert!(!text.contains("url-s3cret"), "{text}");
    }
    assert_eq!(list_pods(client).unwrap(), 0);
    // The fake redacts the value; its encoding is checked in src/auth/mod.rs's unit tests.
    assert_eq!(server.requests().pop().unwrap().header("authorization"), Some("<redacted>"));
}

#[test]
fn client_from_url_refuses_user_info_over_plain_http_and_never_prints_it() {
    let server = FakeApiServer::start();
    let e = Client::from_url(&with_userinfo(&server.url(), "admin:url-s3cret")).unwrap_err().to_string();
    assert!(e.contains("plain http://") && e.contains("<redacted>@127.0.0.1"), "{e}");
    assert!(!e.contains("url-s3cret"), "{e}");
    // Over https it is HTTP Basic, and still never printed: not by Debug, not by an error that
    // names the server (nothing listens on port 1).
    let client = Client::from_url("https://admin:url-s3cret@127.0.0.1:1/prefix").unwrap();
    for text in [format!("{client:?}"), format!("{client:#?}"), format!("{:?}", Api::<Pod>::all(client.clone()))] {
        assert!(!text.contains("url-s3cret") && !text.contains("admin:"), "{text}");
    }
    let e = list_pods(client).unwrap_err();
    let text = format!("{e} {e:?}");
    assert!(text.contains("127.0.0.1:1") && !text.contains("url-s3cret"), "{text}");
    // A URL that is refused is quoted without its user info.
    let e = Client::from_url("https://admin:url-s3cret@127.0.0.1/a b").unwrap_err().to_string();
    assert!(e.contains("<redacted>@127.0.0.1/a b") && !e.contains("url-s3cret"), "{e}");
}

#[test]
fn credentials_in_an_https_server_url_are_sent_as_basic_auth_unless_the_user_has_its_own() {
    let server = FakeApiServer::builder().tls(true).token("user-tok").start();
    let cluster = format!(
        "    server: {}\n    certificate-authority-data: {}",
        with_userinfo(&server.url(), "ad%40min:p%3Aw"),
        b64(&server.ca_pem().unwrap())
    );
    let client = yaml_client(&kubeconfig(&cluster, "    {}")).unwrap();
    let e = list_pods(client).unwrap_err();
    assert_eq!(e.status(), Some(401), "the fake knows no basic-auth users: {e}");
    assert_eq!(server.requests().pop().unwrap().header("authorization"), Some("<redacted>"));
    // The user's token wins, as the Authorization header does over URL user info in client-go.
    let client = yaml_client(&kubeconfig(&cluster, "    token: user-tok")).unwrap();
    assert_eq!(list_pods(client).unwrap(), 0);
    assert_eq!(server.requests().pop().unwrap().user.as_deref(), Some("token-user-1"));
}

#[test]
fn a_refused_connection_to_a_url_with_credentials_does_not_print_them() {
    // Not a port bound and freed: another test's server could take it and answer the watcher.
    let refused = refused_port();
    let port = refused.port;
    let taken = FakeApiServer::builder().port(port).try_start().err().map(|e| e.kind());
    assert_eq!(taken, Some(std::io::ErrorKind::AddrInUse), "no server can take port {port}");
    let yaml = kubeconfig(&format!("    server: http://admin:url-s3cret@127.0.0.1:{port}"), "    {}");
    let options = KubeconfigOptions { allow_http_credentials: true, ..KubeconfigOptions::default() };
    let client = Client::from_kubeconfig_yaml(&yaml, &options).unwrap();
    let e = list_pods(client.clone()).unwrap_err();
    let text = format!("{e} {e:?}");
    assert!(text.contains(&format!("connection to 127.0.0.1:{port}")) && text.contains("refused"), "{text}");
    assert!(!text.contains("url-s3cret"), "{text}");
    let watcher = Watcher::new(Api::<Pod>::all(client), Config::default()).unwrap();
    // The list starts with `Init`; no object can come from a port nothing listens on.
    let e = loop {
        match watcher.recv_timeout(WAIT).unwrap() {
            Err(e) => break e,
            Ok(Event::Init) => {}
            Ok(event) => panic!("an event from a port nothing listens on: {event:?}"),
        }
    };
    let text = format!("{e} {e:?}");
    assert!(text.contains("refused") && !text.contains("url-s3cret"), "{text}");
}

#[test]
fn basic_auth_and_impersonation_headers_are_sent() {
    let server = tls_server();
    let user = "    username: admin\n    password: pw\n    as: jane\n    as-groups: [devs, ops]\n    as-uid: \"42\"\n    \
                as-user-extra:\n      example.org/scope: [a]";
    let client = yaml_client(&kubeconfig(&ca_data_cluster(&server), user)).unwrap();
    list_pods(client).unwrap();
    let req = server.requests().pop().unwrap();
    assert_eq!(req.header("impersonate-user"), Some("jane"));
    assert_eq!(req.header("impersonate-uid"), Some("42"));
    let groups: Vec<&str> =
        req.headers.iter().filter(|(n, _)| n == "impersonate-group").map(|(_, v)| v.as_str()).collect();
    assert_eq!(groups, ["devs", "ops"]);
    assert_eq!(
        req.header("impersonate-extra-example.org%2fscope").or(req.header("impersonate-extra-example.org%2Fscope")),
        Some("a")
    );
    assert!(req.header("authorization").is_some());
}

#[test]
fn kubeconfig_errors_name_the_file_and_the_field() {
    let dir = TempDir::new("errors");
    let check = |name: &str, yaml: &str, expected: &str| {
        let path = dir.write(name, yaml);
        let e = Client::from_kubeconfig_path(&path, &KubeconfigOptions::default()).unwrap_err().to_string();
        assert_eq!(e, format!("kubeconfig {}: {expected}", path.display()), "{name}");
    };
    let cluster = "    server: https://127.0.0.1:1";
    check(
        "exec",
        &kubeconfig(
            cluster,
            "    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      interactiveMode: Never",
        ),
        "users[0].user.exec.command: missing",
    );
    check(
        "v1-mode",
        &kubeconfig(cluster, "    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: x"),
        "users[0].user.exec.interactiveMode: missing (required for client.authentication.k8s.io/v1)",
    );
    check("server", &kubeconfig("    insecure-skip-tls-verify: true", "    {}"), "clusters[0].cluster.server: missing");
    check(
        "pem",
        &kubeconfig(&format!("{cluster}\n    certificate-authority-data: \"-----BEGIN CERTIFICATE-----\""), "    {}"),
        "clusters[0].cluster.certificate-authority-data: holds PEM text; *-data fields hold base64 of PEM (base64 -w0 < file.pem)",
    );
    check(
        "gcp",
        &kubeconfig(cluster, "    auth-provider:\n      name: gcp\n      config: {access-token: secret-at}"),
        "users[0].user.auth-provider: auth-provider \"gcp\" is not supported; it was removed in Kubernetes 1.26; use the \
         exec plugin gke-gcloud-auth-plugin (gcloud components install gke-gcloud-auth-plugin)",
    );
    check(
        "token-and-basic",
        &kubeconfig(cluster, "    token: t\n    username: u\n    password: p"),
        "users[0].user.username: more than one authentication method: token/tokenFile and username/password; keep one",
    );
    check(
        "missing-user",
        "current-context: x\nclusters: [{name: c, cluster: {server: 'https://k'}}]\ncontexts: [{name: x, context: {cluster: c, user: nobody}}]\n",
        "contexts[0].context.user: context \"x\" refers to user \"nobody\", which the kubeconfig does not define",
    );
    check(
        "dup",
        "clusters: [{name: c, cluster: {server: 'https://k'}}, {name: c, cluster: {server: 'https://k'}}]\n",
        "clusters[1].name: duplicate name \"c\" (also clusters[0])",
    );
    check("ctx", "current-context: nope\n", "current-context: context \"nope\" is not defined");
    let missing = dir.0.join("does-not-exist");
    let e = Client::from_kubeconfig_path(&missing, &KubeconfigOptions::default()).unwrap_err().to_string();
    assert!(e.starts_with(&format!("kubeconfig {}: cannot read", missing.display())), "{e}");
}

#[test]
fn options_override_context_and_namespace() {
    let server = tls_server();
    let yaml = format!(
        "current-context: a\nclusters:\n- name: c\n  cluster:\n{}\ncontexts:\n- name: a\n  context: {{cluster: c, user: u, namespace: one}}\n\
         - name: b\n  context: {{cluster: c, user: u, namespace: two}}\nusers:\n- name: u\n  user: {{}}\n",
        ca_data_cluster(&server)
    );
    assert_eq!(yaml_client(&yaml).unwrap().default_namespace(), "one");
    let b = KubeconfigOptions { context: Some("b".into()), ..KubeconfigOptions::default() };
    assert_eq!(Client::from_kubeconfig_yaml(&yaml, &b).unwrap().default_namespace(), "two");
    let ns = KubeconfigOptions { namespace: Some("three".into()), ..b };
    let client = Client::from_kubeconfig_yaml(&yaml, &ns).unwrap();
    assert_eq!(client.default_namespace(), "three");
    list_pods(client).unwrap();
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/kubeconfig").join(name)
}

#[test]
fn kubeconfigs_written_by_kind_minikube_eks_gke_and_aks_load() {
    let cases = [
        ("kind.yaml", "https://127.0.0.1:40671", "default"),
        ("minikube.yaml", "https://192.168.49.2:8443", "dev"),
        ("eks.yaml", "https://0123456789ABCDEF0123456789ABCDEF.gr7.us-west-2.eks.amazonaws.com", "default"),
        ("gke.yaml", "https://203.0.113.10", "default"),
        ("aks.yaml", "https://demo-dns-0a1b2c3d.hcp.westeurope.azmk8s.io:443", "apps"),
    ];
    for (file, server, namespace) in cases {
        let client = Client::from_kubeconfig_path(fixture(file), &KubeconfigOptions::default())
            .unwrap_or_else(|e| panic!("{file}: {e}"));
        assert_eq!(client.default_namespace(), namespace, "{file}");
        assert!(format!("{client:?}").contains(&format!("{server:?}")), "{file}: {client:?}");
    }
}

#[test]
fn a_missing_exec_plugin_reports_its_install_hint() {
    let client = Client::from_kubeconfig_path(fixture("gke.yaml"), &KubeconfigOptions::default()).unwrap();
    let e = list_pods(client).unwrap_err().to_string();
    assert!(e.contains("gke-gcloud-auth-plugin-kube-watcher-fixture"), "{e}");
    assert!(e.contains("install hint: Install gke-gcloud-auth-plugin for use with kubectl"), "{e}");
}

/// A shell exec plugin that prints `cred.json` from its directory, counts its runs and records
/// `KUBERNETES_EXEC_INFO` and one configured variable.
#[cfg(unix)]
fn exec_plugin(dir: &TempDir) -> PathBuf {
    use std::os::unix::fs::PermissionsExt as _;
    let d = dir.0.display();
    let script = format!(
        "#!/bin/sh\necho run >> '{d}/runs'\nprintf '%s' \"$KUBERNETES_EXEC_INFO\" > '{d}/info.json'\n\
         printf '%s' \"$PLUGIN_VAR\" > '{d}/var'\nif [ -f '{d}/fail' ]; then echo 'please log in first' >&2; exit 3; fi\n\
         cat '{d}/cred.json'\nif [ -f '{d}/next.json' ]; then mv '{d}/next.json' '{d}/cred.json'; fi\n"
    );
    let path = dir.write("plugin.sh", &script);
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

#[cfg(unix)]
fn credential(token: &str, expires: Option<&str>) -> String {
    let exp = expires.map(|e| format!(",\"expirationTimestamp\":\"{e}\"")).unwrap_or_default();
    format!(
        "{{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\",\"status\":{{\"token\":\"{token}\"{exp}}}}}"
    )
}

#[cfg(unix)]
fn runs(dir: &TempDir) -> usize {
    std::fs::read_to_string(dir.0.join("runs")).map(|s| s.lines().count()).unwrap_or(0)
}

#[cfg(unix)]
fn exec_kubeconfig(server: &FakeApiServer, dir: &TempDir) -> PathBuf {
    exec_plugin(dir);
    let user = "    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: ./plugin.sh\n      \
                interactiveMode: IfAvailable\n      provideClusterInfo: true\n      env:\n      - {name: PLUGIN_VAR, value: from-config}";
    let cluster = format!(
        "{}\n    extensions:\n    - name: client.authentication.k8s.io/exec\n      extension: {{audience: fake}}",
        ca_data_cluster(server)
    );
    dir.write("config", &kubeconfig(&cluster, user))
}

#[cfg(unix)]
#[test]
fn an_exec_plugin_token_is_cached_and_refreshed_once_after_a_401() {
    let server = FakeApiServer::builder().tls(true).token("exec-tok-1").start();
    let dir = TempDir::new("exec401");
    let path = exec_kubeconfig(&server, &dir);
    dir.write("cred.json", &credential("exec-tok-1", None));
    let client = Client::from_kubeconfig_path(&path, &KubeconfigOptions::default()).unwrap();
    assert_eq!(runs(&dir), 0, "plugins run when a request needs them, not when loading");
    list_pods(client.clone()).unwrap();
    list_pods(client.clone()).unwrap();
    assert_eq!(runs(&dir), 1, "the credential is cached");

    let info: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.0.join("info.json")).unwrap()).unwrap();
    assert_eq!(info["apiVersion"], "client.authentication.k8s.io/v1");
    assert_eq!(info["spec"]["interactive"], false);
    assert_eq!(info["spec"]["cluster"]["server"], server.url());
    assert_eq!(info["spec"]["cluster"]["config"]["audience"], "fake");
    assert!(info["spec"]["cluster"]["certificate-authority-data"].is_string());
    assert_eq!(std::fs::read_to_string(dir.0.join("var")).unwrap(), "from-config");

    // Rotate: the server stops accepting the old token; the plugin now prints a new one.
    server.add_token("exec-tok-2", "exec-user");
    server.revoke_token("exec-tok-1");
    dir.write("cred.json", &credential("exec-tok-2", None));
    assert_eq!(list_pods(client).unwrap(), 0, "401 → plugin re-run → retried with the new token");
    assert_eq!(runs(&dir), 2);
    assert_eq!(server.requests().pop().unwrap().user.as_deref(), Some("exec-user"));
}

#[cfg(unix)]
#[test]
fn an_exec_credential_near_its_expiry_is_fetched_again() {
    let server = FakeApiServer::builder().tls(true).token("short-lived").start();
    let dir = TempDir::new("execexpiry");
    let path = exec_kubeconfig(&server, &dir);
    // Already inside the 30 s refresh margin (in the past): every request runs the plugin.
    dir.write("cred.json", &credential("short-lived", Some("2000-01-01T00:00:00Z")));
    let client = Client::from_kubeconfig_path(&path, &KubeconfigOptions::default()).unwrap();
    list_pods(client.clone()).unwrap();
    list_pods(client.clone()).unwrap();
    assert_eq!(runs(&dir), 2);
    dir.write("cred.json", &credential("short-lived", Some("2999-01-01T00:00:00Z")));
    list_pods(client.clone()).unwrap();
    list_pods(client).unwrap();
    assert_eq!(runs(&dir), 3, "a credential valid for long is reused");
}

#[cfg(unix)]
#[test]
fn a_failing_exec_plugin_reports_its_stderr_but_never_the_token() {
    let server = FakeApiServer::builder().tls(true).token("never-shown").start();
    let dir = TempDir::new("execfail");
    let path = exec_kubeconfig(&server, &dir);
    dir.write("cred.json", &credential("never-shown", None));
    dir.write("fail", "");
    let client = Client::from_kubeconfig_path(&path, &KubeconfigOptions::default()).unwrap();
    let e = list_pods(client).unwrap_err().to_string();
    assert!(e.contains("exit status: 3") && e.contains("please log in first"), "{e}");
    assert!(e.contains("users[0].user.exec"), "{e}");
    assert!(!e.contains("never-shown"), "{e}");
}

#[test]
fn a_rotated_token_file_is_picked_up_by_a_running_watch() {
    let server =
        FakeApiServer::builder().tls(true).token("rot-1").bookmark_interval(Duration::from_millis(100)).start();
    server.create(&pod("a", "before")).unwrap();
    let dir = TempDir::new("rotation");
    dir.write("token", "rot-1\n");
    let path = dir.write("config", &kubeconfig(&ca_data_cluster(&server), "    tokenFile: token"));
    let client = Client::from_kubeconfig_path(&path, &KubeconfigOptions::default()).unwrap();
    let watcher = Watcher::new(Api::<Pod>::all(client), Config::default()).unwrap();
    let store = watcher.store();
    store.wait_until_ready(WAIT).unwrap();
    assert_eq!(store.len(), 1);

    // The token rotates: the old one is revoked and the file rewritten. The running watch is
    // then cut, so the watcher must reconnect: 401 with the cached token, re-read, retry.
    // Cut until a request comes with the new token: a watch accepted with the old token just
    // before the revocation, and not yet open when the first cut came, would otherwise carry
    // the next event and no request would ever need the new token.
    dir.write("token", "rot-2\n");
    server.add_token("rot-2", "rotated-user");
    server.revoke_token("rot-1");
    let rotated = || server.requests().iter().any(|r| r.user.as_deref() == Some("rotated-user"));
    let deadline = Instant::now() + WAIT;
    while !rotated() {
        assert!(Instant::now() < deadline, "no request with the rotated token");
        server.end_watches();
        thread::sleep(Duration::from_millis(20));
    }
    server.create(&pod("a", "after")).unwrap();
    let deadline = Instant::now() + WAIT;
    while store.len() < 2 {
        assert!(Instant::now() < deadline, "the watcher did not recover with the rotated token");
        thread::sleep(Duration::from_millis(20));
    }
    watcher.stop();
}

/// A tiny HTTP CONNECT proxy: serves `n` tunnels, counting them, then its thread ends.
struct ConnectProxy {
    port: u16,
    tunnels: Arc<AtomicUsize>,
    targets: Arc<std::sync::Mutex<Vec<String>>>,
    thread: Option<thread::JoinHandle<()>>,
}

impl ConnectProxy {
    fn start(n: usize) -> ConnectProxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let tunnels = Arc::new(AtomicUsize::new(0));
        let targets = Arc::new(std::sync::Mutex::new(Vec::new()));
        let (t, tg) = (Arc::clone(&tunnels), Arc::clone(&targets));
        let thread = thread::spawn(move || {
            for _ in 0..n {
                let Ok((client, _)) = listener.accept() else { return };
                client.set_read_timeout(Some(WAIT)).unwrap();
                let mut reader = BufReader::new(client.try_clone().unwrap());
                let mut line = String::new();
                reader.read_line(&mut line).unwrap();
                let target = line.split_whitespace().nth(1).unwrap_or_default().to_owned();
                loop {
                    let mut header = String::new();
                    if reader.read_line(&mut header).unwrap_or(0) == 0 || header == "\r\n" {
                        break;
                    }
                }
                tg.lock().unwrap().push(target.clone());
                let upstream = TcpStream::connect(&target).unwrap();
                let mut c = client;
                c.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n").unwrap();
                t.fetch_add(1, Ordering::SeqCst);
                pipe(reader, c, upstream);
            }
        });
        ConnectProxy { port, tunnels, targets, thread: Some(thread) }
    }
}

/// Copies both ways until either side closes; joins its helper thread.
fn pipe(mut from_client: BufReader<TcpStream>, mut to_client: TcpStream, upstream: TcpStream) {
    let mut up_read = upstream.try_clone().unwrap();
    let mut up_write = upstream;
    let down = thread::spawn(move || {
        let _ = std::io::copy(&mut up_read, &mut to_client);
        let _ = to_client.shutdown(Shutdown::Both);
    });
    let buffered = from_client.buffer().to_vec();
    let _ = up_write.write_all(&buffered);
    let mut rest = from_client.get_mut().try_clone().unwrap();
    let mut buf = [0u8; 16 * 1024];
    loop {
        match rest.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if up_write.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        }
    }
    let _ = up_write.shutdown(Shutdown::Both);
    down.join().unwrap();
}

/// A TLS fake server on `port`, with a CA of its own: a restart on the same port with a new CA
/// is how a cluster's CA rotation looks to a client (`server_on`).
fn tls_server_on(port: u16) -> FakeApiServer {
    server_on(port, || FakeApiServer::builder().tls(true))
}

/// The first TLS server of such a restart (`server_to_restart`).
fn tls_server_to_restart() -> FakeApiServer {
    server_to_restart(|| FakeApiServer::builder().tls(true))
}

/// A kubeconfig whose cluster trusts the CA in the file `ca.pem` beside it, written now.
fn ca_file_kubeconfig(dir: &TempDir, server: &FakeApiServer) -> Client {
    dir.write("ca.pem", &server.ca_pem().unwrap());
    let cluster = format!("    server: {}\n    certificate-authority: ca.pem", server.url());
    let path = dir.write("config", &kubeconfig(&cluster, "    {}"));
    Client::from_kubeconfig_path(&path, &KubeconfigOptions::default()).unwrap()
}

#[test]
fn a_one_shot_list_trusts_a_rotated_ca_once_the_file_holds_it() {
    let old = tls_server_to_restart();
    let port = old.addr().port();
    let dir = TempDir::new("rotated-ca-list");
    let client = ca_file_kubeconfig(&dir, &old);
    assert_eq!(list_pods(client.clone()).unwrap(), 0);

    // The CA rotates: the server comes back with a certificate from a new CA (of the same name).
    drop(old);
    let new = tls_server_on(port);
    new.create(&pod("a", "p1")).unwrap();
    // The file still holds the old CA: refused, naming the file.
    let e = list_pods(client.clone()).unwrap_err().to_string();
    assert!(e.contains("is not signed by the CA in") && e.contains("ca.pem"), "{e}");
    // The file is rewritten: the next call reads it again and succeeds, with the same client.
    dir.write("ca.pem", &new.ca_pem().unwrap());
    assert_eq!(list_pods(client.clone()).unwrap(), 1);
    assert_eq!(list_pods(client).unwrap(), 1);
}

#[test]
fn inline_certificate_authority_data_is_never_read_again() {
    let old = tls_server_to_restart();
    let port = old.addr().port();
    let client = yaml_client(&kubeconfig(&ca_data_cluster(&old), "    {}")).unwrap();
    assert_eq!(list_pods(client.clone()).unwrap(), 0);
    drop(old);
    let _new = tls_server_on(port);
    let e = list_pods(client).unwrap_err().to_string();
    assert!(e.contains("is not signed by the CA in certificate-authority-data"), "{e}");
}

#[test]
fn a_watcher_trusts_a_rotated_ca_without_a_restart() {
    let old = tls_server_to_restart();
    let port = old.addr().port();
    old.create(&pod("a", "before")).unwrap();
    let dir = TempDir::new("rotated-ca-watch");
    let client = ca_file_kubeconfig(&dir, &old);
    let backoff = kube_watcher::Backoff {
        initial: Duration::from_millis(50),
        max: Duration::from_millis(200),
        ..kube_watcher::Backoff::default()
    };
    let watcher = Watcher::new(Api::<Pod>::all(client), Config::default().backoff(backoff)).unwrap();
    let store = watcher.store();
    store.wait_until_ready(WAIT).unwrap();
    assert_eq!(store.len(), 1);

    // The CA rotates: the server comes back with a new CA and other objects (and no history the
    // watcher could resume from).
    drop(old);
    let new = tls_server_on(port);
    new.create(&pod("a", "after")).unwrap();
    for _ in 0..3 {
        new.create(&pod("a", "gone")).unwrap();
        new.delete::<Pod>(Some("a"), "gone").unwrap();
    }
    new.compact();
    // While the file holds the old CA, every attempt fails on the server's certificate.
    let deadline = Instant::now() + WAIT;
    let failures = loop {
        let remaining = deadline.saturating_duration_since(Instant::now());
        match watcher.recv_timeout(remaining).expect("no certificate failure reported") {
            Err(e) if e.to_string().contains("is not signed by the CA in") => break new.requests().len(),
            _ => {}
        }
    };
    assert_eq!(failures, 0, "no request got through the handshake");
    // The file is rewritten: the watcher reads it again at its next attempt and catches up.
    dir.write("ca.pem", &new.ca_pem().unwrap());
    let deadline = Instant::now() + WAIT;
    while store.state().iter().map(|p| p.metadata.name.clone().unwrap_or_default()).collect::<Vec<_>>() != ["after"] {
        assert!(Instant::now() < deadline, "the watcher did not recover with the rotated CA");
        thread::sleep(Duration::from_millis(20));
    }
    // And it keeps watching the new server.
    new.create(&pod("a", "later")).unwrap();
    let deadline = Instant::now() + WAIT;
    while store.len() < 2 || new.open_watches() != 1 {
        assert!(Instant::now() < deadline, "the watch on the new server is not live");
        thread::sleep(Duration::from_millis(20));
    }
    // That watch runs with a TLS configuration of its own (the new CA): stop still cuts it. The
    // server sees it closed long before the watcher's own guard against a silent connection
    // would end it; how long stop() takes is measured in examples/bench.rs, not here.
    watcher.stop();
    let deadline = Instant::now() + WAIT;
    while new.open_watches() != 0 {
        assert!(Instant::now() < deadline, "the server still sees the watch");
        thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn proxy_url_tunnels_through_a_connect_proxy() {
    let server = tls_server();
    let mut proxy = ConnectProxy::start(1);
    let cluster = format!("{}\n    proxy-url: http://127.0.0.1:{}", ca_data_cluster(&server), proxy.port);
    let client = yaml_client(&kubeconfig(&cluster, "    {}")).unwrap();
    assert_eq!(list_pods(client).unwrap(), 0);
    assert_eq!(proxy.tunnels.load(Ordering::SeqCst), 1);
    assert_eq!(proxy.targets.lock().unwrap().as_slice(), [format!("127.0.0.1:{}", server.addr().port())]);
    proxy.thread.take().unwrap().join().unwrap();
}

#[test]
fn tls_server_name_works_through_a_proxy() {
    let server = tls_server();
    let mut proxy = ConnectProxy::start(1);
    let cluster = format!(
        "{}\n    tls-server-name: localhost\n    proxy-url: http://127.0.0.1:{}",
        ca_data_cluster(&server),
        proxy.port
    );
    assert_eq!(list_pods(yaml_client(&kubeconfig(&cluster, "    {}")).unwrap()).unwrap(), 0);
    assert_eq!(proxy.targets.lock().unwrap().as_slice(), [format!("127.0.0.1:{}", server.addr().port())]);
    proxy.thread.take().unwrap().join().unwrap();
}

#[test]
fn secrets_never_appear_in_debug_output() {
    let server = FakeApiServer::builder().tls(true).client_ca_required(true).start();
    let (cert, key) = server.issue_client_cert("dbg", &[]);
    let key_line = key.lines().nth(1).unwrap().to_owned();
    let dir = TempDir::new("debug");
    dir.write("token", "file-s3cret-token");
    let users = [
        "    token: static-s3cret-token".to_owned(),
        "    tokenFile: token".to_owned(),
        "    username: u\n    password: basic-s3cret-pw".to_owned(),
        format!("    client-certificate-data: {}\n    client-key-data: {}", b64(&cert), b64(&key)),
        "    exec:\n      apiVersion: client.authentication.k8s.io/v1beta1\n      command: x\n      env:\n      - {name: K, value: env-s3cret-value}"
            .to_owned(),
    ];
    for user in users {
        let path = dir.write("config", &kubeconfig(&ca_data_cluster(&server), &user));
        let client = Client::from_kubeconfig_path(&path, &KubeconfigOptions::default()).unwrap();
        let api = Api::<Pod>::all(client.clone());
        for text in [format!("{client:?}"), format!("{client:#?}"), format!("{api:?}")] {
            for secret in ["s3cret", key_line.as_str()] {
                assert!(!text.contains(secret), "{user}: {text}");
            }
        }
    }
}

#[test]
fn try_default_connects_to_a_real_cluster_when_asked() {
    // The chain itself is unit-tested with an injected environment (src/auth); here only the
    // end-to-end path that needs a real cluster is gated.
    if std::env::var("KUBE_WATCHER_E2E").as_deref() != Ok("1") {
        eprintln!("skipped: set KUBE_WATCHER_E2E=1 to run against the cluster of the current kubeconfig");
        return;
    }
    let client = Client::try_default().unwrap();
    list_pods(client).unwrap();
}

#[test]
fn disable_compression_drops_the_gzip_accept_encoding() {
    let server = tls_server();
    let plain = yaml_client(&kubeconfig(&ca_data_cluster(&server), "    {}")).unwrap();
    list_pods(plain).unwrap();
    assert_eq!(server.requests().pop().unwrap().header("accept-encoding"), Some("gzip"));
    let cluster = format!("{}\n    disable-compression: true", ca_data_cluster(&server));
    list_pods(yaml_client(&kubeconfig(&cluster, "    {}")).unwrap()).unwrap();
    assert_eq!(server.requests().pop().unwrap().header("accept-encoding"), None);
}

/// An ExecCredential holding a client certificate and key (PEM text, as plugins send them).
#[cfg(unix)]
fn cert_credential(cert: &str, key: &str) -> String {
    serde_json::json!({
        "apiVersion": "client.authentication.k8s.io/v1",
        "kind": "ExecCredential",
        "status": {"clientCertificateData": cert, "clientKeyData": key},
    })
    .to_string()
}

#[cfg(unix)]
#[test]
fn an_exec_plugin_client_certificate_connects_and_is_refreshed_when_refused() {
    let server = FakeApiServer::builder().tls(true).client_ca_required(true).start();
    let stranger = tls_server();
    let dir = TempDir::new("execcert");
    let path = exec_kubeconfig(&server, &dir);
    // First run: a certificate from a CA the server does not trust; the run after it: a good one.
    let (bad_cert, bad_key) = stranger.issue_client_cert("mallory", &[]);
    let (cert, key) = server.issue_client_cert("carol", &["devs"]);
    dir.write("cred.json", &cert_credential(&bad_cert, &bad_key));
    dir.write("next.json", &cert_credential(&cert, &key));
    let client = Client::from_kubeconfig_path(&path, &KubeconfigOptions::default()).unwrap();
    assert_eq!(list_pods(client.clone()).unwrap(), 0, "refused certificate → plugin re-run → retried");
    assert_eq!(runs(&dir), 2);
    assert_eq!(server.requests().pop().unwrap().user.as_deref(), Some("carol"));
    list_pods(client).unwrap();
    assert_eq!(runs(&dir), 2, "the certificate is cached like a token");
}

#[cfg(unix)]
#[test]
fn an_exec_plugin_certificate_the_server_keeps_refusing_names_the_plugin() {
    let server = FakeApiServer::builder().tls(true).client_ca_required(true).start();
    let stranger = tls_server();
    let dir = TempDir::new("execcertrefused");
    let path = exec_kubeconfig(&server, &dir);
    let (bad_cert, bad_key) = stranger.issue_client_cert("mallory", &[]);
    dir.write("cred.json", &cert_credential(&bad_cert, &bad_key));
    let client = Client::from_kubeconfig_path(&path, &KubeconfigOptions::default()).unwrap();
    let e = list_pods(client).unwrap_err().to_string();
    assert!(e.contains("refused our client certificate") && e.contains("users[0].user.exec"), "{e}");
    assert_eq!(runs(&dir), 2, "one refresh, then the error");
}

#[cfg(unix)]
#[test]
fn an_exec_plugin_certificate_and_key_that_do_not_match_are_an_error_naming_the_plugin() {
    let server = FakeApiServer::builder().tls(true).client_ca_required(true).start();
    let dir = TempDir::new("execcertmismatch");
    let path = exec_kubeconfig(&server, &dir);
    let (cert, _) = server.issue_client_cert("a", &[]);
    let (_, other_key) = server.issue_client_cert("b", &[]);
    dir.write("cred.json", &cert_credential(&cert, &other_key));
    let client = Client::from_kubeconfig_path(&path, &KubeconfigOptions::default()).unwrap();
    let e = list_pods(client).unwrap_err().to_string();
    assert!(e.contains("users[0].user.exec"), "{e}");
    assert!(e.contains("status.clientKeyData: the private key does not match the certificate"), "{e}");
    assert!(!e.contains("PRIVATE KEY"), "{e}");
}

#[test]
fn a_refused_client_certificate_names_the_kubeconfig_fields_it_came_from() {
    let server = FakeApiServer::builder().tls(true).client_ca_required(true).start();
    let (cert, key) = tls_server().issue_client_cert("mallory", &[]);
    let user = format!("    client-certificate-data: {}\n    client-key-data: {}", b64(&cert), b64(&key));
    let client = yaml_client(&kubeconfig(&ca_data_cluster(&server), &user)).unwrap();
    let e = list_pods(client).unwrap_err().to_string();
    assert!(e.contains("refused our client certificate"), "{e}");
    assert!(e.contains("users[0].user.client-certificate-data and users[0].user.client-key-data"), "{e}");
    assert!(e.contains("user \"u\""), "{e}");
}

#[test]
fn connection_errors_name_the_host_port_and_cluster_entry() {
    // Nothing listens on port 1.
    let cluster = "    server: http://127.0.0.1:1";
    let e = list_pods(yaml_client(&kubeconfig(cluster, "    {}")).unwrap()).unwrap_err().to_string();
    assert!(e.contains("connection to 127.0.0.1:1"), "{e}");
    assert!(e.contains("cluster \"c\", kubeconfig (in memory): clusters[0].cluster.server"), "{e}");
    assert!(e.contains("refused"), "{e}");

    // `.invalid` never resolves (RFC 2606): a DNS failure, or a resolver timeout offline.
    let cluster = "    server: https://kube.test.invalid:6443\n    insecure-skip-tls-verify: true";
    let e = list_pods(yaml_client(&kubeconfig(cluster, "    {}")).unwrap()).unwrap_err().to_string();
    assert!(e.contains("kube.test.invalid:6443") && e.contains("clusters[0].cluster.server"), "{e}");

    let cluster = "    server: http://127.0.0.1:1\n    proxy-url: http://proxy.test.invalid:3128";
    let e = list_pods(yaml_client(&kubeconfig(cluster, "    {}")).unwrap()).unwrap_err().to_string();
    assert!(e.contains("proxy proxy.test.invalid:3128") && e.contains("clusters[0].cluster.proxy-url"), "{e}");
}

#[test]
fn a_context_naming_an_undefined_cluster_names_both() {
    let yaml = "apiVersion: v1\nkind: Config\ncurrent-context: lost\nclusters: []\ncontexts:\n\
                - name: lost\n  context: {cluster: ghost-cluster, user: u}\nusers:\n- name: u\n  user: {}\n";
    let e = yaml_client(yaml).unwrap_err().to_string();
    assert!(
        e.contains("context \"lost\" refers to cluster \"ghost-cluster\", which the kubeconfig does not define"),
        "{e}"
    );
}
