#!/usr/bin/env bash
# Usage: bench/gateway.sh [ROWS] [RUNS]      (defaults: 1000000 rows, best of 3 runs)
#
# Rows out of PostgreSQL as text, four shapes (narrow integers; mixed types; a wide row with a
# jsonb column; half NULLs): NDJSON through pgvia's HTTP gateway (curl, `Accept:
# application/x-ndjson`) against `psql -c "COPY (...) TO STDOUT"` straight to PostgreSQL, the
# fastest way PostgreSQL itself hands rows out as text. Prints rows/s and MB/s for both and
# the ratios. Allocations per row are shown by `cargo test -p pgvia --test gateway_alloc`.
#
# Everything lives in a temporary directory under /var/tmp, removed on exit.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
rows=${1:-1000000}
runs=${2:-3}

say() { printf '==> %s\n' "$*" >&2; }
die() { printf 'bench/gateway.sh: %s\n' "$*" >&2; exit 1; }

# shellcheck source=SCRIPTDIR/../scripts/lib/setup.sh
source scripts/lib/setup.sh
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/target}
if [[ ${GATEWAY_BENCH_BUILD:-1} == 1 ]]; then # GATEWAY_BENCH_BUILD=0: use the release build as it is
    say "building pgvia and pgharness (release)"
    cargo build --release -q -p pgvia -p harness
fi
bin=$CARGO_TARGET_DIR/release

work=$(mktemp -d /var/tmp/pgvia-gwbench.XXXXXX)
chmod 755 "$work"
pgvia_pid=
cleanup() {
    local status=$?
    [[ -n $pgvia_pid ]] && kill "$pgvia_pid" 2>/dev/null && wait "$pgvia_pid" 2>/dev/null
    "$bin/pgharness" stop --dir "$work/pg" >/dev/null 2>&1 || true
    rm -rf "$work"
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

say "starting PostgreSQL"
started=$("$bin/pgharness" start --dir "$work/pg" --auth scram-sha-256 --set shared_buffers=256MB) \
    || die "pgharness start failed"
pg_port=$(sed -n 's/^PGPORT=//p' <<<"$started")
psql_su() { "$bin/pgharness" psql --dir "$work/pg" "$@" >/dev/null; }
psql_su -c "CREATE ROLE bench LOGIN PASSWORD 'bench'"
psql_su -c "CREATE DATABASE bench OWNER bench"
export PGPASSWORD=bench
direct="host=127.0.0.1 port=$pg_port user=bench dbname=bench"

say "creating four tables of $rows rows"
psql -X -q -v ON_ERROR_STOP=1 "$direct" <<SQL
CREATE TABLE narrow AS SELECT i AS a, i * 7 AS b, (i % 30000)::int2 AS c FROM generate_series(1, $rows) i;
CREATE TABLE mixed AS SELECT i AS id, 'name ' || i || ' "quoted"' AS name, i / 3.0::float8 AS score,
    i % 2 = 0 AS ok, timestamptz '2024-01-01' + i * interval '1 second' AS at,
    (i * 1.25)::numeric(14, 2) AS amount, md5(i::text)::uuid AS uid FROM generate_series(1, $rows) i;
CREATE TABLE wide AS SELECT i AS id, 'alpha ' || i AS c1, 'beta ' || i AS c2, 'gamma ' || i AS c3,
    'delta ' || i AS c4, 'epsilon ' || i AS c5, i * 2 AS c6, i * 3 AS c7, i % 5 = 0 AS c8,
    jsonb_build_object('id', i, 'tags', jsonb_build_array('a', 'b', i), 'note', 'line "' || i || '"') AS doc
    FROM generate_series(1, $rows) i;
CREATE TABLE nulls AS SELECT CASE WHEN i % 2 = 0 THEN i END AS a, CASE WHEN i % 2 = 1 THEN 'text ' || i END AS b,
    CASE WHEN i % 2 = 0 THEN i / 7.0 END AS c, CASE WHEN i % 2 = 1 THEN i % 3 = 0 END AS d
    FROM generate_series(1, $rows) i;
ANALYZE narrow; ANALYZE mixed; ANALYZE wide; ANALYZE nulls;
SQL

gw_port=$(free_port)
pg_listen=$(free_port)
cat >"$work/pgvia.toml" <<TOML
[general]
listen_addr = "127.0.0.1"
listen_port = $pg_listen
log_level = "warn"
# curl sends the password over the plain-HTTP gateway (loopback only).
allow_cleartext_without_tls = true

[pool]
pool_mode = "transaction"
pool_size = 4

[[databases]]
name = "bench"
host = "127.0.0.1"
port = $pg_port

[[users]]
name = "bench"
password = "bench"

[gateway]
listen = "127.0.0.1:$gw_port"
TOML
"$bin/pgvia" --config "$work/pgvia.toml" >"$work/pgvia.log" 2>&1 &
pgvia_pid=$!
for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$gw_port") 2>/dev/null && break; sleep 0.1; done

now() { printf '%s' "$EPOCHREALTIME"; }

# best_of COMMAND...: the shortest wall time (seconds) of $runs runs in $best, the output's size
# in $size and its lines in $lines (globals: command substitution would lose them).
best_of() {
    local t0 t1 t
    best=
    for _ in $(seq "$runs"); do
        t0=$(now)
        "$@" >"$work/out"
        t1=$(now)
        t=$(python3 -c "print($t1 - $t0)")
        if [[ -z $best ]] || python3 -c "import sys; sys.exit(0 if $t < $best else 1)"; then best=$t; fi
    done
    size=$(stat -c %s "$work/out")
    lines=$(wc -l <"$work/out")
}

via_copy() { psql -X -q "$direct" -c "COPY (SELECT * FROM $1) TO STDOUT"; }
via_pgvia() {
    curl -sS --fail-with-body "http://127.0.0.1:$gw_port/sql" -H 'Accept: application/x-ndjson' \
        -H "Neon-Connection-String: postgresql://bench:bench@127.0.0.1/bench" \
        -d "{\"query\": \"SELECT * FROM $1\"}"
}

printf '\n%-7s %12s %9s %12s %9s %9s %9s\n' shape "COPY rows/s" "COPY MB/s" "pgvia rows/s" "pgvia MB/s" "rows x" "MB/s x"
for t in narrow mixed wide nulls; do
    best_of via_copy "$t"; tc=$best; sc=$size; lc=$lines
    best_of via_pgvia "$t"; tp=$best; sp=$size; lp=$lines
    [[ $lc == "$rows" && $lp == "$rows" ]] || die "$t: expected $rows rows, COPY gave $lc, pgvia $lp"
    python3 - "$t" "$rows" "$tc" "$sc" "$tp" "$sp" <<'PY'
import sys
t, rows, tc, sc, tp, sp = sys.argv[1], int(sys.argv[2]), *map(float, sys.argv[3:])
rc, rp = rows / tc, rows / tp
mc, mp = sc / tc / 1e6, sp / tp / 1e6
print(f"{t:<7} {rc:12,.0f} {mc:9.1f} {rp:12,.0f} {mp:9.1f} {rp / rc:9.2f} {mp / mc:9.2f}")
PY
done
echo
echo "rows/s: higher is better; x = pgvia / COPY. Best of $runs runs, $(nproc) cores, $rows rows per shape."
