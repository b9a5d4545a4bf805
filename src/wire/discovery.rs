//! Discovery: resolves a name as kubectl accepts it (`pods`, `po`, `deployments.apps`,
//! `Deployment`) into an `ApiResource`, with blocking GETs of the discovery documents.

use std::sync::Arc;

use serde::Deserialize;

use crate::error::{Error, Result};
use crate::resource::ApiResource;
use crate::wire::client::{Client, Http};
use crate::wire::decode;
use crate::wire::request::{self, ACCEPT_JSON};

/// `APIGroupList` (`GET /apis`): the named groups and their preferred versions.
#[derive(Deserialize)]
struct GroupList {
    #[serde(default)]
    groups: Vec<Group>,
}

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

/// Levenshtein distance, one row at a time.
fn edit_distance(a: &[u8], b: &[u8]) -> usize {
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = if ca == cb { diagonal } else { 1 + diagonal.min(above).min(row[j]) };
            diagonal = above;
        }
    }
    row[b.len()]
}

impl Client {
    /// Finds the resource type `name` stands for, as `kubectl get <name>` would: a plural
    /// (`pods`), singular (`pod`), short name (`po`, `deploy`), kind (`Deployment`), any of
    /// those qualified by a group (`deployments.apps`) or a version and group
    /// (`deployments.v1.apps`), or a custom resource's plural.
    ///
    /// Blocks for a few GETs of the discovery documents: `/api/v1`, `/apis` and the preferred
    /// version of each group it needs (all of them when `name` names no group). The core group
    /// wins over named groups, and a plural match over a short name or kind. Nothing is cached:
    /// call it once and keep the [`ApiResource`].
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
        let get = |path: &str| -> Result<Vec<u8>> { http.get_bytes(path, &context, ACCEPT_JSON) };
        let parse = |bytes: &[u8]| -> Result<ResourceList> {
            serde_json::from_slice(bytes)
                .map_err(|e| Error::Decode(Box::new(decode::decode_error(&context, None, bytes, e.to_string()))))
        };
        let readings = readings(name);
        // (group, version) in the order they are searched: the core group first.
        let mut versions: Vec<(String, String)> = Vec::new();
        if readings.iter().any(|w| w.group.is_none()) {
            versions.push((String::new(), "v1".to_owned()));
        }
        let groups: GroupList = {
            let bytes = get(request::GROUPS_PATH)?;
            serde_json::from_slice(&bytes)
                .map_err(|e| Error::Decode(Box::new(decode::decode_error(&context, None, &bytes, e.to_string()))))?
        };
        for g in &groups.groups {
            let named = readings.iter().filter(|w| w.group == Some(g.name.as_str())).collect::<Vec<_>>();
            let any_group = readings.iter().any(|w| w.group.is_none());
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
            let list = match get(&request::group_version_path(group, version)) {
                Ok(bytes) => parse(&bytes)?,
                // A group version that vanished (or an unavailable aggregated API): skip it.
                Err(e) if e.status() == Some(404) || e.status() == Some(503) => {
                    log::debug!("{context}: {e}; skipping {group}/{version}");
                    continue;
                }
                Err(e) => return Err(e),
            };
            for r in list.resources.iter().filter(|r| !r.name.contains('/')) {
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
                for r in &list.resources {
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
    fn close_names_are_suggested_and_far_ones_are_not() {
        assert!(is_close("pods", "pod"));
        assert!(is_close("deployments", "deploymnets"));
        assert!(is_close("foo", "foos"));
        assert!(is_close("configmaps", "configmap"));
        assert!(!is_close("pods", "services"));
        assert!(!is_close("po", "x"));
        assert_eq!(edit_distance(b"kitten", b"sitting"), 3);
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
