//! SQL that names a client's prepared statements anywhere in a query: `EXECUTE`,
//! `EXPLAIN EXECUTE`, `CREATE TABLE ... AS EXECUTE`, `PREPARE` and `DEALLOCATE` among other
//! statements of one simple query (a query made of one `PREPARE`, `EXECUTE` or `DEALLOCATE`
//! alone is answered by [`super::forward`] without this).
//!
//! PostgreSQL has one namespace for statements made by protocol Parse and by SQL `PREPARE`;
//! on pgvia's servers they live under pgvia's names. So each name in the text is looked up
//! as the client's namespace stands at that point of the query (earlier `PREPARE`s and
//! `DEALLOCATE`s of the same query counted) and replaced by pgvia's name; statements the
//! server lacks are parsed on it first, and a `PREPARE` of a statement the server may hold
//! closes it there first. A name the client does not have stays as written, so the server
//! reports it with PostgreSQL's own error at the right place in the query.
//!
//! Server statements are shared, so what only changes the client's names must not change
//! them: a `DEALLOCATE` (and a `PREPARE` of a text the query already uses) is pointed at a
//! scratch statement made for the query and closed after it, which gives the client the
//! command's own reply in its place and leaves pgvia's statements alone.
//!
//! The client's names change as the query is sent (as for a lone `PREPARE`, whose statement
//! pgvia records before the server checks it). A `PREPARE` of a name in use is refused whole,
//! with PostgreSQL's 42P05, before the statements ahead of it run.

use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use wire::frontend::{tag, Oids};
use wire::sqlstate::SqlState;

use super::forward::{evict_for, inject_parse, limit_error, send_query, sync_before_query, Forward, Sent};
use super::tracker::{Pending, Replies, Request};
use crate::prepared::sql::{executed_name_span, name_span, SQL_PREPARE_KEY};
use crate::prepared::{duplicate_statement, no_such_statement};
use crate::prepared::{is_reserved_name, ServerEffect, Statement};

/// What one statement of the query does with a statement name.
enum Use<'a> {
    /// Runs it: `EXECUTE`, `EXPLAIN EXECUTE`, `CREATE TABLE AS EXECUTE`.
    Run(&'a str),
    Prepare(&'a str),
    Deallocate(&'a str),
    DeallocateAll,
}

fn use_of<'a>(s: &route::Statement<'a>) -> Option<Use<'a>> {
    use route::StatementKind as K;
    Some(match (s.kind(), s.name()) {
        (K::Execute | K::Explain { .. } | K::CreateTable { .. }, Some(name)) => Use::Run(name),
        (K::Prepare, Some(name)) => Use::Prepare(name),
        (K::Deallocate, Some(name)) => Use::Deallocate(name),
        (K::Deallocate, None) => Use::DeallocateAll,
        _ => return None,
    })
}

/// A change to the client's names, in query order.
enum NameChange {
    Bind(Box<str>, Arc<Statement>),
    Unbind(Box<str>),
    Clear,
}

/// What the query needs before and after it and how its text changes.
#[derive(Default)]
struct Plan {
    changes: Vec<NameChange>,
    /// Server statements the query uses so far (since its last `DEALLOCATE ALL`).
    used: Vec<Arc<Statement>>,
    /// Statements a `PREPARE` of the query makes under pgvia's name: of unknown state on
    /// the server afterwards (the query may stop before it).
    prepared: Vec<Arc<Statement>>,
    /// Parsed on the server ahead of the query.
    parse_first: Vec<Arc<Statement>>,
    /// Closed on the server ahead of the query (a `PREPARE` makes them again).
    close_first: Vec<Arc<Statement>>,
    /// Scratch statements: made ahead of the query (with `SELECT 1`, for a `DEALLOCATE`) or
    /// by it (a `PREPARE`), and closed after it.
    scratch: Vec<(String, Scratch)>,
    renames: Vec<(Range<usize>, String)>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Scratch {
    ParsedFirst,
    MadeByQuery,
}

impl Plan {
    fn uses(&self, stmt: &Statement) -> bool {
        self.used.iter().any(|s| s.id == stmt.id)
    }
}

impl Forward<'_> {
    /// Handles a simple query of several statements (or one that names a statement inside
    /// another) that names prepared statements; `None` when it names none, and the query goes
    /// on as it came.
    pub fn sql_names(&mut self, run: &[u8], sql: &str, analysis: &route::Analysis) -> Option<Sent> {
        if analysis.is_conservative() {
            return None;
        }
        let uses: Vec<(Range<usize>, Use<'_>)> =
            analysis.statements().filter_map(|s| Some((s.location(), use_of(&s)?))).collect();
        if uses.iter().all(|(_, u)| matches!(u, Use::DeallocateAll)) {
            return None;
        }
        if self.server.tracker.is_skipping() {
            self.server.tracker.client_sent(tag::QUERY, &[]);
            return Some(Sent::AsIs);
        }
        let mut plan = Plan::default();
        let mut failure = None;
        for (location, u) in &uses {
            let Some(text) = sql.get(location.clone()) else {
                failure = Some(unsupported());
                break;
            };
            if let Err(error) = self.plan_one(&mut plan, location.start, text, u) {
                failure = Some(error);
                break;
            }
        }
        let copies = analysis.statements().any(|s| matches!(s.kind(), route::StatementKind::Copy { .. }));
        if failure.is_none() && copies && !plan.scratch.is_empty() {
            // The scratch statements are closed right behind the query, where a COPY it
            // starts would take those messages for a broken copy stream.
            failure = Some(unsupported());
        }
        if let Some(error) = failure {
            // Give back the references the query's PREPAREs took.
            for change in plan.changes {
                if let NameChange::Bind(_, stmt) = change {
                    self.client.release(&stmt);
                }
            }
            return Some(self.refuse_query(run, error));
        }
        Some(self.send_planned(run, sql, plan))
    }

    /// The client's statement for `name` as the query so far leaves it.
    fn lookup(&self, plan: &Plan, name: &str) -> Option<Arc<Statement>> {
        for change in plan.changes.iter().rev() {
            match change {
                NameChange::Bind(n, stmt) if **n == *name => return Some(stmt.clone()),
                NameChange::Unbind(n) if **n == *name => return None,
                NameChange::Clear => return None,
                _ => {}
            }
        }
        self.client.get(name).cloned()
    }

    fn plan_one(&mut self, plan: &mut Plan, offset: usize, text: &str, u: &Use<'_>) -> Result<(), Bytes> {
        let at = |r: Range<usize>| r.start + offset..r.end + offset;
        match *u {
            Use::Run(name) => {
                let Some(stmt) = self.lookup(plan, name) else {
                    // pgvia's name for other clients' statement; else the server says it.
                    return if is_reserved_name(name) { Err(no_such_statement(name)) } else { Ok(()) };
                };
                let span = executed_name_span(text, name).ok_or_else(unsupported)?;
                if !plan.uses(&stmt) {
                    if !self.server.statements.holds(&stmt) {
                        plan.parse_first.push(stmt.clone());
                    }
                    plan.used.push(stmt.clone());
                }
                plan.renames.push((at(span), stmt.server_name().to_owned()));
            }
            Use::Prepare(name) => {
                if self.lookup(plan, name).is_some() || is_reserved_name(name) {
                    return Err(duplicate_statement(name));
                }
                let span = name_span(text, "PREPARE").ok_or_else(unsupported)?;
                let key = format!("{SQL_PREPARE_KEY}{}", &text[span.end..]);
                let analyzer = self.analyzer;
                let stmt = self
                    .client
                    .admit(name)
                    .and_then(|()| {
                        self.client.resolve(key.as_bytes(), Oids::new(&[]), || analyzer.analyze(text, &[]))
                    })
                    .map_err(limit_error)?;
                plan.changes.push(NameChange::Bind(name.into(), stmt.clone()));
                if plan.uses(&stmt) {
                    // The query has this statement on the server already: the PREPARE (which
                    // must still check the text where it stands) makes a scratch copy.
                    let scratch = self.client.registry().scratch_name();
                    plan.renames.push((at(span), scratch.clone()));
                    plan.scratch.push((scratch, Scratch::MadeByQuery));
                    return Ok(());
                }
                if self.server.statements.has_copy(&stmt) {
                    plan.close_first.push(stmt.clone());
                }
                plan.used.push(stmt.clone());
                plan.prepared.push(stmt.clone());
                plan.renames.push((at(span), stmt.server_name().to_owned()));
            }
            Use::Deallocate(name) => {
                if self.lookup(plan, name).is_none() {
                    return if is_reserved_name(name) { Err(no_such_statement(name)) } else { Ok(()) };
                }
                let span = name_span(text, "DEALLOCATE").ok_or_else(unsupported)?;
                // Only the client's name goes; the statement stays for other clients.
                let scratch = self.client.registry().scratch_name();
                plan.renames.push((at(span), scratch.clone()));
                plan.scratch.push((scratch, Scratch::ParsedFirst));
                plan.changes.push(NameChange::Unbind(name.into()));
            }
            Use::DeallocateAll => {
                // The server drops every statement there: later uses must make theirs again.
                plan.changes.push(NameChange::Clear);
                plan.used.clear();
            }
        }
        Ok(())
    }

    fn send_planned(&mut self, run: &[u8], sql: &str, plan: Plan) -> Sent {
        let registry = self.client.registry().clone();
        let server = &mut self.server;
        let out = &mut *self.out;
        out.extend_from_slice(run);
        for stmt in &plan.close_first {
            server.statements.forget(stmt.id);
            close_named(server, out, stmt.server_name_cstr());
        }
        let mut parses = false;
        for stmt in &plan.parse_first {
            evict_for(server, out, stmt);
            parses |= !stmt.is_sql();
            inject_parse(
                server,
                out,
                &registry,
                stmt,
                stmt.server_name_cstr(),
                ServerEffect::Prepared(stmt.id),
            );
        }
        for (name, _) in plan.scratch.iter().filter(|(_, s)| *s == Scratch::ParsedFirst) {
            parses = true;
            let mut cstr = name.clone().into_bytes();
            cstr.push(0);
            wire::build::frame(out, tag::PARSE, |b| {
                b.extend_from_slice(&cstr);
                b.extend_from_slice(b"SELECT 1\0\0\0");
            });
            server.tracker.push(Pending {
                request: Request::Parse,
                replies: Replies::DropAll,
                server_effect: None,
                client_effect: None,
            });
        }
        if parses {
            sync_before_query(server, out);
        }
        let mut text = String::with_capacity(sql.len() + 16 * plan.renames.len());
        let mut done = 0;
        let mut renames = plan.renames;
        renames.sort_by_key(|(span, _)| span.start);
        for (span, name) in &renames {
            text.push_str(&sql[done..span.start]);
            text.push_str(name);
            done = span.end;
        }
        text.push_str(&sql[done..]);
        send_query(server, out, &text);
        server.tracker.push(Pending::plain(Request::Query));
        if !plan.scratch.is_empty() {
            // Whether or not the query got to them, the scratch statements go (a Close of a
            // statement that does not exist is no error), with a Sync to end the batch.
            for (name, _) in &plan.scratch {
                let mut cstr = name.clone().into_bytes();
                cstr.push(0);
                close_named(server, out, &cstr);
            }
            wire::build::frame(out, tag::SYNC, |_| {});
            server.tracker.push(Pending {
                request: Request::Sync,
                replies: Replies::DropAll,
                server_effect: None,
                client_effect: None,
            });
        }
        // What the query does to the server's statements is known only once it ran (it may
        // stop early): each it made is of unknown state, closed before its next Parse there.
        if plan.changes.iter().any(|c| matches!(c, NameChange::Clear)) {
            server.statements.assume_unknown();
        }
        for stmt in plan.prepared {
            server.statements.restore(stmt);
        }
        for change in plan.changes {
            match change {
                NameChange::Bind(name, stmt) => {
                    // Checked free above; a refused bind gives the reference back.
                    let _ = self.client.bind_name(&name, stmt);
                }
                NameChange::Unbind(name) => {
                    if let Some(stmt) = self.client.unbind(&name) {
                        self.client.release(&stmt);
                    }
                }
                NameChange::Clear => self.client.clear(),
            }
        }
        Sent::Replaced
    }
}

/// A Close of the statement `name_cstr` (with its NUL), its reply dropped.
fn close_named(server: &mut super::forward::ServerSide<'_>, out: &mut bytes::BytesMut, name_cstr: &[u8]) {
    super::forward::write_close(server.tracker, out, name_cstr, Replies::DropAll, None);
}

/// A query pgvia cannot map onto its statements: a statement name it could not find in the
/// text (the parser found one), or `DEALLOCATE` beside a `COPY` in one query.
fn unsupported() -> Bytes {
    let mut error = bytes::BytesMut::new();
    wire::build::ErrorFields::error(
        SqlState::FEATURE_NOT_SUPPORTED,
        "pgvia cannot map the prepared statement names of this query onto its servers",
    )
    .with_hint("Send the EXECUTE, PREPARE or DEALLOCATE in a query of its own.")
    .write(&mut error);
    error.freeze()
}
