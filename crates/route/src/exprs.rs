//! Walking expressions, looking for what hides inside them: subqueries (more tables,
//! possibly data-modifying), function calls (writes, session effects) and row locks.

use pg_raw_parse::nodes::{JsonAggConstructor, JsonBehavior, JsonOutput, JsonValueExpr, WindowDef};
use pg_raw_parse::Node;

use crate::walk::{Walker, W};

impl<'t> Walker<'t, '_> {
    /// Walks one expression (or any node that may appear among expressions).
    pub fn expr(&mut self, node: Node<'t>) -> W {
        if is_leaf(node) {
            return Ok(());
        }
        self.nested(|w| w.expr_inner(node))
    }

    fn expr_inner(&mut self, node: Node<'t>) -> W {
        match node {
            Node::NodeList(l) => self.list(l),
            Node::A_Expr(e) => {
                self.expr(e.lexpr())?;
                self.expr(e.rexpr())
            }
            Node::BoolExpr(b) => self.list(b.args()),
            Node::SubLink(s) => {
                self.expr(s.testexpr())?;
                self.dml(s.subselect())
            }
            Node::FuncCall(f) => {
                self.func_call(f)?;
                self.list(f.args())?;
                for s in f.agg_order() {
                    self.expr(s.node())?;
                }
                self.expr(f.agg_filter())?;
                self.window(f.over())
            }
            Node::TypeCast(c) => self.expr(c.arg()),
            Node::CollateClause(c) => self.expr(c.arg()),
            Node::NullTest(t) => self.expr(t.arg()),
            Node::BooleanTest(t) => self.expr(t.arg()),
            Node::CaseExpr(c) => {
                self.expr(c.arg())?;
                self.list(c.args())?;
                self.expr(c.defresult())
            }
            Node::CaseWhen(c) => {
                self.expr(c.expr())?;
                self.expr(c.result())
            }
            Node::CoalesceExpr(c) => self.list(c.args()),
            Node::MinMaxExpr(m) => self.list(m.args()),
            Node::RowExpr(r) => self.list(r.args()),
            Node::A_ArrayExpr(a) => self.list(a.elements()),
            Node::A_Indirection(i) => {
                self.expr(i.arg())?;
                self.list(i.indirection())
            }
            Node::A_Indices(i) => {
                self.expr(i.lidx())?;
                self.expr(i.uidx())
            }
            Node::NamedArgExpr(n) => self.expr(n.arg()),
            Node::GroupingFunc(g) => self.list(g.args()),
            Node::GroupingSet(g) => self.list(g.content()),
            Node::XmlExpr(x) => {
                self.list(x.named_args())?;
                self.list(x.args())
            }
            Node::XmlSerialize(x) => self.expr(x.expr()),
            Node::MultiAssignRef(m) => self.expr(m.source()),
            Node::ResTarget(r) => {
                self.expr(r.val())?;
                self.list(r.indirection())
            }
            Node::SortBy(s) => self.expr(s.node()),
            Node::WindowDef(d) => self.window(Some(d)),
            Node::IndexElem(e) => self.expr(e.expr()),
            Node::RangeTableFunc(t) => {
                self.expr(t.docexpr())?;
                self.expr(t.rowexpr())?;
                self.list(t.namespaces())?;
                for col in t.columns() {
                    self.expr(col.colexpr())?;
                    self.expr(col.coldefexpr())?;
                }
                Ok(())
            }
            Node::JsonTable(t) => {
                self.json_value(t.context_item())?;
                self.list(t.passing())?;
                for col in t.columns() {
                    self.expr(Node::JsonTableColumn(col))?;
                }
                self.json_behavior(t.on_error())
            }
            Node::JsonTableColumn(c) => {
                self.list(c.columns())?;
                self.json_behavior(c.on_empty())?;
                self.json_behavior(c.on_error())
            }
            Node::JsonValueExpr(v) => self.json_value(Some(v)),
            Node::JsonParseExpr(p) => self.json_value(p.expr()),
            Node::JsonScalarExpr(s) => self.expr(s.expr()),
            Node::JsonSerializeExpr(s) => self.json_value(s.expr()),
            Node::JsonObjectConstructor(c) => {
                for kv in c.exprs() {
                    self.expr(kv.key())?;
                    self.json_value(kv.value())?;
                }
                self.json_output(c.output())
            }
            Node::JsonArrayConstructor(c) => {
                for v in c.exprs() {
                    self.json_value(Some(v))?;
                }
                self.json_output(c.output())
            }
            Node::JsonArrayQueryConstructor(c) => self.dml(c.query()),
            Node::JsonObjectAgg(a) => {
                self.json_agg(a.constructor())?;
                if let Some(kv) = a.arg() {
                    self.expr(kv.key())?;
                    self.json_value(kv.value())?;
                }
                Ok(())
            }
            Node::JsonArrayAgg(a) => {
                self.json_agg(a.constructor())?;
                self.json_value(a.arg())
            }
            Node::JsonFuncExpr(f) => {
                self.json_value(f.context_item())?;
                self.expr(f.pathspec())?;
                self.list(f.passing())?;
                self.json_behavior(f.on_empty())?;
                self.json_behavior(f.on_error())
            }
            Node::JsonKeyValue(kv) => {
                self.expr(kv.key())?;
                self.json_value(kv.value())
            }
            Node::JsonArgument(a) => self.json_value(a.val()),
            Node::JsonBehavior(b) => self.expr(b.expr()),
            Node::JsonIsPredicate(p) => self.expr(p.expr()),
            Node::JsonAggConstructor(c) => self.json_agg(Some(c)),
            Node::SelectStmt(_)
            | Node::InsertStmt(_)
            | Node::UpdateStmt(_)
            | Node::DeleteStmt(_)
            | Node::MergeStmt(_) => self.dml(node),
            Node::RangeVar(rv) => self.relation(rv, crate::model::Access::Read, true),
            Node::RangeSubselect(_)
            | Node::RangeFunction(_)
            | Node::JoinExpr(_)
            | Node::RangeTableSample(_) => self.source(node),
            // A node kind this walk does not know could hide a subquery or a writing
            // function: assume the worst for routing.
            _ => {
                self.writes = true;
                Ok(())
            }
        }
    }

    fn window(&mut self, def: Option<&'t WindowDef>) -> W {
        let Some(d) = def else {
            return Ok(());
        };
        self.list(d.partition_clause())?;
        for s in d.order_clause() {
            self.expr(s.node())?;
        }
        self.expr(d.start_offset())?;
        self.expr(d.end_offset())
    }

    fn json_value(&mut self, v: Option<&'t JsonValueExpr>) -> W {
        match v {
            Some(v) => {
                self.expr(v.raw_expr())?;
                self.expr(v.formatted_expr())
            }
            None => Ok(()),
        }
    }

    fn json_behavior(&mut self, b: Option<&'t JsonBehavior>) -> W {
        match b {
            Some(b) => self.expr(b.expr()),
            None => Ok(()),
        }
    }

    fn json_output(&mut self, _o: Option<&'t JsonOutput>) -> W {
        // A RETURNING type: no expressions inside.
        Ok(())
    }

    fn json_agg(&mut self, c: Option<&'t JsonAggConstructor>) -> W {
        let Some(c) = c else {
            return Ok(());
        };
        self.expr(c.agg_filter())?;
        self.list(c.agg_order())?;
        self.window(c.over())
    }
}

/// Nodes with nothing inside that matters; skipping them early keeps the common case (a
/// column, a constant, a parameter) free of the depth bookkeeping.
#[inline]
fn is_leaf(node: Node<'_>) -> bool {
    matches!(
        node,
        Node::None
            | Node::ColumnRef(_)
            | Node::ParamRef(_)
            | Node::A_Const(_)
            | Node::A_Star(_)
            | Node::SQLValueFunction(_)
            | Node::SetToDefault(_)
            | Node::CurrentOfExpr(_)
            | Node::String(_)
            | Node::Integer(_)
            | Node::Float(_)
            | Node::Boolean(_)
            | Node::BitString(_)
            | Node::TypeName(_)
            | Node::JsonFormat(_)
            | Node::JsonOutput(_)
            | Node::JsonTablePathSpec(_)
            | Node::RoleSpec(_)
            | Node::DefElem(_)
            | Node::Alias(_)
            | Node::LockingClause(_)
    )
}
