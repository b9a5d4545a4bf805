#!/usr/bin/env bash
# Builds kube-watcher as a user's new project gets it: a dependency of a fresh crate, with no
# lockfile, so Cargo picks the newest version of every dependency that Cargo.toml allows (not the
# versions Cargo.lock pins for this repository's own builds), and with warnings denied, so that a
# deprecation in a newer dependency release fails here before it prints in a user's build.
# Checks the default features and every feature (`testing` is what a user's tests enable).
# Run by .ci/run; needs the package registry.
#
#   scripts/fresh-dependency.sh          in target/fresh-dependency/ (its own target directory)
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
dir="$repo/target/fresh-dependency"
mkdir -p "$dir/src"
cat > "$dir/Cargo.toml" <<TOML
[package]
name = "fresh-dependency"
version = "0.1.0"
edition = "2024"
publish = false

[dependencies]
kube-watcher = { path = "$repo" }
# The application picks its Kubernetes version, as README.md shows.
k8s-openapi = { version = "0.29", features = ["latest"] }

[features]
all = ["kube-watcher/testing", "kube-watcher/fuzzing"]

# Not a member of the repository's workspace.
[workspace]
TOML
echo 'fn main() {}' > "$dir/src/main.rs"
cd "$dir"
# No lockfile: resolve afresh every run, to the newest compatible releases.
rm -f Cargo.lock
cargo generate-lockfile --quiet
grep -A1 -E '^name = "(rustls|ureq|serde_json|k8s-openapi|crossbeam-channel|simd-json)"$' Cargo.lock \
    | paste - - - | sed -E 's/name = "([^"]+)"\s+version = "([^"]+)".*/\1 \2/' | tr '\n' ' '
echo
# -D warnings reaches only path dependencies (Cargo caps the lints of registry crates): the library.
export RUSTFLAGS="-D warnings"
cargo check --quiet
cargo check --quiet --features all
echo "fresh-dependency.sh: kube-watcher builds without warnings against the newest compatible releases"
