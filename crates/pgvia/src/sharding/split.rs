//! A multi-row `INSERT ... VALUES` whose rows belong to different shards, rewritten as one
//! `INSERT` per shard with that shard's rows. The text is rebuilt from the analysis (table,
//! columns and each row's values), so only statements whose values are all constants,
//! parameters, `NULL` or `DEFAULT` can be split, and only without `ON CONFLICT` or
//! `RETURNING` (their text is not kept); anything else is `None`, and the caller refuses it.

use std::fmt::Write;

use route::{Access, Statement, StatementKind, Value};
use shard::ShardId;

/// `name` as a quoted identifier.
fn ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// A string constant that reads the same whatever `standard_conforming_strings` is.
fn string_literal(s: &str, out: &mut String) {
    out.push_str("E'");
    for c in s.chars() {
        match c {
            '\'' => out.push_str("''"),
            '\\' => out.push_str("\\\\"),
            c => out.push(c),
        }
    }
    out.push('\'');
}

/// Per shard (in `rows`' order of first appearance), the `INSERT` of its rows.
pub fn split_insert(stmt: &Statement<'_>, rows: &[ShardId]) -> Option<Vec<(ShardId, String)>> {
    if !matches!(stmt.kind(), StatementKind::Insert { returning: false }) || stmt.on_conflict() {
        return None;
    }
    let values = stmt.insert_values()?;
    if stmt.values_truncated() || values.rows() != rows.len() || values.columns().len() == 0 {
        return None;
    }
    let table = stmt.tables().find(|t| t.access != Access::Read)?;
    let mut head = String::from("INSERT INTO ");
    if let Some(schema) = table.schema {
        head.push_str(&ident(schema));
        head.push('.');
    }
    head.push_str(&ident(table.name));
    let columns: Vec<String> = values.columns().map(ident).collect();
    let _ = write!(head, " ({}) VALUES ", columns.join(", "));
    let mut per_shard: Vec<(ShardId, String)> = Vec::new();
    for (i, &shard) in rows.iter().enumerate() {
        let mut row = String::from("(");
        for (n, v) in values.row(i).enumerate() {
            if n > 0 {
                row.push_str(", ");
            }
            match v {
                Value::Integer(x) => {
                    let _ = write!(row, "{x}");
                }
                Value::Numeric(text) => row.push_str(text),
                Value::String(s) => string_literal(s, &mut row),
                Value::Boolean(b) => row.push_str(if b { "true" } else { "false" }),
                Value::Null => row.push_str("NULL"),
                Value::Param { number, .. } => {
                    let _ = write!(row, "${number}");
                }
                Value::Default => row.push_str("DEFAULT"),
                _ => return None,
            }
        }
        row.push(')');
        match per_shard.iter_mut().find(|(s, _)| *s == shard) {
            Some((_, sql)) => {
                sql.push_str(", ");
                sql.push_str(&row);
            }
            None => per_shard.push((shard, format!("{head}{row}"))),
        }
    }
    Some(per_shard)
}
