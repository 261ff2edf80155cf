//! The health checker: one task per database with several servers (or discovered roles).
//!
//! Every `health_check_interval` (or at once when a session could not reach a server) it
//! asks every server, concurrently and each within `health_check_timeout`, whether it is in
//! recovery and where its WAL is, on a connection it keeps open between rounds. From the
//! answers it decides the primary (for `role = auto`: the server not in recovery; the current
//! primary keeps the role while it stays fit, so an old primary that comes back after a
//! failover does not take writes back), each replica's lag behind the primary, and who is in
//! rotation.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use thiserror::Error;
use tokio::task::JoinSet;

use super::{HostRole, HostState, Hosts, NO_PRIMARY};
use crate::config::ServerRole;
use crate::server::{ServerAddress, ServerConn, ServerError};

/// Role, WAL position (current on a primary, replayed on a standby, as bytes from 0/0), and
/// the age of the last replayed transaction in milliseconds (0 on a primary).
const STATUS_QUERY: &str = "SELECT pg_catalog.pg_is_in_recovery(), \
     COALESCE((CASE WHEN pg_catalog.pg_is_in_recovery() THEN pg_catalog.pg_last_wal_replay_lsn() \
     ELSE pg_catalog.pg_current_wal_lsn() END - '0/0'::pg_lsn)::bigint, 0), \
     COALESCE((EXTRACT(EPOCH FROM now() - pg_catalog.pg_last_xact_replay_timestamp()) * 1000)::bigint, 0)";

#[derive(Debug, Error)]
enum CheckError {
    #[error("{0}")]
    Server(#[from] ServerError),
    #[error("health check timed out after {0:?}")]
    Timeout(Duration),
    #[error("unexpected reply to the status query")]
    BadReply,
}

impl CheckError {
    /// The server is up but will not let the check user in (wrong password, no such role or
    /// database): a configuration problem, not a reason to take the server out of rotation.
    fn is_login_refused(&self) -> bool {
        match self {
            CheckError::Server(ServerError::Auth(_)) => true,
            CheckError::Server(ServerError::Rejected { code, .. }) => {
                code.starts_with("28") || code == "3D000"
            }
            _ => false,
        }
    }
}

/// What one server said.
#[derive(Debug, Clone, Copy)]
struct Status {
    in_recovery: bool,
    lsn: u64,
    replay_age_ms: u64,
}

pub(super) fn spawn(hosts: Weak<Hosts>, addr: ServerAddress, max_frame: usize) {
    tokio::spawn(async move {
        let mut conns: Vec<Option<ServerConn>> = Vec::new();
        loop {
            let Some(h) = hosts.upgrade() else { return };
            if h.is_retired() {
                return;
            }
            conns.resize_with(h.len(), || None);
            round(&h, &mut conns, &addr, max_frame).await;
            h.changed.notify_waiters();
            let interval = h.settings.health_check_interval;
            tokio::select! {
                _ = h.wake.notified() => {}
                _ = tokio::time::sleep(interval) => {}
            }
        }
    });
}

/// One check of every server, then the verdicts.
async fn round(h: &Arc<Hosts>, conns: &mut [Option<ServerConn>], addr: &ServerAddress, max_frame: usize) {
    let timeout = h.settings.health_check_timeout;
    let mut checks = JoinSet::new();
    for (i, host) in h.all().iter().enumerate() {
        let conn = conns[i].take();
        let addr = ServerAddress { host: host.entry.host.clone(), port: host.entry.port, ..addr.clone() };
        let extra = h.settings.health_check_query.clone();
        checks.spawn(async move {
            let result = tokio::time::timeout(timeout, check(conn, &addr, max_frame, timeout, &extra))
                .await
                .unwrap_or(Err(CheckError::Timeout(timeout)));
            (i, result)
        });
    }
    let mut statuses: Vec<Option<Result<Status, CheckError>>> = (0..h.len()).map(|_| None).collect();
    while let Some(joined) = checks.join_next().await {
        let Ok((i, result)) = joined else { continue };
        statuses[i] = Some(result.map(|(status, conn)| {
            conns[i] = Some(conn);
            status
        }));
    }
    judge(h, &statuses);
}

async fn check(
    conn: Option<ServerConn>,
    addr: &ServerAddress,
    max_frame: usize,
    timeout: Duration,
    extra: &str,
) -> Result<(Status, ServerConn), CheckError> {
    let mut conn = match conn.and_then(|mut c| c.is_alive().is_ok().then_some(c)) {
        Some(c) => c,
        None => ServerConn::connect(addr, timeout, max_frame).await?,
    };
    let rows = conn.query_rows(STATUS_QUERY, timeout).await?;
    let status = match rows.first().map(Vec::as_slice) {
        Some([Some(recovery), Some(lsn), Some(age)]) => Status {
            in_recovery: recovery == "t",
            lsn: lsn.parse().map_err(|_| CheckError::BadReply)?,
            replay_age_ms: age.parse::<i64>().map_err(|_| CheckError::BadReply)?.max(0) as u64,
        },
        _ => return Err(CheckError::BadReply),
    };
    if !extra.is_empty() {
        conn.run_internal(&[extra], timeout).await?;
    }
    Ok((status, conn))
}

/// A replica's lag in bytes (behind the primary now) and in milliseconds. The replica's own
/// clock only says how old the last transaction it replayed is, which overstates the lag of a
/// replica a moment behind after a quiet spell (writes 1.5 s apart make it look 1.5 s behind
/// while it replays the newest one). So the age counts only when the replica has not replayed
/// even what the primary had written at the previous round: then it is behind by at least a
/// round, and the age of its last replayed transaction is the best bound it can give.
fn replica_lag(s: &Status, primary_lsn: u64, primary_lsn_before: u64) -> (u64, u64) {
    let bytes = primary_lsn.saturating_sub(s.lsn);
    let ms = if bytes == 0 || s.lsn >= primary_lsn_before { 0 } else { s.replay_age_ms };
    (bytes, ms)
}

/// Applies a round's answers: roles, the primary, lag, and who is in rotation.
fn judge(h: &Hosts, statuses: &[Option<Result<Status, CheckError>>]) {
    let now = h.now_ms();
    let role_of = |i: usize, s: &Status| match h.all()[i].entry.role {
        ServerRole::Auto if s.in_recovery => HostRole::Replica,
        ServerRole::Auto => HostRole::Primary,
        configured => HostRole::configured(configured),
    };
    let fit_primary = |i: usize| match &statuses[i] {
        Some(Ok(s)) => role_of(i, s) == HostRole::Primary,
        // Up, but the check cannot log in: a configured primary is trusted as configured.
        Some(Err(e)) if e.is_login_refused() => h.all()[i].entry.role == ServerRole::Primary,
        _ => false,
    };
    let current = h.primary.load(Ordering::Acquire);
    let primary = if current != NO_PRIMARY && current < statuses.len() && fit_primary(current) {
        current
    } else {
        (0..statuses.len()).find(|&i| fit_primary(i)).unwrap_or(NO_PRIMARY)
    };
    let primary_lsn = match statuses.get(primary) {
        Some(Some(Ok(s))) => Some(s.lsn),
        _ => None,
    };
    let primary_lsn_before = match primary_lsn {
        Some(lsn) => h.primary_lsn_before.swap(lsn, Ordering::Relaxed),
        None => h.primary_lsn_before.load(Ordering::Relaxed),
    };
    for (i, (host, status)) in h.all().iter().zip(statuses).enumerate() {
        let before = host.state();
        let after = match status {
            None => continue,
            Some(Err(e)) if e.is_login_refused() => {
                host.set_error(&e.to_string());
                if before != HostState::Unknown {
                    tracing::error!(database = %h.database, server = %host.label(), error = %e, "health checks cannot log in (health_check_user); the server's role and lag are unknown");
                }
                HostState::Unknown
            }
            Some(Err(e)) => {
                host.banned_until.fetch_max(now + h.settings.ban_time.as_millis() as u64, Ordering::AcqRel);
                host.set_error(&e.to_string());
                if before != HostState::Banned {
                    tracing::warn!(database = %h.database, server = %host.label(), error = %e, "health check failed; server taken out of rotation");
                }
                HostState::Banned
            }
            Some(Ok(s)) => {
                let role = if i == primary { HostRole::Primary } else { role_of(i, s) };
                if role == HostRole::Primary && i != primary {
                    // A second server out of recovery (an old primary back after a failover)
                    // takes nothing until the current primary is gone.
                    host.role.store(HostRole::Unknown as u8, Ordering::Release);
                } else {
                    host.role.store(role as u8, Ordering::Release);
                }
                let (lag_bytes, lag_ms) = match (role, primary_lsn) {
                    (HostRole::Replica, Some(p)) => replica_lag(s, p, primary_lsn_before),
                    _ => (0, 0),
                };
                host.lag_bytes.store(lag_bytes, Ordering::Relaxed);
                host.lag_ms.store(lag_ms, Ordering::Relaxed);
                let limits = &h.settings;
                let lagging = role == HostRole::Replica
                    && ((limits.max_replica_lag_bytes > 0 && lag_bytes > limits.max_replica_lag_bytes)
                        || (!limits.max_replica_lag.is_zero()
                            && lag_ms > limits.max_replica_lag.as_millis() as u64));
                // A ban keeps a replica out for its whole time; the primary has no stand-in,
                // so a passing check brings it straight back.
                if host.banned_until.load(Ordering::Acquire) > now && i != primary {
                    HostState::Banned
                } else if lagging {
                    if before != HostState::Lagging {
                        tracing::warn!(database = %h.database, server = %host.label(), lag_bytes, lag_ms, "replica lags too far behind; out of rotation until it catches up");
                    }
                    HostState::Lagging
                } else {
                    if matches!(before, HostState::Banned | HostState::Lagging) {
                        tracing::info!(database = %h.database, server = %host.label(), role = role.as_str(), "server back in rotation");
                    }
                    HostState::Healthy
                }
            }
        };
        host.state.store(after as u8, Ordering::Release);
    }
    if primary != current {
        match h.all().get(primary) {
            Some(host) => {
                tracing::info!(database = %h.database, server = %host.label(), "primary is now this server")
            }
            None => tracing::warn!(database = %h.database, "no primary: writes wait until one is found"),
        }
    }
    h.primary.store(primary, Ordering::Release);
}

#[cfg(test)]
mod tests {
    use super::{replica_lag, Status};

    fn replica(lsn: u64, replay_age_ms: u64) -> Status {
        Status { in_recovery: true, lsn, replay_age_ms }
    }

    #[test]
    fn a_replica_a_moment_behind_a_fresh_commit_is_not_lagging_in_time() {
        // It replayed everything the primary had one round ago; its last replayed commit is old
        // only because the primary was quiet.
        assert_eq!(replica_lag(&replica(150, 1500), 200, 150), (50, 0));
    }

    #[test]
    fn a_replica_behind_the_previous_round_reports_its_replay_age() {
        assert_eq!(replica_lag(&replica(100, 2300), 200, 150), (100, 2300));
    }

    #[test]
    fn a_caught_up_replica_has_no_lag() {
        assert_eq!(replica_lag(&replica(200, 9000), 200, 150), (0, 0));
    }
}
