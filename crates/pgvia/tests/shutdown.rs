//! Graceful shutdown. The pgvia binary on SIGTERM: idle clients are told 57P01 at once, new
//! connections are refused, a client in a transaction may finish it (and its data is kept),
//! then the process exits with status 0 within `shutdown_timeout`. In process: a transaction
//! still open when `shutdown_timeout` runs out is ended with 57P01 and rolled back.

// Helpers outside #[test] functions unwrap too: a failed step is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::raw::{describe, RawConn};
use common::{connect, sqlstate, start_pg, ConfigBuilder, TestProxy, DB, PASSWORD, USER};
use tokio::sync::oneshot;

/// The pgvia binary, killed if the test fails before it exits.
struct PgviaProcess {
    child: Child,
    addr: SocketAddr,
    log: std::path::PathBuf,
}

impl Drop for PgviaProcess {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

impl PgviaProcess {
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// Starts the binary on a free port. Validation rejects port 0, so a port is picked here;
/// if another process takes it first, pgvia exits and this tries another.
async fn spawn_pgvia(dir: &Path, builder: &ConfigBuilder) -> PgviaProcess {
    for _ in 0..5 {
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let config = dir.join("pgvia.toml");
        std::fs::write(&config, builder.clone().general(&format!("listen_port = {port}")).toml()).unwrap();
        let log = dir.join("pgvia.log");
        let out = std::fs::File::create(&log).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_pgvia"))
            .arg("--config")
            .arg(&config)
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .expect("spawn pgvia");
        let mut process = PgviaProcess { child, addr: SocketAddr::from(([127, 0, 0, 1], port)), log };
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if tokio::net::TcpStream::connect(process.addr).await.is_ok() {
                return process;
            }
            if let Ok(Some(status)) = process.child.try_wait() {
                eprintln!("pgvia exited ({status}) at start, retrying on another port:\n{}", process.log());
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    panic!("could not start the pgvia binary");
}

async fn wait_exit(process: &mut PgviaProcess, limit: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = process.child.try_wait().unwrap() {
            return status;
        }
        assert!(Instant::now() < deadline, "pgvia still running after {limit:?}:\n{}", process.log());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_lets_transactions_finish_then_exits_cleanly() {
    let pg = start_pg();
    pg.psql(DB, "create table t (id int); alter table t owner to app;").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config =
        ConfigBuilder::new(&pg).general("shutdown_timeout = \"10s\"").general("log_level = \"info\"");
    let mut pgvia = spawn_pgvia(dir.path(), &config).await;
    let conninfo =
        format!("host=127.0.0.1 port={} user={USER} password={PASSWORD} dbname={DB}", pgvia.addr.port());

    // A client inside a transaction, and two idle ones (raw, and tokio-postgres).
    let tx = connect(&conninfo).await.unwrap();
    tx.batch_execute("begin; insert into t values (1)").await.unwrap();
    let mut idle = RawConn::login(pgvia.addr, USER, PASSWORD, DB).await.unwrap();
    let (idle_client, idle_conn) = tokio_postgres::connect(&conninfo, tokio_postgres::NoTls).await.unwrap();
    let (idle_end_tx, idle_end) = oneshot::channel();
    tokio::spawn(async move {
        let _ = idle_end_tx.send(idle_conn.await);
    });

    let term = Instant::now();
    assert!(Command::new("kill").args(["-TERM", &pgvia.child.id().to_string()]).status().unwrap().success());

    // Idle clients are told at once why they are being disconnected.
    let msg = idle.recv_within(Duration::from_secs(3)).await.expect("an error before the connection closes");
    let fields = msg.fields();
    assert_eq!(
        (msg.tag, fields.get(&'S').map(String::as_str)),
        (b'E', Some("FATAL")),
        "{:?}",
        describe(std::slice::from_ref(&msg))
    );
    assert_eq!(msg.sqlstate().as_deref(), Some("57P01"));
    assert!(idle.until_closed(Duration::from_secs(3)).await.is_some_and(|rest| rest.is_empty()));
    let end = tokio::time::timeout(Duration::from_secs(3), idle_end)
        .await
        .expect("idle tokio-postgres client ended");
    let err = end.unwrap().expect_err("connection ends with an error");
    assert_eq!(sqlstate(&err).as_deref(), Some("57P01"), "{err}");
    assert!(idle_client.is_closed());

    // New connections are refused.
    for _ in 0..3 {
        assert!(
            tokio::net::TcpStream::connect(pgvia.addr).await.is_err(),
            "pgvia accepted a connection while draining"
        );
    }

    // The transaction carries on and commits.
    tx.execute("insert into t values (2)", &[]).await.expect("insert during shutdown");
    let n: i64 = tx.query_one("select count(*) from t", &[]).await.unwrap().get(0);
    assert_eq!(n, 2);
    tx.batch_execute("commit").await.expect("commit during shutdown");
    assert_eq!(pg.psql(DB, "select array_agg(id order by id) from t").unwrap(), "{1,2}");

    // With that the last client is done: pgvia exits, cleanly and in time.
    let status = wait_exit(&mut pgvia, Duration::from_secs(10).saturating_sub(term.elapsed())).await;
    assert!(status.success(), "pgvia exited with {status}:\n{}", pgvia.log());
    assert!(term.elapsed() < Duration::from_secs(10));
    // The transaction's client was let go once it committed, also with 57P01.
    let err = tx.batch_execute("select 1").await.expect_err("session is over");
    assert!(err.is_closed() || sqlstate(&err).as_deref() == Some("57P01"), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transaction_still_open_at_shutdown_timeout_is_rolled_back() {
    let pg = start_pg();
    pg.psql(DB, "create table t (id int); alter table t owner to app;").unwrap();
    let proxy = TestProxy::start(&ConfigBuilder::new(&pg).general("shutdown_timeout = \"1s\"")).await;
    let mut tx = RawConn::login(proxy.addr, USER, PASSWORD, DB).await.unwrap();
    tx.send(&common::raw::query("begin; insert into t values (1)")).await;
    let replies = tx.until_ready().await;
    assert_eq!(replies.last().unwrap().body[..], b"T"[..], "in a transaction");
    let app = proxy.app.clone();

    let started = Instant::now();
    let stopping = tokio::spawn(proxy.stop());
    let msg = tx.recv_within(Duration::from_secs(5)).await.expect("an error before the connection closes");
    let waited = started.elapsed();
    assert_eq!(msg.sqlstate().as_deref(), Some("57P01"), "{:?}", describe(std::slice::from_ref(&msg)));
    assert!(waited >= Duration::from_millis(900), "closed after {waited:?}, before shutdown_timeout");
    assert!(waited < Duration::from_secs(4), "closed after {waited:?}");
    assert!(tx.until_closed(Duration::from_secs(3)).await.is_some());
    tokio::time::timeout(Duration::from_secs(5), stopping).await.expect("run() returned").unwrap();

    assert_eq!(pg.psql(DB, "select count(*) from t").unwrap(), "0", "the open transaction was rolled back");
    common::assert_pools_drained(&app).await;
    assert_eq!(app.active_sessions(), 0);
}
