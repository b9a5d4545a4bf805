#!/usr/bin/env bash
# Issue 7: kube-watcher vs kube-rs, in the same run, against the same server, on the same machine.
#
#   benches/compare.sh [--runs K] [--quick] [--current-thread] [--compact] [--baseline BIN] [--out FILE]
#
# Builds `examples/bench` (kube-watcher client and the server) and the kube-rs peer
# (benches/peers/kube-rs, its own cargo project), then, for each workload, runs K rounds; each
# round runs every peer once, each against a freshly started `bench --serve` on a fresh port
# (port 0), killed afterwards. Workloads:
#   watch: --pods 10000  --events 100000   (events/s with 10k pods cached)
#   sync:  --pods 100000 --events 1        (initial sync time and peak RSS; skipped with --quick)
# kube-watcher runs twice per round: receiving every event (as kube-rs's peer consumes its stream)
# and, as kube-watcher-store-only, with no consumer attached (`--store-only`).
# --current-thread adds kube-rs on a current-thread runtime, --compact kube-watcher's compact store
# (`--mode compact`, reported as kube-watcher-compact), --baseline an older build of `examples/bench`
# (e.g. from main, reported as kube-watcher-baseline) for before/after numbers. Prints medians per
# peer and the ratios kube-watcher / kube-rs as markdown. The raw JSON lines
# (plus the server's CPU time and the load average around each client run) go to --out.
#
# Environment: CARGO_TARGET_DIR (kube-watcher build), PEER_TARGET_DIR (kube-rs peer build,
# default target/kube-rs-peer), SKIP_BUILD=1 to use existing binaries.
set -euo pipefail

runs=5
quick=0
current_thread=0
compact=0
root=$(cd "$(dirname "$0")/.." && pwd)
out=""
baseline=""
while [ $# -gt 0 ]; do
    case "$1" in
        --runs) runs=$2; shift 2 ;;
        --quick) quick=1; shift ;;
        --current-thread) current_thread=1; shift ;;
        --compact) compact=1; shift ;;
        --baseline) baseline=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        -h|--help) sed -n '2,23p' "$0"; exit 0 ;;
        *) echo "unknown argument $1" >&2; exit 2 ;;
    esac
done
[ -n "$out" ] || out=$(mktemp /tmp/kw-compare.XXXXXX.jsonl)
: > "$out"

kw_target=${CARGO_TARGET_DIR:-$root/target}
peer_target=${PEER_TARGET_DIR:-$root/target/kube-rs-peer}
kw_bin=$kw_target/release/examples/bench
peer_bin=$peer_target/release/kube-rs-peer

if [ "${SKIP_BUILD:-0}" != 1 ]; then
    echo "building kube-watcher bench (target $kw_target)" >&2
    (cd "$root" && CARGO_TARGET_DIR=$kw_target cargo build --release --example bench)
    echo "building kube-rs peer (target $peer_target)" >&2
    (cd "$root/benches/peers/kube-rs" && CARGO_TARGET_DIR=$peer_target cargo build --release)
fi

server_pid=""
cleanup() { if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; fi; }
trap cleanup EXIT

# CPU seconds (user+system) used so far by a pid.
cpu_s() { awk -v hz="$(getconf CLK_TCK)" '{ sub(/.*\) /, ""); print ($12 + $13) / hz }' "/proc/$1/stat"; }

# run_one PEER_NAME LABEL PODS EVENTS CLIENT_CMD...   (PEER_NAME replaces the line's "peer")
run_one() {
    local name=$1 label=$2 pods=$3 events=$4
    shift 4
    local log
    log=$(mktemp /tmp/kw-compare-server.XXXXXX)
    "$kw_bin" --serve --pods "$pods" --events "$events" --port 0 > "$log" 2>&1 &
    server_pid=$!
    local url=""
    for _ in $(seq 1 600); do
        url=$(grep -m1 '^http://' "$log" || true)
        [ -n "$url" ] && break
        sleep 0.1
    done
    [ -n "$url" ] || { echo "server did not start: $(cat "$log")" >&2; exit 1; }
    sleep 0.2 # let the server finish its startup output
    local cpu0 load0 t0 line cpu1 load1 t1
    cpu0=$(cpu_s "$server_pid")
    load0=$(cut -d' ' -f1 /proc/loadavg)
    t0=$(date +%s.%N)
    line=$("$@" --url "$url" --pods "$pods" --events "$events")
    t1=$(date +%s.%N)
    cpu1=$(cpu_s "$server_pid")
    load1=$(cut -d' ' -f1 /proc/loadavg)
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
    server_pid=""
    rm -f "$log"
    local extra
    extra=$(python3 -c 'import sys; c0,c1,t0,t1,l0,l1=map(float,sys.argv[1:7]); w=t1-t0
print("\"workload\":\"%s\",\"client_wall_s\":%.3f,\"server_cpu_s\":%.3f,\"server_cpu_pct\":%.0f,\"load_before\":%.2f,\"load_after\":%.2f" % (sys.argv[7], w, c1-c0, 100*(c1-c0)/w, l0, l1))' \
        "$cpu0" "$cpu1" "$t0" "$t1" "$load0" "$load1" "$label")
    line="${line%\}},$extra}"
    line=$(printf '%s' "$line" | sed -E "s/^\{\"peer\":\"[^\"]*\"/{\"peer\":\"$name\"/")
    echo "$line" >> "$out"
    echo "$line" >&2
}

peers=(kw kws kr)
[ "$compact" = 1 ] && peers+=(kwc)
[ "$current_thread" = 1 ] && peers+=(krct)
[ -n "$baseline" ] && peers+=(kwb)
run_peer() {
    local peer=$1
    shift
    case "$peer" in
        kw) run_one kube-watcher "$@" "$kw_bin" ;;
        kws) run_one kube-watcher-store-only "$@" "$kw_bin" --store-only ;;
        kwc) run_one kube-watcher-compact "$@" "$kw_bin" --mode compact ;;
        kr) run_one kube-rs "$@" "$peer_bin" ;;
        krct) run_one kube-rs-current-thread "$@" "$peer_bin" --current-thread ;;
        kwb) run_one kube-watcher-baseline "$@" "$baseline" ;;
    esac
}

echo "rustc processes: $(pgrep -c rustc || true); load: $(cat /proc/loadavg)" >&2
for r in $(seq 1 "$runs"); do
    for p in "${peers[@]}"; do
        run_peer "$p" watch 10000 100000
    done
done
if [ "$quick" = 0 ]; then
    for r in $(seq 1 "$runs"); do
        for p in "${peers[@]}"; do
            run_peer "$p" sync 100000 1
        done
    done
fi
echo "load after: $(cat /proc/loadavg); raw results: $out" >&2

python3 - "$out" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
def med(peer, workload, key):
    v = [r[key] for r in rows if r["peer"] == peer and r["workload"] == workload and key in r]
    return statistics.median(v) if v else None
peers = list(dict.fromkeys(r["peer"] for r in rows))
workloads = list(dict.fromkeys(r["workload"] for r in rows))
cols = [("watch", "events_per_s", "events/s"), ("watch", "watch_ms", "watch ms"),
        ("watch", "max_rss_kb", "RSS MiB (10k)"), ("sync", "initial_sync_ms", "sync 100k ms"),
        ("sync", "max_rss_kb", "RSS MiB (100k)"), ("watch", "server_cpu_pct", "server CPU % (watch)")]
cols = [c for c in cols if c[0] in workloads]
n = {w: len([r for r in rows if r["workload"] == w]) // max(1, len(peers)) for w in workloads}
print(f"\nmedians of {', '.join(f'{k} runs ({w})' for w, k in n.items())}\n")
def fmt(key, v):
    if v is None: return "–"
    return f"{v/1024:.0f}" if key == "max_rss_kb" else f"{v:.0f}"
print("| peer | " + " | ".join(c[2] for c in cols) + " |")
print("|---" * (len(cols) + 1) + "|")
for p in peers:
    print(f"| {p} | " + " | ".join(fmt(k, med(p, w, k)) for w, k, _ in cols) + " |")
stops = [r["stop_us"] for r in rows if "stop_us" in r and r["peer"] == "kube-watcher"]
for base in [p for p in peers if p.startswith("kube-watcher")]:
  for other in [p for p in peers if p.startswith("kube-rs")]:
    def ratio(w, k):
        a, b = med(base, w, k), med(other, w, k)
        return f"{a/b:.2f}" if a is not None and b else "–"
    print(f"\nratios {base} / {other}: events/s {ratio('watch','events_per_s')}, "
          f"sync time {ratio('sync','initial_sync_ms')}, peak RSS 100k {ratio('sync','max_rss_kb')}, "
          f"peak RSS 10k {ratio('watch','max_rss_kb')}")
if stops:
    print(f"\nkube-watcher stop() while idle in a watch: median {statistics.median(stops):.0f} µs "
          f"(min {min(stops)}, max {max(stops)}, {len(stops)} runs)")
EOF
