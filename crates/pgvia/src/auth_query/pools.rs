//! The pools of users found by `[auth_query]`: admitted at login under `max_pools`, closed
//! after `pool_idle_timeout` without clients, so thousands of short-lived roles leave no
//! more than `max_pools` pools behind. Which users to close is `pool::OnDemandUsers`'s
//! bookkeeping; this file takes them out of the snapshot and retires their pools.

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use thiserror::Error;

use crate::app::App;
use crate::auth::LookedUp;
use crate::config::User;

/// A looked-up user could not get pools.
#[derive(Debug, Error)]
#[error(
    "too many pools for users found by auth_query (auth_query.max_pools = {max}), and none is idle; try again later"
)]
pub struct NoRoom {
    pub max: u32,
}

/// Pools held now by users found by `[auth_query]`.
fn on_demand_pools(app: &App) -> usize {
    app.pools.all().iter().filter(|p| app.on_demand.contains(&p.key.user)).count()
}

/// Lets an authenticated looked-up user in: makes room under `max_pools` (closing the
/// pools of the least recently seen idle users), then puts the user into the configuration
/// in use. A secret changed since its pools were made retires them, so new servers are
/// logged in to with the new one.
pub fn admit(app: &App, user: &str, found: &LookedUp) -> Result<(), NoRoom> {
    let max = match &app.config().auth_query {
        Some(aq) => aq.max_pools,
        None => return Ok(()),
    };
    let now = Instant::now();
    if !app.on_demand.contains(user) {
        loop {
            let held = on_demand_pools(app);
            if held < max as usize {
                break;
            }
            let victims =
                app.on_demand.least_recent_idle(|u| app.user_clients(u), held + 1 - max as usize, user);
            if victims.is_empty() {
                return Err(NoRoom { max });
            }
            close_pools_of(app, &victims);
            tracing::info!(
                users = victims.len(),
                max_pools = max,
                "closed idle pools of auth_query users to make room"
            );
        }
    }
    app.on_demand.seen(user, now);
    if app.admit_looked_up(&User::looked_up(user, &found.stored), &found.secret) {
        retire_pools(app, |name| name == user);
    }
    Ok(())
}

/// Takes `users` out of the configuration in use and retires their pools.
pub fn close_pools_of(app: &App, users: &[String]) {
    app.drop_looked_up(users);
    retire_pools(app, |name| users.iter().any(|u| u == name));
    app.on_demand.forget(users);
    app.client_keys.forget(users);
}

fn retire_pools(app: &App, whose: impl Fn(&str) -> bool) {
    for pool in app.pools.all() {
        if whose(&pool.key.user) {
            app.pools.remove(&pool.key);
            pool.retire();
        }
    }
}

/// Closes the pools of looked-up users idle for `pool_idle_timeout`, checking a few times
/// per timeout (at most every 30 s, at least every 100 ms).
pub async fn retire_idle(app: Weak<App>) {
    loop {
        let Some(period) = app.upgrade().map(|a| {
            a.config().auth_query.as_ref().map_or(Duration::from_secs(30), |aq| aq.pool_idle_timeout / 4)
        }) else {
            return;
        };
        tokio::time::sleep(period.clamp(Duration::from_millis(100), Duration::from_secs(30))).await;
        let Some(app) = app.upgrade() else { return };
        sweep(&app, Instant::now());
    }
}

/// One pass of [`retire_idle`].
pub fn sweep(app: &Arc<App>, now: Instant) {
    let Some(timeout) = app.config().auth_query.as_ref().map(|aq| aq.pool_idle_timeout) else { return };
    let idle = app.on_demand.idle(|u| app.user_clients(u), timeout, now);
    if !idle.is_empty() {
        close_pools_of(app, &idle);
        tracing::info!(users = idle.len(), "closed the pools of auth_query users idle for pool_idle_timeout");
    }
}
