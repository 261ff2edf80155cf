-- Multi-statement strings sent in one simple Query message.

BEGIN; UPDATE accounts SET balance = balance - 100 WHERE id = 1; UPDATE accounts SET balance = balance + 100 WHERE id = 2; COMMIT;

SET search_path TO app, public; SET statement_timeout = '5s'; SELECT id, email FROM accounts WHERE tenant_id = 42;

BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM orders WHERE status = 'open'; SELECT sum(total) FROM orders WHERE status = 'open'; COMMIT;

SELECT pg_advisory_lock(12345); DELETE FROM jobs WHERE id IN (SELECT id FROM jobs WHERE run_at < now() LIMIT 100 FOR UPDATE SKIP LOCKED) RETURNING id; SELECT pg_advisory_unlock(12345);

CREATE TEMP TABLE t_ids (id bigint); INSERT INTO t_ids VALUES (1), (2), (3); SELECT a.* FROM accounts a JOIN t_ids USING (id); DROP TABLE t_ids;
