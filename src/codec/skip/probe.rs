//! Checks a path against a type's shape without a schema of our own: the type's own
//! `Deserialize` impl is run against a deserializer that offers only the path's next key.
//!
//! k8s-openapi's impls call `deserialize_struct` with the list of their JSON field names, so a
//! wrong name is told there, with the closest right ones. Maps (`deserialize_map`) take any key;
//! so do types that decode as serde's derive does with `#[serde(flatten)]` (`DynamicObject`,
//! `PartialObjectMetadata`): what they do not declare is taken as given. A value read with
//! `deserialize_any` (`serde_json::Value`) is offered a map: a scalar type refuses it, so a
//! path into `Quantity` or `IntOrString` is told apart from one into untyped JSON. The probe
//! always ends in an error of its own ([`Found`]); `Found::Done` means the path exists.

use std::fmt;

use serde::de::{self, DeserializeOwned, DeserializeSeed, MapAccess, SeqAccess, Visitor};

use super::Step;

/// Checks `steps` (non-empty) against `K`'s shape.
pub(super) fn check<K: DeserializeOwned>(steps: &[Step]) -> Result<(), String> {
    match K::deserialize(Probe { steps, depth: 0 }) {
        // Nothing refused the path (a type that decodes without reading this far).
        Ok(_) | Err(Found::Done) => Ok(()),
        Err(Found::Scalar(depth)) => Err(format!("{} holds no fields", text(&steps[..depth]))),
        Err(Found::NotMap(depth)) => {
            let prefix = text(&steps[..depth]);
            Err(format!("{prefix} is an object: name its field as {prefix}.{}", steps[depth].key()))
        }
        Err(Found::Unknown { ty, name, fields }) => {
            Err(format!("{ty} has no field \"{name}\"{}", closest(&name, fields)))
        }
        Err(Found::Other(message)) => Err(format!("cannot be checked: {message}")),
    }
}

/// A path (prefix) as written.
fn text(steps: &[Step]) -> String {
    let mut out = String::new();
    for step in steps {
        match step {
            Step::Field(name) if out.is_empty() => out.push_str(name),
            Step::Field(name) => {
                out.push('.');
                out.push_str(name);
            }
            Step::Key(key) => {
                out.push('[');
                out.push_str(key);
                out.push(']');
            }
        }
    }
    out
}

/// "; the closest are a, b, c": the three names nearest `name` by edit distance (ignoring case).
fn closest(name: &str, fields: &[&'static str]) -> String {
    let mut ranked: Vec<(usize, &str)> = fields.iter().map(|f| (distance(name, f), *f)).collect();
    ranked.sort();
    let names: Vec<&str> = ranked.iter().take(3).map(|(_, f)| *f).collect();
    if names.is_empty() { String::new() } else { format!("; the closest are {}", names.join(", ")) }
}

/// Levenshtein distance, case-insensitive (names are short: tens of bytes).
fn distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().flat_map(char::to_lowercase).collect();
    let b: Vec<char> = b.chars().flat_map(char::to_lowercase).collect();
    crate::spelling::edit_distance(&a, &b)
}

/// How a probe ended; every probe ends in one of these as its error.
#[derive(Debug)]
enum Found {
    /// The whole path exists (or is taken as given).
    Done,
    /// The value after `depth` steps is a scalar: no step goes below it.
    Scalar(usize),
    /// The value after `depth` steps is an object, and the next step is a map key.
    NotMap(usize),
    /// The object type `ty` has no field `name`.
    Unknown { ty: &'static str, name: String, fields: &'static [&'static str] },
    /// A type's own error.
    Other(String),
}

impl fmt::Display for Found {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self:?}")
    }
}

impl std::error::Error for Found {}

impl de::Error for Found {
    fn custom<T: fmt::Display>(message: T) -> Self {
        Found::Other(message.to_string())
    }
}

/// The value after `depth` steps of `steps`.
#[derive(Clone, Copy)]
struct Probe<'p> {
    steps: &'p [Step],
    depth: usize,
}

impl<'p> Probe<'p> {
    /// The step below this value, or `Done` when the path ends here.
    fn next(&self) -> Result<&'p Step, Found> {
        self.steps.get(self.depth).ok_or(Found::Done)
    }

    fn below(self) -> Probe<'p> {
        Probe { steps: self.steps, depth: self.depth + 1 }
    }

    fn scalar<T>(self) -> Result<T, Found> {
        self.next()?;
        Err(Found::Scalar(self.depth))
    }
}

macro_rules! scalars {
    ($($method:ident)*) => {
        $(fn $method<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Found> {
            self.scalar()
        })*
    };
}

impl<'de> de::Deserializer<'de> for Probe<'_> {
    type Error = Found;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Found> {
        let step = self.next()?;
        // Untyped (`serde_json::Value`) takes the map; a scalar type's visitor refuses it.
        match visitor.visit_map(Entry { key: Some(step.key()), value: self.below() }) {
            Err(Found::Other(_)) => Err(Found::Scalar(self.depth)),
            other => other,
        }
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        ty: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Found> {
        match self.next()? {
            Step::Key(_) => Err(Found::NotMap(self.depth)),
            Step::Field(name) if fields.contains(&name.as_str()) => {
                visitor.visit_map(Entry { key: Some(name), value: self.below() })
            }
            Step::Field(name) => Err(Found::Unknown { ty, name: name.clone(), fields }),
        }
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Found> {
        let step = self.next()?;
        visitor.visit_map(Entry { key: Some(step.key()), value: self.below() })
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Found> {
        self.next()?;
        // A path through a list applies to its elements: one element, at the same step.
        visitor.visit_seq(Element(Some(self)))
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Found> {
        self.next()?;
        visitor.visit_some(self)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(self, _: &'static str, visitor: V) -> Result<V::Value, Found> {
        self.next()?;
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Found> {
        // Read by nothing: taken as given.
        Err(Found::Done)
    }

    fn deserialize_tuple<V: Visitor<'de>>(self, _: usize, visitor: V) -> Result<V::Value, Found> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        _: usize,
        visitor: V,
    ) -> Result<V::Value, Found> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(self, _: &'static str, _: V) -> Result<V::Value, Found> {
        self.scalar()
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _: &'static str,
        _: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, Found> {
        self.scalar()
    }

    scalars! {
        deserialize_bool deserialize_i8 deserialize_i16 deserialize_i32 deserialize_i64 deserialize_i128
        deserialize_u8 deserialize_u16 deserialize_u32 deserialize_u64 deserialize_u128 deserialize_f32
        deserialize_f64 deserialize_char deserialize_str deserialize_string deserialize_bytes
        deserialize_byte_buf deserialize_unit deserialize_identifier
    }
}

/// A map of one entry: the path's next key, and the value below it.
struct Entry<'p> {
    key: Option<&'p str>,
    value: Probe<'p>,
}

impl<'de> MapAccess<'de> for Entry<'_> {
    type Error = Found;

    fn next_key_seed<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<Option<S::Value>, Found> {
        match self.key.take() {
            Some(key) => seed.deserialize(de::value::StrDeserializer::new(key)).map(Some),
            None => Ok(None),
        }
    }

    fn next_value_seed<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<S::Value, Found> {
        seed.deserialize(self.value)
    }
}

/// A list of one element, at the list's own step.
struct Element<'p>(Option<Probe<'p>>);

impl<'de> SeqAccess<'de> for Element<'_> {
    type Error = Found;

    fn next_element_seed<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<Option<S::Value>, Found> {
        self.0.take().map(|probe| seed.deserialize(probe)).transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distance_counts_edits_ignoring_case() {
        assert_eq!(distance("managedFeilds", "managedFields"), 2);
        assert_eq!(distance("ENV", "env"), 0);
        assert_eq!(distance("", "abc"), 3);
        assert_eq!(closest("evn", &["env", "envFrom", "image", "name"]), "; the closest are env, name, envFrom");
    }
}
