//! `[limits]`: bounds on what a client (or a scraper of `/metrics`) can make pgvia hold.
//!
//! Kept apart from `[general]` because they answer one question together: how much of
//! pgvia's memory, descriptors and CPU can a host on the network take before logging in,
//! and how much can a logged-in client pile up by not reading. Each key is read where it is
//! used, from the current snapshot, so a reload applies it to what comes next.

use std::time::Duration;

use serde::Deserialize;

use super::values;

/// `[limits]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// How long a connection may take from accept to finished login (TLS, startup packet,
    /// authentication). Default `"60s"`, more than zero.
    #[serde(deserialize_with = "values::duration")]
    pub startup_timeout: Duration,
    /// Most connections that have not finished logging in, whole process. Default 2000.
    pub max_pending_logins: u32,
    /// Most connections not yet logged in from one IP address. Default 500.
    pub max_pending_logins_per_address: u32,
    /// Connections accepted per second from one IP address (a burst of this many is allowed);
    /// 0 turns the limit off. Default 0.
    pub connections_per_second_per_address: u32,
    /// Places of `general.max_client_connections` only admin users may take. Default 3;
    /// less than `max_client_connections`.
    pub admin_reserved_connections: u32,
    /// Bytes a client may have waiting in pgvia, unanswered or held back, before pgvia stops
    /// reading it. Default 1048576 (1 MiB), at least 65536.
    pub client_backlog_bytes: u32,
    /// Bytes of large messages (over 64 KiB) being received at once, whole process. Default
    /// 1073741824 (1 GiB); at least `general.max_message_size`.
    pub max_buffered_message_bytes: u64,
    /// Password hashes (PBKDF2) computed at once, off the async workers. Default 2. Restart.
    pub max_concurrent_password_hashes: u32,
    /// Cancel requests accepted per second, whole process; 0 turns the limit off. Default 100.
    pub cancel_requests_per_second: u32,
    /// How long an HTTP client of the metrics listener may take to send its request headers.
    /// Default `"5s"`, more than zero.
    #[serde(deserialize_with = "values::duration")]
    pub metrics_header_timeout: Duration,
    /// Most connections to the metrics listener at once. Default 16.
    pub metrics_max_connections: u32,
    /// How long a `/health` answer is reused. Default `"1s"`.
    #[serde(deserialize_with = "values::duration")]
    pub health_cache: Duration,
    /// Bytes one cross-shard merge (ORDER BY, GROUP BY, DISTINCT) may hold. Default 67108864
    /// (64 MiB), at least 65536.
    pub merge_memory_budget: u64,
    /// Whether a merge past `merge_memory_budget` spills its grouping, sorting and DISTINCT
    /// state to temporary files in `merge_spill_dir` (true) or fails with 53200 (false).
    /// Default true.
    pub merge_spill: bool,
    /// Directory of the merges' spill files; `""` is the system's temporary directory
    /// (`$TMPDIR`, else `/tmp`). When set, an absolute path to an existing directory.
    pub merge_spill_dir: String,
}

impl Limits {
    /// Where merges spill, `None` with spilling off.
    pub fn merge_spill_path(&self) -> Option<std::path::PathBuf> {
        if !self.merge_spill {
            return None;
        }
        if self.merge_spill_dir.is_empty() {
            return Some(std::env::temp_dir());
        }
        Some(std::path::PathBuf::from(&self.merge_spill_dir))
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            startup_timeout: Duration::from_secs(60),
            max_pending_logins: 2000,
            max_pending_logins_per_address: 500,
            connections_per_second_per_address: 0,
            admin_reserved_connections: 3,
            client_backlog_bytes: 1024 * 1024,
            max_buffered_message_bytes: 1024 * 1024 * 1024,
            max_concurrent_password_hashes: 2,
            cancel_requests_per_second: 100,
            metrics_header_timeout: Duration::from_secs(5),
            metrics_max_connections: 16,
            health_cache: Duration::from_secs(1),
            merge_memory_budget: 64 << 20,
            merge_spill: true,
            merge_spill_dir: String::new(),
        }
    }
}

/// Smallest `client_backlog_bytes`: below this a session would stop reading the client
/// between two parts of an ordinary pipelined batch.
pub const MIN_CLIENT_BACKLOG: u32 = 64 * 1024;

/// Problems with `[limits]`, as (key, message).
pub fn problems(limits: &Limits, general: &super::General) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    if limits.merge_memory_budget < 65536 {
        out.push(("limits.merge_memory_budget", "must be at least 65536".to_owned()));
    }
    if limits.merge_spill && !limits.merge_spill_dir.is_empty() {
        let dir = std::path::Path::new(&limits.merge_spill_dir);
        if !dir.is_absolute() {
            out.push(("limits.merge_spill_dir", format!("must be an absolute path, got {dir:?}")));
        } else if !dir.is_dir() {
            out.push(("limits.merge_spill_dir", format!("{dir:?} is not an existing directory")));
        }
    }
    let at_least_one = [
        ("limits.max_pending_logins", limits.max_pending_logins),
        ("limits.max_pending_logins_per_address", limits.max_pending_logins_per_address),
        ("limits.max_concurrent_password_hashes", limits.max_concurrent_password_hashes),
        ("limits.metrics_max_connections", limits.metrics_max_connections),
    ];
    for (key, value) in at_least_one {
        if value == 0 {
            out.push((key, "must be at least 1".to_owned()));
        }
    }
    for (key, value) in [
        ("limits.startup_timeout", limits.startup_timeout),
        ("limits.metrics_header_timeout", limits.metrics_header_timeout),
    ] {
        if value.is_zero() {
            out.push((key, "must be more than 0s".to_owned()));
        }
    }
    if limits.admin_reserved_connections >= general.max_client_connections {
        out.push((
            "limits.admin_reserved_connections",
            format!(
                "must be less than general.max_client_connections ({}), got {}",
                general.max_client_connections, limits.admin_reserved_connections
            ),
        ));
    }
    if limits.client_backlog_bytes < MIN_CLIENT_BACKLOG {
        out.push((
            "limits.client_backlog_bytes",
            format!("must be at least {MIN_CLIENT_BACKLOG}, got {}", limits.client_backlog_bytes),
        ));
    }
    if limits.max_buffered_message_bytes < u64::from(general.max_message_size) {
        out.push((
            "limits.max_buffered_message_bytes",
            format!(
                "must be at least general.max_message_size ({}), or no message of that size could ever be received; got {}",
                general.max_message_size, limits.max_buffered_message_bytes
            ),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(limits: Limits, general: super::super::General) -> Vec<&'static str> {
        problems(&limits, &general).into_iter().map(|(k, _)| k).collect()
    }

    #[test]
    fn defaults_are_valid_and_each_bound_is_checked() {
        let general = super::super::General::default();
        assert!(keys(Limits::default(), general.clone()).is_empty());
        let bad = Limits {
            startup_timeout: Duration::ZERO,
            max_pending_logins: 0,
            admin_reserved_connections: 10_000,
            client_backlog_bytes: 1024,
            max_buffered_message_bytes: 1024,
            merge_spill_dir: "/nonexistent/spill".to_owned(),
            ..Limits::default()
        };
        assert_eq!(
            keys(bad, general),
            [
                "limits.merge_spill_dir",
                "limits.max_pending_logins",
                "limits.startup_timeout",
                "limits.admin_reserved_connections",
                "limits.client_backlog_bytes",
                "limits.max_buffered_message_bytes",
            ]
        );
    }

    #[test]
    fn a_file_sets_them_in_a_limits_table() {
        let config = crate::config::Config::parse(
            "[limits]\nstartup_timeout = \"5s\"\nmax_pending_logins_per_address = 7\n",
            std::path::Path::new("/tmp/x.toml"),
        )
        .expect("valid");
        assert_eq!(config.limits.startup_timeout, Duration::from_secs(5));
        assert_eq!(config.limits.max_pending_logins_per_address, 7);
        let typo = crate::config::Config::parse(
            "[limits]\nstartup_timout = \"5s\"\n",
            std::path::Path::new("/tmp/x.toml"),
        );
        assert!(typo.is_err());
    }
}
