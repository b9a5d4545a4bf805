#!/usr/bin/env bash
# kube-watcher vs kube-rs and client-go, in the same run, against the same server, on the same machine.
#
#   benches/compare.sh [--runs K] [--quick] [--current-thread] [--compact] [--baseline BIN] [--out FILE]
#                      [--alloc glibc|mimalloc|jemalloc[,...]] [--server-opts "ARGS"] [--peers kw,kws,kr]
#                      [--workloads watch,sync] [--peer-gzip]
#
# Builds kube-watcher's bench (examples/bench.rs, client and server, through benches/alloc: a
# cargo project of its own that adds the global allocator) and the kube-rs peer
# (benches/peers/kube-rs, its own cargo project too) and, when asked for, the client-go peer
# (benches/peers/client-go, a Go module: `go build`; a machine without Go skips it with one
# line), then, for each workload, runs K rounds; each
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
# (plus the server's CPU time, the client's CPU time as `client_cpu_s` (user + system, from its
# rusage: the watch workload's is its 10k-pod sync and 100k events, the sync workload's its
# 100k-pod sync), the CPU time of the watch phase alone as `watch_cpu_s` (both peers read it off
# /proc/self/stat from the first watch event to the last: CPU per event without the sync), and the
# load average around each client run) go to --out.
#
# --alloc: the global allocator of both peers (cargo features `mimalloc`/`jemalloc` of the two
# bench projects, benches/alloc and benches/peers/kube-rs; glibc is neither: the library never
# has them). A comma list runs every allocator in every round (interleaved); each allocator is
# built in its own target directories (kube-watcher: $CARGO_TARGET_DIR/bench-alloc[-NAME];
# peer: $PEER_TARGET_DIR[-NAME]), so switching does not rebuild. Every JSON line and
# the table name the allocator (a first build of each is a full release build; jemalloc adds a
# configure + make of its C sources).
# --server-opts: passed to every `bench --serve` (e.g. "--gzip --page-cap 100", or
# "--chunk-kib 0" for one chunk per pod, "--varied" for pods that differ as a real cluster's do;
# see examples/bench.rs), and recorded per line.
# --peers: which of kw (kube-watcher, consumer; the default wire format, protobuf for pods;
# managedFields decoded and paged lists, as kube-rs's peer lists and keeps them, and as
# kube-watcher's defaults were before they changed: every kube-watcher peer below but kwd, kwl
# and kwlm lists in pages, and decodes managedFields unless it says otherwise), kwd (the
# library's defaults: managedFields skipped, a streaming list),
# kwj (the same reading JSON: `--wire json`), kws (store-only), kwz (`--mode compressed`,
# the compressed store, consumer), kwp (`--parallel-sync 2`, consumer), kwc (compact store), kr
# (kube-rs, which reads JSON: it cannot ask for protobuf), kwm, kwjm and kwzm (kw, kwj and kwz
# with `--skip-managed-fields`: `without_managed_fields()`), kwl and kwlm (kw and kwm fetching
# the initial state with a streaming list, `--streaming-lists`, as client-go does), krm (kube-rs
# clearing managedFields with `.modify()` before its reflector, as its users write it), cg (client-go's SharedInformer,
# protobuf, its default streaming list: benches/peers/client-go/README.md) and cgm (the same
# clearing managedFields in `SetTransform`) run (default kw, kwj, kws, kwz, kr). --workloads: watch, sync or both (default both; --quick is watch only).
# --peer-gzip: the kube-rs peer with kube's `gzip` feature (it asks for gzip as kube-watcher's
# client always does; target directory suffix -gzip). Without it kube-rs asks for no compression,
# so `--server-opts --gzip` compresses only kube-watcher's pages.
#
# Environment: CARGO_TARGET_DIR (kube-watcher build), PEER_TARGET_DIR (kube-rs peer build,
# default target/kube-rs-peer), CLIENT_GO_PEER (the client-go peer's binary, default
# target/client-go-peer/client-go-peer), SKIP_BUILD=1 to use existing binaries.
set -euo pipefail

runs=5
quick=0
current_thread=0
compact=0
root=$(cd "$(dirname "$0")/.." && pwd)
out=""
baseline=""
allocs=glibc
server_opts=""
peer_list=""
workloads=""
peer_gzip=0
while [ $# -gt 0 ]; do
    case "$1" in
        --runs) runs=$2; shift 2 ;;
        --quick) quick=1; shift ;;
        --current-thread) current_thread=1; shift ;;
        --compact) compact=1; shift ;;
        --baseline) baseline=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        --alloc) allocs=$2; shift 2 ;;
        --server-opts) server_opts=$2; shift 2 ;;
        --peers) peer_list=$2; shift 2 ;;
        --workloads) workloads=$2; shift 2 ;;
        --peer-gzip) peer_gzip=1; shift ;;
        -h|--help) sed -n '2,58p' "$0"; exit 0 ;;
        *) echo "unknown argument $1" >&2; exit 2 ;;
    esac
done
[ -n "$out" ] || out=$(mktemp /tmp/kw-compare.XXXXXX.jsonl)
: > "$out"

IFS=, read -r -a alloc_list <<< "$allocs"
for a in "${alloc_list[@]}"; do
    case "$a" in
        glibc|mimalloc|jemalloc) ;;
        *) echo "--alloc $a: expected glibc, mimalloc or jemalloc" >&2; exit 2 ;;
    esac
done
if [ -z "$workloads" ]; then
    if [ "$quick" = 1 ]; then workloads=watch; else workloads=watch,sync; fi
fi
read -r -a server_args <<< "$server_opts"
# The kube-watcher peers measure what kube-rs's does, whatever the library's defaults: the
# initial state in pages, and managedFields decoded (kept) or skipped (skipped), as krm clears them.
kept=(--with-managed-fields --paged-lists)
skipped=(--skip-managed-fields --paged-lists)
# A server of varied pods: kube-watcher's client looks those up when it times get().
kw_extra=()
case " $server_opts " in *" --varied "*) kw_extra=(--varied) ;; esac

kw_target=${CARGO_TARGET_DIR:-$root/target}
peer_target=${PEER_TARGET_DIR:-$root/target/kube-rs-peer}
# Per allocator: target directories, cargo features and binaries.
kw_target_of() { if [ "$1" = glibc ]; then echo "$kw_target/bench-alloc"; else echo "$kw_target/bench-alloc-$1"; fi; }
peer_target_of() {
    local t=$peer_target
    [ "$1" = glibc ] || t=$t-$1
    [ "$peer_gzip" = 0 ] || t=$t-gzip
    echo "$t"
}
kw_bin_of() { echo "$(kw_target_of "$1")/release/bench"; }
peer_bin_of() { echo "$(peer_target_of "$1")/release/kube-rs-peer"; }
# The server is always the glibc build of the bench (built first).
kw_bin=$(kw_bin_of glibc)

peers=(kw kwj kws kwz kr)
[ -z "$peer_list" ] || IFS=, read -r -a peers <<< "$peer_list"
[ "$compact" = 1 ] && peers+=(kwc)
[ "$current_thread" = 1 ] && peers+=(krct)
[ -n "$baseline" ] && peers+=(kwb)
cg_bin=${CLIENT_GO_PEER:-$root/target/client-go-peer/client-go-peer}
wants() { case " ${peers[*]} " in *" $1 "*) return 0 ;; esac; return 1; }
wants_kube_rs() { wants kr || wants krct || wants krm; }
if (wants cg || wants cgm) && [ "${SKIP_BUILD:-0}" != 1 ] && ! command -v go > /dev/null; then
    echo "no Go toolchain (go): skipping the client-go peers" >&2
    kept=()
    for p in "${peers[@]}"; do case "$p" in cg|cgm) ;; *) kept+=("$p") ;; esac; done
    peers=("${kept[@]}")
fi

if [ "${SKIP_BUILD:-0}" != 1 ]; then
    if wants cg || wants cgm; then
        echo "building the client-go peer ($cg_bin)" >&2
        (cd "$root/benches/peers/client-go" && go build -o "$cg_bin" .)
    fi
    for a in glibc "${alloc_list[@]}"; do
        kw_features=()
        [ "$a" = glibc ] || kw_features=(--features "$a")
        echo "building kube-watcher bench, allocator $a (target $(kw_target_of "$a"))" >&2
        (cd "$root/benches/alloc" && CARGO_TARGET_DIR=$(kw_target_of "$a") cargo build --release "${kw_features[@]}")
    done
    for a in "${alloc_list[@]}"; do
        wants_kube_rs || continue
        peer_features=()
        [ "$a" = glibc ] || peer_features+=("$a")
        [ "$peer_gzip" = 0 ] || peer_features+=(gzip)
        features=$(IFS=,; echo "${peer_features[*]}")
        echo "building kube-rs peer, allocator $a (target $(peer_target_of "$a"))" >&2
        (cd "$root/benches/peers/kube-rs" && CARGO_TARGET_DIR=$(peer_target_of "$a") cargo build --release ${features:+--features "$features"})
    done
fi

# shellcheck source=benches/common.sh
. "$root/benches/common.sh"
server_pid=""
cleanup() { if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; fi; }
trap cleanup EXIT

# run_one PEER_NAME LABEL PODS EVENTS CLIENT_CMD...   (PEER_NAME replaces the line's "peer")
run_one() {
    local name=$1 label=$2 pods=$3 events=$4
    shift 4
    local log
    log=$(mktemp /tmp/kw-compare-server.XXXXXX)
    start_bench_server "$log" --pods "$pods" --events "$events" --port 0 ${server_args[@]+"${server_args[@]}"}
    server_pid=$bench_server_pid
    local url=$bench_server_url
    sleep 0.2 # let the server finish its startup output
    local cpu0 load0 t0 line cpu1 load1 t1
    cpu0=$(cpu_s "$server_pid")
    load0=$(cut -d' ' -f1 /proc/loadavg)
    t0=$(date +%s.%N)
    line=$(with_client_cpu "$@" --url "$url" --pods "$pods" --events "$events")
    t1=$(date +%s.%N)
    cpu1=$(cpu_s "$server_pid")
    load1=$(cut -d' ' -f1 /proc/loadavg)
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
    server_pid=""
    rm -f "$log"
    local extra
    extra=$(python3 -c 'import sys; c0,c1,t0,t1,l0,l1=map(float,sys.argv[1:7]); w=t1-t0
print("\"workload\":\"%s\",\"server_opts\":\"%s\",\"client_wall_s\":%.3f,\"server_cpu_s\":%.3f,\"server_cpu_pct\":%.0f,\"load_before\":%.2f,\"load_after\":%.2f" % (sys.argv[7], sys.argv[8], w, c1-c0, 100*(c1-c0)/w, l0, l1))' \
        "$cpu0" "$cpu1" "$t0" "$t1" "$load0" "$load1" "$label" "$server_opts")
    line="${line%\}},$extra}"
    line=$(printf '%s' "$line" | sed -E "s/^\{\"peer\":\"[^\"]*\"/{\"peer\":\"$name\"/")
    echo "$line" >> "$out"
    echo "$line" >&2
}

# run_peer PEER ALLOCATOR WORKLOAD PODS EVENTS
run_peer() {
    local peer=$1 kwb peerb
    kwb=$(kw_bin_of "$2")
    peerb=$(peer_bin_of "$2")
    shift 2
    case "$peer" in
        kw) run_one kube-watcher "$@" "$kwb" ${kw_extra[@]+"${kw_extra[@]}"} "${kept[@]}" ;;
        kwd) run_one kube-watcher-defaults "$@" "$kwb" ${kw_extra[@]+"${kw_extra[@]}"} ;;
        kwj) run_one kube-watcher-json "$@" "$kwb" ${kw_extra[@]+"${kw_extra[@]}"} "${kept[@]}" --wire json ;;
        kws) run_one kube-watcher-store-only "$@" "$kwb" ${kw_extra[@]+"${kw_extra[@]}"} "${kept[@]}" --store-only ;;
        kwc) run_one kube-watcher-compact "$@" "$kwb" ${kw_extra[@]+"${kw_extra[@]}"} "${kept[@]}" --mode compact ;;
        kwz) run_one kube-watcher-compressed "$@" "$kwb" ${kw_extra[@]+"${kw_extra[@]}"} "${kept[@]}" --mode compressed ;;
        kwm) run_one kube-watcher-no-managed-fields "$@" "$kwb" ${kw_extra[@]+"${kw_extra[@]}"} "${skipped[@]}" ;;
        kwjm) run_one kube-watcher-json-no-managed-fields "$@" "$kwb" ${kw_extra[@]+"${kw_extra[@]}"} "${skipped[@]}" --wire json ;;
        kwzm) run_one kube-watcher-compressed-no-managed-fields "$@" "$kwb" ${kw_extra[@]+"${kw_extra[@]}"} "${skipped[@]}" --mode compressed ;;
        kwl) run_one kube-watcher-streaming "$@" "$kwb" ${kw_extra[@]+"${kw_extra[@]}"} --with-managed-fields --streaming-lists ;;
        kwlm) run_one kube-watcher-streaming-no-managed-fields "$@" "$kwb" ${kw_extra[@]+"${kw_extra[@]}"} --streaming-lists --skip-managed-fields ;;
        kwp) run_one kube-watcher-parallel-2 "$@" "$kwb" ${kw_extra[@]+"${kw_extra[@]}"} "${kept[@]}" --parallel-sync 2 ;;
        kr) run_one kube-rs "$@" "$peerb" ;;
        krct) run_one kube-rs-current-thread "$@" "$peerb" --current-thread ;;
        krm) run_one kube-rs-strip-managed-fields "$@" "$peerb" --strip-managed-fields ;;
        kwb) run_one kube-watcher-baseline "$@" "$baseline" ;;
        cg) run_one client-go "$@" "$cg_bin" ;;
        cgm) run_one client-go-strip-managed-fields "$@" "$cg_bin" --strip-managed-fields ;;
        *) echo "unknown peer $peer (kw, kwd, kwj, kws, kwc, kwz, kwp, kwm, kwjm, kwzm, kwl, kwlm, kr, krct, krm, cg, cgm, kwb)" >&2; exit 2 ;;
    esac
}

echo "rustc processes: $(pgrep -c rustc || true); load: $(cat /proc/loadavg)" >&2
echo "allocators: ${alloc_list[*]}; server options: ${server_opts:-none}; peers: ${peers[*]}" >&2
for w in watch sync; do
    case ",$workloads," in *",$w,"*) ;; *) continue ;; esac
    if [ "$w" = watch ]; then size=(10000 100000); else size=(100000 1); fi
    for r in $(seq 1 "$runs"); do
        for a in "${alloc_list[@]}"; do
            for p in "${peers[@]}"; do
                run_peer "$p" "$a" "$w" "${size[@]}"
            done
        done
    done
done
echo "load after: $(cat /proc/loadavg); raw results: $out" >&2

python3 - "$out" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
for r in rows:
    r.setdefault("allocator", "glibc")
    r["key"] = (r["peer"], r["allocator"])
    if "watch_cpu_s" in r and r.get("m"):
        r["cpu_us_per_event"] = r["watch_cpu_s"] * 1e6 / r["m"]
def med(key, workload, k):
    v = [r[k] for r in rows if r["key"] == key and r["workload"] == workload and k in r]
    return statistics.median(v) if v else None
keys = list(dict.fromkeys(r["key"] for r in rows))
workloads = list(dict.fromkeys(r["workload"] for r in rows))
cols = [("watch", "events_per_s", "events/s"), ("watch", "watch_ms", "watch ms"),
        ("watch", "max_rss_kb", "RSS MiB (10k)"), ("sync", "initial_sync_ms", "sync 100k ms"),
        ("sync", "max_rss_kb", "RSS MiB (100k)"), ("sync", "get_us_median", "get() µs (100k)"), ("watch", "server_cpu_pct", "server CPU % (watch)"),
        ("sync", "server_cpu_pct", "server CPU % (sync)"), ("watch", "client_cpu_s", "client CPU s (watch)"),
        ("watch", "watch_cpu_s", "watch-phase CPU s"), ("watch", "cpu_us_per_event", "CPU µs/event"), ("sync", "client_cpu_s", "client CPU s (sync 100k)")]
cols = [c for c in cols if c[0] in workloads]
n = {w: len([r for r in rows if r["workload"] == w]) // max(1, len(keys)) for w in workloads}
opts = sorted({r.get("server_opts", "") for r in rows})
print(f"\nmedians of {', '.join(f'{k} runs ({w})' for w, k in n.items())}; "
      f"server options: {', '.join(o or 'none' for o in opts)}\n")
def fmt(k, v):
    if v is None: return "–"
    if k in ("get_us_median", "client_cpu_s"): return f"{v:.1f}"
    if k == "watch_cpu_s": return f"{v:.2f}"
    return f"{v/1024:.0f}" if k == "max_rss_kb" else f"{v:.0f}"
print("| peer | allocator | " + " | ".join(c[2] for c in cols) + " |")
print("|---" * (len(cols) + 2) + "|")
for key in keys:
    print(f"| {key[0]} | {key[1]} | " + " | ".join(fmt(k, med(key, w, k)) for w, k, _ in cols) + " |")
stops = [r["stop_us"] for r in rows if "stop_us" in r and r["peer"] == "kube-watcher"]
for base in [k for k in keys if k[0].startswith("kube-watcher")]:
  # client-go's allocator is Go's own: compare it with every kube-watcher build.
  for other in [k for k in keys if (k[0].startswith("kube-rs") and k[1] == base[1]) or k[0].startswith("client-go")]:
    def ratio(w, k):
        a, b = med(base, w, k), med(other, w, k)
        return f"{a/b:.2f}" if a is not None and b else "–"
    print(f"\nratios {base[0]} / {other[0]} ({base[1]}): events/s {ratio('watch','events_per_s')}, "
          f"sync time {ratio('sync','initial_sync_ms')}, peak RSS 100k {ratio('sync','max_rss_kb')}, "
          f"peak RSS 10k {ratio('watch','max_rss_kb')}, client CPU watch {ratio('watch','client_cpu_s')}, "
          f"watch-phase CPU {ratio('watch','watch_cpu_s')}, CPU/event {ratio('watch','cpu_us_per_event')}, "
          f"client CPU sync {ratio('sync','client_cpu_s')}")
if stops:
    print(f"\nkube-watcher stop() while idle in a watch: median {statistics.median(stops):.0f} µs "
          f"(min {min(stops)}, max {max(stops)}, {len(stops)} runs)")
EOF
