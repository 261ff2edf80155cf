//! What a server connection still owes: the expected-reply queue, sans I/O.
//!
//! The relay reports every frame it forwards in either direction; the tracker answers whether
//! the server is quiescent (every Sync/Query answered, no COPY open, no transaction open),
//! which decides when a server may be reset, reused or handed to another client.
//!
//! Only messages that delimit replies are queued: `Q`, `F` and `S` (each answered by exactly
//! one ReadyForQuery), `E` (answered by CommandComplete, EmptyQueryResponse, PortalSuspended,
//! an error, or the start of a COPY) and `c`/`f` (the end of a client's COPY data). Parse,
//! Bind and Describe replies need no bookkeeping to find the boundaries.

use std::collections::VecDeque;

use wire::backend::TransactionStatus;

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
}

#[derive(Debug, Clone)]
pub struct ReplyTracker {
    queue: VecDeque<u8>,
    tx: TransactionStatus,
    copy: CopyState,
    /// The server entered COPY IN from a query whose Sync was already sent; PostgreSQL ignores
    /// Syncs during COPY IN, so the client's Syncs until its CopyDone/CopyFail owe nothing.
    syncs_ignored_until_copy_end: bool,
}

impl Default for ReplyTracker {
    fn default() -> Self {
        Self {
            queue: VecDeque::with_capacity(16),
            tx: TransactionStatus::Idle,
            copy: CopyState::None,
            syncs_ignored_until_copy_end: false,
        }
    }
}

fn answered_by_ready(t: u8) -> bool {
    matches!(t, b'Q' | b'S' | b'F')
}

impl ReplyTracker {
    /// Records a frame sent to the server.
    pub fn client_sent(&mut self, tag: u8) {
        match tag {
            b'S' if self.syncs_ignored_until_copy_end => {}
            b'c' | b'f' if self.syncs_ignored_until_copy_end => self.syncs_ignored_until_copy_end = false,
            b'Q' | b'F' | b'S' | b'E' | b'c' | b'f' => self.queue.push_back(tag),
            _ => {}
        }
    }

    /// Records a frame received from the server. `body` is only read for ReadyForQuery and
    /// ErrorResponse.
    pub fn server_sent(&mut self, tag: u8, body: &[u8]) -> ServerEvent {
        match tag {
            b'Z' => {
                let Some(status) = body.first().copied().and_then(TransactionStatus::from_byte) else {
                    return ServerEvent::Desync;
                };
                self.tx = status;
                self.copy = CopyState::None;
                loop {
                    match self.queue.pop_front() {
                        Some(t) if answered_by_ready(t) => break,
                        Some(_) => continue,
                        None => return ServerEvent::Desync,
                    }
                }
                ServerEvent::Ready { status, quiescent: self.queue.is_empty() }
            }
            b'G' | b'H' => {
                self.copy = if tag == b'G' { CopyState::In } else { CopyState::Out };
                self.start_copy(tag == b'G');
                ServerEvent::Other
            }
            b'C' => {
                if self.copy != CopyState::None {
                    self.copy = CopyState::None;
                } else {
                    self.pop_execute();
                }
                ServerEvent::Other
            }
            b'I' | b's' => {
                self.pop_execute();
                ServerEvent::Other
            }
            b'E' => {
                self.copy = CopyState::None;
                self.pop_execute();
                if is_fatal(body) {
                    ServerEvent::Fatal
                } else {
                    ServerEvent::Other
                }
            }
            _ => ServerEvent::Other,
        }
    }

    fn pop_execute(&mut self) {
        if self.queue.front() == Some(&b'E') {
            self.queue.pop_front();
        }
    }

    /// The oldest unanswered Query or Execute started a COPY. An Execute is answered by it; for
    /// COPY IN, the Syncs already queued behind it are ignored by the server, as are those the
    /// client sends before ending the copy.
    fn start_copy(&mut self, copy_in: bool) {
        let Some(pos) = self.queue.iter().position(|&t| t == b'Q' || t == b'E') else { return };
        let mut i = pos;
        if self.queue[pos] == b'E' {
            self.queue.remove(pos);
        } else {
            i += 1;
        }
        if !copy_in {
            return;
        }
        while i < self.queue.len() {
            match self.queue[i] {
                b'S' => {
                    self.queue.remove(i);
                }
                b'c' | b'f' => {
                    self.queue.remove(i);
                    return;
                }
                _ => i += 1,
            }
        }
        self.syncs_ignored_until_copy_end = true;
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
    /// (Execute sent, no Sync after it).
    pub fn needs_sync(&self) -> bool {
        self.queue.back().is_some_and(|&t| !answered_by_ready(t))
    }

    /// Nothing owed, no COPY, no transaction: the server can serve anyone.
    pub fn is_quiescent(&self) -> bool {
        self.queue.is_empty() && self.copy == CopyState::None && self.tx == TransactionStatus::Idle
    }

    /// Nothing owed and no COPY, though a transaction may be open.
    pub fn is_between_requests(&self) -> bool {
        self.queue.is_empty() && self.copy == CopyState::None
    }
}

/// Whether an ErrorResponse body carries severity FATAL or PANIC.
pub fn is_fatal(body: &[u8]) -> bool {
    let fields = wire::backend::Fields::new(body);
    matches!(fields.severity(), Some("FATAL") | Some("PANIC"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client(t: &mut ReplyTracker, tags: &[u8]) {
        tags.iter().for_each(|&g| t.client_sent(g));
    }

    fn ready(t: &mut ReplyTracker, s: u8) -> ServerEvent {
        t.server_sent(b'Z', &[s])
    }

    #[test]
    fn simple_and_pipelined_queries() {
        let mut t = ReplyTracker::default();
        client(&mut t, b"Q");
        assert_eq!(
            ready(&mut t, b'I'),
            ServerEvent::Ready { status: TransactionStatus::Idle, quiescent: true }
        );
        client(&mut t, b"PBDESPBDES");
        for tag in [b'1', b'2', b'T', b'D', b'C'] {
            t.server_sent(tag, b"");
        }
        assert!(matches!(ready(&mut t, b'I'), ServerEvent::Ready { quiescent: false, .. }));
        for tag in [b'1', b'2', b'T', b'D', b'C'] {
            t.server_sent(tag, b"");
        }
        assert!(matches!(ready(&mut t, b'T'), ServerEvent::Ready { quiescent: true, .. }));
        assert!(!t.is_quiescent(), "a transaction is open");
    }

    #[test]
    fn error_mid_pipeline_skips_to_sync() {
        let mut t = ReplyTracker::default();
        client(&mut t, b"PBEPBEPBES");
        t.server_sent(b'1', b"");
        t.server_sent(b'2', b"");
        t.server_sent(b'C', b"");
        t.server_sent(b'E', b"SERROR\0VERROR\0C22012\0Mdivision by zero\0\0");
        assert!(matches!(ready(&mut t, b'I'), ServerEvent::Ready { quiescent: true, .. }));
    }

    #[test]
    fn extended_copy_in_ignores_the_sync_sent_with_execute() {
        let mut t = ReplyTracker::default();
        client(&mut t, b"PBES");
        t.server_sent(b'1', b"");
        t.server_sent(b'2', b"");
        t.server_sent(b'G', b"");
        assert_eq!(t.copy_state(), CopyState::In);
        client(&mut t, b"ddcS");
        t.server_sent(b'C', b"");
        assert!(matches!(ready(&mut t, b'I'), ServerEvent::Ready { quiescent: true, .. }));
    }

    #[test]
    fn extended_copy_in_with_data_already_sent() {
        let mut t = ReplyTracker::default();
        client(&mut t, b"PBESddcS");
        t.server_sent(b'G', b"");
        t.server_sent(b'C', b"");
        assert!(matches!(ready(&mut t, b'I'), ServerEvent::Ready { quiescent: true, .. }));
    }

    #[test]
    fn simple_copy_out_then_next_execute() {
        let mut t = ReplyTracker::default();
        client(&mut t, b"Q");
        t.server_sent(b'H', b"");
        t.server_sent(b'd', b"");
        t.server_sent(b'c', b"");
        t.server_sent(b'C', b"");
        assert!(matches!(ready(&mut t, b'I'), ServerEvent::Ready { quiescent: true, .. }));
    }

    #[test]
    fn open_execute_needs_sync_and_stray_ready_is_desync() {
        let mut t = ReplyTracker::default();
        client(&mut t, b"PBEH");
        assert!(t.needs_sync());
        t.server_sent(b'C', b"");
        assert!(!t.has_pending());
        assert_eq!(ready(&mut t, b'I'), ServerEvent::Desync);
    }

    #[test]
    fn fatal_error_is_reported() {
        let mut t = ReplyTracker::default();
        client(&mut t, b"Q");
        assert_eq!(t.server_sent(b'E', b"SFATAL\0VFATAL\0C57P01\0Mbye\0\0"), ServerEvent::Fatal);
    }
}
