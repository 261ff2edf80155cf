//! The `WHERE` clause as shard routing reads it: a tree of `AND`, `OR` and comparisons of a
//! column with constants or parameters (`=`, `IN`, `= ANY`, `<`, `<=`, `>`, `>=`,
//! `BETWEEN`), everything else an opaque "unknown" leaf.
//!
//! An unknown leaf never narrows anything: the shard layer treats it as "any row", so a
//! tree read here can only ever route to a superset of the shards that hold matching rows.
//! The equality comparisons reached through `AND`s alone are also recorded as the flat
//! [`Predicate`](crate::Predicate) list older callers read.

use pg_raw_parse::nodes::{A_Expr, A_Expr_Kind, BoolExprType};
use pg_raw_parse::Node;

use crate::model::PredicateOp;
use crate::predicates::operator;
use crate::scope::column_parts;
use crate::scope::FromScope;
use crate::scratch::range;
use crate::store::{CondData, PredData, Range32};
use crate::walk::{Abort, Walker, W};

/// How a comparison's column relates to its value(s), before values are recorded.
enum Shape<'t> {
    /// `column op value`, the operator already turned to put the column on the left.
    Compare(PredicateOp, Node<'t>),
    /// `column IN (...)` / `column = ANY(ARRAY[...])`.
    List(Node<'t>),
    /// `column = ANY($1)`: one array-valued operand.
    AnyArray(Node<'t>),
    /// `column BETWEEN low AND high`.
    Between(Node<'t>, Node<'t>),
}

impl<'t> Walker<'t, '_> {
    /// Records the `WHERE` clause's condition tree (and its top-level equality predicates).
    pub fn where_predicates(&mut self, where_: Node<'t>, scope: FromScope<'t>) -> W {
        if matches!(where_, Node::None) {
            return Ok(());
        }
        self.condition(where_, scope, true)
    }

    /// The condition tree of a data-modifying statement inside another: recorded for shard
    /// routing only (not as the statement's predicates); returns where it lies.
    pub fn nested_condition(&mut self, where_: Node<'t>, scope: FromScope<'t>) -> Result<Range32, Abort> {
        let k = self.s.conds.len();
        if !matches!(where_, Node::None) {
            self.condition(where_, scope, false)?;
        }
        Ok(range(k, self.s.conds.len()))
    }

    fn condition(&mut self, node: Node<'t>, scope: FromScope<'t>, top: bool) -> W {
        if self.s.conds.len() >= self.limits.max_values {
            // The tree is bounded like the values: what does not fit says nothing.
            self.truncated = true;
            self.s.conds.push(CondData::Unknown);
            return Ok(());
        }
        match node {
            Node::BoolExpr(b) if b.boolop != BoolExprType::NOT_EXPR => {
                let and = b.boolop == BoolExprType::AND_EXPR;
                let at = self.s.conds.len();
                self.s.conds.push(CondData::Unknown);
                let mut children = 0u32;
                for arg in b.args() {
                    children += 1;
                    if self.s.conds.len() >= self.limits.max_values {
                        // One unknown child stands for all the rest: it narrows nothing.
                        self.truncated = true;
                        self.s.conds.push(CondData::Unknown);
                        break;
                    }
                    self.nested(|w| w.condition(arg, scope, top && and))?;
                }
                let len = (self.s.conds.len() - at) as u32;
                self.s.conds[at] =
                    if and { CondData::And { children, len } } else { CondData::Or { children, len } };
                Ok(())
            }
            Node::A_Expr(e) => {
                self.comparison(e, scope, top);
                Ok(())
            }
            _ => {
                self.s.conds.push(CondData::Unknown);
                Ok(())
            }
        }
    }

    /// Records one comparison as a leaf (two for `BETWEEN`), or an unknown leaf.
    fn comparison(&mut self, e: &'t A_Expr, scope: FromScope<'t>, top: bool) {
        let Some((column, shape)) = read_shape(e) else {
            self.s.conds.push(CondData::Unknown);
            return;
        };
        let Some((qualifier, col)) = column_parts(column) else {
            self.s.conds.push(CondData::Unknown);
            return;
        };
        let (schema, table) = self.resolve(scope, qualifier);
        let column = self.s.intern(col);
        let leaf = |w: &mut Self, op: PredicateOp, values: &mut dyn Iterator<Item = Node<'t>>, n: usize| {
            let start = w.s.values.len();
            if !w.push_values(values, n) {
                return None;
            }
            Some(PredData { schema, table, column, op, values: range(start, w.s.values.len()) })
        };
        let pred = match shape {
            Shape::Compare(op, v) => leaf(self, op, &mut std::iter::once(v), 1),
            Shape::AnyArray(v) => leaf(self, PredicateOp::AnyArray, &mut std::iter::once(v), 1),
            Shape::List(Node::NodeList(list)) => leaf(self, PredicateOp::In, &mut list.iter(), list.len()),
            Shape::List(Node::A_ArrayExpr(a)) => {
                leaf(self, PredicateOp::In, &mut a.elements().iter(), a.elements().len())
            }
            Shape::List(_) => None,
            Shape::Between(low, high) => {
                let low = leaf(self, PredicateOp::GreaterEq, &mut std::iter::once(low), 1);
                let high = leaf(self, PredicateOp::LessEq, &mut std::iter::once(high), 1);
                self.s.conds.push(CondData::And { children: 2, len: 3 });
                for p in [low, high] {
                    self.s.conds.push(p.map_or(CondData::Unknown, CondData::Leaf));
                }
                return;
            }
        };
        match pred {
            Some(p) => {
                if top && matches!(p.op, PredicateOp::Equals | PredicateOp::In | PredicateOp::AnyArray) {
                    self.s.preds.push(p);
                }
                self.s.conds.push(CondData::Leaf(p));
            }
            None => self.s.conds.push(CondData::Unknown),
        }
    }
}

/// The column and what it is compared with, when the expression is one routing reads.
fn read_shape<'t>(e: &'t A_Expr) -> Option<(&'t pg_raw_parse::nodes::ColumnRef, Shape<'t>)> {
    let op = operator(e.name())?;
    match e.kind {
        A_Expr_Kind::AEXPR_OP => {
            let (column, other, flipped) = match (e.lexpr(), e.rexpr()) {
                (Node::ColumnRef(c), other) => (c, other, false),
                (other, Node::ColumnRef(c)) => (c, other, true),
                _ => return None,
            };
            let op = match (op, flipped) {
                ("=", _) => PredicateOp::Equals,
                ("<", false) | (">", true) => PredicateOp::Less,
                ("<=", false) | (">=", true) => PredicateOp::LessEq,
                (">", false) | ("<", true) => PredicateOp::Greater,
                (">=", false) | ("<=", true) => PredicateOp::GreaterEq,
                _ => return None,
            };
            Some((column, Shape::Compare(op, other)))
        }
        A_Expr_Kind::AEXPR_IN if op == "=" => match e.lexpr() {
            Node::ColumnRef(c) => Some((c, Shape::List(e.rexpr()))),
            _ => None,
        },
        A_Expr_Kind::AEXPR_OP_ANY if op == "=" => match (e.lexpr(), e.rexpr()) {
            (Node::ColumnRef(c), a @ Node::A_ArrayExpr(_)) => Some((c, Shape::List(a))),
            (Node::ColumnRef(c), v) => Some((c, Shape::AnyArray(v))),
            _ => None,
        },
        A_Expr_Kind::AEXPR_BETWEEN => match (e.lexpr(), e.rexpr()) {
            (Node::ColumnRef(c), Node::NodeList(bounds)) if bounds.len() == 2 => {
                let mut b = bounds.iter();
                Some((c, Shape::Between(b.next()?, b.next()?)))
            }
            _ => None,
        },
        _ => None,
    }
}
