//! The `WHERE` clause as a condition tree: every predicate form shard routing reads, how
//! `AND`/`OR` nest, and what stays unknown.

mod common;

use common::analyze;
use route::{Condition, PredicateOp as Op, Value};

/// A compact rendering: `and(t.id=1, or(t.id<5, ?))`; `$1` for parameters.
fn render(c: Condition<'_>) -> String {
    match c {
        Condition::And(ch) => format!("and({})", ch.map(render).collect::<Vec<_>>().join(", ")),
        Condition::Or(ch) => format!("or({})", ch.map(render).collect::<Vec<_>>().join(", ")),
        Condition::Unknown => "?".into(),
        Condition::Predicate(p) => {
            let table =
                p.table().map_or("?".to_owned(), |(s, t)| s.map_or(t.to_owned(), |s| format!("{s}.{t}")));
            let op = match p.op() {
                Op::Equals => "=",
                Op::In => " in ",
                Op::AnyArray => "=any",
                Op::Less => "<",
                Op::LessEq => "<=",
                Op::Greater => ">",
                Op::GreaterEq => ">=",
            };
            let values: Vec<String> = p
                .values()
                .map(|v| match v {
                    Value::Integer(i) => i.to_string(),
                    Value::String(s) => format!("'{s}'"),
                    Value::Param { number, .. } => format!("${number}"),
                    Value::Null => "null".into(),
                    other => format!("{other:?}"),
                })
                .collect();
            let values = if p.op() == Op::In { format!("({})", values.join(",")) } else { values.join(",") };
            format!("{table}.{}{op}{values}", p.column())
        }
    }
}

fn cond(sql: &str) -> String {
    let a = analyze(sql);
    let s = a.statement(0).expect("a statement");
    s.condition().map_or("none".into(), render)
}

#[test]
fn every_predicate_form() {
    let cases = [
        ("SELECT * FROM t WHERE id = 1", "t.id=1"),
        ("SELECT * FROM t WHERE 1 = id", "t.id=1"),
        ("SELECT * FROM t WHERE id = $1", "t.id=$1"),
        ("SELECT * FROM t WHERE id IN (1, 2, $3)", "t.id in (1,2,$3)"),
        ("SELECT * FROM t WHERE id = ANY($1)", "t.id=any$1"),
        ("SELECT * FROM t WHERE id = ANY(ARRAY[1, 2])", "t.id in (1,2)"),
        ("SELECT * FROM t WHERE id < 10", "t.id<10"),
        ("SELECT * FROM t WHERE id <= 10", "t.id<=10"),
        ("SELECT * FROM t WHERE id > 10", "t.id>10"),
        ("SELECT * FROM t WHERE id >= $2", "t.id>=$2"),
        ("SELECT * FROM t WHERE 10 < id", "t.id>10"),
        ("SELECT * FROM t WHERE 10 >= id", "t.id<=10"),
        ("SELECT * FROM t WHERE id BETWEEN 3 AND 7", "and(t.id>=3, t.id<=7)"),
        ("SELECT * FROM t WHERE id = '42'::bigint", "t.id='42'"),
        ("SELECT * FROM t WHERE id = pg_catalog.int8(5)", "?"),
        ("SELECT * FROM t WHERE id <> 5", "?"),
        ("SELECT * FROM t WHERE id NOT IN (1, 2)", "?"),
        ("SELECT * FROM t WHERE id NOT BETWEEN 1 AND 2", "?"),
        ("SELECT * FROM t WHERE id BETWEEN SYMMETRIC 1 AND 2", "?"),
        ("SELECT * FROM t WHERE id < ANY($1)", "?"),
        ("SELECT * FROM t WHERE NOT id = 1", "?"),
        ("SELECT * FROM t WHERE id IS NULL", "?"),
        // Two columns: neither is a value, so it reads nothing.
        ("SELECT * FROM t WHERE id = other", "?"),
        ("SELECT * FROM t", "none"),
    ];
    for (sql, want) in cases {
        assert_eq!(cond(sql), want, "{sql}");
    }
}

#[test]
fn and_or_nest_as_written() {
    assert_eq!(cond("SELECT * FROM t WHERE id = 1 AND x > 2"), "and(t.id=1, t.x>2)");
    assert_eq!(cond("SELECT * FROM t WHERE id = 1 OR id = 2"), "or(t.id=1, t.id=2)");
    assert_eq!(
        cond("SELECT * FROM t WHERE (id = 1 OR id IN (2, 3)) AND (x < 5 OR f(x))"),
        "and(or(t.id=1, t.id in (2,3)), or(t.x<5, ?))"
    );
    assert_eq!(
        cond("SELECT * FROM t WHERE id = 1 OR (id BETWEEN 5 AND 9 AND y = 'a')"),
        "or(t.id=1, and(and(t.id>=5, t.id<=9), t.y='a'))"
    );
    // The flat predicate list keeps only equalities reached through AND alone.
    let a = analyze("SELECT * FROM t WHERE a = 1 AND (b = 2 OR c = 3) AND d > 4");
    let flat: Vec<&str> = a.statement(0).expect("stmt").predicates().map(|p| p.column()).collect();
    assert_eq!(flat, ["a"]);
}

#[test]
fn tables_resolve_through_aliases_and_joins() {
    assert_eq!(cond("SELECT * FROM s.t x WHERE x.id = 1"), "s.t.id=1");
    assert_eq!(cond("SELECT * FROM a JOIN b ON a.k = b.k WHERE b.id > 3 AND id = 1"), "and(b.id>3, ?.id=1)");
    assert_eq!(cond("UPDATE t SET v = 1 WHERE id = $1 RETURNING *"), "t.id=$1");
    assert_eq!(cond("DELETE FROM t USING u WHERE t.id = u.id AND t.id IN (4, 5)"), "and(?, t.id in (4,5))");
}

#[test]
fn update_columns_and_upserts() {
    let a = analyze("UPDATE t SET id = id + 1, v = 'x' WHERE id = 3");
    let s = a.statement(0).expect("stmt");
    assert_eq!(s.updated_columns().collect::<Vec<_>>(), ["id", "v"]);
    let a = analyze("INSERT INTO t (id, v) VALUES (1, 'a') ON CONFLICT (id) DO UPDATE SET v = excluded.v");
    let s = a.statement(0).expect("stmt");
    assert!(s.on_conflict());
    assert_eq!(s.insert_values().expect("values").rows(), 1);
    let a = analyze("INSERT INTO t (id) VALUES (1)");
    assert!(!a.statement(0).expect("stmt").on_conflict());
}

#[test]
fn huge_trees_stay_bounded() {
    // 70,000 ORs (over the default max_values of 65,536): the tree is cut at max_values nodes, the rest says nothing (so routes
    // everywhere) and the statement is marked truncated.
    let sql = format!(
        "SELECT * FROM t WHERE {}",
        (0..70_000).map(|i| format!("id = {i}")).collect::<Vec<_>>().join(" OR ")
    );
    let a = common::analyzer().analyze(&sql, &[]);
    if let Some(s) = a.statement(0) {
        assert!(s.values_truncated());
        match s.condition() {
            Some(Condition::Or(children)) => assert!(children.len() < 70_000),
            other => panic!("expected an OR, got {other:?}"),
        }
    }
}
