//! HAVING, evaluated on merged groups: comparisons (`=`, `<>`, `<`, `<=`, `>`, `>=`), `IS
//! [NOT] NULL`, `AND`/`OR`/`NOT` over aggregates, grouping columns and constants, with SQL's
//! three-valued logic. Anything else is refused by name.

use std::cmp::Ordering;

use pg_raw_parse::nodes::{A_Expr_Kind, BoolExprType, NullTestType};
use pg_raw_parse::{ConstValue, Node};

use crate::column::ColRef;
use crate::error::MergeError;
use crate::value::{self, Class, Value};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CmpOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

#[derive(Debug, Clone)]
pub(crate) enum Operand {
    Col(ColRef),
    /// A constant's text, read as the type of what it is compared with.
    Const(String),
}

#[derive(Debug, Clone)]
pub(crate) enum Cond {
    And(Vec<Cond>),
    Or(Vec<Cond>),
    Not(Box<Cond>),
    Cmp {
        op: CmpOp,
        left: Operand,
        right: Operand,
    },
    IsNull {
        arg: Operand,
        negated: bool,
    },
    /// A boolean operand on its own (`HAVING bool_or(b)`).
    Truth(Operand),
}

type Resolve<'a> = dyn FnMut(Node<'_>) -> Result<ColRef, MergeError> + 'a;

pub(crate) fn plan(node: Node<'_>, resolve: &mut Resolve<'_>) -> Result<Option<Cond>, MergeError> {
    if matches!(node, Node::None) {
        return Ok(None);
    }
    cond(node, resolve, 0).map(Some)
}

fn cond(node: Node<'_>, resolve: &mut Resolve<'_>, depth: u32) -> Result<Cond, MergeError> {
    if depth > 64 {
        return Err(MergeError::unsupported("HAVING nested too deeply"));
    }
    match node {
        Node::BoolExpr(b) => {
            let mut args = Vec::new();
            for a in b.args() {
                args.push(cond(a, resolve, depth + 1)?);
            }
            Ok(match b.boolop {
                BoolExprType::AND_EXPR => Cond::And(args),
                BoolExprType::OR_EXPR => Cond::Or(args),
                _ => Cond::Not(Box::new(
                    args.pop().ok_or_else(|| MergeError::Syntax("NOT without argument".into()))?,
                )),
            })
        }
        Node::A_Expr(e) if e.kind == A_Expr_Kind::AEXPR_OP => {
            let name: Vec<_> = e.name().iter().filter_map(|n| n.as_str()).collect();
            let op = match name.as_slice() {
                ["="] => CmpOp::Eq,
                ["<>" | "!="] => CmpOp::Ne,
                ["<"] => CmpOp::Lt,
                ["<="] => CmpOp::Le,
                [">"] => CmpOp::Gt,
                [">="] => CmpOp::Ge,
                _ => {
                    return Err(MergeError::unsupported(format!("operator {name:?} in HAVING across shards")))
                }
            };
            Ok(Cond::Cmp { op, left: operand(e.lexpr(), resolve)?, right: operand(e.rexpr(), resolve)? })
        }
        Node::NullTest(t) => Ok(Cond::IsNull {
            arg: operand(t.arg(), resolve)?,
            negated: t.nulltesttype == NullTestType::IS_NOT_NULL,
        }),
        Node::FuncCall(_) | Node::ColumnRef(_) => Ok(Cond::Truth(operand(node, resolve)?)),
        _ => Err(MergeError::unsupported(
            "HAVING condition other than comparisons, IS NULL, AND, OR, NOT across shards",
        )),
    }
}

fn operand(node: Node<'_>, resolve: &mut Resolve<'_>) -> Result<Operand, MergeError> {
    match node {
        Node::A_Const(c) if !c.isnull => Ok(Operand::Const(match c.val() {
            Some(ConstValue::Integer(i)) => i.to_string(),
            Some(ConstValue::Float(s) | ConstValue::String(s)) => s.to_string(),
            Some(ConstValue::Boolean(b)) => (if b { "t" } else { "f" }).to_string(),
            _ => return Err(MergeError::unsupported("constant of this kind in HAVING")),
        })),
        Node::TypeCast(c) if matches!(c.arg(), Node::A_Const(_)) => operand(c.arg(), resolve),
        other => resolve(other).map(Operand::Col),
    }
}

/// A merged cell as HAVING sees it: its text (NULL is `None`), its class and type OID.
pub(crate) type Cell<'a> = (Option<&'a [u8]>, Class, u32);

/// Evaluates `cond`; `None` is SQL's unknown (the group is dropped, like `false`).
/// `text_order`: byte order is the collation's order (else `<`/`>` on text are refused).
pub(crate) fn eval<'a>(
    cond: &Cond,
    cell: &dyn Fn(ColRef) -> Cell<'a>,
    text_order: bool,
) -> Result<Option<bool>, MergeError> {
    Ok(match cond {
        Cond::And(args) => {
            let mut out = Some(true);
            for a in args {
                match eval(a, cell, text_order)? {
                    Some(false) => return Ok(Some(false)),
                    None => out = None,
                    Some(true) => {}
                }
            }
            out
        }
        Cond::Or(args) => {
            let mut out = Some(false);
            for a in args {
                match eval(a, cell, text_order)? {
                    Some(true) => return Ok(Some(true)),
                    None => out = None,
                    Some(false) => {}
                }
            }
            out
        }
        Cond::Not(a) => eval(a, cell, text_order)?.map(|b| !b),
        Cond::IsNull { arg, negated } => {
            let null = match arg {
                Operand::Col(c) => cell(*c).0.is_none(),
                Operand::Const(_) => false,
            };
            Some(null != *negated)
        }
        Cond::Truth(arg) => match value_of(arg, cell, (Class::Bool, 16))? {
            Some(Value::Bool(b)) => Some(b),
            None => None,
            Some(_) => return Err(MergeError::unsupported("non-boolean HAVING operand")),
        },
        Cond::Cmp { op, left, right } => {
            // The column side decides how a constant is read.
            let typed = match (left, right) {
                (Operand::Col(c), _) | (_, Operand::Col(c)) => {
                    let (_, class, oid) = cell(*c);
                    (class, oid)
                }
                _ => (Class::Text, 25),
            };
            if typed.0.is_text() && !text_order && !matches!(op, CmpOp::Eq | CmpOp::Ne) {
                return Err(MergeError::unsupported(
                    "ordering comparison of text in HAVING under a non-C collation",
                ));
            }
            let (Some(a), Some(b)) = (value_of(left, cell, typed)?, value_of(right, cell, typed)?) else {
                return Ok(None);
            };
            let ord = value::compare(&a, &b);
            Some(match op {
                CmpOp::Eq => ord == Ordering::Equal,
                CmpOp::Ne => ord != Ordering::Equal,
                CmpOp::Lt => ord == Ordering::Less,
                CmpOp::Le => ord != Ordering::Greater,
                CmpOp::Gt => ord == Ordering::Greater,
                CmpOp::Ge => ord != Ordering::Less,
            })
        }
    })
}

fn value_of<'a>(
    o: &Operand,
    cell: &dyn Fn(ColRef) -> Cell<'a>,
    (class, oid): (Class, u32),
) -> Result<Option<Value>, MergeError> {
    match o {
        Operand::Const(text) => value::decode_literal(class, oid, text).map(Some),
        Operand::Col(c) => {
            let (text, class, oid) = cell(*c);
            text.map(|t| value::decode(class, oid, t)).transpose()
        }
    }
}
