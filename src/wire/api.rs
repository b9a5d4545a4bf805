//! `Api<K>`: one resource type on one server, and its one-shot calls (`list`, `get`, and the
//! writes `create`, `replace`, `delete`).

use std::marker::PhantomData;
use std::sync::Arc;

use k8s_openapi::NamespaceResourceScope;

use crate::codec::decode::{self, Encoding};
use crate::error::{Error, Result};
use crate::resource::{ApiResource, PartialObjectMetadata, Watchable};
use crate::shard::Shard;
use crate::wire::client::Client;
use crate::wire::http::{Http, Negotiation, Verb};
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
    /// Only this shard's objects (a watcher's `Config::shard`): every list and watch sends its
    /// selector.
    pub(crate) shard: Option<Shard>,
    _kind: PhantomData<fn() -> K>,
}

impl<K> Clone for Api<K> {
    fn clone(&self) -> Self {
        Api {
            client: self.client.clone(),
            resource: self.resource.clone(),
            namespace: self.namespace.clone(),
            metadata_only: self.metadata_only,
            shard: self.shard.clone(),
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
        Api {
            client,
            resource: resource.clone(),
            namespace: None,
            metadata_only: false,
            shard: None,
            _kind: PhantomData,
        }
    }

    /// The objects of type `resource` in `namespace`.
    #[must_use]
    pub fn namespaced_with(client: Client, namespace: &str, resource: &ApiResource) -> Self {
        let namespace = resource.namespaced.then(|| namespace.to_owned());
        Api { client, resource: resource.clone(), namespace, metadata_only: false, shard: None, _kind: PhantomData }
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
            shard: self.shard,
            _kind: PhantomData,
        }
    }

    pub(crate) fn describe(&self, verb: &str) -> String {
        self.target().describe(verb)
    }

    /// What its requests are about, as the transport takes it.
    pub(crate) fn target(&self) -> Target<'_> {
        Target {
            resource: &self.resource,
            namespace: self.namespace.as_deref(),
            metadata_only: self.metadata_only,
            shard: self.shard.as_ref(),
        }
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
        self.list_on(&self.http(), params)
    }

    /// [`list`](Self::list) on `http` (a shard group's thread, whose requests are bounded and
    /// interruptible).
    pub(crate) fn list_on(&self, http: &Http, params: &ListParams) -> Result<ObjectList<K>> {
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
        self.get_on(&self.http(), name)
    }

    /// The transport of this `Api`'s one-shot calls: an agent of its own, negotiating protobuf
    /// for gets. A caller that keeps one (a lease elector) reuses its connection and can bound
    /// and interrupt its requests.
    pub(crate) fn http(&self) -> Http {
        Http::new(Arc::clone(&self.client.conn)).negotiating(Negotiation::new::<K>(self.target(), true))
    }

    /// [`get`](Self::get) on `http`.
    pub(crate) fn get_on(&self, http: &Http, name: &str) -> Result<K> {
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

/// Writes: JSON bodies (protobuf is not needed for them), one request each, no retry but a
/// stale pooled connection for `replace` and `delete` (which are idempotent).
impl<K: Watchable + serde::Serialize> Api<K> {
    /// Creates `obj` (a POST to the collection) and returns it as the server stored it, with its
    /// uid and resourceVersion. Blocks for the request.
    ///
    /// The object's namespace must be this `Api`'s namespace, or unset (the server fills it in).
    ///
    /// # Errors
    /// As for reads: [`Error::Api`] when the server refuses (an object of that name exists:
    /// [`Error::is_already_exists`]; invalid: 422), with its status and message;
    /// [`Error::Transport`] naming the host when it cannot be reached.
    ///
    /// # Examples
    /// ```
    /// # let server = kube_watcher::testing::FakeApiServer::start();
    /// use k8s_openapi::api::core::v1::ConfigMap;
    /// use kube_watcher::{Api, Client};
    ///
    /// let config_maps: Api<ConfigMap> = Api::namespaced(Client::from_url(&server.url())?, "default");
    /// let mut cm = ConfigMap::default();
    /// cm.metadata.name = Some("settings".into());
    /// let created = config_maps.create(&cm)?;
    /// assert!(created.metadata.resource_version.is_some());
    /// assert!(config_maps.create(&cm).unwrap_err().is_already_exists());
    /// # Ok::<(), kube_watcher::Error>(())
    /// ```
    pub fn create(&self, obj: &K) -> Result<K> {
        self.create_on(&Http::new(Arc::clone(&self.client.conn)), obj)
    }

    /// [`create`](Self::create) on `http`.
    pub(crate) fn create_on(&self, http: &Http, obj: &K) -> Result<K> {
        let name = obj.meta().name.as_deref().unwrap_or_default();
        let context = self.describe_object("create", name);
        let body = encode(obj, &self.resource, &context)?;
        let path = request::collection_path(&self.resource, self.namespace.as_deref());
        self.written(http, Verb::Post(&body), &path, &context)
    }

    /// Replaces the object named by `obj` (a PUT) and returns it as the server stored it.
    /// Blocks for the request.
    ///
    /// The PUT carries `obj`'s `metadata.resourceVersion`: when the object changed since it was
    /// read at that version, the server refuses with 409 Conflict ([`Error::is_conflict`]) and
    /// changes nothing; read it again and redo the change. Without a resourceVersion the
    /// replace is unconditional (last writer wins).
    ///
    /// # Errors
    /// [`Error::Api`]: 409 Conflict as above; 404 when no such object exists, for most types
    /// (a Lease is created instead, as the server allows it for Leases, unless the object
    /// carries a uid: then it was deleted since it was read, a 409). Otherwise as for
    /// [`create`](Self::create).
    ///
    /// # Examples
    /// ```
    /// # let server = kube_watcher::testing::FakeApiServer::start();
    /// use k8s_openapi::api::core::v1::ConfigMap;
    /// use kube_watcher::{Api, Client};
    ///
    /// let config_maps: Api<ConfigMap> = Api::namespaced(Client::from_url(&server.url())?, "default");
    /// let mut cm = ConfigMap::default();
    /// cm.metadata.name = Some("settings".into());
    /// let read = config_maps.create(&cm)?;
    /// let mut mine = read.clone();
    /// mine.data = Some([("mode".to_owned(), "fast".to_owned())].into());
    /// config_maps.replace(&mine)?;
    /// // A second writer that read the same version loses, and is told so:
    /// let mut theirs = read;
    /// theirs.data = Some([("mode".to_owned(), "slow".to_owned())].into());
    /// assert!(config_maps.replace(&theirs).unwrap_err().is_conflict());
    /// # Ok::<(), kube_watcher::Error>(())
    /// ```
    pub fn replace(&self, obj: &K) -> Result<K> {
        self.replace_on(&Http::new(Arc::clone(&self.client.conn)), obj)
    }

    /// [`replace`](Self::replace) on `http`.
    pub(crate) fn replace_on(&self, http: &Http, obj: &K) -> Result<K> {
        let name = obj.meta().name.as_deref().unwrap_or_default();
        let context = self.describe_object("replace", name);
        if name.is_empty() {
            return Err(Error::config("metadata.name", format!("{context}: the object has no name")));
        }
        let body = encode(obj, &self.resource, &context)?;
        let path = request::object_path(&self.resource, self.namespace.as_deref(), name);
        self.written(http, Verb::Put(&body), &path, &context)
    }

    /// Deletes the object `name`. Blocks for the request; returns once the server accepted the
    /// deletion (an object with finalizers stays, marked for deletion, until they are done).
    ///
    /// # Errors
    /// [`Error::Api`] with `status() == Some(404)` ([`Error::is_not_found`]) when there is no
    /// such object. Otherwise as for [`create`](Self::create).
    pub fn delete(&self, name: &str) -> Result<()> {
        let context = self.describe_object("delete", name);
        let path = request::object_path(&self.resource, self.namespace.as_deref(), name);
        let http = Http::new(Arc::clone(&self.client.conn));
        http.write(Verb::Delete, &path, &context).map(drop)
    }

    /// Sends one write and decodes the object the server answers with.
    fn written(&self, http: &Http, verb: Verb<'_>, path: &str, context: &str) -> Result<K> {
        let bytes = http.write(verb, path, context)?;
        decode::object(&bytes, &mut decode::Scratch::default())
            .map_err(|e| Error::Decode(Box::new(decode::decode_error(context, None, &bytes, e))))
    }

    /// How errors name a write of one object: `replace leases "lock" in namespace "apps"`.
    fn describe_object(&self, verb: &str, name: &str) -> String {
        match self.namespace.as_deref() {
            Some(ns) => format!("{verb} {} {name:?} in namespace {ns:?}", self.resource.plural),
            None => format!("{verb} {} {name:?}", self.resource.plural),
        }
    }
}

/// The JSON body of a write.
/// The JSON body of a write. An object that does not say what it is (a user's struct without
/// `apiVersion` and `kind` fields) gets them from the resource it is written to: kube-apiserver
/// refuses a custom resource without its `kind` (400, "Object 'Kind' is missing"), though it
/// fills them in for built-in types (tests/real/resources.rs).
fn encode<K: serde::Serialize>(obj: &K, resource: &ApiResource, context: &str) -> Result<Vec<u8>> {
    let failed = |e: serde_json::Error| {
        Error::Decode(Box::new(crate::error::DecodeError {
            context: context.to_owned(),
            line: None,
            len: 0,
            message: format!("cannot encode the object as JSON: {e}"),
            snippet: String::new(),
        }))
    };
    let mut value = serde_json::to_value(obj).map_err(failed)?;
    if let serde_json::Value::Object(map) = &mut value {
        for (key, wanted) in [("apiVersion", &resource.api_version), ("kind", &resource.kind)] {
            if map.get(key).and_then(serde_json::Value::as_str).is_none_or(str::is_empty) {
                map.insert(key.to_owned(), serde_json::Value::String(wanted.clone()));
            }
        }
    }
    serde_json::to_vec(&value).map_err(failed)
}
