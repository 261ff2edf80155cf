//! A sharded client's session state and time limits, as the unsharded session keeps them:
//! with one server per shard, what a client leaves on a shard's server (settings, a session
//! advisory lock) never reaches the next client, who finds what a fresh connection to
//! PostgreSQL finds (asked of the shard directly), and the pool's time limits end a client
//! idle inside a transaction, rolling its work back.

mod common;

use std::time::Duration;

use common::raw::{query, RawConn};
use common::*;
use harness::Cluster;

/// Two shards, started in parallel, with prepared transactions for multi-shard writes.
fn two_shards() -> (Cluster, Cluster) {
    let start = || {
        let mut opts = harness::ClusterOptions::default();
        opts.settings.push(("max_prepared_transactions".into(), "20".into()));
        start_pg_with(opts)
    };
    let a = std::thread::spawn(start);
    let b = start();
    (a.join().expect("shard thread"), b)
}

fn pool_of_one(pg: &Cluster, more: &[&str]) -> ConfigBuilder {
    let mut b = ConfigBuilder::new(pg)
        .pool("pool_mode = \"transaction\"")
        .pool("pool_size = 1")
        .pool("checkout_timeout = \"30s\"");
    for line in more {
        b = b.pool(line);
    }
    b
}

async fn one(client: &tokio_postgres::Client, sql: &str) -> String {
    first_row(client, sql).await.unwrap_or_else(|e| panic!("{sql}: {e}")).remove(0)
}

/// Both shards' answers to `sql` for a client: an any-shard statement goes to the shards in
/// turn, so two runs see both.
async fn on_both(client: &tokio_postgres::Client, sql: &str) -> Vec<String> {
    vec![one(client, sql).await, one(client, sql).await]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sharded_clients_settings_and_session_locks_do_not_reach_the_next_client() {
    let (s0, s1) = two_shards();
    let proxy =
        TestProxy::start_toml(&common::shards::sharded_over(&pool_of_one(&s0, &[]), &[&s0, &s1])).await;
    let conninfo = proxy.conninfo(USER, PASSWORD, DB);
    let fresh = {
        let direct = connect(&direct_conninfo(&s1, USER, PASSWORD, DB)).await.expect("direct");
        one(&direct, "SELECT current_setting('search_path')").await
    };

    // A setting changed by a function call, not a SET.
    let first = connect(&conninfo).await.expect("first");
    one(&first, "SELECT set_config('search_path', 'pg_catalog', false)").await;
    let next = connect(&conninfo).await.expect("next");
    assert_eq!(
        on_both(&next, "SELECT current_setting('search_path')").await,
        [fresh.clone(), fresh.clone()],
        "the next client must find a fresh session's search_path"
    );
    assert_eq!(
        on_both(&first, "SELECT current_setting('search_path')").await,
        ["pg_catalog", "pg_catalog"],
        "the first client keeps its own setting, on every shard"
    );
    drop((first, next));

    // A session advisory lock: held by the first client until it leaves, as PostgreSQL does.
    let first = connect(&conninfo).await.expect("first");
    assert_eq!(one(&first, "SELECT pg_advisory_lock(1)::text").await, "");
    let next = tokio::spawn({
        let conninfo = conninfo.clone();
        async move {
            let next = connect(&conninfo).await.expect("next");
            let got = one(&next, "SELECT pg_try_advisory_lock(1)::text").await;
            (next, got)
        }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    if next.is_finished() {
        let (_next, got) = next.await.expect("next task");
        assert_eq!(got, "false", "the next client took the lock the first client holds");
        panic!("the next client was given the first client's pinned server");
    }
    // PostgreSQL's own view: the lock is held, by the first client's backend.
    for shard in [&s0, &s1] {
        let direct = connect(&direct_conninfo(shard, USER, PASSWORD, DB)).await.expect("direct");
        let held = one(&direct, "SELECT count(*)::text FROM pg_locks WHERE locktype = 'advisory'").await;
        if held == "1" {
            assert_eq!(one(&direct, "SELECT pg_try_advisory_lock(1)::text").await, "false");
        }
    }
    assert_eq!(
        one(
            &first,
            "SELECT count(*)::text FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()"
        )
        .await,
        "1",
        "the first client's next transaction runs where its lock is"
    );
    drop(first);
    let (next, got) = tokio::time::timeout(Duration::from_secs(30), next)
        .await
        .expect("the next client gets the server once the first left")
        .expect("next task");
    assert_eq!(got, "true", "the lock went with the first client");
    drop(next);
    proxy.assert_no_leaks().await;
    proxy.stop().await;
}

/// The ErrorResponse among `msgs`, as (severity, SQLSTATE).
fn error_of(msgs: &[raw::Msg]) -> Option<(String, String)> {
    msgs.iter().find(|m| m.tag == b'E').map(|m| {
        let f = m.fields();
        (f.get(&'S').cloned().unwrap_or_default(), f.get(&'C').cloned().unwrap_or_default())
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_in_transaction_timeout_ends_a_sharded_client_and_rolls_back() {
    let (s0, s1) = two_shards();
    for s in [&s0, &s1] {
        s.psql(DB, "CREATE TABLE t (a int); GRANT ALL ON t TO app;").expect("table");
    }
    let config = pool_of_one(&s0, &["idle_in_transaction_timeout = \"1s\""]);
    let proxy = TestProxy::start_toml(&common::shards::sharded_over(&config, &[&s0, &s1])).await;
    let mut a = RawConn::login(proxy.addr, USER, PASSWORD, DB).await.expect("login");
    a.send(&query("BEGIN")).await;
    a.until_ready().await;
    a.send(&query("INSERT INTO t VALUES (1)")).await;
    let reply = a.until_ready().await;
    assert_eq!(reply.last().expect("ready").body[..], b"T"[..], "inside a transaction");
    let last = a.until_closed(Duration::from_secs(5)).await;
    let Some(last) = last else {
        // Still open: PostgreSQL would have ended it; a COMMIT now must not commit.
        a.send(&query("COMMIT")).await;
        a.until_ready().await;
        let direct = connect(&direct_conninfo(&s0, USER, PASSWORD, DB)).await.expect("direct");
        let n = one(&direct, "SELECT count(*)::text FROM t").await;
        panic!("the client idle in its transaction past the limit was not closed (after COMMIT, shard 0 has {n} rows)");
    };
    assert_eq!(error_of(&last), Some(("FATAL".into(), "25P03".into())), "{last:?}");
    for s in [&s0, &s1] {
        let direct = connect(&direct_conninfo(s, USER, PASSWORD, DB)).await.expect("direct");
        assert_eq!(one(&direct, "SELECT count(*)::text FROM t").await, "0", "rolled back");
    }
    // The shard servers are free and clean for the next client.
    let b = proxy.connect(USER, PASSWORD, DB).await;
    assert_eq!(on_both(&b, "SELECT count(*)::text FROM t").await, ["0", "0"]);
    drop(b);
    proxy.assert_no_leaks().await;
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_shard_writes_held_replies_are_charged_to_the_buffer_budget() {
    let (s0, s1) = two_shards();
    for s in [&s0, &s1] {
        s.psql(DB, "CREATE TABLE t (a int, pad text); GRANT ALL ON t TO app;").expect("table");
    }
    let config = pool_of_one(&s0, &[])
        .general("max_message_size = 1048576")
        .limits("max_buffered_message_bytes = 1048576");
    let proxy = TestProxy::start_toml(&common::shards::sharded_over(&config, &[&s0, &s1])).await;
    let client = proxy.connect(USER, PASSWORD, DB).await;
    // An autocommit write on both shards: its replies wait for its two-phase commit. 3 MB of
    // them do not fit in a budget of 1 MiB.
    let big = "INSERT INTO t SELECT g, repeat('x', 1000) FROM generate_series(1, 3000) g RETURNING *";
    let e = client.simple_query(big).await.expect_err("more than the budget");
    assert_eq!(sqlstate(&e).as_deref(), Some("53200"), "{e:?}");
    let message = e.as_db_error().map(|d| d.message().to_owned()).unwrap_or_default();
    assert!(message.contains("max_buffered_message_bytes"), "{message}");
    for s in [&s0, &s1] {
        let direct = connect(&direct_conninfo(s, USER, PASSWORD, DB)).await.expect("direct");
        assert_eq!(one(&direct, "SELECT count(*)::text FROM t").await, "0", "rolled back on every shard");
        assert_eq!(one(&direct, "SELECT count(*)::text FROM pg_prepared_xacts").await, "0");
    }
    // The budget is given back, and the session goes on: a write that fits commits.
    client.simple_query("INSERT INTO t VALUES (1, 'a')").await.expect("small write");
    for s in [&s0, &s1] {
        let direct = connect(&direct_conninfo(s, USER, PASSWORD, DB)).await.expect("direct");
        assert_eq!(one(&direct, "SELECT count(*)::text FROM t").await, "1");
    }
    drop(client);
    proxy.assert_no_leaks().await;
    proxy.stop().await;
}

/// A transaction opened through the extended protocol keeps the client's own options on
/// every shard it reaches (before, each shard heard a bare `BEGIN`: read committed, read
/// write).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_extended_start_transaction_keeps_its_options_on_every_shard() {
    let (s0, s1) = two_shards();
    let proxy =
        TestProxy::start_toml(&common::shards::sharded_over(&pool_of_one(&s0, &[]), &[&s0, &s1])).await;
    let client = connect(&proxy.conninfo(USER, PASSWORD, DB)).await.expect("client");
    for start in [
        "START TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY",
        "BEGIN ISOLATION LEVEL SERIALIZABLE READ ONLY",
    ] {
        client.execute(start, &[]).await.unwrap_or_else(|e| panic!("{start}: {e}"));
        let want = if start.contains("SERIALIZABLE") { "serializable" } else { "repeatable read" };
        assert_eq!(
            on_both(&client, "SELECT current_setting('transaction_isolation')").await,
            [want, want],
            "{start}"
        );
        assert_eq!(on_both(&client, "SELECT current_setting('transaction_read_only')").await, ["on", "on"]);
        client.execute("COMMIT", &[]).await.expect("commit");
    }
    assert_eq!(
        on_both(&client, "SELECT current_setting('transaction_isolation')").await,
        ["read committed", "read committed"]
    );
    proxy.stop().await;
}
