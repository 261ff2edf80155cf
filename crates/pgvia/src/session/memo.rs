//! The analysis of the client's last simple query, kept so one message is parsed once.
//!
//! A simple query is looked at up to three times on its way to a server: whether pgvia can
//! answer it without one (`BEGIN`, `COMMIT`, SQL `PREPARE`), and then by the relay, which
//! follows its effects. The analyzer's cache makes the later looks cheap only for texts it
//! admits, and it rightly does not admit one-off texts (queries with inline values, as in
//! `pgbench -M simple`): without this memo each such query was parsed two or three times.
//! The key is the whole text, compared byte for byte, so a hit is always the same query.
//! Texts are bytes in the client's encoding; one that is not UTF-8 is not read (see
//! `route::Analyzer::analyze_bytes`).
//!
//! A new text is first looked up by its shape (its constants as parameters, see
//! `route::Analyzer::analyze_query`), so a stream of one-off texts of a few shapes is parsed
//! a few times, not once per query.

use std::sync::Arc;

use route::{Analysis, Analyzer};

#[derive(Default)]
pub struct QueryMemo {
    /// The text last analysed; its buffer is reused, so a hot session does not allocate here.
    text: Vec<u8>,
    /// Its analysis; `None` until the first query.
    analysis: Option<Arc<Analysis>>,
    /// Whether `analysis` is the text's shape's (see `route::Analyzer::analyze_query_shaped`).
    shaped: bool,
    /// Where the analyzer writes a text's shape; reused like `text`.
    shape: String,
    /// Where the constants of a shaped text are (its `$k` is `constants[k - 1]`); reused.
    constants: Vec<std::ops::Range<usize>>,
}

/// Texts longer than this are neither kept nor shaped: the buffers would keep their size for
/// the session's life, and long queries are usually the same text (and so hits in the
/// analyzer's cache).
const MAX_TEXT: usize = 4 * 1024;

impl QueryMemo {
    /// The analysis of a simple query's text (no parameter types).
    pub fn analyze(&mut self, analyzer: &Analyzer, sql: &[u8]) -> Arc<Analysis> {
        self.analyze_shaped(analyzer, sql).0
    }

    /// [`QueryMemo::analyze`], and the ranges of the text's constants when the analysis is
    /// the text's shape's (its `$k` is the constant at `ranges[k - 1]`, and its locations
    /// are not the text's); `None` when it is the text's own.
    pub fn analyze_shaped(
        &mut self,
        analyzer: &Analyzer,
        sql: &[u8],
    ) -> (Arc<Analysis>, Option<&[std::ops::Range<usize>]>) {
        let hit = self.analysis.is_some() && self.text == sql;
        if !hit {
            let text = match std::str::from_utf8(sql) {
                Ok(text) if sql.len() <= MAX_TEXT => text,
                _ => {
                    self.analysis = None;
                    return (analyzer.analyze_bytes(sql, &[]), None);
                }
            };
            let (analysis, shaped) =
                analyzer.analyze_query_shaped(text, &mut self.shape, &mut self.constants);
            self.text.clear();
            self.text.extend_from_slice(sql);
            self.analysis = Some(analysis);
            self.shaped = shaped;
        }
        let analysis = match &self.analysis {
            Some(a) => a.clone(),
            None => return (analyzer.analyze_bytes(sql, &[]), None),
        };
        (analysis, self.constants())
    }

    /// Forgets the last text (its buffers keep their room): the memo is going to another
    /// session.
    pub fn forget(&mut self) {
        self.text.clear();
        self.analysis = None;
        self.shaped = false;
        self.constants.clear();
    }

    /// The ranges of the last text's constants, when its analysis is its shape's.
    pub fn constants(&self) -> Option<&[std::ops::Range<usize>]> {
        (self.analysis.is_some() && self.shaped).then_some(self.constants.as_slice())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_text_is_analysed_once() {
        let analyzer = Analyzer::new(route::AnalyzerOptions::default()).unwrap();
        let mut memo = QueryMemo::default();
        let a = memo.analyze(&analyzer, b"SELECT 1 FROM t WHERE id = 42");
        let b = memo.analyze(&analyzer, b"SELECT 1 FROM t WHERE id = 42");
        assert!(Arc::ptr_eq(&a, &b));
        let c = memo.analyze(&analyzer, b"SET search_path = x");
        assert!(!Arc::ptr_eq(&a, &c));
        assert!(c.session_effects().next().is_some());
        let d = memo.analyze(&analyzer, b"SELECT 1 FROM t WHERE id = 42");
        assert!(!Arc::ptr_eq(&a, &d), "only the last text is kept");
        assert!(d.session_effects().next().is_none());
    }

    #[test]
    fn text_in_another_encoding_is_conservative() {
        let analyzer = Analyzer::new(route::AnalyzerOptions::default()).unwrap();
        let mut memo = QueryMemo::default();
        // 'café' in LATIN1.
        let a = memo.analyze(&analyzer, b"SET application_name = 'caf\xe9'");
        assert!(a.is_conservative());
        assert!(a.writes());
    }

    #[test]
    fn a_shaped_text_reports_its_constants_and_its_own_text_none() {
        let analyzer = Analyzer::new(route::AnalyzerOptions::default()).unwrap();
        let mut memo = QueryMemo::default();
        let sql = "SELECT a FROM t WHERE id = 42 AND name = 'x''y'";
        let (_, constants) = memo.analyze_shaped(&analyzer, sql.as_bytes());
        assert_eq!(constants.map(<[_]>::to_vec), Some(route::constants(sql)));
        // A memo hit gives the same ranges.
        let (_, again) = memo.analyze_shaped(&analyzer, sql.as_bytes());
        assert_eq!(again.map(<[_]>::to_vec), Some(route::constants(sql)));
        // Not a data statement: analysed as it is, no constants to read.
        let (_, none) = memo.analyze_shaped(&analyzer, b"SET search_path = x");
        assert!(none.is_none());
    }
}
