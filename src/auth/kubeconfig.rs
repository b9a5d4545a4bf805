//! kubeconfig parsing, merging (kubectl's rules) and context/cluster/user resolution into a
//! [`Connection`]; every error names the file and the field at fault.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;

use super::exec::{ApiVersion, ExecConfig, ExecPlugin, InteractiveMode};
use super::{
    Connection, Credentials, Env, Impersonation, KubeconfigOptions, Secret, TlsSettings, TokenFile, in_cluster, proxy,
    tls,
};
use crate::error::{Error, Result};

/// The name of the cluster extension passed to exec plugins as `spec.cluster.config`.
const EXEC_EXTENSION: &str = "client.authentication.k8s.io/exec";

#[derive(Deserialize, Default)]
#[serde(default)]
struct RawFile {
    #[serde(rename = "current-context")]
    current_context: Option<String>,
    clusters: Option<Vec<NamedCluster>>,
    users: Option<Vec<NamedUser>>,
    contexts: Option<Vec<NamedContext>>,
}

#[derive(Deserialize)]
struct NamedCluster {
    name: Option<String>,
    cluster: Option<RawCluster>,
}

#[derive(Deserialize)]
struct NamedUser {
    name: Option<String>,
    user: Option<RawUser>,
}

#[derive(Deserialize)]
struct NamedContext {
    name: Option<String>,
    context: Option<RawContext>,
}

#[derive(Deserialize, Default, Clone)]
#[serde(default, rename_all = "kebab-case")]
struct RawCluster {
    server: Option<String>,
    certificate_authority: Option<String>,
    certificate_authority_data: Option<String>,
    insecure_skip_tls_verify: Option<bool>,
    tls_server_name: Option<String>,
    proxy_url: Option<String>,
    disable_compression: Option<bool>,
    extensions: Option<Vec<NamedExtension>>,
}

#[derive(Deserialize, Clone)]
struct NamedExtension {
    name: Option<String>,
    extension: Option<serde_json::Value>,
}

// No Debug: tokens, passwords and keys live here.
#[derive(Deserialize, Default, Clone)]
#[serde(default, rename_all = "kebab-case")]
struct RawUser {
    token: Option<String>,
    #[serde(rename = "tokenFile")]
    token_file: Option<String>,
    client_certificate: Option<String>,
    client_certificate_data: Option<String>,
    client_key: Option<String>,
    client_key_data: Option<String>,
    username: Option<String>,
    password: Option<String>,
    exec: Option<RawExec>,
    auth_provider: Option<RawAuthProvider>,
    #[serde(rename = "as")]
    as_user: Option<String>,
    as_uid: Option<String>,
    as_groups: Option<Vec<String>>,
    as_user_extra: Option<BTreeMap<String, Vec<String>>>,
}

#[derive(Deserialize, Default, Clone)]
#[serde(default, rename_all = "camelCase")]
struct RawExec {
    api_version: Option<String>,
    command: Option<String>,
    args: Option<Vec<String>>,
    env: Option<Vec<RawEnvVar>>,
    interactive_mode: Option<String>,
    provide_cluster_info: Option<bool>,
    install_hint: Option<String>,
}

#[derive(Deserialize, Default, Clone)]
#[serde(default)]
struct RawEnvVar {
    name: Option<String>,
    value: Option<String>,
}

#[derive(Deserialize, Default, Clone)]
#[serde(default)]
struct RawAuthProvider {
    name: Option<String>,
}

#[derive(Deserialize, Default, Clone)]
#[serde(default)]
struct RawContext {
    cluster: Option<String>,
    user: Option<String>,
    namespace: Option<String>,
}

/// The file an entry came from: names it in errors, and resolves its relative paths.
#[derive(Debug)]
struct Origin {
    /// `kubeconfig /home/u/.kube/config`, or `kubeconfig (in memory)`.
    source_name: String,
    /// The file's directory; `None` for a kubeconfig held in memory (relative to the cwd).
    dir: Option<PathBuf>,
}

impl Origin {
    fn error(&self, field: &str, message: impl std::fmt::Display) -> Error {
        Error::Auth { source_name: self.source_name.clone().into(), message: format!("{field}: {message}").into() }
    }

    fn resolve(&self, path: &str) -> PathBuf {
        let p = Path::new(path);
        match &self.dir {
            Some(dir) if p.is_relative() => dir.join(p),
            _ => p.to_owned(),
        }
    }
}

/// One named entry, with where it came from (file and index in that file's list).
struct Entry<T> {
    name: String,
    index: usize,
    origin: Arc<Origin>,
    value: T,
}

/// One or more kubeconfig files merged by kubectl's rules.
#[derive(Default)]
pub(crate) struct Kubeconfig {
    current_context: Option<(String, Arc<Origin>)>,
    clusters: Vec<Entry<RawCluster>>,
    users: Vec<Entry<RawUser>>,
    contexts: Vec<Entry<RawContext>>,
    /// The files merged, in order (for messages).
    sources: Vec<String>,
}

impl Kubeconfig {
    /// `kubeconfig /a` or `kubeconfig /a:/b`, for messages about the merged whole.
    pub(crate) fn describe(&self) -> String {
        let names: Vec<&str> =
            self.sources.iter().map(|s| s.strip_prefix("kubeconfig ").unwrap_or(s.as_str())).collect();
        format!("kubeconfig {}", if names.is_empty() { "(empty)".to_owned() } else { names.join(", ") })
    }

    /// Adds one file's entries: names already present are kept whole (first file wins).
    fn merge(&mut self, raw: RawFile, origin: &Arc<Origin>) -> Result<()> {
        self.sources.push(origin.source_name.clone());
        if self.current_context.is_none()
            && let Some(cc) = raw.current_context.filter(|c| !c.is_empty())
        {
            self.current_context = Some((cc, Arc::clone(origin)));
        }
        let clusters = raw.clusters.unwrap_or_default().into_iter().map(|n| (n.name, n.cluster));
        merge_list(&mut self.clusters, clusters, "clusters", origin)?;
        let users = raw.users.unwrap_or_default().into_iter().map(|n| (n.name, n.user));
        merge_list(&mut self.users, users, "users", origin)?;
        let contexts = raw.contexts.unwrap_or_default().into_iter().map(|n| (n.name, n.context));
        merge_list(&mut self.contexts, contexts, "contexts", origin)
    }
}

fn merge_list<T: Default>(
    into: &mut Vec<Entry<T>>,
    items: impl Iterator<Item = (Option<String>, Option<T>)>,
    list: &str,
    origin: &Arc<Origin>,
) -> Result<()> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for (index, (name, value)) in items.enumerate() {
        let name =
            name.filter(|n| !n.is_empty()).ok_or_else(|| origin.error(&format!("{list}[{index}].name"), "missing"))?;
        if let Some(first) = seen.insert(name.clone(), index) {
            return Err(origin
                .error(&format!("{list}[{index}].name"), format!("duplicate name {name:?} (also {list}[{first}])")));
        }
        if into.iter().any(|e| e.name == name) {
            continue;
        }
        into.push(Entry { name, index, origin: Arc::clone(origin), value: value.unwrap_or_default() });
    }
    Ok(())
}

fn parse(text: &str, origin: &Arc<Origin>) -> Result<RawFile> {
    if text.trim().is_empty() {
        return Ok(RawFile::default());
    }
    // serde_norway's messages name the field path and quote scalars only, never whole lines.
    let raw: Option<RawFile> = serde_norway::from_str(text).map_err(|e| Error::Auth {
        source_name: origin.source_name.clone().into(),
        message: format!("invalid YAML: {e}").into(),
    })?;
    Ok(raw.unwrap_or_default())
}

fn read_file(path: &Path) -> Result<(RawFile, Arc<Origin>)> {
    let origin = Arc::new(Origin {
        source_name: format!("kubeconfig {}", path.display()),
        dir: Some(path.parent().map(Path::to_owned).unwrap_or_default()),
    });
    let text = super::read_text(path).map_err(|e| Error::Auth {
        source_name: origin.source_name.clone().into(),
        message: format!("cannot read: {e}").into(),
    })?;
    warn_if_readable_by_others(path);
    Ok((parse(&text, &origin)?, origin))
}

#[cfg(unix)]
fn warn_if_readable_by_others(path: &Path) {
    use std::os::unix::fs::PermissionsExt as _;
    if let Ok(meta) = std::fs::metadata(path)
        && meta.permissions().mode() & 0o077 != 0
    {
        log::warn!(
            "kubeconfig {} is readable by group or others (mode {:o}); it may hold credentials",
            path.display(),
            meta.permissions().mode() & 0o777
        );
    }
}

#[cfg(not(unix))]
fn warn_if_readable_by_others(_path: &Path) {}

/// A kubeconfig held in memory (relative paths are relative to the working directory).
pub(crate) fn load_str(text: &str) -> Result<Kubeconfig> {
    let origin = Arc::new(Origin { source_name: "kubeconfig (in memory)".to_owned(), dir: None });
    let mut config = Kubeconfig::default();
    config.merge(parse(text, &origin)?, &origin)?;
    Ok(config)
}

/// Exactly one file, which must exist (`--kubeconfig`).
pub(crate) fn load_path(path: &Path) -> Result<Kubeconfig> {
    let (raw, origin) = read_file(path)?;
    let mut config = Kubeconfig::default();
    config.merge(raw, &origin)?;
    Ok(config)
}

/// `$KUBECONFIG` (merged, missing files skipped) or `~/.kube/config`. `None` when no file
/// exists; `tried` collects what was looked at, for the "nothing found" message.
pub(crate) fn load_default(env: &Env, tried: &mut Vec<String>) -> Result<Option<Kubeconfig>> {
    let separator = if cfg!(windows) { ';' } else { ':' };
    let paths: Vec<PathBuf> = match env.var("KUBECONFIG") {
        Some(list) => {
            let mut seen = HashSet::new();
            list.split(separator).filter(|p| !p.is_empty() && seen.insert(*p)).map(PathBuf::from).collect()
        }
        None => match env.home() {
            Some(home) => vec![home.join(".kube").join("config")],
            None => {
                tried.push("~/.kube/config ($HOME unset)".to_owned());
                return Ok(None);
            }
        },
    };
    let from_env = env.var("KUBECONFIG").is_some();
    let mut config = Kubeconfig::default();
    let mut found = false;
    for path in &paths {
        if !path.exists() {
            if from_env {
                log::warn!("kubeconfig {} (listed in KUBECONFIG) does not exist; skipped", path.display());
            }
            tried.push(format!("{} (missing{})", path.display(), if from_env { ", from KUBECONFIG" } else { "" }));
            continue;
        }
        let (raw, origin) = read_file(path)?;
        config.merge(raw, &origin)?;
        found = true;
    }
    Ok(found.then_some(config))
}

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

fn find<'a, T>(entries: &'a [Entry<T>], name: &str) -> Option<&'a Entry<T>> {
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
            super::read_file(&path).map(Some).map_err(|e| {
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
    let parsed = super::normalize_server(server).map_err(|m| origin.error(&field("server"), m))?;
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

fn exec_config(origin: &Origin, prefix: &str, e: &RawExec, cluster_info: serde_json::Value) -> Result<ExecConfig> {
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
        timeout: super::exec::DEFAULT_TIMEOUT,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Dir(PathBuf);

    impl Dir {
        fn new(name: &str) -> Dir {
            let dir = std::env::temp_dir().join(format!("kw-kc-{}-{name}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            Dir(dir)
        }
        fn write(&self, name: &str, text: &str) -> PathBuf {
            let p = self.0.join(name);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, text).unwrap();
            p
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn token_of(conn: &Connection) -> String {
        match &conn.credentials {
            Credentials::Token(t) => t.expose().to_owned(),
            other => panic!("not a token: {other:?}"),
        }
    }

    #[test]
    fn kubeconfig_list_merges_first_file_wins_per_entry() {
        let dir = Dir::new("merge");
        let a = dir.write(
            "a",
            "current-context: x\nusers:\n- name: u1\n  user: {token: a}\nclusters:\n- name: c\n  cluster: {server: 'https://a'}\n\
             contexts:\n- name: x\n  context: {cluster: c, user: u1}\n",
        );
        let b = dir.write(
            "b",
            "current-context: y\nusers:\n- name: u1\n  user: {username: b, password: p}\n- name: u2\n  user: {token: b2}\n\
             contexts:\n- name: y\n  context: {cluster: c, user: u2}\n",
        );
        let missing = dir.0.join("missing");
        let list = format!("{}::{}:{}:{}", a.display(), missing.display(), b.display(), a.display());
        let env = Env::fixed(&[("KUBECONFIG", &list)], Path::new("/nonexistent"));
        let mut tried = Vec::new();
        let kc = load_default(&env, &mut tried).unwrap().unwrap();
        assert_eq!(kc.sources.len(), 2, "duplicates loaded once, missing skipped");
        assert!(tried[0].contains("missing"), "{tried:?}");
        let conn = connection(&kc, &KubeconfigOptions::default(), &env).unwrap().unwrap();
        assert_eq!(conn.server, "https://a");
        assert_eq!(token_of(&conn), "a", "u1 comes whole from the first file");
        let y = KubeconfigOptions { context: Some("y".into()), ..KubeconfigOptions::default() };
        let conn = connection(&kc, &y, &env).unwrap().unwrap();
        assert_eq!(token_of(&conn), "b2", "new names from later files are added");
    }

    #[test]
    fn home_kubeconfig_is_used_when_kubeconfig_is_unset() {
        let dir = Dir::new("home");
        dir.write(".kube/config", "current-context: x\n");
        let env = Env::fixed(&[("HOME", dir.0.to_str().unwrap())], Path::new("/nonexistent"));
        let kc = load_default(&env, &mut Vec::new()).unwrap().unwrap();
        assert_eq!(kc.current_context.as_ref().unwrap().0, "x");
        let env = Env::fixed(&[("HOME", "/nonexistent-home")], Path::new("/nonexistent"));
        let mut tried = Vec::new();
        assert!(load_default(&env, &mut tried).unwrap().is_none());
        assert_eq!(tried, ["/nonexistent-home/.kube/config (missing)"]);
    }

    #[test]
    fn an_unparsable_file_in_the_list_is_an_error_naming_it() {
        let dir = Dir::new("bad");
        let bad = dir.write("bad", "clusters: [\n");
        let env = Env::fixed(&[("KUBECONFIG", bad.to_str().unwrap())], Path::new("/nonexistent"));
        let e = load_default(&env, &mut Vec::new()).err().unwrap().to_string();
        assert!(e.starts_with(&format!("kubeconfig {}: invalid YAML", bad.display())), "{e}");
    }

    #[test]
    fn empty_files_and_json_are_accepted() {
        assert!(load_str("").unwrap().current_context.is_none());
        let kc = load_str(r#"{"current-context":"x","contexts":[{"name":"x","context":{"cluster":"c"}}],"clusters":[{"name":"c","cluster":{"server":"http://k:8001"}}]}"#).unwrap();
        let env = Env::fixed(&[], Path::new("/nonexistent"));
        let conn = connection(&kc, &KubeconfigOptions::default(), &env).unwrap().unwrap();
        assert_eq!(conn.server, "http://k:8001");
        assert_eq!(conn.default_namespace, "default");
        assert!(connection(&load_str("clusters: []").unwrap(), &KubeconfigOptions::default(), &env).unwrap().is_none());
    }

    #[test]
    fn exec_commands_with_a_slash_resolve_against_the_kubeconfig_directory() {
        let dir = Dir::new("execpath");
        let path = dir.write(
            "sub/config",
            "current-context: x\nclusters: [{name: c, cluster: {server: 'https://k'}}]\n\
             contexts: [{name: x, context: {cluster: c, user: u}}]\nusers:\n- name: u\n  user:\n    exec:\n      \
             apiVersion: client.authentication.k8s.io/v1beta1\n      command: bin/helper\n",
        );
        let kc = load_path(&path).unwrap();
        let u = find(&kc.users, "u").unwrap();
        let cfg = exec_config(&u.origin, "users[0].user.exec", u.value.exec.as_ref().unwrap(), serde_json::Value::Null)
            .unwrap();
        assert_eq!(cfg.command, dir.0.join("sub/bin/helper"));
        assert_eq!(cfg.interactive, InteractiveMode::IfAvailable, "v1beta1 defaults to IfAvailable");
        let bare = RawExec { command: Some("aws".into()), ..u.value.exec.clone().unwrap() };
        let cfg = exec_config(&u.origin, "p", &bare, serde_json::Value::Null).unwrap();
        assert_eq!(cfg.command, PathBuf::from("aws"), "bare names are looked up on PATH");
    }

    #[test]
    fn the_pod_namespace_applies_to_a_kubeconfig_context_without_one_inside_a_pod() {
        let dir = Dir::new("podns");
        dir.write("sa/token", "t");
        dir.write("sa/namespace", "pod-ns\n");
        let env = Env::fixed(
            &[("KUBERNETES_SERVICE_HOST", "10.0.0.1"), ("KUBERNETES_SERVICE_PORT", "443")],
            &dir.0.join("sa"),
        );
        let kc = load_str(
            "current-context: x\nclusters: [{name: c, cluster: {server: 'https://k'}}]\ncontexts: [{name: x, context: {cluster: c}}]\n",
        )
        .unwrap();
        let conn = connection(&kc, &KubeconfigOptions::default(), &env).unwrap().unwrap();
        assert_eq!(conn.default_namespace, "pod-ns");
    }
}
