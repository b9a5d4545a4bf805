//! For the test binaries made of a folder of modules (`tests/integration/`, `tests/fake_server/`).

/// Checks that every file in `tests/<folder>/` is named by a `mod` line of its `main.rs`: a file
/// that none names would never be compiled, so its tests would silently never run.
pub fn every_file_is_a_module(folder: &str) {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests").join(folder);
    let main = std::fs::read_to_string(dir.join("main.rs")).unwrap();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        if let Some(module) = name.strip_suffix(".rs").filter(|m| *m != "main") {
            assert!(
                main.contains(&format!("\nmod {module};\n")),
                "tests/{folder}/{name} has no `mod {module};` in main.rs"
            );
        }
    }
}
