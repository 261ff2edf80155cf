//! `SHOW CONFIG`: one row per key of `[general]`, `[pool]`, `[limits]`, `[analysis]`,
//! `[gateway]` and `[auth_query]`, with its value, its default and whether a reload applies it.
//!
//! Secrets are never shown: `general.metrics_auth_token` is left out, and `gateway.tokens`
//! shows how many tokens there are. A unit test reads every section's key list from its
//! `Deserialize` impl, so a key added to a config struct without a row here fails the build's
//! tests instead of going missing from the console.

use std::fmt::Display;
use std::path::PathBuf;
use std::time::Duration;

use super::rows::{Kind, RowSet};
use crate::app::App;
use crate::config::{
    auth_query, AnalysisSettings, CacheAdmission, Config, Gateway, General, Limits, LogFormat, PoolDefaults,
};

/// A reload applies the key (`changeable = yes`).
const RELOAD: bool = true;
/// Only a restart applies the key (`changeable = no`).
const RESTART: bool = false;

/// `(key, value, default, changeable)` rows, gathered section by section.
#[derive(Default)]
struct Rows(Vec<(String, String, String, bool)>);

impl Rows {
    fn put(&mut self, key: &str, value: impl Display, default: impl Display, reload: bool) {
        self.0.push((key.to_owned(), value.to_string(), default.to_string(), reload));
    }
}

fn dur(v: Duration) -> String {
    format!("{v:?}")
}

fn opt(v: &Option<String>) -> String {
    v.clone().unwrap_or_default()
}

fn path(v: &Option<PathBuf>) -> String {
    v.as_ref().map(|p| p.display().to_string()).unwrap_or_default()
}

fn list(v: &[String]) -> String {
    format!("{v:?}")
}

fn log_format(f: LogFormat) -> &'static str {
    match f {
        LogFormat::Text => "text",
        LogFormat::Json => "json",
    }
}

fn admission(a: CacheAdmission) -> &'static str {
    match a {
        CacheAdmission::Always => "always",
        CacheAdmission::SecondSight => "second_sight",
    }
}

fn general(r: &mut Rows, g: &General) {
    let d = General::default();
    r.put("listen_addr", &g.listen_addr, &d.listen_addr, RESTART);
    r.put("listen_port", g.listen_port, d.listen_port, RESTART);
    r.put("unix_socket_dir", path(&g.unix_socket_dir), path(&d.unix_socket_dir), RESTART);
    r.put("max_client_connections", g.max_client_connections, d.max_client_connections, RELOAD);
    r.put("tls_mode", g.tls_mode, d.tls_mode, RESTART);
    r.put("tls_cert_file", path(&g.tls_cert_file), path(&d.tls_cert_file), RESTART);
    r.put("tls_key_file", path(&g.tls_key_file), path(&d.tls_key_file), RESTART);
    r.put("client_tls_ca_file", path(&g.client_tls_ca_file), path(&d.client_tls_ca_file), RESTART);
    r.put(
        "server_scram_max_iterations",
        g.server_scram_max_iterations,
        d.server_scram_max_iterations,
        RELOAD,
    );
    r.put("auth_method", g.auth_method, d.auth_method, RELOAD);
    r.put(
        "allow_cleartext_without_tls",
        g.allow_cleartext_without_tls,
        d.allow_cleartext_without_tls,
        RELOAD,
    );
    r.put("max_message_size", g.max_message_size, d.max_message_size, RESTART);
    r.put("shutdown_timeout", dur(g.shutdown_timeout), dur(d.shutdown_timeout), RELOAD);
    r.put("server_reset_query", &g.server_reset_query, &d.server_reset_query, RELOAD);
    r.put("server_reset_timeout", dur(g.server_reset_timeout), dur(d.server_reset_timeout), RELOAD);
    r.put("log_level", &g.log_level, &d.log_level, RESTART);
    r.put("log_format", log_format(g.log_format), log_format(d.log_format), RESTART);
    r.put("log_connections", g.log_connections, d.log_connections, RELOAD);
    r.put("slow_query_threshold", dur(g.slow_query_threshold), dur(d.slow_query_threshold), RELOAD);
    r.put("fallback_idle_timeout", dur(g.fallback_idle_timeout), dur(d.fallback_idle_timeout), RELOAD);
    r.put(
        "max_prepared_statements_per_client",
        g.max_prepared_statements_per_client,
        d.max_prepared_statements_per_client,
        RELOAD,
    );
    r.put(
        "max_prepared_statements_total",
        g.max_prepared_statements_total,
        d.max_prepared_statements_total,
        RELOAD,
    );
    r.put("metrics_listen", opt(&g.metrics_listen), opt(&d.metrics_listen), RESTART);
    // Empty means the default the code works out: the host name and the listen port.
    r.put("instance_id", opt(&g.instance_id), opt(&d.instance_id), RESTART);
    // Empty means one per CPU.
    let threads = |n: Option<u16>| n.map(|n| n.to_string()).unwrap_or_default();
    r.put("worker_threads", threads(g.worker_threads), threads(d.worker_threads), RESTART);
    r.put("thread_layout", g.thread_layout.as_str(), d.thread_layout.as_str(), RESTART);
}

fn pool(r: &mut Rows, p: &PoolDefaults) {
    let d = PoolDefaults::default();
    r.put("pool.pool_mode", p.pool_mode, d.pool_mode, RELOAD);
    r.put("pool.pool_size", p.pool_size, d.pool_size, RELOAD);
    r.put("pool.min_idle", p.min_idle, d.min_idle, RELOAD);
    r.put("pool.connect_timeout", dur(p.connect_timeout), dur(d.connect_timeout), RELOAD);
    r.put("pool.checkout_timeout", dur(p.checkout_timeout), dur(d.checkout_timeout), RELOAD);
    r.put("pool.idle_timeout", dur(p.idle_timeout), dur(d.idle_timeout), RELOAD);
    r.put("pool.max_lifetime", dur(p.max_lifetime), dur(d.max_lifetime), RELOAD);
    r.put("pool.client_idle_timeout", dur(p.client_idle_timeout), dur(d.client_idle_timeout), RELOAD);
    r.put(
        "pool.idle_in_transaction_timeout",
        dur(p.idle_in_transaction_timeout),
        dur(d.idle_in_transaction_timeout),
        RELOAD,
    );
    r.put("pool.query_timeout", dur(p.query_timeout), dur(d.query_timeout), RELOAD);
    r.put("pool.max_prepared_statements", p.max_prepared_statements, d.max_prepared_statements, RELOAD);
}

fn limits(r: &mut Rows, l: &Limits) {
    let d = Limits::default();
    r.put("limits.startup_timeout", dur(l.startup_timeout), dur(d.startup_timeout), RELOAD);
    r.put("limits.max_pending_logins", l.max_pending_logins, d.max_pending_logins, RELOAD);
    r.put(
        "limits.max_pending_logins_per_address",
        l.max_pending_logins_per_address,
        d.max_pending_logins_per_address,
        RELOAD,
    );
    r.put(
        "limits.connections_per_second_per_address",
        l.connections_per_second_per_address,
        d.connections_per_second_per_address,
        RELOAD,
    );
    r.put(
        "limits.admin_reserved_connections",
        l.admin_reserved_connections,
        d.admin_reserved_connections,
        RELOAD,
    );
    r.put("limits.client_backlog_bytes", l.client_backlog_bytes, d.client_backlog_bytes, RELOAD);
    r.put(
        "limits.max_buffered_message_bytes",
        l.max_buffered_message_bytes,
        d.max_buffered_message_bytes,
        RELOAD,
    );
    r.put(
        "limits.max_concurrent_password_hashes",
        l.max_concurrent_password_hashes,
        d.max_concurrent_password_hashes,
        RESTART,
    );
    r.put(
        "limits.cancel_requests_per_second",
        l.cancel_requests_per_second,
        d.cancel_requests_per_second,
        RELOAD,
    );
    r.put(
        "limits.metrics_header_timeout",
        dur(l.metrics_header_timeout),
        dur(d.metrics_header_timeout),
        RELOAD,
    );
    r.put("limits.metrics_max_connections", l.metrics_max_connections, d.metrics_max_connections, RELOAD);
    r.put("limits.health_cache", dur(l.health_cache), dur(d.health_cache), RELOAD);
    r.put("limits.merge_memory_budget", l.merge_memory_budget, d.merge_memory_budget, RELOAD);
    r.put("limits.merge_spill", l.merge_spill, d.merge_spill, RELOAD);
    r.put("limits.merge_spill_dir", &l.merge_spill_dir, &d.merge_spill_dir, RELOAD);
}

/// `[analysis]` is read once, when the analyzer is made: every key needs a restart.
fn analysis(r: &mut Rows, a: &AnalysisSettings) {
    let d = AnalysisSettings::default();
    r.put("analysis.max_query_length", a.max_query_length, d.max_query_length, RESTART);
    r.put("analysis.cache_entries", a.cache_entries, d.cache_entries, RESTART);
    r.put("analysis.cache_bytes", a.cache_bytes, d.cache_bytes, RESTART);
    r.put("analysis.cache_admission", admission(a.cache_admission), admission(d.cache_admission), RESTART);
    r.put("analysis.write_functions", list(&a.write_functions), list(&d.write_functions), RESTART);
    r.put(
        "analysis.session_neutral_functions",
        list(&a.session_neutral_functions),
        list(&d.session_neutral_functions),
        RESTART,
    );
    r.put("analysis.max_nesting", a.max_nesting, d.max_nesting, RESTART);
    r.put("analysis.max_values", a.max_values, d.max_values, RESTART);
}

fn gateway(r: &mut Rows, g: &Gateway) {
    let d = Gateway::default();
    r.put("gateway.listen", opt(&g.listen), opt(&d.listen), RESTART);
    r.put("gateway.tls", g.tls, d.tls, RESTART);
    r.put("gateway.max_body_bytes", g.max_body_bytes, d.max_body_bytes, RELOAD);
    r.put("gateway.max_response_rows", g.max_response_rows, d.max_response_rows, RELOAD);
    r.put("gateway.max_response_bytes", g.max_response_bytes, d.max_response_bytes, RELOAD);
    r.put("gateway.json_buffer_bytes", g.json_buffer_bytes, d.json_buffer_bytes, RELOAD);
    r.put("gateway.statement_timeout", dur(g.statement_timeout), dur(d.statement_timeout), RELOAD);
    r.put("gateway.flush_bytes", g.flush_bytes, d.flush_bytes, RELOAD);
    r.put("gateway.flush_interval", dur(g.flush_interval), dur(d.flush_interval), RELOAD);
    r.put(
        "gateway.cors_allowed_origins",
        list(&g.cors_allowed_origins),
        list(&d.cors_allowed_origins),
        RELOAD,
    );
    r.put("gateway.credential_cache_ttl", dur(g.credential_cache_ttl), dur(d.credential_cache_ttl), RELOAD);
    r.put("gateway.max_connections", g.max_connections, d.max_connections, RELOAD);
    r.put("gateway.header_timeout", dur(g.header_timeout), dur(d.header_timeout), RELOAD);
    // The tokens are secrets: only how many there are.
    r.put("gateway.tokens", g.tokens.len(), 0, RELOAD);
}

/// `[auth_query]` is optional: without it the keys are listed with empty values, so the
/// console's list of keys does not depend on the file.
fn auth_query(r: &mut Rows, a: Option<&crate::config::AuthQuery>) {
    let (ttl, timeout, idle, pools) = (
        dur(auth_query::default_cache_ttl()),
        dur(auth_query::default_timeout()),
        dur(auth_query::default_cache_ttl()),
        auth_query::default_max_pools().to_string(),
    );
    let show = |f: &dyn Fn(&crate::config::AuthQuery) -> String| a.map(f).unwrap_or_default();
    r.put("auth_query.query", show(&|a| a.query.clone()), "", RELOAD);
    r.put("auth_query.user", show(&|a| a.user.clone()), "", RELOAD);
    r.put("auth_query.database", show(&|a| a.database.clone()), "", RELOAD);
    r.put("auth_query.cache_ttl", show(&|a| dur(a.cache_ttl)), ttl, RELOAD);
    r.put("auth_query.timeout", show(&|a| dur(a.timeout)), timeout, RELOAD);
    r.put("auth_query.pool_idle_timeout", show(&|a| dur(a.pool_idle_timeout)), idle, RELOAD);
    r.put("auth_query.max_pools", show(&|a| a.max_pools.to_string()), pools, RELOAD);
}

/// Every row of `SHOW CONFIG`, sorted by key.
pub(crate) fn config_rows(c: &Config) -> Vec<(String, String, String, bool)> {
    let mut r = Rows::default();
    general(&mut r, &c.general);
    pool(&mut r, &c.pool);
    limits(&mut r, &c.limits);
    analysis(&mut r, &c.analysis);
    gateway(&mut r, &c.gateway);
    auth_query(&mut r, c.auth_query.as_ref());
    r.0.sort_by(|a, b| a.0.cmp(&b.0));
    r.0
}

pub(super) fn config(app: &App) -> RowSet {
    let mut rs = RowSet::new(&[
        ("key", Kind::Text),
        ("value", Kind::Text),
        ("default", Kind::Text),
        ("changeable", Kind::Text),
    ]);
    for (k, v, d, c) in config_rows(&app.config()) {
        rs.push(vec![k.into(), v.into(), d.into(), if c { "yes" } else { "no" }.into()]);
    }
    rs
}

#[cfg(test)]
#[path = "show_config_tests.rs"]
mod tests;
