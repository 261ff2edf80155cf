#!/usr/bin/env bash
# Usage: bench/compare-builds.sh OLD_PGVIA NEW_PGVIA [--rounds N] [--seconds S] [--auth trust|scram]
#                                [--latency] [PGBENCH_ARGS ...]
#
# Two pgvia binaries side by side in front of one throwaway PostgreSQL 15 (fsync off,
# pgbench -i -s 10), transaction mode, pool of 20, trust authentication (--auth scram: the
# client logs in to pgvia and pgvia to PostgreSQL with SCRAM-SHA-256, a verifier of iteration
# count 1, as scripts/bench does; for logins, e.g. "-C -S -c 16 -j 2"). Each PGBENCH_ARGS
# (one quoted string per workload; default "-S -M simple -c 16 -j 2" and "-M simple -c 16 -j 2")
# runs N rounds (default 5) of S seconds (default 5), the builds interleaved (old, new, old,
# new, ...), and prints per run TPS and each pgvia's CPU seconds per 1,000 transactions (user +
# system ticks from /proc/<pid>/stat), then the medians and the new/old ratios; --latency adds
# each run's p99 latency from pgbench's per-transaction log (--log). For a change's
# before/after: build the old commit's release binary, copy it away, build the new one.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//'; }
(($# >= 2)) || { usage >&2; exit 2; }
declare -A bin=([old]=$(realpath "$1") [new]=$(realpath "$2"))
shift 2
rounds=5 secs=5 auth=trust workloads=() stand_latency=0
while (($#)); do
    case $1 in
        --rounds) rounds=${2:?}; shift ;;
        --seconds) secs=${2:?}; shift ;;
        --auth) auth=${2:?}; shift ;;
        --latency) stand_latency=1 ;;
        -h | --help) usage; exit 0 ;;
        *) workloads+=("$1") ;;
    esac
    shift
done
((${#workloads[@]})) || workloads=("-S -M simple -c 16 -j 2" "-M simple -c 16 -j 2")
for v in old new; do [[ -x ${bin[$v]} ]] || { echo "compare-builds: ${bin[$v]} is not executable" >&2; exit 2; }; done

[[ $auth == trust || $auth == scram ]] || { echo "compare-builds: --auth is trust or scram" >&2; exit 2; }

# shellcheck source=SCRIPTDIR/../scripts/lib/setup.sh
source scripts/lib/setup.sh
# shellcheck source=SCRIPTDIR/lib/stand.sh
source bench/lib/stand.sh
stand_workdir compare
work=$stand_work
declare -A port pid

stand_start_pg "$work" "$auth"
for v in old new; do stand_start_pgvia "$v" "${bin[$v]}"; done
for v in old new; do stand_wait_port "${port[$v]}"; done

stand_interleave "old new" "$rounds" "$secs" "${workloads[@]}"
