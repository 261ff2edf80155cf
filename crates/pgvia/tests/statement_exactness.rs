//! Prepared statements through a transaction-mode pool behave as on a dedicated server
//! (issue 22, items 3 and 4), each scenario run directly against PostgreSQL and through pgvia
//! and compared reply by reply:
//!
//! - after `DROP TYPE`/`CREATE TYPE` or `ALTER TABLE` sent through pgvia, a client's fresh
//!   Parse of a text other clients prepared before the change is parsed against the new
//!   catalog, outside and inside a transaction (never `XX000 cache lookup failed for type`
//!   nor `0A000 cached plan must not change result type`);
//! - SQL `EXECUTE`, `DEALLOCATE`, `EXPLAIN EXECUTE` and `CREATE TABLE AS EXECUTE` name
//!   statements prepared by protocol Parse or by `PREPARE`, in any position of a query of
//!   several statements, with PostgreSQL's errors for names that do not exist.
//!
//! One server in the pool, so every client meets the statements the others left on it.

// Helpers outside #[test] functions unwrap too: a failed step is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::net::SocketAddr;

use common::raw::{bind, describe_statement, execute, parse, query, summary, sync, Msg, RawConn};
use common::{start_pg, ConfigBuilder, TestProxy, DB, PASSWORD, USER};
use harness::Cluster;

fn direct_addr(pg: &Cluster) -> SocketAddr {
    format!("{}:{}", pg.host(), pg.port()).parse().unwrap()
}

async fn proxy(pg: &Cluster) -> TestProxy {
    let config = ConfigBuilder::new(pg).pool("pool_mode = \"transaction\"").pool("pool_size = 1");
    TestProxy::start(&config).await
}

/// What a differential comparison sees of a reply: [`summary`], with the column names of a
/// RowDescription (a result's shape is what a stale statement gets wrong).
fn brief(m: &Msg) -> Option<String> {
    if m.tag != b'T' {
        return summary(m);
    }
    let body = &m.body[2..];
    let mut names = Vec::new();
    let mut pos = 0;
    while let Some(end) = body[pos..].iter().position(|&b| b == 0) {
        names.push(String::from_utf8_lossy(&body[pos..pos + end]).into_owned());
        pos += end + 1 + 18;
        if pos >= body.len() {
            break;
        }
    }
    Some(format!("T {}", names.join(",")))
}

/// Sends `bytes` (ending in one Sync or Query) and returns the replies up to ReadyForQuery.
async fn exchange(conn: &mut RawConn, bytes: &[u8], log: &mut Vec<String>) {
    conn.send(bytes).await;
    let msgs = conn.until_ready().await;
    log.extend(msgs.iter().filter_map(brief));
}

async fn simple(conn: &mut RawConn, sql: &str, log: &mut Vec<String>) {
    log.push(format!("> {sql}"));
    exchange(conn, &query(sql), log).await;
}

/// Parse (fresh, under `name`) + Describe + Bind + Execute + Sync.
fn prepare_and_run(name: &str, sql: &str, params: &[Option<&str>]) -> Vec<u8> {
    let mut b = parse(name, sql);
    b.extend(describe_statement(name));
    b.extend(bind("", name, params));
    b.extend(execute("", 0));
    b.extend(sync());
    b
}

async fn login(addr: SocketAddr) -> RawConn {
    RawConn::login(addr, USER, PASSWORD, DB).await.unwrap()
}

// ---- item 3: statements shared across schema and type changes ----

const TYPED: &str = "SELECT $1::ex_mood AS m";
const WIDE: &str = "SELECT * FROM ex_wide ORDER BY a";

async fn schema_changes(addr: SocketAddr) -> Vec<String> {
    let mut log = Vec::new();
    let mut admin = login(addr).await;
    let mut clients = Vec::new();
    for _ in 0..4 {
        clients.push(login(addr).await);
    }
    simple(&mut admin, "DROP TABLE IF EXISTS ex_wide; DROP TYPE IF EXISTS ex_mood", &mut log).await;
    simple(&mut admin, "CREATE TYPE ex_mood AS ENUM ('sad', 'ok')", &mut log).await;
    simple(&mut admin, "CREATE TABLE ex_wide (a int); INSERT INTO ex_wide VALUES (1)", &mut log).await;

    // Clients 0 and 1 prepare both texts before any change; their statements stay.
    for (i, c) in clients.iter_mut().take(2).enumerate() {
        log.push(format!("client {i} prepares"));
        exchange(c, &prepare_and_run("typed", TYPED, &[Some("ok")]), &mut log).await;
        exchange(c, &prepare_and_run("wide", WIDE, &[]), &mut log).await;
    }

    // The type is dropped and made again (a new OID): a fresh Parse uses the new one.
    simple(&mut admin, "DROP TYPE ex_mood; CREATE TYPE ex_mood AS ENUM ('sad', 'ok', 'happy')", &mut log)
        .await;
    log.push("client 2, fresh, outside a transaction".into());
    exchange(&mut clients[2], &prepare_and_run("t2", TYPED, &[Some("happy")]), &mut log).await;

    // The same inside a transaction, where nothing could be retried.
    simple(&mut admin, "DROP TYPE ex_mood; CREATE TYPE ex_mood AS ENUM ('glad')", &mut log).await;
    log.push("client 3, fresh, inside a transaction".into());
    simple(&mut clients[3], "BEGIN", &mut log).await;
    exchange(&mut clients[3], &prepare_and_run("t3", TYPED, &[Some("glad")]), &mut log).await;
    simple(&mut clients[3], "COMMIT", &mut log).await;

    // A table changes shape: a fresh Parse describes and returns the new columns.
    simple(&mut admin, "ALTER TABLE ex_wide ADD COLUMN b int DEFAULT 7", &mut log).await;
    log.push("client 2, fresh, outside a transaction".into());
    exchange(&mut clients[2], &prepare_and_run("w2", WIDE, &[]), &mut log).await;

    simple(&mut admin, "ALTER TABLE ex_wide ADD COLUMN c text DEFAULT 'x'", &mut log).await;
    log.push("client 3, fresh, inside a transaction".into());
    simple(&mut clients[3], "BEGIN", &mut log).await;
    exchange(&mut clients[3], &prepare_and_run("w3", WIDE, &[]), &mut log).await;
    simple(&mut clients[3], "COMMIT", &mut log).await;

    // A change inside a transaction block, committed later: a fresh Parse after the COMMIT
    // sees it even though the statement was parsed again while the change was uncommitted.
    simple(&mut admin, "BEGIN; ALTER TABLE ex_wide ADD COLUMN d int DEFAULT 4", &mut log).await;
    simple(&mut admin, "COMMIT", &mut log).await;
    log.push("a new client, fresh".into());
    let mut late = login(addr).await;
    exchange(&mut late, &prepare_and_run("w4", WIDE, &[]), &mut log).await;

    // A lone Parse + Sync (answered by pgvia without a server) then a Bind.
    simple(&mut admin, "ALTER TABLE ex_wide DROP COLUMN b", &mut log).await;
    let mut lone = login(addr).await;
    exchange(&mut lone, &[parse("lw", WIDE), sync()].concat(), &mut log).await;
    let mut run = describe_statement("lw");
    run.extend(bind("", "lw", &[]));
    run.extend(execute("", 0));
    run.extend(sync());
    exchange(&mut lone, &run, &mut log).await;

    simple(&mut admin, "DROP TABLE ex_wide; DROP TYPE ex_mood", &mut log).await;
    log
}

#[tokio::test]
async fn fresh_parse_after_schema_and_type_changes() {
    let pg = start_pg();
    let direct = schema_changes(direct_addr(&pg)).await;
    let proxy = proxy(&pg).await;
    let through = schema_changes(proxy.addr).await;
    if direct != through || std::env::var_os("SHOW_LOG").is_some() {
        for (d, t) in direct.iter().zip(&through) {
            let mark = if d == t { "  " } else { "!!" };
            eprintln!("{mark} {d:<60} | {t}");
        }
    }
    assert_eq!(direct, through, "direct (left) and through pgvia (right) differ");
    assert!(!through.iter().any(|l| l.starts_with("E ")), "no step fails: {through:#?}");
    proxy.assert_no_leaks().await;
}

// ---- item 4: SQL names a protocol-prepared statement, anywhere in a query ----

async fn sql_names(addr: SocketAddr) -> Vec<String> {
    let mut log = Vec::new();
    let mut other = login(addr).await;
    let mut conn = login(addr).await;
    // Another client shares the text, so the server holds it under pgvia's name already.
    exchange(&mut other, &[parse("mine", "SELECT $1::int + 1"), sync()].concat(), &mut log).await;
    simple(&mut other, "EXECUTE mine(0)", &mut log).await;

    exchange(&mut conn, &[parse("stmt1", "SELECT $1::int + 1"), sync()].concat(), &mut log).await;
    for sql in [
        "BEGIN; EXECUTE stmt1(1); COMMIT",
        "SELECT 1; EXECUTE stmt1(41)",
        "EXECUTE stmt1(2); EXECUTE stmt1(3)",
        "EXPLAIN (COSTS OFF) EXECUTE stmt1(1)",
        "SELECT 0; EXPLAIN (COSTS OFF, VERBOSE) EXECUTE stmt1(1)",
        "SELECT 1; EXECUTE nosuch(1)",
        "PREPARE p2 AS SELECT $1::int * 2; EXECUTE p2(21)",
        "EXECUTE p2(5); DEALLOCATE p2; SELECT 'after'",
        "EXECUTE p2(1)",
        "PREPARE p3 AS SELECT 3 AS three; SELECT 1; EXECUTE p3",
        "CREATE TABLE ex_ctas AS EXECUTE p3; SELECT * FROM ex_ctas; DROP TABLE ex_ctas",
        "SELECT 1; CREATE TABLE ex_ctas2 AS EXECUTE stmt1(9) WITH DATA; TABLE ex_ctas2; DROP TABLE ex_ctas2",
        "PREPARE p4 AS SELECT 4; DEALLOCATE ALL; EXECUTE p4",
        "EXECUTE p3",
        "PREPARE p5 AS SELECT 5",
        "BEGIN; EXECUTE p5; DEALLOCATE PREPARE p5; COMMIT",
        "EXECUTE p5",
        // One text under two names in one query, and one name dropped while the other stays.
        "PREPARE x AS SELECT 7; PREPARE y AS SELECT 7; EXECUTE x; EXECUTE y",
        "DEALLOCATE x; EXECUTE y; EXECUTE x",
        "EXECUTE y; DEALLOCATE y; PREPARE y AS SELECT 7; EXECUTE y",
        "SELECT 1/0; EXECUTE y",
        "EXECUTE y; DEALLOCATE ALL; PREPARE y AS SELECT 8; EXECUTE y",
        "DEALLOCATE y; DEALLOCATE y",
        "SELECT 'EXECUTE y'; PREPARE \"Q z\" AS SELECT $1::text; EXECUTE \"Q z\"('EXECUTE y')",
    ] {
        simple(&mut conn, sql, &mut log).await;
    }
    // After DEALLOCATE ALL the protocol name is free again, and SQL reaches it.
    exchange(&mut conn, &[parse("stmt1", "SELECT $1::int + 1"), sync()].concat(), &mut log).await;
    for sql in [
        "SELECT 1; DEALLOCATE stmt1; SELECT 2",
        "EXECUTE stmt1(1)",
        "PREPARE stmt1 AS SELECT 10; SELECT 1; EXECUTE stmt1",
        "PREPARE stmt1 AS SELECT 11; SELECT 2",
        "DEALLOCATE stmt1",
    ] {
        simple(&mut conn, sql, &mut log).await;
    }
    // The protocol sees what SQL did: the name is gone, then Parse may take it again.
    let mut b = bind("", "stmt1", &[Some("1")]);
    b.extend(execute("", 0));
    b.extend(sync());
    exchange(&mut conn, &b, &mut log).await;
    exchange(&mut conn, &prepare_and_run("stmt1", "SELECT $1::int - 1", &[Some("1")]), &mut log).await;
    simple(&mut conn, "SELECT 'x'; EXECUTE stmt1(100)", &mut log).await;
    // The other client's statement was never touched.
    simple(&mut other, "SELECT 1; EXECUTE mine(1)", &mut log).await;
    log
}

#[tokio::test]
async fn sql_execute_of_protocol_statements_in_multi_statement_queries() {
    let pg = start_pg();
    let direct = sql_names(direct_addr(&pg)).await;
    let proxy = proxy(&pg).await;
    let through = sql_names(proxy.addr).await;
    if direct != through || std::env::var_os("SHOW_LOG").is_some() {
        for (d, t) in direct.iter().zip(&through) {
            let mark = if d == t { "  " } else { "!!" };
            eprintln!("{mark} {d:<60} | {t}");
        }
    }
    assert_eq!(direct, through, "direct (left) and through pgvia (right) differ");
    proxy.assert_no_leaks().await;
}
