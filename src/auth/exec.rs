//! Exec credential plugins (`client.authentication.k8s.io/v1` and `v1beta1`): run with a
//! timeout, parse and validate the `ExecCredential`, cache it until shortly before it expires.

use std::fmt;
use std::io::{self, Read};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use parking_lot::Mutex;
use serde::Deserialize;

use ureq::tls::ClientCert;

use super::{Secret, tls};
use crate::error::{Error, Result};

/// How long a plugin may run before it is killed. client-go sets none; 60 s leaves room for a
/// slow cloud CLI (docs/auth.md §6.2 suggests a generous, non-interactive bound).
pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
/// Cap on a plugin's stdout: an `ExecCredential` is a few KiB.
const MAX_STDOUT: u64 = 1 << 20;
/// How much of stderr is kept to explain a failure.
const MAX_STDERR: u64 = 4096;
/// How many bytes of stderr an error message quotes.
const STDERR_QUOTE: usize = 512;
/// Refresh this long before `expirationTimestamp`, so a credential never expires in flight
/// (client-go uses no margin; docs/auth.md §6.5 recommends about 30 s).
const EXPIRY_MARGIN: Duration = Duration::from_secs(30);
/// A failed run is reported again for this long instead of re-running the plugin on every
/// request (client-go re-runs it each time; docs/auth.md §6.5).
const FAILURE_CACHE: Duration = Duration::from_secs(5);

/// The `ExecCredential` API version the plugin speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ApiVersion {
    V1,
    V1Beta1,
}

impl ApiVersion {
    fn as_str(self) -> &'static str {
        match self {
            ApiVersion::V1 => "client.authentication.k8s.io/v1",
            ApiVersion::V1Beta1 => "client.authentication.k8s.io/v1beta1",
        }
    }
}

/// `interactiveMode`. A library has no terminal: `IfAvailable` runs without stdin and
/// `spec.interactive=false`; `Always` cannot run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum InteractiveMode {
    Never,
    IfAvailable,
    Always,
}

/// A plugin's resolved configuration.
pub(crate) struct ExecConfig {
    /// `exec plugin aws (kubeconfig /p: users[0].user.exec)`: the source of its errors.
    pub(crate) source_name: String,
    /// Absolute or kubeconfig-relative path, or a bare name looked up on PATH.
    pub(crate) command: PathBuf,
    pub(crate) args: Vec<String>,
    /// Added to the inherited environment; values may be secret.
    pub(crate) env: Vec<(String, Secret)>,
    pub(crate) api_version: ApiVersion,
    pub(crate) interactive: InteractiveMode,
    pub(crate) install_hint: Option<String>,
    /// `spec.cluster` when `provideClusterInfo` is true.
    pub(crate) cluster: Option<serde_json::Value>,
    pub(crate) timeout: Duration,
}

impl fmt::Debug for ExecConfig {
    // Env values and cluster info stay out; names and the command are not secret.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExecConfig")
            .field("command", &self.command)
            .field("args", &self.args.len())
            .field("env", &self.env.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>())
            .field("api_version", &self.api_version)
            .field("interactive", &self.interactive)
            .field("provide_cluster_info", &self.cluster.is_some())
            .finish_non_exhaustive()
    }
}

/// A plugin and its cached credential, shared by every clone of a client.
#[derive(Debug)]
pub(crate) struct ExecPlugin {
    config: ExecConfig,
    /// Held while the plugin runs: one execution at a time, and requests that arrive meanwhile
    /// wait for it and use its result (docs/auth.md §6.2). Only this lock is held across the run.
    running: Mutex<()>,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    credential: Option<Credential>,
    failure: Option<(Instant, Error)>,
    /// Some run answered with a client certificate.
    gave_client_cert: bool,
}

#[derive(Debug)]
struct Credential {
    out: ExecOutput,
    expires: Option<SystemTime>,
}

/// What a plugin proves who we are with: a bearer token, a client certificate, or both.
#[derive(Clone, Default)]
pub(crate) struct ExecOutput {
    pub(crate) token: Option<Secret>,
    /// Checked to match its key when the plugin's output was read.
    pub(crate) client_cert: Option<ClientCert>,
}

impl fmt::Debug for ExecOutput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExecOutput")
            .field("token", &self.token)
            .field("client_cert", &self.client_cert.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

impl Credential {
    fn is_fresh(&self) -> bool {
        self.expires.is_none_or(|t| SystemTime::now() + EXPIRY_MARGIN < t)
    }
}

impl ExecPlugin {
    pub(crate) fn new(config: ExecConfig) -> ExecPlugin {
        ExecPlugin { config, running: Mutex::new(()), state: Mutex::new(State::default()) }
    }

    /// The credential to send: cached, or from a new run of the plugin.
    pub(crate) fn credential(&self) -> Result<ExecOutput> {
        if let Some(out) = self.cached()? {
            return Ok(out);
        }
        let _running = self.running.lock();
        // Another thread may have run the plugin while we waited.
        if let Some(out) = self.cached()? {
            return Ok(out);
        }
        match self.run() {
            Ok(credential) => {
                let out = credential.out.clone();
                let mut state = self.state.lock();
                if out.client_cert.is_some() {
                    state.gave_client_cert = true;
                }
                state.credential = Some(credential);
                state.failure = None;
                Ok(out)
            }
            Err(e) => {
                log::warn!("{e}");
                self.state.lock().failure = Some((Instant::now(), e.clone()));
                Err(e)
            }
        }
    }

    /// Whether the plugin has answered with a client certificate (then a TLS refusal of it is a
    /// reason to run the plugin again, as a 401 is for a token).
    pub(crate) fn gave_client_cert(&self) -> bool {
        self.state.lock().gave_client_cert
    }

    /// `exec plugin aws (kubeconfig /p: users[0].user.exec)`.
    pub(crate) fn source_name(&self) -> &str {
        &self.config.source_name
    }

    fn cached(&self) -> Result<Option<ExecOutput>> {
        let state = self.state.lock();
        if let Some(c) = state.credential.as_ref().filter(|c| c.is_fresh()) {
            return Ok(Some(c.out.clone()));
        }
        if let Some((at, e)) = &state.failure
            && at.elapsed() < FAILURE_CACHE
        {
            return Err(e.clone());
        }
        Ok(None)
    }

    /// After a 401: forget the credential so the next request runs the plugin again.
    pub(crate) fn refresh_after_unauthorized(&self) -> bool {
        let mut state = self.state.lock();
        state.credential = None;
        state.failure = None;
        true
    }

    fn error(&self, message: impl Into<String>) -> Error {
        Error::Auth { source_name: self.config.source_name.clone().into(), message: message.into().into() }
    }

    fn exec_info(&self) -> String {
        let mut spec = serde_json::json!({ "interactive": false });
        if let Some(cluster) = &self.config.cluster {
            spec["cluster"] = cluster.clone();
        }
        serde_json::json!({ "kind": "ExecCredential", "apiVersion": self.config.api_version.as_str(), "spec": spec })
            .to_string()
    }

    fn run(&self) -> Result<Credential> {
        let c = &self.config;
        if c.interactive == InteractiveMode::Always {
            return Err(self.error(
                "interactiveMode is Always, but standard input is not available to a library; \
                 use IfAvailable or Never, or log in with the plugin beforehand",
            ));
        }
        let mut cmd = Command::new(&c.command);
        cmd.args(&c.args)
            .envs(c.env.iter().map(|(n, v)| (n.as_str(), v.expose())))
            .env("KUBERNETES_EXEC_INFO", self.exec_info())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        log::debug!("{}: running", c.source_name);
        let mut child = cmd.spawn().map_err(|e| {
            let mut message = format!("cannot run {}: {e}", c.command.display());
            if let Some(hint) = &c.install_hint {
                let clean: String = hint.chars().filter(|ch| !ch.is_control() || *ch == '\n').collect();
                message.push_str(&format!("; install hint: {clean}"));
            }
            self.error(message)
        })?;
        // Nothing here waits past the deadline: a child the plugin left behind holding our
        // pipes used to keep the readers (and so this call, the plugin lock and every watcher
        // sharing the client) waiting for it.
        let (out_tx, out_rx) = crossbeam_channel::bounded(1);
        let (err_tx, err_rx) = crossbeam_channel::bounded(1);
        for (name, pipe, cap, tx) in [
            ("kw-exec-stdout", child.stdout.take().map(|p| Box::new(p) as Box<dyn Read + Send>), MAX_STDOUT, out_tx),
            ("kw-exec-stderr", child.stderr.take().map(|p| Box::new(p) as Box<dyn Read + Send>), MAX_STDERR, err_tx),
        ] {
            // Detached: at the deadline nobody waits for them any more; they end with the pipe.
            thread::Builder::new()
                .name(name.into())
                .spawn(move || {
                    let _ = tx.send(pipe.map(|p| read_capped(p, cap)));
                })
                .map_err(|e| self.error(format!("cannot start a thread: {e}")))?;
        }
        let deadline = Instant::now().checked_add(c.timeout).unwrap_or_else(far_future);
        let stdout = out_rx.recv_deadline(deadline).ok();
        let stderr = err_rx.recv_deadline(deadline).ok();
        // Both pipes closed; the plugin itself may still run (it closed them and went on).
        let status = match (&stdout, &stderr) {
            (Some(_), Some(_)) => wait_until(&mut child, deadline),
            _ => None,
        };
        if status.is_none() {
            kill(&mut child);
        }
        let stdout = stdout.flatten();
        let stderr = stderr.flatten();
        let stderr_text = match &stderr {
            Some(Ok((bytes, _))) => quote(bytes),
            _ => String::new(),
        };
        if !stderr_text.is_empty() {
            log::debug!("{}: stderr: {stderr_text}", c.source_name);
        }
        let with_stderr = |m: String| {
            if stderr_text.is_empty() { m } else { format!("{m}; stderr: \"{stderr_text}\"") }
        };
        let Some(status) = status else {
            return Err(self.error(with_stderr(format!("did not finish within {:?}; killed", c.timeout))));
        };
        let status = status.map_err(|e| self.error(format!("cannot wait for the plugin: {e}")))?;
        if !status.success() {
            return Err(self.error(with_stderr(format!("failed: {status}"))));
        }
        let (bytes, truncated) = match stdout {
            Some(Ok(out)) => out,
            Some(Err(e)) => return Err(self.error(format!("cannot read its output: {e}"))),
            None => return Err(self.error("no output")),
        };
        if truncated {
            return Err(self.error(format!("output larger than {MAX_STDOUT} bytes")));
        }
        self.parse(&bytes).map_err(|m| self.error(with_stderr(m)))
    }

    /// Validates the plugin's `ExecCredential` (docs/auth.md §6.3). Messages never quote the output,
    /// which holds the token.
    fn parse(&self, bytes: &[u8]) -> std::result::Result<Credential, String> {
        let out: ExecCredentialOut = serde_json::from_slice(bytes).map_err(|e| {
            format!(
                "output is not an ExecCredential JSON object ({:?} error at line {} column {})",
                e.classify(),
                e.line(),
                e.column()
            )
        })?;
        let expected = self.config.api_version.as_str();
        if out.api_version.as_deref() != Some(expected) {
            return Err(format!(
                "output apiVersion is {:?}, expected {expected:?}",
                out.api_version.unwrap_or_default()
            ));
        }
        let status = out.status.ok_or("output has no status")?;
        let token = status.token.filter(|t| !t.is_empty());
        if token.as_deref().is_some_and(|t| t.chars().any(char::is_control)) {
            return Err("status.token contains control characters".to_owned());
        }
        let cert = status.client_certificate_data.filter(|c| !c.is_empty());
        let key = status.client_key_data.filter(|k| !k.is_empty());
        match (&cert, &key) {
            (Some(_), None) => return Err("status.clientCertificateData is set without status.clientKeyData".into()),
            (None, Some(_)) => return Err("status.clientKeyData is set without status.clientCertificateData".into()),
            _ => {}
        }
        let client_cert = match (cert, key) {
            (Some(cert), Some(key)) => Some(
                // Both fields hold PEM text (not base64 of it, unlike a kubeconfig's *-data).
                tls::parse_client_identity(cert.as_bytes(), key.as_bytes()).map_err(|(on_cert, m)| {
                    let field = if on_cert { "status.clientCertificateData" } else { "status.clientKeyData" };
                    format!("{field}: {m}")
                })?,
            ),
            _ => None,
        };
        if token.is_none() && client_cert.is_none() {
            return Err("status has neither a token nor a client certificate".into());
        }
        let expires = match status.expiration_timestamp.filter(|t| !t.is_empty()) {
            Some(ts) => {
                Some(parse_timestamp(&ts).ok_or_else(|| format!("status.expirationTimestamp {ts:?} is not RFC 3339"))?)
            }
            None => None,
        };
        Ok(Credential { out: ExecOutput { token: token.map(Secret::new), client_cert }, expires })
    }
}

#[derive(Deserialize)]
struct ExecCredentialOut {
    #[serde(rename = "apiVersion")]
    api_version: Option<String>,
    status: Option<StatusOut>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct StatusOut {
    token: Option<String>,
    client_certificate_data: Option<String>,
    client_key_data: Option<String>,
    expiration_timestamp: Option<String>,
}

fn parse_timestamp(ts: &str) -> Option<SystemTime> {
    let t: k8s_openapi::jiff::Timestamp = ts.parse().ok()?;
    let secs = u64::try_from(t.as_second()).ok()?;
    Some(SystemTime::UNIX_EPOCH + Duration::from_secs(secs))
}

/// Reads up to `cap` bytes, then drains the rest so the child never blocks on a full pipe.
/// Returns the bytes and whether there was more.
fn read_capped(mut r: impl Read, cap: u64) -> io::Result<(Vec<u8>, bool)> {
    let mut buf = Vec::new();
    (&mut r).take(cap).read_to_end(&mut buf)?;
    let more = io::copy(&mut r, &mut io::sink())?;
    Ok((buf, more > 0))
}

/// A deadline that never comes (a timeout too large to add to now).
fn far_future() -> Instant {
    Instant::now() + Duration::from_secs(100 * 365 * 24 * 3600)
}

/// Waits for `child` to exit, until `deadline`; `None` when it has not by then.
fn wait_until(child: &mut Child, deadline: Instant) -> Option<io::Result<ExitStatus>> {
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(Ok(status)),
            Ok(None) if Instant::now() >= deadline => return None,
            Ok(None) => thread::sleep(Duration::from_millis(5)),
            Err(e) => return Some(Err(e)),
        }
    }
}

/// Kills the plugin and reaps it. A child it started may live on (holding our pipes until it
/// ends); the readers are detached, so nothing waits for it.
fn kill(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// The first bytes of stderr, escaped, for an error message.
fn quote(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(&bytes[..bytes.len().min(STDERR_QUOTE)]);
    let mut out: String = text.trim().chars().flat_map(char::escape_debug).collect();
    if bytes.len() > STDERR_QUOTE {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plugin(api_version: ApiVersion) -> ExecPlugin {
        ExecPlugin::new(ExecConfig {
            source_name: "exec plugin test".into(),
            command: "true".into(),
            args: vec![],
            env: vec![("SECRET_ENV".into(), Secret::new("env-s3cret"))],
            api_version,
            interactive: InteractiveMode::IfAvailable,
            install_hint: None,
            cluster: Some(serde_json::json!({"server": "https://k", "config": {"audience": "a"}})),
            timeout: Duration::from_secs(5),
        })
    }

    #[test]
    fn exec_info_carries_the_api_version_and_cluster() {
        let info: serde_json::Value = serde_json::from_str(&plugin(ApiVersion::V1Beta1).exec_info()).unwrap();
        assert_eq!(info["apiVersion"], "client.authentication.k8s.io/v1beta1");
        assert_eq!(info["spec"]["interactive"], false);
        assert_eq!(info["spec"]["cluster"]["config"]["audience"], "a");
    }

    #[test]
    fn output_is_validated_without_quoting_the_token() {
        let p = plugin(ApiVersion::V1);
        let ok = br#"{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"tok-123","expirationTimestamp":"2099-03-04T10:15:00Z"}}"#;
        let c = p.parse(ok).unwrap();
        assert_eq!(c.out.token.unwrap().expose(), "tok-123");
        assert!(c.expires.is_some());
        let wrong = br#"{"apiVersion":"client.authentication.k8s.io/v1beta1","status":{"token":"tok-123"}}"#;
        let e = p.parse(wrong).unwrap_err();
        assert!(e.contains("expected \"client.authentication.k8s.io/v1\"") && !e.contains("tok-123"), "{e}");
        let bad = br#"{"apiVersion":"client.authentication.k8s.io/v1","status":{"token":tok-123}}"#;
        assert!(!p.parse(bad).unwrap_err().contains("tok-123"));
        let half = br#"{"apiVersion":"client.authentication.k8s.io/v1","status":{"token":"t","clientKeyData":"k"}}"#;
        assert!(p.parse(half).unwrap_err().contains("clientKeyData"));
        let none = br#"{"apiVersion":"client.authentication.k8s.io/v1","status":{}}"#;
        assert!(p.parse(none).unwrap_err().contains("neither"));
    }

    #[test]
    fn expired_credentials_are_not_fresh() {
        let soon =
            Credential { out: ExecOutput::default(), expires: Some(SystemTime::now() + Duration::from_secs(10)) };
        assert!(!soon.is_fresh(), "inside the 30 s margin");
        let later =
            Credential { out: ExecOutput::default(), expires: Some(SystemTime::now() + Duration::from_secs(600)) };
        assert!(later.is_fresh());
        assert!(Credential { out: ExecOutput::default(), expires: None }.is_fresh());
    }

    #[test]
    fn plugin_debug_hides_env_values() {
        let p = plugin(ApiVersion::V1);
        assert!(!format!("{p:?}").contains("env-s3cret"));
    }

    /// A plugin run through `sh -c`, with a timeout.
    #[cfg(unix)]
    fn script(script: &str, timeout: Duration) -> ExecPlugin {
        ExecPlugin::new(ExecConfig {
            source_name: "exec plugin test".into(),
            command: "sh".into(),
            args: vec!["-c".into(), script.into()],
            env: vec![],
            api_version: ApiVersion::V1,
            interactive: InteractiveMode::Never,
            install_hint: None,
            cluster: None,
            timeout,
        })
    }

    /// A plugin that leaves a child holding its stdout used to keep the call
    /// waiting for that child (15 s with a 1 s timeout), holding the plugin lock meanwhile.
    #[cfg(unix)]
    #[test]
    fn a_plugin_whose_child_holds_stdout_is_killed_at_the_timeout() {
        let p = script("sleep 30 & sleep 30", Duration::from_secs(1));
        let started = Instant::now();
        let e = p.run().unwrap_err().to_string();
        assert!(e.contains("did not finish within 1s; killed"), "{e}");
        assert!(started.elapsed() < Duration::from_secs(20), "took {:?}", started.elapsed());
    }

    /// The same when the plugin itself exits at once but its child keeps stdout open.
    #[cfg(unix)]
    #[test]
    fn a_plugin_that_exits_but_leaves_stdout_open_is_cut_at_the_timeout() {
        let p = script("sleep 30 & exit 0", Duration::from_secs(1));
        let started = Instant::now();
        let e = p.run().unwrap_err().to_string();
        assert!(e.contains("killed"), "{e}");
        assert!(started.elapsed() < Duration::from_secs(20), "took {:?}", started.elapsed());
    }

    /// A background child that does not hold the pipes does not delay a good answer.
    #[cfg(unix)]
    #[test]
    fn a_plugin_with_a_detached_child_answers_normally() {
        let ok = r#"{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"t"}}"#;
        let p = script(&format!("sleep 30 >/dev/null 2>&1 & echo '{ok}'"), Duration::from_secs(20));
        let started = Instant::now();
        let c = p.run().unwrap();
        assert_eq!(c.out.token.unwrap().expose(), "t");
        assert!(started.elapsed() < Duration::from_secs(15), "took {:?}", started.elapsed());
    }
}
