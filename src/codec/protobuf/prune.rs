//! An object's protobuf without the skipped fields, copied record by record and never decoded:
//! what the compact store modes keep of an object a watcher decoded skipping fields.
//!
//! The walk follows the same tree of skipped paths as the decoder (`de.rs`), matched against the
//! schema table's JSON names: a record whose field a path names is left out, one a path goes
//! through is rewritten (its own records walked the same way and its length written anew, by
//! `en::nested`), and every other record is copied as it is. Each record of a repeated field is
//! one element, so a path applies to all of them. Each record of a map is an entry: it is left
//! out when its key (field 1) is skipped, and its value (field 2) is walked when a path goes
//! into it. An inlined message (a Go embedded struct) is walked with its parent's node, because
//! JSON shows its fields as the parent's.
//!
//! Decoded, the result equals the skipping decode of the original; the tests and the fuzzing
//! entry points check this. Where it could not, the walk says so ([`Pruned::Unfit`]), and the
//! caller keeps the object re-encoded instead:
//! - a path into a value the table holds as bytes or a number (embedded JSON, a quantity, a
//!   time) is not walked;
//! - a path naming `apiVersion` or `kind` is not walked, because the envelope holds those, not
//!   the message;
//! - a map whose every entry is skipped: the skipping decode gives an empty map, and protobuf
//!   cannot tell an empty map from none (its decode would give none).
//!
//! Every length is checked by the reader before it is used. The output is never longer than the
//! input, plus the envelope.

use super::de::{Error, Reader, Wire};
use super::schema::{self, Field, Message, Schema, Type};
use super::{self as pb, en};
use crate::codec::skip::{Child, Node};

/// Messages nest far less deeply than this in every built-in type (the decoder's own bound).
const MAX_DEPTH: u32 = 64;

/// What became of an object's protobuf.
#[derive(Debug)]
pub(crate) enum Pruned {
    /// The object in its envelope (`k8s\0`, `runtime.Unknown`), without the skipped fields.
    Bytes(Vec<u8>),
    /// These bytes cannot show the object as the skipping decode gave it; the reason.
    Unfit(&'static str),
}

/// Why a walk stopped.
enum Stop {
    Bad(Error),
    Unfit(&'static str),
}

impl From<Error> for Stop {
    fn from(e: Error) -> Stop {
        Stop::Bad(e)
    }
}

/// An enveloped object (`k8s\0`, `runtime.Unknown` and the object's message, as a watch event
/// carries it) without the fields of `node`, in an envelope of the same apiVersion and kind.
/// `Err` names what in the bytes could not be read.
pub(crate) fn enveloped(body: &[u8], node: &Node) -> Result<Pruned, String> {
    let envelope = pb::envelope(body).map_err(|e| e.to_string())?;
    let Some(index) = schema::schema().kind(envelope.api_version, envelope.kind) else {
        return Err(format!(
            "kind {:?} of apiVersion {:?} has no protobuf form known to this client",
            envelope.kind, envelope.api_version
        ));
    };
    message(index, (envelope.api_version, envelope.kind), envelope.raw, node)
}

/// A bare message of the schema's message `index` (a list item, or an envelope's raw object)
/// without the fields of `node`, in the envelope of `types` (its apiVersion and kind).
pub(crate) fn message(index: usize, types: (&str, &str), message: &[u8], node: &Node) -> Result<Pruned, String> {
    if node.child("apiVersion").is_some() || node.child("kind").is_some() {
        return Ok(Pruned::Unfit("apiVersion and kind are the envelope's"));
    }
    let schema = schema::schema();
    let (api_version, kind) = types;
    let walked = en::envelope_with(api_version, kind, message.len(), |out| walk(schema, index, message, node, 0, out));
    match walked {
        Ok(out) => Ok(Pruned::Bytes(out)),
        Err(Stop::Unfit(why)) => Ok(Pruned::Unfit(why)),
        Err(Stop::Bad(e)) => Err(e.to_string()),
    }
}

/// One record: its field number, its value, and its bytes as they came (key, length, value).
type Record<'a> = (u64, Wire<'a>, &'a [u8]);

/// A message's records, each with its bytes as they came.
struct Records<'a> {
    data: &'a [u8],
    reader: Reader<'a>,
}

impl<'a> Records<'a> {
    fn new(data: &'a [u8]) -> Self {
        Records { data, reader: Reader::new(data) }
    }

    fn next(&mut self) -> Result<Option<Record<'a>>, Error> {
        let start = self.reader.position();
        let Some((number, wire)) = self.reader.next()? else { return Ok(None) };
        // The reader's position only grows, and stays within `data`.
        let record = self.data.get(start..self.reader.position()).unwrap_or_default();
        Ok(Some((number, wire, record)))
    }
}

/// For each map field of one message whose entries are matched by key: whether an entry was
/// kept and whether one was left out (a map left empty cannot be written: see the module docs).
#[derive(Default)]
struct Maps(Vec<(u32, bool, bool)>);

impl Maps {
    fn note(&mut self, number: u32, kept: bool) {
        let at = match self.0.iter().position(|(n, _, _)| *n == number) {
            Some(at) => at,
            None => {
                self.0.push((number, false, false));
                self.0.len() - 1
            }
        };
        let tally = &mut self.0[at];
        if kept {
            tally.1 = true;
        } else {
            tally.2 = true;
        }
    }

    fn check(&self) -> Result<(), Stop> {
        match self.0.iter().any(|&(_, kept, left_out)| left_out && !kept) {
            true => Err(Stop::Unfit("every entry of a map is skipped")),
            false => Ok(()),
        }
    }
}

/// Appends message `index`'s `data` to `out` without the fields of `node`.
fn walk(
    schema: &'static Schema,
    index: usize,
    data: &[u8],
    node: &Node,
    depth: u32,
    out: &mut Vec<u8>,
) -> Result<(), Stop> {
    let Some(message) = schema.messages.get(index) else {
        return Err(Stop::Bad(Error(format!("no message {index} in the schema"))));
    };
    if depth > MAX_DEPTH {
        return Err(Stop::Bad(Error(format!("{} is nested more than {MAX_DEPTH} deep", message.name))));
    }
    let mut maps = Maps::default();
    let mut records = Records::new(data);
    while let Some((number, wire, record)) = records.next().map_err(|e| Error(format!("{}: {e}", message.name)))? {
        // A field number the table does not know is not decoded either: kept as it is.
        let Some(field) = message.field(number) else {
            out.extend_from_slice(record);
            continue;
        };
        let below = match field.name {
            // An inlined message: JSON shows its fields as this message's own.
            None => node,
            Some(name) => match node.child(name) {
                None => {
                    out.extend_from_slice(record);
                    continue;
                }
                Some(Child::Skip) => continue,
                Some(Child::Into(below)) => below,
            },
        };
        let into = Inside { schema, below, depth };
        into.value(field.number, &field.ty, wire, record, &mut maps, out)
            .map_err(|stop| within(stop, message, field))?;
    }
    maps.check()
}

/// Names the field a reading error is in (`core.v1.Pod.metadata: …`).
fn within(stop: Stop, message: &Message, field: &Field) -> Stop {
    match stop {
        Stop::Bad(e) => Stop::Bad(Error(format!("{}.{}: {e}", message.name, field.name.unwrap_or("(inline)")))),
        unfit => unfit,
    }
}

/// A value a path goes into, walked against `below`.
#[derive(Clone, Copy)]
struct Inside<'n> {
    schema: &'static Schema,
    below: &'n Node,
    depth: u32,
}

impl Inside<'_> {
    /// Appends the record `record` (field `number`, of type `ty`, holding `wire`) to `out`,
    /// without what `below` names inside it. `maps`: the tally of the message it is in.
    fn value(
        self,
        number: u32,
        ty: &Type,
        wire: Wire<'_>,
        record: &[u8],
        maps: &mut Maps,
        out: &mut Vec<u8>,
    ) -> Result<(), Stop> {
        match ty {
            Type::Message(index) => {
                let bytes = length_delimited(wire)?;
                en::nested(out, number, bytes.len(), |out| {
                    walk(self.schema, *index, bytes, self.below, self.depth + 1, out)
                })
            }
            // Each record is one element.
            Type::Repeated(element) => self.value(number, element, wire, record, maps, out),
            Type::Map(element) => self.entry(number, element, wire, record, maps, out),
            // A message of `repeated T items = 1` that JSON shows as the list itself.
            Type::Wrapped(element) => {
                let bytes = length_delimited(wire)?;
                en::nested(out, number, bytes.len(), |out| {
                    let mut maps = Maps::default();
                    let mut records = Records::new(bytes);
                    while let Some((n, wire, record)) = records.next()? {
                        match n {
                            1 => self.deeper().value(1, element, wire, record, &mut maps, out)?,
                            _ => out.extend_from_slice(record),
                        }
                    }
                    maps.check()
                })
            }
            Type::String
            | Type::Bool
            | Type::Int
            | Type::Bytes
            | Type::Time
            | Type::MicroTime
            | Type::Duration
            | Type::Quantity
            | Type::IntOrString
            | Type::Raw => Err(Stop::Unfit("a path goes into a value protobuf holds as bytes or a number")),
        }
    }

    /// One entry of a map field: left out when `below` skips its key, its value walked when a
    /// path goes into it, copied otherwise.
    fn entry(
        self,
        number: u32,
        element: &Type,
        wire: Wire<'_>,
        record: &[u8],
        maps: &mut Maps,
        out: &mut Vec<u8>,
    ) -> Result<(), Stop> {
        let bytes = length_delimited(wire)?;
        // The key and the value as the decoder reads them: the last field 1 (none: empty) and
        // the last field 2 (by its position: only that one is walked).
        let (mut key, mut value): (&[u8], _) = (b"", None);
        let mut reader = Reader::new(bytes);
        while let Some((n, wire)) = reader.next()? {
            match n {
                1 => key = length_delimited(wire).map_err(|_| Error("a map key that is not a string".into()))?,
                2 => value = Some(reader.position()),
                _ => {}
            }
        }
        // A key that is not UTF-8 fails the decode; no path names it.
        let child = std::str::from_utf8(key).ok().and_then(|key| self.below.child(key));
        maps.note(number, !matches!(child, Some(Child::Skip)));
        match child {
            None => out.extend_from_slice(record),
            Some(Child::Skip) => {}
            Some(Child::Into(node)) => {
                let inside = Inside { below: node, ..self.deeper() };
                en::nested(out, number, bytes.len(), |out| {
                    let mut maps = Maps::default();
                    let mut records = Records::new(bytes);
                    while let Some((n, wire, record)) = records.next()? {
                        match n {
                            2 if Some(records.reader.position()) == value => {
                                inside.value(2, element, wire, record, &mut maps, out)?;
                            }
                            _ => out.extend_from_slice(record),
                        }
                    }
                    maps.check()
                })?;
            }
        }
        Ok(())
    }

    /// The same node, one message deeper (a wrapper or an entry).
    fn deeper(self) -> Self {
        Inside { depth: self.depth + 1, ..self }
    }
}

fn length_delimited(wire: Wire<'_>) -> Result<&[u8], Stop> {
    match wire {
        Wire::Bytes(bytes) => Ok(bytes),
        Wire::Varint(_) | Wire::Fixed => Err(Stop::Bad(Error("not length-delimited, as the table says it is".into()))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::skip::{Paths, clear};
    use k8s_openapi::api::core::v1::Pod;
    use serde_json::json;

    const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

    fn pod(annotations: serde_json::Value) -> serde_json::Value {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": "a", "namespace": "n", "uid": "u", "resourceVersion": "7",
                "labels": {"app": "web"}, "annotations": annotations,
                "creationTimestamp": "2026-11-27T01:02:03Z",
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "u0", "controller": true}],
                "managedFields": [
                    {"manager": "kubectl", "operation": "Apply", "apiVersion": "v1", "fieldsType": "FieldsV1",
                     "fieldsV1": {"f:spec": {"f:containers": {}}}, "time": "2026-11-27T01:02:03Z"},
                    {"manager": "kubelet", "operation": "Update", "subresource": "status"}
                ]
            },
            "spec": {"containers": [
                {"name": "c1", "image": "i", "env": [{"name": "A", "value": "1"}],
                 "resources": {"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "100m"}}},
                {"name": "c2", "image": "j", "env": [{"name": "B", "value": "2"}]}
            ], "nodeName": "node-1"},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}], "podIP": "10.0.0.1"}
        })
    }

    fn paths<K: serde::de::DeserializeOwned>(list: &[&str]) -> Paths {
        Paths::new::<K>(&list.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap()
    }

    /// What a watcher skipping `node` must hold: the object's JSON form with the fields removed.
    fn cleared(value: &serde_json::Value, node: &Node) -> Pod {
        let mut value = value.clone();
        clear(&mut value, node);
        serde_json::from_value(value).unwrap()
    }

    fn pruned(body: &[u8], node: &Node) -> Pruned {
        enveloped(body, node).unwrap()
    }

    #[test]
    fn pruned_bytes_decode_as_the_object_with_the_fields_cleared() {
        let value = pod(json!({LAST_APPLIED: "{\"big\":1}", "team": "a"}));
        let body = pb::encode(&value).unwrap();
        for list in [
            &["metadata.managedFields"][..],
            &[
                "metadata.managedFields",
                "metadata.annotations[kubectl.kubernetes.io/last-applied-configuration]",
                "spec.containers.env",
                "status.conditions",
            ],
            &["spec.containers.resources.limits[cpu]", "metadata.ownerReferences.controller"],
            &["spec", "status.podIP"],
        ] {
            let skip = paths::<Pod>(list);
            let node = skip.root().unwrap();
            let Pruned::Bytes(bytes) = pruned(&body, node) else { panic!("{list:?}: not pruned") };
            assert!(bytes.len() < body.len(), "{list:?}: {} bytes of {}", bytes.len(), body.len());
            assert_eq!(pb::object::<Pod>(&bytes).unwrap(), cleared(&value, node), "{list:?}");
            // The same from the bare message, as a list item comes.
            let envelope = pb::envelope(&body).unwrap();
            let index = schema::schema().kind("v1", "Pod").unwrap();
            let Pruned::Bytes(again) = message(index, ("v1", "Pod"), envelope.raw, node).unwrap() else { panic!() };
            assert_eq!(again, bytes, "{list:?}");
        }
        // managedFields, by far the largest part left out.
        let skip = paths::<Pod>(&["metadata.managedFields"]);
        let Pruned::Bytes(bytes) = pruned(&body, skip.root().unwrap()) else { panic!() };
        assert!(!bytes.windows(7).any(|w| w == b"kubelet"), "managedFields are gone");
    }

    #[test]
    fn a_map_left_empty_or_a_path_into_bytes_is_unfit() {
        let skip = paths::<Pod>(&["metadata.annotations[kubectl.kubernetes.io/last-applied-configuration]"]);
        let node = skip.root().unwrap();
        // The only annotation is skipped: the decode holds an empty map, protobuf cannot.
        let only = pb::encode(&pod(json!({LAST_APPLIED: "{}"}))).unwrap();
        assert!(matches!(pruned(&only, node), Pruned::Unfit("every entry of a map is skipped")));
        assert!(cleared(&pod(json!({LAST_APPLIED: "{}"})), node).metadata.annotations.is_some_and(|a| a.is_empty()));
        // Another one stays: fine.
        let two = pb::encode(&pod(json!({LAST_APPLIED: "{}", "b": "c"}))).unwrap();
        assert!(matches!(pruned(&two, node), Pruned::Bytes(_)));
        // No annotations at all: nothing left empty.
        let none = pb::encode(&pod(json!(null))).unwrap();
        assert!(matches!(pruned(&none, node), Pruned::Bytes(_)));
        // Embedded JSON (taken as given for untyped objects) and the envelope's own fields.
        let into_json = paths::<serde_json::Value>(&["metadata.managedFields.fieldsV1.f:spec"]);
        assert!(matches!(pruned(&two, into_json.root().unwrap()), Pruned::Unfit(_)));
        let kind = paths::<serde_json::Value>(&["kind"]);
        assert!(matches!(pruned(&two, kind.root().unwrap()), Pruned::Unfit(_)));
    }

    #[test]
    fn bad_bytes_are_an_error_naming_where_never_a_panic() {
        let value = pod(json!({LAST_APPLIED: "{}", "b": "c"}));
        let body = pb::encode(&value).unwrap();
        let skip = paths::<Pod>(&["metadata.managedFields", "metadata.annotations[b]", "spec.containers.env"]);
        let node = skip.root().unwrap();
        let envelope = pb::envelope(&body).unwrap();
        let index = schema::schema().kind("v1", "Pod").unwrap();
        // Every truncation of the message: an error, or (cut between records) bytes that
        // decode as what is left does, skipping.
        for len in 0..envelope.raw.len() {
            let cut = &envelope.raw[..len];
            match message(index, ("v1", "Pod"), cut, node) {
                Ok(Pruned::Bytes(bytes)) => {
                    let whole = en::envelope("v1", "Pod", cut);
                    let mut value = pb::object::<serde_json::Value>(&whole).unwrap();
                    clear(&mut value, node);
                    let want = serde_json::from_value::<Pod>(value).ok();
                    assert_eq!(pb::object::<Pod>(&bytes).ok(), want, "cut at {len}");
                }
                Ok(Pruned::Unfit(why)) => panic!("cut at {len}: {why}"),
                Err(e) => assert!(!e.is_empty()),
            }
        }
        // A length that runs past the end, named.
        let mut bad = en::envelope("v1", "Pod", &[0x0a, 0x7f, 0x01]);
        let e = enveloped(&bad, node).unwrap_err();
        assert!(e.contains("core.v1.Pod") && e.contains("runs past the end"), "{e}");
        bad.truncate(3);
        assert!(enveloped(&bad, node).unwrap_err().contains("magic"));
        // A message where the table says one, written as a number.
        let number = en::envelope("v1", "Pod", &[0x08, 0x01]);
        let e = enveloped(&number, node).unwrap_err();
        assert!(e.contains("core.v1.Pod.metadata: not length-delimited"), "{e}");
    }

    #[test]
    fn a_length_is_written_in_the_bytes_it_needs() {
        // Room for a two-byte length, one needed: the bytes move back; and the other way.
        for (expected, written) in [(300, 5), (5, 300), (127, 127), (128, 128)] {
            let mut out = vec![0xee];
            en::nested(&mut out, 3, expected, |out| {
                out.extend(std::iter::repeat_n(7u8, written));
                Ok::<(), ()>(())
            })
            .unwrap();
            let mut want = vec![0xee];
            en::bytes(&mut want, 3, &vec![7u8; written]);
            assert_eq!(out, want, "{expected} expected, {written} written");
        }
    }
}
