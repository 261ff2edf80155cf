//! What a relay turn works on, apart from the sockets: the session's buffers, how a relay
//! ends, and what transaction pooling follows through it (`Tracking`: the session state, the
//! client's statements, a held message, an open batch). The client side of a turn is
//! `client_scan.rs`, the server side `server_scan.rs`; both are synchronous, and `relay.rs`
//! drives them with the two sockets.

use bytes::{Buf, BytesMut};
use route::SessionEffect;
use wire::frontend::{self, FrontendMessage, Target};

use super::error::SessionError;
use super::meter::Meter;
use super::state::{SessionState, Via};
use crate::pool::PoolStats;
use crate::prepared::sql::SqlStatement;
use crate::prepared::{changes_schema, ClientStatements};
use crate::routing::decide::analyze_parse;
use crate::server::forward::{reserved_name_error, Forward, Sent, ServerSide};
use crate::server::tracker::{Pending, Request};
use crate::server::{ServerConn, ServerError};

/// A session's buffers, held while it has something to do and kept warm on the worker's
/// free list in between (work.rs), so the hot path does not allocate. Empty at first: reads
/// make room as they need it (`ensure_room`).
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
    /// When the client may be read (high-water mark, large-message budget).
    pub read_limits: super::backpressure::ReadLimits,
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
    /// The pool's name and counters (pins by reason).
    pub pool_name: &'a str,
    pub pool_stats: &'a PoolStats,
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
    /// Where to record that the client, told the pid given here, is about to send something
    /// that may notify through its server (crate::notify::Senders).
    pub notifier: Option<(&'a crate::notify::Senders, u32)>,
}

/// Why a client message is held back rather than forwarded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Held {
    /// Statement mode refuses it; answered once the server is done (statement_mode.rs).
    Refused,
    /// It needs the primary and the server is a replica (pipelined.rs).
    ForPrimary,
}

impl Tracking<'_> {
    /// Learns what a statement may do to the session.
    fn observe(&mut self, analysis: &route::Analysis, via: Via) {
        let added = self.state.observe(analysis, via);
        for reason in added.reasons() {
            self.pool_stats.pins[reason.index()].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            tracing::info!(pool = %self.pool_name, reason = reason.as_str(), "client pinned to its server until the effect ends");
        }
    }

    /// Whether the server may go back to the pool now, or must at least stop for a check.
    pub(super) fn may_release(&self) -> bool {
        self.state.pins.is_empty()
            || !self.state.checks.is_empty()
            || self.state.reach == super::state::Reach::Everything
    }

    /// Statement mode: whether a Query or Parse opens a transaction block (the analysis is
    /// cached, so the second look in `send` costs an `Arc` clone).
    pub(super) fn refuses(&mut self, message: &FrontendMessage<'_>, server: &ServerConn) -> bool {
        let standard = self.state.standard_strings(&server.params);
        let (analysis, sql) = match message {
            FrontendMessage::Query { sql } => (self.memo.analyze(self.analyzer, sql), *sql),
            FrontendMessage::Parse(p) => (analyze_parse(self.analyzer, p), p.query),
            _ => return false,
        };
        let analysis = self.analyzer.for_session(analysis, sql, standard);
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
    pub(super) fn note_batch(&mut self, tag: u8) {
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
    pub(super) fn send(
        &mut self,
        server: &mut ServerConn,
        out: &mut BytesMut,
        run: &[u8],
        frame: &[u8],
        message: FrontendMessage<'_>,
    ) -> Sent {
        let (tag, body) = (frame[0], &frame[5..]);
        let standard = self.state.standard_strings(&server.params);
        let analyzer = self.analyzer;
        // A simple query is analysed once here, for every use below.
        let query = match message {
            FrontendMessage::Query { sql } => {
                Some(analyzer.for_session(self.memo.analyze(analyzer, sql), sql, standard))
            }
            _ => None,
        };
        if let Some(analysis) = &query {
            if let Some(sent) = self.set_role(server, out, run, analysis) {
                return sent;
            }
        }
        if let Some((senders, told)) = self.notifier.filter(|(s, _)| s.wanted()) {
            let notifies = match (&message, &query) {
                (_, Some(analysis)) => analysis.may_notify(),
                (FrontendMessage::Parse(p), _) => analyze_parse(analyzer, p).may_notify(),
                (FrontendMessage::Bind(b), _) => match self.statements.as_deref() {
                    Some(statements) => statements.get(b.statement).is_none_or(|s| s.analysis.may_notify()),
                    None => true,
                },
                _ => false,
            };
            if notifies {
                senders.record(&server.peer, server.key.process_id, told);
            }
        }
        let Some(statements) = self.statements.as_deref_mut() else {
            // Prepared statements pass through unchanged; only their effects are followed.
            server.tracker.client_sent(tag, body);
            match (message, query) {
                (_, Some(analysis)) => self.observe(&analysis, Via::Query),
                (FrontendMessage::Parse(p), _) => {
                    let analysis = analyzer.for_session(analyze_parse(analyzer, &p), p.query, standard);
                    self.observe(&analysis, Via::Extended)
                }
                _ => {}
            }
            return Sent::AsIs;
        };
        let server = ServerSide { tracker: &mut server.tracker, statements: &mut server.statements };
        let mut fwd = Forward { client: statements, server, out, analyzer: self.analyzer };
        match (message, query) {
            (FrontendMessage::Parse(p), _) => {
                let (sent, stmt) = fwd.parse(run, &p);
                if let Some(stmt) = stmt {
                    // The statement is shared by text; how this session reads it is its own.
                    let analysis = analyzer.for_session(stmt.analysis.clone(), &stmt.query, standard);
                    if changes_schema(&analysis) {
                        fwd.server.statements.schema_change_sent();
                    }
                    self.observe(&analysis, Via::Extended);
                }
                sent
            }
            (FrontendMessage::Bind(b), _) => {
                // A statement parsed in an earlier transaction runs again: what it may do to
                // the session counts again (the Arc is cloned only for such statements).
                let rerun = fwd.client.get(b.statement).and_then(|s| {
                    let a = &s.analysis;
                    if !standard && s.query.contains(&b'\\') {
                        return Some(analyzer.for_session(a.clone(), &s.query, standard));
                    }
                    (a.may_have_hidden_effects() || a.has_session_effects() || changes_schema(a))
                        .then(|| a.clone())
                });
                let sent = fwd.bind(run, frame, b.statement);
                if let Some(analysis) = rerun {
                    if changes_schema(&analysis) {
                        fwd.server.statements.schema_change_sent();
                    }
                    // `DISCARD ALL` through the extended protocol (JDBC sends every statement
                    // so; psycopg and asyncpg prepare it) drops the server's statements as a
                    // simple query does; unrecorded, the next client of this server would
                    // bind a statement the server no longer has.
                    if forgets_statements(&analysis) {
                        fwd.forget_all();
                    }
                    self.observe(&analysis, Via::Extended);
                }
                sent
            }
            (FrontendMessage::Describe { target: Target::Statement, name }, _) => {
                fwd.describe_statement(run, frame, name)
            }
            (FrontendMessage::Close { target: Target::Statement, name }, _) => fwd.close_statement(run, name),
            (FrontendMessage::Query { sql }, Some(analysis)) => {
                fwd.query();
                if changes_schema(&analysis) {
                    fwd.server.statements.schema_change_sent();
                }
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
                        None => match text.and_then(|t| fwd.sql_names(run, t, &analysis)) {
                            Some(sent) => sent,
                            None => {
                                if forgets_statements(&analysis) {
                                    fwd.forget_all();
                                }
                                fwd.server.tracker.client_sent(tag, body);
                                Sent::AsIs
                            }
                        },
                    },
                };
                self.observe(&analysis, Via::Query);
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
pub(super) fn forgets_statements(analysis: &route::Analysis) -> bool {
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
