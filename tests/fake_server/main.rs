//! The fake API server's own tests: does `kube_watcher::testing` speak the Kubernetes protocol?
//!
//! The integration tests (`tests/integration/`) check the client against the fake; these check
//! the fake itself, so that a passing client test means something. `protocol.rs` drives it over
//! raw HTTP/1.1 (status codes, headers, chunking, paging, watches, faults); `kubectl.rs` points
//! the real `kubectl`, a client-go client, at it. They need no watcher, so this binary compiles
//! little of the crate's generic code. Run one area with `cargo test --test fake_server kubectl::`.
#![cfg(feature = "testing")]

mod kubectl;
mod protocol;

/// A file in this directory that no `mod` line names would never be compiled, so its tests
/// would silently never run.
#[test]
fn every_file_here_is_a_module() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests").join("fake_server");
    let main = std::fs::read_to_string(dir.join("main.rs")).unwrap();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        if let Some(module) = name.strip_suffix(".rs").filter(|m| *m != "main") {
            assert!(
                main.contains(&format!("\nmod {module};\n")),
                "tests/fake_server/{name} has no `mod {module};` in main.rs"
            );
        }
    }
}
