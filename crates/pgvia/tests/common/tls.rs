//! Test certificates (a CA and a server certificate for 127.0.0.1, made with rcgen at test
//! time) and a tokio-postgres TLS connector built on tokio-rustls that trusts that CA only.

use std::future::Future;
use std::io;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose};
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, RootCertStore};
use tempfile::TempDir;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect, TlsStream};
use tokio_postgres::Socket;

/// PEM files in a temp dir, removed on drop.
pub struct TestCerts {
    dir: TempDir,
    pub ca_file: PathBuf,
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
    ca_der: CertificateDer<'static>,
    ca_cert: rcgen::Certificate,
    ca_key: KeyPair,
}

/// A certificate and its key, as PEM text and as files.
pub struct Issued {
    pub cert_pem: String,
    pub key_pem: String,
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
}

impl TestCerts {
    pub fn generate() -> TestCerts {
        let ca_key = KeyPair::generate().expect("CA key");
        let mut ca = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name.push(DnType::CommonName, "pgvia test CA");
        ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca_cert = ca.self_signed(&ca_key).expect("self-sign CA");

        let key = KeyPair::generate().expect("server key");
        let mut leaf = CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
            .expect("server params");
        leaf.distinguished_name.push(DnType::CommonName, "localhost");
        let cert = leaf.signed_by(&key, &ca_cert, &ca_key).expect("sign server certificate");

        let dir = tempfile::Builder::new().prefix("pgvia-tls-").tempdir().expect("tempdir");
        let ca_file = dir.path().join("ca.crt");
        let cert_file = dir.path().join("server.crt");
        let key_file = dir.path().join("server.key");
        std::fs::write(&ca_file, ca_cert.pem()).expect("write CA");
        std::fs::write(&cert_file, cert.pem()).expect("write certificate");
        std::fs::write(&key_file, key.serialize_pem()).expect("write key");
        let ca_der = ca_cert.der().clone();
        TestCerts { dir, ca_file, cert_file, key_file, ca_der, ca_cert, ca_key }
    }

    /// A certificate from this CA for `names` (DNS names or IP addresses) with common name
    /// `cn`, written as `<file>.crt`/`<file>.key`: a server's or a client's.
    pub fn issue(&self, file: &str, names: &[&str], cn: &str) -> Issued {
        let key = KeyPair::generate().expect("key");
        let mut params =
            CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).expect("params");
        params.distinguished_name.push(DnType::CommonName, cn);
        let cert = params.signed_by(&key, &self.ca_cert, &self.ca_key).expect("sign");
        let cert_file = self.dir.path().join(format!("{file}.crt"));
        let key_file = self.dir.path().join(format!("{file}.key"));
        std::fs::write(&cert_file, cert.pem()).expect("write certificate");
        std::fs::write(&key_file, key.serialize_pem()).expect("write key");
        use std::os::unix::fs::PermissionsExt;
        // libpq refuses a client key others can read.
        std::fs::set_permissions(&key_file, std::fs::Permissions::from_mode(0o600)).expect("chmod key");
        Issued { cert_pem: cert.pem(), key_pem: key.serialize_pem(), cert_file, key_file }
    }

    /// The PEM certificate and key of the server certificate (for PostgreSQL's `ssl_pem`).
    pub fn server_pem(&self) -> (String, String) {
        (
            std::fs::read_to_string(&self.cert_file).expect("read certificate"),
            std::fs::read_to_string(&self.key_file).expect("read key"),
        )
    }

    /// `[general]` lines enabling TLS with these files.
    pub fn general_lines(&self, mode: &str) -> [String; 3] {
        [
            format!("tls_mode = \"{mode}\""),
            format!("tls_cert_file = \"{}\"", self.cert_file.display()),
            format!("tls_key_file = \"{}\"", self.key_file.display()),
        ]
    }

    /// A rustls client configuration trusting this CA, offering ALPN `postgresql` if asked
    /// (direct TLS).
    pub fn client_config(&self, alpn: bool) -> Arc<ClientConfig> {
        let mut roots = RootCertStore::empty();
        roots.add(self.ca_der.clone()).expect("add CA");
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("protocol versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
        if alpn {
            config.alpn_protocols = vec![b"postgresql".to_vec()];
        }
        Arc::new(config)
    }

    /// A connector that verifies the server against this CA (and the host name).
    pub fn connector(&self) -> RustlsConnect {
        let mut roots = RootCertStore::empty();
        roots.add(self.ca_der.clone()).expect("add CA");
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("protocol versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
        RustlsConnect { config: Arc::new(config), handshakes: Arc::new(AtomicBool::new(false)) }
    }
}

/// `MakeTlsConnect` for tokio-postgres over tokio-rustls.
#[derive(Clone)]
pub struct RustlsConnect {
    config: Arc<ClientConfig>,
    handshakes: Arc<AtomicBool>,
}

impl RustlsConnect {
    /// Whether a TLS handshake through this connector has completed.
    pub fn handshake_done(&self) -> bool {
        self.handshakes.load(Ordering::SeqCst)
    }
}

pub struct RustlsConnector {
    config: Arc<ClientConfig>,
    name: ServerName<'static>,
    handshakes: Arc<AtomicBool>,
}

impl MakeTlsConnect<Socket> for RustlsConnect {
    type Stream = RustlsStream;
    type TlsConnect = RustlsConnector;
    type Error = io::Error;

    fn make_tls_connect(&mut self, domain: &str) -> io::Result<RustlsConnector> {
        let name = ServerName::try_from(domain.to_owned()).map_err(|e| io::Error::other(e.to_string()))?;
        Ok(RustlsConnector { config: self.config.clone(), name, handshakes: self.handshakes.clone() })
    }
}

impl TlsConnect<Socket> for RustlsConnector {
    type Stream = RustlsStream;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<RustlsStream>> + Send>>;

    fn connect(self, stream: Socket) -> Self::Future {
        Box::pin(async move {
            let tls = tokio_rustls::TlsConnector::from(self.config).connect(self.name, stream).await?;
            self.handshakes.store(true, Ordering::SeqCst);
            Ok(RustlsStream(Box::new(tls)))
        })
    }
}

pub struct RustlsStream(Box<tokio_rustls::client::TlsStream<Socket>>);

impl TlsStream for RustlsStream {
    fn channel_binding(&self) -> ChannelBinding {
        // pgvia offers SCRAM-SHA-256 without channel binding.
        ChannelBinding::none()
    }
}

impl AsyncRead for RustlsStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for RustlsStream {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut *self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_shutdown(cx)
    }
}
