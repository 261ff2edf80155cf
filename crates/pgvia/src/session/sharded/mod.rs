//! A client of a sharded database: one session that holds a server on each shard its
//! transaction touches, sends each exchange (a simple query, or extended-protocol messages up
//! to a Sync) to the shards the planner (`crate::sharding`) names, and merges their replies
//! into one (`fanout.rs`). A transaction that wrote on several shards commits with two-phase
//! commit (`two_phase.rs`); an autocommit statement that writes on several shards runs as
//! such a transaction of its own.
//!
//! Servers are taken per transaction, whatever the pool mode: between transactions the
//! session holds none, and its settings are brought to the next ones it takes. The client's
//! prepared statements are the session's (`extended.rs`), registered as plain sessions'
//! are: a batch for one shard uses the copy its server keeps under pgvia's name, parsed
//! there on first use (`kept.rs`); a batch for several shards parses the statement unnamed
//! in front of each Bind.

mod batch_control;
mod by_name;
mod control;
mod copy;
mod doors;
mod extended;
mod fanout;
mod hand_over;
mod interrupt;
mod io;
mod kept;
mod key_move;
mod names;
mod portals;
mod subquery;
pub mod two_phase;
pub mod unique_id;

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use shard::{ShardId, ShardSet};
use wire::sqlstate::SqlState;
use wire::FrameDecoder;

use super::error::SessionError;
use super::state::Via;
use crate::app::App;
use crate::cancel::CancelKey;
use crate::config::ShardingRules;
use crate::net::ClientStream;
use crate::pool::{Checkout, PatronRef, Pool};
use crate::routing::PoolGroup;
use crate::sharding::{self, RouteError, SessionHints, StatementRoute, Target};
use fanout::Combine;

/// PostgreSQL's message for a statement sent inside a failed transaction.
const ABORTED: &str = "current transaction is aborted, commands ignored until end of transaction block";

/// Where the client's transaction is.
#[derive(Debug)]
enum Tx {
    /// No transaction: each exchange commits on its own.
    Idle,
    /// `BEGIN` was answered; shards join as statements reach them.
    Open {
        /// The client's `BEGIN` (a whole Query frame), sent first to each shard that joins.
        begin: Bytes,
        participants: ShardSet,
        /// Shards that ran a statement that writes.
        writers: ShardSet,
        /// A statement failed: everything up to ROLLBACK is refused, as PostgreSQL does.
        failed: bool,
        /// The savepoints in force (name, the client's `SAVEPOINT` as a Query frame): a shard
        /// that joins later gets them after its `BEGIN`, so `ROLLBACK TO` means the same on
        /// every shard.
        savepoints: Vec<(String, Bytes)>,
    },
}

/// A prepared statement of the client's.
struct ClientStatement {
    sql: Bytes,
    param_types: Vec<u32>,
    analysis: Arc<route::Analysis>,
    /// The statement as shard servers keep it (`kept.rs`), when the pool keeps statements.
    kept: Option<kept::Registered>,
}

pub struct ShardedSession<'a> {
    pub app: &'a App,
    pub client: &'a mut ClientStream,
    /// The first shard's pool: settings, statistics and names in logs.
    pub pool: Arc<Pool>,
    pub rules: ShardingRules,
    /// Per shard, in order: its servers' pools.
    pub groups: Vec<Arc<PoolGroup>>,
    pub cancel: CancelKey,
    pub decoder: FrameDecoder,
    pub shutdown: crate::clients::PhaseWatch,
    pub patron: PatronRef,
    /// The client's settings (startup and `SET`), brought to every server it is given, and
    /// the pins and read-backs of the shard whose marks are swapped in (`hand_over.rs`).
    /// Whatever sets the settings sets `search_path` from them too.
    state: crate::session::state::SessionState,
    /// Per shard: what the client's statements may have left on its server.
    marks: Vec<crate::session::state::Marks>,
    /// The pool's idle, idle-in-transaction and query time limits, as a plain session's.
    timers: crate::session::timeouts::Timers,
    /// A large message arriving is charged to `limits.max_buffered_message_bytes`, as a
    /// plain session's is (`backpressure.rs`).
    read_limits: crate::session::backpressure::ReadLimits,
    /// The schemas of the client's `search_path`, for schema-based sharding.
    search_path: Vec<String>,
    pub from_client: BytesMut,
    pub to_client: BytesMut,
    held: Vec<Option<Checkout>>,
    tx: Tx,
    statements: by_name::ByName<ClientStatement>,
    /// Registers the client's statements (`None` when the pool does not keep statements on
    /// its servers, as in session mode); its own name map stays empty.
    registrar: Option<crate::prepared::ClientStatements>,
    /// What the next query sent does to the statements its servers hold.
    note: kept::ServerNote,
    /// The client's SQL cursors (`doors.rs`).
    cursors: std::collections::HashMap<String, doors::Cursor>,
    /// Portals over several shards run in parts, their rows held (`portals.rs`).
    held_portals: portals::HeldPortals,
    /// Which shards hold each portal the client bound.
    portals: by_name::ByName<ShardSet>,
    /// Reused by every extended-protocol batch.
    buffers: extended::BatchBuffers,
    /// `SET pgvia.shard` / `SET pgvia.sharding_key`.
    hint_shard: Option<ShardId>,
    hint_key: Option<String>,
    /// Round robin among shards for statements any shard can answer.
    turn: usize,
    /// Running the statements of a multi-statement query one by one: their ReadyForQuery
    /// is written once, after the last.
    quiet: bool,
    /// The last `COPY ... FROM STDIN` split by key reached its data (the shards sent
    /// CopyInResponse): through the extended protocol its ReadyForQuery answers the client's
    /// Sync after CopyDone, as PostgreSQL ignores the one sent with the Execute during a COPY.
    copy_in_began: bool,
    /// The last statement run ended in an error (ends a multi-statement query).
    errored: bool,
    /// `KILL_CLIENT` or shutdown ended the client while an exchange waited: nothing more is
    /// answered, the session's FATAL is its last word.
    ending: bool,
    /// A cancel came while the client's statement waited for a server before its exchange
    /// (the collation a merge needs): the exchange answers it with 57014.
    cancel_waiting: bool,
    /// How many of the client's Parses the last exchange's servers accepted (`names.rs`).
    parses_answered: usize,
    /// How the database orders text, once asked (byte order under C/POSIX collations).
    text_order: Option<merge::TextOrder>,
    /// The last simple query's analysis, shared by shape with texts that differ only in
    /// their constants (so `... WHERE id = 42` is not parsed per query).
    memo: crate::session::memo::QueryMemo,
}

/// One statement of a multi-statement query or pipeline, run as an exchange of its own.
enum Part {
    /// A Query frame.
    Query(Bytes),
    /// Extended-protocol messages, with a Sync.
    Batch(Vec<Bytes>),
    /// An error of pgvia's own in a message's place (a refused Parse, `names.rs`).
    Error(Bytes),
}

/// What the client sent next.
enum Unit {
    Query(Bytes),
    /// Extended-protocol messages up to and including a Sync.
    Batch(Vec<Bytes>),
    Terminate,
}

impl<'a> ShardedSession<'a> {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        app: &'a App,
        client: &'a mut ClientStream,
        pool: Arc<Pool>,
        rules: ShardingRules,
        groups: Vec<Arc<PoolGroup>>,
        cancel: CancelKey,
        decoder: FrameDecoder,
        shutdown: crate::clients::PhaseWatch,
        patron: PatronRef,
        settings: Vec<(String, String)>,
        from_client: BytesMut,
    ) -> Self {
        let shards = groups.len();
        let registrar = pool.client_statements();
        let timers = crate::session::timeouts::Timers::new(&pool.settings);
        let limits = &app.config().limits;
        let read_limits = crate::session::backpressure::ReadLimits::with(
            app.admission.clone(),
            limits.client_backlog_bytes as usize,
            limits.max_buffered_message_bytes,
        );
        ShardedSession {
            app,
            client,
            pool,
            rules,
            groups,
            cancel,
            decoder,
            shutdown,
            patron,
            search_path: search_path_of(&settings),
            // The session's own statements are followed (`kept.rs`); a SQL PREPARE is the
            // server's and pins it.
            state: crate::session::state::SessionState::new(settings),
            marks: vec![Default::default(); shards],
            timers,
            read_limits,
            from_client,
            to_client: BytesMut::new(),
            held: (0..shards).map(|_| None).collect(),
            tx: Tx::Idle,
            registrar,
            note: kept::ServerNote::Nothing,
            statements: Default::default(),
            portals: Default::default(),
            cursors: Default::default(),
            held_portals: Default::default(),
            buffers: Default::default(),
            hint_shard: None,
            hint_key: None,
            turn: 0,
            memo: Default::default(),
            quiet: false,
            copy_in_began: false,
            errored: false,
            ending: false,
            cancel_waiting: false,
            parses_answered: 0,
            text_order: None,
        }
    }

    /// Serves the client until it leaves or fails. Returns why it ended, for the log; a
    /// last message for the client (a FATAL) is left in `out`.
    pub async fn run(&mut self, out: &mut BytesMut) -> String {
        let end = self.serve().await;
        self.cancel.slot.set(None);
        if self.ending {
            // Whatever path the kill was seen on, the shards stop the client's work before
            // their servers are reset.
            self.interrupt(ShardSet::all(self.held.len()));
        }
        self.release_all().await;
        match end {
            Ok(()) => "client closed the connection".to_owned(),
            Err(SessionError::ClientIo(e)) => format!("client connection closed: {e}"),
            Err(e) => {
                tracing::info!(pool = %self.pool.name, error = %e, "closing sharded client session");
                e.write_fatal(out);
                e.to_string()
            }
        }
    }

    async fn serve(&mut self) -> Result<(), SessionError> {
        loop {
            let unit = self.next_unit().await?;
            self.cancel_waiting = false;
            match unit {
                Unit::Terminate => return Ok(()),
                Unit::Query(frame) => {
                    // A simple Query destroys the unnamed statement and portal, whatever
                    // becomes of the query (PostgreSQL drops them before it parses the text).
                    self.statements.remove("");
                    self.portals.remove("");
                    self.held_portals.remove("");
                    self.simple(frame).await?
                }
                Unit::Batch(frames) => self.batch(frames).await?,
            }
            self.flush_client().await?;
            if self.ending {
                return Err(SessionError::Shutdown);
            }
        }
    }

    /// A client's Parse of `sql`, registered to be kept on shard servers.
    fn client_statement(
        &mut self,
        sql: Bytes,
        param_types: Vec<u32>,
        analysis: Arc<route::Analysis>,
    ) -> ClientStatement {
        let kept = kept::register(self.registrar.as_mut(), &sql, &param_types, &analysis);
        ClientStatement { sql, param_types, analysis, kept }
    }

    /// The session's routing settings for the planner.
    fn hints(&self) -> SessionHints<'_> {
        SessionHints {
            shard: self.hint_shard,
            sharding_key: self.hint_key.as_deref(),
            search_path: &self.search_path,
            explain: false,
        }
    }

    /// The shards one exchange goes to, from its statements' routes: every shard a statement
    /// needs; statements any shard can answer go to one (a shard already in the transaction
    /// if there is one). A mix that would answer an any-shard statement more than once, or
    /// a multi-row INSERT whose rows belong to different shards, is refused.
    fn targets(&mut self, routes: &[StatementRoute]) -> Result<ShardSet, String> {
        if routes.iter().any(|r| r.key_update) {
            // Updated in place, the row could end up on a shard its new key does not name;
            // `key_move.rs` moves rows only for an UPDATE that is a statement of its own.
            return Err(
                "an UPDATE that assigns the sharding key moves rows only when it is a statement of its own: send it separately"
                    .into(),
            );
        }
        let mut needed = ShardSet::EMPTY;
        let mut any: Option<ShardSet> = None;
        for r in routes {
            match r.target {
                Target::Shards(s) => needed = needed.union(s),
                Target::AnyOf(s) => any = Some(any.map_or(s, |a| a.intersection(s))),
                Target::NoRows => any = Some(any.unwrap_or(ShardSet::all(self.groups.len()))),
            }
            let rows: ShardSet = r.rows.iter().copied().collect();
            if rows.len() > 1 {
                return Err(format!(
                    "a multi-row INSERT whose rows belong to shards {rows} is not split yet: send one INSERT per shard"
                ));
            }
        }
        // A row written to a shard that is not its own would be a silent wrong answer.
        if needed.len() > 1
            && routes.iter().any(|r| {
                !r.rows.is_empty() && r.rows.iter().any(|&s| !needed.contains(s) || needed.len() > 1)
            })
        {
            return Err(
                "statements of this query write rows to different shards: send them one by one".into()
            );
        }
        match (needed.len(), any) {
            (0, Some(set)) => Ok(ShardSet::one(self.pick(set))),
            (0, None) => Ok(ShardSet::one(self.pick(ShardSet::all(self.groups.len())))),
            (1, _) => Ok(needed),
            (_, None) => Ok(needed),
            (_, Some(_)) => Err(
                "statements of this query go to different shards and one of them may be answered by any shard: send them separately"
                    .into(),
            ),
        }
    }

    /// One shard of `set`: one the transaction already holds, else the next in turn.
    fn pick(&mut self, set: ShardSet) -> ShardId {
        if let Some(s) = set.iter().find(|&s| self.held[s].is_some()) {
            return s;
        }
        let count = set.len();
        if count == 0 {
            return 0;
        }
        self.turn = self.turn.wrapping_add(1);
        set.iter().nth(self.turn % count).unwrap_or(0)
    }

    /// Inside a failed transaction, refuses the exchange as PostgreSQL does (25P02).
    fn refused_in_failed_transaction(&mut self) -> bool {
        let failed = matches!(self.tx, Tx::Open { failed: true, .. });
        if failed {
            self.refuse(SqlState::IN_FAILED_SQL_TRANSACTION.code(), ABORTED);
        }
        failed
    }

    /// Answers an exchange with an error of pgvia's own, and the ReadyForQuery after it.
    fn refuse(&mut self, code: &str, message: &str) {
        wire::build::ErrorFields::with_code(wire::build::Severity::Error, code, message)
            .write(&mut self.to_client);
        self.after_error();
    }

    /// As [`Self::refuse`], with the ErrorResponse already written.
    fn fail_with(&mut self, error: &[u8]) {
        self.to_client.extend_from_slice(error);
        self.after_error();
    }

    /// What follows an ErrorResponse pgvia wrote itself: the transaction fails, and the client
    /// is told the session is ready.
    fn after_error(&mut self) {
        self.errored = true;
        if let Tx::Open { failed, .. } = &mut self.tx {
            *failed = true;
        }
        self.ready();
    }

    fn refuse_route(&mut self, e: &RouteError) {
        self.refuse(e.sqlstate(), &e.to_string());
    }

    /// ReadyForQuery with the status of the client's transaction as pgvia keeps it.
    fn ready(&mut self) {
        if self.quiet || self.ending {
            return;
        }
        let status = match self.tx {
            Tx::Idle => b'I',
            Tx::Open { failed: true, .. } => b'E',
            Tx::Open { .. } => b'T',
        };
        wire::build::ready_for_query(&mut self.to_client, status);
    }

    /// A simple query: routed, then sent to its shards.
    async fn simple(&mut self, frame: Bytes) -> Result<(), SessionError> {
        let sql = frame.get(5..frame.len().saturating_sub(1)).unwrap_or_default();
        let (mut analysis, constants) = self.memo.analyze_shaped(&self.app.analyzer, sql);
        let mut shaped = constants.is_some();
        if shaped && analysis.len() > 1 {
            // Splitting the text into its statements needs the text's own locations.
            (analysis, shaped) = (self.app.analyzer.analyze_bytes(sql, &[]), false);
        }
        if analysis.len() > 1 && !analysis.is_conservative() && !self.quiet {
            return self.simple_multi(sql, &analysis).await;
        }
        if self.control(&analysis, &frame).await? || self.door(&analysis, &frame).await? {
            return Ok(());
        }
        if let Some(error) = crate::server::forward::reserved_name_error(&analysis) {
            // pgvia's statements on the servers are not the client's to run or drop.
            self.errored = true;
            self.to_client.extend_from_slice(&error);
            if let Tx::Open { failed, .. } = &mut self.tx {
                *failed = true;
            }
            self.ready();
            return Ok(());
        }
        if self.refused_in_failed_transaction() {
            return Ok(());
        }
        if self.deallocated(&analysis) {
            return Ok(());
        }
        let text = if shaped { std::str::from_utf8(sql).ok() } else { None };
        let params = match (text, self.memo.constants()) {
            (Some(text), Some(ranges)) => sharding::Params::Constants { sql: text, ranges },
            _ => sharding::Params::None,
        };
        let routes = sharding::plan(&self.rules, &analysis, &params, &self.hints());
        let routes = match routes {
            Ok(r) => r,
            Err(e) => {
                self.refuse_route(&e);
                return Ok(());
            }
        };
        self.count_fanouts(&routes, sql);
        if let Some(rule) = self.key_update_rule(&analysis) {
            // Its rows may move to any shard: judged as running on many.
            if let Err((code, message)) = self.check_placement(&analysis, sql, self.rules.shard_count) {
                self.refuse(code, &message);
                return Ok(());
            }
            return self.key_update_simple(frame, rule, &routes).await;
        }
        if let [route] = routes.as_slice() {
            let spread: ShardSet = route.rows.iter().copied().collect();
            if spread.len() > 1 && analysis.len() == 1 {
                // The split rewrites the text from its values: the text's own analysis.
                let own = if shaped { self.app.analyzer.analyze_bytes(sql, &[]) } else { analysis.clone() };
                if let Some(stmt) = own.statement(0) {
                    return self.split_insert(&stmt, &route.rows).await;
                }
            }
        }
        let targets = match self.targets(&routes) {
            Ok(t) => t,
            Err(why) => {
                self.refuse(SqlState::FEATURE_NOT_SUPPORTED.code(), &why);
                return Ok(());
            }
        };
        let writes = analysis.writes();
        let select = analysis.len() == 1
            && analysis.statement(0).is_some_and(|s| matches!(s.kind(), route::StatementKind::Select { .. }));
        if !(select && targets.len() > 1) {
            if let Err((code, message)) = self.check_placement(&analysis, sql, targets.len()) {
                self.refuse(code, &message);
                return Ok(());
            }
        }
        if select && targets.len() > 1 {
            match self.plan_merge(sql, targets, false).await {
                Ok(Some((shard_sql, merge))) => {
                    let mut query = BytesMut::new();
                    wire::build::query(&mut query, &shard_sql);
                    let combine = Combine::Merge(Box::new(merge));
                    self.observe(targets, &analysis, Via::Query);
                    return self.exchange(targets, io::Payload::Same(&query), combine, &[], writes).await;
                }
                Ok(None) => {}
                Err((code, message)) => {
                    self.refuse(&code, &message);
                    return Ok(());
                }
            }
        }
        let combine = if routes.iter().all(|r| r.replicated) { Combine::Replicated } else { Combine::Concat };
        if self.copy_from_stdin(&analysis).is_some() {
            // Not into a table sharded by key (`control` takes those): no row is split.
            return self.copy_in_whole(&frame, &[], targets, combine, false).await;
        }
        self.note = kept::ServerNote::of(&analysis);
        if self.note == kept::ServerNote::ForgetAll {
            // `DISCARD ALL` and `DEALLOCATE ALL` drop the client's protocol statements too.
            self.statements.clear();
        }
        let settings = analysis
            .statements()
            .any(|s| matches!(s.kind(), route::StatementKind::Set { .. } | route::StatementKind::Reset));
        self.observe(targets, &analysis, Via::Query);
        self.exchange(targets, io::Payload::Same(&frame), combine, &[], writes).await?;
        if !self.errored
            && analysis
                .statements()
                .any(|s| s.kind() == route::StatementKind::Discard(route::DiscardTarget::All))
        {
            // The shards closed their cursors; pgvia's held ones go too.
            self.cursors.clear();
            self.held_portals.clear();
        }
        if settings {
            self.learn_settings(targets).await?;
        }
        Ok(())
    }

    /// A query of several statements: each runs as an exchange of its own, so each goes to
    /// its own shards; together they form one implicit transaction (unless they hold their
    /// own BEGIN/COMMIT), committed on every shard they wrote, as PostgreSQL commits a
    /// multi-statement query at its end. The first error ends the query.
    async fn simple_multi(&mut self, sql: &[u8], analysis: &route::Analysis) -> Result<(), SessionError> {
        let controls = analysis.statements().any(|s| {
            matches!(
                s.kind(),
                route::StatementKind::Begin(_)
                    | route::StatementKind::Commit { .. }
                    | route::StatementKind::Rollback { .. }
            )
        });
        let parts: Vec<Bytes> = analysis
            .statements()
            .filter_map(|statement| {
                let text = sql.get(statement.location())?;
                let mut one = BytesMut::new();
                wire::build::frame(&mut one, wire::frontend::tag::QUERY, |b| wire::build::put_cstr(b, text));
                Some(one.freeze())
            })
            .collect();
        if controls {
            // Its own BEGIN/COMMIT decide; no implicit transaction around it.
            self.quiet = true;
            let mut result = Ok(());
            for part in parts {
                self.errored = false;
                result = Box::pin(self.simple(part)).await;
                if result.is_err() || self.errored {
                    break;
                }
            }
            self.quiet = false;
            result?;
            self.ready();
            return Ok(());
        }
        self.in_implicit_transaction(parts.into_iter().map(Part::Query).collect()).await
    }

    /// Runs `parts` one after another (`run` sends one), their ReadyForQuery held back, inside
    /// one transaction: pgvia's own when the client has none open, committed (two-phase when
    /// several shards wrote) after the last part, rolled back after a failed one. The first
    /// error ends the run. Then one ReadyForQuery.
    async fn in_implicit_transaction(&mut self, parts: Vec<Part>) -> Result<(), SessionError> {
        let implicit = matches!(self.tx, Tx::Idle);
        if implicit {
            let mut begin = BytesMut::new();
            wire::build::query(&mut begin, "BEGIN");
            self.tx = Tx::Open {
                begin: begin.freeze(),
                participants: ShardSet::EMPTY,
                writers: ShardSet::EMPTY,
                failed: false,
                savepoints: Vec::new(),
            };
        }
        let quiet = std::mem::replace(&mut self.quiet, true);
        let mut result = Ok(());
        let mut errored = false;
        for part in parts {
            self.errored = false;
            result = match part {
                Part::Query(frame) => Box::pin(self.simple(frame)).await,
                Part::Batch(frames) => Box::pin(self.batch(frames)).await,
                Part::Error(error) => {
                    self.fail_with(&error);
                    Ok(())
                }
            };
            if result.is_err() || self.errored {
                errored = true;
                break;
            }
        }
        result?;
        if implicit {
            let mark = self.to_client.len();
            if errored || matches!(self.tx, Tx::Open { failed: true, .. }) {
                self.rollback().await;
                self.to_client.truncate(mark);
            } else if matches!(self.tx, Tx::Open { .. }) {
                self.commit().await?;
                // The implicit commit's own tag is not the client's; an error from it is.
                let mut commit_tag = BytesMut::new();
                wire::build::command_complete(&mut commit_tag, "COMMIT");
                if self.to_client[mark..] == commit_tag[..] {
                    self.to_client.truncate(mark);
                }
            }
        }
        self.quiet = quiet;
        self.ready();
        Ok(())
    }

    /// A multi-row INSERT whose rows belong to several shards: one INSERT per shard with its
    /// rows, together atomic; refused when its text cannot be rebuilt (`sharding::split`).
    async fn split_insert(
        &mut self,
        stmt: &route::Statement<'_>,
        rows: &[ShardId],
    ) -> Result<(), SessionError> {
        let Some(parts) = sharding::split::split_insert(stmt, rows) else {
            self.refuse(
                SqlState::FEATURE_NOT_SUPPORTED.code(),
                "a multi-row INSERT whose rows belong to different shards can be split only when its values are constants, parameters, NULL or DEFAULT, without ON CONFLICT or RETURNING: send one INSERT per shard",
            );
            return Ok(());
        };
        let frames: Vec<(ShardId, Bytes)> = parts
            .into_iter()
            .map(|(shard, sql)| {
                let mut q = BytesMut::new();
                wire::build::query(&mut q, &sql);
                (shard, q.freeze())
            })
            .collect();
        let targets: ShardSet = frames.iter().map(|(s, _)| *s).collect();
        self.exchange(targets, io::Payload::PerShard(&frames), Combine::Concat, &[], true).await
    }

    /// A SELECT that several shards answer: when its rows need merging (ORDER BY, LIMIT,
    /// aggregates, GROUP BY, DISTINCT), returns the query the shards run instead and the
    /// merge for the exchange; `None` when concatenating their rows is the answer.
    async fn plan_merge(
        &mut self,
        sql: &[u8],
        targets: ShardSet,
        drop_description: bool,
    ) -> Result<Option<(String, fanout::Merge)>, (String, String)> {
        let text = std::str::from_utf8(sql).map_err(|_| {
            ("0A000".to_owned(), "a cross-shard query must be valid UTF-8 to be merged".to_owned())
        })?;
        let placement = sharding::merge_placement(&self.rules);
        let refused = |e: merge::MergeError| (e.sqlstate().to_owned(), e.to_string());
        let (plan, substituted) = match merge::MergePlan::for_select_placed(text, &placement) {
            Ok(plan) => (plan, false),
            // A CTE or subquery that would run per shard may be computed first (`subquery.rs`).
            Err(e) if e.sqlstate() == "0A000" => (self.compute_first(text, targets).await?, true),
            Err(e) => return Err(refused(e)),
        };
        // Concatenation is the answer, but of the substituted query, not of the client's.
        if plan.is_plain() && !substituted {
            return Ok(None);
        }
        let text_order = self.text_order(targets.first().unwrap_or(0)).await;
        let options = merge::MergeOptions {
            memory_budget: self.app.config().limits.merge_memory_budget as usize,
            text_order,
        };
        let mut merger = merge::Merger::new(&plan, targets.len(), options);
        if let Some(store) = self.app.spill.store(&self.app.config().limits) {
            merger.set_spill(Box::new(store));
        }
        Ok(Some((plan.shard_sql().to_owned(), fanout::Merge::new(merger, targets.len(), drop_description))))
    }

    /// Whether what the shards compute from their own rows is the statement's answer
    /// (`sharding::prove_placement`); the simple and extended paths both ask here.
    fn check_placement(
        &self,
        analysis: &route::Analysis,
        sql: &[u8],
        shards: usize,
    ) -> Result<(), (&'static str, String)> {
        let session = self.hints();
        if session.shard.is_some() || session.sharding_key.is_some() {
            // `SET pgvia.shard` / `pgvia.sharding_key`: the client named the shard.
            return Ok(());
        }
        sharding::prove_placement(&self.rules, analysis, sql, shards)
            .map_err(|e| (e.sqlstate(), e.to_string()))
    }

    /// Whether the database's collation orders text byte-wise (`C`, `POSIX`, `C.UTF-8`),
    /// so merged text order is PostgreSQL's; asked of a shard once per session.
    async fn text_order(&mut self, shard: ShardId) -> merge::TextOrder {
        if let Some(order) = self.text_order {
            return order;
        }
        let timeout = self.app.config().general.server_reset_timeout;
        let mut order = merge::TextOrder::Refuse;
        let taken = self.take_servers(ShardSet::one(shard), false).await;
        if matches!(taken, Ok(false)) {
            // Not asked: the statement is cancelled, and the next one asks.
            self.cancel_waiting = true;
            return order;
        }
        if taken.is_ok() {
            if let Some(c) = self.held[shard].as_mut() {
                let sql = "SELECT datcollate FROM pg_catalog.pg_database WHERE datname = current_database()";
                if let Ok(rows) = c.conn().query_rows(sql, timeout).await {
                    let collate = rows
                        .into_iter()
                        .next()
                        .and_then(|r| r.into_iter().next().flatten())
                        .unwrap_or_default();
                    if matches!(collate.to_ascii_lowercase().as_str(), "c" | "posix" | "c.utf-8" | "c.utf8") {
                        order = merge::TextOrder::Bytes;
                    }
                }
            }
        }
        self.text_order = Some(order);
        order
    }

    /// Counts a statement that went to every shard for want of a key (`SHOW SHARD_FANOUTS`).
    fn count_fanouts(&self, routes: &[StatementRoute], sql: &[u8]) {
        if routes.iter().any(|r| r.missing_key) {
            let database =
                self.pool.key.database.rsplit_once(crate::config::SHARD_MARK).map_or("", |(d, _)| d);
            self.app.fanouts.count(database, sql);
        }
    }
}

/// The schemas of `search_path` among `settings`.
fn search_path_of(settings: &[(String, String)]) -> Vec<String> {
    settings
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("search_path"))
        .map(|(_, v)| shard::parse_search_path(v))
        .unwrap_or_default()
}
