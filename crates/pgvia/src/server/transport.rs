//! Opening a server connection's socket: TCP, or a Unix socket when `host` is a directory
//! (as libpq reads it), then TLS as the database's `server_tls_mode` asks.
//!
//! Unix sockets never carry TLS, as with libpq: the socket file's permissions are the
//! protection there, and PostgreSQL does not offer TLS on them.

use std::path::PathBuf;

use bytes::BytesMut;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UnixStream};
use tokio_rustls::TlsConnector;
use wire::build;

use super::address::ServerAddress;
use super::error::ServerError;
use crate::net::server_tls::{TlsNegotiation, ALPN_POSTGRESQL};
use crate::net::{ServerEndpoint, ServerStream};

/// The socket file for `host`/`port` when `host` is a directory (starts with `/`).
pub fn socket_path(host: &str, port: u16) -> Option<PathBuf> {
    host.starts_with('/').then(|| PathBuf::from(host).join(format!(".s.PGSQL.{port}")))
}

/// Connects and, if configured, starts TLS. Nothing of the startup is sent yet.
pub async fn open(addr: &ServerAddress) -> Result<(ServerStream, ServerEndpoint), ServerError> {
    let connect_err = |source| ServerError::Connect { addr: addr.display(), source };
    if let Some(path) = socket_path(&addr.host, addr.port) {
        let stream = UnixStream::connect(&path).await.map_err(connect_err)?;
        return Ok((ServerStream::Unix(stream), ServerEndpoint::Unix(path)));
    }
    let mut tcp = TcpStream::connect((addr.host.as_str(), addr.port)).await.map_err(connect_err)?;
    crate::net::stream::tune(&tcp);
    let endpoint = ServerEndpoint::Tcp(tcp.peer_addr()?);
    let mode = addr.tls.mode;
    let Some(config) = addr.tls.client_config()? else {
        return Ok((ServerStream::Tcp(tcp), endpoint));
    };
    if addr.tls.negotiation == TlsNegotiation::Postgres {
        let mut out = BytesMut::with_capacity(8);
        build::ssl_request(&mut out);
        tcp.write_all(&out).await?;
        // Exactly one byte: anything the server sent after it would be read by the TLS layer
        // as handshake data, and fail it, rather than be taken as a trusted reply.
        match tcp.read_u8().await? {
            b'S' => {}
            b'N' if mode.requires_tls() => {
                return Err(ServerError::TlsDeclined { addr: addr.display(), mode: mode.name() })
            }
            b'N' => return Ok((ServerStream::Tcp(tcp), endpoint)),
            other => return Err(ServerError::TlsAnswer { addr: addr.display(), byte: other }),
        }
    }
    let name =
        ServerName::try_from(addr.host.clone()).map_err(|_| ServerError::TlsName(addr.host.clone()))?;
    let tls = TlsConnector::from(config).connect(name, tcp).await.map_err(|source| ServerError::Tls {
        addr: addr.display(),
        mode: mode.name(),
        source,
    })?;
    // Direct TLS skips the SSLRequest, so only ALPN shows the server knew what it accepted
    // (PostgreSQL 17+ insists on it too).
    if addr.tls.negotiation == TlsNegotiation::Direct
        && tls.get_ref().1.alpn_protocol() != Some(ALPN_POSTGRESQL)
    {
        return Err(ServerError::TlsDeclined { addr: addr.display(), mode: "direct (no ALPN postgresql)" });
    }
    Ok((ServerStream::tls(tls), endpoint))
}
