//! The running proxy's shared state: configuration, pools, cancel keys, TLS, clients and
//! the shutdown signal. Passed to every session; no process-wide globals.
//!
//! The configuration is a snapshot behind an `ArcSwap`, replaced whole by a reload
//! (`reload.rs`); sessions read it through [`App::config`] without a lock.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use arc_swap::ArcSwap;
use thiserror::Error;
use tokio::sync::{watch, Notify};
use tokio_rustls::TlsAcceptor;
use wire::sqlstate::SqlState;

use crate::auth::{ClientKeys, Secret, SecretCache, ServerCredential};
use crate::cancel::CancelRegistry;
use crate::clients::ClientRegistry;
use crate::config::{Config, Database, PasswordFormat, PoolMode, ThreadLayout, TlsMode, User};
use crate::net::tls::{self, TlsError};
use crate::pool::{Carried, OnDemandUsers, Pool, PoolKey, Pools};
use crate::routing::Hosts;
use crate::routing::PoolGroup;
use crate::server::ServerAddress;

pub use crate::clients::Phase;

/// A client refused at login by a connection limit or an unknown name: what it is told.
#[derive(Debug, Error)]
#[error("{message}")]
pub struct Refusal {
    pub code: SqlState,
    pub message: String,
}

impl Refusal {
    fn new(code: SqlState, message: impl Into<String>) -> Self {
        Self { code, message: message.into() }
    }
}

#[derive(Debug, Error)]
pub enum AppError {
    #[error(transparent)]
    Tls(#[from] TlsError),
    #[error("user \"{user}\": {source}")]
    Secret { user: String, source: crate::auth::SecretError },
    #[error("SQL analysis options: {0}")]
    Analysis(#[from] route::OptionsError),
}

/// One configuration and what is derived from it, swapped whole by a reload.
pub struct Snapshot {
    pub config: Config,
    secrets: HashMap<String, Arc<Secret>>,
    /// How many of `config.users` come from the file; users found by `[auth_query]` follow.
    file_users: usize,
}

impl Snapshot {
    pub fn new(config: Config) -> Result<Self, AppError> {
        let mut secrets = HashMap::new();
        for u in &config.users {
            if let Some(p) = &u.password {
                let secret =
                    Secret::parse(p).map_err(|source| AppError::Secret { user: u.name.clone(), source })?;
                secrets.insert(u.name.clone(), Arc::new(secret));
            }
        }
        let file_users = config.users.len();
        Ok(Self { config, secrets, file_users })
    }

    /// This snapshot with `user`, found by `[auth_query]`, added (or its secret replaced).
    fn with_looked_up(&self, user: &User, secret: &Arc<Secret>) -> Snapshot {
        let mut config = self.config.clone();
        let file_users = self.file_users;
        let mut i = 0;
        config.users.retain(|u| {
            i += 1;
            i <= file_users || u.name != user.name
        });
        config.users.push(user.clone());
        let mut secrets = self.secrets.clone();
        secrets.insert(user.name.clone(), secret.clone());
        Snapshot { config, secrets, file_users }
    }

    /// This snapshot without `names` (looked-up users whose pools are closed).
    fn without(&self, names: &[String]) -> Snapshot {
        let mut config = self.config.clone();
        let file_users = self.file_users;
        let looked_up = config.users.split_off(file_users.min(config.users.len()));
        let (gone, kept): (Vec<User>, Vec<User>) =
            looked_up.into_iter().partition(|u| names.contains(&u.name));
        config.users.extend(kept);
        let mut secrets = self.secrets.clone();
        for u in &gone {
            secrets.remove(&u.name);
        }
        Snapshot { config, secrets, file_users }
    }
}

/// A read of the current configuration; cheap, and valid however long it is held.
pub struct ConfigRef(arc_swap::Guard<Arc<Snapshot>>);

impl std::ops::Deref for ConfigRef {
    type Target = Config;
    fn deref(&self) -> &Config {
        &self.0.config
    }
}

pub struct App {
    snapshot: ArcSwap<Snapshot>,
    /// SQL analysis, shared by every session (its cache is concurrent).
    pub analyzer: route::Analyzer,
    pub pools: Pools,
    /// Each database's servers (roles, health, lag), by database name.
    hosts: Mutex<HashMap<String, Arc<Hosts>>>,
    /// LISTEN/NOTIFY hubs, one per pool that has listeners (transaction and statement mode).
    pub notify: crate::notify::Hubs,
    /// Prepared statements shared by every transaction-mode pool.
    pub statements: Arc<crate::prepared::Registry>,
    pub cancels: Arc<CancelRegistry>,
    /// ClientKeys recovered from SCRAM logins, for users with only a verifier (pass-through).
    pub client_keys: ClientKeys,
    /// Secrets found by `[auth_query]`, fresh for its `cache_ttl`.
    pub looked_up: SecretCache,
    /// The users found by `[auth_query]` that are in the snapshot and may have pools.
    pub on_demand: OnDemandUsers,
    pub clients: Arc<ClientRegistry>,
    /// Bounds on connections logging in, cancels, password hashing and large messages.
    pub admission: Arc<crate::net::limits::Admission>,
    pub tls: Option<TlsAcceptor>,
    /// `tls-server-end-point` data of pgvia's certificate: SCRAM-SHA-256-PLUS is offered
    /// to TLS clients when this is set.
    pub tls_channel_binding: Option<Vec<u8>>,
    pub started: SystemTime,
    phase: watch::Sender<Phase>,
    clients_count: AtomicUsize,
    db_clients: Mutex<HashMap<String, Arc<AtomicUsize>>>,
    user_clients: Mutex<HashMap<String, Arc<AtomicUsize>>>,
    sessions: AtomicUsize,
    sessions_done: Notify,
    /// `SHUTDOWN` from the admin console: the accept loop stops as on SIGTERM.
    pub shutdown_requested: Notify,
    /// Databases paused with `PAUSE db` (`None` in the set's place: everything is paused).
    paused: Mutex<Paused>,
    /// Serialises reloads.
    pub(crate) reload_lock: tokio::sync::Mutex<()>,
    /// Pools a reload replaced or removed, kept until their servers are gone (`WAIT_CLOSE`).
    pub(crate) retired_pools: Mutex<Vec<Arc<Pool>>>,
    /// Samples for `SHOW STATS_AVERAGES`.
    pub stats_history: crate::stats::History,
    /// Statements sent to every shard for want of a key, per shape (`SHOW SHARD_FANOUTS`).
    pub fanouts: crate::sharding::Fanouts,
    /// This process's directory for the merges' spill files.
    pub spill: crate::spill::SpillDirs,
}

/// What `PAUSE` left paused, so pools created later start paused too.
#[derive(Debug, Default)]
struct Paused {
    all: bool,
    databases: std::collections::HashSet<String>,
}

impl App {
    pub fn new(config: Config) -> Result<Arc<Self>, AppError> {
        let tls = match (config.general.tls_mode, &config.general.tls_cert_file, &config.general.tls_key_file)
        {
            (TlsMode::Disable, _, _) => None,
            (mode, Some(cert), Some(key)) => {
                let ca = config.general.client_tls_ca_file.as_deref();
                let certs = match (ca, mode) {
                    (None, _) => tls::ClientCerts::None,
                    (Some(_), TlsMode::VerifyCa | TlsMode::VerifyFull) => tls::ClientCerts::Required,
                    (Some(_), _) => tls::ClientCerts::Optional,
                };
                Some(tls::acceptor(cert, key, ca, certs)?)
            }
            // Validation guarantees both files when TLS is on.
            _ => None,
        };
        let tls_channel_binding = match (&tls, &config.general.tls_cert_file) {
            (Some(_), Some(cert)) => tls::channel_binding(cert)?,
            _ => None,
        };
        let (phase, _) = watch::channel(Phase::Running);
        let analyzer = route::Analyzer::new(config.analyzer_options())?;
        let statements = Arc::new(crate::prepared::Registry::new(crate::prepared::PurgePolicy::default()));
        set_statement_caps(&statements, &config);
        let admission = Arc::new(crate::net::limits::Admission::new(&config.limits));
        Ok(Arc::new(Self {
            analyzer,
            snapshot: ArcSwap::from_pointee(Snapshot::new(config)?),
            pools: Pools::default(),
            hosts: Mutex::new(HashMap::new()),
            notify: crate::notify::Hubs::default(),
            statements,
            cancels: Arc::new(CancelRegistry::default()),
            client_keys: ClientKeys::default(),
            looked_up: SecretCache::default(),
            on_demand: OnDemandUsers::default(),
            clients: Arc::new(ClientRegistry::default()),
            admission,
            tls,
            tls_channel_binding,
            started: SystemTime::now(),
            phase,
            clients_count: AtomicUsize::new(0),
            db_clients: Mutex::new(HashMap::new()),
            user_clients: Mutex::new(HashMap::new()),
            sessions: AtomicUsize::new(0),
            sessions_done: Notify::new(),
            shutdown_requested: Notify::new(),
            paused: Mutex::new(Paused::default()),
            reload_lock: tokio::sync::Mutex::new(()),
            retired_pools: Mutex::new(Vec::new()),
            stats_history: Default::default(),
            fanouts: Default::default(),
            spill: Default::default(),
        }))
    }

    /// The current configuration.
    pub fn config(&self) -> ConfigRef {
        ConfigRef(self.snapshot.load())
    }

    /// Puts a new configuration in place (reload); sessions see it at their next read.
    pub(crate) fn swap_snapshot(&self, snapshot: Snapshot) {
        set_statement_caps(&self.statements, &snapshot.config);
        self.snapshot.store(Arc::new(snapshot));
    }

    pub fn secret(&self, user: &str) -> Option<Arc<Secret>> {
        self.snapshot.load().secrets.get(user).cloned()
    }

    /// Puts a user found by `[auth_query]` into the configuration in use, so pools and
    /// limits treat it as a listed user; `false` when it was there already, unchanged. A
    /// reload starts from the file again and so drops such users (their pools close).
    pub fn admit_looked_up(&self, user: &User, secret: &Arc<Secret>) -> bool {
        let stored = user.password.as_deref();
        if self.config().user(&user.name).is_some_and(|u| u.password.as_deref() == stored) {
            return false;
        }
        self.snapshot.rcu(|old| old.with_looked_up(user, secret));
        true
    }

    /// Takes users found by `[auth_query]` out of the configuration in use (never a user
    /// the file lists).
    pub fn drop_looked_up(&self, names: &[String]) {
        if !names.is_empty() {
            self.snapshot.rcu(|old| old.without(names));
        }
    }

    /// Whether the file lists `user` (rather than `[auth_query]` having found it).
    pub fn is_file_user(&self, user: &str) -> bool {
        let snapshot = self.snapshot.load();
        snapshot.config.users[..snapshot.file_users.min(snapshot.config.users.len())]
            .iter()
            .any(|u| u.name == user)
    }

    /// Clients logged in as `user` now.
    pub fn user_clients(&self, user: &str) -> usize {
        self.user_clients
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(user)
            .map_or(0, |c| c.load(Ordering::Relaxed))
    }

    pub fn cancel_timeout(&self) -> Duration {
        self.config().pool.connect_timeout
    }

    /// The servers of a database and what is known about them, made on first use.
    pub fn hosts_for(&self, db: &Database) -> Arc<Hosts> {
        let mut map = self.hosts.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(h) = map.get(&db.name).filter(|h| !h.is_retired()) {
            return h.clone();
        }
        let config = self.config();
        let settings = db.routing(&config.users);
        let check_addr =
            settings.health_check_user.as_deref().and_then(|u| config.user(u)).map(|u| ServerAddress {
                host: String::new(),
                port: 0,
                dbname: db.server_dbname().to_owned(),
                user: u.name.clone(),
                credential: server_credential(&self.client_keys, u),
                tls: db.server_tls(),
                auth: server_auth_policy(&config, db),
            });
        let hosts = Hosts::new(&db.name, settings, check_addr, config.general.max_message_size as usize);
        map.insert(db.name.clone(), hosts.clone());
        hosts
    }

    /// The servers of every database that has several (or discovered roles): what `SHOW
    /// HOSTS` and the metrics list. Set up, and their health checks started, if no client has
    /// used them yet.
    pub fn all_hosts(&self) -> Vec<Arc<Hosts>> {
        let config = self.config();
        config
            .databases
            .iter()
            .filter(|db| db.routing(&config.users).checks_health())
            .map(|db| self.hosts_for(db))
            .collect()
    }

    /// A reload changed how a database's servers are used: the next use builds them anew.
    pub(crate) fn forget_hosts(&self, database: &str) {
        if let Some(h) = self.hosts.lock().unwrap_or_else(PoisonError::into_inner).remove(database) {
            h.retire();
        }
    }

    /// The pools of a (database, user), one per server of the database, made on first use.
    pub fn group_for(&self, db: &Database, user: &User) -> Arc<PoolGroup> {
        let hosts = self.hosts_for(db);
        let multi = hosts.len() > 1;
        let pools = (0..hosts.len())
            .map(|i| {
                let key = PoolKey {
                    database: db.name.clone(),
                    user: user.name.clone(),
                    server: multi.then_some(i),
                };
                self.pools.get_or_create(key, |key| self.build_pool(&self.config(), key, db, user, None))
            })
            .collect();
        Arc::new(PoolGroup { hosts, pools })
    }

    /// The pool groups of a sharded database's shards, in shard order (empty for a database
    /// that is not sharded). Each shard is pooled as a database of its own (`app#2`).
    pub fn shard_groups(&self, db: &Database, user: &User) -> Vec<Arc<PoolGroup>> {
        (0..db.shards.len())
            .filter_map(|i| db.shard_view(i))
            .map(|view| self.group_for(&view, user))
            .collect()
    }

    /// A new pool for (`db`, `user`) under `config`; `replacing` hands over its totals.
    pub(crate) fn build_pool(
        &self,
        config: &Config,
        key: PoolKey,
        db: &Database,
        user: &User,
        replacing: Option<&Pool>,
    ) -> Arc<Pool> {
        let settings = config.pool_settings(db, user);
        // Pools are made for servers the configuration lists; a stale index gets the first.
        let addr = pool_address(config, db, user, key.server, &self.client_keys)
            .unwrap_or_else(|| first_address(config, db, user, &self.client_keys));
        let (totals, waits) = match replacing {
            Some(old) => (old.totals.clone(), old.wait_histogram.clone()),
            None => Default::default(),
        };
        let paused = self.is_paused(&key.database);
        let statements = (settings.pool_mode != PoolMode::Session && settings.max_prepared_statements > 0)
            .then(|| self.statements.clone());
        let carried = Carried { totals, wait_histogram: waits, paused };
        Pool::new(key, addr, settings, config.general.max_message_size as usize, statements, carried)
    }

    fn paused_lock(&self) -> std::sync::MutexGuard<'_, Paused> {
        self.paused.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn is_paused(&self, database: &str) -> bool {
        let p = self.paused_lock();
        p.all || p.databases.contains(database)
    }

    /// `PAUSE` / `RESUME` (`database = None`: all). Returns the pools affected.
    pub fn set_paused(&self, database: Option<&str>, paused: bool) -> Vec<Arc<Pool>> {
        let mut p = self.paused_lock();
        match (database, paused) {
            (None, true) => p.all = true,
            (None, false) => {
                p.all = false;
                p.databases.clear();
            }
            (Some(db), true) => {
                p.databases.insert(db.to_owned());
            }
            (Some(db), false) => {
                p.databases.remove(db);
            }
        }
        let pools: Vec<_> = self
            .pools
            .all()
            .into_iter()
            .filter(|pool| database.is_none_or(|d| pool.key.database == d))
            .collect();
        for pool in &pools {
            pool.set_paused(p.all || p.databases.contains(&pool.key.database));
        }
        pools
    }

    /// Clients connected to `database` now.
    pub fn database_clients(&self, database: &str) -> usize {
        self.db_clients
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(database)
            .map_or(0, |c| c.load(Ordering::Relaxed))
    }

    /// Closes the pools of databases reached through the `*` entry that no client has used
    /// for `fallback_idle_timeout`, so databases that come and go (one per test run, per
    /// tenant) do not accumulate pools. `idle_since` is the caller's memory between calls of
    /// when each such database was first seen without clients.
    pub fn retire_idle_fallback_pools(
        &self,
        idle_since: &mut HashMap<String, Instant>,
        now: Instant,
    ) -> Vec<String> {
        let config = self.config();
        let timeout = config.general.fallback_idle_timeout;
        let mut fallback: Vec<Arc<Pool>> =
            self.pools.all().into_iter().filter(|p| config.is_fallback_database(&p.key.database)).collect();
        idle_since.retain(|name, _| fallback.iter().any(|p| &p.key.database == name));
        // Under the lock a login takes its database slot with, so a client that logs in now
        // either is counted here or finds no pool and makes a new one.
        let mut counts = self.db_clients.lock().unwrap_or_else(PoisonError::into_inner);
        let mut retired = Vec::new();
        fallback.sort_by(|a, b| a.key.database.cmp(&b.key.database));
        for pool in fallback {
            let name = &pool.key.database;
            if counts.get(name).is_some_and(|c| c.load(Ordering::Relaxed) > 0) {
                idle_since.remove(name);
                continue;
            }
            let since = *idle_since.entry(name.clone()).or_insert(now);
            if now.duration_since(since) < timeout {
                continue;
            }
            self.pools.remove(&pool.key);
            pool.retire();
            counts.remove(name);
            if retired.last() != Some(name) {
                retired.push(name.clone());
            }
        }
        for name in &retired {
            idle_since.remove(name);
        }
        retired
    }

    /// Counts a client against its database's `max_client_connections`.
    pub fn database_slot(&self, name: &str) -> Result<ClientSlot<'_>, Refusal> {
        let config = self.config();
        let Some(database) = config.database_for_client(name) else {
            return Err(Refusal::new(
                SqlState::INVALID_CATALOG_NAME,
                format!("database \"{name}\" does not exist"),
            ));
        };
        let counter = self
            .db_clients
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(name.to_owned())
            .or_default()
            .clone();
        take_slot(CounterRef::Database(counter), database.max_client_connections.map(|l| l as usize), || {
            format!("too many connections for database \"{name}\"")
        })
    }

    /// Counts a client against `general.max_client_connections`, of which the last
    /// `limits.admin_reserved_connections` places are for admin users only, so the admin
    /// console gets in when ordinary clients have filled pgvia.
    pub fn process_slot(&self, admin: bool) -> Result<ClientSlot<'_>, Refusal> {
        let config = self.config();
        let max = config.general.max_client_connections as usize;
        let reserved = if admin { 0 } else { config.limits.admin_reserved_connections as usize };
        take_slot(CounterRef::Process(&self.clients_count), Some(max.saturating_sub(reserved)), || {
            if reserved == 0 {
                "sorry, too many clients already".to_owned()
            } else {
                format!(
                    "sorry, too many clients already (the last {reserved} of max_client_connections are reserved for admin users)"
                )
            }
        })
    }

    /// Counts a logged-in client against its user's `max_client_connections`.
    pub fn user_client_slot(&self, user: &str) -> Result<ClientSlot<'_>, Refusal> {
        let config = self.config();
        let Some(known) = config.user(user) else {
            return Err(Refusal::new(SqlState::INVALID_PASSWORD, "authentication failed"));
        };
        let limit = known.max_client_connections.map(|l| l as usize);
        let counter = self
            .user_clients
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(user.to_owned())
            .or_default()
            .clone();
        take_slot(CounterRef::Database(counter), limit, || {
            format!("too many connections for role \"{user}\"")
        })
    }

    pub fn shutdown_watch(&self) -> watch::Receiver<Phase> {
        self.phase.subscribe()
    }

    pub fn phase(&self) -> Phase {
        *self.phase.borrow()
    }

    pub fn set_phase(&self, phase: Phase) {
        self.phase.send_replace(phase);
        self.clients.broadcast(phase);
    }

    pub fn session_started(self: &Arc<Self>) -> SessionGuard {
        self.sessions.fetch_add(1, Ordering::AcqRel);
        SessionGuard { app: self.clone() }
    }

    pub fn active_sessions(&self) -> usize {
        self.sessions.load(Ordering::Acquire)
    }

    /// Waits until no session is running.
    pub async fn sessions_finished(&self) {
        loop {
            let notified = self.sessions_done.notified();
            if self.active_sessions() == 0 {
                return;
            }
            notified.await;
        }
    }
}

/// Counts one more client on `counter`; refuses with 53300 when that goes past `limit`.
fn take_slot(
    counter: CounterRef<'_>,
    limit: Option<usize>,
    message: impl FnOnce() -> String,
) -> Result<ClientSlot<'_>, Refusal> {
    let now = counter.get().fetch_add(1, Ordering::AcqRel) + 1;
    let slot = ClientSlot { counter };
    if limit.is_some_and(|l| now > l) {
        return Err(Refusal::new(SqlState::TOO_MANY_CONNECTIONS, message()));
    }
    Ok(slot)
}

/// Holds one client's place under a connection limit.
pub struct ClientSlot<'a> {
    counter: CounterRef<'a>,
}

enum CounterRef<'a> {
    Process(&'a AtomicUsize),
    /// Per database or user, shared so it outlives a reload that removes the entry.
    Database(Arc<AtomicUsize>),
}

impl CounterRef<'_> {
    fn get(&self) -> &AtomicUsize {
        match self {
            CounterRef::Process(c) => c,
            CounterRef::Database(c) => c,
        }
    }
}

impl Drop for ClientSlot<'_> {
    fn drop(&mut self) {
        self.counter.get().fetch_sub(1, Ordering::AcqRel);
    }
}

/// How pgvia connects to `db`'s server as `user`.
/// Where the pool of (`db`, `user`) for server `server` connects: `None` is the database's
/// one server (`host`/`port`, or the first of `servers`). `None` when there is no such server.
pub(crate) fn pool_address(
    config: &Config,
    db: &Database,
    user: &User,
    server: Option<usize>,
    keys: &ClientKeys,
) -> Option<ServerAddress> {
    match server {
        None => Some(first_address(config, db, user, keys)),
        Some(i) => db.servers.get(i).map(|s| address(config, db, user, keys, (&s.host, s.port))),
    }
}

/// The database's one server, or the first it lists.
fn first_address(config: &Config, db: &Database, user: &User, keys: &ClientKeys) -> ServerAddress {
    address(config, db, user, keys, db.first_server())
}

fn address(config: &Config, db: &Database, user: &User, keys: &ClientKeys, at: (&str, u16)) -> ServerAddress {
    ServerAddress {
        host: at.0.to_owned(),
        port: at.1,
        dbname: db.server_dbname().to_owned(),
        user: user.name.clone(),
        credential: server_credential(keys, user),
        tls: db.server_tls(),
        auth: server_auth_policy(config, db),
    }
}

/// What pgvia logs in to PostgreSQL with as `user`: a plaintext password when it has one
/// (`server_password`, or `password` in plaintext), else the stored hash or verifier itself,
/// passed through (see `auth/keys.rs` for where a verifier's ClientKey comes from).
fn server_credential(keys: &ClientKeys, user: &User) -> ServerCredential {
    if let Some(p) = user.password_for_server() {
        return ServerCredential::Password(p.to_owned());
    }
    match user.password.as_deref() {
        Some(p) if PasswordFormat::of(p) == PasswordFormat::Md5 => ServerCredential::Md5Hash(p.to_owned()),
        Some(p) => match wire::scram::ScramVerifier::parse(p) {
            Ok(verifier) => ServerCredential::ScramPassThrough { verifier, slot: keys.slot(&user.name) },
            // Validation refuses a malformed verifier before a pool is ever built.
            Err(_) => ServerCredential::None,
        },
        None => ServerCredential::None,
    }
}

/// Whether logins of `user` must leave their ClientKey for pgvia's own logins (SCRAM
/// pass-through: a verifier and no `server_password`).
pub fn passes_scram_through(user: &User) -> bool {
    user.server_password.is_none()
        && user.password.as_deref().is_some_and(|p| PasswordFormat::of(p) == PasswordFormat::ScramSha256)
}

fn server_auth_policy(config: &Config, db: &Database) -> crate::auth::ServerAuthPolicy {
    crate::auth::ServerAuthPolicy {
        plain_passwords: db.plain_passwords(),
        max_scram_iterations: config.general.server_scram_max_iterations,
    }
}

/// Marks a running session, so shutdown can wait for them all.
pub struct SessionGuard {
    app: Arc<App>,
}

impl Drop for SessionGuard {
    fn drop(&mut self) {
        if self.app.sessions.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.app.sessions_done.notify_waiters();
        }
    }
}

/// The prepared-statement caps of `[general]`, applied at start and by every reload.
fn set_statement_caps(registry: &crate::prepared::Registry, config: &Config) {
    let g = &config.general;
    registry
        .caps
        .set(g.max_prepared_statements_per_client as usize, g.max_prepared_statements_total as usize);
}

/// Stack every runtime thread starts with, before the analysis's share.
const BASE_STACK: usize = 2 * 1024 * 1024;
/// Stack one level of analysed nesting may take. Measured (`route`'s walk of left-deep
/// `1 + 1 + ...`, the deepest shape PostgreSQL's grammar lets through, and of nested
/// subqueries, `CASE` and function calls): about 1 KiB a level in a debug build, 160 bytes
/// in a release build. Sized for the debug build, so the tests, which run debug builds on
/// the same stacks, are the conservative case; the unused part is address space only.
const STACK_PER_NESTING_LEVEL: usize = 1536;

/// The stack size of the runtime's threads for a configuration: enough for the SQL analysis
/// to walk `[analysis] max_nesting` levels (its documented maximum included) on top of what
/// a session needs, so no query can overflow a worker's stack and take the process down.
pub fn worker_stack_size(config: &Config) -> usize {
    BASE_STACK + config.analysis.max_nesting as usize * STACK_PER_NESTING_LEVEL
}

/// How many threads serve clients: `general.worker_threads`, else `TOKIO_WORKER_THREADS`,
/// else one per CPU.
pub fn thread_count(config: &Config) -> usize {
    if let Some(n) = config.general.worker_threads {
        return usize::from(n).max(1);
    }
    std::env::var("TOKIO_WORKER_THREADS")
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .filter(|&n| n > 0)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, usize::from))
}

/// Runs `serve` to completion the way `main` runs pgvia, so every thread that can run a
/// session has [`worker_stack_size`] of stack. Work-stealing: on a runtime of
/// [`thread_count`] workers. Per core: on thread 0, a thread started here (the caller's own
/// stack may be smaller) with its own single-threaded runtime; `Proxy` starts the others
/// (`cores`). A panic in `serve` is carried on to the caller.
pub fn block_on<T, F>(config: &Config, serve: impl FnOnce() -> F + Send) -> std::io::Result<T>
where
    F: std::future::Future<Output = T>,
    T: Send,
{
    let stack_size = worker_stack_size(config);
    match config.general.thread_layout {
        ThreadLayout::WorkStealing => {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(thread_count(config))
                .enable_all()
                .thread_stack_size(stack_size)
                .build()?;
            Ok(runtime.block_on(serve()))
        }
        ThreadLayout::PerCore => std::thread::scope(|scope| {
            let thread = std::thread::Builder::new()
                .name("pgvia-core-0".to_owned())
                .stack_size(stack_size)
                .spawn_scoped(scope, || {
                let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
                Ok(runtime.block_on(serve()))
            })?;
            thread.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        }),
    }
}
