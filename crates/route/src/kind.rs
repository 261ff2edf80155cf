//! One top-level statement: what kind it is, what it names, whether it writes.
//!
//! Utility statements are dispatched on their node type and read field by field; only DML
//! and expressions are walked (see [`crate::walk`]).

use pg_raw_parse::nodes::{CopyStmt, DefElem, DiscardMode, ExplainStmt, GrantTargetType, ObjectType};
use pg_raw_parse::raw::{NodeTag, CURSOR_OPT_HOLD};
use pg_raw_parse::{ConstValue, Node};

use crate::model::{Access, CopyDirection, DiscardTarget, StatementKind};
use crate::scratch::range;
use crate::store::{EffectData, InsertData, Span, StmtData};
use crate::tag::tag;
use crate::walk::{is_temp, Abort, Walker, W};

/// What classifying a statement found beyond what the walk accumulates.
#[derive(Default)]
pub(crate) struct Head {
    pub kind: Option<StatementKind>,
    pub target: Option<StatementKind>,
    pub name: Option<Span>,
    pub value: Option<Span>,
    pub insert: Option<InsertData>,
    /// `INSERT ... ON CONFLICT`.
    pub on_conflict: bool,
    /// Replaces the walk's verdict when set.
    pub writes: Option<bool>,
}

impl Head {
    pub fn kind(kind: StatementKind) -> Head {
        Head { kind: Some(kind), ..Head::default() }
    }

    pub fn named(kind: StatementKind, name: Option<Span>) -> Head {
        Head { kind: Some(kind), name, ..Head::default() }
    }

    pub fn writes(mut self, writes: bool) -> Head {
        self.writes = Some(writes);
        self
    }
}

impl<'t> Walker<'t, '_> {
    /// Analyses one top-level statement and appends it to the scratch.
    pub fn statement(&mut self, node: Node<'t>, location: (u32, u32)) -> W {
        self.start_statement();
        let t0 = self.s.tables.len();
        let e0 = self.s.effects.len();
        let p0 = self.s.preds.len();
        let k0 = self.s.conds.len();
        let n0 = self.s.nested.len();
        self.top_conds = None;
        self.set_columns = None;
        self.want_predicates = true;
        self.top_dml = matches!(
            node,
            Node::SelectStmt(_)
                | Node::InsertStmt(_)
                | Node::UpdateStmt(_)
                | Node::DeleteStmt(_)
                | Node::MergeStmt(_)
        );
        let head = self.classify(node)?;
        self.want_predicates = false;
        self.s.dedup_tables(t0);
        let kind = head.kind.unwrap_or(StatementKind::Other);
        self.s.stmts.push(StmtData {
            kind,
            target: head.target,
            tag: tag(node),
            writes: head.writes.unwrap_or(self.writes),
            truncated: self.truncated,
            location,
            name: head.name,
            value: head.value,
            tables: range(t0, self.s.tables.len()),
            effects: range(e0, self.s.effects.len()),
            preds: range(p0, self.s.preds.len()),
            conds: self.top_conds.take().unwrap_or(range(k0, k0)),
            set_columns: self.set_columns.take().unwrap_or_default(),
            on_conflict: head.on_conflict,
            conflict_sets: self.conflict_sets.take().unwrap_or_default(),
            merge_inserts: self.merge_inserts,
            nested: range(n0, self.s.nested.len()),
            insert: head.insert,
        });
        Ok(())
    }

    fn classify(&mut self, node: Node<'t>) -> Result<Head, Abort> {
        use StatementKind as K;
        Ok(match node {
            Node::SelectStmt(s) => {
                self.select(s)?;
                match s.into_clause() {
                    Some(into) => Head::kind(K::CreateTable {
                        temporary: into.rel().is_some_and(is_temp),
                        as_select: true,
                    }),
                    None => Head::kind(K::Select { locking: self.lock }),
                }
            }
            Node::InsertStmt(s) => {
                self.insert(s)?;
                let insert = self.insert_values(s);
                let returning = s.returning_clause().is_some_and(|r| !r.exprs().is_empty());
                let on_conflict = s.on_conflict_clause().is_some();
                Head { insert, on_conflict, ..Head::kind(K::Insert { returning }) }
            }
            Node::UpdateStmt(s) => {
                self.update(s)?;
                Head::kind(K::Update {
                    returning: s.returning_clause().is_some_and(|r| !r.exprs().is_empty()),
                })
            }
            Node::DeleteStmt(s) => {
                self.delete(s)?;
                Head::kind(K::Delete {
                    returning: s.returning_clause().is_some_and(|r| !r.exprs().is_empty()),
                })
            }
            Node::MergeStmt(s) => {
                self.merge(s)?;
                Head::kind(K::Merge {
                    returning: s.returning_clause().is_some_and(|r| !r.exprs().is_empty()),
                })
            }
            Node::CopyStmt(c) => self.copy(c)?,
            Node::ExplainStmt(e) => self.explain(e)?,
            Node::TransactionStmt(t) => self.transaction(t),
            Node::VariableSetStmt(v) => self.set(v),
            Node::VariableShowStmt(v) => Head::named(K::Show, self.opt(v.name())),
            Node::DiscardStmt(d) => {
                let target = match d.target {
                    DiscardMode::DISCARD_PLANS => DiscardTarget::Plans,
                    DiscardMode::DISCARD_SEQUENCES => DiscardTarget::Sequences,
                    DiscardMode::DISCARD_TEMP => DiscardTarget::Temp,
                    _ => DiscardTarget::All,
                };
                self.s.effects.push(EffectData::Discard(target));
                Head::kind(K::Discard(target)).writes(false)
            }
            Node::ListenStmt(l) => {
                let channel = self.s.intern(l.conditionname().unwrap_or(""));
                self.s.effects.push(EffectData::Listen { channel });
                // LISTEN is refused during recovery.
                Head::named(K::Listen, Some(channel)).writes(true)
            }
            Node::UnlistenStmt(u) => {
                let channel = self.opt(u.conditionname());
                self.s.effects.push(EffectData::Unlisten { channel });
                Head::named(K::Unlisten, channel).writes(false)
            }
            Node::NotifyStmt(n) => {
                let name = self.opt(n.conditionname());
                let value = self.opt(n.payload());
                Head { value, ..Head::named(K::Notify, name).writes(true) }
            }
            Node::PrepareStmt(p) => {
                let name = self.s.intern(p.name().unwrap_or(""));
                let e0 = self.s.effects.len();
                let hidden = self.s.hidden_effects;
                let inner = self.nested(|w| w.inner(p.query()))?;
                // Preparing executes nothing: only the PREPARE itself is an effect (what the
                // statement does is counted at its EXECUTE).
                self.s.effects.truncate(e0);
                self.s.hidden_effects = hidden;
                self.s.effects.push(EffectData::Prepare { name });
                Head { target: inner.kind, ..Head::named(K::Prepare, Some(name)).writes(false) }
            }
            Node::ExecuteStmt(e) => {
                let name = self.opt(e.name());
                self.list(e.params())?;
                // What the prepared statement does is not visible here.
                self.s.hidden_effects = true;
                Head::named(K::Execute, name).writes(true)
            }
            Node::DeallocateStmt(d) => {
                let name = if d.isall { None } else { self.opt(d.name()) };
                self.s.effects.push(EffectData::Deallocate { name });
                Head::named(K::Deallocate, name).writes(false)
            }
            Node::DeclareCursorStmt(d) => {
                let name = self.s.intern(d.portalname().unwrap_or(""));
                let inner = self.nested(|w| w.inner(d.query()))?;
                let hold = d.options as u32 & CURSOR_OPT_HOLD != 0;
                if hold {
                    self.s.effects.push(EffectData::HoldCursor { name });
                }
                Head { target: inner.kind, ..Head::named(K::DeclareCursor { hold }, Some(name)) }
            }
            Node::FetchStmt(f) => Head::named(K::Fetch, self.opt(f.portalname())).writes(false),
            Node::ClosePortalStmt(c) => {
                let name = self.opt(c.portalname());
                self.s.effects.push(EffectData::CloseCursor { name });
                Head::named(K::CloseCursor, name).writes(false)
            }
            Node::LockStmt(l) => {
                for rel in l.relations() {
                    if let Node::RangeVar(rv) = rel {
                        self.relation(rv, Access::Write, false)?;
                    }
                }
                Head::kind(K::Lock).writes(true)
            }
            Node::VacuumStmt(v) => {
                for rel in v.rels() {
                    if let Some(rv) = rel.relation() {
                        self.relation(rv, Access::Write, false)?;
                    }
                }
                Head::kind(if v.is_vacuumcmd { K::Vacuum } else { K::Analyze }).writes(true)
            }
            Node::CallStmt(c) => {
                if let Some(f) = c.funccall() {
                    self.expr(Node::FuncCall(f))?;
                }
                // A procedure may do anything, including COMMIT.
                self.s.hidden_effects = true;
                Head::kind(K::Call).writes(true)
            }
            Node::DoStmt(_) => {
                self.s.hidden_effects = true;
                Head::kind(K::Do).writes(true)
            }
            Node::LoadStmt(l) => {
                self.s.effects.push(EffectData::Load);
                Head::named(K::Load, self.opt(l.filename())).writes(false)
            }
            Node::CheckPointStmt(_) => Head::kind(K::Checkpoint).writes(true),
            Node::Invalid(raw) if raw.type_ == NodeTag::T_CreateForeignTableStmt => {
                Head::kind(K::Ddl).writes(true)
            }
            Node::Invalid(_) | Node::None => {
                // A statement these bindings cannot read may do anything to the session.
                self.s.hidden_effects = true;
                Head::kind(K::Other).writes(true)
            }
            other => {
                self.ddl(other)?;
                // `CREATE TABLE ... AS EXECUTE name` names a prepared statement.
                let name = match other {
                    Node::CreateTableAsStmt(c) => match c.query() {
                        Node::ExecuteStmt(e) => {
                            // What the prepared statement does is not visible here.
                            self.s.hidden_effects = true;
                            self.opt(e.name())
                        }
                        _ => None,
                    },
                    _ => None,
                };
                let head = Head::kind(match other {
                    Node::CreateStmt(c) => {
                        K::CreateTable { temporary: c.relation().is_some_and(is_temp), as_select: false }
                    }
                    Node::CreateTableAsStmt(c) if c.objtype == ObjectType::OBJECT_TABLE => K::CreateTable {
                        temporary: c.into().and_then(|i| i.rel()).is_some_and(is_temp),
                        as_select: true,
                    },
                    _ => K::Ddl,
                })
                .writes(true);
                Head { name, ..head }
            }
        })
    }

    /// The statement inside `EXPLAIN`, `PREPARE` or `DECLARE`.
    fn inner(&mut self, node: Node<'t>) -> Result<Head, Abort> {
        match node {
            // These would record effects of their own that the wrapper does not have.
            Node::TransactionStmt(_) | Node::VariableSetStmt(_) => Ok(Head::kind(StatementKind::Other)),
            _ => self.classify(node),
        }
    }

    pub(crate) fn opt(&mut self, s: Option<&str>) -> Option<Span> {
        s.map(|s| self.s.intern(s))
    }

    fn copy(&mut self, c: &'t CopyStmt) -> Result<Head, Abort> {
        let direction = if c.is_from { CopyDirection::From } else { CopyDirection::To };
        if let Some(rel) = c.relation() {
            let access = if c.is_from { Access::Write } else { Access::Read };
            self.relation(rel, access, false)?;
        }
        self.dml(c.query())?;
        self.expr(c.where_clause())?;
        let stdio = c.filename().is_none() && !c.is_program;
        let writes = c.is_from || self.writes;
        Ok(Head::kind(StatementKind::Copy { direction, stdio }).writes(writes))
    }

    /// `EXPLAIN` runs its statement only with `ANALYZE`; otherwise the statement's tables
    /// are reported but nothing is written and no session state changes.
    fn explain(&mut self, e: &'t ExplainStmt) -> Result<Head, Abort> {
        let analyze = e.options().iter().any(|o| o.defname() == Some("analyze") && def_true(o));
        let e0 = self.s.effects.len();
        let inner = self.nested(|w| w.inner(e.query()))?;
        // `EXPLAIN EXECUTE name` names a prepared statement, which a proxy that renames
        // statements must find.
        let name = if inner.kind == Some(StatementKind::Execute) { inner.name } else { None };
        let mut head = Head { target: inner.kind, name, ..Head::kind(StatementKind::Explain { analyze }) };
        if analyze {
            head.writes = inner.writes;
        } else {
            self.s.effects.truncate(e0);
            head.writes = Some(false);
        }
        Ok(head)
    }

    /// Tables named by schema changes, as `pg_query` reports them, and the temporary
    /// objects they create.
    fn ddl(&mut self, node: Node<'t>) -> W {
        match node {
            Node::CreateStmt(c) => {
                if let Some(rel) = c.relation() {
                    self.relation(rel, Access::Write, false)?;
                    self.temp_object(rel, c.oncommit);
                }
            }
            Node::CreateTableAsStmt(c) => {
                self.dml(c.query())?;
                if let Some(rel) = c.into().and_then(|i| i.rel()) {
                    self.relation(rel, Access::Write, false)?;
                    self.temp_object(rel, c.into().map_or(0, |i| i.on_commit));
                }
            }
            Node::ViewStmt(v) => {
                self.dml(v.query())?;
                if let Some(rel) = v.view() {
                    self.relation(rel, Access::Write, false)?;
                    self.temp_object(rel, 0);
                }
            }
            Node::CreateSeqStmt(c) => {
                if let Some(rel) = c.sequence() {
                    self.temp_object(rel, 0);
                }
            }
            Node::AlterTableStmt(a) => self.opt_relation(a.relation())?,
            Node::TruncateStmt(t) => {
                for rel in t.relations() {
                    if let Node::RangeVar(rv) = rel {
                        self.relation(rv, Access::Write, false)?;
                    }
                }
            }
            Node::IndexStmt(i) => {
                self.opt_relation(i.relation())?;
                for p in i.index_params() {
                    self.expr(p.expr())?;
                }
                self.expr(i.where_clause())?;
            }
            Node::CreateTrigStmt(t) => self.opt_relation(t.relation())?,
            Node::RuleStmt(r) => self.opt_relation(r.relation())?,
            Node::RefreshMatViewStmt(r) => self.opt_relation(r.relation())?,
            // Only this form lists RangeVars; the typed list panics on anything else
            // (`ON ALL TABLES IN SCHEMA` lists schema names).
            Node::GrantStmt(g)
                if g.objtype == ObjectType::OBJECT_TABLE
                    && g.targtype == GrantTargetType::ACL_TARGET_OBJECT =>
            {
                for rv in g.objects() {
                    self.relation(rv, Access::Write, false)?;
                }
            }
            Node::DropStmt(d) => self.drop_tables(d.remove_type, d.objects())?,
            _ => {}
        }
        Ok(())
    }

    fn opt_relation(&mut self, rel: Option<&'t pg_raw_parse::nodes::RangeVar>) -> W {
        match rel {
            Some(rv) => self.relation(rv, Access::Write, false),
            None => Ok(()),
        }
    }

    /// `DROP TABLE a.b` names tables as lists of strings; `DROP RULE r ON t` and
    /// `DROP TRIGGER g ON t` end with the rule or trigger name.
    fn drop_tables(&mut self, kind: ObjectType::Type, objects: &'t pg_raw_parse::list::NodeList) -> W {
        let drop_last = match kind {
            ObjectType::OBJECT_TABLE => false,
            ObjectType::OBJECT_RULE | ObjectType::OBJECT_TRIGGER => true,
            _ => return Ok(()),
        };
        for obj in objects {
            let Node::NodeList(parts) = obj else { continue };
            let n = parts.len().saturating_sub(usize::from(drop_last));
            let mut names = parts.iter().take(n).filter_map(|p| p.as_str());
            let (schema, name) = match (names.next(), names.next(), names.next()) {
                (Some(name), None, None) => (None, name),
                (Some(schema), Some(name), None) => (Some(schema), name),
                // catalog.schema.table: keep what pg_query keeps, the last two.
                (Some(_), Some(schema), Some(name)) => (Some(schema), name),
                _ => continue,
            };
            let schema = self.opt(schema);
            let name = self.s.intern(name);
            self.s.tables.push(crate::store::TableData {
                schema,
                name,
                access: Access::Write,
                nested: false,
                outer: true,
            });
        }
        Ok(())
    }
}

/// A boolean option the way PostgreSQL's `defGetBoolean` reads it; anything unreadable
/// counts as true, the conservative reading for `EXPLAIN (ANALYZE ...)`.
pub(crate) fn def_true(d: &DefElem) -> bool {
    // EXPLAIN's options carry bare values; BEGIN's carry constants.
    let value = match d.arg() {
        Node::None => return true,
        Node::A_Const(c) => c.val(),
        Node::Integer(i) => Some(ConstValue::Integer(i.ival)),
        Node::Boolean(b) => Some(ConstValue::Boolean(b.boolval)),
        Node::String(s) => s.sval().map(ConstValue::String),
        _ => None,
    };
    match value {
        Some(ConstValue::Integer(i)) => i != 0,
        Some(ConstValue::Boolean(b)) => b,
        Some(ConstValue::String(s)) => {
            !["false", "off", "no", "0", "f", "n", "of"].iter().any(|f| s.eq_ignore_ascii_case(f))
        }
        _ => true,
    }
}
