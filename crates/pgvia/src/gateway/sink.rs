//! Where a response's bytes go: a status and headers decided as late as possible, then a
//! body handed to hyper in chunks through a small bounded channel.
//!
//! The head waits until the run commits to 200 (at the first row for the streaming formats,
//! past `gateway.json_buffer_bytes` for JSON) or the end, so an error before that is
//! answered with its own status. After that, output is buffered up to `flush_bytes` or
//! `flush_interval` and then sent; the channel holds a few chunks, so a client that reads
//! slowly stops pgvia reading the server (memory stays constant however long the result).
//! A client that goes away is seen as the channel (or, before the head, the waiting
//! request) being dropped.
//!
//! A streamed body ends well only through [`Sink::finish`]: a sink dropped without it (an
//! error JSON cannot carry, a failed session) makes the body fail, so hyper closes the
//! connection without the chunked body's last chunk and the client sees a broken response,
//! never a shorter one that looks complete.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
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
    /// The chunks, and whether the sender ended the body on purpose.
    Stream(mpsc::Receiver<Bytes>, Arc<AtomicBool>),
}

/// A streamed response given up after its head went (the client must not take what it
/// got for the whole answer).
#[derive(Debug, thiserror::Error)]
#[error("the response was aborted after it began")]
pub struct Aborted;

impl GatewayBody {
    pub fn full(b: impl Into<Bytes>) -> Self {
        GatewayBody::Full(Some(b.into()))
    }
}

impl Body for GatewayBody {
    type Data = Bytes;
    type Error = Aborted;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        match self.get_mut() {
            GatewayBody::Full(b) => Poll::Ready(b.take().map(|b| Ok(Frame::data(b)))),
            GatewayBody::Stream(rx, finished) => match rx.poll_recv(cx) {
                Poll::Ready(Some(b)) => Poll::Ready(Some(Ok(Frame::data(b)))),
                Poll::Ready(None) if finished.load(Ordering::Acquire) => Poll::Ready(None),
                Poll::Ready(None) => Poll::Ready(Some(Err(Aborted))),
                Poll::Pending => Poll::Pending,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self, GatewayBody::Full(None))
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            GatewayBody::Full(Some(b)) => SizeHint::with_exact(b.len() as u64),
            GatewayBody::Full(None) => SizeHint::with_exact(0),
            GatewayBody::Stream(..) => SizeHint::default(),
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
    /// Set by [`Sink::finish`]: the body ends well.
    finished: Arc<AtomicBool>,
    /// Most bytes held before the head goes (`gateway.json_buffer_bytes` for JSON).
    hold: usize,
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
        hold: usize,
    ) -> Self {
        let (tx, rx) = mpsc::channel(CHANNEL_CHUNKS);
        Sink {
            head: Some(head),
            tx,
            rx: Some(rx),
            content_type,
            finished: Arc::new(AtomicBool::new(false)),
            hold,
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
        let body = GatewayBody::Stream(rx, self.finished.clone());
        let h = Head { status: StatusCode::OK, content_type: self.content_type, body };
        head.send(h).map_err(|_| Gone)
    }

    /// Answers with `status` and `body` instead of what was buffered (nothing has gone yet).
    pub fn answer(&mut self, status: StatusCode, body: Bytes) -> Result<(), Gone> {
        let Some(head) = self.head.take() else { return Err(Gone) };
        self.rx = None;
        let h = Head { status, content_type: "application/json", body: GatewayBody::full(body) };
        head.send(h).map_err(|_| Gone)
    }

    /// Whether the buffer should be handed over now (by size): past `flush_bytes` once the
    /// head has gone, past the hold before.
    pub fn full(&self) -> bool {
        let limit = if self.committed() { self.flush_bytes } else { self.hold };
        self.buf.len() >= limit
    }

    /// When waiting output must be handed over (by time), if any waits.
    pub fn deadline(&self) -> Option<Instant> {
        (self.committed() && !self.buf.is_empty()).then(|| self.since + self.flush_every)
    }

    /// Hands what is buffered to the connection, waiting while the channel is full. Before
    /// the head, only past the hold, which commits the answer to 200 (memory stays bounded
    /// by the hold whatever the answer's size).
    pub async fn flush(&mut self) -> Result<(), Gone> {
        self.since = Instant::now();
        if !self.committed() && self.buf.len() >= self.hold {
            self.commit()?;
        }
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

    /// Ends the response: a whole 200 answer if nothing has gone yet, else the rest. (Dropping
    /// a sink instead aborts a streamed body.)
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
        // Set before the last chunk: the body sees the channel close only after it.
        self.finished.store(true, Ordering::Release);
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
