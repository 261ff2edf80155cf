//! Bringing a server back to a state any client may receive.

use std::time::Duration;

use bytes::BytesMut;
use wire::backend::TransactionStatus;
use wire::build;

use super::error::ServerError;
use super::tracker::CopyState;
use super::ServerConn;

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
        if self.broken {
            return Err(ServerError::Desync("server was already marked broken"));
        }
        let result = tokio::time::timeout(timeout, self.reset_inner(unsent, reset_query)).await;
        let result = result.unwrap_or(Err(ServerError::Timeout(timeout)));
        if result.is_err() {
            self.broken = true;
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
        if self.tracker.copy_state() == CopyState::In {
            // The client vanished mid COPY FROM STDIN: abort it. A Sync follows because an
            // extended-protocol COPY waits for one after failing; after a simple-protocol
            // COPY the Sync just earns one more ReadyForQuery, which the tracker expects.
            build::frame(&mut out, b'f', |b| build::put_cstr(b, b"client disconnected during COPY"));
            self.tracker.client_sent(b'f', &[]);
        }
        if self.tracker.needs_sync() || self.tracker.copy_state() == CopyState::In {
            build::sync(&mut out);
            self.tracker.client_sent(b'S', &[]);
        }
        if !out.is_empty() {
            self.write_all(&out).await?;
        }
        // Errors the client's own statements raise while draining are theirs, not ours; only
        // a broken connection stops the reset.
        if let Err(e) = self.drain(None).await {
            if self.broken {
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
        if self.dirty && !reset_query.is_empty() {
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
        self.dirty = false;
        Ok(())
    }
}
