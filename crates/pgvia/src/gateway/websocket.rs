//! The wire protocol over WebSocket (`GET /v2`), as Neon's driver speaks it: each binary
//! message carries wire bytes (any split), and pgvia answers with binary messages. The
//! session behind it is an ordinary one, started exactly as for a TCP client (SSLRequest
//! declined, startup, the user's authentication method, pools, routing), over an
//! in-memory pipe; the socket's address counts among those logging in.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::BytesMut;
use futures_util::{SinkExt, StreamExt};
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONNECTION, SEC_WEBSOCKET_ACCEPT, SEC_WEBSOCKET_KEY, UPGRADE};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::{Role, WebSocketConfig};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

use super::sink::GatewayBody;
use super::{error, Answer, Gateway};
use crate::app::App;
use crate::net::{Carrier, ClientPeer, ClientStream};

/// Bytes the pipe holds each way.
const PIPE_BYTES: usize = 64 * 1024;

/// Largest WebSocket message accepted: the wire protocol's own limit applies to what is
/// inside, and a message may carry several frames.
const MAX_MESSAGE: usize = 64 * 1024 * 1024;

/// Answers the upgrade request (101) and, once hyper hands over the connection, carries
/// the session's bytes both ways.
pub fn upgrade(gw: &Arc<Gateway>, peer: SocketAddr, carrier: Carrier, req: Request<Incoming>) -> Answer {
    let wants = req
        .headers()
        .get(UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"));
    let Some(key) = req.headers().get(SEC_WEBSOCKET_KEY).filter(|_| wants) else {
        return error(
            StatusCode::BAD_REQUEST,
            "08P01",
            "/v2 is the wire protocol over WebSocket: send a WebSocket upgrade",
        );
    };
    let accept = derive_accept_key(key.as_bytes());
    let app = gw.app.clone();
    let pending = match app.admission.admit(peer.ip(), &app.config().limits) {
        Ok(p) => p,
        Err(refusal) => {
            return error(StatusCode::SERVICE_UNAVAILABLE, refusal.sqlstate().code(), &refusal.message());
        }
    };
    tokio::spawn(async move {
        let upgraded = match hyper::upgrade::on(req).await {
            Ok(u) => u,
            Err(e) => {
                tracing::debug!(%peer, error = %e, "gateway: WebSocket upgrade failed");
                return;
            }
        };
        let config =
            WebSocketConfig::default().max_message_size(Some(MAX_MESSAGE)).max_frame_size(Some(MAX_MESSAGE));
        let ws = WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, Some(config)).await;
        let (ours, theirs) = tokio::io::duplex(PIPE_BYTES);
        tokio::spawn(crate::session::serve(
            app.clone(),
            ClientStream::Memory(theirs, carrier),
            ClientPeer::Tcp(peer),
            pending,
        ));
        carry(&app, ws, ours, peer).await;
    });
    let mut r = Response::new(GatewayBody::full(bytes::Bytes::new()));
    *r.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let h = r.headers_mut();
    h.insert(UPGRADE, HeaderValue::from_static("websocket"));
    h.insert(CONNECTION, HeaderValue::from_static("Upgrade"));
    if let Ok(v) = HeaderValue::from_str(&accept) {
        h.insert(SEC_WEBSOCKET_ACCEPT, v);
    }
    r
}

/// Moves bytes between the WebSocket and the session until either side ends. A client
/// that goes away is an EOF to the session, which then ends as for a closed socket.
async fn carry<S>(_app: &App, mut ws: WebSocketStream<S>, mut pipe: DuplexStream, peer: SocketAddr)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let mut buf = BytesMut::with_capacity(PIPE_BYTES);
    loop {
        tokio::select! {
            m = ws.next() => match m {
                Some(Ok(Message::Binary(data))) => {
                    if pipe.write_all(&data).await.is_err() {
                        break;
                    }
                }
                // Neon's driver sends binary only; text is not the wire protocol.
                Some(Ok(Message::Text(_))) => {
                    tracing::debug!(%peer, "gateway: text message on a wire-protocol WebSocket; closing");
                    break;
                }
                Some(Ok(Message::Close(_))) | None => break,
                // Pings are answered by the WebSocket layer itself.
                Some(Ok(_)) => {}
                Some(Err(e)) => {
                    tracing::debug!(%peer, error = %e, "gateway: WebSocket ended");
                    break;
                }
            },
            n = pipe.read_buf(&mut buf) => match n {
                Ok(0) | Err(_) => {
                    let _ = ws.close(None).await;
                    break;
                }
                Ok(_) => {
                    let chunk = buf.split().freeze();
                    if ws.send(Message::Binary(chunk)).await.is_err() {
                        break;
                    }
                    buf.reserve(PIPE_BYTES);
                }
            },
        }
    }
    let _ = pipe.shutdown().await;
}
