//! SCRAM-SHA-256-PLUS (channel binding `tls-server-end-point`) towards clients: libpq's
//! `channel_binding=require` logs in over TLS; through a TLS-terminating relay that presents
//! another certificate (a man in the middle, written here) the binding check fails; clients
//! without TLS are offered plain SCRAM-SHA-256 only.

// Helpers outside #[test] functions unwrap too: a failed step is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::net::SocketAddr;
use std::sync::Arc;

use common::raw::{startup, RawConn};
use common::tls::TestCerts;
use common::{psql_tls, start_pg, text, ConfigBuilder, TestProxy, DB, PASSWORD, USER};
use harness::Cluster;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::{TlsAcceptor, TlsConnector};

/// pgvia with TLS allowed (not required), users logging in with SCRAM.
async fn proxy(pg: &Cluster, certs: &TestCerts) -> TestProxy {
    let [mode, cert, key] = certs.general_lines("allow");
    let config = ConfigBuilder::new(pg)
        .general(&mode)
        .general(&cert)
        .general(&key)
        .general("auth_method = \"scram-sha-256\"");
    TestProxy::start(&config).await
}

/// psql to `port` with the given libpq options; returns (success, stdout, stderr).
async fn psql_at(pg: &Cluster, port: u16, options: &str) -> (bool, String, String) {
    let conninfo =
        format!("host=127.0.0.1 port={port} user={USER} password={PASSWORD} dbname={DB} {options}");
    let out = psql_tls(pg, &conninfo, &["-w", "-At", "-c", "select current_user"], None).await;
    (out.status.success(), text(&out.stdout).trim().to_owned(), text(&out.stderr))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn channel_binding_require_logs_in_over_tls() {
    let pg = start_pg();
    let certs = TestCerts::generate();
    let proxy = proxy(&pg, &certs).await;
    let (ok, out, err) = psql_at(&pg, proxy.port(), "sslmode=require channel_binding=require").await;
    assert!(ok, "{err}");
    assert_eq!(out, USER);
    // The same with the certificate verified, and with a user whose secret is a verifier.
    let options =
        format!("sslmode=verify-full sslrootcert={} channel_binding=require", certs.ca_file.display());
    let (ok, out, err) = psql_at(&pg, proxy.port(), &options).await;
    assert!(ok, "{err}");
    assert_eq!(out, USER);
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_without_tls_are_offered_plain_scram_only() {
    let pg = start_pg();
    let certs = TestCerts::generate();
    let proxy = proxy(&pg, &certs).await;
    let mut conn = RawConn::connect(proxy.addr).await.unwrap();
    conn.send(&startup(&[("user", USER), ("database", DB)])).await;
    let request = conn.recv().await.unwrap();
    assert_eq!(request.tag, b'R');
    // AuthenticationSASL (10) listing SCRAM-SHA-256 alone.
    assert_eq!(&request.body[..], b"\0\0\0\x0aSCRAM-SHA-256\0\0");
    // libpq: binding cannot be required without TLS; by default it logs in without.
    let (ok, _, err) = psql_at(&pg, proxy.port(), "sslmode=disable channel_binding=require").await;
    assert!(!ok);
    assert!(err.contains("channel binding"), "{err}");
    let (ok, out, err) = psql_at(&pg, proxy.port(), "sslmode=disable").await;
    assert!(ok, "{err}");
    assert_eq!(out, USER);
    proxy.stop().await;
}

/// A man in the middle: accepts a client's SSLRequest and TLS with its own certificate,
/// opens TLS to pgvia (trusting pgvia's CA), and copies bytes both ways.
async fn relay(certs: &TestCerts, upstream: SocketAddr) -> SocketAddr {
    let own = certs.issue("relay", &["127.0.0.1"], "relay");
    let chain = rustls_pemfile::certs(&mut own.cert_pem.as_bytes()).collect::<Result<Vec<_>, _>>().unwrap();
    let key = rustls_pemfile::private_key(&mut own.key_pem.as_bytes()).unwrap().unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut server = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .unwrap();
    server.alpn_protocols = vec![b"postgresql".to_vec()];
    let acceptor = TlsAcceptor::from(Arc::new(server));
    let connector = TlsConnector::from(certs.client_config(false));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut client, _)) = listener.accept().await else { return };
            let (acceptor, connector) = (acceptor.clone(), connector.clone());
            tokio::spawn(async move {
                let mut request = [0u8; 8];
                client.read_exact(&mut request).await.unwrap();
                assert_eq!(request, [0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f], "an SSLRequest");
                client.write_all(b"S").await.unwrap();
                let Ok(mut client) = acceptor.accept(client).await else { return };
                let mut server = TcpStream::connect(upstream).await.unwrap();
                server.write_all(&request).await.unwrap();
                let mut answer = [0u8; 1];
                server.read_exact(&mut answer).await.unwrap();
                assert_eq!(&answer, b"S");
                let name = ServerName::try_from("localhost").unwrap();
                let mut server = connector.connect(name, server).await.unwrap();
                let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
            });
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_with_another_certificate_fails_channel_binding() {
    let pg = start_pg();
    let certs = TestCerts::generate();
    let proxy = proxy(&pg, &certs).await;
    let mitm = relay(&certs, proxy.addr).await;
    // The relay works: without binding the login goes through it.
    let (ok, out, err) = psql_at(&pg, mitm.port(), "sslmode=require channel_binding=disable").await;
    assert!(ok, "{err}");
    assert_eq!(out, USER);
    // With binding, the client binds to the relay's certificate and pgvia to its own.
    let (ok, _, err) = psql_at(&pg, mitm.port(), "sslmode=require channel_binding=require").await;
    assert!(!ok);
    assert!(err.contains("SCRAM channel binding check failed"), "{err}");
    // Directly, the same options log in.
    let (ok, out, err) = psql_at(&pg, proxy.port(), "sslmode=require channel_binding=require").await;
    assert!(ok, "{err}");
    assert_eq!(out, USER);
    proxy.stop().await;
}
