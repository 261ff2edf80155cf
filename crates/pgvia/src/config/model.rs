//! The shape of `pgvia.toml`, as serde structs.
//!
//! Every table rejects unknown keys: a misspelt `pool_szie` silently falling back to the
//! default is the kind of mistake that only shows up under production load.
//! A reload (SIGHUP or the admin console's `RELOAD`) applies most keys; the ones that need a
//! restart say so.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::routing::RolePreference;
use super::values::{self, Password};

/// How a client proves who it is; defined with the code that checks it.
pub use crate::auth::AuthMethod;
pub use crate::auth::PlainPasswords;
pub use crate::net::server_tls::{ServerTlsMode, ServerTlsSettings, TlsNegotiation};

/// Whether clients may or must use TLS.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TlsMode {
    /// TLS requests are declined; every client uses a plain socket.
    Disable,
    /// Clients choose.
    Allow,
    /// Clients that do not ask for TLS are refused.
    Require,
    /// As `require`, and a client must show a certificate signed by `client_tls_ca_file`.
    #[serde(rename = "verify-ca")]
    VerifyCa,
    /// As `verify-ca`, and the certificate's common name must be the user name.
    #[serde(rename = "verify-full")]
    VerifyFull,
}

impl TlsMode {
    /// Whether clients without TLS are refused.
    pub fn requires_tls(self) -> bool {
        matches!(self, TlsMode::Require | TlsMode::VerifyCa | TlsMode::VerifyFull)
    }
}

impl fmt::Display for TlsMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TlsMode::Disable => "disable",
            TlsMode::Allow => "allow",
            TlsMode::Require => "require",
            TlsMode::VerifyCa => "verify-ca",
            TlsMode::VerifyFull => "verify-full",
        })
    }
}

/// When a server connection goes back to the pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PoolMode {
    /// When the client disconnects.
    Session,
    /// At the end of each transaction.
    Transaction,
    /// After each statement; transaction blocks are refused.
    Statement,
}

impl fmt::Display for PoolMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PoolMode::Session => "session",
            PoolMode::Transaction => "transaction",
            PoolMode::Statement => "statement",
        })
    }
}

/// `[general]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct General {
    /// Address to listen on, an IP address or a hostname. Default `"127.0.0.1"`.
    pub listen_addr: String,
    /// TCP port to listen on. Default 6432.
    #[serde(deserialize_with = "values::port")]
    pub listen_port: u16,
    /// Also listen on a Unix socket in this directory, named `.s.PGSQL.<listen_port>` as
    /// PostgreSQL names its own, so `psql -h <dir> -p <listen_port>` reaches pgvia. Clients
    /// there never use TLS (`tls_mode` applies to TCP). Default none. Restart to change.
    pub unix_socket_dir: Option<PathBuf>,
    /// Most clients connected at once, whole process; more are refused with SQLSTATE 53300.
    /// Default 10000, at least 1.
    pub max_client_connections: u32,
    /// Client-side TLS: `disable`, `allow`, `require`, `verify-ca` or `verify-full`. Default
    /// `disable`.
    pub tls_mode: TlsMode,
    /// PEM certificate chain. Required unless `tls_mode = "disable"`. A relative path is
    /// resolved against the configuration file's folder when the file is loaded.
    pub tls_cert_file: Option<PathBuf>,
    /// PEM private key, same rules as `tls_cert_file`.
    pub tls_key_file: Option<PathBuf>,
    /// PEM file of the CAs client certificates must lead to. When set, clients on TLS are
    /// asked for a certificate (required under `verify-ca`/`verify-full` and by the `cert`
    /// auth method; a certificate shown is always checked). Default none.
    pub client_tls_ca_file: Option<PathBuf>,
    /// Most PBKDF2 iterations pgvia computes for a server's SCRAM challenge: a server (or
    /// whatever answers in its place) asking for more is refused, as the cost is pgvia's
    /// CPU. Default 100000 (PostgreSQL's default is 4096).
    pub server_scram_max_iterations: u32,
    /// Authentication method for users that do not set their own. Default `scram-sha-256`.
    pub auth_method: AuthMethod,
    /// Allow `cleartext` password authentication on sockets without TLS. Default false.
    pub allow_cleartext_without_tls: bool,
    /// Largest protocol message, in bytes, accepted from a client or a server.
    /// Default 67108864 (64 MiB); between 1024 and 1073741824 (1 GiB, PostgreSQL's limit).
    pub max_message_size: u32,
    /// How long shutdown waits for clients to finish before closing them. Default `"30s"`;
    /// `"0s"` closes them at once.
    #[serde(deserialize_with = "values::duration")]
    pub shutdown_timeout: Duration,
    /// Query run on a server connection before another client may use it. Default
    /// `"DISCARD ALL"`; an empty string runs nothing.
    pub server_reset_query: String,
    /// How long the reset query may take before the server connection is closed instead.
    /// Default `"5s"`, more than zero.
    #[serde(deserialize_with = "values::duration")]
    pub server_reset_timeout: Duration,
    /// Log filter: a level (`error`, `warn`, `info`, `debug`, `trace`) or a tracing
    /// directive list such as `"info,pgvia::pool=debug"`. Default `"info"`.
    pub log_level: String,
    /// `host:port` of the HTTP listener serving `/metrics` and `/health`. Default: none (off).
    /// Restart to change.
    pub metrics_listen: Option<String>,
    /// Bearer token the metrics listener asks for (`Authorization: Bearer <token>`).
    /// Default: none (no authentication).
    pub metrics_auth_token: Option<Password>,
    /// Log line format: `text` or `json`. Default `text`. Restart to change.
    pub log_format: LogFormat,
    /// Log a line when a client logs in and when it leaves (address, user, database, why).
    /// Default true.
    pub log_connections: bool,
    /// Log queries that take longer than this (text truncated, literals removed). Default
    /// `"0s"`: off.
    #[serde(deserialize_with = "values::duration")]
    pub slow_query_threshold: Duration,
    /// Pools of a database reached through the `*` entry are closed once no client has used
    /// that database for this long. Default `"1h"`.
    #[serde(deserialize_with = "values::duration")]
    pub fallback_idle_timeout: Duration,
    /// Most prepared statements one client may name at once (protocol Parse and SQL
    /// `PREPARE`) in pools that follow statements across servers; past it a new name is
    /// refused with SQLSTATE 53400 and the session goes on. Default 10000, at least 1.
    pub max_prepared_statements_per_client: u32,
    /// Most distinct prepared statements pgvia keeps for all those clients together; past
    /// it, statements nobody uses any more are dropped, and a new one is refused with 53400
    /// when none can be. Default 100000, at least 1.
    pub max_prepared_statements_total: u32,
    /// Names this pgvia among others in front of the same shards, in its two-phase commit
    /// transaction ids. Default: the host name and listen port.
    pub instance_id: Option<String>,
    /// Threads that serve clients. Default: one per CPU (tokio's `TOKIO_WORKER_THREADS` when
    /// set). One thread spends less CPU per transaction but queues sessions behind each other.
    pub worker_threads: Option<u16>,
    /// How sessions are spread over those threads. Default `per_core`.
    pub thread_layout: ThreadLayout,
}

/// How the threads that serve clients share the work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ThreadLayout {
    /// One single-threaded runtime per thread, each with its own listener on the port and its
    /// own idle server connections: a session and its servers stay on the thread that
    /// accepted the client, so a round trip wakes no other thread.
    PerCore,
    /// One work-stealing runtime: any thread runs any session, the I/O driver passes between
    /// them.
    WorkStealing,
}

impl ThreadLayout {
    pub fn as_str(self) -> &'static str {
        match self {
            ThreadLayout::PerCore => "per_core",
            ThreadLayout::WorkStealing => "work_stealing",
        }
    }
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// One human-readable line per event.
    Text,
    /// One JSON object per line.
    Json,
}

impl Default for General {
    fn default() -> Self {
        General {
            instance_id: None,
            worker_threads: None,
            thread_layout: ThreadLayout::PerCore,
            listen_addr: "127.0.0.1".to_owned(),
            listen_port: 6432,
            max_client_connections: 10_000,
            tls_mode: TlsMode::Disable,
            tls_cert_file: None,
            tls_key_file: None,
            unix_socket_dir: None,
            client_tls_ca_file: None,
            server_scram_max_iterations: 100_000,
            auth_method: AuthMethod::ScramSha256,
            allow_cleartext_without_tls: false,
            max_message_size: 64 * 1024 * 1024,
            shutdown_timeout: Duration::from_secs(30),
            server_reset_query: "DISCARD ALL".to_owned(),
            server_reset_timeout: Duration::from_secs(5),
            log_level: "info".to_owned(),
            metrics_listen: None,
            metrics_auth_token: None,
            log_format: LogFormat::Text,
            log_connections: true,
            slow_query_threshold: Duration::ZERO,
            fallback_idle_timeout: Duration::from_secs(3600),
            max_prepared_statements_per_client: crate::prepared::Caps::DEFAULT_PER_CLIENT as u32,
            max_prepared_statements_total: crate::prepared::Caps::DEFAULT_TOTAL as u32,
        }
    }
}

/// Which analysed queries the analysis cache keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CacheAdmission {
    /// Every analysed query.
    Always,
    /// A query only when its text was analysed once before, recently: queries with inline
    /// literals, each seen once, never displace anything.
    SecondSight,
}

/// `[analysis]`: SQL analysis, the parse that tells reads from writes and finds session
/// changes and shard keys. See [`Config::analyzer_options`].
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AnalysisSettings {
    /// Longest query, in bytes, that is parsed; longer ones are routed as writes to the
    /// primary. Default 1048576 (1 MiB); between 1 and 1073741824.
    pub max_query_length: usize,
    /// Most analyses cached, keyed by query text. Default 10000; 0 disables the cache.
    pub cache_entries: usize,
    /// Most bytes the cache holds (query text plus analysis). Default 33554432 (32 MiB); at
    /// least 65536 when the cache is enabled.
    pub cache_bytes: usize,
    /// `always` or `second_sight`. Default `second_sight`.
    pub cache_admission: CacheAdmission,
    /// Functions that write, on top of the built-in ones (`nextval`, `setval`, advisory
    /// locks, ...): `"name"` in any schema or `"schema.name"`. Default none.
    pub write_functions: Vec<String>,
    /// Functions that never change session state (settings, role, `LISTEN`, session advisory
    /// locks, temporary tables, `PREPARE`, `WITH HOLD` cursors): a transaction calling only
    /// these and built-ins is not read back from the server afterwards. `"name"` in any
    /// schema or `"schema.name"`. Default none.
    pub session_neutral_functions: Vec<String>,
    /// Deepest expression or subquery nesting analysed; deeper queries are routed as writes.
    /// Default 1000; between 16 and 10000.
    pub max_nesting: u32,
    /// Most literal values recorded per query for shard routing. Default 65536.
    pub max_values: usize,
}

impl Default for AnalysisSettings {
    fn default() -> Self {
        let o = route::AnalyzerOptions::default();
        AnalysisSettings {
            max_query_length: o.max_query_length,
            cache_entries: o.cache_entries,
            cache_bytes: o.cache_bytes,
            cache_admission: CacheAdmission::SecondSight,
            write_functions: o.write_functions,
            session_neutral_functions: o.session_neutral_functions,
            max_nesting: o.max_nesting,
            max_values: o.max_values,
        }
    }
}

impl AnalysisSettings {
    /// The settings as the analyzer takes them.
    pub fn analyzer_options(&self) -> route::AnalyzerOptions {
        route::AnalyzerOptions {
            max_query_length: self.max_query_length,
            cache_entries: self.cache_entries,
            cache_bytes: self.cache_bytes,
            cache_admission: match self.cache_admission {
                CacheAdmission::Always => route::Admission::Always,
                CacheAdmission::SecondSight => route::Admission::SecondSight,
            },
            write_functions: self.write_functions.clone(),
            session_neutral_functions: self.session_neutral_functions.clone(),
            max_nesting: self.max_nesting,
            max_values: self.max_values,
        }
    }
}

/// `[pool]`: defaults for every (database, user) pool.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PoolDefaults {
    /// `session`, `transaction` or `statement`. Default `transaction`.
    pub pool_mode: PoolMode,
    /// Most server connections per (database, user) pool. Default 20, at least 1.
    pub pool_size: u32,
    /// Idle server connections kept open per pool, at most `pool_size`. Default 0.
    pub min_idle: u32,
    /// How long opening a server connection (TCP, TLS, authentication) may take. Default `"5s"`,
    /// more than zero.
    #[serde(deserialize_with = "values::duration")]
    pub connect_timeout: Duration,
    /// How long a client waits for a free server connection before SQLSTATE 53300.
    /// Default `"30s"`, more than zero.
    #[serde(deserialize_with = "values::duration")]
    pub checkout_timeout: Duration,
    /// Close a server connection idle for longer than this. Default `"10m"`; `"0s"` = never.
    #[serde(deserialize_with = "values::duration")]
    pub idle_timeout: Duration,
    /// Close a server connection older than this when it next goes idle. Each connection's
    /// own limit is drawn between 90% and 100% of it, so servers opened together do not all
    /// close together. Default `"1h"`; `"0s"` = never.
    #[serde(deserialize_with = "values::duration")]
    pub max_lifetime: Duration,
    /// Close a client that sends nothing for this long while it is not in a transaction
    /// (SQLSTATE 57P05). Default `"0s"` = never.
    #[serde(deserialize_with = "values::duration")]
    pub client_idle_timeout: Duration,
    /// Close a client that sends nothing for this long inside a transaction; its transaction
    /// is rolled back and its server freed (SQLSTATE 25P03). Default `"0s"` = never.
    #[serde(deserialize_with = "values::duration")]
    pub idle_in_transaction_timeout: Duration,
    /// Cancel a request the server has not finished answering after this long; the client
    /// gets the server's 57014 error. Default `"0s"` = never.
    #[serde(deserialize_with = "values::duration")]
    pub query_timeout: Duration,
    /// Transaction and statement mode: most prepared statements one server connection keeps
    /// for clients (least recently used ones are closed past it). Default 200; 0 turns
    /// prepared-statement handling off (statements pass through unchanged, as in session mode).
    pub max_prepared_statements: u32,
}

impl Default for PoolDefaults {
    fn default() -> Self {
        PoolDefaults {
            pool_mode: PoolMode::Transaction,
            pool_size: 20,
            min_idle: 0,
            connect_timeout: Duration::from_secs(5),
            checkout_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(600),
            max_lifetime: Duration::from_secs(3600),
            client_idle_timeout: Duration::ZERO,
            idle_in_transaction_timeout: Duration::ZERO,
            query_timeout: Duration::ZERO,
            max_prepared_statements: 200,
        }
    }
}

/// One `[[users]]` entry.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct User {
    /// User name, both towards clients and towards the server. Required, unique, not empty.
    pub name: String,
    /// What clients must prove: a plaintext password, `md5` + 32 hex digits, or a
    /// SCRAM-SHA-256 verifier. Required unless the user's effective `auth_method` is `trust`.
    #[serde(default)]
    pub password: Option<Password>,
    /// Overrides `general.auth_method` for this user.
    #[serde(default)]
    pub auth_method: Option<AuthMethod>,
    /// May use the admin console (virtual databases `pgvia` and `pgbouncer`). Default false.
    #[serde(default)]
    pub admin: bool,
    /// Plaintext password pgvia gives when PostgreSQL asks for one. Default: `password` when
    /// that is plaintext. Use [`User::password_for_server`].
    #[serde(default)]
    pub server_password: Option<Password>,
    /// Most clients logged in as this user at once, over all databases. Default: no limit
    /// but the process-wide and per-database ones.
    #[serde(default)]
    pub max_client_connections: Option<u32>,
    /// Where this user's transactions go on databases with replicas: `primary`, `replica`
    /// or `auto` (decided by the database's `read_write_split`). Default `auto`.
    #[serde(default)]
    pub default_role: Option<RolePreference>,
    /// Overrides the database's and `[pool]`'s `pool_mode` for this user.
    #[serde(default)]
    pub pool_mode: Option<PoolMode>,
    /// Overrides the database's and `[pool]`'s `pool_size` for this user.
    #[serde(default)]
    pub pool_size: Option<u32>,
    /// Overrides the database's and `[pool]`'s `min_idle` for this user.
    #[serde(default)]
    pub min_idle: Option<u32>,
    /// Overrides the database's and `[pool]`'s `connect_timeout` for this user.
    #[serde(default, deserialize_with = "values::opt_duration")]
    pub connect_timeout: Option<Duration>,
    /// Overrides the database's and `[pool]`'s `checkout_timeout` for this user.
    #[serde(default, deserialize_with = "values::opt_duration")]
    pub checkout_timeout: Option<Duration>,
    /// Overrides the database's and `[pool]`'s `idle_timeout` for this user.
    #[serde(default, deserialize_with = "values::opt_duration")]
    pub idle_timeout: Option<Duration>,
    /// Overrides the database's and `[pool]`'s `max_lifetime` for this user.
    #[serde(default, deserialize_with = "values::opt_duration")]
    pub max_lifetime: Option<Duration>,
    /// Overrides the database's and `[pool]`'s `client_idle_timeout` for this user.
    #[serde(default, deserialize_with = "values::opt_duration")]
    pub client_idle_timeout: Option<Duration>,
    /// Overrides the database's and `[pool]`'s `idle_in_transaction_timeout` for this user.
    #[serde(default, deserialize_with = "values::opt_duration")]
    pub idle_in_transaction_timeout: Option<Duration>,
    /// Overrides the database's and `[pool]`'s `query_timeout` for this user.
    #[serde(default, deserialize_with = "values::opt_duration")]
    pub query_timeout: Option<Duration>,
    /// Overrides the database's and `[pool]`'s `max_prepared_statements` for this user.
    #[serde(default)]
    pub max_prepared_statements: Option<u32>,
}

/// What kind of secret a `password` value holds, decided by its spelling the way PostgreSQL
/// decides for `rolpassword`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PasswordFormat {
    /// Anything that is neither of the others.
    Plaintext,
    /// `md5` followed by 32 lower-case hexadecimal digits: md5(password || user name).
    /// PostgreSQL takes anything else (`MD5...`, upper-case digits) as a plaintext password;
    /// validation rejects such near-hashes rather than use a hash as a password.
    Md5,
    /// Starts with `SCRAM-SHA-256$` (well formed or not; validation reports the latter).
    ScramSha256,
}

impl PasswordFormat {
    /// Text that an MD5 hash was surely meant to be but that PostgreSQL would take as a
    /// plaintext password: `md5` in any case and 32 hexadecimal digits, not all lower case.
    pub fn is_near_md5(password: &str) -> bool {
        password.len() == 35
            && password.get(..3).is_some_and(|p| p.eq_ignore_ascii_case("md5"))
            && password.bytes().skip(3).all(|b| b.is_ascii_hexdigit())
            && !wire::md5::is_md5_hash(password)
    }

    /// Classifies a stored password.
    pub fn of(password: &str) -> PasswordFormat {
        if password.starts_with("SCRAM-SHA-256$") {
            PasswordFormat::ScramSha256
        } else if wire::md5::is_md5_hash(password) {
            PasswordFormat::Md5
        } else {
            PasswordFormat::Plaintext
        }
    }
}

impl User {
    /// The password pgvia sends to PostgreSQL: `server_password`, else `password` if it is
    /// plaintext, else none (the server must then not ask for one).
    pub fn password_for_server(&self) -> Option<&str> {
        match (&self.server_password, &self.password) {
            (Some(p), _) => Some(p),
            (None, Some(p)) if PasswordFormat::of(p) == PasswordFormat::Plaintext => Some(p),
            _ => None,
        }
    }
}

/// Pool settings for one (database, user) pair, overrides resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolSettings {
    /// When a server connection goes back to the pool.
    pub pool_mode: PoolMode,
    /// Most server connections in this pool, at least 1.
    pub pool_size: u32,
    /// Idle server connections to keep open, at most `pool_size`.
    pub min_idle: u32,
    /// Time limit for opening a server connection.
    pub connect_timeout: Duration,
    /// How long a client waits for a server connection.
    pub checkout_timeout: Duration,
    /// Idle time after which a server connection is closed; zero means never.
    pub idle_timeout: Duration,
    /// Age after which a server connection is closed when next idle (less a per-connection
    /// jitter of up to 10%); zero means never.
    pub max_lifetime: Duration,
    /// How long a client outside a transaction may stay silent; zero means forever.
    pub client_idle_timeout: Duration,
    /// How long a client inside a transaction may stay silent; zero means forever.
    pub idle_in_transaction_timeout: Duration,
    /// How long a request may go unanswered before it is cancelled; zero means never.
    pub query_timeout: Duration,
    /// Prepared statements kept per server connection; zero turns their handling off.
    pub max_prepared_statements: u32,
}
