//! Hot reload under load: while pgbench runs on one database, `RELOAD` changes another
//! database's pool size and adds a user (0 failed transactions, the new user logs in, the
//! unchanged pool keeps its servers), a broken file is rejected and the old configuration
//! keeps serving, and a removed database drains. SIGHUP reloads the real binary.

#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use common::ops::{admin_user, assert_pgbench_clean, console, console_as, pgbench, ADMIN, ADMIN_PASSWORD};
use common::{connect, start_pg, text, TestProxy, DB, PASSWORD, USER};
use harness::Cluster;
use pgvia::pool::PoolKey;

/// The test's configuration file: `app` (pool of 4) and `other` (same server database) with
/// `other_size` servers, user `app`, the admin, and `extra_users` more users.
fn write_config(path: &Path, pg: &Cluster, other: Option<u32>, extra_users: &[&str], broken: bool) {
    let mut toml = format!(
        "[general]\nlisten_addr = \"127.0.0.1\"\nshutdown_timeout = \"2s\"\n\n[pool]\npool_mode = \"transaction\"\n\
         pool_size = {}\ncheckout_timeout = \"60s\"\n\n[[databases]]\nname = \"{DB}\"\nhost = \"{}\"\nport = {}\npool_size = 4\n",
        if broken { 0 } else { 20 },
        pg.host(),
        pg.port()
    );
    if let Some(size) = other {
        toml.push_str(&format!(
            "\n[[databases]]\nname = \"other\"\nhost = \"{}\"\nport = {}\ndbname = \"{DB}\"\npool_size = {size}\n",
            pg.host(),
            pg.port()
        ));
    }
    toml.push_str(&format!("\n[[users]]\nname = \"{USER}\"\npassword = \"{PASSWORD}\"\n"));
    toml.push_str(&format!("\n[[users]]\n{}\n", admin_user()));
    for u in extra_users {
        toml.push_str(&format!("\n[[users]]\nname = \"{u}\"\npassword = \"pw-{u}\"\n"));
    }
    std::fs::write(path, toml).unwrap();
}

fn key(db: &str) -> PoolKey {
    PoolKey { database: db.to_owned(), user: USER.to_owned(), server: None }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_under_pgbench() {
    let pg = start_pg();
    pg.create_user("newbie", "pw-newbie").unwrap();
    pg.psql(DB, "GRANT ALL ON SCHEMA public TO newbie").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pgvia.toml");
    write_config(&path, &pg, Some(2), &[], false);
    let proxy = TestProxy::start_file(&path).await;
    pgbench(&pg, &proxy, &["-i", "-s", "1", "-q"]).await;

    let other_client = connect(&proxy.conninfo(USER, PASSWORD, "other")).await.unwrap();
    other_client.simple_query("SELECT 1").await.unwrap();
    let app_pool = proxy.app.pools.get(&key(DB)).unwrap();
    let other_pool = proxy.app.pools.get(&key("other")).unwrap();
    assert_eq!(other_pool.settings.pool_size, 2);

    let bench = pgbench(&pg, &proxy, &["-c", "8", "-j", "2", "-T", "8"]);
    let operator = async {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let servers_before = app_pool.server_count();

        // A changed pool size for `other` and a new user.
        write_config(&path, &pg, Some(3), &["newbie"], false);
        console(&pg, &proxy, "RELOAD").await;
        let pools = console(&pg, &proxy, "SHOW POOLS").await;
        assert_eq!(pools.int(pools.row("database", "other"), "pool_size"), 3, "{pools:?}");
        // The unchanged pool is the same pool, servers and all.
        assert!(Arc::ptr_eq(&proxy.app.pools.get(&key(DB)).unwrap(), &app_pool));
        assert!(app_pool.server_count() >= servers_before.min(1));
        assert!(!Arc::ptr_eq(&proxy.app.pools.get(&key("other")).unwrap(), &other_pool));
        // The new user logs in; the client of the replaced pool carries on in the new one.
        let newbie = connect(&proxy.conninfo("newbie", "pw-newbie", DB)).await.unwrap();
        newbie.simple_query("SELECT 1").await.unwrap();
        other_client.simple_query("SELECT 1").await.unwrap();

        // A file with an error is rejected; the running configuration keeps serving.
        write_config(&path, &pg, Some(5), &[], true);
        let out = console_as(&pg, &proxy, ADMIN, ADMIN_PASSWORD, "pgvia", "RELOAD").await;
        assert!(!out.status.success());
        let err = text(&out.stderr);
        assert!(err.contains("pool.pool_size") && err.contains("keeping the running one"), "{err}");
        let newbie = connect(&proxy.conninfo("newbie", "pw-newbie", DB)).await.unwrap();
        newbie.simple_query("SELECT 1").await.unwrap();
        let pools = console(&pg, &proxy, "SHOW POOLS").await;
        assert_eq!(pools.int(pools.row("database", "other"), "pool_size"), 3);

        // Removing `other`: its pool retires, its client is told at its next query.
        write_config(&path, &pg, None, &["newbie"], false);
        console(&pg, &proxy, "RELOAD").await;
        let dbs = console(&pg, &proxy, "SHOW DATABASES").await;
        assert!(!dbs.rows.iter().any(|r| r[0] == "other"), "{dbs:?}");
        assert!(other_client.simple_query("SELECT 1").await.is_err());
        console(&pg, &proxy, "WAIT_CLOSE").await;
    };
    let (out, ()) = tokio::join!(bench, operator);
    assert_pgbench_clean(&out);
    proxy.assert_no_leaks().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads_the_binary() {
    let pg = start_pg();
    pg.create_user("late", "pw-late").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pgvia.toml");
    // A free port for the child: bind, read, release.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let with_port = |extra: &[&str]| {
        write_config(&path, &pg, None, extra, false);
        let toml = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, toml.replacen("[general]\n", &format!("[general]\nlisten_port = {port}\n"), 1))
            .unwrap();
    };
    with_port(&[]);
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_pgvia"))
        .arg("--config")
        .arg(&path)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let conninfo = |u: &str, p: &str| format!("host=127.0.0.1 port={port} user={u} password={p} dbname={DB}");
    let mut up = false;
    for _ in 0..100 {
        if connect(&conninfo(USER, PASSWORD)).await.is_ok() {
            up = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(up, "pgvia did not start");
    assert!(connect(&conninfo("late", "pw-late")).await.is_err(), "unknown user let in");

    with_port(&["late"]);
    let pid = child.id().unwrap().to_string();
    let kill = tokio::process::Command::new("kill").args(["-HUP", &pid]).status().await.unwrap();
    assert!(kill.success());
    let mut ok = false;
    for _ in 0..50 {
        if let Ok(c) = connect(&conninfo("late", "pw-late")).await {
            c.simple_query("SELECT 1").await.unwrap();
            ok = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(ok, "the user added before SIGHUP cannot log in");
    child.start_kill().unwrap();
    let _ = child.wait().await;
}
