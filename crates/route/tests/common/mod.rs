//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::sync::{Arc, OnceLock};

use route::{Analysis, Analyzer, AnalyzerOptions, SessionEffect, Statement, StatementKind};

/// An analyzer without a cache, shared by the tests of one binary.
pub fn analyzer() -> &'static Analyzer {
    static A: OnceLock<Analyzer> = OnceLock::new();
    A.get_or_init(|| {
        Analyzer::new(AnalyzerOptions {
            cache_entries: 0,
            write_functions: vec!["audit.log_event".into(), "bump_counter".into()],
            ..Default::default()
        })
        .expect("valid options")
    })
}

pub fn analyze(sql: &str) -> Arc<Analysis> {
    let a = analyzer().analyze(sql, &[]);
    assert_eq!(a.outcome(), route::Outcome::Parsed, "{sql}: {a:?}");
    a
}

/// The only statement of `sql`.
pub fn one(sql: &str) -> (Arc<Analysis>, usize) {
    let a = analyze(sql);
    assert_eq!(a.len(), 1, "{sql}: {a:?}");
    (a, 0)
}

pub fn kind(sql: &str) -> StatementKind {
    let (a, i) = one(sql);
    a.statement(i).expect("one statement").kind()
}

pub fn writes(sql: &str) -> bool {
    analyze(sql).writes()
}

pub fn stmt<R>(sql: &str, f: impl FnOnce(Statement<'_>) -> R) -> R {
    let (a, i) = one(sql);
    f(a.statement(i).expect("one statement"))
}

/// Effects rendered as strings, which keeps expectations short.
pub fn effects(sql: &str) -> Vec<String> {
    analyze(sql).session_effects().map(|e| render(&e)).collect()
}

pub fn render(e: &SessionEffect<'_>) -> String {
    format!("{e:?}")
}

/// Tables as `schema.name:access`.
pub fn tables(sql: &str) -> Vec<String> {
    analyze(sql)
        .statements()
        .flat_map(|s| s.tables().map(|t| format!("{t}:{:?}", t.access)).collect::<Vec<_>>())
        .collect()
}
