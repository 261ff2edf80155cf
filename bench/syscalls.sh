#!/usr/bin/env bash
# Usage: bench/syscalls.sh [--seconds S] PGVIA [PGBENCH_ARGS ...]
#
# System calls per transaction of PgBouncer (Debian's, trust, transaction mode, pool of 20) and
# of a pgvia binary (the same pool), one after the other in front of one throwaway PostgreSQL 15
# (bench/lib/stand.sh): for each pgbench workload (one quoted string each; default
# "-S -M simple -c 1 -j 1" and "-S -M simple -c 16 -j 2") each pooler is warmed up for 2 s, then
# `strace -c -f` is attached to it for a pgbench run of S seconds (default 4), and the count of
# each system call is divided by the transactions pgbench made. strace slows the traced process
# severalfold, so the counts are the result, not the TPS; with -C a transaction is a login, a
# query and the exit. This is how the extra read per round trip of session 12 was found (see
# docs/benchmarks.md).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//'; }
secs=4 pgvia= workloads=()
while (($#)); do
    case $1 in
        --seconds) secs=${2:?}; shift ;;
        -h | --help) usage; exit 0 ;;
        *) if [[ -z $pgvia ]]; then pgvia=$(realpath "$1"); else workloads+=("$1"); fi ;;
    esac
    shift
done
[[ -n $pgvia ]] || { usage >&2; exit 2; }
((${#workloads[@]})) || workloads=("-S -M simple -c 1 -j 1" "-S -M simple -c 16 -j 2")

# shellcheck source=SCRIPTDIR/../scripts/lib/setup.sh
source scripts/lib/setup.sh
# shellcheck source=SCRIPTDIR/lib/stand.sh
source bench/lib/stand.sh
command -v strace >/dev/null || _setup_apt_install strace
stand_workdir syscalls
work=$stand_work
declare -A port pid

stand_start_pg "$work" trust
stand_start_pgbouncer pgbouncer
stand_start_pgvia pgvia "$pgvia"
for v in pgbouncer pgvia; do stand_wait_port "${port[$v]}"; done

for w in "${workloads[@]}"; do
    for v in pgbouncer pgvia; do
        # shellcheck disable=SC2086 # the workload is pgbench's words
        pgbench -h 127.0.0.1 -p "${port[$v]}" -U bench -T 2 $w bench >/dev/null 2>&1
        strace -c -f -p "${pid[$v]}" -o "$work/strace.$v" 2>/dev/null &
        tracer=$!
        sleep 0.5
        # shellcheck disable=SC2086
        tx=$(pgbench -h 127.0.0.1 -p "${port[$v]}" -U bench -T "$secs" $w bench 2>/dev/null |
            sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p')
        kill -INT "$tracer"
        wait "$tracer" 2>/dev/null || true
        echo "== $v, pgbench $w: $tx transactions; system calls per transaction"
        awk -v tx="$tx" '
            $NF == "total" { printf "  %-14s %6.2f\n", "all", $4 / tx; next }
            $1 ~ /^[0-9.]+$/ && NF >= 5 {
                calls = $4
                if (calls / tx >= 0.005) printf "  %-14s %6.2f\n", $NF, calls / tx
            }' "$work/strace.$v" | sort -k2 -n -r
    done
done
