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
#                                      (no bed, no build: seconds; part of .ci/run)
#   MUTANTS_THREADS=N                  the suite's test threads (default 4)
#
# Needs a bed that is up (scripts/apiserver.sh up; KUBE_WATCHER_TESTBED, default target/testbed).
# The work tree is never changed: the tree (its tracked and new files) is copied to
# target/mutants/tree, each patch is applied there and taken back after its run, and cargo
# builds the copy into a target directory of its own, target/mutants/target. (Not this tree's:
# cargo names a workspace's artifacts by paths relative to its root and decides freshness by
# mtimes, so a copy building into the same directory would hand its mutated binaries to this
# tree's next `cargo test`.) The first run seeds that directory with a copy of target/debug's
# dependencies, so only the crate itself is built. Interrupted, it leaves at most the copy
# behind, which the next run replaces. Each mutation costs a build of the crate and a run of the suite (about 2–3 minutes on
# the 2-core machine), so it is not part of CI: run it after changing tests/real/ or what they
# test. CONTRIBUTING.md ("What the real suite catches") has the last table.
#
# Exit status: 0 when every mutation applied, built and was caught by some test, and (when all
# ran) every test caught some mutation; 1 otherwise. Per-mutation logs: target/mutants/logs/.
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

[ -f "$KUBE_WATCHER_TESTBED/run/apiserver.port" ] ||
    die "no bed is up at $KUBE_WATCHER_TESTBED: scripts/apiserver.sh up first"

if [ ! -d "$CARGO_TARGET_DIR/debug/deps" ] && [ -d "$repo/target/debug/deps" ]; then
    echo "mutants.sh: seeding $CARGO_TARGET_DIR with target/debug's dependencies" >&2
    mkdir -p "$CARGO_TARGET_DIR/debug"
    cp -a "$repo/target/debug/deps" "$repo/target/debug/build" "$repo/target/debug/.fingerprint" \
        "$CARGO_TARGET_DIR/debug/"
    # This crate's own fingerprints would point at this tree's sources: build it afresh.
    rm -rf "$CARGO_TARGET_DIR"/debug/.fingerprint/kube-watcher-* "$CARGO_TARGET_DIR"/debug/.fingerprint/oracle-*
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

# A fresh copy of the work tree as it is now (committed or not, ignored files left out).
rm -rf "$tree"
mkdir -p "$tree" "$logs"
(cd "$repo" && git ls-files -z --cached --others --exclude-standard |
    tar --null --ignore-failed-read -T - -cf - 2> /dev/null) | tar -xf - -C "$tree"
# A repository of its own, so that `git apply` there works relative to the copy's root.
(cd "$tree" && git init -q)

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
