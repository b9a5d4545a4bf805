//! One field's value into serde (`ValueDe`, declared in `de.rs`): strings, bytes as base64, ints and bools, times,
//! durations, quantities, IntOrString and embedded JSON as the JSON path reads them, a message
//! as its `Fields`, a wrapped list as its `Elements`; and the small readers of the
//! well-known messages these need (seconds and nanos, `raw`, a quantity's string).

use serde::de::{self, Visitor};

use super::repeated::Elements;
use super::{Error, Fields, Reader, Records, ValueDe, Wire, err, packable, utf8};
use crate::codec::protobuf::schema::Type;
use crate::codec::protobuf::{MAGIC, base64, time};
use crate::codec::skip;

pub(super) fn seconds_nanos(bytes: &[u8]) -> Result<(i64, i64), Error> {
    let (mut seconds, mut nanos) = (0i64, 0i64);
    let mut reader = Reader::new(bytes);
    while let Some((number, wire)) = reader.next()? {
        match (number, wire) {
            (1, Wire::Varint(v)) => seconds = v as i64,
            (2, Wire::Varint(v)) => nanos = i64::from(v as i32),
            _ => {}
        }
    }
    Ok((seconds, nanos))
}

/// Field 1 (`raw`) of a `RawExtension` or `FieldsV1`.
pub(super) fn raw_json(bytes: &[u8]) -> Result<&[u8], Error> {
    let mut reader = Reader::new(bytes);
    let mut raw: &[u8] = &[];
    while let Some((number, wire)) = reader.next()? {
        if let (1, Wire::Bytes(b)) = (number, wire) {
            raw = b;
        }
    }
    Ok(raw)
}

/// The string of a `Quantity` message (field 1).
fn quantity(bytes: &[u8]) -> Result<&str, Error> {
    let mut reader = Reader::new(bytes);
    let mut text = "0";
    while let Some((number, wire)) = reader.next()? {
        if let (1, Wire::Bytes(b)) = (number, wire) {
            text = utf8(b)?;
        }
    }
    Ok(if text.is_empty() { "0" } else { text })
}

/// What one value reads as, before a visitor sees it. Reading it is the part of every
/// `deserialize_*` method that does not depend on the visitor, so it is compiled once rather
/// than once per visitor type (a `Pod` has about 180 of them, and each `deserialize_*` method
/// is generated for each visitor that calls it).
enum Read<'de> {
    /// Embedded JSON: the text, or what is left of it once its skipped fields are out.
    Json(&'de str),
    Plain(Plain<'de>),
}

/// Every other value, as the JSON path shows it to a visitor.
enum Plain<'de> {
    Str(&'de str),
    String(String),
    Time(time::TimeText),
    Bool(bool),
    Int(i64),
    /// A message of the table's index, read as a map; small, unlike its `Fields`, because
    /// this value is returned and moved before a visitor sees it.
    Message(usize, &'de [u8]),
    /// A wrapped list's records of the element type.
    List(&'static Type, Records<'de>),
}

impl<'de> Plain<'de> {
    /// Shows the value to `visitor`; `de` is the value it was read from.
    fn visit<V: Visitor<'de>>(self, de: &ValueDe<'de>, visitor: V) -> Result<V::Value, Error> {
        match self {
            Plain::Str(s) => visitor.visit_borrowed_str(s),
            Plain::String(s) => visitor.visit_string(s),
            Plain::Time(t) => visitor.visit_str(t.as_str()),
            Plain::Bool(b) => visitor.visit_bool(b),
            Plain::Int(i) => visitor.visit_i64(i),
            Plain::Message(index, bytes) => visitor.visit_map(de.fields(index, bytes)?),
            Plain::List(ty, records) => {
                let (ctx, depth, skip) = (de.ctx, de.depth, de.skip);
                visitor.visit_seq(Elements { ctx, ty, records, packed: None, depth, skip })
            }
        }
    }
}

/// Embedded JSON, read as the JSON path reads it: by serde_json's deserializer over the text,
/// with the `deserialize_*` method the value's type asked this one for. The JSON path calls the
/// same methods with the same visitors, so serde_json's code for them is not generated again.
fn json<'de, T>(
    text: &'de str,
    read: impl FnOnce(&mut serde_json::Deserializer<serde_json::de::StrRead<'de>>) -> Result<T, serde_json::Error>,
) -> Result<T, Error> {
    let mut de = serde_json::Deserializer::from_str(text);
    match read(&mut de) {
        Ok(value) => de.end().map(|()| value).map_err(embedded),
        Err(e) => Err(embedded(e)),
    }
}

#[cold]
fn embedded(e: serde_json::Error) -> Error {
    Error(format!("embedded JSON: {e}"))
}

impl<'de> ValueDe<'de> {
    /// The value as the table's type says to read it.
    fn read(&self) -> Result<Read<'de>, Error> {
        Ok(Read::Plain(match (self.ty, self.wire) {
            (Type::String, Wire::Bytes(b)) => Plain::Str(utf8(b)?),
            (Type::Bytes, Wire::Bytes(b)) => Plain::String(base64(b)),
            (Type::Bool, Wire::Varint(v)) => Plain::Bool(v != 0),
            // int32 negatives are sent sign-extended to 64 bits, so one cast serves both widths.
            (Type::Int, Wire::Varint(v)) => Plain::Int(v as i64),
            (Type::Time, Wire::Bytes(b)) => Plain::Time(time::rfc3339(seconds_nanos(b)?.0, None)?),
            (Type::MicroTime, Wire::Bytes(b)) => {
                let (seconds, nanos) = seconds_nanos(b)?;
                Plain::Time(time::rfc3339(seconds, Some(nanos))?)
            }
            (Type::Duration, Wire::Bytes(b)) => {
                let mut reader = Reader::new(b);
                let mut nanos = 0i64;
                while let Some((number, wire)) = reader.next()? {
                    if let (1, Wire::Varint(v)) = (number, wire) {
                        nanos = v as i64;
                    }
                }
                Plain::String(time::go_duration(nanos))
            }
            (Type::Quantity, Wire::Bytes(b)) => Plain::Str(quantity(b)?),
            (Type::IntOrString, Wire::Bytes(b)) => {
                let (mut kind, mut int, mut text) = (0u64, 0i64, "");
                let mut reader = Reader::new(b);
                while let Some((number, wire)) = reader.next()? {
                    match (number, wire) {
                        (1, Wire::Varint(v)) => kind = v,
                        (2, Wire::Varint(v)) => int = i64::from(v as i32),
                        (3, Wire::Bytes(s)) => text = utf8(s)?,
                        _ => {}
                    }
                }
                if kind == 1 { Plain::Str(text) } else { Plain::Int(int) }
            }
            (Type::Raw, Wire::Bytes(b)) => {
                let raw = raw_json(b)?;
                if raw.starts_with(MAGIC) {
                    return err("an embedded object in protobuf (not JSON) is not supported");
                }
                // UTF-8 is checked once for the whole text (serde_json's `from_slice` checks every
                // string on its own, and `from_str` skips that): invalid UTF-8 is an error either
                // way, and a valid text is parsed to the same value.
                let text = utf8(raw).map_err(|_| Error("embedded JSON that is not UTF-8".into()))?;
                // Fields skipped inside it: the text without them, kept for the rest of the
                // object's decode, as the input is.
                let mut pruned = Vec::new();
                match self.skip {
                    Some(node) if skip::json::pruned(raw, node, &mut pruned).is_some() => {
                        // What `pruned` writes of valid UTF-8 is valid UTF-8.
                        let pruned = String::from_utf8(pruned)
                            .map_err(|_| Error("embedded JSON that is not UTF-8 once pruned".into()))?;
                        return Ok(Read::Json(self.ctx.texts.keep(pruned)));
                    }
                    _ => return Ok(Read::Json(text)),
                }
            }
            (Type::Message(index), Wire::Bytes(b)) => Plain::Message(*index, b),
            (Type::Wrapped(inner), Wire::Bytes(b)) => {
                // The wrapper holds the list (field 1) alone, in one run as Go writes it; should
                // anything follow the run, the rest is counted too.
                let reader = Reader::new(b);
                let records = match Records::run(&reader, 1, packable(inner))? {
                    (records, end) if end == b.len() => records,
                    _ => Records::survey(&reader, 1, packable(inner))?.0,
                };
                Plain::List(inner, records)
            }
            _ => return self.mismatch(),
        }))
    }

    /// The fields of this value, a message of the table's `index` held in `bytes`.
    #[inline]
    fn fields(&self, index: usize, bytes: &'de [u8]) -> Result<Fields<'de>, Error> {
        Fields::new(self.ctx, index, bytes, self.depth, self.skip)
    }

    #[cold]
    fn mismatch<T>(&self) -> Result<T, Error> {
        let wire = match self.wire {
            Wire::Varint(_) => "a varint",
            Wire::Bytes(_) => "length-delimited bytes",
            Wire::Fixed => "a fixed-width number",
        };
        err(format!("{wire} where the table says {:?}", self.ty))
    }
}

/// `deserialize_*` methods that read the value and show it to the visitor, embedded JSON by
/// serde_json's method of the same name (see [`json`]). The value a method names by itself
/// (a message for `deserialize_struct`, a string for `deserialize_str`, …) is shown in line
/// first: most values are, and this keeps them as fast as a reader written for each visitor.
macro_rules! read_then_visit {
    ($($method:ident($($arg:ident: $ty:ty),*) $(=> $fast:ident)?;)*) => {$(
        fn $method<V: Visitor<'de>>(self, $($arg: $ty,)* visitor: V) -> Result<V::Value, Error> {
            $(read_then_visit!(@$fast self visitor);)?
            match self.read()? {
                Read::Json(text) => json(text, |de| de.$method($($arg,)* visitor)),
                Read::Plain(plain) => plain.visit(&self, visitor),
            }
        }
    )*};
    (@message $de:ident $visitor:ident) => {
        if let (Type::Message(index), Wire::Bytes(b)) = ($de.ty, $de.wire) {
            return $visitor.visit_map($de.fields(*index, b)?);
        }
    };
    (@string $de:ident $visitor:ident) => {
        if let (Type::String, Wire::Bytes(b)) = ($de.ty, $de.wire) {
            return $visitor.visit_borrowed_str(utf8(b)?);
        }
    };
    (@int $de:ident $visitor:ident) => {
        if let (Type::Int, Wire::Varint(v)) = ($de.ty, $de.wire) {
            return $visitor.visit_i64(v as i64);
        }
    };
    (@boolean $de:ident $visitor:ident) => {
        if let (Type::Bool, Wire::Varint(v)) = ($de.ty, $de.wire) {
            return $visitor.visit_bool(v != 0);
        }
    };
}

impl<'de> de::Deserializer<'de> for ValueDe<'de> {
    type Error = Error;

    read_then_visit! {
        deserialize_any();
        deserialize_bool() => boolean;
        deserialize_i8() => int;
        deserialize_i16() => int;
        deserialize_i32() => int;
        deserialize_i64() => int;
        deserialize_i128() => int;
        deserialize_u8() => int;
        deserialize_u16() => int;
        deserialize_u32() => int;
        deserialize_u64() => int;
        deserialize_u128() => int;
        deserialize_f32();
        deserialize_f64();
        deserialize_char() => string;
        deserialize_str() => string;
        deserialize_string() => string;
        deserialize_bytes();
        deserialize_byte_buf();
        deserialize_unit();
        deserialize_unit_struct(name: &'static str);
        deserialize_seq();
        deserialize_tuple(len: usize);
        deserialize_tuple_struct(name: &'static str, len: usize);
        deserialize_map() => message;
        deserialize_struct(name: &'static str, fields: &'static [&'static str]) => message;
        deserialize_enum(name: &'static str, variants: &'static [&'static str]);
        deserialize_identifier() => string;
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_unit()
    }

    shared_methods!(common);
}
