#!/usr/bin/env bash
# How long after a restarted kube-apiserver is ready kube-watcher's stores are fresh again: the
# real server of scripts/apiserver.sh killed for about ten seconds while changes go on through
# the bed's other API server, with the default configuration and with `parallel_sync(2)`
# (benches/outage/src/main.rs says what one run does and measures; docs/performance.md, "After
# an outage", has the numbers).
#
#   benches/outage.sh [--runs K] [--down SECS] [--baseline-src DIR] [--out FILE]
#
# Builds benches/outage against this tree and, with --baseline-src, against another checkout of
# kube-watcher (for before/after numbers: `git archive main | tar -x -C DIR`); starts the bed
# unless it is up (both API servers: the changes go through `nogate`); makes the bench's
# objects; then K rounds (5 by default), each running every build in both configurations, one
# after another. Prints the medians per build and configuration of `fresh_ms` (from the first
# `/readyz` that answers ok to the later of the two stores being fresh; negative when both were
# fresh before it said ok) and of its parts; the raw JSON lines go to --out.
# A bed this script started is taken down at the end; one that was up stays up.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
runs=5
down=10
baseline_src=""
out=""
while [ $# -gt 0 ]; do
    case "$1" in
        --runs) runs=$2; shift 2 ;;
        --down) down=$2; shift 2 ;;
        --baseline-src) baseline_src=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
        *) echo "unknown argument $1" >&2; exit 2 ;;
    esac
done
for v in "$runs" "$down"; do
    case "$v" in ''|*[!0-9]*) echo "--runs and --down take whole numbers (got '$v')" >&2; exit 2 ;; esac
done
[ -n "$out" ] || out=$(mktemp /tmp/kw-outage.XXXXXX.jsonl)
: > "$out"

target=${CARGO_TARGET_DIR:-$root/target}
bins=$target/bench-outage
mkdir -p "$bins"
# build SRC NAME: benches/outage of the kube-watcher checkout SRC, as $bins/NAME.
build() {
    [ -d "$1/benches/outage" ] || cp -r "$root/benches/outage" "$1/benches/"
    (cd "$1/benches/outage" && CARGO_TARGET_DIR=$target cargo build -q)
    cp "$target/debug/outage" "$bins/$2"
}
echo "building the bench" >&2
builds=()
if [ -n "$baseline_src" ]; then
    build "$baseline_src" baseline
    builds+=(baseline)
fi
build "$root" current
builds+=(current)

export KUBE_WATCHER_TESTBED=${KUBE_WATCHER_TESTBED:-$root/target/testbed}
run=$KUBE_WATCHER_TESTBED/run
alive() { [ -f "$run/$1.pid" ] && kill -0 "$(cat "$run/$1.pid")" 2> /dev/null; }
started_bed=0
if ! { alive apiserver && alive nogate; }; then
    started_bed=1
    "$root/scripts/apiserver.sh" up > /dev/null
fi
cleanup() {
    # A run that failed half-way may have left kube-apiserver stopped.
    alive apiserver || "$root/scripts/apiserver.sh" start apiserver > /dev/null 2>&1 || true
    [ "$started_bed" = 0 ] || "$root/scripts/apiserver.sh" down > /dev/null 2>&1 || true
}
trap cleanup EXIT
"$bins/current" --script "$root/scripts/apiserver.sh" --setup

echo "$runs rounds of ${builds[*]} x (default, parallel_sync 2), kube-apiserver down ${down} s; load $(cat /proc/loadavg)" >&2
for r in $(seq 1 "$runs"); do
    for b in "${builds[@]}"; do
        for p in 0 2; do
            line=$("$bins/$b" --script "$root/scripts/apiserver.sh" --label "$b" --parallel-sync "$p" --down "$down")
            echo "$line" >> "$out"
            echo "round $r: $line" >&2
        done
    done
done
echo "raw results: $out" >&2

python3 - "$out" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
keys = list(dict.fromkeys((r["label"], r["parallel_sync"]) for r in rows))
cols = [("fresh_ms", "fresh after ready, ms"), ("configmaps_ms", "ConfigMaps, ms"), ("nodes_ms", "Nodes, ms"),
        ("start_to_ready_s", "start to ready, s"), ("backoff_s", "backoff, s")]
def med(key, col):
    return statistics.median(r[col] for r in rows if (r["label"], r["parallel_sync"]) == key)
n = len(rows) // max(1, len(keys))
print(f"\nmedians of {n} runs (fresh: the later of the two stores; negative: before /readyz said ok)\n")
print("| build | parallel_sync | " + " | ".join(c[1] for c in cols) + " | each run's fresh, ms |")
print("|---" * (len(cols) + 3) + "|")
for key in keys:
    each = ", ".join(str(r["fresh_ms"]) for r in rows if (r["label"], r["parallel_sync"]) == key)
    print(f"| {key[0]} | {key[1]} | " + " | ".join(f"{med(key, c):.1f}" if c.endswith("_s") else f"{med(key, c):.0f}"
                                                   for c, _ in cols) + f" | {each} |")
EOF
