//! What a sharded session leaves on each shard's server, and how the server goes back: the
//! plain session's guarantees, per shard. Each shard has its own marks (pins, what to read
//! back: `state::Marks`); the client's statements are observed on the shards they go to with
//! the plain session's `SessionState::observe`, and at the end of each transaction every
//! shard server that may have changed is read back with the shared `read_back`. A server
//! still pinned (a session advisory lock, a temporary table, a `LISTEN`, ...) stays with the
//! client until the effect ends or the client leaves; then `DISCARD ALL` (the reset of
//! `client::release`) cleans it before anyone else gets it.

use std::task::{Context, Poll};

use shard::{ShardId, ShardSet};
use wire::backend::tag;

use super::{ShardedSession, Tx};
use crate::pool::{Checkout, PinReason};
use crate::server::ServerError;
use crate::session::error::SessionError;
use crate::session::read_back;
use crate::session::state::{Check, Marks, Via};

impl ShardedSession<'_> {
    /// Takes note of what `analysis` may do to the session on each shard of `targets`.
    pub(super) fn observe(&mut self, targets: ShardSet, analysis: &route::Analysis, via: Via) {
        for shard in targets.iter() {
            let Some(marks) = self.marks.get_mut(shard) else { continue };
            self.state.swap_marks(marks);
            let added = self.state.observe(analysis, via);
            // The hub follows one server per client; a sharded client keeps its listening
            // server instead (`pin_listening`).
            self.state.pin_listening();
            self.state.swap_marks(marks);
            for reason in added.reasons() {
                self.pool.stats.pins[reason.index()].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        }
    }

    /// Whether the server of `shard` stays with the client between transactions.
    pub(super) fn pinned(&self, shard: ShardId) -> bool {
        self.marks.get(shard).is_some_and(|m| !m.pins.is_empty())
    }

    /// Reads back what the client's statements may have changed on the held server of
    /// `shard`, when they may have changed anything.
    async fn read_back_shard(&mut self, shard: ShardId) -> Result<(), SessionError> {
        let timeout = self.app.config().general.server_reset_timeout;
        let Some(marks) = self.marks.get_mut(shard) else { return Ok(()) };
        let Some(checkout) = self.held.get_mut(shard).and_then(Option::as_mut) else {
            *marks = Marks::default();
            return Ok(());
        };
        let conn = checkout.conn();
        if conn.is_broken() || !conn.tracker.is_quiescent() {
            // Not between requests: it is closed when given back, not read.
            return Ok(());
        }
        self.state.swap_marks(marks);
        let result = if read_back::needed(&self.state) {
            read_back::read_back(conn, &mut self.state, &self.pool.key.user, timeout).await
        } else {
            Ok(Default::default())
        };
        if let Ok(found) = &result {
            if found.listening.as_ref().is_some_and(|l| !l.is_empty()) {
                self.state.set_checked_pins(&[(PinReason::Listen, true)]);
            }
            for reason in found.added.reasons() {
                self.pool.stats.pins[reason.index()].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                tracing::info!(pool = %self.pool.name, shard, reason = reason.as_str(), "a function or DO block pinned the client to its shard server until the effect ends");
            }
        }
        self.state.swap_marks(marks);
        self.search_path = super::search_path_of(&self.state.settings);
        result.map(drop)
    }

    /// Between transactions: every held server read back, then given back to its pool unless
    /// pinned; pinned ones are brought to the client's settings as they now are. From here on
    /// a cancel from this client finds no target, and one already sent must have been acted
    /// on before a server serves anyone else.
    pub(super) async fn give_back_all(&mut self) {
        self.cancel.slot.set(None);
        for shard in 0..self.held.len() {
            if let Err(e) = self.read_back_shard(shard).await {
                // Its state is unknown: closed, with its pins.
                tracing::warn!(pool = %self.pool.name, shard, error = %e, "could not read a shard server's session state back; closing it");
                self.held[shard] = None;
                self.marks[shard] = Marks::default();
            }
        }
        let timeout = self.app.config().general.server_reset_timeout;
        for shard in 0..self.held.len() {
            if self.pinned(shard) {
                let Some(c) = self.held[shard].as_mut() else { continue };
                if let Err(e) = crate::session::settings::apply(c.conn(), &self.state.settings, timeout).await
                {
                    tracing::warn!(shard, error = %e, "could not bring a pinned shard server to the client's settings; closing it");
                    self.held[shard] = None;
                    self.marks[shard] = Marks::default();
                }
                continue;
            }
            if let Some(c) = self.held[shard].take() {
                if c.conn_ref().cancels.settled(crate::server::CANCEL_SETTLE).await {
                    c.give_back_idle();
                } else {
                    tracing::warn!("a cancel request did not complete; closing its shard server");
                    drop(c);
                }
            }
        }
    }

    /// Forgets the marks of shards whose servers were dropped (closed with their state).
    pub(super) fn forget_dropped(&mut self) {
        for (held, marks) in self.held.iter().zip(self.marks.iter_mut()) {
            if held.is_none() {
                *marks = Marks::default();
            }
        }
    }

    /// At the end of the session: servers still held (in a transaction, or pinned) are reset
    /// (rolled back, `DISCARD ALL`) before they go back to their pools.
    pub(super) async fn release_all(&mut self) {
        for slot in &mut self.held {
            if let Some(c) = slot.take() {
                crate::session::client::release(self.app, Some(c), &[]).await;
            }
        }
        self.forget_dropped();
    }

    /// After a `SET`/`RESET` inside a transaction: the client's settings as the first target
    /// shard's server now has them, so shards that join the transaction later get the same.
    /// Between transactions the read-back of [`Self::give_back_all`] has done it already.
    pub(super) async fn learn_settings(&mut self, targets: ShardSet) -> Result<(), SessionError> {
        if matches!(self.tx, Tx::Idle) {
            return Ok(());
        }
        let Some(shard) = targets.first() else { return Ok(()) };
        self.read_back_shard(shard).await?;
        // The transaction may still roll the change back: read again at its end.
        if let Some(marks) = self.marks.get_mut(shard) {
            marks.checks.insert(Check::Settings);
        }
        Ok(())
    }
}

/// A message from a server the client holds while no exchange runs on it (a pinned server
/// between transactions: a notification for its `LISTEN`, a notice, or its end).
pub(super) fn poll_held(
    held: &mut [Option<Checkout>],
    cx: &mut Context<'_>,
) -> Poll<(ShardId, Result<wire::Frame, ServerError>)> {
    for (shard, slot) in held.iter_mut().enumerate() {
        let Some(checkout) = slot.as_mut() else { continue };
        let conn = checkout.conn();
        if conn.is_broken() || conn.tracker.has_pending() {
            continue;
        }
        if let Poll::Ready(r) = conn.poll_frame(cx) {
            return Poll::Ready((shard, r));
        }
    }
    Poll::Pending
}

impl ShardedSession<'_> {
    /// What a held server sent between transactions: notifications and notices go to the client
    /// as a dedicated server's would; anything else (a FATAL as it is terminated, its close)
    /// ends that server, and the pins it held with it.
    pub(super) fn server_spoke(&mut self, shard: ShardId, said: Result<wire::Frame, ServerError>) {
        match said {
            Ok(frame) if matches!(frame.tag(), tag::NOTIFICATION_RESPONSE | tag::NOTICE_RESPONSE) => {
                self.to_client.extend_from_slice(&frame.into_bytes());
            }
            Ok(frame) if frame.tag() == tag::PARAMETER_STATUS => {
                if let Some(c) = self.held[shard].as_mut() {
                    if let Err(e) = c.conn().observe(&frame) {
                        tracing::warn!(shard, error = %e, "a held shard server sent an unreadable parameter");
                    }
                }
            }
            other => {
                let why = match other {
                    Ok(frame) => format!("unexpected message {:?}", frame.tag() as char),
                    Err(e) => e.to_string(),
                };
                tracing::warn!(pool = %self.pool.name, shard, error = %why, "a shard server the client held between transactions ended");
                if let Some(mut c) = self.held[shard].take() {
                    c.conn().mark_broken();
                }
                self.marks[shard] = Marks::default();
            }
        }
    }
}
