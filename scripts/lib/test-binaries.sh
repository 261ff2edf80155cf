#!/usr/bin/env bash
# Usage: scripts/lib/test-binaries.sh JOBS CARGO_TEST_ARGS...
#
# What `cargo test CARGO_TEST_ARGS` does, with the test binaries run JOBS at a time instead of
# one after another: most of them spend their time waiting on PostgreSQL servers they start,
# so two cores take two at once. Binaries that load the whole machine (listed in SOLO) run
# alone afterwards, so their timing and their thousands of sockets meet no neighbour. Binaries
# named in SKIP do not run (a second pass over another PostgreSQL version leaves out those that
# test pgvia under load rather than PostgreSQL's behaviour). Each binary runs in its package's
# directory, as cargo runs it; its output is printed whole when it ends, with cargo's `Running`
# line first, so the `test result:` lines read as cargo's.
# Doc-tests run last, through cargo. Exits non-zero if any binary failed.
set -uo pipefail
jobs=$1
shift
# Binaries run one at a time, after the others: file-descriptor and port floods, load
# measurements, fault injection.
SOLO=${SOLO:-"bounds pgbench faults robustness sharding_copy sharding_ids"}
SKIP=${SKIP:-}
# The longest of the others (20-60 s each in a warm run against PostgreSQL 15) start first, so
# the run does not end with one of them alone on a core while the other core idles. Order only:
# a name missing from here still runs, in cargo's order after these.
FIRST=${FIRST:-"sharding_corpus transaction_pooling read_write_split merge_diff prepared_statements leaving merge_spill auth_query sharding postgres_hash admin hidden_effects"}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cargo test "$@" --no-run --message-format=json-render-diagnostics >"$work/build.json" || exit 1
python3 - "$work/build.json" >"$work/list" <<'PY'
import json, os, sys
for line in open(sys.argv[1]):
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") != "compiler-artifact" or not m.get("profile", {}).get("test") or not m.get("executable"):
        continue
    target = m["target"]
    print("\t".join([m["executable"], os.path.dirname(m["manifest_path"]), target["name"], target["src_path"]]))
PY

run_one() {
    local exe=$1 dir=$2 name=$3 src=$4 out
    out=$(mktemp -p "$work")
    local started
    started=$(date +%s)
    (cd "$dir" && CARGO_MANIFEST_DIR=$dir CARGO=${CARGO:-cargo} "$exe" >"$out" 2>&1)
    local status=$?
    {
        printf '     Running %s (%s)\n' "${src#"$dir"/}" "$exe"
        cat "$out"
        # Wall time with its neighbour, for ordering FIRST (cargo's own figure is on the result line).
        printf 'test-binaries: %s ran %d s, ending at +%d s\n' "$name" "$(($(date +%s) - started))" "$(($(date +%s) - run_start))"
    } >"$out.done"
    # One writer at a time, so two binaries' outputs never interleave.
    flock "$work/print.lock" cat "$out.done"
    return $status
}
export -f run_one
export work
run_start=$(date +%s)
export run_start

# Whether binary $2 is named in the list $1.
listed() {
    local n
    for n in $1; do [[ $2 == "$n" ]] && return 0; done
    return 1
}

: >"$work/first"
: >"$work/parallel"
: >"$work/solo"
while IFS=$'\t' read -r exe dir name src; do
    line=$(printf '%s\t%s\t%s\t%s' "$exe" "$dir" "$name" "$src")
    if listed "$SKIP" "$name"; then
        printf 'test-binaries: %s skipped (SKIP)\n' "$name"
    elif listed "$SOLO" "$name"; then
        echo "$line" >>"$work/solo"
    elif listed "$FIRST" "$name"; then
        echo "$line" >>"$work/first"
    else
        echo "$line" >>"$work/parallel"
    fi
done <"$work/list"
# FIRST's own order, then the rest.
for n in $FIRST; do
    awk -F'\t' -v n="$n" '$3 == n' "$work/first"
done | cat - "$work/parallel" >"$work/ordered"

status=0
tr '\t' '\037' <"$work/ordered" |
    xargs -d '\n' -P "$jobs" -I{} bash -c 'IFS=$'"'"'\037'"'"' read -r exe dir name src <<<"$1"; run_one "$exe" "$dir" "$name" "$src"' _ {} ||
    status=1
while IFS=$'\t' read -r exe dir name src; do
    run_one "$exe" "$dir" "$name" "$src" || status=1
done <"$work/solo"
cargo test "$@" --doc || status=1
exit $status
