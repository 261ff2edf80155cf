//! Writes whose shards pgvia cannot tell exactly are refused with 0A000 and change nothing
//! on any shard (each shard read directly), where they used to run on every shard or on the
//! outer statement's shard only; the forms pgvia can place still run and leave the rows
//! PostgreSQL leaves in one plain database holding them all (the reference). COPY text rows
//! whose keys are written with escapes land on the shard PostgreSQL's own hash partitioning
//! picks for the key as PostgreSQL's COPY decodes it.

mod common;

use common::shards::{self, partition_of, ShardClusters};
use common::{assert_success, direct_conninfo, psql, text, TestProxy, DB, PASSWORD, USER};
use tokio_postgres::{Client, SimpleQueryMessage};

const SCHEMA: &str = "CREATE TABLE users (id bigint PRIMARY KEY, n text NOT NULL);";

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
    let proxy = TestProxy::start_toml(&shards::config(&c, &["users"])).await;
    let via = proxy.connect(USER, PASSWORD, DB).await;
    let reference = direct(&c.reference).await;
    let mut shards = Vec::new();
    for s in &c.shards {
        shards.push(direct(s).await);
    }
    Setup { c, proxy, via, reference, shards }
}

/// Every row of `users` on every shard, read directly: (shard, id, n), sorted.
async fn everywhere(shards: &[Client]) -> Vec<(usize, i64, String)> {
    let mut out = Vec::new();
    for (i, s) in shards.iter().enumerate() {
        for r in s.query("SELECT id, n FROM users", &[]).await.expect("shard read") {
            out.push((i, r.get(0), r.get(1)));
        }
    }
    out.sort();
    out
}

/// The rows of `users` in the reference, sorted.
async fn reference_rows(reference: &Client) -> Vec<(i64, String)> {
    let rows = reference.query("SELECT id, n FROM users ORDER BY id", &[]).await.expect("reference read");
    rows.iter().map(|r| (r.get(0), r.get(1))).collect()
}

/// The shards hold exactly the reference's rows, each on the shard of its key.
async fn same_as_reference(s: &Setup) {
    let mut want = Vec::new();
    for (id, n) in reference_rows(&s.reference).await {
        want.push((partition_of(&s.reference, id).await, id, n));
    }
    want.sort();
    assert_eq!(everywhere(&s.shards).await, want);
}

/// Runs `sql` through pgvia and on the reference; both give the same command tag.
async fn both(s: &Setup, sql: &str) -> String {
    let tag = |m: Vec<SimpleQueryMessage>| {
        m.iter()
            .find_map(|m| match m {
                SimpleQueryMessage::CommandComplete(n) => Some(n.to_string()),
                _ => None,
            })
            .unwrap_or_default()
    };
    let via = tag(s.via.simple_query(sql).await.unwrap_or_else(|e| panic!("{sql} through pgvia: {e:?}")));
    let direct =
        tag(s.reference.simple_query(sql).await.unwrap_or_else(|e| panic!("{sql} on the reference: {e:?}")));
    assert_eq!(via, direct, "{sql}: rows affected");
    via
}

/// `sql` through pgvia fails with 0A000 and a message naming `words`; no shard changed.
async fn refused(s: &Setup, sql: &str, words: &[&str]) {
    let before = everywhere(&s.shards).await;
    let err = s.via.simple_query(sql).await.expect_err(sql);
    assert_eq!(common::sqlstate(&err).as_deref(), Some("0A000"), "{sql}: {err:?}");
    let message = err.as_db_error().map(|e| e.message().to_owned()).unwrap_or_default();
    for w in words {
        assert!(message.contains(w), "{sql}: message {message:?} should name {w:?}");
    }
    assert_eq!(everywhere(&s.shards).await, before, "{sql} changed rows");
}

async fn seed(s: &Setup, ids: &[i64]) {
    for id in ids {
        both(s, &format!("INSERT INTO users (id, n) VALUES ({id}, 'n{id}')")).await;
    }
}

/// Issue 33 item 5: `MERGE ... WHEN NOT MATCHED THEN INSERT` inserted the row once per shard.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn merge_that_inserts_is_refused_not_run_on_every_shard() {
    let s = setup().await;
    seed(&s, &[1, 2, 3, 4, 5, 6]).await;
    let merge_insert = "MERGE INTO users u USING (VALUES (50::bigint, 'm')) v(id, n) ON u.id = v.id \
         WHEN MATCHED THEN UPDATE SET n = v.n WHEN NOT MATCHED THEN INSERT VALUES (v.id, v.n)";
    refused(&s, merge_insert, &["MERGE", "NOT MATCHED", "INSERT", "users"]).await;
    refused(
        &s,
        "MERGE INTO users u USING (VALUES (3::bigint)) v(id) ON u.id = v.id WHEN MATCHED THEN UPDATE SET id = 300",
        &["MERGE", "users"],
    )
    .await;
    // What every shard can do for its own rows still runs, as on one PostgreSQL.
    let tag = both(
        &s,
        "MERGE INTO users u USING (VALUES (2::bigint, 'two'), (5, 'five'), (77, 'none')) v(id, n) ON u.id = v.id \
         WHEN MATCHED AND v.id = 5 THEN DELETE WHEN MATCHED THEN UPDATE SET n = v.n",
    )
    .await;
    assert_eq!(tag, "2");
    same_as_reference(&s).await;
    s.proxy.stop().await;
    drop(s.c);
}

/// Issue 33 item 6: a writing CTE whose key lives on another shard than the outer
/// statement's ran only on the outer statement's shard (the DELETE deleted nothing). Writes
/// inside a statement now run only when their own key conditions and the statement's put
/// them all on one shard.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writing_cte_is_refused_not_run_on_the_outer_statements_shard() {
    let s = setup().await;
    let a = 8i64;
    let mut b = 12i64;
    while partition_of(&s.reference, b).await == partition_of(&s.reference, a).await {
        b += 1;
    }
    let mut c = a + 1;
    while partition_of(&s.reference, c).await != partition_of(&s.reference, a).await {
        c += 1;
    }
    seed(&s, &[a, b, c]).await;
    refused(
        &s,
        &format!("WITH d AS (DELETE FROM users WHERE id = {b} RETURNING *) UPDATE users SET n = 'z' WHERE id = {a}"),
        &["WITH", "users", "one shard"],
    )
    .await;
    refused(
        &s,
        &format!(
            "WITH u AS (UPDATE users SET n = 'w' WHERE id IN ({a}, {b}) RETURNING id) SELECT count(*) FROM u"
        ),
        &["WITH", "users"],
    )
    .await;
    refused(&s, "WITH d AS (DELETE FROM users WHERE n = 'x' RETURNING id) SELECT id FROM d", &["users"])
        .await;
    refused(
        &s,
        &format!("WITH u AS (UPDATE users SET id = 500 WHERE id = {a} RETURNING id) SELECT id FROM u"),
        &["users", "key"],
    )
    .await;
    // An INSERT in a CTE ran on every shard; an UPDATE in a CTE of a SELECT read by key.
    refused(&s, "WITH i AS (INSERT INTO users VALUES (100, 'x') RETURNING id) SELECT id FROM i", &["users"])
        .await;
    refused(
        &s,
        &format!("WITH u AS (UPDATE users SET n = 'y' WHERE id = {b} RETURNING id) SELECT n FROM users WHERE id = {a}"),
        &["users"],
    )
    .await;
    refused(
        &s,
        &format!("WITH d AS (DELETE FROM users WHERE id = {b} RETURNING id) INSERT INTO users SELECT id + 1000, 'c' FROM d"),
        &["users"],
    )
    .await;
    refused(&s, "EXPLAIN ANALYZE INSERT INTO users VALUES (101, 'e')", &["EXPLAIN ANALYZE", "users"]).await;
    refused(
        &s,
        "COPY (INSERT INTO users (id, n) VALUES (102, 'c') RETURNING id) TO STDOUT",
        &["COPY", "users"],
    )
    .await;
    // Writes inside proven by their keys to be on the outer statement's one shard run there,
    // as on one PostgreSQL.
    let tag = both(
        &s,
        &format!("WITH d AS (DELETE FROM users WHERE id = {c} RETURNING *) UPDATE users SET n = 'z' WHERE id = {a}"),
    )
    .await;
    assert_eq!(tag, "1");
    both(&s, &format!("WITH u AS (UPDATE users SET n = 'u' WHERE id = {b} RETURNING id) SELECT id FROM u"))
        .await;
    both(&s, &format!("WITH d AS (DELETE FROM users WHERE id = {b} RETURNING id) SELECT count(*) FROM d"))
        .await;
    same_as_reference(&s).await;
    s.proxy.stop().await;
    drop(s.c);
}

/// Issue 33 item 7: `ON CONFLICT (id) DO UPDATE SET id = 99` left key 99 on key 5's shard.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upsert_that_changes_the_key_is_refused() {
    let s = setup().await;
    let mut other = 99i64;
    while partition_of(&s.reference, other).await == partition_of(&s.reference, 5).await {
        other += 1;
    }
    seed(&s, &[5]).await;
    for set in [
        format!("id = {other}"),
        "id = users.id + 1".to_owned(),
        "(id, n) = (EXCLUDED.id + 1, 'm')".to_owned(),
        "n = 'k', id = EXCLUDED.id * 2".to_owned(),
    ] {
        refused(
            &s,
            &format!("INSERT INTO users (id, n) VALUES (5, 'b') ON CONFLICT (id) DO UPDATE SET {set}"),
            &["ON CONFLICT", "users"],
        )
        .await;
    }
    // Setting the key to itself keeps the row where it is: allowed, as on one PostgreSQL.
    for set in ["n = EXCLUDED.n", "id = EXCLUDED.id, n = 'c'", "id = users.id, n = users.n || '!'"] {
        both(&s, &format!("INSERT INTO users (id, n) VALUES (5, 'b') ON CONFLICT (id) DO UPDATE SET {set}"))
            .await;
    }
    both(
        &s,
        &format!(
            "INSERT INTO users AS t (id, n) VALUES ({other}, 'o') ON CONFLICT (id) DO UPDATE SET id = t.id"
        ),
    )
    .await;
    same_as_reference(&s).await;
    s.proxy.stop().await;
    drop(s.c);
}

/// Issue 33 item 9: text rows with escapes in the key (`\x31`) were refused by the splitter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_text_keys_are_decoded_as_postgresql_does() {
    let s = setup().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("rows.txt");
    // Keys in hex, octal, mixed with digits, a sign, control escapes in other fields, an
    // escaped delimiter, the NULL marker decoded (`\116` is "N", not NULL), and (before
    // PostgreSQL 18, which refuses a marker that is not alone on its line) the end-of-data
    // marker after the last row's data (what follows is not data).
    let version: i32 = s
        .reference
        .query_one("SELECT current_setting('server_version_num')::int", &[])
        .await
        .expect("server version")
        .get(0);
    let last =
        if version < 180000 { "2\\x32\tthe last\\.\n23\tafter the marker\n" } else { "2\\x32\tthe last\n" };
    let rows = format!(
        "\\x31\thex one\n\\x312\thex two digits then 2\n\\061\\063\toctal 13\n\\0614\toctal then 4\n\
         1\\x35\tdigit then hex\n\\x2d16\tminus sixteen\n+\\x31\\x37\tplus seventeen\n\
         \\62\\60\ttab\\there\\\\ and \\\tescaped delimiter\n21\t\\116\\x55LL\n{last}"
    );
    std::fs::write(&file, rows).expect("write rows");
    let cmd = format!("\\copy users from '{}'", file.display());
    let via = s.proxy.conninfo(USER, PASSWORD, DB);
    let out = psql(&s.c.reference, &via, &["-v", "ON_ERROR_STOP=1", "-c", &cmd], None).await;
    assert_success(&cmd, &out);
    let reference = direct_conninfo(&s.c.reference, USER, PASSWORD, DB);
    let direct = psql(&s.c.reference, &reference, &["-v", "ON_ERROR_STOP=1", "-c", &cmd], None).await;
    assert_success("the same COPY on the reference", &direct);
    assert_eq!(text(&out.stdout).trim(), text(&direct.stdout).trim(), "rows copied");
    let ids: Vec<i64> = reference_rows(&s.reference).await.iter().map(|r| r.0).collect();
    assert_eq!(ids, [-16, 1, 12, 13, 14, 15, 17, 20, 21, 22]);
    same_as_reference(&s).await;

    // CSV: quoted keys, a doubled quote and escapes that are data, as PostgreSQL reads them.
    let csv = dir.path().join("rows.csv");
    let cmd = format!("\\copy users from '{}' with (format csv)", csv.display());
    std::fs::write(&csv, "\"30\",\"a,b\"\n3\"1\",partly quoted\n32,\"\\x31\"\n\"3\"\"3\",no\n").expect("csv");
    let out = psql(&s.c.reference, &via, &["-c", &cmd], None).await;
    let direct = psql(&s.c.reference, &reference, &["-c", &cmd], None).await;
    assert!(!out.status.success() && !direct.status.success(), "3\"3 is not a bigint for either");
    std::fs::write(&csv, "\"30\",\"a,b\"\n3\"1\",partly quoted\n32,\"\\x31\"\n").expect("csv");
    let out = psql(&s.c.reference, &via, &["-v", "ON_ERROR_STOP=1", "-c", &cmd], None).await;
    assert_success(&cmd, &out);
    let direct = psql(&s.c.reference, &reference, &["-v", "ON_ERROR_STOP=1", "-c", &cmd], None).await;
    assert_success("the same CSV COPY on the reference", &direct);
    same_as_reference(&s).await;
    s.proxy.stop().await;
    drop(s.c);
}
