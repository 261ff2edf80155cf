//! One `[[databases]]` entry of `pgvia.toml`: where its servers are, how it is pooled, routed
//! and sharded, and the per-database settings that override `[pool]`.

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::model::{PlainPasswords, PoolMode, ServerTlsMode, ServerTlsSettings, TlsNegotiation, User};
use super::routing::{self, LoadBalance, ReadWriteSplit, RoutingSettings, ServerEntry, ServerRole};
use super::sharding::{ShardEntry, ShardedSchema, ShardedTable, UnshardedTables};
use super::values;

/// One `[[databases]]` entry.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Database {
    /// The name clients ask for. Required, unique, not empty.
    pub name: String,
    /// PostgreSQL server host name or IP address: the database's one server, its primary.
    /// Required unless `servers` lists the servers instead.
    #[serde(default)]
    pub host: Option<String>,
    /// PostgreSQL server port. Default 5432.
    #[serde(default = "default_server_port", deserialize_with = "values::port")]
    pub port: u16,
    /// `[[databases.servers]]`: a primary and its replicas, instead of `host`/`port`.
    #[serde(default)]
    pub servers: Vec<ServerEntry>,
    /// `[[databases.shards]]`: the shards of a sharded database, in order, instead of
    /// `host`/`servers`. See `sharding.rs`.
    #[serde(default)]
    pub shards: Vec<ShardEntry>,
    /// `[[databases.sharded_tables]]`: key column, type and function per sharded table.
    #[serde(default)]
    pub sharded_tables: Vec<ShardedTable>,
    /// `[[databases.sharded_schemas]]`: schemas that each live on one shard.
    #[serde(default)]
    pub sharded_schemas: Vec<ShardedSchema>,
    /// `omnisharded` or `refuse`: statements on tables listed nowhere. Default `refuse`.
    #[serde(default)]
    pub unsharded_tables: Option<UnshardedTables>,
    /// `off`, `on` or `conservative`: whether reads go to replicas. Default `off`.
    #[serde(default = "default_split")]
    pub read_write_split: ReadWriteSplit,
    /// `round_robin`, `random` or `least_connections`. Default `round_robin`.
    #[serde(default = "default_balance")]
    pub load_balance: LoadBalance,
    /// The primary serves reads too, in rotation with the replicas. Default false.
    #[serde(default)]
    pub primary_reads: bool,
    /// After a client's transaction writes, its reads stay on the primary this long.
    /// Default `"1s"`; `"0s"` = off.
    #[serde(default, deserialize_with = "values::opt_duration")]
    pub read_your_writes: Option<Duration>,
    /// How often each server is checked (role, lag, liveness). Default `"1s"`.
    #[serde(default, deserialize_with = "values::opt_duration")]
    pub health_check_interval: Option<Duration>,
    /// How long one check may take before the server counts as failed. Default `"2s"`.
    #[serde(default, deserialize_with = "values::opt_duration")]
    pub health_check_timeout: Option<Duration>,
    /// A query each check also runs; the server fails the check if it errors. Default none.
    #[serde(default)]
    pub health_check_query: String,
    /// The `[[users]]` entry health checks log in as. Default: the first user that is not
    /// `admin` (else the first user).
    #[serde(default)]
    pub health_check_user: Option<String>,
    /// How long a server that failed a connect or a check stays out of rotation, at least.
    /// Default `"10s"`.
    #[serde(default, deserialize_with = "values::opt_duration")]
    pub ban_time: Option<Duration>,
    /// A replica this many bytes of WAL behind the primary leaves rotation until it catches
    /// up. Default 0 = no limit.
    #[serde(default)]
    pub max_replica_lag_bytes: u64,
    /// A replica whose replay is this far behind in time leaves rotation. Default `"0s"` =
    /// no limit.
    #[serde(default, deserialize_with = "values::opt_duration")]
    pub max_replica_lag: Option<Duration>,
    /// Database name on the server. Default: `name`. Use [`Database::server_dbname`].
    #[serde(default)]
    pub dbname: Option<String>,
    /// Most clients connected to this database at once. Default: no limit but the
    /// process-wide `general.max_client_connections`.
    #[serde(default)]
    pub max_client_connections: Option<u32>,
    /// Overrides `[pool] pool_mode` for this database.
    #[serde(default)]
    pub pool_mode: Option<PoolMode>,
    /// Overrides `[pool] pool_size` for this database.
    #[serde(default)]
    pub pool_size: Option<u32>,
    /// Overrides `[pool] min_idle` for this database.
    #[serde(default)]
    pub min_idle: Option<u32>,
    /// Overrides `[pool] connect_timeout` for this database.
    #[serde(default, deserialize_with = "values::opt_duration")]
    pub connect_timeout: Option<Duration>,
    /// Overrides `[pool] checkout_timeout` for this database.
    #[serde(default, deserialize_with = "values::opt_duration")]
    pub checkout_timeout: Option<Duration>,
    /// Overrides `[pool] idle_timeout` for this database.
    #[serde(default, deserialize_with = "values::opt_duration")]
    pub idle_timeout: Option<Duration>,
    /// Overrides `[pool] max_lifetime` for this database.
    #[serde(default, deserialize_with = "values::opt_duration")]
    pub max_lifetime: Option<Duration>,
    /// Overrides `[pool]` `client_idle_timeout` for this database.
    #[serde(default, deserialize_with = "values::opt_duration")]
    pub client_idle_timeout: Option<Duration>,
    /// Overrides `[pool]` `idle_in_transaction_timeout` for this database.
    #[serde(default, deserialize_with = "values::opt_duration")]
    pub idle_in_transaction_timeout: Option<Duration>,
    /// Overrides `[pool]` `query_timeout` for this database.
    #[serde(default, deserialize_with = "values::opt_duration")]
    pub query_timeout: Option<Duration>,
    /// Overrides `[pool] max_prepared_statements` for this database.
    #[serde(default)]
    pub max_prepared_statements: Option<u32>,
    /// TLS to this database's servers: `disable`, `prefer`, `require`, `verify-ca` or
    /// `verify-full` (libpq's meanings). Default `disable`. Not used over Unix sockets.
    #[serde(default)]
    pub server_tls_mode: ServerTlsMode,
    /// `postgres` (SSLRequest first) or `direct` (PostgreSQL 17+'s direct TLS, needs
    /// `require` or stronger). Default `postgres`.
    #[serde(default)]
    pub server_tls_negotiation: TlsNegotiation,
    /// PEM file of the CAs a server's certificate must lead to; required by `verify-ca` and
    /// `verify-full`. Relative paths are resolved against the configuration file's folder.
    #[serde(default)]
    pub server_tls_ca_file: Option<PathBuf>,
    /// PEM client certificate pgvia shows servers that ask for one (mTLS); with
    /// `server_tls_key_file`.
    #[serde(default)]
    pub server_tls_cert_file: Option<PathBuf>,
    /// PEM private key of `server_tls_cert_file`.
    #[serde(default)]
    pub server_tls_key_file: Option<PathBuf>,
    /// Under `server_tls_mode = require` or stronger, answer a server's request for a
    /// cleartext or MD5 password anyway. Default false: only SCRAM is answered there.
    #[serde(default)]
    pub server_allow_plain_password: bool,
}

impl Database {
    /// Whether this database is spread over shards.
    pub fn is_sharded(&self) -> bool {
        !self.shards.is_empty()
    }

    /// The compiled sharding rules, or every problem with them as `(key path, message)`
    /// (`db_index` is this database's position, for the paths). `Ok(None)` for a database
    /// that is not sharded.
    pub fn sharding_rules(
        &self,
        db_index: usize,
    ) -> Result<Option<super::sharding::ShardingRules>, Vec<(String, String)>> {
        super::sharding::ShardingKeys {
            shards: &self.shards,
            sharded_tables: &self.sharded_tables,
            sharded_schemas: &self.sharded_schemas,
            unsharded_tables: self.unsharded_tables,
        }
        .rules(db_index)
    }

    /// The `server_tls_*` keys as the server layer takes them.
    pub fn server_tls(&self) -> ServerTlsSettings {
        ServerTlsSettings {
            mode: self.server_tls_mode,
            negotiation: self.server_tls_negotiation,
            ca_file: self.server_tls_ca_file.clone(),
            cert_file: self.server_tls_cert_file.clone(),
            key_file: self.server_tls_key_file.clone(),
        }
    }

    /// Whether a server may be sent a cleartext or MD5 password.
    pub fn plain_passwords(&self) -> PlainPasswords {
        if self.server_tls_mode.requires_tls() && !self.server_allow_plain_password {
            PlainPasswords::Refused
        } else {
            PlainPasswords::Allowed
        }
    }

    /// The database name to send to the server.
    pub fn server_dbname(&self) -> &str {
        self.dbname.as_deref().unwrap_or(&self.name)
    }

    /// The database's one server (`host`/`port`) or the first of `servers`: where
    /// `/health` probes and `SHOW DATABASES` points.
    pub fn first_server(&self) -> (&str, u16) {
        // A sharded database has no server of its own: none is named here, so nothing that
        // pools by this address can reach a shard and serve it as if it were the database.
        if self.is_sharded() {
            return ("", self.port);
        }
        match self.servers.first() {
            Some(s) => (&s.host, s.port),
            None => (self.host.as_deref().unwrap_or_default(), self.port),
        }
    }

    /// The routing keys with defaults applied; `host`/`port` become the one server, the
    /// primary. `users` resolves the health-check user's default.
    pub fn routing(&self, users: &[User]) -> RoutingSettings {
        let servers = if self.servers.is_empty() {
            vec![ServerEntry {
                host: self.host.clone().unwrap_or_default(),
                port: self.port,
                role: ServerRole::Primary,
                weight: 1,
            }]
        } else {
            self.servers.clone()
        };
        let health_check_user = self.health_check_user.clone().or_else(|| {
            // Admin console users are often not PostgreSQL roles at all.
            users.iter().find(|u| !u.admin).or(users.first()).map(|u| u.name.clone())
        });
        RoutingSettings {
            servers,
            read_write_split: self.read_write_split,
            load_balance: self.load_balance,
            primary_reads: self.primary_reads,
            read_your_writes: self.read_your_writes.unwrap_or(routing::defaults::READ_YOUR_WRITES),
            health_check_interval: self
                .health_check_interval
                .unwrap_or(routing::defaults::HEALTH_CHECK_INTERVAL),
            health_check_timeout: self
                .health_check_timeout
                .unwrap_or(routing::defaults::HEALTH_CHECK_TIMEOUT),
            health_check_query: self.health_check_query.clone(),
            health_check_user,
            ban_time: self.ban_time.unwrap_or(routing::defaults::BAN_TIME),
            max_replica_lag_bytes: self.max_replica_lag_bytes,
            max_replica_lag: self.max_replica_lag.unwrap_or(Duration::ZERO),
        }
    }
}

fn default_server_port() -> u16 {
    5432
}

fn default_split() -> ReadWriteSplit {
    ReadWriteSplit::Off
}

fn default_balance() -> LoadBalance {
    LoadBalance::RoundRobin
}
