//! List and watch paths and query strings, built in one place from an `ApiResource` and params; pure.

use std::fmt::Write as _;
use std::time::Duration;

use crate::resource::ApiResource;
use crate::shard::Shard;

/// `Accept` for full objects.
pub(crate) const ACCEPT_JSON: &str = "application/json";
/// `Accept` for lists, gets and watches of a type with a protobuf form: protobuf, with JSON as the
/// fallback in the same header, so that a server that cannot produce protobuf answers JSON rather
/// than 406 (docs/protocol.md §12.1). client-go sends the same for watches: the server appends
/// `;stream=watch` to the answer's media type itself.
pub(crate) const ACCEPT_PROTOBUF: &str = "application/vnd.kubernetes.protobuf, application/json";
/// `Accept` for a metadata-only list in JSON, falling back to full objects on servers without
/// it (docs/protocol.md §8: without the fallback such a server answers 406).
pub(crate) const ACCEPT_METADATA_LIST: &str =
    "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json";
/// `Accept` for a metadata-only watch or get in JSON: the singular form (the list form makes a
/// watch fall back to full objects).
pub(crate) const ACCEPT_METADATA: &str =
    "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json";
/// `Accept` for a metadata-only list, protobuf first: client-go's metadata client sends exactly
/// this (docs/protocol.md §12.1); the JSON forms of [`ACCEPT_METADATA_LIST`] follow as fallbacks.
pub(crate) const ACCEPT_PROTOBUF_METADATA_LIST: &str = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json";
/// `Accept` for a metadata-only watch or get, protobuf first, as client-go's metadata client
/// sends it; the JSON forms of [`ACCEPT_METADATA`] follow as fallbacks.
pub(crate) const ACCEPT_PROTOBUF_METADATA: &str = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json";

/// The two `Accept` headers a list, get or watch may send: protobuf first (with JSON as the
/// fallback in the same header), or JSON only. `Negotiation` (wire/http.rs) picks one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Accepts {
    pub(crate) protobuf: &'static str,
    pub(crate) json: &'static str,
}

/// `Accept` for the discovery roots `/api` and `/apis`: the aggregated document
/// (`apidiscovery.k8s.io/v2`, every group, version and resource in one answer), falling back
/// to the plain one on servers without it (docs/protocol.md §11).
pub(crate) const ACCEPT_DISCOVERY: &str =
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json";

/// `resourceVersionMatch` for lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum VersionMatch {
    /// The list is at least as new as `resource_version`.
    NotOlderThan,
    /// The list is exactly at `resource_version` (410 if that is too old).
    Exact,
}

/// Parameters of a one-shot list request (`Api::list`), named as in kube-rs.
///
/// ```
/// use kube_watcher::ListParams;
/// let lp = ListParams::default().labels("app=web").limit(50);
/// # let _ = lp;
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[must_use]
pub struct ListParams {
    /// `labelSelector`.
    pub label_selector: Option<String>,
    /// `fieldSelector`.
    pub field_selector: Option<String>,
    /// `limit`: page size. `None` asks for everything at once.
    pub limit: Option<u32>,
    /// `continue`: the token from the previous page.
    pub continue_token: Option<String>,
    /// `resourceVersion`: `None` = most recent, `"0"` = any, else see `version_match`.
    pub resource_version: Option<String>,
    /// `resourceVersionMatch`.
    pub version_match: Option<VersionMatch>,
}

impl ListParams {
    /// Set the label selector.
    pub fn labels(mut self, selector: &str) -> Self {
        self.label_selector = Some(selector.to_owned());
        self
    }
    /// Set the field selector.
    pub fn fields(mut self, selector: &str) -> Self {
        self.field_selector = Some(selector.to_owned());
        self
    }
    /// Set the page size.
    pub fn limit(mut self, limit: u32) -> Self {
        self.limit = Some(limit);
        self
    }
    /// Continue a paged list from a previous page's token.
    pub fn continue_token(mut self, token: &str) -> Self {
        self.continue_token = Some(token.to_owned());
        self
    }
    /// Set `resourceVersion` (and optionally `resourceVersionMatch`).
    pub fn at(mut self, resource_version: &str, version_match: Option<VersionMatch>) -> Self {
        self.resource_version = Some(resource_version.to_owned());
        self.version_match = version_match;
        self
    }

    pub(crate) fn query(&self) -> String {
        let mut q = Query::default();
        q.opt("labelSelector", self.label_selector.as_deref());
        q.opt("fieldSelector", self.field_selector.as_deref());
        if let Some(limit) = self.limit.filter(|l| *l > 0) {
            q.push("limit", &limit.to_string());
        }
        q.opt("continue", self.continue_token.as_deref());
        q.opt("resourceVersion", self.resource_version.as_deref());
        q.opt(
            "resourceVersionMatch",
            self.version_match.map(|m| match m {
                VersionMatch::NotOlderThan => "NotOlderThan",
                VersionMatch::Exact => "Exact",
            }),
        );
        q.0
    }
}

/// Parameters of one watch request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct WatchParams {
    pub(crate) label_selector: Option<String>,
    pub(crate) field_selector: Option<String>,
    /// `None` only for a streaming list from "now".
    pub(crate) resource_version: Option<String>,
    pub(crate) timeout: Duration,
    pub(crate) bookmarks: bool,
    /// A streaming list: `sendInitialEvents=true&resourceVersionMatch=NotOlderThan`.
    pub(crate) send_initial_events: bool,
}

impl WatchParams {
    pub(crate) fn query(&self) -> String {
        let mut q = Query::default();
        q.push("watch", "true");
        q.opt("labelSelector", self.label_selector.as_deref());
        q.opt("fieldSelector", self.field_selector.as_deref());
        q.opt("resourceVersion", self.resource_version.as_deref());
        if self.bookmarks {
            q.push("allowWatchBookmarks", "true");
        }
        // Whole seconds, at least one: the API only takes integers.
        q.push("timeoutSeconds", &self.timeout.as_secs().max(1).to_string());
        if self.send_initial_events {
            q.push("sendInitialEvents", "true");
            q.push("resourceVersionMatch", "NotOlderThan");
        }
        q.0
    }
}

#[derive(Default)]
struct Query(String);

impl Query {
    fn push(&mut self, key: &str, value: &str) {
        self.0.push(if self.0.is_empty() { '?' } else { '&' });
        self.0.push_str(key);
        self.0.push('=');
        encode_into(&mut self.0, value);
    }
    fn opt(&mut self, key: &str, value: Option<&str>) {
        if let Some(v) = value {
            self.push(key, v);
        }
    }
}

/// Percent-encodes everything but RFC 3986 unreserved characters: safe in a path segment and in
/// a query value (selectors carry `=`, `!`, `,`, `(`, `)` and spaces).
pub(crate) fn encode_into(out: &mut String, s: &str) {
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            // Writing to a String cannot fail.
            let _ = write!(out, "%{b:02X}");
        }
    }
}

/// The collection path of `ar`, in `namespace` or across all namespaces / cluster-scoped.
pub(crate) fn collection_path(ar: &ApiResource, namespace: Option<&str>) -> String {
    let mut p = group_version_path(&ar.group, &ar.version);
    if let Some(ns) = namespace.filter(|_| ar.namespaced) {
        p.push_str("/namespaces/");
        encode_into(&mut p, ns);
    }
    p.push('/');
    encode_into(&mut p, &ar.plural);
    p
}

/// The discovery path of one group version: `/api/v1` or `/apis/{group}/{version}`.
pub(crate) fn group_version_path(group: &str, version: &str) -> String {
    let mut p = String::with_capacity(32);
    if group.is_empty() {
        p.push_str("/api/");
    } else {
        p.push_str("/apis/");
        encode_into(&mut p, group);
        p.push('/');
    }
    encode_into(&mut p, version);
    p
}

/// The discovery path listing every named API group.
pub(crate) const GROUPS_PATH: &str = "/apis";
/// The discovery path of the core (legacy) group.
pub(crate) const CORE_PATH: &str = "/api";

/// The path of one object.
pub(crate) fn object_path(ar: &ApiResource, namespace: Option<&str>, name: &str) -> String {
    let mut p = collection_path(ar, namespace);
    p.push('/');
    encode_into(&mut p, name);
    p
}

/// What a request is about: one resource type, in one namespace or across all, full objects or
/// metadata only. Plain data, so that the transport (`wire/http.rs`) needs nothing of `Api`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Target<'a> {
    pub(crate) resource: &'a ApiResource,
    pub(crate) namespace: Option<&'a str>,
    /// `PartialObjectMetadata` instead of full objects.
    pub(crate) metadata_only: bool,
    /// Only this shard's objects: lists and watches send its `shardSelector`.
    pub(crate) shard: Option<&'a Shard>,
}

impl Target<'_> {
    /// How errors name a request about it (see [`describe`]).
    pub(crate) fn describe(&self, verb: &str) -> String {
        describe(verb, self.resource, self.namespace)
    }

    /// The query of a list (`params`'s) or watch (`watch`'s) of it: with the shard's
    /// `shardSelector` (docs/protocol.md, "Sharded lists and watches") after the others.
    pub(crate) fn query(&self, params: &str) -> String {
        let mut q = Query(params.to_owned());
        if let Some(shard) = self.shard {
            q.push("shardSelector", &shard.selector());
        }
        q.0
    }

    /// The collection's path, with the namespace if there is one.
    pub(crate) fn collection_path(&self) -> String {
        collection_path(self.resource, self.namespace)
    }

    /// The `Accept` headers of a request about it: a list (`list`), or a get or watch, which
    /// ask for the singular `PartialObjectMetadata` when metadata only.
    pub(crate) fn accepts(&self, list: bool) -> Accepts {
        match (self.metadata_only, list) {
            (false, _) => Accepts { protobuf: ACCEPT_PROTOBUF, json: ACCEPT_JSON },
            (true, true) => Accepts { protobuf: ACCEPT_PROTOBUF_METADATA_LIST, json: ACCEPT_METADATA_LIST },
            (true, false) => Accepts { protobuf: ACCEPT_PROTOBUF_METADATA, json: ACCEPT_METADATA },
        }
    }
}

/// How errors name a request: `list pods in namespace "apps"`, `watch nodes`.
pub(crate) fn describe(verb: &str, ar: &ApiResource, namespace: Option<&str>) -> String {
    match namespace.filter(|_| ar.namespaced) {
        Some(ns) => format!("{verb} {} in namespace {ns:?}", ar.plural),
        None => format!("{verb} {}", ar.plural),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::decode::MEDIA_PROTOBUF;
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::{Node, Pod};

    #[test]
    fn core_namespaced_path_uses_api_prefix() {
        let ar = ApiResource::of::<Pod>();
        assert_eq!(collection_path(&ar, Some("shop")), "/api/v1/namespaces/shop/pods");
        assert_eq!(collection_path(&ar, None), "/api/v1/pods");
    }

    #[test]
    fn grouped_paths_use_apis_prefix() {
        let ar = ApiResource::of::<Deployment>();
        assert_eq!(object_path(&ar, Some("shop"), "web"), "/apis/apps/v1/namespaces/shop/deployments/web");
    }

    #[test]
    fn discovery_paths_separate_the_core_group() {
        assert_eq!(group_version_path("", "v1"), "/api/v1");
        assert_eq!(group_version_path("apps", "v1"), "/apis/apps/v1");
    }

    #[test]
    fn cluster_scoped_types_ignore_a_namespace() {
        let ar = ApiResource::of::<Node>();
        assert_eq!(collection_path(&ar, Some("shop")), "/api/v1/nodes");
    }

    #[test]
    fn names_and_selectors_are_percent_encoded() {
        let ar = ApiResource::new("example.com", "v1", "Widget", "widgets", true);
        assert_eq!(object_path(&ar, Some("a b"), "x/y"), "/apis/example.com/v1/namespaces/a%20b/widgets/x%2Fy");
        let q = ListParams::default().labels("app=web,tier in (a,b)").limit(2).query();
        assert_eq!(q, "?labelSelector=app%3Dweb%2Ctier%20in%20%28a%2Cb%29&limit=2");
    }

    #[test]
    fn list_query_carries_version_match() {
        let q = ListParams::default().at("42", Some(VersionMatch::NotOlderThan)).query();
        assert_eq!(q, "?resourceVersion=42&resourceVersionMatch=NotOlderThan");
    }

    #[test]
    fn zero_limit_means_no_paging() {
        assert_eq!(ListParams::default().limit(0).query(), "");
    }

    #[test]
    fn watch_query_has_bookmarks_and_whole_second_timeout() {
        let w = WatchParams {
            resource_version: Some("10".into()),
            timeout: Duration::from_millis(61_900),
            bookmarks: true,
            ..WatchParams::default()
        };
        assert_eq!(w.query(), "?watch=true&resourceVersion=10&allowWatchBookmarks=true&timeoutSeconds=61");
    }

    #[test]
    fn streaming_list_query_sends_all_three_parameters() {
        let w = WatchParams {
            timeout: Duration::from_secs(90),
            bookmarks: true,
            send_initial_events: true,
            ..WatchParams::default()
        };
        let q = w.query();
        assert!(q.contains("sendInitialEvents=true"), "{q}");
        assert!(q.contains("resourceVersionMatch=NotOlderThan"), "{q}");
        assert!(q.contains("allowWatchBookmarks=true"), "{q}");
        assert!(!q.contains("resourceVersion="), "{q}");
    }

    /// The metadata client of client-go (`metadata/metadata.go`) sends these exact headers; each
    /// is the protobuf range followed by the JSON-only header.
    #[test]
    fn metadata_requests_ask_for_protobuf_as_client_go_does() {
        let ar = ApiResource::new("example.com", "v1", "Widget", "widgets", true);
        let target = Target { resource: &ar, namespace: None, metadata_only: true, shard: None };
        let list = target.accepts(true);
        assert_eq!(
            list.protobuf,
            "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,\
             application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"
        );
        assert_eq!(list.json, "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json");
        let one = target.accepts(false);
        assert_eq!(
            one.protobuf,
            "application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,\
             application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"
        );
        assert_eq!(one.json, "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json");
        for accepts in [list, one] {
            let (range, rest) = accepts.protobuf.split_once(',').unwrap();
            assert!(range.starts_with(MEDIA_PROTOBUF), "{range}");
            assert_eq!(rest, accepts.json);
        }
        let full = Target { metadata_only: false, ..target };
        for list in [true, false] {
            assert_eq!(full.accepts(list), Accepts { protobuf: ACCEPT_PROTOBUF, json: ACCEPT_JSON });
        }
    }

    #[test]
    fn lists_and_watches_of_a_shard_send_its_selector_last() {
        let ar = ApiResource::of::<Pod>();
        let shard = crate::Shard::of(1, 2).unwrap();
        let target = Target { resource: &ar, namespace: None, metadata_only: false, shard: Some(&shard) };
        let selector = "shardSelector=shardRange%28object.metadata.uid%2C%20%270x8000000000000000%27%2C%20%270x10000000000000000%27%29";
        let list = target.query(&ListParams::default().limit(5).query());
        assert_eq!(list, format!("?limit=5&{selector}"));
        let watch = WatchParams { timeout: Duration::from_secs(9), ..WatchParams::default() };
        assert_eq!(target.query(&watch.query()), format!("?watch=true&timeoutSeconds=9&{selector}"));
        // An empty query starts with `?`; no shard, nothing added.
        assert_eq!(target.query(""), format!("?{selector}"));
        assert_eq!(Target { shard: None, ..target }.query("?limit=5"), "?limit=5");
    }

    #[test]
    fn requests_are_described_for_errors() {
        let ar = ApiResource::of::<Pod>();
        assert_eq!(describe("list", &ar, Some("apps")), "list pods in namespace \"apps\"");
        assert_eq!(describe("watch", &ar, None), "watch pods");
    }
}
