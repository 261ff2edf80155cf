//! Sending a client's statement messages to whichever server it holds now.
//!
//! Named statements are renamed to pgvia's (`pgvia_<id>`), so clients can never see each
//! other's names and a server can serve every client that uses the same query. A client's
//! unnamed statement stays unnamed on the server (its planning differs from a named one's),
//! re-parsed there when the server's unnamed slot holds something else.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use wire::build::{self, ErrorFields};
use wire::frontend::{tag, Oids, Parse};
use wire::sqlstate::SqlState;

use std::ops::Range;

use super::tracker::{Answer, Finished, Pending, Replies, ReplyTracker, Request};
use crate::prepared::sql::{with_name, SQL_PREPARE_KEY};
use crate::prepared::{duplicate_statement, no_such_statement};
use crate::prepared::{
    is_reserved_name, ClientEffect, ClientStatements, ServerEffect, ServerStatements, Statement,
    StatementLimit,
};
use wire::backend::TransactionStatus;

/// What of a server connection statement handling needs (no socket: testable alone).
pub struct ServerSide<'a> {
    pub tracker: &'a mut ReplyTracker,
    pub statements: &'a mut ServerStatements,
}

/// What became of a client frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sent {
    /// It goes to the server unchanged, with the frames around it; the tracker has it.
    AsIs,
    /// pgvia wrote what the server gets instead (possibly nothing), after the frames before it.
    Replaced,
}

/// A name no statement ever has (ids start at 1): describing it fails on any server.
pub const NO_SUCH_STATEMENT_NAME: &str = "pgvia_0";
const NO_SUCH_STATEMENT: &[u8] = b"pgvia_0\0";

pub struct Forward<'a> {
    pub client: &'a mut ClientStatements,
    /// The server's expected-reply queue and the statements it holds.
    pub server: ServerSide<'a>,
    /// The server's write buffer.
    pub out: &'a mut BytesMut,
    pub analyzer: &'a route::Analyzer,
}

impl Forward<'_> {
    /// A Parse. Returns the statement it names, for the session to learn what it does.
    pub fn parse(&mut self, run: &[u8], p: &Parse<'_>) -> (Sent, Option<Arc<Statement>>) {
        if self.server.tracker.is_skipping() {
            self.server.tracker.client_sent(tag::PARSE, &[]);
            return (Sent::AsIs, None);
        }
        let analyzer = self.analyzer;
        let resolved = self.client.admit(p.name).and_then(|()| {
            self.client.resolve(p.query, p.param_types, || {
                let oids: Vec<u32> = p.param_types.iter().collect();
                analyzer.analyze_bytes(p.query, &oids)
            })
        });
        let stmt = match resolved {
            Ok(stmt) => stmt,
            Err(limit) => {
                fail(&mut self.server, self.out, run, limit_error(limit));
                return (Sent::Replaced, None);
            }
        };
        let prev = match self.client.bind_name(p.name, stmt.clone()) {
            Ok(prev) => prev,
            Err(crate::prepared::DuplicateName) => {
                fail(&mut self.server, self.out, run, duplicate_statement(p.name));
                return (Sent::Replaced, None);
            }
        };
        let client_effect = Some(ClientEffect::Bound { name: p.name.into(), prev });
        let stats = &self.client.registry().stats;
        let held = if p.name.is_empty() {
            self.server.statements.holds_unnamed(&stmt)
        } else {
            self.server.statements.holds(&stmt)
        };
        if held {
            // The server already has exactly this statement: answer in its place.
            stats.parses_skipped.fetch_add(1, Ordering::Relaxed);
            self.server.tracker.push(Pending {
                request: Request::Answered(wire::backend::tag::PARSE_COMPLETE),
                replies: Replies::Forward,
                server_effect: None,
                client_effect,
            });
            self.out.extend_from_slice(run);
            return (Sent::Replaced, Some(stmt));
        }
        if p.name.is_empty() {
            let prev = self.server.statements.set_unnamed(stmt.id);
            self.server.tracker.push(Pending {
                request: Request::Parse,
                replies: Replies::Forward,
                server_effect: Some(ServerEffect::Unnamed { prev }),
                client_effect,
            });
            return (Sent::AsIs, Some(stmt));
        }
        self.out.extend_from_slice(run);
        evict_for(&mut self.server, self.out, &stmt);
        stmt.write_parse(self.out, stmt.server_name_cstr());
        self.server.tracker.push(Pending {
            request: Request::Parse,
            replies: Replies::Forward,
            server_effect: Some(ServerEffect::Prepared(stmt.id)),
            client_effect,
        });
        (Sent::Replaced, Some(stmt))
    }

    /// A Bind: the statement it names is brought to the server if missing, and renamed.
    pub fn bind(&mut self, run: &[u8], frame: &[u8], statement: &str) -> Sent {
        self.use_statement(run, frame, statement, Request::Bind, |out, stmt, frame| {
            let body = &frame[5..];
            let Some(portal_end) = memchr(body) else { return false };
            let Some(name_len) = memchr(&body[portal_end + 1..]) else { return false };
            let rest = &body[portal_end + 1 + name_len + 1..];
            let name = stmt.server_name_cstr();
            out.put_u8(tag::BIND);
            out.put_i32((4 + portal_end + 1 + name.len() + rest.len()) as i32);
            out.put_slice(&body[..=portal_end]);
            out.put_slice(name);
            out.put_slice(rest);
            true
        })
    }

    /// A Describe of a statement.
    pub fn describe_statement(&mut self, run: &[u8], frame: &[u8], statement: &str) -> Sent {
        let request = Request::DescribeStatement { params_seen: false };
        self.use_statement(run, frame, statement, request, |out, stmt, _| {
            let name = stmt.server_name_cstr();
            out.put_u8(tag::DESCRIBE);
            out.put_i32((4 + 1 + name.len()) as i32);
            out.put_u8(b'S');
            out.put_slice(name);
            true
        })
    }

    /// A Close of a statement: only the client's name goes; the server keeps the statement
    /// for whoever uses it next, and pgvia answers.
    pub fn close_statement(&mut self, run: &[u8], name: &str) -> Sent {
        if self.server.tracker.is_skipping() {
            self.server.tracker.client_sent(tag::CLOSE, b"S");
            return Sent::AsIs;
        }
        let client_effect =
            self.client.unbind(name).map(|stmt| ClientEffect::Closed { name: name.into(), stmt });
        self.server.tracker.push(Pending {
            request: Request::Answered(wire::backend::tag::CLOSE_COMPLETE),
            replies: Replies::Forward,
            server_effect: None,
            client_effect,
        });
        self.out.extend_from_slice(run);
        Sent::Replaced
    }

    /// A simple query replaces the unnamed statement, the client's and the server's.
    pub fn query(&mut self) {
        self.client.drop_unnamed();
        self.server.statements.unnamed = None;
    }

    /// The client ran `DISCARD ALL` (or `DEALLOCATE ALL`): its names go, and every copy on
    /// the server is of unknown state, closed before its next Parse there. Not forgotten
    /// outright: the command may fail (inside a transaction block it does), and a Parse of a
    /// name the server still holds would fail for every client of the server.
    pub fn forget_all(&mut self) {
        self.client.clear();
        self.server.statements.assume_unknown();
    }

    /// SQL `PREPARE`, the client's name at `span` in `sql`: recorded under the client's
    /// name, made on the server under pgvia's unless the server has it already (then pgvia
    /// answers).
    pub fn prepare_sql(&mut self, run: &[u8], sql: &str, name: &str, span: Range<usize>) -> Sent {
        if self.server.tracker.is_skipping() {
            self.server.tracker.client_sent(tag::QUERY, &[]);
            return Sent::AsIs;
        }
        let key = format!("{SQL_PREPARE_KEY}{}", &sql[span.end..]);
        let analyzer = self.analyzer;
        let resolved = self.client.admit(name).and_then(|()| {
            self.client.resolve(key.as_bytes(), Oids::new(&[]), || analyzer.analyze(sql, &[]))
        });
        let stmt = match resolved {
            Ok(stmt) => stmt,
            Err(limit) => {
                fail_query(&mut self.server, self.out, run, limit_error(limit));
                return Sent::Replaced;
            }
        };
        let prev = match self.client.bind_name(name, stmt.clone()) {
            Ok(prev) => prev,
            Err(crate::prepared::DuplicateName) => {
                fail_query(&mut self.server, self.out, run, duplicate_statement(name));
                return Sent::Replaced;
            }
        };
        let client_effect = Some(ClientEffect::Bound { name: name.into(), prev });
        self.out.extend_from_slice(run);
        if self.server.statements.holds(&stmt) {
            self.client.registry().stats.parses_skipped.fetch_add(1, Ordering::Relaxed);
            self.server.tracker.push(Pending {
                request: Request::AnsweredCommand("PREPARE"),
                replies: Replies::Forward,
                server_effect: None,
                client_effect,
            });
            return Sent::Replaced;
        }
        evict_for(&mut self.server, self.out, &stmt);
        send_query(&mut self.server, self.out, &stmt.sql_prepare().unwrap_or_default());
        self.server.tracker.push(Pending {
            request: Request::Query,
            replies: Replies::Forward,
            server_effect: Some(ServerEffect::Prepared(stmt.id)),
            client_effect,
        });
        Sent::Replaced
    }

    /// SQL `EXECUTE` of a statement the client prepared: renamed, with the statement made on
    /// the server first if it lacks it.
    pub fn execute_sql(&mut self, run: &[u8], sql: &str, name: &str, span: Range<usize>) -> Sent {
        let registry = self.client.registry();
        let server = &mut self.server;
        let stmt = match self.client.get(name) {
            Some(s) if !server.tracker.is_skipping() => s,
            None if is_reserved_name(name) && !server.tracker.is_skipping() => {
                fail_query(server, self.out, run, no_such_statement(name));
                return Sent::Replaced;
            }
            _ => {
                server.tracker.client_sent(tag::QUERY, &[]);
                return Sent::AsIs;
            }
        };
        self.out.extend_from_slice(run);
        if !server.statements.holds(stmt) {
            evict_for(server, self.out, stmt);
            inject_parse(
                server,
                self.out,
                registry,
                stmt,
                stmt.server_name_cstr(),
                ServerEffect::Prepared(stmt.id),
            );
            if !stmt.is_sql() {
                sync_before_query(server, self.out);
            }
        }
        send_query(server, self.out, &with_name(sql, &span, stmt.server_name()));
        server.tracker.push(Pending::plain(Request::Query));
        Sent::Replaced
    }

    /// A query of several statements that names pgvia's statements (see
    /// [`reserved_name_error`]): refused whole, with `error`, the server failing in its place.
    pub fn refuse_query(&mut self, run: &[u8], error: Bytes) -> Sent {
        if self.server.tracker.is_skipping() {
            self.server.tracker.client_sent(tag::QUERY, &[]);
            return Sent::AsIs;
        }
        fail_query(&mut self.server, self.out, run, error);
        Sent::Replaced
    }

    /// SQL `DEALLOCATE name` (or `ALL` when `None`): only the client's names go; the server
    /// keeps its statements for other clients, and pgvia answers.
    pub fn deallocate_sql(&mut self, run: &[u8], name: Option<&str>) -> Sent {
        if self.server.tracker.is_skipping() {
            self.server.tracker.client_sent(tag::QUERY, &[]);
            return Sent::AsIs;
        }
        let (tag, client_effect) = match name {
            None => {
                self.client.clear();
                ("DEALLOCATE ALL", None)
            }
            Some(name) => match self.client.unbind(name) {
                Some(stmt) => ("DEALLOCATE", Some(ClientEffect::Closed { name: name.into(), stmt })),
                // pgvia's own statement, which other clients use: unknown to this client.
                None if is_reserved_name(name) => {
                    fail_query(&mut self.server, self.out, run, no_such_statement(name));
                    return Sent::Replaced;
                }
                // The server reports the unknown name as PostgreSQL would.
                None => {
                    self.server.tracker.client_sent(tag::QUERY, &[]);
                    return Sent::AsIs;
                }
            },
        };
        self.out.extend_from_slice(run);
        self.server.tracker.push(Pending {
            request: Request::AnsweredCommand(tag),
            replies: Replies::Forward,
            server_effect: None,
            client_effect,
        });
        Sent::Replaced
    }

    /// Sends a message that uses a statement: as it came when the statement is the server's
    /// unnamed one already, otherwise with the statement parsed first and, for a named one,
    /// renamed by `rename`. Borrows the statement from the client's map (no reference count
    /// traffic on this per-message path).
    fn use_statement(
        &mut self,
        run: &[u8],
        frame: &[u8],
        name: &str,
        request: Request,
        rename: impl FnOnce(&mut BytesMut, &Statement, &[u8]) -> bool,
    ) -> Sent {
        // An exchange that starts with a Bind or Describe of a named statement outside any
        // transaction is recorded, to be sent again if the server's plan of it is stale.
        let replay_from = !name.is_empty() && self.server.tracker.at_idle_boundary();
        let registry = self.client.registry();
        let server = &mut self.server;
        let out = &mut *self.out;
        let stmt = match self.client.get(name) {
            Some(s) if !server.tracker.is_skipping() => s,
            // A name the client never prepared: the server reports it as PostgreSQL would,
            // except that an unnamed slot holding someone else's statement must not be used.
            None if name.is_empty() && server.statements.unnamed.is_some() => {
                fail(server, out, run, no_such_statement(name));
                return Sent::Replaced;
            }
            // pgvia's name for a statement of other clients: unknown to this one.
            None if is_reserved_name(name) && !server.tracker.is_skipping() => {
                fail(server, out, run, no_such_statement(name));
                return Sent::Replaced;
            }
            _ => {
                server.tracker.push(Pending::plain(request));
                return Sent::AsIs;
            }
        };
        if name.is_empty() {
            if server.statements.holds_unnamed(stmt) {
                server.tracker.push(Pending::plain(request));
                return Sent::AsIs;
            }
            out.extend_from_slice(run);
            let prev = server.statements.set_unnamed(stmt.id);
            inject_parse(server, out, registry, stmt, b"\0", ServerEffect::Unnamed { prev });
            out.extend_from_slice(frame);
            server.tracker.push(Pending::plain(request));
            return Sent::Replaced;
        }
        out.extend_from_slice(run);
        if !server.statements.holds(stmt) {
            evict_for(server, out, stmt);
            inject_parse(
                server,
                out,
                registry,
                stmt,
                stmt.server_name_cstr(),
                ServerEffect::Prepared(stmt.id),
            );
        }
        if !rename(out, stmt, frame) {
            // Unreachable for a frame that passed validation; send it as it came.
            out.extend_from_slice(frame);
        }
        server.tracker.push(Pending::plain(request));
        if replay_from {
            server.tracker.mark_replay_start(stmt.id);
            self.client.replay.start();
        }
        Sent::Replaced
    }
}

pub(super) fn inject_parse(
    server: &mut ServerSide<'_>,
    out: &mut BytesMut,
    registry: &crate::prepared::Registry,
    stmt: &Statement,
    name_cstr: &[u8],
    effect: ServerEffect,
) {
    registry.stats.injected_parses.fetch_add(1, Ordering::Relaxed);
    let request = match stmt.sql_prepare() {
        Some(prepare) => {
            send_query(server, out, &prepare);
            Request::Query
        }
        None => {
            stmt.write_parse(out, name_cstr);
            Request::Parse
        }
    };
    server.tracker.push(Pending {
        request,
        replies: Replies::DropSuccess,
        server_effect: Some(effect),
        client_effect: None,
    });
}

/// After a Parse pgvia injects ahead of a simple query: a Parse that fails makes the server
/// skip every message up to a Sync, the query included, which would then never be answered.
/// This Sync (its reply dropped) ends that, so the query runs and reports its own error. Not
/// inside an extended-protocol batch the client left open, which a Sync would end.
pub(super) fn sync_before_query(server: &mut ServerSide<'_>, out: &mut BytesMut) {
    if server.tracker.batch() != crate::server::tracker::Batch::Closed {
        return;
    }
    build::frame(out, tag::SYNC, |_| {});
    server.tracker.push(Pending {
        request: Request::Sync,
        replies: Replies::DropAll,
        server_effect: None,
        client_effect: None,
    });
}

/// Records `stmt` as held by the server, closing there an older plan of it and the statement
/// it displaces.
pub(crate) fn evict_for(server: &mut ServerSide<'_>, out: &mut BytesMut, stmt: &Arc<Statement>) {
    if let Some(stale) = server.statements.take_stale(stmt) {
        close_on_server(server, out, stale);
    }
    let Some(evicted) = server.statements.insert(stmt) else { return };
    close_on_server(server, out, evicted);
}

fn close_on_server(server: &mut ServerSide<'_>, out: &mut BytesMut, evicted: Arc<Statement>) {
    let effect = ServerEffect::Evicted(evicted.clone());
    write_close(server.tracker, out, evicted.server_name_cstr(), Replies::DropSuccess, Some(effect));
}

/// Writes a Close of the server statement `name_cstr` (with its NUL) and queues its reply; the
/// one way pgvia closes a statement of its own on a server.
pub(crate) fn write_close(
    tracker: &mut ReplyTracker,
    out: &mut BytesMut,
    name_cstr: &[u8],
    replies: Replies,
    server_effect: Option<ServerEffect>,
) {
    build::frame(out, tag::CLOSE, |b| {
        b.put_u8(b'S');
        b.put_slice(name_cstr);
    });
    tracker.push(Pending { request: Request::Close, replies, server_effect, client_effect: None });
}

/// Writes a simple query of pgvia's; like any simple query, it replaces the server's
/// unnamed statement.
pub(super) fn send_query(server: &mut ServerSide<'_>, out: &mut BytesMut, sql: &str) {
    build::query(out, sql);
    server.statements.unnamed = None;
}

/// A query of several statements goes to the server as it came, names unchanged, so one
/// that `EXECUTE`s or `DEALLOCATE`s a name of pgvia's would reach the statement other
/// clients use, and a `PREPARE` of one would take the name from pgvia. Such a query is
/// refused whole, with the error PostgreSQL gives that statement: 26000 for the first two
/// (the client has no statement of that name on the server), 42P05 for `PREPARE` (pgvia
/// holds that name there). Unlike PostgreSQL, the statements before it do not run.
pub fn reserved_name_error(analysis: &route::Analysis) -> Option<Bytes> {
    analysis.statements().find_map(|s| {
        let name = s.name().filter(|n| is_reserved_name(n))?;
        match s.kind() {
            route::StatementKind::Execute | route::StatementKind::Deallocate => Some(no_such_statement(name)),
            route::StatementKind::Prepare => Some(duplicate_statement(name)),
            _ => None,
        }
    })
}

pub(super) fn limit_error(limit: StatementLimit) -> Bytes {
    let mut error = BytesMut::new();
    limit.write_error(&mut error);
    error.freeze()
}

/// As [`fail`], for a simple query: a `DEALLOCATE` of a name no statement has.
fn fail_query(server: &mut ServerSide<'_>, out: &mut BytesMut, run: &[u8], error: Bytes) {
    out.extend_from_slice(run);
    send_query(server, out, "DEALLOCATE pgvia_0");
    server.tracker.push(Pending {
        request: Request::Query,
        replies: Replies::ReplaceError(error),
        server_effect: None,
        client_effect: None,
    });
}

/// Makes the server fail in the client message's place, so it skips to the next Sync and
/// aborts an open transaction exactly as for the client's own error, and gives the client
/// `error`, the one PostgreSQL would have given (or pgvia's own, for a cap).
fn fail(server: &mut ServerSide<'_>, out: &mut BytesMut, run: &[u8], error: Bytes) {
    out.extend_from_slice(run);
    out.put_u8(tag::DESCRIBE);
    out.put_i32((4 + 1 + NO_SUCH_STATEMENT.len()) as i32);
    out.put_u8(b'S');
    out.put_slice(NO_SUCH_STATEMENT);
    server.tracker.push(Pending {
        request: Request::DescribeStatement { params_seen: false },
        replies: Replies::ReplaceError(error),
        server_effect: None,
        client_effect: None,
    });
}

fn memchr(b: &[u8]) -> Option<usize> {
    b.iter().position(|&c| c == 0)
}

/// A reply pgvia gives in the server's place.
pub fn write_answer(out: &mut BytesMut, answer: Answer) {
    match answer {
        Answer::Empty(tag) => build::frame(out, tag, |_| {}),
        Answer::Command(_, TransactionStatus::Failed) => {
            let message = "current transaction is aborted, commands ignored until end of transaction block";
            ErrorFields::error(SqlState::IN_FAILED_SQL_TRANSACTION, message).write(out);
            build::ready_for_query(out, TransactionStatus::Failed.as_byte());
        }
        Answer::Command(tag, status) => {
            build::command_complete(out, tag);
            build::ready_for_query(out, status.as_byte());
        }
    }
}

/// Applies the outcome of settled requests: what succeeded gives back the references it no
/// longer needs; what the server failed or skipped is undone, newest first. Without a client
/// (it has left), only the references are given back.
pub fn settle(
    finished: impl DoubleEndedIterator<Item = Finished>,
    server: &mut ServerStatements,
    mut client: Option<&mut ClientStatements>,
) {
    for f in finished.rev() {
        if !f.ok {
            match f.server_effect {
                Some(ServerEffect::Prepared(id)) => server.forget(id),
                Some(ServerEffect::Evicted(stmt)) => server.restore(stmt),
                Some(ServerEffect::Unnamed { prev }) => server.restore_unnamed(prev),
                Some(ServerEffect::ReplayFrom { .. }) | None => {}
            }
        }
        let Some(effect) = f.client_effect else { continue };
        match (effect, f.ok, client.as_deref_mut()) {
            (ClientEffect::Bound { name, prev }, false, Some(c)) => c.restore(&name, prev),
            (ClientEffect::Closed { name, stmt }, false, Some(c)) => c.restore(&name, Some(stmt)),
            (ClientEffect::Bound { prev: Some(stmt), .. } | ClientEffect::Closed { stmt, .. }, _, _) => {
                server.release_client_ref(&stmt)
            }
            (ClientEffect::Bound { prev: None, .. }, _, _) => {}
        }
    }
}

#[cfg(test)]
#[path = "forward_tests.rs"]
mod tests;
