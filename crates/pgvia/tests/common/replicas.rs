//! A primary with streaming replicas for the read/write-splitting tests, the config of a
//! database served by several servers, and where each statement ran, read from each server's
//! own `pg_stat_statements`.
//!
//! `pg_stat_statements` rather than `pg_stat_database`: it counts a statement when the
//! statement ends, in shared memory, while `pg_stat_database` gets a backend's counts only when
//! the backend flushes them (at most once a second, and up to 10 s late once it is idle). The
//! tests' own measurement queries run in database `postgres`, so counting only `app`'s
//! statements leaves them out; pgvia's health checks are left out by matching statement text.

use std::time::{Duration, Instant};

use harness::{Cluster, ClusterOptions, HarnessError};

use super::ops::{console, Table};
use super::{run, start_pg_with, text, tool, ConfigBuilder, TestProxy, DB, PASSWORD, USER};

/// A primary (role `app`, database `app`) and its hot standbys, all with `pg_stat_statements`.
pub struct Replicated {
    pub primary: Cluster,
    pub replicas: Vec<Cluster>,
}

fn options() -> ClusterOptions {
    ClusterOptions::default()
        .set("shared_preload_libraries", "pg_stat_statements")
        // BEGIN, COMMIT and SET are not what the tests count.
        .set("pg_stat_statements.track_utility", "off")
}

/// Starts a primary and `n` replicas, or returns `None` (the test is then skipped, saying
/// why) when this PostgreSQL build cannot make replicas.
pub fn start_replicated(n: usize) -> Option<Replicated> {
    let primary = start_pg_with(options());
    primary.psql("postgres", "CREATE EXTENSION pg_stat_statements").expect("create pg_stat_statements");
    let started: Vec<Result<Cluster, HarnessError>> = std::thread::scope(|s| {
        let handles: Vec<_> =
            (0..n).map(|_| s.spawn(|| Cluster::start_replica(&primary, options()))).collect();
        handles.into_iter().map(|h| h.join().expect("replica thread")).collect()
    });
    let mut replicas = Vec::new();
    for r in started {
        match r {
            Ok(r) => replicas.push(r),
            Err(HarnessError::Unsupported(why)) => {
                println!("SKIPPED: {why}");
                return None;
            }
            Err(e) => panic!("start replica: {e}"),
        }
    }
    Some(Replicated { primary, replicas })
}

impl Replicated {
    /// Runs `sql` on the primary's database `app` as role `app` (so `app` owns what it
    /// creates), then waits until every replica has replayed it.
    pub fn setup(&self, sql: &str) {
        self.primary.psql(DB, &format!("SET ROLE {USER};\n{sql}")).expect("setup SQL on the primary");
        self.wait_caught_up();
    }

    pub fn wait_caught_up(&self) {
        for r in &self.replicas {
            r.wait_caught_up(&self.primary).expect("replica catches up");
        }
    }

    /// `pgbench -i` (scale 1) on the primary as `app`, then waits for the replicas.
    pub async fn pgbench_init(&self) {
        let mut cmd = tool(&self.primary, "pgbench");
        cmd.args([
            "-i",
            "-q",
            "-s",
            "1",
            "-h",
            "127.0.0.1",
            "-p",
            &self.primary.port().to_string(),
            "-U",
            USER,
        ])
        .env("PGPASSWORD", PASSWORD)
        .arg(DB);
        let out = run(cmd, None).await;
        assert!(out.status.success(), "pgbench -i: {}", text(&out.stderr));
        tokio::task::block_in_place(|| self.wait_caught_up());
    }

    /// Every server, primary first.
    pub fn all(&self) -> Vec<&Cluster> {
        std::iter::once(&self.primary).chain(&self.replicas).collect()
    }

    /// [`calls`] on every server, primary first.
    pub fn calls(&self, needle: &str) -> Vec<i64> {
        tokio::task::block_in_place(|| self.all().into_iter().map(|pg| calls(pg, needle)).collect())
    }
}

/// How many times, on this server, statements of database `app` whose (normalised) text
/// contains `needle` completed. pg_stat_statements keys statements by shape and keeps the
/// text of the first one seen: statements differing only in constants or column aliases
/// share one entry, so a needle must name something in the shape (a table, a function).
pub fn calls(pg: &Cluster, needle: &str) -> i64 {
    try_calls(pg, needle).unwrap_or_else(|e| panic!("pg_stat_statements on port {}: {e}", pg.port()))
}

pub fn try_calls(pg: &Cluster, needle: &str) -> Result<i64, HarnessError> {
    let sql = format!(
        "SELECT coalesce(sum(calls), 0) FROM pg_stat_statements \
         WHERE dbid = (SELECT oid FROM pg_database WHERE datname = '{DB}') AND strpos(query, '{}') > 0",
        needle.replace('\'', "''")
    );
    let out = pg.psql("postgres", &sql)?;
    out.parse().map_err(|_| HarnessError::InvalidOption(format!("pg_stat_statements said {out:?}")))
}

/// Element-wise `after - before`.
pub fn delta(before: &[i64], after: &[i64]) -> Vec<i64> {
    before.iter().zip(after).map(|(b, a)| a - b).collect()
}

impl ConfigBuilder {
    /// Database `app` served by several servers (`[[databases.servers]]`, each `(cluster,
    /// role)`) instead of one host, with extra `key = value` lines (`read_write_split`, ...).
    pub fn servers(mut self, servers: &[(&Cluster, &str)], settings: &[&str]) -> Self {
        let mut body = format!("name = \"{DB}\"\ndbname = \"{DB}\"");
        for line in settings {
            body.push('\n');
            body.push_str(line);
        }
        for (pg, role) in servers {
            body.push_str(&format!(
                "\n\n[[databases.servers]]\nhost = \"{}\"\nport = {}\nrole = \"{role}\"",
                pg.host(),
                pg.port()
            ));
        }
        self.databases[0] = body;
        self
    }
}

/// `SHOW HOSTS` on the admin console (the config must include `ops::admin_user()`).
pub async fn show_hosts(pg: &Cluster, proxy: &TestProxy) -> Table {
    console(pg, proxy, "SHOW HOSTS").await
}

/// A `SHOW HOSTS` cell of the server on `port`.
pub fn host_cell(hosts: &Table, port: u16, column: &str) -> String {
    hosts.row("port", &port.to_string())[hosts.col(column)].clone()
}

/// Polls `SHOW HOSTS` until `ready` holds; panics with the last table after `timeout`.
pub async fn wait_for_hosts(
    pg: &Cluster,
    proxy: &TestProxy,
    what: &str,
    timeout: Duration,
    ready: impl Fn(&Table) -> bool,
) -> Table {
    let start = Instant::now();
    loop {
        let hosts = show_hosts(pg, proxy).await;
        if ready(&hosts) {
            return hosts;
        }
        if start.elapsed() >= timeout {
            panic!("SHOW HOSTS: {what} not seen within {timeout:?}; last:\n{hosts:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
