//! The gateway's answers against real PostgreSQL (issue 33, items 12-14): a JSON answer's
//! status is exact while it fits `gateway.json_buffer_bytes` and one that fails after it
//! began streaming is aborted at the HTTP level (its chunked body never terminated), so no
//! client of Neon's format takes part of an answer for the whole; a JSON batch streams past
//! that budget instead of being held whole; a 2 MB batch pipeline neither deadlocks against
//! the session's backpressure nor keeps the server when its client leaves mid-write.

mod common;

use std::time::{Duration, Instant};

use common::http::{self, neon_auth};
use common::{direct_conninfo, start_pg, ConfigBuilder, TestProxy, DB, PASSWORD, USER};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::net::TcpStream;

/// How soon after its client leaves a query must be gone from the server.
const GONE_WITHIN: Duration = Duration::from_secs(5);

async fn proxy(pg: &harness::Cluster, gateway: &[&str]) -> TestProxy {
    proxy_with(ConfigBuilder::new(pg), gateway).await
}

async fn proxy_with(b: ConfigBuilder, gateway: &[&str]) -> TestProxy {
    let mut b =
        b.pool("pool_mode = \"transaction\"").pool("pool_size = 1").gateway("flush_interval = \"20ms\"");
    for line in gateway {
        b = b.gateway(line);
    }
    TestProxy::start(&b).await
}

fn auth(p: &TestProxy) -> Vec<(String, String)> {
    vec![neon_auth(p.port(), USER, PASSWORD, DB)]
}

/// Reads a chunked body to its end; the flag says whether its last chunk (size 0) came,
/// i.e. whether the server ended the body rather than broke it off.
async fn read_chunked(r: &mut BufReader<TcpStream>) -> (Vec<u8>, bool) {
    let mut body = Vec::new();
    let mut line = String::new();
    loop {
        line.clear();
        match r.read_line(&mut line).await {
            Ok(0) | Err(_) => return (body, false),
            Ok(_) => {}
        }
        let Ok(n) = usize::from_str_radix(line.trim(), 16) else { return (body, false) };
        if n == 0 {
            return (body, true);
        }
        let start = body.len();
        body.resize(start + n, 0);
        if r.read_exact(&mut body[start..]).await.is_err() {
            body.truncate(start);
            return (body, false);
        }
        line.clear();
        if r.read_line(&mut line).await.unwrap_or(0) == 0 {
            return (body, false);
        }
    }
}

async fn backend_pid(p: &TestProxy) -> i64 {
    let gw = p.gateway.expect("gateway");
    let a = http::sql(gw, &auth(p), &json!({"query": "select pg_backend_pid() as pid"})).await;
    a.json()["rows"][0]["pid"].as_i64().unwrap_or_else(|| panic!("no pid: {}", a.text()))
}

/// Backends (other than the asking one) running a query that mentions `marker`.
async fn running(direct: &tokio_postgres::Client, marker: &str) -> i64 {
    direct
        .query_one(
            "select count(*) from pg_stat_activity where state = 'active' and query like '%' || $1 || '%' and pid <> pg_backend_pid()",
            &[&marker],
        )
        .await
        .expect("pg_stat_activity")
        .get(0)
}

async fn until_running(direct: &tokio_postgres::Client, marker: &str) {
    for _ in 0..500 {
        if running(direct, marker).await > 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the query never started");
}

async fn until_not_running(direct: &tokio_postgres::Client, marker: &str) -> Duration {
    let start = Instant::now();
    while running(direct, marker).await > 0 {
        assert!(
            start.elapsed() < GONE_WITHIN,
            "the query still runs {:?} after its client left",
            start.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    start.elapsed()
}

/// Item 12: `select 10/(3-g)` fails at its third row. PostgreSQL says 22012 to a wire
/// client; the JSON answer must say it too, with an error status, not 200 and two rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_after_rows_gets_an_error_status() {
    let pg = start_pg();
    let p = proxy(&pg, &[]).await;
    let gw = p.gateway.expect("gateway");
    let direct = common::connect(&direct_conninfo(&pg, USER, PASSWORD, DB)).await.expect("direct");
    let sql = "select 10/(3-g) as x from generate_series(1, 5) g";
    let e = direct.query(sql, &[]).await.expect_err("PostgreSQL refuses it");
    let (code, message) = (common::sqlstate(&e), e.as_db_error().map(|d| d.message().to_owned()));

    let a = http::sql(gw, &auth(&p), &json!({"query": sql})).await;
    assert_eq!(a.status, 400, "{}", a.text().chars().take(300).collect::<String>());
    let v = a.json();
    assert_eq!(v["code"].as_str().map(str::to_owned), code, "{v}");
    assert_eq!(v["message"].as_str().map(str::to_owned), message, "{v}");
    assert!(v.get("rows").is_none(), "{v}");

    // The same in a batch, after a whole result.
    let batch = json!({"queries": [{"query": "select 1 as one"}, {"query": sql}]});
    let a = http::sql(gw, &auth(&p), &batch).await;
    assert_eq!((a.status, a.json()["code"].clone()), (400, json!("22012")), "{}", a.text());
    p.assert_no_leaks().await;
}

/// Item 12: past `json_buffer_bytes` the answer streams with 200; when it then fails, the
/// chunked body is broken off (no last chunk), so `fetch` rejects instead of resolving
/// with the rows before the error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_json_answer_failing_past_its_buffer_is_aborted() {
    let pg = start_pg();
    let p = proxy(&pg, &["json_buffer_bytes = 4096"]).await;
    let gw = p.gateway.expect("gateway");
    let pid = backend_pid(&p).await;
    let sql = "select g, 10/(20000-g) as x from generate_series(1, 30000) g";
    let body = json!({"query": sql}).to_string();
    let (mut r, status, headers) = http::send(gw, "POST", "/sql", &auth(&p), body.as_bytes()).await;
    assert_eq!(status, 200);
    assert!(headers
        .iter()
        .any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked")));
    let (got, terminated) = read_chunked(&mut r).await;
    assert!(!terminated, "the body ended as if whole after {} bytes", got.len());
    assert!(serde_json::from_slice::<Value>(&got).is_err(), "what came parses as a whole answer");
    assert!(got.len() > 4096, "{} bytes before the break", got.len());

    // A batch failing past the buffer: broken off too, and rolled back.
    let h = auth(&p);
    let a = http::sql(gw, &h, &json!({"query": "create table t12 (id int)"})).await;
    assert_eq!(a.status, 200, "{}", a.text());
    let batch = json!({"queries": [{"query": "insert into t12 values (1)"}, {"query": sql}]});
    let (mut r, status, _) = http::send(gw, "POST", "/sql", &h, batch.to_string().as_bytes()).await;
    assert_eq!(status, 200);
    assert!(!read_chunked(&mut r).await.1, "the batch's body ended as if whole");
    let a = http::sql(gw, &h, &json!({"query": "select count(*)::int as n from t12"})).await;
    assert_eq!(a.json()["rows"][0]["n"], 0, "{}", a.text());

    // The server went back to the pool clean and is reused.
    assert_eq!(backend_pid(&p).await, pid, "the server was not reused");
    p.assert_no_leaks().await;
}

/// Item 13: a JSON batch is not held whole. With a 64 KiB budget, a batch of about 40 MB
/// has its head while PostgreSQL still sends it (the client reads nothing), and one that
/// fits a few MB reads back whole and as PostgreSQL returns it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_json_batch_streams_past_its_buffer() {
    let pg = start_pg();
    let p = proxy(&pg, &["json_buffer_bytes = 65536"]).await;
    let gw = p.gateway.expect("gateway");
    let direct = common::connect(&direct_conninfo(&pg, USER, PASSWORD, DB)).await.expect("direct");
    let pid = backend_pid(&p).await;

    let sql = "select g, md5(g::text) as h from generate_series(1, 20000) g";
    let batch = json!({"queries": [{"query": "select 1 as one"}, {"query": sql}]});
    let a = http::sql(gw, &auth(&p), &batch).await;
    assert_eq!(a.status, 200, "{}", a.text());
    assert_eq!(a.header("transfer-encoding"), Some("chunked"));
    let v = a.json();
    let rows = v["results"][1]["rows"].as_array().cloned().unwrap_or_default();
    let want = direct.query(sql, &[]).await.expect("direct");
    assert_eq!(rows.len(), want.len());
    for (got, want) in rows.iter().zip(&want) {
        assert_eq!(got["g"], json!(want.get::<_, i32>(0)));
        assert_eq!(got["h"], json!(want.get::<_, String>(1)));
    }
    assert_eq!(v["results"][1]["rowCount"], 20000);

    let big = "select g, repeat('x', 200) as pad /* marker_batch13 */ from generate_series(1, 200000) g";
    let batch = json!({"queries": [{"query": "select 1 as one"}, {"query": big}]});
    let (r, status, _) = tokio::time::timeout(
        Duration::from_secs(60),
        http::send(gw, "POST", "/sql", &auth(&p), batch.to_string().as_bytes()),
    )
    .await
    .expect("the head of a large batch");
    assert_eq!(status, 200);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(running(&direct, "marker_batch13").await, 1, "the whole batch was read before its head went");
    drop(r);
    until_not_running(&direct, "marker_batch13").await;
    assert_eq!(backend_pid(&p).await, pid, "the server was not reused");
    p.assert_no_leaks().await;
}

/// Item 13: `max_response_bytes` bounds an answer as Neon's cap does: 507 with `54000`
/// when nothing was sent yet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_max_response_bytes_is_507() {
    let pg = start_pg();
    let p = proxy(&pg, &["max_response_bytes = 100000"]).await;
    let gw = p.gateway.expect("gateway");
    let sql = "select g, repeat('x', 100) as pad from generate_series(1, 10000) g";
    let a = http::sql(gw, &auth(&p), &json!({"query": sql})).await;
    assert_eq!(a.status, 507, "{}", a.text().chars().take(300).collect::<String>());
    let v = a.json();
    assert_eq!(v["code"], "54000");
    assert!(v["message"].as_str().unwrap_or_default().contains("max_response_bytes"), "{v}");
    let a =
        http::sql(gw, &auth(&p), &json!({"queries": [{"query": "select 1 as ok"}, {"query": sql}]})).await;
    assert_eq!((a.status, a.json()["code"].clone()), (507, json!("54000")));
    let a = http::sql(gw, &auth(&p), &json!({"query": "select 1 as ok"})).await;
    assert_eq!(a.json()["rows"][0]["ok"], 1);
    p.assert_no_leaks().await;
}

/// A batch: `first`, then `n` statements padded to about 5 KB of SQL each (2 MB in all).
fn pipeline(first: &str, n: usize) -> Value {
    let comment = "p".repeat(5000);
    let mut queries = vec![json!({"query": first})];
    queries.extend(
        (0..n).map(|i| json!({"query": format!("select $1::int as n /* {comment} */"), "params": [i]})),
    );
    json!({"queries": queries})
}

/// Item 14: a 2 MB batch whose first statement answers 8 MB, more than the session holds
/// for a client that does not read (`limits.client_backlog_bytes`), is answered, not stuck
/// with the gateway still writing the rest; and a client leaving while such a pipeline is
/// being written frees the server, which is reused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2mb_batch_pipeline_neither_deadlocks_nor_keeps_the_server() {
    let pg = start_pg();
    // The least the session may hold for its client (the default is 1 MiB).
    let p = proxy_with(ConfigBuilder::new(&pg).limits("client_backlog_bytes = 65536"), &[]).await;
    let gw = p.gateway.expect("gateway");
    let direct = common::connect(&direct_conninfo(&pg, USER, PASSWORD, DB)).await.expect("direct");
    let pid = backend_pid(&p).await;

    let batch = pipeline("select g, repeat('y', 20000) as pad from generate_series(1, 400) g", 400);
    let body = batch.to_string();
    assert!(body.len() > 2_000_000, "{} bytes", body.len());
    let a = tokio::time::timeout(
        Duration::from_secs(60),
        http::request(gw, "POST", "/sql", &auth(&p), body.as_bytes()),
    )
    .await
    .expect("a 2 MB batch answered within a minute");
    assert_eq!(a.status, 200, "{}", a.text().chars().take(500).collect::<String>());
    let v = a.json();
    let results = v["results"].as_array().cloned().unwrap_or_default();
    assert_eq!(results.len(), 401);
    assert_eq!(results[0]["rowCount"], 400);
    assert_eq!(results[0]["rows"][399]["pad"].as_str().map(str::len), Some(20000));
    for (i, r) in results[1..].iter().enumerate() {
        assert_eq!(r["rows"][0]["n"], json!(i));
    }

    // The client leaves while the pipeline is still being written.
    let first = "select g, pg_sleep(0.02), repeat('y', 20000) as pad /* marker_pipe14 */ from generate_series(1, 400) g";
    let body = pipeline(first, 400).to_string();
    let h = auth(&p);
    let conn = tokio::spawn(async move {
        let _ = http::send(gw, "POST", "/sql", &h, body.as_bytes()).await;
    });
    until_running(&direct, "marker_pipe14").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    conn.abort();
    let _ = conn.await;
    let took = until_not_running(&direct, "marker_pipe14").await;
    eprintln!("mid-write disconnect: the batch was gone after {took:?}");
    assert_eq!(backend_pid(&p).await, pid, "the server was not reused");
    p.assert_no_leaks().await;
}
