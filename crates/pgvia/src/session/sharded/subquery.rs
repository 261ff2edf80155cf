//! CTEs and uncorrelated subqueries over sharded tables, computed first: a cross-shard
//! SELECT the merge planner refuses because a CTE or a subquery of its WHERE would run per
//! shard (`WITH c AS (SELECT g, count(*) FROM t GROUP BY g) ...`, `WHERE x > (SELECT avg(x)
//! FROM t)`) has each of them run alone across the shards through the merge, in the order
//! `merge::ComputeFirst` gives, its result substituted as a constant of its type, and is
//! planned again. Their rows are held back from the client. A subquery that cannot run
//! alone (it refers to the outer query) leaves the original refusal.

use bytes::BytesMut;
use shard::{ShardId, ShardSet};
use wire::backend::BackendMessage;

use super::fanout::{self, Combine};
use super::io::Payload;
use super::{ShardedSession, Tx};
use crate::sharding;

/// Most bytes of a subquery's merged reply held while it is computed: past it the reply
/// is dropped as it comes and the query refused (the literals are bounded tighter anyway).
const HELD_LIMIT: usize = 4 * merge::MAX_SUBSTITUTED_BYTES;

/// The setting that makes a server print floats exactly (shortest round-trip digits).
const EXACT_FLOATS: &str = "extra_float_digits";

impl ShardedSession<'_> {
    /// The plan of `text` with its CTEs and WHERE subqueries over sharded tables computed
    /// across `targets` first, or the error for the client (the refusal when nothing can be
    /// computed first).
    pub(super) async fn compute_first(
        &mut self,
        text: &str,
        targets: ShardSet,
    ) -> Result<merge::MergePlan, (String, String)> {
        let placement = sharding::merge_placement(&self.rules);
        let mut first = merge::ComputeFirst::new(text, &placement);
        loop {
            let step = match first.step() {
                Ok(s) => s,
                Err(e) => return self.failed_after_inner(e).await,
            };
            match step {
                merge::Step::Planned(plan) => return Ok(plan),
                merge::Step::Run(sql) => {
                    let result = self.run_inner(&sql, targets).await;
                    if let Err(e) = first.answer(result) {
                        return self.failed_after_inner(e).await;
                    }
                }
            }
        }
    }

    async fn failed_after_inner(&mut self, e: merge::Failure) -> Result<merge::MergePlan, (String, String)> {
        self.give_back_if_idle().await;
        Err(e)
    }

    /// Servers a subquery took outside a transaction go back when the query will not run.
    pub(super) async fn give_back_if_idle(&mut self) {
        if matches!(self.tx, Tx::Idle) {
            self.give_back_all().await;
        }
    }

    /// Runs `sql` on `targets` through the merge; its replies are held, read and taken out
    /// of the client's buffer. Errors as (SQLSTATE, message).
    async fn run_inner(&mut self, sql: &str, targets: ShardSet) -> Result<merge::Computed, (String, String)> {
        let placement = sharding::merge_placement(&self.rules);
        let plan = merge::MergePlan::for_select_placed(sql, &placement)
            .map_err(|e| (e.sqlstate().to_owned(), e.to_string()))?;
        let text_order = self.text_order(targets.first().unwrap_or(0)).await;
        let merger = {
            let config = self.app.config();
            let budget = config.limits.merge_memory_budget as usize;
            let mut m = merge::Merger::new(
                &plan,
                targets.len(),
                merge::MergeOptions { memory_budget: budget, text_order },
            );
            if let Some(store) = self.app.spill.store(&config.limits) {
                m.set_spill(Box::new(store));
            }
            m
        };
        let combine = Combine::Merge(Box::new(fanout::Merge::new(merger, targets.len(), false)));
        match self.take_servers(targets, false).await {
            Ok(true) => {}
            Ok(false) => return Err(("57014".to_owned(), crate::session::local::CANCELLED.to_owned())),
            Err((shard, e)) => return Err(("08006".to_owned(), format!("cannot reach shard {shard}: {e}"))),
        }
        // Its floats become literals: printed exactly whatever the client's setting.
        let changed = self.exact_floats(targets).await;
        // A cancel while the subquery runs reaches its shards, and fails the query (57014).
        self.aim_cancels(targets);
        let mut query = BytesMut::new();
        wire::build::query(&mut query, plan.shard_sql());
        let mark = self.to_client.len();
        let sent = match self.launch(targets, Payload::Same(&query), combine, &[], false).await {
            Ok(mut flight) => {
                flight.hold = true;
                flight.held_limit = Some(HELD_LIMIT);
                match self.pump(&mut flight, false).await {
                    Ok(()) => flight.outcome().map(|o| (o, flight.overflowed)),
                    Err(e) => Err(e),
                }
            }
            Err(e) => Err(e),
        };
        let held = self.to_client.split_off(mark);
        self.restore_floats(changed).await;
        let (outcome, overflowed) = sent.map_err(|e| ("08006".to_owned(), format!("a shard failed: {e}")))?;
        self.note_outcome(targets, false, &outcome);
        if overflowed {
            return Err((
                "0A000".to_owned(),
                format!(
                    "cross-shard query not supported: a subquery computed first whose result is more than {HELD_LIMIT} bytes (at most {} rows, {} bytes of literals are substituted)",
                    merge::MAX_SUBSTITUTED_ROWS,
                    merge::MAX_SUBSTITUTED_BYTES
                ),
            ));
        }
        read_result(&held)
    }
}

impl ShardedSession<'_> {
    /// Sets `extra_float_digits` to 1 on the servers of `targets` where it is below 1, so
    /// their float output is exact (shortest round-trip digits, PostgreSQL 12+); returns the
    /// servers changed with their values before. A server where this fails is left as it
    /// is (its query fails the same way next).
    async fn exact_floats(&mut self, targets: ShardSet) -> Vec<(ShardId, i32)> {
        let timeout = self.app.config().general.server_reset_timeout;
        let sql = format!(
            "SELECT current_setting('{EXACT_FLOATS}'), CASE WHEN current_setting('{EXACT_FLOATS}')::int4 < 1 THEN set_config('{EXACT_FLOATS}', '1', false) END"
        );
        let mut changed = Vec::new();
        for shard in targets.iter() {
            let Some(c) = self.held[shard].as_mut() else { continue };
            let Ok(rows) = c.conn().query_rows(&sql, timeout).await else { continue };
            if let Some([Some(old), Some(_)]) = rows.into_iter().next().as_deref() {
                if let Ok(old) = old.parse::<i32>() {
                    changed.push((shard, old));
                }
            }
        }
        changed
    }

    /// Puts back what [`Self::exact_floats`] changed. In a transaction that failed meanwhile
    /// this fails too, and the transaction's rollback undoes the change instead.
    async fn restore_floats(&mut self, changed: Vec<(ShardId, i32)>) {
        let timeout = self.app.config().general.server_reset_timeout;
        for (shard, old) in changed {
            let Some(c) = self.held[shard].as_mut() else { continue };
            let sql = format!("SELECT set_config('{EXACT_FLOATS}', '{old}', false)");
            if let Err(e) = c.conn().query_rows(&sql, timeout).await {
                tracing::debug!(shard, error = %e, "extra_float_digits not restored; the transaction's end will");
            }
        }
    }
}

/// The columns and rows of a held merged reply, or its error.
fn read_result(mut buf: &[u8]) -> Result<merge::Computed, (String, String)> {
    let bad = || ("XX000".to_owned(), "malformed merged reply".to_owned());
    let (mut columns, mut rows) = (Vec::new(), Vec::new());
    while buf.len() >= 5 {
        let len = u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]) as usize;
        let (tag, body) = (buf[0], buf.get(5..1 + len).ok_or_else(bad)?);
        match BackendMessage::parse_body(tag, body).map_err(|_| bad())? {
            BackendMessage::RowDescription(rd) => {
                for c in rd.columns() {
                    let c = c.map_err(|_| bad())?;
                    columns.push((c.name.to_owned(), c.type_oid, c.type_modifier));
                }
            }
            BackendMessage::DataRow(dr) => {
                let mut row = Vec::with_capacity(dr.len());
                for v in dr.values() {
                    let v = v.map_err(|_| bad())?;
                    // Another client_encoding's bytes are not rewritten into a literal: a
                    // lossy reading would compare differently.
                    let text = |b: &[u8]| {
                        String::from_utf8(b.to_vec()).map_err(|_| {
                            ("0A000".to_owned(), "cross-shard query not supported: a subquery computed first whose result is not UTF-8".to_owned())
                        })
                    };
                    row.push(v.map(text).transpose()?);
                }
                rows.push(row);
            }
            BackendMessage::ErrorResponse(f) => {
                return Err((
                    f.code().unwrap_or("XX000").to_owned(),
                    f.message().unwrap_or_default().to_owned(),
                ));
            }
            _ => {}
        }
        buf = &buf[1 + len..];
    }
    Ok(merge::Computed { columns, rows })
}
