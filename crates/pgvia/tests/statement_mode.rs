//! `pool_mode = "statement"`: autocommit statements share one server; transaction blocks are
//! refused in order, and the session goes on.

mod common;

use std::time::Duration;

use common::raw::{bind, describe_portal, execute, parse, query, sync, Msg, RawConn};
use common::*;

fn statement_config(pg: &harness::Cluster) -> ConfigBuilder {
    ConfigBuilder::new(pg)
        .pool("pool_mode = \"statement\"")
        .pool("pool_size = 1")
        .pool("checkout_timeout = \"5s\"")
}

fn sqlstates(msgs: &[Msg]) -> Vec<String> {
    msgs.iter().filter(|m| m.tag == b'E').filter_map(Msg::sqlstate).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transaction_blocks_are_refused_and_the_session_goes_on() {
    let pg = start_pg();
    let proxy = TestProxy::start(&statement_config(&pg)).await;
    let a = proxy.connect(USER, PASSWORD, DB).await;
    let b = proxy.connect(USER, PASSWORD, DB).await;
    a.batch_execute("CREATE TABLE t (a int)").await.unwrap();

    for sql in ["BEGIN", "start transaction read only", "SELECT 1; BEGIN; SELECT 2", "COMMIT AND CHAIN"] {
        let e = a.simple_query(sql).await.expect_err(sql);
        assert_eq!(sqlstate(&e).as_deref(), Some("0A000"), "{sql}: {e}");
        let message = e.as_db_error().unwrap().message().to_owned();
        assert!(message.contains("pool_mode \"statement\""), "{message}");
    }
    // tokio-postgres' own transaction() sends BEGIN.
    let mut c = proxy.connect(USER, PASSWORD, DB).await;
    let e = c.transaction().await.err().expect("refused");
    assert_eq!(sqlstate(&e).as_deref(), Some("0A000"));

    // Autocommit statements (and implicit multi-statement transactions) work, and the one
    // server goes back after each: two clients interleave on a pool of one.
    for i in 0..20 {
        let client = if i % 2 == 0 { &a } else { &b };
        client
            .batch_execute(&format!("INSERT INTO t VALUES ({i}); INSERT INTO t VALUES ({i})"))
            .await
            .unwrap();
        let n: i64 = client.query_one("SELECT count(*) FROM t", &[]).await.unwrap().get(0);
        assert_eq!(n, 2 * (i + 1));
    }
    let created = proxy.servers_created();
    assert_eq!(created, 1, "one server served every client");
    drop((a, b, c));
    proxy.assert_no_leaks().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pinned_client_is_refused_too() {
    let pg = start_pg();
    let proxy = TestProxy::start(&statement_config(&pg)).await;
    let a = proxy.connect(USER, PASSWORD, DB).await;
    // A session advisory lock keeps the server between statements.
    a.batch_execute("SELECT pg_advisory_lock(7)").await.unwrap();
    for _ in 0..3 {
        let e = a.simple_query("BEGIN").await.expect_err("refused while pinned");
        assert_eq!(sqlstate(&e).as_deref(), Some("0A000"));
        assert_eq!(a.simple_query("SELECT 1").await.unwrap().len(), 3);
    }
    a.batch_execute("SELECT pg_advisory_unlock(7)").await.unwrap();
    let e = a.simple_query("BEGIN").await.expect_err("refused once unpinned");
    assert_eq!(sqlstate(&e).as_deref(), Some("0A000"));
    drop(a);
    proxy.assert_no_leaks().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_keep_pipelined_replies_in_order() {
    let pg = start_pg();
    let proxy = TestProxy::start(&statement_config(&pg)).await;
    let mut conn = RawConn::login(proxy.addr, USER, PASSWORD, DB).await.unwrap();

    // Three simple queries in one write: the refusal comes between the two answers.
    let mut batch = query("SELECT 1");
    batch.extend(query("BEGIN"));
    batch.extend(query("SELECT 2"));
    conn.send(&batch).await;
    let mut tags = Vec::new();
    let mut states = Vec::new();
    for _ in 0..3 {
        let reply = conn.until_ready().await;
        states.push(sqlstates(&reply));
        tags.push(reply.iter().map(|m| char::from(m.tag)).collect::<String>());
    }
    assert_eq!(tags, ["TDCZ", "EZ", "TDCZ"]);
    assert_eq!(states, [vec![], vec!["0A000".to_owned()], vec![]]);

    // Extended protocol: a refused Parse, then the rest up to Sync is skipped, then a normal
    // statement in the same write.
    let mut batch = parse("", "BEGIN");
    batch.extend(bind("", "", &[]));
    batch.extend(execute("", 0));
    batch.extend(sync());
    batch.extend(parse("", "SELECT 3"));
    batch.extend(bind("", "", &[]));
    batch.extend(describe_portal(""));
    batch.extend(execute("", 0));
    batch.extend(sync());
    conn.send(&batch).await;
    let first = conn.until_ready().await;
    assert_eq!(first.iter().map(|m| char::from(m.tag)).collect::<String>(), "EZ");
    assert_eq!(sqlstates(&first), ["0A000"]);
    let second = conn.until_ready().await;
    assert_eq!(second.iter().map(|m| char::from(m.tag)).collect::<String>(), "12TDCZ");
    assert_eq!(second.last().unwrap().body[..], b"I"[..]);
    drop(conn);
    proxy.assert_no_leaks().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_inside_an_unsynced_batch_ends_the_session() {
    let pg = start_pg();
    let proxy = TestProxy::start(&statement_config(&pg)).await;
    let mut conn = RawConn::login(proxy.addr, USER, PASSWORD, DB).await.unwrap();
    let mut batch = parse("", "SELECT 1");
    batch.extend(bind("", "", &[]));
    batch.extend(execute("", 0));
    batch.extend(parse("", "BEGIN"));
    batch.extend(sync());
    conn.send(&batch).await;
    let rest = conn.until_closed(Duration::from_secs(5)).await.expect("closed");
    let fatal = rest.iter().find(|m| m.tag == b'E').expect("an error");
    assert_eq!(fatal.sqlstate().as_deref(), Some("0A000"));
    assert_eq!(fatal.fields()[&'S'], "FATAL");
    proxy.assert_no_leaks().await;
}
