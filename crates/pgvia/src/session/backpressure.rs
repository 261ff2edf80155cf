//! When a session may read its client: the read high-water mark and the process-wide budget
//! for large messages.
//!
//! pgvia answers some messages itself (a deferred BEGIN, COMMIT of an empty transaction, a
//! lone Parse + Sync, `SHOW pgvia.role`, statement mode's refusals) and holds others back (a
//! write waiting behind a replica's read, a refused statement waiting for the server to
//! finish). A client that pipelines such messages without reading the answers would grow
//! both buffers without end; this stops reading it while `limits.client_backlog_bytes` are
//! waiting either way, and reads on once they drain: backpressure, as PostgreSQL's own
//! blocked write gives, never an error.
//!
//! A message over [`LARGE_MESSAGE`] is received whole before it is passed on; its bytes are
//! reserved from `limits.max_buffered_message_bytes` when its header arrives. When the budget
//! is spent the client gets `FATAL 53200` and is closed: half a message cannot be skipped, and
//! waiting would let slow senders hold the budget from everyone else.

use std::sync::Arc;

use wire::sqlstate::SqlState;
use wire::FrameDecoder;

use super::error::SessionError;
use crate::net::limits::{Admission, BufferLease, LARGE_MESSAGE};

/// The client side's read limits, one per session.
pub struct ReadLimits {
    /// Bytes waiting for the client (answers) or held from the server (client messages)
    /// past which the client is not read.
    backlog: usize,
    budget: Option<Budget>,
    /// The budget taken for the large message now being received.
    lease: Option<BufferLease>,
}

struct Budget {
    admission: Arc<Admission>,
    /// `limits.max_buffered_message_bytes` when the session started.
    cap: u64,
}

impl Default for ReadLimits {
    fn default() -> Self {
        Self {
            backlog: crate::config::Limits::default().client_backlog_bytes as usize,
            budget: None,
            lease: None,
        }
    }
}

impl ReadLimits {
    /// The limits of a session, from the values of `[limits]` when it started
    /// (`client_backlog_bytes`, `max_buffered_message_bytes`; see work.rs's `Terms`).
    pub fn with(admission: Arc<Admission>, backlog: usize, cap: u64) -> Self {
        Self { backlog, budget: Some(Budget { admission, cap }), lease: None }
    }

    /// Whether no budget is held for a large message.
    pub fn holds_nothing(&self) -> bool {
        self.lease.is_none()
    }

    /// Whether to read the client now. `to_client` holds pgvia's answers (and the server's
    /// replies) not yet written; `from_client` what the client sent that is not passed on.
    /// Whole messages held back stop the reads; a message still arriving at the front of
    /// `from_client` never does, or it could not be completed.
    pub fn may_read(&self, to_client: &[u8], from_client: &[u8], decoder: &FrameDecoder) -> bool {
        to_client.len() < self.backlog
            && (from_client.len() < self.backlog || !matches!(decoder.peek_len(from_client), Ok(Some(_))))
    }

    /// Before a read: reserves budget for a large message whose header has arrived at the
    /// front of `from_client`, and gives back what an earlier one held once it is through.
    pub fn before_read(&mut self, from_client: &[u8], decoder: &FrameDecoder) -> Result<(), SessionError> {
        let arriving = match decoder.peek_len(from_client) {
            Ok(None) if from_client.len() >= 5 => declared(from_client),
            _ => 0,
        };
        if arriving < LARGE_MESSAGE {
            self.lease = None;
            return Ok(());
        }
        if self.lease.as_ref().is_some_and(|l| l.bytes() == arriving) {
            return Ok(());
        }
        self.lease = None;
        let Some(budget) = &self.budget else { return Ok(()) };
        match budget.admission.buffer_large(arriving, budget.cap) {
            Some(lease) => {
                self.lease = Some(lease);
                Ok(())
            }
            None => Err(SessionError::refused(
                SqlState::OUT_OF_MEMORY,
                format!(
                    "out of memory: a message of {arriving} bytes does not fit in pgvia's buffer for large messages \
                     (limits.max_buffered_message_bytes = {}, {} in use)",
                    budget.cap,
                    budget.admission.buffered()
                ),
            )),
        }
    }
}

/// The whole length (tag included) a frame header declares; the caller checked it is valid.
fn declared(buf: &[u8]) -> usize {
    i32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]).max(4) as usize + 1
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BufMut;

    /// A batch still arriving is left in `from_client` while the relay waits for its Sync (up
    /// to `MAX_WAIT_FOR_SYNC`): the smallest backlog must let that much in, or the wait for
    /// the rest of the batch and the stopped reads would wait on each other.
    #[test]
    fn the_smallest_backlog_holds_a_batch_awaiting_its_sync() {
        let smallest = crate::config::limits::MIN_CLIENT_BACKLOG as usize;
        assert!(smallest >= crate::routing::decide::MAX_WAIT_FOR_SYNC);
    }

    #[test]
    fn held_whole_messages_stop_reads_but_a_message_arriving_does_not() {
        let limits = ReadLimits::default();
        let decoder = FrameDecoder::new(64 * 1024 * 1024);
        let mut whole = Vec::new();
        while whole.len() < limits.backlog {
            whole.put_u8(b'Q');
            whole.put_i32(10);
            whole.extend_from_slice(b"BEGIN\0");
        }
        assert!(!limits.may_read(&[], &whole, &decoder));
        assert!(!limits.may_read(&whole, &[], &decoder));
        let mut arriving = vec![b'Q'];
        arriving.put_i32(4 * 1024 * 1024);
        arriving.resize(2 * 1024 * 1024, b' ');
        assert!(limits.may_read(&[], &arriving, &decoder));
    }
}
