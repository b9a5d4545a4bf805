#!/usr/bin/env bash
# Fuzzes the watch-line decoder, the list decoder, the protobuf decoder and the kubeconfig parser, each for a bounded
# time (FUZZ_SECONDS, default 60 s per target).
#
# cargo-fuzz needs a nightly toolchain (libFuzzer, sanitizer flags). It is installed with
# `cargo install cargo-fuzz` when missing. WITHOUT A NIGHTLY TOOLCHAIN this script does not
# fuzz with libFuzzer: it falls back to the stable randomized harness in tests/integration/decode.rs
# (seeded mutations of seeds/* and of its own inputs, FUZZ_ITERATIONS per target, release build).
# Both paths assert that every decoding path gives the same verdict and the same value.
#
# A crash leaves its input in fuzz/artifacts/<target>/; turn each into a regression test in
# tests/integration/decode.rs (see the existing `regression_*` tests) before fixing it.
set -euo pipefail
cd "$(dirname "$0")"
seconds="${FUZZ_SECONDS:-60}"
targets=(watch_line list protobuf kubeconfig)

if rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
    if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
        echo "installing cargo-fuzz (crates.io)" >&2
        cargo install cargo-fuzz --locked
    fi
    status=0
    for t in "${targets[@]}"; do
        mkdir -p "corpus/$t"
        echo "== fuzzing $t for ${seconds}s" >&2
        # -rss_limit_mb: a decoder that buffers unboundedly is a crash too.
        if ! cargo +nightly fuzz run -j1 "$t" "corpus/$t" "seeds/$t" -- \
            -max_total_time="$seconds" -rss_limit_mb=1024 -max_len=65536 -timeout=10; then
            status=1
            echo "!! $t found a crash: see fuzz/artifacts/$t/" >&2
        fi
    done
    exit "$status"
else
    echo "no nightly toolchain: cargo-fuzz cannot run here." >&2
    echo "FALLBACK: stable randomized decoder tests (tests/integration/decode.rs), not libFuzzer." >&2
    cd ..
    KUBE_WATCHER_FUZZ_ITERATIONS="${FUZZ_ITERATIONS:-200000}" \
        cargo test --release --features fuzzing,testing --test integration -- --include-ignored decode::randomized
fi
