//! Everything that can end a client session, and the one place that turns it into the
//! ErrorResponse the client sees.

use std::borrow::Cow;

use thiserror::Error;
use wire::build::{ErrorFields, Severity};
use wire::sqlstate::SqlState;

use crate::auth::AuthError;
use crate::pool::PoolError;
use crate::server::ServerError;

#[derive(Debug, Error)]
pub enum SessionError {
    #[error("client I/O error: {0}")]
    ClientIo(#[from] std::io::Error),
    #[error("invalid message from client: {0}")]
    Protocol(#[from] wire::WireError),
    #[error("{0}")]
    ProtocolState(&'static str),
    #[error("TLS handshake failed: {0}")]
    Tls(std::io::Error),
    #[error("{message}")]
    Refused { code: SqlState, message: String },
    /// A server refused something on the client's behalf (e.g. an invalid startup setting);
    /// its SQLSTATE is passed on.
    #[error("{message}")]
    ServerRefused { code: String, message: String },
    #[error("authentication failed for user \"{user}\": {source}")]
    Auth { user: String, source: AuthError },
    #[error(transparent)]
    Pool(#[from] PoolError),
    #[error("server connection failed: {0}")]
    Server(#[from] ServerError),
    #[error("pgvia is shutting down")]
    Shutdown,
    #[error("client did not finish logging in within {0:?}")]
    LoginTimeout(std::time::Duration),
}

impl From<crate::app::Refusal> for SessionError {
    fn from(r: crate::app::Refusal) -> Self {
        Self::Refused { code: r.code, message: r.message }
    }
}

impl From<crate::admin::ConsoleError> for SessionError {
    fn from(e: crate::admin::ConsoleError) -> Self {
        match e {
            crate::admin::ConsoleError::ClientIo(e) => Self::ClientIo(e),
            crate::admin::ConsoleError::Protocol(e) => Self::Protocol(e),
        }
    }
}

impl SessionError {
    pub fn refused(code: SqlState, message: impl Into<String>) -> Self {
        Self::Refused { code, message: message.into() }
    }

    /// What to tell the client, or `None` when it is gone or must not be answered.
    pub fn client_error(&self) -> Option<(Cow<'static, str>, String)> {
        if let Self::ServerRefused { code, message } = self {
            return Some((Cow::Owned(code.clone()), message.clone()));
        }
        let (code, message) = match self {
            Self::ServerRefused { .. } => return None,
            Self::ClientIo(_) | Self::Tls(_) => return None,
            Self::Protocol(e) => (SqlState::PROTOCOL_VIOLATION, format!("invalid frontend message: {e}")),
            Self::ProtocolState(m) => (SqlState::PROTOCOL_VIOLATION, (*m).to_owned()),
            Self::Refused { code, message } => (*code, message.clone()),
            Self::Auth { user, source } => (source.sqlstate(), source.client_message(user)),
            Self::Pool(PoolError::CheckoutTimeout { .. }) => {
                (SqlState::TOO_MANY_CONNECTIONS, self.to_string())
            }
            Self::Pool(PoolError::Closed { .. }) | Self::Shutdown => {
                (SqlState::ADMIN_SHUTDOWN, "terminating connection: pgvia is shutting down".to_owned())
            }
            Self::Pool(PoolError::Connect { pool, source }) => server_error_for_client(pool, source),
            Self::Pool(PoolError::NoPrimary { .. }) => (SqlState::CONNECTION_FAILURE, self.to_string()),
            Self::Server(e) => server_error_for_client("", e),
            Self::LoginTimeout(_) => (SqlState::PROTOCOL_VIOLATION, self.to_string()),
        };
        Some((Cow::Borrowed(code.0), message))
    }

    /// Writes the FATAL ErrorResponse for this error into `out`, if the client should get one.
    pub fn write_fatal(&self, out: &mut bytes::BytesMut) {
        if let Some((code, message)) = self.client_error() {
            ErrorFields::with_code(Severity::Fatal, &code, &message).write(out);
        }
    }
}

/// A server's refusal keeps its SQLSTATE (a missing database stays 3D000); everything else
/// about reaching the server is a connection failure.
fn server_error_for_client(pool: &str, e: &ServerError) -> (SqlState, String) {
    let prefix = if pool.is_empty() { String::new() } else { format!("pool \"{pool}\": ") };
    match e {
        ServerError::Rejected { code, message } => {
            (leak_known(code), format!("{prefix}server refused the connection: {message}"))
        }
        _ => (SqlState::CONNECTION_FAILURE, format!("{prefix}{e}")),
    }
}

/// Maps a server's SQLSTATE text onto the codes pgvia knows, keeping the most useful ones.
fn leak_known(code: &str) -> SqlState {
    match code {
        "3D000" => SqlState::INVALID_CATALOG_NAME,
        "28P01" => SqlState::INVALID_PASSWORD,
        "28000" => SqlState::INVALID_AUTHORIZATION_SPECIFICATION,
        "53300" => SqlState::TOO_MANY_CONNECTIONS,
        "57P03" => SqlState::CANNOT_CONNECT_NOW,
        _ => SqlState::CONNECTION_FAILURE,
    }
}
