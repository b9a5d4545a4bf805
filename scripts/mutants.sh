#!/usr/bin/env bash
# Mutation check of the real-server suite (tests/real/): each patch in scripts/mutants/ breaks
# the library (or the fake, or the suite's own layout) on purpose, in a small way a real bug
# could; the suite is run against the running bed with each break in turn, and every test must
# fail under at least one of them, every break must make at least one test fail.
#
#   scripts/mutants.sh                 every mutation; then the table test -> mutations
#   scripts/mutants.sh NAME...         only these (scripts/mutants/NAME.patch)
#   scripts/mutants.sh --list          the mutations and what each breaks
#   scripts/mutants.sh --check         only whether every patch still applies to this tree
#                                      (no bed, no build: seconds)
#   scripts/mutants.sh --build [NAME...]
#                                      whether every patch (or these) applies and compiles: the
#                                      copy (below) with each applied in turn gets `cargo check
#                                      --test real`, what the suite builds (the library with the
#                                      fake, and tests/real). No bed; part of .ci/run
#   MUTANTS_THREADS=N                  the suite's test threads (default 4)
#
# A run (not --list, --check or --build) needs a bed that is up (scripts/apiserver.sh up;
# KUBE_WATCHER_TESTBED, default target/testbed).
# The work tree is never changed: the tree (its tracked and new files) is copied to
# target/mutants/tree, each patch is applied there and taken back after its run, and cargo
# builds the copy into a target directory of its own, target/mutants/target. (Not this tree's:
# cargo names a workspace's artifacts by paths relative to its root and decides freshness by
# mtimes, so a copy building into the same directory would hand its mutated binaries to this
# tree's next `cargo test`.) The first run seeds that directory with a copy of target/debug's
# dependencies (their `cargo check` artifacts too, when the tree has them), so only the crate
# itself is built. Interrupted, it leaves at most the copy behind, which the next run replaces.
# Each mutation costs a build of the crate and a run of the suite (about 2–3 minutes on the
# 2-core machine), so it is not part of CI: run it after changing tests/real/ or what they test.
# CONTRIBUTING.md ("What the real suite catches") has the last table.
#
# A patch that still applies may no longer compile (the code around its lines changed: one
# passed `true` where a function had come to take an enum), and a run would only say so when
# its turn came; --build finds it first. It costs a check of the crate a patch, about 1.5 s
# with incremental compilation, which it turns on for the copy whatever the caller's setting
# (all 55 patches: 78-102 s on the 2-core machine at load 2-4; 273 s without), and about
# 360 MB in target/mutants (the seeded dependencies' check artifacts 250 MB, the crate's
# incremental cache 100 MB).
#
# Exit status: 0 when every mutation applied, built and was caught by some test, and (when all
# ran) every test caught some mutation; with --build, 0 when every patch applied and compiled;
# 1 otherwise. Per-mutation logs: target/mutants/logs/ (NAME.log; NAME.check.log of --build).
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
patches="$repo/scripts/mutants"
work="$repo/target/mutants"
tree="$work/tree"
logs="$work/logs"
export KUBE_WATCHER_TESTBED="${KUBE_WATCHER_TESTBED:-$repo/target/testbed}"
export CARGO_TARGET_DIR="$work/target"

die() { echo "mutants.sh: $*" >&2; exit 1; }

describe() { head -n 1 "$1" | sed 's/^Mutation: //'; }

if [ "${1:-}" = "--list" ]; then
    for p in "$patches"/*.patch; do
        printf '%-38s %s\n' "$(basename "$p" .patch)" "$(describe "$p")"
    done
    exit 0
fi

mode=run
if [ "${1:-}" = "--build" ]; then
    mode=build
    shift
fi

if [ "${1:-}" = "--check" ]; then
    stale=0
    for p in "$patches"/*.patch; do
        if ! (cd "$repo" && git apply --check "$p" 2> /dev/null); then
            echo "mutants.sh: $(basename "$p" .patch) no longer applies: make it again for the current source" >&2
            stale=1
        fi
    done
    exit $stale
fi

[ $mode = build ] || [ -f "$KUBE_WATCHER_TESTBED/run/apiserver.port" ] ||
    die "no bed is up at $KUBE_WATCHER_TESTBED: scripts/apiserver.sh up first"

if [ ! -d "$CARGO_TARGET_DIR/debug/deps" ] && [ -d "$repo/target/debug/deps" ]; then
    echo "mutants.sh: seeding $CARGO_TARGET_DIR with target/debug's dependencies" >&2
    mkdir -p "$CARGO_TARGET_DIR/debug"
    cp -a "$repo/target/debug/deps" "$repo/target/debug/build" "$repo/target/debug/.fingerprint" \
        "$CARGO_TARGET_DIR/debug/"
fi

names=("$@")
all=false
if [ ${#names[@]} -eq 0 ]; then
    all=true
    for p in "$patches"/*.patch; do names+=("$(basename "$p" .patch)"); done
fi
for n in "${names[@]}"; do [ -f "$patches/$n.patch" ] || die "no such mutation: $n"; done

applied=""
cleanup() {
    # The copy is the only thing changed: take the patch back (or drop the copy).
    if [ -n "$applied" ]; then
        (cd "$tree" && git apply -R "$patches/$applied.patch" 2> /dev/null) || rm -rf "$tree"
    fi
}
trap cleanup EXIT
trap 'echo "mutants.sh: interrupted" >&2; exit 130' INT TERM

# A fresh copy of the work tree as it is now (committed or not, ignored files left out). Its
# files get the time of the copy (tar -m), newer than anything built before, so that cargo
# builds the crate afresh: with this tree's times, the last run's build (with its last mutation
# applied) or this tree's seeded one would read as up to date.
rm -rf "$tree"
mkdir -p "$tree" "$logs"
(cd "$repo" && git ls-files -z --cached --others --exclude-standard |
    tar --null --ignore-failed-read -T - -cf - 2> /dev/null) | tar -xmf - -C "$tree"
# A repository of its own, so that `git apply` there works relative to the copy's root.
(cd "$tree" && git init -q)

if [ $mode = build ]; then
    # `cargo check --test real`: what the suite's `cargo test --test real` builds (the library
    # with the features the suite turns on, and tests/real), without code generation.
    # Incremental: the header says what it saves and costs.
    export CARGO_INCREMENTAL=1
    check() { (cd "$tree" && nice -n 10 cargo check --test real > "$1" 2>&1); }
    started=$SECONDS
    check "$logs/baseline.check.log" ||
        die "the copy does not compile without a mutation (log: $logs/baseline.check.log)"
    stale=0
    for n in "${names[@]}"; do
        p="$patches/$n.patch"
        log="$logs/$n.check.log"
        if ! (cd "$tree" && git apply --check "$p" 2> "$log"); then
            echo "mutants.sh: $n no longer applies ($(head -n 1 "$log")): make it again for the current source" >&2
            stale=$((stale + 1))
            continue
        fi
        (cd "$tree" && git apply "$p")
        applied="$n"
        if ! check "$log"; then
            echo "mutants.sh: $n applies but does not compile ($(grep -m 1 '^error' "$log"); log: $log): make it again for the current source" >&2
            stale=$((stale + 1))
        fi
        (cd "$tree" && git apply -R "$p")
        applied=""
    done
    echo "mutants.sh: patches checked: ${#names[@]}, stale: $stale ($((SECONDS - started)) s)" >&2
    exit $((stale > 0))
fi

run_suite() { # LOG: the suite in the copy; the names of the failed tests on stdout
    local log="$1"
    # More threads than cores: a mutant's failing tests mostly wait (up to the suite's 20 s).
    if ! (cd "$tree" && nice -n 10 cargo test --test real -- --test-threads="${MUTANTS_THREADS:-4}" > "$log" 2>&1); then
        grep -q '^test result:' "$log" || return 2 # did not build, or the binary died
    fi
    sed -n 's/^test \([^ ]*\) \.\.\. FAILED$/\1/p' "$log" | sort
}

echo "mutants.sh: the suite without a mutation first" >&2
if ! failed=$(run_suite "$logs/baseline.log") || [ -n "$failed" ]; then
    die "the suite fails without a mutation (log: $logs/baseline.log): ${failed:-did not build}"
fi
tests=$(sed -n 's/^test \([^ ]*\) \.\.\. ok$/\1/p' "$logs/baseline.log" | sort)

status=0
declare -A killers
summary="$work/summary.txt"
: > "$summary"
for n in "${names[@]}"; do
    p="$patches/$n.patch"
    if ! (cd "$tree" && git apply --check "$p" 2> "$logs/$n.log"); then
        echo "$n: DOES NOT APPLY ($(head -n 1 "$logs/$n.log"))" | tee -a "$summary"
        status=1
        continue
    fi
    (cd "$tree" && git apply "$p")
    applied="$n"
    echo "mutants.sh: $n: $(describe "$p")" >&2
    rc=0
    failed=$(run_suite "$logs/$n.log") || rc=$?
    (cd "$tree" && git apply -R "$p")
    applied=""
    if [ $rc -ne 0 ]; then
        echo "$n: DOES NOT BUILD (log: $logs/$n.log)" | tee -a "$summary"
        status=1
    elif [ -z "$failed" ]; then
        echo "$n: SURVIVED (no test failed: a hole in the suite)" | tee -a "$summary"
        status=1
    else
        echo "$n: killed by $(echo "$failed" | tr '\n' ' ')" | tee -a "$summary"
        for t in $failed; do killers[$t]="${killers[$t]:-} $n"; done
    fi
done

echo
echo "| test | killed by |"
echo "|---|---|"
for t in $tests; do
    echo "| \`$t\` | ${killers[$t]:-**none**} |"
    if $all && [ -z "${killers[$t]:-}" ]; then status=1; fi
done
exit $status
