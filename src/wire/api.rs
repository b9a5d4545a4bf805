//! `Api<K>`: one resource type on one server, and its one-shot calls (`list`, `get`).

use std::marker::PhantomData;
use std::sync::Arc;

use k8s_openapi::NamespaceResourceScope;

use crate::error::{Error, Result};
use crate::resource::{ApiResource, PartialObjectMetadata, Watchable};
use crate::wire::client::Client;
use crate::wire::decode::{self, Encoding};
use crate::wire::http::{Http, Negotiation};
use crate::wire::request::{self, ListParams, Target};

/// One resource type on one server, in one namespace or across all of them.
///
/// ```
/// # let server = kube_watcher::testing::FakeApiServer::start();
/// use kube_watcher::{Api, Client};
/// use k8s_openapi::api::core::v1::Pod;
///
/// let client = Client::from_url(&server.url())?;
/// let pods: Api<Pod> = Api::namespaced(client.clone(), "apps");
/// let all_pods: Api<Pod> = Api::all(client);
/// # let _ = (pods, all_pods);
/// # Ok::<(), kube_watcher::Error>(())
/// ```
pub struct Api<K> {
    pub(crate) client: Client,
    pub(crate) resource: ApiResource,
    pub(crate) namespace: Option<String>,
    /// Ask for `PartialObjectMetadata` instead of full objects (`metadata_watcher`).
    pub(crate) metadata_only: bool,
    _kind: PhantomData<fn() -> K>,
}

impl<K> Clone for Api<K> {
    fn clone(&self) -> Self {
        Api {
            client: self.client.clone(),
            resource: self.resource.clone(),
            namespace: self.namespace.clone(),
            metadata_only: self.metadata_only,
            _kind: PhantomData,
        }
    }
}

impl<K> std::fmt::Debug for Api<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Api")
            .field("resource", &self.resource.plural)
            .field("api_version", &self.resource.api_version)
            .field("namespace", &self.namespace)
            .finish()
    }
}

impl<K: k8s_openapi::Resource> Api<K> {
    /// Every object of this type: across all namespaces, or cluster-scoped.
    #[must_use]
    pub fn all(client: Client) -> Self {
        Self::all_with(client, &ApiResource::of::<K>())
    }

    /// The objects in `namespace`.
    #[must_use]
    pub fn namespaced(client: Client, namespace: &str) -> Self
    where
        K: k8s_openapi::Resource<Scope = NamespaceResourceScope>,
    {
        Self::namespaced_with(client, namespace, &ApiResource::of::<K>())
    }

    /// The objects in the client's default namespace.
    #[must_use]
    pub fn default_namespaced(client: Client) -> Self
    where
        K: k8s_openapi::Resource<Scope = NamespaceResourceScope>,
    {
        let ns = client.default_namespace().to_owned();
        Self::namespaced(client, &ns)
    }
}

impl<K> Api<K> {
    /// Every object of the type `resource` describes (for dynamic objects and custom resources).
    #[must_use]
    pub fn all_with(client: Client, resource: &ApiResource) -> Self {
        Api { client, resource: resource.clone(), namespace: None, metadata_only: false, _kind: PhantomData }
    }

    /// The objects of type `resource` in `namespace`.
    #[must_use]
    pub fn namespaced_with(client: Client, namespace: &str, resource: &ApiResource) -> Self {
        let namespace = resource.namespaced.then(|| namespace.to_owned());
        Api { client, resource: resource.clone(), namespace, metadata_only: false, _kind: PhantomData }
    }

    /// The resource type's address.
    #[must_use]
    pub fn resource(&self) -> &ApiResource {
        &self.resource
    }

    /// The namespace, or `None` for all namespaces / cluster-scoped.
    #[must_use]
    pub fn namespace(&self) -> Option<&str> {
        self.namespace.as_deref()
    }

    /// The same type and namespace, listed, watched and read as metadata only
    /// ([`PartialObjectMetadata`], requested with the `Accept` header, in protobuf first:
    /// docs/protocol.md §8 and §12.1).
    ///
    /// [`metadata_watcher`](crate::metadata_watcher) is `Watcher::new(api.into_metadata(), config)`;
    /// use this with [`Watcher::builder`](crate::Watcher::builder) for its other options.
    #[must_use]
    pub fn into_metadata(self) -> Api<PartialObjectMetadata<K>> {
        Api {
            client: self.client,
            resource: self.resource,
            namespace: self.namespace,
            metadata_only: true,
            _kind: PhantomData,
        }
    }

    pub(crate) fn describe(&self, verb: &str) -> String {
        self.target().describe(verb)
    }

    /// What its requests are about, as the transport takes it.
    pub(crate) fn target(&self) -> Target<'_> {
        Target { resource: &self.resource, namespace: self.namespace.as_deref(), metadata_only: self.metadata_only }
    }
}

/// One page of a list: its items, the list's resourceVersion and the continue token.
#[derive(Debug, Clone)]
pub struct ObjectList<K> {
    /// The objects.
    pub items: Vec<K>,
    /// The list's resourceVersion: watch from here to see every later change.
    pub resource_version: Option<String>,
    /// The token for the next page, if there is one.
    pub continue_token: Option<String>,
}

impl<K: Watchable> Api<K> {
    /// Lists objects once (one page when `params.limit` is set). Blocks for the request.
    ///
    /// # Errors
    /// [`Error::Api`] when the server refuses (with its status and message), [`Error::Transport`]
    /// when it cannot be reached, [`Error::Decode`] when an item does not decode as `K`.
    pub fn list(&self, params: &ListParams) -> Result<ObjectList<K>> {
        let http = Http::new(Arc::clone(&self.client.conn)).negotiating(Negotiation::new::<K>(self.target(), true));
        let mut items = Vec::new();
        let context = self.describe("list");
        let mut scratch = decode::Scratch::default();
        let meta = http.list::<Error>(self.target(), params, |item| {
            let obj = decode::item::<K>(item, &mut scratch, None)
                .map_err(|e| Error::Decode(Box::new(decode::decode_error(&context, None, item.bytes, e))))?;
            items.push(obj);
            Ok(())
        })?;
        Ok(ObjectList { items, resource_version: meta.resource_version, continue_token: meta.continue_token })
    }

    /// Reads one object by name. Blocks for the request.
    ///
    /// # Errors
    /// A missing object is an [`Error::Api`] with `status() == Some(404)`.
    pub fn get(&self, name: &str) -> Result<K> {
        let http = Http::new(Arc::clone(&self.client.conn)).negotiating(Negotiation::new::<K>(self.target(), true));
        let context = format!("get {} {name:?}", self.resource.kind);
        let path = request::object_path(&self.resource, self.namespace.as_deref(), name);
        let (bytes, encoding) = http.get_object(self.target(), &path, &context)?;
        match encoding {
            Encoding::Json => decode::object(&bytes, &mut decode::Scratch::default()),
            Encoding::Protobuf => decode::protobuf_object(&bytes),
        }
        .map_err(|e| Error::Decode(Box::new(decode::decode_error(&context, None, &bytes, e))))
    }
}
