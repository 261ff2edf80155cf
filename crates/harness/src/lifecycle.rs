//! Creating, starting and stopping the server behind a [`Cluster`].

use std::fs;
use std::io::{Read, Seek, SeekFrom};
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use crate::cluster::{HOST, SUPERUSER};
use crate::conf::{hba_conf, render_settings};
use crate::dirs::keep_clusters;
use crate::error::{HarnessError, IoContext};
use crate::os::run;
use crate::{Cluster, ClusterOptions};

const HARNESS_CONF: &str = "pgvia_harness.conf";
const START_ATTEMPTS: usize = 5;
/// sun_path is 108 bytes and the socket file name adds `/.s.PGSQL.NNNNN`.
const MAX_SOCKET_DIR_LEN: usize = 90;
const LOG_TAIL_LINES: usize = 30;

/// A port nobody listens on right now. Another process may grab it before
/// the server binds, which `launch` handles by retrying.
fn free_port() -> Result<u16, HarnessError> {
    let listener = TcpListener::bind((HOST, 0)).ctx(|| "bind 127.0.0.1:0 to pick a port".to_owned())?;
    Ok(listener.local_addr().ctx(|| "local_addr of probe socket".to_owned())?.port())
}

impl Cluster {
    pub(crate) fn init(&self, opts: &ClusterOptions) -> Result<(), HarnessError> {
        self.make_dirs()?;
        let mut initdb = self.run_as.command(&self.meta.bin_dir.join("initdb"));
        initdb.arg("-D").arg(self.data_dir()).args([
            "-U",
            SUPERUSER,
            "--auth=trust",
            "--encoding=UTF8",
            "--locale=C",
            "--no-sync",
        ]);
        run(&mut initdb)?;

        let data = self.data_dir();
        self.write_owned(&data.join("pg_hba.conf"), &hba_conf(opts.auth))?;
        let conf_path = data.join("postgresql.conf");
        let mut conf = fs::read_to_string(&conf_path).ctx(|| format!("read {}", conf_path.display()))?;
        conf.push_str(&format!("\n# pgvia test harness\ninclude '{HARNESS_CONF}'\n"));
        self.write_owned(&conf_path, &conf)?;
        match (&opts.ssl_pem, opts.ssl) {
            (Some((cert, key)), true) => self.write_certificate(cert, key)?,
            (None, true) => self.make_certificate()?,
            (_, false) => {}
        }
        if let (Some(ca), true) = (&opts.ssl_ca, opts.ssl) {
            self.write_owned(&data.join("root.crt"), ca)?;
        }
        Ok(())
    }

    /// The cluster dir and its socket dir, owned by the server's account; the data dir
    /// itself is left for initdb or pg_basebackup to create.
    pub(crate) fn make_dirs(&self) -> Result<(), HarnessError> {
        let sock = self.socket_dir();
        if sock.as_os_str().len() > MAX_SOCKET_DIR_LEN {
            return Err(HarnessError::InvalidOption(format!(
                "cluster dir {} is too long for a unix socket path; use a shorter one",
                self.dir.display()
            )));
        }
        self.run_as.give(&self.dir)?;
        fs::create_dir(&sock).ctx(|| format!("create {}", sock.display()))?;
        self.run_as.give(&sock)?;
        self.check_reachable()
    }

    /// Starts the server, retrying on a fresh port if the picked one was taken.
    pub(crate) fn launch(&mut self, opts: &ClusterOptions) -> Result<(), HarnessError> {
        let log = self.log_path();
        let attempts = if opts.port.is_some() { 1 } else { START_ATTEMPTS };
        let mut last_err = None;
        for _ in 0..attempts {
            let port = match opts.port {
                Some(p) => p,
                None => free_port()?,
            };
            self.meta.port = port;
            self.write_settings(opts)?;
            let log_start = fs::metadata(&log).map(|m| m.len()).unwrap_or(0);
            let mut pg_ctl = self.run_as.command(&self.meta.bin_dir.join("pg_ctl"));
            pg_ctl.arg("start").args(["-w", "-t", "60", "-D"]).arg(self.data_dir()).arg("-l").arg(&log);
            match run(&mut pg_ctl) {
                Ok(_) => {
                    self.meta.write(&self.dir)?;
                    return Ok(());
                }
                Err(e) => {
                    let new_log = read_from(&log, log_start);
                    if !new_log.contains("already in use") {
                        return Err(self.start_error(e));
                    }
                    last_err = Some(e);
                }
            }
        }
        Err(self
            .start_error(last_err.unwrap_or_else(|| HarnessError::InvalidOption("no start attempt".into()))))
    }

    pub(crate) fn start_error(&self, cause: HarnessError) -> HarnessError {
        let log = self.log_path();
        let text = read_from(&log, 0);
        let lines: Vec<&str> = text.lines().collect();
        let tail = lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n");
        HarnessError::Start { log, log_tail: format!("{cause}\n--- log tail ---\n{tail}") }
    }

    /// Everything in postgresql.conf that may change per start attempt.
    fn write_settings(&self, opts: &ClusterOptions) -> Result<(), HarnessError> {
        let mut settings: Vec<(String, String)> = vec![
            ("port".into(), self.meta.port.to_string()),
            ("listen_addresses".into(), HOST.into()),
            ("unix_socket_directories".into(), self.socket_dir().display().to_string()),
            ("max_connections".into(), opts.max_connections.to_string()),
            // Durability is irrelevant for throwaway data and costs the tests time.
            ("fsync".into(), "off".into()),
            ("synchronous_commit".into(), "off".into()),
            ("full_page_writes".into(), "off".into()),
            ("password_encryption".into(), self.meta.auth.password_encryption().into()),
            // Any cluster can be the primary of `start_replica` (these are the defaults, stated
            // so a test's override is deliberate). wal_keep_size lets a replica that was stopped
            // for a while catch up from the primary's WAL without a replication slot.
            ("wal_level".into(), "replica".into()),
            ("max_wal_senders".into(), "10".into()),
            ("wal_keep_size".into(), "128MB".into()),
        ];
        if self.meta.ssl {
            for (k, v) in [("ssl", "on"), ("ssl_cert_file", "server.crt"), ("ssl_key_file", "server.key")] {
                settings.push((k.into(), v.into()));
            }
            if opts.ssl_ca.is_some() {
                settings.push(("ssl_ca_file".into(), "root.crt".into()));
            }
        }
        settings.extend(opts.settings.iter().cloned());
        self.write_owned(&self.data_dir().join(HARNESS_CONF), &render_settings(&settings)?)
    }

    /// A self-signed certificate for 127.0.0.1/localhost, valid for two days.
    fn make_certificate(&self) -> Result<(), HarnessError> {
        let data = self.data_dir();
        let mut openssl = self.run_as.command(Path::new("openssl"));
        openssl
            .args(["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=localhost"])
            .args(["-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost", "-keyout"])
            .arg(data.join("server.key"))
            .arg("-out")
            .arg(data.join("server.crt"));
        run(&mut openssl)?;
        // The server refuses a key readable by group or others.
        let key = data.join("server.key");
        fs::set_permissions(&key, fs::Permissions::from_mode(0o600))
            .ctx(|| format!("chmod {}", key.display()))
    }

    /// A certificate and key the test made.
    fn write_certificate(&self, cert_pem: &str, key_pem: &str) -> Result<(), HarnessError> {
        let data = self.data_dir();
        self.write_owned(&data.join("server.crt"), cert_pem)?;
        let key = data.join("server.key");
        self.write_owned(&key, key_pem)?;
        fs::set_permissions(&key, fs::Permissions::from_mode(0o600))
            .ctx(|| format!("chmod {}", key.display()))
    }

    /// Fails early, with a hint, when `postgres` cannot get into the
    /// directory (e.g. a repo checked out under root's 0700 home).
    fn check_reachable(&self) -> Result<(), HarnessError> {
        if matches!(self.run_as, crate::os::RunAs::Current) {
            return Ok(());
        }
        let mut test = self.run_as.command(Path::new("test"));
        test.arg("-w").arg(self.socket_dir());
        run(&mut test).map(drop).map_err(|_| {
            HarnessError::InvalidOption(format!(
                "the postgres OS user cannot write {}; pick a directory whose parents are \
                 world-searchable (e.g. under /var/tmp)",
                self.dir.display()
            ))
        })
    }

    /// Writes a file inside the data dir and hands it to the server's account.
    fn write_owned(&self, path: &Path, contents: &str) -> Result<(), HarnessError> {
        fs::write(path, contents).ctx(|| format!("write {}", path.display()))?;
        self.run_as.give(path)
    }

    pub(crate) fn pg_ctl_stop(&self, mode: &str) -> Result<(), HarnessError> {
        let mut pg_ctl = self.run_as.command(&self.meta.bin_dir.join("pg_ctl"));
        pg_ctl.arg("stop").args(["-w", "-t", "60", "-m", mode, "-D"]).arg(self.data_dir());
        run(&mut pg_ctl).map(drop)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // No pid file means no server (e.g. start failed): nothing to stop, nothing to complain about.
        if !self.detached && self.data_dir().join("postmaster.pid").exists() {
            if let Err(e) = self.pg_ctl_stop("immediate") {
                eprintln!("pgvia harness: stopping cluster in {}: {e}", self.dir.display());
            }
        }
        if let Some(tmp) = self.tmp.take() {
            if keep_clusters() {
                eprintln!("pgvia harness: keeping cluster dir {}", tmp.keep().display());
            }
        }
    }
}

fn read_from(path: &Path, offset: u64) -> String {
    let mut text = String::new();
    if let Ok(mut f) = fs::File::open(path) {
        if f.seek(SeekFrom::Start(offset)).is_ok() {
            let mut bytes = Vec::new();
            let _ = f.read_to_end(&mut bytes);
            text = String::from_utf8_lossy(&bytes).into_owned();
        }
    }
    text
}
