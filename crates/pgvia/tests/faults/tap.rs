//! A client socket that remembers the last ErrorResponse it carried.
//!
//! tokio-postgres hands a reply to the oldest request still waiting for one. Its `prepare`
//! returns once it has the statement's description, before that exchange's ReadyForQuery; if
//! the server is lost in between, pgvia's FATAL is given to that finished request, nobody sees
//! it, and the next call gets a bare `Closed`. Reading the frames as they pass shows whether
//! pgvia did send an error with a SQLSTATE before it closed, which is what the fault test
//! asserts.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// The SQLSTATE of the ErrorResponse the server sent last, if nothing came after it.
pub type LastError = Arc<Mutex<Option<String>>>;

pub struct Tapped {
    inner: TcpStream,
    /// The frame being read: its header bytes so far, then the whole frame.
    frame: Vec<u8>,
    last_error: LastError,
}

impl Tapped {
    pub fn new(inner: TcpStream) -> (Tapped, LastError) {
        let last_error = LastError::default();
        (Tapped { inner, frame: Vec::new(), last_error: last_error.clone() }, last_error)
    }

    fn observe(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            let need = if self.frame.len() < 5 {
                5 - self.frame.len()
            } else {
                let len = u32::from_be_bytes([self.frame[1], self.frame[2], self.frame[3], self.frame[4]]);
                (len as usize + 1).saturating_sub(self.frame.len())
            };
            let take = need.min(bytes.len());
            self.frame.extend_from_slice(&bytes[..take]);
            bytes = &bytes[take..];
            let whole = self.frame.len() >= 5
                && self.frame.len()
                    == u32::from_be_bytes([self.frame[1], self.frame[2], self.frame[3], self.frame[4]])
                        as usize
                        + 1;
            if whole {
                // Only an error that is the last frame before the close explains it: an
                // earlier one the client read (a 57014 the writer kept its connection after)
                // is followed by a ReadyForQuery, which clears it.
                *self.last_error.lock().unwrap() =
                    if self.frame[0] == b'E' { sqlstate(&self.frame[5..]) } else { None };
                self.frame.clear();
            }
        }
    }
}

/// The `C` field of an ErrorResponse body.
fn sqlstate(mut body: &[u8]) -> Option<String> {
    while let Some((&code, rest)) = body.split_first() {
        let end = rest.iter().position(|&b| b == 0)?;
        if code == b'C' {
            return Some(String::from_utf8_lossy(&rest[..end]).into_owned());
        }
        body = &rest[end + 1..];
    }
    None
}

impl AsyncRead for Tapped {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let r = Pin::new(&mut this.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = r {
            this.observe(&buf.filled()[before..]);
        }
        r
    }
}

impl AsyncWrite for Tapped {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}
