//! Who an object is, read off its JSON without decoding it: `metadata.namespace`, `name`, `uid`
//! and `resourceVersion`. A relist asks this of every item to find those the store already
//! holds at the same version (they are not decoded again), so it must cost a small fraction of
//! a decode: it walks the top-level object, skips every value but `metadata` without looking
//! inside, and reads `metadata`'s four strings. After `metadata` it stops when the rest of the
//! object cannot hold a second `metadata` key (no `"metadata"` and no `\u` escape in its
//! bytes, two SIMD searches); only otherwise does it walk on to the end, since a decoder reads
//! the last of two (serde_json and k8s-openapi both keep the last value of a repeated key), so
//! an object with two has no certain identity here. For a realistic 6 KB pod that is 1.5 µs
//! (2.9 µs when it walked to the end), against 15–20 µs for a decode.
//!
//! It answers only when the answer is certain: `None` for anything unusual (an escape in one of
//! the four strings, one of them twice or not a string, no `metadata`), and the caller then
//! decodes as usual. It does not validate the JSON: the list scanner (`list.rs`) checks each
//! item while it looks for its end, and hands a malformed one over unchecked, as far as its
//! brackets and quotes go. An item whose identity matches the live entry is taken for that
//! entry whatever the rest of its bytes hold, malformed or not: nothing of it but the identity
//! is read, and the store keeps the object it decoded for that uid at that resourceVersion (the
//! API server gives every change of an object a new resourceVersion; docs/performance.md,
//! "Relists"). An item with another identity is decoded, and a malformed one takes the
//! undecodable-object policy as before.

/// The identity of an object, borrowed from its JSON.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Peeked<'a> {
    pub(crate) namespace: Option<&'a str>,
    pub(crate) name: Option<&'a str>,
    pub(crate) uid: Option<&'a str>,
    pub(crate) resource_version: Option<&'a str>,
}

/// Reads the identity of the object in `json` (see the module documentation).
pub(crate) fn identity(json: &[u8]) -> Option<Peeked<'_>> {
    let mut c = Cursor { b: json, i: 0 };
    c.expect(b'{')?;
    let mut found = None;
    c.ws();
    if c.peek()? == b'}' {
        return None; // no metadata
    }
    loop {
        let key = c.plain_string()?;
        c.expect(b':')?;
        c.ws();
        if key == b"metadata" {
            if found.is_some() {
                return None; // twice: a decoder reads the last one
            }
            found = Some(c.metadata()?);
            // The rest need not be walked when it cannot hold a second `metadata` key: that
            // needs the quoted word, or a `\u` escape spelling it (a key with any other escape
            // cannot be `metadata`). Searching for both is several times faster than the walk.
            let rest = c.b.get(c.i..)?;
            if memchr::memmem::find(rest, b"\"metadata\"").is_none() && memchr::memmem::find(rest, b"\\u").is_none() {
                return found;
            }
        } else {
            c.skip_value()?;
        }
        c.ws();
        match c.next()? {
            b',' => {}
            b'}' => return found,
            _ => return None,
        }
    }
}

/// The event type and the object of a watch line (`{"type":…,"object":{…}}`), read without
/// decoding either, for a shard's test ahead of the decode. `None` unless certain (an escape in
/// the type, a key twice, not an object). When `type` comes first, as the API server writes
/// it, the object's bytes are the rest of the line from its opening brace (what follows its
/// end is never read: [`identity`] stops at the object's end); otherwise exactly the object.
pub(crate) fn event_object(line: &[u8]) -> Option<(&[u8], &[u8])> {
    let mut c = Cursor { b: line, i: 0 };
    c.expect(b'{')?;
    let (mut ty, mut object) = (None, None);
    loop {
        let key = c.plain_string()?;
        c.expect(b':')?;
        c.ws();
        match key {
            b"type" if ty.is_none() => {
                if c.peek()? != b'"' {
                    return None;
                }
                ty = Some(c.plain_string()?);
            }
            b"object" if object.is_none() => {
                let start = c.i;
                if let Some(ty) = ty {
                    return Some((ty, c.b.get(start..)?));
                }
                c.skip_value()?;
                object = Some(c.b.get(start..c.i)?);
            }
            b"type" | b"object" => return None,
            _ => c.skip_value()?,
        }
        c.ws();
        match c.next()? {
            b',' => {}
            b'}' => return Some((ty?, object?)),
            _ => return None,
        }
    }
}

struct Cursor<'a> {
    b: &'a [u8],
    i: usize,
}

impl<'a> Cursor<'a> {
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    fn next(&mut self) -> Option<u8> {
        let c = self.peek()?;
        self.i += 1;
        Some(c)
    }

    /// Skips whitespace, then takes `want`.
    fn expect(&mut self, want: u8) -> Option<()> {
        self.ws();
        (self.next()? == want).then_some(())
    }

    fn ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.i += 1;
        }
    }

    /// A string without escapes, the cursor on its opening quote; its bytes.
    fn plain_string(&mut self) -> Option<&'a [u8]> {
        self.expect(b'"')?;
        let rest = self.b.get(self.i..)?;
        let end = memchr::memchr2(b'"', b'\\', rest)?;
        if rest[end] == b'\\' {
            return None;
        }
        self.i += end + 1;
        Some(&rest[..end])
    }

    /// Skips a string, the cursor just past its opening quote.
    fn skip_string_body(&mut self) -> Option<()> {
        loop {
            let rest = self.b.get(self.i..)?;
            let at = memchr::memchr2(b'"', b'\\', rest)?;
            if rest[at] == b'"' {
                self.i += at + 1;
                return Some(());
            }
            self.i += at + 2; // an escape: the backslash and the byte it escapes
        }
    }

    /// Skips one value of any kind without looking inside it.
    fn skip_value(&mut self) -> Option<()> {
        match self.next()? {
            b'"' => self.skip_string_body(),
            b'{' | b'[' => {
                let mut depth = 1usize;
                while depth > 0 {
                    let rest = self.b.get(self.i..)?;
                    // Brackets only count outside strings: look at the bytes up to the next
                    // quote (punctuation, numbers, literals: a few bytes), then skip the string.
                    let gap = memchr::memchr(b'"', rest).unwrap_or(rest.len());
                    for (at, &c) in rest[..gap].iter().enumerate() {
                        match c {
                            b'{' | b'[' => depth += 1,
                            b'}' | b']' => {
                                depth -= 1;
                                if depth == 0 {
                                    self.i += at + 1;
                                    return Some(());
                                }
                            }
                            _ => {}
                        }
                    }
                    if gap == rest.len() {
                        return None; // cut short
                    }
                    self.i += gap + 1;
                    self.skip_string_body()?;
                }
                Some(())
            }
            _ => {
                // A number, true, false or null: up to the next delimiter.
                let rest = self.b.get(self.i..)?;
                let at = rest.iter().position(|c| matches!(c, b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r'))?;
                self.i += at;
                Some(())
            }
        }
    }

    /// The `metadata` object, the cursor on its opening brace.
    fn metadata(&mut self) -> Option<Peeked<'a>> {
        self.expect(b'{')?;
        let mut id = Peeked::default();
        self.ws();
        if self.peek()? == b'}' {
            self.i += 1;
            return Some(id);
        }
        loop {
            let key = self.plain_string()?;
            self.expect(b':')?;
            self.ws();
            let slot = match key {
                b"namespace" => Some(&mut id.namespace),
                b"name" => Some(&mut id.name),
                b"uid" => Some(&mut id.uid),
                b"resourceVersion" => Some(&mut id.resource_version),
                _ => None,
            };
            match slot {
                Some(slot) => {
                    if slot.is_some() || self.peek()? != b'"' {
                        return None;
                    }
                    *slot = Some(std::str::from_utf8(self.plain_string()?).ok()?);
                }
                None => self.skip_value()?,
            }
            self.ws();
            match self.next()? {
                b',' => {}
                b'}' => return Some(id),
                _ => return None,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id<'a>(ns: Option<&'a str>, name: &'a str, uid: &'a str, rv: &'a str) -> Peeked<'a> {
        Peeked { namespace: ns, name: Some(name), uid: Some(uid), resource_version: Some(rv) }
    }

    #[test]
    fn reads_the_identity_past_values_of_every_kind() {
        let json = br#"{"kind":"Pod","n":-1.5e3,"t":true,"z":null,"a":[{"x":"}]\"{"},[]],
            "metadata":{"labels":{"name":"not this","uid":"nor this"},"name":"web-0",
              "managedFields":[{"fieldsV1":{"f:metadata":{"f:name":{}}}}],"namespace":"apps",
              "uid":"u-1","resourceVersion":"42","annotations":{"resourceVersion":"7"}},
            "spec":{"x":[1,{"y":"z"}]}}"#;
        assert_eq!(identity(json), Some(id(Some("apps"), "web-0", "u-1", "42")));
    }

    #[test]
    fn what_is_missing_stays_none() {
        assert_eq!(identity(br#"{"metadata":{}}"#), Some(Peeked::default()));
        assert_eq!(identity(br#"{"metadata":{ },"kind":"Pod"}"#), Some(Peeked::default()));
        let cluster = identity(br#"{"metadata":{"name":"n1","uid":"u","resourceVersion":"1"}}"#).unwrap();
        assert_eq!(cluster, id(None, "n1", "u", "1"));
    }

    #[test]
    fn answers_nothing_when_in_doubt() {
        for json in [
            &br#"{"spec":{}}"#[..],
            br#"{"metadata":{"name":"a\u0062"}}"#,
            br#"{"metadata":{"name":"a","name":"b"}}"#,
            br#"{"metadata":{"name":"a"},"metadata":{"name":"b"}}"#,
            br#"{"metadata":{},"status":"x","metadata":{"resourceVersion":"9"}}"#,
            br#"{"metadata":{"resourceVersion":7}}"#,
            br#"{"metadata":"#,
            br#"[]"#,
            b"",
        ] {
            assert_eq!(identity(json), None, "{}", String::from_utf8_lossy(json));
        }
    }

    #[test]
    fn reads_no_further_than_metadata_when_the_rest_cannot_hold_another() {
        // Malformed after `metadata`: not read (the scanner found the item's end; a decode would
        // refuse it, but a relist takes an item with the live identity for the live entry).
        for json in [
            &br#"{"metadata":{"name":"a","uid":"u","resourceVersion":"1"},"spec":{"#[..],
            br#"{"metadata":{"name":"a","uid":"u","resourceVersion":"1"},"spec":{"x":tru}}"#,
            br#"{"metadata":{"name":"a","uid":"u","resourceVersion":"1"} "spec" {}}"#,
        ] {
            assert_eq!(identity(json), Some(id(None, "a", "u", "1")), "{}", String::from_utf8_lossy(json));
        }
        // Where a second `metadata` may follow, the rest is walked as before.
        for json in [
            &br#"{"metadata":{"name":"a"},"spec":{"x":"metadata"}"#[..],
            br#"{"metadata":{"name":"a"},"m\u0065tadata":{"name":"b"}}"#,
        ] {
            assert_eq!(identity(json), None, "{}", String::from_utf8_lossy(json));
        }
        let nested = br#"{"metadata":{"name":"a"},"spec":{"template":{"metadata":{"name":"b"}}}}"#;
        assert_eq!(identity(nested), Some(Peeked { name: Some("a"), ..Peeked::default() }));
    }

    #[test]
    fn finds_a_watch_events_type_and_object_in_either_order() {
        let line = br#"{"type":"ADDED","object":{"metadata":{"name":"a","uid":"u1"}}}"#;
        let (ty, object) = event_object(line).unwrap();
        assert_eq!(ty, b"ADDED");
        assert_eq!(identity(object).unwrap().uid, Some("u1"));
        let line = br#"{"object":{"metadata":{"uid":"u2"},"spec":{"x":"}"}},"type":"MODIFIED"}"#;
        let (ty, object) = event_object(line).unwrap();
        assert_eq!((ty, object), (&b"MODIFIED"[..], &br#"{"metadata":{"uid":"u2"},"spec":{"x":"}"}}"#[..]));
        for line in [
            &br#"{"type":"ADDED","type":"DELETED","object":{}}"#[..],
            br#"{"object":{},"object":{},"type":"ADDED"}"#,
            br#"{"type":"ADD\u0045D","object":{}}"#,
            br#"{"type":1,"object":{}}"#,
            br#"{"object":{}}"#,
            br#"{"type":"ADDED"}"#,
            b"",
        ] {
            assert_eq!(event_object(line), None, "{}", String::from_utf8_lossy(line));
        }
    }

    #[test]
    fn never_panics_on_cut_input() {
        let json = br#"{"kind":"Pod","a":["x\"y",{"b":[1,2,{"c":"d"}]}],"metadata":{"name":"p","uid":"u","resourceVersion":"9"}}"#;
        for end in 0..json.len() {
            let _ = identity(&json[..end]);
        }
        let line = br#"{"object":{"a":["x\"y",{"b":[1]}],"metadata":{"uid":"u"}},"type":"ADDED"}"#;
        for end in 0..line.len() {
            let _ = event_object(&line[..end]);
        }
        assert!(event_object(line).is_some());
        assert!(identity(json).is_some());
    }
}
