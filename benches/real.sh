#!/usr/bin/env bash
# kube-watcher, kube-rs and client-go against the real kube-apiserver (the bed of
# scripts/apiserver.sh), each in turn, as programs meet it: events one at a time from a steady
# stream of writes, or a node agent's few pods while the rest of the cluster changes.
#
#   benches/real.sh [--mode trickle|agent] [--pods N] [--events M] [--rate R] [--runs K]
#                   [--peers kw,kwm,...] [--syscalls] [--rest S] [--node NAME] [--agent-pods P]
#                   [--out FILE]
#
# What it does (docs/performance.md, "Events one at a time" and "A node agent", has the method
# and the tables):
#   1. builds kube-watcher's bench (benches/alloc, glibc), the kube-rs peer, the client-go peer and
#      its loader (benches/peers/client-go/load) where they are missing or stale;
#   2. starts the bed (scripts/apiserver.sh up) unless one is up, and stops its second API server
#      (`nogate`): its watch cache would double the control plane's work on two cores;
#   3. fills the server with N of the bench's realistic pods (`bench --serve` renders them,
#      `load fill` creates each one and writes its status; the server writes their managedFields),
#      unless it holds N pods already; with --mode agent, also P pods bound to the node NAME
#      (`load place`: copies of the first pod, default 30 on `agent-node`);
#   4. K rounds; in each, every peer once (etcd compacted first), through benches/phases.py:
#      trickle (the default): the peer syncs every pod of the server; when it says it synced,
#        `load write` starts changing pods at R a second (a merge patch each: one MODIFIED
#        event, each alone on the wire), and the peer receives M of them; the writer stops.
#        Its line says its sync time, CPU to sync, CPU over the M events (`watch_cpu_s`, which
#        the table divides by M) and peak RSS;
#      agent: the peer watches only the node's pods (fieldSelector=spec.nodeName=NAME); once
#        synced, the writer changes every other pod at R a second for S seconds (default 60)
#        while the peer, whose pods never change, rests: its CPU over those seconds, its
#        wake-ups a second and its peak RSS;
#      beside the peer's own line: its CPU (rusage), the CPU kube-apiserver and etcd used while
#      it ran, how many writes the writer made, and the load average before;
#   5. with --syscalls, one more round with `strace -c -f` attached to each peer from its sync
#      to its end (a round of its own: strace slows what it watches), for the system calls per
#      event (trickle) or per second at rest (agent).
# Peers: kw (kube-watcher, protobuf, its defaults: managedFields skipped, a streaming list), kwf
# (the same decoding managedFields: `with_managed_fields()`), kwo (the defaults before they
# changed: managedFields decoded, paged lists), kwg (kw with paged lists), kwm, kwl and kwlm (kw
# saying `without_managed_fields()`, a streaming list, or both: what kw does now; before the
# defaults changed, kw measured what kwo does now, kwm paged lists without managedFields, kwl
# what kwf does now), kwz / kwzm (the compressed store, and the same saying
# `without_managed_fields()`), kr / krm (kube-rs, JSON, without / with clearing managedFields in
# `.modify()`), cg / cgm (client-go's informer, protobuf, its streaming list, without / with the
# managedFields transform). Default: kw,kwf,kr,krm,cg,cgm.
# A bed this script started is taken down at the end; one that was up stays up (with `nogate`
# stopped: `scripts/apiserver.sh start nogate` brings it back). The pods stay for the next run.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
mode=trickle
pods=5000
events=1500
rate=100
runs=3
peer_list=kw,kwf,kr,krm,cg,cgm
syscalls=0
rest=60
node=agent-node
agent_pods=30
out=""
while [ $# -gt 0 ]; do
    case "$1" in
        --mode) mode=$2; shift 2 ;;
        --pods) pods=$2; shift 2 ;;
        --events) events=$2; shift 2 ;;
        --rate) rate=$2; shift 2 ;;
        --runs) runs=$2; shift 2 ;;
        --peers) peer_list=$2; shift 2 ;;
        --syscalls) syscalls=1; shift ;;
        --rest) rest=$2; shift 2 ;;
        --node) node=$2; shift 2 ;;
        --agent-pods) agent_pods=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        -h|--help) sed -n '2,45p' "$0"; exit 0 ;;
        *) echo "unknown argument $1" >&2; exit 2 ;;
    esac
done
for v in "$pods" "$events" "$rate" "$runs" "$rest" "$agent_pods"; do
    case "$v" in ''|*[!0-9]*) echo "--pods, --events, --rate, --runs, --rest and --agent-pods take whole numbers (got '$v')" >&2; exit 2 ;; esac
done
case "$mode" in trickle|agent) ;; *) echo "--mode $mode: trickle or agent" >&2; exit 2 ;; esac
case "$node" in ''|*[!a-z0-9.-]*) echo "--node $node: a node name (lower-case letters, digits, '-' and '.')" >&2; exit 2 ;; esac
[ "$syscalls" = 0 ] || command -v strace > /dev/null || { echo "benches/real.sh: --syscalls needs strace" >&2; exit 1; }
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
server=""
cleanup() {
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
# A trickle peer waits for all the pods the server holds (earlier runs' may be more than --pods).
pods=$held
writer_cmd="$load_bin write --kubeconfig $kubeconfig --rate $rate"
if [ "$mode" = agent ]; then
    "$load_bin" place --kubeconfig "$kubeconfig" --node "$node" --count "$agent_pods"
    writer_cmd="$writer_cmd --except-node $node"
fi

# run_one NAME CLIENT_CMD...: one run of a peer (see the header), its line appended to $out.
# STRACE (if set): count its system calls into that file (the syscall round).
run_one() {
    local name=$1
    shift
    "$root/scripts/apiserver.sh" compact > /dev/null
    local phases=(--writer "$writer_cmd") client=(--kubeconfig "$kubeconfig")
    if [ "$mode" = agent ]; then
        # Events that never come: the peer waits for them until phases.py ends it after --rest.
        phases+=(--rest "$rest")
        client+=(--fields "spec.nodeName=$node" --pods "$agent_pods" --events 1000000)
    else
        client+=(--pods "$pods" --events "$events")
    fi
    [ -z "${STRACE:-}" ] || phases+=(--strace "$STRACE")
    local api etcd a0 e0 t0 line a1 e1 t1 load0
    api=$(cat "$run/apiserver.pid")
    etcd=$(cat "$run/etcd.pid")
    a0=$(cpu_s "$api"); e0=$(cpu_s "$etcd"); t0=$(date +%s.%N); load0=$(cut -d' ' -f1 /proc/loadavg)
    line=$(python3 "$root/benches/phases.py" "${phases[@]}" -- "$@" "${client[@]}")
    t1=$(date +%s.%N); a1=$(cpu_s "$api"); e1=$(cpu_s "$etcd")
    local extra
    extra=$(python3 -c 'import sys; a0,a1,e0,e1,t0,t1,l0=map(float,sys.argv[1:8]); w=t1-t0
print("\"workload\":\"real-%s\",\"rate\":%s,\"client_wall_s\":%.3f,\"apiserver_cpu_s\":%.3f,\"etcd_cpu_s\":%.3f,\"load_before\":%.2f" % (sys.argv[8], sys.argv[9], w, a1-a0, e1-e0, l0))' \
        "$a0" "$a1" "$e0" "$e1" "$t0" "$t1" "$load0" "$mode" "$rate")
    if [ -n "${STRACE:-}" ]; then
        extra="$extra,\"syscalls\":$(python3 -c 'import json, sys
calls = {}
for l in open(sys.argv[1]):
    f = l.split()
    if len(f) >= 5 and f[0][0].isdigit() and f[-1] != "total":
        calls[f[-1]] = int(f[3])
print(json.dumps(calls, separators=(",", ":")))' "$STRACE")"
    fi
    line="${line%\}},$extra}"
    line=$(printf '%s' "$line" | sed -E "s/^\{(\"peer\":\"[^\"]*\",)?/{\"peer\":\"$name\",/")
    echo "$line" >> "$out"
    echo "$line" >&2
}

run_peer() {
    case "$1" in
        kw) run_one kube-watcher "$kw_bin" ;;
        kwf) run_one kube-watcher-managed-fields "$kw_bin" --with-managed-fields ;;
        kwo) run_one kube-watcher-old-defaults "$kw_bin" --with-managed-fields --paged-lists ;;
        kwg) run_one kube-watcher-paged "$kw_bin" --paged-lists ;;
        kwm) run_one kube-watcher-no-managed-fields "$kw_bin" --skip-managed-fields ;;
        kwz) run_one kube-watcher-compressed "$kw_bin" --mode compressed ;;
        kwzm) run_one kube-watcher-compressed-no-managed-fields "$kw_bin" --mode compressed --skip-managed-fields ;;
        kwl) run_one kube-watcher-streaming "$kw_bin" --streaming-lists ;;
        kwlm) run_one kube-watcher-streaming-no-managed-fields "$kw_bin" --streaming-lists --skip-managed-fields ;;
        kr) run_one kube-rs "$kr_bin" ;;
        krm) run_one kube-rs-strip-managed-fields "$kr_bin" --strip-managed-fields ;;
        cg) run_one client-go "$cg_bin" ;;
        cgm) run_one client-go-strip-managed-fields "$cg_bin" --strip-managed-fields ;;
        *) echo "unknown peer $1 (kw, kwf, kwo, kwg, kwm, kwz, kwzm, kwl, kwlm, kr, krm, cg, cgm)" >&2; exit 2 ;;
    esac
}

if [ "$mode" = agent ]; then
    echo "agent: $agent_pods pods on $node of $pods, $rest s at rest while the others change at $rate writes/s, $runs rounds, peers ${peers[*]}; load $(cat /proc/loadavg)" >&2
else
    echo "trickle: $pods pods, then $events events at $rate writes/s, $runs rounds, peers ${peers[*]}; load $(cat /proc/loadavg)" >&2
fi
for r in $(seq 1 "$runs"); do
    for p in "${peers[@]}"; do run_peer "$p"; done
done
if [ "$syscalls" = 1 ]; then
    echo "the syscall round (strace -c -f from each peer's sync to its end)" >&2
    for p in "${peers[@]}"; do
        STRACE=$(mktemp /tmp/kw-real-strace.XXXXXX)
        run_peer "$p"
        rm -f "$STRACE"
    done
    STRACE=""
fi
echo "load after: $(cat /proc/loadavg); raw results: $out" >&2

python3 - "$out" "$mode" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
mode = sys.argv[2]
timed = [r for r in rows if "syscalls" not in r]
traced = [r for r in rows if "syscalls" in r]
for r in timed:
    r["cpu_us_per_event"] = r["watch_cpu_s"] * 1e6 / r["m"] if r.get("m") and "watch_cpu_s" in r else None
peers = list(dict.fromkeys(r["peer"] for r in rows))
def med(p, k):
    v = [r[k] for r in timed if r["peer"] == p and r.get(k) is not None]
    return statistics.median(v) if v else None
if mode == "agent":
    cols = [("initial_sync_ms", "sync ms"), ("sync_cpu_s", "CPU to sync s"), ("rest_cpu_ms", "CPU at rest ms"),
            ("rest_cpu_us", "CPU at rest µs (schedstat)"), ("rest_switches_per_s", "wake-ups/s"),
            ("max_rss_kb", "peak RSS MiB"), ("load_before", "load before")]
    compared = [("initial_sync_ms", "sync time"), ("rest_cpu_us", "CPU at rest"), ("max_rss_kb", "peak RSS")]
else:
    cols = [("initial_sync_ms", "sync ms"), ("sync_cpu_s", "CPU to sync s"), ("cpu_us_per_event", "CPU µs/event"),
            ("max_rss_kb", "peak RSS MiB"), ("events_per_s", "events/s"), ("client_cpu_s", "client CPU s"),
            ("apiserver_cpu_s", "apiserver CPU s"), ("load_before", "load before")]
    compared = [("initial_sync_ms", "sync time"), ("sync_cpu_s", "sync CPU"), ("cpu_us_per_event", "CPU/event"),
                ("max_rss_kb", "peak RSS")]
def fmt(k, v):
    if v is None: return "–"
    if k == "max_rss_kb": return f"{v/1024:.1f}" if v < 100 * 1024 else f"{v/1024:.0f}"
    if k in ("sync_cpu_s", "client_cpu_s", "apiserver_cpu_s", "load_before", "rest_switches_per_s"): return f"{v:.2f}"
    return f"{v:.0f}"
n = len(timed) // max(1, len(peers))
print(f"\nmedians of {n} rounds ({mode})\n")
print("| peer | " + " | ".join(c[1] for c in cols) + " |")
print("|---" * (len(cols) + 1) + "|")
for p in peers:
    print(f"| {p} | " + " | ".join(fmt(k, med(p, k)) for k, _ in cols) + " |")
for base in [p for p in peers if p.startswith("kube-watcher")]:
    for other in [p for p in peers if not p.startswith("kube-watcher")]:
        def ratio(k):
            a, b = med(base, k), med(other, k)
            return f"{a/b:.2f}" if a is not None and b else "–"
        print(f"\nratios {base} / {other}: " + ", ".join(f"{label} {ratio(k)}" for k, label in compared))
if traced:
    per = "event" if mode == "trickle" else "second at rest"
    def span(r):
        return r["m"] if mode == "trickle" else r["rest_s"] + 1
    names = {}
    for r in traced:
        for k, v in r["syscalls"].items():
            names[k] = names.get(k, 0) + v / span(r)
    top = [k for k, _ in sorted(names.items(), key=lambda kv: -kv[1])][:8]
    print(f"\nsystem calls per {per} (strace -c -f from the sync on, a round of its own)\n")
    print("| peer | all | " + " | ".join(top) + " |")
    print("|---" * (len(top) + 2) + "|")
    for r in traced:
        c, d = r["syscalls"], span(r)
        print(f"| {r['peer']} | {sum(c.values())/d:.2f} | " + " | ".join(f"{c.get(k, 0)/d:.2f}" for k in top) + " |")
EOF
