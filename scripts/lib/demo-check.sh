#!/usr/bin/env bash
# Usage: scripts/lib/demo-check.sh
#
# Runs the quick start as a newcomer would (./scripts/demo, a query through pgvia,
# ./scripts/demo down) and fails if any part of it does not work.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

out=$(./scripts/demo 2>&1) || { echo "$out"; echo "demo-check: ./scripts/demo failed"; exit 1; }
echo "$out" | tail -n 20
grep -q '^number of failed transactions: 0 ' <<<"$out" || { echo "demo-check: pgbench through pgvia reported failures"; exit 1; }
grep -q 'psql postgres://demo:demo@127.0.0.1:6432/demo' <<<"$out" || { echo "demo-check: no connection hint printed"; exit 1; }
# Pooling: more clients than servers, every one of them served.
served=$(grep -E '^[0-9]+ clients logged in to pgvia are served by [0-9]+ PostgreSQL connections' <<<"$out") \
    || { echo "demo-check: no pooling summary printed"; exit 1; }
clients=$(awk '{ print $1 }' <<<"$served")
backends=$(awk '{ print $10 }' <<<"$served")
((clients > backends && backends <= 4)) || { echo "demo-check: expected many clients over at most 4 servers, got: $served"; exit 1; }
grep -q 'query mode: prepared' <<<"$out" || { echo "demo-check: pgbench did not run with -M prepared"; exit 1; }
rows=$(psql postgres://demo:demo@127.0.0.1:6432/demo -XAtc 'select count(*) from pgbench_accounts')
[[ $rows == 100000 ]] || { echo "demo-check: expected 100000 pgbench_accounts rows through pgvia, got $rows"; exit 1; }
version=$(PGPASSWORD=admin psql -h 127.0.0.1 -p 6432 -U admin pgvia -XAtc 'SHOW VERSION')
[[ $version == pgvia\ * ]] || { echo "demo-check: the admin console answered SHOW VERSION with '$version'"; exit 1; }
# Read whole before it is searched: `curl | grep -q` fails under pipefail when grep stops at its
# match and curl, still writing, gets a broken pipe (it did, on a cold full run).
metrics=$(curl -fsS http://127.0.0.1:9930/metrics) || { echo "demo-check: http://127.0.0.1:9930/metrics did not answer"; exit 1; }
grep -q '^pgvia_queries_total{' <<<"$metrics" || { echo "demo-check: no pgvia_queries_total at http://127.0.0.1:9930/metrics"; exit 1; }
# The printed curl example works as printed.
sql_line=$(grep -m1 '^SQL over HTTP:  curl ' <<<"$out" | sed 's/^SQL over HTTP:  //') \
    || { echo "demo-check: no SQL-over-HTTP example printed"; exit 1; }
answer=$(bash -c "$sql_line")
grep -q '"rowCount":3' <<<"$answer" || { echo "demo-check: the printed curl example answered: $answer"; exit 1; }
./scripts/demo down
if (exec 3<>/dev/tcp/127.0.0.1/6432) 2>/dev/null; then
    echo "demo-check: something still listens on 6432 after ./scripts/demo down"
    exit 1
fi
[[ ! -e .demo ]] || { echo "demo-check: .demo/ left behind"; exit 1; }
echo "demo-check: ok"
