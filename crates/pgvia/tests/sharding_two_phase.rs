//! Two-phase commit on a sharded database, against real shard clusters and a pgvia process
//! restarted to run its recovery: gids other roles put in `pg_prepared_xacts` are read as
//! data; clients cannot run PREPARE TRANSACTION / COMMIT PREPARED / ROLLBACK PREPARED on any
//! protocol path; and a failure injected at each step of a commit (terminated backends,
//! Toxiproxy cutting a shard or losing its replies) ends all or nothing on every shard, the
//! client told COMMIT only when the decision is durable.

// Helpers outside #[test] functions unwrap too: a failed step is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::toxiproxy::{Stream, Toxiproxy};
use common::{connect, direct_conninfo, sqlstate, DB, PASSWORD, USER};
use harness::{Cluster, ClusterOptions};
use serde_json::json;
use tokio_postgres::Client;

const SHARDS: usize = 2;
const INSTANCE: &str = "twophase";

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Two shards with table `ledger` and a role `mallory` that may connect and prepare.
fn start_shards() -> Vec<Cluster> {
    let handles: Vec<_> = (0..SHARDS)
        .map(|_| {
            std::thread::spawn(|| {
                let mut opts = ClusterOptions::default();
                opts.settings.push(("max_prepared_transactions".into(), "20".into()));
                let pg = common::start_pg_with(opts);
                pg.create_user("mallory", "mallory").unwrap();
                pg.psql(
                    DB,
                    "CREATE TABLE ledger (id bigint PRIMARY KEY, tx bigint NOT NULL); GRANT ALL ON ledger TO app;",
                )
                .unwrap();
                pg
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

/// pgvia over shards at `ports`: short timeouts, so a lost reply fails a step quickly.
fn config(ports: &[u16], port: u16) -> String {
    let mut toml = format!(
        "[general]\nlisten_addr = \"127.0.0.1\"\nlisten_port = {port}\ninstance_id = \"{INSTANCE}\"\n\
         shutdown_timeout = \"1s\"\nserver_reset_timeout = \"1s\"\n\n\
         [pool]\npool_mode = \"transaction\"\npool_size = 4\nconnect_timeout = \"1s\"\ncheckout_timeout = \"2s\"\n\n\
         [[users]]\nname = \"{USER}\"\npassword = \"{PASSWORD}\"\n\n\
         [[databases]]\nname = \"{DB}\"\nunsharded_tables = \"refuse\"\n"
    );
    for p in ports {
        toml.push_str(&format!("\n[[databases.shards]]\nhost = \"127.0.0.1\"\nport = {p}\n"));
    }
    toml.push_str("\n[[databases.sharded_tables]]\nname = \"ledger\"\ncolumn = \"id\"\ntype = \"bigint\"\n");
    toml
}

/// A pgvia process (killed when dropped), so that a restart is a new run whose recovery
/// finishes what the last one left.
struct Pgvia {
    child: std::process::Child,
    conninfo: String,
    _dir: tempfile::TempDir,
}

impl Pgvia {
    async fn start(ports: &[u16]) -> Pgvia {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pgvia.toml");
        let port = free_port();
        std::fs::write(&path, config(ports, port)).unwrap();
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_pgvia"))
            .arg("--config")
            .arg(&path)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let conninfo = format!("host=127.0.0.1 port={port} user={USER} password={PASSWORD} dbname={DB}");
        let deadline = Instant::now() + Duration::from_secs(20);
        while connect(&conninfo).await.is_err() {
            assert!(Instant::now() < deadline, "pgvia did not start");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Pgvia { child, conninfo, _dir: dir }
    }

    async fn client(&self) -> Client {
        connect(&self.conninfo).await.unwrap()
    }
}

impl Drop for Pgvia {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn directs(shards: &[Cluster]) -> Vec<Client> {
    let mut v = Vec::new();
    for s in shards {
        v.push(connect(&direct_conninfo(s, USER, PASSWORD, DB)).await.unwrap());
    }
    v
}

/// Ids of one transaction's rows, one per shard (PostgreSQL's hash of the key).
fn ids_per_shard(tx: i64) -> Vec<i64> {
    let mut found = BTreeMap::new();
    let mut candidate = tx * 1000;
    while found.len() < SHARDS {
        let shard =
            shard::ShardFunction::Hash { shards: SHARDS }.shard_of(&shard::Value::Int(candidate)).unwrap();
        found.entry(shard).or_insert(candidate);
        candidate += 1;
    }
    found.into_values().collect()
}

async fn count(c: &Client, sql: &str) -> i64 {
    c.query_one(sql, &[]).await.unwrap().get::<_, i64>(0)
}

/// Waits until no shard holds a prepared transaction of pgvia's.
async fn until_no_prepared(directs: &[Client], what: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let mut left = 0;
        for c in directs {
            left += count(c, "SELECT count(*) FROM pg_prepared_xacts WHERE gid LIKE 'pgvia\\_%'").await;
        }
        if left == 0 {
            return;
        }
        assert!(Instant::now() < deadline, "{what}: {left} prepared transactions left after recovery");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recovery_reads_a_crafted_gid_as_data() {
    let shards = start_shards();
    let d = directs(&shards).await;
    // A role on shard 0 prepares a transaction whose gid looks like pgvia's and carries SQL.
    let mallory = connect(&direct_conninfo(&shards[0], "mallory", "mallory", DB)).await.unwrap();
    let crafted = "pgvia_x_1_1'; CREATE TABLE pgvia.pwned (); --";
    mallory
        .batch_execute(&format!("BEGIN; PREPARE TRANSACTION '{}'", crafted.replace('\'', "''")))
        .await
        .unwrap();
    // One in pgvia's very form, which recovery cannot finish (not its role's): the others
    // are finished all the same.
    mallory.batch_execute("BEGIN; PREPARE TRANSACTION 'pgvia_twophase_1_2'").await.unwrap();
    // A genuine in-doubt transaction of an earlier run on shard 1, decided commit: once
    // recovery has finished it, it has read every shard's gids.
    d[0].batch_execute(
        "CREATE SCHEMA pgvia; CREATE TABLE pgvia.two_phase_decisions (gid text PRIMARY KEY, decision text NOT NULL CHECK (decision IN ('commit', 'abort')), decided_at timestamptz NOT NULL DEFAULT now());
         INSERT INTO pgvia.two_phase_decisions (gid, decision) VALUES ('pgvia_twophase_1_1', 'commit')",
    )
    .await
    .unwrap();
    let id = ids_per_shard(1)[1];
    d[1].batch_execute(&format!(
        "BEGIN; INSERT INTO ledger VALUES ({id}, 1); PREPARE TRANSACTION 'pgvia_twophase_1_1'"
    ))
    .await
    .unwrap();
    let ports: Vec<u16> = shards.iter().map(Cluster::port).collect();
    let pgvia = Pgvia::start(&ports).await;
    until_no_prepared(&d[1..], "the genuine transaction").await;
    assert_eq!(count(&d[1], "SELECT count(*) FROM ledger").await, 1, "the logged commit was not finished");
    let pwned = d[0].query_one("SELECT to_regclass('pgvia.pwned') IS NOT NULL", &[]).await.unwrap();
    assert!(!pwned.get::<_, bool>(0), "recovery ran SQL from a gid another role prepared");
    let still = d[0]
        .query_one("SELECT count(*) FROM pg_prepared_xacts WHERE gid = $1", &[&crafted])
        .await
        .unwrap()
        .get::<_, i64>(0);
    assert_eq!(still, 1, "another role's prepared transaction is not pgvia's to finish");
    drop(pgvia);
    mallory.batch_execute(&format!("ROLLBACK PREPARED '{}'", crafted.replace('\'', "''"))).await.unwrap();
    let _ = mallory.batch_execute("ROLLBACK PREPARED 'pgvia_twophase_1_2'").await;
}

/// Whether `result` is pgvia's refusal of `statement` (0A000, naming it); what it was if not.
fn refusal<T: std::fmt::Debug>(
    result: Result<T, tokio_postgres::Error>,
    statement: &str,
    path: &str,
) -> Option<String> {
    let e = match result {
        Ok(r) => return Some(format!("{statement} ({path}) ran: {r:?}")),
        Err(e) => e,
    };
    let message = e.as_db_error().map(|d| d.message().to_owned()).unwrap_or_default();
    let verb = statement.split(" '").next().unwrap_or_default();
    if sqlstate(&e).as_deref() != Some("0A000") || !message.contains(verb) {
        return Some(format!("{statement} ({path}): {:?} {message}", sqlstate(&e)));
    }
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_two_phase_statements_are_refused_on_every_path() {
    let shards = start_shards();
    let d = directs(&shards).await;
    let ports: Vec<u16> = shards.iter().map(Cluster::port).collect();
    let pgvia = Pgvia::start(&ports).await;
    let mut client = pgvia.client().await;
    let ids = ids_per_shard(7);
    let mut failures = Vec::new();
    for statement in [
        "PREPARE TRANSACTION 'pgvia_t_1_1'",
        "COMMIT PREPARED 'pgvia_t_1_1'",
        "ROLLBACK PREPARED 'pgvia_t_1_1'",
    ] {
        let mut wrong = Vec::new();
        wrong.extend(refusal(client.simple_query(statement).await, statement, "simple"));
        let multi = format!("BEGIN; INSERT INTO ledger (id, tx) VALUES ({}, 7); {statement}", ids[0]);
        wrong.extend(refusal(client.batch_execute(&multi).await, statement, "simple, in a transaction"));
        client.batch_execute("ROLLBACK").await.unwrap();
        wrong.extend(refusal(client.execute(statement, &[]).await, statement, "extended"));
        let prepared = client.prepare(statement).await.unwrap();
        wrong.extend(refusal(client.execute(&prepared, &[]).await, statement, "prepared"));
        let tx = client.transaction().await.unwrap();
        tx.execute("INSERT INTO ledger (id, tx) VALUES ($1, 7)", &[&ids[1]]).await.unwrap();
        wrong.extend(refusal(tx.execute(statement, &[]).await, statement, "extended, in a transaction"));
        tx.rollback().await.unwrap();
        failures.extend(wrong);
    }
    assert!(failures.is_empty(), "{failures:#?}");
    // The session goes on, and nothing was prepared or written on any shard.
    assert_eq!(client.query_one("SELECT count(*) FROM ledger", &[]).await.unwrap().get::<_, i64>(0), 0);
    for c in &d {
        assert_eq!(count(c, "SELECT count(*) FROM pg_prepared_xacts").await, 0);
        assert_eq!(count(c, "SELECT count(*) FROM ledger").await, 0);
    }
}

/// Where a scenario injects its failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    /// Shard `n`'s backend terminated before COMMIT: its PREPARE fails.
    PrepareFails(usize),
    /// Shard 1's PREPARE outlasts pgvia's wait (a deferred trigger sleeps): it happens after
    /// pgvia gave up on it.
    PrepareReplyLost,
    /// The backend inserting the decision terminated while it waits.
    DecisionFails,
    /// The decision goes in, but the log shard is cut off before its reply.
    DecisionReplyLost,
    /// Shard 1's backend terminated after its PREPARE: its COMMIT PREPARED fails.
    CommitPreparedFails,
    /// Shard 1 cut off after its PREPARE: COMMIT PREPARED never reaches it.
    CommitPreparedCut,
    /// Shard 1 runs COMMIT PREPARED but its reply is lost.
    CommitPreparedReplyLost,
    /// The decision row cannot be deleted.
    DeleteFails,
}

async fn terminate(c: &Client, condition: &str) {
    let sql = format!(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND {condition}"
    );
    assert_eq!(count(c, &sql).await, 1, "no backend where {condition}");
}

/// Waits until shard 0 has the decision INSERT waiting for the test's lock.
async fn until_decision_waits(c: &Client) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let sql = "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'INSERT INTO pgvia.two\\_phase\\_decisions%' AND wait_event_type = 'Lock'";
    while count(c, sql).await == 0 {
        assert!(Instant::now() < deadline, "the decision INSERT never came");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_failed_step_of_a_commit_ends_all_or_nothing() {
    let Some(toxi) = Toxiproxy::start().await else { return };
    let shards = start_shards();
    let d = directs(&shards).await;
    let mut ports = Vec::new();
    for (i, s) in shards.iter().enumerate() {
        ports.push(toxi.proxy(&format!("shard{i}"), s.port()).await);
    }
    let cut = |shard: usize, streams: &'static [Stream]| {
        let toxi = &toxi;
        async move {
            for &s in streams {
                toxi.add(&format!("shard{shard}"), "timeout", s, json!({"timeout": 0})).await;
            }
        }
    };
    const BOTH: &[Stream] = &[Stream::Upstream, Stream::Downstream];
    let faults = [
        Fault::PrepareFails(0),
        Fault::PrepareFails(1),
        Fault::PrepareReplyLost,
        Fault::DecisionFails,
        Fault::DecisionReplyLost,
        Fault::CommitPreparedFails,
        Fault::CommitPreparedCut,
        Fault::CommitPreparedReplyLost,
        Fault::DeleteFails,
    ];
    let mut failures = Vec::new();
    for (n, fault) in faults.into_iter().enumerate() {
        let tx = n as i64 + 1;
        let pgvia = Pgvia::start(&ports).await;
        until_no_prepared(&d, "before the scenario").await;
        let deadline = Instant::now() + Duration::from_secs(10);
        while count(
            &d[0],
            "SELECT count(*) FROM pg_tables WHERE schemaname = 'pgvia' AND tablename = 'two_phase_decisions'",
        )
        .await
            == 0
        {
            assert!(Instant::now() < deadline, "no decision log");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let client = pgvia.client().await;
        if fault == Fault::PrepareReplyLost {
            d[1].batch_execute(&format!(
                "CREATE FUNCTION slow() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN PERFORM pg_sleep(2); RETURN NULL; END$$;
                 CREATE CONSTRAINT TRIGGER slow AFTER INSERT ON ledger DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN (NEW.tx = {tx}) EXECUTE FUNCTION slow();"
            ))
            .await
            .unwrap();
        }
        let mut sql = String::from("BEGIN;");
        for id in ids_per_shard(tx) {
            sql.push_str(&format!("INSERT INTO ledger (id, tx) VALUES ({id}, {tx});"));
        }
        client.batch_execute(&sql).await.unwrap();
        let lock = connect(&direct_conninfo(&shards[0], USER, PASSWORD, DB)).await.unwrap();
        match fault {
            Fault::PrepareReplyLost => {}
            Fault::PrepareFails(s) => {
                terminate(&d[s], "state = 'idle in transaction' AND query LIKE 'INSERT INTO ledger%'").await
            }
            Fault::DeleteFails => d[0]
                .batch_execute(
                    "CREATE FUNCTION pgvia.no_delete() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN RAISE EXCEPTION 'injected'; END$$;
                     CREATE TRIGGER no_delete BEFORE DELETE ON pgvia.two_phase_decisions FOR EACH ROW EXECUTE FUNCTION pgvia.no_delete();",
                )
                .await
                .unwrap(),
            _ => lock.batch_execute("BEGIN; LOCK TABLE pgvia.two_phase_decisions IN EXCLUSIVE MODE").await.unwrap(),
        }
        let decisions = "SELECT count(*) FROM pgvia.two_phase_decisions WHERE decision = 'commit'";
        let decided_before = count(&d[0], decisions).await;
        let commit = tokio::spawn(async move { client.batch_execute("COMMIT").await });
        let paused = !matches!(fault, Fault::PrepareFails(_) | Fault::PrepareReplyLost | Fault::DeleteFails);
        if paused {
            until_decision_waits(&d[0]).await;
            match fault {
                Fault::DecisionFails => terminate(
                    &d[0],
                    "query LIKE 'INSERT INTO pgvia.two\\_phase\\_decisions%' AND wait_event_type = 'Lock'",
                )
                .await,
                Fault::DecisionReplyLost => cut(0, BOTH).await,
                Fault::CommitPreparedFails => {
                    terminate(&d[1], "state = 'idle' AND query LIKE 'PREPARE TRANSACTION%'").await
                }
                Fault::CommitPreparedCut => cut(1, BOTH).await,
                Fault::CommitPreparedReplyLost => cut(1, &[Stream::Downstream]).await,
                _ => {}
            }
            lock.batch_execute("COMMIT").await.unwrap();
        }
        let told = tokio::time::timeout(Duration::from_secs(30), commit)
            .await
            .unwrap_or_else(|_| panic!("{fault:?}: the COMMIT never ended"))
            .unwrap();
        if fault == Fault::PrepareReplyLost {
            // The PREPARE pgvia gave up on ends after the trigger's sleep: then recovery is due.
            let busy = "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'PREPARE TRANSACTION%' AND state = 'active'";
            let deadline = Instant::now() + Duration::from_secs(10);
            while count(&d[1], busy).await > 0 {
                assert!(Instant::now() < deadline, "the slow PREPARE never ended");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        // Heal, restart (a new run recovers at start) and let recovery finish.
        for i in 0..SHARDS {
            toxi.clear(&format!("shard{i}")).await;
        }
        if fault == Fault::DeleteFails {
            let kept = count(&d[0], decisions).await - decided_before;
            assert_eq!(kept, 1, "{fault:?}: the decision row is kept for recovery's cleanup");
            d[0].batch_execute(
                "DROP TRIGGER no_delete ON pgvia.two_phase_decisions; DROP FUNCTION pgvia.no_delete()",
            )
            .await
            .unwrap();
        }
        drop(pgvia);
        let pgvia = Pgvia::start(&ports).await;
        until_no_prepared(&d, &format!("{fault:?}")).await;
        drop(pgvia);
        if fault == Fault::PrepareReplyLost {
            // The table's owner drops what its grantee could create.
            shards[1].psql(DB, "DROP TRIGGER slow ON ledger; DROP FUNCTION slow()").unwrap();
        }
        let mut rows = Vec::new();
        for c in &d {
            rows.push(count(c, &format!("SELECT count(*) FROM ledger WHERE tx = {tx}")).await);
        }
        let all = rows.iter().all(|&r| r == 1);
        let none = rows.iter().all(|&r| r == 0);
        let code = told.as_ref().err().and_then(sqlstate);
        let outcome = format!("{fault:?}: client told {told:?}; rows per shard {rows:?}");
        eprintln!("{outcome}");
        if !(all || none) {
            failures.push(format!("{outcome}: not all or nothing"));
        } else if told.is_ok() && !all {
            failures.push(format!("{outcome}: told COMMIT, rows lost"));
        } else if told.is_err() && code.as_deref() != Some("08007") && !none {
            failures.push(format!("{outcome}: told it was rolled back, rows committed"));
        }
        let expected_commit = matches!(
            fault,
            Fault::CommitPreparedFails
                | Fault::CommitPreparedCut
                | Fault::CommitPreparedReplyLost
                | Fault::DeleteFails
        );
        if expected_commit && told.is_err() {
            failures.push(format!("{outcome}: the decision was durable, the client must be told COMMIT"));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}
