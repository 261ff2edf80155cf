//! What the read/write splitting tests share: the configuration, waiting for health checks,
//! and where a statement ran.

use std::time::Duration;

use harness::Cluster;
use tokio_postgres::{Client, SimpleQueryMessage};

use super::common::ops::admin_user;
use super::common::replicas::*;
use super::common::*;

pub(crate) const ROLES: [&str; 3] = ["primary", "replica", "replica"];

/// Database `app` on the three servers, split on, short health-check periods; `extra` lines
/// replace the default of the same key.
pub(crate) fn split_config(rep: &Replicated, roles: [&str; 3], extra: &[&str]) -> ConfigBuilder {
    let defaults = [
        "read_write_split = \"on\"",
        "load_balance = \"round_robin\"",
        "primary_reads = false",
        "read_your_writes = \"1s\"",
        "health_check_interval = \"500ms\"",
        // Generous: eight tests with three servers each run at once on a small machine, and a
        // check that times out bans a server that is up. A stopped one refuses at once.
        "health_check_timeout = \"5s\"",
        "ban_time = \"2s\"",
    ];
    let key = |line: &str| line.split('=').next().unwrap_or_default().trim().to_owned();
    let mut settings: Vec<&str> =
        defaults.iter().copied().filter(|d| !extra.iter().any(|e| key(e) == key(d))).collect();
    settings.extend_from_slice(extra);
    let servers: Vec<(&Cluster, &str)> = rep.all().into_iter().zip(roles).collect();
    ConfigBuilder::new(&rep.primary)
        .pool("pool_mode = \"transaction\"")
        .pool("pool_size = 20")
        .pool("checkout_timeout = \"10s\"")
        .servers(&servers, &settings)
        .user(&admin_user())
}

/// Waits until pgvia reports every server healthy, the first as primary, the others as replicas.
pub(crate) async fn wait_healthy(rep: &Replicated, proxy: &TestProxy) {
    let ports: Vec<u16> = rep.all().iter().map(|pg| pg.port()).collect();
    wait_for_hosts(&rep.primary, proxy, "every server healthy in its role", Duration::from_secs(15), |h| {
        ports.iter().enumerate().all(|(i, &port)| {
            let role = if i == 0 { "primary" } else { "replica" };
            host_cell(h, port, "state") == "healthy" && host_cell(h, port, "role") == role
        })
    })
    .await;
}

/// The first value of the first row of a simple query.
pub(crate) async fn value(client: &Client, sql: &str) -> Result<String, tokio_postgres::Error> {
    let messages = client.simple_query(sql).await?;
    Ok(messages
        .iter()
        .find_map(|m| match m {
            SimpleQueryMessage::Row(r) => Some(r.get(0).unwrap_or("NULL").to_owned()),
            _ => None,
        })
        .unwrap_or_default())
}

pub(crate) async fn must(client: &Client, sql: &str) -> String {
    value(client, sql).await.unwrap_or_else(|e| panic!("{sql}: {e} ({:?})", sqlstate(&e)))
}

/// Reads row 2 of `table` (made by [`tables`]) `times` times, `prefix` (a hint) before the
/// SELECT, and returns, per server (primary first), how many of those reads ran there.
pub(crate) async fn where_ran(
    rep: &Replicated,
    client: &Client,
    prefix: &str,
    table: &str,
    times: usize,
) -> Vec<i64> {
    let needle = format!("FROM {table}");
    let sql = format!("{prefix}SELECT v FROM {table} WHERE id = 2");
    let before = rep.calls(&needle);
    for _ in 0..times {
        assert_eq!(must(client, &sql).await, "20", "{sql}");
    }
    delta(&before, &rep.calls(&needle))
}

/// Setup SQL for tables `(id, v)` with rows 1..10 (`v = 10 * id`). pg_stat_statements tells
/// statements apart by shape, not by constants or column aliases, so each check reads a
/// table of its own.
pub(crate) fn tables(names: &[&str]) -> String {
    names
        .iter()
        .map(|t| {
            format!(
                "CREATE TABLE {t} (id int PRIMARY KEY, v int);
                 INSERT INTO {t} SELECT g, g * 10 FROM generate_series(1, 10) g;
"
            )
        })
        .collect()
}

pub(crate) fn on_primary(d: &[i64], n: i64, what: &str) {
    assert_eq!(d, [n, 0, 0], "{what}: statements per server (primary, replica 1, replica 2)");
}

pub(crate) fn on_replicas(d: &[i64], n: i64, what: &str) {
    assert_eq!(d[0], 0, "{what}: none on the primary; per server {d:?}");
    assert_eq!(d[1] + d[2], n, "{what}: all on the replicas; per server {d:?}");
}

/// An error with the server's (or pgvia's) SQLSTATE and message when there is one.
pub(crate) fn describe(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{} {}", db.code().code(), db.message()),
        None => e.to_string(),
    }
}

/// Expects SQLSTATE 25006 (read-only transaction): the statement reached a hot standby.
pub(crate) async fn refused_by_standby(client: &Client, sql: &str) {
    let err = value(client, sql).await.expect_err("a hot standby refuses this");
    assert_eq!(sqlstate(&err).as_deref(), Some("25006"), "{sql}: {err}");
}
