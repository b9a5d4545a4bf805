#!/usr/bin/env bash
# The real control plane on loopback: etcd and kube-apiserver built from their Go modules
# (testbed/), for the integration suite in tests/real/ and for trying the library against a
# real API server on your machine. Needs Go (testbed/go.mod names the version), openssl, curl, python3.
#
#   scripts/apiserver.sh [MINOR] build    build what is missing (Go's build cache makes a rebuild cheap)
#   scripts/apiserver.sh [MINOR] up       build, then start etcd and two kube-apiservers; prints `env`
#   scripts/apiserver.sh env              the exports that point a shell at the running bed
#   scripts/apiserver.sh down             stop every process of the bed and remove its state
#   scripts/apiserver.sh stop  etcd|apiserver|nogate    kill one process (SIGKILL: a crash)
#   scripts/apiserver.sh start etcd|apiserver|nogate    start it again on the same port and data
#   scripts/apiserver.sh compact          compact etcd to its current revision (old versions: 410)
#   scripts/apiserver.sh [MINOR] test [ARGS]   the suite (cargo test --test real ARGS) on a bed it
#                                         starts and stops (or on the one already up, which it leaves up)
#   scripts/apiserver.sh matrix [ARGS]    the suite on every minor in turn, one bed after the other
#   scripts/apiserver.sh minors           the Kubernetes minors it can run, oldest first
#   scripts/apiserver.sh modfile VERSION  write testbed/minors/MINOR.mod (and .sum) for k8s.io/kubernetes VERSION
#
# MINOR (`1.34`) picks the Kubernetes minor: the newest by default (KUBE_WATCHER_K8S too; a verb
# on a running bed uses the bed's). Each minor is its own module file: the newest is
# testbed/go.mod, each older one testbed/minors/MINOR.mod (with its go.sum beside it), which
# requires that minor's k8s.io/kubernetes and the etcd it pins, so each builds into bin/MINOR/.
#
# Two API servers share one etcd: `apiserver` runs with the alpha gate ShardedListAndWatch=true
# where the minor has it (1.36 on), `nogate` as an older server would: without it (shardSelector
# is ignored: the client-side fallback) and without WatchList (sendInitialEvents is refused: the
# paged-list fallback). Both serve TLS with a CA made at start-up, and accept:
#   - static tokens (tokens.csv): `kw-admin` in system:masters, `kw-restricted` with no RBAC grant;
#   - client certificates signed by that CA (admin-cert.kubeconfig: CN=kw-cert-admin, O=system:masters).
# Authorization is Node,RBAC; service-account tokens are signed with a key made at start-up.
# PodTemplates have no watch cache (--watch-cache-sizes=podtemplates#0): their watches and lists go
# to etcd, so a compaction makes an old resourceVersion or continue token expire at once.
#
# State lives in $KUBE_WATCHER_TESTBED (default target/testbed): bin/MINOR/ (the binaries), run/
# (certs, kubeconfigs, logs, pids, ports, etcd's data, the minor). `down` removes run/ and keeps bin/.
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
bed="${KUBE_WATCHER_TESTBED:-$repo/target/testbed}"
run="$bed/run"
testbed="$repo/testbed"

die() { echo "apiserver.sh: $*" >&2; exit 1; }

# The minors there is a module file for, oldest first.
minors() {
    {
        sed -n 's/^[[:space:]]*k8s\.io\/kubernetes v\(1\.[0-9]*\)\..*/\1/p' "$testbed/go.mod"
        for f in "$testbed"/minors/*.mod; do [ -f "$f" ] && basename "$f" .mod; done
    } | sort -t. -k2,2n -u
}

modfile_of() { # MINOR: its module file, relative to testbed/
    if [ -f "$testbed/minors/$1.mod" ]; then echo "minors/$1.mod"; else echo go.mod; fi
}

# Which minor: the argument before the verb, else KUBE_WATCHER_K8S, else the running bed's,
# else the newest.
minor=""
if [[ "${1:-}" =~ ^1\.[0-9]+$ ]]; then
    minor="$1"
    shift
fi
asked="${minor:-${KUBE_WATCHER_K8S:-}}"
minor="$asked"
[ -n "$minor" ] || minor=$(cat "$run/minor" 2> /dev/null || true)
[ -n "$minor" ] || minor=$(minors | tail -n 1)
minors | grep -qx "$minor" || die "no module file for Kubernetes $minor (testbed/minors/$minor.mod; have: $(minors | tr '\n' ' '))"
bin="$bed/bin/$minor"

need() {
    command -v "$1" > /dev/null || die "$1 is needed ($2)"
}

build() {
    need go "the Go toolchain builds kube-apiserver and etcd from testbed/"
    mkdir -p "$bin"
    local started=$SECONDS
    # `go build` relinks only what changed; with the module cache and build cache warm this takes
    # a few seconds. The first build of a minor downloads its modules and compiles kube-apiserver
    # (CONTRIBUTING.md has the times). leaderelect is that minor's client-go leader elector,
    # which tests/real/scale_out.rs runs beside the library's on one Lease.
    (cd "$testbed" && go build -modfile="$(modfile_of "$minor")" -o "$bin/" \
        k8s.io/kubernetes/cmd/kube-apiserver ./etcd ./compact ./leaderelect)
    echo "apiserver.sh: Kubernetes $minor binaries ready in $bin ($((SECONDS - started)) s)" >&2
}

# Writes testbed/minors/MINOR.mod for k8s.io/kubernetes VERSION (v1.34.4): the Go version and
# GODEBUG defaults kubernetes builds with, the etcd server it pins, and its staging modules
# pinned to the matching release (kubernetes names them v0.0.0 and replaces them with folders of
# its own tree; v1.34.4 -> v0.34.4). `go mod tidy` completes it and writes the go.sum beside it.
modfile() {
    local version="$1" mod
    [[ "$version" =~ ^v1\.([0-9]+)\.([0-9]+)$ ]] || die "modfile takes a version such as v1.34.4, not '$version'"
    local m="1.${BASH_REMATCH[1]}" staging="v0.${BASH_REMATCH[1]}.${BASH_REMATCH[2]}"
    mod=$(cd "$testbed" && go mod download -json "k8s.io/kubernetes@$version" |
        python3 -c 'import json, sys; print(json.load(sys.stdin)["GoMod"])')
    local out="$testbed/minors/$m.mod"
    mkdir -p "$testbed/minors"
    {
        echo "// kube-apiserver $version for scripts/apiserver.sh, written by its modfile verb (see go.mod)."
        echo "module kube-watcher/testbed"
        echo
        grep -m 1 '^go ' "$mod"
        grep -m 1 '^godebug ' "$mod" || true
        echo
        echo "require go.etcd.io/etcd/server/v3 $(awk '$1 == "go.etcd.io/etcd/server/v3" { print $2; exit }' "$mod")"
        echo
        echo "require k8s.io/kubernetes $version"
        echo
        echo "tool k8s.io/kubernetes/cmd/kube-apiserver"
        echo
        echo "replace ("
        sed -n '/^replace (/,/^)/p' "$mod" |
            awk -v v="$staging" '$2 == "=>" && $3 ~ /^\.\/staging\// { printf "\t%s => %s %s\n", $1, $1, v }'
        echo ")"
    } > "$out"
    rm -f "${out%.mod}.sum"
    (cd "$testbed" && go mod tidy -modfile="minors/$m.mod")
    echo "apiserver.sh: wrote $out" >&2
}

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

alive() { # NAME: true while its recorded process runs
    [ -f "$run/$1.pid" ] && kill -0 "$(cat "$run/$1.pid")" 2> /dev/null
}

port_of() { cat "$run/$1.port"; }

certs() {
    need openssl "it makes the bed's CA and certificates"
    local c="$run/certs"
    mkdir -p "$c"
    openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj "/CN=kube-watcher-testbed-ca" \
        -keyout "$c/ca.key" -out "$c/ca.crt" 2> /dev/null
    # The serving certificate: 127.0.0.1 and localhost.
    openssl req -newkey rsa:2048 -nodes -subj "/CN=kube-apiserver" \
        -keyout "$c/server.key" -out "$c/server.csr" 2> /dev/null
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n' > "$c/server.ext"
    openssl x509 -req -in "$c/server.csr" -CA "$c/ca.crt" -CAkey "$c/ca.key" -CAcreateserial \
        -days 30 -extfile "$c/server.ext" -out "$c/server.crt" 2> /dev/null
    # A client certificate of a cluster administrator (the group is the certificate's O).
    openssl req -newkey rsa:2048 -nodes -subj "/O=system:masters/CN=kw-cert-admin" \
        -keyout "$c/admin.key" -out "$c/admin.csr" 2> /dev/null
    printf 'extendedKeyUsage=clientAuth\n' > "$c/client.ext"
    openssl x509 -req -in "$c/admin.csr" -CA "$c/ca.crt" -CAkey "$c/ca.key" -CAcreateserial \
        -days 30 -extfile "$c/client.ext" -out "$c/admin.crt" 2> /dev/null
    # Service-account token signing.
    openssl genrsa -out "$c/sa.key" 2048 2> /dev/null
    openssl rsa -in "$c/sa.key" -pubout -out "$c/sa.pub" 2> /dev/null
    # Static tokens: token,user,uid,"groups".
    local admin restricted
    admin="kw-admin-$(openssl rand -hex 16)"
    restricted="kw-restricted-$(openssl rand -hex 16)"
    printf '%s,kw-admin,kw-admin-uid,"system:masters"\n%s,kw-restricted,kw-restricted-uid\n' \
        "$admin" "$restricted" > "$c/tokens.csv"
    printf '%s' "$admin" > "$run/admin.token"
    printf '%s' "$restricted" > "$run/restricted.token"
    chmod 600 "$c"/*.key "$c/tokens.csv" "$run"/*.token
}

kubeconfig() { # FILE PORT USER-LINES...
    local file="$1" port="$2"
    shift 2
    {
        echo "apiVersion: v1"
        echo "kind: Config"
        echo "clusters:"
        echo "- name: testbed"
        echo "  cluster:"
        echo "    server: https://127.0.0.1:$port"
        echo "    certificate-authority: $run/certs/ca.crt"
        echo "users:"
        echo "- name: user"
        echo "  user:"
        for line in "$@"; do echo "    $line"; done
        echo "contexts:"
        echo "- name: testbed"
        echo "  context: {cluster: testbed, user: user, namespace: default}"
        echo "current-context: testbed"
    } > "$file"
}

start_etcd() {
    local client peer
    client=$(port_of etcd)
    peer=$(port_of etcd-peer)
    "$bin/etcd" --data-dir "$run/etcd" --listen-client-url "http://127.0.0.1:$client" \
        --listen-peer-url "http://127.0.0.1:$peer" >> "$run/etcd.log" 2>&1 &
    echo $! > "$run/etcd.pid"
    wait_for "etcd" "curl -fsS http://127.0.0.1:$client/health"
}

knows_gate() { # GATE: whether this minor's kube-apiserver has the feature gate
    # (its --help lists every gate as `kube:NAME=true|false (STAGE - default=...)`)
    local help
    help=$("$bin/kube-apiserver" --help 2>&1 || true)
    grep -q "[[:space:]:]$1=true|false" <<< "$help"
}

start_apiserver() { # NAME (apiserver | nogate)
    local name="$1" shard=false
    # Sharded lists and watches are alpha from 1.36; an older minor's `apiserver` runs without.
    knows_gate ShardedListAndWatch && shard=true
    # `apiserver` keeps the minor's defaults but for that gate; `nogate` stands for an older
    # server: no sharded lists and watches, no streaming lists.
    local gates=""
    $shard && gates="--feature-gates=ShardedListAndWatch=true"
    if [ "$name" = nogate ]; then
        gates="--feature-gates=WatchList=false"
        $shard && gates="$gates,ShardedListAndWatch=false"
    fi
    local c="$run/certs"
    # shellcheck disable=SC2086
    "$bin/kube-apiserver" \
        --etcd-servers="http://127.0.0.1:$(port_of etcd)" \
        --etcd-compaction-interval=0 \
        --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$(port_of "$name")" \
        --tls-cert-file="$c/server.crt" --tls-private-key-file="$c/server.key" \
        --client-ca-file="$c/ca.crt" --token-auth-file="$c/tokens.csv" \
        --authorization-mode=Node,RBAC \
        --service-account-issuer=https://kubernetes.default.svc.cluster.local \
        --service-account-key-file="$c/sa.pub" --service-account-signing-key-file="$c/sa.key" \
        --service-cluster-ip-range=10.96.0.0/16 \
        --disable-admission-plugins=ServiceAccount --endpoint-reconciler-type=none \
        --watch-cache-sizes=podtemplates#0 \
        --profiling=false \
        $gates >> "$run/$name.log" 2>&1 &
    echo $! > "$run/$name.pid"
    wait_for "$name" "curl -fsS --cacert $c/ca.crt -H @$run/auth.header https://127.0.0.1:$(port_of "$name")/readyz"
}

wait_for() { # NAME COMMAND: up to 60 s for COMMAND to succeed while NAME's process lives
    local name="$1" check="$2" started=$SECONDS
    until $check > /dev/null 2>&1; do
        alive "$name" || { tail -n 30 "$run/$name.log" >&2; die "$name exited (log: $run/$name.log)"; }
        [ $((SECONDS - started)) -lt 60 ] || die "$name not ready after 60 s (log: $run/$name.log)"
        sleep 0.2
    done
    echo "apiserver.sh: $name ready in $((SECONDS - started)) s" >&2
}

stop_one() { # NAME [SIGNAL]
    local name="$1" signal="${2:-KILL}"
    [ -f "$run/$name.pid" ] || return 0
    local pid
    pid=$(cat "$run/$name.pid")
    kill "-$signal" "$pid" 2> /dev/null || true
    # wait until it is gone (not our child when called from another shell)
    local i=0
    while kill -0 "$pid" 2> /dev/null && [ $i -lt 300 ]; do sleep 0.05; i=$((i + 1)); done
    rm -f "$run/$name.pid"
}

up() {
    need curl "it asks the servers whether they are ready"
    need python3 "it finds free loopback ports"
    if alive apiserver && alive nogate && alive etcd; then
        echo "apiserver.sh: already running (Kubernetes $(cat "$run/minor"))" >&2
        env_lines
        return
    fi
    down > /dev/null 2>&1 || true
    build
    local started=$SECONDS
    mkdir -p "$run"
    echo "$minor" > "$run/minor"
    certs
    printf 'Authorization: Bearer %s' "$(cat "$run/admin.token")" > "$run/auth.header"
    for name in etcd etcd-peer apiserver nogate; do free_port > "$run/$name.port"; done
    start_etcd
    start_apiserver apiserver
    start_apiserver nogate
    kubeconfig "$run/admin.kubeconfig" "$(port_of apiserver)" "tokenFile: $run/admin.token"
    kubeconfig "$run/nogate.kubeconfig" "$(port_of nogate)" "tokenFile: $run/admin.token"
    kubeconfig "$run/restricted.kubeconfig" "$(port_of apiserver)" "tokenFile: $run/restricted.token"
    kubeconfig "$run/cert.kubeconfig" "$(port_of apiserver)" \
        "client-certificate: $run/certs/admin.crt" "client-key: $run/certs/admin.key"
    echo "apiserver.sh: Kubernetes $minor up in $((SECONDS - started)) s" >&2
    env_lines
}

env_lines() {
    echo "export KUBE_WATCHER_TESTBED=$bed"
    echo "export KUBECONFIG=$run/admin.kubeconfig"
}

down() {
    for name in nogate apiserver etcd; do stop_one "$name" TERM; done
    # anything left of ours (a start that failed half-way), of whichever minor
    pkill -KILL -f "^$bed/bin/" 2> /dev/null || true
    rm -rf "$run"
    echo "apiserver.sh: down" >&2
}

compact() {
    "$bin/compact" "http://127.0.0.1:$(port_of etcd)"
}

running() { alive apiserver && alive nogate && alive etcd; }

# A bed of another minor than the one asked for is up: stop it first (one bed at a time).
not_another() {
    if running && [ -n "$asked" ] && [ "$(cat "$run/minor")" != "$asked" ]; then
        die "a Kubernetes $(cat "$run/minor") bed is up: scripts/apiserver.sh down first"
    fi
}

# The suite on every minor, one bed after the other; a summary line for each.
matrix() {
    running && die "a bed is up: scripts/apiserver.sh down first (matrix starts one per minor)"
    local m failed="" summary=""
    for m in $(minors); do
        local started=$SECONDS rc=0
        echo "apiserver.sh: matrix: Kubernetes $m" >&2
        KUBE_WATCHER_K8S="$m" "$0" test "$@" || rc=$?
        summary="$summary\n  Kubernetes $m: $([ $rc = 0 ] && echo passed || echo FAILED) ($((SECONDS - started)) s)"
        [ $rc = 0 ] || failed="$failed $m"
    done
    echo -e "apiserver.sh: matrix:$summary" >&2
    [ -z "$failed" ] || die "the suite failed on Kubernetes$failed"
}

case "${1:-}" in
    build) build ;;
    minors) minors ;;
    modfile) modfile "${2:?modfile takes a k8s.io/kubernetes version, such as v1.34.4}" ;;
    matrix)
        shift
        matrix "$@"
        ;;
    up)
        not_another
        up
        ;;
    env) alive apiserver || die "not running (scripts/apiserver.sh up)"; env_lines ;;
    down) down ;;
    stop) stop_one "${2:?stop what: etcd, apiserver or nogate}" KILL ;;
    start)
        case "${2:-}" in
            etcd) start_etcd ;;
            apiserver | nogate) start_apiserver "$2" ;;
            *) die "start what: etcd, apiserver or nogate" ;;
        esac
        ;;
    compact) compact ;;
    test)
        shift
        not_another
        # A bed this run starts is stopped whatever happens; one that was already up stays up.
        if ! running; then
            trap 'down > /dev/null 2>&1' EXIT
        fi
        up > /dev/null
        KUBE_WATCHER_TESTBED="$bed" cargo test --test real "$@"
        ;;
    *) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
