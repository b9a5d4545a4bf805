//! The declared minimum Rust version (`rust-version` in Cargo.toml) is kept: CI has one toolchain
//! (the newest), so this test checks what that toolchain can check. The crate's own code is held
//! to it by clippy's `incompatible_msrv` lint (on by default, run by `.ci/run` with `-D warnings`);
//! this test holds every locked dependency to it: none may declare a newer `rust-version`.

use std::process::Command;

fn version(v: &str) -> Option<(u64, u64)> {
    let mut parts = v.split('.').map(|p| p.parse::<u64>().ok());
    Some((parts.next()??, parts.next().flatten().unwrap_or(0)))
}

#[test]
fn no_locked_dependency_needs_a_newer_rust_than_the_declared_minimum() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let out = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--locked"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo metadata runs");
    assert!(out.status.success(), "cargo metadata: {}", String::from_utf8_lossy(&out.stderr));
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).expect("cargo metadata prints JSON");
    let packages = meta["packages"].as_array().expect("packages");
    let ours = packages.iter().find(|p| p["name"] == "kube-watcher").expect("this crate");
    let declared = ours["rust_version"].as_str().expect("Cargo.toml declares rust-version");
    let msrv = version(declared).expect("a version like 1.88");
    let newer: Vec<String> = packages
        .iter()
        .filter_map(|p| {
            let rv = p["rust_version"].as_str()?;
            (version(rv)? > msrv).then(|| format!("{} {} needs Rust {rv}", p["name"], p["version"]))
        })
        .collect();
    assert!(newer.is_empty(), "declared rust-version {declared}, but: {newer:?}");
}
