#!/usr/bin/env bash
# Usage: bench/shard.sh PGVIA [--rounds N] [--seconds S] [--copy ROWS] [--pool LINE] [PGBENCH_ARGS ...]
#
# One pgvia binary twice, side by side: in front of one PostgreSQL 15 ("single"), and in front of
# four PostgreSQL 15 shards with pgbench_accounts sharded by aid ("sharded"; the other pgbench
# tables omnisharded). Every server holds pgbench -i -s 2's rows, so a statement routed to one shard
# does the same work as on the single server; what differs is pgvia's routing. Transaction mode,
# pool of 20 per shard, trust authentication, fsync off. Each PGBENCH_ARGS (one quoted string per
# workload; default select-only simple and extended at 16 clients, and a single-shard
# read-write script) runs N rounds (default 5) of S seconds (default 5), the two interleaved, and
# prints per run TPS and pgvia's CPU seconds per 1,000 transactions (user + system ticks from
# /proc/<pid>/stat), then medians and sharded/single ratios. The issue's target: CPU per
# transaction within 1.1x.
#
# --copy ROWS adds the COPY comparison: ROWS rows of CSV (a pgbench_accounts-like table with a
# primary key, `copy_target`, sharded by aid) loaded with psql's \copy straight into the single
# PostgreSQL ("direct") and through the sharded pgvia into the four shards, N rounds
# interleaved, each into an emptied table; prints rows/s and the sharded/direct ratio (the
# issue's target: at least 0.8). --copy ROWS alone skips the pgbench workloads.
#
# --pool LINE adds a `key = value` line to both configurations' [pool] (repeatable), e.g.
# --pool 'max_prepared_statements = 0' for the sharded session without statements kept on the
# shard servers.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//'; }
(($# >= 1)) || { usage >&2; exit 2; }
pgvia=$(realpath "$1")
shift
rounds=5 secs=5 copy_rows=0 workloads=() pool_lines=()
while (($#)); do
    case $1 in
        --rounds) rounds=${2:?}; shift ;;
        --seconds) secs=${2:?}; shift ;;
        --copy) copy_rows=${2:?}; shift ;;
        --pool) pool_lines+=("${2:?}"); shift ;;
        -h | --help) usage; exit 0 ;;
        *) workloads+=("$1") ;;
    esac
    shift
done
[[ -x $pgvia ]] || { echo "shard.sh: $pgvia is not executable" >&2; exit 2; }
# shellcheck source=SCRIPTDIR/../scripts/lib/setup.sh
source scripts/lib/setup.sh
# shellcheck source=SCRIPTDIR/lib/stand.sh
source bench/lib/stand.sh
stand_workdir shard-bench
work=$stand_work
# A transaction on one shard: the key in Bind parameters (-M extended) or literals (-M simple).
cat >"$work/rw.sql" <<'SQL'
\set aid random(1, 200000)
\set delta random(-5000, 5000)
BEGIN;
UPDATE pgbench_accounts SET abalance = abalance + :delta WHERE aid = :aid;
SELECT abalance FROM pgbench_accounts WHERE aid = :aid;
END;
SQL
((${#workloads[@]} || copy_rows > 0)) || workloads=("-S -M simple -c 16 -j 2" "-S -M extended -c 16 -j 2" "-f $work/rw.sql -M extended -c 16 -j 2")

cargo build -q --release -p harness
declare -A port pid
start_pg() {
    local p
    p=$(stand_start_server "$1" --set fsync=off --set synchronous_commit=off --set max_prepared_transactions=20)
    pgbench -q -i -s 2 -h 127.0.0.1 -p "$p" -U bench bench >/dev/null 2>&1
    psql -X -q -h 127.0.0.1 -p "$p" -U bench bench \
        -c "CREATE TABLE copy_target (aid int PRIMARY KEY, bid int, abalance int, filler char(84))" >/dev/null
    echo "$p"
}
single_port=$(start_pg single)
shard_ports=()
for i in 0 1 2 3; do shard_ports+=("$(start_pg "$i")"); done

stand_pool_lines=("${pool_lines[@]}")
port[single]=$(stand_free_port)
{ stand_config_head "${port[single]}" 20; printf 'host = "127.0.0.1"\nport = %s\n' "$single_port"; } >"$work/single.toml"
port[sharded]=$(stand_free_port)
stand_database_lines=('unsharded_tables = "omnisharded"')
stand_sharded_config "${port[sharded]}" 20 pgbench_accounts:aid:integer copy_target:aid:integer \
    "${shard_ports[*]}" >"$work/sharded.toml"
for v in single sharded; do
    stand_spawn "$pgvia" --config "$work/$v.toml" >"$work/$v.log" 2>&1
    pid[$v]=$stand_pid
done
for v in single sharded; do stand_wait_port "${port[$v]}"; done

((${#workloads[@]} == 0)) || stand_interleave "single sharded" "$rounds" "$secs" "${workloads[@]}"

if ((copy_rows > 0)); then
    data=$work/copy.csv
    python3 -c "
import sys
out = open(sys.argv[1], 'w')
for i in range(1, int(sys.argv[2]) + 1):
    out.write(f'{i},{i % 20 + 1},0,filler {i}\\n')
" "$data" "$copy_rows"
    copy_results=$work/copy.tsv
    for r in $(seq "$rounds"); do
        for v in direct sharded; do
            # Emptied on every server directly, so the load is the only thing timed.
            for p in "$single_port" "${shard_ports[@]}"; do
                psql -X -q -h 127.0.0.1 -p "$p" -U bench bench -c "TRUNCATE copy_target" >/dev/null
            done
            target_port=$single_port
            [[ $v == sharded ]] && target_port=${port[sharded]}
            before=$(stand_cpu_ticks "${pid[sharded]}")
            t0=$(date +%s.%N)
            psql -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$target_port" -U bench bench \
                -c "\\copy copy_target FROM '$data' WITH (FORMAT csv)" >/dev/null
            t1=$(date +%s.%N)
            after=$(stand_cpu_ticks "${pid[sharded]}")
            # Every row loaded, and only once: counted on the servers themselves.
            loaded=0
            if [[ $v == direct ]]; then servers=("$single_port"); else servers=("${shard_ports[@]}"); fi
            for p in "${servers[@]}"; do
                n=$(psql -X -qAt -h 127.0.0.1 -p "$p" -U bench bench -c "SELECT count(*) FROM copy_target")
                loaded=$((loaded + n))
            done
            ((loaded == copy_rows)) || { echo "shard.sh: $v loaded $loaded rows of $copy_rows" >&2; exit 1; }
            rate=$(python3 -c "print(f'{$copy_rows / ($t1 - $t0):.0f}')")
            cpu=$(python3 -c "print(f'{($after - $before) / 100:.2f}')")
            printf 'copy %s\t%s\t%s\t%s\t%s\n' "$copy_rows" "$v" "$r" "$rate" "$cpu" | tee -a "$copy_results"
        done
    done
    python3 - "$copy_results" <<'PY'
import statistics, sys
from collections import defaultdict
runs = defaultdict(list)
for line in open(sys.argv[1]):
    _, v, _, rate, cpu = line.rstrip("\n").split("\t")
    runs[v].append((float(rate), float(cpu)))
rate = {v: statistics.median(r for r, _ in runs[v]) for v in runs}
cpu = statistics.median(c for _, c in runs["sharded"])
print("\nCOPY rows/s direct | through sharded pgvia | sharded/direct | pgvia CPU s per load")
print(f"{rate['direct']:.0f} | {rate['sharded']:.0f} | {rate['sharded'] / rate['direct']:.3f} | {cpu:.2f}")
PY
fi
