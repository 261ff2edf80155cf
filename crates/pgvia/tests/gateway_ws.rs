//! The wire protocol over WebSocket (`/v2`): a real client (tokio-postgres, SCRAM login)
//! tunnelled through a WebSocket gets an ordinary pgvia session: queries, an interactive
//! transaction, errors with their SQLSTATE, a refused password.

mod common;

use std::time::Duration;

use bytes::BytesMut;
use common::{start_pg, ConfigBuilder, TestProxy, DB, PASSWORD, USER};
use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
use tokio_tungstenite::tungstenite::Message;

/// Opens `/v2` and returns one end of a pipe whose bytes travel as binary messages.
async fn tunnel(gw: std::net::SocketAddr) -> DuplexStream {
    let tcp = tokio::net::TcpStream::connect(gw).await.expect("connect");
    let (mut ws, resp) =
        tokio_tungstenite::client_async(format!("ws://{gw}/v2"), tcp).await.expect("WebSocket handshake");
    assert_eq!(resp.status(), 101);
    let (ours, mut theirs) = tokio::io::duplex(64 * 1024);
    tokio::spawn(async move {
        let mut buf = BytesMut::with_capacity(64 * 1024);
        loop {
            tokio::select! {
                m = ws.next() => match m {
                    Some(Ok(Message::Binary(b))) => if theirs.write_all(&b).await.is_err() { break },
                    Some(Ok(_)) => {}
                    _ => break,
                },
                n = theirs.read_buf(&mut buf) => match n {
                    Ok(0) | Err(_) => { let _ = ws.close(None).await; break }
                    Ok(_) => if ws.send(Message::Binary(buf.split().freeze())).await.is_err() { break },
                },
            }
        }
    });
    ours
}

async fn client(gw: std::net::SocketAddr) -> tokio_postgres::Client {
    let cfg: tokio_postgres::Config =
        format!("user={USER} password={PASSWORD} dbname={DB}").parse().expect("config");
    let (client, conn) =
        cfg.connect_raw(tunnel(gw).await, tokio_postgres::NoTls).await.expect("log in over WebSocket");
    tokio::spawn(async move {
        let _ = conn.await;
    });
    client
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wire_sessions_over_websocket() {
    let pg = start_pg();
    let p = TestProxy::start(
        &ConfigBuilder::new(&pg).pool("pool_mode = \"transaction\"").gateway("flush_interval = \"20ms\""),
    )
    .await;
    let gw = p.gateway.expect("gateway");

    let a = client(gw).await;
    let row = a.query_one("select $1::int + 1", &[&41i32]).await.expect("query");
    assert_eq!(row.get::<_, i32>(0), 42);

    // An interactive transaction: its statements see each other, another session does not.
    a.batch_execute("create table w (id int)").await.expect("create");
    a.batch_execute("begin; insert into w values (1)").await.expect("begin");
    let b = client(gw).await;
    let n: i64 = b.query_one("select count(*) from w", &[]).await.expect("count").get(0);
    assert_eq!(n, 0);
    let n: i64 = a.query_one("select count(*) from w", &[]).await.expect("count").get(0);
    assert_eq!(n, 1);
    a.batch_execute("commit").await.expect("commit");
    let n: i64 = b.query_one("select count(*) from w", &[]).await.expect("count").get(0);
    assert_eq!(n, 1);

    // Errors keep their SQLSTATE.
    let e = a.query_one("select 1/0", &[]).await.expect_err("division by zero");
    assert_eq!(e.code().map(|c| c.code()), Some("22012"));

    // A wrong password is refused as on the wire.
    let cfg: tokio_postgres::Config =
        format!("user={USER} password=nope dbname={DB}").parse().expect("config");
    let e = cfg.connect_raw(tunnel(gw).await, tokio_postgres::NoTls).await.err().expect("refused");
    assert_eq!(e.code().map(|c| c.code()), Some("28P01"));

    drop(a);
    drop(b);
    tokio::time::sleep(Duration::from_millis(100)).await;
    p.assert_no_leaks().await;
}
