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

    /// [`QueryMemo::analyze`], and whether the analysis is the text's shape's: then its
    /// `$k` stand for the text's constants and its locations are not the text's.
    pub fn analyze_shaped(&mut self, analyzer: &Analyzer, sql: &[u8]) -> (Arc<Analysis>, bool) {
        if let Some(analysis) = &self.analysis {
            if self.text == sql {
                return (analysis.clone(), self.shaped);
            }
        }
        let text = match std::str::from_utf8(sql) {
            Ok(text) if sql.len() <= MAX_TEXT => text,
            _ => {
                self.analysis = None;
                return (analyzer.analyze_bytes(sql, &[]), false);
            }
        };
        let (analysis, shaped) = analyzer.analyze_query_shaped(text, &mut self.shape);
        self.text.clear();
        self.text.extend_from_slice(sql);
        self.analysis = Some(analysis.clone());
        self.shaped = shaped;
        (analysis, shaped)
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
}
