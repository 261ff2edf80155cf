//! Statement kinds, their names and options, and whether each must run on the primary.

mod common;

use common::{analyze, kind, stmt, writes};
use route::{
    CopyDirection, DiscardTarget, IsolationLevel, RowLock, SetScope, StatementKind as K, TransactionOptions,
};

#[test]
fn select_variants_read() {
    for sql in [
        "SELECT 1",
        "select * from t where id = 1",
        "VALUES (1), (2)",
        "TABLE t",
        "SELECT a FROM t UNION ALL SELECT b FROM u",
        "/* leading comment */ SELECT 1 -- trailing",
        "WITH x AS (SELECT 1) SELECT * FROM x",
        "SELECT \"Weird Col\" FROM \"Weird Table\"",
        "SELECT count(*) FILTER (WHERE x > 1) OVER (PARTITION BY y) FROM t",
    ] {
        assert_eq!(kind(sql), K::Select { locking: None }, "{sql}");
        assert!(!writes(sql), "{sql}");
    }
}

#[test]
fn row_locks_write() {
    let cases = [
        ("SELECT * FROM t FOR UPDATE", RowLock::Update),
        ("SELECT * FROM t FOR NO KEY UPDATE SKIP LOCKED", RowLock::NoKeyUpdate),
        ("SELECT * FROM t FOR SHARE NOWAIT", RowLock::Share),
        ("SELECT * FROM t FOR KEY SHARE", RowLock::KeyShare),
        ("SELECT * FROM t FOR KEY SHARE OF t FOR UPDATE OF t", RowLock::Update),
        ("SELECT * FROM (SELECT * FROM t FOR SHARE) s", RowLock::Share),
        ("SELECT * FROM t WHERE id IN (SELECT id FROM u FOR UPDATE)", RowLock::Update),
    ];
    for (sql, lock) in cases {
        assert_eq!(kind(sql), K::Select { locking: Some(lock) }, "{sql}");
        assert!(writes(sql), "{sql}");
    }
}

#[test]
fn dml_with_and_without_returning() {
    let cases = [
        ("INSERT INTO t VALUES (1)", K::Insert { returning: false }),
        ("INSERT INTO t VALUES (1) RETURNING id", K::Insert { returning: true }),
        ("INSERT INTO t DEFAULT VALUES", K::Insert { returning: false }),
        ("INSERT INTO t SELECT * FROM u ON CONFLICT (id) DO NOTHING", K::Insert { returning: false }),
        ("UPDATE t SET a = 1", K::Update { returning: false }),
        ("UPDATE t SET a = 1 RETURNING *", K::Update { returning: true }),
        ("DELETE FROM t WHERE id = 1", K::Delete { returning: false }),
        ("DELETE FROM t RETURNING old.*", K::Delete { returning: true }),
        ("MERGE INTO t USING s ON t.id = s.id WHEN MATCHED THEN DELETE", K::Merge { returning: false }),
        (
            "MERGE INTO t USING s ON t.id = s.id WHEN NOT MATCHED THEN INSERT VALUES (s.id) RETURNING merge_action()",
            K::Merge { returning: true },
        ),
        ("WITH d AS (DELETE FROM t RETURNING *) INSERT INTO log SELECT * FROM d", K::Insert { returning: false }),
    ];
    for (sql, expected) in cases {
        assert_eq!(kind(sql), expected, "{sql}");
        assert!(writes(sql), "{sql}");
    }
}

#[test]
fn writing_cte_makes_a_select_write() {
    let sql = "WITH moved AS (DELETE FROM queue WHERE id = 1 RETURNING *) SELECT * FROM moved";
    assert_eq!(kind(sql), K::Select { locking: None });
    assert!(writes(sql));
    // PostgreSQL refuses this one, but routing it to the primary is the right call anyway.
    let nested = "SELECT * FROM (WITH x AS (UPDATE t SET a = 1 RETURNING a) SELECT * FROM x) s";
    assert!(analyze(nested).writes());
}

#[test]
fn write_functions_make_a_select_write() {
    for sql in [
        "SELECT nextval('seq')",
        "SELECT pg_catalog.setval('seq', 10)",
        "SELECT currval('seq')",
        "SELECT * FROM t WHERE id = (SELECT nextval('s'))",
        "SELECT pg_advisory_xact_lock(1)",
        "SELECT pg_notify('c', 'x')",
        "SELECT txid_current()",
        "SELECT audit.log_event('x')",
        "SELECT bump_counter()",
        "SELECT anything.bump_counter()",
        "SELECT lo_create(0)",
    ] {
        assert!(writes(sql), "{sql}");
        assert!(matches!(kind(sql), K::Select { .. }), "{sql}");
    }
    for sql in [
        "SELECT now(), lower('x'), set_config('a', 'b', true)",
        "SELECT myschema.nextval('x')",
        "SELECT log_event('x')",
        "SELECT other.log_event('x')",
        "SELECT 'nextval(1)'",
    ] {
        assert!(!writes(sql), "{sql}");
    }
}

#[test]
fn copy_directions() {
    let cases = [
        ("COPY t FROM STDIN", CopyDirection::From, true, true),
        ("COPY t (a, b) FROM STDIN WITH (FORMAT csv)", CopyDirection::From, true, true),
        ("COPY t FROM '/tmp/x.csv'", CopyDirection::From, false, true),
        ("COPY t TO STDOUT", CopyDirection::To, true, false),
        ("COPY (SELECT * FROM t) TO STDOUT", CopyDirection::To, true, false),
        ("COPY (DELETE FROM t RETURNING *) TO STDOUT", CopyDirection::To, true, true),
        ("COPY t TO PROGRAM 'gzip > /tmp/x'", CopyDirection::To, false, false),
    ];
    for (sql, direction, stdio, w) in cases {
        assert_eq!(kind(sql), K::Copy { direction, stdio }, "{sql}");
        assert_eq!(writes(sql), w, "{sql}");
    }
}

#[test]
fn tables_created() {
    let cases = [
        ("CREATE TABLE t (id int)", K::CreateTable { temporary: false, as_select: false }),
        ("CREATE TEMP TABLE t (id int)", K::CreateTable { temporary: true, as_select: false }),
        (
            "CREATE TEMPORARY TABLE t (id int) ON COMMIT DROP",
            K::CreateTable { temporary: true, as_select: false },
        ),
        ("CREATE UNLOGGED TABLE t (id int)", K::CreateTable { temporary: false, as_select: false }),
        ("CREATE TABLE pg_temp.t (id int)", K::CreateTable { temporary: true, as_select: false }),
        ("CREATE TABLE t AS SELECT 1", K::CreateTable { temporary: false, as_select: true }),
        ("CREATE TEMP TABLE t AS SELECT * FROM u", K::CreateTable { temporary: true, as_select: true }),
        ("SELECT * INTO TEMP t FROM u", K::CreateTable { temporary: true, as_select: true }),
        ("SELECT * INTO t FROM u", K::CreateTable { temporary: false, as_select: true }),
    ];
    for (sql, expected) in cases {
        assert_eq!(kind(sql), expected, "{sql}");
        assert!(writes(sql), "{sql}");
    }
}

#[test]
fn ddl() {
    for (sql, tag) in [
        ("ALTER TABLE t ADD COLUMN c int", "AlterTableStmt"),
        ("DROP TABLE IF EXISTS a, b CASCADE", "DropStmt"),
        ("CREATE INDEX CONCURRENTLY i ON t (a)", "IndexStmt"),
        ("CREATE MATERIALIZED VIEW mv AS SELECT 1", "CreateTableAsStmt"),
        ("CREATE VIEW v AS SELECT * FROM t", "ViewStmt"),
        ("GRANT SELECT ON t TO bob", "GrantStmt"),
        ("GRANT USAGE ON SCHEMA s TO bob", "GrantStmt"),
        ("REVOKE EXECUTE ON FUNCTION f(int) FROM bob", "GrantStmt"),
        ("GRANT ALL ON ALL TABLES IN SCHEMA s TO bob", "GrantStmt"),
        ("GRANT CONNECT ON DATABASE d TO bob", "GrantStmt"),
        ("TRUNCATE t RESTART IDENTITY", "TruncateStmt"),
        ("COMMENT ON TABLE t IS 'x'", "CommentStmt"),
        ("CREATE FUNCTION f() RETURNS int LANGUAGE sql AS 'SELECT 1'", "CreateFunctionStmt"),
        ("CREATE FOREIGN TABLE ft (a int) SERVER s", "CreateForeignTableStmt"),
        ("REFRESH MATERIALIZED VIEW CONCURRENTLY mv", "RefreshMatViewStmt"),
        ("ALTER SYSTEM SET work_mem = '1GB'", "AlterSystemStmt"),
        ("CREATE DATABASE d", "CreatedbStmt"),
        ("REINDEX TABLE t", "ReindexStmt"),
        ("CLUSTER t USING i", "ClusterStmt"),
    ] {
        stmt(sql, |s| {
            assert_eq!(s.kind(), K::Ddl, "{sql}");
            assert_eq!(s.tag(), tag, "{sql}");
            assert!(s.writes(), "{sql}");
        });
    }
}

#[test]
fn begin_and_its_options() {
    let o = |isolation, read_only, deferrable| TransactionOptions { isolation, read_only, deferrable };
    let cases = [
        ("BEGIN", o(None, None, None)),
        ("BEGIN WORK", o(None, None, None)),
        ("START TRANSACTION", o(None, None, None)),
        ("START TRANSACTION READ ONLY", o(None, Some(true), None)),
        ("BEGIN READ WRITE", o(None, Some(false), None)),
        ("BEGIN ISOLATION LEVEL REPEATABLE READ", o(Some(IsolationLevel::RepeatableRead), None, None)),
        (
            "begin transaction isolation level serializable, read only, deferrable",
            o(Some(IsolationLevel::Serializable), Some(true), Some(true)),
        ),
        (
            "BEGIN ISOLATION LEVEL READ COMMITTED NOT DEFERRABLE",
            o(Some(IsolationLevel::ReadCommitted), None, Some(false)),
        ),
        ("BEGIN ISOLATION LEVEL READ UNCOMMITTED", o(Some(IsolationLevel::ReadUncommitted), None, None)),
    ];
    for (sql, opts) in cases {
        assert_eq!(kind(sql), K::Begin(opts), "{sql}");
        assert!(!writes(sql), "{sql}");
    }
    assert_eq!(
        kind("SET TRANSACTION ISOLATION LEVEL SERIALIZABLE READ ONLY"),
        K::SetTransaction(o(Some(IsolationLevel::Serializable), Some(true), None))
    );
}

#[test]
fn transaction_control() {
    let cases = [
        ("COMMIT", K::Commit { chain: false }, None, false),
        ("END", K::Commit { chain: false }, None, false),
        ("COMMIT AND CHAIN", K::Commit { chain: true }, None, false),
        ("ROLLBACK", K::Rollback { chain: false }, None, false),
        ("ABORT", K::Rollback { chain: false }, None, false),
        ("ROLLBACK AND CHAIN", K::Rollback { chain: true }, None, false),
        ("SAVEPOINT \"My Point\"", K::Savepoint, Some("My Point"), false),
        ("RELEASE SAVEPOINT sp1", K::Release, Some("sp1"), false),
        ("RELEASE sp1", K::Release, Some("sp1"), false),
        ("ROLLBACK TO SAVEPOINT sp1", K::RollbackToSavepoint, Some("sp1"), false),
        ("ROLLBACK TO sp1", K::RollbackToSavepoint, Some("sp1"), false),
        ("PREPARE TRANSACTION 'gid-1'", K::PrepareTransaction, Some("gid-1"), true),
        ("COMMIT PREPARED 'gid-1'", K::CommitPrepared, Some("gid-1"), true),
        ("ROLLBACK PREPARED 'gid-1'", K::RollbackPrepared, Some("gid-1"), true),
    ];
    for (sql, k, name, w) in cases {
        stmt(sql, |s| {
            assert_eq!(s.kind(), k, "{sql}");
            assert_eq!(s.name(), name, "{sql}");
            assert_eq!(s.writes(), w, "{sql}");
        });
    }
}

#[test]
fn set_reset_show() {
    let session = K::Set { scope: SetScope::Session };
    let local = K::Set { scope: SetScope::Local };
    let cases = [
        ("SET work_mem = '64MB'", session, Some("work_mem"), Some("64MB")),
        ("SET SESSION work_mem TO 65536", session, Some("work_mem"), Some("65536")),
        ("SET LOCAL statement_timeout = 0", local, Some("statement_timeout"), Some("0")),
        (
            "SET search_path TO app, \"Other\", public",
            session,
            Some("search_path"),
            Some("app, Other, public"),
        ),
        ("SET TIME ZONE 'UTC'", session, Some("timezone"), Some("UTC")),
        ("SET TIME ZONE INTERVAL '+00:00' HOUR TO MINUTE", session, Some("timezone"), Some("+00:00")),
        ("SET NAMES 'UTF8'", session, Some("client_encoding"), Some("UTF8")),
        ("SET SCHEMA 'app'", session, Some("search_path"), Some("app")),
        ("SET ROLE admin", session, Some("role"), Some("admin")),
        ("SET SESSION AUTHORIZATION bob", session, Some("session_authorization"), Some("bob")),
        ("SET enable_seqscan = off", session, Some("enable_seqscan"), Some("off")),
        ("SET extra_float_digits = -1", session, Some("extra_float_digits"), Some("-1")),
        ("SET work_mem TO DEFAULT", session, Some("work_mem"), None),
        ("SET LOCAL work_mem TO DEFAULT", local, Some("work_mem"), None),
        ("SET work_mem FROM CURRENT", session, Some("work_mem"), None),
        (
            "SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY",
            session,
            Some("SESSION CHARACTERISTICS"),
            None,
        ),
        ("RESET work_mem", K::Reset, Some("work_mem"), None),
        ("RESET ALL", K::Reset, None, None),
        ("SHOW work_mem", K::Show, Some("work_mem"), None),
        ("SHOW ALL", K::Show, Some("all"), None),
    ];
    for (sql, k, name, value) in cases {
        stmt(sql, |s| {
            assert_eq!(s.kind(), k, "{sql}");
            assert_eq!(s.name(), name, "{sql}");
            assert_eq!(s.value(), value, "{sql}");
            assert!(!s.writes(), "{sql}");
        });
    }
}

#[test]
fn discard_listen_notify() {
    for (sql, target) in [
        ("DISCARD ALL", DiscardTarget::All),
        ("DISCARD PLANS", DiscardTarget::Plans),
        ("DISCARD SEQUENCES", DiscardTarget::Sequences),
        ("DISCARD TEMP", DiscardTarget::Temp),
        ("DISCARD TEMPORARY", DiscardTarget::Temp),
    ] {
        assert_eq!(kind(sql), K::Discard(target), "{sql}");
        assert!(!writes(sql));
    }
    stmt("LISTEN \"Jobs\"", |s| {
        assert_eq!((s.kind(), s.name(), s.writes()), (K::Listen, Some("Jobs"), true));
    });
    stmt("UNLISTEN jobs", |s| {
        assert_eq!((s.kind(), s.name(), s.writes()), (K::Unlisten, Some("jobs"), false))
    });
    stmt("UNLISTEN *", |s| assert_eq!((s.kind(), s.name()), (K::Unlisten, None)));
    stmt("NOTIFY jobs, 'payload'", |s| {
        assert_eq!(
            (s.kind(), s.name(), s.value(), s.writes()),
            (K::Notify, Some("jobs"), Some("payload"), true)
        );
    });
}

#[test]
fn prepared_statements_sql_level() {
    stmt("PREPARE q (int) AS SELECT * FROM t WHERE id = $1", |s| {
        assert_eq!(s.kind(), K::Prepare);
        assert_eq!(s.name(), Some("q"));
        assert_eq!(s.target(), Some(K::Select { locking: None }));
        assert!(!s.writes());
    });
    stmt("PREPARE w AS UPDATE t SET a = $1", |s| {
        assert_eq!((s.target(), s.writes()), (Some(K::Update { returning: false }), false));
    });
    stmt("EXECUTE q(1)", |s| assert_eq!((s.kind(), s.name(), s.writes()), (K::Execute, Some("q"), true)));
    stmt("DEALLOCATE q", |s| assert_eq!((s.kind(), s.name()), (K::Deallocate, Some("q"))));
    stmt("DEALLOCATE PREPARE q", |s| assert_eq!((s.kind(), s.name()), (K::Deallocate, Some("q"))));
    stmt("DEALLOCATE ALL", |s| assert_eq!((s.kind(), s.name(), s.writes()), (K::Deallocate, None, false)));
    // Statements that name one inside another.
    stmt("EXPLAIN (ANALYZE) EXECUTE \"Q\"(1)", |s| {
        assert_eq!(
            (s.kind(), s.target(), s.name()),
            (K::Explain { analyze: true }, Some(K::Execute), Some("Q"))
        )
    });
    stmt("EXPLAIN SELECT 1", |s| assert_eq!(s.name(), None));
    stmt("CREATE TABLE x AS EXECUTE q(1) WITH NO DATA", |s| {
        assert_eq!(s.kind(), K::CreateTable { temporary: false, as_select: true });
        assert_eq!(s.name(), Some("q"));
    });
    stmt("CREATE TABLE x AS SELECT 1", |s| assert_eq!(s.name(), None));
}

#[test]
fn cursors() {
    stmt("DECLARE c CURSOR FOR SELECT * FROM t", |s| {
        assert_eq!(s.kind(), K::DeclareCursor { hold: false });
        assert_eq!((s.name(), s.target(), s.writes()), (Some("c"), Some(K::Select { locking: None }), false));
    });
    stmt("DECLARE c BINARY SCROLL CURSOR WITH HOLD FOR SELECT * FROM t", |s| {
        assert_eq!(s.kind(), K::DeclareCursor { hold: true });
    });
    stmt("DECLARE c CURSOR FOR SELECT * FROM t FOR UPDATE", |s| assert!(s.writes()));
    stmt("FETCH 10 FROM c", |s| assert_eq!((s.kind(), s.name()), (K::Fetch, Some("c"))));
    stmt("MOVE NEXT IN c", |s| assert_eq!((s.kind(), s.name()), (K::Fetch, Some("c"))));
    stmt("CLOSE c", |s| assert_eq!((s.kind(), s.name()), (K::CloseCursor, Some("c"))));
    stmt("CLOSE ALL", |s| assert_eq!((s.kind(), s.name()), (K::CloseCursor, None)));
}

#[test]
fn maintenance_and_procedures() {
    let cases = [
        ("LOCK TABLE t IN ACCESS EXCLUSIVE MODE", K::Lock),
        ("LOCK t", K::Lock),
        ("VACUUM", K::Vacuum),
        ("VACUUM (ANALYZE, VERBOSE) t", K::Vacuum),
        ("VACUUM FULL t", K::Vacuum),
        ("ANALYZE t", K::Analyze),
        ("ANALYZE", K::Analyze),
        ("CALL do_things(1, 'x')", K::Call),
        ("DO $$ BEGIN PERFORM 1; END $$", K::Do),
        ("DO LANGUAGE plpgsql 'BEGIN NULL; END'", K::Do),
        ("CHECKPOINT", K::Checkpoint),
    ];
    for (sql, k) in cases {
        assert_eq!(kind(sql), k, "{sql}");
        assert!(writes(sql), "{sql}");
    }
    stmt("LOAD 'auto_explain'", |s| {
        assert_eq!((s.kind(), s.name(), s.writes()), (K::Load, Some("auto_explain"), false))
    });
}

#[test]
fn explain() {
    let cases = [
        ("EXPLAIN SELECT * FROM t", false, K::Select { locking: None }, false),
        ("EXPLAIN ANALYZE SELECT * FROM t", true, K::Select { locking: None }, false),
        ("EXPLAIN UPDATE t SET a = 1", false, K::Update { returning: false }, false),
        ("EXPLAIN ANALYZE UPDATE t SET a = 1", true, K::Update { returning: false }, true),
        ("EXPLAIN ANALYZE VERBOSE DELETE FROM t", true, K::Delete { returning: false }, true),
        ("EXPLAIN (ANALYZE, BUFFERS) INSERT INTO t VALUES (1)", true, K::Insert { returning: false }, true),
        ("EXPLAIN (ANALYZE false) UPDATE t SET a = 1", false, K::Update { returning: false }, false),
        ("EXPLAIN (ANALYZE off, COSTS off) UPDATE t SET a = 1", false, K::Update { returning: false }, false),
        ("EXPLAIN (ANALYZE 1) UPDATE t SET a = 1", true, K::Update { returning: false }, true),
        (
            "EXPLAIN (COSTS OFF) SELECT * FROM t FOR UPDATE",
            false,
            K::Select { locking: Some(RowLock::Update) },
            false,
        ),
        ("EXPLAIN ANALYZE SELECT nextval('s')", true, K::Select { locking: None }, true),
        ("EXPLAIN SELECT nextval('s')", false, K::Select { locking: None }, false),
        (
            "EXPLAIN ANALYZE CREATE TABLE x AS SELECT 1",
            true,
            K::CreateTable { temporary: false, as_select: true },
            true,
        ),
        ("EXPLAIN EXECUTE q(1)", false, K::Execute, false),
    ];
    for (sql, analyze, target, w) in cases {
        stmt(sql, |s| {
            assert_eq!(s.kind(), K::Explain { analyze }, "{sql}");
            assert_eq!(s.target(), Some(target), "{sql}");
            assert_eq!(s.writes(), w, "{sql}");
            assert_eq!(s.tag(), "ExplainStmt");
        });
    }
}

#[test]
fn multi_statement_strings() {
    let sql = "BEGIN; UPDATE t SET a = 1 WHERE id = 2; SELECT 1; COMMIT";
    let a = analyze(sql);
    let kinds: Vec<K> = a.statements().map(|s| s.kind()).collect();
    assert_eq!(
        kinds,
        [
            K::Begin(TransactionOptions::default()),
            K::Update { returning: false },
            K::Select { locking: None },
            K::Commit { chain: false }
        ]
    );
    assert!(a.writes());
    let texts: Vec<&str> = a.statements().map(|s| &sql[s.location()]).collect();
    assert_eq!(texts, ["BEGIN", "UPDATE t SET a = 1 WHERE id = 2", "SELECT 1", "COMMIT"]);

    let reads = analyze("SELECT 1; SELECT 2;");
    assert_eq!(reads.len(), 2);
    assert!(!reads.writes());

    let empty = analyze("  -- nothing here\n ");
    assert!(empty.is_empty());
    assert!(!empty.writes());
}

#[test]
fn analysis_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<route::Analysis>();
    check::<route::Analyzer>();
    check::<std::sync::Arc<route::Analysis>>();
}
