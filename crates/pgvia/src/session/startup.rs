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
    /// The client broke the protocol before logging in; tell it why, then close.
    Refused {
        stream: ClientStream,
        error: SessionError,
    },
}

/// A packet, the end of the stream, or why the bytes are not a valid packet.
enum Read {
    Packet(StartupPacket),
    Eof,
    Invalid(SessionError),
}

async fn read_packet<S: tokio::io::AsyncRead + Unpin>(
    stream: &mut S,
    buf: &mut BytesMut,
) -> Result<Read, SessionError> {
    loop {
        match decode_untagged(buf, MAX_STARTUP_FRAME) {
            Ok(Some(payload)) => {
                return Ok(match StartupPacket::parse(&payload) {
                    Ok(p) => Read::Packet(p),
                    Err(e @ wire::WireError::UnsupportedProtocol { .. }) => {
                        Read::Invalid(SessionError::refused(
                            SqlState::FEATURE_NOT_SUPPORTED,
                            format!("{e}: pgvia speaks protocol 3.0"),
                        ))
                    }
                    Err(e) => Read::Invalid(e.into()),
                })
            }
            Ok(None) => {}
            Err(e) => return Ok(Read::Invalid(e.into())),
        }
        if stream.read_buf(buf).await? == 0 {
            return Ok(Read::Eof);
        }
    }
}

/// Runs the untagged phase on a fresh connection.
pub async fn open(app: &App, mut tcp: TcpStream) -> Result<Option<Opening>, SessionError> {
    let mut buf = BytesMut::with_capacity(1024);
    let mut gss_declined = false;
    loop {
        let packet = match read_packet(&mut tcp, &mut buf).await? {
            Read::Packet(p) => p,
            Read::Eof => return Ok(None),
            Read::Invalid(error) => {
                return Ok(Some(Opening::Refused { stream: ClientStream::Plain(tcp), error }))
            }
        };
        match packet {
            StartupPacket::GssEncRequest if !gss_declined => {
                gss_declined = true;
                tcp.write_all(b"N").await?;
            }
            StartupPacket::SslRequest => {
                if !buf.is_empty() {
                    // Bytes after an SSLRequest, before our answer, would be read as if
                    // encrypted: a classic injection. PostgreSQL refuses them too.
                    let error = SessionError::ProtocolState("received unencrypted data after SSL request");
                    return Ok(Some(Opening::Refused { stream: ClientStream::Plain(tcp), error }));
                }
                let Some(acceptor) = app.tls.as_ref() else {
                    tcp.write_all(b"N").await?;
                    continue;
                };
                tcp.write_all(b"S").await?;
                let tls = acceptor.accept(tcp).await.map_err(SessionError::Tls)?;
                let mut stream = ClientStream::Tls(Box::new(tls));
                let error = match read_packet(&mut stream, &mut buf).await? {
                    Read::Packet(StartupPacket::Startup(startup)) => {
                        return Ok(Some(Opening::Login { stream, startup, buf }))
                    }
                    Read::Packet(_) => {
                        SessionError::ProtocolState("expected a StartupMessage after the TLS handshake")
                    }
                    Read::Eof => return Ok(None),
                    Read::Invalid(e) => e,
                };
                return Ok(Some(Opening::Refused { stream, error }));
            }
            StartupPacket::Cancel { process_id, secret } => {
                // Checked before the key: guessing keys costs the guesser the same budget.
                if !app.admission.allow_cancel(&app.config().limits) {
                    tracing::warn!(
                        process_id,
                        "cancel request dropped: over limits.cancel_requests_per_second"
                    );
                } else if let Some(cancel) = app.cancels.lookup(process_id, &secret) {
                    let server = cancel.target.server;
                    if let Err(e) = crate::cancel::forward(cancel, app.cancel_timeout()).await {
                        tracing::warn!(error = %e, %server, "could not forward cancel request");
                    }
                } else {
                    tracing::debug!(process_id, "cancel request with an unknown key ignored");
                }
                return Ok(Some(Opening::Cancelled));
            }
            StartupPacket::Startup(startup) => {
                let stream = ClientStream::Plain(tcp);
                if app.config().general.tls_mode == TlsMode::Require {
                    let error = SessionError::refused(
                        SqlState::INVALID_AUTHORIZATION_SPECIFICATION,
                        "TLS is required by this pgvia (tls_mode = require); connect with sslmode=require",
                    );
                    return Ok(Some(Opening::Refused { stream, error }));
                }
                return Ok(Some(Opening::Login { stream, startup, buf }));
            }
            StartupPacket::GssEncRequest => {
                let error = SessionError::ProtocolState("GSSENCRequest sent twice");
                return Ok(Some(Opening::Refused { stream: ClientStream::Plain(tcp), error }));
            }
        }
    }
}
