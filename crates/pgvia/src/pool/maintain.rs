//! The per-pool maintenance task: retire idle servers past `idle_timeout` or `max_lifetime`
//! (with per-connection jitter), drop idle servers whose connection died, and keep
//! `min_idle` servers open.

use std::sync::atomic::Ordering;
use std::sync::Weak;
use std::time::Duration;

use super::Pool;
use crate::server::ServerConn;

const TICK: Duration = Duration::from_secs(1);

pub(super) fn spawn(pool: Weak<Pool>) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let Some(pool) = pool.upgrade() else { return };
            if pool.permits.is_closed() {
                return;
            }
            retire(&pool);
            fill_min_idle(&pool).await;
        }
    });
}

/// Whether a server has lived past its own share of `max_lifetime`: between 90% and 100% of
/// it, picked by the connection's id, so servers opened in one burst (at start-up, after a
/// failover) are replaced over a spread of time instead of all at once.
pub(super) fn past_lifetime(lifetime: Duration, conn: &ServerConn) -> bool {
    if lifetime.is_zero() {
        return false;
    }
    let own = lifetime - lifetime * jitter_permille(conn.id) / 1000;
    conn.created.elapsed() >= own
}

/// 0..=100 thousandths (up to 10% in steps of 0.1%), spread evenly over sequential ids by a
/// splitmix64 mix.
fn jitter_permille(id: u64) -> u32 {
    let mut z = id.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z % 101) as u32
}

fn retire(pool: &Pool) {
    let mut retired = Vec::new();
    for thread in 0..pool.idle.len() {
        retire_from(pool, thread, &mut retired);
    }
    for c in retired {
        pool.close_conn(c, "idle_timeout or max_lifetime reached");
    }
}

/// Takes thread `thread`'s idle servers past their time into `out`, keeping `min_idle` in all.
fn retire_from(pool: &Pool, thread: usize, out: &mut Vec<ServerConn>) {
    let idle_timeout = pool.settings.idle_timeout;
    let lifetime = pool.settings.max_lifetime;
    let keep = pool.settings.min_idle as usize;
    let mut idle = pool.idle_list(thread);
    // Oldest-used first: the list is a stack with the most recently used at the end.
    let mut i = 0;
    while i < idle.len() {
        let c = &idle[i];
        let too_old = past_lifetime(lifetime, c);
        let too_idle = !idle_timeout.is_zero()
            && c.last_used.elapsed() >= idle_timeout
            && pool.stats.servers_idle.load(Ordering::Relaxed) > keep;
        if too_old || too_idle {
            out.push(idle.remove(i));
            pool.stats.servers_idle.fetch_sub(1, Ordering::Relaxed);
        } else if let Err(why) = idle[i].is_alive() {
            // Terminated from outside while idle: dropped now, so the counts the admin
            // console shows match the servers that exist (checkout checks again).
            let dead = idle.remove(i);
            pool.stats.servers_idle.fetch_sub(1, Ordering::Relaxed);
            tracing::info!(pool = %pool.name, server = dead.id, pid = dead.key.process_id, %why, "idle server connection is dead; discarding it");
            pool.stats.servers_closed.fetch_add(1, Ordering::Relaxed);
        } else {
            i += 1;
        }
    }
}

async fn fill_min_idle(pool: &Pool) {
    while pool.stats.servers_idle.load(Ordering::Relaxed) < pool.settings.min_idle as usize {
        // Holding a permit while connecting keeps idle + active within pool_size.
        let Ok(_permit) = pool.permits.clone().try_acquire_owned() else { return };
        match pool.connect().await {
            Ok(conn) => pool.put_idle(conn),
            Err(e) => {
                tracing::warn!(pool = %pool.name, error = %e, "could not open a server connection for min_idle");
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn jitter_spreads_lifetimes_over_the_last_tenth() {
        let values: Vec<u32> = (1..=200).map(super::jitter_permille).collect();
        assert!(values.iter().all(|&p| p <= 100));
        let distinct: std::collections::HashSet<_> = values.iter().collect();
        assert!(distinct.len() > 50, "ids 1..=200 give {} distinct jitters", distinct.len());
    }
}
