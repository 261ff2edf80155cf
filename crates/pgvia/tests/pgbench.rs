//! pgbench through pgvia: 20 clients sharing a session-mode pool of 5 servers for 10 s, and 50
//! clients sharing a transaction-mode pool of 5 for 15 s, with
//! the simple and the extended protocol, and 40 clients with named prepared statements on a
//! transaction-mode pool of 3, finish with transactions done and none failed.

// Helpers outside #[test] functions unwrap too: a failed step is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::ops::pgbench;
use common::{start_pg, ConfigBuilder, TestProxy, DB};

/// The value after `label` on the line that starts with it, e.g. `number of failed transactions: 0 (0.000%)`.
fn field<'a>(output: &'a str, label: &str) -> Option<&'a str> {
    output.lines().find_map(|l| l.trim().strip_prefix(label)).map(str::trim)
}

fn leading_number(s: &str) -> u64 {
    let digits: String = s.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().unwrap_or_else(|_| panic!("no number in {s:?}"))
}

async fn bench(mode: &str, protocol: &str, clients: u32, seconds: u32) {
    bench_with_pool(mode, protocol, clients, seconds, 5).await;
}

async fn bench_with_pool(mode: &str, protocol: &str, clients: u32, seconds: u32, pool_size: usize) {
    let pg = start_pg();
    let config = ConfigBuilder::new(&pg)
        .pool(&format!("pool_mode = \"{mode}\""))
        .pool(&format!("pool_size = {pool_size}"))
        .pool("checkout_timeout = \"60s\"");
    let proxy = TestProxy::start(&config).await;

    // Initialisation (tables, a COPY of the accounts, indexes) also goes through pgvia.
    pgbench(&pg, &proxy, &["-i", "-s", "1", "-q"]).await;
    let accounts = pg.psql(DB, "select count(*) from pgbench_accounts").expect("count accounts");
    assert_eq!(accounts, "100000");

    // Watch the pool while pgbench runs: at most 5 servers in use, and clients queueing.
    let pool = proxy.app.pools.all().pop().expect("the pool pgbench -i used");
    let watching = Arc::new(AtomicBool::new(true));
    let watcher = {
        let (pool, watching) = (pool.clone(), watching.clone());
        tokio::spawn(async move {
            let (mut most_active, mut most_waiting) = (0, 0);
            while watching.load(Ordering::Relaxed) {
                most_active = most_active.max(pool.stats.servers_active.load(Ordering::Relaxed));
                most_waiting = most_waiting.max(pool.stats.clients_waiting.load(Ordering::Relaxed));
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            (most_active, most_waiting)
        })
    };
    let protocol_arg = format!("--protocol={protocol}");
    let (clients, seconds) = (clients.to_string(), seconds.to_string());
    let out = pgbench(&pg, &proxy, &["-c", &clients, "-j", "2", "-T", &seconds, &protocol_arg]).await;
    watching.store(false, Ordering::Relaxed);
    let (most_active, most_waiting) = watcher.await.unwrap();
    let processed = field(&out, "number of transactions actually processed:")
        .unwrap_or_else(|| panic!("no transaction count in pgbench output:\n{out}"));
    let processed = leading_number(processed);
    assert!(processed > 0, "no transactions processed:\n{out}");
    let failed = field(&out, "number of failed transactions:")
        .unwrap_or_else(|| panic!("no failed-transaction count in pgbench output:\n{out}"));
    assert_eq!(leading_number(failed), 0, "failed transactions:\n{out}");
    assert!(!out.contains("aborted"), "pgbench reports aborted clients:\n{out}");
    // pgbench's count agrees with what reached the database (TPC-B logs one row per transaction).
    let history = pg.psql(DB, "select count(*) from pgbench_history").expect("count history");
    assert_eq!(history, processed.to_string(), "pgbench_history rows vs transactions\n{out}");

    // Never more than the pool's servers for the clients, who had to queue for them.
    assert!(most_active <= pool_size, "{most_active} servers in use at once");
    assert_eq!(most_active, pool_size, "the pool was not used to its size");
    assert!(most_waiting >= 1, "no client ever waited for a server");
    assert!(pool.server_count() <= pool_size, "{} servers open", pool.server_count());
    assert_eq!(proxy.app.pools.all().len(), 1);

    proxy.assert_no_leaks().await;
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pgbench_simple_protocol_20_clients_pool_of_5() {
    tokio::time::timeout(Duration::from_secs(100), bench("session", "simple", 20, 10))
        .await
        .expect("pgbench run within 100 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pgbench_extended_protocol_20_clients_pool_of_5() {
    tokio::time::timeout(Duration::from_secs(100), bench("session", "extended", 20, 10))
        .await
        .expect("pgbench run within 100 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pgbench_transaction_mode_simple_50_clients_pool_of_5() {
    tokio::time::timeout(Duration::from_secs(120), bench("transaction", "simple", 50, 15))
        .await
        .expect("pgbench run within 120 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pgbench_transaction_mode_extended_50_clients_pool_of_5() {
    tokio::time::timeout(Duration::from_secs(120), bench("transaction", "extended", 50, 15))
        .await
        .expect("pgbench run within 120 s");
}

/// pgbench's named statements in transaction mode: each client prepares once, and its
/// transactions run on whichever of three servers is free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pgbench_transaction_mode_prepared_40_clients_pool_of_3() {
    tokio::time::timeout(Duration::from_secs(120), bench_with_pool("transaction", "prepared", 40, 15, 3))
        .await
        .expect("pgbench run within 120 s");
}
