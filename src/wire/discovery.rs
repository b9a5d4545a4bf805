//! Discovery: resolves a name as kubectl accepts it (`pods`, `po`, `deployments.apps`,
//! `Deployment`) into an `ApiResource`, with blocking GETs of the discovery documents: the
//! aggregated ones (two requests in all), or one per group version from servers without them.

use std::collections::HashMap;
use std::sync::Arc;

use serde::Deserialize;

use crate::codec::decode;
use crate::error::{Error, Result};
use crate::resource::ApiResource;
use crate::spelling::edit_distance;
use crate::wire::client::Client;
use crate::wire::http::Http;
use crate::wire::request::{self, ACCEPT_DISCOVERY, ACCEPT_JSON};

/// The answer to `GET /api` or `GET /apis` with [`ACCEPT_DISCOVERY`] (docs/protocol.md §11):
/// an aggregated `APIGroupDiscoveryList` (`items`), or, from a server without aggregated
/// discovery, a plain `APIGroupList` (`groups`; `/apis`) or `APIVersions` (`/api`).
#[derive(Deserialize)]
struct Root {
    #[serde(default)]
    kind: String,
    #[serde(default)]
    items: Vec<AggregatedGroup>,
    #[serde(default)]
    groups: Vec<Group>,
}

/// `APIGroupDiscovery`: one group, its versions in order of preference, and their resources.
#[derive(Deserialize)]
struct AggregatedGroup {
    #[serde(default)]
    metadata: GroupMeta,
    #[serde(default)]
    versions: Vec<AggregatedVersion>,
}

/// The group's `metadata`: only `name` is set (empty for the core group).
#[derive(Deserialize, Default)]
struct GroupMeta {
    #[serde(default)]
    name: String,
}

/// `APIVersionDiscovery`.
#[derive(Deserialize)]
struct AggregatedVersion {
    version: String,
    #[serde(default)]
    resources: Vec<AggregatedResource>,
    /// `Current`, or `Stale`: the server could not refresh it (an aggregated API down).
    #[serde(default)]
    freshness: String,
}

/// `APIResourceDiscovery`; its subresources are not listed, as they never match a name.
#[derive(Deserialize)]
struct AggregatedResource {
    resource: String,
    #[serde(rename = "responseKind")]
    response_kind: Option<ResponseKind>,
    /// `Namespaced` or `Cluster`.
    #[serde(default)]
    scope: String,
    #[serde(rename = "singularResource", default)]
    singular: String,
    #[serde(rename = "shortNames", default)]
    short_names: Vec<String>,
}

#[derive(Deserialize)]
struct ResponseKind {
    #[serde(default)]
    kind: String,
}

/// Whether a `Content-Type` names the aggregated form: `application/json` with the parameters
/// `g=apidiscovery.k8s.io`, `v=v2` and `as=APIGroupDiscoveryList`, in any order, among others
/// (client-go's `ContentTypeIsGVK` reads it the same way).
fn is_aggregated(content_type: &str) -> bool {
    let mut parts = content_type.split(';');
    if !parts.next().is_some_and(|base| base.trim().eq_ignore_ascii_case(request::ACCEPT_JSON)) {
        return false;
    }
    let (mut g, mut v, mut kind) = (false, false, false);
    for param in parts {
        let Some((key, value)) = param.split_once('=') else { continue };
        let value = value.trim().trim_matches('"');
        match key.trim().to_ascii_lowercase().as_str() {
            "g" => g = value == "apidiscovery.k8s.io",
            "v" => v = value == "v2",
            "as" => kind = value == "APIGroupDiscoveryList",
            _ => {}
        }
    }
    g && v && kind
}

impl Root {
    /// Whether this is the aggregated form: by its `Content-Type`, or by its `kind` (a proxy
    /// may drop the type's parameters).
    fn aggregated(&self, content_type: &str) -> bool {
        is_aggregated(content_type) || self.kind == "APIGroupDiscoveryList"
    }

    /// The aggregated groups, as the plain `APIGroupList` would list them, and every resource
    /// by (group, version). Stale versions are left out, as client-go leaves them out: their
    /// resources may be long gone; the first version that is not stale is the preferred one.
    fn split(self, found: &mut HashMap<(String, String), Vec<Resource>>) -> Vec<Group> {
        let mut groups = Vec::with_capacity(self.items.len());
        for g in self.items {
            let name = g.metadata.name;
            let mut versions = Vec::new();
            for v in g.versions {
                if v.freshness == "Stale" {
                    log::debug!("discovery: {name}/{} is stale; skipping it", v.version);
                    continue;
                }
                let resources = v.resources.into_iter().filter_map(Resource::from_aggregated).collect();
                found.insert((name.clone(), v.version.clone()), resources);
                versions.push(GroupVersion { version: v.version });
            }
            let preferred = versions.first().map(|v| GroupVersion { version: v.version.clone() });
            groups.push(Group { name, preferred, versions });
        }
        groups
    }
}

/// One group of a plain `APIGroupList` (`GET /apis`): its versions and the preferred one.
#[derive(Deserialize)]
struct Group {
    name: String,
    #[serde(rename = "preferredVersion")]
    preferred: Option<GroupVersion>,
    #[serde(default)]
    versions: Vec<GroupVersion>,
}

#[derive(Deserialize)]
struct GroupVersion {
    version: String,
}

/// `APIResourceList` (`GET /api/v1`, `GET /apis/{group}/{version}`).
#[derive(Deserialize)]
struct ResourceList {
    #[serde(default)]
    resources: Vec<Resource>,
}

#[derive(Deserialize)]
struct Resource {
    name: String,
    #[serde(rename = "singularName", default)]
    singular: String,
    #[serde(default)]
    namespaced: bool,
    kind: String,
    #[serde(rename = "shortNames", default)]
    short_names: Vec<String>,
}

impl Resource {
    /// The plain form of an aggregated resource; `None` without a kind (client-go drops those
    /// too: a type that only has subresources).
    fn from_aggregated(r: AggregatedResource) -> Option<Resource> {
        let kind = r.response_kind.map(|k| k.kind).filter(|k| !k.is_empty())?;
        Some(Resource {
            name: r.resource,
            singular: r.singular,
            namespaced: r.scope == "Namespaced",
            kind,
            short_names: r.short_names,
        })
    }
}

/// What the user typed, split as kubectl does: `resource[.version][.group]`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Wanted<'a> {
    resource: &'a str,
    version: Option<&'a str>,
    group: Option<&'a str>,
}

/// Every reading of `name`: the whole name, `resource.group` and `resource.version.group`.
fn readings(name: &str) -> Vec<Wanted<'_>> {
    let mut out = vec![Wanted { resource: name, version: None, group: None }];
    if let Some((resource, group)) = name.split_once('.') {
        out.push(Wanted { resource, version: None, group: Some(group) });
        if let Some((version, group)) = group.split_once('.') {
            out.push(Wanted { resource, version: Some(version), group: Some(group) });
        }
    }
    out
}

/// How well `r` matches `wanted`, best first: plural, then singular or short name, then kind
/// (case-insensitive, as `kubectl get Deployment` works). `None`: no match, or a subresource.
fn rank(r: &Resource, wanted: &str) -> Option<u8> {
    if r.name.contains('/') {
        return None;
    }
    if r.name == wanted {
        Some(0)
    } else if r.singular == wanted || r.short_names.iter().any(|s| s == wanted) {
        Some(1)
    } else if r.kind.eq_ignore_ascii_case(wanted) {
        Some(2)
    } else {
        None
    }
}

/// Whether `candidate` is close to what the user typed: one contains the other (`pod`/`pods`,
/// `deploy`), or they differ by at most two edits (`deploymnets`), ignoring case.
fn is_close(candidate: &str, typed: &str) -> bool {
    let (a, b) = (candidate.to_ascii_lowercase(), typed.to_ascii_lowercase());
    if a.is_empty() || b.len() < 2 {
        return false;
    }
    if (a.len() >= 3 && b.contains(&a)) || (b.len() >= 3 && a.contains(&b)) {
        return true;
    }
    edit_distance(a.as_bytes(), b.as_bytes()) <= 2
}

impl Client {
    /// Finds the resource type `name` stands for, as `kubectl get <name>` would: a plural
    /// (`pods`), singular (`pod`), short name (`po`, `deploy`), kind (`Deployment`), any of
    /// those qualified by a group (`deployments.apps`) or a version and group
    /// (`deployments.v1.apps`), or a custom resource's plural.
    ///
    /// Blocks for two GETs on servers with aggregated discovery (Kubernetes 1.30 and later):
    /// `/apis` and `/api` describe every group, version and resource. On other servers, for
    /// `/apis`, `/api/v1` and the preferred version of each group it needs (all of them when
    /// `name` names no group). The core group wins over named groups, and a plural match over
    /// a short name or kind. Nothing is cached: call it once and keep the [`ApiResource`].
    ///
    /// ```
    /// # let server = kube_watcher::testing::FakeApiServer::start();
    /// use kube_watcher::{Api, Client, DynamicObject};
    ///
    /// let client = Client::from_url(&server.url())?;
    /// let deploy = client.discover("deploy")?;
    /// assert_eq!((deploy.group.as_str(), deploy.plural.as_str(), deploy.kind.as_str()), ("apps", "deployments", "Deployment"));
    /// let api: Api<DynamicObject> = Api::namespaced_with(client, "shop", &deploy);
    /// # let _ = api;
    /// # Ok::<(), kube_watcher::Error>(())
    /// ```
    ///
    /// # Errors
    /// An [`Error::Api`] with status 404 naming `name` when no served resource matches; the
    /// error of a discovery request that failed (other than a 404 for one group).
    pub fn discover(&self, name: &str) -> Result<ApiResource> {
        let http = Http::new(Arc::clone(&self.conn));
        let context = format!("discover {name:?}");
        let decode_error = |bytes: &[u8], e: serde_json::Error| {
            Error::Decode(Box::new(decode::decode_error(&context, None, bytes, e.to_string())))
        };
        let root = |path: &str| -> Result<(Root, String)> {
            let (bytes, content_type) = http.get_typed(path, &context, ACCEPT_DISCOVERY)?;
            Ok((serde_json::from_slice(&bytes).map_err(|e| decode_error(&bytes, e))?, content_type))
        };
        let readings = readings(name);
        let any_group = readings.iter().any(|w| w.group.is_none());
        // The resources of each (group, version) the aggregated documents described; the others
        // are fetched one by one.
        let mut found: HashMap<(String, String), Vec<Resource>> = HashMap::new();
        let (apis, content_type) = root(request::GROUPS_PATH)?;
        let aggregated = apis.aggregated(&content_type);
        let groups = if aggregated { apis.split(&mut found) } else { apis.groups };
        // (group, version) in the order they are searched: the core group first.
        let mut versions: Vec<(String, String)> = Vec::new();
        if any_group {
            // A server that answered `/apis` in the aggregated form describes the core group
            // at `/api` the same way; any other has it at `/api/v1`.
            if aggregated {
                match root(request::CORE_PATH) {
                    Ok((core, content_type)) if core.aggregated(&content_type) => {
                        core.split(&mut found);
                    }
                    Ok(_) => {}
                    // As client-go tolerates it (an aggregated API server may have no core
                    // group); `/api/v1` is then asked, and skipped if missing too.
                    Err(e) if e.status() == Some(404) => log::debug!("{context}: {e}"),
                    Err(e) => return Err(e),
                }
            }
            versions.push((String::new(), "v1".to_owned()));
        }
        for g in &groups {
            let named = readings.iter().filter(|w| w.group == Some(g.name.as_str())).collect::<Vec<_>>();
            for w in &named {
                if let Some(v) = w.version
                    && g.versions.iter().any(|gv| gv.version == v)
                {
                    versions.push((g.name.clone(), v.to_owned()));
                }
            }
            if let Some(p) = &g.preferred
                && (any_group || named.iter().any(|w| w.version.is_none()))
            {
                versions.push((g.name.clone(), p.version.clone()));
            }
        }
        versions.dedup();

        let mut best: Option<(u8, ApiResource)> = None;
        // Names close to `name` among everything searched, for the error when nothing matches.
        let mut close: Vec<String> = Vec::new();
        for (group, version) in &versions {
            let resources = match found.remove(&(group.clone(), version.clone())) {
                Some(resources) => resources,
                None => match http.get_bytes(&request::group_version_path(group, version), &context, ACCEPT_JSON) {
                    Ok(bytes) => {
                        serde_json::from_slice::<ResourceList>(&bytes).map_err(|e| decode_error(&bytes, e))?.resources
                    }
                    // A group version that vanished (or an unavailable aggregated API): skip it.
                    Err(e) if e.status() == Some(404) || e.status() == Some(503) => {
                        log::debug!("{context}: {e}; skipping {group}/{version}");
                        continue;
                    }
                    Err(e) => return Err(e),
                },
            };
            for r in resources.iter().filter(|r| !r.name.contains('/')) {
                let qualified = if group.is_empty() { r.name.clone() } else { format!("{}.{group}", r.name) };
                let names = [&r.name, &r.singular].into_iter().chain(&r.short_names);
                if names.into_iter().any(|n| is_close(n, name)) && !close.contains(&qualified) {
                    close.push(qualified);
                }
            }
            for w in &readings {
                let group_ok = w.group.is_none_or(|g| g == group) && w.version.is_none_or(|v| v == version);
                if !group_ok {
                    continue;
                }
                for r in &resources {
                    if let Some(rank) = rank(r, w.resource)
                        && best.as_ref().is_none_or(|(b, _)| rank < *b)
                    {
                        best = Some((rank, ApiResource::new(group, version, &r.kind, &r.name, r.namespaced)));
                    }
                }
            }
            if best.as_ref().is_some_and(|(rank, _)| *rank == 0) {
                break;
            }
        }
        best.map(|(_, ar)| ar).ok_or_else(|| {
            let mut message =
                format!("the server has no resource type named {name:?} (plural, singular, short name or kind)");
            if !close.is_empty() {
                close.truncate(5);
                message.push_str(&format!("; close matches: {}", close.join(", ")));
            }
            let mut e = decode::http_error(&context, 404, b"", None);
            e.message = message;
            Error::Api(Box::new(e))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_aggregated_form_is_told_by_its_content_type_in_any_parameter_order() {
        assert!(is_aggregated("application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"));
        assert!(is_aggregated("application/json; as=APIGroupDiscoveryList;v=v2;g=apidiscovery.k8s.io;charset=utf-8"));
        assert!(is_aggregated("Application/JSON;g=\"apidiscovery.k8s.io\";v=v2;as=APIGroupDiscoveryList"));
        assert!(!is_aggregated("application/json"));
        assert!(!is_aggregated("application/json; charset=UTF-8"));
        assert!(!is_aggregated("application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList"));
        assert!(!is_aggregated(
            "application/vnd.kubernetes.protobuf;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
        ));
        assert!(!is_aggregated(""));
    }

    /// The shape of apidiscovery.k8s.io/v2 (k8s.io/api `apidiscovery/v2/types.go`), read as
    /// client-go's `SplitGroupsAndResources` reads it.
    #[test]
    fn an_aggregated_document_splits_into_groups_and_resources() {
        let doc = br#"{"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2", "metadata": {},
            "items": [{"metadata": {"name": "metrics.k8s.io"}, "versions": [
                {"version": "v1beta2", "freshness": "Stale", "resources": [
                    {"resource": "gone", "responseKind": {"group": "metrics.k8s.io", "version": "v1beta2", "kind": "Gone"},
                     "scope": "Cluster", "singularResource": "gone", "verbs": ["get"]}]},
                {"version": "v1beta1", "freshness": "Current", "resources": [
                    {"resource": "pods", "responseKind": {"group": "metrics.k8s.io", "version": "v1beta1", "kind": "PodMetrics"},
                     "scope": "Namespaced", "singularResource": "", "verbs": ["get", "list"],
                     "subresources": [{"subresource": "status", "responseKind": {"kind": "PodMetrics"}, "verbs": ["get"]}]},
                    {"resource": "noparent", "scope": "Cluster", "singularResource": "", "verbs": [],
                     "subresources": [{"subresource": "proxy", "verbs": ["get"]}]}]}]}]}"#;
        let root: Root = serde_json::from_slice(doc).unwrap();
        assert!(root.aggregated("application/json"), "known by its kind too");
        let mut found = HashMap::new();
        let groups = root.split(&mut found);
        assert_eq!(groups.len(), 1);
        let versions: Vec<&str> = groups[0].versions.iter().map(|v| v.version.as_str()).collect();
        assert_eq!(versions, ["v1beta1"], "a stale version is left out");
        assert_eq!(groups[0].preferred.as_ref().map(|v| v.version.as_str()), Some("v1beta1"));
        let resources = &found[&("metrics.k8s.io".to_owned(), "v1beta1".to_owned())];
        assert_eq!(resources.len(), 1, "a resource without a kind is left out");
        let r = &resources[0];
        assert_eq!((r.name.as_str(), r.kind.as_str(), r.namespaced), ("pods", "PodMetrics", true));
        assert!(!found.contains_key(&("metrics.k8s.io".to_owned(), "v1beta2".to_owned())));
    }

    #[test]
    fn close_names_are_suggested_and_far_ones_are_not() {
        assert!(is_close("pods", "pod"));
        assert!(is_close("deployments", "deploymnets"));
        assert!(is_close("foo", "foos"));
        assert!(is_close("configmaps", "configmap"));
        assert!(!is_close("pods", "services"));
        assert!(!is_close("po", "x"));
    }

    #[test]
    fn a_dotted_name_is_read_as_resource_group_and_resource_version_group() {
        let r = readings("deployments.v1.apps");
        assert_eq!(r.len(), 3);
        assert_eq!(r[1], Wanted { resource: "deployments", version: None, group: Some("v1.apps") });
        assert_eq!(r[2], Wanted { resource: "deployments", version: Some("v1"), group: Some("apps") });
        assert_eq!(readings("pods"), [Wanted { resource: "pods", version: None, group: None }]);
    }

    #[test]
    fn plural_beats_short_name_beats_kind_and_subresources_never_match() {
        let r = Resource {
            name: "deployments".into(),
            singular: "deployment".into(),
            namespaced: true,
            kind: "Deployment".into(),
            short_names: vec!["deploy".into()],
        };
        assert_eq!(rank(&r, "deployments"), Some(0));
        assert_eq!(rank(&r, "deploy"), Some(1));
        assert_eq!(rank(&r, "deployment"), Some(1));
        assert_eq!(rank(&r, "Deployment"), Some(2));
        assert_eq!(rank(&r, "pods"), None);
        let sub = Resource { name: "deployments/status".into(), ..r };
        assert_eq!(rank(&sub, "deployments/status"), None);
    }
}
