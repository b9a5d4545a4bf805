//! The fake API server's own tests: does `kube_watcher::testing` speak the Kubernetes protocol?
//!
//! The integration tests (`tests/integration/`) check the client against the fake; these check
//! the fake itself, so that a passing client test means something. `protocol.rs` drives it over
//! raw HTTP/1.1 (status codes, headers, chunking, paging, watches, faults); `kubectl.rs` points
//! the real `kubectl`, a client-go client, at it. They need no watcher, so this binary compiles
//! little of the crate's generic code. Run one area with `cargo test --test fake_server kubectl::`.
#![cfg(feature = "testing")]

#[path = "../common/modules.rs"]
mod modules;

mod kubectl;
mod protocol;

/// Every file here is compiled (see `every_file_is_a_module`).
#[test]
fn every_file_here_is_a_module() {
    modules::every_file_is_a_module("fake_server");
}
