//! Which subqueries, CTEs, derived tables and window functions the shards can compute alone,
//! given where the tables live ([`Placement`]): then the shard query keeps them whole and the
//! merge treats their results as any other column.
//!
//! A construct is co-located when every row it reads for one answer sits on the shard that
//! computes it:
//! - it reads only tables with the same rows on every shard (omnisharded);
//! - a subquery over one sharded table, correlated by `inner.key = outer.key` (same
//!   co-location class) with the outer query's one sharded table;
//! - a CTE or derived table over one sharded table that keeps each key's rows apart: no
//!   LIMIT/OFFSET/DISTINCT, grouping only by the key, windows partitioned by it; several
//!   sharded relations in one FROM then must be joined on their keys;
//! - a window function whose PARTITION BY has the one sharded table's key, in a query that
//!   does not aggregate.
//!
//! Anything else is refused with 0A000 naming the construct, as before.

use pg_raw_parse::nodes::{
    A_Expr_Kind, BoolExprType, RangeVar, SelectStmt, SetOperation, WindowDef, WithClause,
};
use pg_raw_parse::Node;

use crate::error::MergeError;
pub(crate) use crate::joins::joined_on_keys;
use crate::scan;

/// Where a query's tables live: the planner's input for co-location.
#[derive(Debug, Clone, Default)]
pub struct Placement {
    pub sharded: Vec<ShardedTable>,
    /// Tables not in `sharded` hold the same rows on every shard (omnisharded). When false,
    /// nothing is known of them and nothing that reads them is pushed down.
    pub others_everywhere: bool,
}

/// One sharded table.
#[derive(Debug, Clone)]
pub struct ShardedTable {
    /// The configured schema; `None` matches the name in any schema.
    pub schema: Option<String>,
    pub name: String,
    /// The sharding key column.
    pub column: String,
    /// Tables with equal classes place equal keys on the same shard (same key type and
    /// sharding function).
    pub colocation: String,
}

/// A relation of a FROM list.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Rel {
    /// Same rows on every shard.
    Everywhere,
    /// Rows spread by a key: its co-location class and the key's column name, if exposed.
    Local { class: String, key: Option<String> },
}

/// A FROM relation with the names it is referred to by.
#[derive(Debug, Clone)]
pub(crate) struct Named {
    pub(crate) names: Vec<String>,
    pub(crate) rel: Rel,
    /// Constants its key equals by an AND term of its scope's WHERE (`o.key = 3`, `key = $1`):
    /// relations of one class pinned to the same constant are on one shard, as if joined.
    pub(crate) pins: Vec<String>,
}

/// How many shards run the statement being judged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Spread {
    /// The router sent it to one shard: the rows of every table the router placed by its
    /// own conditions (a pinned schema's, a write inside it) are all there.
    One,
    /// Several shards run it, each on its own rows.
    Many,
}

pub(crate) struct Cx<'p> {
    p: &'p Placement,
    ctes: Vec<(String, Rel)>,
    /// Subqueries being looked into, to bound the recursion.
    depth: u32,
    /// A table whose placement is unknown was met.
    unknown: bool,
    spread: Spread,
    /// Whether a subquery whose key is pinned to the outer relation's constant counts as
    /// correlated with it (see [`pin`]).
    pins_correlate: bool,
}

/// Deeper nests of subqueries than this are refused instead of risking the stack.
const MAX_NESTING: u32 = 16;

pub(crate) fn refuse(what: &str) -> MergeError {
    MergeError::unsupported(what.to_string())
}

pub(crate) const NOT_COLOCATED: &str =
    "subquery over sharded tables that is not correlated on the shard key (it would run per shard)";

/// Checks the statement's subqueries, CTEs, derived tables and window functions: `Ok(true)`
/// when it has some and all are co-located (the planner then lets them through), `Ok(false)`
/// when it has none.
pub(crate) fn check(s: &SelectStmt, p: &Placement) -> Result<bool, MergeError> {
    check_with(s, p, Windows::Checked)
}

/// Whether window functions are judged too: across shards they are; in a query the shard
/// planner sends to one shard (its key conditions name one), every row they see is there.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Windows {
    Checked,
    Ignored,
}

/// [`check`] for a SELECT sent to one shard of several: its subqueries, CTEs and derived
/// tables must be co-located, or that shard would answer them from its own rows alone.
pub(crate) fn check_one_shard(s: &SelectStmt, p: &Placement) -> Result<(), MergeError> {
    check_with(s, p, Windows::Ignored).map(|_| ())
}

fn check_with(s: &SelectStmt, p: &Placement, judge: Windows) -> Result<bool, MergeError> {
    let mut subs = Vec::new();
    let mut windows = Vec::new();
    collect(s, &mut subs, &mut windows)?;
    let derived = from_has_subselect(s.from_clause());
    let constructs = s.with_clause().is_some()
        || !s.window_clause().is_empty()
        || !subs.is_empty()
        || !windows.is_empty()
        || derived;
    // A join is judged as much as a subquery: per shard, a join not on the keys loses rows.
    if !constructs && !several_relations(s.from_clause()) {
        return Ok(false);
    }
    let spread = if judge == Windows::Checked { Spread::Many } else { Spread::One };
    let mut cx = Cx::new(p, spread);
    // Across shards, an aggregate without GROUP BY gives a row on every shard, those
    // without the pinned outer rows too, with a subquery computed there.
    let one_group = s.group_clause().is_empty()
        && (!matches!(s.having_clause(), Node::None)
            || s.target_list().iter().any(|t| scan::has_aggregate(t.val())));
    cx.pins_correlate = spread == Spread::One || !one_group;
    let outer = cx.scope(s)?;
    let locals: Vec<&Named> = outer.iter().filter(|n| matches!(n.rel, Rel::Local { .. })).collect();
    if judge == Windows::Checked && (!windows.is_empty() || !s.window_clause().is_empty()) {
        let grouping = !s.group_clause().is_empty()
            || !matches!(s.having_clause(), Node::None)
            || s.target_list().iter().any(|t| scan::has_aggregate(t.val()));
        if grouping {
            return Err(refuse("window function in an aggregating cross-shard query"));
        }
        let [t] = locals.as_slice() else {
            return Err(refuse("window function across shards not partitioned by one table's shard key"));
        };
        for w in windows.iter().copied().chain(named_windows(s)) {
            if !partitioned_by(s, w, t) {
                return Err(refuse("window function (OVER) not partitioned by the shard key across shards"));
            }
        }
    }
    for sub in subs {
        cx.subquery(sub, &locals)?;
    }
    Ok(constructs)
}

/// Whether a FROM list names more than one relation (a join, or a list).
fn several_relations(from: &pg_raw_parse::list::NodeList) -> bool {
    from.len() > 1 || from.iter().any(|f| matches!(f, Node::JoinExpr(_)))
}

/// Where a statement's CTE would be computed, judged as the planner does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CtePlace {
    /// It reads only tables with the same rows on every shard.
    Everywhere,
    /// Co-located on a shard key: each shard computes its part.
    Local,
    /// Neither: it would run per shard.
    Refused,
    /// It reads a table whose placement is unknown: what computing it across the shards
    /// would give is unknown too.
    Unknown,
}

/// The placement of each CTE of `s`'s own WITH, in order; a refused one counts as being on
/// every shard for the CTEs after it (it is computed first and becomes a constant).
pub(crate) fn cte_places(s: &SelectStmt, p: &Placement) -> Vec<CtePlace> {
    let Some(w) = s.with_clause() else { return Vec::new() };
    let mut cx = Cx::new(p, Spread::Many);
    let mut out = Vec::new();
    for cte in w.ctes() {
        cx.unknown = false;
        let (rel, place) = match cte.ctequery() {
            Node::SelectStmt(q) => match cx.derived(q) {
                Ok(Rel::Everywhere) => (Rel::Everywhere, CtePlace::Everywhere),
                Ok(rel) => (rel, CtePlace::Local),
                Err(_) if cx.unknown => (Rel::Everywhere, CtePlace::Unknown),
                Err(_) => (Rel::Everywhere, CtePlace::Refused),
            },
            _ => (Rel::Everywhere, CtePlace::Refused),
        };
        cx.ctes.push((cte.ctename().unwrap_or_default().to_owned(), rel));
        out.push(place);
    }
    out
}

/// Whether `s` reads only tables with the same rows on every shard (and constants): then
/// one shard's rows are the whole answer.
pub(crate) fn reads_everywhere_only(s: &SelectStmt, p: &Placement) -> bool {
    Cx::new(p, Spread::Many).everywhere(s).unwrap_or(false)
}

impl<'p> Cx<'p> {
    pub(crate) fn new(p: &'p Placement, spread: Spread) -> Cx<'p> {
        Cx { p, ctes: Vec::new(), depth: 0, unknown: false, spread, pins_correlate: true }
    }

    /// The relations of `s`'s FROM (its CTEs first), each sharded pair joined on its keys.
    fn scope(&mut self, s: &SelectStmt) -> Result<Vec<Named>, MergeError> {
        if let Some(w) = s.with_clause() {
            self.with_ctes(w)?;
        }
        let mut rels = Vec::new();
        let from: Vec<Node<'_>> = s.from_clause().iter().collect();
        for f in &from {
            self.add_from_item(*f, &mut rels)?;
        }
        let conds = conjuncts(s.where_clause());
        pin(&mut rels, &conds);
        joined_on_keys(&rels, &from, conds)?;
        Ok(rels)
    }

    /// Records the placement of each CTE of `w`, for the FROM lists that name them.
    pub(crate) fn with_ctes(&mut self, w: &WithClause) -> Result<(), MergeError> {
        for cte in w.ctes() {
            let rel = match cte.ctequery() {
                Node::SelectStmt(q) if w.recursive => {
                    if !self.everywhere(q)? {
                        return Err(refuse("WITH RECURSIVE over sharded tables across shards"));
                    }
                    Rel::Everywhere
                }
                Node::SelectStmt(q) => self.derived(q)?,
                // The router runs a statement with a write inside on the one shard that
                // write's own key conditions name: all of its rows are there.
                _ if self.spread == Spread::One => Rel::Everywhere,
                _ => return Err(refuse("data-modifying WITH across shards")),
            };
            self.ctes.push((cte.ctename().unwrap_or_default().to_owned(), rel));
        }
        Ok(())
    }

    /// A table (or CTE) named in FROM, or a write's target.
    pub(crate) fn table(&mut self, r: &RangeVar) -> Result<Named, MergeError> {
        let name = r.relname().unwrap_or_default().to_owned();
        let alias = r.alias().and_then(|a| a.aliasname()).map(str::to_owned);
        let names = vec![alias.unwrap_or_else(|| name.clone())];
        let cte =
            r.schemaname().is_none().then(|| self.ctes.iter().rev().find(|(n, _)| *n == name)).flatten();
        let rel = match cte {
            Some((_, rel)) => rel.clone(),
            None => match self.p.sharded.iter().find(|t| {
                t.name == name
                    && (t.schema.is_none()
                        || r.schemaname().is_none()
                        || t.schema.as_deref() == r.schemaname())
            }) {
                Some(t) => Rel::Local { class: t.colocation.clone(), key: Some(t.column.clone()) },
                None if self.p.others_everywhere => Rel::Everywhere,
                // On one shard, the router placed such a table itself (a pinned schema's
                // is on that shard whole; an omnisharded one is everywhere).
                None if self.spread == Spread::One => Rel::Everywhere,
                None => {
                    self.unknown = true;
                    return Err(refuse(
                        "join, CTE, subquery or window function over a table whose placement is unknown",
                    ));
                }
            },
        };
        Ok(Named { names, rel, pins: Vec::new() })
    }

    pub(crate) fn add_from_item(&mut self, f: Node<'_>, out: &mut Vec<Named>) -> Result<(), MergeError> {
        match f {
            Node::RangeVar(r) => {
                let named = self.table(r)?;
                out.push(named);
            }
            Node::JoinExpr(j) => {
                self.add_from_item(j.larg(), out)?;
                self.add_from_item(j.rarg(), out)?;
            }
            Node::RangeSubselect(r) => {
                if r.lateral {
                    return Err(refuse("LATERAL subquery across shards"));
                }
                let Node::SelectStmt(q) = r.subquery() else { return Err(refuse("subquery in FROM")) };
                let rel = self.derived(q)?;
                let names = r.alias().and_then(|a| a.aliasname()).map(str::to_owned).into_iter().collect();
                out.push(Named { names, rel, pins: Vec::new() });
            }
            Node::RangeFunction(_) => {
                out.push(Named { names: Vec::new(), rel: Rel::Everywhere, pins: Vec::new() })
            }
            _ => return Err(refuse("FROM item across shards")),
        }
        Ok(())
    }

    /// Runs `f` one subquery deeper; past [`MAX_NESTING`] the statement is refused.
    fn nested<T>(&mut self, f: impl FnOnce(&mut Self) -> Result<T, MergeError>) -> Result<T, MergeError> {
        if self.depth >= MAX_NESTING {
            return Err(refuse("subqueries nested too deeply across shards"));
        }
        self.depth += 1;
        let result = f(self);
        self.depth -= 1;
        result
    }

    /// Whether `q` (and everything in it) reads only tables that are on every shard.
    pub(crate) fn everywhere(&mut self, q: &SelectStmt) -> Result<bool, MergeError> {
        self.nested(|cx| cx.everywhere_in(q))
    }

    fn everywhere_in(&mut self, q: &SelectStmt) -> Result<bool, MergeError> {
        let depth = self.ctes.len();
        let result = (|| {
            if q.op != SetOperation::SETOP_NONE {
                return Ok(everywhere_setop(self, q));
            }
            let rels = match self.scope(q) {
                Ok(r) => r,
                Err(_) => return Ok(false),
            };
            if rels.iter().any(|n| n.rel != Rel::Everywhere) {
                return Ok(false);
            }
            let (mut subs, mut windows) = (Vec::new(), Vec::new());
            collect(q, &mut subs, &mut windows)?;
            for sub in subs {
                own_aggregates(sub)?;
                if !self.everywhere(sub)? {
                    return Ok(false);
                }
            }
            Ok(true)
        })();
        self.ctes.truncate(depth);
        result
    }

    /// A CTE's or derived table's placement, or the reason it is refused.
    fn derived(&mut self, q: &SelectStmt) -> Result<Rel, MergeError> {
        self.nested(|cx| cx.derived_in(q))
    }

    fn derived_in(&mut self, q: &SelectStmt) -> Result<Rel, MergeError> {
        if self.everywhere(q)? {
            return Ok(Rel::Everywhere);
        }
        if q.op != SetOperation::SETOP_NONE {
            return Err(refuse("UNION/INTERSECT/EXCEPT over sharded tables in a subquery across shards"));
        }
        let depth = self.ctes.len();
        let rels = self.scope(q);
        let result = rels.and_then(|rels| self.local_derived(q, &rels));
        self.ctes.truncate(depth);
        result
    }

    fn local_derived(&mut self, q: &SelectStmt, rels: &[Named]) -> Result<Rel, MergeError> {
        const WHY: &str =
            "CTE or subquery in FROM over sharded tables that mixes rows of different shard keys";
        let locals: Vec<&Named> = rels.iter().filter(|n| matches!(n.rel, Rel::Local { .. })).collect();
        let [t] = locals.as_slice() else { return Err(refuse(WHY)) };
        let Rel::Local { class, key: Some(key) } = &t.rel else { return Err(refuse(WHY)) };
        if !matches!(q.limit_count(), Node::None)
            || !matches!(q.limit_offset(), Node::None)
            || !q.distinct_clause().is_empty()
        {
            return Err(refuse(WHY));
        }
        let grouping = !q.group_clause().is_empty()
            || !matches!(q.having_clause(), Node::None)
            || q.target_list().iter().any(|r| scan::has_aggregate(r.val()));
        if grouping && !q.group_clause().iter().any(|g| is_key(g, t, key, true)) {
            return Err(refuse(WHY));
        }
        let (mut subs, mut windows) = (Vec::new(), Vec::new());
        collect(q, &mut subs, &mut windows)?;
        for w in windows.iter().copied().chain(named_windows(q)) {
            if !partitioned_by(q, w, t) {
                return Err(refuse(WHY));
            }
        }
        for sub in subs {
            self.subquery(sub, &[*t])?;
        }
        // The key as the derived relation exposes it.
        let exposed = q.target_list().iter().find_map(|r| {
            if scan::is_star(r.val()) {
                return Some(key.clone());
            }
            is_key(r.val(), t, key, true).then(|| r.name().map_or_else(|| key.clone(), str::to_owned))
        });
        Ok(Rel::Local { class: class.clone(), key: exposed })
    }

    /// A subquery in an expression of a scope whose sharded relations are `outer`.
    pub(crate) fn subquery(&mut self, sub: &SelectStmt, outer: &[&Named]) -> Result<(), MergeError> {
        own_aggregates(sub)?;
        self.nested(|cx| cx.subquery_in(sub, outer))
    }

    fn subquery_in(&mut self, sub: &SelectStmt, outer: &[&Named]) -> Result<(), MergeError> {
        if self.everywhere(sub)? {
            return Ok(());
        }
        let [t] = outer else { return Err(refuse(NOT_COLOCATED)) };
        let Rel::Local { class, key: Some(outer_key) } = &t.rel else { return Err(refuse(NOT_COLOCATED)) };
        if sub.op != SetOperation::SETOP_NONE || sub.with_clause().is_some() {
            return Err(refuse(NOT_COLOCATED));
        }
        let depth = self.ctes.len();
        let rels = self.scope(sub);
        self.ctes.truncate(depth);
        let rels = rels?;
        let locals: Vec<&Named> = rels.iter().filter(|n| matches!(n.rel, Rel::Local { .. })).collect();
        let [u] = locals.as_slice() else { return Err(refuse(NOT_COLOCATED)) };
        let Rel::Local { class: inner_class, key: Some(inner_key) } = &u.rel else {
            return Err(refuse(NOT_COLOCATED));
        };
        // The outer table must be named apart from the inner one, or the inner shadows it.
        if inner_class != class || u.names.iter().any(|n| t.names.contains(n)) {
            return Err(refuse(NOT_COLOCATED));
        }
        let correlated = conjuncts(sub.where_clause()).into_iter().any(|c| match equality(c) {
            Some((a, b)) => {
                (is_key(a, u, inner_key, true) && is_key(b, t, outer_key, false))
                    || (is_key(b, u, inner_key, true) && is_key(a, t, outer_key, false))
            }
            None => false,
        }) || (self.pins_correlate && u.pins.iter().any(|p| t.pins.contains(p)));
        if !correlated {
            return Err(refuse(NOT_COLOCATED));
        }
        let (mut subs, mut windows) = (Vec::new(), Vec::new());
        collect(sub, &mut subs, &mut windows)?;
        for inner in subs {
            own_aggregates(inner)?;
            if !self.everywhere(inner)? {
                return Err(refuse(NOT_COLOCATED));
            }
        }
        Ok(())
    }
}

/// An aggregate in a subquery belongs to the outer query when its columns are all the outer
/// query's (`SELECT (SELECT sum(t.x) FROM kinds LIMIT 1) FROM t` sums `t`); pushed down, it
/// would be one sum per shard. Without the catalog an unqualified column cannot be placed, so
/// the aggregates of a pushed-down subquery must qualify their columns with its own relations.
fn own_aggregates(sub: &SelectStmt) -> Result<(), MergeError> {
    const WHY: &str = "aggregate in a subquery over columns not qualified by the subquery's own tables (an outer query's aggregate would be computed per shard)";
    let mut names = Vec::new();
    fn names_of(n: Node<'_>, out: &mut Vec<String>) {
        match n {
            Node::RangeVar(r) => {
                out.extend(r.alias().and_then(|a| a.aliasname()).or(r.relname()).map(str::to_owned))
            }
            Node::RangeSubselect(r) => out.extend(r.alias().and_then(|a| a.aliasname()).map(str::to_owned)),
            Node::RangeFunction(r) => out.extend(r.alias().and_then(|a| a.aliasname()).map(str::to_owned)),
            Node::JoinExpr(j) => {
                names_of(j.larg(), out);
                names_of(j.rarg(), out);
            }
            _ => {}
        }
    }
    for f in sub.from_clause() {
        names_of(f, &mut names);
    }
    let mut columns = Vec::new();
    for f in sub.from_clause() {
        columns_of(f, &mut columns);
    }
    let mut roots: Vec<Node<'_>> = sub.target_list().iter().map(|t| t.val()).collect();
    roots.extend([sub.where_clause(), sub.having_clause()]);
    roots.extend(sub.sort_clause().iter().map(|sb| sb.node()));
    let mut own = true;
    for root in roots {
        scan::walk(root, 0, &mut |n| {
            let Node::FuncCall(f) = n else { return Ok(true) };
            if f.over().is_some() || crate::agg::aggregate_name(f).is_none() {
                return Ok(true);
            }
            let mut args: Vec<Node<'_>> = f.args().iter().collect();
            args.extend(f.agg_order().iter().map(|sb| sb.node()));
            args.push(f.agg_filter());
            for arg in args {
                scan::walk(arg, 0, &mut |c| {
                    if let Node::ColumnRef(c) = c {
                        let fields: Vec<Option<&str>> = c.fields().iter().map(|f| f.as_str()).collect();
                        own &= match fields.as_slice() {
                            [.., Some(rel), _] => names.iter().any(|n| n == rel),
                            // PostgreSQL binds a bare name in the innermost scope having it.
                            [Some(col)] => columns.iter().any(|c| c == col),
                            _ => false,
                        };
                    }
                    Ok(true)
                })?;
            }
            Ok(false)
        })?;
    }
    if own {
        Ok(())
    } else {
        Err(refuse(WHY))
    }
}

/// The column names a FROM item is known to expose without the catalog: a derived table's
/// (or VALUES list's) and a function's with a column alias list.
fn columns_of(n: Node<'_>, out: &mut Vec<String>) {
    let aliased = |a: Option<&pg_raw_parse::nodes::Alias>, out: &mut Vec<String>| {
        let names: Vec<String> = a
            .map(|a| a.colnames().iter().filter_map(|c| c.as_str().map(str::to_owned)).collect())
            .unwrap_or_default();
        let any = !names.is_empty();
        out.extend(names);
        any
    };
    match n {
        Node::RangeSubselect(r) => {
            if aliased(r.alias(), out) {
                return;
            }
            let Node::SelectStmt(q) = r.subquery() else { return };
            if let Some(row) = q.values_lists().iter().next() {
                let width = match row {
                    Node::NodeList(l) => l.len(),
                    _ => 0,
                };
                out.extend((1..=width).map(|i| format!("column{i}")));
                return;
            }
            for t in q.target_list() {
                let name = t.name().map(str::to_owned).or_else(|| match t.val() {
                    Node::ColumnRef(c) => {
                        c.fields().iter().next_back().and_then(|f| f.as_str()).map(str::to_owned)
                    }
                    _ => None,
                });
                out.extend(name);
            }
        }
        Node::RangeFunction(r) => {
            aliased(r.alias(), out);
        }
        Node::JoinExpr(j) => {
            columns_of(j.larg(), out);
            columns_of(j.rarg(), out);
        }
        _ => {}
    }
}

fn everywhere_setop(cx: &mut Cx<'_>, q: &SelectStmt) -> bool {
    [q.larg(), q.rarg()].into_iter().all(|side| match side {
        Some(s) => cx.everywhere(s).unwrap_or(false),
        None => true,
    })
}

fn from_has_subselect(from: &pg_raw_parse::list::NodeList) -> bool {
    fn item(n: Node<'_>) -> bool {
        match n {
            Node::RangeSubselect(_) => true,
            Node::JoinExpr(j) => item(j.larg()) || item(j.rarg()),
            _ => false,
        }
    }
    from.iter().any(item)
}

/// The subqueries and window definitions in `s`'s own expressions (not inside subqueries).
pub(crate) fn collect<'a>(
    s: &'a SelectStmt,
    subs: &mut Vec<&'a SelectStmt>,
    windows: &mut Vec<&'a WindowDef>,
) -> Result<(), MergeError> {
    let mut roots: Vec<Node<'a>> = Vec::new();
    roots.extend(s.target_list().iter().map(|t| t.val()));
    roots.push(s.where_clause());
    roots.extend(s.group_clause().iter());
    roots.push(s.having_clause());
    roots.extend(s.sort_clause().iter().map(|sb| sb.node()));
    roots.extend(s.distinct_clause().iter());
    roots.extend(s.values_lists().iter());
    from_roots(s.from_clause().iter(), &mut roots);
    collect_in(roots, subs, windows)
}

/// The expressions of FROM items that may hold subqueries: JOIN conditions, the arguments of
/// functions in FROM.
pub(crate) fn from_roots<'a>(items: impl Iterator<Item = Node<'a>>, roots: &mut Vec<Node<'a>>) {
    for n in items {
        match n {
            Node::JoinExpr(j) => {
                roots.push(j.quals());
                from_roots([j.larg(), j.rarg()].into_iter(), roots);
            }
            Node::RangeFunction(_) => roots.push(n),
            _ => {}
        }
    }
}

/// The subqueries and window definitions in `roots` (not inside subqueries).
pub(crate) fn collect_in<'a>(
    roots: Vec<Node<'a>>,
    subs: &mut Vec<&'a SelectStmt>,
    windows: &mut Vec<&'a WindowDef>,
) -> Result<(), MergeError> {
    for root in roots {
        scan::walk(root, 0, &mut |n| {
            match n {
                Node::SubLink(l) => {
                    if let Node::SelectStmt(q) = l.subselect() {
                        subs.push(q);
                    }
                }
                Node::FuncCall(f) => {
                    if let Some(w) = f.over() {
                        windows.push(w);
                    }
                }
                _ => {}
            }
            Ok(true)
        })?;
    }
    Ok(())
}

/// The WINDOW clause's definitions.
fn named_windows(s: &SelectStmt) -> impl Iterator<Item = &WindowDef> {
    s.window_clause().iter().filter_map(|n| match n {
        Node::WindowDef(w) => Some(w),
        _ => None,
    })
}

/// Whether the window (resolved through the WINDOW clause by name) has `t`'s key in its
/// PARTITION BY.
fn partitioned_by(s: &SelectStmt, w: &WindowDef, t: &Named) -> bool {
    let Rel::Local { key: Some(key), .. } = &t.rel else { return false };
    let mut def = w;
    for _ in 0..8 {
        if !def.partition_clause().is_empty() {
            break;
        }
        let Some(name) = def.refname().or(def.name()) else { break };
        match named_windows(s).find(|d| d.name() == Some(name) && !std::ptr::eq(*d, def)) {
            Some(d) => def = d,
            None => break,
        }
    }
    def.partition_clause().iter().any(|p| is_key(p, t, key, true))
}

/// Whether `n` is a column reference to `t`'s `key` (unqualified only when `bare` allows).
pub(crate) fn is_key(n: Node<'_>, t: &Named, key: &str, bare: bool) -> bool {
    let Node::ColumnRef(c) = n else { return false };
    let fields: Vec<Option<&str>> = c.fields().iter().map(|f| f.as_str()).collect();
    match fields.as_slice() {
        [Some(col)] => bare && *col == key,
        [.., Some(rel), Some(col)] => *col == key && t.names.iter().any(|n| n == rel),
        _ => false,
    }
}

/// Records in each sharded relation of a scope the constants its key is set equal to by
/// `conds` (its WHERE's AND terms): a bare key column only when the scope has one relation.
/// Two keys equal to one constant are equal: a join proof, and a subquery pinned to the outer
/// relation's constant is correlated with it (only the shard of the outer rows computes it),
/// except across shards under an aggregate without GROUP BY, which has a row on every shard.
pub(crate) fn pin(rels: &mut [Named], conds: &[Node<'_>]) {
    let alone = rels.len() == 1;
    for c in conds {
        let Some((a, b)) = equality(*c) else { continue };
        for (col, value) in [(a, b), (b, a)] {
            let Some(value) = constant(value) else { continue };
            for n in rels.iter_mut() {
                let Rel::Local { key: Some(key), .. } = &n.rel else { continue };
                if is_key(col, n, key, alone) {
                    n.pins.push(value.clone());
                }
            }
        }
    }
}

/// A literal or a parameter, as text that is equal only for the same value.
fn constant(n: Node<'_>) -> Option<String> {
    match n {
        Node::A_Const(c) if !c.isnull => c.val().map(|v| format!("{v:?}")),
        Node::ParamRef(p) => Some(format!("${}", p.number)),
        _ => None,
    }
}

/// The top-level AND terms of a condition.
pub(crate) fn conjuncts(n: Node<'_>) -> Vec<Node<'_>> {
    match n {
        Node::BoolExpr(b) if b.boolop == BoolExprType::AND_EXPR => {
            b.args().iter().flat_map(conjuncts).collect()
        }
        Node::None => Vec::new(),
        other => vec![other],
    }
}

/// `a = b`'s sides.
pub(crate) fn equality(n: Node<'_>) -> Option<(Node<'_>, Node<'_>)> {
    let Node::A_Expr(e) = n else { return None };
    let op: Vec<_> = e.name().iter().filter_map(|n| n.as_str()).collect();
    (e.kind == A_Expr_Kind::AEXPR_OP && op == ["="]).then(|| (e.lexpr(), e.rexpr()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MergePlan;

    fn placement() -> Placement {
        let t = ShardedTable { schema: None, name: "t".into(), column: "id".into(), colocation: "a".into() };
        let u = ShardedTable { schema: None, name: "u".into(), column: "id".into(), colocation: "b".into() };
        Placement { sharded: vec![t, u], others_everywhere: true }
    }

    fn sqlstate(sql: &str) -> &'static str {
        match MergePlan::for_select_placed(sql, &placement()) {
            Ok(_) => "ok",
            Err(e) => e.sqlstate(),
        }
    }

    #[test]
    fn colocation_classes_and_keys_decide() {
        assert_eq!(sqlstate("SELECT id, sum(x) OVER (PARTITION BY id) FROM t ORDER BY id"), "ok");
        assert_eq!(sqlstate("SELECT id, sum(x) OVER (PARTITION BY t.id, x) FROM t ORDER BY id"), "ok");
        assert_eq!(sqlstate("SELECT id, sum(x) OVER (PARTITION BY x) FROM t ORDER BY id"), "0A000");
        // Same key name, other sharding function: not co-located.
        assert_eq!(
            sqlstate("SELECT id FROM t WHERE EXISTS (SELECT 1 FROM u WHERE u.id = t.id) ORDER BY id"),
            "0A000"
        );
        assert_eq!(sqlstate("SELECT count(*) FROM t JOIN u ON u.id = t.id WHERE t.x IN (SELECT 1)"), "0A000");
        assert_eq!(sqlstate("SELECT id FROM t WHERE x IN (SELECT k FROM kinds) ORDER BY id"), "ok");
    }

    #[test]
    fn deep_nesting_is_refused_quickly() {
        let mut sql = "SELECT id FROM t".to_string();
        for i in 0..60 {
            sql = format!("SELECT * FROM ({sql}) x{i}");
        }
        let start = std::time::Instant::now();
        assert_eq!(sqlstate(&sql), "0A000");
        assert!(start.elapsed() < std::time::Duration::from_secs(2), "{:?}", start.elapsed());
    }
}
