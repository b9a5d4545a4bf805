//! What can be watched: the `Watchable` bound, written once, `ApiResource` (the type's address),
//! and the untyped object shapes `DynamicObject` and `PartialObjectMetadata<K>`.

use std::fmt;
use std::marker::PhantomData;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// The bound on every watched type: decodable, with standard object metadata, shareable
/// across threads.
///
/// Every k8s-openapi resource type implements it through a blanket impl, as does any type that
/// implements `k8s_openapi::Metadata<Ty = ObjectMeta>` (for example a custom resource's struct).
pub trait Watchable: DeserializeOwned + Send + Sync + 'static {
    /// The object's metadata.
    fn meta(&self) -> &ObjectMeta;
    /// The object's metadata, mutably (for transforms that drop fields such as managedFields).
    fn meta_mut(&mut self) -> &mut ObjectMeta;

    /// The `kind` the object says it has, when it is not the one this type stands for: only
    /// [`PartialObjectMetadata`] answers, so a server that ignored the metadata-only `Accept`
    /// header is noticed. Not meant to be implemented outside this crate.
    #[doc(hidden)]
    fn unexpected_kind(&self) -> Option<&str> {
        None
    }

    /// Whether lists, gets and watches of this type may ask for protobuf (docs/protocol.md §12):
    /// true for typed resources (then only the kinds of the schema table do) and for
    /// [`PartialObjectMetadata`] (a `meta.k8s.io` type the server writes in protobuf for every
    /// resource), false for [`DynamicObject`], which stays JSON. Not meant to be implemented
    /// outside this crate.
    #[doc(hidden)]
    #[must_use]
    fn protobuf_form() -> bool
    where
        Self: Sized,
    {
        true
    }
}

impl<K> Watchable for K
where
    K: k8s_openapi::Metadata<Ty = ObjectMeta> + DeserializeOwned + Send + Sync + 'static,
{
    fn meta(&self) -> &ObjectMeta {
        self.metadata()
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        self.metadata_mut()
    }
}

/// Where a resource type lives in the API: group, version, kind, plural name and scope.
///
/// Typed k8s-openapi resources get theirs from [`ApiResource::of`]; dynamic ones (custom
/// resources) are written by hand or found through discovery.
///
/// ```
/// use kube_watcher::ApiResource;
/// use k8s_openapi::api::apps::v1::Deployment;
///
/// let ar = ApiResource::of::<Deployment>();
/// assert_eq!((ar.group.as_str(), ar.plural.as_str(), ar.namespaced), ("apps", "deployments", true));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ApiResource {
    /// API group, empty for the core group (`""`, `"apps"`, `"example.com"`).
    pub group: String,
    /// API version (`"v1"`).
    pub version: String,
    /// `group/version`, or just the version for the core group (`"apps/v1"`, `"v1"`).
    pub api_version: String,
    /// Kind (`"Deployment"`).
    pub kind: String,
    /// Lowercase plural resource name used in URLs (`"deployments"`).
    pub plural: String,
    /// Whether objects live in namespaces.
    pub namespaced: bool,
}

impl ApiResource {
    /// The address of a typed k8s-openapi resource.
    #[must_use]
    pub fn of<K: k8s_openapi::Resource>() -> Self {
        ApiResource {
            group: K::GROUP.to_owned(),
            version: K::VERSION.to_owned(),
            api_version: K::API_VERSION.to_owned(),
            kind: K::KIND.to_owned(),
            plural: K::URL_PATH_SEGMENT.to_owned(),
            namespaced: is_namespaced::<K>(),
        }
    }

    /// A custom resource's address from its group, version, kind, plural name and scope.
    #[must_use]
    pub fn new(group: &str, version: &str, kind: &str, plural: &str, namespaced: bool) -> Self {
        let api_version = if group.is_empty() { version.to_owned() } else { format!("{group}/{version}") };
        ApiResource {
            group: group.to_owned(),
            version: version.to_owned(),
            api_version,
            kind: kind.to_owned(),
            plural: plural.to_owned(),
            namespaced,
        }
    }
}

/// `apiVersion` and `kind`, as objects carry them (list items of built-in types often do not).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TypeMeta {
    /// `group/version`, or the version alone for the core group.
    #[serde(rename = "apiVersion")]
    pub api_version: String,
    /// The kind (`"Deployment"`).
    pub kind: String,
}

/// An object of any type, for custom resources without a Rust type and types found at run
/// time: its metadata decoded, everything else kept as JSON.
///
/// Watch it with an [`Api`](crate::Api) built from an [`ApiResource`]
/// ([`Api::all_with`](crate::Api::all_with), [`Api::namespaced_with`](crate::Api::namespaced_with)),
/// for example one that [`Client::discover`](crate::Client::discover) found.
///
/// It implements [`Watchable`] directly rather than `k8s_openapi::Resource`: that trait's
/// constant group and kind would let `Api::<DynamicObject>::all` compile with no address.
///
/// ```
/// # let server = kube_watcher::testing::FakeApiServer::start();
/// # let rt = kube_watcher::testing::ResourceType::new("example.com", "v1", "widgets", "Widget", true);
/// # server.create_value(&rt, serde_json::json!({"metadata": {"name": "w1", "namespace": "shop"}, "spec": {"size": 3}})).unwrap();
/// use std::time::Duration;
/// use kube_watcher::{Api, ApiResource, Client, Config, DynamicObject, ObjectRef, Watcher};
///
/// let widgets = ApiResource::new("example.com", "v1", "Widget", "widgets", true);
/// let api: Api<DynamicObject> = Api::namespaced_with(Client::from_url(&server.url())?, "shop", &widgets);
/// let watcher = Watcher::new(api, Config::default())?;
/// watcher.store().wait_until_ready(Duration::from_secs(30))?;
/// let w1 = watcher.store().get(&ObjectRef::new("w1").within("shop")).unwrap();
/// assert_eq!(w1.data["spec"]["size"], 3);
/// # Ok::<(), kube_watcher::Error>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DynamicObject {
    /// `apiVersion` and `kind`, when the object carries them.
    #[serde(flatten, default)]
    pub types: Option<TypeMeta>,
    /// Standard object metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// Every other field (`spec`, `status`, `data`, …) as a JSON object.
    #[serde(flatten)]
    pub data: serde_json::Value,
}

impl Watchable for DynamicObject {
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
    fn protobuf_form() -> bool {
        false
    }
}

/// Only the metadata of a `K`, as a metadata-only list or watch returns it: what
/// [`metadata_watcher`](crate::metadata_watcher) keeps, a fraction of a full object's memory.
///
/// `K` only names the watched type; nothing of it is stored. Read from protobuf or JSON, it is
/// the same value: `types` is what the JSON form carries (a list item's protobuf message has no
/// room for it, and is given the `meta.k8s.io/v1` `PartialObjectMetadata` its JSON form shows).
#[derive(Serialize, Deserialize)]
#[serde(bound = "")]
pub struct PartialObjectMetadata<K> {
    /// `apiVersion` and `kind`: `meta.k8s.io/v1` and `PartialObjectMetadata` when the server
    /// honoured the request.
    #[serde(flatten, default)]
    pub types: Option<TypeMeta>,
    /// Standard object metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(skip)]
    _kind: PhantomData<fn() -> K>,
}

impl<K> PartialObjectMetadata<K> {
    /// Metadata of a `K`, with no `types`.
    #[must_use]
    pub fn new(metadata: ObjectMeta) -> Self {
        PartialObjectMetadata { types: None, metadata, _kind: PhantomData }
    }
}

impl<K> Clone for PartialObjectMetadata<K> {
    fn clone(&self) -> Self {
        PartialObjectMetadata { types: self.types.clone(), metadata: self.metadata.clone(), _kind: PhantomData }
    }
}

impl<K> PartialEq for PartialObjectMetadata<K> {
    fn eq(&self, other: &Self) -> bool {
        self.types == other.types && self.metadata == other.metadata
    }
}

impl<K> fmt::Debug for PartialObjectMetadata<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PartialObjectMetadata").field("types", &self.types).field("metadata", &self.metadata).finish()
    }
}

impl<K: 'static> Watchable for PartialObjectMetadata<K> {
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
    fn unexpected_kind(&self) -> Option<&str> {
        self.types.as_ref().map(|t| t.kind.as_str()).filter(|k| *k != "PartialObjectMetadata")
    }
}

/// k8s-openapi marks scope with a type; compare it without requiring `'static` on `K` itself.
fn is_namespaced<K: k8s_openapi::Resource>() -> bool {
    std::any::type_name::<K::Scope>() == std::any::type_name::<k8s_openapi::NamespaceResourceScope>()
}

/// Makes a struct of your own a resource the library can list, watch and write: it implements
/// `k8s_openapi::Resource` and `k8s_openapi::Metadata` (the object's `metadata: ObjectMeta`
/// field) for it, from the group, version, kind, plural and scope you name.
///
/// Use it for a custom resource's type, or for a *projection* of a built-in type: a struct that
/// keeps only the fields your program reads. Such a struct is decoded straight from what the
/// server sends, protobuf or JSON: every field it does not name is skipped by the decoder,
/// never built, so a store of projections holds a fraction of the memory of the full type
/// (`examples/projection.rs`, docs/guide.md "Your own struct, only your fields"). It needs
/// `serde::Deserialize` (and `Serialize` for writes).
///
/// ```
/// use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
/// use serde::Deserialize;
///
/// /// A pod as a game server sees it: where it runs and whether it is up.
/// #[derive(Debug, Deserialize)]
/// struct PodView {
///     metadata: ObjectMeta,
///     spec: Option<PodViewSpec>,
///     status: Option<PodViewStatus>,
/// }
/// #[derive(Debug, Deserialize)]
/// #[serde(rename_all = "camelCase")]
/// struct PodViewSpec { node_name: Option<String> }
/// #[derive(Debug, Deserialize)]
/// #[serde(rename_all = "camelCase")]
/// struct PodViewStatus { phase: Option<String>, #[serde(rename = "podIP")] pod_ip: Option<String> }
///
/// kube_watcher::resource!(PodView, group = "", version = "v1", kind = "Pod", plural = "pods", namespaced);
///
/// assert_eq!(kube_watcher::ApiResource::of::<PodView>().api_version, "v1");
/// // A custom resource, cluster-scoped:
/// #[derive(Debug, Deserialize)]
/// struct Tenant { metadata: ObjectMeta }
/// kube_watcher::resource!(Tenant, group = "example.com", version = "v1", kind = "Tenant", plural = "tenants", cluster);
/// assert_eq!(kube_watcher::ApiResource::of::<Tenant>().api_version, "example.com/v1");
/// ```
#[macro_export]
macro_rules! resource {
    (@scope namespaced) => { $crate::k8s_openapi::NamespaceResourceScope };
    (@scope cluster) => { $crate::k8s_openapi::ClusterResourceScope };
    (@impl $ty:ty, $group:expr, $api_version:expr, $version:expr, $kind:expr, $plural:expr, $scope:ident) => {
        impl $crate::k8s_openapi::Resource for $ty {
            const API_VERSION: &'static str = $api_version;
            const GROUP: &'static str = $group;
            const KIND: &'static str = $kind;
            const VERSION: &'static str = $version;
            const URL_PATH_SEGMENT: &'static str = $plural;
            type Scope = $crate::resource!(@scope $scope);
        }
        impl $crate::k8s_openapi::Metadata for $ty {
            type Ty = $crate::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
            fn metadata(&self) -> &Self::Ty {
                &self.metadata
            }
            fn metadata_mut(&mut self) -> &mut Self::Ty {
                &mut self.metadata
            }
        }
    };
    ($ty:ty, group = "", version = $version:literal, kind = $kind:literal, plural = $plural:literal, $scope:ident) => {
        $crate::resource!(@impl $ty, "", $version, $version, $kind, $plural, $scope);
    };
    ($ty:ty, group = $group:literal, version = $version:literal, kind = $kind:literal, plural = $plural:literal, $scope:ident) => {
        $crate::resource!(@impl $ty, $group, concat!($group, "/", $version), $version, $kind, $plural, $scope);
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Namespace, Pod};

    #[test]
    fn scope_comes_from_the_k8s_openapi_type() {
        assert!(ApiResource::of::<Pod>().namespaced);
        assert!(!ApiResource::of::<Namespace>().namespaced);
        assert_eq!(ApiResource::of::<Pod>().api_version, "v1");
    }

    #[test]
    fn custom_resources_get_a_group_api_version() {
        let ar = ApiResource::new("example.com", "v1", "Widget", "widgets", true);
        assert_eq!(ar.api_version, "example.com/v1");
    }
}
