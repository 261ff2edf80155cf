//! Client authentication: SCRAM, MD5, cleartext over TLS and TLS itself, with psql and
//! tokio-postgres; failures carry PostgreSQL's SQLSTATEs and messages; `tls_mode = require`
//! keeps plaintext clients out.

// Helpers outside #[test] functions unwrap too: a failed step is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use common::raw::RawConn;
use common::tls::TestCerts;
use common::{
    connect, direct_conninfo, psql, psql_tls, sqlstate, start_pg, text, ConfigBuilder, TestProxy, DB,
    PASSWORD, USER,
};
use harness::Cluster;

/// Users pgvia knows, each with its own way of proving the password. All exist in
/// PostgreSQL as SCRAM roles, which pgvia logs in to with the plaintext password.
const MD5_USER: (&str, &str) = ("md5user", "md5-pass");
const MD5_HASH_USER: (&str, &str) = ("md5hash", "hashed-pass");
const VERIFIER_USER: (&str, &str) = ("verifier", "verifier-pass");
const CLEAR_USER: (&str, &str) = ("clear", "clear-pass");

fn setup_users(pg: &Cluster) {
    for (u, p) in [MD5_USER, MD5_HASH_USER, VERIFIER_USER, CLEAR_USER] {
        pg.create_user(u, p).unwrap();
    }
    pg.psql(DB, "grant connect on database app to public").unwrap();
}

fn config(pg: &Cluster, certs: &TestCerts, tls_mode: &str) -> ConfigBuilder {
    // A SCRAM verifier as stored by PostgreSQL, and an MD5 hash as `md5(password || user)`.
    let verifier = pg
        .psql("postgres", &format!("select rolpassword from pg_authid where rolname = '{}'", VERIFIER_USER.0))
        .unwrap();
    assert!(verifier.starts_with("SCRAM-SHA-256$"), "{verifier}");
    let md5 = postgres_protocol::password::md5(MD5_HASH_USER.1.as_bytes(), MD5_HASH_USER.0);
    let [mode, cert, key] = certs.general_lines(tls_mode);
    ConfigBuilder::new(pg)
        .general(&mode)
        .general(&cert)
        .general(&key)
        .general("auth_method = \"scram-sha-256\"")
        .user(&format!("name = \"{}\"\npassword = \"{}\"\nauth_method = \"md5\"", MD5_USER.0, MD5_USER.1))
        .user(&format!(
            "name = \"{}\"\npassword = \"{md5}\"\nserver_password = \"{}\"\nauth_method = \"md5\"",
            MD5_HASH_USER.0, MD5_HASH_USER.1
        ))
        .user(&format!(
            "name = \"{}\"\npassword = \"{verifier}\"\nserver_password = \"{}\"",
            VERIFIER_USER.0, VERIFIER_USER.1
        ))
        .user(&format!(
            "name = \"{}\"\npassword = \"{}\"\nauth_method = \"cleartext\"",
            CLEAR_USER.0, CLEAR_USER.1
        ))
}

fn tls_conninfo(proxy: &TestProxy, certs: &TestCerts, user: &str, password: &str) -> String {
    format!(
        "{} sslmode=verify-full sslrootcert={}",
        proxy.conninfo(user, password, DB),
        certs.ca_file.display()
    )
}

/// Logs in with psql (`select current_user` and `\conninfo`) and returns what it printed.
async fn psql_login(pg: &Cluster, conninfo: &str, user: &str) -> String {
    let args = ["-At", "-c", "select current_user", "-c", "\\conninfo"];
    let out = if conninfo.contains("sslmode=verify-full") {
        psql_tls(pg, conninfo, &args, None).await
    } else {
        psql(pg, conninfo, &args, None).await
    };
    common::assert_success(&format!("psql login as {user}"), &out);
    let stdout = text(&out.stdout);
    assert_eq!(stdout.lines().next(), Some(user), "{stdout}");
    stdout
}

fn says_ssl(conninfo_output: &str) -> bool {
    // psql up to 17 prints "SSL connection (protocol: ...)"; 18 prints a table row "SSL Connection|true".
    let lower = conninfo_output.to_lowercase();
    lower.contains("ssl connection (") || lower.contains("ssl connection|true")
}

async fn tokio_login(proxy: &TestProxy, certs: Option<&TestCerts>, user: &str, password: &str) {
    let client = match certs {
        None => connect(&proxy.conninfo(user, password, DB)).await.unwrap(),
        Some(certs) => {
            let tls = certs.connector();
            let conninfo = format!("{} sslmode=require", proxy.conninfo(user, password, DB));
            let (client, conn) = tokio_postgres::connect(&conninfo, tls.clone()).await.unwrap();
            tokio::spawn(conn);
            assert!(tls.handshake_done(), "TLS was not used");
            client
        }
    };
    let who: String = client.query_one("select current_user::text", &[]).await.unwrap().get(0);
    assert_eq!(who, user);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scram_md5_cleartext_and_tls_logins() {
    let pg = start_pg();
    setup_users(&pg);
    let certs = TestCerts::generate();
    let proxy = TestProxy::start(&config(&pg, &certs, "allow")).await;

    // The method pgvia asks for: 10 = SASL (SCRAM), 5 = MD5.
    for ((user, password), method) in
        [((USER, PASSWORD), 10), (VERIFIER_USER, 10), (MD5_USER, 5), (MD5_HASH_USER, 5)]
    {
        let conn = RawConn::login(proxy.addr, user, password, DB).await.unwrap();
        assert_eq!(conn.auth_requests.first(), Some(&method), "auth request for {user}");
        assert_eq!(conn.auth_requests.last(), Some(&0), "AuthenticationOk for {user}");

        let plain = format!("{} sslmode=disable", proxy.conninfo(user, password, DB));
        let out = psql_login(&pg, &plain, user).await;
        assert!(!says_ssl(&out), "{out}");
        tokio_login(&proxy, None, user, password).await;

        let out = psql_login(&pg, &tls_conninfo(&proxy, &certs, user, password), user).await;
        assert!(says_ssl(&out), "psql did not use TLS: {out}");
        tokio_login(&proxy, Some(&certs), user, password).await;
    }

    // Cleartext: over TLS only.
    let (user, password) = CLEAR_USER;
    let out = psql_login(&pg, &tls_conninfo(&proxy, &certs, user, password), user).await;
    assert!(says_ssl(&out), "{out}");
    tokio_login(&proxy, Some(&certs), user, password).await;
    let err = connect(&proxy.conninfo(user, password, DB)).await.unwrap_err();
    assert_eq!(sqlstate(&err).as_deref(), Some("28000"), "{err}");
    // Refused before any password is asked for, so none travels in the clear.
    let mut raw = RawConn::connect(proxy.addr).await.unwrap();
    raw.send(&common::raw::startup(&[("user", user), ("database", DB)])).await;
    let first = raw.recv().await.unwrap();
    assert_eq!(first.tag, b'E', "expected an immediate refusal, got {:?}", char::from(first.tag));
    assert_eq!(first.sqlstate().as_deref(), Some("28000"));

    proxy.assert_no_leaks().await;
    proxy.stop().await;
}

/// (severity, SQLSTATE, message) of a refused raw login.
async fn refusal(
    addr: std::net::SocketAddr,
    user: &str,
    password: &str,
    db: &str,
) -> (String, String, String) {
    let msg = match RawConn::login(addr, user, password, db).await {
        Ok(_) => panic!("login as {user} to {db} at {addr} succeeded"),
        Err(e) => e.refused(),
    };
    let f = msg.fields();
    (f[&'S'].clone(), f[&'C'].clone(), f[&'M'].clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_logins_look_like_postgres() {
    let pg = start_pg();
    setup_users(&pg);
    let certs = TestCerts::generate();
    let proxy = TestProxy::start(&config(&pg, &certs, "allow")).await;
    let direct: std::net::SocketAddr = format!("{}:{}", pg.host(), pg.port()).parse().unwrap();

    let wrong = refusal(proxy.addr, USER, "wrong", DB).await;
    assert_eq!(
        wrong,
        ("FATAL".into(), "28P01".into(), format!("password authentication failed for user \"{USER}\""))
    );
    assert_eq!(wrong, refusal(direct, USER, "wrong", DB).await, "same as PostgreSQL");

    // An unknown user cannot be told apart from a wrong password.
    let unknown = refusal(proxy.addr, "nobody", "whatever", DB).await;
    assert_eq!(
        unknown,
        ("FATAL".into(), "28P01".into(), "password authentication failed for user \"nobody\"".into())
    );
    assert_eq!(unknown, refusal(direct, "nobody", "whatever", DB).await, "same as PostgreSQL");
    // ... and it is asked for a password just the same.
    let mut raw = RawConn::connect(proxy.addr).await.unwrap();
    raw.send(&common::raw::startup(&[("user", "nobody"), ("database", DB)])).await;
    let first = raw.recv().await.unwrap();
    assert_eq!(
        (first.tag, &first.body[..4]),
        (b'R', &10i32.to_be_bytes()[..]),
        "SASL requested for unknown user"
    );

    let md5_wrong = refusal(proxy.addr, MD5_USER.0, "wrong", DB).await;
    assert_eq!(md5_wrong.1, "28P01");
    assert_eq!(md5_wrong.2, format!("password authentication failed for user \"{}\"", MD5_USER.0));

    let no_db = refusal(proxy.addr, USER, PASSWORD, "nope").await;
    assert_eq!(no_db, ("FATAL".into(), "3D000".into(), "database \"nope\" does not exist".into()));
    assert_eq!(no_db, refusal(direct, USER, PASSWORD, "nope").await, "same as PostgreSQL");

    // The same through the clients.
    let err = connect(&proxy.conninfo(USER, "wrong", DB)).await.unwrap_err();
    assert_eq!(sqlstate(&err).as_deref(), Some("28P01"));
    let err = connect(&proxy.conninfo(USER, PASSWORD, "nope")).await.unwrap_err();
    assert_eq!(sqlstate(&err).as_deref(), Some("3D000"));
    let out = psql(&pg, &proxy.conninfo(USER, "wrong", DB), &["-c", "select 1"], None).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("FATAL:  password authentication failed for user \"app\""), "{out:?}");
    let out = psql(&pg, &direct_conninfo(&pg, USER, "wrong", DB), &["-c", "select 1"], None).await;
    assert!(text(&out.stderr).contains("FATAL:  password authentication failed for user \"app\""), "{out:?}");

    // Failed logins hold no server.
    assert!(proxy.app.pools.all().iter().all(|p| p.server_count() == 0));
    proxy.stop().await;
}

async fn require_tls_proxy() -> (Cluster, TestCerts, TestProxy) {
    let pg = start_pg();
    setup_users(&pg);
    let certs = TestCerts::generate();
    let proxy = TestProxy::start(&config(&pg, &certs, "require")).await;
    (pg, certs, proxy)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_required_admits_only_tls_clients() {
    let (pg, certs, proxy) = require_tls_proxy().await;

    // Plaintext clients do not get in.
    assert!(connect(&proxy.conninfo(USER, PASSWORD, DB)).await.is_err());
    let plain = format!("{} sslmode=disable", proxy.conninfo(USER, PASSWORD, DB));
    let out = psql(&pg, &plain, &["-c", "select 1"], None).await;
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(RawConn::login(proxy.addr, USER, PASSWORD, DB).await.is_err());

    // TLS clients do.
    let out = psql_login(&pg, &tls_conninfo(&proxy, &certs, USER, PASSWORD), USER).await;
    assert!(says_ssl(&out), "{out}");
    tokio_login(&proxy, Some(&certs), USER, PASSWORD).await;
    // libpq's default (sslmode=prefer) asks for TLS first, so it gets in too.
    let out = psql_tls(&pg, &proxy.conninfo(USER, PASSWORD, DB), &["-At", "-c", "select 1"], None).await;
    common::assert_success("psql with sslmode=prefer", &out);

    proxy.assert_no_leaks().await;
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_required_refusal_carries_sqlstate() {
    let (_pg, _certs, proxy) = require_tls_proxy().await;
    // Refused with an error the client can show, not just a closed socket.
    let (severity, code, _) = refusal(proxy.addr, USER, PASSWORD, DB).await;
    assert_eq!(severity, "FATAL");
    assert!(code == "28000" || code == "08P01", "{code}");
    let err = connect(&proxy.conninfo(USER, PASSWORD, DB)).await.unwrap_err();
    let code = sqlstate(&err);
    assert!(matches!(code.as_deref(), Some("28000" | "08P01")), "plaintext client got {err:?}");
    proxy.stop().await;
}
