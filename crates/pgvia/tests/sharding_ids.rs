//! Globally unique ids made on the shards (`pgvia.unique_id()`, installed by pgvia on every
//! shard): four real PostgreSQL shards, a table whose id defaults to the function, written
//! through pgvia by sixteen clients at once; then a clock stepped back and a statement asking
//! for more ids than a millisecond holds.

mod common;

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

use common::{TestProxy, DB, PASSWORD, USER};
use harness::Cluster;
use tokio_postgres::Client;

use common::shards::ShardClusters as Cluster5;

const EPOCH_MS: i64 = 1_767_225_600_000;
const CLIENTS: usize = 16;
const ROWS: usize = 50_000;

async fn direct(pg: &Cluster) -> Client {
    common::connect(&common::direct_conninfo(pg, USER, PASSWORD, DB)).await.expect("direct connection")
}

fn node(id: i64) -> i64 {
    (id >> 12) & 1023
}

fn millis(id: i64) -> i64 {
    (id >> 22) + EPOCH_MS
}

/// Waits until pgvia has installed the function on every shard (it does at start).
async fn wait_installed(c: &Cluster5) {
    let deadline = Instant::now() + Duration::from_secs(90);
    for shard in &c.shards {
        let client = direct(shard).await;
        loop {
            let row = client
                .query_one("SELECT to_regprocedure('pgvia.unique_id()') IS NOT NULL", &[])
                .await
                .expect("look for the function");
            if row.get::<_, bool>(0) {
                break;
            }
            assert!(Instant::now() < deadline, "pgvia.unique_id() not installed on a shard");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unique_ids_made_on_the_shards() {
    let c = common::shards::start("SELECT 1;");
    // `events` is sharded by `account`; its id comes from the shard the row lands on.
    let toml = common::shards::config(&c, &["events"]).replace("column = \"id\"", "column = \"account\"");
    let proxy = TestProxy::start_toml(&toml).await;
    wait_installed(&c).await;
    let via = proxy.connect(USER, PASSWORD, DB).await;
    via.batch_execute(
        "CREATE TABLE events (id bigint PRIMARY KEY DEFAULT pgvia.unique_id(), account bigint NOT NULL, client int NOT NULL)",
    )
    .await
    .expect("create through pgvia");

    // Sixteen clients, 50,000 rows, the id left to the default; each client keeps the ids it
    // was given, in order.
    let started = Instant::now();
    let tasks: Vec<_> = (0..CLIENTS)
        .map(|client| {
            let conninfo = proxy.conninfo(USER, PASSWORD, DB);
            tokio::spawn(async move {
                let db = common::connect(&conninfo).await.expect("client");
                let insert = db
                    .prepare("INSERT INTO events (account, client) VALUES ($1, $2) RETURNING id")
                    .await
                    .expect("prepare");
                let mut ids = Vec::new();
                for i in 0..ROWS / CLIENTS {
                    let account = (client * 1_000_003 + i * 7919) as i64;
                    let row = db.query_one(&insert, &[&account, &(client as i32)]).await.expect("insert");
                    ids.push(row.get::<_, i64>(0));
                }
                ids
            })
        })
        .collect();
    let mut given: Vec<Vec<i64>> = Vec::new();
    for t in tasks {
        given.push(t.await.expect("client task"));
    }
    let elapsed = started.elapsed();
    eprintln!("{ROWS} rows by {CLIENTS} clients through pgvia in {elapsed:?}");

    // Every id distinct across the shards; each shard's ids carry its number; per client and
    // per shard, ids grow in the order they were given.
    let mut all = BTreeSet::new();
    let now_ms =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_millis() as i64;
    for (i, shard) in c.shards.iter().enumerate() {
        let client = direct(shard).await;
        let rows = client.query("SELECT id FROM events", &[]).await.expect("shard rows");
        assert!(!rows.is_empty(), "shard {i} got no rows");
        for r in rows {
            let id: i64 = r.get(0);
            assert_eq!(node(id), i as i64, "id {id} on shard {i}");
            assert!(all.insert(id), "duplicate id {id}");
        }
    }
    assert_eq!(all.len(), ROWS);
    for ids in &given {
        let mut last: HashMap<i64, i64> = HashMap::new();
        for &id in ids {
            assert!(all.contains(&id), "returned id {id} is not in the table");
            assert!(id > 0);
            let ms = millis(id);
            assert!(ms <= now_ms + 2_000 && ms >= now_ms - 600_000, "id {id} is not from now");
            if let Some(prev) = last.insert(node(id), id) {
                assert!(id > prev, "ids of one shard went down: {prev} then {id}");
            }
        }
    }

    // A clock stepped back: the shard's last tick is put an hour ahead of the clock; ids go on
    // from there, never below or equal to what was issued.
    let shard1 = direct(&c.shards[1]).await;
    let ahead: i64 = shard1
        .query_one(
            "SELECT setval('pgvia.unique_id_ticks', ((floor(date_part('epoch', clock_timestamp()) * 1000)::bigint + 3600000 - $1) << 12))",
            &[&EPOCH_MS],
        )
        .await
        .expect("step the stored clock ahead")
        .get(0);
    let floor_id = ((ahead >> 12) << 22) | (1 << 12) | (ahead & 4095);
    let mut prev = floor_id;
    for _ in 0..50 {
        let id: i64 = via
            .query_one("/* pgvia_shard: 1 */ SELECT pgvia.unique_id()", &[])
            .await
            .expect("id after the step")
            .get(0);
        assert!(id > prev, "id {id} not above {prev} after the clock went back");
        assert!(!all.contains(&id));
        prev = id;
    }
    let n: i64 = via
        .query_one("INSERT INTO events (account, client) VALUES (5, 99) RETURNING id", &[])
        .await
        .expect("insert after the step")
        .get(0);
    assert!(!all.contains(&n));

    // More than a millisecond's 4,096 ids in one statement: 20,000 distinct, increasing,
    // borrowing the next milliseconds.
    let rows = via
        .query("/* pgvia_shard: 2 */ SELECT pgvia.unique_id() FROM generate_series(1, 20000)", &[])
        .await
        .expect("20,000 ids");
    let ids: Vec<i64> = rows.iter().map(|r| r.get(0)).collect();
    assert_eq!(ids.len(), 20_000);
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "ids of one statement not increasing");
    assert_eq!(ids.iter().collect::<BTreeSet<_>>().len(), 20_000);
    assert!(ids.iter().all(|&id| node(id) == 2 && !all.contains(&id)));

    // Throughput of one statement on one shard (reported, not asserted: a shared machine).
    let t = Instant::now();
    via.query("/* pgvia_shard: 3 */ SELECT pgvia.unique_id() FROM generate_series(1, 100000)", &[])
        .await
        .expect("100,000 ids");
    eprintln!("100,000 ids in one statement on one shard: {:?}", t.elapsed());

    proxy.stop().await;
}

/// A shard where the function cannot be installed (the schema `pgvia` belongs to someone else):
/// pgvia says so in its log, naming the shard, installs it on the others, and asking that
/// shard for an id is PostgreSQL's error, not a made-up id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_that_refuses_the_function_is_logged() {
    let c = common::shards::start("SELECT 1;");
    c.shards[2]
        .psql(DB, "CREATE SCHEMA pgvia AUTHORIZATION postgres; REVOKE ALL ON SCHEMA pgvia FROM PUBLIC;")
        .expect("a schema pgvia the app user cannot write");
    let port = std::net::TcpListener::bind("127.0.0.1:0").expect("port").local_addr().expect("addr").port();
    let toml = common::shards::config_with(&c, &["events"], |b| b.general(&format!("listen_port = {port}")));
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("pgvia.toml");
    std::fs::write(&path, toml).expect("config");
    let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_pgvia"))
        .arg("--config")
        .arg(&path)
        .env("RUST_LOG", "info")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start pgvia");
    // The other shards get it.
    let deadline = Instant::now() + Duration::from_secs(60);
    for i in [0usize, 1, 3] {
        let client = direct(&c.shards[i]).await;
        loop {
            let row = client
                .query_one("SELECT to_regprocedure('pgvia.unique_id()') IS NOT NULL", &[])
                .await
                .expect("look for the function");
            if row.get::<_, bool>(0) {
                break;
            }
            assert!(Instant::now() < deadline, "pgvia.unique_id() not installed on shard {i}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    let conninfo = format!("host=127.0.0.1 port={port} user={USER} password={PASSWORD} dbname={DB}");
    let via = common::connect(&conninfo).await.expect("through pgvia");
    let err = via
        .query_one("/* pgvia_shard: 2 */ SELECT pgvia.unique_id()", &[])
        .await
        .expect_err("no function on shard 2");
    assert_eq!(common::sqlstate(&err).as_deref(), Some("42501"), "{err:?}");
    drop(via);
    let pid = child.id().expect("pid").to_string();
    tokio::process::Command::new("kill").args(["-TERM", &pid]).status().await.expect("kill");
    let out = tokio::time::timeout(Duration::from_secs(30), child.wait_with_output())
        .await
        .expect("pgvia stops")
        .expect("output");
    let log = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let line = log
        .lines()
        .find(|l| l.contains("cannot install pgvia.unique_id() on this shard"))
        .unwrap_or_else(|| panic!("no log line about the refused install in:\n{log}"));
    assert!(line.contains("shard=2") && line.contains("permission denied"), "{line}");
}
