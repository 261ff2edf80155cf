//! The tables a statement reads and writes.

mod common;

use common::{analyze, tables};
use route::Access;

#[test]
fn names_are_folded_quoted_and_qualified_as_written() {
    assert_eq!(tables("SELECT * FROM Users"), ["users:Read"]);
    assert_eq!(tables("SELECT * FROM \"Users\""), ["Users:Read"]);
    assert_eq!(tables("SELECT * FROM public.users"), ["public.users:Read"]);
    assert_eq!(tables("SELECT * FROM \"My Schema\".\"T\""), ["My Schema.T:Read"]);
    assert_eq!(tables("SELECT * FROM db.public.users"), ["public.users:Read"]);
    // Two spellings, two entries: whether they are the same table depends on search_path.
    assert_eq!(tables("SELECT * FROM users, public.users"), ["users:Read", "public.users:Read"]);
}

#[test]
fn each_table_once_sorted_with_merged_access() {
    assert_eq!(tables("SELECT * FROM b, a, b x JOIN a y ON true"), ["a:Read", "b:Read"]);
    assert_eq!(tables("UPDATE t SET a = s.a FROM s, t t2 WHERE t.id = s.id"), ["s:Read", "t:ReadWrite"]);
    assert_eq!(tables("INSERT INTO t SELECT * FROM t"), ["t:ReadWrite"]);
    assert_eq!(tables("DELETE FROM t USING u WHERE t.id = u.id"), ["t:Write", "u:Read"]);
    let a = analyze("UPDATE t SET a = 1");
    let t = a.statement(0).unwrap().tables().next().unwrap();
    assert_eq!((t.schema, t.name, t.access), (None, "t", Access::Write));
    assert!(Access::ReadWrite.writes() && Access::Write.writes() && !Access::Read.writes());
}

#[test]
fn subqueries_joins_and_lateral() {
    assert_eq!(
        tables(
            "SELECT * FROM a JOIN b ON a.id = b.id LEFT JOIN LATERAL (SELECT * FROM c WHERE c.x = a.x) s ON true \
             WHERE EXISTS (SELECT 1 FROM d) AND a.y IN (SELECT y FROM e) AND a.z = ANY (SELECT z FROM f)"
        ),
        ["a:Read", "b:Read", "c:Read", "d:Read", "e:Read", "f:Read"]
    );
    assert_eq!(
        tables("SELECT (SELECT max(x) FROM m), ARRAY(SELECT y FROM n) FROM o ORDER BY (SELECT 1 FROM p)"),
        ["m:Read", "n:Read", "o:Read", "p:Read"]
    );
    assert_eq!(tables("SELECT * FROM generate_series(1, (SELECT count(*) FROM g))"), ["g:Read"]);
    assert_eq!(tables("SELECT * FROM t TABLESAMPLE SYSTEM (10)"), ["t:Read"]);
    assert_eq!(
        tables("SELECT a FROM x UNION SELECT b FROM y EXCEPT SELECT c FROM z"),
        ["x:Read", "y:Read", "z:Read"]
    );
    assert_eq!(
        tables(
            "INSERT INTO t VALUES ((SELECT 1 FROM v)) ON CONFLICT (id) DO UPDATE SET a = (SELECT 2 FROM w)"
        ),
        ["t:Write", "v:Read", "w:Read"]
    );
    assert_eq!(
        tables("UPDATE t SET (a, b) = (SELECT a, b FROM s) RETURNING (SELECT 1 FROM r)"),
        ["r:Read", "s:Read", "t:Write"]
    );
    assert_eq!(
        tables("SELECT json_arrayagg(x) FILTER (WHERE x IN (SELECT x FROM j)) FROM k"),
        ["j:Read", "k:Read"]
    );
}

#[test]
fn ctes_are_not_tables_but_their_contents_are() {
    assert_eq!(tables("WITH x AS (SELECT * FROM t) SELECT * FROM x"), ["t:Read"]);
    assert_eq!(tables("WITH x AS (SELECT 1), y AS (SELECT * FROM x) SELECT * FROM y"), Vec::<String>::new());
    // A schema-qualified name is never a CTE.
    assert_eq!(tables("WITH x AS (SELECT 1) SELECT * FROM public.x"), ["public.x:Read"]);
    // Without RECURSIVE a CTE does not see itself: the inner `x` is a table.
    assert_eq!(tables("WITH x AS (SELECT * FROM x) SELECT * FROM x"), ["x:Read"]);
    assert_eq!(
        tables(
            "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 10) SELECT * FROM r"
        ),
        Vec::<String>::new()
    );
    // Scope ends with the query that declared it.
    assert_eq!(tables("SELECT * FROM (WITH x AS (SELECT 1) SELECT * FROM x) s, x"), ["x:Read"]);
    // Many CTEs (the scope gets a hash index past a few dozen) scope the same way.
    let many: Vec<String> = (0..40).map(|i| format!("c{i} AS (SELECT {i})")).collect();
    let sql = format!("SELECT * FROM (WITH {} SELECT * FROM c0, c39) s, c39, c0", many.join(", "));
    assert_eq!(tables(&sql), ["c0:Read", "c39:Read"]);
    let sql = format!("WITH RECURSIVE {} SELECT * FROM c7, t", many.join(", "));
    assert_eq!(tables(&sql), ["t:Read"]);
    // Data-modifying CTEs write their tables.
    assert_eq!(
        tables("WITH moved AS (DELETE FROM queue RETURNING *) INSERT INTO done SELECT * FROM moved"),
        ["done:Write", "queue:Write"]
    );
    assert_eq!(tables("WITH x AS (SELECT 1) UPDATE t SET a = 1 FROM x"), ["t:Write"]);
}

#[test]
fn dml_targets() {
    assert_eq!(tables("INSERT INTO app.t (a) VALUES (1)"), ["app.t:Write"]);
    assert_eq!(
        tables("MERGE INTO t USING s ON t.id = s.id WHEN MATCHED AND t.v > (SELECT 1 FROM c) THEN UPDATE SET v = 1"),
        ["c:Read", "s:Read", "t:Write"]
    );
    assert_eq!(tables("COPY t FROM STDIN"), ["t:Write"]);
    assert_eq!(tables("COPY t TO STDOUT"), ["t:Read"]);
    assert_eq!(tables("COPY (SELECT * FROM t JOIN u USING (id)) TO STDOUT"), ["t:Read", "u:Read"]);
    assert_eq!(tables("SELECT * INTO new_t FROM old_t"), ["new_t:Write", "old_t:Read"]);
}

#[test]
fn utility_statements() {
    assert_eq!(tables("LOCK TABLE a, b.c IN SHARE MODE"), ["a:Write", "b.c:Write"]);
    assert_eq!(tables("TRUNCATE a, b"), ["a:Write", "b:Write"]);
    assert_eq!(tables("VACUUM ANALYZE a, b (x)"), ["a:Write", "b:Write"]);
    assert_eq!(tables("DROP TABLE a, s.b"), ["a:Write", "s.b:Write"]);
    assert_eq!(tables("DROP TRIGGER trg ON s.t"), ["s.t:Write"]);
    assert_eq!(tables("DROP VIEW v"), Vec::<String>::new());
    assert_eq!(tables("ALTER TABLE t ADD COLUMN c int"), ["t:Write"]);
    assert_eq!(tables("CREATE INDEX ON t (a) WHERE b > 0"), ["t:Write"]);
    assert_eq!(tables("CREATE TABLE t (id int REFERENCES u)"), ["t:Write"]);
    assert_eq!(tables("CREATE TABLE t2 AS SELECT * FROM t1"), ["t1:Read", "t2:Write"]);
    assert_eq!(tables("CREATE VIEW v AS SELECT * FROM t"), ["t:Read", "v:Write"]);
    assert_eq!(tables("GRANT SELECT ON a, b TO bob"), ["a:Write", "b:Write"]);
    assert_eq!(tables("GRANT SELECT ON ALL TABLES IN SCHEMA s TO bob"), Vec::<String>::new());
    assert_eq!(tables("GRANT USAGE ON SCHEMA s TO bob"), Vec::<String>::new());
    assert_eq!(tables("EXPLAIN SELECT * FROM t"), ["t:Read"]);
    assert_eq!(tables("EXPLAIN UPDATE t SET a = 1"), ["t:Write"]);
    assert_eq!(tables("PREPARE q AS SELECT * FROM t"), ["t:Read"]);
    assert_eq!(tables("DECLARE c CURSOR FOR SELECT * FROM t"), ["t:Read"]);
    assert_eq!(tables("SET search_path = x"), Vec::<String>::new());
}

#[test]
fn tables_are_per_statement() {
    let a = analyze("SELECT * FROM a; UPDATE b SET x = 1; SELECT * FROM a");
    let per: Vec<Vec<String>> = a.statements().map(|s| s.tables().map(|t| t.to_string()).collect()).collect();
    assert_eq!(per, [vec!["a".to_owned()], vec!["b".to_owned()], vec!["a".to_owned()]]);
}
