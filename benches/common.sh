# Shell helpers that benches/compare.sh and benches/real.sh source (not run on its own).

# start_bench_server LOG ARGS...: starts `$kw_bin --serve ARGS` in the background, its output to
# LOG; sets `bench_server_pid`, and `bench_server_url` once the server has printed its URL
# (exits the calling script if it does not within 60 s).
start_bench_server() {
    local log=$1
    shift
    "$kw_bin" --serve "$@" > "$log" 2>&1 &
    bench_server_pid=$!
    bench_server_url=""
    for _ in $(seq 1 600); do
        bench_server_url=$(grep -m1 '^http://' "$log" || true)
        [ -n "$bench_server_url" ] && return 0
        sleep 0.1
    done
    echo "bench server did not start: $(cat "$log")" >&2
    exit 1
}

# cpu_s PID: CPU seconds (user + system) used so far by a process.
cpu_s() { awk -v hz="$(getconf CLK_TCK)" '{ sub(/.*\) /, ""); print ($12 + $13) / hz }' "/proc/$1/stat"; }

# with_client_cpu CMD...: runs a peer, prints its JSON line with `client_cpu_s` added: its own
# CPU time (user + system, all its threads), whatever the peer, from its rusage as a child.
with_client_cpu() {
    python3 -c 'import resource, subprocess, sys
p = subprocess.run(sys.argv[1:], stdout=subprocess.PIPE)
if p.returncode: sys.exit(p.returncode)
u = resource.getrusage(resource.RUSAGE_CHILDREN)
print(p.stdout.decode().strip().rstrip("}") + ",\"client_cpu_s\":%.3f}" % (u.ru_utime + u.ru_stime))' "$@"
}
