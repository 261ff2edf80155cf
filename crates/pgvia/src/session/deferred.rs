//! A transaction the client began (a `BEGIN` pgvia answered) that no server has heard of
//! yet. What pgvia answers while it lasts is in `local.rs`.

use bytes::{Bytes, BytesMut};

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

/// Fails the transaction on purpose once the server has begun it; the text names why in the
/// server's log.
const FAILING_CAST: &str =
    "\n;SELECT 'pgvia: a statement of this transaction was cancelled before it reached a server'::pg_catalog.int4";

impl DeferredBegin {
    /// What the server hears first.
    pub fn frame(&self) -> &Bytes {
        match self {
            DeferredBegin::Begun(frame) | DeferredBegin::Failed(frame) => frame,
        }
    }

    /// The same transaction after a statement of it failed without a server.
    pub(super) fn failed(&self) -> DeferredBegin {
        let DeferredBegin::Begun(begin) = self else { return self.clone() };
        // The BEGIN's text (the analysis found it a lone BEGIN, so valid SQL), its bytes as
        // they came, in the client's encoding; the cast's line break ends a trailing comment.
        let sql = begin.get(5..begin.len().saturating_sub(1)).unwrap_or_default();
        let mut frame = BytesMut::new();
        wire::build::frame(&mut frame, b'Q', |b| {
            b.extend_from_slice(sql);
            wire::build::put_cstr(b, FAILING_CAST.as_bytes());
        });
        DeferredBegin::Failed(frame.freeze())
    }
}
