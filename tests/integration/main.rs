//! Every test of `cargo test`, one module per area, in one test binary (`tests/real`, against a
//! real kube-apiserver, is the only other one; `tests/oracle` is a package of its own).
//!
//! Every test binary links the whole crate and instantiates its generic code (watchers, stores,
//! decoders for each object type) again, and `cargo test` runs binaries one after another: the
//! CPU-bound tests of one never overlapped with the waiting of another. One binary builds once
//! and runs them all side by side (`RUST_TEST_THREADS` in `.cargo/config.toml`). A new area is
//! a new file here with a `mod` line below, a folder of them a `mod.rs` with its own
//! (`every_file_here_is_a_module` checks). Tests share this process: one that needs a process of
//! its own re-runs itself in one (`decode::alone`, for the memory bounds counted by its global
//! allocator), and nothing here sets environment variables. Run one area with
//! `cargo test --test integration watch::`.
#![cfg(feature = "testing")]

#[path = "../common/mod.rs"]
mod common;

mod auth;
mod chaos;
mod compact;
mod delivery;
mod dynamic;
mod features;
mod freshness;
mod index;
mod lease;
mod metadata;
mod outage;
mod parallel;
mod projection;
mod protobuf;
mod reliability;
mod relist;
mod scenarios;
mod shard_group;
mod sharding;
mod shutdown;
mod skip;
mod undecodable;
mod watch;
mod watch_object;
mod writes;

// The crate as a whole: its layers, its examples and documents, its declared Rust version.
mod architecture;
mod examples;
mod msrv;
mod readme_testing;

// Hostile input and randomized models: the tests that compute rather than wait.
#[cfg(feature = "fuzzing")]
mod decode;
mod model;

// The fake API server's own tests.
mod fake_server;

/// Every file here is compiled (see `every_file_is_a_module`).
#[test]
fn every_file_here_is_a_module() {
    common::modules::every_file_is_a_module("integration");
}
