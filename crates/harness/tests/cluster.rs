//! End-to-end tests against real servers. The version under test comes from
//! `PGVIA_TEST_PG` (15 by default; `scripts/test` runs the suite for 18 too).

use std::path::Path;
use std::process::Command;

use harness::{Cluster, ClusterOptions, HbaAuth, PgVersion, KEEP_ENV};

fn keeping() -> bool {
    std::env::var(KEEP_ENV).is_ok_and(|v| v == "1")
}

/// Connects over TCP with a password, as pgvia's clients will.
fn tcp_query(pg: &Cluster, user: &str, password: &str, db: &str, sql: &str) -> Result<String, String> {
    let out = Command::new(pg.tool("psql").expect("psql"))
        .args(["-X", "-A", "-t", "-w", "-c", sql])
        .arg(format!("host={} port={} user={user} dbname={db} sslmode=disable", pg.host(), pg.port()))
        .env("PGPASSWORD", password)
        .output()
        .expect("run psql");
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

#[test]
fn lifecycle_with_scram_user() {
    let version = PgVersion::from_env();
    println!("testing PostgreSQL {version}");
    let pg = Cluster::start(ClusterOptions::default()).expect("start");
    assert_eq!(pg.version(), version);
    assert_eq!(pg.host(), "127.0.0.1");
    assert_eq!(pg.psql("postgres", "select 1").expect("select 1"), "1");

    let major = pg.psql("postgres", "show server_version_num").expect("version");
    assert!(major.starts_with(&version.to_string()), "server_version_num {major} for {version}");
    assert_eq!(pg.psql("postgres", "show max_connections").expect("show"), "200");
    assert_eq!(pg.psql("postgres", "show fsync").expect("show"), "off");

    pg.create_user("alice", "s3cret'!").expect("create user");
    pg.create_database("alice_db", "alice").expect("create db");
    let stored = pg.psql("postgres", "select rolpassword from pg_authid where rolname = 'alice'").expect("q");
    assert!(stored.starts_with("SCRAM-SHA-256$"), "{stored}");
    assert_eq!(
        tcp_query(&pg, "alice", "s3cret'!", "alice_db", "select current_user").expect("login"),
        "alice"
    );
    assert!(tcp_query(&pg, "alice", "wrong", "alice_db", "select 1").is_err());
    assert_eq!(
        pg.url("alice", "s3cret'!", "alice_db"),
        format!("postgres://alice:s3cret%27%21@127.0.0.1:{}/alice_db", pg.port())
    );

    let dir = pg.dir().to_path_buf();
    assert!(pg.log_path().is_file());
    assert!(pg.socket_dir().join(format!(".s.PGSQL.{}", pg.port())).exists());
    drop(pg);
    if !keeping() {
        assert!(!dir.exists(), "{} should be removed on drop", dir.display());
    }
}

#[test]
fn md5_auth_and_errors() {
    let pg = Cluster::start(ClusterOptions::default().auth(HbaAuth::Md5).max_connections(20)).expect("start");
    assert_eq!(pg.psql("postgres", "show max_connections").expect("show"), "20");
    pg.create_user_md5("bob", "pw").expect("create");
    let stored = pg.psql("postgres", "select rolpassword from pg_authid where rolname = 'bob'").expect("q");
    assert!(stored.starts_with("md5"), "{stored}");
    assert_eq!(tcp_query(&pg, "bob", "pw", "postgres", "select 2").expect("login"), "2");

    // SQL errors surface as errors carrying the server's message.
    let err = pg.psql("postgres", "select * from no_such_table").expect_err("must fail");
    assert!(err.to_string().contains("no_such_table"), "{err}");
    // Statements run one at a time, so CREATE DATABASE may follow others.
    pg.psql("postgres", "select 1;\ncreate database after_select;").expect("script");
    pg.stop().expect("explicit stop");
}

#[test]
fn trust_auth_and_extra_settings() {
    let pg =
        Cluster::start(ClusterOptions::default().auth(HbaAuth::Trust).set("work_mem", "7MB")).expect("start");
    assert_eq!(pg.psql("postgres", "show work_mem").expect("show"), "7MB");
    pg.create_user("carol", "irrelevant").expect("create");
    assert_eq!(tcp_query(&pg, "carol", "wrong", "postgres", "select 3").expect("trust"), "3");
}

#[test]
fn ssl_cluster_serves_tls() {
    let version = PgVersion::from_env();
    if !harness::supports_ssl(version).expect("pg_config") {
        println!("SKIPPED ssl_cluster_serves_tls: PostgreSQL {version} here is built without SSL");
        let err = Cluster::start(ClusterOptions::default().ssl(true)).expect_err("must refuse ssl");
        assert!(matches!(err, harness::HarnessError::Unsupported(_)), "{err}");
        return;
    }
    let pg = Cluster::start(ClusterOptions::default().ssl(true)).expect("start");
    let cert = pg.ssl_cert_path().expect("cert path");
    assert!(cert.is_file());
    pg.create_user("dave", "pw").expect("create");
    let out = Command::new(pg.tool("psql").expect("psql"))
        .args(["-X", "-A", "-t", "-w", "-c", "select ssl from pg_stat_ssl where pid = pg_backend_pid()"])
        .arg(format!(
            "host=127.0.0.1 port={} user=dave dbname=postgres sslmode=verify-full sslrootcert={}",
            pg.port(),
            cert.display()
        ))
        .env("PGPASSWORD", "pw")
        .output()
        .expect("psql");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "t");
}

#[test]
fn clusters_run_side_by_side() {
    let handles: Vec<_> = (0..3)
        .map(|_| std::thread::spawn(|| Cluster::start(ClusterOptions::default()).expect("start")))
        .collect();
    let clusters: Vec<Cluster> = handles.into_iter().map(|h| h.join().expect("join")).collect();
    let mut ports: Vec<u16> = clusters.iter().map(Cluster::port).collect();
    ports.sort_unstable();
    ports.dedup();
    assert_eq!(ports.len(), 3);
    for pg in &clusters {
        assert_eq!(pg.psql("postgres", "select 1").expect("select"), "1");
    }
}

/// Stops a pgharness cluster even when an assertion fails half-way.
struct StopOnDrop<'a>(&'a str);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        let _ = pgharness(&["stop", "--dir", self.0]);
    }
}

fn pgharness(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_pgharness")).args(args).output().expect("run pgharness")
}

#[test]
fn cli_persists_cluster_until_stopped() {
    let parent = tempfile::Builder::new().prefix("pgharness-cli-").tempdir().expect("tempdir");
    let dir = parent.path().join("pg");
    let dir_s = dir.to_str().expect("utf-8 path");
    let version = PgVersion::from_env().to_string();

    let out = pgharness(&[
        "start",
        "--dir",
        dir_s,
        "--version",
        &version,
        "--auth",
        "md5",
        "--set",
        "work_mem=5MB",
    ]);
    let _guard = StopOnDrop(dir_s);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(stdout.lines().any(|l| l == "PGHOST=127.0.0.1"), "{stdout}");
    let port: u16 = stdout
        .lines()
        .find_map(|l| l.strip_prefix("PGPORT="))
        .expect("PGPORT line")
        .parse()
        .expect("port number");

    // The server outlives the command; a later process finds it through DIR.
    let attached = Cluster::attach(Path::new(dir_s)).expect("attach");
    assert_eq!(attached.port(), port);
    assert!(attached.is_running());
    let out = pgharness(&["psql", "--dir", dir_s, "-c", "show work_mem"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "5MB");
    let out = pgharness(&["start", "--dir", dir_s]);
    assert!(!out.status.success(), "starting over a live cluster must fail");

    assert!(pgharness(&["stop", "--dir", dir_s]).status.success());
    assert!(!attached.is_running());
    assert!(!pgharness(&["status", "--dir", dir_s]).status.success());
    assert!(dir.join("data").is_dir(), "stop keeps the directory");
    assert_eq!(pgharness(&["start"]).status.code(), Some(2));
}

#[test]
fn start_failure_reports_the_server_log() {
    let err = Cluster::start(ClusterOptions::default().set("shared_buffers", "not-a-size"))
        .expect_err("bad setting must fail the start");
    let msg = err.to_string();
    assert!(matches!(err, harness::HarnessError::Start { .. }), "{msg}");
    assert!(msg.contains("shared_buffers"), "log tail should name the setting: {msg}");

    let err = Cluster::start(ClusterOptions::default().set("bad name", "1")).expect_err("bad name");
    assert!(matches!(err, harness::HarnessError::InvalidOption(_)), "{err}");
}
