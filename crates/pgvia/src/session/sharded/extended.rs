//! Extended-protocol messages on a sharded database. The client's prepared statements are
//! kept by the session; servers hold only the unnamed statement, parsed again in front of
//! each Bind or Describe that names one (its ParseComplete dropped), so the statement can run
//! on whichever shard its parameters choose, on any server of that shard. The client's own
//! Parse goes to the shards of its batch, so errors in the text come from PostgreSQL itself.

use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use route::StatementKind;
use shard::ShardSet;
use wire::frontend::{tag as fe, FrontendMessage, Target as Which};
use wire::sqlstate::SqlState;

use super::{ClientStatement, ShardedSession, Tx};
use crate::session::error::SessionError;
use crate::sharding::{self, Params};

/// A Parse of the unnamed statement with `sql` and `types`.
fn parse_frame(out: &mut BytesMut, sql: &[u8], types: &[u32]) {
    wire::build::frame(out, fe::PARSE, |b| {
        b.put_u8(0);
        wire::build::put_cstr(b, sql);
        b.put_i16(types.len() as i16);
        for t in types {
            b.put_u32(*t);
        }
    });
}

/// `frame` (a Bind) with its statement name replaced by the unnamed statement's.
fn bind_unnamed(out: &mut BytesMut, frame: &[u8]) {
    let body = &frame[5..];
    let portal_end = body.iter().position(|&b| b == 0).unwrap_or(body.len());
    let stmt_end =
        body[portal_end + 1..].iter().position(|&b| b == 0).map_or(body.len(), |p| portal_end + 1 + p);
    wire::build::frame(out, fe::BIND, |b| {
        b.extend_from_slice(&body[..=portal_end]);
        b.put_u8(0);
        b.extend_from_slice(body.get(stmt_end + 1..).unwrap_or_default());
    });
}

/// What a batch of transaction control alone needs (JDBC and others send `BEGIN`/`COMMIT`
/// through Parse/Bind/Execute).
enum Control {
    Begin,
    Commit,
    Rollback,
}

impl ShardedSession<'_> {
    /// Extended-protocol messages up to a Sync.
    pub(super) async fn batch(&mut self, frames: Vec<Bytes>) -> Result<(), SessionError> {
        if let Some((control, skip)) = self.leading_control(&frames) {
            self.answer_control_messages(&frames[..skip]);
            match control {
                Control::Begin if skip < frames.len() - 1 => {
                    wire::build::command_complete(&mut self.to_client, "BEGIN");
                    let mut begin = BytesMut::new();
                    wire::build::query(&mut begin, "BEGIN");
                    if matches!(self.tx, Tx::Idle) {
                        self.tx = Tx::Open {
                            begin: begin.freeze(),
                            participants: ShardSet::EMPTY,
                            writers: ShardSet::EMPTY,
                            failed: false,
                            savepoints: Vec::new(),
                        };
                    }
                    return Box::pin(self.batch(frames[skip..].to_vec())).await;
                }
                Control::Begin => {
                    let mut begin = BytesMut::new();
                    wire::build::query(&mut begin, "BEGIN");
                    // `begin` writes the tag and ReadyForQuery: strip what answer_control wrote.
                    self.begin_quietly(begin.freeze());
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
            }
        }
        if let Tx::Open { failed: true, .. } = self.tx {
            self.refuse(
                SqlState::IN_FAILED_SQL_TRANSACTION.code(),
                "current transaction is aborted, commands ignored until end of transaction block",
            );
            return Ok(());
        }
        let search_path = self.search_path();
        let mut payload = BytesMut::new();
        let mut parse_drops = Vec::new();
        let mut needed = ShardSet::EMPTY;
        let mut writes = false;
        let mut bound_here: Vec<String> = Vec::new();
        let mut replicated = true;
        for (at, frame) in frames.iter().enumerate() {
            let message = match FrontendMessage::parse_body(frame[0], &frame[5..]) {
                Ok(m) => m,
                Err(e) => return Err(e.into()),
            };
            match message {
                FrontendMessage::Parse(p) => {
                    let types: Vec<u32> = p.param_types.iter().collect();
                    let analysis = self.app.analyzer.analyze_bytes(p.query, &types);
                    parse_frame(&mut payload, p.query, &types);
                    parse_drops.push(false);
                    self.statements.insert(
                        p.name.to_owned(),
                        ClientStatement {
                            sql: Bytes::copy_from_slice(p.query),
                            param_types: types,
                            analysis,
                        },
                    );
                }
                FrontendMessage::Bind(b) => {
                    let Some(stmt) = self.statements.get(b.statement) else {
                        // The server names the missing statement in PostgreSQL's own words.
                        payload.extend_from_slice(frame);
                        continue;
                    };
                    let formats: Vec<i16> = b.param_formats.iter().collect();
                    let values: Vec<Option<&[u8]>> = b.params.iter().collect();
                    let params = Params::Bind { formats: &formats, values: &values };
                    let analysis: Arc<route::Analysis> = stmt.analysis.clone();
                    let (sql, types) = (stmt.sql.clone(), stmt.param_types.clone());
                    let routes = sharding::plan(&self.rules, &analysis, &params, &self.hints(&search_path));
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
                    if analysis.statements().any(|s| is_control(s.kind())) {
                        self.refuse(
                            SqlState::FEATURE_NOT_SUPPORTED.code(),
                            "on a sharded database, send BEGIN, COMMIT and ROLLBACK in a message batch of their own",
                        );
                        return Ok(());
                    }
                    writes |= analysis.writes();
                    needed = needed.union(set);
                    self.portals.insert(b.portal.to_owned(), set);
                    bound_here.push(b.portal.to_owned());
                    let select = analysis.len() == 1
                        && analysis
                            .statement(0)
                            .is_some_and(|s| matches!(s.kind(), StatementKind::Select { .. }));
                    let mut shard_sql = sql.clone();
                    let mut describe = false;
                    if select && set.len() > 1 {
                        let described = frames[at + 1..].iter().take_while(|f| f[0] != fe::EXECUTE).any(|f| {
                            matches!(FrontendMessage::parse_body(f[0], &f[5..]), Ok(FrontendMessage::Describe { target: Which::Portal, name }) if name == b.portal)
                        });
                        if b.result_formats.len() > 1 || self.next_merge.is_some() {
                            self.refuse(
                                SqlState::FEATURE_NOT_SUPPORTED.code(),
                                "a cross-shard query that needs merging takes one result format for all columns, and one such query per Sync",
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
                        match self.plan_merge(&sql, set, !described).await {
                            Ok(Some(rewritten)) => {
                                if let Some(Err(e)) =
                                    self.next_merge.as_mut().map(|m| m.bind_params(&bind_values))
                                {
                                    self.next_merge = None;
                                    self.refuse(e.sqlstate(), &e.to_string());
                                    return Ok(());
                                }
                                shard_sql = Bytes::from(rewritten.into_bytes());
                                describe = !described;
                            }
                            Ok(None) => {}
                            Err((code, message)) => {
                                self.refuse(code, &message);
                                return Ok(());
                            }
                        }
                    }
                    parse_frame(&mut payload, &shard_sql, &types);
                    parse_drops.push(true);
                    bind_unnamed(&mut payload, frame);
                    if describe {
                        // The merge needs the shards' columns; the client did not ask for them.
                        wire::build::frame(&mut payload, fe::DESCRIBE, |m| {
                            m.put_u8(b'P');
                            wire::build::put_cstr(m, b.portal.as_bytes());
                        });
                    }
                }
                FrontendMessage::Describe { target: Which::Statement, name } => {
                    match self.statements.get(name) {
                        Some(stmt) => {
                            parse_frame(&mut payload, &stmt.sql.clone(), &stmt.param_types.clone());
                            parse_drops.push(true);
                            wire::build::frame(&mut payload, fe::DESCRIBE, |b| b.put_slice(b"S\0"));
                        }
                        None => payload.extend_from_slice(frame),
                    }
                }
                FrontendMessage::Describe { target: Which::Portal, name }
                | FrontendMessage::Execute { portal: name, .. } => {
                    if let Some(set) = self.portals.get(name) {
                        needed = needed.union(*set);
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
                }
                FrontendMessage::Close { target: Which::Statement, name } => {
                    self.statements.remove(name);
                    wire::build::frame(&mut payload, fe::CLOSE, |b| b.put_slice(b"S\0"));
                }
                FrontendMessage::Close { target: Which::Portal, name } => {
                    self.portals.remove(name);
                    payload.extend_from_slice(frame);
                }
                FrontendMessage::Sync | FrontendMessage::Flush => payload.extend_from_slice(frame),
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
        self.next_replicated = replicated && !bound_here.is_empty();
        self.exchange(targets, super::io::Payload::Same(&payload), &parse_drops, writes).await?;
        // Portals end with their transaction.
        if matches!(self.tx, Tx::Idle) {
            self.portals.clear();
        }
        let _ = bound_here;
        Ok(())
    }

    /// A batch that starts with a transaction-control statement: which one, and how many
    /// of its frames (Parse/Bind/Describe/Execute) carry it.
    fn leading_control(&mut self, frames: &[Bytes]) -> Option<(Control, usize)> {
        let mut sql: Option<Bytes> = None;
        let mut parsed: Option<(String, Vec<u32>)> = None;
        let mut n = 0;
        for frame in frames {
            match FrontendMessage::parse_body(frame[0], &frame[5..]).ok()? {
                FrontendMessage::Parse(p) if n == 0 => {
                    sql = Some(Bytes::copy_from_slice(p.query));
                    parsed = Some((p.name.to_owned(), p.param_types.iter().collect()));
                }
                FrontendMessage::Bind(b) => {
                    if sql.is_none() {
                        sql = Some(self.statements.get(b.statement)?.sql.clone());
                    }
                }
                FrontendMessage::Describe { target: Which::Portal, .. } => {}
                FrontendMessage::Execute { .. } => {
                    n += 1;
                    break;
                }
                _ => return None,
            }
            n += 1;
        }
        let sql = sql?;
        let analysis = self.app.analyzer.analyze_bytes(&sql, &[]);
        if analysis.len() != 1 {
            return None;
        }
        let control = match analysis.statement(0)?.kind() {
            StatementKind::Begin(_) => Control::Begin,
            StatementKind::Commit { chain: false } => Control::Commit,
            StatementKind::Rollback { chain: false } => Control::Rollback,
            _ => return None,
        };
        // COMMIT/ROLLBACK must be alone before the Sync; BEGIN may lead other statements.
        let alone = n + 1 == frames.len();
        if !(alone || matches!(control, Control::Begin)) {
            return None;
        }
        if let Some((name, types)) = parsed {
            let analysis = self.app.analyzer.analyze_bytes(&sql, &types);
            self.statements.insert(name, ClientStatement { sql, param_types: types, analysis });
        }
        Some((control, n))
    }

    /// The replies PostgreSQL gives to the Parse/Bind/Describe of a transaction-control
    /// statement (its CommandComplete and ReadyForQuery follow from the statement itself).
    fn answer_control_messages(&mut self, frames: &[Bytes]) {
        for frame in frames {
            match frame[0] {
                fe::PARSE => wire::build::parse_complete(&mut self.to_client),
                fe::BIND => wire::build::frame(&mut self.to_client, b'2', |_| {}),
                fe::DESCRIBE => wire::build::frame(&mut self.to_client, b'n', |_| {}),
                _ => {}
            }
        }
    }

    /// A `BEGIN` sent through the extended protocol: opens the transaction and writes its
    /// CommandComplete and ReadyForQuery.
    fn begin_quietly(&mut self, begin: Bytes) {
        self.begin(begin);
    }
}

fn is_control(kind: StatementKind) -> bool {
    matches!(
        kind,
        StatementKind::Begin(_)
            | StatementKind::Commit { .. }
            | StatementKind::Rollback { .. }
            | StatementKind::Savepoint
            | StatementKind::Release
            | StatementKind::RollbackToSavepoint
    )
}
