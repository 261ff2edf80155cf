#!/usr/bin/env bash
# Usage: bench/io-relay.sh [--pgvia BIN] [--rounds N] [--seconds S] [PGBENCH_ARGS ...]
#
# What the I/O mechanism alone costs a proxy per transaction, before anyone rebuilds pgvia's
# sockets on io_uring: one throwaway PostgreSQL 15 (bench/lib/stand.sh, trust) behind four builds
# of a byte relay that does not read what it carries (bench/io-relay: tokio on epoll with one
# thread, "epoll-1"; with two worker threads, "epoll-2", pgvia's default shape here; io_uring on
# one thread through tokio-uring, "uring", and through monoio, "monoio"), and for scale PgBouncer
# (Debian's) and pgvia (release build), both in transaction mode with a pool of 20. Each
# PGBENCH_ARGS (default select-only simple at 1 and 16 clients, extended at 16, TPC-B-like at 16)
# runs N rounds (default 5) of S seconds (default 5), the six interleaved, and the table gives
# TPS and CPU seconds per 1,000 transactions of each process, with ratios to epoll-2. A relay opens one PostgreSQL connection per client (no pooling), so
# keep the clients under PostgreSQL's max_connections.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//'; }
pgvia=${CARGO_TARGET_DIR:-target}/release/pgvia rounds=5 secs=5 workloads=()
while (($#)); do
    case $1 in
        --pgvia) pgvia=${2:?}; shift ;;
        --rounds) rounds=${2:?}; shift ;;
        --seconds) secs=${2:?}; shift ;;
        -h | --help) usage; exit 0 ;;
        *) workloads+=("$1") ;;
    esac
    shift
done
((${#workloads[@]})) || workloads=("-S -M simple -c 1 -j 1" "-S -M simple -c 16 -j 2" "-S -M extended -c 16 -j 2" "-M simple -c 16 -j 2")
pgvia=$(realpath "$pgvia")
[[ -x $pgvia ]] || { echo "io-relay: $pgvia is not executable" >&2; exit 2; }

# shellcheck source=SCRIPTDIR/../scripts/lib/setup.sh
source scripts/lib/setup.sh
# shellcheck source=SCRIPTDIR/lib/stand.sh
source bench/lib/stand.sh
relay_target=${CARGO_TARGET_DIR:-$PWD/target}/io-relay
CARGO_TARGET_DIR=$relay_target cargo build -q --release --manifest-path bench/io-relay/Cargo.toml
stand_workdir io-relay
work=$stand_work
declare -A port pid

stand_start_pg "$work" trust
for shape in epoll-2 epoll-1 uring monoio; do
    port[$shape]=$(stand_free_port)
    stand_spawn "$relay_target/release/io-relay" "$shape" "${port[$shape]}" "$stand_pg_port" >"$work/$shape.log" 2>&1
    pid[$shape]=$stand_pid
done
# PgBouncer as Debian packages it, trust, the same pool: where a C proxy on libevent stands.
stand_start_pgbouncer pgbouncer
stand_start_pgvia pgvia "$pgvia"
for v in epoll-2 epoll-1 uring monoio pgbouncer pgvia; do stand_wait_port "${port[$v]}"; done

echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
stand_interleave "epoll-2 epoll-1 uring monoio pgbouncer pgvia" "$rounds" "$secs" "${workloads[@]}"
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
