//! List bodies, decoded as they stream in: a small scanner walks the top-level object and hands
//! each element of `items` over as a byte slice, so at most one item (plus one read buffer) is
//! held, whatever the page size.

use std::io::{self, Read};

use serde::Deserialize;

use crate::codec::syntax::{self, Prefix};
use crate::error::snippet;

/// The list's own metadata.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct ListMeta {
    pub(crate) resource_version: Option<String>,
    pub(crate) continue_token: Option<String>,
    /// `shardInfo.selector`: the shard selector a server applied to this list, as it writes
    /// it (docs/protocol.md, "Sharded lists and watches"); `None` from a server that did not
    /// filter.
    pub(crate) shard_selector: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct ListMetaJson {
    resource_version: Option<String>,
    #[serde(rename = "continue")]
    continue_token: Option<String>,
    shard_info: Option<ShardInfoJson>,
}

#[derive(Deserialize, Default)]
struct ShardInfoJson {
    #[serde(default)]
    selector: String,
}

/// Why a streamed list could not be read.
#[derive(Debug)]
pub(crate) enum ListError<E> {
    /// Reading the body failed (reset, truncation, idle timeout).
    Io(io::Error),
    /// The body is not a list (`message`, plus the first bytes at the bad spot).
    Malformed { message: String, offset: u64, snippet: String },
    /// The callback rejected an item.
    Item(E),
}

/// One element of a list's `items`, as the scanner found it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Item<'a> {
    pub(crate) bytes: &'a [u8],
    /// The bytes passed the strict syntax check (`syntax`) while the scanner looked for their
    /// end, so decoding need not check them again.
    pub(crate) checked: bool,
    /// The encoding of `bytes`.
    pub(crate) form: Form,
}

/// The encoding of a list item's bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Form {
    Json,
    /// A bare protobuf message (no magic, no envelope) of the schema table's message `message`
    /// (docs/protocol.md §12.2). `types`: the apiVersion and kind the item carries in its JSON
    /// form, which its message cannot hold (only `PartialObjectMetadataList` items have them).
    Protobuf {
        message: usize,
        types: Option<(&'static str, &'static str)>,
    },
}

/// Streams a list body: calls `on_item` with each element of `items`, in order, and returns the
/// list metadata. Holds at most one item of up to `max_item` bytes plus a read buffer (and
/// input already consumed, while it is smaller than the rest).
pub(crate) fn list<R: Read, E>(
    reader: R,
    max_item: usize,
    mut on_item: impl FnMut(Item<'_>) -> Result<(), E>,
) -> Result<ListMeta, ListError<E>> {
    let mut s = Scanner {
        reader,
        buf: Vec::with_capacity(READ_SIZE),
        pos: 0,
        consumed: 0,
        eof: false,
        max_item,
        checked: false,
    };
    let mut meta = ListMeta::default();
    s.expect(b'{')?;
    if s.peek()? == b'}' {
        s.pos += 1;
        return Ok(meta);
    }
    loop {
        let key = s.string()?;
        s.expect(b':')?;
        match key.as_str() {
            "items" => {
                if s.peek()? == b'n' {
                    s.value()?; // null
                } else {
                    s.expect(b'[')?;
                    if s.peek()? == b']' {
                        s.pos += 1;
                    } else {
                        loop {
                            let (a, b) = s.value()?;
                            on_item(Item { bytes: &s.buf[a..b], checked: s.checked, form: Form::Json })
                                .map_err(ListError::Item)?;
                            match s.next_byte()? {
                                b',' => continue,
                                b']' => break,
                                other => {
                                    return Err(s.malformed(format!(
                                        "expected ',' or ']' in items, found {:?}",
                                        other as char
                                    )));
                                }
                            }
                        }
                    }
                }
            }
            "metadata" => {
                let (a, b) = s.value()?;
                let m: ListMetaJson =
                    serde_json::from_slice(&s.buf[a..b]).map_err(|e| s.malformed(format!("list metadata: {e}")))?;
                meta.resource_version = m.resource_version.filter(|v| !v.is_empty());
                meta.continue_token = m.continue_token.filter(|v| !v.is_empty());
                meta.shard_selector = m.shard_info.map(|i| i.selector);
            }
            _ => {
                s.value()?;
            }
        }
        match s.next_byte()? {
            b',' => continue,
            b'}' => return Ok(meta),
            other => return Err(s.malformed(format!("expected ',' or '}}' in list, found {:?}", other as char))),
        }
    }
}

/// How much a list read asks for at a time.
const READ_SIZE: usize = 64 * 1024;

/// A forward-only JSON scanner over a reader. Invariant: `buf[pos..]` is unread input; a value
/// returned by `value()` stays valid in `buf` until the next call that reads input.
struct Scanner<R> {
    reader: R,
    buf: Vec<u8>,
    pos: usize,
    /// Bytes dropped from the front of `buf` so far (for error offsets).
    consumed: u64,
    eof: bool,
    max_item: usize,
    /// The last value `value()` returned passed the strict syntax check.
    checked: bool,
}

impl<R: Read> Scanner<R> {
    /// Reads more input, appending to `buf`. Returns false at end of input.
    fn fill(&mut self) -> Result<bool, ListError<std::convert::Infallible>> {
        if self.eof {
            return Ok(false);
        }
        let len = self.buf.len();
        self.buf.resize(len + READ_SIZE, 0);
        loop {
            match self.reader.read(&mut self.buf[len..]) {
                Ok(0) => {
                    self.buf.truncate(len);
                    self.eof = true;
                    return Ok(false);
                }
                Ok(n) => {
                    self.buf.truncate(len + n);
                    return Ok(true);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    self.buf.truncate(len);
                    return Err(ListError::Io(e));
                }
            }
        }
    }

    /// Drops consumed input so the buffer only grows with the value being scanned.
    fn compact(&mut self) {
        if self.pos > 0 {
            self.buf.drain(..self.pos);
            self.consumed += self.pos as u64;
            self.pos = 0;
        }
    }

    fn peek<E>(&mut self) -> Result<u8, ListError<E>> {
        loop {
            while self.pos < self.buf.len() {
                let b = self.buf[self.pos];
                if b.is_ascii_whitespace() {
                    self.pos += 1;
                } else {
                    return Ok(b);
                }
            }
            self.compact();
            if !self.fill().map_err(cast)? {
                return Err(self.truncated());
            }
        }
    }

    fn next_byte<E>(&mut self) -> Result<u8, ListError<E>> {
        let b = self.peek()?;
        self.pos += 1;
        Ok(b)
    }

    fn expect<E>(&mut self, want: u8) -> Result<(), ListError<E>> {
        let got = self.next_byte()?;
        if got == want {
            Ok(())
        } else {
            self.pos -= 1;
            Err(self.malformed(format!("expected {:?}, found {:?}", want as char, got as char)))
        }
    }

    fn string<E>(&mut self) -> Result<String, ListError<E>> {
        if self.peek()? != b'"' {
            return Err(self.malformed("expected a string key".to_owned()));
        }
        let (a, b) = self.value()?;
        serde_json::from_slice(&self.buf[a..b]).map_err(|e| self.malformed(format!("bad key: {e}")))
    }

    /// Scans one complete JSON value and returns its span in `buf`; `checked` tells whether it
    /// passed the strict syntax check on the way.
    fn value<E>(&mut self) -> Result<(usize, usize), ListError<E>> {
        self.peek()?;
        // Drop consumed input once it outweighs the rest: each byte moves at most once, where
        // compacting before every item moved the whole read-ahead each time.
        if self.pos > self.buf.len() / 2 {
            self.compact();
        }
        let start = self.pos;
        // An object or array (every list item) is found and checked in one pass while it is
        // well-formed; anything else is left to the lenient scan below, which finds the end of
        // malformed items too, so decoding can name what is wrong with them.
        self.checked = false;
        loop {
            let available = self.buf.len() - start;
            match syntax::container_prefix(&self.buf[start..]) {
                // The limit holds however much was read ahead with the item.
                Prefix::Complete(n) if n > self.max_item => {
                    return Err(self.malformed(format!("list item larger than {} bytes", self.max_item)));
                }
                Prefix::Complete(n) => {
                    self.pos = start + n;
                    self.checked = true;
                    return Ok((start, start + n));
                }
                Prefix::Incomplete if available <= self.max_item && !self.eof => {
                    // Read until there is twice as much (or the item limit), so a long item is
                    // checked a bounded number of times, not once per read.
                    let want = available.saturating_mul(2).max(READ_SIZE).min(self.max_item.saturating_add(1));
                    while self.buf.len() - start < want && self.fill().map_err(cast)? {}
                }
                Prefix::Incomplete | Prefix::Other => break,
            }
        }
        self.lenient_value(start)
    }

    /// Finds the end of the value at `start` by brackets and quotes alone.
    fn lenient_value<E>(&mut self, start: usize) -> Result<(usize, usize), ListError<E>> {
        let mut i = start;
        let mut depth = 0u32;
        let mut in_str = false;
        let mut escaped = false;
        let first = self.buf[start];
        let scalar = !matches!(first, b'{' | b'[' | b'"');
        loop {
            if i >= self.buf.len() {
                if i - start > self.max_item {
                    return Err(self.malformed(format!("list item larger than {} bytes", self.max_item)));
                }
                if !self.fill().map_err(cast)? {
                    if scalar && i > start {
                        self.pos = i;
                        return Ok((start, i));
                    }
                    return Err(self.truncated());
                }
                continue;
            }
            let b = self.buf[i];
            if in_str {
                if escaped {
                    escaped = false;
                } else if b == b'\\' {
                    escaped = true;
                } else if b == b'"' {
                    in_str = false;
                    if depth == 0 {
                        self.pos = i + 1;
                        return Ok((start, i + 1));
                    }
                }
            } else if scalar {
                if matches!(b, b',' | b'}' | b']') || b.is_ascii_whitespace() {
                    self.pos = i;
                    return Ok((start, i));
                }
            } else {
                match b {
                    b'"' => in_str = true,
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        if depth == 0 {
                            return Err(self.malformed("unbalanced brackets".to_owned()));
                        }
                        depth -= 1;
                        if depth == 0 {
                            self.pos = i + 1;
                            return Ok((start, i + 1));
                        }
                    }
                    _ => {}
                }
            }
            i += 1;
        }
    }

    fn truncated<E>(&self) -> ListError<E> {
        ListError::Io(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!("list body ended early, after {} bytes", self.consumed + self.buf.len() as u64),
        ))
    }

    fn malformed<E>(&self, message: String) -> ListError<E> {
        let at = self.pos.min(self.buf.len());
        ListError::Malformed { message, offset: self.consumed + at as u64, snippet: snippet(&self.buf[at..]) }
    }
}

fn cast<E>(e: ListError<std::convert::Infallible>) -> ListError<E> {
    match e {
        ListError::Io(e) => ListError::Io(e),
        ListError::Malformed { message, offset, snippet } => ListError::Malformed { message, offset, snippet },
        ListError::Item(never) => match never {},
    }
}
