//! sqlx (PostgreSQL) at its default settings: every `query(...)` is a named statement
//! (sqlx_s_N) kept in the connection's statement cache (100 entries).

use std::time::Instant;

use futures_util::future;
use pgvia_compat::{stress_clients, stress_duration, url, Rng};
use sqlx::postgres::{PgConnection, PgDatabaseError};
use sqlx::{Connection, Executor, Row};

async fn connect() -> PgConnection {
    PgConnection::connect(&url()).await.unwrap()
}

async fn fresh_table(conn: &mut PgConnection, name: &str, columns: &str) {
    conn.execute(format!("DROP TABLE IF EXISTS {name}").as_str()).await.unwrap();
    conn.execute(format!("CREATE TABLE {name} ({columns})").as_str()).await.unwrap();
}

fn sqlstate(e: &sqlx::Error) -> Option<String> {
    e.as_database_error().and_then(|d| d.try_downcast_ref::<PgDatabaseError>()).map(|d| d.code().to_owned())
}

#[tokio::test]
async fn sqlx_statement_cache_default() {
    let mut conn = connect().await;
    for i in 0..30i32 {
        let row = sqlx::query("SELECT $1::int4 * 2, $2::text")
            .bind(i)
            .bind(format!("v{i}"))
            .fetch_one(&mut conn)
            .await
            .unwrap();
        assert_eq!(row.get::<i32, _>(0), i * 2);
        assert_eq!(row.get::<String, _>(1), format!("v{i}"));
    }
    let err = sqlx::query("SELECT 1 / $1::int4").bind(0).fetch_one(&mut conn).await.unwrap_err();
    assert_eq!(sqlstate(&err).as_deref(), Some("22012"));
    let row = sqlx::query("SELECT 1 / $1::int4").bind(1).fetch_one(&mut conn).await.unwrap();
    assert_eq!(row.get::<i32, _>(0), 1);
    // Unprepared (simple protocol) execution of several statements at once.
    conn.execute("SELECT 1; SELECT 2").await.unwrap();
}

#[tokio::test]
async fn sqlx_query_as() {
    let mut conn = connect().await;
    fresh_table(&mut conn, "rs_sqlx_people", "id int, name text, score float8").await;
    for i in 0..10i32 {
        sqlx::query("INSERT INTO rs_sqlx_people VALUES ($1, $2, $3)")
            .bind(i)
            .bind(format!("person {i}"))
            .bind(i as f64 / 2.0)
            .execute(&mut conn)
            .await
            .unwrap();
    }
    let people: Vec<(i32, String, f64)> =
        sqlx::query_as("SELECT id, name, score FROM rs_sqlx_people WHERE id >= $1 ORDER BY id")
            .bind(5)
            .fetch_all(&mut conn)
            .await
            .unwrap();
    assert_eq!(people.len(), 5);
    assert_eq!(people[0], (5, "person 5".to_owned(), 2.5));
    let (count,): (i64,) =
        sqlx::query_as("SELECT count(*) FROM rs_sqlx_people").fetch_one(&mut conn).await.unwrap();
    assert_eq!(count, 10);
}

#[tokio::test]
async fn sqlx_begin_commit_rollback() {
    let mut conn = connect().await;
    fresh_table(&mut conn, "rs_sqlx_tx", "n int").await;
    {
        let mut tx = conn.begin().await.unwrap();
        sqlx::query("INSERT INTO rs_sqlx_tx VALUES ($1)").bind(1).execute(&mut *tx).await.unwrap();
        {
            let mut nested = tx.begin().await.unwrap(); // a savepoint
            sqlx::query("INSERT INTO rs_sqlx_tx VALUES ($1)").bind(2).execute(&mut *nested).await.unwrap();
            nested.rollback().await.unwrap();
        }
        sqlx::query("INSERT INTO rs_sqlx_tx VALUES ($1)").bind(3).execute(&mut *tx).await.unwrap();
        tx.commit().await.unwrap();
    }
    {
        let mut tx = conn.begin().await.unwrap();
        sqlx::query("INSERT INTO rs_sqlx_tx VALUES ($1)").bind(4).execute(&mut *tx).await.unwrap();
        let err = sqlx::query("SELECT 1 / 0").execute(&mut *tx).await.unwrap_err();
        assert_eq!(sqlstate(&err).as_deref(), Some("22012"));
        tx.rollback().await.unwrap();
    }
    let ns: Vec<(i32,)> =
        sqlx::query_as("SELECT n FROM rs_sqlx_tx ORDER BY n").fetch_all(&mut conn).await.unwrap();
    assert_eq!(ns, [(1,), (3,)]);
}

#[tokio::test]
async fn sqlx_copy_in_raw() {
    let mut conn = connect().await;
    fresh_table(&mut conn, "rs_sqlx_copy", "id int, label text").await;
    let mut copy = conn.copy_in_raw("COPY rs_sqlx_copy FROM STDIN").await.unwrap();
    let text: String = (0..5000).map(|i| format!("{i}\tline {i}\n")).collect();
    for chunk in text.as_bytes().chunks(4096) {
        copy.send(chunk).await.unwrap();
    }
    assert_eq!(copy.finish().await.unwrap(), 5000);
    let (count, sum): (i64, i64) =
        sqlx::query_as("SELECT count(*), sum(id) FROM rs_sqlx_copy").fetch_one(&mut conn).await.unwrap();
    assert_eq!((count, sum), (5000, 4999 * 5000 / 2));
    // A failing COPY leaves nothing and the connection usable.
    let mut copy = conn.copy_in_raw("COPY rs_sqlx_copy FROM STDIN").await.unwrap();
    copy.send(b"1\tok\nnot a number\tbad\n".as_slice()).await.unwrap();
    let err = copy.finish().await.unwrap_err();
    assert_eq!(sqlstate(&err).as_deref(), Some("22P02"));
    let (count,): (i64,) =
        sqlx::query_as("SELECT count(*) FROM rs_sqlx_copy").fetch_one(&mut conn).await.unwrap();
    assert_eq!(count, 5000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlx_stress_50_clients_pool_3() {
    let mut setup = connect().await;
    fresh_table(&mut setup, "rs_sqlx_stress", "client int, n int").await;
    let deadline = Instant::now() + stress_duration();
    let clients = (0..stress_clients()).map(|cid| tokio::spawn(sqlx_stress_client(cid as i32, deadline)));
    let failures: Vec<String> = future::join_all(clients)
        .await
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

async fn sqlx_stress_client(cid: i32, deadline: Instant) -> Result<(), String> {
    let e = |e: sqlx::Error| e.to_string();
    let mut conn = PgConnection::connect(&url()).await.map_err(e)?;
    let mut rng = Rng::new(cid as u64);
    let mut inserted = 0i64;
    while Instant::now() < deadline {
        match rng.below(4) {
            0 => {
                let v = rng.below(1_000_000) as i64;
                let (got,): (i64,) =
                    sqlx::query_as("SELECT $1::int8 * 2").bind(v).fetch_one(&mut conn).await.map_err(e)?;
                check(got == v * 2, || format!("double {v}: {got}"))?;
            }
            1 => {
                let n = rng.below(50) as i32 + 1;
                let (count, sum): (i64, i64) =
                    sqlx::query_as("SELECT count(*), sum(g)::int8 FROM generate_series(1, $1::int4) g")
                        .bind(n)
                        .fetch_one(&mut conn)
                        .await
                        .map_err(e)?;
                check(count == n as i64 && sum == (n as i64) * (n as i64 + 1) / 2, || {
                    format!("series {n}: {count} {sum}")
                })?;
            }
            2 => {
                let mut tx = conn.begin().await.map_err(e)?;
                sqlx::query("INSERT INTO rs_sqlx_stress VALUES ($1, $2)")
                    .bind(cid)
                    .bind(inserted as i32)
                    .execute(&mut *tx)
                    .await
                    .map_err(e)?;
                let (count,): (i64,) =
                    sqlx::query_as("SELECT count(*) FROM rs_sqlx_stress WHERE client = $1")
                        .bind(cid)
                        .fetch_one(&mut *tx)
                        .await
                        .map_err(e)?;
                check(count == inserted + 1, || format!("count in transaction: {count}"))?;
                tx.commit().await.map_err(e)?;
                inserted += 1;
            }
            _ => {
                let rows: Vec<(String,)> =
                    sqlx::query_as("SELECT $1::text || g FROM generate_series(1, 5) g")
                        .bind(format!("c{cid}-"))
                        .fetch_all(&mut conn)
                        .await
                        .map_err(e)?;
                let want: Vec<(String,)> = (1..=5).map(|g| (format!("c{cid}-{g}"),)).collect();
                check(rows == want, || format!("rows {rows:?}"))?;
            }
        }
    }
    let (count,): (i64,) = sqlx::query_as("SELECT count(*) FROM rs_sqlx_stress WHERE client = $1")
        .bind(cid)
        .fetch_one(&mut conn)
        .await
        .map_err(e)?;
    check(count == inserted, || format!("final count {count}, want {inserted}"))?;
    conn.close().await.map_err(e)?;
    Ok(())
}

fn check(ok: bool, what: impl FnOnce() -> String) -> Result<(), String> {
    if ok {
        Ok(())
    } else {
        Err(what())
    }
}
