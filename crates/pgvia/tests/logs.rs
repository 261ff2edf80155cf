//! Logs of the real binary: JSON lines, levels per module, connection and disconnection
//! lines with address, user, database and reason, and the slow-query log with literals
//! removed.

#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::{connect, start_pg, ConfigBuilder, DB, PASSWORD, USER};
use serde_json::Value;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_logs_with_connections_and_slow_queries() {
    let pg = start_pg();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let config = ConfigBuilder::new(&pg)
        .general(&format!("listen_port = {port}"))
        .general("log_format = \"json\"")
        .general("log_level = \"info,pgvia::pool=debug\"")
        .general("slow_query_threshold = \"200ms\"");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pgvia.toml");
    std::fs::write(&path, config.toml()).unwrap();
    let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_pgvia"))
        .arg("--config")
        .arg(&path)
        .env_remove("RUST_LOG")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let conninfo = format!("host=127.0.0.1 port={port} user={USER} password={PASSWORD} dbname={DB}");
    let mut client = None;
    for _ in 0..100 {
        if let Ok(c) = connect(&conninfo).await {
            client = Some(c);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let client = client.expect("pgvia started");
    client.simple_query("SELECT pg_sleep(0.3), 'top-secret-literal', 12345").await.unwrap();
    client.simple_query("SELECT 'fast-literal'").await.unwrap();
    drop(client);
    tokio::time::sleep(Duration::from_millis(300)).await;

    let pid = child.id().unwrap().to_string();
    tokio::process::Command::new("kill").args(["-TERM", &pid]).status().await.unwrap();
    let out = tokio::time::timeout(Duration::from_secs(30), child.wait_with_output()).await.unwrap().unwrap();
    let log = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<Value> = log
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let find = |message: &str| {
        lines
            .iter()
            .find(|l| l["fields"]["message"] == message)
            .unwrap_or_else(|| panic!("no {message:?} line in:\n{log}"))
    };

    let connected = find("client connected");
    assert_eq!(connected["fields"]["user"], USER);
    assert_eq!(connected["fields"]["database"], DB);
    assert!(connected["fields"]["addr"].as_str().unwrap().starts_with("127.0.0.1:"));
    let gone = find("client disconnected");
    assert_eq!(gone["fields"]["reason"], "client closed the connection");
    assert!(gone["fields"]["duration"].is_string());

    let slow = find("slow query");
    assert_eq!(slow["target"], "pgvia::slow_query");
    assert_eq!(slow["level"], "WARN");
    let query = slow["fields"]["query"].as_str().unwrap();
    assert_eq!(query, "SELECT pg_sleep(?), ?, ?");
    assert!(slow["fields"]["duration_ms"].as_u64().unwrap() >= 200);
    assert!(!log.contains("top-secret-literal") && !log.contains("fast-literal"), "{log}");
    assert_eq!(lines.iter().filter(|l| l["fields"]["message"] == "slow query").count(), 1);

    // Levels per module: pgvia::pool at debug, everything else at info.
    assert!(lines
        .iter()
        .any(|l| l["level"] == "DEBUG" && l["target"].as_str().unwrap().starts_with("pgvia::pool")));
    assert!(lines
        .iter()
        .all(|l| l["level"] != "DEBUG" || l["target"].as_str().unwrap().starts_with("pgvia::pool")));
}
