//! The untagged phase: SSLRequest, GSSENCRequest, CancelRequest and the StartupMessage.

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use wire::frame::{decode_untagged, MAX_STARTUP_FRAME};
use wire::sqlstate::SqlState;
use wire::startup::{StartupMessage, StartupPacket};

use super::error::SessionError;
use crate::app::App;
use crate::config::TlsMode;
use crate::net::ClientStream;

/// What the untagged phase ended with.
pub enum Opening {
    Login {
        stream: ClientStream,
        startup: StartupMessage,
        buf: BytesMut,
    },
    /// A CancelRequest was handled; the connection is done.
    Cancelled,
}

async fn read_packet<S: tokio::io::AsyncRead + Unpin>(
    stream: &mut S,
    buf: &mut BytesMut,
) -> Result<Option<StartupPacket>, SessionError> {
    loop {
        if let Some(payload) = decode_untagged(buf, MAX_STARTUP_FRAME)? {
            return Ok(Some(StartupPacket::parse(&payload)?));
        }
        if stream.read_buf(buf).await? == 0 {
            return Ok(None);
        }
    }
}

/// Runs the untagged phase on a fresh connection.
pub async fn open(app: &App, mut tcp: TcpStream) -> Result<Option<Opening>, SessionError> {
    let mut buf = BytesMut::with_capacity(1024);
    let mut gss_declined = false;
    loop {
        let Some(packet) = read_packet(&mut tcp, &mut buf).await? else { return Ok(None) };
        match packet {
            StartupPacket::GssEncRequest if !gss_declined => {
                gss_declined = true;
                tcp.write_all(b"N").await?;
            }
            StartupPacket::SslRequest => {
                if !buf.is_empty() {
                    // Bytes after an SSLRequest, before our answer, would be read as if
                    // encrypted: a classic injection. PostgreSQL refuses them too.
                    return Err(SessionError::ProtocolState("received unencrypted data after SSL request"));
                }
                let Some(acceptor) = app.tls.as_ref() else {
                    tcp.write_all(b"N").await?;
                    continue;
                };
                tcp.write_all(b"S").await?;
                let tls = acceptor.accept(tcp).await.map_err(SessionError::Tls)?;
                let mut stream = ClientStream::Tls(Box::new(tls));
                return match read_packet(&mut stream, &mut buf).await? {
                    Some(StartupPacket::Startup(startup)) => {
                        Ok(Some(Opening::Login { stream, startup, buf }))
                    }
                    Some(_) => {
                        Err(SessionError::ProtocolState("expected a StartupMessage after the TLS handshake"))
                    }
                    None => Ok(None),
                };
            }
            StartupPacket::Cancel { process_id, secret } => {
                if let Some(target) = app.cancels.lookup(process_id, &secret) {
                    if let Err(e) = crate::cancel::forward(&target, app.cancel_timeout()).await {
                        tracing::warn!(error = %e, server = %target.server, "could not forward cancel request");
                    }
                } else {
                    tracing::debug!(process_id, "cancel request with an unknown key ignored");
                }
                return Ok(Some(Opening::Cancelled));
            }
            StartupPacket::Startup(startup) => {
                if app.config().general.tls_mode == TlsMode::Require {
                    return Err(SessionError::refused(
                        SqlState::INVALID_AUTHORIZATION_SPECIFICATION,
                        "TLS is required by this pgvia (tls_mode = require); connect with sslmode=require",
                    ));
                }
                return Ok(Some(Opening::Login { stream: ClientStream::Plain(tcp), startup, buf }));
            }
            StartupPacket::GssEncRequest => {
                return Err(SessionError::ProtocolState("GSSENCRequest sent twice"));
            }
        }
    }
}
