//! The integration tests against the fake API server, one module per area, in one test binary.
//!
//! Every test binary links the whole crate and instantiates its generic code (watchers, stores,
//! decoders for each object type) again; sixteen binaries cost a clean `cargo test` more time to
//! compile and link than their tests take to run. A new area is a new file here with a `mod`
//! line below (`every_file_here_is_a_module` checks); a test that needs a process of its own
//! (a global allocator as in `tests/decode.rs`, its own example binaries as in
//! `tests/examples.rs`) is a file directly in `tests/`. Run one area with
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

/// Every file here is compiled (see `every_file_is_a_module`).
#[test]
fn every_file_here_is_a_module() {
    common::modules::every_file_is_a_module("integration");
}
