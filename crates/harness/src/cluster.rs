//! A throwaway (or, for pgharness, persistent) PostgreSQL cluster.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use tempfile::TempDir;

use crate::bins::{bin_dir, pg_bin, supports_ssl};
use crate::conf::{quote_ident, quote_literal, url_encode};
use crate::dirs::{keep_clusters, prepare_dir};
use crate::error::{HarnessError, IoContext};
use crate::meta::Meta;
use crate::os::{run, run_with_stdin, scrub_env, RunAs};
use crate::{HbaAuth, PgVersion};

/// Loopback only: tests must never expose a server beyond this machine.
pub(crate) const HOST: &str = "127.0.0.1";
pub(crate) const SUPERUSER: &str = "postgres";

/// How to build a cluster. `Default` gives scram auth, 200 connections and
/// the server version from `PGVIA_TEST_PG`.
#[derive(Debug, Clone)]
pub struct ClusterOptions {
    pub version: PgVersion,
    /// Method for TCP connections; unix-socket connections are always trusted.
    pub auth: HbaAuth,
    pub max_connections: u32,
    /// Extra postgresql.conf settings, applied after the harness's own.
    pub settings: Vec<(String, String)>,
    /// Serve TLS with a fresh self-signed certificate (see [`Cluster::ssl_cert_path`]).
    pub ssl: bool,
    /// With `ssl`: serve this PEM certificate (chain) and key instead of a self-signed one,
    /// so a test can make them with its own CA (and client certificates to match).
    pub ssl_pem: Option<(String, String)>,
    /// With `ssl`: PEM CA certificates for client certificates (`ssl_ca_file`), which
    /// PostgreSQL then asks clients for.
    pub ssl_ca: Option<String>,
    /// Fixed port; `None` picks a free one (and retries if it is taken meanwhile).
    pub port: Option<u16>,
    /// Put the cluster here and never delete it; `None` uses a temp dir removed on drop.
    pub dir: Option<PathBuf>,
}

impl Default for ClusterOptions {
    fn default() -> Self {
        ClusterOptions::new(PgVersion::from_env())
    }
}

impl ClusterOptions {
    /// Defaults for an explicit version, ignoring `PGVIA_TEST_PG`.
    pub fn new(version: PgVersion) -> Self {
        ClusterOptions {
            version,
            auth: HbaAuth::default(),
            max_connections: 200,
            settings: Vec::new(),
            ssl: false,
            ssl_pem: None,
            ssl_ca: None,
            port: None,
            dir: None,
        }
    }

    pub fn version(mut self, version: PgVersion) -> Self {
        self.version = version;
        self
    }

    pub fn auth(mut self, auth: HbaAuth) -> Self {
        self.auth = auth;
        self
    }

    pub fn max_connections(mut self, n: u32) -> Self {
        self.max_connections = n;
        self
    }

    pub fn set(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.settings.push((key.into(), value.into()));
        self
    }

    pub fn ssl(mut self, ssl: bool) -> Self {
        self.ssl = ssl;
        self
    }

    /// Trusts these PEM CA certificates for client certificates.
    pub fn ssl_ca(mut self, ca_pem: impl Into<String>) -> Self {
        self.ssl_ca = Some(ca_pem.into());
        self
    }

    /// Serves TLS with the given PEM certificate and private key.
    pub fn ssl_pem(mut self, cert_pem: impl Into<String>, key_pem: impl Into<String>) -> Self {
        self.ssl = true;
        self.ssl_pem = Some((cert_pem.into(), key_pem.into()));
        self
    }
}

/// A running cluster. Dropping it stops the server (`-m immediate`) and,
/// for temp-dir clusters, deletes the directory unless `PGVIA_KEEP_CLUSTERS=1`.
#[derive(Debug)]
pub struct Cluster {
    pub(crate) dir: PathBuf,
    pub(crate) tmp: Option<TempDir>,
    pub(crate) meta: Meta,
    pub(crate) run_as: RunAs,
    /// When set, dropping leaves the server alone (stopped already, or owned by another process).
    pub(crate) detached: bool,
}

/// The directory a new cluster lives in: `opts.dir` (new or empty), else a fresh temp dir.
pub(crate) fn cluster_dir(opts: &ClusterOptions) -> Result<(PathBuf, Option<TempDir>), HarnessError> {
    Ok(match &opts.dir {
        Some(dir) => (prepare_dir(dir)?, None),
        None => {
            let tmp = tempfile::Builder::new()
                .prefix("pgvia-pg-")
                .tempdir()
                .ctx(|| "create a temp dir for the cluster".to_owned())?;
            (tmp.path().to_path_buf(), Some(tmp))
        }
    })
}

impl Cluster {
    pub fn start(opts: ClusterOptions) -> Result<Cluster, HarnessError> {
        let bin_dir = bin_dir(opts.version)?;
        if opts.ssl && !supports_ssl(opts.version)? {
            return Err(HarnessError::Unsupported(format!(
                "PostgreSQL {} in {} is built without SSL",
                opts.version,
                bin_dir.display()
            )));
        }
        let run_as = RunAs::detect()?;
        let (dir, tmp) = cluster_dir(&opts)?;
        let meta = Meta { port: 0, version: opts.version, bin_dir, auth: opts.auth, ssl: opts.ssl };
        // Built before initdb so that a failure below still cleans up via Drop.
        let mut cluster = Cluster { dir, tmp, meta, run_as, detached: true };
        cluster.init(&opts)?;
        cluster.detached = false;
        cluster.launch(&opts)?;
        Ok(cluster)
    }

    /// Reopens a cluster left running by `pgharness start`. The handle does
    /// not own the server: dropping it leaves the server running.
    pub fn attach(dir: &Path) -> Result<Cluster, HarnessError> {
        let dir = fs::canonicalize(dir).ctx(|| format!("resolve {}", dir.display()))?;
        let meta = Meta::read(&dir)?;
        Ok(Cluster { dir, tmp: None, meta, run_as: RunAs::detect()?, detached: true })
    }

    /// Leaves the server running when this handle goes away (used by `pgharness start`).
    pub fn detach(mut self) -> PathBuf {
        self.detached = true;
        if let Some(tmp) = self.tmp.take() {
            return tmp.keep();
        }
        self.dir.clone()
    }

    /// Stops the server cleanly (`-m fast`) and removes a temp dir as Drop would.
    pub fn stop(mut self) -> Result<(), HarnessError> {
        self.detached = true;
        self.pg_ctl_stop("fast")?;
        if let Some(tmp) = self.tmp.take() {
            if keep_clusters() {
                eprintln!("pgvia harness: keeping cluster dir {}", tmp.keep().display());
            } else {
                let path = tmp.path().to_path_buf();
                tmp.close().ctx(|| format!("remove {}", path.display()))?;
            }
        }
        Ok(())
    }

    pub fn port(&self) -> u16 {
        self.meta.port
    }

    pub fn host(&self) -> &str {
        HOST
    }

    pub fn version(&self) -> PgVersion {
        self.meta.version
    }

    pub fn auth(&self) -> HbaAuth {
        self.meta.auth
    }

    pub fn bin_dir(&self) -> &Path {
        &self.meta.bin_dir
    }

    /// The cluster's own directory (data, socket dir, log, metadata).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    pub fn socket_dir(&self) -> PathBuf {
        self.dir.join("sock")
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir.join("postgres.log")
    }

    /// The self-signed certificate the server presents, when started with `ssl`.
    pub fn ssl_cert_path(&self) -> Option<PathBuf> {
        self.meta.ssl.then(|| self.data_dir().join("server.crt"))
    }

    /// `postgres://user:password@127.0.0.1:port/db`, percent-encoded.
    pub fn url(&self, user: &str, password: &str, db: &str) -> String {
        format!(
            "postgres://{}:{}@{HOST}:{}/{}",
            url_encode(user),
            url_encode(password),
            self.port(),
            url_encode(db)
        )
    }

    /// Path of a client tool (`pgbench`, ...) matching this cluster's version.
    pub fn tool(&self, name: &str) -> Result<PathBuf, HarnessError> {
        pg_bin(self.version(), name)
    }

    pub fn is_running(&self) -> bool {
        let mut cmd = self.run_as.command(&self.meta.bin_dir.join("pg_ctl"));
        cmd.arg("status").arg("-D").arg(self.data_dir());
        run(&mut cmd).is_ok()
    }

    /// Runs `sql` as the superuser over the unix socket and returns the
    /// unaligned, tuples-only output, trimmed. Statements run one by one
    /// (like a script), so CREATE DATABASE can follow other statements.
    pub fn psql(&self, db: &str, sql: &str) -> Result<String, HarnessError> {
        let mut cmd = Command::new(self.tool("psql")?);
        scrub_env(&mut cmd);
        cmd.args(["-X", "-A", "-t", "-q", "-v", "ON_ERROR_STOP=1", "-h"])
            .arg(self.socket_dir())
            .arg("-p")
            .arg(self.port().to_string())
            .args(["-U", SUPERUSER, "-d", db, "-f", "-"]);
        let out = run_with_stdin(&mut cmd, Some(sql))?;
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    }

    /// Creates a login role whose password is stored as a SCRAM verifier.
    pub fn create_user(&self, name: &str, password: &str) -> Result<(), HarnessError> {
        self.create_user_with(name, password, "scram-sha-256")
    }

    /// Creates a login role whose password is stored as an MD5 hash (for md5 auth tests).
    pub fn create_user_md5(&self, name: &str, password: &str) -> Result<(), HarnessError> {
        self.create_user_with(name, password, "md5")
    }

    fn create_user_with(&self, name: &str, password: &str, encryption: &str) -> Result<(), HarnessError> {
        self.psql(
            "postgres",
            &format!(
                "SET password_encryption = {};\nCREATE ROLE {} LOGIN PASSWORD {};\n",
                quote_literal(encryption),
                quote_ident(name),
                quote_literal(password)
            ),
        )
        .map(drop)
    }

    pub fn create_database(&self, name: &str, owner: &str) -> Result<(), HarnessError> {
        self.psql(
            "postgres",
            &format!("CREATE DATABASE {} OWNER {};\n", quote_ident(name), quote_ident(owner)),
        )
        .map(drop)
    }
}
