//! Session state changed where the SQL text does not show it (inside a user function, a `DO`
//! block, plpgsql `EXECUTE`, SQL `EXECUTE` of a prepared statement) follows the client in
//! transaction mode: with a pool of one server, the next client finds the session a fresh
//! connection to PostgreSQL has (asked of PostgreSQL directly in the same test), and the first
//! client keeps its own state where PostgreSQL would (carried settings, a pinned server,
//! notifications through the hub).

// The test bodies run once per session engine from helper functions, outside `#[test]`.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::shards::{Engine, ENGINES};
use common::*;
use tokio_postgres::Client;

/// One effect on the session, as plpgsql runs it in a function or `DO` body (`body`) and as
/// a dynamic SQL statement (`sql`); `own` is what the first client sees of it afterwards.
struct Effect {
    name: &'static str,
    body: &'static str,
    sql: &'static str,
    own: Own,
}

/// How the first client checks that it kept its own state.
enum Own {
    /// A one-row query and its value.
    Row(&'static str, &'static str),
    /// A notification on `hidden_ch` reaches it.
    Notified,
}

const EFFECTS: &[Effect] = &[
    Effect {
        name: "set_config",
        body: "PERFORM set_config('search_path', 'hidden_x', false)",
        sql: "SELECT set_config('search_path', 'hidden_x', false)",
        own: Own::Row("SHOW search_path", "hidden_x"),
    },
    Effect {
        name: "SET",
        body: "SET statement_timeout = '4321ms'",
        sql: "SET statement_timeout = '4321ms'",
        own: Own::Row("SHOW statement_timeout", "4321ms"),
    },
    Effect {
        name: "SET ROLE",
        body: "SET ROLE hidden_other",
        sql: "SET ROLE hidden_other",
        own: Own::Row("SELECT current_user", "hidden_other"),
    },
    Effect {
        name: "set_config role",
        body: "PERFORM set_config('role', 'hidden_other', false)",
        sql: "SELECT set_config('role', 'hidden_other', false)",
        own: Own::Row("SELECT current_user", "hidden_other"),
    },
    Effect { name: "LISTEN", body: "LISTEN hidden_ch", sql: "LISTEN hidden_ch", own: Own::Notified },
    Effect {
        name: "advisory lock",
        body: "PERFORM pg_advisory_lock(4242)",
        sql: "SELECT pg_advisory_lock(4242)",
        own: Own::Row(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()",
            "1",
        ),
    },
    Effect {
        name: "temp table",
        body: "CREATE TEMP TABLE hidden_t (a int)",
        sql: "CREATE TEMP TABLE hidden_t (a int)",
        own: Own::Row("SELECT count(*) FROM hidden_t", "0"),
    },
    Effect {
        name: "PREPARE",
        body: "PREPARE hidden_p AS SELECT 1",
        sql: "PREPARE hidden_p AS SELECT 1",
        own: Own::Row("SELECT count(*) FROM pg_prepared_statements WHERE name = 'hidden_p'", "1"),
    },
    Effect {
        name: "WITH HOLD cursor",
        // plpgsql reads a static DECLARE as its own block syntax.
        body: "EXECUTE 'DECLARE hidden_c CURSOR WITH HOLD FOR SELECT 1'",
        sql: "DECLARE hidden_c CURSOR WITH HOLD FOR SELECT 1",
        own: Own::Row("SELECT count(*) FROM pg_cursors WHERE name = 'hidden_c'", "1"),
    },
];

/// Where the effect hides.
#[derive(Debug, Clone, Copy)]
enum Vehicle {
    Function,
    DoBlock,
    PlpgsqlExecute,
    SqlExecute,
}

const VEHICLES: [Vehicle; 4] =
    [Vehicle::Function, Vehicle::DoBlock, Vehicle::PlpgsqlExecute, Vehicle::SqlExecute];

impl Vehicle {
    /// The client's transactions, in order, that end with the effect done.
    fn statements(self, index: usize, effect: &Effect) -> Vec<String> {
        match self {
            Vehicle::Function => vec![format!("SELECT hidden_fn_{index}()")],
            Vehicle::DoBlock => vec![format!("DO $do$ BEGIN {}; END $do$", effect.body)],
            Vehicle::PlpgsqlExecute => vec![format!("SELECT hidden_dyn($q${}$q$)", effect.sql)],
            Vehicle::SqlExecute => {
                // A SELECT is prepared as it is (the effect is in the statement's own text);
                // anything else through a function that EXECUTEs it.
                let prepared = if effect.sql.starts_with("SELECT") {
                    effect.sql.to_owned()
                } else {
                    format!("SELECT hidden_dyn($q${}$q$)", effect.sql)
                };
                vec![format!("PREPARE hidden_stmt AS {prepared}"), "EXECUTE hidden_stmt".to_owned()]
            }
        }
    }
}

/// What a client sees of its session: settings, role, and every kind of state that must
/// not pass from one client to the next.
const SESSION: &str = "SELECT current_setting('search_path'), current_setting('statement_timeout'), \
     current_user::text, \
     (SELECT count(*) FROM pg_listening_channels()), \
     (SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()), \
     (SELECT count(*) FROM pg_class WHERE relnamespace = pg_my_temp_schema()), \
     (SELECT count(*) FROM pg_prepared_statements WHERE from_sql AND name NOT LIKE 'pgvia%'), \
     (SELECT count(*) FROM pg_cursors)";

fn describe(sql: &str, e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{sql}: {} {}", db.code().code(), db.message()),
        None => format!("{sql}: {e}"),
    }
}

/// The values of a one-row simple query.
async fn row(client: &Client, sql: &str) -> Result<Vec<String>, String> {
    let row = first_row(client, sql).await.map_err(|e| describe(sql, &e))?;
    if row.is_empty() {
        return Err(format!("{sql}: no row"));
    }
    Ok(row)
}

fn setup_sql() -> String {
    let mut sql = String::from(
        "CREATE ROLE hidden_other; GRANT hidden_other TO app; \
         CREATE FUNCTION hidden_dyn(q text) RETURNS void LANGUAGE plpgsql AS $f$ BEGIN EXECUTE q; END $f$;",
    );
    for (i, effect) in EFFECTS.iter().enumerate() {
        sql.push_str(&format!(
            "CREATE FUNCTION hidden_fn_{i}() RETURNS void LANGUAGE plpgsql AS $f$ BEGIN {}; END $f$;",
            effect.body
        ));
    }
    sql
}

/// Runs one effect in one vehicle; returns what went wrong, if anything.
async fn case(
    proxy: &TestProxy,
    direct: &Client,
    fresh: &[String],
    index: usize,
    effect: &Effect,
    vehicle: Vehicle,
) -> Result<(), String> {
    let conninfo = proxy.conninfo(USER, PASSWORD, DB);
    let (first, mut first_rx) = notified_client(&conninfo).await;
    for sql in vehicle.statements(index, effect) {
        first.simple_query(&sql).await.map_err(|e| describe(&sql, &e))?;
    }
    // The next client of the one server; it waits while the first one is pinned.
    let next = tokio::spawn({
        let conninfo = conninfo.clone();
        async move {
            let (next, rx) = notified_client(&conninfo).await;
            let seen = row(&next, SESSION).await;
            (next, rx, seen)
        }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    // The first client's own state, in its next transaction.
    match effect.own {
        Own::Row(sql, want) => {
            let got = row(&first, sql).await?;
            if got != [want] {
                return Err(format!("the first client lost its state: {sql} gave {got:?}, not {want}"));
            }
        }
        Own::Notified => {
            direct.batch_execute("NOTIFY hidden_ch, 'own'").await.map_err(|e| e.to_string())?;
            let got = tokio::time::timeout(Duration::from_secs(5), first_rx.recv()).await;
            if !matches!(got, Ok(Some(ref n)) if n.channel() == "hidden_ch") {
                return Err("the first client's LISTEN got no notification".to_owned());
            }
        }
    }
    drop(first);
    let (next, mut next_rx, seen) = tokio::time::timeout(Duration::from_secs(30), next)
        .await
        .map_err(|_| "the next client got no server in 30 s".to_owned())?
        .map_err(|e| e.to_string())?;
    let seen = seen?;
    if seen != fresh {
        return Err(format!("the next client saw {seen:?}, a fresh session has {fresh:?}"));
    }
    direct.batch_execute("NOTIFY hidden_ch, 'stray'").await.map_err(|e| e.to_string())?;
    row(&next, "SELECT 1").await?;
    tokio::time::sleep(Duration::from_millis(200)).await;
    row(&next, "SELECT 1").await?;
    if let Ok(n) = next_rx.try_recv() {
        return Err(format!("the next client got a stray notification: {} {}", n.channel(), n.payload()));
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn effects_inside_functions_do_blocks_and_execute_do_not_leak() {
    for engine in ENGINES {
        effects_do_not_leak_on(engine).await;
    }
}

async fn effects_do_not_leak_on(engine: Engine) {
    let pg = start_pg();
    pg.psql(DB, &setup_sql()).expect("setup");
    let proxy = engine.start(&pool_of_one(&pg), &pg).await;
    let direct = connect(&direct_conninfo(&pg, USER, PASSWORD, DB)).await.expect("direct");
    // What a client that just connected sees, asked of PostgreSQL itself.
    let fresh = {
        let c = connect(&direct_conninfo(&pg, USER, PASSWORD, DB)).await.expect("direct");
        row(&c, SESSION).await.expect("fresh session")
    };
    let mut failures = Vec::new();
    for vehicle in VEHICLES {
        for (index, effect) in EFFECTS.iter().enumerate() {
            if let Err(e) = case(&proxy, &direct, &fresh, index, effect, vehicle).await {
                failures.push(format!("{} in {vehicle:?}: {e}", effect.name));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{engine:?} session engine: {} of {} cases leaked:\n{}",
        failures.len(),
        4 * EFFECTS.len(),
        failures.join("\n")
    );
    proxy.assert_no_leaks().await;
    proxy.stop().await;
}

/// A statement prepared with the extended protocol in one transaction and run in a later one
/// (drivers prepare once and run many times): each run counts, not only the Parse.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statement_prepared_earlier_counts_each_time_it_runs() {
    for engine in ENGINES {
        prepared_earlier_on(engine).await;
    }
}

async fn prepared_earlier_on(engine: Engine) {
    eprintln!("-- the {engine:?} session engine");
    let pg = start_pg();
    pg.psql(DB, &setup_sql()).expect("setup");
    let proxy = engine.start(&pool_of_one(&pg), &pg).await;
    let fresh = {
        let c = connect(&direct_conninfo(&pg, USER, PASSWORD, DB)).await.expect("direct");
        row(&c, SESSION).await.expect("fresh session")
    };
    let conninfo = proxy.conninfo(USER, PASSWORD, DB);
    let (first, _rx) = notified_client(&conninfo).await;
    // hidden_fn_1 sets statement_timeout; hidden_fn_0 sets search_path.
    let set_timeout = first.prepare("SELECT hidden_fn_1()").await.expect("prepare");
    let (next, _next_rx) = notified_client(&conninfo).await;
    assert_eq!(row(&next, SESSION).await.expect("next"), fresh, "preparing runs nothing");
    first.query(&set_timeout, &[]).await.expect("run");
    assert_eq!(row(&next, SESSION).await.expect("next"), fresh, "after the first run");
    first.batch_execute("RESET statement_timeout").await.expect("reset");
    first.query(&set_timeout, &[]).await.expect("run again");
    assert_eq!(row(&next, SESSION).await.expect("next"), fresh, "after the second run");
    assert_eq!(row(&first, "SHOW statement_timeout").await.expect("own"), ["4321ms"]);
    drop((first, next));
    proxy.assert_no_leaks().await;
    proxy.stop().await;
}

/// Transaction mode over one server, so the next client gets the server the last one used.
fn pool_of_one(pg: &harness::Cluster) -> ConfigBuilder {
    ConfigBuilder::new(pg)
        .pool("pool_mode = \"transaction\"")
        .pool("pool_size = 1")
        .pool("checkout_timeout = \"60s\"")
}

/// With `standard_conforming_strings` off a backslash escapes a quote, so
/// `'a\'';SET ...;--'` is a string, a `SET` and a comment; read as the standard says it is
/// one string. What the second reading hides (a `SET`, a `set_config` through the extended
/// protocol) must still follow the client and not reach the next client of its server, as on
/// a dedicated server (the same steps run directly give the expected values).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn effects_hidden_by_nonstandard_string_escapes_do_not_leak() {
    let pg = start_pg();
    let proxy = TestProxy::start(&pool_of_one(&pg)).await;
    let direct_info = direct_conninfo(&pg, USER, PASSWORD, DB);
    let fresh = {
        let c = connect(&direct_info).await.expect("direct");
        row(&c, SESSION).await.expect("fresh session")
    };
    const SIMPLE: &str = r"SELECT 'a\'';SET search_path=pg_catalog;--'";
    const EXTENDED: &str = r"SELECT 'a\'', set_config('statement_timeout', '4321ms', false)::text --'";
    // The same steps directly: what the first client's own session must show afterwards.
    let own_directly = {
        let c = connect(&direct_info).await.expect("direct");
        c.batch_execute("SET standard_conforming_strings = off").await.expect("set");
        c.simple_query(SIMPLE).await.expect("simple");
        c.query(EXTENDED, &[]).await.expect("extended");
        row(&c, "SELECT current_setting('search_path'), current_setting('statement_timeout')")
            .await
            .expect("own")
    };
    assert_eq!(own_directly, ["pg_catalog", "4321ms"], "PostgreSQL reads the hidden statements");
    let conninfo = proxy.conninfo(USER, PASSWORD, DB);
    let first = connect(&conninfo).await.expect("first");
    first.batch_execute("SET standard_conforming_strings = off").await.expect("set");
    first.simple_query(SIMPLE).await.expect("simple");
    let next = connect(&conninfo).await.expect("next");
    assert_eq!(row(&next, SESSION).await.expect("next"), fresh, "after the simple query");
    first.query(EXTENDED, &[]).await.expect("extended");
    assert_eq!(row(&next, SESSION).await.expect("next"), fresh, "after the extended query");
    let own =
        row(&first, "SELECT current_setting('search_path'), current_setting('statement_timeout')").await;
    assert_eq!(own.expect("own"), own_directly, "the first client keeps its session");
    drop((first, next));
    proxy.assert_no_leaks().await;
    proxy.stop().await;
}
