//! Bounds on what a client controls (`[limits]`), each shown from the client's side against
//! a real PostgreSQL: a flood of connections that never log in, a client that pipelines
//! without reading (answers pgvia gives itself, and messages held behind a running
//! statement), the startup timeout, the caps on connections logging in, the admin reserve,
//! the large-message budget, the cancel rate, the metrics listener and password hashing off
//! the async workers.

#![allow(clippy::unwrap_used)]

mod common;

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use common::ops::{admin_user, ADMIN, ADMIN_PASSWORD};
use common::raw::{cancel_request, query, RawConn};
use common::shards::{Engine, ENGINES};
use common::{sqlstate, start_pg, ConfigBuilder, TestProxy, DB, PASSWORD, USER};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

/// The tests of this file run one at a time: some read this process's RSS (pgvia runs in it),
/// open thousands of sockets or time a hash, and the others' allocations and CPU would blur
/// what they measure.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A TCP connection to `to` from the loopback address `from` (127.0.0.0/8 is all local).
async fn connect_from(from: &str, to: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::new(from.parse::<IpAddr>().unwrap(), 0)).unwrap();
    socket.connect(to).await.unwrap()
}

/// `connect_from`, then waits until pgvia has taken the connection and counts it as logging in.
/// Each client thread accepts from its own listener (`thread_layout = "per_core"`), so two
/// connections made one after the other may be taken in the other order; a test that needs
/// the earlier one counted first waits for it.
async fn connect_counted(from: &str, proxy: &TestProxy) -> TcpStream {
    let before = proxy.app.admission.pending();
    let stream = connect_from(from, proxy.addr).await;
    let deadline = Instant::now() + Duration::from_secs(5);
    while proxy.app.admission.pending() <= before {
        assert!(Instant::now() < deadline, "pgvia did not take the connection within 5 s");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    stream
}

/// Everything the peer sends until it closes (at most 10 s).
async fn read_until_closed(stream: &mut TcpStream) -> Vec<u8> {
    let mut all = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut all)).await;
    all
}

/// The SQLSTATE and message of an ErrorResponse at the start of `bytes`.
fn error_fields(bytes: &[u8]) -> (String, String) {
    assert_eq!(bytes.first(), Some(&b'E'), "expected an ErrorResponse, got {bytes:?}");
    let len = i32::from_be_bytes([bytes[1], bytes[2], bytes[3], bytes[4]]) as usize;
    let (mut code, mut message) = (String::new(), String::new());
    for field in bytes[5..len + 1].split(|b| *b == 0) {
        match field.first() {
            Some(b'C') => code = String::from_utf8_lossy(&field[1..]).into_owned(),
            Some(b'M') => message = String::from_utf8_lossy(&field[1..]).into_owned(),
            _ => {}
        }
    }
    (code, message)
}

fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// Opens `n` connections to `port` from 127.0.0.2 (source ports from `base` up) in a child
/// process (so this process's descriptor limit is not spent on them), which never sends a
/// byte and holds them until its stdin closes. Returns the child once every connect has
/// finished.
async fn flood(port: u16, n: usize, base: u16) -> tokio::process::Child {
    const SCRIPT: &str = r#"
import resource, socket, sys
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
port, n, base = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
held, failed, local = [], 0, base
# Source ports are picked here, below the ephemeral range (where the harness and the kernel
# pick theirs): the kernel's own search slows to milliseconds a connect once half its range
# is taken, and 20,000 is more than half.
while len(held) + failed < n and local < base + 15000:
    s = socket.socket()
    try:
        s.bind(("127.0.0.2", local))
    except OSError:
        s.close()
        local += 1
        continue
    local += 1
    s.settimeout(20)
    try:
        s.connect(("127.0.0.1", port))
        held.append(s)
    except OSError:
        failed += 1
        s.close()
print(len(held), failed, flush=True)
sys.stdin.read()
"#;
    let mut child = tokio::process::Command::new("python3")
        .args(["-c", SCRIPT, &port.to_string(), &n.to_string(), &base.to_string()])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut out = child.stdout.take().unwrap();
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    while out.read(&mut byte).await.unwrap() == 1 && byte[0] != b'\n' {
        line.push(byte[0]);
    }
    let line = String::from_utf8(line).unwrap();
    let counts: Vec<usize> = line.split_whitespace().map(|w| w.parse().unwrap()).collect();
    assert_eq!(counts, vec![n, 0], "connected, failed");
    child
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_flood_from_one_address_leaves_room_for_admin_and_client() {
    let _one = ONE_AT_A_TIME.lock().await;
    let pg = start_pg();
    let proxy = TestProxy::start(&ConfigBuilder::new(&pg).user(&admin_user())).await;
    // 20,000 connections, two children of 10,000 (the hard descriptor limit here is 20,000).
    let started = Instant::now();
    let floods = [flood(proxy.port(), 10_000, 2000).await, flood(proxy.port(), 10_000, 17_000).await];
    eprintln!("20000 silent connections open after {:?}", started.elapsed());
    // Only the per-address share is kept logging in; the rest were refused at accept.
    let pending = proxy.app.admission.pending();
    assert!(pending <= 500, "{pending} connections logging in");

    let t = Instant::now();
    let admin = RawConn::login(proxy.addr, ADMIN, ADMIN_PASSWORD, "pgvia").await.unwrap();
    let admin_took = t.elapsed();
    let t = Instant::now();
    let client = proxy.connect(USER, PASSWORD, DB).await;
    let n: i32 = client.query_one("SELECT 41 + 1", &[]).await.unwrap().get(0);
    let client_took = t.elapsed();
    assert_eq!(n, 42);
    eprintln!("admin login {admin_took:?}, client login + query {client_took:?}");
    assert!(admin_took < Duration::from_secs(1), "admin login took {admin_took:?}");
    assert!(client_took < Duration::from_secs(1), "client login took {client_took:?}");

    // A connection from the flooding address is refused with 53300, not left hanging.
    let mut more = connect_from("127.0.0.2", proxy.addr).await;
    let (code, message) = error_fields(&read_until_closed(&mut more).await);
    assert_eq!(code, "53300");
    assert!(message.contains("max_pending_logins_per_address"), "{message}");
    drop((admin, client));
    // The kernel tears 20,000 connections down when the children go; let it finish before
    // the next heavy test measures anything.
    for mut child in floods {
        let _ = child.kill().await;
    }
    proxy.stop().await;
    tokio::time::sleep(Duration::from_secs(2)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_local_answers_without_reading_keep_memory_bounded() {
    let _one = ONE_AT_A_TIME.lock().await;
    let pg = start_pg();
    let proxy = TestProxy::start(&ConfigBuilder::new(&pg).pool("pool_mode = \"transaction\"")).await;
    let other = proxy.connect(USER, PASSWORD, DB).await;
    other.simple_query("SELECT 1").await.unwrap();
    let conn = RawConn::login(proxy.addr, USER, PASSWORD, DB).await.unwrap();
    let (mut replies, requests) = conn.stream.into_split();
    let before = rss_kib();

    // 100 MiB of BEGIN/COMMIT pairs, written from one 64 KiB chunk so the test itself holds
    // no big buffer; pgvia answers each pair itself, without a server.
    let mut chunk = Vec::new();
    while chunk.len() < 64 * 1024 {
        chunk.extend_from_slice(&query("BEGIN"));
        chunk.extend_from_slice(&query("COMMIT"));
    }
    let pairs_per_chunk = chunk.len() / (query("BEGIN").len() + query("COMMIT").len());
    let (writer, written, total) = write_100_mib(requests, chunk);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let stalled_at = written.load(std::sync::atomic::Ordering::Relaxed);
    let grown = rss_kib().saturating_sub(before);
    eprintln!("written {stalled_at} of {total} chunks before the stall; RSS grew {grown} KiB");
    assert!(stalled_at < total / 4, "pgvia kept reading: {stalled_at} of {total} chunks taken");
    assert!(grown < 32 * 1024, "RSS grew {grown} KiB");

    // Another client is unaffected.
    for i in 0..20 {
        let t = Instant::now();
        let n: i32 = other.query_one("SELECT $1::int + 1", &[&i]).await.unwrap().get(0);
        assert_eq!(n, i + 1);
        assert!(t.elapsed() < Duration::from_secs(1), "query took {:?}", t.elapsed());
    }

    // Backpressure, not an error: reading the answers lets the client write on.
    let mut buf = vec![0u8; 64 * 1024];
    let mut read = 0usize;
    let deadline = Instant::now() + Duration::from_secs(60);
    while written.load(std::sync::atomic::Ordering::Relaxed) <= stalled_at + 16 {
        assert!(Instant::now() < deadline, "the client could not write on after reading {read} bytes");
        let n = tokio::time::timeout(Duration::from_secs(10), replies.read(&mut buf)).await.unwrap().unwrap();
        assert!(n > 0, "pgvia closed the pipelining client");
        read += n;
    }
    let resumed = written.load(std::sync::atomic::Ordering::Relaxed);
    eprintln!(
        "{pairs_per_chunk} pairs a chunk; after reading {read} bytes of answers: {resumed} chunks written"
    );
    writer.abort();
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn startup_timeout_closes_connections_that_do_not_log_in() {
    let _one = ONE_AT_A_TIME.lock().await;
    let pg = start_pg();
    let proxy = TestProxy::start(&ConfigBuilder::new(&pg).limits("startup_timeout = \"1s\"")).await;
    // Silent: closed after the timeout (nothing to answer: it never spoke the protocol).
    let t = Instant::now();
    let mut silent = TcpStream::connect(proxy.addr).await.unwrap();
    assert!(read_until_closed(&mut silent).await.is_empty());
    let took = t.elapsed();
    assert!(took >= Duration::from_millis(900) && took < Duration::from_secs(3), "closed after {took:?}");
    // Sent its startup packet but never answers the password request: FATAL 08P01.
    let mut slow = TcpStream::connect(proxy.addr).await.unwrap();
    slow.write_all(&common::raw::startup(&[("user", USER), ("database", DB)])).await.unwrap();
    let got = read_until_closed(&mut slow).await;
    let at = got.iter().position(|b| *b == b'E').expect("an ErrorResponse after the challenge");
    let (code, message) = error_fields(&got[at..]);
    assert_eq!(code, "08P01");
    assert!(message.contains("did not finish logging in within 1s"), "{message}");
    // Logging in in time still works.
    let client = proxy.connect(USER, PASSWORD, DB).await;
    client.simple_query("SELECT 1").await.unwrap();
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_logging_in_are_capped_per_address_and_in_all() {
    let _one = ONE_AT_A_TIME.lock().await;
    let pg = start_pg();
    let builder =
        ConfigBuilder::new(&pg).limits("max_pending_logins = 3").limits("max_pending_logins_per_address = 2");
    let proxy = TestProxy::start(&builder).await;
    let _a = connect_counted("127.0.0.3", &proxy).await;
    let _b = connect_counted("127.0.0.3", &proxy).await;
    let mut refused = connect_from("127.0.0.3", proxy.addr).await;
    let (code, message) = error_fields(&read_until_closed(&mut refused).await);
    assert_eq!(code, "53300");
    assert!(message.contains("from this address"), "{message}");
    let _c = connect_counted("127.0.0.4", &proxy).await;
    let mut refused = connect_from("127.0.0.5", proxy.addr).await;
    let (code, message) = error_fields(&read_until_closed(&mut refused).await);
    assert_eq!(code, "53300");
    assert!(message.contains("max_pending_logins = 3"), "{message}");
    // Counted for /metrics (pgvia_connections_refused_total): pending, per address, rate.
    assert_eq!(proxy.app.admission.refused_total(), [1, 1, 0]);
    // A place comes free when a connection logging in goes away.
    drop(_a);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match RawConn::login(proxy.addr, USER, PASSWORD, DB).await {
            Ok(_) => break,
            Err(e) => assert!(Instant::now() < deadline, "still refused: {e:?}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_per_second_are_limited_per_address() {
    let _one = ONE_AT_A_TIME.lock().await;
    let pg = start_pg();
    let proxy =
        TestProxy::start(&ConfigBuilder::new(&pg).limits("connections_per_second_per_address = 3")).await;
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(connect_counted("127.0.0.6", &proxy).await);
    }
    let mut refused = connect_from("127.0.0.6", proxy.addr).await;
    let (code, message) = error_fields(&read_until_closed(&mut refused).await);
    assert_eq!(code, "53300");
    assert!(message.contains("connections_per_second_per_address = 3"), "{message}");
    // Another address is not affected, and a second later this one may connect again.
    let client = proxy.connect(USER, PASSWORD, DB).await;
    client.simple_query("SELECT 1").await.unwrap();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let mut again = connect_from("127.0.0.6", proxy.addr).await;
    again.write_all(&common::raw::startup(&[("user", USER), ("database", DB)])).await.unwrap();
    let mut first = [0u8; 1];
    again.read_exact(&mut first).await.unwrap();
    assert_eq!(first[0], b'R', "an authentication request, not a refusal");
    drop(held);
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_places_are_kept_for_admins() {
    let _one = ONE_AT_A_TIME.lock().await;
    let pg = start_pg();
    let builder = ConfigBuilder::new(&pg)
        .general("max_client_connections = 3")
        .limits("admin_reserved_connections = 1")
        .user(&admin_user());
    let proxy = TestProxy::start(&builder).await;
    let _a = RawConn::login(proxy.addr, USER, PASSWORD, DB).await.unwrap();
    let _b = RawConn::login(proxy.addr, USER, PASSWORD, DB).await.unwrap();
    let refused = RawConn::login(proxy.addr, USER, PASSWORD, DB).await.err().expect("refused").refused();
    assert_eq!(refused.sqlstate().as_deref(), Some("53300"));
    assert!(refused.fields()[&'M'].contains("reserved for admin users"), "{:?}", refused.fields());
    let mut admin = RawConn::login(proxy.addr, ADMIN, ADMIN_PASSWORD, "pgvia").await.unwrap();
    admin.send(&query("SHOW CONFIG")).await;
    let mut rows = Vec::new();
    while let Some(msg) = admin.recv().await {
        assert_ne!(msg.tag, b'E');
        match msg.tag {
            b'Z' => break,
            b'D' => rows.push(String::from_utf8_lossy(&msg.body).into_owned()),
            _ => {}
        }
    }
    let row = rows
        .iter()
        .find(|r| r.contains("limits.admin_reserved_connections"))
        .expect("the key in SHOW CONFIG");
    // DataRow columns: key, value "1", default "3", each a 4-byte length and the text.
    assert!(row.contains("\u{0}\u{0}\u{0}\u{1}1\u{0}\u{0}\u{0}\u{1}3"), "{row:?}");
    // Full now: even an admin is refused, with the plain message.
    let refused =
        RawConn::login(proxy.addr, ADMIN, ADMIN_PASSWORD, "pgvia").await.err().expect("full").refused();
    assert_eq!(refused.sqlstate().as_deref(), Some("53300"));
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_messages_share_one_budget() {
    let _one = ONE_AT_A_TIME.lock().await;
    for engine in ENGINES {
        large_messages_share_one_budget_on(engine).await;
    }
}

async fn large_messages_share_one_budget_on(engine: Engine) {
    eprintln!("-- the {engine:?} session engine");
    let pg = start_pg();
    let builder = ConfigBuilder::new(&pg)
        .pool("pool_mode = \"transaction\"")
        .general("max_message_size = 1048576")
        .limits("max_buffered_message_bytes = 1572864");
    let proxy = engine.start(&builder, &pg).await;
    // A query of 1 MiB less a little, sent in two parts.
    let sql = format!("SELECT length('{}')", "x".repeat(1_000_000));
    let big = query(&sql);
    let mut a = RawConn::login(proxy.addr, USER, PASSWORD, DB).await.unwrap();
    let mut b = RawConn::login(proxy.addr, USER, PASSWORD, DB).await.unwrap();
    a.send(&big[..1000]).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    // The second large message does not fit while the first is being received.
    b.send(&big[..1000]).await;
    let refused = b.recv().await.expect("an error");
    assert_eq!(refused.tag, b'E');
    assert_eq!(refused.sqlstate().as_deref(), Some("53200"));
    assert!(refused.fields()[&'M'].contains("max_buffered_message_bytes"), "{:?}", refused.fields());
    // The first completes and its budget is given back.
    a.send(&big[1000..]).await;
    let mut rows = Vec::new();
    while let Some(msg) = a.recv().await {
        match msg.tag {
            b'Z' => break,
            b'D' => rows.push(msg),
            _ => {}
        }
    }
    assert_eq!(rows.len(), 1);
    let mut c = RawConn::login(proxy.addr, USER, PASSWORD, DB).await.unwrap();
    c.send(&big).await;
    loop {
        let msg = c.recv().await.expect("an answer");
        assert_ne!(msg.tag, b'E', "{:?}", msg.fields());
        if msg.tag == b'Z' {
            break;
        }
    }
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_requests_are_rate_limited() {
    let _one = ONE_AT_A_TIME.lock().await;
    let pg = start_pg();
    let proxy = TestProxy::start(&ConfigBuilder::new(&pg).limits("cancel_requests_per_second = 1")).await;
    let client = proxy.connect(USER, PASSWORD, DB).await;
    let token = client.cancel_token();
    let running = tokio::spawn(async move { client.query("SELECT pg_sleep(20)", &[]).await.map(|_| ()) });
    tokio::time::sleep(Duration::from_millis(500)).await;
    // A guess with a wrong key spends the second's only cancel...
    let mut guess = TcpStream::connect(proxy.addr).await.unwrap();
    guess.write_all(&cancel_request(1, 2)).await.unwrap();
    assert!(read_until_closed(&mut guess).await.is_empty());
    // ...so the right one, right after, is dropped: the query runs on.
    token.cancel_query(tokio_postgres::NoTls).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!running.is_finished(), "a cancel over the rate went through");
    assert_eq!(proxy.app.admission.cancels_dropped(), 1);
    // A second later the rate allows one again.
    tokio::time::sleep(Duration::from_millis(700)).await;
    token.cancel_query(tokio_postgres::NoTls).await.unwrap();
    let result = tokio::time::timeout(Duration::from_secs(5), running).await.unwrap().unwrap();
    assert_eq!(sqlstate(&result.unwrap_err()).as_deref(), Some("57014"));
    proxy.stop().await;
}

/// One HTTP/1.1 GET; returns the status line and the body.
async fn http_get(addr: SocketAddr, path: &str, token: Option<&str>) -> (String, String) {
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    let auth = token.map(|t| format!("authorization: Bearer {t}\r\n")).unwrap_or_default();
    let request = format!("GET {path} HTTP/1.1\r\nhost: x\r\n{auth}connection: close\r\n\r\n");
    tcp.write_all(request.as_bytes()).await.unwrap();
    let text = String::from_utf8_lossy(&read_until_closed(&mut tcp).await).into_owned();
    let status = text.lines().next().unwrap_or_default().to_owned();
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
    (status, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_listener_has_a_token_a_header_timeout_a_cap_and_a_health_cache() {
    let _one = ONE_AT_A_TIME.lock().await;
    let pg = start_pg();
    // A second database whose "server" is a listener of ours: /health probes it by TCP
    // connect, and the accepts count the probes.
    let probe = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let probe_port = probe.local_addr().unwrap().port();
    let probes = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = probes.clone();
    tokio::spawn(async move {
        while let Ok((s, _)) = probe.accept().await {
            counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            drop(s);
        }
    });
    let builder = ConfigBuilder::new(&pg)
        .general("metrics_listen = \"127.0.0.1:0\"")
        .general("metrics_auth_token = \"s3cret\"")
        .database(&format!("name = \"probed\"\nhost = \"127.0.0.1\"\nport = {probe_port}"))
        .limits("metrics_header_timeout = \"2s\"")
        .limits("metrics_max_connections = 2")
        .limits("health_cache = \"10s\"");
    let proxy = TestProxy::start(&builder).await;
    let addr = proxy.metrics.unwrap();

    let (status, _) = http_get(addr, "/metrics", None).await;
    assert!(status.contains("401"), "{status}");
    let (status, _) = http_get(addr, "/metrics", Some("wrong")).await;
    assert!(status.contains("401"), "{status}");
    let (status, body) = http_get(addr, "/metrics", Some("s3cret")).await;
    assert!(status.contains("200"), "{status}");
    assert!(body.contains("pgvia_pending_logins{} 0"), "{body}");
    assert!(body.contains("pgvia_connections_refused_total{reason=\"per_address\"} 0"), "{body}");

    // Ten /health requests inside the cache period probe the servers once.
    for _ in 0..10 {
        let (status, body) = http_get(addr, "/health", Some("s3cret")).await;
        assert!(status.contains("200"), "{status} {body}");
    }
    assert_eq!(probes.load(std::sync::atomic::Ordering::Relaxed), 1);

    // Two connections that never finish their headers fill the listener; a third is told 503.
    // (The requests above have closed; their tasks give their places back just after.)
    tokio::time::sleep(Duration::from_millis(300)).await;
    let t = Instant::now();
    let mut slow1 = TcpStream::connect(addr).await.unwrap();
    let mut slow2 = TcpStream::connect(addr).await.unwrap();
    slow1.write_all(b"GET /metrics HTTP/1.1\r\n").await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (status, _) = http_get(addr, "/metrics", Some("s3cret")).await;
    assert!(status.contains("503"), "{status}");
    // The header timeout closes both.
    read_until_closed(&mut slow1).await;
    read_until_closed(&mut slow2).await;
    let took = t.elapsed();
    assert!(took < Duration::from_secs(5), "slow connections closed after {took:?}");
    tokio::time::sleep(Duration::from_millis(100)).await;
    let (status, _) = http_get(addr, "/metrics", Some("s3cret")).await;
    assert!(status.contains("200"), "{status}");
    proxy.stop().await;
}

#[tokio::test]
async fn password_hashing_does_not_stall_other_clients() {
    // One runtime thread for pgvia and its clients alike: a hash on it would stop them all.
    let _one = ONE_AT_A_TIME.lock().await;
    let pg = start_pg();
    pg.create_user("slow", "secret").unwrap();
    // A SCRAM verifier whose key stretching takes about two seconds here.
    let t = Instant::now();
    wire::scram::ScramVerifier::from_password("pw", b"0123456789abcdef", 20_000);
    let per_iteration = t.elapsed() / 20_000;
    let iterations = (Duration::from_secs(2).as_nanos() / per_iteration.as_nanos().max(1)) as u32;
    let verifier =
        wire::scram::ScramVerifier::from_password("pw", b"0123456789abcdef", iterations.max(20_000));
    let builder = ConfigBuilder::new(&pg)
        .pool("pool_mode = \"transaction\"")
        .general("allow_cleartext_without_tls = true")
        .user(&format!(
            "name = \"slow\"\npassword = \"{verifier}\"\nauth_method = \"cleartext\"\nserver_password = \"secret\""
        ));
    let proxy = TestProxy::start(&builder).await;
    let other = proxy.connect(USER, PASSWORD, DB).await;
    other.simple_query("SELECT 1").await.unwrap();

    let addr = proxy.addr;
    let login = tokio::spawn(async move {
        let t = Instant::now();
        let conn = RawConn::login(addr, "slow", "pw", DB).await;
        (conn.is_ok(), t.elapsed())
    });
    let mut slowest = Duration::ZERO;
    let mut queries = 0;
    while !login.is_finished() {
        let t = Instant::now();
        other.simple_query("SELECT 1").await.unwrap();
        slowest = slowest.max(t.elapsed());
        queries += 1;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (ok, took) = login.await.unwrap();
    eprintln!("cleartext login against {iterations} iterations took {took:?}; {queries} queries meanwhile, slowest {slowest:?}");
    assert!(ok, "the cleartext login failed");
    assert!(took > Duration::from_millis(1000), "the hash was too quick to show anything ({took:?})");
    // On the worker, the hash would hold every query for its whole length; off it, a query
    // waits only on a busy machine's scheduler.
    assert!(slowest < took / 2, "a query waited {slowest:?} behind a hash of {took:?}");
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_held_behind_a_running_statement_stop_the_reads() {
    // Statement mode holds a BEGIN back (to refuse it) until the server has answered what came
    // before it; a client pipelining behind it without reading must not be read without end.
    let _one = ONE_AT_A_TIME.lock().await;
    let pg = start_pg();
    let proxy = TestProxy::start(&ConfigBuilder::new(&pg).pool("pool_mode = \"statement\"")).await;
    let conn = RawConn::login(proxy.addr, USER, PASSWORD, DB).await.unwrap();
    let (mut replies, mut requests) = conn.stream.into_split();
    let before = rss_kib();
    requests.write_all(&query("SELECT pg_sleep(3)")).await.unwrap();
    let mut chunk = Vec::new();
    while chunk.len() < 64 * 1024 {
        chunk.extend_from_slice(&query("BEGIN"));
    }
    let (writer, written, total) = write_100_mib(requests, chunk);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let stalled_at = written.load(std::sync::atomic::Ordering::Relaxed);
    let grown = rss_kib().saturating_sub(before);
    eprintln!("held: written {stalled_at} of {total} chunks during the statement; RSS grew {grown} KiB");
    assert!(stalled_at < total / 4, "pgvia kept reading: {stalled_at} of {total} chunks taken");
    assert!(grown < 32 * 1024, "RSS grew {grown} KiB");
    // The statement's answer comes first, then the refusals, in order.
    let mut buf = vec![0u8; 64 * 1024];
    let mut got = Vec::new();
    while got.len() < 64 * 1024 {
        let n = tokio::time::timeout(Duration::from_secs(10), replies.read(&mut buf)).await.unwrap().unwrap();
        assert!(n > 0, "pgvia closed the client");
        got.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&got);
    let sleep_done = text.find("SELECT 1").expect("the statement's CommandComplete");
    let refusal = text.find("transaction blocks are not allowed").expect("a refusal");
    assert!(sleep_done < refusal);
    writer.abort();
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_applies_new_limits_to_the_next_connection() {
    let _one = ONE_AT_A_TIME.lock().await;
    let pg = start_pg();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pgvia.toml");
    let base = ConfigBuilder::new(&pg).user(&admin_user());
    std::fs::write(&path, base.clone().limits("max_pending_logins_per_address = 1").toml()).unwrap();
    let proxy = TestProxy::start_file(&path).await;
    let _first = connect_counted("127.0.0.7", &proxy).await;
    let mut refused = connect_from("127.0.0.7", proxy.addr).await;
    assert_eq!(error_fields(&read_until_closed(&mut refused).await).0, "53300");

    std::fs::write(&path, base.limits("max_pending_logins_per_address = 2").toml()).unwrap();
    common::ops::console(&pg, &proxy, "RELOAD").await;
    let mut admitted = connect_from("127.0.0.7", proxy.addr).await;
    let mut byte = [0u8; 1];
    let quiet = tokio::time::timeout(Duration::from_millis(500), admitted.read(&mut byte)).await;
    assert!(quiet.is_err(), "the connection was answered: {quiet:?}");
    proxy.stop().await;
}

/// Writes 100 MiB as copies of `chunk` without reading anything, in a task of its own;
/// returns it, the number of chunks written so far, and how many there are in all.
fn write_100_mib(
    mut requests: tokio::net::tcp::OwnedWriteHalf,
    chunk: Vec<u8>,
) -> (tokio::task::JoinHandle<()>, std::sync::Arc<std::sync::atomic::AtomicUsize>, usize) {
    let total = 100 * 1024 * 1024 / chunk.len();
    let written = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let progress = written.clone();
    let writer = tokio::spawn(async move {
        for _ in 0..total {
            if requests.write_all(&chunk).await.is_err() {
                return;
            }
            progress.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    });
    (writer, written, total)
}
