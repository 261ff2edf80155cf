//! From a SELECT's parse tree to a merge plan: what each shard runs and how the merger
//! combines the shards' rows.
//!
//! The tree says what the query means; the text is cut with the tokenizer's spans (the raw
//! tree has start offsets only). The shard query keeps the user's FROM/WHERE/GROUP BY text
//! verbatim and changes only the target list (aggregates replaced by their shard parts,
//! hidden columns appended) and the tail (ORDER BY kept or dropped, LIMIT pushed as
//! `LIMIT n+offset`, HAVING dropped: it is evaluated after the merge).

use pg_raw_parse::nodes::{LimitOption, ResTarget, SelectStmt, SetOperation, SortByDir, SortByNulls};
use pg_raw_parse::{ConstValue, Node};

use crate::agg::{self, AggSpec};
use crate::colocate::{self, Placement};
use crate::column::ColRef;
use crate::count::count_of;
pub(crate) use crate::count::Count;
use crate::error::MergeError;
use crate::having::{self, Cond};
use crate::lex::{self, Kind, Tok};
use crate::scan;

#[derive(Debug, Clone, Copy)]
pub(crate) struct SortKey {
    pub col: ColRef,
    pub desc: bool,
    pub nulls_first: bool,
    /// `COLLATE "C"` (or POSIX): byte order whatever the database's collation.
    pub bytewise: bool,
}

#[derive(Debug, Clone)]
pub(crate) enum Distinct {
    None,
    All,
    On(Vec<ColRef>),
}

/// One merged column of an aggregating query.
#[derive(Debug, Clone)]
pub(crate) enum OutCol {
    /// A grouping expression (or anything functionally dependent on one): any shard's value.
    Plain,
    /// An aggregate; `extra` are the shard columns of its parts after the first.
    Agg { spec: AggSpec, name: Option<String>, extra: Vec<usize> },
}

#[derive(Debug, Clone)]
pub(crate) struct Grouping {
    /// Every merged column, visible then hidden; merged column `j`'s first part is shard
    /// column `j`.
    pub cols: Vec<OutCol>,
    pub keys: Vec<ColRef>,
    pub having: Option<Cond>,
}

/// How the merger combines rows.
#[derive(Debug, Clone)]
pub(crate) struct Spec {
    /// Visible columns; `None` for `SELECT *` (known from the shards' RowDescription).
    pub visible: Option<usize>,
    pub hidden: usize,
    pub sort: Vec<SortKey>,
    pub distinct: Distinct,
    pub offset: u64,
    pub limit: Option<u64>,
    /// Where LIMIT and OFFSET come from; parameters are bound per execution.
    pub limit_at: Count,
    pub offset_at: Count,
    pub grouping: Option<Grouping>,
}

#[derive(Debug, Clone)]
pub(crate) enum PlanKind {
    /// Nothing to merge: the shards' rows concatenated are the answer.
    Plain,
    Merge(Box<Spec>),
}

/// What each shard runs, and how their rows become the client's result.
#[derive(Debug, Clone)]
pub struct MergePlan {
    pub(crate) shard_sql: String,
    pub(crate) kind: PlanKind,
    /// The statement reads only tables with the same rows on every shard (a CTE computed
    /// first is such a constant): the first shard's rows are the answer, the others' are
    /// dropped.
    pub(crate) one_shard: bool,
}

impl MergePlan {
    /// Plans one SELECT statement. Constructs that cannot be merged exactly are refused
    /// with [`MergeError::Unsupported`] (SQLSTATE 0A000) naming them.
    pub fn for_select(sql: &str) -> Result<MergePlan, MergeError> {
        MergePlan::for_select_placed(sql, &Placement::default())
    }

    /// [`MergePlan::for_select`] knowing where the tables live: subqueries, CTEs, derived
    /// tables and window functions the shards can compute alone (co-located, see
    /// [`Placement`]) stay whole in the shard query; others are refused as before.
    pub fn for_select_placed(sql: &str, placement: &Placement) -> Result<MergePlan, MergeError> {
        let parsed = pg_raw_parse::parse(sql).map_err(|e| MergeError::Syntax(e.to_string()))?;
        let mut stmts = parsed.iter();
        let (Some(raw), None) = (stmts.next(), stmts.next()) else {
            return Err(MergeError::Syntax("expected exactly one statement".into()));
        };
        let start = usize::try_from(raw.stmt_location).unwrap_or(0);
        let end = match usize::try_from(raw.stmt_len) {
            Ok(0) | Err(_) => sql.len(),
            Ok(n) => start + n,
        };
        let text = sql.get(start..end).ok_or_else(|| MergeError::Syntax("statement bounds".into()))?;
        let Node::SelectStmt(s) = raw.stmt() else {
            return Err(MergeError::unsupported("only SELECT statements are merged"));
        };
        let pushed_down = colocate::check(s, placement)?;
        scan::refuse_unsupported(s, pushed_down)?;
        // A WITH clause (co-located, checked above) goes to the shards as written, in front
        // of the main SELECT the planner rewrites.
        let main = if s.with_clause().is_some() {
            let toks = lex::tokens(text)?;
            let at = toks
                .iter()
                .find(|t| t.depth == 0 && t.is_word(text, "select"))
                .ok_or_else(|| MergeError::Syntax("WITH without its SELECT".into()))?;
            at.start
        } else {
            0
        };
        // Locations in the tree are offsets into `sql`; the planner works on `text`.
        let mut plan = Planner::new(&text[main..], start + main)?.plan(s)?;
        if main > 0 {
            plan.shard_sql.insert_str(0, &text[..main]);
        }
        plan.one_shard = colocate::reads_everywhere_only(s, placement);
        Ok(plan)
    }

    /// The SQL every shard runs.
    pub fn shard_sql(&self) -> &str {
        &self.shard_sql
    }

    /// The 1-based parameter numbers of a `LIMIT $n` / `OFFSET $m`, whose values the merger
    /// needs ([`crate::Merger::bind_params`]) before it can finish.
    pub fn limit_params(&self) -> (Option<usize>, Option<usize>) {
        let param = |c: Count| match c {
            Count::Param(p) => Some(p),
            _ => None,
        };
        match &self.kind {
            PlanKind::Merge(s) => (param(s.limit_at), param(s.offset_at)),
            PlanKind::Plain => (None, None),
        }
    }

    /// True when one shard's rows are the whole answer (the statement reads only tables on
    /// every shard, constants among them, even when nothing is known of unlisted tables):
    /// the merger keeps the first shard's rows only.
    pub fn one_shard(&self) -> bool {
        self.one_shard
    }

    /// True when the shards' rows need no merging (plain concatenation).
    pub fn is_plain(&self) -> bool {
        matches!(self.kind, PlanKind::Plain)
    }
}

/// One target-list item.
pub(crate) struct Item<'t> {
    pub res: &'t ResTarget,
    /// The expression's tokens, alias removed.
    pub expr: std::ops::Range<usize>,
    pub norm: String,
}

/// A hidden column being built.
pub(crate) struct Hidden {
    pub text: String,
    pub norm: String,
    pub agg: Option<AggSpec>,
}

pub(crate) struct Planner<'s> {
    pub(crate) sql: &'s str,
    /// Offset of `sql` in the string the tree's locations refer to.
    base: usize,
    pub(crate) toks: Vec<Tok>,
    pub(crate) hidden: Vec<Hidden>,
}

/// Clause keywords at the top level, in the order SELECT allows them.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Clauses {
    pub targets: usize,
    pub from: Option<usize>,
    pub group: Option<usize>,
    pub having: Option<usize>,
    pub window: Option<usize>,
    pub order: Option<usize>,
    pub limit: Option<usize>,
    pub locking: Option<usize>,
    pub end: usize,
}

impl<'s> Planner<'s> {
    fn new(sql: &'s str, base: usize) -> Result<Planner<'s>, MergeError> {
        Ok(Planner { sql, base, toks: lex::tokens(sql)?, hidden: Vec::new() })
    }

    fn plan(mut self, s: &SelectStmt) -> Result<MergePlan, MergeError> {
        if s.op != SetOperation::SETOP_NONE {
            return Err(MergeError::unsupported("UNION/INTERSECT/EXCEPT across shards"));
        }
        let c = self.clauses()?;
        let items = self.items(s, &c)?;
        let grouping = !s.group_clause().is_empty()
            || !matches!(s.having_clause(), Node::None)
            || items.iter().any(|i| scan::has_aggregate(i.res.val()));
        let limit_at = count_of(s.limit_count(), "LIMIT")?;
        let offset_at = count_of(s.limit_offset(), "OFFSET")?;
        if s.limit_option == LimitOption::LIMIT_OPTION_WITH_TIES {
            return Err(MergeError::unsupported("FETCH ... WITH TIES across shards"));
        }
        let distinct = self.distinct(s, &items)?;
        let star = items.iter().any(|i| scan::is_star(i.res.val()));
        if !grouping
            && s.sort_clause().is_empty()
            && limit_at == Count::Absent
            && matches!(offset_at, Count::Absent | Count::Const(0))
            && matches!(distinct, Distinct::None)
        {
            return Ok(MergePlan {
                shard_sql: self.sql.to_string(),
                kind: PlanKind::Plain,
                one_shard: false,
            });
        }
        if c.locking.is_some() {
            return Err(MergeError::unsupported("FOR UPDATE/SHARE in a merged cross-shard query"));
        }
        if grouping && star {
            return Err(MergeError::unsupported("SELECT * with aggregates or GROUP BY across shards"));
        }
        let sort = self.sort(s, &items, &c, grouping)?;
        let mut cols = Vec::new();
        let mut keys = Vec::new();
        let mut having = None;
        if grouping {
            for item in &items {
                cols.push(self.out_col(item)?);
            }
            keys = self.group_keys(s, &items, &c)?;
            having = having::plan(s.having_clause(), &mut |node| self.having_operand(node, &items))?;
        }
        let visible = (!star).then_some(items.len());
        let hidden = self.hidden.len();
        // Shards return the first LIMIT + OFFSET rows; the merge skips and limits.
        let pushed = match (limit_at, offset_at) {
            (Count::Absent, _) => None,
            _ if grouping => None,
            (l, Count::Absent | Count::Const(0)) => Some(l.sql()),
            (Count::Const(l), Count::Const(o)) => Some(l.saturating_add(o).to_string()),
            (l, o) => Some(format!("{} + {}", l.sql(), o.sql())),
        };
        let mut tail = pushed.as_ref().map(|p| format!(" LIMIT {p}")).unwrap_or_default();
        // A parameter the shard query no longer uses must still appear in it (Bind supplies
        // every parameter): a zero OFFSET that mentions it keeps it typed and harmless.
        let unused: Vec<String> = [limit_at, offset_at]
            .into_iter()
            .filter(|c| {
                matches!(c, Count::Param(_)) && !pushed.as_ref().is_some_and(|p| p.contains(&c.sql()))
            })
            .map(Count::sql)
            .collect();
        if !unused.is_empty() {
            tail.push_str(&format!(" OFFSET 0 * ({})", unused.join(" + ")));
        }
        let shard_sql = self.shard_sql(&items, &c, grouping, &mut cols, &tail)?;
        let grouping = grouping.then_some(Grouping { cols, keys, having });
        let (limit, offset) = (limit_at.value(), offset_at.value().unwrap_or(0));
        let spec = Spec { visible, hidden, sort, distinct, offset, limit, limit_at, offset_at, grouping };
        Ok(MergePlan { shard_sql, kind: PlanKind::Merge(Box::new(spec)), one_shard: false })
    }

    pub(crate) fn tok_text(&self, r: std::ops::Range<usize>) -> &'s str {
        lex::text(self.sql, &self.toks[r])
    }

    fn norm(&self, r: std::ops::Range<usize>) -> String {
        lex::normalized(self.sql, &self.toks[r])
    }

    fn word_at(&self, i: usize, w: &str) -> bool {
        self.toks.get(i).is_some_and(|t| t.depth == 0 && t.is_word(self.sql, w))
    }

    fn clauses(&self) -> Result<Clauses, MergeError> {
        if !self.word_at(0, "select") {
            return Err(MergeError::unsupported(
                "only plain SELECT ... statements are merged (no VALUES/TABLE)",
            ));
        }
        let mut c = Clauses { targets: 1, end: self.toks.len(), ..Clauses::default() };
        if self.word_at(1, "all") {
            c.targets = 2;
        } else if self.word_at(1, "distinct") {
            c.targets = 2;
            if self.word_at(2, "on") {
                // DISTINCT ON ( ... ): skip to the matching ')'.
                let close = self
                    .toks
                    .get(3..)
                    .unwrap_or_default()
                    .iter()
                    .position(|t| t.kind == Kind::Close && t.depth == 0)
                    .ok_or_else(|| MergeError::Syntax("DISTINCT ON without ')'".into()))?;
                c.targets = 3 + close + 1;
            }
        }
        for i in c.targets..self.toks.len() {
            let t = self.toks[i];
            if t.depth != 0 {
                continue;
            }
            if t.kind == Kind::Semicolon {
                c.end = i;
                break;
            }
            let by = |w: &str| t.is_word(self.sql, w) && self.word_at(i + 1, "by");
            let slot = if t.is_word(self.sql, "from") && !(i > 0 && self.word_at(i - 1, "distinct")) {
                &mut c.from
            } else if by("group") {
                &mut c.group
            } else if t.is_word(self.sql, "having") {
                &mut c.having
            } else if t.is_word(self.sql, "window") {
                &mut c.window
            } else if by("order") {
                &mut c.order
            } else if ["limit", "offset", "fetch"].iter().any(|w| t.is_word(self.sql, w)) {
                &mut c.limit
            } else if t.is_word(self.sql, "for") {
                &mut c.locking
            } else {
                continue;
            };
            slot.get_or_insert(i);
        }
        Ok(c)
    }

    /// The first clause keyword after the target list.
    fn targets_end(c: &Clauses) -> usize {
        [c.from, c.group, c.having, c.window, c.order, c.limit, c.locking]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(c.end)
    }

    fn items<'t>(&self, s: &'t SelectStmt, c: &Clauses) -> Result<Vec<Item<'t>>, MergeError> {
        let range = c.targets..Self::targets_end(c);
        let spans = lex::split_commas(&self.toks[range.clone()], 0);
        let targets: Vec<&ResTarget> = s.target_list().iter().collect();
        if spans.len() != targets.len() {
            return Err(MergeError::Syntax("cannot delimit the target list".into()));
        }
        let mut items = Vec::new();
        for (res, span) in targets.into_iter().zip(spans) {
            let mut r = range.start + span.start..range.start + span.end;
            if let Some(alias) = res.name() {
                let last = self.toks[r.end - 1];
                let text = &self.sql[last.start..last.end];
                let matches = match last.kind {
                    Kind::Word => text.eq_ignore_ascii_case(alias),
                    Kind::Quoted => text.trim_matches('"').replace("\"\"", "\"") == alias,
                    _ => false,
                };
                if matches && r.len() > 1 {
                    r.end -= 1;
                    if self.toks[r.end - 1].is_word(self.sql, "as") {
                        r.end -= 1;
                    }
                }
            }
            let norm = self.norm(r.clone());
            items.push(Item { res, expr: r, norm });
        }
        Ok(items)
    }

    fn distinct(&mut self, s: &SelectStmt, items: &[Item<'_>]) -> Result<Distinct, MergeError> {
        let list = s.distinct_clause();
        if list.is_empty() {
            return Ok(Distinct::None);
        }
        if list.len() == 1 && list.get(0).is_some_and(|n| matches!(n, Node::None)) {
            return Ok(Distinct::All);
        }
        // DISTINCT ON ( a, b ): tokens 4.. up to the matching ')'.
        let close =
            3 + self.toks[3..].iter().position(|t| t.kind == Kind::Close && t.depth == 0).unwrap_or(0);
        let spans = lex::split_commas(&self.toks[4..close], 1);
        if spans.len() != list.len() {
            return Err(MergeError::Syntax("cannot delimit DISTINCT ON".into()));
        }
        let mut cols = Vec::new();
        for (node, span) in list.iter().zip(spans) {
            cols.push(self.resolve(node, 4 + span.start..4 + span.end, items, false, true)?);
        }
        Ok(Distinct::On(cols))
    }

    fn sort(
        &mut self,
        s: &SelectStmt,
        items: &[Item<'_>],
        c: &Clauses,
        grouping: bool,
    ) -> Result<Vec<SortKey>, MergeError> {
        let Some(order) = c.order else { return Ok(Vec::new()) };
        let end = [c.limit, c.locking].into_iter().flatten().min().unwrap_or(c.end);
        let spans = lex::split_commas(&self.toks[order + 2..end], 0);
        let sorts: Vec<_> = s.sort_clause().iter().collect();
        if spans.len() != sorts.len() {
            return Err(MergeError::Syntax("cannot delimit ORDER BY".into()));
        }
        let mut keys = Vec::new();
        for (sb, span) in sorts.into_iter().zip(spans) {
            let mut r = order + 2 + span.start..order + 2 + span.end;
            if sb.sortby_dir == SortByDir::SORTBY_USING {
                return Err(MergeError::unsupported("ORDER BY ... USING across shards"));
            }
            // Strip `NULLS FIRST|LAST` and `ASC|DESC` from the item's end.
            if r.len() > 2 && self.toks[r.end - 2].is_word(self.sql, "nulls") {
                r.end -= 2;
            }
            if r.len() > 1 && ["asc", "desc"].iter().any(|w| self.toks[r.end - 1].is_word(self.sql, w)) {
                r.end -= 1;
            }
            let desc = sb.sortby_dir == SortByDir::SORTBY_DESC;
            let nulls_first = match sb.sortby_nulls {
                SortByNulls::SORTBY_NULLS_FIRST => true,
                SortByNulls::SORTBY_NULLS_LAST => false,
                _ => desc,
            };
            let col = self.resolve(sb.node(), r, items, grouping, true)?;
            // resolve() refused any other explicit collation.
            let bytewise = matches!(sb.node(), Node::CollateClause(_));
            keys.push(SortKey { col, desc, nulls_first, bytewise });
        }
        Ok(keys)
    }

    fn group_keys(
        &mut self,
        s: &SelectStmt,
        items: &[Item<'_>],
        c: &Clauses,
    ) -> Result<Vec<ColRef>, MergeError> {
        let Some(group) = c.group else { return Ok(Vec::new()) };
        let end =
            [c.having, c.window, c.order, c.limit, c.locking].into_iter().flatten().min().unwrap_or(c.end);
        let mut start = group + 2;
        if self.word_at(start, "all") || self.word_at(start, "distinct") {
            start += 1;
        }
        let spans = lex::split_commas(&self.toks[start..end], 0);
        let nodes: Vec<_> = s.group_clause().iter().collect();
        if spans.len() != nodes.len() {
            return Err(MergeError::Syntax("cannot delimit GROUP BY".into()));
        }
        let mut keys = Vec::new();
        for (node, span) in nodes.into_iter().zip(spans) {
            if matches!(node, Node::GroupingSet(_)) {
                return Err(MergeError::unsupported("GROUPING SETS/ROLLUP/CUBE across shards"));
            }
            keys.push(self.resolve(node, start + span.start..start + span.end, items, false, true)?);
        }
        Ok(keys)
    }

    /// Which merged column an ORDER BY / GROUP BY / DISTINCT ON / HAVING expression is:
    /// an output column by ordinal, alias or identical text, else a new hidden column.
    fn resolve(
        &mut self,
        node: Node<'_>,
        r: std::ops::Range<usize>,
        items: &[Item<'_>],
        grouping: bool,
        output_refs: bool,
    ) -> Result<ColRef, MergeError> {
        // ORDER BY, GROUP BY and DISTINCT ON may name output columns by position or alias;
        // HAVING may not (PostgreSQL reports the unknown column, so the shard will too).
        if let Node::A_Const(c) = node {
            if let (true, Some(ConstValue::Integer(k))) = (output_refs, c.val()) {
                let k = usize::try_from(k)
                    .ok()
                    .filter(|k| *k >= 1)
                    .ok_or_else(|| MergeError::Syntax(format!("position {k} is not in the select list")))?;
                return Ok(ColRef::Visible(k - 1));
            }
        }
        if let Node::CollateClause(cc) = node {
            let name: Vec<_> = cc.collname().iter().filter_map(|n| n.as_str()).collect();
            if !matches!(name.last(), Some(&("C" | "POSIX" | "ucs_basic")))
                || name.len() > 1 && name[0] != "pg_catalog"
            {
                return Err(MergeError::unsupported(format!("ordering by COLLATE {name:?} across shards")));
            }
        }
        if let (Node::ColumnRef(cr), true) = (node, output_refs) {
            let fields: Vec<_> = cr.fields().iter().collect();
            if let [Node::String(f)] = fields.as_slice() {
                let name = f.sval().unwrap_or("");
                // As PostgreSQL, a bare name is an output column's first, by its alias or
                // the name PostgreSQL gives it (`SELECT u::text ... ORDER BY u` sorts the text).
                let named =
                    |i: &Item<'_>| i.res.name().or_else(|| scan::output_name(i.res.val())) == Some(name);
                if let Some(i) = items.iter().position(named) {
                    return Ok(ColRef::Visible(i));
                }
            }
        }
        let norm = self.norm(r.clone());
        if let Some(i) = items.iter().position(|i| i.norm == norm) {
            return Ok(ColRef::Visible(i));
        }
        if let Some(k) = self.hidden.iter().position(|h| h.norm == norm) {
            return Ok(ColRef::Hidden(k));
        }
        let text = self.tok_text(r.clone()).to_string();
        let agg = match node {
            Node::FuncCall(f) if grouping => match agg::aggregate_name(f) {
                Some(name) => Some(agg::plan_call(f, &name, self.sql, &self.toks[r])?),
                None => None,
            },
            _ => None,
        };
        if agg.is_none() && grouping && scan::has_aggregate(node) {
            return Err(MergeError::unsupported(format!(
                "expression over aggregates ({text}) across shards"
            )));
        }
        self.hidden.push(Hidden { text, norm, agg });
        Ok(ColRef::Hidden(self.hidden.len() - 1))
    }

    fn out_col(&self, item: &Item<'_>) -> Result<OutCol, MergeError> {
        let val = item.res.val();
        if let Node::FuncCall(f) = val {
            if let Some(name) = agg::aggregate_name(f) {
                let spec = agg::plan_call(f, &name, self.sql, &self.toks[item.expr.clone()])?;
                return Ok(OutCol::Agg {
                    spec,
                    name: item.res.name().map(str::to_string),
                    extra: Vec::new(),
                });
            }
        }
        if scan::has_aggregate(val) {
            let text = self.tok_text(item.expr.clone());
            return Err(MergeError::unsupported(format!(
                "expression over aggregates ({text}) across shards"
            )));
        }
        Ok(OutCol::Plain)
    }

    /// A HAVING operand: an aggregate call or a column, as a merged column.
    fn having_operand(&mut self, node: Node<'_>, items: &[Item<'_>]) -> Result<ColRef, MergeError> {
        let loc = match node {
            Node::FuncCall(f) => f.location,
            Node::ColumnRef(c) => c.location,
            _ => {
                return Err(MergeError::unsupported(
                    "HAVING operand other than an aggregate, a column or a constant",
                ))
            }
        };
        let at = usize::try_from(loc).ok().and_then(|l| l.checked_sub(self.base));
        let first = at
            .and_then(|l| self.toks.iter().position(|t| t.start == l))
            .ok_or_else(|| MergeError::Syntax("cannot locate a HAVING operand".into()))?;
        let end = operand_end(self.sql, &self.toks, first);
        self.resolve(node, first..end, items, true, false)
    }
}

/// The end (exclusive token index) of an operand starting at `first`: a dotted name, or a
/// call with its parenthesised arguments and an optional `FILTER (...)`.
fn operand_end(sql: &str, toks: &[Tok], first: usize) -> usize {
    let depth = toks[first].depth;
    let mut i = first;
    // name, schema.name or table.column: names joined by dots, so `city IS NOT NULL` ends
    // after `city` (the words after it are not the operand's).
    let name = |i: usize| {
        toks.get(i).is_some_and(|t| t.depth == depth && matches!(t.kind, Kind::Word | Kind::Quoted))
    };
    let dot = |i: usize| {
        toks.get(i).is_some_and(|t| t.depth == depth && t.kind == Kind::Other && &sql[t.start..t.end] == ".")
    };
    if name(i) {
        i += 1;
        while dot(i) && name(i + 1) {
            i += 2;
        }
    }
    let close_after = |i: usize| {
        toks[i + 1..].iter().position(|t| t.kind == Kind::Close && t.depth == depth).map(|p| i + 1 + p + 1)
    };
    if i < toks.len() && toks[i].kind == Kind::Open && toks[i].depth == depth {
        i = close_after(i).unwrap_or(toks.len());
        if i + 1 < toks.len() && toks[i].is_word(sql, "filter") && toks[i + 1].kind == Kind::Open {
            i = close_after(i + 1).unwrap_or(toks.len());
        }
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shard(sql: &str) -> String {
        MergePlan::for_select(sql).expect(sql).shard_sql().to_string()
    }

    fn refused(sql: &str) -> String {
        match MergePlan::for_select(sql) {
            Err(e @ MergeError::Unsupported(_)) => e.to_string(),
            other => panic!("{sql}: expected Unsupported, got {other:?}"),
        }
    }

    #[test]
    fn rewrites_shard_queries() {
        assert!(MergePlan::for_select("SELECT a FROM t WHERE b = 1").expect("plain").is_plain());
        assert_eq!(
            shard("SELECT a, b FROM t ORDER BY c DESC LIMIT 5 OFFSET 2"),
            "SELECT a, b, c AS \"?pgvia_sort_3\" FROM t ORDER BY c DESC LIMIT 7"
        );
        assert_eq!(
            shard("SELECT a AS x FROM t ORDER BY x, a + 1"),
            "SELECT a AS x, a + 1 AS \"?pgvia_sort_2\" FROM t ORDER BY x, a + 1"
        );
        // A bare name is an output column's first, by the name PostgreSQL gives it.
        assert_eq!(shard("SELECT u::text FROM t ORDER BY u"), "SELECT u::text FROM t ORDER BY u");
        assert_eq!(
            shard("SELECT u::text AS v FROM t ORDER BY u"),
            "SELECT u::text AS v, u AS \"?pgvia_sort_2\" FROM t ORDER BY u"
        );
        assert_eq!(
            shard("SELECT g, avg(x) AS m, count(*) FROM t WHERE y > 0 GROUP BY g HAVING sum(x) > 10 ORDER BY 2 LIMIT 3"),
            "SELECT g, sum(x) AS m, count(*), sum(x), count(x) FROM t WHERE y > 0 GROUP BY g"
        );
        assert_eq!(shard("SELECT count(DISTINCT k) FROM t"), "SELECT array_agg(DISTINCT k) FROM t");
        // A grouping column's operand is its name alone, not the words after it.
        assert_eq!(
            shard("SELECT city, count(*) FROM t GROUP BY city HAVING city IS NOT NULL ORDER BY 1"),
            "SELECT city, count(*) FROM t GROUP BY city"
        );
        assert_eq!(
            shard("SELECT DISTINCT ON (g) g, x FROM t ORDER BY g, x"),
            "SELECT DISTINCT ON (g) g, x FROM t ORDER BY g, x"
        );
        assert_eq!(
            shard("select x is distinct from y from t order by 1"),
            "SELECT x is distinct from y from t order by 1"
        );
    }

    #[test]
    fn refuses_what_it_cannot_merge() {
        assert!(refused("WITH c AS (SELECT * FROM t) SELECT * FROM c").contains("placement"));
        assert!(refused("SELECT a FROM t WHERE a IN (SELECT b FROM u)").contains("subquery"));
        assert!(refused("SELECT row_number() OVER () FROM t").contains("window"));
        assert!(refused("SELECT a FROM t UNION SELECT a FROM u").contains("UNION"));
        assert!(refused("SELECT g, count(*) FROM t GROUP BY ROLLUP (g)").contains("GROUPING SETS"));
        assert!(refused("SELECT sum(x) / count(*) FROM t").contains("expression over aggregates"));
        assert!(
            refused("SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY x) FROM t").contains("ordered-set")
        );
        assert!(refused("SELECT stddev(DISTINCT x) FROM t").contains("stddev"));
        assert!(refused("SELECT a FROM t ORDER BY a LIMIT a + 1").contains("LIMIT"));
        assert_eq!(
            shard("SELECT a FROM t ORDER BY a LIMIT $1 OFFSET $2"),
            "SELECT a FROM t ORDER BY a LIMIT $1::int8 + $2::int8"
        );
        assert_eq!(
            shard("SELECT a FROM t ORDER BY a LIMIT $1 OFFSET 3"),
            "SELECT a FROM t ORDER BY a LIMIT $1::int8 + 3"
        );
        assert!(refused("SELECT g FROM t GROUP BY g HAVING sum(x) + 1 > 2").contains("HAVING"));
        // An output alias in HAVING is pushed as a column, so the shard reports it unknown.
        assert_eq!(
            shard("SELECT g, count(*) AS n FROM t GROUP BY g HAVING n > 1"),
            "SELECT g, count(*) AS n, n FROM t GROUP BY g"
        );
        assert_eq!(MergeError::unsupported("x").sqlstate(), "0A000");
    }
}
