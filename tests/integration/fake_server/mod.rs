//! The fake API server's own tests: does `kube_watcher::testing` speak the Kubernetes protocol?
//!
//! The other areas of this binary check the client against the fake; these check the fake
//! itself, so that a passing client test means something. `protocol.rs` drives it over raw
//! HTTP/1.1 (status codes, headers, chunking, paging, watches, faults); `kubectl.rs` points the
//! real `kubectl`, a client-go client, at it. Run them with
//! `cargo test --test integration fake_server::`, one area with `fake_server::kubectl::`.

mod kubectl;
mod protocol;
