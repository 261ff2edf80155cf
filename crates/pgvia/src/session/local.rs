//! Statement commands pgvia answers for a client that holds no server: they only change the
//! client's own statement names, and the statements reach a server when they are used.

use bytes::Buf;
use wire::backend::TransactionStatus;
use wire::frontend::{FrontendMessage, Oids};

use super::client::Session;
use crate::prepared::sql::{SqlStatement, SQL_PREPARE_KEY};

impl Session<'_> {
    /// Answers the client's first waiting message when it is a lone prepare or a SQL
    /// `PREPARE`/`DEALLOCATE`; returns false when it needs a server after all.
    pub(super) fn answer_statement_command(&mut self, len: usize) -> bool {
        match self.bufs.from_client[0] {
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
        let Some(statements) = self.statements.as_mut() else { return false };
        if self.deferred_begin.is_some() {
            return false;
        }
        let buf = &self.bufs.from_client;
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
                self.bufs.from_client.advance(parse_len + 5);
                limit.write_error(&mut self.bufs.to_client);
                wire::build::ready_for_query(&mut self.bufs.to_client, TransactionStatus::Idle.as_byte());
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
        self.state.observe(&analysis);
        self.bufs.from_client.advance(parse_len + 5);
        wire::build::parse_complete(&mut self.bufs.to_client);
        wire::build::ready_for_query(&mut self.bufs.to_client, TransactionStatus::Idle.as_byte());
        true
    }

    /// SQL `PREPARE` and `DEALLOCATE` only change the client's own names: pgvia answers them
    /// (`EXECUTE` brings the statement to a server). A name already in use, or one
    /// `DEALLOCATE` does not know, gets PostgreSQL's own error from a server.
    fn sql_locally(&mut self, len: usize) -> bool {
        let Some(statements) = self.statements.as_mut() else { return false };
        let frame = &self.bufs.from_client[..len];
        let Ok(FrontendMessage::Query { sql }) = FrontendMessage::parse_body(frame[0], &frame[5..]) else {
            return false;
        };
        let analysis = self.memo.analyze(&self.app.analyzer, sql);
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
        self.state.observe(&analysis);
        self.bufs.from_client.advance(len);
        let status = if self.deferred_begin.is_some() {
            TransactionStatus::InTransaction
        } else {
            TransactionStatus::Idle
        };
        wire::build::command_complete(&mut self.bufs.to_client, tag);
        wire::build::ready_for_query(&mut self.bufs.to_client, status.as_byte());
        true
    }
}
