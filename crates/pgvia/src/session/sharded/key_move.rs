//! An `UPDATE` that assigns a sharded table's key column, in the simple or the extended
//! protocol: the rows whose new key belongs to another shard move there, inside the client's
//! transaction (or an implicit one of pgvia's, committed with the statement), so the client
//! sees what one PostgreSQL holding every row would answer. The statements are written by
//! `sharding::key_move`; here they run:
//!
//! 1. the UPDATE with hidden `RETURNING` columns on every shard it reaches, replies held back;
//! 2. the hidden columns stripped from the client's reply (a RowDescription the client did not
//!    ask for dropped, or NoData in its place for a Describe);
//! 3. each row whose key names another shard deleted on its shard and inserted on its own
//!    (one exchange, every shard involved at once); an error there (a unique violation on the
//!    target, say) replaces the UPDATE's reply and fails the transaction, as PostgreSQL's
//!    UPDATE would have failed.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use route::{Access, StatementKind};
use shard::{ShardId, ShardSet};
use wire::backend::tag as be;
use wire::frontend::{tag as fe, FrontendMessage, Target as Which};
use wire::sqlstate::SqlState;

use super::fanout::Combine;
use super::io::Payload;
use super::names::Pending;
use super::{Part, ShardedSession, Tx};
use crate::config::TableRule;
use crate::session::error::SessionError;
use crate::sharding::key_move::{KeyMove, HIDDEN};
use crate::sharding::{self, Params, StatementRoute, Target};

/// A returned row's hidden columns.
struct Moved {
    shard: ShardId,
    /// `tableoid:ctid` of the new row version on `shard`.
    place: String,
    key: Option<Vec<u8>>,
    row: String,
}

/// One backend frame of a reply buffer: (tag, whole frame).
fn frames(buf: &[u8]) -> impl Iterator<Item = (u8, &[u8])> {
    let mut at = 0;
    std::iter::from_fn(move || {
        let head = buf.get(at..at + 5)?;
        let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
        let frame = buf.get(at..at + 1 + len)?;
        at += 1 + len;
        Some((head[0], frame))
    })
}

/// A DataRow's cells.
fn cells(frame: &[u8]) -> Option<Vec<Option<&[u8]>>> {
    let body = frame.get(5..)?;
    let count = i16::from_be_bytes([*body.first()?, *body.get(1)?]);
    let mut at = 2;
    let mut out = Vec::with_capacity(count.max(0) as usize);
    for _ in 0..count {
        let len = i32::from_be_bytes(body.get(at..at + 4)?.try_into().ok()?);
        at += 4;
        if len < 0 {
            out.push(None);
        } else {
            let len = len as usize;
            out.push(Some(body.get(at..at + len)?));
            at += len;
        }
    }
    Some(out)
}

fn data_row(out: &mut BytesMut, cells: &[Option<&[u8]>]) {
    wire::build::frame(out, be::DATA_ROW, |b| {
        b.put_i16(cells.len() as i16);
        for c in cells {
            wire::build::put_value(b, *c);
        }
    });
}

/// A RowDescription without its last `HIDDEN` fields.
fn strip_description(out: &mut BytesMut, frame: &[u8]) -> Option<()> {
    let body = frame.get(5..)?;
    let count = i16::from_be_bytes([*body.first()?, *body.get(1)?]);
    let keep = count.checked_sub(HIDDEN as i16).filter(|k| *k >= 0)?;
    let mut at = 2;
    for _ in 0..keep {
        let name_end = body.get(at..)?.iter().position(|&b| b == 0)?;
        // Name, NUL, then table oid (4), column (2), type (4), size (2), modifier (4), format (2).
        at += name_end + 1 + 18;
    }
    let fields = body.get(2..at)?;
    wire::build::frame(out, be::ROW_DESCRIPTION, |b| {
        b.put_i16(keep);
        b.put_slice(fields);
    });
    Some(())
}

fn text(cell: Option<&[u8]>) -> Option<String> {
    cell.map(|c| String::from_utf8_lossy(c).into_owned())
}

/// The client's reply from the shards' (hidden columns stripped) and the rows they returned.
/// `extended`: a RowDescription the client did not ask for becomes NoData (a Describe's
/// answer); in the simple protocol it is dropped.
fn strip_reply(reply: &[u8], client_returning: bool, extended: bool) -> Option<(BytesMut, Vec<Moved>)> {
    let mut out = BytesMut::with_capacity(reply.len());
    let mut moved = Vec::new();
    let mut after_parameters = false;
    for (tag, frame) in frames(reply) {
        match tag {
            // A Describe of the client's own statement (parsed as the client wrote it).
            be::ROW_DESCRIPTION if after_parameters => out.extend_from_slice(frame),
            be::ROW_DESCRIPTION if client_returning => strip_description(&mut out, frame)?,
            be::ROW_DESCRIPTION if extended => wire::build::frame(&mut out, be::NO_DATA, |_| {}),
            be::ROW_DESCRIPTION => {}
            be::DATA_ROW => {
                let row = cells(frame)?;
                let split = row.len().checked_sub(HIDDEN)?;
                let hidden = &row[split..];
                moved.push(Moved {
                    place: text(hidden[0])?,
                    key: hidden[1].map(<[u8]>::to_vec),
                    row: text(hidden[2])?,
                    shard: text(hidden[3])?.parse().ok()?,
                });
                if client_returning {
                    data_row(&mut out, &row[..split]);
                }
            }
            _ => out.extend_from_slice(frame),
        }
        after_parameters = tag == be::PARAMETER_DESCRIPTION;
    }
    Some((out, moved))
}

/// What the client gets when the move fails: the replies before the UPDATE's rows (parse and
/// bind completions, a Describe's answer) and the error, as PostgreSQL fails the UPDATE.
fn failed_reply(out: &mut BytesMut, client_reply: &[u8], move_reply: &[u8], extended: bool) {
    for (tag, frame) in frames(client_reply) {
        let drop =
            tag == be::DATA_ROW || tag == be::COMMAND_COMPLETE || (tag == be::ROW_DESCRIPTION && !extended);
        if !drop {
            out.extend_from_slice(frame);
        }
    }
    for (tag, frame) in frames(move_reply) {
        if tag == be::ERROR_RESPONSE || tag == be::NOTICE_RESPONSE {
            out.extend_from_slice(frame);
        }
    }
}

/// A Bind of the unnamed statement with the client's values; a per-column list of result
/// formats gets text for the hidden columns (a single format applies to them too, and text
/// in either format is the same bytes).
fn bind_for_move(out: &mut BytesMut, b: &wire::frontend::Bind<'_>) {
    wire::build::frame(out, fe::BIND, |m| {
        wire::build::put_cstr(m, b.portal.as_bytes());
        m.put_u8(0);
        let formats: Vec<i16> = b.param_formats.iter().collect();
        m.put_i16(formats.len() as i16);
        for f in formats {
            m.put_i16(f);
        }
        let values: Vec<Option<&[u8]>> = b.params.iter().collect();
        m.put_i16(values.len() as i16);
        for v in values {
            wire::build::put_value(m, v);
        }
        let results: Vec<i16> = b.result_formats.iter().collect();
        let extra = if results.len() > 1 { HIDDEN } else { 0 };
        m.put_i16((results.len() + extra) as i16);
        for f in results {
            m.put_i16(f);
        }
        for _ in 0..extra {
            m.put_i16(0);
        }
    });
}

impl ShardedSession<'_> {
    /// The sharded table whose key column this single UPDATE assigns, if it is one.
    pub(super) fn key_update_rule(&self, analysis: &route::Analysis) -> Option<TableRule> {
        if analysis.is_conservative() || analysis.len() != 1 {
            return None;
        }
        let stmt = analysis.statement(0)?;
        if !matches!(stmt.kind(), StatementKind::Update { .. }) {
            return None;
        }
        stmt.tables()
            .filter(|t| t.access != Access::Read)
            .find_map(|t| self.rules.table(t.schema, t.name))
            .filter(|rule| stmt.updated_columns().any(|c| c == rule.column))
            .cloned()
    }

    /// The shards an UPDATE runs on: every shard its routes name (one, when any would do).
    fn update_targets(&mut self, routes: &[StatementRoute]) -> ShardSet {
        let mut set = ShardSet::EMPTY;
        for r in routes {
            if let Target::Shards(s) = r.target {
                set = set.union(s);
            }
        }
        if set.is_empty() {
            set = ShardSet::one(self.pick(ShardSet::all(self.groups.len())));
        }
        set
    }

    /// A key-changing UPDATE sent as a simple query.
    pub(super) async fn key_update_simple(
        &mut self,
        frame: Bytes,
        rule: TableRule,
        routes: &[StatementRoute],
    ) -> Result<(), SessionError> {
        let sql = frame.get(5..frame.len().saturating_sub(1)).unwrap_or_default();
        let plan = match std::str::from_utf8(sql).map(|s| KeyMove::plan(s, &rule)) {
            Ok(Ok(p)) => p,
            Ok(Err(e)) => {
                self.refuse(SqlState::FEATURE_NOT_SUPPORTED.code(), &e.to_string());
                return Ok(());
            }
            Err(_) => {
                self.refuse("22021", "the query is not valid UTF-8");
                return Ok(());
            }
        };
        if matches!(self.tx, Tx::Idle) {
            // All or nothing: the UPDATE and its moves commit together.
            return Box::pin(self.in_implicit_transaction(vec![Part::Query(frame)])).await;
        }
        let targets = self.update_targets(routes);
        let payloads: Vec<(ShardId, Bytes)> = targets
            .iter()
            .map(|s| {
                let mut q = BytesMut::new();
                wire::build::query(&mut q, &plan.shard_sql(s));
                (s, q.freeze())
            })
            .collect();
        self.run_key_update(targets, &payloads, &[], &plan, &rule, false).await
    }

    /// A key-changing UPDATE sent through the extended protocol (its messages up to Sync,
    /// one Bind and its Execute).
    pub(super) async fn key_update_batch(
        &mut self,
        frames: Vec<Bytes>,
        rule: TableRule,
    ) -> Result<(), SessionError> {
        let unsupported = |s: &mut Self, why: &str| {
            let message = format!("UPDATE of the sharding key of table {}: {why}", rule.name);
            s.refuse(SqlState::FEATURE_NOT_SUPPORTED.code(), &message);
        };
        // The batch's Parses first, so its Bind finds its statement; their names are the
        // client's once the shards accept them (`names.rs`), so a second pass over the batch
        // (inside the implicit transaction below) does not find them taken.
        let mut pending = Pending::default();
        for f in &frames {
            match FrontendMessage::parse_body(f[0], &f[5..]) {
                Ok(FrontendMessage::Parse(p)) => {
                    let types: Vec<u32> = p.param_types.iter().collect();
                    let analysis = self.app.analyzer.analyze_bytes(p.query, &types);
                    let sql = Bytes::copy_from_slice(p.query);
                    let statement = self.client_statement(sql, types, analysis);
                    pending.parse(p.name, Some(statement));
                }
                Ok(
                    FrontendMessage::Bind(_)
                    | FrontendMessage::Describe { .. }
                    | FrontendMessage::Execute { .. },
                ) => {
                    pending.other();
                }
                _ => {}
            }
        }
        let binds: Vec<&Bytes> = frames.iter().filter(|f| f[0] == fe::BIND).collect();
        let Some(bind_frame) = binds.first().copied().filter(|_| binds.len() == 1) else {
            unsupported(self, "send one Bind and its Execute per Sync");
            return Ok(());
        };
        let Ok(FrontendMessage::Bind(b)) = FrontendMessage::parse_body(bind_frame[0], &bind_frame[5..])
        else {
            unsupported(self, "the Bind message does not parse");
            return Ok(());
        };
        let executed = frames.iter().any(|f| {
            matches!(FrontendMessage::parse_body(f[0], &f[5..]), Ok(FrontendMessage::Execute { portal, .. }) if portal == b.portal)
        });
        if !executed {
            unsupported(self, "send its Bind and Execute before one Sync");
            return Ok(());
        }
        let Some(stmt) = self.statement(&pending, b.statement) else {
            self.fail_with(&crate::prepared::no_such_statement(b.statement));
            return Ok(());
        };
        let (sql, types, analysis): (Bytes, Vec<u32>, Arc<route::Analysis>) =
            (stmt.sql.clone(), stmt.param_types.clone(), stmt.analysis.clone());
        let plan = match std::str::from_utf8(&sql).map(|s| KeyMove::plan(s, &rule)) {
            Ok(Ok(p)) => p,
            Ok(Err(e)) => {
                self.refuse(SqlState::FEATURE_NOT_SUPPORTED.code(), &e.to_string());
                return Ok(());
            }
            Err(_) => {
                self.refuse("22021", "the query is not valid UTF-8");
                return Ok(());
            }
        };
        let formats: Vec<i16> = b.param_formats.iter().collect();
        let values: Vec<Option<&[u8]>> = b.params.iter().collect();
        let params = Params::Bind { formats: &formats, values: &values };
        let routes = match sharding::plan(&self.rules, &analysis, &params, &self.hints()) {
            Ok(r) => r,
            Err(e) => {
                self.refuse_route(&e);
                return Ok(());
            }
        };
        if matches!(self.tx, Tx::Idle) {
            return Box::pin(self.in_implicit_transaction(vec![Part::Batch(frames)])).await;
        }
        let targets = self.update_targets(&routes);
        let mut parse_drops = Vec::new();
        let mut per_shard: Vec<(ShardId, BytesMut)> = targets.iter().map(|s| (s, BytesMut::new())).collect();
        for f in &frames {
            let Ok(message) = FrontendMessage::parse_body(f[0], &f[5..]) else { continue };
            match message {
                FrontendMessage::Parse(p) => {
                    let types: Vec<u32> = p.param_types.iter().collect();
                    for (_, out) in &mut per_shard {
                        super::extended::parse_frame(out, p.query, &types);
                    }
                    parse_drops.push(false);
                }
                FrontendMessage::Bind(b) => {
                    for (shard, out) in &mut per_shard {
                        super::extended::parse_frame(out, plan.shard_sql(*shard).as_bytes(), &types);
                        bind_for_move(out, &b);
                    }
                    parse_drops.push(true);
                }
                FrontendMessage::Describe { target: Which::Statement, name } => {
                    let Some(s) = self.statement(&pending, name) else { continue };
                    let (s_sql, s_types) = (s.sql.clone(), s.param_types.clone());
                    for (_, out) in &mut per_shard {
                        super::extended::parse_frame(out, &s_sql, &s_types);
                        wire::build::frame(out, fe::DESCRIBE, |m| m.put_slice(b"S\0"));
                    }
                    parse_drops.push(true);
                }
                FrontendMessage::Close { target: Which::Statement, name } => {
                    self.statements.remove(name);
                    pending.close(name);
                    for (_, out) in &mut per_shard {
                        wire::build::frame(out, fe::CLOSE, |m| m.put_slice(b"S\0"));
                    }
                }
                _ => {
                    for (_, out) in &mut per_shard {
                        out.extend_from_slice(f);
                    }
                }
            }
        }
        let payloads: Vec<(ShardId, Bytes)> = per_shard.into_iter().map(|(s, b)| (s, b.freeze())).collect();
        self.parses_answered = 0;
        let result = self.run_key_update(targets, &payloads, &parse_drops, &plan, &rule, true).await;
        self.settle_names(&mut pending);
        result
    }

    /// Runs the UPDATE (`payloads`, per shard) inside the open transaction, then moves the
    /// rows whose new key belongs elsewhere; writes the client's reply and ReadyForQuery.
    async fn run_key_update(
        &mut self,
        targets: ShardSet,
        payloads: &[(ShardId, Bytes)],
        parse_drops: &[bool],
        plan: &KeyMove,
        rule: &TableRule,
        extended: bool,
    ) -> Result<(), SessionError> {
        let Some(outcome) = self.held_exchange(targets, Payload::PerShard(payloads), parse_drops).await
        else {
            return Ok(());
        };
        self.parses_answered = outcome.client_parses;
        if outcome.failed {
            self.errored = true;
            self.ready();
            return Ok(());
        }
        let reply = self.to_client.split_off(outcome.reply_start);
        let Some((client_reply, rows)) = strip_reply(&reply, plan.client_returning, extended) else {
            self.refuse(
                SqlState::PROTOCOL_VIOLATION.code(),
                "a shard's reply to the key update could not be read",
            );
            return Ok(());
        };
        if rows.iter().any(|r| r.shard >= self.groups.len()) {
            self.refuse(
                SqlState::PROTOCOL_VIOLATION.code(),
                "a shard's reply to the key update named no shard of this database",
            );
            return Ok(());
        }
        let mut deletes: BTreeMap<ShardId, Vec<String>> = BTreeMap::new();
        let mut inserts: BTreeMap<ShardId, Vec<String>> = BTreeMap::new();
        for row in rows {
            let home = match KeyMove::home(rule, row.key.as_deref()) {
                Ok(h) => h,
                Err(why) => {
                    // As PostgreSQL reports a row that fits no partition.
                    let message = format!("{}.{}: {why}", rule.name, rule.column);
                    self.refuse("23514", &message);
                    return Ok(());
                }
            };
            if home != row.shard {
                deletes.entry(row.shard).or_default().push(row.place);
                inserts.entry(home).or_default().push(row.row);
            }
        }
        if deletes.is_empty() {
            self.to_client.extend_from_slice(&client_reply);
            self.errored = false;
            self.ready();
            return Ok(());
        }
        let Some(columns) = self.insertable_columns(plan, deletes.keys().copied().next().unwrap_or(0)).await
        else {
            return Ok(());
        };
        let movers: ShardSet = deletes.keys().chain(inserts.keys()).copied().collect();
        let payloads: Option<Vec<(ShardId, Bytes)>> = movers
            .iter()
            .map(|s| {
                // Both statements on every shard (one of them maybe empty): the fan-out
                // needs the shards' replies to have the same shape.
                let none = Vec::new();
                let mut sql = plan.delete_sql(deletes.get(&s).unwrap_or(&none))?;
                sql.push_str(&plan.insert_sql(inserts.get(&s).unwrap_or(&none), &columns));
                let mut q = BytesMut::new();
                wire::build::query(&mut q, &sql);
                Some((s, q.freeze()))
            })
            .collect::<Option<_>>();
        let Some(payloads) = payloads else {
            self.refuse(
                SqlState::PROTOCOL_VIOLATION.code(),
                "a shard returned a row place pgvia cannot read",
            );
            return Ok(());
        };
        tracing::debug!(table = %rule.name, rows = deletes.values().map(Vec::len).sum::<usize>(), "moving rows whose key changed");
        let Some(moved) = self.held_exchange(movers, Payload::PerShard(&payloads), &[]).await else {
            return Ok(());
        };
        let move_reply = self.to_client.split_off(moved.reply_start);
        if moved.failed {
            let mut out = BytesMut::new();
            failed_reply(&mut out, &client_reply, &move_reply, extended);
            self.to_client.extend_from_slice(&out);
            self.errored = true;
        } else {
            self.to_client.extend_from_slice(&client_reply);
            self.errored = false;
        }
        self.ready();
        Ok(())
    }

    /// The table's insertable columns, asked of `shard` (held, in the transaction). `None`
    /// when that failed: the client has the error and its transaction is failed.
    async fn insertable_columns(&mut self, plan: &KeyMove, shard: ShardId) -> Option<String> {
        let timeout = self.app.config().general.server_reset_timeout;
        let result = match self.held.get_mut(shard).and_then(Option::as_mut) {
            Some(c) => c.conn().query_rows(&plan.columns_sql(), timeout).await,
            None => Err(crate::server::ServerError::Desync("no server held for a shard of the key update")),
        };
        match result {
            Ok(rows) => {
                let columns = rows.into_iter().next().and_then(|r| r.into_iter().next().flatten());
                if columns.is_none() {
                    self.refuse("XX000", "the table to move rows of lists no insertable columns");
                }
                columns
            }
            Err(crate::server::ServerError::Query { code, message }) => {
                self.refuse(&code, &message);
                None
            }
            Err(e) => {
                self.shard_failed(shard, &e).await;
                None
            }
        }
    }

    /// One exchange inside the open transaction with its replies held in `to_client` for the
    /// caller to rewrite; the shards are writers of the transaction. `None` when a shard
    /// failed (the client has its 08006 and ReadyForQuery).
    async fn held_exchange(
        &mut self,
        targets: ShardSet,
        payload: Payload<'_>,
        parse_drops: &[bool],
    ) -> Option<super::io::Outcome> {
        for shard in targets.iter() {
            if let Err(e) = self.ensure_server(shard, true).await {
                self.shard_failed(shard, &e).await;
                return None;
            }
        }
        self.aim_cancels(targets);
        let sent = match self.launch(targets, payload, Combine::Concat, parse_drops, false).await {
            Ok(mut flight) => {
                flight.hold = true;
                match self.pump(&mut flight, false).await {
                    Ok(()) => flight.outcome(),
                    Err(e) => Err(e),
                }
            }
            Err(e) => Err(e),
        };
        match sent {
            Ok(outcome) => {
                self.note_outcome(targets, true, &outcome);
                Some(outcome)
            }
            Err(e) => {
                self.shard_failed(targets.first().unwrap_or(0), &e).await;
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn description(out: &mut BytesMut, names: &[&str]) {
        wire::build::frame(out, be::ROW_DESCRIPTION, |b| {
            b.put_i16(names.len() as i16);
            for n in names {
                wire::build::put_cstr(b, n.as_bytes());
                b.put_slice(&[0; 18]);
            }
        });
    }

    fn shard_reply(client_columns: &[&str]) -> BytesMut {
        let mut out = BytesMut::new();
        wire::build::frame(&mut out, be::BIND_COMPLETE, |_| {});
        let mut names = client_columns.to_vec();
        names.extend(["pgvia_ctid", "pgvia_key", "pgvia_row", "pgvia_shard"]);
        description(&mut out, &names);
        let mut cells: Vec<Option<&[u8]>> = client_columns.iter().map(|_| Some(&b"v"[..])).collect();
        cells.extend([Some(&b"16384:(0,7)"[..]), Some(&b"42"[..]), Some(&b"(42,x)"[..]), Some(&b"3"[..])]);
        data_row(&mut out, &cells);
        wire::build::command_complete(&mut out, "UPDATE 1");
        out
    }

    #[test]
    fn hidden_columns_are_stripped_and_read() {
        let reply = shard_reply(&["id"]);
        let (client, moved) = strip_reply(&reply, true, true).expect("readable");
        let tags: Vec<u8> = frames(&client).map(|(t, _)| t).collect();
        assert_eq!(tags, b"2TDC");
        let (_, row) = frames(&client).find(|(t, _)| *t == be::DATA_ROW).expect("row");
        assert_eq!(cells(row).expect("cells"), vec![Some(&b"v"[..])]);
        let (_, desc) = frames(&client).find(|(t, _)| *t == be::ROW_DESCRIPTION).expect("description");
        assert_eq!(&desc[5..7], &1i16.to_be_bytes());
        assert_eq!(moved.len(), 1);
        assert_eq!((moved[0].shard, moved[0].place.as_str()), (3, "16384:(0,7)"));
        assert_eq!((moved[0].key.as_deref(), moved[0].row.as_str()), (Some(&b"42"[..]), "(42,x)"));
    }

    #[test]
    fn without_returning_the_client_gets_no_rows() {
        let reply = shard_reply(&[]);
        let (extended, _) = strip_reply(&reply, false, true).expect("readable");
        assert_eq!(frames(&extended).map(|(t, _)| t).collect::<Vec<_>>(), b"2nC");
        let (simple, moved) = strip_reply(&reply, false, false).expect("readable");
        assert_eq!(frames(&simple).map(|(t, _)| t).collect::<Vec<_>>(), b"2C");
        assert_eq!(moved.len(), 1);
    }

    #[test]
    fn a_failed_move_keeps_what_precedes_the_rows_and_the_error() {
        let (client, _) = strip_reply(&shard_reply(&["id"]), true, false).expect("readable");
        let mut error = BytesMut::new();
        wire::build::command_complete(&mut error, "DELETE 1");
        wire::build::ErrorFields::with_code(wire::build::Severity::Error, "23505", "duplicate")
            .write(&mut error);
        let mut out = BytesMut::new();
        failed_reply(&mut out, &client, &error, false);
        assert_eq!(frames(&out).map(|(t, _)| t).collect::<Vec<_>>(), b"2E");
    }

    #[test]
    fn malformed_replies_are_refused_not_panicked_on() {
        let reply = shard_reply(&["id"]);
        for cut in 0..reply.len() {
            let _ = strip_reply(&reply[..cut], true, true);
        }
        let mut short = BytesMut::new();
        data_row(&mut short, &[Some(&b"x"[..])]);
        assert!(strip_reply(&short, true, true).is_none());
    }
}
