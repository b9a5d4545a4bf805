//! The other direction: an object's JSON form written as the Kubernetes protobuf encoding, with
//! the same schema table. Fields are written in the table's order, as Go writes them: what the
//! JSON holds, and, as Go's generated marshaller does, the zero value of every non-pointer scalar
//! that JSON leaves out (`omitempty`: the table's `?`), so that a reader sees what a real server
//! sends (docs/protocol.md §12.4). Used by the fake API server to answer in protobuf
//! (src/testing/api/protobuf.rs) and to measure and test the decoder (src/fuzzing.rs).

use serde_json::Value;

use super::error::Error;
use super::schema::{Schema, Type};

const MAX_DEPTH: u32 = 64;

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// The number of bytes [`varint`] writes for `v` (1 to 10).
fn varint_len(v: u64) -> usize {
    (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
}

fn key(out: &mut Vec<u8>, number: u32, wire: u8) {
    varint(out, u64::from(number) << 3 | u64::from(wire));
}

/// A length-delimited field (wire type 2): key, length, bytes.
pub(crate) fn bytes(out: &mut Vec<u8>, number: u32, b: &[u8]) {
    key(out, number, 2);
    varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

/// A length-delimited field whose bytes `fill` appends to `out`, its length written once they
/// are known: room is left for the length of `expected` bytes (what the field held before a
/// rewrite that can only shorten it), and the bytes are moved when the length takes another
/// number of bytes. On `Err`, `out` holds a part of the field: the caller drops it.
pub(crate) fn nested<E>(
    out: &mut Vec<u8>,
    number: u32,
    expected: usize,
    fill: impl FnOnce(&mut Vec<u8>) -> Result<(), E>,
) -> Result<(), E> {
    key(out, number, 2);
    let at = out.len();
    let room = varint_len(expected as u64);
    out.resize(at + room, 0);
    fill(out)?;
    let len = out.len() - at - room;
    let (mut head, mut size, mut v) = ([0u8; 10], 0, len as u64);
    while v >= 0x80 {
        head[size] = (v as u8) | 0x80;
        v >>= 7;
        size += 1;
    }
    head[size] = v as u8;
    size += 1;
    if size != room {
        // Rare: the bytes are moved to fit the length.
        let end = out.len();
        if size > room {
            out.resize(end + size - room, 0);
        }
        out.copy_within(at + room..end, at + size);
        out.truncate(at + size + len);
    }
    out[at..at + size].copy_from_slice(&head[..size]);
    Ok(())
}

/// `k8s\0`, the `runtime.Unknown` envelope and `raw`.
pub(crate) fn envelope(api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
    let filled: Result<_, std::convert::Infallible> = envelope_with(api_version, kind, raw.len(), |out| {
        out.extend_from_slice(raw);
        Ok(())
    });
    match filled {
        Ok(out) => out,
        Err(never) => match never {},
    }
}

/// [`envelope`], its `raw` appended by `fill` (see [`nested`]: about `expected` bytes).
pub(crate) fn envelope_with<E>(
    api_version: &str,
    kind: &str,
    expected: usize,
    fill: impl FnOnce(&mut Vec<u8>) -> Result<(), E>,
) -> Result<Vec<u8>, E> {
    let mut type_meta = Vec::new();
    bytes(&mut type_meta, 1, api_version.as_bytes());
    bytes(&mut type_meta, 2, kind.as_bytes());
    let mut out = Vec::with_capacity(super::MAGIC.len() + type_meta.len() + expected + 16);
    out.extend_from_slice(super::MAGIC);
    bytes(&mut out, 1, &type_meta);
    nested(&mut out, 2, expected, fill)?;
    bytes(&mut out, 3, b"");
    bytes(&mut out, 4, b"");
    Ok(out)
}

/// Writes `value` (a JSON object) as the message `index`.
pub(crate) fn message(schema: &Schema, index: usize, value: &Value, depth: u32) -> Result<Vec<u8>, Error> {
    let mut out = Vec::new();
    write_message(&mut out, schema, index, value, depth, false)?;
    Ok(out)
}

/// [`message`], writing a value the table has no place for (a number where it says a list) by
/// its JSON type instead of failing: a number or a boolean as a varint, anything else as its
/// JSON text. A reader that follows the table then finds the wrong wire type there, as it
/// would in an object a newer or broken server wrote: how the fake API server sends an object
/// that is valid JSON but not of its kind (src/testing/api/protobuf.rs).
pub(crate) fn message_lenient(schema: &Schema, index: usize, value: &Value) -> Result<Vec<u8>, Error> {
    let mut out = Vec::new();
    write_message(&mut out, schema, index, value, 0, true)?;
    Ok(out)
}

fn write_message(
    out: &mut Vec<u8>,
    schema: &Schema,
    index: usize,
    value: &Value,
    depth: u32,
    lenient: bool,
) -> Result<(), Error> {
    let message = &schema.messages[index];
    if depth > MAX_DEPTH {
        return Err(Error(format!("{} is nested more than {MAX_DEPTH} deep", message.name)));
    }
    let Value::Object(map) = value else {
        return Err(Error(format!("{}: not a JSON object", message.name)));
    };
    let mut scratch = Vec::new();
    for field in &message.fields {
        let Some(name) = field.name else {
            // An inlined message: its fields are this object's.
            if let Type::Message(inner) = &field.ty {
                scratch.clear();
                write_message(&mut scratch, schema, *inner, value, depth + 1, lenient)?;
                if !scratch.is_empty() {
                    bytes(out, field.number, &scratch);
                }
            }
            continue;
        };
        let Some(v) = map.get(name) else {
            if field.omit_zero {
                write_zero(out, field.number, &field.ty);
            }
            continue;
        };
        let at = |e: Error| Error(format!("{}.{name}: {e}", message.name));
        match (&field.ty, v) {
            (_, Value::Null) => {}
            (Type::Repeated(element), Value::Array(items)) => {
                for item in items {
                    write_value(out, schema, field.number, element, item, depth, lenient).map_err(at)?;
                }
            }
            (Type::Map(element), Value::Object(entries)) => {
                for (k, v) in entries {
                    let mut entry = Vec::new();
                    bytes(&mut entry, 1, k.as_bytes());
                    write_value(&mut entry, schema, 2, element, v, depth, lenient).map_err(at)?;
                    bytes(out, field.number, &entry);
                }
            }
            (ty, v) => write_value(out, schema, field.number, ty, v, depth, lenient).map_err(at)?,
        }
    }
    Ok(())
}

/// Go's zero value of a non-pointer scalar, written as Go writes it (an empty string, a 0, a
/// false); other types are pointers, slices or maps in Go, which are left out when empty.
fn write_zero(out: &mut Vec<u8>, number: u32, ty: &Type) {
    match ty {
        Type::String => bytes(out, number, b""),
        Type::Int | Type::Bool => {
            key(out, number, 0);
            varint(out, 0);
        }
        _ => {}
    }
}

fn write_value(
    out: &mut Vec<u8>,
    schema: &Schema,
    number: u32,
    ty: &Type,
    v: &Value,
    depth: u32,
    lenient: bool,
) -> Result<(), Error> {
    // The value itself is not quoted: it may be a Secret's.
    let mismatch = || {
        let json = match v {
            Value::Null => "null",
            Value::Bool(_) => "a boolean",
            Value::Number(_) => "a number",
            Value::String(_) => "a string",
            Value::Array(_) => "an array",
            Value::Object(_) => "an object",
        };
        Error(format!("{json} where the table says {ty:?}"))
    };
    match (ty, v) {
        (Type::String, Value::String(s)) => bytes(out, number, s.as_bytes()),
        (Type::Bytes, Value::String(s)) => {
            use base64::Engine as _;
            let raw = base64::engine::general_purpose::STANDARD.decode(s).map_err(|e| Error(format!("base64: {e}")))?;
            bytes(out, number, &raw);
        }
        (Type::Bool, Value::Bool(b)) => {
            key(out, number, 0);
            varint(out, u64::from(*b));
        }
        (Type::Int, Value::Number(n)) => {
            key(out, number, 0);
            varint(out, n.as_i64().ok_or_else(mismatch)? as u64);
        }
        (Type::Time | Type::MicroTime, Value::String(s)) => {
            let (seconds, nanos) = super::time::parse_rfc3339(s)?;
            let mut t = Vec::new();
            key(&mut t, 1, 0);
            varint(&mut t, seconds as u64);
            if matches!(ty, Type::MicroTime) {
                key(&mut t, 2, 0);
                varint(&mut t, u64::from(nanos));
            }
            bytes(out, number, &t);
        }
        (Type::Quantity, Value::String(s)) => {
            let mut q = Vec::new();
            bytes(&mut q, 1, s.as_bytes());
            bytes(out, number, &q);
        }
        (Type::Quantity, Value::Number(n)) => {
            let mut q = Vec::new();
            bytes(&mut q, 1, n.to_string().as_bytes());
            bytes(out, number, &q);
        }
        (Type::IntOrString, Value::Number(n)) => {
            let mut x = Vec::new();
            key(&mut x, 1, 0);
            varint(&mut x, 0);
            key(&mut x, 2, 0);
            varint(&mut x, n.as_i64().ok_or_else(mismatch)? as u64);
            bytes(out, number, &x);
        }
        (Type::IntOrString, Value::String(s)) => {
            let mut x = Vec::new();
            key(&mut x, 1, 0);
            varint(&mut x, 1);
            bytes(&mut x, 3, s.as_bytes());
            bytes(out, number, &x);
        }
        (Type::Raw, v) => {
            let mut r = Vec::new();
            bytes(&mut r, 1, &serde_json::to_vec(v).map_err(|e| Error(e.to_string()))?);
            bytes(out, number, &r);
        }
        (Type::Message(index), Value::Object(_)) => {
            let mut m = Vec::new();
            write_message(&mut m, schema, *index, v, depth + 1, lenient)?;
            bytes(out, number, &m);
        }
        (Type::Wrapped(element), Value::Array(items)) => {
            let mut w = Vec::new();
            for item in items {
                write_value(&mut w, schema, 1, element, item, depth, lenient)?;
            }
            bytes(out, number, &w);
        }
        (_, Value::Bool(b)) if lenient => {
            key(out, number, 0);
            varint(out, u64::from(*b));
        }
        (_, Value::Number(n)) if lenient && n.as_i64().is_some() => {
            key(out, number, 0);
            varint(out, n.as_i64().unwrap_or_default() as u64);
        }
        (_, v) if lenient => bytes(out, number, v.to_string().as_bytes()),
        _ => return Err(mismatch()),
    }
    Ok(())
}
