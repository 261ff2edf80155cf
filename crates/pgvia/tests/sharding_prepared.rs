//! Prepared statements on a sharded database are kept on the shard servers: parsed once per
//! server, then bound by pgvia's name, as plain pools do. Each shard has one server here
//! (`pool_size = 1`), so what that server holds is seen in its `pg_prepared_statements`.
//! Schema changes, `DISCARD ALL` and fresh Parses answer as one PostgreSQL (the reference
//! cluster, with every row) answers them.

mod common;

use std::collections::{BTreeSet, HashMap};

use common::{TestProxy, DB, PASSWORD, USER};
use tokio_postgres::types::Type;
use tokio_postgres::{Client, SimpleQueryMessage};

const SCHEMA: &str =
    "CREATE TABLE items (id bigint PRIMARY KEY, name text NOT NULL, qty int NOT NULL DEFAULT 0);
ALTER TABLE items OWNER TO app;";
const SELECT: &str = "SELECT id, name, qty FROM items WHERE id = $1";
const KEYS: i64 = 100;

async fn start() -> (common::shards::ShardClusters, TestProxy, Client, Client) {
    let c = common::shards::start(SCHEMA);
    let toml =
        common::shards::config_with(&c, &["items"], |b| b.pool("pool_size = 1\ncheckout_timeout = \"5s\""));
    let proxy = TestProxy::start_toml(&toml).await;
    let via = proxy.connect(USER, PASSWORD, DB).await;
    let direct = common::connect(&common::direct_conninfo(&c.reference, USER, PASSWORD, DB))
        .await
        .expect("direct connection");
    let rows: Vec<String> = (1..=KEYS).map(|k| format!("({k}, 'n{k}', {})", k % 7)).collect();
    let insert = format!("INSERT INTO items (id, name, qty) VALUES {}", rows.join(", "));
    via.batch_execute(&insert).await.expect("insert through pgvia");
    direct.batch_execute(&insert).await.expect("insert into the reference");
    (c, proxy, via, direct)
}

/// The keys each shard holds, read from the shards themselves.
async fn keys_by_shard(c: &common::shards::ShardClusters) -> Vec<BTreeSet<i64>> {
    let mut out = Vec::new();
    for s in &c.shards {
        let client = common::connect(&common::direct_conninfo(s, USER, PASSWORD, DB)).await.expect("shard");
        let rows = client.query("SELECT id FROM items", &[]).await.expect("shard keys");
        out.push(rows.iter().map(|r| r.get::<_, i64>(0)).collect());
    }
    out
}

/// The statements shard `n`'s server holds for `text`, through pgvia (the shard's only
/// server): how many there are, and how many times each was executed there (generic plus
/// custom plans, counted per statement object since its Parse).
async fn held(via: &Client, n: usize, text: &str) -> Vec<i64> {
    let sql = format!(
        "/* pgvia_shard: {n} */ SELECT generic_plans + custom_plans FROM pg_prepared_statements \
         WHERE statement = '{}' ORDER BY 1",
        text.replace('\'', "''")
    );
    let mut counts = Vec::new();
    for m in via.simple_query(&sql).await.expect("pg_prepared_statements") {
        if let SimpleQueryMessage::Row(r) = m {
            counts.push(r.get(0).and_then(|v| v.parse().ok()).expect("count"));
        }
    }
    counts
}

fn rows_text(rows: &[tokio_postgres::Row]) -> Vec<Vec<String>> {
    rows.iter()
        .map(|r| {
            (0..r.len())
                .map(|i| match *r.columns()[i].type_() {
                    Type::INT8 => r.get::<_, i64>(i).to_string(),
                    Type::INT4 => r.get::<_, i32>(i).to_string(),
                    _ => r.get::<_, Option<String>>(i).unwrap_or_default(),
                })
                .collect()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statement_run_1000_times_is_parsed_once_per_shard_server() {
    let (c, proxy, via, direct) = start().await;
    let placement = keys_by_shard(&c).await;
    assert_eq!(placement.iter().map(BTreeSet::len).sum::<usize>(), KEYS as usize);

    // A named statement (tokio-postgres prepares `s0`), run 1,000 times over every key.
    let stmt = via.prepare(SELECT).await.expect("prepare");
    let reference = direct.prepare(SELECT).await.expect("prepare on the reference");
    let mut runs: HashMap<usize, i64> = HashMap::new();
    for i in 0..1000i64 {
        let key = i % KEYS + 1;
        let got = via.query(&stmt, &[&key]).await.expect("execute");
        if i < KEYS {
            let want = direct.query(&reference, &[&key]).await.expect("execute on the reference");
            assert_eq!(rows_text(&got), rows_text(&want), "key {key}");
        }
        let shard = placement.iter().position(|s| s.contains(&key)).expect("placed");
        *runs.entry(shard).or_default() += 1;
    }
    for (n, _) in placement.iter().enumerate() {
        let counts = held(&via, n, SELECT).await;
        let want = runs.get(&n).copied().unwrap_or(0);
        // One statement object per server, executed there every time its keys came: parsed
        // once (its Describe, from `prepare`, on whichever shard it went to, counts no run).
        assert_eq!(counts.iter().filter(|&&c| c > 0).copied().collect::<Vec<_>>(), vec![want], "shard {n}");
        assert_eq!(counts.len(), 1, "shard {n}: {counts:?}");
    }

    // The unnamed statement (`query_typed`: Parse, Bind, Execute each time) and new names
    // for the same text (`query` with a string prepares a fresh statement per call) reuse
    // the server copies: one per text and parameter types (`query_typed` names `int8`,
    // `query` leaves the type to the server, so two statements).
    let other = "SELECT name FROM items WHERE id = $1";
    for i in 0..200i64 {
        let key = i % KEYS + 1;
        let rows = via.query_typed(other, &[(&key, Type::INT8)]).await.expect("unnamed");
        assert_eq!(rows[0].get::<_, String>(0), format!("n{key}"));
        let rows = via.query(other, &[&key]).await.expect("named afresh");
        assert_eq!(rows[0].get::<_, String>(0), format!("n{key}"));
    }
    let mut total = 0;
    for n in 0..placement.len() {
        let counts = held(&via, n, other).await;
        assert!(counts.len() <= 2, "shard {n}: {counts:?}");
        total += counts.iter().sum::<i64>();
    }
    assert_eq!(total, 400);

    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schema_changes_and_discard_answer_as_postgres_does() {
    let (_c, proxy, via, direct) = start().await;
    let star = "SELECT * FROM items WHERE id = $1";
    let old_via = via.prepare(star).await.expect("prepare");
    let old_direct = direct.prepare(star).await.expect("prepare on the reference");
    for key in [1i64, 2, 3, 4, 5, 6, 7, 8] {
        let got = via.query(&old_via, &[&key]).await.expect("execute");
        let want = direct.query(&old_direct, &[&key]).await.expect("execute on the reference");
        assert_eq!(rows_text(&got), rows_text(&want));
    }

    // The statement prepared before a change of the table's shape: PostgreSQL refuses its
    // new result shape. Inside a transaction, so each shard's server (which pgvia holds for
    // the whole transaction) is the one that ran it before the change.
    let alter = "ALTER TABLE items ADD COLUMN extra int NOT NULL DEFAULT 7";
    for client in [&via, &direct] {
        client.batch_execute("BEGIN").await.expect("begin");
    }
    for key in 1..=KEYS {
        let got = via.query(&old_via, &[&key]).await.expect("execute in the transaction");
        let want = direct.query(&old_direct, &[&key]).await.expect("execute on the reference");
        assert_eq!(rows_text(&got), rows_text(&want));
    }
    via.batch_execute(alter).await.expect("alter through pgvia");
    direct.batch_execute(alter).await.expect("alter on the reference");
    let state = |r: Result<Vec<tokio_postgres::Row>, tokio_postgres::Error>| {
        r.map(|rows| rows_text(&rows)).map_err(|e| common::sqlstate(&e).unwrap_or_else(|| e.to_string()))
    };
    let got = state(via.query(&old_via, &[&1i64]).await);
    let want = state(direct.query(&old_direct, &[&1i64]).await);
    assert_eq!(got, want);
    assert_eq!(want.err().as_deref(), Some("0A000"));
    for client in [&via, &direct] {
        client.batch_execute("ROLLBACK").await.expect("rollback");
    }
    // Committed this time; the old statement's fate now depends on which server runs it
    // (one that never parsed it parses it afresh, more lenient than PostgreSQL, as for
    // unsharded pools), so only fresh statements are compared.
    via.batch_execute(alter).await.expect("alter through pgvia");
    direct.batch_execute(alter).await.expect("alter on the reference");

    // A fresh Parse of the same text sees the table as it is now, on every shard.
    let new_via = via.prepare(star).await.expect("prepare again");
    let new_direct = direct.prepare(star).await.expect("prepare again on the reference");
    assert_eq!(new_via.columns().len(), 4);
    for key in 1..=KEYS {
        let got = via.query(&new_via, &[&key]).await.expect("execute fresh");
        let want = direct.query(&new_direct, &[&key]).await.expect("execute fresh on the reference");
        assert_eq!(rows_text(&got), rows_text(&want), "key {key}");
    }
    // The unnamed statement too.
    for key in 1..=KEYS {
        let got = via.query_typed(star, &[(&key, Type::INT8)]).await.expect("unnamed");
        let want = direct.query_typed(star, &[(&key, Type::INT8)]).await.expect("unnamed on the reference");
        assert_eq!(rows_text(&got), rows_text(&want), "key {key}");
    }

    // DISCARD ALL drops the client's statements, as PostgreSQL does, whether it comes as a
    // simple query or bound through the extended protocol (JDBC sends every statement so);
    // the servers' copies go too, and preparing again parses afresh on every shard.
    let (mut held_via, mut held_direct) = (new_via, new_direct);
    for bound in [false, true] {
        if bound {
            let discard_via = via.prepare("DISCARD ALL").await.expect("prepare DISCARD ALL");
            let discard_direct =
                direct.prepare("DISCARD ALL").await.expect("prepare DISCARD ALL on the reference");
            via.execute(&discard_via, &[]).await.expect("prepared discard through pgvia");
            direct.execute(&discard_direct, &[]).await.expect("prepared discard on the reference");
        } else {
            via.batch_execute("DISCARD ALL").await.expect("discard through pgvia");
            direct.batch_execute("DISCARD ALL").await.expect("discard on the reference");
        }
        let got = state(via.query(&held_via, &[&1i64]).await);
        let want = state(direct.query(&held_direct, &[&1i64]).await);
        assert_eq!(got, want, "bound: {bound}");
        assert_eq!(want.err().as_deref(), Some("26000"), "bound: {bound}");
        held_via = via.prepare(star).await.expect("prepare after discard");
        held_direct = direct.prepare(star).await.expect("prepare after discard on the reference");
        for key in 1..=KEYS {
            let rows = via.query(&held_via, &[&key]).await.expect("execute after discard");
            assert_eq!(rows.len(), 1, "bound: {bound}, key {key}");
        }
    }
    // pgvia's names on the servers are not the client's.
    let reserved = via.simple_query("DEALLOCATE pgvia_1").await.map_err(|e| common::sqlstate(&e));
    assert_eq!(reserved.err().flatten().as_deref(), Some("26000"));
    proxy.stop().await;
}
