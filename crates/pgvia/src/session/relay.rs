//! The serve loop: bytes between a client and the server it holds.
//!
//! One task owns both sockets. Whatever is readable is read first; complete frames are
//! checked (client side) or observed (server side) in place and moved whole into the other
//! side's write buffer, so a round trip costs one read and one write per direction however
//! many messages it carries. Frames are forwarded as the same bytes; nothing is re-encoded.

use bytes::{Buf, BytesMut};
use route::SessionEffect;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::watch;
use wire::frontend::{self, FrontendMessage, Target};
use wire::FrameDecoder;

use super::error::SessionError;
use super::state::SessionState;
use crate::app::Phase;
use crate::net::ClientStream;
use crate::pool::Pool;
use crate::prepared::forward::{write_answer, Forward, Sent, ServerSide};
use crate::prepared::sql::SqlStatement;
use crate::prepared::ClientStatements;
use crate::server::tracker::{Answer, Fate};
use crate::server::{ServerConn, ServerError, ServerEvent};

/// Stop reading a side while this much is waiting to be written to the other: the slower
/// peer sets the pace and memory per session stays bounded.
const HIGH_WATER: usize = 256 * 1024;

/// Per-session buffers, kept across the session's life so the hot path does not allocate.
#[derive(Default)]
pub struct Buffers {
    pub from_client: BytesMut,
    pub to_server: BytesMut,
    pub to_client: BytesMut,
}

impl Buffers {
    /// Empty buffers: an idle client costs no buffer memory until it sends or receives
    /// something; reads make room as they need it (`ensure_room`).
    pub fn new() -> Self {
        Self::default()
    }
}

#[derive(Debug)]
pub enum RelayEnd {
    /// The client sent Terminate or closed its socket.
    ClientDone,
    /// The session cannot go on: the client sent something invalid, or no server could be
    /// had for it.
    Error(SessionError),
    /// The server went away or fell out of step; `told_client` when its own FATAL error was
    /// already forwarded.
    ServerLost { error: ServerError, told_client: bool },
    /// Shutting down, and the client is between transactions (or time ran out).
    Shutdown,
    /// Transaction pooling: the server owes nothing and no transaction is open, so it can
    /// serve someone else. Replies may still wait in the client's write buffer.
    Quiescent,
}

/// Transaction pooling: what the relay needs to follow the client's session state and its
/// prepared statements.
pub struct Tracking<'a> {
    pub analyzer: &'a route::Analyzer,
    pub state: &'a mut SessionState,
    pub pool: &'a Pool,
    /// `None` when the pool passes prepared statements through unchanged.
    pub statements: Option<&'a mut ClientStatements>,
}

impl Tracking<'_> {
    /// Learns what a statement may do to the session.
    fn observe(&mut self, analysis: &route::Analysis) {
        let added = self.state.observe(analysis);
        for reason in added.reasons() {
            self.pool.stats.pins[reason.index()].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            tracing::info!(pool = %self.pool.name, reason = reason.as_str(), "client pinned to its server until the effect ends");
        }
    }

    /// Whether the server may go back to the pool now, or must at least stop for a check.
    fn may_release(&self) -> bool {
        self.state.pins.is_empty() || self.state.recheck_pins || self.state.settings_changed
    }

    /// Sends one client frame that names a prepared statement, or runs a query; says whether
    /// it stays in the run of frames forwarded as they came.
    fn send(&mut self, server: &mut ServerConn, out: &mut BytesMut, run: &[u8], frame: &[u8]) -> Sent {
        let (tag, body) = (frame[0], &frame[5..]);
        let message = FrontendMessage::parse_body(tag, body);
        let Some(statements) = self.statements.as_deref_mut() else {
            // Prepared statements pass through unchanged; only their effects are followed.
            server.tracker.client_sent(tag, body);
            match message {
                Ok(FrontendMessage::Query { sql }) => self.observe(&self.analyzer.analyze(sql, &[])),
                Ok(FrontendMessage::Parse(p)) => self.observe(&analyze_parse(self.analyzer, &p)),
                _ => {}
            }
            return Sent::AsIs;
        };
        let server = ServerSide { tracker: &mut server.tracker, statements: &mut server.statements };
        let mut fwd = Forward { client: statements, server, out, analyzer: self.analyzer };
        match message {
            Ok(FrontendMessage::Parse(p)) => {
                let (sent, stmt) = fwd.parse(run, &p);
                if let Some(stmt) = stmt {
                    self.observe(&stmt.analysis);
                }
                sent
            }
            Ok(FrontendMessage::Bind(b)) => fwd.bind(run, frame, b.statement),
            Ok(FrontendMessage::Describe { target: Target::Statement, name }) => {
                fwd.describe_statement(run, frame, name)
            }
            Ok(FrontendMessage::Close { target: Target::Statement, name }) => fwd.close_statement(run, name),
            Ok(FrontendMessage::Query { sql }) => {
                fwd.query();
                let analysis = self.analyzer.analyze(sql, &[]);
                let sent = match SqlStatement::of(sql, &analysis) {
                    Some(SqlStatement::Prepare { name, span }) => fwd.prepare_sql(run, sql, name, span),
                    Some(SqlStatement::Execute { name, span }) => fwd.execute_sql(run, sql, name, span),
                    Some(SqlStatement::Deallocate { name }) => fwd.deallocate_sql(run, name),
                    None => {
                        if forgets_statements(&analysis) {
                            fwd.forget_all();
                        }
                        fwd.server.tracker.client_sent(tag, body);
                        Sent::AsIs
                    }
                };
                self.observe(&analysis);
                sent
            }
            _ => {
                fwd.server.tracker.client_sent(tag, body);
                Sent::AsIs
            }
        }
    }
}

/// Analyses a Parse. Parse carries few parameter types; they stay on the stack on this
/// per-message path, allocating only for unusually many.
fn analyze_parse(analyzer: &route::Analyzer, p: &frontend::Parse<'_>) -> std::sync::Arc<route::Analysis> {
    let mut stack = [0u32; 32];
    let n = p.param_types.len();
    if n <= stack.len() {
        for (slot, oid) in stack.iter_mut().zip(p.param_types.iter()) {
            *slot = oid;
        }
        analyzer.analyze(p.query, &stack[..n])
    } else {
        let oids: Vec<u32> = p.param_types.iter().collect();
        analyzer.analyze(p.query, &oids)
    }
}

/// Whether a query makes the server drop its prepared statements.
fn forgets_statements(analysis: &route::Analysis) -> bool {
    analysis.session_effects().any(|e| {
        matches!(
            e,
            SessionEffect::Deallocate { name: None } | SessionEffect::Discard(route::DiscardTarget::All)
        )
    })
}

/// Moves the first `n` bytes of `src` to the end of `dst`, without copying when `dst` is
/// empty and `src` is taken whole (the common case).
fn move_prefix(src: &mut BytesMut, dst: &mut BytesMut, n: usize) {
    if n == 0 {
        return;
    }
    if dst.is_empty() && n == src.len() {
        std::mem::swap(src, dst);
    } else {
        dst.extend_from_slice(&src[..n]);
        src.advance(n);
    }
}

/// Makes sure a read has room for a useful amount of data. `BytesMut` reclaims its whole
/// allocation once everything in it was consumed, so this rarely allocates.
pub fn ensure_room(buf: &mut BytesMut, min_read: usize) {
    if buf.capacity() - buf.len() < min_read {
        buf.reserve(min_read);
    }
}

/// Room for a read while relaying.
pub const RELAY_READ: usize = 8 * 1024;
/// Room for a read while the client holds no server: small, so idle clients stay cheap; the
/// buffer grows when a client does send more.
pub const IDLE_READ: usize = 2 * 1024;

/// How a batch of client bytes ended.
struct ClientScan {
    terminated: bool,
    error: Option<SessionError>,
    /// pgvia answered a whole query (ReadyForQuery included) in the server's place.
    answered_query: bool,
}

/// Checks the whole client frames read so far and moves them to the server's write buffer,
/// rewritten where prepared statements need it; pgvia's own answers go to the client's.
fn scan_client(
    bufs: &mut Buffers,
    decoder: &FrameDecoder,
    server: &mut ServerConn,
    mut tracking: Option<&mut Tracking<'_>>,
) -> ClientScan {
    let Buffers { from_client, to_server, to_client } = bufs;
    let buf = &from_client[..];
    let mut pos = 0;
    // Start of the frames not yet moved: runs of frames that go as they came move in one copy.
    let mut run_start = 0;
    let mut end = loop {
        let len = match decoder.peek_len(&buf[pos..]) {
            Ok(Some(len)) => len,
            Ok(None) => break ClientScan { terminated: false, error: None, answered_query: false },
            Err(e) => break ClientScan { terminated: false, error: Some(e.into()), answered_query: false },
        };
        let tag = buf[pos];
        let frame = &buf[pos..pos + len];
        if tag == frontend::tag::TERMINATE {
            break ClientScan { terminated: true, error: None, answered_query: false };
        }
        // CopyData bodies are opaque; every other message is checked before a server sees it.
        if tag != frontend::tag::COPY_DATA {
            if let Err(e) = FrontendMessage::parse_body(tag, &frame[5..]) {
                break ClientScan { terminated: false, error: Some(e.into()), answered_query: false };
            }
        }
        let sent = match tracking.as_deref_mut() {
            Some(t) if matches!(tag, b'P' | b'B' | b'D' | b'C' | b'Q') => {
                t.send(server, to_server, &buf[run_start..pos], frame)
            }
            _ => {
                server.tracker.client_sent(tag, &frame[5..]);
                Sent::AsIs
            }
        };
        tracing::trace!(tag = %char::from(tag), ?sent, "client frame");
        pos += len;
        if sent == Sent::Replaced {
            run_start = pos;
        }
    };
    if run_start == 0 {
        move_prefix(from_client, to_server, pos);
    } else {
        to_server.extend_from_slice(&from_client[run_start..pos]);
        from_client.advance(pos);
    }
    end.answered_query = answer_in_servers_place(server, to_client);
    server.settle_statements(tracking.and_then(|t| t.statements.as_deref_mut()));
    end
}

/// Gives the replies pgvia owes in the server's place whose turn has come.
/// Returns whether the last of them answered a whole query.
fn answer_in_servers_place(server: &mut ServerConn, to_client: &mut BytesMut) -> bool {
    let mut whole_query = false;
    while let Some(answer) = server.tracker.take_answered() {
        whole_query = matches!(answer, Answer::Command(..));
        write_answer(to_client, answer);
    }
    whole_query
}

/// What a batch of server bytes held.
struct ServerScan {
    fatal: bool,
    /// A ReadyForQuery was among the frames.
    ready: bool,
    error: Option<ServerError>,
}

/// Moves the whole server frames read so far to the client's write buffer, dropping replies
/// to pgvia's own messages and adding the replies pgvia gives in the server's place.
fn scan_server(read_buf: &mut BytesMut, to_client: &mut BytesMut, server: &mut ServerConn) -> ServerScan {
    let decoder = server.decoder;
    let mut scan = ServerScan { fatal: false, ready: false, error: None };
    let buf = &read_buf[..];
    let mut pos = 0;
    let mut run_start = 0;
    loop {
        let len = match decoder.peek_len(&buf[pos..]) {
            Ok(Some(len)) => len,
            Ok(None) => break,
            Err(e) => {
                scan.error = Some(e.into());
                break;
            }
        };
        let tag = buf[pos];
        let body = &buf[pos + 5..pos + len];
        if tag == wire::backend::tag::PARAMETER_STATUS {
            if let Err(e) = server.observe_body(tag, body) {
                scan.error = Some(e);
                break;
            }
        }
        let (event, fate) = server.tracker.server_sent(tag, body);
        tracing::trace!(tag = %char::from(tag), ?fate, ?event, "server frame");
        match event {
            ServerEvent::Fatal => scan.fatal = true,
            ServerEvent::Desync => {
                scan.error = Some(ServerError::Desync("a reply that answers no pending request"));
                break;
            }
            ServerEvent::Ready { .. } => scan.ready = true,
            ServerEvent::Other => {}
        }
        let answered = server.tracker.take_answered();
        match fate {
            Fate::Forward if answered.is_none() => pos += len,
            Fate::Forward => {
                pos += len;
                to_client.extend_from_slice(&buf[run_start..pos]);
                run_start = pos;
            }
            Fate::Drop | Fate::Replace(_) => {
                to_client.extend_from_slice(&buf[run_start..pos]);
                if let Fate::Replace(frame) = fate {
                    to_client.extend_from_slice(&frame);
                }
                pos += len;
                run_start = pos;
            }
        }
        if let Some(answer) = answered {
            write_answer(to_client, answer);
            answer_in_servers_place(server, to_client);
        }
    }
    if run_start == 0 {
        move_prefix(read_buf, to_client, pos);
    } else {
        to_client.extend_from_slice(&read_buf[run_start..pos]);
        read_buf.advance(pos);
    }
    scan
}

/// Moves the whole, valid client frames read so far to the server's write buffer. On
/// Terminate or an invalid frame, flushes what came before it and says how the session ends.
async fn take_client_frames(
    bufs: &mut Buffers,
    decoder: &FrameDecoder,
    server: &mut ServerConn,
    tracking: Option<&mut Tracking<'_>>,
) -> Option<RelayEnd> {
    if bufs.from_client.is_empty() {
        return None;
    }
    server.dirty = true;
    let mut tracking = tracking;
    let scan = scan_client(bufs, decoder, server, tracking.as_deref_mut());
    let releasable = tracking.as_ref().is_some_and(|t| t.may_release());
    if !scan.terminated && scan.error.is_none() {
        // pgvia answered the client's query itself and the server owes nothing: it can go
        // back now rather than wait for the client's next message.
        let done = server.tracker.is_quiescent() && bufs.to_server.is_empty() && bufs.from_client.is_empty();
        return (releasable && scan.answered_query && done).then_some(RelayEnd::Quiescent);
    }
    // Whatever came before the end is forwarded; the reset that follows collects the replies.
    if let Err(e) = server.stream.write_all(&bufs.to_server).await {
        server.broken = true;
        tracing::debug!(error = %e, "server write failed while client was leaving");
    }
    bufs.to_server.clear();
    Some(match scan.error {
        Some(e) => RelayEnd::Error(e),
        None => RelayEnd::ClientDone,
    })
}

/// Relays until one side is done. The server stays usable unless the result says otherwise;
/// the caller resets or closes it.
pub async fn relay(
    client: &mut ClientStream,
    server: &mut ServerConn,
    bufs: &mut Buffers,
    decoder: &FrameDecoder,
    shutdown: &mut watch::Receiver<Phase>,
    mut tracking: Option<Tracking<'_>>,
) -> RelayEnd {
    let mut draining = *shutdown.borrow() != Phase::Running;
    let mut server_fatal = false;
    // The client may have sent more than the message that got it this server.
    if let Some(end) = take_client_frames(bufs, decoder, server, tracking.as_mut()).await {
        return end;
    }
    let (mut cr, mut cw) = tokio::io::split(client);
    loop {
        if draining && server.tracker.is_quiescent() && bufs.to_client.is_empty() && bufs.to_server.is_empty()
        {
            return RelayEnd::Shutdown;
        }
        ensure_room(&mut server.read_buf, RELAY_READ);
        ensure_room(&mut bufs.from_client, RELAY_READ);
        // Borrow the socket halves and the server's fields separately so one select can wait
        // on all four directions.
        let (mut sr, mut sw) = server.stream.split();
        tokio::select! {
            biased;
            changed = shutdown.changed() => {
                if changed.is_err() || *shutdown.borrow() == Phase::Terminating {
                    return RelayEnd::Shutdown;
                }
                draining = true;
            }
            r = sr.read_buf(&mut server.read_buf), if bufs.to_client.len() < HIGH_WATER => {
                match r {
                    Ok(0) => {
                        server.broken = true;
                        return RelayEnd::ServerLost { error: ServerError::Closed, told_client: server_fatal };
                    }
                    Err(e) => {
                        server.broken = true;
                        return RelayEnd::ServerLost { error: e.into(), told_client: server_fatal };
                    }
                    Ok(_) => {}
                }
                let mut read_buf = std::mem::take(&mut server.read_buf);
                let scan = scan_server(&mut read_buf, &mut bufs.to_client, server);
                server.read_buf = read_buf;
                server_fatal |= scan.fatal;
                server.settle_statements(tracking.as_mut().and_then(|t| t.statements.as_deref_mut()));
                if let Some(error) = scan.error {
                    server.broken = true;
                    let _ = cw.write_all(&bufs.to_client).await;
                    return RelayEnd::ServerLost { error, told_client: false };
                }
                let releasable = tracking.as_ref().is_some_and(Tracking::may_release);
                // Every Sync the client sent is answered and nothing of its is half-received.
                let done = server.tracker.is_quiescent() && bufs.to_server.is_empty() && bufs.from_client.is_empty();
                if releasable && scan.ready && done {
                    return RelayEnd::Quiescent;
                }
            }
            r = cr.read_buf(&mut bufs.from_client), if bufs.to_server.len() < HIGH_WATER => {
                match r {
                    Ok(0) | Err(_) => return RelayEnd::ClientDone,
                    Ok(_) => {}
                }
                if let Some(end) = take_client_frames(bufs, decoder, server, tracking.as_mut()).await {
                    return end;
                }
            }
            r = sw.write(&bufs.to_server), if !bufs.to_server.is_empty() => {
                match r {
                    Ok(n) => bufs.to_server.advance(n),
                    Err(e) => {
                        server.broken = true;
                        return RelayEnd::ServerLost { error: e.into(), told_client: false };
                    }
                }
            }
            r = cw.write(&bufs.to_client), if !bufs.to_client.is_empty() => {
                match r {
                    Ok(n) => bufs.to_client.advance(n),
                    Err(_) => return RelayEnd::ClientDone,
                }
                // TLS may hold the last records inside the session until flushed; for plain
                // TCP this is free.
                if bufs.to_client.is_empty() && cw.flush().await.is_err() {
                    return RelayEnd::ClientDone;
                }
            }
        }
    }
}
