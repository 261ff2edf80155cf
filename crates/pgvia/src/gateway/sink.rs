//! Where a response's bytes go: a status and headers decided as late as possible, then a
//! body handed to hyper in chunks through a small bounded channel.
//!
//! The head waits for the first row (or the end), so an error before any row is answered
//! with its own status. After that, output is buffered up to `flush_bytes` or
//! `flush_interval` and then sent; the channel holds a few chunks, so a client that reads
//! slowly stops pgvia reading the server (memory stays constant however long the result).
//! A client that goes away is seen as the channel (or, before the head, the waiting
//! request) being dropped.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use hyper::body::{Body, Frame, SizeHint};
use hyper::StatusCode;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

/// Chunks that may wait between pgvia and a client's connection.
const CHANNEL_CHUNKS: usize = 4;

/// A response body: whole, or streamed from a query's task.
pub enum GatewayBody {
    Full(Option<Bytes>),
    Stream(mpsc::Receiver<Bytes>),
}

impl GatewayBody {
    pub fn full(b: impl Into<Bytes>) -> Self {
        GatewayBody::Full(Some(b.into()))
    }
}

impl Body for GatewayBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        match self.get_mut() {
            GatewayBody::Full(b) => Poll::Ready(b.take().map(|b| Ok(Frame::data(b)))),
            GatewayBody::Stream(rx) => rx.poll_recv(cx).map(|c| c.map(|b| Ok(Frame::data(b)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self, GatewayBody::Full(None))
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            GatewayBody::Full(Some(b)) => SizeHint::with_exact(b.len() as u64),
            GatewayBody::Full(None) => SizeHint::with_exact(0),
            GatewayBody::Stream(_) => SizeHint::default(),
        }
    }
}

/// The status, content type and body the request's handler answers with.
pub struct Head {
    pub status: StatusCode,
    pub content_type: &'static str,
    pub body: GatewayBody,
}

/// The client is gone (its connection closed or the request was dropped).
#[derive(Debug)]
pub struct Gone;

/// The writing end of one response.
pub struct Sink {
    head: Option<oneshot::Sender<Head>>,
    tx: mpsc::Sender<Bytes>,
    /// The body's receiving end until the head hands it over.
    rx: Option<mpsc::Receiver<Bytes>>,
    content_type: &'static str,
    /// Output not yet handed over.
    pub buf: BytesMut,
    flush_bytes: usize,
    flush_every: Duration,
    since: Instant,
    /// Bytes handed over so far.
    pub sent: u64,
}

impl Sink {
    pub fn new(
        head: oneshot::Sender<Head>,
        content_type: &'static str,
        flush_bytes: usize,
        flush_every: Duration,
    ) -> Self {
        let (tx, rx) = mpsc::channel(CHANNEL_CHUNKS);
        Sink {
            head: Some(head),
            tx,
            rx: Some(rx),
            content_type,
            buf: BytesMut::with_capacity(flush_bytes + flush_bytes / 4),
            flush_bytes,
            flush_every,
            since: Instant::now(),
            sent: 0,
        }
    }

    /// True once the status and headers have gone.
    pub fn committed(&self) -> bool {
        self.head.is_none()
    }

    /// Sends status 200 and this sink's content type, the body to follow as streamed.
    pub fn commit(&mut self) -> Result<(), Gone> {
        let (Some(head), Some(rx)) = (self.head.take(), self.rx.take()) else { return Ok(()) };
        let h =
            Head { status: StatusCode::OK, content_type: self.content_type, body: GatewayBody::Stream(rx) };
        head.send(h).map_err(|_| Gone)
    }

    /// Answers with `status` and `body` instead of what was buffered (nothing has gone yet).
    pub fn answer(&mut self, status: StatusCode, body: Bytes) -> Result<(), Gone> {
        let Some(head) = self.head.take() else { return Err(Gone) };
        self.rx = None;
        let h = Head { status, content_type: "application/json", body: GatewayBody::full(body) };
        head.send(h).map_err(|_| Gone)
    }

    /// Whether the buffer should be handed over now (by size).
    pub fn full(&self) -> bool {
        self.buf.len() >= self.flush_bytes
    }

    /// When waiting output must be handed over (by time), if any waits.
    pub fn deadline(&self) -> Option<Instant> {
        (self.committed() && !self.buf.is_empty()).then(|| self.since + self.flush_every)
    }

    /// Hands what is buffered to the connection, waiting while the channel is full.
    pub async fn flush(&mut self) -> Result<(), Gone> {
        self.since = Instant::now();
        if self.buf.is_empty() || !self.committed() {
            return Ok(());
        }
        let chunk = self.buf.split().freeze();
        self.sent += chunk.len() as u64;
        self.tx.send(chunk).await.map_err(|_| Gone)?;
        // What `split` left is the tail of the same allocation; once the chunks before
        // are sent and dropped, `reserve` takes the whole buffer back.
        self.buf.reserve(self.flush_bytes);
        Ok(())
    }

    /// Ends the response: a whole 200 answer if nothing has gone yet, else the rest.
    pub async fn finish(mut self) -> Result<(), Gone> {
        if let Some(head) = self.head.take() {
            let body = self.buf.split().freeze();
            let h = Head {
                status: StatusCode::OK,
                content_type: self.content_type,
                body: GatewayBody::full(body),
            };
            return head.send(h).map_err(|_| Gone);
        }
        self.flush().await
    }

    /// Resolves when the client is gone: the handler stopped waiting for the head, or
    /// hyper dropped the body.
    pub async fn gone(&mut self) {
        match &mut self.head {
            Some(h) => h.closed().await,
            None => self.tx.closed().await,
        }
    }
}
