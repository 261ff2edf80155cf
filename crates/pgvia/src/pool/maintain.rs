//! The per-pool maintenance task: retire idle servers past `idle_timeout` or `max_lifetime`,
//! and keep `min_idle` servers open.

use std::sync::atomic::Ordering;
use std::sync::Weak;
use std::time::Duration;

use super::Pool;

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

fn retire(pool: &Pool) {
    let idle_timeout = pool.settings.idle_timeout;
    let lifetime = pool.settings.max_lifetime;
    let keep = pool.settings.min_idle as usize;
    let retired: Vec<_> = {
        let mut idle = pool.idle_list();
        let mut out = Vec::new();
        // Oldest-used first: the list is a stack with the most recently used at the end.
        let mut i = 0;
        while i < idle.len() {
            let c = &idle[i];
            let too_old = !lifetime.is_zero() && c.created.elapsed() >= lifetime;
            let too_idle =
                !idle_timeout.is_zero() && c.last_used.elapsed() >= idle_timeout && idle.len() > keep;
            if too_old || too_idle {
                out.push(idle.remove(i));
            } else {
                i += 1;
            }
        }
        pool.stats.servers_idle.store(idle.len(), Ordering::Relaxed);
        out
    };
    for c in retired {
        pool.close_conn(c, "idle_timeout or max_lifetime reached");
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
