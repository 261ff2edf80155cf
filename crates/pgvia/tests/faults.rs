//! Fault injection with a real Toxiproxy between clients and pgvia and between pgvia and
//! PostgreSQL, plus `pg_terminate_backend`, `kill -9` of a backend and `pg_ctl stop -m
//! immediate` + restart, each under load.
//!
//! One cluster, one Toxiproxy and one pgvia are shared by every scenario (they run in turn in
//! one test). Writers keep a ledger of acknowledged commits and of commits whose outcome they
//! cannot know; after each scenario the table must hold every acknowledged row and nothing
//! the writers never sent. Also checked for each: client calls end (with a SQLSTATE when the
//! fault is between pgvia and PostgreSQL) within the configured timeouts; a brand-new client
//! succeeds soon after the fault is lifted; no server in an unknown state is handed out
//! afterwards (every pooled server probed, `SHOW SERVERS`, stray open transactions in
//! `pg_stat_activity`); a client of another pool, not on the faulted path, sees nothing.
//!
//! The table this prints is the one in docs/reliability.md.

// Helpers outside #[test] functions unwrap too: a failed step is a failed test.
#![allow(clippy::unwrap_used)]

mod common;
#[path = "faults/scenarios.rs"]
mod scenarios;
#[path = "faults/tap.rs"]
mod tap;
#[path = "faults/workload.rs"]
mod workload;

use std::time::{Duration, Instant};

use common::ops::{admin_user, console};
use common::toxiproxy::Toxiproxy;
use common::{connect, direct_conninfo, start_pg_with, ConfigBuilder, TestProxy, DB, PASSWORD, USER};
use scenarios::{Leg, Scenario};
use workload::{Bystander, Failure, Writers};

pub const POOL_SIZE: usize = 6;
const HEAL_LIMIT: Duration = Duration::from_secs(15);
/// query_timeout + connect_timeout (the cancel's limit) + 1 s, and scheduling slack.
const SERVER_FAILURE_BOUND: Duration = Duration::from_millis(6500);
const OTHER: &str = "other";

/// Everything the scenarios share.
pub struct World {
    pub pg: harness::Cluster,
    pub toxi: Toxiproxy,
    pub proxy: TestProxy,
    /// Clients reach pgvia through this Toxiproxy port (proxy `client`).
    pub client_port: u16,
}

impl World {
    fn via_client_leg(&self) -> String {
        if std::env::var_os("PGVIA_FAULTS_DIRECT").is_some() {
            return self.proxy.conninfo(USER, PASSWORD, DB);
        }
        format!("host=127.0.0.1 port={} user={USER} password={PASSWORD} dbname={DB}", self.client_port)
    }

    /// The bystander: another user, another database entry whose server is reached directly
    /// (not through the server leg), connected to pgvia directly (not through the client leg).
    fn bystander(&self) -> String {
        self.proxy.conninfo(OTHER, OTHER, "direct")
    }
}

/// What one scenario measured: a row of the table.
struct Row {
    name: String,
    saw: String,
    slowest: Duration,
    heal: Option<Duration>,
    acked: usize,
    unknown: usize,
    lost: usize,
    stray: usize,
    dirty: usize,
    bystander_errors: usize,
    bystander_slowest: Duration,
}

async fn setup() -> Option<World> {
    let toxi = Toxiproxy::start().await?;
    // Durable commits (the harness turns them off for speed): after kill -9 or an immediate
    // stop, an acknowledged commit must survive crash recovery.
    let pg = start_pg_with(
        harness::ClusterOptions::default()
            .set("fsync", "on")
            .set("synchronous_commit", "on")
            .set("full_page_writes", "on"),
    );
    pg.create_user(OTHER, OTHER).unwrap();
    let operator = connect(&direct_conninfo(&pg, USER, PASSWORD, DB)).await.unwrap();
    operator
        .batch_execute(
            "CREATE TABLE ledger (scenario text, writer int, seq int, PRIMARY KEY (scenario, writer, seq))",
        )
        .await
        .unwrap();
    let server_port = toxi.proxy("server", pg.port()).await;
    let config = ConfigBuilder::new(&pg)
        .pool("pool_mode = \"transaction\"")
        .pool(&format!("pool_size = {POOL_SIZE}"))
        .pool("connect_timeout = \"2s\"")
        .pool("checkout_timeout = \"5s\"")
        .pool("query_timeout = \"2s\"")
        .app_port(server_port)
        .database(&format!(
            "name = \"direct\"\nhost = \"{}\"\nport = {}\ndbname = \"{DB}\"",
            pg.host(),
            pg.port()
        ))
        .user(&format!("name = \"{OTHER}\"\npassword = \"{OTHER}\""))
        .user(&admin_user());
    let proxy = TestProxy::start(&config).await;
    let client_port = toxi.proxy("client", proxy.port()).await;
    Some(World { pg, toxi, proxy, client_port })
}

async fn run(world: &World, s: &Scenario) -> Row {
    let writers = Writers::start(world.via_client_leg(), s.name);
    let bystander = Bystander::start(world.bystander()).await;
    tokio::time::sleep(Duration::from_millis(700)).await;

    s.apply(world).await;
    tokio::time::sleep(s.hold).await;
    s.lift(world).await;

    let heal = workload::time_to_heal(&world.via_client_leg(), s.name, HEAL_LIMIT).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (ledger, tally) = writers.stop().await;
    let (by_tally, by_slowest) = bystander.stop().await;

    // The ledger against the table.
    let operator = connect(&direct_conninfo(&world.pg, USER, PASSWORD, DB)).await.unwrap();
    let rows = operator
        .query("SELECT writer, seq FROM ledger WHERE scenario = $1 AND writer < 1000", &[&s.name])
        .await
        .unwrap();
    let have: std::collections::BTreeSet<(i32, i32)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
    let (lost, stray, acked, unknown) = {
        let l = ledger.lock().unwrap();
        let lost = l.acked.difference(&have).count();
        let stray = have.iter().filter(|k| !l.acked.contains(k) && !l.unknown.contains(k)).count();
        (lost, stray, l.acked.len(), l.unknown.len())
    };

    // No server in an unknown state: every pooled server probed, then nothing checked out or
    // idle in a transaction once the clients are gone.
    let dirty_probe = workload::dirty_servers(&world.proxy.conninfo(USER, PASSWORD, DB), POOL_SIZE).await;
    world.proxy.assert_no_leaks().await;
    let servers = console(&world.pg, &world.proxy, "SHOW SERVERS").await;
    let (db_col, state_col) = (servers.col("database"), servers.col("state"));
    let odd_servers = servers
        .rows
        .iter()
        .filter(|r| r[db_col] == DB && r[state_col] != "idle" && r[state_col] != "used")
        .count();
    let stray_tx = operator
        .query_one(
            "SELECT count(*) FROM pg_stat_activity WHERE usename = $1 AND state LIKE 'idle in transaction%'",
            &[&USER],
        )
        .await
        .unwrap()
        .get::<_, i64>(0) as usize;

    let tally = tally.lock().unwrap();
    let mut kinds = std::collections::BTreeMap::<Failure, usize>::new();
    for (f, _) in &tally.failures {
        *kinds.entry(f.clone()).or_default() += 1;
    }
    let saw = if kinds.is_empty() {
        format!("no errors ({} commits)", tally.ok)
    } else {
        let parts: Vec<String> = kinds.iter().map(|(f, n)| format!("{n}× {}", f.label())).collect();
        format!("{} ({} commits)", parts.join(", "), tally.ok)
    };
    if s.leg() == Some(Leg::Server) {
        // Between pgvia and PostgreSQL pgvia is the one who knows: every failure the client
        // sees must carry a SQLSTATE.
        let bare = tally.failures.iter().filter(|(f, _)| !matches!(f, Failure::Sql(_))).count();
        assert_eq!(bare, 0, "{}: {bare} client failures without a SQLSTATE: {saw}: {:?}", s.name, tally.bare);
        // ... and within the configured limits: query_timeout (2 s), then the cancel's own
        // limit (connect_timeout, 2 s) and 1 s for its answer, before pgvia gives up on a
        // server that answers nothing (the black hole is held longer than that).
        assert!(
            tally.slowest_failure() <= SERVER_FAILURE_BOUND,
            "{}: a client waited {:?} for its error (bound {SERVER_FAILURE_BOUND:?})",
            s.name,
            tally.slowest_failure()
        );
    }
    assert!(
        !tally.failures.iter().any(|(f, _)| *f == Failure::Hang),
        "{}: a client call got no answer within {:?}: {saw}",
        s.name,
        workload::OP_TIMEOUT
    );
    Row {
        name: s.name.to_owned(),
        saw,
        slowest: tally.slowest_failure(),
        heal,
        acked,
        unknown,
        lost,
        stray,
        dirty: dirty_probe + odd_servers + stray_tx,
        bystander_errors: by_tally.failures.len(),
        bystander_slowest: by_slowest,
    }
}

fn ms(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faults_lose_nothing_and_pools_heal() {
    let Some(world) = setup().await else { return };
    let started = Instant::now();
    let mut rows = Vec::new();
    // PGVIA_FAULTS_ONLY=text runs only the scenarios whose name contains it (for debugging).
    let only = std::env::var("PGVIA_FAULTS_ONLY").unwrap_or_default();
    for s in scenarios::all().into_iter().filter(|s| s.name.contains(only.as_str())) {
        let t = Instant::now();
        let row = run(&world, &s).await;
        eprintln!("{}: {} heal {:?} ({:.1} s)", row.name, row.saw, row.heal, t.elapsed().as_secs_f64());
        rows.push((s, row));
    }
    let mut table = String::from(
        "| scenario | what the client saw (errors by SQLSTATE; `closed`: connection closed without one) | slowest failed call | time to heal | commits acknowledged / uncertain | rows lost | stray rows | dirty servers reused | bystander errors (slowest call) |\n|---|---|---|---|---|---|---|---|---|\n",
    );
    for (_, r) in &rows {
        table.push_str(&format!(
            "| {} | {} | {} | {} | {} / {} | {} | {} | {} | {} ({}) |\n",
            r.name,
            r.saw,
            ms(r.slowest),
            r.heal.map(ms).unwrap_or_else(|| "not healed".into()),
            r.acked,
            r.unknown,
            r.lost,
            r.stray,
            r.dirty,
            r.bystander_errors,
            ms(r.bystander_slowest)
        ));
    }
    eprintln!("\n{table}\n{} scenarios in {:.0} s", rows.len(), started.elapsed().as_secs_f64());
    if let Ok(dir) = std::env::var("CARGO_TARGET_DIR") {
        let _ = std::fs::write(std::path::Path::new(&dir).join("faults-table.md"), &table);
    }
    for (s, r) in &rows {
        assert_eq!((r.lost, r.stray), (0, 0), "{}: ledger broken", r.name);
        assert_eq!(r.dirty, 0, "{}: servers in an unknown state", r.name);
        assert!(r.heal.is_some(), "{}: a new client did not succeed within {HEAL_LIMIT:?}", r.name);
        if s.bystander_must_be_clean() {
            assert_eq!(r.bystander_errors, 0, "{}: a client of another pool saw errors", r.name);
        }
    }
}
