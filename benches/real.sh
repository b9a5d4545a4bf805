#!/usr/bin/env bash
# kube-watcher, kube-rs and client-go against the real kube-apiserver (the bed of
# scripts/apiserver.sh), each in turn, under the same steady stream of writes.
#
#   benches/real.sh [--pods N] [--events M] [--rate R] [--runs K] [--peers kw,kwm,...] [--out FILE]
#
# What it does (docs/performance.md, "On the real kube-apiserver", has the method and the table):
#   1. builds kube-watcher's bench (benches/alloc, glibc), the kube-rs peer, the client-go peer and
#      its loader (benches/peers/client-go/load) where they are missing or stale;
#   2. starts the bed (scripts/apiserver.sh up) unless one is up, and stops its second API server
#      (`nogate`): its watch cache would double the control plane's work on two cores;
#   3. fills the server with N of the bench's realistic pods (`bench --serve` renders them,
#      `load fill` creates each one and writes its status; the server writes their managedFields),
#      unless it holds N pods already;
#   4. K rounds; in each, every peer once: etcd is compacted, `load write` starts changing pods at
#      R a second (one MODIFIED event each), the peer syncs the N pods and receives M events (the
#      same `--pods/--events` client CLI and JSON line as benches/compare.sh), the writer stops.
#      Beside the peer's own line: its CPU (rusage), the CPU kube-apiserver and etcd used while it
#      ran, and how many writes the writer made in that time.
# Peers: kw (kube-watcher, protobuf), kwm (the same, without_managed_fields()), kwz / kwzm (the
# compressed store, without and with managedFields), kwl / kwlm (kw and kwm fetching the initial
# state with a streaming list, `Config::streaming_lists`, as client-go does), kr / krm (kube-rs,
# JSON, without / with clearing managedFields in `.modify()`), cg / cgm (client-go's informer,
# protobuf, without / with the managedFields transform). Default: kw,kwm,kr,krm,cg,cgm.
# A bed this script started is taken down at the end; one that was up stays up (with `nogate`
# stopped: `scripts/apiserver.sh start nogate` brings it back). The pods stay for the next run.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
pods=10000
events=20000
rate=300
runs=3
peer_list=kw,kwm,kr,krm,cg,cgm
out=""
while [ $# -gt 0 ]; do
    case "$1" in
        --pods) pods=$2; shift 2 ;;
        --events) events=$2; shift 2 ;;
        --rate) rate=$2; shift 2 ;;
        --runs) runs=$2; shift 2 ;;
        --peers) peer_list=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        -h|--help) sed -n '2,26p' "$0"; exit 0 ;;
        *) echo "unknown argument $1" >&2; exit 2 ;;
    esac
done
for v in "$pods" "$events" "$rate" "$runs"; do
    case "$v" in ''|*[!0-9]*) echo "--pods, --events, --rate and --runs take whole numbers (got '$v')" >&2; exit 2 ;; esac
done
command -v go > /dev/null || { echo "benches/real.sh: no Go toolchain (go): the real server and the client-go peer need it" >&2; exit 1; }
[ -n "$out" ] || out=$(mktemp /tmp/kw-real.XXXXXX.jsonl)
: > "$out"
IFS=, read -r -a peers <<< "$peer_list"

target=${CARGO_TARGET_DIR:-$root/target}
kw_bin=$target/bench-alloc/release/bench
kr_bin=${PEER_TARGET_DIR:-$root/target/kube-rs-peer}/release/kube-rs-peer
cg_bin=$root/target/client-go-peer/client-go-peer
load_bin=$root/target/client-go-peer/load
export KUBE_WATCHER_TESTBED=${KUBE_WATCHER_TESTBED:-$root/target/testbed}
run=$KUBE_WATCHER_TESTBED/run
kubeconfig=$run/admin.kubeconfig

echo "building the bench, the peers and the loader" >&2
(cd "$root/benches/alloc" && CARGO_TARGET_DIR=$target/bench-alloc cargo build -q --release)
(cd "$root/benches/peers/kube-rs" && CARGO_TARGET_DIR=$(dirname "$(dirname "$kr_bin")") cargo build -q --release)
(cd "$root/benches/peers/client-go" && go build -o "$cg_bin" . && go build -o "$load_bin" ./load)

# shellcheck source=benches/common.sh
. "$root/benches/common.sh"
started_bed=0
alive() { [ -f "$run/$1.pid" ] && kill -0 "$(cat "$run/$1.pid")" 2> /dev/null; }
if ! alive apiserver; then
    started_bed=1
    "$root/scripts/apiserver.sh" up > /dev/null
fi
writer=""
server=""
cleanup() {
    [ -z "$writer" ] || kill "$writer" 2> /dev/null || true
    [ -z "$server" ] || kill "$server" 2> /dev/null || true
    [ "$started_bed" = 0 ] || "$root/scripts/apiserver.sh" down > /dev/null 2>&1 || true
}
trap cleanup EXIT
alive nogate && "$root/scripts/apiserver.sh" stop nogate > /dev/null

# Pods the server holds now (a metadata-only list: cheap).
kubectl_bin=$(command -v kubectl) || { echo "benches/real.sh: kubectl is needed (to count the pods)" >&2; exit 1; }
count_pods() { "$kubectl_bin" --kubeconfig "$kubeconfig" get pods -A --no-headers -o name --chunk-size 5000 | wc -l; }
held=$(count_pods)
if [ "$held" -lt "$pods" ]; then
    echo "filling the server: $held pods there, $pods wanted" >&2
    log=$(mktemp /tmp/kw-real-server.XXXXXX)
    start_bench_server "$log" --pods "$pods" --events 1 --port 0
    server=$bench_server_pid
    t0=$SECONDS
    "$load_bin" fill --from "$bench_server_url" --kubeconfig "$kubeconfig" 2>&1 | tail -n 1 >&2
    kill "$server"; wait "$server" 2> /dev/null || true; server=""
    rm -f "$log"
    held=$(count_pods)
    echo "the server holds $held pods (fill took $((SECONDS - t0)) s)" >&2
fi
[ "$held" -ge "$pods" ] || { echo "the server holds $held pods, fewer than $pods" >&2; exit 1; }
# Every peer waits for all the pods the server holds (earlier runs' may be more than --pods).
pods=$held

# run_one NAME CLIENT_CMD...
run_one() {
    local name=$1
    shift
    "$root/scripts/apiserver.sh" compact > /dev/null
    local wlog
    wlog=$(mktemp /tmp/kw-real-writer.XXXXXX)
    "$load_bin" write --kubeconfig "$kubeconfig" --rate "$rate" 2> "$wlog" &
    writer=$!
    local api etcd a0 e0 t0 line a1 e1 t1 load0
    api=$(cat "$run/apiserver.pid")
    etcd=$(cat "$run/etcd.pid")
    a0=$(cpu_s "$api"); e0=$(cpu_s "$etcd"); t0=$(date +%s.%N); load0=$(cut -d' ' -f1 /proc/loadavg)
    line=$(with_client_cpu "$@" --kubeconfig "$kubeconfig" --pods "$pods" --events "$events")
    t1=$(date +%s.%N); a1=$(cpu_s "$api"); e1=$(cpu_s "$etcd")
    kill "$writer"; wait "$writer" 2> /dev/null || true; writer=""
    local writes
    writes=$(grep -o '^load: [0-9]* changes' "$wlog" | tail -n 1 | grep -o '[0-9]*' || echo 0)
    rm -f "$wlog"
    local extra
    extra=$(python3 -c 'import sys; a0,a1,e0,e1,t0,t1,l0=map(float,sys.argv[1:8]); w=t1-t0
print("\"workload\":\"real\",\"rate\":%s,\"writes\":%s,\"client_wall_s\":%.3f,\"apiserver_cpu_s\":%.3f,\"etcd_cpu_s\":%.3f,\"load_before\":%.2f" % (sys.argv[8], sys.argv[9], w, a1-a0, e1-e0, l0))' \
        "$a0" "$a1" "$e0" "$e1" "$t0" "$t1" "$load0" "$rate" "$writes")
    line="${line%\}},$extra}"
    line=$(printf '%s' "$line" | sed -E "s/^\{\"peer\":\"[^\"]*\"/{\"peer\":\"$name\"/")
    echo "$line" >> "$out"
    echo "$line" >&2
}

run_peer() {
    case "$1" in
        kw) run_one kube-watcher "$kw_bin" ;;
        kwm) run_one kube-watcher-no-managed-fields "$kw_bin" --skip-managed-fields ;;
        kwz) run_one kube-watcher-compressed "$kw_bin" --mode compressed ;;
        kwzm) run_one kube-watcher-compressed-no-managed-fields "$kw_bin" --mode compressed --skip-managed-fields ;;
        kwl) run_one kube-watcher-streaming "$kw_bin" --streaming-lists ;;
        kwlm) run_one kube-watcher-streaming-no-managed-fields "$kw_bin" --streaming-lists --skip-managed-fields ;;
        kr) run_one kube-rs "$kr_bin" ;;
        krm) run_one kube-rs-strip-managed-fields "$kr_bin" --strip-managed-fields ;;
        cg) run_one client-go "$cg_bin" ;;
        cgm) run_one client-go-strip-managed-fields "$cg_bin" --strip-managed-fields ;;
        *) echo "unknown peer $1 (kw, kwm, kwz, kwzm, kwl, kwlm, kr, krm, cg, cgm)" >&2; exit 2 ;;
    esac
}

echo "$pods pods, $events events at $rate writes/s, $runs rounds, peers ${peers[*]}; load $(cat /proc/loadavg)" >&2
for r in $(seq 1 "$runs"); do
    for p in "${peers[@]}"; do run_peer "$p"; done
done
echo "raw results: $out" >&2

python3 - "$out" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
for r in rows:
    r["cpu_us_per_event"] = r["watch_cpu_s"] * 1e6 / r["m"] if r.get("m") else None
    r["sync_cpu_s"] = r.get("sync_cpu_s")
peers = list(dict.fromkeys(r["peer"] for r in rows))
def med(p, k):
    v = [r[k] for r in rows if r["peer"] == p and r.get(k) is not None]
    return statistics.median(v) if v else None
cols = [("initial_sync_ms", "sync ms"), ("events_per_s", "events/s"), ("max_rss_kb", "peak RSS MiB"),
        ("sync_cpu_s", "sync CPU s"), ("cpu_us_per_event", "CPU µs/event"), ("client_cpu_s", "client CPU s"),
        ("apiserver_cpu_s", "apiserver CPU s"), ("etcd_cpu_s", "etcd CPU s"), ("client_wall_s", "wall s")]
def fmt(k, v):
    if v is None: return "–"
    if k == "max_rss_kb": return f"{v/1024:.0f}"
    if k in ("sync_cpu_s", "client_cpu_s", "apiserver_cpu_s", "etcd_cpu_s", "client_wall_s"): return f"{v:.1f}"
    return f"{v:.0f}"
n = len(rows) // max(1, len(peers))
print(f"\nmedians of {n} rounds\n")
print("| peer | " + " | ".join(c[1] for c in cols) + " |")
print("|---" * (len(cols) + 1) + "|")
for p in peers:
    print(f"| {p} | " + " | ".join(fmt(k, med(p, k)) for k, _ in cols) + " |")
for base in [p for p in peers if p.startswith("kube-watcher")]:
    for other in [p for p in peers if not p.startswith("kube-watcher")]:
        def ratio(k):
            a, b = med(base, k), med(other, k)
            return f"{a/b:.2f}" if a is not None and b else "–"
        print(f"\nratios {base} / {other}: sync time {ratio('initial_sync_ms')}, sync CPU {ratio('sync_cpu_s')}, "
              f"CPU/event {ratio('cpu_us_per_event')}, peak RSS {ratio('max_rss_kb')}, events/s {ratio('events_per_s')}")
EOF
