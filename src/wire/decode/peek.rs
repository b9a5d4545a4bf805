//! Who an object is, read off its JSON without decoding it: `metadata.namespace`, `name`, `uid`
//! and `resourceVersion`. A relist asks this of every item to find those the store already
//! holds at the same version (they are not decoded again), so it must cost a small fraction of
//! a decode: it walks the top-level object, skips every value but `metadata` without looking
//! inside, and reads `metadata`'s four strings; it goes on to the end of the object only to make
//! sure there is one `metadata` (a few microseconds for a realistic 6 KB pod, against tens for a
//! decode).
//!
//! It answers only when the answer is certain: `None` for anything unusual (an escape in one of
//! the four strings, one of them twice or not a string, no `metadata`), and the caller then
//! decodes as usual. It does not validate the JSON: a list item that is not valid JSON fails in
//! the list scanner (`list.rs`), and a valid one with the uid and resourceVersion of what the
//! store holds is that same object (the API server gives every change of an object a new
//! resourceVersion).

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
                return None; // twice: a decoder would refuse the object
            }
            found = Some(c.metadata()?);
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
                    // The next byte that matters: a quote, or a bracket.
                    let at = rest.iter().position(|c| matches!(c, b'"' | b'{' | b'[' | b'}' | b']'))?;
                    self.i += at + 1;
                    match rest[at] {
                        b'"' => self.skip_string_body()?,
                        b'{' | b'[' => depth += 1,
                        _ => depth -= 1,
                    }
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
            br#"{"metadata":{"name":"a"},"spec":{"#,
            br#"{"metadata":{"resourceVersion":7}}"#,
            br#"{"metadata":"#,
            br#"[]"#,
            b"",
        ] {
            assert_eq!(identity(json), None, "{}", String::from_utf8_lossy(json));
        }
    }

    #[test]
    fn never_panics_on_cut_input() {
        let json = br#"{"kind":"Pod","a":["x\"y",{"b":[1,2,{"c":"d"}]}],"metadata":{"name":"p","uid":"u","resourceVersion":"9"}}"#;
        for end in 0..json.len() {
            let _ = identity(&json[..end]);
        }
        assert!(identity(json).is_some());
    }
}
