//! Hostile input: queries of 1 MiB, nesting 10,000 deep, `IN` lists of 100,000
//! parameters, garbage. Each must be handled within the guards: no crash, bounded time,
//! bounded memory, a conservative decision when analysis gives up.
//!
//! This binary counts allocations (per thread, so parallel tests do not disturb each
//! other) to show the bounds on memory and that a cache hit allocates nothing.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::time::{Duration, Instant};

use route::{Analyzer, AnalyzerOptions, Outcome, PredicateOp, Role, StatementKind, Value};

struct Counting;

thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
    static LIVE: Cell<i64> = const { Cell::new(0) };
    static PEAK: Cell<i64> = const { Cell::new(0) };
}

fn note(delta: i64, count: bool) {
    // `try_with`: the allocator also runs while thread-locals are torn down.
    let _ = ALLOCS.try_with(|a| a.set(a.get() + u64::from(count)));
    let _ = LIVE.try_with(|l| {
        let v = l.get() + delta;
        l.set(v);
        let _ = PEAK.try_with(|p| p.set(p.get().max(v)));
    });
}

// SAFETY: every method forwards to the system allocator with the caller's arguments; the
// bookkeeping only touches `const`-initialised thread-locals, which never allocate.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size() as i64, true);
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        note(-(layout.size() as i64), false);
        // SAFETY: same contract as our caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size as i64 - layout.size() as i64, true);
        // SAFETY: same contract as our caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Runs `f` and returns its result, the allocations it made and the most Rust heap it
/// held at once beyond what was live before, all on this thread.
fn measured<R>(f: impl FnOnce() -> R) -> (R, u64, i64) {
    let a0 = ALLOCS.with(Cell::get);
    let live0 = LIVE.with(Cell::get);
    PEAK.with(|p| p.set(live0));
    let r = f();
    let allocs = ALLOCS.with(Cell::get) - a0;
    let peak = PEAK.with(Cell::get) - live0;
    (r, allocs, peak)
}

fn uncached(options: AnalyzerOptions) -> Analyzer {
    Analyzer::new(AnalyzerOptions { cache_entries: 0, ..options }).expect("valid options")
}

const MIB: usize = 1024 * 1024;

/// Debug builds are slow; these bounds catch quadratic behaviour, not tuning.
const TIME_LIMIT: Duration = Duration::from_secs(20);

#[test]
fn a_query_over_the_length_limit_is_not_parsed() {
    let a = uncached(AnalyzerOptions::default());
    let mut sql = String::from("/* pgvia: role=replica */ INSERT INTO t VALUES ");
    while sql.len() <= MIB {
        sql.push_str("(1, 'padding padding padding'), ");
    }
    sql.push_str("(2, 'end')");
    let start = Instant::now();
    let (analysis, _, peak) = measured(|| a.analyze(&sql, &[]));
    assert!(start.elapsed() < Duration::from_secs(2), "not parsed, so fast: {:?}", start.elapsed());
    assert_eq!(analysis.outcome(), Outcome::TooLong);
    assert!(analysis.writes() && analysis.is_empty() && analysis.is_conservative());
    assert_eq!(analysis.hints().role, Some(Role::Replica), "hints are still read");
    assert!(peak < 64 * 1024, "no copy of the text is made: {peak} bytes");
    assert_eq!(a.stats().too_long, 1);
}

#[test]
fn a_one_mebibyte_query_is_analysed_in_bounded_time_and_memory() {
    let a = uncached(AnalyzerOptions { max_query_length: 2 * MIB, ..Default::default() });
    let mut sql = String::from("INSERT INTO t (id, name) VALUES ");
    let mut rows = 0;
    while sql.len() < MIB - 64 {
        if rows > 0 {
            sql.push_str(", ");
        }
        sql.push_str(&format!("({rows}, 'row number {rows}')"));
        rows += 1;
    }
    assert!(sql.len() <= MIB);
    let start = Instant::now();
    let (analysis, _, peak) = measured(|| a.analyze(&sql, &[]));
    assert!(start.elapsed() < TIME_LIMIT, "{:?}", start.elapsed());
    assert_eq!(analysis.outcome(), Outcome::Parsed);
    let s = analysis.statement(0).unwrap();
    assert_eq!(s.kind(), StatementKind::Insert { returning: false });
    let values = s.insert_values().unwrap();
    assert_eq!(values.rows(), rows.min(65_536 / 2));
    assert_eq!(s.values_truncated(), rows * 2 > 65_536);
    // The analysis keeps at most `max_values` values and their text: a few MiB.
    assert!(peak < 8 * MIB as i64, "Rust heap peak {peak} bytes");
}

/// Nested shapes, 10,000 levels deep. PostgreSQL's grammar stops right-nested ones
/// (parentheses, subqueries, function calls) at its parser stack limit; left-deep chains
/// (`1 + 1 + ...`) parse fine and are stopped by the walk's depth limit. Either way the
/// answer is conservative, quick, and the walk stays within a tokio worker's 2 MiB stack.
/// Measured at the default depth limit: a release build needs under 256 KiB, a debug build
/// (frames several times larger) between 1 and 1.5 MiB, so the test gives each the stack
/// that leaves it a margin: 1 MiB when optimised, the worker's 2 MiB otherwise.
#[test]
fn nesting_ten_thousand_deep() {
    const N: usize = 10_000;
    let shapes: Vec<(&str, String)> = vec![
        ("parentheses", format!("SELECT {}1{}", "(".repeat(N), ")".repeat(N))),
        ("subqueries", format!("SELECT {}1{}", "(SELECT ".repeat(N), ")".repeat(N))),
        ("from subqueries", format!("SELECT * FROM {}t{}", "(SELECT * FROM ".repeat(N), ") s".repeat(N))),
        ("function calls", format!("SELECT {}1{}", "abs(".repeat(N), ")".repeat(N))),
        ("arrays", format!("SELECT {}1{}", "ARRAY[".repeat(N), "]".repeat(N))),
        ("not", format!("SELECT * FROM t WHERE {}true", "NOT ".repeat(N))),
        ("case", format!("SELECT {}1{}", "CASE WHEN x THEN ".repeat(N), " END".repeat(N))),
        ("left-deep sum", format!("SELECT {}", vec!["1"; N].join(" + "))),
        ("left-deep concat", format!("SELECT {}", vec!["'a'"; N].join(" || "))),
        ("json path", format!("SELECT j{} FROM t", " -> 'k'".repeat(N))),
        ("and chain", format!("SELECT * FROM t WHERE {}", vec!["a = 1"; N].join(" AND "))),
        ("or chain", format!("SELECT * FROM t WHERE {}", vec!["a = 1"; N].join(" OR "))),
        ("ctes", {
            let ctes: Vec<String> = (0..N)
                .map(|i| {
                    if i == 0 {
                        "c0 AS (SELECT 1)".into()
                    } else {
                        format!("c{i} AS (SELECT * FROM c{})", i - 1)
                    }
                })
                .collect();
            format!("WITH {} SELECT * FROM c{}", ctes.join(", "), N - 1)
        }),
    ];
    let results = std::thread::Builder::new()
        .stack_size(if cfg!(debug_assertions) { 2 * MIB } else { MIB })
        .spawn(move || {
            let a = uncached(AnalyzerOptions::default());
            shapes
                .into_iter()
                .map(|(name, sql)| {
                    let start = Instant::now();
                    let analysis = a.analyze(&sql, &[]);
                    (name, analysis.outcome(), analysis.writes(), start.elapsed())
                })
                .collect::<Vec<_>>()
        })
        .expect("spawn")
        .join()
        .expect("no stack overflow");
    for (name, outcome, writes, elapsed) in results {
        assert!(elapsed < TIME_LIMIT, "{name}: {elapsed:?}");
        match name {
            // Flat in the tree (BoolExpr lists), so nothing is deep: analysed normally.
            "and chain" | "or chain" | "ctes" => assert_eq!(outcome, Outcome::Parsed, "{name}"),
            _ => {
                assert!(matches!(outcome, Outcome::ParseError | Outcome::TooComplex), "{name}: {outcome:?}");
                assert!(writes, "{name}: conservative");
            }
        }
    }
}

#[test]
fn nesting_within_the_limit_is_analysed() {
    let a = uncached(AnalyzerOptions::default());
    let sql = format!("SELECT {} FROM t WHERE id = 1", vec!["nextval('s')"; 300].join(" + "));
    let analysis = a.analyze(&sql, &[]);
    assert_eq!(analysis.outcome(), Outcome::Parsed);
    assert!(analysis.writes());
    let deep = format!("SELECT {}1{} FROM t", "(SELECT ".repeat(100), ")".repeat(100));
    assert_eq!(a.analyze(&deep, &[]).outcome(), Outcome::Parsed);
    // The limit is a setting: raise it (with a big enough stack) and deep chains pass.
    let chain = format!("SELECT {}", vec!["1"; 5_000].join(" + "));
    assert_eq!(a.analyze(&chain, &[]).outcome(), Outcome::TooComplex);
    let outcome = std::thread::Builder::new()
        .stack_size(16 * MIB)
        .spawn(move || {
            uncached(AnalyzerOptions { max_nesting: 10_000, ..Default::default() })
                .analyze(&chain, &[])
                .outcome()
        })
        .expect("spawn")
        .join()
        .expect("no stack overflow");
    assert_eq!(outcome, Outcome::Parsed);
}

fn in_list(n: usize) -> String {
    let mut sql = String::from("SELECT * FROM users WHERE id IN (");
    for i in 1..=n {
        if i > 1 {
            sql.push_str(", ");
        }
        sql.push('$');
        sql.push_str(&i.to_string());
    }
    sql.push(')');
    sql
}

#[test]
fn an_in_list_of_100_000_parameters() {
    let sql = in_list(100_000);
    assert!(sql.len() < MIB, "fits the default length limit: {}", sql.len());

    // Default: more values than recorded, so the predicate is dropped and flagged.
    let a = uncached(AnalyzerOptions::default());
    let start = Instant::now();
    let (analysis, _, peak) = measured(|| a.analyze(&sql, &[]));
    assert!(start.elapsed() < TIME_LIMIT, "{:?}", start.elapsed());
    assert_eq!(analysis.outcome(), Outcome::Parsed);
    let s = analysis.statement(0).unwrap();
    assert!(s.values_truncated());
    assert_eq!(s.predicates().count(), 0);
    assert!(peak < 4 * MIB as i64, "Rust heap peak {peak} bytes");

    // With room for them, every value is recorded, typed from the Parse message.
    let oids = vec![20u32; 100_000];
    let a = uncached(AnalyzerOptions { max_values: 200_000, ..Default::default() });
    let start = Instant::now();
    let (analysis, _, peak) = measured(|| a.analyze(&sql, &oids));
    assert!(start.elapsed() < TIME_LIMIT, "{:?}", start.elapsed());
    let s = analysis.statement(0).unwrap();
    let p = s.predicates().next().expect("the IN list");
    assert_eq!(p.op(), PredicateOp::In);
    assert_eq!(p.values().len(), 100_000);
    assert_eq!(p.values().last(), Some(Value::Param { number: 100_000, type_oid: 20 }));
    assert!(peak < 16 * MIB as i64, "Rust heap peak {peak} bytes");
}

#[test]
fn garbage_gets_the_conservative_decision() {
    let a = uncached(AnalyzerOptions::default());
    for sql in ["SELEC 1", "SELECT (", "\u{0}", "SELECT 1\u{0}; DROP TABLE t", "SELECT 'unterminated", "$$"] {
        let analysis = a.analyze(sql, &[]);
        assert_eq!(analysis.outcome(), Outcome::ParseError, "{sql:?}");
        assert!(analysis.writes() && analysis.is_empty(), "{sql:?}");
    }
    assert_eq!(a.stats().parse_errors, 6);
    // Bytes that are not SQL at all, of every value.
    let bytes: String = (0u32..0x800).filter_map(char::from_u32).collect();
    for chunk in bytes.as_bytes().chunks(97) {
        let text = String::from_utf8_lossy(chunk);
        let analysis = a.analyze(&text, &[]);
        assert_ne!(analysis.outcome(), Outcome::Failed);
    }
}

#[test]
fn a_cache_hit_allocates_nothing() {
    let a = Analyzer::new(AnalyzerOptions::default()).unwrap();
    let sql = "SELECT abalance FROM pgbench_accounts WHERE aid = $1";
    for _ in 0..3 {
        a.analyze(sql, &[23]);
    }
    let (_, allocs, _) = measured(|| {
        for _ in 0..1_000 {
            let hit = a.analyze(sql, &[23]);
            assert!(!hit.writes());
        }
    });
    assert_eq!(allocs, 0, "allocations in 1,000 cache hits");
    assert!(a.stats().cache_hits >= 1_000);
}

#[test]
fn a_cold_analysis_allocates_a_handful() {
    let a = uncached(AnalyzerOptions::default());
    let queries = [
        "SELECT abalance FROM pgbench_accounts WHERE aid = $1",
        "UPDATE pgbench_accounts SET abalance = abalance + $1 WHERE aid = $2",
        "INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) VALUES ($1, $2, $3, $4, CURRENT_TIMESTAMP)",
        "BEGIN",
    ];
    // Warm the per-thread scratch buffers first: steady state is what matters.
    for q in queries {
        a.analyze(q, &[]);
    }
    for q in queries {
        let (analysis, allocs, _) = measured(|| a.analyze(q, &[]));
        assert_eq!(analysis.outcome(), Outcome::Parsed);
        // The C string handed to the parser, the Arc, the entries, the values, the names.
        assert!(allocs <= 5, "{q}: {allocs} allocations");
    }
}

#[test]
fn many_threads_at_once() {
    let a = std::sync::Arc::new(Analyzer::new(AnalyzerOptions::default()).unwrap());
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let a = a.clone();
            std::thread::spawn(move || {
                for i in 0..500 {
                    let sql =
                        format!("SELECT * FROM t{} WHERE id = {}", i % 7, if t % 2 == 0 { i } else { 1 });
                    let analysis = a.analyze(&sql, &[]);
                    let s = analysis.statement(0).unwrap();
                    assert_eq!(s.tables().next().unwrap().name, format!("t{}", i % 7));
                    let v = s.predicates().next().unwrap().values().next().unwrap();
                    assert_eq!(v, Value::Integer(if t % 2 == 0 { i } else { 1 }));
                    assert!(!analysis.writes());
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("thread");
    }
    let stats = a.stats();
    assert_eq!(stats.cache_hits + stats.cache_misses, 2_000);
    assert_eq!(stats.failures, 0);
}
