//! Connection settings and credentials: where the API server is, how to trust it, who we are.
//!
//! `Connection` is what a [`Client`](crate::Client) holds; the HTTP layer asks it for an agent
//! and, before every request, for the headers that prove who we are (so rotating credentials
//! are picked up by long-running watchers).

use std::fmt;

use crate::error::{Error, Result};

/// A secret string (token, password). `Debug` never shows it.
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

/// How requests prove who we are.
#[derive(Clone, Debug)]
pub(crate) enum Credentials {
    /// No credentials (plain `kubectl proxy`, the fake server).
    None,
    /// A static bearer token.
    Token(Secret),
}

/// Everything needed to reach one API server as one user.
#[derive(Clone, Debug)]
pub(crate) struct Connection {
    /// Base URL without a trailing slash; may carry a path prefix.
    pub(crate) server: String,
    pub(crate) default_namespace: String,
    pub(crate) credentials: Credentials,
}

impl Connection {
    /// A connection to `url` (http or https) with no credentials.
    pub(crate) fn from_url(url: &str) -> Result<Connection> {
        let trimmed = url.trim();
        let rest = trimmed
            .strip_prefix("https://")
            .or_else(|| trimmed.strip_prefix("http://"))
            .ok_or_else(|| Error::config("url", format!("{trimmed:?} must start with http:// or https://")))?;
        if rest.is_empty() || rest.starts_with('/') {
            return Err(Error::config("url", format!("{trimmed:?} has no host")));
        }
        if trimmed.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(Error::config("url", format!("{trimmed:?} contains whitespace")));
        }
        Ok(Connection {
            server: trimmed.trim_end_matches('/').to_owned(),
            default_namespace: "default".to_owned(),
            credentials: Credentials::None,
        })
    }

    pub(crate) fn is_https(&self) -> bool {
        self.server.starts_with("https://")
    }

    /// A new ureq agent for one watcher (or one one-shot call), configured for this server.
    ///
    /// Never sets `timeout_global`, `timeout_per_call` or `timeout_recv_body`: they would kill
    /// healthy watches (http-notes.md §2).
    pub(crate) fn agent(&self) -> ureq::Agent {
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            // Never pick up proxy variables implicitly (ureq would, for every scheme).
            .proxy(None)
            .user_agent(concat!("kube-watcher/", env!("CARGO_PKG_VERSION")))
            .timeout_connect(Some(std::time::Duration::from_secs(10)))
            .timeout_resolve(Some(std::time::Duration::from_secs(10)))
            .max_redirects(0)
            .build();
        ureq::Agent::new_with_config(config)
    }

    /// The headers that prove who we are for the next request (`Authorization`, impersonation).
    /// Called on the watcher thread before every request, so rotated credentials are picked up.
    pub(crate) fn request_headers(&self) -> Result<Vec<(String, Secret)>> {
        match &self.credentials {
            Credentials::None => Ok(Vec::new()),
            Credentials::Token(t) => Ok(vec![("Authorization".to_owned(), Secret::new(format!("Bearer {}", t.expose())))]),
        }
    }

    /// The server answered 401: drop cached credentials. True if a retry may now succeed.
    pub(crate) fn refresh_after_unauthorized(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_need_a_scheme_and_host() {
        assert!(Connection::from_url("localhost:8080").is_err());
        assert!(Connection::from_url("http://").is_err());
        let c = Connection::from_url("https://proxy.example/k8s/clusters/c-42/").unwrap();
        assert_eq!(c.server, "https://proxy.example/k8s/clusters/c-42");
    }

    #[test]
    fn secrets_are_redacted_in_debug() {
        let c = Connection {
            credentials: Credentials::Token(Secret::new("s3cr3t-token")),
            ..Connection::from_url("https://k").unwrap()
        };
        assert!(!format!("{c:?}").contains("s3cr3t"));
    }
}
