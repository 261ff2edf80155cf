//! How an [`Analysis`](crate::Analysis) is laid out in memory.
//!
//! Owned, flat and `Send + Sync`: statements, tables, effects and predicates share one boxed
//! slice of [`Entry`], literal values another, and every name one string. A typical query
//! therefore costs three allocations beyond the `Arc`, however many tables it names, and the
//! whole thing is one `Arc` clone away from every session that needs it.

use crate::model::{Access, DiscardTarget, LockOp, LockScope, NestedKind, PredicateOp, Role, StatementKind};

/// A piece of the analysis' string storage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Span {
    pub start: u32,
    pub len: u32,
}

/// A half-open range of indexes into `entries` or `values`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Range32 {
    pub start: u32,
    pub end: u32,
}

impl Range32 {
    pub fn new(start: usize, end: usize) -> Range32 {
        Range32 { start: start as u32, end: end as u32 }
    }

    pub fn shifted(self, by: usize) -> Range32 {
        Range32 { start: self.start + by as u32, end: self.end + by as u32 }
    }

    pub fn usize(self) -> std::ops::Range<usize> {
        self.start as usize..self.end as usize
    }
}

#[derive(Debug, Clone)]
pub(crate) struct StmtData {
    pub kind: StatementKind,
    /// The statement inside `EXPLAIN`, `PREPARE` or `DECLARE`.
    pub target: Option<StatementKind>,
    pub tag: &'static str,
    pub writes: bool,
    /// More literal values than analysis records were present; shard routing must not trust
    /// the predicates and insert values of this statement to be complete.
    pub truncated: bool,
    /// Byte offsets of the statement in the query text.
    pub location: (u32, u32),
    pub name: Option<Span>,
    pub value: Option<Span>,
    pub tables: Range32,
    pub effects: Range32,
    pub preds: Range32,
    /// The `WHERE` clause as a condition tree (`Entry::Cond`, prefix order); empty when
    /// there is no `WHERE` clause or the statement has none of its own.
    pub conds: Range32,
    /// For `UPDATE`: the columns its `SET` assigns (`Entry::Column`).
    pub set_columns: Range32,
    /// For `INSERT`: it has an `ON CONFLICT` clause.
    pub on_conflict: bool,
    /// For `INSERT ... ON CONFLICT DO UPDATE`: the columns it assigns to anything but their
    /// own current value (`Entry::Column`).
    pub conflict_sets: Range32,
    /// For `MERGE`: it has a `WHEN NOT MATCHED THEN INSERT` action.
    pub merge_inserts: bool,
    /// The data-modifying statements inside this one (`Entry::Nested`).
    pub nested: Range32,
    pub insert: Option<InsertData>,
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct InsertData {
    /// `Entry::Column` entries; empty when the statement names no columns.
    pub columns: Range32,
    /// Row-major values, `width` per row.
    pub values: Range32,
    pub width: u32,
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct TableData {
    pub schema: Option<Span>,
    pub name: Span,
    pub access: Access,
    /// Written by a data-modifying statement inside the statement (a `WITH` query, a
    /// subquery, the body of `EXPLAIN ANALYZE` or `COPY (...)`), not by the statement itself.
    pub nested: bool,
    /// Named by something other than such a nested write.
    pub outer: bool,
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct NestedData {
    pub schema: Option<Span>,
    pub name: Span,
    pub kind: NestedKind,
    /// Its own `WHERE` clause as a condition tree (`Entry::Cond`); empty when it has none.
    pub conds: Range32,
    /// For `UPDATE`: the columns it assigns (`Entry::Column`).
    pub set_columns: Range32,
}

#[derive(Debug, Clone, Copy)]
pub(crate) enum EffectData {
    Set { name: Option<Span>, value: Option<Span> },
    Reset { name: Option<Span> },
    AdvisoryLock { scope: LockScope, op: LockOp },
    Listen { channel: Span },
    Unlisten { channel: Option<Span> },
    TempTable { name: Span, on_commit_drop: bool },
    HoldCursor { name: Span },
    CloseCursor { name: Option<Span> },
    Prepare { name: Span },
    Deallocate { name: Option<Span> },
    Discard(DiscardTarget),
    Load,
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct PredData {
    pub schema: Option<Span>,
    pub table: Option<Span>,
    pub column: Span,
    pub op: PredicateOp,
    pub values: Range32,
}

/// One node of a `WHERE` clause's condition tree, stored in prefix order: an `And`/`Or` is
/// followed by its `children` subtrees, which take `len - 1` entries in all, so a reader
/// can step over a subtree without walking it.
#[derive(Debug, Clone, Copy)]
pub(crate) enum CondData {
    And {
        children: u32,
        len: u32,
    },
    Or {
        children: u32,
        len: u32,
    },
    Leaf(PredData),
    /// Anything routing cannot read (`NOT`, `IS NULL`, a function, a subquery...).
    Unknown,
}

impl CondData {
    /// Entries this node's subtree takes, itself included.
    pub fn len(&self) -> u32 {
        match self {
            CondData::And { len, .. } | CondData::Or { len, .. } => *len,
            CondData::Leaf(_) | CondData::Unknown => 1,
        }
    }
}

#[derive(Debug, Clone, Copy)]
pub(crate) enum ValueData {
    Integer(i64),
    Numeric(Span),
    String(Span),
    Boolean(bool),
    Null,
    Param { number: u32, type_oid: u32 },
    Default,
    Expression,
}

#[derive(Debug, Clone)]
pub(crate) enum Entry {
    Stmt(StmtData),
    Table(TableData),
    Effect(EffectData),
    Pred(PredData),
    Cond(CondData),
    Column(Span),
    Nested(NestedData),
}

#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct HintData {
    pub role: Option<Role>,
    pub shard: Option<u32>,
    pub shard_key: Option<Span>,
    pub unrecognized: bool,
}
