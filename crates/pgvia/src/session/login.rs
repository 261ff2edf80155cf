//! From a StartupMessage to ReadyForQuery: protocol negotiation, authentication, limits,
//! a server from the pool brought to the client's settings, and the welcome messages.

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use wire::frontend::tag;
use wire::sqlstate::SqlState;
use wire::startup::{parse_options, StartupMessage};
use wire::{build, FrameDecoder};

use super::error::SessionError;
use crate::app::App;
use crate::auth::{AuthMethod, AuthStep, ClientAuthenticator};
use crate::net::ClientStream;

/// Largest authentication message accepted (PostgreSQL's PG_MAX_AUTH_TOKEN_LENGTH).
const MAX_AUTH_FRAME: usize = 65_535 + 5;

/// Who the client is and what it asked for.
#[derive(Debug, Clone)]
pub struct ClientIdentity {
    pub user: String,
    pub database: String,
    /// Settings to apply on the server: startup parameters and `options=-c ...`, in order.
    pub settings: Vec<(String, String)>,
}

/// Startup parameters that are not settings.
const NOT_SETTINGS: &[&str] = &["user", "database", "options", "replication"];

pub fn identify(startup: &StartupMessage) -> Result<ClientIdentity, SessionError> {
    let user = startup.param("user").filter(|u| !u.is_empty()).ok_or_else(|| {
        SessionError::refused(
            SqlState::INVALID_AUTHORIZATION_SPECIFICATION,
            "no PostgreSQL user name specified in startup packet",
        )
    })?;
    if startup.param("replication").is_some_and(|r| !matches!(r, "false" | "off" | "no" | "0")) {
        return Err(SessionError::refused(
            SqlState::FEATURE_NOT_SUPPORTED,
            "replication connections are not supported through pgvia; connect to PostgreSQL directly",
        ));
    }
    let database = startup.param("database").filter(|d| !d.is_empty()).unwrap_or(user);
    let mut settings: Vec<(String, String)> = startup
        .params
        .iter()
        .filter(|(k, _)| !NOT_SETTINGS.contains(&k.as_str()) && !k.starts_with("_pq_."))
        .cloned()
        .collect();
    if let Some(options) = startup.param("options") {
        let parsed = parse_options(options).map_err(|m| {
            SessionError::refused(SqlState::PROTOCOL_VIOLATION, format!("invalid options: {m}"))
        })?;
        settings.extend(parsed);
    }
    Ok(ClientIdentity { user: user.to_owned(), database: database.to_owned(), settings })
}

/// The protocol version agreed with a client. Servers are always spoken to in 3.0: what
/// 3.2 changes (the cancel key's length) is between pgvia and each side on its own, since
/// clients get pgvia's keys, never a server's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    V3_0,
    V3_2,
}

impl Protocol {
    /// The length of the cancel secret pgvia issues: 3.2 allows up to 256 bytes, and 32 is
    /// what PostgreSQL 18 sends.
    pub fn cancel_key_len(self) -> usize {
        match self {
            Protocol::V3_0 => 4,
            Protocol::V3_2 => 32,
        }
    }
}

/// Settles the protocol version, as PostgreSQL does: 3.0 and 3.2 are taken as asked; a
/// newer minor version, or any protocol option (`_pq_.*`, none of which pgvia knows), gets
/// a NegotiateProtocolVersion naming the newest pgvia speaks, and the client carries on.
/// 3.1, which no PostgreSQL release defines, is answered with 3.0.
pub fn negotiate(startup: &StartupMessage, out: &mut BytesMut) -> Protocol {
    let options: Vec<&str> = startup.protocol_options().collect();
    let (agreed, minor) = match startup.minor {
        0 => (Protocol::V3_0, 0),
        1 => (Protocol::V3_0, 0),
        _ => (Protocol::V3_2, 2),
    };
    if startup.minor != minor || !options.is_empty() {
        build::negotiate_protocol_version(out, u32::from(minor), options.into_iter());
    }
    agreed
}

/// Runs the authentication exchange. Returns when the client is authenticated; writes
/// nothing after the last challenge (the caller sends AuthenticationOk).
pub async fn authenticate(
    app: &App,
    stream: &mut ClientStream,
    buf: &mut BytesMut,
    out: &mut BytesMut,
    user: &str,
) -> Result<(), SessionError> {
    let config = app.config();
    // A name the file does not list is looked up in PostgreSQL when `[auth_query]` says how
    // (from the cache while fresh, so a changed password takes over within cache_ttl).
    let looked_up = if config.auth_query.is_some() && !app.is_file_user(user) {
        match crate::auth_query::lookup(app, user).await {
            Ok(found) => Some(found),
            Err(e) => {
                tracing::warn!(user, error = %e, "cannot look up the user with auth_query");
                return Err(SessionError::refused(
                    SqlState::CONNECTION_FAILURE,
                    "pgvia could not look up the user (auth_query failed; see pgvia's log)",
                ));
            }
        }
    } else {
        None
    };
    let known = match &looked_up {
        Some(found) => found.is_some(),
        None => config.user(user).is_some(),
    };
    let method = match &looked_up {
        Some(_) => config.general.auth_method,
        None => config.user(user).map_or(config.general.auth_method, |u| config.auth_method(u)),
    };
    let transport = super::transport::Transport::of(stream);
    if super::transport::check_method(&config.general, method, known, user, &transport)? {
        return Ok(());
    }
    let secret = match &looked_up {
        Some(found) => found.as_ref().map(|f| f.secret.clone()),
        None => config.user(user).and_then(|_| app.secret(user)),
    };
    if method == AuthMethod::Trust {
        return if known {
            Ok(())
        } else {
            Err(SessionError::Auth { user: user.to_owned(), source: crate::auth::AuthError::Failed })
        };
    }
    let binding = app.tls_channel_binding.as_deref().filter(|_| stream.is_tls());
    let mut auth = ClientAuthenticator::start(method, secret.as_deref(), user, binding, out);
    let decoder = FrameDecoder::new(MAX_AUTH_FRAME);
    loop {
        stream.write_all(out).await?;
        stream.flush().await?;
        out.clear();
        let frame = loop {
            if let Some(f) = decoder.decode(buf)? {
                break f;
            }
            if stream.read_buf(buf).await? == 0 {
                return Err(SessionError::ClientIo(std::io::ErrorKind::UnexpectedEof.into()));
            }
        };
        if frame.tag() != tag::PASSWORD {
            return Err(SessionError::ProtocolState("expected a password response during authentication"));
        }
        let step = if auth.hashes_next() {
            // PBKDF2 over thousands of iterations: a few milliseconds of CPU that must not
            // stall the worker's other sessions, and at most a few at once.
            let permit = app.admission.hashing_permit().await;
            let (back, step, reply) = tokio::task::spawn_blocking(move || {
                let mut reply = BytesMut::new();
                let step = auth.on_password_message(frame.body(), &mut reply);
                (auth, step, reply)
            })
            .await
            .map_err(|e| SessionError::ClientIo(std::io::Error::other(e)))?;
            drop(permit);
            auth = back;
            out.extend_from_slice(&reply);
            step
        } else {
            auth.on_password_message(frame.body(), out)
        };
        match step {
            Ok(AuthStep::Continue) => continue,
            Ok(AuthStep::Done) => {
                if let Some(Some(found)) = &looked_up {
                    crate::auth_query::pools::admit(app, user, found)
                        .map_err(|e| SessionError::refused(SqlState::TOO_MANY_CONNECTIONS, e.to_string()))?;
                }
                // SCRAM pass-through: this login's ClientKey is what pgvia logs in to the
                // server with, for as long as the user has pools (auth/keys.rs).
                if let Some(key) = auth.scram_client_key() {
                    if app.config().user(user).is_some_and(crate::app::passes_scram_through) {
                        app.client_keys.learn(user, key);
                    }
                }
                return Ok(());
            }
            Err(source) => return Err(SessionError::Auth { user: user.to_owned(), source }),
        }
    }
}
