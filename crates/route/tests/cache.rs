//! The analysis cache: hits, keys, bounds and admission.

use std::sync::Arc;

use route::{Admission, Analyzer, AnalyzerOptions};

fn cached(entries: usize, bytes: usize, admission: Admission) -> Analyzer {
    Analyzer::new(AnalyzerOptions {
        cache_entries: entries,
        cache_bytes: bytes,
        cache_admission: admission,
        ..Default::default()
    })
    .expect("valid options")
}

#[test]
fn a_hit_is_the_same_analysis() {
    let a = cached(1_000, 1 << 20, Admission::Always);
    let first = a.analyze("SELECT * FROM t WHERE id = $1", &[20]);
    let second = a.analyze("SELECT * FROM t WHERE id = $1", &[20]);
    assert!(Arc::ptr_eq(&first, &second));
    let s = a.stats();
    assert_eq!((s.cache_misses, s.cache_inserts, s.cache_hits, s.analyzed), (1, 1, 1, 1));
    assert_eq!(s.cache_entries, 1);
    assert!(s.cache_bytes > 0);
}

#[test]
fn parameter_types_are_part_of_the_key() {
    let a = cached(1_000, 1 << 20, Admission::Always);
    let int8 = a.analyze("SELECT * FROM t WHERE id = $1", &[20]);
    let text = a.analyze("SELECT * FROM t WHERE id = $1", &[25]);
    let simple = a.analyze("SELECT * FROM t WHERE id = $1", &[]);
    assert!(!Arc::ptr_eq(&int8, &text) && !Arc::ptr_eq(&int8, &simple));
    let oid =
        |an: &route::Analysis| match an.statement(0).unwrap().predicates().next().unwrap().values().next() {
            Some(route::Value::Param { type_oid, .. }) => type_oid,
            other => panic!("{other:?}"),
        };
    assert_eq!((oid(&int8), oid(&text), oid(&simple)), (20, 25, 0));
}

#[test]
fn second_sight_admission() {
    let a = cached(1_000, 1 << 20, Admission::SecondSight);
    let sql = "SELECT 1";
    let first = a.analyze(sql, &[]);
    let second = a.analyze(sql, &[]);
    let third = a.analyze(sql, &[]);
    assert!(!Arc::ptr_eq(&first, &second), "not stored on first sight");
    assert!(Arc::ptr_eq(&second, &third), "stored on second sight");
    let s = a.stats();
    assert_eq!((s.cache_not_admitted, s.cache_inserts, s.cache_hits), (1, 1, 1));
}

#[test]
fn both_bounds_hold() {
    // Entry bound: 200 entries, plenty of bytes.
    let a = cached(200, 64 << 20, Admission::Always);
    for i in 0..2_000 {
        a.analyze(&format!("SELECT * FROM t WHERE id = {i}"), &[]);
    }
    assert!(a.stats().cache_entries <= 200, "{:?}", a.stats());

    // Byte bound: few bytes for long queries.
    let a = cached(100_000, 256 << 10, Admission::Always);
    let padding = "x".repeat(2_000);
    for i in 0..2_000 {
        a.analyze(&format!("SELECT '{padding}' FROM t WHERE id = {i}"), &[]);
    }
    let s = a.stats();
    assert!(s.cache_bytes <= 256 << 10, "{s:?}");
    assert!(s.cache_entries < 256, "{s:?}");
}

#[test]
fn one_off_queries_do_not_evict_hot_ones() {
    // A hot set used all the time, and a flood of queries with inline literals, each seen
    // once (the psycopg2 / ORM pattern). The hot set must stay cached; with second-sight
    // admission the flood must not even be inserted.
    for admission in [Admission::SecondSight, Admission::Always] {
        let a = cached(500, 64 << 20, admission);
        let hot: Vec<String> = (0..100).map(|i| format!("SELECT * FROM hot{i} WHERE id = $1")).collect();
        for round in 0..50 {
            for q in &hot {
                a.analyze(q, &[]);
            }
            for j in 0..200 {
                a.analyze(&format!("SELECT * FROM cold WHERE id = {}", round * 1_000 + j), &[]);
            }
        }
        let before = a.stats();
        for q in &hot {
            a.analyze(q, &[]);
        }
        let after = a.stats();
        let hot_hits = after.cache_hits - before.cache_hits;
        assert!(hot_hits >= 95, "{admission:?}: {hot_hits} of 100 hot queries still cached");
        if admission == Admission::SecondSight {
            // The hot set, plus the doorkeeper's false positives (under 2% by construction).
            assert!(after.cache_inserts <= 100 + 200, "{admission:?}: {after:?}");
            assert!(after.cache_not_admitted >= 10_000, "{admission:?}: {after:?}");
        }
    }
}

#[test]
fn disabled_cache_and_over_long_queries_are_not_cached() {
    let a = cached(0, 0, Admission::Always);
    let x = a.analyze("SELECT 1", &[]);
    let y = a.analyze("SELECT 1", &[]);
    assert!(!Arc::ptr_eq(&x, &y));
    assert_eq!(a.stats().cache_hits, 0);

    let a = Analyzer::new(AnalyzerOptions {
        max_query_length: 16,
        cache_admission: Admission::Always,
        ..Default::default()
    })
    .unwrap();
    let long = "SELECT 1234567890123456789";
    let x = a.analyze(long, &[]);
    let y = a.analyze(long, &[]);
    assert!(!Arc::ptr_eq(&x, &y));
    assert_eq!(a.stats().too_long, 2);
    assert_eq!(a.stats().cache_entries, 0);
}

#[test]
fn bad_options_are_refused() {
    let err = Analyzer::new(AnalyzerOptions { max_nesting: 1, ..Default::default() }).unwrap_err();
    assert_eq!(err.to_string(), "max_nesting must be between 16 and 10000, not 1");
}
