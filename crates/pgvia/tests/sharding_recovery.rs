//! Two-phase commit survives pgvia being killed at any moment: a pgvia process commits
//! transactions that each write one row on every shard, and is SIGKILLed again and again
//! mid-stream. After each restart its recovery finishes what was in doubt; at the end every
//! transaction is all or nothing across the shards, and no shard keeps a prepared transaction.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::{DB, PASSWORD, USER};
use harness::{Cluster, ClusterOptions};

const SHARDS: usize = 4;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port()
}

fn config(shards: &[Cluster], port: u16) -> String {
    let mut toml = format!(
        "[general]\nlisten_addr = \"127.0.0.1\"\nlisten_port = {port}\ninstance_id = \"crashtest\"\nshutdown_timeout = \"1s\"\n\n\
         [pool]\npool_mode = \"transaction\"\npool_size = 4\n\n[[users]]\nname = \"{USER}\"\npassword = \"{PASSWORD}\"\n\n\
         [[databases]]\nname = \"{DB}\"\nunsharded_tables = \"refuse\"\n"
    );
    for s in shards {
        toml.push_str(&format!("\n[[databases.shards]]\nhost = \"{}\"\nport = {}\n", s.host(), s.port()));
    }
    toml.push_str("\n[[databases.sharded_tables]]\nname = \"ledger\"\ncolumn = \"id\"\ntype = \"bigint\"\n");
    toml
}

/// Ids of one transaction's rows: one per shard (found by PostgreSQL's hash of the key).
fn ids_per_shard(tx: i64) -> Vec<i64> {
    let mut found = BTreeMap::new();
    let mut candidate = tx * 1000;
    while found.len() < SHARDS {
        let shard = shard::ShardFunction::Hash { shards: SHARDS }
            .shard_of(&shard::Value::Int(candidate))
            .expect("hash");
        found.entry(shard).or_insert(candidate);
        candidate += 1;
    }
    found.into_values().collect()
}

async fn prepared_count(shards: &[Cluster]) -> i64 {
    let mut n = 0;
    for s in shards {
        let c = common::connect(&common::direct_conninfo(s, USER, PASSWORD, DB)).await.expect("direct");
        n +=
            c.query_one("SELECT count(*) FROM pg_prepared_xacts", &[]).await.expect("count").get::<_, i64>(0);
    }
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_mid_commit_and_recovered_all_or_nothing() {
    let shards: Vec<Cluster> = (0..SHARDS)
        .map(|_| {
            std::thread::spawn(|| {
                let mut opts = ClusterOptions::default();
                opts.settings.push(("max_prepared_transactions".into(), "50".into()));
                let pg = common::start_pg_with(opts);
                pg.psql(DB, "CREATE TABLE ledger (id bigint PRIMARY KEY, tx bigint NOT NULL); GRANT ALL ON ledger TO app;")
                    .expect("schema");
                pg
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|h| h.join().expect("cluster"))
        .collect();
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("pgvia.toml");
    let port = free_port();
    std::fs::write(&path, config(&shards, port)).expect("write config");
    let conninfo = format!("host=127.0.0.1 port={port} user={USER} password={PASSWORD} dbname={DB}");
    let mut tx: i64 = 1;
    let mut acknowledged = Vec::new();
    // Prepared transactions found right after a kill: what recovery had to finish.
    let mut in_doubt = 0;
    for round in 0..8u64 {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_pgvia"))
            .arg("--config")
            .arg(&path)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start pgvia");
        let client = loop {
            if let Ok(c) = common::connect(&conninfo).await {
                break c;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        // Kill at a different moment each round, while commits are running.
        let kill_after = Duration::from_millis(150 + round * 97);
        let started = Instant::now();
        while started.elapsed() < kill_after {
            let ids = ids_per_shard(tx);
            let mut sql = String::from("BEGIN;");
            for id in &ids {
                sql.push_str(&format!("INSERT INTO ledger (id, tx) VALUES ({id}, {tx});"));
            }
            sql.push_str("COMMIT;");
            match client.batch_execute(&sql).await {
                Ok(()) => acknowledged.push(tx),
                Err(e) if acknowledged.is_empty() => eprintln!("commit failed: {e:?}"),
                Err(_) => {}
            }
            tx += 1;
        }
        // Commits in flight from another task when the kill lands.
        let busy = tokio::spawn({
            let conninfo = conninfo.clone();
            let first = tx;
            async move {
                if let Ok(c) = common::connect(&conninfo).await {
                    for t in first..first + 200 {
                        let mut sql = String::from("BEGIN;");
                        for id in ids_per_shard(t) {
                            sql.push_str(&format!("INSERT INTO ledger (id, tx) VALUES ({id}, {t});"));
                        }
                        sql.push_str("COMMIT;");
                        if c.batch_execute(&sql).await.is_err() {
                            break;
                        }
                    }
                }
            }
        });
        tokio::time::sleep(Duration::from_millis(40 + round * 13)).await;
        child.kill().expect("SIGKILL pgvia");
        let _ = child.wait();
        let _ = busy.await;
        tx += 200;
        in_doubt += prepared_count(&shards).await;
    }
    // A last run recovers what the last kill left, then stops.
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_pgvia"))
        .arg("--config")
        .arg(&path)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start pgvia");
    let deadline = Instant::now() + Duration::from_secs(20);
    let directs: Vec<_> = {
        let mut v = Vec::new();
        for s in &shards {
            v.push(common::connect(&common::direct_conninfo(s, USER, PASSWORD, DB)).await.expect("direct"));
        }
        v
    };
    loop {
        let mut left = 0i64;
        for c in &directs {
            left += c
                .query_one("SELECT count(*) FROM pg_prepared_xacts", &[])
                .await
                .expect("prepared")
                .get::<_, i64>(0);
        }
        if left == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "{left} prepared transactions left after recovery");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    child.kill().expect("stop pgvia");
    let _ = child.wait();
    // All or nothing: every transaction has 0 or SHARDS rows, and every acknowledged one has all.
    let mut rows: BTreeMap<i64, usize> = BTreeMap::new();
    for c in &directs {
        for r in c.query("SELECT tx FROM ledger", &[]).await.expect("ledger") {
            *rows.entry(r.get::<_, i64>(0)).or_default() += 1;
        }
    }
    let partial: Vec<_> = rows.iter().filter(|(_, &n)| n != SHARDS).collect();
    assert!(partial.is_empty(), "transactions with rows on only some shards: {partial:?}");
    for t in &acknowledged {
        assert_eq!(rows.get(t), Some(&SHARDS), "acknowledged transaction {t} lost");
    }
    assert!(acknowledged.len() > 10, "only {} transactions committed", acknowledged.len());
    eprintln!(
        "{} transactions acknowledged; {in_doubt} prepared transactions left in doubt by the kills",
        acknowledged.len()
    );
}
