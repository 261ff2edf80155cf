//! The wire protocol over WebSocket (`GET /v2`), as Neon's driver speaks it: each binary
//! message carries wire bytes; the session behind it is an ordinary one (startup and
//! authentication included), over an in-memory pipe.

use std::net::SocketAddr;
use std::sync::Arc;

use hyper::body::Incoming;
use hyper::{Request, StatusCode};

use super::{error, Answer, Gateway};
use crate::net::Carrier;

pub fn upgrade(_gw: &Arc<Gateway>, _peer: SocketAddr, _carrier: Carrier, _req: Request<Incoming>) -> Answer {
    error(StatusCode::NOT_IMPLEMENTED, "0A000", "WebSocket is not available in this build")
}
