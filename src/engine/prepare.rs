//! Preparing objects: decode, transform, index values, encoded bytes to keep, before any lock is
//! taken.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::cache::{Encoded, Indexer, Packer, Skipped, Unchanged, Values};
use crate::codec::decode;
use crate::codec::skip::Paths;
use crate::error::{DecodeError, Error};
use crate::guard;
use crate::key::ObjectKey;
use crate::resource::Watchable;

/// What the worker reserves, and frees at once, before it decodes an object a relist adds to a
/// typed store (see [`headroom`]). Below glibc's smallest threshold for serving a request with
/// its own `mmap` (128 KiB), so that it comes from the thread's heap.
const HEAP_STEP: usize = 64 * 1024;

/// Lets the thread's heap grow by [`HEAP_STEP`] at once instead of page by page. glibc grows the
/// heap of a thread's malloc arena by what the request that did not fit needs, rounded up to a
/// page, with one `mprotect` call per step; a decoded realistic pod is ~200 allocations of
/// ~37 KB, nearly all small, so a sync took ~9 calls per pod (`strace -c`: 92.8k for 10k pods
/// over protobuf, 38k over JSON), a seventh of a 30k-pod sync's time. Freed at once, the
/// reservation joins the free space at the top of the heap, which the next objects fill: one
/// call per pod (10k for 10k pods), and the 30k-pod sync took 0.86× the time at the same peak RSS
/// (docs/performance.md, "Protobuf on the wire"). In a steady watch, where the heap does not
/// grow, it cost 3% of the events/s, so it is not done there. Only where the C library is glibc
/// (`target_env = "gnu"`), whose heap this is about: other C libraries' allocators work
/// otherwise and were not measured. A program with another global allocator on glibc pays one
/// allocation and free per object decoded.
fn headroom() {
    if cfg!(target_env = "gnu") {
        let reserved: Vec<u8> = Vec::with_capacity(HEAP_STEP);
        // Kept from being optimized away with its allocation.
        std::hint::black_box(&reserved);
    }
}

/// A user transform applied to every object before it is stored.
pub(crate) type Transform<K> = Arc<dyn Fn(&mut K) + Send + Sync>;

/// Encodes an object as compact JSON (compact store mode, after a transform changed it).
pub(crate) type Encode<K> = fn(&K) -> serde_json::Result<Vec<u8>>;

/// How the compact store modes keep objects: their bytes off the wire (JSON, or protobuf in its
/// envelope, without the skipped fields), re-encoded as JSON with `encode` after a transform
/// or where those bytes cannot show the object as decoded, compressed when `compress` is set.
pub(crate) struct Compaction<K> {
    pub(crate) encode: Encode<K>,
    pub(crate) compress: bool,
}

impl<K> Clone for Compaction<K> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<K> Copy for Compaction<K> {}

impl<K: serde::Serialize> Compaction<K> {
    /// The compact store modes: objects kept as serde_json's JSON, compressed or not.
    pub(crate) fn json(compress: bool) -> Self {
        Compaction { encode: |obj: &K| serde_json::to_vec(obj), compress }
    }
}

/// The object of the input being processed: decoded and transformed, its index values, and
/// its encoded bytes in compact mode. Everything user code computes is here before any lock.
pub(crate) struct Incoming<K> {
    /// `ObjectKey::of(obj)`, made once for the store's writer.
    pub(crate) key: ObjectKey,
    pub(crate) obj: Arc<K>,
    pub(crate) encoded: Option<Encoded>,
    pub(crate) values: Values,
}

/// What an object input carries: the object, or, when it does not decode as `K`, who it is
/// and why (the store's writer applies the policy: see [`Skipped`]).
pub(crate) enum Subject<K> {
    Object(Incoming<K>),
    Skipped(Skipped, DecodeError),
    /// A list item the live store holds unchanged: its entry is carried over, and its event
    /// shares the object (in the compact modes it is decoded from the entry's bytes if and when
    /// it goes out).
    Shared {
        key: ObjectKey,
        unchanged: Unchanged<K>,
    },
}

impl<K: Watchable> Subject<K> {
    /// The resourceVersion of the object as prepared (after the transform); `None` for a shared
    /// list item, which no watch event makes.
    pub(crate) fn resource_version(&self) -> Option<&str> {
        match self {
            Subject::Object(incoming) => incoming.obj.meta().resource_version.as_deref(),
            Subject::Skipped(skipped, _) => skipped.rv.as_deref(),
            Subject::Shared { .. } => None,
        }
    }
}

/// Turns what the server sent into what the store and the consumers take: decodes, runs the
/// user's transform and index functions (guarded: a panic names its callback), keeps compact
/// bytes in compact store mode. An object that does not decode as `K` is carried on as who it is
/// and why ([`Subject::Skipped`]); what follows is the writer's ([`Skipped`]).
pub(crate) struct Prepare<K> {
    /// The watcher's name, for logs.
    name: String,
    transform: Option<Transform<K>>,
    /// Compact store modes: keep objects encoded (as JSON after a transform), maybe compressed.
    compact: Option<Compaction<K>>,
    /// Compressed store mode: compresses the bytes against the objects seen before.
    packer: Option<Packer>,
    pub(crate) scratch: decode::Scratch,
    /// The fields never decoded (`WatcherBuilder::skip_fields`); shared by the copies.
    skip: Arc<Paths>,
    /// Whether the "server ignored the metadata-only request" warning was logged (once, also
    /// across the [`another`](Self::another) copies).
    warned_kind: Arc<AtomicBool>,
}

impl<K: Watchable> Prepare<K> {
    pub(crate) fn new(name: String, transform: Option<Transform<K>>, compact: Option<Compaction<K>>) -> Self {
        let packer = compact.filter(|c| c.compress).map(|_| Packer::default());
        Prepare {
            name,
            transform,
            compact,
            packer,
            scratch: decode::Scratch::default(),
            skip: Arc::default(),
            warned_kind: Arc::default(),
        }
    }

    /// Steps over the fields of `skip` in every object decoded, instead of decoding them. In the
    /// compact store modes the store keeps the object's protobuf without them, or the object
    /// re-encoded as after a transform (see [`object`](Self::object)), so that it holds neither
    /// those fields' bytes nor their entries.
    pub(crate) fn skipping(mut self, skip: Paths) -> Self {
        self.skip = Arc::new(skip);
        self
    }

    /// A copy with the same settings and buffers of its own (a compressed store's dictionary
    /// too: each thread learns its own), for another thread (a worker of another namespace, a
    /// helper of `engine/parallel.rs`); the metadata-only warning is still logged once for all
    /// of them.
    pub(crate) fn another(&self) -> Self {
        Prepare {
            name: self.name.clone(),
            transform: self.transform.clone(),
            compact: self.compact,
            packer: self.packer.as_ref().map(|_| Packer::default()),
            scratch: decode::Scratch::default(),
            skip: Arc::clone(&self.skip),
            warned_kind: Arc::clone(&self.warned_kind),
        }
    }

    /// Whether a transform runs on every object (which may change what it was sent with).
    pub(crate) fn transforms(&self) -> bool {
        self.transform.is_some()
    }

    /// Decodes one watch event (see `decode::event`); with a compact store mode, an object
    /// event also returns its object's bytes. `relisting`: a relist is in progress, so the
    /// event's object is a streaming list's initial state, new memory for a typed store as list
    /// items always are (see [`headroom`]).
    pub(crate) fn event<'a>(
        &mut self,
        encoding: decode::Encoding,
        bytes: &'a [u8],
        relisting: bool,
    ) -> Result<(decode::WatchEvent<K>, Option<decode::Raw<'a>>), String> {
        if relisting && self.compact.is_none() {
            headroom();
        }
        decode::event::<K>(encoding, bytes, self.compact.is_some(), &mut self.scratch, self.skip.root())
            .map(|(event, raw)| (event, raw.map(|raw| decode::Raw::event(encoding, raw))))
    }

    /// Decodes and prepares one list item; one that does not decode as `K` is skipped (see
    /// [`Skipped`]), one that is not JSON at all is an error of the whole body.
    pub(crate) fn item(
        &mut self,
        item: decode::Item<'_>,
        context: &str,
        indexer: &Indexer<K>,
    ) -> Result<Subject<K>, Error> {
        if let Some(unchanged) = Self::unchanged(item, indexer) {
            return Ok(unchanged);
        }
        if self.compact.is_none() {
            headroom();
        }
        let message = match decode::item::<K>(item, &mut self.scratch, self.skip.root()) {
            Ok(obj) => {
                let raw = self.compact.map(|_| decode::Raw::item(item));
                return self.object(obj, raw, (context, None), indexer);
            }
            Err(message) => message,
        };
        let error = decode::decode_error(context, None, item.bytes, message);
        match decode::item_identity(item) {
            Some(id) => Ok(self.skipped(id, error)),
            None => Err(Error::Decode(Box::new(error))),
        }
    }

    /// A list item the live store already holds at the same uid and resourceVersion: shared,
    /// not decoded, transformed or indexed again (see `Indexer::unchanged`).
    fn unchanged(item: decode::Item<'_>, indexer: &Indexer<K>) -> Option<Subject<K>> {
        if !indexer.holds_any() {
            return None;
        }
        Self::shared(decode::peek_item(item)?, indexer)
    }

    /// A streaming relist's initial event (an `ADDED` watch event in `encoding`) for an object
    /// the live store already holds at the same uid and resourceVersion: shared as a list item
    /// is (see `unchanged`), with the resourceVersion it carries, which the machine follows.
    pub(crate) fn unchanged_event<'a>(
        encoding: decode::Encoding,
        bytes: &'a [u8],
        indexer: &Indexer<K>,
    ) -> Option<(Subject<K>, &'a str)> {
        if !indexer.holds_any() {
            return None;
        }
        let id = decode::added_identity(encoding, bytes)?;
        let rv = id.resource_version?;
        Some((Self::shared(id, indexer)?, rv))
    }

    /// The live entry of the object `id` names, if the store holds it at the same uid and
    /// resourceVersion.
    fn shared(id: decode::Peeked<'_>, indexer: &Indexer<K>) -> Option<Subject<K>> {
        let key = ObjectKey { namespace: id.namespace.map(Into::into), name: id.name?.into() };
        let unchanged = indexer.unchanged(&key, id.uid?, id.resource_version?)?;
        Some(Subject::Shared { key, unchanged })
    }

    /// An object that does not decode as `K`, known by its metadata, and why.
    pub(crate) fn skipped(&self, id: decode::Identity, error: DecodeError) -> Subject<K> {
        let key = id.name.map(|name| ObjectKey { namespace: id.namespace.map(Into::into), name: name.into() });
        Subject::Skipped(Skipped { key, uid: id.uid, rv: id.resource_version }, error)
    }

    /// Runs the transform, and in the compact modes keeps the object's bytes: the wire's
    /// (`wire`: JSON, or protobuf kept in its envelope), without the skipped fields
    /// (`decode::kept`), or re-encoded as JSON when a transform may have changed the object or
    /// the wire's bytes cannot show it as decoded (skipped fields of JSON; see `decode::kept`);
    /// compressed in the compressed mode.
    /// `at`: the context and line for errors; `indexer`: the index functions to run.
    pub(crate) fn object(
        &mut self,
        mut obj: K,
        raw: Option<decode::Raw<'_>>,
        at: (&str, Option<u64>),
        indexer: &Indexer<K>,
    ) -> Result<Subject<K>, Error> {
        let wire = raw.map(decode::Raw::bytes);
        if let Some(kind) = obj.unexpected_kind()
            && !self.warned_kind.swap(true, Ordering::Relaxed)
        {
            // Decoding still keeps only the metadata, so the store is right; only bandwidth is lost.
            log::warn!(
                "{}: asked for metadata only (PartialObjectMetadata) but the server sent {kind:?} objects; \
                 keeping only their metadata",
                self.name
            );
        }
        if let Some(t) = &self.transform {
            guard::call(|| "transform".to_owned(), || t(&mut obj));
        }
        let kept = match raw {
            Some(raw) if self.compact.is_some() && self.transform.is_none() => {
                Some(decode::kept(raw, self.skip.root()).map_err(|e| {
                    Error::Decode(Box::new(decode::decode_error(
                        at.0,
                        at.1,
                        raw.bytes(),
                        format!("leave the skipped fields out for the compact store: {e}"),
                    )))
                })?)
            }
            _ => None,
        };
        let encoded = match (self.compact, kept) {
            (None, _) => None,
            (Some(_), Some(decode::Kept::Bytes(bytes))) => Some(self.keep(&obj, &bytes)),
            (Some(compact), kept) => {
                if let Some(decode::Kept::Reencode(why)) = kept {
                    log::trace!("{}: an object kept re-encoded as JSON: {why}", self.name);
                }
                let bytes = (compact.encode)(&obj).map_err(|e| {
                    Error::Decode(Box::new(decode::decode_error(
                        at.0,
                        at.1,
                        wire.unwrap_or_default(),
                        format!("re-encode for the compact store: {e}"),
                    )))
                })?;
                Some(self.keep(&obj, &bytes))
            }
        };
        let Some(key) = ObjectKey::of(&obj) else {
            // Nothing without a name can be stored or deleted by key: report and skip it.
            let meta = obj.meta();
            let id = decode::Identity {
                namespace: meta.namespace.clone(),
                name: None,
                uid: meta.uid.clone(),
                resource_version: meta.resource_version.clone(),
            };
            let e = decode::decode_error(at.0, at.1, wire.unwrap_or_default(), "no metadata.name".into());
            return Ok(self.skipped(id, e));
        };
        let values = indexer.values(&obj);
        Ok(Subject::Object(Incoming { key, obj: Arc::new(obj), encoded, values }))
    }

    /// An object's bytes as the store keeps them, with `obj`'s uid and resourceVersion:
    /// compressed in the compressed mode.
    fn keep(&mut self, obj: &K, encoded: &[u8]) -> Encoded {
        let meta = obj.meta();
        let (uid, rv) = (meta.uid.as_deref(), meta.resource_version.as_deref());
        match &mut self.packer {
            Some(packer) => packer.pack(uid, rv, encoded),
            None => Encoded::plain(uid, rv, encoded),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::Writer;
    use k8s_openapi::api::core::v1::ConfigMap;

    #[test]
    fn a_compact_store_keeps_neither_the_bytes_nor_the_entries_of_skipped_fields() {
        let (writer, _store) = Writer::<ConfigMap>::new();
        let line = br#"{"type":"ADDED","object":{"metadata":{"name":"a","resourceVersion":"1","managedFields":[{"manager":"m"}]},"data":{"k":"v"}}}"#;
        for compress in [false, true] {
            let paths = Paths::new::<ConfigMap>(&["metadata.managedFields".into()]).unwrap();
            let mut prepare =
                Prepare::<ConfigMap>::new("test".into(), None, Some(Compaction::json(compress))).skipping(paths);
            let (event, raw) = prepare.event(decode::Encoding::Json, line, false).unwrap();
            let decode::WatchEvent::Added(obj) = event else { panic!("{event:?}") };
            assert!(obj.metadata.managed_fields.is_none());
            let Ok(Subject::Object(incoming)) = prepare.object(obj, raw, ("test", None), writer.indexer()) else {
                panic!("not stored")
            };
            let bytes = incoming.encoded.as_ref().unwrap().bytes().unwrap().into_owned();
            assert!(!String::from_utf8_lossy(&bytes).contains("managedFields"), "compress: {compress}");
            assert_eq!(decode::compact::<ConfigMap>(&bytes).unwrap(), *incoming.obj, "compress: {compress}");
            assert_eq!(incoming.obj.data.as_ref().unwrap()["k"], "v");
        }
    }

    /// Over protobuf, the store keeps the object's protobuf without the skipped fields, not
    /// JSON: smaller than what came.
    #[test]
    fn over_protobuf_a_compact_store_keeps_the_protobuf_without_the_skipped_fields() {
        use crate::codec::protobuf as pb;
        let (writer, _store) = Writer::<ConfigMap>::new();
        let object = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "resourceVersion": "1", "managedFields": [{"manager": "the-manager"}]},
            "data": {"k": "v"}});
        let mut raw = Vec::new();
        pb::en::bytes(&mut raw, 1, &pb::encode(&object).unwrap());
        let mut frame = Vec::new();
        pb::en::bytes(&mut frame, 1, b"ADDED");
        pb::en::bytes(&mut frame, 2, &raw);
        for compress in [false, true] {
            let paths = Paths::new::<ConfigMap>(&["metadata.managedFields".into()]).unwrap();
            let mut prepare =
                Prepare::<ConfigMap>::new("test".into(), None, Some(Compaction::json(compress))).skipping(paths);
            let (event, raw) = prepare.event(decode::Encoding::Protobuf, &frame, false).unwrap();
            let decode::WatchEvent::Added(obj) = event else { panic!("{event:?}") };
            let came = raw.unwrap().bytes().len();
            let Ok(Subject::Object(incoming)) = prepare.object(obj, raw, ("test", None), writer.indexer()) else {
                panic!("not stored")
            };
            let bytes = incoming.encoded.as_ref().unwrap().bytes().unwrap().into_owned();
            assert!(bytes.starts_with(pb::MAGIC), "compress: {compress}: {bytes:?}");
            assert!(bytes.len() < came, "compress: {compress}: {} bytes of {came}", bytes.len());
            assert!(!bytes.windows(11).any(|w| w == b"the-manager"), "compress: {compress}");
            assert_eq!(decode::compact::<ConfigMap>(&bytes).unwrap(), *incoming.obj, "compress: {compress}");
        }
    }
}
