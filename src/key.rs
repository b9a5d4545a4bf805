//! `ObjectRef`: the store's key (namespace and name), parsed and displayed one way.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::marker::PhantomData;
use std::sync::Arc;

use crate::resource::Watchable;

/// Untyped key of an object within one resource type: namespace (none if cluster-scoped) and name.
/// Shared, not copied, by the store's map and its indexes: a clone counts a reference.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct ObjectKey {
    pub(crate) namespace: Option<Arc<str>>,
    pub(crate) name: Arc<str>,
}

impl ObjectKey {
    pub(crate) fn of<K: Watchable>(obj: &K) -> Option<ObjectKey> {
        let meta = obj.meta();
        let name = meta.name.as_deref()?;
        Some(ObjectKey { namespace: meta.namespace.as_deref().map(Into::into), name: name.into() })
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{ns}/{}", self.name),
            None => write!(f, "{}", self.name),
        }
    }
}

impl fmt::Debug for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")
    }
}

/// A reference to one object of type `K` in a [`Store`](crate::Store): its name, and its namespace
/// for namespaced types.
///
/// ```
/// use kube_watcher::ObjectRef;
/// use k8s_openapi::api::core::v1::Pod;
///
/// let r: ObjectRef<Pod> = ObjectRef::new("web-0").within("apps");
/// assert_eq!(r.to_string(), "apps/web-0");
/// ```
pub struct ObjectRef<K> {
    pub(crate) key: ObjectKey,
    _kind: PhantomData<fn() -> K>,
}

impl<K> ObjectRef<K> {
    /// A reference to the object called `name` (cluster-scoped, or add [`within`](Self::within)).
    #[must_use]
    pub fn new(name: &str) -> Self {
        ObjectRef { key: ObjectKey { namespace: None, name: name.into() }, _kind: PhantomData }
    }

    /// The same reference, in namespace `namespace`.
    #[must_use]
    pub fn within(mut self, namespace: &str) -> Self {
        self.key.namespace = Some(namespace.into());
        self
    }

    /// The object's name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.key.name
    }

    /// The object's namespace, `None` for cluster-scoped objects.
    #[must_use]
    pub fn namespace(&self) -> Option<&str> {
        self.key.namespace.as_deref()
    }

    pub(crate) fn from_key(key: ObjectKey) -> Self {
        ObjectRef { key, _kind: PhantomData }
    }
}

impl<K: Watchable> ObjectRef<K> {
    /// The reference to `obj`, from its metadata.
    ///
    /// An object without a name (which the API server never sends) gets an empty name.
    #[must_use]
    pub fn from_obj(obj: &K) -> Self {
        let key = ObjectKey::of(obj)
            .unwrap_or(ObjectKey { namespace: obj.meta().namespace.as_deref().map(Into::into), name: "".into() });
        ObjectRef::from_key(key)
    }
}

impl<K> Clone for ObjectRef<K> {
    fn clone(&self) -> Self {
        ObjectRef::from_key(self.key.clone())
    }
}

impl<K> PartialEq for ObjectRef<K> {
    fn eq(&self, other: &Self) -> bool {
        self.key == other.key
    }
}

impl<K> Eq for ObjectRef<K> {}

impl<K> Hash for ObjectRef<K> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.key.hash(state);
    }
}

impl<K> fmt::Display for ObjectRef<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.key.fmt(f)
    }
}

impl<K> fmt::Debug for ObjectRef<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ObjectRef({})", self.key)
    }
}
