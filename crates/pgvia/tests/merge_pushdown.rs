//! Co-located subqueries, CTEs and window functions through pgvia: four real shards and a
//! reference holding every row. What the shards can compute alone (joined or correlated on
//! the shard key, partitioned by it, or over omnisharded tables) gives the reference's rows;
//! the rest is refused with 0A000, never answered per shard.

#![allow(clippy::unwrap_used)]

mod common;

use common::shards;
use common::{DB, PASSWORD, USER};
use tokio_postgres::SimpleQueryMessage;

const SCHEMA: &str = "CREATE TABLE orders (id bigint PRIMARY KEY, kind int NOT NULL, total int NOT NULL);
CREATE TABLE lines (id bigint NOT NULL, qty int NOT NULL);
CREATE TABLE kinds (kind int PRIMARY KEY, label text NOT NULL);
INSERT INTO kinds VALUES (0, 'zero'), (1, 'one'), (2, 'two');";

async fn rows(client: &tokio_postgres::Client, sql: &str) -> Result<Vec<Vec<Option<String>>>, String> {
    let messages =
        client.simple_query(sql).await.map_err(|e| common::sqlstate(&e).unwrap_or_else(|| e.to_string()))?;
    Ok(messages
        .into_iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(r) => Some((0..r.len()).map(|i| r.get(i).map(str::to_owned)).collect()),
            _ => None,
        })
        .collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn colocated_constructs_are_pushed_down_and_others_refused() {
    let c = shards::start(SCHEMA);
    let proxy = common::TestProxy::start_toml(&shards::config(&c, &["orders", "lines"])).await;
    let through = proxy.connect(USER, PASSWORD, DB).await;
    let reference =
        common::connect(&common::direct_conninfo(&c.reference, USER, PASSWORD, DB)).await.unwrap();
    // Rows written through pgvia land on their shards; the same rows go to the reference.
    let orders: Vec<String> = (1..=300).map(|i| format!("({i}, {}, {})", i % 3, i * 7 % 100)).collect();
    let lines: Vec<String> = (1..=900).map(|i| format!("({}, {})", 1 + i % 250, i % 13)).collect();
    for sql in [
        format!("INSERT INTO orders (id, kind, total) VALUES {}", orders.join(", ")),
        format!("INSERT INTO lines (id, qty) VALUES {}", lines.join(", ")),
    ] {
        through.simple_query(&sql).await.unwrap();
        reference.simple_query(&sql).await.unwrap();
    }
    let same = [
        "SELECT id, qty, sum(qty) OVER (PARTITION BY id), row_number() OVER (PARTITION BY id ORDER BY qty DESC) AS r \
         FROM lines ORDER BY id, qty, r",
        "SELECT o.id, (SELECT count(*) FROM lines l WHERE l.id = o.id) AS n FROM orders o ORDER BY n DESC, o.id LIMIT 20",
        "SELECT kind, count(*) FROM orders o WHERE EXISTS (SELECT 1 FROM lines l WHERE l.id = o.id AND l.qty > 10) \
         GROUP BY kind ORDER BY kind",
        "SELECT o.id, k.label FROM orders o JOIN kinds k ON k.kind = o.kind \
         WHERE o.kind IN (SELECT kind FROM kinds WHERE label <> 'one') ORDER BY o.id LIMIT 15",
        "WITH s AS (SELECT id, sum(qty) AS q FROM lines GROUP BY id) \
         SELECT o.kind, sum(s.q), count(*) FROM orders o JOIN s ON s.id = o.id GROUP BY o.kind ORDER BY 1",
        "SELECT count(*), max(q) FROM (SELECT id, sum(qty) AS q FROM lines GROUP BY id) s",
    ];
    for sql in same {
        let want = rows(&reference, sql).await.unwrap();
        assert!(!want.is_empty(), "{sql}");
        assert_eq!(rows(&through, sql).await, Ok(want), "{sql}");
    }
    let refused = [
        "SELECT id FROM orders WHERE total > (SELECT avg(total) FROM orders)",
        "SELECT id, rank() OVER (ORDER BY total) FROM orders",
        "WITH s AS (SELECT kind, count(*) AS n FROM orders GROUP BY kind) SELECT sum(n) FROM s",
        "SELECT o.id FROM orders o WHERE EXISTS (SELECT 1 FROM lines l WHERE l.qty = o.id)",
    ];
    for sql in refused {
        assert_eq!(rows(&through, sql).await, Err("0A000".to_owned()), "{sql}");
    }
    proxy.stop().await;
}
