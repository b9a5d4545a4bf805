//! A serde `Deserializer` adapter that steps over skipped fields: wrapped around the protobuf
//! decoder's deserializer (the JSON decoders read a copy without them, `json.rs`), it reads
//! each key of an object on a skipped path itself, and for a skipped one consumes the value
//! with `IgnoredAny` (which the decoder steps over without building anything) and never shows
//! the key to the type's visitor, so the type keeps its default for the field. Below a key no skipped path goes through, the
//! decoder's own deserializer is handed over unwrapped: only the objects on a path pay for it.

use std::fmt;

use serde::de::{
    self, DeserializeOwned, DeserializeSeed, Deserializer, EnumAccess, IgnoredAny, MapAccess, SeqAccess, Visitor,
};

use super::{Child, Node};

/// Decodes a `K` from `de`, stepping over the fields of `skip` (none: `de` is used as it is).
#[inline]
pub(crate) fn decode<'de, K: DeserializeOwned, D: Deserializer<'de>>(
    de: D,
    skip: Option<&Node>,
) -> Result<K, D::Error> {
    match skip {
        None => K::deserialize(de),
        Some(node) => K::deserialize(Pruning { de, node }),
    }
}

/// Removes the skipped fields from a decoded JSON value: what a decode that skips them must
/// equal, once the value is decoded as the type (tests and the fuzzing entry points).
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) fn clear(value: &mut serde_json::Value, node: &Node) {
    match value {
        serde_json::Value::Object(map) => {
            for (key, child) in &node.children {
                match child {
                    Child::Skip => {
                        map.remove(&**key);
                    }
                    Child::Into(below) => {
                        if let Some(v) = map.get_mut(&**key) {
                            clear(v, below);
                        }
                    }
                }
            }
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(|item| clear(item, node)),
        _ => {}
    }
}

/// A deserializer whose value's keys are checked against `node`.
struct Pruning<'n, D> {
    de: D,
    node: &'n Node,
}

/// The visitor of a value whose keys are checked against `node`: maps and lists it is shown are
/// wrapped, everything else passes through.
struct Wrap<'n, V> {
    visitor: V,
    node: &'n Node,
}

/// A seed for a value whose keys are checked against `node`.
struct Seed<'n, S> {
    seed: S,
    node: &'n Node,
}

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for Seed<'_, S> {
    type Value = S::Value;

    fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<S::Value, D::Error> {
        self.seed.deserialize(Pruning { de, node: self.node })
    }
}

macro_rules! forward {
    ($($method:ident($($arg:ident: $ty:ty),*))*) => {
        $(fn $method<V: Visitor<'de>>(self, $($arg: $ty,)* visitor: V) -> Result<V::Value, D::Error> {
            self.de.$method($($arg,)* Wrap { visitor, node: self.node })
        })*
    };
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for Pruning<'_, D> {
    type Error = D::Error;

    forward! {
        deserialize_any() deserialize_bool() deserialize_i8() deserialize_i16() deserialize_i32()
        deserialize_i64() deserialize_i128() deserialize_u8() deserialize_u16() deserialize_u32()
        deserialize_u64() deserialize_u128() deserialize_f32() deserialize_f64() deserialize_char()
        deserialize_str() deserialize_string() deserialize_bytes() deserialize_byte_buf()
        deserialize_option() deserialize_unit() deserialize_unit_struct(name: &'static str)
        deserialize_newtype_struct(name: &'static str) deserialize_seq() deserialize_tuple(len: usize)
        deserialize_tuple_struct(name: &'static str, len: usize) deserialize_map()
        deserialize_struct(name: &'static str, fields: &'static [&'static str])
        deserialize_enum(name: &'static str, variants: &'static [&'static str])
        deserialize_identifier()
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        // Nothing below is decoded: nothing to skip.
        self.de.deserialize_ignored_any(visitor)
    }

    fn is_human_readable(&self) -> bool {
        self.de.is_human_readable()
    }
}

macro_rules! pass {
    ($($method:ident($ty:ty))*) => {
        $(#[inline]
        fn $method<E: de::Error>(self, v: $ty) -> Result<V::Value, E> {
            self.visitor.$method(v)
        })*
    };
}

impl<'de, V: Visitor<'de>> Visitor<'de> for Wrap<'_, V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.visitor.expecting(f)
    }

    pass! {
        visit_bool(bool) visit_i8(i8) visit_i16(i16) visit_i32(i32) visit_i64(i64) visit_i128(i128)
        visit_u8(u8) visit_u16(u16) visit_u32(u32) visit_u64(u64) visit_u128(u128) visit_f32(f32)
        visit_f64(f64) visit_char(char) visit_str(&str) visit_borrowed_str(&'de str) visit_string(String)
        visit_bytes(&[u8]) visit_borrowed_bytes(&'de [u8]) visit_byte_buf(Vec<u8>)
    }

    fn visit_none<E: de::Error>(self) -> Result<V::Value, E> {
        self.visitor.visit_none()
    }

    fn visit_unit<E: de::Error>(self) -> Result<V::Value, E> {
        self.visitor.visit_unit()
    }

    fn visit_some<D: Deserializer<'de>>(self, de: D) -> Result<V::Value, D::Error> {
        self.visitor.visit_some(Pruning { de, node: self.node })
    }

    fn visit_newtype_struct<D: Deserializer<'de>>(self, de: D) -> Result<V::Value, D::Error> {
        self.visitor.visit_newtype_struct(Pruning { de, node: self.node })
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<V::Value, A::Error> {
        // A path through a list applies to every element.
        self.visitor.visit_seq(Elements { seq, node: self.node })
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<V::Value, A::Error> {
        self.visitor.visit_map(Entries { map, node: self.node, below: None })
    }

    fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<V::Value, A::Error> {
        // No built-in type has a field inside an enum: not followed.
        self.visitor.visit_enum(data)
    }
}

/// A list's elements, each checked against `node`.
struct Elements<'n, A> {
    seq: A,
    node: &'n Node,
}

impl<'de, A: SeqAccess<'de>> SeqAccess<'de> for Elements<'_, A> {
    type Error = A::Error;

    fn next_element_seed<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<Option<S::Value>, A::Error> {
        self.seq.next_element_seed(Seed { seed, node: self.node })
    }

    fn size_hint(&self) -> Option<usize> {
        self.seq.size_hint()
    }
}

/// An object's entries: a skipped one is stepped over, the value of one a path goes through is
/// checked against its node (`below`, set when its key is handed out).
struct Entries<'n, A> {
    map: A,
    node: &'n Node,
    below: Option<&'n Node>,
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for Entries<'_, A> {
    type Error = A::Error;

    fn next_key_seed<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<Option<S::Value>, A::Error> {
        loop {
            let Some(key) = self.map.next_key_seed(KeySeed)? else { return Ok(None) };
            self.below = None;
            match self.node.child(key.as_str()) {
                Some(Child::Skip) => {
                    self.map.next_value::<IgnoredAny>()?;
                    continue;
                }
                Some(Child::Into(node)) => self.below = Some(node),
                None => {}
            }
            return match key {
                Key::Borrowed(s) => seed.deserialize(de::value::BorrowedStrDeserializer::new(s)),
                Key::Owned(s) => seed.deserialize(de::value::StringDeserializer::new(s)),
            }
            .map(Some);
        }
    }

    fn next_value_seed<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<S::Value, A::Error> {
        match self.below.take() {
            Some(node) => self.map.next_value_seed(Seed { seed, node }),
            None => self.map.next_value_seed(seed),
        }
    }

    fn size_hint(&self) -> Option<usize> {
        self.map.size_hint()
    }
}

/// A key, borrowed from the input where the decoder can.
enum Key<'de> {
    Borrowed(&'de str),
    Owned(String),
}

impl Key<'_> {
    fn as_str(&self) -> &str {
        match self {
            Key::Borrowed(s) => s,
            Key::Owned(s) => s,
        }
    }
}

/// Reads a key as a string.
struct KeySeed;

impl<'de> DeserializeSeed<'de> for KeySeed {
    type Value = Key<'de>;

    fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<Key<'de>, D::Error> {
        de.deserialize_str(KeySeed)
    }
}

impl<'de> Visitor<'de> for KeySeed {
    type Value = Key<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a field name")
    }

    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Key<'de>, E> {
        Ok(Key::Borrowed(v))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Key<'de>, E> {
        Ok(Key::Owned(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Key<'de>, E> {
        Ok(Key::Owned(v))
    }
}

#[cfg(test)]
mod tests {
    use super::super::Paths;
    use super::*;
    use k8s_openapi::api::core::v1::Pod;

    fn pod() -> serde_json::Value {
        serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": "a", "namespace": "n", "uid": "u", "resourceVersion": "7",
                "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{\"big\":1}", "keep": "me"},
                "managedFields": [{"manager": "kubectl", "operation": "Apply", "fieldsV1": {"f:spec": {}}}],
                "labels": {"app": "web"}
            },
            "spec": {"containers": [
                {"name": "c1", "image": "i", "env": [{"name": "A", "value": "1"}]},
                {"name": "c2", "image": "j", "env": [{"name": "B", "value": "2"}]}
            ]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
        })
    }

    fn paths(list: &[&str]) -> Paths {
        Paths::new::<Pod>(&list.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap()
    }

    #[test]
    fn a_skipped_decode_equals_a_full_decode_with_the_fields_cleared() {
        let skip = paths(&[
            "metadata.managedFields",
            "metadata.annotations[kubectl.kubernetes.io/last-applied-configuration]",
            "spec.containers.env",
            "status.conditions",
        ]);
        let node = skip.root().unwrap();
        let value = pod();
        let text = value.to_string();
        let mut cleared = value.clone();
        clear(&mut cleared, node);
        let want: Pod = serde_json::from_value(cleared).unwrap();
        let got: Pod = decode(&mut serde_json::Deserializer::from_str(&text), Some(node)).unwrap();
        assert_eq!(got, want);
        assert!(got.metadata.managed_fields.is_none());
        assert_eq!(got.metadata.annotations.as_ref().unwrap().len(), 1);
        assert!(got.spec.as_ref().unwrap().containers.iter().all(|c| c.env.is_none() && c.image.is_some()));
        assert!(got.status.as_ref().unwrap().conditions.is_none());
        assert_eq!(got.status.as_ref().unwrap().phase.as_deref(), Some("Running"));
        // And nothing is skipped without a tree.
        let full: Pod = decode(&mut serde_json::Deserializer::from_str(&text), None).unwrap();
        assert_eq!(full, serde_json::from_value::<Pod>(value).unwrap());
    }

    #[test]
    fn a_skipped_value_is_stepped_over_even_when_it_is_not_of_the_fields_type() {
        // The value is never decoded, so a wrong type there is not an error.
        let text = r#"{"metadata":{"name":"a","managedFields":"not a list"}}"#;
        let node = paths(&["metadata.managedFields"]);
        let got: Pod = decode(&mut serde_json::Deserializer::from_str(text), node.root()).unwrap();
        assert_eq!(got.metadata.name.as_deref(), Some("a"));
    }

    #[test]
    fn keys_with_escapes_are_read_all_the_same() {
        let text = r#"{"metadata":{"name":"a","annotations":{"k\u0065ep":"x","drop\/me":"y"}}}"#;
        let node = paths(&["metadata.annotations[drop/me]"]);
        let got: Pod = decode(&mut serde_json::Deserializer::from_str(text), node.root()).unwrap();
        let annotations = got.metadata.annotations.unwrap();
        assert_eq!(annotations.keys().collect::<Vec<_>>(), ["keep"]);
    }
}
