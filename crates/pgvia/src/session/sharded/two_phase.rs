//! Two-phase commit across shards, with a decision log kept in PostgreSQL itself so that
//! several pgvia instances in front of the same shards, and a pgvia restarted after a crash,
//! finish every transaction the same way.
//!
//! A commit: `PREPARE TRANSACTION` on every writing shard; then the decision, one row
//! inserted into `pgvia.two_phase_decisions` on the log shard (shard 0), which is the commit
//! point; then `COMMIT PREPARED` everywhere and the row deleted. Any failure before the row is
//! in rolls every prepared shard back.
//!
//! Recovery (at start and every [`RECOVERY_INTERVAL`]) looks at each shard's
//! `pg_prepared_xacts` for pgvia's transaction ids (`pgvia_<instance>_<run>_<n>`): one with a
//! commit row is committed; one without is rolled back if this instance made it in an
//! earlier run (it crashed) or it has been prepared longer than [`ABANDONED_AFTER`]. The
//! rollback first inserts an `abort` row, so a coordinator that was only slow cannot commit
//! it afterwards: its own insert meets the row and it rolls back too.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use shard::ShardSet;
use wire::sqlstate::SqlState;

use crate::pool::{Checkout, PatronRef};
use crate::routing::{PoolGroup, Target};

/// The shard that holds the decision log.
pub const LOG_SHARD: usize = 0;
pub const RECOVERY_INTERVAL: Duration = Duration::from_secs(30);
/// A prepared transaction of another instance is taken as abandoned after this long.
pub const ABANDONED_AFTER: Duration = Duration::from_secs(300);

const SETUP: &[&str] = &[
    "CREATE SCHEMA IF NOT EXISTS pgvia",
    "CREATE TABLE IF NOT EXISTS pgvia.two_phase_decisions (gid text PRIMARY KEY, decision text NOT NULL CHECK (decision IN ('commit', 'abort')), decided_at timestamptz NOT NULL DEFAULT now())",
];

struct Identity {
    /// Letters and digits only, so a transaction id needs no quoting.
    instance: String,
    /// This run of the process (milliseconds since the epoch at start).
    run: u64,
    next: AtomicU64,
}

static IDENTITY: OnceLock<Identity> = OnceLock::new();

/// Names this process in its transaction ids: `instance` (the configured `instance_id`).
pub fn init(instance: &str) {
    let instance: String = instance.chars().filter(char::is_ascii_alphanumeric).take(40).collect();
    let run = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let _ = IDENTITY.set(Identity { instance, run, next: AtomicU64::new(1) });
}

fn identity() -> &'static Identity {
    IDENTITY.get_or_init(|| Identity { instance: "pgvia".into(), run: 0, next: AtomicU64::new(1) })
}

fn next_gid() -> String {
    let id = identity();
    format!("pgvia_{}_{}_{}", id.instance, id.run, id.next.fetch_add(1, Ordering::Relaxed))
}

/// (instance, run) of a pgvia transaction id.
fn owner(gid: &str) -> Option<(&str, u64)> {
    let rest = gid.strip_prefix("pgvia_")?;
    let mut parts = rest.rsplitn(3, '_');
    let _n = parts.next()?;
    let run = parts.next()?.parse().ok()?;
    let instance = parts.next()?;
    Some((instance, run))
}

fn error_frame(code: &str, message: &str) -> Bytes {
    let mut out = BytesMut::new();
    wire::build::ErrorFields::with_code(wire::build::Severity::Error, code, message).write(&mut out);
    out.freeze()
}

fn server_error_frame(e: &crate::server::ServerError) -> Bytes {
    match e {
        crate::server::ServerError::Query { code, message } => error_frame(code, message),
        other => error_frame(SqlState::CONNECTION_FAILURE.code(), &other.to_string()),
    }
}

/// Commits the transaction open on the `writers`' held servers, atomically. On failure
/// returns the ErrorResponse for the client; the transaction is then rolled back everywhere.
pub async fn commit(
    held: &mut [Option<Checkout>],
    writers: ShardSet,
    log_group: &Arc<PoolGroup>,
    patron: &PatronRef,
    timeout: Duration,
) -> Result<(), Bytes> {
    let gid = next_gid();
    let prepare = format!("PREPARE TRANSACTION '{gid}'");
    let mut prepared = ShardSet::EMPTY;
    let mut failure = None;
    for shard in writers.iter() {
        let Some(c) = held[shard].as_mut() else { continue };
        match c.conn().run_internal(&[prepare.as_str()], timeout).await {
            Ok(()) => prepared.insert(shard),
            Err(e) => {
                failure = Some(server_error_frame(&e));
                break;
            }
        }
    }
    if let Some(error) = failure {
        // Shards not reached yet still have the transaction open.
        for shard in writers.iter().filter(|&s| !prepared.contains(s)) {
            if let Some(c) = held[shard].as_mut() {
                let _ = c.conn().run_internal(&["ROLLBACK"], timeout).await;
            }
        }
        finish(held, prepared, &gid, "ROLLBACK PREPARED", timeout).await;
        return Err(error);
    }
    // The commit point: the decision row.
    let decided = decide(held, log_group, patron, &gid, "commit", timeout).await;
    match decided {
        Ok(true) => {
            finish(held, prepared, &gid, "COMMIT PREPARED", timeout).await;
            forget(held, log_group, patron, &gid, timeout).await;
            Ok(())
        }
        Ok(false) => {
            finish(held, prepared, &gid, "ROLLBACK PREPARED", timeout).await;
            Err(error_frame(
                "40000",
                "the cross-shard transaction was rolled back: recovery judged it abandoned",
            ))
        }
        Err(e) => {
            finish(held, prepared, &gid, "ROLLBACK PREPARED", timeout).await;
            Err(error_frame(
                SqlState::CONNECTION_FAILURE.code(),
                &format!("the cross-shard commit could not be logged, so it was rolled back: {e}"),
            ))
        }
    }
}

/// `COMMIT PREPARED` / `ROLLBACK PREPARED` of `gid` on the held servers of `shards`. A
/// failure is left to recovery, which finishes it the same way (the decision is logged).
async fn finish(held: &mut [Option<Checkout>], shards: ShardSet, gid: &str, verb: &str, timeout: Duration) {
    let sql = format!("{verb} '{gid}'");
    for shard in shards.iter() {
        if let Some(c) = held[shard].as_mut() {
            if let Err(e) = c.conn().run_internal(&[sql.as_str()], timeout).await {
                tracing::warn!(shard, gid, error = %e, "{verb} failed; recovery will finish it");
            }
        }
    }
}

/// Runs `f` on a server of the log shard: the held one if the transaction has it (it is
/// out of its transaction once prepared), else one taken from its pool.
async fn on_log_shard<T>(
    held: &mut [Option<Checkout>],
    log_group: &Arc<PoolGroup>,
    patron: &PatronRef,
    sql: &str,
    timeout: Duration,
    f: impl FnOnce(crate::server::Rows) -> T,
) -> Result<T, crate::server::ServerError> {
    if let Some(c) = held.get_mut(LOG_SHARD).and_then(Option::as_mut) {
        return c.conn().query_rows(sql, timeout).await.map(f);
    }
    let mut c = log_group
        .checkout(Target::Primary, Some(patron))
        .await
        .map_err(|e| crate::server::ServerError::Io(std::io::Error::other(e.to_string())))?;
    let rows = c.conn().query_rows(sql, timeout).await;
    c.give_back_idle();
    rows.map(f)
}

/// The decision logged for `gid`, if any.
async fn logged_decision(
    log: &mut Checkout,
    gid: &str,
    timeout: Duration,
) -> Result<Option<String>, crate::server::ServerError> {
    let look = format!("SELECT decision FROM pgvia.two_phase_decisions WHERE gid = '{gid}'");
    let rows = log.conn().query_rows(&look, timeout).await?;
    Ok(rows.into_iter().next().and_then(|r| r.into_iter().next().flatten()))
}

/// Inserts the decision for `gid`; `Ok(false)` when an `abort` was there first.
async fn decide(
    held: &mut [Option<Checkout>],
    log_group: &Arc<PoolGroup>,
    patron: &PatronRef,
    gid: &str,
    decision: &str,
    timeout: Duration,
) -> Result<bool, crate::server::ServerError> {
    let sql = format!(
        "INSERT INTO pgvia.two_phase_decisions (gid, decision) VALUES ('{gid}', '{decision}') ON CONFLICT (gid) DO NOTHING RETURNING decision"
    );
    on_log_shard(held, log_group, patron, &sql, timeout, |rows| !rows.is_empty()).await
}

async fn forget(
    held: &mut [Option<Checkout>],
    log_group: &Arc<PoolGroup>,
    patron: &PatronRef,
    gid: &str,
    timeout: Duration,
) {
    let sql = format!("DELETE FROM pgvia.two_phase_decisions WHERE gid = '{gid}'");
    if let Err(e) = on_log_shard(held, log_group, patron, &sql, timeout, |_| ()).await {
        tracing::warn!(gid, error = %e, "could not delete a decision row; recovery will");
    }
}

/// What recovery did in one round.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Recovered {
    pub committed: usize,
    pub rolled_back: usize,
    /// In flight at another live instance: left alone.
    pub left: usize,
}

/// The server recovery reads shard `own`'s prepared transactions on: its own checkout, or the
/// log's for the log shard.
fn shard_conn<'a>(own: &'a mut Option<Checkout>, log: &'a mut Checkout) -> &'a mut Checkout {
    match own {
        Some(c) => c,
        None => log,
    }
}

/// Creates the decision log on the log shard if needed, then finishes every in-doubt
/// transaction of pgvia's on every shard that this instance owns or that was abandoned.
/// `groups` are the shards' pools of the recovery user.
pub async fn recover(
    groups: &[Arc<PoolGroup>],
    timeout: Duration,
) -> Result<Recovered, crate::server::ServerError> {
    let io = |e: crate::pool::PoolError| crate::server::ServerError::Io(std::io::Error::other(e.to_string()));
    let Some(log_group) = groups.get(LOG_SHARD) else { return Ok(Recovered::default()) };
    let mut log = log_group.checkout(Target::Primary, None).await.map_err(io)?;
    log.conn().run_internal(SETUP, timeout).await?;
    let mut done = Recovered::default();
    let me = identity();
    let mut seen: Vec<String> = Vec::new();
    for (i, group) in groups.iter().enumerate() {
        // The log shard's server is the one already held: a second checkout from that pool
        // would wait for itself when the pool holds one server.
        let mut own = match i {
            LOG_SHARD => None,
            _ => Some(group.checkout(Target::Primary, None).await.map_err(io)?),
        };
        let rows = shard_conn(&mut own, &mut log)
            .conn()
            .query_rows(
                "SELECT gid, extract(epoch FROM now() - prepared)::float8 FROM pg_catalog.pg_prepared_xacts WHERE gid LIKE 'pgvia\\_%' AND database = current_database()",
                timeout,
            )
            .await?;
        for row in rows {
            let (Some(gid), age) = (row.first().cloned().flatten(), row.get(1).cloned().flatten()) else {
                continue;
            };
            let age: f64 = age.and_then(|a| a.parse().ok()).unwrap_or(0.0);
            let Some((instance, run)) = owner(&gid) else { continue };
            seen.push(gid.clone());
            let mut decision = logged_decision(&mut log, &gid, timeout).await?;
            if decision.is_none() {
                let earlier_run_of_mine = instance == me.instance && run != me.run;
                if !earlier_run_of_mine && age < ABANDONED_AFTER.as_secs_f64() {
                    done.left += 1;
                    continue;
                }
                let abort = format!(
                    "INSERT INTO pgvia.two_phase_decisions (gid, decision) VALUES ('{gid}', 'abort') ON CONFLICT (gid) DO NOTHING"
                );
                log.conn().run_internal(&[abort.as_str()], timeout).await?;
                decision = logged_decision(&mut log, &gid, timeout).await?;
            }
            let commit = decision.as_deref() == Some("commit");
            let verb = if commit { "COMMIT PREPARED" } else { "ROLLBACK PREPARED" };
            shard_conn(&mut own, &mut log)
                .conn()
                .run_internal(&[format!("{verb} '{gid}'").as_str()], timeout)
                .await?;
            if commit {
                done.committed += 1;
            } else {
                done.rolled_back += 1;
            }
            tracing::info!(gid, verb, "recovered an in-doubt cross-shard transaction");
        }
        if let Some(c) = own {
            c.give_back_idle();
        }
    }
    // Decisions whose transactions are finished on every shard are kept a while for slow
    // coordinators, then dropped; one still prepared somewhere is kept.
    let still: Vec<String> = seen.iter().map(|g| format!("'{g}'")).collect();
    let cleanup = format!(
        "DELETE FROM pgvia.two_phase_decisions WHERE decided_at < now() - interval '10 minutes' AND gid <> ALL (ARRAY[{}]::text[])",
        still.join(",")
    );
    log.conn().run_internal(&[cleanup.as_str()], timeout).await?;
    log.give_back_idle();
    Ok(done)
}
