use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use std::net::SocketAddr;

use tokio::io::{AsyncRead, AsyncWrite, DuplexStream, ReadBuf};
use tokio::net::{TcpStream, UnixStream};
use tokio_rustls::server::TlsStream;

/// A client connection: TCP, TLS over TCP (after an SSLRequest or directly), a Unix
/// socket (never TLS, as with PostgreSQL), or one end of an in-memory pipe whose other end
/// is pgvia's own HTTP gateway (an HTTP request or a WebSocket tunnel speaking the wire
/// protocol for its client, so it is served by the same session code).
pub enum ClientStream {
    Plain(TcpStream),
    Unix(UnixStream),
    Tls(Box<TlsStream<TcpStream>>),
    Memory(DuplexStream, Carrier),
}

/// What carries an in-memory client's bytes from its real peer to pgvia: a tunnel over a
/// TLS connection counts as TLS (for `allow_cleartext_without_tls` and the like).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Carrier {
    Plain,
    Tls,
}

impl ClientStream {
    pub fn is_tls(&self) -> bool {
        matches!(self, Self::Tls(_) | Self::Memory(_, Carrier::Tls))
    }

    /// Reads and drops what the client still sends until it closes, for at most `limit` (see
    /// the session's `last_words`). An in-memory client's end belongs to the gateway, which
    /// reads every byte already, so it has nothing to wait for.
    pub async fn drain_until_closed(&mut self, limit: std::time::Duration) {
        use tokio::io::AsyncReadExt;
        // TLS records are dropped unread: the raw bytes are all that must be consumed.
        let raw: &mut (dyn AsyncRead + Unpin + Send) = match self {
            Self::Plain(s) => s,
            Self::Tls(s) => &mut s.get_mut().0,
            Self::Unix(s) => s,
            Self::Memory(..) => return,
        };
        let deadline = tokio::time::Instant::now() + limit;
        let mut sink = [0u8; 256];
        while let Ok(Ok(1..)) = tokio::time::timeout_at(deadline, raw.read(&mut sink)).await {}
    }

    /// Whether the client showed a certificate over TLS (rustls has checked it against
    /// `client_tls_ca_file`), whatever it names.
    pub fn has_peer_certificate(&self) -> bool {
        match self {
            Self::Tls(s) => s.get_ref().1.peer_certificates().is_some_and(|c| !c.is_empty()),
            Self::Plain(_) | Self::Unix(_) | Self::Memory(..) => false,
        }
    }

    /// The common name of the certificate the client showed over TLS (rustls has checked it
    /// against `client_tls_ca_file`), if it showed one.
    pub fn peer_common_name(&self) -> Option<String> {
        match self {
            Self::Tls(s) => {
                s.get_ref().1.peer_certificates()?.first().and_then(|c| super::cert_name::common_name(c))
            }
            Self::Plain(_) | Self::Unix(_) | Self::Memory(..) => None,
        }
    }
}

/// Who is on the other end of a client connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientPeer {
    Tcp(SocketAddr),
    /// A Unix-socket client; `port` is pgvia's listen port (its socket file's suffix).
    Unix {
        port: u16,
    },
}

impl ClientPeer {
    /// The address for `SHOW CLIENTS`: an IP address, or `unix` as PgBouncer shows it.
    pub fn addr_text(&self) -> String {
        match self {
            ClientPeer::Tcp(a) => a.ip().to_string(),
            ClientPeer::Unix { .. } => "unix".to_owned(),
        }
    }

    pub fn port(&self) -> u16 {
        match self {
            ClientPeer::Tcp(a) => a.port(),
            ClientPeer::Unix { port } => *port,
        }
    }
}

impl std::fmt::Display for ClientPeer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClientPeer::Tcp(a) => write!(f, "{a}"),
            ClientPeer::Unix { port } => write!(f, "unix:{port}"),
        }
    }
}

impl AsyncRead for ClientStream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Self::Unix(s) => Pin::new(s).poll_read(cx, buf),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
            Self::Memory(s, _) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for ClientStream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Self::Unix(s) => Pin::new(s).poll_write(cx, buf),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
            Self::Memory(s, _) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Self::Unix(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
            Self::Memory(s, _) => Pin::new(s).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Self::Plain(s) => s.is_write_vectored(),
            Self::Unix(s) => s.is_write_vectored(),
            Self::Tls(s) => s.is_write_vectored(),
            Self::Memory(s, _) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_flush(cx),
            Self::Unix(s) => Pin::new(s).poll_flush(cx),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
            Self::Memory(s, _) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Self::Unix(s) => Pin::new(s).poll_shutdown(cx),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
            Self::Memory(s, _) => Pin::new(s).poll_shutdown(cx),
        }
    }
}

/// Socket options every connection gets, client or server side: no Nagle delay (the relay
/// already batches), and keepalive so a vanished peer is noticed. No `TCP_USER_TIMEOUT`: on
/// a client socket it would also close a client that merely pauses reading a large result
/// (its zero window counts as unacknowledged data); what a client that stops reading can
/// hold is bounded by the session's time limits and the 1 s limit on its last words instead.
pub fn tune(stream: &TcpStream) {
    tune_socket(socket2::SockRef::from(stream));
}

/// [`tune`] on any TCP socket, listeners included.
pub fn tune_socket(sock: socket2::SockRef<'_>) {
    let _ = sock.set_nodelay(true);
    let ka = socket2::TcpKeepalive::new()
        .with_time(std::time::Duration::from_secs(60))
        .with_interval(std::time::Duration::from_secs(10));
    let _ = sock.set_tcp_keepalive(&ka);
}

/// Whether a client socket already has [`tune`]'s options when accepted: Linux copies
/// `TCP_NODELAY`, `SO_KEEPALIVE`, `TCP_KEEPIDLE` and `TCP_KEEPINTVL` from the listening socket
/// (the listener is tuned in `net::listener`), which saves four system calls per login.
/// Elsewhere each accepted socket is tuned itself. `net::listener`'s tests check the copy.
pub const ACCEPTED_INHERIT_TUNING: bool = cfg!(target_os = "linux");
