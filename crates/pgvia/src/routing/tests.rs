use std::time::Duration;

use wire::FrameDecoder;

use super::decide::{decide, needs_more, Decision, Target};
use super::*;
use crate::config::{LoadBalance, ReadWriteSplit, RoutingSettings, ServerEntry, ServerRole};

fn settings(roles: &[ServerRole], balance: LoadBalance) -> RoutingSettings {
    RoutingSettings {
        servers: roles
            .iter()
            .enumerate()
            .map(|(i, &role)| ServerEntry {
                host: "127.0.0.1".into(),
                port: 5432 + i as u16,
                role,
                weight: 1,
            })
            .collect(),
        read_write_split: ReadWriteSplit::On,
        load_balance: balance,
        primary_reads: false,
        read_your_writes: Duration::from_secs(1),
        health_check_interval: Duration::from_secs(1),
        health_check_timeout: Duration::from_secs(1),
        health_check_query: String::new(),
        health_check_user: None,
        ban_time: Duration::from_secs(10),
        max_replica_lag_bytes: 0,
        max_replica_lag: Duration::ZERO,
    }
}

fn query(sql: &str) -> Vec<u8> {
    let mut b = bytes::BytesMut::new();
    wire::build::query(&mut b, sql);
    b.to_vec()
}

fn route(split: ReadWriteSplit, begin: Option<&str>, sqls: &[&str]) -> Decision {
    let analyzer = route::Analyzer::new(route::AnalyzerOptions::default()).unwrap();
    let buf: Vec<u8> = sqls.iter().flat_map(|s| query(s)).collect();
    let begin = begin.map(query);
    let query = |sql: &[u8]| analyzer.analyze_bytes(sql, &[]);
    decide(&analyzer, query, &FrameDecoder::new(1 << 20), None, split, begin.as_deref(), &buf)
}

#[test]
fn reads_go_to_replicas_and_writes_to_the_primary() {
    use ReadWriteSplit::On;
    assert_eq!(route(On, None, &["SELECT * FROM t"]).target, Target::Replica);
    // Settings follow the client to any server.
    assert_eq!(route(On, None, &["SET search_path TO app", "SELECT 1"]).target, Target::Replica);
    for write in [
        "SELECT * FROM t FOR UPDATE",
        "SELECT nextval('s')",
        "WITH x AS (INSERT INTO t VALUES (1) RETURNING *) SELECT * FROM x",
        "UPDATE t SET a = 1",
        "CREATE TABLE u (a int)",
        "LISTEN c",
        "SELECT pg_advisory_lock(1)",
        "SET ROLE someone",
        "DECLARE c CURSOR WITH HOLD FOR SELECT 1",
        "not sql at all",
    ] {
        let d = route(On, None, &[write]);
        assert_eq!((d.target, d.writes), (Target::Primary, true), "{write}");
    }
    // A read then a write in one batch is decided by the write.
    assert_eq!(route(On, None, &["SELECT 1", "INSERT INTO t VALUES (1)"]).target, Target::Primary);
}

#[test]
fn transaction_blocks() {
    use ReadWriteSplit::On;
    // An open read-write block may write later.
    assert_eq!(route(On, Some("BEGIN"), &["SELECT 1"]).target, Target::Primary);
    assert_eq!(route(On, None, &["BEGIN", "SELECT 1"]).target, Target::Primary);
    // Read-only blocks and whole read blocks go to replicas.
    assert_eq!(route(On, Some("BEGIN READ ONLY"), &["SELECT 1"]).target, Target::Replica);
    assert_eq!(route(On, None, &["BEGIN", "SET TRANSACTION READ ONLY", "SELECT 1"]).target, Target::Replica);
    assert_eq!(route(On, None, &["BEGIN; SELECT 1; COMMIT"]).target, Target::Replica);
    assert_eq!(
        route(On, None, &["BEGIN; SELECT 1; INSERT INTO t VALUES (1); COMMIT"]).target,
        Target::Primary
    );
}

#[test]
fn hints_policy_and_conservative_mode() {
    let d = route(ReadWriteSplit::On, None, &["/* pgvia: role=primary */ SELECT 1"]);
    assert_eq!((d.target, d.hinted), (Target::Primary, true));
    let d = route(ReadWriteSplit::Off, None, &["SELECT 1 -- pgvia: role=replica\n"]);
    assert_eq!((d.target, d.hinted), (Target::Replica, true));
    assert_eq!(route(ReadWriteSplit::Off, None, &["SELECT 1"]).target, Target::Primary);
    // A user function may write; conservative sends it to the primary, on trusts the SELECT.
    assert_eq!(route(ReadWriteSplit::On, None, &["SELECT report(1)"]).target, Target::Replica);
    assert_eq!(route(ReadWriteSplit::Conservative, None, &["SELECT report(1)"]).target, Target::Primary);
    assert_eq!(
        route(ReadWriteSplit::Conservative, None, &["SELECT count(*), now() FROM t"]).target,
        Target::Replica
    );
}

#[test]
fn extended_batches_wait_for_their_sync() {
    let decoder = FrameDecoder::new(1 << 20);
    let mut b = bytes::BytesMut::new();
    wire::build::frame(&mut b, b'P', |b| b.extend_from_slice(b"\0SELECT 1\0\0\0"));
    assert!(needs_more(&b, &decoder));
    wire::build::frame(&mut b, b'S', |_| {});
    assert!(!needs_more(&b, &decoder));
    assert!(!needs_more(&query("SELECT 1"), &decoder));
}

#[test]
fn picking_servers() {
    let roles = [ServerRole::Primary, ServerRole::Replica, ServerRole::Replica];
    let hosts = Hosts::new("db", settings(&roles, LoadBalance::RoundRobin), None, 1024);
    assert_eq!(hosts.pick(Target::Primary, |_| 0), Some(0));
    let picks: Vec<_> = (0..4).map(|_| hosts.pick(Target::Replica, |_| 0).unwrap()).collect();
    assert_eq!(picks, [1, 2, 1, 2]);
    hosts.ban(1, "test");
    assert!((0..4).all(|_| hosts.pick(Target::Replica, |_| 0) == Some(2)));
    hosts.ban(2, "test");
    // Every replica out: reads fall back to the primary.
    assert_eq!(hosts.pick(Target::Replica, |_| 0), Some(0));
    hosts.ban(0, "test");
    assert_eq!(hosts.pick(Target::Primary, |_| 0), None);

    let least = Hosts::new("db", settings(&roles, LoadBalance::LeastConnections), None, 1024);
    assert_eq!(least.pick(Target::Replica, |i| if i == 1 { 5 } else { 1 }), Some(2));
}

#[test]
fn role_settings_are_recognised() {
    use crate::config::RolePreference;
    let analyzer = route::Analyzer::new(route::AnalyzerOptions::default()).unwrap();
    let role = |sql: &str| super::decide::role_setting(&analyzer.analyze(sql, &[]));
    assert_eq!(role("SET pgvia.role = 'replica'"), Some((Some(RolePreference::Replica), "SET")));
    // PRIMARY is a reserved word: unquoted, only `replica` and `auto` parse (as in PostgreSQL).
    assert_eq!(role("set PGVIA.ROLE to replica"), Some((Some(RolePreference::Replica), "SET")));
    assert_eq!(role("SET pgvia.role = 'PRIMARY'"), Some((Some(RolePreference::Primary), "SET")));
    assert_eq!(role("RESET pgvia.role"), Some((Some(RolePreference::Auto), "RESET")));
    assert_eq!(role("SET pgvia.role = 'nowhere'"), Some((None, "SET")));
    assert_eq!(role("SET search_path = x"), None);
    assert_eq!(role("SET pgvia.role = 'primary'; SELECT 1"), None);
    assert!(super::decide::shows_role(&analyzer.analyze("show PGVIA.role", &[])));
    assert!(!super::decide::shows_role(&analyzer.analyze("SHOW search_path", &[])));
}
