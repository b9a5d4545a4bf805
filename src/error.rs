//! The crate's one error type, and the only place its messages are worded.

use std::fmt;
use std::time::Duration;

/// A `Result` whose error defaults to [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in kube-watcher.
///
/// Each message stands alone: it says what was being done, to what, and why it failed, so logging
/// `{err}` is enough. Secrets (tokens, keys, passwords) never appear in it.
///
/// A watcher reports most errors on its channel and keeps going (see [`Error::is_terminal`]).
#[derive(thiserror::Error, Clone)]
#[non_exhaustive]
pub enum Error {
    /// The API server answered with a non-success HTTP status, or sent an `ERROR` event in a watch.
    #[error("{0}")]
    Api(Box<ApiError>),
    /// The request never got an answer: connect, TLS, reset connection, idle timeout, truncated body.
    #[error("{context}: {message}")]
    Transport {
        /// What was being done (`list pods in namespace "apps"`).
        context: Box<str>,
        /// Why it failed.
        message: Box<str>,
    },
    /// A response body or watch line could not be decoded.
    #[error("{0}")]
    Decode(Box<DecodeError>),
    /// A configuration value was invalid; `field` names it.
    #[error("invalid configuration: {field}: {message}")]
    Config {
        /// The offending field or option (`page_size`, `users[0].user.exec.command`).
        field: Box<str>,
        /// What is wrong with it.
        message: Box<str>,
    },
    /// Loading connection settings or credentials failed (kubeconfig, in-cluster files, exec plugins).
    #[error("{source_name}: {message}")]
    Auth {
        /// Where the bad setting came from: a file path, an environment variable or a plugin.
        source_name: Box<str>,
        /// What is wrong, naming the field where one is at fault.
        message: Box<str>,
    },
    /// `Store::wait_until_ready` ran out of time; `last_error` says why the store is not ready.
    #[error("store not ready after {waited:?}{}", match .last_error { Some(e) => format!(": last error: {e}"), None => String::new() })]
    NotReady {
        /// How long the caller waited.
        waited: Duration,
        /// The last error the watcher met, if any (for instance the 403 of its list).
        last_error: Option<Box<Error>>,
    },
    /// [`Store::wait_for_version`](crate::Store::wait_for_version) ran out of time before the
    /// store reflected the version it waited for.
    #[error("store did not reach resourceVersion {} within {waited:?}: {}", quoted(wanted), match reached {
        Some(v) => format!("it reflects {}", quoted(v)),
        None => "it reflects no resourceVersion yet".to_owned(),
    })]
    VersionNotReached {
        /// The version waited for.
        wanted: Box<str>,
        /// The version the store reflected when the time ran out, if any.
        reached: Option<Box<str>>,
        /// How long the caller waited.
        waited: Duration,
    },
    /// Two resourceVersions cannot be compared: Kubernetes orders only positive decimal integers
    /// written without leading zeros (see [`Store::wait_for_version`](crate::Store::wait_for_version)).
    #[error(
        "cannot compare resourceVersion {} with the store's {}: only positive decimal integers without leading zeros are ordered",
        quoted(wanted),
        quoted(store)
    )]
    IncomparableVersions {
        /// The version asked for.
        wanted: Box<str>,
        /// The version the store (or one namespace of it) reflects.
        store: Box<str>,
    },
    /// The watcher gave up after `max_retries` consecutive failures without progress (terminal).
    #[error("gave up after {attempts} consecutive failures: {last}")]
    GaveUp {
        /// How many attempts failed in a row.
        attempts: u32,
        /// The last failure.
        last: Box<Error>,
    },
    /// The watcher has stopped (`stop()` was called or it ended); nothing more will arrive.
    #[error("watcher stopped")]
    Stopped,
    /// The operating system refused to start the watcher's thread.
    #[error("cannot start watcher thread: {0}")]
    Spawn(Box<str>),
    /// This consumer fell behind and uses the lag policy
    /// ([`SlowConsumer::Lag`](crate::SlowConsumer::Lag)): events that did not fit were dropped
    /// here, and more are dropped until this marker is received. The store is exact; read it
    /// to catch up. Not terminal: events continue after it.
    #[error("consumer fell behind: events were dropped; read the store to catch up")]
    Lagged {
        /// Events dropped before the marker was queued (1 when it is queued); for the second
        /// marker after a relist (see [`SlowConsumer::Lag`](crate::SlowConsumer::Lag)), the
        /// relist's events that catching up from the store before its end missed. The total of each episode is in
        /// [`Notice::Lagged`](crate::Notice::Lagged) and [`Stats::lagged`](crate::Stats::lagged).
        dropped: u64,
    },
    /// A callback the watcher runs on its thread (a transform, an index function, a predicate)
    /// panicked, or the watcher thread itself did (a bug). Terminal: the watcher has ended, and
    /// every consumer and `wait_until_ready` caller gets this error.
    #[error("{callback} panicked: {message}; the watcher has stopped")]
    Panicked {
        /// Which callback: `transform`, `index "node"`, `predicate`, or `the watcher thread`.
        callback: Box<str>,
        /// The panic's message.
        message: Box<str>,
    },
}

impl fmt::Debug for Error {
    // Debug shows the same text as Display: the variants hold no secrets, and one readable line
    // is what `unwrap()` and `{:?}` users want to see.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Error({self})")
    }
}

/// Details of an error answer from the API server: the HTTP status plus the `Status` body.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ApiError {
    /// What was being done (`list pods in namespace "apps"`, `watch pods`).
    pub context: String,
    /// HTTP status code (or the `code` of an in-stream `ERROR` event).
    pub code: u16,
    /// The machine-readable `reason` (`Forbidden`, `Expired`), or the HTTP reason phrase.
    pub reason: String,
    /// The human-readable message, or the first bytes of a non-JSON body.
    pub message: String,
    /// `Retry-After` (header or `details.retryAfterSeconds`), when the server sent one.
    pub retry_after: Option<Duration>,
    /// The server said the requested resourceVersion is newer than it has seen ("too large").
    pub too_large_resource_version: bool,
    /// The error came inside a 200 watch stream (an `ERROR` event), not as an HTTP status.
    pub in_stream: bool,
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let how = if self.in_stream { "watch ERROR event" } else { "HTTP" };
        write!(f, "{}: {how} {} {}", self.context, self.code, self.reason)?;
        if !self.message.is_empty() {
            write!(f, ": {}", self.message)?;
        }
        Ok(())
    }
}

/// Details of a body or watch line that could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DecodeError {
    /// What was being decoded (`watch pods`, `list pods`).
    pub context: String,
    /// The 1-based line of a watch stream, when the error is in one.
    pub line: Option<u64>,
    /// Length in bytes of the offending line or body.
    pub len: usize,
    /// The parser's message.
    pub message: String,
    /// The first bytes of the offending input, escaped and capped at about 64 bytes.
    pub snippet: String,
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "decode {}", self.context)?;
        match self.line {
            Some(line) => write!(f, " (line {line}, {} bytes)", self.len)?,
            None => write!(f, " ({} bytes)", self.len)?,
        }
        write!(f, ": {}", self.message)?;
        if !self.snippet.is_empty() {
            write!(f, "; starts with \"{}\"", self.snippet)?;
        }
        Ok(())
    }
}

/// How a watch recovers from an error (see [`Error::recovery`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Recovery {
    /// Make the same request again after backoff (a watch resumes from its resourceVersion).
    Resume,
    /// The resourceVersion or continue token expired: relist.
    Expired,
    /// The server has not reached the resourceVersion asked for: relist from scratch.
    TooLarge,
    /// The stream said something the watch cannot go on from: relist past it.
    Relist,
    /// The server refused the request: relist after backoff; it may take a fix on the user's
    /// side (permissions, credentials, the resource).
    Refused,
}

impl Error {
    /// The HTTP status when the server answered (or the code of an in-stream `ERROR` event).
    #[must_use]
    pub fn status(&self) -> Option<u16> {
        match self {
            Error::Api(e) => Some(e.code),
            Error::GaveUp { last, .. } => last.status(),
            Error::NotReady { last_error, .. } => last_error.as_ref().and_then(|e| e.status()),
            Error::Transport { .. }
            | Error::Decode(_)
            | Error::Config { .. }
            | Error::Auth { .. }
            | Error::Stopped
            | Error::Spawn(_)
            | Error::Lagged { .. }
            | Error::VersionNotReached { .. }
            | Error::IncomparableVersions { .. }
            | Error::Panicked { .. } => None,
        }
    }

    /// True for 410 Gone: the resourceVersion or continue token is too old.
    #[must_use]
    pub fn is_gone(&self) -> bool {
        self.status() == Some(410)
    }

    /// True for 409 Conflict on a write: the object changed since the resourceVersion the write
    /// carried ([`Api::replace`](crate::Api::replace)). Read it again and redo the change. Not
    /// true for the 409 of a create whose name is taken ([`is_already_exists`](Self::is_already_exists)).
    #[must_use]
    pub fn is_conflict(&self) -> bool {
        matches!(self, Error::Api(e) if e.code == 409 && e.reason != "AlreadyExists")
    }

    /// True for the 409 of a create whose object already exists
    /// ([`Api::create`](crate::Api::create)).
    #[must_use]
    pub fn is_already_exists(&self) -> bool {
        matches!(self, Error::Api(e) if e.code == 409 && e.reason == "AlreadyExists")
    }

    /// True for 404 Not Found: no such object (or no such resource type on the server).
    #[must_use]
    pub fn is_not_found(&self) -> bool {
        matches!(self, Error::Api(e) if e.code == 404 && !e.in_stream)
    }

    /// True when the server said the requested resourceVersion is newer than it has seen.
    #[must_use]
    pub fn is_too_large_resource_version(&self) -> bool {
        matches!(self, Error::Api(e) if e.too_large_resource_version)
    }

    /// True when ending the watcher: after this error the event iterator ends.
    ///
    /// Non-terminal errors (a 403, a dropped connection, a bad line) are reported and retried.
    #[must_use]
    pub fn is_terminal(&self) -> bool {
        match self {
            Error::GaveUp { .. } | Error::Stopped | Error::Spawn(_) | Error::Config { .. } | Error::Panicked { .. } => {
                true
            }
            Error::Api(_)
            | Error::Transport { .. }
            | Error::Decode(_)
            | Error::Auth { .. }
            | Error::NotReady { .. }
            | Error::VersionNotReached { .. }
            | Error::IncomparableVersions { .. }
            | Error::Lagged { .. } => false,
        }
    }

    /// True when the watcher's own retry can get past this error with nothing changed on your
    /// side: transport trouble, 408, 429 and 5xx, 410 Gone, "too large resource version" and
    /// undecodable data (a relist reads past it). False for refusals that need a fix (401, 403,
    /// 404, 422, credentials) and for the end of a watcher. See the recovery table in README.md.
    #[must_use]
    pub fn is_retryable(&self) -> bool {
        !self.is_terminal()
            && !matches!(self, Error::NotReady { .. } | Error::Lagged { .. })
            && self.recovery() != Recovery::Refused
    }

    /// How a watch recovers from this error: the one table every decision uses (the state
    /// machine for watches, lists and streaming lists; [`is_retryable`](Self::is_retryable)).
    ///
    /// | error | recovery |
    /// |---|---|
    /// | 410 Gone (HTTP or in-stream) | `Expired`: relist |
    /// | "too large resource version" | `TooLarge`: relist from scratch |
    /// | transport trouble; HTTP 408, 429, 5xx | `Resume`: the same request again, after backoff |
    /// | an in-stream `ERROR` 408, 429 or 5xx; an undecodable line or body | `Relist`: past it |
    /// | any other answer (401, 403, 404, 422, ...); credentials | `Refused`: relist, after backoff |
    pub(crate) fn recovery(&self) -> Recovery {
        match self {
            e if e.is_gone() => Recovery::Expired,
            e if e.is_too_large_resource_version() => Recovery::TooLarge,
            Error::Transport { .. } => Recovery::Resume,
            // A stream that failed in-band cannot be resumed: what it skipped is unknown.
            Error::Api(a) if matches!(a.code, 408 | 429 | 500..=599) && a.in_stream => Recovery::Relist,
            Error::Api(a) if matches!(a.code, 408 | 429 | 500..=599) => Recovery::Resume,
            Error::Decode(_) => Recovery::Relist,
            Error::GaveUp { last, .. } => last.recovery(),
            Error::NotReady { last_error: Some(last), .. } => last.recovery(),
            Error::Api(_)
            | Error::Auth { .. }
            | Error::Config { .. }
            | Error::NotReady { .. }
            | Error::Stopped
            | Error::Spawn(_)
            | Error::Lagged { .. }
            | Error::VersionNotReached { .. }
            | Error::IncomparableVersions { .. }
            | Error::Panicked { .. } => Recovery::Refused,
        }
    }

    /// How long the server asked us to wait (`Retry-After`), if it did.
    #[must_use]
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Error::Api(e) => e.retry_after,
            _ => None,
        }
    }

    pub(crate) fn transport(context: impl Into<Box<str>>, message: impl fmt::Display) -> Error {
        Error::Transport { context: context.into(), message: message.to_string().into() }
    }

    pub(crate) fn config(field: &str, message: impl fmt::Display) -> Error {
        Error::Config { field: field.into(), message: message.to_string().into() }
    }
}

/// `text` in double quotes, escaped and capped as [`snippet`] does.
fn quoted(text: &str) -> String {
    format!("\"{}\"", snippet(text.as_bytes()))
}

/// Escapes and caps input quoted in an error message (about 64 bytes, never splitting a char).
pub(crate) fn snippet(bytes: &[u8]) -> String {
    const MAX: usize = 64;
    let text = String::from_utf8_lossy(&bytes[..bytes.len().min(MAX * 4)]);
    let mut out = String::new();
    for c in text.chars() {
        if out.len() >= MAX {
            out.push('…');
            break;
        }
        out.extend(c.escape_debug());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_stays_small() {
        assert!(std::mem::size_of::<Error>() <= 64, "{}", std::mem::size_of::<Error>());
    }

    #[test]
    fn api_error_message_names_request_status_and_reason() {
        let e = Error::Api(Box::new(ApiError {
            context: "list pods in namespace \"apps\"".into(),
            code: 403,
            reason: "Forbidden".into(),
            message: "pods is forbidden".into(),
            retry_after: None,
            too_large_resource_version: false,
            in_stream: false,
        }));
        assert_eq!(e.to_string(), "list pods in namespace \"apps\": HTTP 403 Forbidden: pods is forbidden");
        assert_eq!(e.status(), Some(403));
        assert!(!e.is_terminal());
        assert!(!e.is_retryable());
    }

    #[test]
    fn decode_error_quotes_the_first_bytes_escaped() {
        let e = Error::Decode(Box::new(DecodeError {
            context: "watch pods".into(),
            line: Some(3),
            len: 812,
            message: "expected value at line 1 column 1".into(),
            snippet: snippet(b"<html>\n"),
        }));
        assert_eq!(
            e.to_string(),
            "decode watch pods (line 3, 812 bytes): expected value at line 1 column 1; starts with \"<html>\\n\""
        );
    }

    #[test]
    fn a_clone_is_the_same_error() {
        let api = Error::Api(Box::new(ApiError {
            context: "watch pods".into(),
            code: 429,
            reason: "TooManyRequests".into(),
            retry_after: Some(Duration::from_secs(3)),
            ..ApiError::default()
        }));
        let e = Error::GaveUp { attempts: 4, last: Box::new(api) };
        let c = e.clone();
        assert_eq!(c.to_string(), e.to_string());
        assert_eq!((c.status(), c.is_terminal()), (Some(429), true));
        let Error::GaveUp { last, .. } = c else { panic!("{c}") };
        assert_eq!(last.retry_after(), Some(Duration::from_secs(3)));
    }

    #[test]
    fn a_409_is_a_conflict_unless_the_name_was_taken() {
        let api = |code, reason: &str| {
            Error::Api(Box::new(ApiError {
                context: "replace leases".into(),
                code,
                reason: reason.into(),
                ..ApiError::default()
            }))
        };
        assert!(api(409, "Conflict").is_conflict());
        assert!(!api(409, "Conflict").is_already_exists());
        assert!(api(409, "AlreadyExists").is_already_exists());
        assert!(!api(409, "AlreadyExists").is_conflict());
        assert!(!api(404, "NotFound").is_conflict());
        assert!(api(404, "NotFound").is_not_found());
        assert!(!Error::transport("replace leases", "connection refused").is_conflict());
    }

    #[test]
    fn snippet_is_capped() {
        let long = vec![b'a'; 1000];
        let s = snippet(&long);
        assert!(s.len() <= 64 + '…'.len_utf8());
        assert!(s.ends_with('…'));
    }
}
