//! The keys of a database with several servers: which serves what, how reads are spread,
//! and how health is checked. The values live on [`Database`](super::Database) (serde's
//! `flatten` cannot be combined with the unknown-key check every table has); the types and
//! the resolved form are here.

use std::fmt;
use std::time::Duration;

use serde::Deserialize;

use super::values;

/// What a server is to pgvia.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ServerRole {
    /// Takes writes. Trusted as configured.
    Primary,
    /// A hot standby: reads only. Trusted as configured.
    Replica,
    /// Whatever `pg_is_in_recovery()` says, asked at every health check: a promoted replica
    /// becomes the primary without a reload.
    Auto,
}

impl ServerRole {
    pub fn as_str(self) -> &'static str {
        match self {
            ServerRole::Primary => "primary",
            ServerRole::Replica => "replica",
            ServerRole::Auto => "auto",
        }
    }
}

impl fmt::Display for ServerRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Whether reads are sent to replicas.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReadWriteSplit {
    /// Everything goes to the primary unless a hint, `SET pgvia.role` or the user's
    /// `default_role` asks for a replica.
    Off,
    /// Transactions that only read go to replicas.
    On,
    /// As `on`, but a read that calls a function pgvia does not know to be read-only (a
    /// user-defined function may write) goes to the primary.
    Conservative,
}

impl fmt::Display for ReadWriteSplit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ReadWriteSplit::Off => "off",
            ReadWriteSplit::On => "on",
            ReadWriteSplit::Conservative => "conservative",
        })
    }
}

/// How a read picks among the servers that may serve it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LoadBalance {
    /// In turn, each server as often as its weight says.
    RoundRobin,
    /// At random, in proportion to the weights.
    Random,
    /// The server with the fewest of this pool's connections in use, per unit of weight.
    LeastConnections,
}

impl fmt::Display for LoadBalance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LoadBalance::RoundRobin => "round_robin",
            LoadBalance::Random => "random",
            LoadBalance::LeastConnections => "least_connections",
        })
    }
}

/// Where a session's transactions go, as a user default or `SET pgvia.role`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RolePreference {
    /// Everything to the primary.
    Primary,
    /// Everything to a replica (writes then fail as PostgreSQL fails them on a standby);
    /// the primary when no replica is healthy.
    Replica,
    /// Decided per transaction by `read_write_split`.
    Auto,
}

impl RolePreference {
    /// `SET pgvia.role`'s values, as PostgreSQL compares them (case-insensitive).
    pub fn parse(value: &str) -> Option<RolePreference> {
        match value.trim().to_ascii_lowercase().as_str() {
            "primary" => Some(RolePreference::Primary),
            "replica" => Some(RolePreference::Replica),
            "auto" | "default" => Some(RolePreference::Auto),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            RolePreference::Primary => "primary",
            RolePreference::Replica => "replica",
            RolePreference::Auto => "auto",
        }
    }
}

/// One `[[databases.servers]]` entry.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerEntry {
    /// Host name or IP address. Required.
    pub host: String,
    /// Port. Default 5432.
    #[serde(default = "default_port", deserialize_with = "values::port")]
    pub port: u16,
    /// `primary`, `replica` or `auto`. Default `auto`.
    #[serde(default = "default_role")]
    pub role: ServerRole,
    /// Share of reads relative to the other servers. Default 1; 0 takes no reads (a standby
    /// kept for failover only).
    #[serde(default = "default_weight")]
    pub weight: u32,
}

fn default_port() -> u16 {
    5432
}

fn default_role() -> ServerRole {
    ServerRole::Auto
}

fn default_weight() -> u32 {
    1
}

/// A database's routing keys, defaults applied; what the router runs on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoutingSettings {
    pub servers: Vec<ServerEntry>,
    pub read_write_split: ReadWriteSplit,
    pub load_balance: LoadBalance,
    pub primary_reads: bool,
    pub read_your_writes: Duration,
    pub health_check_interval: Duration,
    pub health_check_timeout: Duration,
    pub health_check_query: String,
    /// Logs in for health checks; resolved to a user name.
    pub health_check_user: Option<String>,
    pub ban_time: Duration,
    pub max_replica_lag_bytes: u64,
    pub max_replica_lag: Duration,
}

impl RoutingSettings {
    /// Whether this database needs health checks: more than one server, or a role that is
    /// discovered rather than configured.
    pub fn checks_health(&self) -> bool {
        self.servers.len() > 1 || self.servers.iter().any(|s| s.role == ServerRole::Auto)
    }
}

/// Defaults of the database-level routing keys.
pub(crate) mod defaults {
    use std::time::Duration;

    pub const READ_YOUR_WRITES: Duration = Duration::from_secs(1);
    pub const HEALTH_CHECK_INTERVAL: Duration = Duration::from_secs(1);
    pub const HEALTH_CHECK_TIMEOUT: Duration = Duration::from_secs(2);
    pub const BAN_TIME: Duration = Duration::from_secs(10);
}
