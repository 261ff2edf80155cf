//! The differential corpus shared by `merge_diff.rs` and `examples/corpus_export.rs` (which
//! writes it out for the driver suites in `compat/`): the rows, each database's SQL, the
//! queries and how their results compare.

#![allow(dead_code)]

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

pub const SHARDS: usize = 4;
pub const ROWS: i64 = 2000;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Compare {
    /// The query orders completely: rows compared in order.
    Ordered,
    /// Rows compared as multisets.
    Unordered,
    /// Ordered, float cells equal to a relative 1e-9 (float variance merges pairwise).
    Approx,
    /// LIMIT without a total order: any rows may come; only their count is compared.
    CountOnly,
}

fn literal(v: Option<String>) -> String {
    v.map_or("NULL".into(), |s| format!("'{}'", s.replace('\'', "''")))
}

/// `v`, or NULL one time in ten (`keep` decides).
fn maybe<T>(keep: bool, v: T) -> Option<T> {
    keep.then_some(v)
}

/// Random rows: (id, SQL VALUES tuple).
pub fn rows() -> Vec<(i64, String)> {
    let mut rng = StdRng::seed_from_u64(0x3e76e);
    let words = ["alpha", "beta", "Gamma", "delta", "épée", "zeta", "", "a b", "O'Brien", "日本"];
    (1..=ROWS)
        .map(|id| {
            let g = maybe(rng.gen_range(0..10) != 0, rng.gen_range(0..8).to_string());
            let h = rng.gen_range(0..30).to_string();
            let k = maybe(rng.gen_range(0..10) != 0, rng.gen_range(-1000..1000).to_string());
            let n = maybe(
                rng.gen_range(0..10) != 0,
                format!(
                    "{}{}.{:010}",
                    if rng.gen_bool(0.3) { "-" } else { "" },
                    rng.gen_range(0..99_999_999_999_999_999_999u128),
                    rng.gen_range(0..10_000_000_000u64)
                ),
            );
            let scale = rng.gen_range(0..6usize);
            let m = maybe(
                rng.gen_range(0..10) != 0,
                format!("{}.{}", rng.gen_range(-5000..5000), "7".repeat(scale)),
            );
            let m = m.map(|s| s.trim_end_matches('.').to_string());
            // Multiples of 1/4: every sum is exact in float8, so the shards' partial sums
            // add up to the reference's bit for bit.
            let f =
                maybe(rng.gen_range(0..10) != 0, format!("{}", f64::from(rng.gen_range(-4000..4000)) / 4.0));
            let s = maybe(rng.gen_range(0..10) != 0, {
                let w = words[rng.gen_range(0..words.len())];
                if rng.gen_bool(0.5) {
                    format!("{w}{}", rng.gen_range(0..50))
                } else {
                    w.to_string()
                }
            });
            let b = maybe(rng.gen_range(0..10) != 0, rng.gen_bool(0.7).to_string());
            let ts = maybe(
                rng.gen_range(0..10) != 0,
                format!(
                    "{:04}-{:02}-{:02} {:02}:{:02}:{:02}.{:06}",
                    rng.gen_range(1990..2030),
                    rng.gen_range(1..=12),
                    rng.gen_range(1..=28),
                    rng.gen_range(0..24),
                    rng.gen_range(0..60),
                    rng.gen_range(0..60),
                    rng.gen_range(0..1_000_000)
                ),
            );
            let tz = ts.clone().map(|t| format!("{t}{:+03}", rng.gen_range(-12..13)));
            let d = maybe(
                rng.gen_range(0..10) != 0,
                format!(
                    "{:04}-{:02}-{:02}",
                    rng.gen_range(1900..2100),
                    rng.gen_range(1..=12),
                    rng.gen_range(1..=28)
                ),
            );
            let u = maybe(rng.gen_range(0..10) != 0, {
                let b: [u8; 16] = rng.gen();
                b.iter().map(|x| format!("{x:02x}")).collect::<String>()
            });
            let vals = [Some(id.to_string()), g, Some(h), k, n, m, f, s, b, ts, tz, d, u];
            let tuple: Vec<String> = vals.into_iter().map(literal).collect();
            (id, format!("({})", tuple.join(", ")))
        })
        .collect()
}

pub const DDL: &str =
    "CREATE TABLE t (id int8 PRIMARY KEY, g int4, h int2 NOT NULL, k int4, n numeric(30,10), \
                   m numeric, f float8, s text, b bool, ts timestamp, tz timestamptz, d date, u uuid);";

/// Tables for co-located subqueries, CTEs and windows: `w` sharded on `id` like `t`,
/// `kinds` omnisharded.
pub const COLOCATED_DDL: &str = "CREATE TABLE w (id int8 NOT NULL, x int4 NOT NULL);
CREATE TABLE kinds (g int4 PRIMARY KEY, label text);
INSERT INTO kinds VALUES (0, 'zero'), (1, 'one'), (2, 'two'), (3, 'three'), (4, 'four'), (5, 'five'), (6, 'six');";

/// The SQL that creates and fills one database: the reference (`shard` None: every row) or
/// shard `s` (the rows PostgreSQL's hash partitioning puts there). `w` holds three rows per
/// key, sharded like `t`; `kinds` is the same everywhere.
pub fn database_sql(shard: Option<u64>) -> String {
    let rows = rows();
    let on = |id: i64| shard.is_none_or(|s| shard::partition_of(&shard::Value::Int(id), SHARDS as u64) == s);
    let tuples: Vec<&str> = rows.iter().filter(|(id, _)| on(*id)).map(|(_, t)| t.as_str()).collect();
    let w: Vec<String> = (0..2100i64)
        .map(|i| (1 + i % 700, i))
        .filter(|(id, _)| on(*id))
        .map(|(id, x)| format!("({id}, {x})"))
        .collect();
    let mut sql = format!("{DDL}\n{COLOCATED_DDL}\nINSERT INTO w VALUES {};\n", w.join(", "));
    if !tuples.is_empty() {
        sql.push_str(&format!("INSERT INTO t VALUES {};\n", tuples.join(",\n")));
    }
    sql.push_str("ANALYZE t;\n");
    sql
}

pub fn corpus() -> Vec<(String, Compare)> {
    use Compare::*;
    let mut q: Vec<(String, Compare)> = Vec::new();
    let mut add = |s: &str, c: Compare| q.push((s.to_string(), c));
    // Co-located windows, subqueries, CTEs and derived tables, pushed down whole.
    add("SELECT id, x, sum(x) OVER (PARTITION BY id), rank() OVER (PARTITION BY id ORDER BY x DESC) FROM w ORDER BY id, x", Ordered);
    add(
        "SELECT id, x, lag(x) OVER win FROM w WINDOW win AS (PARTITION BY id ORDER BY x) ORDER BY id, x",
        Ordered,
    );
    add(
        "SELECT id, x, count(*) OVER (PARTITION BY id, x % 2) AS c FROM w ORDER BY id, x LIMIT 20 OFFSET 5",
        Ordered,
    );
    add("SELECT DISTINCT id, sum(x) OVER (PARTITION BY w.id) FROM w ORDER BY 1", Ordered);
    add("SELECT id, x, row_number() OVER (PARTITION BY id ORDER BY x) AS r FROM w ORDER BY r DESC, x LIMIT 30", Ordered);
    add("SELECT w.id, max(w.x) OVER (PARTITION BY w.id) FROM w JOIN kinds k ON k.g = w.x % 8", Unordered);
    add("SELECT id, (SELECT label FROM kinds WHERE kinds.g = t.g) FROM t ORDER BY id", Ordered);
    add("SELECT count(*) FROM t WHERE g IN (SELECT g FROM kinds WHERE label LIKE 't%')", Ordered);
    add("SELECT g, count(*) FROM t WHERE EXISTS (SELECT 1 FROM kinds WHERE kinds.g = t.g) GROUP BY g ORDER BY g", Ordered);
    add("SELECT id, (SELECT sum(w.x) FROM w WHERE w.id = t.id) FROM t ORDER BY id LIMIT 50", Ordered);
    add("SELECT count(*) FROM t WHERE EXISTS (SELECT 1 FROM w WHERE w.id = t.id AND w.x > 1000)", Ordered);
    add("SELECT g, sum((SELECT count(*) FROM w WHERE w.id = t.id)) FROM t GROUP BY g ORDER BY g", Ordered);
    add("SELECT id FROM t WHERE k > (SELECT avg(w.x) FROM w WHERE t.id = w.id) ORDER BY id", Ordered);
    add(
        "SELECT id, g FROM t WHERE NOT EXISTS (SELECT 1 FROM w WHERE w.id = t.id) ORDER BY id DESC LIMIT 25",
        Ordered,
    );
    add("WITH kk AS (SELECT g, label FROM kinds) SELECT t.g, kk.label, count(*) FROM t JOIN kk ON kk.g = t.g GROUP BY 1, 2 ORDER BY 1", Ordered);
    add("WITH c AS (SELECT id, k FROM t WHERE k > 0) SELECT count(*), sum(k), max(id) FROM c", Ordered);
    add("WITH c AS (SELECT * FROM t) SELECT count(*) FROM c", Ordered);
    add("WITH s AS (SELECT id, sum(x) AS total FROM w GROUP BY id) SELECT t.id, s.total FROM t JOIN s ON s.id = t.id ORDER BY t.id LIMIT 40", Ordered);
    add(
        "SELECT count(*), max(total), sum(total) FROM (SELECT id, sum(x) AS total FROM w GROUP BY id) s",
        Ordered,
    );
    add("SELECT * FROM (SELECT id, g FROM t WHERE g = 3) x ORDER BY id", Ordered);
    add("SELECT v.id, v.x, t.g FROM t JOIN (SELECT id, x FROM w WHERE x % 5 = 0) v ON v.id = t.id ORDER BY v.x", Ordered);
    add("WITH RECURSIVE r AS (SELECT 1 AS n UNION ALL SELECT n + 1 FROM r WHERE n < 5) SELECT t.h, count(*) FROM t JOIN r ON r.n = t.h GROUP BY t.h ORDER BY 1", Ordered);
    // Plain concatenation and WHERE.
    add("SELECT id, g, s FROM t", Unordered);
    add("SELECT * FROM t WHERE k > 500", Unordered);
    add("SELECT id FROM t WHERE id < 0", Unordered);
    // ORDER BY every type, both directions, every NULLS placement, ties broken by id.
    for col in ["g", "k", "n", "m", "f", "s", "b", "ts", "tz", "d", "u"] {
        for dir in ["", " DESC"] {
            for nulls in ["", " NULLS FIRST", " NULLS LAST"] {
                add(&format!("SELECT id, {col} FROM t ORDER BY {col}{dir}{nulls}, id"), Ordered);
            }
        }
        add(&format!("SELECT {col}, id FROM t ORDER BY 1 DESC, 2 LIMIT 10 OFFSET 5"), Ordered);
    }
    // Hidden sort columns: expressions and columns not in the output.
    add("SELECT id, s FROM t ORDER BY k * 2 + 1 DESC NULLS LAST, id LIMIT 20", Ordered);
    add("SELECT id FROM t ORDER BY lower(s), id", Ordered);
    add("SELECT s FROM t ORDER BY g, h DESC, id OFFSET 1990", Ordered);
    add("SELECT id, k FROM t ORDER BY coalesce(k, 0), id LIMIT 7", Ordered);
    add("SELECT * FROM t ORDER BY id LIMIT 5", Ordered);
    add("SELECT * FROM t ORDER BY k DESC, id OFFSET 3 LIMIT 4", Ordered);
    add("SELECT id AS x, k AS y FROM t ORDER BY y, x LIMIT 50", Ordered);
    add("SELECT id, n FROM t ORDER BY n + m NULLS FIRST, id LIMIT 30", Ordered);
    add("SELECT id, ts FROM t ORDER BY extract(year FROM ts), id OFFSET 100 LIMIT 100", Ordered);
    add("SELECT id FROM t ORDER BY s COLLATE \"C\", id LIMIT 40", Ordered);
    add("SELECT id FROM t WHERE id < 0 ORDER BY id", Ordered);
    add("SELECT id FROM t ORDER BY id LIMIT 0", Ordered);
    add("SELECT id FROM t ORDER BY id OFFSET 5000", Ordered);
    add("SELECT id FROM t LIMIT 10", CountOnly);
    add("SELECT id FROM t OFFSET 1995", CountOnly);
    // DISTINCT and DISTINCT ON.
    add("SELECT DISTINCT g FROM t", Unordered);
    add("SELECT DISTINCT g, b FROM t ORDER BY g, b", Ordered);
    add("SELECT DISTINCT n FROM t ORDER BY n LIMIT 10", Ordered);
    add("SELECT DISTINCT m FROM t", Unordered);
    add("SELECT DISTINCT s FROM t ORDER BY s DESC LIMIT 15", Ordered);
    add("SELECT DISTINCT h % 7 FROM t", Unordered);
    add("SELECT DISTINCT ON (g) g, id, k FROM t ORDER BY g, k DESC NULLS LAST, id", Ordered);
    add("SELECT DISTINCT ON (g, b) g, b, id FROM t ORDER BY g, b, id", Ordered);
    add("SELECT DISTINCT ON (h) h, id FROM t ORDER BY h, id LIMIT 5 OFFSET 2", Ordered);
    // Every aggregate: whole table, grouped, and over no rows at all.
    let aggs = [
        "count(*)",
        "count(k)",
        "count(DISTINCT g)",
        "count(DISTINCT s)",
        "count(DISTINCT n)",
        "sum(k)",
        "sum(h)",
        "sum(id)",
        "sum(n)",
        "sum(m)",
        "sum(f)",
        "avg(k)",
        "avg(h)",
        "avg(id)",
        "avg(n)",
        "avg(m)",
        "avg(f)",
        "min(k)",
        "max(k)",
        "min(n)",
        "max(m)",
        "min(f)",
        "max(f)",
        "min(s)",
        "max(s)",
        "min(ts)",
        "max(tz)",
        "min(d)",
        "max(d)",
        "bool_and(b)",
        "bool_or(b)",
        "every(b)",
        "sum(DISTINCT k)",
        "avg(DISTINCT g)",
        "sum(DISTINCT m)",
        "count(*) FILTER (WHERE b)",
        "sum(k) FILTER (WHERE g > 2)",
        "avg(n) FILTER (WHERE k < 0)",
    ];
    for a in aggs {
        add(&format!("SELECT {a} FROM t"), Ordered);
        add(&format!("SELECT g, {a} FROM t GROUP BY g ORDER BY g"), Ordered);
        add(&format!("SELECT {a} FROM t WHERE id < 0"), Ordered);
    }
    add("SELECT count(*), sum(n), avg(n), min(s), max(s) AS top FROM t WHERE k > 0", Ordered);
    // GROUP BY expressions, hidden group keys, aliases, ordinals.
    add("SELECT g % 3, count(*) FROM t GROUP BY g % 3 ORDER BY 1", Ordered);
    add("SELECT date_trunc('month', ts) AS mo, count(*), sum(k) FROM t GROUP BY mo ORDER BY mo", Ordered);
    add("SELECT b, g, count(*) FROM t GROUP BY b, g", Unordered);
    add("SELECT count(*) FROM t GROUP BY g, h", Unordered);
    add("SELECT lower(s) AS ls, count(*) FROM t GROUP BY 1 ORDER BY 2 DESC, 1 LIMIT 5", Ordered);
    add("SELECT h, avg(n) FROM t GROUP BY h ORDER BY h", Ordered);
    add("SELECT d, count(*) FROM t GROUP BY d ORDER BY count(*) DESC, d LIMIT 10", Ordered);
    add("SELECT g FROM t GROUP BY g", Unordered);
    add("SELECT g, h FROM t GROUP BY g, h ORDER BY g, h OFFSET 10 LIMIT 10", Ordered);
    // HAVING after the merge.
    add("SELECT g, count(*) FROM t GROUP BY g HAVING count(*) > 250", Unordered);
    add("SELECT g FROM t GROUP BY g HAVING sum(k) < 0 OR max(k) > 990", Unordered);
    add("SELECT h, count(*) FROM t GROUP BY h HAVING avg(n) > 0 AND NOT bool_or(b)", Unordered);
    add("SELECT h FROM t GROUP BY h HAVING min(s) IS NOT NULL AND count(*) >= 60", Unordered);
    add("SELECT h, sum(n) FROM t GROUP BY h HAVING sum(n) >= 0 ORDER BY sum(n) DESC LIMIT 5", Ordered);
    add("SELECT h FROM t GROUP BY h HAVING count(DISTINCT g) = 8 ORDER BY h", Ordered);
    add("SELECT g, h FROM t GROUP BY g, h HAVING g = 3 ORDER BY h", Ordered);
    add("SELECT g FROM t GROUP BY g HAVING max(ts) > '2029-06-01' ORDER BY g", Ordered);
    add("SELECT count(*) FROM t HAVING count(*) > 1000000", Ordered);
    add("SELECT g, count(*) AS n FROM t GROUP BY g HAVING n > 1", Ordered);
    add("SELECT g, k FROM t GROUP BY g", Ordered);
    add("SELECT id FROM t ORDER BY nosuchcolumn", Ordered);
    add("SELECT g FROM t GROUP BY g ORDER BY max(k) DESC NULLS LAST, g", Ordered);
    add("SELECT h FROM t GROUP BY h ORDER BY count(*) DESC, h LIMIT 3", Ordered);
    add("SELECT DISTINCT count(*) FROM t GROUP BY g", Unordered);
    // The stddev/variance families: exact for integer and numeric input.
    for f in ["stddev", "stddev_samp", "stddev_pop", "variance", "var_samp", "var_pop"] {
        for arg in ["k", "h", "n", "m"] {
            add(&format!("SELECT {f}({arg}) FROM t"), Ordered);
        }
        add(&format!("SELECT g, {f}(n), {f}(k) FILTER (WHERE b) FROM t GROUP BY g ORDER BY g"), Ordered);
        add(&format!("SELECT {f}(m) FROM t WHERE id = 7"), Ordered);
        add(&format!("SELECT {f}(f) FROM t"), Approx);
    }
    add("SELECT h, stddev(f), var_samp(f) FROM t GROUP BY h ORDER BY h", Approx);
    add("SELECT variance(k) FROM t WHERE id < 0", Ordered);
    // List aggregates with their ORDER BY: the shards' runs interleaved by the keys.
    add("SELECT string_agg(s, ',' ORDER BY s, id) FROM t", Ordered);
    add("SELECT g, string_agg(s, ' | ' ORDER BY id DESC) FROM t GROUP BY g ORDER BY g", Ordered);
    add("SELECT array_agg(id ORDER BY id) FROM t WHERE k > 900", Ordered);
    add("SELECT g, array_agg(s ORDER BY s NULLS FIRST, id) FROM t GROUP BY g ORDER BY g", Ordered);
    add("SELECT h, array_agg(n ORDER BY n DESC NULLS LAST, id) FROM t GROUP BY h ORDER BY h", Ordered);
    add("SELECT jsonb_agg(k ORDER BY id) FROM t WHERE g = 1", Ordered);
    add("SELECT g, jsonb_agg(s ORDER BY id) AS j FROM t GROUP BY g ORDER BY g", Ordered);
    add("SELECT json_agg(f ORDER BY id) FROM t WHERE h = 3", Ordered);
    add("SELECT json_agg(s ORDER BY ts, id) FROM t WHERE h < 5", Ordered);
    add("SELECT array_agg(ts ORDER BY tz, id) FROM t WHERE g = 2", Ordered);
    add("SELECT string_agg(s, ',' ORDER BY s) FILTER (WHERE b) FROM t WHERE h = 1", Ordered);
    add("SELECT array_agg(id ORDER BY id) FROM t WHERE id < 0", Ordered);
    add("SELECT array_agg(u ORDER BY u) FROM t WHERE h = 7", Ordered);
    add("SELECT jsonb_agg(d ORDER BY d, id) FROM t WHERE h = 9", Ordered);
    add("SELECT array_agg(b ORDER BY id), count(*) FROM t WHERE h = 10", Ordered);
    add("SELECT h, string_agg(s, '' ORDER BY id) FILTER (WHERE id % 5 = 0) FROM t GROUP BY h HAVING count(*) > 60 ORDER BY h", Ordered);
    add("SELECT DISTINCT bool_or(b) FROM t GROUP BY h ORDER BY 1", Ordered);
    q
}

/// Queries with parameters (text values), run in the extended protocol.
pub const PARAMETERIZED: &[(&str, &[Option<&str>], Compare)] = &[
    (
        "SELECT id, k FROM t WHERE g = $1 ORDER BY k DESC, id LIMIT $2 OFFSET $3",
        &[Some("3"), Some("5"), Some("2")],
        Compare::Ordered,
    ),
    ("SELECT id FROM t WHERE k > $1 ORDER BY id LIMIT $2", &[Some("0"), None], Compare::Ordered),
    ("SELECT id FROM t ORDER BY n DESC NULLS LAST, id OFFSET $1", &[Some("1990")], Compare::Ordered),
    ("SELECT DISTINCT g FROM t WHERE h < $1 ORDER BY g LIMIT $2", &[Some("10"), Some("3")], Compare::Ordered),
    (
        "SELECT g, count(*), avg(n) FROM t WHERE k > $1 GROUP BY g HAVING count(*) > 10 ORDER BY g LIMIT $2",
        &[Some("-500"), Some("4")],
        Compare::Ordered,
    ),
    (
        "SELECT h, sum(k) FROM t WHERE s <> $1 GROUP BY h ORDER BY 2 DESC, h LIMIT 3 OFFSET $2",
        &[Some("alpha"), Some("1")],
        Compare::Ordered,
    ),
];

/// Refused by the engine (0A000), never answered per shard.
pub const REFUSED: &[&str] = &[
    "SELECT id, row_number() OVER (ORDER BY id) FROM t",
    "SELECT id FROM t WHERE k > (SELECT avg(k) FROM t)",
    "SELECT id, sum(x) OVER (PARTITION BY x) FROM w",
    "SELECT g, row_number() OVER (PARTITION BY id) FROM t GROUP BY g, id",
    "SELECT t.id FROM t WHERE EXISTS (SELECT 1 FROM w WHERE w.x = t.id)",
    "SELECT t.id FROM t WHERE EXISTS (SELECT 1 FROM w t WHERE t.id = t.id)",
    "WITH c AS (SELECT g, count(*) AS n FROM t GROUP BY g) SELECT sum(n) FROM c",
    "WITH c AS (SELECT id FROM t ORDER BY id LIMIT 10) SELECT count(*) FROM c",
    "SELECT count(*) FROM t JOIN (SELECT id, x FROM w) v ON v.x = t.id",
    "SELECT count(*) FROM (SELECT DISTINCT x FROM w) v",
    "SELECT t.id FROM t, LATERAL (SELECT x FROM w WHERE w.id = t.id) l",
    "SELECT (SELECT sum(t.k) FROM kinds LIMIT 1) FROM t",
    "SELECT id, (SELECT sum(x) FROM w WHERE w.id = t.id) FROM t ORDER BY id",
    "WITH RECURSIVE r AS (SELECT id FROM t UNION SELECT id + 1 FROM r WHERE id < 3) SELECT count(*) FROM r",
    "SELECT stddev(DISTINCT k) FROM t",
    "SELECT string_agg(s, s ORDER BY s) FROM t",
    "SELECT array_agg(DISTINCT s) FROM t",
    "SELECT id FROM t UNION SELECT id FROM t",
    "SELECT g, count(*) FROM t GROUP BY ROLLUP (g)",
    "SELECT sum(k) / count(*) FROM t",
    "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY k) FROM t",
    "SELECT id FROM t ORDER BY id FETCH FIRST 5 ROWS WITH TIES",
];

/// Uncorrelated subqueries over sharded tables, computed first across the shards and
/// substituted (`merge::uncorrelated_subqueries`): the reference's answer, or its error.
pub const SUBSTITUTED: &[(&str, Compare)] = &[
    ("SELECT id, k FROM t WHERE k > (SELECT avg(k) FROM t) ORDER BY id", Compare::Ordered),
    ("SELECT count(*) FROM t WHERE k > (SELECT avg(x) FROM w)", Compare::Ordered),
    ("SELECT g, count(*) FROM t WHERE g IN (SELECT g FROM t WHERE k > 900) GROUP BY g ORDER BY g", Compare::Ordered),
    ("SELECT count(*) FROM t WHERE g NOT IN (SELECT g FROM t WHERE k > 990)", Compare::Ordered),
    ("SELECT count(*) FROM t WHERE g NOT IN (SELECT g FROM t WHERE k > 990 AND g IS NOT NULL)", Compare::Ordered),
    ("SELECT count(*) FROM t WHERE id IN (SELECT id FROM w WHERE x < 0)", Compare::Ordered),
    ("SELECT count(*) FROM t WHERE g NOT IN (SELECT g FROM t WHERE id < 0)", Compare::Ordered),
    ("SELECT count(*) FROM t WHERE (g IN (SELECT g FROM t WHERE id < 0)) IS NULL", Compare::Ordered),
    ("SELECT id, s FROM t WHERE s = (SELECT max(s) FROM t) ORDER BY id", Compare::Ordered),
    ("SELECT id FROM t WHERE ts > (SELECT max(ts) FROM t WHERE g = 1) ORDER BY id", Compare::Ordered),
    ("SELECT id, n FROM t WHERE n < (SELECT min(n) FROM t WHERE k > 0) + 1 ORDER BY id LIMIT 5", Compare::Ordered),
    ("SELECT id FROM t WHERE tz >= (SELECT max(tz) FROM t WHERE h = 2) ORDER BY id", Compare::Ordered),
    ("SELECT id FROM t WHERE u IN (SELECT u FROM t WHERE h = 3 AND k > 500) ORDER BY id", Compare::Ordered),
    ("SELECT id FROM t WHERE d = (SELECT min(d) FROM t) OR b = (SELECT bool_and(b) FROM t WHERE g = 1) ORDER BY id", Compare::Ordered),
    ("SELECT id FROM t WHERE k = (SELECT k FROM t WHERE id < 0)", Compare::Unordered),
    ("SELECT id FROM t WHERE k = (SELECT k FROM t WHERE id < 3)", Compare::Unordered),
    ("SELECT id FROM t WHERE k = (SELECT k, g FROM t WHERE id = 1)", Compare::Unordered),
    ("SELECT s FROM t WHERE s IN (SELECT s FROM t WHERE s LIKE 'O''B%') ORDER BY id", Compare::Ordered),
    ("SELECT count(*), sum(k) FROM t WHERE id IN (SELECT id FROM w WHERE x % 97 = 0)", Compare::Ordered),
    // Over omnisharded rows only once substituted: one shard's rows are the answer.
    ("SELECT g, label FROM kinds WHERE g IN (SELECT g FROM t WHERE k > 900) ORDER BY g", Compare::Ordered),
    // A CTE named like a table: the subquery run alone must read the CTE, not the table.
    ("WITH t AS (SELECT id, x AS k FROM w) SELECT count(*) FROM w WHERE x > (SELECT avg(k) FROM t)", Compare::Ordered),
    // CTEs over sharded tables computed first (`merge::next_cte`): alone, joined with a
    // sharded table, referenced twice, built on an earlier CTE, empty, with a column list.
    ("WITH c AS (SELECT g, count(*) AS n FROM t GROUP BY g) SELECT sum(n) FROM c", Compare::Ordered),
    ("WITH c AS (SELECT id FROM t ORDER BY id LIMIT 10) SELECT count(*) FROM c", Compare::Ordered),
    ("WITH c AS (SELECT g, count(*) AS n FROM t GROUP BY g) SELECT * FROM c", Compare::Unordered),
    ("WITH top AS (SELECT id FROM t ORDER BY k DESC NULLS LAST, id LIMIT 20) SELECT t.id, t.k FROM t JOIN top ON top.id = t.id ORDER BY t.id", Compare::Ordered),
    ("WITH c AS (SELECT g, count(*) AS n FROM t GROUP BY g) SELECT a.g, a.n, b.n FROM c a JOIN c b ON b.g = a.g ORDER BY 1", Compare::Ordered),
    ("WITH c AS (SELECT g, max(k) AS mk FROM t GROUP BY g), d AS (SELECT max(mk) AS top FROM c) SELECT id, k FROM t, d WHERE t.k = d.top ORDER BY id", Compare::Ordered),
    ("WITH c AS (SELECT id FROM t WHERE id < 0 ORDER BY id LIMIT 5) SELECT count(*), max(t.k) FROM t JOIN c ON c.id = t.id", Compare::Ordered),
    ("WITH c AS (SELECT g FROM t GROUP BY g HAVING count(*) > 240) SELECT count(*) FROM t WHERE g IN (SELECT g FROM c)", Compare::Ordered),
    ("WITH c(grp, total) AS (SELECT g, sum(k) FROM t GROUP BY g) SELECT grp, total FROM c ORDER BY grp NULLS FIRST", Compare::Ordered),
    ("WITH c AS (SELECT id, k FROM t WHERE k > 950) SELECT count(*), sum(w.x) FROM w JOIN c ON c.k = w.x", Compare::Ordered),
    ("WITH c AS (SELECT g FROM t WHERE k > 990) SELECT label FROM kinds WHERE g IN (SELECT g FROM c) ORDER BY 1", Compare::Ordered),
    ("WITH c AS NOT MATERIALIZED (SELECT h, avg(k) AS a FROM t GROUP BY h) SELECT count(*) FROM t JOIN c ON c.h = t.h WHERE t.k > c.a", Compare::Ordered),
    ("WITH c AS (SELECT DISTINCT s FROM t WHERE s LIKE 'O''B%') SELECT count(*) FROM t WHERE s IN (SELECT s FROM c)", Compare::Ordered),
    ("WITH c AS (SELECT g, sum(n) AS sn, avg(m) AS am FROM t GROUP BY g) SELECT g, sn, am FROM c ORDER BY g NULLS LAST", Compare::Ordered),
    ("WITH c AS (SELECT h, avg(f) AS af FROM t GROUP BY h) SELECT count(*) FROM t JOIN c ON c.h = t.h WHERE t.f > c.af", Compare::Ordered),
    ("WITH c AS (SELECT max(ts) AS ts, min(tz) AS tz, max(d) AS d, bool_or(b) AS b, max(s) AS s FROM t WHERE g = 3) SELECT count(*) FROM t, c WHERE t.ts < c.ts AND t.tz > c.tz AND t.d < c.d AND t.b = c.b AND t.s < c.s", Compare::Ordered),
    ("WITH c AS (SELECT g, count(*) AS n FROM t GROUP BY g ORDER BY n DESC LIMIT 1) SELECT id FROM t WHERE g = (SELECT g FROM c) ORDER BY id LIMIT 5", Compare::Ordered),
];

/// Refused with 0A000 still: correlated on something else than the key (they cannot run
/// alone), row-valued IN, `= ANY`, a subquery outside WHERE, and CTEs that are not computed
/// first (recursive, volatile, locking, data-modifying, past the row limit, correlated).
pub const NOT_SUBSTITUTED: &[&str] = &[
    "SELECT id FROM t WHERE k > (SELECT avg(x) FROM w WHERE w.x = t.k)",
    "SELECT id FROM t WHERE (g, h) IN (SELECT g, h FROM t WHERE id < 5)",
    "SELECT id FROM t WHERE g = ANY (SELECT g FROM t WHERE id < 5)",
    "SELECT id, (SELECT max(k) FROM t) FROM t",
    // CTEs that are not computed first.
    "WITH RECURSIVE r AS (SELECT id FROM t UNION SELECT id + 1 FROM r WHERE id < 3) SELECT count(*) FROM r",
    "WITH c AS (SELECT g, random() AS r FROM t GROUP BY g) SELECT count(*) FROM c",
    "WITH c AS (SELECT g, count(*), nextval('no_such_seq') FROM t GROUP BY g) SELECT count(*) FROM c",
    "WITH c AS (SELECT id FROM t ORDER BY id LIMIT 3 FOR UPDATE) SELECT count(*) FROM c",
    "WITH d AS (DELETE FROM t WHERE id < 0 RETURNING id) SELECT count(*) FROM d",
    "WITH c AS (SELECT w.id FROM w, kinds ORDER BY 1 LIMIT 10001) SELECT count(*) FROM c",
    "SELECT id FROM t WHERE k > (WITH c AS (SELECT avg(x) AS a FROM w WHERE w.x = t.k) SELECT a FROM c)",
];
