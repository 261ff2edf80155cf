//! The shard planner without servers: each predicate form, parameters in text and binary,
//! INSERT rows, hints, schema-based sharding, the policy for other tables, and the errors.

use std::path::Path;

use pgvia::config::{Config, ShardingRules};
use pgvia::sharding::cli::{route_text, RouteRequest};
use pgvia::sharding::{plan, shard_setting, Params, RouteError, SessionHints, StatementRoute, Target};
use route::{Analyzer, AnalyzerOptions};
use shard::{KeyType, ShardFunction, ShardSet};

const CONFIG: &str = r#"
[[users]]
name = "u"
auth_method = "trust"

[[databases]]
name = "shop"
unsharded_tables = "omnisharded"
[[databases.shards]]
host = "a"
[[databases.shards]]
host = "b"
[[databases.shards]]
host = "c"
[[databases.shards]]
host = "d"

[[databases.sharded_tables]]
name = "orders"
column = "customer_id"
type = "bigint"

[[databases.sharded_tables]]
name = "accounts"
column = "id"
type = "uuid"

[[databases.sharded_tables]]
name = "users"
column = "region"
type = "text"
function = "list"
values = [{ shard = 0, values = ["eu"] }, { shard = 1, values = ["us", "ca"] }]

[[databases.sharded_tables]]
name = "events"
column = "day"
type = "date"
function = "range"
ranges = [{ shard = 0, to = "2025-01-01" }, { shard = 1, from = "2025-01-01", to = "2026-01-01" }, { shard = 2, from = "2026-01-01", to = "2027-01-01" }]

[[databases.sharded_schemas]]
name = "tenant_a"
shard = 3

[[databases]]
name = "strict"
[[databases.shards]]
host = "e"
[[databases.shards]]
host = "f"
[[databases.sharded_tables]]
name = "orders"
column = "customer_id"
type = "bigint"
"#;

struct Fixture {
    shop: ShardingRules,
    strict: ShardingRules,
    analyzer: Analyzer,
}

fn fixture() -> Fixture {
    let config = Config::parse(CONFIG, Path::new("pgvia.toml")).unwrap_or_else(|e| panic!("{e}"));
    let rules = |i: usize| config.databases[i].sharding_rules(i).expect("valid").expect("sharded");
    Fixture {
        shop: rules(0),
        strict: rules(1),
        analyzer: Analyzer::new(AnalyzerOptions::default()).expect("ok"),
    }
}

fn hash(key: i64) -> usize {
    ShardFunction::Hash { shards: 4 }.shard_of(&shard::Value::Int(key)).expect("hash")
}

impl Fixture {
    /// A simple query, through the shape-shared analysis.
    fn query(&self, sql: &str) -> Result<StatementRoute, RouteError> {
        self.query_with(sql, &explain())
    }

    fn query_with(&self, sql: &str, session: &SessionHints<'_>) -> Result<StatementRoute, RouteError> {
        let mut scratch = String::new();
        let analysis = self.analyzer.analyze_query(sql, &mut scratch);
        let ranges = route::constants(sql);
        plan(&self.shop, &analysis, &Params::Constants { sql, ranges: &ranges }, session)
            .map(|mut r| r.remove(0))
    }

    /// An extended-protocol statement with its Bind values.
    fn bind(&self, sql: &str, oids: &[u32], formats: &[i16], values: &[Option<&[u8]>]) -> StatementRoute {
        let analysis = self.analyzer.analyze(sql, oids);
        let params = Params::Bind { formats, values };
        plan(&self.shop, &analysis, &params, &explain()).unwrap_or_else(|e| panic!("{sql}: {e}")).remove(0)
    }

    fn shards(&self, sql: &str) -> ShardSet {
        match self.query(sql).unwrap_or_else(|e| panic!("{sql}: {e}")).target {
            Target::Shards(s) => s,
            other => panic!("{sql}: {other:?}"),
        }
    }
}

fn explain() -> SessionHints<'static> {
    SessionHints { explain: true, ..SessionHints::default() }
}

fn set(shards: &[usize]) -> ShardSet {
    shards.iter().copied().collect()
}

#[test]
fn each_predicate_form_on_a_hash_key() {
    let f = fixture();
    let (a, b, c) = (hash(1), hash(2), hash(3));
    assert_eq!(f.shards("SELECT * FROM orders WHERE customer_id = 1"), set(&[a]));
    assert_eq!(f.shards("SELECT * FROM orders WHERE 2 = customer_id"), set(&[b]));
    assert_eq!(f.shards("SELECT * FROM orders WHERE customer_id IN (1, 2, 3)"), set(&[a, b, c]));
    assert_eq!(f.shards("SELECT * FROM orders WHERE customer_id = ANY(ARRAY[1, 3])"), set(&[a, c]));
    assert_eq!(f.shards("SELECT * FROM orders WHERE customer_id = 1 OR customer_id = 2"), set(&[a, b]));
    assert_eq!(f.shards("SELECT * FROM orders WHERE customer_id = 1 AND status = 'new'"), set(&[a]));
    assert_eq!(f.shards("SELECT * FROM orders o WHERE o.customer_id = '2'"), set(&[b]));
    assert_eq!(f.shards("SELECT * FROM orders WHERE customer_id = -7"), set(&[hash(-7)]));
    // Ranges narrow nothing on a hash key, nor does OR with something unknown.
    for sql in [
        "SELECT * FROM orders WHERE customer_id > 5",
        "SELECT * FROM orders WHERE customer_id BETWEEN 1 AND 2",
        "SELECT * FROM orders WHERE customer_id = 1 OR status = 'new'",
        "SELECT * FROM orders WHERE NOT customer_id = 1",
        "SELECT * FROM orders",
    ] {
        let r = f.query(sql).expect("routes");
        assert_eq!(r.target, Target::Shards(ShardSet::all(4)), "{sql}");
        assert!(r.missing_key, "{sql}: {r:?}");
    }
    let r = f.query("SELECT * FROM orders WHERE customer_id = 1 AND customer_id = 2").expect("routes");
    if a != b {
        assert_eq!(r.target, Target::NoRows);
    }
}

#[test]
fn parameters_in_text_and_binary() {
    let f = fixture();
    let sql = "SELECT * FROM orders WHERE customer_id = $1";
    let eight = 8i64.to_be_bytes();
    assert_eq!(f.bind(sql, &[20], &[1], &[Some(&eight)]).target, Target::Shards(set(&[hash(8)])));
    assert_eq!(f.bind(sql, &[], &[0], &[Some(b"8")]).target, Target::Shards(set(&[hash(8)])));
    // An int4 parameter compared with a bigint key hashes alike.
    let four = 8i32.to_be_bytes();
    assert_eq!(f.bind(sql, &[23], &[1], &[Some(&four)]).target, Target::Shards(set(&[hash(8)])));
    // NULL matches nothing.
    assert_eq!(f.bind(sql, &[20], &[], &[None]).target, Target::NoRows);
    let r = f.bind("SELECT * FROM orders WHERE customer_id = ANY($1)", &[1016], &[0], &[Some(b"{1,2}")]);
    assert_eq!(r.target, Target::Shards(set(&[hash(1), hash(2)])));
    let r = f.bind(
        "SELECT * FROM orders WHERE customer_id IN ($1, $2)",
        &[20, 20],
        &[],
        &[Some(b"1"), Some(b"3")],
    );
    assert_eq!(r.target, Target::Shards(set(&[hash(1), hash(3)])));
    // A value that is not a bigint: routed everywhere, with the reason.
    let r = f.bind(sql, &[], &[], &[Some(b"x")]);
    let quiet = plan(
        &f.shop,
        &f.analyzer.analyze(sql, &[]),
        &Params::Bind { formats: &[], values: &[Some(b"x")] },
        &SessionHints::default(),
    )
    .expect("routes");
    assert!(quiet[0].reasons.is_empty(), "reasons are collected only when asked for");
    assert_eq!(r.target, Target::Shards(ShardSet::all(4)));
    assert!(r.reasons.iter().any(|m| m.contains("invalid input syntax")), "{r:?}");
    let uuid = "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11";
    let bytes = match KeyType::Uuid.parse_text(uuid.as_bytes()) {
        Ok(shard::Value::Uuid(b)) => b,
        other => panic!("{other:?}"),
    };
    let by_text = f.bind("SELECT * FROM accounts WHERE id = $1", &[2950], &[], &[Some(uuid.as_bytes())]);
    let by_binary = f.bind("SELECT * FROM accounts WHERE id = $1", &[2950], &[1], &[Some(&bytes)]);
    assert_eq!(by_text.target, by_binary.target);
    assert_eq!(
        f.query(&format!("SELECT * FROM accounts WHERE id = '{uuid}'")).expect("routes").target,
        by_text.target
    );
}

#[test]
fn list_and_range_keys() {
    let f = fixture();
    assert_eq!(f.shards("SELECT * FROM users WHERE region IN ('us', 'ca')"), set(&[1]));
    assert_eq!(f.shards("SELECT * FROM users WHERE region = 'eu' OR region = 'ca'"), set(&[0, 1]));
    let e = f.query("SELECT * FROM users WHERE region = 'apac'").expect_err("unlisted");
    assert_eq!(
        (e.sqlstate(), e.to_string()),
        ("23514", "users.region: no shard is listed for value 'apac'".into())
    );
    assert_eq!(f.shards("SELECT * FROM events WHERE day >= '2025-06-01'"), set(&[1, 2]));
    assert_eq!(
        f.shards("SELECT * FROM events WHERE day BETWEEN '2024-12-01' AND '2025-02-01'"),
        set(&[0, 1])
    );
    assert_eq!(
        f.shards("SELECT * FROM events WHERE day < '2025-01-01' OR day >= '2026-02-01'"),
        set(&[0, 2])
    );
    assert_eq!(f.shards("SELECT * FROM events WHERE day > '2025-03-01' AND day < '2025-04-01'"), set(&[1]));
    let e = f.query("SELECT * FROM events WHERE day = '2030-01-01'").expect_err("no range");
    assert_eq!(e.sqlstate(), "23514");
    assert!(e.to_string().contains("falls in no configured range"), "{e}");
}

#[test]
fn inserts_updates_and_deletes() {
    let f = fixture();
    let r = f.query("INSERT INTO orders (customer_id, total) VALUES (1, 5), (2, 6), (3, 7)").expect("routes");
    assert_eq!(r.rows, [hash(1), hash(2), hash(3)]);
    assert_eq!(r.target, Target::Shards(set(&[hash(1), hash(2), hash(3)])));
    let r = f
        .query("INSERT INTO orders (total, customer_id) VALUES (5, 9) ON CONFLICT (customer_id) DO UPDATE SET total = 1 RETURNING *")
        .expect("routes");
    assert_eq!((r.rows.as_slice(), r.upsert, r.returning), (&[hash(9)][..], true, true));
    let r = f.bind(
        "INSERT INTO orders (customer_id) VALUES ($1), ($2)",
        &[20, 20],
        &[],
        &[Some(b"4"), Some(b"5")],
    );
    assert_eq!(r.rows, [hash(4), hash(5)]);
    for (sql, why) in [
        ("INSERT INTO orders (total) VALUES (1)", "must name the key column"),
        ("INSERT INTO orders (customer_id) VALUES (random())", "not a constant"),
        ("INSERT INTO orders SELECT * FROM staging", "only INSERT ... VALUES"),
        ("INSERT INTO users (region) VALUES ('mars')", "no shard is listed"),
    ] {
        let e = f.query(sql).expect_err(sql);
        assert!(e.to_string().contains(why), "{sql}: {e}");
    }
    let r = f.query("UPDATE orders SET customer_id = 7 WHERE customer_id = 6 RETURNING *").expect("routes");
    assert!(r.key_update && r.returning);
    assert_eq!(r.target, Target::Shards(set(&[hash(6)])));
    let r = f.query("UPDATE orders SET total = 7 WHERE customer_id = 6").expect("routes");
    assert!(!r.key_update);
    let r = f.query("DELETE FROM orders WHERE customer_id IN (1, 2) RETURNING total").expect("routes");
    assert_eq!((r.target, r.returning), (Target::Shards(set(&[hash(1), hash(2)])), true));
}

#[test]
fn hints_and_session_settings() {
    let f = fixture();
    assert_eq!(f.shards("/* pgvia_shard: 2 */ SELECT * FROM orders"), set(&[2]));
    assert_eq!(f.shards("SELECT * FROM orders /* pgvia: shard=1 */"), set(&[1]));
    assert_eq!(f.shards("/* pgvia_sharding_key: 42 */ SELECT * FROM orders"), set(&[hash(42)]));
    assert_eq!(f.shards("/* pgvia_sharding_key: ca */ SELECT * FROM users"), set(&[1]));
    let e = f.query("/* pgvia_shard: 9 */ SELECT 1").expect_err("no shard 9");
    assert_eq!(e.sqlstate(), "22023");
    let session = SessionHints { shard: Some(3), ..explain() };
    let r = f.query_with("SELECT * FROM orders", &session).expect("routes");
    assert_eq!(r.target, Target::Shards(set(&[3])));
    let session = SessionHints { sharding_key: Some("42"), ..explain() };
    let r = f.query_with("SELECT * FROM orders", &session).expect("routes");
    assert_eq!(r.target, Target::Shards(set(&[hash(42)])));
    assert_eq!(shard_setting(&f.shop, " 2 "), Ok(2));
    assert_eq!(shard_setting(&f.shop, "4"), Err(RouteError::NoSuchShard { shard: 4, count: 4 }));
    assert_eq!(shard_setting(&f.shop, "two").map_err(|e| e.sqlstate()), Err("22023"));
    // A comment wins over the session.
    let r = f.query_with("/* pgvia_shard: 0 */ SELECT * FROM orders", &session).expect("routes");
    assert_eq!(r.target, Target::Shards(set(&[0])));
}

#[test]
fn schemas_and_unlisted_tables() {
    let f = fixture();
    assert_eq!(f.shards("SELECT * FROM tenant_a.invoices"), set(&[3]));
    let path = vec!["$user".to_owned(), "tenant_a".to_owned(), "public".to_owned()];
    let session = SessionHints { search_path: &path, ..explain() };
    let r = f.query_with("UPDATE invoices SET paid = true", &session).expect("routes");
    assert_eq!(r.target, Target::Shards(set(&[3])));
    // Omnisharded: reads from any shard, writes to all.
    assert_eq!(f.query("SELECT * FROM products").expect("routes").target, Target::AnyOf(ShardSet::all(4)));
    assert_eq!(
        f.query("UPDATE products SET price = 1").expect("routes").target,
        Target::Shards(ShardSet::all(4))
    );
    assert_eq!(f.query("SELECT * FROM pg_class").expect("routes").target, Target::AnyOf(ShardSet::all(4)));
    // Joined with a sharded table: that table decides.
    assert_eq!(
        f.shards("SELECT * FROM orders o JOIN products p ON p.id = o.pid WHERE o.customer_id = 3"),
        set(&[hash(3)])
    );
    assert_eq!(
        f.query("CREATE INDEX ON orders (total)").expect("routes").target,
        Target::Shards(ShardSet::all(4))
    );
    // Refused by the strict database, naming the table.
    let analysis = f.analyzer.analyze("SELECT * FROM products", &[]);
    let e = plan(&f.strict, &analysis, &Params::None, &SessionHints::default()).expect_err("refused");
    assert_eq!(e.sqlstate(), "0A000");
    assert!(e.to_string().starts_with("table products is not sharded"), "{e}");
}

#[test]
fn the_route_command() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("pgvia.toml");
    std::fs::write(&path, CONFIG).expect("write");
    let request = |sql: &str, params: Option<Vec<Option<String>>>| RouteRequest {
        database: Some("shop".into()),
        params,
        param_types: vec![],
        search_path: "public".into(),
        sql: sql.into(),
    };
    let out = route_text(&path, &request("INSERT INTO orders (customer_id) VALUES (1), (2)", None))
        .expect("routes");
    assert!(out.starts_with("statement 1: shards {"), "{out}");
    assert!(out.contains(&format!("rows: 1→{} 2→{}", hash(1), hash(2))), "{out}");
    let out = route_text(
        &path,
        &request("SELECT * FROM orders WHERE customer_id = $1", Some(vec![Some("5".into())])),
    )
    .expect("routes");
    assert_eq!(
        out,
        format!(
            "statement 1: shards {{{}}}\n  - orders: condition on key customer_id → shards {{{}}}\n",
            hash(5),
            hash(5)
        )
    );
    // A join the placement does not prove is routed, and shown refused as the session refuses it.
    for sql in [
        "SELECT * FROM orders o JOIN accounts a ON a.id = o.account WHERE o.customer_id = 5",
        "DELETE FROM orders WHERE customer_id IN (SELECT customer_id FROM accounts)",
    ] {
        let out = route_text(&path, &request(sql, None)).expect("routes");
        assert!(out.contains("\nrefused: ERROR 0A000: "), "{out}");
    }
    let out = route_text(&path, &request("SELECT * FROM orders a JOIN orders b USING (customer_id)", None))
        .expect("routes");
    assert!(!out.contains("refused"), "{out}");
    let e = route_text(&path, &request("SELECT * FROM users WHERE region = 'x'", None)).expect_err("error");
    assert!(e.starts_with("ERROR 23514: "), "{e}");
    let e = route_text(&path, &RouteRequest { database: None, ..request("SELECT 1", None) })
        .expect_err("two dbs");
    assert!(e.contains("--database"), "{e}");
}

proptest::proptest! {
    /// Whatever a client sends (text and Bind values), planning answers or refuses; it never
    /// panics.
    #[test]
    fn planning_never_panics(
        sql in "(SELECT \\* FROM (orders|users|events|accounts|x) WHERE |INSERT INTO orders \\(customer_id\\) VALUES |UPDATE orders SET customer_id = 1 WHERE )[-a-z0-9_$'(),=<> .:{}]{0,60}",
        values in proptest::collection::vec(proptest::option::of(proptest::collection::vec(proptest::num::u8::ANY, 0..20)), 0..4),
        binary in proptest::bool::ANY,
    ) {
        let f = fixture();
        let oids = [20u32, 2950, 1016, 1082];
        let analysis = f.analyzer.analyze(&sql, &oids[..values.len()]);
        let values: Vec<Option<&[u8]>> = values.iter().map(|v| v.as_deref()).collect();
        let formats: &[i16] = if binary { &[1] } else { &[] };
        let _ = plan(&f.shop, &analysis, &Params::Bind { formats, values: &values }, &explain());
        let ranges = route::constants(&sql);
        let mut scratch = String::new();
        let analysis = f.analyzer.analyze_query(&sql, &mut scratch);
        let _ = plan(&f.shop, &analysis, &Params::Constants { sql: &sql, ranges: &ranges }, &explain());
    }
}
