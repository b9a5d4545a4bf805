//! Resolving a merged kubeconfig into a [`Connection`]: the context (or the options' names)
//! picks a cluster and a user; the cluster gives the server, TLS and proxy, the user the
//! credentials and impersonation; every error names the file and the field at fault.

use std::path::PathBuf;
use std::sync::Arc;

use super::{Entry, Kubeconfig, Origin, RawCluster, RawContext, RawExec, RawUser};
use crate::auth::exec::{self, ApiVersion, ExecConfig, ExecPlugin, InteractiveMode};
use crate::auth::{
    Connection, Credentials, Env, Impersonation, KubeconfigOptions, Secret, TlsSettings, TokenFile, in_cluster, proxy,
    tls,
};
use crate::error::{Error, Result};

/// The name of the cluster extension passed to exec plugins as `spec.cluster.config`.
const EXEC_EXTENSION: &str = "client.authentication.k8s.io/exec";

/// The connection the kubeconfig selects, `None` when it selects no context ("empty").
pub(crate) fn connection(kc: &Kubeconfig, opts: &KubeconfigOptions, env: &Env) -> Result<Option<Connection>> {
    let context = match (&opts.context, &kc.current_context) {
        (Some(name), _) => Some(find(&kc.contexts, name).ok_or_else(|| Error::Auth {
            source_name: kc.describe().into(),
            message: format!("context {name:?} (from KubeconfigOptions::context) is not defined").into(),
        })?),
        (None, Some((name, origin))) => Some(
            find(&kc.contexts, name)
                .ok_or_else(|| origin.error("current-context", format!("context {name:?} is not defined")))?,
        ),
        (None, None) => None,
    };
    if context.is_none() && opts.cluster.is_none() {
        return Ok(None);
    }
    let ctx_field = |c: &Entry<RawContext>, f: &str| format!("contexts[{}].context.{f}", c.index);
    let cluster = match (&opts.cluster, context) {
        (Some(name), _) => find(&kc.clusters, name).ok_or_else(|| Error::Auth {
            source_name: kc.describe().into(),
            message: format!("cluster {name:?} (from KubeconfigOptions::cluster) is not defined").into(),
        })?,
        (None, Some(ctx)) => {
            let name = ctx.value.cluster.as_deref().filter(|c| !c.is_empty());
            let name = name.ok_or_else(|| ctx.origin.error(&ctx_field(ctx, "cluster"), "missing"))?;
            find(&kc.clusters, name).ok_or_else(|| {
                ctx.origin.error(
                    &ctx_field(ctx, "cluster"),
                    format!("context {:?} refers to cluster {name:?}, which the kubeconfig does not define", ctx.name),
                )
            })?
        }
        // Unreachable in practice: returned above when both are None.
        (None, None) => return Ok(None),
    };
    let user = match (&opts.user, context) {
        (Some(name), _) => Some(find(&kc.users, name).ok_or_else(|| Error::Auth {
            source_name: kc.describe().into(),
            message: format!("user {name:?} (from KubeconfigOptions::user) is not defined").into(),
        })?),
        (None, Some(ctx)) => match ctx.value.user.as_deref().filter(|u| !u.is_empty()) {
            Some(name) => Some(find(&kc.users, name).ok_or_else(|| {
                ctx.origin.error(
                    &ctx_field(ctx, "user"),
                    format!("context {:?} refers to user {name:?}, which the kubeconfig does not define", ctx.name),
                )
            })?),
            None => None,
        },
        (None, None) => None,
    };

    let mut conn = cluster_connection(cluster, env)?;
    let cluster_info = cluster_info(cluster, &conn)?;
    let mut whose = "the user name and password in its user info".to_owned();
    if let Some(user) = user
        && apply_user(&mut conn, user, cluster_info)?
    {
        whose = format!("the credentials of user {:?}", user.name);
    }
    if !conn.is_https() && has_credentials(&conn) && !opts.allow_http_credentials {
        return Err(cluster.origin.error(
            &format!("clusters[{}].cluster.server", cluster.index),
            format!(
                "{} is plain http://, which would send {whose} unencrypted; use https:// (or set \
                 KubeconfigOptions::allow_http_credentials)",
                conn.server
            ),
        ));
    }
    conn.default_namespace = opts
        .namespace
        .clone()
        .filter(|n| !n.is_empty())
        .or_else(|| context.and_then(|c| c.value.namespace.clone()).filter(|n| !n.is_empty()))
        .or_else(|| in_cluster::namespace(env))
        .unwrap_or_else(|| "default".to_owned());
    Ok(Some(conn))
}

pub(super) fn find<'a, T>(entries: &'a [Entry<T>], name: &str) -> Option<&'a Entry<T>> {
    entries.iter().find(|e| e.name == name)
}

fn has_credentials(conn: &Connection) -> bool {
    !matches!(conn.credentials, Credentials::None) || conn.tls.client_cert.is_some()
}

/// Reads one of a `*-data` (base64 of PEM) / file pair; `None` when neither is set.
fn pem_source(
    origin: &Origin,
    prefix: &str,
    file_field: &str,
    file: Option<&str>,
    data: Option<&str>,
) -> Result<Option<Vec<u8>>> {
    let file = file.filter(|f| !f.is_empty());
    let data = data.filter(|d| !d.is_empty());
    match (file, data) {
        (Some(_), Some(_)) => Err(origin.error(
            &format!("{prefix}.{file_field}-data"),
            format!("set together with {prefix}.{file_field}; keep only one"),
        )),
        (Some(path), None) => {
            let path = origin.resolve(path);
            crate::auth::read_file(&path).map(Some).map_err(|e| {
                origin.error(&format!("{prefix}.{file_field}"), format!("cannot read {}: {e}", path.display()))
            })
        }
        (None, Some(data)) => {
            decode_data(data).map(Some).map_err(|m| origin.error(&format!("{prefix}.{file_field}-data"), m))
        }
        (None, None) => Ok(None),
    }
}

/// Decodes a kubeconfig `*-data` field: standard base64 (line breaks tolerated) of PEM text.
fn decode_data(data: &str) -> std::result::Result<Vec<u8>, String> {
    use base64::Engine as _;
    if data.trim_start().starts_with("-----BEGIN") {
        return Err("holds PEM text; *-data fields hold base64 of PEM (base64 -w0 < file.pem)".to_owned());
    }
    let compact: String = data.chars().filter(|c| !c.is_ascii_whitespace()).collect();
    base64::engine::general_purpose::STANDARD.decode(compact).map_err(|e| format!("invalid base64: {e}"))
}

/// Server, TLS and proxy settings of a cluster entry.
fn cluster_connection(entry: &Entry<RawCluster>, env: &Env) -> Result<Connection> {
    let c = &entry.value;
    let origin = &entry.origin;
    let prefix = format!("clusters[{}].cluster", entry.index);
    let field = |f: &str| format!("{prefix}.{f}");
    let server =
        c.server.as_deref().filter(|s| !s.is_empty()).ok_or_else(|| origin.error(&field("server"), "missing"))?;
    let parsed = crate::auth::normalize_server(server).map_err(|m| origin.error(&field("server"), m))?;
    let mut conn = Connection::to_server(parsed.server, "");
    // User info in the URL is a credential (HTTP Basic): the user entry's own credentials win
    // over it (`apply_user`), and it is refused over plain http:// like any other (`connection`).
    if let Some(userinfo) = parsed.userinfo {
        conn.credentials = userinfo.into_credentials();
    }

    let insecure = c.insecure_skip_tls_verify.unwrap_or(false);
    let ca = pem_source(
        origin,
        &prefix,
        "certificate-authority",
        c.certificate_authority.as_deref(),
        c.certificate_authority_data.as_deref(),
    )?;
    let roots = match ca {
        Some(_) if insecure => {
            return Err(origin.error(
                &field("insecure-skip-tls-verify"),
                "cannot be combined with certificate-authority or certificate-authority-data",
            ));
        }
        Some(pem) => match c.certificate_authority.as_deref().filter(|p| !p.is_empty()) {
            // A file is read again when the server's certificate stops matching it (a rotated
            // CA, docs/auth.md §7); inline data cannot change.
            Some(path) => {
                let which = field("certificate-authority");
                let certs = tls::parse_ca_bundle(&pem).map_err(|m| origin.error(&which, m))?;
                let source = format!("{}: {which}", origin.source_name);
                Some(tls::CaRoots::File(Arc::new(tls::CaFile::new(origin.resolve(path), source, certs))))
            }
            None => {
                let which = field("certificate-authority-data");
                Some(tls::CaRoots::Inline(Arc::new(tls::parse_ca_bundle(&pem).map_err(|m| origin.error(&which, m))?)))
            }
        },
        None => None,
    };
    let server_name = match c.tls_server_name.as_deref().filter(|n| !n.is_empty()) {
        Some(name) => {
            if name.parse::<ureq::http::uri::Authority>().is_err() || name.contains([':', '@', '/']) {
                return Err(origin.error(&field("tls-server-name"), format!("{name:?} is not a host name")));
            }
            Some(name.to_owned())
        }
        None => None,
    };
    conn.tls = TlsSettings { roots, insecure, client_cert: None, client_cert_source: None, server_name };
    conn.server_source = format!("cluster {:?}, {}: {}", entry.name, origin.source_name, field("server"));
    conn.proxy = match c.proxy_url.as_deref().filter(|p| !p.is_empty()) {
        Some(url) => {
            let mut choice = proxy::from_proxy_url(url).map_err(|m| origin.error(&field("proxy-url"), m))?;
            choice.source = format!("{}: {}", origin.source_name, field("proxy-url"));
            Some(choice)
        }
        None => proxy::from_env(&conn.server, env)
            .map_err(|m| Error::Auth { source_name: "proxy environment".into(), message: m.into() })?,
    };
    conn.disable_compression = c.disable_compression.unwrap_or(false);
    Ok(conn)
}

/// `spec.cluster` for exec plugins with `provideClusterInfo` (docs/auth.md §6.4).
fn cluster_info(entry: &Entry<RawCluster>, conn: &Connection) -> Result<serde_json::Value> {
    use base64::Engine as _;
    let c = &entry.value;
    let mut info = serde_json::Map::new();
    info.insert("server".into(), conn.server.clone().into());
    let ca = pem_source(
        &entry.origin,
        &format!("clusters[{}].cluster", entry.index),
        "certificate-authority",
        c.certificate_authority.as_deref(),
        c.certificate_authority_data.as_deref(),
    )?;
    if let Some(pem) = ca {
        info.insert("certificate-authority-data".into(), base64::engine::general_purpose::STANDARD.encode(pem).into());
    }
    if let Some(name) = c.tls_server_name.as_deref().filter(|n| !n.is_empty()) {
        info.insert("tls-server-name".into(), name.into());
    }
    if c.insecure_skip_tls_verify == Some(true) {
        info.insert("insecure-skip-tls-verify".into(), true.into());
    }
    if let Some(url) = c.proxy_url.as_deref().filter(|p| !p.is_empty()) {
        info.insert("proxy-url".into(), url.into());
    }
    if c.disable_compression == Some(true) {
        info.insert("disable-compression".into(), true.into());
    }
    let extension = c.extensions.iter().flatten().find(|e| e.name.as_deref() == Some(EXEC_EXTENSION));
    if let Some(value) = extension.and_then(|e| e.extension.clone()) {
        info.insert("config".into(), value);
    }
    Ok(serde_json::Value::Object(info))
}

/// Credentials, client certificate and impersonation of a user entry (docs/auth.md §4.5
/// precedence). True if the entry brings credentials of its own (a client certificate or request
/// credentials); request credentials replace those of the server URL's user info.
fn apply_user(conn: &mut Connection, entry: &Entry<RawUser>, cluster_info: serde_json::Value) -> Result<bool> {
    let u = &entry.value;
    let at = UserAt { origin: &entry.origin, prefix: format!("users[{}].user", entry.index) };
    refuse_auth_provider(u, &at)?;
    let has_token = set(&u.token) || set(&u.token_file);
    if has_token && set(&u.username) {
        return Err(at.origin.error(
            &at.field("username"),
            "more than one authentication method: token/tokenFile and username/password; keep one",
        ));
    }

    conn.tls.client_cert = client_identity(u, &at)?;
    if conn.tls.client_cert.is_some() {
        let field = |data: &Option<String>, name: &str| {
            if set(data) { at.field(&format!("{name}-data")) } else { at.field(name) }
        };
        conn.tls.client_cert_source = Some(format!(
            "{} and {} (user {:?}, {})",
            field(&u.client_certificate_data, "client-certificate"),
            field(&u.client_key_data, "client-key"),
            entry.name,
            entry.origin.source_name
        ));
    }
    let credentials = credentials(u, &at, conn.tls.client_cert.is_some(), cluster_info)?;
    let own = conn.tls.client_cert.is_some() || !matches!(credentials, Credentials::None);
    if !matches!(credentials, Credentials::None) {
        conn.credentials = credentials;
    }
    conn.impersonation = impersonation(u, &at)?;
    Ok(own)
}

/// Where a user entry's fields are, for errors that name them.
struct UserAt<'a> {
    origin: &'a Origin,
    prefix: String,
}

impl UserAt<'_> {
    fn field(&self, f: &str) -> String {
        format!("{}.{f}", self.prefix)
    }
}

fn set(v: &Option<String>) -> bool {
    v.as_deref().is_some_and(|s| !s.is_empty())
}

/// Legacy `auth-provider` entries are refused with what to use instead.
fn refuse_auth_provider(u: &RawUser, at: &UserAt<'_>) -> Result<()> {
    let (origin, field) = (at.origin, |f: &str| at.field(f));
    if let Some(provider) = &u.auth_provider {
        if u.exec.is_some() {
            return Err(origin.error(&field("auth-provider"), "set together with exec; keep only exec"));
        }
        let name = provider.name.as_deref().unwrap_or("");
        let advice = match name {
            "gcp" => "it was removed in Kubernetes 1.26; use the exec plugin gke-gcloud-auth-plugin \
                      (gcloud components install gke-gcloud-auth-plugin)"
                .to_owned(),
            "azure" => "it was removed in Kubernetes 1.26; use the exec plugin kubelogin \
                        (kubelogin convert-kubeconfig)"
                .to_owned(),
            "oidc" => "use an OIDC exec plugin instead, such as kubelogin (kubectl oidc-login)".to_owned(),
            _ => "use an exec credential plugin instead".to_owned(),
        };
        return Err(origin.error(&field("auth-provider"), format!("auth-provider {name:?} is not supported; {advice}")));
    }
    Ok(())
}

/// The client certificate: both halves, from file or data, checked to match now.
fn client_identity(u: &RawUser, at: &UserAt<'_>) -> Result<Option<ureq::tls::ClientCert>> {
    let (origin, prefix, field) = (at.origin, at.prefix.as_str(), |f: &str| at.field(f));
    let cert = pem_source(
        origin,
        prefix,
        "client-certificate",
        u.client_certificate.as_deref(),
        u.client_certificate_data.as_deref(),
    )?;
    let key = pem_source(origin, prefix, "client-key", u.client_key.as_deref(), u.client_key_data.as_deref())?;
    let which = |data: &Option<String>, name: &str| {
        if set(data) { format!("{name}-data") } else { name.to_owned() }
    };
    match (cert, key) {
        (Some(cert), Some(key)) => {
            let identity = tls::parse_client_identity(&cert, &key).map_err(|(on_cert, m)| {
                let f = if on_cert {
                    which(&u.client_certificate_data, "client-certificate")
                } else {
                    which(&u.client_key_data, "client-key")
                };
                origin.error(&field(&f), m)
            })?;
            Ok(Some(identity))
        }
        (Some(_), None) => Err(origin.error(&field("client-key"), "missing (client-certificate is set)")),
        (None, Some(_)) => Err(origin.error(&field("client-certificate"), "missing (client-key is set)")),
        (None, None) => Ok(None),
    }
}

/// The one source of request credentials (docs/auth.md §4.5).
fn credentials(
    u: &RawUser,
    at: &UserAt<'_>,
    has_client_cert: bool,
    cluster_info: serde_json::Value,
) -> Result<Credentials> {
    let (origin, field) = (at.origin, |f: &str| at.field(f));
    let token = match u.token.as_deref().filter(|t| !t.is_empty()) {
        Some(t) if t.chars().any(char::is_control) => {
            return Err(origin.error(&field("token"), "contains control characters (a trailing newline?)"));
        }
        Some(t) => Some(Secret::new(t)),
        None => None,
    };
    Ok(if let Some(path) = u.token_file.as_deref().filter(|p| !p.is_empty()) {
        let file =
            TokenFile::new(origin.resolve(path), format!("{}: {}", origin.source_name, field("tokenFile")), token);
        file.check()?;
        Credentials::TokenFile(Arc::new(file))
    } else if let Some(token) = token {
        Credentials::Token(token)
    } else if let Some(username) = u.username.as_deref().filter(|n| !n.is_empty()) {
        Credentials::Basic {
            username: username.to_owned(),
            password: Secret::new(u.password.clone().unwrap_or_default()),
        }
    } else if let Some(exec) = &u.exec {
        let plugin = exec_config(origin, &field("exec"), exec, cluster_info)?;
        if has_client_cert {
            // Static credentials win over plugins (docs/auth.md §4.5).
            log::debug!("{}: {}: not run, a client certificate is set", origin.source_name, field("exec"));
            Credentials::None
        } else {
            Credentials::Exec(Arc::new(ExecPlugin::new(plugin)))
        }
    } else {
        Credentials::None
    })
}

/// Impersonation (`as`, `as-uid`, `as-groups`, `as-user-extra`), on top of the credentials.
fn impersonation(u: &RawUser, at: &UserAt<'_>) -> Result<Option<Arc<Impersonation>>> {
    let (origin, field) = (at.origin, |f: &str| at.field(f));
    let groups = u.as_groups.clone().unwrap_or_default();
    let extra: Vec<(String, Vec<String>)> = u.as_user_extra.clone().unwrap_or_default().into_iter().collect();
    match u.as_user.as_deref().filter(|a| !a.is_empty()) {
        Some(user) => Ok(Some(Arc::new(Impersonation {
            user: user.to_owned(),
            uid: u.as_uid.clone().filter(|s| !s.is_empty()),
            groups,
            extra,
        }))),
        None if set(&u.as_uid) || !groups.is_empty() || !extra.is_empty() => {
            Err(origin.error(&field("as"), "missing: as-uid, as-groups and as-user-extra need a user to impersonate"))
        }
        None => Ok(None),
    }
}

pub(super) fn exec_config(
    origin: &Origin,
    prefix: &str,
    e: &RawExec,
    cluster_info: serde_json::Value,
) -> Result<ExecConfig> {
    let field = |f: &str| format!("{prefix}.{f}");
    let command =
        e.command.as_deref().filter(|c| !c.is_empty()).ok_or_else(|| origin.error(&field("command"), "missing"))?;
    let api_version = match e.api_version.as_deref() {
        None | Some("") => return Err(origin.error(&field("apiVersion"), "missing")),
        Some("client.authentication.k8s.io/v1") => ApiVersion::V1,
        Some("client.authentication.k8s.io/v1beta1") => ApiVersion::V1Beta1,
        Some(other) => {
            return Err(origin.error(
                &field("apiVersion"),
                format!(
                    "{other:?} is not supported; use client.authentication.k8s.io/v1 or v1beta1 (v1alpha1 was removed in 1.24)"
                ),
            ));
        }
    };
    let interactive = match (e.interactive_mode.as_deref(), api_version) {
        (None | Some(""), ApiVersion::V1) => {
            return Err(
                origin.error(&field("interactiveMode"), "missing (required for client.authentication.k8s.io/v1)")
            );
        }
        (None | Some(""), ApiVersion::V1Beta1) | (Some("IfAvailable"), _) => InteractiveMode::IfAvailable,
        (Some("Never"), _) => InteractiveMode::Never,
        (Some("Always"), _) => InteractiveMode::Always,
        (Some(other), _) => {
            return Err(
                origin.error(&field("interactiveMode"), format!("{other:?} is not Never, IfAvailable or Always"))
            );
        }
    };
    // A command with a path separator is relative to the kubeconfig's directory; a bare name
    // is looked up on PATH (docs/auth.md §3.3).
    let has_separator = command.contains('/') || (cfg!(windows) && command.contains('\\'));
    let command_path = if has_separator { origin.resolve(command) } else { PathBuf::from(command) };
    let mut env = Vec::new();
    for (i, var) in e.env.iter().flatten().enumerate() {
        let name = var
            .name
            .as_deref()
            .filter(|n| !n.is_empty())
            .ok_or_else(|| origin.error(&field(&format!("env[{i}].name")), "missing"))?;
        env.push((name.to_owned(), Secret::new(var.value.clone().unwrap_or_default())));
    }
    Ok(ExecConfig {
        source_name: format!("exec plugin {command} ({}: {prefix})", origin.source_name),
        command: command_path,
        args: e.args.clone().unwrap_or_default(),
        env,
        api_version,
        interactive,
        install_hint: e.install_hint.clone().filter(|h| !h.is_empty()),
        cluster: e.provide_cluster_info.unwrap_or(false).then_some(cluster_info),
        timeout: exec::DEFAULT_TIMEOUT,
    })
}
