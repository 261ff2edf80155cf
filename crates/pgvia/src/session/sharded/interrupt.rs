//! An exchange cut short: a cancel before anything was sent, `query_timeout`, a shard that
//! failed, an error that ended the statement while other shards still run it, and the
//! client's end by `KILL_CLIENT` or shutdown. Whatever stops the client's statement stops it
//! on every shard, and every server is either made clean or closed.

use shard::{ShardId, ShardSet};
use wire::sqlstate::SqlState;

use super::io::Flight;
use super::{ShardedSession, Tx};
use crate::server::ServerError;
use crate::session::timeouts::Wait;

impl ShardedSession<'_> {
    /// Takes a server on every shard of `shards` and points the client's cancel key at them.
    /// A cancel while it waits for a server has no server to signal: false then, for the
    /// caller to answer (see `CancelSlot::queue`).
    pub(super) async fn take_servers(
        &mut self,
        shards: ShardSet,
        writes: bool,
    ) -> Result<bool, (ShardId, ServerError)> {
        let slot = std::sync::Arc::clone(&self.cancel.slot);
        let queued = slot.queue();
        for shard in shards.iter() {
            // The server first: when one is free at once, the cancel's wake-up is never
            // registered.
            let taken = tokio::select! {
                biased;
                taken = self.ensure_server(shard, writes) => Some(taken),
                () = queued.cancelled() => None,
            };
            match taken {
                None => return Ok(false),
                Some(Err(e)) => return Err((shard, e)),
                Some(Ok(())) => {}
            }
        }
        self.aim_cancels(shards);
        Ok(!queued.finish())
    }

    /// A cancel came while the exchange waited for a shard's server: nothing was sent, so the
    /// client gets 57014 as for a statement cancelled at once, and its transaction, if any,
    /// fails as it would on a server. Servers taken for it go back untouched.
    pub(super) async fn answer_cancelled(&mut self) {
        self.errored = true;
        wire::build::ErrorFields::error(SqlState::QUERY_CANCELED, crate::session::local::CANCELLED)
            .write(&mut self.to_client);
        if let Tx::Open { failed, .. } = &mut self.tx {
            *failed = true;
        }
        self.ready();
        if matches!(self.tx, Tx::Idle) {
            self.give_back_all().await;
        }
    }

    /// A time limit passed while the exchange waited for its shards: at `query_timeout`
    /// every shard's server is sent a cancel (the request then fails with their 57014, as a
    /// plain session's does); when even the cancel goes unanswered, the exchange fails.
    pub(super) fn query_timed_out(&mut self, wait: Wait, lanes: &[ShardId]) -> Result<(), ServerError> {
        match wait {
            Wait::Server => {
                let mut servers = lanes.iter().filter_map(|&s| self.held[s].as_ref());
                if let Some(first) = servers.next() {
                    let mut target = first.conn_ref().cancel_target();
                    target.also = servers.map(|c| c.conn_ref().cancel_target()).collect();
                    self.timers.cancel_requests(target, &mut self.to_client);
                }
                Ok(())
            }
            Wait::Cancelled => Err(self.timers.unanswered()),
            _ => Ok(()),
        }
    }

    /// The statement failed while some of the flight's shards still run it (an error on one
    /// shard is the answer, and their replies are dropped): those are cancelled rather than
    /// left to run to their end, which for a large sort or scan would keep the client waiting
    /// and their servers busy for nothing. True when a cancel was sent.
    pub(super) fn interrupt_lanes(&mut self, flight: &Flight) -> bool {
        let shards = flight.lanes.iter().enumerate().filter(|&(i, _)| flight.fan.owes(i)).map(|(_, &s)| s);
        let shards: ShardSet = shards.collect();
        self.interrupt(shards)
    }

    /// Cancels the work of the held servers of `shards` that still owe replies, as a client's
    /// cancel would (counted in flight at once, so none is reused before its cancel lands).
    pub(super) fn interrupt(&mut self, shards: ShardSet) -> bool {
        let mut targets = shards.iter().filter_map(|s| {
            let conn = self.held[s].as_ref()?.conn_ref();
            (!conn.is_broken() && conn.tracker.has_pending()).then(|| conn.cancel_target())
        });
        let Some(mut target) = targets.next() else { return false };
        target.also = targets.collect();
        let cancel = crate::cancel::ArmedCancel::for_held_server(target);
        let timeout = self.pool.settings.connect_timeout;
        tokio::spawn(async move {
            if let Err(e) = crate::cancel::forward(cancel, timeout).await {
                tracing::warn!(error = %e, "could not cancel a shard's part of a failed statement");
            }
        });
        true
    }

    /// After [`Self::interrupt_lanes`], before the servers run anything else: each cancel has
    /// landed (or the server is closed), so none hits the client's next statement.
    pub(super) async fn settle_interrupted(&mut self, lanes: &[ShardId]) {
        for &shard in lanes {
            let Some(c) = self.held[shard].as_mut() else { continue };
            if !c.conn_ref().cancels.settled(crate::server::CANCEL_SETTLE).await {
                tracing::warn!(shard, "a cancel request did not complete; closing its shard server");
                c.conn().mark_broken();
            }
        }
    }

    /// `KILL_CLIENT` (or shutdown's end of every client) came while the session waited in an
    /// exchange: the session ends now, its FATAL being the client's last word.
    pub(super) fn ended_while_waiting(&mut self) -> ServerError {
        self.ending = true;
        ServerError::Io(std::io::Error::other("the client was ended by the admin console or shutdown"))
    }

    /// A shard could not be reached or failed mid-exchange: the servers of the transaction
    /// are dropped (their work rolls back as the connections close; what they still run is
    /// cancelled first, as a backend does not notice a closed connection while it computes),
    /// the client gets 08006 naming the shard, and its transaction, if any, is failed. A
    /// session being ended gets no reply: its FATAL follows.
    pub(super) async fn shard_failed(&mut self, shard: ShardId, error: &ServerError) {
        if !self.ending {
            tracing::warn!(pool = %self.pool.name, shard, error = %error, "a shard failed during an exchange");
        }
        self.interrupt(ShardSet::all(self.held.len()));
        for slot in &mut self.held {
            if let Some(mut c) = slot.take() {
                c.conn().mark_broken();
            }
        }
        self.forget_dropped();
        self.errored = true;
        if self.ending {
            return;
        }
        let message = format!("shard {shard} failed: {error}");
        wire::build::ErrorFields::error(SqlState::CONNECTION_FAILURE, &message).write(&mut self.to_client);
        if let Tx::Open { failed, participants, writers, .. } = &mut self.tx {
            *failed = true;
            *participants = ShardSet::EMPTY;
            *writers = ShardSet::EMPTY;
        }
        self.ready();
    }
}
