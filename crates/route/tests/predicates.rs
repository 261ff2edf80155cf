//! Equality predicates and INSERT values: the raw material for shard routing.

mod common;

use common::{analyze, analyzer, stmt};
use route::{Analyzer, AnalyzerOptions, PredicateOp as Op, Value as V};

/// `(table, column, op, values)` of every predicate of the only statement.
fn preds(sql: &str) -> Vec<(Option<String>, String, Op, Vec<String>)> {
    preds_with(analyzer(), sql, &[])
}

fn preds_with(a: &Analyzer, sql: &str, oids: &[u32]) -> Vec<(Option<String>, String, Op, Vec<String>)> {
    let analysis = a.analyze(sql, oids);
    let s = analysis.statement(0).expect("a statement");
    s.predicates()
        .map(|p| {
            let table = p.table().map(|(schema, t)| schema.map_or(t.to_owned(), |s| format!("{s}.{t}")));
            (table, p.column().to_owned(), p.op(), p.values().map(|v| format!("{v:?}")).collect())
        })
        .collect()
}

fn p(table: Option<&str>, col: &str, op: Op, values: &[V<'_>]) -> (Option<String>, String, Op, Vec<String>) {
    (table.map(str::to_owned), col.to_owned(), op, values.iter().map(|v| format!("{v:?}")).collect())
}

const PARAM1: V<'static> = V::Param { number: 1, type_oid: 0 };

#[test]
fn constants_and_parameters() {
    assert_eq!(preds("SELECT * FROM t WHERE id = 42"), [p(Some("t"), "id", Op::Equals, &[V::Integer(42)])]);
    assert_eq!(preds("SELECT * FROM t WHERE 42 = id"), [p(Some("t"), "id", Op::Equals, &[V::Integer(42)])]);
    assert_eq!(preds("SELECT * FROM t WHERE id = -7"), [p(Some("t"), "id", Op::Equals, &[V::Integer(-7)])]);
    assert_eq!(
        preds("SELECT * FROM t WHERE id = 9223372036854775807"),
        [p(Some("t"), "id", Op::Equals, &[V::Integer(i64::MAX)])]
    );
    assert_eq!(
        preds("SELECT * FROM t WHERE id = 99999999999999999999"),
        [p(Some("t"), "id", Op::Equals, &[V::Numeric("99999999999999999999")])]
    );
    assert_eq!(preds("SELECT * FROM t WHERE x = 1.5"), [p(Some("t"), "x", Op::Equals, &[V::Numeric("1.5")])]);
    assert_eq!(
        preds("SELECT * FROM t WHERE name = 'it''s'"),
        [p(Some("t"), "name", Op::Equals, &[V::String("it's")])]
    );
    assert_eq!(preds("SELECT * FROM t WHERE b = true"), [p(Some("t"), "b", Op::Equals, &[V::Boolean(true)])]);
    assert_eq!(preds("SELECT * FROM t WHERE id = $1"), [p(Some("t"), "id", Op::Equals, &[PARAM1])]);
    assert_eq!(
        preds("SELECT * FROM t WHERE id = '42'::bigint"),
        [p(Some("t"), "id", Op::Equals, &[V::String("42")])]
    );
}

#[test]
fn parameter_types_from_parse_or_casts() {
    let a = analyzer();
    assert_eq!(
        preds_with(a, "SELECT * FROM t WHERE id = $1", &[20]),
        [p(Some("t"), "id", Op::Equals, &[V::Param { number: 1, type_oid: 20 }])]
    );
    assert_eq!(
        preds_with(a, "SELECT * FROM t WHERE id = $1::int4", &[0]),
        [p(Some("t"), "id", Op::Equals, &[V::Param { number: 1, type_oid: 23 }])]
    );
    assert_eq!(
        preds_with(a, "SELECT * FROM t WHERE id = $1::bigint", &[25]),
        [p(Some("t"), "id", Op::Equals, &[V::Param { number: 1, type_oid: 25 }])]
    );
    assert_eq!(
        preds_with(a, "SELECT * FROM t WHERE id = ANY($2::uuid[])", &[]),
        [p(Some("t"), "id", Op::AnyArray, &[V::Param { number: 2, type_oid: 2951 }])]
    );
    assert_eq!(
        preds_with(a, "SELECT * FROM t WHERE id = $3", &[20]),
        [p(Some("t"), "id", Op::Equals, &[V::Param { number: 3, type_oid: 0 }])]
    );
}

#[test]
fn in_lists_and_any() {
    assert_eq!(
        preds("SELECT * FROM t WHERE id IN (1, 2, $1)"),
        [p(Some("t"), "id", Op::In, &[V::Integer(1), V::Integer(2), PARAM1])]
    );
    assert_eq!(
        preds("SELECT * FROM t WHERE id = ANY(ARRAY[1, 2])"),
        [p(Some("t"), "id", Op::In, &[V::Integer(1), V::Integer(2)])]
    );
    assert_eq!(preds("SELECT * FROM t WHERE id = ANY($1)"), [p(Some("t"), "id", Op::AnyArray, &[PARAM1])]);
    assert_eq!(
        preds("SELECT * FROM t WHERE id = ANY('{1,2}')"),
        [p(Some("t"), "id", Op::AnyArray, &[V::String("{1,2}")])]
    );
    // Not equality, or not all literals: nothing to route on.
    assert!(preds("SELECT * FROM t WHERE id NOT IN (1, 2)").is_empty());
    assert!(preds("SELECT * FROM t WHERE id IN (1, now())").is_empty());
    assert!(preds("SELECT * FROM t WHERE id IN (SELECT id FROM u)").is_empty());
    assert!(preds("SELECT * FROM t WHERE id <> 1 AND id > 2 AND id = id2").is_empty());
    assert!(preds("SELECT * FROM t WHERE id = 1 OR id = 2").is_empty());
}

#[test]
fn conjunctions_at_any_depth() {
    assert_eq!(
        preds("SELECT * FROM t WHERE a = 1 AND (b = 2 AND (c = 3 OR d = 4)) AND e IN (5)"),
        [
            p(Some("t"), "a", Op::Equals, &[V::Integer(1)]),
            p(Some("t"), "b", Op::Equals, &[V::Integer(2)]),
            p(Some("t"), "e", Op::In, &[V::Integer(5)]),
        ]
    );
}

#[test]
fn columns_resolve_to_tables() {
    assert_eq!(
        preds("SELECT * FROM users u JOIN orders o ON o.user_id = u.id WHERE u.id = 1 AND o.id = 2 AND status = 'x'"),
        [
            p(Some("users"), "id", Op::Equals, &[V::Integer(1)]),
            p(Some("orders"), "id", Op::Equals, &[V::Integer(2)]),
            p(None, "status", Op::Equals, &[V::String("x")]),
        ]
    );
    assert_eq!(
        preds("SELECT * FROM app.users WHERE app.users.id = 1 AND users.id = 2"),
        [
            p(Some("app.users"), "id", Op::Equals, &[V::Integer(1)]),
            p(Some("app.users"), "id", Op::Equals, &[V::Integer(2)]),
        ]
    );
    // An alias hides the table name; a subquery or CTE is not a table.
    assert_eq!(
        preds("SELECT * FROM users u WHERE users.id = 1"),
        [p(None, "id", Op::Equals, &[V::Integer(1)])]
    );
    assert_eq!(
        preds("SELECT * FROM (SELECT * FROM users) s WHERE s.id = 1"),
        [p(None, "id", Op::Equals, &[V::Integer(1)])]
    );
    assert_eq!(
        preds("WITH c AS (SELECT 1 AS id) SELECT * FROM c WHERE id = 1"),
        [p(None, "id", Op::Equals, &[V::Integer(1)])]
    );
    assert_eq!(
        preds("SELECT * FROM \"Users\" WHERE \"Id\" = 1"),
        [p(Some("Users"), "Id", Op::Equals, &[V::Integer(1)])]
    );
}

#[test]
fn update_and_delete() {
    assert_eq!(
        preds("UPDATE accounts SET balance = balance - 1 WHERE id = $1"),
        [p(Some("accounts"), "id", Op::Equals, &[PARAM1])]
    );
    assert_eq!(
        preds("UPDATE accounts a SET x = 1 FROM branches b WHERE a.id = 5 AND b.id = 6"),
        [
            p(Some("accounts"), "id", Op::Equals, &[V::Integer(5)]),
            p(Some("branches"), "id", Op::Equals, &[V::Integer(6)]),
        ]
    );
    assert_eq!(
        preds("DELETE FROM t WHERE k IN ('a', 'b')"),
        [p(Some("t"), "k", Op::In, &[V::String("a"), V::String("b")])]
    );
}

#[test]
fn only_the_statements_own_where() {
    assert!(preds("SELECT * FROM t WHERE id IN (SELECT id FROM u WHERE k = 1)").is_empty());
    assert!(preds("SELECT * FROM (SELECT * FROM t WHERE id = 1) s").is_empty());
    assert!(preds("SELECT 1 UNION SELECT 2 FROM t WHERE id = 1").is_empty());
    assert_eq!(
        preds("WITH x AS (SELECT * FROM u WHERE k = 1) SELECT * FROM t WHERE id = 2"),
        [p(Some("t"), "id", Op::Equals, &[V::Integer(2)])]
    );
    assert!(preds("INSERT INTO t SELECT * FROM u WHERE id = 1").is_empty());
    // The statement inside PREPARE, EXPLAIN and DECLARE is the one that runs.
    assert_eq!(
        preds("PREPARE q AS SELECT * FROM t WHERE id = $1"),
        [p(Some("t"), "id", Op::Equals, &[PARAM1])]
    );
    assert_eq!(
        preds("EXPLAIN SELECT * FROM t WHERE id = 3"),
        [p(Some("t"), "id", Op::Equals, &[V::Integer(3)])]
    );
}

#[test]
fn insert_values_by_column() {
    stmt("INSERT INTO t (id, name, at) VALUES (1, 'a', now()), ($1, DEFAULT, $2)", |s| {
        let iv = s.insert_values().expect("values");
        assert_eq!(iv.columns().collect::<Vec<_>>(), ["id", "name", "at"]);
        assert_eq!((iv.width(), iv.rows()), (3, 2));
        assert_eq!(iv.row(0).collect::<Vec<_>>(), [V::Integer(1), V::String("a"), V::Expression]);
        assert_eq!(iv.row(1).collect::<Vec<_>>(), [PARAM1, V::Default, V::Param { number: 2, type_oid: 0 }]);
        assert_eq!(iv.column(0).collect::<Vec<_>>(), [V::Integer(1), PARAM1]);
        assert_eq!(iv.column(3).count(), 0);
        assert!(!s.values_truncated());
    });
    stmt("INSERT INTO t VALUES (7, 'x')", |s| {
        let iv = s.insert_values().expect("values");
        assert_eq!(iv.columns().count(), 0);
        assert_eq!(iv.row(0).collect::<Vec<_>>(), [V::Integer(7), V::String("x")]);
    });
    stmt("INSERT INTO t (a) VALUES (1) ON CONFLICT (a) DO UPDATE SET a = 2 RETURNING *", |s| {
        assert_eq!(s.insert_values().expect("values").rows(), 1);
    });
    for sql in ["INSERT INTO t SELECT 1", "INSERT INTO t DEFAULT VALUES", "UPDATE t SET a = 1"] {
        stmt(sql, |s| assert!(s.insert_values().is_none(), "{sql}"));
    }
}

#[test]
fn too_many_values_mark_the_statement_truncated() {
    let a =
        Analyzer::new(AnalyzerOptions { cache_entries: 0, max_values: 10, ..Default::default() }).unwrap();
    let list = (1..=20).map(|i| i.to_string()).collect::<Vec<_>>().join(", ");
    let analysis = a.analyze(&format!("SELECT * FROM t WHERE a = 1 AND id IN ({list})"), &[]);
    let s = analysis.statement(0).unwrap();
    assert!(s.values_truncated());
    assert_eq!(s.predicates().count(), 1, "the short predicate is kept, the long one dropped");

    let rows = (1..=20).map(|i| format!("({i}, 'x')")).collect::<Vec<_>>().join(", ");
    let analysis = a.analyze(&format!("INSERT INTO t (id, name) VALUES {rows}"), &[]);
    let s = analysis.statement(0).unwrap();
    assert!(s.values_truncated());
    assert_eq!(s.insert_values().unwrap().rows(), 5, "whole rows only, up to the limit");

    assert!(!analyze("SELECT * FROM t WHERE id IN (1, 2)").statement(0).unwrap().values_truncated());
}
