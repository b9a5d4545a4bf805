//! The fake server's public vocabulary: faults and what they match, server behaviours to
//! choose, resource types, the request log's entries, and its errors.

use std::time::Duration;

/// Which requests a scripted [`Fault`] applies to.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Match {
    /// Any request (that the fault can apply to; watch-only faults skip non-watch requests).
    Any,
    /// A collection GET that is not a watch.
    List,
    /// A watch (`?watch=1|true` or a legacy `/watch/` path).
    Watch,
    /// A GET of a single object.
    Get,
    /// Any request whose path (without the query) equals this string.
    Path(String),
    /// A request with this method (`"PUT"`, `"POST"`, `"DELETE"`, ...) whose path (without the
    /// query) equals this string: a server that refuses writes but answers reads (an etcd out
    /// of space, a webhook down), or one client's writes among others' reads of one object.
    Method {
        /// The HTTP method, upper case.
        method: String,
        /// The path, as for [`Match::Path`].
        path: String,
    },
}

/// A scripted failure for the next request matching a [`Match`] (see
/// [`FakeApiServer::push_fault`](super::FakeApiServer::push_fault)).
///
/// Faults that only make sense on a watch (`InStreamError`, `CloseAfter`, `ResetAfter`,
/// `MalformedLine`, `Line`, `OversizedLine`, `EndlessLine`, `PauseInLine`, `DropEvents`) are only
/// taken by watch requests;
/// `TruncateBody` is only taken by non-watch GETs, `EndlessList` and `GzipBomb` only by lists.
/// All others apply to any request. `MalformedLine`, `Line`, `OversizedLine` and `EndlessLine`
/// write JSON text: a watch that takes one answers JSON, even to a client that asked for
/// protobuf.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Fault {
    /// An HTTP error with a JSON `Status` body (and a `Retry-After` header when set).
    Status {
        /// HTTP status code, also the Status `code`.
        code: u16,
        /// Status `reason`, e.g. `Expired`.
        reason: String,
        /// Status `message`.
        message: String,
        /// Seconds for `Retry-After` and `details.retryAfterSeconds`.
        retry_after: Option<u32>,
    },
    /// An HTTP error with a plain-text (or HTML) body, like overload protection or a proxy.
    PlainText {
        /// HTTP status code.
        code: u16,
        /// The body, sent as is; `text/html` if it starts with `<`, else `text/plain`.
        body: String,
        /// Seconds for `Retry-After`.
        retry_after: Option<u32>,
    },
    /// 504 "Too large resource version" with the `ResourceVersionTooLarge` cause and
    /// `Retry-After: 1`.
    TooLargeResourceVersion,
    /// Watch: 200, then one `ERROR` event carrying this Status, then a clean end.
    InStreamError {
        /// Status `code`.
        code: u16,
        /// Status `reason`.
        reason: String,
        /// Status `message`.
        message: String,
    },
    /// Watch: send this many events, then end cleanly (terminating chunk).
    CloseAfter {
        /// Events to send first.
        events: usize,
    },
    /// Watch: send this many events, then a partial chunk, then reset the TCP connection.
    ResetAfter {
        /// Events to send first.
        events: usize,
    },
    /// List or GET: send the headers and part of the body, then drop the connection.
    TruncateBody,
    /// Send `200` headers (chunked) and then nothing until the client leaves or the server
    /// shuts down.
    Stall,
    /// Read the request and send nothing at all until the client leaves or shutdown.
    StallBeforeHeaders,
    /// Watch: one line that is not JSON (`<html>oops</html>`), then the stream goes on.
    MalformedLine,
    /// Watch: this line (a newline is added), then the stream goes on: an event the server's
    /// store cannot hold, such as an object without a name.
    Line(String),
    /// Watch: one line of this many bytes with no newline, then a clean end.
    OversizedLine {
        /// Length of the line.
        bytes: usize,
    },
    /// Wait this long before handling the request normally.
    DelayHeaders(Duration),
    /// Watch: 200, then one line that never ends (no newline), until the client leaves.
    EndlessLine,
    /// Watch: after `after` whole lines (events and bookmarks), the next line is cut in the
    /// middle: its first half is sent, then nothing until [`FakeApiServer::resume_lines`](super::FakeApiServer::resume_lines) (or
    /// the client leaves, or shutdown), then the rest, and the stream goes on. A slow or
    /// congested connection can pause a client's read anywhere; this pauses it where a line
    /// is half read. [`FakeApiServer::paused_lines`](super::FakeApiServer::paused_lines) tells when the pause has begun.
    PauseInLine {
        /// Whole lines to send first.
        after: usize,
    },
    /// Watch: the next `events` object events of this watch are silently lost (later events
    /// still flow and move the client past them), as a buggy proxy or server could do: the drift that
    /// [`Config::drift_check`](crate::Config::drift_check) exists to find.
    DropEvents {
        /// How many `ADDED`/`MODIFIED`/`DELETED` events to lose.
        events: usize,
    },
    /// List: 200, then an `items` array that never ends (the same small object over and over),
    /// until the client leaves.
    EndlessList,
    /// List: a gzip body (sent even if the client did not offer gzip) that inflates about
    /// 1000:1 to `bytes`: a list whose first item's name never ends.
    GzipBomb {
        /// Size once inflated.
        bytes: u64,
    },
}

/// How a `410 Gone` for a too-old watch `resourceVersion` is reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Watch410 {
    /// 200, then an `ERROR` event with code 410 (what kube-apiserver does).
    #[default]
    InStream,
    /// A plain HTTP 410 response (older or non-standard servers).
    Http,
}

/// How the server treats streaming-list requests (`sendInitialEvents=true`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum StreamingLists {
    /// Initial `ADDED` events, then the annotated bookmark, then live events.
    #[default]
    Supported,
    /// 422 Invalid, like a 1.27–1.31 (or 1.33) server with the feature gate off.
    Rejected,
    /// The parameters are ignored: a legacy watch (like servers up to 1.18 and many fakes).
    Ignored,
    /// 200, then an in-stream `ERROR` 500, like a server whose etcd is too old.
    InStreamError,
}

/// How watch events are mapped onto HTTP chunks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Chunking {
    /// One chunk per event.
    #[default]
    PerEvent,
    /// All events that are ready at once share one chunk.
    Coalesce,
    /// Every event is split over three chunks, mid-object.
    Split,
    /// Every event is followed, in its chunk, by a blank keep-alive line, as some proxies and
    /// servers send: `\n` after one event, `\r\n` after the next, and so on.
    BlankLines,
}

/// A resource type the fake serves.
///
/// Built-in types ([`ResourceType::of`]) are listed without per-item `kind`/`apiVersion`;
/// custom types ([`ResourceType::new`]) are listed with them, like CRDs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceType {
    /// API group; empty for the core group.
    pub group: String,
    /// API version, e.g. `v1`.
    pub version: String,
    /// Lowercase plural resource name used in paths, e.g. `configmaps`.
    pub plural: String,
    /// Kind, e.g. `ConfigMap`.
    pub kind: String,
    /// Whether objects live in namespaces.
    pub namespaced: bool,
    /// Kind of lists; `None` means kind + `List`.
    pub list_kind: Option<String>,
    /// Singular name for discovery; `None` means the lowercase kind.
    pub singular: Option<String>,
    /// Short names for discovery (`po`, `cm`, …).
    pub short_names: Vec<String>,
    /// Field paths usable in field selectors besides `metadata.name`/`metadata.namespace`
    /// (dotted paths into the object, e.g. `status.phase`).
    pub selectable_fields: Vec<String>,
    /// Whether this is a built-in type (list items then lack `kind`/`apiVersion`).
    pub built_in: bool,
}

impl ResourceType {
    /// A custom (CRD-like) type.
    #[must_use]
    pub fn new(group: &str, version: &str, plural: &str, kind: &str, namespaced: bool) -> Self {
        ResourceType {
            group: group.to_string(),
            version: version.to_string(),
            plural: plural.to_string(),
            kind: kind.to_string(),
            namespaced,
            list_kind: None,
            singular: None,
            short_names: Vec::new(),
            selectable_fields: Vec::new(),
            built_in: false,
        }
    }

    /// The type of a typed k8s-openapi resource, with well-known short names and selectable
    /// fields filled in.
    #[must_use]
    pub fn of<K: k8s_openapi::Resource>() -> Self {
        // The scope is a marker type; its name is the only way to read it without `'static`.
        let namespaced = std::any::type_name::<K::Scope>().ends_with("NamespaceResourceScope");
        let mut rt = ResourceType::new(K::GROUP, K::VERSION, K::URL_PATH_SEGMENT, K::KIND, namespaced);
        rt.built_in = true;
        well_known(&mut rt);
        rt
    }

    /// Sets the list kind.
    #[must_use]
    pub fn with_list_kind(mut self, list_kind: &str) -> Self {
        self.list_kind = Some(list_kind.to_string());
        self
    }

    /// Sets the short names reported by discovery.
    #[must_use]
    pub fn with_short_names(mut self, names: &[&str]) -> Self {
        self.short_names = names.iter().map(|s| s.to_string()).collect();
        self
    }

    /// Adds field paths usable in field selectors.
    #[must_use]
    pub fn with_selectable_fields(mut self, fields: &[&str]) -> Self {
        self.selectable_fields.extend(fields.iter().map(|s| s.to_string()));
        self
    }

    /// `group/version`, or just `version` for the core group.
    #[must_use]
    pub fn api_version(&self) -> String {
        if self.group.is_empty() { self.version.clone() } else { format!("{}/{}", self.group, self.version) }
    }

    /// The name the real server uses in messages: `plural` or `plural.group`.
    #[must_use]
    pub fn resource_name(&self) -> String {
        if self.group.is_empty() { self.plural.clone() } else { format!("{}.{}", self.plural, self.group) }
    }

    pub(crate) fn effective_list_kind(&self) -> String {
        self.list_kind.clone().unwrap_or_else(|| format!("{}List", self.kind))
    }
}

/// One request as the fake received it, with secrets redacted.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RecordedRequest {
    /// HTTP method.
    pub method: String,
    /// Path without the query, as sent (not percent-decoded).
    pub path: String,
    /// Decoded query pairs in order.
    pub query: Vec<(String, String)>,
    /// The raw query string (without `?`).
    pub raw_query: String,
    /// Headers in order, names lowercased; `Authorization`, `Proxy-Authorization` and `Cookie`
    /// values are `<redacted>`.
    pub headers: Vec<(String, String)>,
    /// Whether the request was a watch.
    pub watch: bool,
    /// The authenticated identity (token user or client-certificate common name), if any.
    pub user: Option<String>,
}

impl RecordedRequest {
    /// The first value of a query parameter.
    #[must_use]
    pub fn query_param(&self, key: &str) -> Option<&str> {
        self.query.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    /// The first value of a header (name case-insensitive).
    #[must_use]
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
}

/// Errors of the typed and untyped helpers ([`FakeApiServer::create`](super::FakeApiServer::create) and friends).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FakeError {
    /// The object does not exist.
    #[error("{resource} {name:?} not found")]
    NotFound {
        /// `plural` or `plural.group`.
        resource: String,
        /// Object name.
        name: String,
    },
    /// An object with that name exists already.
    #[error("{resource} {name:?} already exists")]
    AlreadyExists {
        /// `plural` or `plural.group`.
        resource: String,
        /// Object name.
        name: String,
    },
    /// The sent `metadata.resourceVersion` (or uid) is not the stored one.
    #[error("conflict on {resource} {name:?}: the object has been modified")]
    Conflict {
        /// `plural` or `plural.group`.
        resource: String,
        /// Object name.
        name: String,
    },
    /// The object is not acceptable.
    #[error("invalid object: {message}")]
    Invalid {
        /// What is wrong.
        message: String,
    },
    /// The object could not be converted to or from JSON.
    #[error("convert object: {message}")]
    Serde {
        /// serde_json's message.
        message: String,
    },
}

impl FakeError {
    /// The HTTP status code the real server would answer with.
    #[must_use]
    pub fn code(&self) -> u16 {
        match self {
            FakeError::NotFound { .. } => 404,
            FakeError::AlreadyExists { .. } | FakeError::Conflict { .. } => 409,
            FakeError::Invalid { .. } => 422,
            FakeError::Serde { .. } => 400,
        }
    }
}

/// Fills in short names, singular names and selectable fields of well-known built-in types.
fn well_known(rt: &mut ResourceType) {
    let (short, fields): (&[&str], &[&str]) = match (rt.group.as_str(), rt.plural.as_str()) {
        ("", "pods") => (
            &["po"],
            &[
                "spec.nodeName",
                "spec.restartPolicy",
                "spec.schedulerName",
                "spec.serviceAccountName",
                "spec.hostNetwork",
                "status.phase",
                "status.podIP",
                "status.nominatedNodeName",
            ],
        ),
        ("", "configmaps") => (&["cm"], &[]),
        ("", "secrets") => (&[], &["type"]),
        ("", "services") => (&["svc"], &[]),
        ("", "namespaces") => (&["ns"], &["status.phase"]),
        ("", "nodes") => (&["no"], &["spec.unschedulable"]),
        ("", "events") => (
            &["ev"],
            &[
                "involvedObject.kind",
                "involvedObject.namespace",
                "involvedObject.name",
                "involvedObject.uid",
                "involvedObject.apiVersion",
                "involvedObject.resourceVersion",
                "involvedObject.fieldPath",
                "reason",
                "reportingComponent",
                "source",
                "type",
            ],
        ),
        ("", "serviceaccounts") => (&["sa"], &[]),
        ("", "endpoints") => (&["ep"], &[]),
        ("", "persistentvolumeclaims") => (&["pvc"], &[]),
        ("", "persistentvolumes") => (&["pv"], &[]),
        ("apps", "deployments") => (&["deploy"], &[]),
        ("apps", "replicasets") => (&["rs"], &[]),
        ("apps", "statefulsets") => (&["sts"], &[]),
        ("apps", "daemonsets") => (&["ds"], &[]),
        ("batch", "cronjobs") => (&["cj"], &[]),
        ("apiextensions.k8s.io", "customresourcedefinitions") => (&["crd", "crds"], &[]),
        _ => (&[], &[]),
    };
    if rt.short_names.is_empty() {
        rt.short_names = short.iter().map(|s| s.to_string()).collect();
    }
    for f in fields {
        if !rt.selectable_fields.iter().any(|x| x == f) {
            rt.selectable_fields.push(f.to_string());
        }
    }
}
