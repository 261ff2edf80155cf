//! However a client leaves, it gets the outcome a direct connection gives, and its server is
//! freed and reused.
//!
//! A raw-protocol client sends an `INSERT` as Parse/Bind/Execute and a Flush (no Sync), so
//! PostgreSQL holds it in an implicit transaction, then leaves: socket closed, Terminate, an
//! invalid message, `idle_in_transaction_timeout`, `KILL_CLIENT`, shutdown, a statement-mode
//! refusal. The same script runs directly against PostgreSQL in the same test, which rolls
//! the insert back; through pgvia it must be rolled back too (never committed by a Sync sent
//! on the client's behalf), and the pool of one must reuse its server (no new server, no
//! failed reset). Then a client that holds a lock and stops reading a large result must not
//! keep its server past a time limit or a kill.

#![allow(clippy::unwrap_used)]

mod common;

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::ops::{admin_user, console};
use common::raw::{bind, describe, execute, flush, frame, parse, query, terminate, Msg, RawConn};
use common::shards::{Engine, ENGINES};
use common::*;
use harness::Cluster;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Leave {
    /// The client closes its socket.
    Eof,
    Terminate,
    /// A message with a tag the protocol does not have.
    InvalidFrame,
    /// `idle_in_transaction_timeout` (pgvia) / `pg_terminate_backend` directly: PostgreSQL's
    /// own `idle_in_transaction_session_timeout` is armed only when it sends ReadyForQuery, so
    /// it never ends an implicit transaction left open after a Flush.
    IdleTimeout,
    /// `KILL_CLIENT` on the admin console / `pg_terminate_backend` directly.
    Kill,
    /// pgvia shuts down (its `shutdown_timeout` passes) / `pg_terminate_backend` directly.
    Shutdown,
    /// Statement mode refuses a Parse of `BEGIN` inside the unsynced batch / the client
    /// closes its socket directly.
    Refusal,
}

/// Where the script runs.
enum Via<'a> {
    Direct,
    Pgvia(&'a TestProxy),
}

fn config(pg: &Cluster, mode: &str, leave: Leave) -> ConfigBuilder {
    let b = ConfigBuilder::new(pg)
        .pool(&format!("pool_mode = \"{mode}\""))
        .pool("pool_size = 1")
        .pool("checkout_timeout = \"20s\"")
        .general("shutdown_timeout = \"1s\"")
        .user(&admin_user());
    if leave == Leave::IdleTimeout {
        b.pool("idle_in_transaction_timeout = \"1s\"")
    } else {
        b
    }
}

fn direct_addr(pg: &Cluster) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], pg.port()))
}

/// Waits until the backend `pid` has exited, so its transaction is over one way or the other.
async fn backend_gone(pg: &Cluster, pid: i32) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while app_backends(pg).contains(&pid.to_string()) {
        assert!(Instant::now() < deadline, "backend {pid} still running");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Reads until the connection closes; returns the SQLSTATE of the FATAL among the messages.
async fn closed_with(conn: &mut RawConn) -> Option<String> {
    let msgs = conn.until_closed(Duration::from_secs(10)).await.expect("connection closed in time");
    let fatal = msgs.iter().find(|m| m.tag == b'E').map(Msg::sqlstate);
    fatal.flatten()
}

/// Sends an unsynced INSERT of `label`, optionally reads its replies, and leaves as `leave`
/// says. Returns the SQLSTATE the client was closed with, if any, or for a shutdown of pgvia,
/// the connection, for the caller that owns the proxy.
async fn run_script(pg: &Cluster, via: &Via<'_>, leave: Leave, read: bool, label: &str) -> Outcome {
    let addr = match via {
        Via::Direct => direct_addr(pg),
        Via::Pgvia(proxy) => proxy.addr,
    };
    let mut conn = RawConn::login(addr, USER, PASSWORD, DB).await.unwrap();
    let pid = conn.key.map(|(pid, _)| pid);
    // Slow enough that a client leaving at once leaves before the reply arrives.
    let insert = format!("INSERT INTO t SELECT '{label}' FROM pg_sleep(0.2)");
    conn.send(&[parse("", &insert), bind("", "", &[]), execute("", 0), flush()].concat()).await;
    if read {
        let mut tags = Vec::new();
        for _ in 0..3 {
            let m = conn.recv_within(Duration::from_secs(10)).await.expect("a reply");
            tags.push(m.tag);
        }
        assert_eq!(tags, b"12C", "{via_name} replies", via_name = name(via));
    }
    let terminate_directly = |pid: Option<i32>| {
        pg.psql(DB, &format!("SELECT pg_terminate_backend({})", pid.unwrap())).unwrap();
    };
    let code = match (via, leave) {
        (_, Leave::Eof) | (Via::Direct, Leave::Refusal) => {
            drop(conn);
            None
        }
        (_, Leave::Terminate) => {
            conn.send(&terminate()).await;
            drop(conn);
            None
        }
        (_, Leave::InvalidFrame) => {
            conn.send(&frame(b'z', b"")).await;
            closed_with(&mut conn).await
        }
        (Via::Pgvia(_), Leave::IdleTimeout) => closed_with(&mut conn).await,
        (Via::Direct, Leave::IdleTimeout | Leave::Kill | Leave::Shutdown) => {
            terminate_directly(pid);
            closed_with(&mut conn).await
        }
        (Via::Pgvia(proxy), Leave::Kill) => {
            let clients = console(pg, proxy, "SHOW CLIENTS").await;
            let row = clients.row("user", USER);
            console(pg, proxy, &format!("KILL_CLIENT {}", row[clients.col("id")])).await;
            closed_with(&mut conn).await
        }
        // The proxy is stopped by the caller, which owns it.
        (Via::Pgvia(_), Leave::Shutdown) => return Outcome::Open(conn),
        (Via::Pgvia(_), Leave::Refusal) => {
            conn.send(&parse("", "BEGIN")).await;
            closed_with(&mut conn).await
        }
    };
    if let (Via::Direct, Some(pid)) = (via, pid) {
        backend_gone(pg, pid).await;
    }
    Outcome::Closed(code)
}

enum Outcome {
    /// The client was closed, with this SQLSTATE if it was told one.
    Closed(Option<String>),
    /// Still open: pgvia is to be shut down.
    Open(RawConn),
}

impl Outcome {
    fn closed(self) -> Option<String> {
        match self {
            Outcome::Closed(code) => code,
            Outcome::Open(_) => panic!("the client was not closed"),
        }
    }
}

fn name(via: &Via<'_>) -> &'static str {
    match via {
        Via::Direct => "direct",
        Via::Pgvia(_) => "pgvia",
    }
}

fn count(pg: &Cluster, label: &str) -> String {
    pg.psql(DB, &format!("SELECT count(*) FROM t WHERE label = '{label}'")).unwrap()
}

/// Every way of leaving in `leaves`, with and without the replies read first, directly and
/// through a fresh pgvia (pool of one) in `mode`, on `engine`.
async fn leaving_rolls_back(mode: &str, leaves: &[Leave], engine: Engine) {
    let pg = start_pg();
    pg.psql(DB, "CREATE TABLE t (label text); ALTER TABLE t OWNER TO app;").unwrap();
    let mut failures = Vec::new();
    // The sharded session answers an extended-protocol batch at its Sync, not at a Flush
    // (docs/sharding.md): there the replies cannot be read before the client leaves.
    let reads: &[bool] = if engine == Engine::Sharded { &[false] } else { &[false, true] };
    for &leave in leaves {
        for &read in reads {
            let case = format!("{engine:?} {mode}/{leave:?}/{}", if read { "read" } else { "unread" });
            let direct_label = format!("direct {case}");
            let direct_code = run_script(&pg, &Via::Direct, leave, read, &direct_label).await.closed();
            assert_eq!(count(&pg, &direct_label), "0", "{case}: PostgreSQL rolls it back");

            let proxy = engine.start(&config(&pg, mode, leave), &pg).await;
            let label = format!("pgvia {case}");
            let outcome = run_script(&pg, &Via::Pgvia(&proxy), leave, read, &label).await;
            let app = proxy.app.clone();
            let created_before = proxy.servers_created();
            let code = if let Outcome::Open(mut conn) = outcome {
                // The session is left until shutdown_timeout, then ended.
                let (code, ()) = tokio::join!(closed_with(&mut conn), proxy.stop());
                code
            } else {
                // A fresh client of the pool of one gets the same server, once it is reset.
                let fresh = proxy.connect(USER, PASSWORD, DB).await;
                let sql = format!("SELECT count(*) FROM t WHERE label = '{label}'");
                let n: i64 = fresh.query_one(&sql, &[]).await.unwrap().get(0);
                assert_eq!(n.to_string(), count(&pg, &label));
                drop(fresh);
                proxy.assert_no_leaks().await;
                outcome.closed()
            };
            let pools = app.pools.all();
            let created: u64 = pools.iter().map(|p| p.stats.servers_created.load(Ordering::Relaxed)).sum();
            let failed: u64 = pools.iter().map(|p| p.stats.resets_failed.load(Ordering::Relaxed)).sum();
            let rows = count(&pg, &label);
            eprintln!(
                "{case}: direct closed with {direct_code:?}, pgvia with {code:?}; \
                 rows {rows}, servers created {created_before} -> {created}, resets failed {failed}"
            );
            let expected_code = match leave {
                Leave::Eof | Leave::Terminate => None,
                Leave::InvalidFrame => direct_code.clone(),
                Leave::IdleTimeout => Some("25P03".to_owned()),
                Leave::Kill | Leave::Shutdown => Some("57P01".to_owned()),
                Leave::Refusal => Some("0A000".to_owned()),
            };
            if code != expected_code {
                failures.push(format!("{case}: closed with {code:?}, expected {expected_code:?}"));
            }
            if rows != "0" || created != created_before || created != 1 || failed != 0 {
                failures
                    .push(format!("{case}: rows {rows}, servers created {created}, resets failed {failed}"));
            }
        }
    }
    assert!(failures.is_empty(), "not as a direct connection, or the server was not reused:\n{failures:#?}");
}

const LEAVES: [Leave; 6] =
    [Leave::Eof, Leave::Terminate, Leave::InvalidFrame, Leave::IdleTimeout, Leave::Kill, Leave::Shutdown];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_mode_rolls_back_however_the_client_leaves() {
    leaving_rolls_back("session", &LEAVES, Engine::Plain).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transaction_mode_rolls_back_however_the_client_leaves() {
    for engine in ENGINES {
        leaving_rolls_back("transaction", &LEAVES, engine).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statement_mode_refusal_rolls_back() {
    leaving_rolls_back("statement", &[Leave::Refusal, Leave::Eof], Engine::Plain).await;
}

/// How a client that stopped reading is ended.
#[derive(Debug, Clone, Copy)]
enum Ending {
    IdleTimeout,
    Kill,
}

/// Pool of one: a client takes a lock in a transaction, asks for a large result and stops
/// reading. Ended by `idle_in_transaction_timeout` or `KILL_CLIENT`, it must not keep the
/// server: another client gets it within 3 s, and no backend is left idle in transaction.
async fn stalled_reader_frees_its_server(ending: Ending) {
    let pg = start_pg();
    pg.psql(DB, "CREATE TABLE locked (a int); ALTER TABLE locked OWNER TO app;").unwrap();
    let mut b = ConfigBuilder::new(&pg)
        .pool("pool_mode = \"transaction\"")
        .pool("pool_size = 1")
        .pool("checkout_timeout = \"20s\"")
        .user(&admin_user());
    if let Ending::IdleTimeout = ending {
        b = b.pool("idle_in_transaction_timeout = \"1s\"");
    }
    let proxy = TestProxy::start(&b).await;

    let mut stalled = RawConn::login(proxy.addr, USER, PASSWORD, DB).await.unwrap();
    stalled.send(&query("BEGIN; LOCK TABLE locked IN ACCESS EXCLUSIVE MODE")).await;
    let reply = stalled.until_ready().await;
    assert_eq!(reply.last().unwrap().body[..], b"T"[..], "{:?}", describe(&reply));
    stalled.send(&query("SELECT repeat('x', 1000) FROM generate_series(1, 1000000)")).await;
    // From here on the client reads nothing.
    let started = Instant::now();

    let other = tokio::spawn({
        let conninfo = proxy.conninfo(USER, PASSWORD, DB);
        async move {
            let client = connect(&conninfo).await.unwrap();
            let n: i64 = client.query_one("SELECT count(*) FROM locked", &[]).await.unwrap().get(0);
            (n, Instant::now())
        }
    });
    if let Ending::Kill = ending {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let clients = console(&pg, &proxy, "SHOW CLIENTS").await;
        let ids: Vec<String> = clients
            .rows
            .iter()
            .filter(|r| r[clients.col("user")] == USER && r[clients.col("state")] == "active")
            .map(|r| r[clients.col("id")].clone())
            .collect();
        assert_eq!(ids.len(), 1, "the stalled client holds the only server: {clients:?}");
        console(&pg, &proxy, &format!("KILL_CLIENT {}", ids[0])).await;
    }
    let (n, got_at) = tokio::time::timeout(Duration::from_secs(6), other)
        .await
        .expect("another client got the server (the stalled client kept it)")
        .unwrap();
    let waited = got_at.duration_since(started);
    eprintln!("{ending:?}: the other client was served after {waited:?}");
    assert_eq!(n, 0);
    assert!(waited < Duration::from_secs(3), "the other client waited {waited:?}");
    let idle_in_tx =
        pg.psql(DB, "SELECT count(*) FROM pg_stat_activity WHERE state LIKE 'idle in transaction%'").unwrap();
    assert_eq!(idle_in_tx, "0");
    let pools = proxy.app.pools.all();
    let failed: u64 = pools.iter().map(|p| p.stats.resets_failed.load(Ordering::Relaxed)).sum();
    assert_eq!(failed, 0, "the server was reset, not closed");
    drop(stalled);
    proxy.assert_no_leaks().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_in_transaction_timeout_frees_a_stalled_readers_server() {
    stalled_reader_frees_its_server(Ending::IdleTimeout).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_client_frees_a_stalled_readers_server() {
    stalled_reader_frees_its_server(Ending::Kill).await;
}
