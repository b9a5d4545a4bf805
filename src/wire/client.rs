//! `Client`: where the API server is and who we are to it (auth/ resolves both). [`Api`](super::api::Api)
//! names a resource type on it; [`Http`](super::http::Http) makes the requests.

use std::path::Path;
use std::sync::Arc;

use crate::auth::{self, Connection, Credentials, KubeconfigOptions, KubeconfigSource, Secret};
use crate::error::{Error, Result};

/// A connection to one Kubernetes API server, as one user.
///
/// Cheap to clone: it holds resolved settings and credentials. Each watcher builds its own HTTP
/// agent from them, so stopping one watcher never disturbs another.
///
/// ```
/// # let server = kube_watcher::testing::FakeApiServer::start();
/// # let url = server.url();
/// let client = kube_watcher::Client::from_url(&url)?; // e.g. "http://127.0.0.1:8001" for kubectl proxy
/// assert_eq!(client.default_namespace(), "default");
/// # Ok::<(), kube_watcher::Error>(())
/// ```
#[derive(Clone)]
pub struct Client {
    pub(crate) conn: Arc<Connection>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("server", &self.conn.server)
            .field("default_namespace", &self.conn.default_namespace)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// A client configured the way kubectl finds its configuration: `$KUBECONFIG` (merged),
    /// else `~/.kube/config`, else the in-cluster service account.
    ///
    /// Only reads files and environment variables: exec plugins run before the first request.
    /// The first file that defines a cluster, user or context name wins, and so does the first
    /// non-empty `current-context`; missing files in `$KUBECONFIG` are skipped. The in-cluster
    /// configuration is used only when no kubeconfig exists or none selects a context.
    ///
    /// The default namespace is the context's `namespace`; else, inside a pod, `$POD_NAMESPACE`
    /// or the service account's namespace; else `default`.
    ///
    /// # Errors
    /// [`Error::Auth`] naming the file and field when a kubeconfig is broken, or listing every
    /// source tried when there is no configuration at all.
    ///
    /// # Examples
    /// ```no_run
    /// let client = kube_watcher::Client::try_default()?;
    /// println!("default namespace: {}", client.default_namespace());
    /// # Ok::<(), kube_watcher::Error>(())
    /// ```
    pub fn try_default() -> Result<Client> {
        Ok(Client { conn: Arc::new(auth::default_connection()?) })
    }

    /// A client for the API server of the cluster this process runs in, authenticated as the
    /// pod's service account (token re-read as the kubelet rotates it). `ca.crt` is read again
    /// when the server's certificate is not signed by it, so a rotated cluster CA is trusted
    /// once the kubelet has updated the file (docs/auth.md §7.2).
    ///
    /// # Errors
    /// [`Error::Auth`] when `KUBERNETES_SERVICE_HOST`/`KUBERNETES_SERVICE_PORT` are unset, or the
    /// service-account token or `ca.crt` cannot be read.
    ///
    /// # Examples
    /// ```no_run
    /// let client = kube_watcher::Client::in_cluster()?;
    /// # Ok::<(), kube_watcher::Error>(())
    /// ```
    pub fn in_cluster() -> Result<Client> {
        Ok(Client { conn: Arc::new(auth::in_cluster_connection()?) })
    }

    /// A client from `$KUBECONFIG` (merged) or `~/.kube/config`, with `options` overriding the
    /// context, cluster, user or namespace. Never falls back to the in-cluster configuration.
    ///
    /// # Errors
    /// [`Error::Auth`] naming the file and field at fault, or when no file exists or none
    /// selects a context.
    ///
    /// # Examples
    /// ```no_run
    /// use kube_watcher::{Client, KubeconfigOptions};
    ///
    /// let options = KubeconfigOptions { context: Some("kind-kind".into()), ..Default::default() };
    /// let client = Client::from_kubeconfig(&options)?;
    /// # Ok::<(), kube_watcher::Error>(())
    /// ```
    pub fn from_kubeconfig(options: &KubeconfigOptions) -> Result<Client> {
        Self::from_source(KubeconfigSource::Default, options)
    }

    /// A client from the kubeconfig file at `path` only (like `kubectl --kubeconfig`): the file
    /// must exist, and no other file is merged. Relative paths inside it are resolved against its
    /// directory.
    ///
    /// The kubeconfig is read once. A cluster's `certificate-authority` file is read again when
    /// the server's certificate is not signed by it (a rotated CA, docs/auth.md §7.2); inline
    /// `certificate-authority-data` never is. The same holds for every `from_kubeconfig*` and
    /// [`try_default`](Self::try_default).
    ///
    /// # Errors
    /// [`Error::Auth`] naming the file (and the field) when it is missing, unreadable, invalid,
    /// selects no context, or its credentials cannot be loaded.
    ///
    /// # Examples
    /// ```
    /// # let server = kube_watcher::testing::FakeApiServer::start();
    /// # let dir = std::env::temp_dir().join(format!("kw-doc-{}", std::process::id()));
    /// # std::fs::create_dir_all(&dir).unwrap();
    /// # let path = dir.join("config");
    /// # std::fs::write(&path, server.kubeconfig()).unwrap();
    /// use kube_watcher::{Client, KubeconfigOptions};
    ///
    /// let client = Client::from_kubeconfig_path(&path, &KubeconfigOptions::default())?;
    /// assert_eq!(client.default_namespace(), "default");
    /// # std::fs::remove_dir_all(&dir).unwrap();
    /// # Ok::<(), kube_watcher::Error>(())
    /// ```
    pub fn from_kubeconfig_path(path: impl AsRef<Path>, options: &KubeconfigOptions) -> Result<Client> {
        Self::from_source(KubeconfigSource::Path(path.as_ref()), options)
    }

    /// A client from kubeconfig text held in memory (YAML or JSON). Relative paths in it are
    /// relative to the working directory.
    ///
    /// # Errors
    /// [`Error::Auth`] naming the field at fault, as for a file.
    ///
    /// # Examples
    /// ```
    /// # let server = kube_watcher::testing::FakeApiServer::start();
    /// use kube_watcher::{Client, KubeconfigOptions};
    ///
    /// let yaml = server.kubeconfig(); // a kubeconfig with one cluster, user and context
    /// let options = KubeconfigOptions { namespace: Some("shop".into()), ..Default::default() };
    /// let client = Client::from_kubeconfig_yaml(&yaml, &options)?;
    /// assert_eq!(client.default_namespace(), "shop");
    /// # Ok::<(), kube_watcher::Error>(())
    /// ```
    pub fn from_kubeconfig_yaml(yaml: &str, options: &KubeconfigOptions) -> Result<Client> {
        Self::from_source(KubeconfigSource::Yaml(yaml), options)
    }

    fn from_source(source: KubeconfigSource<'_>, options: &KubeconfigOptions) -> Result<Client> {
        Ok(Client { conn: Arc::new(auth::kubeconfig_connection(source, options)?) })
    }
}

impl Client {
    /// A client for the API server at `url` (`http://` or `https://`, with an optional path
    /// prefix), without credentials: for `kubectl proxy`, the fake server, or an open endpoint.
    ///
    /// User info in the URL (`https://user:password@host`, percent-encoded) is a credential: it
    /// is sent as HTTP Basic authentication, only over `https://`, and is taken out of the URL,
    /// so it never appears in `Debug` output, logs or errors (docs/auth.md §2).
    ///
    /// # Errors
    /// [`Error::Config`] naming `url` when it has no scheme or host, or when it carries user info
    /// over plain `http://`.
    pub fn from_url(url: &str) -> Result<Client> {
        Ok(Client { conn: Arc::new(Connection::from_url(url)?) })
    }

    /// The same client, sending `token` as a bearer token on every request.
    ///
    /// # Errors
    /// [`Error::Config`] when the server URL is plain `http://`: credentials are only sent over
    /// TLS.
    pub fn with_token(self, token: &str) -> Result<Client> {
        if !self.conn.is_https() {
            return Err(Error::config("token", "refusing to send a bearer token over plain http://; use https://"));
        }
        let token = token.trim();
        if token.is_empty() || token.chars().any(|c| c.is_control()) {
            return Err(Error::config("token", "empty or contains control characters"));
        }
        let mut conn = (*self.conn).clone();
        conn.credentials = Credentials::Token(Secret::new(token));
        Ok(Client { conn: Arc::new(conn) })
    }

    /// The namespace that [`Api::default_namespaced`](crate::Api::default_namespaced) uses.
    #[must_use]
    pub fn default_namespace(&self) -> &str {
        &self.conn.default_namespace
    }
}
