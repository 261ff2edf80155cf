//! A dead server never reaches a client: servers whose backends were terminated from outside
//! while idle in the pool (as `pg_terminate_backend`, `idle_session_timeout`, a restart or a
//! failover do) are dropped at checkout, or, when they die as the client's first request
//! reaches them, the request runs on another server. The client sees nothing of it.

// Helpers outside #[test] functions unwrap too: a failed step is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::ops::{admin_user, console};
use common::{connect, direct_conninfo, start_pg, ConfigBuilder, TestProxy, DB, PASSWORD, USER};
use tokio_postgres::Client;

const POOL_SIZE: usize = 20;
const CLIENTS: usize = 8;

fn config(pg: &harness::Cluster, mode: &str) -> ConfigBuilder {
    ConfigBuilder::new(pg)
        .pool(&format!("pool_mode = \"{mode}\""))
        .pool(&format!("pool_size = {POOL_SIZE}"))
        .pool("checkout_timeout = \"10s\"")
        .user(&admin_user())
}

/// A connection straight to PostgreSQL, as the operator who terminates backends.
/// tokio-postgres, with the reason its connection ended printed.
async fn connect_logged(conninfo: &str) -> Result<Client, tokio_postgres::Error> {
    let (client, conn) = tokio_postgres::connect(conninfo, tokio_postgres::NoTls).await?;
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            eprintln!("connection ended: {e:?}");
        }
    });
    Ok(client)
}

/// A client error with the server's SQLSTATE and message when there is one.
fn describe(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(d) => format!("{} {}: {}", d.severity(), d.code().code(), d.message()),
        None => format!("{e:?}"),
    }
}

async fn direct(pg: &harness::Cluster) -> Client {
    connect(&direct_conninfo(pg, USER, PASSWORD, DB)).await.unwrap()
}

/// Terminates every backend of user `app` but the caller's; returns how many.
async fn terminate_all(operator: &Client) -> usize {
    let sql = format!(
        "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity \
         WHERE usename = '{USER}' AND pid <> pg_backend_pid()"
    );
    let row = operator.query_one(sql.as_str(), &[]).await.unwrap();
    row.get::<_, i64>(0) as usize
}

/// Terminates the backends of the servers idle in pgvia's pools right now that PostgreSQL
/// also sees idle (a client may have taken one since: terminating a backend in the middle of
/// a request fails that request, through pgvia or not); returns how many.
async fn terminate_pool_idle(proxy: &TestProxy, operator: &Client) -> usize {
    let pids: Vec<i32> =
        proxy.app.pools.all().iter().flat_map(|p| p.idle_servers()).map(|s| s.process_id as i32).collect();
    let row = operator
        .query_one(
            "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity \
             WHERE pid = ANY($1::int[]) AND state = 'idle'",
            &[&pids],
        )
        .await
        .unwrap();
    row.get::<_, i64>(0) as usize
}

/// Backends of user `app` still alive, but the caller's.
async fn backends(operator: &Client) -> i64 {
    let sql =
        format!("SELECT count(*) FROM pg_stat_activity WHERE usename = '{USER}' AND pid <> pg_backend_pid()");
    operator.query_one(sql.as_str(), &[]).await.unwrap().get(0)
}

/// `CLIENTS` clients, logged in.
async fn clients(proxy: &TestProxy) -> Vec<Client> {
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        clients.push(proxy.connect(USER, PASSWORD, DB).await);
    }
    clients
}

/// Each client runs a query at once, holds on a moment (so they hold distinct servers in
/// session mode), runs another and leaves; returns the errors.
async fn wave(clients: Vec<Client>) -> Vec<String> {
    let tasks: Vec<_> = clients
        .into_iter()
        .enumerate()
        .map(|(i, client)| {
            tokio::spawn(async move {
                let rows = client
                    .query("SELECT pg_backend_pid(), $1::int", &[&(i as i32)])
                    .await
                    .map_err(|e| format!("client {i}: query: {}", describe(&e)))?;
                assert_eq!(rows[0].get::<_, i32>(1), i as i32);
                tokio::time::sleep(Duration::from_millis(50)).await;
                client
                    .simple_query("SELECT 1")
                    .await
                    .map_err(|e| format!("client {i}: second query: {}", describe(&e)))?;
                Ok::<_, String>(())
            })
        })
        .collect();
    let mut errors = Vec::new();
    for t in tasks {
        if let Err(e) = t.await.unwrap() {
            errors.push(e);
        }
    }
    errors
}

/// Waits until the pool has no server checked out; returns how many are idle.
async fn settle(proxy: &TestProxy) -> usize {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let pools = proxy.app.pools.all();
        let (idle, active): (usize, usize) = pools.iter().fold((0, 0), |(i, a), p| {
            (
                i + p.stats.servers_idle.load(Ordering::Relaxed),
                a + p.stats.servers_active.load(Ordering::Relaxed),
            )
        });
        if active == 0 {
            return idle;
        }
        assert!(Instant::now() < deadline, "pool did not settle: {idle} idle, {active} active");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// [`settle`], then until PostgreSQL has as many backends as pgvia has idle servers: servers
/// still being reset count as neither active nor idle, and a server pgvia closed a moment
/// ago may still have its backend exiting. Returns the idle count.
async fn settle_with_postgres(proxy: &TestProxy, operator: &Client) -> usize {
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut idle = settle(proxy).await;
    while backends(operator).await as usize != idle && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
        idle = settle(proxy).await;
    }
    idle
}

/// The admin console's count of the pool's servers equals the backends PostgreSQL has.
/// Both sides are read again until they agree: a backend terminated just before the load
/// stopped leaves its server in the idle list until the maintenance tick (every second) or the
/// next checkout notices, and a terminated backend leaves pg_stat_activity a moment after it
/// is signalled.
async fn assert_servers_counted(pg: &harness::Cluster, proxy: &TestProxy, operator: &Client) {
    proxy.assert_no_leaks().await;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let pools = console(pg, proxy, "SHOW POOLS").await;
        let row = pools.row("database", DB);
        let (idle, active) = (pools.int(row, "sv_idle"), pools.int(row, "sv_active"));
        assert_eq!(active, 0, "{pools:?}");
        let servers = console(pg, proxy, "SHOW SERVERS").await;
        let db = servers.col("database");
        let listed = servers.rows.iter().filter(|r| r[db] == DB).count() as i64;
        let alive = backends(operator).await;
        if listed == idle && alive == idle {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "pgvia counts {idle} idle servers and lists {listed}, PostgreSQL has {alive} backends: {servers:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn terminated_idle_servers_never_reach_clients(mode: &str) {
    let pg = start_pg();
    let proxy = TestProxy::start(&config(&pg, mode)).await;
    let operator = direct(&pg).await;
    let mut total_killed = 0;
    for round in 0..3 {
        let errors = wave(clients(&proxy).await).await;
        assert!(errors.is_empty(), "round {round}, first wave: {errors:?}");
        let idle = settle_with_postgres(&proxy, &operator).await;
        assert!(idle >= 2, "round {round}: only {idle} servers idle");
        // Transaction mode: the next clients are logged in already, so their queries follow
        // the terminations as closely as they can. Session mode: a client takes its server
        // at login (it is told the backend's pid), so logging in is what follows them.
        let early = (mode != "session").then_some(clients(&proxy).await);
        let idle = settle_with_postgres(&proxy, &operator).await;
        let killed = terminate_all(&operator).await;
        assert_eq!(killed, idle, "round {round}: terminated {killed} backends, {idle} idle servers");
        let next = match early {
            Some(next) => next,
            None => clients(&proxy).await,
        };
        total_killed += killed;
        let errors = wave(next).await;
        assert!(
            errors.is_empty(),
            "{mode} mode, round {round}: {} of {CLIENTS} clients failed: {errors:?}",
            errors.len()
        );
    }
    assert_servers_counted(&pg, &proxy, &operator).await;
    let pools = proxy.app.pools.all();
    let closed: u64 = pools.iter().map(|p| p.stats.servers_closed.load(Ordering::Relaxed)).sum();
    assert!(closed >= total_killed as u64, "{total_killed} servers terminated, {closed} counted closed");
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_mode_drops_terminated_idle_servers() {
    terminated_idle_servers_never_reach_clients("session").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transaction_mode_drops_terminated_idle_servers() {
    terminated_idle_servers_never_reach_clients("transaction").await;
}

/// Clients looping short transactions while idle backends are terminated again and again
/// from outside: no client sees an error, and every acknowledged insert is there exactly
/// once. (Transaction mode: in session mode a server is idle in the pool only between
/// sessions, and a termination meant for one that a session took meanwhile ends that
/// session, as it would without pgvia.)
async fn idle_terminations_under_load(mode: &str) {
    let pg = start_pg();
    let proxy = TestProxy::start(&config(&pg, mode)).await;
    let operator = direct(&pg).await;
    let setup = &operator;
    setup.batch_execute("CREATE TABLE ledger (id serial PRIMARY KEY, client int, n int)").await.unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let conninfo = proxy.conninfo(USER, PASSWORD, DB);
    let workers: Vec<_> = (0..4)
        .map(|c| {
            let (stop, done, conninfo) = (stop.clone(), done.clone(), conninfo.clone());
            tokio::spawn(async move {
                let mut errors = Vec::new();
                let (mut n, mut acked) = (0, 0i64);
                while !stop.load(Ordering::Relaxed) {
                    // Session mode: a new session now and then, so servers change hands.
                    let client = match connect_logged(&conninfo).await {
                        Ok(c) => c,
                        Err(e) => {
                            errors.push(format!("connect: {e}"));
                            continue;
                        }
                    };
                    for _ in 0..20 {
                        n += 1;
                        let r =
                            client.execute("INSERT INTO ledger (client, n) VALUES ($1, $2)", &[&c, &n]).await;
                        match r {
                            Ok(_) => {
                                acked += 1;
                                done.fetch_add(1, Ordering::Relaxed);
                            }
                            Err(e) => {
                                errors.push(format!("client {c}, insert {n}: {}", describe(&e)));
                                break;
                            }
                        }
                        tokio::time::sleep(Duration::from_millis(2)).await;
                    }
                }
                (c, acked, errors)
            })
        })
        .collect();
    let started = Instant::now();
    let mut terminated = 0;
    while started.elapsed() < Duration::from_secs(4) {
        tokio::time::sleep(Duration::from_millis(100)).await;
        terminated += terminate_pool_idle(&proxy, &operator).await;
    }
    stop.store(true, Ordering::Relaxed);
    let mut errors = Vec::new();
    let mut ledgers = Vec::new();
    for w in workers {
        let (c, acked, e) = w.await.unwrap();
        ledgers.push((c, acked, e.len() as i64));
        errors.extend(e);
    }
    // PostgreSQL reports a backend idle until it starts on the next message, so now and then
    // a backend terminated as "idle" has just begun a client's request, and answered part of
    // it (seen in traces: BindComplete, CommandComplete, then the FATAL): that request fails,
    // as it would without pgvia. Idle-in-the-pool terminations must cost nothing; these rare
    // ones are allowed, 1 in 20 at most (without the fix: several per termination).
    assert!(
        errors.len() * 20 <= terminated,
        "{mode} mode, {terminated} idle backends terminated: {} errors: {errors:?}",
        errors.len()
    );
    for (c, acked, failed) in ledgers {
        // Every insert acknowledged is there, exactly once.
        let rows: i64 = setup
            .query_one("SELECT count(DISTINCT n) FROM ledger WHERE client = $1", &[&c])
            .await
            .unwrap()
            .get(0);
        let all: i64 =
            setup.query_one("SELECT count(*) FROM ledger WHERE client = $1", &[&c]).await.unwrap().get(0);
        assert_eq!(rows, all, "client {c}: an insert ran twice");
        // An insert that failed may or may not have committed; an acknowledged one has.
        assert!(
            (acked..=acked + failed).contains(&all),
            "client {c}: {acked} inserts acknowledged, {failed} failed, {all} rows"
        );
    }
    assert!(terminated > 10, "only {terminated} backends terminated: the test did not test");
    assert!(done.load(Ordering::Relaxed) > 100, "too few transactions ran");
    assert_servers_counted(&pg, &proxy, &operator).await;
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transaction_mode_survives_idle_terminations_under_load() {
    idle_terminations_under_load("transaction").await;
}
