#!/usr/bin/env bash
# Usage: bench/idle-memory.sh [--count N] [--query SQL] PGVIA [PGVIA ...]
#
# Memory per idle logged-in client of one or more pgvia binaries, one after the other in front
# of one throwaway PostgreSQL 15 (bench/lib/stand.sh, trust): each binary is started fresh
# (transaction mode, pool of 20, max_client_connections above the count), logs one client in
# and out (the pool fetches the server's parameters), then `idle-clients` opens N connections
# (default 10000), logs each in and leaves it idle, and reports the process's VmRSS before
# and after divided by N. With --query each client runs that simple query once before it goes
# idle (what a client that did some work costs idle). Memory does not depend on the machine's
# load, so no interleaving.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//'; }
count=10000 query=() bins=()
while (($#)); do
    case $1 in
        --count) count=${2:?}; shift ;;
        --query) query=(--query "${2:?}"); shift ;;
        -h | --help) usage; exit 0 ;;
        *) bins+=("$(realpath "$1")") ;;
    esac
    shift
done
((${#bins[@]})) || { usage >&2; exit 2; }

# shellcheck source=SCRIPTDIR/../scripts/lib/setup.sh
source scripts/lib/setup.sh
# shellcheck source=SCRIPTDIR/lib/stand.sh
source bench/lib/stand.sh
cargo build -q --release -p bench-tools
idle_clients=${CARGO_TARGET_DIR:-target}/release/idle-clients
ulimit -n $((count + 2000))
stand_workdir idle
work=$stand_work

stand_start_pg "$work" trust
for bin in "${bins[@]}"; do
    port=$(stand_free_port)
    stand_pgvia_config "$work/pgvia.toml" "$port"
    sed -i "/^\[general\]/a max_client_connections = $((count + 1000))" "$work/pgvia.toml"
    stand_spawn "$bin" --config "$work/pgvia.toml" >"$work/pgvia.log" 2>&1
    pid=$stand_pid
    stand_wait_port "$port"
    psql -w -X -q -h 127.0.0.1 -p "$port" -U bench -d bench -c 'SELECT 1' >/dev/null
    sleep 0.5
    echo "$bin $("$idle_clients" --port "$port" --pid "$pid" --count "$count" --user bench \
        --concurrency 200 --timeout-secs 120 "${query[@]}")"
    kill "$pid"
    wait "$pid" 2>/dev/null || true
done
