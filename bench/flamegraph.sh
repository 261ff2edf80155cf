#!/usr/bin/env bash
# Usage: bench/flamegraph.sh [--pgvia BIN] [--auth trust|scram] [--seconds S] [--freq HZ]
#                            [--out DIR] NAME=PGBENCH_ARGS ...
#
# Where pgvia's CPU goes under a pgbench workload: one throwaway PostgreSQL 15 and one pgvia
# (default: the release build, transaction mode, pool of 20; see bench/lib/stand.sh), and for each
# NAME=PGBENCH_ARGS a warm-up, then `perf record` of the pgvia process alone, kernel and user
# stacks (DWARF unwinding: the release build keeps debug line tables but no frame pointers), for S
# seconds (default 5) at HZ samples per second (default 999) while pgbench runs. Writes
# DIR/NAME.svg (an inferno flame graph; default DIR docs/bench/flame) and prints, per workload,
# pgbench's TPS, pgvia's CPU seconds per 1,000 transactions and the share of samples under each
# of a few families of frames (bench/flame_summary.py), so a reading can quote them. The folded
# stacks stay in $CARGO_TARGET_DIR/flame/NAME.folded for a closer look (grep, inferno-diff-folded).
# Note: sampling adds to pgvia's CPU, so the CPU figure printed here is higher than an unprofiled
# run's; compare builds with bench/compare-builds.sh, not with this.
# Example:
#   bench/flamegraph.sh select-simple-1="-S -M simple -c 1 -j 1" select-simple-16="-S -M simple -c 16 -j 2"
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//'; }
pgvia=${CARGO_TARGET_DIR:-target}/release/pgvia auth=trust secs=5 freq=999 out=docs/bench/flame workloads=()
while (($#)); do
    case $1 in
        --pgvia) pgvia=${2:?}; shift ;;
        --auth) auth=${2:?}; shift ;;
        --seconds) secs=${2:?}; shift ;;
        --freq) freq=${2:?}; shift ;;
        --out) out=${2:?}; shift ;;
        -h | --help) usage; exit 0 ;;
        *=*) workloads+=("$1") ;;
        *) usage >&2; exit 2 ;;
    esac
    shift
done
((${#workloads[@]})) || { usage >&2; exit 2; }
[[ $auth == trust || $auth == scram ]] || { echo "flamegraph: --auth is trust or scram" >&2; exit 2; }
pgvia=$(realpath "$pgvia")
[[ -x $pgvia ]] || { echo "flamegraph: $pgvia is not executable" >&2; exit 2; }

# shellcheck source=SCRIPTDIR/../scripts/lib/setup.sh
source scripts/lib/setup.sh
# shellcheck source=SCRIPTDIR/lib/stand.sh
source bench/lib/stand.sh
# Like scripts/bench with pgbouncer: the profiler is installed here, through setup.sh's helper,
# rather than for every test run.
command -v perf >/dev/null || _setup_apt_install linux-perf
if ! command -v inferno-flamegraph >/dev/null; then
    cargo install -q --locked --root /usr/local inferno --version '^0.12'
fi

stand_workdir flame
work=$stand_work

stand_start_pg "$work" "$auth"
port=$(stand_free_port)
stand_pgvia_config "$work/pgvia.toml" "$port"
stand_spawn "$pgvia" --config "$work/pgvia.toml" >"$work/pgvia.log" 2>&1
pid=$stand_pid
stand_wait_port "$port"
folded_dir=${CARGO_TARGET_DIR:-target}/flame
mkdir -p "$out" "$folded_dir"

for w in "${workloads[@]}"; do
    name=${w%%=*} args=${w#*=}
    # shellcheck disable=SC2086 # ARGS is a list of pgbench options
    pgbench -n $args -T 2 -h 127.0.0.1 -p "$port" -U bench bench >/dev/null 2>&1 || true
    before=$(stand_cpu_ticks "$pid")
    # shellcheck disable=SC2086
    pgbench -n $args -T "$((secs + 1))" -h 127.0.0.1 -p "$port" -U bench bench >"$work/$name.pgbench" 2>&1 &
    bench_pid=$!
    sleep 0.5
    perf record -q -F "$freq" -g --call-graph dwarf,16384 -p "$pid" -o "$work/$name.data" -- sleep "$secs" 2>"$work/$name.perf.log" \
        || { cat "$work/$name.perf.log" >&2; exit 1; }
    wait "$bench_pid" || true
    after=$(stand_cpu_ticks "$pid")
    tps=$(sed -n 's/^tps = \([0-9.]*\) .*/\1/p' "$work/$name.pgbench")
    tx=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$work/$name.pgbench")
    [[ -n $tps && ${tx:-0} -gt 0 ]] || { cat "$work/$name.pgbench" >&2; echo "flamegraph: pgbench failed" >&2; exit 1; }
    perf script -i "$work/$name.data" 2>/dev/null | inferno-collapse-perf --all >"$folded_dir/$name.folded"
    inferno-flamegraph --title "pgvia: pgbench $args ($auth)" --width 1400 \
        <"$folded_dir/$name.folded" >"$out/$name.svg"
    echo "== $name: pgbench $args ($auth), $(uptime | sed 's/.*load average/load average/')"
    echo "tps=$tps pgvia_cpu_s_per_1k_tx=$(python3 -c "print(f'{($after - $before) / 100 / $tx * 1000:.4f}')")"
    python3 bench/flame_summary.py "$folded_dir/$name.folded"
done
