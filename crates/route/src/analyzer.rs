//! The entry point: options, cache and counters around the guarded analysis.

use std::sync::Arc;

use crate::analysis::Analysis;
use crate::cache::{AnalysisCache, KeyRef, Stored};
use crate::functions::WriteFunctions;
use crate::guard::Engine;
use crate::model::Outcome;
use crate::options::{AnalyzerOptions, OptionsError};
use crate::stats::{AnalyzerStats, Counter, Counters};
use crate::walk::Limits;

/// Analyses SQL for routing, with a shared cache. Build one per configuration and share it
/// (`Arc<Analyzer>`) between sessions; every method takes `&self`.
pub struct Analyzer {
    options: AnalyzerOptions,
    engine: Engine,
    cache: Option<AnalysisCache>,
    counters: Counters,
}

impl Analyzer {
    /// Builds an analyzer, refusing options out of range.
    pub fn new(options: AnalyzerOptions) -> Result<Analyzer, OptionsError> {
        options.validate()?;
        let engine = Engine {
            fns: WriteFunctions::new(&options.write_functions),
            limits: Limits { max_depth: options.max_nesting, max_values: options.max_values },
            max_query_length: options.max_query_length,
        };
        let cache = (options.cache_entries > 0)
            .then(|| AnalysisCache::new(options.cache_entries, options.cache_bytes, options.cache_admission));
        Ok(Analyzer { options, engine, cache, counters: Counters::default() })
    }

    /// The one entry point: what `sql` does. `param_oids` are the parameter types of a
    /// Parse message (empty for a simple Query); they become part of the cache key and
    /// annotate `$n` values.
    ///
    /// Never fails and never panics: text that cannot be analysed (too long, too complex,
    /// rejected by the parser, or an internal failure) gets a conservative analysis. Keep
    /// the result with a prepared statement so Bind never analyses again.
    pub fn analyze(&self, sql: &str, param_oids: &[u32]) -> Arc<Analysis> {
        if sql.len() > self.options.max_query_length {
            return Arc::new(self.analyze_uncached(sql, param_oids));
        }
        let Some(cache) = &self.cache else {
            return Arc::new(self.analyze_uncached(sql, param_oids));
        };
        let key = KeyRef::new(sql, param_oids);
        if let Some(hit) = cache.get(&key) {
            self.counters.add(Counter::CacheHit);
            return hit;
        }
        self.counters.add(Counter::CacheMiss);
        let analysis = Arc::new(self.analyze_uncached(sql, param_oids));
        match cache.offer(&key, &analysis) {
            Stored::Inserted => self.counters.add(Counter::CacheInsert),
            Stored::NotAdmitted => self.counters.add(Counter::CacheNotAdmitted),
        }
        analysis
    }

    /// Analyses `sql` without looking at or filling the cache (benchmarks, tools).
    pub fn analyze_uncached(&self, sql: &str, param_oids: &[u32]) -> Analysis {
        let analysis = self.engine.analyze(sql, param_oids);
        self.counters.add(match analysis.outcome() {
            Outcome::Parsed => Counter::Analyzed,
            Outcome::ParseError => Counter::ParseError,
            Outcome::TooLong => Counter::TooLong,
            Outcome::TooComplex => Counter::TooComplex,
            Outcome::Failed => Counter::Failed,
        });
        if matches!(analysis.outcome(), Outcome::ParseError | Outcome::TooComplex | Outcome::Failed) {
            // These were parsed (or tried) too.
            self.counters.add(Counter::Analyzed);
        }
        analysis
    }

    /// Counters since the analyzer was built, and the cache's current size.
    pub fn stats(&self) -> AnalyzerStats {
        let (entries, bytes) = self.cache.as_ref().map_or((0, 0), |c| (c.len() as u64, c.weight()));
        self.counters.snapshot(entries, bytes)
    }

    /// The options the analyzer was built with.
    pub fn options(&self) -> &AnalyzerOptions {
        &self.options
    }
}

impl std::fmt::Debug for Analyzer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Analyzer").field("options", &self.options).field("stats", &self.stats()).finish()
    }
}
