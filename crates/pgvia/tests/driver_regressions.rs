//! Regressions found by running drivers' own upstream test suites through pgvia (issue 22):
//! each test sends what a driver sent, directly to PostgreSQL and through pgvia, and expects
//! the same answer.

// Helpers outside #[test] functions unwrap too: a failed step is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::BufMut;
use common::raw::{bind, describe, execute, frame, parse, query, sync, Msg, RawConn};
use common::{connect, direct_conninfo, start_pg, ConfigBuilder, TestProxy, DB, PASSWORD, USER};
use harness::Cluster;
use tokio_postgres::types::ToSql;

fn direct_addr(pg: &Cluster) -> SocketAddr {
    format!("{}:{}", pg.host(), pg.port()).parse().unwrap()
}

async fn proxy(pg: &Cluster, mode: &str) -> TestProxy {
    TestProxy::start(&ConfigBuilder::new(pg).pool(&format!("pool_mode = \"{mode}\""))).await
}

/// Tags and bodies of replies, for comparing a direct answer with pgvia's byte for byte.
fn replies(msgs: &[Msg]) -> Vec<(char, Vec<u8>)> {
    msgs.iter().map(|m| (char::from(m.tag), m.body.to_vec())).collect()
}

/// As [`replies`], without ParameterStatus messages that repeat the value last reported: in
/// transaction mode pgvia re-reports a setting the client changed when it gives the client
/// another server (harmless, and outside what these tests are about).
fn replies_folded(msgs: &[Msg]) -> Vec<(char, Vec<u8>)> {
    let mut known = BTreeMap::new();
    msgs.iter()
        .filter(|m| match m.parameter() {
            Some((name, value)) => known.insert(name, value.clone()) != Some(value),
            None => true,
        })
        .map(|m| (char::from(m.tag), m.body.to_vec()))
        .collect()
}

// ---- 1. Bind with up to 65,535 parameters ----

/// A query with 65,535 parameters (PostgreSQL's limit: counts are unsigned 16-bit).
async fn many_params(conninfo: &str) -> i64 {
    const N: usize = 65_535;
    let client = connect(conninfo).await.unwrap();
    let mut sql = String::from("SELECT sum(v)::int8 FROM (VALUES ");
    for i in 1..=N {
        if i > 1 {
            sql.push(',');
        }
        sql.push_str(&format!("(${i}::int4)"));
    }
    sql.push_str(") s(v)");
    let values: Vec<i32> = (0..N).map(|i| i32::try_from(i % 1000).unwrap()).collect();
    let params: Vec<&(dyn ToSql + Sync)> = values.iter().map(|v| v as &(dyn ToSql + Sync)).collect();
    let stmt = client.prepare(&sql).await.unwrap();
    assert_eq!(stmt.params().len(), N);
    let row = client.query_one(&stmt, &params).await.unwrap();
    // And once more on the same statement, which pgvia may answer from a shared one.
    let again = client.query_one(&stmt, &params).await.unwrap();
    assert_eq!(row.get::<_, i64>(0), again.get::<_, i64>(0));
    row.get(0)
}

async fn bind_65535_params(mode: &str) {
    let pg = start_pg();
    let proxy = proxy(&pg, mode).await;
    let direct = many_params(&direct_conninfo(&pg, USER, PASSWORD, DB)).await;
    let through = many_params(&proxy.conninfo(USER, PASSWORD, DB)).await;
    assert_eq!(direct, through);
    proxy.assert_no_leaks().await;
}

#[tokio::test]
async fn bind_65535_params_transaction_mode() {
    bind_65535_params("transaction").await;
}

#[tokio::test]
async fn bind_65535_params_session_mode() {
    bind_65535_params("session").await;
}

// ---- 2. A COPY refused at once, with CopyDone (or CopyFail) already sent behind it ----

fn copy_fail(message: &str) -> Vec<u8> {
    let mut b = message.as_bytes().to_vec();
    b.push(0);
    frame(b'f', &b)
}

/// Sends `COPY` and what the driver pipelined behind it in one write, then an
/// extended-protocol query; returns every reply up to the second ReadyForQuery.
async fn copy_then_query(addr: SocketAddr, copy: &str, behind: &[u8]) -> Vec<Msg> {
    let mut conn = RawConn::login(addr, USER, PASSWORD, DB).await.unwrap();
    let mut first = query(copy);
    first.extend_from_slice(behind);
    conn.send(&first).await;
    let mut out = conn.until_ready().await;
    let mut next = parse("", "SELECT 42");
    next.extend_from_slice(&bind("", "", &[]));
    next.extend_from_slice(&execute("", 0));
    next.extend_from_slice(&sync());
    conn.send(&next).await;
    out.extend(conn.until_ready().await);
    // The session is still usable afterwards: a simple query too.
    conn.send(&query("SELECT 'still here'")).await;
    out.extend(conn.until_ready().await);
    out
}

#[tokio::test]
async fn rejected_copy_with_copy_done_behind_it() {
    let pg = start_pg();
    pg.psql(DB, "CREATE TABLE copy_target (v int); GRANT ALL ON copy_target TO app;").unwrap();
    let copy_done = frame(b'c', &[]);
    let copy_data_done = [frame(b'd', b"1\n"), frame(b'c', &[])].concat();
    let cases: Vec<(&str, Vec<u8>)> = vec![
        // Refused by the parser, and by the catalog: the CopyDone behind it is stray.
        ("COPY copy_target FROM STDIN WITH (nonsense)", copy_done.clone()),
        ("COPY no_such_table FROM STDIN", copy_done.clone()),
        ("COPY no_such_table FROM STDIN", copy_data_done.clone()),
        ("COPY no_such_table FROM STDIN", copy_fail("client gave up")),
        // The COPY starts: the CopyDone behind it is its normal end.
        ("COPY copy_target FROM STDIN", copy_done.clone()),
        ("COPY copy_target FROM STDIN", copy_data_done),
        ("COPY copy_target FROM STDIN", copy_fail("client gave up")),
    ];
    for mode in ["transaction", "session"] {
        let proxy = proxy(&pg, mode).await;
        for (copy, behind) in &cases {
            let direct = copy_then_query(direct_addr(&pg), copy, behind).await;
            let through = copy_then_query(proxy.addr, copy, behind).await;
            assert_eq!(
                replies(&through),
                replies(&direct),
                "{mode} mode, {copy}:\n pgvia: {:?}\ndirect: {:?}",
                describe(&through),
                describe(&direct)
            );
        }
        proxy.assert_no_leaks().await;
    }
}

// ---- 5 and 6. What PostgreSQL reports at login ----

/// The ParameterStatus values and NOTICEs a client gets at login.
async fn login_report(addr: SocketAddr, params: &[(&str, &str)]) -> (BTreeMap<String, String>, Vec<String>) {
    let mut all = vec![("database", DB)];
    all.extend_from_slice(params);
    let conn = RawConn::login_with(addr, USER, PASSWORD, &all).await.unwrap();
    let reported = conn.login_messages.iter().filter_map(Msg::parameter).collect();
    let notices =
        conn.login_notices.iter().map(|m| m.fields().get(&'M').cloned().unwrap_or_default()).collect();
    (reported, notices)
}

#[tokio::test]
async fn login_reports_normalised_settings() {
    let pg = start_pg();
    let spellings: &[&[(&str, &str)]] = &[
        &[("client_encoding", "utf-8"), ("DateStyle", "iso, dmy")],
        &[("client_encoding", "unicode"), ("datestyle", "German")],
        &[("options", "-c client_encoding=utf8 -c DateStyle=sql,mdy")],
        &[("IntervalStyle", "SQL_STANDARD"), ("TimeZone", "utc")],
    ];
    for mode in ["transaction", "session"] {
        let proxy = proxy(&pg, mode).await;
        // Twice: the second login is answered from what the first learnt.
        for _ in 0..2 {
            for params in spellings {
                let (direct, _) = login_report(direct_addr(&pg), params).await;
                let (through, _) = login_report(proxy.addr, params).await;
                for name in ["client_encoding", "DateStyle", "IntervalStyle", "TimeZone", "application_name"]
                {
                    assert_eq!(through.get(name), direct.get(name), "{mode} mode, {name} for {params:?}");
                }
            }
        }
        proxy.assert_no_leaks().await;
    }
}

#[tokio::test]
async fn login_delivers_truncation_notice() {
    let pg = start_pg();
    let long = "a_very_long_application_name_that_goes_well_past_sixty_three_bytes_0123456789";
    for mode in ["transaction", "session"] {
        let proxy = proxy(&pg, mode).await;
        for _ in 0..2 {
            let (direct, direct_notices) =
                login_report(direct_addr(&pg), &[("application_name", long)]).await;
            let (through, notices) = login_report(proxy.addr, &[("application_name", long)]).await;
            assert!(!direct_notices.is_empty(), "PostgreSQL warns of the truncation");
            assert_eq!(notices, direct_notices, "{mode} mode");
            assert_eq!(through.get("application_name"), direct.get("application_name"), "{mode} mode");
        }
        proxy.assert_no_leaks().await;
    }
}

// ---- 7. Client encodings other than UTF-8 ----

fn query_bytes(sql: &[u8]) -> Vec<u8> {
    let mut b = sql.to_vec();
    b.push(0);
    frame(b'Q', &b)
}

/// Parse (unnamed), Bind, Execute, Sync of a text given as bytes.
fn extended_bytes(sql: &[u8]) -> Vec<u8> {
    let mut b = vec![0u8];
    b.extend_from_slice(sql);
    b.push(0);
    b.put_i16(0);
    let mut out = frame(b'P', &b);
    out.extend_from_slice(&bind("", "", &[]));
    out.extend_from_slice(&execute("", 0));
    out.extend_from_slice(&sync());
    out
}

/// Runs `steps` (simple or extended) after `SET client_encoding`, returning all replies.
async fn in_encoding(addr: SocketAddr, encoding: &str, steps: &[Vec<u8>]) -> Vec<Msg> {
    let mut conn = RawConn::login(addr, USER, PASSWORD, DB).await.unwrap();
    conn.send(&query(&format!("SET client_encoding TO '{encoding}'"))).await;
    let mut out = conn.until_ready().await;
    for step in steps {
        conn.send(step).await;
        let got = tokio::time::timeout(Duration::from_secs(10), conn.until_ready()).await.unwrap();
        out.extend(got);
    }
    out
}

#[tokio::test]
async fn non_utf8_client_encodings() {
    let pg = start_pg();
    pg.psql(DB, "CREATE TABLE words (enc text, w text); GRANT ALL ON words TO app;").unwrap();
    // 'привет' in KOI8-R and 'café' in LATIN1.
    let privet: &[u8] = b"\xd0\xd2\xc9\xd7\xc5\xd4";
    let cafe: &[u8] = b"caf\xe9";
    let proxy = proxy(&pg, "transaction").await;
    for (encoding, word) in [("KOI8R", privet), ("LATIN1", cafe)] {
        let select = [b"SELECT '".as_slice(), word, b"' AS w, length('", word, b"')"].concat();
        let insert =
            [b"INSERT INTO words VALUES ('".as_slice(), encoding.as_bytes(), b"', '", word, b"')"].concat();
        let read_back = format!("SELECT w, length(w) FROM words WHERE enc = '{encoding}'");
        let steps = vec![
            query_bytes(&select),
            extended_bytes(&select),
            query_bytes(&insert),
            extended_bytes(&insert),
            query(&read_back),
            extended_bytes(read_back.as_bytes()),
            query(&format!("DELETE FROM words WHERE enc = '{encoding}'")),
            // PostgreSQL's error quotes the text back in the client's encoding.
            query_bytes(&[b"SELECT '".as_slice(), word, b"'::int"].concat()),
            extended_bytes(&[b"SELECT '".as_slice(), word, b"'::int"].concat()),
            // A reported setting in the client's encoding: ParameterStatus carries it back.
            query_bytes(&[b"SET application_name = '".as_slice(), word, b"'"].concat()),
            query("SHOW application_name"),
            extended_bytes(b"SHOW application_name"),
        ];
        let direct = in_encoding(direct_addr(&pg), encoding, &steps).await;
        let through = in_encoding(proxy.addr, encoding, &steps).await;
        assert_eq!(
            replies_folded(&through),
            replies_folded(&direct),
            "{encoding}:\n pgvia: {:?}\ndirect: {:?}",
            describe(&through),
            describe(&direct)
        );
        // The text PostgreSQL stored is the word itself, whatever the client's encoding.
        assert!(direct.iter().any(|m| m.tag == b'D' && m.body.windows(word.len()).any(|w| w == word)));
    }
    // Stored as UTF-8: a UTF-8 client reads the words back in its own encoding.
    let client = proxy.connect(USER, PASSWORD, DB).await;
    let steps = [query_bytes(&[b"INSERT INTO words VALUES ('x', '".as_slice(), cafe, b"')"].concat())];
    let mut conn = RawConn::login(proxy.addr, USER, PASSWORD, DB).await.unwrap();
    conn.send(&query("SET client_encoding TO 'LATIN1'")).await;
    conn.until_ready().await;
    conn.send(&steps[0]).await;
    let done = conn.until_ready().await;
    assert!(done.iter().all(|m| m.tag != b'E'), "{:?}", describe(&done));
    let w: String = client.query_one("SELECT w FROM words WHERE enc = 'x'", &[]).await.unwrap().get(0);
    assert_eq!(w, "café");
    drop(conn);
    drop(client);
    proxy.assert_no_leaks().await;
}
