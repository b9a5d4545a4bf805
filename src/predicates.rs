//! Ready-made predicates for [`WatcherBuilder::predicate`](crate::WatcherBuilder::predicate):
//! each compares the store's previous copy of an object with the new one and says whether the
//! `Apply` is worth delivering.
//!
//! A predicate is any `Fn(&K, &K) -> bool` (old, new); these are plain functions, so they can be
//! passed by name and combined (an `Apply` is delivered when any registered predicate sees a
//! change):
//!
//! ```
//! # let server = kube_watcher::testing::FakeApiServer::start();
//! use kube_watcher::{Api, Client, Watcher, predicates};
//! use k8s_openapi::api::core::v1::ConfigMap;
//!
//! let maps: Api<ConfigMap> = Api::all(Client::from_url(&server.url())?);
//! let watcher = Watcher::builder(maps)
//!     .predicate(predicates::labels)
//!     .predicate(|old: &ConfigMap, new: &ConfigMap| old.data != new.data) // your own
//!     .start()?;
//! # drop(watcher);
//! # Ok::<(), kube_watcher::Error>(())
//! ```

use crate::resource::Watchable;

/// `metadata.generation` changed: the spec (desired state) changed, not just the status.
///
/// Objects without a generation (pods, config maps and most core types) always count as
/// changed, so this predicate never hides their updates.
pub fn generation<K: Watchable>(old: &K, new: &K) -> bool {
    let (old, new) = (old.meta(), new.meta());
    new.generation.is_none() || old.generation != new.generation
}

/// `metadata.labels` changed.
pub fn labels<K: Watchable>(old: &K, new: &K) -> bool {
    old.meta().labels != new.meta().labels
}

/// `metadata.annotations` changed.
pub fn annotations<K: Watchable>(old: &K, new: &K) -> bool {
    old.meta().annotations != new.meta().annotations
}

/// `metadata.finalizers` changed, or a deletion started (`deletionTimestamp` was set).
pub fn finalizers<K: Watchable>(old: &K, new: &K) -> bool {
    let (old, new) = (old.meta(), new.meta());
    old.finalizers != new.finalizers || old.deletion_timestamp != new.deletion_timestamp
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn cm(generation: Option<i64>, label: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some("a".into()),
                generation,
                labels: Some([("app".to_owned(), label.to_owned())].into()),
                ..ObjectMeta::default()
            },
            ..ConfigMap::default()
        }
    }

    #[test]
    fn generation_sees_spec_changes_and_passes_objects_without_one() {
        assert!(!generation(&cm(Some(1), "a"), &cm(Some(1), "b")));
        assert!(generation(&cm(Some(1), "a"), &cm(Some(2), "a")));
        assert!(generation(&cm(None, "a"), &cm(None, "a")));
    }

    #[test]
    fn metadata_predicates_compare_their_field_only() {
        assert!(labels(&cm(Some(1), "a"), &cm(Some(1), "b")));
        assert!(!labels(&cm(Some(1), "a"), &cm(Some(2), "a")));
        assert!(!annotations(&cm(Some(1), "a"), &cm(Some(1), "b")));
        let mut deleting = cm(Some(1), "a");
        deleting.metadata.deletion_timestamp = serde_json::from_str("\"2026-01-01T00:00:00Z\"").ok();
        assert!(deleting.metadata.deletion_timestamp.is_some());
        assert!(finalizers(&cm(Some(1), "a"), &deleting));
    }
}
