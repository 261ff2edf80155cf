//! Results handed out in parts or in another form: SQL cursors (`DECLARE`, `FETCH`/`MOVE`,
//! `CLOSE`) and `COPY ... TO STDOUT` on a sharded database.
//!
//! A cursor whose query is on one shard is that shard's own cursor: FETCH, MOVE and CLOSE go
//! to that shard. A cursor over several shards runs its query through the merge once, at
//! DECLARE, and pgvia holds the merged rows (at most `limits.merge_memory_budget` bytes; past
//! it the DECLARE is refused) and answers FETCH/MOVE from them with PostgreSQL's position
//! rules (`sharding::doors::Position`). A `COPY ... TO` over several shards whose output one
//! PostgreSQL orders, heads or computes (ORDER BY, LIMIT, aggregates, DISTINCT, HEADER) is
//! the merged query's rows written as COPY text or CSV; a plain one is the shards' outputs
//! one after another, as before. Both are answered in the simple query protocol; the
//! extended protocol refuses what would need pgvia's rows (`extended.rs`).

use bytes::{Bytes, BytesMut};
use shard::{ShardId, ShardSet};
use wire::backend::{tag, BackendMessage};
use wire::sqlstate::SqlState;

use super::fanout::Combine;
use super::io::Payload;
use super::{ShardedSession, Tx};
use crate::session::error::SessionError;
use crate::sharding::doors::{self as rules, CopyFormat, CopyOut, Position};
use crate::sharding::{self, Target};

/// A cursor the client declared.
pub(super) struct Cursor {
    place: Place,
    hold: bool,
    /// Declared in the transaction now open: a ROLLBACK drops it even WITH HOLD.
    fresh: bool,
    /// How many savepoints were in force at its DECLARE: a ROLLBACK TO one of them, or to
    /// an earlier one, drops it, as PostgreSQL drops the portals opened since.
    depth: usize,
}

enum Place {
    /// The shard's own cursor (its query is on that shard alone).
    Shard(ShardId),
    Held(Box<Held>),
}

/// A cursor over several shards: the merged rows, held by pgvia.
struct Held {
    description: Bytes,
    rows: Vec<Bytes>,
    at: Position,
    no_scroll: bool,
}

/// A merged result held back from the client.
struct HeldResult {
    description: Bytes,
    rows: Vec<Bytes>,
}

/// An error for the client: an ErrorResponse frame.
type ErrorFrame = Bytes;

pub(super) fn error_frame(code: &str, message: &str) -> ErrorFrame {
    let mut b = BytesMut::new();
    wire::build::ErrorFields::with_code(wire::build::Severity::Error, code, message).write(&mut b);
    b.freeze()
}

fn no_cursor(name: &str) -> ErrorFrame {
    error_frame("34000", &format!("cursor \"{name}\" does not exist"))
}

/// Whether a statement of `kind` needs the session's cursors (the extended protocol refuses
/// them; the simple one answers them in [`ShardedSession::door`]).
pub(super) fn is_cursor_statement(kind: route::StatementKind) -> bool {
    matches!(
        kind,
        route::StatementKind::DeclareCursor { .. }
            | route::StatementKind::Fetch
            | route::StatementKind::CloseCursor
    )
}

/// What the extended protocol does with a statement bound to `set` that needs the session.
pub(super) enum ExtendedDoor {
    Refuse(String),
    /// A `COPY ... TO` over several shards whose rows pgvia merges and writes.
    Copy(CopyOut),
}

/// Cursor statements are the session's, answered as simple queries (their rows are held as
/// text; a Bind may ask for binary); a `COPY ... TO` over several shards whose rows need
/// merging is written by pgvia, as for a simple query. `None` for everything else (one match
/// on the kind).
pub(super) fn extended_door(
    analysis: &route::Analysis,
    sql: &[u8],
    set: ShardSet,
    rules: &crate::config::ShardingRules,
) -> Option<ExtendedDoor> {
    let kind = analysis.statement(0).filter(|_| analysis.len() == 1)?.kind();
    if is_cursor_statement(kind) {
        return Some(ExtendedDoor::Refuse(
            "on a sharded database, send DECLARE, FETCH, MOVE and CLOSE as simple queries".to_owned(),
        ));
    }
    if !matches!(kind, route::StatementKind::Copy { direction: route::CopyDirection::To, stdio: true })
        || set.len() < 2
    {
        return None;
    }
    match copy_needs_merge(std::str::from_utf8(sql).unwrap_or_default(), rules) {
        Ok(None) => None,
        Ok(Some(copy)) => Some(ExtendedDoor::Copy(copy)),
        Err(why) => Some(ExtendedDoor::Refuse(why)),
    }
}

/// Whether `COPY ... TO` text `sql` over several shards needs pgvia to write its rows (its
/// order, header, limit or aggregates are one PostgreSQL's), or may be the shards' outputs
/// one after another. One decision for both protocols.
pub(super) fn copy_needs_merge(
    sql: &str,
    rules: &crate::config::ShardingRules,
) -> Result<Option<CopyOut>, String> {
    let copy = match rules::copy_out(sql) {
        Ok(Some(c)) => c,
        Ok(None) => return Ok(None),
        Err(e) => return Err(format!("COPY ... TO over several shards: {}", e.0)),
    };
    let placement = sharding::merge_placement(rules);
    let plain = merge::MergePlan::for_select_placed(&copy.query, &placement).is_ok_and(|p| p.is_plain());
    if plain && !copy.header {
        return Ok(None);
    }
    if copy.format == CopyFormat::Binary {
        return Err(
            "COPY ... TO with FORMAT binary of a query over several shards that needs merging is not supported: use text or CSV"
                .into(),
        );
    }
    Ok(Some(copy))
}

impl ShardedSession<'_> {
    /// A `DECLARE`, `FETCH`/`MOVE`, `CLOSE` or `COPY ... TO STDOUT` simple query: answered
    /// here when it needs the session (`true`), else routed as any statement.
    pub(super) async fn door(
        &mut self,
        analysis: &route::Analysis,
        frame: &Bytes,
    ) -> Result<bool, SessionError> {
        if analysis.is_conservative() || analysis.len() != 1 {
            return Ok(false);
        }
        let Some(statement) = analysis.statement(0) else { return Ok(false) };
        let door = is_cursor_statement(statement.kind())
            || matches!(
                statement.kind(),
                route::StatementKind::Copy { direction: route::CopyDirection::To, stdio: true }
            );
        if !door || matches!(self.tx, Tx::Open { failed: true, .. }) {
            return Ok(false);
        }
        let sql = frame.get(5..frame.len().saturating_sub(1)).unwrap_or_default();
        let Ok(text) = std::str::from_utf8(sql) else { return Ok(false) };
        let name = statement.name().unwrap_or_default().to_owned();
        match statement.kind() {
            route::StatementKind::DeclareCursor { hold } => {
                self.declare(analysis, frame, text, &name, hold).await
            }
            route::StatementKind::Fetch => self.fetch(frame, text, &name).await,
            route::StatementKind::CloseCursor => self.close(analysis, frame, statement.name()).await,
            route::StatementKind::Copy { direction: route::CopyDirection::To, stdio: true } => {
                self.copy_to(analysis, text).await
            }
            _ => Ok(false),
        }
    }

    /// The shards `analysis`'s one statement reads, or the refusal already written.
    fn door_targets(&mut self, analysis: &route::Analysis) -> Option<ShardSet> {
        let routes = match sharding::plan(&self.rules, analysis, &sharding::Params::None, &self.hints()) {
            Ok(r) => r,
            Err(e) => {
                self.refuse_route(&e);
                return None;
            }
        };
        if routes.iter().any(|r| matches!(r.target, Target::NoRows)) {
            return Some(ShardSet::one(self.pick(ShardSet::all(self.groups.len()))));
        }
        match self.targets(&routes) {
            Ok(t) => Some(t),
            Err(why) => {
                self.refuse(SqlState::FEATURE_NOT_SUPPORTED.code(), &why);
                None
            }
        }
    }

    async fn declare(
        &mut self,
        analysis: &route::Analysis,
        frame: &Bytes,
        text: &str,
        name: &str,
        hold: bool,
    ) -> Result<bool, SessionError> {
        if self.cursors.contains_key(name) {
            let message = format!("cursor \"{name}\" already exists");
            self.refuse("42P03", &message);
            return Ok(true);
        }
        if !hold && matches!(self.tx, Tx::Idle) {
            self.refuse("25P01", "DECLARE CURSOR can only be used in transaction blocks");
            return Ok(true);
        }
        let Some(targets) = self.door_targets(analysis) else { return Ok(true) };
        let Some(declare) = rules::declare(text) else {
            self.refuse(
                SqlState::FEATURE_NOT_SUPPORTED.code(),
                "a DECLARE pgvia cannot read on a sharded database",
            );
            return Ok(true);
        };
        if targets.len() == 1 {
            let query = declare.query.as_bytes();
            let inner = self.app.analyzer.analyze_bytes(query, &[]);
            if let Err((code, message)) = self.check_placement(&inner, query, 1) {
                self.refuse(code, &message);
                return Ok(true);
            }
            let shard = targets.first().unwrap_or(0);
            self.observe(targets, analysis, super::Via::Query);
            self.exchange(targets, Payload::Same(frame), Combine::Concat, &[], false).await?;
            if !self.errored {
                let cursor = self.new_cursor(Place::Shard(shard), hold);
                self.cursors.insert(name.to_owned(), cursor);
            }
            return Ok(true);
        }
        if declare.binary {
            self.refuse(
                SqlState::FEATURE_NOT_SUPPORTED.code(),
                "a BINARY cursor over several shards is not supported: declare it without BINARY",
            );
            return Ok(true);
        }
        let result = self.run_held(&declare.query, targets).await;
        self.give_back_if_idle().await;
        match result {
            Ok(held) => {
                let held = Held {
                    description: held.description,
                    rows: held.rows,
                    at: Position::default(),
                    no_scroll: declare.no_scroll,
                };
                let cursor = self.new_cursor(Place::Held(Box::new(held)), hold);
                self.cursors.insert(name.to_owned(), cursor);
                wire::build::command_complete(&mut self.to_client, "DECLARE CURSOR");
                self.ready();
            }
            Err(error) => self.fail_with(&error),
        }
        Ok(true)
    }

    async fn fetch(&mut self, frame: &Bytes, text: &str, name: &str) -> Result<bool, SessionError> {
        let shard = match self.cursors.get(name).map(|c| &c.place) {
            None => {
                self.fail_with(&no_cursor(name));
                return Ok(true);
            }
            Some(Place::Shard(s)) => Some(*s),
            Some(Place::Held(_)) => None,
        };
        if let Some(shard) = shard {
            let targets = ShardSet::one(shard);
            self.exchange(targets, Payload::Same(frame), Combine::Concat, &[], false).await?;
            return Ok(true);
        }
        let Some(f) = rules::fetch(text) else {
            self.refuse(
                SqlState::FEATURE_NOT_SUPPORTED.code(),
                "a FETCH pgvia cannot read on a sharded database",
            );
            return Ok(true);
        };
        let Some(Place::Held(held)) = self.cursors.get_mut(name).map(|c| &mut c.place) else {
            return Ok(true);
        };
        let mut picked = Vec::new();
        let moved = held.at.run(f, held.rows.len() as u64, held.no_scroll, &mut picked);
        let Ok(count) = moved else {
            wire::build::ErrorFields::with_code(
                wire::build::Severity::Error,
                rules::FORWARD_ONLY_CODE,
                rules::FORWARD_ONLY,
            )
            .with_hint(rules::FORWARD_ONLY_HINT)
            .write(&mut self.to_client);
            self.after_error();
            return Ok(true);
        };
        if f.is_move {
            wire::build::command_complete(&mut self.to_client, &format!("MOVE {count}"));
        } else {
            self.to_client.extend_from_slice(&held.description);
            for i in picked {
                if let Some(row) = held.rows.get(i as usize) {
                    self.to_client.extend_from_slice(row);
                }
            }
            wire::build::command_complete(&mut self.to_client, &format!("FETCH {count}"));
        }
        self.ready();
        Ok(true)
    }

    async fn close(
        &mut self,
        analysis: &route::Analysis,
        frame: &Bytes,
        name: Option<&str>,
    ) -> Result<bool, SessionError> {
        let shards: ShardSet = match name {
            Some(name) => match self.cursors.remove(name).map(|c| c.place) {
                None => {
                    self.fail_with(&no_cursor(name));
                    return Ok(true);
                }
                Some(Place::Held(_)) => ShardSet::EMPTY,
                Some(Place::Shard(s)) => ShardSet::one(s),
            },
            None => {
                let shards = self.cursors.values().filter_map(|c| match c.place {
                    Place::Shard(s) => Some(s),
                    Place::Held(_) => None,
                });
                let set = shards.collect();
                self.cursors.clear();
                set
            }
        };
        if shards.is_empty() {
            let done = if name.is_some() { "CLOSE CURSOR" } else { "CLOSE CURSOR ALL" };
            wire::build::command_complete(&mut self.to_client, done);
            self.ready();
            return Ok(true);
        }
        // A WITH HOLD cursor's shard server is let go once no such cursor is left there.
        self.observe(shards, analysis, super::Via::Query);
        self.exchange(shards, Payload::Same(frame), Combine::Concat, &[], false).await?;
        Ok(true)
    }

    /// The cursors that outlive a transaction's end: on COMMIT the `WITH HOLD` ones, on
    /// ROLLBACK those of them declared before it.
    pub(super) fn cursors_at_end(&mut self, committed: bool) {
        // Portals never outlive their transaction.
        self.held_portals.clear();
        self.cursors.retain(|_, c| {
            let kept = c.hold && (committed || !c.fresh);
            c.fresh = false;
            c.depth = 0;
            kept
        });
    }

    fn new_cursor(&self, place: Place, hold: bool) -> Cursor {
        let (fresh, depth) = match &self.tx {
            Tx::Open { savepoints, .. } => (true, savepoints.len()),
            Tx::Idle => (false, 0),
        };
        Cursor { place, hold, fresh, depth }
    }

    /// After `ROLLBACK TO` the savepoint that made `depth` savepoints: the cursors declared
    /// since are gone; after `RELEASE` down to `depth`, those declared since belong to it.
    pub(super) fn cursors_at_savepoint(&mut self, depth: usize, rolled_back: bool) {
        self.cursors.retain(|_, c| !(rolled_back && c.fresh && c.depth >= depth));
        for c in self.cursors.values_mut() {
            c.depth = c.depth.min(depth);
        }
    }

    /// `COPY ... TO STDOUT` over several shards that needs merging: the merged rows as COPY
    /// output. Others (one shard, or plain rows without a header) are routed as before.
    async fn copy_to(&mut self, analysis: &route::Analysis, text: &str) -> Result<bool, SessionError> {
        let copy = match copy_needs_merge(text, &self.rules) {
            Ok(Some(c)) => c,
            Ok(None) => return Ok(false),
            Err(why) => {
                if self.door_targets_quiet(analysis).is_some_and(|t| t.len() > 1) {
                    self.refuse(SqlState::FEATURE_NOT_SUPPORTED.code(), &why);
                    return Ok(true);
                }
                return Ok(false);
            }
        };
        let Some(targets) = self.door_targets_quiet(analysis) else { return Ok(false) };
        if targets.len() < 2 {
            return Ok(false);
        }
        let result = self.run_held(&copy.query, targets).await;
        self.give_back_if_idle().await;
        let held = match result {
            Ok(h) => h,
            Err(error) => {
                self.fail_with(&error);
                return Ok(true);
            }
        };
        match write_copy(&copy, &held, &mut self.to_client) {
            Ok(()) => self.ready(),
            Err(error) => self.fail_with(&error),
        }
        Ok(true)
    }

    /// A batch that binds and runs a `COPY ... TO` pgvia writes (`Bind`, maybe `Describe`,
    /// `Execute`, `Sync`, as drivers send it after preparing the statement): answered as
    /// PostgreSQL answers it. Other batches around such a COPY are refused.
    pub(super) async fn copy_to_batch(
        &mut self,
        frames: &[Bytes],
        at: usize,
        copy: CopyOut,
        targets: ShardSet,
    ) -> Result<(), SessionError> {
        let rest: Vec<u8> = frames.iter().skip(at + 1).map(|f| f[0]).collect();
        let described = matches!(rest.as_slice(), [b'D', b'E', b'S']);
        if at != 0 || !(described || matches!(rest.as_slice(), [b'E', b'S'])) {
            self.refuse(
                SqlState::FEATURE_NOT_SUPPORTED.code(),
                "a COPY ... TO over several shards must be bound and run in a batch of its own (Bind, Describe, Execute, Sync)",
            );
            return Ok(());
        }
        let result = self.run_held(&copy.query, targets).await;
        self.give_back_if_idle().await;
        let held = match result {
            Ok(h) => h,
            Err(error) => {
                self.fail_with(&error);
                return Ok(());
            }
        };
        let mark = self.to_client.len();
        wire::build::frame(&mut self.to_client, tag::BIND_COMPLETE, |_| {});
        if described {
            wire::build::frame(&mut self.to_client, tag::NO_DATA, |_| {});
        }
        match write_copy(&copy, &held, &mut self.to_client) {
            Ok(()) => self.ready(),
            Err(error) => {
                self.to_client.truncate(mark);
                self.fail_with(&error);
            }
        }
        Ok(())
    }

    /// As [`Self::door_targets`], writing nothing: `None` leaves the statement to the
    /// general path, which refuses it in its own words.
    fn door_targets_quiet(&mut self, analysis: &route::Analysis) -> Option<ShardSet> {
        let routes = sharding::plan(&self.rules, analysis, &sharding::Params::None, &self.hints()).ok()?;
        self.targets(&routes).ok()
    }

    /// Runs `query` on `targets` through the merge (or concatenated, when its rows need no
    /// merging), its reply held back from the client: at most `limits.merge_memory_budget`
    /// bytes of it.
    async fn run_held(&mut self, query: &str, targets: ShardSet) -> Result<HeldResult, ErrorFrame> {
        let (sql, combine) = match self.plan_merge(query.as_bytes(), targets, false).await {
            Ok(Some((shard_sql, merge))) => (shard_sql, Combine::Merge(Box::new(merge))),
            Ok(None) => (query.to_owned(), Combine::Concat),
            Err((code, message)) => return Err(error_frame(&code, &message)),
        };
        for shard in targets.iter() {
            if let Err(e) = self.ensure_server(shard, false).await {
                return Err(error_frame(
                    SqlState::CONNECTION_FAILURE.code(),
                    &format!("cannot reach shard {shard}: {e}"),
                ));
            }
        }
        let limit = self.app.config().limits.merge_memory_budget as usize;
        let mut frame = BytesMut::new();
        wire::build::query(&mut frame, &sql);
        let (sent, reply) = self.exchange_held(targets, &frame, combine, &[]).await;
        let outcome = sent
            .map_err(|e| error_frame(SqlState::CONNECTION_FAILURE.code(), &format!("a shard failed: {e}")))?;
        self.note_outcome(targets, false, &outcome);
        if outcome.overflowed {
            return Err(error_frame(
                SqlState::OUT_OF_MEMORY.code(),
                &format!(
                    "a result over several shards held by pgvia (a cursor or COPY) is larger than limits.merge_memory_budget ({limit} bytes): narrow the query or raise the limit"
                ),
            ));
        }
        split_reply(reply)
    }
}

impl ShardedSession<'_> {
    /// Runs `payload` on `targets` with the reply held back from the client, at most
    /// `limits.merge_memory_budget` bytes of it (past them the outcome says it overflowed):
    /// the exchange's outcome and the reply, for the cursors, COPY and portals pgvia answers
    /// from rows it holds.
    pub(super) async fn exchange_held(
        &mut self,
        targets: ShardSet,
        payload: &[u8],
        combine: Combine,
        parse_drops: &[bool],
    ) -> (Result<super::io::Outcome, crate::server::ServerError>, Bytes) {
        let limit = self.app.config().limits.merge_memory_budget as usize;
        self.aim_cancels(targets);
        let mark = self.to_client.len();
        let sent = match self.launch(targets, Payload::Same(payload), combine, parse_drops, false).await {
            Ok(mut flight) => {
                flight.hold = true;
                flight.held_limit = Some(limit);
                match self.pump(&mut flight, false).await {
                    Ok(()) => flight.outcome(),
                    Err(e) => Err(e),
                }
            }
            Err(e) => Err(e),
        };
        (sent, self.to_client.split_off(mark).freeze())
    }
}

/// The RowDescription and DataRows of a held reply, or its ErrorResponse.
fn split_reply(reply: Bytes) -> Result<HeldResult, ErrorFrame> {
    let bad = || error_frame(SqlState::INTERNAL_ERROR.code(), "malformed merged reply");
    let mut description = Bytes::new();
    let mut rows = Vec::new();
    let mut at = 0;
    while at + 5 <= reply.len() {
        let len = u32::from_be_bytes([reply[at + 1], reply[at + 2], reply[at + 3], reply[at + 4]]) as usize;
        let end = at + 1 + len;
        let frame = reply.get(at..end).ok_or_else(bad)?;
        match frame[0] {
            tag::ROW_DESCRIPTION => description = reply.slice(at..end),
            tag::DATA_ROW => rows.push(reply.slice(at..end)),
            tag::ERROR_RESPONSE => return Err(reply.slice(at..end)),
            _ => {}
        }
        at = end;
    }
    Ok(HeldResult { description, rows })
}

/// Writes `held` as PostgreSQL's reply to `copy`: CopyOutResponse, one CopyData per line
/// (the header first), CopyDone, `COPY n`.
fn write_copy(copy: &CopyOut, held: &HeldResult, out: &mut BytesMut) -> Result<(), ErrorFrame> {
    let bad = || error_frame(SqlState::INTERNAL_ERROR.code(), "malformed merged reply");
    let body = held.description.get(5..).unwrap_or_default();
    let names: Vec<String> = match BackendMessage::parse_body(tag::ROW_DESCRIPTION, body)
        .map_err(|_| bad())?
    {
        BackendMessage::RowDescription(rd) => {
            rd.columns().map(|c| c.map(|c| c.name.to_owned())).collect::<Result<_, _>>().map_err(|_| bad())?
        }
        _ => return Err(bad()),
    };
    let force: Vec<bool> = names.iter().map(|n| copy.force_all || copy.force_quote.contains(n)).collect();
    if let Some(missing) = copy.force_quote.iter().find(|c| !names.contains(c)) {
        return Err(error_frame("42703", &format!("column \"{missing}\" does not exist")));
    }
    let mut start = BytesMut::new();
    wire::build::frame(&mut start, tag::COPY_OUT_RESPONSE, |b| {
        b.extend_from_slice(&[0]);
        b.extend_from_slice(&(names.len() as i16).to_be_bytes());
        for _ in &names {
            b.extend_from_slice(&0i16.to_be_bytes());
        }
    });
    let mut line = Vec::new();
    let data = |line: &[u8], out: &mut BytesMut| {
        wire::build::frame(out, tag::COPY_DATA, |b| b.extend_from_slice(line));
    };
    let mut lines = BytesMut::new();
    if copy.header {
        let header: Vec<Option<&[u8]>> = names.iter().map(|n| Some(n.as_bytes())).collect();
        copy.line(&header, &vec![false; names.len()], &mut line);
        data(&line, &mut lines);
    }
    for row in &held.rows {
        let body = row.get(5..).unwrap_or_default();
        let BackendMessage::DataRow(dr) =
            BackendMessage::parse_body(tag::DATA_ROW, body).map_err(|_| bad())?
        else {
            return Err(bad());
        };
        let values: Vec<Option<&[u8]>> = dr.values().collect::<Result<_, _>>().map_err(|_| bad())?;
        line.clear();
        copy.line(&values, &force, &mut line);
        data(&line, &mut lines);
    }
    out.extend_from_slice(&start);
    out.extend_from_slice(&lines);
    wire::build::frame(out, tag::COPY_DONE, |_| {});
    wire::build::command_complete(out, &format!("COPY {}", held.rows.len()));
    Ok(())
}
