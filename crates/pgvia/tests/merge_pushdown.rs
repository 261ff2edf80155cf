//! Co-located subqueries, CTEs and window functions through pgvia: four real shards and a
//! reference holding every row. What the shards can compute alone (joined or correlated on
//! the shard key, partitioned by it, or over omnisharded tables) gives the reference's rows;
//! the rest is refused with 0A000, never answered per shard, also when the query's key
//! sends it to one shard.

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
        "SELECT id, rank() OVER (ORDER BY total) FROM orders",
        "SELECT o.id FROM orders o WHERE EXISTS (SELECT 1 FROM lines l WHERE l.qty = o.id)",
    ];
    for sql in refused {
        assert_eq!(rows(&through, sql).await, Err("0A000".to_owned()), "{sql}");
    }
    // Uncorrelated subqueries over sharded tables in WHERE: computed first across the shards
    // and substituted; in a transaction too, and in the extended protocol with the outer
    // query's parameters.
    for sql in [
        "SELECT id, total FROM orders WHERE total > (SELECT avg(total) FROM orders) ORDER BY id",
        "SELECT count(*) FROM orders WHERE id IN (SELECT id FROM lines WHERE qty = 12)",
        "SELECT kind, count(*) FROM orders WHERE id NOT IN (SELECT id FROM lines WHERE qty > 3) GROUP BY kind ORDER BY kind",
        "SELECT count(*) FROM orders WHERE kind NOT IN (SELECT kind FROM orders WHERE id < 0)",
        "SELECT id FROM orders WHERE total = (SELECT max(total) FROM orders) ORDER BY id",
    ] {
        let want = rows(&reference, sql).await.unwrap();
        assert!(!want.is_empty(), "{sql}");
        assert_eq!(rows(&through, sql).await, Ok(want.clone()), "{sql}");
        through.batch_execute("BEGIN").await.unwrap();
        assert_eq!(rows(&through, sql).await, Ok(want), "{sql} in a transaction");
        through.batch_execute("COMMIT").await.unwrap();
    }
    let sql = "SELECT id FROM orders WHERE total = (SELECT total FROM orders WHERE id < 5)";
    assert_eq!(rows(&reference, sql).await, Err("21000".to_owned()));
    assert_eq!(rows(&through, sql).await, Err("21000".to_owned()), "{sql}");
    let sql = "SELECT id FROM orders WHERE total > (SELECT avg(total) FROM orders) AND kind = $1 ORDER BY id";
    let ids = |rs: Vec<tokio_postgres::Row>| rs.iter().map(|r| r.get::<_, i64>(0)).collect::<Vec<_>>();
    let want = ids(reference.query(sql, &[&1i32]).await.unwrap());
    assert!(!want.is_empty());
    assert_eq!(ids(through.query(sql, &[&1i32]).await.unwrap()), want, "{sql}");
    // Past 10,000 rows, and past the bytes held while computing (the reply is dropped as it
    // comes, the shards read to their end): 0A000, and the session goes on.
    for (sql, why) in [
        ("SELECT count(*) FROM orders WHERE id IN (SELECT l.id + g FROM lines l, generate_series(1, 20) g)", "more than 10000 rows"),
        ("SELECT count(*) FROM orders WHERE id IN (SELECT l.id + g FROM lines l, generate_series(1, 400) g)", "more than 4194304 bytes"),
    ] {
        let e = through.simple_query(sql).await.unwrap_err();
        let db = e.as_db_error().expect("an ErrorResponse");
        assert_eq!((db.code().code(), db.message().contains(why)), ("0A000", true), "{sql}: {db:?}");
        assert_eq!(rows(&through, "SELECT count(*) FROM orders").await, Ok(vec![vec![Some("300".to_owned())]]));
    }
    // Correlated on something else than the key: cannot run alone, still refused.
    let sql = "SELECT id FROM orders o WHERE total > (SELECT avg(qty) FROM lines l WHERE l.qty = o.kind)";
    assert_eq!(rows(&through, sql).await, Err("0A000".to_owned()), "{sql}");
    // Routed by its key to one shard: co-located subqueries and any window are answered
    // there; one that reads other shards' rows would see that shard's alone (a count of 64
    // for 300 rows): refused, in both protocols.
    for sql in [
        "SELECT o.id, (SELECT count(*) FROM lines l WHERE l.id = o.id) FROM orders o WHERE o.id = 7",
        "SELECT id, (SELECT label FROM kinds WHERE kinds.kind = orders.kind) FROM orders WHERE id = 8",
        "SELECT id, rank() OVER (ORDER BY total) FROM orders WHERE id = 9",
        "SELECT count(*) FROM orders WHERE id = 10 AND kind IN (SELECT kind FROM kinds WHERE label <> 'one')",
    ] {
        let want = rows(&reference, sql).await.unwrap();
        assert!(!want.is_empty(), "{sql}");
        assert_eq!(rows(&through, sql).await, Ok(want), "{sql}");
    }
    for sql in [
        "SELECT (SELECT count(*) FROM orders) FROM orders WHERE id = 7",
        "SELECT id FROM orders WHERE id = 5 AND total < (SELECT avg(total) FROM orders)",
        "WITH c AS (SELECT count(*) AS n FROM orders) SELECT n FROM c, orders WHERE orders.id = 7",
        "SELECT o.id, s.n FROM orders o, (SELECT count(*) AS n FROM lines) s WHERE o.id = 7",
    ] {
        assert_eq!(rows(&through, sql).await, Err("0A000".to_owned()), "{sql}");
    }
    let e = through
        .query("SELECT (SELECT count(*) FROM orders) FROM orders WHERE id = $1", &[&7i64])
        .await
        .unwrap_err();
    assert_eq!(common::sqlstate(&e).as_deref(), Some("0A000"), "{e}");
    ctes_computed_first(&through, &reference).await;
    proxy.assert_no_leaks().await;
    per_column_result_formats(proxy.addr, std::net::SocketAddr::from(([127, 0, 0, 1], c.reference.port())))
        .await;
    proxy.stop().await;
}

/// CTEs over sharded tables computed first and substituted as constant relations, alone
/// (one shard answers), joined with sharded tables, referenced twice, in a transaction and
/// with the outer query's parameters; recursive and volatile ones refused by name; floats
/// of a result computed first exact whatever the client's `extra_float_digits`.
async fn ctes_computed_first(through: &tokio_postgres::Client, reference: &tokio_postgres::Client) {
    for sql in [
        "WITH s AS (SELECT kind, count(*) AS n FROM orders GROUP BY kind) SELECT sum(n) FROM s",
        "WITH s AS (SELECT kind, count(*) AS n FROM orders GROUP BY kind) SELECT * FROM s ORDER BY kind",
        "WITH top AS (SELECT id FROM orders ORDER BY total DESC, id LIMIT 10) \
         SELECT o.id, count(l.qty) FROM orders o JOIN top ON top.id = o.id LEFT JOIN lines l ON l.id = o.id \
         GROUP BY o.id ORDER BY o.id",
        "WITH s AS (SELECT kind, max(total) AS m FROM orders GROUP BY kind) \
         SELECT a.kind, b.m FROM s a JOIN s b ON a.kind = b.kind ORDER BY 1",
        "WITH s AS (SELECT kind, avg(total) AS a FROM orders GROUP BY kind), k AS (SELECT max(a) AS top FROM s) \
         SELECT o.id FROM orders o, k WHERE o.total > k.top ORDER BY o.id",
        "WITH s AS (SELECT id FROM lines WHERE qty = 12 ORDER BY id LIMIT 30) \
         SELECT count(*) FROM orders WHERE id IN (SELECT id FROM s)",
        "WITH e AS (SELECT id FROM orders WHERE id < 0 ORDER BY id LIMIT 3) SELECT count(*) FROM orders JOIN e ON e.id = orders.id",
    ] {
        let want = rows(reference, sql).await.unwrap();
        assert!(!want.is_empty(), "{sql}");
        assert_eq!(rows(through, sql).await, Ok(want.clone()), "{sql}");
        through.batch_execute("BEGIN").await.unwrap();
        assert_eq!(rows(through, sql).await, Ok(want), "{sql} in a transaction");
        through.batch_execute("COMMIT").await.unwrap();
    }
    let sql = "WITH s AS (SELECT kind, avg(total) AS a FROM orders GROUP BY kind) \
               SELECT o.id FROM orders o JOIN s ON s.kind = o.kind WHERE o.total > s.a AND o.kind = $1 ORDER BY o.id";
    let ids = |rs: Vec<tokio_postgres::Row>| rs.iter().map(|r| r.get::<_, i64>(0)).collect::<Vec<_>>();
    let want = ids(reference.query(sql, &[&2i32]).await.unwrap());
    assert!(!want.is_empty());
    assert_eq!(ids(through.query(sql, &[&2i32]).await.unwrap()), want, "{sql}");
    // A CTE with parameters cannot run before the Bind: refused by name, not answered wrongly.
    let sql = "WITH s AS (SELECT kind, count(*) AS n FROM orders WHERE total > $1 GROUP BY kind) SELECT sum(n) FROM s";
    let e = through.query(sql, &[&10i32]).await.unwrap_err();
    let db = e.as_db_error().expect("an ErrorResponse");
    assert_eq!((db.code().code(), db.message().contains("parameters")), ("0A000", true), "{db:?}");
    for (sql, why) in [
        (
            "WITH RECURSIVE r AS (SELECT id FROM orders WHERE id < 3 UNION SELECT id + 1 FROM r WHERE id < 5) SELECT count(*) FROM r",
            "WITH RECURSIVE",
        ),
        ("WITH s AS (SELECT kind, random() AS r FROM orders GROUP BY kind) SELECT count(*) FROM s", "random()"),
        ("WITH s AS (SELECT l.id + g AS id FROM lines l, generate_series(1, 20) g ORDER BY 1 LIMIT 20000) SELECT count(*) FROM s", "more than 10000 rows"),
    ] {
        let e = through.simple_query(sql).await.unwrap_err();
        let db = e.as_db_error().expect("an ErrorResponse");
        assert_eq!((db.code().code(), db.message().contains(why)), ("0A000", true), "{sql}: {db:?}");
    }
    // 0.1 + 0.2 needs 17 digits; below extra_float_digits 1 a server prints 0.3, and a
    // literal read from that would compare unequal.
    for digits in ["0", "-3"] {
        let set = format!("SET extra_float_digits = {digits}");
        through.batch_execute(&set).await.unwrap();
        reference.batch_execute(&set).await.unwrap();
        for sql in [
            "SELECT count(*) FROM orders WHERE 0.1::float8 * 3 + total * 0 = (SELECT max(0.1::float8 + 0.2) FROM orders)",
            "WITH c AS (SELECT max(0.1::float8 + 0.2) AS v, max(0.1::float4 + 0.2::float4) AS r FROM orders) \
             SELECT c.v, c.v = 0.1::float8 * 3, c.r = 0.1::float4 + 0.2::float4, count(*) FROM orders, c GROUP BY 1, 2, 3",
        ] {
            let want = rows(reference, sql).await.unwrap();
            assert_ne!(want[0].last(), Some(&Some("0".to_owned())), "{sql}");
            assert_eq!(rows(through, sql).await, Ok(want), "{sql} at extra_float_digits {digits}");
        }
        // The client's setting is the servers' again.
        let shown = rows(through, "SHOW extra_float_digits").await.unwrap();
        assert_eq!(shown, vec![vec![Some(digits.to_owned())]]);
        through.batch_execute("RESET extra_float_digits").await.unwrap();
        reference.batch_execute("RESET extra_float_digits").await.unwrap();
    }
}

/// Parse, Bind (one text parameter; result formats one code per column), Describe,
/// Execute, Sync: the RowDescription's formats and the DataRows as bytes.
async fn extended(
    addr: std::net::SocketAddr,
    sql: &str,
    param: &str,
    formats: &[i16],
) -> (Vec<i16>, Vec<Vec<u8>>) {
    use common::raw::{describe_portal, execute, frame, parse, sync, RawConn};
    let mut conn = RawConn::login(addr, USER, PASSWORD, DB).await.unwrap();
    let mut bind = vec![0u8, 0, 0, 0, 0, 1];
    bind.extend_from_slice(&(param.len() as i32).to_be_bytes());
    bind.extend_from_slice(param.as_bytes());
    bind.extend_from_slice(&(formats.len() as i16).to_be_bytes());
    for f in formats {
        bind.extend_from_slice(&f.to_be_bytes());
    }
    let mut msgs = parse("", sql);
    msgs.extend(frame(b'B', &bind));
    msgs.extend(describe_portal(""));
    msgs.extend(execute("", 0));
    msgs.extend(sync());
    conn.send(&msgs).await;
    let (mut described, mut rows) = (Vec::new(), Vec::new());
    while let Some(m) = conn.recv().await {
        match m.tag {
            b'T' => {
                // Each field: name, then 18 bytes whose last two are the format code.
                let mut p = 2;
                for _ in 0..i16::from_be_bytes([m.body[0], m.body[1]]) {
                    p += m.body[p..].iter().position(|&b| b == 0).unwrap() + 1 + 18;
                    described.push(i16::from_be_bytes([m.body[p - 2], m.body[p - 1]]));
                }
            }
            b'D' => rows.push(m.body.to_vec()),
            b'E' => panic!("{sql}: {:?}", m.fields()),
            b'Z' => break,
            _ => {}
        }
    }
    (described, rows)
}

/// A Bind with a result format per column, mixed (pgx's way: text for `text`, binary for
/// the rest) or all the same: the merged query's RowDescription and cells are exactly the
/// reference's, byte for byte.
async fn per_column_result_formats(pgvia: std::net::SocketAddr, reference: std::net::SocketAddr) {
    let sql = "SELECT o.kind, k.label, count(*), sum(o.total), avg(o.total) FROM orders o \
               JOIN kinds k ON k.kind = o.kind WHERE o.total > $1 GROUP BY o.kind, k.label ORDER BY o.kind DESC";
    for formats in [[1, 0, 1, 1, 1], [0, 1, 0, 1, 0], [1, 1, 1, 1, 1]] {
        let want = extended(reference, sql, "10", &formats).await;
        assert_eq!(want.0, formats);
        assert_eq!(want.1.len(), 3);
        assert_eq!(extended(pgvia, sql, "10", &formats).await, want, "{formats:?}");
    }
    let sql = "SELECT id, total FROM orders WHERE total > $1 ORDER BY total DESC, id LIMIT 7";
    let want = extended(reference, sql, "50", &[1, 0]).await;
    assert_eq!(extended(pgvia, sql, "50", &[1, 0]).await, want);
}
