//! What pgvia answers for a client that holds no server: lone transaction-control
//! statements (a `BEGIN` is deferred to the first real statement, so where that runs can still
//! be chosen), `pgvia.role`, and statement commands, which only change the client's own
//! statement names (the statements reach a server when they are used).

use bytes::Buf;
use wire::backend::TransactionStatus;
use wire::frontend::{FrontendMessage, Oids};

use route::StatementKind;
use wire::sqlstate::SqlState;

use super::client::{parts, statements};
use super::client::{Discard, Session};
use super::deferred::DeferredBegin;
use super::exchange::RelayEnd;
use super::statement_mode;
use crate::config::PoolMode;
use crate::config::RolePreference;
use crate::prepared::sql::{SqlStatement, SQL_PREPARE_KEY};
use crate::routing::decide;

/// A transaction-control statement pgvia answers itself while the client holds no server.
pub(super) enum Local {
    /// A lone `BEGIN`/`START TRANSACTION`: the server is taken at the first real statement, so
    /// where that statement should run can still be chosen. Carries the command tag.
    Begin(&'static str),
    /// `COMMIT`/`ROLLBACK` of a transaction that never needed a server.
    End(&'static str),
    /// Statement mode: a Query that opens a transaction block.
    RefuseQuery,
    /// Statement mode: a Parse that opens a transaction block; what follows up to the Sync is
    /// discarded.
    RefuseParse,
    /// `SET pgvia.role` / `RESET pgvia.role`: where this session's transactions go; `None`
    /// for a value that is not a role.
    SetRole(Option<RolePreference>, &'static str),
    /// `SHOW pgvia.role`.
    ShowRole,
    /// A message after a refused Parse, up to and including the Sync.
    Discard,
}

/// Whether a simple query is a lone transaction-control statement that needs no server yet.
fn local_answer(analysis: &route::Analysis, sql: &[u8], begun: bool) -> Option<Local> {
    if analysis.is_conservative() || analysis.len() != 1 {
        return None;
    }
    let statement = analysis.statement(0)?;
    if let Some((role, tag)) = decide::role_setting(analysis) {
        return Some(Local::SetRole(role, tag));
    }
    if decide::shows_role(analysis) {
        return Some(Local::ShowRole);
    }
    match (statement.kind(), begun) {
        (StatementKind::Begin(_), false) => {
            // A lone BEGIN has no constants, so its analysis is its own text's (not a shape's)
            // and the location is in `sql`.
            let text = sql.get(statement.location())?;
            let started = text.trim_ascii_start().get(..5).is_some_and(|w| w.eq_ignore_ascii_case(b"START"));
            Some(Local::Begin(if started { "START TRANSACTION" } else { "BEGIN" }))
        }
        (StatementKind::Commit { chain: false }, true) => Some(Local::End("COMMIT")),
        (StatementKind::Rollback { chain: false }, true) => Some(Local::End("ROLLBACK")),
        _ => None,
    }
}

impl Session<'_> {
    /// What pgvia answers itself for the client's first waiting message (its first `len`
    /// bytes), if anything; `Err` for a message that ends the session (Terminate, or one that
    /// is not valid: garbage must not cost a server).
    pub(super) fn local_answer_for(&mut self, len: usize) -> Result<Option<Local>, RelayEnd> {
        let statement_mode = self.pool.settings.pool_mode == PoolMode::Statement;
        let parts = parts!(self);
        let frame = &parts.bufs.from_client[..len];
        // A transaction that failed without a server is the server's to answer.
        let failed = matches!(self.deferred_begin, Some(DeferredBegin::Failed(_)));
        Ok(match (frame[0], FrontendMessage::parse_body(frame[0], &frame[5..])) {
            (_, Err(e)) if frame[0] != wire::frontend::tag::COPY_DATA => {
                return Err(RelayEnd::Error(e.into()))
            }
            (wire::frontend::tag::TERMINATE, _) => return Err(RelayEnd::ClientDone),
            _ if self.discard == Discard::UntilSync => Some(Local::Discard),
            (_, Ok(FrontendMessage::Query { sql })) if statement_mode => {
                let analysis = parts.memo.analyze(&self.app.analyzer, sql);
                statement_mode::opens_transaction(&analysis).then_some(Local::RefuseQuery)
            }
            (_, Ok(FrontendMessage::Parse(p))) if statement_mode => {
                let analysis = self.app.analyzer.analyze_bytes(p.query, &[]);
                statement_mode::opens_transaction(&analysis).then_some(Local::RefuseParse)
            }
            (_, Ok(FrontendMessage::Query { sql }))
                if self.pool.settings.pool_mode != PoolMode::Session && !failed =>
            {
                let analyzer = &self.app.analyzer;
                let standard = self.state.standard_strings(&self.told);
                let analysis = analyzer.for_session(parts.memo.analyze(analyzer, sql), sql, standard);
                local_answer(&analysis, sql, self.deferred_begin.is_some())
            }
            _ => None,
        })
    }

    /// Answers a transaction-control statement without a server (see [`local_answer`]).
    pub(super) fn answer_locally(&mut self, local: Local, len: usize) {
        let frame = parts!(self).bufs.from_client.split_to(len);
        // A BEGIN answered locally is a transaction as far as the client knows.
        let local_status = self.local_status();
        let out = &mut parts!(self).bufs.to_client;
        let (tag, status) = match local {
            Local::RefuseQuery => {
                statement_mode::write_refusal(out);
                wire::build::ready_for_query(out, TransactionStatus::Idle.as_byte());
                return;
            }
            Local::RefuseParse => {
                statement_mode::write_refusal(out);
                self.discard = Discard::UntilSync;
                return;
            }
            Local::ShowRole => {
                use crate::admin::rows::{Kind, RowSet};
                let mut rows = RowSet::new(&[(decide::ROLE_SETTING, Kind::Text)]);
                rows.push(vec![self.role.as_str().into()]);
                rows.write(out, "SHOW");
                wire::build::ready_for_query(out, local_status.as_byte());
                return;
            }
            Local::SetRole(role, tag) => {
                match role {
                    Some(role) => {
                        self.role = role;
                        wire::build::command_complete(out, tag);
                    }
                    None => wire::build::ErrorFields::error(
                        SqlState::INVALID_PARAMETER_VALUE,
                        "invalid value for parameter \"pgvia.role\": expected primary, replica or auto",
                    )
                    .write(out),
                }
                wire::build::ready_for_query(out, local_status.as_byte());
                return;
            }
            Local::Discard => {
                if frame[0] == wire::frontend::tag::SYNC {
                    self.discard = Discard::Nothing;
                    wire::build::ready_for_query(out, local_status.as_byte());
                }
                return;
            }
            Local::Begin(tag) => {
                self.deferred_begin = Some(DeferredBegin::Begun(frame.freeze()));
                (tag, TransactionStatus::InTransaction)
            }
            Local::End(tag) => {
                self.deferred_begin = None;
                (tag, TransactionStatus::Idle)
            }
        };
        wire::build::command_complete(&mut parts!(self).bufs.to_client, tag);
        wire::build::ready_for_query(&mut parts!(self).bufs.to_client, status.as_byte());
    }

    /// Answers the client's first waiting message when it is a lone prepare or a SQL
    /// `PREPARE`/`DEALLOCATE`; returns false when it needs a server after all.
    pub(super) fn answer_statement_command(&mut self, len: usize) -> bool {
        match parts!(self).bufs.from_client[0] {
            wire::frontend::tag::PARSE => self.prepare_locally(len),
            wire::frontend::tag::QUERY => self.sql_locally(len),
            _ => false,
        }
    }

    /// A lone Parse + Sync (libpq's `PQprepare`, pgbench's `-M prepared`) from a client
    /// outside any transaction only names a statement: pgvia records it and answers, and the
    /// statement reaches a server when it is first used. Besides saving a round trip, this
    /// keeps a client that prepares synchronously from waiting for a server that a client
    /// sharing its thread holds. PostgreSQL's own checks (a missing table, say) then come
    /// with that first use; a statement PostgreSQL's parser rejects still goes to a server so
    /// the error comes now, as does a name already in use.
    fn prepare_locally(&mut self, parse_len: usize) -> bool {
        let Some(statements) = statements!(self) else { return false };
        if self.deferred_begin.is_some() {
            return false;
        }
        let buf = &parts!(self).bufs.from_client;
        let rest = &buf[parse_len..];
        if rest.len() < 5 || rest[0] != wire::frontend::tag::SYNC || rest[1..5] != [0, 0, 0, 4] {
            return false;
        }
        let Ok(FrontendMessage::Parse(p)) = FrontendMessage::parse_body(buf[0], &buf[5..parse_len]) else {
            return false;
        };
        if p.name.is_empty() || statements.get(p.name).is_some() {
            return false;
        }
        let analyzer = &self.app.analyzer;
        let resolved = statements.admit(p.name).and_then(|()| {
            statements.resolve(p.query, p.param_types, || {
                let oids: Vec<u32> = p.param_types.iter().collect();
                analyzer.analyze_bytes(p.query, &oids)
            })
        });
        let stmt = match resolved {
            Ok(stmt) => stmt,
            // Refused as PostgreSQL refuses a Parse: an error, and the session goes on. This
            // is what a flood of prepares meets, so it costs no server and no analysis.
            Err(limit) => {
                parts!(self).bufs.from_client.advance(parse_len + 5);
                limit.write_error(&mut parts!(self).bufs.to_client);
                wire::build::ready_for_query(
                    &mut parts!(self).bufs.to_client,
                    TransactionStatus::Idle.as_byte(),
                );
                return true;
            }
        };
        if stmt.analysis.is_conservative() {
            statements.release(&stmt);
            return false;
        }
        let analysis = stmt.analysis.clone();
        if statements.bind_name(p.name, stmt).is_err() {
            return false;
        }
        self.state.observe(&analysis, super::state::Via::Query);
        parts!(self).bufs.from_client.advance(parse_len + 5);
        wire::build::parse_complete(&mut parts!(self).bufs.to_client);
        wire::build::ready_for_query(&mut parts!(self).bufs.to_client, TransactionStatus::Idle.as_byte());
        true
    }

    /// SQL `PREPARE` and `DEALLOCATE` only change the client's own names: pgvia answers them
    /// (`EXECUTE` brings the statement to a server). A name already in use, or one
    /// `DEALLOCATE` does not know, gets PostgreSQL's own error from a server.
    fn sql_locally(&mut self, len: usize) -> bool {
        let Some(statements) = statements!(self) else { return false };
        let parts = parts!(self);
        let frame = &parts.bufs.from_client[..len];
        let Ok(FrontendMessage::Query { sql }) = FrontendMessage::parse_body(frame[0], &frame[5..]) else {
            return false;
        };
        let analyzer = &self.app.analyzer;
        let standard = self.state.standard_strings(&self.told);
        let analysis = analyzer.for_session(parts.memo.analyze(analyzer, sql), sql, standard);
        // Text in a client encoding other than UTF-8 was not analysed: no command of these.
        let Ok(sql) = std::str::from_utf8(sql) else { return false };
        let tag = match SqlStatement::of(sql, &analysis) {
            Some(SqlStatement::Prepare { name, span }) => {
                if statements.get(name).is_some() {
                    return false;
                }
                let key = format!("{SQL_PREPARE_KEY}{}", &sql[span.end..]);
                // Past a cap, the relay reports it (in order, and failing an open
                // transaction as PostgreSQL would).
                let Ok(stmt) = statements
                    .admit(name)
                    .and_then(|()| statements.resolve(key.as_bytes(), Oids::new(&[]), || analysis.clone()))
                else {
                    return false;
                };
                if statements.bind_name(name, stmt).is_err() {
                    return false;
                }
                "PREPARE"
            }
            Some(SqlStatement::Deallocate { name: None }) => {
                statements.clear();
                "DEALLOCATE ALL"
            }
            Some(SqlStatement::Deallocate { name: Some(name) }) => match statements.unbind(name) {
                Some(stmt) => {
                    statements.release(&stmt);
                    "DEALLOCATE"
                }
                None => return false,
            },
            _ => return false,
        };
        // A simple query replaces the unnamed statement.
        statements.drop_unnamed();
        self.state.observe(&analysis, super::state::Via::Query);
        parts!(self).bufs.from_client.advance(len);
        let status = self.local_status();
        wire::build::command_complete(&mut parts!(self).bufs.to_client, tag);
        wire::build::ready_for_query(&mut parts!(self).bufs.to_client, status.as_byte());
        true
    }
}

/// The message PostgreSQL gives a statement cancelled at the client's request.
pub(super) const CANCELLED: &str = "canceling statement due to user request";

impl Session<'_> {
    /// The client's first waiting request was cancelled while it waited for a server: it is
    /// answered as PostgreSQL answers a statement cancelled at once (57014), nothing of it
    /// having run, and the session goes on. A simple query (or function call) ends there; an
    /// extended-protocol batch is skipped up to its Sync (`Discard::UntilSync`), which is
    /// answered with ReadyForQuery. Inside a transaction the transaction is failed, as it
    /// would be on a server.
    pub(super) fn answer_cancelled(&mut self) {
        let Ok(Some(len)) = self.decoder.peek_len(&parts!(self).bufs.from_client) else { return };
        let tag = parts!(self).bufs.from_client[0];
        wire::build::ErrorFields::error(SqlState::QUERY_CANCELED, CANCELLED)
            .write(&mut parts!(self).bufs.to_client);
        if let Some(deferred) = &self.deferred_begin {
            self.deferred_begin = Some(deferred.failed());
        }
        if matches!(tag, wire::frontend::tag::QUERY | wire::frontend::tag::FUNCTION_CALL) {
            parts!(self).bufs.from_client.advance(len);
            let status = self.local_status();
            wire::build::ready_for_query(&mut parts!(self).bufs.to_client, status.as_byte());
        } else {
            self.discard = Discard::UntilSync;
        }
    }

    /// The transaction status the client knows while it holds no server.
    pub(super) fn local_status(&self) -> TransactionStatus {
        match self.deferred_begin {
            None => TransactionStatus::Idle,
            Some(DeferredBegin::Begun(_)) => TransactionStatus::InTransaction,
            Some(DeferredBegin::Failed(_)) => TransactionStatus::Failed,
        }
    }
}
