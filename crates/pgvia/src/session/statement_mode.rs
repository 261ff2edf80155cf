//! `pool_mode = "statement"`: autocommit only.
//!
//! The server goes back to the pool after every statement, exactly as in transaction mode
//! after a transaction of one statement; what this mode adds is the refusal of statements
//! that open a transaction block (`BEGIN`, `START TRANSACTION`, `COMMIT AND CHAIN`,
//! `ROLLBACK AND CHAIN`), which would otherwise hold a server across statements. They are
//! refused before any server sees them, with an ordinary ERROR, so the session goes on.
//!
//! A refused message is answered by pgvia once every earlier request is answered, so replies
//! stay in order: the relay stops forwarding at it, gives the server back when it is
//! quiescent, and the client's next-message wait (`client.rs`) answers it — an ERROR and a
//! ReadyForQuery for a Query; for a Parse, an ERROR, then the messages up to the next Sync are
//! discarded and the Sync answered, as PostgreSQL does after an error in the extended protocol.

use bytes::BytesMut;
use route::StatementKind;
use wire::build::ErrorFields;
use wire::sqlstate::SqlState;

/// Whether SQL text opens a transaction block. Unreadable SQL is let through: the server
/// will refuse it itself, and if it did open a transaction the server is simply held until
/// it ends, as in transaction mode.
pub fn opens_transaction(analysis: &route::Analysis) -> bool {
    !analysis.is_conservative()
        && analysis.statements().any(|s| {
            matches!(
                s.kind(),
                StatementKind::Begin(_)
                    | StatementKind::Commit { chain: true }
                    | StatementKind::Rollback { chain: true }
            )
        })
}

pub const MESSAGE: &str =
    "transaction blocks are not allowed: this pgvia pool runs in pool_mode \"statement\"";
const HINT: &str = "Run each statement on its own (autocommit), or use a pool in transaction mode.";

/// The ERROR a refused statement gets.
pub fn write_refusal(out: &mut BytesMut) {
    ErrorFields::error(SqlState::FEATURE_NOT_SUPPORTED, MESSAGE).with_hint(HINT).write(out);
}

/// The session-ending form, for a refused Parse in the middle of an extended-protocol batch
/// whose earlier messages the server already has: there is no way to answer it in order.
pub fn fatal_refusal() -> super::SessionError {
    super::SessionError::refused(SqlState::FEATURE_NOT_SUPPORTED, MESSAGE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_refused() {
        let analyzer = route::Analyzer::new(route::AnalyzerOptions::default()).unwrap();
        let refused = |sql: &str| opens_transaction(&analyzer.analyze(sql, &[]));
        assert!(refused("BEGIN"));
        assert!(refused("start transaction isolation level serializable"));
        assert!(refused("select 1; begin; select 2"));
        assert!(refused("COMMIT AND CHAIN"));
        assert!(!refused("COMMIT"));
        assert!(!refused("insert into t values (1); insert into t values (2)"));
        assert!(!refused("select 1"));
        assert!(!refused("this is not sql"));
    }
}
