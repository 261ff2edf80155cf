"""The merge engine's differential corpus through psycopg 3 in the extended protocol.

compat/run writes the corpus (`cargo run -p merge --example corpus_export`), loads its rows
into a reference database (`corpus` on the main cluster) and into four shard clusters, and
serves the shards through pgvia as the sharded database `corpus`. Each query runs with its
literals as parameters (server-side binding; `prepare_threshold=0`, so every query is a
named prepared statement, executed twice to reuse it) on COMPAT_CORPUS_URL (pgvia's sharded
database, or the reference itself when the suite runs directly) and on the reference, and
the results must agree as the Rust corpus compares them: column names and types, rows in
order when the query orders completely, as multisets otherwise, floats of the
variance family to a relative 1e-9; or the same SQLSTATE.
"""

import json
import math
import os
import re

import psycopg
import pytest


def _corpus():
    path = os.environ.get("COMPAT_CORPUS")
    if not path:
        pytest.skip("COMPAT_CORPUS is not set (compat/run sets it)")
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _pyformat(sql):
    """`$1, $2, ...` (each once, in order) as psycopg's `%s`, a literal `%` doubled."""
    numbers = [int(n) for n in re.findall(r"\$(\d+)", sql)]
    assert numbers == list(range(1, len(numbers) + 1)), sql
    return re.sub(r"\$\d+", "%s", sql.replace("%", "%%"))


def _cell(v):
    # str() keeps what equality would lose: Decimal('1.50') and Decimal('1.5') differ.
    return None if v is None else str(v)


def _run(conn, sql, params):
    """(columns, rows) or ('error', sqlstate)."""
    try:
        with conn.cursor() as cur:
            cur.execute(sql, params, prepare=True)
            columns = [(c.name, c.type_code) for c in cur.description]
            rows = [tuple(_cell(v) for v in r) for r in cur.fetchall()]
        return columns, rows
    except psycopg.Error as e:
        return "error", e.sqlstate


def _floats_close(a, b):
    for x, y in zip(a, b):
        if x == y:
            continue
        try:
            p, q = float(x), float(y)
        except (TypeError, ValueError):
            return False
        if not math.isclose(p, q, rel_tol=1e-9):
            return False
    return True


def _same(want, got, compare):
    if want[0] == "error" or got[0] == "error":
        return want == got
    if want[0] != got[0]:
        return False
    a, b = want[1], got[1]
    if compare == "ordered":
        return a == b
    if compare == "unordered":
        key = lambda r: tuple((v is None, v or "") for v in r)  # noqa: E731
        return sorted(a, key=key) == sorted(b, key=key)
    if compare == "count":
        return len(a) == len(b)
    if compare == "approx":
        return len(a) == len(b) and all(_floats_close(x, y) for x, y in zip(a, b))
    raise AssertionError(f"unknown comparison {compare}")


def test_merge_corpus_with_parameters():
    corpus = _corpus()
    reference_url = os.environ["COMPAT_CORPUS_REFERENCE_URL"]
    target_url = os.environ["COMPAT_CORPUS_URL"]
    failures, with_params, answered = [], 0, 0
    # Autocommit: each query its own exchange; the session settings of the Rust corpus.
    settings = {"autocommit": True, "prepare_threshold": 0, "options": "-c TimeZone=UTC -c DateStyle=ISO,YMD"}
    with psycopg.connect(reference_url, **settings) as reference, psycopg.connect(target_url, **settings) as target:
        for q in corpus:
            sql, params = _pyformat(q["sql"]), q["params"]
            with_params += bool(params)
            want = _run(reference, sql, params)
            answered += want[0] != "error"
            # Twice: the second execution reuses the named prepared statement.
            for run in (1, 2):
                got = _run(target, sql, params)
                if not _same(want, got, q["compare"]):
                    failures.append(f"run {run}: {q['sql']} {params}\n  reference: {str(want)[:300]}\n  got: {str(got)[:300]}")
    print(f"{len(corpus)} queries ({with_params} with parameters, {answered} answered with rows), {len(failures)} differ")
    assert with_params >= 100
    assert not failures, f"{len(failures)} differ:\n" + "\n".join(failures[:20])


def _prepared_after_errors(url):
    """What psycopg 3 answers, at its default prepare_threshold, to statements that turn
    prepared and then fail, and to prepares whose text fails to parse."""
    out = []
    with psycopg.connect(url, autocommit=True) as conn:
        for i in range(8):
            out.append(conn.execute("SELECT 10 / %s::int", (i + 1,)).fetchone())
        for arg in (0, 2, 0, 5):
            try:
                out.append(conn.execute("SELECT 10 / %s::int", (arg,)).fetchone())
            except psycopg.Error as e:
                out.append(e.sqlstate)
        for sql in ("SELEC %s::int", "SELECT %s::int + 1", "SELECT nope FROM t WHERE id = %s", "SELECT count(*) FROM t WHERE id = %s"):
            for _ in range(3):
                try:
                    out.append(conn.execute(sql, (1,), prepare=True).fetchone())
                except psycopg.Error as e:
                    out.append(e.sqlstate)
    return out


def test_prepared_statements_after_errors():
    # Statement names on a sharded database are taken when a shard accepts the Parse, as on
    # one PostgreSQL (docs/sharding.md): the driver's prepared statements after errors work
    # the same through pgvia's sharded database as on the reference.
    got = _prepared_after_errors(os.environ["COMPAT_CORPUS_URL"])
    want = _prepared_after_errors(os.environ["COMPAT_CORPUS_REFERENCE_URL"])
    assert "22012" in want and "42601" in want and "42703" in want
    assert got == want
