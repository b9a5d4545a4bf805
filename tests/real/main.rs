//! The suite against a real kube-apiserver on etcd, started by `scripts/apiserver.sh` (which
//! builds both from their Go modules in `testbed/`). Run it with
//! `scripts/apiserver.sh test`: the script starts the bed, runs `cargo test --test real` with
//! `KUBE_WATCHER_TESTBED` pointing at it, and stops it.
//!
//! A plain `cargo test` (which has no Go and no bed) does not build this suite (`test = false`
//! in Cargo.toml). Run by name without `KUBE_WATCHER_TESTBED`, every test here says it skipped
//! and passes; `.ci/run` runs the script, and prints one line when the machine has no Go.
//!
//! Each test works in namespaces of its own and ends by comparing what the library holds with a
//! fresh list from the server (`common::same_as_server`). Tests that stop or restart a server
//! process take the bed for themselves (`Bed::exclusive`); the others share it (`Bed::shared`).
//! Every request the library sends is recorded by its shape (`shapes.rs`): one of a shape that
//! `shapes.txt` does not list fails the test that sent it, and every listed shape is replayed
//! against the fake and the real server. `Bed::minor` says which Kubernetes minor runs, for the
//! tests whose answer depends on it (`minors.rs`).
#![cfg(feature = "testing")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../common/mod.rs"]
#[allow(unused)]
mod common;

mod bed;
mod proxy;

mod auth;
mod differential;
mod faults;
mod groups;
mod kubectl;
mod lists;
mod minors;
mod outage;
mod promises;
mod resources;
mod scale_out;
mod shapes;
mod watches;
mod writes;

/// Every file here is compiled (a file without a `mod` line above would silently not run).
#[test]
fn every_file_here_is_a_module() {
    common::modules::every_file_is_a_module("real");
}
