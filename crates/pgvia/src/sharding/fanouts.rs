//! Statements that went to every shard because their conditions named no key, counted per
//! statement shape (literals removed), so users can find their missing keys
//! (`SHOW SHARD_FANOUTS`).

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

/// Shapes kept at most; past that, new shapes are counted under one "(other)" line.
const MAX_SHAPES: usize = 1000;
const OTHER: &str = "(other statements)";

#[derive(Debug, Default)]
pub struct Fanouts {
    counts: Mutex<HashMap<(String, String), u64>>,
}

impl Fanouts {
    /// One more statement of `database` sent to every shard for want of a key.
    pub fn count(&self, database: &str, sql: &[u8]) {
        let shape = crate::logging::scrub_sql(&String::from_utf8_lossy(sql), 300);
        let mut counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        let full = counts.len() >= MAX_SHAPES;
        let key = (database.to_owned(), shape);
        if let Some(n) = counts.get_mut(&key) {
            *n += 1;
        } else if full {
            *counts.entry((database.to_owned(), OTHER.to_owned())).or_default() += 1;
        } else {
            counts.insert(key, 1);
        }
    }

    /// (database, shape, count), most frequent first.
    pub fn snapshot(&self) -> Vec<(String, String, u64)> {
        let counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        let mut rows: Vec<_> = counts.iter().map(|((d, s), n)| (d.clone(), s.clone(), *n)).collect();
        rows.sort_by(|a, b| b.2.cmp(&a.2).then_with(|| a.1.cmp(&b.1)));
        rows
    }
}
