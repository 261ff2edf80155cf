//! A real Toxiproxy for the fault tests: `toxiproxy-server` started on a free loopback port
//! and driven through its HTTP API (plain HTTP/1.1 over a TcpStream, one request per
//! connection), so faults sit on real TCP connections between real processes.
//!
//! `scripts/lib/setup.sh` installs the server with `go install` into
//! `~/.cache/pgvia/bin/toxiproxy-server`; `PGVIA_TOXIPROXY_SERVER` names another binary. When
//! none is found, [`Toxiproxy::start`] returns `None` and the tests skip with a message,
//! unless `PGVIA_REQUIRE_TOXIPROXY=1` (set by scripts/test), which turns the skip into a failure.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

pub const BINARY_ENV: &str = "PGVIA_TOXIPROXY_SERVER";
pub const REQUIRE_ENV: &str = "PGVIA_REQUIRE_TOXIPROXY";

/// Which way a toxic acts: on bytes towards the upstream or back from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Upstream,
    Downstream,
}

impl Stream {
    fn as_str(self) -> &'static str {
        match self {
            Stream::Upstream => "upstream",
            Stream::Downstream => "downstream",
        }
    }
}

pub struct Toxiproxy {
    child: Child,
    api: u16,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("a free port")
}

fn find_binary() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os(BINARY_ENV) {
        return Some(PathBuf::from(p));
    }
    let on_path = std::env::var_os("PATH")
        .map(|paths| std::env::split_paths(&paths).map(|d| d.join("toxiproxy-server")).collect::<Vec<_>>())
        .unwrap_or_default();
    let cached = std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/pgvia/bin/toxiproxy-server"));
    on_path.into_iter().chain(cached).find(|p| p.is_file())
}

impl Toxiproxy {
    /// Starts toxiproxy-server, or `None` (after saying why) when it is not installed.
    pub async fn start() -> Option<Toxiproxy> {
        let Some(bin) = find_binary() else {
            let msg = format!(
                "toxiproxy-server not found (set {BINARY_ENV}, or run `source scripts/lib/setup.sh`, which \
                 installs it into ~/.cache/pgvia/bin)"
            );
            if std::env::var(REQUIRE_ENV).as_deref() == Ok("1") {
                panic!("{msg}; {REQUIRE_ENV}=1 makes this a failure");
            }
            eprintln!("SKIPPED: {msg}");
            return None;
        };
        let api = free_port();
        let child = Command::new(&bin)
            .args(["-host", "127.0.0.1", "-port", &api.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", bin.display()));
        let proxy = Toxiproxy { child, api };
        let deadline = Instant::now() + Duration::from_secs(10);
        while proxy.request("GET", "/version", None).await.is_err() {
            assert!(Instant::now() < deadline, "toxiproxy-server did not answer on {api} within 10 s");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Some(proxy)
    }

    /// One HTTP/1.1 request; the status must be 2xx. Returns the body parsed as JSON (or Null).
    async fn request(&self, method: &str, path: &str, body: Option<&Value>) -> Result<Value, String> {
        let mut s = TcpStream::connect(("127.0.0.1", self.api)).await.map_err(|e| e.to_string())?;
        let body = body.map(Value::to_string).unwrap_or_default();
        let req = format!(
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        s.write_all(req.as_bytes()).await.map_err(|e| e.to_string())?;
        let mut resp = Vec::new();
        s.read_to_end(&mut resp).await.map_err(|e| e.to_string())?;
        let resp = String::from_utf8_lossy(&resp);
        let (head, rest) = resp.split_once("\r\n\r\n").ok_or("no header end")?;
        let status: u16 = head.split_whitespace().nth(1).and_then(|c| c.parse().ok()).ok_or("no status")?;
        // Toxiproxy answers with Content-Length; a chunked body would need decoding.
        if !(200..300).contains(&status) {
            return Err(format!("{method} {path}: HTTP {status}: {rest}"));
        }
        Ok(serde_json::from_str(rest.trim()).unwrap_or(Value::Null))
    }

    async fn call(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        self.request(method, path, body.as_ref()).await.unwrap_or_else(|e| panic!("toxiproxy API: {e}"))
    }

    /// A proxy named `name` from a new loopback port to `upstream`; returns the port.
    pub async fn proxy(&self, name: &str, upstream: u16) -> u16 {
        let listen = free_port();
        self.call(
            "POST",
            "/proxies",
            Some(json!({"name": name, "listen": format!("127.0.0.1:{listen}"),
                        "upstream": format!("127.0.0.1:{upstream}"), "enabled": true})),
        )
        .await;
        listen
    }

    /// Adds toxic `kind` (latency, bandwidth, timeout, reset_peer, limit_data, slicer, …) with
    /// its attributes to every connection of proxy `proxy`, new and existing.
    pub async fn add(&self, proxy: &str, kind: &str, stream: Stream, attributes: Value) {
        let name = format!("{kind}_{}", stream.as_str());
        self.call(
            "POST",
            &format!("/proxies/{proxy}/toxics"),
            Some(json!({"name": name, "type": kind, "stream": stream.as_str(), "toxicity": 1.0,
                        "attributes": attributes})),
        )
        .await;
    }

    /// Removes every toxic of `proxy`.
    pub async fn clear(&self, proxy: &str) {
        let toxics = self.call("GET", &format!("/proxies/{proxy}/toxics"), None).await;
        for t in toxics.as_array().into_iter().flatten() {
            if let Some(name) = t.get("name").and_then(Value::as_str) {
                self.call("DELETE", &format!("/proxies/{proxy}/toxics/{name}"), None).await;
            }
        }
    }
}

impl Drop for Toxiproxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
