//! SCRAM-SHA-256 (RFC 5802, RFC 7677) as PostgreSQL speaks it: verifiers in `pg_authid`'s
//! format and the server side of one exchange. No I/O; the caller supplies randomness.
//!
//! Channel binding (`SCRAM-SHA-256-PLUS`, type `tls-server-end-point`) is for the caller to
//! offer over TLS, with [`ServerExchange::set_binding`]; without it clients must send the gs2
//! header `n,,`, or `y,,` when they could bind but saw that we cannot.

use std::fmt;
use std::str::FromStr;

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use thiserror::Error;

mod binding;
mod client;

pub use binding::{tls_server_end_point, EndPointError, TLS_SERVER_END_POINT};
pub use client::{ClientExchangeError, KeyedClient};

/// The SASL mechanism name.
pub const SCRAM_SHA_256: &str = "SCRAM-SHA-256";
/// The mechanism with channel binding.
pub const SCRAM_SHA_256_PLUS: &str = "SCRAM-SHA-256-PLUS";
/// PostgreSQL's default iteration count for new verifiers.
pub const DEFAULT_ITERATIONS: u32 = 4096;
/// Bytes of randomness in the server's part of the nonce.
pub const SERVER_NONCE_LEN: usize = 18;

const VERIFIER_PREFIX: &str = "SCRAM-SHA-256$";

type HmacSha256 = Hmac<Sha256>;

/// A stored SCRAM-SHA-256 secret: what PostgreSQL keeps in `pg_authid.rolpassword`.
///
/// `Debug` hides the keys: StoredKey and ServerKey together let their holder impersonate the
/// server, and with one sniffed exchange also the client.
#[derive(Clone, PartialEq, Eq)]
pub struct ScramVerifier {
    pub iterations: u32,
    pub salt: Vec<u8>,
    pub stored_key: [u8; 32],
    pub server_key: [u8; 32],
}

/// Why a string is not a usable SCRAM-SHA-256 verifier.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum VerifierError {
    #[error("SCRAM verifier must start with \"SCRAM-SHA-256$\"")]
    NotScram,
    #[error("SCRAM verifier must look like SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>")]
    Layout,
    #[error("SCRAM verifier iteration count must be a positive integer")]
    Iterations,
    #[error("SCRAM verifier {field} is not valid base64")]
    Base64 { field: &'static str },
    #[error("SCRAM verifier {field} must decode to 32 bytes")]
    KeyLength { field: &'static str },
}

impl ScramVerifier {
    /// Parses `SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>` (base64 fields).
    pub fn parse(s: &str) -> Result<Self, VerifierError> {
        let rest = s.strip_prefix(VERIFIER_PREFIX).ok_or(VerifierError::NotScram)?;
        let (params, keys) = rest.split_once('$').ok_or(VerifierError::Layout)?;
        let (iterations, salt) = params.split_once(':').ok_or(VerifierError::Layout)?;
        let (stored_key, server_key) = keys.split_once(':').ok_or(VerifierError::Layout)?;
        // A client would refuse an iteration count below one (libpq does), so such a
        // verifier could never authenticate anyone; better to say so at load time.
        let iterations = match iterations.parse::<u32>() {
            Ok(n) if n >= 1 && iterations.bytes().all(|b| b.is_ascii_digit()) => n,
            _ => return Err(VerifierError::Iterations),
        };
        let salt = STANDARD.decode(salt).map_err(|_| VerifierError::Base64 { field: "salt" })?;
        Ok(Self {
            iterations,
            salt,
            stored_key: decode_key(stored_key, "StoredKey")?,
            server_key: decode_key(server_key, "ServerKey")?,
        })
    }

    /// Derives a verifier the way `CREATE ROLE ... PASSWORD` does under
    /// `password_encryption = 'scram-sha-256'`.
    pub fn from_password(password: &str, salt: &[u8], iterations: u32) -> Self {
        let salted = salted_password(password, salt, iterations);
        let client_key = hmac(&salted, &[b"Client Key"]);
        Self {
            iterations,
            salt: salt.to_vec(),
            stored_key: sha256(&client_key),
            server_key: hmac(&salted, &[b"Server Key"]),
        }
    }

    /// A stand-in verifier for a role that does not exist, so that probing for role names
    /// meets the same exchange as a wrong password. The salt is stable for one `key` and
    /// `user`, as a real role's would be across attempts; without `key` no proof matches it.
    pub fn mock(user: &str, key: &[u8]) -> Self {
        let salt = hmac(key, &[b"mock salt ", user.as_bytes()]);
        Self {
            iterations: DEFAULT_ITERATIONS,
            // PostgreSQL's own salts are 16 bytes; a different length would give the game away.
            salt: salt[..16].to_vec(),
            stored_key: hmac(key, &[b"mock stored key ", user.as_bytes()]),
            server_key: hmac(key, &[b"mock server key ", user.as_bytes()]),
        }
    }

    /// Whether `key` is this verifier's ClientKey (H(ClientKey) = StoredKey), in constant time.
    pub fn is_client_key(&self, key: &[u8; 32]) -> bool {
        sha256(key).ct_eq(&self.stored_key).into()
    }

    /// Whether `password` is the one this verifier was made from. Costs `iterations` HMACs.
    pub fn verify_plaintext(&self, password: &str) -> bool {
        let salted = salted_password(password, &self.salt, self.iterations);
        let stored_key = sha256(&hmac(&salted, &[b"Client Key"]));
        let server_key = hmac(&salted, &[b"Server Key"]);
        (stored_key.ct_eq(&self.stored_key) & server_key.ct_eq(&self.server_key)).into()
    }
}

/// Byte-string equality whose time depends only on the lengths, for password checks outside
/// this module (pgvia compares plaintext passwords with it).
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.ct_eq(b).into()
}

fn decode_key(b64: &str, field: &'static str) -> Result<[u8; 32], VerifierError> {
    let bytes = STANDARD.decode(b64).map_err(|_| VerifierError::Base64 { field })?;
    bytes.try_into().map_err(|_| VerifierError::KeyLength { field })
}

impl FromStr for ScramVerifier {
    type Err = VerifierError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl fmt::Display for ScramVerifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{VERIFIER_PREFIX}{}:{}${}:{}",
            self.iterations,
            STANDARD.encode(&self.salt),
            STANDARD.encode(self.stored_key),
            STANDARD.encode(self.server_key)
        )
    }
}

impl fmt::Debug for ScramVerifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScramVerifier")
            .field("iterations", &self.iterations)
            .field("salt", &STANDARD.encode(&self.salt))
            .finish_non_exhaustive()
    }
}

/// SASLprep the way PostgreSQL applies it to passwords: ASCII is taken as is, and a password
/// SASLprep rejects (or maps to nothing) is used as its raw bytes rather than refused, since
/// PostgreSQL never required passwords to be valid SASL strings.
fn prepare_password(password: &str) -> std::borrow::Cow<'_, str> {
    if password.is_ascii() {
        return password.into();
    }
    match stringprep::saslprep(password) {
        Ok(prepped) if !prepped.is_empty() => prepped,
        _ => password.into(),
    }
}

fn salted_password(password: &str, salt: &[u8], iterations: u32) -> [u8; 32] {
    hi(prepare_password(password).as_bytes(), salt, iterations)
}

/// PBKDF2-HMAC-SHA-256 for a single output block, which is all SCRAM's `Hi()` needs.
fn hi(password: &[u8], salt: &[u8], iterations: u32) -> [u8; 32] {
    let keyed = keyed_hmac(password);
    let mut mac = keyed.clone();
    mac.update(salt);
    mac.update(&1u32.to_be_bytes());
    let mut u: [u8; 32] = mac.finalize().into_bytes().into();
    let mut out = u;
    for _ in 1..iterations {
        // Cloning the keyed state skips re-hashing the key on every round.
        let mut mac = keyed.clone();
        mac.update(&u);
        u = mac.finalize().into_bytes().into();
        xor_in_place(&mut out, &u);
    }
    out
}

// HMAC is defined for keys of any length, so this never fails; the `Result` comes from the
// generic `KeyInit` trait.
#[allow(clippy::expect_used)]
fn keyed_hmac(key: &[u8]) -> HmacSha256 {
    HmacSha256::new_from_slice(key).expect("HMAC accepts keys of any length")
}

fn hmac(key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    let mut mac = keyed_hmac(key);
    for p in parts {
        mac.update(p);
    }
    mac.finalize().into_bytes().into()
}

fn sha256(data: &[u8]) -> [u8; 32] {
    Sha256::digest(data).into()
}

fn xor_in_place(acc: &mut [u8; 32], other: &[u8; 32]) {
    for (a, b) in acc.iter_mut().zip(other) {
        *a ^= b;
    }
}

/// What can go wrong in an exchange. Everything except [`ScramError::InvalidProof`] means the
/// client broke the protocol; `InvalidProof` means it does not know the password.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ScramError {
    #[error("malformed SCRAM message: {0}")]
    Malformed(&'static str),
    #[error("client requires SCRAM channel binding, which is not offered")]
    ChannelBindingNotSupported,
    #[error("SCRAM authorization identity (authzid) is not supported")]
    AuthzidNotSupported,
    #[error("client requires an unsupported SCRAM extension")]
    UnsupportedExtension,
    #[error("SCRAM channel binding check failed")]
    ChannelBindingMismatch,
    /// The client sent `y`: it can bind but believes we cannot, though we offered
    /// SCRAM-SHA-256-PLUS. Someone in between removed the offer.
    #[error(
        "SCRAM channel binding negotiation error: the client supports channel binding but thinks the \
         server does not, and this server offered it"
    )]
    ChannelBindingDowngrade,
    #[error("unsupported SCRAM channel binding type (only tls-server-end-point is offered)")]
    UnsupportedBindingType,
    #[error("SCRAM nonce does not match the one negotiated")]
    NonceMismatch,
    #[error("SCRAM message received out of order")]
    OutOfOrder,
    #[error("invalid SCRAM client proof")]
    InvalidProof,
}

impl ScramError {
    /// True for a wrong password, false for a protocol violation.
    pub fn is_invalid_proof(&self) -> bool {
        matches!(self, ScramError::InvalidProof)
    }
}

enum Phase {
    AwaitClientFirst,
    AwaitClientFinal {
        client_first_bare: Vec<u8>,
        server_first: Vec<u8>,
        /// base64 of the gs2 header the client sent and the binding data, which `c=`
        /// must repeat.
        cbind_b64: String,
        nonce: Vec<u8>,
    },
    Done {
        client_key: [u8; 32],
    },
    /// One exchange, one verdict: after any error every further message is out of order.
    Failed,
}

/// What one exchange settled about channel binding.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Binding {
    /// SCRAM-SHA-256-PLUS was not offered (no TLS): `n` and `y` are accepted, `p` refused.
    #[default]
    NotOffered,
    /// It was offered and the client chose SCRAM-SHA-256: `n` only, since `y` would mean
    /// the client never saw the offer.
    Declined,
    /// The client chose SCRAM-SHA-256-PLUS: it must bind, with this `tls-server-end-point`
    /// data.
    Required(Vec<u8>),
}

/// The server side of one SCRAM-SHA-256 exchange.
pub struct ServerExchange {
    verifier: ScramVerifier,
    server_nonce: String,
    binding: Binding,
    phase: Phase,
}

impl fmt::Debug for ServerExchange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let phase = match self.phase {
            Phase::AwaitClientFirst => "AwaitClientFirst",
            Phase::AwaitClientFinal { .. } => "AwaitClientFinal",
            Phase::Done { .. } => "Done",
            Phase::Failed => "Failed",
        };
        f.debug_struct("ServerExchange").field("phase", &phase).finish_non_exhaustive()
    }
}

impl ServerExchange {
    /// `server_nonce` must come from a cryptographically secure generator.
    pub fn new(verifier: ScramVerifier, server_nonce: &[u8; SERVER_NONCE_LEN]) -> Self {
        Self {
            verifier,
            server_nonce: STANDARD.encode(server_nonce),
            binding: Binding::NotOffered,
            phase: Phase::AwaitClientFirst,
        }
    }

    /// Says what was offered and chosen, before the client-first-message is handled.
    pub fn set_binding(&mut self, binding: Binding) {
        self.binding = binding;
    }

    /// Takes the client-first-message and returns the server-first-message.
    pub fn client_first(&mut self, msg: &[u8]) -> Result<Vec<u8>, ScramError> {
        if !matches!(self.phase, Phase::AwaitClientFirst) {
            self.phase = Phase::Failed;
            return Err(ScramError::OutOfOrder);
        }
        let result = self.on_client_first(msg);
        if result.is_err() {
            self.phase = Phase::Failed;
        }
        result
    }

    fn on_client_first(&mut self, msg: &[u8]) -> Result<Vec<u8>, ScramError> {
        // gs2-header = flag "," [authzid] ","; the flag is `n`, `y` or `p=<type>`.
        let comma = msg
            .iter()
            .position(|&b| b == b',')
            .ok_or(ScramError::Malformed("invalid gs2 channel binding flag"))?;
        let (flag, after) = (&msg[..comma], &msg[comma + 1..]);
        let data: &[u8] = match (flag, &self.binding) {
            (b"n", Binding::NotOffered | Binding::Declined) | (b"y", Binding::NotOffered) => &[],
            (b"y", Binding::Declined) => return Err(ScramError::ChannelBindingDowngrade),
            (b"n" | b"y", Binding::Required(_)) => {
                return Err(ScramError::Malformed("SCRAM-SHA-256-PLUS selected without channel binding"));
            }
            ([b'p', b'=', name @ ..], Binding::Required(data)) => {
                if name != TLS_SERVER_END_POINT.as_bytes() {
                    return Err(ScramError::UnsupportedBindingType);
                }
                data
            }
            ([b'p', b'=', ..], Binding::NotOffered) => return Err(ScramError::ChannelBindingNotSupported),
            ([b'p', b'=', ..], Binding::Declined) => {
                return Err(ScramError::Malformed("channel binding requested with SCRAM-SHA-256"));
            }
            _ => return Err(ScramError::Malformed("invalid gs2 channel binding flag")),
        };
        let bare = match after {
            [b',', rest @ ..] => rest,
            [b'a', b'=', ..] => return Err(ScramError::AuthzidNotSupported),
            _ => return Err(ScramError::Malformed("invalid gs2 header")),
        };
        let mut cbind_input = msg[..comma + 2].to_vec();
        cbind_input.extend_from_slice(data);
        let cbind_b64 = STANDARD.encode(cbind_input);
        let mut attrs = Attributes::new(bare);
        let first = attrs.next().ok_or(ScramError::Malformed("missing username"))?;
        if first.starts_with(b"m=") {
            return Err(ScramError::UnsupportedExtension);
        }
        // The username is ignored, as PostgreSQL does: the startup packet already named the
        // role, and clients such as libpq send it empty.
        attribute(first, b'n').ok_or(ScramError::Malformed("expected username attribute"))?;
        let client_nonce = attrs
            .next()
            .and_then(|a| attribute(a, b'r'))
            .ok_or(ScramError::Malformed("expected nonce attribute"))?;
        if client_nonce.is_empty() || !client_nonce.iter().all(|&b| is_printable(b)) {
            return Err(ScramError::Malformed("nonce must be non-empty printable ASCII"));
        }
        // Optional extensions may follow; we take none, but they must at least be attributes.
        if attrs.any(|a| !is_attribute(a)) {
            return Err(ScramError::Malformed("invalid attribute in client-first-message"));
        }

        let mut nonce = client_nonce.to_vec();
        nonce.extend_from_slice(self.server_nonce.as_bytes());
        let mut server_first = Vec::with_capacity(nonce.len() + 64);
        server_first.extend_from_slice(b"r=");
        server_first.extend_from_slice(&nonce);
        server_first.extend_from_slice(b",s=");
        server_first.extend_from_slice(STANDARD.encode(&self.verifier.salt).as_bytes());
        server_first.extend_from_slice(b",i=");
        server_first.extend_from_slice(self.verifier.iterations.to_string().as_bytes());

        self.phase = Phase::AwaitClientFinal {
            client_first_bare: bare.to_vec(),
            server_first: server_first.clone(),
            cbind_b64,
            nonce,
        };
        Ok(server_first)
    }

    /// Takes the client-final-message, checks the proof in constant time and returns the
    /// server-final-message (`v=<ServerSignature>`).
    pub fn client_final(&mut self, msg: &[u8]) -> Result<Vec<u8>, ScramError> {
        let phase = std::mem::replace(&mut self.phase, Phase::Failed);
        let Phase::AwaitClientFinal { client_first_bare, server_first, cbind_b64, nonce } = phase else {
            return Err(ScramError::OutOfOrder);
        };
        let mut attrs = Attributes::new(msg);
        let cbind = attrs
            .next()
            .and_then(|a| attribute(a, b'c'))
            .ok_or(ScramError::Malformed("expected channel binding attribute"))?;
        // Compared as base64 text, as PostgreSQL does: without binding data the header is
        // the only thing the client can have encoded.
        if cbind != cbind_b64.as_bytes() {
            return Err(ScramError::ChannelBindingMismatch);
        }
        let final_nonce = attrs
            .next()
            .and_then(|a| attribute(a, b'r'))
            .ok_or(ScramError::Malformed("expected nonce attribute"))?;
        if final_nonce != nonce.as_slice() {
            return Err(ScramError::NonceMismatch);
        }
        let proof_b64 = loop {
            let a = attrs.next().ok_or(ScramError::Malformed("missing proof attribute"))?;
            if let Some(p) = attribute(a, b'p') {
                break p;
            }
            if !is_attribute(a) {
                return Err(ScramError::Malformed("invalid attribute in client-final-message"));
            }
        };
        if attrs.next().is_some() {
            return Err(ScramError::Malformed("proof must be the last attribute"));
        }
        let proof: [u8; 32] = STANDARD
            .decode(proof_b64)
            .ok()
            .and_then(|p| p.try_into().ok())
            .ok_or(ScramError::Malformed("proof is not 32 bytes of base64"))?;
        // Everything before ",p=": the proof attribute is last and its value has no comma.
        let without_proof = &msg[..msg.len() - proof_b64.len() - 3];

        let auth_message: &[&[u8]] = &[&client_first_bare, b",", &server_first, b",", without_proof];
        let client_signature = hmac(&self.verifier.stored_key, auth_message);
        let mut client_key = proof;
        xor_in_place(&mut client_key, &client_signature);
        if !bool::from(sha256(&client_key).ct_eq(&self.verifier.stored_key)) {
            return Err(ScramError::InvalidProof);
        }
        let server_signature = hmac(&self.verifier.server_key, auth_message);
        let mut server_final = b"v=".to_vec();
        server_final.extend_from_slice(STANDARD.encode(server_signature).as_bytes());
        self.phase = Phase::Done { client_key };
        Ok(server_final)
    }

    /// The client's ClientKey, recovered from its proof, once the exchange has succeeded.
    /// Holding it lets pgvia log in to a server as that client without knowing the password.
    pub fn client_key(&self) -> Option<[u8; 32]> {
        match self.phase {
            Phase::Done { client_key } => Some(client_key),
            _ => None,
        }
    }
}

/// A server-final-message as a client sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerFinal<'a> {
    /// `v=`: the ServerSignature.
    Verifier([u8; 32]),
    /// `e=`: the server's error value.
    Error(&'a [u8]),
}

/// Parses a server-final-message (`v=<base64 signature>` or `e=<error>`), for clients that
/// want to tell a malformed message from a wrong signature. Extensions are refused: none are
/// defined, PostgreSQL sends none, and postgres-protocol's client would reject them too.
pub fn parse_server_final(msg: &[u8]) -> Option<ServerFinal<'_>> {
    if let Some(error) = attribute(msg, b'e') {
        return Some(ServerFinal::Error(error));
    }
    let signature = attribute(msg, b'v')?;
    STANDARD.decode(signature).ok()?.try_into().ok().map(ServerFinal::Verifier)
}

/// Splits a SCRAM message at commas. Values may not contain commas (RFC 5802 escapes them
/// in names and base64 never produces them), so a plain split is exact.
struct Attributes<'a> {
    rest: Option<&'a [u8]>,
}

impl<'a> Attributes<'a> {
    fn new(msg: &'a [u8]) -> Self {
        Self { rest: Some(msg) }
    }
}

impl<'a> Iterator for Attributes<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        let rest = self.rest?;
        match rest.iter().position(|&b| b == b',') {
            Some(i) => {
                self.rest = Some(&rest[i + 1..]);
                Some(&rest[..i])
            }
            None => {
                self.rest = None;
                Some(rest)
            }
        }
    }
}

/// The value of `attr` if it is `<name>=<value>`.
fn attribute(attr: &[u8], name: u8) -> Option<&[u8]> {
    match attr {
        [n, b'=', value @ ..] if *n == name => Some(value),
        _ => None,
    }
}

fn is_attribute(attr: &[u8]) -> bool {
    matches!(attr, [n, b'=', ..] if n.is_ascii_alphabetic())
}

/// RFC 5802 `printable`: visible ASCII except the comma.
fn is_printable(b: u8) -> bool {
    (0x21..=0x7e).contains(&b) && b != b','
}

#[cfg(test)]
mod tests;
