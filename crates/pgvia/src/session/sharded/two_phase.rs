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

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use shard::ShardSet;
use wire::sqlstate::SqlState;

use crate::pool::{Checkout, PatronRef};
use crate::routing::{PoolGroup, Target};
use crate::server::ServerError;
use crate::sharding::key_move::quote_literal;

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
    let mut instance: String = instance.chars().filter(char::is_ascii_alphanumeric).take(40).collect();
    if instance.is_empty() {
        // Recovery knows a gid by its instance's letters and digits: there must be some.
        instance.push_str("pgvia");
    }
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

/// (instance, run) of a pgvia transaction id: `pgvia_<letters and digits>_<digits>_<digits>`,
/// as [`next_gid`] makes them; `None` for anything else.
fn owner(gid: &str) -> Option<(&str, u64)> {
    let rest = gid.strip_prefix("pgvia_")?;
    let mut parts = rest.rsplitn(3, '_');
    let n = parts.next()?;
    let run = parts.next()?;
    let instance = parts.next()?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(n)
        || !digits(run)
        || instance.is_empty()
        || !instance.bytes().all(|b| b.is_ascii_alphanumeric())
    {
        return None;
    }
    Some((instance, run.parse().ok()?))
}

fn error_frame(code: &str, message: &str) -> Bytes {
    let mut out = BytesMut::new();
    wire::build::ErrorFields::with_code(wire::build::Severity::Error, code, message).write(&mut out);
    out.freeze()
}

fn server_error_frame(e: &ServerError) -> Bytes {
    match e {
        ServerError::Query { code, message } => error_frame(code, message),
        other => error_frame(SqlState::CONNECTION_FAILURE.code(), &other.to_string()),
    }
}

/// `PREPARE TRANSACTION`, `COMMIT PREPARED` or `ROLLBACK PREPARED` of `gid`. The gid is quoted
/// whatever it is: recovery reads gids from `pg_prepared_xacts`, where any role that can
/// prepare a transaction on a shard can put any text.
fn verb_sql(verb: Verb, gid: &str) -> String {
    format!("{} {}", verb.sql(), quote_literal(gid))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verb {
    Prepare,
    Commit,
    Rollback,
}

impl Verb {
    fn sql(self) -> &'static str {
        match self {
            Verb::Prepare => "PREPARE TRANSACTION",
            Verb::Commit => "COMMIT PREPARED",
            Verb::Rollback => "ROLLBACK PREPARED",
        }
    }
}

/// Whether a failed statement certainly did nothing: PostgreSQL answered it with an error and
/// the connection is still in step. A lost reply, a timeout or a FATAL (a backend terminated
/// while it committed still commits) leave its effect unknown.
fn certainly_not_done(e: &ServerError, conn: &crate::server::ServerConn) -> bool {
    matches!(e, ServerError::Query { .. }) && !conn.is_broken()
}

/// Transactions this process is committing now: recovery leaves them to their coordinator.
static IN_FLIGHT: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());

/// Registers a gid as in flight for as long as it lives.
struct InFlight(String);

impl InFlight {
    fn enter(gid: &str) -> InFlight {
        IN_FLIGHT.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(gid.to_owned());
        InFlight(gid.to_owned())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        IN_FLIGHT.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(&self.0);
    }
}

fn in_flight(gid: &str) -> bool {
    IN_FLIGHT.lock().unwrap_or_else(std::sync::PoisonError::into_inner).contains(gid)
}

/// Commits the transaction open on the `writers`' held servers, atomically. `groups` are the
/// shards' pools (the client's user), for servers to finish on when a held one failed. On
/// failure returns the ErrorResponse for the client: the transaction was rolled back
/// everywhere, or (08007) its outcome is not known yet and recovery finishes it the same way
/// on every shard. Success is returned only once the commit decision is durable.
pub async fn commit(
    held: &mut [Option<Checkout>],
    writers: ShardSet,
    groups: &[Arc<PoolGroup>],
    patron: &PatronRef,
    timeout: Duration,
) -> Result<(), Bytes> {
    let gid = next_gid();
    let _flight = InFlight::enter(&gid);
    let ctx = Ctx { groups, patron, gid: &gid, timeout };
    let prepare = verb_sql(Verb::Prepare, &gid);
    let mut prepared = ShardSet::EMPTY;
    // Shards whose PREPARE failed without saying whether it happened.
    let mut maybe = ShardSet::EMPTY;
    let mut failure = None;
    for shard in writers.iter() {
        let Some(c) = held[shard].as_mut() else { continue };
        match c.conn().run_internal(&[prepare.as_str()], timeout).await {
            Ok(()) => prepared.insert(shard),
            Err(e) => {
                if !certainly_not_done(&e, c.conn()) {
                    maybe.insert(shard);
                }
                failure = Some(server_error_frame(&e));
                break;
            }
        }
    }
    if let Some(error) = failure {
        // Shards not reached yet still have the transaction open.
        for shard in writers.iter().filter(|&s| !prepared.contains(s) && !maybe.contains(s)) {
            if let Some(c) = held[shard].as_mut() {
                let _ = c.conn().run_internal(&["ROLLBACK"], timeout).await;
            }
        }
        abandon(held, &ctx, prepared, maybe).await;
        return Err(error);
    }
    // The commit point: the decision row.
    let durable = match decide(held, &ctx, "commit").await {
        Logged::Done(true) => true,
        Logged::Done(false) => {
            finish(held, &ctx, prepared, Verb::Rollback).await;
            return Err(error_frame(
                "40000",
                "the cross-shard transaction was rolled back: recovery judged it abandoned",
            ));
        }
        Logged::NotDone(e) => {
            abandon(held, &ctx, prepared, ShardSet::EMPTY).await;
            return Err(not_logged(&e));
        }
        // The row may be in: ask again on another server, fixing the decision if it is not.
        Logged::Unknown(e) => match settle(&ctx).await {
            Ok(decision) if decision == "commit" => true,
            Ok(_) => {
                finish(held, &ctx, prepared, Verb::Rollback).await;
                return Err(not_logged(&e));
            }
            Err(again) => {
                tracing::warn!(gid, error = %e, again = %again, "the outcome of a cross-shard commit is unknown; recovery will finish it");
                false
            }
        },
    };
    if !durable {
        return Err(error_frame(
            "08007",
            "the outcome of the cross-shard commit is unknown: its decision could not be read back; pgvia's recovery commits or rolls it back on every shard alike",
        ));
    }
    // Told COMMIT from here on: what does not finish now, recovery finishes from the row.
    if finish(held, &ctx, prepared, Verb::Commit).await {
        forget(held, &ctx).await;
    }
    Ok(())
}

fn not_logged(e: &ServerError) -> Bytes {
    error_frame(
        SqlState::CONNECTION_FAILURE.code(),
        &format!("the cross-shard commit could not be logged, so it was rolled back: {e}"),
    )
}

/// What one commit shares with its steps.
struct Ctx<'a> {
    groups: &'a [Arc<PoolGroup>],
    patron: &'a PatronRef,
    gid: &'a str,
    timeout: Duration,
}

/// Rolls back the `prepared` shards, and the `maybe` ones whose PREPARE may still happen (its
/// reply lost: "no such gid" proves nothing there). When a prepared transaction may be left,
/// an `abort` decision first, so that recovery rolls it back at its next round.
async fn abandon(held: &mut [Option<Checkout>], ctx: &Ctx<'_>, prepared: ShardSet, maybe: ShardSet) {
    if !maybe.is_empty() {
        log_abort(held, ctx).await;
    }
    let all = prepared.union(maybe);
    if !all.is_empty() && !finish(held, ctx, all, Verb::Rollback).await && maybe.is_empty() {
        log_abort(held, ctx).await;
    }
}

async fn log_abort(held: &mut [Option<Checkout>], ctx: &Ctx<'_>) {
    if let Logged::NotDone(e) | Logged::Unknown(e) = decide(held, ctx, "abort").await {
        tracing::warn!(gid = ctx.gid, error = %e, "could not log an abort; recovery will roll it back");
    }
}

/// A server of `shard`'s pool, within the commit's timeout.
async fn fresh(ctx: &Ctx<'_>, shard: usize) -> Result<Checkout, ServerError> {
    let group = ctx.groups.get(shard).ok_or(ServerError::Desync("no such shard"))?;
    match tokio::time::timeout(ctx.timeout, group.checkout(Target::Primary, Some(ctx.patron))).await {
        Ok(Ok(c)) => Ok(c),
        Ok(Err(e)) => Err(ServerError::Io(std::io::Error::other(e.to_string()))),
        Err(_) => Err(ServerError::Timeout(ctx.timeout)),
    }
}

/// `verb` (`COMMIT PREPARED` / `ROLLBACK PREPARED`) of the gid on `shards`, on the held
/// server, else on a fresh one of the shard's pool. A gid the shard does not hold (42704) was
/// finished already (a lost reply) or never prepared. Returns whether every shard is done;
/// what is not is left to recovery, which finishes it the same way (the decision is logged).
async fn finish(held: &mut [Option<Checkout>], ctx: &Ctx<'_>, shards: ShardSet, verb: Verb) -> bool {
    let sql = verb_sql(verb, ctx.gid);
    let mut all = true;
    for shard in shards.iter() {
        let mut result = Err(ServerError::Closed);
        if let Some(c) = held.get_mut(shard).and_then(Option::as_mut).filter(|c| !c.conn_ref().is_broken()) {
            result = c.conn().run_internal(&[sql.as_str()], ctx.timeout).await;
        }
        let broken = held.get(shard).and_then(Option::as_ref).is_none_or(|c| c.conn_ref().is_broken());
        if result.is_err() && broken {
            // Closed, which frees its pool slot for the next try.
            if let Some(slot) = held.get_mut(shard) {
                *slot = None;
            }
            result = match fresh(ctx, shard).await {
                Ok(mut c) => {
                    let r = c.conn().run_internal(&[sql.as_str()], ctx.timeout).await;
                    c.give_back_idle();
                    r
                }
                Err(e) => Err(e),
            };
        }
        match result {
            Ok(()) => {}
            Err(ServerError::Query { code, .. }) if code == "42704" => {}
            Err(e) => {
                all = false;
                tracing::warn!(shard, gid = ctx.gid, error = %e, "{} failed; recovery will finish it", verb.sql());
            }
        }
    }
    all
}

/// What became of a statement on the log shard.
enum Logged<T> {
    Done(T),
    /// PostgreSQL refused it: nothing changed.
    NotDone(ServerError),
    /// Its reply was lost: it may have happened.
    Unknown(ServerError),
}

/// Runs `sql` on a server of the log shard: the held one if the transaction has it (it is
/// out of its transaction once prepared), else one taken from its pool.
async fn on_log_shard(
    held: &mut [Option<Checkout>],
    ctx: &Ctx<'_>,
    sql: &str,
) -> Logged<crate::server::Rows> {
    let held_log = held.get_mut(LOG_SHARD).and_then(Option::as_mut).filter(|c| !c.conn_ref().is_broken());
    if let Some(c) = held_log {
        return match c.conn().query_rows(sql, ctx.timeout).await {
            Ok(rows) => Logged::Done(rows),
            Err(e) if certainly_not_done(&e, c.conn()) => Logged::NotDone(e),
            Err(e) => Logged::Unknown(e),
        };
    }
    let mut c = match fresh(ctx, LOG_SHARD).await {
        Ok(c) => c,
        Err(e) => return Logged::NotDone(e),
    };
    let result = match c.conn().query_rows(sql, ctx.timeout).await {
        Ok(rows) => Logged::Done(rows),
        Err(e) if certainly_not_done(&e, c.conn()) => Logged::NotDone(e),
        Err(e) => Logged::Unknown(e),
    };
    c.give_back_idle();
    result
}

/// The decision logged for `gid`, if any.
async fn logged_decision(
    log: &mut Checkout,
    gid: &str,
    timeout: Duration,
) -> Result<Option<String>, ServerError> {
    let look = format!("SELECT decision FROM pgvia.two_phase_decisions WHERE gid = {}", quote_literal(gid));
    let rows = log.conn().query_rows(&look, timeout).await?;
    Ok(rows.into_iter().next().and_then(|r| r.into_iter().next().flatten()))
}

/// Inserts `decision` for `gid` unless one is there: `Ok(true)` when it went in.
fn decision_sql(gid: &str, decision: &str) -> String {
    format!(
        "INSERT INTO pgvia.two_phase_decisions (gid, decision) VALUES ({}, {}) ON CONFLICT (gid) DO NOTHING RETURNING decision",
        quote_literal(gid),
        quote_literal(decision)
    )
}

/// Inserts the decision for the gid; `Done(false)` when an `abort` was there first.
async fn decide(held: &mut [Option<Checkout>], ctx: &Ctx<'_>, decision: &str) -> Logged<bool> {
    match on_log_shard(held, ctx, &decision_sql(ctx.gid, decision)).await {
        Logged::Done(rows) => Logged::Done(!rows.is_empty()),
        Logged::NotDone(e) => Logged::NotDone(e),
        Logged::Unknown(e) => Logged::Unknown(e),
    }
}

/// The decision for the gid after a lost reply, on a fresh server of the log shard: an
/// `abort` goes in unless a decision is there (the lost insert, or one still running, which
/// the unique key makes this one wait for), and the row in place is the decision.
async fn settle(ctx: &Ctx<'_>) -> Result<String, ServerError> {
    let mut log = fresh(ctx, LOG_SHARD).await?;
    let abort = decision_sql(ctx.gid, "abort");
    let decided = async {
        log.conn().run_internal(&[abort.as_str()], ctx.timeout).await?;
        logged_decision(&mut log, ctx.gid, ctx.timeout).await
    }
    .await;
    log.give_back_idle();
    decided?.ok_or(ServerError::Desync("no decision row after inserting one"))
}

async fn forget(held: &mut [Option<Checkout>], ctx: &Ctx<'_>) {
    let sql = format!("DELETE FROM pgvia.two_phase_decisions WHERE gid = {}", quote_literal(ctx.gid));
    if let Logged::NotDone(e) | Logged::Unknown(e) = on_log_shard(held, ctx, &sql).await {
        tracing::warn!(gid = ctx.gid, error = %e, "could not delete a decision row; recovery will");
    }
}

/// What recovery did in one round.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Recovered {
    pub committed: usize,
    pub rolled_back: usize,
    /// In flight at another live instance: left alone.
    pub left: usize,
    /// Could not be finished this round (tried again at the next).
    pub failed: usize,
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
/// `groups` are the shards' pools of the recovery user. One transaction that cannot be
/// finished (another role's, say) is logged and counted, and the others are still finished.
pub async fn recover(groups: &[Arc<PoolGroup>], timeout: Duration) -> Result<Recovered, ServerError> {
    let io = |e: crate::pool::PoolError| ServerError::Io(std::io::Error::other(e.to_string()));
    let Some(log_group) = groups.get(LOG_SHARD) else { return Ok(Recovered::default()) };
    let mut log = log_group.checkout(Target::Primary, None).await.map_err(io)?;
    log.conn().run_internal(SETUP, timeout).await?;
    let mut done = Recovered::default();
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
            // Only ids pgvia makes: anything else on a shard is some other role's business.
            let Some((instance, run)) = owner(&gid) else { continue };
            seen.push(gid.clone());
            match recover_one(&mut own, &mut log, &gid, (instance, run), age, timeout).await {
                Ok(Some(true)) => done.committed += 1,
                Ok(Some(false)) => done.rolled_back += 1,
                Ok(None) => done.left += 1,
                Err(e) => {
                    tracing::warn!(shard = i, gid, error = %e, "could not finish an in-doubt cross-shard transaction");
                    done.failed += 1;
                    if log.conn_ref().is_broken() || own.as_ref().is_some_and(|c| c.conn_ref().is_broken()) {
                        return Err(e);
                    }
                }
            }
        }
        if let Some(c) = own {
            c.give_back_idle();
        }
    }
    // Decisions whose transactions are finished on every shard are kept a while for slow
    // coordinators, then dropped; one still prepared somewhere is kept.
    let still: Vec<String> = seen.iter().map(|g| quote_literal(g)).collect();
    let cleanup = format!(
        "DELETE FROM pgvia.two_phase_decisions WHERE decided_at < now() - interval '10 minutes' AND gid <> ALL (ARRAY[{}]::text[])",
        still.join(",")
    );
    log.conn().run_internal(&[cleanup.as_str()], timeout).await?;
    log.give_back_idle();
    Ok(done)
}

/// Finishes the prepared transaction `gid` of shard `own` (the log shard when `None`):
/// `Some(committed)`, or `None` when it is left to its live coordinator.
async fn recover_one(
    own: &mut Option<Checkout>,
    log: &mut Checkout,
    gid: &str,
    (instance, run): (&str, u64),
    age: f64,
    timeout: Duration,
) -> Result<Option<bool>, ServerError> {
    let me = identity();
    let mut decision = logged_decision(log, gid, timeout).await?;
    if decision.is_none() {
        // This process's own, once its commit has returned, has no coordinator left.
        let orphan_of_mine = instance == me.instance && (run != me.run || !in_flight(gid));
        if !orphan_of_mine && age < ABANDONED_AFTER.as_secs_f64() {
            return Ok(None);
        }
        log.conn().run_internal(&[decision_sql(gid, "abort").as_str()], timeout).await?;
        decision = logged_decision(log, gid, timeout).await?;
    }
    let commit = decision.as_deref() == Some("commit");
    let verb = if commit { Verb::Commit } else { Verb::Rollback };
    shard_conn(own, log).conn().run_internal(&[verb_sql(verb, gid).as_str()], timeout).await?;
    tracing::info!(gid, verb = verb.sql(), "recovered an in-doubt cross-shard transaction");
    Ok(Some(commit))
}

#[cfg(test)]
mod tests {
    use super::{owner, verb_sql, Verb};

    #[test]
    fn only_gids_of_pgvias_form_have_an_owner() {
        assert_eq!(owner("pgvia_host5432_1764000000000_17"), Some(("host5432", 1_764_000_000_000)));
        for gid in [
            "pgvia_x_1_1'; CREATE TABLE pgvia.pwned (); --",
            "pgvia_x_1_1 ",
            "pgvia_x y_1_1",
            "pgvia__1_1",
            "pgvia_x_1_",
            "pgvia_x__1",
            "pgvia_x_-1_1",
            "other_x_1_1",
        ] {
            assert_eq!(owner(gid), None, "{gid:?}");
        }
    }

    #[test]
    fn a_gid_is_one_string_literal_whatever_it_holds() {
        assert_eq!(verb_sql(Verb::Commit, "pgvia_a_1_2"), "COMMIT PREPARED E'pgvia_a_1_2'");
        assert_eq!(
            verb_sql(Verb::Rollback, r"x'; DROP TABLE t; --\"),
            r"ROLLBACK PREPARED E'x''; DROP TABLE t; --\\'"
        );
    }
}
