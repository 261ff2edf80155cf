//! Random token soup and mutated real queries: analysis never panics, never reports an
//! internal failure, and anything it could not read is conservative.

use proptest::prelude::*;
use route::{Analyzer, AnalyzerOptions, Outcome};

const TOKENS: &[&str] = &[
    "SELECT",
    "INSERT",
    "INTO",
    "UPDATE",
    "DELETE",
    "FROM",
    "WHERE",
    "AND",
    "OR",
    "NOT",
    "IN",
    "ANY",
    "VALUES",
    "SET",
    "LOCAL",
    "SESSION",
    "RESET",
    "ALL",
    "BEGIN",
    "COMMIT",
    "ROLLBACK",
    "WITH",
    "AS",
    "RECURSIVE",
    "UNION",
    "JOIN",
    "ON",
    "USING",
    "FOR",
    "UPDATE",
    "SHARE",
    "RETURNING",
    "EXPLAIN",
    "ANALYZE",
    "PREPARE",
    "EXECUTE",
    "DECLARE",
    "CURSOR",
    "HOLD",
    "LISTEN",
    "NOTIFY",
    "COPY",
    "TO",
    "STDIN",
    "CREATE",
    "TEMP",
    "TABLE",
    "DROP",
    "GRANT",
    "LOCK",
    "CALL",
    "DO",
    "MERGE",
    "WHEN",
    "MATCHED",
    "THEN",
    "CASE",
    "END",
    "ARRAY",
    "ROW",
    "LATERAL",
    "t",
    "u",
    "\"Q\"",
    "s.t",
    "id",
    "*",
    "(",
    ")",
    ",",
    ";",
    "=",
    "+",
    "||",
    "::",
    "int8",
    "[",
    "]",
    "$1",
    "$2",
    "1",
    "-2",
    "1.5",
    "'x'",
    "E'\\''",
    "$$ $$",
    "NULL",
    "true",
    "nextval('s')",
    "set_config('a','b',false)",
    "pg_advisory_lock(1)",
    "/* pgvia: role=primary */",
    "-- c\n",
];

fn analyzer() -> Analyzer {
    Analyzer::new(AnalyzerOptions { cache_entries: 0, max_values: 8, ..Default::default() }).expect("options")
}

fn check(a: &Analyzer, sql: &str) {
    let analysis = a.analyze(sql, &[23, 20]);
    assert_ne!(analysis.outcome(), Outcome::Failed, "{sql}");
    if analysis.is_conservative() {
        assert!(analysis.writes() && analysis.is_empty(), "{sql}");
    }
    for s in analysis.statements() {
        // Every view must be readable.
        let _ = (s.kind(), s.tag(), s.name(), s.value(), s.location(), s.target());
        assert!(s.location().end <= sql.len());
        let _ = s.tables().count() + s.session_effects().count();
        for p in s.predicates() {
            let _ = (p.table(), p.column(), p.values().count());
        }
        if let Some(i) = s.insert_values() {
            for r in 0..i.rows() {
                assert_eq!(i.row(r).count(), i.width());
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2_000, ..ProptestConfig::default() })]

    #[test]
    fn token_soup(tokens in proptest::collection::vec(proptest::sample::select(TOKENS), 0..40)) {
        check(&analyzer(), &tokens.join(" "));
    }

    #[test]
    fn mutated_queries(cut in 0usize..400, insert in proptest::sample::select(TOKENS), base in 0usize..6) {
        let bases = [
            "WITH x AS (DELETE FROM q RETURNING *) SELECT * FROM x JOIN t ON t.id = x.id WHERE t.k IN (1, $1) FOR UPDATE",
            "INSERT INTO t (a, b) VALUES (1, 'x'), ($1, DEFAULT) ON CONFLICT (a) DO UPDATE SET b = excluded.b RETURNING *",
            "EXPLAIN ANALYZE UPDATE s.t SET a = (SELECT max(a) FROM u) WHERE id = ANY($1::int8[])",
            "BEGIN ISOLATION LEVEL SERIALIZABLE; SET LOCAL x = 1; SELECT set_config('a', 'b', false); COMMIT",
            "DECLARE c CURSOR WITH HOLD FOR SELECT * FROM t WHERE id = 1; FETCH 10 FROM c; CLOSE c",
            "MERGE INTO t USING s ON t.id = s.id WHEN MATCHED AND t.v > 0 THEN UPDATE SET v = s.v WHEN NOT MATCHED THEN INSERT VALUES (s.id)",
        ];
        let base = bases[base];
        let cut = cut.min(base.len());
        let cut = (0..=cut).rev().find(|&i| base.is_char_boundary(i)).unwrap_or(0);
        let sql = format!("{} {insert} {}", &base[..cut], &base[cut..]);
        check(&analyzer(), &sql);
    }
}
