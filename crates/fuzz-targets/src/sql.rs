//! The SQL analysis facade (`route::Analyzer`) and the shape lexer (`route::constants`).
//!
//! `analyze` input: SQL text (bytes; what is not UTF-8 takes the client-encoding path). It is
//! analysed uncached, through the cache, and as a simple query by its shape, and every part of
//! the result is read. Invariants: statement locations lie inside the text; the cached and the
//! uncached analysis agree; where the text and its shape both parse, sharing the shape's
//! analysis gives the same routing answer (writes or not) and the same statements.
//!
//! `shape` input: SQL text. Invariants: the constants found are in order, do not overlap, lie
//! on character boundaries inside the text, and are never empty.

use std::sync::OnceLock;

use route::{Analysis, Analyzer, AnalyzerOptions, Outcome};

fn analyzer() -> &'static Analyzer {
    static A: OnceLock<Analyzer> = OnceLock::new();
    // Admit every miss, so the cached path is exercised from the first input.
    A.get_or_init(|| {
        let options =
            AnalyzerOptions { cache_admission: route::Admission::Always, ..AnalyzerOptions::default() };
        Analyzer::new(options).expect("valid options")
    })
}

pub fn analyze(data: &[u8]) {
    let analyzer = analyzer();
    let Ok(sql) = std::str::from_utf8(data) else {
        let a = analyzer.analyze_bytes(data, &[]);
        assert!(a.is_conservative(), "text that is not UTF-8 is never read");
        return;
    };
    let uncached = analyzer.analyze_uncached(sql, &[]);
    walk(&uncached, sql.len());
    let cached = analyzer.analyze(sql, &[]);
    walk(&cached, sql.len());
    assert_eq!(summary(&uncached), summary(&cached), "cache changed the analysis of {sql:?}");

    let mut scratch = String::new();
    let by_shape = analyzer.analyze_query(sql, &mut scratch);
    if uncached.outcome() == Outcome::Parsed && by_shape.outcome() == Outcome::Parsed {
        assert_eq!(
            uncached.writes(),
            by_shape.writes(),
            "shape changed the routing of {sql:?} (shape {scratch:?})"
        );
        assert_eq!(
            kinds(&uncached),
            kinds(&by_shape),
            "shape changed the statements of {sql:?} (shape {scratch:?})"
        );
    }
}

/// Reads every part of an analysis; locations are checked against the text they come from
/// (a shared shape's are in the shape's text, so only the direct analyses are checked).
fn walk(a: &Analysis, text_len: usize) {
    let _ = (a.writes(), a.calls_unlisted_functions(), a.may_have_hidden_effects(), a.heap_size());
    a.session_effects().for_each(drop);
    let _ = format!("{:?}", a.hints());
    for s in a.statements() {
        let loc = s.location();
        assert!(loc.start <= loc.end && loc.end <= text_len, "location {loc:?} outside {text_len} bytes");
        let _ = (s.kind(), s.target(), s.tag(), s.writes(), s.name(), s.value(), s.values_truncated());
        s.tables().for_each(|t| drop(format!("{t:?}")));
        s.session_effects().for_each(drop);
        for p in s.predicates() {
            let _ = (p.table(), p.column(), p.op());
            p.values().for_each(drop);
        }
        if let Some(v) = s.insert_values() {
            v.columns().for_each(drop);
            for r in 0..v.rows().min(4) {
                assert_eq!(v.row(r).len(), v.width());
            }
            for c in 0..v.width().min(4) {
                v.column(c).for_each(drop);
            }
        }
    }
}

fn kinds(a: &Analysis) -> Vec<route::StatementKind> {
    a.statements().map(|s| s.kind()).collect()
}

fn summary(a: &Analysis) -> (Outcome, bool, Vec<route::StatementKind>) {
    (a.outcome(), a.writes(), kinds(a))
}

pub fn shape(data: &[u8]) {
    let Ok(sql) = std::str::from_utf8(data) else { return };
    let found = route::constants(sql);
    let mut end = 0;
    for r in &found {
        assert!(r.start >= end, "constants overlap or are out of order: {found:?}");
        assert!(r.start < r.end && r.end <= sql.len(), "bad constant range {r:?}");
        assert!(
            sql.is_char_boundary(r.start) && sql.is_char_boundary(r.end),
            "range {r:?} splits a character"
        );
        end = r.end;
    }
}
