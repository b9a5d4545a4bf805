//! Bytes → list items, watch events and `Status` errors; names the bad line and its first bytes.
//!
//! Lists are decoded as they stream in: a small scanner walks the top-level object and hands each
//! element of `items` to the caller as a byte slice, so at most one item (plus one read buffer) is
//! held, whatever the page size. Watch lines are split on `\n` with a bounded length, the envelope
//! is parsed with the object kept as a raw slice, and the object is decoded by event type.

mod frame;
mod line;
mod list;
mod object;
mod peek;
mod proto;
mod status;
mod watch;

pub(crate) use frame::{FRAME_HEADER, Frame, read_frame};
pub(crate) use line::{Line, read_line};
pub(crate) use list::{Form, Item, ListError, ListMeta, list};
pub(crate) use object::{Scratch, decode_error};
pub(crate) use peek::Peeked;
#[cfg(feature = "fuzzing")]
pub(crate) use peek::identity as peek;
pub(crate) use proto::{
    PARTIAL_OBJECT_METADATA, has_form as has_protobuf_form, list as protobuf_list, object as protobuf_object,
};
pub(crate) use watch::{Change, Identity, WatchEvent, identity, watch_event};

use std::borrow::Cow;

use crate::codec::skip::Node;
use status::StatusBody;

use crate::shard::Shard;

/// The protobuf media type (docs/protocol.md §12).
pub(crate) const MEDIA_PROTOBUF: &str = "application/vnd.kubernetes.protobuf";

/// The encoding of a body or a watch stream, told by its `Content-Type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Encoding {
    Json,
    Protobuf,
}

impl Encoding {
    /// The encoding of an answer with this `Content-Type` (parameters such as `;stream=watch`
    /// ignored): protobuf for `application/vnd.kubernetes.protobuf`, JSON otherwise.
    pub(crate) fn of_content_type(content_type: &str) -> Encoding {
        let media = content_type.split(';').next().unwrap_or_default().trim();
        if media.eq_ignore_ascii_case(MEDIA_PROTOBUF) { Encoding::Protobuf } else { Encoding::Json }
    }
}

/// Who a list item is, read off its bytes without decoding it (`peek.rs`, or its protobuf twin
/// in `proto.rs`); `None` unless certain.
pub(crate) fn peek_item(item: Item<'_>) -> Option<Peeked<'_>> {
    match item.form {
        Form::Json => peek::identity(item.bytes),
        Form::Protobuf { .. } => proto::peek(item.bytes),
    }
}

/// Who the object of an `ADDED` watch event is (a JSON line or a protobuf frame, in
/// `encoding`), read off its bytes as [`peek_item`] reads a list item's: a streaming list's
/// initial events are its items, which a relist need not decode again when the store holds them
/// at that version. `None` for any other event, and unless certain.
pub(crate) fn added_identity(encoding: Encoding, bytes: &[u8]) -> Option<Peeked<'_>> {
    match encoding {
        Encoding::Json => match peek::event_object(bytes)? {
            (b"ADDED", object) => peek::identity(object),
            _ => None,
        },
        Encoding::Protobuf => match proto::event_peek(bytes)? {
            ("ADDED", id) => id,
            _ => None,
        },
    }
}

/// Whether a list item belongs to `shard`, read off its bytes before any decode (the uid or
/// namespace, by `peek.rs` or its protobuf twin). When the peek is not certain, a JSON item is
/// parsed leniently for the field; an item that cannot be read at all is kept, for the
/// decoder to report.
pub(crate) fn item_in_shard(item: Item<'_>, shard: &Shard) -> bool {
    match peek_item(item) {
        Some(id) => peeked_in_shard(&id, shard),
        None => match item.form {
            Form::Json => json_in_shard(item.bytes, &[], shard),
            Form::Protobuf { .. } => true,
        },
    }
}

/// A watch event of another shard's object, which a sharded watcher drops unread (see
/// [`event_outside_shard`]); all that is kept of it is the resourceVersion it carries (`None`
/// when none could be read), which the watch has moved past (docs/protocol.md §14.4).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Outside<'a> {
    pub(crate) resource_version: Option<Cow<'a, str>>,
}

/// Whether a watch event (a JSON line or a protobuf frame, in `encoding`) is dropped by
/// `shard`: `Some` for an object event whose object's uid or namespace the shard does not hold;
/// `None` (kept) for the shard's own objects and every bookmark and error. Read off the bytes
/// before any decode; what cannot be read is kept, for the decoder to report.
pub(crate) fn event_outside_shard<'a>(encoding: Encoding, bytes: &'a [u8], shard: &Shard) -> Option<Outside<'a>> {
    let object_event = |ty: &[u8]| matches!(ty, b"ADDED" | b"MODIFIED" | b"DELETED");
    let peeked = |id: Peeked<'a>| {
        (!peeked_in_shard(&id, shard)).then(|| Outside { resource_version: id.resource_version.map(Cow::Borrowed) })
    };
    match encoding {
        Encoding::Json => match peek::event_object(bytes) {
            Some((ty, _)) if !object_event(ty) => None,
            Some((_, object)) => match peek::identity(object) {
                Some(id) => peeked(id),
                None => json_outside_shard(bytes, &["object"], shard),
            },
            None => json_outside_shard(bytes, &["object"], shard),
        },
        Encoding::Protobuf => match proto::event_peek(bytes) {
            Some((_, Some(id))) => peeked(id),
            Some((_, None)) | None => None,
        },
    }
}

fn peeked_in_shard(id: &Peeked<'_>, shard: &Shard) -> bool {
    let value = if shard.is_by_namespace() { id.namespace } else { id.uid };
    shard.contains(value.unwrap_or_default())
}

/// The lenient path of the shard's test, for JSON the peek was not certain of: the whole
/// value parsed, the object found under `path`, and its uid or namespace (missing: empty, as
/// the server reads it). Not JSON, or not an object event: kept.
fn json_in_shard(bytes: &[u8], path: &[&str], shard: &Shard) -> bool {
    json_outside_shard(bytes, path, shard).is_none()
}

/// [`json_in_shard`], with the resourceVersion of an object it drops.
fn json_outside_shard<'a>(bytes: &[u8], path: &[&str], shard: &Shard) -> Option<Outside<'a>> {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(bytes) else { return None };
    if !path.is_empty() && !matches!(value.get("type").and_then(|t| t.as_str()), Some("ADDED" | "MODIFIED" | "DELETED"))
    {
        return None;
    }
    let meta = path.iter().try_fold(&value, |v, key| v.get(key)).and_then(|o| o.get("metadata"));
    let field = |name: &str| meta.and_then(|m| m.get(name)).and_then(|v| v.as_str());
    let found = field(if shard.is_by_namespace() { "namespace" } else { "uid" });
    (!shard.contains(found.unwrap_or_default()))
        .then(|| Outside { resource_version: field("resourceVersion").map(|rv| Cow::Owned(rv.to_owned())) })
}

/// Who a list item is that did not decode (lenient; see [`identity`]).
pub(crate) fn item_identity(item: Item<'_>) -> Option<Identity> {
    match item.form {
        Form::Json => identity(item.bytes),
        Form::Protobuf { .. } => proto::identity(item.bytes),
    }
}

/// Decodes one watch event of a stream in `encoding`: a JSON line, or a protobuf frame's message.
/// With `keep_raw` (compact store modes), an object event also returns its object's bytes: the
/// JSON object, or the enveloped protobuf one (see [`compact`]). The object's fields named by
/// `skip` are stepped over, not decoded (`codec/skip`); the kept bytes still hold them.
pub(crate) fn event<'a, K: serde::de::DeserializeOwned>(
    encoding: Encoding,
    bytes: &'a [u8],
    keep_raw: bool,
    scratch: &mut Scratch,
    skip: Option<&Node>,
) -> Result<(WatchEvent<K>, Option<&'a [u8]>), String> {
    match encoding {
        Encoding::Json => watch_event(bytes, keep_raw, scratch, skip),
        Encoding::Protobuf => proto::watch_event(bytes, skip).map(|(e, raw)| (e, raw.filter(|_| keep_raw))),
    }
}

/// Decodes one list item, in its form, stepping over the fields of `skip`.
pub(crate) fn item<K: serde::de::DeserializeOwned>(
    item: Item<'_>,
    scratch: &mut Scratch,
    skip: Option<&Node>,
) -> Result<K, String> {
    match item.form {
        Form::Json => object::json(item.bytes, item.checked, scratch, skip),
        Form::Protobuf { message, types } => proto::item(message, types, item.bytes, skip),
    }
}

/// Decodes one JSON object (a GET answer).
pub(crate) fn object<K: serde::de::DeserializeOwned>(bytes: &[u8], scratch: &mut Scratch) -> Result<K, String> {
    object::json(bytes, false, scratch, None)
}

/// An object's bytes as they came off the wire, in its form.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Raw<'a> {
    /// A JSON object.
    Json(&'a [u8]),
    /// A list item's bare protobuf message, of the schema's message `index`.
    Message { index: usize, bytes: &'a [u8] },
    /// A protobuf object in its envelope (`k8s\0`, `runtime.Unknown`), as a watch event carries it.
    Enveloped(&'a [u8]),
}

impl<'a> Raw<'a> {
    /// A list item's bytes.
    pub(crate) fn item(item: Item<'a>) -> Self {
        match item.form {
            Form::Json => Raw::Json(item.bytes),
            Form::Protobuf { message, .. } => Raw::Message { index: message, bytes: item.bytes },
        }
    }

    /// A watch event's object bytes, read from a stream in `encoding`.
    pub(crate) fn event(encoding: Encoding, bytes: &'a [u8]) -> Self {
        match encoding {
            Encoding::Json => Raw::Json(bytes),
            Encoding::Protobuf => Raw::Enveloped(bytes),
        }
    }

    /// The bytes, as they came (for errors).
    pub(crate) fn bytes(self) -> &'a [u8] {
        match self {
            Raw::Json(bytes) | Raw::Message { bytes, .. } | Raw::Enveloped(bytes) => bytes,
        }
    }
}

/// The bytes a compact store keeps of an object.
#[derive(Debug)]
pub(crate) enum Kept<'a> {
    /// These bytes, readable by [`compact`]: the JSON as it is, or a protobuf object in the
    /// envelope a GET answer carries, without the skipped fields.
    Bytes(Cow<'a, [u8]>),
    /// The bytes cannot show the object as it was decoded: the caller keeps it re-encoded (why).
    Reencode(&'static str),
}

/// The bytes a compact store keeps of an object that came as `raw` and was decoded stepping
/// over the fields of `skip`: the wire's bytes without those fields (`codec/protobuf/prune.rs` for
/// protobuf), so that they decode ([`compact`]) to the object as it was decoded. JSON whose
/// fields are skipped is re-encoded by the caller. `Err` names what in the bytes could not be
/// read.
pub(crate) fn kept<'a>(raw: Raw<'a>, skip: Option<&Node>) -> Result<Kept<'a>, String> {
    let pruned = match (raw, skip) {
        (Raw::Json(bytes) | Raw::Enveloped(bytes), None) => return Ok(Kept::Bytes(Cow::Borrowed(bytes))),
        (Raw::Message { index, bytes }, None) => {
            return Ok(match proto::enveloped(index, bytes) {
                Some(enveloped) => Kept::Bytes(Cow::Owned(enveloped)),
                None => Kept::Reencode("not a kind of the protobuf schema table"),
            });
        }
        (Raw::Json(_), Some(_)) => return Ok(Kept::Reencode("JSON whose fields are skipped")),
        (Raw::Enveloped(bytes), Some(node)) => crate::codec::protobuf::prune::enveloped(bytes, node)?,
        (Raw::Message { index, bytes }, Some(node)) => {
            match crate::codec::protobuf::schema::schema().type_meta(index) {
                Some(types) => crate::codec::protobuf::prune::message(index, types, bytes, node)?,
                None => return Ok(Kept::Reencode("not a kind of the protobuf schema table")),
            }
        }
    };
    Ok(match pruned {
        crate::codec::protobuf::prune::Pruned::Bytes(bytes) => Kept::Bytes(Cow::Owned(bytes)),
        crate::codec::protobuf::prune::Pruned::Unfit(why) => Kept::Reencode(why),
    })
}

/// Decodes a compact store entry: an enveloped protobuf object (it starts with the magic
/// `k8s\0`, which JSON cannot) or JSON. A fresh scratch: entries are decoded on readers' threads.
pub(crate) fn compact<K: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<K, String> {
    if bytes.starts_with(crate::codec::protobuf::MAGIC) {
        proto::object(bytes)
    } else {
        object::json(bytes, false, &mut Scratch::default(), None)
    }
}

/// Classifies an HTTP error answer (see `status::http_error`), its body read as a protobuf
/// `Status` (docs/protocol.md §12.2) when the server answered in protobuf, else as JSON.
pub(crate) fn http_error(
    context: &str,
    code: u16,
    body: &[u8],
    retry_after: Option<std::time::Duration>,
) -> crate::error::ApiError {
    let status = proto::status(body).or_else(|| serde_json::from_slice::<StatusBody>(body).ok());
    status::http_error(context, code, status, body, retry_after)
}

#[cfg(test)]
mod tests {
    use super::status::StatusBody;
    use super::watch::{watch_event_json, watch_event_plain};
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use std::io::{self, Read};
    use std::time::Duration;

    /// Decodes with the build's decoder, and checks the serde_json-only path agrees.
    fn ev(line: &[u8]) -> Result<WatchEvent<ConfigMap>, String> {
        let plain = watch_event_plain::<ConfigMap>(line, false).map(|_| ());
        let got = watch_event(line, false, &mut Scratch::default(), None).map(|(e, _)| e);
        assert_eq!(plain.is_ok(), got.is_ok(), "serde_json and the build's decoder disagree");
        got
    }

    #[test]
    fn raw_object_bytes_are_kept_on_request() {
        let line = br#"{"type":"ADDED","object":{"metadata":{"name":"a"}}}"#;
        let (e, raw) = watch_event::<ConfigMap>(line, true, &mut Scratch::default(), None).unwrap();
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
    fn a_malformed_item_is_handed_over_whole_and_unchecked() {
        // The second item is not valid JSON (`tru`, a leading zero), its brackets are: it is
        // handed over whole, marked unchecked (its decode checks it, a relist that holds its
        // identity unchanged never reads it: peek.rs), and the item after it is found all the
        // same, also when the body comes 3 bytes at a time.
        let body = br#"{"items":[{"metadata":{"name":"a"},"x":"}]\"{"},{"metadata":{"name":"b"},"x":[tru,01]},
            {"metadata":{"name":"c\\"}}],"metadata":{"resourceVersion":"9"}}"#;
        for read in [3, 1 << 16] {
            let mut got = Vec::new();
            list(Chunks(body, read), 1000, |item| -> Result<(), ()> {
                got.push((String::from_utf8(item.bytes.to_vec()).unwrap(), item.checked));
                Ok(())
            })
            .unwrap();
            let want = [
                (r#"{"metadata":{"name":"a"},"x":"}]\"{"}"#, true),
                (r#"{"metadata":{"name":"b"},"x":[tru,01]}"#, false),
                (r#"{"metadata":{"name":"c\\"}}"#, true),
            ];
            assert_eq!(got, want.map(|(s, c)| (s.to_owned(), c)), "reads of {read}");
        }
    }

    #[test]
    fn html_is_malformed_with_a_snippet() {
        let err = names(b"<html>bad gateway</html>", 100).unwrap_err();
        assert!(err.contains("<html>"), "{err}");
    }

    /// A reader that hands its bytes over `.1` at a time.
    struct Chunks<'a>(&'a [u8], usize);

    impl Read for Chunks<'_> {
        fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
            let n = self.0.len().min(self.1).min(out.len());
            out[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Ok(n)
        }
    }

    #[test]
    fn items_split_across_reads_are_reassembled() {
        let body =
            br#"{"items":[{"metadata":{"name":"a\"b"}},{"metadata":{"name":"c"}}],"metadata":{"resourceVersion":"9"}}"#;
        let mut got = Vec::new();
        list(Chunks(body, 3), 1000, |item| -> Result<(), ()> {
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
            let (event, _) = watch_event::<ConfigMap>(line, keep_raw, &mut Scratch::default(), None).unwrap();
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
            None,
        )
        .map(|e| e.0)
        .unwrap_err();
        assert!(err.starts_with("MODIFIED object: invalid type"), "{err}");
    }

    #[test]
    fn trailing_garbage_and_missing_fields_are_errors() {
        assert!(
            watch_event::<ConfigMap>(br#"{"type":"ADDED","object":{}} x"#, false, &mut Scratch::default(), None)
                .map(|e| e.0)
                .is_err()
        );
        assert!(
            watch_event::<ConfigMap>(br#"{"type":"ADDED"}"#, false, &mut Scratch::default(), None)
                .map(|e| e.0)
                .unwrap_err()
                .contains("without \"object\"")
        );
        assert!(
            watch_event::<ConfigMap>(br#"{"object":{}}"#, false, &mut Scratch::default(), None)
                .map(|e| e.0)
                .unwrap_err()
                .contains("without \"type\"")
        );
        assert!(watch_event::<ConfigMap>(b"<html>", false, &mut Scratch::default(), None).map(|e| e.0).is_err());
    }

    #[test]
    fn a_syntax_error_inside_the_object_fails_the_line_in_both_paths() {
        let line = br#"{"type":"DELETED","object":{"metadata":{"name":"a","reso","object":{"metadata":{"name":"a"}}}"#;
        for keep_raw in [false, true] {
            assert!(
                watch_event::<ConfigMap>(line, keep_raw, &mut Scratch::default(), None).is_err(),
                "keep_raw={keep_raw}"
            );
            assert!(watch_event_json::<ConfigMap>(line, keep_raw).is_err(), "keep_raw={keep_raw}");
        }
        let twice = br#"{"type":"ADDED","object":{},"object":{}}"#;
        assert!(watch_event::<ConfigMap>(twice, false, &mut Scratch::default(), None).is_err());
    }

    #[test]
    fn a_raw_control_byte_between_tokens_is_rejected_by_every_decoder() {
        let line = b"{\"type\":\"ERROR\",\"object\":{\"code\":4\x0810,\"reason\":\"Expired\"}}";
        assert!(watch_event::<ConfigMap>(line, false, &mut Scratch::default(), None).is_err());
        assert!(watch_event_json::<ConfigMap>(line, false).is_err());
        assert!(object::<StatusBody>(br#"{"code":4"#, &mut Scratch::default()).is_err());
        assert!(object::<StatusBody>(b"{\"code\":4\x0810}", &mut Scratch::default()).is_err());
    }

    #[test]
    fn unknown_event_types_are_errors() {
        let err = watch_event::<ConfigMap>(br#"{"type":"WEIRD","object":{}}"#, false, &mut Scratch::default(), None)
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

    /// A read timeout inside a line used to keep only the bytes after it.
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

    mod shards {
        use super::*;
        use crate::codec::protobuf::{self as pb, en};
        use serde_json::json;

        fn pod(uid: &str, ns: &str) -> serde_json::Value {
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": uid, "namespace": ns, "uid": uid, "resourceVersion": "1"}})
        }

        /// A uid in shard 0 of 2 and one in shard 1, found by the rule itself.
        fn uids(shard: &Shard) -> (String, String) {
            let mut ours = None;
            let mut theirs = None;
            for n in 0.. {
                let uid = format!("uid-{n}");
                match shard.contains(&uid) {
                    true => ours = ours.or(Some(uid)),
                    false => theirs = theirs.or(Some(uid)),
                }
                if let (Some(a), Some(b)) = (&ours, &theirs) {
                    return (a.clone(), b.clone());
                }
            }
            unreachable!()
        }

        fn frame(ty: &str, object: &serde_json::Value) -> Vec<u8> {
            let mut raw_ext = Vec::new();
            en::bytes(&mut raw_ext, 1, &pb::encode(object).unwrap());
            let mut out = Vec::new();
            en::bytes(&mut out, 1, ty.as_bytes());
            en::bytes(&mut out, 2, &raw_ext);
            out
        }

        #[test]
        fn list_items_of_other_shards_are_told_in_both_forms() {
            let shard = Shard::of(0, 2).unwrap();
            let (ours, theirs) = uids(&shard);
            let body = json!({"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "5"},
                "items": [pod(&ours, "a"), pod(&theirs, "a")]});
            let mut kept = Vec::new();
            let bytes = serde_json::to_vec(&body).unwrap();
            list(&bytes[..], 1 << 20, |item| -> Result<(), ()> {
                kept.push(item_in_shard(item, &shard));
                Ok(())
            })
            .unwrap();
            assert_eq!(kept, [true, false]);
            let proto = pb::encode(&body).unwrap();
            kept.clear();
            protobuf_list(&proto[..], 1 << 20, &[("v1", "Pod")], |item| -> Result<(), ()> {
                kept.push(item_in_shard(item, &shard));
                Ok(())
            })
            .unwrap();
            assert_eq!(kept, [true, false]);
            // An escape in the uid: the peek is not certain, the lenient path decides.
            let escaped = format!(r#"{{"metadata":{{"uid":"{}"}}}}"#, theirs.replace('-', "\\u002d"));
            let item = Item { bytes: escaped.as_bytes(), checked: false, form: Form::Json };
            assert!(peek_item(item).is_none());
            assert!(!item_in_shard(item, &shard));
        }

        #[test]
        fn by_namespace_reads_the_namespace_and_cluster_scoped_objects_hash_the_empty_string() {
            let empty = u128::from(Shard::hash(""));
            let shard = Shard::from_ranges([(empty, empty + 1)]).unwrap().by_namespace();
            let item = |v: &serde_json::Value| serde_json::to_vec(v).unwrap();
            let node = item(&json!({"metadata": {"name": "n1", "uid": "u"}}));
            assert!(item_in_shard(Item { bytes: &node, checked: false, form: Form::Json }, &shard));
            let pod = item(&pod("u", "apps"));
            assert!(!item_in_shard(Item { bytes: &pod, checked: false, form: Form::Json }, &shard));
        }

        #[test]
        fn watch_events_of_other_shards_are_told_with_their_version_and_bookmarks_and_errors_kept() {
            let shard = Shard::of(1, 2).unwrap();
            let (ours, theirs) = uids(&shard);
            let kept = |encoding, bytes: &[u8]| event_outside_shard(encoding, bytes, &shard).is_none();
            for (uid, want) in [(&ours, true), (&theirs, false)] {
                for ty in ["ADDED", "MODIFIED", "DELETED"] {
                    let line = serde_json::to_vec(&json!({"type": ty, "object": pod(uid, "a")})).unwrap();
                    assert_eq!(kept(Encoding::Json, &line), want, "{ty} json");
                    let reordered = serde_json::to_vec(&json!({"object": pod(uid, "a"), "type": ty})).unwrap();
                    assert_eq!(kept(Encoding::Json, &reordered), want, "{ty} json, type last");
                    assert_eq!(kept(Encoding::Protobuf, &frame(ty, &pod(uid, "a"))), want, "{ty} pb");
                }
            }
            // A dropped event still tells how far the watch came: its object's resourceVersion.
            let at = |rv: &'static str| Some(Outside { resource_version: Some(Cow::Borrowed(rv)) });
            let line = serde_json::to_vec(&json!({"type": "MODIFIED", "object": pod(&theirs, "a")})).unwrap();
            assert_eq!(event_outside_shard(Encoding::Json, &line, &shard), at("1"));
            let frame_bytes = frame("DELETED", &pod(&theirs, "a"));
            assert_eq!(event_outside_shard(Encoding::Protobuf, &frame_bytes, &shard), at("1"));
            // The lenient path (an escape in the uid) reads it too; none written: none told.
            let escaped = format!(
                r#"{{"type":"ADDED","object":{{"metadata":{{"uid":"{}","resourceVersion":"7"}}}}}}"#,
                theirs.replace('-', "\\u002d")
            );
            assert_eq!(event_outside_shard(Encoding::Json, escaped.as_bytes(), &shard), at("7"));
            let bare = format!(r#"{{"type":"ADDED","object":{{"metadata":{{"uid":"{theirs}"}}}}}}"#);
            assert_eq!(
                event_outside_shard(Encoding::Json, bare.as_bytes(), &shard),
                Some(Outside { resource_version: None })
            );
            let bookmark =
                br#"{"type":"BOOKMARK","object":{"kind":"Pod","apiVersion":"v1","metadata":{"resourceVersion":"9"}}}"#;
            assert!(kept(Encoding::Json, bookmark));
            let error = br#"{"type":"ERROR","object":{"kind":"Status","code":410}}"#;
            assert!(kept(Encoding::Json, error));
            let pb_bookmark =
                frame("BOOKMARK", &json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"resourceVersion": "9"}}));
            assert!(kept(Encoding::Protobuf, &pb_bookmark));
            // Not readable: kept, for the decoder to report.
            assert!(kept(Encoding::Json, b"{not json"));
        }

        #[test]
        fn list_metadata_carries_the_shard_info_in_both_forms() {
            let selector = Shard::of(0, 2).unwrap().selector();
            let body = json!({"kind": "PodList", "apiVersion": "v1",
                "metadata": {"resourceVersion": "5", "shardInfo": {"selector": selector}}, "items": []});
            let json_meta =
                list(&serde_json::to_vec(&body).unwrap()[..], 1 << 20, |_| -> Result<(), ()> { Ok(()) }).unwrap();
            assert_eq!(json_meta.shard_selector.as_deref(), Some(selector.as_str()));
            let proto = pb::encode(&body).unwrap();
            let pb_meta =
                protobuf_list(&proto[..], 1 << 20, &[("v1", "Pod")], |_| -> Result<(), ()> { Ok(()) }).unwrap();
            assert_eq!(pb_meta, json_meta);
            let none =
                json!({"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "5"}, "items": []});
            let meta =
                list(&serde_json::to_vec(&none).unwrap()[..], 1 << 20, |_| -> Result<(), ()> { Ok(()) }).unwrap();
            assert_eq!(meta.shard_selector, None);
        }
    }

    /// Skipped fields (`codec/skip`) through every decoder: JSON objects and watch lines (simd-json
    /// where built, and serde_json), protobuf list items and watch frames.
    mod skipping {
        use super::*;
        use crate::codec::protobuf::{self as pb, en};
        use crate::codec::skip::{Paths, clear};
        use k8s_openapi::api::core::v1::Pod;

        fn pod() -> serde_json::Value {
            serde_json::json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {
                    "name": "a", "namespace": "n", "uid": "u", "resourceVersion": "7",
                    "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{\"big\":1}", "keep": "me"},
                    "managedFields": [{"manager": "kubectl", "operation": "Apply", "fieldsV1": {"f:spec": {}}}],
                    "labels": {"app": "web"}
                },
                "spec": {"containers": [
                    {"name": "c1", "image": "i", "env": [{"name": "A", "value": "1"}]},
                    {"name": "c2", "image": "j", "env": [{"name": "B", "value": "2"}]}
                ]},
                "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
            })
        }

        fn paths(list: &[&str]) -> Paths {
            Paths::new::<Pod>(&list.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap()
        }

        /// `text` (a Pod's JSON) decoded skipping `node` by each JSON path.
        fn json_paths(text: &str, node: Option<&Node>) -> Vec<Result<Pod, String>> {
            let line = format!(r#"{{"type":"ADDED","object":{text}}}"#);
            let event = |keep_raw| {
                watch_event::<Pod>(line.as_bytes(), keep_raw, &mut Scratch::default(), node).and_then(
                    |(e, raw)| match e {
                        WatchEvent::Added(pod) => {
                            if keep_raw {
                                assert_eq!(raw, Some(text.as_bytes()), "the kept bytes are the object as it came");
                            }
                            Ok(pod)
                        }
                        WatchEvent::Undecodable { message, .. } => Err(message),
                        other => panic!("{other:?}"),
                    },
                )
            };
            vec![object::json::<Pod>(text.as_bytes(), false, &mut Scratch::default(), node), event(false), event(true)]
        }

        /// `value` (a Pod) in protobuf, decoded skipping `node` as a list item and a watch event.
        fn protobuf_paths(value: &serde_json::Value, node: Option<&Node>) -> Vec<Result<Pod, String>> {
            let body = pb::encode(value).unwrap();
            let envelope = pb::envelope(&body).unwrap();
            let index = crate::codec::protobuf::schema::schema().kind("v1", "Pod").unwrap();
            let item = proto::item::<Pod>(index, None, envelope.raw, node);
            let mut raw_ext = Vec::new();
            en::bytes(&mut raw_ext, 1, &body);
            let mut frame = Vec::new();
            en::bytes(&mut frame, 1, b"MODIFIED");
            en::bytes(&mut frame, 2, &raw_ext);
            let event = proto::watch_event::<Pod>(&frame, node).map(|(e, _)| match e {
                WatchEvent::Modified(pod) => pod,
                other => panic!("{other:?}"),
            });
            vec![item, event]
        }

        #[test]
        fn a_skipped_decode_equals_a_full_decode_with_the_fields_cleared() {
            let skip = paths(&[
                "metadata.managedFields",
                "metadata.annotations[kubectl.kubernetes.io/last-applied-configuration]",
                "spec.containers.env",
                "status.conditions",
            ]);
            let node = skip.root().unwrap();
            let value = pod();
            let mut cleared = value.clone();
            clear(&mut cleared, node);
            let want: Pod = serde_json::from_value(cleared).unwrap();
            let got = json_paths(&value.to_string(), Some(node)).into_iter().chain(protobuf_paths(&value, Some(node)));
            for (i, got) in got.enumerate() {
                let got = got.unwrap();
                assert_eq!(got, want, "path {i}");
                assert!(got.metadata.managed_fields.is_none());
                assert_eq!(got.metadata.annotations.as_ref().unwrap().len(), 1);
                assert!(got.spec.as_ref().unwrap().containers.iter().all(|c| c.env.is_none() && c.image.is_some()));
                assert!(got.status.as_ref().unwrap().conditions.is_none());
                assert_eq!(got.status.as_ref().unwrap().phase.as_deref(), Some("Running"));
            }
            // And nothing is skipped without a tree.
            let full: Pod = serde_json::from_value(value.clone()).unwrap();
            for got in json_paths(&value.to_string(), None).into_iter().chain(protobuf_paths(&value, None)) {
                assert_eq!(got.unwrap(), full);
            }
        }

        #[test]
        fn fields_skipped_inside_embedded_json_are_left_out_in_every_path() {
            // fieldsV1 is embedded JSON in protobuf: each entry's text without `f:spec` is kept
            // until the object is decoded (more entries than one chunk of kept texts holds).
            let skip = paths(&["metadata.managedFields.fieldsV1.f:spec"]);
            let node = skip.root().unwrap();
            let mut value = pod();
            value["metadata"]["managedFields"] = (0..9)
                .map(|i| {
                    let fields =
                        serde_json::json!({"f:spec": {"f:x": {}}, "f:metadata": {"f:labels": {format!("f:{i}"): {}}}});
                    serde_json::json!({"manager": format!("m{i}"), "operation": "Apply", "fieldsV1": fields})
                })
                .collect();
            let mut cleared = value.clone();
            clear(&mut cleared, node);
            let want: Pod = serde_json::from_value(cleared).unwrap();
            let entries = want.metadata.managed_fields.as_ref().unwrap();
            assert_eq!(entries.len(), 9);
            assert!(entries.iter().all(|e| e.fields_v1.as_ref().unwrap().0.get("f:spec").is_none()));
            let got = json_paths(&value.to_string(), Some(node)).into_iter().chain(protobuf_paths(&value, Some(node)));
            for (i, got) in got.enumerate() {
                assert_eq!(got.unwrap(), want, "path {i}");
            }
        }

        #[test]
        fn a_map_whose_every_entry_is_skipped_decodes_empty_in_both_forms() {
            let skip = paths(&["metadata.annotations[kubectl.kubernetes.io/last-applied-configuration]"]);
            let mut value = pod();
            value["metadata"]["annotations"] =
                serde_json::json!({"kubectl.kubernetes.io/last-applied-configuration": "{}"});
            let got =
                json_paths(&value.to_string(), skip.root()).into_iter().chain(protobuf_paths(&value, skip.root()));
            for got in got {
                assert_eq!(got.unwrap().metadata.annotations, Some(Default::default()));
            }
        }

        #[test]
        fn a_skipped_value_is_stepped_over_even_when_it_is_not_of_the_fields_type() {
            // The value is never decoded, so a wrong type there is not an error.
            let text = r#"{"metadata":{"name":"a","managedFields":"not a list"}}"#;
            let skip = paths(&["metadata.managedFields"]);
            for (i, got) in json_paths(text, skip.root()).into_iter().enumerate() {
                assert_eq!(got.unwrap().metadata.name.as_deref(), Some("a"), "path {i}");
            }
            // Not skipped, it is an error.
            assert!(json_paths(text, None).iter().all(Result::is_err));
        }

        #[test]
        fn a_field_the_type_requires_and_a_watcher_skips_is_its_default_in_every_path() {
            // k8s-openapi gives a missing required field its default, as the JSON path does.
            let skip = paths(&["spec.containers.name"]);
            let value = pod();
            let got =
                json_paths(&value.to_string(), skip.root()).into_iter().chain(protobuf_paths(&value, skip.root()));
            for (i, got) in got.enumerate() {
                let pod = got.unwrap();
                let containers = &pod.spec.as_ref().unwrap().containers;
                assert!(containers.iter().all(|c| c.name.is_empty() && c.image.is_some()), "path {i}");
            }
        }

        #[test]
        fn keys_with_escapes_are_read_all_the_same() {
            let text = r#"{"metadata":{"name":"a","annotations":{"k\u0065ep":"x","drop\/me":"y"}}}"#;
            let skip = paths(&["metadata.annotations[drop/me]"]);
            for got in json_paths(text, skip.root()) {
                let annotations = got.unwrap().metadata.annotations.unwrap();
                assert_eq!(annotations.keys().collect::<Vec<_>>(), ["keep"]);
            }
        }

        #[test]
        fn a_bad_object_is_told_in_the_decoders_words_skipped_fields_or_not() {
            let skip = paths(&["metadata.managedFields"]);
            // Where an error is: in the line, or in the copy without the skipped fields.
            let what = |e: String| e.split(" at line ").next().unwrap().to_owned();
            for text in [
                r#"{"metadata":{"name":"a","managedFields":[1,]}}"#,
                r#"{"metadata":{"managedFields":[],"name":1}}"#,
                r#"{"metadata":{"name":"a","managedFields":[]},"spec":{"containers":[{"image":7}]}}"#,
            ] {
                let with: Vec<String> =
                    json_paths(text, skip.root()).into_iter().map(|r| what(r.unwrap_err())).collect();
                let without: Vec<String> = json_paths(text, None).into_iter().map(|r| what(r.unwrap_err())).collect();
                assert_eq!(with, without, "{text}");
            }
            // Invalid UTF-8 in a skipped field too.
            let mut bytes = br#"{"metadata":{"name":"a","managedFields":["#.to_vec();
            bytes.extend_from_slice(b"\"\xff\"]}}");
            let got = object::json::<Pod>(&bytes, false, &mut Scratch::default(), skip.root());
            assert!(got.unwrap_err().contains("UTF-8"));
        }
    }
}
