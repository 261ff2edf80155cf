use std::path::PathBuf;

use crate::PgVersion;

/// Everything that can go wrong while provisioning or driving a cluster.
///
/// Variants carry enough context (paths, commands, log tails) that a failing
/// test explains itself without someone rerunning it by hand.
#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },

    #[error("`{command}` failed ({status}):\n{stderr}")]
    Command { command: String, status: String, stderr: String },

    #[error("PostgreSQL {version} binaries not found: {hint}")]
    BinariesNotFound { version: PgVersion, hint: String },

    #[error("running as root but there is no `postgres` OS user to own the cluster (PostgreSQL refuses to run as root)")]
    NoPostgresUser,

    #[error("PostgreSQL failed to start (log {log}):\n{log_tail}")]
    Start { log: PathBuf, log_tail: String },

    #[error("not supported: {0}")]
    Unsupported(String),

    #[error("invalid option: {0}")]
    InvalidOption(String),

    #[error("timed out after {waited:?} waiting for {what}")]
    Timeout { what: String, waited: std::time::Duration },

    #[error("cluster metadata {path}: {reason}")]
    Metadata { path: PathBuf, reason: String },
}

impl HarnessError {
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        HarnessError::Io { context: context.into(), source }
    }
}

/// Shorthand for attaching a description to `std::io::Result`s.
pub(crate) trait IoContext<T> {
    fn ctx(self, context: impl FnOnce() -> String) -> Result<T, HarnessError>;
}

impl<T> IoContext<T> for std::io::Result<T> {
    fn ctx(self, context: impl FnOnce() -> String) -> Result<T, HarnessError> {
        self.map_err(|e| HarnessError::io(context(), e))
    }
}
