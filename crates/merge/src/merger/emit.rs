//! The last steps of every merged row: DISTINCT, OFFSET, LIMIT, and the DataRow written.
//!
//! DISTINCT keeps the keys it has seen. Under an ORDER BY, duplicates share their sort keys
//! (PostgreSQL requires a DISTINCT query's ORDER BY expressions in the select list), so the
//! set only spans one run of equal sort keys and is emptied when the sort keys change.
//! Past its share of the budget, with a spill store, rows whose key is not in the set go to
//! spill files partitioned by the key's hash; each partition is deduplicated alone when the
//! run (or the input) ends, and may overflow and partition again one level deeper.

use std::collections::HashSet;

use bytes::{BufMut, Bytes, BytesMut};

use super::rows::{compare_keys, text_cell, Row, ROW_BYTES};
use super::Merger;
use crate::error::MergeError;
use crate::plan::Distinct;
use crate::spill::{self, io_error, SpillFile, FANOUT, MAX_LEVEL};
use crate::value;

/// DISTINCT rows set aside at one level.
pub(super) struct DistinctSpill {
    level: u32,
    files: Vec<Box<dyn SpillFile>>,
}

/// Bytes of DISTINCT keys held before spilling: a quarter of the budget, a little more per
/// level, never half.
fn distinct_limit(budget: usize, level: u32) -> usize {
    budget / 2 - ((budget / 4) >> level.min(31))
}

impl Merger {
    /// Applies DISTINCT, OFFSET and LIMIT to one merged row and writes it; false once the
    /// LIMIT is reached.
    pub(super) fn emit(&mut self, row: Row, out: &mut BytesMut) -> Result<bool, MergeError> {
        let (Some(layout), Some(spec)) = (&self.layout, &self.spec) else { return self.write(row, out) };
        let plain_distinct =
            layout.distinct.is_some() && (spec.sort.is_empty() || !matches!(spec.distinct, Distinct::On(_)));
        if plain_distinct && !layout.sort.is_empty() {
            let changed = self.prev_sort.as_ref().is_none_or(|p| compare_keys(layout, p, &row.keys).is_ne());
            if changed {
                if !self.flush_distinct(out)? {
                    return Ok(false);
                }
                self.seen.clear();
                self.used = self.used.saturating_sub(self.seen_bytes);
                self.seen_bytes = 0;
                self.prev_sort = Some(row.keys.clone());
            }
        }
        self.emit_distinct(row, out)
    }

    fn emit_distinct(&mut self, row: Row, out: &mut BytesMut) -> Result<bool, MergeError> {
        let (Some(layout), Some(spec)) = (&self.layout, &self.spec) else { return self.write(row, out) };
        if spec.limit.is_some_and(|l| self.emitted >= l) {
            return Ok(false);
        }
        if let Some(cols) = &layout.distinct {
            let mut key = Vec::new();
            for &c in cols {
                let text = text_cell(layout.types[c].1, layout.formats[c], row.cells[c].as_deref())?;
                value::push_key(&mut key, layout.types[c].0, text.as_deref())?;
            }
            let streaming_on = matches!(spec.distinct, Distinct::On(_)) && !spec.sort.is_empty();
            if streaming_on {
                // Sorted by the DISTINCT ON keys first: equal keys are adjacent.
                if self.prev_on.as_ref() == Some(&key) {
                    return Ok(true);
                }
                self.prev_on = Some(key);
            } else {
                if self.seen.contains(&key) {
                    return Ok(true);
                }
                if let Some(ds) = &mut self.dspill {
                    let file = ds.files[spill::partition(&key, ds.level)].as_mut();
                    self.spilled += spill::write_cells(file, &row.cells, &[])? as u64;
                    return Ok(true);
                }
                let size = key.len() + ROW_BYTES;
                self.seen.insert(key);
                self.used += size;
                self.seen_bytes += size;
                let budget = self.opts.memory_budget;
                if self.store.is_none() {
                    if self.used > budget {
                        return Err(MergeError::MemoryBudget { budget });
                    }
                } else if self.used > distinct_limit(budget, self.dlevel) {
                    if self.dlevel >= MAX_LEVEL {
                        return Err(MergeError::MemoryBudget { budget });
                    }
                    let store = self.store.as_mut().ok_or(MergeError::MemoryBudget { budget })?;
                    let files = (0..FANOUT)
                        .map(|_| store.create().map_err(io_error))
                        .collect::<Result<Vec<_>, _>>()?;
                    self.dspill = Some(DistinctSpill { level: self.dlevel, files });
                }
            }
        }
        if self.skipped < spec.offset {
            self.skipped += 1;
            return Ok(true);
        }
        self.write(row, out)
    }

    /// Writes the row's visible cells as a DataRow; false once the LIMIT is reached.
    fn write(&mut self, row: Row, out: &mut BytesMut) -> Result<bool, MergeError> {
        let Some(layout) = &self.layout else { return Ok(false) };
        let visible = layout.visible;
        if let Some(formats) = self.result_formats.as_ref().filter(|f| f.contains(&1)) {
            // Cells are in the shards' formats (text, see `set_result_formats`); the
            // client's binary columns are converted.
            let mut cells = Vec::with_capacity(visible);
            for (j, cell) in row.cells.iter().take(visible).enumerate() {
                cells.push(match cell {
                    Some(c) if formats[j] == 1 && layout.formats[j] != 1 => {
                        Some(Bytes::from(crate::binary::from_text(layout.types[j].1, c)?))
                    }
                    other => other.clone(),
                });
            }
            wire::build::frame(out, b'D', |b| {
                b.put_i16(visible as i16);
                for cell in &cells {
                    wire::build::put_value(b, cell.as_deref());
                }
            });
        } else if let Some(body) = &row.body {
            wire::build::frame(out, b'D', |b| b.put_slice(body));
        } else {
            wire::build::frame(out, b'D', |b| {
                b.put_i16(visible as i16);
                for cell in row.cells.iter().take(visible) {
                    wire::build::put_value(b, cell.as_deref());
                }
            });
        }
        self.emitted += 1;
        Ok(self.spec.as_ref().and_then(|s| s.limit).is_none_or(|l| self.emitted < l))
    }

    /// Deduplicates and writes the spilled DISTINCT rows, one partition at a time; false
    /// once the LIMIT is reached.
    pub(super) fn flush_distinct(&mut self, out: &mut BytesMut) -> Result<bool, MergeError> {
        let mut pending: Vec<(Box<dyn SpillFile>, u32)> = Vec::new();
        loop {
            if let Some(ds) = self.dspill.take() {
                for mut file in ds.files {
                    file.rewind().map_err(io_error)?;
                    pending.push((file, ds.level + 1));
                }
            }
            let Some((mut file, level)) = pending.pop() else { break };
            // A partition's keys are in no other partition, nor in the set (they were not
            // there when spilled, and the set only grew with keys of unspilled rows).
            self.seen = HashSet::new();
            self.used = self.used.saturating_sub(self.seen_bytes);
            self.seen_bytes = 0;
            self.dlevel = level;
            while let Some(cells) = spill::read_cells(file.as_mut())? {
                let row = Row { body: None, cells, keys: Vec::new(), size: 0 };
                if !self.emit_distinct(row, out)? {
                    self.dlevel = 0;
                    return Ok(false);
                }
            }
        }
        self.dlevel = 0;
        Ok(true)
    }
}
