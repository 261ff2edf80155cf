//! TLS from clients: the acceptor pgvia presents, and the client certificates it asks for.

use std::path::Path;
use std::sync::Arc;

use rustls::server::WebPkiClientVerifier;
use tokio_rustls::TlsAcceptor;

pub use super::pem::TlsError;
use super::pem::{read_certs, read_key, roots, ALPN_POSTGRESQL};

/// Whether clients must show a certificate, when `client_tls_ca_file` makes pgvia ask.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientCerts {
    /// Not asked for.
    None,
    /// Asked for; a client without one still gets in, one with a bad one does not.
    Optional,
    /// A client without a certificate from the CA fails the handshake.
    Required,
}

/// Builds the acceptor for client TLS from PEM files. With `client_ca`, clients are asked
/// for a certificate signed by it.
pub fn acceptor(
    cert_file: &Path,
    key_file: &Path,
    client_ca: Option<&Path>,
    certs: ClientCerts,
) -> Result<TlsAcceptor, TlsError> {
    let chain = read_certs(cert_file)?;
    let key = read_key(key_file)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()?;
    let builder = match (client_ca, certs) {
        (Some(ca), ClientCerts::Optional | ClientCerts::Required) => {
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots(ca)?), provider);
            let verifier =
                if certs == ClientCerts::Optional { verifier.allow_unauthenticated() } else { verifier };
            builder
                .with_client_cert_verifier(verifier.build().map_err(|e| TlsError::Verifier(e.to_string()))?)
        }
        _ => builder.with_no_client_auth(),
    };
    let mut config = builder.with_single_cert(chain, key)?;
    // Required by direct TLS (PostgreSQL 17's sslnegotiation=direct) and checked by libpq 17+
    // after an SSLRequest too; clients that offer no ALPN are still served.
    config.alpn_protocols = vec![ALPN_POSTGRESQL.to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// The `tls-server-end-point` channel binding data of pgvia's certificate (the first of
/// `cert_file`), with which SCRAM-SHA-256-PLUS is offered to TLS clients. `None`, logged,
/// when the certificate's signature has no RFC 5929 hash (Ed25519, RSA-PSS): clients are
/// then offered SCRAM-SHA-256 only, and `channel_binding=require` fails in the client.
pub fn channel_binding(cert_file: &Path) -> Result<Option<Vec<u8>>, TlsError> {
    let chain = read_certs(cert_file)?;
    let Some(leaf) = chain.first() else {
        return Err(TlsError::NoCertificate { path: cert_file.display().to_string() });
    };
    match wire::scram::tls_server_end_point(leaf) {
        Ok(data) => Ok(Some(data)),
        Err(e) => {
            tracing::warn!(certificate = %cert_file.display(), error = %e, "SCRAM channel binding (SCRAM-SHA-256-PLUS) is not offered");
            Ok(None)
        }
    }
}
