//! How the compact store modes hold an object's encoded form (JSON, or protobuf in its envelope:
//! whatever the wire carried): as it is (`compact_store`), or compressed with LZ4 against a
//! dictionary made of earlier objects (`compressed_store`).
//!
//! Objects of one kind in one cluster repeat themselves: the same keys, labels, images,
//! managedFields, conditions. Compressed alone, a 6 KB pod shrinks to about half; compressed
//! against another pod, to a small fraction, because most of it is a copy of that pod. So the
//! [`Packer`] keeps a dictionary of sample objects: the first object it sees, and later ones
//! that the dictionary does not yet cover well (they compress to more than a quarter of their
//! size), until it is full: until the dictionary, the next sample and an object of its size
//! would no longer fit LZ4's 64 KiB window together. The dictionary is never changed in place: each growth
//! makes a new one, and every packed entry holds the one it was compressed with, so entries
//! packed before and after a growth all stay readable. docs/performance.md has the measurements
//! behind the numbers here.

use std::borrow::Cow;
use std::sync::Arc;

use super::lz4::{self, Dictionary};

/// How far back LZ4 refers, counted from the byte being compressed. The dictionary grows while
/// it stays within reach of objects of the size of its samples: a sample is taken only while
/// the dictionary, the sample and another object of its size fit in this window together
/// (up to about 59 KiB for 2.6 KB protobuf pods, where it stopped at 32 KiB, sized for 6 KB
/// JSON ones; docs/performance.md, "Fields never decoded", has what it saves and costs).
const WINDOW: usize = 64 * 1024;

/// Samples are added to the dictionary in steps of at least this many bytes, so that small
/// objects do not make a new dictionary each (at most `WINDOW / STEP` of them).
const STEP: usize = 2 * 1024;

/// An object's encoded form as a compact store holds it, and its uid and resourceVersion,
/// which the cache reads without decoding the object (to tell versions and incarnations
/// apart): all in one allocation. Cloning shares it.
#[derive(Clone)]
pub(crate) struct Encoded {
    /// The uid, the resourceVersion, then the bytes, as they are or compressed (`form`).
    data: Arc<[u8]>,
    /// The uid's length at the start of `data`; [`NONE`]: the object has none.
    uid: u32,
    /// The resourceVersion's length after the uid; [`NONE`]: the object has none.
    rv: u32,
    form: Form,
}

/// How [`Encoded`] holds the bytes.
#[derive(Clone)]
enum Form {
    /// As they are.
    Plain,
    /// Compressed (an LZ4 block) against `dictionary`; `len` bytes once decompressed.
    Packed { len: u32, dictionary: Arc<[u8]> },
}

/// An absent uid or resourceVersion.
const NONE: u32 = u32::MAX;

impl Encoded {
    /// `bytes` as they are, with the object's `uid` and `rv`.
    pub(crate) fn plain(uid: Option<&str>, rv: Option<&str>, bytes: &[u8]) -> Encoded {
        Encoded::with(uid, rv, bytes, Form::Plain)
    }

    /// `None` when the parts do not fit the lengths (4 GiB each: far above any object the
    /// client accepts).
    fn with(uid: Option<&str>, rv: Option<&str>, bytes: &[u8], form: Form) -> Encoded {
        let length = |s: Option<&str>| s.map_or(Some(NONE), |s| u32::try_from(s.len()).ok().filter(|&n| n != NONE));
        let (Some(uid_len), Some(rv_len)) = (length(uid), length(rv)) else {
            // Kept without them: the entry then only looks changed to a relist.
            return Encoded { data: bytes.into(), uid: NONE, rv: NONE, form };
        };
        let (uid, rv) = (uid.unwrap_or_default(), rv.unwrap_or_default());
        let len = uid.len() + rv.len() + bytes.len();
        // Allocated once, at its size, and filled in place: a `Vec` first would be a second
        // allocation and copy of every object.
        let mut data: Arc<[u8]> = std::iter::repeat_n(0, len).collect();
        match Arc::get_mut(&mut data) {
            Some(space) => {
                let (ids, rest) = space.split_at_mut(uid.len() + rv.len());
                ids[..uid.len()].copy_from_slice(uid.as_bytes());
                ids[uid.len()..].copy_from_slice(rv.as_bytes());
                rest.copy_from_slice(bytes);
            }
            // Cannot happen: `data` was made here and is not shared.
            None => data = [uid.as_bytes(), rv.as_bytes(), bytes].concat().into(),
        }
        Encoded { data, uid: uid_len, rv: rv_len, form }
    }

    /// Where the uid ends and where the bytes start in `data`.
    fn bounds(&self) -> (usize, usize) {
        let uid_end = if self.uid == NONE { 0 } else { self.uid as usize };
        let rv_end = if self.rv == NONE { uid_end } else { uid_end + self.rv as usize };
        (uid_end, rv_end)
    }

    /// The object's uid.
    pub(crate) fn uid(&self) -> Option<&str> {
        let (end, _) = self.bounds();
        (self.uid != NONE).then(|| std::str::from_utf8(self.data.get(..end)?).ok()).flatten()
    }

    /// The object's resourceVersion.
    pub(crate) fn resource_version(&self) -> Option<&str> {
        let (start, end) = self.bounds();
        (self.rv != NONE).then(|| std::str::from_utf8(self.data.get(start..end)?).ok()).flatten()
    }

    /// The bytes, decompressed if need be. `Err` carries the decompressor's message (it cannot
    /// happen for bytes this module packed: see [`Packer::pack`]).
    pub(crate) fn bytes(&self) -> Result<Cow<'_, [u8]>, String> {
        let stored = self.data.get(self.bounds().1..).unwrap_or_default();
        match &self.form {
            Form::Plain => Ok(Cow::Borrowed(stored)),
            Form::Packed { len, dictionary } => {
                lz4_flex::block::decompress_with_dict(stored, *len as usize, dictionary)
                    .map(Cow::Owned)
                    .map_err(|e| format!("decompress a compressed store entry: {e}"))
            }
        }
    }

    /// The length of the bytes, decompressed.
    pub(crate) fn len(&self) -> usize {
        match &self.form {
            Form::Plain => self.data.len() - self.bounds().1,
            Form::Packed { len, .. } => *len as usize,
        }
    }

    /// The bytes this entry keeps for itself (the dictionary is shared, so not counted).
    #[cfg(test)]
    pub(crate) fn stored_len(&self) -> usize {
        self.data.len() - self.bounds().1
    }

    #[cfg(test)]
    fn is_packed(&self) -> bool {
        matches!(self.form, Form::Packed { .. })
    }
}

/// Compresses objects against a dictionary that it builds from the first objects it sees (see
/// the module documentation). One per watcher thread.
#[derive(Default)]
pub(crate) struct Packer {
    /// The current dictionary (empty before the first object), hashed once for every object
    /// compressed against it (src/cache/lz4.rs).
    dictionary: Dictionary,
    /// Samples chosen for the dictionary, waiting to make up a step.
    waiting: Vec<u8>,
}

impl Packer {
    /// `encoded` as the compressed store keeps it, with the object's `uid` and `rv`: compressed
    /// against the dictionary, or as it is when compression does not make it smaller.
    pub(crate) fn pack(&mut self, uid: Option<&str>, rv: Option<&str>, encoded: &[u8]) -> Encoded {
        let Ok(len) = u32::try_from(encoded.len()) else {
            // Far above any line or body the client accepts; kept as it is all the same.
            return Encoded::plain(uid, rv, encoded);
        };
        let mut bytes = lz4::compress(encoded, &self.dictionary);
        if self.learn(encoded, bytes.len()) {
            bytes = lz4::compress(encoded, &self.dictionary);
        }
        if bytes.len() >= encoded.len() {
            return Encoded::plain(uid, rv, encoded);
        }
        Encoded::with(uid, rv, &bytes, Form::Packed { len, dictionary: Arc::clone(self.dictionary.bytes()) })
    }

    /// Takes `encoded` (which compressed to `packed` bytes) as a sample when the dictionary does
    /// not cover it well and has room; returns whether the dictionary changed.
    fn learn(&mut self, encoded: &[u8], packed: usize) -> bool {
        let covered = packed.saturating_mul(4) <= encoded.len();
        let dictionary = self.dictionary.bytes();
        let room = WINDOW.saturating_sub(dictionary.len() + self.waiting.len());
        if covered || encoded.len().saturating_mul(2) > room {
            return false;
        }
        self.waiting.extend_from_slice(encoded);
        if self.waiting.len() < STEP && !dictionary.is_empty() {
            return false;
        }
        let mut grown = Vec::with_capacity(dictionary.len() + self.waiting.len());
        grown.extend_from_slice(dictionary);
        grown.append(&mut self.waiting);
        self.dictionary = Dictionary::new(grown.into());
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(i: usize, image: &str) -> Vec<u8> {
        format!(
            r#"{{"metadata":{{"name":"web-{i:06}","namespace":"ns-{}","uid":"6f1c2a8e-0d1b-4c55-9b8e-{i:012}","labels":{{"app":"web","tier":"frontend"}}}},"spec":{{"containers":[{{"name":"app","image":"{image}","ports":[{{"containerPort":8080,"protocol":"TCP"}}]}}],"nodeName":"node-{}"}},"status":{{"phase":"Running","podIP":"10.244.{}.{}"}}}}"#,
            i % 7,
            i % 13,
            i % 250,
            i % 200
        )
        .into_bytes()
    }

    #[test]
    fn every_entry_reads_back_as_it_was_stored_across_dictionary_growth() {
        let mut packer = Packer::default();
        // Every 50 objects a new team comes, whose objects carry text unlike anything before.
        let team_text = |team: usize| -> String {
            (0..120).map(|k| format!("{:x}", (team * 7919 + k * 104_729) % 65_521)).collect::<Vec<_>>().join("-")
        };
        let objects: Vec<Vec<u8>> =
            (0..300).map(|i| pod(i, &format!("team-{}/{}", i / 50, team_text(i / 50)))).collect();
        let packed: Vec<Encoded> = objects.iter().map(|o| packer.pack(Some("u"), Some("1"), o)).collect();
        let dictionaries: std::collections::HashSet<usize> = packed
            .iter()
            .filter_map(|j| match &j.form {
                Form::Packed { dictionary, .. } => Some(dictionary.len()),
                Form::Plain => None,
            })
            .collect();
        assert!(dictionaries.len() > 1, "the dictionary grew as new images came: {dictionaries:?}");
        for (object, encoded) in objects.iter().zip(&packed) {
            assert_eq!(encoded.bytes().unwrap().as_ref(), object.as_slice());
        }
    }

    #[test]
    fn similar_objects_take_a_fraction_of_their_size() {
        let mut packer = Packer::default();
        let objects: Vec<Vec<u8>> = (0..100).map(|i| pod(i, "registry.example.com/shop/web:1.24.3")).collect();
        let raw: usize = objects[1..].iter().map(Vec::len).sum();
        packer.pack(None, None, &objects[0]);
        let stored: usize = objects[1..].iter().map(|o| packer.pack(None, None, o).stored_len()).sum();
        assert!(stored * 3 < raw, "{stored} bytes stored for {raw} bytes of JSON");
    }

    #[test]
    fn the_dictionary_stays_bounded_and_odd_input_is_kept_as_it_is() {
        let mut packer = Packer::default();
        // Incompressible, distinct objects: each is a poor fit, so each is a candidate sample.
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        for _ in 0..200 {
            let object: Vec<u8> = (0..700)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    seed as u8
                })
                .collect();
            let encoded = packer.pack(None, None, &object);
            assert_eq!(encoded.bytes().unwrap().as_ref(), object.as_slice());
        }
        let dictionary = packer.dictionary.bytes().len();
        assert!(dictionary + 2 * 700 <= WINDOW, "{dictionary}");
        assert!(!packer.pack(None, None, b"").is_packed());
        let big = vec![b'x'; 3 * WINDOW];
        assert_eq!(packer.pack(None, None, &big).bytes().unwrap().as_ref(), big.as_slice());
    }

    #[test]
    fn the_uid_and_resource_version_read_back_beside_the_bytes_absent_and_empty_told_apart() {
        let mut packer = Packer::default();
        let object = br#"{"metadata":{"name":"a"},"data":{"k":"vvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvv"}}"#;
        for (uid, rv) in [
            (Some("6f1c2a8e-0d1b-4c55-9b8e-000000000001"), Some("12345")),
            (None, Some("7")),
            (Some("u"), None),
            (None, None),
            (Some(""), Some("")),
            (Some(""), None),
            (None, Some("")),
        ] {
            for encoded in [Encoded::plain(uid, rv, object), packer.pack(uid, rv, object)] {
                assert_eq!((encoded.uid(), encoded.resource_version()), (uid, rv));
                assert_eq!(encoded.bytes().unwrap().as_ref(), object.as_slice());
                assert_eq!(encoded.len(), object.len());
            }
        }
    }
}
