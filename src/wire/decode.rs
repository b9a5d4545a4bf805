//! Bytes → list items, watch events and `Status` errors; names the bad line and its first bytes.
//!
//! Lists are decoded as they stream in: a small scanner walks the top-level object and hands each
//! element of `items` to the caller as a byte slice, so at most one item (plus one read buffer) is
//! held, whatever the page size. Watch lines are split on `\n` with a bounded length, the envelope
//! is parsed with the object kept as a raw slice, and the object is decoded by event type.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::io::{self, BufRead, Read};
use std::time::Duration;

use std::marker::PhantomData;

use serde::Deserialize;
use serde::de::{DeserializeOwned, DeserializeSeed, Deserializer, Error as _, IgnoredAny, MapAccess, Visitor};
use serde_json::value::RawValue;

use crate::error::{ApiError, DecodeError, snippet};
use crate::wire::syntax::{self, Prefix};

/// One decoded watch event.
#[derive(Debug)]
pub(crate) enum WatchEvent<K> {
    Added(K),
    Modified(K),
    Deleted(K),
    Bookmark {
        resource_version: String,
        /// `k8s.io/initial-events-end: "true"`: the end of a streaming list's initial state.
        initial_events_end: bool,
    },
    Error(StatusBody),
    /// An `ADDED`, `MODIFIED` or `DELETED` event whose object is valid JSON with a
    /// `metadata.name` but does not decode as `K` (the watcher skips it; see `Skipped`).
    Undecodable {
        kind: Change,
        id: Identity,
        message: String,
    },
}

/// The change an object event makes.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Change {
    Added,
    Modified,
    Deleted,
}

/// Who an object is, read from its metadata alone: enough to keep a store's bookkeeping right
/// for an object whose body does not decode as the watched type.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Identity {
    pub(crate) namespace: Option<String>,
    pub(crate) name: Option<String>,
    pub(crate) uid: Option<String>,
    pub(crate) resource_version: Option<String>,
}

/// The identity of an object that is valid JSON (lenient: any field may be missing or of
/// another type than expected, which then counts as missing).
pub(crate) fn identity(bytes: &[u8]) -> Option<Identity> {
    let v: serde_json::Value = serde_json::from_slice(bytes).ok()?;
    let meta = v.get("metadata")?;
    let field = |name: &str| meta.get(name).and_then(serde_json::Value::as_str).map(str::to_owned);
    Some(Identity {
        namespace: field("namespace").filter(|ns| !ns.is_empty()),
        name: field("name").filter(|n| !n.is_empty()),
        uid: field("uid").filter(|u| !u.is_empty()),
        resource_version: field("resourceVersion").filter(|rv| !rv.is_empty()),
    })
}

#[derive(Deserialize)]
struct BookmarkObject {
    #[serde(default)]
    metadata: BookmarkMeta,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct BookmarkMeta {
    resource_version: Option<String>,
    annotations: Option<BTreeMap<String, String>>,
}

/// The annotation on the bookmark that ends a streaming list's initial events.
pub(crate) const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";

/// The event types of a watch line.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Added,
    Modified,
    Deleted,
    Bookmark,
    Error,
}

impl Kind {
    fn parse(s: &str) -> Result<Kind, String> {
        Ok(match s {
            "ADDED" => Kind::Added,
            "MODIFIED" => Kind::Modified,
            "DELETED" => Kind::Deleted,
            "BOOKMARK" => Kind::Bookmark,
            "ERROR" => Kind::Error,
            other => return Err(format!("unknown watch event type \"{}\"", snippet(other.as_bytes()))),
        })
    }
}

/// Reusable buffers for decoding; with the `simd` feature, simd-json parses a copy in place.
#[derive(Default)]
pub(crate) struct Scratch {
    #[cfg(feature = "simd")]
    bytes: Vec<u8>,
    #[cfg(feature = "simd")]
    buffers: Option<simd_json::Buffers>,
}

impl Scratch {
    /// Runs `f` on a simd-json deserializer over a copy of `input` (simd-json rewrites its
    /// input). `None` when simd-json fails: the caller then decodes with serde_json, which also
    /// gives the error its usual wording.
    #[cfg(feature = "simd")]
    ///
    /// `checked`: `input` already passed [`syntax::is_valid`]'s check.
    fn simd<T>(
        &mut self,
        input: &[u8],
        checked: bool,
        f: impl for<'de> FnOnce(&mut simd_json::Deserializer<'de>) -> Option<T>,
    ) -> Option<T> {
        // simd-json accepts some invalid JSON that serde_json rejects (a raw control byte
        // between tokens, found by tests/decode.rs). A strict syntax check first (~4 µs for a
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

/// Decodes one object (a GET answer, a compact store entry).
pub(crate) fn object<K: DeserializeOwned>(bytes: &[u8], scratch: &mut Scratch) -> Result<K, String> {
    item(Item { bytes, checked: false }, scratch)
}

/// Decodes a compact store entry (a fresh scratch: entries are decoded on readers' threads).
pub(crate) fn compact<K: DeserializeOwned>(bytes: &[u8]) -> Result<K, String> {
    object(bytes, &mut Scratch::default())
}

/// Decodes one list item.
pub(crate) fn item<K: DeserializeOwned>(item: Item<'_>, scratch: &mut Scratch) -> Result<K, String> {
    let bytes = item.bytes;
    #[cfg(feature = "simd")]
    if let Some(obj) = scratch.simd(bytes, item.checked, |de| K::deserialize(de).ok()) {
        return Ok(obj);
    }
    let _ = (scratch, item.checked); // serde_json checks as it decodes
    // JSON is UTF-8 (RFC 8259). Checking it whole keeps every path in agreement: serde_json
    // would otherwise accept invalid bytes inside fields it skips.
    let text = std::str::from_utf8(bytes).map_err(|e| format!("invalid UTF-8: {e}"))?;
    serde_json::from_str(text).map_err(|e| e.to_string())
}

/// Decodes one watch line (without its `\n`). Errors carry the parser's message; the caller adds
/// the context, line number and snippet.
///
/// One pass: the API server writes `type` before `object`, so the object is decoded straight into
/// its final type. If `object` comes first, or `keep_raw` asks for the object's bytes (compact
/// store mode), it is kept as a raw slice and decoded from there.
pub(crate) fn watch_event<'a, K: DeserializeOwned>(
    line: &'a [u8],
    keep_raw: bool,
    scratch: &mut Scratch,
) -> Result<(WatchEvent<K>, Option<&'a [u8]>), String> {
    #[cfg(feature = "simd")]
    if !keep_raw
        && let Some(event) =
            scratch.simd(line, false, |de| match de.deserialize_map(EnvelopeVisitor(false, PhantomData)) {
                Ok((Ok(event), None)) => Some(event),
                _ => None,
            })
    {
        return Ok((event, None));
    }
    let _ = scratch;
    watch_event_plain(line, keep_raw)
}

/// [`watch_event`] with serde_json only (what runs without the `simd` feature, and after
/// simd-json failed).
fn watch_event_plain<K: DeserializeOwned>(
    line: &[u8],
    keep_raw: bool,
) -> Result<(WatchEvent<K>, Option<&[u8]>), String> {
    match watch_event_json(line, keep_raw) {
        // Decoded straight into `K`, a bad object fails the whole line; read it again keeping
        // the object's bytes, to tell a broken line from an object that is not a `K`.
        Err(e) if !keep_raw => match watch_event_json::<K>(line, true) {
            Ok((event @ WatchEvent::Undecodable { .. }, _)) => Ok((event, None)),
            _ => Err(e),
        },
        other => other,
    }
}

/// One serde_json pass over a watch line.
fn watch_event_json<K: DeserializeOwned>(
    line: &[u8],
    keep_raw: bool,
) -> Result<(WatchEvent<K>, Option<&[u8]>), String> {
    // See `object`: the raw path needs valid UTF-8, so the direct one checks it too.
    let text = std::str::from_utf8(line).map_err(|e| format!("invalid UTF-8: {e}"))?;
    let mut de = serde_json::Deserializer::from_str(text);
    let (event, raw) = de.deserialize_map(EnvelopeVisitor(keep_raw, PhantomData)).map_err(|e| e.to_string())?;
    de.end().map_err(|e| e.to_string())?;
    Ok((event?, raw.map(|r| r.get().as_bytes())))
}

struct EnvelopeVisitor<K>(bool, PhantomData<K>);

impl<'de, K: DeserializeOwned> Visitor<'de> for EnvelopeVisitor<K> {
    /// The outer error is a syntax error of the line; the inner one is about the event.
    type Value = (Result<WatchEvent<K>, String>, Option<&'de RawValue>);

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a watch event object {\"type\": …, \"object\": …}")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let keep_raw = self.0;
        let mut kind: Option<Result<Kind, String>> = None;
        let mut event: Option<WatchEvent<K>> = None;
        let mut raw: Option<&'de RawValue> = None;
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            match key.as_ref() {
                "type" if kind.is_some() => return Err(A::Error::duplicate_field("type")),
                "object" if event.is_some() || raw.is_some() => return Err(A::Error::duplicate_field("object")),
                "type" => kind = Some(Kind::parse(&map.next_value::<Cow<'de, str>>()?)),
                "object" => match kind {
                    Some(Ok(k)) if !keep_raw => event = Some(map.next_value_seed(ObjectSeed::<K>(k, PhantomData))?),
                    _ => raw = Some(map.next_value()?),
                },
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        let kind = match kind {
            Some(Ok(k)) => k,
            Some(Err(e)) => return Ok((Err(e), None)),
            None => return Ok((Err("watch event without \"type\"".to_owned()), None)),
        };
        let event = match (event, raw) {
            (Some(ev), _) => Ok(ev),
            (None, Some(raw)) => {
                let mut de = serde_json::Deserializer::from_str(raw.get());
                ObjectSeed::<K>(kind, PhantomData).deserialize(&mut de).map_err(|e| e.to_string()).or_else(|message| {
                    let change = match kind {
                        Kind::Added => Change::Added,
                        Kind::Modified => Change::Modified,
                        Kind::Deleted => Change::Deleted,
                        Kind::Bookmark | Kind::Error => return Err(message),
                    };
                    // Valid JSON with a name: an object this type cannot hold, not a broken line.
                    match identity(raw.get().as_bytes()) {
                        Some(id) if id.name.is_some() => Ok(WatchEvent::Undecodable { kind: change, id, message }),
                        _ => Err(message),
                    }
                })
            }
            (None, None) => Err("watch event without \"object\"".to_owned()),
        };
        Ok((event, raw))
    }
}

/// Decodes an event's object by its type: `K` for changes, a bookmark's metadata, or a Status.
///
/// Any error aborts the whole line (a parser cannot go on after an error inside a value); the
/// message is labelled with the event type.
struct ObjectSeed<K>(Kind, PhantomData<K>);

impl<'de, K: DeserializeOwned> DeserializeSeed<'de> for ObjectSeed<K> {
    type Value = WatchEvent<K>;

    fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<Self::Value, D::Error> {
        let label = |e: D::Error, what: &str| D::Error::custom(format!("{what} object: {e}"));
        Ok(match self.0 {
            Kind::Added => WatchEvent::Added(K::deserialize(de).map_err(|e| label(e, "ADDED"))?),
            Kind::Modified => WatchEvent::Modified(K::deserialize(de).map_err(|e| label(e, "MODIFIED"))?),
            Kind::Deleted => WatchEvent::Deleted(K::deserialize(de).map_err(|e| label(e, "DELETED"))?),
            Kind::Bookmark => {
                let b = BookmarkObject::deserialize(de).map_err(|e| label(e, "BOOKMARK"))?;
                let resource_version = b
                    .metadata
                    .resource_version
                    .filter(|rv| !rv.is_empty())
                    .ok_or_else(|| D::Error::custom("BOOKMARK without metadata.resourceVersion"))?;
                let initial_events_end = b
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(INITIAL_EVENTS_END))
                    .is_some_and(|v| v == "true");
                WatchEvent::Bookmark { resource_version, initial_events_end }
            }
            Kind::Error => WatchEvent::Error(
                StatusBody::deserialize(de)
                    .map_err(|e| D::Error::custom(format!("ERROR object is not a Status: {e}")))?,
            ),
        })
    }
}

/// Builds the error for a failed decode at `line` of a stream.
pub(crate) fn decode_error(context: &str, line: Option<u64>, bytes: &[u8], message: String) -> DecodeError {
    DecodeError { context: context.to_owned(), line, len: bytes.len(), message, snippet: snippet(bytes) }
}

/// What reading one bounded line produced.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Line {
    /// A complete line is in the buffer (without the `\n`).
    Complete,
    /// The stream ended cleanly; a partial last line, if any, is in the buffer.
    End,
    /// The line exceeded the limit; the buffer holds its first bytes.
    TooLong,
}

/// Reads up to and excluding the next `\n`, appending to `out`, which holds at most `max` bytes.
///
/// `out` is not cleared: the caller clears it once it has used a complete line. After an error
/// (a read timeout in the middle of a line) `out` keeps the bytes already read, and the next
/// call goes on with the same line.
pub(crate) fn read_line(r: &mut impl BufRead, out: &mut Vec<u8>, max: usize) -> io::Result<Line> {
    loop {
        let available = match r.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if available.is_empty() {
            return Ok(Line::End);
        }
        let (take, done) = match memchr::memchr(b'\n', available) {
            Some(i) => (i, true),
            None => (available.len(), false),
        };
        if out.len() + take > max {
            let room = max.saturating_sub(out.len()).min(take);
            out.extend_from_slice(&available[..room]);
            return Ok(Line::TooLong);
        }
        out.extend_from_slice(&available[..take]);
        r.consume(if done { take + 1 } else { take });
        if done {
            return Ok(Line::Complete);
        }
    }
}

/// A Kubernetes `Status`, read leniently: any field may be missing.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub(crate) struct StatusBody {
    pub(crate) code: Option<u16>,
    pub(crate) status: Option<String>,
    pub(crate) reason: Option<String>,
    pub(crate) message: Option<String>,
    pub(crate) details: Option<StatusDetails>,
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub(crate) struct StatusDetails {
    #[serde(default)]
    pub(crate) causes: Vec<StatusCause>,
    pub(crate) retry_after_seconds: Option<u32>,
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
pub(crate) struct StatusCause {
    pub(crate) reason: Option<String>,
    pub(crate) message: Option<String>,
}

impl StatusBody {
    /// "Too large resource version" in any of its three historical forms (protocol.md §3.4).
    fn too_large(&self) -> bool {
        const TEXT: &str = "Too large resource version";
        let causes = self.details.as_ref().map(|d| d.causes.as_slice()).unwrap_or_default();
        causes.iter().any(|c| {
            c.reason.as_deref() == Some("ResourceVersionTooLarge")
                || c.message.as_deref().is_some_and(|m| m.contains(TEXT))
        }) || self.message.as_deref().is_some_and(|m| m.contains(TEXT))
    }

    /// The error for an in-stream `ERROR` event.
    pub(crate) fn into_api_error(self, context: &str) -> ApiError {
        let code = self.code.unwrap_or(500);
        to_api_error(context, code, Some(self), None, true)
    }
}

/// Classifies an HTTP error answer: by status code first, refined with the body when it is a
/// `Status` (even without `kind`), else quoting the body's first bytes.
pub(crate) fn http_error(context: &str, code: u16, body: &[u8], retry_after: Option<Duration>) -> ApiError {
    let status = serde_json::from_slice::<StatusBody>(body).ok().filter(|s| s.code.is_some() || s.status.is_some());
    match status {
        Some(s) => to_api_error(context, code, Some(s), retry_after, false),
        None => {
            let mut e = to_api_error(context, code, None, retry_after, false);
            let text = String::from_utf8_lossy(body);
            let text = text.trim();
            if !text.is_empty() {
                e.message = snippet(text.as_bytes());
            }
            e
        }
    }
}

fn to_api_error(
    context: &str,
    code: u16,
    status: Option<StatusBody>,
    retry_after: Option<Duration>,
    in_stream: bool,
) -> ApiError {
    let status = status.unwrap_or_default();
    let too_large = status.too_large();
    let retry_after = retry_after.or_else(|| {
        let secs = status.details.as_ref()?.retry_after_seconds?;
        Some(Duration::from_secs(secs.into()))
    });
    ApiError {
        context: context.to_owned(),
        code,
        reason: status.reason.filter(|r| !r.is_empty()).unwrap_or_else(|| reason_phrase(code).to_owned()),
        message: status.message.unwrap_or_default(),
        retry_after,
        too_large_resource_version: too_large,
        in_stream,
    }
}

fn reason_phrase(code: u16) -> &'static str {
    match code {
        400 => "BadRequest",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        405 => "MethodNotAllowed",
        406 => "NotAcceptable",
        409 => "Conflict",
        410 => "Gone",
        422 => "Invalid",
        429 => "TooManyRequests",
        500 => "InternalError",
        502 => "BadGateway",
        503 => "ServiceUnavailable",
        504 => "Timeout",
        _ => "Unknown",
    }
}

/// The list's own metadata.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct ListMeta {
    pub(crate) resource_version: Option<String>,
    pub(crate) continue_token: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct ListMetaJson {
    resource_version: Option<String>,
    #[serde(rename = "continue")]
    continue_token: Option<String>,
}

/// Why a streamed list could not be read.
#[derive(Debug)]
pub(crate) enum ListError<E> {
    /// Reading the body failed (reset, truncation, idle timeout).
    Io(io::Error),
    /// The body is not a list (`message`, plus the first bytes at the bad spot).
    Malformed { message: String, offset: u64, snippet: String },
    /// The callback rejected an item.
    Item(E),
}

/// One element of a list's `items`, as the scanner found it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Item<'a> {
    pub(crate) bytes: &'a [u8],
    /// The bytes passed the strict syntax check (`syntax`) while the scanner looked for their
    /// end, so decoding need not check them again.
    pub(crate) checked: bool,
}

/// Streams a list body: calls `on_item` with each element of `items`, in order, and returns the
/// list metadata. Holds at most one item of up to `max_item` bytes plus a read buffer (and
/// input already consumed, while it is smaller than the rest).
pub(crate) fn list<R: Read, E>(
    reader: R,
    max_item: usize,
    mut on_item: impl FnMut(Item<'_>) -> Result<(), E>,
) -> Result<ListMeta, ListError<E>> {
    let mut s = Scanner {
        reader,
        buf: Vec::with_capacity(READ_SIZE),
        pos: 0,
        consumed: 0,
        eof: false,
        max_item,
        checked: false,
    };
    let mut meta = ListMeta::default();
    s.expect(b'{')?;
    if s.peek()? == b'}' {
        s.pos += 1;
        return Ok(meta);
    }
    loop {
        let key = s.string()?;
        s.expect(b':')?;
        match key.as_str() {
            "items" => {
                if s.peek()? == b'n' {
                    s.value()?; // null
                } else {
                    s.expect(b'[')?;
                    if s.peek()? == b']' {
                        s.pos += 1;
                    } else {
                        loop {
                            let (a, b) = s.value()?;
                            on_item(Item { bytes: &s.buf[a..b], checked: s.checked }).map_err(ListError::Item)?;
                            match s.next_byte()? {
                                b',' => continue,
                                b']' => break,
                                other => {
                                    return Err(s.malformed(format!(
                                        "expected ',' or ']' in items, found {:?}",
                                        other as char
                                    )));
                                }
                            }
                        }
                    }
                }
            }
            "metadata" => {
                let (a, b) = s.value()?;
                let m: ListMetaJson =
                    serde_json::from_slice(&s.buf[a..b]).map_err(|e| s.malformed(format!("list metadata: {e}")))?;
                meta.resource_version = m.resource_version.filter(|v| !v.is_empty());
                meta.continue_token = m.continue_token.filter(|v| !v.is_empty());
            }
            _ => {
                s.value()?;
            }
        }
        match s.next_byte()? {
            b',' => continue,
            b'}' => return Ok(meta),
            other => return Err(s.malformed(format!("expected ',' or '}}' in list, found {:?}", other as char))),
        }
    }
}

/// How much a list read asks for at a time.
const READ_SIZE: usize = 64 * 1024;

/// A forward-only JSON scanner over a reader. Invariant: `buf[pos..]` is unread input; a value
/// returned by `value()` stays valid in `buf` until the next call that reads input.
struct Scanner<R> {
    reader: R,
    buf: Vec<u8>,
    pos: usize,
    /// Bytes dropped from the front of `buf` so far (for error offsets).
    consumed: u64,
    eof: bool,
    max_item: usize,
    /// The last value `value()` returned passed the strict syntax check.
    checked: bool,
}

impl<R: Read> Scanner<R> {
    /// Reads more input, appending to `buf`. Returns false at end of input.
    fn fill(&mut self) -> Result<bool, ListError<std::convert::Infallible>> {
        if self.eof {
            return Ok(false);
        }
        let len = self.buf.len();
        self.buf.resize(len + READ_SIZE, 0);
        loop {
            match self.reader.read(&mut self.buf[len..]) {
                Ok(0) => {
                    self.buf.truncate(len);
                    self.eof = true;
                    return Ok(false);
                }
                Ok(n) => {
                    self.buf.truncate(len + n);
                    return Ok(true);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    self.buf.truncate(len);
                    return Err(ListError::Io(e));
                }
            }
        }
    }

    /// Drops consumed input so the buffer only grows with the value being scanned.
    fn compact(&mut self) {
        if self.pos > 0 {
            self.buf.drain(..self.pos);
            self.consumed += self.pos as u64;
            self.pos = 0;
        }
    }

    fn peek<E>(&mut self) -> Result<u8, ListError<E>> {
        loop {
            while self.pos < self.buf.len() {
                let b = self.buf[self.pos];
                if b.is_ascii_whitespace() {
                    self.pos += 1;
                } else {
                    return Ok(b);
                }
            }
            self.compact();
            if !self.fill().map_err(cast)? {
                return Err(self.truncated());
            }
        }
    }

    fn next_byte<E>(&mut self) -> Result<u8, ListError<E>> {
        let b = self.peek()?;
        self.pos += 1;
        Ok(b)
    }

    fn expect<E>(&mut self, want: u8) -> Result<(), ListError<E>> {
        let got = self.next_byte()?;
        if got == want {
            Ok(())
        } else {
            self.pos -= 1;
            Err(self.malformed(format!("expected {:?}, found {:?}", want as char, got as char)))
        }
    }

    fn string<E>(&mut self) -> Result<String, ListError<E>> {
        if self.peek()? != b'"' {
            return Err(self.malformed("expected a string key".to_owned()));
        }
        let (a, b) = self.value()?;
        serde_json::from_slice(&self.buf[a..b]).map_err(|e| self.malformed(format!("bad key: {e}")))
    }

    /// Scans one complete JSON value and returns its span in `buf`; `checked` tells whether it
    /// passed the strict syntax check on the way.
    fn value<E>(&mut self) -> Result<(usize, usize), ListError<E>> {
        self.peek()?;
        // Drop consumed input once it outweighs the rest: each byte moves at most once, where
        // compacting before every item moved the whole read-ahead each time.
        if self.pos > self.buf.len() / 2 {
            self.compact();
        }
        let start = self.pos;
        // An object or array (every list item) is found and checked in one pass while it is
        // well-formed; anything else is left to the lenient scan below, which finds the end of
        // malformed items too, so decoding can name what is wrong with them.
        self.checked = false;
        loop {
            let available = self.buf.len() - start;
            match syntax::container_prefix(&self.buf[start..]) {
                // The limit holds however much was read ahead with the item.
                Prefix::Complete(n) if n > self.max_item => {
                    return Err(self.malformed(format!("list item larger than {} bytes", self.max_item)));
                }
                Prefix::Complete(n) => {
                    self.pos = start + n;
                    self.checked = true;
                    return Ok((start, start + n));
                }
                Prefix::Incomplete if available <= self.max_item && !self.eof => {
                    // Read until there is twice as much (or the item limit), so a long item is
                    // checked a bounded number of times, not once per read.
                    let want = available.saturating_mul(2).max(READ_SIZE).min(self.max_item.saturating_add(1));
                    while self.buf.len() - start < want && self.fill().map_err(cast)? {}
                }
                Prefix::Incomplete | Prefix::Other => break,
            }
        }
        self.lenient_value(start)
    }

    /// Finds the end of the value at `start` by brackets and quotes alone.
    fn lenient_value<E>(&mut self, start: usize) -> Result<(usize, usize), ListError<E>> {
        let mut i = start;
        let mut depth = 0u32;
        let mut in_str = false;
        let mut escaped = false;
        let first = self.buf[start];
        let scalar = !matches!(first, b'{' | b'[' | b'"');
        loop {
            if i >= self.buf.len() {
                if i - start > self.max_item {
                    return Err(self.malformed(format!("list item larger than {} bytes", self.max_item)));
                }
                if !self.fill().map_err(cast)? {
                    if scalar && i > start {
                        self.pos = i;
                        return Ok((start, i));
                    }
                    return Err(self.truncated());
                }
                continue;
            }
            let b = self.buf[i];
            if in_str {
                if escaped {
                    escaped = false;
                } else if b == b'\\' {
                    escaped = true;
                } else if b == b'"' {
                    in_str = false;
                    if depth == 0 {
                        self.pos = i + 1;
                        return Ok((start, i + 1));
                    }
                }
            } else if scalar {
                if matches!(b, b',' | b'}' | b']') || b.is_ascii_whitespace() {
                    self.pos = i;
                    return Ok((start, i));
                }
            } else {
                match b {
                    b'"' => in_str = true,
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        if depth == 0 {
                            return Err(self.malformed("unbalanced brackets".to_owned()));
                        }
                        depth -= 1;
                        if depth == 0 {
                            self.pos = i + 1;
                            return Ok((start, i + 1));
                        }
                    }
                    _ => {}
                }
            }
            i += 1;
        }
    }

    fn truncated<E>(&self) -> ListError<E> {
        ListError::Io(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!("list body ended early, after {} bytes", self.consumed + self.buf.len() as u64),
        ))
    }

    fn malformed<E>(&self, message: String) -> ListError<E> {
        let at = self.pos.min(self.buf.len());
        ListError::Malformed { message, offset: self.consumed + at as u64, snippet: snippet(&self.buf[at..]) }
    }
}

fn cast<E>(e: ListError<std::convert::Infallible>) -> ListError<E> {
    match e {
        ListError::Io(e) => ListError::Io(e),
        ListError::Malformed { message, offset, snippet } => ListError::Malformed { message, offset, snippet },
        ListError::Item(never) => match never {},
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;

    /// Decodes with the build's decoder, and checks the serde_json-only path agrees.
    fn ev(line: &[u8]) -> Result<WatchEvent<ConfigMap>, String> {
        let plain = watch_event_plain::<ConfigMap>(line, false).map(|_| ());
        let got = watch_event(line, false, &mut Scratch::default()).map(|(e, _)| e);
        assert_eq!(plain.is_ok(), got.is_ok(), "serde_json and the build's decoder disagree");
        got
    }

    #[test]
    fn raw_object_bytes_are_kept_on_request() {
        let line = br#"{"type":"ADDED","object":{"metadata":{"name":"a"}}}"#;
        let (e, raw) = watch_event::<ConfigMap>(line, true, &mut Scratch::default()).unwrap();
        assert!(matches!(e, WatchEvent::Added(_)));
        assert_eq!(raw, Some(&br#"{"metadata":{"name":"a"}}"#[..]));
    }

    fn names(body: &[u8], max_item: usize) -> Result<(Vec<String>, ListMeta), String> {
        let mut out = Vec::new();
        let meta = list(body, max_item, |item| -> Result<(), String> {
            let cm: ConfigMap = serde_json::from_slice(item.bytes).map_err(|e| e.to_string())?;
            out.push(cm.metadata.name.unwrap_or_default());
            Ok(())
        })
        .map_err(|e| format!("{e:?}"))?;
        Ok((out, meta))
    }

    #[test]
    fn list_items_and_metadata_are_read_in_any_order() {
        let body = br#"{"kind":"ConfigMapList","apiVersion":"v1","items":[
            {"metadata":{"name":"a","resourceVersion":"3"},"data":{"k":"}]\"{"}},
            {"metadata":{"name":"b"}}],
            "metadata":{"resourceVersion":"50","continue":"tok","remainingItemCount":3}}"#;
        let (n, meta) = names(body, 1 << 20).unwrap();
        assert_eq!(n, ["a", "b"]);
        assert_eq!(meta.resource_version.as_deref(), Some("50"));
        assert_eq!(meta.continue_token.as_deref(), Some("tok"));
    }

    #[test]
    fn empty_and_null_items_are_accepted() {
        assert!(names(br#"{"metadata":{"resourceVersion":"1","continue":""},"items":[]}"#, 100).unwrap().0.is_empty());
        let (n, meta) = names(br#"{"items":null,"metadata":{"resourceVersion":"1"}}"#, 100).unwrap();
        assert!(n.is_empty());
        assert_eq!(meta.continue_token, None);
        assert!(names(br#"{"metadata":{"resourceVersion":"1"}}"#, 100).unwrap().0.is_empty());
    }

    #[test]
    fn a_truncated_list_is_an_io_error_not_a_partial_list() {
        let err = names(br#"{"metadata":{"resourceVersion":"1"},"items":[{"metadata":{"name":"a"}},{"meta"#, 100)
            .unwrap_err();
        assert!(err.contains("UnexpectedEof"), "{err}");
    }

    #[test]
    fn an_oversized_item_is_refused() {
        let big = format!(r#"{{"items":[{{"metadata":{{"name":"{}"}}}}]}}"#, "x".repeat(200_000));
        let err = names(big.as_bytes(), 1000).unwrap_err();
        assert!(err.contains("larger than 1000 bytes"), "{err}");
        // Also when the whole item arrived in one read (it used to pass then).
        let small = format!(r#"{{"items":[{{"metadata":{{"name":"{}"}}}}]}}"#, "x".repeat(2000));
        let err = names(small.as_bytes(), 1000).unwrap_err();
        assert!(err.contains("larger than 1000 bytes"), "{err}");
    }

    #[test]
    fn html_is_malformed_with_a_snippet() {
        let err = names(b"<html>bad gateway</html>", 100).unwrap_err();
        assert!(err.contains("<html>"), "{err}");
    }

    #[test]
    fn items_split_across_reads_are_reassembled() {
        struct Trickle<'a>(&'a [u8]);
        impl Read for Trickle<'_> {
            fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
                let n = self.0.len().min(3).min(out.len());
                out[..n].copy_from_slice(&self.0[..n]);
                self.0 = &self.0[n..];
                Ok(n)
            }
        }
        let body =
            br#"{"items":[{"metadata":{"name":"a\"b"}},{"metadata":{"name":"c"}}],"metadata":{"resourceVersion":"9"}}"#;
        let mut got = Vec::new();
        list(Trickle(body), 1000, |item| -> Result<(), ()> {
            got.push(serde_json::from_slice::<ConfigMap>(item.bytes).unwrap().metadata.name.unwrap());
            Ok(())
        })
        .unwrap();
        assert_eq!(got, ["a\"b", "c"]);
    }

    #[test]
    fn watch_lines_decode_by_type() {
        let e: WatchEvent<ConfigMap> =
            ev(br#"{"type":"ADDED","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a","resourceVersion":"5"}}}"#).unwrap();
        assert!(matches!(e, WatchEvent::Added(cm) if cm.metadata.name.as_deref() == Some("a")));
        let b: WatchEvent<ConfigMap> = ev(
            br#"{"type":"BOOKMARK","object":{"kind":"Pod","metadata":{"resourceVersion":"77","creationTimestamp":null,"annotations":{"k8s.io/initial-events-end":"true"}},"spec":{"containers":null},"status":{}}}"#,
        )
        .unwrap();
        assert!(
            matches!(b, WatchEvent::Bookmark { ref resource_version, initial_events_end: true } if resource_version == "77")
        );
    }

    #[test]
    fn error_events_become_api_errors() {
        let e: WatchEvent<ConfigMap> = ev(
            br#"{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version: 1 (5)","reason":"Expired","code":410}}"#,
        )
        .unwrap();
        let WatchEvent::Error(status) = e else { panic!("not an error") };
        let api = status.into_api_error("watch configmaps");
        assert_eq!(api.code, 410);
        assert!(api.in_stream);
        assert_eq!(api.reason, "Expired");
    }

    #[test]
    fn an_object_before_its_type_is_still_decoded() {
        let e: WatchEvent<ConfigMap> =
            ev(br#"{"object":{"metadata":{"name":"a","resourceVersion":"5"}},"type":"DELETED"}"#).unwrap();
        assert!(matches!(e, WatchEvent::Deleted(cm) if cm.metadata.name.as_deref() == Some("a")));
    }

    #[test]
    fn an_object_that_is_not_a_k_is_undecodable_with_its_identity() {
        let line = br#"{"type":"MODIFIED","object":{"metadata":{"name":"a","namespace":"n","uid":"u1","resourceVersion":"5"},"data":{"k":5}}}"#;
        for keep_raw in [false, true] {
            let (event, _) = watch_event::<ConfigMap>(line, keep_raw, &mut Scratch::default()).unwrap();
            let WatchEvent::Undecodable { kind, id, message } = event else { panic!("{event:?}") };
            assert_eq!(kind, Change::Modified);
            assert_eq!(id.name.as_deref(), Some("a"));
            assert_eq!(id.namespace.as_deref(), Some("n"));
            assert_eq!(id.uid.as_deref(), Some("u1"));
            assert_eq!(id.resource_version.as_deref(), Some("5"));
            assert!(message.starts_with("MODIFIED object: invalid type"), "{message}");
        }
        assert!(matches!(ev(line), Ok(WatchEvent::Undecodable { .. })));
        // Without a name it cannot be told apart from garbage: the line is an error.
        assert!(ev(br#"{"type":"ADDED","object":{"metadata":{"namespace":"n"},"data":{"k":5}}}"#).is_err());
        // A broken line stays a broken line, and so do bad bookmarks and errors.
        assert!(ev(br#"{"type":"ADDED","object":{"metadata":{"name":"a"},"data":{"k":5}"#).is_err());
        assert!(ev(br#"{"type":"BOOKMARK","object":{"metadata":{"name":"a","resourceVersion":7}}}"#).is_err());
    }

    #[test]
    fn a_bad_object_names_its_event_type() {
        let err = watch_event::<ConfigMap>(
            br#"{"type":"MODIFIED","object":{"metadata":{"name":7}}}"#,
            false,
            &mut Scratch::default(),
        )
        .map(|e| e.0)
        .unwrap_err();
        assert!(err.starts_with("MODIFIED object: invalid type"), "{err}");
    }

    #[test]
    fn trailing_garbage_and_missing_fields_are_errors() {
        assert!(
            watch_event::<ConfigMap>(br#"{"type":"ADDED","object":{}} x"#, false, &mut Scratch::default())
                .map(|e| e.0)
                .is_err()
        );
        assert!(
            watch_event::<ConfigMap>(br#"{"type":"ADDED"}"#, false, &mut Scratch::default())
                .map(|e| e.0)
                .unwrap_err()
                .contains("without \"object\"")
        );
        assert!(
            watch_event::<ConfigMap>(br#"{"object":{}}"#, false, &mut Scratch::default())
                .map(|e| e.0)
                .unwrap_err()
                .contains("without \"type\"")
        );
        assert!(watch_event::<ConfigMap>(b"<html>", false, &mut Scratch::default()).map(|e| e.0).is_err());
    }

    #[test]
    fn a_syntax_error_inside_the_object_fails_the_line_in_both_paths() {
        let line = br#"{"type":"DELETED","object":{"metadata":{"name":"a","reso","object":{"metadata":{"name":"a"}}}"#;
        for keep_raw in [false, true] {
            assert!(watch_event::<ConfigMap>(line, keep_raw, &mut Scratch::default()).is_err(), "keep_raw={keep_raw}");
            assert!(watch_event_json::<ConfigMap>(line, keep_raw).is_err(), "keep_raw={keep_raw}");
        }
        let twice = br#"{"type":"ADDED","object":{},"object":{}}"#;
        assert!(watch_event::<ConfigMap>(twice, false, &mut Scratch::default()).is_err());
    }

    #[test]
    fn a_raw_control_byte_between_tokens_is_rejected_by_every_decoder() {
        let line = b"{\"type\":\"ERROR\",\"object\":{\"code\":4\x0810,\"reason\":\"Expired\"}}";
        assert!(watch_event::<ConfigMap>(line, false, &mut Scratch::default()).is_err());
        assert!(watch_event_json::<ConfigMap>(line, false).is_err());
        assert!(object::<StatusBody>(br#"{"code":4"#, &mut Scratch::default()).is_err());
        assert!(object::<StatusBody>(b"{\"code\":4\x0810}", &mut Scratch::default()).is_err());
    }

    #[test]
    fn unknown_event_types_are_errors() {
        let err = watch_event::<ConfigMap>(br#"{"type":"WEIRD","object":{}}"#, false, &mut Scratch::default())
            .map(|e| e.0)
            .unwrap_err();
        assert!(err.contains("unknown watch event type"), "{err}");
    }

    #[test]
    fn too_large_resource_version_is_detected_in_all_three_forms() {
        let modern = br#"{"code":504,"reason":"Timeout","message":"Timeout: Too large resource version: 9, current: 5","details":{"causes":[{"reason":"ResourceVersionTooLarge","message":"Too large resource version"}],"retryAfterSeconds":1}}"#;
        let middle = br#"{"code":504,"details":{"causes":[{"message":"Too large resource version"}]}}"#;
        let old = br#"{"code":504,"message":"Too large resource version: 9, current: 5"}"#;
        for body in [&modern[..], middle, old] {
            let e = http_error("list pods", 504, body, None);
            assert!(e.too_large_resource_version, "{}", String::from_utf8_lossy(body));
        }
        let modern = http_error("list pods", 504, modern, None);
        assert_eq!(modern.retry_after, Some(Duration::from_secs(1)));
    }

    #[test]
    fn plain_text_errors_keep_status_and_quote_the_body() {
        let e = http_error(
            "watch pods",
            429,
            b"Too many requests, please try again later.\n",
            Some(Duration::from_secs(3)),
        );
        assert_eq!(e.code, 429);
        assert_eq!(e.reason, "TooManyRequests");
        assert_eq!(e.message, "Too many requests, please try again later.");
        assert_eq!(e.retry_after, Some(Duration::from_secs(3)));
    }

    #[test]
    fn status_without_kind_is_still_a_status() {
        let e = http_error("list pods", 504, br#"{"metadata":{},"status":"Failure","message":"Timeout: request did not complete within 60s","reason":"Timeout","code":504}"#, None);
        assert_eq!(e.message, "Timeout: request did not complete within 60s");
    }

    #[test]
    fn lines_are_bounded() {
        let data = b"short\nthis line is far too long\nnext\n";
        let mut r = io::BufReader::with_capacity(4, &data[..]);
        let mut buf = Vec::new();
        assert_eq!(read_line(&mut r, &mut buf, 10).unwrap(), Line::Complete);
        assert_eq!(buf, b"short");
        buf.clear();
        assert_eq!(read_line(&mut r, &mut buf, 10).unwrap(), Line::TooLong);
        assert_eq!(buf.len(), 10);
    }

    #[test]
    fn a_last_line_without_newline_is_returned_at_end() {
        let mut r = io::BufReader::new(&b"a\nb"[..]);
        let mut buf = Vec::new();
        assert_eq!(read_line(&mut r, &mut buf, 10).unwrap(), Line::Complete);
        buf.clear();
        assert_eq!(read_line(&mut r, &mut buf, 10).unwrap(), Line::End);
        assert_eq!(buf, b"b");
    }

    /// Issue 13 item 10: a read timeout inside a line kept only the bytes after it.
    #[test]
    fn a_line_resumed_after_a_read_timeout_is_whole() {
        /// Hands out its parts one read at a time; an empty part is a timeout of that kind.
        struct Pausing(std::collections::VecDeque<(&'static [u8], io::ErrorKind)>);
        impl Read for Pausing {
            fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
                match self.0.pop_front() {
                    None => Ok(0),
                    Some((b"", kind)) => Err(kind.into()),
                    Some((part, _)) => {
                        out[..part.len()].copy_from_slice(part);
                        Ok(part.len())
                    }
                }
            }
        }
        let ok = io::ErrorKind::Other;
        let parts = [
            (&br#"{"type":"ADD"#[..], ok),
            (b"", io::ErrorKind::TimedOut),
            (br#"ED","object":{}}"#, ok),
            (b"", io::ErrorKind::WouldBlock),
            (b"\nnext", ok),
            (b"", io::ErrorKind::TimedOut),
            (b"", io::ErrorKind::TimedOut),
            (b" line\n", ok),
        ];
        let mut r = io::BufReader::with_capacity(64, Pausing(parts.into()));
        let mut buf = Vec::new();
        let mut lines = Vec::new();
        let mut timeouts = 0;
        loop {
            match read_line(&mut r, &mut buf, 100) {
                Ok(Line::Complete) => {
                    lines.push(String::from_utf8(buf.clone()).unwrap());
                    buf.clear();
                }
                Ok(Line::End) => break,
                Ok(Line::TooLong) => panic!("too long"),
                Err(e) => {
                    assert!(matches!(e.kind(), io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock), "{e}");
                    timeouts += 1;
                }
            }
        }
        assert_eq!(timeouts, 4);
        assert_eq!(lines, [r#"{"type":"ADDED","object":{}}"#, "next line"]);
        assert!(buf.is_empty());
    }

    #[test]
    fn a_resumed_line_is_bounded_as_a_whole() {
        struct Pausing(Vec<&'static [u8]>);
        impl Read for Pausing {
            fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
                match self.0.pop() {
                    None => Ok(0),
                    Some(b"") => Err(io::ErrorKind::TimedOut.into()),
                    Some(part) => {
                        out[..part.len()].copy_from_slice(part);
                        Ok(part.len())
                    }
                }
            }
        }
        // Read from the back: six bytes, a timeout, six more; the limit is ten.
        let mut r = io::BufReader::new(Pausing(vec![b"ghijkl\n", b"", b"abcdef"]));
        let mut buf = Vec::new();
        assert!(read_line(&mut r, &mut buf, 10).is_err());
        assert_eq!(buf, b"abcdef");
        assert_eq!(read_line(&mut r, &mut buf, 10).unwrap(), Line::TooLong);
        assert_eq!(buf, b"abcdefghij");
    }
}
