//! Loading `pgvia.toml`: defaults, overrides, and the exact problems reported for bad files.

use std::path::{Path, PathBuf};
use std::time::Duration;

use pgvia::config::{
    AuthMethod, Config, ConfigError, LoadBalance, PoolMode, PoolSettings, Problem, ReadWriteSplit,
    RolePreference, ServerRole, TlsMode,
};

const ORIGIN: &str = "/etc/pgvia/pgvia.toml";

fn parse(text: &str) -> Result<Config, ConfigError> {
    Config::parse(text, Path::new(ORIGIN))
}

fn ok(text: &str) -> Config {
    match parse(text) {
        Ok(c) => c,
        Err(e) => panic!("expected a valid configuration, got:\n{e}"),
    }
}

/// Every problem as `<line>: <path>: <message>` (line `-` when unknown).
fn problems(text: &str) -> Vec<String> {
    match parse(text) {
        Ok(c) => panic!("expected problems, got {c:#?}"),
        Err(ConfigError::Invalid { problems, .. }) => problems
            .iter()
            .map(|p| format!("{}: {p}", p.line.map_or("-".to_owned(), |l| l.to_string())))
            .collect(),
        Err(e) => panic!("expected Invalid, got {e}"),
    }
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// The layout from the design brief, with every key written out.
const FULL: &str = r#"
[general]
listen_addr = "127.0.0.1"
listen_port = 6432
max_client_connections = 10000
tls_mode = "disable"
tls_cert_file = "server.crt"
tls_key_file = "server.key"
auth_method = "scram-sha-256"
allow_cleartext_without_tls = false
max_message_size = 67108864
shutdown_timeout = "30s"
server_reset_query = "DISCARD ALL"
server_reset_timeout = "5s"
log_level = "info"

[pool]
pool_mode = "session"
pool_size = 20
min_idle = 0
connect_timeout = "5s"
checkout_timeout = "30s"
idle_timeout = "10m"
max_lifetime = "1h"

[[databases]]
name = "app"
host = "127.0.0.1"
port = 5432
dbname = "app_prod"
pool_size = 10
min_idle = 0
pool_mode = "session"
max_client_connections = 500

[[users]]
name = "app"
password = "secret"
auth_method = "md5"
server_password = "secret"
pool_size = 5
pool_mode = "session"
"#;

#[test]
fn full_layout_parses() {
    let c = ok(FULL);
    let g = &c.general;
    assert_eq!((g.listen_addr.as_str(), g.listen_port, g.max_client_connections), ("127.0.0.1", 6432, 10000));
    assert_eq!(g.tls_mode, TlsMode::Disable);
    // Relative TLS paths are resolved against the file's folder even when TLS is off.
    assert_eq!(g.tls_cert_file, Some(PathBuf::from("/etc/pgvia/server.crt")));
    assert_eq!(g.tls_key_file, Some(PathBuf::from("/etc/pgvia/server.key")));
    assert_eq!(g.auth_method, AuthMethod::ScramSha256);
    assert!(!g.allow_cleartext_without_tls);
    assert_eq!(g.max_message_size, 64 << 20);
    assert_eq!((g.shutdown_timeout, g.server_reset_timeout), (secs(30), secs(5)));
    assert_eq!((g.server_reset_query.as_str(), g.log_level.as_str()), ("DISCARD ALL", "info"));

    let db = c.database("app").expect("database app");
    assert_eq!((db.host.as_deref().unwrap(), db.port, db.server_dbname()), ("127.0.0.1", 5432, "app_prod"));
    assert_eq!(db.max_client_connections, Some(500));
    let user = c.user("app").expect("user app");
    assert_eq!(c.auth_method(user), AuthMethod::Md5);
    assert_eq!(user.password_for_server(), Some("secret"));
    assert_eq!(
        c.pool_settings(db, user),
        PoolSettings {
            pool_mode: PoolMode::Session,
            pool_size: 5,
            min_idle: 0,
            connect_timeout: secs(5),
            checkout_timeout: secs(30),
            idle_timeout: secs(600),
            max_lifetime: secs(3600),
            client_idle_timeout: Duration::ZERO,
            idle_in_transaction_timeout: Duration::ZERO,
            query_timeout: Duration::ZERO,
            max_prepared_statements: 200,
        }
    );
    assert!(c.database("nope").is_none() && c.user("nope").is_none());
}

#[test]
fn omitted_keys_take_their_defaults() {
    let c = ok("[[databases]]\nname = \"app\"\nhost = \"db\"\n[[users]]\nname = \"u\"\npassword = \"pw\"\n");
    let g = &c.general;
    assert_eq!((g.listen_addr.as_str(), g.listen_port, g.max_client_connections), ("127.0.0.1", 6432, 10000));
    assert_eq!((g.tls_mode, g.tls_cert_file.clone(), g.tls_key_file.clone()), (TlsMode::Disable, None, None));
    assert_eq!(g.auth_method, AuthMethod::ScramSha256);
    assert_eq!(g.max_message_size, 67_108_864);
    assert_eq!((g.shutdown_timeout, g.server_reset_timeout), (secs(30), secs(5)));
    assert_eq!((g.server_reset_query.as_str(), g.log_level.as_str()), ("DISCARD ALL", "info"));
    let db = &c.databases[0];
    assert_eq!((db.port, db.server_dbname(), db.max_client_connections), (5432, "app", None));
    let s = c.pool_settings(db, &c.users[0]);
    assert_eq!((s.pool_mode, s.pool_size, s.min_idle), (PoolMode::Transaction, 20, 0));
    assert_eq!((s.connect_timeout, s.checkout_timeout), (secs(5), secs(30)));
    assert_eq!((s.idle_timeout, s.max_lifetime), (secs(600), secs(3600)));

    // An empty file is valid: nothing to serve, nobody to log in.
    let empty = ok("");
    assert!(empty.databases.is_empty() && empty.users.is_empty());
}

#[test]
fn the_shipped_example_is_valid() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/pgvia.toml");
    let c = Config::load(&path).unwrap_or_else(|e| panic!("{e}"));
    let (app, reports) = (c.database("app").expect("app"), c.database("reports").expect("reports"));
    let (app_user, analyst) = (c.user("app").expect("app"), c.user("analyst").expect("analyst"));
    // User beats database beats [pool], key by key.
    let s = c.pool_settings(app, app_user);
    assert_eq!((s.pool_size, s.min_idle, s.checkout_timeout), (5, 0, secs(30)));
    let s = c.pool_settings(reports, analyst);
    assert_eq!((s.pool_size, s.min_idle, s.checkout_timeout), (20, 2, secs(5)));
    let s = c.pool_settings(app, analyst);
    assert_eq!(s.pool_size, 10);
    assert_eq!(reports.server_dbname(), "reports");
    assert_eq!(analyst.password_for_server(), Some("analyst-pass"));
    assert_eq!(c.auth_method(c.user("reporting").expect("reporting")), AuthMethod::Md5);
}

#[test]
fn wrong_port_names_path_line_and_value() {
    let text = "[[databases]]\nname = \"a\"\nhost = \"h\"\n\n[[databases]]\nname = \"b\"\nhost = \"h\"\nport = \"x\"\n";
    let err = parse(text).expect_err("bad port");
    assert_eq!(
        err.to_string(),
        format!("{ORIGIN}:8: databases[1].port: expected an integer 1-65535, got \"x\"")
    );
    assert_eq!(
        err.problems(),
        [Problem {
            path: "databases[1].port".into(),
            line: Some(8),
            message: "expected an integer 1-65535, got \"x\"".into()
        }]
    );
    assert_eq!(
        problems("[general]\nlisten_port = 0\n"),
        ["2: general.listen_port: expected an integer 1-65535, got 0"]
    );
    assert_eq!(
        problems("[general]\nlisten_port = 65536\n"),
        ["2: general.listen_port: expected an integer 1-65535, got 65536"]
    );
    assert_eq!(
        problems("[[databases]]\nname = \"a\"\nhost = \"h\"\nport = 5432.5\n"),
        ["4: databases[0].port: expected an integer 1-65535, got 5432.5"]
    );
}

#[test]
fn unknown_keys_are_rejected_by_name() {
    let first = |text: &str| problems(text).remove(0);
    let p = first("[general]\nlisten_adr = \"x\"\n");
    assert!(
        p.starts_with("2: general.listen_adr: unknown field `listen_adr`, expected one of `listen_addr`"),
        "{p}"
    );
    let p = first("[genral]\n");
    assert!(p.starts_with("1: genral: unknown field `genral`"), "{p}");
    let p = first("[pool]\npool_szie = 3\n");
    assert!(p.starts_with("2: pool.pool_szie: unknown field `pool_szie`"), "{p}");
    let p = first("[[users]]\nname = \"u\"\npasword = \"x\"\n");
    assert!(p.starts_with("3: users[0].pasword: unknown field `pasword`"), "{p}");
    let p = first("[[databases]]\nname = \"a\"\nhost = \"h\"\nserver_password = \"x\"\n");
    assert!(p.starts_with("4: databases[0].server_password: unknown field `server_password`"), "{p}");
}

#[test]
fn type_and_syntax_errors() {
    assert_eq!(problems("[[databases]]\nname = \"a\"\n"), ["1: databases[0].host: required key is missing"]);
    assert_eq!(
        problems("[pool]\nidle_timeout = \"10 minutes\"\n"),
        ["2: pool.idle_timeout: expected a duration such as \"5s\" or \"250ms\", got \"10 minutes\""]
    );
    assert_eq!(
        problems("[pool]\n\nconnect_timeout = 5\n"),
        ["3: pool.connect_timeout: expected a duration such as \"5s\" or \"250ms\", got 5"]
    );
    assert_eq!(
        problems("[[users]]\nname = \"u\"\ncheckout_timeout = \"1x\"\n"),
        ["3: users[0].checkout_timeout: expected a duration such as \"5s\" or \"250ms\", got \"1x\""]
    );
    let p = problems("[general]\ntls_mode = \"on\"\n");
    assert_eq!(
        p,
        ["2: general.tls_mode: unknown variant `on`, expected one of `disable`, `allow`, `require`, `verify-ca`, `verify-full`"]
    );
    assert_eq!(
        problems("[general]\nthread_layout = \"per_thread\"\n"),
        ["2: general.thread_layout: unknown variant `per_thread`, expected `per_core` or `work_stealing`"]
    );
    let p = problems("[general]\nauth_method = \"scram\"\n");
    assert!(p[0].starts_with("2: general.auth_method: unknown variant `scram`"), "{p:?}");
    let p = problems("[pool]\npool_size = -1\n");
    assert!(p[0].starts_with("2: pool.pool_size: "), "{p:?}");
    // Syntax errors have no key path, only a line.
    let p = problems("[general]\nlisten_port = 6432\n[pool\n");
    assert!(p[0].starts_with("3: ") && !p[0].contains('\n'), "{p:?}");
}

#[test]
fn every_semantic_problem_is_reported_in_file_order() {
    let text = r#"
[general]
max_message_size = 512
log_level = "loud"

[pool]
pool_size = 0
pool_mode = "transaction"

[[databases]]
name = "app"
host = "h"

[[databases]]
name = "app"
host = ""
min_idle = 3
pool_size = 2

[[users]]
name = ""
password = "x"

[[users]]
name = "bob"
pool_mode = "statement"
"#;
    assert_eq!(
        problems(text),
        [
            "3: general.max_message_size: must be between 1024 and 1073741824 (1 GiB, PostgreSQL's own limit), got 512",
            "4: general.log_level: expected a level (error, warn, info, debug, trace, off) or directives \
             such as \"info,pgvia::pool=debug\", got \"loud\"",
            "7: pool.pool_size: must be at least 1",
            "15: databases[1].name: duplicate database name \"app\" (first at databases[0])",
            "16: databases[1].host: expected an IP address or a hostname, got \"\"",
            "17: databases[1].min_idle: min_idle 3 is larger than pool_size 2",
            "21: users[0].name: must be a non-empty name without NUL characters",
            // A missing key points at its table.
            "24: users[1].password: required because auth_method is \"scram-sha-256\"",
        ]
    );
}

#[test]
fn tls_files_are_required_and_must_be_readable() {
    assert_eq!(
        problems("[general]\ntls_mode = \"require\"\n"),
        [
            "1: general.tls_cert_file: required when tls_mode is \"require\"",
            "1: general.tls_key_file: required when tls_mode is \"require\"",
        ]
    );

    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("server.crt"), "cert").expect("write");
    std::fs::write(dir.path().join("server.key"), "key").expect("write");
    let file = dir.path().join("pgvia.toml");
    std::fs::write(
        &file,
        "[general]\ntls_mode = \"allow\"\ntls_cert_file = \"server.crt\"\ntls_key_file = \"server.key\"\n",
    )
    .expect("write");
    let c = Config::load(&file).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.general.tls_cert_file, Some(dir.path().join("server.crt")));
    assert_eq!(c.general.tls_key_file, Some(dir.path().join("server.key")));

    // Absolute paths are kept; a missing file is named in the message.
    let missing = dir.path().join("nope.key");
    let text = format!(
        "[general]\ntls_mode = \"require\"\ntls_cert_file = \"server.crt\"\ntls_key_file = {:?}\n",
        missing.display().to_string()
    );
    let err = Config::parse(&text, &file).expect_err("missing key file");
    let [p] = err.problems() else { panic!("{err}") };
    assert_eq!((p.path.as_str(), p.line), ("general.tls_key_file", Some(4)));
    assert!(p.message.starts_with(&format!("cannot read {}: ", missing.display())), "{}", p.message);

    // A folder is not a certificate.
    let text = "[general]\ntls_mode = \"require\"\ntls_cert_file = \".\"\ntls_key_file = \"server.key\"\n";
    let err = Config::parse(text, &file).expect_err("folder as cert");
    assert_eq!(err.problems().len(), 1, "{err}");
    assert_eq!(err.problems()[0].path, "general.tls_cert_file");
}

fn with_user(general: &str, user: &str) -> String {
    format!("[general]\n{general}\n[[users]]\nname = \"u\"\n{user}\n")
}

const SCRAM: &str =
    "SCRAM-SHA-256$4096:iCdbdCgKiA0WK3GLX1wl6g==$uwyu6LcDNQ2LNXICfkNzMnHmreSxMcAB1E6U9o+4qPs=:\
                     QcjcoaG5Eoh1okRbOvSkTcPbGhHzsFmx++TcAmEmoes=";
const MD5: &str = "md51b981baf5d7e076ef51398ab170594e7";

#[test]
fn passwords_fit_the_auth_method() {
    // Trust needs no password; every other method does.
    let c = ok(&with_user("auth_method = \"trust\"", ""));
    assert_eq!((c.users[0].password.as_deref(), c.users[0].password_for_server()), (None, None));
    assert_eq!(
        problems(&with_user("", "auth_method = \"cleartext\"")),
        [
            "3: users[0].password: required because auth_method is \"cleartext\"",
            "5: users[0].auth_method: cleartext passwords are refused without TLS and tls_mode is \"disable\": \
             enable TLS or set general.allow_cleartext_without_tls = true",
        ]
    );
    assert_eq!(problems(&with_user("", "password = \"\"")), ["5: users[0].password: is empty"]);

    // Each stored format with the methods that can use it.
    for (password, methods) in [
        ("plain", &["cleartext", "md5", "scram-sha-256"][..]),
        (MD5, &["cleartext", "md5"][..]),
        (SCRAM, &["cleartext", "scram-sha-256"][..]),
    ] {
        for method in methods {
            let general = "allow_cleartext_without_tls = true";
            ok(&with_user(general, &format!("password = {password:?}\nauth_method = {method:?}")));
        }
    }
    assert_eq!(
        problems(&with_user("", &format!("password = {SCRAM:?}\nauth_method = \"md5\""))),
        ["5: users[0].password: a SCRAM-SHA-256 verifier cannot check an md5 login (PostgreSQL has the same \
          rule); give the plaintext password or use auth_method \"scram-sha-256\""]
    );
    assert_eq!(
        problems(&with_user("auth_method = \"scram-sha-256\"", &format!("password = {MD5:?}"))),
        ["5: users[0].password: an MD5 hash cannot check a scram-sha-256 login (PostgreSQL has the same rule); \
          give the plaintext password or a SCRAM-SHA-256 verifier, or use auth_method \"md5\""]
    );
    let p = problems(&with_user("", "password = \"SCRAM-SHA-256$4096:c2FsdA==$abc:def\""));
    assert_eq!(
        p,
        ["5: users[0].password: malformed SCRAM-SHA-256 verifier: StoredKey and ServerKey must each be \
          32 bytes in base64"]
    );
    let p = problems(&with_user("", "password = \"SCRAM-SHA-256$4096\""));
    assert!(p[0].starts_with("5: users[0].password: malformed SCRAM-SHA-256 verifier: expected "), "{p:?}");
    // Messages never echo a secret.
    assert!(!p[0].contains("4096"), "{p:?}");
}

#[test]
fn server_password_defaults_to_a_plaintext_password() {
    let c = ok(&with_user("", &format!("password = {SCRAM:?}")));
    assert_eq!(c.users[0].password_for_server(), None);
    let c = ok(&with_user("", &format!("password = {SCRAM:?}\nserver_password = \"pw\"")));
    assert_eq!(c.users[0].password_for_server(), Some("pw"));
    let c = ok(&with_user("", "password = \"pw\""));
    assert_eq!(c.users[0].password_for_server(), Some("pw"));
    assert_eq!(
        problems(&with_user("", &format!("password = \"pw\"\nserver_password = {SCRAM:?}"))),
        ["6: users[0].server_password: must be the plaintext password: a SCRAM-SHA-256 verifier cannot \
          answer the server"]
    );
}

#[test]
fn cleartext_without_tls_is_reported_once_for_the_general_default() {
    let text = "[general]\nauth_method = \"cleartext\"\n\
                [[users]]\nname = \"a\"\npassword = \"x\"\n[[users]]\nname = \"b\"\npassword = \"y\"\n";
    let p = problems(text);
    assert_eq!(p.len(), 1, "{p:?}");
    assert!(p[0].starts_with("2: general.auth_method: cleartext passwords are refused without TLS"), "{p:?}");
    ok(&text.replace("[general]\n", "[general]\nallow_cleartext_without_tls = true\n"));
}

#[test]
fn min_idle_is_checked_after_overrides() {
    let text = r#"[pool]
min_idle = 4

[[databases]]
name = "small"
host = "h"
pool_size = 3

[[databases]]
name = "fine"
host = "h"

[[users]]
name = "u"
password = "x"
pool_size = 2

[[users]]
name = "v"
password = "x"
min_idle = 0
"#;
    assert_eq!(
        problems(text),
        [
            "7: databases[0].pool_size: pool_size 3 is smaller than min_idle 4 (set at pool.min_idle)",
            "16: users[0].pool_size: pool_size 2 is smaller than min_idle 4 (set at pool.min_idle) for \
             database \"small\" and user \"u\"",
        ]
    );
    // Lowering the database's min_idle fixes its pool; the user still clashes with [pool].
    let text = text.replace("pool_size = 3", "pool_size = 3\nmin_idle = 1");
    assert_eq!(
        problems(&text),
        ["17: users[0].pool_size: pool_size 2 is smaller than min_idle 4 (set at pool.min_idle) for \
          database \"fine\" and user \"u\""]
    );
}

#[test]
fn timeouts_and_limits() {
    assert_eq!(
        problems("[pool]\nconnect_timeout = \"0s\"\n"),
        ["2: pool.connect_timeout: must be more than 0s"]
    );
    assert_eq!(
        problems("[[databases]]\nname = \"a\"\nhost = \"h\"\ncheckout_timeout = \"0ms\"\nmax_client_connections = 0\n"),
        [
            "4: databases[0].checkout_timeout: must be more than 0s",
            "5: databases[0].max_client_connections: must be at least 1",
        ]
    );
    let c =
        ok("[pool]\nidle_timeout = \"0s\"\nmax_lifetime = \"0s\"\n[general]\nshutdown_timeout = \"250ms\"\n");
    assert_eq!((c.pool.idle_timeout, c.pool.max_lifetime), (Duration::ZERO, Duration::ZERO));
    assert_eq!(c.general.shutdown_timeout, Duration::from_millis(250));
    assert_eq!(
        problems("[general]\nserver_reset_timeout = \"0s\"\n"),
        ["2: general.server_reset_timeout: must be more than 0s"]
    );
    ok("[general]\nmax_message_size = 1024\nserver_reset_query = \"\"\nlog_level = \"warn,pgvia::pool=debug\"\n");
    assert_eq!(
        problems("[[users]]\nname = \"u\"\npassword = \"p\"\nmax_client_connections = 0\n"),
        ["4: users[0].max_client_connections: must be at least 1"]
    );
    assert_eq!(
        problems("[general]\nworker_threads = 0\n"),
        ["2: general.worker_threads: must be at least 1 (leave it out for one per CPU)"]
    );
    assert_eq!(ok("[general]\nworker_threads = 1\n").general.worker_threads, Some(1));
    assert_eq!(ok("").general.worker_threads, None);
}

#[test]
fn session_time_limits_resolve_through_the_layers() {
    let c = ok(r#"
[pool]
client_idle_timeout = "10m"
idle_in_transaction_timeout = "30s"
query_timeout = "1m"

[[databases]]
name = "app"
host = "h"
query_timeout = "5s"

[[users]]
name = "u"
password = "p"
idle_in_transaction_timeout = "0s"
max_client_connections = 7
"#);
    let s = c.pool_settings(&c.databases[0], &c.users[0]);
    assert_eq!(
        (s.client_idle_timeout, s.idle_in_transaction_timeout, s.query_timeout),
        (secs(600), Duration::ZERO, secs(5))
    );
    assert_eq!(c.users[0].max_client_connections, Some(7));
    let d = ok("");
    assert_eq!(
        (d.pool.client_idle_timeout, d.pool.idle_in_transaction_timeout, d.pool.query_timeout),
        (Duration::ZERO, Duration::ZERO, Duration::ZERO),
        "every session time limit is off by default"
    );
}

#[test]
fn io_errors_name_the_file() {
    let err = Config::load(Path::new("/nonexistent/pgvia.toml")).expect_err("no such file");
    assert!(matches!(err, ConfigError::Io { .. }));
    assert!(err.to_string().starts_with("/nonexistent/pgvia.toml: cannot read configuration: "), "{err}");
    assert!(err.problems().is_empty());
}

#[test]
fn display_omits_unknown_lines() {
    let err = ConfigError::Invalid {
        file: PathBuf::from("x.toml"),
        problems: vec![
            Problem { path: "users[0].password".into(), line: None, message: "is empty".into() },
            Problem { path: String::new(), line: Some(3), message: "invalid table header".into() },
        ],
    };
    assert_eq!(err.to_string(), "x.toml: users[0].password: is empty\nx.toml:3: invalid table header");
}

#[test]
fn primary_and_replicas() {
    let ok = "[[users]]\nname = \"u\"\nauth_method = \"trust\"\ndefault_role = \"replica\"\n\
              [[databases]]\nname = \"a\"\nread_write_split = \"conservative\"\nload_balance = \"least_connections\"\n\
              max_replica_lag = \"5s\"\n\
              [[databases.servers]]\nhost = \"10.0.0.1\"\nrole = \"primary\"\n\
              [[databases.servers]]\nhost = \"10.0.0.2\"\nport = 5433\nweight = 3\n";
    let config = Config::parse(ok, Path::new("pgvia.toml")).unwrap();
    let db = &config.databases[0];
    let r = db.routing(&config.users);
    assert_eq!(r.servers.len(), 2);
    assert_eq!((r.servers[1].port, r.servers[1].role, r.servers[1].weight), (5433, ServerRole::Auto, 3));
    assert_eq!(r.read_write_split, ReadWriteSplit::Conservative);
    assert_eq!(r.load_balance, LoadBalance::LeastConnections);
    assert_eq!(r.max_replica_lag, Duration::from_secs(5));
    assert_eq!(r.read_your_writes, Duration::from_secs(1));
    assert_eq!(r.health_check_user.as_deref(), Some("u"));
    assert_eq!(db.first_server(), ("10.0.0.1", 5432));
    assert_eq!(config.users[0].default_role, Some(RolePreference::Replica));

    let bad = "[[users]]\nname = \"u\"\nauth_method = \"trust\"\n\
               [[databases]]\nname = \"a\"\nhost = \"h\"\nhealth_check_interval = \"0s\"\nhealth_check_user = \"nobody\"\n\
               [[databases.servers]]\nhost = \"x\"\nrole = \"primary\"\n\
               [[databases.servers]]\nhost = \"x\"\nrole = \"primary\"\n\
               [[databases]]\nname = \"b\"\n\
               [[databases.servers]]\nhost = \"y\"\nrole = \"replica\"\n";
    assert_eq!(
        problems(bad),
        [
            "6: databases[0].host: give either host/port or [[databases.servers]], not both",
            "7: databases[0].health_check_interval: must be more than 0s",
            "8: databases[0].health_check_user: no [[users]] entry is called \"nobody\"",
            "9: databases[0].servers: more than one server has role \"primary\"",
            "13: databases[0].servers[1].host: x:5432 is listed twice",
            "17: databases[1].servers: no server can take writes: give one role \"primary\" or \"auto\"",
        ]
    );
}

#[test]
fn tls_keys_both_ways_are_checked() {
    let db = |keys: &str| {
        format!(
            "[[databases]]\nname = \"app\"\nhost = \"127.0.0.1\"\n{keys}\n\n[[users]]\nname = \"app\"\npassword = \"pw\"\n"
        )
    };
    let verify = problems(&db("server_tls_mode = \"verify-full\""));
    assert!(
        verify.iter().any(|p| p.contains("server_tls_mode") && p.contains("needs server_tls_ca_file")),
        "{verify:?}"
    );
    let direct = problems(&db("server_tls_mode = \"prefer\"\nserver_tls_negotiation = \"direct\""));
    assert!(
        direct.iter().any(|p| p.contains("server_tls_negotiation") && p.contains("require or stronger")),
        "{direct:?}"
    );
    let half = problems(&db("server_tls_mode = \"require\"\nserver_tls_cert_file = \"/nonexistent.crt\""));
    assert!(half.iter().any(|p| p.contains("together")), "{half:?}");
    let missing =
        problems(&db("server_tls_mode = \"verify-ca\"\nserver_tls_ca_file = \"/nonexistent/ca.crt\""));
    assert!(missing.iter().any(|p| p.contains("cannot read /nonexistent/ca.crt")), "{missing:?}");
    let bad_mode = problems(&db("server_tls_mode = \"on\""));
    assert!(bad_mode.iter().any(|p| p.contains("unknown variant `on`")), "{bad_mode:?}");
    // Defaults: no TLS to servers, 100000 SCRAM iterations at most, no Unix socket.
    let config = ok(&db(""));
    assert_eq!(config.databases[0].server_tls_mode, pgvia::config::ServerTlsMode::Disable);
    assert_eq!(config.general.server_scram_max_iterations, 100_000);
    assert!(config.general.unix_socket_dir.is_none());

    // Client certificates need a CA; the cert method too.
    let general = |g: &str, method: &str| {
        format!(
            "[general]\n{g}\n\n[[databases]]\nname = \"app\"\nhost = \"127.0.0.1\"\n\n[[users]]\nname = \"app\"\nauth_method = \"{method}\"\n"
        )
    };
    let no_ca = problems(&general("", "cert"));
    assert!(no_ca.iter().any(|p| p.contains("\"cert\" needs general.client_tls_ca_file")), "{no_ca:?}");
    let ca_without_tls = problems(&general("client_tls_ca_file = \"/nonexistent/ca.crt\"", "trust"));
    assert!(ca_without_tls.iter().any(|p| p.contains("needs TLS")), "{ca_without_tls:?}");
    let iterations = problems(&general("server_scram_max_iterations = 0", "trust"));
    assert!(iterations.iter().any(|p| p.contains("server_scram_max_iterations")), "{iterations:?}");
}
