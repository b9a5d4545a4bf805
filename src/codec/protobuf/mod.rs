//! The Kubernetes protobuf encoding (`application/vnd.kubernetes.protobuf`), read straight into
//! k8s-openapi types (docs/protocol.md, "Protobuf", describes the format).
//!
//! A body is the 4-byte magic `k8s\0` and a `runtime.Unknown` message: `1` TypeMeta
//! {`1` apiVersion, `2` kind}, `2` raw (the object's own message), `3` content encoding, `4`
//! content type. The object's message is found in the schema table ([`schema`], generated from
//! the upstream `.proto` files) by apiVersion and kind, and read by the serde `Deserializer` in
//! [`de`], which drives the type's own `Deserialize` impl as JSON would, apiVersion and kind
//! included. The fake API server reads kubectl's protobuf request bodies with the same table
//! (and a reader of its own, so that the two check each other), and writes its protobuf answers
//! with [`en`].

// The encoder serves the fake API server (feature `testing`), fuzzing and tests.
#![cfg_attr(not(any(feature = "testing", feature = "fuzzing")), allow(dead_code))]

pub(crate) mod de;
pub(crate) mod en;
mod error;
pub(crate) mod prune;
pub(crate) mod schema;
mod time;

use base64::Engine as _;
use serde::de::DeserializeOwned;

pub(crate) use de::Error;
use de::{Reader, Wire};

/// The first four bytes of every enveloped object.
pub(crate) const MAGIC: &[u8] = b"k8s\0";

pub(crate) fn base64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// The parts of a `runtime.Unknown` envelope.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Envelope<'a> {
    pub(crate) api_version: &'a str,
    pub(crate) kind: &'a str,
    pub(crate) raw: &'a [u8],
}

/// Reads the magic and the envelope of a body.
pub(crate) fn envelope(body: &[u8]) -> Result<Envelope<'_>, Error> {
    let Some(rest) = body.strip_prefix(MAGIC) else {
        return Err(Error("the body does not start with the Kubernetes protobuf magic \"k8s\\0\"".into()));
    };
    fn utf8<'a>(b: &'a [u8], what: &str) -> Result<&'a str, Error> {
        std::str::from_utf8(b).map_err(|_| Error(format!("{what} is not UTF-8")))
    }
    let mut out = Envelope { api_version: "", kind: "", raw: &[] };
    let mut encoding = "";
    let mut reader = Reader::new(rest);
    while let Some((number, value)) = reader.next().map_err(|e| Error(format!("envelope: {e}")))? {
        match (number, value) {
            (1, Wire::Bytes(type_meta)) => {
                let mut tm = Reader::new(type_meta);
                while let Some((n, v)) = tm.next().map_err(|e| Error(format!("envelope typeMeta: {e}")))? {
                    match (n, v) {
                        (1, Wire::Bytes(b)) => out.api_version = utf8(b, "apiVersion")?,
                        (2, Wire::Bytes(b)) => out.kind = utf8(b, "kind")?,
                        _ => {}
                    }
                }
            }
            (2, Wire::Bytes(b)) => out.raw = b,
            (3, Wire::Bytes(b)) => encoding = utf8(b, "contentEncoding")?,
            _ => {}
        }
    }
    if !encoding.is_empty() {
        return Err(Error(format!("content encoding {encoding:?} is not supported")));
    }
    Ok(out)
}

/// Decodes one enveloped object (or list) into `T`, as its JSON form would decode (apiVersion and
/// kind included); field numbers the table does not know are skipped.
pub(crate) fn object<T: DeserializeOwned>(body: &[u8]) -> Result<T, Error> {
    let envelope = envelope(body)?;
    let schema = schema::schema();
    let Some(index) = schema.kind(envelope.api_version, envelope.kind) else {
        return Err(Error(format!(
            "kind {:?} of apiVersion {:?} has no protobuf form known to this client",
            envelope.kind, envelope.api_version
        )));
    };
    let head = [("apiVersion", envelope.api_version), ("kind", envelope.kind)];
    de::message(schema, index, envelope.raw, &head, None)
}

/// Encodes an object's JSON form (with `apiVersion` and `kind`) as an enveloped protobuf body.
/// The fuzzing entry points' (and the tests') encoder.
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) fn encode(value: &serde_json::Value) -> Result<Vec<u8>, Error> {
    encode_with(value, false)
}

/// [`encode`], writing what the table has no place for by its JSON type (see
/// [`en::message_lenient`]): fails only for a kind without a protobuf form. The fake server's
/// (and the tests') encoder.
#[cfg(any(test, feature = "testing"))]
pub(crate) fn encode_lenient(value: &serde_json::Value) -> Result<Vec<u8>, Error> {
    encode_with(value, true)
}

fn encode_with(value: &serde_json::Value, lenient: bool) -> Result<Vec<u8>, Error> {
    let text = |key: &str| value.get(key).and_then(serde_json::Value::as_str).unwrap_or_default();
    let (api_version, kind) = (text("apiVersion"), text("kind"));
    let schema = schema::schema();
    let Some(index) = schema.kind(api_version, kind) else {
        return Err(Error(format!("kind {kind:?} of apiVersion {api_version:?} has no protobuf form")));
    };
    let raw = if lenient { en::message_lenient(schema, index, value)? } else { en::message(schema, index, value, 0)? };
    Ok(en::envelope(api_version, kind, &raw))
}

#[cfg(test)]
mod tests;
