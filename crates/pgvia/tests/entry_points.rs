//! Issue 33 (entry points): what a client can put in a name, and over what it may log in, is
//! the same whichever way it comes in — the wire protocol, the gateway's `/sql`, or its
//! WebSocket (`/v2`) — against real PostgreSQL.
//!
//! - A NUL byte in a database, user or setting cannot rewrite the StartupMessage pgvia sends
//!   a server (a second `user`, an `options`), checked both on the classic injection and on
//!   random byte strings through every entry point, with a relay in front of PostgreSQL
//!   that records every StartupMessage it forwards.
//! - `tls_mode` and `allow_cleartext_without_tls` bind gateway logins as they bind wire ones.
//! - A web page of another origin cannot use the gateway unless `cors_allowed_origins` says so.

mod common;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::BytesMut;
use common::http::{self, neon_auth};
use common::raw::{self, Msg};
use common::tls::TestCerts;
use common::{start_pg, ConfigBuilder, TestProxy, DB, PASSWORD, USER};
use futures_util::{SinkExt, StreamExt};
use harness::{Cluster, ClusterOptions, HbaAuth};
use rand::{Rng, SeedableRng};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
use tokio::net::{TcpListener, TcpStream};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;

/// Percent-encodes every byte, so any byte string survives the connection string.
fn pct(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("%{b:02X}")).collect()
}

fn conn_string(user: &[u8], password: &str, database: &[u8], query: &str) -> (String, String) {
    (
        "Neon-Connection-String".to_owned(),
        format!("postgresql://{}:{password}@127.0.0.1/{}{query}", pct(user), pct(database)),
    )
}

/// Opens `/v2` (with extra request headers) and returns one end of a pipe whose bytes travel
/// as binary messages; `Err` with the HTTP status if the upgrade is refused.
async fn ws_tunnel(gw: SocketAddr, headers: &[(&'static str, &str)]) -> Result<DuplexStream, u16> {
    let tcp = TcpStream::connect(gw).await.expect("connect");
    let mut req = format!("ws://{gw}/v2").into_client_request().expect("request");
    for (k, v) in headers {
        req.headers_mut().insert(*k, v.parse().expect("header value"));
    }
    let (mut ws, resp) = match tokio_tungstenite::client_async(req, tcp).await {
        Ok(ok) => ok,
        Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => return Err(resp.status().as_u16()),
        Err(e) => panic!("WebSocket handshake: {e}"),
    };
    assert_eq!(resp.status(), 101);
    let (ours, mut theirs) = tokio::io::duplex(64 * 1024);
    tokio::spawn(async move {
        let mut buf = BytesMut::with_capacity(64 * 1024);
        loop {
            tokio::select! {
                m = ws.next() => match m {
                    Some(Ok(Message::Binary(b))) => if theirs.write_all(&b).await.is_err() { break },
                    Some(Ok(_)) => {}
                    _ => break,
                },
                n = theirs.read_buf(&mut buf) => match n {
                    Ok(0) | Err(_) => { let _ = ws.close(None).await; break }
                    Ok(_) => if ws.send(Message::Binary(buf.split().freeze())).await.is_err() { break },
                },
            }
        }
    });
    Ok(ours)
}

/// Sends raw startup bytes on `io` and reads backend messages up to ReadyForQuery, an
/// ErrorResponse, a password request or the end.
async fn raw_login<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
    io: &mut S,
    startup: &[u8],
) -> Vec<Msg> {
    io.write_all(startup).await.expect("send startup");
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    let read = async {
        loop {
            while buf.len() >= 5 {
                let len = u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]) as usize;
                if buf.len() < len + 1 {
                    break;
                }
                let tag = buf[0];
                let mut f = buf.split_to(len + 1);
                let body = f.split_off(5).freeze();
                // A password request ends it too: these logins have none to give.
                let asks = tag == b'R' && body.get(..4).is_some_and(|k| k != [0, 0, 0, 0]);
                let done = asks || matches!(tag, b'Z' | b'E');
                out.push(Msg { tag, body });
                if done {
                    return;
                }
            }
            match io.read_buf(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(10), read).await.expect("an answer to the startup in time");
    out
}

/// A StartupMessage (protocol 3.0) of raw byte strings, as a client may send any bytes.
fn raw_startup(params: &[(&[u8], &[u8])]) -> Vec<u8> {
    let mut rest = Vec::new();
    for (k, v) in params {
        rest.extend_from_slice(k);
        rest.push(0);
        rest.extend_from_slice(v);
        rest.push(0);
    }
    rest.push(0);
    raw::untagged(raw::PROTOCOL_3_0, &rest)
}

// ---- a NUL byte cannot rewrite the server's StartupMessage ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nul_in_a_gateway_name_cannot_rewrite_the_server_startup() {
    // pg_hba trusts pgvia's host: whoever pgvia names in its StartupMessage gets in.
    let pg = Cluster::start(ClusterOptions::default().auth(HbaAuth::Trust)).expect("start PostgreSQL");
    pg.create_user(USER, PASSWORD).expect("create role");
    pg.create_database(DB, USER).expect("create database");
    let config = ConfigBuilder::new(&pg)
        .pool("pool_mode = \"transaction\"")
        .database(&format!("name = \"*\"\nhost = \"{}\"\nport = {}", pg.host(), pg.port()))
        .general("allow_cleartext_without_tls = true")
        .gateway("flush_interval = \"20ms\"");
    let p = TestProxy::start(&config).await;
    let gw = p.gateway.expect("gateway");
    let q = json!({"query": "select current_user::text as u, current_setting('search_path') as sp"});

    let clean = http::sql(gw, &[conn_string(b"app", PASSWORD, b"app", "")], &q).await;
    assert_eq!(clean.status, 200, "{}", clean.text());
    assert_eq!(clean.json()["rows"][0]["u"], USER);

    for (database, query) in [
        (&b"app\0user\0postgres"[..], ""),
        (b"app\0options\0-c search_path=pwn", ""),
        (b"app", "?application_name=x%00y"),
    ] {
        let a = http::sql(gw, &[conn_string(b"app", PASSWORD, database, query)], &q).await;
        assert_eq!(
            (a.status, a.json()["code"].as_str()),
            (400, Some("08P01")),
            "{database:?}{query}: {}",
            a.text()
        );
        assert!(a.json()["message"].as_str().is_some_and(|m| m.contains("NUL")), "{}", a.text());
    }
    // A NUL in the user name is refused the same way, before any user is looked up.
    let a = http::sql(gw, &[conn_string(b"app\0x", PASSWORD, b"app", "")], &q).await;
    assert_eq!((a.status, a.json()["code"].as_str()), (400, Some("08P01")), "{}", a.text());

    let clean = http::sql(gw, &[conn_string(b"app", PASSWORD, b"app", "")], &q).await;
    assert_eq!(clean.json()["rows"][0]["u"], USER);
    p.assert_no_leaks().await;
}

/// Forwards connections to PostgreSQL and records the StartupMessage parameters of each
/// (pgvia speaks first; with `server_tls_mode = "disable"` its first packet is the
/// StartupMessage), as the raw byte strings between NULs.
struct RecordingRelay {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<Vec<Vec<u8>>>>>,
}

impl RecordingRelay {
    async fn start(target: SocketAddr) -> RecordingRelay {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind relay");
        let addr = listener.local_addr().expect("relay address");
        let seen: Arc<Mutex<Vec<Vec<Vec<u8>>>>> = Arc::default();
        let record = seen.clone();
        tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let record = record.clone();
                tokio::spawn(async move {
                    let mut len = [0u8; 4];
                    if client.read_exact(&mut len).await.is_err() {
                        return;
                    }
                    let n = (u32::from_be_bytes(len) as usize).saturating_sub(4);
                    let mut body = vec![0u8; n];
                    if client.read_exact(&mut body).await.is_err() {
                        return;
                    }
                    // After the protocol version: key, value, ..., and the list's own NUL.
                    let fields: Vec<Vec<u8>> =
                        body.get(4..).unwrap_or_default().split(|&b| b == 0).map(<[u8]>::to_vec).collect();
                    record.lock().expect("record").push(fields);
                    let Ok(mut server) = TcpStream::connect(target).await else { return };
                    if server.write_all(&len).await.is_err() || server.write_all(&body).await.is_err() {
                        return;
                    }
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                });
            }
        });
        RecordingRelay { addr, seen }
    }

    fn take(&self) -> Vec<Vec<Vec<u8>>> {
        std::mem::take(&mut *self.seen.lock().expect("record"))
    }
}

/// A random byte string: mostly printable, with NULs, quotes, `=`, spaces, backslashes and
/// bytes that are not UTF-8 mixed in, sometimes around a real name.
fn random_name(rng: &mut impl Rng) -> Vec<u8> {
    const SPICE: &[&[u8]] =
        &[b"\0", b"'", b"\"", b"=", b" ", b"\\", b"\xff", b"\xc3\xa9", b"user", b"options", b"-c"];
    let mut out = if rng.gen_bool(0.3) { b"app".to_vec() } else { Vec::new() };
    for _ in 0..rng.gen_range(0..12) {
        if rng.gen_bool(0.4) {
            out.extend_from_slice(SPICE[rng.gen_range(0..SPICE.len())]);
        } else {
            out.push(rng.gen_range(b'a'..=b'z'));
        }
    }
    out
}

/// Every StartupMessage pgvia sent has exactly `user` (a configured user) and `database`
/// (a name a client asked for), each once, with no NUL inside: the split at NULs gives
/// exactly those four strings and the list's terminator.
fn assert_only_user_and_database(seen: &[Vec<Vec<u8>>], users: &[&str], context: &str) {
    for fields in seen {
        let text: Vec<String> = fields.iter().map(|f| String::from_utf8_lossy(f).into_owned()).collect();
        assert!(
            fields.len() == 6
                && fields[0] == b"user"
                && fields[2] == b"database"
                && fields[4].is_empty()
                && fields[5].is_empty(),
            "{context}: the server was sent the parameters {text:?}"
        );
        assert!(
            users.iter().any(|u| u.as_bytes() == fields[1]),
            "{context}: logged in to the server as {text:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_names_through_every_entry_point_never_add_startup_parameters() {
    let pg = start_pg();
    pg.create_user("trusty", PASSWORD).expect("create role");
    let target: SocketAddr = format!("{}:{}", pg.host(), pg.port()).parse().expect("address");
    let relay = RecordingRelay::start(target).await;
    let config = ConfigBuilder::new(&pg)
        .pool("pool_mode = \"transaction\"")
        .general("fallback_idle_timeout = \"1s\"")
        .database(&format!("name = \"*\"\nhost = \"127.0.0.1\"\nport = {}", relay.addr.port()))
        .user(&format!("name = \"trusty\"\npassword = \"{PASSWORD}\"\nauth_method = \"trust\""))
        .general("allow_cleartext_without_tls = true")
        .gateway("flush_interval = \"20ms\"");
    let p = TestProxy::start(&config).await;
    let gw = p.gateway.expect("gateway");
    let users = ["trusty"];

    let seed: u64 =
        std::env::var("PGVIA_FUZZ_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(rand::random);
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let context = |entry: &str, user: &[u8], db: &[u8], extra: &[u8]| {
        format!("seed {seed}, {entry}: user {user:?}, database {db:?}, setting {extra:?}")
    };
    let mut reached = 0;
    const ROUNDS: usize = 25;
    for round in 0..ROUNDS {
        // Every fourth round a clean new name, which must reach a server: the property is not
        // allowed to hold only because nothing got through.
        let clean = round % 4 == 0;
        let user = if clean || rng.gen_bool(0.7) { b"trusty".to_vec() } else { random_name(&mut rng) };
        let db = if clean { format!("clean{round}").into_bytes() } else { random_name(&mut rng) };
        let extra = random_name(&mut rng);

        // The wire protocol: the client's own bytes (a NUL there ends a string: what follows
        // is another parameter of the client's message, never of pgvia's).
        let mut startup_params: Vec<(&[u8], &[u8])> =
            vec![(b"user", &user), (b"database", &db), (b"application_name", &extra)];
        if rng.gen_bool(0.5) {
            startup_params.push((b"options", &extra));
        }
        let startup = raw_startup(&startup_params);
        let mut tcp = TcpStream::connect(p.addr).await.expect("connect");
        raw_login(&mut tcp, &startup).await;
        drop(tcp);
        let seen = relay.take();
        reached += seen.len();
        assert_only_user_and_database(&seen, &users, &context("wire", &user, &db, &extra));

        // The same bytes over the WebSocket.
        let mut ws = ws_tunnel(gw, &[]).await.expect("upgrade");
        raw_login(&mut ws, &startup).await;
        drop(ws);
        tokio::time::sleep(Duration::from_millis(20)).await;
        let seen = relay.take();
        reached += seen.len();
        assert_only_user_and_database(&seen, &users, &context("/v2", &user, &db, &extra));

        // /sql, every byte percent-encoded into the connection string.
        let query = format!("?application_name={}", pct(&extra));
        let a =
            http::sql(gw, &[conn_string(&user, PASSWORD, &db, &query)], &json!({"query": "select 1"})).await;
        let seen = relay.take();
        reached += seen.len();
        assert_only_user_and_database(&seen, &users, &context("/sql", &user, &db, &extra));
        assert!(a.status < 500, "{}: {} {}", context("/sql", &user, &db, &extra), a.status, a.text());
    }
    // A database PostgreSQL lacks is still a StartupMessage; each pool sends one.
    let clean_rounds = ROUNDS.div_ceil(4);
    assert!(reached >= clean_rounds, "seed {seed}: only {reached} StartupMessages reached the relay");
}

// ---- the TLS rules bind gateway logins as wire logins ----

/// A request over HTTPS to `gw` (trusting `certs`' CA); the status and the body.
async fn https_sql(
    certs: &TestCerts,
    gw: SocketAddr,
    headers: &[(String, String)],
    body: &str,
) -> (u16, String) {
    let tcp = TcpStream::connect(gw).await.expect("connect");
    let mut config = (*certs.client_config(false)).clone();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").expect("name");
    let mut tls = connector.connect(name, tcp).await.expect("TLS handshake");
    let mut req = format!(
        "POST /sql HTTP/1.1\r\nHost: {gw}\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    tls.write_all(req.as_bytes()).await.expect("write");
    let mut answer = Vec::new();
    let _ = tls.read_to_end(&mut answer).await;
    let text = String::from_utf8_lossy(&answer).into_owned();
    let status = text.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    (status, text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_mode_require_binds_the_gateway_as_the_wire() {
    let pg = start_pg();
    let certs = TestCerts::generate();
    let mut plain = ConfigBuilder::new(&pg).gateway("flush_interval = \"20ms\"");
    for l in certs.general_lines("require") {
        plain = plain.general(&l);
    }
    let p = TestProxy::start(&plain).await;
    let gw = p.gateway.expect("gateway");

    // The wire: a client without TLS is refused (28000), one with TLS gets in.
    let wire = common::connect(&p.conninfo(USER, PASSWORD, DB)).await.expect_err("refused without TLS");
    let wire = wire.as_db_error().expect("an ErrorResponse");
    assert_eq!(wire.code().code(), "28000");
    let (c, conn) = tokio_postgres::connect(
        &format!("{} sslmode=require", p.conninfo(USER, PASSWORD, DB)),
        certs.connector(),
    )
    .await
    .expect("TLS login");
    tokio::spawn(conn);
    c.simple_query("select 1").await.expect("query over TLS");

    // /sql over plain HTTP: refused the same way, before the password is looked at.
    let a = http::sql(gw, &[neon_auth(p.port(), USER, PASSWORD, DB)], &json!({"query": "select 1"})).await;
    assert_eq!((a.status, a.json()["code"].as_str()), (403, Some("28000")), "{}", a.text());
    assert!(a.json()["message"].as_str().is_some_and(|m| m.contains("TLS is required")), "{}", a.text());
    // Whoever it claims to be, or if it claims no one, as on the wire.
    let a = http::sql(gw, &[], &json!({"query": "select 1"})).await;
    assert_eq!((a.status, a.json()["code"].as_str()), (403, Some("28000")), "{}", a.text());

    // /v2 over plain HTTP: the session refuses the login as it refuses a plain TCP client.
    let mut ws = ws_tunnel(gw, &[]).await.expect("upgrade");
    let msgs = raw_login(&mut ws, &raw::startup(&[("user", USER), ("database", DB)])).await;
    let last = msgs.last().expect("an answer");
    assert_eq!((last.tag, last.sqlstate().as_deref()), (b'E', Some("28000")), "{msgs:?}");
    assert_eq!(last.fields().get(&'M').map(|m| m.starts_with("TLS is required")), Some(true));
    drop((c, ws));
    p.stop().await;

    // With the gateway on HTTPS the same request gets in.
    let p = TestProxy::start(&plain.clone().gateway("tls = true")).await;
    let gw = p.gateway.expect("gateway");
    let (status, text) =
        https_sql(&certs, gw, &[neon_auth(p.port(), USER, PASSWORD, DB)], r#"{"query": "select 1 as one"}"#)
            .await;
    assert_eq!(status, 200, "{text}");
    p.assert_no_leaks().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cleartext_passwords_over_plain_http_follow_allow_cleartext_without_tls() {
    let pg = start_pg();
    let certs = TestCerts::generate();
    let mut config = ConfigBuilder::new(&pg)
        .user(&format!("name = \"clear\"\npassword = \"{PASSWORD}\"\nauth_method = \"cleartext\""))
        .general("allow_cleartext_without_tls = false")
        .gateway("flush_interval = \"20ms\"");
    // TLS for those who ask (a cleartext user could never log in otherwise).
    for l in certs.general_lines("allow") {
        config = config.general(&l);
    }
    pg.create_user("clear", PASSWORD).expect("create role");
    let p = TestProxy::start(&config).await;
    let gw = p.gateway.expect("gateway");

    // The wire's answer to a cleartext password on a plain socket.
    let wire = common::connect(&p.conninfo("clear", PASSWORD, DB)).await.expect_err("refused");
    let wire = wire.as_db_error().expect("an ErrorResponse").clone();
    assert_eq!(wire.code().code(), "28000");

    // /sql always shows the password in clear: over plain HTTP, refused with the same words.
    for user in ["clear", USER] {
        let a =
            http::sql(gw, &[neon_auth(p.port(), user, PASSWORD, DB)], &json!({"query": "select 1"})).await;
        assert_eq!((a.status, a.json()["code"].as_str()), (403, Some("28000")), "{user}: {}", a.text());
        assert_eq!(a.json()["message"].as_str(), Some(wire.message()), "{user}");
    }
    p.stop().await;

    let p = TestProxy::start(&config.general("allow_cleartext_without_tls = true")).await;
    let gw = p.gateway.expect("gateway");
    let a =
        http::sql(gw, &[neon_auth(p.port(), "clear", PASSWORD, DB)], &json!({"query": "select 1 as one"}))
            .await;
    assert_eq!(a.status, 200, "{}", a.text());
    p.assert_no_leaks().await;
}

// ---- cross-origin requests ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn web_origins_are_refused_unless_allowed() {
    let pg = start_pg();
    let base = ConfigBuilder::new(&pg)
        .user(&format!("name = \"trusty\"\npassword = \"{PASSWORD}\"\nauth_method = \"trust\""))
        .general("allow_cleartext_without_tls = true")
        .gateway("flush_interval = \"20ms\"");
    pg.create_user("trusty", PASSWORD).expect("create role");
    pg.psql(DB, "grant create on schema public to trusty").expect("grant");
    let p = TestProxy::start(&base).await;
    let gw = p.gateway.expect("gateway");
    let evil = ("Origin".to_owned(), "https://evil.example".to_owned());
    let trusty = neon_auth(p.port(), "trusty", "", DB);

    // By default no web page may use the gateway: no CORS answer, and its SQL does not run.
    let pre = http::request(gw, "OPTIONS", "/sql", std::slice::from_ref(&evil), b"").await;
    assert_eq!(pre.header("access-control-allow-origin"), None);
    assert_eq!(pre.status, 403);
    let a =
        http::sql(gw, &[trusty.clone(), evil.clone()], &json!({"query": "create table pwned (x int)"})).await;
    assert_eq!((a.status, a.json()["code"].as_str()), (403, Some("28000")), "{}", a.text());
    assert_eq!(a.header("access-control-allow-origin"), None);
    let exists = pg.psql(DB, "select count(*) from pg_class where relname = 'pwned'").expect("look");
    assert_eq!(exists, "0", "the page's SQL ran");
    // Nor may it open the WebSocket (browsers send Origin; CORS does not cover WebSockets).
    assert_eq!(ws_tunnel(gw, &[("Origin", "https://evil.example")]).await.err(), Some(403));

    // Programs send no Origin and are not affected.
    let a = http::sql(gw, std::slice::from_ref(&trusty), &json!({"query": "select 1 as one"})).await;
    assert_eq!(a.status, 200, "{}", a.text());
    let mut ws = ws_tunnel(gw, &[]).await.expect("upgrade");
    let msgs = raw_login(&mut ws, &raw::startup(&[("user", "trusty"), ("database", DB)])).await;
    assert_eq!(msgs.last().map(|m| m.tag), Some(b'Z'), "{msgs:?}");
    drop(ws);
    p.stop().await;

    // An allowed origin gets in and is named back; others stay out.
    let p = TestProxy::start(&base.clone().gateway("cors_allowed_origins = [\"https://app.example\"]")).await;
    let gw = p.gateway.expect("gateway");
    let good = ("Origin".to_owned(), "https://app.example".to_owned());
    let a =
        http::sql(gw, &[neon_auth(p.port(), "trusty", "", DB), good], &json!({"query": "select 1 as one"}))
            .await;
    assert_eq!((a.status, a.header("access-control-allow-origin")), (200, Some("https://app.example")));
    let a =
        http::sql(gw, &[neon_auth(p.port(), "trusty", "", DB), evil.clone()], &json!({"query": "select 1"}))
            .await;
    assert_eq!(a.status, 403);
    assert!(ws_tunnel(gw, &[("Origin", "https://app.example")]).await.is_ok());
    p.stop().await;

    // "*" is a choice: every origin, as Neon answers.
    let p = TestProxy::start(&base.gateway("cors_allowed_origins = [\"*\"]")).await;
    let gw = p.gateway.expect("gateway");
    let pre = http::request(gw, "OPTIONS", "/sql", std::slice::from_ref(&evil), b"").await;
    assert_eq!((pre.status, pre.header("access-control-allow-origin")), (204, Some("*")));
    let a =
        http::sql(gw, &[neon_auth(p.port(), "trusty", "", DB), evil], &json!({"query": "select 1 as one"}))
            .await;
    assert_eq!(a.status, 200, "{}", a.text());
    p.assert_no_leaks().await;
}
