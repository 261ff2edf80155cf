//! The running proxy's shared state: configuration, pools, cancel keys, TLS, client counts
//! and the shutdown signal. Passed to every session; no process-wide globals.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use thiserror::Error;
use tokio::sync::{watch, Notify};
use tokio_rustls::TlsAcceptor;
use wire::sqlstate::SqlState;

use crate::auth::Secret;
use crate::cancel::CancelRegistry;
use crate::config::{Config, Database, PoolMode, TlsMode, User};
use crate::net::tls::{self, TlsError};
use crate::pool::{Pool, PoolKey, Pools};
use crate::server::ServerAddress;
use crate::session::SessionError;

/// Where the process is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Running,
    /// No new clients; sessions end when their transaction does.
    Draining,
    /// `shutdown_timeout` passed: every session ends now.
    Terminating,
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

pub struct App {
    config: Arc<Config>,
    /// SQL analysis, shared by every session (its cache is concurrent).
    pub analyzer: route::Analyzer,
    pub pools: Pools,
    /// Prepared statements shared by every transaction-mode pool.
    pub statements: Arc<crate::prepared::Registry>,
    pub cancels: Arc<CancelRegistry>,
    pub tls: Option<TlsAcceptor>,
    secrets: HashMap<String, Arc<Secret>>,
    phase: watch::Sender<Phase>,
    clients: AtomicUsize,
    db_clients: HashMap<String, AtomicUsize>,
    sessions: AtomicUsize,
    sessions_done: Notify,
}

impl App {
    pub fn new(config: Config) -> Result<Arc<Self>, AppError> {
        let tls = match (config.general.tls_mode, &config.general.tls_cert_file, &config.general.tls_key_file)
        {
            (TlsMode::Disable, _, _) => None,
            (_, Some(cert), Some(key)) => Some(tls::acceptor(cert, key)?),
            // Validation guarantees both files when TLS is on.
            _ => None,
        };
        let mut secrets = HashMap::new();
        for u in &config.users {
            if let Some(p) = &u.password {
                let secret =
                    Secret::parse(p).map_err(|source| AppError::Secret { user: u.name.clone(), source })?;
                secrets.insert(u.name.clone(), Arc::new(secret));
            }
        }
        let db_clients = config.databases.iter().map(|d| (d.name.clone(), AtomicUsize::new(0))).collect();
        let (phase, _) = watch::channel(Phase::Running);
        let analyzer = route::Analyzer::new(config.analyzer_options())?;
        Ok(Arc::new(Self {
            analyzer,
            config: Arc::new(config),
            pools: Pools::default(),
            statements: Arc::new(crate::prepared::Registry::new(crate::prepared::PurgePolicy::default())),
            cancels: Arc::new(CancelRegistry::default()),
            tls,
            secrets,
            phase,
            clients: AtomicUsize::new(0),
            db_clients,
            sessions: AtomicUsize::new(0),
            sessions_done: Notify::new(),
        }))
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    pub fn secret(&self, user: &str) -> Option<Arc<Secret>> {
        self.secrets.get(user).cloned()
    }

    pub fn cancel_timeout(&self) -> Duration {
        self.config.pool.connect_timeout
    }

    /// The pool for a (database, user), created on first use.
    pub fn pool_for(&self, db: &Database, user: &User) -> Arc<Pool> {
        let key = PoolKey { database: db.name.clone(), user: user.name.clone() };
        self.pools.get_or_create(key, |key| {
            let settings = self.config.pool_settings(db, user);
            let addr = ServerAddress {
                host: db.host.clone(),
                port: db.port,
                dbname: db.server_dbname().to_owned(),
                user: user.name.clone(),
                password: user.password_for_server().map(str::to_owned),
            };
            let statements = (settings.pool_mode != PoolMode::Session
                && settings.max_prepared_statements > 0)
                .then(|| self.statements.clone());
            Pool::new(key, addr, settings, self.config.general.max_message_size as usize, statements)
        })
    }

    /// Counts a client against the process limit (`db = None`) or a database's limit.
    pub fn client_slot(&self, db: Option<&str>) -> Result<ClientSlot<'_>, SessionError> {
        let (counter, limit, what) = match db {
            None => (&self.clients, Some(self.config.general.max_client_connections as usize), None),
            Some(name) => {
                let Some(counter) = self.db_clients.get(name) else {
                    return Err(SessionError::refused(
                        SqlState::INVALID_CATALOG_NAME,
                        format!("database \"{name}\" does not exist"),
                    ));
                };
                let limit =
                    self.config.database(name).and_then(|d| d.max_client_connections).map(|l| l as usize);
                (counter, limit, Some(name))
            }
        };
        let now = counter.fetch_add(1, Ordering::AcqRel) + 1;
        let slot = ClientSlot { counter };
        if limit.is_some_and(|l| now > l) {
            let message = match what {
                None => "sorry, too many clients already".to_owned(),
                Some(db) => format!("too many connections for database \"{db}\""),
            };
            return Err(SessionError::refused(SqlState::TOO_MANY_CONNECTIONS, message));
        }
        Ok(slot)
    }

    pub fn shutdown_watch(&self) -> watch::Receiver<Phase> {
        self.phase.subscribe()
    }

    pub fn phase(&self) -> Phase {
        *self.phase.borrow()
    }

    pub fn set_phase(&self, phase: Phase) {
        self.phase.send_replace(phase);
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

/// Holds one client's place under a connection limit.
pub struct ClientSlot<'a> {
    counter: &'a AtomicUsize,
}

impl Drop for ClientSlot<'_> {
    fn drop(&mut self) {
        self.counter.fetch_sub(1, Ordering::AcqRel);
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
