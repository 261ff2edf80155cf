//! The untagged phase: SSLRequest, GSSENCRequest, CancelRequest and the StartupMessage.

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use wire::frame::{decode_untagged, MAX_STARTUP_FRAME};
use wire::sqlstate::SqlState;
use wire::startup::{StartupMessage, StartupPacket};

use super::error::SessionError;
use crate::app::App;
use crate::net::server_tls::ALPN_POSTGRESQL;
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
                            format!("{e}: pgvia speaks protocol 3.0 to 3.2"),
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

/// The first byte of a TLS handshake record: a client using direct TLS (PostgreSQL 17's
/// `sslnegotiation=direct`) starts with it where a packet length would be.
const TLS_HANDSHAKE: u8 = 0x16;

/// Runs the untagged phase on a fresh connection (TCP or Unix socket, not yet TLS).
pub async fn open(app: &App, raw: ClientStream) -> Result<Option<Opening>, SessionError> {
    let mut buf = BytesMut::with_capacity(1024);
    let mut raw = match (raw, app.tls.as_ref()) {
        (ClientStream::Plain(tcp), Some(acceptor)) => {
            let mut first = [0u8; 1];
            // Peeked, not read: a plain client's packet stays whole for the loop below.
            match tcp.peek(&mut first).await? {
                0 => return Ok(None),
                _ if first[0] == TLS_HANDSHAKE => return direct_tls(acceptor, tcp, buf).await,
                _ => ClientStream::Plain(tcp),
            }
        }
        (raw, _) => raw,
    };
    let mut gss_declined = false;
    loop {
        let packet = match read_packet(&mut raw, &mut buf).await? {
            Read::Packet(p) => p,
            Read::Eof => return Ok(None),
            Read::Invalid(error) => return Ok(Some(Opening::Refused { stream: raw, error })),
        };
        match packet {
            StartupPacket::GssEncRequest if !gss_declined => {
                gss_declined = true;
                raw.write_all(b"N").await?;
            }
            StartupPacket::SslRequest => {
                if !buf.is_empty() {
                    // Bytes after an SSLRequest, before our answer, would be read as if
                    // encrypted: a classic injection. PostgreSQL refuses them too.
                    let error = SessionError::ProtocolState("received unencrypted data after SSL request");
                    return Ok(Some(Opening::Refused { stream: raw, error }));
                }
                // Unix sockets are declined, as PostgreSQL declines them.
                let acceptor = match (&raw, app.tls.as_ref()) {
                    (ClientStream::Plain(_), Some(acceptor)) => acceptor,
                    _ => {
                        raw.write_all(b"N").await?;
                        continue;
                    }
                };
                raw.write_all(b"S").await?;
                let ClientStream::Plain(tcp) = raw else {
                    return Err(SessionError::ProtocolState(
                        "TLS requested on a stream that cannot carry it",
                    ));
                };
                let tls = acceptor.accept(tcp).await.map_err(SessionError::Tls)?;
                return after_handshake(ClientStream::Tls(Box::new(tls)), buf).await;
            }
            StartupPacket::Cancel { process_id, secret } => {
                // Checked before the key: guessing keys costs the guesser the same budget.
                if !app.admission.allow_cancel(&app.config().limits) {
                    tracing::warn!(
                        process_id,
                        "cancel request dropped: over limits.cancel_requests_per_second"
                    );
                } else if let Some(cancel) = app.cancels.lookup(process_id, &secret) {
                    let server = cancel.target.server.clone();
                    if let Err(e) = crate::cancel::forward(cancel, app.cancel_timeout()).await {
                        tracing::warn!(error = %e, %server, "could not forward cancel request");
                    }
                } else {
                    tracing::debug!(process_id, "cancel request with an unknown key ignored");
                }
                return Ok(Some(Opening::Cancelled));
            }
            StartupPacket::Startup(startup) => {
                // The same rule for a WebSocket session as for a TCP client (issue 33).
                let transport = super::transport::Transport::of(&raw);
                if let Err(error) = super::transport::check_transport(&app.config().general, &transport) {
                    return Ok(Some(Opening::Refused { stream: raw, error }));
                }
                return Ok(Some(Opening::Login { stream: raw, startup, buf }));
            }
            StartupPacket::GssEncRequest => {
                let error = SessionError::ProtocolState("GSSENCRequest sent twice");
                return Ok(Some(Opening::Refused { stream: raw, error }));
            }
        }
    }
}

/// A client that opened with a TLS ClientHello. PostgreSQL 17 insists on ALPN
/// `postgresql` here, which shows the client meant PostgreSQL over TLS (not some other
/// protocol pointed at the port); so does pgvia.
async fn direct_tls(
    acceptor: &tokio_rustls::TlsAcceptor,
    tcp: TcpStream,
    buf: BytesMut,
) -> Result<Option<Opening>, SessionError> {
    let tls = acceptor.accept(tcp).await.map_err(SessionError::Tls)?;
    let alpn_ok = tls.get_ref().1.alpn_protocol() == Some(ALPN_POSTGRESQL);
    let stream = ClientStream::Tls(Box::new(tls));
    if !alpn_ok {
        let error = SessionError::refused(
            SqlState::PROTOCOL_VIOLATION,
            "received direct SSL connection request without ALPN protocol negotiation extension",
        );
        return Ok(Some(Opening::Refused { stream, error }));
    }
    after_handshake(stream, buf).await
}

/// After a TLS handshake only a StartupMessage may come.
async fn after_handshake(
    mut stream: ClientStream,
    mut buf: BytesMut,
) -> Result<Option<Opening>, SessionError> {
    let error = match read_packet(&mut stream, &mut buf).await? {
        Read::Packet(StartupPacket::Startup(startup)) => {
            return Ok(Some(Opening::Login { stream, startup, buf }))
        }
        Read::Packet(_) => SessionError::ProtocolState("expected a StartupMessage after the TLS handshake"),
        Read::Eof => return Ok(None),
        Read::Invalid(e) => e,
    };
    Ok(Some(Opening::Refused { stream, error }))
}
