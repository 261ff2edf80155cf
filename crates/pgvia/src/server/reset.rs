//! Bringing a server back to a state any client may receive.

use std::time::Duration;

use bytes::BytesMut;
use wire::backend::TransactionStatus;
use wire::build;

use super::error::ServerError;
use super::tracker::{Batch, CopyState, Pending, Replies, ReplyTracker, Request};
use super::ServerConn;

/// Text the server refuses to parse (a syntax error), sent to abort an implicit transaction
/// a client left open. It says why, for anyone reading the server's log.
const ROLLBACK_ON_LEAVING: &[u8] = b"pgvia: the client left before Sync; roll back";

/// How long a reset waits for cancels under way to be acted on before giving up on the server.
pub const CANCEL_SETTLE: Duration = Duration::from_secs(2);

impl ServerConn {
    /// After a client is done (or gone): finish whatever it left in flight, roll back an open
    /// transaction, and run `reset_query` if the client ran anything. `unsent` holds client
    /// frames the tracker already counts but that never reached the socket (the client left
    /// before the relay wrote them); they go first, so every reply the tracker waits for
    /// comes. Returns an error, with the server marked broken, when it cannot be made clean
    /// within `timeout`; the caller must then close it rather than reuse it.
    pub async fn reset(
        &mut self,
        unsent: &[u8],
        reset_query: &str,
        timeout: Duration,
    ) -> Result<(), ServerError> {
        if self.is_broken() {
            return Err(ServerError::Desync("server was already marked broken"));
        }
        let result = tokio::time::timeout(timeout, self.reset_inner(unsent, reset_query)).await;
        let result = result.unwrap_or(Err(ServerError::Timeout(timeout)));
        if result.is_err() {
            self.mark_broken();
        }
        result
    }

    async fn reset_inner(&mut self, unsent: &[u8], reset_query: &str) -> Result<(), ServerError> {
        // A cancel the client sent may still be on its way; the reset's own statements must
        // not be what it interrupts.
        if !self.cancels.settled(CANCEL_SETTLE).await {
            return Err(ServerError::Desync("a cancel request to this server did not complete"));
        }
        let mut out = BytesMut::from(unsent);
        if end_client_work(&mut self.tracker, &mut out) {
            self.statements.unnamed = None;
        }
        if !out.is_empty() {
            self.write_all(&out).await?;
        }
        // Errors the client's own statements raise while draining are theirs, not ours; only
        // a broken connection stops the reset.
        if let Err(e) = self.drain(None).await {
            if self.is_broken() {
                return Err(e);
            }
        }
        if self.tracker.copy_state() != CopyState::None || self.tracker.has_pending() {
            return Err(ServerError::Desync("replies still owed after draining"));
        }
        let mut queries: Vec<&str> = Vec::with_capacity(2);
        if self.tracker.transaction_status() != TransactionStatus::Idle {
            queries.push("ROLLBACK");
        }
        if self.condition() == super::Condition::Used && !reset_query.is_empty() {
            queries.push(reset_query);
        }
        let resets_session = queries.len() > usize::from(queries.first() == Some(&"ROLLBACK"));
        if !queries.is_empty() {
            self.run_internal_inner(&queries).await?;
        }
        if resets_session {
            // The reset query may have dropped prepared statements (DISCARD ALL does).
            self.statements.clear();
        }
        if self.tracker.transaction_status() != TransactionStatus::Idle {
            return Err(ServerError::Desync("transaction still open after ROLLBACK"));
        }
        self.applied.clear();
        self.mark_clean();
        Ok(())
    }
}

/// What ends the work a client left on the server the way PostgreSQL ends a vanished
/// client's: appended to `out` (after the client's own unsent frames) and counted in the
/// tracker. Returns whether it parses into the server's unnamed statement slot (which that
/// empties, whether or not the Parse succeeds).
fn end_client_work(tracker: &mut ReplyTracker, out: &mut BytesMut) -> bool {
    let copy_in = tracker.copy_state() == CopyState::In;
    if copy_in {
        // The client vanished mid COPY FROM STDIN: abort it. A Sync follows because an
        // extended-protocol COPY waits for one after failing; after a simple-protocol COPY
        // the Sync just earns one more ReadyForQuery, which the tracker expects.
        build::frame(out, b'f', |b| build::put_cstr(b, b"client disconnected during COPY"));
        tracker.client_sent(b'f', &[]);
    }
    let poison = tracker.batch() == Batch::Open && !tracker.is_skipping() && !copy_in;
    if poison {
        // The client left inside an implicit transaction (extended-protocol messages and no
        // Sync). PostgreSQL rolls that back for a client that vanishes, but the Sync below
        // would commit it: make the server fail first, so it skips to the Sync and the Sync
        // ends an aborted transaction (an explicit one stays open, aborted, for the ROLLBACK).
        // Text that is not SQL fails on any server, whatever the client created; a statement
        // or portal name might exist.
        build::frame(out, b'P', |b| {
            build::put_cstr(b, b"");
            build::put_cstr(b, ROLLBACK_ON_LEAVING);
            b.extend_from_slice(&0i16.to_be_bytes());
        });
        tracker.push(Pending {
            request: Request::Parse,
            replies: Replies::DropAll,
            server_effect: None,
            client_effect: None,
        });
    }
    if tracker.needs_sync() || copy_in {
        build::sync(out);
        tracker.client_sent(b'S', &[]);
    }
    poison
}

#[cfg(test)]
mod tests {
    use wire::backend::TransactionStatus;

    use super::*;
    use crate::server::ServerEvent;

    fn client(t: &mut ReplyTracker, tags: &[u8]) {
        tags.iter().for_each(|&g| t.client_sent(g, b""));
    }

    fn server(t: &mut ReplyTracker, tags: &[u8]) {
        for &tag in tags {
            let body: &[u8] = match tag {
                b'E' => b"SERROR\0VERROR\0C42601\0Msyntax error\0\0",
                b'Z' => b"I",
                _ => b"",
            };
            assert_ne!(t.server_sent(tag, body).0, ServerEvent::Desync, "{}", char::from(tag));
        }
    }

    fn tags(out: &[u8]) -> Vec<u8> {
        let mut tags = Vec::new();
        let mut rest = out;
        while rest.len() >= 5 {
            let len = u32::from_be_bytes([rest[1], rest[2], rest[3], rest[4]]) as usize;
            tags.push(rest[0]);
            rest = &rest[1 + len..];
        }
        tags
    }

    /// Parse/Bind/Execute/Flush with or without their replies: the Sync pgvia adds comes
    /// after a Parse that fails, so the Sync ends an aborted implicit transaction.
    #[test]
    fn an_unsynced_batch_is_failed_before_its_sync() {
        for replies_arrived in [true, false] {
            let mut t = ReplyTracker::default();
            client(&mut t, b"PBEH");
            if replies_arrived {
                server(&mut t, b"12C");
                assert!(!t.has_pending());
            }
            assert!(!t.is_quiescent(), "an open implicit transaction is not quiescent");
            let mut out = BytesMut::new();
            assert!(end_client_work(&mut t, &mut out));
            assert_eq!(tags(&out), b"PS");
            if !replies_arrived {
                server(&mut t, b"12C");
            }
            // The failed Parse, then the Sync's ReadyForQuery.
            server(&mut t, b"EZ");
            assert!(t.is_quiescent());
            assert_eq!(t.transaction_status(), TransactionStatus::Idle);
        }
    }

    #[test]
    fn a_synced_exchange_or_a_skipping_server_needs_no_failure() {
        let mut t = ReplyTracker::default();
        client(&mut t, b"PBES");
        let mut out = BytesMut::new();
        assert!(!end_client_work(&mut t, &mut out), "the client's own Sync ends it");
        assert!(out.is_empty());

        // The server already failed a message: it skips to the Sync, which is all it needs.
        let mut t = ReplyTracker::default();
        client(&mut t, b"PBEH");
        server(&mut t, b"E");
        assert!(t.is_skipping());
        assert!(!end_client_work(&mut t, &mut out));
        assert_eq!(tags(&out), b"S");
        server(&mut t, b"Z");
        assert!(t.is_quiescent());

        // Simple queries never leave an implicit transaction open.
        let mut t = ReplyTracker::default();
        client(&mut t, b"PBESQ");
        server(&mut t, b"12CZCZ");
        let mut out = BytesMut::new();
        assert!(!end_client_work(&mut t, &mut out));
        assert!(out.is_empty() && t.is_quiescent());
    }
}
