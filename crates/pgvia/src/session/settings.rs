//! Bringing a server to the run-time settings a client asked for at startup.

use std::fmt::Write;
use std::sync::Arc;
use std::time::Duration;

use super::error::SessionError;
use crate::pool::{Pool, SettingsReport};
use crate::server::{ServerConn, ServerError};

/// Applies `wanted` on the server in one round trip, skipping settings the server already
/// reports with the same value. Settings go through `set_config` rather than `SET` so that a
/// value is taken exactly as a startup parameter would be (a list such as `search_path=a,b`
/// stays a list).
pub async fn apply(
    server: &mut ServerConn,
    wanted: &[(String, String)],
    timeout: Duration,
) -> Result<(), SessionError> {
    let Some(sql) = statement(server, wanted) else { return Ok(()) };
    server.dirty = true;
    // Boxed: this runs only when settings differ, but its state would otherwise be part of
    // every session's future (and so of every idle client's memory).
    match Box::pin(server.run_internal(&[&sql], timeout)).await {
        Ok(()) => {
            server.applied = wanted.iter().cloned().collect();
            Ok(())
        }
        Err(ServerError::Query { code, message }) => Err(SessionError::ServerRefused { code, message }),
        Err(e) => Err(e.into()),
    }
}

/// The fewest `set_config` calls that take the server from what pgvia applied on it (for an
/// earlier client, in transaction mode) to `wanted`: settings the server already has are
/// skipped, settings only the earlier client had are reset.
fn statement(server: &ServerConn, wanted: &[(String, String)]) -> Option<String> {
    // GUC names are case-insensitive: a client may send "datestyle" for "DateStyle".
    let needed = wanted.iter().filter(|(name, value)| {
        let same = |(k, v): (&String, &String)| k.eq_ignore_ascii_case(name) && v == value;
        match server.applied.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)) {
            Some(applied) => !same(applied),
            None => !server.params.iter().any(same),
        }
    });
    let stale =
        server.applied.keys().filter(|k| !wanted.iter().any(|(name, _)| name.eq_ignore_ascii_case(k)));
    let calls = needed
        .map(|(name, value)| (name.as_str(), Some(value.as_str())))
        .chain(stale.map(|name| (name.as_str(), None)));
    set_config_select(calls, false)
}

/// `SELECT pg_catalog.set_config(name, value, is_local), ...` for each setting (a `None`
/// value resets it), or `None` when there is nothing to set.
fn set_config_select<'s>(
    settings: impl Iterator<Item = (&'s str, Option<&'s str>)>,
    is_local: bool,
) -> Option<String> {
    let mut sql = String::new();
    for (name, value) in settings {
        sql.push_str(if sql.is_empty() { "SELECT " } else { ", " });
        sql.push_str("pg_catalog.set_config(");
        quote_literal(&mut sql, name);
        sql.push_str(", ");
        match value {
            Some(v) => quote_literal(&mut sql, v),
            None => sql.push_str("NULL"),
        }
        sql.push_str(if is_local { ", true)" } else { ", false)" });
    }
    (!sql.is_empty()).then_some(sql)
}

/// Refuses, at login as PostgreSQL does, startup settings a server would reject (an unknown
/// parameter, an invalid value), and learns what PostgreSQL reports for the accepted ones
/// (`utf-8` is reported as `UTF8`) and the notices it raises for them (an `application_name`
/// longer than 63 bytes is truncated). Each set of settings is tried once per pool on a
/// pooled server, in one `SELECT set_config(name, value, true), ...`: the values it returns
/// are the server's own spelling, and `is_local` outside a transaction block undoes them when
/// the statement ends. Accepted sets are remembered, so later logins cost no round trip.
pub async fn check_at_login(
    pool: &Arc<Pool>,
    wanted: &[(String, String)],
    timeout: Duration,
) -> Result<Arc<SettingsReport>, SessionError> {
    if let Some(report) = pool.settings_report(wanted) {
        return Ok(report);
    }
    let calls = wanted.iter().map(|(k, v)| (k.as_str(), Some(v.as_str())));
    let Some(select) = set_config_select(calls, true) else { return Ok(Arc::default()) };
    let mut checkout = pool.checkout(None).await?;
    let result = checkout.conn().query_rows_noticed(&select, timeout).await;
    // The check leaves the server as it found it (in transaction mode possibly carrying an
    // earlier client's settings, which pgvia tracks), so it goes back as it came.
    checkout.give_back_idle();
    match result {
        Ok((rows, notices)) => {
            let shown = rows.into_iter().next().unwrap_or_default();
            let values = wanted
                .iter()
                .zip(shown)
                .filter_map(|((name, _), value)| Some((name.clone(), value?)))
                .collect();
            let report = Arc::new(SettingsReport { values, notices });
            pool.remember_settings_report(wanted, report.clone());
            Ok(report)
        }
        Err(ServerError::Query { code, message }) => Err(SessionError::ServerRefused { code, message }),
        Err(e) => Err(e.into()),
    }
}

/// Quotes like PostgreSQL's `quote_literal`: doubled quotes, and an `E''` string with doubled
/// backslashes when there are any, which reads the same whatever standard_conforming_strings is.
fn quote_literal(out: &mut String, s: &str) {
    if s.contains('\\') {
        out.push('E');
    }
    out.push('\'');
    for c in s.chars() {
        match c {
            '\'' => out.push_str("''"),
            '\\' => out.push_str("\\\\"),
            c => {
                let _ = out.write_char(c);
            }
        }
    }
    out.push('\'');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting() {
        let mut s = String::new();
        quote_literal(&mut s, r"it's a\b");
        assert_eq!(s, r"E'it''s a\\b'");
    }
}
