//! The other direction: an object's JSON form written as the Kubernetes protobuf encoding, with
//! the same schema table. Fields are written in the table's order, as Go writes them; only what
//! the JSON holds is written (Go would also write the zero values JSON leaves out, which read back
//! the same). Used to measure and test the decoder on realistic objects (src/fuzzing.rs).

use serde_json::Value;

use super::de::Error;
use super::schema::{Schema, Type};

const MAX_DEPTH: u32 = 64;

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn key(out: &mut Vec<u8>, number: u32, wire: u8) {
    varint(out, u64::from(number) << 3 | u64::from(wire));
}

fn bytes(out: &mut Vec<u8>, number: u32, b: &[u8]) {
    key(out, number, 2);
    varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

/// `k8s\0`, the `runtime.Unknown` envelope and `raw`.
pub(crate) fn envelope(api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
    let mut type_meta = Vec::new();
    bytes(&mut type_meta, 1, api_version.as_bytes());
    bytes(&mut type_meta, 2, kind.as_bytes());
    let mut out = super::MAGIC.to_vec();
    bytes(&mut out, 1, &type_meta);
    bytes(&mut out, 2, raw);
    bytes(&mut out, 3, b"");
    bytes(&mut out, 4, b"");
    out
}

/// Writes `value` (a JSON object) as the message `index`.
pub(crate) fn message(schema: &Schema, index: usize, value: &Value, depth: u32) -> Result<Vec<u8>, Error> {
    let mut out = Vec::new();
    write_message(&mut out, schema, index, value, depth)?;
    Ok(out)
}

fn write_message(out: &mut Vec<u8>, schema: &Schema, index: usize, value: &Value, depth: u32) -> Result<(), Error> {
    let message = &schema.messages[index];
    if depth > MAX_DEPTH {
        return Err(Error(format!("{} is nested more than {MAX_DEPTH} deep", message.name)));
    }
    let Value::Object(map) = value else {
        return Err(Error(format!("{}: not a JSON object", message.name)));
    };
    for field in &message.fields {
        let Some(name) = field.name else {
            // An inlined message: its fields are this object's.
            if let Type::Message(inner) = &field.ty {
                let nested = self::message(schema, *inner, value, depth + 1)?;
                if !nested.is_empty() {
                    bytes(out, field.number, &nested);
                }
            }
            continue;
        };
        let Some(v) = map.get(name) else { continue };
        let at = |e: Error| Error(format!("{}.{name}: {e}", message.name));
        match (&field.ty, v) {
            (_, Value::Null) => {}
            (Type::Repeated(element), Value::Array(items)) => {
                for item in items {
                    write_value(out, schema, field.number, element, item, depth).map_err(at)?;
                }
            }
            (Type::Map(element), Value::Object(entries)) => {
                for (k, v) in entries {
                    let mut entry = Vec::new();
                    bytes(&mut entry, 1, k.as_bytes());
                    write_value(&mut entry, schema, 2, element, v, depth).map_err(at)?;
                    bytes(out, field.number, &entry);
                }
            }
            (ty, v) => write_value(out, schema, field.number, ty, v, depth).map_err(at)?,
        }
    }
    Ok(())
}

fn write_value(out: &mut Vec<u8>, schema: &Schema, number: u32, ty: &Type, v: &Value, depth: u32) -> Result<(), Error> {
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
        (Type::Message(index), v) => {
            let m = self::message(schema, *index, v, depth + 1)?;
            bytes(out, number, &m);
        }
        (Type::Wrapped(element), Value::Array(items)) => {
            let mut w = Vec::new();
            for item in items {
                write_value(&mut w, schema, 1, element, item, depth)?;
            }
            bytes(out, number, &w);
        }
        _ => return Err(mismatch()),
    }
    Ok(())
}
