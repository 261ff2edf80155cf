//! Streaming replication between harness clusters: a primary, two `pg_basebackup -R`
//! replicas, replay pause/resume, stop/start, and promotion after the primary dies.

use std::time::Duration;

use harness::{Cluster, ClusterOptions, HarnessError, PgVersion, KEEP_ENV};

fn count(pg: &Cluster) -> i64 {
    pg.psql("app", "SELECT count(*) FROM t").expect("count").parse().expect("a number")
}

/// Starts a replica, or explains why this PostgreSQL build cannot (then the test is skipped).
fn replica_or_skip(primary: &Cluster) -> Option<Cluster> {
    match Cluster::start_replica(primary, ClusterOptions::default()) {
        Ok(r) => Some(r),
        Err(HarnessError::Unsupported(why)) => {
            println!("SKIPPED: {why}");
            None
        }
        Err(e) => panic!("start replica: {e}"),
    }
}

#[test]
fn primary_and_two_replicas() {
    println!("testing PostgreSQL {}", PgVersion::from_env());
    let primary = Cluster::start(ClusterOptions::default()).expect("start primary");
    let Some(r1) = replica_or_skip(&primary) else { return };
    let r2 = Cluster::start_replica(&primary, ClusterOptions::default()).expect("start replica 2");
    let mut ports = vec![primary.port(), r1.port(), r2.port()];
    ports.sort_unstable();
    ports.dedup();
    assert_eq!(ports.len(), 3, "each server has its own port");
    assert!(!primary.is_in_recovery().expect("primary"));
    assert!(r1.is_in_recovery().expect("r1") && r2.is_in_recovery().expect("r2"));
    let senders =
        primary.psql("postgres", "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'");
    assert_eq!(senders.expect("pg_stat_replication"), "2");

    // Data written on the primary reaches both replicas, including a database made after them.
    primary
        .psql(
            "postgres",
            "CREATE DATABASE app;\n\\c app\nCREATE TABLE t (id int PRIMARY KEY, v text);\n\
             INSERT INTO t SELECT g, 'row ' || g FROM generate_series(1, 100) g;",
        )
        .expect("create and fill");
    for r in [&r1, &r2] {
        r.wait_caught_up(&primary).expect("catch up");
        assert_eq!(count(r), 100);
        assert_eq!(r.psql("app", "SELECT v FROM t WHERE id = 42").expect("row"), "row 42");
    }

    // A hot standby refuses writes with SQLSTATE 25006 (read-only transaction).
    let err = r1
        .psql("app", "\\set VERBOSITY verbose\nINSERT INTO t VALUES (1000, 'no')")
        .expect_err("a standby takes no writes");
    assert!(err.to_string().contains("25006"), "{err}");

    // Paused replay: WAL keeps arriving but the data stays as it was, until resumed.
    r2.pause_replay().expect("pause");
    let paused_at = r2.replay_lsn().expect("replay lsn");
    primary.psql("app", "INSERT INTO t SELECT g, 'more' FROM generate_series(101, 200) g").expect("insert");
    r1.wait_caught_up(&primary).expect("r1 keeps up");
    assert_eq!(count(&r1), 200);
    assert!(primary.current_wal_lsn().expect("primary lsn") > paused_at);
    let err = r2.wait_caught_up_within(&primary, Duration::from_millis(300)).expect_err("paused");
    assert!(matches!(err, HarnessError::Timeout { .. }), "{err}");
    assert_eq!(r2.replay_lsn().expect("replay lsn"), paused_at, "replay is paused");
    assert_eq!(count(&r2), 100, "a paused replica's data does not change");
    r2.resume_replay().expect("resume");
    r2.wait_caught_up(&primary).expect("caught up after resume");
    assert_eq!(count(&r2), 200);

    // A replica stopped at once and started again keeps its port and resumes streaming.
    let port = r2.port();
    r2.stop_now().expect("stop replica 2");
    assert!(!r2.is_running());
    primary.psql("app", "INSERT INTO t VALUES (201, 'while r2 was down')").expect("insert");
    r2.start_again().expect("start replica 2 again");
    assert_eq!(r2.port(), port);
    r2.wait_caught_up(&primary).expect("r2 catches up after restart");
    assert_eq!(count(&r2), 201);

    // Failover: the primary dies, replica 1 is promoted and takes writes.
    primary.stop_now().expect("kill primary");
    assert!(!primary.is_running());
    r1.promote().expect("promote");
    assert!(!r1.is_in_recovery().expect("promoted"));
    r1.psql("app", "INSERT INTO t VALUES (202, 'after failover')").expect("write on the new primary");
    assert_eq!(count(&r1), 202);
    assert!(r2.is_in_recovery().expect("r2 still a standby of the dead primary"));

    let dirs: Vec<_> = [&primary, &r1, &r2].iter().map(|c| c.dir().to_path_buf()).collect();
    drop((primary, r1, r2));
    if !std::env::var(KEEP_ENV).is_ok_and(|v| v == "1") {
        for d in dirs {
            assert!(!d.exists(), "{} should be removed on drop", d.display());
        }
    }
}

#[test]
fn replica_options_are_checked() {
    let primary = Cluster::start(ClusterOptions::default().max_connections(50)).expect("start primary");
    let err = Cluster::start_replica(&primary, ClusterOptions::default().max_connections(20))
        .expect_err("fewer connections than the primary");
    assert!(matches!(err, HarnessError::InvalidOption(_) | HarnessError::Unsupported(_)), "{err}");
    let other = match PgVersion::from_env() {
        PgVersion::V15 => PgVersion::V18,
        PgVersion::V18 => PgVersion::V15,
    };
    let err = Cluster::start_replica(&primary, ClusterOptions::new(other)).expect_err("other version");
    assert!(matches!(err, HarnessError::InvalidOption(_)), "{err}");
}

fn pgharness(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_pgharness")).args(args).output().expect("run pgharness")
}

/// Stops pgharness clusters even when an assertion fails half-way.
struct StopOnDrop(Vec<String>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        for dir in &self.0 {
            let _ = pgharness(&["stop", "--dir", dir]);
        }
    }
}

#[test]
fn cli_starts_and_promotes_a_replica() {
    let parent = tempfile::Builder::new().prefix("pgharness-repl-").tempdir().expect("tempdir");
    let primary = parent.path().join("primary").to_str().expect("utf-8").to_owned();
    let replica = parent.path().join("replica").to_str().expect("utf-8").to_owned();
    let _guard = StopOnDrop(vec![replica.clone(), primary.clone()]);
    let out = pgharness(&["start", "--dir", &primary]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    let out = pgharness(&["start-replica", "--primary", &primary, "--dir", &replica]);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    if !out.status.success() && stderr.contains("not supported") {
        println!("SKIPPED: {stderr}");
        return;
    }
    assert!(out.status.success(), "{stderr}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("PGPORT="));
    let in_recovery = |dir: &str| {
        let out = pgharness(&["psql", "--dir", dir, "-c", "SELECT pg_is_in_recovery()"]);
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    assert_eq!(in_recovery(&replica), "t");
    assert_eq!(in_recovery(&primary), "f");
    assert!(pgharness(&["promote", "--dir", &replica]).status.success());
    assert_eq!(in_recovery(&replica), "f");
    assert_eq!(pgharness(&["start-replica", "--dir", &replica]).status.code(), Some(2), "needs --primary");
}
