//! Transaction control sent through the extended protocol (JDBC, the HTTP gateway and other
//! drivers send `BEGIN`/`COMMIT` through Parse/Bind/Execute): answered by the session's own
//! transaction handling (`control.rs`) as the simple protocol's are, whether alone in a
//! batch, leading its statements, or ending them.

use bytes::{Bytes, BytesMut};
use route::StatementKind;
use wire::frontend::{tag as fe, FrontendMessage, Target as Which};

use super::{ShardedSession, Tx};
use crate::session::error::SessionError;

/// What a batch of transaction control alone needs (JDBC and others send `BEGIN`/`COMMIT`
/// through Parse/Bind/Execute).
pub(super) enum Control {
    /// The client's `BEGIN`/`START TRANSACTION` as a Query frame, its options with it.
    Begin(Bytes),
    Commit,
    Rollback,
    /// `SAVEPOINT`, `RELEASE` or `ROLLBACK TO` (the kind), naming a savepoint, with the
    /// statement as a Query frame (as the simple protocol's, replayed to shards that join).
    Savepoint(StatementKind, String, Bytes),
}

impl ShardedSession<'_> {
    /// A batch whose last statement before the Sync is `COMMIT` or `ROLLBACK` (a driver's or
    /// the HTTP gateway's transaction in one pipeline): the statements before it run as a batch
    /// of their own, its ReadyForQuery held back; then, unless one of them failed (PostgreSQL
    /// skips to the Sync then), the transaction ends as a `COMMIT` alone would end it.
    pub(super) async fn batch_then_end(
        &mut self,
        frames: Vec<Bytes>,
        control: Control,
        start: usize,
    ) -> Result<(), SessionError> {
        let mut first: Vec<Bytes> = frames[..start].to_vec();
        let mut sync = BytesMut::new();
        wire::build::sync(&mut sync);
        first.push(sync.freeze());
        let quiet = std::mem::replace(&mut self.quiet, true);
        self.errored = false;
        let result = Box::pin(self.batch(first)).await;
        self.quiet = quiet;
        result?;
        if self.errored || matches!(self.tx, Tx::Open { failed: true, .. }) {
            self.ready();
            return Ok(());
        }
        let end = frames.len() - 1;
        self.answer_control_messages(&frames[start..end]);
        match control {
            Control::Rollback => self.rollback().await,
            _ => self.commit().await?,
        }
        Ok(())
    }

    /// Where a trailing `COMMIT`/`ROLLBACK` (its Parse, Bind, Describe and Execute) starts,
    /// when the batch has other statements before it.
    pub(super) fn trailing_control(&self, frames: &[Bytes]) -> Option<(Control, usize)> {
        let (last, rest) = frames.split_last()?;
        if last[0] != fe::SYNC {
            return None;
        }
        let mut at = rest.len().checked_sub(1)?;
        if rest[at][0] != fe::EXECUTE {
            return None;
        }
        if at > 0 && rest[at - 1][0] == fe::DESCRIBE {
            at -= 1;
        }
        at = at.checked_sub(1)?;
        let sql = match FrontendMessage::parse_body(rest[at][0], &rest[at][5..]).ok()? {
            FrontendMessage::Bind(b) => match (b.statement.is_empty(), at.checked_sub(1).map(|p| &rest[p])) {
                (true, Some(parse)) if parse[0] == fe::PARSE => {
                    at -= 1;
                    match FrontendMessage::parse_body(parse[0], &parse[5..]).ok()? {
                        FrontendMessage::Parse(p) => Bytes::copy_from_slice(p.query),
                        _ => return None,
                    }
                }
                _ => self.statements.get(b.statement)?.sql.clone(),
            },
            _ => return None,
        };
        if at == 0 {
            return None;
        }
        if !may_be_control(&sql) {
            return None;
        }
        let analysis = self.app.analyzer.analyze_bytes(&sql, &[]);
        if analysis.len() != 1 {
            return None;
        }
        match analysis.statement(0)?.kind() {
            StatementKind::Commit { chain: false } => Some((Control::Commit, at)),
            StatementKind::Rollback { chain: false } => Some((Control::Rollback, at)),
            _ => None,
        }
    }

    /// A batch that starts with a transaction-control statement: which one, and how many
    /// of its frames (Parse/Bind/Describe/Execute) carry it.
    pub(super) fn leading_control(&mut self, frames: &[Bytes]) -> Option<(Control, usize)> {
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
        if !may_be_control(&sql) {
            return None;
        }
        let analysis = self.app.analyzer.analyze_bytes(&sql, &[]);
        if analysis.len() != 1 {
            return None;
        }
        let statement = analysis.statement(0)?;
        let control = match statement.kind() {
            StatementKind::Begin(_) => {
                let mut query = BytesMut::new();
                wire::build::frame(&mut query, fe::QUERY, |b| wire::build::put_cstr(b, &sql));
                Control::Begin(query.freeze())
            }
            StatementKind::Commit { chain: false } => Control::Commit,
            StatementKind::Rollback { chain: false } => Control::Rollback,
            kind @ (StatementKind::Savepoint
            | StatementKind::Release
            | StatementKind::RollbackToSavepoint) => {
                let mut query = BytesMut::new();
                wire::build::frame(&mut query, fe::QUERY, |b| wire::build::put_cstr(b, &sql));
                Control::Savepoint(kind, statement.name().unwrap_or_default().to_owned(), query.freeze())
            }
            _ => return None,
        };
        // COMMIT/ROLLBACK and savepoints must be alone before the Sync; BEGIN may lead other
        // statements.
        let alone = n + 1 == frames.len();
        if !(alone || matches!(control, Control::Begin(_))) {
            return None;
        }
        if parsed.is_some() && self.refused_parse(&frames[..1]).is_some() {
            // Its name is taken: the general path answers as PostgreSQL does.
            return None;
        }
        if let Some((name, types)) = parsed {
            let analysis = self.app.analyzer.analyze_bytes(&sql, &types);
            let statement = self.client_statement(sql, types, analysis);
            self.statements.insert(&name, statement);
        }
        Some((control, n))
    }

    /// The replies PostgreSQL gives to the Parse/Bind/Describe of a transaction-control
    /// statement (its CommandComplete and ReadyForQuery follow from the statement itself).
    pub(super) fn answer_control_messages(&mut self, frames: &[Bytes]) {
        for frame in frames {
            match frame[0] {
                fe::PARSE => wire::build::parse_complete(&mut self.to_client),
                fe::BIND => wire::build::frame(&mut self.to_client, b'2', |_| {}),
                fe::DESCRIBE => wire::build::frame(&mut self.to_client, b'n', |_| {}),
                _ => {}
            }
        }
    }
}

impl ShardedSession<'_> {
    /// In a failed transaction, a batch that only prepares `COMMIT`, `ROLLBACK` or `ROLLBACK
    /// TO` (Parse, Describe of it, Sync: a driver preparing the statement that ends the
    /// transaction) is answered as PostgreSQL answers it, which lets exactly those through
    /// (its Bind and Execute are then transaction control, above). `false` for anything
    /// else, which the failed transaction refuses.
    pub(super) fn prepares_transaction_end(&mut self, frames: &[Bytes]) -> bool {
        if !matches!(self.tx, Tx::Open { failed: true, .. }) {
            return false;
        }
        let Some((first, rest)) = frames.split_first() else { return false };
        let Ok(FrontendMessage::Parse(p)) = FrontendMessage::parse_body(first[0], &first[5..]) else {
            return false;
        };
        let describes_it = |f: &Bytes| {
            matches!(FrontendMessage::parse_body(f[0], &f[5..]),
                Ok(FrontendMessage::Describe { target: Which::Statement, name }) if name == p.name)
        };
        if !rest.iter().all(|f| f[0] == fe::SYNC || describes_it(f))
            || self.refused_parse(&frames[..1]).is_some()
        {
            return false;
        }
        let types: Vec<u32> = p.param_types.iter().collect();
        let analysis = self.app.analyzer.analyze_bytes(p.query, &types);
        let ends = analysis.len() == 1
            && analysis.statements().all(|s| {
                matches!(
                    s.kind(),
                    StatementKind::Commit { .. }
                        | StatementKind::Rollback { .. }
                        | StatementKind::RollbackToSavepoint
                )
            });
        if !ends {
            return false;
        }
        let name = p.name.to_owned();
        let statement = self.client_statement(Bytes::copy_from_slice(p.query), types, analysis);
        self.statements.insert(&name, statement);
        wire::build::parse_complete(&mut self.to_client);
        for _ in rest.iter().filter(|f| f[0] == fe::DESCRIBE) {
            // No parameters, no rows.
            wire::build::frame(&mut self.to_client, b't', |b| b.extend_from_slice(&0u16.to_be_bytes()));
            wire::build::frame(&mut self.to_client, b'n', |_| {});
        }
        self.ready();
        true
    }
}

/// Whether `sql` may be a transaction-control statement, from its first word: a text that
/// plainly starts with another (`SELECT`, `UPDATE`, ...) needs no analysis to say it is not.
/// A comment or anything unusual in front is left to the analysis.
pub(super) fn may_be_control(sql: &[u8]) -> bool {
    let text = sql.trim_ascii_start();
    let word_len = text.iter().take_while(|b| b.is_ascii_alphabetic()).count();
    if word_len == 0 {
        return true;
    }
    let word = &text[..word_len];
    ["begin", "start", "commit", "end", "rollback", "abort", "savepoint", "release"]
        .iter()
        .any(|k| word.eq_ignore_ascii_case(k.as_bytes()))
}

pub(super) fn is_control(kind: StatementKind) -> bool {
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

#[cfg(test)]
mod tests {
    use super::may_be_control;

    #[test]
    fn only_texts_that_may_be_transaction_control_are_analysed() {
        for sql in [
            "BEGIN",
            " commit",
            "End;",
            "ROLLBACK",
            "start transaction",
            "abort",
            "/* x */ COMMIT",
            "-- c\nBEGIN",
            "",
        ] {
            assert!(may_be_control(sql.as_bytes()), "{sql:?}");
        }
        for sql in [
            "SELECT 1",
            "  update t set a = 1",
            "INSERT INTO begin_log VALUES (1)",
            "WITH x AS (SELECT 1) SELECT 1",
            "beginning",
        ] {
            assert!(!may_be_control(sql.as_bytes()), "{sql:?}");
        }
    }
}
