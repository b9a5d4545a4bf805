//! An LZ4 block compressor against a dictionary whose hash table is built once.
//!
//! The compressed store compresses every object against the same dictionary of up to 64 KiB.
//! lz4_flex's `compress_with_dict` hashes the whole dictionary again at every call: about 20 000
//! positions, several times the work of compressing a 4 KB object. Here [`Dictionary::new`]
//! hashes it once; each [`compress`] then looks up the dictionary's table (never written) and a
//! table of the object's own positions (zeroed per call). The output is a plain LZ4 block, which
//! lz4_flex's `decompress_with_dict` reads with the same dictionary
//! (`lz4_flex_reads_what_this_writes` below).
//!
//! The LZ4 block format: a sequence of (token, literals, offset, match) groups. The token's high
//! four bits are the literal count and its low four bits the match length less 4, each 15
//! meaning "more in the bytes that follow" (255 each, until a byte below 255). The offset is
//! two bytes, little-endian, 1 to 65535 back from the match's start, into the output or on into
//! the dictionary before it. The last group has literals only; the last 5 bytes of a block are
//! literals, and no match starts in its last 12.

use std::sync::Arc;

/// The shortest match LZ4 encodes.
const MIN_MATCH: usize = 4;
/// The last bytes of a block are always literals.
const LAST_LITERALS: usize = 5;
/// No match starts this close to the end of a block.
const MATCH_FIND_LIMIT: usize = 12;
/// The farthest back an offset reaches.
const MAX_OFFSET: usize = u16::MAX as usize;
/// The dictionary's table: 2^14 slots (64 KiB), one per hash of four bytes, each the last
/// dictionary position with that hash, plus one (0: none). Larger than lz4_flex's 4096 slots,
/// so that more of a 64 KiB dictionary stays findable; it is built once, not per call.
const DICT_HASH_BITS: u32 = 14;
/// The object's own table: 2^12 slots (16 KiB), zeroed at each call.
const OWN_HASH_BITS: u32 = 12;

/// A dictionary and its hash table, built once and shared by every object compressed against it.
pub(crate) struct Dictionary {
    bytes: Arc<[u8]>,
    table: Box<[u32]>,
}

impl Dictionary {
    /// Hashes every position of `bytes` that four bytes start at (later positions win a slot).
    /// Only the last 64 KiB of a longer dictionary can be referred to.
    pub(crate) fn new(bytes: Arc<[u8]>) -> Dictionary {
        let mut table = vec![0u32; 1 << DICT_HASH_BITS].into_boxed_slice();
        let start = bytes.len().saturating_sub(MAX_OFFSET);
        for p in start..bytes.len().saturating_sub(MIN_MATCH - 1) {
            table[hash(read4(&bytes, p), DICT_HASH_BITS)] = slot(p);
        }
        Dictionary { bytes, table }
    }

    /// The dictionary's bytes (what decompression needs).
    pub(crate) fn bytes(&self) -> &Arc<[u8]> {
        &self.bytes
    }
}

impl Default for Dictionary {
    fn default() -> Dictionary {
        Dictionary::new(Arc::from(&[][..]))
    }
}

/// A table slot for position `p`: `p + 1`, 0 standing for none. A position past 2^32 - 1 is
/// not kept (no object or dictionary the client accepts comes near), which only costs size.
fn slot(p: usize) -> u32 {
    u32::try_from(p + 1).unwrap_or(0)
}

/// The position a table slot holds, if any.
fn position(slot: u32) -> Option<usize> {
    (slot as usize).checked_sub(1)
}

/// Four bytes at `p`, as a number (callers check that they are there).
fn read4(bytes: &[u8], p: usize) -> u32 {
    u32::from_le_bytes([bytes[p], bytes[p + 1], bytes[p + 2], bytes[p + 3]])
}

/// Fibonacci hashing of four bytes to `bits` bits.
fn hash(four: u32, bits: u32) -> usize {
    (four.wrapping_mul(2_654_435_761) >> (32 - bits)) as usize
}

/// How many bytes `a` and `b` share from their starts: eight at a time, then one at a time.
fn common(a: &[u8], b: &[u8]) -> usize {
    let n = a.len().min(b.len());
    let eight = |s: &[u8], i: usize| {
        let mut word = [0u8; 8];
        word.copy_from_slice(&s[i..i + 8]);
        u64::from_le_bytes(word)
    };
    let mut i = 0;
    while i + 8 <= n {
        let differ = eight(a, i) ^ eight(b, i);
        if differ != 0 {
            // The lowest differing bit is in the first differing byte (little-endian).
            return i + (differ.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    i + a[i..n].iter().zip(&b[i..n]).take_while(|(x, y)| x == y).count()
}

/// `input` as an LZ4 block against `dictionary` (bytes that, to the decompressor, come just
/// before the output).
pub(crate) fn compress(input: &[u8], dictionary: &Dictionary) -> Vec<u8> {
    let dict: &[u8] = &dictionary.bytes;
    let mut out = Vec::with_capacity(input.len() / 2 + 16);
    let mut anchor = 0;
    if input.len() > MATCH_FIND_LIMIT {
        let mut own = vec![0u32; 1 << OWN_HASH_BITS];
        // Matches start at or before `last_start` and end at or before `match_end`.
        let last_start = input.len() - MATCH_FIND_LIMIT;
        let match_end = input.len() - LAST_LITERALS;
        let mut i = 0;
        while i <= last_start {
            let four = read4(input, i);
            let own_slot = &mut own[hash(four, OWN_HASH_BITS)];
            let earlier = position(*own_slot);
            *own_slot = slot(i);
            // A match in the object itself, or in the dictionary: the longer of the two.
            let own_match = earlier
                .filter(|&e| i - e <= MAX_OFFSET && read4(input, e) == four)
                .map(|e| (i - e, common(&input[e..match_end], &input[i..match_end])));
            let dict_match = position(dictionary.table[hash(four, DICT_HASH_BITS)]).and_then(|d| {
                let back = dict.len() - d + i;
                if back > MAX_OFFSET || d + MIN_MATCH > dict.len() || read4(dict, d) != four {
                    return None;
                }
                let mut len = common(&dict[d..], &input[i..match_end]);
                if d + len == dict.len() {
                    // It runs to the dictionary's end: on into the object's start, as the
                    // decompressor reads on from the dictionary into what it wrote.
                    len += common(input, &input[i + len..match_end]);
                }
                Some((back, len))
            });
            let found = match (own_match, dict_match) {
                (Some(own), Some(dict)) => Some(if dict.1 > own.1 { dict } else { own }),
                (own, dict) => own.or(dict),
            };
            let Some((back, mut len)) = found else {
                // Skip faster through bytes that find nothing (as LZ4 itself does).
                i += 1 + ((i - anchor) >> 6);
                continue;
            };
            // Grow the match backwards over literals not yet written.
            let mut start = i;
            while start > anchor {
                let before = start - 1;
                let source = match before.checked_sub(back) {
                    Some(s) => input[s],
                    None => match (dict.len() + before).checked_sub(back) {
                        Some(s) => dict[s],
                        None => break,
                    },
                };
                if source != input[before] {
                    break;
                }
                start = before;
                len += 1;
            }
            sequence(&mut out, &input[anchor..start], Some((back, len)));
            i = start + len;
            anchor = i;
            // The positions a match jumps over are not looked up; two bytes before its end is
            // worth remembering for the next (as LZ4 itself does).
            if let Some(p) = i.checked_sub(2).filter(|p| p + MIN_MATCH <= input.len()) {
                own[hash(read4(input, p), OWN_HASH_BITS)] = slot(p);
            }
        }
    }
    sequence(&mut out, &input[anchor..], None);
    out
}

/// Appends one group: a token, `literals`, and the match (`back` bytes back, `len` long).
fn sequence(out: &mut Vec<u8>, literals: &[u8], found: Option<(usize, usize)>) {
    let literal_nibble = literals.len().min(15);
    let match_nibble = found.map_or(0, |(_, len)| (len - MIN_MATCH).min(15));
    // OK: both nibbles are at most 15.
    out.push(((literal_nibble << 4) | match_nibble) as u8);
    if literals.len() >= 15 {
        length(out, literals.len() - 15);
    }
    out.extend_from_slice(literals);
    if let Some((back, len)) = found {
        // OK: back is at most MAX_OFFSET (u16::MAX).
        out.extend_from_slice(&(back as u16).to_le_bytes());
        if len - MIN_MATCH >= 15 {
            length(out, len - MIN_MATCH - 15);
        }
    }
}

/// The rest of a length: 255 for each full 255, then what is left.
fn length(out: &mut Vec<u8>, mut rest: usize) {
    while rest >= 255 {
        out.push(255);
        rest -= 255;
    }
    // OK: below 255.
    out.push(rest as u8);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small deterministic generator: inputs with runs, repeats of earlier parts and noise.
    struct Gen(u64);

    impl Gen {
        fn next(&mut self, below: usize) -> usize {
            self.0 = self.0.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            ((self.0 >> 33) as usize) % below.max(1)
        }

        fn bytes(&mut self, len: usize, from: &[u8]) -> Vec<u8> {
            let mut v = Vec::with_capacity(len);
            while v.len() < len {
                match self.next(4) {
                    0 if !from.is_empty() => {
                        let at = self.next(from.len());
                        let n = self.next(300).min(from.len() - at);
                        v.extend_from_slice(&from[at..at + n]);
                    }
                    1 if !v.is_empty() => {
                        let at = self.next(v.len());
                        let n = self.next(300).min(v.len() - at);
                        v.extend_from_within(at..at + n);
                    }
                    2 => v.extend(std::iter::repeat_n(b"ab"[self.next(2)], self.next(40))),
                    _ => v.extend((0..self.next(20)).map(|_| self.next(256) as u8)),
                }
            }
            v.truncate(len);
            v
        }
    }

    fn round_trip(input: &[u8], dict: &Dictionary) -> Vec<u8> {
        let packed = compress(input, dict);
        let back = lz4_flex::block::decompress_with_dict(&packed, input.len(), dict.bytes())
            .unwrap_or_else(|e| panic!("{} bytes, dictionary {}: {e}", input.len(), dict.bytes().len()));
        assert_eq!(back, input, "{} bytes, dictionary {}", input.len(), dict.bytes().len());
        packed
    }

    #[test]
    fn lz4_flex_reads_what_this_writes() {
        let mut g = Gen(7);
        for case in 0..400 {
            let dict_len = [0, 1, 3, 4, 100, 5000, 60_000, 65_535, 65_536][case % 9];
            let dict_source = g.bytes(dict_len, &[]);
            let dict = Dictionary::new(dict_source.clone().into());
            let len = [0, 1, 5, 12, 13, 17, 64, 700, 4000, 20_000, 70_000][g.next(11)];
            let input = g.bytes(len, &dict_source);
            round_trip(&input, &dict);
        }
    }

    #[test]
    fn common_counts_the_shared_start() {
        let a = b"0123456789abcdefghij";
        for n in 0..=a.len() {
            let mut b = a.to_vec();
            if let Some(byte) = b.get_mut(n) {
                *byte = b'!';
            }
            assert_eq!(common(a, &b), n, "first difference at {n}");
            assert_eq!(common(&a[..n], a), n);
        }
    }

    #[test]
    fn long_literals_and_long_matches_are_written_whole() {
        let dict = Dictionary::new(vec![b'x'; 1000].into());
        // A match longer than the dictionary that starts in it, a literal run of many 255s,
        // a run matched against itself (an offset shorter than the match).
        let noise: Vec<u8> = (0..2000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8).collect();
        for input in [vec![b'x'; 5000], noise.clone(), [noise.clone(), vec![b'y'; 3000], noise].concat()] {
            round_trip(&input, &dict);
        }
    }

    /// Objects like the store's, against a dictionary of others like them: as small as
    /// lz4_flex makes them, or smaller.
    #[test]
    fn compresses_as_well_as_lz4_flex_against_the_same_dictionary() {
        let pod = |i: usize| {
            format!(
                r#"{{"metadata":{{"name":"web-{i:06}","namespace":"ns-{}","uid":"6f1c2a8e-0d1b-4c55-9b8e-{i:012}","labels":{{"app":"web","tier":"frontend"}}}},"spec":{{"containers":[{{"name":"app","image":"registry.example/web@sha256:{:064x}","ports":[{{"containerPort":8080,"protocol":"TCP"}}]}}],"nodeName":"node-{}"}},"status":{{"phase":"Running","podIP":"10.244.{}.{}"}}}}"#,
                i % 7,
                i * 7_919,
                i % 13,
                i % 250,
                i % 200
            )
            .into_bytes()
        };
        let dict_bytes: Vec<u8> = (0..40).flat_map(pod).collect();
        let dict = Dictionary::new(dict_bytes.clone().into());
        let (mut ours, mut theirs) = (0, 0);
        for i in 1000..1100 {
            let input = pod(i);
            ours += round_trip(&input, &dict).len();
            theirs += lz4_flex::block::compress_with_dict(&input, &dict_bytes).len();
        }
        assert!(ours <= theirs, "{ours} bytes against lz4_flex's {theirs}");
    }
}
