//! What is answered for a client before any server has its request: a transaction the
//! client began (a `BEGIN` pgvia answered) that no server has heard of yet, and a cancel that
//! came while the client's request waited for a pool server.

use bytes::{Buf, Bytes, BytesMut};
use wire::backend::TransactionStatus;
use wire::sqlstate::SqlState;

use super::client::{Discard, Session};

/// A transaction the client began that no server has heard of yet; its first statement
/// takes it to one.
#[derive(Debug, Clone)]
pub enum DeferredBegin {
    /// The client's `BEGIN` (a Query frame), sent ahead of its first statement.
    Begun(Bytes),
    /// A statement of the transaction was cancelled before it reached a server, and the
    /// client was told the transaction failed. The server hears the `BEGIN` and then a
    /// statement that fails, so from there on it gives PostgreSQL's own answers for a failed
    /// transaction (25P02 for statements, `ROLLBACK` for `COMMIT`, savepoints as they are).
    Failed(Bytes),
}

impl DeferredBegin {
    /// What the server hears first.
    pub fn frame(&self) -> &Bytes {
        match self {
            DeferredBegin::Begun(frame) | DeferredBegin::Failed(frame) => frame,
        }
    }

    /// The same transaction after a statement of it failed without a server.
    fn failed(&self) -> DeferredBegin {
        let DeferredBegin::Begun(begin) = self else { return self.clone() };
        // The BEGIN's text (the analysis found it a lone BEGIN, so valid SQL); the line break
        // ends a trailing comment. The failing cast names why in the server's log.
        let sql = begin.get(5..begin.len().saturating_sub(1)).unwrap_or_default();
        let mut text = String::from_utf8_lossy(sql).into_owned();
        text.push_str("\n;SELECT 'pgvia: a statement of this transaction was cancelled before it reached a server'::pg_catalog.int4");
        let mut frame = BytesMut::new();
        wire::build::query(&mut frame, &text);
        DeferredBegin::Failed(frame.freeze())
    }
}

/// The message PostgreSQL gives a statement cancelled at the client's request.
const CANCELLED: &str = "canceling statement due to user request";

impl Session<'_> {
    /// The client's first waiting request was cancelled while it waited for a server: it is
    /// answered as PostgreSQL answers a statement cancelled at once (57014), nothing of it
    /// having run, and the session goes on. A simple query (or function call) ends there; an
    /// extended-protocol batch is skipped up to its Sync (`Discard::UntilSync`), which is
    /// answered with ReadyForQuery. Inside a transaction the transaction is failed, as it
    /// would be on a server.
    pub(super) fn answer_cancelled(&mut self) {
        let Ok(Some(len)) = self.decoder.peek_len(&self.bufs.from_client) else { return };
        let tag = self.bufs.from_client[0];
        wire::build::ErrorFields::error(SqlState::QUERY_CANCELED, CANCELLED).write(&mut self.bufs.to_client);
        if let Some(deferred) = &self.deferred_begin {
            self.deferred_begin = Some(deferred.failed());
        }
        if matches!(tag, wire::frontend::tag::QUERY | wire::frontend::tag::FUNCTION_CALL) {
            self.bufs.from_client.advance(len);
            let status = self.local_status();
            wire::build::ready_for_query(&mut self.bufs.to_client, status.as_byte());
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
