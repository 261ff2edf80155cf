//! Extended-protocol messages on a sharded database. The client's prepared statements are
//! kept by the session. A batch for one shard goes with its Binds and Describes renamed to the
//! statement as shard servers keep it (`kept.rs`: parsed once per server, under pgvia's
//! name); a batch for several shards, or one whose Bind is rewritten for a merge, has the
//! statement parsed unnamed in front of each Bind or Describe (its ParseComplete dropped), so
//! it runs on whichever shard its parameters choose, on any server of that shard. The client's
//! own Parse goes to the shards of its batch, so errors in the text come from PostgreSQL itself.

use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use route::StatementKind;
use shard::ShardSet;
use wire::frontend::{tag as fe, FrontendMessage, Target as Which};
use wire::sqlstate::SqlState;

use super::batch_control::{is_control, Control};
use super::fanout::{Combine, Merge};
use super::kept::{Kept, ServerNote};
use super::names::Pending;
use super::{ShardedSession, Tx};
use crate::prepared::{is_reserved_name, no_such_statement};
use crate::session::error::SessionError;
use crate::session::state::Via;
use crate::sharding::{self, Params};

/// The buffers a batch is written into, kept between batches so that a batch allocates none
/// (unless it outgrows them).
#[derive(Default)]
pub(super) struct BatchBuffers {
    payload: BytesMut,
    parse_drops: Vec<bool>,
    kept: Kept,
    pending: Pending,
}

/// Buffers grown past this by a large batch are let go rather than kept for the session's life.
const KEEP_CAPACITY: usize = 64 * 1024;

impl BatchBuffers {
    fn take(&mut self) -> BatchBuffers {
        let mut b = std::mem::take(self);
        b.payload.clear();
        b.parse_drops.clear();
        b.kept.bytes.clear();
        b.kept.uses.clear();
        b.pending.clear();
        b
    }

    fn give_back(&mut self, mut used: BatchBuffers) {
        // A finished batch keeps no statement alive.
        used.kept.uses.clear();
        used.pending.clear();
        if used.payload.capacity() <= KEEP_CAPACITY && used.kept.bytes.capacity() <= KEEP_CAPACITY {
            *self = used;
        }
    }
}

/// A Parse of the unnamed statement with `sql` and `types`.
pub(super) fn parse_frame(out: &mut BytesMut, sql: &[u8], types: &[u32]) {
    wire::build::frame(out, fe::PARSE, |b| {
        b.put_u8(0);
        wire::build::put_cstr(b, sql);
        b.put_i16(types.len() as i16);
        for t in types {
            b.put_u32(*t);
        }
    });
}

/// A Bind's body cut around its statement name: the portal name with its NUL, and what
/// follows the statement name's NUL. None for a body without the two names (never the case
/// for a frame `FrontendMessage::parse_body` accepted).
fn split_bind(frame: &[u8]) -> Option<(&[u8], &[u8])> {
    let body = frame.get(5..)?;
    let portal_end = body.iter().position(|&c| c == 0)?;
    let after_portal = &body[portal_end + 1..];
    let stmt_end = after_portal.iter().position(|&c| c == 0)?;
    Some((&body[..=portal_end], &after_portal[stmt_end + 1..]))
}

/// `frame` (a Bind) with its statement name replaced by the unnamed statement's.
/// With `one_format = Some((n, code))`, the Bind's last `n` result
/// format codes (all `code`) become the single code `code`: the shards' query has hidden
/// columns the client's per-column list does not count (pgx sends one code per column).
fn bind_unnamed_formats(out: &mut BytesMut, frame: &[u8], one_format: Option<(usize, i16)>) {
    let Some((portal, rest)) = split_bind(frame) else {
        out.extend_from_slice(frame);
        return;
    };
    wire::build::frame(out, fe::BIND, |b| {
        b.extend_from_slice(portal);
        b.put_u8(0);
        match one_format {
            // The result format codes are the message's last 2 + 2n bytes.
            Some((n, code)) if rest.len() >= 2 + 2 * n => {
                b.extend_from_slice(&rest[..rest.len() - 2 - 2 * n]);
                b.put_i16(1);
                b.put_i16(code);
            }
            _ => b.extend_from_slice(rest),
        }
    });
}

/// `frame` (a Bind) naming the server's statement `name_cstr` (with its NUL) instead of the
/// client's.
fn bind_renamed(out: &mut BytesMut, frame: &[u8], name_cstr: &[u8]) {
    let Some((portal, rest)) = split_bind(frame) else {
        out.extend_from_slice(frame);
        return;
    };
    wire::build::frame(out, fe::BIND, |b| {
        b.extend_from_slice(portal);
        b.extend_from_slice(name_cstr);
        b.extend_from_slice(rest);
    });
}

impl ShardedSession<'_> {
    /// Extended-protocol messages up to a Sync.
    pub(super) async fn batch(&mut self, frames: Vec<Bytes>) -> Result<(), SessionError> {
        if frames.iter().all(|f| matches!(f[0], fe::SYNC | fe::FLUSH)) {
            // A Sync alone (after a COPY through the extended protocol, a pipeline's end) is
            // answered with the status alone, in a failed transaction too, as PostgreSQL does.
            self.ready();
            return Ok(());
        }
        if let Some((control, start)) = self.trailing_control(&frames) {
            return self.batch_then_end(frames, control, start).await;
        }
        if let Some((control, skip)) = self.leading_control(&frames) {
            self.answer_control_messages(&frames[..skip]);
            match control {
                Control::Begin(query) if skip < frames.len() - 1 => {
                    self.open_transaction(query);
                    return Box::pin(self.batch(frames[skip..].to_vec())).await;
                }
                Control::Begin(query) => {
                    self.begin(query);
                    return Ok(());
                }
                Control::Commit => {
                    self.commit().await?;
                    return Ok(());
                }
                Control::Rollback => {
                    self.rollback().await;
                    return Ok(());
                }
                Control::Savepoint(kind, name, query) => {
                    self.savepoint(kind, name, query).await?;
                    return Ok(());
                }
            }
        }
        if self.prepares_transaction_end(&frames) {
            return Ok(());
        }
        if self.refused_in_failed_transaction() || self.held_portal_batch(&frames) {
            return Ok(());
        }
        let executes = frames.iter().filter(|f| f[0] == fe::EXECUTE).count();
        if executes > 1 {
            // Each statement may belong to other shards: sending the whole pipeline to all of
            // them would run every write on shards that do not own its rows.
            return self.batch_units(frames).await;
        }
        if let Some((at, error)) = self.refused_parse(&frames) {
            return self.refuse_at(&frames, at, error).await;
        }
        let BatchBuffers { mut payload, mut parse_drops, mut kept, mut pending } = self.buffers.take();
        let mut needed = ShardSet::EMPTY;
        let mut writes = false;
        let mut bound = false;
        let mut merge: Option<Merge> = None;
        let mut replicated = true;
        let mut copy_from = false;
        // `kept` is the same batch with the statements kept on the server (`kept.rs`), used
        // when it goes to one shard and no Bind is rewritten.
        let mut keepable = self.registrar.is_some();
        let mut note = ServerNote::Nothing;
        let mut holding: Option<super::portals::Holding> = None;
        let mut holding_run = false;
        // `pending`: the batch's Parses, the client's names once the servers accept them
        // (`names.rs`).
        for (at, frame) in frames.iter().enumerate() {
            let message = match FrontendMessage::parse_body(frame[0], &frame[5..]) {
                Ok(m) => m,
                Err(e) => return Err(e.into()),
            };
            match message {
                FrontendMessage::Parse(p) => {
                    let types: Vec<u32> = p.param_types.iter().collect();
                    parse_frame(&mut payload, p.query, &types);
                    parse_drops.push(false);
                    // The same text again under the same name (a driver's unnamed statement,
                    // pgbench -M extended): the statement the name holds, nothing analysed or
                    // registered again. Fresh all the same, as on a dedicated server.
                    let same = self
                        .statement(&pending, p.name)
                        .filter(|s| *s.sql == *p.query && s.param_types == types);
                    if let Some(statement) = same {
                        match &statement.kept {
                            Some(k) => {
                                k.refresh();
                                kept.client_parse(k.stmt(), at == 0);
                            }
                            None => keepable = false,
                        }
                        pending.parse(p.name, None);
                        continue;
                    }
                    let analysis = self.app.analyzer.analyze_bytes(p.query, &types);
                    let statement = self.client_statement(Bytes::copy_from_slice(p.query), types, analysis);
                    match &statement.kept {
                        Some(k) => kept.client_parse(k.stmt(), at == 0),
                        None => keepable = false,
                    }
                    pending.parse(p.name, Some(statement));
                }
                FrontendMessage::Bind(b) => {
                    pending.other();
                    let Some(stmt) = self.statement(&pending, b.statement) else {
                        // pgvia's statements on the servers are not the client's to bind.
                        if b.statement.is_empty() || is_reserved_name(b.statement) {
                            return self.refuse_at(&frames, at, no_such_statement(b.statement)).await;
                        }
                        // The server names the missing statement in PostgreSQL's own words.
                        payload.extend_from_slice(frame);
                        kept.bytes.extend_from_slice(frame);
                        continue;
                    };
                    let kept_stmt = stmt.kept.as_ref().map(|k| k.stmt().clone());
                    let formats: Vec<i16> = b.param_formats.iter().collect();
                    let values: Vec<Option<&[u8]>> = b.params.iter().collect();
                    let params = Params::Bind { formats: &formats, values: &values };
                    let analysis: Arc<route::Analysis> = stmt.analysis.clone();
                    if let Some(why) =
                        analysis.statements().find_map(|s| super::control::unsupported(s.kind()))
                    {
                        // As PostgreSQL would fail its Execute: the messages before it are answered.
                        let mut error = BytesMut::new();
                        let code = SqlState::FEATURE_NOT_SUPPORTED.code();
                        wire::build::ErrorFields::with_code(wire::build::Severity::Error, code, &why)
                            .write(&mut error);
                        return self.refuse_at(&frames, at, error.freeze()).await;
                    }
                    if let Some(rule) = self.key_update_rule(&analysis) {
                        // Judged as running on many shards: its rows may move to any.
                        if let Err((code, message)) =
                            self.check_placement(&analysis, &stmt.sql, self.rules.shard_count)
                        {
                            let mut error = BytesMut::new();
                            wire::build::ErrorFields::with_code(wire::build::Severity::Error, code, &message)
                                .write(&mut error);
                            return self.refuse_at(&frames, at, error.freeze()).await;
                        }
                        // Its rows may move to other shards (`key_move.rs`).
                        return self.key_update_batch(frames.clone(), rule).await;
                    }
                    let (sql, types) = (stmt.sql.clone(), stmt.param_types.clone());
                    let routes = sharding::plan(&self.rules, &analysis, &params, &self.hints());
                    let routes = match routes {
                        Ok(r) => r,
                        Err(e) => {
                            self.refuse_route(&e);
                            return Ok(());
                        }
                    };
                    self.count_fanouts(&routes, &sql);
                    replicated &= routes.iter().all(|r| r.replicated);
                    let set = match self.targets(&routes) {
                        Ok(s) => s,
                        Err(why) => {
                            self.refuse(SqlState::FEATURE_NOT_SUPPORTED.code(), &why);
                            return Ok(());
                        }
                    };
                    match super::doors::extended_door(&analysis, &sql, set, &self.rules) {
                        Some(super::doors::ExtendedDoor::Refuse(why)) => {
                            return self
                                .refuse_at(&frames, at, super::doors::error_frame("0A000", &why))
                                .await;
                        }
                        Some(super::doors::ExtendedDoor::Copy(copy)) => {
                            return self.copy_to_batch(&frames, at, copy, set).await;
                        }
                        None => {}
                    }
                    if analysis.statements().any(|s| is_control(s.kind())) {
                        self.refuse(
                            SqlState::FEATURE_NOT_SUPPORTED.code(),
                            "on a sharded database, send BEGIN, COMMIT, ROLLBACK and savepoint statements in a message batch of their own",
                        );
                        return Ok(());
                    }
                    writes |= analysis.writes();
                    match self.copy_from_stdin(&analysis) {
                        Some(true) => return self.copy_in_extended(&frames, &analysis, &sql).await,
                        Some(false) => copy_from = true,
                        None => {}
                    }
                    self.observe(set, &analysis, Via::Extended);
                    // The strongest note of the batch's statements: `DISCARD ALL` bound here
                    // drops the servers' statements as a simple query's does.
                    match ServerNote::of(&analysis) {
                        ServerNote::Nothing => {}
                        ServerNote::SchemaChange if note == ServerNote::ForgetAll => {}
                        stronger => note = stronger,
                    }
                    needed = needed.union(set);
                    self.portals.insert(b.portal, set);
                    bound = true;
                    let select = analysis.len() == 1
                        && analysis
                            .statement(0)
                            .is_some_and(|s| matches!(s.kind(), StatementKind::Select { .. }));
                    let mut shard_sql = sql.clone();
                    let mut describe = false;
                    let mut one_format = None;
                    if !(select && set.len() > 1) {
                        if let Err((code, message)) = self.check_placement(&analysis, &sql, set.len()) {
                            self.refuse(code, &message);
                            return Ok(());
                        }
                    }
                    if select && set.len() > 1 {
                        let described = frames[at + 1..].iter().take_while(|f| f[0] != fe::EXECUTE).any(|f| {
                            matches!(FrontendMessage::parse_body(f[0], &f[5..]), Ok(FrontendMessage::Describe { target: Which::Portal, name }) if name == b.portal)
                        });
                        if merge.is_some() {
                            self.refuse(
                                SqlState::FEATURE_NOT_SUPPORTED.code(),
                                "a cross-shard query that needs merging must be the only one before its Sync",
                            );
                            return Ok(());
                        }
                        let bind_values: Vec<(Option<&[u8]>, bool)> = values
                            .iter()
                            .enumerate()
                            .map(|(n, v)| {
                                let f = match formats.len() {
                                    0 => 0,
                                    1 => formats[0],
                                    _ => formats.get(n).copied().unwrap_or(0),
                                };
                                (*v, f == 1)
                            })
                            .collect();
                        let in_tx = matches!(self.tx, Tx::Open { .. });
                        holding = super::portals::holding(b.portal, at, &frames[at + 1..], in_tx);
                        match self.plan_merge(&sql, set, !described && holding.is_none()).await {
                            Ok(Some((rewritten, mut m))) => {
                                if let Err(e) = m.bind_params(&bind_values) {
                                    self.refuse(e.sqlstate(), &e.to_string());
                                    return Ok(());
                                }
                                // The shards' query has hidden columns, so a code per
                                // column cannot go to them as it came: one code when all
                                // are the same (pgx's integers), else text from the shards
                                // and the merge writes each column in its client format.
                                let codes: Vec<i16> = b.result_formats.iter().collect();
                                if codes.len() > 1 {
                                    if codes.iter().all(|c| *c == codes[0]) {
                                        one_format = Some((codes.len(), codes[0]));
                                    } else {
                                        m.set_result_formats(&codes);
                                        one_format = Some((codes.len(), 0));
                                    }
                                }
                                merge = Some(m);
                                shard_sql = Bytes::from(rewritten.into_bytes());
                                describe = !described;
                            }
                            // Plain rows run whole later stream from the shards as they are.
                            Ok(None) if holding.as_ref().is_some_and(|h| h.limit.is_none()) => holding = None,
                            Ok(None) => {}
                            Err((code, message)) => {
                                self.refuse(&code, &message);
                                return Ok(());
                            }
                        }
                        // A portal run in parts is held by pgvia, which needs its columns.
                        describe |= holding.is_some() && !described;
                    }
                    match kept_stmt {
                        Some(k) if merge.is_none() && one_format.is_none() && !describe => {
                            kept.needed(&k);
                            bind_renamed(&mut kept.bytes, frame, k.server_name_cstr());
                        }
                        _ => keepable = false,
                    }
                    parse_frame(&mut payload, &shard_sql, &types);
                    parse_drops.push(true);
                    let start = payload.len();
                    bind_unnamed_formats(&mut payload, frame, one_format);
                    let shard_portal = match holding {
                        Some(_) => super::portals::unname_bind(&mut payload, start),
                        None => b.portal,
                    };
                    if describe {
                        // The merge needs the shards' columns; the client did not ask for them.
                        super::portals::describe(&mut payload, shard_portal);
                    }
                }
                FrontendMessage::Describe { target: Which::Statement, name } => {
                    pending.other();
                    match self.statement(&pending, name) {
                        Some(stmt) => {
                            match &stmt.kept {
                                Some(k) => {
                                    kept.needed(k.stmt());
                                    wire::build::frame(&mut kept.bytes, fe::DESCRIBE, |b| {
                                        b.put_u8(b'S');
                                        b.put_slice(k.stmt().server_name_cstr());
                                    });
                                }
                                None => keepable = false,
                            }
                            parse_frame(&mut payload, &stmt.sql.clone(), &stmt.param_types.clone());
                            parse_drops.push(true);
                            wire::build::frame(&mut payload, fe::DESCRIBE, |b| b.put_slice(b"S\0"));
                        }
                        None if name.is_empty() || is_reserved_name(name) => {
                            return self.refuse_at(&frames, at, no_such_statement(name)).await;
                        }
                        None => {
                            payload.extend_from_slice(frame);
                            kept.bytes.extend_from_slice(frame);
                        }
                    }
                }
                FrontendMessage::Describe { target: Which::Portal, name }
                | FrontendMessage::Execute { portal: name, .. } => {
                    pending.other();
                    if let Some(set) = self.portals.get(name) {
                        needed = needed.union(*set);
                    }
                    if holding.as_ref().is_some_and(|h| h.name == name) {
                        match frame[0] {
                            fe::EXECUTE => super::portals::execute_whole(&mut payload),
                            _ => super::portals::describe(&mut payload, ""),
                        }
                        holding_run |= frame[0] == fe::EXECUTE;
                        continue;
                    }
                    if let FrontendMessage::Execute { max_rows, .. } = message {
                        let shards = self.portals.get(name).map_or(1, |s| s.len());
                        if max_rows > 0 && shards > 1 {
                            self.refuse(
                                SqlState::FEATURE_NOT_SUPPORTED.code(),
                                "fetching a result that spans several shards in parts (Execute with a row limit) is not supported yet",
                            );
                            return Ok(());
                        }
                    }
                    payload.extend_from_slice(frame);
                    kept.bytes.extend_from_slice(frame);
                }
                FrontendMessage::Close { target: Which::Statement, name } => {
                    // Only the client's name goes; the servers keep pgvia's statement for
                    // whoever uses it next. The unnamed one is closed for the reply's sake.
                    self.statements.remove(name);
                    pending.close(name);
                    wire::build::frame(&mut payload, fe::CLOSE, |b| b.put_slice(b"S\0"));
                    wire::build::frame(&mut kept.bytes, fe::CLOSE, |b| b.put_slice(b"S\0"));
                }
                FrontendMessage::Close { target: Which::Portal, name } => {
                    self.portals.remove(name);
                    payload.extend_from_slice(frame);
                    kept.bytes.extend_from_slice(frame);
                }
                FrontendMessage::Sync | FrontendMessage::Flush => {
                    if holding.is_some() && !holding_run && frame[0] == fe::SYNC {
                        super::portals::execute_whole(&mut payload);
                        holding_run = true;
                    }
                    payload.extend_from_slice(frame);
                    kept.bytes.extend_from_slice(frame);
                }
                FrontendMessage::FunctionCall(_) => {
                    self.refuse(
                        SqlState::FEATURE_NOT_SUPPORTED.code(),
                        "the function-call message is not supported on a sharded database",
                    );
                    return Ok(());
                }
                _ => {}
            }
        }
        let targets = if needed.is_empty() {
            ShardSet::one(self.pick(ShardSet::all(self.groups.len())))
        } else {
            needed
        };
        let combine = match merge {
            Some(m) => Combine::Merge(Box::new(m)),
            None if replicated && bound => Combine::Replicated,
            None => Combine::Concat,
        };
        if note == ServerNote::ForgetAll {
            // As PostgreSQL does, the client's statements go too (this batch's Parses, named
            // once the servers accept them, stay).
            self.statements.clear();
        }
        self.note = note;
        self.parses_answered = 0;
        if copy_from {
            self.copy_in_whole(&payload, &parse_drops, targets, combine, true).await?;
        } else if let Some(h) = holding {
            self.run_holding(targets, &payload, &parse_drops, combine, h).await?;
        } else if keepable && targets.len() == 1 && matches!(combine, Combine::Concat | Combine::Replicated) {
            self.exchange(targets, super::io::Payload::Kept(&kept), combine, &[], writes).await?;
        } else {
            self.exchange(targets, super::io::Payload::Same(&payload), combine, &parse_drops, writes).await?;
        }
        self.settle_names(&mut pending);
        self.buffers.give_back(BatchBuffers { payload, parse_drops, kept, pending });
        // Portals end with their transaction.
        if matches!(self.tx, Tx::Idle) {
            self.portals.clear();
            self.held_portals.clear();
        }
        Ok(())
    }

    /// A pipeline of several statements: each (its messages up to its Execute) runs as an
    /// exchange of its own, to its own shards, and together they form one implicit
    /// transaction, as PostgreSQL runs the statements between two Syncs. The first error ends
    /// it: the rest is skipped, as PostgreSQL skips to the Sync.
    async fn batch_units(&mut self, frames: Vec<Bytes>) -> Result<(), SessionError> {
        let Some((_sync, messages)) = frames.split_last() else { return Ok(()) };
        let mut units: Vec<Vec<Bytes>> = vec![Vec::new()];
        for f in messages {
            if let Some(unit) = units.last_mut() {
                unit.push(f.clone());
            }
            if f[0] == fe::EXECUTE {
                units.push(Vec::new());
            }
        }
        units.retain(|u| !u.is_empty());
        let mut sync = BytesMut::new();
        wire::build::sync(&mut sync);
        let sync = sync.freeze();
        let parts = units
            .into_iter()
            .map(|mut unit| {
                unit.push(sync.clone());
                super::Part::Batch(unit)
            })
            .collect();
        self.in_implicit_transaction(parts).await
    }
}

#[cfg(test)]
mod tests {
    use super::{bind_renamed, bind_unnamed_formats, split_bind};
    use bytes::BytesMut;

    /// A Bind of portal "p" and statement `stmt`: no parameter format codes, one text
    /// parameter "42", result format codes `codes`.
    fn bind(stmt: &[u8], codes: &[i16]) -> BytesMut {
        let mut out = BytesMut::new();
        wire::build::frame(&mut out, b'B', |b| {
            b.extend_from_slice(b"p\0");
            b.extend_from_slice(stmt);
            b.extend_from_slice(b"\0\0\0\0\x01\0\0\0\x0242");
            b.extend_from_slice(&(codes.len() as i16).to_be_bytes());
            for c in codes {
                b.extend_from_slice(&c.to_be_bytes());
            }
        });
        out
    }

    #[test]
    fn a_bind_is_renamed_and_its_result_codes_folded_into_one() {
        let frame = bind(b"s1", &[1, 1, 1]);
        let (portal, rest) = split_bind(&frame).expect("a Bind");
        assert_eq!(portal, b"p\0");
        assert_eq!(rest, &frame[frame.len() - rest.len()..]);
        let mut renamed = BytesMut::new();
        bind_renamed(&mut renamed, &frame, b"pgvia_7\0");
        assert_eq!(renamed, bind(b"pgvia_7", &[1, 1, 1]));
        let mut unnamed = BytesMut::new();
        bind_unnamed_formats(&mut unnamed, &frame, None);
        assert_eq!(unnamed, bind(b"", &[1, 1, 1]));
        unnamed.clear();
        bind_unnamed_formats(&mut unnamed, &frame, Some((3, 1)));
        assert_eq!(unnamed, bind(b"", &[1]));
    }

    #[test]
    fn a_body_without_its_names_is_not_cut() {
        assert_eq!(split_bind(b"B\0\0\0\x06p"), None);
        assert_eq!(split_bind(b"B\0\0\0\x07p\0s"), None);
        assert_eq!(split_bind(b"B"), None);
    }
}
