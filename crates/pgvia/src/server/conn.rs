use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use wire::backend::{tag, BackendMessage};
use wire::{build, FrameDecoder};

use super::address::ServerAddress;
use super::error::ServerError;
use super::tracker::ReplyTracker;
use crate::auth::{ServerAuthStep, ServerAuthenticator};
use crate::cancel::{CancelTarget, CancelsInFlight};
use crate::net::{ServerEndpoint, ServerStream};
use crate::prepared::ServerStatements;

/// How an idle server was found dead at checkout, for the log.
#[derive(Debug, thiserror::Error)]
pub enum IdleDeath {
    #[error("marked broken")]
    Broken,
    #[error("closed by the server")]
    Closed,
    #[error("the server said: {0}")]
    Said(ServerError),
    #[error("{0}")]
    Io(std::io::Error),
}

/// Room for a probe read; the buffer is reused, so this allocates once per connection.
fn relay_room(buf: &mut BytesMut) {
    if buf.capacity() - buf.len() < 1024 {
        buf.reserve(1024);
    }
}

/// The key a server gave for cancelling its queries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendKey {
    pub process_id: u32,
    pub secret: Bytes,
}

/// The server's reported run-time parameters (ParameterStatus), by name.
pub type ServerParams = BTreeMap<String, String>;

/// Rows of one of pgvia's own queries, as text.
pub type Rows = Vec<Vec<Option<String>>>;

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// How far a server just checked out for a client has got with the client's first request.
/// Until the server has answered anything, a server found dead can be swapped for another
/// and the request run there: only where nothing of it can have run on the dead one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FirstRequest {
    /// Nothing of the client's has been written: whatever failure comes now, the connection
    /// was gone before the request reached it.
    Unsent,
    /// Written whole; no reply byte yet, pgvia answered nothing in the server's place and the
    /// client sent nothing more.
    Awaiting,
    /// The server's first reply was a FATAL it sends when it is terminated from outside (see
    /// [`terminating_fatal`]), so it ran nothing of the request that it could keep.
    Refused,
    /// Past the first request, or it was answered: a failure from here reaches the client.
    Answered,
}

impl FirstRequest {
    /// Whether a server that failed now may be replaced and the request sent elsewhere.
    pub fn may_retry(self) -> bool {
        matches!(self, FirstRequest::Unsent | FirstRequest::Refused)
    }
}

/// What the first bytes a server sent after a request say about it.
#[derive(Debug)]
pub enum FirstReply {
    /// Not a whole message yet.
    Incomplete,
    /// A FATAL error a backend sends when it is shut down from outside, whatever it was doing:
    /// the server is gone, and a request it had not answered ran nothing it could keep.
    Terminating(ServerError),
    /// Anything else.
    Other,
}

/// SQLSTATEs of the FATAL errors a backend sends when it is terminated from outside:
/// `pg_terminate_backend` or a fast shutdown (57P01), a crash of another backend (57P02),
/// `idle_session_timeout` (57P05, PostgreSQL 14 and later). PostgreSQL sends them before
/// it exits, after flushing every reply it had buffered, and only outside a commit (which
/// holds interrupts off until its CommandComplete is buffered); so when such an error is
/// the very first thing a server sends after a request, nothing of that request was
/// committed, and most often (the backend was idle) nothing of it ran at all.
const TERMINATING: [&str; 3] = ["57P01", "57P02", "57P05"];

/// Classifies the first bytes a server sent after being handed a request.
pub fn first_reply(buf: &[u8], decoder: &FrameDecoder) -> FirstReply {
    let len = match decoder.peek_len(buf) {
        Ok(Some(len)) => len,
        Ok(None) => return FirstReply::Incomplete,
        Err(_) => return FirstReply::Other,
    };
    if buf[0] != tag::ERROR_RESPONSE {
        return FirstReply::Other;
    }
    let body = &buf[5..len];
    let fields = wire::backend::Fields::new(body);
    let fatal = matches!(fields.severity(), Some("FATAL"));
    match fields.code() {
        Some(code) if fatal && TERMINATING.contains(&code) => {
            FirstReply::Terminating(ServerError::from_error_body(body, false))
        }
        _ => FirstReply::Other,
    }
}

pub struct ServerConn {
    pub(crate) stream: ServerStream,
    pub id: u64,
    pub key: BackendKey,
    pub peer: ServerEndpoint,
    /// What the server last reported through ParameterStatus.
    pub params: ServerParams,
    /// A shared map known to hold exactly `params` (cleared whenever they change): the map
    /// the last client was told, so the next client told the same shared map is seen to be
    /// in step by a pointer comparison instead of a walk of both maps.
    pub params_told: Option<Arc<ServerParams>>,
    /// Settings pgvia applied for the current client since the last reset.
    pub applied: BTreeMap<String, String>,
    pub tracker: ReplyTracker,
    /// Bytes read from the server and not yet consumed (reused across clients).
    pub read_buf: BytesMut,
    pub decoder: FrameDecoder,
    pub created: Instant,
    pub last_used: Instant,
    /// What the connection is fit for (see [`Condition`]).
    condition: Condition,
    /// Cancels sent to this connection's backend that PostgreSQL has not acted on yet.
    pub cancels: Arc<CancelsInFlight>,
    /// Prepared statements this server holds under pgvia's names (transaction mode).
    pub statements: ServerStatements,
    /// Where the current client's first request stands (set at checkout).
    pub first_request: FirstRequest,
    /// The client thread whose runtime the socket is registered with (`cores`): the pool
    /// keeps it in that thread's idle list.
    pub home: usize,
}

/// What a server connection is fit for. It only moves forward (clean, used, broken) until a
/// reset makes a used connection clean again; a broken one is closed, never reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Condition {
    /// No client has sent anything since it was connected or reset.
    Clean,
    /// A client has sent something: the reset query is needed before anyone else gets it.
    Used,
    /// It can no longer be trusted (I/O error, FATAL, out of step).
    Broken,
}

impl ServerConn {
    pub fn condition(&self) -> Condition {
        self.condition
    }

    pub fn is_broken(&self) -> bool {
        self.condition == Condition::Broken
    }

    /// Never to be reused.
    pub fn mark_broken(&mut self) {
        self.condition = Condition::Broken;
    }

    /// A client sent something (a broken connection stays broken).
    pub fn mark_used(&mut self) {
        if self.condition == Condition::Clean {
            self.condition = Condition::Used;
        }
    }

    /// The reset ran: clean again (a broken connection stays broken).
    pub(super) fn mark_clean(&mut self) {
        if self.condition == Condition::Used {
            self.condition = Condition::Clean;
        }
    }
}

impl std::fmt::Debug for ServerConn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerConn").field("id", &self.id).field("pid", &self.key.process_id).finish()
    }
}

impl ServerConn {
    /// Connects, authenticates and waits for the first ReadyForQuery.
    pub async fn connect(
        addr: &ServerAddress,
        connect_timeout: Duration,
        max_frame: usize,
    ) -> Result<Self, ServerError> {
        let fut = Self::connect_inner(addr, max_frame);
        match tokio::time::timeout(connect_timeout, fut).await {
            Ok(r) => r,
            Err(_) => Err(ServerError::ConnectTimeout { addr: addr.display(), after: connect_timeout }),
        }
    }

    /// A connection over `stream` that has said nothing yet (connecting fills in the rest).
    /// Tests of the exchange use it to play the server's part with scripted frames.
    #[cfg(test)]
    pub(crate) fn over(stream: tokio::net::TcpStream, max_frame: usize) -> std::io::Result<Self> {
        let peer = ServerEndpoint::Tcp(stream.peer_addr()?);
        Ok(Self::with_stream(ServerStream::Tcp(stream), peer, max_frame))
    }

    fn with_stream(stream: ServerStream, peer: ServerEndpoint, max_frame: usize) -> Self {
        ServerConn {
            stream,
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            key: BackendKey { process_id: 0, secret: Bytes::new() },
            peer,
            params: ServerParams::new(),
            params_told: None,
            applied: BTreeMap::new(),
            tracker: ReplyTracker::default(),
            read_buf: BytesMut::with_capacity(16 * 1024),
            decoder: FrameDecoder::new(max_frame),
            created: Instant::now(),
            last_used: Instant::now(),
            condition: Condition::Clean,
            cancels: Arc::default(),
            statements: ServerStatements::default(),
            first_request: FirstRequest::Answered,
            home: crate::cores::current(),
        }
    }

    /// The connection with its socket moved to this thread's runtime, so its readiness wakes
    /// this thread rather than the one that opened it, and whether it moved. A TLS session
    /// stays where it is (its socket is inside the TLS state) and keeps working from here, at
    /// the price of a wake-up across threads. On an error the connection is gone (its socket
    /// closed).
    pub fn rehome(mut self) -> std::io::Result<(Self, bool)> {
        let here = crate::cores::current();
        if self.home == here || self.stream.is_tls() {
            return Ok((self, false));
        }
        let stream = self.stream;
        self.stream = stream.rehomed()?;
        self.home = here;
        Ok((self, true))
    }

    async fn connect_inner(addr: &ServerAddress, max_frame: usize) -> Result<Self, ServerError> {
        let (stream, peer) = super::transport::open(addr).await?;
        let mut conn = Self::with_stream(stream, peer, max_frame);
        let mut out = BytesMut::with_capacity(256);
        // No application_name: a client that sets none must see the empty default, as it
        // would connected directly.
        // Refused before a byte goes out if a name would smuggle in parameters of its own
        // (a NUL byte): every entry point checks its names already, this is the last word.
        build::startup_message(&mut out, [("user", addr.user.as_str()), ("database", addr.dbname.as_str())])
            .map_err(ServerError::Startup)?;
        conn.stream.write_all(&out).await?;
        let mut auth = ServerAuthenticator::new(&addr.user, &addr.credential, addr.auth);
        loop {
            let frame = conn.read_frame().await?;
            match frame.tag() {
                tag::AUTHENTICATION => {
                    out.clear();
                    if let ServerAuthStep::Ok = auth.on_auth_request(frame.body(), &mut out)? {
                        continue;
                    }
                    if !out.is_empty() {
                        conn.stream.write_all(&out).await?;
                    }
                }
                tag::ERROR_RESPONSE => return Err(ServerError::from_error_body(frame.body(), true)),
                tag::READY_FOR_QUERY => return Ok(conn),
                _ => conn.observe(&frame)?,
            }
        }
    }

    /// Reads one whole frame, for pgvia's own exchanges (startup, internal queries, reset).
    pub(super) async fn read_frame(&mut self) -> Result<wire::Frame, ServerError> {
        loop {
            if let Some(f) = self.decoder.decode(&mut self.read_buf)? {
                return Ok(f);
            }
            if self.stream.read_buf(&mut self.read_buf).await? == 0 {
                self.mark_broken();
                return Err(ServerError::Closed);
            }
        }
    }

    /// The next whole frame when one can be had without waiting, for a session that reads
    /// several servers at once (the sharded session); like [`Self::read_frame`], which is
    /// the same read for one server.
    pub fn poll_frame(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<wire::Frame, ServerError>> {
        use std::task::Poll;
        loop {
            match self.decoder.decode(&mut self.read_buf) {
                Ok(Some(f)) => return Poll::Ready(Ok(f)),
                Ok(None) => {}
                Err(e) => return Poll::Ready(Err(e.into())),
            }
            // Straight into `read_buf`'s spare room: no stack buffer to zero and copy from on
            // every poll (the sharded session reads every shard's replies through here).
            relay_room(&mut self.read_buf);
            match tokio_util::io::poll_read_buf(std::pin::Pin::new(&mut self.stream), cx, &mut self.read_buf)
            {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(e)) => {
                    self.mark_broken();
                    return Poll::Ready(Err(e.into()));
                }
                Poll::Ready(Ok(0)) => {
                    self.mark_broken();
                    return Poll::Ready(Err(ServerError::Closed));
                }
                Poll::Ready(Ok(_)) => {}
            }
        }
    }

    /// Reads more of the server's replies into `read_buf`, for a reader that walks its frames
    /// in place (the sharded session's one-shard exchanges).
    pub fn poll_fill(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), ServerError>> {
        use std::task::Poll;
        relay_room(&mut self.read_buf);
        match tokio_util::io::poll_read_buf(std::pin::Pin::new(&mut self.stream), cx, &mut self.read_buf) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Err(e)) => {
                self.mark_broken();
                Poll::Ready(Err(e.into()))
            }
            Poll::Ready(Ok(0)) => {
                self.mark_broken();
                Poll::Ready(Err(ServerError::Closed))
            }
            Poll::Ready(Ok(_)) => Poll::Ready(Ok(())),
        }
    }

    /// Records what the session must remember from a server message that is not a reply:
    /// parameter changes and the cancel key.
    pub(crate) fn observe(&mut self, frame: &wire::Frame) -> Result<(), ServerError> {
        match frame.tag() {
            tag::PARAMETER_STATUS | tag::BACKEND_KEY_DATA => {
                self.observe_body(frame.tag(), frame.body())?;
            }
            _ => {}
        }
        Ok(())
    }

    /// As [`Self::observe`], for the relay, which sees frames in place.
    pub fn observe_body(&mut self, tag_byte: u8, body: &[u8]) -> Result<(), ServerError> {
        match BackendMessage::parse_body(tag_byte, body)? {
            BackendMessage::ParameterStatus { name, value }
                if self.params.get(name).map(String::as_bytes) != Some(value) =>
            {
                // A value in a client encoding other than UTF-8 is kept as best it reads: the
                // map serves comparisons and reports, and a lossy value only costs a resend.
                self.params.insert(name.to_owned(), String::from_utf8_lossy(value).into_owned());
                self.params_told = None;
            }
            BackendMessage::BackendKeyData { process_id, secret } => {
                self.key = BackendKey { process_id, secret: Bytes::copy_from_slice(secret) };
            }
            _ => {}
        }
        Ok(())
    }

    /// Runs pgvia's own simple queries, pipelined in one write, and waits for all their
    /// ReadyForQuery replies. Rows are discarded. The first error is returned after the
    /// server is back in step.
    pub async fn run_internal(&mut self, queries: &[&str], timeout: Duration) -> Result<(), ServerError> {
        let fut = self.run_internal_inner(queries);
        match tokio::time::timeout(timeout, fut).await {
            Ok(r) => r,
            Err(_) => {
                self.mark_broken();
                Err(ServerError::Timeout(timeout))
            }
        }
    }

    pub(super) async fn run_internal_inner(&mut self, queries: &[&str]) -> Result<(), ServerError> {
        self.send_queries(queries).await?;
        self.drain(None).await
    }

    async fn send_queries(&mut self, queries: &[&str]) -> Result<(), ServerError> {
        let mut out = BytesMut::new();
        for q in queries {
            build::query(&mut out, q);
            // A simple query replaces the unnamed statement.
            self.statements.unnamed = None;
            self.tracker.client_sent(b'Q', &[]);
        }
        self.write_all(&out).await
    }

    /// Runs one of pgvia's own queries and returns its rows as text (NULL as `None`).
    pub async fn query_rows(&mut self, sql: &str, timeout: Duration) -> Result<Rows, ServerError> {
        self.query_rows_noticed(sql, timeout).await.map(|(rows, _)| rows)
    }

    /// As [`Self::query_rows`], with the NoticeResponse frames the query raised, whole.
    pub async fn query_rows_noticed(
        &mut self,
        sql: &str,
        timeout: Duration,
    ) -> Result<(Rows, Vec<Bytes>), ServerError> {
        let fut = async {
            self.send_queries(&[sql]).await?;
            let mut rows = Rows::new();
            let mut notices = Vec::new();
            self.drain_into(None, Some(&mut rows), Some(&mut notices)).await?;
            Ok((rows, notices))
        };
        match tokio::time::timeout(timeout, fut).await {
            Ok(r) => r,
            Err(_) => {
                self.mark_broken();
                Err(ServerError::Timeout(timeout))
            }
        }
    }

    /// Reads and discards replies until nothing is owed; `first_error` collects the first
    /// ErrorResponse seen.
    pub(super) async fn drain(&mut self, first_error: Option<ServerError>) -> Result<(), ServerError> {
        self.drain_into(first_error, None, None).await
    }

    async fn drain_into(
        &mut self,
        mut first_error: Option<ServerError>,
        mut rows: Option<&mut Rows>,
        mut notices: Option<&mut Vec<Bytes>>,
    ) -> Result<(), ServerError> {
        loop {
            // Replies pgvia owes the client in the server's place are moot here.
            while self.tracker.take_answered().is_some() {}
            if !self.tracker.has_pending() {
                break;
            }
            let frame = match self.read_frame().await {
                Ok(f) => f,
                Err(e) => {
                    self.mark_broken();
                    return Err(e);
                }
            };
            self.observe(&frame)?;
            let (event, _) = self.tracker.server_sent(frame.tag(), frame.body());
            self.settle_statements(None);
            match event {
                super::ServerEvent::Fatal | super::ServerEvent::Desync => {
                    self.mark_broken();
                    return Err(if frame.tag() == tag::ERROR_RESPONSE {
                        ServerError::from_error_body(frame.body(), false)
                    } else {
                        ServerError::Desync("unexpected ReadyForQuery")
                    });
                }
                _ => {}
            }
            if frame.tag() == tag::ERROR_RESPONSE && first_error.is_none() {
                first_error = Some(ServerError::from_error_body(frame.body(), false));
            }
            if let (Some(notices), tag::NOTICE_RESPONSE) = (notices.as_deref_mut(), frame.tag()) {
                notices.push(frame.clone().into_bytes());
            }
            if let (Some(rows), tag::DATA_ROW) = (rows.as_deref_mut(), frame.tag()) {
                if let BackendMessage::DataRow(row) = BackendMessage::parse(&frame)? {
                    let values = row
                        .values()
                        .map(|v| v.map(|v| v.map(|b| String::from_utf8_lossy(b).into_owned())))
                        .collect::<Result<Vec<_>, _>>()?;
                    rows.push(values);
                }
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Applies the outcome of settled requests to the statement bookkeeping (see
    /// [`super::forward::settle`]).
    pub fn settle_statements(&mut self, client: Option<&mut crate::prepared::ClientStatements>) {
        if self.tracker.has_finished() {
            super::forward::settle(self.tracker.take_finished(), &mut self.statements, client);
        }
    }

    /// Where a client's cancel for this connection goes.
    pub fn cancel_target(&self) -> CancelTarget {
        CancelTarget {
            server: self.peer.clone(),
            process_id: self.key.process_id,
            secret: self.key.secret.clone(),
            in_flight: self.cancels.clone(),
            also: Vec::new(),
        }
    }

    /// Writes bytes the relay prepared.
    pub async fn write_all(&mut self, bytes: &[u8]) -> Result<(), ServerError> {
        self.stream.write_all(bytes).await.map_err(|e| {
            self.mark_broken();
            e.into()
        })
    }

    /// The socket, for the relay loop which reads and writes it directly.
    pub fn stream_mut(&mut self) -> &mut ServerStream {
        &mut self.stream
    }

    /// Checks, without waiting, that an idle server has not closed or sent anything: an idle
    /// server has nothing to say, so anything readable means it is going away (terminated from
    /// outside, its FATAL waiting in the socket, or closed). Costs no system call unless the
    /// runtime has seen the socket become readable since the last read.
    pub fn is_alive(&mut self) -> Result<(), IdleDeath> {
        if self.is_broken() {
            return Err(IdleDeath::Broken);
        }
        if !self.read_buf.is_empty() {
            return Err(self.idle_death(None));
        }
        relay_room(&mut self.read_buf);
        match self.stream.try_read_buf(&mut self.read_buf) {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(()),
            Ok(0) => Err(self.idle_death(None)),
            Ok(_) => Err(self.idle_death(None)),
            Err(e) => Err(self.idle_death(Some(e))),
        }
    }

    /// Why an idle server is dead, from what it left in `read_buf`.
    fn idle_death(&mut self, error: Option<std::io::Error>) -> IdleDeath {
        self.mark_broken();
        match self.decoder.decode(&mut self.read_buf) {
            Ok(Some(f)) if f.tag() == tag::ERROR_RESPONSE => {
                IdleDeath::Said(ServerError::from_error_body(f.body(), false))
            }
            _ => match error {
                Some(e) => IdleDeath::Io(e),
                None => IdleDeath::Closed,
            },
        }
    }

    /// Sends Terminate and drops the connection, best effort.
    pub async fn close(mut self) {
        let mut out = BytesMut::new();
        build::terminate(&mut out);
        let _ = tokio::time::timeout(Duration::from_millis(100), self.stream.write_all(&out)).await;
    }

    /// Consumes `n` bytes of `read_buf` that the relay forwarded.
    pub fn consume(&mut self, n: usize) {
        self.read_buf.advance(n);
    }
}
