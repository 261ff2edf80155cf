#!/usr/bin/env bash
# Usage: bench/merge.sh PGVIA [--rounds N] [--runs K] [--rows R]
#
# Cross-shard merges on R rows (default 10,000,000): four PostgreSQL 15 shards, each holding the
# rows PostgreSQL's hash partitioning (modulus 4, pgvia's own sharding function) gives it, behind
# one pgvia ("pgvia"), and one PostgreSQL holding every row, queried directly ("direct"). The
# table: m (id bigint primary key, the shard key; ic int indexed, a permutation of the ids;
# g int, 16 values; v bigint), generated with generate_series on each server (a shard keeps its
# share with satisfies_hash_partition), not through the proxy. Three queries: ORDER BY ic
# LIMIT 100, count(*) GROUP BY g, avg(v) over a range of ic holding 10% of the rows. Each runs
# N rounds (default 5) of K executions (default 5; 40 K for the LIMIT) through pgbench (one client, simple
# protocol), pgvia and direct interleaved, each round under `flock /tmp/pgvia-bench.lock`;
# prints the median latency of each and pgvia's CPU per query (user + system ticks of
# /proc/<pid>/stat before and after each round, summed over the rounds and divided by the
# queries: a tick is 10 ms), with the load average at the start and the end.
# Before timing, pgvia's answers are checked against the single server's.
#
# Clusters live in $CARGO_TARGET_DIR/bench-merge/ (a few GB at 10M rows; WAL is skipped with
# wal_level = minimal) and are removed at the end (BENCH_KEEP=1 keeps them).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//'; }
(($# >= 1)) || { usage >&2; exit 2; }
pgvia=$(realpath "$1")
shift
rounds=5 runs=5 rows=10000000
while (($#)); do
    case $1 in
        --rounds) rounds=${2:?}; shift ;;
        --runs) runs=${2:?}; shift ;;
        --rows) rows=${2:?}; shift ;;
        -h | --help) usage; exit 0 ;;
        *) usage >&2; exit 2 ;;
    esac
    shift
done
[[ -x $pgvia ]] || { echo "merge.sh: $pgvia is not executable" >&2; exit 2; }

# shellcheck source=SCRIPTDIR/../scripts/lib/setup.sh
source scripts/lib/setup.sh
# shellcheck source=SCRIPTDIR/lib/stand.sh
source bench/lib/stand.sh
cargo build -q --release -p harness
stand_workdir merge "${CARGO_TARGET_DIR:-$PWD/target}/bench-merge"
work=$stand_work

# SHARD is empty for the server holding every row, else the shard's number.
load_sql() {
    local keep=
    [[ -n $1 ]] && keep="WHERE satisfies_hash_partition('hp'::regclass, 4, $1, id)"
    cat <<SQL
CREATE TABLE hp (id bigint) PARTITION BY HASH (id);
BEGIN;
CREATE TABLE m (id bigint NOT NULL, ic int NOT NULL, g int NOT NULL, v bigint NOT NULL);
INSERT INTO m SELECT id, ((id * 48271) % $rows)::int, (id % 16)::int, (id * 31) % 100000
  FROM generate_series(1::bigint, $rows) id $keep;
COMMIT;
ALTER TABLE m ADD PRIMARY KEY (id);
CREATE INDEX m_ic ON m (ic);
VACUUM ANALYZE m;
SQL
}
start_pg() {
    stand_start_server "$1" --set fsync=off --set synchronous_commit=off --set wal_level=minimal \
        --set max_wal_senders=0 --set max_wal_size=256MB --set maintenance_work_mem=256MB
}
single_port=$(start_pg single)
shard_ports=()
for i in 0 1 2 3; do shard_ports+=("$(start_pg "$i")"); done
t0=$(date +%s)
loads=()
load_sql "" | psql -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$single_port" -U bench bench >/dev/null &
loads+=($!)
for i in 0 1 2 3; do
    load_sql "$i" | psql -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "${shard_ports[$i]}" -U bench bench >/dev/null &
    loads+=($!)
done
for l in "${loads[@]}"; do wait "$l" || { echo "merge.sh: loading failed" >&2; exit 1; }; done
echo "loaded $rows rows into the single server and the four shards in $(($(date +%s) - t0)) s"

port=$(stand_free_port)
stand_sharded_config "$port" 4 m:id:bigint "${shard_ports[*]}" >"$work/pgvia.toml"
stand_spawn "$pgvia" --config "$work/pgvia.toml" >"$work/pgvia.log" 2>&1
pgvia_pid=$stand_pid
stand_wait_port "$port"

lo=$((rows / 5)) hi=$((rows / 5 + rows / 10 - 1))
names=(order_limit group_count range_avg)
# The index-ordered LIMIT takes well under a millisecond: 40 times the executions, so its CPU
# per query is more than a few 10 ms ticks.
reps=($((runs * 40)) "$runs" "$runs")
queries=(
    "SELECT id, ic FROM m ORDER BY ic LIMIT 100"
    "SELECT g, count(*) FROM m GROUP BY g ORDER BY g"
    "SELECT avg(v) FROM m WHERE ic BETWEEN $lo AND $hi"
)
ask() { psql -X -qAt -h 127.0.0.1 -p "$1" -U bench bench -c "$2"; }
# Every row on the shard the sharding function names (a key lookup through pgvia finds it),
# and the same answers both ways.
for id in 1 2 3 4 5 $((rows / 2)) "$rows"; do
    [[ $(ask "$port" "SELECT count(*) FROM m WHERE id = $id") == 1 ]] || { echo "merge.sh: row $id not on its shard" >&2; exit 1; }
done
[[ $(ask "$port" "SELECT count(*) FROM m") == "$rows" ]] || { echo "merge.sh: shards do not hold $rows rows" >&2; exit 1; }
for q in "${queries[@]}"; do
    [[ $(ask "$port" "$q") == "$(ask "$single_port" "$q")" ]] || { echo "merge.sh: answers differ: $q" >&2; exit 1; }
done

echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
results=$work/results.tsv
for i in "${!queries[@]}"; do
    echo "${queries[$i]};" >"$work/${names[$i]}.sql"
    for r in $(seq "$rounds"); do
        for v in direct pgvia; do
            p=$single_port
            [[ $v == pgvia ]] && p=$port
            rm -f "$work"/lat.*
            exec {lock}>/tmp/pgvia-bench.lock
            flock "$lock"
            before=$(stand_cpu_ticks "$pgvia_pid")
            pgbench -n -M simple -c 1 -t "${reps[$i]}" -f "$work/${names[$i]}.sql" -l --log-prefix="$work/lat" \
                -h 127.0.0.1 -p "$p" -U bench bench >"$work/pgbench.out" 2>&1 \
                || { cat "$work/pgbench.out" >&2; echo "merge.sh: pgbench failed ($v)" >&2; exit 1; }
            after=$(stand_cpu_ticks "$pgvia_pid")
            exec {lock}>&-
            # pgbench's log: client, transaction, latency in microseconds, ...
            awk -v n="${names[$i]}" -v v="$v" -v r="$r" '{ printf "%s\t%s\t%s\t%.3f\n", n, v, r, $3 / 1000 }' \
                "$work"/lat.* | tee -a "$results"
            [[ $v == pgvia ]] && printf '%s\t%s\t%s\n' "${names[$i]}" "$((after - before))" "${reps[$i]}" >>"$work/cpu.tsv"
        done
    done
done
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$results" "$work/cpu.tsv" "$rows" <<'PY'
import statistics, sys
from collections import defaultdict
lat = defaultdict(lambda: defaultdict(list))
dropped = 0
for line in open(sys.argv[1]):
    name, v, _, ms = line.rstrip("\n").split("\t")
    # pgbench logs a latency of 0 now and then for sub-millisecond transactions (its clock
    # is read lazily): not a measurement.
    if float(ms) == 0:
        dropped += 1
        continue
    lat[name][v].append(float(ms))
ticks, queries = defaultdict(int), defaultdict(int)
for line in open(sys.argv[2]):
    name, t, k = line.rstrip("\n").split("\t")
    ticks[name] += int(t)
    queries[name] += int(k)
print(f"\n{int(sys.argv[3]):,} rows | median ms direct | median ms pgvia (4 shards) | pgvia/direct | pgvia CPU ms per query")
for name, by in lat.items():
    d, p = statistics.median(by["direct"]), statistics.median(by["pgvia"])
    print(f"{name} | {d:.2f} | {p:.2f} | {p / d:.2f} | {ticks[name] * 10 / queries[name]:.2f}")
if dropped:
    print(f"({dropped} latencies of 0 left out)")
PY
