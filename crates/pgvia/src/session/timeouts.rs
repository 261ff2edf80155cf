//! Per-session time limits: `client_idle_timeout`, `idle_in_transaction_timeout` and
//! `query_timeout`.
//!
//! A session is always waiting on one side: on the client (idle, or idle inside a
//! transaction) or on the server (a request is being answered). The deadline is armed when
//! the session moves from one kind of wait to another, never per message, so a busy session
//! pays two clock reads and two timer resets per round trip, and nothing at all when every
//! limit is off (the default).

use std::pin::Pin;
use std::time::Duration;

use tokio::time::{Instant, Sleep};
use wire::backend::TransactionStatus;
use wire::sqlstate::SqlState;

use super::error::SessionError;
use crate::config::PoolSettings;
use crate::server::tracker::Batch;
use crate::server::ServerConn;

/// How long a server may take to answer once a cancel was delivered to it.
const CANCEL_ANSWER: Duration = Duration::from_secs(1);

/// What the session is waiting for, and so which limit applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// Nothing is timed (e.g. the deadline of this wait already fired).
    None,
    /// On the client, outside a transaction.
    ClientIdle,
    /// On the client, inside a transaction (on a server, or a `BEGIN` pgvia answered).
    IdleInTransaction,
    /// On the server, which owes replies.
    Server,
    /// On the server still, after `query_timeout` sent it a cancel: if no reply comes within
    /// the cancel's own time limit and a second more, the server is unreachable (a black
    /// hole, a half-open connection) and is given up on.
    Cancelled,
}

impl Wait {
    /// The wait of a session holding `server`: on the server while it owes replies, else on
    /// the client, in or out of a transaction. Extended-protocol messages not yet closed by a
    /// Sync are a transaction (PostgreSQL's implicit one, which holds its locks until the
    /// Sync). `client_stalled`: replies wait for a client that does not read them, so the
    /// server, which cannot send more, waits on the client too; mid-statement, that is
    /// inside a transaction.
    pub fn holding(server: &ServerConn, client_stalled: bool) -> Wait {
        let tracker = &server.tracker;
        let in_transaction =
            tracker.transaction_status() != TransactionStatus::Idle || tracker.batch() == Batch::Open;
        match (client_stalled, tracker.has_pending()) {
            (true, true) => Wait::IdleInTransaction,
            (false, true) => Wait::Server,
            (_, false) if in_transaction => Wait::IdleInTransaction,
            (_, false) => Wait::ClientIdle,
        }
    }
}

pub struct Timers {
    wait: Wait,
    /// A deadline is set for the current wait.
    armed: bool,
    /// The limits and their timer, on the heap and only when some limit is on: inline, they
    /// were 64 bytes of every idle client (issue 19).
    timed: Option<Box<Timed>>,
}

/// The limits of a session that has some, and the timer they share.
struct Timed {
    client_idle: Duration,
    idle_in_transaction: Duration,
    query: Duration,
    /// Time limit for delivering a cancel.
    cancel_timeout: Duration,
    sleep: Pin<Box<Sleep>>,
}

impl Timers {
    pub fn new(settings: &PoolSettings) -> Timers {
        let cancel_timeout = settings.connect_timeout;
        let any = !(settings.client_idle_timeout.is_zero()
            && settings.idle_in_transaction_timeout.is_zero()
            && settings.query_timeout.is_zero());
        let timed = any.then(|| {
            Box::new(Timed {
                client_idle: settings.client_idle_timeout,
                idle_in_transaction: settings.idle_in_transaction_timeout,
                query: settings.query_timeout,
                cancel_timeout,
                sleep: Box::pin(tokio::time::sleep(Duration::ZERO)),
            })
        });
        Timers { wait: Wait::None, armed: false, timed }
    }

    /// The limit of `wait` (zero: none, and always so without limits).
    fn limit(&self, wait: Wait) -> Duration {
        let Some(t) = self.timed.as_deref() else { return Duration::ZERO };
        match wait {
            Wait::None => Duration::ZERO,
            Wait::ClientIdle => t.client_idle,
            Wait::IdleInTransaction => t.idle_in_transaction,
            Wait::Server => t.query,
            Wait::Cancelled => t.cancel_timeout + CANCEL_ANSWER,
        }
    }

    /// Notes the session's current wait; a new kind of wait starts its own deadline.
    pub fn enter(&mut self, wait: Wait) {
        // A server wait after the cancel keeps the cancel's deadline.
        let same = wait == self.wait || (wait == Wait::Server && self.wait == Wait::Cancelled);
        if same || self.timed.is_none() {
            return;
        }
        self.wait = wait;
        self.arm();
    }

    /// The client did something: its idle time starts again.
    pub fn restart(&mut self) {
        if self.timed.is_some() && !matches!(self.wait, Wait::Server | Wait::Cancelled) {
            self.arm();
        }
    }

    fn arm(&mut self) {
        let limit = self.limit(self.wait);
        self.armed = !limit.is_zero();
        if let (true, Some(t)) = (self.armed, self.timed.as_mut()) {
            t.sleep.as_mut().reset(Instant::now() + limit);
        }
    }

    pub fn armed(&self) -> bool {
        self.armed
    }

    /// Completes when the current wait's deadline passes, and disarms it: each wait fires
    /// once, until the session moves to another kind of wait. Only poll it while
    /// [`Timers::armed`].
    pub async fn expired(&mut self) -> Wait {
        if let Some(t) = self.timed.as_mut() {
            t.sleep.as_mut().await;
        }
        self.armed = false;
        self.wait
    }

    /// `query_timeout` passed: cancels the server's work the way a client's own cancel would
    /// (the server connection counts it as in flight, so it is not handed on before the
    /// cancel lands) and warns the client, whose request then fails with the server's 57014.
    pub fn cancel_request(&mut self, server: &ServerConn, to_client: &mut bytes::BytesMut) {
        self.cancel_requests(server.cancel_target(), to_client);
    }

    /// As [`Self::cancel_request`], for a request running on every server of `target` (the
    /// shards of a cross-shard exchange).
    pub fn cancel_requests(&mut self, target: crate::cancel::CancelTarget, to_client: &mut bytes::BytesMut) {
        // Counted in flight now, before this task returns to the relay.
        let cancel = crate::cancel::ArmedCancel::for_held_server(target);
        let timeout = self.timed.as_deref().map_or(Duration::ZERO, |t| t.cancel_timeout);
        tokio::spawn(async move {
            if let Err(e) = crate::cancel::forward(cancel, timeout).await {
                tracing::warn!(error = %e, "could not forward the cancel for query_timeout");
            }
        });
        self.query_timeout_notice(to_client);
        self.wait = Wait::Cancelled;
        self.arm();
    }

    /// The server did not answer even the cancel (see [`Wait::Cancelled`]): why the client's
    /// request fails and the server is closed.
    pub fn unanswered(&self) -> crate::server::ServerError {
        crate::server::ServerError::Timeout(self.limit(Wait::Server) + self.limit(Wait::Cancelled))
    }

    /// The error that closes a client whose idle deadline passed.
    pub fn closing_error(&self, wait: Wait) -> SessionError {
        match wait {
            Wait::IdleInTransaction => SessionError::refused(
                SqlState::IDLE_IN_TRANSACTION_SESSION_TIMEOUT,
                format!(
                    "terminating connection due to idle-in-transaction timeout \
                     (idle_in_transaction_timeout = {:?}); the transaction was rolled back",
                    self.limit(Wait::IdleInTransaction)
                ),
            ),
            _ => SessionError::refused(
                SqlState::IDLE_SESSION_TIMEOUT,
                format!(
                    "terminating connection due to idle-session timeout (client_idle_timeout = {:?})",
                    self.limit(Wait::ClientIdle)
                ),
            ),
        }
    }

    /// The warning a client gets when pgvia cancels its request; the server's own 57014
    /// error follows it.
    fn query_timeout_notice(&self, out: &mut bytes::BytesMut) {
        let message = format!(
            "query_timeout ({:?}) reached: pgvia is cancelling the request",
            self.limit(Wait::Server)
        );
        wire::build::ErrorFields::new(wire::build::Severity::Warning, SqlState::QUERY_CANCELED, &message)
            .write(out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(idle: u64, in_tx: u64, query: u64) -> PoolSettings {
        PoolSettings {
            pool_mode: crate::config::PoolMode::Transaction,
            pool_size: 1,
            min_idle: 0,
            connect_timeout: Duration::from_secs(1),
            checkout_timeout: Duration::from_secs(1),
            idle_timeout: Duration::ZERO,
            max_lifetime: Duration::ZERO,
            client_idle_timeout: Duration::from_millis(idle),
            idle_in_transaction_timeout: Duration::from_millis(in_tx),
            query_timeout: Duration::from_millis(query),
            max_prepared_statements: 0,
        }
    }

    #[tokio::test]
    async fn each_wait_has_its_own_deadline() {
        let mut t = Timers::new(&settings(100, 0, 50));
        t.enter(Wait::ClientIdle);
        assert!(t.armed());
        t.enter(Wait::IdleInTransaction);
        assert!(!t.armed(), "idle_in_transaction_timeout is off");
        t.enter(Wait::Server);
        assert!(t.armed());
        let start = Instant::now();
        assert_eq!(t.expired().await, Wait::Server);
        assert!(start.elapsed() >= Duration::from_millis(50));
        assert!(!t.armed(), "a wait fires once");
        t.enter(Wait::Server);
        assert!(!t.armed(), "the same wait is not timed again");
        t.enter(Wait::ClientIdle);
        t.enter(Wait::Server);
        assert!(t.armed(), "the next request has its own deadline");
    }

    #[test]
    fn all_off_allocates_nothing() {
        let mut t = Timers::new(&settings(0, 0, 0));
        t.enter(Wait::ClientIdle);
        assert!(!t.armed());
        assert!(t.timed.is_none());
    }
}
