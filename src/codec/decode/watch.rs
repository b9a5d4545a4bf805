//! Watch lines: the `{"type", "object"}` envelope, the object decoded by event type, and the
//! undecodable-object case (valid JSON with a name, but not a `K`).

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::marker::PhantomData;

use serde::Deserialize;
use serde::de::{DeserializeOwned, DeserializeSeed, Deserializer, Error as _, IgnoredAny, MapAccess, Visitor};
use serde_json::value::RawValue;

use super::object::{self, Scratch};
use super::status::StatusBody;
use crate::codec::skip::{self, Node, json::Line};
use crate::error::snippet;

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

/// Decodes one watch line (without its `\n`). Errors carry the parser's message; the caller adds
/// the context, line number and snippet.
///
/// One pass: the API server writes `type` before `object`, so the object is decoded straight into
/// its final type. If `object` comes first, or `keep_raw` asks for the object's bytes (compact
/// store mode), it is kept as a raw slice and decoded from there. The fields of `skip` are left
/// out of a copy of the line that the decoders read (`codec/skip/json.rs`); the raw slice is the
/// object as it came, with them.
pub(crate) fn watch_event<'a, K: DeserializeOwned>(
    line: &'a [u8],
    keep_raw: bool,
    scratch: &mut Scratch,
    skip: Option<&Node>,
) -> Result<(WatchEvent<K>, Option<&'a [u8]>), String> {
    if let Some(node) = skip
        && let Some(decoded) = scratch.pruning(|pruned, scratch| {
            match object::utf8(line).ok().and_then(|()| skip::json::watch_line(line, node, pruned)) {
                // An error's line and column are the copy's (see `codec/skip/json.rs`).
                Some(Line::Pruned(object)) => Some(
                    whole::<K>(pruned, false, true, scratch).map(|(event, _)| (event, keep_raw.then(|| &line[object]))),
                ),
                // Nothing to skip, or not valid JSON: the line as it is.
                Some(Line::Whole) | None => None,
            }
        })
    {
        return decoded;
    }
    whole(line, keep_raw, false, scratch)
}

/// [`watch_event`] of a line read as it is; `checked`: it passed the strict syntax check.
fn whole<'a, K: DeserializeOwned>(
    line: &'a [u8],
    keep_raw: bool,
    checked: bool,
    scratch: &mut Scratch,
) -> Result<(WatchEvent<K>, Option<&'a [u8]>), String> {
    #[cfg(feature = "simd")]
    if !keep_raw
        && let Some(event) =
            scratch.simd(line, checked, |de| match de.deserialize_map(EnvelopeVisitor(false, PhantomData)) {
                Ok((Ok(event), None)) => Some(event),
                _ => None,
            })
    {
        return Ok((event, None));
    }
    let _ = (scratch, checked);
    watch_event_plain(line, keep_raw)
}

/// [`watch_event`] with serde_json only (what runs without the `simd` feature, and after
/// simd-json failed), of a line read as it is.
pub(super) fn watch_event_plain<K: DeserializeOwned>(
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
pub(super) fn watch_event_json<K: DeserializeOwned>(
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

/// The envelope of a watch line: whether to keep the object's bytes.
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
