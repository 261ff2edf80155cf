//! Process-wide bounds on what hosts on the network can make pgvia hold before (and just
//! after) they log in: connections still logging in, per address and in all; cancel
//! requests per second; password hashes at once; bytes of large messages being received.
//!
//! Each check is a counter compared with the current configuration (`[limits]`), so a reload
//! applies new values to the next connection, cancel, hash or message. Guards give their
//! place back on drop, so no path can leak one.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use tokio::sync::Semaphore;
use wire::sqlstate::SqlState;

use crate::config::Limits;

/// Large messages count against [`Limits::max_buffered_message_bytes`] from this size up;
/// smaller ones are bounded by each session's own buffers.
pub const LARGE_MESSAGE: usize = 64 * 1024;

/// Why a new connection is closed at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// `max_pending_logins` connections are logging in already.
    Pending(u32),
    /// `max_pending_logins_per_address` connections from this address are logging in.
    PerAddress(u32),
    /// This address used its `connections_per_second_per_address` for now.
    Rate(u32),
}

impl Refusal {
    /// Reasons as the metrics label them, in [`Refusal::index`] order.
    pub const REASONS: [&'static str; 3] = ["pending", "per_address", "rate"];

    fn index(self) -> usize {
        match self {
            Refusal::Pending(_) => 0,
            Refusal::PerAddress(_) => 1,
            Refusal::Rate(_) => 2,
        }
    }

    pub fn sqlstate(self) -> SqlState {
        SqlState::TOO_MANY_CONNECTIONS
    }

    pub fn message(self) -> String {
        match self {
            Refusal::Pending(n) => format!(
                "sorry, too many connections are logging in already (limits.max_pending_logins = {n})"
            ),
            Refusal::PerAddress(n) => format!(
                "sorry, too many connections from this address are logging in already (limits.max_pending_logins_per_address = {n})"
            ),
            Refusal::Rate(n) => format!(
                "sorry, too many connections from this address; try again in a second (limits.connections_per_second_per_address = {n})"
            ),
        }
    }
}

/// The counters behind every bound of this module, one per process (held by `App`).
pub struct Admission {
    pending: AtomicUsize,
    per_address: Mutex<HashMap<IpAddr, usize>>,
    /// Each address's connection rate (only with `connections_per_second_per_address` set).
    rates: Mutex<Rates>,
    refused: AtomicU64,
    /// Connections refused since start, by [`Refusal::index`].
    refused_total: [AtomicU64; 3],
    cancels_dropped: AtomicU64,
    /// When the last "connections refused" line was logged (ms since `epoch`).
    refusal_logged: AtomicU64,
    epoch: Instant,
    cancels: Mutex<Bucket>,
    hashing: Semaphore,
    buffered: AtomicU64,
}

/// A token bucket: `rate` tokens a second, at most `rate` saved up.
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    /// Takes a token if there is one, after adding what `rate` earned since the last take.
    fn take(&mut self, rate: f64, now: Instant) -> bool {
        let refill = now.duration_since(self.at).as_secs_f64() * rate;
        self.tokens = (self.tokens.min(rate) + refill).min(rate);
        self.at = now;
        if self.tokens < 1.0 {
            return false;
        }
        self.tokens -= 1.0;
        true
    }
}

/// Buckets by address. Addresses whose bucket has refilled carry no information and are
/// dropped whenever the map has doubled since the last sweep, so many addresses cost memory
/// only while they are active.
struct Rates {
    buckets: HashMap<IpAddr, Bucket>,
    sweep_at: usize,
}

/// The map size below which no sweep is made.
const RATES_SWEEP_MIN: usize = 4096;

impl Admission {
    /// Counters for a process started with `limits` (the hashing pool's size is kept).
    pub fn new(limits: &Limits) -> Self {
        let now = Instant::now();
        Self {
            pending: AtomicUsize::new(0),
            per_address: Mutex::new(HashMap::new()),
            rates: Mutex::new(Rates { buckets: HashMap::new(), sweep_at: RATES_SWEEP_MIN }),
            refused: AtomicU64::new(0),
            refused_total: Default::default(),
            cancels_dropped: AtomicU64::new(0),
            refusal_logged: AtomicU64::new(0),
            epoch: now,
            cancels: Mutex::new(Bucket { tokens: f64::MAX, at: now }),
            hashing: Semaphore::new(limits.max_concurrent_password_hashes.max(1) as usize),
            buffered: AtomicU64::new(0),
        }
    }

    /// Counts a just-accepted connection as logging in, or says why it may not be.
    pub fn admit(self: &Arc<Self>, ip: IpAddr, limits: &Limits) -> Result<PendingLogin, Refusal> {
        if limits.connections_per_second_per_address > 0
            && !self.take_rate(ip, limits.connections_per_second_per_address)
        {
            return Err(Refusal::Rate(limits.connections_per_second_per_address));
        }
        let mut map = self.per_address.lock().unwrap_or_else(PoisonError::into_inner);
        let here = map.get(&ip).copied().unwrap_or(0);
        if here >= limits.max_pending_logins_per_address as usize {
            return Err(Refusal::PerAddress(limits.max_pending_logins_per_address));
        }
        if self.pending.load(Ordering::Acquire) >= limits.max_pending_logins as usize {
            return Err(Refusal::Pending(limits.max_pending_logins));
        }
        self.pending.fetch_add(1, Ordering::AcqRel);
        map.insert(ip, here + 1);
        Ok(PendingLogin { admission: self.clone(), ip })
    }

    /// Takes one of `ip`'s connections for this second.
    fn take_rate(&self, ip: IpAddr, rate: u32) -> bool {
        let rate = f64::from(rate);
        let now = Instant::now();
        let mut rates = self.rates.lock().unwrap_or_else(PoisonError::into_inner);
        if rates.buckets.len() >= rates.sweep_at {
            rates.buckets.retain(|_, b| now.duration_since(b.at).as_secs_f64() * rate + b.tokens < rate);
            rates.sweep_at = (rates.buckets.len() * 2).max(RATES_SWEEP_MIN);
        }
        rates.buckets.entry(ip).or_insert(Bucket { tokens: rate, at: now }).take(rate, now)
    }

    /// Connections logging in now.
    pub fn pending(&self) -> usize {
        self.pending.load(Ordering::Acquire)
    }

    /// Counts a refused connection; returns how many were refused since the last call that
    /// returned `Some`, at most once a second, so a flood is logged as a line a second.
    pub fn note_refusal(&self, why: Refusal) -> Option<u64> {
        self.refused_total[why.index()].fetch_add(1, Ordering::Relaxed);
        self.refused.fetch_add(1, Ordering::AcqRel);
        let now = self.epoch.elapsed().as_millis() as u64 + 1000;
        let last = self.refusal_logged.load(Ordering::Acquire);
        if now < last + 1000 {
            return None;
        }
        self.refusal_logged.compare_exchange(last, now, Ordering::AcqRel, Ordering::Acquire).ok()?;
        Some(self.refused.swap(0, Ordering::AcqRel))
    }

    /// Takes one cancel request's place in `cancel_requests_per_second`; false when the
    /// second's share is spent (the request is dropped, as PostgreSQL drops one it cannot
    /// match: the client is owed no answer).
    pub fn allow_cancel(&self, limits: &Limits) -> bool {
        let rate = f64::from(limits.cancel_requests_per_second);
        if rate == 0.0 {
            return true;
        }
        let allowed = self.cancels.lock().unwrap_or_else(PoisonError::into_inner).take(rate, Instant::now());
        if !allowed {
            self.cancels_dropped.fetch_add(1, Ordering::Relaxed);
        }
        allowed
    }

    /// Waits for a place to hash a password (`max_concurrent_password_hashes`, fixed at
    /// start).
    pub async fn hashing_permit(&self) -> Option<tokio::sync::SemaphorePermit<'_>> {
        self.hashing.acquire().await.ok()
    }

    /// Reserves `len` bytes of [`Limits::max_buffered_message_bytes`] for a large message
    /// being received; `None` when they are not there.
    pub fn buffer_large(self: &Arc<Self>, len: usize, cap: u64) -> Option<BufferLease> {
        let len = len as u64;
        let mut now = self.buffered.load(Ordering::Acquire);
        loop {
            if now + len > cap {
                return None;
            }
            match self.buffered.compare_exchange_weak(now, now + len, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Some(BufferLease { admission: self.clone(), len }),
                Err(seen) => now = seen,
            }
        }
    }

    /// Connections refused at accept since start, by reason ([`Refusal::REASONS`]).
    pub fn refused_total(&self) -> [u64; 3] {
        [0, 1, 2].map(|i| self.refused_total[i].load(Ordering::Relaxed))
    }

    /// Cancel requests dropped by `cancel_requests_per_second` since start.
    pub fn cancels_dropped(&self) -> u64 {
        self.cancels_dropped.load(Ordering::Relaxed)
    }

    /// Bytes of large messages being received now.
    pub fn buffered(&self) -> u64 {
        self.buffered.load(Ordering::Acquire)
    }
}

/// A connection's place among those logging in; given back on drop.
pub struct PendingLogin {
    admission: Arc<Admission>,
    ip: IpAddr,
}

impl Drop for PendingLogin {
    fn drop(&mut self) {
        self.admission.pending.fetch_sub(1, Ordering::AcqRel);
        let mut map = self.admission.per_address.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(n) = map.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                map.remove(&self.ip);
            }
        }
    }
}

/// Bytes of the large-message budget held while one message is received.
pub struct BufferLease {
    admission: Arc<Admission>,
    len: u64,
}

impl BufferLease {
    /// The message length this lease was taken for.
    pub fn bytes(&self) -> usize {
        self.len as usize
    }
}

impl Drop for BufferLease {
    fn drop(&mut self) {
        self.admission.buffered.fetch_sub(self.len, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pending_logins_are_capped_per_address_and_in_all() {
        let a = Arc::new(Admission::new(&Limits::default()));
        let limits = Limits { max_pending_logins: 3, max_pending_logins_per_address: 2, ..Limits::default() };
        let one: IpAddr = "127.0.0.2".parse().unwrap();
        let two: IpAddr = "127.0.0.1".parse().unwrap();
        let g1 = a.admit(one, &limits).unwrap();
        let _g2 = a.admit(one, &limits).unwrap();
        assert_eq!(a.admit(one, &limits).err(), Some(Refusal::PerAddress(2)));
        let _g3 = a.admit(two, &limits).unwrap();
        assert_eq!(a.admit(two, &limits).err(), Some(Refusal::Pending(3)));
        drop(g1);
        assert_eq!(a.pending(), 2);
        assert!(a.admit(one, &limits).is_ok());
    }

    #[test]
    fn connections_are_limited_per_second_per_address() {
        let a = Arc::new(Admission::new(&Limits::default()));
        let limits = Limits { connections_per_second_per_address: 3, ..Limits::default() };
        let one: IpAddr = "127.0.0.2".parse().unwrap();
        let two: IpAddr = "127.0.0.1".parse().unwrap();
        let admitted = (0..10).filter(|_| a.admit(one, &limits).is_ok()).count();
        assert_eq!(admitted, 3);
        assert_eq!(a.admit(one, &limits).err(), Some(Refusal::Rate(3)));
        assert!(a.admit(two, &limits).is_ok());
        // Idle addresses are swept once the map has grown.
        for i in 0..(RATES_SWEEP_MIN as u32 + 10) {
            let _ = a.take_rate(IpAddr::from(i.to_be_bytes()), 1_000_000);
        }
        assert!(a.rates.lock().unwrap().buckets.len() < RATES_SWEEP_MIN);
    }

    #[test]
    fn cancels_are_limited_per_second() {
        let a = Admission::new(&Limits::default());
        let limits = Limits { cancel_requests_per_second: 5, ..Limits::default() };
        let allowed = (0..20).filter(|_| a.allow_cancel(&limits)).count();
        assert_eq!(allowed, 5);
        let off = Limits { cancel_requests_per_second: 0, ..Limits::default() };
        assert!((0..20).all(|_| a.allow_cancel(&off)));
    }

    #[test]
    fn large_message_budget_is_shared_and_given_back() {
        let a = Arc::new(Admission::new(&Limits::default()));
        let l1 = a.buffer_large(60, 100).unwrap();
        assert!(a.buffer_large(60, 100).is_none());
        drop(l1);
        assert!(a.buffer_large(60, 100).is_some());
        assert_eq!(a.buffered(), 0);
    }
}
