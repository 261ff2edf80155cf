//! Ordered output through every door on a sharded database: `COPY (SELECT ...) TO STDOUT`,
//! SQL cursors (`DECLARE`, `FETCH`/`MOVE` in every direction, `CLOSE`, `WITH HOLD`) over one
//! shard and over several give exactly what one PostgreSQL holding every row gives (rows,
//! order, command tags, SQLSTATEs): four real shards and a reference holding every row,
//! the same statements through pgvia and directly on the reference.

#![allow(clippy::unwrap_used)]

mod common;

use common::shards::{self, ShardClusters};
use common::{assert_success, direct_conninfo, psql, text, DB, PASSWORD, USER};
use tokio_postgres::{Client, SimpleQueryMessage};

const SCHEMA: &str = "CREATE TABLE items (id bigint PRIMARY KEY, grp int NOT NULL, name text);";

/// What one statement gave: its rows and its row count, or its SQLSTATE.
#[derive(Debug, PartialEq, Eq)]
enum Answer {
    Rows(Vec<Vec<Option<String>>>, u64),
    Error(String),
}

async fn answer(client: &Client, sql: &str) -> Answer {
    match client.simple_query(sql).await {
        Err(e) => Answer::Error(common::sqlstate(&e).unwrap_or_else(|| e.to_string())),
        Ok(messages) => {
            let mut rows = Vec::new();
            let mut count = 0;
            for m in messages {
                match m {
                    SimpleQueryMessage::Row(r) => {
                        rows.push((0..r.len()).map(|i| r.get(i).map(str::to_owned)).collect())
                    }
                    SimpleQueryMessage::CommandComplete(n) => count = n,
                    _ => {}
                }
            }
            Answer::Rows(rows, count)
        }
    }
}

/// Runs `script` statement by statement on both, comparing every answer.
async fn same(through: &Client, reference: &Client, script: &[&str]) {
    for sql in script {
        let want = answer(reference, sql).await;
        let got = answer(through, sql).await;
        assert_eq!(got, want, "{sql}");
    }
}

async fn setup() -> (ShardClusters, common::TestProxy, Client, Client) {
    let c = shards::start(SCHEMA);
    let proxy = common::TestProxy::start_toml(&shards::config(&c, &["items"])).await;
    let through = proxy.connect(USER, PASSWORD, DB).await;
    let reference = common::connect(&direct_conninfo(&c.reference, USER, PASSWORD, DB)).await.unwrap();
    // Names that COPY must escape or quote: tabs, commas, quotes, backslashes, newlines, NULLs.
    let rows: Vec<String> = (1..=60)
        .map(|i| {
            let name = match i % 6 {
                0 => "NULL".to_owned(),
                1 => format!("'plain {i}'"),
                2 => format!("E'tab\\there {i}'"),
                3 => format!("'comma, \"quoted\" {i}'"),
                4 => format!("E'back\\\\slash\\nline {i}'"),
                _ => "''".to_owned(),
            };
            format!("({i}, {}, {name})", i % 4)
        })
        .collect();
    let sql = format!("INSERT INTO items (id, grp, name) VALUES {}", rows.join(", "));
    through.simple_query(&sql).await.unwrap();
    reference.simple_query(&sql).await.unwrap();
    (c, proxy, through, reference)
}

const ORDERED: &str = "SELECT id, grp, name FROM items ORDER BY grp DESC, id";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scroll_cursor_over_several_shards_moves_as_one_postgres() {
    let (_c, _proxy, through, reference) = setup().await;
    let declare = format!("DECLARE c SCROLL CURSOR FOR {ORDERED}");
    same(
        &through,
        &reference,
        &[
            "BEGIN",
            &declare,
            "FETCH 3 FROM c",
            "FETCH NEXT FROM c",
            "FETCH PRIOR FROM c",
            "FETCH FIRST FROM c",
            "FETCH LAST FROM c",
            "FETCH NEXT FROM c",
            "FETCH PRIOR FROM c",
            "FETCH ABSOLUTE 10 FROM c",
            "FETCH ABSOLUTE -3 FROM c",
            "FETCH ABSOLUTE 0 FROM c",
            "FETCH ABSOLUTE 100 FROM c",
            "FETCH RELATIVE -2 FROM c",
            "FETCH RELATIVE 0 FROM c",
            "FETCH RELATIVE 5 FROM c",
            "FETCH 0 FROM c",
            "FETCH FORWARD 4 FROM c",
            "FETCH BACKWARD 2 FROM c",
            "FETCH BACKWARD ALL FROM c",
            "FETCH FORWARD ALL FROM c",
            "FETCH FORWARD 1 FROM c",
            "MOVE BACKWARD 5 IN c",
            "FETCH c",
            "MOVE ABSOLUTE 20 IN c",
            "MOVE RELATIVE -3 IN c",
            "MOVE FORWARD ALL IN c",
            "MOVE BACKWARD ALL IN c",
            "FETCH -2 FROM c",
            "MOVE LAST IN c",
            "FETCH ALL FROM c",
            "FETCH ABSOLUTE -100 FROM c",
            "FETCH ALL FROM c",
            "CLOSE c",
            "FETCH c",
            "ROLLBACK",
        ],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cursors_keep_postgres_rules_for_scroll_hold_close_and_errors() {
    let (_c, _proxy, through, reference) = setup().await;
    // NO SCROLL: every motion that goes back is 55000, and fails the transaction.
    for back in [
        "FETCH PRIOR FROM n",
        "FETCH BACKWARD 1 FROM n",
        "FETCH FIRST FROM n",
        "FETCH ABSOLUTE 1 FROM n",
        "FETCH LAST FROM n",
        "FETCH RELATIVE -1 FROM n",
        "FETCH RELATIVE 0 FROM n",
        "MOVE BACKWARD ALL IN n",
        "FETCH ABSOLUTE 5 FROM n",
        "FETCH RELATIVE 2 FROM n",
    ] {
        let declare = format!("DECLARE n NO SCROLL CURSOR FOR {ORDERED}");
        same(&through, &reference, &["BEGIN", &declare, "FETCH 2 FROM n", back, "FETCH n", "ROLLBACK"]).await;
    }
    // Aggregates, a cursor over one shard, unknown and duplicate names, CLOSE ALL.
    same(
        &through,
        &reference,
        &[
            "DECLARE outside CURSOR FOR SELECT id FROM items ORDER BY id",
            "FETCH nowhere",
            "BEGIN",
            "DECLARE a SCROLL CURSOR FOR SELECT grp, count(*), min(id) FROM items GROUP BY grp ORDER BY grp",
            "FETCH ALL FROM a",
            "FETCH BACKWARD 2 FROM a",
            "DECLARE one SCROLL CURSOR FOR SELECT id, name FROM items WHERE id = 7",
            "FETCH ALL FROM one",
            "FETCH FIRST FROM one",
            "CLOSE one",
            "FETCH one",
            "ROLLBACK",
            "BEGIN",
            "DECLARE a CURSOR FOR SELECT id FROM items ORDER BY id",
            "DECLARE a CURSOR FOR SELECT id FROM items ORDER BY id",
            "ROLLBACK",
            "BEGIN",
            "DECLARE a CURSOR FOR SELECT id FROM items ORDER BY id DESC",
            "DECLARE b CURSOR FOR SELECT id FROM items ORDER BY id",
            "FETCH 2 FROM a",
            "CLOSE ALL",
            "FETCH a",
            "ROLLBACK",
        ],
    )
    .await;
    // WITH HOLD: the rows outlive COMMIT, not ROLLBACK; a plain cursor ends with its
    // transaction.
    same(
        &through,
        &reference,
        &[
            "BEGIN",
            "DECLARE h SCROLL CURSOR WITH HOLD FOR SELECT id, name FROM items ORDER BY name, id",
            "DECLARE p CURSOR FOR SELECT id FROM items ORDER BY id",
            "FETCH 2 FROM h",
            "COMMIT",
            "FETCH p",
            "FETCH 3 FROM h",
            "FETCH BACKWARD 1 FROM h",
            "BEGIN",
            "FETCH LAST FROM h",
            "DECLARE r CURSOR WITH HOLD FOR SELECT id FROM items ORDER BY id",
            "ROLLBACK",
            "FETCH r",
            "FETCH FIRST FROM h",
            "CLOSE h",
            "FETCH h",
            "DECLARE auto CURSOR WITH HOLD FOR SELECT id, grp FROM items ORDER BY grp, id LIMIT 7",
            "FETCH ALL FROM auto",
            "CLOSE auto",
            // Over one shard, WITH HOLD: that shard's own cursor, kept past COMMIT.
            "BEGIN",
            "DECLARE k SCROLL CURSOR WITH HOLD FOR SELECT id, name FROM items WHERE id = 9",
            "COMMIT",
            "FETCH ALL FROM k",
            "FETCH FIRST FROM k",
            "CLOSE k",
            "FETCH k",
            // DISCARD ALL closes every cursor.
            "DECLARE d1 CURSOR WITH HOLD FOR SELECT id FROM items ORDER BY id",
            "DECLARE d2 CURSOR WITH HOLD FOR SELECT id FROM items WHERE id = 3",
            "DISCARD ALL",
            "FETCH d1",
            "FETCH d2",
        ],
    )
    .await;
    // Savepoints: ROLLBACK TO drops the cursors declared since, RELEASE keeps them.
    same(
        &through,
        &reference,
        &[
            "BEGIN",
            "DECLARE s1 SCROLL CURSOR FOR SELECT id FROM items ORDER BY id",
            "SAVEPOINT a",
            "DECLARE s2 SCROLL CURSOR FOR SELECT id FROM items ORDER BY id DESC",
            "FETCH 2 FROM s2",
            "ROLLBACK TO SAVEPOINT a",
            "FETCH s2",
            "ROLLBACK TO SAVEPOINT a",
            "FETCH 2 FROM s1",
            "SAVEPOINT b",
            "DECLARE s3 CURSOR FOR SELECT id FROM items ORDER BY id",
            "RELEASE SAVEPOINT b",
            "SAVEPOINT c",
            "ROLLBACK TO SAVEPOINT c",
            "FETCH s3",
            "ROLLBACK TO SAVEPOINT a",
            "FETCH s3",
            "ROLLBACK",
        ],
    )
    .await;
}

/// `COPY ... TO STDOUT` through psql (the simple query protocol): its whole output.
async fn copy_out(c: &ShardClusters, conninfo: &str, sql: &str) -> String {
    let out = psql(&c.reference, conninfo, &["-c", sql], None).await;
    assert_success(sql, &out);
    text(&out.stdout)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_of_a_query_over_several_shards_is_one_ordered_answer() {
    let (c, proxy, through, reference) = setup().await;
    let via = proxy.conninfo(USER, PASSWORD, DB);
    let direct = direct_conninfo(&c.reference, USER, PASSWORD, DB);
    for sql in [
        "COPY (SELECT id, grp, name FROM items ORDER BY grp DESC, id) TO STDOUT",
        "COPY (SELECT id, grp, name FROM items ORDER BY id DESC) TO STDOUT WITH (HEADER)",
        "COPY (SELECT id, name FROM items ORDER BY id LIMIT 9) TO STDOUT (FORMAT csv, HEADER)",
        "COPY (SELECT id, name AS \"the, name\" FROM items ORDER BY id DESC LIMIT 12) TO STDOUT (FORMAT csv, HEADER true, DELIMITER ';', QUOTE '''', FORCE_QUOTE (id))",
        "COPY (SELECT id, name FROM items ORDER BY id) TO STDOUT (FORMAT csv, NULL 'nil', FORCE_QUOTE *)",
        "COPY (SELECT id, name FROM items ORDER BY id) TO STDOUT (DELIMITER '|', NULL '-')",
        "COPY (SELECT grp, count(*), max(name) FROM items GROUP BY grp ORDER BY grp) TO STDOUT (FORMAT csv, HEADER)",
        "COPY (SELECT DISTINCT grp FROM items ORDER BY 1) TO STDOUT",
        "COPY (SELECT name FROM items WHERE id = 4) TO STDOUT (FORMAT csv, HEADER)",
        "COPY items TO STDOUT (FORMAT csv, HEADER)",
        "COPY (SELECT count(*) FROM items) TO STDOUT",
    ] {
        let want = copy_out(&c, &direct, sql).await;
        let mut got = copy_out(&c, &via, sql).await;
        if sql.starts_with("COPY items") {
            // No ORDER BY: one PostgreSQL's order is unspecified; the rows and header are not.
            let sort = |s: &str| {
                let mut lines: Vec<&str> = s.lines().collect();
                let header = lines.remove(0);
                lines.sort_unstable();
                format!("{header}\n{}", lines.join("\n"))
            };
            got = sort(&got);
            assert_eq!(got, sort(&want), "{sql}");
            continue;
        }
        assert_eq!(got, want, "{sql}");
    }
    // Binary output of a merged query cannot be made exactly here: refused, never wrong.
    let out = psql(
        &c.reference,
        &via,
        &["-c", "COPY (SELECT id FROM items ORDER BY id) TO STDOUT (FORMAT binary)"],
        None,
    )
    .await;
    assert!(!out.status.success() && text(&out.stderr).contains("ERROR"), "binary refused: {out:?}");
    drop((through, reference));
}

/// `COPY ... TO STDOUT` through tokio_postgres (the extended protocol): its output or SQLSTATE.
async fn copy(client: &Client, sql: &str) -> Result<String, String> {
    use futures_util::{pin_mut, TryStreamExt};
    let stream = client.copy_out(sql).await.map_err(|e| common::sqlstate(&e).unwrap_or_default())?;
    pin_mut!(stream);
    let mut all = Vec::new();
    while let Some(chunk) = stream.try_next().await.map_err(|e| e.to_string())? {
        all.extend_from_slice(&chunk);
    }
    Ok(String::from_utf8_lossy(&all).into_owned())
}

/// The extended protocol: merged COPY and portals run in parts answer as one PostgreSQL;
/// cursor statements and binary merged COPY are refused with 0A000, never answered per shard.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_extended_protocol_refuses_what_it_cannot_answer_exactly() {
    let (_c, _proxy, mut through, mut reference) = setup().await;
    let code = |r: Result<Vec<tokio_postgres::Row>, tokio_postgres::Error>| {
        r.map(|rows| rows.len()).map_err(|e| common::sqlstate(&e).unwrap_or_else(|| e.to_string()))
    };
    // Cursor statements are the session's, answered as simple queries.
    let tx = through.transaction().await.unwrap();
    tx.simple_query(&format!("DECLARE c SCROLL CURSOR FOR {ORDERED}")).await.unwrap();
    assert_eq!(code(tx.query("FETCH 2 FROM c", &[]).await), Err("0A000".to_owned()));
    tx.rollback().await.unwrap();
    // A COPY whose order is one PostgreSQL's: its output; binary of such a query: refused;
    // a plain one: every row.
    for sql in [
        "COPY (SELECT id, name FROM items ORDER BY id DESC) TO STDOUT",
        "COPY (SELECT grp, count(*) FROM items GROUP BY grp ORDER BY grp) TO STDOUT (FORMAT csv, HEADER)",
    ] {
        assert_eq!(copy(&through, sql).await, copy(&reference, sql).await, "{sql}");
    }
    assert_eq!(
        copy(&through, "COPY (SELECT id FROM items ORDER BY id) TO STDOUT (FORMAT binary)").await,
        Err("0A000".to_owned())
    );
    let sorted = |s: String| {
        let mut l: Vec<String> = s.lines().map(str::to_owned).collect();
        l.sort();
        l
    };
    let want = sorted(copy(&reference, "COPY items TO STDOUT").await.unwrap());
    assert_eq!(copy(&through, "COPY items TO STDOUT").await.map(sorted), Ok(want));
    // Portals bound in one exchange and run in others, whole or in parts (Execute with a
    // row limit, PortalSuspended, Execute again): one PostgreSQL's rows, in its chunks.
    let mut answers = Vec::new();
    for client in [&mut through, &mut reference] {
        let mut seen: Vec<Vec<Vec<String>>> = Vec::new();
        let tx = client.transaction().await.unwrap();
        let text = |rows: Vec<tokio_postgres::Row>| -> Vec<Vec<String>> {
            rows.iter()
                .map(|r| {
                    let id: i64 = r.get(0);
                    let grp: i32 = r.get(1);
                    let name: Option<String> = r.get(2);
                    vec![id.to_string(), grp.to_string(), format!("{name:?}")]
                })
                .collect()
        };
        for sql in [
            ORDERED,
            "SELECT id, grp, name FROM items WHERE id > $1 ORDER BY name DESC NULLS LAST, id LIMIT 25",
            "SELECT max(id), grp, min(name) FROM items WHERE id > $1 GROUP BY grp ORDER BY grp",
        ] {
            let stmt = tx.prepare(sql).await.unwrap();
            let params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> =
                if sql.contains("$1") { vec![&5i64] } else { vec![] };
            let whole = tx.bind(&stmt, &params).await.unwrap();
            seen.push(text(tx.query_portal(&whole, 0).await.unwrap()));
            for limit in [1, 7, 60] {
                let portal = tx.bind(&stmt, &params).await.unwrap();
                loop {
                    let chunk = text(tx.query_portal(&portal, limit).await.unwrap());
                    let done = chunk.len() < limit as usize;
                    seen.push(chunk);
                    if done {
                        break;
                    }
                }
            }
        }
        tx.rollback().await.unwrap();
        answers.push(seen);
    }
    assert!(answers[1].iter().any(|c| c.len() == 7));
    assert_eq!(answers[0], answers[1]);
    // Plain rows (no order to keep) bound, then run whole later: streamed from the shards,
    // every row once.
    let tx = through.transaction().await.unwrap();
    let stmt = tx.prepare("SELECT id FROM items WHERE grp = 1").await.unwrap();
    let portal = tx.bind(&stmt, &[]).await.unwrap();
    let mut ids: Vec<i64> = tx.query_portal(&portal, 0).await.unwrap().iter().map(|r| r.get(0)).collect();
    ids.sort_unstable();
    assert_eq!(ids, (1..=60).filter(|i| i % 4 == 1).collect::<Vec<i64>>());
    tx.rollback().await.unwrap();
}

/// The extended protocol message for message: Execute with a row limit over several shards
/// gives the rows in order, `PortalSuspended` when the limit is met (also when no row is
/// left), then `SELECT n` of the last Execute; the portal ends with its transaction.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn portals_over_several_shards_run_in_parts_message_for_message() {
    use common::raw::{self, bind, describe_portal, execute, parse, query, summary, sync, RawConn};
    let (c, proxy, _through, _reference) = setup().await;
    let direct: std::net::SocketAddr =
        format!("{}:{}", c.reference.host(), c.reference.port()).parse().unwrap();
    let steps: Vec<Vec<Vec<u8>>> = vec![
        vec![query("BEGIN")],
        vec![parse("s", ORDERED), bind("p", "s", &[]), describe_portal("p"), execute("p", 5), sync()],
        vec![execute("p", 5), sync()],
        vec![describe_portal("p"), execute("p", 50), sync()],
        vec![execute("p", 1), sync()],
        vec![raw::frame(b'C', b"Pp\0"), sync()],
        // Closed, the name can be bound again.
        vec![bind("p", "s", &[]), execute("p", 2), sync()],
        vec![query("COMMIT")],
        vec![
            parse("", "SELECT grp, count(*) FROM items GROUP BY grp ORDER BY grp DESC"),
            bind("q", "", &[]),
            execute("q", 3),
            sync(),
        ],
        vec![execute("q", 3), sync()],
        vec![query("BEGIN")],
        vec![
            parse("t", "SELECT id FROM items WHERE id > $1 ORDER BY id DESC LIMIT 4"),
            bind("r", "t", &[Some("50")]),
            sync(),
        ],
        vec![execute("r", 0), sync()],
        vec![query("ROLLBACK")],
        vec![execute("r", 0), sync()],
    ];
    let run = |addr: std::net::SocketAddr| {
        let steps = steps.clone();
        async move {
            let mut conn = RawConn::login(addr, USER, PASSWORD, DB).await.unwrap();
            let mut out = Vec::new();
            for step in steps {
                conn.send(&step.concat()).await;
                out.push(conn.until_ready().await.iter().filter_map(summary).collect::<Vec<_>>());
            }
            conn.send(&raw::terminate()).await;
            out
        }
    };
    let want = run(direct).await;
    let got = run(proxy.addr).await;
    assert!(want.iter().flatten().any(|m| m == "s"), "{want:?}");
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(g, w, "step {i}");
    }
    assert_eq!(got.len(), want.len());
}

/// Rows held by pgvia (a cursor, a COPY, a portal run in parts over several shards) are
/// bounded by `limits.merge_memory_budget`: past it the statement is refused with 53200,
/// never answered in part; within it, the same statements answer as one PostgreSQL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_held_past_the_merge_budget_are_refused_not_cut() {
    let c = shards::start("CREATE TABLE wide (id bigint PRIMARY KEY, pad text NOT NULL);");
    let toml = shards::config_with(&c, &["wide"], |b| b.limits("merge_memory_budget = 65536"));
    let proxy = common::TestProxy::start_toml(&toml).await;
    let mut through = proxy.connect(USER, PASSWORD, DB).await;
    let reference = common::connect(&direct_conninfo(&c.reference, USER, PASSWORD, DB)).await.unwrap();
    let fill = "INSERT INTO wide SELECT i, repeat(md5(i::text), 32) FROM generate_series(1, 300) i";
    // Through pgvia one shard at a time (its INSERT ... SELECT has no rows to place by key).
    for id in 1..=300 {
        let one = format!("INSERT INTO wide (id, pad) VALUES ({id}, repeat(md5('{id}'), 32))");
        through.simple_query(&one).await.unwrap();
    }
    reference.simple_query(fill).await.unwrap();
    let code = |e: tokio_postgres::Error| common::sqlstate(&e).unwrap_or_else(|| e.to_string());
    let big = "SELECT id, pad FROM wide ORDER BY id DESC";
    through.simple_query("BEGIN").await.unwrap();
    let e = through.simple_query(&format!("DECLARE w CURSOR FOR {big}")).await.unwrap_err();
    assert_eq!(code(e), "53200");
    through.simple_query("ROLLBACK").await.unwrap();
    let via = proxy.conninfo(USER, PASSWORD, DB);
    let out = psql(&c.reference, &via, &["-c", &format!("COPY ({big}) TO STDOUT")], None).await;
    assert!(!out.status.success() && text(&out.stderr).contains("merge_memory_budget"), "{out:?}");
    let tx = through.transaction().await.unwrap();
    let stmt = tx.prepare(big).await.unwrap();
    let portal = tx.bind(&stmt, &[]).await.unwrap();
    assert_eq!(tx.query_portal(&portal, 10).await.map(|r| r.len()).map_err(code), Err("53200".to_owned()));
    tx.rollback().await.unwrap();
    // Narrowed, it fits and is one PostgreSQL's answer.
    same(
        &through,
        &reference,
        &[
            "BEGIN",
            "DECLARE n SCROLL CURSOR FOR SELECT id, pad FROM wide ORDER BY id DESC LIMIT 20",
            "FETCH 5 FROM n",
            "FETCH LAST FROM n",
            "ROLLBACK",
        ],
    )
    .await;
}
