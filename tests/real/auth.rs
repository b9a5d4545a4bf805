//! Authentication and authorization on the real server: static tokens, a token file whose token
//! is rotated, a client certificate, and RBAC's 403.

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube_watcher::{Api, Client, Config, Error, KubeconfigOptions, ListParams, Watcher};

use crate::bed::{Bed, User, same_as_server, until};
use crate::common::{WAIT, collect_until};
use crate::lists::config_map;

#[test]
fn a_client_certificate_and_a_token_see_the_same_objects() {
    let Some(bed) = Bed::shared() else { return };
    let ns = bed.namespace("cert");
    let by_token: Api<ConfigMap> = Api::namespaced(bed.client(), &ns);
    by_token.create(&config_map(&ns, "a", "1")).unwrap();
    let by_cert: Api<ConfigMap> = Api::namespaced(bed.client_of(User::Cert), &ns);
    let watcher = Watcher::new(by_cert.clone(), Config::default()).unwrap();
    watcher.receiver(); // a consumer from the start: every event, not a replay of the store
    watcher.store().wait_until_ready(WAIT).unwrap();
    by_cert.create(&config_map(&ns, "b", "1")).unwrap();
    same_as_server(&watcher.store(), &by_token, &ListParams::default());
    // Who the server thinks each is: the certificate's CN, the token's user.
    let (_, who, _) = bed.kubectl(User::Cert, &["auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"], None);
    assert_eq!(who, "kw-cert-admin");
}

#[test]
fn rbac_refusals_surface_as_forbidden_naming_the_resource() {
    let Some(bed) = Bed::shared() else { return };
    let ns = bed.namespace("forbidden");
    let api: Api<Pod> = Api::namespaced(bed.client_of(User::Restricted), &ns);
    let e = api.list(&ListParams::default()).unwrap_err();
    let Error::Api(a) = &e else { panic!("{e:?}") };
    assert_eq!((a.code, a.reason.as_str()), (403, "Forbidden"), "{e}");
    assert!(a.message.contains("pods is forbidden") && a.message.contains("kw-restricted"), "{}", a.message);
    // A watcher reports it on its channel and from wait_until_ready, and keeps trying.
    let watcher = Watcher::new(api, Config::default()).unwrap();
    watcher.receiver(); // a consumer from the start: every event, not a replay of the store
    let first = loop {
        match watcher.recv_timeout(WAIT).unwrap() {
            Ok(_) => continue, // `Init`: a list starts
            Err(e) => break e,
        }
    };
    assert_eq!(first.status(), Some(403), "{first}");
    assert!(!first.is_terminal());
    let waited = watcher.store().wait_until_ready(Duration::from_millis(200)).unwrap_err();
    assert!(waited.to_string().contains("pods is forbidden"), "{waited}");
    assert!(watcher.stats().errors.client >= 1);
}

/// A service account's bound token works while its account exists; the kubeconfig reads its
/// token from a file, which is rotated to a second account's token before the first account is
/// deleted. The watcher carries on: after the 401 it reads the file again and retries at once,
/// without an error reaching its stats.
#[test]
fn a_rotated_token_file_is_read_again_after_a_401() {
    let Some(bed) = Bed::shared() else { return };
    let ns = bed.namespace("rotate");
    let grant = format!(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {{name: cm-reader, namespace: {ns}}}\n\
         rules: [{{apiGroups: [''], resources: [configmaps], verbs: [get, list, watch]}}]\n---\n\
         apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {{name: cm-readers, namespace: {ns}}}\n\
         roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: cm-reader}}\n\
         subjects: [{{kind: ServiceAccount, name: first, namespace: {ns}}}, {{kind: ServiceAccount, name: second, namespace: {ns}}}]\n"
    );
    bed.kubectl_ok(&["apply", "-f", "-"], Some(&grant));
    bed.kubectl_ok(&["-n", &ns, "create", "serviceaccount", "first"], None);
    bed.kubectl_ok(&["-n", &ns, "create", "serviceaccount", "second"], None);
    let first = bed.kubectl_ok(&["-n", &ns, "create", "token", "first"], None);
    let second = bed.kubectl_ok(&["-n", &ns, "create", "token", "second"], None);

    let dir = std::env::temp_dir().join(format!("kw-real-rotate-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let token_file = dir.join("token");
    std::fs::write(&token_file, first.trim()).unwrap();
    let admin = std::fs::read_to_string(bed.kubeconfig(User::Admin)).unwrap();
    let admin_token_line = admin.lines().find(|l| l.trim_start().starts_with("tokenFile:")).unwrap().trim().to_owned();
    let kubeconfig = admin.replace(&admin_token_line, &format!("tokenFile: {}", token_file.display()));
    let client = Client::from_kubeconfig_yaml(&kubeconfig, &KubeconfigOptions::default()).unwrap();
    let api: Api<ConfigMap> = Api::namespaced(client, &ns);
    // Short watches, so new requests (which carry the token) come often.
    let watcher = Watcher::new(api, Config::default().timeout(Duration::from_secs(2))).unwrap();
    watcher.receiver(); // a consumer from the start: every event, not a replay of the store
    watcher.store().wait_until_ready(WAIT).unwrap();

    std::fs::write(&token_file, format!("{}\n", second.trim())).unwrap();
    bed.kubectl_ok(&["-n", &ns, "delete", "serviceaccount", "first"], None);
    // The first token is refused from now on (the server checks that its account still exists).
    let writer: Api<ConfigMap> = Api::namespaced(bed.client(), &ns);
    // kube-apiserver keeps a token it accepted in a cache for 10 s: wait until the first one is
    // refused, so that the watcher's next request meets the 401.
    let with_first = admin.replace(&admin_token_line, &format!("token: {}", first.trim()));
    let with_first: Api<ConfigMap> =
        Api::namespaced(Client::from_kubeconfig_yaml(&with_first, &KubeconfigOptions::default()).unwrap(), &ns);
    until("the first token is refused", || match with_first.list(&ListParams::default()) {
        Err(Error::Api(e)) => e.code == 401,
        _ => false,
    });
    let renewed = watcher.stats().watches;
    until("the watch is renewed after the first token died", || watcher.stats().watches >= renewed + 2);
    writer.create(&config_map(&ns, "after", "1")).unwrap();
    collect_until(&watcher, |seen| seen.iter().any(|e| e == "Apply(after)"));
    // The 401 was answered inside the request, by reading the file again and retrying at once:
    // it never reached the watcher as an error (kept until the file's next scheduled read, the
    // token would have failed every request, through backoff, until its 50 s refresh).
    assert_eq!(watcher.stats().errors.client, 0, "{:?}", watcher.stats().errors);
    same_as_server(&watcher.store(), &writer, &ListParams::default());
    let _ = std::fs::remove_dir_all(&dir);
}
