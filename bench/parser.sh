#!/usr/bin/env bash
# Usage: bench/parser.sh [criterion options...]
#
# The parser benchmark: pg_query::parse, pg_query::fingerprint, pgvia's route analysis
# (cold) and its cache (hit) on the corpus in bench/corpus/, single-threaded. pg_query and
# route cannot be linked into one binary, so they run as two bench binaries one after the
# other in the same invocation; the report then prints time and queries/second per class,
# each engine's speed relative to pg_query::parse from this run, and allocations per query.
# Extra arguments go to both criterion binaries (e.g. `--measurement-time 10`, or a filter
# such as `orm`). Results land in $CARGO_TARGET_DIR/parser-bench (criterion's JSON included).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
target=${CARGO_TARGET_DIR:-$PWD/target}
out=$target/parser-bench
rm -rf "$out"
mkdir -p "$out"
export PARSER_BENCH_OUT=$out CRITERION_HOME=$out/criterion

opts=(--warm-up-time 1 --measurement-time 3 --noplot "$@")
cargo bench -p parser-bench --bench pg_query -- "${opts[@]}" >"$out/pg_query.log" 2>&1 \
    || { cat "$out/pg_query.log" >&2; exit 1; }
cargo bench -p parser-bench --bench route -- "${opts[@]}" >"$out/route.log" 2>&1 \
    || { cat "$out/route.log" >&2; exit 1; }

cpu=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)
echo "Measured $(date -u +%Y-%m-%d) with \`bench/parser.sh${*:+ $*}\`"
echo "on $(nproc) cores of ${cpu:-an unknown CPU}, $(uname -sr), $(rustc --version | cut -d' ' -f1-2)."
echo
cargo run -q --release -p parser-bench --bin parser-report
