use thiserror::Error;

use crate::auth::ServerAuthError;

#[derive(Debug, Error)]
pub enum ServerError {
    #[error("cannot connect to {addr}: {source}")]
    Connect { addr: String, source: std::io::Error },
    #[error("connecting to {addr} timed out after {after:?}")]
    ConnectTimeout { addr: String, after: std::time::Duration },
    #[error("server connection I/O error: {0}")]
    Io(#[from] std::io::Error),
    #[error("server sent a malformed message: {0}")]
    Protocol(#[from] wire::WireError),
    /// pgvia's own StartupMessage could not be written (a name holding a NUL byte).
    #[error("cannot write the server's startup message: {0}")]
    Startup(wire::WireError),
    #[error("authentication to the server failed: {0}")]
    Auth(#[from] ServerAuthError),
    #[error("server refused the connection: {message} (SQLSTATE {code})")]
    Rejected { code: String, message: String },
    #[error("server reported an error: {message} (SQLSTATE {code})")]
    Query { code: String, message: String },
    #[error("server closed the connection")]
    Closed,
    #[error("server connection is out of step: {0}")]
    Desync(&'static str),
    #[error("server did not answer within {0:?}")]
    Timeout(std::time::Duration),
    #[error("server {addr} does not accept TLS, and server_tls_mode is \"{mode}\"")]
    TlsDeclined { addr: String, mode: &'static str },
    #[error("server {addr} answered the SSLRequest with {byte:#04x}, neither S nor N")]
    TlsAnswer { addr: String, byte: u8 },
    #[error("TLS with server {addr} failed (server_tls_mode = \"{mode}\"): {source}")]
    Tls { addr: String, mode: &'static str, source: std::io::Error },
    #[error("{0:?} cannot be used as a TLS server name")]
    TlsName(String),
    #[error("server TLS settings: {0}")]
    TlsSetup(#[from] crate::net::tls::TlsError),
}

impl ServerError {
    /// Builds `Rejected`/`Query` from an ErrorResponse body.
    pub(crate) fn from_error_body(body: &[u8], during_startup: bool) -> Self {
        let f = wire::backend::Fields::new(body);
        let code = f.code().unwrap_or("XX000").to_owned();
        let message = f.message().unwrap_or("(no message)").to_owned();
        if during_startup {
            Self::Rejected { code, message }
        } else {
            Self::Query { code, message }
        }
    }
}
