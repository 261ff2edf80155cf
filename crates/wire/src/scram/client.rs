//! The client side of SCRAM-SHA-256 for a client that holds a ClientKey instead of a
//! password: what a proxy has after checking a client's proof against a stored verifier.
//!
//! With the password, a client derives SaltedPassword from the server's salt and iteration
//! count, and from it ClientKey. Without it, the ClientKey recovered from an earlier proof
//! is only good for a server whose verifier has the same salt and iteration count (and so
//! the same keys): the server-first-message is checked for that before anything is sent.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use subtle::ConstantTimeEq;
use thiserror::Error;

use super::{
    attribute, hmac, parse_server_final, sha256, xor_in_place, Attributes, ScramVerifier, ServerFinal,
};

/// Why a keyed login did not get through.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ClientExchangeError {
    #[error("malformed SCRAM server message: {0}")]
    Malformed(&'static str),
    #[error("SCRAM server nonce does not extend the client's")]
    NonceMismatch,
    /// The server keeps a verifier made with another salt, so the ClientKey pgvia holds
    /// cannot answer it.
    #[error(
        "the server's SCRAM salt differs from the configured verifier's: copy the verifier from this \
         server's pg_authid (or set server_password)"
    )]
    SaltMismatch,
    #[error(
        "the server's SCRAM iteration count ({server}) differs from the configured verifier's ({configured}): \
         copy the verifier from this server's pg_authid (or set server_password)"
    )]
    IterationsMismatch { server: u32, configured: u32 },
    #[error("the ClientKey does not belong to the configured verifier")]
    KeyMismatch,
    /// The server answered `e=...`.
    #[error("server reported SCRAM error: {0}")]
    ServerError(String),
    #[error("SCRAM server signature mismatch: the server does not hold the configured verifier")]
    SignatureMismatch,
    #[error("SCRAM message received out of order")]
    OutOfOrder,
}

enum Phase {
    AwaitServerFirst,
    AwaitServerFinal { server_signature: [u8; 32] },
    Done,
    Failed,
}

/// One login to a server with a ClientKey. The caller sends [`KeyedClient::client_first`]
/// in a SASLInitialResponse, then what [`KeyedClient::server_first`] returns, and checks the
/// server's last message with [`KeyedClient::server_final`].
pub struct KeyedClient {
    salt: Vec<u8>,
    iterations: u32,
    stored_key: [u8; 32],
    server_key: [u8; 32],
    client_key: [u8; 32],
    client_first_bare: Vec<u8>,
    nonce: String,
    phase: Phase,
}

impl std::fmt::Debug for KeyedClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyedClient").field("iterations", &self.iterations).finish_non_exhaustive()
    }
}

impl Drop for KeyedClient {
    fn drop(&mut self) {
        self.client_key.fill(0);
        std::hint::black_box(&self.client_key);
    }
}

impl KeyedClient {
    /// `client_key` must satisfy H(ClientKey) = StoredKey of `verifier`; `nonce` must come
    /// from a cryptographically secure generator.
    pub fn new(
        verifier: &ScramVerifier,
        client_key: [u8; 32],
        nonce: &[u8; 18],
    ) -> Result<Self, ClientExchangeError> {
        if !bool::from(sha256(&client_key).ct_eq(&verifier.stored_key)) {
            return Err(ClientExchangeError::KeyMismatch);
        }
        let nonce = STANDARD.encode(nonce);
        // The user name is left empty, as libpq does: the startup packet named the role.
        let client_first_bare = format!("n=,r={nonce}").into_bytes();
        Ok(Self {
            salt: verifier.salt.clone(),
            iterations: verifier.iterations,
            stored_key: verifier.stored_key,
            server_key: verifier.server_key,
            client_key,
            client_first_bare,
            nonce,
            phase: Phase::AwaitServerFirst,
        })
    }

    /// The client-first-message: no channel binding (`n,,`), towards servers pgvia does not
    /// bind to.
    pub fn client_first(&self) -> Vec<u8> {
        let mut msg = b"n,,".to_vec();
        msg.extend_from_slice(&self.client_first_bare);
        msg
    }

    /// Takes the server-first-message and returns the client-final-message.
    pub fn server_first(&mut self, msg: &[u8]) -> Result<Vec<u8>, ClientExchangeError> {
        if !matches!(self.phase, Phase::AwaitServerFirst) {
            self.phase = Phase::Failed;
            return Err(ClientExchangeError::OutOfOrder);
        }
        self.phase = Phase::Failed;
        let mut attrs = Attributes::new(msg);
        let nonce = attrs
            .next()
            .and_then(|a| attribute(a, b'r'))
            .ok_or(ClientExchangeError::Malformed("expected nonce attribute"))?;
        if nonce.len() <= self.nonce.len() || !nonce.starts_with(self.nonce.as_bytes()) {
            return Err(ClientExchangeError::NonceMismatch);
        }
        let salt = attrs
            .next()
            .and_then(|a| attribute(a, b's'))
            .and_then(|s| STANDARD.decode(s).ok())
            .ok_or(ClientExchangeError::Malformed("expected base64 salt attribute"))?;
        let iterations = attrs
            .next()
            .and_then(|a| attribute(a, b'i'))
            .and_then(|i| std::str::from_utf8(i).ok())
            .and_then(|i| i.parse::<u32>().ok())
            .ok_or(ClientExchangeError::Malformed("expected iteration count attribute"))?;
        if iterations != self.iterations {
            return Err(ClientExchangeError::IterationsMismatch {
                server: iterations,
                configured: self.iterations,
            });
        }
        if salt != self.salt {
            return Err(ClientExchangeError::SaltMismatch);
        }
        let mut without_proof = b"c=biws,r=".to_vec();
        without_proof.extend_from_slice(nonce);
        let auth_message: &[&[u8]] = &[&self.client_first_bare, b",", msg, b",", &without_proof];
        let mut proof = hmac(&self.stored_key, auth_message);
        xor_in_place(&mut proof, &self.client_key);
        let server_signature = hmac(&self.server_key, auth_message);
        let mut client_final = without_proof;
        client_final.extend_from_slice(b",p=");
        client_final.extend_from_slice(STANDARD.encode(proof).as_bytes());
        self.phase = Phase::AwaitServerFinal { server_signature };
        Ok(client_final)
    }

    /// Checks the server-final-message: the server proves it holds the same verifier.
    pub fn server_final(&mut self, msg: &[u8]) -> Result<(), ClientExchangeError> {
        let phase = std::mem::replace(&mut self.phase, Phase::Failed);
        let Phase::AwaitServerFinal { server_signature } = phase else {
            return Err(ClientExchangeError::OutOfOrder);
        };
        match parse_server_final(msg) {
            Some(ServerFinal::Verifier(v)) if bool::from(v.ct_eq(&server_signature)) => {
                self.phase = Phase::Done;
                Ok(())
            }
            Some(ServerFinal::Verifier(_)) => Err(ClientExchangeError::SignatureMismatch),
            Some(ServerFinal::Error(e)) => {
                Err(ClientExchangeError::ServerError(String::from_utf8_lossy(e).into_owned()))
            }
            None => Err(ClientExchangeError::Malformed("invalid server-final-message")),
        }
    }
}
