#!/usr/bin/env bash
# Usage: bench/session-pgbench.sh [seconds-per-run] [rounds] [clients]
#
# A first side-by-side: pgbench select-only (simple protocol) against PostgreSQL directly,
# through PgBouncer and through pgvia, both poolers in session mode with the same pool size,
# targets interleaved (A B C A B C ...) so drift hits everyone alike. Prints median TPS, the
# ratio to direct, and each proxy's CPU seconds per 1,000 transactions (utime+stime from
# /proc/<pid>/stat before and after each run). Everything it starts lives in a temp dir and is
# stopped on exit. Needs: pgbouncer (Debian package), a release build of pgvia and pgharness.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
secs=${1:-10}
rounds=${2:-3}
clients=${3:-16}
bin=${CARGO_TARGET_DIR:-$PWD/target}/release
[[ -x $bin/pgvia && -x $bin/pgharness ]] || cargo build --release -p pgvia -p harness >&2
command -v pgbouncer >/dev/null || { echo "pgbouncer not found: apt-get install pgbouncer" >&2; exit 1; }

work=$(mktemp -d /var/tmp/pgvia-bench.XXXXXX)
chmod 755 "$work"
cleanup() {
    [[ -n ${pgvia_pid:-} ]] && kill "$pgvia_pid" 2>/dev/null || true
    [[ -n ${bouncer_pid:-} ]] && kill "$bouncer_pid" 2>/dev/null || true
    "$bin/pgharness" stop --dir "$work/pg" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT

eval "$("$bin/pgharness" start --dir "$work/pg" --auth scram-sha-256 --max-connections 300 | grep '^PGPORT=')"
pg_port=$PGPORT
"$bin/pgharness" psql --dir "$work/pg" -c "CREATE ROLE bench LOGIN PASSWORD 'bench'" >/dev/null
"$bin/pgharness" psql --dir "$work/pg" -c "CREATE DATABASE bench OWNER bench" >/dev/null
export PGPASSWORD=bench
pgbench -i -q -s 10 "postgres://bench@127.0.0.1:$pg_port/bench" >/dev/null 2>&1

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
pgvia_port=$(free_port)
bouncer_port=$(free_port)

cat >"$work/pgvia.toml" <<TOML
[general]
listen_port = $pgvia_port
log_level = "warn"
[pool]
pool_mode = "session"
pool_size = $clients
[[databases]]
name = "bench"
host = "127.0.0.1"
port = $pg_port
[[users]]
name = "bench"
password = "bench"
TOML
"$bin/pgvia" --config "$work/pgvia.toml" >"$work/pgvia.log" 2>&1 &
pgvia_pid=$!

cat >"$work/pgbouncer.ini" <<INI
[databases]
bench = host=127.0.0.1 port=$pg_port dbname=bench
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $bouncer_port
auth_type = scram-sha-256
auth_file = $work/userlist.txt
pool_mode = session
default_pool_size = $clients
max_client_conn = 1000
logfile = $work/pgbouncer.log
INI
echo '"bench" "bench"' >"$work/userlist.txt"
chown -R postgres "$work"
# setpriv execs in place, so $! is pgbouncer itself (runuser would fork).
setpriv --reuid=postgres --regid=postgres --init-groups pgbouncer "$work/pgbouncer.ini" >/dev/null 2>&1 &
bouncer_pid=$!
sleep 1

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)

declare -A tps cpu
for round in $(seq "$rounds"); do
    for target in direct pgbouncer pgvia; do
        case $target in
            direct) port=$pg_port; pid= ;;
            pgbouncer) port=$bouncer_port; pid=$bouncer_pid ;;
            pgvia) port=$pgvia_port; pid=$pgvia_pid ;;
        esac
        before=0; [[ -n $pid ]] && before=$(cpu_ticks "$pid")
        out=$(pgbench -n -S -M simple -c "$clients" -j 2 -T "$secs" "postgres://bench@127.0.0.1:$port/bench" 2>&1)
        after=0; [[ -n $pid ]] && after=$(cpu_ticks "$pid")
        t=$(sed -n 's/^tps = \([0-9.]*\).*/\1/p' <<<"$out")
        n=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' <<<"$out")
        tps[$target]+="$t "
        cpu[$target]+="$(awk -v d=$((after - before)) -v hz="$hz" -v n="$n" 'BEGIN{printf "%.4f", d/hz/n*1000}') "
        echo "round $round $target: tps=$t" >&2
    done
done

median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'; }
direct=$(median <<<"${tps[direct]}")
printf '\npgbench -S -M simple, %s clients, %s s x %s rounds, session pools of %s\n' "$clients" "$secs" "$rounds" "$clients"
printf '%-10s %12s %10s %22s\n' target "median tps" "vs direct" "proxy CPU s / 1000 tx"
for target in direct pgbouncer pgvia; do
    m=$(median <<<"${tps[$target]}")
    c=$(median <<<"${cpu[$target]}")
    [[ $target == direct ]] && c="-"
    printf '%-10s %12.0f %9.2fx %22s\n' "$target" "$m" "$(awk -v a="$m" -v b="$direct" 'BEGIN{print a/b}')" "$c"
done
