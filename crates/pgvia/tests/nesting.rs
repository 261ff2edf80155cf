//! A configuration the documentation allows cannot crash the process: with
//! `[analysis] max_nesting` at its documented maximum, a query nested that deep is analysed
//! on a thread of the stack size production uses (`pgvia::app::block_on`, as `main` runs
//! pgvia), and the client gets PostgreSQL's own answer.
//!
//! Debug builds take several times more stack per level than release builds, so passing
//! here in a debug build is the conservative case.

// Helpers outside #[test] functions unwrap too: a failed step is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;

use common::{connect, direct_conninfo, sqlstate, start_pg, ConfigBuilder, TestProxy, DB, PASSWORD, USER};
use pgvia::config::Config;

/// What a query gave: its one value, or its SQLSTATE.
async fn outcome(client: &tokio_postgres::Client, sql: &str, extended: bool) -> Result<String, String> {
    let result = if extended {
        client.query_one(sql, &[]).await.map(|row| row.get::<_, i64>(0).to_string())
    } else {
        client.simple_query(sql).await.map(|msgs| {
            msgs.iter()
                .find_map(|m| match m {
                    tokio_postgres::SimpleQueryMessage::Row(row) => row.get(0).map(str::to_owned),
                    _ => None,
                })
                .unwrap_or_default()
        })
    };
    result.map_err(|e| sqlstate(&e).unwrap_or_else(|| e.to_string()))
}

#[test]
fn max_nesting_at_its_maximum_cannot_overflow_a_worker() {
    let pg = start_pg();
    let builder = ConfigBuilder::new(&pg).pool("pool_mode = \"transaction\"");
    // No cache, so every query is analysed.
    let toml = format!("{}\n[analysis]\nmax_nesting = 10000\ncache_entries = 0\n", builder.toml());
    let config = Config::parse(&toml, Path::new("/tmp/pgvia-test.toml")).unwrap();
    assert_eq!(config.analysis.max_nesting, 10_000, "the documented maximum");
    // Whichever thread's listener takes each connection (thread 0's is the one this runs on),
    // its session runs on a stack of the production size.
    pgvia::app::block_on(&config, || async {
        let proxy = TestProxy::start_toml(&toml).await;
        let direct = connect(&direct_conninfo(&pg, USER, PASSWORD, DB)).await.unwrap();
        let through = proxy.connect(USER, PASSWORD, DB).await;
        // Left-deep sums are the deepest trees PostgreSQL's grammar lets through: 9,999
        // levels for the walk, just inside the limit; one more term is past it.
        // PostgreSQL answers the deepest with its own 54001 (stack depth limit exceeded).
        let queries = [
            format!("SELECT {}::int8", vec!["1"; 1_000].join(" + ")),
            format!("SELECT {}::int8", vec!["1"; 10_000].join(" + ")),
            format!("SELECT {}::int8", vec!["1"; 10_001].join(" + ")),
            format!("SELECT length({})::int8", vec!["'a'"; 10_000].join(" || ")),
            format!("SELECT {}1::int8{}", "(SELECT ".repeat(3_000), ")".repeat(3_000)),
        ];
        for sql in &queries {
            for extended in [false, true] {
                let expected = outcome(&direct, sql, extended).await;
                let got = outcome(&through, sql, extended).await;
                assert_eq!(got, expected, "{}... (extended: {extended})", &sql[..40]);
            }
        }
        // The process is up and serves new clients.
        let fresh = proxy.connect(USER, PASSWORD, DB).await;
        assert_eq!(fresh.query_one("SELECT 1::int8", &[]).await.unwrap().get::<_, i64>(0), 1);
        drop((through, fresh));
        proxy.assert_no_leaks().await;
        proxy.stop().await;
    })
    .unwrap();
}
