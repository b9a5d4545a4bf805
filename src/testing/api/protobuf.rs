//! Reads the Kubernetes protobuf encoding (`application/vnd.kubernetes.protobuf`) of the built-in
//! types the fake serves, into the JSON the rest of the server works with; and writes its answers
//! in that encoding to clients that ask for it first (docs/protocol.md §12).
//!
//! Answers: the server builds them as JSON, as always; [`transcode`] turns a JSON answer whose
//! kind has a protobuf form (a built-in object, its list, a `Status`) into protobuf, and
//! [`frame`] writes a watch event as a length-delimited frame. Both use the client's encoder
//! (src/codec/protobuf/en.rs), which writes Go's zero values as the real server does; what the
//! table has no place for (an object stored as valid JSON but not of its kind, to test the
//! client's undecodable-object policy) is written by its JSON type, so a reader finds the wrong
//! wire type where a newer or broken server would have put one.
//!
//! kubectl's typed `create` commands send protobuf and do not retry with JSON after a 415, so a
//! fake that only read JSON could not be driven by them. The body is the 4-byte magic `k8s\0`
//! followed by a `runtime.Unknown` message (`1` TypeMeta {`1` apiVersion, `2` kind}, `2` the
//! object's own message, `3` content encoding, `4` content type); the object's fields come from
//! the schema table the client also decodes with (src/codec/protobuf/table.txt, generated from the
//! upstream `.proto` files). That table is the one thing the fake takes from the client: the
//! reading below is its own, so the two check each other.
//!
//! Go's generated code writes every non-pointer field, also when it holds its zero value; the real
//! server reads those into Go structs and leaves them out of JSON again (`omitempty`). The same
//! happens here for the fields the table marks so; a zero time is JSON `null` and left out too.
//! A field number the table does not know is an error that names it: the fake never drops part
//! of a body silently.

use std::time::{Duration, UNIX_EPOCH};

use serde_json::{Map, Value};

use super::super::http::{Request, Response};
use super::super::util::{base64_std, rfc3339};
use crate::codec::protobuf::encode_lenient;
use crate::codec::protobuf::schema::{Schema, Type, schema};

/// The media type.
pub(crate) const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";

const MAGIC: &[u8] = b"k8s\0";
/// Messages nest far less deeply than this in every type the table holds.
const MAX_DEPTH: usize = 32;

/// One field as it arrives on the wire.
enum Wire<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    /// A 32- or 64-bit fixed-width value: no type in the table uses one.
    Fixed,
}

struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn new(data: &'a [u8]) -> Self {
        Reader { data, pos: 0 }
    }

    fn varint(&mut self) -> Result<u64, String> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let Some(&byte) = self.data.get(self.pos) else {
                return Err(format!("truncated varint at byte {}", self.pos));
            };
            self.pos += 1;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(format!("varint longer than 10 bytes at byte {}", self.pos))
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.data.len());
        let Some(end) = end else {
            return Err(format!("a field of {n} bytes at byte {} runs past the end", self.pos));
        };
        let bytes = &self.data[self.pos..end];
        self.pos = end;
        Ok(bytes)
    }

    /// The next field number and value, or `None` at the end.
    fn next(&mut self) -> Result<Option<(u64, Wire<'a>)>, String> {
        if self.pos >= self.data.len() {
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
                let len = usize::try_from(self.varint()?).map_err(|_| "length does not fit".to_string())?;
                Wire::Bytes(self.take(len)?)
            }
            5 => {
                self.take(4)?;
                Wire::Fixed
            }
            other => return Err(format!("wire type {other} of field {} is not supported", key >> 3)),
        };
        Ok(Some((key >> 3, value)))
    }
}

/// Whether the client's `Accept` header lists protobuf before any JSON or wildcard range, in a
/// form the fake writes in protobuf: full objects (no `as=` parameter), as client-go's
/// `application/vnd.kubernetes.protobuf, application/json` asks, or `PartialObjectMetadata` and
/// its list in `meta.k8s.io/v1`, as client-go's metadata client asks
/// (`application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,…`).
/// A protobuf range asking for another form (a `Table`, which the real server writes only as
/// JSON or YAML) is passed over, as the real server passes over what it cannot serve.
pub(crate) fn accepted_first(req: &Request) -> bool {
    let Some(accept) = req.header("accept") else { return false };
    for range in accept.split(',') {
        let mut parts = range.split(';').map(str::trim);
        let media = parts.next().unwrap_or_default();
        if media.eq_ignore_ascii_case(MEDIA_TYPE) {
            let params: Vec<(String, &str)> = parts
                .filter_map(|p| p.split_once('='))
                .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().trim_matches('"')))
                .collect();
            let param = |k: &str| params.iter().find(|(pk, _)| pk == k).map(|(_, v)| *v);
            let served = match param("as") {
                None => true,
                Some("PartialObjectMetadata" | "PartialObjectMetadataList") => {
                    param("g") == Some("meta.k8s.io") && param("v") == Some("v1")
                }
                Some(_) => false,
            };
            if served {
                return true;
            }
            continue;
        }
        if media.eq_ignore_ascii_case("application/json") || media == "*/*" || media == "application/*" {
            return false;
        }
    }
    false
}

/// An object's protobuf form, enveloped; `None` for a kind without one (a custom resource).
pub(crate) fn encode(value: &Value) -> Option<Vec<u8>> {
    encode_lenient(value).ok()
}

/// A JSON answer in protobuf, if its kind has a protobuf form; any other answer as it is.
pub(crate) fn transcode(resp: Response) -> Response {
    let json = resp.headers.iter().any(|(k, v)| {
        k.eq_ignore_ascii_case("content-type") && v.split(';').next().is_some_and(|m| m.trim() == "application/json")
    });
    if !json {
        return resp;
    }
    let Some(body) = serde_json::from_slice::<Value>(&resp.body).ok().as_ref().and_then(encode) else {
        return resp;
    };
    let mut out = Response { body, ..resp };
    for (k, v) in &mut out.headers {
        if k.eq_ignore_ascii_case("content-type") {
            *v = MEDIA_TYPE.to_owned();
        }
    }
    out
}

/// One watch event as a protobuf frame (docs/protocol.md §12.3): the 4-byte big-endian length,
/// then a `WatchEvent` {`1` type, `2` RawExtension {`1` the enveloped object}}; `None` when the
/// object's kind has no protobuf form.
pub(crate) fn frame(event_type: &str, object: &Value) -> Option<Vec<u8>> {
    fn field(out: &mut Vec<u8>, number: u8, bytes: &[u8]) {
        out.push(number << 3 | 2);
        let mut n = bytes.len() as u64;
        while n >= 0x80 {
            out.push((n as u8) | 0x80);
            n >>= 7;
        }
        out.push(n as u8);
        out.extend_from_slice(bytes);
    }
    let raw = encode(object)?;
    let mut extension = Vec::with_capacity(raw.len() + 8);
    field(&mut extension, 1, &raw);
    let mut event = Vec::with_capacity(extension.len() + 24);
    field(&mut event, 1, event_type.as_bytes());
    field(&mut event, 2, &extension);
    let len = u32::try_from(event.len()).ok()?;
    let mut out = Vec::with_capacity(event.len() + 4);
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(&event);
    Some(out)
}

/// Decodes a protobuf request body into JSON; the error says what could not be read and where.
pub(crate) fn decode(body: &[u8]) -> Result<Value, String> {
    let Some(rest) = body.strip_prefix(MAGIC) else {
        return Err("the body does not start with the Kubernetes protobuf magic \"k8s\\0\"".into());
    };
    let (mut api_version, mut kind, mut raw, mut encoding) = (String::new(), String::new(), None, String::new());
    let mut reader = Reader::new(rest);
    while let Some((number, value)) = reader.next()? {
        match (number, value) {
            (1, Wire::Bytes(type_meta)) => {
                let mut tm = Reader::new(type_meta);
                while let Some((n, v)) = tm.next()? {
                    match (n, v) {
                        (1, Wire::Bytes(b)) => api_version = utf8(b, "typeMeta.apiVersion")?,
                        (2, Wire::Bytes(b)) => kind = utf8(b, "typeMeta.kind")?,
                        _ => {}
                    }
                }
            }
            (2, Wire::Bytes(b)) => raw = Some(b),
            (3, Wire::Bytes(b)) => encoding = utf8(b, "contentEncoding")?,
            _ => {}
        }
    }
    if !encoding.is_empty() {
        return Err(format!("content encoding {encoding:?} is not supported"));
    }
    let Some(index) = schema().kind(&api_version, &kind) else {
        return Err(format!(
            "kind {kind:?} (apiVersion {api_version:?}) cannot be read from protobuf by the fake server"
        ));
    };
    let mut object = message(schema(), raw.unwrap_or_default(), index, 0)?;
    if let Value::Object(map) = &mut object {
        map.insert("apiVersion".into(), Value::String(api_version));
        map.insert("kind".into(), Value::String(kind));
    }
    Ok(object)
}

fn utf8(bytes: &[u8], what: &str) -> Result<String, String> {
    String::from_utf8(bytes.to_vec()).map_err(|_| format!("{what} is not UTF-8"))
}

fn message(schema: &Schema, bytes: &[u8], index: usize, depth: usize) -> Result<Value, String> {
    let m = &schema.messages[index];
    let name = m.name;
    if depth > MAX_DEPTH {
        return Err(format!("{name} is nested more than {MAX_DEPTH} deep"));
    }
    let mut out = Map::new();
    let mut reader = Reader::new(bytes);
    while let Some((number, wire)) = reader.next()? {
        let Some(field) = m.field(number) else {
            return Err(format!(
                "field {number} of {name} is not in the fake server's protobuf table; send JSON instead"
            ));
        };
        let Some(field_name) = field.name else {
            // A message inlined into its parent (Go's embedded struct).
            if let Value::Object(inner) = scalar(schema, &field.ty, wire, name, depth)? {
                out.extend(inner);
            }
            continue;
        };
        let at = format!("{name}.{field_name}");
        match &field.ty {
            Type::Repeated(inner) => {
                let list = out.entry(field_name).or_insert_with(|| Value::Array(Vec::new()));
                let Value::Array(items) = list else { continue };
                match (inner.as_ref(), wire) {
                    // Packed numbers (proto3 style): several varints in one length-delimited field.
                    (Type::Int | Type::Bool, Wire::Bytes(packed)) => {
                        let mut r = Reader::new(packed);
                        while r.pos < packed.len() {
                            items.push(scalar(schema, inner, Wire::Varint(r.varint()?), &at, depth)?);
                        }
                    }
                    (inner, wire) => items.push(scalar(schema, inner, wire, &at, depth)?),
                }
            }
            Type::Map(value_type) => {
                let Wire::Bytes(entry) = wire else {
                    return Err(format!("{at}: a map entry must be length-delimited"));
                };
                let (key, value) = map_entry(schema, entry, value_type, &at, depth)?;
                if let Value::Object(map) = out.entry(field_name).or_insert_with(|| Value::Object(Map::new())) {
                    map.insert(key, value);
                }
            }
            ty => {
                let value = scalar(schema, ty, wire, &at, depth)?;
                // Go leaves zero scalars of `omitempty` fields out, and a zero time is `null`.
                if value.is_null() || (field.omit_zero && is_zero(&value)) {
                    out.remove(field_name);
                } else {
                    out.insert(field_name.to_string(), value);
                }
            }
        }
    }
    Ok(Value::Object(out))
}

/// A zero scalar.
fn is_zero(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_i64() == Some(0),
        Value::String(s) => s.is_empty(),
        Value::Array(_) | Value::Object(_) => false,
    }
}

fn map_entry(
    schema: &Schema,
    bytes: &[u8],
    value_type: &Type,
    at: &str,
    depth: usize,
) -> Result<(String, Value), String> {
    let (mut key, mut value) = (String::new(), None);
    let mut reader = Reader::new(bytes);
    while let Some((number, wire)) = reader.next()? {
        match (number, wire) {
            (1, Wire::Bytes(b)) => key = utf8(b, at)?,
            (2, wire) => value = Some(scalar(schema, value_type, wire, at, depth)?),
            (n, _) => return Err(format!("{at}: map entry field {n} is unknown")),
        }
    }
    let value = match value {
        Some(v) => v,
        // An absent value is the type's zero value.
        None => match value_type {
            Type::Bytes | Type::String => Value::String(String::new()),
            Type::Quantity => Value::String("0".into()),
            Type::Int => Value::from(0),
            Type::Bool => Value::Bool(false),
            Type::Message(index) => message(schema, &[], *index, depth + 1)?,
            _ => Value::Null,
        },
    };
    Ok((key, value))
}

fn scalar(schema: &Schema, ty: &Type, wire: Wire<'_>, at: &str, depth: usize) -> Result<Value, String> {
    Ok(match (ty, wire) {
        (Type::String, Wire::Bytes(b)) => Value::String(utf8(b, at)?),
        (Type::Bytes, Wire::Bytes(b)) => Value::String(base64_std(b)),
        (Type::Bool, Wire::Varint(v)) => Value::Bool(v != 0),
        // int32 negatives are sent sign-extended to 64 bits, so one cast serves both widths.
        (Type::Int, Wire::Varint(v)) => Value::from(v as i64),
        (Type::Time, Wire::Bytes(b)) => time(b, false, at)?,
        (Type::MicroTime, Wire::Bytes(b)) => time(b, true, at)?,
        (Type::Duration, Wire::Bytes(_)) => return Err(format!("{at}: durations are not read by the fake server")),
        (Type::Quantity, Wire::Bytes(b)) => {
            let mut r = Reader::new(b);
            let mut text = String::new();
            while let Some((n, w)) = r.next()? {
                if let (1, Wire::Bytes(s)) = (n, w) {
                    text = utf8(s, at)?;
                }
            }
            Value::String(text)
        }
        (Type::IntOrString, Wire::Bytes(b)) => int_or_string(b, at)?,
        (Type::Raw, Wire::Bytes(b)) => {
            let mut r = Reader::new(b);
            let mut value = Value::Null;
            while let Some((n, w)) = r.next()? {
                if let (1, Wire::Bytes(json)) = (n, w) {
                    value = serde_json::from_slice(json).map_err(|e| format!("{at}: not JSON: {e}"))?;
                }
            }
            value
        }
        (Type::Message(index), Wire::Bytes(b)) => message(schema, b, *index, depth + 1)?,
        (Type::Wrapped(inner), Wire::Bytes(b)) => {
            let mut r = Reader::new(b);
            let mut items = Vec::new();
            while let Some((n, w)) = r.next()? {
                if n == 1 {
                    items.push(scalar(schema, inner, w, at, depth)?);
                }
            }
            Value::Array(items)
        }
        (ty, _) => return Err(format!("{at}: the wire type does not match {ty:?}")),
    })
}

fn time(bytes: &[u8], micro: bool, at: &str) -> Result<Value, String> {
    let (mut seconds, mut nanos) = (0i64, 0i64);
    let mut reader = Reader::new(bytes);
    while let Some((number, wire)) = reader.next()? {
        match (number, wire) {
            (1, Wire::Varint(v)) => seconds = v as i64,
            (2, Wire::Varint(v)) => nanos = v as i64,
            _ => return Err(format!("{at}: not a time (seconds, nanos)")),
        }
    }
    if seconds == 0 && nanos == 0 {
        return Ok(Value::Null);
    }
    let (Ok(secs), Ok(nanos)) = (u64::try_from(seconds), u32::try_from(nanos)) else {
        return Err(format!("{at}: time before 1970 or negative nanoseconds"));
    };
    let Some(t) = UNIX_EPOCH.checked_add(Duration::new(secs, nanos.min(999_999_999))) else {
        return Err(format!("{at}: time out of range"));
    };
    let text = rfc3339(t);
    if !micro {
        return Ok(Value::String(text));
    }
    // MicroTime keeps microseconds: 2006-01-02T15:04:05.000000Z.
    let base = text.trim_end_matches('Z');
    Ok(Value::String(format!("{base}.{:06}Z", nanos / 1000)))
}

fn int_or_string(bytes: &[u8], at: &str) -> Result<Value, String> {
    let (mut kind, mut int, mut text) = (0u64, 0i64, String::new());
    let mut reader = Reader::new(bytes);
    while let Some((number, wire)) = reader.next()? {
        match (number, wire) {
            (1, Wire::Varint(v)) => kind = v,
            (2, Wire::Varint(v)) => int = v as i64,
            (3, Wire::Bytes(b)) => text = utf8(b, at)?,
            _ => return Err(format!("{at}: not an IntOrString")),
        }
    }
    Ok(if kind == 1 { Value::String(text) } else { Value::from(int) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A minimal protobuf writer, so the tests can build bodies field by field.
    #[derive(Default)]
    struct Writer(Vec<u8>);

    impl Writer {
        fn varint(&mut self, mut v: u64) -> &mut Self {
            loop {
                let byte = (v & 0x7f) as u8;
                v >>= 7;
                if v == 0 {
                    self.0.push(byte);
                    return self;
                }
                self.0.push(byte | 0x80);
            }
        }
        fn int(&mut self, field: u64, v: i64) -> &mut Self {
            self.varint(field << 3).varint(v as u64)
        }
        fn bytes(&mut self, field: u64, b: &[u8]) -> &mut Self {
            self.varint(field << 3 | 2).varint(b.len() as u64);
            self.0.extend_from_slice(b);
            self
        }
        fn str(&mut self, field: u64, s: &str) -> &mut Self {
            self.bytes(field, s.as_bytes())
        }
        fn entry(&mut self, field: u64, k: &str, v: &str) -> &mut Self {
            let e = Writer::default().str(1, k).str(2, v).0.clone();
            self.bytes(field, &e)
        }
        fn done(&mut self) -> Vec<u8> {
            std::mem::take(&mut self.0)
        }
    }

    fn envelope(api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
        let type_meta = Writer::default().str(1, api_version).str(2, kind).done();
        let mut body = MAGIC.to_vec();
        body.extend(Writer::default().bytes(1, &type_meta).bytes(2, raw).str(3, "").str(4, "").done());
        body
    }

    #[test]
    fn a_config_map_as_kubectl_sends_it() {
        // Go writes empty strings, a zero generation and a zero creation time; JSON leaves them out.
        let meta = Writer::default()
            .str(1, "cm-1")
            .str(2, "")
            .str(3, "")
            .int(7, 0)
            .bytes(8, &[])
            .entry(11, "app", "web")
            .done();
        let raw = Writer::default().bytes(1, &meta).entry(2, "k", "v").entry(3, "bin", "\u{1}").done();
        let obj = decode(&envelope("v1", "ConfigMap", &raw)).unwrap();
        assert_eq!(
            obj,
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "cm-1", "labels": {"app": "web"}},
                   "data": {"k": "v"}, "binaryData": {"bin": "AQ=="}})
        );
    }

    #[test]
    fn pointers_keep_their_zero_and_inlined_fields_join_their_parent() {
        let container = Writer::default().str(1, "c").str(2, "nginx").int(16, 0).done();
        let volume = {
            let empty_dir = Writer::default().done();
            let source = Writer::default().bytes(2, &empty_dir).done();
            Writer::default().str(1, "scratch").bytes(2, &source).done()
        };
        let pod_spec = Writer::default().bytes(1, &volume).bytes(2, &container).done();
        let template = Writer::default().bytes(2, &pod_spec).done();
        let strategy = {
            let percent = Writer::default().int(1, 1).str(3, "25%").done();
            let rolling = Writer::default().bytes(1, &percent).done();
            Writer::default().str(1, "RollingUpdate").bytes(2, &rolling).done()
        };
        let spec = Writer::default().int(1, 0).bytes(3, &template).bytes(4, &strategy).done();
        let meta = Writer::default().str(1, "web").done();
        let status = Writer::default().int(2, 0).done();
        let raw = Writer::default().bytes(1, &meta).bytes(2, &spec).bytes(3, &status).done();
        let obj = decode(&envelope("apps/v1", "Deployment", &raw)).unwrap();
        assert_eq!(obj["spec"]["replicas"], json!(0));
        assert_eq!(
            obj["spec"]["strategy"],
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%"}})
        );
        let pod = &obj["spec"]["template"]["spec"];
        assert_eq!(pod["containers"], json!([{"name": "c", "image": "nginx"}]));
        assert_eq!(pod["volumes"], json!([{"name": "scratch", "emptyDir": {}}]));
        assert_eq!(obj["status"], json!({}), "a status's zero replicas is left out");
    }

    #[test]
    fn times_and_quantities_read_as_their_json_strings() {
        let ts = Writer::default().int(1, 1_700_000_000).done();
        let meta = Writer::default().str(1, "p").bytes(8, &ts).done();
        let quantity = Writer::default().str(1, "250m").done();
        let entry = Writer::default().str(1, "cpu").bytes(2, &quantity).done();
        let resources = Writer::default().bytes(2, &entry).done();
        let container = Writer::default().str(1, "c").bytes(8, &resources).done();
        let spec = Writer::default().bytes(2, &container).done();
        let raw = Writer::default().bytes(1, &meta).bytes(2, &spec).done();
        let obj = decode(&envelope("v1", "Pod", &raw)).unwrap();
        assert_eq!(obj["metadata"]["creationTimestamp"], "2023-11-14T22:13:20Z");
        assert_eq!(obj["spec"]["containers"][0]["resources"], json!({"requests": {"cpu": "250m"}}));
    }

    #[test]
    fn what_it_cannot_read_is_an_error_that_names_it() {
        let meta = Writer::default().str(1, "x").str(99, "?").done();
        let raw = Writer::default().bytes(1, &meta).done();
        let err = decode(&envelope("v1", "ConfigMap", &raw)).unwrap_err();
        assert!(err.contains("field 99 of meta.v1.ObjectMeta"), "{err}");
        let err = decode(&envelope("example.com/v1", "Widget", &raw)).unwrap_err();
        assert!(err.contains("\"Widget\""), "{err}");
        assert!(decode(b"{\"kind\":\"ConfigMap\"}").unwrap_err().contains("magic"));
        let mut truncated = envelope("v1", "ConfigMap", &raw);
        truncated.truncate(truncated.len() - 3);
        assert!(decode(&truncated).is_err());
    }
}
