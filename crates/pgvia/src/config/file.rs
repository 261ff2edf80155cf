//! The whole of `pgvia.toml`: its tables, each defined in a file of its own.

use std::path::PathBuf;

use serde::Deserialize;

use super::auth_query::AuthQuery;
use super::database::Database;
use super::gateway::Gateway;
use super::limits::Limits;
use super::model::{AnalysisSettings, General, PoolDefaults, User};

/// The whole configuration file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// `[general]`: process-wide settings. Optional; every key has a default.
    #[serde(default)]
    pub general: General,
    /// `[pool]`: pool defaults, overridable per database and per user. Optional.
    #[serde(default)]
    pub pool: PoolDefaults,
    /// `[[databases]]`: the databases clients may ask for. Default: none.
    #[serde(default)]
    pub databases: Vec<Database>,
    /// `[[users]]`: the users who may log in. Default: none (then nobody can log in).
    #[serde(default)]
    pub users: Vec<User>,
    /// `[analysis]`: how queries are parsed and summarised for routing. Optional. A reload
    /// does not apply it (restart).
    #[serde(default)]
    pub analysis: AnalysisSettings,
    /// `[limits]`: bounds on what clients can make pgvia hold. Optional.
    #[serde(default)]
    pub limits: Limits,
    /// `[auth_query]`: users looked up in PostgreSQL at login. Optional.
    #[serde(default)]
    pub auth_query: Option<AuthQuery>,
    /// `[gateway]`: SQL over HTTP and the wire protocol over WebSocket. Optional; off
    /// unless `gateway.listen` is set.
    #[serde(default)]
    pub gateway: Gateway,
    /// The file this configuration was read from, re-read by a reload. Not a key.
    #[serde(skip)]
    pub origin: PathBuf,
}
