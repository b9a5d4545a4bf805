//! The error of the protobuf decoder and encoder: a message naming what was wrong.

use std::fmt;

use serde::de;

/// What could not be read, and where (`core.v1.PodSpec.containers: …`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Error(pub(crate) String);

/// The message of [`Error::split`].
const SPLIT: &str = "a repeated field in more than one run (read again, counting every run)";

impl Error {
    /// A repeated field met again after its first run, where only that run was counted: the
    /// object is read again, counting all of them (`de::Ctx`). Passed up unchanged by the
    /// decoder's own wrappers, so that `de::message` recognises it.
    pub(crate) fn split() -> Self {
        Error(SPLIT.to_owned())
    }

    pub(crate) fn is_split(&self) -> bool {
        self.0 == SPLIT
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

impl de::Error for Error {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        Error(msg.to_string())
    }
}
