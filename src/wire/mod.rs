//! The wire: HTTP requests to the API server and the bytes that come back.
//!
//! Owns URL and query building ([`request`]), the client and its resource
//! types ([`client`], [`api`]), the blocking HTTP transport and its bounded bodies ([`http`],
//! watch streams: [`stream`]), decoding of list bodies, watch lines and `Status` errors ([`decode`], with the
//! strict JSON check in [`syntax`]) and API discovery ([`discovery`]). It knows nothing of
//! stores, consumers or the state machine: it imports only [`crate::auth`] (to connect) and the
//! crate's vocabulary (errors, config, resources). Nothing here decides what to request next.

pub(crate) mod api;
pub(crate) mod client;
pub(crate) mod decode;
pub(crate) mod discovery;
pub(crate) mod http;
pub(crate) mod protobuf;
pub(crate) mod request;
pub(crate) mod skip;
pub(crate) mod stream;
pub(crate) mod syntax;
