//! An `UPDATE` that assigns a sharded table's key column moves the rows whose new key belongs
//! to another shard. Pure text work (no I/O) for the sharded session's `key_move.rs`:
//!
//! 1. Each shard the UPDATE reaches runs it with hidden columns appended to its `RETURNING`
//!    (the client's own columns first): the new row's place (`tableoid:ctid`), its key and the whole row as
//!    text, and the shard's number. PostgreSQL evaluates the `SET` itself, triggers and
//!    defaults included; the client's reply is the shards' with the hidden columns stripped.
//! 2. For each returned row whose new key names another shard: `DELETE ... WHERE tableoid =
//!    ... AND ctid = ANY`
//!    on the shard it is on and `INSERT ... SELECT (row::table).*` on its own, in the same
//!    transaction (two-phase commit across them).
//!
//! What cannot be moved this way is refused ([`KeyMoveError`], SQLSTATE 0A000) before
//! anything runs.

use pg_raw_parse::Node;
use shard::{ShardError, ShardId};

use crate::config::TableRule;

/// Hidden columns appended to the UPDATE's RETURNING, in this order.
pub const HIDDEN: usize = 4;

/// Why a key-changing UPDATE is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("UPDATE of the sharding key of table {table} cannot move rows between shards: {why}")]
pub struct KeyMoveError {
    pub table: String,
    pub why: String,
}

/// A key-changing UPDATE, ready to run.
#[derive(Debug, Clone)]
pub struct KeyMove {
    /// The table as SQL (quoted, schema-qualified when the statement qualified it); also its
    /// row type's name.
    pub table_sql: String,
    /// The statement up to where the shard's number goes, and after it.
    head: String,
    tail: String,
    /// The client asked for RETURNING rows.
    pub client_returning: bool,
}

/// `"name"`, with embedded quotes doubled.
pub fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// `E'...'`: a string literal whatever `standard_conforming_strings` is.
pub fn quote_literal(text: &str) -> String {
    format!("E'{}'", text.replace('\\', "\\\\").replace('\'', "''"))
}

impl KeyMove {
    /// Plans the move for `sql`, one `UPDATE` statement (a Query's text or a Parse's) of the
    /// table `rule` describes.
    pub fn plan(sql: &str, rule: &TableRule) -> Result<KeyMove, KeyMoveError> {
        let refuse = |why: &str| KeyMoveError { table: rule.name.clone(), why: why.to_owned() };
        let parsed =
            pg_raw_parse::parse(sql).map_err(|e| refuse(&format!("the text does not parse: {e}")))?;
        let mut stmts = parsed.iter();
        let (Some(raw), None) = (stmts.next(), stmts.next()) else {
            return Err(refuse("send it as a statement of its own"));
        };
        let Node::UpdateStmt(u) = raw.stmt() else {
            return Err(refuse("only a plain UPDATE statement can move rows"));
        };
        if u.with_clause().is_some() {
            return Err(refuse("WITH is not supported on an UPDATE that moves rows"));
        }
        if u.from_clause().iter().next().is_some() {
            return Err(refuse(
                "UPDATE ... FROM joins rows that may live on other shards; the new key is not computable per row",
            ));
        }
        let mut subquery = false;
        for t in u.target_list() {
            pg_raw_parse::walk::walk(t.val(), |n| subquery |= matches!(n, Node::SubLink(_)));
        }
        if subquery {
            return Err(refuse(
                "a subquery in SET runs on each shard apart, so the new values are not computable per row",
            ));
        }
        let Some(rel) = u.relation() else { return Err(refuse("the statement names no table")) };
        let visible = rel.alias().and_then(|a| a.aliasname()).or_else(|| rel.relname()).unwrap_or("");
        let client_returning = match u.returning_clause() {
            Some(r) if r.options().iter().next().is_some() => {
                return Err(refuse(
                    "RETURNING WITH (OLD/NEW ...) is not supported on an UPDATE that moves rows",
                ))
            }
            Some(r) => r.exprs().iter().next().is_some(),
            None => false,
        };
        let start = usize::try_from(raw.stmt_location).unwrap_or(0);
        let end = match usize::try_from(raw.stmt_len) {
            Ok(0) | Err(_) => sql.len(),
            Ok(n) => start + n,
        };
        let text = sql.get(start..end).ok_or_else(|| refuse("statement bounds"))?;
        let text = text.trim_end_matches(|c: char| c.is_whitespace() || c == ';');
        // A newline first: the text may end in a `--` comment.
        let joiner = if client_returning { "\n, " } else { "\nRETURNING " };
        let head = format!(
            "{text}{joiner}tableoid::oid::text || ':' || ctid::text AS pgvia_ctid, ({key})::text AS pgvia_key, ({row}.*)::text AS pgvia_row, '",
            key = quote_ident(&rule.column),
            row = quote_ident(visible),
        );
        let tail = "'::text AS pgvia_shard".to_owned();
        let table_sql = match rel.schemaname() {
            Some(s) => format!("{}.{}", quote_ident(s), quote_ident(rel.relname().unwrap_or(""))),
            None => quote_ident(rel.relname().unwrap_or("")),
        };
        Ok(KeyMove { table_sql, head, tail, client_returning })
    }

    /// The statement shard `shard` runs.
    pub fn shard_sql(&self, shard: ShardId) -> String {
        format!("{}{shard}{}", self.head, self.tail)
    }

    /// The shard a returned row belongs on, from its key as text (`None`: NULL).
    pub fn home(rule: &TableRule, key: Option<&[u8]>) -> Result<ShardId, String> {
        match key {
            Some(k) => {
                let value = rule.key_type.parse_text(k).map_err(|e| e.to_string())?;
                rule.function.shard_of(&value).map_err(|e| e.to_string())
            }
            // PostgreSQL's hash partitioning puts a NULL key in the partition of remainder 0.
            None if matches!(rule.function, shard::ShardFunction::Hash { .. }) => Ok(0),
            None => Err(ShardError::NotListed("NULL".into()).to_string()),
        }
    }

    /// What the shard a row leaves runs: its rows deleted by `tableoid:ctid` (a `ctid` alone
    /// is not unique in a partitioned or inherited table). `None` if one of them is not in
    /// that form (they come from the shard's own reply).
    pub fn delete_sql(&self, places: &[String]) -> Option<String> {
        let mut by_table: std::collections::BTreeMap<&str, Vec<&str>> = std::collections::BTreeMap::new();
        for place in places {
            let (oid, tid) = place.split_once(':')?;
            let oid_ok = !oid.is_empty() && oid.bytes().all(|b| b.is_ascii_digit());
            let tid_ok =
                tid.starts_with('(') && tid.bytes().all(|b| b.is_ascii_digit() || b"(),".contains(&b));
            if !oid_ok || !tid_ok {
                return None;
            }
            by_table.entry(oid).or_default().push(tid);
        }
        let conds: Vec<String> = by_table
            .iter()
            .map(|(oid, tids)| {
                let list: Vec<String> = tids.iter().map(|t| format!("\"{t}\"")).collect();
                format!("(tableoid = {oid} AND ctid = ANY ('{{{}}}'::tid[]))", list.join(","))
            })
            .collect();
        let cond = if conds.is_empty() { "false".to_owned() } else { conds.join(" OR ") };
        Some(format!("DELETE FROM {} WHERE {cond};", self.table_sql))
    }

    /// The query that lists the table's insertable columns (not generated, not dropped), as
    /// SQL identifiers joined by commas.
    pub fn columns_sql(&self) -> String {
        format!(
            "SELECT pg_catalog.string_agg(pg_catalog.quote_ident(attname), ',' ORDER BY attnum) FROM pg_catalog.pg_attribute WHERE attrelid = {}::pg_catalog.regclass AND attnum > 0 AND NOT attisdropped AND attgenerated = ''",
            quote_literal(&self.table_sql)
        )
    }

    /// What the shard rows arrive on runs: each row (its text form) read as the table's row
    /// type and inserted into `columns` (from [`Self::columns_sql`]: generated columns are
    /// computed again, as PostgreSQL computes them on UPDATE; identity values are kept).
    pub fn insert_sql(&self, rows: &[String], columns: &str) -> String {
        let list: Vec<String> = rows.iter().map(|r| quote_literal(r)).collect();
        format!(
            "INSERT INTO {t} ({columns}) OVERRIDING SYSTEM VALUE SELECT {columns} FROM (SELECT (pgvia_row::{t}).* FROM pg_catalog.unnest(ARRAY[{}]::text[]) AS pgvia_row) AS pgvia_rows;",
            list.join(","),
            t = self.table_sql
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule() -> TableRule {
        TableRule {
            schema: None,
            name: "items".into(),
            column: "id".into(),
            key_type: shard::KeyType::BigInt,
            function: shard::ShardFunction::Hash { shards: 4 },
        }
    }

    #[test]
    fn appends_hidden_columns_after_the_clients() {
        let m =
            KeyMove::plan("UPDATE items SET id = 5 WHERE id = 3 RETURNING id, name;", &rule()).expect("plan");
        assert!(m.client_returning);
        assert_eq!(
            m.shard_sql(2),
            "UPDATE items SET id = 5 WHERE id = 3 RETURNING id, name\n, tableoid::oid::text || ':' || ctid::text AS pgvia_ctid, (\"id\")::text AS pgvia_key, (\"items\".*)::text AS pgvia_row, '2'::text AS pgvia_shard"
        );
        let m = KeyMove::plan("update public.items i set id = id + 1 -- note", &rule()).expect("plan");
        assert!(!m.client_returning);
        assert!(m
            .shard_sql(0)
            .starts_with("update public.items i set id = id + 1 -- note\nRETURNING tableoid"));
        assert!(m.shard_sql(0).contains("(\"i\".*)::text"));
        assert_eq!(m.table_sql, "\"public\".\"items\"");
    }

    #[test]
    fn refuses_what_it_cannot_move() {
        for sql in [
            "UPDATE items SET id = k.id FROM kinds k WHERE items.id = k.id",
            "WITH x AS (SELECT 1) UPDATE items SET id = 4",
            "UPDATE items SET id = 1; UPDATE items SET id = 2",
            "UPDATE items SET id = (SELECT max(id) FROM items) + 1 WHERE id = 3",
            "UPDATE items SET (id, name) = (SELECT 1, 'x') WHERE id = 3",
        ] {
            let e = KeyMove::plan(sql, &rule()).expect_err(sql);
            assert_eq!(e.table, "items");
            assert!(e.to_string().contains("items"), "{e}");
        }
    }

    #[test]
    fn move_statements_quote_rows() {
        let m = KeyMove::plan("UPDATE items SET id = 5", &rule()).expect("plan");
        assert_eq!(
            m.delete_sql(&["16384:(0,1)".into(), "16384:(3,4)".into(), "16390:(0,1)".into()]).expect("delete"),
            "DELETE FROM \"items\" WHERE (tableoid = 16384 AND ctid = ANY ('{\"(0,1)\",\"(3,4)\"}'::tid[])) OR (tableoid = 16390 AND ctid = ANY ('{\"(0,1)\"}'::tid[]));"
        );
        assert_eq!(m.delete_sql(&[]).expect("none"), "DELETE FROM \"items\" WHERE false;");
        assert!(m.delete_sql(&["1:(0,1)'; DROP".into()]).is_none());
        let insert = m.insert_sql(&["(1,\"a'b\\\\c\")".into()], "id,name");
        assert!(insert.contains("E'(1,\"a''b\\\\\\\\c\")'"), "{insert}");
        assert!(
            insert.starts_with("INSERT INTO \"items\" (id,name) OVERRIDING SYSTEM VALUE SELECT id,name FROM")
        );
        assert!(m.columns_sql().contains("E'\"items\"'::pg_catalog.regclass"));
    }
}
