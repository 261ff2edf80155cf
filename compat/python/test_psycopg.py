"""psycopg 3 at its default settings (prepare_threshold=5, autocommit off, text results)."""

import datetime
import decimal
import random
import threading
import time

import psycopg
import pytest
from psycopg import errors, sql
from psycopg.types.json import Jsonb


def connect(url, **kwargs):
    return psycopg.connect(url, **kwargs)


def fresh_table(conn, name, columns):
    conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(name)))
    conn.execute(sql.SQL("CREATE TABLE {} ({})").format(sql.Identifier(name), sql.SQL(columns)))
    conn.commit()


def test_simple_query(url):
    with connect(url) as conn:
        assert conn.execute("SELECT 1, 'one'").fetchone() == (1, "one")
        # No parameters: several statements in one string go as one simple Query message.
        cur = conn.execute("SELECT 1; SELECT 2")
        assert cur.fetchone() == (1,)
        assert cur.nextset()
        assert cur.fetchone() == (2,)


def test_parameters_round_trip(url):
    values = (
        42,
        -(2**40),
        "text with 'quotes' and ünïcode",
        3.5,
        True,
        None,
        b"\x00\x01binary\xff",
        datetime.date(2024, 2, 29),
        decimal.Decimal("12345.6789"),
        [1, 2, 3],
    )
    with connect(url) as conn:
        row = conn.execute("SELECT " + ", ".join(["%s"] * len(values)), values).fetchone()
        assert row == values
        assert conn.execute("SELECT %s::jsonb", (Jsonb({"a": [1, 2]}),)).fetchone()[0] == {"a": [1, 2]}
        # Binary results, on request.
        cur = conn.cursor(binary=True)
        assert cur.execute("SELECT %s::int8, %s::text", (7, "seven")).fetchone() == (7, "seven")


def test_prepare_threshold_crossing(url):
    with connect(url) as conn:
        assert conn.prepare_threshold == 5, "the suite tests psycopg's default"
        # Past the 5th execution psycopg prepares the query under a name of its own and
        # then only sends Bind/Execute for it.
        for i in range(20):
            assert conn.execute("SELECT %s::int * 3, %s::text", (i, f"v{i}")).fetchone() == (i * 3, f"v{i}")
        for i in range(20):
            assert conn.execute("SELECT %s::int + 100", (i,)).fetchone() == (i + 100,)
        conn.commit()
        # The prepared statements survive a commit and keep working in new transactions.
        for i in range(10):
            assert conn.execute("SELECT %s::int * 3, %s::text", (i, "x")).fetchone() == (i * 3, "x")
            conn.commit()


def test_prepare_true(url):
    with connect(url, autocommit=True) as conn:
        for i in range(10):
            assert conn.execute("SELECT %s::int - 1", (i,), prepare=True).fetchone() == (i - 1,)
        # prepare=False on the same query goes unnamed again.
        assert conn.execute("SELECT %s::int - 1", (5,), prepare=False).fetchone() == (4,)


def test_prepared_statement_after_error(url):
    with connect(url) as conn:
        for i in range(8):
            assert conn.execute("SELECT 10 / %s::int", (i + 1,)).fetchone() == (10 // (i + 1),)
        with pytest.raises(errors.DivisionByZero):
            conn.execute("SELECT 10 / %s::int", (0,))
        conn.rollback()
        assert conn.execute("SELECT 10 / %s::int", (2,)).fetchone() == (5,)


def test_pipeline_error_mid_pipeline(url):
    with connect(url, autocommit=True) as conn:
        fresh_table(conn, "py_pipeline", "n int")
        with pytest.raises(errors.DivisionByZero):
            with conn.pipeline() as p:
                conn.execute("INSERT INTO py_pipeline VALUES (1)")
                p.sync()  # the first insert commits on its own
                conn.execute("INSERT INTO py_pipeline VALUES (2)")
                conn.execute("SELECT 1 / 0")
                conn.execute("INSERT INTO py_pipeline VALUES (3)")  # skipped by the server
        # Everything between the two Syncs was one implicit transaction and rolled back.
        assert conn.execute("SELECT array_agg(n ORDER BY n) FROM py_pipeline").fetchone() == ([1],)
        # The connection works afterwards, in and out of a pipeline.
        with conn.pipeline():
            cur = conn.execute("SELECT %s::int", (5,))
            cur2 = conn.execute("SELECT %s::text", ("five",))
        assert cur.fetchone() == (5,) and cur2.fetchone() == ("five",)


def test_pipeline_many_statements(url):
    with connect(url, autocommit=True) as conn:
        with conn.pipeline():
            curs = [conn.execute("SELECT %s::int * 2", (i,)) for i in range(200)]
        assert [c.fetchone()[0] for c in curs] == [i * 2 for i in range(200)]


def test_copy_text_in_and_out(url):
    rows = [(i, f"row {i}", None if i % 7 == 0 else i / 2) for i in range(1000)]
    with connect(url) as conn:
        fresh_table(conn, "py_copy_text", "id int, label text, x float8")
        with conn.cursor() as cur:
            with cur.copy("COPY py_copy_text (id, label, x) FROM STDIN") as copy:
                for r in rows:
                    copy.write_row(r)
            conn.commit()
            out = []
            with cur.copy("COPY (SELECT id, label, x FROM py_copy_text ORDER BY id) TO STDOUT") as copy:
                for r in copy.rows():
                    out.append((int(r[0]), r[1], None if r[2] is None else float(r[2])))
        assert out == rows


def test_copy_binary_in_and_out(url):
    rows = [(i, f"b{i}", b"\x00" * (i % 5)) for i in range(1000)]
    with connect(url) as conn:
        fresh_table(conn, "py_copy_bin", "id int, label text, data bytea")
        with conn.cursor() as cur:
            with cur.copy("COPY py_copy_bin (id, label, data) FROM STDIN (FORMAT BINARY)") as copy:
                copy.set_types(["int4", "text", "bytea"])
                for r in rows:
                    copy.write_row(r)
            conn.commit()
            with cur.copy("COPY (SELECT id, label, data FROM py_copy_bin ORDER BY id) TO STDOUT (FORMAT BINARY)") as copy:
                copy.set_types(["int4", "text", "bytea"])
                out = list(copy.rows())
        assert out == rows


def test_copy_error_mid_stream(url):
    with connect(url) as conn:
        fresh_table(conn, "py_copy_err", "id int primary key")
        with pytest.raises(errors.UniqueViolation):
            with conn.cursor().copy("COPY py_copy_err FROM STDIN") as copy:
                copy.write_row((1,))
                copy.write_row((1,))
        conn.rollback()
        assert conn.execute("SELECT count(*) FROM py_copy_err").fetchone() == (0,)


def test_server_side_cursor(url):
    with connect(url) as conn:
        with conn.cursor(name="py_ssc") as cur:
            cur.itersize = 100  # fetched 100 rows at a time with FETCH FORWARD
            cur.execute("SELECT g, g * g FROM generate_series(1, 5000) g")
            total = 0
            count = 0
            for g, sq in cur:
                assert sq == g * g
                total += g
                count += 1
        assert (count, total) == (5000, 5000 * 5001 // 2)
        conn.commit()


def test_server_side_cursor_with_hold(url):
    with connect(url) as conn:
        with conn.cursor(name="py_hold", withhold=True) as cur:
            cur.execute("SELECT g FROM generate_series(1, 300) g")
            conn.commit()  # a WITH HOLD cursor outlives its transaction
            assert [r[0] for r in cur.fetchmany(100)] == list(range(1, 101))
            assert len(cur.fetchall()) == 200


def test_listen_notify(url):
    with connect(url, autocommit=True) as listener, connect(url, autocommit=True) as sender:
        listener.execute("LISTEN py_channel")
        for i in range(3):
            sender.execute("SELECT pg_notify('py_channel', %s)", (f"payload {i}",))
        got = [n.payload for n in listener.notifies(timeout=10, stop_after=3)]
        assert got == ["payload 0", "payload 1", "payload 2"]
        listener.execute("UNLISTEN py_channel")
        assert listener.execute("SELECT 1").fetchone() == (1,)


def test_cancel(url):
    with connect(url) as conn:
        timer = threading.Timer(0.5, conn.cancel_safe)
        timer.start()
        started = time.monotonic()
        with pytest.raises(errors.QueryCanceled):
            conn.execute("SELECT pg_sleep(20)")
        assert time.monotonic() - started < 10
        timer.join()
        conn.rollback()
        assert conn.execute("SELECT 2").fetchone() == (2,)


def test_statement_timeout(url):
    with connect(url) as conn:
        conn.execute("SET statement_timeout = '200ms'")
        with pytest.raises(errors.QueryCanceled):
            conn.execute("SELECT pg_sleep(5)")
        conn.rollback()
        assert conn.execute("SELECT 3").fetchone() == (3,)


def test_stress_50_clients_pool_3(url, stress_seconds, stress_clients):
    """Every client repeats a few queries (so each crosses prepare_threshold and runs
    prepared), inserts and reads back its own rows in transactions, and checks every result."""
    with connect(url, autocommit=True) as conn:
        fresh_table(conn, "py_stress", "client int, n int")
    deadline = time.monotonic() + stress_seconds
    errors_seen = []
    ops = [0] * stress_clients

    def client(cid):
        rng = random.Random(cid)
        inserted = 0
        try:
            with connect(url) as conn:
                while time.monotonic() < deadline:
                    k = rng.randrange(4)
                    if k == 0:
                        v = rng.randrange(1_000_000)
                        assert conn.execute("SELECT %s::int8 * 2", (v,)).fetchone() == (v * 2,)
                        conn.commit()
                    elif k == 1:
                        n = rng.randrange(1, 50)
                        row = conn.execute("SELECT count(*), sum(g) FROM generate_series(1, %s) g", (n,)).fetchone()
                        assert row == (n, n * (n + 1) // 2)
                        conn.commit()
                    elif k == 2:
                        conn.execute("INSERT INTO py_stress VALUES (%s, %s)", (cid, inserted))
                        got = conn.execute("SELECT count(*) FROM py_stress WHERE client = %s", (cid,)).fetchone()
                        assert got == (inserted + 1,)
                        conn.commit()
                        inserted += 1
                    else:
                        s = f"c{cid}-{rng.randrange(1000)}"
                        assert conn.execute("SELECT upper(%s), length(%s)", (s, s)).fetchone() == (s.upper(), len(s))
                        conn.commit()
                    ops[cid] += 1
                assert conn.execute("SELECT count(*) FROM py_stress WHERE client = %s", (cid,)).fetchone() == (inserted,)
        except Exception as e:  # noqa: BLE001 - every failure is collected and reported
            errors_seen.append(f"client {cid}: {type(e).__name__}: {e}")

    threads = [threading.Thread(target=client, args=(c,)) for c in range(stress_clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(stress_seconds + 60)
    assert not errors_seen, f"{len(errors_seen)} clients failed, first: {errors_seen[:3]}"
    assert all(n > 0 for n in ops), "every client got work done"
