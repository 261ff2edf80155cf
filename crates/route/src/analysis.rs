//! The immutable result of analysing one query string, and borrowed views into it.

use std::fmt;
use std::ops::Range;

use crate::model::{
    Access, DiscardTarget, LockOp, LockScope, NestedKind, Outcome, PredicateOp, Role, StatementKind,
};
use crate::store::{CondData, Entry, HintData, InsertData, PredData, Range32, Span, StmtData, ValueData};
use crate::store::{EffectData, NestedData, TableData};

/// What pgvia knows about a query string: per statement, its kind, whether it writes, the
/// session state it changes, the tables it touches and the equality predicates and inserted
/// values shard routing can use; plus comment hints for the whole string.
///
/// Owned, immutable, `Send + Sync`; share it as `Arc<Analysis>`. When [`Analysis::outcome`]
/// is not [`Outcome::Parsed`], the analysis is conservative: it [writes](Analysis::writes)
/// and has no statements.
pub struct Analysis {
    pub(crate) outcome: Outcome,
    pub(crate) writes: bool,
    pub(crate) calls_unlisted: bool,
    pub(crate) hidden_effects: bool,
    pub(crate) notifies: bool,
    pub(crate) stmt_count: u32,
    pub(crate) hints: HintData,
    pub(crate) entries: Box<[Entry]>,
    pub(crate) values: Box<[ValueData]>,
    pub(crate) text: Box<str>,
}

impl Analysis {
    /// The decision for anything analysis could not or would not read: writes, so it goes
    /// to the primary; no statements, so no shard key and no known session effects.
    pub(crate) fn conservative(outcome: Outcome, hints: HintData, text: Box<str>) -> Analysis {
        Analysis {
            outcome,
            writes: true,
            calls_unlisted: true,
            hidden_effects: true,
            notifies: true,
            stmt_count: 0,
            hints,
            entries: Box::default(),
            values: Box::default(),
            text,
        }
    }

    /// How far analysis got.
    pub fn outcome(&self) -> Outcome {
        self.outcome
    }

    /// True when the query could not be analysed and this is the conservative decision.
    pub fn is_conservative(&self) -> bool {
        self.outcome != Outcome::Parsed
    }

    /// Whether any statement must run on the primary: it changes data or schema, takes row
    /// or table locks, calls a function known to write, or cannot run on a hot standby
    /// (`LISTEN`, `NOTIFY`, `VACUUM`, ...). Always true for a conservative analysis.
    pub fn writes(&self) -> bool {
        self.writes
    }

    /// Whether the query calls a function that is not one of the built-ins known to only
    /// read (aggregates, string, math, date and JSON functions, ...). A user-defined function
    /// may write even when it is called from a `SELECT`. Always true for a conservative
    /// analysis.
    pub fn calls_unlisted_functions(&self) -> bool {
        self.calls_unlisted
    }

    /// Whether the query may change session state where its text does not show it: it calls
    /// a function that is not a built-in known to leave the session alone (a user function
    /// may run `set_config`, `SET ROLE`, `LISTEN`, take an advisory lock, create a temporary
    /// table, `PREPARE` or open a `WITH HOLD` cursor), runs a procedure (`CALL`), a `DO`
    /// block or a prepared statement by SQL `EXECUTE`. The built-ins that do change the
    /// session (`set_config`, the advisory lock functions) are reported as
    /// [`session_effects`](Analysis::session_effects) instead. Always true for a conservative
    /// analysis. Triggers, rules, column defaults, views and operators that call user
    /// functions are not visible in the text and are not counted.
    pub fn may_have_hidden_effects(&self) -> bool {
        self.hidden_effects
    }

    /// Whether the query may send a notification: a `NOTIFY`, a call of `pg_notify`, or
    /// anything that [may have hidden effects](Analysis::may_have_hidden_effects) (a user
    /// function can notify). Always true for a conservative analysis. Triggers are not
    /// visible in the text and are not counted.
    pub fn may_notify(&self) -> bool {
        self.notifies || self.hidden_effects
    }

    /// Number of statements (zero for an empty or conservative query).
    pub fn len(&self) -> usize {
        self.stmt_count as usize
    }

    /// True when there are no statements.
    pub fn is_empty(&self) -> bool {
        self.stmt_count == 0
    }

    /// The statements, in the order they appear.
    pub fn statements(&self) -> impl ExactSizeIterator<Item = Statement<'_>> + '_ {
        self.entries[..self.stmt_count as usize].iter().map(move |e| match e {
            Entry::Stmt(data) => Statement { analysis: self, data },
            // Statements always come first; see `Scratch::finish`.
            _ => unreachable_stmt(),
        })
    }

    /// The statement at `index`.
    pub fn statement(&self, index: usize) -> Option<Statement<'_>> {
        if index >= self.stmt_count as usize {
            return None;
        }
        match &self.entries[index] {
            Entry::Stmt(data) => Some(Statement { analysis: self, data }),
            _ => None,
        }
    }

    /// Every session-scoped effect of every statement, in order.
    pub fn session_effects(&self) -> impl Iterator<Item = SessionEffect<'_>> + '_ {
        self.statements().flat_map(|s| s.session_effects())
    }

    /// True when any statement changes session state a pooler must track or pin for.
    pub fn has_session_effects(&self) -> bool {
        self.statements().any(|s| !s.data.effects.usize().is_empty())
    }

    /// Hints found in comments.
    pub fn hints(&self) -> Hints<'_> {
        Hints {
            role: self.hints.role,
            shard: self.hints.shard,
            shard_key: self.hints.shard_key.map(|s| self.str(s)),
            unrecognized: self.hints.unrecognized,
        }
    }

    /// Approximate heap bytes held by this analysis, for the cache's byte budget.
    pub fn heap_size(&self) -> usize {
        std::mem::size_of::<Analysis>()
            + std::mem::size_of_val(&*self.entries)
            + std::mem::size_of_val(&*self.values)
            + self.text.len()
    }

    pub(crate) fn str(&self, span: Span) -> &str {
        let start = span.start as usize;
        self.text.get(start..start + span.len as usize).unwrap_or("")
    }

    fn value(&self, v: &ValueData) -> Value<'_> {
        match *v {
            ValueData::Integer(i) => Value::Integer(i),
            ValueData::Numeric(s) => Value::Numeric(self.str(s)),
            ValueData::String(s) => Value::String(self.str(s)),
            ValueData::Boolean(b) => Value::Boolean(b),
            ValueData::Null => Value::Null,
            ValueData::Param { number, type_oid } => Value::Param { number, type_oid },
            ValueData::Default => Value::Default,
            ValueData::Expression => Value::Expression,
        }
    }

    fn values_in(&self, r: Range32) -> impl ExactSizeIterator<Item = Value<'_>> + '_ {
        self.values[r.usize()].iter().map(move |v| self.value(v))
    }
}

#[cold]
fn unreachable_stmt() -> ! {
    unreachable!("statement entries come first")
}

impl fmt::Debug for Analysis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Analysis")
            .field("outcome", &self.outcome)
            .field("writes", &self.writes)
            .field("hints", &self.hints())
            .field("statements", &self.statements().collect::<Vec<_>>())
            .finish()
    }
}

/// One statement of an [`Analysis`].
#[derive(Clone, Copy)]
pub struct Statement<'a> {
    analysis: &'a Analysis,
    data: &'a StmtData,
}

impl<'a> Statement<'a> {
    /// What the statement is.
    pub fn kind(&self) -> StatementKind {
        self.data.kind
    }

    /// For `EXPLAIN`, `PREPARE` and `DECLARE CURSOR`: the kind of the statement inside.
    pub fn target(&self) -> Option<StatementKind> {
        self.data.target
    }

    /// PostgreSQL's name for the statement's parse node (`"SelectStmt"`, `"CreateStmt"`,
    /// ...), for logs and per-type statistics.
    pub fn tag(&self) -> &'static str {
        self.data.tag
    }

    /// Whether this statement must run on the primary; see [`Analysis::writes`].
    pub fn writes(&self) -> bool {
        self.data.writes
    }

    /// Byte range of the statement in the query text.
    pub fn location(&self) -> Range<usize> {
        self.data.location.0 as usize..self.data.location.1 as usize
    }

    /// The object the statement names: the parameter of `SET`/`RESET`/`SHOW`, the channel
    /// of `LISTEN`/`UNLISTEN`/`NOTIFY`, the prepared statement of `PREPARE`/`EXECUTE`/
    /// `DEALLOCATE` (and of `EXPLAIN EXECUTE`, `CREATE TABLE ... AS EXECUTE`), the cursor of `DECLARE`/`FETCH`/`CLOSE`, the savepoint, or the gid of a
    /// two-phase command. `None` for `RESET ALL`, `UNLISTEN *`, `DEALLOCATE ALL`, ...
    pub fn name(&self) -> Option<&'a str> {
        self.data.name.map(|s| self.analysis.str(s))
    }

    /// The value of `SET` (arguments joined with `", "`, string literals unquoted) or the
    /// payload of `NOTIFY`. `None` when there is none or it is not a plain literal.
    pub fn value(&self) -> Option<&'a str> {
        self.data.value.map(|s| self.analysis.str(s))
    }

    /// Tables the statement reads or changes, each once, sorted by schema and name. Names
    /// are as PostgreSQL folded them (unquoted identifiers lower-cased); the schema is there
    /// only when the query wrote one. References to CTEs are not tables and are left out.
    pub fn tables(&self) -> impl Iterator<Item = TableRef<'a>> + 'a {
        let a = self.analysis;
        a.entries[self.data.tables.usize()].iter().filter_map(move |e| match e {
            Entry::Table(t) => Some(TableRef::new(a, t)),
            _ => None,
        })
    }

    /// Session-scoped effects, in order.
    pub fn session_effects(&self) -> impl Iterator<Item = SessionEffect<'a>> + 'a {
        let a = self.analysis;
        a.entries[self.data.effects.usize()].iter().filter_map(move |e| match e {
            Entry::Effect(d) => Some(SessionEffect::new(a, d)),
            _ => None,
        })
    }

    /// Equality predicates of the statement's own `WHERE` clause (top level and under
    /// `AND`): `column = constant`, `column = $n`, `column IN (...)`, `column = ANY(...)`.
    pub fn predicates(&self) -> impl Iterator<Item = Predicate<'a>> + 'a {
        let a = self.analysis;
        a.entries[self.data.preds.usize()].iter().filter_map(move |e| match e {
            Entry::Pred(p) => Some(Predicate { analysis: a, data: p }),
            _ => None,
        })
    }

    /// The statement's own `WHERE` clause as a condition tree, for shard routing; `None`
    /// when it has none (or is not a `SELECT`, `UPDATE` or `DELETE`).
    pub fn condition(&self) -> Option<Condition<'a>> {
        condition_in(self.analysis, self.data.conds)
    }

    /// For `UPDATE`: the columns its `SET` clause assigns; for `MERGE`, those of its `UPDATE`
    /// actions.
    pub fn updated_columns(&self) -> impl ExactSizeIterator<Item = &'a str> + 'a {
        columns_in(self.analysis, self.data.set_columns)
    }

    /// Tables written by a data-modifying statement inside this one (a `WITH` query at any
    /// depth, a subquery, the body of `EXPLAIN ANALYZE` or `COPY (...)`) rather than by the
    /// statement itself; those writes have conditions and rows of their own.
    pub fn nested_writes(&self) -> impl Iterator<Item = TableRef<'a>> + 'a {
        let a = self.analysis;
        a.entries[self.data.tables.usize()].iter().filter_map(move |e| match e {
            Entry::Table(t) if t.nested => Some(TableRef::new(a, t)),
            _ => None,
        })
    }

    /// Tables written by statements inside this one and named nowhere else in it.
    pub fn written_only_inside(&self) -> impl Iterator<Item = TableRef<'a>> + 'a {
        let a = self.analysis;
        a.entries[self.data.tables.usize()].iter().filter_map(move |e| match e {
            Entry::Table(t) if t.nested && !t.outer => Some(TableRef::new(a, t)),
            _ => None,
        })
    }

    /// The data-modifying statements inside this one, each with its own table and condition.
    pub fn nested_write_statements(&self) -> impl Iterator<Item = NestedWrite<'a>> + 'a {
        let a = self.analysis;
        a.entries[self.data.nested.usize()].iter().filter_map(move |e| match e {
            Entry::Nested(data) => Some(NestedWrite { analysis: a, data }),
            _ => None,
        })
    }

    /// For `INSERT ... ON CONFLICT DO UPDATE`: the columns its `SET` assigns to anything but
    /// their own current value (`SET k = k`, `SET k = EXCLUDED.k` with the conflict on `k`,
    /// are left out).
    pub fn upsert_assigned_columns(&self) -> impl ExactSizeIterator<Item = &'a str> + 'a {
        let a = self.analysis;
        a.entries[self.data.conflict_sets.usize()].iter().map(move |e| match e {
            Entry::Column(s) => a.str(*s),
            _ => "",
        })
    }

    /// For `MERGE`: whether it has a `WHEN NOT MATCHED THEN INSERT` action.
    pub fn merge_inserts(&self) -> bool {
        self.data.merge_inserts
    }

    /// For `INSERT`: whether it has an `ON CONFLICT` clause.
    pub fn on_conflict(&self) -> bool {
        self.data.on_conflict
    }

    /// For `INSERT ... VALUES`: the inserted values by column.
    pub fn insert_values(&self) -> Option<InsertValues<'a>> {
        self.data.insert.map(|data| InsertValues { analysis: self.analysis, data })
    }

    /// True when the statement had more literal values than analysis records, so its
    /// predicates and insert values are incomplete and cannot decide a shard alone.
    pub fn values_truncated(&self) -> bool {
        self.data.truncated
    }
}

impl fmt::Debug for Statement<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Statement");
        d.field("kind", &self.kind()).field("tag", &self.tag()).field("writes", &self.writes());
        if let Some(t) = self.target() {
            d.field("target", &t);
        }
        if let Some(n) = self.name() {
            d.field("name", &n);
        }
        if let Some(v) = self.value() {
            d.field("value", &v);
        }
        d.field("tables", &self.tables().collect::<Vec<_>>());
        d.field("effects", &self.session_effects().collect::<Vec<_>>());
        d.field("predicates", &self.predicates().collect::<Vec<_>>());
        if let Some(i) = self.insert_values() {
            d.field("insert", &i);
        }
        d.finish()
    }
}

/// A data-modifying statement inside another (a `WITH` query, a subquery, the body of
/// `EXPLAIN ANALYZE` or `COPY (...)`).
#[derive(Clone, Copy)]
pub struct NestedWrite<'a> {
    analysis: &'a Analysis,
    data: &'a NestedData,
}

impl<'a> NestedWrite<'a> {
    /// The table it writes, as the query names it: `(schema, name)`.
    pub fn table(&self) -> (Option<&'a str>, &'a str) {
        let a = self.analysis;
        (self.data.schema.map(|s| a.str(s)), a.str(self.data.name))
    }

    pub fn kind(&self) -> NestedKind {
        self.data.kind
    }

    /// Its own `WHERE` clause as a condition tree; `None` when it has none (or is an
    /// `INSERT` or `MERGE`).
    pub fn condition(&self) -> Option<Condition<'a>> {
        condition_in(self.analysis, self.data.conds)
    }

    /// For `UPDATE`: the columns it assigns.
    pub fn updated_columns(&self) -> impl ExactSizeIterator<Item = &'a str> + 'a {
        columns_in(self.analysis, self.data.set_columns)
    }
}

impl fmt::Debug for NestedWrite<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NestedWrite")
            .field("table", &self.table())
            .field("kind", &self.kind())
            .field("condition", &self.condition())
            .finish()
    }
}

/// A table named by a statement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableRef<'a> {
    /// The schema, when the query qualified the name.
    pub schema: Option<&'a str>,
    /// The table (or view, sequence, ...) name.
    pub name: &'a str,
    /// Read, written, or both.
    pub access: Access,
}

impl<'a> TableRef<'a> {
    fn new(a: &'a Analysis, t: &TableData) -> TableRef<'a> {
        TableRef { schema: t.schema.map(|s| a.str(s)), name: a.str(t.name), access: t.access }
    }
}

impl fmt::Display for TableRef<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.schema {
            Some(s) => write!(f, "{s}.{}", self.name),
            None => f.write_str(self.name),
        }
    }
}

/// Session state a statement changes: what a transaction-mode pooler must either replay on
/// the next server, or pin the client to its server for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SessionEffect<'a> {
    /// `SET` / `SET SESSION` (not `SET LOCAL`), or `set_config(name, value, false)`. `name`
    /// is `None` when `set_config` was given a computed name; `value` when the value is not a
    /// literal (or for `SET ... FROM CURRENT`).
    Set { name: Option<&'a str>, value: Option<&'a str> },
    /// `RESET name`, `SET name TO DEFAULT`; `None` for `RESET ALL`.
    Reset { name: Option<&'a str> },
    /// An advisory lock function call.
    AdvisoryLock { scope: LockScope, op: LockOp },
    /// `LISTEN channel`.
    Listen { channel: &'a str },
    /// `UNLISTEN channel`; `None` for `UNLISTEN *`.
    Unlisten { channel: Option<&'a str> },
    /// A temporary table (or view or sequence) was created. Those created `ON COMMIT DROP`
    /// vanish at the end of their transaction.
    TempTable { name: &'a str, on_commit_drop: bool },
    /// `DECLARE name CURSOR WITH HOLD`: the cursor outlives its transaction.
    HoldCursor { name: &'a str },
    /// `CLOSE name`; `None` for `CLOSE ALL`.
    CloseCursor { name: Option<&'a str> },
    /// SQL-level `PREPARE name`.
    Prepare { name: &'a str },
    /// `DEALLOCATE name`; `None` for `DEALLOCATE ALL`.
    Deallocate { name: Option<&'a str> },
    /// `DISCARD ...`.
    Discard(DiscardTarget),
    /// `LOAD 'library'`: the library stays loaded in that backend.
    Load,
}

impl<'a> SessionEffect<'a> {
    fn new(a: &'a Analysis, d: &EffectData) -> SessionEffect<'a> {
        let s = |span: Span| a.str(span);
        match *d {
            EffectData::Set { name, value } => SessionEffect::Set { name: name.map(s), value: value.map(s) },
            EffectData::Reset { name } => SessionEffect::Reset { name: name.map(s) },
            EffectData::AdvisoryLock { scope, op } => SessionEffect::AdvisoryLock { scope, op },
            EffectData::Listen { channel } => SessionEffect::Listen { channel: s(channel) },
            EffectData::Unlisten { channel } => SessionEffect::Unlisten { channel: channel.map(s) },
            EffectData::TempTable { name, on_commit_drop } => {
                SessionEffect::TempTable { name: s(name), on_commit_drop }
            }
            EffectData::HoldCursor { name } => SessionEffect::HoldCursor { name: s(name) },
            EffectData::CloseCursor { name } => SessionEffect::CloseCursor { name: name.map(s) },
            EffectData::Prepare { name } => SessionEffect::Prepare { name: s(name) },
            EffectData::Deallocate { name } => SessionEffect::Deallocate { name: name.map(s) },
            EffectData::Discard(t) => SessionEffect::Discard(t),
            EffectData::Load => SessionEffect::Load,
        }
    }
}

/// A literal or parameter found where shard routing can use it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value<'a> {
    /// An integer literal that fits in 64 bits.
    Integer(i64),
    /// Any other numeric literal, as written.
    Numeric(&'a str),
    /// A string literal, unescaped. A cast (`'42'::bigint`) is looked through.
    String(&'a str),
    /// `TRUE` / `FALSE`.
    Boolean(bool),
    /// `NULL`.
    Null,
    /// `$number`; `type_oid` from the Parse message's parameter types, else from a cast to a
    /// built-in type (`$1::bigint`), else 0 (unknown).
    Param { number: u32, type_oid: u32 },
    /// `DEFAULT` in `INSERT ... VALUES`.
    Default,
    /// Anything computed.
    Expression,
}

/// `column = value`, `column IN (...)`, `column = ANY(...)` or a range comparison from a
/// `WHERE` clause.
#[derive(Clone, Copy)]
pub struct Predicate<'a> {
    analysis: &'a Analysis,
    data: &'a PredData,
}

impl<'a> Predicate<'a> {
    /// The table the column belongs to, when the query makes it certain (qualified by a
    /// table name or alias, or only one table in `FROM`): `(schema, name)`.
    pub fn table(&self) -> Option<(Option<&'a str>, &'a str)> {
        let a = self.analysis;
        self.data.table.map(|t| (self.data.schema.map(|s| a.str(s)), a.str(t)))
    }

    /// The column name.
    pub fn column(&self) -> &'a str {
        self.analysis.str(self.data.column)
    }

    /// How the column is compared.
    pub fn op(&self) -> PredicateOp {
        self.data.op
    }

    /// The value(s) compared with: one for `Equals` and `AnyArray`, the list for `In`.
    pub fn values(&self) -> impl ExactSizeIterator<Item = Value<'a>> + 'a {
        self.analysis.values_in(self.data.values)
    }
}

impl fmt::Debug for Predicate<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Predicate")
            .field("table", &self.table())
            .field("column", &self.column())
            .field("op", &self.op())
            .field("values", &self.values().collect::<Vec<_>>())
            .finish()
    }
}

/// A node of a `WHERE` clause's condition tree.
#[derive(Clone, Copy)]
pub enum Condition<'a> {
    /// All of the children hold.
    And(Children<'a>),
    /// At least one child holds.
    Or(Children<'a>),
    /// A comparison of a column with constants or parameters (any [`PredicateOp`]).
    Predicate(Predicate<'a>),
    /// Something routing cannot read: `NOT`, `IS NULL`, a function call, a subquery, a
    /// comparison of two columns... It may hold for any row.
    Unknown,
}

impl<'a> Condition<'a> {
    fn at(a: &'a Analysis, index: usize) -> Condition<'a> {
        match a.entries.get(index) {
            Some(Entry::Cond(CondData::And { children, .. })) => {
                Condition::And(Children { analysis: a, next: index + 1, left: *children })
            }
            Some(Entry::Cond(CondData::Or { children, .. })) => {
                Condition::Or(Children { analysis: a, next: index + 1, left: *children })
            }
            Some(Entry::Cond(CondData::Leaf(data))) => Condition::Predicate(Predicate { analysis: a, data }),
            _ => Condition::Unknown,
        }
    }
}

impl fmt::Debug for Condition<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Condition::And(c) => f.debug_tuple("And").field(&c.collect::<Vec<_>>()).finish(),
            Condition::Or(c) => f.debug_tuple("Or").field(&c.collect::<Vec<_>>()).finish(),
            Condition::Predicate(p) => p.fmt(f),
            Condition::Unknown => f.write_str("Unknown"),
        }
    }
}

/// The children of an `AND` or `OR`, in the order written.
#[derive(Clone, Copy)]
pub struct Children<'a> {
    analysis: &'a Analysis,
    next: usize,
    left: u32,
}

impl<'a> Iterator for Children<'a> {
    type Item = Condition<'a>;

    fn next(&mut self) -> Option<Condition<'a>> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let here = self.next;
        let len = match self.analysis.entries.get(here) {
            Some(Entry::Cond(c)) => c.len() as usize,
            _ => 1,
        };
        self.next = here + len.max(1);
        Some(Condition::at(self.analysis, here))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left as usize, Some(self.left as usize))
    }
}

impl ExactSizeIterator for Children<'_> {}

/// The rows of an `INSERT ... VALUES`.
#[derive(Clone, Copy)]
pub struct InsertValues<'a> {
    analysis: &'a Analysis,
    data: InsertData,
}

impl<'a> InsertValues<'a> {
    /// The column list as written; empty when the statement gives none (then values are
    /// in table column order).
    pub fn columns(&self) -> impl ExactSizeIterator<Item = &'a str> + 'a {
        let a = self.analysis;
        a.entries[self.data.columns.usize()].iter().map(move |e| match e {
            Entry::Column(s) => a.str(*s),
            _ => "",
        })
    }

    /// Values per row.
    pub fn width(&self) -> usize {
        self.data.width as usize
    }

    /// Number of rows recorded.
    pub fn rows(&self) -> usize {
        let n = self.data.values.usize().len();
        n.checked_div(self.width()).unwrap_or(0)
    }

    /// The values of row `index`.
    pub fn row(&self, index: usize) -> impl ExactSizeIterator<Item = Value<'a>> + 'a {
        let w = self.data.width;
        let start = (self.data.values.start + w * index as u32).min(self.data.values.end);
        let end = (start + w).min(self.data.values.end);
        self.analysis.values_in(Range32 { start, end })
    }

    /// The values of the column at `position` (in the column list, or the table when there
    /// is none), one per row.
    pub fn column(&self, position: usize) -> impl Iterator<Item = Value<'a>> + 'a {
        let a = self.analysis;
        let w = self.width().max(1);
        let slice = &a.values[self.data.values.usize()];
        let pos = if position < self.width() { position } else { slice.len() };
        slice.iter().skip(pos).step_by(w).map(move |v| a.value(v))
    }
}

impl fmt::Debug for InsertValues<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let rows: Vec<Vec<Value<'_>>> = (0..self.rows()).map(|r| self.row(r).collect()).collect();
        f.debug_struct("InsertValues")
            .field("columns", &self.columns().collect::<Vec<_>>())
            .field("rows", &rows)
            .finish()
    }
}

/// Routing hints from comments such as `/* pgvia: role=primary shard=3 */`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Hints<'a> {
    /// `role=primary` or `role=replica`.
    pub role: Option<Role>,
    /// `shard=N`.
    pub shard: Option<u32>,
    /// `shard_key=value`, quotes removed.
    pub shard_key: Option<&'a str>,
    /// A `pgvia:` comment had a key or value that is not understood (it was ignored).
    pub unrecognized: bool,
}

/// The condition tree stored at `conds`, if there is one (a statement's or a nested write's
/// own `WHERE`).
fn condition_in(a: &Analysis, conds: Range32) -> Option<Condition<'_>> {
    (!conds.usize().is_empty()).then(|| Condition::at(a, conds.start as usize))
}

/// The column names stored at `columns` (what an `UPDATE` assigns).
fn columns_in(a: &Analysis, columns: Range32) -> impl ExactSizeIterator<Item = &str> + '_ {
    a.entries[columns.usize()].iter().map(move |e| match e {
        Entry::Column(s) => a.str(*s),
        _ => "",
    })
}
