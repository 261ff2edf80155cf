//! Issue 34: tables on every shard (omnisharded) written through pgvia answer as one table
//! would — one RETURNING row per row written, one command tag, all shards or none — and a
//! write whose shards would disagree (a sequence default, `random()`) is refused and changes
//! nothing; `COPY ... FROM STDIN` into such a table reaches every shard. Also: false errors of
//! cross-shard reads (a hidden sort column, a cast LIMIT, a SAVEPOINT alone in an extended
//! batch) answered as the reference answers, and `SHOW SHARDS` reporting what the sessions
//! did. Every statement also runs on the reference (one PostgreSQL holding all the rows).

#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::shards::{self, ShardClusters};
use common::{direct_conninfo, TestProxy, DB, PASSWORD, USER};
use futures_util::SinkExt;
use tokio_postgres::types::Type;
use tokio_postgres::{Client, Row, SimpleQueryMessage};

const SCHEMA: &str = "CREATE TABLE items (id bigint PRIMARY KEY, u uuid NOT NULL, n int NOT NULL);
CREATE TABLE products (id bigint PRIMARY KEY, name text NOT NULL, price int NOT NULL);
CREATE TABLE tags (id serial PRIMARY KEY, label text NOT NULL);
GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO app;";

struct Setup {
    c: ShardClusters,
    proxy: TestProxy,
    via: Client,
    reference: Client,
    shards: Vec<Client>,
}

async fn direct(pg: &harness::Cluster) -> Client {
    common::connect(&direct_conninfo(pg, USER, PASSWORD, DB)).await.expect("direct connection")
}

async fn setup() -> Setup {
    let c = shards::start(SCHEMA);
    let proxy = TestProxy::start_toml(&shards::config(&c, &["items"])).await;
    let via = proxy.connect(USER, PASSWORD, DB).await;
    let reference = direct(&c.reference).await;
    let mut shards = Vec::new();
    for s in &c.shards {
        shards.push(direct(s).await);
    }
    Setup { c, proxy, via, reference, shards }
}

type Rows = Vec<Vec<Option<String>>>;

/// A simple query's rows (as text) and command tag, or its SQLSTATE.
async fn simple(client: &Client, sql: &str) -> Result<(Rows, String), String> {
    let messages = tokio::time::timeout(Duration::from_secs(20), client.simple_query(sql))
        .await
        .map_err(|_| format!("{sql}: no answer in 20s"))?
        .map_err(|e| common::sqlstate(&e).unwrap_or_else(|| e.to_string()))?;
    let mut rows = Vec::new();
    let mut tag = String::new();
    for m in messages {
        match m {
            SimpleQueryMessage::Row(r) => {
                rows.push((0..r.len()).map(|i| r.get(i).map(str::to_owned)).collect())
            }
            SimpleQueryMessage::CommandComplete(n) => tag = n.to_string(),
            _ => {}
        }
    }
    Ok((rows, tag))
}

/// An extended-protocol row as text, for the column types these tests use.
fn texts(row: &Row) -> Vec<Option<String>> {
    (0..row.len())
        .map(|i| match *row.columns()[i].type_() {
            Type::INT8 => row.get::<_, Option<i64>>(i).map(|v| v.to_string()),
            Type::INT4 => row.get::<_, Option<i32>>(i).map(|v| v.to_string()),
            Type::FLOAT8 => row.get::<_, Option<f64>>(i).map(|v| v.to_string()),
            Type::TEXT => row.get::<_, Option<String>>(i),
            ref t => panic!("column type {t} not read by this test"),
        })
        .collect()
}

/// An extended-protocol query's rows (as text), or its SQLSTATE.
async fn extended(client: &Client, sql: &str) -> Result<Rows, String> {
    let rows = tokio::time::timeout(Duration::from_secs(20), client.query(sql, &[]))
        .await
        .map_err(|_| format!("{sql}: no answer in 20s"))?
        .map_err(|e| common::sqlstate(&e).unwrap_or_else(|| e.to_string()))?;
    Ok(rows.iter().map(texts).collect())
}

/// An extended-protocol statement's row count (from its command tag), or its SQLSTATE.
async fn execute(client: &Client, sql: &str) -> Result<u64, String> {
    tokio::time::timeout(Duration::from_secs(20), client.execute(sql, &[]))
        .await
        .map_err(|_| format!("{sql}: no answer in 20s"))?
        .map_err(|e| common::sqlstate(&e).unwrap_or_else(|| e.to_string()))
}

/// `sql` in the simple protocol through pgvia and on the reference: the same rows, in the
/// same order, and the same tag.
async fn same_simple(s: &Setup, sql: &str) {
    let want = simple(&s.reference, sql).await;
    assert!(want.is_ok(), "{sql} on the reference: {want:?}");
    assert_eq!(simple(&s.via, sql).await, want, "{sql} (simple protocol)");
}

/// `sql` in the extended protocol through pgvia and on the reference: the same rows.
async fn same_extended(s: &Setup, sql: &str) {
    let want = extended(&s.reference, sql).await;
    assert!(want.is_ok(), "{sql} on the reference: {want:?}");
    assert_eq!(extended(&s.via, sql).await, want, "{sql} (extended protocol)");
}

async fn same_execute(s: &Setup, sql: &str) {
    let want = execute(&s.reference, sql).await;
    assert!(want.is_ok(), "{sql} on the reference: {want:?}");
    assert_eq!(execute(&s.via, sql).await, want, "{sql} (extended protocol)");
}

/// Every row of `table`, sorted, read directly on `client`.
async fn table_rows(client: &Client, table: &str) -> Rows {
    simple(client, &format!("SELECT * FROM {table} ORDER BY 1")).await.expect("read").0
}

/// Every shard's copy of `table` is the reference's.
async fn copies_are_the_reference(s: &Setup, table: &str) {
    let want = table_rows(&s.reference, table).await;
    for (i, shard) in s.shards.iter().enumerate() {
        assert_eq!(table_rows(shard, table).await, want, "shard {i}'s copy of {table}");
    }
}

/// Items 5 and deliverable 2: INSERT/UPDATE/DELETE ... RETURNING and upserts on a table on
/// every shard answered one row per shard (4 rows for one); now one per row written, one tag,
/// and every copy left as the reference, in both protocols, in and out of a transaction.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn omnisharded_writes_answer_as_one_table() {
    let s = setup().await;
    for sql in [
        "INSERT INTO products VALUES (1, 'pen', 3) RETURNING *",
        "INSERT INTO products VALUES (2, 'ink', 5), (3, 'pad', 7) RETURNING id, price * 2 AS twice",
        "INSERT INTO products VALUES (2, 'ink!', 6) ON CONFLICT (id) DO UPDATE SET name = EXCLUDED.name RETURNING *",
        "INSERT INTO products VALUES (4, 'cap', 1) ON CONFLICT DO NOTHING",
        "INSERT INTO products VALUES (4, 'cap', 1) ON CONFLICT DO NOTHING RETURNING id",
        "UPDATE products SET price = price + 1 WHERE id >= 2 RETURNING id, price",
        "DELETE FROM products WHERE id = 3 RETURNING name",
        "UPDATE products SET price = 0 WHERE id = 99",
    ] {
        same_simple(&s, sql).await;
    }
    copies_are_the_reference(&s, "products").await;
    for sql in [
        "INSERT INTO products VALUES (10, 'cup', 2) RETURNING *",
        "INSERT INTO products VALUES (10, 'mug', 3) ON CONFLICT (id) DO UPDATE SET name = EXCLUDED.name RETURNING id, name",
        "UPDATE products SET price = price * 10 WHERE id IN (1, 10) RETURNING id, price",
        "DELETE FROM products WHERE id = 1 RETURNING id, name, price",
    ] {
        same_extended(&s, sql).await;
    }
    same_execute(&s, "INSERT INTO products VALUES (11, 'box', 4), (12, 'bag', 5)").await;
    same_execute(&s, "UPDATE products SET price = price + 1").await;
    same_execute(&s, "DELETE FROM products WHERE id = 12").await;
    copies_are_the_reference(&s, "products").await;
    // Inside a transaction, committed on every shard.
    for sql in [
        "BEGIN",
        "INSERT INTO products VALUES (20, 'pin', 1) RETURNING id",
        "DELETE FROM products WHERE id = 11 RETURNING *",
        "COMMIT",
    ] {
        same_simple(&s, sql).await;
    }
    copies_are_the_reference(&s, "products").await;
    s.proxy.stop().await;
    drop(s.c);
}

/// Deliverable 2: a write whose shards would give different results (a sequence default that
/// has drifted on one shard, `random()`, a row one copy lacks) is refused with 0A000 and
/// changes no copy, in both protocols and inside a transaction.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn diverging_omnisharded_write_is_refused_atomically() {
    let s = setup().await;
    same_simple(&s, "INSERT INTO tags (label) VALUES ('a') RETURNING id, label").await;
    same_simple(&s, "INSERT INTO products VALUES (1, 'pen', 3), (2, 'ink', 5)").await;
    copies_are_the_reference(&s, "tags").await;
    // One shard's sequence drifts: its copy would get another id.
    s.shards[2].simple_query("SELECT setval('tags_id_seq', 100)").await.unwrap();
    let tags = table_rows(&s.reference, "tags").await;
    let products = table_rows(&s.reference, "products").await;
    let refused = |r: Result<Rows, String>, sql: &str| {
        assert_eq!(r, Err("0A000".to_owned()), "{sql}");
    };
    for sql in [
        "INSERT INTO tags (label) VALUES ('b') RETURNING id",
        "INSERT INTO products VALUES (3, 'pad', 1) RETURNING random() AS r",
    ] {
        refused(simple(&s.via, sql).await.map(|r| r.0), sql);
        refused(extended(&s.via, sql).await, sql);
        simple(&s.via, "BEGIN").await.unwrap();
        refused(simple(&s.via, sql).await.map(|r| r.0), sql);
        // The failed transaction's COMMIT rolls back (checked below: no copy changed).
        simple(&s.via, "COMMIT").await.unwrap();
    }
    // A row one copy has and the others lack: the row counts differ.
    s.shards[1].simple_query("INSERT INTO products VALUES (50, 'stray', 9)").await.unwrap();
    let sql = "UPDATE products SET price = price + 1 WHERE price > 0";
    refused(simple(&s.via, sql).await.map(|r| r.0), sql);
    assert_eq!(execute(&s.via, sql).await, Err("0A000".to_owned()), "{sql}");
    s.shards[1].simple_query("DELETE FROM products WHERE id = 50").await.unwrap();
    for (i, shard) in s.shards.iter().enumerate() {
        assert_eq!(table_rows(shard, "tags").await, tags, "shard {i}: tags changed");
        assert_eq!(table_rows(shard, "products").await, products, "shard {i}: products changed");
    }
    // The session goes on.
    same_simple(&s, "INSERT INTO products VALUES (4, 'cap', 2) RETURNING *").await;
    copies_are_the_reference(&s, "products").await;
    s.proxy.stop().await;
    drop(s.c);
}

/// Deliverable 2: a write to a table on every shard that reads (or writes) a sharded table
/// ran on every shard with that shard's rows alone, leaving each copy different; it is
/// refused with 0A000 and changes no copy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn omnisharded_write_from_sharded_rows_is_refused() {
    let s = setup().await;
    seed_items(&s).await;
    same_simple(&s, "INSERT INTO products VALUES (1, 'pen', 3), (2, 'ink', 5), (3, 'pad', 7)").await;
    for sql in [
        "INSERT INTO products SELECT id + 100, 'from items', n FROM items",
        // One row on every shard, but each shard's own maximum: the same count everywhere.
        "INSERT INTO products SELECT max(id) + 100, 'max', 0 FROM items",
        "UPDATE products SET price = (SELECT max(n) FROM items)",
        "DELETE FROM products WHERE id IN (SELECT id FROM items)",
        "UPDATE products p SET price = i.n FROM items i WHERE i.id = p.id",
        "WITH d AS (DELETE FROM items WHERE id = 1 RETURNING id) INSERT INTO products SELECT id + 200, 'moved', 0 FROM d",
    ] {
        assert_eq!(simple(&s.via, sql).await.map(|r| r.0), Err("0A000".to_owned()), "{sql}");
        assert_eq!(extended(&s.via, sql).await, Err("0A000".to_owned()), "{sql}");
    }
    copies_are_the_reference(&s, "products").await;
    same_simple(&s, "SELECT count(*) FROM items").await;
    s.proxy.stop().await;
    drop(s.c);
}

/// Item 8: `COPY ... FROM STDIN` into a table on every shard never got its CopyInResponse;
/// now every shard's copy gets the rows, with one `COPY n`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_into_omnisharded_table_reaches_every_shard() {
    let s = setup().await;
    // The simple protocol (psql's \copy).
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("rows.txt");
    std::fs::write(&file, "7\tnib\t1\n8\tjar\t2\n").expect("write rows");
    let cmd = format!("\\copy products from '{}'", file.display());
    let mut outs = Vec::new();
    for conninfo in
        [s.proxy.conninfo(USER, PASSWORD, DB), direct_conninfo(&s.c.reference, USER, PASSWORD, DB)]
    {
        let args = ["-v", "ON_ERROR_STOP=1", "-c", &cmd];
        let run = common::psql(&s.c.reference, &conninfo, &args, None);
        let out = tokio::time::timeout(Duration::from_secs(20), run).await.expect("COPY answered");
        common::assert_success(&cmd, &out);
        outs.push(common::text(&out.stdout).trim().to_owned());
    }
    assert_eq!(outs, ["COPY 2", "COPY 2"]);
    copies_are_the_reference(&s, "products").await;
    // The extended protocol (tokio-postgres).
    let data = "1\tpen\t3\n2\tink\t5\n3\tpad\t7\n";
    let mut counts = Vec::new();
    for client in [&s.via, &s.reference] {
        let copy = async {
            let sink = client.copy_in("COPY products (id, name, price) FROM STDIN").await?;
            futures_util::pin_mut!(sink);
            sink.send(bytes::Bytes::from_static(data.as_bytes())).await?;
            sink.finish().await
        };
        let n = tokio::time::timeout(Duration::from_secs(20), copy).await.expect("COPY answered").unwrap();
        counts.push(n);
    }
    assert_eq!(counts, [3, 3], "COPY n");
    copies_are_the_reference(&s, "products").await;
    // A failing row fails it on every shard; nothing is kept; the session goes on.
    let bad = async {
        let sink = s.via.copy_in("COPY products FROM STDIN").await?;
        futures_util::pin_mut!(sink);
        sink.send(bytes::Bytes::from_static(b"4\tcap\tnot a number\n")).await?;
        sink.finish().await
    };
    let e = tokio::time::timeout(Duration::from_secs(20), bad).await.expect("COPY answered").unwrap_err();
    assert_eq!(common::sqlstate(&e).as_deref(), Some("22P02"), "{e:?}");
    copies_are_the_reference(&s, "products").await;
    same_simple(&s, "SELECT count(*) FROM products").await;
    s.proxy.stop().await;
    drop(s.c);
}

/// The same 40 rows of `items` through pgvia and on the reference.
async fn seed_items(s: &Setup) {
    let values: Vec<String> = (1..=40)
        .map(|i| format!("({i}, '{:08x}-0000-4000-8000-{:012x}', {})", (i * 7919) % 97, i, (i * 13) % 31))
        .collect();
    let insert = format!("INSERT INTO items (id, u, n) VALUES {}", values.join(", "));
    s.via.simple_query(&insert).await.unwrap();
    s.reference.simple_query(&insert).await.unwrap();
}

/// Item 9: a cross-shard ORDER BY of a column the select list casts failed with 42702.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hidden_sort_column_is_not_ambiguous() {
    let s = setup().await;
    seed_items(&s).await;
    // 9: the shard query had the select list's `u::text` (named u) and the hidden sort
    // column u: "ORDER BY u is ambiguous". PostgreSQL sorts by the output column `u`.
    for sql in [
        "SELECT u::text FROM items ORDER BY u",
        "SELECT n::text FROM items ORDER BY n, id",
        "SELECT id, n::text FROM items ORDER BY n DESC, id LIMIT 7",
        "SELECT u::text AS x FROM items ORDER BY u",
        "SELECT id AS n, n AS id FROM items ORDER BY id, n",
    ] {
        same_simple(&s, sql).await;
    }
    for sql in ["SELECT u::text FROM items ORDER BY u", "SELECT n::text FROM items ORDER BY n, id"] {
        same_extended(&s, sql).await;
    }
    s.proxy.stop().await;
    drop(s.c);
}

/// Item 10: a LIMIT cast to an integer was refused in the simple protocol; a SAVEPOINT alone
/// in an extended-protocol batch was refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn constant_limit_and_lone_savepoint_are_answered() {
    let s = setup().await;
    seed_items(&s).await;
    // 10: a LIMIT PostgreSQL folds to an integer.
    for sql in [
        "SELECT id FROM items ORDER BY id LIMIT '15'::int8",
        "SELECT id FROM items ORDER BY id LIMIT CAST('4' AS integer) OFFSET '3'::int2",
        "SELECT id FROM items ORDER BY id LIMIT (5)::bigint",
        "SELECT id, n FROM items ORDER BY n, id LIMIT 2 + 3 OFFSET 10 - 2 * 4",
    ] {
        same_simple(&s, sql).await;
        same_extended(&s, sql).await;
    }
    // 10: SAVEPOINT, ROLLBACK TO and RELEASE alone in an extended-protocol batch.
    for client in [&s.via, &s.reference] {
        for sql in [
            "BEGIN",
            "INSERT INTO products VALUES (1, 'pen', 3)",
            "SAVEPOINT a",
            "INSERT INTO products VALUES (2, 'ink', 5)",
            "ROLLBACK TO SAVEPOINT a",
            "SAVEPOINT b",
            "INSERT INTO products VALUES (3, 'pad', 7)",
            "RELEASE SAVEPOINT b",
            "COMMIT",
        ] {
            execute(client, sql).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
        }
    }
    assert_eq!(execute(&s.via, "SAVEPOINT c").await, execute(&s.reference, "SAVEPOINT c").await);
    copies_are_the_reference(&s, "products").await;
    s.proxy.stop().await;
    drop(s.c);
}

/// Item 11: `SHOW SHARDS` showed every shard `unknown` with `routed` 0 after thousands of
/// transactions; now each shard a session reached is `healthy` and counts its transactions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn show_shards_reports_what_sessions_did() {
    let s = setup().await;
    for i in 0..40 {
        s.via
            .simple_query(&format!("INSERT INTO items (id, u, n) VALUES ({i}, gen_random_uuid(), {i})"))
            .await
            .unwrap();
    }
    s.via.simple_query("SELECT count(*) FROM items").await.unwrap();
    let table = common::ops::console(&s.c.reference, &s.proxy, "SHOW SHARDS").await;
    assert_eq!(table.rows.len(), shards::SHARDS, "{table:?}");
    for row in &table.rows {
        assert_eq!(row[table.col("state")], "healthy", "{table:?}");
        assert!(table.int(row, "routed") >= 2, "every shard had inserts and the count: {table:?}");
    }
    s.proxy.stop().await;
    drop(s.c);
}

/// `COPY ... FROM STDIN` into a table sharded by key through the extended protocol (a
/// driver's `copy_in`, as Rust programs load data) was refused ("only as a simple query");
/// now its rows are split by key as psql's are: each on the shard PostgreSQL's own hash
/// partitioning picks, the table as the reference's, one `COPY n`; a bad row fails it on
/// every shard and the session goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_extended_copy_into_a_sharded_table_splits_its_rows_by_key() {
    let s = setup().await;
    let ids = [101i64, 102, 103, 104, 105, 106, 107, 108];
    let data: String =
        ids.iter().map(|id| format!("{id}\t00000000-0000-0000-0000-{id:012}\t{}\n", id % 7)).collect();
    let mut counts = Vec::new();
    for client in [&s.via, &s.reference] {
        let copy = async {
            let sink = client.copy_in("COPY items (id, u, n) FROM STDIN").await?;
            futures_util::pin_mut!(sink);
            sink.send(bytes::Bytes::from(data.clone())).await?;
            sink.finish().await
        };
        let n = tokio::time::timeout(Duration::from_secs(20), copy).await.expect("COPY answered").unwrap();
        counts.push(n);
    }
    assert_eq!(counts, [8, 8], "COPY n");
    for id in ids {
        let shard = shards::partition_of(&s.reference, id).await;
        let here =
            s.shards[shard].query_one("SELECT count(*) FROM items WHERE id = $1", &[&id]).await.unwrap();
        assert_eq!(here.get::<_, i64>(0), 1, "id {id} on shard {shard}");
    }
    same_simple(&s, "SELECT id, u, n FROM items ORDER BY id").await;
    let bad = async {
        let sink = s.via.copy_in("COPY items (id, u, n) FROM STDIN").await?;
        futures_util::pin_mut!(sink);
        sink.send(bytes::Bytes::from_static(b"201\t00000000-0000-0000-0000-000000000201\t1\nx\ty\tz\n"))
            .await?;
        sink.finish().await
    };
    let e = tokio::time::timeout(Duration::from_secs(20), bad).await.expect("COPY answered").unwrap_err();
    assert!(common::sqlstate(&e).is_some(), "{e:?}");
    same_simple(&s, "SELECT id, u, n FROM items ORDER BY id").await;
    // Inside a transaction, the failed COPY fails it (25P02 until ROLLBACK), nothing kept.
    s.via.batch_execute("BEGIN").await.unwrap();
    let bad = async {
        let sink = s.via.copy_in("COPY items (id, u, n) FROM STDIN").await?;
        futures_util::pin_mut!(sink);
        sink.send(bytes::Bytes::from_static(b"301\t00000000-0000-0000-0000-000000000301\t1\nx\ty\tz\n"))
            .await?;
        sink.finish().await
    };
    tokio::time::timeout(Duration::from_secs(20), bad).await.expect("COPY answered").unwrap_err();
    let e = s.via.simple_query("SELECT 1").await.unwrap_err();
    assert_eq!(common::sqlstate(&e).as_deref(), Some("25P02"), "{e:?}");
    s.via.batch_execute("ROLLBACK").await.unwrap();
    same_simple(&s, "SELECT id, u, n FROM items ORDER BY id").await;
    s.proxy.stop().await;
    drop(s.c);
}
