//! `[auth_query]`: roles pgvia's file does not list log in with the secret PostgreSQL
//! stores, looked up through a `SECURITY DEFINER` function over `pg_shadow`; a role created
//! after pgvia started needs no reload, a changed password takes over within `cache_ttl`,
//! and the pools of many short-lived roles stay under `max_pools`.

// Helpers outside #[test] functions unwrap too: a failed step is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use common::{connect, first_row, sqlstate, start_pg, ConfigBuilder, TestProxy, DB, USER};
use harness::Cluster;

/// The lookup function, owned by the superuser and callable by `app` only.
const LOOKUP_SQL: &str = "CREATE SCHEMA pgvia_auth;
CREATE FUNCTION pgvia_auth.lookup(role_name text) RETURNS TABLE (usename name, passwd text)
    LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog
    AS $$ SELECT usename, passwd FROM pg_shadow WHERE usename = role_name $$;
REVOKE ALL ON FUNCTION pgvia_auth.lookup(text) FROM PUBLIC;
GRANT USAGE ON SCHEMA pgvia_auth TO app;
GRANT EXECUTE ON FUNCTION pgvia_auth.lookup(text) TO app;";

/// pgvia with `[auth_query]` run as `app` in `app`, and database `app_tx` in transaction mode.
async fn proxy(pg: &Cluster, section: &str) -> TestProxy {
    pg.psql(DB, LOOKUP_SQL).unwrap();
    let tx_db = format!(
        "name = \"app_tx\"\nhost = \"{}\"\nport = {}\ndbname = \"app\"\npool_mode = \"transaction\"",
        pg.host(),
        pg.port()
    );
    let builder = ConfigBuilder::new(pg).general("auth_method = \"scram-sha-256\"").database(&tx_db);
    let toml = format!(
        "{}\n[auth_query]\nquery = \"SELECT usename, passwd FROM pgvia_auth.lookup($1)\"\nuser = \"{USER}\"\ndatabase = \"{DB}\"\n{section}\n",
        builder.toml()
    );
    TestProxy::start_toml(&toml).await
}

async fn current_user(proxy: &TestProxy, user: &str, password: &str, db: &str) -> Result<String, String> {
    let client =
        connect(&proxy.conninfo(user, password, db)).await.map_err(|e| sqlstate(&e).unwrap_or_default())?;
    Ok(first_row(&client, "SELECT current_user").await.unwrap().remove(0))
}

/// Pools of users other than the file's.
fn looked_up_pools(proxy: &TestProxy) -> usize {
    proxy.app.pools.all().iter().filter(|p| p.key.user != USER).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_role_created_after_start_logs_in_and_a_new_password_takes_over() {
    let pg = start_pg();
    let proxy = proxy(&pg, "cache_ttl = \"1s\"\npool_idle_timeout = \"1s\"").await;
    // Unknown to PostgreSQL: refused exactly like a wrong password.
    assert_eq!(current_user(&proxy, "carol", "c1", "app").await, Err("28P01".into()));

    pg.create_user("carol", "c1").unwrap();
    // The miss above is cached for cache_ttl; after it, carol is found.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    for db in ["app", "app_tx"] {
        assert_eq!(current_user(&proxy, "carol", "c1", db).await.as_deref(), Ok("carol"), "{db}");
    }
    assert_eq!(current_user(&proxy, "carol", "wrong", "app").await, Err("28P01".into()));
    // What PostgreSQL saw: carol's own sessions.
    let seen = pg.psql("postgres", "SELECT count(*) FROM pg_stat_activity WHERE usename = 'carol'").unwrap();
    assert!(seen.parse::<u32>().unwrap() >= 1, "{seen}");

    pg.psql("postgres", "ALTER ROLE carol PASSWORD 'c2'").unwrap();
    let changed = Instant::now();
    // Within cache_ttl (1 s) the old password stops working and the new one works.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(current_user(&proxy, "carol", "c1", "app").await, Err("28P01".into()));
    for db in ["app", "app_tx"] {
        assert_eq!(current_user(&proxy, "carol", "c2", db).await.as_deref(), Ok("carol"), "{db}");
    }
    assert!(changed.elapsed() < Duration::from_secs(5));

    // Idle for pool_idle_timeout: carol's pools close and she leaves the configuration in use.
    let deadline = Instant::now() + Duration::from_secs(5);
    while looked_up_pools(&proxy) > 0 {
        assert!(Instant::now() < deadline, "carol's pools were not closed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(proxy.app.config().user("carol").is_none());
    assert_eq!(current_user(&proxy, "carol", "c2", "app").await.as_deref(), Ok("carol"));
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_short_lived_roles_leave_at_most_max_pools() {
    let users: usize =
        std::env::var("PGVIA_AUTH_QUERY_USERS").ok().and_then(|n| n.parse().ok()).unwrap_or(1000);
    let max_pools = 5;
    let pg = start_pg();
    // One verifier serves every role (it does not contain the name); one iteration keeps
    // the clients' key stretching out of the measurement.
    let verifier = wire::scram::ScramVerifier::from_password("pw", b"0123456789abcdef", 1).to_string();
    let mut sql = String::new();
    for i in 0..users {
        sql.push_str(&format!("CREATE ROLE tmp{i} LOGIN PASSWORD '{verifier}';\n"));
    }
    pg.psql("postgres", &sql).unwrap();
    let proxy = proxy(&pg, &format!("max_pools = {max_pools}\npool_idle_timeout = \"1h\"")).await;
    let started = Instant::now();
    let mut most = 0;
    for i in 0..users {
        let user = format!("tmp{i}");
        let db = if i % 2 == 0 { "app" } else { "app_tx" };
        assert_eq!(current_user(&proxy, &user, "pw", db).await.as_deref(), Ok(user.as_str()));
        most = most.max(looked_up_pools(&proxy));
        assert!(most <= max_pools, "{most} pools after {user}");
    }
    let elapsed = started.elapsed();
    eprintln!(
        "{users} roles logged in through auth_query in {elapsed:?}; at most {most} of their pools at once"
    );
    assert_eq!(most, max_pools);
    // The configuration in use and the ClientKeys did not grow with the roles.
    assert!(proxy.app.config().users.len() <= 1 + max_pools);
    proxy.app.client_keys.sweep();
    assert!(proxy.app.client_keys.len() <= max_pools, "{}", proxy.app.client_keys.len());
    let servers =
        pg.psql("postgres", "SELECT count(*) FROM pg_stat_activity WHERE usename LIKE 'tmp%'").unwrap();
    assert!(servers.parse::<usize>().unwrap() <= max_pools, "{servers} servers of tmp roles");
    proxy.stop().await;
}
