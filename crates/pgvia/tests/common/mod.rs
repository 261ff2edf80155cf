//! Fixtures shared by the integration tests: a PostgreSQL cluster, an in-process pgvia in
//! front of it, client helpers (tokio-postgres, psql), and the pool-leak check.
//!
//! Every test starts its own cluster and its own proxy (on an ephemeral port), so tests run
//! in parallel without sharing state.

// Each test binary uses a different subset of these helpers.
#![allow(dead_code)]

pub mod http;
pub mod ops;
pub mod raw;
pub mod replicas;
pub mod shards;
pub mod tls;
pub mod toxiproxy;

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Output, Stdio};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use harness::{Cluster, ClusterOptions, HbaAuth};
use pgvia::app::App;
use pgvia::config::Config;
use pgvia::Proxy;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_postgres::{Client, NoTls};

/// The role and database every cluster gets, reachable through pgvia under the same names.
pub const USER: &str = "app";
pub const PASSWORD: &str = "secret";
pub const DB: &str = "app";

/// Set `RUST_LOG` to see pgvia's logs in a failing test's output.
pub fn init_logging() {
    if std::env::var_os("RUST_LOG").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
    }
}

/// A SCRAM cluster (version from `PGVIA_TEST_PG`) with role `app`/`secret` owning database `app`.
pub fn start_pg() -> Cluster {
    start_pg_with(ClusterOptions::default())
}

pub fn start_pg_with(opts: ClusterOptions) -> Cluster {
    init_logging();
    let pg = Cluster::start(opts.auth(HbaAuth::ScramSha256)).expect("start PostgreSQL");
    pg.create_user(USER, PASSWORD).expect("create role");
    pg.create_database(DB, USER).expect("create database");
    pg
}

/// Builds a pgvia configuration pointing database `app` at a cluster. User `app` (SCRAM,
/// password `secret`) is always present; more users and settings are added with the methods.
#[derive(Clone)]
pub struct ConfigBuilder {
    general: Vec<String>,
    pool: Vec<String>,
    databases: Vec<String>,
    users: Vec<String>,
    limits: Vec<String>,
    gateway: Vec<String>,
}

impl ConfigBuilder {
    pub fn new(pg: &Cluster) -> Self {
        Self {
            general: vec!["listen_addr = \"127.0.0.1\"".into(), "shutdown_timeout = \"2s\"".into()],
            pool: vec!["pool_mode = \"session\"".into()],
            databases: vec![format!(
                "name = \"{DB}\"\nhost = \"{}\"\nport = {}\ndbname = \"{DB}\"",
                pg.host(),
                pg.port()
            )],
            users: vec![format!("name = \"{USER}\"\npassword = \"{PASSWORD}\"")],
            limits: Vec::new(),
            gateway: Vec::new(),
        }
    }

    /// Adds a `key = value` line to `[gateway]` (its `listen` is set by [`TestProxy`] to an
    /// ephemeral port whenever the section is present).
    pub fn gateway(mut self, line: &str) -> Self {
        self.gateway.push(line.to_owned());
        self
    }

    /// Adds a `key = value` line to `[general]` (later lines override nothing: keys must be
    /// unique, so only add keys not set by default: `listen_addr`, `shutdown_timeout`).
    pub fn general(mut self, line: &str) -> Self {
        let key = line.split('=').next().unwrap_or_default().trim();
        self.general.retain(|l| l.split('=').next().unwrap_or_default().trim() != key);
        self.general.push(line.to_owned());
        self
    }

    /// Sets a `key = value` line in `[pool]`, replacing the key if present (`pool_mode` is
    /// `"session"` unless replaced).
    pub fn pool(mut self, line: &str) -> Self {
        let key = line.split('=').next().unwrap_or_default().trim();
        self.pool.retain(|l| l.split('=').next().unwrap_or_default().trim() != key);
        self.pool.push(line.to_owned());
        self
    }

    /// Adds a `key = value` line to `[limits]`.
    pub fn limits(mut self, line: &str) -> Self {
        self.limits.push(line.to_owned());
        self
    }

    /// Adds a `[[databases]]` entry, given as its body lines.
    pub fn database(mut self, body: &str) -> Self {
        self.databases.push(body.to_owned());
        self
    }

    /// Adds `key = value` lines to the `app` database's entry.
    pub fn app_database(mut self, lines: &str) -> Self {
        self.databases[0].push('\n');
        self.databases[0].push_str(lines);
        self
    }

    /// Points the `app` database at another port (a fault proxy in front of the cluster).
    pub fn app_port(mut self, port: u16) -> Self {
        let lines: Vec<String> = self.databases[0]
            .lines()
            .map(|l| if l.starts_with("port = ") { format!("port = {port}") } else { l.to_owned() })
            .collect();
        self.databases[0] = lines.join("\n");
        self
    }

    /// Adds a `[[users]]` entry, given as its body lines.
    pub fn user(mut self, body: &str) -> Self {
        self.users.push(body.to_owned());
        self
    }

    pub fn toml(&self) -> String {
        let mut general = self.general.clone();
        // The test gateway is plain HTTP on loopback, where a `/sql` password travels in clear:
        // allowed here unless a test says otherwise (pgvia's default refuses it).
        if !self.gateway.is_empty()
            && !general
                .iter()
                .any(|l| l.split('=').next().unwrap_or_default().trim() == "allow_cleartext_without_tls")
        {
            general.push("allow_cleartext_without_tls = true".to_owned());
        }
        let mut s = format!("[general]\n{}\n\n[pool]\n{}\n", general.join("\n"), self.pool.join("\n"));
        for d in &self.databases {
            s.push_str(&format!("\n[[databases]]\n{d}\n"));
        }
        for u in &self.users {
            s.push_str(&format!("\n[[users]]\n{u}\n"));
        }
        if !self.limits.is_empty() {
            s.push_str(&format!("\n[limits]\n{}\n", self.limits.join("\n")));
        }
        if !self.gateway.is_empty() {
            s.push_str(&format!("\n[gateway]\nlisten = \"127.0.0.1:0\"\n{}\n", self.gateway.join("\n")));
        }
        s
    }
}

/// pgvia running in this process on an ephemeral port.
pub struct TestProxy {
    pub addr: SocketAddr,
    /// pgvia's Unix socket file, when `general.unix_socket_dir` is set.
    pub unix_socket: Option<std::path::PathBuf>,
    /// Where `/metrics` is served, when `general.metrics_listen` is set.
    pub metrics: Option<SocketAddr>,
    /// Where the HTTP gateway is served, when `[gateway]` is configured.
    pub gateway: Option<SocketAddr>,
    pub app: Arc<App>,
    stop: Option<oneshot::Sender<()>>,
    done: Option<JoinHandle<()>>,
}

impl TestProxy {
    pub async fn start(builder: &ConfigBuilder) -> TestProxy {
        Self::start_toml(&builder.toml()).await
    }

    pub async fn start_toml(toml: &str) -> TestProxy {
        Self::start_parsed(toml, Path::new("/tmp/pgvia-test.toml")).await
    }

    /// Starts from a configuration file, which `RELOAD` and SIGHUP then re-read.
    pub async fn start_file(path: &Path) -> TestProxy {
        let toml = std::fs::read_to_string(path).expect("read the test configuration");
        Self::start_parsed(&toml, path).await
    }

    async fn start_parsed(toml: &str, origin: &Path) -> TestProxy {
        let mut config = match Config::parse(toml, origin) {
            Ok(c) => c,
            Err(e) => panic!("invalid test configuration:\n{e}\n---\n{toml}"),
        };
        // Validation rejects `listen_port = 0`, so the port is set after parsing: the kernel
        // then picks a free one, which no other test can take from us.
        config.general.listen_port = 0;
        let proxy = Proxy::bind(config).await.expect("bind pgvia");
        let addr = proxy.local_addr().expect("local_addr");
        let metrics = proxy.metrics_addr();
        let gateway = proxy.gateway_addr();
        let unix_socket = proxy.unix_socket_path().map(Path::to_path_buf);
        let app = proxy.app().clone();
        let (stop, stop_rx) = oneshot::channel::<()>();
        let done = tokio::spawn(proxy.run(async move {
            let _ = stop_rx.await;
        }));
        TestProxy { addr, unix_socket, metrics, gateway, app, stop: Some(stop), done: Some(done) }
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// A libpq/tokio-postgres key=value connection string for this proxy.
    pub fn conninfo(&self, user: &str, password: &str, db: &str) -> String {
        format!("host=127.0.0.1 port={} user={user} password={password} dbname={db}", self.port())
    }

    /// Connects with tokio-postgres, without TLS, and drives the connection in a task.
    pub async fn connect(&self, user: &str, password: &str, db: &str) -> Client {
        connect(&self.conninfo(user, password, db)).await.expect("connect through pgvia")
    }

    /// Server connections opened so far, over every pool.
    #[allow(dead_code)]
    pub fn servers_created(&self) -> u64 {
        let pools = self.app.pools.all();
        pools.iter().map(|p| p.stats.servers_created.load(std::sync::atomic::Ordering::Relaxed)).sum()
    }

    /// Every pool's `servers_active` must fall to 0 within 2 s once clients are gone.
    pub async fn assert_no_leaks(&self) {
        assert_pools_drained(&self.app).await;
    }

    /// Stops accepting and waits for the graceful shutdown to finish.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(done) = self.done.take() {
            tokio::time::timeout(Duration::from_secs(30), done)
                .await
                .expect("pgvia shut down within 30 s")
                .expect("pgvia's run task");
        }
    }
}

impl Drop for TestProxy {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// Waits up to 2 s for every pool of `app` to have no server checked out.
pub async fn assert_pools_drained(app: &App) {
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let busy: Vec<(String, usize)> = app
            .pools
            .all()
            .iter()
            .map(|p| (p.name.clone(), p.stats.servers_active.load(Ordering::Relaxed)))
            .filter(|(_, n)| *n != 0)
            .collect();
        if busy.is_empty() {
            return;
        }
        if Instant::now() >= deadline {
            panic!("server connections still checked out 2 s after the clients left: {busy:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// tokio-postgres without TLS; the connection is driven by a spawned task.
pub async fn connect(conninfo: &str) -> Result<Client, tokio_postgres::Error> {
    let (client, conn) = tokio_postgres::connect(conninfo, NoTls).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(client)
}

/// A libpq connection string straight to the cluster, bypassing pgvia.
pub fn direct_conninfo(pg: &Cluster, user: &str, password: &str, db: &str) -> String {
    format!("host={} port={} user={user} password={password} dbname={db}", pg.host(), pg.port())
}

/// A client tool (`psql`, `pgbench`) of the cluster's version, with a clean libpq environment.
pub fn tool(pg: &Cluster, name: &str) -> tokio::process::Command {
    client_command(pg.tool(name).expect("client tool"))
}

/// A client program with none of the caller's libpq variables and a connect timeout.
fn client_command(program: std::path::PathBuf) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(program);
    for var in harness::LIBPQ_ENV {
        cmd.env_remove(var);
    }
    cmd.env("PGCONNECT_TIMEOUT", "10").kill_on_drop(true);
    cmd
}

/// Runs psql (`-X`, no psqlrc) against `conninfo` with extra arguments and optional stdin.
pub async fn psql(pg: &Cluster, conninfo: &str, args: &[&str], stdin: Option<&str>) -> Output {
    let mut cmd = tool(pg, "psql");
    cmd.arg("-X").arg("-d").arg(conninfo).args(args);
    run(cmd, stdin).await
}

/// Like [`psql`], with a psql whose libpq has TLS. The PostgreSQL 18 build used for tests has
/// none, so Debian's PostgreSQL 15 psql stands in; TLS ends at pgvia either way.
pub async fn psql_tls(pg: &Cluster, conninfo: &str, args: &[&str], stdin: Option<&str>) -> Output {
    let version = if harness::supports_ssl(pg.version()).expect("pg_config") {
        pg.version()
    } else {
        harness::PgVersion::V15
    };
    let mut cmd = client_command(harness::pg_bin(version, "psql").expect("psql"));
    cmd.arg("-X").arg("-d").arg(conninfo).args(args);
    run(cmd, stdin).await
}

/// Runs a command to completion, feeding `stdin` if given, with a 120 s limit.
pub async fn run(mut cmd: tokio::process::Command, stdin: Option<&str>) -> Output {
    use tokio::io::AsyncWriteExt;
    cmd.stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn client tool");
    if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(input.as_bytes()).await.expect("write stdin");
    }
    tokio::time::timeout(Duration::from_secs(120), child.wait_with_output())
        .await
        .expect("client tool finished within 120 s")
        .expect("wait for client tool")
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Panics with both streams unless the command succeeded.
pub fn assert_success(what: &str, out: &Output) {
    assert!(
        out.status.success(),
        "{what} failed ({}):\n--- stdout ---\n{}\n--- stderr ---\n{}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
}

/// The SQLSTATE of a tokio-postgres error, if the server (or pgvia) sent one.
pub fn sqlstate(e: &tokio_postgres::Error) -> Option<String> {
    e.as_db_error().map(|d| d.code().code().to_owned())
}

/// A tokio-postgres client whose notifications are collected on a channel (the connection is
/// driven in a task that forwards each NotificationResponse).
pub async fn notified_client(
    conninfo: &str,
) -> (Client, tokio::sync::mpsc::UnboundedReceiver<tokio_postgres::Notification>) {
    use futures_util::StreamExt;
    let (client, mut conn) = tokio_postgres::connect(conninfo, NoTls).await.expect("connect");
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut messages = futures_util::stream::poll_fn(move |cx| conn.poll_message(cx));
        while let Some(Ok(message)) = messages.next().await {
            if let tokio_postgres::AsyncMessage::Notification(n) = message {
                let _ = tx.send(n);
            }
        }
    });
    (client, rx)
}

/// The first row of a simple query's answer, each value as text (`NULL` for null).
pub async fn first_row(client: &Client, sql: &str) -> Result<Vec<String>, tokio_postgres::Error> {
    let messages = client.simple_query(sql).await?;
    Ok(messages
        .into_iter()
        .find_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => {
                Some((0..r.len()).map(|i| r.get(i).unwrap_or("NULL").to_owned()).collect())
            }
            _ => None,
        })
        .unwrap_or_default())
}

/// The pids of the backends PostgreSQL has for user `app` (pgvia's servers), asked over the
/// cluster's own socket.
pub fn app_backends(pg: &harness::Cluster) -> Vec<String> {
    let list = pg
        .psql(
            DB,
            &format!("SELECT string_agg(pid::text, ',') FROM pg_stat_activity WHERE usename = '{USER}'"),
        )
        .expect("list backends");
    list.split(',').filter(|s| !s.is_empty()).map(str::to_owned).collect()
}
