//! Configuration reload (SIGHUP or the console's `RELOAD`).
//!
//! The file is parsed and validated first; a bad one is rejected with its problems logged
//! and the running configuration stays. Otherwise the new snapshot is swapped in, then each
//! pool is compared with what the new configuration says it should be: unchanged pools keep
//! their servers and clients; a pool whose settings or server changed is replaced (its
//! clients move to the new pool at their next transaction, its servers close as they come
//! back); a pool whose database or user is gone is retired the same way, and its clients
//! get an error at their next checkout. New databases and users need nothing: pools are
//! made on first use.

use thiserror::Error;

use crate::app::{pool_address, App, AppError, Snapshot};
use crate::config::{Config, ConfigError};

#[derive(Debug, Error)]
pub enum ReloadError {
    #[error("configuration rejected, keeping the running one:\n{0}")]
    Config(#[from] ConfigError),
    #[error("configuration rejected, keeping the running one: {0}")]
    App(#[from] AppError),
}

/// What a reload changed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ReloadSummary {
    pub replaced: Vec<String>,
    pub removed: Vec<String>,
    /// Keys that changed but need a restart to take effect.
    pub need_restart: Vec<&'static str>,
}

/// Re-reads the configuration file the running one came from and applies it.
pub async fn reload(app: &App) -> Result<ReloadSummary, ReloadError> {
    let _one_at_a_time = app.reload_lock.lock().await;
    let path = app.config().origin.clone();
    let result = Config::load(&path).map_err(ReloadError::from).and_then(|c| apply(app, c));
    match &result {
        Ok(s) => tracing::info!(
            file = %path.display(),
            replaced = ?s.replaced,
            removed = ?s.removed,
            need_restart = ?s.need_restart,
            "configuration reloaded"
        ),
        Err(e) => tracing::error!(file = %path.display(), "{e}"),
    }
    result
}

/// Puts `new` in place of the running configuration (already validated).
pub fn apply(app: &App, new: Config) -> Result<ReloadSummary, ReloadError> {
    let old = app.config();
    let mut summary = ReloadSummary { need_restart: restart_only_changes(&old, &new), ..Default::default() };
    // Databases whose servers or routing changed get their health state built anew.
    let changed_routing: Vec<String> = old
        .databases
        .iter()
        .filter(|d| {
            new.database(&d.name)
                .is_none_or(|n| n.routing(&new.users) != d.routing(&old.users) || n.shards != d.shards)
        })
        .flat_map(|d| {
            // A sharded database's servers are its shards' (`app#0`, `app#1`, ...).
            let shards = (0..d.shards.len()).map(|i| format!("{}{}{i}", d.name, crate::config::SHARD_MARK));
            std::iter::once(d.name.clone()).chain(shards)
        })
        .collect();
    drop(old);
    app.swap_snapshot(Snapshot::new(new)?);
    for name in &changed_routing {
        app.forget_hosts(name);
    }
    app.all_hosts();
    let config = app.config();
    for pool in app.pools.all() {
        let db = config
            .database_for_client(&pool.key.database)
            .or_else(|| config.shard_view(&pool.key.database).map(std::borrow::Cow::Owned));
        let db = db.as_deref();
        let user = config.user(&pool.key.user);
        // The server this pool was made for, if the database still lists it at that place.
        let addr = db.zip(user).and_then(|(db, user)| {
            let multi = db.servers.len() > 1;
            (pool.key.server.is_some() == multi)
                .then(|| pool_address(&config, db, user, pool.key.server, &app.client_keys))
                .flatten()
        });
        let retired = match (db, user, addr) {
            (Some(db), Some(user), Some(addr)) => {
                if config.pool_settings(db, user) == pool.settings && addr == *pool.server_address() {
                    continue;
                }
                let next = app.build_pool(&config, pool.key.clone(), db, user, Some(&pool));
                app.pools.insert(next.clone());
                pool.replace_with(next);
                summary.replaced.push(pool.name.clone());
                pool
            }
            _ => {
                app.pools.remove(&pool.key);
                pool.retire();
                summary.removed.push(pool.name.clone());
                pool
            }
        };
        let mut kept = app.retired_pools.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        kept.retain(|p| p.server_count() > 0);
        kept.push(retired);
    }
    Ok(summary)
}

/// Keys whose new value is ignored until pgvia restarts.
fn restart_only_changes(old: &Config, new: &Config) -> Vec<&'static str> {
    let (a, b) = (&old.general, &new.general);
    let mut out = Vec::new();
    let mut check = |changed: bool, key: &'static str| {
        if changed {
            out.push(key);
        }
    };
    check(a.listen_addr != b.listen_addr, "general.listen_addr");
    check(a.listen_port != b.listen_port, "general.listen_port");
    check(a.tls_mode != b.tls_mode, "general.tls_mode");
    check(a.tls_cert_file != b.tls_cert_file, "general.tls_cert_file");
    check(a.tls_key_file != b.tls_key_file, "general.tls_key_file");
    check(a.max_message_size != b.max_message_size, "general.max_message_size");
    check(a.log_level != b.log_level, "general.log_level");
    check(a.log_format != b.log_format, "general.log_format");
    check(a.metrics_listen != b.metrics_listen, "general.metrics_listen");
    check(a.unix_socket_dir != b.unix_socket_dir, "general.unix_socket_dir");
    check(a.client_tls_ca_file != b.client_tls_ca_file, "general.client_tls_ca_file");
    check(a.instance_id != b.instance_id, "general.instance_id");
    check(a.worker_threads != b.worker_threads, "general.worker_threads");
    check(a.thread_layout != b.thread_layout, "general.thread_layout");
    check(old.gateway.listen != new.gateway.listen, "gateway.listen");
    check(old.gateway.tls != new.gateway.tls, "gateway.tls");
    check(old.analysis != new.analysis, "analysis");
    check(
        old.limits.max_concurrent_password_hashes != new.limits.max_concurrent_password_hashes,
        "limits.max_concurrent_password_hashes",
    );
    out
}
