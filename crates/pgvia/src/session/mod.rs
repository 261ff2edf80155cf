//! One client connection from accept to close.
//!
//! `startup` handles the untagged phase (TLS, cancel), `login` authentication and settings,
//! `relay` the serve loop; this file strings them together and decides what happens to the
//! server afterwards.

mod error;
mod login;
mod relay;
mod settings;
mod startup;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use wire::backend::TransactionStatus;
use wire::build::{self, ErrorFields};
use wire::sqlstate::SqlState;
use wire::FrameDecoder;

pub use error::SessionError;
use relay::{Buffers, RelayEnd};
use startup::Opening;

use crate::app::App;
use crate::cancel::CancelTarget;
use crate::net::ClientStream;

/// How long a client may take from connecting to finishing authentication, as PostgreSQL's
/// `authentication_timeout` default.
const LOGIN_TIMEOUT: Duration = Duration::from_secs(60);

/// Serves one client connection to the end. Never panics on client input; logs why it ended.
pub async fn serve(app: Arc<App>, tcp: TcpStream, peer: SocketAddr) {
    crate::net::stream::tune(&tcp);
    let _session = app.session_started();
    match run(&app, tcp).await {
        Ok(()) => tracing::debug!(%peer, "client session ended"),
        Err(SessionError::ClientIo(e)) => tracing::debug!(%peer, error = %e, "client connection closed"),
        Err(e) => tracing::info!(%peer, error = %e, "client session ended with an error"),
    }
}

async fn run(app: &App, tcp: TcpStream) -> Result<(), SessionError> {
    let opening = tokio::time::timeout(LOGIN_TIMEOUT, startup::open(app, tcp))
        .await
        .map_err(|_| SessionError::LoginTimeout(LOGIN_TIMEOUT))??;
    let Some(Opening::Login { mut stream, startup, mut buf }) = opening else { return Ok(()) };
    let mut out = BytesMut::with_capacity(512);
    let result = session(app, &mut stream, &startup, &mut buf, &mut out).await;
    if let Err(e) = &result {
        e.write_fatal(&mut out);
    }
    if !out.is_empty() {
        let _ = stream.write_all(&out).await;
    }
    let _ = stream.shutdown().await;
    result
}

async fn session(
    app: &App,
    stream: &mut ClientStream,
    startup: &wire::startup::StartupMessage,
    buf: &mut BytesMut,
    out: &mut BytesMut,
) -> Result<(), SessionError> {
    let _client_slot = app.client_slot(None)?;
    let identity = login::identify(startup)?;
    login::negotiate(startup, out);
    let auth = login::authenticate(app, stream, buf, out, &identity.user);
    tokio::time::timeout(LOGIN_TIMEOUT, auth)
        .await
        .map_err(|_| SessionError::LoginTimeout(LOGIN_TIMEOUT))??;
    let config = app.config();
    let Some(database) = config.database(&identity.database) else {
        return Err(SessionError::refused(
            SqlState::INVALID_CATALOG_NAME,
            format!("database \"{}\" does not exist", identity.database),
        ));
    };
    let Some(user) = config.user(&identity.user) else {
        // Authentication cannot succeed for an unknown user; this is belt and braces.
        return Err(SessionError::refused(SqlState::INVALID_PASSWORD, "authentication failed"));
    };
    let _db_slot = app.client_slot(Some(&database.name))?;
    build::authentication_ok(out);
    stream.write_all(out).await?;
    out.clear();

    let pool = app.pool_for(database, user);
    let mut checkout = pool.checkout().await?;
    let general = &config.general;
    settings::apply(checkout.conn(), &identity.settings, general.server_reset_timeout).await?;

    let key = app.cancels.register();
    for (name, value) in &checkout.conn_ref().params {
        build::parameter_status(out, name, value);
    }
    build::backend_key_data(out, key.process_id, &key.secret);
    build::ready_for_query(out, TransactionStatus::Idle.as_byte());
    stream.write_all(out).await?;
    out.clear();

    let conn = checkout.conn();
    key.slot.set(Some(CancelTarget {
        server: conn.peer,
        process_id: conn.key.process_id,
        secret: conn.key.secret.clone(),
    }));
    let mut bufs = Buffers::new();
    bufs.from_client = std::mem::take(buf);
    let decoder = FrameDecoder::new(general.max_message_size as usize);
    let mut shutdown = app.shutdown_watch();
    let end = relay::relay(stream, checkout.conn(), &mut bufs, &decoder, &mut shutdown).await;
    key.slot.set(None);

    // The client hears how its session ended before the server is reset, which may take a
    // round trip or two.
    match end {
        RelayEnd::ClientDone => {}
        RelayEnd::ClientError(e) => {
            tracing::info!(pool = %pool.name, error = %e, "closing client after a protocol violation");
            e.write_fatal(out);
        }
        RelayEnd::ServerLost { error, told_client } => {
            tracing::warn!(pool = %pool.name, error = %error, "server connection lost during a session");
            // When the server's own FATAL already reached the client, that is the last word.
            if !told_client {
                SessionError::Server(error).write_fatal(out);
            }
        }
        RelayEnd::Shutdown => {
            ErrorFields::fatal(SqlState::ADMIN_SHUTDOWN, "terminating connection: pgvia is shutting down")
                .write(out);
        }
    }
    if !out.is_empty() {
        let _ = stream.write_all(out).await;
        out.clear();
    }
    if checkout.conn_ref().broken {
        drop(checkout);
    } else {
        checkout.release(&general.server_reset_query, general.server_reset_timeout).await;
    }
    Ok(())
}
