//! The admin console through real psql: PgBouncer's SHOW layouts with numbers that agree
//! with what the test did, commands, refusals, and PAUSE/RESUME under a running pgbench.

#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::ops::{admin_user, assert_pgbench_clean, console, console_as, pgbench, ADMIN, ADMIN_PASSWORD};
use common::{app_backends, start_pg, text, ConfigBuilder, TestProxy, DB, PASSWORD, USER};

/// PgBouncer 1.18's `SHOW POOLS` columns, in order (checked against a running PgBouncer 1.18).
const PGBOUNCER_POOLS: [&str; 16] = [
    "database",
    "user",
    "cl_active",
    "cl_waiting",
    "cl_active_cancel_req",
    "cl_waiting_cancel_req",
    "sv_active",
    "sv_active_cancel",
    "sv_being_canceled",
    "sv_idle",
    "sv_used",
    "sv_tested",
    "sv_login",
    "maxwait",
    "maxwait_us",
    "pool_mode",
];

const PGBOUNCER_CLIENTS: [&str; 18] = [
    "type",
    "user",
    "database",
    "state",
    "addr",
    "port",
    "local_addr",
    "local_port",
    "connect_time",
    "request_time",
    "wait",
    "wait_us",
    "close_needed",
    "ptr",
    "link",
    "remote_pid",
    "tls",
    "application_name",
];

fn starts_with(header: &[String], expected: &[&str]) {
    let got: Vec<&str> = header.iter().map(String::as_str).take(expected.len()).collect();
    assert_eq!(got, expected, "full header: {header:?}");
}

fn config(pg: &harness::Cluster, mode: &str, size: u32) -> ConfigBuilder {
    ConfigBuilder::new(pg)
        .pool(&format!("pool_mode = \"{mode}\""))
        .pool(&format!("pool_size = {size}"))
        .pool("checkout_timeout = \"60s\"")
        .user(&admin_user())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn show_pools_counts_twenty_clients() {
    let pg = start_pg();
    let proxy = TestProxy::start(&config(&pg, "transaction", 5)).await;

    // 20 clients: 5 hold a server inside a transaction, 3 wait for one, 12 are idle.
    let mut clients = Vec::new();
    for _ in 0..20 {
        clients.push(proxy.connect(USER, PASSWORD, DB).await);
    }
    for c in &clients[..5] {
        c.batch_execute("BEGIN; SELECT 1").await.unwrap();
    }
    let mut waiting = Vec::new();
    for c in clients.drain(5..8) {
        waiting.push(tokio::spawn(async move {
            c.simple_query("SELECT 1").await.unwrap();
            c
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;

    let pools = console(&pg, &proxy, "SHOW POOLS").await;
    starts_with(&pools.header, &PGBOUNCER_POOLS);
    let row = pools.row("database", DB);
    assert_eq!(row[pools.col("user")], USER);
    let (active, waiting_n) = (pools.int(row, "cl_active"), pools.int(row, "cl_waiting"));
    assert_eq!(active + waiting_n, 20, "{pools:?}");
    assert_eq!(waiting_n, 3, "{pools:?}");
    assert_eq!(pools.int(row, "cl_linked"), 5, "{pools:?}");
    assert_eq!(pools.int(row, "cl_idle"), 12, "{pools:?}");
    assert_eq!(pools.int(row, "sv_active"), 5, "{pools:?}");
    assert_eq!(row[pools.col("pool_mode")], "transaction");
    assert!(pools.int(row, "maxwait_us") > 0 || pools.int(row, "maxwait") > 0, "{pools:?}");

    let clients_table = console(&pg, &proxy, "SHOW CLIENTS").await;
    starts_with(&clients_table.header, &PGBOUNCER_CLIENTS);
    let app_clients: Vec<_> = clients_table.rows.iter().filter(|r| r[1] == USER).collect();
    assert_eq!(app_clients.len(), 20);
    let state = clients_table.col("state");
    assert_eq!(app_clients.iter().filter(|r| r[state] == "waiting").count(), 3);

    let servers = console(&pg, &proxy, "SHOW SERVERS").await;
    starts_with(&servers.header, &PGBOUNCER_CLIENTS);
    let state = servers.col("state");
    assert_eq!(servers.rows.iter().filter(|r| r[state] == "active").count(), 5, "{servers:?}");

    // Ending the transactions lets the waiters through.
    for c in &clients[..5] {
        c.batch_execute("COMMIT").await.unwrap();
    }
    for w in waiting {
        tokio::time::timeout(Duration::from_secs(10), w).await.unwrap().unwrap();
    }
    let pools = console(&pg, &proxy, "SHOW POOLS").await;
    let row = pools.row("database", DB);
    assert_eq!(pools.int(row, "cl_waiting"), 0);
    assert_eq!(pools.int(row, "cl_linked"), 0);
    assert_eq!(pools.int(row, "sv_active"), 0);
    assert_eq!(pools.int(row, "sv_idle"), 5);
    drop(clients);
    proxy.assert_no_leaks().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_show_answers_with_pgbouncer_columns() {
    let pg = start_pg();
    let proxy = TestProxy::start(&config(&pg, "session", 5)).await;
    let client = proxy.connect(USER, PASSWORD, DB).await;
    for _ in 0..10 {
        client.simple_query("SELECT 1").await.unwrap();
    }
    drop(client);
    proxy.assert_no_leaks().await;

    let expect: [(&str, &[&str]); 9] = [
        (
            "STATS",
            &[
                "database",
                "total_xact_count",
                "total_query_count",
                "total_received",
                "total_sent",
                "total_xact_time",
                "total_query_time",
                "total_wait_time",
                "avg_xact_count",
                "avg_query_count",
                "avg_recv",
                "avg_sent",
                "avg_xact_time",
                "avg_query_time",
                "avg_wait_time",
            ],
        ),
        (
            "STATS_TOTALS",
            &[
                "database",
                "xact_count",
                "query_count",
                "bytes_received",
                "bytes_sent",
                "xact_time",
                "query_time",
                "wait_time",
            ],
        ),
        (
            "STATS_AVERAGES",
            &[
                "database",
                "xact_count",
                "query_count",
                "bytes_received",
                "bytes_sent",
                "xact_time",
                "query_time",
                "wait_time",
            ],
        ),
        (
            "DATABASES",
            &[
                "name",
                "host",
                "port",
                "database",
                "force_user",
                "pool_size",
                "min_pool_size",
                "reserve_pool",
                "pool_mode",
                "max_connections",
                "current_connections",
                "paused",
                "disabled",
            ],
        ),
        ("USERS", &["name", "pool_mode"]),
        ("CONFIG", &["key", "value", "default", "changeable"]),
        ("LISTS", &["list", "items"]),
        ("VERSION", &["version"]),
        ("PINS", &["database", "user", "reason", "pins"]),
    ];
    for (what, columns) in expect {
        let table = console(&pg, &proxy, &format!("SHOW {what}")).await;
        starts_with(&table.header, columns);
    }

    // The numbers: 10 queries (and so 10 transactions) by the one client, bytes both ways.
    let totals = console(&pg, &proxy, "SHOW STATS_TOTALS").await;
    let row = totals.row("database", DB);
    assert!(totals.int(row, "query_count") >= 10, "{totals:?}");
    assert!(totals.int(row, "xact_count") >= 10, "{totals:?}");
    assert!(totals.int(row, "bytes_received") > 0 && totals.int(row, "bytes_sent") > 0, "{totals:?}");

    let lists = console(&pg, &proxy, "show lists").await;
    assert_eq!(lists.int(lists.row("list", "pools"), "items"), 1);
    let users = console(&pg, &proxy, "SHOW USERS").await;
    assert_eq!(users.int(users.row("name", ADMIN), "admin"), 1);
    let version = console(&pg, &proxy, "SHOW VERSION").await;
    assert!(version.rows[0][0].starts_with("pgvia "), "{version:?}");
    let cache = console(&pg, &proxy, "SHOW ANALYSIS_CACHE").await;
    assert_eq!(cache.rows.len(), 1);
    let prepared = console(&pg, &proxy, "SHOW PREPARED").await;
    assert!(prepared.rows.is_empty());

    // The other virtual database name works too, for PgBouncer tooling.
    let out = console_as(&pg, &proxy, ADMIN, ADMIN_PASSWORD, "pgbouncer", "SHOW VERSION").await;
    assert!(out.status.success(), "{}", text(&out.stderr));
}

/// `SHOW CONFIG` lists the keys of every section with their values as the file set them: the
/// merge's `[limits]` keys, `[general]` keys once missing, `[analysis]`, `[gateway]` and
/// `[auth_query]` (empty when the section is absent); secrets never appear. (The unit test
/// `admin::show_config::tests` checks every struct field has its row.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn show_config_lists_every_section_with_its_values() {
    let pg = start_pg();
    let spill_dir = std::env::temp_dir().display().to_string();
    let builder = config(&pg, "transaction", 5)
        .limits("merge_memory_budget = 1048576")
        .limits("merge_spill = true")
        .limits(&format!("merge_spill_dir = \"{spill_dir}\""))
        .general("instance_id = \"shown-instance\"")
        .general("server_scram_max_iterations = 5000")
        .general("metrics_auth_token = \"never-shown-token\"")
        .gateway("max_response_rows = 77");
    let proxy = TestProxy::start(&builder).await;
    let table = console(&pg, &proxy, "SHOW CONFIG").await;
    let expect = [
        ("limits.merge_memory_budget", "1048576", "67108864", "yes"),
        ("limits.merge_spill", "true", "true", "yes"),
        ("limits.merge_spill_dir", spill_dir.as_str(), "", "yes"),
        ("instance_id", "shown-instance", "", "no"),
        ("server_scram_max_iterations", "5000", "100000", "yes"),
        ("unix_socket_dir", "", "", "no"),
        ("client_tls_ca_file", "", "", "no"),
        ("analysis.max_nesting", "1000", "1000", "no"),
        ("analysis.cache_admission", "second_sight", "second_sight", "no"),
        ("gateway.max_response_rows", "77", "0", "yes"),
        ("gateway.tokens", "0", "0", "yes"),
        ("auth_query.max_pools", "", "100", "yes"),
    ];
    for (key, value, default, changeable) in expect {
        let row = table.row("key", key);
        assert_eq!(
            (row[table.col("value")].as_str(), row[table.col("default")].as_str()),
            (value, default),
            "{key}"
        );
        assert_eq!(row[table.col("changeable")], changeable, "{key}");
    }
    for prefix in ["pool.", "limits.", "analysis.", "gateway.", "auth_query."] {
        assert!(table.rows.iter().any(|r| r[0].starts_with(prefix)), "no {prefix} key");
    }
    assert!(table.rows.iter().all(|r| !r.iter().any(|c| c.contains("never-shown"))), "a secret shown");
    assert!(!table.rows.iter().any(|r| r[0] == "metrics_auth_token"));
    let keys: Vec<&str> = table.rows.iter().map(|r| r[0].as_str()).collect();
    let mut sorted = keys.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(keys, sorted, "keys sorted and each once");
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_and_unknown_commands() {
    let pg = start_pg();
    let proxy = TestProxy::start(&config(&pg, "session", 5)).await;

    let out = console_as(&pg, &proxy, USER, PASSWORD, "pgvia", "SHOW POOLS").await;
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("may not use the admin console"), "{}", text(&out.stderr));

    for bad in ["SHOW NOTHING", "SELECT 1", "PAUSE nosuchdb", "KILL_CLIENT 999999"] {
        let out = console_as(&pg, &proxy, ADMIN, ADMIN_PASSWORD, "pgvia", bad).await;
        assert!(!out.status.success(), "{bad} succeeded");
        assert!(text(&out.stderr).contains("ERROR:"), "{bad}: {}", text(&out.stderr));
    }
    let out = console_as(&pg, &proxy, ADMIN, ADMIN_PASSWORD, "pgvia", "SELECT 1").await;
    assert!(text(&out.stderr).contains("unknown admin console command"), "{}", text(&out.stderr));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_client_and_reconnect() {
    let pg = start_pg();
    let proxy = TestProxy::start(&config(&pg, "transaction", 5)).await;
    let victim = proxy.connect(USER, PASSWORD, DB).await;
    let bystander = proxy.connect(USER, PASSWORD, DB).await;
    let second_victim = proxy.connect(USER, PASSWORD, DB).await;
    victim.simple_query("SELECT 1").await.unwrap();
    let clients = console(&pg, &proxy, "SHOW CLIENTS").await;
    let app_rows: Vec<&Vec<String>> = clients.rows.iter().filter(|r| r[1] == USER).collect();
    assert_eq!(app_rows.len(), 3);
    // By the `id` column, then by the `ptr` column (`c` + the id in hex).
    console(&pg, &proxy, &format!("KILL_CLIENT {}", app_rows[0][clients.col("id")])).await;
    console(&pg, &proxy, &format!("KILL_CLIENT {}", app_rows[2][clients.col("ptr")])).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(victim.simple_query("SELECT 1").await.is_err(), "killed client still served");
    assert!(second_victim.simple_query("SELECT 1").await.is_err(), "client killed by ptr still served");
    bystander.simple_query("SELECT 1").await.unwrap();

    // RECONNECT: the idle servers are replaced; clients carry on.
    let before: Vec<String> = app_backends(&pg);
    console(&pg, &proxy, "RECONNECT").await;
    console(&pg, &proxy, "WAIT_CLOSE").await;
    bystander.simple_query("SELECT 1").await.unwrap();
    let after = app_backends(&pg);
    assert!(before.iter().all(|pid| !after.contains(pid)), "before {before:?} after {after:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_and_resume_under_pgbench() {
    let pg = start_pg();
    let proxy = TestProxy::start(&config(&pg, "transaction", 4)).await;
    pgbench(&pg, &proxy, &["-i", "-s", "1", "-q"]).await;

    let bench = pgbench(&pg, &proxy, &["-c", "8", "-j", "2", "-T", "6"]);
    let admin = async {
        tokio::time::sleep(Duration::from_secs(2)).await;
        console(&pg, &proxy, "PAUSE").await;
        // Paused: no server is in use and clients queue.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let pools = console(&pg, &proxy, "SHOW POOLS").await;
        let row = pools.row("database", DB).to_vec();
        assert_eq!(pools.int(&row, "sv_active"), 0, "{pools:?}");
        assert_eq!(pools.int(&row, "paused"), 1, "{pools:?}");
        assert!(pools.int(&row, "cl_waiting") > 0, "{pools:?}");
        let queries_paused = query_count(&pg, &proxy).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(query_count(&pg, &proxy).await, queries_paused, "traffic moved while paused");
        console(&pg, &proxy, "RESUME").await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(query_count(&pg, &proxy).await > queries_paused, "traffic did not resume");
    };
    let (out, ()) = tokio::join!(bench, admin);
    assert_pgbench_clean(&out);
    proxy.assert_no_leaks().await;
}

async fn query_count(pg: &harness::Cluster, proxy: &TestProxy) -> i64 {
    let totals = console(pg, proxy, "SHOW STATS_TOTALS").await;
    totals.int(totals.row("database", DB), "query_count")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn show_prepared_lists_the_registry() {
    let pg = start_pg();
    let proxy = TestProxy::start(&config(&pg, "transaction", 2)).await;
    let client = proxy.connect(USER, PASSWORD, DB).await;
    // tokio-postgres prepares a named statement for every parameterised query.
    for i in 0..3i32 {
        let row = client.query_one("SELECT $1::int4 + 40 AS answer", &[&i]).await.unwrap();
        assert_eq!(row.get::<_, i32>(0), i + 40);
    }
    let prepared = console(&pg, &proxy, "SHOW PREPARED").await;
    assert_eq!(prepared.header, ["name", "query", "parameters", "client_refs", "server_refs"]);
    let row = prepared
        .rows
        .iter()
        .find(|r| r[1] == "SELECT $1::int4 + ? AS answer")
        .unwrap_or_else(|| panic!("statement not listed: {prepared:?}"));
    // tokio-postgres leaves the parameter type to the server: none given at Parse.
    assert_eq!(row[2], "0");
}
