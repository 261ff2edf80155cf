//! Read-only scans of a SELECT's tree: constructs the merge refuses (subqueries, CTEs,
//! window functions...) and where aggregates are.
//!
//! A construct we cannot evaluate across shards is refused by name rather than run on each
//! shard, which would give a silently wrong answer.

use pg_raw_parse::nodes::SelectStmt;
use pg_raw_parse::Node;

use crate::agg;
use crate::error::MergeError;

/// Deeper expressions than this are refused instead of risking the stack.
const MAX_DEPTH: u32 = 256;

/// `pushed_down`: the statement's subqueries, CTEs and window functions were found
/// co-located (`colocate::check`) and go to the shards whole.
pub(crate) fn refuse_unsupported(s: &SelectStmt, pushed_down: bool) -> Result<(), MergeError> {
    if s.with_clause().is_some() && !pushed_down {
        return Err(MergeError::unsupported("WITH (common table expressions) across shards"));
    }
    if s.into_clause().is_some() {
        return Err(MergeError::unsupported("SELECT ... INTO across shards"));
    }
    if !s.values_lists().is_empty() {
        return Err(MergeError::unsupported("VALUES across shards"));
    }
    if !s.window_clause().is_empty() && !pushed_down {
        return Err(MergeError::unsupported("WINDOW clause (window functions) across shards"));
    }
    let check = |n: Node<'_>| walk(n, 0, &mut |n| refuse_node(n, pushed_down));
    for t in s.target_list() {
        check(t.val())?;
    }
    for f in s.from_clause() {
        check(f)?;
    }
    check(s.where_clause())?;
    for g in s.group_clause() {
        check(g)?;
    }
    check(s.having_clause())?;
    for sb in s.sort_clause() {
        check(sb.node())?;
    }
    for d in s.distinct_clause() {
        check(d)?;
    }
    check(s.limit_count())?;
    check(s.limit_offset())
}

fn refuse_node(n: Node<'_>, pushed_down: bool) -> Result<bool, MergeError> {
    match n {
        Node::SubLink(_) | Node::RangeSubselect(_) if pushed_down => Ok(false),
        Node::FuncCall(f) if pushed_down && f.over().is_some() => Ok(true),
        Node::SubLink(_) | Node::RangeSubselect(_) => {
            Err(MergeError::unsupported("subquery in a cross-shard query (it would run per shard)"))
        }
        Node::FuncCall(f) if f.over().is_some() => {
            Err(MergeError::unsupported("window function (OVER) across shards"))
        }
        Node::GroupingFunc(_) => Err(MergeError::unsupported("GROUPING() across shards")),
        _ => Ok(true),
    }
}

/// True if `n` contains an aggregate call.
pub(crate) fn has_aggregate(n: Node<'_>) -> bool {
    let mut found = false;
    let _ = walk(n, 0, &mut |n| {
        if let Node::FuncCall(f) = n {
            if f.over().is_none() && agg::aggregate_name(f).is_some() {
                found = true;
                return Ok(false);
            }
        }
        Ok(true)
    });
    found
}

/// `*` or `t.*`.
pub(crate) fn is_star(n: Node<'_>) -> bool {
    match n {
        Node::ColumnRef(c) => c.fields().iter().any(|f| matches!(f, Node::A_Star(_))),
        _ => false,
    }
}

/// Visits `n` and its sub-expressions (not into subqueries); `visit` returns whether to
/// descend.
pub(crate) fn walk<'a>(
    n: Node<'a>,
    depth: u32,
    visit: &mut dyn FnMut(Node<'a>) -> Result<bool, MergeError>,
) -> Result<(), MergeError> {
    if depth > MAX_DEPTH {
        return Err(MergeError::unsupported("expression nested too deeply"));
    }
    if matches!(n, Node::None) || !visit(n)? {
        return Ok(());
    }
    let mut go = |c: Node<'a>| walk(c, depth + 1, visit);
    match n {
        Node::NodeList(l) => l.iter().try_for_each(go),
        Node::A_Expr(e) => {
            go(e.lexpr())?;
            go(e.rexpr())
        }
        Node::BoolExpr(b) => b.args().iter().try_for_each(go),
        Node::FuncCall(f) => {
            f.args().iter().try_for_each(&mut go)?;
            for s in f.agg_order() {
                go(s.node())?;
            }
            go(f.agg_filter())
        }
        Node::TypeCast(c) => go(c.arg()),
        Node::CollateClause(c) => go(c.arg()),
        Node::NullTest(t) => go(t.arg()),
        Node::BooleanTest(t) => go(t.arg()),
        Node::CaseExpr(c) => {
            go(c.arg())?;
            c.args().iter().try_for_each(&mut go)?;
            go(c.defresult())
        }
        Node::CaseWhen(c) => {
            go(c.expr())?;
            go(c.result())
        }
        Node::CoalesceExpr(c) => c.args().iter().try_for_each(go),
        Node::MinMaxExpr(m) => m.args().iter().try_for_each(go),
        Node::RowExpr(r) => r.args().iter().try_for_each(go),
        Node::A_ArrayExpr(a) => a.elements().iter().try_for_each(go),
        Node::A_Indirection(i) => {
            go(i.arg())?;
            i.indirection().iter().try_for_each(go)
        }
        Node::NamedArgExpr(a) => go(a.arg()),
        Node::GroupingSet(g) => g.content().iter().try_for_each(go),
        Node::JoinExpr(j) => {
            go(j.larg())?;
            go(j.rarg())?;
            go(j.quals())
        }
        Node::RangeFunction(r) => r.functions().iter().try_for_each(go),
        Node::ResTarget(r) => go(r.val()),
        Node::SortBy(s) => go(s.node()),
        Node::SubLink(l) => go(l.testexpr()),
        // `SET (a, b) = (SELECT ...)` in an UPDATE.
        Node::MultiAssignRef(m) => go(m.source()),
        _ => Ok(()),
    }
}

/// The name PostgreSQL gives an output column with no alias (its `FigureColname`), for the
/// forms a bare ORDER BY name can match: `u::text` is named `u`, `lower(x)` is `lower`.
/// `None` where PostgreSQL names it `?column?`, which no unquoted name matches.
pub(crate) fn output_name(n: Node<'_>) -> Option<&str> {
    match n {
        Node::ColumnRef(c) => c.fields().iter().next_back().and_then(|f| f.as_str()),
        Node::FuncCall(f) => f.funcname().iter().next_back().and_then(|p| p.as_str()),
        Node::TypeCast(t) => output_name(t.arg())
            .or_else(|| t.type_name().and_then(|t| t.names().iter().next_back().and_then(|p| p.sval()))),
        Node::CollateClause(c) => output_name(c.arg()),
        Node::CaseExpr(_) => Some("case"),
        Node::CoalesceExpr(_) => Some("coalesce"),
        Node::A_ArrayExpr(_) => Some("array"),
        Node::RowExpr(_) => Some("row"),
        _ => None,
    }
}
