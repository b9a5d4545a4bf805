//! For the test binaries made of a folder of modules (`tests/integration/`, `tests/real/`).

use std::path::Path;

/// Checks that every file in `tests/<folder>/` is named by a `mod` line of its `main.rs`, and
/// every file in a folder below it by a `mod` line of that folder's `mod.rs` (which the folder
/// must have): a file that none names would never be compiled, so its tests would silently
/// never run.
pub fn every_file_is_a_module(folder: &str) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests").join(folder);
    check(&dir, "main.rs", &format!("tests/{folder}"));
}

fn check(dir: &Path, root: &str, shown: &str) {
    let parent = std::fs::read_to_string(dir.join(root))
        .unwrap_or_else(|e| panic!("{shown}/{root}: {e} (a folder of modules needs one)"));
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().into_string().unwrap();
        let module = if entry.file_type().unwrap().is_dir() {
            check(&entry.path(), "mod.rs", &format!("{shown}/{name}"));
            name.as_str()
        } else if let Some(module) = name.strip_suffix(".rs").filter(|m| *m != root.trim_end_matches(".rs")) {
            module
        } else {
            continue;
        };
        assert!(parent.contains(&format!("\nmod {module};\n")), "{shown}/{name} has no `mod {module};` in {root}");
    }
}
