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
mod metadata;
mod parallel;
mod protobuf;
mod reliability;
mod relist;
mod scenarios;
mod shutdown;
mod undecodable;
mod watch;
mod watch_object;

/// A file in this directory that no `mod` line names would never be compiled, so its tests
/// would silently never run.
#[test]
fn every_file_here_is_a_module() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests").join("integration");
    let main = std::fs::read_to_string(dir.join("main.rs")).unwrap();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        if let Some(module) = name.strip_suffix(".rs").filter(|m| *m != "main") {
            assert!(
                main.contains(&format!("\nmod {module};\n")),
                "tests/integration/{name} has no `mod {module};` in main.rs"
            );
        }
    }
}
