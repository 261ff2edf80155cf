//! Logging in to PostgreSQL without a plaintext password: SCRAM pass-through (a verifier
//! copied from `pg_authid`, and the ClientKey a client's proof reveals) and MD5 pass-through
//! (the stored hash answers the server's MD5 challenge). The configuration files are checked
//! to hold no plaintext password at all.

// Helpers outside #[test] functions unwrap too: a failed step is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use common::{connect, first_row, sqlstate, TestProxy};
use harness::{Cluster, ClusterOptions, HbaAuth};

/// The role's `rolpassword`, as a superuser reads it.
fn stored_secret(pg: &Cluster, role: &str) -> String {
    pg.psql("postgres", &format!("SELECT rolpassword FROM pg_authid WHERE rolname = '{role}'")).unwrap()
}

/// pgvia in front of `pg`'s database `app`, twice: `app` in session mode and `app_tx` in
/// transaction mode; `users` are `[[users]]` bodies.
fn config(pg: &Cluster, users: &[String]) -> String {
    let mut toml = format!(
        "[general]\nlisten_addr = \"127.0.0.1\"\nshutdown_timeout = \"2s\"\n\n[pool]\npool_mode = \"session\"\n\n\
         [[databases]]\nname = \"app\"\nhost = \"{host}\"\nport = {port}\ndbname = \"app\"\n\n\
         [[databases]]\nname = \"app_tx\"\nhost = \"{host}\"\nport = {port}\ndbname = \"app\"\npool_mode = \"transaction\"\n",
        host = pg.host(),
        port = pg.port()
    );
    for u in users {
        toml.push_str(&format!("\n[[users]]\n{u}\n"));
    }
    toml
}

/// The file holds no plaintext password: every `password` is a verifier or an MD5 hash, no
/// `server_password` at all, and none of the passwords appears anywhere in it.
fn assert_no_plaintext(toml: &str, passwords: &[&str]) {
    let parsed: toml::Table = toml.parse().unwrap();
    for user in parsed["users"].as_array().unwrap() {
        let user = user.as_table().unwrap();
        assert!(!user.contains_key("server_password"), "{toml}");
        let p = user["password"].as_str().unwrap();
        assert!(p.starts_with("SCRAM-SHA-256$") || (p.starts_with("md5") && p.len() == 35), "{p}");
    }
    for p in passwords {
        assert!(!toml.contains(p), "the configuration holds the password {p:?}");
    }
}

/// `current_user` and `session_user` through pgvia, in both pool modes, over several
/// transactions (transaction mode gives each its server anew).
async fn assert_runs_as(proxy: &TestProxy, user: &str, password: &str) {
    for db in ["app", "app_tx"] {
        let client = connect(&proxy.conninfo(user, password, db)).await.unwrap();
        for _ in 0..3 {
            let row = first_row(&client, "SELECT current_user, session_user").await.unwrap();
            assert_eq!(row, [user, user], "{db}");
            client.batch_execute("BEGIN; CREATE TEMP TABLE t (x int) ON COMMIT DROP; COMMIT").await.unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scram_verifier_alone_logs_in_as_the_role() {
    let pg = common::start_pg();
    pg.create_user("alice", "alice-pw").unwrap();
    let verifier = stored_secret(&pg, "alice");
    assert!(verifier.starts_with("SCRAM-SHA-256$"), "{verifier}");
    let toml = config(
        &pg,
        &[format!("name = \"alice\"\npassword = \"{verifier}\"\nauth_method = \"scram-sha-256\"")],
    );
    assert_no_plaintext(&toml, &["alice-pw"]);
    let proxy = TestProxy::start_toml(&toml).await;
    assert!(!proxy.app.client_keys.holds_key("alice"));

    let e = connect(&proxy.conninfo("alice", "wrong", "app")).await.unwrap_err();
    assert_eq!(sqlstate(&e).as_deref(), Some("28P01"));
    assert!(!proxy.app.client_keys.holds_key("alice"));

    assert_runs_as(&proxy, "alice", "alice-pw").await;
    assert!(proxy.app.client_keys.holds_key("alice"));
    // What PostgreSQL saw: alice's own sessions, over TCP with SCRAM.
    let logins = pg
        .psql(
            "postgres",
            "SELECT count(*) FROM pg_stat_activity WHERE usename = 'alice' AND client_port IS NOT NULL",
        )
        .unwrap();
    assert!(logins.parse::<u32>().unwrap() >= 1, "{logins}");
    proxy.assert_no_leaks().await;
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_with_another_salt_is_named_in_the_error() {
    let pg = common::start_pg();
    pg.create_user("alice", "alice-pw").unwrap();
    let verifier = stored_secret(&pg, "alice");
    // Same password, set again: PostgreSQL picks a new salt, so the configured verifier no
    // longer matches the server's, though clients still log in to pgvia with it.
    pg.psql("postgres", "ALTER ROLE alice PASSWORD 'alice-pw'").unwrap();
    assert_ne!(stored_secret(&pg, "alice"), verifier);
    let toml = config(&pg, &[format!("name = \"alice\"\npassword = \"{verifier}\"")]);
    let toml = toml.replace("[general]\n", "[general]\nauth_method = \"scram-sha-256\"\n");
    let proxy = TestProxy::start_toml(&toml).await;
    let e = connect(&proxy.conninfo("alice", "alice-pw", "app")).await.unwrap_err();
    let text = e.as_db_error().map_or_else(|| e.to_string(), |d| d.message().to_owned());
    assert!(text.contains("salt differs from the configured verifier"), "{text}");
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn md5_hash_alone_logs_in_as_the_role() {
    // md5 in pg_hba.conf: roles stored as MD5 get PostgreSQL's MD5 challenge.
    let pg = Cluster::start(ClusterOptions::default().auth(HbaAuth::Md5)).unwrap();
    pg.create_user_md5("bob", "bob-pw").unwrap();
    pg.create_database("app", "bob").unwrap();
    let hash = stored_secret(&pg, "bob");
    assert!(hash.starts_with("md5"), "{hash}");
    let toml = config(&pg, &[format!("name = \"bob\"\npassword = \"{hash}\"\nauth_method = \"md5\"")]);
    assert_no_plaintext(&toml, &["bob-pw"]);
    let proxy = TestProxy::start_toml(&toml).await;
    let e = connect(&proxy.conninfo("bob", "wrong", "app")).await.unwrap_err();
    assert_eq!(sqlstate(&e).as_deref(), Some("28P01"));
    assert_runs_as(&proxy, "bob", "bob-pw").await;
    proxy.assert_no_leaks().await;
    proxy.stop().await;
}
