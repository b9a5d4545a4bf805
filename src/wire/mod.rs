//! The wire: HTTP requests to the API server and the bytes that come back.
//!
//! Owns URL and query building ([`request`]), the client and its resource
//! types ([`client`], [`api`]), the blocking HTTP transport and its bounded bodies ([`http`],
//! watch streams: [`stream`]) and API discovery ([`discovery`]); what the bytes mean is the
//! codec's ([`crate::codec`]). It knows nothing of stores, consumers or the state machine: it
//! imports only [`crate::auth`] (to connect), the codec and the crate's vocabulary (errors,
//! config, resources). Nothing here decides what to request next.

pub(crate) mod api;
pub(crate) mod client;
pub(crate) mod discovery;
pub(crate) mod http;
pub(crate) mod request;
pub(crate) mod stream;
