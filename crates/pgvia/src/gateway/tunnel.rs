//! The gateway as a wire client of an ordinary pgvia session, over an in-memory pipe.
//!
//! An HTTP request becomes a session like any other (`session::serve_verified`: pools,
//! pooling modes, routing to replicas, statement tracking all apply), whose client is this
//! end of a `tokio::io::duplex` pipe. The gateway checked the credentials itself, so the
//! session starts at AuthenticationOk.
//!
//! A request's pipeline is queued, not written at once: it goes to the pipe while the
//! session's replies are read ([`Tunnel::fill`]), as the pipe's two directions are bounded
//! and a session that cannot write its replies stops reading (a large batch written before
//! any reply is read would wait on itself forever).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream, ReadHalf, WriteHalf};
use wire::backend::BackendMessage;
use wire::startup::StartupMessage;
use wire::{Frame, FrameDecoder, WireError};

use crate::app::App;
use crate::net::limits::PendingLogin;
use crate::net::{Carrier, ClientPeer, ClientStream};

/// Bytes the pipe holds each way: a few frames, so a slow HTTP client holds the session
/// (and through it the server) back instead of pgvia buffering for it.
const PIPE_BYTES: usize = 64 * 1024;

/// Largest frame accepted from the session (a DataRow can be as large as PostgreSQL allows).
const MAX_FRAME: usize = 1024 * 1024 * 1024;

/// How long a cancelled or abandoned request may take to reach its ReadyForQuery before
/// the pipe is simply dropped (the session then closes the server rather than reuse it).
const DRAIN_LIMIT: Duration = Duration::from_secs(5);

/// The StartupMessage a request's session starts from: who it is for and its startup
/// settings (`statement_timeout`, `application_name`...). Refused, with the reason, if a name
/// or setting could not be a parameter of one (a NUL byte), as every StartupMessage pgvia
/// accepts from anywhere but the wire is (`StartupMessage::new`).
pub fn startup(
    user: &str,
    database: &str,
    settings: Vec<(String, String)>,
) -> Result<StartupMessage, WireError> {
    let mut params = vec![
        ("user".to_owned(), user.to_owned()),
        ("database".to_owned(), database.to_owned()),
        ("client_encoding".to_owned(), "UTF8".to_owned()),
    ];
    params.extend(settings);
    StartupMessage::new(3, 0, params)
}

#[derive(Debug, thiserror::Error)]
pub enum TunnelError {
    #[error("the session ended unexpectedly")]
    Closed,
    #[error("the session's pipe failed: {0}")]
    Io(#[from] std::io::Error),
    #[error("the session sent a malformed message: {0}")]
    Wire(#[from] WireError),
}

/// One session's client end.
pub struct Tunnel {
    reader: ReadHalf<DuplexStream>,
    writer: WriteHalf<DuplexStream>,
    /// Queued messages not yet written, each a whole message group (a statement's
    /// Parse/Bind/Describe/Execute, a Sync), so that the rest can be given up at a boundary.
    outbox: VecDeque<Bytes>,
    /// Whether the front of `outbox` is partly written.
    started: bool,
    buf: BytesMut,
    decoder: FrameDecoder,
    /// The key the session gave us (BackendKeyData), to cancel its running query.
    key: Option<(u32, Box<[u8]>)>,
}

impl Tunnel {
    /// Starts a session for `startup` (see [`startup`]); its welcome (ParameterStatus, BackendKeyData, or a
    /// login error) is read by the caller through [`Tunnel::next_frame`].
    pub fn start(
        app: &Arc<App>,
        peer: ClientPeer,
        carrier: Carrier,
        startup: StartupMessage,
        pending: PendingLogin,
    ) -> Self {
        let (ours, theirs) = tokio::io::duplex(PIPE_BYTES);
        tokio::spawn(crate::session::serve_verified(
            app.clone(),
            ClientStream::Memory(theirs, carrier),
            peer,
            startup,
            pending,
        ));
        let (reader, writer) = tokio::io::split(ours);
        Tunnel {
            reader,
            writer,
            outbox: VecDeque::new(),
            started: false,
            buf: BytesMut::with_capacity(PIPE_BYTES),
            decoder: FrameDecoder::new(MAX_FRAME),
            key: None,
        }
    }

    /// Writes `out` now, after anything queued. Only for what is sent once the session has
    /// answered everything before (its replies are not read meanwhile).
    pub async fn send(&mut self, out: &mut BytesMut) -> Result<(), TunnelError> {
        self.queue(out);
        while let Some(front) = self.outbox.front_mut() {
            self.writer.write_all(front).await?;
            self.outbox.pop_front();
            self.started = false;
        }
        Ok(())
    }

    /// Queues `out` as one message group, written by [`Tunnel::fill`] as replies are read.
    pub fn queue(&mut self, out: &mut BytesMut) {
        if !out.is_empty() {
            self.outbox.push_back(out.split().freeze());
        }
    }

    /// Gives up the queued groups not yet begun, for a client that went away: the session
    /// gets a Sync instead, so that it still ends the request with a ReadyForQuery.
    pub fn abandon(&mut self) {
        let keep = usize::from(self.started);
        if self.outbox.len() > keep {
            self.outbox.truncate(keep);
            let mut sync = BytesMut::with_capacity(5);
            wire::build::sync(&mut sync);
            self.outbox.push_back(sync.freeze());
        }
    }

    /// The next whole frame already read, if any. Remembers the session's cancel key.
    pub fn next_frame(&mut self) -> Result<Option<Frame>, TunnelError> {
        let Some(frame) = self.decoder.decode(&mut self.buf)? else { return Ok(None) };
        if frame.tag() == b'K' {
            if let Ok(BackendMessage::BackendKeyData { process_id, secret }) = BackendMessage::parse(&frame) {
                self.key = Some((process_id, secret.into()));
            }
        }
        Ok(Some(frame))
    }

    /// Reads more from the session, writing what is queued meanwhile; returns when either
    /// made progress (cancel-safe: a write not completed wrote nothing). The session ending
    /// is an error: every request ends with a ReadyForQuery first.
    pub async fn fill(&mut self) -> Result<(), TunnelError> {
        if self.buf.capacity() - self.buf.len() < 8 * 1024 {
            self.buf.reserve(PIPE_BYTES);
        }
        let Tunnel { reader, writer, outbox, started, buf, .. } = self;
        let read = async {
            match reader.read_buf(buf).await? {
                0 => Err(TunnelError::Closed),
                _ => Ok(()),
            }
        };
        // A handle on the front group (not a borrow): it is advanced once written.
        let Some(front) = outbox.front().cloned() else { return read.await };
        tokio::select! {
            r = read => r,
            w = writer.write(&front) => {
                let n = w?;
                if n == 0 {
                    return Err(TunnelError::Closed);
                }
                match outbox.front_mut() {
                    Some(f) if n < f.len() => {
                        f.advance(n);
                        *started = true;
                    }
                    _ => {
                        outbox.pop_front();
                        *started = false;
                    }
                }
                Ok(())
            }
        }
    }

    /// Sends a CancelRequest for the session's running query, as a client would (through
    /// pgvia's cancel registry, to whichever server the session holds now).
    pub async fn cancel(&self, app: &App) {
        let Some((pid, secret)) = &self.key else { return };
        if let Some(cancel) = app.cancels.lookup(*pid, secret) {
            let server = cancel.target.server.clone();
            if let Err(e) = crate::cancel::forward(cancel, app.cancel_timeout()).await {
                tracing::warn!(error = %e, %server, "gateway: could not forward cancel request");
            }
        }
    }

    /// Reads and drops what the session still sends up to its next ReadyForQuery, so the
    /// server goes back to the pool through the ordinary path; gives up after a while.
    pub async fn drain(&mut self) -> Result<(), TunnelError> {
        let wait = async {
            loop {
                while let Some(f) = self.next_frame()? {
                    if f.tag() == b'Z' {
                        return Ok(());
                    }
                }
                self.fill().await?;
            }
        };
        tokio::time::timeout(DRAIN_LIMIT, wait).await.unwrap_or(Err(TunnelError::Closed))
    }

    /// Says goodbye (Terminate) and drops the pipe.
    pub async fn close(mut self) {
        let mut out = BytesMut::with_capacity(5);
        wire::build::terminate(&mut out);
        let _ = self.writer.write_all(&out).await;
        let _ = self.writer.shutdown().await;
    }
}
