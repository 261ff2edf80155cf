//! `POST /sql` against real PostgreSQL: Neon's request and response format, batches in one
//! transaction, errors with every field, the streaming formats, and refusals.

mod common;

use common::http::{self, neon_auth};
use common::{start_pg, ConfigBuilder, TestProxy, DB, PASSWORD, USER};
use serde_json::{json, Value};

async fn gateway_proxy(pg: &harness::Cluster, pool_mode: &str, extra: &[&str]) -> TestProxy {
    let mut b = ConfigBuilder::new(pg)
        .pool(&format!("pool_mode = \"{pool_mode}\""))
        .gateway("flush_interval = \"20ms\"");
    for line in extra {
        b = b.gateway(line);
    }
    TestProxy::start(&b).await
}

fn auth(p: &TestProxy) -> Vec<(String, String)> {
    vec![neon_auth(p.port(), USER, PASSWORD, DB)]
}

fn with(mut h: Vec<(String, String)>, k: &str, v: &str) -> Vec<(String, String)> {
    h.push((k.to_owned(), v.to_owned()));
    h
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn neon_format_round_trips() {
    let pg = start_pg();
    let p = gateway_proxy(&pg, "transaction", &["cors_allowed_origins = [\"*\"]"]).await;
    let gw = p.gateway.expect("gateway address");

    // Typed values, rows as objects.
    let a = http::sql(
        gw,
        &auth(&p),
        &json!({"query": "select 1::int4 as i, 2::int8 as big, true as b, 1.5::float8 as f, 'NaN'::float8 as nan, \
                 '{\"k\": [1, 2]}'::jsonb as j, array[1, null, 3] as arr, 'a\"b\\c\u{1}é'::text as t, \
                 null::text as n, 12.50::numeric as num, '\\x0102'::bytea as bytes, $1::text as p",
                "params": ["it's $1; drop table x"]}),
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.text());
    assert_eq!(a.header("content-type"), Some("application/json"));
    let v = a.json();
    assert_eq!(v["command"], "SELECT");
    assert_eq!(v["rowCount"], 1);
    assert_eq!(v["rowAsArray"], false);
    assert_eq!(
        v["rows"][0],
        json!({"i": 1, "big": "2", "b": true, "f": 1.5, "nan": "NaN", "j": {"k": [1, 2]}, "arr": [1, null, 3],
               "t": "a\"b\\c\u{1}é", "n": null, "num": "12.50", "bytes": "\\x0102", "p": "it's $1; drop table x"})
    );
    let f0 = &v["fields"][0];
    assert_eq!(f0["name"], "i");
    assert_eq!(f0["dataTypeID"], 23);
    assert_eq!(f0["dataTypeSize"], 4);
    assert_eq!(f0["dataTypeModifier"], -1);
    assert_eq!(f0["format"], "text");
    assert_eq!(v["fields"].as_array().map(Vec::len), Some(12));

    // Array mode and raw text, as Neon's driver always asks.
    let h = with(with(auth(&p), "Neon-Array-Mode", "true"), "Neon-Raw-Text-Output", "true");
    let a = http::sql(gw, &h, &json!({"query": "select 1 as a, array[1,2] as b, true as c, null::int as d"}))
        .await;
    assert_eq!(a.status, 200, "{}", a.text());
    let v = a.json();
    assert_eq!(v["rowAsArray"], true);
    assert_eq!(v["rows"], json!([["1", "{1,2}", "t", null]]));

    // A table: DDL, DML with counts, a select of several rows; params of every JSON type.
    let h = auth(&p);
    let a = http::sql(
        gw,
        &h,
        &json!({"query": "create table t (id int primary key, name text, tags text[], doc jsonb)"}),
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.text());
    assert_eq!(a.json()["command"], "CREATE");
    assert_eq!(a.json()["rowCount"], Value::Null);
    let a = http::sql(
        gw,
        &h,
        &json!({"query": "insert into t values ($1, $2, $3, $4), ($5, $6, null, null)",
                "params": [1, "one", ["a", "b,c", null], {"x": 1}, 2, null]}),
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.text());
    assert_eq!((a.json()["command"].clone(), a.json()["rowCount"].clone()), (json!("INSERT"), json!(2)));
    let a = http::sql(gw, &h, &json!({"query": "select * from t order by id", "arrayMode": true})).await;
    assert_eq!(a.json()["rows"], json!([[1, "one", ["a", "b,c", null], {"x": 1}], [2, null, null, null]]));
    assert_eq!(a.json()["rowCount"], 2);

    // An empty query and a statement without rows.
    let a = http::sql(gw, &h, &json!({"query": ""})).await;
    assert_eq!(a.status, 200, "{}", a.text());

    // CORS, as Neon answers when every origin is allowed (pgvia's default allows none).
    let a =
        http::request(gw, "OPTIONS", "/sql", &[("Origin".into(), "https://example.com".into())], b"").await;
    assert_eq!(a.status, 204);
    assert_eq!(a.header("access-control-allow-origin"), Some("*"));
    assert!(a.header("access-control-allow-headers").is_some_and(|v| v.contains("Neon-Connection-String")));
    p.assert_no_leaks().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_run_in_one_transaction() {
    let pg = start_pg();
    let p = gateway_proxy(&pg, "transaction", &[]).await;
    let gw = p.gateway.expect("gateway address");
    let h = auth(&p);
    http::sql(gw, &h, &json!({"query": "create table b (id int primary key)"})).await;
    let a = http::sql(
        gw,
        &h,
        &json!({"queries": [
            {"query": "insert into b values ($1)", "params": [1]},
            {"query": "select count(*)::int as n from b", "arrayMode": true},
            {"query": "select current_setting('transaction_isolation') as iso"}
        ]}),
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.text());
    let v = a.json();
    assert_eq!(v["results"][0]["rowCount"], 1);
    assert_eq!(v["results"][1]["rows"], json!([[1]]));
    assert_eq!(v["results"][2]["rows"][0]["iso"], "read committed");

    // Isolation and read-only from Neon's headers.
    let hh =
        with(with(h.clone(), "Neon-Batch-Isolation-Level", "Serializable"), "Neon-Batch-Read-Only", "true");
    let a = http::sql(
        gw,
        &hh,
        &json!({"queries": [{"query": "select current_setting('transaction_isolation') as iso, current_setting('transaction_read_only') as ro"}]}),
    )
    .await;
    assert_eq!(a.json()["results"][0]["rows"][0], json!({"iso": "serializable", "ro": "on"}));

    // A failing statement rolls the whole batch back: 400 with the error, nothing inserted.
    let a = http::sql(
        gw,
        &h,
        &json!({"queries": [{"query": "insert into b values (2)"}, {"query": "insert into b values (1)"}]}),
    )
    .await;
    assert_eq!(a.status, 400, "{}", a.text());
    assert_eq!(a.json()["code"], "23505");
    assert_eq!(a.json()["constraint"], "b_pkey");
    let a = http::sql(gw, &h, &json!({"query": "select count(*)::int as n from b"})).await;
    assert_eq!(a.json()["rows"][0]["n"], 1);
    p.assert_no_leaks().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_and_refusals() {
    let pg = start_pg();
    let p =
        gateway_proxy(&pg, "transaction", &["max_body_bytes = 2048", "statement_timeout = \"500ms\""]).await;
    let gw = p.gateway.expect("gateway address");
    let h = auth(&p);

    // A server error: 400 with every field PostgreSQL sent.
    let a = http::sql(gw, &h, &json!({"query": "select 1/0"})).await;
    assert_eq!(a.status, 400);
    let v = a.json();
    assert_eq!(v["code"], "22012");
    assert_eq!(v["message"], "division by zero");
    assert_eq!(v["severity"], "ERROR");
    assert!(v["file"].is_string() && v["routine"].is_string(), "{v}");
    let a = http::sql(gw, &h, &json!({"query": "selec 1"})).await;
    assert_eq!(
        (a.status, a.json()["code"].clone(), a.json()["position"].clone()),
        (400, json!("42601"), json!("1"))
    );

    // Wrong password and unknown user: the same 401, the same body.
    let wrong = http::sql(gw, &[neon_auth(p.port(), USER, "nope", DB)], &json!({"query": "select 1"})).await;
    let unknown =
        http::sql(gw, &[neon_auth(p.port(), "nobody", "nope", DB)], &json!({"query": "select 1"})).await;
    let none = http::sql(gw, &[], &json!({"query": "select 1"})).await;
    assert_eq!(wrong.status, 401);
    assert_eq!((wrong.status, wrong.body.clone()), (unknown.status, unknown.body.clone()));
    assert_eq!((wrong.status, wrong.body.clone()), (none.status, none.body.clone()));
    assert_eq!(wrong.json()["code"], "28P01");
    // HTTP Basic works too.
    let basic = ("Authorization".to_owned(), "Basic YXBwOnNlY3JldA==".to_owned()); // app:secret
    let a = http::sql(gw, &[basic], &json!({"query": "select current_user as u"})).await;
    assert_eq!(a.json()["rows"][0]["u"], USER);

    // Malformed JSON, wrong shapes, a too-large body.
    let a = http::request(gw, "POST", "/sql", &h, b"{\"query\": ").await;
    assert_eq!(a.status, 400);
    assert!(a.json()["message"].as_str().is_some_and(|m| m.contains("malformed JSON")));
    let a = http::sql(gw, &h, &json!({"query": "select $1", "params": {"a": 1}})).await;
    assert_eq!(a.status, 400);
    let a = http::sql(gw, &h, &json!({"query": "select 1", "arrayMode": "yes"})).await;
    assert_eq!(a.status, 400);
    let big = "x".repeat(4096);
    let a = http::sql(gw, &h, &json!({"query": format!("select '{big}'")})).await;
    assert_eq!(a.status, 413);
    // Non-text params are sent as their text and typed by the server.
    let a = http::sql(gw, &h, &json!({"query": "select $1::int + 1 as n, $2::bool as b, $3::int[] as a", "params": [41, true, [1, 2]]})).await;
    assert_eq!(a.json()["rows"][0], json!({"n": 42, "b": true, "a": [1, 2]}));

    // gateway.statement_timeout reaches the server as the session's startup setting.
    let a = http::sql(gw, &h, &json!({"query": "select pg_sleep(3)"})).await;
    assert_eq!((a.status, a.json()["code"].clone()), (400, json!("57014")));

    // An unknown database: the session's own error.
    let a = http::sql(gw, &[neon_auth(p.port(), USER, PASSWORD, "nosuchdb")], &json!({"query": "select 1"}))
        .await;
    assert_eq!((a.status, a.json()["code"].clone()), (400, json!("3D000")));

    // Other clients were not disturbed.
    let a = http::sql(gw, &h, &json!({"query": "select 1 as one"})).await;
    assert_eq!(a.json()["rows"][0]["one"], 1);
    p.assert_no_leaks().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streaming_formats() {
    let pg = start_pg();
    let p = gateway_proxy(&pg, "transaction", &["max_response_rows = 1000"]).await;
    let gw = p.gateway.expect("gateway address");
    let h = auth(&p);

    let nd = with(h.clone(), "Accept", "application/x-ndjson");
    let a =
        http::sql(gw, &nd, &json!({"query": "select i, i::text as s from generate_series(1, 3) i"})).await;
    assert_eq!(a.status, 200);
    assert_eq!(a.header("content-type"), Some("application/x-ndjson"));
    assert_eq!(a.text(), "{\"i\":1,\"s\":\"1\"}\n{\"i\":2,\"s\":\"2\"}\n{\"i\":3,\"s\":\"3\"}\n");

    // An error after rows: the stream ends with an error record.
    let a = http::sql(gw, &nd, &json!({"query": "select 1/(3-i) as x from generate_series(1, 5) i"})).await;
    assert_eq!(a.status, 200);
    let lines: Vec<Value> = a.text().lines().map(|l| serde_json::from_str(l).expect("a JSON line")).collect();
    assert_eq!(lines.len(), 3, "{}", a.text());
    assert_eq!(lines[2]["error"]["code"], "22012");
    // ... and before any row: a proper status.
    let a = http::sql(gw, &nd, &json!({"query": "select 1/0"})).await;
    assert_eq!((a.status, a.json()["code"].clone()), (400, json!("22012")));

    // Neon's message stream.
    let ns = with(h.clone(), "Accept", "application/vnd.neon.sql.v1+json");
    let a = http::sql(gw, &ns, &json!({"query": "select 1 as a, 'x' as b"})).await;
    let lines: Vec<Value> = a.text().lines().map(|l| serde_json::from_str(l).expect("a JSON line")).collect();
    assert_eq!(lines[0][0], 1);
    assert_eq!(lines[0][1]["name"], "a");
    assert_eq!(lines[1], json!([0, 1, "x"]));
    assert_eq!(lines[2], json!([2, "SELECT", 1]));
    assert_eq!(lines[3], json!([3]));

    // A plain JSON answer within gateway.json_buffer_bytes is sent whole, its status exact
    // (past it, it streams: tests/gateway_answers.rs).
    let a = http::sql(gw, &h, &json!({"query": "select i from generate_series(1, 500) i"})).await;
    assert_eq!(a.header("transfer-encoding"), None);
    assert_eq!(a.header("content-length").map(str::to_owned), Some(a.body.len().to_string()));
    assert_eq!(a.json()["rowCount"], 500);

    // Past max_response_rows: cancelled, the stream ends with an error.
    let a = http::sql(gw, &nd, &json!({"query": "select i from generate_series(1, 100000) i"})).await;
    let last = a.text().lines().last().map(str::to_owned).unwrap_or_default();
    assert!(last.contains("54000"), "{last}");
    let a = http::sql(gw, &h, &json!({"query": "select 1 as ok"})).await;
    assert_eq!(a.json()["rows"][0]["ok"], 1);
    p.assert_no_leaks().await;
}
