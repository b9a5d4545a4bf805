//! What can be watched: the `Watchable` bound, written once, and `ApiResource`, the type's address.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::de::DeserializeOwned;

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

/// k8s-openapi marks scope with a type; compare it without requiring `'static` on `K` itself.
fn is_namespaced<K: k8s_openapi::Resource>() -> bool {
    std::any::type_name::<K::Scope>() == std::any::type_name::<k8s_openapi::NamespaceResourceScope>()
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
