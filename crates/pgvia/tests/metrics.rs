//! `/metrics` parsed by a real Prometheus client library (Python `prometheus_client`, both
//! its Prometheus text and its OpenMetrics parser), with counters that move with a pgbench
//! run; `/health` ready and not ready.

#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;

use common::ops::{assert_pgbench_clean, pgbench};
use common::{run, start_pg, text, ConfigBuilder, TestProxy, DB, USER};
use serde_json::Value;

/// Runs tests/support/scrape.py; panics with its output if it fails.
async fn scrape(what: &str, url: &str) -> Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/scrape.py");
    let mut cmd = tokio::process::Command::new("python3");
    cmd.arg(script).arg(what).arg(url);
    let out = run(cmd, None).await;
    assert!(
        out.status.success(),
        "scrape.py {what} failed (is prometheus_client installed? scripts/lib/setup.sh installs it):\n{}\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The value of the sample `name` whose labels include all of `labels`.
fn sample(metrics: &Value, name: &str, labels: &[(&str, &str)]) -> f64 {
    metrics["samples"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s[0] == name && labels.iter().all(|(k, v)| s[1][k] == *v))
        .unwrap_or_else(|| panic!("no sample {name} {labels:?}"))[2]
        .as_f64()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_parse_and_move_with_pgbench() {
    let pg = start_pg();
    let config = ConfigBuilder::new(&pg)
        .general("metrics_listen = \"127.0.0.1:0\"")
        .pool("pool_mode = \"transaction\"")
        .pool("pool_size = 4")
        .pool("checkout_timeout = \"60s\"");
    let proxy = TestProxy::start(&config).await;
    let url = format!("http://{}/metrics", proxy.metrics.expect("metrics listener"));
    pgbench(&pg, &proxy, &["-i", "-s", "1", "-q"]).await;

    let before = scrape("metrics", &url).await;
    assert!(before["content_type"].as_str().unwrap().starts_with("application/openmetrics-text"));
    let pool = [("database", DB), ("user", USER)];
    let q0 = sample(&before, "pgvia_queries_total", &pool);
    let x0 = sample(&before, "pgvia_transactions_total", &pool);
    let r0 = sample(&before, "pgvia_received_bytes_total", &pool);
    let s0 = sample(&before, "pgvia_sent_bytes_total", &pool);
    let w0 = sample(&before, "pgvia_wait_seconds_count", &pool);
    let (shapes0, parses0) = (
        sample(&before, "pgvia_analysis_shape_hits_total", &[]),
        sample(&before, "pgvia_analysis_parses_total", &[]),
    );

    let out = pgbench(&pg, &proxy, &["-c", "8", "-j", "2", "-T", "3"]).await;
    let processed = assert_pgbench_clean(&out) as f64;
    let after = scrape("metrics", &url).await;
    // TPC-B sends 7 statements per transaction (BEGIN ... END), each its own query. In
    // transaction mode pgvia answers the BEGIN itself and passes it to the server later with
    // the next statement, swallowing the server's reply: 6 answers per transaction come
    // from a server.
    let queries = sample(&after, "pgvia_queries_total", &pool) - q0;
    assert!(queries >= 6.0 * processed, "queries {queries} for {processed} transactions");
    assert!(sample(&after, "pgvia_transactions_total", &pool) - x0 >= processed);
    assert!(sample(&after, "pgvia_received_bytes_total", &pool) > r0);
    assert!(sample(&after, "pgvia_sent_bytes_total", &pool) > s0);
    assert!(sample(&after, "pgvia_wait_seconds_count", &pool) - w0 >= processed);
    assert_eq!(sample(&after, "pgvia_pool_size", &pool), 4.0);
    // pgbench has left: nobody is connected, servers are idle.
    assert_eq!(sample(&after, "pgvia_clients", &[("database", DB), ("state", "active")]), 0.0);
    assert!(sample(&after, "pgvia_servers", &[("database", DB), ("state", "idle")]) >= 1.0);
    sample(&after, "pgvia_server_errors_total", &[("database", DB), ("class", "40")]);
    sample(&after, "pgvia_pins_total", &[("database", DB), ("reason", "LISTEN")]);
    assert!(sample(&after, "pgvia_analysis_cache_hits_total", &[]) > 0.0);
    // pgbench inlines its values: 5 statements a transaction differ only in constants, and
    // after the first sightings each is served by its shape's analysis, not parsed.
    let shapes = sample(&after, "pgvia_analysis_shape_hits_total", &[]) - shapes0;
    let parses = sample(&after, "pgvia_analysis_parses_total", &[]) - parses0;
    assert!(shapes >= 5.0 * processed - 20.0, "{shapes} shape hits for {processed} transactions");
    assert!(parses < 50.0, "{parses} parses for {processed} transactions");
    sample(&after, "pgvia_prepared_registry_hits_total", &[]);

    let health = scrape("health", &format!("http://{}/health", proxy.metrics.unwrap())).await;
    assert_eq!(health["status"], 200, "{health}");
    assert!(health["body"].as_str().unwrap().starts_with("ready"), "{health}");
    proxy.assert_no_leaks().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_reports_an_unreachable_database() {
    let pg = start_pg();
    // Port 1 on localhost: nothing listens there.
    let config = ConfigBuilder::new(&pg)
        .general("metrics_listen = \"127.0.0.1:0\"")
        .database("name = \"gone\"\nhost = \"127.0.0.1\"\nport = 1");
    let proxy = TestProxy::start(&config).await;
    let health = scrape("health", &format!("http://{}/health", proxy.metrics.unwrap())).await;
    assert_eq!(health["status"], 503, "{health}");
    let body = health["body"].as_str().unwrap();
    assert!(body.contains("gone: unreachable") && body.contains("app: ok"), "{body}");
}
