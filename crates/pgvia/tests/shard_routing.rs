//! Differential test of the shard planner against PostgreSQL's own partition pruning (real
//! PostgreSQL, version from `PGVIA_TEST_PG`).
//!
//! Three partitioned tables stand for three sharded tables of a 4-shard database: `hp`
//! (`PARTITION BY HASH (id)`, modulus 4: partition `hp_r` is shard `r`), `rp` (by range,
//! one range per shard) and `rp2` (by range with gaps, shard 0 holding two ranges). For a
//! corpus of WHERE clauses, in literals (through the shape-shared analysis) and in
//! parameters (Bind values in text and in binary), the shards pgvia computes are compared
//! with the partitions left in `EXPLAIN (FORMAT JSON)` and with the partitions the matching
//! rows really come from (`tableoid`). Inserted rows are compared the same way through
//! `INSERT ... RETURNING tableoid`.

use std::collections::BTreeSet;
use std::path::Path;

use harness::{Cluster, ClusterOptions, HbaAuth};
use pgvia::config::{Config, ShardingRules};
use pgvia::sharding::{plan, Params, RouteError, SessionHints, Target};
use route::{Analyzer, AnalyzerOptions};
use shard::ShardSet;
use tokio_postgres::{Client, SimpleQueryMessage};

const CONFIG: &str = r#"
[[users]]
name = "u"
auth_method = "trust"

[[databases]]
name = "db"
[[databases.shards]]
host = "s0"
[[databases.shards]]
host = "s1"
[[databases.shards]]
host = "s2"
[[databases.shards]]
host = "s3"

[[databases.sharded_tables]]
name = "hp"
column = "id"
type = "bigint"

[[databases.sharded_tables]]
name = "rp"
column = "id"
type = "bigint"
function = "range"
ranges = [{ shard = 0, to = 1000 }, { shard = 1, from = 1000, to = 2000 }, { shard = 2, from = 2000, to = 3000 }, { shard = 3, from = 3000 }]

[[databases.sharded_tables]]
name = "ht"
column = "k"
type = "text"

[[databases.sharded_tables]]
name = "dr"
column = "day"
type = "date"
function = "range"
ranges = [{ shard = 0, to = "2024-01-01" }, { shard = 1, from = "2024-01-01", to = "2025-01-01" }, { shard = 2, from = "2025-01-01", to = "2026-01-01" }, { shard = 3, from = "2026-01-01" }]

[[databases.sharded_tables]]
name = "rp2"
column = "id"
type = "bigint"
function = "range"
ranges = [{ shard = 0, from = 0, to = 100 }, { shard = 1, from = 100, to = 200 }, { shard = 0, from = 200, to = 300 }, { shard = 2, from = 300, to = 400 }]
"#;

const SCHEMA: &str = "
CREATE TABLE hp (id bigint, v int) PARTITION BY HASH (id);
CREATE TABLE hp_0 PARTITION OF hp FOR VALUES WITH (MODULUS 4, REMAINDER 0);
CREATE TABLE hp_1 PARTITION OF hp FOR VALUES WITH (MODULUS 4, REMAINDER 1);
CREATE TABLE hp_2 PARTITION OF hp FOR VALUES WITH (MODULUS 4, REMAINDER 2);
CREATE TABLE hp_3 PARTITION OF hp FOR VALUES WITH (MODULUS 4, REMAINDER 3);
CREATE TABLE rp (id bigint, v int) PARTITION BY RANGE (id);
CREATE TABLE rp_0 PARTITION OF rp FOR VALUES FROM (MINVALUE) TO (1000);
CREATE TABLE rp_1 PARTITION OF rp FOR VALUES FROM (1000) TO (2000);
CREATE TABLE rp_2 PARTITION OF rp FOR VALUES FROM (2000) TO (3000);
CREATE TABLE rp_3 PARTITION OF rp FOR VALUES FROM (3000) TO (MAXVALUE);
CREATE TABLE rp2 (id bigint, v int) PARTITION BY RANGE (id);
CREATE TABLE rp2_s0a PARTITION OF rp2 FOR VALUES FROM (0) TO (100);
CREATE TABLE rp2_s1 PARTITION OF rp2 FOR VALUES FROM (100) TO (200);
CREATE TABLE rp2_s0b PARTITION OF rp2 FOR VALUES FROM (200) TO (300);
CREATE TABLE rp2_s2 PARTITION OF rp2 FOR VALUES FROM (300) TO (400);
CREATE TABLE ht (k text, v int) PARTITION BY HASH (k);
CREATE TABLE ht_0 PARTITION OF ht FOR VALUES WITH (MODULUS 4, REMAINDER 0);
CREATE TABLE ht_1 PARTITION OF ht FOR VALUES WITH (MODULUS 4, REMAINDER 1);
CREATE TABLE ht_2 PARTITION OF ht FOR VALUES WITH (MODULUS 4, REMAINDER 2);
CREATE TABLE ht_3 PARTITION OF ht FOR VALUES WITH (MODULUS 4, REMAINDER 3);
CREATE TABLE dr (day date, v int) PARTITION BY RANGE (day);
CREATE TABLE dr_0 PARTITION OF dr FOR VALUES FROM (MINVALUE) TO ('2024-01-01');
CREATE TABLE dr_1 PARTITION OF dr FOR VALUES FROM ('2024-01-01') TO ('2025-01-01');
CREATE TABLE dr_2 PARTITION OF dr FOR VALUES FROM ('2025-01-01') TO ('2026-01-01');
CREATE TABLE dr_3 PARTITION OF dr FOR VALUES FROM ('2026-01-01') TO (MAXVALUE);
INSERT INTO ht SELECT md5(i::text), i % 10 FROM generate_series(1, 2000) i;
INSERT INTO ht VALUES ('a', 1), ('b', 2), ('zeta', 3), ('mañana', 4), ('', 5), ('it''s', 6);
INSERT INTO dr SELECT date '2022-06-01' + i, i % 10 FROM generate_series(0, 1600) i;
INSERT INTO hp SELECT i * 7919 % 100003 - 50000, i % 10 FROM generate_series(1, 5000) i;
INSERT INTO hp SELECT i, i % 10 FROM generate_series(-10, 1000) i;
INSERT INTO rp SELECT i, i % 10 FROM generate_series(-100, 4000) i;
INSERT INTO rp2 SELECT i, i % 10 FROM generate_series(0, 399) i;
ANALYZE;
";

/// A partition's shard: the digit after the last `_` (`hp_2`, `rp2_s0b`).
fn shard_of_partition(name: &str) -> usize {
    let tail = name.rsplit('_').next().unwrap_or("");
    let digit = tail.trim_start_matches('s').chars().next().and_then(|c| c.to_digit(10));
    digit.unwrap_or_else(|| panic!("not a partition name: {name}")) as usize
}

fn relations(plan: &serde_json::Value, out: &mut BTreeSet<String>) {
    match plan {
        serde_json::Value::Object(map) => {
            if let Some(serde_json::Value::String(r)) = map.get("Relation Name") {
                out.insert(r.clone());
            }
            map.values().for_each(|v| relations(v, out));
        }
        serde_json::Value::Array(items) => items.iter().for_each(|v| relations(v, out)),
        _ => {}
    }
}

async fn simple_rows(client: &Client, sql: &str) -> Vec<Vec<String>> {
    let messages = client.simple_query(sql).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
    messages
        .into_iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(r) => {
                Some((0..r.len()).map(|i| r.get(i).unwrap_or("NULL").to_owned()).collect())
            }
            _ => None,
        })
        .collect()
}

/// A parameter value: a bigint, a bigint array, a text or a date.
#[derive(Clone, Debug)]
enum P {
    Int(i64),
    Ints(Vec<i64>),
    Text(&'static str),
    Date(&'static str),
}

impl P {
    fn sql_type(&self) -> &'static str {
        match self {
            P::Int(_) => "bigint",
            P::Ints(_) => "bigint[]",
            P::Text(_) => "text",
            P::Date(_) => "date",
        }
    }

    fn oid(&self) -> u32 {
        match self {
            P::Int(_) => 20,
            P::Ints(_) => 1016,
            P::Text(_) => 25,
            P::Date(_) => 1082,
        }
    }

    fn literal(&self) -> String {
        match self {
            P::Int(v) => v.to_string(),
            P::Ints(v) => format!("'{{{}}}'", v.iter().map(i64::to_string).collect::<Vec<_>>().join(",")),
            P::Text(t) | P::Date(t) => format!("'{}'", t.replace('\'', "''")),
        }
    }

    fn text(&self) -> Vec<u8> {
        match self {
            P::Int(v) => v.to_string().into_bytes(),
            P::Ints(v) => {
                format!("{{{}}}", v.iter().map(i64::to_string).collect::<Vec<_>>().join(",")).into_bytes()
            }
            P::Text(t) | P::Date(t) => t.as_bytes().to_vec(),
        }
    }

    /// PostgreSQL's binary send format.
    fn binary(&self) -> Vec<u8> {
        match self {
            P::Int(v) => v.to_be_bytes().to_vec(),
            P::Ints(v) => {
                let mut out = Vec::new();
                for h in [1i32, 0, 20, v.len() as i32, 1] {
                    out.extend_from_slice(&h.to_be_bytes());
                }
                for x in v {
                    out.extend_from_slice(&8i32.to_be_bytes());
                    out.extend_from_slice(&x.to_be_bytes());
                }
                out
            }
            P::Text(t) => t.as_bytes().to_vec(),
            P::Date(t) => match shard::KeyType::Date.parse_text(t.as_bytes()) {
                Ok(shard::Value::Date(days)) => days.to_be_bytes().to_vec(),
                other => panic!("{t}: {other:?}"),
            },
        }
    }
}

/// How pgvia's answer relates to PostgreSQL's plan.
#[derive(Debug, Default)]
struct Tally {
    equal: usize,
    /// pgvia reaches fewer shards than the plan keeps (PostgreSQL prunes less).
    pgvia_narrower: Vec<String>,
    /// pgvia refused: a key in no range (the documented error).
    refused: usize,
}

struct Case {
    table: &'static str,
    clause: String,
    params: Vec<P>,
}

fn combos(values: &[i64]) -> Vec<(i64, i64, i64)> {
    let n = values.len();
    (0..n).map(|i| (values[i], values[(i * 3 + 1) % n], values[(i * 5 + 2) % n])).collect()
}

fn corpus() -> Vec<Case> {
    let mut cases = Vec::new();
    let mut add =
        |table: &'static str, clause: String, params: Vec<P>| cases.push(Case { table, clause, params });
    let hash_values = [-3, 0, 1, 2, 7, 42, 99, 1000, 123_456, -48_213];
    for (a, b, c) in combos(&hash_values) {
        for clause in [
            format!("id = {a}"),
            format!("{a} = id"),
            format!("id IN ({a}, {b}, {c})"),
            format!("id = ANY(ARRAY[{a}, {b}])"),
            format!("id = {a} OR id = {b}"),
            format!("(id = {a} OR id IN ({b}, {c})) AND v > 0"),
            format!("id = {a} AND v = 3"),
            format!("id = {a} OR v = 3"),
            format!("id > {a}"),
            format!("id BETWEEN {a} AND {b}"),
            format!("id = {a} AND id = {b}"),
            format!("id = {a} AND id > {b}"),
            format!("NOT (id = {a})"),
            format!("id = {a} AND (v < 5 OR id = {b})"),
            format!("(id = {a} AND v = 1) OR (id = {b} AND v = 2) OR id = {c}"),
            format!("id = '{a}'"),
        ] {
            add("hp", clause, vec![]);
        }
        add("hp", "id = $1".into(), vec![P::Int(a)]);
        add("hp", "id IN ($1, $2)".into(), vec![P::Int(a), P::Int(b)]);
        add("hp", "id = ANY($1)".into(), vec![P::Ints(vec![a, b, c])]);
        add("hp", "id = $1 OR id = $2".into(), vec![P::Int(a), P::Int(c)]);
        add("hp", "id = $1 AND v > $2".into(), vec![P::Int(b), P::Int(0)]);
    }
    let range_values = [-5, 0, 999, 1000, 1500, 2000, 2999, 3000, 5000];
    for (a, b, c) in combos(&range_values) {
        let (lo, hi) = (a.min(b), a.max(b));
        for clause in [
            format!("id = {a}"),
            format!("id IN ({a}, {b}, {c})"),
            format!("id < {a}"),
            format!("id <= {a}"),
            format!("id > {a}"),
            format!("id >= {a}"),
            format!("{a} < id"),
            format!("id BETWEEN {lo} AND {hi}"),
            format!("id > {lo} AND id < {hi}"),
            format!("id < {lo} OR id > {hi}"),
            format!("(id >= {lo} AND id < {hi}) OR id = {c}"),
            format!("id > {a} AND v = 1"),
            format!("id >= {a} AND id = {c}"),
        ] {
            add("rp", clause, vec![]);
        }
        add("rp", "id = $1".into(), vec![P::Int(a)]);
        add("rp", "id BETWEEN $1 AND $2".into(), vec![P::Int(lo), P::Int(hi)]);
        add("rp", "id >= $1 AND id < $2".into(), vec![P::Int(lo), P::Int(hi)]);
        add("rp", "id = ANY($1) OR id > $2".into(), vec![P::Ints(vec![a, c]), P::Int(hi)]);
    }
    let words = ["a", "b", "zeta", "mañana", "", "it''s", "c4ca4238a0b923820dcc509a6f75849b"];
    for i in 0..words.len() {
        let (a, b, c) = (words[i], words[(i * 3 + 1) % words.len()], words[(i * 5 + 2) % words.len()]);
        for clause in [
            format!("k = '{a}'"),
            format!("k IN ('{a}', '{b}')"),
            format!("k = '{a}' OR k = '{b}' OR k = '{c}'"),
            format!("k = ANY(ARRAY['{a}', '{c}'])"),
            format!("k = '{a}' AND v < 5"),
            format!("k > '{a}'"),
            format!("k = '{a}' AND k = '{b}'"),
        ] {
            add("ht", clause, vec![]);
        }
        let text =
            |w: &str| P::Text(if w == "it''s" { "it's" } else { Box::leak(w.to_owned().into_boxed_str()) });
        add("ht", "k = $1".into(), vec![text(a)]);
        add("ht", "k = $1 OR k = $2".into(), vec![text(b), text(c)]);
    }
    let days = [
        "2022-06-01",
        "2023-12-31",
        "2024-01-01",
        "2024-07-15",
        "2025-01-01",
        "2025-12-31",
        "2026-01-01",
        "2026-08-01",
    ];
    for i in 0..days.len() {
        let (a, b, c) = (days[i], days[(i * 3 + 1) % days.len()], days[(i * 5 + 2) % days.len()]);
        let (lo, hi) = (a.min(b), a.max(b));
        for clause in [
            format!("day = '{a}'"),
            format!("day < '{a}'"),
            format!("day >= '{a}'"),
            format!("day BETWEEN '{lo}' AND '{hi}'"),
            format!("day > '{lo}' AND day <= '{hi}'"),
            format!("day < '{lo}' OR day = '{c}'"),
            format!("day IN ('{a}', '{b}', '{c}')"),
        ] {
            add("dr", clause, vec![]);
        }
        add("dr", "day = $1".into(), vec![P::Date(a)]);
        add("dr", "day >= $1 AND day < $2".into(), vec![P::Date(lo), P::Date(hi)]);
    }
    let gap_values = [0, 50, 99, 100, 150, 199, 200, 250, 300, 399];
    for (a, b, _) in combos(&gap_values) {
        let (lo, hi) = (a.min(b), a.max(b));
        for clause in [
            format!("id = {a}"),
            format!("id >= {lo} AND id < {hi}"),
            format!("id BETWEEN {lo} AND {hi}"),
            format!("id > {a}"),
            format!("id <= {a}"),
            format!("id > 120 AND id < 180 OR id = {a}"),
        ] {
            add("rp2", clause, vec![]);
        }
    }
    // Keys in no range: the documented error, where PostgreSQL finds no partition.
    add("rp2", "id = 400".into(), vec![]);
    add("rp2", "id = -1".into(), vec![]);
    add("rp2", "id = $1".into(), vec![P::Int(1234)]);
    cases
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn where_clauses_reach_the_shards_postgres_keeps() {
    let pg = Cluster::start(ClusterOptions::default().auth(HbaAuth::Trust)).expect("start PostgreSQL");
    let conninfo = format!("host={} port={} user=postgres dbname=postgres", pg.host(), pg.port());
    let (client, conn) = tokio_postgres::connect(&conninfo, tokio_postgres::NoTls).await.expect("connect");
    tokio::spawn(conn);
    client.batch_execute(SCHEMA).await.expect("schema");

    let config = Config::parse(CONFIG, Path::new("pgvia.toml")).unwrap_or_else(|e| panic!("{e}"));
    let rules: ShardingRules = config.databases[0].sharding_rules(0).expect("valid").expect("sharded");
    let analyzer = Analyzer::new(AnalyzerOptions::default()).expect("analyzer");
    let session = SessionHints::default();

    let cases = corpus();
    let mut tally = Tally::default();
    let mut with_params = 0;
    for (n, case) in cases.iter().enumerate() {
        let sql = format!("SELECT * FROM {} WHERE {}", case.table, case.clause);
        // PostgreSQL: a custom plan (the first executions of a prepared statement), so the
        // parameters' values prune at plan time as literals do.
        let explain = if case.params.is_empty() {
            format!("EXPLAIN (FORMAT JSON) {sql}")
        } else {
            let types: Vec<&str> = case.params.iter().map(P::sql_type).collect();
            let args: Vec<String> = case.params.iter().map(P::literal).collect();
            format!(
                "PREPARE q{n}({}) AS {sql}; EXPLAIN (FORMAT JSON) EXECUTE q{n}({}); DEALLOCATE q{n}",
                types.join(", "),
                args.join(", ")
            )
        };
        let plan_json = &simple_rows(&client, &explain).await[0][0];
        let mut rels = BTreeSet::new();
        relations(&serde_json::from_str(plan_json).expect("EXPLAIN JSON"), &mut rels);
        let planned: ShardSet = rels.iter().map(|r| shard_of_partition(r)).collect();
        // The partitions the matching rows really come from.
        let rows_sql = if case.params.is_empty() {
            format!("SELECT DISTINCT tableoid::regclass::text FROM {} WHERE {}", case.table, case.clause)
        } else {
            let types: Vec<&str> = case.params.iter().map(P::sql_type).collect();
            let args: Vec<String> = case.params.iter().map(P::literal).collect();
            format!(
                "PREPARE r{n}({}) AS SELECT DISTINCT tableoid::regclass::text FROM {} WHERE {}; EXECUTE r{n}({}); DEALLOCATE r{n}",
                types.join(", "),
                case.table,
                case.clause,
                args.join(", ")
            )
        };
        let actual: ShardSet =
            simple_rows(&client, &rows_sql).await.iter().map(|r| shard_of_partition(&r[0])).collect();

        // pgvia: literals through the shape-shared analysis, parameters as Bind values
        // (binary for even cases, text for odd ones).
        let routed = if case.params.is_empty() {
            let mut scratch = String::new();
            let analysis = analyzer.analyze_query(&sql, &mut scratch);
            let ranges = route::constants(&sql);
            plan(&rules, &analysis, &Params::Constants { sql: &sql, ranges: &ranges }, &session)
        } else {
            with_params += 1;
            let oids: Vec<u32> = case.params.iter().map(P::oid).collect();
            let analysis = analyzer.analyze(&sql, &oids);
            let binary = n % 2 == 0;
            let bytes: Vec<Vec<u8>> =
                case.params.iter().map(|p| if binary { p.binary() } else { p.text() }).collect();
            let values: Vec<Option<&[u8]>> = bytes.iter().map(|b| Some(b.as_slice())).collect();
            let formats: &[i16] = if binary { &[1] } else { &[] };
            plan(&rules, &analysis, &Params::Bind { formats, values: &values }, &session)
        };
        let shards = match routed {
            Ok(routes) => match routes[0].target {
                Target::Shards(s) => s,
                Target::NoRows => ShardSet::EMPTY,
                Target::AnyOf(s) => panic!("{sql}: a sharded table read from any shard ({s})"),
            },
            Err(RouteError::NoShard { .. }) => {
                // Only where PostgreSQL keeps fewer partitions than the values name.
                assert!(actual.is_empty() || case.clause.contains(','), "{sql}: refused, rows in {actual}");
                tally.refused += 1;
                continue;
            }
            Err(e) => panic!("{sql}: {e}"),
        };
        assert_eq!(
            shards.intersection(actual),
            actual,
            "{sql}: pgvia routes to {shards}, rows are in {actual} (PostgreSQL plans {planned})"
        );
        if shards == planned {
            tally.equal += 1;
        } else if shards.intersection(planned) == shards {
            tally.pgvia_narrower.push(format!("{sql}: pgvia {shards}, PostgreSQL {planned}"));
        } else {
            panic!("{sql}: pgvia routes to {shards}, PostgreSQL plans {planned} (rows in {actual})");
        }
    }
    eprintln!(
        "{} WHERE clauses ({with_params} with parameters): {} equal to PostgreSQL's plan, {} narrower, {} refused",
        cases.len(),
        tally.equal,
        tally.pgvia_narrower.len(),
        tally.refused
    );
    for line in &tally.pgvia_narrower {
        eprintln!("  narrower: {line}");
    }
    assert!(cases.len() >= 300);
    // The literal cases were read through shared shape analyses, their constants as `$n`.
    assert!(analyzer.stats().shape_hits > 100, "{:?}", analyzer.stats());
    assert_eq!(tally.refused, 3, "only the keys in no range are refused");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inserted_rows_land_where_postgres_puts_them() {
    let pg = Cluster::start(ClusterOptions::default().auth(HbaAuth::Trust)).expect("start PostgreSQL");
    let conninfo = format!("host={} port={} user=postgres dbname=postgres", pg.host(), pg.port());
    let (client, conn) = tokio_postgres::connect(&conninfo, tokio_postgres::NoTls).await.expect("connect");
    tokio::spawn(conn);
    client.batch_execute(SCHEMA).await.expect("schema");
    let config = Config::parse(CONFIG, Path::new("pgvia.toml")).unwrap_or_else(|e| panic!("{e}"));
    let rules = config.databases[0].sharding_rules(0).expect("valid").expect("sharded");
    let analyzer = Analyzer::new(AnalyzerOptions::default()).expect("analyzer");
    let session = SessionHints::default();

    let mut rows_checked = 0;
    for (table, keys) in [
        ("hp", (0..150).map(|i| i * 7_654_321 - 500_000_000).collect::<Vec<i64>>()),
        ("rp", (0..120).map(|i| i * 40 - 200).collect()),
    ] {
        for chunk in keys.chunks(30) {
            // Literals, with an upsert and RETURNING.
            let values: Vec<String> = chunk.iter().map(|k| format!("({k}, 1)")).collect();
            let sql = format!(
                "INSERT INTO {table} (id, v) VALUES {} ON CONFLICT DO NOTHING RETURNING tableoid::regclass::text",
                values.join(", ")
            );
            let got = simple_rows(&client, &sql).await;
            let mut scratch = String::new();
            let analysis = analyzer.analyze_query(&sql, &mut scratch);
            let ranges = route::constants(&sql);
            let routes = plan(&rules, &analysis, &Params::Constants { sql: &sql, ranges: &ranges }, &session)
                .unwrap_or_else(|e| panic!("{sql}: {e}"));
            assert!(routes[0].upsert && routes[0].returning);
            let want: Vec<usize> = got.iter().map(|r| shard_of_partition(&r[0])).collect();
            assert_eq!(routes[0].rows, want, "{sql}");
            rows_checked += want.len();

            // Parameters, in binary.
            let placeholders: Vec<String> = (0..chunk.len()).map(|i| format!("(${}, 2)", i + 1)).collect();
            let sql = format!(
                "INSERT INTO {table} (id, v) VALUES {} RETURNING tableoid::regclass::text",
                placeholders.join(", ")
            );
            let params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> =
                chunk.iter().map(|k| k as &(dyn tokio_postgres::types::ToSql + Sync)).collect();
            let got = client.query(&sql, &params).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
            let bytes: Vec<[u8; 8]> = chunk.iter().map(|k| k.to_be_bytes()).collect();
            let values: Vec<Option<&[u8]>> = bytes.iter().map(|b| Some(&b[..])).collect();
            let analysis = analyzer.analyze(&sql, &vec![20; chunk.len()]);
            let routes = plan(&rules, &analysis, &Params::Bind { formats: &[1], values: &values }, &session)
                .unwrap_or_else(|e| panic!("{sql}: {e}"));
            let want: Vec<usize> = got.iter().map(|r| shard_of_partition(r.get::<_, &str>(0))).collect();
            assert_eq!(routes[0].rows, want, "{sql}");
            rows_checked += want.len();
        }
    }
    eprintln!("{rows_checked} inserted rows: each on the shard PostgreSQL put it in");
    assert_eq!(rows_checked, 2 * (150 + 120));
}
