//! pgvia as the server: checking an application's password.

use std::sync::OnceLock;

use bytes::BytesMut;
use thiserror::Error;
use wire::build;
use wire::md5::verify_md5_response;
use wire::reader::Reader;
use wire::scram::{Binding, ScramError, ScramVerifier, ServerExchange, SCRAM_SHA_256, SCRAM_SHA_256_PLUS};
use wire::sqlstate::SqlState;
use wire::WireError;

use super::{AuthMethod, Secret};

/// What the session does after a message was handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthStep {
    /// Send what was appended and wait for the client's next PasswordMessage.
    Continue,
    /// The client is authenticated: send what was appended, then AuthenticationOk.
    Done,
}

/// Why a client was not authenticated.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum AuthError {
    /// Wrong password, or a user that does not exist: the client cannot tell which.
    #[error("password authentication failed")]
    Failed,
    /// No client certificate, or one naming someone else, or a user that does not exist.
    #[error("certificate authentication failed")]
    Certificate,
    /// The user's secret cannot serve the method (an MD5 hash under SCRAM). The client is
    /// told only that authentication failed; the session should log this as a config error.
    #[error("the configured {secret} secret cannot be used for {method} authentication")]
    UnusableSecret { method: AuthMethod, secret: &'static str },
    /// The client broke the protocol.
    #[error(transparent)]
    Protocol(#[from] AuthProtocolError),
}

/// The ways a client can break the authentication protocol.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum AuthProtocolError {
    #[error("invalid password message: {0}")]
    Wire(#[from] WireError),
    #[error(transparent)]
    Scram(ScramError),
    #[error("client selected an invalid SASL authentication mechanism")]
    UnsupportedMechanism,
    #[error("password message received when none was expected")]
    Unexpected,
}

impl AuthError {
    pub fn sqlstate(&self) -> SqlState {
        match self {
            AuthError::Failed | AuthError::UnusableSecret { .. } => SqlState::INVALID_PASSWORD,
            AuthError::Certificate => SqlState::INVALID_AUTHORIZATION_SPECIFICATION,
            AuthError::Protocol(_) => SqlState::PROTOCOL_VIOLATION,
        }
    }

    /// The text for the client's ErrorResponse. A misconfigured secret reads exactly like a
    /// wrong password, so that it reveals nothing.
    pub fn client_message(&self, user: &str) -> String {
        match self {
            AuthError::Failed | AuthError::UnusableSecret { .. } => {
                format!("password authentication failed for user \"{user}\"")
            }
            AuthError::Certificate => format!("certificate authentication failed for user \"{user}\""),
            AuthError::Protocol(e) => e.to_string(),
        }
    }
}

impl From<ScramError> for AuthError {
    fn from(e: ScramError) -> Self {
        if e.is_invalid_proof() {
            AuthError::Failed
        } else {
            AuthError::Protocol(AuthProtocolError::Scram(e))
        }
    }
}

impl From<WireError> for AuthError {
    fn from(e: WireError) -> Self {
        AuthError::Protocol(AuthProtocolError::Wire(e))
    }
}

/// How an exchange that must fail ends, whatever the client sends.
#[derive(Debug, Clone, Copy)]
enum Doom {
    /// The user is unknown.
    UnknownUser,
    /// The user's secret cannot serve the method.
    Unusable { method: AuthMethod, secret: &'static str },
}

impl Doom {
    fn error(self) -> AuthError {
        match self {
            Doom::UnknownUser => AuthError::Failed,
            Doom::Unusable { method, secret } => AuthError::UnusableSecret { method, secret },
        }
    }
}

#[derive(Debug)]
enum State {
    Cleartext {
        secret: Result<Secret, Doom>,
    },
    Md5 {
        salt: [u8; 4],
        stored: Result<String, Doom>,
    },
    SaslInitial {
        exchange: Box<ServerExchange>,
        doom: Option<Doom>,
        /// `tls-server-end-point` data when SCRAM-SHA-256-PLUS was offered.
        binding: Option<Vec<u8>>,
    },
    SaslFirst {
        exchange: Box<ServerExchange>,
        doom: Option<Doom>,
    },
    SaslFinal {
        exchange: Box<ServerExchange>,
        doom: Option<Doom>,
    },
    Done {
        client_key: Option<[u8; 32]>,
    },
    /// After an error every message is unexpected.
    Closed,
}

/// Authenticates one client. Drive it with the body of each PasswordMessage ('p') frame.
///
/// An unknown user (`secret = None`) gets the full exchange of the method, with a stand-in
/// MD5 salt or SCRAM verifier, and always fails at the end with [`AuthError::Failed`], so
/// that role names cannot be probed by behaviour. Under `md5` it is asked for MD5 even
/// though a user with a SCRAM verifier would be asked for SCRAM; plaintext secrets (MD5
/// there) are the common case, so that is where an unknown user blends in best.
#[derive(Debug)]
pub struct ClientAuthenticator {
    state: State,
    user: String,
}

impl ClientAuthenticator {
    /// Writes the first challenge into `out`; nothing for `Trust` and `Cert`, which are done
    /// at once ([`ClientAuthenticator::is_done`]) and ignore `secret`: whether the user may
    /// log in at all (and the certificate) is for the session to decide.
    ///
    /// `binding` is the `tls-server-end-point` data of pgvia's certificate when the client
    /// is on TLS: SCRAM-SHA-256-PLUS is then offered beside SCRAM-SHA-256, also to unknown
    /// users, so the offer reveals nothing.
    pub fn start(
        method: AuthMethod,
        secret: Option<&Secret>,
        user: &str,
        binding: Option<&[u8]>,
        out: &mut BytesMut,
    ) -> Self {
        let unknown = Doom::UnknownUser;
        let scram = |verifier, doom, out: &mut BytesMut| start_scram(verifier, doom, binding, out);
        let state = match (method, secret) {
            (AuthMethod::Trust | AuthMethod::Cert, _) => State::Done { client_key: None },
            (AuthMethod::Cleartext, s) => {
                build::authentication_cleartext_password(out);
                State::Cleartext { secret: s.cloned().ok_or(unknown) }
            }
            (AuthMethod::Md5, Some(Secret::Scram(v))) => scram(v.clone(), None, out),
            (AuthMethod::Md5, s) => {
                let salt: [u8; 4] = rand::random();
                build::authentication_md5_password(out, salt);
                let stored = s.and_then(|s| s.md5(user)).ok_or(unknown);
                State::Md5 { salt, stored }
            }
            (AuthMethod::ScramSha256, Some(s)) => match s.scram() {
                Some(v) => scram(v.clone(), None, out),
                None => {
                    let doom = Doom::Unusable { method, secret: s.kind() };
                    scram(ScramVerifier::mock(user, mock_key()), Some(doom), out)
                }
            },
            (AuthMethod::ScramSha256, None) => {
                scram(ScramVerifier::mock(user, mock_key()), Some(unknown), out)
            }
        };
        Self { state, user: user.to_owned() }
    }

    /// True when the next PasswordMessage will be checked by hashing the password (cleartext
    /// against a SCRAM verifier: PBKDF2), which the session runs off its async worker.
    pub fn hashes_next(&self) -> bool {
        matches!(&self.state, State::Cleartext { secret: Ok(Secret::Scram(_)) })
    }

    /// True once the client is authenticated (at once for `Trust`).
    pub fn is_done(&self) -> bool {
        matches!(self.state, State::Done { .. })
    }

    /// After a successful SCRAM login, the client's ClientKey, with which pgvia can log in
    /// to a server holding the same verifier without knowing the password.
    pub fn scram_client_key(&self) -> Option<[u8; 32]> {
        match self.state {
            State::Done { client_key } => client_key,
            _ => None,
        }
    }

    /// Handles the body of one PasswordMessage / SASLInitialResponse / SASLResponse frame,
    /// appending any reply to `out`. On error nothing is appended; the session sends the
    /// ErrorResponse ([`AuthError::sqlstate`], [`AuthError::client_message`]) and closes.
    pub fn on_password_message(&mut self, body: &[u8], out: &mut BytesMut) -> Result<AuthStep, AuthError> {
        let state = std::mem::replace(&mut self.state, State::Closed);
        let (next, step) = self.advance(state, body, out)?;
        self.state = next;
        Ok(step)
    }

    fn advance(&self, state: State, body: &[u8], out: &mut BytesMut) -> Result<(State, AuthStep), AuthError> {
        match state {
            State::Cleartext { secret } => {
                let password = password_text(body)?;
                let password = std::str::from_utf8(password).map_err(|_| AuthError::Failed)?;
                let secret = secret.map_err(Doom::error)?;
                if password.is_empty() || !secret.verify_plaintext(&self.user, password) {
                    return Err(AuthError::Failed);
                }
                Ok((State::Done { client_key: None }, AuthStep::Done))
            }
            State::Md5 { salt, stored } => {
                let response = password_text(body)?;
                let stored = stored.map_err(Doom::error)?;
                if !verify_md5_response(&stored, salt, response) {
                    return Err(AuthError::Failed);
                }
                Ok((State::Done { client_key: None }, AuthStep::Done))
            }
            State::SaslInitial { mut exchange, doom, binding } => {
                let mut r = Reader::new(body, "SASLInitialResponse");
                let mechanism = r.cstr_bytes()?;
                let agreed = match (mechanism, binding) {
                    (m, None) if m == SCRAM_SHA_256.as_bytes() => Binding::NotOffered,
                    (m, Some(_)) if m == SCRAM_SHA_256.as_bytes() => Binding::Declined,
                    (m, Some(data)) if m == SCRAM_SHA_256_PLUS.as_bytes() => Binding::Required(data),
                    _ => return Err(AuthProtocolError::UnsupportedMechanism.into()),
                };
                exchange.set_binding(agreed);
                let data = r.nullable_bytes()?;
                r.finish()?;
                match data {
                    // The client may leave the first message for a SASLResponse; an empty
                    // challenge asks for it.
                    None => {
                        build::authentication_sasl_continue(out, b"");
                        Ok((State::SaslFirst { exchange, doom }, AuthStep::Continue))
                    }
                    Some(data) => {
                        let server_first = exchange.client_first(data)?;
                        build::authentication_sasl_continue(out, &server_first);
                        Ok((State::SaslFinal { exchange, doom }, AuthStep::Continue))
                    }
                }
            }
            State::SaslFirst { mut exchange, doom } => {
                let server_first = exchange.client_first(body)?;
                build::authentication_sasl_continue(out, &server_first);
                Ok((State::SaslFinal { exchange, doom }, AuthStep::Continue))
            }
            State::SaslFinal { mut exchange, doom } => {
                let result = exchange.client_final(body);
                if let Some(doom) = doom {
                    // Malformed input is reported as such even here, exactly as for a real
                    // user; only a well-formed proof meets the predetermined failure.
                    return match result {
                        Err(e) if !e.is_invalid_proof() => Err(e.into()),
                        _ => Err(doom.error()),
                    };
                }
                let server_final = result?;
                build::authentication_sasl_final(out, &server_final);
                Ok((State::Done { client_key: exchange.client_key() }, AuthStep::Done))
            }
            State::Done { .. } | State::Closed => Err(AuthProtocolError::Unexpected.into()),
        }
    }
}

fn start_scram(
    verifier: ScramVerifier,
    doom: Option<Doom>,
    binding: Option<&[u8]>,
    out: &mut BytesMut,
) -> State {
    // PostgreSQL lists the PLUS variant first, and libpq picks it when it can.
    match binding {
        Some(_) => build::authentication_sasl(out, &[SCRAM_SHA_256_PLUS, SCRAM_SHA_256]),
        None => build::authentication_sasl(out, &[SCRAM_SHA_256]),
    }
    let nonce: [u8; wire::scram::SERVER_NONCE_LEN] = rand::random();
    State::SaslInitial {
        exchange: Box::new(ServerExchange::new(verifier, &nonce)),
        doom,
        binding: binding.map(<[u8]>::to_vec),
    }
}

/// The password (or MD5 response) of a PasswordMessage: one NUL-terminated string, nothing
/// after it.
fn password_text(body: &[u8]) -> Result<&[u8], WireError> {
    let mut r = Reader::new(body, "PasswordMessage");
    let text = r.cstr_bytes()?;
    r.finish()?;
    Ok(text)
}

/// Keys the stand-in verifiers of unknown users. Random per process, so that the salt an
/// unknown user is shown is stable (as a real user's is) but cannot be predicted. A process
/// global is harmless here: it is fixed at first use and no test depends on its value.
fn mock_key() -> &'static [u8; 32] {
    static KEY: OnceLock<[u8; 32]> = OnceLock::new();
    KEY.get_or_init(rand::random)
}
