//! Texts that differ only in their constants share their shape's analysis, and sharing never
//! changes what pgvia reads from an analysis: every query in the corpus (written here, plus
//! every SQL string of the other analysis tests) gets the same decision shared as alone.

use std::fmt::Write;
use std::sync::Arc;

use route::{constants, Analysis, Analyzer, AnalyzerOptions, Value};

fn cached() -> Analyzer {
    Analyzer::new(AnalyzerOptions {
        write_functions: vec!["audit.log_event".into(), "bump_counter".into()],
        ..Default::default()
    })
    .expect("valid options")
}

/// Everything routing and session tracking read, with values reduced to their count.
fn summary(a: &Analysis) -> String {
    let mut s = format!(
        "{:?} writes={} unlisted={} hidden={} n={} hints={:?}\n",
        a.outcome(),
        a.writes(),
        a.calls_unlisted_functions(),
        a.may_have_hidden_effects(),
        a.len(),
        a.hints()
    );
    for st in a.statements() {
        let _ = write!(s, "  {:?} {:?} {} writes={}", st.kind(), st.target(), st.tag(), st.writes());
        let _ = write!(s, " name={:?}", st.name());
        let _ = write!(s, " tables={:?}", st.tables().collect::<Vec<_>>());
        let _ = write!(s, " effects={}", st.session_effects().count());
        for p in st.predicates() {
            let _ = write!(s, " pred({:?} {} {:?} x{})", p.table(), p.column(), p.op(), p.values().len());
        }
        if let Some(ins) = st.insert_values() {
            let _ = write!(s, " insert({:?} rows={})", ins.columns().collect::<Vec<_>>(), ins.rows());
        }
        let _ = writeln!(s, " truncated={}", st.values_truncated());
    }
    s
}

/// Pairs each value of the shape's analysis with the text's own.
fn values(a: &Analysis) -> Vec<String> {
    let mut out = Vec::new();
    for st in a.statements() {
        for p in st.predicates() {
            out.extend(p.values().map(|v| format!("{v:?}")));
        }
        if let Some(ins) = st.insert_values() {
            for r in 0..ins.rows() {
                out.extend(ins.row(r).map(|v| format!("{v:?}")));
            }
        }
    }
    out
}

const CORPUS: &[&str] = &[
    "SELECT abalance FROM pgbench_accounts WHERE aid = 4711;",
    "UPDATE pgbench_accounts SET abalance = abalance + -4321 WHERE aid = 77;",
    "UPDATE pgbench_tellers SET tbalance = tbalance + 12 WHERE tid = 3;",
    "INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) VALUES (3, 1, 77, -4321, CURRENT_TIMESTAMP);",
    "SELECT * FROM users WHERE id IN (1, 2, 3) AND name = 'bob' LIMIT 10 OFFSET 20",
    "SELECT * FROM users WHERE id = ANY('{1,2}') ORDER BY 1",
    "SELECT nextval('order_seq')",
    "SELECT currval('order_seq'), 5",
    "SELECT set_config('search_path', 'x', false), 1",
    "SELECT set_config('search_path', 'x', true), 1",
    "SELECT pg_advisory_lock(42)",
    "SELECT pg_advisory_xact_lock(42), 1",
    "SELECT * FROM t WHERE id = 5 FOR UPDATE",
    "SELECT * FROM t WHERE id = 5 FOR SHARE SKIP LOCKED",
    "WITH moved AS (DELETE FROM q WHERE id < 100 RETURNING *) SELECT count(*) FROM moved",
    "INSERT INTO t (a, b) VALUES (1, 'x'), (2, E'y\\n') ON CONFLICT (a) DO UPDATE SET b = 'z' RETURNING a",
    "DELETE FROM t WHERE created < now() - interval '7 days' AND id = 9",
    "SELECT * FROM events WHERE day = DATE '2026-01-01' AND kind = 3",
    "SELECT 1.5e3 * x, .5, 0x1F, 1_000 FROM t WHERE y > 2",
    "/* pgvia: role=replica */ SELECT * FROM t WHERE id = 3",
    "/* pgvia: shard_key=17 */ SELECT * FROM t WHERE id = 3",
    "SELECT audit.log_event('x', 1)",
    "SELECT bump_counter(3)",
    "SELECT my_func(3)",
    "SELECT lower('ABC'), length('x'), 2",
    "BEGIN; UPDATE t SET a = 1 WHERE id = 2; COMMIT",
    "BEGIN ISOLATION LEVEL SERIALIZABLE; SELECT * FROM t WHERE id = 2; COMMIT",
    "SET search_path = 'x'",
    "SET statement_timeout = 5000",
    "SET LOCAL work_mem = '64MB'",
    "SELECT 1; SET application_name = 'a'",
    "PREPARE p AS SELECT * FROM t WHERE id = 1",
    "EXECUTE p(5)",
    "LISTEN ch; SELECT 1",
    "NOTIFY ch, 'payload'",
    "SELECT pg_notify('ch', 'x')",
    "CREATE TEMP TABLE tt AS SELECT 1",
    "SELECT 1 INTO newtable",
    "COPY t FROM STDIN WITH (DELIMITER ',')",
    "COPY (SELECT * FROM t WHERE id > 5) TO STDOUT",
    "DO $$ BEGIN PERFORM 1; END $$",
    "CREATE FUNCTION f() RETURNS int AS $$ SELECT 1 $$ LANGUAGE sql",
    "SELECT $tag$ body $tag$ || 'x', 3",
    "DECLARE c CURSOR WITH HOLD FOR SELECT * FROM t WHERE id = 3",
    "FETCH 10 FROM c",
    "LOCK TABLE t IN ACCESS EXCLUSIVE MODE",
    "VACUUM t",
    "EXPLAIN ANALYZE SELECT * FROM t WHERE id = 3",
    "MERGE INTO t USING s ON t.id = s.id WHEN MATCHED THEN UPDATE SET v = 1",
    "SELECT CASE WHEN a > 1 THEN 'big' ELSE 'small' END FROM t",
    "SELECT 'a' 'b'",
    "SELECT 'a'\n'b', 5",
    "SELECT x::numeric(10, 2) FROM t WHERE y = 1",
    "SELECT * FROM t WHERE a LIKE 'abc%' AND b = 7",
    "SAVEPOINT s1",
    "ROLLBACK TO SAVEPOINT s1",
    "SELECT * FROM t1 JOIN t2 ON t1.id = t2.id WHERE t1.k = 5 AND t2.k IN (SELECT k FROM t3 WHERE z = 'q')",
];

/// SQL strings of the other analysis tests (string literals that start with a keyword).
fn test_corpus() -> Vec<String> {
    let sources = [
        include_str!("kinds.rs"),
        include_str!("effects.rs"),
        include_str!("predicates.rs"),
        include_str!("tables.rs"),
        include_str!("guards.rs"),
    ];
    let mut out = Vec::new();
    for src in sources {
        let mut rest = src;
        while let Some(start) = rest.find('"') {
            let body = &rest[start + 1..];
            let mut text = String::new();
            let mut chars = body.char_indices();
            let mut end = body.len();
            while let Some((i, c)) = chars.next() {
                match c {
                    '\\' => match chars.next() {
                        Some((_, 'n')) => text.push('\n'),
                        Some((_, 't')) => text.push('\t'),
                        Some((_, other)) => text.push(other),
                        None => {}
                    },
                    '"' => {
                        end = i;
                        break;
                    }
                    c => text.push(c),
                }
            }
            rest = body.get(end + 1..).unwrap_or("");
            let first = text.split_whitespace().next().unwrap_or("").to_ascii_uppercase();
            let keywords =
                ["SELECT", "INSERT", "UPDATE", "DELETE", "WITH", "SET", "BEGIN", "VALUES", "MERGE"];
            if keywords.contains(&first.as_str()) || text.starts_with("/*") {
                out.push(text);
            }
        }
    }
    out
}

#[test]
fn sharing_a_shape_never_changes_a_decision() {
    let analyzer = cached();
    let mut scratch = String::new();
    let mut corpus: Vec<String> = CORPUS.iter().map(|s| s.to_string()).collect();
    corpus.extend(test_corpus());
    assert!(corpus.len() > 150, "corpus of {}", corpus.len());
    let mut shared = 0;
    for sql in &corpus {
        // Twice: the second look finds the shape in the cache.
        for _ in 0..2 {
            let got = analyzer.analyze_query(sql, &mut scratch);
            let alone = analyzer.analyze_uncached(sql, &[]);
            assert_eq!(summary(&got), summary(&alone), "{sql}");
            let (got_values, own) = (values(&got), values(&alone));
            assert_eq!(got_values.len(), own.len(), "{sql}");
            let spans = constants(sql);
            for (g, o) in got_values.iter().zip(&own) {
                if g == o {
                    continue;
                }
                // A constant became a parameter: `$k` is the k-th constant of the text.
                let number: usize = g
                    .strip_prefix("Param { number: ")
                    .and_then(|r| r.split(',').next())
                    .and_then(|n| n.parse().ok())
                    .unwrap_or_else(|| panic!("{sql}: shared value {g} vs own {o}"));
                let literal = &sql[spans[number - 1].clone()];
                let numeric = literal.starts_with(|c: char| c.is_ascii_digit() || c == '-' || c == '.');
                let same = if numeric {
                    o.contains(&literal.replace('_', "")) || o.starts_with("Integer") && literal.contains('_')
                } else {
                    o.starts_with("String(")
                };
                assert!(same, "{sql}: ${number} is {literal}, own value {o}");
            }
        }
        if !Arc::ptr_eq(&analyzer.analyze_query(sql, &mut scratch), &analyzer.analyze(sql, &[])) {
            shared += 1;
        }
    }
    assert!(shared > 20, "only {shared} shared");
}

#[test]
fn texts_differing_in_constants_share_one_analysis() {
    let analyzer = cached();
    let mut scratch = String::new();
    // Seen twice before the cache admits it.
    analyzer.analyze_query("SELECT abalance FROM pgbench_accounts WHERE aid = 0;", &mut scratch);
    let first = analyzer.analyze_query("SELECT abalance FROM pgbench_accounts WHERE aid = 1;", &mut scratch);
    let parsed = analyzer.stats().analyzed;
    for aid in 2..200 {
        let sql = format!("SELECT abalance FROM pgbench_accounts WHERE aid = {aid};");
        let a = analyzer.analyze_query(&sql, &mut scratch);
        assert!(Arc::ptr_eq(&first, &a), "{sql}");
        let key = a.statement(0).and_then(|s| s.predicates().next()).expect("aid = $1");
        assert_eq!(key.values().next(), Some(Value::Param { number: 1, type_oid: 0 }));
    }
    let stats = analyzer.stats();
    assert_eq!(stats.analyzed, parsed, "no more parses after the first");
    assert_eq!(
        stats.shape_hits, 200,
        "every text but the first two was a hit, and those two used the shape too"
    );
    // A shape with session effects is not shared: each text keeps its own values.
    let a = analyzer.analyze_query("SELECT set_config('application_name', 'a', false)", &mut scratch);
    let b = analyzer.analyze_query("SELECT set_config('application_name', 'b', false)", &mut scratch);
    assert!(!Arc::ptr_eq(&a, &b));
    assert_ne!(format!("{:?}", a.session_effects().next()), format!("{:?}", b.session_effects().next()));
}
