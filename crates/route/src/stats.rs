//! Counters of what the analyzer did.
//!
//! A cache hit must cost tens of nanoseconds, so its counter cannot be one atomic every
//! thread hammers: each thread adds to its own cache-line-sized slot (threads are spread
//! over the slots round-robin) and a read sums the slots.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

const SLOTS: usize = 16;

#[derive(Debug, Clone, Copy)]
pub(crate) enum Counter {
    Analyzed = 0,
    CacheHit,
    CacheMiss,
    CacheInsert,
    CacheNotAdmitted,
    TooLong,
    TooComplex,
    ParseError,
    Failed,
    ShapeHit,
}

const COUNTERS: usize = Counter::ShapeHit as usize + 1;

#[repr(align(128))]
#[derive(Default)]
struct Slot([AtomicU64; COUNTERS]);

#[derive(Default)]
pub(crate) struct Counters {
    slots: [Slot; SLOTS],
}

static NEXT_SLOT: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static MY_SLOT: Cell<usize> = const { Cell::new(usize::MAX) };
}

fn my_slot() -> usize {
    MY_SLOT.with(|s| {
        let v = s.get();
        if v != usize::MAX {
            return v;
        }
        let v = NEXT_SLOT.fetch_add(1, Ordering::Relaxed) % SLOTS;
        s.set(v);
        v
    })
}

impl Counters {
    #[inline]
    pub fn add(&self, c: Counter) {
        self.slots[my_slot()].0[c as usize].fetch_add(1, Ordering::Relaxed);
    }

    fn sum(&self, c: Counter) -> u64 {
        self.slots.iter().map(|s| s.0[c as usize].load(Ordering::Relaxed)).sum()
    }

    pub fn snapshot(&self, cache_entries: u64, cache_bytes: u64) -> AnalyzerStats {
        AnalyzerStats {
            analyzed: self.sum(Counter::Analyzed),
            cache_hits: self.sum(Counter::CacheHit),
            cache_misses: self.sum(Counter::CacheMiss),
            cache_inserts: self.sum(Counter::CacheInsert),
            cache_not_admitted: self.sum(Counter::CacheNotAdmitted),
            too_long: self.sum(Counter::TooLong),
            too_complex: self.sum(Counter::TooComplex),
            parse_errors: self.sum(Counter::ParseError),
            failures: self.sum(Counter::Failed),
            shape_hits: self.sum(Counter::ShapeHit),
            cache_entries,
            cache_bytes,
        }
    }
}

/// What an [`Analyzer`](crate::Analyzer) has done since it was built.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AnalyzerStats {
    /// Query strings parsed and walked (cache misses and uncached calls).
    pub analyzed: u64,
    /// Analyses served from the cache.
    pub cache_hits: u64,
    /// Lookups that found nothing.
    pub cache_misses: u64,
    /// Misses stored in the cache.
    pub cache_inserts: u64,
    /// Misses not stored because the admission policy turned them away.
    pub cache_not_admitted: u64,
    /// Queries over `max_query_length`, routed conservatively without parsing.
    pub too_long: u64,
    /// Queries nested or sized beyond what analysis walks, routed conservatively.
    pub too_complex: u64,
    /// Queries PostgreSQL's parser rejected (the server will report them).
    pub parse_errors: u64,
    /// Internal failures (caught panics), routed conservatively.
    pub failures: u64,
    /// Simple queries served by the analysis of their shape, shared with texts that differ
    /// only in their constants ([`Analyzer::analyze_query`](crate::Analyzer::analyze_query)).
    pub shape_hits: u64,
    /// Entries in the cache now.
    pub cache_entries: u64,
    /// Weight (approximate bytes) of the cache now.
    pub cache_bytes: u64,
}
