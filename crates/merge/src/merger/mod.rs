//! The streaming merger: fed each shard's RowDescription, DataRows and end, it writes the
//! client's RowDescription, DataRows and `SELECT n` as wire frames.
//!
//! Without aggregates, rows stream: ORDER BY is a k-way merge that emits a row only when
//! every unfinished shard has one buffered (so it is the smallest of all that can still
//! come), DISTINCT keeps a set of the keys seen (or, under a DISTINCT ON order, only the
//! last key), OFFSET/LIMIT count after the merge. With aggregates, groups accumulate in a
//! map until every shard is done, then HAVING, ORDER BY and LIMIT apply. All buffered state
//! counts against the memory budget; past it, with a spill store, grouping and DISTINCT
//! partition to spill files and the sort after grouping writes sorted runs (`grouping.rs`,
//! `emit.rs`, `output.rs`).

use std::collections::{HashMap, HashSet, VecDeque};

use bytes::{BufMut, Bytes, BytesMut};
use wire::backend::BackendMessage;

use crate::accum::Acc;
use crate::binary;
use crate::column::ColRef;
use crate::error::MergeError;
use crate::plan::{Count, Distinct, MergePlan, OutCol, PlanKind, Spec};
use crate::spill::SpillStore;
use crate::value::{Class, Value};

mod emit;
mod grouping;
mod output;
mod rows;

use rows::{compare_rows, merged_sort_keys, put_field, rd_body, Layout, Row, ROW_BYTES};

/// Bytes of output [`Merger::drain`] writes before it returns [`Drained::Full`] (a grouping's
/// rows come all at once when the input ends; the client gets them in slices).
const OUTPUT_SLICE: usize = 256 << 10;

/// How text is ordered across shards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextOrder {
    /// Byte order: PostgreSQL's order under the `C`/`POSIX` collations.
    Bytes,
    /// The database's collation is not byte order: ordering text (ORDER BY, min/max) fails
    /// with SQLSTATE 0A000 instead of giving a different order than PostgreSQL's.
    Refuse,
}

/// Limits of one merge.
#[derive(Debug, Clone, Copy)]
pub struct MergeOptions {
    /// Bytes of buffered rows, groups and DISTINCT keys a merge may hold (approximate).
    pub memory_budget: usize,
    pub text_order: TextOrder,
}

impl Default for MergeOptions {
    fn default() -> Self {
        MergeOptions { memory_budget: 64 << 20, text_order: TextOrder::Bytes }
    }
}

/// What [`Merger::drain`] left the merge in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Drained {
    /// More input is needed; [`Merger::needs_input`] says from which shards.
    NeedInput,
    /// CommandComplete was written; remaining shard input (past a LIMIT) can be discarded.
    Finished,
    /// The output holds a slice of the rows; write it to the client and call `drain` again
    /// (no input is needed for the rest).
    Full,
}

#[derive(Default)]
struct Input {
    described: bool,
    done: bool,
    rows: VecDeque<Row>,
}

struct Group {
    first: Vec<Option<Bytes>>,
    accs: Vec<Option<Acc>>,
    /// Bytes charged for this group (its key, first row and aggregate states).
    size: usize,
}

/// Merges one statement's shard results. See the crate documentation for the protocol.
pub struct Merger {
    spec: Option<Spec>,
    opts: MergeOptions,
    inputs: Vec<Input>,
    layout: Option<Layout>,
    desc: Option<BytesMut>,
    desc_sent: bool,
    groups: HashMap<Vec<u8>, Group>,
    /// Template accumulators per merged column (None for plain columns).
    templates: Vec<Option<Acc>>,
    ready: Option<output::Output>,
    seen: HashSet<Vec<u8>>,
    /// Bytes of `seen`'s keys, given back when it is emptied.
    seen_bytes: usize,
    /// Under ORDER BY with DISTINCT, the sort keys of the run of rows `seen` covers.
    prev_sort: Option<Vec<Option<Value>>>,
    prev_on: Option<Vec<u8>>,
    /// Where state past the budget goes; `None`: exceeding the budget is an error.
    store: Option<Box<dyn SpillStore>>,
    /// Bytes written to spill files.
    spilled: u64,
    /// The grouping partition being finished (0: the shards' rows themselves).
    level: u32,
    overflow: Option<grouping::Overflow>,
    /// The DISTINCT partition being deduplicated (0: the merged rows themselves).
    dlevel: u32,
    dspill: Option<emit::DistinctSpill>,
    skipped: u64,
    emitted: u64,
    used: usize,
    finished: bool,
    /// The client's format per visible column, when it differs from the shards' (they are
    /// asked for text and the merge writes each column in the client's format).
    result_formats: Option<Vec<i16>>,
    /// LIMIT/OFFSET parameters still to be bound.
    unbound: bool,
    /// Only shard 0's rows count ([`MergePlan::one_shard`]).
    first_only: bool,
}

impl Merger {
    pub fn new(plan: &MergePlan, shards: usize, opts: MergeOptions) -> Merger {
        let spec = match &plan.kind {
            PlanKind::Plain => None,
            PlanKind::Merge(s) => Some((**s).clone()),
        };
        let unbound = plan.limit_params() != (None, None);
        Merger {
            spec,
            opts,
            inputs: (0..shards).map(|_| Input::default()).collect(),
            layout: None,
            desc: None,
            desc_sent: false,
            groups: HashMap::new(),
            templates: Vec::new(),
            ready: None,
            seen: HashSet::new(),
            seen_bytes: 0,
            prev_sort: None,
            prev_on: None,
            store: None,
            spilled: 0,
            level: 0,
            overflow: None,
            dlevel: 0,
            dspill: None,
            skipped: 0,
            emitted: 0,
            used: 0,
            finished: false,
            result_formats: None,
            unbound,
            first_only: plan.one_shard(),
        }
    }

    /// Lets the merge spill grouping, sorting and DISTINCT state past its budget to `store`
    /// instead of failing (SQLSTATE 53200).
    pub fn set_spill(&mut self, store: Box<dyn SpillStore>) {
        self.store = Some(store);
    }

    /// The client's result format per visible column (a Bind with one code per column that
    /// are not all the same, as pgx sends: text for `text`, binary for integers). The caller
    /// asks the shards for every column in text (one format code, 0); the merge converts
    /// the columns the client wants in binary as it writes them, for the types it converts
    /// (else the RowDescription fails with 0A000). Call before the first RowDescription.
    pub fn set_result_formats(&mut self, formats: &[i16]) {
        self.result_formats = Some(formats.to_vec());
    }

    /// Bytes this merge wrote to spill files so far.
    pub fn spilled_bytes(&self) -> u64 {
        self.spilled
    }

    /// The execution's parameter values (`(value, binary format)`, NULL as `None`), for a
    /// `LIMIT $n` / `OFFSET $m` ([`MergePlan::limit_params`]); other parameters are ignored.
    pub fn bind_params(&mut self, params: &[(Option<&[u8]>, bool)]) -> Result<(), MergeError> {
        let Some(spec) = &mut self.spec else { return Ok(()) };
        let read = |at: Count| -> Result<Option<u64>, MergeError> {
            let Count::Param(n) = at else { return Ok(None) };
            let (value, binary) = params
                .get(n - 1)
                .ok_or_else(|| MergeError::Protocol(format!("no value for parameter ${n}")))?;
            let Some(v) = value else { return Ok(None) };
            let text = if *binary {
                binary::to_text(
                    match v.len() {
                        2 => 21,
                        4 => 23,
                        _ => 20,
                    },
                    v,
                )?
            } else {
                v.to_vec()
            };
            let n = std::str::from_utf8(&text).ok().and_then(|t| t.trim().parse::<i64>().ok());
            let n =
                n.ok_or_else(|| MergeError::BadValue { oid: 20, why: "LIMIT/OFFSET parameter".into() })?;
            // PostgreSQL itself rejects negative values (on the shards, before any row comes).
            Ok(Some(u64::try_from(n).unwrap_or(0)))
        };
        if matches!(spec.limit_at, Count::Param(_)) {
            spec.limit = read(spec.limit_at)?;
        }
        if matches!(spec.offset_at, Count::Param(_)) {
            spec.offset = read(spec.offset_at)?.unwrap_or(0);
        }
        self.unbound = false;
        Ok(())
    }

    fn input(&mut self, shard: usize) -> Result<&mut Input, MergeError> {
        self.inputs.get_mut(shard).ok_or_else(|| MergeError::Protocol(format!("no shard {shard}")))
    }

    /// A shard's RowDescription (the message body, without tag and length).
    pub fn row_description(&mut self, shard: usize, body: &[u8]) -> Result<(), MergeError> {
        let msg = BackendMessage::parse_body(b'T', body).map_err(|e| MergeError::Protocol(e.to_string()))?;
        let BackendMessage::RowDescription(rd) = msg else {
            return Err(MergeError::Protocol("not a RowDescription".into()));
        };
        let mut cols = Vec::new();
        for c in rd.columns() {
            let c = c.map_err(|e| MergeError::Protocol(e.to_string()))?;
            cols.push((c.type_oid, c.format));
        }
        self.input(shard)?.described = true;
        if let Some(l) = &self.layout {
            if l.shard.len() != cols.len() {
                return Err(MergeError::Protocol(format!(
                    "shard {shard} returned {} columns, not {}",
                    cols.len(),
                    l.shard.len()
                )));
            }
            for (i, (a, b)) in l.shard.iter().zip(&cols).enumerate() {
                if a.0 != b.0 {
                    return Err(MergeError::TypeMismatch { column: i + 1, first: a.0, other: b.0 });
                }
            }
            return Ok(());
        }
        self.describe(&rd, cols)
    }

    fn describe(
        &mut self,
        rd: &wire::backend::RowDescription<'_>,
        shard: Vec<(u32, i16)>,
    ) -> Result<(), MergeError> {
        let fields: Vec<_> =
            rd.columns().collect::<Result<_, _>>().map_err(|e| MergeError::Protocol(e.to_string()))?;
        let Some(spec) = &self.spec else {
            let mut out = BytesMut::new();
            wire::build::frame(&mut out, b'T', |b| b.put_slice(rd_body(rd, &fields).as_slice()));
            self.desc = Some(out);
            self.layout = Some(Layout {
                visible: shard.len(),
                hidden: 0,
                types: Vec::new(),
                formats: Vec::new(),
                sort: Vec::new(),
                distinct: None,
                shard,
            });
            return Ok(());
        };
        let hidden = spec.hidden;
        let visible = match (spec.visible, &spec.grouping) {
            (Some(v), _) => v,
            (None, _) => shard
                .len()
                .checked_sub(hidden)
                .ok_or_else(|| MergeError::Protocol("too few columns".into()))?,
        };
        let merged = visible + hidden;
        let widest = spec.grouping.iter().flat_map(|g| &g.cols).filter_map(|c| match c {
            OutCol::Agg { extra, .. } => extra.iter().max().map(|m| m + 1),
            OutCol::Plain => None,
        });
        if shard.len() < widest.chain([merged]).max().unwrap_or(merged) {
            return Err(MergeError::Protocol(format!(
                "shard query returned {} columns, expected {merged}",
                shard.len()
            )));
        }
        let idx = |c: ColRef| match c {
            ColRef::Visible(i) => i,
            ColRef::Hidden(k) => visible + k,
        };
        let mut types: Vec<(Class, u32)> =
            shard[..merged].iter().map(|(oid, _)| (Class::of(*oid), *oid)).collect();
        let mut overrides: Vec<Option<(String, u32, i16)>> = vec![None; merged];
        if let Some(g) = &spec.grouping {
            self.templates = Vec::with_capacity(merged);
            for (j, col) in g.cols.iter().enumerate() {
                let OutCol::Agg { spec: a, name, extra } = col else {
                    self.templates.push(None);
                    continue;
                };
                let oids: Vec<u32> =
                    std::iter::once(j).chain(extra.iter().copied()).map(|c| shard[c].0).collect();
                let acc = Acc::new(a, &oids)?;
                if let Some((oid, len)) = acc.out_type() {
                    overrides[j] = Some((name.clone().unwrap_or_else(|| a.func.clone()), oid, len));
                    types[j] = (Class::of(oid), oid);
                }
                if let Acc::Best { class, .. } = &acc {
                    self.check_text_order(*class, "min/max")?;
                }
                if let Acc::List(l) = &acc {
                    if l.orders_text() {
                        self.check_text_order(Class::Text, "an aggregate's ORDER BY")?;
                    }
                }
                self.templates.push(Some(acc));
            }
        }
        // Every column the plan refers to must exist (an ordinal past the select list is the
        // shards' error to report; it must not become ours to panic on).
        let mut refs: Vec<ColRef> = spec.sort.iter().map(|k| k.col).collect();
        if let Distinct::On(cols) = &spec.distinct {
            refs.extend(cols);
        }
        if let Some(g) = &spec.grouping {
            refs.extend(&g.keys);
        }
        if let Some(bad) = refs.iter().map(|c| idx(*c)).find(|c| *c >= merged) {
            return Err(MergeError::Syntax(format!("column position {} is not in the select list", bad + 1)));
        }
        let sort: Vec<(usize, bool, bool)> =
            spec.sort.iter().map(|k| (idx(k.col), k.desc, k.nulls_first)).collect();
        for (k, &(c, _, _)) in spec.sort.iter().zip(&sort) {
            if !k.bytewise {
                self.check_text_order(types[c].0, "ORDER BY")?;
            }
            if types[c].0 == Class::Opaque || types[c].0 == Class::Canonical {
                return Err(MergeError::unsupported(format!(
                    "ORDER BY a value of type OID {} across shards",
                    types[c].1
                )));
            }
        }
        let distinct = match &spec.distinct {
            Distinct::None => None,
            Distinct::All => Some((0..visible).collect()),
            Distinct::On(cols) => Some(cols.iter().map(|c| idx(*c)).collect()),
        };
        let needs_text = |c: usize| {
            spec.grouping.is_some()
                || sort.iter().any(|s| s.0 == c)
                || distinct.as_ref().is_some_and(|d: &Vec<usize>| d.contains(&c))
        };
        // Binary cells the merge reads are converted to text and back.
        for (c, (oid, format)) in shard.iter().enumerate() {
            let read = c >= merged || needs_text(c);
            let out_oid = types.get(c).map_or(*oid, |t| t.1);
            if *format != 0 && read && !(binary::supported(*oid) && binary::supported(out_oid)) {
                return Err(MergeError::unsupported(format!(
                    "binary format of type OID {oid} in a merged cross-shard query"
                )));
            }
        }
        let formats: Vec<i16> = shard[..merged].iter().map(|(_, f)| *f).collect();
        // What the client is sent: its own per-column formats, or the shards'.
        let out_formats: Vec<i16> = match &self.result_formats {
            Some(f) if f.len() != visible => {
                return Err(MergeError::Protocol(format!(
                    "{} result formats for a query of {visible} columns",
                    f.len()
                )))
            }
            Some(f) => f.clone(),
            None => formats[..visible].to_vec(),
        };
        for (j, f) in out_formats.iter().enumerate() {
            if *f == 1 && formats[j] != 1 && !binary::supported(types[j].1) {
                return Err(MergeError::unsupported(format!(
                    "binary format of type OID {} in a merged cross-shard query",
                    types[j].1
                )));
            }
        }
        let mut body = BytesMut::new();
        body.put_i16(i16::try_from(visible).map_err(|_| MergeError::Protocol("too many columns".into()))?);
        for (j, f) in fields.iter().take(visible).enumerate() {
            match &overrides[j] {
                Some((name, oid, len)) => put_field(&mut body, name, 0, 0, *oid, *len, -1, out_formats[j]),
                None => put_field(
                    &mut body,
                    f.name,
                    f.table_oid,
                    f.column_id,
                    f.type_oid,
                    f.type_size,
                    f.type_modifier,
                    out_formats[j],
                ),
            }
        }
        let mut out = BytesMut::new();
        wire::build::frame(&mut out, b'T', |b| b.put_slice(&body));
        self.desc = Some(out);
        self.layout = Some(Layout { shard, visible, hidden, types, formats, sort, distinct });
        Ok(())
    }

    fn check_text_order(&self, class: Class, what: &str) -> Result<(), MergeError> {
        if class.is_text() && self.opts.text_order == TextOrder::Refuse {
            return Err(MergeError::unsupported(format!(
                "{what} on text across shards under a non-C collation"
            )));
        }
        Ok(())
    }

    /// A shard's DataRow (the message body).
    pub fn data_row(&mut self, shard: usize, body: &[u8]) -> Result<(), MergeError> {
        self.data_row_bytes(shard, Bytes::copy_from_slice(body))
    }

    /// [`Merger::data_row`] for a body the caller already holds as `Bytes` (no copy: cells
    /// are slices of it, and a row without hidden columns is forwarded as these bytes).
    pub fn data_row_bytes(&mut self, shard: usize, bytes: Bytes) -> Result<(), MergeError> {
        if !self.input(shard)?.described {
            return Err(MergeError::Protocol(format!(
                "DataRow from shard {shard} before its RowDescription"
            )));
        }
        if self.first_only && shard != 0 {
            // The same rows as shard 0's: counted once.
            return Ok(());
        }
        let msg =
            BackendMessage::parse_body(b'D', &bytes).map_err(|e| MergeError::Protocol(e.to_string()))?;
        let BackendMessage::DataRow(dr) = msg else {
            return Err(MergeError::Protocol("not a DataRow".into()));
        };
        let mut cells = Vec::with_capacity(dr.len());
        for v in dr.values() {
            let v = v.map_err(|e| MergeError::Protocol(e.to_string()))?;
            cells.push(v.map(|s| bytes.slice_ref(s)));
        }
        let layout = self.layout.as_ref().ok_or_else(|| MergeError::Protocol("no RowDescription".into()))?;
        if cells.len() != layout.shard.len() {
            return Err(MergeError::Protocol(format!(
                "DataRow with {} columns, expected {}",
                cells.len(),
                layout.shard.len()
            )));
        }
        if self.spec.as_ref().is_some_and(|s| s.grouping.is_some()) {
            return self.accumulate(cells);
        }
        let keys = merged_sort_keys(layout, &cells, true)?;
        let body = (layout.visible == layout.shard.len()).then(|| bytes.clone());
        let size = bytes.len() + ROW_BYTES + keys.len() * 32;
        self.charge(size)?;
        self.input(shard)?.rows.push_back(Row { body, cells, keys, size });
        Ok(())
    }

    fn charge(&mut self, bytes: usize) -> Result<(), MergeError> {
        self.used += bytes;
        if self.used > self.opts.memory_budget {
            return Err(MergeError::MemoryBudget { budget: self.opts.memory_budget });
        }
        Ok(())
    }

    /// The shard sent CommandComplete: it has no more rows.
    pub fn shard_done(&mut self, shard: usize) -> Result<(), MergeError> {
        self.input(shard)?.done = true;
        Ok(())
    }

    /// Whether the merge is waiting on more input from `shard`.
    pub fn needs_input(&self, shard: usize) -> bool {
        let Some(input) = self.inputs.get(shard) else { return false };
        if self.finished || input.done {
            return false;
        }
        let sorted = self.spec.as_ref().is_some_and(|s| s.grouping.is_none() && !s.sort.is_empty());
        !sorted || input.rows.is_empty()
    }

    /// Writes every frame that can be produced now into `out`.
    pub fn drain(&mut self, out: &mut BytesMut) -> Result<Drained, MergeError> {
        if self.finished {
            return Ok(Drained::Finished);
        }
        if self.unbound {
            return Err(MergeError::Protocol("LIMIT/OFFSET parameters were not bound".into()));
        }
        if !self.desc_sent {
            match self.desc.take() {
                Some(d) => {
                    out.extend_from_slice(&d);
                    self.desc_sent = true;
                }
                None if self.inputs.iter().all(|i| i.done) => return self.finish(out),
                None => return Ok(Drained::NeedInput),
            }
        }
        let grouping = self.spec.as_ref().is_some_and(|s| s.grouping.is_some());
        let sorted = self.spec.as_ref().is_some_and(|s| !s.sort.is_empty());
        let all_done = self.inputs.iter().all(|i| i.done);
        if grouping {
            if !all_done {
                return Ok(Drained::NeedInput);
            }
            if self.ready.is_none() {
                self.ready = Some(self.finalize()?);
            }
            while let (Some(ready), Some(layout)) = (self.ready.as_mut(), self.layout.as_ref()) {
                let Some(row) = ready.next(layout)? else { break };
                if !self.emit(row, out)? {
                    return self.finish(out);
                }
                if out.len() >= OUTPUT_SLICE {
                    return Ok(Drained::Full);
                }
            }
            self.flush_distinct(out)?;
            return self.finish(out);
        }
        loop {
            let next = if sorted {
                if self.inputs.iter().any(|i| !i.done && i.rows.is_empty()) {
                    return Ok(Drained::NeedInput);
                }
                self.smallest_head()
            } else {
                self.inputs.iter().position(|i| !i.rows.is_empty())
            };
            let Some(shard) = next else {
                if self.inputs.iter().all(|i| i.done) {
                    self.flush_distinct(out)?;
                    return self.finish(out);
                }
                return Ok(Drained::NeedInput);
            };
            let Some(row) = self.inputs[shard].rows.pop_front() else { continue };
            self.used = self.used.saturating_sub(row.size);
            if !self.emit(row, out)? {
                return self.finish(out);
            }
        }
    }

    fn smallest_head(&self) -> Option<usize> {
        let layout = self.layout.as_ref()?;
        let mut best: Option<(usize, &Row)> = None;
        for (i, input) in self.inputs.iter().enumerate() {
            let Some(row) = input.rows.front() else { continue };
            if best.is_none_or(|(_, b)| compare_rows(layout, row, b).is_lt()) {
                best = Some((i, row));
            }
        }
        best.map(|(i, _)| i)
    }

    fn finish(&mut self, out: &mut BytesMut) -> Result<Drained, MergeError> {
        if !self.finished {
            wire::build::command_complete(out, &format!("SELECT {}", self.emitted));
            self.finished = true;
            for input in &mut self.inputs {
                input.rows.clear();
            }
            // Dropping the spill files removes them.
            self.groups.clear();
            self.seen.clear();
            self.ready = None;
            self.overflow = None;
            self.dspill = None;
            self.used = 0;
        }
        Ok(Drained::Finished)
    }
}
