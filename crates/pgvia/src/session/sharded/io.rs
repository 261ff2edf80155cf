//! The sharded session's I/O: reading the client's next exchange, taking servers for the
//! shards it goes to, sending it to them and pumping their replies through the fan-out.

use std::future::poll_fn;
use std::task::Poll;

use bytes::{Buf, Bytes, BytesMut};
use shard::{ShardId, ShardSet};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use wire::frontend::tag as fe;
use wire::sqlstate::SqlState;

use super::fanout::{Combine, FanOut};
use super::{ShardedSession, Tx, Unit};
use crate::routing::Target as Role;
use crate::server::ServerError;
use crate::session::error::SessionError;
use crate::session::settings;
use crate::session::timeouts::Wait;

/// Client output is written once this much is waiting, so large results stream.
const CLIENT_FLUSH: usize = 64 * 1024;
/// Most bytes of extended-protocol messages buffered before their Sync.
const MAX_BATCH: usize = 64 * 1024 * 1024;

/// What an exchange sends: the same messages to every shard, or each shard its own (a
/// multi-row INSERT split by shard).
#[derive(Clone, Copy)]
pub(super) enum Payload<'p> {
    Same(&'p [u8]),
    PerShard(&'p [(ShardId, Bytes)]),
    /// Extended-protocol messages with statements kept on the servers (`kept.rs`), finished
    /// per server by what it holds.
    Kept(&'p super::kept::Kept),
}

impl<'p> Payload<'p> {
    fn for_shard(self, shard: ShardId) -> &'p [u8] {
        match self {
            Payload::Same(p) => p,
            Payload::PerShard(parts) => {
                parts.iter().find(|(s, _)| *s == shard).map_or(&[][..], |(_, b)| &b[..])
            }
            Payload::Kept(_) => &[],
        }
    }
}

/// An exchange on its way: what was sent where, and the merge of the replies.
pub(super) struct Flight {
    pub fan: FanOut,
    pub lanes: Vec<ShardId>,
    /// Where this exchange's replies start in `to_client`.
    pub reply_start: usize,
    /// Replies are kept back until the exchange is decided (an autocommit write on several
    /// shards, whose reply is replaced by an error if its commit fails).
    pub hold: bool,
    /// With `hold`: most bytes of replies kept; past it they are dropped as they come
    /// (the shards still finish normally) and `overflowed` is set. A subquery computed
    /// first has its result so bounded (`subquery.rs`).
    pub held_limit: Option<usize>,
    pub overflowed: bool,
    /// With `hold`, for an autocommit write on several shards: the held replies' share of
    /// `limits.max_buffered_message_bytes` (`crate::net::limits::Admission`), taken as they
    /// grow; when the budget has no more, the flight overflows.
    pub charged: Option<Option<crate::net::limits::BufferLease>>,
}

impl Flight {
    pub fn outcome(&self) -> Result<Outcome, ServerError> {
        let done =
            self.fan.finished().ok_or(ServerError::Desync("exchange ended before every shard was ready"))?;
        if self.fan.lanes().iter().any(|l| l.injected_error.is_some()) {
            return Err(ServerError::Desync("a shard refused the transaction's BEGIN"));
        }
        Ok(Outcome {
            failed: done.failed,
            in_transaction: done.in_transaction,
            reply_start: self.reply_start,
            client_parses: self.fan.client_parses(),
            overflowed: self.overflowed,
        })
    }
}

/// How an exchange's servers answered.
pub(super) struct Outcome {
    pub failed: bool,
    pub in_transaction: bool,
    /// Where `to_client` stood before the exchange's replies (for a reply withheld and
    /// replaced, as an autocommit two-phase write does when its commit fails).
    pub reply_start: usize,
    /// How many of the client's Parses the servers accepted (`names.rs`).
    pub client_parses: usize,
    /// Held replies went past their limit and were dropped.
    pub overflowed: bool,
}

impl ShardedSession<'_> {
    /// Reads until the client has sent a whole exchange.
    pub(super) async fn next_unit(&mut self) -> Result<Unit, SessionError> {
        // Room for a Parse, Bind, Describe, Execute and Sync without growing.
        let mut batch: Vec<Bytes> = Vec::with_capacity(8);
        let mut batch_bytes = 0usize;
        loop {
            while let Some(len) = self.decoder.peek_len(&self.from_client)? {
                let frame = self.from_client.split_to(len).freeze();
                if !wire::frontend::is_known_tag(frame[0]) {
                    // Refused as the plain session and PostgreSQL refuse it (08P01), before
                    // it can reach a server.
                    return Err(SessionError::Protocol(wire::WireError::UnknownTag {
                        direction: "frontend",
                        tag: char::from(frame[0]),
                    }));
                }
                match frame[0] {
                    fe::QUERY if batch.is_empty() => return Ok(Unit::Query(frame)),
                    fe::TERMINATE => return Ok(Unit::Terminate),
                    // Outside COPY, PostgreSQL ignores these too.
                    fe::COPY_DATA | fe::COPY_DONE | fe::COPY_FAIL => {}
                    fe::SYNC => {
                        batch.push(frame);
                        return Ok(Unit::Batch(batch));
                    }
                    fe::QUERY => {
                        // A Query after unsynced messages: PostgreSQL runs them in order;
                        // the batch goes first, the Query waits its turn.
                        let mut rest = BytesMut::from(&frame[..]);
                        rest.extend_from_slice(&self.from_client);
                        self.from_client = rest;
                        let mut sync = BytesMut::new();
                        wire::build::sync(&mut sync);
                        batch.push(sync.freeze());
                        return Ok(Unit::Batch(batch));
                    }
                    _ => {
                        batch_bytes += frame.len();
                        if batch_bytes > MAX_BATCH {
                            return Err(SessionError::refused(
                                SqlState::PROTOCOL_VIOLATION,
                                "more than 64 MiB of extended-protocol messages without a Sync",
                            ));
                        }
                        batch.push(frame);
                    }
                }
            }
            if self.shutdown.now() != crate::app::Phase::Running {
                return Err(SessionError::Shutdown);
            }
            self.read_limits.before_read(&self.from_client, &self.decoder)?;
            self.flush_client().await?;
            self.timers.enter(if matches!(self.tx, Tx::Open { .. }) || !batch.is_empty() {
                Wait::IdleInTransaction
            } else {
                Wait::ClientIdle
            });
            tokio::select! {
                changed = self.shutdown.changed() => {
                    if changed.is_err() {
                        return Err(SessionError::Shutdown);
                    }
                }
                r = self.client.read_buf(&mut self.from_client) => match r {
                    Ok(0) => return Ok(Unit::Terminate),
                    Ok(_) => self.timers.restart(),
                    Err(e) => return Err(SessionError::ClientIo(e)),
                },
                wait = self.timers.expired(), if self.timers.armed() => {
                    return Err(self.timers.closing_error(wait));
                }
                // Only between transactions: PostgreSQL sends notifications then, and a shard
                // server lost inside a transaction must fail the client's next statement or its
                // COMMIT (the PREPARE on it fails), never turn that COMMIT into a silent ROLLBACK.
                (shard, said) = poll_fn(|cx| super::hand_over::poll_held(&mut self.held, cx)),
                    if matches!(self.tx, Tx::Idle) => {
                    self.server_spoke(shard, said);
                }
            }
        }
    }

    pub(super) async fn flush_client(&mut self) -> Result<(), SessionError> {
        if self.to_client.is_empty() {
            return Ok(());
        }
        self.client.write_all(&self.to_client).await.map_err(SessionError::ClientIo)?;
        self.client.flush().await.map_err(SessionError::ClientIo)?;
        self.to_client.clear();
        Ok(())
    }

    /// A server on `shard` for the transaction, taken now if none is held; brought to the
    /// client's settings.
    pub(super) async fn ensure_server(&mut self, shard: ShardId, writes: bool) -> Result<(), ServerError> {
        if self.held[shard].is_some() {
            return Ok(());
        }
        let group = self.groups[shard].clone();
        let role = if writes || matches!(self.tx, Tx::Open { .. }) || group.is_single() {
            Role::Primary
        } else {
            Role::Replica
        };
        let timeout = self.app.config().general.server_reset_timeout;
        // A client killed while it waits for a server ends now, not when one comes free.
        let checkout = tokio::select! {
            biased;
            taken = group.checkout(role, Some(&self.patron)) => taken,
            () = terminated(&mut self.shutdown) => return Err(self.ended_while_waiting()),
        };
        let mut checkout =
            checkout.map_err(|e| ServerError::Io(std::io::Error::other(format!("shard {shard}: {e}"))))?;
        if let Err(e) = settings::apply(checkout.conn(), &self.state.settings, timeout).await {
            return Err(ServerError::Io(std::io::Error::other(format!("shard {shard}: {e}"))));
        }
        self.held[shard] = Some(checkout);
        Ok(())
    }

    /// Sends `payload` (whole client frames) to every shard of `targets` and merges their
    /// replies into `to_client`, without the final ReadyForQuery (the caller writes it).
    /// `parse_drops` says, per Parse in the payload, whether its ParseComplete is pgvia's.
    pub(super) async fn send_and_merge(
        &mut self,
        targets: ShardSet,
        payload: &[u8],
        parse_drops: &[bool],
        implicit_begin: bool,
    ) -> Result<Outcome, ServerError> {
        self.aim_cancels(targets);
        let mut flight = self
            .launch(targets, Payload::Same(payload), Combine::Concat, parse_drops, implicit_begin)
            .await?;
        self.pump(&mut flight, false).await?;
        flight.outcome()
    }

    /// Sends `payload` to every shard of `targets`, each behind the `BEGIN` it needs (the
    /// transaction's, for a shard joining it; pgvia's own, for an autocommit write on
    /// several shards).
    pub(super) async fn launch(
        &mut self,
        targets: ShardSet,
        payload: Payload<'_>,
        combine: Combine,
        parse_drops: &[bool],
        implicit_begin: bool,
    ) -> Result<Flight, ServerError> {
        let lanes: Vec<ShardId> = targets.iter().collect();
        let mut fan = FanOut::new(lanes.len(), combine);
        let note = std::mem::take(&mut self.note);
        for (i, &shard) in lanes.iter().enumerate() {
            if let Some(c) = self.held[shard].as_mut() {
                note.apply(c.conn());
            }
            let lane = fan.lane_mut(i);
            lane.parse_drops.extend(parse_drops.iter().copied());
            let body = payload.for_shard(shard);
            // The shard's server needs the transaction's BEGIN (and savepoints) first when
            // it joins the transaction now, or pgvia's own BEGIN for an autocommit write on
            // several shards; else the payload goes as it is, uncopied.
            let mut bytes = BytesMut::new();
            if let Payload::Kept(kept) = payload {
                self.send_kept(shard, &mut fan, i, kept).await?;
                continue;
            }
            match &mut self.tx {
                Tx::Open { begin, participants, savepoints, .. } if !participants.contains(shard) => {
                    bytes.reserve(body.len() + begin.len());
                    bytes.extend_from_slice(begin);
                    for (_, savepoint) in savepoints.iter() {
                        bytes.extend_from_slice(savepoint);
                    }
                    lane.skip_replies = 1 + savepoints.len() as u32;
                    participants.insert(shard);
                }
                Tx::Idle if implicit_begin => {
                    wire::build::query(&mut bytes, "BEGIN");
                    lane.skip_replies = 1;
                }
                _ => {
                    self.send_to(shard, body).await?;
                    continue;
                }
            }
            bytes.extend_from_slice(body);
            self.send_to(shard, &bytes).await?;
        }
        Ok(Flight {
            fan,
            lanes,
            reply_start: self.to_client.len(),
            hold: implicit_begin,
            held_limit: None,
            overflowed: false,
            charged: implicit_begin.then_some(None),
        })
    }

    /// Points the client's cancel key at the held servers of `targets`: one cancel signals
    /// every shard the exchange runs on. Called before [`Self::launch`] sends anything.
    pub(super) fn aim_cancels(&mut self, targets: ShardSet) {
        let mut servers = targets.iter().filter_map(|s| self.held[s].as_ref());
        if let Some(first) = servers.next() {
            let mut target = first.conn_ref().cancel_target();
            target.also = servers.map(|c| c.conn_ref().cancel_target()).collect();
            self.cancel.slot.set(Some(target));
        }
    }

    /// Past a flight's `held_limit`, its held replies are dropped (whole frames from
    /// `reply_start` on) and the flight marked overflowed; the shards are read on.
    fn cut_held(&mut self, flight: &mut Flight) {
        if flight.held_limit.is_some_and(|limit| self.to_client.len() > flight.reply_start + limit) {
            self.to_client.truncate(flight.reply_start);
            flight.overflowed = true;
        }
        let held = self.to_client.len().saturating_sub(flight.reply_start);
        let Some(lease) = flight.charged.as_mut() else { return };
        if flight.overflowed {
            self.to_client.truncate(flight.reply_start);
            return;
        }
        if held < crate::net::limits::LARGE_MESSAGE || lease.as_ref().is_some_and(|l| l.bytes() >= held) {
            return;
        }
        // Grown in doublings, so a large reply takes the budget a few times, not per frame.
        *lease = None;
        let cap = self.app.config().limits.max_buffered_message_bytes;
        *lease = self.app.admission.buffer_large(held.next_power_of_two(), cap);
        if lease.is_none() {
            self.to_client.truncate(flight.reply_start);
            flight.overflowed = true;
        }
    }

    /// Sends a batch with statements kept on the servers (`kept.rs`) to `shard`'s server,
    /// behind the transaction's BEGIN (and savepoints) when the shard joins it now.
    async fn send_kept(
        &mut self,
        shard: ShardId,
        fan: &mut FanOut,
        i: usize,
        kept: &super::kept::Kept,
    ) -> Result<(), ServerError> {
        let Some(checkout) = self.held[shard].as_mut() else {
            return Err(ServerError::Desync("no server held for a shard of the exchange"));
        };
        let conn = checkout.conn();
        let lane = fan.lane_mut(i);
        let mut bytes = BytesMut::with_capacity(kept.bytes.len() + 64);
        if let Tx::Open { begin, participants, savepoints, .. } = &mut self.tx {
            if !participants.contains(shard) {
                bytes.extend_from_slice(begin);
                for (_, savepoint) in savepoints.iter() {
                    bytes.extend_from_slice(savepoint);
                }
                track_sent(conn, &bytes);
                lane.skip_replies = 1 + savepoints.len() as u32;
                participants.insert(shard);
            }
        }
        super::kept::render(kept, conn, &mut bytes, lane, &mut self.to_client);
        conn.mark_used();
        conn.write_all(&bytes).await
    }

    /// Writes whole client frames to the held server of `shard`, telling its tracker.
    pub(super) async fn send_to(&mut self, shard: ShardId, bytes: &[u8]) -> Result<(), ServerError> {
        let Some(checkout) = self.held[shard].as_mut() else {
            return Err(ServerError::Desync("no server held for a shard of the exchange"));
        };
        let conn = checkout.conn();
        track_sent(conn, bytes);
        conn.mark_used();
        conn.write_all(bytes).await
    }

    /// Reads the flight's servers and merges their replies until every lane is ready (or,
    /// with `until_copy_in`, until they all wait for COPY data).
    pub(super) async fn pump(&mut self, flight: &mut Flight, until_copy_in: bool) -> Result<(), ServerError> {
        if flight.lanes.len() == 1 && !flight.hold && !until_copy_in {
            self.pump_one(flight).await?;
        }
        let mut interrupted = false;
        loop {
            if flight.fan.finished().is_some() || (until_copy_in && flight.fan.copy_in_started()) {
                if interrupted {
                    self.settle_interrupted(&flight.lanes).await;
                }
                return Ok(());
            }
            self.timers.enter(Wait::Server);
            let held = &mut self.held;
            let (lanes, fan) = (&flight.lanes, &flight.fan);
            let next = poll_fn(|cx| {
                for (i, &shard) in lanes.iter().enumerate() {
                    if !fan.wants_input(i) {
                        continue;
                    }
                    let Some(checkout) = held[shard].as_mut() else { continue };
                    if let Poll::Ready(r) = checkout.conn().poll_frame(cx) {
                        return Poll::Ready((i, r));
                    }
                }
                Poll::Pending
            });
            let (i, frame) = tokio::select! {
                next = next => next,
                wait = self.timers.expired(), if self.timers.armed() => {
                    self.query_timed_out(wait, &flight.lanes)?;
                    continue;
                }
                () = terminated(&mut self.shutdown) => return Err(self.ended_while_waiting()),
            };
            let frame = frame?;
            if let Some(checkout) = self.held[flight.lanes[i]].as_mut() {
                let conn = checkout.conn();
                conn.observe(&frame)?;
                let (event, _) = conn.tracker.server_sent(frame.tag(), frame.body());
                if let crate::server::ServerEvent::Ready {
                    status: wire::backend::TransactionStatus::Idle,
                    ..
                } = event
                {
                    // A schema change sent here is now visible to every other server.
                    conn.statements.transaction_ended();
                }
                conn.settle_statements(None);
            }
            flight
                .fan
                .push(i, frame.into_bytes(), &mut self.to_client)
                .map_err(|_| ServerError::Desync("shards answered the same request differently"))?;
            if !interrupted && flight.fan.failed() {
                interrupted = self.interrupt_lanes(flight);
            }
            // A grouping merge's rows come in slices once its input is over, each sent before
            // the next is made.
            while flight.fan.merge_has_more() {
                if !flight.hold {
                    self.flush_client().await.map_err(|e| match e {
                        SessionError::ClientIo(e) => ServerError::Io(e),
                        _ => ServerError::Desync("client write failed"),
                    })?;
                    flight.reply_start = 0;
                }
                flight.fan.drain_merge(&mut self.to_client);
                self.cut_held(flight);
            }
            self.cut_held(flight);
            if !flight.hold && self.to_client.len() >= CLIENT_FLUSH {
                self.flush_client().await.map_err(|e| match e {
                    SessionError::ClientIo(e) => ServerError::Io(e),
                    _ => ServerError::Desync("client write failed"),
                })?;
                flight.reply_start = 0;
            }
        }
    }

    /// One lane whose replies pass as the server wrote them (`FanOut::passes`): its frames are
    /// walked where they were read, each told to the server's tracker, and runs of them go to
    /// the client in one copy, without cutting a frame out of the buffer. Stops when the lane
    /// is ready, or at a frame the general pump must take (COPY), which stays unread.
    async fn pump_one(&mut self, flight: &mut Flight) -> Result<(), ServerError> {
        let shard = flight.lanes[0];
        loop {
            let Some(checkout) = self.held[shard].as_mut() else {
                return Err(ServerError::Desync("no server held for a shard of the exchange"));
            };
            let conn = checkout.conn();
            let (mut at, mut run) = (0, 0);
            let mut general = false;
            while flight.fan.finished().is_none() {
                let Some(len) = conn.decoder.peek_len(&conn.read_buf[at..]).map_err(ServerError::from)?
                else {
                    break;
                };
                let t = conn.read_buf[at];
                if !flight.fan.passes(0, t) {
                    general = true;
                    break;
                }
                if matches!(t, wire::backend::tag::PARAMETER_STATUS | wire::backend::tag::BACKEND_KEY_DATA) {
                    let body = conn.read_buf[at + 5..at + len].to_vec();
                    conn.observe_body(t, &body)?;
                }
                let (event, _) = conn.tracker.server_sent(t, &conn.read_buf[at + 5..at + len]);
                if let crate::server::ServerEvent::Ready {
                    status: wire::backend::TransactionStatus::Idle,
                    ..
                } = event
                {
                    conn.statements.transaction_ended();
                }
                conn.settle_statements(None);
                if !flight.fan.pass(0, &conn.read_buf[at..at + len]) {
                    self.to_client.extend_from_slice(&conn.read_buf[run..at]);
                    run = at + len;
                }
                at += len;
            }
            self.to_client.extend_from_slice(&conn.read_buf[run..at]);
            conn.read_buf.advance(at);
            if general || flight.fan.finished().is_some() {
                return Ok(());
            }
            if self.to_client.len() >= CLIENT_FLUSH {
                self.flush_client().await.map_err(|e| match e {
                    SessionError::ClientIo(e) => ServerError::Io(e),
                    _ => ServerError::Desync("client write failed"),
                })?;
                flight.reply_start = 0;
            }
            self.timers.enter(Wait::Server);
            let Some(checkout) = self.held[shard].as_mut() else {
                return Err(ServerError::Desync("no server held for a shard of the exchange"));
            };
            let conn = checkout.conn();
            tokio::select! {
                filled = poll_fn(|cx| conn.poll_fill(cx)) => filled?,
                wait = self.timers.expired(), if self.timers.armed() => {
                    self.query_timed_out(wait, &flight.lanes)?;
                }
                () = terminated(&mut self.shutdown) => return Err(self.ended_while_waiting()),
            }
        }
    }

    /// Runs one exchange on `targets`: servers taken, the transaction joined or begun, the
    /// replies merged, the transaction state updated and the ReadyForQuery written; an
    /// autocommit write on several shards commits with two-phase commit.
    pub(super) async fn exchange(
        &mut self,
        targets: ShardSet,
        payload: Payload<'_>,
        combine: Combine,
        parse_drops: &[bool],
        writes: bool,
    ) -> Result<(), SessionError> {
        let implicit = matches!(self.tx, Tx::Idle) && writes && targets.len() > 1;
        // A cancel that came while the statement waited for a server (here, or for the
        // collation asked before its merge) is answered now.
        if std::mem::take(&mut self.cancel_waiting) {
            self.answer_cancelled().await;
            return Ok(());
        }
        match self.take_servers(targets, writes).await {
            Ok(true) => {}
            Ok(false) => {
                self.answer_cancelled().await;
                return Ok(());
            }
            Err((shard, e)) => {
                self.shard_failed(shard, &e).await;
                return Ok(());
            }
        }
        let sent = match self.launch(targets, payload, combine, parse_drops, implicit).await {
            Ok(mut flight) => match self.pump(&mut flight, false).await {
                Ok(()) => flight.outcome(),
                Err(e) => Err(e),
            },
            Err(e) => Err(e),
        };
        let outcome = match sent {
            Ok(o) => o,
            Err(e) => {
                let shard = targets.first().unwrap_or(0);
                self.shard_failed(shard, &e).await;
                return Ok(());
            }
        };
        self.finish_exchange(targets, writes, implicit, &outcome).await;
        Ok(())
    }

    /// After an exchange's replies: the transaction state updated (an autocommit write on
    /// several shards committed or rolled back), the ReadyForQuery written, servers given
    /// back between transactions.
    pub(super) async fn finish_exchange(
        &mut self,
        targets: ShardSet,
        writes: bool,
        implicit: bool,
        outcome: &Outcome,
    ) {
        self.errored = outcome.failed;
        self.parses_answered = outcome.client_parses;
        if implicit {
            self.finish_implicit(targets, outcome).await;
        } else {
            self.note_outcome(targets, writes, outcome);
        }
        self.ready();
        if matches!(self.tx, Tx::Idle) {
            self.give_back_all().await;
        }
    }

    /// The client's next whole message (inside COPY).
    pub(super) async fn next_client_frame(&mut self) -> Result<Bytes, SessionError> {
        loop {
            if let Some(len) = self.decoder.peek_len(&self.from_client)? {
                return Ok(self.from_client.split_to(len).freeze());
            }
            match self.client.read_buf(&mut self.from_client).await {
                Ok(0) => return Err(SessionError::ClientIo(std::io::ErrorKind::UnexpectedEof.into())),
                Ok(_) => {}
                Err(e) => return Err(SessionError::ClientIo(e)),
            }
        }
    }

    /// The transaction state after an exchange the client ran itself.
    pub(super) fn note_outcome(&mut self, targets: ShardSet, writes: bool, outcome: &Outcome) {
        match &mut self.tx {
            Tx::Open { writers, failed, .. } => {
                if writes {
                    *writers = writers.union(targets);
                }
                if outcome.failed {
                    *failed = true;
                }
            }
            Tx::Idle if outcome.in_transaction => {
                // The query itself opened a transaction (`BEGIN; INSERT ...` in one text).
                let mut begin = BytesMut::new();
                wire::build::query(&mut begin, "BEGIN");
                self.tx = Tx::Open {
                    begin: begin.freeze(),
                    participants: targets,
                    writers: if writes { targets } else { ShardSet::EMPTY },
                    failed: outcome.failed,
                    savepoints: Vec::new(),
                };
            }
            Tx::Idle => {}
        }
    }

    /// An autocommit write that ran on several shards inside a transaction of pgvia's: it
    /// is committed on all of them with two-phase commit, or rolled back on all.
    async fn finish_implicit(&mut self, targets: ShardSet, outcome: &Outcome) {
        if outcome.overflowed {
            // The replies are gone, so the write must not commit without them.
            self.rollback_held(targets).await;
            self.to_client.truncate(outcome.reply_start);
            let cap = self.app.config().limits.max_buffered_message_bytes;
            let message = format!(
                "out of memory: the replies of a write on several shards, held until it commits, do not fit in pgvia's buffer \
                 (limits.max_buffered_message_bytes = {cap}, {} in use); the write was rolled back",
                self.app.admission.buffered()
            );
            wire::build::ErrorFields::error(SqlState::OUT_OF_MEMORY, &message).write(&mut self.to_client);
            self.errored = true;
            return;
        }
        if outcome.failed {
            self.rollback_held(targets).await;
            return;
        }
        if let Err(error) = self.two_phase_commit(targets, ShardSet::EMPTY).await {
            self.to_client.truncate(outcome.reply_start);
            self.to_client.extend_from_slice(&error);
        }
    }

    /// Rolls back the transaction on the held servers of `shards` (pgvia's own statement;
    /// the reply is not the client's).
    pub(super) async fn rollback_held(&mut self, shards: ShardSet) {
        let timeout = self.app.config().general.server_reset_timeout;
        for shard in shards.iter() {
            if let Some(c) = self.held[shard].as_mut() {
                if let Err(e) = c.conn().run_internal(&["ROLLBACK"], timeout).await {
                    tracing::warn!(shard, error = %e, "rolling back a shard's transaction failed; closing its server");
                    c.conn().mark_broken();
                }
            }
        }
    }
}

/// Tells a server's reply tracker about each whole frame in `bytes`, as the relay does for
/// what it forwards, so the server is known to be between requests when it is given back.
fn track_sent(conn: &mut crate::server::ServerConn, bytes: &[u8]) {
    let mut at = 0;
    while at + 5 <= bytes.len() {
        let len = u32::from_be_bytes([bytes[at + 1], bytes[at + 2], bytes[at + 3], bytes[at + 4]]) as usize;
        let end = (at + 1 + len).min(bytes.len());
        let tag = bytes[at];
        if tag == fe::QUERY || tag == fe::PARSE {
            // pgvia's sessions on this server use the unnamed statement only.
            conn.statements.unnamed = None;
        }
        conn.tracker.client_sent(tag, &bytes[at + 5..end]);
        at = end;
    }
}

/// Resolves once the client is being ended at once (`KILL_CLIENT`, shutdown past its drain);
/// a drain, which ends the client between transactions, is left to the session's next wait
/// for the client.
async fn terminated(watch: &mut crate::clients::PhaseWatch) {
    while watch.now() != crate::app::Phase::Terminating {
        let _ = watch.changed().await;
    }
}
