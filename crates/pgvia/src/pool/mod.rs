//! Server connection pools, one per (database, user).
//!
//! A connection is either idle (in the pool's list) or checked out (owned by exactly one
//! session through a [`Checkout`] guard). Waiting clients queue on a fair semaphore whose
//! permits are the pool size, so the list lock is held only to push or pop, never across I/O.
//!
//! Idle servers are kept in one list per client thread (`cores`), by the thread whose runtime
//! their socket is registered with. A checkout takes from its own thread's list first and
//! moves a server it takes from another's (`ServerConn::rehome`), so a session's round trips
//! wake only its own thread. A server given back goes first to a client waiting on the same
//! thread (module `handoff`), so with more clients than servers few servers move at all.

mod checkout;
mod handoff;
mod maintain;
mod on_demand;
mod patron;
mod pin;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use arc_swap::ArcSwapOption;
use thiserror::Error;
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore, TryAcquireError};

pub use checkout::Checkout;
pub use on_demand::OnDemandUsers;
pub use patron::{Patron, PatronRef};
pub use pin::PinReason;

use crate::config::PoolSettings;
use crate::prepared::{ClientStatements, Registry, ServerStatements};
use crate::server::{ServerAddress, ServerConn, ServerError, ServerParams};

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PoolKey {
    pub database: String,
    pub user: String,
    /// Which of the database's servers (`routing::Hosts`); `None` for a database with one.
    pub server: Option<usize>,
}

#[derive(Debug, Error)]
pub enum PoolError {
    #[error("no server connection in pool \"{pool}\" became free within {waited:?}")]
    CheckoutTimeout { pool: String, waited: Duration },
    #[error("pool \"{pool}\" cannot reach its server: {source}")]
    Connect { pool: String, source: ServerError },
    #[error("pool \"{pool}\" is closed")]
    Closed { pool: String },
    #[error("no primary server of database \"{database}\" became available within {waited:?}")]
    NoPrimary { database: String, waited: Duration },
}

/// Counters read by logs, the admin console and metrics.
#[derive(Debug, Default)]
pub struct PoolStats {
    /// Server connections being opened right now.
    pub servers_connecting: AtomicUsize,
    pub servers_active: AtomicUsize,
    pub servers_idle: AtomicUsize,
    pub clients_waiting: AtomicUsize,
    pub servers_created: AtomicU64,
    pub servers_closed: AtomicU64,
    pub checkouts: AtomicU64,
    pub checkout_timeouts: AtomicU64,
    pub resets_failed: AtomicU64,
    /// Idle servers a checkout took from another client thread's list and moved to its own
    /// (`thread_layout = "per_core"`).
    pub servers_moved: AtomicU64,
    /// Clients pinned to their server in transaction mode, by [`PinReason`] index.
    pub pins: [AtomicU64; PinReason::ALL.len()],
    /// Servers that must close when they come back (opened before a `RECONNECT` or a
    /// reload that replaced the pool) and have not yet.
    pub servers_stale: AtomicUsize,
}

/// What a pool takes over from the one it replaces on reload (defaults for a new pool).
#[derive(Debug, Default)]
pub struct Carried {
    /// Traffic of clients that left.
    pub totals: Arc<crate::stats::Counters>,
    pub wait_histogram: Arc<crate::stats::WaitHistogram>,
    /// Start paused (`PAUSE` is in force for the pool's database).
    pub paused: bool,
}

/// A snapshot of one server connection for `SHOW SERVERS`.
#[derive(Debug, Clone)]
pub struct ServerRow {
    pub id: u64,
    pub process_id: u32,
    pub peer: crate::net::ServerEndpoint,
    pub created: Instant,
    pub last_used: Instant,
}

pub struct Pool {
    pub key: PoolKey,
    /// "database/user", for messages.
    pub name: String,
    pub settings: PoolSettings,
    addr: ServerAddress,
    max_frame: usize,
    permits: Arc<Semaphore>,
    /// Idle servers, one list per client thread (see the module's comment).
    idle: Box<[Mutex<Vec<ServerConn>>]>,
    /// Clients waiting for a server, per client thread, to be handed one given back there.
    handoffs: handoff::Handoffs,
    /// What a freshly connected server reports (ParameterStatus), kept so a client can be
    /// welcomed before it is given a server.
    startup_params: Mutex<Option<Arc<ServerParams>>>,
    /// What a server of this pool made of each set of startup settings clients logged in
    /// with, so a client that asks for the same again is let in without asking a server.
    settings_reports: Mutex<SettingsReports>,
    /// The parameter maps clients of this pool were told at login that differ from
    /// `startup_params` (an `application_name`, say), one per distinct map, so clients that
    /// were told the same share it (see [`Pool::shared_params`]).
    welcomes: Mutex<Vec<Arc<ServerParams>>>,
    /// The registry clients' prepared statements live in, when this pool follows them across
    /// servers (transaction and statement mode).
    statements: Option<Arc<Registry>>,
    pub stats: PoolStats,
    /// Traffic of clients that left; shared with the pool that replaces this one on reload.
    pub totals: Arc<crate::stats::Counters>,
    pub wait_histogram: Arc<crate::stats::WaitHistogram>,
    /// `PAUSE`: checkouts wait while true.
    paused: watch::Sender<bool>,
    /// Set when a reload replaced or removed this pool: servers coming back are closed.
    retired: AtomicBool,
    /// The pool that took this one's place on reload; checkouts go there.
    successor: ArcSwapOption<Pool>,
    /// Servers opened before this instant close when they come back (`RECONNECT`).
    reconnect_before: Mutex<Option<Instant>>,
}

/// Enough distinct sets of startup settings for any real application; past it, new ones are
/// checked every time rather than remembered, so clients cannot grow the map without bound.
const MAX_SETTINGS_REPORTS: usize = 1024;

/// Settings reports by the (name, value) list a client logged in with.
type SettingsReports = HashMap<Vec<(String, String)>, Arc<SettingsReport>>;

/// What PostgreSQL makes of a set of startup settings at login, learnt once per pool: the
/// values it reports for them (normalised: `utf-8` is `UTF8`, `iso, dmy` is `ISO, DMY`) and
/// the notices it raises (a truncated `application_name`).
#[derive(Debug, Default)]
pub struct SettingsReport {
    /// (name as the client spelled it, value as the server shows it), in the client's order.
    pub values: Vec<(String, String)>,
    /// Whole NoticeResponse frames, to pass on as they came.
    pub notices: Vec<bytes::Bytes>,
}

/// Distinct login parameter maps a pool shares between its clients (one per application
/// name, typically); a login compares against each, so the list stays short.
const MAX_SHARED_WELCOMES: usize = 16;

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool").field("name", &self.name).finish()
    }
}

impl Pool {
    pub fn new(
        key: PoolKey,
        addr: ServerAddress,
        settings: PoolSettings,
        max_frame: usize,
        statements: Option<Arc<Registry>>,
        carried: Carried,
    ) -> Arc<Self> {
        let pool = Arc::new(Pool {
            name: match key.server {
                None => format!("{}/{}", key.database, key.user),
                Some(_) => format!("{}/{}@{}:{}", key.database, key.user, addr.host, addr.port),
            },
            key,
            permits: Arc::new(Semaphore::new(settings.pool_size as usize)),
            settings,
            addr,
            max_frame,
            idle: (0..crate::cores::count()).map(|_| Mutex::new(Vec::new())).collect(),
            handoffs: handoff::Handoffs::new(crate::cores::count()),
            startup_params: Mutex::new(None),
            settings_reports: Mutex::new(HashMap::new()),
            welcomes: Mutex::new(Vec::new()),
            statements,
            stats: PoolStats::default(),
            totals: carried.totals,
            wait_histogram: carried.wait_histogram,
            paused: watch::channel(carried.paused).0,
            retired: AtomicBool::new(false),
            successor: ArcSwapOption::empty(),
            reconnect_before: Mutex::new(None),
        });
        maintain::spawn(Arc::downgrade(&pool));
        pool
    }

    /// A client's statement map, when this pool follows prepared statements across servers.
    pub fn client_statements(&self) -> Option<ClientStatements> {
        self.statements.clone().map(ClientStatements::new)
    }

    /// `host:port` of this pool's server when its database has several (metrics label).
    pub fn server_label(&self) -> Option<&str> {
        self.key.server.and(self.name.split_once('@').map(|(_, server)| server))
    }

    pub fn server_address(&self) -> &ServerAddress {
        &self.addr
    }

    /// Thread `thread`'s idle list. Every change of a list's length changes
    /// `stats.servers_idle` under its lock, so the count is the sum of the lists.
    fn idle_list(&self, thread: usize) -> std::sync::MutexGuard<'_, Vec<ServerConn>> {
        // A panic while holding this lock cannot leave the Vec inconsistent; keep going.
        self.idle[thread % self.idle.len()].lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Empties every idle list.
    fn drain_idle(&self) -> Vec<ServerConn> {
        let mut drained = Vec::new();
        for thread in 0..self.idle.len() {
            let mut list = self.idle_list(thread);
            self.stats.servers_idle.fetch_sub(list.len(), Ordering::Relaxed);
            drained.append(&mut list);
        }
        drained
    }

    /// The most recently used idle server of this thread, else of another.
    fn pop_idle(&self) -> Option<ServerConn> {
        let here = crate::cores::current();
        (0..self.idle.len()).find_map(|k| {
            let conn = self.idle_list(here + k).pop()?;
            self.stats.servers_idle.fetch_sub(1, Ordering::Relaxed);
            Some(conn)
        })
    }

    /// Takes a server for a client, waiting up to the checkout timeout for one to be free.
    /// A pool a reload replaced hands the request to its successor; a paused pool makes the
    /// client wait (without a time limit) until it is resumed.
    pub async fn checkout(self: &Arc<Self>, patron: Option<&PatronRef>) -> Result<Checkout, PoolError> {
        let mut pool = self.current();
        if let Some(p) = patron {
            p.waiting();
        }
        loop {
            match pool.checkout_here(patron).await {
                Err(PoolError::Closed { .. }) if pool.successor.load().is_some() => pool = pool.current(),
                Err(e) => {
                    if let Some(p) = patron {
                        p.unserved();
                    }
                    return Err(e);
                }
                ok => return ok,
            }
        }
    }

    /// The newest pool in this pool's line of successors (itself if it was not replaced).
    pub fn current(self: &Arc<Self>) -> Arc<Pool> {
        let mut pool = self.clone();
        while let Some(next) = pool.successor.load_full() {
            pool = next;
        }
        pool
    }

    async fn checkout_here(self: &Arc<Self>, patron: Option<&PatronRef>) -> Result<Checkout, PoolError> {
        let waited = self.settings.checkout_timeout;
        let started = Instant::now();
        self.stats.clients_waiting.fetch_add(1, Ordering::Relaxed);
        let mut paused = self.paused.subscribe();
        // Closed pools must not keep clients waiting for a RESUME that cannot help them.
        let _ = paused.wait_for(|p| !*p || self.permits.is_closed()).await;
        let got = match self.permits.clone().try_acquire_owned() {
            Ok(p) => Ok(Some(Got::Permit(p))),
            Err(TryAcquireError::Closed) => Ok(None),
            Err(TryAcquireError::NoPermits) => {
                // Whichever comes first: a server given back on this thread (module
                // `handoff`), or a permit from the semaphore.
                let here = crate::cores::current();
                let mut place = handoff::Place { pool: self, rx: self.handoffs.wait(here, started) };
                let wait = async {
                    tokio::select! {
                        biased;
                        Ok(handed) = &mut place.rx => Some(Got::Handed(Box::new(handed))),
                        permit = self.permits.clone().acquire_owned() => permit.ok().map(Got::Permit),
                    }
                };
                tokio::time::timeout(waited, wait).await
            }
        };
        self.stats.clients_waiting.fetch_sub(1, Ordering::Relaxed);
        match got {
            Ok(Some(Got::Permit(p))) => self.checkout_with(p, started, patron).await,
            Ok(Some(Got::Handed(handed))) => {
                let (conn, permit) = *handed;
                Ok(self.checked_out(conn, permit, started, patron))
            }
            Ok(None) => Err(PoolError::Closed { pool: self.name.clone() }),
            Err(_) => {
                self.stats.checkout_timeouts.fetch_add(1, Ordering::Relaxed);
                Err(PoolError::CheckoutTimeout { pool: self.name.clone(), waited })
            }
        }
    }

    /// A server for a client only if the pool has room for one now (an idle server, or fewer
    /// than `pool_size` open): `None` when the client would have to wait, or the pool is
    /// paused or was replaced. Session mode takes a server at login this way, so a login
    /// never queues behind other clients' sessions.
    pub async fn try_checkout(self: &Arc<Self>) -> Option<Result<Checkout, PoolError>> {
        if *self.paused.borrow() || self.successor.load().is_some() {
            return None;
        }
        let permit = self.permits.clone().try_acquire_owned().ok()?;
        Some(self.checkout_with(permit, Instant::now(), None).await)
    }

    async fn checkout_with(
        self: &Arc<Self>,
        permit: tokio::sync::OwnedSemaphorePermit,
        started: Instant,
        patron: Option<&PatronRef>,
    ) -> Result<Checkout, PoolError> {
        let conn = match self.take_idle() {
            Some(c) => c,
            // Boxed: connecting (TCP, authentication) is rare on this path, and its state
            // would otherwise be part of every checkout, and so of every session's future.
            None => Box::pin(self.connect()).await?,
        };
        Ok(self.checked_out(conn, permit, started, patron))
    }

    /// `conn` as a client's, counted.
    fn checked_out(
        self: &Arc<Self>,
        conn: ServerConn,
        permit: OwnedSemaphorePermit,
        started: Instant,
        patron: Option<&PatronRef>,
    ) -> Checkout {
        let wait = started.elapsed();
        match patron {
            Some(p) => p.served(wait),
            None => self.totals.add_wait(wait),
        }
        self.wait_histogram.observe(wait);
        self.stats.checkouts.fetch_add(1, Ordering::Relaxed);
        self.stats.servers_active.fetch_add(1, Ordering::Relaxed);
        Checkout::new(self.clone(), conn, patron.cloned(), permit)
    }

    /// `PAUSE` (true) or `RESUME` (false) this pool.
    pub fn set_paused(&self, paused: bool) {
        self.paused.send_replace(paused);
    }

    pub fn is_paused(&self) -> bool {
        *self.paused.borrow()
    }

    pub fn is_retired(&self) -> bool {
        self.retired.load(Ordering::Acquire)
    }

    /// `RECONNECT`: idle servers close now, checked-out ones when they come back.
    pub fn reconnect(&self) {
        let now = Instant::now();
        *self.reconnect_before.lock().unwrap_or_else(PoisonError::into_inner) = Some(now);
        for c in self.drain_idle() {
            self.close_conn(c, "RECONNECT");
        }
        // Counted after the idle ones closed: what is left is checked out.
        self.stats.servers_stale.store(self.stats.servers_active.load(Ordering::Relaxed), Ordering::Relaxed);
    }

    /// Whether a server returning to this pool must be closed instead of kept.
    fn is_stale(&self, conn: &ServerConn) -> bool {
        if self.is_retired() {
            return true;
        }
        let before = *self.reconnect_before.lock().unwrap_or_else(PoisonError::into_inner);
        before.is_some_and(|t| conn.created < t)
    }

    /// Idle servers, for `SHOW SERVERS`.
    pub fn idle_servers(&self) -> Vec<ServerRow> {
        let mut rows = Vec::new();
        for thread in 0..self.idle.len() {
            rows.extend(self.idle_list(thread).iter().map(|c| ServerRow {
                id: c.id,
                process_id: c.key.process_id,
                peer: c.peer.clone(),
                created: c.created,
                last_used: c.last_used,
            }));
        }
        rows
    }

    /// Reload: `next` serves this pool's clients from now on. This pool stops handing out
    /// servers (its waiters move to `next`), closes its idle ones, and closes the checked-out
    /// ones as their clients give them back.
    pub fn replace_with(&self, next: Arc<Pool>) {
        self.successor.store(Some(next));
        self.retire();
    }

    /// Reload removed this pool: no more checkouts; servers close as they come back.
    pub fn retire(&self) {
        self.retired.store(true, Ordering::Release);
        self.close();
        self.stats.servers_stale.store(self.stats.servers_active.load(Ordering::Relaxed), Ordering::Relaxed);
        // Wake clients waiting on a pause so they see the pool is closed.
        self.paused.send_replace(false);
    }

    /// The parameters a new server reports, for welcoming a client before it has a server.
    /// Connects a first server when none has been seen yet.
    pub async fn startup_params(self: &Arc<Self>) -> Result<Arc<ServerParams>, PoolError> {
        if let Some(p) = self.cached_startup_params() {
            return Ok(p);
        }
        let checkout = self.checkout(None).await?;
        checkout.give_back_unused();
        self.cached_startup_params().ok_or_else(|| PoolError::Closed { pool: self.name.clone() })
    }

    /// What a server of this pool made of `settings`, when one was asked before.
    pub fn settings_report(&self, settings: &[(String, String)]) -> Option<Arc<SettingsReport>> {
        let reports = self.settings_reports.lock().unwrap_or_else(PoisonError::into_inner);
        reports.get(settings).cloned()
    }

    pub fn remember_settings_report(&self, settings: &[(String, String)], report: Arc<SettingsReport>) {
        let mut reports = self.settings_reports.lock().unwrap_or_else(PoisonError::into_inner);
        if reports.len() < MAX_SETTINGS_REPORTS {
            reports.insert(settings.to_vec(), report);
        }
    }

    /// A shared copy of `params`: the one earlier clients got if it is the same map. Clients
    /// told the same parameters then cost no memory each, and are checked against a server
    /// by a pointer comparison. A few distinct maps are kept; past that, each is its own.
    pub fn shared_params(&self, params: ServerParams) -> Arc<ServerParams> {
        let mut welcomes = self.welcomes.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(shared) = welcomes.iter().find(|w| ***w == params) {
            return shared.clone();
        }
        let params = Arc::new(params);
        if welcomes.len() < MAX_SHARED_WELCOMES {
            welcomes.push(params.clone());
        }
        params
    }

    fn cached_startup_params(&self) -> Option<Arc<ServerParams>> {
        self.startup_params.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Pops the most recently used idle server that is still alive, this thread's first;
    /// dead ones are dropped.
    fn take_idle(&self) -> Option<ServerConn> {
        loop {
            let mut conn = self.pop_idle()?;
            // Checked before it moves: the runtime it is registered with knows whether it
            // became readable while idle; a fresh registration does not yet.
            match conn.is_alive() {
                Ok(()) => {
                    let id = conn.id;
                    match conn.rehome() {
                        Ok((conn, moved)) => {
                            if moved {
                                self.stats.servers_moved.fetch_add(1, Ordering::Relaxed);
                            }
                            return Some(conn);
                        }
                        Err(e) => {
                            // The socket is closed already: nothing to send a Terminate on.
                            tracing::warn!(pool = %self.name, server = id, error = %e, "cannot move an idle server connection to this thread; closed it");
                            self.stats.servers_closed.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
                Err(why) => {
                    tracing::info!(pool = %self.name, server = conn.id, pid = conn.key.process_id, %why, "idle server connection is dead; discarding it");
                    // Dropped here: a dead socket has no use for `close_conn`'s Terminate.
                    self.stats.servers_closed.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }

    async fn connect(&self) -> Result<ServerConn, PoolError> {
        self.stats.servers_connecting.fetch_add(1, Ordering::Relaxed);
        let conn = ServerConn::connect(&self.addr, self.settings.connect_timeout, self.max_frame).await;
        self.stats.servers_connecting.fetch_sub(1, Ordering::Relaxed);
        let mut conn = conn.map_err(|source| PoolError::Connect { pool: self.name.clone(), source })?;
        if let Some(registry) = &self.statements {
            let capacity = self.settings.max_prepared_statements as usize;
            conn.statements = ServerStatements::new(Some(registry.clone()), capacity);
        }
        self.stats.servers_created.fetch_add(1, Ordering::Relaxed);
        // Replaced only when they differ: clients logged in since share the map they were
        // told (see `session::welcome_params`), which is what makes checking them cheap.
        let mut startup_params = self.startup_params.lock().unwrap_or_else(PoisonError::into_inner);
        if startup_params.as_deref() != Some(&conn.params) {
            *startup_params = Some(Arc::new(conn.params.clone()));
        }
        drop(startup_params);
        tracing::debug!(pool = %self.name, server = conn.id, pid = conn.key.process_id, "opened server connection");
        Ok(conn)
    }

    /// A clean server given back with its permit: to a client waiting on this thread
    /// (module `handoff`), else to the idle list (the permit then wakes the longest waiter);
    /// closed instead when it is too old or its pool was reconnected or replaced.
    fn put_back(&self, conn: ServerConn, permit: OwnedSemaphorePermit) {
        let handed = if self.is_stale(&conn) || maintain::past_lifetime(self.settings.max_lifetime, &conn) {
            Some((conn, permit))
        } else {
            self.handoffs.offer(crate::cores::current(), (conn, permit))
        };
        if let Some((conn, permit)) = handed {
            self.put_idle(conn);
            // After the server is in the idle list, for the client this permit wakes.
            drop(permit);
        }
    }

    /// Returns a clean server to the idle list, or closes it when it is too old.
    fn put_idle(&self, mut conn: ServerConn) {
        if self.is_stale(&conn) {
            self.close_conn(conn, "pool reconnected or replaced");
            return;
        }
        if maintain::past_lifetime(self.settings.max_lifetime, &conn) {
            self.close_conn(conn, "reached max_lifetime");
            return;
        }
        conn.last_used = std::time::Instant::now();
        let mut idle = self.idle_list(conn.home);
        idle.push(conn);
        self.stats.servers_idle.fetch_add(1, Ordering::Relaxed);
    }

    fn close_conn(&self, conn: ServerConn, why: &str) {
        tracing::debug!(pool = %self.name, server = conn.id, why, "closing server connection");
        if self.is_stale(&conn) {
            let _ = self
                .stats
                .servers_stale
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
        }
        self.stats.servers_closed.fetch_add(1, Ordering::Relaxed);
        tokio::spawn(conn.close());
    }

    /// How busy this pool is, for `least_connections`: servers in use plus clients waiting.
    pub fn load(&self) -> usize {
        self.stats.servers_active.load(Ordering::Relaxed) + self.stats.clients_waiting.load(Ordering::Relaxed)
    }

    /// Servers currently open (idle and checked out).
    pub fn server_count(&self) -> usize {
        self.stats.servers_idle.load(Ordering::Relaxed) + self.stats.servers_active.load(Ordering::Relaxed)
    }

    /// Stops handing out servers and closes the idle ones (shutdown, or a pool removed by a
    /// reload). Checked-out servers close when their sessions end.
    pub fn close(&self) {
        self.permits.close();
        for c in self.drain_idle() {
            self.close_conn(c, "pool closed");
        }
    }
}

/// How a waiting client got its turn.
enum Got {
    /// A permit, with which it takes an idle server or opens one.
    Permit(OwnedSemaphorePermit),
    /// A server given back on its thread, with its permit (boxed: the enum lives only until
    /// the checkout is built, and a server connection is large).
    Handed(Box<handoff::Handed>),
}

/// All pools, created on first use.
#[derive(Debug, Default)]
pub struct Pools {
    map: Mutex<HashMap<PoolKey, Arc<Pool>>>,
}

impl Pools {
    pub fn get_or_create(&self, key: PoolKey, make: impl FnOnce(PoolKey) -> Arc<Pool>) -> Arc<Pool> {
        let mut map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        map.entry(key.clone()).or_insert_with(|| make(key)).clone()
    }

    pub fn all(&self) -> Vec<Arc<Pool>> {
        let mut all: Vec<_> =
            self.map.lock().unwrap_or_else(PoisonError::into_inner).values().cloned().collect();
        all.sort_by(|a, b| a.key.cmp(&b.key));
        all
    }

    pub fn get(&self, key: &PoolKey) -> Option<Arc<Pool>> {
        self.map.lock().unwrap_or_else(PoisonError::into_inner).get(key).cloned()
    }

    /// Puts `pool` in place of whatever pool had its key; returns the one replaced.
    pub fn insert(&self, pool: Arc<Pool>) -> Option<Arc<Pool>> {
        self.map.lock().unwrap_or_else(PoisonError::into_inner).insert(pool.key.clone(), pool)
    }

    pub fn remove(&self, key: &PoolKey) -> Option<Arc<Pool>> {
        self.map.lock().unwrap_or_else(PoisonError::into_inner).remove(key)
    }

    pub fn close_all(&self) {
        for p in self.all() {
            p.close();
        }
    }
}
