//! Joins, subqueries and writes over tables sharded on different keys, through pgvia and on a
//! reference holding every row: what the placement proves exact (sharded relations joined
//! key to key within one co-location class, or on every shard) is answered as the reference
//! answers it; the rest is refused with 0A000 naming the construct, never answered or
//! applied per shard. In the simple and the extended protocol, on many shards and on one.

#![allow(clippy::unwrap_used)]

mod common;

use common::shards;
use common::{DB, PASSWORD, USER};
use tokio_postgres::types::Type;
use tokio_postgres::{Client, SimpleQueryMessage};

/// The e-commerce schema of issue 34: customers, orders and order_items sharded by customer
/// id (co-located), events by a uuid, accounts by an e-mail, products on every shard.
const SCHEMA: &str = "
CREATE TABLE customers (customer_id bigint PRIMARY KEY, email text NOT NULL, name text NOT NULL);
CREATE TABLE orders (order_id bigint NOT NULL, customer_id bigint NOT NULL, total int NOT NULL);
CREATE TABLE order_items (order_id bigint NOT NULL, customer_id bigint NOT NULL, product_id int NOT NULL, qty int NOT NULL);
CREATE TABLE events (id uuid PRIMARY KEY, customer_id bigint NOT NULL, order_id bigint NOT NULL, kind text NOT NULL);
CREATE TABLE accounts (email text PRIMARY KEY, customer_id bigint NOT NULL, balance int NOT NULL);
CREATE TABLE products (product_id int PRIMARY KEY, name text NOT NULL, price int NOT NULL);";

const KEYS: [(&str, &str, &str); 5] = [
    ("customers", "customer_id", "bigint"),
    ("orders", "customer_id", "bigint"),
    ("order_items", "customer_id", "bigint"),
    ("events", "id", "uuid"),
    ("accounts", "email", "text"),
];

/// Each table's rows in a fixed order, for comparing whole tables.
const TABLES: [&str; 6] = [
    "SELECT customer_id, email, name FROM customers ORDER BY customer_id",
    "SELECT order_id, customer_id, total FROM orders ORDER BY order_id",
    "SELECT order_id, customer_id, product_id, qty FROM order_items ORDER BY order_id, product_id, qty",
    "SELECT id::text AS id, customer_id, order_id, kind FROM events ORDER BY 1",
    "SELECT email, customer_id, balance FROM accounts ORDER BY email",
    "SELECT product_id, name, price FROM products ORDER BY product_id",
];

type Rows = Vec<Vec<Option<String>>>;

/// A statement's outcome: its rows and command tag, or its SQLSTATE.
type Outcome = Result<(Rows, String), String>;

async fn simple(client: &Client, sql: &str) -> Outcome {
    let messages =
        client.simple_query(sql).await.map_err(|e| common::sqlstate(&e).unwrap_or_else(|| e.to_string()))?;
    let mut rows = Vec::new();
    let mut tag = String::new();
    for m in messages {
        match m {
            SimpleQueryMessage::Row(r) => {
                rows.push((0..r.len()).map(|i| r.get(i).map(str::to_owned)).collect())
            }
            SimpleQueryMessage::CommandComplete(n) => tag = n.to_string(),
            _ => {}
        }
    }
    Ok((rows, tag))
}

/// The extended protocol: rows of a SELECT (in text, as the simple protocol gives them), the
/// row count of a write.
async fn extended(client: &Client, sql: &str) -> Outcome {
    let err = |e: tokio_postgres::Error| common::sqlstate(&e).unwrap_or_else(|| e.to_string());
    if !sql.trim_start().to_ascii_uppercase().starts_with("SELECT") {
        return client.execute(sql, &[]).await.map(|n| (Vec::new(), n.to_string())).map_err(err);
    }
    let rows = client.query(sql, &[]).await.map_err(err)?;
    let out: Rows = rows
        .iter()
        .map(|r| {
            (0..r.len())
                .map(|i| match *r.columns()[i].type_() {
                    Type::INT8 => r.get::<_, Option<i64>>(i).map(|v| v.to_string()),
                    Type::INT4 => r.get::<_, Option<i32>>(i).map(|v| v.to_string()),
                    Type::BOOL => r.get::<_, Option<bool>>(i).map(|v| if v { "t" } else { "f" }.to_owned()),
                    _ => r.get::<_, Option<String>>(i),
                })
                .collect()
        })
        .collect();
    let n = out.len();
    Ok((out, n.to_string()))
}

/// The lines `COPY ... TO STDOUT` sends.
async fn copied(client: &Client, sql: &str) -> Vec<String> {
    use futures_util::StreamExt;
    let stream = client.copy_out(sql).await.unwrap();
    let chunks: Vec<bytes::Bytes> = stream.map(|c| c.unwrap()).collect().await;
    let text: Vec<u8> = chunks.concat();
    String::from_utf8(text).unwrap().lines().map(str::to_owned).collect()
}

#[derive(Clone, Copy, Debug)]
enum Protocol {
    Simple,
    Extended,
}

async fn run(client: &Client, protocol: Protocol, sql: &str) -> Outcome {
    match protocol {
        Protocol::Simple => simple(client, sql).await,
        Protocol::Extended => extended(client, sql).await,
    }
}

struct Setup {
    _c: shards::ShardClusters,
    proxy: common::TestProxy,
    through: Client,
    reference: Client,
}

async fn setup() -> Setup {
    let c = shards::start(SCHEMA);
    let proxy = common::TestProxy::start_toml(&shards::config_keyed(&c, &KEYS)).await;
    let through = proxy.connect(USER, PASSWORD, DB).await;
    let reference =
        common::connect(&common::direct_conninfo(&c.reference, USER, PASSWORD, DB)).await.unwrap();
    let customers: Vec<String> = (1..=60).map(|i| format!("({i}, 'c{i}@x', 'n{i}')")).collect();
    let orders: Vec<String> = (1..=200).map(|i| format!("({i}, {}, {})", 1 + i % 60, i * 7 % 100)).collect();
    let items: Vec<String> = (1..=500)
        .map(|i| format!("({}, {}, {}, {})", 1 + i % 200, 1 + (1 + i % 200) % 60, i % 10, i % 13))
        .collect();
    let events: Vec<String> = (1..=120)
        .map(|i| {
            let kind = if i % 5 == 0 { "refund" } else { "view" };
            format!("('00000000-0000-0000-0000-{i:012}', {}, {}, '{kind}')", 1 + i % 60, 1 + i * 3 % 200)
        })
        .collect();
    let accounts: Vec<String> = (1..=60).map(|i| format!("('c{i}@x', {i}, {})", i * 3)).collect();
    let products: Vec<String> = (0..10).map(|i| format!("({i}, 'p{i}', {})", i * 10)).collect();
    for sql in [
        format!("INSERT INTO customers (customer_id, email, name) VALUES {}", customers.join(", ")),
        format!("INSERT INTO orders (order_id, customer_id, total) VALUES {}", orders.join(", ")),
        format!(
            "INSERT INTO order_items (order_id, customer_id, product_id, qty) VALUES {}",
            items.join(", ")
        ),
        format!("INSERT INTO events (id, customer_id, order_id, kind) VALUES {}", events.join(", ")),
        format!("INSERT INTO accounts (email, customer_id, balance) VALUES {}", accounts.join(", ")),
        format!("INSERT INTO products (product_id, name, price) VALUES {}", products.join(", ")),
    ] {
        through.simple_query(&sql).await.unwrap();
        reference.simple_query(&sql).await.unwrap();
    }
    Setup { _c: c, proxy, through, reference }
}

/// Every table through pgvia holds exactly the reference's rows.
async fn tables_match(s: &Setup, after: &str) {
    for sql in TABLES {
        let want = simple(&s.reference, sql).await.unwrap();
        assert_eq!(simple(&s.through, sql).await, Ok(want), "{sql}, after {after}");
    }
}

/// What the reference would answer, without keeping its changes.
async fn reference_would(s: &Setup, sql: &str) -> Outcome {
    s.reference.batch_execute("BEGIN").await.unwrap();
    let out = simple(&s.reference, sql).await;
    s.reference.batch_execute("ROLLBACK").await.unwrap();
    out
}

/// Reads answered exactly as the reference answers them.
const ANSWERED: &[&str] = &[
    // Co-located on customer_id.
    "SELECT c.customer_id, count(*), sum(o.total) FROM customers c JOIN orders o ON o.customer_id = c.customer_id \
     GROUP BY c.customer_id ORDER BY 1",
    // USING (key) is a key-to-key join (item 10).
    "SELECT c.name, o.total FROM customers c JOIN orders o USING (customer_id) \
     WHERE o.total > (SELECT min(price) FROM products) ORDER BY c.name, o.total",
    "SELECT c.name, s.n FROM customers c JOIN (SELECT customer_id, count(*) AS n FROM orders GROUP BY customer_id) s \
     USING (customer_id) ORDER BY 1",
    "SELECT count(*), sum(qty) FROM orders NATURAL JOIN order_items",
    "SELECT c.customer_id, count(i.qty) FROM customers c LEFT JOIN orders o USING (customer_id) \
     LEFT JOIN order_items i USING (customer_id) GROUP BY c.customer_id ORDER BY 2 DESC, 1 LIMIT 7",
    // With a table on every shard.
    "SELECT o.order_id, p.name FROM order_items i JOIN orders o ON o.customer_id = i.customer_id \
     AND o.order_id = i.order_id JOIN products p ON p.product_id = i.product_id ORDER BY 1, 2 LIMIT 30",
    "SELECT c.customer_id, p.name FROM customers c, products p WHERE p.product_id = c.customer_id % 10 \
     ORDER BY 1 LIMIT 10",
    "SELECT a.email, p.name FROM accounts a JOIN products p ON p.price = a.balance ORDER BY 1",
    // A subquery over VALUES reads no table (item 10).
    "SELECT customer_id, (SELECT max(v) FROM (VALUES (1), (2)) AS t(v)) FROM customers ORDER BY 1 LIMIT 5",
    // On one shard by the key, co-located.
    "SELECT o.order_id, i.qty FROM orders o JOIN order_items i ON i.customer_id = o.customer_id \
     AND i.order_id = o.order_id WHERE o.customer_id = 7 ORDER BY 1, 2",
    "SELECT c.name, count(*) FROM customers c JOIN orders o USING (customer_id) WHERE customer_id = 8 GROUP BY c.name",
    "SELECT a.balance, p.name FROM accounts a JOIN products p ON p.price = a.balance WHERE a.email = 'c10@x'",
    // Keys pinned to one constant are equal: the same shard.
    "SELECT o.order_id, i.qty FROM orders o JOIN order_items i ON i.order_id = o.order_id \
     WHERE o.customer_id = 9 AND i.customer_id = 9 ORDER BY 1, 2",
];

/// Reads whose placement is not proven: before, answered per shard and concatenated (rows
/// missing, aggregates wrong) or sent to one table's shard only.
const REFUSED: &[&str] = &[
    // Item 1: e-mail-keyed joined to customer-id-keyed; uuid-keyed joined on customer id.
    "SELECT count(*) FROM accounts a JOIN customers c ON c.email = a.email",
    "SELECT count(*), sum(o.total) FROM events e JOIN orders o ON o.customer_id = e.customer_id",
    "SELECT count(*) FROM orders o LEFT JOIN events e ON e.customer_id = o.customer_id",
    "SELECT count(*) FROM customers NATURAL JOIN accounts",
    "SELECT count(*) FROM orders a JOIN orders b ON b.total = a.total",
    "SELECT c.customer_id FROM customers c, accounts a WHERE a.customer_id = c.customer_id ORDER BY 1",
    // Item 2: sent to one shard by one table's key.
    "SELECT c.name, a.balance FROM customers c JOIN accounts a ON a.email = c.email WHERE c.customer_id = 7",
    "SELECT o.order_id, e.kind FROM orders o JOIN events e ON e.order_id = o.order_id WHERE o.customer_id = 8 ORDER BY 1",
    "SELECT a.email, c.name FROM accounts a JOIN customers c USING (customer_id) WHERE a.email = 'c9@x'",
    // A self-join off the key, by a comma, on the shard of one side's key.
    "SELECT count(*) FROM orders a, orders b WHERE a.customer_id = 5 AND b.total = a.total",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn joins_are_answered_only_when_placement_proves_them() {
    let s = setup().await;
    for protocol in [Protocol::Simple, Protocol::Extended] {
        for sql in ANSWERED {
            let want = run(&s.reference, protocol, sql).await.unwrap();
            assert!(!want.0.is_empty(), "{sql}");
            assert_eq!(run(&s.through, protocol, sql).await, Ok(want), "{sql} ({protocol:?})");
        }
        for sql in REFUSED {
            let want = run(&s.reference, protocol, sql).await;
            assert!(want.as_ref().is_ok_and(|w| !w.0.is_empty()), "{sql}");
            let got = run(&s.through, protocol, sql).await;
            assert_eq!(got, Err("0A000".to_owned()), "{sql} ({protocol:?}); the reference gives {want:?}");
        }
    }
    // With Bind parameters: keys pinned to one parameter are answered, a join off the keys
    // routed by one is refused.
    let sql = "SELECT o.order_id, i.qty FROM orders o JOIN order_items i ON i.order_id = o.order_id \
               WHERE o.customer_id = $1 AND i.customer_id = $1 ORDER BY 1, 2";
    let pairs = |rs: Vec<tokio_postgres::Row>| {
        rs.iter().map(|r| (r.get::<_, i64>(0), r.get::<_, i32>(1))).collect::<Vec<_>>()
    };
    let want = pairs(s.reference.query(sql, &[&9i64]).await.unwrap());
    assert!(!want.is_empty());
    assert_eq!(pairs(s.through.query(sql, &[&9i64]).await.unwrap()), want, "{sql}");
    let sql = "SELECT c.name, a.balance FROM customers c JOIN accounts a ON a.email = c.email WHERE c.customer_id = $1";
    assert_eq!(s.reference.query(sql, &[&7i64]).await.unwrap().len(), 1);
    let e = s.through.query(sql, &[&7i64]).await.unwrap_err();
    assert_eq!(common::sqlstate(&e).as_deref(), Some("0A000"), "{sql}: {e}");
    // `COPY (query) TO STDOUT` streams the shards' rows: a co-located join's are the
    // reference's (in another order), one off the keys is refused.
    let sql = "COPY (SELECT c.customer_id, o.order_id FROM customers c JOIN orders o USING (customer_id)) TO STDOUT";
    let (mut want, mut got) = (copied(&s.reference, sql).await, copied(&s.through, sql).await);
    want.sort();
    got.sort();
    assert!(!want.is_empty());
    assert_eq!(got, want, "{sql}");
    let sql = "COPY (SELECT a.email FROM accounts a JOIN customers c ON c.email = a.email) TO STDOUT";
    assert_eq!(simple(&s.through, sql).await.map(|_| ()), Err("0A000".to_owned()), "{sql}");
    assert_eq!(simple(&s.through, "SELECT 1").await.map(|r| r.0), Ok(vec![vec![Some("1".to_owned())]]));
    // The refusal names the construct.
    let e = s.through.simple_query(REFUSED[0]).await.unwrap_err();
    let message = e.as_db_error().map(|d| d.message().to_owned()).unwrap_or_default();
    assert!(message.contains("join"), "{message}");
    // A hint names the shard: the statement runs there as written and answers that shard's
    // rows (the way out every refusal names), by comment and by setting, in both protocols.
    let shard = common::connect(&common::direct_conninfo(&s._c.shards[1], USER, PASSWORD, DB)).await.unwrap();
    for protocol in [Protocol::Simple, Protocol::Extended] {
        let hinted = format!("/* pgvia_shard: 1 */ {}", REFUSED[0]);
        let want = run(&shard, protocol, &hinted).await.unwrap();
        assert_eq!(run(&s.through, protocol, &hinted).await, Ok(want), "{hinted} ({protocol:?})");
        let want = run(&shard, protocol, REFUSED[0]).await.unwrap();
        s.through.simple_query("SET pgvia.shard = 1").await.unwrap();
        assert_eq!(run(&s.through, protocol, REFUSED[0]).await, Ok(want), "SET pgvia.shard ({protocol:?})");
        s.through.simple_query("RESET pgvia.shard").await.unwrap();
        assert_eq!(run(&s.through, protocol, REFUSED[0]).await.map(|_| ()), Err("0A000".to_owned()));
    }
    s.proxy.assert_no_leaks().await;
}

/// Writes that select their rows through a join or a subquery the placement proves: they
/// change what the reference changes, with its command tag. `{n}` differs per protocol.
const WRITES: &[&str] = &[
    "UPDATE orders o SET total = total + 1 WHERE EXISTS \
     (SELECT 1 FROM order_items i WHERE i.customer_id = o.customer_id AND i.qty > 1{n})",
    "DELETE FROM order_items i USING orders o WHERE o.customer_id = i.customer_id AND o.order_id = i.order_id \
     AND o.total = 1{n}",
    "UPDATE orders SET total = total + 1 WHERE customer_id IN (SELECT product_id FROM products WHERE price > {n}0)",
    "UPDATE orders o SET total = (SELECT count(*) FROM order_items i WHERE i.customer_id = o.customer_id) \
     WHERE o.total < 2{n}",
    "MERGE INTO orders o USING (SELECT customer_id, order_id, sum(qty) AS q FROM order_items \
     GROUP BY customer_id, order_id) s ON s.customer_id = o.customer_id AND s.order_id = o.order_id \
     WHEN MATCHED AND s.q > 1{n} THEN UPDATE SET total = s.q",
    "DELETE FROM accounts a USING products p WHERE p.product_id = a.balance % 10 AND p.price = {n}0",
    "UPDATE customers c SET name = c.name || '+' FROM orders o WHERE o.customer_id = c.customer_id AND o.total = 3{n}",
    "UPDATE products SET price = price + 1 WHERE product_id IN (SELECT {n} UNION SELECT 4)",
    // On one shard, a subquery pinned to the outer key's constant.
    "UPDATE orders SET total = total + 1 WHERE customer_id = 5 \
     AND order_id IN (SELECT order_id FROM order_items WHERE customer_id = 5 AND qty > {n})",
];

/// Writes whose rows a subquery or a join over tables sharded differently chooses: before,
/// each shard chose from its own rows alone (fewer rows changed, a normal-looking tag).
const REFUSED_WRITES: &[&str] = &[
    // Item 6.
    "DELETE FROM orders WHERE order_id IN (SELECT order_id FROM events WHERE kind = 'refund')",
    "UPDATE accounts a SET balance = balance + 1 FROM customers c WHERE c.email = a.email AND c.customer_id < 20",
    "DELETE FROM accounts a USING customers c WHERE c.email = a.email AND c.customer_id > 50",
    "MERGE INTO accounts a USING customers c ON c.email = a.email WHEN MATCHED THEN UPDATE SET balance = 0",
    "UPDATE orders SET total = (SELECT count(*) FROM events)",
    "UPDATE orders o SET total = 0 WHERE EXISTS (SELECT 1 FROM events e WHERE e.customer_id = o.customer_id)",
    // A table on every shard changed from a sharded table's rows: each copy would differ.
    "UPDATE products SET price = price + 1 WHERE product_id IN (SELECT product_id FROM order_items WHERE qty > 11)",
    // A key update (its rows may move) chosen by a subquery over a table sharded otherwise.
    "UPDATE orders SET customer_id = customer_id + 100 WHERE order_id IN (SELECT order_id FROM events WHERE kind = 'view')",
    // On one shard by the outer key.
    "DELETE FROM orders WHERE customer_id = 3 AND order_id IN (SELECT order_id FROM events)",
    "UPDATE customers c SET name = 'x' FROM accounts a WHERE a.customer_id = c.customer_id AND c.customer_id = 4",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_through_joins_and_subqueries_change_what_one_postgresql_would() {
    let s = setup().await;
    for (n, protocol) in [(1, Protocol::Simple), (2, Protocol::Extended)] {
        for sql in WRITES {
            let sql = sql.replace("{n}", &n.to_string());
            let want = run(&s.reference, protocol, &sql).await.unwrap();
            assert_eq!(run(&s.through, protocol, &sql).await, Ok(want), "{sql} ({protocol:?})");
            tables_match(&s, &sql).await;
        }
        for sql in REFUSED_WRITES {
            let want = reference_would(&s, sql).await;
            let got = run(&s.through, protocol, sql).await;
            assert_eq!(got, Err("0A000".to_owned()), "{sql} ({protocol:?}); the reference gives {want:?}");
            tables_match(&s, sql).await;
        }
    }
    s.proxy.assert_no_leaks().await;
}
