//! The open-file limit at start: raised toward the hard limit, and checked against what the
//! configuration may open (every client a socket, every server a socket).
//!
//! A process started from a shell or by systemd usually gets a soft limit of 1024 with a far
//! higher hard limit; left there, pgvia would fail to accept clients (`EMFILE`) long before
//! `max_client_connections`. Too low a hard limit is logged as a warning rather than refused:
//! pgvia still serves what it can, and the operator sees why more fail.

use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};

use crate::config::Config;

/// Descriptors pgvia needs besides clients and servers: listeners, the metrics listener,
/// health checks, LISTEN connections, log files, the runtime's own.
pub const OVERHEAD: u64 = 100;

/// What happened to the limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    /// The soft limit now in force (`None`: unlimited).
    pub limit: Option<u64>,
    /// Descriptors the configuration may need.
    pub needed: u64,
}

impl Outcome {
    pub fn is_enough(&self) -> bool {
        self.limit.is_none_or(|l| l >= self.needed)
    }
}

/// Descriptors a configuration may need at once: one per client allowed (logged in, or
/// logging in: `limits.max_pending_logins`), one per metrics connection, one per server
/// each database's pool may open (`[pool] pool_size`, or the database's own), and
/// [`OVERHEAD`].
pub fn needed(config: &Config) -> u64 {
    let per_db: u64 = config
        .databases
        .iter()
        .map(|d| u64::from(d.pool_size.unwrap_or(config.pool.pool_size)) * config.users.len().max(1) as u64)
        .sum();
    let limits = &config.limits;
    u64::from(config.general.max_client_connections)
        + u64::from(limits.max_pending_logins)
        + u64::from(limits.metrics_max_connections)
        + per_db
        + OVERHEAD
}

/// Raises the soft limit to the hard one (as far as the kernel allows) and says whether it
/// covers what `config` may need.
pub fn raise(config: &Config) -> Outcome {
    let needed = needed(config);
    let now = getrlimit(Resource::Nofile);
    let mut limit = now.current;
    if now.current != now.maximum {
        let wanted = Rlimit { current: now.maximum, maximum: now.maximum };
        match setrlimit(Resource::Nofile, wanted) {
            Ok(()) => limit = now.maximum,
            Err(e) => tracing::debug!(error = %e, "could not raise the open-file limit"),
        }
        // An unlimited hard limit may still be refused (macOS caps it); the soft one stays.
        limit = getrlimit(Resource::Nofile).current.or(limit);
    }
    Outcome { limit, needed }
}

/// [`raise`], logging the outcome: a warning when the limit is too low.
pub fn raise_and_log(config: &Config) {
    let outcome = raise(config);
    if outcome.is_enough() {
        tracing::debug!(limit = ?outcome.limit, needed = outcome.needed, "open-file limit");
    } else {
        tracing::warn!(
            limit = ?outcome.limit,
            needed = outcome.needed,
            "the open-file limit (RLIMIT_NOFILE, raised to its hard limit) is below what \
             max_client_connections and the pools may need; clients beyond it will be refused \
             when pgvia runs out of descriptors. Raise the hard limit (ulimit -Hn, systemd \
             LimitNOFILE) or lower max_client_connections"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raises_the_soft_limit_to_the_hard_one() {
        let config = Config::parse(
            "[general]\nauth_method = \"trust\"\nmax_client_connections = 10\n",
            std::path::Path::new("/tmp/x.toml"),
        )
        .expect("valid");
        let before = getrlimit(Resource::Nofile);
        // A lower soft limit first, so there is something to raise (a process may always
        // lower its soft limit).
        if let Some(hard) = before.maximum {
            let lowered = Rlimit { current: Some(hard.min(512)), maximum: before.maximum };
            setrlimit(Resource::Nofile, lowered).expect("lower the soft limit");
        }
        let outcome = raise(&config);
        assert_eq!(outcome.limit, before.maximum);
        assert_eq!(getrlimit(Resource::Nofile).current, before.maximum);
        assert_eq!(outcome.needed, 10 + 2000 + 16 + OVERHEAD);
        assert!(outcome.is_enough());
        let huge = Outcome { limit: Some(1024), needed: 10_000 + OVERHEAD };
        assert!(!huge.is_enough());
    }
}
