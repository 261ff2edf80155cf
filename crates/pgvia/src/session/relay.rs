//! The serve loop: bytes between a client and the server it holds.
//!
//! One task owns both sockets. Whatever is readable is read first; complete frames are
//! checked (client side) or observed (server side) in place and moved whole into the other
//! side's write buffer, so a round trip costs one read and one write per direction however
//! many messages it carries. Frames are forwarded as the same bytes; nothing is re-encoded.

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::watch;
use wire::frontend::{self, FrontendMessage};
use wire::FrameDecoder;

use super::error::SessionError;
use super::state::SessionState;
use super::timeouts::{Timers, Wait};
use crate::app::Phase;
use crate::net::ClientStream;
use crate::pool::Pool;
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

/// Transaction pooling: what the relay needs to follow the client's session state.
pub struct Tracking<'a> {
    pub analyzer: &'a route::Analyzer,
    pub state: &'a mut SessionState,
    pub pool: &'a Pool,
    /// Statement mode: statements that open a transaction block are refused.
    pub refuse_transactions: bool,
    /// A refused message waits at the head of the client's buffer (statement_mode.rs).
    pub held: bool,
    /// An extended-protocol batch was forwarded and its Sync not yet.
    pub open_batch: bool,
}

impl Tracking<'_> {
    /// Reads what a Query or Parse may do to the session. True when statement mode refuses it.
    fn observe(&mut self, tag: u8, body: &[u8]) -> bool {
        let analysis = match FrontendMessage::parse_body(tag, body) {
            Ok(FrontendMessage::Query { sql }) => self.analyzer.analyze(sql, &[]),
            Ok(FrontendMessage::Parse(p)) => {
                // Parse carries few parameter types; keep them on the stack on this per-message
                // path and allocate only for unusually many.
                let mut stack = [0u32; 32];
                let n = p.param_types.len();
                if n <= stack.len() {
                    for (slot, oid) in stack.iter_mut().zip(p.param_types.iter()) {
                        *slot = oid;
                    }
                    self.analyzer.analyze(p.query, &stack[..n])
                } else {
                    let oids: Vec<u32> = p.param_types.iter().collect();
                    self.analyzer.analyze(p.query, &oids)
                }
            }
            _ => return false,
        };
        if self.refuse_transactions && super::statement_mode::opens_transaction(&analysis) {
            return true;
        }
        let added = self.state.observe(&analysis);
        for reason in added.reasons() {
            self.pool.stats.pins[reason.index()].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            tracing::info!(pool = %self.pool.name, reason = reason.as_str(), "client pinned to its server until the effect ends");
        }
        false
    }

    /// Whether the server may go back to the pool now, or must at least stop for a check.
    fn may_release(&self) -> bool {
        self.state.pins.is_empty()
            || self.state.recheck_pins
            || self.state.settings_changed
            || self.state.listen_changed
    }
}

/// What a relay waits on besides the two sockets: the session's time limits and the
/// notifications of the channels it listens to.
pub struct Waits<'a> {
    pub timers: &'a mut Timers,
    pub inbox: Option<&'a mut crate::notify::Inbox>,
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

/// What a batch of client bytes held.
struct ClientScan {
    /// Bytes of whole, valid frames to forward.
    forward: usize,
    terminated: bool,
    error: Option<SessionError>,
}

fn scan_client(
    buf: &[u8],
    decoder: &FrameDecoder,
    server: &mut ServerConn,
    mut tracking: Option<&mut Tracking<'_>>,
) -> ClientScan {
    let mut pos = 0;
    loop {
        let len = match decoder.peek_len(&buf[pos..]) {
            Ok(Some(len)) => len,
            Ok(None) => return ClientScan { forward: pos, terminated: false, error: None },
            Err(e) => return ClientScan { forward: pos, terminated: false, error: Some(e.into()) },
        };
        let tag = buf[pos];
        let body = &buf[pos + 5..pos + len];
        if tag == frontend::tag::TERMINATE {
            return ClientScan { forward: pos, terminated: true, error: None };
        }
        // CopyData bodies are opaque; every other message is checked before a server sees it.
        if tag != frontend::tag::COPY_DATA {
            if let Err(e) = FrontendMessage::parse_body(tag, body) {
                return ClientScan { forward: pos, terminated: false, error: Some(e.into()) };
            }
        }
        if let Some(t) = tracking.as_deref_mut() {
            if matches!(tag, frontend::tag::QUERY | frontend::tag::PARSE) && t.observe(tag, body) {
                // Refused in statement mode: answered in order once the server is done.
                if t.open_batch {
                    let error = Some(super::statement_mode::fatal_refusal());
                    return ClientScan { forward: pos, terminated: false, error };
                }
                t.held = true;
                return ClientScan { forward: pos, terminated: false, error: None };
            }
            if t.refuse_transactions {
                match tag {
                    frontend::tag::QUERY | frontend::tag::SYNC => t.open_batch = false,
                    frontend::tag::PARSE
                    | frontend::tag::BIND
                    | frontend::tag::DESCRIBE
                    | frontend::tag::EXECUTE
                    | frontend::tag::CLOSE
                    | frontend::tag::FLUSH => t.open_batch = true,
                    _ => {}
                }
            }
        }
        server.tracker.client_sent(tag);
        pos += len;
    }
}

/// What a batch of server bytes held.
struct ServerScan {
    forward: usize,
    /// Length of a frame after `forward` that belongs to an injected statement's reply and
    /// must be dropped, or 0.
    swallow: usize,
    fatal: bool,
    /// A ReadyForQuery was among the frames.
    ready: bool,
    error: Option<ServerError>,
}

fn scan_server(buf: &[u8], server: &mut ServerConn) -> ServerScan {
    let decoder = server.decoder;
    let mut pos = 0;
    let mut fatal = false;
    let mut ready = false;
    loop {
        let len = match decoder.peek_len(&buf[pos..]) {
            Ok(Some(len)) => len,
            Ok(None) => return ServerScan { forward: pos, swallow: 0, fatal, ready, error: None },
            Err(e) => return ServerScan { forward: pos, swallow: 0, fatal, ready, error: Some(e.into()) },
        };
        let tag = buf[pos];
        let body = &buf[pos + 5..pos + len];
        if tag == wire::backend::tag::PARAMETER_STATUS {
            if let Err(e) = server.observe_body(tag, body) {
                return ServerScan { forward: pos, swallow: 0, fatal, ready, error: Some(e) };
            }
        }
        match server.tracker.server_sent(tag, body) {
            ServerEvent::Fatal => fatal = true,
            ServerEvent::Desync => {
                return ServerScan {
                    forward: pos,
                    swallow: 0,
                    fatal,
                    ready,
                    error: Some(ServerError::Desync("ReadyForQuery without a pending request")),
                }
            }
            ServerEvent::Ready { .. } => ready = true,
            ServerEvent::Other => {}
        }
        if server.swallow_replies > 0 {
            if tag == wire::backend::tag::READY_FOR_QUERY {
                server.swallow_replies -= 1;
            }
            return ServerScan { forward: pos, swallow: len, fatal, ready, error: None };
        }
        pos += len;
    }
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
    let scan = scan_client(&bufs.from_client, decoder, server, tracking);
    move_prefix(&mut bufs.from_client, &mut bufs.to_server, scan.forward);
    if !scan.terminated && scan.error.is_none() {
        return None;
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
    waits: Waits<'_>,
) -> RelayEnd {
    let Waits { timers, mut inbox } = waits;
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
        timers.enter(Wait::holding(server));
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
            // Notifications from the pool's LISTEN connection; to_client holds whole frames
            // only, so each lands between two messages of the server's.
            frame = next_notification(&mut inbox), if inbox.is_some() && bufs.to_client.len() < HIGH_WATER => {
                bufs.to_client.extend_from_slice(&frame);
            }
            wait = timers.expired(), if timers.armed() => {
                if wait != Wait::Server {
                    return RelayEnd::Error(timers.closing_error(wait));
                }
                // to_client holds whole frames only, so the warning lands between messages.
                timers.cancel_request(server, &mut bufs.to_client);
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
                let scan = loop {
                    let scan = scan_server(&read_buf, server);
                    move_prefix(&mut read_buf, &mut bufs.to_client, scan.forward);
                    server_fatal |= scan.fatal;
                    if scan.swallow == 0 {
                        break scan;
                    }
                    read_buf.advance(scan.swallow);
                };
                server.read_buf = read_buf;
                if let Some(error) = scan.error {
                    server.broken = true;
                    let _ = cw.write_all(&bufs.to_client).await;
                    return RelayEnd::ServerLost { error, told_client: false };
                }
                let releasable = tracking.as_ref().is_some_and(Tracking::may_release);
                // Every Sync the client sent is answered and nothing of its is half-received.
                let held = tracking.as_ref().is_some_and(|t| t.held);
                let done = server.tracker.is_quiescent()
                    && bufs.to_server.is_empty()
                    && (bufs.from_client.is_empty() || held);
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

/// The next notification for a session that listens; pending forever for one that does not.
pub async fn next_notification(inbox: &mut Option<&mut crate::notify::Inbox>) -> bytes::Bytes {
    match inbox {
        Some(inbox) => inbox.next().await,
        None => std::future::pending().await,
    }
}
