//! A client connection split into borrowed halves, so that one `select!` can wait on reading
//! and writing it at once. TCP and Unix sockets split for free (two borrows of the one
//! socket); a TLS session or an in-memory pipe reads and writes through one state, so its
//! halves share it through tokio's split (an allocation and an uncontended lock per poll).
//! Before, every client went through tokio's split, once per transaction.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, DuplexStream, ReadBuf, ReadHalf, WriteHalf};
use tokio::net::{tcp, unix, TcpStream};
use tokio_rustls::server::TlsStream;

use super::ClientStream;

/// The reading half of a [`ClientStream`].
pub enum ClientRead<'a> {
    Tcp(tcp::ReadHalf<'a>),
    Unix(unix::ReadHalf<'a>),
    Tls(ReadHalf<&'a mut TlsStream<TcpStream>>),
    Memory(ReadHalf<&'a mut DuplexStream>),
}

/// The writing half of a [`ClientStream`].
pub enum ClientWrite<'a> {
    Tcp(tcp::WriteHalf<'a>),
    Unix(unix::WriteHalf<'a>),
    Tls(WriteHalf<&'a mut TlsStream<TcpStream>>),
    Memory(WriteHalf<&'a mut DuplexStream>),
}

impl ClientStream {
    /// Borrowed halves, for waiting on both directions in one `select!`.
    pub fn split(&mut self) -> (ClientRead<'_>, ClientWrite<'_>) {
        match self {
            ClientStream::Plain(s) => {
                let (r, w) = s.split();
                (ClientRead::Tcp(r), ClientWrite::Tcp(w))
            }
            ClientStream::Unix(s) => {
                let (r, w) = s.split();
                (ClientRead::Unix(r), ClientWrite::Unix(w))
            }
            ClientStream::Tls(s) => {
                let (r, w) = tokio::io::split(s.as_mut());
                (ClientRead::Tls(r), ClientWrite::Tls(w))
            }
            ClientStream::Memory(s, _) => {
                let (r, w) = tokio::io::split(s);
                (ClientRead::Memory(r), ClientWrite::Memory(w))
            }
        }
    }
}

/// Calls `$call` on whichever half `$half` holds.
macro_rules! each_half {
    ($half:expr, $kind:ident, |$s:ident| $call:expr) => {
        match $half {
            $kind::Tcp($s) => $call,
            $kind::Unix($s) => $call,
            $kind::Tls($s) => $call,
            $kind::Memory($s) => $call,
        }
    };
}

impl AsyncRead for ClientRead<'_> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        each_half!(self.get_mut(), ClientRead, |s| Pin::new(s).poll_read(cx, buf))
    }
}

impl AsyncWrite for ClientWrite<'_> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        each_half!(self.get_mut(), ClientWrite, |s| Pin::new(s).poll_write(cx, buf))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        each_half!(self.get_mut(), ClientWrite, |s| Pin::new(s).poll_flush(cx))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        each_half!(self.get_mut(), ClientWrite, |s| Pin::new(s).poll_shutdown(cx))
    }
}
