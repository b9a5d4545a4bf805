//! One field's value into serde (`ValueDe`, declared in `de.rs`): strings, bytes as base64, ints and bools, times,
//! durations, quantities, IntOrString and embedded JSON as the JSON path reads them, a message
//! as its `Fields`, a wrapped list as its `Elements`; and the small readers of the
//! well-known messages these need (seconds and nanos, `raw`, a quantity's string).

use serde::de::{self, Visitor};
use serde::forward_to_deserialize_any;

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

impl<'de> ValueDe<'de> {
    fn mismatch<T>(&self) -> Result<T, Error> {
        let wire = match self.wire {
            Wire::Varint(_) => "a varint",
            Wire::Bytes(_) => "length-delimited bytes",
            Wire::Fixed => "a fixed-width number",
        };
        err(format!("{wire} where the table says {:?}", self.ty))
    }
}

impl<'de> de::Deserializer<'de> for ValueDe<'de> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match (self.ty, self.wire) {
            (Type::String, Wire::Bytes(b)) => visitor.visit_borrowed_str(utf8(b)?),
            (Type::Bytes, Wire::Bytes(b)) => visitor.visit_string(base64(b)),
            (Type::Bool, Wire::Varint(v)) => visitor.visit_bool(v != 0),
            // int32 negatives are sent sign-extended to 64 bits, so one cast serves both widths.
            (Type::Int, Wire::Varint(v)) => visitor.visit_i64(v as i64),
            (Type::Time, Wire::Bytes(b)) => visitor.visit_str(time::rfc3339(seconds_nanos(b)?.0, None)?.as_str()),
            (Type::MicroTime, Wire::Bytes(b)) => {
                let (seconds, nanos) = seconds_nanos(b)?;
                visitor.visit_str(time::rfc3339(seconds, Some(nanos))?.as_str())
            }
            (Type::Duration, Wire::Bytes(b)) => {
                let mut reader = Reader::new(b);
                let mut nanos = 0i64;
                while let Some((number, wire)) = reader.next()? {
                    if let (1, Wire::Varint(v)) = (number, wire) {
                        nanos = v as i64;
                    }
                }
                visitor.visit_string(time::go_duration(nanos))
            }
            (Type::Quantity, Wire::Bytes(b)) => visitor.visit_borrowed_str(quantity(b)?),
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
                if kind == 1 { visitor.visit_borrowed_str(text) } else { visitor.visit_i64(int) }
            }
            (Type::Raw, Wire::Bytes(b)) => {
                let raw = raw_json(b)?;
                if raw.starts_with(MAGIC) {
                    return err("an embedded object in protobuf (not JSON) is not supported");
                }
                // Straight from the text into the visitor, as the JSON path reads it. UTF-8 is
                // checked once for the whole text (serde_json's `from_slice` checks every string
                // on its own, and `from_str` skips that): invalid UTF-8 is an error either way,
                // and a valid text is parsed to the same value.
                let json = |e: serde_json::Error| Error(format!("embedded JSON: {e}"));
                let text = utf8(raw).map_err(|_| Error("embedded JSON that is not UTF-8".into()))?;
                // Fields skipped inside it: the JSON without them, read as a value (it is untyped
                // JSON, `serde_json::Value` or the like, which only a path into it reaches).
                let mut pruned = Vec::new();
                if let Some(node) = self.skip
                    && skip::json::pruned(raw, node, &mut pruned).is_some()
                {
                    let value: serde_json::Value = serde_json::from_slice(&pruned).map_err(json)?;
                    return value.deserialize_any(visitor).map_err(json);
                }
                let mut de = serde_json::Deserializer::from_str(text);
                let value = de.deserialize_any(visitor).map_err(json)?;
                de.end().map_err(json)?;
                Ok(value)
            }
            (Type::Message(index), Wire::Bytes(b)) => {
                visitor.visit_map(Fields::new(self.ctx, *index, b, self.depth, self.skip)?)
            }
            (Type::Wrapped(inner), Wire::Bytes(b)) => {
                // The wrapper holds the list (field 1) alone, in one run as Go writes it; should
                // anything follow the run, the rest is counted too.
                let reader = Reader::new(b);
                let records = match Records::run(&reader, 1, packable(inner))? {
                    (records, end) if end == b.len() => records,
                    _ => Records::survey(&reader, 1, packable(inner))?.0,
                };
                let (ctx, depth, skip) = (self.ctx, self.depth, self.skip);
                visitor.visit_seq(Elements { ctx, ty: inner, records, packed: None, depth, skip })
            }
            _ => self.mismatch(),
        }
    }

    shared_methods!(skips_ignored);
}
