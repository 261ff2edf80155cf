//! The entry point: options, cache and counters around the guarded analysis.

use std::sync::Arc;

use crate::analysis::Analysis;
use crate::cache::{AnalysisCache, KeyRef, Stored};
use crate::guard::Engine;
use crate::model::{Outcome, StatementKind};
use crate::options::{AnalyzerOptions, OptionsError};
use crate::shape;
use crate::stats::{AnalyzerStats, Counter, Counters};
use crate::user_functions::UserFunctions;
use crate::walk::Limits;

/// Analyses SQL for routing, with a shared cache. Build one per configuration and share it
/// (`Arc<Analyzer>`) between sessions; every method takes `&self`.
pub struct Analyzer {
    options: AnalyzerOptions,
    engine: Engine,
    cache: Option<AnalysisCache>,
    counters: Counters,
    /// The one answer for text read under non-standard string rules, shared.
    nonstandard: Arc<Analysis>,
}

impl Analyzer {
    /// Builds an analyzer, refusing options out of range.
    pub fn new(options: AnalyzerOptions) -> Result<Analyzer, OptionsError> {
        options.validate()?;
        let engine = Engine {
            fns: UserFunctions::new(&options.write_functions, &options.session_neutral_functions),
            limits: Limits { max_depth: options.max_nesting, max_values: options.max_values },
            max_query_length: options.max_query_length,
        };
        let cache = (options.cache_entries > 0)
            .then(|| AnalysisCache::new(options.cache_entries, options.cache_bytes, options.cache_admission));
        let nonstandard = Arc::new(Analysis::conservative(
            Outcome::NonstandardStrings,
            crate::store::HintData::default(),
            Box::default(),
        ));
        Ok(Analyzer { options, engine, cache, counters: Counters::default(), nonstandard })
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

    /// [`Analyzer::analyze`] for text as a client sent it, in its `client_encoding`: text
    /// that is not UTF-8 (`SELECT 'café'` from a LATIN1 client) is not read at all and gets
    /// the conservative analysis, as text the parser rejects does.
    pub fn analyze_bytes(&self, sql: &[u8], param_oids: &[u32]) -> Arc<Analysis> {
        match std::str::from_utf8(sql) {
            Ok(sql) => self.analyze(sql, param_oids),
            Err(_) => Arc::new(Analysis::conservative(
                Outcome::ParseError,
                crate::store::HintData::default(),
                Box::default(),
            )),
        }
    }

    /// `analysis` (of `sql`) as it stands for a session whose `standard_conforming_strings`
    /// is on (`standard_strings`), or may be off: then a backslash in a plain `'...'`
    /// literal escapes the next character, so `'a\'';SET x = 1;--'` is a string, a `SET`
    /// and a comment, not the one string the parser here reads (libpg_query follows the
    /// standard; its setting is a process global no caller could change safely per
    /// session). Such text gets the conservative analysis, which the session treats as SQL
    /// it could not read: it reads the session back afterwards and rewrites nothing in it.
    /// Text without a backslash reads the same either way and keeps its analysis.
    pub fn for_session(&self, analysis: Arc<Analysis>, sql: &[u8], standard_strings: bool) -> Arc<Analysis> {
        if standard_strings || !sql.contains(&b'\\') {
            return analysis;
        }
        self.nonstandard.clone()
    }

    /// What a simple query's `sql` does, shared with every text of the same shape (the text
    /// with its constants as parameters, see [`constants`](crate::constants)) when the shape
    /// is a data statement (`SELECT`, `INSERT`, `UPDATE`, `DELETE`, `MERGE`, transaction
    /// control) with no session effects: then the returned analysis is the shape's, with
    /// the constants appearing as [`Value::Param`](crate::Value::Param) (`$1` is the first
    /// constant) and statement locations in the shape's text. Anything else is analysed as
    /// it is, as by [`Analyzer::analyze`]. `scratch` is the caller's buffer for the shape, so
    /// a hit does not allocate.
    pub fn analyze_query(&self, sql: &str, scratch: &mut String) -> Arc<Analysis> {
        if let Some(shared) = self.shape_of(sql, scratch, None) {
            self.counters.add(Counter::ShapeHit);
            return shared;
        }
        self.analyze(sql, &[])
    }

    /// [`Analyzer::analyze_query`], and whether the analysis is the shape's rather than the
    /// text's own: then its `$k` is the text's constant at `constants[k - 1]` (filled in the
    /// same pass that finds the shape, as [`constants`](crate::constants) would), and its
    /// locations are in the shape's text.
    pub fn analyze_query_shaped(
        &self,
        sql: &str,
        scratch: &mut String,
        constants: &mut Vec<std::ops::Range<usize>>,
    ) -> (Arc<Analysis>, bool) {
        if let Some(shared) = self.shape_of(sql, scratch, Some(constants)) {
            self.counters.add(Counter::ShapeHit);
            return (shared, true);
        }
        constants.clear();
        (self.analyze(sql, &[]), false)
    }

    fn shape_of(
        &self,
        sql: &str,
        scratch: &mut String,
        constants: Option<&mut Vec<std::ops::Range<usize>>>,
    ) -> Option<Arc<Analysis>> {
        let cache = self.cache.as_ref()?;
        if sql.len() > self.options.max_query_length || shape::normalize_noting(sql, scratch, constants) == 0
        {
            return None;
        }
        let key = KeyRef::new(scratch, &SHAPE_KEY);
        let analysis = match cache.get(&key) {
            Some(hit) => {
                self.counters.add(Counter::CacheHit);
                hit
            }
            None => {
                self.counters.add(Counter::CacheMiss);
                // Not counted as a parse error when the shape does not parse (a constant
                // where the grammar wants a literal): the text itself is analysed next.
                let analysis = Arc::new(self.engine.analyze(scratch, &[]));
                self.counters.add(Counter::Analyzed);
                cache.offer(&key, &analysis);
                analysis
            }
        };
        shareable(&analysis).then_some(analysis)
    }

    /// Analyses `sql` without looking at or filling the cache (benchmarks, tools).
    pub fn analyze_uncached(&self, sql: &str, param_oids: &[u32]) -> Analysis {
        let analysis = self.engine.analyze(sql, param_oids);
        self.counters.add(match analysis.outcome() {
            Outcome::Parsed => Counter::Analyzed,
            Outcome::ParseError => Counter::ParseError,
            Outcome::TooLong => Counter::TooLong,
            Outcome::TooComplex => Counter::TooComplex,
            // The engine never reads text as non-standard; only `for_session` says so.
            Outcome::Failed | Outcome::NonstandardStrings => Counter::Failed,
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

/// Shapes live in the text cache under a parameter type list no driver sends (one type of
/// oid 0xFFFFFFFF). A Parse that did send it would share the entry of the same text, whose
/// analysis is the same but for that type annotation.
const SHAPE_KEY: [u32; 1] = [u32::MAX];

/// Whether a shape's analysis stands for every text of that shape: what its constants are
/// changes nothing pgvia reads from it. Session effects carry values (`set_config`'s
/// `is_local`, a setting's value) and other statements keep theirs in their own analysis.
fn shareable(analysis: &Analysis) -> bool {
    !analysis.is_conservative()
        && !analysis.has_session_effects()
        && analysis.statements().all(|s| {
            matches!(
                s.kind(),
                StatementKind::Select { .. }
                    | StatementKind::Insert { .. }
                    | StatementKind::Update { .. }
                    | StatementKind::Delete { .. }
                    | StatementKind::Merge { .. }
                    | StatementKind::Begin(_)
                    | StatementKind::Commit { .. }
                    | StatementKind::Rollback { .. }
            )
        })
}

impl std::fmt::Debug for Analyzer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Analyzer").field("options", &self.options).field("stats", &self.stats()).finish()
    }
}
