//! Exchanges a client pipelines behind the one a replica is serving.
//!
//! A transaction's server is chosen from what the client sent before it got one. A client
//! that pipelines (sends its next exchange before the first is answered) can send a write
//! after pgvia gave its read to a replica; forwarded, it would fail there with 25006. The
//! relay decides each such exchange as a checkout would and holds one that needs the primary
//! until the replica has answered; the session then routes it again.

use wire::frontend;
use wire::FrameDecoder;

use super::exchange::{Held, Tracking};
use crate::routing::decide::MAX_WAIT_FOR_SYNC;
use crate::server::ServerConn;

/// What to do with an exchange the client pipelined behind others on a replica.
pub(super) enum Pipelined {
    /// It reads: it may run here.
    Here,
    /// It needs the primary: hold it until the replica is done, then route it again.
    Primary,
    /// An extended-protocol batch without its Sync yet: decide once it is whole.
    Incomplete,
}

impl Tracking<'_> {
    /// Where an exchange starting at the head of `rest`, pipelined behind what this replica
    /// is serving, must run; decided as a checkout would decide it.
    pub(super) fn pipelined_target(&mut self, decoder: &FrameDecoder, rest: &[u8]) -> Pipelined {
        let Some(split) = self.replica_split.filter(|_| self.state.pins.is_empty()) else {
            return Pipelined::Here;
        };
        // This exchange only: up to its Sync (or Flush), or the one Query.
        let mut end = 0;
        loop {
            match decoder.peek_len(&rest[end..]) {
                Ok(Some(len)) => {
                    let tag = rest[end];
                    end += len;
                    if matches!(tag, frontend::tag::QUERY | frontend::tag::SYNC | frontend::tag::FLUSH) {
                        break;
                    }
                }
                // The batch is still arriving; past the cap checkouts use too, it is decided on
                // what is in. An invalid frame ahead is left to the scan, which stops there.
                Ok(None) if end < MAX_WAIT_FOR_SYNC => return Pipelined::Incomplete,
                _ => break,
            }
        }
        let rest = &rest[..end];
        let (analyzer, memo) = (self.analyzer, &mut *self.memo);
        let statements = self.statements.as_deref();
        let decision = crate::routing::decide::decide(
            analyzer,
            |sql| memo.analyze(analyzer, sql),
            decoder,
            statements,
            split,
            None,
            rest,
        );
        match decision.target {
            crate::routing::Target::Primary => Pipelined::Primary,
            crate::routing::Target::Replica => Pipelined::Here,
        }
    }
}

/// An exchange held for the primary behind a replica's work, when the replica has answered
/// everything but a transaction block is still open there (`BEGIN READ ONLY` ...): the
/// exchange belongs to that block, and goes to the replica after all, where a write fails as
/// it would on the primary in a read-only block. Returns whether the hold was released, so
/// the caller scans the client's frames again.
pub(super) fn release_hold_in_open_block(
    server: &ServerConn,
    to_server: &[u8],
    tracking: Option<&mut Tracking<'_>>,
) -> bool {
    let Some(t) = tracking.filter(|t| t.held == Some(Held::ForPrimary)) else { return false };
    if !to_server.is_empty() || server.tracker.has_pending() || server.tracker.is_quiescent() {
        return false;
    }
    t.held = None;
    t.replica_split = None;
    true
}
