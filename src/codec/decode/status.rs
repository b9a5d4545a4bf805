//! `Status` bodies and HTTP errors → [`ApiError`].

use std::time::Duration;

use serde::Deserialize;

use crate::error::{ApiError, snippet};

/// A Kubernetes `Status`, read leniently: any field may be missing.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub(crate) struct StatusBody {
    pub(crate) code: Option<u16>,
    pub(crate) status: Option<String>,
    pub(crate) reason: Option<String>,
    pub(crate) message: Option<String>,
    pub(crate) details: Option<StatusDetails>,
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub(crate) struct StatusDetails {
    #[serde(default)]
    pub(crate) causes: Vec<StatusCause>,
    pub(crate) retry_after_seconds: Option<u32>,
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
pub(crate) struct StatusCause {
    pub(crate) reason: Option<String>,
    pub(crate) message: Option<String>,
}

impl StatusBody {
    /// "Too large resource version" in any of its three historical forms (docs/protocol.md §3.4).
    fn too_large(&self) -> bool {
        const TEXT: &str = "Too large resource version";
        let causes = self.details.as_ref().map(|d| d.causes.as_slice()).unwrap_or_default();
        causes.iter().any(|c| {
            c.reason.as_deref() == Some("ResourceVersionTooLarge")
                || c.message.as_deref().is_some_and(|m| m.contains(TEXT))
        }) || self.message.as_deref().is_some_and(|m| m.contains(TEXT))
    }

    /// The error for an in-stream `ERROR` event.
    pub(crate) fn into_api_error(self, context: &str) -> ApiError {
        let code = self.code.unwrap_or(500);
        to_api_error(context, code, Some(self), None, true)
    }
}

/// Classifies an HTTP error answer: by status code first, refined with the body when it is a
/// `Status` (`status`, the body read as one, counts even without `kind`), else quoting the
/// body's first bytes.
pub(super) fn http_error(
    context: &str,
    code: u16,
    status: Option<StatusBody>,
    body: &[u8],
    retry_after: Option<Duration>,
) -> ApiError {
    let status = status.filter(|s| s.code.is_some() || s.status.is_some());
    match status {
        Some(s) => to_api_error(context, code, Some(s), retry_after, false),
        None => {
            let mut e = to_api_error(context, code, None, retry_after, false);
            let text = String::from_utf8_lossy(body);
            let text = text.trim();
            if !text.is_empty() {
                e.message = snippet(text.as_bytes());
            }
            e
        }
    }
}

fn to_api_error(
    context: &str,
    code: u16,
    status: Option<StatusBody>,
    retry_after: Option<Duration>,
    in_stream: bool,
) -> ApiError {
    let status = status.unwrap_or_default();
    let too_large = status.too_large();
    let retry_after = retry_after.or_else(|| {
        let secs = status.details.as_ref()?.retry_after_seconds?;
        Some(Duration::from_secs(secs.into()))
    });
    ApiError {
        context: context.to_owned(),
        code,
        reason: status.reason.filter(|r| !r.is_empty()).unwrap_or_else(|| reason_phrase(code).to_owned()),
        message: status.message.unwrap_or_default(),
        retry_after,
        too_large_resource_version: too_large,
        in_stream,
    }
}

fn reason_phrase(code: u16) -> &'static str {
    match code {
        400 => "BadRequest",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        405 => "MethodNotAllowed",
        406 => "NotAcceptable",
        409 => "Conflict",
        410 => "Gone",
        422 => "Invalid",
        429 => "TooManyRequests",
        500 => "InternalError",
        502 => "BadGateway",
        503 => "ServiceUnavailable",
        504 => "Timeout",
        _ => "Unknown",
    }
}
