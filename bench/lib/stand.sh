# shellcheck shell=bash
# Throwaway PostgreSQL 15 servers, pgvia configurations and the timing helpers the single-purpose
# bench scripts share (compare-builds.sh, flamegraph.sh, idle-memory.sh, shard.sh, merge.sh). Source
# it after scripts/lib/setup.sh, from the repository root.
#
#   stand_workdir NAME [DIR]      makes the work directory stand_work (a fresh mktemp one, or DIR
#                                 emptied) and sets the EXIT trap that kills what stand_spawn
#                                 started, stops every cluster and removes the directory
#                                 (BENCH_KEEP=1 keeps it)
#   stand_spawn CMD ...           runs CMD in the background; its pid is stand_pid
#   stand_cpu_ticks PID           the process's user + system CPU ticks (1/100 s)
#   stand_pgbench PID PORT SECS ARGS
#                                 runs pgbench ARGS for SECS against PORT; prints
#                                 "TPS<tab>CPU<tab>p99", CPU being PID's seconds per 1,000
#                                 transactions, p99 the latency in ms with stand_latency=1 (pgbench
#                                 --log), else -
#   stand_interleave "A B ..." ROUNDS SECS WORKLOAD ...
#                                 runs each pgbench WORKLOAD ROUNDS times against A, then B, ...
#                                 (their ports and pids in the arrays port and pid, indexed by
#                                 the variants' names), prints each run and then stand_medians'
#   stand_medians FILE A B ...    FILE's lines "workload<tab>variant<tab>round<tab>TPS<tab>CPU<tab>p99"
#                                 (p99 in ms or -); prints each variant's medians and their ratios
#                                 to A's
#   stand_start_server NAME ARGS  a trust cluster under stand_work with role and database bench;
#                                 ARGS go to pgharness start (--set ...); prints its port
#   stand_config_head PORT POOL   a trust, transaction-mode configuration up to database bench's
#                                 first lines, with the lines of the arrays stand_pool_lines and
#                                 stand_database_lines in [pool] and [[databases]]
#   stand_sharded_config PORT POOL TABLE:COLUMN:TYPE ... PORTS
#                                 the same with database bench sharded over the servers listening
#                                 on PORTS (a space-separated list)
#   stand_start_pg WORK AUTH      AUTH is trust or scram; sets stand_pg_port, creates role and
#                                 database bench, pgbench -i -s 10, fsync off
#   stand_pgvia_config FILE PORT  writes a transaction-mode configuration, pool of 20
#   stand_wait_port PORT          waits until something listens on 127.0.0.1:PORT
#   stand_start_pgvia NAME BIN    BIN with stand_pgvia_config's configuration (NAME.toml and
#                                 NAME.log under stand_work) on a free port; sets port[NAME] and
#                                 pid[NAME] in the caller's associative arrays port and pid
#   stand_start_pgbouncer NAME    PgBouncer as Debian packages it (installed if missing) in front
#                                 of stand_pg_port: trust, transaction mode, pool of 20, no
#                                 connection logging; sets port[NAME] and pid[NAME] likewise
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

stand_pids=() stand_pool_lines=() stand_database_lines=()
stand_workdir() {
    if [[ -n ${2:-} ]]; then
        stand_work=$2
        rm -rf "$stand_work"
        mkdir -p "$stand_work"
    else
        stand_work=$(mktemp -d "/var/tmp/pgvia-$1.XXXXXX")
    fi
    # PostgreSQL runs as another user when the bench runs as root.
    chmod 755 "$stand_work"
    trap stand_cleanup EXIT
}

stand_cleanup() {
    local p d
    # A process the script already stopped must not end the cleanup under `set -e`.
    for p in "${stand_pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    # Every cluster under the work directory: servers started in a command substitution are
    # not known to this shell.
    for d in "$stand_work"/*/pgharness.meta; do
        [[ -f $d ]] && "$stand_pgharness" stop --dir "${d%/pgharness.meta}" >/dev/null 2>&1
    done
    [[ ${BENCH_KEEP:-0} == 1 ]] || rm -rf "$stand_work"
}

stand_spawn() {
    "$@" &
    stand_pid=$!
    stand_pids+=("$stand_pid")
}

stand_cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

stand_pgbench() {
    local pid=$1 port=$2 secs=$3 args=$4 before after out tps tx logs='' p99=-
    # With stand_latency=1 pgbench logs every transaction and the run's p99 is a third column
    # (the log costs pgbench, not the proxy, the same for every variant).
    local log_args=()
    if [[ ${stand_latency:-0} == 1 ]]; then
        logs=$(mktemp -d -p "$stand_work" latency.XXXXXX)
        log_args=(--log --log-prefix="$logs/tx")
    fi
    before=$(stand_cpu_ticks "$pid")
    # shellcheck disable=SC2086 # ARGS is a list of pgbench options
    out=$(pgbench -n "${log_args[@]}" $args -T "$secs" -h 127.0.0.1 -p "$port" -U bench bench 2>&1) || true
    after=$(stand_cpu_ticks "$pid")
    tps=$(sed -n 's/^tps = \([0-9.]*\) .*/\1/p' <<<"$out")
    tx=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' <<<"$out")
    [[ -n $tps && ${tx:-0} -gt 0 ]] || { echo "$out" >&2; echo "pgbench failed on port $port" >&2; return 1; }
    if [[ -n $logs ]]; then
        p99=$(python3 bench/report.py latency "$logs"/tx.* | awk '{print $3}')
        rm -rf "$logs"
    fi
    printf '%s\t%s\t%s\n' "$tps" "$(python3 -c "print(f'{($after - $before) / 100 / $tx * 1000:.4f}')")" "$p99"
}

stand_interleave() {
    local variants=$1 rounds=$2 secs=$3 results=$stand_work/results.tsv args r v tps_cpu
    shift 3
    for args in "$@"; do
        for r in $(seq "$rounds"); do
            for v in $variants; do
                tps_cpu=$(stand_pgbench "${pid[$v]}" "${port[$v]}" "$secs" "$args") || return 1
                printf '%s\t%s\t%s\t%s\n' "${args/$stand_work\//}" "$v" "$r" "$tps_cpu" | tee -a "$results"
            done
        done
    done
    # shellcheck disable=SC2086 # the variants are words
    stand_medians "$results" $variants
}

stand_medians() {
    python3 - "$@" <<'PY'
import statistics, sys
from collections import defaultdict
path, base, others = sys.argv[1], sys.argv[2], sys.argv[3:]
runs = defaultdict(lambda: defaultdict(list))
p99s = defaultdict(lambda: defaultdict(list))
for line in open(path):
    args, variant, _, tps, cpu, *rest = line.rstrip("\n").split("\t")
    runs[args][variant].append((float(tps), float(cpu)))
    if rest and rest[0] != "-":
        p99s[args][variant].append(float(rest[0]))
head = [f"TPS {base}"] + [f"TPS {o} | {o}/{base}" for o in others]
head += [f"CPU s/1k tx {base}"] + [f"{o} | {o}/{base}" for o in others]
if p99s:
    head += [f"p99 ms {base}"] + [f"{o} | {o}/{base}" for o in others]
print("\nworkload | " + " | ".join(head))
for args, by in runs.items():
    tps = {v: statistics.median(t for t, _ in by[v]) for v in [base] + others}
    cpu = {v: statistics.median(c for _, c in by[v]) for v in [base] + others}
    cells = [f"{tps[base]:.0f}"] + [f"{tps[o]:.0f} | {tps[o] / tps[base]:.3f}" for o in others]
    cells += [f"{cpu[base]:.4f}"] + [f"{cpu[o]:.4f} | {cpu[o] / cpu[base]:.3f}" for o in others]
    if p99s:
        p99 = {v: statistics.median(p99s[args][v]) for v in [base] + others}
        cells += [f"{p99[base]:.2f}"] + [f"{p99[o]:.2f} | {p99[o] / p99[base]:.3f}" for o in others]
    print(f"{args} | " + " | ".join(cells))
PY
}

stand_start_server() {
    local dir=$stand_work/pg$1 p
    shift
    p=$("$stand_pgharness" start --dir "$dir" --auth trust "$@" | sed -n 's/^PGPORT=//p')
    [[ -n $p ]] || { echo "stand: pgharness start failed" >&2; return 1; }
    "$stand_pgharness" psql --dir "$dir" -c "CREATE ROLE bench LOGIN" >/dev/null
    "$stand_pgharness" psql --dir "$dir" -c "CREATE DATABASE bench OWNER bench" >/dev/null
    echo "$p"
}

stand_config_head() {
    cat <<TOML
[general]
listen_addr = "127.0.0.1"
listen_port = $1
log_level = "warn"
auth_method = "trust"

[pool]
pool_mode = "transaction"
pool_size = $2
$(printf '%s\n' "${stand_pool_lines[@]}")

[[users]]
name = "bench"
password = "unused"

[[databases]]
name = "bench"
$(printf '%s\n' "${stand_database_lines[@]}")
TOML
}

stand_sharded_config() {
    local port=$1 pool=$2 table p name column type
    shift 2
    local ports=${*: -1}
    stand_config_head "$port" "$pool"
    for p in $ports; do printf '\n[[databases.shards]]\nhost = "127.0.0.1"\nport = %s\n' "$p"; done
    for table in "${@:1:$#-1}"; do
        IFS=: read -r name column type <<<"$table"
        printf '\n[[databases.sharded_tables]]\nname = "%s"\ncolumn = "%s"\ntype = "%s"\n' "$name" "$column" "$type"
    done
}

stand_free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

stand_start_pgvia() {
    local name=$1 bin=$2
    port[$name]=$(stand_free_port)
    stand_pgvia_config "$stand_work/$name.toml" "${port[$name]}"
    stand_spawn "$bin" --config "$stand_work/$name.toml" >"$stand_work/$name.log" 2>&1
    pid[$name]=$stand_pid
}

stand_start_pgbouncer() {
    local name=$1 bouncer=/usr/sbin/pgbouncer dir=$stand_work/bouncer
    port[$name]=$(stand_free_port)
    command -v pgbouncer >/dev/null || [[ -x $bouncer ]] || _setup_apt_install pgbouncer
    [[ -x $bouncer ]] || bouncer=$(command -v pgbouncer)
    mkdir -p "$dir"
    printf '"bench" ""\n' >"$dir/userlist.txt"
    cat >"$dir/pgbouncer.ini" <<INI
[databases]
bench = host=127.0.0.1 port=$stand_pg_port dbname=bench

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = ${port[$name]}
unix_socket_dir =
auth_type = trust
auth_file = $dir/userlist.txt
pool_mode = transaction
default_pool_size = 20
max_client_conn = 2000
server_idle_timeout = 0
log_connections = 0
log_disconnections = 0
logfile = $dir/pgbouncer.log
INI
    chown -R postgres "$dir"
    # setpriv execs in place, so the pid is pgbouncer's own (PgBouncer refuses to run as root).
    stand_spawn setpriv --reuid=postgres --regid=postgres --init-groups "$bouncer" "$dir/pgbouncer.ini" \
        >"$dir/pgbouncer.out" 2>&1
    pid[$name]=$stand_pid
}
