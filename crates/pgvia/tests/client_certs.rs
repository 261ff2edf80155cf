//! Client certificates (`tls_mode = verify-full`, the `cert` auth method) with psql, direct
//! TLS from clients (ALPN `postgresql`), and pgvia using direct TLS and a client certificate
//! towards a server (another pgvia standing in for PostgreSQL 17+, which the test machine's
//! TLS-capable PostgreSQL 15 predates).

// Helpers outside #[test] functions unwrap too: a failed step is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use common::tls::{Issued, TestCerts};
use common::{psql_tls, start_pg, text, ConfigBuilder, TestProxy, DB, PASSWORD, USER};
use harness::{Cluster, ClusterOptions, PgVersion};
use tokio_postgres::NoTls;

/// The server's message, or the error's text when there is none.
fn message(e: &tokio_postgres::Error) -> String {
    e.as_db_error().map_or_else(|| e.to_string(), |d| d.message().to_owned())
}

fn tls_config(pg: &Cluster, certs: &TestCerts, mode: &str) -> ConfigBuilder {
    let [mode, cert, key] = certs.general_lines(mode);
    ConfigBuilder::new(pg)
        .general(&mode)
        .general(&cert)
        .general(&key)
        .general(&format!("client_tls_ca_file = \"{}\"", certs.ca_file.display()))
}

/// psql with `sslmode=verify-full`, a client certificate if given, and never a password
/// prompt; returns (success, stdout, stderr).
async fn psql_cert(
    pg: &Cluster,
    proxy: &TestProxy,
    certs: &TestCerts,
    user: &str,
    password: Option<&str>,
    client: Option<&Issued>,
) -> (bool, String, String) {
    let mut conninfo = format!(
        "host=127.0.0.1 port={} user={user} dbname={DB} sslmode=verify-full sslrootcert={}",
        proxy.port(),
        certs.ca_file.display()
    );
    if let Some(p) = password {
        conninfo.push_str(&format!(" password={p}"));
    }
    if let Some(c) = client {
        conninfo.push_str(&format!(" sslcert={} sslkey={}", c.cert_file.display(), c.key_file.display()));
    }
    let out = psql_tls(pg, &conninfo, &["-w", "-At", "-c", "select current_user"], None).await;
    (out.status.success(), text(&out.stdout), text(&out.stderr))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_full_requires_a_certificate_naming_the_user() {
    let pg = start_pg();
    let certs = TestCerts::generate();
    let app = certs.issue("app", &[], USER);
    let mallory = certs.issue("mallory", &[], "mallory");
    let proxy = TestProxy::start(&tls_config(&pg, &certs, "verify-full")).await;

    let (ok, out, err) = psql_cert(&pg, &proxy, &certs, USER, Some(PASSWORD), Some(&app)).await;
    assert!(ok && out.trim() == USER, "{out} {err}");

    // Another user's certificate: 28000, and the same words for a user that does not exist.
    let (ok, _, err) = psql_cert(&pg, &proxy, &certs, USER, Some(PASSWORD), Some(&mallory)).await;
    assert!(!ok && err.contains("certificate authentication failed for user \"app\""), "{err}");
    let (ok, _, err) = psql_cert(&pg, &proxy, &certs, "nobody", Some(PASSWORD), Some(&mallory)).await;
    assert!(!ok && err.contains("certificate authentication failed for user \"nobody\""), "{err}");

    // No certificate: the handshake itself fails.
    let (ok, _, err) = psql_cert(&pg, &proxy, &certs, USER, Some(PASSWORD), None).await;
    assert!(!ok && err.contains("certificate"), "{err}");

    // A certificate from another CA: refused in the handshake too.
    let stranger = TestCerts::generate().issue("stranger", &[], USER);
    let (ok, _, err) = psql_cert(&pg, &proxy, &certs, USER, Some(PASSWORD), Some(&stranger)).await;
    assert!(!ok, "{err}");

    proxy.assert_no_leaks().await;
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cert_auth_logs_in_by_certificate_without_a_password() {
    let pg = start_pg();
    let certs = TestCerts::generate();
    let app = certs.issue("app", &[], USER);
    let mallory = certs.issue("mallory", &[], "mallory");
    // The user's password is what pgvia logs in to PostgreSQL with; the client shows none.
    let toml = tls_config(&pg, &certs, "require").toml().replacen(
        &format!("password = \"{PASSWORD}\""),
        &format!("password = \"{PASSWORD}\"\nauth_method = \"cert\""),
        1,
    );
    let proxy = TestProxy::start_toml(&toml).await;

    let (ok, out, err) = psql_cert(&pg, &proxy, &certs, USER, None, Some(&app)).await;
    assert!(ok && out.trim() == USER, "{out} {err}");
    let (ok, _, err) = psql_cert(&pg, &proxy, &certs, USER, None, Some(&mallory)).await;
    assert!(!ok && err.contains("certificate authentication failed for user \"app\""), "{err}");
    // Certificates are optional under `require`, so no certificate gets the same refusal.
    let (ok, _, err) = psql_cert(&pg, &proxy, &certs, USER, None, None).await;
    assert!(!ok && err.contains("certificate authentication failed for user \"app\""), "{err}");

    proxy.assert_no_leaks().await;
    proxy.stop().await;
}

/// Logs in over direct TLS (no SSLRequest), offering ALPN `postgresql` or not.
async fn direct_login(
    proxy: &TestProxy,
    certs: &TestCerts,
    alpn: bool,
) -> Result<String, tokio_postgres::Error> {
    let tcp = tokio::net::TcpStream::connect(proxy.addr).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let tls = tokio_rustls::TlsConnector::from(certs.client_config(alpn)).connect(name, tcp).await.unwrap();
    let config: tokio_postgres::Config =
        format!("{} sslmode=disable", proxy.conninfo(USER, PASSWORD, DB)).parse().unwrap();
    let (client, conn) = config.connect_raw(tls, NoTls).await?;
    tokio::spawn(conn);
    let row = client.query_one("select current_user::text", &[]).await?;
    Ok(row.get(0))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_tls_from_clients_needs_alpn() {
    let pg = start_pg();
    let certs = TestCerts::generate();
    let [mode, cert, key] = certs.general_lines("require");
    let proxy = TestProxy::start(&ConfigBuilder::new(&pg).general(&mode).general(&cert).general(&key)).await;
    assert_eq!(direct_login(&proxy, &certs, true).await.unwrap(), USER);
    let err = direct_login(&proxy, &certs, false).await.unwrap_err();
    assert!(message(&err).contains("without ALPN"), "{err}");
    assert_eq!(common::sqlstate(&err).as_deref(), Some("08P01"));
    proxy.assert_no_leaks().await;
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pgvia_uses_direct_tls_and_a_client_certificate_towards_a_server() {
    let pg = start_pg();
    let certs = TestCerts::generate();
    let client_cert = certs.issue("pgvia-client", &[], USER);
    // The "server": a pgvia that wants client certificates from the CA.
    let front = TestProxy::start(&tls_config(&pg, &certs, "verify-ca")).await;
    let via = |extra: &str| {
        let toml = ConfigBuilder::new(&pg)
            .app_database(&format!(
                "server_tls_mode = \"verify-full\"\nserver_tls_ca_file = \"{}\"\nserver_tls_negotiation = \"direct\"{extra}",
                certs.ca_file.display()
            ))
            .toml();
        toml.replacen(&format!("port = {}", pg.port()), &format!("port = {}", front.port()), 1)
    };
    let with_cert = format!(
        "\nserver_tls_cert_file = \"{}\"\nserver_tls_key_file = \"{}\"",
        client_cert.cert_file.display(),
        client_cert.key_file.display()
    );
    let chained = TestProxy::start_toml(&via(&with_cert)).await;
    let client = chained.connect(USER, PASSWORD, DB).await;
    let row = client.query_one("select current_user::text", &[]).await.unwrap();
    assert_eq!(row.get::<_, String>(0), USER);
    drop(client);
    chained.assert_no_leaks().await;
    chained.stop().await;

    // Without the client certificate the server refuses pgvia (under TLS 1.3 its alert
    // arrives with the first read after the handshake).
    let chained = TestProxy::start_toml(&via("")).await;
    let err = common::connect(&chained.conninfo(USER, PASSWORD, DB)).await.unwrap_err();
    assert!(message(&err).contains("CertificateRequired"), "{err:?}");
    chained.stop().await;
    front.stop().await;

    // PostgreSQL 15 knows no direct TLS: the handshake fails, nothing is sent in the clear.
    let certs15 = TestCerts::generate();
    let (cert, key) = certs15.server_pem();
    let pg15 = common::start_pg_with(ClusterOptions::new(PgVersion::V15).ssl_pem(cert, key));
    let toml = ConfigBuilder::new(&pg15)
        .app_database(&format!(
            "server_tls_mode = \"verify-full\"\nserver_tls_ca_file = \"{}\"\nserver_tls_negotiation = \"direct\"",
            certs15.ca_file.display()
        ))
        .toml();
    let proxy = TestProxy::start_toml(&toml).await;
    let err = common::connect(&proxy.conninfo(USER, PASSWORD, DB)).await.unwrap_err();
    assert!(message(&err).contains("TLS with server"), "{err}");
    proxy.stop().await;
}
