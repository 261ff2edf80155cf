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
use super::meter::Meter;
use super::pipelined::{release_hold_in_open_block, Pipelined};
use super::server_scan::{answer_in_servers_place, first_reply, scan_server};
use super::state::SessionState;
use super::timeouts::{Timers, Wait};
use crate::app::Phase;
use crate::net::ClientStream;
use crate::pool::Pool;
use crate::prepared::sql::SqlStatement;
use crate::prepared::ClientStatements;
use crate::routing::decide::analyze_parse;
use crate::server::forward::{reserved_name_error, Forward, Sent, ServerSide};
use crate::server::tracker::{Pending, Replies, Request};
use crate::server::{FirstRequest, ServerConn, ServerError};

/// Stop reading a side while this much is waiting to be written to the other: the slower
/// peer sets the pace and memory per session stays bounded.
const HIGH_WATER: usize = 256 * 1024;

/// Per-session buffers, kept across the session's life so the hot path does not allocate.
#[derive(Default)]
pub struct Buffers {
    pub from_client: BytesMut,
    pub to_server: BytesMut,
    pub to_client: BytesMut,
    /// The session's traffic counters (admin console, metrics); they travel with the
    /// buffers because the relay is where the traffic is seen.
    pub meter: Meter,
    /// The client's first request to the server it holds, kept until the server answers.
    pub first: super::retry::FirstAttempt,
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
    /// The client's last simple query and its analysis, so a query pgvia already looked at
    /// before taking a server is not parsed again.
    pub memo: &'a mut super::memo::QueryMemo,
    pub state: &'a mut SessionState,
    pub pool: &'a Pool,
    /// `None` when the pool passes prepared statements through unchanged.
    pub statements: Option<&'a mut ClientStatements>,
    /// Statement mode: statements that open a transaction block are refused.
    pub refuse_transactions: bool,
    /// A message waits at the head of the client's buffer, and why.
    pub held: Option<Held>,
    /// An extended-protocol batch was forwarded and its Sync not yet.
    pub open_batch: bool,
    /// Where the session's next transactions go (`SET pgvia.role`).
    pub role: &'a mut crate::config::RolePreference,
    /// The server is a replica the analysis chose (read/write split): an exchange the client
    /// pipelines behind the first that needs the primary waits, to be routed again (`held`)
    /// once the replica has answered. `None` otherwise, and while the relay scans the frames
    /// the routing decision was made on.
    pub replica_split: Option<crate::config::ReadWriteSplit>,
}

/// Why a client message is held back rather than forwarded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Held {
    /// Statement mode refuses it; answered once the server is done (statement_mode.rs).
    Refused,
    /// It needs the primary and the server is a replica (pipelined.rs).
    ForPrimary,
}

/// What a relay waits on besides the two sockets: the session's time limits and the
/// notifications of the channels it listens to.
pub struct Waits<'a> {
    pub timers: &'a mut Timers,
    pub inbox: Option<&'a mut crate::notify::Inbox>,
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
        self.state.pins.is_empty()
            || self.state.recheck_pins
            || self.state.settings_changed
            || self.state.listen_changed
            || self.state.reach == super::state::Reach::Everything
    }

    /// Statement mode: whether a Query or Parse opens a transaction block (the analysis is
    /// cached, so the second look in `send` costs an `Arc` clone).
    fn refuses(&mut self, tag: u8, body: &[u8]) -> bool {
        let analysis = match FrontendMessage::parse_body(tag, body) {
            Ok(FrontendMessage::Query { sql }) => self.memo.analyze(self.analyzer, sql),
            Ok(FrontendMessage::Parse(p)) => analyze_parse(self.analyzer, &p),
            _ => return false,
        };
        super::statement_mode::opens_transaction(&analysis)
    }

    /// `SET pgvia.role` sent while the client holds a server (the next transaction pipelined
    /// behind the last one's reply): answered in order in the server's place, as between
    /// transactions. A value that is not a role goes to the server, which accepts any value
    /// for a setting with a dot in its name, and changes nothing.
    fn set_role(
        &mut self,
        server: &mut ServerConn,
        out: &mut BytesMut,
        run: &[u8],
        analysis: &route::Analysis,
    ) -> Option<Sent> {
        let (role, tag) = crate::routing::decide::role_setting(analysis)?;
        let role = role?;
        if server.tracker.is_skipping() {
            return None;
        }
        *self.role = role;
        out.extend_from_slice(run);
        server.tracker.push(Pending::plain(Request::AnsweredCommand(tag)));
        Some(Sent::Replaced)
    }

    /// Follows whether an extended-protocol batch is open (sent, not synced).
    fn note_batch(&mut self, tag: u8) {
        match tag {
            frontend::tag::QUERY | frontend::tag::SYNC => self.open_batch = false,
            frontend::tag::PARSE
            | frontend::tag::BIND
            | frontend::tag::DESCRIBE
            | frontend::tag::EXECUTE
            | frontend::tag::CLOSE
            | frontend::tag::FLUSH => self.open_batch = true,
            _ => {}
        }
    }

    /// Sends one client frame that names a prepared statement, or runs a query; says whether
    /// it stays in the run of frames forwarded as they came.
    fn send(&mut self, server: &mut ServerConn, out: &mut BytesMut, run: &[u8], frame: &[u8]) -> Sent {
        let (tag, body) = (frame[0], &frame[5..]);
        let message = FrontendMessage::parse_body(tag, body);
        // A simple query is analysed once here, for every use below.
        let query = match message {
            Ok(FrontendMessage::Query { sql }) => Some(self.memo.analyze(self.analyzer, sql)),
            _ => None,
        };
        if let Some(analysis) = &query {
            if let Some(sent) = self.set_role(server, out, run, analysis) {
                return sent;
            }
        }
        let Some(statements) = self.statements.as_deref_mut() else {
            // Prepared statements pass through unchanged; only their effects are followed.
            server.tracker.client_sent(tag, body);
            match (message, query) {
                (_, Some(analysis)) => self.observe(&analysis),
                (Ok(FrontendMessage::Parse(p)), _) => self.observe(&analyze_parse(self.analyzer, &p)),
                _ => {}
            }
            return Sent::AsIs;
        };
        let server = ServerSide { tracker: &mut server.tracker, statements: &mut server.statements };
        let mut fwd = Forward { client: statements, server, out, analyzer: self.analyzer };
        match (message, query) {
            (Ok(FrontendMessage::Parse(p)), _) => {
                let (sent, stmt) = fwd.parse(run, &p);
                if let Some(stmt) = stmt {
                    self.observe(&stmt.analysis);
                }
                sent
            }
            (Ok(FrontendMessage::Bind(b)), _) => {
                // A statement parsed in an earlier transaction runs again: what it may do to
                // the session counts again (the Arc is cloned only for such statements).
                let rerun = fwd.client.get(b.statement).and_then(|s| {
                    let a = &s.analysis;
                    (a.may_have_hidden_effects() || a.has_session_effects()).then(|| a.clone())
                });
                let sent = fwd.bind(run, frame, b.statement);
                if let Some(analysis) = rerun {
                    self.observe(&analysis);
                }
                sent
            }
            (Ok(FrontendMessage::Describe { target: Target::Statement, name }), _) => {
                fwd.describe_statement(run, frame, name)
            }
            (Ok(FrontendMessage::Close { target: Target::Statement, name }), _) => {
                fwd.close_statement(run, name)
            }
            (Ok(FrontendMessage::Query { sql }), Some(analysis)) => {
                fwd.query();
                // Text in a client encoding other than UTF-8 was not analysed, so it is no
                // command pgvia rewrites.
                let text = std::str::from_utf8(sql).ok();
                let sql_statement = text.and_then(|t| Some((t, SqlStatement::of(t, &analysis)?)));
                let sent = match sql_statement {
                    Some((sql, SqlStatement::Prepare { name, span })) => {
                        fwd.prepare_sql(run, sql, name, span)
                    }
                    Some((sql, SqlStatement::Execute { name, span })) => {
                        fwd.execute_sql(run, sql, name, span)
                    }
                    Some((_, SqlStatement::Deallocate { name })) => fwd.deallocate_sql(run, name),
                    None => match reserved_name_error(&analysis) {
                        Some(error) => fwd.refuse_query(run, error),
                        None => {
                            if forgets_statements(&analysis) {
                                fwd.forget_all();
                            }
                            fwd.server.tracker.client_sent(tag, body);
                            Sent::AsIs
                        }
                    },
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
pub(super) fn move_prefix(src: &mut BytesMut, dst: &mut BytesMut, n: usize) {
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
    let Buffers { from_client, to_server, to_client, .. } = bufs;
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
        if let Some(t) = tracking.as_deref_mut() {
            if t.replica_split.is_some() && !t.open_batch && matches!(tag, b'P' | b'B' | b'Q') {
                match t.pipelined_target(decoder, &buf[pos..]) {
                    Pipelined::Here => {}
                    Pipelined::Incomplete => {
                        break ClientScan { terminated: false, error: None, answered_query: false }
                    }
                    Pipelined::Primary => {
                        t.held = Some(Held::ForPrimary);
                        break ClientScan { terminated: false, error: None, answered_query: false };
                    }
                }
            }
            if t.refuse_transactions && matches!(tag, b'P' | b'Q') && t.refuses(tag, &frame[5..]) {
                // Refused in statement mode: answered in order once the server is done, or,
                // inside an unsynced batch the server already has part of, not at all.
                if t.open_batch {
                    let error = Some(super::statement_mode::fatal_refusal());
                    break ClientScan { terminated: false, error, answered_query: false };
                }
                t.held = Some(Held::Refused);
                break ClientScan { terminated: false, error: None, answered_query: false };
            }
            t.note_batch(tag);
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
        if let Some(statements) = tracking.as_deref_mut().and_then(|t| t.statements.as_deref_mut()) {
            if statements.replay.is_recording() && !statements.replay.record(frame) {
                server.tracker.clear_replay_start();
            }
        }
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
    end.answered_query = if defers_answers(server, to_server, from_client) {
        false
    } else {
        answer_in_servers_place(server, to_client)
    };
    server.settle_statements(tracking.and_then(|t| t.statements.as_deref_mut()));
    end
}

/// Whether replies pgvia owes in the server's place wait for the server's first reply: while
/// a server just taken has answered nothing, the client's first request can still go to
/// another server if this one turns out dead (session/retry.rs), so the client must not have
/// heard anything of it yet. PostgreSQL itself answers nothing before a Sync or a Flush, so
/// a client cannot be waiting for these replies until it has sent one of those; after a
/// Flush it may be (and the server need not answer anything), so then they go at once, as
/// they do when nothing at all goes to the server (pgvia answered the whole of it).
fn defers_answers(server: &ServerConn, to_server: &[u8], from_client: &[u8]) -> bool {
    matches!(server.first_request, FirstRequest::Unsent | FirstRequest::Awaiting)
        && !has_flush(to_server)
        && !(to_server.is_empty() && from_client.is_empty())
}

/// Whether the whole frames in `buf` include a Flush.
fn has_flush(buf: &[u8]) -> bool {
    let mut pos = 0;
    while let Some(header) = buf.get(pos..pos + 5) {
        if header[0] == frontend::tag::FLUSH {
            return true;
        }
        let len = u32::from_be_bytes([header[1], header[2], header[3], header[4]]) as usize;
        let Some(next) = pos.checked_add(1 + len.max(4)) else { return false };
        pos = next;
    }
    false
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
    bufs.meter.request(&bufs.from_client);
    let mut tracking = tracking;
    let mut scan = scan_client(bufs, decoder, server, tracking.as_deref_mut());
    if release_hold_in_open_block(server, &bufs.to_server, tracking.as_deref_mut()) {
        scan = scan_client(bufs, decoder, server, tracking.as_deref_mut());
    }
    let releasable = tracking.as_ref().is_some_and(|t| t.may_release());
    if tracking.as_ref().is_some_and(|t| t.held.is_some())
        && bufs.to_server.is_empty()
        && !server.tracker.has_pending()
    {
        // Statement mode stopped at a refused message and the server owes nothing more: the
        // refusal is answered now (client.rs). A transaction open on the server (SQL the
        // analysis could not read began one) would never end by itself.
        if !server.tracker.is_quiescent() {
            return Some(RelayEnd::Error(super::statement_mode::fatal_refusal()));
        }
        return Some(RelayEnd::Quiescent);
    }
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

/// Sends again an exchange whose first Bind failed only because the server's plan of a shared
/// statement went stale (see `prepared::replay`): the statement is closed on the server and the
/// client's recorded frames go through the relay again, so the statement is parsed afresh
/// ahead of them. The client sees only the second attempt.
async fn retry_stale_plan(
    bufs: &mut Buffers,
    decoder: &FrameDecoder,
    server: &mut ServerConn,
    mut tracking: Option<&mut Tracking<'_>>,
    id: u64,
) -> Option<RelayEnd> {
    let statements = tracking.as_deref_mut().and_then(|t| t.statements.as_deref_mut());
    let Some((frames, statements)) = statements.and_then(|s| Some((s.replay.take()?, s))) else {
        // The tracker asks only for an exchange recorded to its Sync; without it the client
        // would never hear how the exchange ended.
        return Some(RelayEnd::Error(SessionError::ProtocolState(
            "a stale-plan retry found no recorded exchange",
        )));
    };
    statements.registry().stats.stale_plan_retries.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    if let Some((stmt, epoch)) = server.statements.get_with_epoch(id) {
        stmt.plan_went_stale(epoch);
        let stmt = stmt.clone();
        tracing::debug!(
            statement = stmt.server_name(),
            "plan went stale after DDL; parsing it again and retrying"
        );
        let name = stmt.server_name_cstr();
        wire::build::frame(&mut bufs.to_server, frontend::tag::CLOSE, |b| {
            b.extend_from_slice(b"S");
            b.extend_from_slice(name);
        });
        server.tracker.push(Pending {
            request: Request::Close,
            replies: Replies::DropSuccess,
            server_effect: None,
            client_effect: None,
        });
        server.statements.forget(id);
    }
    // The exchange goes again, ahead of anything the client sent after it.
    let mut again = frames;
    again.extend_from_slice(&bufs.from_client);
    bufs.from_client = again;
    take_client_frames(bufs, decoder, server, tracking).await
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
    // The client may have sent more than the message that got it this server; the routing
    // decision was made on all of it, so none of it is held for the primary.
    let replica_split = tracking.as_mut().and_then(|t| t.replica_split.take());
    if let Some(end) = take_client_frames(bufs, decoder, server, tracking.as_mut()).await {
        return end;
    }
    if let Some(t) = tracking.as_mut() {
        t.replica_split = replica_split;
    }
    let (mut cr, mut cw) = tokio::io::split(client);
    loop {
        if draining && server.tracker.is_quiescent() && bufs.to_client.is_empty() && bufs.to_server.is_empty()
        {
            return RelayEnd::Shutdown;
        }
        // Replies the client does not read stop the server's too (HIGH_WATER): then the
        // session waits on the client, whose idle limits apply.
        let client_stalled = bufs.to_client.len() >= HIGH_WATER;
        timers.enter(Wait::holding(server, client_stalled));
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
                if let Some(inbox) = inbox.as_mut() {
                    inbox.drain_into(&mut bufs.to_client, HIGH_WATER);
                }
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
                    Ok(n) => bufs.meter.server_bytes(n),
                }
                if let Some(end) = first_reply(server, &mut bufs.to_client) {
                    return end;
                }
                let mut read_buf = std::mem::take(&mut server.read_buf);
                // A pinned client's server holds its session: that session ends as it would.
                let pooled = tracking.as_ref().is_some_and(|t| t.state.pins.is_empty());
                let scan = scan_server(&mut read_buf, &mut bufs.to_client, server, &mut bufs.meter, pooled);
                server.read_buf = read_buf;
                server_fatal |= scan.fatal;
                // A server that said FATAL is closing; it must not go back to the pool.
                server.broken |= scan.fatal || scan.died_idle;
                if scan.died_idle && bufs.to_server.is_empty() {
                    return RelayEnd::Quiescent;
                }
                server.settle_statements(tracking.as_mut().and_then(|t| t.statements.as_deref_mut()));
                if let Some(error) = scan.error {
                    server.broken = true;
                    let _ = cw.write_all(&bufs.to_client).await;
                    return RelayEnd::ServerLost { error, told_client: false };
                }
                if let Some(id) = scan.stale_plan {
                    if let Some(end) = retry_stale_plan(bufs, decoder, server, tracking.as_mut(), id).await {
                        return end;
                    }
                }
                if release_hold_in_open_block(server, &bufs.to_server, tracking.as_mut()) {
                    if let Some(end) = take_client_frames(bufs, decoder, server, tracking.as_mut()).await {
                        return end;
                    }
                }
                let releasable = tracking.as_ref().is_some_and(Tracking::may_release);
                // Every Sync the client sent is answered and nothing of its is half-received.
                let held = tracking.as_ref().is_some_and(|t| t.held.is_some());
                let done = server.tracker.is_quiescent()
                    && bufs.to_server.is_empty()
                    && (bufs.from_client.is_empty() || held);
                if releasable && scan.ready && done {
                    return RelayEnd::Quiescent;
                }
            }
            r = cr.read_buf(&mut bufs.from_client), if bufs.to_server.len() < HIGH_WATER => {
                let n = match r {
                    Ok(0) | Err(_) => return RelayEnd::ClientDone,
                    Ok(n) => n,
                };
                bufs.meter.client_bytes(n);
                // What the client pipelines behind its first request goes with it, if the
                // request goes to another server.
                if matches!(server.first_request, FirstRequest::Unsent | FirstRequest::Awaiting) {
                    let more = &bufs.from_client[bufs.from_client.len() - n..];
                    if !bufs.first.keep_more(more) {
                        server.first_request = FirstRequest::Answered;
                        answer_in_servers_place(server, &mut bufs.to_client);
                    }
                }
                if let Some(end) = take_client_frames(bufs, decoder, server, tracking.as_mut()).await {
                    return end;
                }
            }
            r = sw.write(&bufs.to_server), if !bufs.to_server.is_empty() => {
                match r {
                    Ok(n) => {
                        bufs.to_server.advance(n);
                        if server.first_request == FirstRequest::Unsent {
                            server.first_request = FirstRequest::Awaiting;
                        }
                    }
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
                if client_stalled {
                    // A client reading slowly is not idle.
                    timers.restart();
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
