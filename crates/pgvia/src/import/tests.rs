use std::path::Path;

use super::*;
use crate::config::{Config, PoolMode};

/// A realistic setup: several databases with their own pool sizes, a `*` entry, auth_query,
/// TLS both ways, per-user overrides, admin users and hashed passwords.
pub(super) const INI: &str = r"
[databases]
app = host=10.0.0.5 port=5433 dbname=app_prod pool_size=40 min_pool_size=5
reports = host=10.0.0.6 dbname=reports pool_mode=session max_db_connections=10
legacy = host=/var/run/postgresql dbname=legacy client_encoding=LATIN1
* = host=10.0.0.7

[users]
batch = pool_mode=session pool_size=2

[pgbouncer]
listen_addr = *
listen_port = 6543
auth_type = md5
auth_file = userlist.txt
auth_user = pgbouncer
auth_query = SELECT usename, passwd FROM pg_shadow WHERE usename=$1
admin_users = admin, ghost
stats_users = stats
pool_mode = transaction
default_pool_size = 25
max_client_conn = 5000
server_lifetime = 0
server_idle_timeout = 300
query_wait_timeout = 1.5
idle_transaction_timeout = 60
client_tls_sslmode = require
client_tls_cert_file = CERT
client_tls_key_file = KEY
server_tls_sslmode = verify-full
server_tls_ca_file = CA
max_prepared_statements = 100
logfile = /var/log/pgbouncer.log
";

pub(super) const USERLIST: &str = "\"app\" \"secret\"\n\"batch\" \"batchpw\"\n\"admin\" \"adminpw\"\n\"hashed\" \"md5abcdef0123456789abcdef0123456789\"\n\"scram\" \"SCRAM-SHA-256$4096:c2FsdHNhbHQ=$qQ7kNw4PbQ2s+3S8rcq6XDhz0Id9wpa+ZpjQKQ8nSMI=:kqM3kM7l5L3Fiq2TzI3hY5CjSHPNnJ5mZ8kN2HUyZrw=\"\n";

/// The import of [`INI`], with its TLS files pointing at real (empty) files: pgvia checks
/// that they exist. The files live as long as the returned guard.
fn imported() -> (Imported, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("temp dir");
    let (cert, key) = (dir.path().join("server.crt"), dir.path().join("server.key"));
    std::fs::write(&cert, "").expect("cert");
    std::fs::write(&key, "").expect("key");
    // verify-full towards servers: the CA must be a real certificate, which pgvia loads.
    let ca = dir.path().join("ca.crt");
    let ca_key = rcgen::KeyPair::generate().expect("CA key");
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("CA params");
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    std::fs::write(&ca, params.self_signed(&ca_key).expect("CA").pem()).expect("CA file");
    let ini = INI
        .replace("CERT", &cert.display().to_string())
        .replace("KEY", &key.display().to_string())
        .replace("= CA", &format!("= {}", ca.display()));
    (import(&ini, Some(USERLIST), "pgbouncer.ini").expect("import"), dir)
}

fn noted(notes: &[Note], place_part: &str) -> bool {
    notes.iter().any(|n| n.place.contains(place_part))
}

#[test]
fn a_realistic_setup_becomes_a_configuration_pgvia_accepts() {
    let (imported, _files) = imported();
    let config = match Config::parse(&imported.toml, Path::new("/tmp/imported.toml")) {
        Ok(c) => c,
        Err(e) => panic!("pgvia refuses the import:\n{e}\n---\n{}", imported.toml),
    };
    assert_eq!(config.general.listen_addr, "0.0.0.0");
    assert_eq!(config.general.listen_port, 6543);
    assert_eq!(config.general.max_client_connections, 5000);
    assert_eq!(config.pool.pool_mode, PoolMode::Transaction);
    assert_eq!(config.pool.pool_size, 25);
    assert_eq!(config.pool.idle_timeout, std::time::Duration::from_secs(300));
    assert_eq!(config.pool.checkout_timeout, std::time::Duration::from_millis(1500));
    assert_eq!(config.pool.idle_in_transaction_timeout, std::time::Duration::from_secs(60));
    assert_eq!(config.pool.max_prepared_statements, 100);

    let names: Vec<_> = config.databases.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, ["app", "reports", "legacy", "*"]);
    let app = &config.databases[0];
    assert_eq!(
        (app.host.as_deref(), app.port, app.dbname.as_deref()),
        (Some("10.0.0.5"), 5433, Some("app_prod"))
    );
    assert_eq!((app.pool_size, app.min_idle), (Some(40), Some(5)));
    assert_eq!(config.databases[1].pool_mode, Some(PoolMode::Session));
    // TLS towards the servers, for every database; a Unix-socket host is kept.
    for db in &config.databases {
        assert_eq!(db.server_tls_mode, crate::net::server_tls::ServerTlsMode::VerifyFull, "{}", db.name);
        assert!(db.server_tls_ca_file.is_some());
    }
    assert_eq!(config.databases[2].host.as_deref(), Some("/var/run/postgresql"));

    let batch = config.users.iter().find(|u| u.name == "batch").expect("batch");
    assert_eq!((batch.pool_mode, batch.pool_size), (Some(PoolMode::Session), Some(2)));
    assert!(config.users.iter().find(|u| u.name == "admin").is_some_and(|u| u.admin));
    assert_eq!(config.users.len(), 5);
}

#[test]
fn what_cannot_be_carried_over_is_said() {
    let notes = imported().0.notes;
    for place in [
        "auth_query",
        "auth_user",
        "stats_users",
        "server_lifetime",
        "logfile",
        "[databases] reports max_db_connections",
        "[databases] legacy client_encoding",
        "user hashed",
        "user scram",
    ] {
        assert!(noted(&notes, place), "no note for {place}: {notes:#?}");
    }
    assert!(notes.iter().any(|n| n.why.contains("ghost")), "admin without a user entry: {notes:#?}");
    // Settings that carried over leave no note.
    for place in [
        "default_pool_size",
        "listen_port",
        "client_tls_sslmode",
        "max_client_conn",
        "server_tls_sslmode",
        "server_tls_ca_file",
        "legacy = host=/var/run",
    ] {
        assert!(!noted(&notes, place), "unexpected note for {place}: {notes:#?}");
    }
}

#[test]
fn defaults_are_pgbouncers() {
    let imported = import(
        "[databases]\napp = host=127.0.0.1\n[pgbouncer]\nlisten_addr = 127.0.0.1\nauth_type = trust\n",
        None,
        "x",
    )
    .expect("import");
    let config = Config::parse(&imported.toml, Path::new("/tmp/x.toml"));
    // No users: pgvia requires at least the ones clients use, but the file must still parse.
    let text = &imported.toml;
    assert!(text.contains("pool_mode = \"session\""), "{text}");
    assert!(text.contains("max_client_connections = 100"), "{text}");
    assert!(text.contains("checkout_timeout = \"120s\""), "{text}");
    assert!(noted(&imported.notes, "auth_file"));
    drop(config);
}
