//! The fallback entry `*`: a database created at run time is reachable through pgvia at once,
//! under its own name, with no configuration change; its pools close when it goes unused, so
//! it can be dropped; databases the server lacks and the name `*` itself are refused.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{start_pg, ConfigBuilder, TestProxy, PASSWORD, USER};
use pgvia::config::Config;

fn sqlstate(e: &tokio_postgres::Error) -> Option<String> {
    e.as_db_error().map(|d| d.code().code().to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn databases_created_at_run_time_are_served_through_the_fallback_entry() {
    let pg = start_pg();
    pg.psql("postgres", &format!("ALTER ROLE {USER} CREATEDB")).expect("grant CREATEDB");
    let config = ConfigBuilder::new(&pg)
        .pool("pool_mode = \"transaction\"")
        .general("fallback_idle_timeout = \"1s\"")
        .database(&format!("name = \"*\"\nhost = \"{}\"\nport = {}\npool_size = 2", pg.host(), pg.port()));
    let proxy = TestProxy::start(&config).await;

    let app = proxy.connect(USER, PASSWORD, "app").await;
    app.simple_query("CREATE DATABASE made_later").await.expect("CREATE DATABASE through pgvia");

    let later = proxy.connect(USER, PASSWORD, "made_later").await;
    later.batch_execute("CREATE TABLE t (x int); INSERT INTO t VALUES (1), (2)").await.expect("use it");
    let row = later.query_one("SELECT current_database()::text, count(*) FROM t", &[]).await.expect("query");
    assert_eq!((row.get::<_, String>(0), row.get::<_, i64>(1)), ("made_later".to_owned(), 2));

    // A database the server does not have: the server's own answer.
    let missing = common::connect(&proxy.conninfo(USER, PASSWORD, "never_made")).await;
    assert_eq!(missing.err().as_ref().and_then(sqlstate).as_deref(), Some("3D000"));
    // The entry itself is not a database.
    let star = common::connect(&proxy.conninfo(USER, PASSWORD, "*")).await;
    assert_eq!(star.err().as_ref().and_then(sqlstate).as_deref(), Some("3D000"));

    // Unused for fallback_idle_timeout: its pools close, and nothing holds the database open.
    drop(later);
    let has_pool = |name: &str| proxy.app.pools.all().iter().any(|p| p.key.database == name);
    assert!(has_pool("made_later"));
    let start = Instant::now();
    while has_pool("made_later") {
        assert!(start.elapsed() < Duration::from_secs(10), "the pools of made_later were not closed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(has_pool("app"), "a listed database's pools must stay");
    let start = Instant::now();
    loop {
        match app.simple_query("DROP DATABASE made_later").await {
            Ok(_) => break,
            // 55006: still being accessed; a closing server's backend may take a moment to exit.
            Err(e)
                if sqlstate(&e).as_deref() == Some("55006") && start.elapsed() < Duration::from_secs(5) =>
            {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("DROP DATABASE after its pools closed: {e}"),
        }
    }

    // Used again after it was dropped and re-created: new pools, same name.
    app.simple_query("CREATE DATABASE made_later").await.expect("create again");
    let again = proxy.connect(USER, PASSWORD, "made_later").await;
    let n: i64 = again
        .query_one("SELECT count(*) FROM pg_class WHERE relname = 't'", &[])
        .await
        .expect("query")
        .get(0);
    assert_eq!(n, 0, "a fresh database, not the dropped one");

    drop((app, again));
    proxy.assert_no_leaks().await;
    proxy.stop().await;
}

#[test]
fn the_fallback_entry_takes_host_and_port_only() {
    let text = "[[databases]]\nname = \"*\"\nhost = \"h\"\ndbname = \"x\"\n\n[[databases]]\nname = \"*\"\n[[databases.servers]]\nhost = \"a\"\n\n[[users]]\nname = \"u\"\npassword = \"p\"\n";
    let err = Config::parse(text, Path::new("/tmp/x.toml")).expect_err("refused");
    let text = err.to_string();
    assert!(text.contains("databases[0].dbname"), "{text}");
    assert!(text.contains("databases[1].servers"), "{text}");
}
