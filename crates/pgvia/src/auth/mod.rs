//! Authentication, both ways round, as sans-I/O state machines.
//!
//! * [`ClientAuthenticator`]: pgvia is the server and checks an application's password.
//! * [`ServerAuthenticator`]: pgvia is the client and logs in to PostgreSQL.
//!
//! The session owns the sockets: it hands these machines the body of each message
//! (after tag and length) and sends whatever frames they append to its write buffer.

mod client;
mod keys;
mod looked_up;
mod secret;
mod server;

#[cfg(test)]
mod tests;

pub use client::{AuthError, AuthProtocolError, AuthStep, ClientAuthenticator};
pub use keys::{ClientKeys, KeySlot};
pub use looked_up::{Found, LookedUp, SecretCache};
pub use secret::{PlainSecret, Secret, SecretError};
pub use server::{
    PlainPasswords, ServerAuthError, ServerAuthPolicy, ServerAuthStep, ServerAuthenticator, ServerCredential,
};

/// How pgvia checks a client's password.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AuthMethod {
    /// No password at all: whoever names a configured user is let in.
    Trust,
    /// The password in clear text; only sensible over TLS.
    Cleartext,
    /// PostgreSQL's salted MD5. A user whose secret is a SCRAM verifier is asked for SCRAM
    /// instead, as PostgreSQL does under `md5` in `pg_hba.conf`.
    Md5,
    /// SCRAM-SHA-256 without channel binding.
    #[serde(rename = "scram-sha-256")]
    ScramSha256,
    /// A TLS client certificate from `client_tls_ca_file` whose common name is the user
    /// name; no password.
    Cert,
}

impl AuthMethod {
    pub fn name(self) -> &'static str {
        match self {
            AuthMethod::Trust => "trust",
            AuthMethod::Cleartext => "cleartext",
            AuthMethod::Md5 => "md5",
            AuthMethod::ScramSha256 => "scram-sha-256",
            AuthMethod::Cert => "cert",
        }
    }
}

impl std::fmt::Display for AuthMethod {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
