//! The store's indexes: value → keys and key → values, one per index name.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use crate::key::ObjectKey;

/// A user index function: the index values of one object (`Watcher::builder(..).index(..)`).
pub(crate) type IndexFn<K> = Arc<dyn Fn(&K) -> Vec<String> + Send + Sync>;

/// The name of the built-in index by namespace.
pub(crate) const NAMESPACE_INDEX: &str = "namespace";

/// One named index: value → keys, and key → values (to remove an entry without its object).
/// Invariant: `values` and `of` describe the same pairs, and no set in `values` is empty. The
/// built-in namespace index keeps no `of` (`by_namespace`): its one value is the key's own
/// namespace, so a key's values are read off the key, not kept beside it a second time.
#[derive(Default)]
pub(super) struct Index {
    pub(super) values: HashMap<String, HashSet<ObjectKey>>,
    pub(super) of: HashMap<ObjectKey, Vec<String>>,
    by_namespace: bool,
}

impl Index {
    /// Adds (or replaces) `key`'s values (ignored by the namespace index, which reads them off
    /// the key).
    pub(super) fn insert(&mut self, key: &ObjectKey, values: Vec<String>) {
        if self.by_namespace {
            if let Some(ns) = &key.namespace {
                match self.values.get_mut(&**ns) {
                    // A modified object keeps its key: nothing to insert, nothing to clone.
                    Some(keys) => {
                        if !keys.contains(key) {
                            keys.insert(key.clone());
                        }
                    }
                    None => {
                        self.values.insert(ns.to_string(), HashSet::from([key.clone()]));
                    }
                }
            }
            return;
        }
        // A modified object mostly keeps its values: then there is nothing to move, and no key
        // or value to clone.
        if self.of.get(key).is_some_and(|old| *old == values) {
            return;
        }
        self.remove(key);
        if values.is_empty() {
            return;
        }
        for v in &values {
            self.values.entry(v.clone()).or_default().insert(key.clone());
        }
        self.of.insert(key.clone(), values);
    }

    pub(super) fn remove(&mut self, key: &ObjectKey) {
        if self.by_namespace {
            if let Some(ns) = &key.namespace {
                self.remove_value(ns, key);
            }
            return;
        }
        for v in self.of.remove(key).into_iter().flatten() {
            self.remove_value(&v, key);
        }
    }

    fn remove_value(&mut self, value: &str, key: &ObjectKey) {
        if let Some(keys) = self.values.get_mut(value) {
            keys.remove(key);
            if keys.is_empty() {
                self.values.remove(value);
            }
        }
    }

    /// Moves every entry of `other` (an index of the same name) into this one.
    pub(super) fn extend(&mut self, other: Index) {
        if self.by_namespace {
            for keys in other.values.into_values() {
                for key in keys {
                    self.insert(&key, Vec::new());
                }
            }
        } else {
            for (key, values) in other.of {
                self.insert(&key, values);
            }
        }
    }
}

/// Every index of one map, positionally matching `Inner::index_names`.
pub(super) type Indexes = Vec<Index>;

/// Empty indexes for these index functions (`None`: the built-in namespace index).
pub(super) fn new_indexes<K>(fns: &[Option<IndexFn<K>>]) -> Indexes {
    fns.iter().map(|f| Index { by_namespace: f.is_none(), ..Index::default() }).collect()
}

/// An object's values for every index, positionally matching `Inner::index_names`, computed
/// before the store's lock is taken (`Indexer::values`). `None`, and every position past the
/// end, is the built-in namespace index, whose one value is the key's namespace: it is read off
/// the key under the lock, and only for a key the map did not hold (a key's namespace never
/// changes), so that the event of a known object allocates and looks up nothing for it.
pub(crate) type Values = Vec<Option<Vec<String>>>;

/// Adds (or replaces) `key`'s values in every index. `known`: the map these indexes describe
/// held `key` already, so the namespace index holds it.
pub(super) fn index_insert(indexes: &mut Indexes, key: &ObjectKey, values: Values, known: bool) {
    let mut values = values.into_iter();
    for index in indexes.iter_mut() {
        match values.next().flatten() {
            Some(values) => index.insert(key, values),
            None if known => {}
            // The namespace index reads the key's namespace off the key.
            None => index.insert(key, Vec::new()),
        }
    }
}

pub(super) fn index_remove(indexes: &mut Indexes, key: &ObjectKey) {
    for index in indexes {
        index.remove(key);
    }
}
