//! Unix-domain sockets both ways (psql over pgvia's socket; pgvia to PostgreSQL over
//! PostgreSQL's socket, with cancels going the same way), and protocol 3.2 with libpq 18:
//! negotiated, not downgraded, with pgvia's 32-byte cancel key, and psql's cancel working.

// Helpers outside #[test] functions unwrap too: a failed step is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use common::{psql, start_pg, text, ConfigBuilder, TestProxy, DB, PASSWORD, USER};
use harness::{Cluster, PgVersion};

/// pgvia listening on a socket in a fresh directory, reaching PostgreSQL over its socket.
async fn unix_proxy(pg: &Cluster) -> (tempfile::TempDir, TestProxy) {
    let dir = tempfile::Builder::new().prefix("pgvia-sock-").tempdir().unwrap();
    let config = ConfigBuilder::new(pg).general(&format!("unix_socket_dir = \"{}\"", dir.path().display()));
    // The app database's host becomes PostgreSQL's socket directory.
    let toml = config.toml().replacen(
        &format!("host = \"{}\"", pg.host()),
        &format!("host = \"{}\"", pg.socket_dir().display()),
        1,
    );
    (dir, TestProxy::start_toml(&toml).await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn psql_over_pgvias_socket_and_pgvia_over_postgres_socket() {
    let pg = start_pg();
    let (dir, proxy) = unix_proxy(&pg).await;
    let socket = proxy.unix_socket.clone().expect("pgvia listens on a Unix socket");
    assert_eq!(socket, dir.path().join(format!(".s.PGSQL.{}", proxy.port())));

    // psql finds pgvia's socket from host=<dir> and port, as it finds PostgreSQL's. On the
    // server, inet_client_addr() is NULL only for a Unix-socket connection: pgvia's.
    let conninfo = format!(
        "host={} port={} user={USER} password={PASSWORD} dbname={DB}",
        dir.path().display(),
        proxy.port()
    );
    let out = psql(
        &pg,
        &conninfo,
        &["-At", "-c", "select inet_client_addr() is null, current_user", "-c", "\\conninfo"],
        None,
    )
    .await;
    common::assert_success("psql over pgvia's Unix socket", &out);
    let stdout = text(&out.stdout);
    assert_eq!(stdout.lines().next(), Some("t|app"), "{stdout}");
    // psql 15 says "via socket in", psql 18 prints a "Socket Directory" row.
    assert!(
        stdout.to_lowercase().contains("socket") && stdout.contains(&dir.path().display().to_string()),
        "{stdout}"
    );

    // A cancel reaches a server behind a Unix socket.
    let client = proxy.connect(USER, PASSWORD, DB).await;
    let token = client.cancel_token();
    let started = Instant::now();
    let sleep = tokio::spawn(async move { client.simple_query("select pg_sleep(30)").await.map(drop) });
    tokio::time::sleep(Duration::from_millis(500)).await;
    token.cancel_query(tokio_postgres::NoTls).await.expect("send cancel");
    let err = sleep.await.unwrap().expect_err("the query was cancelled");
    assert_eq!(common::sqlstate(&err).as_deref(), Some("57014"), "{err:?}");
    assert!(started.elapsed() < Duration::from_secs(20));

    proxy.assert_no_leaks().await;
    proxy.stop().await;
    assert!(!socket.exists(), "the socket file is removed at shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_socket_in_use_is_not_taken_over_and_a_stale_one_is_replaced() {
    let pg = start_pg();
    let (dir, proxy) = unix_proxy(&pg).await;
    let port = proxy.port();
    let toml =
        ConfigBuilder::new(&pg).general(&format!("unix_socket_dir = \"{}\"", dir.path().display())).toml();
    let mut config =
        pgvia::config::Config::parse(&toml, std::path::Path::new("/tmp/pgvia-test.toml")).unwrap();
    config.general.listen_port = port;
    // The TCP port is taken too, by the first pgvia; either way binding fails, not the socket
    // of the running pgvia.
    assert!(pgvia::Proxy::bind(config).await.is_err());
    assert!(proxy.unix_socket.as_ref().unwrap().exists());
    proxy.stop().await;

    // A file left behind by a process that is gone is replaced.
    let stale = dir.path().join(".s.PGSQL.1");
    drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
    assert!(stale.exists());
    let socket = pgvia::net::listener::bind_unix(dir.path(), 1).expect("stale socket replaced");
    assert!(std::os::unix::net::UnixStream::connect(&socket.path).is_ok());
    assert!(pgvia::net::listener::bind_unix(dir.path(), 1).is_err(), "a live socket is not taken");
}

/// psql from the PostgreSQL 18 binaries (libpq 18).
fn psql18() -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(harness::pg_bin(PgVersion::V18, "psql").expect("psql 18"));
    for var in harness::LIBPQ_ENV {
        cmd.env_remove(var);
    }
    cmd.env("PGCONNECT_TIMEOUT", "10").kill_on_drop(true);
    cmd
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn libpq_18_negotiates_protocol_3_2_and_its_cancel_works() {
    let pg = start_pg();
    let proxy = TestProxy::start(&ConfigBuilder::new(&pg).pool("pool_mode = \"transaction\"")).await;
    let conninfo = format!("{} max_protocol_version=3.2", proxy.conninfo(USER, PASSWORD, DB));

    let mut cmd = psql18();
    cmd.arg("-X").arg("-d").arg(&conninfo).args(["-c", "\\conninfo"]);
    let out = common::run(cmd, None).await;
    common::assert_success("psql 18 with max_protocol_version=3.2", &out);
    let stdout = text(&out.stdout);
    assert!(stdout.contains("Protocol Version") && stdout.contains("3.2"), "3.2 negotiated: {stdout}");

    // psql sends its cancel on SIGINT, with the 32-byte key pgvia gave it.
    cancel_with_psql_18(&pg, &conninfo).await;

    // The default (3.0) still works, with the 4-byte key.
    let mut cmd = psql18();
    cmd.arg("-X").arg("-d").arg(proxy.conninfo(USER, PASSWORD, DB)).args(["-c", "\\conninfo"]);
    let out = common::run(cmd, None).await;
    common::assert_success("psql 18 default protocol", &out);
    assert!(text(&out.stdout).contains("3.0"), "{}", text(&out.stdout));

    proxy.assert_no_leaks().await;
    proxy.stop().await;

    // Session mode: the client's key carries its server's real pid, and pgvia's 32-byte secret.
    let proxy = TestProxy::start(&ConfigBuilder::new(&pg)).await;
    let conninfo = format!("{} max_protocol_version=3.2", proxy.conninfo(USER, PASSWORD, DB));
    cancel_with_psql_18(&pg, &conninfo).await;
    proxy.assert_no_leaks().await;
    proxy.stop().await;
}

/// Runs `pg_sleep(30)` in psql 18 and interrupts it: psql sends the cancel.
async fn cancel_with_psql_18(pg: &Cluster, conninfo: &str) {
    // psql sends its cancel on SIGINT, with the 32-byte key pgvia gave it.
    let mut cmd = psql18();
    cmd.arg("-X").arg("-d").arg(conninfo).args(["-c", "select pg_sleep(30)"]);
    cmd.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped());
    let child = cmd.spawn().expect("spawn psql 18");
    let pid = child.id().expect("psql pid");
    let started = Instant::now();
    wait_for_sleep(pg).await;
    let kill = std::process::Command::new("kill").args(["-INT", &pid.to_string()]).status().unwrap();
    assert!(kill.success());
    let out = tokio::time::timeout(Duration::from_secs(20), child.wait_with_output()).await.unwrap().unwrap();
    let stderr = text(&out.stderr);
    assert!(stderr.contains("canceling statement due to user request"), "{stderr}");
    assert!(started.elapsed() < Duration::from_secs(20));
}

/// Waits until a backend is in pg_sleep.
async fn wait_for_sleep(pg: &Cluster) {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let n = pg
            .psql("postgres", "select count(*) from pg_stat_activity where query like 'select pg_sleep%' and state = 'active'")
            .unwrap();
        if n.trim() != "0" {
            return;
        }
        assert!(Instant::now() < deadline, "the query never started");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newer_minor_version_is_negotiated_down_to_3_2() {
    use common::raw::{untagged, RawConn};
    let pg = start_pg();
    let proxy = TestProxy::start(&ConfigBuilder::new(&pg)).await;
    // 3.5 with an unknown protocol option: NegotiateProtocolVersion says 3.2 and names it.
    let mut conn = RawConn::connect(proxy.addr).await.unwrap();
    let mut body = Vec::new();
    for (k, v) in [("user", USER), ("database", DB), ("_pq_.unknown", "x")] {
        body.extend_from_slice(k.as_bytes());
        body.push(0);
        body.extend_from_slice(v.as_bytes());
        body.push(0);
    }
    body.push(0);
    conn.send(&untagged((3 << 16) | 5, &body)).await;
    let first = conn.recv().await.expect("a reply");
    assert_eq!(first.tag, b'v', "{first:?}");
    assert_eq!(&first.body[..4], &2u32.to_be_bytes(), "newest minor version: 2");
    assert_eq!(&first.body[4..8], &1u32.to_be_bytes());
    assert_eq!(&first.body[8..], b"_pq_.unknown\0");
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_keys_are_32_bytes_under_3_2_and_4_under_3_0() {
    use common::raw::{untagged, RawConn};
    let pg = start_pg();
    // Trust in pgvia keeps the raw login short; pgvia still logs in to PostgreSQL with SCRAM.
    let toml = ConfigBuilder::new(&pg).pool("pool_mode = \"transaction\"").toml().replacen(
        &format!("password = \"{PASSWORD}\""),
        &format!("password = \"{PASSWORD}\"\nauth_method = \"trust\""),
        1,
    );
    let proxy = TestProxy::start_toml(&toml).await;
    for (minor, secret_len) in [(0, 4), (2, 32)] {
        let mut conn = RawConn::connect(proxy.addr).await.unwrap();
        let mut body = Vec::new();
        for (k, v) in [("user", USER), ("database", DB)] {
            body.extend_from_slice(k.as_bytes());
            body.push(0);
            body.extend_from_slice(v.as_bytes());
            body.push(0);
        }
        body.push(0);
        conn.send(&untagged((3 << 16) | minor, &body)).await;
        let mut key = None;
        loop {
            let msg = conn.recv().await.expect("login messages");
            assert_ne!(msg.tag, b'v', "3.{minor} is taken as asked, not negotiated");
            assert_ne!(msg.tag, b'E', "{:?}", msg.fields());
            if msg.tag == b'K' {
                key = Some(msg.body.clone());
            }
            if msg.tag == b'Z' {
                break;
            }
        }
        let key = key.expect("BackendKeyData");
        assert_eq!(key.len(), 4 + secret_len, "protocol 3.{minor}");
    }
    proxy.stop().await;
}
