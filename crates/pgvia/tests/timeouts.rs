//! Session time limits and per-user client limits: each ends or interrupts the client with
//! its own SQLSTATE, and a server taken from a client is clean for the next one. The time
//! limits are tested on both session engines (an unsharded and a sharded database).

// The test bodies run once per session engine from helper functions, outside `#[test]`.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use common::raw::{query, RawConn};
use common::shards::{Engine, ENGINES};
use common::*;

fn config(pg: &harness::Cluster, limits: &[&str]) -> ConfigBuilder {
    let mut b = ConfigBuilder::new(pg)
        .pool("pool_mode = \"transaction\"")
        .pool("pool_size = 1")
        .pool("checkout_timeout = \"20s\"");
    for line in limits {
        b = b.pool(line);
    }
    b
}

/// The ErrorResponse among `msgs`, as (severity, SQLSTATE).
fn error_of(msgs: &[raw::Msg]) -> Option<(String, String)> {
    msgs.iter().find(|m| m.tag == b'E').map(|m| {
        let f = m.fields();
        (f.get(&'S').cloned().unwrap_or_default(), f.get(&'C').cloned().unwrap_or_default())
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_in_transaction_timeout_rolls_back_and_frees_the_server() {
    for engine in ENGINES {
        idle_in_transaction_timeout_rolls_back_and_frees_the_server_on(engine).await;
    }
}

async fn idle_in_transaction_timeout_rolls_back_and_frees_the_server_on(engine: Engine) {
    eprintln!("-- the {engine:?} session engine");
    let pg = start_pg();
    let proxy = engine.start(&config(&pg, &["idle_in_transaction_timeout = \"300ms\""]), &pg).await;
    let setup = proxy.connect(USER, PASSWORD, DB).await;
    setup.batch_execute("CREATE TABLE t (a int)").await.unwrap();
    drop(setup);

    let mut a = RawConn::login(proxy.addr, USER, PASSWORD, DB).await.unwrap();
    a.send(&query("BEGIN; INSERT INTO t VALUES (1)")).await;
    let reply = a.until_ready().await;
    assert_eq!(reply.last().unwrap().body[..], b"T"[..], "inside a transaction");
    let started = Instant::now();
    let last = a.until_closed(Duration::from_secs(5)).await.expect("pgvia closes the idle client");
    let waited = started.elapsed();
    assert_eq!(error_of(&last), Some(("FATAL".into(), "25P03".into())), "{last:?}");
    assert!(waited >= Duration::from_millis(250) && waited < Duration::from_secs(3), "{waited:?}");

    // The only server is free again, its transaction rolled back.
    let b = proxy.connect(USER, PASSWORD, DB).await;
    let n: i64 = b.query_one("SELECT count(*) FROM t", &[]).await.unwrap().get(0);
    assert_eq!(n, 0, "the timed-out transaction must not be committed");
    let status: String = b.query_one("SELECT current_setting('application_name')", &[]).await.unwrap().get(0);
    assert_eq!(status, "");

    // A BEGIN pgvia answered itself is a transaction too, though it holds no server.
    let mut c = RawConn::login(proxy.addr, USER, PASSWORD, DB).await.unwrap();
    c.send(&query("BEGIN")).await;
    c.until_ready().await;
    let last = c.until_closed(Duration::from_secs(5)).await.expect("closed");
    assert_eq!(error_of(&last), Some(("FATAL".into(), "25P03".into())), "{last:?}");
    drop(b);
    proxy.assert_no_leaks().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_idle_timeout_closes_silent_clients_only() {
    for engine in ENGINES {
        client_idle_timeout_closes_silent_clients_only_on(engine).await;
    }
}

async fn client_idle_timeout_closes_silent_clients_only_on(engine: Engine) {
    eprintln!("-- the {engine:?} session engine");
    let pg = start_pg();
    let proxy = engine.start(&config(&pg, &["client_idle_timeout = \"400ms\""]), &pg).await;

    // Busy: a query every 100 ms for well past the limit.
    let mut busy = RawConn::login(proxy.addr, USER, PASSWORD, DB).await.unwrap();
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        busy.send(&query("SELECT 1")).await;
        let reply = busy.until_ready().await;
        assert!(error_of(&reply).is_none(), "{reply:?}");
    }

    // Silent: closed with 57P05, as PostgreSQL's idle_session_timeout does.
    let mut silent = RawConn::login(proxy.addr, USER, PASSWORD, DB).await.unwrap();
    let started = Instant::now();
    let last = silent.until_closed(Duration::from_secs(5)).await.expect("closed");
    assert!(started.elapsed() >= Duration::from_millis(350));
    assert_eq!(error_of(&last), Some(("FATAL".into(), "57P05".into())), "{last:?}");
    drop(busy);
    proxy.assert_no_leaks().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn query_timeout_cancels_the_query_and_keeps_the_session() {
    for engine in ENGINES {
        query_timeout_cancels_the_query_and_keeps_the_session_on(engine).await;
    }
}

async fn query_timeout_cancels_the_query_and_keeps_the_session_on(engine: Engine) {
    eprintln!("-- the {engine:?} session engine");
    let pg = start_pg();
    let proxy = engine.start(&config(&pg, &["query_timeout = \"300ms\""]), &pg).await;
    let mut a = RawConn::login(proxy.addr, USER, PASSWORD, DB).await.unwrap();
    let started = Instant::now();
    a.send(&query("SELECT pg_sleep(20)")).await;
    let reply = a.until_ready().await;
    let elapsed = started.elapsed();
    assert!(elapsed < Duration::from_secs(5), "cancelled after {elapsed:?}");
    let warning = reply.iter().find(|m| m.tag == b'N').expect("pgvia warns why").fields();
    assert_eq!((warning[&'S'].as_str(), warning[&'C'].as_str()), ("WARNING", "57014"));
    assert!(warning[&'M'].contains("query_timeout"), "{warning:?}");
    assert_eq!(error_of(&reply), Some(("ERROR".into(), "57014".into())), "{reply:?}");

    // The session goes on, and a quick query is never cancelled.
    for _ in 0..3 {
        a.send(&query("SELECT pg_sleep(0.1)")).await;
        let reply = a.until_ready().await;
        assert!(error_of(&reply).is_none(), "{reply:?}");
    }

    // tokio-postgres sees the same error code.
    let client = proxy.connect(USER, PASSWORD, DB).await;
    let e = client.simple_query("SELECT pg_sleep(20)").await.unwrap_err();
    assert_eq!(sqlstate(&e).as_deref(), Some("57014"));
    assert_eq!(client.simple_query("SELECT 1").await.unwrap().len(), 3);
    drop(a);
    drop(client);
    proxy.assert_no_leaks().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_client_connections_per_user() {
    let pg = start_pg();
    let builder = ConfigBuilder::new(&pg).user(
        "name = \"other\"\npassword = \"pw\"\nmax_client_connections = 2\nserver_password = \"secret\"",
    );
    let proxy = TestProxy::start(&builder).await;
    pg.create_user("other", "secret").unwrap();
    let _a = RawConn::login(proxy.addr, "other", "pw", DB).await.unwrap();
    let _b = RawConn::login(proxy.addr, "other", "pw", DB).await.unwrap();
    let refused = RawConn::login(proxy.addr, "other", "pw", DB).await.err().expect("refused").refused();
    assert_eq!(refused.sqlstate().as_deref(), Some("53300"));
    assert!(refused.fields()[&'M'].contains("role \"other\""), "{:?}", refused.fields());
    // Another user is not counted against it.
    let _c = RawConn::login(proxy.addr, USER, PASSWORD, DB).await.unwrap();
    drop(_a);
    // A freed place can be taken again (the count drops when the session ends).
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        match RawConn::login(proxy.addr, "other", "pw", DB).await {
            Ok(_) => break,
            Err(_) if Instant::now() < deadline => tokio::time::sleep(Duration::from_millis(20)).await,
            Err(e) => panic!("place not freed: {e:?}"),
        }
    }
}
