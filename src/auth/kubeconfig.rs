//! kubeconfig files: reading them, parsing and merging them (kubectl's rules) into one
//! [`Kubeconfig`]; resolving its context, cluster and user into a
//! [`Connection`](super::Connection) is `resolve.rs`. Every error names the file and the field
//! at fault.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;

use super::Env;
use crate::error::{Error, Result};

mod resolve;

pub(crate) use resolve::connection;

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

#[cfg(test)]
mod tests {
    use super::resolve::{exec_config, find};
    use super::*;
    use crate::auth::exec::InteractiveMode;
    use crate::auth::{Connection, Credentials, KubeconfigOptions};

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
