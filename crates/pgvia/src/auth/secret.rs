//! The secrets a configured user may have, in the formats PostgreSQL stores.

use std::fmt;

use thiserror::Error;
use wire::md5::{is_md5_hash, md5_hash};
use wire::scram::{constant_time_eq as ct_eq, ScramVerifier, VerifierError, DEFAULT_ITERATIONS};

use super::AuthMethod;

/// A user's password as configured: plaintext, an MD5 hash or a SCRAM verifier.
///
/// `Debug` never shows the secret itself.
#[derive(Clone)]
pub enum Secret {
    Plain(PlainSecret),
    /// `"md5"` followed by 32 lowercase hex digits, as in `pg_authid`.
    Md5(String),
    Scram(ScramVerifier),
}

/// A plaintext password together with a SCRAM verifier derived from it once, when the
/// configuration is loaded, so that a SCRAM login costs no key stretching.
#[derive(Clone)]
pub struct PlainSecret {
    password: String,
    scram: ScramVerifier,
}

/// Why a configured secret is unusable.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SecretError {
    #[error("invalid SCRAM-SHA-256 verifier: {0}")]
    Scram(#[from] VerifierError),
}

impl PlainSecret {
    /// Derives the SCRAM verifier with a fresh random salt and PostgreSQL's default
    /// iteration count; this costs a few milliseconds.
    pub fn new(password: impl Into<String>) -> Self {
        let password = password.into();
        let salt: [u8; 16] = rand::random();
        let scram = ScramVerifier::from_password(&password, &salt, DEFAULT_ITERATIONS);
        Self { password, scram }
    }

    pub fn password(&self) -> &str {
        &self.password
    }

    pub fn scram(&self) -> &ScramVerifier {
        &self.scram
    }
}

impl Secret {
    /// Recognises the format as PostgreSQL does, except that text claiming to be a SCRAM
    /// verifier must be one: PostgreSQL would silently take it as a plaintext password.
    pub fn parse(s: &str) -> Result<Self, SecretError> {
        if s.starts_with("SCRAM-SHA-256$") {
            Ok(Secret::Scram(ScramVerifier::parse(s)?))
        } else if is_md5_hash(s) {
            Ok(Secret::Md5(s.to_owned()))
        } else {
            Ok(Secret::Plain(PlainSecret::new(s)))
        }
    }

    /// Whether clients can log in with this secret under `method`. The one impossible pair
    /// is SCRAM with an MD5 hash; configuration validation should reject it, and at login it
    /// fails like a wrong password ([`super::AuthError::UnusableSecret`]).
    pub fn supports(&self, method: AuthMethod) -> bool {
        !matches!((self, method), (Secret::Md5(_), AuthMethod::ScramSha256))
    }

    /// The SCRAM verifier, if this secret has or can give one.
    pub fn scram(&self) -> Option<&ScramVerifier> {
        match self {
            Secret::Plain(p) => Some(&p.scram),
            Secret::Scram(v) => Some(v),
            Secret::Md5(_) => None,
        }
    }

    /// The stored MD5 hash for `user`, if this secret has or can give one.
    pub fn md5(&self, user: &str) -> Option<String> {
        match self {
            Secret::Plain(p) => Some(md5_hash(user, &p.password)),
            Secret::Md5(h) => Some(h.clone()),
            Secret::Scram(_) => None,
        }
    }

    /// Checks a cleartext password. Constant-time in the password's contents; against a
    /// SCRAM verifier it costs the verifier's full key stretching.
    pub fn verify_plaintext(&self, user: &str, password: &str) -> bool {
        match self {
            Secret::Plain(p) => ct_eq(p.password.as_bytes(), password.as_bytes()),
            Secret::Md5(h) => ct_eq(h.as_bytes(), md5_hash(user, password).as_bytes()),
            Secret::Scram(v) => v.verify_plaintext(password),
        }
    }

    pub fn kind(&self) -> &'static str {
        match self {
            Secret::Plain(_) => "plaintext",
            Secret::Md5(_) => "md5",
            Secret::Scram(_) => "scram-sha-256",
        }
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Secret::Plain(p) => p.fmt(f),
            Secret::Md5(_) => f.write_str("Md5(..)"),
            Secret::Scram(v) => f.debug_tuple("Scram").field(v).finish(),
        }
    }
}

impl fmt::Debug for PlainSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Plain(..)")
    }
}

impl std::str::FromStr for Secret {
    type Err = SecretError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}
