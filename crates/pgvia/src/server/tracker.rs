//! What a server connection still owes: the expected-reply queue, sans I/O.
//!
//! Every message sent to the server that earns a reply is queued, in order: the relay reports
//! each frame it forwards in either direction and the tracker matches every reply to the
//! request it answers. From that it knows when the server is quiescent (every Sync/Query
//! answered, no COPY open, no transaction open), which decides when a server may be reset,
//! reused or handed to another client; and it knows which replies answer messages pgvia
//! injected (to drop them), where replies pgvia makes up itself belong (a `ParseComplete` for
//! a statement the server already holds), and which requests the server skipped after an
//! error, so their effects on pgvia's statement bookkeeping can be undone.

use std::collections::VecDeque;

use bytes::Bytes;
use wire::backend::TransactionStatus;

use crate::prepared::{ClientEffect, ServerEffect};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CopyState {
    None,
    In,
    Out,
}

/// A reply from the server that the session must react to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerEvent {
    /// Nothing of note.
    Other,
    /// A ReadyForQuery arrived; `quiescent` when nothing else is outstanding.
    Ready { status: TransactionStatus, quiescent: bool },
    /// The server reported a FATAL or PANIC error and will close.
    Fatal,
    /// The server answered something it was never asked: the connection is out of step.
    Desync,
    /// The Bind that began a replayable exchange failed because the server's plan of this
    /// statement (by id) no longer fits its tables; its error and the exchange's
    /// ReadyForQuery are dropped, and the relay sends the exchange again on a fresh statement.
    StalePlan(u64),
    /// As `StalePlan`, for an exchange that cannot be retried (its client keeps the results'
    /// old shape): the error goes to the client, and other servers re-parse the statement.
    StaleSeen(u64),
}

/// What a request sent to the server (or answered by pgvia) expects back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request {
    /// `Q`: everything up to ReadyForQuery.
    Query,
    /// `F`: a result, then ReadyForQuery.
    FunctionCall,
    Parse,
    Bind,
    /// `D` of a statement: ParameterDescription, then RowDescription or NoData.
    DescribeStatement {
        params_seen: bool,
    },
    /// `D` of a portal: RowDescription or NoData.
    DescribePortal,
    Execute,
    Close,
    Sync,
    /// `c`/`f` sent before the server started the COPY they end.
    CopyEnd,
    /// Never sent: pgvia answers with this message (an empty-bodied one such as
    /// ParseComplete or CloseComplete) when everything before it has been answered.
    Answered(u8),
    /// Never sent: a simple query pgvia answers with CommandComplete carrying this tag and
    /// ReadyForQuery (SQL-level `PREPARE`/`DEALLOCATE` of statements the server keeps).
    AnsweredCommand(&'static str),
}

/// A reply pgvia gives in the server's place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// An empty-bodied message with this tag.
    Empty(u8),
    /// CommandComplete with this tag, then ReadyForQuery with this status (or, in a failed
    /// transaction, the error PostgreSQL gives every command there).
    Command(&'static str, TransactionStatus),
}

impl Request {
    fn answered_by_ready(self) -> bool {
        matches!(self, Request::Query | Request::Sync | Request::FunctionCall | Request::AnsweredCommand(_))
    }

    /// The request a frontend message makes, if it earns any reply. `body` is read only for
    /// Describe.
    pub fn of_frontend(tag: u8, body: &[u8]) -> Option<Request> {
        Some(match tag {
            b'Q' => Request::Query,
            b'F' => Request::FunctionCall,
            b'P' => Request::Parse,
            b'B' => Request::Bind,
            b'D' if body.first() == Some(&b'S') => Request::DescribeStatement { params_seen: false },
            b'D' => Request::DescribePortal,
            b'E' => Request::Execute,
            b'C' => Request::Close,
            b'S' => Request::Sync,
            b'c' | b'f' => Request::CopyEnd,
            _ => return None,
        })
    }
}

/// What becomes of the server's replies to one request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Replies {
    /// Passed on to the client.
    #[default]
    Forward,
    /// pgvia injected the request: its success is dropped (for a query, everything up to and
    /// including its ReadyForQuery), an error is passed on (the client must learn why its own
    /// message failed).
    DropSuccess,
    /// pgvia injected the request and the client was already answered: everything is dropped.
    DropAll,
    /// The request was sent to fail on purpose: its ErrorResponse is replaced by this frame
    /// (the error PostgreSQL would give the client's own message).
    ReplaceError(Bytes),
}

/// One queued request.
#[derive(Debug)]
pub struct Pending {
    pub request: Request,
    pub replies: Replies,
    /// Statement bookkeeping done when the request was sent, undone if the server skips or
    /// fails it.
    pub server_effect: Option<ServerEffect>,
    pub client_effect: Option<ClientEffect>,
}

impl Pending {
    pub fn plain(request: Request) -> Self {
        Self { request, replies: Replies::Forward, server_effect: None, client_effect: None }
    }
}

/// A request whose replies are complete, with the effects recorded when it was sent.
#[derive(Debug)]
pub struct Finished {
    pub server_effect: Option<ServerEffect>,
    pub client_effect: Option<ClientEffect>,
    /// False when the server failed or skipped the request.
    pub ok: bool,
}

/// What the relay does with one frame from the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fate {
    Forward,
    Drop,
    Replace(Bytes),
}

/// Whether extended-protocol messages reached the server since the last Sync (or Query).
/// PostgreSQL runs them in an implicit transaction that only a Sync ends, even once every
/// reply has arrived; a client that leaves inside one must have it rolled back, never
/// committed by a Sync pgvia sends for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Batch {
    Closed,
    Open,
}

impl Batch {
    /// The batch after the server takes `request` in (not while it skips to a Sync).
    fn after(self, request: Request) -> Batch {
        match request {
            Request::Sync | Request::Query | Request::FunctionCall | Request::AnsweredCommand(_) => {
                Batch::Closed
            }
            Request::Parse
            | Request::Bind
            | Request::DescribeStatement { .. }
            | Request::DescribePortal
            | Request::Execute
            | Request::Close => Batch::Open,
            // pgvia answers these itself, and a CopyDone/CopyFail ends a COPY, not the batch.
            Request::Answered(_) | Request::CopyEnd => self,
        }
    }
}

/// What the server discards of what the client sends next. The two never overlap: no COPY
/// starts while the server skips to a Sync, and an error during COPY IN ends the COPY.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ignoring {
    Nothing,
    /// An extended-protocol error: every message up to the next Sync, not yet sent.
    UntilSync,
    /// COPY IN from a query whose Sync was already sent: PostgreSQL ignores Syncs during
    /// COPY IN, so the client's Syncs until its CopyDone/CopyFail owe nothing.
    SyncsUntilCopyEnd,
}

#[derive(Debug)]
pub struct ReplyTracker {
    queue: VecDeque<Pending>,
    tx: TransactionStatus,
    batch: Batch,
    copy: CopyState,
    ignoring: Ignoring,
    /// The COPY under way was started by an Execute: an error ending it leaves the server
    /// discarding messages until the next Sync, as after any extended-protocol error.
    copy_from_execute: bool,
    /// Requests with effects that completed or were skipped, for the relay to settle.
    finished: Vec<Finished>,
}

impl Default for ReplyTracker {
    fn default() -> Self {
        Self {
            queue: VecDeque::with_capacity(16),
            tx: TransactionStatus::Idle,
            batch: Batch::Closed,
            copy: CopyState::None,
            ignoring: Ignoring::Nothing,
            copy_from_execute: false,
            finished: Vec::new(),
        }
    }
}

impl ReplyTracker {
    /// Records a frame sent to the server as it came from the client (or from pgvia's own
    /// queries). `body` is read only for Describe.
    pub fn client_sent(&mut self, tag: u8, body: &[u8]) {
        if let Some(request) = Request::of_frontend(tag, body) {
            self.push(Pending::plain(request));
        }
    }

    /// Records a request with its reply handling and effects. Requests the server will
    /// discard (after an error, until Sync) are settled as skipped at once.
    pub fn push(&mut self, pending: Pending) {
        self.note_batch(pending.request);
        match pending.request {
            Request::Sync if self.ignoring == Ignoring::SyncsUntilCopyEnd => return,
            Request::CopyEnd if self.ignoring == Ignoring::SyncsUntilCopyEnd => {
                self.ignoring = Ignoring::Nothing;
                return;
            }
            // PostgreSQL ignores CopyDone/CopyFail outside a COPY (postgres.js sends CopyFail
            // when it drops a finished copy stream); only one a queued request may yet start a
            // COPY for is owed anything.
            Request::CopyEnd
                if self.copy == CopyState::None
                    && !self.queue.iter().any(|p| matches!(p.request, Request::Query | Request::Execute)) =>
            {
                return;
            }
            Request::Sync => self.ignoring = Ignoring::Nothing,
            _ if self.ignoring == Ignoring::UntilSync => {
                self.settle(pending, false);
                return;
            }
            _ => {}
        }
        self.queue.push_back(pending);
    }

    /// Follows the implicit transaction of unsynced extended-protocol messages. Messages the
    /// server ignores (anything but Sync while it skips after an error, a Sync during COPY IN)
    /// change nothing.
    fn note_batch(&mut self, request: Request) {
        let ignored = match request {
            Request::Sync => self.ignoring == Ignoring::SyncsUntilCopyEnd,
            _ => self.ignoring == Ignoring::UntilSync,
        };
        if !ignored {
            self.batch = self.batch.after(request);
        }
    }

    /// Whether extended-protocol messages the server took in are not yet closed by a Sync.
    pub fn batch(&self) -> Batch {
        self.batch
    }

    /// Whether the server is discarding messages until a Sync (so requests sent now do
    /// nothing).
    pub fn is_skipping(&self) -> bool {
        self.ignoring == Ignoring::UntilSync
    }

    fn settle(&mut self, p: Pending, ok: bool) {
        if p.server_effect.is_some() || p.client_effect.is_some() {
            self.finished.push(Finished {
                server_effect: p.server_effect,
                client_effect: p.client_effect,
                ok,
            });
        }
    }

    /// Requests with effects settled since the last call, oldest first.
    pub fn take_finished(&mut self) -> std::vec::Drain<'_, Finished> {
        self.finished.drain(..)
    }

    pub fn has_finished(&self) -> bool {
        !self.finished.is_empty()
    }

    /// The reply pgvia must give now because every request before it has been answered.
    pub fn take_answered(&mut self) -> Option<Answer> {
        let answer = match self.queue.front()?.request {
            Request::Answered(tag) => Answer::Empty(tag),
            Request::AnsweredCommand(tag) => Answer::Command(tag, self.tx),
            _ => return None,
        };
        if let Some(p) = self.queue.pop_front() {
            // A command in a failed transaction is refused, and so changes nothing.
            let ok = !matches!(answer, Answer::Command(_, TransactionStatus::Failed));
            self.settle(p, ok);
        }
        Some(answer)
    }

    /// The fate of a frame that belongs to the oldest request without completing it.
    fn within(&self) -> Fate {
        match self.queue.front() {
            Some(Pending { replies: Replies::DropAll, .. }) => Fate::Drop,
            Some(Pending { request: Request::Query, replies: Replies::DropSuccess, .. }) => Fate::Drop,
            _ => Fate::Forward,
        }
    }

    /// The oldest request is answered in full by this frame, which must be one of `expected`.
    fn complete(&mut self, expected: impl Fn(Request) -> bool) -> (ServerEvent, Fate) {
        match self.queue.front() {
            Some(p) if expected(p.request) => {}
            _ => return (ServerEvent::Desync, Fate::Forward),
        }
        let Some(p) = self.queue.pop_front() else { return (ServerEvent::Desync, Fate::Forward) };
        let fate = match p.replies {
            Replies::Forward | Replies::ReplaceError(_) => Fate::Forward,
            Replies::DropSuccess | Replies::DropAll => Fate::Drop,
        };
        self.settle(p, true);
        (ServerEvent::Other, fate)
    }

    /// Records a frame received from the server and says what to do with it. `body` is only
    /// read for ReadyForQuery and ErrorResponse.
    pub fn server_sent(&mut self, tag: u8, body: &[u8]) -> (ServerEvent, Fate) {
        match tag {
            b'Z' => self.ready(body),
            b'1' => self.complete(|r| r == Request::Parse),
            b'2' => self.complete(|r| r == Request::Bind),
            b'3' => self.complete(|r| r == Request::Close),
            b't' => match self.queue.front_mut() {
                Some(Pending { request: Request::DescribeStatement { params_seen }, replies, .. }) => {
                    *params_seen = true;
                    let drop = matches!(replies, Replies::DropSuccess | Replies::DropAll);
                    (ServerEvent::Other, if drop { Fate::Drop } else { Fate::Forward })
                }
                _ => (ServerEvent::Desync, Fate::Forward),
            },
            b'T' | b'n' => match self.queue.front().map(|p| p.request) {
                Some(Request::DescribeStatement { .. } | Request::DescribePortal) => self
                    .complete(|r| matches!(r, Request::DescribeStatement { .. } | Request::DescribePortal)),
                _ => (ServerEvent::Other, self.within()),
            },
            b'C' if self.copy != CopyState::None => {
                self.copy = CopyState::None;
                (ServerEvent::Other, self.within())
            }
            b'C' | b'I' | b's' => match self.queue.front().map(|p| p.request) {
                Some(Request::Execute) => self.complete(|r| r == Request::Execute),
                _ => (ServerEvent::Other, self.within()),
            },
            b'G' | b'H' => {
                self.copy = if tag == b'G' { CopyState::In } else { CopyState::Out };
                self.start_copy(tag == b'G');
                (ServerEvent::Other, self.within())
            }
            b'E' => self.error(body),
            // Notices, notifications and parameter changes can come at any time.
            b'N' | b'A' | b'S' => (ServerEvent::Other, Fate::Forward),
            _ => (ServerEvent::Other, self.within()),
        }
    }

    fn ready(&mut self, body: &[u8]) -> (ServerEvent, Fate) {
        let Some(status) = body.first().copied().and_then(TransactionStatus::from_byte) else {
            return (ServerEvent::Desync, Fate::Forward);
        };
        self.tx = status;
        self.copy = CopyState::None;
        self.copy_from_execute = false;
        loop {
            match self.queue.pop_front() {
                Some(p) if p.request.answered_by_ready() => {
                    let fate = match p.replies {
                        Replies::DropAll | Replies::DropSuccess => Fate::Drop,
                        _ => Fate::Forward,
                    };
                    self.settle(p, true);
                    self.stop_ignoring(Ignoring::UntilSync);
                    self.drop_stray_copy_ends();
                    let quiescent = self.queue.is_empty();
                    return (ServerEvent::Ready { status, quiescent }, fate);
                }
                // Requests a COPY made the server ignore.
                Some(p) => self.settle(p, false),
                None => return (ServerEvent::Desync, Fate::Forward),
            }
        }
    }

    /// An ErrorResponse: a Query or Sync stays owed until its ReadyForQuery; any other
    /// request failed, and the server skips everything after it up to the next Sync.
    fn error(&mut self, body: &[u8]) -> (ServerEvent, Fate) {
        let ends_extended_copy = self.copy != CopyState::None && self.copy_from_execute;
        if self.copy != CopyState::None {
            // The COPY is over: a Sync the client sends from now on counts again.
            self.stop_ignoring(Ignoring::SyncsUntilCopyEnd);
        }
        self.copy = CopyState::None;
        let event = if is_fatal(body) { ServerEvent::Fatal } else { ServerEvent::Other };
        let front = self.queue.front().map(|p| p.request);
        if ends_extended_copy && front != Some(Request::Sync) {
            // The COPY an Execute started failed (CopyFail, bad data): the server now skips
            // what the client sent after it up to the next Sync. Its error answers no request.
            self.skip_to_sync();
            return (event, Fate::Forward);
        }
        match front {
            None | Some(Request::Query | Request::FunctionCall | Request::Sync) => {
                let fate = match self.queue.front_mut() {
                    Some(Pending { replies: Replies::DropAll, .. }) => Fate::Drop,
                    Some(p @ Pending { replies: Replies::ReplaceError(_), .. }) => {
                        // The query failed as intended; what follows it is the client's again.
                        let Replies::ReplaceError(frame) = std::mem::take(&mut p.replies) else {
                            return (event, Fate::Forward);
                        };
                        Fate::Replace(frame)
                    }
                    _ => Fate::Forward,
                };
                (event, fate)
            }
            Some(_) => {
                let Some(failed) = self.queue.pop_front() else { return (event, Fate::Forward) };
                let mut fate = match &failed.replies {
                    Replies::ReplaceError(frame) => Fate::Replace(frame.clone()),
                    _ => Fate::Forward,
                };
                let replay = match failed.server_effect {
                    Some(ServerEffect::ReplayFrom { id, replay }) if is_stale_plan(body) => {
                        Some((id, replay))
                    }
                    _ => None,
                };
                self.settle(failed, false);
                self.skip_to_sync();
                // Replayable only when nothing but the exchange's own Sync is still owed.
                match (replay, self.queue.len()) {
                    (Some((id, true)), 1) => {
                        if let Some(sync) = self.queue.front_mut() {
                            sync.replies = Replies::DropAll;
                            fate = Fate::Drop;
                            return (ServerEvent::StalePlan(id), fate);
                        }
                        (event, fate)
                    }
                    (Some((id, _)), _) => (ServerEvent::StaleSeen(id), fate),
                    _ => (event, fate),
                }
            }
        }
    }

    /// After an extended-protocol error: the server skips every request up to the next Sync
    /// (settled as failed); with no Sync sent yet, it goes on skipping what comes.
    fn skip_to_sync(&mut self) {
        while let Some(p) = self.queue.front() {
            if p.request == Request::Sync {
                break;
            }
            if let Some(p) = self.queue.pop_front() {
                self.settle(p, false);
            }
        }
        if self.queue.is_empty() {
            self.ignoring = Ignoring::UntilSync;
        } else {
            self.stop_ignoring(Ignoring::UntilSync);
        }
    }

    /// Ends `what` if it is what the server ignores now.
    fn stop_ignoring(&mut self, what: Ignoring) {
        if self.ignoring == what {
            self.ignoring = Ignoring::Nothing;
        }
    }

    /// A CopyDone/CopyFail sent behind a Query or Execute ends the COPY that request may
    /// start. Once the request is answered without starting one (it failed, or it was no COPY
    /// IN), nothing is left for the CopyDone/CopyFail to end: PostgreSQL ignores copy messages
    /// outside COPY mode, so it earns no reply and must not stay owed.
    fn drop_stray_copy_ends(&mut self) {
        if self.copy != CopyState::None {
            return;
        }
        while self.queue.front().is_some_and(|p| p.request == Request::CopyEnd) {
            if let Some(p) = self.queue.pop_front() {
                self.settle(p, false);
            }
        }
    }

    /// The oldest unanswered Query or Execute started a COPY. An Execute is answered by it; for
    /// COPY IN, the Syncs already queued behind it are ignored by the server, as are those the
    /// client sends before ending the copy.
    fn start_copy(&mut self, copy_in: bool) {
        let Some(pos) =
            self.queue.iter().position(|p| matches!(p.request, Request::Query | Request::Execute))
        else {
            return;
        };
        let mut i = pos;
        self.copy_from_execute = self.queue[pos].request == Request::Execute;
        if self.copy_from_execute {
            if let Some(p) = self.queue.remove(pos) {
                self.settle(p, true);
            }
        } else {
            i += 1;
        }
        if !copy_in {
            return;
        }
        let mut ended = false;
        while i < self.queue.len() {
            match self.queue[i].request {
                Request::Sync => {
                    self.queue.remove(i);
                }
                Request::CopyEnd => {
                    self.queue.remove(i);
                    ended = true;
                    break;
                }
                _ => i += 1,
            }
        }
        if ended {
            self.stop_ignoring(Ignoring::SyncsUntilCopyEnd);
        } else {
            self.ignoring = Ignoring::SyncsUntilCopyEnd;
        }
        if self.copy_from_execute {
            // The Syncs just dropped were counted as closing the implicit transaction when they
            // were sent; the server ignores them, so it is open until a Sync after the COPY.
            self.batch = self.queue.iter().skip(pos).fold(Batch::Open, |b, p| b.after(p.request));
        }
    }

    pub fn transaction_status(&self) -> TransactionStatus {
        self.tx
    }

    pub fn copy_state(&self) -> CopyState {
        self.copy
    }

    /// Whether requests are still unanswered.
    pub fn has_pending(&self) -> bool {
        !self.queue.is_empty()
    }

    /// Whether a Sync is needed to close an extended-protocol exchange the client left open
    /// (an unsynced batch, even one whose replies all arrived, or the server skipping until
    /// a Sync).
    pub fn needs_sync(&self) -> bool {
        self.ignoring == Ignoring::UntilSync
            || self.batch == Batch::Open
            || self.queue.back().is_some_and(|p| !p.request.answered_by_ready())
    }

    /// Nothing owed, no COPY, no transaction (an unsynced batch is one): the server can serve
    /// anyone.
    pub fn is_quiescent(&self) -> bool {
        self.queue.is_empty()
            && self.copy == CopyState::None
            && self.tx == TransactionStatus::Idle
            && self.batch == Batch::Closed
            && self.ignoring != Ignoring::UntilSync
    }

    /// Nothing owed and no COPY, though a transaction may be open.
    pub fn is_between_requests(&self) -> bool {
        self.queue.is_empty() && self.copy == CopyState::None && self.ignoring != Ignoring::UntilSync
    }
}

/// Whether an ErrorResponse is PostgreSQL's refusal to run a prepared statement whose result
/// type changed since it was prepared.
fn is_stale_plan(body: &[u8]) -> bool {
    let fields = wire::backend::Fields::new(body);
    fields.code() == Some("0A000")
        && fields.message().is_some_and(|m| m.starts_with("cached plan must not change result type"))
}

impl ReplyTracker {
    /// Marks the Bind or Describe just queued as the start of an exchange pgvia may send again (see
    /// [`ServerEvent::StalePlan`]).
    pub fn mark_replay_start(&mut self, statement_id: u64) {
        if let Some(p) = self.queue.back_mut() {
            let starts = matches!(p.request, Request::Bind | Request::DescribeStatement { .. });
            if starts && p.server_effect.is_none() {
                p.server_effect = Some(ServerEffect::ReplayFrom { id: statement_id, replay: true });
            }
        }
    }

    /// The exchange marked by [`Self::mark_replay_start`] will not be retried after all.
    pub fn clear_replay_start(&mut self) {
        for p in self.queue.iter_mut() {
            if let Some(ServerEffect::ReplayFrom { replay, .. }) = &mut p.server_effect {
                *replay = false;
            }
        }
    }

    /// Whether nothing is owed but replies pgvia gives itself, outside any transaction: a
    /// Bind queued now starts an exchange that can safely be sent again.
    pub fn at_idle_boundary(&self) -> bool {
        self.tx == TransactionStatus::Idle
            // Behind unsynced messages, a retry would lose their part of the implicit
            // transaction, which the failure rolled back.
            && self.batch == Batch::Closed
            && self.ignoring != Ignoring::UntilSync
            && self.copy == CopyState::None
            && self
                .queue
                .iter()
                .all(|p| matches!(p.request, Request::Answered(_) | Request::AnsweredCommand(_)))
    }
}

impl ReplyTracker {
    /// The server is gone without answering what is queued: every request is settled as
    /// failed, so its statement bookkeeping is undone before the requests go to another
    /// server.
    pub fn abandon(&mut self) {
        while let Some(p) = self.queue.pop_front() {
            self.settle(p, false);
        }
    }
}

/// Whether an ErrorResponse body carries severity FATAL or PANIC.
pub fn is_fatal(body: &[u8]) -> bool {
    let fields = wire::backend::Fields::new(body);
    matches!(fields.severity(), Some("FATAL") | Some("PANIC"))
}

#[cfg(test)]
#[path = "tracker_tests.rs"]
mod tests;
