//! Helpers for the operations tests: the admin console through psql, pgbench runs and their
//! numbers.

use std::process::Output;

use harness::Cluster;

use super::{assert_success, run, text, tool, TestProxy, DB, PASSWORD, USER};

pub const ADMIN: &str = "admin";
pub const ADMIN_PASSWORD: &str = "admin";

/// The `[[users]]` body of an admin user (`admin`/`admin`).
pub fn admin_user() -> String {
    format!("name = \"{ADMIN}\"\npassword = \"{ADMIN_PASSWORD}\"\nadmin = true")
}

/// A result as psql printed it: the header and the rows, cells split on `|`.
#[derive(Debug)]
pub struct Table {
    pub header: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

impl Table {
    pub fn col(&self, name: &str) -> usize {
        self.header
            .iter()
            .position(|h| h == name)
            .unwrap_or_else(|| panic!("no column {name} in {:?}", self.header))
    }

    /// The row whose `key` column is `value`.
    pub fn row(&self, key: &str, value: &str) -> &[String] {
        let i = self.col(key);
        self.rows
            .iter()
            .find(|r| r[i] == value)
            .unwrap_or_else(|| panic!("no row with {key} = {value} in {self:?}"))
    }

    pub fn int(&self, row: &[String], name: &str) -> i64 {
        let v = &row[self.col(name)];
        v.parse().unwrap_or_else(|_| panic!("{name} = {v:?} is not a number"))
    }
}

/// Runs `command` on the admin console (database `db`) as `user`; returns psql's output.
pub async fn console_as(
    pg: &Cluster,
    proxy: &TestProxy,
    user: &str,
    password: &str,
    db: &str,
    command: &str,
) -> Output {
    let mut cmd = tool(pg, "psql");
    cmd.arg("-X")
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &proxy.port().to_string(),
            "-U",
            user,
            "-A",
            "-F",
            "|",
            "--pset=footer=off",
        ])
        .args(["-v", "ON_ERROR_STOP=1", "-c", command, db])
        .env("PGPASSWORD", password);
    run(cmd, None).await
}

/// `psql -U admin pgvia -c command`, parsed; panics if psql fails.
pub async fn console(pg: &Cluster, proxy: &TestProxy, command: &str) -> Table {
    let out = console_as(pg, proxy, ADMIN, ADMIN_PASSWORD, "pgvia", command).await;
    assert_success(command, &out);
    parse_table(&text(&out.stdout))
}

pub fn parse_table(out: &str) -> Table {
    let mut lines = out.lines().filter(|l| !l.is_empty());
    let header = lines.next().map(|h| h.split('|').map(str::to_owned).collect()).unwrap_or_default();
    let rows = lines.map(|l| l.split('|').map(str::to_owned).collect()).collect();
    Table { header, rows }
}

/// Starts pgbench against pgvia (database `app`, user `app`) with extra arguments; the child
/// runs until it finishes. Output is both streams.
pub async fn pgbench(pg: &Cluster, proxy: &TestProxy, args: &[&str]) -> String {
    let mut cmd = tool(pg, "pgbench");
    cmd.args(["-h", "127.0.0.1", "-p", &proxy.port().to_string(), "-U", USER])
        .env("PGPASSWORD", PASSWORD)
        .args(args)
        .arg(DB);
    let out = run(cmd, None).await;
    assert_success(&format!("pgbench {args:?}"), &out);
    format!("{}\n{}", text(&out.stdout), text(&out.stderr))
}

/// The number after `label` in pgbench's output (`number of failed transactions: 0 (0.000%)`).
pub fn pgbench_number(output: &str, label: &str) -> u64 {
    let rest = output
        .lines()
        .find_map(|l| l.trim().strip_prefix(label))
        .unwrap_or_else(|| panic!("no {label:?} in pgbench output:\n{output}"));
    let digits: String = rest.trim().chars().take_while(char::is_ascii_digit).collect();
    digits.parse().unwrap_or_else(|_| panic!("no number after {label:?} in:\n{output}"))
}

/// Asserts pgbench processed transactions and none failed or aborted.
pub fn assert_pgbench_clean(output: &str) -> u64 {
    let processed = pgbench_number(output, "number of transactions actually processed:");
    assert!(processed > 0, "no transactions processed:\n{output}");
    assert_eq!(pgbench_number(output, "number of failed transactions:"), 0, "failed transactions:\n{output}");
    assert!(!output.contains("aborted"), "pgbench reports aborted clients:\n{output}");
    processed
}
