//! Session mode is transparent about the backend: a client owns its server from login, so it
//! is told that server's real pid. `pg_backend_pid()` equals the BackendKeyData pid, its own
//! notifications carry it, cancels still work (through pgvia, with pgvia's secret), and
//! terminating its own backend ends its session exactly as on a direct connection.
//! Transaction mode keeps pgvia's made-up pid (docs/compatibility.md says why).

mod common;

use std::time::{Duration, Instant};

use common::raw::{query, RawConn};
use common::{start_pg, ConfigBuilder, TestProxy, DB, PASSWORD, USER};

/// The DataRow value of a one-row, one-column answer.
async fn one_value(conn: &mut RawConn, sql: &str) -> String {
    conn.send(&query(sql)).await;
    let msgs = conn.until_ready().await;
    let row = msgs.iter().find(|m| m.tag == b'D').unwrap_or_else(|| panic!("no row for {sql}: {msgs:?}"));
    let body = &row.body[2..];
    let len = i32::from_be_bytes([body[0], body[1], body[2], body[3]]) as usize;
    String::from_utf8(body[4..4 + len].to_vec()).expect("text value")
}

/// Runs `pg_terminate_backend(pg_backend_pid())` and returns the SQLSTATE of the error the
/// connection ends with.
async fn terminate_own_backend(conn: &mut RawConn, how: &str) -> String {
    conn.send(&query("SELECT pg_terminate_backend(pg_backend_pid())")).await;
    let msgs = conn.until_closed(Duration::from_secs(5)).await.unwrap_or_else(|| panic!("still open {how}"));
    msgs.iter()
        .find_map(|m| m.sqlstate())
        .unwrap_or_else(|| panic!("no error {how}: {:?}", common::raw::describe(&msgs)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_mode_clients_see_their_real_backend() {
    let pg = start_pg();
    let proxy = TestProxy::start(&ConfigBuilder::new(&pg).pool("pool_mode = \"session\"")).await;

    // BackendKeyData carries the backend's real pid.
    let mut raw = RawConn::login(proxy.addr, USER, PASSWORD, DB).await.expect("login");
    let (pid, _) = raw.key.expect("BackendKeyData");
    assert_eq!(one_value(&mut raw, "SELECT pg_backend_pid()").await, pid.to_string());
    // The server is the client's from login on: it is active before any query.
    assert_eq!(proxy.servers_created(), 1);

    // Its own notification carries the same pid, as directly.
    let (client, mut rx) = common::notified_client(&proxy.conninfo(USER, PASSWORD, DB)).await;
    client.batch_execute("LISTEN identity; NOTIFY identity").await.expect("listen and notify");
    let sender =
        tokio::time::timeout(Duration::from_secs(5), rx.recv()).await.expect("notification").expect("pid");
    let own: i32 = client.query_one("SELECT pg_backend_pid()", &[]).await.expect("pid").get(0);
    assert_eq!(sender.process_id(), own);

    // A cancel, sent to pgvia with the real pid and pgvia's secret, reaches the backend.
    let token = client.cancel_token();
    let sleeping = tokio::spawn({
        let client = client;
        async move { client.simple_query("SELECT pg_sleep(30)").await.map(|_| ()) }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = Instant::now();
    token.cancel_query(tokio_postgres::NoTls).await.expect("cancel through pgvia");
    let err = sleeping.await.expect("join").expect_err("cancelled");
    assert_eq!(err.as_db_error().map(|e| e.code().code()), Some("57014"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(5));

    // Terminating its own backend ends the session with PostgreSQL's own FATAL, as directly.
    let direct_addr = format!("{}:{}", pg.host(), pg.port()).parse().expect("addr");
    let mut direct = RawConn::login(direct_addr, USER, PASSWORD, DB).await.expect("direct login");
    let direct_code = terminate_own_backend(&mut direct, "directly").await;
    let code = terminate_own_backend(&mut raw, "through pgvia").await;
    assert_eq!(code, direct_code);
    assert_eq!(code, "57P01");

    proxy.assert_no_leaks().await;
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transaction_mode_keeps_a_made_up_pid() {
    let pg = start_pg();
    let proxy = TestProxy::start(&ConfigBuilder::new(&pg).pool("pool_mode = \"transaction\"")).await;
    let mut raw = RawConn::login(proxy.addr, USER, PASSWORD, DB).await.expect("login");
    let (pid, _) = raw.key.expect("BackendKeyData");
    assert_eq!(proxy.servers_created(), 1, "the login's settings check");
    let backend = one_value(&mut raw, "SELECT pg_backend_pid()").await;
    assert_ne!(backend, pid.to_string(), "a client shares servers in transaction mode");
    proxy.assert_no_leaks().await;
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_login_never_waits_for_a_busy_pool() {
    let pg = start_pg();
    let proxy =
        TestProxy::start(&ConfigBuilder::new(&pg).pool("pool_mode = \"session\"").pool("pool_size = 1"))
            .await;
    let mut first = RawConn::login(proxy.addr, USER, PASSWORD, DB).await.expect("first login");
    let (first_pid, _) = first.key.expect("BackendKeyData");
    assert_eq!(one_value(&mut first, "SELECT pg_backend_pid()").await, first_pid.to_string());
    // The only server is the first client's: the second logs in at once all the same, and
    // gets its server (and so its answer) when the first leaves.
    let started = Instant::now();
    let mut second = RawConn::login(proxy.addr, USER, PASSWORD, DB).await.expect("second login");
    assert!(started.elapsed() < Duration::from_secs(2), "the login waited for the busy pool");
    second.send(&query("SELECT 1")).await;
    drop(first);
    let answer = second.until_ready().await;
    assert!(answer.iter().any(|m| m.tag == b'D'), "{answer:?}");
    drop(second);
    proxy.assert_no_leaks().await;
    proxy.stop().await;
}
