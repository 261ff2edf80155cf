//! TLS from pgvia to PostgreSQL (`server_tls_mode`), against a real PostgreSQL 15 serving
//! certificates made at test time: verify-full both ways, a certificate for another host or
//! from another CA refused, a server without TLS refused under `require`, a server asking
//! for a cleartext password refused under `require`, pgvia's client certificate accepted by
//! `hostssl ... cert`, transaction pooling over TLS servers; and (PostgreSQL 18) a SCRAM
//! iteration count above `server_scram_max_iterations` refused.

// Helpers outside #[test] functions unwrap too: a failed step is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use common::tls::TestCerts;
use common::{psql_tls, start_pg_with, text, ConfigBuilder, TestProxy, DB, PASSWORD, USER};
use harness::{Cluster, ClusterOptions, HbaAuth, PgVersion};

/// PostgreSQL 15 (the build with TLS) serving `cert`/`key`, with `auth` for TCP logins.
fn tls_pg(cert_pem: &str, key_pem: &str, auth: HbaAuth) -> Cluster {
    let opts = ClusterOptions::new(PgVersion::V15).ssl_pem(cert_pem, key_pem);
    if auth == HbaAuth::ScramSha256 {
        return start_pg_with(opts);
    }
    common::init_logging();
    let pg = Cluster::start(opts.auth(auth)).expect("start PostgreSQL");
    pg.create_user(USER, PASSWORD).expect("create role");
    pg.create_database(DB, USER).expect("create database");
    pg
}

/// pgvia with client TLS from `certs` and the `app` database's server_tls keys.
fn config(pg: &Cluster, certs: &TestCerts, server_tls: &str) -> ConfigBuilder {
    let [mode, cert, key] = certs.general_lines("require");
    ConfigBuilder::new(pg).general(&mode).general(&cert).general(&key).app_database(server_tls)
}

fn verify_full(certs: &TestCerts) -> String {
    format!("server_tls_mode = \"verify-full\"\nserver_tls_ca_file = \"{}\"", certs.ca_file.display())
}

/// psql with `sslmode=verify-full` to pgvia; returns (success, stdout, stderr).
async fn query(pg: &Cluster, proxy: &TestProxy, certs: &TestCerts, sql: &str) -> (bool, String, String) {
    let conninfo = format!(
        "{} sslmode=verify-full sslrootcert={}",
        proxy.conninfo(USER, PASSWORD, DB),
        certs.ca_file.display()
    );
    let out = psql_tls(pg, &conninfo, &["-At", "-c", sql], None).await;
    (out.status.success(), text(&out.stdout), text(&out.stderr))
}

/// Whether this backend's own connection uses TLS, as PostgreSQL sees it.
const BACKEND_SSL: &str = "select ssl from pg_stat_ssl where pid = pg_backend_pid()";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_full_from_psql_to_pgvia_and_from_pgvia_to_postgres() {
    let certs = TestCerts::generate();
    let (cert, key) = certs.server_pem();
    let pg = tls_pg(&cert, &key, HbaAuth::ScramSha256);
    let proxy = TestProxy::start(&config(&pg, &certs, &verify_full(&certs))).await;
    let (ok, out, err) = query(&pg, &proxy, &certs, BACKEND_SSL).await;
    assert!(ok, "{err}");
    assert_eq!(out.trim(), "t", "pgvia's connection to PostgreSQL is TLS");
    proxy.assert_no_leaks().await;
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_for_another_host_or_from_another_ca_is_refused() {
    let certs = TestCerts::generate();
    // Signed by the right CA, for a name that is not 127.0.0.1.
    let elsewhere = certs.issue("elsewhere", &["db.example.com"], "db.example.com");
    let pg = tls_pg(&elsewhere.cert_pem, &elsewhere.key_pem, HbaAuth::ScramSha256);
    let proxy = TestProxy::start(&config(&pg, &certs, &verify_full(&certs))).await;
    let (ok, _, err) = query(&pg, &proxy, &certs, "select 1").await;
    assert!(!ok);
    assert!(err.contains("TLS with server") && err.contains("verify-full"), "{err}");
    assert!(err.contains("not valid for name"), "the reason is named: {err}");
    proxy.stop().await;

    // verify-ca checks the chain only, so the same server is accepted.
    let ca_only =
        format!("server_tls_mode = \"verify-ca\"\nserver_tls_ca_file = \"{}\"", certs.ca_file.display());
    let proxy = TestProxy::start(&config(&pg, &certs, &ca_only)).await;
    let (ok, out, err) = query(&pg, &proxy, &certs, BACKEND_SSL).await;
    assert!(ok && out.trim() == "t", "{out} {err}");
    proxy.stop().await;

    // A certificate from another CA fails verify-ca too.
    let other = TestCerts::generate();
    let (cert, key) = other.server_pem();
    let pg2 = tls_pg(&cert, &key, HbaAuth::ScramSha256);
    let proxy = TestProxy::start(&config(&pg2, &certs, &ca_only)).await;
    let (ok, _, err) = query(&pg2, &proxy, &certs, "select 1").await;
    assert!(!ok);
    assert!(err.contains("TLS with server") && err.contains("invalid peer certificate"), "{err}");
    // require does not check the certificate at all, as libpq's require.
    proxy.stop().await;
    let proxy = TestProxy::start(&config(&pg2, &certs, "server_tls_mode = \"require\"")).await;
    let (ok, out, err) = query(&pg2, &proxy, &certs, BACKEND_SSL).await;
    assert!(ok && out.trim() == "t", "{out} {err}");
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_without_tls_is_refused_under_require_and_used_under_prefer() {
    let certs = TestCerts::generate();
    let pg = start_pg_with(ClusterOptions::new(PgVersion::V15));
    let proxy = TestProxy::start(&config(&pg, &certs, "server_tls_mode = \"require\"")).await;
    let (ok, _, err) = query(&pg, &proxy, &certs, "select 1").await;
    assert!(!ok);
    assert!(err.contains("does not accept TLS") && err.contains("require"), "{err}");
    proxy.stop().await;

    let proxy = TestProxy::start(&config(&pg, &certs, "server_tls_mode = \"prefer\"")).await;
    let (ok, out, err) = query(&pg, &proxy, &certs, "select 1").await;
    assert!(ok && out.trim() == "1", "{out} {err}");
    proxy.assert_no_leaks().await;
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cleartext_password_request_is_refused_under_require() {
    let certs = TestCerts::generate();
    let (cert, key) = certs.server_pem();
    // pg_hba.conf says `password`: PostgreSQL asks for the password in clear text.
    let pg = tls_pg(&cert, &key, HbaAuth::Password);
    let proxy = TestProxy::start(&config(&pg, &certs, &verify_full(&certs))).await;
    let (ok, _, err) = query(&pg, &proxy, &certs, "select 1").await;
    assert!(!ok);
    assert!(err.contains("cleartext") && err.contains("server_allow_plain_password"), "{err}");
    proxy.stop().await;

    // Allowed when configured: the password goes inside the verified TLS session.
    let allowed = format!("{}\nserver_allow_plain_password = true", verify_full(&certs));
    let proxy = TestProxy::start(&config(&pg, &certs, &allowed)).await;
    let (ok, out, err) = query(&pg, &proxy, &certs, BACKEND_SSL).await;
    assert!(ok && out.trim() == "t", "{out} {err}");
    proxy.assert_no_leaks().await;
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pgvia_logs_in_to_postgres_with_a_client_certificate() {
    let certs = TestCerts::generate();
    let (cert, key) = certs.server_pem();
    let ca = std::fs::read_to_string(&certs.ca_file).unwrap();
    // pg_hba.conf: `hostssl all all 127.0.0.1/32 cert`: only a certificate naming the role.
    let opts = ClusterOptions::new(PgVersion::V15).ssl_pem(cert, key).ssl_ca(ca);
    let pg = Cluster::start(opts.auth(HbaAuth::Cert)).expect("start PostgreSQL");
    pg.create_user(USER, PASSWORD).unwrap();
    pg.create_database(DB, USER).unwrap();
    let client_cert = certs.issue("pgvia-app", &[], USER);
    let with_cert = format!(
        "{}\nserver_tls_cert_file = \"{}\"\nserver_tls_key_file = \"{}\"",
        verify_full(&certs),
        client_cert.cert_file.display(),
        client_cert.key_file.display()
    );
    let proxy = TestProxy::start(&config(&pg, &certs, &with_cert)).await;
    let (ok, out, err) =
        query(&pg, &proxy, &certs, "select ssl, client_dn from pg_stat_ssl where pid = pg_backend_pid()")
            .await;
    assert!(ok, "{err}");
    assert_eq!(out.trim(), format!("t|/CN={USER}"), "PostgreSQL saw pgvia's certificate");
    proxy.assert_no_leaks().await;
    proxy.stop().await;

    // Without it PostgreSQL refuses the login, and the client hears why.
    let proxy = TestProxy::start(&config(&pg, &certs, &verify_full(&certs))).await;
    let (ok, _, err) = query(&pg, &proxy, &certs, "select 1").await;
    assert!(!ok && err.contains("certificate"), "{err}");
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transaction_pooling_over_tls_servers_moves_data_and_notices_dead_ones() {
    let certs = TestCerts::generate();
    let (cert, key) = certs.server_pem();
    let pg = tls_pg(&cert, &key, HbaAuth::ScramSha256);
    // Clients in plain TCP here (tokio-postgres without TLS); servers over TLS.
    let builder = config(&pg, &certs, &verify_full(&certs))
        .general("tls_mode = \"allow\"")
        .pool("pool_mode = \"transaction\"")
        .pool("pool_size = 1");
    let proxy = TestProxy::start(&builder).await;
    let client = proxy.connect(USER, PASSWORD, DB).await;
    // Several MB each way through the TLS halves the relay waits on.
    let row = client
        .query_one(
            "select count(*), sum(length(repeat('x', 100) || g::text)) from generate_series(1, 100000) g",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, i64>(0), 100_000);
    let rows = client.query("select repeat('y', 1000) from generate_series(1, 5000)", &[]).await.unwrap();
    assert_eq!(rows.len(), 5000);
    let big = "z".repeat(4 << 20);
    let back: i32 = client.query_one("select length($1::text)", &[&big]).await.unwrap().get(0);
    assert_eq!(back, 4 << 20);

    // The idle TLS server is terminated from outside: the next checkout sees it gone (its
    // FATAL arrives encrypted) and the query runs on a new one.
    let pid: i32 = client.query_one("select pg_backend_pid()", &[]).await.unwrap().get(0);
    pg.psql("postgres", &format!("select pg_terminate_backend({pid})")).unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let again: i32 = client.query_one("select pg_backend_pid()", &[]).await.unwrap().get(0);
    assert_ne!(again, pid);
    drop(client);
    proxy.assert_no_leaks().await;
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_asking_for_too_many_scram_iterations_is_refused() {
    // PostgreSQL 16+ lets scram_iterations raise the count stored with a new password.
    let pg = start_pg_with(ClusterOptions::new(PgVersion::V18).set("scram_iterations", "5000"));
    let verifier = pg.psql("postgres", "select rolpassword from pg_authid where rolname = 'app'").unwrap();
    assert!(verifier.starts_with("SCRAM-SHA-256$5000:"), "{verifier}");
    let proxy =
        TestProxy::start(&ConfigBuilder::new(&pg).general("server_scram_max_iterations = 4999")).await;
    let err = common::connect(&proxy.conninfo(USER, PASSWORD, DB)).await.unwrap_err();
    let message = err.as_db_error().map(|d| d.message().to_owned()).unwrap_or_default();
    assert!(message.contains("5000 SCRAM iterations") && message.contains("(4999)"), "{err:?}");
    proxy.stop().await;

    let proxy =
        TestProxy::start(&ConfigBuilder::new(&pg).general("server_scram_max_iterations = 5000")).await;
    let client = proxy.connect(USER, PASSWORD, DB).await;
    client.simple_query("select 1").await.unwrap();
    drop(client);
    proxy.assert_no_leaks().await;
    proxy.stop().await;
}
