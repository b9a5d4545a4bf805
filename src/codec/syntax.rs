//! A strict JSON syntax check: accepts nothing that serde_json's parser rejects.
//!
//! simd-json decodes faster than serde_json but accepts some invalid JSON (a raw control byte
//! inside a number, found by tests/integration/decode.rs), so every input is checked here first. One pass,
//! no allocation, strings skipped eight bytes at a time: for a 6 KB pod about 42k instructions
//! where serde_json's own skip-parse (`IgnoredAny`), which did this job before, takes 77k.
//!
//! The grammar is RFC 8259's, as serde_json implements it: whitespace is space, tab, CR and
//! LF; numbers have no leading zeros, `+`, bare `.` or exponent without digits; strings hold no
//! raw byte below 0x20 and only the escapes `\" \\ \/ \b \f \n \r \t \uXXXX`; one value, then
//! only whitespace; at most [`MAX_DEPTH`] nested arrays and objects. It is stricter than
//! serde_json's skip-parse in two places: a `\u` surrogate must be paired, and nesting is
//! limited everywhere (serde_json checks both only in what it decodes, not in what it skips).
//! Stricter is safe: the caller then decodes with serde_json, whose verdict stands.
//! UTF-8 is not checked here: simd-json checks it, and the serde_json path checks it first.
//!
//! It also refuses valid numbers that the two parsers read as different values, so that simd-json
//! only ever decodes what serde_json would decode to the same thing (tests/integration/decode.rs compares
//! them): `-0`, which serde_json reads as the float -0.0 (an integer field refuses it) and
//! simd-json as the integer 0; and floats with more than 15 digits or a decimal exponent beyond
//! ±22, where serde_json's fast conversion may be one unit in the last place off simd-json's
//! correctly rounded result. Integers and ordinary floats (`0.5`, `1e5`, `-1.25e-3`) pass.

/// serde_json's recursion limit when decoding: 128 levels fail, 127 pass.
pub(crate) const MAX_DEPTH: usize = 127;

/// Bytes that may appear unescaped in a string, besides the ones that end a plain run.
const fn plain_table() -> [bool; 256] {
    let mut t = [true; 256];
    let mut i = 0;
    while i < 0x20 {
        t[i] = false;
        i += 1;
    }
    t[b'"' as usize] = false;
    t[b'\\' as usize] = false;
    t
}

/// True for bytes that continue a string without ending it or starting an escape.
static PLAIN: [bool; 256] = plain_table();

/// True when `input` is one JSON value (plus surrounding whitespace) that serde_json accepts.
#[cfg_attr(not(feature = "simd"), allow(dead_code))] // without simd-json, serde_json checks
pub(crate) fn is_valid(input: &[u8]) -> bool {
    Checker { b: input, i: 0, base: 0 }.value(true).is_some()
}

/// What [`container_prefix`] found at the start of its input.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Prefix {
    /// A valid object or array of this many bytes.
    Complete(usize),
    /// Valid so far, but the input ends before the container does.
    Incomplete,
    /// Invalid, or not a container: the caller must look for the end some other way.
    Other,
}

/// Checks the object or array at the very start of `input` and finds where it ends, for a
/// reader that holds only part of a stream (a list body). Scalars are `Other`: a number at the
/// end of the input might go on in bytes not read yet.
pub(crate) fn container_prefix(input: &[u8]) -> Prefix {
    if !matches!(input.first(), Some(b'{' | b'[')) {
        return Prefix::Other;
    }
    let mut c = Checker { b: input, i: 0, base: 0 };
    match c.value(false) {
        Some(()) => Prefix::Complete(c.i),
        // Every check stops at the first byte it cannot accept; only running out of input
        // leaves the cursor at the end. (A check that needs a few bytes more, such as `true`
        // cut after `tr`, stops short of the end and says `Other`: slower, never wrong.)
        None if c.i >= input.len() => Prefix::Incomplete,
        None => Prefix::Other,
    }
}

/// The cursor. Every method returns `None` on the first syntax error.
struct Checker<'a> {
    b: &'a [u8],
    i: usize,
    /// How deeply nested the value [`Checker::value`] reads already is (a [`Cursor`]'s walk).
    base: usize,
}

/// A cursor for walks that copy parts of a JSON value and leave others out
/// (`codec/skip/json.rs`): each step checks what it passes by the rules of [`is_valid`], so a
/// walk that reaches the end has checked the whole input.
pub(crate) struct Cursor<'a>(Checker<'a>);

impl<'a> Cursor<'a> {
    pub(crate) fn new(input: &'a [u8]) -> Self {
        Cursor(Checker { b: input, i: 0, base: 0 })
    }

    /// The offset of the next byte.
    pub(crate) fn at(&self) -> usize {
        self.0.i
    }

    pub(crate) fn peek(&self) -> Option<u8> {
        self.0.peek()
    }

    /// Steps over the byte [`Cursor::peek`] showed.
    pub(crate) fn bump(&mut self) {
        self.0.i += 1;
    }

    /// Skips JSON whitespace.
    pub(crate) fn ws(&mut self) {
        self.0.ws();
    }

    /// A whole string, from its opening quote (which must be next) to its closing one.
    pub(crate) fn string(&mut self) -> Option<()> {
        if self.0.peek()? != b'"' {
            return None;
        }
        self.0.i += 1;
        self.0.string()
    }

    /// One value (whitespace before it skipped), inside `depth` open arrays and objects: the
    /// nesting limit counts them.
    pub(crate) fn value(&mut self, depth: usize) -> Option<()> {
        self.0.base = depth;
        self.0.value(false)
    }
}

impl Checker<'_> {
    /// One value. `whole`: it must fill the input, with only whitespace around it; else the
    /// cursor stops right after it.
    fn value(&mut self, whole: bool) -> Option<()> {
        // Container kinds of the open levels, one bit each (1 = object); MAX_DEPTH < 128.
        let mut objects: u128 = 0;
        let mut depth = 0usize;
        // The innermost open container is an object (bit `depth` of `objects`).
        let mut in_object = false;
        self.ws();
        'value: loop {
            // A value starts at `self.i` (whitespace skipped).
            match *self.b.get(self.i)? {
                b'{' => {
                    self.i += 1;
                    self.ws();
                    if self.peek() == Some(b'}') {
                        self.i += 1;
                    } else {
                        depth += 1;
                        if self.base + depth > MAX_DEPTH {
                            return None;
                        }
                        objects |= 1 << depth;
                        in_object = true;
                        self.key()?;
                        continue 'value;
                    }
                }
                b'[' => {
                    self.i += 1;
                    self.ws();
                    if self.peek() == Some(b']') {
                        self.i += 1;
                    } else {
                        depth += 1;
                        if self.base + depth > MAX_DEPTH {
                            return None;
                        }
                        objects &= !(1 << depth);
                        in_object = false;
                        continue 'value;
                    }
                }
                b'"' => {
                    self.i += 1;
                    self.string()?;
                }
                b't' => self.literal(b"true")?,
                b'f' => self.literal(b"false")?,
                b'n' => self.literal(b"null")?,
                b'-' | b'0'..=b'9' => self.number()?,
                _ => return None,
            }
            // After a value: a separator, or the end of one or more containers.
            loop {
                if depth == 0 && !whole {
                    return Some(());
                }
                self.ws();
                if depth == 0 {
                    return (!whole || self.i == self.b.len()).then_some(());
                }
                match (*self.b.get(self.i)?, in_object) {
                    (b',', true) => {
                        self.i += 1;
                        self.ws();
                        self.key()?;
                        continue 'value;
                    }
                    (b',', false) => {
                        self.i += 1;
                        self.ws();
                        continue 'value;
                    }
                    (b'}', true) | (b']', false) => {
                        self.i += 1;
                        depth -= 1;
                        in_object = objects & (1 << depth) != 0;
                    }
                    _ => return None,
                }
            }
        }
    }

    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    /// Skips JSON whitespace.
    #[inline(always)]
    fn ws(&mut self) {
        // Compact JSON has none: one comparison settles the common case.
        if self.b.get(self.i).is_some_and(|&c| c > b' ') {
            return;
        }
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = self.b.get(self.i) {
            self.i += 1;
        }
    }

    /// An object key, its colon and the whitespace before the value.
    #[inline(always)]
    fn key(&mut self) -> Option<()> {
        if self.peek()? != b'"' {
            return None;
        }
        self.i += 1;
        self.string()?;
        self.ws();
        if self.peek()? != b':' {
            return None;
        }
        self.i += 1;
        self.ws();
        Some(())
    }

    /// The rest of a string, after its opening quote, up to and including the closing one.
    #[inline(always)]
    fn string(&mut self) -> Option<()> {
        loop {
            self.plain_run();
            match *self.b.get(self.i)? {
                b'"' => {
                    self.i += 1;
                    return Some(());
                }
                b'\\' => {
                    self.i += 1;
                    self.escape()?;
                }
                _ => return None, // a raw control byte
            }
        }
    }

    /// Skips bytes that neither end a string nor start an escape: eight at a time while
    /// possible (the test is serde_json's), then one by one.
    #[inline(always)]
    fn plain_run(&mut self) {
        const ONES: u64 = u64::MAX / 255;
        const HIGH: u64 = ONES << 7;
        while let Some(chunk) = self.b.get(self.i..self.i + 8) {
            let w = u64::from_le_bytes(chunk.try_into().unwrap_or_default());
            let ctrl = w.wrapping_sub(ONES * 0x20) & !w;
            let q = w ^ (ONES * u64::from(b'"'));
            let quote = q.wrapping_sub(ONES) & !q;
            let s = w ^ (ONES * u64::from(b'\\'));
            let backslash = s.wrapping_sub(ONES) & !s;
            let stop = (ctrl | quote | backslash) & HIGH;
            if stop != 0 {
                // The lowest flagged byte is the first stop (borrows only run upwards).
                self.i += (stop.trailing_zeros() / 8) as usize;
                return;
            }
            self.i += 8;
        }
        while let Some(&c) = self.b.get(self.i) {
            if !PLAIN[usize::from(c)] {
                return;
            }
            self.i += 1;
        }
    }

    /// One escape, after its backslash. A `\u` surrogate must come in a pair.
    fn escape(&mut self) -> Option<()> {
        let c = self.peek()?;
        self.i += 1;
        match c {
            b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => Some(()),
            b'u' => match self.hex4()? {
                0xD800..=0xDBFF => {
                    if self.b.get(self.i..self.i + 2)? != b"\\u" {
                        return None;
                    }
                    self.i += 2;
                    matches!(self.hex4()?, 0xDC00..=0xDFFF).then_some(())
                }
                0xDC00..=0xDFFF => None,
                _ => Some(()),
            },
            _ => None,
        }
    }

    fn hex4(&mut self) -> Option<u16> {
        let digits = self.b.get(self.i..self.i + 4)?;
        let mut n = 0u16;
        for &d in digits {
            let v = match d {
                b'0'..=b'9' => d - b'0',
                b'a'..=b'f' => d - b'a' + 10,
                b'A'..=b'F' => d - b'A' + 10,
                _ => return None,
            };
            n = n << 4 | u16::from(v);
        }
        self.i += 4;
        Some(n)
    }

    fn literal(&mut self, word: &[u8]) -> Option<()> {
        if self.b.get(self.i..self.i + word.len())? != word {
            return None;
        }
        self.i += word.len();
        Some(())
    }

    /// `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`; what follows is the caller's.
    ///
    /// Also refuses the numbers that serde_json and simd-json read as different values (see
    /// the module docs): `-0`, and a float that serde_json may round differently.
    #[inline(always)]
    fn number(&mut self) -> Option<()> {
        let negative = self.peek() == Some(b'-');
        if negative {
            self.i += 1;
        }
        let start = self.i;
        match self.peek()? {
            b'0' => self.i += 1,
            b'1'..=b'9' => self.digits(),
            _ => return None,
        }
        match self.peek() {
            Some(b'.' | b'e' | b'E') => self.float(self.i - start),
            // serde_json reads `-0` as the float -0.0 (refused by an integer field), simd-json
            // as the integer 0.
            _ if negative && self.i - start == 1 && self.b[start] == b'0' => None,
            _ => Some(()),
        }
    }

    /// The fraction and exponent of a number whose integer part had `digits` digits.
    ///
    /// serde_json (without its `float_roundtrip` feature) computes `significand × 10^exponent`
    /// in f64: exact, and so equal to simd-json's correctly rounded value, only when the
    /// significand is below 2^53 (here: at most 15 digits in all) and the decimal exponent is
    /// within ±22 (10^22 is the largest power of ten an f64 holds exactly). Others are refused.
    #[cold]
    fn float(&mut self, digits: usize) -> Option<()> {
        let mut digits = digits as i64;
        let mut exponent = 0i64;
        if self.peek() == Some(b'.') {
            self.i += 1;
            let start = self.i;
            self.digits1()?;
            let fraction = (self.i - start) as i64;
            digits += fraction;
            exponent -= fraction;
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.i += 1;
            let negative = match self.peek() {
                Some(b'-') => {
                    self.i += 1;
                    true
                }
                Some(b'+') => {
                    self.i += 1;
                    false
                }
                _ => false,
            };
            let start = self.i;
            let mut e = 0i64;
            while let Some(d @ b'0'..=b'9') = self.peek() {
                // Saturates far beyond any exponent that passes below.
                e = (e * 10 + i64::from(d - b'0')).min(1 << 32);
                self.i += 1;
            }
            if self.i == start {
                return None;
            }
            exponent += if negative { -e } else { e };
        }
        (digits <= 15 && exponent.abs() <= 22).then_some(())
    }

    fn digits(&mut self) {
        while let Some(b'0'..=b'9') = self.peek() {
            self.i += 1;
        }
    }

    /// At least one digit.
    fn digits1(&mut self) -> Option<()> {
        let start = self.i;
        self.digits();
        (self.i > start).then_some(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What serde_json's skip-parse says (the reference), with UTF-8 set aside.
    fn serde_ok(input: &[u8]) -> bool {
        serde_json::from_slice::<serde::de::IgnoredAny>(input).is_ok()
    }

    /// Whether `input` (valid JSON) holds a number of a form refused on purpose: `-0`, or a
    /// float (with a fraction or an exponent) beyond the exact range; floats are allowed to
    /// differ as a whole here, and judged one by one in
    /// `numbers_read_differently_by_the_two_parsers_are_refused`.
    fn has_refusable_number(input: &[u8]) -> bool {
        let (mut i, mut in_str) = (0, false);
        while i < input.len() {
            let c = input[i];
            if in_str {
                match c {
                    b'\\' => i += 1,
                    b'"' => in_str = false,
                    _ => {}
                }
            } else if c == b'"' {
                in_str = true;
            } else if c == b'-' || c.is_ascii_digit() {
                let end = input[i..]
                    .iter()
                    .position(|b| !matches!(b, b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9'))
                    .map_or(input.len(), |n| i + n);
                let token = &input[i..end];
                if token == b"-0" || token.iter().any(|b| matches!(b, b'.' | b'e' | b'E')) {
                    return true;
                }
                i = end;
                continue;
            }
            i += 1;
        }
        false
    }

    #[track_caller]
    fn agree(input: &[u8]) {
        let (strict, serde) = (is_valid(input), serde_ok(input));
        assert!(
            strict == serde || (serde && has_refusable_number(input)),
            "strict {strict}, serde_json {serde}: {:?}",
            String::from_utf8_lossy(input)
        );
    }

    #[test]
    fn valid_documents_pass() {
        for ok in [
            &br#"{"a":1,"b":[true,false,null],"c":{"d":"e\"\\\/\b\f\n\r\tx\u00e9\uD83D\uDE00"}}"#[..],
            b" [ 1 , -1 , 0 , -0.0 , 0.5 , 1e5 , 1E+5 , -1.25e-3 , \"\" , { } , [ ] ] \r\n\t",
            b"0",
            b"\"just a string\"",
            b"{\"k\":\"\xc3\xa9 utf-8 passes through\"}",
        ] {
            assert!(is_valid(ok), "{:?}", String::from_utf8_lossy(ok));
            agree(ok);
        }
    }

    #[test]
    fn what_serde_json_rejects_is_rejected() {
        for bad in [
            &b""[..],
            b"   ",
            b"{\"code\":4\x0810}",
            b"[4x]",
            b"[01]",
            b"[1.]",
            b"[.5]",
            b"[+1]",
            b"[-]",
            b"[1e]",
            b"[1e+]",
            b"[0x10]",
            b"[1 2]",
            b"[1,]",
            b"[,1]",
            b"{\"a\":1,}",
            b"{,}",
            b"{\"a\" 1}",
            b"{\"a\":}",
            b"{1:2}",
            b"{\"a\":1 \"b\":2}",
            b"[1]]",
            b"[1] [2]",
            b"[1]x",
            b"[tru]",
            b"[truex]",
            b"[nul]",
            b"[NaN]",
            b"[\"a\x01\"]",
            b"[\"tab\tinside\"]",
            b"[\"\\q\"]",
            b"[\"\\u12\"]",
            b"[\"\\u12g4\"]",
            b"[\"unterminated]",
            b"\x0c[1]",
            b"[\x001]",
            b"{\"a\":[}",
            b"[{]}",
        ] {
            assert!(!is_valid(bad), "{:?}", String::from_utf8_lossy(bad));
            assert!(!serde_ok(bad), "serde_json accepts {:?}", String::from_utf8_lossy(bad));
        }
    }

    /// simd-json and serde_json read these valid numbers differently (as
    /// found or as serde_json's rounding allows), so simd-json must never see them.
    #[test]
    fn numbers_read_differently_by_the_two_parsers_are_refused() {
        for (number, passes) in [
            ("0", true),
            ("-1", true),
            ("-0", false),
            ("-0.0", true),
            ("-0e0", true),
            ("1e2", true),
            ("1.0", true),
            ("-9223372036854775808", true),
            ("18446744073709551615", true),
            ("18446744073709551616", true), // an integer: simd-json refuses it, serde_json decides
            ("123456789.123456", true),
            ("1234567890.123456", false),
            ("0.30000000000000004", false),
            ("1e22", true),
            ("1e23", false),
            ("1.5e-21", true),
            ("1.5e-22", false),
            ("1e400", false),
            ("1e-99999999999999999999", false),
            ("0.000000000000000000000000000000000000000000001", false),
        ] {
            let doc = format!("[{number}]");
            assert!(serde_ok(doc.as_bytes()), "{number}");
            assert_eq!(is_valid(doc.as_bytes()), passes, "{number}");
            // A number at the end of a partial list item may go on: not refused yet.
            assert_eq!(container_prefix(format!("[{number}").as_bytes()), Prefix::Incomplete, "{number}");
            let prefix = container_prefix(format!("[{number},2]").as_bytes());
            assert_eq!(prefix == Prefix::Complete(number.len() + 4), passes, "{number}: {prefix:?}");
        }
    }

    #[test]
    fn a_container_prefix_ends_where_the_container_does() {
        let doc = br#"{"a":[1,{"b":"]}\""}],"c":tru"#;
        assert_eq!(container_prefix(br#"{"a":1} ,{"b":2}"#), Prefix::Complete(7));
        assert_eq!(container_prefix(b"[1,2]]"), Prefix::Complete(5));
        for end in 1..doc.len() - 3 {
            assert_eq!(container_prefix(&doc[..end]), Prefix::Incomplete, "{:?}", String::from_utf8_lossy(&doc[..end]));
        }
        assert_eq!(container_prefix(b"{\"a\":1x}"), Prefix::Other);
        assert_eq!(container_prefix(b"12"), Prefix::Other, "a scalar may go on");
        assert_eq!(container_prefix(b" {}"), Prefix::Other, "the caller skips whitespace");
    }

    #[test]
    fn lone_surrogates_are_refused_though_serde_json_skips_them() {
        for s in [&br#"["\uD800"]"#[..], br#"["\uDC00"]"#, br#"["\uD800\n"]"#, br#"["\uD800\u0041"]"#] {
            assert!(!is_valid(s), "{:?}", String::from_utf8_lossy(s));
        }
    }

    #[test]
    fn nesting_stops_where_serde_json_stops_decoding() {
        // serde_json skips any depth but decodes at most 127 levels; past that, we refuse too and
        // leave the verdict to serde_json.
        for depth in [1, 126, 127, 128, 200] {
            for (open, close) in [("[", "]"), ("{\"k\":", "}")] {
                let doc = format!("{}1{}", open.repeat(depth), close.repeat(depth));
                assert!(serde_ok(doc.as_bytes()));
                assert_eq!(is_valid(doc.as_bytes()), depth <= MAX_DEPTH, "depth {depth}");
                let decoded = serde_json::from_slice::<serde_json::Value>(doc.as_bytes()).is_ok();
                assert_eq!(decoded, depth <= MAX_DEPTH, "depth {depth}");
            }
        }
    }

    #[test]
    fn every_truncation_and_every_single_byte_change_is_judged_like_serde_json() {
        let doc =
            br#"{"type":"MODIFIED","object":{"a":[1,-2.5e+3,true,false,null,"x\"\\\u00e9"],"b":{},"c":[],"d":0}}"#;
        for end in 0..doc.len() {
            agree(&doc[..end]);
        }
        let mut m = doc.to_vec();
        for at in 0..doc.len() {
            for byte in [
                b'"', b'\\', b'{', b'}', b'[', b']', b',', b':', b' ', b'0', b'1', b'-', b'.', b'e', b'+', b'x', b'u',
                b'n', 0, 0x08, 0x1f, b'\t', b'\n',
            ] {
                m[at] = byte;
                agree(&m);
                m.insert(at, byte);
                agree(&m);
                m.remove(at);
            }
            m[at] = doc[at];
        }
    }
}
