//! Decoding one JSON object (a list item, a GET answer, a compact store entry) into its type,
//! and the error that names a bad one. `decode/mod.rs` chooses between this and `proto.rs`.

use serde::de::DeserializeOwned;

use crate::codec::skip::{self, Node};
#[cfg(feature = "simd")]
use crate::codec::syntax;
use crate::error::{DecodeError, snippet};

/// Reusable buffers for decoding; with the `simd` feature, simd-json parses a copy in place.
#[derive(Default)]
pub(crate) struct Scratch {
    /// The input without its skipped fields (`codec/skip/json.rs`), lent out by
    /// [`Scratch::pruning`].
    pruned: Vec<u8>,
    #[cfg(feature = "simd")]
    bytes: Vec<u8>,
    #[cfg(feature = "simd")]
    buffers: Option<simd_json::Buffers>,
}

impl Scratch {
    /// Runs `f` with the buffer for a copy without skipped fields, taken out of `self` for the
    /// time, so that `f` can decode the copy with the other buffers.
    pub(super) fn pruning<T>(&mut self, f: impl FnOnce(&mut Vec<u8>, &mut Scratch) -> T) -> T {
        let mut pruned = std::mem::take(&mut self.pruned);
        let out = f(&mut pruned, self);
        self.pruned = pruned;
        out
    }

    /// Runs `f` on a simd-json deserializer over a copy of `input` (simd-json rewrites its
    /// input). `None` when simd-json fails: the caller then decodes with serde_json, which also
    /// gives the error its usual wording.
    #[cfg(feature = "simd")]
    ///
    /// `checked`: `input` already passed [`syntax::is_valid`]'s check.
    pub(super) fn simd<T>(
        &mut self,
        input: &[u8],
        checked: bool,
        f: impl for<'de> FnOnce(&mut simd_json::Deserializer<'de>) -> Option<T>,
    ) -> Option<T> {
        // simd-json accepts some invalid JSON that serde_json rejects (a raw control byte
        // between tokens, found by tests/integration/decode.rs). A strict syntax check first (~4 µs for a
        // 6 KB pod, of the ~20 µs simd-json saves) keeps what is accepted exactly serde_json's.
        if !checked && !syntax::is_valid(input) {
            return None;
        }
        self.bytes.clear();
        self.bytes.extend_from_slice(input);
        let buffers = self.buffers.get_or_insert_with(|| simd_json::Buffers::new(input.len()));
        let mut de = simd_json::Deserializer::from_slice_with_buffers(&mut self.bytes, buffers).ok()?;
        f(&mut de)
    }
}

/// Decodes one JSON object (a list item, a GET answer, a compact store entry); `checked`: it
/// already passed the strict syntax check (the list scanner's); the fields of `skip` are left
/// out of a copy that the decoders read (`codec/skip/json.rs`).
pub(super) fn json<K: DeserializeOwned>(
    bytes: &[u8],
    checked: bool,
    scratch: &mut Scratch,
    skip: Option<&Node>,
) -> Result<K, String> {
    // An error's line and column are then the copy's (see `codec/skip/json.rs`).
    if let Some(node) = skip
        && let Some(decoded) =
            scratch.pruning(|pruned, scratch| prune(bytes, node, pruned).map(|()| whole(pruned, true, scratch)))
    {
        return decoded;
    }
    whole(bytes, checked, scratch)
}

/// Copies `bytes` without the fields of `node` into `out`; `None` when the copy cannot be made
/// (invalid JSON by the strict check), and the input is decoded as it is. Invalid UTF-8 is
/// found here too, in the input whole: the decoders would otherwise never see the bytes left
/// out, and every path gives the same verdict.
pub(super) fn prune(bytes: &[u8], node: &Node, out: &mut Vec<u8>) -> Option<()> {
    utf8(bytes).ok()?;
    skip::json::pruned(bytes, node, out)
}

/// Whether `bytes` are UTF-8 (the error as serde_json's path words it).
pub(super) fn utf8(bytes: &[u8]) -> Result<(), String> {
    #[cfg(feature = "simd")]
    if simdutf8::basic::from_utf8(bytes).is_ok() {
        return Ok(());
    }
    std::str::from_utf8(bytes).map(drop).map_err(|e| format!("invalid UTF-8: {e}"))
}

/// Decodes one JSON object as it is.
fn whole<K: DeserializeOwned>(bytes: &[u8], checked: bool, scratch: &mut Scratch) -> Result<K, String> {
    #[cfg(feature = "simd")]
    if let Some(obj) = scratch.simd(bytes, checked, |de| K::deserialize(de).ok()) {
        return Ok(obj);
    }
    let _ = (scratch, checked); // serde_json checks as it decodes
    // JSON is UTF-8 (RFC 8259). Checking it whole keeps every path in agreement: serde_json
    // would otherwise accept invalid bytes inside fields it skips.
    let text = std::str::from_utf8(bytes).map_err(|e| format!("invalid UTF-8: {e}"))?;
    let mut de = serde_json::Deserializer::from_str(text);
    let obj = K::deserialize(&mut de).map_err(|e| e.to_string())?;
    de.end().map_err(|e| e.to_string())?;
    Ok(obj)
}

/// Builds the error for a failed decode at `line` of a stream.
pub(crate) fn decode_error(context: &str, line: Option<u64>, bytes: &[u8], message: String) -> DecodeError {
    DecodeError { context: context.to_owned(), line, len: bytes.len(), message, snippet: snippet(bytes) }
}
