//! Statements kept prepared on shard servers. A client's statement (named or unnamed) is
//! registered in the process-wide `prepared::Registry`, as plain sessions do, and lives on
//! each shard server under pgvia's name (`pgvia_<id>`) once that server has parsed it. A
//! batch bound for one shard is written with its Binds and Describes already renamed
//! ([`Kept`]); just before it goes out, [`render`] looks at what the chosen server holds and
//! puts a Parse (its ParseComplete dropped) in front of each use the server lacks, in the same
//! write. The client's own Parse is answered by pgvia when it opens the batch and the server
//! already holds the statement, so PostgreSQL parses and plans a statement once per server,
//! not once per execution.
//!
//! Batches for several shards, and those whose Binds the session rewrites (a cross-shard
//! merge), keep the older way: the statement parsed unnamed in front of each Bind
//! (`extended.rs`).

use std::sync::Arc;

use bytes::BytesMut;
use wire::frontend::tag as fe;

use super::fanout::Lane;
use crate::prepared::{ClientStatements, Registry, ServerEffect, Statement};
use crate::server::forward::{evict_for, write_close, ServerSide};
use crate::server::tracker::{Pending, Replies, Request};
use crate::server::ServerConn;

/// A client statement's hold on its registered statement: one client reference in the
/// registry, given back when the client's name goes (Close, a new Parse, the session's end).
pub(super) struct Registered {
    stmt: Arc<Statement>,
    registry: Arc<Registry>,
}

impl Registered {
    pub fn stmt(&self) -> &Arc<Statement> {
        &self.stmt
    }

    /// The client parsed the statement again: copies from before a schema change pgvia saw
    /// no longer serve it.
    pub fn refresh(&self) {
        self.stmt.require_generation(self.registry.schema_generation());
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.registry.release_client(&self.stmt);
    }
}

/// Registers a client's Parse (`None` when the pool does not keep statements, or the registry
/// is full: the statement then runs the older way). A Parse is fresh, as on a dedicated
/// server: a copy parsed before a schema change pgvia saw no longer serves it.
pub(super) fn register(
    names: Option<&mut ClientStatements>,
    query: &[u8],
    param_types: &[u32],
    analysis: &Arc<route::Analysis>,
) -> Option<Registered> {
    let names = names?;
    let mut oids = Vec::with_capacity(4 * param_types.len());
    for t in param_types {
        oids.extend_from_slice(&t.to_be_bytes());
    }
    let stmt = names.resolve(query, wire::frontend::Oids::new(&oids), || analysis.clone()).ok()?;
    let registered = Registered { stmt, registry: names.registry().clone() };
    registered.refresh();
    Some(registered)
}

/// Where a statement must be on the server before the bytes at `at` go out.
pub(super) struct Use {
    pub at: usize,
    pub stmt: Arc<Statement>,
    pub kind: UseKind,
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum UseKind {
    /// The client's Parse: its ParseComplete is the client's. `first`: it opens the batch,
    /// so when the server holds the statement pgvia answers it before any server reply.
    ClientParse { first: bool },
    /// A Bind or Describe of the statement follows: the server must hold it.
    Needed,
}

/// A batch for one shard server with its statements under pgvia's names: `bytes` is what the
/// server gets when it holds every statement; `uses` say where Parses go otherwise.
#[derive(Default)]
pub(super) struct Kept {
    pub bytes: BytesMut,
    pub uses: Vec<Use>,
}

impl Kept {
    pub fn client_parse(&mut self, stmt: &Arc<Statement>, first: bool) {
        self.uses.push(Use {
            at: self.bytes.len(),
            stmt: stmt.clone(),
            kind: UseKind::ClientParse { first },
        });
    }

    pub fn needed(&mut self, stmt: &Arc<Statement>) {
        self.uses.push(Use { at: self.bytes.len(), stmt: stmt.clone(), kind: UseKind::Needed });
    }
}

/// Appends `kept` for the server `conn` to `out`: the statements it lacks parsed first,
/// every request in its reply tracker (with the bookkeeping to undo if the server fails it)
/// and, on `lane`, which ParseComplete/CloseComplete replies are pgvia's. A ParseComplete
/// pgvia gives in the server's place goes to `to_client`.
pub(super) fn render(
    kept: &Kept,
    conn: &mut ServerConn,
    out: &mut BytesMut,
    lane: &mut Lane,
    to_client: &mut BytesMut,
) {
    let mut from = 0;
    for u in &kept.uses {
        pass_through(conn, lane, &kept.bytes[from..u.at], out);
        from = u.at;
        let mut server = ServerSide { tracker: &mut conn.tracker, statements: &mut conn.statements };
        match u.kind {
            UseKind::ClientParse { first } => {
                if server.statements.holds(&u.stmt) {
                    if first {
                        wire::build::parse_complete(to_client);
                        lane.client_parses += 1;
                        continue;
                    }
                    // Its reply must come from the server at its place: the copy is closed
                    // (reply dropped) and parsed again.
                    server.statements.forget(u.stmt.id);
                    write_close(
                        server.tracker,
                        out,
                        u.stmt.server_name_cstr(),
                        Replies::DropSuccess,
                        Some(ServerEffect::Evicted(u.stmt.clone())),
                    );
                    lane.close_drops.push_back(true);
                }
                parse(&mut server, lane, out, &u.stmt, Replies::Forward);
            }
            UseKind::Needed => {
                if !server.statements.holds(&u.stmt) {
                    parse(&mut server, lane, out, &u.stmt, Replies::DropSuccess);
                }
            }
        }
    }
    pass_through(conn, lane, &kept.bytes[from..], out);
}

/// A Parse of `stmt` under pgvia's name, with the Closes of a stale copy and of the
/// statement it evicts from the server's cache in front (their replies dropped).
fn parse(
    server: &mut ServerSide<'_>,
    lane: &mut Lane,
    out: &mut BytesMut,
    stmt: &Arc<Statement>,
    replies: Replies,
) {
    let before = out.len();
    evict_for(server, out, stmt);
    let mut at = before;
    while at + 5 <= out.len() {
        lane.close_drops.push_back(true);
        at += 1 + frame_len(&out[at..]);
    }
    if let Some(r) = server.statements.registry() {
        r.stats.injected_parses.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    stmt.write_parse(out, stmt.server_name_cstr());
    lane.parse_drops.push_back(replies == Replies::DropSuccess);
    server.tracker.push(Pending {
        request: Request::Parse,
        replies,
        server_effect: Some(ServerEffect::Prepared(stmt.id)),
        client_effect: None,
    });
}

/// Frames that go as written: told to the tracker, and any Parse or Close among them marked
/// as the client's on the lane.
fn pass_through(conn: &mut ServerConn, lane: &mut Lane, bytes: &[u8], out: &mut BytesMut) {
    out.extend_from_slice(bytes);
    let mut at = 0;
    while at + 5 <= bytes.len() {
        let end = (at + 1 + frame_len(&bytes[at..])).min(bytes.len());
        let tag = bytes[at];
        match tag {
            fe::PARSE => {
                conn.statements.unnamed = None;
                lane.parse_drops.push_back(false);
            }
            fe::CLOSE => lane.close_drops.push_back(false),
            _ => {}
        }
        conn.tracker.client_sent(tag, &bytes[at + 5..end]);
        at = end;
    }
}

/// The length field of the frame at the start of `b` (whole frames only: pgvia built them).
fn frame_len(b: &[u8]) -> usize {
    u32::from_be_bytes([b[1], b[2], b[3], b[4]]) as usize
}

/// What a query about to go to shard servers does to the statements they hold.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) enum ServerNote {
    #[default]
    Nothing,
    /// It may change the schema (DDL): copies parsed before it no longer serve a fresh Parse.
    SchemaChange,
    /// It may drop every prepared statement (`DISCARD ALL`, `DEALLOCATE ALL`).
    ForgetAll,
}

impl ServerNote {
    /// The note for a query that does what `analysis` says.
    pub fn of(analysis: &route::Analysis) -> ServerNote {
        if crate::session::exchange::forgets_statements(analysis) {
            ServerNote::ForgetAll
        } else if crate::prepared::changes_schema(analysis) {
            ServerNote::SchemaChange
        } else {
            ServerNote::Nothing
        }
    }

    /// Applied to a server the query is sent to, before it goes.
    pub fn apply(self, conn: &mut ServerConn) {
        match self {
            ServerNote::Nothing => {}
            ServerNote::SchemaChange => conn.statements.schema_change_sent(),
            ServerNote::ForgetAll => {
                conn.statements.schema_change_sent();
                conn.statements.assume_unknown();
            }
        }
    }
}
