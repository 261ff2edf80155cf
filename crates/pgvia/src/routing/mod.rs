//! A database's servers (a primary and its replicas): what role each has, whether it is fit
//! to serve, and which one a transaction goes to.
//!
//! [`Hosts`] is shared by every pool of a database; the health checker (`health.rs`) is
//! the only writer of roles and lag, sessions read them with atomic loads when they pick a
//! server at the start of a transaction (`pick`), and report a server they could not reach
//! (`ban`). Which role a transaction needs is decided from its SQL in `decide.rs`.

pub mod decide;
mod group;
mod health;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use crate::config::{LoadBalance, RoutingSettings, ServerEntry, ServerRole};
use crate::server::ServerAddress;

pub use decide::{Decision, Target};
pub use group::PoolGroup;

/// What a server is now, as last seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum HostRole {
    /// Not yet checked (`role = auto`) or not reachable since startup.
    Unknown = 0,
    Primary = 1,
    Replica = 2,
}

/// Whether a server may be given traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum HostState {
    /// Not checked yet; a server with a configured role is used meanwhile.
    Unknown = 0,
    Healthy = 1,
    /// Failed a connect or a check; out of rotation until the ban ends and a check passes.
    Banned = 2,
    /// A replica too far behind the primary; out of rotation until it catches up.
    Lagging = 3,
}

impl HostRole {
    /// The role a server has before (or, unless `auto`, regardless of) any check.
    fn configured(role: ServerRole) -> HostRole {
        match role {
            ServerRole::Primary => HostRole::Primary,
            ServerRole::Replica => HostRole::Replica,
            ServerRole::Auto => HostRole::Unknown,
        }
    }

    fn from_u8(v: u8) -> HostRole {
        match v {
            1 => HostRole::Primary,
            2 => HostRole::Replica,
            _ => HostRole::Unknown,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            HostRole::Unknown => "unknown",
            HostRole::Primary => "primary",
            HostRole::Replica => "replica",
        }
    }
}

impl HostState {
    fn from_u8(v: u8) -> HostState {
        match v {
            1 => HostState::Healthy,
            2 => HostState::Banned,
            3 => HostState::Lagging,
            _ => HostState::Unknown,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            HostState::Unknown => "unknown",
            HostState::Healthy => "healthy",
            HostState::Banned => "banned",
            HostState::Lagging => "lagging",
        }
    }
}

/// One server of a database.
#[derive(Debug)]
pub struct Host {
    pub entry: ServerEntry,
    role: AtomicU8,
    state: AtomicU8,
    /// Milliseconds since [`Hosts::epoch`] until which a ban holds.
    banned_until: AtomicU64,
    lag_bytes: AtomicU64,
    lag_ms: AtomicU64,
    /// Transactions (session mode: sessions) sent here.
    pub routed: AtomicU64,
    /// Why the last check or connect failed, for `SHOW HOSTS` and logs.
    last_error: Mutex<String>,
}

impl Host {
    fn new(entry: ServerEntry) -> Host {
        Host {
            role: AtomicU8::new(HostRole::configured(entry.role) as u8),
            entry,
            state: AtomicU8::new(HostState::Unknown as u8),
            banned_until: AtomicU64::new(0),
            lag_bytes: AtomicU64::new(0),
            lag_ms: AtomicU64::new(0),
            routed: AtomicU64::new(0),
            last_error: Mutex::new(String::new()),
        }
    }

    pub fn role(&self) -> HostRole {
        HostRole::from_u8(self.role.load(Ordering::Acquire))
    }

    pub fn state(&self) -> HostState {
        HostState::from_u8(self.state.load(Ordering::Acquire))
    }

    pub fn lag_bytes(&self) -> u64 {
        self.lag_bytes.load(Ordering::Relaxed)
    }

    pub fn lag_ms(&self) -> u64 {
        self.lag_ms.load(Ordering::Relaxed)
    }

    pub fn last_error(&self) -> String {
        self.last_error.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    fn set_error(&self, why: &str) {
        let mut e = self.last_error.lock().unwrap_or_else(PoisonError::into_inner);
        e.clear();
        e.push_str(why);
    }

    /// Usable for a transaction: not banned or lagging (a server not yet checked counts,
    /// so a database with configured roles works from the first client on).
    fn usable(&self) -> bool {
        matches!(self.state(), HostState::Healthy | HostState::Unknown)
    }

    /// `host:port`, for logs.
    pub fn label(&self) -> String {
        format!("{}:{}", self.entry.host, self.entry.port)
    }
}

/// No primary is known.
const NO_PRIMARY: usize = usize::MAX;

/// A database's servers and what is known about them.
#[derive(Debug)]
pub struct Hosts {
    pub database: String,
    pub settings: RoutingSettings,
    hosts: Box<[Host]>,
    primary: AtomicUsize,
    /// Round-robin position.
    turn: AtomicUsize,
    /// Signalled after every health check round: sessions waiting for a primary look again.
    changed: Notify,
    /// Asks the checker to run a round now (a session could not reach a server).
    wake: Notify,
    /// Replaced by a reload: sessions holding it fetch the database's current one.
    retired: AtomicBool,
    /// The primary's WAL position at the previous health check round (read by the checker only).
    primary_lsn_before: AtomicU64,
    epoch: Instant,
}

impl Hosts {
    /// The servers of `database`; starts the health checker when the database needs one,
    /// logging in as `check_user` (address minus the user; the password is the user's).
    pub fn new(
        database: &str,
        settings: RoutingSettings,
        check_addr: Option<ServerAddress>,
        max_frame: usize,
    ) -> Arc<Hosts> {
        let hosts: Box<[Host]> = settings.servers.iter().cloned().map(Host::new).collect();
        let primary = hosts.iter().position(|h| h.role() == HostRole::Primary).unwrap_or(NO_PRIMARY);
        let checks = settings.checks_health();
        let hosts = Arc::new(Hosts {
            database: database.to_owned(),
            settings,
            hosts,
            primary: AtomicUsize::new(primary),
            turn: AtomicUsize::new(0),
            changed: Notify::new(),
            wake: Notify::new(),
            retired: AtomicBool::new(false),
            primary_lsn_before: AtomicU64::new(0),
            epoch: Instant::now(),
        });
        match check_addr {
            Some(addr) if checks => health::spawn(Arc::downgrade(&hosts), addr, max_frame),
            _ if checks => {
                tracing::warn!(database, "no user to run health checks as; servers are not checked")
            }
            _ => {}
        }
        hosts
    }

    pub fn all(&self) -> &[Host] {
        &self.hosts
    }

    pub fn len(&self) -> usize {
        self.hosts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.hosts.is_empty()
    }

    pub fn is_retired(&self) -> bool {
        self.retired.load(Ordering::Acquire)
    }

    /// A reload replaced this database's servers: the checker stops, sessions move on.
    pub fn retire(&self) {
        self.retired.store(true, Ordering::Release);
        self.wake.notify_one();
        self.changed.notify_waiters();
    }

    /// The primary's index, if one is known and not banned.
    pub fn primary(&self) -> Option<usize> {
        let i = self.primary.load(Ordering::Acquire);
        self.hosts.get(i).filter(|h| h.state() != HostState::Banned).map(|_| i)
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// A session could not reach server `i`: out of rotation for `ban_time`, and the checker
    /// looks at every server now (a primary that vanished may have a promoted successor).
    pub fn ban(&self, i: usize, why: &str) {
        let Some(host) = self.hosts.get(i) else { return };
        let until = self.now_ms() + self.settings.ban_time.as_millis() as u64;
        host.banned_until.fetch_max(until, Ordering::AcqRel);
        let was = HostState::from_u8(host.state.swap(HostState::Banned as u8, Ordering::AcqRel));
        host.set_error(why);
        if was != HostState::Banned {
            tracing::warn!(database = %self.database, server = %host.label(), reason = why, ban = ?self.settings.ban_time, "server taken out of rotation");
        }
        self.wake.notify_one();
    }

    /// A transaction was given server `i` (`Ok`), or could not reach it: counted in `routed`;
    /// for a server no health checker watches (a database's, or a shard's, only server),
    /// its state is what its connections show: healthy, or banned with the error.
    pub fn reached(&self, i: usize, result: Result<(), &str>) {
        let Some(host) = self.hosts.get(i) else { return };
        let checked = self.settings.checks_health();
        match result {
            Ok(()) => {
                host.routed.fetch_add(1, Ordering::Relaxed);
                if !checked && host.state() != HostState::Healthy {
                    host.state.store(HostState::Healthy as u8, Ordering::Release);
                }
            }
            Err(why) if !checked => {
                host.state.store(HostState::Banned as u8, Ordering::Release);
                host.set_error(why);
            }
            Err(_) => {}
        }
    }

    /// Waits until the next health check round ends (or `limit` passes).
    pub async fn changed(&self, limit: Duration) {
        let _ = tokio::time::timeout(limit, self.changed.notified()).await;
    }

    /// The server for a transaction that needs `target`: the primary for writes (`None`
    /// when none is known right now); for reads a usable replica chosen by the load-balancing
    /// policy, or the primary when no replica is usable. `load(i)` is how busy server `i`
    /// is, for `least_connections`.
    pub fn pick(&self, target: Target, load: impl Fn(usize) -> usize) -> Option<usize> {
        let primary = self.primary();
        if target == Target::Primary {
            return primary;
        }
        let eligible = |i: usize, h: &Host| {
            h.entry.weight > 0
                && h.usable()
                && match h.role() {
                    HostRole::Replica => true,
                    HostRole::Primary => self.settings.primary_reads && primary == Some(i),
                    HostRole::Unknown => false,
                }
        };
        let weights = || self.hosts.iter().enumerate().filter(|(i, h)| eligible(*i, h));
        let total: u64 = weights().map(|(_, h)| u64::from(h.entry.weight)).sum();
        if total == 0 {
            return primary;
        }
        let chosen = match self.settings.load_balance {
            LoadBalance::RoundRobin => {
                let n = self.turn.fetch_add(1, Ordering::Relaxed) as u64 % total;
                nth_by_weight(weights(), n)
            }
            LoadBalance::Random => nth_by_weight(weights(), rand::random::<u64>() % total),
            LoadBalance::LeastConnections => weights()
                // Connections in use per unit of weight, in fixed point.
                .min_by_key(|(i, h)| (load(*i) as u64 * 1024) / u64::from(h.entry.weight))
                .map(|(i, _)| i),
        };
        chosen.or(primary)
    }
}

/// The server whose weight range holds `n` (0 <= n < total weight).
fn nth_by_weight<'a>(mut eligible: impl Iterator<Item = (usize, &'a Host)>, mut n: u64) -> Option<usize> {
    eligible.find_map(|(i, h)| {
        let w = u64::from(h.entry.weight);
        if n < w {
            Some(i)
        } else {
            n -= w;
            None
        }
    })
}

#[cfg(test)]
mod tests;
