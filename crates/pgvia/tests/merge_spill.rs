//! Cross-shard merges past `limits.merge_memory_budget`: four real shards and a reference
//! holding every row. With spilling on, grouping, the sort after grouping and DISTINCT spill
//! to files in `limits.merge_spill_dir` and give the reference's answer; the files are gone
//! when the query ends, fails or its client leaves; with spilling off the query fails with
//! 53200 naming the settings. A plain ORDER BY streams and needs no spilling.
//!
//! The 5-million-row run with a 64 MiB budget (and pgvia's peak RSS) is `#[ignore]`d:
//! `cargo test --release -p pgvia --test merge_spill -- --ignored --nocapture`.

#![allow(clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::raw::{query, RawConn};
use common::shards::{self, ShardClusters};
use common::{TestProxy, DB, PASSWORD, USER};
use tokio_postgres::SimpleQueryMessage;

const SCHEMA: &str = "CREATE TABLE big (id bigint PRIMARY KEY, g bigint NOT NULL, v int NOT NULL);
CREATE TABLE place (id bigint) PARTITION BY HASH (id);";

/// Loads rows 1..=`rows` (`g = id % groups`, `v = id * 7 % 1000`): all on the reference, and
/// on each shard the rows PostgreSQL's hash partitioning (pgvia's placement) gives it.
fn load(c: &ShardClusters, rows: u64, groups: u64) {
    let select =
        format!("SELECT i, i % {groups}, (i * 7 % 1000)::int FROM generate_series(1, {rows}::bigint) i");
    std::thread::scope(|scope| {
        for (r, shard) in c.shards.iter().enumerate() {
            let sql = format!(
                "CREATE TABLE place_{r} PARTITION OF place FOR VALUES WITH (MODULUS 4, REMAINDER {r});
                 INSERT INTO big {select} WHERE satisfies_hash_partition('place'::regclass, 4, {r}, i);
                 ANALYZE big;"
            );
            scope.spawn(move || shard.psql(DB, &sql).expect("load a shard"));
        }
        c.reference.psql(DB, &format!("INSERT INTO big {select}; ANALYZE big;")).expect("load the reference");
    });
}

fn spill_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("merge-spill-test-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The process spill directories (`pgvia-spill-<pid>-<stamp>`) in `dir`.
fn process_dirs(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    entries
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with("pgvia-spill-"))
        .map(|e| e.path())
        .collect()
}

/// Spill files (`*.spill`) in the process spill directories in `dir`.
fn files_in(dir: &Path) -> usize {
    let spills = |d: &Path| {
        std::fs::read_dir(d).map_or(0, |es| {
            es.filter_map(Result::ok).filter(|e| e.file_name().to_string_lossy().ends_with(".spill")).count()
        })
    };
    process_dirs(dir).iter().map(|d| spills(d)).sum()
}

/// Counts the spill files in `dir` every few milliseconds until dropped; `most` is the
/// largest count seen.
struct Watch {
    most: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
}

impl Watch {
    fn start(dir: &Path) -> Watch {
        let (most, stop) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicBool::new(false)));
        let (m, s, dir) = (most.clone(), stop.clone(), dir.to_owned());
        std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                m.fetch_max(files_in(&dir), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        Watch { most, stop }
    }

    fn most(&self) -> usize {
        self.most.load(Ordering::Relaxed)
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Waits up to `limit` for `dir` to hold no file.
async fn emptied(dir: &Path, limit: Duration) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if files_in(dir) == 0 {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

type Rows = Vec<Vec<Option<String>>>;

async fn rows_of(client: &tokio_postgres::Client, sql: &str, ordered: bool) -> Result<Rows, String> {
    let messages = client.simple_query(sql).await.map_err(|e| {
        let db = e.as_db_error();
        format!(
            "{} {}",
            db.map_or("?", |d| d.code().code()),
            db.map_or(e.to_string(), |d| d.message().to_owned())
        )
    })?;
    let mut rows: Rows = messages
        .into_iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(r) => Some((0..r.len()).map(|i| r.get(i).map(str::to_owned)).collect()),
            _ => None,
        })
        .collect();
    if !ordered {
        rows.sort();
    }
    Ok(rows)
}

fn config(c: &ShardClusters, budget: u64, spill: Option<&Path>) -> String {
    shards::config_with(c, &["big"], |b| {
        let b = b.limits(&format!("merge_memory_budget = {budget}"));
        match spill {
            Some(dir) => b.limits(&format!("merge_spill_dir = \"{}\"", dir.display())),
            None => b.limits("merge_spill = false"),
        }
    })
}

/// 100,000 rows in 40,000 groups, 1 MiB budget: every grouping, sort and DISTINCT below
/// needs several times the budget (the spill counts are printed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn merges_past_the_budget_spill_and_equal_the_reference() {
    let c = shards::start(SCHEMA);
    load(&c, 100_000, 40_000);
    let dir = spill_dir("small");
    let proxy = TestProxy::start_toml(&config(&c, 1 << 20, Some(&dir))).await;
    let through = proxy.connect(USER, PASSWORD, DB).await;
    let reference =
        common::connect(&common::direct_conninfo(&c.reference, USER, PASSWORD, DB)).await.unwrap();

    let spilling = [
        // 200,000 groups, then sorted by an aggregate: the grouping spills, the sort runs.
        ("SELECT g, count(*), sum(v) FROM big GROUP BY g ORDER BY count(*) DESC, sum(v) DESC, g LIMIT 50", true),
        ("SELECT g, count(*) AS n, max(v) FROM big GROUP BY g HAVING count(*) > 2 ORDER BY max(v), g OFFSET 100 LIMIT 30", true),
        ("SELECT DISTINCT g FROM big", false),
        ("SELECT g % 10000 AS h, count(DISTINCT v) FROM big GROUP BY 1", false),
    ];
    for (sql, ordered) in spilling {
        let watch = Watch::start(&dir);
        let got = rows_of(&through, sql, ordered).await;
        let most = watch.most();
        let want = rows_of(&reference, sql, ordered).await;
        assert_eq!(got, want, "{sql}");
        assert!(most > 0, "no spill file seen during {sql}");
        assert!(emptied(&dir, Duration::from_secs(5)).await, "spill files left after {sql}");
        println!("{sql}: {} rows, up to {most} spill files", want.unwrap().len());
    }
    // A plain ORDER BY streams: no spill, whatever the OFFSET.
    let sql = "SELECT id, v FROM big ORDER BY v DESC, id OFFSET 99900";
    let watch = Watch::start(&dir);
    assert_eq!(rows_of(&through, sql, true).await, rows_of(&reference, sql, true).await, "{sql}");
    assert_eq!(watch.most(), 0, "a streaming ORDER BY spilled");

    // A query that fails on one shard after the others' rows spilled: the files go with it.
    let failing = "SELECT g, count(*) FROM big \
                   WHERE CASE WHEN id = 99999 THEN length(pg_sleep(1.5)::text) / 0 ELSE 1 END = 1 GROUP BY g";
    let watch = Watch::start(&dir);
    let e = rows_of(&through, failing, false).await.unwrap_err();
    assert!(e.starts_with("22012"), "{e}");
    assert!(watch.most() > 0, "the failing query spilled before its error");
    assert!(emptied(&dir, Duration::from_secs(5)).await, "spill files left after an error");

    // A client that leaves mid-query: its files are removed once the session notices.
    let mut raw = RawConn::login(proxy.addr, USER, PASSWORD, DB).await.unwrap();
    raw.send(&query(
        "SELECT g, count(*) FROM big WHERE CASE WHEN id = 99999 THEN length(pg_sleep(1.5)::text) ELSE 1 END > 0 \
         GROUP BY g ORDER BY count(*), g",
    ))
    .await;
    let start = Instant::now();
    while files_in(&dir) == 0 && start.elapsed() < Duration::from_secs(20) {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(files_in(&dir) > 0, "the query spilled");
    drop(raw);
    assert!(emptied(&dir, Duration::from_secs(30)).await, "spill files left after the client left");

    // Spilling off: the old error, naming the settings; the session goes on.
    let off = TestProxy::start_toml(&config(&c, 1 << 20, None)).await;
    let client = off.connect(USER, PASSWORD, DB).await;
    let e = rows_of(&client, spilling[0].0, true).await.unwrap_err();
    assert!(e.starts_with("53200") && e.contains("merge_memory_budget") && e.contains("merge_spill"), "{e}");
    assert_eq!(
        rows_of(&client, "SELECT count(*) FROM big", false).await.unwrap(),
        [vec![Some("100000".into())]]
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Starts the pgvia binary on `toml` (logs on stdout, text), and waits until it accepts.
async fn spawn_pgvia(toml: &str, file: &Path, port: u16) -> tokio::process::Child {
    std::fs::write(file, toml).unwrap();
    let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_pgvia"))
        .arg("--config")
        .arg(file)
        .env_remove("RUST_LOG")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    for _ in 0..300 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_ok() {
            return child;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("pgvia did not start listening on {port}");
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Whether some process holds the `flock` on `lock`.
fn locked(lock: &Path) -> bool {
    let Ok(f) = std::fs::OpenOptions::new().write(true).open(lock) else { return false };
    matches!(f.try_lock(), Err(std::fs::TryLockError::WouldBlock))
}

/// pgvia killed with SIGKILL while a merge spills leaves its spill directory behind; the
/// next start removes it and says so in its log, and keeps what pgvia did not make (a file
/// beside it, a spill-named file outside a process directory) and the directory of another
/// pgvia that is alive (its lock held by a live process).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_pgvias_spill_directory_is_removed_at_the_next_start() {
    let c = shards::start(SCHEMA);
    load(&c, 100_000, 50_000);
    let dir = spill_dir("crash");
    std::fs::write(dir.join("keep-me.txt"), "not pgvia's").unwrap();
    std::fs::write(dir.join("pgvia-merge-0-0.spill"), "outside any process directory").unwrap();
    let live = dir.join("pgvia-spill-1-1");
    std::fs::create_dir(&live).unwrap();
    std::fs::write(live.join("pgvia-merge-0-0.spill"), "in use").unwrap();
    let mut holder =
        std::process::Command::new("flock").arg(live.join("lock")).args(["sleep", "600"]).spawn().unwrap();
    let start = Instant::now();
    while !locked(&live.join("lock")) {
        assert!(start.elapsed() < Duration::from_secs(10), "flock(1) took the lock");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let conf = tempfile::tempdir().unwrap();
    let toml = |port: u16| {
        shards::config_with(&c, &["big"], |b| {
            b.general(&format!("listen_port = {port}"))
                .limits("merge_memory_budget = 65536")
                .limits(&format!("merge_spill_dir = \"{}\"", dir.display()))
        })
    };
    let port = free_port();
    let mut first = spawn_pgvia(&toml(port), &conf.path().join("a.toml"), port).await;
    let conninfo = format!("host=127.0.0.1 port={port} user={USER} password={PASSWORD} dbname={DB}");
    let client = common::connect(&conninfo).await.unwrap();
    // One shard stalls on its last row while the others' rows spill.
    let running = tokio::spawn(async move {
        let sql = "SELECT g, count(*) FROM big WHERE CASE WHEN id = 99999 THEN length(pg_sleep(20)::text) \
                   ELSE 1 END > 0 GROUP BY g ORDER BY count(*), g";
        let _ = client.simple_query(sql).await;
    });
    let crashed = loop {
        let ours: Vec<PathBuf> = process_dirs(&dir).into_iter().filter(|d| *d != live).collect();
        let spilled = |d: &PathBuf| std::fs::read_dir(d).map_or(0, |es| es.count()) > 1;
        if let Some(d) = ours.iter().find(|d| spilled(d)) {
            break d.clone();
        }
        assert!(start.elapsed() < Duration::from_secs(60), "the query spilled");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    first.start_kill().unwrap();
    first.wait().await.unwrap();
    running.abort();
    let left: Vec<String> = std::fs::read_dir(&crashed)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into())
        .collect();
    assert!(left.iter().any(|f| f == "lock") && left.iter().any(|f| f.ends_with(".spill")), "{left:?}");
    println!("killed pgvia left {} with {left:?}", crashed.display());

    let port = free_port();
    let second = spawn_pgvia(&toml(port), &conf.path().join("b.toml"), port).await;
    assert!(!crashed.exists(), "the killed pgvia's directory is removed at start");
    assert!(live.join("pgvia-merge-0-0.spill").exists(), "a live pgvia's directory is kept");
    assert!(dir.join("keep-me.txt").exists() && dir.join("pgvia-merge-0-0.spill").exists());
    let pid = second.id().unwrap().to_string();
    tokio::process::Command::new("kill").args(["-TERM", &pid]).status().await.unwrap();
    let out =
        tokio::time::timeout(Duration::from_secs(30), second.wait_with_output()).await.unwrap().unwrap();
    let log = String::from_utf8_lossy(&out.stdout);
    let name = crashed.file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        log.lines()
            .any(|l| l.contains("removed the spill directory of a pgvia that is gone") && l.contains(&name)),
        "{log}"
    );
    let _ = holder.kill();
    let _ = holder.wait();
    let _ = std::fs::remove_dir_all(&dir);
}

fn status_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with(field)).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// Runs `sql` on a raw connection, counting DataRows and keeping the first `keep`.
async fn run_raw(addr: std::net::SocketAddr, sql: &str, keep: usize) -> Result<(u64, Vec<Vec<u8>>), String> {
    let mut conn = RawConn::login(addr, USER, PASSWORD, DB).await.map_err(|_| "login".to_string())?;
    conn.send(&query(sql)).await;
    let (mut n, mut kept, mut err) = (0u64, Vec::new(), None);
    while let Some(m) = conn.recv().await {
        match m.tag {
            b'D' => {
                n += 1;
                if kept.len() < keep {
                    kept.push(m.body.to_vec());
                }
            }
            b'E' => err = Some(format!("{} {}", m.sqlstate().unwrap_or_default(), m.fields()[&'M'])),
            b'Z' => break,
            _ => {}
        }
    }
    err.map_or(Ok((n, kept)), Err)
}

/// The Must-show: a 5M-row sort through the merge with a 64 MiB budget completes with
/// pgvia's peak RSS (it runs in this process) under the budget plus a fixed margin, and fails
/// with 53200 with spilling off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn five_million_rows_sort_within_64_mib() {
    const ROWS: u64 = 5_000_000;
    let c = shards::start(SCHEMA);
    let loading = Instant::now();
    load(&c, ROWS, ROWS);
    println!("loaded {ROWS} rows in {:.1} s", loading.elapsed().as_secs_f64());
    let dir = spill_dir("big");
    let budget: u64 = 64 << 20;
    let on = TestProxy::start_toml(&config(&c, budget, Some(&dir))).await;
    let off = TestProxy::start_toml(&config(&c, budget, None)).await;
    let reference: std::net::SocketAddr =
        format!("{}:{}", c.reference.host(), c.reference.port()).parse().unwrap();
    let base = status_kib("VmRSS:");
    println!("VmRSS before the queries: {base} KiB, VmHWM {} KiB", status_kib("VmHWM:"));

    // A plain ORDER BY of every row streams (spilling off: it needs no memory).
    let t = Instant::now();
    let (n, _) = run_raw(off.addr, "SELECT id, g, v FROM big ORDER BY v, id", 0).await.unwrap();
    assert_eq!(n, ROWS);
    println!(
        "ORDER BY over {n} rows, spilling off: {:.1} s, VmHWM {} KiB",
        t.elapsed().as_secs_f64(),
        status_kib("VmHWM:")
    );

    // A sort the shards cannot do: 5M groups ordered by an aggregate.
    let sql = "SELECT g, sum(v) FROM big GROUP BY g ORDER BY sum(v) DESC, g DESC LIMIT 10";
    let watch = Watch::start(&dir);
    let t = Instant::now();
    let (n, got) = run_raw(on.addr, sql, 10).await.unwrap();
    let secs = t.elapsed().as_secs_f64();
    let hwm = status_kib("VmHWM:");
    let (_, want) = run_raw(reference, sql, 10).await.unwrap();
    assert_eq!((n, &got), (10, &want), "{sql}");
    println!(
        "{sql}: {secs:.1} s with spilling ({} spill files at most), VmHWM {hwm} KiB = {} KiB over the start",
        watch.most(),
        hwm.saturating_sub(base)
    );
    assert!(watch.most() > 0);
    assert!(emptied(&dir, Duration::from_secs(10)).await, "spill files left");
    // Budget plus a fixed 32 MiB margin (buffers, allocator slack, the test's own client).
    assert!(hwm.saturating_sub(base) < (budget >> 10) + 32768, "peak RSS {hwm} KiB from {base} KiB");

    let e = run_raw(off.addr, sql, 0).await.unwrap_err();
    assert!(e.starts_with("53200") && e.contains("merge_spill"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}
