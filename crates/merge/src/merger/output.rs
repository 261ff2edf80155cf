//! The rows a grouping merge produces, in ORDER BY order: sorted in memory, or, past the
//! sorter's share of the budget with a spill store, written as sorted runs and merged back
//! one row per run at a time.

use std::collections::VecDeque;

use bytes::Bytes;

use super::rows::{compare_rows, Layout, Row, MALLOC_BYTES};
use crate::error::MergeError;
use crate::spill::{self, io_error, SpillFile, SpillStore};
use crate::value::{self, Value};

/// Collects finished rows (with the text of their sort keys, to read the keys back from a
/// run) until [`Sorter::finish`].
pub(super) struct Sorter {
    sorted: bool,
    cap: usize,
    rows: Vec<(Row, Vec<Option<Bytes>>)>,
    bytes: usize,
    runs: Vec<Box<dyn SpillFile>>,
}

impl Sorter {
    pub(super) fn new(sorted: bool, cap: usize) -> Sorter {
        Sorter { sorted, cap, rows: Vec::new(), bytes: 0, runs: Vec::new() }
    }

    pub(super) fn push(
        &mut self,
        layout: &Layout,
        row: Row,
        texts: Vec<Option<Bytes>>,
        store: &mut Option<Box<dyn SpillStore>>,
        spilled: &mut u64,
    ) -> Result<(), MergeError> {
        self.bytes += row.size;
        self.rows.push((row, texts));
        if self.bytes > self.cap {
            if let Some(store) = store.as_mut() {
                let mut file = store.create().map_err(io_error)?;
                self.sort(layout);
                for (row, texts) in self.rows.drain(..) {
                    *spilled += spill::write_cells(file.as_mut(), &row.cells, &texts)? as u64;
                }
                file.rewind().map_err(io_error)?;
                self.runs.push(file);
                self.bytes = 0;
            }
        }
        Ok(())
    }

    fn sort(&mut self, layout: &Layout) {
        if self.sorted {
            self.rows.sort_by(|a, b| compare_rows(layout, &a.0, &b.0));
        }
    }

    pub(super) fn finish(mut self, layout: &Layout) -> Result<Output, MergeError> {
        self.sort(layout);
        let memory: VecDeque<Row> = self.rows.into_iter().map(|(r, _)| r).collect();
        if self.runs.is_empty() {
            return Ok(Output::Memory(memory));
        }
        let mut heads = Vec::with_capacity(self.runs.len());
        for mut file in self.runs {
            let first = read_row(layout, file.as_mut())?;
            heads.push((file, first));
        }
        Ok(Output::Runs { heads, memory })
    }
}

/// What a finished row held by the sorter takes: the row, its cells and keys, the texts of
/// its sort keys, their buffers, allocator headers and the vector's slack.
pub(super) fn row_bytes(cells: &[Option<Bytes>], keys: &[Option<Value>], texts: &[Option<Bytes>]) -> usize {
    let each = size_of::<Option<Bytes>>();
    2 * size_of::<(Row, Vec<Option<Bytes>>)>()
        + (cells.len() + texts.len()) * each
        + size_of_val(keys)
        + 3 * MALLOC_BYTES
        + cells.iter().chain(texts).flatten().map(|b| b.len() + 2 * MALLOC_BYTES).sum::<usize>()
}

/// Finished rows, handed out in order.
pub(super) enum Output {
    Memory(VecDeque<Row>),
    /// Sorted runs on disk (each with its next row) and the last run, still in memory.
    Runs {
        heads: Vec<(Box<dyn SpillFile>, Option<Row>)>,
        memory: VecDeque<Row>,
    },
}

impl Output {
    pub(super) fn next(&mut self, layout: &Layout) -> Result<Option<Row>, MergeError> {
        match self {
            Output::Memory(rows) => Ok(rows.pop_front()),
            Output::Runs { heads, memory } => {
                // The smallest head; ties go to the earlier run, so without ORDER BY the
                // runs come out one after the other.
                let mut best: Option<usize> = None;
                for (i, (_, row)) in heads.iter().enumerate() {
                    let Some(row) = row else { continue };
                    let smaller = match best.and_then(|b| heads[b].1.as_ref()) {
                        Some(b) => compare_rows(layout, row, b).is_lt(),
                        None => true,
                    };
                    if smaller {
                        best = Some(i);
                    }
                }
                let take_memory = match (best.and_then(|b| heads[b].1.as_ref()), memory.front()) {
                    (None, _) => true,
                    (Some(_), None) => false,
                    (Some(b), Some(m)) => compare_rows(layout, m, b).is_lt(),
                };
                if take_memory {
                    return Ok(memory.pop_front());
                }
                let Some(i) = best else { return Ok(None) };
                let (file, head) = &mut heads[i];
                let next = read_row(layout, file.as_mut())?;
                Ok(std::mem::replace(head, next))
            }
        }
    }
}

/// A row back from a run: its merged cells, then the text of each sort key.
fn read_row(layout: &Layout, file: &mut dyn SpillFile) -> Result<Option<Row>, MergeError> {
    let Some(mut cells) = spill::read_cells(file)? else { return Ok(None) };
    let merged = layout.visible + layout.hidden;
    if cells.len() != merged + layout.sort.len() {
        return Err(MergeError::Spill("spill record of the wrong width".into()));
    }
    let texts = cells.split_off(merged);
    let keys = layout
        .sort
        .iter()
        .zip(&texts)
        .map(|(&(c, _, _), t)| {
            let (class, oid) = layout.types[c];
            t.as_deref().map(|t| value::decode(class, oid, t)).transpose()
        })
        .collect::<Result<_, _>>()?;
    Ok(Some(Row { body: None, cells, keys, size: 0 }))
}
