#!/usr/bin/env bash
# The sharded quick start, run by `./scripts/demo --shards N`: N local PostgreSQL 15 servers,
# pgvia in front of them serving one database `demo` spread over them, a small sharded
# schema (customers and orders by customer_id, a reference table on every shard), some rows,
# and a few statements that show where they go. Everything lives in .demo/; `./scripts/demo
# down` removes it. Sourced by scripts/demo, which has set: root, demo, bin, pgharness,
# listen_port, say, port_open, pick_pg_dir, stop_demo.
set -euo pipefail
shards=$1
if ! [[ $shards =~ ^[0-9]+$ ]] || ((shards < 2 || shards > 16)); then
    echo "--shards takes a number from 2 to 16" >&2
    exit 2
fi
proxy_url="postgres://demo:demo@127.0.0.1:$listen_port/demo"
mkdir -p "$demo"
: >"$demo/shard-dirs"
declare -a shard_ports
for ((i = 0; i < shards; i++)); do
    say "starting PostgreSQL 15 for shard $i"
    dir=$(pick_pg_dir)-shard$i
    echo "$dir" >>"$demo/shard-dirs"
    env_out=$("$pgharness" start --dir "$dir" --version 15 --auth scram-sha-256 --set max_prepared_transactions=20)
    shard_ports[i]=$(sed -n 's/^PGPORT=//p' <<<"$env_out")
    "$pgharness" psql --dir "$dir" -c "
        SET password_encryption = 'scram-sha-256';
        CREATE ROLE demo LOGIN PASSWORD 'demo';
        CREATE DATABASE demo OWNER demo;" >/dev/null
    "$pgharness" psql --dir "$dir" --db demo -c "
        CREATE TABLE customers (customer_id bigint PRIMARY KEY, name text NOT NULL);
        CREATE TABLE orders (order_id bigint, customer_id bigint NOT NULL, amount numeric(10,2) NOT NULL,
                             PRIMARY KEY (customer_id, order_id));
        CREATE TABLE countries (code text PRIMARY KEY, name text NOT NULL);
        GRANT ALL ON ALL TABLES IN SCHEMA public TO demo;
        GRANT CREATE ON DATABASE demo TO demo;" >/dev/null
    echo "shard $i: 127.0.0.1:${shard_ports[i]} (data in $dir)"
done

{
    cat <<TOML
[general]
listen_addr = "127.0.0.1"
listen_port = $listen_port
auth_method = "scram-sha-256"

[pool]
pool_mode = "transaction"
pool_size = 4

[[users]]
name = "demo"
password = "demo"

# The admin console: psql postgres://admin:admin@127.0.0.1:$listen_port/pgvia -c 'SHOW SHARDS'
[[users]]
name = "admin"
password = "admin"
admin = true

[[databases]]
name = "demo"
# Tables not listed below (countries) hold the same rows on every shard.
unsharded_tables = "omnisharded"
TOML
    for ((i = 0; i < shards; i++)); do
        printf '\n[[databases.shards]]\nhost = "127.0.0.1"\nport = %s\n' "${shard_ports[i]}"
    done
    cat <<TOML

[[databases.sharded_tables]]
name = "customers"
column = "customer_id"
type = "bigint"

[[databases.sharded_tables]]
name = "orders"
column = "customer_id"
type = "bigint"
TOML
} >"$demo/pgvia.toml"

say "starting pgvia on 127.0.0.1:$listen_port"
nohup "$bin/pgvia" --config "$demo/pgvia.toml" >"$demo/pgvia.log" 2>&1 </dev/null &
echo $! >"$demo/pgvia.pid"
pid=$(<"$demo/pgvia.pid")
for _ in $(seq 150); do
    port_open "$listen_port" && break
    if ! kill -0 "$pid" 2>/dev/null; then
        echo "pgvia exited; last lines of $demo/pgvia.log:" >&2
        tail -n 20 "$demo/pgvia.log" >&2
        exit 1
    fi
    sleep 0.1
done
port_open "$listen_port" || { echo "pgvia did not start; see $demo/pgvia.log" >&2; exit 1; }

psql_bin=$("$pgharness" bin --version 15 psql)
via() { "$psql_bin" -X -v ON_ERROR_STOP=1 "$proxy_url" "$@"; }
say "loading rows through pgvia (a multi-row INSERT is split by shard; COPY is split by key)"
via -c "INSERT INTO countries (code, name) VALUES ('fr', 'France'), ('jp', 'Japan'), ('br', 'Brazil')"
seq 1 1000 | awk '{ printf "%d\tcustomer %d\n", $1, $1 }' |
    via -c "COPY customers (customer_id, name) FROM STDIN"
seq 1 5000 | awk '{ printf "%d\t%d\t%d.%02d\n", $1, ($1 % 1000) + 1, $1 % 500, $1 % 100 }' |
    via -c "COPY orders (order_id, customer_id, amount) FROM STDIN"

say "one customer's orders: one shard (SHOW ROUTE says which, and why)"
via -c "SELECT count(*), sum(amount) FROM orders WHERE customer_id = 42"
PGPASSWORD=admin "$psql_bin" -X -h 127.0.0.1 -p "$listen_port" -U admin pgvia \
    -c "SHOW ROUTE SELECT count(*), sum(amount) FROM orders WHERE customer_id = 42"
say "the top customers over every shard, merged as one PostgreSQL would answer"
via -c "SELECT customer_id, count(*), sum(amount) FROM orders GROUP BY customer_id ORDER BY sum(amount) DESC, customer_id LIMIT 5"
say "a transaction over two shards commits with two-phase commit"
via -c "BEGIN; UPDATE customers SET name = name || ' (vip)' WHERE customer_id = 1; UPDATE customers SET name = name || ' (vip)' WHERE customer_id = 2; COMMIT;"
via -c "SELECT customer_id, name FROM customers WHERE customer_id IN (1, 2) ORDER BY customer_id"
say "each shard's share of the rows, straight from the shards"
for ((i = 0; i < shards; i++)); do
    n=$("$psql_bin" -X -At "postgres://demo:demo@127.0.0.1:${shard_ports[i]}/demo" -c "SELECT count(*) FROM orders")
    echo "shard $i (127.0.0.1:${shard_ports[i]}): $n orders"
done

echo
echo "Connect with:   psql $proxy_url"
echo "Admin console:  psql postgres://admin:admin@127.0.0.1:$listen_port/pgvia -c 'SHOW SHARDS'"
for ((i = 0; i < shards; i++)); do
    echo "Shard $i:        psql postgres://demo:demo@127.0.0.1:${shard_ports[i]}/demo"
done
echo "Stop it all:    ./scripts/demo down"
