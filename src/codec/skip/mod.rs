//! Fields never decoded (`WatcherBuilder::skip_fields`): the path rule, in one place.
//!
//! A path is written as the API writes the field: names joined by dots (`metadata.managedFields`,
//! `spec.containers.env`), a map entry named by its key in brackets
//! (`metadata.annotations[kubectl.kubernetes.io/last-applied-configuration]`). A path through a
//! list applies to every element. [`Paths::new`] parses and checks a set of paths against the
//! watched type's shape ([`probe`]) and builds the tree the decoders follow ([`Node`]): [`json`]
//! copies a JSON object without the named fields before simd-json or serde_json reads it, the
//! protobuf decoder (`codec/protobuf/de.rs`) steps over their records as it reads, and
//! `codec/protobuf/prune.rs` copies an object's protobuf without them for the compact stores.
//! Neither wraps a decoder in an adapter: a type's `Deserialize` impl, which for the Kubernetes
//! types reaches hundreds of others, is compiled once per decoder, and a program that watches a
//! type builds faster for it.

pub(crate) mod json;
mod probe;

use serde::de::DeserializeOwned;

/// The metadata fields the cache reads (its key, and what tells versions apart): never skipped.
const NEEDED: [&str; 4] = ["name", "namespace", "uid", "resourceVersion"];

/// A parsed path: its steps, each a field name or a map key (both are keys of the object the
/// decoder walks; they differ only in how the path is written and checked).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Path {
    /// As the user wrote it, for errors.
    text: String,
    steps: Vec<Step>,
}

/// One step of a path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Step {
    /// `.name`: a field of an object.
    Field(String),
    /// `[key]`: an entry of a map.
    Key(String),
}

impl Step {
    fn key(&self) -> &str {
        match self {
            Step::Field(s) | Step::Key(s) => s,
        }
    }
}

impl Path {
    /// Parses one path; the error says what is wrong, and at which byte.
    pub(crate) fn parse(text: &str) -> Result<Path, String> {
        if text.is_empty() {
            return Err("a path is empty".into());
        }
        let bytes = text.as_bytes();
        let mut steps = Vec::new();
        let mut at = 0;
        loop {
            // A field name runs to the next `.` or `[`.
            let end = text[at..].find(['.', '[', ']']).map_or(text.len(), |i| at + i);
            if end == at {
                return Err(format!("empty field name at byte {at}"));
            }
            steps.push(Step::Field(text[at..end].to_owned()));
            at = end;
            // Map keys after it: `[key]`, any number of them.
            while bytes.get(at) == Some(&b'[') {
                let Some(len) = text[at + 1..].find(']') else {
                    return Err(format!("the '[' at byte {at} is not closed"));
                };
                if len == 0 {
                    return Err(format!("empty map key at byte {at}"));
                }
                steps.push(Step::Key(text[at + 1..at + 1 + len].to_owned()));
                at += len + 2;
            }
            match bytes.get(at) {
                None => break,
                Some(b'.') => at += 1,
                Some(&c) => return Err(format!("unexpected {:?} at byte {at}", char::from(c))),
            }
        }
        Ok(Path { text: text.to_owned(), steps })
    }

    /// Whether `self` is `other` or lies inside it.
    fn within(&self, other: &Path) -> bool {
        self.steps.len() >= other.steps.len() && self.steps.iter().zip(&other.steps).all(|(a, b)| a.key() == b.key())
    }

    /// Whether skipping this path would take one of the metadata fields the cache needs.
    fn takes_needed(&self) -> Option<&'static str> {
        let first = self.steps.first().map(Step::key);
        if first != Some("metadata") {
            return None;
        }
        match self.steps.get(1) {
            None => Some("metadata.name"),
            Some(step) => NEEDED.iter().find(|&&n| n == step.key()).map(|_| match step.key() {
                "name" => "metadata.name",
                "namespace" => "metadata.namespace",
                "uid" => "metadata.uid",
                _ => "metadata.resourceVersion",
            }),
        }
    }
}

/// The fields a watcher skips, checked; empty when nothing is skipped.
#[derive(Debug, Clone, Default)]
pub(crate) struct Paths {
    root: Option<Node>,
}

/// Where the decoder is in the tree of skipped paths: the keys below this point that are
/// skipped whole, or lead to one that is. The same node applies to every element of a list.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Node {
    children: Vec<(Box<str>, Child)>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Child {
    /// The value is stepped over, never decoded.
    Skip,
    /// The value is decoded, its own keys checked against this node.
    Into(Node),
}

impl Node {
    /// What to do with the value at `key`: `None` when nothing below it is skipped.
    #[inline]
    pub(crate) fn child(&self, key: &str) -> Option<&Child> {
        self.children.iter().find(|(k, _)| &**k == key).map(|(_, c)| c)
    }

    fn insert(&mut self, steps: &[Step]) {
        let Some((first, rest)) = steps.split_first() else { return };
        let at = match self.children.iter().position(|(k, _)| &**k == first.key()) {
            Some(i) => i,
            None => {
                self.children.push((first.key().into(), Child::Into(Node::default())));
                self.children.len() - 1
            }
        };
        if rest.is_empty() {
            self.children[at].1 = Child::Skip;
        } else if let Child::Into(node) = &mut self.children[at].1 {
            node.insert(rest);
        }
    }
}

impl Paths {
    /// Parses and checks `paths` against `K`'s shape, as `K`'s own `Deserialize` impl tells it
    /// ([`probe`]): where the type does not say (`DynamicObject` beyond its metadata, untyped
    /// JSON), paths are taken as given. The error names the path and what is wrong with it.
    pub(crate) fn new<K: DeserializeOwned>(paths: &[String]) -> Result<Paths, String> {
        let mut parsed: Vec<Path> = Vec::with_capacity(paths.len());
        for text in paths {
            let path = Path::parse(text).map_err(|e| format!("{}: {e}", quote(text)))?;
            if let Some(needed) = path.takes_needed() {
                return Err(format!("{}: the cache needs {needed}; it cannot be skipped", quote(text)));
            }
            if let Some(other) = parsed.iter().find(|p| path.within(p) || p.within(&path)) {
                return Err(if other.steps == path.steps {
                    format!("{}: named twice", quote(text))
                } else {
                    format!("{} and {}: one lies inside the other", quote(&other.text), quote(text))
                });
            }
            probe::check::<K>(&path.steps).map_err(|e| format!("{}: {e}", quote(text)))?;
            parsed.push(path);
        }
        let mut root = Node::default();
        for path in &parsed {
            root.insert(&path.steps);
        }
        Ok(Paths { root: (!parsed.is_empty()).then_some(root) })
    }

    /// The tree the decoders follow; `None` when nothing is skipped (decoding is then not
    /// wrapped at all).
    #[inline]
    pub(crate) fn root(&self) -> Option<&Node> {
        self.root.as_ref()
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

/// A path in quotes, escaped and capped.
fn quote(text: &str) -> String {
    format!("\"{}\"", crate::error::snippet(text.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ConfigMap, Pod};

    fn steps(text: &str) -> Vec<Step> {
        Path::parse(text).unwrap().steps
    }

    fn check<K: DeserializeOwned>(paths: &[&str]) -> Result<Paths, String> {
        Paths::new::<K>(&paths.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn paths_are_read_as_the_api_writes_them() {
        use Step::{Field as F, Key as K};
        assert_eq!(steps("metadata.managedFields"), [F("metadata".into()), F("managedFields".into())]);
        assert_eq!(
            steps("metadata.annotations[kubectl.kubernetes.io/last-applied-configuration]"),
            [
                F("metadata".into()),
                F("annotations".into()),
                K("kubectl.kubernetes.io/last-applied-configuration".into())
            ]
        );
        assert_eq!(steps("data[a.b].c"), [F("data".into()), K("a.b".into()), F("c".into())]);
    }

    #[test]
    fn malformed_paths_say_where() {
        for (text, want) in [
            ("", "a path is empty"),
            (".a", "empty field name at byte 0"),
            ("a..b", "empty field name at byte 2"),
            ("a.", "empty field name at byte 2"),
            ("a[b", "the '[' at byte 1 is not closed"),
            ("a[]", "empty map key at byte 1"),
            ("a[b]c", "unexpected 'c' at byte 4"),
            ("a]", "unexpected ']' at byte 1"),
        ] {
            assert_eq!(Path::parse(text).unwrap_err(), want, "{text:?}");
        }
    }

    #[test]
    fn what_the_cache_needs_cannot_be_skipped() {
        for path in ["metadata", "metadata.name", "metadata.uid", "metadata.resourceVersion", "metadata.namespace"] {
            let err = check::<Pod>(&[path]).unwrap_err();
            assert!(err.contains("the cache needs metadata."), "{path}: {err}");
            assert!(err.starts_with(&format!("\"{path}\"")), "{err}");
        }
    }

    #[test]
    fn a_path_named_twice_or_inside_another_is_refused() {
        let err = check::<Pod>(&["status.conditions", "status.conditions"]).unwrap_err();
        assert_eq!(err, "\"status.conditions\": named twice");
        let err = check::<Pod>(&["status", "status.conditions"]).unwrap_err();
        assert_eq!(err, "\"status\" and \"status.conditions\": one lies inside the other");
    }

    #[test]
    fn a_wrong_name_is_refused_with_the_closest_names() {
        let err = check::<Pod>(&["metadata.managedFeilds"]).unwrap_err();
        assert!(err.starts_with("\"metadata.managedFeilds\": ObjectMeta has no field \"managedFeilds\""), "{err}");
        assert!(err.contains("managedFields"), "{err}");
        let err = check::<Pod>(&["spec.containers.evn"]).unwrap_err();
        assert!(err.contains("Container has no field \"evn\"") && err.contains("env"), "{err}");
    }

    #[test]
    fn a_path_into_a_scalar_or_a_key_of_an_object_is_refused() {
        let err = check::<Pod>(&["metadata.generateName.x"]).unwrap_err();
        assert_eq!(err, "\"metadata.generateName.x\": metadata.generateName holds no fields");
        let err = check::<Pod>(&["spec[x]"]).unwrap_err();
        assert!(err.contains("spec is an object: name its field as spec.x"), "{err}");
        // Quantity and IntOrString read with `deserialize_any`, as untyped JSON does: told apart.
        let err = check::<Pod>(&["spec.containers.resources.limits[cpu].x"]).unwrap_err();
        assert!(err.ends_with("spec.containers.resources.limits[cpu] holds no fields"), "{err}");
        assert!(check::<Pod>(&["spec.containers.resources.limits[cpu]"]).is_ok());
    }

    #[test]
    fn good_paths_build_one_tree() {
        let paths = check::<Pod>(&[
            "metadata.managedFields",
            "metadata.annotations[kubectl.kubernetes.io/last-applied-configuration]",
            "spec.containers.env",
            "status.conditions",
        ])
        .unwrap();
        let root = paths.root().unwrap();
        let Some(Child::Into(meta)) = root.child("metadata") else { panic!("{root:?}") };
        assert_eq!(meta.child("managedFields"), Some(&Child::Skip));
        let Some(Child::Into(annotations)) = meta.child("annotations") else { panic!("{meta:?}") };
        assert_eq!(annotations.child("kubectl.kubernetes.io/last-applied-configuration"), Some(&Child::Skip));
        assert!(meta.child("name").is_none());
        assert!(check::<ConfigMap>(&[]).unwrap().root().is_none());
        assert!(check::<ConfigMap>(&["data[key]", "binaryData"]).is_ok());
    }

    #[test]
    fn dynamic_objects_take_paths_as_given_beyond_their_metadata() {
        use crate::resource::{DynamicObject, PartialObjectMetadata};
        assert!(check::<DynamicObject>(&["spec.anything.at[all]", "metadata.managedFields"]).is_ok());
        let err = check::<DynamicObject>(&["metadata.managedFeilds"]).unwrap_err();
        assert!(err.contains("no field \"managedFeilds\""), "{err}");
        assert!(check::<PartialObjectMetadata<Pod>>(&["metadata.managedFields"]).is_ok());
        assert!(check::<PartialObjectMetadata<Pod>>(&["metadata.nope"]).is_err());
    }
}
