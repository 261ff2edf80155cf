//! `pgvia import-pgbouncer` on a realistic PgBouncer setup (several databases with their own
//! pool sizes, a `*` entry, `auth_query`, TLS both ways, per-user overrides, admin users):
//! the command writes a configuration that `pgvia check` accepts, lists what it left out, and
//! clients log in through pgvia started from it, over TLS, in the pool modes it carried over.

mod common;

use std::process::Command;

use common::tls::TestCerts;
use common::{start_pg, TestProxy, PASSWORD, USER};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_imported_pgbouncer_setup_serves_clients() {
    let pg = start_pg();
    pg.create_user("batch", "batchpw").expect("role batch");
    pg.create_database("reports", USER).expect("database reports");
    let certs = TestCerts::generate();
    let dir = tempfile::tempdir().expect("temp dir");
    let (host, port) = (pg.host(), pg.port());
    let ini = format!(
        "[databases]
app = host={host} port={port} dbname=app pool_size=4 min_pool_size=1
reporting = host={host} port={port} dbname=reports pool_size=2 pool_mode=session
* = host={host} port={port}

[users]
batch = pool_mode=session pool_size=1

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = 6432
auth_type = scram-sha-256
auth_file = userlist.txt
auth_user = {USER}
auth_query = SELECT usename, passwd FROM pg_shadow WHERE usename=$1
admin_users = admin
pool_mode = transaction
default_pool_size = 3
max_client_conn = 200
server_idle_timeout = 120
client_tls_sslmode = allow
client_tls_cert_file = {cert}
client_tls_key_file = {key}
server_tls_sslmode = prefer
logfile = /var/log/pgbouncer/pgbouncer.log
",
        cert = certs.cert_file.display(),
        key = certs.key_file.display(),
    );
    let ini_path = dir.path().join("pgbouncer.ini");
    std::fs::write(&ini_path, ini).expect("write ini");
    std::fs::write(
        dir.path().join("userlist.txt"),
        format!("\"{USER}\" \"{PASSWORD}\"\n\"batch\" \"batchpw\"\n\"admin\" \"adminpw\"\n"),
    )
    .expect("write userlist");

    // The userlist comes from the INI's auth_file, relative to the INI.
    let toml_path = dir.path().join("pgvia.toml");
    let import = Command::new(env!("CARGO_BIN_EXE_pgvia"))
        .arg("import-pgbouncer")
        .arg(&ini_path)
        .arg("--output")
        .arg(&toml_path)
        .output()
        .expect("run pgvia import-pgbouncer");
    let notes = String::from_utf8_lossy(&import.stderr);
    assert!(import.status.success(), "import failed: {notes}");
    for left_out in ["auth_query", "auth_user", "logfile"] {
        assert!(notes.contains(left_out), "no note for {left_out}:\n{notes}");
    }

    let check = Command::new(env!("CARGO_BIN_EXE_pgvia"))
        .arg("check")
        .arg("--config")
        .arg(&toml_path)
        .output()
        .expect("run pgvia check");
    let toml = std::fs::read_to_string(&toml_path).expect("read the imported configuration");
    // Carried over to each database; this PostgreSQL has no TLS, so prefer falls back to plain.
    assert!(toml.contains("server_tls_mode = \"prefer\""), "{toml}");
    assert!(
        check.status.success(),
        "pgvia check refused the import:\n{}{}\n---\n{toml}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );

    let proxy = TestProxy::start_file(&toml_path).await;
    let tls = certs.connector();
    let conninfo = |user: &str, password: &str, db: &str| {
        format!("{} sslmode=require", proxy.conninfo(user, password, db))
    };
    // Over TLS, as the imported tls_mode allows.
    let (app, conn) = tokio_postgres::connect(&conninfo(USER, PASSWORD, "app"), tls.clone())
        .await
        .expect("log in to app through the imported configuration");
    tokio::spawn(conn);
    let row = app.query_one("SELECT current_user::text, current_database()::text", &[]).await.expect("query");
    assert_eq!((row.get::<_, String>(0), row.get::<_, String>(1)), (USER.to_owned(), "app".to_owned()));
    assert!(tls.handshake_done(), "the client did not use TLS");

    // A database under a name of its own, pointing at another real database.
    let reporting = proxy.connect(USER, PASSWORD, "reporting").await;
    let db: String = reporting.query_one("SELECT current_database()::text", &[]).await.expect("query").get(0);
    assert_eq!(db, "reports");

    // The per-user override (session mode, one server) and the admin console.
    let batch = proxy.connect("batch", "batchpw", "app").await;
    batch.simple_query("SELECT 1").await.expect("batch query");
    let admin = proxy.connect("admin", "adminpw", "pgvia").await;
    let pools = admin.simple_query("SHOW POOLS").await.expect("SHOW POOLS");
    let modes: Vec<(String, String)> = pools
        .iter()
        .filter_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => Some((
                format!("{}/{}", r.get("database").unwrap_or_default(), r.get("user").unwrap_or_default()),
                r.get("pool_mode").unwrap_or_default().to_owned(),
            )),
            _ => None,
        })
        .collect();
    let mode_of = |pool: &str| modes.iter().find(|(p, _)| p == pool).map(|(_, m)| m.as_str());
    assert_eq!(mode_of(&format!("app/{USER}")), Some("transaction"), "{modes:?}");
    assert_eq!(mode_of(&format!("reporting/{USER}")), Some("session"), "{modes:?}");
    assert_eq!(mode_of("app/batch"), Some("session"), "{modes:?}");

    // A database not listed is served through the `*` entry, under its own name.
    pg.create_database("elsewhere", USER).expect("database elsewhere");
    let elsewhere = proxy.connect(USER, PASSWORD, "elsewhere").await;
    let db: String = elsewhere.query_one("SELECT current_database()::text", &[]).await.expect("query").get(0);
    assert_eq!(db, "elsewhere");

    drop((app, reporting, batch, admin, elsewhere));
    proxy.assert_no_leaks().await;
    proxy.stop().await;
}
