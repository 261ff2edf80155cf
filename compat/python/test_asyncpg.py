"""asyncpg at its default settings: every query goes through its statement cache
(statement_cache_size=100), that is as a named prepared statement."""

import asyncio
import io
import random
import time

import asyncpg
import pytest


def run(coro):
    return asyncio.run(coro)


async def fresh_table(conn, name, columns):
    await conn.execute(f"DROP TABLE IF EXISTS {name}")
    await conn.execute(f"CREATE TABLE {name} ({columns})")


def test_statement_cache_default(url):
    async def main():
        conn = await asyncpg.connect(url)
        try:
            for i in range(30):
                assert await conn.fetchval("SELECT $1::int * 2", i) == i * 2
                row = await conn.fetchrow("SELECT $1::text AS t, $2::int8 AS n", f"v{i}", i)
                assert (row["t"], row["n"]) == (f"v{i}", i)
            stmt = await conn.prepare("SELECT g FROM generate_series(1, $1::int) g")
            for n in (1, 5, 50):
                assert [r[0] for r in await stmt.fetch(n)] == list(range(1, n + 1))
        finally:
            await conn.close()

    run(main())


def test_statement_cache_after_error(url):
    async def main():
        conn = await asyncpg.connect(url)
        try:
            for i in range(1, 5):
                assert await conn.fetchval("SELECT 12 / $1::int", i) == 12 // i
            with pytest.raises(asyncpg.DivisionByZeroError):
                await conn.fetchval("SELECT 12 / $1::int", 0)
            assert await conn.fetchval("SELECT 12 / $1::int", 3) == 4
        finally:
            await conn.close()

    run(main())


def test_executemany(url):
    async def main():
        conn = await asyncpg.connect(url)
        try:
            await fresh_table(conn, "apg_many", "id int, label text")
            await conn.executemany("INSERT INTO apg_many VALUES ($1, $2)", [(i, f"l{i}") for i in range(1000)])
            assert await conn.fetchrow("SELECT count(*), sum(id) FROM apg_many") == (1000, 999 * 1000 // 2)
            # An error in the middle of executemany rolls the whole batch back.
            await conn.execute("ALTER TABLE apg_many ADD PRIMARY KEY (id)")
            with pytest.raises(asyncpg.UniqueViolationError):
                await conn.executemany("INSERT INTO apg_many VALUES ($1, $2)", [(2000, "a"), (5, "dup"), (2001, "b")])
            assert await conn.fetchval("SELECT count(*) FROM apg_many") == 1000
        finally:
            await conn.close()

    run(main())


def test_copy_records_to_table(url):
    async def main():
        conn = await asyncpg.connect(url)
        try:
            await fresh_table(conn, "apg_copy_records", "id int, label text, x float8")
            records = [(i, f"r{i}", i * 0.5) for i in range(5000)]
            result = await conn.copy_records_to_table("apg_copy_records", records=records)
            assert result == "COPY 5000"
            rows = await conn.fetch("SELECT id, label, x FROM apg_copy_records ORDER BY id")
            assert [tuple(r) for r in rows] == records
        finally:
            await conn.close()

    run(main())


def test_copy_to_table_and_from_query(url):
    async def main():
        conn = await asyncpg.connect(url)
        try:
            await fresh_table(conn, "apg_copy_text", "id int, label text")
            data = "".join(f"{i}\tline {i}\n" for i in range(2000)).encode()
            result = await conn.copy_to_table("apg_copy_text", source=io.BytesIO(data))
            assert result == "COPY 2000"
            out = io.BytesIO()
            result = await conn.copy_from_query("SELECT id, label FROM apg_copy_text ORDER BY id", output=out)
            assert result == "COPY 2000"
            assert out.getvalue() == data
            out = io.BytesIO()
            await conn.copy_from_table("apg_copy_text", output=out, format="csv")
            assert out.getvalue().count(b"\n") == 2000
        finally:
            await conn.close()

    run(main())


def test_transactions(url):
    async def main():
        conn = await asyncpg.connect(url)
        try:
            await fresh_table(conn, "apg_tx", "n int")
            async with conn.transaction():
                await conn.execute("INSERT INTO apg_tx VALUES (1)")
                try:
                    async with conn.transaction():  # a savepoint
                        await conn.execute("INSERT INTO apg_tx VALUES (2)")
                        raise RuntimeError("roll the savepoint back")
                except RuntimeError:
                    pass
                await conn.execute("INSERT INTO apg_tx VALUES (3)")
            with pytest.raises(RuntimeError):
                async with conn.transaction():
                    await conn.execute("INSERT INTO apg_tx VALUES (4)")
                    raise RuntimeError("roll back")
            async with conn.transaction(isolation="serializable", readonly=True):
                assert await conn.fetchval("SELECT current_setting('transaction_read_only')") == "on"
                assert [r[0] for r in await conn.fetch("SELECT n FROM apg_tx ORDER BY n")] == [1, 3]
            assert not conn.is_in_transaction()
        finally:
            await conn.close()

    run(main())


def test_type_introspection(url):
    async def main():
        conn = await asyncpg.connect(url)
        try:
            await conn.execute("DROP TABLE IF EXISTS apg_types; DROP TYPE IF EXISTS apg_mood; DROP TYPE IF EXISTS apg_pair")
            await conn.execute("CREATE TYPE apg_mood AS ENUM ('sad', 'ok', 'happy')")
            await conn.execute("CREATE TYPE apg_pair AS (a int, b text)")
            await conn.execute("CREATE TABLE apg_types (m apg_mood, p apg_pair, ms apg_mood[])")
            # asyncpg looks up unknown type OIDs in pg_type with its own introspection query.
            await conn.execute(
                "INSERT INTO apg_types VALUES ($1, $2, $3)", "happy", (7, "seven"), ["sad", "ok"]
            )
            row = await conn.fetchrow("SELECT m, p, ms FROM apg_types")
            assert row["m"] == "happy"
            assert tuple(row["p"]) == (7, "seven")
            assert row["ms"] == ["sad", "ok"]
            await conn.set_type_codec("json", encoder=lambda v: v, decoder=lambda v: "decoded:" + v, schema="pg_catalog")
            assert await conn.fetchval("SELECT '{\"a\":1}'::json") == 'decoded:{"a":1}'
        finally:
            await conn.close()

    run(main())


def test_cancellation_via_timeout(url):
    async def main():
        conn = await asyncpg.connect(url)
        try:
            started = time.monotonic()
            with pytest.raises(asyncio.TimeoutError):
                await conn.fetchval("SELECT pg_sleep(20)", timeout=0.5)
            assert time.monotonic() - started < 10
            # asyncpg sent a CancelRequest; the connection must be usable again.
            assert await conn.fetchval("SELECT $1::int", 9) == 9
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(conn.execute("SELECT pg_sleep(20)"), 0.5)
            assert await conn.fetchval("SELECT 10") == 10
        finally:
            await conn.close()

    run(main())


def test_stress_50_clients_pool_3(url, stress_seconds, stress_clients):
    async def client(cid, deadline, failures):
        rng = random.Random(cid)
        inserted = 0
        ops = 0
        try:
            conn = await asyncpg.connect(url)
            try:
                while time.monotonic() < deadline:
                    k = rng.randrange(4)
                    if k == 0:
                        v = rng.randrange(1_000_000)
                        assert await conn.fetchval("SELECT $1::int8 * 2", v) == v * 2
                    elif k == 1:
                        n = rng.randrange(1, 50)
                        assert tuple(await conn.fetchrow("SELECT count(*), sum(g) FROM generate_series(1, $1::int) g", n)) == (
                            n,
                            n * (n + 1) // 2,
                        )
                    elif k == 2:
                        async with conn.transaction():
                            await conn.execute("INSERT INTO apg_stress VALUES ($1, $2)", cid, inserted)
                            assert await conn.fetchval("SELECT count(*) FROM apg_stress WHERE client = $1", cid) == inserted + 1
                        inserted += 1
                    else:
                        rows = await conn.fetch("SELECT g, $1::text || g FROM generate_series(1, 20) g", f"c{cid}-")
                        assert [tuple(r) for r in rows] == [(g, f"c{cid}-{g}") for g in range(1, 21)]
                    ops += 1
                assert await conn.fetchval("SELECT count(*) FROM apg_stress WHERE client = $1", cid) == inserted
            finally:
                await conn.close()
        except Exception as e:  # noqa: BLE001 - every failure is collected and reported
            failures.append(f"client {cid}: {type(e).__name__}: {e}")
        return ops

    async def main():
        conn = await asyncpg.connect(url)
        await fresh_table(conn, "apg_stress", "client int, n int")
        await conn.close()
        deadline = time.monotonic() + stress_seconds
        failures = []
        ops = await asyncio.gather(*(client(c, deadline, failures) for c in range(stress_clients)))
        assert not failures, f"{len(failures)} clients failed, first: {failures[:3]}"
        assert all(n > 0 for n in ops)

    run(main())
