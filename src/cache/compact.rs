//! How the compact store modes hold an object's encoded form (JSON, or protobuf in its envelope:
//! whatever the wire carried): as it is (`compact_store`), or compressed with LZ4 against a
//! dictionary made of earlier objects (`compressed_store`).
//!
//! Objects of one kind in one cluster repeat themselves: the same keys, labels, images,
//! managedFields, conditions. Compressed alone, a 6 KB pod shrinks to about half; compressed
//! against another pod, to a small fraction, because most of it is a copy of that pod. So the
//! [`Packer`] keeps a dictionary of sample objects: the first object it sees, and later ones
//! that the dictionary does not yet cover well (they compress to more than a quarter of their
//! size), until the dictionary is full. The dictionary is never changed in place: each growth
//! makes a new one, and every packed entry holds the one it was compressed with, so entries
//! packed before and after a growth all stay readable. docs/performance.md has the measurements
//! behind the numbers here.

use std::borrow::Cow;
use std::sync::Arc;

/// The dictionary stops growing at this size. LZ4 refers back at most 64 KiB, counted from the
/// byte being compressed, so a 32 KiB dictionary stays within reach of objects up to 32 KiB.
const DICTIONARY_MAX: usize = 32 * 1024;

/// Samples are added to the dictionary in steps of at least this many bytes, so that small
/// objects do not make a new dictionary each (at most `DICTIONARY_MAX / STEP` of them).
const STEP: usize = 2 * 1024;

/// An object's encoded form as a compact store holds it. Cloning shares the bytes.
#[derive(Clone)]
pub(crate) enum Encoded {
    /// The bytes as they are.
    Plain(Arc<[u8]>),
    /// The bytes compressed (an LZ4 block) against `dictionary`; `len` bytes once decompressed.
    Packed { bytes: Arc<[u8]>, len: u32, dictionary: Arc<[u8]> },
}

impl Encoded {
    /// The bytes, decompressed if need be. `Err` carries the decompressor's message (it cannot
    /// happen for bytes this module packed: see [`Packer::pack`]).
    pub(crate) fn bytes(&self) -> Result<Cow<'_, [u8]>, String> {
        match self {
            Encoded::Plain(bytes) => Ok(Cow::Borrowed(bytes)),
            Encoded::Packed { bytes, len, dictionary } => {
                lz4_flex::block::decompress_with_dict(bytes, *len as usize, dictionary)
                    .map(Cow::Owned)
                    .map_err(|e| format!("decompress a compressed store entry: {e}"))
            }
        }
    }

    /// The length of the bytes, decompressed.
    pub(crate) fn len(&self) -> usize {
        match self {
            Encoded::Plain(bytes) => bytes.len(),
            Encoded::Packed { len, .. } => *len as usize,
        }
    }

    /// The bytes this entry keeps for itself (the dictionary is shared, so not counted).
    #[cfg(test)]
    pub(crate) fn stored_len(&self) -> usize {
        match self {
            Encoded::Plain(bytes) | Encoded::Packed { bytes, .. } => bytes.len(),
        }
    }
}

/// Compresses objects against a dictionary that it builds from the first objects it sees (see
/// the module documentation). One per watcher thread.
#[derive(Default)]
pub(crate) struct Packer {
    /// The current dictionary (empty before the first object).
    dictionary: Arc<[u8]>,
    /// Samples chosen for the dictionary, waiting to make up a step.
    waiting: Vec<u8>,
}

impl Packer {
    /// `encoded` as the compressed store keeps it: compressed against the dictionary, or as it is
    /// when compression does not make it smaller.
    pub(crate) fn pack(&mut self, encoded: &[u8]) -> Encoded {
        let Ok(len) = u32::try_from(encoded.len()) else {
            // Far above any line or body the client accepts; kept as it is all the same.
            return Encoded::Plain(encoded.into());
        };
        let mut bytes = lz4_flex::block::compress_with_dict(encoded, &self.dictionary);
        if self.learn(encoded, bytes.len()) {
            bytes = lz4_flex::block::compress_with_dict(encoded, &self.dictionary);
        }
        if bytes.len() >= encoded.len() {
            return Encoded::Plain(encoded.into());
        }
        Encoded::Packed { bytes: bytes.into(), len, dictionary: Arc::clone(&self.dictionary) }
    }

    /// Takes `encoded` (which compressed to `packed` bytes) as a sample when the dictionary does
    /// not cover it well and has room; returns whether the dictionary changed.
    fn learn(&mut self, encoded: &[u8], packed: usize) -> bool {
        let covered = packed.saturating_mul(4) <= encoded.len();
        let room = DICTIONARY_MAX.saturating_sub(self.dictionary.len() + self.waiting.len());
        if covered || encoded.len() > room {
            return false;
        }
        self.waiting.extend_from_slice(encoded);
        if self.waiting.len() < STEP && !self.dictionary.is_empty() {
            return false;
        }
        let mut grown = Vec::with_capacity(self.dictionary.len() + self.waiting.len());
        grown.extend_from_slice(&self.dictionary);
        grown.append(&mut self.waiting);
        self.dictionary = grown.into();
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
        let packed: Vec<Encoded> = objects.iter().map(|o| packer.pack(o)).collect();
        let dictionaries: std::collections::HashSet<usize> = packed
            .iter()
            .filter_map(|j| match j {
                Encoded::Packed { dictionary, .. } => Some(dictionary.len()),
                Encoded::Plain(_) => None,
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
        packer.pack(&objects[0]);
        let stored: usize = objects[1..].iter().map(|o| packer.pack(o).stored_len()).sum();
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
            let encoded = packer.pack(&object);
            assert_eq!(encoded.bytes().unwrap().as_ref(), object.as_slice());
        }
        assert!(packer.dictionary.len() <= DICTIONARY_MAX, "{}", packer.dictionary.len());
        assert!(matches!(packer.pack(b""), Encoded::Plain(_)));
        let big = vec![b'x'; 3 * DICTIONARY_MAX];
        assert_eq!(packer.pack(&big).bytes().unwrap().as_ref(), big.as_slice());
    }
}
