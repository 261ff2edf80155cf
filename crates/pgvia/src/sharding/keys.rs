//! A statement's `WHERE` clause (route's condition tree) read for one sharded table: each
//! comparison of that table's key column with constants or parameters becomes a
//! [`KeyCond`] leaf with the values read in the key's type; everything else is
//! [`KeyCond::Any`], which narrows nothing.

use std::ops::Bound;

use route::{Condition, Predicate, PredicateOp, Value as Literal};
use shard::{KeyCond, KeyType, Value};

use super::params::{read_array, read_scalar, Params, Raw, ValueError};
use super::Reasons;
use crate::config::TableRule;

/// Reads `cond` for `table`. `only_table` says the statement names no other table, so an
/// unqualified column the analysis could not pin to a table is still this table's.
/// Values that cannot be read are noted in `notes` and read as "any key".
pub fn key_cond(
    cond: Condition<'_>,
    table: &TableRule,
    params: &Params<'_>,
    only_table: bool,
    notes: &mut Reasons,
) -> KeyCond {
    match cond {
        Condition::And(children) => {
            KeyCond::And(children.map(|c| key_cond(c, table, params, only_table, notes)).collect())
        }
        Condition::Or(children) => {
            KeyCond::Or(children.map(|c| key_cond(c, table, params, only_table, notes)).collect())
        }
        Condition::Unknown => KeyCond::Any,
        Condition::Predicate(p) => {
            if !is_key_of(&p, table, only_table) {
                return KeyCond::Any;
            }
            match leaf(&p, table.key_type, params) {
                Ok(c) => c,
                Err(e) => {
                    notes.add(|| format!("{}.{}: {e}; read as any key", table.name, table.column));
                    KeyCond::Any
                }
            }
        }
    }
}

/// Whether the predicate's column is the table's key column.
fn is_key_of(p: &Predicate<'_>, table: &TableRule, only_table: bool) -> bool {
    if p.column() != table.column {
        return false;
    }
    match p.table() {
        Some((schema, name)) => table.matches(schema, name),
        None => only_table,
    }
}

fn leaf(p: &Predicate<'_>, key: KeyType, params: &Params<'_>) -> Result<KeyCond, ValueError> {
    let one = |values: &mut dyn Iterator<Item = Literal<'_>>| -> Result<Option<Value>, ValueError> {
        match values.next() {
            Some(v) => literal(v, key, params),
            None => Err(ValueError::Unreadable),
        }
    };
    let mut values = p.values();
    Ok(match p.op() {
        PredicateOp::Equals => KeyCond::OneOf(one(&mut values)?.into_iter().collect()),
        PredicateOp::In => {
            let mut keys = Vec::with_capacity(values.len());
            for v in values {
                keys.extend(literal(v, key, params)?);
            }
            KeyCond::OneOf(keys)
        }
        PredicateOp::AnyArray => match values.next() {
            Some(Literal::Param { number, type_oid }) => {
                let raw = params.get(number).ok_or(ValueError::Unreadable)?;
                KeyCond::OneOf(read_array(raw, type_oid, key)?)
            }
            _ => return Err(ValueError::Unreadable),
        },
        op => match one(&mut values)? {
            // `key < NULL` holds for no row.
            None => KeyCond::OneOf(Vec::new()),
            Some(v) => match op {
                PredicateOp::Less => KeyCond::Between(Bound::Unbounded, Bound::Excluded(v)),
                PredicateOp::LessEq => KeyCond::Between(Bound::Unbounded, Bound::Included(v)),
                PredicateOp::Greater => KeyCond::Between(Bound::Excluded(v), Bound::Unbounded),
                _ => KeyCond::Between(Bound::Included(v), Bound::Unbounded),
            },
        },
    })
}

/// One literal or parameter as a key; `None` for NULL (equal to nothing).
pub fn literal(v: Literal<'_>, key: KeyType, params: &Params<'_>) -> Result<Option<Value>, ValueError> {
    let int_key = matches!(key, KeyType::SmallInt | KeyType::Integer | KeyType::BigInt);
    match v {
        Literal::Null => Ok(None),
        // Integers of every width hash and compare alike, as in PostgreSQL's integer_ops.
        Literal::Integer(i) if int_key => Ok(Some(Value::Int(i))),
        Literal::Integer(i) => Ok(Some(key.parse_text(i.to_string().as_bytes())?)),
        Literal::String(s) => Ok(Some(key.parse_text(s.as_bytes())?)),
        Literal::Numeric(s) => Ok(Some(key.parse_text(s.as_bytes())?)),
        Literal::Param { number, type_oid } => match params.get(number) {
            Some(raw @ (Raw::Text(_) | Raw::Binary(_))) => read_scalar(raw, type_oid, key),
            Some(Raw::Null) => Ok(None),
            Some(Raw::Unreadable) | None => Err(ValueError::Unreadable),
        },
        Literal::Boolean(_) | Literal::Default | Literal::Expression => Err(ValueError::Unreadable),
    }
}
