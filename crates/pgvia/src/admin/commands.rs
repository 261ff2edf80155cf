//! Console commands that change things: `PAUSE`, `RESUME`, `RECONNECT`, `RELOAD`, `KILL`,
//! `KILL_CLIENT`, `WAIT_CLOSE`, `SHUTDOWN`.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use wire::sqlstate::SqlState;

use super::{AdminError, Reply};
use crate::app::{App, Phase};
use crate::clients::ClientInfo;
use crate::pool::Pool;

/// How often waiting commands (`PAUSE`, `WAIT_CLOSE`) look again.
const POLL: Duration = Duration::from_millis(10);

pub async fn run(app: &App, me: &ClientInfo, verb: &str, arg: Option<&str>) -> Result<Reply, AdminError> {
    let takes_database = matches!(verb, "PAUSE" | "RESUME" | "RECONNECT" | "KILL" | "WAIT_CLOSE");
    if let Some(db) = arg.filter(|_| takes_database) {
        if app.config().database_for_client(db).is_none() {
            return Err(AdminError::new(SqlState::INVALID_CATALOG_NAME, format!("no such database: {db}")));
        }
    }
    let reply = match (verb, arg) {
        ("PAUSE", db) => {
            let pools = app.set_paused(db, true);
            tracing::info!(database = db.unwrap_or("(all)"), "PAUSE: waiting for transactions to finish");
            wait_until(|| pools.iter().all(|p| p.stats.servers_active.load(Ordering::Relaxed) == 0)).await;
            tracing::info!(database = db.unwrap_or("(all)"), "paused");
            Reply::Done("PAUSE")
        }
        ("RESUME", db) => {
            app.set_paused(db, false);
            tracing::info!(database = db.unwrap_or("(all)"), "resumed");
            Reply::Done("RESUME")
        }
        ("RECONNECT", db) => {
            for p in pools_of(app, db) {
                p.reconnect();
            }
            tracing::info!(database = db.unwrap_or("(all)"), "RECONNECT: servers will be replaced");
            Reply::Done("RECONNECT")
        }
        ("RELOAD", None) => {
            crate::reload::reload(app)
                .await
                .map_err(|e| AdminError::new(SqlState::CONFIG_FILE_ERROR, e.to_string()))?;
            Reply::Done("RELOAD")
        }
        ("KILL", Some(db)) => {
            app.set_paused(Some(db), true);
            for c in app.clients.all().into_iter().filter(|c| !c.who.admin && c.who.database() == db) {
                c.end(Phase::Terminating);
            }
            for p in pools_of(app, Some(db)) {
                p.reconnect();
            }
            tracing::info!(database = db, "KILL: clients closed, database paused until RESUME");
            Reply::Done("KILL")
        }
        ("KILL_CLIENT", Some(id)) => {
            // The `id` column is decimal; the `ptr` column is `c` and the id in hex.
            let parsed = match id.strip_prefix('c') {
                Some(hex) => u64::from_str_radix(hex, 16),
                None => id.parse(),
            };
            let id = parsed.map_err(|_| {
                AdminError::new(SqlState::INVALID_PARAMETER_VALUE, format!("not a client id: {id}"))
            })?;
            let client = app.clients.get(id).ok_or_else(|| {
                AdminError::new(SqlState::UNDEFINED_OBJECT, format!("no client with id {id}"))
            })?;
            if client.id == me.id {
                return Err(AdminError::new(
                    SqlState::INVALID_PARAMETER_VALUE,
                    "cannot kill your own connection",
                ));
            }
            client.end(Phase::Terminating);
            tracing::info!(client = id, addr = %client.who.peer, "KILL_CLIENT");
            Reply::Done("KILL_CLIENT")
        }
        ("WAIT_CLOSE", db) => {
            let pools = pools_of(app, db);
            let retired: Vec<Arc<Pool>> = app
                .retired_pools
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .iter()
                .filter(|p| db.is_none_or(|d| p.key.database == d))
                .cloned()
                .collect();
            wait_until(|| {
                pools.iter().all(|p| p.stats.servers_stale.load(Ordering::Relaxed) == 0)
                    && retired.iter().all(|p| p.server_count() == 0)
            })
            .await;
            Reply::Done("WAIT_CLOSE")
        }
        ("SHUTDOWN", None) => {
            tracing::info!("SHUTDOWN from the admin console");
            app.shutdown_requested.notify_one();
            Reply::Done("SHUTDOWN")
        }
        _ => return Err(super::unknown(&[verb, arg.unwrap_or_default()].join(" "))),
    };
    Ok(reply)
}

fn pools_of(app: &App, db: Option<&str>) -> Vec<Arc<Pool>> {
    app.pools.all().into_iter().filter(|p| db.is_none_or(|d| p.key.database == d)).collect()
}

async fn wait_until(mut done: impl FnMut() -> bool) {
    while !done() {
        tokio::time::sleep(POLL).await;
    }
}
