//! Cancel keys: pgvia gives every client its own (process id, secret) and forwards a matching
//! CancelRequest to whichever server that client is using at that moment.
//!
//! The registry map is touched only when clients connect and disconnect; the session updates
//! its current target through a lock-free slot each time it takes or gives back a server.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use arc_swap::ArcSwapOption;
use bytes::{Bytes, BytesMut};
use rand::RngCore;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use subtle::ConstantTimeEq;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UnixStream};
use tokio::sync::Notify;

use crate::net::ServerEndpoint;

/// Where to send a cancel for a client's running query.
#[derive(Debug, Clone)]
pub struct CancelTarget {
    pub server: ServerEndpoint,
    pub process_id: u32,
    pub secret: Bytes,
    /// The server connection's count of cancels under way.
    pub in_flight: Arc<CancelsInFlight>,
    /// The other servers running the same request (the shards of a cross-shard exchange):
    /// a cancel goes to all of them, as the client's one query runs on all of them.
    pub also: Vec<CancelTarget>,
}

impl CancelTarget {
    fn all(&self) -> impl Iterator<Item = &CancelTarget> {
        std::iter::once(self).chain(self.also.iter())
    }

    fn begin_all(&self) -> Vec<InFlightGuard> {
        self.all().map(|t| t.in_flight.begin()).collect()
    }
}

/// Cancels sent to one server connection and not yet acted on by PostgreSQL. A server with a
/// cancel under way must not start another client's work: the signal could land on it.
#[derive(Debug, Default)]
pub struct CancelsInFlight {
    count: AtomicUsize,
    done: Notify,
}

impl CancelsInFlight {
    fn begin(self: &Arc<Self>) -> InFlightGuard {
        self.count.fetch_add(1, Ordering::SeqCst);
        InFlightGuard(self.clone())
    }

    /// Waits until no cancel is under way; false if `timeout` passed first.
    pub async fn settled(&self, timeout: Duration) -> bool {
        // The common case, at every server given back: no timer (and no clock read) for it.
        if self.count.load(Ordering::SeqCst) == 0 {
            return true;
        }
        let wait = async {
            loop {
                let notified = self.done.notified();
                if self.count.load(Ordering::SeqCst) == 0 {
                    return;
                }
                notified.await;
            }
        };
        tokio::time::timeout(timeout, wait).await.is_ok()
    }
}

struct InFlightGuard(Arc<CancelsInFlight>);

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        if self.0.count.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.done.notify_waiters();
        }
    }
}

#[derive(Debug)]
pub struct CancelSlot {
    secret: Secret,
    target: ArcSwapOption<CancelTarget>,
    queued: QueuedRequest,
}

/// Whether the client's request waits for a pool server, and whether a cancel came for it
/// meanwhile: such a request has no server to signal, so its session answers the cancel.
#[derive(Debug, Default)]
struct QueuedRequest {
    state: AtomicU8,
    cancelled: Notify,
}

const NOT_QUEUED: u8 = 0;
const QUEUED: u8 = 1;
const QUEUED_AND_CANCELLED: u8 = 2;

/// The time a session's request waits for a server (see [`CancelSlot::queue`]).
pub struct Queued<'a>(&'a QueuedRequest);

impl Queued<'_> {
    /// Resolves once a cancel has come for the waiting request.
    pub async fn cancelled(&self) {
        loop {
            let notified = self.0.cancelled.notified();
            if self.0.state.load(Ordering::SeqCst) == QUEUED_AND_CANCELLED {
                return;
            }
            notified.await;
        }
    }

    /// Ends the wait once the server is the slot's target; true when a cancel came before
    /// that, so it reached no server and is the session's to answer.
    pub fn finish(self) -> bool {
        let before = self.0.state.swap(NOT_QUEUED, Ordering::SeqCst);
        std::mem::forget(self);
        before == QUEUED_AND_CANCELLED
    }
}

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        self.0.state.store(NOT_QUEUED, Ordering::SeqCst);
    }
}

impl CancelSlot {
    pub fn set(&self, target: Option<CancelTarget>) {
        self.target.store(target.map(Arc::new));
    }

    /// Marks the client's request as waiting for a server until the returned guard is
    /// finished or dropped. A cancel meanwhile is kept for the session instead of dropped.
    pub fn queue(&self) -> Queued<'_> {
        self.queued.state.store(QUEUED, Ordering::SeqCst);
        Queued(&self.queued)
    }

    /// The server the client is using now, if any (for the admin console).
    pub fn target(&self) -> Option<Arc<CancelTarget>> {
        self.target.load_full()
    }
}

/// The longest secret pgvia issues: 32 bytes for a protocol 3.2 client (4 for 3.0).
const MAX_SECRET: usize = 32;

/// A cancel secret pgvia issued, inline: every logged-in client has one, and two small heap
/// allocations each (the key's and the slot's copy) were 64 bytes of every idle client.
#[derive(Debug, Clone, Copy)]
struct Secret {
    len: u8,
    bytes: [u8; MAX_SECRET],
}

impl Secret {
    fn random(len: usize, rng: &mut impl RngCore) -> Secret {
        let len = len.min(MAX_SECRET);
        let mut bytes = [0u8; MAX_SECRET];
        rng.fill_bytes(&mut bytes[..len]);
        Secret { len: len as u8, bytes }
    }

    fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }

    /// Constant-time over equal lengths; a secret of another length matches nothing.
    fn matches(&self, offered: &[u8]) -> bool {
        let own = self.as_bytes();
        own.len() == offered.len() && bool::from(own.ct_eq(offered))
    }
}

/// The keys under one process id: almost always one (ids pgvia makes up are unique), so it is
/// kept without a list of its own.
#[derive(Debug)]
enum KeysOfPid {
    One(Arc<CancelSlot>),
    /// A session-mode client is given its server's real pid, which another PostgreSQL server
    /// may also have: such keys share an id and differ in their secret.
    Shared(Vec<Arc<CancelSlot>>),
}

impl KeysOfPid {
    fn slots(&self) -> &[Arc<CancelSlot>] {
        match self {
            KeysOfPid::One(slot) => std::slice::from_ref(slot),
            KeysOfPid::Shared(list) => list,
        }
    }

    fn push(&mut self, slot: Arc<CancelSlot>) {
        match self {
            KeysOfPid::One(first) => *self = KeysOfPid::Shared(vec![first.clone(), slot]),
            KeysOfPid::Shared(list) => list.push(slot),
        }
    }

    /// Forgets `slot`; true when no key is left under the id.
    fn remove(&mut self, slot: &Arc<CancelSlot>) -> bool {
        match self {
            KeysOfPid::One(only) => Arc::ptr_eq(only, slot),
            KeysOfPid::Shared(list) => {
                list.retain(|s| !Arc::ptr_eq(s, slot));
                list.is_empty()
            }
        }
    }
}

/// Keys by process id.
#[derive(Debug, Default)]
pub struct CancelRegistry {
    slots: Mutex<HashMap<u32, KeysOfPid>>,
}

/// A client's registration; dropping it forgets the key.
pub struct CancelKey {
    pub process_id: u32,
    pub slot: Arc<CancelSlot>,
    registry: Arc<CancelRegistry>,
}

impl CancelKey {
    /// 4 bytes for a protocol 3.0 client, 32 for 3.2.
    pub fn secret(&self) -> &[u8] {
        self.slot.secret.as_bytes()
    }
}

impl Drop for CancelKey {
    fn drop(&mut self) {
        let mut slots = self.registry.slots.lock().unwrap_or_else(PoisonError::into_inner);
        if slots.get_mut(&self.process_id).is_some_and(|keys| keys.remove(&self.slot)) {
            slots.remove(&self.process_id);
        }
    }
}

impl CancelRegistry {
    /// Issues a fresh random key, with a secret of `secret_len` bytes, for a new client.
    pub fn register(self: &Arc<Self>, secret_len: usize) -> CancelKey {
        let mut rng = rand::thread_rng();
        let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        let process_id = loop {
            // Random ids do not reveal how many clients came before; 0 is avoided because
            // some drivers treat it as "no key".
            let id = rng.next_u32() & 0x7fff_ffff;
            if id != 0 && !slots.contains_key(&id) {
                break id;
            }
        };
        self.insert(&mut slots, process_id, secret_len, &mut rng)
    }

    /// Issues a key with a given process id (a session-mode client's real backend pid) and
    /// a random secret no other key with that id has.
    pub fn register_as(self: &Arc<Self>, process_id: u32, secret_len: usize) -> CancelKey {
        let mut rng = rand::thread_rng();
        let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        self.insert(&mut slots, process_id, secret_len, &mut rng)
    }

    fn insert(
        self: &Arc<Self>,
        slots: &mut HashMap<u32, KeysOfPid>,
        process_id: u32,
        secret_len: usize,
        rng: &mut impl RngCore,
    ) -> CancelKey {
        let taken = slots.get(&process_id).map(KeysOfPid::slots).unwrap_or_default();
        let secret = loop {
            let secret = Secret::random(secret_len, rng);
            if !taken.iter().any(|s| s.secret.as_bytes() == secret.as_bytes()) {
                break secret;
            }
        };
        let slot =
            Arc::new(CancelSlot { secret, target: ArcSwapOption::empty(), queued: QueuedRequest::default() });
        match slots.entry(process_id) {
            std::collections::hash_map::Entry::Occupied(mut keys) => keys.get_mut().push(slot.clone()),
            std::collections::hash_map::Entry::Vacant(free) => {
                free.insert(KeysOfPid::One(slot.clone()));
            }
        }
        CancelKey { process_id, slot, registry: self.clone() }
    }

    /// The server to cancel for a client's key, if the key is valid and the client is using
    /// a server right now.
    /// Either length is accepted from anyone: a secret of the wrong length simply matches
    /// no key (the comparison is constant-time over equal lengths).
    pub fn lookup(&self, process_id: u32, secret: &[u8]) -> Option<ArmedCancel> {
        let slot = {
            let slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
            slots.get(&process_id)?.slots().iter().find(|s| s.secret.matches(secret)).cloned()?
        };
        // A request still waiting for a server is cancelled by its session. Marked before the
        // target is read: a session that sets its target and then finishes the wait either
        // sees this mark or has set the target this lookup then reads.
        let queued = &slot.queued;
        if queued
            .state
            .compare_exchange(QUEUED, QUEUED_AND_CANCELLED, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
        {
            queued.cancelled.notify_waiters();
            return None;
        }
        let target = slot.target.load_full()?;
        // Counted in flight before the target is confirmed: a session giving its server back
        // clears the slot and then waits for the count, so either it sees this cancel and
        // waits, or this cancel sees the cleared slot and is dropped. Both sides use SeqCst.
        let guards = target.begin_all();
        let still = slot.target.load();
        if !still.as_ref().is_some_and(|t| Arc::ptr_eq(t, &target)) {
            return None;
        }
        Some(ArmedCancel { target, _in_flight: guards })
    }
}

/// A cancel whose target was confirmed while it was already counted in flight.
pub struct ArmedCancel {
    pub target: Arc<CancelTarget>,
    _in_flight: Vec<InFlightGuard>,
}

impl ArmedCancel {
    /// A cancel pgvia sends itself (`query_timeout`) for the server the calling session
    /// holds: no give-back can race with it, so it is counted in flight from here on.
    pub fn for_held_server(target: CancelTarget) -> ArmedCancel {
        let target = Arc::new(target);
        let guards = target.begin_all();
        ArmedCancel { target, _in_flight: guards }
    }
}

/// Sends the cancel to its server (and, for a cross-shard request, to every shard's at once);
/// the first failure is returned after all were tried.
pub async fn forward(cancel: ArmedCancel, timeout: Duration) -> std::io::Result<()> {
    if cancel.target.also.is_empty() {
        return forward_one(&cancel.target, timeout).await;
    }
    let sent = futures_util::future::join_all(cancel.target.all().map(|t| forward_one(t, timeout))).await;
    sent.into_iter().collect()
}

async fn forward_one(target: &CancelTarget, timeout: Duration) -> std::io::Result<()> {
    let mut out = BytesMut::with_capacity(16);
    wire::build::cancel_request(&mut out, target.process_id, &target.secret);
    // Sent in the clear, as libpq does: a cancel carries no password and PostgreSQL takes it
    // on any connection, TLS-configured or not.
    let send = async {
        match &target.server {
            ServerEndpoint::Tcp(addr) => send_and_wait(TcpStream::connect(addr).await?, &out).await,
            ServerEndpoint::Unix(path) => send_and_wait(UnixStream::connect(path).await?, &out).await,
        }
    };
    tokio::time::timeout(timeout, send).await.unwrap_or_else(|_| Err(std::io::ErrorKind::TimedOut.into()))
}

/// Writes the request and waits for the server to close the connection (it answers nothing).
async fn send_and_wait<S>(mut stream: S, request: &[u8]) -> std::io::Result<()>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    stream.write_all(request).await?;
    let mut sink = [0u8; 64];
    while stream.read(&mut sink).await? > 0 {}
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_resolve_only_with_the_right_secret() {
        let reg = Arc::new(CancelRegistry::default());
        let key = reg.register(4);
        let target = CancelTarget {
            server: ServerEndpoint::Tcp("127.0.0.1:5432".parse().unwrap()),
            process_id: 42,
            secret: Bytes::from_static(b"abcd"),
            in_flight: Arc::default(),
            also: Vec::new(),
        };
        assert!(reg.lookup(key.process_id, key.secret()).is_none(), "no server yet");
        key.slot.set(Some(target.clone()));
        assert_eq!(reg.lookup(key.process_id, key.secret()).map(|t| t.target.process_id), Some(42));
        let mut wrong = key.secret().to_vec();
        wrong[0] ^= 1;
        assert!(reg.lookup(key.process_id, &wrong).is_none());
        let pid = key.process_id;
        let secret = key.secret().to_vec();
        drop(key);
        assert!(reg.lookup(pid, &secret).is_none(), "stale key");
    }

    #[test]
    fn real_pids_shared_by_two_servers_keep_their_own_targets() {
        let reg = Arc::new(CancelRegistry::default());
        let (a, b) = (reg.register_as(4242, 4), reg.register_as(4242, 32));
        assert_ne!(a.secret(), b.secret());
        let target = |pid| CancelTarget {
            server: ServerEndpoint::Tcp("127.0.0.1:5432".parse().unwrap()),
            process_id: pid,
            secret: Bytes::from_static(b"abcd"),
            in_flight: Arc::default(),
            also: Vec::new(),
        };
        a.slot.set(Some(target(1)));
        b.slot.set(Some(target(2)));
        assert_eq!(reg.lookup(4242, a.secret()).map(|t| t.target.process_id), Some(1));
        assert_eq!(reg.lookup(4242, b.secret()).map(|t| t.target.process_id), Some(2));
        let b_secret = b.secret().to_vec();
        drop(b);
        assert!(reg.lookup(4242, &b_secret).is_none());
        assert_eq!(reg.lookup(4242, a.secret()).map(|t| t.target.process_id), Some(1));
    }

    #[test]
    fn protocol_3_2_keys_are_long_and_only_match_whole() {
        let reg = Arc::new(CancelRegistry::default());
        let key = reg.register(32);
        assert_eq!(key.secret().len(), 32);
        key.slot.set(Some(CancelTarget {
            server: ServerEndpoint::Tcp("127.0.0.1:5432".parse().unwrap()),
            process_id: 7,
            secret: Bytes::from_static(b"abcd"),
            in_flight: Arc::default(),
            also: Vec::new(),
        }));
        assert!(reg.lookup(key.process_id, key.secret()).is_some());
        assert!(reg.lookup(key.process_id, &key.secret()[..4]).is_none(), "a prefix is not the key");
        let mut longer = key.secret().to_vec();
        longer.push(0);
        assert!(reg.lookup(key.process_id, &longer).is_none());
    }

    #[tokio::test]
    async fn in_flight_cancels_settle() {
        let f = Arc::new(CancelsInFlight::default());
        assert!(f.settled(Duration::from_millis(10)).await);
        let g = f.begin();
        assert!(!f.settled(Duration::from_millis(20)).await);
        let waiter = tokio::spawn({
            let f = f.clone();
            async move { f.settled(Duration::from_secs(5)).await }
        });
        drop(g);
        assert!(waiter.await.unwrap());
    }
}
