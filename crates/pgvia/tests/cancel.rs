//! Query cancellation through pgvia: tokio-postgres's cancel token and psql's Ctrl-C both
//! stop a `pg_sleep(30)` with 57014 within a second; a CancelRequest with a wrong key
//! cancels nothing.

// Helpers outside #[test] functions unwrap too: a failed step is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use common::raw::{cancel_request, describe, query, Msg, RawConn};
use common::{sqlstate, start_pg, text, tool, ConfigBuilder, TestProxy, DB, PASSWORD, USER};
use harness::Cluster;
use tokio_postgres::NoTls;

/// Waits (up to 10 s) until PostgreSQL shows `sql` running.
async fn wait_running(pg: &Cluster, sql: &str) {
    let check = format!("select count(*) from pg_stat_activity where state = 'active' and query = '{sql}'");
    let deadline = Instant::now() + Duration::from_secs(10);
    while pg.psql("postgres", &check).expect("query pg_stat_activity") != "1" {
        assert!(Instant::now() < deadline, "`{sql}` did not start running");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokio_postgres_cancel_token_through_pgvia() {
    let pg = start_pg();
    let proxy = TestProxy::start(&ConfigBuilder::new(&pg)).await;
    let client = proxy.connect(USER, PASSWORD, DB).await;
    let token = client.cancel_token();

    let running = tokio::spawn(async move {
        let result = client.query("select pg_sleep(30)", &[]).await;
        (result, Instant::now(), client)
    });
    wait_running(&pg, "select pg_sleep(30)").await;
    let sent = Instant::now();
    // The token carries pgvia's address and the key pgvia issued, not the server's.
    token.cancel_query(NoTls).await.expect("send cancel request to pgvia");
    let (result, ended, client) = running.await.unwrap();
    let err = result.expect_err("the query was cancelled");
    assert_eq!(sqlstate(&err).as_deref(), Some("57014"), "{err}");
    let took = ended - sent;
    assert!(took < Duration::from_secs(1), "cancel took {took:?}");

    // The session carries on.
    let n: i32 = client.query_one("select 41 + 1", &[]).await.unwrap().get(0);
    assert_eq!(n, 42);
    drop(client);
    proxy.assert_no_leaks().await;
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn psql_ctrl_c_cancels_through_pgvia() {
    let pg = start_pg();
    let proxy = TestProxy::start(&ConfigBuilder::new(&pg)).await;
    let mut cmd = tool(&pg, "psql");
    cmd.args(["-X", "-v", "VERBOSITY=verbose", "-d", &proxy.conninfo(USER, PASSWORD, DB)])
        .args(["-c", "select pg_sleep(30)"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let child = cmd.spawn().expect("spawn psql");
    let pid = child.id().expect("psql pid");
    wait_running(&pg, "select pg_sleep(30)").await;

    // SIGINT makes psql send a CancelRequest to where it is connected: pgvia.
    let sent = Instant::now();
    let kill = std::process::Command::new("kill").args(["-INT", &pid.to_string()]).status().unwrap();
    assert!(kill.success());
    let out = tokio::time::timeout(Duration::from_secs(10), child.wait_with_output())
        .await
        .expect("psql exits after the cancel")
        .unwrap();
    let took = sent.elapsed();
    let stderr = text(&out.stderr);
    assert!(stderr.contains("ERROR:  57014: canceling statement due to user request"), "{stderr}");
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(took < Duration::from_secs(1), "cancel took {took:?}");

    proxy.assert_no_leaks().await;
    proxy.stop().await;
}

/// Sends a CancelRequest to pgvia on a connection of its own; pgvia hangs up after it.
async fn send_cancel(proxy: &TestProxy, process_id: i32, secret: i32) {
    let mut conn = RawConn::connect(proxy.addr).await.unwrap();
    conn.send(&cancel_request(process_id, secret)).await;
    let answer = conn.until_closed(Duration::from_secs(5)).await.expect("pgvia closes a cancel connection");
    assert!(answer.is_empty(), "a CancelRequest gets no reply: {:?}", describe(&answer));
}

fn tags(msgs: &[Msg]) -> String {
    msgs.iter().map(|m| char::from(m.tag)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_with_a_wrong_key_cancels_nothing() {
    let pg = start_pg();
    let proxy = TestProxy::start(&ConfigBuilder::new(&pg)).await;
    let mut conn = RawConn::login(proxy.addr, USER, PASSWORD, DB).await.unwrap();
    let (pid, secret) = conn.key.expect("BackendKeyData from pgvia");
    // Another client, so that "wrong" keys can also be someone else's valid one.
    let other = RawConn::login(proxy.addr, USER, PASSWORD, DB).await.unwrap();
    let (other_pid, other_secret) = other.key.unwrap();
    assert_ne!(other_pid, pid);

    let started = Instant::now();
    conn.send(&query("select pg_sleep(2)")).await;
    wait_running(&pg, "select pg_sleep(2)").await;
    send_cancel(&proxy, pid, secret ^ 1).await;
    send_cancel(&proxy, pid, !secret).await;
    send_cancel(&proxy, pid ^ 0x0100, secret).await;
    send_cancel(&proxy, other_pid, secret).await;
    send_cancel(&proxy, pid, other_secret).await;
    // The other client's own, valid key: it has no query running, so nothing happens.
    send_cancel(&proxy, other_pid, other_secret).await;
    let replies = conn.until_ready().await;
    assert_eq!(tags(&replies), "TDCZ", "query should complete normally: {:?}", describe(&replies));
    assert!(started.elapsed() >= Duration::from_secs(2));

    // The right key does cancel, so the requests above were understood and refused.
    conn.send(&query("select pg_sleep(30)")).await;
    wait_running(&pg, "select pg_sleep(30)").await;
    let sent = Instant::now();
    send_cancel(&proxy, pid, secret).await;
    let replies = conn.until_ready().await;
    let took = sent.elapsed();
    let error = replies.iter().find(|m| m.tag == b'E').unwrap_or_else(|| panic!("{:?}", describe(&replies)));
    assert_eq!(error.sqlstate().as_deref(), Some("57014"));
    assert!(took < Duration::from_secs(1), "cancel took {took:?}");

    // Once the client is gone, its key is dead: nothing to cancel, and pgvia is fine.
    drop(conn);
    drop(other);
    proxy.assert_no_leaks().await;
    send_cancel(&proxy, pid, secret).await;
    let client = proxy.connect(USER, PASSWORD, DB).await;
    assert_eq!(client.query_one("select 1", &[]).await.unwrap().get::<_, i32>(0), 1);
    drop(client);
    proxy.assert_no_leaks().await;
    proxy.stop().await;
}

/// Two cancels sent at once for one statement (a driver that retries, or a user pressing
/// Ctrl-C twice): the first stops the statement, the second reaches the server while pgvia
/// reads back what the transaction may have changed (a function ran, so everything is read
/// back). Directly connected, the second cancel would hit an idle backend and do nothing;
/// through pgvia it must not cost the client its connection either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_cancel_does_not_end_the_session() {
    let pg = start_pg();
    let proxy = TestProxy::start(&ConfigBuilder::new(&pg).pool("pool_mode = \"transaction\"")).await;
    let client = proxy.connect(USER, PASSWORD, DB).await;
    for round in 0..20 {
        let token = client.cancel_token();
        let cancels = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(150)).await;
            let (a, b) = tokio::join!(token.cancel_query(NoTls), token.cancel_query(NoTls));
            a.and(b)
        });
        let err = client.simple_query("SELECT pg_sleep(5)").await.expect_err("the sleep is cancelled");
        assert_eq!(sqlstate(&err).as_deref(), Some("57014"), "round {round}: {err:?}");
        cancels.await.unwrap().unwrap();
        let rows = client.simple_query("SELECT 1").await;
        assert!(rows.is_ok(), "round {round}: the session ended after a double cancel: {rows:?}");
    }
    drop(client);
    proxy.assert_no_leaks().await;
}

/// What a batch of replies was, with each ReadyForQuery's status and each error's SQLSTATE:
/// `E57014 Z(I)`.
fn outline(msgs: &[Msg]) -> String {
    let word = |m: &Msg| match m.tag {
        b'Z' => format!("Z({})", char::from(m.body[0])),
        b'E' => format!("E{}", m.sqlstate().unwrap_or_default()),
        b'C' => format!("C({})", text(&m.body).trim_end_matches('\0')),
        t => char::from(t).to_string(),
    };
    msgs.iter().map(word).collect::<Vec<_>>().join(" ")
}

/// A request waiting for a pool server has no server to signal: its cancel is answered by
/// pgvia with 57014, nothing of the request runs, and the session goes on, as a query
/// cancelled at once would directly. Inside a transaction the transaction fails, and the
/// server then gives PostgreSQL's own answers for it (25P02, COMMIT reported as ROLLBACK).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_while_waiting_for_a_server_is_answered() {
    let pg = start_pg();
    let proxy =
        TestProxy::start(&ConfigBuilder::new(&pg).pool("pool_mode = \"transaction\"\npool_size = 1")).await;
    let holder = proxy.connect(USER, PASSWORD, DB).await;
    let mut waiter = RawConn::login(proxy.addr, USER, PASSWORD, DB).await.unwrap();
    let (pid, secret) = waiter.key.expect("BackendKeyData from pgvia");
    holder.batch_execute("CREATE TABLE IF NOT EXISTS cancelled_waits (n int)").await.unwrap();

    // Sends `request`, checks it waits (the holder has the only server), cancels it, and
    // returns the replies.
    async fn cancelled(proxy: &TestProxy, waiter: &mut RawConn, key: (i32, i32), request: &[u8]) -> String {
        waiter.send(request).await;
        let early = tokio::time::timeout(Duration::from_millis(300), waiter.recv()).await;
        assert!(early.is_err(), "the request waits, but got {early:?}");
        let sent = Instant::now();
        send_cancel(proxy, key.0, key.1).await;
        let replies = waiter.until_ready().await;
        assert!(sent.elapsed() < Duration::from_secs(1), "the cancel took {:?}", sent.elapsed());
        outline(&replies)
    }

    holder.batch_execute("BEGIN; SELECT 1").await.unwrap();
    let insert = query("INSERT INTO cancelled_waits VALUES (1)");
    assert_eq!(cancelled(&proxy, &mut waiter, (pid, secret), &insert).await, "E57014 Z(I)");
    let mut batch = common::raw::parse("", "INSERT INTO cancelled_waits VALUES ($1::int)");
    batch.extend(common::raw::bind("", "", &[Some("2")]));
    batch.extend(common::raw::execute("", 0));
    batch.extend(common::raw::sync());
    assert_eq!(cancelled(&proxy, &mut waiter, (pid, secret), &batch).await, "E57014 Z(I)");

    // In a transaction pgvia began for the client (no server yet).
    waiter.send(&query("BEGIN")).await;
    assert_eq!(outline(&waiter.until_ready().await), "C(BEGIN) Z(T)");
    let insert = query("INSERT INTO cancelled_waits VALUES (3)");
    assert_eq!(cancelled(&proxy, &mut waiter, (pid, secret), &insert).await, "E57014 Z(E)");
    holder.batch_execute("COMMIT").await.unwrap();
    waiter.send(&query("SELECT 1")).await;
    assert_eq!(outline(&waiter.until_ready().await), "E25P02 Z(E)");
    waiter.send(&query("COMMIT")).await;
    assert_eq!(outline(&waiter.until_ready().await), "C(ROLLBACK) Z(I)");
    waiter.send(&query("SELECT count(*) FROM cancelled_waits")).await;
    let replies = waiter.until_ready().await;
    assert_eq!(outline(&replies), "T D C(SELECT 1) Z(I)");
    assert!(replies[1].body.ends_with(b"\x00\x00\x00\x010"), "nothing cancelled ran: {:?}", replies[1]);

    // The one server served everyone and was never closed.
    assert_eq!(proxy.servers_created(), 1);
    drop(holder);
    drop(waiter);
    proxy.assert_no_leaks().await;
    proxy.stop().await;
}
