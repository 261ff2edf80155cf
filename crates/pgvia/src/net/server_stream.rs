//! A connection to PostgreSQL: TCP, TLS over TCP, or a Unix-domain socket; and where its
//! cancel requests go.
//!
//! The relay waits on reading and writing one server at once, so the stream splits into
//! borrowed halves. TCP and Unix sockets split for free; a TLS session reads and writes
//! through one state, so it is split once, when it is made (tokio's split, an uncontended
//! lock per poll), and lent out as halves after that.

use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf, ReadHalf, WriteHalf};
use tokio::net::{tcp, unix, TcpStream, UnixStream};
use tokio_rustls::client::TlsStream;

type Tls = TlsStream<TcpStream>;

/// Where a server was reached, for cancel requests and the admin console.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ServerEndpoint {
    Tcp(SocketAddr),
    /// The socket file itself (`<dir>/.s.PGSQL.<port>`).
    Unix(PathBuf),
}

impl ServerEndpoint {
    /// The address without the port: an IP address or the socket's path.
    pub fn addr_text(&self) -> String {
        match self {
            ServerEndpoint::Tcp(a) => a.ip().to_string(),
            ServerEndpoint::Unix(p) => p.display().to_string(),
        }
    }

    /// The TCP port; 0 for a Unix socket (its port is in the file name).
    pub fn port(&self) -> u16 {
        match self {
            ServerEndpoint::Tcp(a) => a.port(),
            ServerEndpoint::Unix(_) => 0,
        }
    }
}

impl std::fmt::Display for ServerEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ServerEndpoint::Tcp(a) => write!(f, "{a}"),
            ServerEndpoint::Unix(p) => write!(f, "{}", p.display()),
        }
    }
}

/// One server connection's socket.
#[derive(Debug)]
pub enum ServerStream {
    Tcp(TcpStream),
    Unix(UnixStream),
    Tls(Box<TlsHalves>),
}

/// A TLS session split once, at the handshake.
#[derive(Debug)]
pub struct TlsHalves {
    read: ReadHalf<Tls>,
    write: WriteHalf<Tls>,
}

impl ServerStream {
    pub fn tls(stream: Tls) -> ServerStream {
        let (read, write) = tokio::io::split(stream);
        ServerStream::Tls(Box::new(TlsHalves { read, write }))
    }

    pub fn is_tls(&self) -> bool {
        matches!(self, ServerStream::Tls(_))
    }

    /// The same socket registered with the current runtime instead (see
    /// `ServerConn::rehome`): taken out of the runtime it was registered with and handed to
    /// this one, two `epoll_ctl` calls. TLS is not movable (its socket is inside the TLS
    /// state): the caller keeps it where it is. On an error the socket is closed.
    pub fn rehomed(self) -> io::Result<ServerStream> {
        Ok(match self {
            ServerStream::Tcp(s) => ServerStream::Tcp(TcpStream::from_std(s.into_std()?)?),
            ServerStream::Unix(s) => ServerStream::Unix(UnixStream::from_std(s.into_std()?)?),
            tls @ ServerStream::Tls(_) => tls,
        })
    }

    /// Borrowed halves, for waiting on both directions in one `select!`.
    pub fn split(&mut self) -> (ServerRead<'_>, ServerWrite<'_>) {
        match self {
            ServerStream::Tcp(s) => {
                let (r, w) = s.split();
                (ServerRead::Tcp(r), ServerWrite::Tcp(w))
            }
            ServerStream::Unix(s) => {
                let (r, w) = s.split();
                (ServerRead::Unix(r), ServerWrite::Unix(w))
            }
            ServerStream::Tls(h) => {
                let TlsHalves { read, write } = h.as_mut();
                (ServerRead::Tls(read), ServerWrite::Tls(write))
            }
        }
    }

    /// Reads what is there without waiting: `WouldBlock` when nothing is.
    pub fn try_read_buf(&mut self, buf: &mut BytesMut) -> io::Result<usize> {
        match self {
            ServerStream::Tcp(s) => s.try_read_buf(buf),
            ServerStream::Unix(s) => s.try_read_buf(buf),
            ServerStream::Tls(h) => {
                // One poll with a waker that does nothing: the next real read registers its
                // own. Decrypted bytes land in a stack buffer first (TLS has no try_read).
                let mut tmp = [0u8; 2048];
                let mut rb = ReadBuf::new(&mut tmp);
                let mut cx = Context::from_waker(Waker::noop());
                match Pin::new(&mut h.read).poll_read(&mut cx, &mut rb) {
                    Poll::Ready(Ok(())) => {
                        buf.extend_from_slice(rb.filled());
                        Ok(rb.filled().len())
                    }
                    Poll::Ready(Err(e)) => Err(e),
                    Poll::Pending => Err(io::ErrorKind::WouldBlock.into()),
                }
            }
        }
    }
}

/// The reading half of a [`ServerStream`].
pub enum ServerRead<'a> {
    Tcp(tcp::ReadHalf<'a>),
    Unix(unix::ReadHalf<'a>),
    Tls(&'a mut ReadHalf<Tls>),
}

/// The writing half of a [`ServerStream`].
pub enum ServerWrite<'a> {
    Tcp(tcp::WriteHalf<'a>),
    Unix(unix::WriteHalf<'a>),
    Tls(&'a mut WriteHalf<Tls>),
}

impl AsyncRead for ServerRead<'_> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ServerRead::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            ServerRead::Unix(s) => Pin::new(s).poll_read(cx, buf),
            ServerRead::Tls(s) => Pin::new(&mut **s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for ServerWrite<'_> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            ServerWrite::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            ServerWrite::Unix(s) => Pin::new(s).poll_write(cx, buf),
            ServerWrite::Tls(s) => Pin::new(&mut **s).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            ServerWrite::Tcp(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            ServerWrite::Unix(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            ServerWrite::Tls(s) => Pin::new(&mut **s).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            ServerWrite::Tcp(s) => s.is_write_vectored(),
            ServerWrite::Unix(s) => s.is_write_vectored(),
            ServerWrite::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ServerWrite::Tcp(s) => Pin::new(s).poll_flush(cx),
            ServerWrite::Unix(s) => Pin::new(s).poll_flush(cx),
            ServerWrite::Tls(s) => Pin::new(&mut **s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ServerWrite::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            ServerWrite::Unix(s) => Pin::new(s).poll_shutdown(cx),
            ServerWrite::Tls(s) => Pin::new(&mut **s).poll_shutdown(cx),
        }
    }
}

// The whole stream reads and writes through its halves; splitting borrows, nothing more.
impl AsyncRead for ServerStream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().split().0).poll_read(cx, buf)
    }
}

impl AsyncWrite for ServerStream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().split().1).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().split().1).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            ServerStream::Tcp(s) => s.is_write_vectored(),
            ServerStream::Unix(s) => s.is_write_vectored(),
            ServerStream::Tls(h) => h.write.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().split().1).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().split().1).poll_shutdown(cx)
    }
}
