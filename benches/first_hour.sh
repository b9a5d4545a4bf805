#!/usr/bin/env bash
# A newcomer's first hour, timed: in a fresh clone with an empty target directory, how long the
# README's demo takes to print its first event, and how long `cargo test` takes, build included.
#
#   benches/first_hour.sh [ROUNDS]      (default 3)
#
# Each round clones this checkout's HEAD into a temporary directory and runs, each with a
# target directory of its own (both cold):
#   demo:  `cargo run --example kwatch --features testing -- --demo`, until the first event line
#          (the line after kwatch's header), then stopped;
#   tests: `cargo test`, to its end (a failure fails the script).
# Crates come from cargo's registry cache (~/.cargo/registry), as they would on a second clone:
# download time is not counted. Prints one line per round and per step with the load average
# before it (the goal is a quiet machine: say the load beside the numbers), then the medians.
# CONTRIBUTING.md, "The first hour", has the table.
set -euo pipefail

rounds="${1:-3}"
repo="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d "${TMPDIR:-/tmp}/kw-first-hour.XXXXXX")"
trap 'rm -rf "$work"' EXIT

now() { date +%s.%N; }
load() { cut -d' ' -f1-3 /proc/loadavg; }
since() { python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$1" "$(now)"; }
median() { python3 -c "import statistics, sys; print(f'{statistics.median(float(x) for x in sys.argv[1:]):.1f}')" "$@"; }

demo_times=()
test_times=()
for round in $(seq 1 "$rounds"); do
    clone="$work/round-$round"
    git clone -q "$repo" "$clone"

    echo "round $round: demo (load $(load))"
    # Created before the demo starts, so that the wait below never reads a file not there yet.
    : > "$clone/demo.out"
    start=$(now)
    (cd "$clone" && CARGO_TARGET_DIR="$clone/target-demo" exec cargo run -q --example kwatch --features testing -- --demo \
        > "$clone/demo.out" 2> "$clone/demo.err") &
    demo=$!
    # The header, then the first event.
    until [ "$(wc -l < "$clone/demo.out")" -ge 2 ]; do
        if ! kill -0 "$demo" 2> /dev/null; then
            echo "the demo ended before its first event:" >&2
            cat "$clone/demo.err" >&2
            exit 1
        fi
        sleep 0.1
    done
    took=$(since "$start")
    pkill -INT -P "$demo" 2> /dev/null || true
    kill -INT "$demo" 2> /dev/null || true
    wait "$demo" 2> /dev/null || true
    echo "round $round: demo's first event after $took s: $(sed -n 2p "$clone/demo.out")"
    demo_times+=("$took")

    echo "round $round: cargo test (load $(load))"
    start=$(now)
    (cd "$clone" && CARGO_TARGET_DIR="$clone/target-test" cargo test -q > "$clone/test.out" 2>&1) || {
        tail -40 "$clone/test.out" >&2
        exit 1
    }
    took=$(since "$start")
    echo "round $round: cargo test took $took s"
    test_times+=("$took")
    rm -rf "$clone"
done
echo "medians over $rounds rounds: demo's first event $(median "${demo_times[@]}") s, cargo test $(median "${test_times[@]}") s"
