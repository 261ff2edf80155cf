//! An UPDATE that changes a row's sharding key moves the row: after it the row is on exactly
//! the shard PostgreSQL's hash partitioning picks for its new key (each shard read
//! directly), in and out of explicit transactions, simple and extended protocol; a rollback
//! leaves it where it was; a conflict on the target fails the statement; what cannot be moved
//! exactly is refused with 0A000 and changes nothing.

mod common;

use common::raw::{self, RawConn};
use common::shards::partition_of;
use common::{TestProxy, DB, PASSWORD, USER};
use harness::Cluster;
use tokio_postgres::Client;

const SCHEMA: &str =
    "CREATE TABLE items (id bigint PRIMARY KEY, name text NOT NULL, qty int NOT NULL DEFAULT 0);
CREATE TABLE kinds (k int PRIMARY KEY, label text);
INSERT INTO kinds VALUES (1, 'one'), (2, 'two');
CREATE TABLE parts (id bigint NOT NULL, k int NOT NULL, note text, PRIMARY KEY (id, k)) PARTITION BY LIST (k);
CREATE TABLE parts_1 PARTITION OF parts FOR VALUES IN (1);
CREATE TABLE parts_2 PARTITION OF parts FOR VALUES IN (2);
CREATE TABLE gen (id bigint PRIMARY KEY, qty int NOT NULL, twice int GENERATED ALWAYS AS (qty * 2) STORED,
    seq bigint GENERATED ALWAYS AS IDENTITY, touched text DEFAULT 'no');
CREATE FUNCTION touch() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN NEW.touched := 'yes'; RETURN NEW; END $$;
CREATE TRIGGER gen_touch BEFORE UPDATE ON gen FOR EACH ROW EXECUTE FUNCTION touch();";

async fn direct(pg: &Cluster) -> Client {
    common::connect(&common::direct_conninfo(pg, USER, PASSWORD, DB)).await.expect("direct connection")
}

/// The shards holding a row with this id, read directly, with its name.
async fn holders(shards: &[Client], id: i64) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (i, s) in shards.iter().enumerate() {
        for r in s.query("SELECT name FROM items WHERE id = $1", &[&id]).await.expect("shard read") {
            out.push((i, r.get(0)));
        }
    }
    out
}

/// An id above `from` whose shard differs from `from`'s.
async fn elsewhere(reference: &Client, from: i64) -> i64 {
    let home = partition_of(reference, from).await;
    let mut id = from + 1000;
    while partition_of(reference, id).await == home {
        id += 1;
    }
    id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_updates_move_rows_between_shards() {
    let c = common::shards::start(SCHEMA);
    let proxy = TestProxy::start_toml(&common::shards::config(&c, &["items", "parts", "gen"])).await;
    let via = proxy.connect(USER, PASSWORD, DB).await;
    let reference = direct(&c.reference).await;
    let mut shards = Vec::new();
    for s in &c.shards {
        shards.push(direct(s).await);
    }
    for id in 1..=40i64 {
        via.execute("INSERT INTO items (id, name, qty) VALUES ($1, $2, 1)", &[&id, &format!("n{id}")])
            .await
            .expect("insert");
    }

    // Autocommit, simple protocol: the row is on its new key's shard only.
    let to = elsewhere(&reference, 3).await;
    let done = via.simple_query(&format!("UPDATE items SET id = {to} WHERE id = 3")).await.expect("move");
    assert!(matches!(done.last(), Some(tokio_postgres::SimpleQueryMessage::CommandComplete(1))));
    assert_eq!(holders(&shards, to).await, vec![(partition_of(&reference, to).await, "n3".to_owned())]);
    assert!(holders(&shards, 3).await.is_empty());
    let found: String = via
        .query_one("SELECT name FROM items WHERE id = $1", &[&to])
        .await
        .expect("found by its new key")
        .get(0);
    assert_eq!(found, "n3");

    // Rolled back: it stays where it was.
    let before = holders(&shards, 4).await;
    let to = elsewhere(&reference, 4).await;
    via.batch_execute("BEGIN").await.expect("begin");
    via.execute("UPDATE items SET id = $2 WHERE id = $1", &[&4i64, &to]).await.expect("move in tx");
    let seen = via.query("SELECT name FROM items WHERE id = $1", &[&to]).await.expect("read in tx");
    assert_eq!(seen.len(), 1, "the transaction sees the moved row by its new key");
    via.batch_execute("ROLLBACK").await.expect("rollback");
    assert_eq!(holders(&shards, 4).await, before);
    assert!(holders(&shards, to).await.is_empty());

    // Committed in an explicit transaction, extended protocol, then changed again there.
    let to = elsewhere(&reference, 5).await;
    via.batch_execute("BEGIN").await.expect("begin");
    let rows = via
        .query("UPDATE items SET id = $2, qty = qty + 1 WHERE id = $1 RETURNING id, qty", &[&5i64, &to])
        .await
        .expect("move with RETURNING");
    assert_eq!(rows.len(), 1);
    assert_eq!((rows[0].get::<_, i64>(0), rows[0].get::<_, i32>(1)), (to, 2));
    via.execute("UPDATE items SET name = 'again' WHERE id = $1", &[&to]).await.expect("update moved row");
    via.batch_execute("COMMIT").await.expect("commit");
    assert_eq!(holders(&shards, to).await, vec![(partition_of(&reference, to).await, "again".to_owned())]);
    assert!(holders(&shards, 5).await.is_empty());

    // Several rows from every shard at once (no key condition).
    let moved = via
        .execute("UPDATE items SET id = id + 500000 WHERE id BETWEEN 10 AND 19", &[])
        .await
        .expect("move many");
    assert_eq!(moved, 10);
    for id in 500010..=500019i64 {
        let want = partition_of(&reference, id).await;
        let got = holders(&shards, id).await;
        assert_eq!(got.len(), 1, "id {id}");
        assert_eq!(got[0].0, want, "id {id}");
    }

    // A key that exists on the target shard: PostgreSQL's unique violation, nothing moved.
    let target = elsewhere(&reference, 6).await;
    via.execute("INSERT INTO items (id, name) VALUES ($1, 'taken')", &[&target]).await.expect("occupy");
    let err =
        via.execute("UPDATE items SET id = $2 WHERE id = $1", &[&6i64, &target]).await.expect_err("conflict");
    assert_eq!(common::sqlstate(&err).as_deref(), Some("23505"), "{err:?}");
    assert_eq!(holders(&shards, 6).await.len(), 1);
    assert_eq!(holders(&shards, target).await.iter().map(|h| h.1.as_str()).collect::<Vec<_>>(), ["taken"]);

    // What cannot be moved exactly is refused, naming the table, and changes nothing.
    let err = via
        .simple_query(
            "UPDATE items SET id = items.id + k.k * 1000 FROM kinds k WHERE items.id = 7 AND k.k = 1",
        )
        .await
        .expect_err("UPDATE ... FROM");
    assert_eq!(common::sqlstate(&err).as_deref(), Some("0A000"));
    let message = err.as_db_error().map(|e| e.message().to_owned()).unwrap_or_default();
    assert!(message.contains("items") && message.contains("FROM"), "{message}");
    assert_eq!(holders(&shards, 7).await.len(), 1);
    let err = via
        .execute("UPDATE items SET id = (SELECT max(id) FROM items) + 1 WHERE id = $1", &[&7i64])
        .await
        .expect_err("subquery in SET");
    assert_eq!(common::sqlstate(&err).as_deref(), Some("0A000"));
    assert_eq!(holders(&shards, 7).await.len(), 1);

    // A savepoint rolled back undoes the move on every shard, the later-joined one included.
    let before = holders(&shards, 8).await;
    let to = elsewhere(&reference, 8).await;
    via.batch_execute("BEGIN; SAVEPOINT s").await.expect("savepoint");
    via.execute("UPDATE items SET id = $2 WHERE id = $1", &[&8i64, &to]).await.expect("move under savepoint");
    via.batch_execute("ROLLBACK TO SAVEPOINT s; COMMIT").await.expect("rollback to");
    assert_eq!(holders(&shards, 8).await, before);
    assert!(holders(&shards, to).await.is_empty());

    // Extended protocol messages as a driver may send them: a Describe of the portal of a key
    // update without RETURNING gets NoData, with RETURNING its own columns only.
    let mut raw = RawConn::login(proxy.addr, USER, PASSWORD, DB).await.expect("raw login");
    let to = elsewhere(&reference, 9).await;
    let mut out = raw::parse("", "UPDATE items SET id = $2::bigint WHERE id = $1::bigint");
    out.extend(raw::bind("", "", &[Some("9"), Some(&to.to_string())]));
    out.extend(raw::describe_portal(""));
    out.extend(raw::execute("", 0));
    out.extend(raw::sync());
    raw.send(&out).await;
    let tags: Vec<u8> = raw.until_ready().await.iter().map(|m| m.tag).collect();
    assert_eq!(tags, b"12nCZ", "{:?}", String::from_utf8_lossy(&tags));
    assert_eq!(holders(&shards, to).await.len(), 1);
    let back = 9i64;
    let mut out =
        raw::parse("k", "UPDATE items SET id = $2::bigint WHERE id = $1::bigint RETURNING id, name");
    out.extend(raw::describe_statement("k"));
    out.extend(raw::bind("", "k", &[Some(&to.to_string()), Some(&back.to_string())]));
    out.extend(raw::describe_portal(""));
    out.extend(raw::execute("", 0));
    out.extend(raw::sync());
    raw.send(&out).await;
    let reply = raw.until_ready().await;
    let tags: Vec<u8> = reply.iter().map(|m| m.tag).collect();
    assert_eq!(tags, b"1tT2TDCZ", "{:?}", String::from_utf8_lossy(&tags));
    for m in reply.iter().filter(|m| m.tag == b'T') {
        assert_eq!(&m.body[..2], &2i16.to_be_bytes(), "two columns described");
    }
    let row = reply.iter().find(|m| m.tag == b'D').expect("row");
    assert_eq!(&row.body[..2], &2i16.to_be_bytes(), "two columns returned");
    assert_eq!(holders(&shards, back).await, vec![(partition_of(&reference, back).await, "n9".to_owned())]);

    // A table partitioned on each shard: the same ctid in two partitions; only the updated
    // row moves.
    let a = 41i64;
    let home = partition_of(&reference, a).await;
    let mut b = a + 1;
    while partition_of(&reference, b).await != home {
        b += 1;
    }
    via.execute("INSERT INTO parts (id, k, note) VALUES ($1, 1, 'a')", &[&a]).await.expect("row in parts_1");
    via.execute("INSERT INTO parts (id, k, note) VALUES ($1, 2, 'b')", &[&b]).await.expect("row in parts_2");
    let ctids: Vec<String> = shards[home]
        .query("SELECT ctid::text FROM parts ORDER BY id", &[])
        .await
        .expect("ctids")
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(ctids, ["(0,1)", "(0,1)"], "both rows first in their partitions");
    let to = elsewhere(&reference, a).await;
    via.execute("UPDATE parts SET id = $2 WHERE id = $1", &[&a, &to]).await.expect("move in parts");
    let left: Vec<i64> = shards[home]
        .query("SELECT id FROM parts", &[])
        .await
        .expect("left")
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(left, [b]);
    let there = &shards[partition_of(&reference, to).await];
    let moved: String = there
        .query_one("SELECT note FROM parts_1 WHERE id = $1", &[&to])
        .await
        .expect("moved row in its partition")
        .get(0);
    assert_eq!(moved, "a");

    // Generated and identity columns, a BEFORE UPDATE trigger: the moved row is the row
    // PostgreSQL's UPDATE made (trigger applied, generated column computed, identity kept).
    via.execute("INSERT INTO gen (id, qty) VALUES (50, 3)", &[]).await.expect("gen row");
    let seq: i64 = via.query_one("SELECT seq FROM gen WHERE id = 50", &[]).await.expect("seq").get(0);
    let to = elsewhere(&reference, 50).await;
    let row = via
        .query_one(
            "UPDATE gen SET id = $1, qty = qty + 1 WHERE id = 50 RETURNING id, twice, seq, touched",
            &[&to],
        )
        .await
        .expect("move a row with generated columns");
    assert_eq!(
        (row.get::<_, i64>(0), row.get::<_, i32>(1), row.get::<_, i64>(2), row.get::<_, String>(3)),
        (to, 8, seq, "yes".to_owned())
    );
    let there = &shards[partition_of(&reference, to).await];
    let stored = there
        .query_one("SELECT twice, seq, touched FROM gen WHERE id = $1", &[&to])
        .await
        .expect("moved gen row");
    assert_eq!(
        (stored.get::<_, i32>(0), stored.get::<_, i64>(1), stored.get::<_, String>(2)),
        (8, seq, "yes".to_owned())
    );

    // Cost (reported, not asserted: a shared machine): autocommit key updates that move a
    // row each, against updates of another column of the same rows.
    for id in 100..300i64 {
        via.execute("INSERT INTO items (id, name) VALUES ($1, 'bench')", &[&id]).await.expect("bench row");
    }
    let t = std::time::Instant::now();
    for id in 100..300i64 {
        via.execute("UPDATE items SET qty = qty + 1 WHERE id = $1", &[&id]).await.expect("plain update");
    }
    let plain = t.elapsed();
    let t = std::time::Instant::now();
    let mut moved = 0;
    for id in 100..300i64 {
        moved += via
            .execute("UPDATE items SET id = id + 1000000 WHERE id = $1", &[&id])
            .await
            .expect("key update");
    }
    let keyed = t.elapsed();
    assert_eq!(moved, 200);
    eprintln!("200 autocommit updates: other column {plain:?}, key (moving or not) {keyed:?}");

    // No prepared transaction left anywhere.
    for s in &shards {
        let n: i64 =
            s.query_one("SELECT count(*) FROM pg_prepared_xacts", &[]).await.expect("prepared xacts").get(0);
        assert_eq!(n, 0);
    }
    proxy.stop().await;
}
