//! Bearer tokens read from a file (`tokenFile`, the in-cluster service-account token): cached,
//! re-read about once a minute and after a 401, trimmed, last good value kept on read errors.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::Secret;
use crate::error::{Error, Result};

/// How long a token read from a file is used before the file is read again: client-go's
/// `cachingTokenSource` re-reads after one minute minus a 10 s leeway (`transport/token_source.go`).
pub(crate) const TOKEN_FILE_REFRESH: Duration = Duration::from_secs(50);

/// A token file and its cached value. Shared (through `Arc`) by every clone of a client.
#[derive(Debug)]
pub(crate) struct TokenFile {
    path: PathBuf,
    /// Where the setting came from, for errors (`kubeconfig /p: users[0].user.tokenFile`).
    source_name: String,
    /// A static `token` set next to `tokenFile`: used while the file cannot be read (kubectl).
    fallback: Option<Secret>,
    refresh: Duration,
    cache: Mutex<Option<Cached>>,
}

#[derive(Debug)]
struct Cached {
    token: Secret,
    read_at: Instant,
}

impl TokenFile {
    /// A token file; it is first read when a request needs it (or by [`TokenFile::check`]).
    pub(crate) fn new(path: PathBuf, source_name: String, fallback: Option<Secret>) -> TokenFile {
        TokenFile { path, source_name, fallback, refresh: TOKEN_FILE_REFRESH, cache: Mutex::new(None) }
    }

    /// Reads the file now, so that a missing or empty file is reported when loading.
    pub(crate) fn check(&self) -> Result<()> {
        self.token().map(|_| ())
    }

    /// The current token: cached, or read again when older than the refresh period.
    pub(crate) fn token(&self) -> Result<Secret> {
        let mut cache = self.cache.lock();
        if let Some(c) = cache.as_ref().filter(|c| c.read_at.elapsed() < self.refresh) {
            return Ok(c.token.clone());
        }
        match self.read() {
            Ok(token) => {
                *cache = Some(Cached { token: token.clone(), read_at: Instant::now() });
                Ok(token)
            }
            Err(e) => match (cache.as_mut(), &self.fallback) {
                (Some(c), _) => {
                    log::warn!("{e}; keeping the token read before");
                    // Try again after another period rather than on every request.
                    c.read_at = Instant::now();
                    Ok(c.token.clone())
                }
                (None, Some(fallback)) => Ok(fallback.clone()),
                (None, None) => Err(e),
            },
        }
    }

    /// After a 401: read the file again now. True when it now holds a different token, so a
    /// retry may succeed.
    pub(crate) fn refresh_after_unauthorized(&self) -> bool {
        let mut cache = self.cache.lock();
        let old = cache.as_ref().map(|c| c.token.clone());
        match self.read() {
            Ok(token) => {
                let changed = old.as_ref() != Some(&token);
                *cache = Some(Cached { token, read_at: Instant::now() });
                changed
            }
            Err(e) => {
                log::warn!("{e}");
                false
            }
        }
    }

    fn read(&self) -> Result<Secret> {
        let fail =
            |message: String| Error::Auth { source_name: self.source_name.clone().into(), message: message.into() };
        // Always re-open the path: the kubelet swaps a symlinked directory (docs/auth.md §8.3).
        let bytes =
            super::read_file(&self.path).map_err(|e| fail(format!("cannot read {}: {e}", self.path.display())))?;
        let text = String::from_utf8(bytes).map_err(|_| fail(format!("{} is not UTF-8", self.path.display())))?;
        let token = text.trim();
        if token.is_empty() {
            return Err(fail(format!("{} is empty", self.path.display())));
        }
        if token.chars().any(char::is_control) {
            return Err(fail(format!("{} holds control characters", self.path.display())));
        }
        Ok(Secret::new(token))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_file(name: &str, content: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("kw-token-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("token");
        std::fs::write(&path, content).unwrap();
        path
    }

    #[test]
    fn token_files_are_trimmed_and_cached_until_refresh() {
        let path = temp_file("trim", "  abc\n");
        let tf = TokenFile::new(path.clone(), "test".into(), None);
        assert_eq!(tf.token().unwrap().expose(), "abc");
        std::fs::write(&path, "def\n").unwrap();
        assert_eq!(tf.token().unwrap().expose(), "abc", "cached within the refresh period");
        assert!(tf.refresh_after_unauthorized(), "a 401 re-reads and sees a new token");
        assert_eq!(tf.token().unwrap().expose(), "def");
        assert!(!tf.refresh_after_unauthorized(), "same token: a retry would not help");
    }

    #[test]
    fn a_token_file_is_re_read_after_the_refresh_period() {
        let path = temp_file("period", "one");
        let mut tf = TokenFile::new(path.clone(), "test".into(), None);
        tf.refresh = Duration::ZERO;
        assert_eq!(tf.token().unwrap().expose(), "one");
        std::fs::write(&path, "two").unwrap();
        assert_eq!(tf.token().unwrap().expose(), "two");
        std::fs::remove_file(&path).unwrap();
        assert_eq!(tf.token().unwrap().expose(), "two", "last good token kept when the file vanishes");
    }

    #[test]
    fn an_empty_or_missing_token_file_is_an_error_naming_it() {
        let path = temp_file("empty", " \n");
        let e =
            TokenFile::new(path.clone(), "kubeconfig /k: users[0].user.tokenFile".into(), None).check().unwrap_err();
        assert!(e.to_string().contains("is empty") && e.to_string().contains("users[0].user.tokenFile"), "{e}");
        let missing = path.with_file_name("missing");
        assert!(TokenFile::new(missing.clone(), "t".into(), None).check().is_err());
        let with_fallback = TokenFile::new(missing, "t".into(), Some(Secret::new("static")));
        assert_eq!(with_fallback.token().unwrap().expose(), "static");
    }
}
