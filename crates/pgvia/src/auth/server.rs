//! pgvia as the client: logging in to PostgreSQL.

use std::sync::Arc;

use bytes::BytesMut;
use postgres_protocol::authentication::sasl::{ChannelBinding, ScramSha256, SCRAM_SHA_256};
use thiserror::Error;
use wire::build;
use wire::md5::{md5_hash, md5_salted};
use wire::reader::Reader;
use wire::scram::{parse_server_final, ClientExchangeError, KeyedClient, ScramVerifier, ServerFinal};
use wire::WireError;

use super::keys::KeySlot;

/// What pgvia proves itself with when PostgreSQL asks. `Debug` shows no secret.
#[derive(Clone, Default)]
pub enum ServerCredential {
    /// Nothing: the server must not ask for a password.
    #[default]
    None,
    /// A plaintext password: answers every method.
    Password(String),
    /// The stored MD5 hash (`md5...`, as in `pg_authid`): answers MD5 challenges, which
    /// only need md5(password || user), never the password.
    Md5Hash(String),
    /// A SCRAM verifier and the slot where a client's login leaves the ClientKey: answers
    /// SCRAM from a server holding the same verifier, once a client has logged in.
    ScramPassThrough { verifier: ScramVerifier, slot: Arc<KeySlot> },
}

impl ServerCredential {
    fn kind(&self) -> &'static str {
        match self {
            ServerCredential::None => "no password",
            ServerCredential::Password(_) => "a password",
            ServerCredential::Md5Hash(_) => "only an MD5 hash",
            ServerCredential::ScramPassThrough { .. } => "only a SCRAM verifier",
        }
    }
}

/// Same secret; two pass-through credentials are equal when their verifiers are, whatever
/// their slots hold, so a reload that changes nothing keeps the pool.
impl PartialEq for ServerCredential {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (ServerCredential::None, ServerCredential::None) => true,
            (ServerCredential::Password(a), ServerCredential::Password(b))
            | (ServerCredential::Md5Hash(a), ServerCredential::Md5Hash(b)) => a == b,
            (
                ServerCredential::ScramPassThrough { verifier: a, .. },
                ServerCredential::ScramPassThrough { verifier: b, .. },
            ) => a == b,
            _ => false,
        }
    }
}

impl Eq for ServerCredential {}

impl std::fmt::Debug for ServerCredential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.kind())
    }
}

/// What the server connection does after an Authentication ('R') message was handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerAuthStep {
    /// Send what was appended and wait for the next 'R' message.
    Continue,
    /// AuthenticationOk: the server will now send ParameterStatus, BackendKeyData and
    /// ReadyForQuery.
    Ok,
}

/// Whether a server may be sent a password in a form that lets whoever asks for it log in
/// elsewhere as that user (cleartext), or replay it against any server with the same MD5
/// hash.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PlainPasswords {
    #[default]
    Allowed,
    /// Only SCRAM is answered (`server_tls_mode = require` or stronger, by default).
    Refused,
}

/// What pgvia agrees to when a server asks for a password.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerAuthPolicy {
    pub plain_passwords: PlainPasswords,
    /// Most SCRAM iterations computed for one login: each costs pgvia's CPU.
    pub max_scram_iterations: u32,
}

impl Default for ServerAuthPolicy {
    fn default() -> Self {
        Self { plain_passwords: PlainPasswords::Allowed, max_scram_iterations: 100_000 }
    }
}

/// Why pgvia could not log in to a server.
#[derive(Debug, Error)]
pub enum ServerAuthError {
    #[error("server asked for {method} authentication but no password is configured")]
    NoPassword { method: &'static str },
    #[error("server asked for {method} authentication, which {have} cannot answer (set server_password)")]
    Unanswerable { method: &'static str, have: &'static str },
    /// SCRAM pass-through before any client of the user logged in with SCRAM.
    #[error(
        "no ClientKey for this user yet: pgvia holds only a SCRAM verifier and can log in to the server \
         as this user once a client has logged in through pgvia with SCRAM"
    )]
    NoClientKeyYet,
    #[error("SCRAM pass-through: {0}")]
    PassThrough(#[from] ClientExchangeError),
    #[error("server asked for unsupported authentication method {name} (code {code})")]
    Unsupported { code: i32, name: &'static str },
    #[error(
        "server asked for {method} password authentication, refused under server_tls_mode = require or \
         stronger (set server_allow_plain_password = true to allow it)"
    )]
    PlainRefused { method: &'static str },
    #[error("server asked for {count} SCRAM iterations, more than server_scram_max_iterations ({max})")]
    TooManyIterations { count: u64, max: u32 },
    #[error("server offers no supported SASL mechanism (SCRAM-SHA-256 is required)")]
    NoSupportedMechanism,
    #[error("malformed authentication request: {0}")]
    Malformed(#[from] WireError),
    #[error("unexpected authentication request (code {code}) at this point of the exchange")]
    Unexpected { code: i32 },
    #[error("invalid SCRAM server-first-message")]
    ScramServerFirst(#[source] std::io::Error),
    #[error("malformed SCRAM server-final-message")]
    ScramServerFinal,
    /// The server answered `e=...`; the text comes from the server.
    #[error("server reported SCRAM error: {0}")]
    ScramServerError(String),
    #[error("SCRAM server signature mismatch: the server does not know the password")]
    ServerSignatureMismatch,
}

/// The client side of a SCRAM exchange: with the password, or with a recovered ClientKey.
enum Scram {
    Password(ScramSha256),
    Keyed(KeyedClient),
}

enum State {
    Start,
    SaslContinue(Box<Scram>),
    SaslFinal(Box<Scram>),
    /// A password was sent; only AuthenticationOk may follow.
    AwaitOk,
    Done,
}

/// Logs in to one server. Drive it with the body of each Authentication ('R') message,
/// i.e. what follows the tag and length, starting with the 4-byte request code.
pub struct ServerAuthenticator {
    user: String,
    credential: ServerCredential,
    policy: ServerAuthPolicy,
    state: State,
}

impl std::fmt::Debug for ServerAuthenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerAuthenticator").field("user", &self.user).finish_non_exhaustive()
    }
}

const AUTH_OK: i32 = 0;
const AUTH_CLEARTEXT: i32 = 3;
const AUTH_MD5: i32 = 5;
const AUTH_SASL: i32 = 10;
const AUTH_SASL_CONTINUE: i32 = 11;
const AUTH_SASL_FINAL: i32 = 12;

impl ServerAuthenticator {
    pub fn new(user: &str, credential: &ServerCredential, policy: ServerAuthPolicy) -> Self {
        Self { user: user.to_owned(), credential: credential.clone(), policy, state: State::Start }
    }

    /// Handles one 'R' message body and appends the reply frame, if any, to `out`.
    pub fn on_auth_request(
        &mut self,
        body: &[u8],
        out: &mut BytesMut,
    ) -> Result<ServerAuthStep, ServerAuthError> {
        // Taken out first so that any error, even a malformed code, ends the exchange.
        let state = std::mem::replace(&mut self.state, State::Done);
        let mut r = Reader::new(body, "Authentication");
        let code = r.i32()?;
        let (next, step) = match (code, state) {
            // Ok in the middle of SCRAM would skip the server's proof that it knows our
            // password, so it is accepted only when no exchange is under way.
            (AUTH_OK, State::Start | State::AwaitOk) => {
                r.finish()?;
                (State::Done, ServerAuthStep::Ok)
            }
            (AUTH_CLEARTEXT, State::Start) => {
                r.finish()?;
                self.plain_allowed("cleartext")?;
                build::password_message(out, self.password("cleartext")?.as_bytes());
                (State::AwaitOk, ServerAuthStep::Continue)
            }
            (AUTH_MD5, State::Start) => {
                let salt = r.bytes(4)?;
                r.finish()?;
                let salt = [salt[0], salt[1], salt[2], salt[3]];
                self.plain_allowed("MD5")?;
                let stored = match &self.credential {
                    ServerCredential::Md5Hash(hash) => hash.clone(),
                    _ => md5_hash(&self.user, self.password("MD5")?),
                };
                build::password_message(out, md5_salted(&stored, salt).as_bytes());
                (State::AwaitOk, ServerAuthStep::Continue)
            }
            (AUTH_SASL, State::Start) => {
                if !offers_scram(r)? {
                    return Err(ServerAuthError::NoSupportedMechanism);
                }
                let scram = match &self.credential {
                    ServerCredential::ScramPassThrough { verifier, slot } => {
                        let key = slot.key_for(verifier).ok_or(ServerAuthError::NoClientKeyYet)?;
                        let nonce: [u8; 18] = rand::random();
                        let keyed = KeyedClient::new(verifier, key, &nonce)?;
                        build::sasl_initial_response(out, SCRAM_SHA_256, &keyed.client_first());
                        Scram::Keyed(keyed)
                    }
                    _ => {
                        let password = self.password("SCRAM-SHA-256")?;
                        let scram = ScramSha256::new(password.as_bytes(), ChannelBinding::unsupported());
                        build::sasl_initial_response(out, SCRAM_SHA_256, scram.message());
                        Scram::Password(scram)
                    }
                };
                (State::SaslContinue(Box::new(scram)), ServerAuthStep::Continue)
            }
            (AUTH_SASL_CONTINUE, State::SaslContinue(mut scram)) => {
                // Checked before the PBKDF2 it would cost: i=2000000000 would keep a core busy
                // for an hour.
                if let Some(count) = iterations(r.rest()) {
                    if count > u64::from(self.policy.max_scram_iterations) {
                        return Err(ServerAuthError::TooManyIterations {
                            count,
                            max: self.policy.max_scram_iterations,
                        });
                    }
                }
                match scram.as_mut() {
                    Scram::Password(scram) => {
                        scram.update(r.rest()).map_err(ServerAuthError::ScramServerFirst)?;
                        build::sasl_response(out, scram.message());
                    }
                    Scram::Keyed(keyed) => build::sasl_response(out, &keyed.server_first(r.rest())?),
                }
                (State::SaslFinal(scram), ServerAuthStep::Continue)
            }
            (AUTH_SASL_FINAL, State::SaslFinal(mut scram)) => {
                check_server_final(r.rest())?;
                match scram.as_mut() {
                    // The message is well formed, so a failure here can only be the signature.
                    Scram::Password(scram) => {
                        scram.finish(r.rest()).map_err(|_| ServerAuthError::ServerSignatureMismatch)?;
                    }
                    Scram::Keyed(keyed) => keyed.server_final(r.rest())?,
                }
                (State::AwaitOk, ServerAuthStep::Continue)
            }
            (AUTH_OK | AUTH_CLEARTEXT | AUTH_MD5 | AUTH_SASL | AUTH_SASL_CONTINUE | AUTH_SASL_FINAL, _) => {
                return Err(ServerAuthError::Unexpected { code });
            }
            (code, _) => return Err(ServerAuthError::Unsupported { code, name: method_name(code) }),
        };
        self.state = next;
        Ok(step)
    }

    fn plain_allowed(&self, method: &'static str) -> Result<(), ServerAuthError> {
        match self.policy.plain_passwords {
            PlainPasswords::Allowed => Ok(()),
            PlainPasswords::Refused => Err(ServerAuthError::PlainRefused { method }),
        }
    }

    fn password(&self, method: &'static str) -> Result<&str, ServerAuthError> {
        match &self.credential {
            ServerCredential::Password(p) => Ok(p),
            ServerCredential::None => Err(ServerAuthError::NoPassword { method }),
            other => Err(ServerAuthError::Unanswerable { method, have: other.kind() }),
        }
    }
}

/// The `i=` attribute of a SCRAM server-first-message (`r=...,s=...,i=4096`), if it reads
/// as a number; a malformed message is left for the SCRAM client to reject.
fn iterations(server_first: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(server_first).ok()?;
    let value = text.split(',').find_map(|attr| attr.strip_prefix("i="))?;
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // Saturates, so an absurd count is refused rather than wrapped.
    Some(value.bytes().fold(0u64, |acc, b| acc.saturating_mul(10).saturating_add(u64::from(b - b'0'))))
}

/// Reads AuthenticationSASL's list of mechanisms (NUL-terminated names, then an empty one).
fn offers_scram(mut r: Reader<'_>) -> Result<bool, WireError> {
    let mut found = false;
    loop {
        let name = r.cstr_bytes()?;
        if name.is_empty() {
            break;
        }
        found |= name == SCRAM_SHA_256.as_bytes();
    }
    r.finish()?;
    Ok(found)
}

/// Parses server-final-message first, so that a later failure to verify can only mean a
/// wrong signature.
fn check_server_final(msg: &[u8]) -> Result<(), ServerAuthError> {
    match parse_server_final(msg) {
        Some(ServerFinal::Verifier(_)) => Ok(()),
        Some(ServerFinal::Error(e)) => {
            Err(ServerAuthError::ScramServerError(String::from_utf8_lossy(e).into_owned()))
        }
        None => Err(ServerAuthError::ScramServerFinal),
    }
}

fn method_name(code: i32) -> &'static str {
    match code {
        2 => "KerberosV5",
        6 => "SCM credentials",
        7 => "GSSAPI",
        8 => "GSSAPI continue",
        9 => "SSPI",
        _ => "unknown",
    }
}
