//! A statement that fails on one shard of a fan-out, at any point of the combine (before any
//! row, mid-stream, while the merge sorts, while it spills, in a grouping), answers with the
//! error the reference gives, in bounded time; the same connection then runs the next
//! statement (inside a transaction block: 25P02 until ROLLBACK, as PostgreSQL does), and no
//! shard keeps a backend of pgvia's busy. A client's cancel and the admin console's
//! `KILL_CLIENT` end a sharded statement within a second. Four real shards and a reference
//! holding every row; simple and extended protocol.

#![allow(clippy::unwrap_used)]

mod common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::shards::{self, ShardClusters};
use common::{TestProxy, DB, PASSWORD, USER};
use tokio_postgres::{Client, NoTls, SimpleQueryMessage};

const SCHEMA: &str = "CREATE TABLE t (id bigint PRIMARY KEY, k bigint NOT NULL, g int NOT NULL);
CREATE TABLE place (id bigint) PARTITION BY HASH (id);";

/// Rows 1..=`rows` (`k = id`, `g = id % 1000`) and one row whose `abs(k)` overflows (id 0,
/// k = i64::MIN): on the reference all, on each shard those PostgreSQL's hash partitioning
/// gives it. Index scans are preferred over sorts everywhere, so `ORDER BY id` streams and a
/// value computed per row fails after rows went out, on the shards as on the reference.
fn load(c: &ShardClusters, rows: u64) {
    let select = format!(
        "SELECT i, CASE WHEN i = 0 THEN -9223372036854775808 ELSE i END, (i % 1000)::int \
         FROM generate_series(0, {rows}::bigint) i"
    );
    let tune = "ALTER DATABASE app SET enable_sort = off; ALTER DATABASE app SET enable_bitmapscan = off;";
    std::thread::scope(|scope| {
        for (r, shard) in c.shards.iter().enumerate() {
            let sql = format!(
                "CREATE TABLE place_{r} PARTITION OF place FOR VALUES WITH (MODULUS 4, REMAINDER {r});
                 INSERT INTO t {select} WHERE satisfies_hash_partition('place'::regclass, 4, {r}, i);
                 ANALYZE t; {tune}"
            );
            scope.spawn(move || shard.psql(DB, &sql).expect("load a shard"));
        }
        c.reference
            .psql(DB, &format!("INSERT INTO t {select}; ANALYZE t; {tune}"))
            .expect("load the reference");
    });
}

fn spill_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sharding-failures-spill-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Spill files in the process spill directories under `dir`.
fn spill_files(dir: &std::path::Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| std::fs::read_dir(e.path()).ok())
        .flat_map(|files| files.filter_map(Result::ok))
        .filter(|f| f.file_name().to_string_lossy().ends_with(".spill"))
        .count()
}

async fn direct(pg: &harness::Cluster) -> Client {
    common::connect(&common::direct_conninfo(pg, USER, PASSWORD, DB)).await.unwrap()
}

/// A statement's answer: its rows as text, or its SQLSTATE.
type Answer = Result<Vec<Vec<Option<String>>>, String>;

/// Bounds every statement: a hang fails the test instead of blocking it.
const BOUND: Duration = Duration::from_secs(20);

async fn simple(client: &Client, sql: &str) -> Answer {
    let run = client.simple_query(sql);
    let messages =
        tokio::time::timeout(BOUND, run).await.unwrap_or_else(|_| panic!("no answer in {BOUND:?}: {sql}"));
    let messages = messages.map_err(|e| common::sqlstate(&e).unwrap_or_else(|| e.to_string()))?;
    Ok(messages
        .into_iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(r) => Some((0..r.len()).map(|i| r.get(i).map(str::to_owned)).collect()),
            _ => None,
        })
        .collect())
}

/// The extended protocol; values as text, as the simple protocol has them.
async fn extended(client: &Client, sql: &str) -> Answer {
    use tokio_postgres::types::Type;
    let run = client.query(sql, &[]);
    let rows =
        tokio::time::timeout(BOUND, run).await.unwrap_or_else(|_| panic!("no answer in {BOUND:?}: {sql}"));
    let rows = rows.map_err(|e| common::sqlstate(&e).unwrap_or_else(|| e.to_string()))?;
    let text = |r: &tokio_postgres::Row, i: usize| match *r.columns()[i].type_() {
        Type::INT8 => r.get::<_, Option<i64>>(i).map(|v| v.to_string()),
        Type::INT4 => r.get::<_, Option<i32>>(i).map(|v| v.to_string()),
        _ => r.get::<_, Option<String>>(i),
    };
    Ok(rows.iter().map(|r| (0..r.len()).map(|i| text(r, i)).collect()).collect())
}

async fn answer(client: &Client, protocol: &str, sql: &str) -> Answer {
    match protocol {
        "simple" => simple(client, sql).await,
        _ => extended(client, sql).await,
    }
}

/// Waits up to 3 s until no shard has a backend of `USER` other than `own` connections that
/// is running something or idle inside a transaction.
async fn assert_shards_quiet(checks: &[Client], what: &str) {
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let mut busy = Vec::new();
        for (i, check) in checks.iter().enumerate() {
            let rows = check
                .query(
                    "SELECT state, coalesce(query, '') FROM pg_stat_activity \
                     WHERE usename = $1 AND pid <> pg_backend_pid() AND state IS DISTINCT FROM 'idle'",
                    &[&USER],
                )
                .await
                .unwrap();
            for r in rows {
                busy.push(format!("shard {i}: {} {}", r.get::<_, String>(0), r.get::<_, String>(1)));
            }
        }
        if busy.is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "{what}: shards still busy for pgvia: {busy:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The failing statements, each with the point of the combine it fails at.
fn failing() -> Vec<(&'static str, &'static str)> {
    vec![
        // The shard holding k = i64::MIN fails while it sorts, before any row; the others'
        // rows wait in the merge for that shard's first row.
        ("ORDER BY, error before any row", "SELECT abs(k) FROM t ORDER BY 1"),
        ("no ORDER BY, error before any row", "SELECT abs(k) FROM t"),
        // Index scans stream: rows up to id 15000 go out, then the shard holding 15000 fails.
        ("ORDER BY, error mid-stream", "SELECT id, 1 / (id - 15000) FROM t ORDER BY id"),
        // The merge's own sort (after grouping), with the failing shard late.
        (
            "sort of a grouping, error late",
            "SELECT g, count(*) FROM t \
             WHERE CASE WHEN id = 15000 THEN length(pg_sleep(0.3)::text) / 0 ELSE 1 END = 1 \
             GROUP BY g ORDER BY count(*), g",
        ),
        ("GROUP BY aggregate, error", "SELECT g, sum(1 / (id - 15000)) FROM t GROUP BY g"),
        (
            "DISTINCT with a large ORDER BY, error late",
            "SELECT DISTINCT id, k FROM t \
             WHERE CASE WHEN id = 17000 THEN length(pg_sleep(0.3)::text) / 0 ELSE 1 END = 1 ORDER BY 1",
        ),
    ]
}

async fn errors_then_usable(c: &ShardClusters, proxy: &TestProxy, cases: &[(&str, &str)]) {
    let reference = direct(&c.reference).await;
    let mut checks = Vec::new();
    for s in &c.shards {
        checks.push(direct(s).await);
    }
    let through = proxy.connect(USER, PASSWORD, DB).await;
    let after = "SELECT count(*), sum(g) FROM t";
    let want_after = simple(&reference, after).await;
    assert!(want_after.is_ok());
    for &(what, sql) in cases {
        for protocol in ["simple", "extended"] {
            let want = answer(&reference, protocol, sql).await;
            let code = want.clone().expect_err(&format!("the reference answered {what}"));
            let start = Instant::now();
            let got = answer(&through, protocol, sql).await;
            assert_eq!(got.err(), Some(code.clone()), "{protocol}, {what}: {sql}");
            println!("{protocol}, {what}: {code} in {:?}", start.elapsed());
            assert_eq!(simple(&through, after).await, want_after, "{protocol}, after {what}");
            assert_shards_quiet(&checks, &format!("{protocol}, after {what}")).await;

            // Inside a transaction block the transaction is failed, as on the reference.
            for client in [&reference, &through] {
                simple(client, "BEGIN").await.unwrap();
            }
            assert_eq!(
                answer(&through, protocol, sql).await.err(),
                Some(code.clone()),
                "{protocol}, in a transaction, {what}"
            );
            assert_eq!(simple(&reference, sql).await.err(), Some(code.clone()));
            let next_want = simple(&reference, after).await;
            assert_eq!(next_want.clone().err().as_deref(), Some("25P02"));
            assert_eq!(
                simple(&through, after).await,
                next_want,
                "{protocol}, in a failed transaction, {what}"
            );
            for client in [&reference, &through] {
                simple(client, "ROLLBACK").await.unwrap();
            }
            assert_eq!(simple(&through, after).await, want_after, "{protocol}, after ROLLBACK, {what}");
            assert_shards_quiet(&checks, &format!("{protocol}, after the transaction, {what}")).await;
        }
    }
    drop(through);
    proxy.assert_no_leaks().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_on_one_shard_is_the_answer_at_any_point_of_the_merge() {
    let c = shards::start(SCHEMA);
    load(&c, 20_000);
    let proxy = TestProxy::start_toml(&shards::config(&c, &["t"])).await;
    errors_then_usable(&c, &proxy, &failing()).await;
}

/// The same failures with a merge budget of 256 KiB: the groupings and sorts spill to files
/// before the error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_on_one_shard_during_a_spill_is_the_answer() {
    let c = shards::start(SCHEMA);
    load(&c, 20_000);
    let dir = spill_dir();
    let toml = shards::config_with(&c, &["t"], |b| {
        b.limits("merge_memory_budget = 262144").limits(&format!("merge_spill_dir = \"{}\"", dir.display()))
    });
    let proxy = TestProxy::start_toml(&toml).await;
    let spilling = [(
        "spilled grouping sorted, error late",
        "SELECT id, count(*) FROM t \
         WHERE CASE WHEN id = 15000 THEN length(pg_sleep(0.3)::text) / 0 ELSE 1 END = 1 \
         GROUP BY id ORDER BY count(*), id",
    )];
    // Spill files are looked for while the statements run: the error must come mid-spill.
    let seen = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watch = {
        let (seen, stop, dir) = (seen.clone(), stop.clone(), dir.clone());
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                if spill_files(&dir) > 0 {
                    seen.store(true, std::sync::atomic::Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        })
    };
    errors_then_usable(&c, &proxy, &spilling).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    watch.join().unwrap();
    assert!(seen.load(std::sync::atomic::Ordering::Relaxed), "the failing statements spilled nothing");
    assert_eq!(spill_files(&dir), 0, "spill files left after the errors");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Statements sleeping on every shard: before the first row, with no merge, and late in a
/// streaming ORDER BY and in a grouping sorted by pgvia.
const SLOW: [&str; 4] = [
    "SELECT id, pg_sleep(10)::text FROM t WHERE id <= 8 ORDER BY id",
    "SELECT pg_sleep(10)::text FROM t WHERE id <= 8",
    "SELECT id, CASE WHEN id % 500 = 0 THEN pg_sleep(10)::text END AS slept FROM t ORDER BY id",
    "SELECT g, count(*) FROM t WHERE CASE WHEN id > 1990 THEN pg_sleep(10) IS NULL ELSE true END GROUP BY g ORDER BY 2, 1",
];

async fn start_small() -> (ShardClusters, TestProxy, Vec<Client>) {
    let c = shards::start(SCHEMA);
    load(&c, 2_000);
    let proxy = TestProxy::start_toml(&shards::config(&c, &["t"])).await;
    let mut checks = Vec::new();
    for s in &c.shards {
        checks.push(direct(s).await);
    }
    (c, proxy, checks)
}

/// The client's cancel ends a statement running on every shard with 57014 within a second,
/// at any point of its merge, and no shard keeps running it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_ends_a_sharded_statement_within_a_second() {
    let (_c, proxy, checks) = start_small().await;
    for sql in SLOW {
        for protocol in ["simple", "extended"] {
            let client = proxy.connect(USER, PASSWORD, DB).await;
            let token = client.cancel_token();
            let task = tokio::spawn(async move { answer(&client, protocol, sql).await.map(|_| ()) });
            tokio::time::sleep(Duration::from_millis(500)).await;
            let start = Instant::now();
            token.cancel_query(NoTls).await.unwrap();
            let ended = tokio::time::timeout(Duration::from_secs(5), task).await;
            let took = start.elapsed();
            let got = ended.unwrap_or_else(|_| panic!("{protocol}: the cancel did not end {sql}")).unwrap();
            assert_eq!(got.err().as_deref(), Some("57014"), "{protocol}: {sql}");
            assert!(took < Duration::from_secs(1), "{protocol}: the cancel took {took:?}: {sql}");
            assert_shards_quiet(&checks, &format!("{protocol}, after a cancel of {sql}")).await;
        }
    }
    proxy.assert_no_leaks().await;
}

/// `KILL_CLIENT` while a sharded statement runs: the session ends within a second and the
/// shards stop running its statement.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_client_ends_a_sharded_session_within_a_second() {
    let (c, proxy, checks) = start_small().await;
    for sql in SLOW {
        for protocol in ["simple", "extended"] {
            let client = proxy.connect(USER, PASSWORD, DB).await;
            let task = tokio::spawn(async move { answer(&client, protocol, sql).await.map(|_| ()) });
            tokio::time::sleep(Duration::from_millis(500)).await;
            let clients = common::ops::console(&c.reference, &proxy, "SHOW CLIENTS").await;
            let user = clients.col("user");
            let ids: Vec<String> = clients
                .rows
                .iter()
                .filter(|r| r[user] == USER)
                .map(|r| r[clients.col("id")].clone())
                .collect();
            assert_eq!(ids.len(), 1, "{clients:?}");
            let start = Instant::now();
            common::ops::console(&c.reference, &proxy, &format!("KILL_CLIENT {}", ids[0])).await;
            let ended = tokio::time::timeout(Duration::from_secs(5), task).await;
            let took = start.elapsed();
            let got = ended.unwrap_or_else(|_| panic!("{protocol}: KILL_CLIENT did not end {sql}")).unwrap();
            let code = got.expect_err(&format!("{protocol}: a killed statement answered: {sql}"));
            assert!(took < Duration::from_secs(1), "{protocol}: KILL_CLIENT took {took:?}: {sql}");
            println!("{protocol}, KILL_CLIENT during {sql}: {code} in {took:?}");
            assert_shards_quiet(&checks, &format!("{protocol}, after KILL_CLIENT during {sql}")).await;
        }
    }
    proxy.assert_no_leaks().await;
}

/// A sharded statement waiting for its shards' servers (one per shard, each held by another
/// client's transaction): `KILL_CLIENT` ends the waiting session within a second and a
/// cancel answers it with 57014, without waiting for a server to come free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_client_and_cancel_end_a_sharded_statement_waiting_for_servers() {
    let c = shards::start(SCHEMA);
    load(&c, 2_000);
    let toml =
        shards::config_with(&c, &["t"], |b| b.pool("pool_size = 1").pool("checkout_timeout = \"30s\""));
    let proxy = TestProxy::start_toml(&toml).await;
    // Logged in first: a login needs a server too.
    let mut clients = Vec::new();
    for protocol in ["simple", "extended"] {
        let waiter = proxy.connect(USER, PASSWORD, DB).await;
        let conninfo = format!("{} application_name=victim_{protocol}", proxy.conninfo(USER, PASSWORD, DB));
        clients.push((protocol, waiter, common::connect(&conninfo).await.unwrap()));
    }
    let holder = proxy.connect(USER, PASSWORD, DB).await;
    simple(&holder, "BEGIN").await.unwrap();
    simple(&holder, "SELECT count(*) FROM t").await.unwrap();
    let sql = "SELECT id FROM t ORDER BY id";
    for (protocol, waiter, victim) in clients {
        // The cancel: 57014 for the waiting statement, and the session goes on.
        let token = waiter.cancel_token();
        let task = tokio::spawn(async move {
            let got = answer(&waiter, protocol, sql).await.map(|_| ());
            (got, waiter)
        });
        tokio::time::sleep(Duration::from_millis(500)).await;
        let start = Instant::now();
        token.cancel_query(NoTls).await.unwrap();
        let (got, _waiter) = tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .unwrap_or_else(|_| panic!("{protocol}: the cancel did not end a statement waiting for servers"))
            .unwrap();
        assert_eq!(got.err().as_deref(), Some("57014"), "{protocol}");
        assert!(
            start.elapsed() < Duration::from_secs(1),
            "{protocol}: the cancel took {:?}",
            start.elapsed()
        );

        // KILL_CLIENT: the session ends.
        let task = tokio::spawn(async move { answer(&victim, protocol, sql).await.map(|_| ()) });
        tokio::time::sleep(Duration::from_millis(500)).await;
        let clients = common::ops::console(&c.reference, &proxy, "SHOW CLIENTS").await;
        let id = clients.row("application_name", &format!("victim_{protocol}"))[clients.col("id")].clone();
        let start = Instant::now();
        common::ops::console(&c.reference, &proxy, &format!("KILL_CLIENT {id}")).await;
        let got = tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .unwrap_or_else(|_| panic!("{protocol}: KILL_CLIENT did not end a session waiting for servers"))
            .unwrap();
        assert!(got.is_err(), "{protocol}: a killed statement answered");
        assert!(
            start.elapsed() < Duration::from_secs(1),
            "{protocol}: KILL_CLIENT took {:?}",
            start.elapsed()
        );
    }
    // The holder's transaction is untouched.
    assert_eq!(simple(&holder, "SELECT count(*) FROM t").await, Ok(vec![vec![Some("2001".into())]]));
    simple(&holder, "COMMIT").await.unwrap();
    drop(holder);
    proxy.assert_no_leaks().await;
}

/// `query_timeout` is not defeated by a fan-out: it cancels the statement on every shard at
/// any point of its merge and the client gets 57014 soon after, then runs its next statement.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn query_timeout_ends_a_sharded_statement_at_any_point_of_the_merge() {
    let c = shards::start(SCHEMA);
    load(&c, 2_000);
    let toml = shards::config_with(&c, &["t"], |b| b.pool("query_timeout = \"1s\""));
    let proxy = TestProxy::start_toml(&toml).await;
    let mut checks = Vec::new();
    for s in &c.shards {
        checks.push(direct(s).await);
    }
    let client = proxy.connect(USER, PASSWORD, DB).await;
    for sql in SLOW {
        for protocol in ["simple", "extended"] {
            let start = Instant::now();
            let got = answer(&client, protocol, sql).await;
            let took = start.elapsed();
            assert_eq!(got.err().as_deref(), Some("57014"), "{protocol}: {sql}");
            assert!(took < Duration::from_secs(3), "{protocol}: query_timeout took {took:?}: {sql}");
            assert_eq!(simple(&client, "SELECT count(*) FROM t").await, Ok(vec![vec![Some("2001".into())]]));
            assert_shards_quiet(&checks, &format!("{protocol}, after query_timeout of {sql}")).await;
        }
    }
    drop(client);
    proxy.assert_no_leaks().await;
}
