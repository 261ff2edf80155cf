# shellcheck shell=bash
# A throwaway PostgreSQL 15 and pgvia configurations for the single-purpose bench scripts
# (compare-builds.sh, flamegraph.sh). Source it after scripts/lib/setup.sh, from the repository root.
#
#   stand_start_pg WORK AUTH      AUTH is trust or scram; sets stand_pg_port, creates role and
#                                 database bench, pgbench -i -s 10, fsync off
#   stand_pgvia_config FILE PORT  writes a transaction-mode configuration, pool of 20
#   stand_wait_port PORT          waits until something listens on 127.0.0.1:PORT
#   stand_stop_pg WORK            stops the cluster (call from the caller's EXIT trap)
#
# With AUTH scram the role bench has a SCRAM-SHA-256 verifier of iteration count 1, given to pgvia
# as it is in pg_authid, and pgvia logs in to PostgreSQL with SCRAM as well, as in scripts/bench:
# key stretching is the client's cost, the same with or without a proxy, and would drown the
# proxy's own cost of a login. PGPASSWORD is exported for pgbench.

stand_pgharness=${CARGO_TARGET_DIR:-target}/release/pgharness

stand_start_pg() {
    local work=$1 auth=$2 sql
    stand_auth=$auth
    cargo build -q --release -p harness
    local pg_auth=trust
    [[ $auth == scram ]] && pg_auth=scram-sha-256
    stand_pg_port=$("$stand_pgharness" start --dir "$work/pg" --auth "$pg_auth" | sed -n 's/^PGPORT=//p')
    [[ -n $stand_pg_port ]] || { echo "stand: pgharness start failed" >&2; return 1; }
    for sql in "ALTER SYSTEM SET fsync = off" "ALTER SYSTEM SET synchronous_commit = off" \
        "SELECT pg_reload_conf()" "CREATE ROLE bench LOGIN" "CREATE DATABASE bench OWNER bench"; do
        "$stand_pgharness" psql --dir "$work/pg" -c "$sql" >/dev/null
    done
    stand_secret=unused
    if [[ $auth == scram ]]; then
        stand_secret=$(python3 - <<'PY'
import base64, hashlib, hmac, os
salt, iterations = os.urandom(16), 1
salted = hashlib.pbkdf2_hmac("sha256", b"bench", salt, iterations)
client_key = hmac.new(salted, b"Client Key", "sha256").digest()
server_key = hmac.new(salted, b"Server Key", "sha256").digest()
b64 = lambda b: base64.b64encode(b).decode()
print(f"SCRAM-SHA-256${iterations}:{b64(salt)}${b64(hashlib.sha256(client_key).digest())}:{b64(server_key)}")
PY
        )
        "$stand_pgharness" psql --dir "$work/pg" -c "ALTER ROLE bench PASSWORD '$stand_secret'" >/dev/null
        export PGPASSWORD=bench
    fi
    pgbench -q -i -s 10 -h 127.0.0.1 -p "$stand_pg_port" -U bench bench >/dev/null 2>&1
}

stand_pgvia_config() {
    local auth_line='auth_method = "trust"' server_password=''
    if [[ $stand_auth == scram ]]; then
        auth_line=''
        server_password='server_password = "bench"'
    fi
    cat >"$1" <<TOML
[general]
listen_addr = "127.0.0.1"
listen_port = $2
log_level = "warn"
$auth_line

[pool]
pool_mode = "transaction"
pool_size = 20

[[databases]]
name = "bench"
host = "127.0.0.1"
port = $stand_pg_port

[[users]]
name = "bench"
password = "$stand_secret"
$server_password
TOML
}

stand_wait_port() {
    local _
    for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.1; done
    echo "stand: nothing listens on port $1" >&2
    return 1
}

stand_stop_pg() {
    [[ -f $1/pg/pgharness.meta ]] && "$stand_pgharness" stop --dir "$1/pg" >/dev/null 2>&1
    return 0
}

stand_free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
