//! Portals over several shards run in parts: a Bind of a SELECT over several shards whose
//! portal is not run whole in the same batch (an Execute with a row limit, or an Execute in a
//! later batch) runs the merged query at once (PostgreSQL takes the portal's snapshot at Bind
//! too), and pgvia holds its rows (at most `limits.merge_memory_budget` bytes) and answers
//! each Execute from them: the next rows, then `PortalSuspended` when the limit is met, else
//! `SELECT n` (the rows of that Execute). Shards never answer such a portal's Execute each
//! with its own rows.

use std::collections::HashMap;

use bytes::{Bytes, BytesMut};
use shard::ShardSet;
use wire::backend::tag;
use wire::frontend::{tag as fe, FrontendMessage, Target as Which};

use super::fanout::Combine;
use super::{ShardedSession, Tx};
use crate::session::error::SessionError;

/// A portal whose rows pgvia holds.
pub(super) struct HeldPortal {
    description: Bytes,
    rows: Vec<Bytes>,
    next: usize,
    /// Its rows could not be held (past the budget): its first Execute fails with this, as
    /// PostgreSQL fails a portal at its Execute.
    error: Option<Bytes>,
}

/// A Bind in this batch whose portal pgvia holds: the portal's name, whether the client
/// described it here, and the row limit of its Execute here, if any.
pub(super) struct Holding {
    pub name: String,
    pub described: bool,
    pub limit: Option<i32>,
    /// The batch is the Bind alone (and its Sync), whose reply pgvia can write itself.
    pub bind_alone: bool,
}

/// Whether a Bind of `portal` over several shards is run in parts: not executed whole in
/// `rest` (the batch's messages after it).
pub(super) fn holding(portal: &str, at: usize, rest: &[Bytes], in_transaction: bool) -> Option<Holding> {
    let bind_alone = at == 0 && rest.len() == 1;
    let mut described = false;
    let mut limit = None;
    for f in rest {
        match FrontendMessage::parse_body(f[0], &f[5..]) {
            Ok(FrontendMessage::Describe { target: Which::Portal, name }) if name == portal => {
                described = true
            }
            Ok(FrontendMessage::Execute { portal: name, max_rows }) if name == portal => {
                if max_rows <= 0 {
                    return None;
                }
                limit = Some(max_rows);
                break;
            }
            _ => {}
        }
    }
    (limit.is_some() || in_transaction).then(|| Holding {
        name: portal.to_owned(),
        described,
        limit,
        bind_alone,
    })
}

impl HeldPortal {
    /// PostgreSQL's reply to `Execute` with `max_rows` (0 for all).
    fn execute(&mut self, max_rows: i32, out: &mut BytesMut) -> bool {
        if let Some(error) = self.error.take() {
            out.extend_from_slice(&error);
            return false;
        }
        let left = self.rows.len() - self.next;
        let n = if max_rows <= 0 { left } else { left.min(max_rows as usize) };
        for row in &self.rows[self.next..self.next + n] {
            out.extend_from_slice(row);
        }
        self.next += n;
        // As PostgreSQL: a limit met is a suspension even when no row is left (the next
        // Execute then completes with `SELECT 0`).
        if max_rows > 0 && n == max_rows as usize {
            wire::build::frame(out, tag::PORTAL_SUSPENDED, |_| {});
        } else {
            wire::build::command_complete(out, &format!("SELECT {n}"));
        }
        true
    }
}

/// The portals pgvia holds, by name.
pub(super) type HeldPortals = HashMap<String, HeldPortal>;

impl ShardedSession<'_> {
    /// A batch that uses portals pgvia holds: answered from them when it is only Execute,
    /// Describe and Close of such portals (and Sync/Flush); refused when it mixes them with
    /// other messages. `false` when it names none.
    pub(super) fn held_portal_batch(&mut self, frames: &[Bytes]) -> bool {
        if self.held_portals.is_empty() {
            return false;
        }
        let mut uses = false;
        let mut only = true;
        for f in frames {
            match FrontendMessage::parse_body(f[0], &f[5..]) {
                Ok(
                    FrontendMessage::Execute { portal: name, .. }
                    | FrontendMessage::Describe { target: Which::Portal, name }
                    | FrontendMessage::Close { target: Which::Portal, name },
                ) => {
                    let held = self.held_portals.contains_key(name);
                    uses |= held;
                    only &= held;
                }
                Ok(FrontendMessage::Sync | FrontendMessage::Flush) => {}
                _ => only = false,
            }
        }
        if !uses {
            return false;
        }
        if !only {
            self.refuse(
                "0A000",
                "a portal over several shards run in parts must be used in a batch of its own (Execute, Describe or Close, then Sync)",
            );
            return true;
        }
        for f in frames {
            match FrontendMessage::parse_body(f[0], &f[5..]) {
                Ok(FrontendMessage::Execute { portal, max_rows }) => {
                    let ran = self
                        .held_portals
                        .get_mut(portal)
                        .is_none_or(|p| p.execute(max_rows, &mut self.to_client));
                    if !ran {
                        // As PostgreSQL, the rest of the batch is skipped up to its Sync.
                        self.held_portals.remove(portal);
                        self.after_error();
                        return true;
                    }
                }
                Ok(FrontendMessage::Describe { name, .. }) => {
                    // A portal whose rows could not be held has no columns to tell: its error.
                    if let Some(error) = self.held_portals.get(name).and_then(|p| p.error.clone()) {
                        self.held_portals.remove(name);
                        self.to_client.extend_from_slice(&error);
                        self.after_error();
                        return true;
                    }
                    if let Some(p) = self.held_portals.get(name) {
                        self.to_client.extend_from_slice(&p.description);
                    }
                }
                Ok(FrontendMessage::Close { name, .. }) => {
                    self.held_portals.remove(name);
                    self.portals.remove(name);
                    wire::build::close_complete(&mut self.to_client);
                }
                _ => {}
            }
        }
        self.ready();
        true
    }

    /// Runs a batch whose Bind pgvia holds (`payload` runs the portal whole on `targets`),
    /// writes the client's reply as PostgreSQL's to its own batch, and keeps the rest of
    /// the rows for later Executes inside the transaction.
    pub(super) async fn run_holding(
        &mut self,
        targets: ShardSet,
        payload: &[u8],
        parse_drops: &[bool],
        combine: Combine,
        holding: Holding,
    ) -> Result<(), SessionError> {
        for shard in targets.iter() {
            if let Err(e) = self.ensure_server(shard, false).await {
                self.shard_failed(shard, &e).await;
                return Ok(());
            }
        }
        let limit = self.app.config().limits.merge_memory_budget as usize;
        let (sent, reply) = self.exchange_held(targets, payload, combine, parse_drops).await;
        let mut outcome = match sent {
            Ok(o) => o,
            Err(e) => {
                self.shard_failed(targets.first().unwrap_or(0), &e).await;
                return Ok(());
            }
        };
        // A Bind alone in its batch that the shards accepted: an error of its run (or the
        // budget's) is its first Execute's, as on PostgreSQL, which runs a portal there.
        let deferred = holding.bind_alone && matches!(self.tx, Tx::Open { failed: false, .. });
        let mut held = HeldPortal { description: Bytes::new(), rows: Vec::new(), next: 0, error: None };
        if outcome.overflowed {
            let message = format!(
                "a portal over several shards run in parts holds its rows in pgvia, and they are larger than limits.merge_memory_budget ({limit} bytes): fetch it whole or narrow the query"
            );
            held.error = Some(super::doors::error_frame("53200", &message));
            if !deferred {
                self.to_client.extend_from_slice(held.error.as_ref().map_or(&[][..], |e| &e[..]));
                outcome.failed = true;
                self.finish_exchange(targets, false, false, &outcome).await;
                return Ok(());
            }
            wire::build::frame(&mut self.to_client, tag::BIND_COMPLETE, |_| {});
        }
        let mut at = 0;
        let mut in_rows = false;
        let mut bound = false;
        while at + 5 <= reply.len() {
            let len =
                u32::from_be_bytes([reply[at + 1], reply[at + 2], reply[at + 3], reply[at + 4]]) as usize;
            let end = (at + 1 + len).min(reply.len());
            let frame = reply.slice(at..end);
            at = end;
            match frame[0] {
                tag::ROW_DESCRIPTION => {
                    in_rows = true;
                    if holding.described {
                        self.to_client.extend_from_slice(&frame);
                    }
                    held.description = frame;
                }
                tag::DATA_ROW => {
                    in_rows = true;
                    held.rows.push(frame);
                }
                // The portal's own completion: its rows are all in.
                tag::COMMAND_COMPLETE if in_rows => in_rows = false,
                tag::ERROR_RESPONSE if deferred && bound => held.error = Some(frame),
                t => {
                    bound |= t == tag::BIND_COMPLETE;
                    self.to_client.extend_from_slice(&frame);
                }
            }
        }
        if held.error.is_some() {
            // The client's transaction fails at that Execute, not before.
            outcome.failed = false;
        }
        if !outcome.failed {
            if let Some(max_rows) = holding.limit {
                held.execute(max_rows, &mut self.to_client);
            }
        }
        self.finish_exchange(targets, false, false, &outcome).await;
        if !outcome.failed && matches!(self.tx, Tx::Open { failed: false, .. }) {
            self.held_portals.insert(holding.name, held);
        }
        Ok(())
    }
}

/// Writes `Execute` of the shards' unnamed portal for all its rows.
pub(super) fn execute_whole(out: &mut BytesMut) {
    wire::build::frame(out, fe::EXECUTE, |b| {
        b.extend_from_slice(&[0]);
        b.extend_from_slice(&0i32.to_be_bytes());
    });
}

/// Writes `Describe` of portal `name`.
pub(super) fn describe(out: &mut BytesMut, name: &str) {
    wire::build::frame(out, fe::DESCRIBE, |b| {
        b.extend_from_slice(b"P");
        wire::build::put_cstr(b, name.as_bytes());
    });
}

/// The Bind written at `start` of `out`, made to bind the shards' unnamed portal: a portal
/// pgvia holds is never a named one on the shards, so the client's Close of it, or a Bind of
/// its name again, never meets a leftover there. Returns the shards' portal name.
pub(super) fn unname_bind(out: &mut BytesMut, start: usize) -> &'static str {
    let bind = out.split_off(start);
    let body = bind.get(5..).unwrap_or_default();
    match body.iter().position(|&c| c == 0) {
        Some(end) => wire::build::frame(out, fe::BIND, |b| {
            b.extend_from_slice(&[0]);
            b.extend_from_slice(&body[end + 1..]);
        }),
        None => out.extend_from_slice(&bind),
    }
    ""
}
