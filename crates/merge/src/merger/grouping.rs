//! GROUP BY and aggregates: shard rows accumulate into groups until every shard is done,
//! then each group becomes one row (HAVING applied) for the output sorter.
//!
//! Past its share of the budget, with a spill store, the merge partitions: the groups in
//! memory are set aside by the hash of their key (one map per partition) and every later row
//! goes to its partition's spill file. When the input ends, each partition is finished
//! alone: its set-aside groups plus its file's rows, which may overflow and partition again
//! one level deeper with another hash. Groups are never split across partitions, so each
//! comes out once and whole. A single group's state past the budget cannot be split: that
//! is [`MergeError::GroupTooLarge`].

use std::borrow::Cow;
use std::collections::HashMap;

use bytes::Bytes;

use super::output::{self, Output, Sorter};
use super::rows::{merged_sort_keys, text_cell, Row, MALLOC_BYTES};
use super::{Group, Merger, TextOrder};
use crate::accum::ACC_BYTES;
use crate::binary;
use crate::column::ColRef;
use crate::error::MergeError;
use crate::having;
use crate::plan::OutCol;
use crate::spill::{self, io_error, SpillFile, FANOUT, MAX_LEVEL};
use crate::value::{self, Class};

/// A grouping level that outgrew memory.
pub(super) struct Overflow {
    level: u32,
    /// The groups in memory when the level overflowed, by partition, with their bytes.
    carried: Vec<(HashMap<Vec<u8>, Group>, usize)>,
    files: Vec<Box<dyn SpillFile>>,
}

/// Bytes the groups may hold at `level` before they partition: a quarter of the budget at
/// first, a little more per level (the set-aside groups of upper levels are still held),
/// never half: the estimates run below what the allocator really holds, and the output
/// sorter has its own quarter.
fn group_limit(budget: usize, level: u32) -> usize {
    budget / 2 - ((budget / 4) >> level.min(31))
}

/// A copy of a row's cells in one buffer of their own: the cells the shard sent are slices
/// of the connection's read buffer, which a group kept for the whole merge would hold alive.
fn compact(cells: &[Option<Bytes>]) -> Vec<Option<Bytes>> {
    let mut buf = bytes::BytesMut::with_capacity(cells.iter().flatten().map(Bytes::len).sum());
    let spans: Vec<Option<(usize, usize)>> = cells
        .iter()
        .map(|c| {
            c.as_ref().map(|b| {
                let at = buf.len();
                buf.extend_from_slice(b);
                (at, buf.len())
            })
        })
        .collect();
    let buf = buf.freeze();
    spans.into_iter().map(|s| s.map(|(a, b)| buf.slice(a..b))).collect()
}

/// One pending partition: its set-aside groups, their bytes, its rows and its level.
type Pending = (HashMap<Vec<u8>, Group>, usize, Box<dyn SpillFile>, u32);

impl Merger {
    fn group_key(&self, cells: &[Option<Bytes>]) -> Result<Vec<u8>, MergeError> {
        let (Some(spec), Some(layout)) = (&self.spec, &self.layout) else { return Ok(Vec::new()) };
        let Some(g) = &spec.grouping else { return Ok(Vec::new()) };
        let mut key = Vec::new();
        for k in &g.keys {
            let c = match k {
                ColRef::Visible(i) => *i,
                ColRef::Hidden(h) => layout.visible + h,
            };
            let (oid, format) = layout.shard[c];
            value::push_key(
                &mut key,
                Class::of(oid),
                text_cell(oid, format, cells[c].as_deref())?.as_deref(),
            )?;
        }
        Ok(key)
    }

    /// One shard row into its group (or, past the budget, into its partition's file).
    pub(super) fn accumulate(&mut self, cells: Vec<Option<Bytes>>) -> Result<(), MergeError> {
        let key = self.group_key(&cells)?;
        if let Some(ov) = &mut self.overflow {
            let file = ov.files[spill::partition(&key, ov.level)].as_mut();
            self.spilled += spill::write_cells(file, &cells, &[])? as u64;
            return Ok(());
        }
        let added = self.add_to_group(key, cells)?;
        self.used += added;
        let budget = self.opts.memory_budget;
        if self.store.is_none() {
            if self.used > budget {
                return Err(MergeError::MemoryBudget { budget });
            }
        } else if self.used > group_limit(budget, self.level) {
            self.start_overflow()?;
        }
        Ok(())
    }

    fn add_to_group(&mut self, key: Vec<u8>, cells: Vec<Option<Bytes>>) -> Result<usize, MergeError> {
        let (Some(spec), Some(layout)) = (&self.spec, &self.layout) else { return Ok(0) };
        let Some(g) = &spec.grouping else { return Ok(0) };
        let mut added = 0;
        let group = match self.groups.entry(key) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => {
                // What the map, the key, the row copy and the accumulators really take,
                // allocator headers and the table's slack included.
                added += 2 * size_of::<(Vec<u8>, Group)>() + 4 * MALLOC_BYTES + e.key().len();
                added += cells.len() * size_of::<Option<Bytes>>()
                    + cells.iter().flatten().map(Bytes::len).sum::<usize>();
                added += self.templates.len() * size_of::<Option<crate::accum::Acc>>();
                added += self.templates.iter().flatten().count() * ACC_BYTES;
                e.insert(Group { first: compact(&cells), accs: self.templates.clone(), size: 0 })
            }
        };
        for (j, acc) in group.accs.iter_mut().enumerate() {
            let (Some(acc), OutCol::Agg { extra, .. }) = (acc, &g.cols[j]) else { continue };
            let texts: Vec<Option<Cow<'_, [u8]>>> = std::iter::once(j)
                .chain(extra.iter().copied())
                .map(|c| text_cell(layout.shard[c].0, layout.shard[c].1, cells[c].as_deref()))
                .collect::<Result<_, _>>()?;
            let parts: Vec<Option<&[u8]>> = texts.iter().map(|t| t.as_deref()).collect();
            let oids: Vec<u32> =
                std::iter::once(j).chain(extra.iter().copied()).map(|c| layout.shard[c].0).collect();
            added += acc.add(&parts, &oids)?;
        }
        group.size += added;
        Ok(added)
    }

    /// The groups set aside by partition; later rows go to the partitions' files.
    fn start_overflow(&mut self) -> Result<(), MergeError> {
        let budget = self.opts.memory_budget;
        if self.level >= MAX_LEVEL {
            return Err(MergeError::GroupTooLarge { budget });
        }
        let Some(store) = self.store.as_mut() else { return Err(MergeError::MemoryBudget { budget }) };
        let files = (0..FANOUT).map(|_| store.create().map_err(io_error)).collect::<Result<Vec<_>, _>>()?;
        let mut carried: Vec<(HashMap<Vec<u8>, Group>, usize)> =
            (0..FANOUT).map(|_| (HashMap::new(), 0)).collect();
        for (key, group) in std::mem::take(&mut self.groups) {
            let part = &mut carried[spill::partition(&key, self.level)];
            part.1 += group.size;
            part.0.insert(key, group);
        }
        self.overflow = Some(Overflow { level: self.level, carried, files });
        Ok(())
    }

    /// Every shard is done: groups (and spilled partitions, one at a time) become rows,
    /// filtered by HAVING, into the output sorter.
    pub(super) fn finalize(&mut self) -> Result<Output, MergeError> {
        let sorted = self.layout.as_ref().is_some_and(|l| !l.sort.is_empty());
        // With spilling, the sorter writes a sorted run per quarter of the budget.
        let cap = if self.store.is_some() { self.opts.memory_budget / 4 } else { usize::MAX };
        let mut sorter = Sorter::new(sorted, cap);
        let mut pending: Vec<Pending> = Vec::new();
        loop {
            if let Some(ov) = self.overflow.take() {
                for ((groups, bytes), mut file) in ov.carried.into_iter().zip(ov.files) {
                    file.rewind().map_err(io_error)?;
                    pending.push((groups, bytes, file, ov.level + 1));
                }
            } else {
                let groups = std::mem::take(&mut self.groups);
                let bytes: usize = groups.values().map(|g| g.size).sum();
                for (_, group) in groups {
                    if let Some((row, texts)) = self.group_row(group)? {
                        let layout =
                            self.layout.as_ref().ok_or_else(|| MergeError::Protocol("no layout".into()))?;
                        sorter.push(layout, row, texts, &mut self.store, &mut self.spilled)?;
                    }
                }
                self.used = self.used.saturating_sub(bytes);
            }
            let Some((groups, _bytes, mut file, level)) = pending.pop() else { break };
            // The set-aside groups' bytes are still counted in `used`.
            self.groups = groups;
            self.level = level;
            while let Some(cells) = spill::read_cells(file.as_mut())? {
                self.accumulate(cells)?;
            }
        }
        let layout = self.layout.as_ref().ok_or_else(|| MergeError::Protocol("no layout".into()))?;
        sorter.finish(layout)
    }

    /// A finished group as the client's row (and the text of its sort keys), or `None` when
    /// HAVING drops it.
    #[allow(clippy::type_complexity)]
    fn group_row(&self, group: Group) -> Result<Option<(Row, Vec<Option<Bytes>>)>, MergeError> {
        let (Some(spec), Some(layout)) = (&self.spec, &self.layout) else { return Ok(None) };
        let Some(g) = &spec.grouping else { return Ok(None) };
        let merged = layout.visible + layout.hidden;
        // Text for HAVING and sorting; the client's format for output.
        let mut texts: Vec<Option<Bytes>> = Vec::with_capacity(merged);
        let mut cells = Vec::with_capacity(merged);
        for j in 0..merged {
            let (oid, format) = (layout.types[j].1, layout.formats[j]);
            match &group.accs[j] {
                Some(acc) => {
                    let text = acc.finish()?;
                    let out = match (&text, format) {
                        (Some(t), 1) => Some(Bytes::from(binary::from_text(oid, t)?)),
                        _ => text.clone().map(Bytes::from),
                    };
                    texts.push(text.map(Bytes::from));
                    cells.push(out);
                }
                None => {
                    let raw = group.first[j].clone();
                    texts.push(text_cell(oid, format, raw.as_deref())?.map(|t| Bytes::copy_from_slice(&t)));
                    cells.push(raw);
                }
            }
        }
        if let Some(cond) = &g.having {
            let idx = |c: ColRef| match c {
                ColRef::Visible(i) => i,
                ColRef::Hidden(k) => layout.visible + k,
            };
            let cell = |c: ColRef| {
                let i = idx(c);
                (texts[i].as_deref(), layout.types[i].0, layout.types[i].1)
            };
            let text_order = self.opts.text_order == TextOrder::Bytes;
            if having::eval(cond, &cell, text_order)? != Some(true) {
                return Ok(None);
            }
        }
        let keys = merged_sort_keys(layout, &texts, false)?;
        let sort_texts: Vec<Option<Bytes>> = layout.sort.iter().map(|&(c, _, _)| texts[c].clone()).collect();
        let size = output::row_bytes(&cells, &keys, &sort_texts);
        Ok(Some((Row { body: None, cells, keys, size }, sort_texts)))
    }
}
