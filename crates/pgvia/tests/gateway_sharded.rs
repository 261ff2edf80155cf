//! The HTTP gateway in front of a sharded database: requests are ordinary sessions, so they
//! are routed, merged and committed across shards as wire clients' are. Four shard clusters
//! and a reference holding every row.

mod common;

use common::http::{self, neon_auth};
use common::shards;
use common::{TestProxy, DB, PASSWORD, USER};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_requests_are_routed_merged_and_committed_across_shards() {
    let c =
        shards::start("CREATE TABLE items (id bigint PRIMARY KEY, name text NOT NULL, qty int NOT NULL);");
    let toml = shards::config_with(&c, &["items"], |b| b.gateway("flush_interval = \"20ms\""));
    let p = TestProxy::start_toml(&toml).await;
    let gw = p.gateway.expect("gateway address");
    let auth = vec![neon_auth(p.port(), USER, PASSWORD, DB)];

    // A batch runs in one transaction: its rows land on several shards, all or nothing.
    let queries: Vec<_> = (1..=12)
        .map(|id| json!({"query": "INSERT INTO items (id, name, qty) VALUES ($1, $2, $3)", "params": [id, format!("n{id}"), id % 4]}))
        .collect();
    let a = http::sql(gw, &auth, &json!({ "queries": queries })).await;
    assert_eq!(a.status, 200, "{}", a.text());
    let bad: Vec<_> = [20, 21, 22, 1]
        .iter()
        .map(|id| json!({"query": "INSERT INTO items (id, name, qty) VALUES ($1, 'x', 0)", "params": [id]}))
        .collect();
    let a = http::sql(gw, &auth, &json!({ "queries": bad })).await;
    assert_eq!(a.status, 400, "{}", a.text());
    assert_eq!(a.json()["code"], "23505");
    let mut held = 0;
    for shard in &c.shards {
        let direct =
            common::connect(&common::direct_conninfo(shard, USER, PASSWORD, DB)).await.expect("direct");
        held += direct.query("SELECT id FROM items", &[]).await.expect("rows").len();
        let left: i64 =
            direct.query_one("SELECT count(*) FROM pg_prepared_xacts", &[]).await.expect("prepared").get(0);
        assert_eq!(left, 0);
    }
    assert_eq!(held, 12, "the failed batch left nothing, the first left all twelve rows");

    // Reads over every shard are merged as one PostgreSQL would answer them.
    let reference =
        common::connect(&common::direct_conninfo(&c.reference, USER, PASSWORD, DB)).await.expect("reference");
    for id in 1..=12i64 {
        reference
            .execute(
                "INSERT INTO items (id, name, qty) VALUES ($1, $2, $3)",
                &[&id, &format!("n{id}"), &((id % 4) as i32)],
            )
            .await
            .expect("reference insert");
    }
    for sql in [
        "SELECT count(*) AS n, sum(qty) AS s, avg(qty) AS a FROM items",
        "SELECT id, name FROM items ORDER BY id DESC LIMIT 3",
        "SELECT qty, count(*) AS n FROM items GROUP BY qty ORDER BY qty",
    ] {
        let a = http::sql(gw, &auth, &json!({ "query": sql })).await;
        assert_eq!(a.status, 200, "{sql}: {}", a.text());
        let rows = a.json()["rows"].clone();
        let want: Vec<serde_json::Value> = reference
            .simple_query(sql)
            .await
            .expect("reference")
            .into_iter()
            .filter_map(|m| match m {
                tokio_postgres::SimpleQueryMessage::Row(r) => Some(r),
                _ => None,
            })
            .map(|r| {
                let mut o = serde_json::Map::new();
                for (i, col) in r.columns().iter().enumerate() {
                    o.insert(col.name().to_owned(), json!(r.get(i)));
                }
                serde_json::Value::Object(o)
            })
            .collect();
        // The gateway types numbers as Neon does; compare as text.
        let as_text = |v: &serde_json::Value| -> Vec<Vec<String>> {
            v.as_array()
                .into_iter()
                .flatten()
                .map(|row| {
                    row.as_object()
                        .into_iter()
                        .flatten()
                        .map(|(k, v)| {
                            format!("{k}={}", v.as_str().map_or_else(|| v.to_string(), str::to_owned))
                        })
                        .collect()
                })
                .collect()
        };
        assert_eq!(as_text(&rows), as_text(&json!(want)), "{sql}");
    }
    p.stop().await;
}
