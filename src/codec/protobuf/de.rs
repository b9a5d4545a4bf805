//! A serde `Deserializer` over protobuf bytes: k8s-openapi's own `Deserialize` impls (or
//! `serde_json::Value`) read a message as the map its JSON form would be, with JSON names from the
//! schema table and Kubernetes' JSON conventions for times, quantities, IntOrString, bytes and
//! embedded JSON.
//!
//! What the JSON path would not see is not shown: a field number the table does not know is
//! skipped (a newer server), and a zero scalar is left out where Go's `omitempty` leaves it out of
//! JSON (Go's protobuf encoder writes every field that is not a pointer, zero or not). A zero time
//! is JSON `null`, so it is left out as well. Every length read from the input is checked against
//! what is left before it is used; nothing is allocated from a length alone.
//!
//! A repeated or map field is handed out whole when its first record is met: its records are
//! counted first, so a list is allocated at its exact size, as simd-json's known array lengths
//! give on the JSON path, and the message's reader steps over all of them. Go writes a repeated
//! field's records in one run, so first only that run is counted; should the message hold
//! another run of the field further on (another writer's right), the whole object is read again,
//! counting each such field over the rest of its message (`Ctx::split_runs`).
//!
//! Here: the wire reader and a message's fields (`Fields`, a serde map); one field's value
//! (scalars, times, quantities, embedded JSON) in `value.rs`; repeated and map fields in
//! `repeated.rs`. The two read each other's values (a wrapped list's elements, each element's
//! value) through `ValueDe`, declared here, so neither imports the other.

use std::cell::OnceCell;

use serde::de::{self, DeserializeSeed, MapAccess, Visitor};
use serde::forward_to_deserialize_any;

use super::schema::{Field, Message, Schema, Type};
use crate::codec::skip::{Child, Node};

/// Messages nest far less deeply than this in every built-in type.
const MAX_DEPTH: u32 = 64;

pub(crate) use super::error::Error;

fn err<T>(msg: impl Into<String>) -> Result<T, Error> {
    Err(Error(msg.into()))
}

/// One field as it arrives on the wire.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Wire<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    /// A 32- or 64-bit fixed-width value: no type in the table uses one.
    Fixed,
}

#[derive(Clone)]
pub(crate) struct Reader<'a> {
    data: &'a [u8],
    /// Always `<= data.len()`.
    pos: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(data: &'a [u8]) -> Self {
        Reader { data, pos: 0 }
    }

    /// How many bytes of the data were read.
    #[inline]
    pub(crate) fn position(&self) -> usize {
        self.pos
    }

    #[inline]
    pub(crate) fn at_end(&self) -> bool {
        self.pos >= self.data.len()
    }

    #[inline]
    pub(crate) fn varint(&mut self) -> Result<u64, Error> {
        // Most keys and lengths fit one byte; longer than two bytes is out of line, so that `next` inlines.
        if let Some(&byte) = self.data.get(self.pos)
            && byte < 0x80
        {
            self.pos += 1;
            return Ok(u64::from(byte));
        }
        // Two bytes (lengths up to 16 KiB) also stay in line.
        if let Some(&[low, high]) = self.data.get(self.pos..self.pos + 2)
            && high < 0x80
        {
            self.pos += 2;
            return Ok(u64::from(low & 0x7f) | u64::from(high) << 7);
        }
        self.long_varint()
    }

    #[inline(never)]
    fn long_varint(&mut self) -> Result<u64, Error> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let Some(&byte) = self.data.get(self.pos) else {
                return Err(truncated_varint(self.pos));
            };
            self.pos += 1;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(long_varint(self.pos))
    }

    #[inline]
    fn take(&mut self, n: u64) -> Result<&'a [u8], Error> {
        let left = self.data.len() - self.pos;
        match usize::try_from(n) {
            Ok(n) if n <= left => {
                let bytes = &self.data[self.pos..self.pos + n];
                self.pos += n;
                Ok(bytes)
            }
            _ => Err(past_the_end(n, self.pos, left)),
        }
    }

    /// The next field number and value, or `None` at the end.
    #[inline(always)]
    pub(crate) fn next(&mut self) -> Result<Option<(u64, Wire<'a>)>, Error> {
        if self.at_end() {
            return Ok(None);
        }
        let key = self.varint()?;
        let value = match key & 7 {
            0 => Wire::Varint(self.varint()?),
            1 => {
                self.take(8)?;
                Wire::Fixed
            }
            2 => {
                let len = self.varint()?;
                Wire::Bytes(self.take(len)?)
            }
            5 => {
                self.take(4)?;
                Wire::Fixed
            }
            other => return Err(bad_wire_type(other, key)),
        };
        if key >> 3 == 0 {
            return Err(Error("field number 0".into()));
        }
        Ok(Some((key >> 3, value)))
    }

    /// Steps over the next record and returns its field number (0 at the end: no record has it).
    /// What [`next`](Reader::next) does, without building the value.
    #[inline(always)]
    fn skip(&mut self) -> Result<u64, Error> {
        if self.at_end() {
            return Ok(0);
        }
        let key = self.varint()?;
        let len = match key & 7 {
            0 => {
                self.varint()?;
                0
            }
            1 => 8,
            2 => self.varint()?,
            5 => 4,
            other => return Err(bad_wire_type(other, key)),
        };
        self.take(len)?;
        if key >> 3 == 0 {
            return Err(Error("field number 0".into()));
        }
        Ok(key >> 3)
    }
}

#[cold]
fn truncated_varint(pos: usize) -> Error {
    Error(format!("truncated varint at byte {pos}"))
}

#[cold]
fn long_varint(pos: usize) -> Error {
    Error(format!("varint longer than 10 bytes at byte {pos}"))
}

#[cold]
fn past_the_end(n: u64, pos: usize, left: usize) -> Error {
    Error(format!("a field of {n} bytes at byte {pos} runs past the end ({left} left)"))
}

#[cold]
fn bad_wire_type(wire: u64, key: u64) -> Error {
    Error(format!("wire type {wire} of field {} is not supported", key >> 3))
}

/// What every part of the deserializer needs: the schema, how repeated fields are counted, and
/// where embedded JSON without its skipped fields is kept.
#[derive(Clone, Copy)]
pub(crate) struct Ctx<'de> {
    pub(crate) schema: &'static Schema,
    /// Whether a repeated field's records may come in several runs: then each is counted over
    /// the rest of its message (a pass per repeated field, to the message's end). Otherwise only
    /// its first run is, and a second run of it is an error of the first read ([`Error::split`]),
    /// after which [`message`] reads the object again with this set.
    split_runs: bool,
    texts: &'de Texts,
}

/// Embedded JSON texts without their skipped fields, kept until the object is decoded: the JSON
/// decoder borrows strings from them as it does from the input. Chunks of cells that are set
/// once, so a text handed out stays where it is while more are added.
#[derive(Default)]
pub(super) struct Texts {
    texts: [OnceCell<String>; 4],
    more: OnceCell<Box<Texts>>,
}

impl Texts {
    pub(super) fn keep(&self, mut text: String) -> &str {
        let mut chunk = self;
        loop {
            if let Some(cell) = chunk.texts.iter().find(|cell| cell.get().is_none()) {
                return cell.get_or_init(|| std::mem::take(&mut text));
            }
            chunk = chunk.more.get_or_init(Box::default);
        }
    }
}

/// Reads `bytes` as the message `index` of `schema`, as a map of its JSON fields; `head` entries
/// (`apiVersion` and `kind` from the envelope) come first. The fields of `skip` are never shown
/// (`codec/skip`): a skipped record is stepped over as an unknown one is. A repeated field met
/// in a second run makes it read the object again (see [`Ctx::split_runs`]).
pub(crate) fn message<T: de::DeserializeOwned>(
    schema: &'static Schema,
    index: usize,
    bytes: &[u8],
    head: &[(&'static str, &str)],
    skip: Option<&Node>,
) -> Result<T, Error> {
    let read = |split_runs: bool| {
        let texts = Texts::default();
        let ctx = Ctx { schema, split_runs, texts: &texts };
        let mut fields = Fields::new(ctx, index, bytes, 0, skip)?;
        fields.head = head;
        T::deserialize(MessageDe(Some(fields)))
    };
    match read(false) {
        Err(e) if e.is_split() => read(true),
        read => read,
    }
}

/// The fields of one message, as serde map entries.
struct Fields<'de> {
    ctx: Ctx<'de>,
    message: &'static Message,
    reader: Reader<'de>,
    depth: u32,
    /// Entries handed out before the message's own (`apiVersion`, `kind`), first to last.
    head: &'de [(&'static str, &'de str)],
    pending: Option<Pending<'de>>,
    /// Repeated and map fields already handed out whole (bit `n` for field `n`; the schema keeps
    /// their numbers below 64): their later records are skipped.
    done: u64,
    /// An inlined message whose fields are being handed out as this one's.
    inner: Option<Box<Fields<'de>>>,
    /// The skipped fields at this message (an inlined one shares its parent's: JSON shows its
    /// fields as the parent's).
    skip: Option<&'de Node>,
}

/// A field whose key was handed out, and what is skipped below it.
enum Pending<'de> {
    Head(&'de str),
    One(&'static Field, Wire<'de>, Option<&'de Node>),
    /// A repeated or map field: its records, from its first one on.
    All(&'static Field, Records<'de>, Option<&'de Node>),
}

/// Every record of one field number in the rest of a message (or in its first run: see
/// [`Ctx::split_runs`]): read from the first of them with a reader of their own, and counted
/// beforehand, so that lists get their exact capacity (serde's `size_hint`) and the message's own
/// reader can step over them.
#[derive(Clone)]
struct Records<'de> {
    /// At the first record of the number.
    reader: Reader<'de>,
    number: u64,
    /// Records of the number not yet read.
    left: usize,
    /// Values they hold: one per record, or per varint in a packed record of numbers.
    values: usize,
}

impl<'de> Records<'de> {
    /// Counts the records numbered `number` from `from` (which is at the first of them) to the
    /// end, and where their run ends if nothing else comes between them (Go writes a repeated
    /// field's records in one run; other writers need not).
    fn survey(from: &Reader<'de>, number: u64, packable: bool) -> Result<(Self, Option<usize>), Error> {
        let mut reader = from.clone();
        let (mut left, mut values, mut run_end, mut gap) = (0usize, 0usize, Some(from.pos), false);
        loop {
            let at = reader.pos;
            let n = reader.skip()?;
            if n == 0 {
                break;
            }
            if n != number {
                gap = left > 0;
                continue;
            }
            left += 1;
            values += Self::values_at(&reader, at, packable)?;
            run_end = if gap { None } else { run_end.map(|_| reader.pos) };
        }
        Ok((Records { reader: from.clone(), number, left, values }, run_end))
    }

    /// Counts the records numbered `number` in the run that starts at `from` (which is at the
    /// first of them), where Go writes all of them; returns where the run ends.
    fn run(from: &Reader<'de>, number: u64, packable: bool) -> Result<(Self, usize), Error> {
        let mut reader = from.clone();
        let (mut left, mut values) = (0usize, 0usize);
        loop {
            let at = reader.pos;
            if reader.skip()? != number {
                reader.pos = at;
                break;
            }
            left += 1;
            if packable {
                values += Self::values_at(&reader, at, true)?;
            }
        }
        if !packable {
            values = left;
        }
        Ok((Records { reader: from.clone(), number, left, values }, reader.pos))
    }

    /// The values the record at `at` of `reader`'s data holds: one, or for a packable type,
    /// as many as the varints of a packed record.
    #[inline]
    fn values_at(reader: &Reader<'de>, at: usize, packable: bool) -> Result<usize, Error> {
        if !packable {
            return Ok(1);
        }
        // A packed record holds several varints, each ending in a byte below 0x80.
        let mut record = Reader { data: reader.data, pos: at };
        Ok(match record.next()? {
            Some((_, Wire::Bytes(b))) => b.iter().filter(|&&c| c < 0x80).count(),
            _ => 1,
        })
    }

    /// The records of `number` from `from` (at the first of them) as `ctx` says to count them
    /// ([`Ctx::split_runs`]), and where their run ends when they are one.
    fn of(ctx: Ctx<'_>, from: &Reader<'de>, number: u64, packable: bool) -> Result<(Self, Option<usize>), Error> {
        if ctx.split_runs {
            Self::survey(from, number, packable)
        } else {
            Self::run(from, number, packable).map(|(records, end)| (records, Some(end)))
        }
    }

    /// The next record of the number.
    #[inline]
    fn next(&mut self) -> Result<Option<Wire<'de>>, Error> {
        while self.left > 0 {
            let Some((n, wire)) = self.reader.next()? else { break };
            if n == self.number {
                self.left -= 1;
                return Ok(Some(wire));
            }
        }
        Ok(None)
    }
}

impl<'de> Fields<'de> {
    fn new(ctx: Ctx<'de>, index: usize, bytes: &'de [u8], depth: u32, skip: Option<&'de Node>) -> Result<Self, Error> {
        let Some(message) = ctx.schema.messages.get(index) else {
            return err("no such message");
        };
        if depth > MAX_DEPTH {
            return err(format!("{} is nested more than {MAX_DEPTH} deep", message.name));
        }
        let reader = Reader::new(bytes);
        Ok(Fields { ctx, message, reader, depth, head: &[], pending: None, done: 0, inner: None, skip })
    }

    /// The records of a repeated or map field met at `start` for the first time (`None` if it was
    /// handed out already, with this record counted); when they are one run, the message's reader
    /// steps over all of them. A field met again where only its first run was counted is
    /// [`Error::split`].
    #[inline]
    fn records(
        &mut self,
        field: &Field,
        number: u64,
        start: &Reader<'de>,
        packable: bool,
    ) -> Result<Option<Records<'de>>, Error> {
        let bit = 1u64 << (number & 63);
        if self.done & bit != 0 {
            return if self.ctx.split_runs { Ok(None) } else { Err(Error::split()) };
        }
        self.done |= bit;
        let (records, run_end) = Records::of(self.ctx, start, number, packable).map_err(|e| self.at(field, e))?;
        if let Some(end) = run_end {
            self.reader.pos = end;
        }
        Ok(Some(records))
    }

    /// `e`, said to be about `field` (a split run passes as it is, for [`message`]).
    #[cold]
    fn at(&self, field: &Field, e: Error) -> Error {
        if e.is_split() {
            return e;
        }
        Error(format!("{}.{}: {e}", self.message.name, field.name.unwrap_or("(inline)")))
    }

    #[cold]
    fn in_message(&self, e: Error) -> Error {
        if e.is_split() {
            return e;
        }
        Error(format!("{}: {e}", self.message.name))
    }
}

/// Whether a repeated field of this type may come packed (several varints in one record).
fn packable(ty: &Type) -> bool {
    matches!(ty, Type::Int | Type::Bool)
}

/// Whether a value is what Go leaves out of JSON (or writes as `null`).
#[inline]
fn is_zero(ty: &Type, wire: Wire<'_>, omit_zero: bool) -> Result<bool, Error> {
    Ok(match (ty, wire) {
        (_, Wire::Varint(v)) => omit_zero && v == 0,
        (Type::String | Type::Bytes, Wire::Bytes(b)) => omit_zero && b.is_empty(),
        (Type::Time | Type::MicroTime, Wire::Bytes(b)) => {
            let (s, n) = seconds_nanos(b)?;
            s == 0 && n == 0
        }
        (Type::Raw, Wire::Bytes(b)) => raw_json(b)?.is_empty(),
        _ => false,
    })
}

impl<'de> Fields<'de> {
    /// The next field's JSON name, its value set aside for `next_value_seed`; `None` at the end.
    /// Not generic, so compiled once: `next_key_seed` only hands the name to its seed.
    fn next_key(&mut self) -> Result<Option<&'static str>, Error> {
        while let Some(((name, value), rest)) = self.head.split_first() {
            let (name, value) = (*name, *value);
            self.head = rest;
            if let Some(Child::Skip) = self.skip.and_then(|node| node.child(name)) {
                continue;
            }
            self.pending = Some(Pending::Head(value));
            return Ok(Some(name));
        }
        loop {
            if let Some(inner) = &mut self.inner {
                match inner.next_key()? {
                    Some(name) => return Ok(Some(name)),
                    None => self.inner = None,
                }
            }
            let start = self.reader.clone();
            let Some((number, wire)) = self.reader.next().map_err(|e| self.in_message(e))? else {
                return Ok(None);
            };
            // A field number the table does not know (a newer server) is skipped, as unknown JSON
            // fields are.
            let Some(field) = self.message.field(number) else { continue };
            let Some(name) = field.name else {
                let (Type::Message(index), Wire::Bytes(bytes)) = (&field.ty, wire) else {
                    return Err(self.at(field, Error("an inlined field must be a message".into())));
                };
                self.inner = Some(Box::new(Fields::new(self.ctx, *index, bytes, self.depth + 1, self.skip)?));
                continue;
            };
            // A skipped field is stepped over record by record, as an unknown one.
            let below = match self.skip.and_then(|node| node.child(name)) {
                Some(Child::Skip) => continue,
                Some(Child::Into(below)) => Some(below),
                None => None,
            };
            match &field.ty {
                Type::Repeated(element) => {
                    let Some(records) = self.records(field, number, &start, packable(element))? else { continue };
                    self.pending = Some(Pending::All(field, records, below));
                }
                Type::Map(_) => {
                    let Some(records) = self.records(field, number, &start, false)? else { continue };
                    self.pending = Some(Pending::All(field, records, below));
                }
                ty => {
                    if is_zero(ty, wire, field.omit_zero).map_err(|e| self.at(field, e))? {
                        continue;
                    }
                    self.pending = Some(Pending::One(field, wire, below));
                }
            }
            return Ok(Some(name));
        }
    }
}

impl<'de> MapAccess<'de> for Fields<'de> {
    type Error = Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>, Error> {
        match self.next_key()? {
            Some(name) => seed.deserialize(de::value::BorrowedStrDeserializer::new(name)).map(Some),
            None => Ok(None),
        }
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Error> {
        if let Some(inner) = &mut self.inner {
            return inner.next_value_seed(seed);
        }
        let (ctx, depth) = (self.ctx, self.depth);
        match self.pending.take() {
            Some(Pending::Head(value)) => seed.deserialize(de::value::BorrowedStrDeserializer::new(value)),
            Some(Pending::One(field, wire, skip)) => {
                let value = ValueDe { ctx, ty: &field.ty, wire, depth: depth + 1, skip };
                seed.deserialize(value).map_err(|e| self.at(field, e))
            }
            Some(Pending::All(field, records, skip)) => {
                let value = seed.deserialize(AllDe { ctx, field, records, depth: depth + 1, skip });
                value.map_err(|e| self.at(field, e))
            }
            None => err("a value was asked for before its key"),
        }
    }
}

/// The methods the deserializers here share: a value that is present is `Some`, a newtype struct
/// is its content, and everything else is `deserialize_any`. `skips_ignored` answers
/// `deserialize_ignored_any` without reading the value; `reads_ignored` reads it as any other.
macro_rules! shared_methods {
    (skips_ignored) => {
        shared_methods!(common);

        fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
            visitor.visit_unit()
        }

        forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf unit
            unit_struct seq tuple tuple_struct map struct enum identifier
        }
    };
    (reads_ignored) => {
        shared_methods!(common);

        forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf unit
            unit_struct seq tuple tuple_struct map struct enum identifier ignored_any
        }
    };
    (common) => {
        fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
            visitor.visit_some(self)
        }

        fn deserialize_newtype_struct<V: Visitor<'de>>(self, _: &'static str, visitor: V) -> Result<V::Value, Error> {
            visitor.visit_newtype_struct(self)
        }
    };
}

// After `shared_methods!`, which they use.
mod repeated;
mod value;

use repeated::AllDe;
use value::{raw_json, seconds_nanos};

/// One value of a field (or a map value, or a repeated element), read by its `Deserializer`
/// impl in `value.rs`; declared here because `repeated.rs` builds it too.
pub(super) struct ValueDe<'de> {
    pub(super) ctx: Ctx<'de>,
    pub(super) ty: &'static Type,
    pub(super) wire: Wire<'de>,
    pub(super) depth: u32,
    /// What is skipped below this value (a message's fields, a map's entries, each element's).
    pub(super) skip: Option<&'de Node>,
}

/// The safe way from bytes to a `&str`. With the `simd` feature, simdutf8 (simd-json's own UTF-8
/// check): the same answer as `std::str::from_utf8`, with SIMD from 64 bytes on.
#[inline]
fn utf8(bytes: &[u8]) -> Result<&str, Error> {
    #[cfg(feature = "simd")]
    let text = simdutf8::basic::from_utf8(bytes).ok();
    #[cfg(not(feature = "simd"))]
    let text = std::str::from_utf8(bytes).ok();
    text.ok_or_else(not_utf8)
}

#[cold]
fn not_utf8() -> Error {
    Error("a string that is not UTF-8".into())
}

/// One message as a whole value.
struct MessageDe<'de>(Option<Fields<'de>>);

impl<'de> de::Deserializer<'de> for MessageDe<'de> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(mut self, visitor: V) -> Result<V::Value, Error> {
        match self.0.take() {
            Some(fields) => visitor.visit_map(fields),
            None => err("message read twice"),
        }
    }

    shared_methods!(reads_ignored);
}
