//! A sharded database served: four real PostgreSQL shards behind pgvia and a fifth holding
//! every row (the reference). The same statements go through pgvia and straight to the
//! reference; replies and, at the end, every table's rows must be the same, and each row must
//! sit on the shard PostgreSQL's own hash partitioning picks for its key. Multi-shard writes
//! commit with two-phase commit, all or nothing.

mod common;

use std::collections::BTreeSet;

use common::{TestProxy, DB, PASSWORD, USER};
use harness::Cluster;
use tokio_postgres::{Client, SimpleQueryMessage};

use common::shards::ShardClusters as Cluster5;

const SCHEMA: &str =
    "CREATE TABLE items (id bigint PRIMARY KEY, name text NOT NULL, qty int NOT NULL DEFAULT 0);
CREATE TABLE kinds (k int PRIMARY KEY, label text);
INSERT INTO kinds VALUES (1, 'one'), (2, 'two'), (3, 'three');";

fn start_clusters() -> Cluster5 {
    common::shards::start(SCHEMA)
}

fn sharded_config(c: &Cluster5) -> String {
    common::shards::config(c, &["items"])
}

async fn direct(pg: &Cluster) -> Client {
    common::connect(&common::direct_conninfo(pg, USER, PASSWORD, DB)).await.expect("direct connection")
}

/// A reply as text: rows (sorted unless the query orders them) and the command tag's count.
async fn reply(
    client: &Client,
    sql: &str,
    ordered: bool,
) -> Result<(Vec<Vec<Option<String>>>, Vec<u64>), String> {
    let messages =
        client.simple_query(sql).await.map_err(|e| common::sqlstate(&e).unwrap_or_else(|| e.to_string()))?;
    let mut rows = Vec::new();
    let mut counts = Vec::new();
    for m in messages {
        match m {
            SimpleQueryMessage::Row(r) => {
                rows.push((0..r.len()).map(|i| r.get(i).map(str::to_owned)).collect())
            }
            SimpleQueryMessage::CommandComplete(n) => counts.push(n),
            _ => {}
        }
    }
    if !ordered {
        rows.sort();
    }
    Ok((rows, counts))
}

/// The corpus: writes by key (single rows), writes without a key (every shard), reads by key
/// and fanned out, upserts and RETURNING, with their expected-order flag.
fn corpus() -> Vec<(String, bool)> {
    let mut out = Vec::new();
    let mut push = |s: String| out.push((s, false));
    for id in 1..=120i64 {
        push(format!("INSERT INTO items (id, name, qty) VALUES ({id}, 'item {id}', {})", id % 7));
    }
    for id in (1..=120i64).step_by(9) {
        push(format!("UPDATE items SET qty = qty + 10 WHERE id = {id}"));
        push(format!("SELECT id, name, qty FROM items WHERE id = {id}"));
        push(format!(
            "UPDATE items SET name = name || '!' WHERE id IN ({id}, {}) RETURNING id, name",
            id + 1
        ));
    }
    for id in (3..=120i64).step_by(13) {
        push(format!("DELETE FROM items WHERE id = {id} RETURNING *"));
        push(format!(
            "INSERT INTO items (id, name) VALUES ({id}, 'again') ON CONFLICT (id) DO UPDATE SET name = 'upserted'"
        ));
        push(format!(
            "INSERT INTO items (id, name) VALUES ({}, 'x') ON CONFLICT (id) DO UPDATE SET name = 'upserted' RETURNING id, name",
            id + 1
        ));
    }
    // Multi-row INSERTs whose rows belong to different shards: split, one INSERT per shard.
    for base in [1000i64, 1100, 1200, 1300, 1400] {
        push(format!(
            "INSERT INTO items (id, name, qty) VALUES ({base}, 'a', 1), ({}, 'it''s', 2), ({}, E'back\\\\slash', DEFAULT), ({}, 'd', -4), ({}, 'e', NULL::int)",
            base + 1,
            base + 2,
            base + 3,
            base + 4
        ));
    }
    push("INSERT INTO items (qty, id, name) VALUES (5, 1500, 'x'), (6, 1501, 'y'), (7, 1502, 'z'), (8, 1503, 'w')".into());
    // UPDATEs that change the key: each row ends on its new key's shard (checked below).
    for id in [2i64, 4, 6, 8, 10, 12, 1500] {
        push(format!("UPDATE items SET id = id + 5000 WHERE id = {id}"));
    }
    push("UPDATE items SET id = id + 6000, name = name || '>' WHERE id IN (14, 15, 16, 17) RETURNING id, name, qty".into());
    push("UPDATE items SET id = id + 200000, qty = qty + 1 WHERE qty = 6 RETURNING *".into());
    push("UPDATE items SET id = id WHERE id = 1002 RETURNING id, name".into());
    push("UPDATE items SET id = 7777 WHERE id = 999999".into());
    push("UPDATE items SET name = 'moved', id = 3 * id + 700000 WHERE id BETWEEN 20 AND 29".into());
    // Key conflicts: the target shard's unique index (or the source's, when both keys share
    // a shard) fails the statement, as PostgreSQL does.
    for base in [1000i64, 1100, 1200, 1300] {
        push(format!("UPDATE items SET id = {base} WHERE id = {}", base + 1));
    }
    push("UPDATE items SET id = NULL WHERE id = 1003".into());
    push("UPDATE items SET id = 8030 WHERE id = 30; UPDATE items SET qty = 9 WHERE id = 8030".into());
    push("BEGIN; UPDATE items SET id = 8031 WHERE id = 31 RETURNING id; UPDATE items SET id = 8032 WHERE id = 32; COMMIT".into());
    push("BEGIN; UPDATE items SET id = 8033 WHERE id = 33; ROLLBACK".into());
    push("SELECT id, name, qty FROM items WHERE qty > 5".into());
    push("SELECT id FROM items WHERE id BETWEEN 10 AND 30".into());
    push("SELECT id FROM items WHERE id = 5 OR id = 77".into());
    push("UPDATE items SET qty = qty * 2 WHERE qty < 3".into());
    push("DELETE FROM items WHERE qty = 4".into());
    // Omnisharded writes: every shard applies them; the count is one table's.
    push("INSERT INTO kinds (k, label) VALUES (4, 'four'), (5, 'five')".into());
    push("UPDATE kinds SET label = upper(label) WHERE k > 2".into());
    push("DELETE FROM kinds WHERE k = 5".into());
    push("SELECT k, label FROM kinds".into());
    push("SELECT i.id, k.label FROM items i JOIN kinds k ON k.k = i.qty WHERE i.id = 22".into());
    push("SELECT 1 + 1, 'text'".into());
    push("SELECT id FROM items WHERE id = 1 AND id = 2".into());
    push("SELECT * FROM items WHERE name LIKE 'item 1%' ORDER BY id".into());
    out
}

async fn table(client: &Client, sql: &str) -> BTreeSet<Vec<Option<String>>> {
    reply(client, sql, false).await.expect("table read").0.into_iter().collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sharded_database_answers_as_one_postgres_would() {
    let c = start_clusters();
    let proxy = TestProxy::start_toml(&sharded_config(&c)).await;
    let via = proxy.connect(USER, PASSWORD, DB).await;
    let reference = direct(&c.reference).await;

    // Simple protocol: every statement's reply equals the reference's.
    let mut compared = 0;
    for (sql, ordered) in corpus() {
        let got = reply(&via, &sql, ordered).await;
        let want = reply(&reference, &sql, ordered).await;
        // A fan-out SELECT without ORDER BY returns rows in shard order: compared as sets.
        assert_eq!(got, want, "reply to {sql}");
        compared += 1;
    }
    assert!(compared >= 150, "{compared} statements compared");

    // Reads over every shard that need merging: the same answer as one PostgreSQL.
    let merged = [
        ("SELECT count(*) FROM items", false),
        ("SELECT sum(qty), avg(qty), min(name), max(id), count(DISTINCT qty) FROM items", false),
        ("SELECT qty, count(*), sum(id) FROM items GROUP BY qty ORDER BY qty", true),
        ("SELECT id, name FROM items ORDER BY id LIMIT 10 OFFSET 5", true),
        ("SELECT id, name FROM items ORDER BY name DESC, id LIMIT 7", true),
        ("SELECT DISTINCT qty FROM items ORDER BY qty", true),
        ("SELECT qty, sum(id) FROM items GROUP BY qty HAVING count(*) > 3 ORDER BY 2 DESC, 1", true),
        ("SELECT string_agg(name, ',' ORDER BY id) FROM items WHERE id < 50", false),
        ("SELECT id % 3 AS m, avg(qty), stddev(qty) FROM items GROUP BY 1 ORDER BY 1", true),
    ];
    for (sql, ordered) in merged {
        assert_eq!(
            reply(&via, sql, ordered).await,
            reply(&reference, sql, ordered).await,
            "merged reply to {sql}"
        );
    }
    let err =
        via.simple_query("SELECT id, row_number() OVER (ORDER BY id) FROM items").await.expect_err("window");
    assert_eq!(common::sqlstate(&err).as_deref(), Some("0A000"));
    for (min, limit) in [(3i32, 7i64), (0, 100), (5, 1)] {
        let sql = "SELECT id, qty FROM items WHERE qty > $1 ORDER BY id DESC LIMIT $2";
        let got: Vec<(i64, i32)> = via
            .query(sql, &[&min, &limit])
            .await
            .expect("merged Bind")
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect();
        let want: Vec<(i64, i32)> = reference
            .query(sql, &[&min, &limit])
            .await
            .expect("reference")
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect();
        assert_eq!(got, want, "{sql} with {min}, {limit}");
    }
    let got: i64 = via
        .query_one("SELECT count(*) FROM items WHERE qty >= $1", &[&2i32])
        .await
        .expect("count by Bind")
        .get(0);
    let want: i64 = reference
        .query_one("SELECT count(*) FROM items WHERE qty >= $1", &[&2i32])
        .await
        .expect("reference")
        .get(0);
    assert_eq!(got, want);

    // Extended protocol, key in Bind parameters (binary int8).
    for id in 200..260i64 {
        let n = via
            .execute(
                "INSERT INTO items (id, name, qty) VALUES ($1, $2, $3)",
                &[&id, &format!("p{id}"), &((id % 5) as i32)],
            )
            .await
            .expect("insert via Bind");
        let m = reference
            .execute(
                "INSERT INTO items (id, name, qty) VALUES ($1, $2, $3)",
                &[&id, &format!("p{id}"), &((id % 5) as i32)],
            )
            .await
            .expect("insert reference");
        assert_eq!(n, m);
    }
    // Key updates with the key in Bind parameters (binary), with and without RETURNING.
    for (from, to) in [(200i64, 9200i64), (201, 9201), (202, 9202), (203, 9203)] {
        let sql = "UPDATE items SET id = $2 WHERE id = $1";
        let n = via.execute(sql, &[&from, &to]).await.expect("key update via Bind");
        let m = reference.execute(sql, &[&from, &to]).await.expect("reference key update");
        assert_eq!(n, m);
        let sql = "UPDATE items SET id = $2, qty = qty + 1 WHERE id = $1 RETURNING id, qty, name";
        let got: Vec<(i64, i32, String)> = via
            .query(sql, &[&to, &(to + 1000)])
            .await
            .expect("key update RETURNING via Bind")
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect();
        let want: Vec<(i64, i32, String)> = reference
            .query(sql, &[&to, &(to + 1000)])
            .await
            .expect("reference")
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect();
        assert_eq!(got, want);
    }
    let err =
        via.execute("UPDATE items SET id = $2 WHERE id = $1", &[&204i64, &205i64]).await.expect_err("dup");
    let want = reference
        .execute("UPDATE items SET id = $2 WHERE id = $1", &[&204i64, &205i64])
        .await
        .expect_err("dup");
    assert_eq!(common::sqlstate(&err), common::sqlstate(&want));
    let stmt = via.prepare("SELECT name, qty FROM items WHERE id = $1").await.expect("prepare");
    for id in (200..260i64).step_by(3) {
        let got: Vec<(String, i32)> = via
            .query(&stmt, &[&id])
            .await
            .expect("select by Bind")
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect();
        let want: Vec<(String, i32)> = reference
            .query("SELECT name, qty FROM items WHERE id = $1", &[&id])
            .await
            .expect("reference select")
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect();
        assert_eq!(got, want, "id {id}");
    }
    let n = via
        .execute("UPDATE items SET qty = qty + 1 WHERE id = ANY($1)", &[&vec![200i64, 201, 202, 250]])
        .await
        .expect("ANY update");
    let m = reference
        .execute("UPDATE items SET qty = qty + 1 WHERE id = ANY($1)", &[&vec![200i64, 201, 202, 250]])
        .await
        .expect("ANY update ref");
    assert_eq!(n, m);

    // Every table equal, row for row; each item on the shard PostgreSQL's hash picks.
    let mut union = BTreeSet::new();
    for (i, shard) in c.shards.iter().enumerate() {
        let client = direct(shard).await;
        let rows = table(&client, "SELECT id, name, qty FROM items").await;
        let ids: Vec<String> = rows.iter().map(|r| r[0].clone().unwrap_or_default()).collect();
        if !ids.is_empty() {
            reference
                .simple_query(&format!(
                    "DELETE FROM placed; INSERT INTO placed SELECT unnest(ARRAY[{}]::bigint[])",
                    ids.join(",")
                ))
                .await
                .expect("place");
            let placed = table(&reference, &format!("SELECT count(*) FROM placed_{i}")).await;
            assert_eq!(
                placed.into_iter().next().and_then(|r| r[0].clone()),
                Some(ids.len().to_string()),
                "shard {i} holds rows of another partition"
            );
        }
        union.extend(rows);
        assert_eq!(
            table(&client, "SELECT * FROM kinds").await,
            table(&reference, "SELECT * FROM kinds").await
        );
    }
    assert_eq!(union, table(&reference, "SELECT id, name, qty FROM items").await);
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_shard_transactions_are_all_or_nothing() {
    let c = start_clusters();
    let proxy = TestProxy::start_toml(&sharded_config(&c)).await;
    let via = proxy.connect(USER, PASSWORD, DB).await;
    // Aggregates across shards are the merge engine's; rows are counted here.
    let count = |ids: &'static str| format!("SELECT id FROM items WHERE id IN ({ids})");

    // Committed on several shards with two-phase commit.
    via.batch_execute("BEGIN").await.expect("begin");
    for id in [10i64, 11, 12, 13, 14, 15] {
        via.execute("INSERT INTO items (id, name) VALUES ($1, 'tx')", &[&id]).await.expect("insert in tx");
    }
    via.batch_execute("COMMIT").await.expect("commit");
    let n = via.query(&count("10,11,12,13,14,15") as &str, &[]).await.expect("count").len();
    assert_eq!(n, 6);

    // Rolled back everywhere.
    via.batch_execute("BEGIN").await.expect("begin");
    for id in [20i64, 21, 22, 23] {
        via.execute("INSERT INTO items (id, name) VALUES ($1, 'tx')", &[&id]).await.expect("insert in tx");
    }
    via.batch_execute("ROLLBACK").await.expect("rollback");
    let n = via.query(&count("20,21,22,23") as &str, &[]).await.expect("count").len();
    assert_eq!(n, 0);

    // A failure on one shard: COMMIT rolls back what the others did.
    via.batch_execute("BEGIN").await.expect("begin");
    via.execute("INSERT INTO items (id, name) VALUES (30, 'a')", &[]).await.expect("first");
    via.execute("INSERT INTO items (id, name) VALUES (31, 'a')", &[]).await.expect("second");
    let dup =
        via.execute("INSERT INTO items (id, name) VALUES (10, 'dup')", &[]).await.expect_err("duplicate");
    assert_eq!(common::sqlstate(&dup).as_deref(), Some("23505"));
    let after = via.execute("SELECT 1", &[]).await.expect_err("aborted transaction");
    assert_eq!(common::sqlstate(&after).as_deref(), Some("25P02"));
    via.batch_execute("COMMIT").await.expect("commit of a failed transaction rolls back");
    let n = via.query(&count("30,31") as &str, &[]).await.expect("count").len();
    assert_eq!(n, 0);

    // An autocommit write on every shard is atomic too.
    let n = via.execute("UPDATE items SET qty = 7 WHERE name = 'tx'", &[]).await.expect("fan-out update");
    assert_eq!(n, 6);
    let err = via
        .execute("UPDATE items SET qty = 1 / (id - 12) WHERE name = 'tx'", &[])
        .await
        .expect_err("division by zero on one shard");
    assert_eq!(common::sqlstate(&err).as_deref(), Some("22012"));
    let n = via.query("SELECT id FROM items WHERE qty = 7", &[]).await.expect("count").len();
    assert_eq!(n, 6, "the shards without the error rolled back too");

    // A pipeline of inserts for different shards before one Sync (a driver's batch): each row on
    // its own shard only, all in one transaction; one failing statement keeps none of them.
    use common::raw::{bind, execute, parse, sync, RawConn};
    let mut raw = RawConn::login(proxy.addr, USER, PASSWORD, DB).await.expect("raw login");
    let pipeline = |ids: &[&str]| {
        let mut bytes = Vec::new();
        for id in ids {
            bytes.extend(parse("", "INSERT INTO items (id, name) VALUES ($1, 'piped')"));
            bytes.extend(bind("", "", &[Some(id)]));
            bytes.extend(execute("", 0));
        }
        bytes.extend(sync());
        bytes
    };
    raw.send(&pipeline(&["60", "61", "62", "63", "64"])).await;
    let mut tags = String::new();
    while let Some(m) = raw.recv().await {
        tags.push(m.tag as char);
        if m.tag == b'Z' {
            break;
        }
    }
    assert_eq!(tags, "12C12C12C12C12CZ", "replies in PostgreSQL's order");
    raw.send(&pipeline(&["65", "66", "60", "67"])).await;
    let mut error = None;
    while let Some(m) = raw.recv().await {
        if m.tag == b'E' {
            error = m.sqlstate();
        }
        if m.tag == b'Z' {
            break;
        }
    }
    assert_eq!(error.as_deref(), Some("23505"));
    let piped: Vec<i64> = via
        .query("SELECT id FROM items WHERE name = 'piped' ORDER BY id", &[])
        .await
        .expect("read")
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(piped, vec![60, 61, 62, 63, 64], "the second pipeline kept nothing");
    let mut placed = 0;
    for shard in &c.shards {
        let d = direct(shard).await;
        placed += d.query("SELECT id FROM items WHERE name = 'piped'", &[]).await.expect("rows").len();
    }
    assert_eq!(placed, 5, "each piped row is on one shard only");

    // Nothing is left prepared, and the decision log is empty.
    for shard in &c.shards {
        let client = direct(shard).await;
        let left: i64 =
            client.query_one("SELECT count(*) FROM pg_prepared_xacts", &[]).await.expect("prepared").get(0);
        assert_eq!(left, 0);
    }
    let log = direct(&c.shards[0]).await;
    let rows: i64 =
        log.query_one("SELECT count(*) FROM pgvia.two_phase_decisions", &[]).await.expect("log").get(0);
    assert_eq!(rows, 0);

    // Refusals name what is missing.
    let err = via
        .execute("INSERT INTO items (id, name) VALUES (100, 'a'), (101, 'b'), (102, 'c'), (103, 'd')", &[])
        .await;
    if let Err(e) = err {
        assert_eq!(common::sqlstate(&e).as_deref(), Some("0A000"), "{e}");
    }
    // Savepoints hold on every shard, including shards the transaction reaches after them.
    let err = via.batch_execute("SAVEPOINT s").await.expect_err("savepoint outside a transaction");
    assert_eq!(common::sqlstate(&err).as_deref(), Some("25P01"));
    via.batch_execute("BEGIN").await.expect("begin");
    via.batch_execute("SAVEPOINT first").await.expect("savepoint before any shard");
    via.execute("INSERT INTO items (id, name) VALUES (40, 'kept')", &[]).await.expect("insert");
    via.batch_execute("SAVEPOINT s1").await.expect("savepoint");
    for id in [41i64, 42, 43, 44, 45] {
        via.execute("INSERT INTO items (id, name) VALUES ($1, 'undone')", &[&id])
            .await
            .expect("insert after savepoint");
    }
    let dup =
        via.execute("INSERT INTO items (id, name) VALUES (40, 'dup')", &[]).await.expect_err("duplicate");
    assert_eq!(common::sqlstate(&dup).as_deref(), Some("23505"));
    via.batch_execute("ROLLBACK TO SAVEPOINT s1").await.expect("rollback to");
    via.execute("INSERT INTO items (id, name) VALUES (46, 'kept')", &[])
        .await
        .expect("insert after rollback to");
    let err = via.batch_execute("RELEASE nope").await.expect_err("unknown savepoint");
    assert_eq!(common::sqlstate(&err).as_deref(), Some("3B001"));
    via.batch_execute("ROLLBACK TO first").await.expect("rollback to the first");
    via.execute("INSERT INTO items (id, name) VALUES (47, 'kept')", &[]).await.expect("insert");
    via.batch_execute("COMMIT").await.expect("commit");
    let kept: Vec<i64> = via
        .query("SELECT id FROM items WHERE id BETWEEN 40 AND 47", &[])
        .await
        .expect("read")
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(kept, vec![47], "only the insert after ROLLBACK TO first is kept");
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_driver_clients_with_keys_in_bind_parameters() {
    let c = start_clusters();
    let proxy = TestProxy::start_toml(&sharded_config(&c)).await;
    let mut tasks = Vec::new();
    for client_no in 0..50i64 {
        let conninfo = proxy.conninfo(USER, PASSWORD, DB);
        tasks.push(tokio::spawn(async move {
            let client = common::connect(&conninfo).await.expect("connect");
            for n in 0..10i64 {
                let id = client_no * 1000 + n;
                client
                    .execute("INSERT INTO items (id, name, qty) VALUES ($1, $2, $3)", &[&id, &"w", &1i32])
                    .await?;
                let row = client.query_one("SELECT qty FROM items WHERE id = $1", &[&id]).await?;
                assert_eq!(row.get::<_, i32>(0), 1);
                client.execute("UPDATE items SET qty = qty + 1 WHERE id = $1", &[&id]).await?;
            }
            Ok::<_, tokio_postgres::Error>(())
        }));
    }
    let mut errors = 0;
    for t in tasks {
        if let Err(e) = t.await.expect("task") {
            eprintln!("client error: {e}");
            errors += 1;
        }
    }
    assert_eq!(errors, 0);
    let via = proxy.connect(USER, PASSWORD, DB).await;
    let rows = via.query("SELECT id FROM items WHERE qty = 2", &[]).await.expect("fan-out");
    assert_eq!(rows.len(), 500);

    // What the admin console shows: every shard, the statement that lacked a key, a route.
    let shards = common::ops::console(&c.reference, &proxy, "SHOW SHARDS").await;
    assert_eq!(shards.rows.len(), common::shards::SHARDS);
    let fanouts = common::ops::console(&c.reference, &proxy, "SHOW SHARD_FANOUTS").await;
    let row = fanouts.row("statement", "SELECT id FROM items WHERE qty = ?");
    assert_eq!(fanouts.int(row, "count"), 1);
    let route =
        common::ops::console(&c.reference, &proxy, "SHOW ROUTE SELECT * FROM items WHERE id IN (1, 2)").await;
    let text: Vec<&str> = route.rows.iter().map(|r| r[0].as_str()).collect();
    assert!(text[0].starts_with("statement 1: shards {"), "{text:?}");
    assert!(text.iter().any(|l| l.contains("condition on key id")), "{text:?}");
    proxy.stop().await;
}

/// A client's cancel stops its query on every shard it runs on, not only the first; the
/// session goes on, and no shard's backend is left running it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_reaches_every_shard_of_a_cross_shard_query() {
    let c = start_clusters();
    let proxy = TestProxy::start_toml(&sharded_config(&c)).await;
    let via = proxy.connect(USER, PASSWORD, DB).await;
    // Forty keys land on all four shards.
    let values: Vec<String> = (1..=40).map(|id| format!("({id}, 'sleepy')")).collect();
    via.batch_execute(&format!("INSERT INTO items (id, name) VALUES {}", values.join(", ")))
        .await
        .expect("rows on every shard");
    let token = via.cancel_token();
    let started = std::time::Instant::now();
    let canceller = tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_millis(800)).await;
        token.cancel_query(tokio_postgres::NoTls).await.expect("cancel sent");
    });
    let err = via
        .simple_query("SELECT id, pg_sleep(30) FROM items WHERE name = 'sleepy'")
        .await
        .expect_err("cancelled");
    canceller.await.expect("canceller");
    assert_eq!(common::sqlstate(&err).as_deref(), Some("57014"), "{err}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(10),
        "the query ran on: {:?}",
        started.elapsed()
    );
    let rows = via.simple_query("SELECT 1").await.expect("the session goes on");
    assert!(!rows.is_empty());
    for (i, shard) in c.shards.iter().enumerate() {
        let client = direct(shard).await;
        let mut left = -1i64;
        for _ in 0..50 {
            left = client
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%pg_sleep(30)%' AND state = 'active' AND pid <> pg_backend_pid()",
                    &[],
                )
                .await
                .expect("activity")
                .get(0);
            if left == 0 {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        assert_eq!(left, 0, "shard {i} still runs the cancelled query");
    }

    // A request that waits for shard servers (four clients hold every shard's pool of four
    // in open transactions) has no server to signal: pgvia answers its cancel with 57014,
    // nothing of it runs, and the session goes on.
    let mut holders = Vec::new();
    for _ in 0..4 {
        let holder = proxy.connect(USER, PASSWORD, DB).await;
        holder.batch_execute("BEGIN; SELECT count(*) FROM items").await.expect("a server on every shard");
        holders.push(holder);
    }
    let token = via.cancel_token();
    let canceller = tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        token.cancel_query(tokio_postgres::NoTls).await.expect("cancel sent");
    });
    let started = std::time::Instant::now();
    let err = via
        .simple_query("INSERT INTO items (id, name) VALUES (1000, 'never')")
        .await
        .expect_err("cancelled while it waited for servers");
    canceller.await.expect("canceller");
    assert_eq!(common::sqlstate(&err).as_deref(), Some("57014"), "{err}");
    assert!(started.elapsed() < std::time::Duration::from_secs(5), "answered after {:?}", started.elapsed());
    for holder in &holders {
        holder.batch_execute("COMMIT").await.expect("commit");
    }
    let never: i64 =
        via.query_one("SELECT count(*) FROM items WHERE id = 1000", &[]).await.expect("count").get(0);
    assert_eq!(never, 0, "the cancelled INSERT ran");
    proxy.stop().await;
}
