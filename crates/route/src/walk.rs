//! Walking the DML part of a raw parse tree: statements, `WITH`, `FROM` items.
//!
//! We never use `pg_raw_parse::walk`: it panics on utility statements and recurses in C
//! with no depth check (libpg_query never sets a stack base, so PostgreSQL's own
//! `check_stack_depth` is a no-op). Our walk is explicit about every node it enters, counts
//! its depth and its work, and gives up with [`Abort::TooComplex`] instead of running out of
//! stack or time.

use std::collections::HashMap;

use pg_raw_parse::list::NodeList;
use pg_raw_parse::nodes::{CmdType, LockClauseStrength, OnCommitAction, OnConflictAction};
use pg_raw_parse::nodes::{
    DeleteStmt, InsertStmt, LockingClause, MergeStmt, OnConflictClause, RangeVar, ResTarget, ReturningClause,
    SelectStmt, UpdateStmt, WithClause,
};
use pg_raw_parse::Node;

use crate::model::NestedKind;
use crate::model::{Access, RowLock};
use crate::scope::FromScope;
use crate::scratch::range;
use crate::scratch::Scratch;
use crate::store::{EffectData, NestedData, Range32, TableData};
use crate::user_functions::UserFunctions;

/// Scopes with more CTE names than this get a hash index.
const CTE_INDEX_THRESHOLD: usize = 32;

/// Why a walk stopped early.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Abort {
    /// Nested deeper than the depth limit, or more work than the budget allows.
    TooComplex,
}

pub(crate) type W = Result<(), Abort>;

/// Limits for one walk.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub max_depth: u32,
    pub max_values: usize,
}

pub(crate) struct Walker<'t, 's> {
    pub s: &'s mut Scratch,
    pub fns: &'s UserFunctions,
    pub param_oids: &'s [u32],
    pub limits: Limits,
    depth: u32,
    /// Work units left; every node entered and every CTE name compared costs one.
    budget: u64,
    /// CTE names in scope, innermost last.
    pub(crate) ctes: Vec<&'t str>,
    /// The same names counted, built once there are many, so that looking a name up stays
    /// constant-time in queries with thousands of CTEs.
    cte_index: Option<HashMap<&'t str, u32>>,
    /// Set for the top-level statement; the first SELECT/UPDATE/DELETE/INSERT to start
    /// takes it and records its predicates or insert values.
    pub(crate) want_predicates: bool,
    /// Per statement: must it run on the primary?
    pub writes: bool,
    /// Per statement: strongest row lock seen.
    pub lock: Option<RowLock>,
    /// Per statement: literal values were dropped for exceeding `max_values`.
    pub truncated: bool,
    /// Per statement: the columns the top-level `UPDATE` (or `MERGE`'s `UPDATE` actions)
    /// assign.
    pub set_columns: Option<Range32>,
    /// Set for a top-level statement that is itself a DML statement; the first one to start
    /// takes it. Writes that start without it are inside another statement (a `WITH`
    /// query, a subquery, `EXPLAIN ANALYZE`, `COPY (...)`), and their tables are marked so
    /// that shard routing can see every write, not only the outer one.
    pub(crate) top_dml: bool,
    /// Per statement: the top-level `MERGE` has a `WHEN NOT MATCHED THEN INSERT` action.
    pub merge_inserts: bool,
    /// Per statement: the columns the top-level `INSERT ... ON CONFLICT DO UPDATE` assigns
    /// to anything but their own current value.
    pub conflict_sets: Option<Range32>,
    /// Per statement: where the top-level statement's own condition tree lies among the
    /// conditions (those of writes inside it may come first).
    pub top_conds: Option<Range32>,
}

impl<'t, 's> Walker<'t, 's> {
    pub fn new(
        s: &'s mut Scratch,
        fns: &'s UserFunctions,
        param_oids: &'s [u32],
        limits: Limits,
        budget: u64,
    ) -> Self {
        Walker {
            s,
            fns,
            param_oids,
            limits,
            depth: 0,
            budget,
            ctes: Vec::new(),
            cte_index: None,
            want_predicates: false,
            writes: false,
            lock: None,
            truncated: false,
            set_columns: None,
            top_dml: false,
            merge_inserts: false,
            conflict_sets: None,
            top_conds: None,
        }
    }

    pub fn start_statement(&mut self) {
        self.writes = false;
        self.lock = None;
        self.truncated = false;
        self.merge_inserts = false;
        self.conflict_sets = None;
        self.ctes.clear();
        self.cte_index = None;
    }

    fn push_cte(&mut self, name: &'t str) {
        self.ctes.push(name);
        if let Some(index) = &mut self.cte_index {
            *index.entry(name).or_default() += 1;
        } else if self.ctes.len() > CTE_INDEX_THRESHOLD {
            let mut index = HashMap::with_capacity(self.ctes.len() * 2);
            for c in &self.ctes {
                *index.entry(*c).or_default() += 1;
            }
            self.cte_index = Some(index);
        }
    }

    fn truncate_ctes(&mut self, mark: usize) {
        if let Some(index) = &mut self.cte_index {
            for c in &self.ctes[mark.min(self.ctes.len())..] {
                if let Some(n) = index.get_mut(c) {
                    *n -= 1;
                    if *n == 0 {
                        index.remove(c);
                    }
                }
            }
        }
        self.ctes.truncate(mark);
    }

    pub(crate) fn is_cte(&self, name: &str) -> bool {
        match &self.cte_index {
            Some(index) => index.contains_key(name),
            None => self.ctes.contains(&name),
        }
    }

    /// Runs `f` one level deeper, failing when the depth limit or the work budget is hit.
    #[inline]
    pub fn nested<R>(&mut self, f: impl FnOnce(&mut Self) -> Result<R, Abort>) -> Result<R, Abort> {
        if self.depth >= self.limits.max_depth || self.budget == 0 {
            return Err(Abort::TooComplex);
        }
        self.depth += 1;
        self.budget -= 1;
        let r = f(self);
        self.depth -= 1;
        r
    }

    fn charge(&mut self, units: u64) -> W {
        match self.budget.checked_sub(units) {
            Some(left) => {
                self.budget = left;
                Ok(())
            }
            None => Err(Abort::TooComplex),
        }
    }

    /// Any statement that can appear as a subquery, a CTE or the body of `EXPLAIN`,
    /// `COPY (...)`, `PREPARE`, `DECLARE` or `CREATE TABLE AS`.
    pub fn dml(&mut self, node: Node<'t>) -> W {
        self.nested(|w| match node {
            Node::SelectStmt(s) => w.select(s),
            Node::InsertStmt(s) => w.insert(s),
            Node::UpdateStmt(s) => w.update(s),
            Node::DeleteStmt(s) => w.delete(s),
            Node::MergeStmt(s) => w.merge(s),
            Node::None => Ok(()),
            other => w.expr(other),
        })
    }

    pub fn select(&mut self, s: &'t SelectStmt) -> W {
        self.top_dml = false;
        let predicates = std::mem::take(&mut self.want_predicates);
        let mark = self.with(s.with_clause())?;
        if let Some(l) = s.larg() {
            self.nested(|w| w.select(l))?;
        }
        if let Some(r) = s.rarg() {
            self.nested(|w| w.select(r))?;
        }
        for t in s.target_list() {
            self.expr(t.val())?;
            self.list(t.indirection())?;
        }
        for item in s.from_clause() {
            self.source(item)?;
        }
        self.expr(s.where_clause())?;
        self.list(s.group_clause())?;
        self.expr(s.having_clause())?;
        self.list(s.window_clause())?;
        for row in s.values_lists() {
            self.expr(row)?;
        }
        for sort in s.sort_clause() {
            self.expr(sort.node())?;
        }
        self.expr(s.limit_offset())?;
        self.expr(s.limit_count())?;
        self.list(s.distinct_clause())?;
        for lc in s.locking_clause() {
            self.locking(lc);
        }
        if let Some(into) = s.into_clause() {
            // `SELECT ... INTO t`: creates a table, like CREATE TABLE AS.
            if let Some(rel) = into.rel() {
                self.writes = true;
                self.relation(rel, Access::Write, false)?;
                self.temp_object(rel, into.on_commit);
            }
        }
        if predicates && s.larg().is_none() {
            let scope = FromScope { target: None, from: s.from_clause() };
            self.top_where(s.where_clause(), scope)?;
        }
        self.truncate_ctes(mark);
        Ok(())
    }

    fn locking(&mut self, lc: &LockingClause) {
        let strength = match lc.strength {
            LockClauseStrength::LCS_FORKEYSHARE => RowLock::KeyShare,
            LockClauseStrength::LCS_FORSHARE => RowLock::Share,
            LockClauseStrength::LCS_FORNOKEYUPDATE => RowLock::NoKeyUpdate,
            _ => RowLock::Update,
        };
        self.lock = Some(self.lock.map_or(strength, |l| l.max(strength)));
        // Row locks write the rows' xmax: not possible on a hot standby.
        self.writes = true;
    }

    pub fn insert(&mut self, s: &'t InsertStmt) -> W {
        // Inserts have no WHERE; their VALUES are read by `insert_values` instead, and the
        // flag must not leak into the inserted SELECT.
        self.want_predicates = false;
        let top = std::mem::take(&mut self.top_dml);
        let mark = self.with(s.with_clause())?;
        self.writes = true;
        if let Some(rel) = s.relation() {
            self.written(rel, top)?;
        }
        self.list(s.cols())?;
        self.dml(s.select_stmt())?;
        if let Some(oc) = s.on_conflict_clause() {
            if let Some(infer) = oc.infer() {
                self.list(infer.index_elems())?;
                self.expr(infer.where_clause())?;
            }
            for t in oc.target_list() {
                self.expr(t.val())?;
            }
            self.expr(oc.where_clause())?;
            if top && oc.action == OnConflictAction::ONCONFLICT_UPDATE {
                let c0 = self.s.columns.len();
                for t in oc.target_list() {
                    if !self_assignment(t, s.relation(), oc) {
                        let span = self.s.intern(t.name().unwrap_or(""));
                        self.s.columns.push(span);
                    }
                }
                self.conflict_sets = Some(range(c0, self.s.columns.len()));
            }
        }
        self.returning(s.returning_clause())?;
        if !top {
            self.nested_write(s.relation(), NestedKind::Insert, Range32::default(), Range32::default());
        }
        self.truncate_ctes(mark);
        Ok(())
    }

    pub fn update(&mut self, s: &'t UpdateStmt) -> W {
        let predicates = std::mem::take(&mut self.want_predicates);
        let top = std::mem::take(&mut self.top_dml);
        let mark = self.with(s.with_clause())?;
        self.writes = true;
        if let Some(rel) = s.relation() {
            self.written(rel, top)?;
        }
        for t in s.target_list() {
            self.expr(t.val())?;
            self.list(t.indirection())?;
        }
        for item in s.from_clause() {
            self.source(item)?;
        }
        self.expr(s.where_clause())?;
        self.returning(s.returning_clause())?;
        if predicates {
            let c0 = self.s.columns.len();
            for t in s.target_list() {
                let span = self.s.intern(t.name().unwrap_or(""));
                self.s.columns.push(span);
            }
            self.set_columns = Some(range(c0, self.s.columns.len()));
            let scope = FromScope { target: s.relation(), from: s.from_clause() };
            self.top_where(s.where_clause(), scope)?;
        }
        if !top {
            let scope = FromScope { target: s.relation(), from: s.from_clause() };
            let conds = self.nested_condition(s.where_clause(), scope)?;
            let c0 = self.s.columns.len();
            for t in s.target_list() {
                let span = self.s.intern(t.name().unwrap_or(""));
                self.s.columns.push(span);
            }
            let set_columns = range(c0, self.s.columns.len());
            self.nested_write(s.relation(), NestedKind::Update, conds, set_columns);
        }
        self.truncate_ctes(mark);
        Ok(())
    }

    pub fn delete(&mut self, s: &'t DeleteStmt) -> W {
        let predicates = std::mem::take(&mut self.want_predicates);
        let top = std::mem::take(&mut self.top_dml);
        let mark = self.with(s.with_clause())?;
        self.writes = true;
        if let Some(rel) = s.relation() {
            self.written(rel, top)?;
        }
        for item in s.using_clause() {
            self.source(item)?;
        }
        self.expr(s.where_clause())?;
        self.returning(s.returning_clause())?;
        if predicates {
            let scope = FromScope { target: s.relation(), from: s.using_clause() };
            self.top_where(s.where_clause(), scope)?;
        }
        if !top {
            let scope = FromScope { target: s.relation(), from: s.using_clause() };
            let conds = self.nested_condition(s.where_clause(), scope)?;
            self.nested_write(s.relation(), NestedKind::Delete, conds, Range32::default());
        }
        self.truncate_ctes(mark);
        Ok(())
    }

    pub fn merge(&mut self, s: &'t MergeStmt) -> W {
        self.want_predicates = false;
        let top = std::mem::take(&mut self.top_dml);
        let mark = self.with(s.with_clause())?;
        self.writes = true;
        if let Some(rel) = s.relation() {
            self.written(rel, top)?;
        }
        self.source(s.source_relation())?;
        self.expr(s.join_condition())?;
        let c0 = self.s.columns.len();
        for when in s.merge_when_clauses() {
            self.expr(when.condition())?;
            self.list(when.target_list())?;
            self.list(when.values())?;
            if !top {
                continue;
            }
            match when.command_type {
                CmdType::CMD_INSERT => self.merge_inserts = true,
                CmdType::CMD_UPDATE => {
                    for t in when.target_list() {
                        if let Node::ResTarget(t) = t {
                            let span = self.s.intern(t.name().unwrap_or(""));
                            self.s.columns.push(span);
                        }
                    }
                }
                _ => {}
            }
        }
        if top {
            self.set_columns = Some(range(c0, self.s.columns.len()));
        } else {
            self.nested_write(s.relation(), NestedKind::Merge, Range32::default(), Range32::default());
        }
        self.returning(s.returning_clause())?;
        self.truncate_ctes(mark);
        Ok(())
    }

    /// Records the table a data-modifying statement writes; `top` false marks it written by
    /// a statement inside another.
    fn written(&mut self, rel: &'t RangeVar, top: bool) -> W {
        let n = self.s.tables.len();
        self.relation(rel, Access::Write, false)?;
        if !top {
            if let Some(t) = self.s.tables.get_mut(n) {
                t.nested = true;
                t.outer = false;
            }
        }
        Ok(())
    }

    /// Records a data-modifying statement inside another, for shard routing.
    fn nested_write(
        &mut self,
        rel: Option<&RangeVar>,
        kind: NestedKind,
        conds: Range32,
        set_columns: Range32,
    ) {
        let Some(name) = rel.and_then(|r| r.relname()) else {
            return;
        };
        let schema = rel.and_then(|r| r.schemaname()).map(|s| self.s.intern(s));
        let name = self.s.intern(name);
        self.s.nested.push(NestedData { schema, name, kind, conds, set_columns });
    }

    /// The top-level statement's own `WHERE`, as its predicates and condition tree.
    fn top_where(&mut self, where_: Node<'t>, scope: FromScope<'t>) -> W {
        let k = self.s.conds.len();
        self.where_predicates(where_, scope)?;
        self.top_conds = Some(range(k, self.s.conds.len()));
        Ok(())
    }

    fn returning(&mut self, r: Option<&'t ReturningClause>) -> W {
        match r {
            Some(r) => self.list(r.exprs()),
            None => Ok(()),
        }
    }

    /// Brings a `WITH` clause's names into scope and walks its queries; returns the scope
    /// mark to truncate back to when the statement ends.
    ///
    /// PostgreSQL's scoping: without `RECURSIVE` a CTE sees only the CTEs before it (a
    /// same-named table inside it is the real table); with `RECURSIVE` all of the list.
    fn with(&mut self, with: Option<&'t WithClause>) -> Result<usize, Abort> {
        let mark = self.ctes.len();
        let Some(with) = with else {
            return Ok(mark);
        };
        if with.recursive {
            for cte in with.ctes() {
                self.push_cte(cte.ctename().unwrap_or(""));
            }
            for cte in with.ctes() {
                self.dml(cte.ctequery())?;
            }
        } else {
            for cte in with.ctes() {
                self.dml(cte.ctequery())?;
                self.push_cte(cte.ctename().unwrap_or(""));
            }
        }
        Ok(mark)
    }

    /// One entry of a `FROM` list (or `USING`, or `MERGE`'s source).
    pub fn source(&mut self, node: Node<'t>) -> W {
        self.nested(|w| match node {
            Node::RangeVar(rv) => w.relation(rv, Access::Read, true),
            Node::JoinExpr(j) => {
                w.source(j.larg())?;
                w.source(j.rarg())?;
                w.expr(j.quals())
            }
            Node::RangeSubselect(s) => w.dml(s.subquery()),
            Node::RangeFunction(f) => {
                // A list of (function call, column definitions) pairs.
                for pair in f.functions() {
                    match pair {
                        Node::NodeList(l) => {
                            if let Some(call) = l.first() {
                                w.expr(call)?;
                            }
                        }
                        other => w.expr(other)?,
                    }
                }
                Ok(())
            }
            Node::RangeTableSample(t) => {
                w.source(t.relation())?;
                w.list(t.args())?;
                w.expr(t.repeatable())
            }
            other => w.expr(other),
        })
    }

    /// Records a table, unless `cte_ok` and the name is a CTE in scope.
    pub fn relation(&mut self, rv: &'t RangeVar, access: Access, cte_ok: bool) -> W {
        let Some(name) = rv.relname() else {
            return Ok(());
        };
        let schema = rv.schemaname();
        if cte_ok && schema.is_none() && !self.ctes.is_empty() {
            self.charge(self.ctes.len().min(CTE_INDEX_THRESHOLD) as u64)?;
            if self.is_cte(name) {
                return Ok(());
            }
        }
        let schema = schema.map(|s| self.s.intern(s));
        let name = self.s.intern(name);
        self.s.tables.push(TableData { schema, name, access, nested: false, outer: true });
        Ok(())
    }

    /// Records a temporary object created by this statement as a session effect.
    pub fn temp_object(&mut self, rel: &RangeVar, on_commit: OnCommitAction::Type) {
        if !is_temp(rel) {
            return;
        }
        let name = self.s.intern(rel.relname().unwrap_or(""));
        let on_commit_drop = on_commit == OnCommitAction::ONCOMMIT_DROP;
        self.s.effects.push(EffectData::TempTable { name, on_commit_drop });
    }

    /// Walks every node of a list as an expression.
    pub fn list(&mut self, list: &'t NodeList) -> W {
        for n in list {
            self.expr(n)?;
        }
        Ok(())
    }
}

/// `CREATE TEMP ...` or a name in the `pg_temp` schema.
pub(crate) fn is_temp(rel: &RangeVar) -> bool {
    rel.relpersistence == b't' as std::ffi::c_char
        || rel.schemaname().is_some_and(|s| s == "pg_temp" || s.starts_with("pg_temp_"))
}

/// `SET key = key` in `ON CONFLICT DO UPDATE`: the column, bare or qualified by the table (or
/// its alias), or `EXCLUDED.key` when the conflict is on that column (then the proposed
/// value equals the existing one). Anything else may change the value.
fn self_assignment(t: &ResTarget, rel: Option<&RangeVar>, oc: &OnConflictClause) -> bool {
    let (Some(name), true) = (t.name(), t.indirection().is_empty()) else {
        return false;
    };
    let Node::ColumnRef(c) = t.val() else {
        return false;
    };
    let Some((qualifier, column)) = crate::scope::column_parts(c) else {
        return false;
    };
    if column != name {
        return false;
    }
    let Some((_, table)) = qualifier else {
        return true;
    };
    let own = rel.and_then(|r| r.alias().and_then(|a| a.aliasname()).or(r.relname()));
    if Some(table) == own {
        return true;
    }
    table == "excluded"
        && oc.infer().is_some_and(|i| {
            i.index_elems().iter().any(|e| matches!(e, Node::IndexElem(e) if e.name() == Some(name)))
        })
}
