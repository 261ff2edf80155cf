//! tokio-postgres at its default settings: `prepare` creates named statements (s0, s1, ...)
//! that are closed when the `Statement` is dropped, and `query` with a string prepares one
//! for that call; queries issued together on one client are pipelined.

use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::{future, pin_mut, SinkExt, StreamExt, TryStreamExt};
use pgvia_compat::{stress_clients, stress_duration, url, Rng};
use tokio_postgres::binary_copy::{BinaryCopyInWriter, BinaryCopyOutStream};
use tokio_postgres::error::SqlState;
use tokio_postgres::types::Type;
use tokio_postgres::{AsyncMessage, Client, NoTls};

async fn connect() -> Client {
    let (client, connection) = tokio_postgres::connect(&url(), NoTls).await.unwrap();
    tokio::spawn(connection);
    client
}

async fn fresh_table(client: &Client, name: &str, columns: &str) {
    client
        .batch_execute(&format!("DROP TABLE IF EXISTS {name}; CREATE TABLE {name} ({columns})"))
        .await
        .unwrap();
}

#[tokio::test]
async fn tp_simple_query_and_parameters() {
    let client = connect().await;
    let msgs = client.simple_query("SELECT 1; SELECT 'two'").await.unwrap();
    let rows: Vec<_> = msgs
        .iter()
        .filter_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => Some(r.get(0).unwrap().to_owned()),
            _ => None,
        })
        .collect();
    assert_eq!(rows, ["1", "two"]);
    let row = client
        .query_one(
            "SELECT $1::int8 + 1, $2::text, $3::bool, $4::bytea",
            &[&41i64, &"it's", &true, &vec![0u8, 255]],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, i64>(0), 42);
    assert_eq!(row.get::<_, &str>(1), "it's");
    assert!(row.get::<_, bool>(2));
    assert_eq!(row.get::<_, Vec<u8>>(3), vec![0, 255]);
    let err = client.query_one("SELECT 1 / $1::int", &[&0i32]).await.unwrap_err();
    assert_eq!(err.code(), Some(&SqlState::DIVISION_BY_ZERO));
    assert_eq!(client.query_one("SELECT $1::int", &[&7i32]).await.unwrap().get::<_, i32>(0), 7);
}

#[tokio::test]
async fn tp_named_statements_created_and_dropped() {
    let client = connect().await;
    for round in 0..20i32 {
        // Each prepare is a new named statement; dropping it sends Close for that name.
        let stmt = client.prepare("SELECT $1::int * 2, $2::text").await.unwrap();
        for i in 0..5i32 {
            let row = client.query_one(&stmt, &[&(round * 10 + i), &"x"]).await.unwrap();
            assert_eq!(row.get::<_, i32>(0), (round * 10 + i) * 2);
        }
        drop(stmt);
    }
    let typed = client.prepare_typed("SELECT $1 || '!'", &[Type::TEXT]).await.unwrap();
    assert_eq!(client.query_one(&typed, &[&"hey"]).await.unwrap().get::<_, &str>(0), "hey!");
}

#[tokio::test]
async fn tp_pipelined_queries() {
    let client = connect().await;
    let stmt = client.prepare("SELECT $1::int + 1000").await.unwrap();
    // All queries are sent before the first answer is read.
    let futures = (0..200i32).map(|i| {
        let client = &client;
        let stmt = &stmt;
        async move { client.query_one(stmt, &[&i]).await.map(|r| r.get::<_, i32>(0)) }
    });
    let got: Vec<i32> = future::try_join_all(futures).await.unwrap();
    assert_eq!(got, (0..200).map(|i| i + 1000).collect::<Vec<_>>());
    // An error in the middle of a pipeline fails only its own query.
    let (a, b, c) = tokio::join!(
        client.query_one("SELECT 1::int", &[]),
        client.query_one("SELECT 1 / 0", &[]),
        client.query_one("SELECT 3::int", &[]),
    );
    assert_eq!(a.unwrap().get::<_, i32>(0), 1);
    assert_eq!(b.unwrap_err().code(), Some(&SqlState::DIVISION_BY_ZERO));
    assert_eq!(c.unwrap().get::<_, i32>(0), 3);
}

#[tokio::test]
async fn tp_transactions() {
    let mut client = connect().await;
    fresh_table(&client, "rs_tp_tx", "n int").await;
    let tx = client.transaction().await.unwrap();
    tx.execute("INSERT INTO rs_tp_tx VALUES ($1)", &[&1i32]).await.unwrap();
    {
        let mut tx = tx;
        let sp = tx.savepoint("sp").await.unwrap();
        sp.execute("INSERT INTO rs_tp_tx VALUES ($1)", &[&2i32]).await.unwrap();
        sp.rollback().await.unwrap();
        tx.execute("INSERT INTO rs_tp_tx VALUES ($1)", &[&3i32]).await.unwrap();
        tx.commit().await.unwrap();
    }
    let tx = client.transaction().await.unwrap();
    tx.execute("INSERT INTO rs_tp_tx VALUES ($1)", &[&4i32]).await.unwrap();
    drop(tx); // rolled back
    let rows = client.query("SELECT n FROM rs_tp_tx ORDER BY n", &[]).await.unwrap();
    assert_eq!(rows.iter().map(|r| r.get::<_, i32>(0)).collect::<Vec<_>>(), [1, 3]);
}

#[tokio::test]
async fn tp_copy_in_and_out() {
    let client = connect().await;
    fresh_table(&client, "rs_tp_copy", "id int, label text").await;
    // Text COPY in.
    let sink = client.copy_in("COPY rs_tp_copy FROM STDIN").await.unwrap();
    pin_mut!(sink);
    let text: String = (0..5000).map(|i| format!("{i}\tline {i}\n")).collect();
    for chunk in text.as_bytes().chunks(4096) {
        sink.send(Bytes::copy_from_slice(chunk)).await.unwrap();
    }
    assert_eq!(sink.finish().await.unwrap(), 5000);
    // Binary COPY in.
    let sink = client.copy_in("COPY rs_tp_copy FROM STDIN (FORMAT BINARY)").await.unwrap();
    let writer = BinaryCopyInWriter::new(sink, &[Type::INT4, Type::TEXT]);
    pin_mut!(writer);
    for i in 5000..6000i32 {
        writer.as_mut().write(&[&i, &format!("line {i}")]).await.unwrap();
    }
    assert_eq!(writer.finish().await.unwrap(), 1000);
    // Text and binary COPY out.
    let stream = client
        .copy_out("COPY (SELECT id, label FROM rs_tp_copy WHERE id < 5000 ORDER BY id) TO STDOUT")
        .await
        .unwrap();
    let chunks: Vec<Bytes> = stream.try_collect().await.unwrap();
    assert_eq!(chunks.concat(), text.as_bytes());
    let stream = client
        .copy_out("COPY (SELECT id, label FROM rs_tp_copy ORDER BY id) TO STDOUT (FORMAT BINARY)")
        .await
        .unwrap();
    let rows: Vec<_> =
        BinaryCopyOutStream::new(stream, &[Type::INT4, Type::TEXT]).try_collect().await.unwrap();
    assert_eq!(rows.len(), 6000);
    assert_eq!(rows[5999].get::<i32>(0), 5999);
    assert_eq!(rows[5999].get::<&str>(1), "line 5999");
}

#[tokio::test]
async fn tp_cancel_query() {
    let client = connect().await;
    let token = client.cancel_token();
    let canceller = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(500)).await;
        token.cancel_query(NoTls).await
    });
    let started = Instant::now();
    let err = client.simple_query("SELECT pg_sleep(20)").await.unwrap_err();
    assert_eq!(err.code(), Some(&SqlState::QUERY_CANCELED));
    assert!(started.elapsed() < Duration::from_secs(10));
    canceller.await.unwrap().unwrap();
    assert_eq!(client.query_one("SELECT 5", &[]).await.unwrap().get::<_, i32>(0), 5);
}

#[tokio::test]
async fn tp_listen_notify() {
    let (listener, mut connection) = tokio_postgres::connect(&url(), NoTls).await.unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
    tokio::spawn(messages.for_each(move |m| {
        if let Ok(AsyncMessage::Notification(n)) = m {
            let _ = tx.send((n.channel().to_owned(), n.payload().to_owned()));
        }
        future::ready(())
    }));
    listener.batch_execute("LISTEN rs_channel").await.unwrap();
    let sender = connect().await;
    for i in 0..3 {
        sender.execute("SELECT pg_notify('rs_channel', $1)", &[&format!("payload {i}")]).await.unwrap();
    }
    for i in 0..3 {
        let got = tokio::time::timeout(Duration::from_secs(10), rx.recv()).await.unwrap().unwrap();
        assert_eq!(got, ("rs_channel".to_owned(), format!("payload {i}")));
    }
    listener.batch_execute("UNLISTEN rs_channel").await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tp_stress_50_clients_pool_3() {
    let setup = connect().await;
    fresh_table(&setup, "rs_tp_stress", "client int, n int").await;
    let deadline = Instant::now() + stress_duration();
    let clients = (0..stress_clients()).map(|cid| tokio::spawn(tp_stress_client(cid as i32, deadline)));
    let results = future::join_all(clients).await;
    let failures: Vec<String> = results
        .into_iter()
        .enumerate()
        .filter_map(|(cid, r)| match r {
            Ok(Ok(())) => None,
            Ok(Err(e)) => Some(format!("client {cid}: {e}")),
            Err(e) => Some(format!("client {cid} panicked: {e}")),
        })
        .collect();
    assert!(
        failures.is_empty(),
        "{} clients failed, first: {:?}",
        failures.len(),
        &failures[..failures.len().min(3)]
    );
}

async fn tp_stress_client(cid: i32, deadline: Instant) -> Result<(), String> {
    let (mut client, connection) = tokio_postgres::connect(&url(), NoTls).await.map_err(|e| e.to_string())?;
    tokio::spawn(connection);
    let e = |e: tokio_postgres::Error| match e.as_db_error() {
        Some(db) => format!("{}: {}", db.code().code(), db.message()),
        None => e.to_string(),
    };
    let double = client.prepare("SELECT $1::int8 * 2").await.map_err(e)?;
    let mut rng = Rng::new(cid as u64);
    let mut inserted = 0i64;
    while Instant::now() < deadline {
        match rng.below(4) {
            0 => {
                let v = rng.below(1_000_000) as i64;
                let got: i64 = client.query_one(&double, &[&v]).await.map_err(e)?.get(0);
                check(got == v * 2, || format!("double {v}: {got}"))?;
            }
            1 => {
                let n = rng.below(50) as i32 + 1;
                let row = client
                    .query_one("SELECT count(*), sum(g)::int8 FROM generate_series(1, $1::int) g", &[&n])
                    .await
                    .map_err(e)?;
                let (count, sum): (i64, i64) = (row.get(0), row.get(1));
                check(count == n as i64 && sum == (n as i64) * (n as i64 + 1) / 2, || {
                    format!("series {n}: {count} {sum}")
                })?;
            }
            2 => {
                let tx = client.transaction().await.map_err(e)?;
                tx.execute("INSERT INTO rs_tp_stress VALUES ($1, $2)", &[&cid, &(inserted as i32)])
                    .await
                    .map_err(e)?;
                let count: i64 = tx
                    .query_one("SELECT count(*) FROM rs_tp_stress WHERE client = $1", &[&cid])
                    .await
                    .map_err(e)?
                    .get(0);
                check(count == inserted + 1, || format!("count in transaction: {count}"))?;
                tx.commit().await.map_err(e)?;
                inserted += 1;
            }
            _ => {
                // A statement created and dropped (Close) within the work item.
                let stmt =
                    client.prepare("SELECT $1::text || g FROM generate_series(1, 5) g").await.map_err(e)?;
                let rows = client.query(&stmt, &[&format!("c{cid}-")]).await.map_err(e)?;
                let got: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
                check(got == (1..=5).map(|g| format!("c{cid}-{g}")).collect::<Vec<_>>(), || {
                    format!("rows {got:?}")
                })?;
            }
        }
    }
    let count: i64 = client
        .query_one("SELECT count(*) FROM rs_tp_stress WHERE client = $1", &[&cid])
        .await
        .map_err(e)?
        .get(0);
    check(count == inserted, || format!("final count {count}, want {inserted}"))
}

fn check(ok: bool, what: impl FnOnce() -> String) -> Result<(), String> {
    if ok {
        Ok(())
    } else {
        Err(what())
    }
}
