//! tokio-postgres through pgvia: pipelined queries, named prepared statements in session
//! mode, and binary COPY in and out.

// Helpers outside #[test] functions unwrap too: a failed step is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::pin::pin;

use common::{start_pg, ConfigBuilder, TestProxy, DB, PASSWORD, USER};
use futures_util::future::join_all;
use futures_util::{SinkExt, StreamExt, TryStreamExt};
use tokio_postgres::binary_copy::{BinaryCopyInWriter, BinaryCopyOutStream};
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::SimpleQueryMessage;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hundred_pipelined_queries_on_one_connection() {
    let pg = start_pg();
    let proxy = TestProxy::start(&ConfigBuilder::new(&pg)).await;
    let client = proxy.connect(USER, PASSWORD, DB).await;

    // tokio-postgres writes all 100 requests before reading any reply: one pipeline.
    let stmt = client.prepare("select $1::int4, $2::text").await.unwrap();
    for round in 0..3 {
        let queries = (0..100i32).map(|i| {
            let client = &client;
            let stmt = &stmt;
            async move {
                let s = format!("row {i} of round {round}");
                let rows = client.query(stmt, &[&i, &s]).await.unwrap();
                assert_eq!(rows.len(), 1);
                (rows[0].get::<_, i32>(0), rows[0].get::<_, String>(1))
            }
        });
        let answers = join_all(queries).await;
        let expected: Vec<(i32, String)> =
            (0..100).map(|i| (i, format!("row {i} of round {round}"))).collect();
        assert_eq!(answers, expected, "answers out of order or wrong in round {round}");
    }
    // Unprepared statements too: each query is Parse/Bind/Execute/Sync with a fresh
    // unnamed statement, again all in flight at once.
    let answers = join_all((0..100i32).map(|i| {
        let client = &client;
        async move { client.query_one("select $1::int * 2", &[&i]).await.unwrap().get::<_, i32>(0) }
    }))
    .await;
    assert_eq!(answers, (0..100).map(|i| i * 2).collect::<Vec<_>>());

    drop(client);
    proxy.assert_no_leaks().await;
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn named_prepared_statements_in_session_mode() {
    let pg = start_pg();
    let proxy = TestProxy::start(&ConfigBuilder::new(&pg)).await;
    let client = proxy.connect(USER, PASSWORD, DB).await;

    let add = client.prepare("select $1::int8 + $2::int8").await.unwrap();
    let upper = client.prepare_typed("select upper($1)", &[Type::TEXT]).await.unwrap();
    assert_eq!(add.params(), &[Type::INT8, Type::INT8]);
    assert_eq!(upper.columns()[0].type_(), &Type::TEXT);
    for i in 0..200i64 {
        let row = client.query_one(&add, &[&i, &1000i64]).await.unwrap();
        assert_eq!(row.get::<_, i64>(0), i + 1000);
        let s = format!("value-{i}");
        let row = client.query_one(&upper, &[&s]).await.unwrap();
        assert_eq!(row.get::<_, String>(0), s.to_uppercase());
    }
    // The statements live on the server for the whole session, under tokio-postgres's names.
    let names: Vec<String> = client
        .query("select name from pg_prepared_statements where not from_sql order by name", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(names.len() >= 2, "prepared statements on the server: {names:?}");
    assert!(names.iter().all(|n| n.starts_with('s')), "{names:?}");
    // SQL-level PREPARE/EXECUTE as well.
    client.batch_execute("prepare twice(int) as select $1 * 2").await.unwrap();
    let rows = client.simple_query("execute twice(21)").await.unwrap();
    assert_eq!(first_value(&rows).as_deref(), Some("42"));

    drop(client);
    proxy.assert_no_leaks().await;
    // The server goes back to the pool reset: the next session sees no statements.
    let client = proxy.connect(USER, PASSWORD, DB).await;
    // Simple protocol, so that the check itself prepares nothing.
    let rows = client.simple_query("select count(*) from pg_prepared_statements").await.unwrap();
    assert_eq!(first_value(&rows).as_deref(), Some("0"), "prepared statements leaked into the next session");
    let pools = proxy.app.pools.all();
    assert_eq!(pools[0].stats.servers_created.load(std::sync::atomic::Ordering::Relaxed), 1, "server reused");
    drop(client);
    proxy.assert_no_leaks().await;
    proxy.stop().await;
}

fn first_value(msgs: &[SimpleQueryMessage]) -> Option<String> {
    msgs.iter().find_map(|m| match m {
        SimpleQueryMessage::Row(r) => r.get(0).map(str::to_owned),
        _ => None,
    })
}

type CopyRow = (i32, Option<String>, Vec<u8>, f64, bool, i64);

fn copy_rows(n: i32) -> Vec<CopyRow> {
    (0..n)
        .map(|i| {
            let text = if i % 13 == 0 {
                None
            } else {
                Some(format!("t\t{i}\n\\ é {}", "x".repeat((i % 40) as usize)))
            };
            let bytes: Vec<u8> = (0..(i % 64)).map(|b| (b as u8).wrapping_mul(37) ^ (i as u8)).collect();
            (i, text, bytes, f64::from(i) * 0.125 - 7.5, i % 3 == 0, i64::from(i) << 33)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_copy_in_and_out_round_trip() {
    const N: i32 = 20_000;
    let pg = start_pg();
    let proxy = TestProxy::start(&ConfigBuilder::new(&pg)).await;
    let client = proxy.connect(USER, PASSWORD, DB).await;
    client
        .batch_execute("create table c (id int4 primary key, t text, b bytea, f float8, flag bool, big int8)")
        .await
        .unwrap();
    let types = [Type::INT4, Type::TEXT, Type::BYTEA, Type::FLOAT8, Type::BOOL, Type::INT8];
    let rows = copy_rows(N);

    let sink = client.copy_in("copy c from stdin (format binary)").await.unwrap();
    let writer = BinaryCopyInWriter::new(sink, &types);
    let mut writer = pin!(writer);
    for r in &rows {
        let values: [&(dyn ToSql + Sync); 6] = [&r.0, &r.1, &r.2, &r.3, &r.4, &r.5];
        writer.as_mut().write(&values).await.unwrap();
    }
    let copied = writer.finish().await.unwrap();
    assert_eq!(copied, N as u64);

    // What PostgreSQL stored, checked without pgvia.
    let count = pg.psql(DB, "select count(*), count(t), sum(length(b)) from c").expect("psql");
    let expected_bytes: usize = rows.iter().map(|r| r.2.len()).sum();
    let with_text = rows.iter().filter(|r| r.1.is_some()).count();
    assert_eq!(count, format!("{N}|{with_text}|{expected_bytes}"));

    let stream =
        client.copy_out("copy (select * from c order by id) to stdout (format binary)").await.unwrap();
    let out: Vec<CopyRow> = BinaryCopyOutStream::new(stream, &types)
        .map_ok(|row| (row.get(0), row.get(1), row.get(2), row.get(3), row.get(4), row.get(5)))
        .try_collect()
        .await
        .unwrap();
    assert_eq!(out.len(), rows.len());
    assert!(out == rows, "rows copied out differ from rows copied in");

    // A plain COPY OUT in text format as well, counted line by line.
    let stream = client.copy_out("copy c (id) to stdout").await.unwrap();
    let chunks: Vec<bytes::Bytes> = stream.try_collect().await.unwrap();
    let lines = chunks.iter().flat_map(|c| c.iter()).filter(|&&b| b == b'\n').count();
    assert_eq!(lines, N as usize);

    // The connection is still in step afterwards.
    let n: i64 = client.query_one("select count(*) from c where flag", &[]).await.unwrap().get(0);
    assert_eq!(n, rows.iter().filter(|r| r.4).count() as i64);
    let mut stream = pin!(client.copy_out("copy (select 1) to stdout").await.unwrap());
    assert_eq!(stream.next().await.unwrap().unwrap().as_ref(), b"1\n");
    assert!(stream.next().await.is_none());

    drop(client);
    proxy.assert_no_leaks().await;
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_in_sink_writes_raw_text() {
    let pg = start_pg();
    let proxy = TestProxy::start(&ConfigBuilder::new(&pg)).await;
    let client = proxy.connect(USER, PASSWORD, DB).await;
    client.batch_execute("create table r (a int, b text)").await.unwrap();
    let sink = client.copy_in("copy r from stdin").await.unwrap();
    let mut sink = pin!(sink);
    for i in 0..1000 {
        sink.send(bytes::Bytes::from(format!("{i}\tline {i}\n"))).await.unwrap();
    }
    assert_eq!(sink.as_mut().finish().await.unwrap(), 1000);
    let sum: i64 = client.query_one("select sum(a) from r", &[]).await.unwrap().get(0);
    assert_eq!(sum, 999 * 1000 / 2);
    drop(client);
    proxy.assert_no_leaks().await;
    proxy.stop().await;
}
