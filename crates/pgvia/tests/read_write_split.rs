//! Read/write splitting, health checks and failover (issue 8) against real streaming
//! replication: a primary and two `pg_basebackup -R` hot standbys from the harness, pgvia in
//! transaction mode in front of them.
//!
//! Where a statement ran is read from each server's own `pg_stat_statements` (see
//! `common/replicas.rs`), matching on a column alias or table name unique to the check. A
//! statement that writes (or locks rows, or takes a sequence value) fails on a hot standby with
//! SQLSTATE 25006, so its success through pgvia already shows it reached the primary.

mod common;
#[path = "read_write_split/helpers.rs"]
mod helpers;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::ops::{assert_pgbench_clean, pgbench};
use common::replicas::*;
use common::*;
use harness::Cluster;
use helpers::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reads_go_to_the_replicas_and_writes_to_the_primary() {
    let Some(rep) = start_replicated(2) else { return };
    rep.pgbench_init().await;
    rep.setup(
        "CREATE TABLE fixed (v int);\nINSERT INTO fixed SELECT generate_series(1, 100);\n\
         CREATE TABLE rw (client int, seq int, PRIMARY KEY (client, seq));",
    );
    let proxy = TestProxy::start(&split_config(&rep, ROLES, &[])).await;
    wait_healthy(&rep, &proxy).await;

    // A read-only pgbench: the replicas serve it, both of them, the primary next to nothing.
    const SELECT: &str = "SELECT abalance FROM pgbench_accounts";
    let before = rep.calls(SELECT);
    let out = pgbench(&rep.primary, &proxy, &["-S", "-n", "-c", "16", "-j", "4", "-T", "5"]).await;
    let processed = i64::try_from(assert_pgbench_clean(&out)).expect("count");
    let d = delta(&before, &rep.calls(SELECT));
    let total: i64 = d.iter().sum();
    println!("pgbench -S, 16 clients, 5 s: {processed} transactions; per server (primary, r1, r2): {d:?}");
    assert!(total >= processed, "every transaction shows up on some server: {total} < {processed}");
    assert!(d[1] * 4 >= total && d[2] * 4 >= total, "each replica serves at least a quarter: {d:?}");
    assert!(d[0] * 20 <= total, "the primary serves at most 5%: {d:?}");
    let hosts = show_hosts(&rep.primary, &proxy).await;
    for r in &rep.replicas {
        let routed: i64 = host_cell(&hosts, r.port(), "routed").parse().expect("routed is a number");
        assert!(routed > 0, "SHOW HOSTS counts transactions routed to port {}: {hosts:?}", r.port());
    }

    // TPC-B: every write on the primary (on a standby they would fail, and pgbench with them).
    const UPDATE: &str = "UPDATE pgbench_accounts";
    let before = rep.calls(UPDATE);
    let out = pgbench(&rep.primary, &proxy, &["-n", "-c", "4", "-j", "2", "-T", "2"]).await;
    let processed = i64::try_from(assert_pgbench_clean(&out)).expect("count");
    let d = delta(&before, &rep.calls(UPDATE));
    println!("pgbench TPC-B, 4 clients, 2 s: {processed} transactions; UPDATEs per server: {d:?}");
    assert!(d[0] >= processed && d[1] == 0 && d[2] == 0, "writes on the primary only: {d:?}");

    // Mixed: writers read their own writes back at once; readers read unchanging data.
    let until = Instant::now() + Duration::from_secs(3);
    let conninfo = proxy.conninfo(USER, PASSWORD, DB);
    let before = rep.calls("FROM fixed");
    let writers: Vec<_> = (0..4).map(|id| tokio::spawn(writer(conninfo.clone(), id, until))).collect();
    let readers: Vec<_> = (0..4).map(|_| tokio::spawn(reader(conninfo.clone(), until))).collect();
    let mut problems = Vec::new();
    let (mut writes, mut reads) = (0, 0);
    for w in writers {
        let (n, p) = w.await.expect("writer task");
        writes += n;
        problems.extend(p);
    }
    for r in readers {
        let (n, p) = r.await.expect("reader task");
        reads += n;
        problems.extend(p);
    }
    let d = delta(&before, &rep.calls("FROM fixed"));
    println!(
        "mixed, 3 s: {writes} insert-then-read, {reads} reads (per server {d:?}), {} problems",
        problems.len()
    );
    assert!(problems.is_empty(), "wrong results or errors: {:?}", &problems[..problems.len().min(10)]);
    assert!(writes > 0 && reads > 0);
    on_replicas(&d, i64::try_from(reads).expect("count"), "the readers' reads");
    proxy.assert_no_leaks().await;
}

/// Inserts rows one at a time and reads its own count back right after each.
async fn writer(conninfo: String, id: i32, until: Instant) -> (u64, Vec<String>) {
    let client = connect(&conninfo).await.expect("connect");
    let (mut seq, mut problems) = (0i32, Vec::new());
    while Instant::now() < until {
        seq += 1;
        if let Err(e) = client.execute("INSERT INTO rw (client, seq) VALUES ($1, $2)", &[&id, &seq]).await {
            problems.push(format!("writer {id} insert {seq}: {e}"));
            break;
        }
        match client.query_one("SELECT count(*) AS ryw FROM rw WHERE client = $1", &[&id]).await {
            Ok(row) if row.get::<_, i64>(0) == i64::from(seq) => {}
            Ok(row) => {
                problems.push(format!("writer {id}: wrote {seq} rows, read back {}", row.get::<_, i64>(0)))
            }
            Err(e) => problems.push(format!("writer {id} read {seq}: {e}")),
        }
    }
    (u64::try_from(seq).unwrap_or(0), problems)
}

async fn reader(conninfo: String, until: Instant) -> (u64, Vec<String>) {
    let client = connect(&conninfo).await.expect("connect");
    let (mut n, mut problems) = (0, Vec::new());
    while Instant::now() < until {
        match client.query_one("SELECT sum(v) AS fixed_sum FROM fixed", &[]).await {
            Ok(row) if row.get::<_, i64>(0) == 5050 => n += 1,
            Ok(row) => problems.push(format!("reader: sum {}", row.get::<_, i64>(0))),
            Err(e) => problems.push(format!("reader: {e}")),
        }
    }
    (n, problems)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn locking_sequences_writing_ctes_and_overrides() {
    let Some(rep) = start_replicated(2) else { return };
    rep.primary
        .psql(
            "postgres",
            "CREATE ROLE reporter LOGIN PASSWORD 'pw';\nCREATE ROLE writer LOGIN PASSWORD 'pw';",
        )
        .expect("roles");
    const TABLES: [&str; 11] = [
        "t",
        "plain_read",
        "ro_tx",
        "read_after_write",
        "read_then_write",
        "hint_primary",
        "hint_replica",
        "set_primary",
        "set_replica",
        "user_primary",
        "user_replica",
    ];
    rep.setup(&format!(
        "{}CREATE SEQUENCE s;\nGRANT SELECT, INSERT ON {} TO reporter, writer;\n\
         GRANT USAGE ON SEQUENCE s TO reporter, writer;",
        tables(&TABLES),
        TABLES.join(", ")
    ));
    let config = split_config(&rep, ROLES, &[])
        .user("name = \"reporter\"\npassword = \"pw\"\ndefault_role = \"replica\"")
        .user("name = \"writer\"\npassword = \"pw\"\ndefault_role = \"primary\"");
    let proxy = TestProxy::start(&config).await;
    wait_healthy(&rep, &proxy).await;

    // Plain reads from a client that has not written go to the replicas.
    let reads = proxy.connect(USER, PASSWORD, DB).await;
    let d = where_ran(&rep, &reads, "", "plain_read", 10).await;
    on_replicas(&d, 10, "plain reads");
    let before = rep.calls("FROM ro_tx");
    for _ in 0..4 {
        assert_eq!(must(&reads, "BEGIN READ ONLY; SELECT v FROM ro_tx WHERE id = 3; COMMIT").await, "30");
    }
    let d = delta(&before, &rep.calls("FROM ro_tx"));
    on_replicas(&d, 4, "BEGIN READ ONLY transactions");

    // What must run on the primary.
    let c = proxy.connect(USER, PASSWORD, DB).await;
    let before = rep.calls("FOR UPDATE");
    assert_eq!(must(&c, "SELECT v FROM t WHERE id = 1 FOR UPDATE").await, "10");
    on_primary(&delta(&before, &rep.calls("FOR UPDATE")), 1, "SELECT ... FOR UPDATE");
    let before = rep.calls("nextval");
    let (a, b) = (must(&c, "SELECT nextval('s')").await, must(&c, "SELECT nextval('s')").await);
    assert!(b.parse::<i64>().expect("b") > a.parse::<i64>().expect("a"));
    on_primary(&delta(&before, &rep.calls("nextval")), 2, "SELECT nextval(...)");
    let before = rep.calls("WITH x AS");
    let got = must(&c, "WITH x AS (INSERT INTO t VALUES (100, 1000) RETURNING *) SELECT v FROM x").await;
    assert_eq!(got, "1000");
    on_primary(&delta(&before, &rep.calls("WITH x AS")), 1, "a writing CTE");
    // The same through the extended protocol (Parse/Bind/Execute), as most drivers send them.
    let before = [rep.calls("FOR UPDATE"), rep.calls("nextval")].concat();
    c.query_one("SELECT v FROM t WHERE id = $1 FOR UPDATE", &[&1i32]).await.expect("FOR UPDATE, extended");
    let n: i64 = c.query_one("SELECT nextval('s')", &[]).await.expect("nextval, extended").get(0);
    assert!(n > b.parse::<i64>().expect("b"));
    let d = delta(&before, &[rep.calls("FOR UPDATE"), rep.calls("nextval")].concat());
    on_primary(&d[..3], 1, "SELECT ... FOR UPDATE, extended protocol");
    on_primary(&d[3..], 1, "SELECT nextval(...), extended protocol");
    // A read after a write in one transaction sees the write: same server, the primary.
    let before = rep.calls("FROM read_after_write");
    // Statement by statement, as a client sends them: pgvia cannot see the write coming.
    must(&c, "BEGIN").await;
    must(&c, "INSERT INTO read_after_write VALUES (101, 1010)").await;
    let got = must(&c, "SELECT v FROM read_after_write WHERE id = 101").await;
    must(&c, "COMMIT").await;
    assert_eq!(got, "1010");
    on_primary(
        &delta(&before, &rep.calls("FROM read_after_write")),
        1,
        "a read after a write in a transaction",
    );
    // A plain BEGIN is a read-write transaction even if it reads first.
    let before = rep.calls("FROM read_then_write");
    must(&c, "BEGIN").await;
    must(&c, "SELECT count(*) FROM read_then_write").await;
    must(&c, "INSERT INTO read_then_write VALUES (102, 1020)").await;
    must(&c, "COMMIT").await;
    on_primary(&delta(&before, &rep.calls("FROM read_then_write")), 1, "an explicit read-write transaction");

    // Hints.
    let h = proxy.connect(USER, PASSWORD, DB).await;
    let d = where_ran(&rep, &h, "/* pgvia: role=primary */ ", "hint_primary", 4).await;
    on_primary(&d, 4, "role=primary hint");
    // The client just wrote, so without the hint its reads would stay on the primary.
    must(&h, "INSERT INTO t VALUES (103, 1030)").await;
    let d = where_ran(&rep, &h, "/* pgvia: role=replica */ ", "hint_replica", 4).await;
    on_replicas(&d, 4, "role=replica hint right after a write");

    // SET pgvia.role for the session.
    let s = proxy.connect(USER, PASSWORD, DB).await;
    must(&s, "SET pgvia.role = 'primary'").await;
    let d = where_ran(&rep, &s, "", "set_primary", 4).await;
    on_primary(&d, 4, "SET pgvia.role = 'primary'");
    must(&s, "SET pgvia.role = 'replica'").await;
    let d = where_ran(&rep, &s, "", "set_replica", 4).await;
    on_replicas(&d, 4, "SET pgvia.role = 'replica'");
    refused_by_standby(&s, "SELECT nextval('s')").await;
    must(&s, "SET pgvia.role = 'auto'").await;
    must(&s, "SELECT nextval('s')").await;

    // Per-user defaults.
    let w = proxy.connect("writer", "pw", DB).await;
    let d = where_ran(&rep, &w, "", "user_primary", 4).await;
    on_primary(&d, 4, "default_role = primary");
    let r = proxy.connect("reporter", "pw", DB).await;
    let d = where_ran(&rep, &r, "", "user_replica", 4).await;
    on_replicas(&d, 4, "default_role = replica");
    refused_by_standby(&r, "SELECT nextval('s')").await;
    drop((reads, c, h, s, w, r));
    proxy.assert_no_leaks().await;
}

/// Reads in a loop through pgvia, reconnecting on error, noting when each failed one began
/// and ended.
struct Load {
    stop: AtomicBool,
    ok: AtomicU64,
    failures: Mutex<Vec<Failure>>,
}

struct Failure {
    began: Instant,
    ended: Instant,
    what: String,
}

impl Load {
    fn fail(&self, began: Instant, what: String) {
        self.failures.lock().expect("failures").push(Failure { began, ended: Instant::now(), what });
    }

    /// What went wrong in the failures `keep` selects.
    fn failures(&self, keep: impl Fn(&Failure) -> bool) -> Vec<String> {
        self.failures.lock().expect("failures").iter().filter(|f| keep(f)).map(|f| f.what.clone()).collect()
    }
}

async fn read_loop(conninfo: String, load: Arc<Load>) {
    let mut client = None;
    while !load.stop.load(Ordering::Relaxed) {
        let began = Instant::now();
        let c = match client.take() {
            Some(c) => c,
            None => match connect(&conninfo).await {
                Ok(c) => c,
                Err(e) => {
                    load.fail(began, format!("connect: {}", describe(&e)));
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
            },
        };
        let res =
            tokio::time::timeout(Duration::from_secs(5), value(&c, "SELECT v FROM under_load WHERE id = 1"));
        match res.await {
            Ok(Ok(v)) if v == "10" => {
                load.ok.fetch_add(1, Ordering::Relaxed);
                client = Some(c);
            }
            Ok(Ok(v)) => load.fail(began, format!("wrong value {v}")),
            Ok(Err(e)) => load.fail(began, describe(&e)),
            Err(_) => load.fail(began, "no answer in 5 s".into()),
        }
    }
}

/// Polls `calls(needle)` on `pg` until it exceeds `floor`; returns how long that took.
async fn wait_serving(pg: &Cluster, needle: &str, floor: i64, timeout: Duration, what: &str) -> Duration {
    let start = Instant::now();
    loop {
        let now = tokio::task::block_in_place(|| try_calls(pg, needle)).unwrap_or(floor);
        if now > floor {
            return start.elapsed();
        }
        assert!(start.elapsed() < timeout, "{what}: not within {timeout:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stopped_replica_is_banned_and_rejoins() {
    let Some(rep) = start_replicated(2) else { return };
    rep.setup(&tables(&["under_load"]));
    let proxy = TestProxy::start(&split_config(&rep, ROLES, &[])).await;
    wait_healthy(&rep, &proxy).await;
    let (r1, r2) = (&rep.replicas[0], &rep.replicas[1]);

    let load =
        Arc::new(Load { stop: AtomicBool::new(false), ok: AtomicU64::new(0), failures: Mutex::default() });
    let conninfo = proxy.conninfo(USER, PASSWORD, DB);
    let tasks: Vec<_> = (0..8).map(|_| tokio::spawn(read_loop(conninfo.clone(), load.clone()))).collect();
    wait_serving(r1, "FROM under_load", 0, Duration::from_secs(5), "replica 1 serving the load").await;
    wait_serving(r2, "FROM under_load", 0, Duration::from_secs(5), "replica 2 serving the load").await;

    let stopped_at = Instant::now();
    tokio::task::block_in_place(|| r1.stop_now()).expect("stop replica 1");
    wait_for_hosts(&rep.primary, &proxy, "replica 1 banned", Duration::from_secs(10), |h| {
        host_cell(h, r1.port(), "state") == "banned"
    })
    .await;
    let banned_at = Instant::now();
    println!("replica 1 banned {:?} after its stop", banned_at - stopped_at);
    // Under load, after the ban: reads keep being served (by replica 2) and none fails.
    let r2_before = tokio::task::block_in_place(|| calls(r2, "FROM under_load"));
    let ok_before = load.ok.load(Ordering::Relaxed);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(load.ok.load(Ordering::Relaxed) > ok_before + 50, "the load goes on");
    let r2_after = tokio::task::block_in_place(|| calls(r2, "FROM under_load"));
    assert!(r2_after > r2_before, "replica 2 serves the reads");

    tokio::task::block_in_place(|| r1.start_again()).expect("start replica 1 again");
    let restarted_at = Instant::now();
    wait_for_hosts(&rep.primary, &proxy, "replica 1 healthy again", Duration::from_secs(15), |h| {
        host_cell(h, r1.port(), "state") == "healthy"
    })
    .await;
    wait_serving(r1, "FROM under_load", 0, Duration::from_secs(10), "replica 1 serving again").await;
    println!(
        "replica 1 restarted {:?} after the ban, serving reads again {:?} after its restart",
        restarted_at - banned_at,
        restarted_at.elapsed()
    );
    assert!(banned_at.elapsed() >= Duration::from_secs(2), "rejoined only after ban_time");

    load.stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.expect("load task");
    }
    let all = load.failures(|_| true);
    let in_flight = load.failures(|f| f.began < banned_at);
    println!(
        "{} reads served; {} failed (all begun before the ban): {all:?}",
        load.ok.load(Ordering::Relaxed),
        in_flight.len()
    );
    let early = load.failures(|f| f.ended < stopped_at);
    assert!(early.is_empty(), "failures before replica 1 was stopped: {early:?}");
    let after = load.failures(|f| f.began >= banned_at);
    assert!(after.is_empty(), "transactions begun after the ban failed: {after:?}");
}

/// Runs `sql` on the primary (directly, not through pgvia) every `period` until stopped.
struct Writer {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Writer {
    async fn start(rep: &Replicated, sql: &'static str, period: Duration) -> Writer {
        let primary =
            connect(&direct_conninfo(&rep.primary, USER, PASSWORD, DB)).await.expect("connect to primary");
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let task = tokio::spawn(async move {
            while !flag.load(Ordering::Relaxed) {
                primary.batch_execute(sql).await.expect("write on the primary");
                tokio::time::sleep(period).await;
            }
        });
        Writer { stop, task }
    }

    async fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.expect("writer");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lagging_replica_leaves_rotation_until_it_catches_up() {
    const MAX_LAG: u64 = 1 << 20;
    let Some(rep) = start_replicated(2) else { return };
    rep.setup(&(tables(&["while_lagging", "after_resume"]) + "CREATE TABLE filler (id int, pad text);"));
    let lag = format!("max_replica_lag_bytes = {MAX_LAG}");
    let proxy = TestProxy::start(&split_config(&rep, ROLES, &[&lag])).await;
    wait_healthy(&rep, &proxy).await;
    let (r1, r2) = (&rep.replicas[0], &rep.replicas[1]);
    let reads = proxy.connect(USER, PASSWORD, DB).await;

    // Replay paused on replica 1 while the primary writes about 1 MB/s (connected directly).
    tokio::task::block_in_place(|| r1.pause_replay()).expect("pause replay");
    let writer = Writer::start(
        &rep,
        "INSERT INTO filler SELECT g, repeat('x', 200) FROM generate_series(1, 100) g",
        Duration::from_millis(20),
    )
    .await;
    let hosts = wait_for_hosts(&rep.primary, &proxy, "replica 1 lagging", Duration::from_secs(15), |h| {
        host_cell(h, r1.port(), "state") == "lagging"
    })
    .await;
    let lag_bytes: u64 = host_cell(&hosts, r1.port(), "lag_bytes").parse().expect("lag_bytes");
    assert!(lag_bytes > MAX_LAG, "SHOW HOSTS lag_bytes {lag_bytes} beyond {MAX_LAG}");
    assert_eq!(host_cell(&hosts, r2.port(), "state"), "healthy", "replica 2 keeps up: {hosts:?}");
    // Writing stops here so that replica 2, which replays as it goes, is surely within the
    // threshold at every health check below (on a slow machine it could trail by a few
    // hundred kB while the writer runs); replica 1 stays paused, so it stays behind.
    writer.stop().await;
    tokio::task::block_in_place(|| r2.wait_caught_up(&rep.primary)).expect("replica 2 catches up");
    let d = where_ran(&rep, &reads, "", "while_lagging", 40).await;
    assert_eq!(d, [0, 0, 40], "while replica 1 lags, replica 2 serves every read");
    let hosts = show_hosts(&rep.primary, &proxy).await;
    assert_eq!(host_cell(&hosts, r1.port(), "state"), "lagging", "{hosts:?}");

    tokio::task::block_in_place(|| r1.resume_replay()).expect("resume replay");
    wait_for_hosts(&rep.primary, &proxy, "replica 1 healthy after resuming", Duration::from_secs(15), |h| {
        host_cell(h, r1.port(), "state") == "healthy"
    })
    .await;
    let d = where_ran(&rep, &reads, "", "after_resume", 40).await;
    assert_eq!(d[0], 0, "{d:?}");
    assert!(d[1] >= 10 && d[2] >= 10, "both replicas in rotation again: {d:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_promoted_replica_takes_the_writes_without_a_reload() {
    let Some(rep) = start_replicated(2) else { return };
    rep.setup("CREATE TABLE t (id int PRIMARY KEY, v int);");
    let proxy = TestProxy::start(&split_config(&rep, ["auto", "auto", "auto"], &[])).await;
    wait_healthy(&rep, &proxy).await;
    let (old, new) = (&rep.primary, &rep.replicas[0]);
    let conninfo = proxy.conninfo(USER, PASSWORD, DB);
    let client = connect(&conninfo).await.expect("connect");
    must(&client, "INSERT INTO t VALUES (1, 1)").await;
    // Committed asynchronously (the harness runs with synchronous_commit off): let it reach
    // the replicas before the primary dies, or the promoted one rightly lacks it.
    tokio::task::block_in_place(|| rep.wait_caught_up());

    tokio::task::block_in_place(|| old.stop_now()).expect("kill the primary");
    let promote_at = Instant::now();
    tokio::task::block_in_place(|| new.promote()).expect("promote replica 1");
    println!("pg_ctl promote took {:?}", promote_at.elapsed());

    // Write until it works (reconnecting after errors); give it 20 s to say how long it took.
    let mut client = Some(client);
    let mut errors = Vec::new();
    let took = loop {
        let c = match client.take() {
            Some(c) => c,
            None => match connect(&conninfo).await {
                Ok(c) => c,
                Err(e) => {
                    errors.push(format!("connect: {}", describe(&e)));
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        match tokio::time::timeout(Duration::from_secs(5), value(&c, "INSERT INTO t VALUES (2, 2)")).await {
            Ok(Ok(_)) => break promote_at.elapsed(),
            Ok(Err(e)) => errors.push(describe(&e)),
            Err(_) => errors.push("no answer in 5 s".into()),
        }
        assert!(promote_at.elapsed() < Duration::from_secs(20), "no write succeeded within 20 s: {errors:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
        client = None;
    };
    println!(
        "first write through pgvia {took:?} after the promote began ({} failed attempts before)",
        errors.len()
    );
    assert!(took < Duration::from_secs(5), "writes on the new primary within 5 s, took {took:?}: {errors:?}");
    let rows =
        tokio::task::block_in_place(|| new.psql(DB, "SELECT string_agg(id::text, ',' ORDER BY id) FROM t"));
    assert_eq!(rows.expect("read the new primary"), "1,2", "the write landed on the promoted server");
    let hosts = show_hosts(old, &proxy).await;
    assert_eq!(host_cell(&hosts, new.port(), "role"), "primary", "{hosts:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reads_fall_back_to_the_primary_when_every_replica_is_down() {
    let Some(rep) = start_replicated(2) else { return };
    rep.setup(&tables(&["fallback"]));
    let proxy = TestProxy::start(&split_config(&rep, ROLES, &[])).await;
    wait_healthy(&rep, &proxy).await;
    let client = proxy.connect(USER, PASSWORD, DB).await;
    for r in &rep.replicas {
        tokio::task::block_in_place(|| r.stop_now()).expect("stop a replica");
    }
    let ports: Vec<u16> = rep.replicas.iter().map(|r| r.port()).collect();
    wait_for_hosts(&rep.primary, &proxy, "both replicas banned", Duration::from_secs(10), |h| {
        ports.iter().all(|&p| host_cell(h, p, "state") == "banned")
    })
    .await;
    let before = tokio::task::block_in_place(|| calls(&rep.primary, "FROM fallback"));
    for _ in 0..20 {
        // Begun after both bans, so none may fail.
        let got = match value(&client, "SELECT v FROM fallback WHERE id = 2").await {
            Ok(v) => v,
            Err(e) => panic!("a read with every replica banned failed: {}", describe(&e)),
        };
        assert_eq!(got, "20");
    }
    let after = tokio::task::block_in_place(|| calls(&rep.primary, "FROM fallback"));
    assert_eq!(after - before, 20, "the primary serves the reads when no replica can");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn load_balancing_modes() {
    let Some(rep) = start_replicated(2) else { return };
    rep.setup(&tables(&["lb_random", "lb_primary_reads", "lb_least"]));

    // random: 60 reads land on both replicas (all on one has probability 2^-59).
    let proxy = TestProxy::start(&split_config(&rep, ROLES, &["load_balance = \"random\""])).await;
    wait_healthy(&rep, &proxy).await;
    let c = proxy.connect(USER, PASSWORD, DB).await;
    let d = where_ran(&rep, &c, "", "lb_random", 60).await;
    on_replicas(&d, 60, "load_balance = random");
    assert!(d[1] > 0 && d[2] > 0, "random uses both replicas: {d:?}");
    drop(c);
    proxy.stop().await;

    // primary_reads: the primary takes its turn in the rotation.
    let proxy = TestProxy::start(&split_config(&rep, ROLES, &["primary_reads = true"])).await;
    wait_healthy(&rep, &proxy).await;
    let c = proxy.connect(USER, PASSWORD, DB).await;
    let d = where_ran(&rep, &c, "", "lb_primary_reads", 60).await;
    assert_eq!(d.iter().sum::<i64>(), 60);
    assert!(d.iter().all(|&n| n >= 10), "round robin over all three servers: {d:?}");
    drop(c);
    proxy.stop().await;

    // least_connections: concurrent readers, all served by the replicas.
    let proxy = TestProxy::start(&split_config(&rep, ROLES, &["load_balance = \"least_connections\""])).await;
    wait_healthy(&rep, &proxy).await;
    let before = rep.calls("FROM lb_least");
    let conninfo = proxy.conninfo(USER, PASSWORD, DB);
    let readers: Vec<_> = (0..8)
        .map(|_| {
            let conninfo = conninfo.clone();
            tokio::spawn(async move {
                let c = connect(&conninfo).await.expect("connect");
                for _ in 0..20 {
                    assert_eq!(must(&c, "SELECT v FROM lb_least WHERE id = 2").await, "20");
                }
            })
        })
        .collect();
    for r in readers {
        r.await.expect("reader");
    }
    let d = delta(&before, &rep.calls("FROM lb_least"));
    println!("least_connections, 8 clients x 20 reads: per server {d:?}");
    on_replicas(&d, 160, "load_balance = least_connections");
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn time_lag_threshold() {
    const TICK_MS: u64 = 1500;
    let Some(rep) = start_replicated(2) else { return };
    rep.setup(&(tables(&["time_lag"]) + "CREATE TABLE ticks (at timestamptz);"));
    let config = split_config(&rep, ROLES, &["max_replica_lag = \"1s\"", "max_replica_lag_bytes = 0"]);
    let proxy = TestProxy::start(&config).await;
    wait_healthy(&rep, &proxy).await;
    let (r1, r2) = (&rep.replicas[0], &rep.replicas[1]);

    // A write every 1.5 s on the primary (directly): sparser than the 1 s threshold, so a lag
    // taken as "time since the last replayed commit" would wrongly flag caught-up replicas.
    let writer =
        Writer::start(&rep, "INSERT INTO ticks VALUES (now())", Duration::from_millis(TICK_MS)).await;

    // Replicas that keep up within milliseconds never leave rotation for time lag.
    let watch_until = Instant::now() + Duration::from_secs(4);
    let mut seen = Vec::new();
    while Instant::now() < watch_until {
        let hosts = show_hosts(&rep.primary, &proxy).await;
        for r in [r1, r2] {
            let state = host_cell(&hosts, r.port(), "state");
            if state != "healthy" {
                seen.push(format!(
                    "port {}: {state}, lag_ms {}",
                    r.port(),
                    host_cell(&hosts, r.port(), "lag_ms")
                ));
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(seen.is_empty(), "caught-up replicas reported out of rotation: {seen:?}");

    // Paused replay: replica 1 falls behind in time and leaves rotation, then comes back.
    tokio::task::block_in_place(|| r1.pause_replay()).expect("pause replay");
    let hosts =
        wait_for_hosts(&rep.primary, &proxy, "replica 1 lagging by time", Duration::from_secs(10), |h| {
            host_cell(h, r1.port(), "state") == "lagging"
        })
        .await;
    let lag_ms: u64 = host_cell(&hosts, r1.port(), "lag_ms").parse().expect("lag_ms");
    assert!(lag_ms > 1000, "SHOW HOSTS lag_ms {lag_ms} beyond 1 s");
    let d = where_ran(&rep, &proxy.connect(USER, PASSWORD, DB).await, "", "time_lag", 20).await;
    assert_eq!(d[1], 0, "replica 1 serves nothing while it lags: {d:?}");
    tokio::task::block_in_place(|| r1.resume_replay()).expect("resume replay");
    wait_for_hosts(&rep.primary, &proxy, "replica 1 healthy after resuming", Duration::from_secs(10), |h| {
        host_cell(h, r1.port(), "state") == "healthy"
    })
    .await;
    writer.stop().await;
}

/// `SET pgvia.role` that reaches pgvia while the client still holds a server (sent right
/// behind a query, before its reply) is answered by pgvia in order and takes effect for the
/// next transaction, as one sent between transactions does.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn set_role_pipelined_behind_a_query() {
    let Some(rep) = start_replicated(2) else { return };
    rep.setup(&tables(&["after_set"]));
    let proxy = TestProxy::start(&split_config(&rep, ROLES, &[])).await;
    wait_healthy(&rep, &proxy).await;
    let c = proxy.connect(USER, PASSWORD, DB).await;
    for role in ["primary", "replica"] {
        // Both messages leave the client before the first reply comes back.
        let sql = format!("SET pgvia.role = '{role}'");
        let (slow, set) = tokio::join!(c.simple_query("SELECT pg_sleep(0.3)"), c.simple_query(&sql));
        slow.expect("pg_sleep");
        set.expect("SET pgvia.role");
        assert_eq!(must(&c, "SHOW pgvia.role").await, role);
        let d = where_ran(&rep, &c, "", "after_set", 4).await;
        if role == "primary" {
            on_primary(&d, 4, "after a pipelined SET pgvia.role = 'primary'");
        } else {
            on_replicas(&d, 4, "after a pipelined SET pgvia.role = 'replica'");
        }
    }
    drop(c);
    proxy.assert_no_leaks().await;
}

/// The replies to one simple query or one Sync: the error's SQLSTATE, if any.
async fn exchange_error(conn: &mut common::raw::RawConn) -> Option<String> {
    conn.until_ready().await.into_iter().find(|m| m.tag == b'E').and_then(|m| m.sqlstate())
}

/// A write the client pipelines behind a read a replica is serving (sent after pgvia took the
/// replica, before its answer) waits for that answer and runs on the primary, in the simple and
/// the extended protocol. Inside a `READ ONLY` block it stays with the block and fails there as
/// it would on the primary.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_write_pipelined_behind_a_replica_read_goes_to_the_primary() {
    use common::raw::{bind, execute, parse, query, sync, RawConn};
    let Some(rep) = start_replicated(2) else { return };
    rep.setup(&tables(&["piped"]));
    let proxy = TestProxy::start(&split_config(&rep, ROLES, &["read_your_writes = \"0s\""])).await;
    wait_healthy(&rep, &proxy).await;
    let mut conn = RawConn::login(proxy.addr, USER, PASSWORD, DB).await.expect("login");
    let slow_read = "SELECT pg_sleep(0.3), count(*) FROM piped";
    let before = rep.calls("FROM piped");
    for round in 0..3 {
        conn.send(&query(slow_read)).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        conn.send(&query(&format!("INSERT INTO piped VALUES ({}, 0)", 100 + round))).await;
        let extended = format!("INSERT INTO piped VALUES ({}, 0)", 200 + round);
        conn.send(&[parse("", &extended), bind("", "", &[]), execute("", 0), sync()].concat()).await;
        assert_eq!(exchange_error(&mut conn).await, None, "round {round}: the read");
        assert_eq!(
            exchange_error(&mut conn).await,
            None,
            "round {round}: the simple INSERT (25006: a replica)"
        );
        assert_eq!(exchange_error(&mut conn).await, None, "round {round}: the extended INSERT");
    }
    on_replicas(&delta(&before, &rep.calls("FROM piped")), 3, "the slow reads");
    let written =
        tokio::task::block_in_place(|| rep.primary.psql(DB, "SELECT count(*) FROM piped WHERE id >= 100"));
    assert_eq!(written.expect("count on the primary"), "6");

    // In a READ ONLY block the write belongs to the block: refused, and the session goes on.
    conn.send(&query(&format!("BEGIN READ ONLY; {slow_read}"))).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    conn.send(&query("INSERT INTO piped VALUES (300, 0)")).await;
    conn.send(&query("ROLLBACK")).await;
    assert_eq!(exchange_error(&mut conn).await, None, "BEGIN READ ONLY and the read");
    assert_eq!(exchange_error(&mut conn).await.as_deref(), Some("25006"), "a write in a READ ONLY block");
    assert_eq!(exchange_error(&mut conn).await, None, "ROLLBACK");
    conn.send(&query("INSERT INTO piped VALUES (301, 0)")).await;
    assert_eq!(exchange_error(&mut conn).await, None, "a write after the block");
    drop(conn);
    proxy.assert_no_leaks().await;
}
