//! TLS towards PostgreSQL: what a database's `server_tls_*` keys ask for, and the rustls
//! client configuration that carries it out (verification per mode, client certificate).
//!
//! The configuration is built from the files each time a server connection is opened, not
//! once at load: server connections are opened rarely next to the queries they carry, and a
//! rotated CA or client certificate then applies without a reload.

use std::path::PathBuf;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, SignatureScheme};
use serde::Deserialize;

use super::pem::{read_certs, read_key, TlsError};
pub use super::pem::{roots, ALPN_POSTGRESQL};

/// How much TLS pgvia insists on towards a server; the names and meanings of libpq's
/// `sslmode` (without `allow`, which only makes sense for an interactive client).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum ServerTlsMode {
    /// Plain TCP; no SSLRequest is sent.
    #[default]
    Disable,
    /// TLS when the server offers it, plain otherwise; the certificate is not checked.
    Prefer,
    /// TLS or no connection; the certificate is not checked.
    Require,
    /// TLS, and the certificate chain must lead to `server_tls_ca_file`.
    VerifyCa,
    /// As `verify-ca`, and the certificate must name the host pgvia connected to.
    VerifyFull,
}

impl ServerTlsMode {
    pub fn name(self) -> &'static str {
        match self {
            ServerTlsMode::Disable => "disable",
            ServerTlsMode::Prefer => "prefer",
            ServerTlsMode::Require => "require",
            ServerTlsMode::VerifyCa => "verify-ca",
            ServerTlsMode::VerifyFull => "verify-full",
        }
    }

    /// Whether a server without TLS is refused.
    pub fn requires_tls(self) -> bool {
        matches!(self, ServerTlsMode::Require | ServerTlsMode::VerifyCa | ServerTlsMode::VerifyFull)
    }

    fn verifies(self) -> bool {
        matches!(self, ServerTlsMode::VerifyCa | ServerTlsMode::VerifyFull)
    }
}

impl std::fmt::Display for ServerTlsMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// How TLS is started with a server (libpq's `sslnegotiation`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum TlsNegotiation {
    /// An SSLRequest first, TLS after the server's `S`: every PostgreSQL version.
    #[default]
    Postgres,
    /// The TLS handshake at once, with ALPN `postgresql`: PostgreSQL 17 and later; saves a
    /// round trip.
    Direct,
}

/// A database's `server_tls_*` keys, resolved. Compared on reload: a change makes new pools.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ServerTlsSettings {
    pub mode: ServerTlsMode,
    pub negotiation: TlsNegotiation,
    pub ca_file: Option<PathBuf>,
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
}

impl ServerTlsSettings {
    /// The rustls configuration for these settings; `None` under `disable`.
    pub fn client_config(&self) -> Result<Option<Arc<ClientConfig>>, TlsError> {
        if self.mode == ServerTlsMode::Disable {
            return Ok(None);
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder =
            ClientConfig::builder_with_provider(provider.clone()).with_safe_default_protocol_versions()?;
        let builder = if self.mode.verifies() {
            let ca = self.ca_file.as_deref().ok_or(TlsError::NoCaFile { mode: self.mode.name() })?;
            let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots(ca)?), provider.clone())
                .build()
                .map_err(|e| TlsError::Verifier(e.to_string()))?;
            let verifier: Arc<dyn ServerCertVerifier> = match self.mode {
                ServerTlsMode::VerifyCa => Arc::new(ChainOnly(webpki)),
                _ => webpki,
            };
            builder.dangerous().with_custom_certificate_verifier(verifier)
        } else {
            builder.dangerous().with_custom_certificate_verifier(Arc::new(Unverified(provider)))
        };
        let mut config = match (&self.cert_file, &self.key_file) {
            (Some(cert), Some(key)) => builder.with_client_auth_cert(read_certs(cert)?, read_key(key)?)?,
            _ => builder.with_no_client_auth(),
        };
        // Sent with SSLRequest too: PostgreSQL 17 and later check it when offered, older
        // servers ignore it.
        config.alpn_protocols = vec![ALPN_POSTGRESQL.to_vec()];
        Ok(Some(Arc::new(config)))
    }
}

/// `prefer` and `require`: encryption without authentication of the server, as libpq does
/// under those modes. The handshake's signatures are still checked, so the session key is
/// at least bound to the certificate that was shown.
#[derive(Debug)]
struct Unverified(Arc<CryptoProvider>);

impl ServerCertVerifier for Unverified {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// `verify-ca`: the full WebPKI check, except that a certificate naming another host is
/// accepted. The name is checked only after the chain, so a name error means the chain held.
#[derive(Debug)]
struct ChainOnly(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self.0.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}
