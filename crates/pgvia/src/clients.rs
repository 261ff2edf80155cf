//! Who is connected: one entry per logged-in client, for the admin console (`SHOW CLIENTS`,
//! `SHOW POOLS`, `KILL_CLIENT`), metrics and per-client shutdown.
//!
//! The registry map is touched only at login and disconnect. A session reports its state
//! (idle, waiting for a server, holding one) with a store into its own entry, and its
//! traffic counters are its own atomics: nothing on the hot path is shared between sessions,
//! and readers sum the entries when asked.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Instant, SystemTime};

use futures_util::task::AtomicWaker;

use crate::cancel::{CancelSlot, CancelTarget};
use crate::stats::Counters;

/// Where the process is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Running,
    /// No new clients; sessions end when their transaction does.
    Draining,
    /// `shutdown_timeout` passed: every session ends now.
    Terminating,
}

/// What a client is doing, as the admin console reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum ClientState {
    /// Logged in, holding no server, not asking for one.
    Idle = 0,
    /// Waiting for a server from its pool (or for a paused pool to resume).
    Waiting = 1,
    /// Holding a server.
    Active = 2,
}

impl ClientState {
    fn from_u8(v: u8) -> Self {
        match v {
            1 => ClientState::Waiting,
            2 => ClientState::Active,
            _ => ClientState::Idle,
        }
    }
}

/// Who a client is; fixed at login.
#[derive(Debug, Clone)]
pub struct ClientIdentity {
    pub peer: crate::net::ClientPeer,
    pub local: Option<SocketAddr>,
    pub names: ClientNames,
    pub tls: bool,
    /// Connected to the admin console rather than a pool.
    pub admin: bool,
}

impl ClientIdentity {
    pub fn user(&self) -> &str {
        self.names.user()
    }

    pub fn database(&self) -> &str {
        self.names.database()
    }

    pub fn application_name(&self) -> &str {
        self.names.application_name()
    }
}

/// A client's user, database and application names in one allocation: every logged-in
/// client keeps them for its whole life, and as three strings they were two or three heap
/// blocks and 72 bytes of its entry (issue 19).
#[derive(Debug, Clone)]
pub struct ClientNames {
    text: Box<str>,
    user_end: usize,
    database_end: usize,
}

impl ClientNames {
    pub fn new(user: &str, database: &str, application_name: &str) -> ClientNames {
        let text = [user, database, application_name].concat().into_boxed_str();
        ClientNames { text, user_end: user.len(), database_end: user.len() + database.len() }
    }

    pub fn user(&self) -> &str {
        self.text.get(..self.user_end).unwrap_or_default()
    }

    pub fn database(&self) -> &str {
        self.text.get(self.user_end..self.database_end).unwrap_or_default()
    }

    pub fn application_name(&self) -> &str {
        self.text.get(self.database_end..).unwrap_or_default()
    }
}

/// One logged-in client.
#[derive(Debug)]
pub struct ClientInfo {
    /// pgvia's own number for the client (`KILL_CLIENT id`), unique for the process's life.
    pub id: u64,
    pub who: ClientIdentity,
    pub connected_at: SystemTime,
    /// When the client was accepted, for durations.
    pub since: Instant,
    state: AtomicU8,
    /// Microseconds after `since` at which the current wait began.
    wait_started_us: AtomicU64,
    /// Microseconds after `since` at which the last query began.
    request_us: AtomicU64,
    /// Traffic, summed into its pool's totals when the client leaves.
    pub counters: Counters,
    cancel: Option<Arc<CancelSlot>>,
    /// Per-client copy of the shutdown phase (its [`phase_rank`]): the process phase is
    /// forwarded to it, and `KILL_CLIENT` / `KILL db` end just this client by raising it to
    /// `Terminating`. An atomic and a waker rather than a `watch` channel: the channel's
    /// shared state was a 344-byte allocation that every idle client kept (issue 19). One
    /// waker, not a `Notify`: a client's phase has one watcher at a time (its session, or
    /// its admin console), and the wait on a waker is a 16-byte future where `Notify`'s was
    /// 104 bytes of every idle client's task.
    phase: AtomicU8,
    phase_changed: AtomicWaker,
}

impl ClientInfo {
    pub fn state(&self) -> ClientState {
        ClientState::from_u8(self.state.load(Ordering::Relaxed))
    }

    pub fn set_state(&self, state: ClientState) {
        if state == ClientState::Waiting {
            let now = self.since.elapsed().as_micros() as u64;
            self.wait_started_us.store(now, Ordering::Relaxed);
        }
        self.state.store(state as u8, Ordering::Relaxed);
    }

    /// A query began at `at` (set by the relay's meter, once per query).
    pub fn set_request(&self, at: Instant) {
        self.request_us.store(at.saturating_duration_since(self.since).as_micros() as u64, Ordering::Relaxed);
    }

    /// When the client's last query began (its login, before any).
    pub fn last_request(&self) -> SystemTime {
        self.connected_at + std::time::Duration::from_micros(self.request_us.load(Ordering::Relaxed))
    }

    /// How long the client has been waiting for a server, if it is.
    pub fn waiting_for(&self) -> Option<std::time::Duration> {
        if self.state() != ClientState::Waiting {
            return None;
        }
        let started = self.wait_started_us.load(Ordering::Relaxed);
        let now = self.since.elapsed().as_micros() as u64;
        Some(std::time::Duration::from_micros(now.saturating_sub(started)))
    }

    /// The server the client holds right now (its cancel target), if any.
    pub fn server(&self) -> Option<Arc<CancelTarget>> {
        self.cancel.as_ref().and_then(|c| c.target())
    }

    /// Ends this client's session as shutdown would: between transactions at once, or (with
    /// `Terminating`) immediately.
    pub fn end(&self, phase: Phase) {
        let rank = phase_rank(phase);
        // A phase only moves forward; waiters are woken only when it did.
        if self.phase.fetch_max(rank, Ordering::AcqRel) < rank {
            self.phase_changed.wake();
        }
    }

    /// Follows this client's phase, as a `watch::Receiver` would.
    pub fn phase_watch(self: &Arc<Self>) -> PhaseWatch {
        PhaseWatch { client: self.clone(), seen: self.phase.load(Ordering::Acquire) }
    }
}

fn phase_rank(p: Phase) -> u8 {
    match p {
        Phase::Running => 0,
        Phase::Draining => 1,
        Phase::Terminating => 2,
    }
}

fn phase_of(rank: u8) -> Phase {
    match rank {
        0 => Phase::Running,
        1 => Phase::Draining,
        _ => Phase::Terminating,
    }
}

/// A session's view of its client's phase: `now` reads it, `changed` waits until it moves
/// past what this watch last saw. Its sender is the client's entry, which the watch keeps
/// alive, so `changed` never fails; it returns a `Result` as `watch::Receiver::changed` does.
#[derive(Debug)]
pub struct PhaseWatch {
    client: Arc<ClientInfo>,
    seen: u8,
}

impl PhaseWatch {
    /// The client this watch follows.
    pub fn client(&self) -> &Arc<ClientInfo> {
        &self.client
    }

    /// The client's phase now.
    pub fn now(&self) -> Phase {
        phase_of(self.client.phase.load(Ordering::Acquire))
    }

    /// Waits until the phase differs from the last one this watch returned from here (or
    /// saw when made), and marks it seen. Only one watch of a client may wait at a time (the
    /// client's entry keeps one waker).
    pub fn changed(
        &mut self,
    ) -> impl std::future::Future<Output = Result<(), std::convert::Infallible>> + '_ {
        std::future::poll_fn(move |cx| {
            // Registered before the check: a change between the two still wakes it.
            self.client.phase_changed.register(cx.waker());
            let now = self.client.phase.load(Ordering::Acquire);
            if now == self.seen {
                return std::task::Poll::Pending;
            }
            self.seen = now;
            std::task::Poll::Ready(Ok(()))
        })
    }
}

/// All logged-in clients.
#[derive(Debug, Default)]
pub struct ClientRegistry {
    map: Mutex<BTreeMap<u64, Arc<ClientInfo>>>,
    next_id: AtomicU64,
}

/// A client's place in the registry; dropping it removes the client.
pub struct ClientHandle {
    pub info: Arc<ClientInfo>,
    registry: Arc<ClientRegistry>,
}

impl ClientHandle {
    /// Removes the client, adding its traffic to `totals` (its pool's) in the same step, so
    /// a reader summing pools and clients never sees the counts twice or not at all.
    pub fn leave(self, totals: &crate::stats::Counters) {
        let mut map = self.registry.lock();
        totals.absorb(&self.info.counters.load());
        map.remove(&self.info.id);
    }
}

impl Drop for ClientHandle {
    fn drop(&mut self) {
        self.registry.lock().remove(&self.info.id);
    }
}

impl ClientRegistry {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Arc<ClientInfo>>> {
        self.map.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Adds a logged-in client. `phase` is the process's phase, read by the caller while
    /// this runs so a phase change cannot slip between (see [`ClientRegistry::broadcast`]).
    pub fn register(
        self: &Arc<Self>,
        who: ClientIdentity,
        since: Instant,
        cancel: Option<Arc<CancelSlot>>,
        phase: impl FnOnce() -> Phase,
    ) -> ClientHandle {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        let mut map = self.lock();
        let phase = AtomicU8::new(phase_rank(phase()));
        let info = Arc::new(ClientInfo {
            id,
            who,
            connected_at: SystemTime::now(),
            since,
            state: AtomicU8::new(ClientState::Idle as u8),
            wait_started_us: AtomicU64::new(0),
            request_us: AtomicU64::new(0),
            counters: Counters::default(),
            cancel,
            phase,
            phase_changed: AtomicWaker::new(),
        });
        map.insert(id, info.clone());
        ClientHandle { info, registry: self.clone() }
    }

    /// Every client, in login order.
    pub fn all(&self) -> Vec<Arc<ClientInfo>> {
        self.lock().values().cloned().collect()
    }

    /// Runs `f` with the registry locked: clients can neither arrive nor leave meanwhile.
    pub fn locked<R>(&self, f: impl FnOnce(&BTreeMap<u64, Arc<ClientInfo>>) -> R) -> R {
        f(&self.lock())
    }

    pub fn get(&self, id: u64) -> Option<Arc<ClientInfo>> {
        self.lock().get(&id).cloned()
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Forwards a process phase change to every client. Called after the process phase was
    /// set; a client registering meanwhile reads the new phase itself.
    pub fn broadcast(&self, phase: Phase) {
        for c in self.lock().values() {
            c.end(phase);
        }
    }
}

/// The pool reports a checkout's progress to the client it serves: its state for
/// `SHOW CLIENTS`, and its waits in its own counters (no location shared with other sessions).
impl crate::pool::Patron for ClientInfo {
    fn waiting(&self) {
        self.set_state(ClientState::Waiting);
    }

    fn served(&self, waited: std::time::Duration) {
        self.counters.add_wait(waited);
        self.set_state(ClientState::Active);
    }

    fn unserved(&self) {
        self.set_state(ClientState::Idle);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn identity() -> ClientIdentity {
        ClientIdentity {
            peer: crate::net::ClientPeer::Tcp(([127, 0, 0, 1], 5432).into()),
            local: None,
            names: ClientNames::new("u", "d", ""),
            tls: false,
            admin: false,
        }
    }

    #[tokio::test]
    async fn a_phase_watch_wakes_when_the_phase_moves_forward_only() {
        let registry = Arc::new(ClientRegistry::default());
        let handle = registry.register(identity(), Instant::now(), None, || Phase::Running);
        let mut watch = handle.info.phase_watch();
        assert_eq!(watch.now(), Phase::Running);
        let waiter = tokio::spawn(async move {
            watch.changed().await.ok();
            watch.now()
        });
        tokio::task::yield_now().await;
        // Not later than the current phase: nobody is woken.
        handle.info.end(Phase::Running);
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        handle.info.end(Phase::Draining);
        assert_eq!(waiter.await.ok(), Some(Phase::Draining));
        // Never back: a later Draining does not undo Terminating.
        handle.info.end(Phase::Terminating);
        handle.info.end(Phase::Draining);
        let mut late = handle.info.phase_watch();
        assert_eq!(late.now(), Phase::Terminating);
        // Made after the change: it has seen it, and waits for the next.
        let pending = tokio::time::timeout(std::time::Duration::from_millis(50), late.changed()).await;
        assert!(pending.is_err());
    }
}
