//! Connection settings and credentials: where the API server is, how to trust it, who we are.
//!
//! A [`Client`](crate::Client) holds a `Connection`; the HTTP layer asks it for an agent and,
//! before every request, for the headers that prove who we are, so rotating credentials (token
//! files, service-account tokens, exec plugins) are picked up by long-running watchers.
//!
//! # Where the configuration comes from
//!
//! [`Client::try_default`](crate::Client::try_default) follows kubectl's order:
//!
//! 1. `$KUBECONFIG`, a list of files (`:`-separated, `;` on Windows), merged the way kubectl
//!    merges them: the first file that defines a cluster, user or context name wins (the whole
//!    entry), and the first non-empty `current-context` wins. Missing files are skipped.
//! 2. Otherwise `$HOME/.kube/config`.
//! 3. The in-cluster configuration (`KUBERNETES_SERVICE_HOST`/`KUBERNETES_SERVICE_PORT` and the
//!    service-account files), only when no kubeconfig exists or it selects no context.
//!
//! When nothing works the error lists every source that was tried. A kubeconfig that exists but
//! is broken is reported as such: there is no silent fallback. Each step is also available on its
//! own: [`Client::from_kubeconfig`](crate::Client::from_kubeconfig) (steps 1–2),
//! [`Client::from_kubeconfig_path`](crate::Client::from_kubeconfig_path) (one file, which must
//! exist), [`Client::from_kubeconfig_yaml`](crate::Client::from_kubeconfig_yaml) (a kubeconfig
//! held in memory) and [`Client::in_cluster`](crate::Client::in_cluster).
//!
//! # Credentials
//!
//! `token`, `tokenFile` (re-read about once a minute and after a 401), client certificates
//! (PKCS#1, PKCS#8 and SEC1 keys; a key that does not match its certificate is refused when the
//! kubeconfig is loaded), `username`/`password`, and exec plugins
//! (`client.authentication.k8s.io/v1` and `v1beta1`, cached until their expiry and re-run once
//! after a 401). Static credentials win over exec plugins. Impersonation (`as`, `as-groups`,
//! `as-uid`, `as-user-extra`) is added on top. Legacy `auth-provider` entries are refused with a
//! message naming the exec plugin to use instead. User info in the server URL
//! (`https://user:password@host`) is HTTP Basic authentication, used when the user entry has no
//! request credentials of its own, and is never printed. Credentials are never sent over plain
//! `http://` unless [`KubeconfigOptions::allow_http_credentials`] is set.
//!
//! # Trusting the server
//!
//! A cluster's `certificate-authority` file, `certificate-authority-data`, or in a pod the
//! service account's `ca.crt`; else the bundled public CAs. A CA *file* is read again when a TLS
//! handshake fails because the server's certificate is not signed by it (a rotated cluster CA):
//! at most once per failed request, so a watcher reads it once per backoff step until it changes,
//! then every user of the [`Client`](crate::Client) trusts the new CA without a restart. Inline
//! `certificate-authority-data` is never reloaded (docs/auth.md §7).
//!
//! # Default namespace
//!
//! [`Client::default_namespace`](crate::Client::default_namespace) is, in order: the
//! [`KubeconfigOptions::namespace`] override; the selected context's `namespace`; inside a pod,
//! `$POD_NAMESPACE` or the service account's `namespace` file (this also applies when a
//! kubeconfig is used whose context sets no namespace, as client-go does); else `default`.
//!
//! # Proxies
//!
//! A cluster's `proxy-url` (`http`, `https` or `socks5`) wins. Otherwise `HTTPS_PROXY` is used for
//! `https://` servers and `HTTP_PROXY` for `http://` ones (upper case first, then lower case),
//! unless `NO_PROXY` excludes the host (`*`, `domain`, `.domain`, `host:port`, IP addresses and
//! CIDR ranges) or the server is a loopback address. `ALL_PROXY` is ignored, as in kubectl.

mod exec;
mod failure;
mod in_cluster;
mod kubeconfig;
mod proxy;
mod tls;
mod token;

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use ureq::tls::ClientCert;

use crate::error::{Error, Result};

pub(crate) use self::exec::ExecPlugin;
pub(crate) use self::failure::Failure;
pub(crate) use self::proxy::ProxyChoice;
pub(crate) use self::tls::{RootSet, TlsSettings};
pub(crate) use self::token::TokenFile;

/// Overrides for choosing what to use from a kubeconfig, like kubectl's `--context`,
/// `--cluster`, `--user` and `--namespace` flags.
///
/// `None` means "as the kubeconfig says".
///
/// ```
/// use kube_watcher::KubeconfigOptions;
///
/// let options = KubeconfigOptions { context: Some("prod".into()), ..KubeconfigOptions::default() };
/// assert_eq!(options.namespace, None);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KubeconfigOptions {
    /// The context to use instead of `current-context`.
    pub context: Option<String>,
    /// The cluster to use instead of the context's cluster.
    pub cluster: Option<String>,
    /// The user (credentials) to use instead of the context's user.
    pub user: Option<String>,
    /// The default namespace, instead of the context's (see the module docs for the fallbacks).
    pub namespace: Option<String>,
    /// Send credentials (the user's, or user info in the server URL) even when the server URL is
    /// plain `http://` (they travel in clear text). Defaults to false: such a configuration is
    /// refused, naming the cluster's `server` field.
    pub allow_http_credentials: bool,
}

/// A secret string (token, password, header value). `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Secret(String);

impl Secret {
    pub(crate) fn new(s: impl Into<String>) -> Secret {
        Secret(s.into())
    }
    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// How requests prove who we are (on top of a client certificate, which lives in the TLS settings).
#[derive(Clone, Debug)]
pub(crate) enum Credentials {
    /// No credentials (plain `kubectl proxy`, the fake server, client certificate only).
    None,
    /// A static bearer token.
    Token(Secret),
    /// A bearer token read from a file, re-read as it rotates (also the in-cluster token).
    TokenFile(Arc<TokenFile>),
    /// HTTP Basic authentication.
    Basic {
        /// The user name (not secret).
        username: String,
        /// The password.
        password: Secret,
    },
    /// An exec credential plugin, run on demand and cached until its credential expires.
    Exec(Arc<ExecPlugin>),
}

/// The credentials of one request ([`Connection::request_auth`]).
pub(crate) struct RequestAuth {
    pub(crate) headers: Vec<(String, Secret)>,
    /// A client certificate from an exec plugin, presented instead of the kubeconfig's.
    pub(crate) client_cert: Option<ClientCert>,
}

/// Impersonation settings (`as`, `as-uid`, `as-groups`, `as-user-extra`); none of it is secret.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Impersonation {
    pub(crate) user: String,
    pub(crate) uid: Option<String>,
    pub(crate) groups: Vec<String>,
    pub(crate) extra: Vec<(String, Vec<String>)>,
}

impl Impersonation {
    fn headers(&self, out: &mut Vec<(String, Secret)>) {
        out.push(("Impersonate-User".to_owned(), Secret::new(self.user.clone())));
        if let Some(uid) = &self.uid {
            out.push(("Impersonate-Uid".to_owned(), Secret::new(uid.clone())));
        }
        for group in &self.groups {
            out.push(("Impersonate-Group".to_owned(), Secret::new(group.clone())));
        }
        for (key, values) in &self.extra {
            let name = format!("Impersonate-Extra-{}", escape_header_key(key));
            for value in values {
                out.push((name.clone(), Secret::new(value.clone())));
            }
        }
    }
}

/// Percent-encodes every byte of an extra key that is not a header token character, and `%`
/// (client-go `transport/round_trippers.go`, `headerKeyEscape`).
fn escape_header_key(key: &str) -> String {
    let mut out = String::with_capacity(key.len());
    for b in key.bytes() {
        let token = b.is_ascii_alphanumeric() || b"!#$&'*+-.^_`|~".contains(&b);
        if token {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Everything needed to reach one API server as one user.
#[derive(Clone, Debug)]
pub(crate) struct Connection {
    /// Base URL without a trailing slash; may carry a path prefix. Never holds user info (see
    /// [`normalize_server`]), so it is safe to print.
    pub(crate) server: String,
    /// Where `server` came from (a kubeconfig's cluster entry, the in-cluster environment, the
    /// caller's URL), so that a connection error names what to fix.
    pub(crate) server_source: String,
    pub(crate) default_namespace: String,
    pub(crate) credentials: Credentials,
    /// Impersonation headers added to every request, on top of the credentials.
    pub(crate) impersonation: Option<Arc<Impersonation>>,
    /// Trust (CA, insecure), client certificate and tls-server-name; only used for https.
    pub(crate) tls: TlsSettings,
    /// The proxy for this server, already decided (`proxy-url` or the environment's policy).
    pub(crate) proxy: Option<ProxyChoice>,
    /// Do not ask for gzip-compressed responses (`disable-compression`).
    pub(crate) disable_compression: bool,
}

impl Connection {
    /// A connection to `url` (http or https) with no proxy, and no credentials but those of
    /// the URL's user info, which are refused over plain `http://`.
    pub(crate) fn from_url(url: &str) -> Result<Connection> {
        let parsed = normalize_server(url).map_err(|message| Error::config("url", message))?;
        let mut conn = Connection::to_server(parsed.server, "the URL given to Client::from_url");
        if let Some(userinfo) = parsed.userinfo {
            if !conn.is_https() {
                return Err(Error::config(
                    "url",
                    format!(
                        "{:?} carries a user name and password, which would travel unencrypted over plain \
                         http://; use https:// (a kubeconfig can allow it: KubeconfigOptions::allow_http_credentials)",
                        redact_userinfo(url.trim())
                    ),
                ));
            }
            conn.credentials = userinfo.into_credentials();
        }
        Ok(conn)
    }

    /// A connection to `server` (already checked by [`normalize_server`], without user info),
    /// with no credentials and no proxy.
    pub(crate) fn to_server(server: String, source: &str) -> Connection {
        Connection {
            server,
            server_source: source.to_owned(),
            default_namespace: "default".to_owned(),
            credentials: Credentials::None,
            impersonation: None,
            tls: TlsSettings::default(),
            proxy: None,
            disable_compression: false,
        }
    }

    pub(crate) fn is_https(&self) -> bool {
        self.server.starts_with("https://")
    }

    /// A new ureq agent for one watcher (or one one-shot call), configured for this server, and
    /// the CAs it trusts (those of the moment: see [`request_tls`](Self::request_tls)).
    ///
    /// Never sets `timeout_global`, `timeout_per_call` or `timeout_recv_body`: they would kill
    /// healthy watches (docs/http.md §2).
    pub(crate) fn agent(&self) -> (ureq::Agent, RootSet) {
        let roots = self.tls.roots();
        let mut builder = ureq::Agent::config_builder()
            .http_status_as_error(false)
            // Always explicit: ureq would otherwise pick up proxy variables for every scheme
            // (docs/http.md §6); `self.proxy` already applies kubectl's policy.
            .proxy(self.proxy.as_ref().map(|p| p.proxy.clone()))
            .user_agent(concat!("kube-watcher/", env!("CARGO_PKG_VERSION")))
            .timeout_connect(Some(Duration::from_secs(10)))
            .timeout_resolve(Some(Duration::from_secs(10)))
            .max_redirects(0);
        if self.disable_compression {
            builder = builder.accept_encoding("");
        }
        if self.is_https() {
            builder = builder.tls_config(self.tls.to_ureq(roots.clone(), self.tls.client_cert.clone()));
        }
        let config = builder.build();
        let agent = match (&self.tls.server_name, self.is_https()) {
            (Some(name), true) => tls::agent_with_server_name(config, &self.server, name),
            _ => ureq::Agent::new_with_config(config),
        };
        (agent, roots)
    }

    /// What proves who we are for the next request: headers (`Authorization`, impersonation)
    /// and, from an exec plugin, a client certificate. Called on the watcher thread before every
    /// request, so rotated credentials are picked up.
    pub(crate) fn request_auth(&self) -> Result<RequestAuth> {
        let mut headers = Vec::new();
        let mut client_cert = None;
        let bearer = |token: &str| ("Authorization".to_owned(), Secret::new(format!("Bearer {token}")));
        match &self.credentials {
            Credentials::None => {}
            Credentials::Token(t) => headers.push(bearer(t.expose())),
            Credentials::TokenFile(file) => headers.push(bearer(file.token()?.expose())),
            Credentials::Basic { username, password } => {
                use base64::Engine as _;
                let raw = format!("{username}:{}", password.expose());
                let encoded = base64::engine::general_purpose::STANDARD.encode(raw.as_bytes());
                headers.push(("Authorization".to_owned(), Secret::new(format!("Basic {encoded}"))));
            }
            Credentials::Exec(plugin) => {
                let credential = plugin.credential()?;
                if let Some(token) = &credential.token {
                    headers.push(bearer(token.expose()));
                }
                client_cert = credential.client_cert;
            }
        }
        if let Some(imp) = &self.impersonation {
            imp.headers(&mut headers);
        }
        Ok(RequestAuth { headers, client_cert })
    }

    /// The TLS configuration a request needs in place of its agent's, if any: when it presents
    /// `client_cert` (from an exec plugin) instead of the kubeconfig's own, or when the CA file
    /// was re-read since the agent was built (`roots`, the CAs of now, differ from
    /// `agent_roots`). Such requests are not pooled with the agent's connections, but the agent's
    /// `shutdown` still reaches them, so a watcher never needs a new agent.
    pub(crate) fn request_tls(
        &self,
        roots: &RootSet,
        agent_roots: &RootSet,
        client_cert: Option<ClientCert>,
    ) -> Option<ureq::tls::TlsConfig> {
        if !self.is_https() {
            return None;
        }
        let same_roots = match (roots, agent_roots) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (None, None) => true,
            _ => false,
        };
        match client_cert {
            Some(cert) => Some(self.tls.to_ureq(roots.clone(), Some(cert))),
            None if !same_roots => Some(self.tls.to_ureq(roots.clone(), self.tls.client_cert.clone())),
            None => None,
        }
    }

    /// Where the client certificate this connection presents comes from, if it presents one.
    pub(crate) fn client_cert_source(&self) -> Option<String> {
        match &self.credentials {
            Credentials::Exec(plugin) if plugin.gave_client_cert() => {
                Some(format!("the client certificate from {}", plugin.source_name()))
            }
            _ => self.tls.client_cert_source.clone(),
        }
    }

    /// The server refused the client certificate in the TLS handshake: if it came from an exec
    /// plugin, forget it so the next request runs the plugin again. True if a retry may succeed.
    pub(crate) fn client_cert_may_refresh(&self) -> bool {
        match &self.credentials {
            Credentials::Exec(plugin) if plugin.gave_client_cert() => plugin.refresh_after_unauthorized(),
            _ => false,
        }
    }

    /// The server answered 401: drop cached credentials. True if a retry may now succeed.
    pub(crate) fn refresh_after_unauthorized(&self) -> bool {
        match &self.credentials {
            Credentials::None | Credentials::Token(_) | Credentials::Basic { .. } => false,
            Credentials::TokenFile(file) => file.refresh_after_unauthorized(),
            Credentials::Exec(plugin) => plugin.refresh_after_unauthorized(),
        }
    }
}

/// A server URL, checked: what may be printed, and the credentials its user info carried.
#[derive(Debug)]
pub(crate) struct ServerUrl {
    /// Scheme, host, port and path prefix: no user info, query, fragment or trailing `/`. Safe
    /// to print, and the only form of the URL a [`Connection`] keeps.
    pub(crate) server: String,
    /// `user:password@` from the URL, percent-decoded: a credential (HTTP Basic, as Go's HTTP
    /// client sends it; docs/auth.md §2), never printed.
    pub(crate) userinfo: Option<Userinfo>,
}

/// The user name and password of a URL's user info.
#[derive(Debug)]
pub(crate) struct Userinfo {
    pub(crate) username: String,
    pub(crate) password: Secret,
}

impl Userinfo {
    pub(crate) fn into_credentials(self) -> Credentials {
        Credentials::Basic { username: self.username, password: self.password }
    }
}

/// Checks a server URL (explicit `http://` or `https://` scheme, a host, no whitespace), drops
/// its query and fragment and any trailing `/`, and takes its user info out as a credential.
/// Errors are messages without a field name; they quote the URL with its user info redacted.
pub(crate) fn normalize_server(url: &str) -> std::result::Result<ServerUrl, String> {
    let trimmed = url.trim();
    let shown = redact_userinfo(trimmed);
    let (scheme, rest) = if let Some(rest) = trimmed.strip_prefix("https://") {
        ("https://", rest)
    } else if let Some(rest) = trimmed.strip_prefix("http://") {
        ("http://", rest)
    } else {
        return Err(format!("{shown:?} must start with http:// or https://"));
    };
    if rest.is_empty() || rest.starts_with('/') {
        return Err(format!("{shown:?} has no host"));
    }
    if trimmed.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!("{shown:?} contains whitespace"));
    }
    let rest = rest.split(['?', '#']).next().unwrap_or(rest).trim_end_matches('/');
    let uri = format!("{scheme}{rest}")
        .parse::<ureq::http::Uri>()
        .map_err(|e| format!("{shown:?} is not a valid URL: {e}"))?;
    // The parser accepted it, so the authority is exactly the start of `rest`.
    let authority = uri.authority().map_or("", |a| a.as_str());
    let path = rest.get(authority.len()..).unwrap_or_default();
    let (userinfo, host) = match authority.rsplit_once('@') {
        Some((userinfo, host)) => (Some(userinfo), host),
        None => (None, authority),
    };
    if host.is_empty() {
        return Err(format!("{shown:?} has no host"));
    }
    let userinfo = match userinfo.filter(|u| !u.is_empty()) {
        Some(info) => {
            let (user, password) = info.split_once(':').unwrap_or((info, ""));
            let decode = |part: &str, what: &str| {
                percent_decode(part)
                    .ok_or_else(|| format!("{shown:?}: the {what} in the URL is not valid percent-encoded UTF-8"))
            };
            Some(Userinfo {
                username: decode(user, "user name")?,
                password: Secret::new(decode(password, "password")?),
            })
        }
        None => None,
    };
    Ok(ServerUrl { server: format!("{scheme}{host}{path}"), userinfo })
}

/// `url` with everything between the scheme and the last `@` before the path (or, without a
/// scheme, from the start) replaced by `<redacted>`: user info is a credential, and a malformed
/// URL may not say where it ends, so this errs on the side of hiding.
pub(crate) fn redact_userinfo(url: &str) -> String {
    let start = url.find("://").map_or(0, |i| i + 3);
    let end = url[start..].find(['?', '#']).map_or(url.len(), |i| start + i);
    match url[start..end].rfind('@') {
        Some(at) => format!("{}<redacted>{}", &url[..start], &url[start + at..]),
        None => url.to_owned(),
    }
}

/// Decodes `%XX` escapes (RFC 3986 §2.1); `None` for a broken escape or bytes that are not UTF-8.
fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// Where environment variables and the service-account directory come from: the process, or a
/// fixed set that tests build (no global state is touched).
#[derive(Clone)]
pub(crate) struct Env {
    /// `None`: the process environment.
    vars: Option<HashMap<String, String>>,
    /// `/var/run/secrets/kubernetes.io/serviceaccount` outside tests.
    pub(crate) service_account_dir: PathBuf,
}

impl fmt::Debug for Env {
    // Variables may hold proxy passwords: only say where they come from.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Env")
            .field("vars", &if self.vars.is_some() { "fixed" } else { "process" })
            .field("service_account_dir", &self.service_account_dir)
            .finish()
    }
}

impl Env {
    /// The process environment and the standard service-account directory.
    pub(crate) fn process() -> Env {
        Env { vars: None, service_account_dir: PathBuf::from(in_cluster::SERVICE_ACCOUNT_DIR) }
    }

    /// A fixed set of variables and a service-account directory (for tests).
    #[cfg(test)]
    pub(crate) fn fixed(vars: &[(&str, &str)], service_account_dir: &Path) -> Env {
        Env {
            vars: Some(vars.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()),
            service_account_dir: service_account_dir.to_owned(),
        }
    }

    /// A variable's value, `None` when unset, empty or not valid UTF-8.
    pub(crate) fn var(&self, name: &str) -> Option<String> {
        let value = match &self.vars {
            Some(vars) => vars.get(name).cloned(),
            None => std::env::var(name).ok(),
        };
        value.filter(|v| !v.is_empty())
    }

    /// The user's home directory: `$HOME`, else (Windows) `%USERPROFILE%` or `%HOMEDRIVE%%HOMEPATH%`.
    fn home(&self) -> Option<PathBuf> {
        if let Some(home) = self.var("HOME") {
            return Some(PathBuf::from(home));
        }
        if cfg!(windows) {
            if let Some(profile) = self.var("USERPROFILE") {
                return Some(PathBuf::from(profile));
            }
            if let (Some(drive), Some(path)) = (self.var("HOMEDRIVE"), self.var("HOMEPATH")) {
                return Some(PathBuf::from(format!("{drive}{path}")));
            }
        }
        None
    }
}

/// Resolves the connection the way `try_default` does, with an injectable environment.
fn infer(env: &Env) -> Result<Connection> {
    let mut tried = Vec::new();
    let options = KubeconfigOptions::default();
    let mut without_context = None;
    if let Some(config) = kubeconfig::load_default(env, &mut tried)? {
        if let Some(conn) = kubeconfig::connection(&config, &options, env)? {
            return Ok(conn);
        }
        without_context = Some(config.describe());
    }
    match in_cluster::connection(env) {
        Ok(conn) => Ok(conn),
        Err(in_cluster::InClusterError::NotInCluster(why)) => Err(match without_context {
            // Found, but it names no context: say that, not "not found".
            Some(source) => Error::Auth {
                source_name: source.into(),
                message: format!(
                    "current-context: not set, and no context was chosen (kubectl config use-context NAME sets \
                     one; KubeconfigOptions::context chooses one); not in a cluster either ({why})"
                )
                .into(),
            },
            None => {
                tried.push(format!("in-cluster ({why})"));
                Error::Auth {
                    source_name: "client configuration".into(),
                    message: format!("no kubeconfig or in-cluster configuration found; tried: {}", tried.join(", "))
                        .into(),
                }
            }
        }),
        Err(in_cluster::InClusterError::Broken(e)) => Err(e),
    }
}

/// The connection `Client::try_default` makes: `$KUBECONFIG` (merged), else `~/.kube/config`,
/// else the in-cluster service account.
pub(crate) fn default_connection() -> Result<Connection> {
    infer(&Env::process())
}

/// The connection `Client::in_cluster` makes.
pub(crate) fn in_cluster_connection() -> Result<Connection> {
    let env = Env::process();
    match in_cluster::connection(&env) {
        Ok(conn) => Ok(conn),
        Err(in_cluster::InClusterError::Broken(e)) => Err(e),
        Err(in_cluster::InClusterError::NotInCluster(why)) => Err(Error::Auth {
            source_name: "in-cluster configuration".into(),
            message: format!("not running in a cluster: {why}").into(),
        }),
    }
}

/// Where `Client::from_kubeconfig*` read its kubeconfig.
pub(crate) enum KubeconfigSource<'a> {
    /// `$KUBECONFIG` (merged) or `~/.kube/config`.
    Default,
    /// One file only.
    Path(&'a Path),
    /// Text held in memory.
    Yaml(&'a str),
}

/// The connection a kubeconfig selects, with `options` overriding context, cluster, user or
/// namespace. Never falls back to the in-cluster configuration.
pub(crate) fn kubeconfig_connection(source: KubeconfigSource<'_>, options: &KubeconfigOptions) -> Result<Connection> {
    let env = Env::process();
    let config = match source {
        KubeconfigSource::Default => {
            let mut tried = Vec::new();
            kubeconfig::load_default(&env, &mut tried)?.ok_or_else(|| Error::Auth {
                source_name: "kubeconfig".into(),
                message: format!("no kubeconfig file found; tried: {}", tried.join(", ")).into(),
            })?
        }
        KubeconfigSource::Path(path) => kubeconfig::load_path(path)?,
        KubeconfigSource::Yaml(yaml) => kubeconfig::load_str(yaml)?,
    };
    kubeconfig::connection(&config, options, &env)?.ok_or_else(|| Error::Auth {
        source_name: config.describe().into(),
        message: "current-context: not set, and no context was chosen".into(),
    })
}

/// The most we read of any credential or configuration file: 16 MiB. A path naming a device
/// (`/dev/zero`) or a huge file must give an error, not exhaust memory.
const MAX_FILE: u64 = 16 << 20;

/// Reads a kubeconfig, certificate, key, CA or token file, bounded by [`MAX_FILE`].
pub(crate) fn read_file(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read as _;
    let mut buf = Vec::new();
    std::fs::File::open(path)?.take(MAX_FILE + 1).read_to_end(&mut buf)?;
    if buf.len() as u64 > MAX_FILE {
        return Err(std::io::Error::other(format!("larger than {} MiB", MAX_FILE >> 20)));
    }
    Ok(buf)
}

/// [`read_file`] for text files.
pub(crate) fn read_text(path: &Path) -> std::io::Result<String> {
    String::from_utf8(read_file(path)?).map_err(|_| std::io::Error::other("not UTF-8"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn credential_files_are_read_with_a_bound() {
        let err = super::read_file(Path::new("/dev/zero")).unwrap_err();
        assert!(err.to_string().contains("larger than 16 MiB"), "{err}");
    }

    use super::*;

    #[test]
    fn urls_need_a_scheme_and_host() {
        assert!(Connection::from_url("localhost:8080").is_err());
        assert!(Connection::from_url("http://").is_err());
        let c = Connection::from_url("https://proxy.example/k8s/clusters/c-42/").unwrap();
        assert_eq!(c.server, "https://proxy.example/k8s/clusters/c-42");
        let c = Connection::from_url("https://proxy.example:6443/k8s?x=1#frag").unwrap();
        assert_eq!(c.server, "https://proxy.example:6443/k8s");
    }

    #[test]
    fn user_info_in_a_server_url_becomes_basic_credentials_and_leaves_the_url() {
        let c = Connection::from_url("https://ad%40min:p%3Aw:x@kube.example:6443/prefix/").unwrap();
        assert_eq!(c.server, "https://kube.example:6443/prefix");
        let auth = c.request_auth().unwrap();
        let (name, value) = &auth.headers[0];
        use base64::Engine as _;
        let expected = base64::engine::general_purpose::STANDARD.encode("ad@min:p:w:x");
        assert_eq!((name.as_str(), value.expose()), ("Authorization", format!("Basic {expected}").as_str()));
        let shown = format!("{c:?}");
        assert!(!shown.contains("p%3Aw") && !shown.contains("p:w"), "{shown}");
        // Over plain http it is refused, and the error quotes the URL without it.
        let e = Connection::from_url("http://admin:s3cret@kube.example").unwrap_err().to_string();
        assert!(e.contains("\"http://<redacted>@kube.example\"") && !e.contains("s3cret"), "{e}");
        // Bad escapes are refused without quoting the user info.
        let e = normalize_server("https://admin:s3cret%zz@kube.example").unwrap_err();
        assert!(e.contains("password") && !e.contains("s3cret"), "{e}");
        // An empty user info carries nothing.
        let parsed = normalize_server("https://@kube.example").unwrap();
        assert_eq!((parsed.server.as_str(), parsed.userinfo.is_none()), ("https://kube.example", true));
    }

    #[test]
    fn user_info_is_redacted_wherever_a_url_is_quoted() {
        assert_eq!(redact_userinfo("https://u:p@h:1/x@y?q=a@b"), "https://<redacted>@y?q=a@b");
        assert_eq!(redact_userinfo("u:p@h:1"), "<redacted>@h:1");
        assert_eq!(redact_userinfo("https://h:1/p"), "https://h:1/p");
        for bad in ["u:s3cret@h", "https://u:s3cret@", "https://u:s3cret@h/a b", "https://u:s3cret@h:port:x"] {
            if let Err(e) = normalize_server(bad) {
                assert!(!e.contains("s3cret"), "{bad}: {e}");
            }
        }
    }

    #[test]
    fn secrets_are_redacted_in_debug() {
        let c = Connection {
            credentials: Credentials::Token(Secret::new("s3cr3t-token")),
            ..Connection::from_url("https://k").unwrap()
        };
        assert!(!format!("{c:?}").contains("s3cr3t"));
        let basic = Credentials::Basic { username: "bob".into(), password: Secret::new("hunter2-pw") };
        assert!(!format!("{basic:?}").contains("hunter2"));
    }

    #[test]
    fn impersonation_extra_keys_are_percent_encoded() {
        assert_eq!(escape_header_key("example.org/scopes"), "example.org%2Fscopes");
        assert_eq!(escape_header_key("100%"), "100%25");
        let imp = Impersonation {
            user: "jane".into(),
            uid: Some("42".into()),
            groups: vec!["a".into(), "b".into()],
            extra: vec![("reason".into(), vec!["x".into(), "y".into()])],
        };
        let mut headers = Vec::new();
        imp.headers(&mut headers);
        let names: Vec<&str> = headers.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "Impersonate-User",
                "Impersonate-Uid",
                "Impersonate-Group",
                "Impersonate-Group",
                "Impersonate-Extra-reason",
                "Impersonate-Extra-reason"
            ]
        );
    }
}

#[cfg(all(test, feature = "testing"))]
mod chain_tests {
    use k8s_openapi::api::core::v1::Pod;

    use super::*;
    use crate::testing::FakeApiServer;
    use crate::{Api, Client, ListParams};

    struct Dir(PathBuf);

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn dir(name: &str) -> Dir {
        let dir = std::env::temp_dir().join(format!("kw-chain-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Dir(dir)
    }

    #[test]
    fn with_nothing_configured_the_error_lists_every_source_tried() {
        let d = dir("nothing");
        let home = d.0.display().to_string();
        let env = Env::fixed(&[("HOME", &home)], &d.0.join("sa"));
        let e = infer(&env).unwrap_err().to_string();
        assert_eq!(
            e,
            format!(
                "client configuration: no kubeconfig or in-cluster configuration found; tried: \
                 {home}/.kube/config (missing), in-cluster (KUBERNETES_SERVICE_HOST unset)"
            )
        );
    }

    #[test]
    fn in_cluster_is_used_when_no_kubeconfig_exists_and_lists_pods() {
        let server = FakeApiServer::builder().tls(true).token("sa-token").start();
        let d = dir("incluster");
        let sa = d.0.join("sa");
        std::fs::create_dir_all(&sa).unwrap();
        std::fs::write(sa.join("token"), "sa-token\n").unwrap();
        std::fs::write(sa.join("ca.crt"), server.ca_pem().unwrap()).unwrap();
        std::fs::write(sa.join("namespace"), "shop").unwrap();
        let port = server.addr().port().to_string();
        let home = d.0.display().to_string();
        let env = Env::fixed(
            &[("HOME", &home), ("KUBERNETES_SERVICE_HOST", "127.0.0.1"), ("KUBERNETES_SERVICE_PORT", &port)],
            &sa,
        );
        let conn = infer(&env).unwrap();
        assert_eq!(conn.server, format!("https://127.0.0.1:{port}"));
        assert_eq!(conn.default_namespace, "shop");
        let client = Client { conn: Arc::new(conn) };
        assert!(Api::<Pod>::all(client).list(&ListParams::default()).is_ok());
    }

    #[test]
    fn in_cluster_ca_crt_is_read_again_when_the_ca_rotates() {
        let old = FakeApiServer::builder().tls(true).token("sa-token").start();
        // The client's address stays; the server behind it changes (a forwarder, not a restart
        // on the same port, which another test may have taken meanwhile).
        let (port, target) = forwarder(old.addr());
        let d = dir("rotated-ca");
        let sa = d.0.join("sa");
        std::fs::create_dir_all(&sa).unwrap();
        std::fs::write(sa.join("token"), "sa-token\n").unwrap();
        std::fs::write(sa.join("ca.crt"), old.ca_pem().unwrap()).unwrap();
        let port_text = port.to_string();
        let env = Env::fixed(&[("KUBERNETES_SERVICE_HOST", "127.0.0.1"), ("KUBERNETES_SERVICE_PORT", &port_text)], &sa);
        let pods = Api::<Pod>::all(Client { conn: Arc::new(infer(&env).unwrap()) });
        assert!(pods.list(&ListParams::default()).is_ok());
        let new = FakeApiServer::builder().tls(true).token("sa-token").start();
        *target.lock() = new.addr();
        drop(old);
        let e = pods.list(&ListParams::default()).unwrap_err().to_string();
        assert!(e.contains("is not signed by the CA in") && e.contains("in-cluster ca.crt"), "{e}");
        // The kubelet updates the mounted file: the next request reads it again.
        std::fs::write(sa.join("ca.crt"), new.ca_pem().unwrap()).unwrap();
        assert!(pods.list(&ListParams::default()).is_ok());
    }

    /// A loopback port that forwards each connection to the address in the returned cell (read
    /// when the connection is accepted).
    fn forwarder(to: std::net::SocketAddr) -> (u16, Arc<parking_lot::Mutex<std::net::SocketAddr>>) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let target = Arc::new(parking_lot::Mutex::new(to));
        let cell = Arc::clone(&target);
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let Ok(server) = std::net::TcpStream::connect(*cell.lock()) else { continue };
                for (mut from, mut to) in [(client.try_clone().unwrap(), server.try_clone().unwrap()), (server, client)]
                {
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut from, &mut to);
                        let _ = to.shutdown(std::net::Shutdown::Both);
                    });
                }
            }
        });
        (port, target)
    }

    #[test]
    fn a_kubeconfig_without_current_context_falls_back_to_in_cluster() {
        let d = dir("empty");
        std::fs::create_dir_all(d.0.join(".kube")).unwrap();
        std::fs::write(d.0.join(".kube/config"), "apiVersion: v1\nkind: Config\n").unwrap();
        let home = d.0.display().to_string();
        let env = Env::fixed(&[("HOME", &home)], &d.0.join("sa"));
        let e = infer(&env).unwrap_err().to_string();
        let file = d.0.join(".kube/config").display().to_string();
        assert!(e.starts_with(&format!("kubeconfig {file}: current-context: not set")), "the file was found: {e}");
        assert!(!e.contains("no kubeconfig"), "{e}");
        assert!(e.contains("not in a cluster either (KUBERNETES_SERVICE_HOST unset)"), "{e}");
    }

    #[test]
    fn in_cluster_hosts_in_ipv6_get_brackets() {
        let d = dir("ipv6");
        std::fs::write(d.0.join("token"), "t").unwrap();
        let server = FakeApiServer::builder().tls(true).start();
        std::fs::write(d.0.join("ca.crt"), server.ca_pem().unwrap()).unwrap();
        let env = Env::fixed(&[("KUBERNETES_SERVICE_HOST", "fd00:10:96::1"), ("KUBERNETES_SERVICE_PORT", "443")], &d.0);
        let conn = infer(&env).unwrap();
        assert_eq!(conn.server, "https://[fd00:10:96::1]:443");
    }
}
