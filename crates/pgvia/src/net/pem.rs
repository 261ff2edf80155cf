//! PEM files and what TLS both ways shares: reading certificates and keys, trust anchors, the
//! ALPN name, and the errors of all of it.

use std::path::Path;

use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::RootCertStore;
use thiserror::Error;

/// The ALPN protocol name PostgreSQL 17 and later use, required with direct TLS.
pub const ALPN_POSTGRESQL: &[u8] = b"postgresql";

#[derive(Debug, Error)]
pub enum TlsError {
    #[error("cannot read {path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("{path}: no PEM certificate found")]
    NoCertificate { path: String },
    #[error("{path}: no PEM private key found")]
    NoKey { path: String },
    #[error("server_tls_mode = \"{mode}\" needs server_tls_ca_file")]
    NoCaFile { mode: &'static str },
    #[error("cannot build a certificate verifier: {0}")]
    Verifier(String),
    #[error("TLS configuration rejected: {0}")]
    Rustls(#[from] rustls::Error),
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read { path: path.display().to_string(), source })
}

/// Every certificate in a PEM file; at least one.
pub fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = read(path)?;
    let certs: Vec<_> = rustls_pemfile::certs(&mut pem.as_slice())
        .collect::<Result<_, _>>()
        .map_err(|source| TlsError::Read { path: path.display().to_string(), source })?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate { path: path.display().to_string() });
    }
    Ok(certs)
}

/// The first private key in a PEM file.
pub fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let pem = read(path)?;
    rustls_pemfile::private_key(&mut pem.as_slice())
        .map_err(|source| TlsError::Read { path: path.display().to_string(), source })?
        .ok_or_else(|| TlsError::NoKey { path: path.display().to_string() })
}

/// The trust anchors in a PEM file.
pub fn roots(ca_file: &Path) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    for cert in read_certs(ca_file)? {
        roots.add(cert)?;
    }
    Ok(roots)
}
