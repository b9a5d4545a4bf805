//! Entry points for the fuzz targets in `fuzz/` and the randomized decoder tests (cargo feature
//! `fuzzing`). Hidden and outside semver: they only forward to crate-private decoders.
//!
//! Decoded values are compared as text (`{:?}`), which tells `0` from `-0.0` and every field
//! from every other, without naming each kind of watch event.

use std::fmt::Debug;
use std::io::{self, BufRead, Read};

use serde::de::DeserializeOwned;
use serde_json::value::RawValue;

use crate::codec::decode::{self, Encoding, FRAME_HEADER, Frame, Line, WatchEvent};
use crate::codec::skip;

/// The fields the entry points also decode without (`WatcherBuilder::skip_fields`): through a
/// list, into a map by key, and whole objects and lists.
const SKIPPED: [&str; 4] = [
    "metadata.managedFields",
    "metadata.annotations[kubectl.kubernetes.io/last-applied-configuration]",
    "spec.containers.env",
    "status.conditions",
];

/// Panics unless decoding with [`SKIPPED`] stepped over (`decode`) gives what the object's JSON
/// form (`value`) with those fields removed decodes to: the verdict and the value. Only for types
/// those paths fit (`Pod`, `serde_json::Value`) and objects that decode whole (`full`): one that
/// does not may decode once a bad field is skipped, and JSON's form keeps only the last of
/// duplicate keys, so what an earlier one holds is not compared.
fn skipping_agrees<K: DeserializeOwned + Debug>(
    full: bool,
    value: Result<serde_json::Value, String>,
    decode: impl FnOnce(Option<&skip::Node>) -> Result<K, String>,
    show: impl Fn() -> String,
) {
    if !full {
        return;
    }
    let Ok(paths) = skip::Paths::new::<K>(&SKIPPED.map(String::from)) else { return };
    let (Some(node), Ok(mut value)) = (paths.root(), value) else { return };
    skip::clear(&mut value, node);
    let want = serde_json::from_value::<K>(value).map(|o| format!("{o:?}")).map_err(|e| e.to_string());
    let got = decode(Some(node)).map(|o| format!("{o:?}"));
    assert_eq!(got.as_ref().ok(), want.as_ref().ok(), "skipping fields: {got:?} vs cleared {want:?} on {}", show());
}

/// Panics unless what a compact store keeps of an object decoded with [`SKIPPED`] stepped over
/// (`raw` without those fields: `decode::kept`) reads back (`decode::compact`) as that decode
/// (`decode`). Pruning must accept whatever that decode accepted.
fn kept_agrees<K: DeserializeOwned + Debug>(
    raw: Option<decode::Raw<'_>>,
    decode: impl FnOnce(Option<&skip::Node>) -> Result<K, String>,
    show: impl Fn() -> String,
) {
    let Ok(paths) = skip::Paths::new::<K>(&SKIPPED.map(String::from)) else { return };
    let (Some(node), Some(raw)) = (paths.root(), raw) else { return };
    let Ok(skipped) = decode(Some(node)) else { return };
    let kept = decode::kept(raw, Some(node))
        .unwrap_or_else(|e| panic!("pruning refuses what the skipping decode read ({e}): {}", show()));
    if let decode::Kept::Bytes(bytes) = kept {
        let stored = decode::compact::<K>(&bytes).map(|o| format!("{o:?}"));
        assert_eq!(stored, Ok(format!("{skipped:?}")), "pruned bytes read back as another object: {}", show());
    }
}

/// The object of an object event.
fn object_of<K>(ev: WatchEvent<K>) -> Result<K, String> {
    match ev {
        WatchEvent::Added(o) | WatchEvent::Modified(o) | WatchEvent::Deleted(o) => Ok(o),
        other => Err(format!("not an object event: {}", std::any::type_name_of_val(&other))),
    }
}

/// Decodes one watch line (without its `\n`) as a `K` watch event, the way the watcher does
/// by default (straight into `K`); `Ok` holds the event as text, `Err` the message.
///
/// # Errors
///
/// When the line is not a valid watch event.
pub fn watch_event<K: DeserializeOwned + Debug>(line: &[u8]) -> Result<String, String> {
    decode::watch_event::<K>(line, false, &mut decode::Scratch::default(), None).map(|(ev, _)| format!("{ev:?}"))
}

/// Decodes one watch line both ways the watcher can: straight into `K`, and through the raw
/// object bytes (compact store mode). `Ok` holds the event as text; the two should always be
/// equal. [`watch_line`] checks more.
pub fn watch_event_both<K: DeserializeOwned + Debug>(line: &[u8]) -> (Result<String, String>, Result<String, String>) {
    (
        decode::watch_event::<K>(line, false, &mut decode::Scratch::default(), None).map(|(ev, _)| format!("{ev:?}")),
        decode::watch_event::<K>(line, true, &mut decode::Scratch::default(), None).map(|(ev, _)| format!("{ev:?}")),
    )
}

/// The object of an object event (`ADDED`, `MODIFIED`, `DELETED`) as text; `None` for others.
fn object_text<K: Debug>(ev: &WatchEvent<K>) -> Option<String> {
    match ev {
        WatchEvent::Added(o) | WatchEvent::Modified(o) | WatchEvent::Deleted(o) => Some(format!("{o:?}")),
        _ => None,
    }
}

/// A watch line read by serde_json alone, the reference.
#[derive(serde::Deserialize)]
struct PlainEnvelope<'a> {
    #[serde(rename = "type")]
    kind: String,
    #[serde(borrow)]
    object: &'a RawValue,
}

/// Decodes one watch line every way the watcher can, and panics (naming the line) unless all
/// agree on the verdict and on the decoded value:
///
/// * straight into `K` with the build's decoder (simd-json with the `simd` feature);
/// * through the raw object bytes with serde_json (compact store mode);
/// * those raw bytes decoded again with the build's decoder, as a compact store reads an
///   entry back (`decode::compact`);
/// * for object events, plain serde_json: the envelope as a struct, then
///   `serde_json::from_str::<K>` of the object;
/// * for object events, with fields skipped: equal to the object's JSON with them removed,
///   decoded as a `K`, and to what a compact store keeps of it, read back.
///
/// Returns the direct decoder's answer, the event as text.
///
/// # Errors
///
/// When the line is not a valid watch event (as every decoder agrees), or its object is not a `K`
/// (the watcher skips it: see `WatchEvent::Undecodable`).
///
/// # Panics
///
/// When two decoders disagree.
pub fn watch_line<K: DeserializeOwned + Debug>(line: &[u8]) -> Result<String, String> {
    let show = || String::from_utf8_lossy(line).into_owned();
    let mut scratch = decode::Scratch::default();
    let direct = decode::watch_event::<K>(line, false, &mut scratch, None);
    let direct_object = direct.as_ref().ok().and_then(|(ev, _)| object_text(ev));
    // An object that is valid JSON but not a `K` is skipped by the watcher: no `K` came of it.
    let skipped = match &direct {
        Ok((WatchEvent::Undecodable { message, .. }, _)) => Some(message.clone()),
        _ => None,
    };
    let direct = direct.map(|(ev, _)| format!("{ev:?}"));
    match decode::watch_event::<K>(line, true, &mut decode::Scratch::default(), None) {
        Ok((ev, raw)) => {
            let text = format!("{ev:?}");
            assert_eq!(direct.as_ref().ok(), Some(&text), "direct vs raw decoding of {:?}", show());
            if let Some(raw) = raw {
                peek_agrees(raw);
            }
            if let (Some(object), Some(raw)) = (object_text(&ev), raw) {
                let stored = decode::compact::<K>(raw).map(|o| format!("{o:?}"));
                assert_eq!(stored.as_ref(), Ok(&object), "a stored object read back differs, in {:?}", show());
                kept_agrees::<K>(
                    Some(decode::Raw::Json(raw)),
                    |node| {
                        decode::watch_event::<K>(line, false, &mut decode::Scratch::default(), node)
                            .and_then(|(ev, _)| object_of(ev))
                    },
                    show,
                );
            }
        }
        Err(e) => assert!(direct.is_err(), "raw decoding refuses what direct accepts ({e}): {:?}", show()),
    }
    let plain = std::str::from_utf8(line)
        .ok()
        .and_then(|text| serde_json::from_str::<PlainEnvelope<'_>>(text).ok())
        .filter(|env| matches!(env.kind.as_str(), "ADDED" | "MODIFIED" | "DELETED"))
        .map(|env| serde_json::from_str::<K>(env.object.get()).map(|o| format!("{o:?}")).map_err(|e| e.to_string()));
    match (&plain, &direct_object) {
        (Some(Ok(p)), Some(d)) => assert_eq!(p, d, "serde_json decodes another value from {:?}", show()),
        (Some(Ok(_)), None) => panic!("serde_json accepts what the watcher refuses ({direct:?}): {:?}", show()),
        (Some(Err(e)), Some(_)) => panic!("the watcher accepts what serde_json refuses ({e}): {:?}", show()),
        (None, Some(_)) => panic!("the watcher decodes an object event serde_json cannot read: {:?}", show()),
        (Some(Err(_)) | None, None) => {}
    }
    if let Some(plain) = &plain {
        let value = decode::watch_event::<serde_json::Value>(line, false, &mut decode::Scratch::default(), None)
            .and_then(|(ev, _)| object_of(ev));
        skipping_agrees::<K>(
            plain.is_ok(),
            value,
            |node| decode::watch_event::<K>(line, false, &mut scratch, node).and_then(|(ev, _)| object_of(ev)),
            show,
        );
    }
    match skipped {
        Some(message) => Err(message),
        None => direct,
    }
}

/// A dictionary hashed once, and objects compressed against it as the compressed store does
/// (`src/cache/lz4.rs`): LZ4 blocks that `lz4_flex::block::decompress_with_dict` reads with the
/// same dictionary.
pub struct Compressor(crate::cache::Dictionary);

impl std::fmt::Debug for Compressor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Compressor").field("dictionary", &self.0.bytes().len()).finish()
    }
}

impl Compressor {
    /// Hashes `dictionary` (what the store does each time its dictionary grows).
    pub fn new(dictionary: &[u8]) -> Compressor {
        Compressor(crate::cache::Dictionary::new(dictionary.into()))
    }

    /// `input` as an LZ4 block against the dictionary.
    pub fn compress(&self, input: &[u8]) -> Vec<u8> {
        crate::cache::compress(input, &self.0)
    }
}

/// The identity scan a relist uses on each listed item (`decode::peek`): whether it answered.
pub fn peek(json: &[u8]) -> bool {
    decode::peek(json).is_some()
}

/// The test a sharded watcher runs on each watch event before decoding it
/// (`decode::event_outside_shard`): a JSON line, or (`protobuf`) a protobuf frame without its
/// length; whether it is kept.
pub fn event_in_shard(protobuf: bool, bytes: &[u8], shard: &crate::Shard) -> bool {
    let encoding = if protobuf { Encoding::Protobuf } else { Encoding::Json };
    decode::event_outside_shard(encoding, bytes, shard).is_none()
}

/// Whenever the identity scan a relist uses (`decode::peek`) answers for valid JSON, it names
/// what a decoder reads from the object's `metadata`.
///
/// # Panics
///
/// When the two disagree.
pub fn peek_agrees(json: &[u8]) {
    let (Some(id), Ok(v)) = (decode::peek(json), serde_json::from_slice::<serde_json::Value>(json)) else { return };
    let field = |f: &str| v["metadata"][f].as_str();
    let show = || String::from_utf8_lossy(json).into_owned();
    assert_eq!(id.namespace, field("namespace"), "namespace of {:?}", show());
    assert_eq!(id.name, field("name"), "name of {:?}", show());
    assert_eq!(id.uid, field("uid"), "uid of {:?}", show());
    assert_eq!(id.resource_version, field("resourceVersion"), "resourceVersion of {:?}", show());
}

/// The strict syntax check that runs before simd-json: true only for JSON that serde_json's
/// parser accepts too, and reads as the same values (it may refuse more, e.g. a lone `\u`
/// surrogate, deep nesting, `-0` or a long float).
pub fn strict_syntax(input: &[u8]) -> bool {
    crate::codec::syntax::is_valid(input)
}

/// Panics unless the walk that copies JSON without skipped fields (`codec/skip/json.rs`, with
/// the paths the entry points skip) agrees with the strict syntax check on `input`, and, where
/// both accept it, its copy is valid JSON that serde_json reads as `input` with those fields
/// removed. Returns the check's verdict.
pub fn pruned_json(input: &[u8]) -> bool {
    let valid = crate::codec::syntax::is_valid(input);
    let paths = skip::Paths::new::<serde_json::Value>(&SKIPPED.map(String::from));
    let Some(node) = paths.as_ref().ok().and_then(skip::Paths::root) else {
        panic!("the skipped paths fit any JSON: {:?}", paths.err())
    };
    let show = || String::from_utf8_lossy(input).into_owned();
    let mut out = Vec::new();
    let pruned = skip::json::pruned(input, node, &mut out).is_some();
    assert_eq!(pruned, valid, "the pruning walk and the syntax check disagree on {:?}", show());
    if pruned {
        assert!(crate::codec::syntax::is_valid(&out), "a pruned copy that is not valid: {:?}", show());
        if let Ok(mut want) = serde_json::from_slice::<serde_json::Value>(input) {
            skip::clear(&mut want, node);
            let got = serde_json::from_slice::<serde_json::Value>(&out);
            assert_eq!(got.ok(), Some(want), "the pruned copy of {:?}", show());
        }
    }
    valid
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
/// Every item is decoded three ways, and they must agree on the verdict and the value: the
/// watcher's decoder trusting the scanner's syntax check, the same decoder from scratch
/// (`decode::object`), and plain `serde_json::from_slice`. Decoded with fields skipped, it must
/// equal its JSON with them removed, and what a compact store keeps of it, read back.
///
/// # Errors
///
/// The decoder's error, as text.
///
/// # Panics
///
/// When the decoders disagree, or an item breaks the scanner's bounds.
pub fn list<K: DeserializeOwned + Debug, R: Read>(
    reader: R,
    max_item: usize,
) -> Result<(usize, Option<String>), String> {
    let mut items = 0;
    let meta = decode::list(reader, max_item, |item| {
        let bytes = item.bytes;
        assert!(bytes.len() <= max_item.saturating_add(64 * 1024), "list item of {} bytes", bytes.len());
        assert!(!item.checked || crate::codec::syntax::is_valid(bytes), "an item marked checked is not valid JSON");
        items += 1;
        peek_agrees(bytes);
        let show = || String::from_utf8_lossy(bytes).into_owned();
        // The watcher's decoder trusting `checked` judges the item as it does from scratch.
        let trusted = decode::item::<K>(item, &mut decode::Scratch::default(), None).map(|o| format!("{o:?}"));
        let fresh = decode::object::<K>(bytes, &mut decode::Scratch::default()).map(|o| format!("{o:?}"));
        assert_eq!(trusted.as_ref().ok(), fresh.as_ref().ok(), "{trusted:?} vs {fresh:?} on {:?}", show());
        let plain = std::str::from_utf8(bytes)
            .map_err(|e| e.to_string())
            .and_then(|text| serde_json::from_str::<K>(text).map_err(|e| e.to_string()))
            .map(|o| format!("{o:?}"));
        assert_eq!(fresh.as_ref().ok(), plain.as_ref().ok(), "{fresh:?} vs serde_json {plain:?} on {:?}", show());
        skipping_agrees::<K>(
            plain.is_ok(),
            serde_json::from_slice(bytes).map_err(|e| e.to_string()),
            |node| decode::item::<K>(item, &mut decode::Scratch::default(), node),
            show,
        );
        kept_agrees::<K>(
            Some(decode::Raw::item(item)),
            |node| decode::item::<K>(item, &mut decode::Scratch::default(), node),
            show,
        );
        plain.map(|_| ())
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
    crate::wire::client::Client::from_kubeconfig_yaml(yaml, &crate::auth::KubeconfigOptions::default()).map(|_| ())
}

/// Decodes one protobuf body (`k8s\0`, a `runtime.Unknown` envelope and the object) as a `K`
/// with the protobuf decoder; `Ok` holds the object as text.
///
/// # Errors
///
/// The decoder's error: the body is not an enveloped object of a kind the table knows, or its
/// bytes do not read as that kind.
///
/// # Panics
///
/// When the two ways of reading it disagree: straight into `K`, and into `serde_json::Value`
/// first and from there into `K` (every object that decodes as a `K` must also decode as JSON,
/// to the same `K`).
pub fn protobuf_object<K: DeserializeOwned + Debug>(body: &[u8]) -> Result<String, String> {
    let direct = crate::codec::protobuf::object::<K>(body).map(|o| format!("{o:?}")).map_err(|e| e.to_string());
    let json = crate::codec::protobuf::object::<serde_json::Value>(body).map_err(|e| e.to_string());
    if let Ok(text) = &direct {
        let value = json.unwrap_or_else(|e| panic!("decodes as a K but not as JSON ({e}): {body:?}"));
        let again = serde_json::from_value::<K>(value).map(|o| format!("{o:?}")).map_err(|e| e.to_string());
        assert_eq!(Some(text), again.as_ref().ok(), "direct vs through JSON ({again:?}) on {body:?}");
    }
    direct
}

/// Decodes one protobuf body (`k8s\0`, a `runtime.Unknown` envelope and the object) as a `K`
/// with the protobuf decoder, for tests that compare the value itself.
///
/// # Errors
///
/// The decoder's error, as text.
pub fn protobuf_decode<K: DeserializeOwned>(body: &[u8]) -> Result<K, String> {
    crate::codec::protobuf::object::<K>(body).map_err(|e| e.to_string())
}

/// Encodes an object's JSON form (with `apiVersion` and `kind`) as a protobuf body, with the same
/// schema table the decoder reads: for tests and measurements of the decoder on realistic objects.
///
/// # Errors
///
/// The kind has no protobuf form, or a value does not fit its field.
pub fn protobuf_encode(value: &serde_json::Value) -> Result<Vec<u8>, String> {
    crate::codec::protobuf::encode(value).map_err(|e| e.to_string())
}

/// Splits `reader` into protobuf watch frames of at most `max` bytes, as a protobuf watch stream
/// is read (docs/protocol.md §12.3); returns the complete frames' messages. A read that times
/// out is retried, and the frame it interrupted must come out whole. Stops at the end, at a
/// frame announcing more than `max` bytes, or at another read error.
///
/// # Panics
///
/// When the reader holds more than one frame's bytes, or refuses a frame within the limit.
pub fn protobuf_frames(mut reader: impl BufRead, max: usize) -> Vec<Vec<u8>> {
    let mut buf = Vec::new();
    let mut out = Vec::new();
    loop {
        let read = decode::read_frame(&mut reader, &mut buf, max);
        assert!(buf.len() <= max.saturating_add(FRAME_HEADER), "read_frame kept {} bytes, limit {max}", buf.len());
        match read {
            Ok(Frame::Complete) => out.push(buf.split_off(FRAME_HEADER)),
            Ok(Frame::TooLong(n)) => {
                assert!(n > max as u64, "a frame of {n} bytes refused with the limit at {max}");
                assert_eq!(buf.len(), FRAME_HEADER, "more than the length was read of a refused frame");
                return out;
            }
            Err(e) if matches!(e.kind(), io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock) => continue,
            Ok(Frame::End) | Err(_) => return out,
        }
        buf.clear();
    }
}

/// Decodes one protobuf watch frame's message (without its length) as a `K` watch event, the
/// way the watcher does; `Ok` holds the event as text.
///
/// # Errors
///
/// When the frame is not a valid watch event (an undecodable object with a name is `Ok`).
///
/// # Panics
///
/// When the bytes a compact store would keep of the object do not read back as that object,
/// the object decoded with fields skipped differs from its JSON form with them removed, or the
/// bytes a compact store keeps of that object without those fields read back as another.
pub fn protobuf_watch_event<K: DeserializeOwned + Debug>(frame: &[u8]) -> Result<String, String> {
    let decode = |skip: Option<&skip::Node>| {
        decode::event::<K>(Encoding::Protobuf, frame, true, &mut decode::Scratch::default(), skip)
    };
    let (event, kept) = decode(None)?;
    if object_text(&event).is_some() {
        let value =
            decode::event::<serde_json::Value>(Encoding::Protobuf, frame, false, &mut decode::Scratch::default(), None)
                .and_then(|(ev, _)| object_of(ev));
        skipping_agrees::<K>(
            true,
            value,
            |node| decode(node).and_then(|(ev, _)| object_of(ev)),
            || format!("{frame:?}"),
        );
        kept_agrees::<K>(
            kept.map(decode::Raw::Enveloped),
            |node| decode(node).and_then(|(ev, _)| object_of(ev)),
            || format!("{frame:?}"),
        );
    }
    if let (Some(object), Some(kept)) = (object_text(&event), kept) {
        let stored = decode::compact::<K>(kept).map(|o| format!("{o:?}"));
        assert_eq!(stored.as_ref(), Ok(&object), "a stored object read back differs, in frame {frame:?}");
    }
    Ok(format!("{event:?}"))
}

/// Streams a protobuf list body of `resource` (its apiVersion and item kind) from `reader`,
/// decoding each item as a `K` (items of at most `max_item` bytes); returns the number of items
/// and the list's resourceVersion.
///
/// # Errors
///
/// The decoder's error, as text.
///
/// # Panics
///
/// When an item breaks the bound, the identity a relist reads off an item without decoding
/// it (`peek`) differs from the decoded item's, an item decoded with fields skipped differs
/// from its JSON form with them removed, or the bytes a compact store keeps of that item
/// without those fields read back as another.
pub fn protobuf_list<K: DeserializeOwned + Debug, R: Read>(
    reader: R,
    max_item: usize,
    resource: (&str, &str),
) -> Result<(usize, Option<String>), String> {
    let mut items = 0;
    let meta = decode::protobuf_list(reader, max_item, &[resource], |item| {
        assert!(item.bytes.len() <= max_item, "list item of {} bytes, limit {max_item}", item.bytes.len());
        items += 1;
        let value = decode::item::<serde_json::Value>(item, &mut decode::Scratch::default(), None);
        if let (Some(id), Ok(v)) = (decode::peek_item(item), &value) {
            let meta = |field: &str| v.pointer(&format!("/metadata/{field}")).and_then(serde_json::Value::as_str);
            assert_eq!(id.name, meta("name"), "name");
            assert_eq!(id.namespace, meta("namespace"), "namespace");
            assert_eq!(id.uid, meta("uid"), "uid");
            assert_eq!(id.resource_version, meta("resourceVersion"), "resourceVersion");
        }
        let full = decode::item::<K>(item, &mut decode::Scratch::default(), None).map(|_| ());
        skipping_agrees::<K>(
            full.is_ok(),
            value,
            |node| decode::item::<K>(item, &mut decode::Scratch::default(), node),
            || format!("{:?}", item.bytes),
        );
        kept_agrees::<K>(
            Some(decode::Raw::item(item)),
            |node| decode::item::<K>(item, &mut decode::Scratch::default(), node),
            || format!("{:?}", item.bytes),
        );
        full
    });
    match meta {
        Ok(meta) => Ok((items, meta.resource_version)),
        Err(decode::ListError::Io(e)) => Err(e.to_string()),
        Err(decode::ListError::Malformed { message, .. }) => Err(message),
        Err(decode::ListError::Item(e)) => Err(e),
    }
}

/// Fields a watcher skips (`WatcherBuilder::skip_fields`), checked against `K`: for
/// measurements of [`event_object`].
#[derive(Debug)]
pub struct Skipping(skip::Paths);

impl Skipping {
    /// Checks `paths` against `K`, as `WatcherBuilder::start` does.
    ///
    /// # Errors
    ///
    /// A bad path, named.
    pub fn new<K: DeserializeOwned>(paths: &[&str]) -> Result<Skipping, String> {
        skip::Paths::new::<K>(&paths.iter().map(|p| (*p).to_owned()).collect::<Vec<_>>()).map(Skipping)
    }
}

/// A protobuf watch event message of type `ty` around an enveloped object `body` (what
/// [`protobuf_encode`] writes): for measurements of [`event_object`].
#[must_use]
pub fn protobuf_event(ty: &str, body: &[u8]) -> Vec<u8> {
    use crate::codec::protobuf::en;
    let mut raw = Vec::new();
    en::bytes(&mut raw, 1, body);
    let mut frame = Vec::new();
    en::bytes(&mut frame, 1, ty.as_bytes());
    en::bytes(&mut frame, 2, &raw);
    frame
}

/// The object of one watch event (a JSON line, or with `protobuf` a frame's message), decoded as
/// a watcher that skips `skipping` does: the hot path of a watch, for measurements.
///
/// # Errors
///
/// The decoder's error, or a watch event that is not an object event.
pub fn event_object<K: DeserializeOwned>(bytes: &[u8], protobuf: bool, skipping: &Skipping) -> Result<K, String> {
    let encoding = if protobuf { Encoding::Protobuf } else { Encoding::Json };
    decode::event::<K>(encoding, bytes, false, &mut decode::Scratch::default(), skipping.0.root())
        .and_then(|(ev, _)| object_of(ev))
}
