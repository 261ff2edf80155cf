//! Transaction pooling: many clients share a few servers, and each keeps its own session.
//! The tests of what a session keeps and leaves run on both session engines (an unsharded
//! and a sharded database, `common::shards::Engine`).

// The test bodies run once per session engine from helper functions, outside `#[test]`.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::shards::{Engine, ENGINES};
use common::*;
use futures_util::future::join_all;
use tokio_postgres::SimpleQueryMessage;

fn transaction_config(pg: &harness::Cluster, pool_size: u32) -> ConfigBuilder {
    ConfigBuilder::new(pg)
        .pool("pool_mode = \"transaction\"")
        .pool(&format!("pool_size = {pool_size}"))
        .pool("checkout_timeout = \"60s\"")
}

/// The values of a one-row simple query, in order.
async fn row(client: &tokio_postgres::Client, sql: &str) -> Vec<String> {
    let row = first_row(client, sql).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
    assert!(!row.is_empty(), "{sql}: no row");
    row
}

const CHECK: &str = "SELECT current_setting('search_path'), current_setting('TimeZone'), \
                     current_setting('application_name'), current_setting('statement_timeout')";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_client_keeps_its_own_settings_over_five_servers() {
    const CLIENTS: usize = 200;
    const TRANSACTIONS: usize = 50;
    let pg = start_pg_with(harness::ClusterOptions::default().max_connections(300));
    let proxy = TestProxy::start(&transaction_config(&pg, 5)).await;
    let zones = ["UTC", "Europe/Paris", "Asia/Tokyo", "America/New_York", "Australia/Sydney"];
    let tasks = (0..CLIENTS).map(|i| {
        let base = proxy.conninfo(USER, PASSWORD, DB);
        async move {
            let zone = zones[i % zones.len()];
            // Half the clients bring their settings in the startup packet, half SET them.
            let at_startup = i % 2 == 0;
            let conninfo = if at_startup {
                format!(
                    "{base} application_name=c{i} options='-c search_path=s{i},public -c TimeZone={zone} -c statement_timeout={}'",
                    1001 + i
                )
            } else {
                base
            };
            let client = connect(&conninfo).await.expect("connect");
            if !at_startup {
                client
                    .batch_execute(&format!(
                        "SET application_name = 'c{i}'; SET search_path = s{i}, public; \
                         SET TimeZone = '{zone}'; SET statement_timeout = {}",
                        1001 + i
                    ))
                    .await
                    .expect("SET");
            }
            // PostgreSQL keeps a startup value as written and normalises a SET one.
            let search_path = if at_startup { format!("s{i},public") } else { format!("s{i}, public") };
            let expected = vec![search_path, zone.to_owned(), format!("c{i}"), format!("{}ms", 1001 + i)];
            for t in 0..TRANSACTIONS {
                // Alternate implicit and explicit transactions.
                let got = if t % 2 == 0 {
                    row(&client, CHECK).await
                } else {
                    let messages = client.simple_query(&format!("BEGIN; {CHECK}; COMMIT")).await.expect("tx");
                    let r = messages
                        .iter()
                        .find_map(|m| match m {
                            SimpleQueryMessage::Row(r) => {
                                Some((0..r.len()).map(|c| r.get(c).unwrap_or("").to_owned()).collect::<Vec<_>>())
                            }
                            _ => None,
                        })
                        .expect("row");
                    r
                };
                assert_eq!(got, expected, "client {i} transaction {t}");
            }
        }
    });
    join_all(tasks).await;
    let created = proxy.servers_created();
    assert!(created <= 5, "at most the pool size of servers were used, got {created}");
    proxy.assert_no_leaks().await;
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rolled_back_and_reset_settings_behave_as_on_a_dedicated_server() {
    for engine in ENGINES {
        rolled_back_and_reset_settings_behave_as_on_a_dedicated_server_on(engine).await;
    }
}

async fn rolled_back_and_reset_settings_behave_as_on_a_dedicated_server_on(engine: Engine) {
    eprintln!("-- the {engine:?} session engine");
    let pg = start_pg();
    let proxy = engine.start(&transaction_config(&pg, 2), &pg).await;
    let conninfo = format!("{} application_name=startup-name", proxy.conninfo(USER, PASSWORD, DB));
    let client = connect(&conninfo).await.unwrap();
    // Keep the other server busy with someone else's settings, so servers really switch.
    let other =
        connect(&format!("{} options='-c search_path=pg_catalog'", proxy.conninfo(USER, PASSWORD, DB)))
            .await
            .unwrap();
    client.batch_execute("BEGIN; SET search_path = rolled_back; ROLLBACK").await.unwrap();
    assert_eq!(row(&client, "SHOW search_path").await, ["\"$user\", public"]);
    client.batch_execute("SET application_name = 'changed'").await.unwrap();
    for _ in 0..5 {
        assert_eq!(row(&other, "SHOW search_path").await, ["pg_catalog"]);
        assert_eq!(row(&client, "SHOW application_name").await, ["changed"]);
    }
    // RESET returns to the startup value, as it would on a dedicated server.
    client.batch_execute("RESET application_name").await.unwrap();
    assert_eq!(row(&client, "SHOW application_name").await, ["startup-name"]);
    client.batch_execute("SET work_mem = '7MB'; RESET ALL").await.unwrap();
    assert_eq!(
        row(&client, "SELECT current_setting('application_name'), current_setting('work_mem')").await,
        ["startup-name", "4MB"]
    );
    // A failed SET changes nothing.
    assert!(client.batch_execute("SET work_mem = 'bogus'").await.is_err());
    assert_eq!(row(&client, "SHOW work_mem").await, ["4MB"]);
    drop((client, other));
    proxy.assert_no_leaks().await;
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_advisory_locks_pin_and_never_outlive_their_client() {
    for engine in ENGINES {
        session_advisory_locks_pin_and_never_outlive_their_client_on(engine).await;
    }
}

async fn session_advisory_locks_pin_and_never_outlive_their_client_on(engine: Engine) {
    eprintln!("-- the {engine:?} session engine");
    let pg = start_pg();
    let proxy = engine.start(&transaction_config(&pg, 3), &pg).await;
    let a = proxy.connect(USER, PASSWORD, DB).await;
    let b = proxy.connect(USER, PASSWORD, DB).await;
    assert_eq!(row(&a, "SELECT pg_advisory_lock(4242)::text").await, [""]);
    for _ in 0..3 {
        assert_eq!(row(&b, "SELECT pg_try_advisory_lock(4242)").await, ["f"], "B must not get A's lock");
        // A keeps its lock across transactions: it is pinned to its server.
        assert_eq!(
            row(&a, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()")
                .await,
            ["1"]
        );
    }
    assert_eq!(row(&a, "SELECT pg_advisory_unlock(4242)").await, ["t"]);
    assert_eq!(row(&b, "SELECT pg_try_advisory_lock(4242)").await, ["t"]);
    assert_eq!(row(&b, "SELECT pg_advisory_unlock(4242)").await, ["t"]);
    // A takes the lock again and leaves without unlocking: it must not stay on any server.
    assert_eq!(row(&a, "SELECT pg_try_advisory_lock(4242)").await, ["t"]);
    drop(a);
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        if row(&b, "SELECT pg_try_advisory_lock(4242)").await == ["t"] {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "A's lock outlived A");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let pins = proxy.app.pools.all()[0].stats.pins[pgvia::pool::PinReason::AdvisoryLock.index()]
        .load(std::sync::atomic::Ordering::Relaxed);
    assert!(pins >= 2, "pins are counted in the pool's stats, got {pins}");
    drop(b);
    proxy.assert_no_leaks().await;
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_killed_mid_transaction_leaves_nothing_behind() {
    for engine in ENGINES {
        a_client_killed_mid_transaction_leaves_nothing_behind_on(engine).await;
    }
}

async fn a_client_killed_mid_transaction_leaves_nothing_behind_on(engine: Engine) {
    eprintln!("-- the {engine:?} session engine");
    let pg = start_pg();
    let proxy = engine.start(&transaction_config(&pg, 1), &pg).await;
    let setup = proxy.connect(USER, PASSWORD, DB).await;
    setup.batch_execute("CREATE TABLE killed (x int)").await.unwrap();
    drop(setup);
    let victim = proxy.connect(USER, PASSWORD, DB).await;
    victim.batch_execute("SET statement_timeout = 1234; BEGIN; INSERT INTO killed VALUES (1)").await.unwrap();
    drop(victim);
    // Pool of one: the next client gets the very server the victim left.
    let next = proxy.connect(USER, PASSWORD, DB).await;
    assert_eq!(row(&next, "SELECT count(*) FROM killed").await, ["0"]);
    assert_eq!(row(&next, "SHOW statement_timeout").await, ["0"]);
    assert_eq!(
        row(&next, "SELECT count(*) FROM pg_stat_activity WHERE state = 'idle in transaction'").await,
        ["0"]
    );
    drop(next);
    proxy.assert_no_leaks().await;
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_cancels_never_hit_another_clients_query() {
    const RACES: usize = 1000;
    let pg = start_pg();
    // One server: A and B take turns on it, so any misdirected cancel would land on B.
    let proxy = TestProxy::start(&transaction_config(&pg, 1)).await;
    let a = proxy.connect(USER, PASSWORD, DB).await;
    let b = proxy.connect(USER, PASSWORD, DB).await;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let victim = {
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut runs = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                if let Err(e) = b.simple_query("SELECT count(*) FROM generate_series(1, 20000)").await {
                    panic!("B's query failed after {runs} runs: {e} ({:?})", sqlstate(&e));
                }
                runs += 1;
            }
            runs
        })
    };
    let token = a.cancel_token();
    let mut cancelled_own = 0;
    for _ in 0..RACES {
        // The cancel races A's own short query: it may cancel it, or arrive after it ended.
        let (result, _) = tokio::join!(a.simple_query("SELECT 1"), token.cancel_query(tokio_postgres::NoTls));
        match result {
            Ok(_) => {}
            Err(e) if sqlstate(&e).as_deref() == Some("57014") => cancelled_own += 1,
            Err(e) => panic!("A's query failed unexpectedly: {e}"),
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let runs = victim.await.expect("B never saw a cancel meant for A");
    assert!(runs > 0);
    eprintln!("{RACES} races: A's own query cancelled {cancelled_own} times; B ran {runs} queries untouched");
    proxy.assert_no_leaks().await;
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pipeline_keeps_its_server_until_every_sync_is_answered() {
    let pg = start_pg();
    let proxy = TestProxy::start(&transaction_config(&pg, 2)).await;
    let client = proxy.connect(USER, PASSWORD, DB).await;
    // tokio-postgres pipelines concurrent queries, each with its own Sync; the backend pid
    // must not change within one burst only because the pool got a chance to switch, and an
    // error in the middle must fail exactly that query.
    for _ in 0..20 {
        let queries = (0..10).map(|i| {
            let client = &client;
            async move {
                if i == 5 {
                    client.query_one("SELECT 1/0", &[]).await.map(|_| 0)
                } else {
                    client.query_one("SELECT $1::int", &[&i]).await.map(|r| r.get::<_, i32>(0))
                }
            }
        });
        let results = join_all(queries).await;
        for (i, r) in results.into_iter().enumerate() {
            if i == 5 {
                assert_eq!(sqlstate(&r.expect_err("division by zero")).as_deref(), Some("22012"));
            } else {
                assert_eq!(r.expect("query"), i as i32);
            }
        }
    }
    drop(client);
    proxy.assert_no_leaks().await;
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_begin_takes_no_server_and_keeps_its_options() {
    let pg = start_pg();
    let proxy = TestProxy::start(&transaction_config(&pg, 1).pool("checkout_timeout = \"3s\"")).await;
    let a = proxy.connect(USER, PASSWORD, DB).await;
    let b = proxy.connect(USER, PASSWORD, DB).await;
    a.batch_execute("BEGIN ISOLATION LEVEL SERIALIZABLE READ ONLY").await.unwrap();
    // A holds no server yet, so B gets the only one.
    assert_eq!(row(&b, "SELECT 1").await, ["1"]);
    assert_eq!(
        row(&a, "SELECT current_setting('transaction_isolation'), current_setting('transaction_read_only')")
            .await,
        ["serializable", "on"]
    );
    // Now A is inside a real transaction on the server: B must wait, and times out.
    let waited = b.simple_query("SELECT 2").await.expect_err("pool of one is held by A's transaction");
    assert_eq!(sqlstate(&waited).as_deref(), Some("53300"));
    a.batch_execute("COMMIT").await.unwrap();
    // An empty transaction never needs a server at all.
    let created = proxy.app.pools.all()[0].stats.checkouts.load(std::sync::atomic::Ordering::Relaxed);
    a.batch_execute("START TRANSACTION").await.unwrap();
    a.batch_execute("ROLLBACK").await.unwrap();
    let after = proxy.app.pools.all()[0].stats.checkouts.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(created, after, "BEGIN; ROLLBACK took a server");
    drop((a, b));
    proxy.assert_no_leaks().await;
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_gone_right_after_its_last_message_leaves_a_clean_server() {
    for engine in ENGINES {
        a_client_gone_right_after_its_last_message_leaves_a_clean_server_on(engine).await;
    }
}

async fn a_client_gone_right_after_its_last_message_leaves_a_clean_server_on(engine: Engine) {
    eprintln!("-- the {engine:?} session engine");
    use common::raw::{bind, close_statement, execute, parse, query, sync, RawConn};
    let pg = start_pg();
    let proxy = engine.start(&transaction_config(&pg, 1), &pg).await;
    // Each client sends its last messages and closes its socket at once (a driver whose
    // runtime shuts down right after dropping a statement): the relay learns of the close
    // before it wrote the messages to the server. The server must still get them, answer,
    // and be reset clean for the next client, not wait out the reset timeout and be closed.
    let goodbyes: [Vec<u8>; 3] = [
        query("SELECT 1"),
        [close_statement("s0"), sync()].concat(),
        [parse("", "SELECT $1::int"), bind("", "", &[Some("7")]), execute("", 0), sync()].concat(),
    ];
    for round in 0..30 {
        let mut conn = RawConn::login(proxy.addr, USER, PASSWORD, DB).await.expect("login");
        conn.send(&goodbyes[round % goodbyes.len()]).await;
        drop(conn);
    }
    let client = proxy.connect(USER, PASSWORD, DB).await;
    assert_eq!(row(&client, "SELECT 1").await, ["1"]);
    drop(client);
    proxy.assert_no_leaks().await;
    let pool = &proxy.app.pools.all()[0];
    assert_eq!(pool.stats.resets_failed.load(std::sync::atomic::Ordering::Relaxed), 0);
    assert_eq!(proxy.servers_created(), 1, "the one server was closed and replaced");
    proxy.stop().await;
}

/// `thread_layout = "per_core"`: clients accepted by different threads share one server, which
/// moves to the thread of whichever client takes it. It stays one server, counted once, and
/// every client still sees only its own settings.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_server_follows_its_clients_over_every_client_thread() {
    let pg = start_pg();
    let config =
        transaction_config(&pg, 1).general("worker_threads = 3").general("thread_layout = \"per_core\"");
    let proxy = TestProxy::start(&config).await;
    let mut pids = std::collections::HashSet::new();
    // The kernel spreads connections over the three listeners by their addresses: thirty all
    // on one thread would be a chance of 3 in 3^30.
    for _ in 0..30 {
        let client = proxy.connect(USER, PASSWORD, DB).await;
        pids.insert(row(&client, "SELECT pg_backend_pid()").await[0].clone());
    }
    let tasks = (0..12).map(|i| {
        let conninfo = proxy.conninfo(USER, PASSWORD, DB);
        async move {
            let client = connect(&conninfo).await.expect("connect through pgvia");
            let mut pids = Vec::new();
            for n in 0..20 {
                let value = format!("c{i}n{n}");
                client.batch_execute("BEGIN").await.expect("BEGIN");
                client
                    .batch_execute(&format!("SET LOCAL application_name = '{value}'"))
                    .await
                    .expect("SET LOCAL");
                let got = row(&client, "SELECT current_setting('application_name'), pg_backend_pid()").await;
                client.batch_execute("COMMIT").await.expect("COMMIT");
                assert_eq!(got[0], value, "client {i} saw another client's setting");
                pids.push(got[1].clone());
            }
            pids
        }
    });
    for client_pids in join_all(tasks).await {
        pids.extend(client_pids);
    }
    assert_eq!(pids.len(), 1, "one server for everyone: {pids:?}");
    assert_eq!(proxy.servers_created(), 1);
    proxy.assert_no_leaks().await;
    let pool = &proxy.app.pools.all()[0];
    let moved = pool.stats.servers_moved.load(std::sync::atomic::Ordering::Relaxed);
    assert!(moved > 0, "the server never moved between threads");
    assert_eq!(pool.stats.servers_idle.load(std::sync::atomic::Ordering::Relaxed), 1);
    assert_eq!(pool.idle_servers().len(), 1);
    proxy.stop().await;
}

/// The work-stealing layout still serves: clients, a pool, a clean shutdown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_work_stealing_layout_serves_as_before() {
    let pg = start_pg();
    let config = transaction_config(&pg, 2).general("thread_layout = \"work_stealing\"");
    let proxy = TestProxy::start(&config).await;
    let tasks = (0..8).map(|_| {
        let conninfo = proxy.conninfo(USER, PASSWORD, DB);
        async move {
            let client = connect(&conninfo).await.expect("connect through pgvia");
            for _ in 0..10 {
                assert_eq!(row(&client, "SELECT 1").await, ["1"]);
            }
        }
    });
    join_all(tasks).await;
    proxy.assert_no_leaks().await;
    // Eight clients over a pool of two: they shared the servers.
    assert!(proxy.servers_created() <= 2, "{} servers opened", proxy.servers_created());
    proxy.stop().await;
}

/// Clients waiting for a server on both client threads, many of them giving up (a short
/// `checkout_timeout`) while servers are handed from client to client on each thread: every
/// client is either served or told 53300, and no server is lost or replaced on the way (a
/// server handed to a client that stopped waiting goes back to the pool).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_handed_between_waiting_clients_are_never_lost() {
    let pg = start_pg();
    let config = ConfigBuilder::new(&pg)
        .pool("pool_mode = \"transaction\"")
        .pool("pool_size = 2")
        .pool("checkout_timeout = \"150ms\"")
        .general("worker_threads = 2")
        .general("thread_layout = \"per_core\"");
    let proxy = TestProxy::start(&config).await;
    let tasks = (0..24).map(|i| {
        let conninfo = proxy.conninfo(USER, PASSWORD, DB);
        async move {
            let refused_with = |e: tokio_postgres::Error| {
                let code = e.as_db_error().map(|d| d.code().code().to_owned());
                assert_eq!(code.as_deref(), Some("53300"), "client {i}: {e}");
            };
            // A login waits for a server too (the pool learns its welcome from the first).
            let client = match connect(&conninfo).await {
                Ok(client) => client,
                Err(e) => {
                    refused_with(e);
                    return (0, 1);
                }
            };
            let (mut served, mut refused) = (0, 0);
            for _ in 0..6 {
                match client.simple_query("SELECT pg_sleep(0.02)").await {
                    Ok(_) => served += 1,
                    Err(e) => {
                        refused_with(e);
                        refused += 1;
                        // A refused client is closed.
                        break;
                    }
                }
            }
            (served, refused)
        }
    });
    let results = join_all(tasks).await;
    let served: i32 = results.iter().map(|r| r.0).sum();
    let refused: i32 = results.iter().map(|r| r.1).sum();
    assert!(served > 0, "no client was served");
    assert!(refused > 0, "no client gave up waiting: the test did not test");
    proxy.assert_no_leaks().await;
    assert_eq!(
        proxy.servers_created(),
        2,
        "a server was lost and replaced ({served} served, {refused} refused)"
    );
    let pool = &proxy.app.pools.all()[0];
    assert_eq!(pool.stats.servers_idle.load(std::sync::atomic::Ordering::Relaxed), 2);
    assert_eq!(pool.idle_servers().len(), 2);
    proxy.stop().await;
}
