//! The protobuf forms of what the rest of decode/ reads as JSON (docs/protocol.md §12): watch
//! events (one frame each, `frame.rs`), list bodies streamed item by item, one object, an
//! object's identity read off its metadata, and `Status` errors.
//!
//! Objects are decoded by `codec/protobuf` (its serde `Deserializer` and schema table); this file
//! reads the messages around them: `WatchEvent` {`1` type, `2` RawExtension {`1` raw}}, the
//! `runtime.Unknown` envelope, the `…List` message {`1` ListMeta, `2` items} and `ObjectMeta`
//! (`1` name, `3` namespace, `5` uid, `6` resourceVersion, `12` annotations).

use std::io::{self, BufRead, BufReader, Read};

use serde::de::DeserializeOwned;

use super::list::{Form, Item, ListError, ListMeta};
use super::peek::Peeked;
use super::status::StatusBody;
use super::watch::{Change, INITIAL_EVENTS_END, Identity, WatchEvent};
use crate::codec::protobuf::de::{self, Reader, Wire};
use crate::codec::protobuf::schema::{self, Type};
use crate::codec::protobuf::{self as pb, MAGIC};
use crate::codec::skip::Node;
use crate::error::snippet;

/// The message of an item of the list kind `list_kind` in `api_version`: the element type of
/// the list's field `2` (`items`).
pub(crate) fn item_message(api_version: &str, list_kind: &str) -> Option<usize> {
    let schema = schema::schema();
    let list = schema.kind(api_version, list_kind)?;
    match &schema.messages.get(list)?.field(2)?.ty {
        Type::Repeated(element) => match **element {
            Type::Message(index) => Some(index),
            _ => None,
        },
        _ => None,
    }
}

/// The apiVersion and kind of a metadata-only object: a `meta.k8s.io` type, with a protobuf form
/// whatever the resource (docs/protocol.md §12.1). Its list is `PartialObjectMetadataList`.
pub(crate) const PARTIAL_OBJECT_METADATA: (&str, &str) = ("meta.k8s.io/v1", "PartialObjectMetadata");

/// The apiVersion and kind that the items of the list kind `list_kind` in `api_version` carry in
/// JSON, which their protobuf messages cannot hold: the server sets them on each item of a
/// `PartialObjectMetadataList` (apiserver's `asPartialObjectMetadataList`), and on no item of a
/// typed list. `index`: the item's message.
fn item_types(api_version: &str, list_kind: &str, index: usize) -> Option<(&'static str, &'static str)> {
    let partial = (api_version, list_kind.strip_suffix("List")?) == PARTIAL_OBJECT_METADATA;
    partial.then(|| schema::schema().type_meta(index)).flatten()
}

/// Whether the kind `kind` of `api_version` has a protobuf form this client reads (it and its
/// list are in the schema table).
pub(crate) fn has_form(api_version: &str, kind: &str) -> bool {
    schema::schema().kind(api_version, kind).is_some() && item_message(api_version, &format!("{kind}List")).is_some()
}

/// One enveloped object (a GET answer), as its JSON form would decode.
pub(crate) fn object<K: DeserializeOwned>(body: &[u8]) -> Result<K, String> {
    pb::object(body).map_err(|e| e.to_string())
}

/// One list item: a bare message of the schema's message `index`, with the apiVersion and kind
/// its JSON form carries, if any (see `Form::Protobuf`).
pub(crate) fn item<K: DeserializeOwned>(
    index: usize,
    types: Option<(&'static str, &'static str)>,
    bytes: &[u8],
    skip: Option<&Node>,
) -> Result<K, String> {
    let head = types.map(|(api_version, kind)| [("apiVersion", api_version), ("kind", kind)]);
    let head = head.as_ref().map_or(&[][..], |h| &h[..]);
    de::message(schema::schema(), index, bytes, head, skip).map_err(|e| e.to_string())
}

fn text(bytes: &[u8]) -> Option<&str> {
    std::str::from_utf8(bytes).ok()
}

/// The one field `number` of `message` that is length-delimited; `None` when it is missing,
/// comes twice (a decoder would merge the two) or the message is not well-formed.
fn only_field(message: &[u8], number: u64) -> Option<&[u8]> {
    let mut reader = Reader::new(message);
    let mut found = None;
    while let Some((n, value)) = reader.next().ok()? {
        if n == number {
            let Wire::Bytes(bytes) = value else { return None };
            if found.replace(bytes).is_some() {
                return None;
            }
        }
    }
    found
}

/// The identity of an object from its message (a bare object: field `1` is its `ObjectMeta`),
/// without decoding the rest: the protobuf twin of `peek.rs`. `None` unless certain (no
/// metadata, a field twice, a string that is not UTF-8), and the caller then decodes as usual.
/// Empty strings (Go writes non-pointer strings even when empty) count as absent.
pub(crate) fn peek(message: &[u8]) -> Option<Peeked<'_>> {
    let meta = only_field(message, 1)?;
    let mut out = Peeked::default();
    let mut reader = Reader::new(meta);
    while let Some((n, value)) = reader.next().ok()? {
        let slot = match n {
            1 => &mut out.name,
            3 => &mut out.namespace,
            5 => &mut out.uid,
            6 => &mut out.resource_version,
            _ => continue,
        };
        let Wire::Bytes(bytes) = value else { return None };
        if slot.is_some() {
            return None;
        }
        *slot = Some(text(bytes)?).filter(|s| !s.is_empty());
    }
    Some(out)
}

/// The type and the object's identity of a watch event frame, read without decoding the
/// object (the protobuf twin of `peek::event_object`): the `WatchEvent`'s type, and [`peek`] of
/// the object inside its RawExtension and envelope. `None` unless certain.
pub(crate) fn event_peek(frame: &[u8]) -> Option<(&str, Option<Peeked<'_>>)> {
    let ty = text(only_field(frame, 1)?)?;
    if !matches!(ty, "ADDED" | "MODIFIED" | "DELETED") {
        return Some((ty, None));
    }
    let raw = only_field(only_field(frame, 2)?, 1)?;
    let envelope = pb::envelope(raw).ok()?;
    Some((ty, Some(peek(envelope.raw)?)))
}

/// The identity of an object that is well-formed protobuf (lenient, as `watch::identity` is
/// for JSON): whatever of the four could be read.
pub(crate) fn identity(message: &[u8]) -> Option<Identity> {
    let id = peek(message)?;
    let own = |s: Option<&str>| s.map(str::to_owned);
    Some(Identity {
        namespace: own(id.namespace),
        name: own(id.name),
        uid: own(id.uid),
        resource_version: own(id.resource_version),
    })
}

/// A `Status` body, if `body` is an enveloped protobuf one.
pub(crate) fn status(body: &[u8]) -> Option<StatusBody> {
    if !body.starts_with(MAGIC) {
        return None;
    }
    pb::object::<StatusBody>(body).ok()
}

/// Decodes one watch event frame (without its length): the protobuf twin of
/// `watch::watch_event`, with the same undecodable-object policy. With an object event comes its
/// enveloped object (`k8s\0` and `runtime.Unknown`, as a GET answers it): what a compact store
/// keeps, readable by [`object`].
pub(crate) fn watch_event<'a, K: DeserializeOwned>(
    frame: &'a [u8],
    skip: Option<&Node>,
) -> Result<(WatchEvent<K>, Option<&'a [u8]>), String> {
    let mut reader = Reader::new(frame);
    let (mut ty, mut object) = (None, None);
    while let Some((n, value)) = reader.next().map_err(|e| format!("watch event: {e}"))? {
        match (n, value) {
            (1, Wire::Bytes(b)) => ty = Some(b),
            (2, Wire::Bytes(b)) => object = Some(b),
            (1 | 2, _) => return Err(format!("watch event: field {n} is not length-delimited")),
            _ => {}
        }
    }
    let ty = ty.ok_or("watch event without \"type\"")?;
    let ty = text(ty).ok_or("watch event type is not UTF-8")?;
    let change = match ty {
        "ADDED" => Some(Change::Added),
        "MODIFIED" => Some(Change::Modified),
        "DELETED" => Some(Change::Deleted),
        "BOOKMARK" | "ERROR" => None,
        other => return Err(format!("unknown watch event type \"{}\"", snippet(other.as_bytes()))),
    };
    let object = object.ok_or("watch event without \"object\"")?;
    // A RawExtension: field 1 holds the enveloped object.
    let raw = only_field(object, 1).ok_or_else(|| format!("{ty} object: no raw bytes in the RawExtension"))?;
    let envelope = pb::envelope(raw).map_err(|e| format!("{ty} object: {e}"))?;
    match change {
        Some(change) => {
            let schema = schema::schema();
            let decoded = match schema.kind(envelope.api_version, envelope.kind) {
                Some(index) => {
                    let head = [("apiVersion", envelope.api_version), ("kind", envelope.kind)];
                    de::message(schema::schema(), index, envelope.raw, &head, skip).map_err(|e| e.to_string())
                }
                None => Err(format!(
                    "kind {:?} of apiVersion {:?} has no protobuf form known to this client",
                    envelope.kind, envelope.api_version
                )),
            };
            match decoded {
                Ok(obj) => Ok((
                    match change {
                        Change::Added => WatchEvent::Added(obj),
                        Change::Modified => WatchEvent::Modified(obj),
                        Change::Deleted => WatchEvent::Deleted(obj),
                    },
                    Some(raw),
                )),
                Err(message) => {
                    let message = format!("{ty} object: {message}");
                    // Well-formed protobuf with a name: an object this type cannot hold, not a
                    // broken frame.
                    match identity(envelope.raw) {
                        Some(id) if id.name.is_some() => {
                            Ok((WatchEvent::Undecodable { kind: change, id, message }, None))
                        }
                        _ => Err(message),
                    }
                }
            }
        }
        None if ty == "ERROR" => pb::object::<StatusBody>(raw)
            .map(|status| (WatchEvent::Error(status), None))
            .map_err(|e| format!("ERROR object: {e}")),
        None => bookmark(envelope.raw).map(|b| (b, None)),
    }
}

/// A list item (a bare message of the schema's message `index`) in the envelope a GET answer
/// carries (`k8s\0`, `runtime.Unknown` with the item's `apiVersion` and kind): how a compact
/// store keeps a protobuf object, readable by [`object`]. `None` when `index` is not a kind.
pub(crate) fn enveloped(index: usize, bytes: &[u8]) -> Option<Vec<u8>> {
    let (api_version, kind) = schema::schema().type_meta(index)?;
    Some(pb::en::envelope(api_version, kind, bytes))
}

/// A bookmark's object: only `metadata`, with the resourceVersion and, at the end of a streaming
/// list's initial events, the annotation `k8s.io/initial-events-end: "true"`.
fn bookmark<K>(message: &[u8]) -> Result<WatchEvent<K>, String> {
    let bad = |what: &str| format!("BOOKMARK object: {what}");
    let meta = only_field(message, 1).unwrap_or_default();
    let mut reader = Reader::new(meta);
    let (mut resource_version, mut initial_events_end) = (None, false);
    while let Some((n, value)) = reader.next().map_err(|e| bad(&e.to_string()))? {
        match (n, value) {
            (6, Wire::Bytes(b)) => resource_version = Some(text(b).ok_or_else(|| bad("resourceVersion is not UTF-8"))?),
            (12, Wire::Bytes(entry)) => {
                let (key, value) = (only_field(entry, 1), only_field(entry, 2));
                if key == Some(INITIAL_EVENTS_END.as_bytes()) {
                    initial_events_end = value == Some(b"true");
                }
            }
            _ => {}
        }
    }
    let resource_version = resource_version
        .filter(|rv| !rv.is_empty())
        .ok_or_else(|| "BOOKMARK without metadata.resourceVersion".to_owned())?;
    Ok(WatchEvent::Bookmark { resource_version: resource_version.to_owned(), initial_events_end })
}

/// Bound on the list's own small parts (its type, its `ListMeta`): far above what a server writes.
const MAX_LIST_PART: u64 = 64 * 1024;

/// Streams a protobuf list body: calls `on_item` with each item's message, in order, and returns
/// the list metadata. Holds at most one item of up to `max_item` bytes plus a read buffer; every
/// length the body announces is checked (against `max_item`, against what encloses it) before
/// anything is read for it. `kinds`: the apiVersion and kind of the items expected, the one asked
/// for first (the envelope must name one of them with `List` appended; a metadata-only list
/// expects `PartialObjectMetadata`, or the listed type from a server that ignored the `as=`
/// parameter).
pub(crate) fn list<R: Read, E>(
    reader: R,
    max_item: usize,
    kinds: &[(&str, &str)],
    mut on_item: impl FnMut(Item<'_>) -> Result<(), E>,
) -> Result<ListMeta, ListError<E>> {
    let mut s = Stream { r: BufReader::with_capacity(64 * 1024, reader), pos: 0, buf: Vec::new() };
    let mut magic = [0u8; 4];
    for byte in &mut magic {
        *byte = s.byte()?.ok_or_else(|| s.malformed("list body ends before the protobuf magic"))?;
    }
    if magic != MAGIC {
        return Err(ListError::Malformed {
            message: "list body does not start with the Kubernetes protobuf magic \"k8s\\0\"".into(),
            offset: 0,
            snippet: snippet(&magic),
        });
    }
    let mut meta = ListMeta::default();
    let mut items_of = None;
    let mut raw_seen = false;
    while let Some(key) = s.key_or_end()? {
        let (number, wire) = (key >> 3, key & 7);
        match (number, wire) {
            (1, 2) => {
                let len = s.len_within(MAX_LIST_PART, "the envelope's typeMeta")?;
                s.read(len)?;
                let mut tm = Reader::new(&s.buf);
                let (mut api_version, mut kind) = ("", "");
                while let Some((n, v)) = tm.next().map_err(|e| s.malformed(&format!("typeMeta: {e}")))? {
                    match (n, v) {
                        (1, Wire::Bytes(b)) => api_version = text(b).unwrap_or_default(),
                        (2, Wire::Bytes(b)) => kind = text(b).unwrap_or_default(),
                        _ => {}
                    }
                }
                let expected = |&(v, k): &(&str, &str)| v == api_version && kind.strip_suffix("List") == Some(k);
                if !kinds.iter().any(expected) {
                    let (v, k) = kinds.first().copied().unwrap_or_default();
                    return Err(s.malformed(&format!(
                        "a list of {kind:?} in {api_version:?}, not the \"{k}List\" in {v:?} asked for"
                    )));
                }
                let Some(index) = item_message(api_version, kind) else {
                    return Err(s.malformed(&format!(
                        "kind {kind:?} of {api_version:?} has no protobuf form known to this client"
                    )));
                };
                items_of = Some((index, item_types(api_version, kind, index)));
            }
            (2, 2) => {
                let Some((index, types)) = items_of else {
                    return Err(s.malformed("the list's message comes before the envelope's typeMeta"));
                };
                // Not bounded here: the body as a whole is (`Capped`), and nothing is read for it
                // at once; each part inside is bounded below.
                let len = s.varint()?;
                let end = s.pos.checked_add(len).ok_or_else(|| s.malformed("list message length overflows"))?;
                raw_seen = true;
                while s.pos < end {
                    let key = s.varint()?;
                    // What is left of the list after the key (a key may run past its end).
                    let left = end.checked_sub(s.pos).ok_or_else(|| s.malformed("a field runs past the list's end"))?;
                    match (key >> 3, key & 7) {
                        (1, 2) => {
                            let len = s.len_within(MAX_LIST_PART.min(left), "list metadata")?;
                            s.read(len)?;
                            meta = list_meta(&s.buf).map_err(|e| s.malformed(&e))?;
                        }
                        (2, 2) => {
                            let len = s.varint()?;
                            let left = end.saturating_sub(s.pos);
                            if len > left {
                                return Err(s.malformed(&format!("list item of {len} bytes runs past the list's end")));
                            }
                            if len > max_item as u64 {
                                return Err(s.malformed(&format!(
                                    "list item of {len} bytes, larger than {max_item} bytes (Config::max_line)"
                                )));
                            }
                            s.read(len)?;
                            let item =
                                Item { bytes: &s.buf, checked: false, form: Form::Protobuf { message: index, types } };
                            on_item(item).map_err(ListError::Item)?;
                        }
                        (_, wire) => s.skip(wire, left)?,
                    }
                }
                if s.pos != end {
                    return Err(s.malformed("a field runs past the list's end"));
                }
            }
            (3, 2) => {
                let len = s.len_within(MAX_LIST_PART, "the envelope's contentEncoding")?;
                if len > 0 {
                    s.read(len)?;
                    return Err(s.malformed("content encoding is not supported"));
                }
            }
            (_, wire) => s.skip(wire, u64::MAX)?,
        }
    }
    if !raw_seen {
        return Err(s.malformed("the envelope holds no list"));
    }
    Ok(meta)
}

/// `ListMeta`: `2` resourceVersion, `3` continue, `5` shardInfo {`1` selector}
/// (`4` remainingItemCount is not needed).
fn list_meta(bytes: &[u8]) -> Result<ListMeta, String> {
    let mut meta = ListMeta::default();
    let mut reader = Reader::new(bytes);
    while let Some((n, value)) = reader.next().map_err(|e| format!("list metadata: {e}"))? {
        let slot = match n {
            2 => &mut meta.resource_version,
            3 => &mut meta.continue_token,
            5 => {
                let Wire::Bytes(info) = value else { return Err("list metadata: shardInfo is not a message".into()) };
                let mut selector = String::new();
                let mut info = Reader::new(info);
                while let Some((n, value)) = info.next().map_err(|e| format!("list metadata: shardInfo: {e}"))? {
                    if let (1, Wire::Bytes(b)) = (n, value) {
                        selector = text(b).ok_or("list metadata: shardInfo.selector is not UTF-8")?.to_owned();
                    }
                }
                meta.shard_selector = Some(selector);
                continue;
            }
            _ => continue,
        };
        let Wire::Bytes(b) = value else { return Err(format!("list metadata: field {n} is not a string")) };
        let s = text(b).ok_or_else(|| format!("list metadata: field {n} is not UTF-8"))?;
        *slot = Some(s.to_owned()).filter(|s| !s.is_empty());
    }
    Ok(meta)
}

/// A forward-only protobuf reader over a body. Invariant: `pos` counts the bytes consumed;
/// `buf` holds the last part read whole, and grows only with bytes that arrived.
struct Stream<R> {
    r: BufReader<R>,
    pos: u64,
    buf: Vec<u8>,
}

impl<R: Read> Stream<R> {
    fn malformed<E>(&self, message: &str) -> ListError<E> {
        ListError::Malformed { message: message.to_owned(), offset: self.pos, snippet: snippet(&self.buf) }
    }

    fn byte<E>(&mut self) -> Result<Option<u8>, ListError<E>> {
        loop {
            match self.r.fill_buf() {
                Ok([]) => return Ok(None),
                Ok(available) => {
                    let b = available[0];
                    self.r.consume(1);
                    self.pos += 1;
                    return Ok(Some(b));
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(ListError::Io(e)),
            }
        }
    }

    fn truncated<E>(&self) -> ListError<E> {
        ListError::Io(io::Error::new(io::ErrorKind::UnexpectedEof, format!("list body ends at byte {}", self.pos)))
    }

    fn varint<E>(&mut self) -> Result<u64, ListError<E>> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?.ok_or_else(|| self.truncated())?;
            value |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(self.malformed("varint longer than 10 bytes"))
    }

    /// The next field's key, or `None` at the end of the body.
    fn key_or_end<E>(&mut self) -> Result<Option<u64>, ListError<E>> {
        match self.r.fill_buf() {
            Ok([]) => Ok(None),
            Ok(_) => self.varint().map(Some),
            Err(e) => Err(ListError::Io(e)),
        }
    }

    /// A length, at most `max`.
    fn len_within<E>(&mut self, max: u64, what: &str) -> Result<u64, ListError<E>> {
        let len = self.varint()?;
        if len > max {
            return Err(self.malformed(&format!("{what} of {len} bytes, more than the {max} allowed")));
        }
        Ok(len)
    }

    /// Reads `len` bytes (already bounded by the caller) into `buf`.
    fn read<E>(&mut self, len: u64) -> Result<(), ListError<E>> {
        self.buf.clear();
        let mut left = len;
        while left > 0 {
            let available = match self.r.fill_buf() {
                Ok([]) => return Err(self.truncated()),
                Ok(available) => available,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(ListError::Io(e)),
            };
            let n = available.len().min(usize::try_from(left).unwrap_or(usize::MAX));
            self.buf.extend_from_slice(&available[..n]);
            self.r.consume(n);
            self.pos += n as u64;
            left -= n as u64;
        }
        Ok(())
    }

    /// Skips a field of wire type `wire` whose key was read, within `left` bytes.
    fn skip<E>(&mut self, wire: u64, left: u64) -> Result<(), ListError<E>> {
        let len = match wire {
            0 => return self.varint().map(drop),
            1 => 8,
            5 => 4,
            2 => self.varint()?,
            other => return Err(self.malformed(&format!("wire type {other} is not supported"))),
        };
        if len > left {
            return Err(self.malformed(&format!("a field of {len} bytes runs past its message")));
        }
        let skipped = io::copy(&mut (&mut self.r).take(len), &mut io::sink()).map_err(ListError::Io)?;
        self.pos += skipped;
        if skipped < len {
            return Err(self.truncated());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;
    use serde_json::json;

    use super::*;

    use crate::codec::decode::http_error;
    // A length-delimited field, as the encoder writes it.
    use crate::codec::protobuf::en::bytes as field;

    /// A `WatchEvent` message around `object`'s protobuf form (written by the encoder the fake
    /// server uses: a value of the wrong type is written by its JSON type).
    fn event(ty: &str, object: &serde_json::Value) -> Vec<u8> {
        let mut extension = Vec::new();
        field(&mut extension, 1, &pb::encode_lenient(object).unwrap());
        let mut out = Vec::new();
        field(&mut out, 1, ty.as_bytes());
        field(&mut out, 2, &extension);
        out
    }

    /// The event of a frame, without its kept bytes.
    fn event_of<K: DeserializeOwned>(frame: &[u8]) -> Result<WatchEvent<K>, String> {
        watch_event(frame, None).map(|(event, _)| event)
    }

    fn cm(name: &str) -> serde_json::Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "n", "uid": "u1", "resourceVersion": "5"}, "data": {"k": "v"}})
    }

    /// What a compact store keeps of a protobuf object, from a list item or a watch event, is
    /// an enveloped object that its decoder (`decode::compact`) reads back as the object.
    #[test]
    fn kept_objects_are_enveloped_and_decode_back() {
        use crate::codec::decode::{Item, Kept, Raw, compact, kept};
        let bytes = |item: Item<'_>| match kept(Raw::item(item), None).unwrap() {
            Kept::Bytes(bytes) => bytes.into_owned(),
            Kept::Reencode(why) => panic!("{why}"),
        };
        let truth: ConfigMap = serde_json::from_value(cm("a")).unwrap();
        let message = pb::envelope(&pb::encode(&cm("a")).unwrap()).unwrap().raw.to_vec();
        let form = Form::Protobuf { message: item_message("v1", "ConfigMapList").unwrap(), types: None };
        let item = bytes(Item { bytes: &message, checked: false, form });
        assert!(item.starts_with(MAGIC), "{item:?}");
        assert_eq!(compact::<ConfigMap>(&item).unwrap(), truth);
        let frame = event("MODIFIED", &cm("a"));
        let (_, raw) = watch_event::<ConfigMap>(&frame, None).unwrap();
        assert_eq!(compact::<ConfigMap>(raw.unwrap()).unwrap(), truth);
        // JSON is kept as it came, and read back as JSON.
        let json = serde_json::to_vec(&cm("a")).unwrap();
        let item = bytes(Item { bytes: &json, checked: false, form: Form::Json });
        assert_eq!(item, json);
        assert_eq!(compact::<ConfigMap>(&item).unwrap(), truth);
        // Only object events keep bytes.
        let bookmark = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"resourceVersion": "7"}});
        assert!(watch_event::<ConfigMap>(&event("BOOKMARK", &bookmark), None).unwrap().1.is_none());
    }

    #[test]
    fn protobuf_events_decode_by_type() {
        let added: WatchEvent<ConfigMap> = event_of(&event("ADDED", &cm("a"))).unwrap();
        let WatchEvent::Added(a) = added else { panic!("{added:?}") };
        assert_eq!(a.metadata.name.as_deref(), Some("a"));
        assert_eq!(a.data.unwrap()["k"], "v");
        let bookmark = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"resourceVersion": "77", "annotations": {"k8s.io/initial-events-end": "true"}}});
        let b: WatchEvent<ConfigMap> = event_of(&event("BOOKMARK", &bookmark)).unwrap();
        assert!(
            matches!(b, WatchEvent::Bookmark { ref resource_version, initial_events_end: true } if resource_version == "77"),
            "{b:?}"
        );
        let plain = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"resourceVersion": "78"}});
        let b: WatchEvent<ConfigMap> = event_of(&event("BOOKMARK", &plain)).unwrap();
        assert!(matches!(b, WatchEvent::Bookmark { initial_events_end: false, .. }), "{b:?}");
        let no_rv = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}});
        assert!(event_of::<ConfigMap>(&event("BOOKMARK", &no_rv)).unwrap_err().contains("resourceVersion"));
    }

    #[test]
    fn an_in_stream_410_in_protobuf_is_the_same_api_error() {
        let status = json!({"apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Failure",
            "message": "too old resource version: 1 (5)", "reason": "Expired", "code": 410});
        let e: WatchEvent<ConfigMap> = event_of(&event("ERROR", &status)).unwrap();
        let WatchEvent::Error(status) = e else { panic!("not an error") };
        let api = status.into_api_error("watch configmaps");
        assert_eq!((api.code, api.reason.as_str(), api.in_stream), (410, "Expired", true));
        // The same Status as an HTTP error body.
        let body = pb::encode(&json!({"apiVersion": "v1", "kind": "Status", "status": "Failure",
            "message": "pods \"x\" not found", "reason": "NotFound", "code": 404}))
        .unwrap();
        let e = http_error("get pods", 404, &body, None);
        assert_eq!((e.code, e.reason.as_str(), e.message.as_str()), (404, "NotFound", "pods \"x\" not found"));
    }

    #[test]
    fn an_object_that_is_not_a_k_is_undecodable_only_with_a_name() {
        let mut bad = cm("a");
        bad["data"] = json!({"k": 5});
        let e: WatchEvent<ConfigMap> = event_of(&event("MODIFIED", &bad)).unwrap();
        let WatchEvent::Undecodable { kind, id, message } = e else { panic!("{e:?}") };
        assert_eq!(kind, Change::Modified);
        assert_eq!((id.name.as_deref(), id.namespace.as_deref()), (Some("a"), Some("n")));
        assert_eq!((id.uid.as_deref(), id.resource_version.as_deref()), (Some("u1"), Some("5")));
        assert!(message.starts_with("MODIFIED object: "), "{message}");
        bad["metadata"] = json!({"namespace": "n"});
        assert!(event_of::<ConfigMap>(&event("ADDED", &bad)).is_err());
        let weird = event_of::<ConfigMap>(&event("WEIRD", &cm("a"))).unwrap_err();
        assert!(weird.contains("unknown watch event type"), "{weird}");
        assert!(event_of::<ConfigMap>(b"\x0a\x05ADDED").unwrap_err().contains("without \"object\""));
        assert!(event_of::<ConfigMap>(b"\xff").is_err());
    }

    /// Found by tests/integration/decode.rs: a key whose varint runs past the end of the list's message.
    #[test]
    fn a_key_that_runs_past_the_lists_end_is_malformed_not_a_panic() {
        let mut body = MAGIC.to_vec();
        field(&mut body, 1, b"\x0a\x02v1\x12\x07PodList");
        body.extend_from_slice(&[0x12, 0x01, 0x80, 0x01]); // raw of 1 byte: a 2-byte key
        let e = list(&body[..], 1024, &[("v1", "Pod")], |_| Ok::<(), ()>(())).unwrap_err();
        assert!(matches!(&e, ListError::Malformed { message, .. } if message.contains("past the list's end")), "{e:?}");
    }

    fn partial(name: &str) -> serde_json::Value {
        json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
            "metadata": {"name": name, "namespace": "n", "uid": "u1", "resourceVersion": "5", "generation": 2,
                "labels": {"app": "web"}, "creationTimestamp": "2024-05-01T10:00:00Z",
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "u0", "controller": true}]}})
    }

    /// A metadata-only list, get and watch event in protobuf read as the same
    /// `PartialObjectMetadata` as their JSON, apiVersion and kind included (a list item's message
    /// has no room for them: they are the ones its JSON form carries).
    #[test]
    fn metadata_only_answers_read_as_their_json() {
        use crate::codec::decode::{Scratch, item as decode_item, peek_item};
        use crate::resource::PartialObjectMetadata;
        type Meta = PartialObjectMetadata<ConfigMap>;
        let truth: Meta = serde_json::from_value(partial("a")).unwrap();
        assert!(truth.types.is_some());
        let body = pb::encode(&json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadataList",
            "metadata": {"resourceVersion": "9", "continue": "c"}, "items": [partial("a"), partial("b")]}))
        .unwrap();
        let mut got = Vec::new();
        let kinds = [PARTIAL_OBJECT_METADATA, ("example.com/v1", "Widget")];
        let meta = list(&body[..], 1 << 20, &kinds, |item| -> Result<(), String> {
            let id = peek_item(item).unwrap();
            assert_eq!((id.uid, id.resource_version), (Some("u1"), Some("5")));
            got.push(decode_item::<Meta>(item, &mut Scratch::default(), None)?);
            Ok(())
        })
        .unwrap();
        assert_eq!((meta.resource_version.as_deref(), meta.continue_token.as_deref()), (Some("9"), Some("c")));
        assert_eq!(got, [truth.clone(), serde_json::from_value(partial("b")).unwrap()]);
        // A get, and a watch event with its bookmark.
        assert_eq!(object::<Meta>(&pb::encode(&partial("a")).unwrap()).unwrap(), truth);
        let e = event_of::<Meta>(&event("MODIFIED", &partial("a"))).unwrap();
        assert!(matches!(&e, WatchEvent::Modified(m) if *m == truth), "{e:?}");
        let mark = json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata", "metadata": {"resourceVersion": "12"}});
        let b = event_of::<Meta>(&event("BOOKMARK", &mark)).unwrap();
        assert!(matches!(b, WatchEvent::Bookmark { ref resource_version, .. } if resource_version == "12"), "{b:?}");
        // A list of another kind than those expected is refused, naming the one asked for.
        let cms = pb::encode(&json!({"apiVersion": "v1", "kind": "ConfigMapList", "metadata": {}, "items": [cm("a")]}))
            .unwrap();
        let e = list(&cms[..], 1 << 20, &kinds, |_| Ok::<(), ()>(())).unwrap_err();
        assert!(
            matches!(&e, ListError::Malformed { message, .. }
                if message.contains(r#"not the "PartialObjectMetadataList" in "meta.k8s.io/v1" asked for"#)),
            "{e:?}"
        );
        // The full list, from a server that ignored `as=`: its items read as metadata.
        let mut names = Vec::new();
        list(&cms[..], 1 << 20, &[PARTIAL_OBJECT_METADATA, ("v1", "ConfigMap")], |item| -> Result<(), String> {
            let m = decode_item::<Meta>(item, &mut Scratch::default(), None)?;
            names.push((m.metadata.name, m.types));
            Ok(())
        })
        .unwrap();
        assert_eq!(names, [(Some("a".to_owned()), None)]);
    }

    #[test]
    fn the_identity_is_read_off_the_metadata_and_only_when_certain() {
        let raw = |v: &serde_json::Value| pb::envelope(&pb::encode(v).unwrap()).unwrap().raw.to_vec();
        let msg = raw(&cm("a"));
        let id = peek(&msg).unwrap();
        assert_eq!((id.name, id.namespace, id.uid, id.resource_version), (Some("a"), Some("n"), Some("u1"), Some("5")));
        // A second metadata: a decoder would merge the two; the peek does not guess.
        let mut twice = msg.clone();
        twice.extend_from_slice(&msg);
        assert_eq!(peek(&twice), None);
        assert_eq!(peek(b"\x0a\x05\x0a\x03"), None, "truncated metadata");
    }
}
