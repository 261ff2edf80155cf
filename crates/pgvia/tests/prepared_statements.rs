//! Prepared statements in transaction mode: clients keep their statement names while their
//! transactions run on whichever server is free, and see exactly what PostgreSQL would show
//! them on a server of their own.

// Helpers outside #[test] functions unwrap too: a failed step is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::raw::{self, summary, Msg, RawConn};
use common::{connect, start_pg, ConfigBuilder, TestProxy, DB, PASSWORD, USER};
use futures_util::future::join_all;

fn transaction_config(pg: &harness::Cluster, pool_size: u32) -> ConfigBuilder {
    ConfigBuilder::new(pg)
        .pool("pool_mode = \"transaction\"")
        .pool(&format!("pool_size = {pool_size}"))
        .pool("checkout_timeout = \"60s\"")
}

/// The summary of a DataRow with one text value.
fn one_value_row(value: &str) -> String {
    let mut body = vec![0u8, 1];
    body.extend_from_slice(&u32::try_from(value.len()).unwrap().to_be_bytes());
    body.extend_from_slice(value.as_bytes());
    summary(&Msg { tag: b'D', body: body.into() }).unwrap()
}

/// What a step waits for: ReadyForQuery messages, or a number of messages (after a Flush).
#[derive(Clone, Copy)]
enum Until {
    Ready(usize),
    Messages(usize),
}

struct Step {
    send: Vec<u8>,
    until: Until,
    /// Whether another client may use the server between this step and the next (never
    /// while this client's transaction is open, or the test would wait on itself).
    noise_after: bool,
}

fn step(parts: &[Vec<u8>], until: Until, noise_after: bool) -> Step {
    Step { send: parts.concat(), until, noise_after }
}

async fn exchange(conn: &mut RawConn, send: &[u8], until: Until) -> Vec<String> {
    conn.send(send).await;
    let mut out = Vec::new();
    let (mut readies, mut messages) = (0, 0);
    loop {
        let done = match until {
            Until::Ready(n) => readies == n,
            Until::Messages(n) => messages == n,
        };
        if done {
            return out;
        }
        let m = conn.recv_within(Duration::from_secs(10)).await.expect("connection open");
        readies += usize::from(m.tag == b'Z');
        if let Some(s) = summary(&m) {
            messages += 1;
            out.push(s);
        }
    }
}

/// Another client of the same one-server pool: it leaves its own unnamed statement and its
/// own statements, under the same names as the client under test, on the server.
async fn noise(conn: &mut RawConn, round: usize) {
    let name = format!("s{}", round % 4 + 1);
    let sql = format!("SELECT 'noise {round}'");
    let got = exchange(
        conn,
        &[
            raw::parse("", "SELECT 'unnamed noise'"),
            raw::bind("", "", &[]),
            raw::execute("", 0),
            raw::parse(&format!("{name}_{round}"), &sql),
            raw::bind("", &format!("{name}_{round}"), &[]),
            raw::execute("", 0),
            raw::sync(),
        ]
        .concat(),
        Until::Ready(1),
    )
    .await;
    assert!(got.iter().all(|m| !m.starts_with('E')), "noise failed: {got:?}");
}

fn script() -> Vec<Step> {
    use raw::*;
    use Until::*;
    vec![
        step(&[parse_typed("s1", "SELECT $1::int * 2", &[23]), sync()], Ready(1), true),
        step(&[bind("", "s1", &[Some("21")]), execute("", 0), sync()], Ready(1), true),
        step(&[describe_statement("s1"), sync()], Ready(1), true),
        // The unnamed statement survives other clients using the server in between.
        step(&[parse("", "SELECT $1::text || '!'"), sync()], Ready(1), true),
        step(&[bind("", "", &[Some("hi")]), execute("", 0), sync()], Ready(1), true),
        // An error mid-pipeline: what follows it up to Sync never happened.
        step(
            &[
                parse("s2", "SELECT 1/$1::int"),
                bind("", "s2", &[Some("0")]),
                execute("", 0),
                parse("s3", "SELECT 3"),
                bind("", "s3", &[]),
                execute("", 0),
                sync(),
            ],
            Ready(1),
            true,
        ),
        step(&[bind("", "s3", &[]), execute("", 0), sync()], Ready(1), true),
        step(&[bind("", "s2", &[Some("4")]), execute("", 0), sync()], Ready(1), true),
        // A name in use cannot be prepared again, in or out of a transaction.
        step(&[parse("s1", "SELECT 2"), sync()], Ready(1), true),
        step(&[query("BEGIN")], Ready(1), true),
        step(
            &[parse("s1", "SELECT 5"), bind("", "s1", &[Some("1")]), execute("", 0), sync()],
            Ready(1),
            false,
        ),
        step(&[bind("", "s1", &[Some("1")]), execute("", 0), sync()], Ready(1), false),
        step(&[query("ROLLBACK")], Ready(1), true),
        // asyncpg's way: Parse, Flush, read the reply, then the rest.
        step(&[parse("s4", "SELECT 4"), describe_statement("s4"), flush()], Messages(3), false),
        step(&[bind("", "s4", &[]), execute("", 0), sync()], Ready(1), true),
        // Close is answered whether or not the statement exists; a closed name is gone.
        step(&[close_statement("s1"), close_statement("never"), sync()], Ready(1), true),
        step(&[bind("", "s1", &[Some("1")]), execute("", 0), sync()], Ready(1), true),
        step(&[parse("s1", "SELECT 'again'"), bind("", "s1", &[]), execute("", 0), sync()], Ready(1), true),
        // A simple query replaces the unnamed statement.
        step(&[query("SELECT 1")], Ready(1), true),
        step(&[bind("", "", &[Some("x")]), execute("", 0), sync()], Ready(1), true),
        // DEALLOCATE ALL forgets every name of this client.
        step(&[query("DEALLOCATE ALL")], Ready(1), true),
        step(&[bind("", "s4", &[]), execute("", 0), sync()], Ready(1), true),
        step(&[parse("s4", "SELECT 'four'"), bind("", "s4", &[]), execute("", 0), sync()], Ready(1), true),
        // SQL-level statements share the names, and follow the client the same way.
        step(&[query("PREPARE q1(int) AS SELECT $1 * 3")], Ready(1), true),
        step(&[query("EXECUTE q1(5)")], Ready(1), true),
        step(&[query("PREPARE q1 AS SELECT 1")], Ready(1), true),
        step(&[query("PREPARE s4 AS SELECT 1")], Ready(1), true),
        step(&[bind("", "q1", &[Some("7")]), execute("", 0), sync()], Ready(1), true),
        step(&[query("DEALLOCATE q1")], Ready(1), true),
        step(&[query("EXECUTE q1(5)")], Ready(1), true),
        step(&[query("DEALLOCATE nope")], Ready(1), true),
        step(&[query("BEGIN")], Ready(1), true),
        step(&[query("PREPARE q2 AS SELECT 2")], Ready(1), false),
        step(&[query("EXECUTE q2")], Ready(1), false),
        step(&[query("PREPARE q2 AS SELECT 3")], Ready(1), false),
        step(&[query("EXECUTE q2")], Ready(1), false),
        step(&[query("ROLLBACK")], Ready(1), true),
        step(&[query("EXECUTE q2")], Ready(1), true),
        step(&[query("DEALLOCATE ALL")], Ready(1), true),
        step(&[query("EXECUTE q2")], Ready(1), true),
    ]
}

async fn run_script(addr: SocketAddr, noise_addr: Option<SocketAddr>) -> Vec<Vec<String>> {
    let mut conn = RawConn::login(addr, USER, PASSWORD, DB).await.unwrap();
    let mut other = match noise_addr {
        Some(a) => Some(RawConn::login(a, USER, PASSWORD, DB).await.unwrap()),
        None => None,
    };
    let mut out = Vec::new();
    for (round, s) in script().into_iter().enumerate() {
        out.push(exchange(&mut conn, &s.send, s.until).await);
        if let (Some(other), true) = (other.as_mut(), s.noise_after) {
            noise(other, round).await;
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statement_messages_behave_as_on_a_dedicated_server() {
    let pg = start_pg();
    let direct: SocketAddr = format!("127.0.0.1:{}", pg.port()).parse().unwrap();
    let expected = run_script(direct, None).await;
    // The script does reach the errors it is about.
    assert!(expected[5].iter().any(|m| m.starts_with("E 22012")), "{:?}", expected[5]);
    assert!(expected[6].iter().any(|m| m.starts_with("E 26000")), "{:?}", expected[6]);
    assert!(expected[8].iter().any(|m| m.starts_with("E 42P05")), "{:?}", expected[8]);
    assert!(expected[10].iter().any(|m| m.starts_with("E 42P05")), "{:?}", expected[10]);
    assert!(expected[11].iter().any(|m| m.starts_with("E 25P02")), "{:?}", expected[11]);
    assert!(expected[25].iter().any(|m| m.starts_with("E 42P05")), "{:?}", expected[25]);
    assert!(expected[29].iter().any(|m| m.starts_with("E 26000")), "{:?}", expected[29]);
    assert!(expected[34].iter().any(|m| m.starts_with("E 42P05")), "{:?}", expected[34]);
    assert_eq!(expected[36].last().map(String::as_str), Some("Z I"));
    // One server, so the other client really uses it between the steps; and a server cache
    // of two statements, so statements are closed and parsed again on the way.
    let proxy = TestProxy::start(&transaction_config(&pg, 1).pool("max_prepared_statements = 2")).await;
    let addr: SocketAddr = format!("127.0.0.1:{}", proxy.port()).parse().unwrap();
    let got = run_script(addr, Some(addr)).await;
    for (i, (g, e)) in got.iter().zip(&expected).enumerate() {
        assert_eq!(g, e, "step {i}: through pgvia vs directly");
    }
    let stats = proxy.app.statements.snapshot();
    assert!(stats.injected_parses > 0, "statements were brought to the server: {stats:?}");
    assert!(stats.evictions > 0, "the server cache overflowed: {stats:?}");
    proxy.assert_no_leaks().await;
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_using_the_same_name_never_see_each_others_statement() {
    const CLIENTS: usize = 30;
    let pg = start_pg();
    let proxy = TestProxy::start(&transaction_config(&pg, 3)).await;
    let addr: SocketAddr = format!("127.0.0.1:{}", proxy.port()).parse().unwrap();
    let tasks = (0..CLIENTS).map(|i| async move {
        let mut c = RawConn::login(addr, USER, PASSWORD, DB).await.unwrap();
        let sql = format!("SELECT {i} + $1::int");
        let got = exchange(&mut c, &[raw::parse("s", &sql), raw::sync()].concat(), Until::Ready(1)).await;
        assert_eq!(got, ["1", "Z I"]);
        for round in 0..50 {
            let arg = round.to_string();
            let got = exchange(
                &mut c,
                &[raw::bind("", "s", &[Some(&arg)]), raw::execute("", 0), raw::sync()].concat(),
                Until::Ready(1),
            )
            .await;
            assert_eq!(got[1], one_value_row(&(i + round).to_string()));
        }
    });
    join_all(tasks).await;
    proxy.assert_no_leaks().await;
    proxy.stop().await;
}

/// tokio-postgres names its statements itself, prepares with Parse/Describe/Sync, binds in
/// a later exchange and closes a statement when it is dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokio_postgres_statements_follow_clients_across_servers() {
    const CLIENTS: usize = 30;
    const ROUNDS: usize = 120;
    let pg = start_pg();
    let proxy = TestProxy::start(&transaction_config(&pg, 3)).await;
    let conninfo = proxy.conninfo(USER, PASSWORD, DB);
    let tasks = (0..CLIENTS).map(|i| {
        let conninfo = conninfo.clone();
        async move {
            let mut client = connect(&conninfo).await.unwrap();
            let shared = client.prepare("SELECT $1::int + 1").await.unwrap();
            let mut own = client.prepare(&format!("SELECT $1::text || '-{i}'")).await.unwrap();
            for round in 0..ROUNDS {
                let n = i32::try_from(round).unwrap();
                let row = client.query_one(&shared, &[&n]).await.unwrap();
                assert_eq!(row.get::<_, i32>(0), n + 1);
                let row = client.query_one(&own, &[&"x"]).await.unwrap();
                assert_eq!(row.get::<_, String>(0), format!("x-{i}"));
                if round % 40 == 39 {
                    // Dropping closes it; preparing again gets a new name.
                    own = client.prepare(&format!("SELECT $1::text || '-{i}'")).await.unwrap();
                }
                if round % 10 == 0 {
                    // A transaction with statements inside.
                    let tx = client.build_transaction().start().await.unwrap();
                    let row = tx.query_one(&shared, &[&n]).await.unwrap();
                    assert_eq!(row.get::<_, i32>(0), n + 1);
                    tx.commit().await.unwrap();
                }
            }
        }
    });
    join_all(tasks).await;
    let stats = proxy.app.statements.snapshot();
    assert!(stats.parses_skipped > 0, "{stats:?}");
    assert!(stats.injected_parses > 0, "{stats:?}");
    proxy.assert_no_leaks().await;
    proxy.stop().await;
}

/// What one client sees around a `DISCARD ALL` sent through the extended protocol (as JDBC
/// sends every statement, and as psycopg and asyncpg send prepared ones): its earlier
/// statement is gone, preparing the same text again works, and another client of the same
/// server (then a second one) prepares that text and runs it.
async fn discard_all_prepared(conninfo: &str) -> Vec<String> {
    let mut seen = Vec::new();
    let client = connect(conninfo).await.unwrap();
    let add_one = client.prepare("SELECT $1::int + 1").await.unwrap();
    let row = client.query_one(&add_one, &[&1i32]).await.unwrap();
    seen.push(format!("before: {}", row.get::<_, i32>(0)));
    let discard = client.prepare("DISCARD ALL").await.unwrap();
    client.execute(&discard, &[]).await.unwrap();
    let old = client.query_one(&add_one, &[&2i32]).await;
    let old =
        old.map(|r| r.get::<_, i32>(0)).map_err(|e| (e.code().map(|c| c.code().to_owned()), e.to_string()));
    seen.push(format!("old statement: {old:?}"));
    let again = client.prepare("SELECT $1::int + 1").await.unwrap();
    let row = client.query_one(&again, &[&3i32]).await.unwrap();
    seen.push(format!("prepared again: {}", row.get::<_, i32>(0)));
    drop(client);
    for other in 0..2 {
        let client = connect(conninfo).await.unwrap();
        let stmt = client.prepare("SELECT $1::int + 1").await.unwrap();
        let row = client.query_one(&stmt, &[&10i32]).await;
        seen.push(format!(
            "client {other}: {:?}",
            row.map(|r| r.get::<_, i32>(0)).map_err(|e| e.to_string())
        ));
    }
    seen
}

/// `DISCARD ALL` as a prepared statement drops the server's statements; pgvia must not hand
/// that server on as if it still held them (the next client would get 26000).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prepared_discard_all_leaves_no_stale_statements_behind() {
    let pg = start_pg();
    let direct = discard_all_prepared(&common::direct_conninfo(&pg, USER, PASSWORD, DB)).await;
    let proxy = TestProxy::start(&transaction_config(&pg, 1)).await;
    let through = discard_all_prepared(&proxy.conninfo(USER, PASSWORD, DB)).await;
    assert_eq!(through, direct);
    assert!(direct[1].contains("26000"), "{direct:?}");
    proxy.assert_no_leaks().await;
    proxy.stop().await;
}

/// A `DISCARD ALL` that fails (PostgreSQL refuses it inside a transaction block), sent as a
/// simple query and as a prepared statement, drops nothing: the server's statements still
/// serve the next client (pgvia used to count them gone and parse them again: 42P05).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_discard_all_leaves_the_servers_statements_usable() {
    let pg = start_pg();
    let proxy = TestProxy::start(&transaction_config(&pg, 1)).await;
    let conninfo = proxy.conninfo(USER, PASSWORD, DB);
    for prepared in [false, true] {
        let a = connect(&conninfo).await.unwrap();
        let held = a.prepare("SELECT $1::int * 3").await.unwrap();
        assert_eq!(a.query_one(&held, &[&1i32]).await.unwrap().get::<_, i32>(0), 3);
        a.batch_execute("BEGIN").await.unwrap();
        let refused = if prepared {
            let discard = a.prepare("DISCARD ALL").await.unwrap();
            a.execute(&discard, &[]).await.map(|_| ())
        } else {
            a.batch_execute("DISCARD ALL").await
        };
        let code = refused.err().and_then(|e| common::sqlstate(&e));
        assert_eq!(code.as_deref(), Some("25001"), "prepared: {prepared}");
        a.batch_execute("ROLLBACK").await.unwrap();
        drop(a);
        let b = connect(&conninfo).await.unwrap();
        let stmt = b.prepare("SELECT $1::int * 3").await.unwrap();
        let row = b.query_one(&stmt, &[&5i32]).await;
        assert_eq!(
            row.map(|r| r.get::<_, i32>(0)).map_err(|e| e.to_string()),
            Ok(15),
            "prepared: {prepared}"
        );
    }
    proxy.assert_no_leaks().await;
    proxy.stop().await;
}

/// A `DEALLOCATE ALL` pgvia cannot see (run by a function a plain SELECT calls) drops the
/// statements pgvia keeps on the server for every client. The first use of one there fails
/// with 26000; from then on pgvia parses them again, so no client of that server keeps failing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statements_dropped_behind_pgvias_back_are_parsed_again() {
    let pg = start_pg();
    let proxy = TestProxy::start(&transaction_config(&pg, 1)).await;
    let conninfo = proxy.conninfo(USER, PASSWORD, DB);
    let a = connect(&conninfo).await.unwrap();
    a.batch_execute(
        "CREATE FUNCTION drop_statements() RETURNS void LANGUAGE plpgsql \
         AS $$ BEGIN EXECUTE 'DEALLOCATE ALL'; END $$",
    )
    .await
    .unwrap();
    let b = connect(&conninfo).await.unwrap();
    let held = b.prepare("SELECT $1::int * 2").await.unwrap();
    assert_eq!(b.query_one(&held, &[&1i32]).await.unwrap().get::<_, i32>(0), 2);
    a.query_one("SELECT drop_statements()::text", &[]).await.unwrap();

    let mut failures = Vec::new();
    let mut ran = 0;
    for n in 0..4i32 {
        match b.query_one(&held, &[&n]).await {
            Ok(r) => {
                assert_eq!(r.get::<_, i32>(0), n * 2);
                ran += 1;
            }
            Err(e) => failures.push(common::sqlstate(&e).unwrap_or_else(|| e.to_string())),
        }
    }
    assert!(failures.len() <= 1 && failures.iter().all(|f| f == "26000"), "{failures:?}");
    assert_eq!(ran, 4 - failures.len());
    // A third client preparing the same text runs it at once.
    let c = connect(&conninfo).await.unwrap();
    let fresh = c.prepare("SELECT $1::int * 2").await.unwrap();
    assert_eq!(c.query_one(&fresh, &[&7i32]).await.unwrap().get::<_, i32>(0), 14);
    proxy.assert_no_leaks().await;
    proxy.stop().await;
}

/// A client outside any transaction that only prepares (Parse + Sync, as libpq's `PQprepare`
/// does) is answered by pgvia without a server; PostgreSQL's checks of the statement come at
/// its first use. Syntax errors and names in use are still reported at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_prepare_is_answered_without_a_server() {
    let pg = start_pg();
    let proxy = TestProxy::start(&transaction_config(&pg, 1)).await;
    let addr: SocketAddr = format!("127.0.0.1:{}", proxy.port()).parse().unwrap();
    let mut c = RawConn::login(addr, USER, PASSWORD, DB).await.unwrap();
    let pool = proxy.app.pools.all().pop().unwrap();
    let checkouts = || pool.stats.checkouts.load(std::sync::atomic::Ordering::Relaxed);
    let before = checkouts();
    let got =
        exchange(&mut c, &[raw::parse("m", "SELECT * FROM missing"), raw::sync()].concat(), Until::Ready(1))
            .await;
    assert_eq!(got, ["1", "Z I"]);
    assert_eq!(checkouts(), before, "no server was needed");
    let got = exchange(
        &mut c,
        &[raw::bind("", "m", &[]), raw::execute("", 0), raw::sync()].concat(),
        Until::Ready(1),
    )
    .await;
    assert!(got[0].starts_with("E 42P01"), "the missing table is reported at first use: {got:?}");
    assert_eq!(got.last().unwrap(), "Z I");

    let got = exchange(&mut c, &[raw::parse("bad", "SELEC 1"), raw::sync()].concat(), Until::Ready(1)).await;
    assert!(got[0].starts_with("E 42601"), "a syntax error comes at once: {got:?}");
    let got = exchange(&mut c, &[raw::parse("m", "SELECT 1"), raw::sync()].concat(), Until::Ready(1)).await;
    assert!(got[0].starts_with("E 42P05"), "a name in use is refused at once: {got:?}");
    proxy.assert_no_leaks().await;
    proxy.stop().await;
}

/// SQL `PREPARE`/`EXECUTE`/`DEALLOCATE` from 50 clients on 3 servers: each client's name
/// means its own statement, and nothing pins a client to a server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sql_prepare_execute_deallocate_need_no_dedicated_server() {
    const CLIENTS: usize = 50;
    let pg = start_pg();
    let proxy = TestProxy::start(&transaction_config(&pg, 3)).await;
    let conninfo = proxy.conninfo(USER, PASSWORD, DB);
    let tasks = (0..CLIENTS).map(|i| {
        let conninfo = conninfo.clone();
        async move {
            let client = connect(&conninfo).await.unwrap();
            for round in 0..3 {
                client.batch_execute(&format!("PREPARE p(int) AS SELECT {i} + $1 + {round}")).await.unwrap();
                for n in 0..20 {
                    let rows = client.simple_query(&format!("EXECUTE p({n})")).await.unwrap();
                    let value = rows.iter().find_map(|m| match m {
                        tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_owned),
                        _ => None,
                    });
                    assert_eq!(value, Some((i + n + round).to_string()), "client {i}");
                }
                client.batch_execute("DEALLOCATE p").await.unwrap();
            }
        }
    });
    join_all(tasks).await;
    let pool = proxy.app.pools.all().pop().unwrap();
    let pins: u64 = pool.stats.pins.iter().map(|p| p.load(std::sync::atomic::Ordering::Relaxed)).sum();
    assert_eq!(pins, 0, "no client was pinned");
    assert!(pool.server_count() <= 3);
    proxy.assert_no_leaks().await;
    proxy.stop().await;
}

/// `ALTER TABLE ... ADD COLUMN` under a running prepared `SELECT *` workload (pgbench
/// `-M prepared`, which describes each execution's results): servers hold the shared statement
/// with a plan of the old shape; outside transactions pgvia parses it again and retries, so no
/// client sees `cached plan must not change result type`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_plan_after_alter_table_is_retried_outside_transactions() {
    const ALTERS: usize = 4;
    let pg = start_pg();
    let proxy = TestProxy::start(&transaction_config(&pg, 3)).await;
    let setup = proxy.connect(USER, PASSWORD, DB).await;
    setup
        .batch_execute(
            "CREATE TABLE stale (id int PRIMARY KEY, a text); \
             INSERT INTO stale SELECT g, 'x' FROM generate_series(1, 100) g",
        )
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("select.sql");
    std::fs::write(&script, "\\set id random(1, 100)\nSELECT * FROM stale WHERE id = :id;\n").unwrap();
    let script = script.to_string_lossy();
    let args = ["-n", "-M", "prepared", "-c", "20", "-j", "2", "-T", "6", "-f", &script];
    let alters = async {
        for n in 0..ALTERS {
            tokio::time::sleep(Duration::from_millis(1000)).await;
            setup.batch_execute(&format!("ALTER TABLE stale ADD COLUMN c{n} int DEFAULT {n}")).await.unwrap();
        }
    };
    // pgbench exits non-zero (and `pgbench` fails the test) if a client hits an error.
    let (text, ()) = tokio::join!(common::ops::pgbench(&pg, &proxy, &args), alters);
    assert!(!text.contains("cached plan"), "a client saw the stale plan:\n{text}");
    assert!(text.contains("number of failed transactions: 0"), "{text}");
    let stats = proxy.app.statements.snapshot();
    assert!(stats.stale_plan_retries > 0, "stale plans were met and retried: {stats:?}");
    drop(setup);
    proxy.assert_no_leaks().await;
    proxy.stop().await;
}

/// SQL `PREPARE`, `EXECUTE` and `DEALLOCATE` sent through the extended protocol (asyncpg's
/// `execute`, node-postgres in extended mode), then what a second client sees of the
/// server: its answers, with the errors' SQLSTATEs.
async fn extended_sql_prepare(conninfo: &str) -> Vec<String> {
    fn one(rows: Result<Vec<tokio_postgres::Row>, tokio_postgres::Error>) -> String {
        match rows {
            Ok(rows) => format!("{:?}", rows.iter().map(|r| r.get::<_, i32>(0)).collect::<Vec<_>>()),
            Err(e) => format!("error {:?}", e.code().map(|c| c.code().to_owned())),
        }
    }
    let mut seen = Vec::new();
    let first = connect(conninfo).await.unwrap();
    first.execute("PREPARE ext_p AS SELECT 16", &[]).await.unwrap();
    // The next client, while the first still has its statement (with one server, it waits).
    let next = tokio::spawn({
        let conninfo = conninfo.to_owned();
        async move {
            let next = connect(&conninfo).await.unwrap();
            let leaked = next
                .query("SELECT count(*)::int FROM pg_prepared_statements WHERE name = 'ext_p'", &[])
                .await;
            let own = next.execute("PREPARE ext_p AS SELECT 1", &[]).await.map(|_| ());
            let own = own.map_err(|e| e.code().map(|c| c.code().to_owned()));
            (format!("next sees: {}", one(leaked)), format!("next PREPARE: {own:?}"))
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    seen.push(format!("own extended EXECUTE: {}", one(first.query("EXECUTE ext_p", &[]).await)));
    let simple = first.simple_query("EXECUTE ext_p").await.map(|m| m.len()).map_err(|e| e.to_string());
    seen.push(format!("own simple EXECUTE: {simple:?}"));
    first.execute("DEALLOCATE ext_p", &[]).await.unwrap();
    let gone = first
        .simple_query("EXECUTE ext_p")
        .await
        .map(|_| ())
        .map_err(|e| e.code().map(|c| c.code().to_owned()));
    seen.push(format!("after DEALLOCATE: {gone:?}"));
    let (leaked, own) = tokio::time::timeout(Duration::from_secs(30), next).await.unwrap().unwrap();
    seen.extend([leaked, own]);
    seen
}

/// The statement a SQL `PREPARE` makes through the extended protocol is the client's, as on
/// a dedicated server: its own `EXECUTE`s find it by either protocol, and the next client of
/// the server neither sees it nor is refused its own `PREPARE` of the name (42P05).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sql_prepare_through_the_extended_protocol_stays_the_clients() {
    let pg = start_pg();
    let direct = extended_sql_prepare(&common::direct_conninfo(&pg, USER, PASSWORD, DB)).await;
    assert_eq!(direct[3], "next sees: [0]", "{direct:?}");
    let proxy = TestProxy::start(&transaction_config(&pg, 1)).await;
    let through = extended_sql_prepare(&proxy.conninfo(USER, PASSWORD, DB)).await;
    assert_eq!(through, direct);
    proxy.assert_no_leaks().await;
    proxy.stop().await;
}

/// A driver with a statement cache prepares a text, the column its parameter is compared
/// with changes type, and the driver prepares the same text again: the parameter and result
/// types it is told, before and after.
async fn types_after_alter_column(conninfo: &str) -> Vec<String> {
    let client = connect(conninfo).await.unwrap();
    client.batch_execute("DROP TABLE IF EXISTS retyped; CREATE TABLE retyped (v int)").await.unwrap();
    let sql = "SELECT v FROM retyped WHERE v = $1";
    let types = |s: &tokio_postgres::Statement| {
        let params: Vec<_> = s.params().iter().map(|t| t.name().to_owned()).collect();
        let columns: Vec<_> = s.columns().iter().map(|c| c.type_().name().to_owned()).collect();
        format!("params {params:?} columns {columns:?}")
    };
    let before = client.prepare(sql).await.unwrap();
    client.query(&before, &[&1i32]).await.unwrap();
    let mut seen = vec![types(&before)];
    client.batch_execute("ALTER TABLE retyped ALTER COLUMN v TYPE bigint").await.unwrap();
    let after = client.prepare(sql).await.unwrap();
    seen.push(types(&after));
    let rows = client.query(&after, &[&5_000_000_000i64]).await.map(|r| r.len()).map_err(|e| e.to_string());
    seen.push(format!("run with a bigint: {rows:?}"));
    seen
}

/// After DDL through pgvia, a fresh Parse and Describe of a text the client prepared before
/// reflects the catalog as it is now, as on a dedicated server, not the shared statement's
/// old description (the driver would encode the parameter as the old type).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statement_prepared_again_after_alter_column_type_is_described_anew() {
    let pg = start_pg();
    let direct = types_after_alter_column(&common::direct_conninfo(&pg, USER, PASSWORD, DB)).await;
    assert_eq!(direct[1], "params [\"int8\"] columns [\"int8\"]", "{direct:?}");
    let proxy = TestProxy::start(&transaction_config(&pg, 1)).await;
    let through = types_after_alter_column(&proxy.conninfo(USER, PASSWORD, DB)).await;
    assert_eq!(through, direct);
    proxy.assert_no_leaks().await;
    proxy.stop().await;
}
