//! A minimal HTTP/1.1 client for the gateway tests: one request per connection, bodies
//! with Content-Length, answers with Content-Length or chunked. Kept small and obvious so
//! a test failure points at pgvia, not at the client.

use std::net::SocketAddr;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

pub struct Answer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Answer {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// The connection string header Neon's driver sends.
pub fn neon_auth(port: u16, user: &str, password: &str, db: &str) -> (String, String) {
    ("Neon-Connection-String".into(), format!("postgresql://{user}:{password}@127.0.0.1:{port}/{db}"))
}

/// Writes a request and returns the connection with the answer's status and headers read.
pub async fn send(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(String, String)],
    body: &[u8],
) -> (BufReader<TcpStream>, u16, Vec<(String, String)>) {
    let mut tcp = TcpStream::connect(addr).await.expect("connect to the gateway");
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {}\r\n", body.len());
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("Connection: close\r\n\r\n");
    tcp.write_all(req.as_bytes()).await.expect("write request");
    tcp.write_all(body).await.expect("write body");
    let mut r = BufReader::new(tcp);
    let mut line = String::new();
    r.read_line(&mut line).await.expect("status line");
    let status: u16 = line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("bad status line {line:?}"));
    let mut hs = Vec::new();
    loop {
        line.clear();
        r.read_line(&mut line).await.expect("header line");
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        if let Some((k, v)) = l.split_once(':') {
            hs.push((k.trim().to_owned(), v.trim().to_owned()));
        }
    }
    (r, status, hs)
}

/// Reads the rest of a chunked body, or up to Content-Length, or to the end.
pub async fn read_body(r: &mut BufReader<TcpStream>, headers: &[(String, String)]) -> Vec<u8> {
    let get = |n: &str| headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(n)).map(|(_, v)| v.clone());
    let mut body = Vec::new();
    if get("transfer-encoding").is_some_and(|v| v.contains("chunked")) {
        let mut line = String::new();
        loop {
            line.clear();
            r.read_line(&mut line).await.expect("chunk size");
            let n =
                usize::from_str_radix(line.trim(), 16).unwrap_or_else(|_| panic!("bad chunk size {line:?}"));
            if n == 0 {
                break;
            }
            let start = body.len();
            body.resize(start + n, 0);
            r.read_exact(&mut body[start..]).await.expect("chunk");
            line.clear();
            r.read_line(&mut line).await.expect("chunk end");
        }
    } else if let Some(n) = get("content-length").and_then(|v| v.parse::<usize>().ok()) {
        body.resize(n, 0);
        r.read_exact(&mut body).await.expect("body");
    } else {
        r.read_to_end(&mut body).await.expect("body");
    }
    body
}

pub async fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(String, String)],
    body: &[u8],
) -> Answer {
    let (mut r, status, headers) = send(addr, method, path, headers, body).await;
    let body = read_body(&mut r, &headers).await;
    Answer { status, headers, body }
}

/// `POST /sql` with a JSON body.
pub async fn sql(addr: SocketAddr, headers: &[(String, String)], body: &serde_json::Value) -> Answer {
    request(addr, "POST", "/sql", headers, body.to_string().as_bytes()).await
}
