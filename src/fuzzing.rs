//! Entry points for the fuzz targets in `fuzz/` and the randomized decoder tests (cargo feature
//! `fuzzing`). Hidden and outside semver: they only forward to crate-private decoders.

use std::io::{self, BufRead, Read};

use serde::de::DeserializeOwned;

use crate::decode::{self, Line};

/// Decodes one watch line (without its `\n`) as a `K` watch event, the way the watcher does
/// by default (straight into `K`); `Err` carries the message.
///
/// # Errors
///
/// When the line is not a valid watch event.
pub fn watch_event<K: DeserializeOwned>(line: &[u8]) -> Result<(), String> {
    decode::watch_event::<K>(line, false, &mut decode::Scratch::default()).map(|_| ())
}

/// Decodes one watch line both ways the watcher can: straight into `K`, and through the raw
/// object bytes (compact store mode). The two should always agree.
pub fn watch_event_both<K: DeserializeOwned>(line: &[u8]) -> (Result<(), String>, Result<(), String>) {
    (
        decode::watch_event::<K>(line, false, &mut decode::Scratch::default()).map(|_| ()),
        decode::watch_event::<K>(line, true, &mut decode::Scratch::default()).map(|_| ()),
    )
}

/// The strict syntax check that runs before simd-json: true only for JSON that serde_json's
/// parser accepts too (it may refuse more, e.g. a lone `\u` surrogate or deep nesting).
pub fn strict_syntax(input: &[u8]) -> bool {
    crate::syntax::is_valid(input)
}

/// Splits `reader` into lines of at most `max` bytes, as a watch stream is read; returns the
/// complete lines. A read that times out (`TimedOut` or `WouldBlock`, as a socket read timeout
/// reports) is retried, and the line it interrupted must come out whole. Stops at the end, at a
/// too-long line, or at another read error.
pub fn lines(mut reader: impl BufRead, max: usize) -> Vec<Vec<u8>> {
    let mut buf = Vec::new();
    let mut out = Vec::new();
    loop {
        match decode::read_line(&mut reader, &mut buf, max) {
            Ok(Line::Complete) => {
                assert!(buf.len() <= max, "read_line kept {} bytes, more than {max}", buf.len());
                out.push(std::mem::take(&mut buf));
            }
            Ok(Line::TooLong) => {
                assert!(buf.len() <= max, "read_line kept {} bytes, more than {max}", buf.len());
                return out;
            }
            Err(e) if matches!(e.kind(), io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock) => {
                assert!(buf.len() <= max, "read_line kept {} bytes, more than {max}", buf.len());
            }
            Ok(Line::End) | Err(_) => return out,
        }
    }
}

/// Streams a list body from `reader`, decoding each item as a `K` (items holding at most
/// `max_item` bytes); returns the number of items and the list's resourceVersion.
///
/// # Errors
///
/// The decoder's error, as text.
pub fn list<K: DeserializeOwned, R: Read>(reader: R, max_item: usize) -> Result<(usize, Option<String>), String> {
    let mut items = 0;
    let meta = decode::list(reader, max_item, |item| {
        let bytes = item.bytes;
        assert!(bytes.len() <= max_item.saturating_add(64 * 1024), "list item of {} bytes", bytes.len());
        assert!(!item.checked || crate::syntax::is_valid(bytes), "an item marked checked is not valid JSON");
        items += 1;
        // The watcher's decoder trusting `checked` judges the item as it does from scratch.
        let trusted = decode::item::<K>(item, &mut decode::Scratch::default()).map(|_| ());
        let fresh = decode::object::<K>(bytes, &mut decode::Scratch::default()).map(|_| ());
        assert_eq!(trusted.is_ok(), fresh.is_ok(), "{trusted:?} vs {fresh:?}");
        serde_json::from_slice::<K>(bytes).map(|_| ()).map_err(|e| e.to_string())
    });
    match meta {
        Ok(meta) => Ok((items, meta.resource_version)),
        Err(decode::ListError::Io(e)) => Err(e.to_string()),
        Err(decode::ListError::Malformed { message, .. }) => Err(message),
        Err(decode::ListError::Item(e)) => Err(e),
    }
}

/// Parses a kubeconfig held in memory and resolves its current context into a client
/// (without sending anything or running exec plugins).
///
/// # Errors
///
/// The parse or resolution error.
pub fn kubeconfig(yaml: &str) -> crate::Result<()> {
    crate::Client::from_kubeconfig_yaml(yaml, &crate::auth::KubeconfigOptions::default()).map(|_| ())
}
