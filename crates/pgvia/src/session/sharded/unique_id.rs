//! Globally unique ids made on the shards: `pgvia.unique_id()`, a SQL function pgvia installs
//! on every shard of a sharded database, usable as a column default. No round trip to a
//! coordinator: each shard makes its own, and the shard number inside the id keeps them apart.
//!
//! An id is a positive `bigint`: milliseconds since [`EPOCH_MS`] (41 bits) | the shard number
//! (10 bits) | a per-shard sequence (12 bits). The shard's state is one PostgreSQL sequence,
//! `pgvia.unique_id_ticks`, holding the last *tick* issued (milliseconds << 12 | sequence).
//! Each call takes the next tick, or the clock's tick when the clock is ahead of it. So a
//! shard never issues a tick twice or goes backwards: more than 4,096 calls in a millisecond
//! borrow the next millisecond, and a clock stepped back leaves the sequence ahead of it.
//!
//! "The clock's tick when the clock is ahead" is a read and a write (`nextval`, `setval`);
//! sequences have no compare-and-set, and a `setval` racing another session's `nextval` could
//! move the sequence back. So every call holds a session-level advisory lock for those few
//! instructions (released on every error, cancels included, by the exception block). A
//! transaction-level lock would serialise every transaction that makes an id until it ends;
//! a table row updated under a lock would too, and would hand out again the ids of a
//! rolled-back transaction.
//!
//! The function runs as its owner (`SECURITY DEFINER`, with a fixed `search_path`), so
//! callers need no right on the sequence and cannot move it back.

use std::sync::Arc;
use std::time::Duration;

use crate::routing::{PoolGroup, Target};

/// The ids' epoch: 2026-01-01T00:00:00Z, in milliseconds since the Unix epoch.
pub const EPOCH_MS: i64 = 1_767_225_600_000;
/// Bits of the shard number: at most 1,024 shards.
pub const NODE_BITS: u32 = 10;
/// Bits of the per-shard sequence: 4,096 ids per millisecond per shard before borrowing.
pub const SEQUENCE_BITS: u32 = 12;
/// The advisory lock (two-key form) each call holds: `pg_advisory_lock(1885828713, 1)`
/// ('pgvi' as an integer). Applications must not use this pair.
pub const LOCK_KEYS: (i32, i32) = (1_885_828_713, 1);

/// The SQL that installs `pgvia.unique_id()` for shard `node`, idempotent (`IF NOT EXISTS`,
/// `CREATE OR REPLACE`), one implicit transaction. `None` past the node bits.
pub fn install_sql(node: usize) -> Option<String> {
    if node >= 1 << NODE_BITS {
        return None;
    }
    // Ticks use 41 + 12 bits; the sequence stops (an error, not a wrap) after 2^53 - 1.
    let max_tick = (1i64 << (41 + SEQUENCE_BITS)) - 1;
    let (k1, k2) = LOCK_KEYS;
    let seq_mask = (1i64 << SEQUENCE_BITS) - 1;
    let shift = NODE_BITS + SEQUENCE_BITS;
    Some(format!(
        "CREATE SCHEMA IF NOT EXISTS pgvia;
CREATE SEQUENCE IF NOT EXISTS pgvia.unique_id_ticks AS bigint MINVALUE 0 MAXVALUE {max_tick} NO CYCLE CACHE 1;
CREATE OR REPLACE FUNCTION pgvia.unique_id() RETURNS bigint LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
    SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $pgvia$
DECLARE
    now_tick bigint;
    tick bigint;
BEGIN
    PERFORM pg_catalog.pg_advisory_lock({k1}, {k2});
    BEGIN
        now_tick := (pg_catalog.floor(pg_catalog.date_part('epoch', pg_catalog.clock_timestamp()) * 1000)::bigint - {EPOCH_MS}) << {SEQUENCE_BITS};
        tick := pg_catalog.nextval('pgvia.unique_id_ticks'::pg_catalog.regclass);
        IF tick < now_tick THEN
            tick := pg_catalog.setval('pgvia.unique_id_ticks'::pg_catalog.regclass, now_tick);
        END IF;
    EXCEPTION WHEN OTHERS OR query_canceled THEN
        PERFORM pg_catalog.pg_advisory_unlock({k1}, {k2});
        RAISE;
    END;
    PERFORM pg_catalog.pg_advisory_unlock({k1}, {k2});
    RETURN ((tick >> {SEQUENCE_BITS}) << {shift}) | ({node}::bigint << {SEQUENCE_BITS}) | (tick & {seq_mask});
END
$pgvia$;
GRANT USAGE ON SCHEMA pgvia TO PUBLIC;
GRANT EXECUTE ON FUNCTION pgvia.unique_id() TO PUBLIC;
COMMENT ON FUNCTION pgvia.unique_id() IS 'pgvia: unique id of shard {node} (ms since 2026-01-01 << 22 | shard << 12 | sequence)';"
    ))
}

/// Installs the function on each shard of `groups` not in `done` yet, marking those that
/// took it; a shard that cannot (down, no right to create the schema) is logged and tried
/// again next time.
pub async fn install(database: &str, groups: &[Arc<PoolGroup>], done: &mut Vec<bool>, timeout: Duration) {
    done.resize(groups.len(), false);
    for (shard, group) in groups.iter().enumerate() {
        if done[shard] {
            continue;
        }
        let Some(sql) = install_sql(shard) else {
            tracing::error!(database, shard, "cannot install pgvia.unique_id(): more than 1,024 shards");
            done[shard] = true;
            continue;
        };
        let result = match group.checkout(Target::Primary, None).await {
            Ok(mut c) => {
                let r = c.conn().run_internal(&[sql.as_str()], timeout).await;
                if r.is_ok() {
                    c.give_back_idle();
                }
                r.map_err(|e| e.to_string())
            }
            Err(e) => Err(e.to_string()),
        };
        match result {
            Ok(()) => {
                done[shard] = true;
                tracing::info!(database, shard, "installed pgvia.unique_id()");
            }
            Err(error) => tracing::warn!(
                database,
                shard,
                %error,
                "cannot install pgvia.unique_id() on this shard; trying again in 30 s"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_number_is_in_the_function_and_bounded() {
        let sql = install_sql(3).expect("shard 3");
        assert!(sql.contains("(3::bigint << 12)"));
        assert!(sql.contains("<< 22)"));
        assert!(install_sql(1023).is_some());
        assert!(install_sql(1024).is_none());
    }
}
