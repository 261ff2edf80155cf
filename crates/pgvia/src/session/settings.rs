//! Bringing a server to the run-time settings a client asked for at startup.

use std::fmt::Write;
use std::time::Duration;

use super::error::SessionError;
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
    match server.run_internal(&[&sql], timeout).await {
        Ok(()) => {
            for (k, v) in wanted {
                server.applied.insert(k.clone(), v.clone());
            }
            Ok(())
        }
        Err(ServerError::Query { code, message }) => Err(SessionError::ServerRefused { code, message }),
        Err(e) => Err(e.into()),
    }
}

fn statement(server: &ServerConn, wanted: &[(String, String)]) -> Option<String> {
    let mut sql = String::new();
    for (name, value) in wanted {
        // GUC names are case-insensitive: a client may send "datestyle" for "DateStyle".
        let same = |(k, v): (&String, &String)| k.eq_ignore_ascii_case(name) && v == value;
        if server.params.iter().any(same) || server.applied.iter().any(same) {
            continue;
        }
        sql.push_str(if sql.is_empty() { "SELECT " } else { ", " });
        sql.push_str("pg_catalog.set_config(");
        quote_literal(&mut sql, name);
        sql.push_str(", ");
        quote_literal(&mut sql, value);
        sql.push_str(", false)");
    }
    (!sql.is_empty()).then_some(sql)
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
