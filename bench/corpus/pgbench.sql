-- pgbench's built-in scripts: tpcb-like (extended protocol, with parameters) and
-- select-only, then the same statements as -M simple sends them, with literals.
-- Queries are separated by blank lines.

BEGIN

UPDATE pgbench_accounts SET abalance = abalance + $1 WHERE aid = $2

SELECT abalance FROM pgbench_accounts WHERE aid = $1

UPDATE pgbench_tellers SET tbalance = tbalance + $1 WHERE tid = $2

UPDATE pgbench_branches SET bbalance = bbalance + $1 WHERE bid = $2

INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) VALUES ($1, $2, $3, $4, CURRENT_TIMESTAMP)

END

UPDATE pgbench_accounts SET abalance = abalance + -4237 WHERE aid = 81234;

SELECT abalance FROM pgbench_accounts WHERE aid = 81234;

INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) VALUES (7, 1, 81234, -4237, CURRENT_TIMESTAMP);
