//! Per-thread working storage for one analysis.
//!
//! The walk appends to growable vectors that are kept between analyses, so it allocates
//! nothing in the steady state; [`Scratch::finish`] then copies the result into an exactly
//! sized [`Analysis`]. The scratch is cleared before every use, so a walk that panicked
//! half-way leaves nothing behind.

use std::cell::RefCell;
use std::cmp::Ordering;

use crate::analysis::Analysis;
use crate::model::Outcome;
use crate::store::{
    CondData, EffectData, Entry, HintData, NestedData, PredData, Range32, Span, StmtData, TableData,
    ValueData,
};

/// Scratch buffers larger than this are dropped after use rather than kept per thread, so
/// one huge query does not pin megabytes in every worker thread forever.
const KEEP_BYTES: usize = 256 * 1024;

#[derive(Default)]
pub(crate) struct Scratch {
    pub stmts: Vec<StmtData>,
    pub tables: Vec<TableData>,
    pub effects: Vec<EffectData>,
    pub preds: Vec<PredData>,
    pub conds: Vec<CondData>,
    pub columns: Vec<Span>,
    pub nested: Vec<NestedData>,
    pub values: Vec<ValueData>,
    pub arena: String,
    /// A function outside the known read-only built-ins was called somewhere in the query.
    pub calls_unlisted: bool,
    /// Something in the query may change the session where the text does not show it.
    pub hidden_effects: bool,
    /// `pg_notify` is called somewhere in the query.
    pub calls_notify: bool,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

impl Scratch {
    /// Runs `f` with this thread's scratch, cleared. Falls back to a fresh one if the
    /// thread's is somehow in use (it never is: analysis does not re-enter itself).
    pub fn with<R>(f: impl FnOnce(&mut Scratch) -> R) -> R {
        SCRATCH.with(|cell| match cell.try_borrow_mut() {
            Ok(mut s) => {
                s.clear();
                let r = f(&mut s);
                if s.footprint() > KEEP_BYTES {
                    *s = Scratch::default();
                }
                r
            }
            Err(_) => f(&mut Scratch::default()),
        })
    }

    fn clear(&mut self) {
        self.stmts.clear();
        self.tables.clear();
        self.effects.clear();
        self.preds.clear();
        self.conds.clear();
        self.columns.clear();
        self.nested.clear();
        self.values.clear();
        self.arena.clear();
        self.calls_unlisted = false;
        self.hidden_effects = false;
        self.calls_notify = false;
    }

    fn footprint(&self) -> usize {
        self.stmts.capacity() * size_of::<StmtData>()
            + self.tables.capacity() * size_of::<TableData>()
            + self.effects.capacity() * size_of::<EffectData>()
            + self.preds.capacity() * size_of::<PredData>()
            + self.conds.capacity() * size_of::<CondData>()
            + self.columns.capacity() * size_of::<Span>()
            + self.nested.capacity() * size_of::<NestedData>()
            + self.values.capacity() * size_of::<ValueData>()
            + self.arena.capacity()
    }

    /// Copies `s` into the string storage.
    pub fn intern(&mut self, s: &str) -> Span {
        let start = self.arena.len();
        self.arena.push_str(s);
        Span { start: start as u32, len: s.len() as u32 }
    }

    pub fn str(&self, span: Span) -> &str {
        let start = span.start as usize;
        self.arena.get(start..start + span.len as usize).unwrap_or("")
    }

    fn opt_str(&self, span: Option<Span>) -> Option<&str> {
        span.map(|s| self.str(s))
    }

    fn table_order(&self, a: &TableData, b: &TableData) -> Ordering {
        self.opt_str(a.schema)
            .cmp(&self.opt_str(b.schema))
            .then_with(|| self.str(a.name).cmp(self.str(b.name)))
    }

    /// Sorts the tables recorded since `from` and merges duplicates, so each table is
    /// listed once with the union of its accesses. Sorting keeps this `n log n` however
    /// many times a query names the same tables.
    pub fn dedup_tables(&mut self, from: usize) {
        let mut tail = std::mem::take(&mut self.tables);
        tail[from..].sort_unstable_by(|a, b| self.table_order(a, b));
        let mut write = from;
        for read in from..tail.len() {
            if write > from && self.table_order(&tail[write - 1], &tail[read]) == Ordering::Equal {
                tail[write - 1].access = tail[write - 1].access.merge(tail[read].access);
                tail[write - 1].nested |= tail[read].nested;
                tail[write - 1].outer |= tail[read].outer;
            } else {
                tail[write] = tail[read];
                write += 1;
            }
        }
        tail.truncate(write);
        self.tables = tail;
    }

    /// Builds the immutable analysis: statements first, then tables, effects, predicates
    /// conditions and columns, each statement's ranges shifted to match.
    pub fn finish(&mut self, outcome: Outcome, hints: HintData) -> Analysis {
        let n_stmts = self.stmts.len();
        let t_base = n_stmts;
        let e_base = t_base + self.tables.len();
        let p_base = e_base + self.effects.len();
        let k_base = p_base + self.preds.len();
        let c_base = k_base + self.conds.len();
        let n_base = c_base + self.columns.len();
        let total = n_base + self.nested.len();

        let mut entries = Vec::with_capacity(total);
        let mut writes = false;
        let mut notifies = self.calls_notify;
        for stmt in &self.stmts {
            notifies |= stmt.kind == crate::model::StatementKind::Notify;
            let mut s = stmt.clone();
            s.tables = s.tables.shifted(t_base);
            s.effects = s.effects.shifted(e_base);
            s.preds = s.preds.shifted(p_base);
            s.conds = s.conds.shifted(k_base);
            s.set_columns = s.set_columns.shifted(c_base);
            s.conflict_sets = s.conflict_sets.shifted(c_base);
            s.nested = s.nested.shifted(n_base);
            if let Some(ins) = &mut s.insert {
                ins.columns = ins.columns.shifted(c_base);
            }
            writes |= s.writes;
            entries.push(Entry::Stmt(s));
        }
        entries.extend(self.tables.iter().map(|t| Entry::Table(*t)));
        entries.extend(self.effects.iter().map(|e| Entry::Effect(*e)));
        entries.extend(self.preds.iter().map(|p| Entry::Pred(*p)));
        entries.extend(self.conds.iter().map(|c| Entry::Cond(*c)));
        entries.extend(self.columns.iter().map(|c| Entry::Column(*c)));
        entries.extend(self.nested.iter().map(|n| {
            let mut n = *n;
            n.conds = n.conds.shifted(k_base);
            n.set_columns = n.set_columns.shifted(c_base);
            Entry::Nested(n)
        }));

        Analysis {
            outcome,
            writes,
            calls_unlisted: self.calls_unlisted,
            hidden_effects: self.hidden_effects,
            notifies,
            stmt_count: n_stmts as u32,
            hints,
            entries: entries.into_boxed_slice(),
            values: self.values.as_slice().into(),
            text: self.arena.as_str().into(),
        }
    }

    /// A conservative analysis that still carries the hints (and their strings).
    pub fn finish_conservative(&mut self, outcome: Outcome, hints: HintData) -> Analysis {
        Analysis::conservative(outcome, hints, self.arena.as_str().into())
    }
}

pub(crate) fn range(start: usize, end: usize) -> Range32 {
    Range32::new(start, end)
}
