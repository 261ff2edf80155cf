//! The raw material for shard routing: `column = value` predicates of a statement's own
//! `WHERE` clause, and the rows of `INSERT ... VALUES`.
//!
//! Values are recorded up to `max_values` per query; past that the statement is marked
//! truncated instead of growing without bound (an `IN` list of 100,000 parameters costs
//! one pass and bounded memory).

use pg_raw_parse::const_val::ConstValue;
use pg_raw_parse::list::NodeList;
use pg_raw_parse::nodes::{InsertStmt, TypeName};
use pg_raw_parse::Node;

use crate::scope::{FromScope, Resolved};
use crate::scratch::range;
use crate::store::{InsertData, Span, ValueData};
use crate::walk::Walker;

/// OIDs of the built-in types a parameter is commonly cast to, for hashing shard keys.
fn builtin_type_oid(t: &TypeName) -> u32 {
    let Some(name) = t.names().iter().next_back().and_then(|s| s.sval()) else {
        return 0;
    };
    let array = !t.array_bounds().is_empty();
    match (name, array) {
        ("bool", false) => 16,
        ("bytea", false) => 17,
        ("int8", false) => 20,
        ("int2", false) => 21,
        ("int4", false) => 23,
        ("text", false) => 25,
        ("oid", false) => 26,
        ("float4", false) => 700,
        ("float8", false) => 701,
        ("bpchar", false) => 1042,
        ("varchar", false) => 1043,
        ("date", false) => 1082,
        ("timestamp", false) => 1114,
        ("timestamptz", false) => 1184,
        ("numeric", false) => 1700,
        ("uuid", false) => 2950,
        ("bool", true) => 1000,
        ("int2", true) => 1005,
        ("int4", true) => 1007,
        ("text", true) => 1009,
        ("varchar", true) => 1015,
        ("int8", true) => 1016,
        ("numeric", true) => 1231,
        ("uuid", true) => 2951,
        _ => 0,
    }
}

/// The operator of an `A_Expr`, `=` or `pg_catalog.=` alike; `None` for other schemas.
pub(crate) fn operator(name: &NodeList) -> Option<&str> {
    let mut parts = name.iter().filter_map(|n| n.as_str());
    match (parts.next(), parts.next(), parts.next()) {
        (Some(op), None, None) | (Some("pg_catalog"), Some(op), None) => Some(op),
        _ => None,
    }
}

impl<'t> Walker<'t, '_> {
    /// Turns a literal, a parameter or a cast of either into a value.
    pub fn value_of(&mut self, node: Node<'t>) -> ValueData {
        match node {
            Node::A_Const(c) if c.isnull => ValueData::Null,
            Node::A_Const(c) => match c.val() {
                Some(ConstValue::Integer(i)) => ValueData::Integer(i64::from(i)),
                Some(ConstValue::Float(f)) => match f.parse::<i64>() {
                    Ok(i) => ValueData::Integer(i),
                    Err(_) => ValueData::Numeric(self.s.intern(f)),
                },
                Some(ConstValue::String(s)) => ValueData::String(self.s.intern(s)),
                Some(ConstValue::Boolean(b)) => ValueData::Boolean(b),
                _ => ValueData::Expression,
            },
            Node::ParamRef(p) => {
                let number = u32::try_from(p.number).unwrap_or(0);
                let oid =
                    number.checked_sub(1).and_then(|i| self.param_oids.get(i as usize)).copied().unwrap_or(0);
                ValueData::Param { number, type_oid: oid }
            }
            Node::TypeCast(c) => match self.value_of(c.arg()) {
                ValueData::Param { number, type_oid: 0 } => {
                    ValueData::Param { number, type_oid: c.type_name().map_or(0, builtin_type_oid) }
                }
                v => v,
            },
            Node::SetToDefault(_) => ValueData::Default,
            _ => ValueData::Expression,
        }
    }

    /// Reserves room for `n` more values, or marks the statement truncated.
    pub(crate) fn room_for(&mut self, n: usize) -> bool {
        if self.s.values.len() + n > self.limits.max_values {
            self.truncated = true;
            false
        } else {
            true
        }
    }

    /// Appends the values if all are literals or parameters; leaves nothing behind otherwise.
    pub(crate) fn push_values(&mut self, nodes: impl Iterator<Item = Node<'t>>, n: usize) -> bool {
        if !self.room_for(n) {
            return false;
        }
        let start = self.s.values.len();
        let arena = self.s.arena.len();
        for node in nodes {
            let v = self.value_of(node);
            if matches!(v, ValueData::Expression | ValueData::Default) {
                self.s.values.truncate(start);
                self.s.arena.truncate(arena);
                return false;
            }
            self.s.values.push(v);
        }
        true
    }

    pub(crate) fn resolve(
        &mut self,
        scope: FromScope<'t>,
        qualifier: Option<(Option<&'t str>, &'t str)>,
    ) -> (Option<Span>, Option<Span>) {
        let resolved = scope.resolve(&|n: &str| self.is_cte(n), qualifier);
        match resolved {
            Resolved::Table(rv) => {
                let schema = rv.schemaname().map(|s| self.s.intern(s));
                let table = rv.relname().map(|t| self.s.intern(t));
                (schema, table)
            }
            Resolved::NotATable | Resolved::Unknown => (None, None),
        }
    }

    /// For `INSERT ... VALUES`: the column list and every row's values.
    pub fn insert_values(&mut self, s: &'t InsertStmt) -> Option<InsertData> {
        let Node::SelectStmt(sel) = s.select_stmt() else {
            return None;
        };
        let rows = sel.values_lists();
        if rows.is_empty() || sel.larg().is_some() {
            return None;
        }
        let width = match rows.first() {
            Some(Node::NodeList(first)) => first.len(),
            _ => return None,
        };
        let cols = s.cols();
        if !cols.is_empty() && cols.len() != width {
            return None;
        }
        let c0 = self.s.columns.len();
        for c in cols {
            if let Node::ResTarget(rt) = c {
                let span = self.s.intern(rt.name().unwrap_or(""));
                self.s.columns.push(span);
            }
        }
        let v0 = self.s.values.len();
        for row in rows {
            let Node::NodeList(row) = row else {
                self.s.values.truncate(v0);
                return None;
            };
            if row.len() != width {
                self.s.values.truncate(v0);
                return None;
            }
            if !self.room_for(width) {
                break;
            }
            for v in row {
                let value = self.value_of(v);
                self.s.values.push(value);
            }
        }
        Some(InsertData {
            columns: range(c0, self.s.columns.len()),
            values: range(v0, self.s.values.len()),
            width: width as u32,
        })
    }
}
