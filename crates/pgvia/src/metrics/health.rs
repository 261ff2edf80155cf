//! `/health`: ready when pgvia is accepting clients and every database has a reachable
//! server.
//!
//! A database counts as reachable when one of its pools has a server open, or else when a
//! TCP connection to its server succeeds within a second (pgvia has no credentials of its
//! own to log in with, and a health check must not open pooled connections).

use std::time::Duration;

use crate::app::{App, Phase};

const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// (healthy, one line per database explaining why).
pub async fn check(app: &App) -> (bool, String) {
    if app.phase() != Phase::Running {
        return (false, "shutting down\n".to_owned());
    }
    let pools = app.pools.all();
    let databases: Vec<(String, String, u16)> = app
        .config()
        .databases
        .iter()
        .map(|d| (d.name.clone(), d.first_server().0.to_owned(), d.first_server().1))
        .collect();
    let mut ok = true;
    let mut text = String::new();
    for (name, host, port) in databases {
        let open = pools.iter().any(|p| p.key.database == name && p.server_count() > 0);
        let reachable =
            open || matches!(tokio::time::timeout(PROBE_TIMEOUT, probe(&host, port)).await, Ok(Ok(())));
        ok &= reachable;
        let how = match (open, reachable) {
            (true, _) => "ok (servers open)",
            (false, true) => "ok (server reachable)",
            (false, false) => "unreachable",
        };
        text.push_str(&format!("{name}: {how}\n"));
    }
    text.insert_str(0, if ok { "ready\n" } else { "not ready\n" });
    (ok, text)
}

/// Whether a server accepts connections: TCP, or its Unix socket when `host` is a directory.
async fn probe(host: &str, port: u16) -> std::io::Result<()> {
    match crate::server::transport::socket_path(host, port) {
        Some(path) => tokio::net::UnixStream::connect(path).await.map(drop),
        None => tokio::net::TcpStream::connect((host, port)).await.map(drop),
    }
}
