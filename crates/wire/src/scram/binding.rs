//! Channel binding data of type `tls-server-end-point` (RFC 5929 section 4.1): a hash of the
//! server's certificate, with the hash function its signature used, except that MD5 and
//! SHA-1 are replaced by SHA-256. A client that reached pgvia through a relay holding
//! another certificate computes different data, so its SCRAM proof fails.
//!
//! Reading the signature algorithm takes a few steps of DER, done here by hand: a whole
//! X.509 parser for one OID would be a large dependency.

use sha2::{Digest, Sha256, Sha384, Sha512};
use thiserror::Error;

/// The channel binding type pgvia offers.
pub const TLS_SERVER_END_POINT: &str = "tls-server-end-point";

/// Why no binding data could be made from a certificate.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum EndPointError {
    #[error("the certificate is not valid DER")]
    Malformed,
    /// Signatures without a hash function of their own (Ed25519, RSA-PSS) have no
    /// RFC 5929 hash; PostgreSQL refuses them too.
    #[error("the certificate's signature algorithm (OID {0}) has no tls-server-end-point hash")]
    UnsupportedAlgorithm(String),
}

#[derive(Clone, Copy)]
enum Hash {
    Sha256,
    Sha384,
    Sha512,
}

/// DER contents of the signature algorithm OIDs with a defined hash.
const ALGORITHMS: &[(&[u8], Hash)] = &[
    // md5WithRSAEncryption, sha1WithRSAEncryption: upgraded to SHA-256 by the RFC.
    (&[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x04], Hash::Sha256),
    (&[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x05], Hash::Sha256),
    // sha256/384/512WithRSAEncryption
    (&[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0b], Hash::Sha256),
    (&[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0c], Hash::Sha384),
    (&[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0d], Hash::Sha512),
    // ecdsa-with-SHA1, ecdsa-with-SHA256/384/512
    (&[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x01], Hash::Sha256),
    (&[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x02], Hash::Sha256),
    (&[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x03], Hash::Sha384),
    (&[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x04], Hash::Sha512),
];

/// The `tls-server-end-point` channel binding data for a certificate in DER.
pub fn tls_server_end_point(cert_der: &[u8]) -> Result<Vec<u8>, EndPointError> {
    // Certificate ::= SEQUENCE { tbsCertificate, signatureAlgorithm, signatureValue }
    let (certificate, _) = tlv(cert_der, 0x30)?;
    let (_tbs, rest) = tlv(certificate, 0x30)?;
    // AlgorithmIdentifier ::= SEQUENCE { algorithm OBJECT IDENTIFIER, parameters ANY OPTIONAL }
    let (algorithm, _) = tlv(rest, 0x30)?;
    let (oid, _) = tlv(algorithm, 0x06)?;
    let hash = ALGORITHMS
        .iter()
        .find(|(known, _)| *known == oid)
        .map(|(_, h)| *h)
        .ok_or_else(|| EndPointError::UnsupportedAlgorithm(oid_text(oid)))?;
    Ok(match hash {
        Hash::Sha256 => Sha256::digest(cert_der).to_vec(),
        Hash::Sha384 => Sha384::digest(cert_der).to_vec(),
        Hash::Sha512 => Sha512::digest(cert_der).to_vec(),
    })
}

/// One DER element with tag `tag` at the start of `data`: its contents and what follows.
fn tlv(data: &[u8], tag: u8) -> Result<(&[u8], &[u8]), EndPointError> {
    let (&found, rest) = data.split_first().ok_or(EndPointError::Malformed)?;
    if found != tag {
        return Err(EndPointError::Malformed);
    }
    let (&first, mut rest) = rest.split_first().ok_or(EndPointError::Malformed)?;
    let len = if first < 0x80 {
        usize::from(first)
    } else {
        // Long form: the low bits count the length's bytes; four cover any certificate.
        let count = usize::from(first & 0x7f);
        if count == 0 || count > 4 || rest.len() < count {
            return Err(EndPointError::Malformed);
        }
        let (bytes, after) = rest.split_at(count);
        rest = after;
        bytes.iter().fold(0usize, |acc, &b| (acc << 8) | usize::from(b))
    };
    if rest.len() < len {
        return Err(EndPointError::Malformed);
    }
    Ok(rest.split_at(len))
}

/// Dotted text of an OID, for the error message.
fn oid_text(oid: &[u8]) -> String {
    let mut parts: Vec<u64> = Vec::new();
    let mut value = 0u64;
    for &b in oid {
        value = (value << 7) | u64::from(b & 0x7f);
        if b & 0x80 == 0 {
            if parts.is_empty() {
                let first = (value / 40).min(2);
                parts.push(first);
                parts.push(value - first * 40);
            } else {
                parts.push(value);
            }
            value = 0;
        }
    }
    parts.iter().map(u64::to_string).collect::<Vec<_>>().join(".")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// A DER certificate skeleton with the given signature algorithm OID contents.
    fn skeleton(oid: &[u8]) -> Vec<u8> {
        let tbs = [0x30, 0x03, 0x02, 0x01, 0x01];
        let mut alg = vec![0x30, (oid.len() + 2) as u8, 0x06, oid.len() as u8];
        alg.extend_from_slice(oid);
        let sig = [0x03, 0x02, 0x00, 0xff];
        let body: Vec<u8> = tbs.iter().chain(&alg).chain(&sig).copied().collect();
        let mut cert = vec![0x30, 0x81, body.len() as u8];
        cert.extend_from_slice(&body);
        cert
    }

    #[test]
    fn hash_follows_the_signature_algorithm() {
        let ecdsa256 = skeleton(&[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x02]);
        assert_eq!(tls_server_end_point(&ecdsa256).unwrap(), Sha256::digest(&ecdsa256).to_vec());
        let sha1_rsa = skeleton(&[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x05]);
        assert_eq!(tls_server_end_point(&sha1_rsa).unwrap().len(), 32);
        let rsa384 = skeleton(&[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0c]);
        assert_eq!(tls_server_end_point(&rsa384).unwrap(), Sha384::digest(&rsa384).to_vec());
        let ecdsa512 = skeleton(&[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x04]);
        assert_eq!(tls_server_end_point(&ecdsa512).unwrap().len(), 64);
    }

    #[test]
    fn algorithms_without_a_hash_are_named() {
        let ed25519 = skeleton(&[0x2b, 0x65, 0x70]);
        assert_eq!(
            tls_server_end_point(&ed25519),
            Err(EndPointError::UnsupportedAlgorithm("1.3.101.112".into()))
        );
    }

    proptest::proptest! {
        #[test]
        fn random_bytes_never_panic(data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300)) {
            let _ = tls_server_end_point(&data);
            let mut framed = vec![0x30, 0x82, (data.len() >> 8) as u8, data.len() as u8];
            framed.extend_from_slice(&data);
            let _ = tls_server_end_point(&framed);
        }
    }

    #[test]
    fn garbage_is_malformed_not_a_panic() {
        for bad in [&[][..], &[0x30], &[0x30, 0x85, 1, 1, 1, 1, 1], &[0x30, 0x05, 0x30], &[0x04, 0x00]] {
            assert_eq!(tls_server_end_point(bad), Err(EndPointError::Malformed));
        }
        let good = skeleton(&[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x02]);
        for cut in 0..good.len() {
            let _ = tls_server_end_point(&good[..cut]);
        }
    }
}
