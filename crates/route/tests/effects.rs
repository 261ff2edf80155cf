//! Session-scoped effects: what a transaction-mode pooler must replay or pin for.

mod common;

use common::{analyze, effects};
use route::{DiscardTarget, LockOp, LockScope, SessionEffect as E};

fn set(name: &str, value: Option<&str>) -> String {
    format!("{:?}", E::Set { name: Some(name), value })
}

#[test]
fn set_session_but_not_set_local() {
    assert_eq!(effects("SET work_mem = '1GB'"), [set("work_mem", Some("1GB"))]);
    assert_eq!(effects("SET SESSION work_mem = '1GB'"), [set("work_mem", Some("1GB"))]);
    assert_eq!(effects("set Search_Path = \"App\""), [set("search_path", Some("App"))]);
    assert!(effects("SET LOCAL work_mem = '1GB'").is_empty());
    assert!(effects("SET LOCAL work_mem TO DEFAULT").is_empty());
    assert!(effects("SET TRANSACTION ISOLATION LEVEL SERIALIZABLE").is_empty());
    assert_eq!(effects("SET ROLE admin"), [set("role", Some("admin"))]);
    assert_eq!(effects("SET work_mem FROM CURRENT"), [set("work_mem", None)]);
    assert_eq!(effects("SET work_mem TO DEFAULT"), [format!("{:?}", E::Reset { name: Some("work_mem") })]);
    assert_eq!(effects("RESET work_mem"), [format!("{:?}", E::Reset { name: Some("work_mem") })]);
    assert_eq!(effects("RESET ALL"), [format!("{:?}", E::Reset { name: None })]);
    assert!(effects("SHOW work_mem").is_empty());
}

#[test]
fn set_config_is_a_session_set_unless_local() {
    assert_eq!(effects("SELECT set_config('app.user', '42', false)"), [set("app.user", Some("42"))]);
    assert_eq!(effects("SELECT pg_catalog.set_config('a', 'b', 'false')"), [set("a", Some("b"))]);
    assert_eq!(effects("SELECT set_config('a', 'b', 'off'::boolean)"), [set("a", Some("b"))]);
    assert!(effects("SELECT set_config('a', 'b', true)").is_empty());
    assert!(effects("SELECT set_config('a', 'b', 't')").is_empty());
    assert!(effects("SELECT set_config('a', 'b', 'on'::bool)").is_empty());
    // A computed name, value or flag is still a session change, just an unknown one.
    assert_eq!(
        effects("SELECT set_config(current_setting('x'), $1, $2)"),
        [format!("{:?}", E::Set { name: None, value: None })]
    );
    assert_eq!(
        effects("UPDATE t SET a = 1 WHERE set_config('a', 'b', false) IS NOT NULL"),
        [set("a", Some("b"))]
    );
    assert!(!analyze("SELECT set_config('a', 'b', false)").writes());
}

#[test]
fn advisory_locks() {
    let lock = |scope, op| format!("{:?}", E::AdvisoryLock { scope, op });
    assert_eq!(effects("SELECT pg_advisory_lock(1)"), [lock(LockScope::Session, LockOp::Acquire)]);
    assert_eq!(effects("SELECT pg_try_advisory_lock(1, 2)"), [lock(LockScope::Session, LockOp::Acquire)]);
    assert_eq!(effects("SELECT pg_advisory_lock_shared(1)"), [lock(LockScope::Session, LockOp::Acquire)]);
    assert_eq!(effects("SELECT pg_advisory_unlock(1)"), [lock(LockScope::Session, LockOp::Release)]);
    assert_eq!(effects("SELECT pg_advisory_unlock_all()"), [lock(LockScope::Session, LockOp::ReleaseAll)]);
    assert_eq!(effects("SELECT pg_advisory_xact_lock(1)"), [lock(LockScope::Transaction, LockOp::Acquire)]);
    assert_eq!(
        effects("SELECT pg_try_advisory_xact_lock_shared(1)"),
        [lock(LockScope::Transaction, LockOp::Acquire)]
    );
    assert_eq!(
        effects("SELECT * FROM jobs WHERE pg_try_advisory_lock(id) LIMIT 1"),
        [lock(LockScope::Session, LockOp::Acquire)]
    );
    assert!(analyze("SELECT pg_advisory_lock(1)").writes());
    assert!(effects("SELECT myschema.pg_advisory_lock(1)").is_empty());
}

#[test]
fn listen_unlisten() {
    assert_eq!(effects("LISTEN jobs"), [format!("{:?}", E::Listen { channel: "jobs" })]);
    assert_eq!(effects("UNLISTEN jobs"), [format!("{:?}", E::Unlisten { channel: Some("jobs") })]);
    assert_eq!(effects("UNLISTEN *"), [format!("{:?}", E::Unlisten { channel: None })]);
    assert!(effects("NOTIFY jobs").is_empty());
}

#[test]
fn temporary_objects() {
    let temp = |name, on_commit_drop| format!("{:?}", E::TempTable { name, on_commit_drop });
    assert_eq!(effects("CREATE TEMP TABLE scratch (id int)"), [temp("scratch", false)]);
    assert_eq!(effects("CREATE TEMPORARY TABLE IF NOT EXISTS s (id int)"), [temp("s", false)]);
    assert_eq!(effects("CREATE GLOBAL TEMPORARY TABLE s (id int)"), [temp("s", false)]);
    assert_eq!(effects("CREATE TEMP TABLE s (id int) ON COMMIT DROP"), [temp("s", true)]);
    assert_eq!(effects("CREATE TEMP TABLE s (id int) ON COMMIT DELETE ROWS"), [temp("s", false)]);
    assert_eq!(effects("CREATE TABLE pg_temp.s (id int)"), [temp("s", false)]);
    assert_eq!(effects("CREATE TEMP TABLE s AS SELECT 1"), [temp("s", false)]);
    assert_eq!(effects("CREATE TEMP TABLE s ON COMMIT DROP AS SELECT 1"), [temp("s", true)]);
    assert_eq!(effects("SELECT * INTO TEMP s FROM t"), [temp("s", false)]);
    assert_eq!(effects("CREATE TEMP VIEW v AS SELECT 1"), [temp("v", false)]);
    assert_eq!(effects("CREATE TEMP SEQUENCE q"), [temp("q", false)]);
    assert!(effects("CREATE TABLE s (id int)").is_empty());
    assert!(effects("CREATE UNLOGGED TABLE s (id int)").is_empty());
    assert!(effects("CREATE TABLE \"pg_temp\" (id int)").is_empty());
}

#[test]
fn cursors_prepared_statements_discard_load() {
    assert_eq!(
        effects("DECLARE c CURSOR WITH HOLD FOR SELECT 1"),
        [format!("{:?}", E::HoldCursor { name: "c" })]
    );
    assert!(effects("DECLARE c CURSOR FOR SELECT 1").is_empty());
    assert!(effects("DECLARE c CURSOR WITHOUT HOLD FOR SELECT 1").is_empty());
    assert_eq!(effects("CLOSE c"), [format!("{:?}", E::CloseCursor { name: Some("c") })]);
    assert_eq!(effects("CLOSE ALL"), [format!("{:?}", E::CloseCursor { name: None })]);
    assert_eq!(effects("PREPARE q AS SELECT 1"), [format!("{:?}", E::Prepare { name: "q" })]);
    assert_eq!(effects("DEALLOCATE q"), [format!("{:?}", E::Deallocate { name: Some("q") })]);
    assert_eq!(effects("DEALLOCATE ALL"), [format!("{:?}", E::Deallocate { name: None })]);
    assert_eq!(effects("DISCARD ALL"), [format!("{:?}", E::Discard(DiscardTarget::All))]);
    assert_eq!(effects("LOAD 'auto_explain'"), [format!("{:?}", E::Load)]);
}

#[test]
fn effects_of_statements_that_do_not_run() {
    // Preparing or explaining (without ANALYZE) executes nothing.
    assert_eq!(
        effects("PREPARE q AS SELECT pg_advisory_lock(1), set_config('a', 'b', false)"),
        [format!("{:?}", E::Prepare { name: "q" })]
    );
    assert!(effects("EXPLAIN SELECT pg_advisory_lock(1)").is_empty());
    assert_eq!(effects("EXPLAIN ANALYZE SELECT pg_advisory_lock(1)").len(), 1);
    assert_eq!(
        effects("EXPLAIN ANALYZE CREATE TEMP TABLE s AS SELECT 1"),
        [format!("{:?}", E::TempTable { name: "s", on_commit_drop: false })]
    );
    // The cursor's query runs when it is fetched from.
    assert_eq!(effects("DECLARE c CURSOR FOR SELECT set_config('a', 'b', false)"), [set("a", Some("b"))]);
}

#[test]
fn effects_are_listed_per_statement_in_order() {
    let a = analyze("SET a = 1; SELECT 1; LISTEN x; SET LOCAL b = 2; SELECT pg_advisory_unlock_all()");
    let per_statement: Vec<usize> = a.statements().map(|s| s.session_effects().count()).collect();
    assert_eq!(per_statement, [1, 0, 1, 0, 1]);
    assert!(a.has_session_effects());
    assert!(!analyze("SELECT 1; SET LOCAL x = 1").has_session_effects());
}

#[test]
fn hidden_effects_of_functions_do_blocks_and_execute() {
    let hidden = |sql: &str| analyze(sql).may_have_hidden_effects();
    // User functions, procedures, DO blocks, SQL EXECUTE, unreadable text: may do anything.
    for sql in [
        "SELECT my_func()",
        "SELECT app.my_func(1)",
        "SELECT * FROM my_srf()",
        "SELECT 1 WHERE lower(my_func()::text) = 'x'",
        "UPDATE t SET a = my_func()",
        "INSERT INTO t VALUES (my_func())",
        "CALL my_proc()",
        "DO $$ BEGIN PERFORM set_config('search_path', 'x', false); END $$",
        "EXECUTE stmt(1)",
        "SELECT pg_catalog.pg_sleep(0)",
        "SELECT public.lower('A')",
        "DECLARE c CURSOR FOR SELECT my_func()",
    ] {
        assert!(hidden(sql), "{sql}");
    }
    let unreadable = common::analyzer().analyze("SELEC my_func()", &[]);
    assert!(unreadable.is_conservative() && unreadable.may_have_hidden_effects());
    // Built-ins whose session effects are recorded, or that have none: nothing hidden.
    for sql in [
        "SELECT abalance FROM pgbench_accounts WHERE aid = 1",
        "UPDATE pgbench_accounts SET abalance = abalance + 1 WHERE aid = 1",
        "SELECT lower('A'), now(), count(*) FROM t",
        "SELECT pg_catalog.lower('A')",
        "SELECT set_config('search_path', 'x', false)",
        "SELECT pg_advisory_lock(1), pg_advisory_unlock(1)",
        "SELECT nextval('s')",
        "SET search_path = x",
        "LISTEN jobs",
        "PREPARE p AS SELECT my_func()",
        "BEGIN",
    ] {
        assert!(!hidden(sql), "{sql}");
    }
}

#[test]
fn functions_listed_as_session_neutral_hide_nothing() {
    let a = route::Analyzer::new(route::AnalyzerOptions {
        session_neutral_functions: vec!["score".into(), "app.rank".into()],
        ..Default::default()
    })
    .expect("valid options");
    assert!(!a.analyze("SELECT score(1), app.rank(2), lower('x')", &[]).may_have_hidden_effects());
    assert!(a.analyze("SELECT rank(2)", &[]).may_have_hidden_effects(), "listed with its schema only");
    assert!(a.analyze("SELECT score(1), other(2)", &[]).may_have_hidden_effects());
    assert!(a.analyze("DO $$ BEGIN PERFORM score(1); END $$", &[]).may_have_hidden_effects());
    let bad =
        route::AnalyzerOptions { session_neutral_functions: vec!["a.b.c".into()], ..Default::default() };
    assert_eq!(bad.problems()[0].key(), "session_neutral_functions");
}

/// With `standard_conforming_strings` off, `'a\''` ends at the second quote, so the `SET`
/// behind it is real; the standard reading (the parser's) sees one string. Such text is not
/// read for a session that may be off; text without a backslash reads the same either way.
#[test]
fn text_with_backslashes_is_not_read_under_nonstandard_strings() {
    let analyzer = route::Analyzer::new(route::AnalyzerOptions::default()).expect("default options");
    let sql = r"SELECT 'a\'';SET search_path=pg_catalog;--'";
    let standard = analyzer.analyze(sql, &[]);
    assert_eq!(standard.len(), 1, "one SELECT of one string, as the standard reads it");
    assert!(std::sync::Arc::ptr_eq(&analyzer.for_session(standard.clone(), sql.as_bytes(), true), &standard));
    let off = analyzer.for_session(standard, sql.as_bytes(), false);
    assert_eq!(off.outcome(), route::Outcome::NonstandardStrings);
    assert!(off.is_conservative() && off.may_have_hidden_effects() && off.writes());
    let plain = analyzer.analyze("SET search_path = 'x'", &[]);
    let kept = analyzer.for_session(plain.clone(), b"SET search_path = 'x'", false);
    assert!(std::sync::Arc::ptr_eq(&kept, &plain));
}

/// What may send a notification, so pgvia can tell listeners which client sent it.
#[test]
fn what_may_notify() {
    for sql in ["NOTIFY jobs", "SELECT pg_notify('jobs', 'x')", "SELECT my_func()"] {
        assert!(analyze(sql).may_notify(), "{sql}");
    }
    assert!(common::analyzer().analyze("SELEC", &[]).may_notify(), "what could not be read");
    for sql in ["SELECT 1", "LISTEN jobs", "INSERT INTO t VALUES (1)"] {
        assert!(!analyze(sql).may_notify(), "{sql}");
    }
}
