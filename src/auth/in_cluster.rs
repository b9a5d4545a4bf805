//! In-cluster configuration: `KUBERNETES_SERVICE_HOST`/`_PORT`, the service-account token
//! (re-read as it rotates), `ca.crt`, and the pod's namespace.

use std::path::Path;
use std::sync::Arc;

use super::{Connection, Credentials, Env, TlsSettings, TokenFile, proxy, tls};
use crate::error::Error;

/// Where the kubelet mounts the service account (docs/auth.md §8.2).
pub(crate) const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// Why the in-cluster configuration is not used.
pub(crate) enum InClusterError {
    /// The environment is not a pod's (the reason, for the "tried" list).
    NotInCluster(String),
    /// It is a pod's, but something is broken (unreadable CA, bad host).
    Broken(Error),
}

/// Whether the in-cluster environment is present (docs/auth.md §8.1): both variables set and the
/// token file a regular file.
pub(crate) fn detected(env: &Env) -> Result<(String, String), String> {
    let host = env.var("KUBERNETES_SERVICE_HOST").ok_or("KUBERNETES_SERVICE_HOST unset")?;
    let port = env.var("KUBERNETES_SERVICE_PORT").ok_or("KUBERNETES_SERVICE_PORT unset")?;
    let token = env.service_account_dir.join("token");
    if !token.is_file() {
        return Err(format!("{} missing", token.display()));
    }
    Ok((host, port))
}

/// The pod's namespace: `$POD_NAMESPACE`, else the service account's `namespace` file, when the
/// in-cluster environment is present (docs/auth.md §9 rule 3).
pub(crate) fn namespace(env: &Env) -> Option<String> {
    detected(env).ok()?;
    if let Some(ns) = env.var("POD_NAMESPACE") {
        return Some(ns);
    }
    let text = super::read_text(&env.service_account_dir.join("namespace")).ok()?;
    let ns = text.trim();
    (!ns.is_empty()).then(|| ns.to_owned())
}

/// The connection to the API server of the cluster this pod runs in.
pub(crate) fn connection(env: &Env) -> Result<Connection, InClusterError> {
    let (host, port) = detected(env).map_err(InClusterError::NotInCluster)?;
    let dir = &env.service_account_dir;
    let broken = |message: String| {
        InClusterError::Broken(Error::Auth { source_name: "in-cluster configuration".into(), message: message.into() })
    };
    // IPv6 addresses need brackets in a URL.
    let host_part = if host.contains(':') && !host.starts_with('[') { format!("[{host}]") } else { host };
    let url = format!("https://{host_part}:{port}");
    let parsed = super::normalize_server(&url)
        .map_err(|e| broken(format!("KUBERNETES_SERVICE_HOST/KUBERNETES_SERVICE_PORT: {e}")))?;
    if parsed.userinfo.is_some() {
        return Err(broken("KUBERNETES_SERVICE_HOST: holds user info (`user@`); it names a host only".to_owned()));
    }
    let server = parsed.server;
    let ca_path = dir.join("ca.crt");
    let roots = read_ca(&ca_path).map_err(broken)?;
    let token_path = dir.join("token");
    let token = TokenFile::new(token_path.clone(), format!("in-cluster token {}", token_path.display()), None);
    token.check().map_err(InClusterError::Broken)?;
    let mut conn =
        Connection::to_server(server, "the in-cluster environment (KUBERNETES_SERVICE_HOST, KUBERNETES_SERVICE_PORT)");
    conn.credentials = Credentials::TokenFile(Arc::new(token));
    let ca = tls::CaFile::new(ca_path, "the in-cluster ca.crt".to_owned(), roots);
    conn.tls = TlsSettings { roots: Some(tls::CaRoots::File(Arc::new(ca))), ..TlsSettings::default() };
    conn.default_namespace = namespace(env).unwrap_or_else(|| "default".to_owned());
    conn.proxy = proxy::from_env(&conn.server, env).map_err(broken)?;
    Ok(conn)
}

fn read_ca(path: &Path) -> Result<Vec<ureq::tls::Certificate<'static>>, String> {
    // client-go only logs a missing ca.crt and falls back to system roots; we fail (docs/auth.md §8.2).
    let pem = super::read_file(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    tls::parse_ca_bundle(&pem).map_err(|e| format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    fn sa_dir(name: &str, files: &[(&str, &str)]) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("kw-sa-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        for (n, c) in files {
            std::fs::write(dir.join(n), c).unwrap();
        }
        dir
    }

    #[test]
    fn in_cluster_needs_both_variables_and_the_token_file() {
        let dir = sa_dir("detect", &[("token", "t")]);
        let env = Env::fixed(&[("KUBERNETES_SERVICE_HOST", "10.0.0.1")], &dir);
        assert_eq!(detected(&env).unwrap_err(), "KUBERNETES_SERVICE_PORT unset");
        let env = Env::fixed(&[("KUBERNETES_SERVICE_HOST", "10.0.0.1"), ("KUBERNETES_SERVICE_PORT", "443")], &dir);
        assert!(detected(&env).is_ok());
        let env = Env::fixed(
            &[("KUBERNETES_SERVICE_HOST", "10.0.0.1"), ("KUBERNETES_SERVICE_PORT", "443")],
            &dir.join("nope"),
        );
        assert!(detected(&env).unwrap_err().contains("token missing"));
    }

    #[test]
    fn a_missing_ca_crt_is_an_error_not_a_fallback() {
        let dir = sa_dir("noca", &[("token", "t")]);
        let env = Env::fixed(&[("KUBERNETES_SERVICE_HOST", "10.0.0.1"), ("KUBERNETES_SERVICE_PORT", "443")], &dir);
        match connection(&env) {
            Err(InClusterError::Broken(e)) => assert!(e.to_string().contains("ca.crt"), "{e}"),
            _ => panic!("expected an error about ca.crt"),
        }
    }

    #[test]
    fn pod_namespace_wins_over_the_namespace_file() {
        let dir = sa_dir("ns", &[("token", "t"), ("namespace", "shop\n")]);
        let base = [("KUBERNETES_SERVICE_HOST", "fd00:10:96::1"), ("KUBERNETES_SERVICE_PORT", "443")];
        assert_eq!(namespace(&Env::fixed(&base, &dir)).as_deref(), Some("shop"));
        let mut vars = base.to_vec();
        vars.push(("POD_NAMESPACE", "from-env"));
        assert_eq!(namespace(&Env::fixed(&vars, &dir)).as_deref(), Some("from-env"));
        assert_eq!(namespace(&Env::fixed(&[], &dir)), None, "outside a pod there is no pod namespace");
    }
}
