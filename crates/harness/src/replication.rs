//! Streaming replicas of a harness cluster, and the operations failover tests need:
//! promote, stop and start again, pause and resume replay, wait for a replica to catch up.
//!
//! A replica is an ordinary [`Cluster`] made with `pg_basebackup -R -X stream` from its
//! primary, with its own directory and port, started with `hot_standby = on`. It connects
//! (and then streams) over the primary's unix socket as the superuser, which pg_hba trusts
//! there (see `conf::hba_conf`).

use std::fmt;
use std::str::FromStr;
use std::time::{Duration, Instant};

use crate::cluster::{cluster_dir, SUPERUSER};
use crate::error::HarnessError;
use crate::meta::Meta;
use crate::os::run;
use crate::{Cluster, ClusterOptions};

/// How long the waits without an explicit timeout give the server.
const DEFAULT_WAIT: Duration = Duration::from_secs(30);
const POLL: Duration = Duration::from_millis(50);

/// A write-ahead log position (`pg_lsn`), comparable and printable as PostgreSQL does (`16/B374D848`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Lsn(pub u64);

impl fmt::Display for Lsn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:X}/{:X}", self.0 >> 32, self.0 & 0xFFFF_FFFF)
    }
}

impl FromStr for Lsn {
    type Err = HarnessError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || HarnessError::InvalidOption(format!("`{s}` is not an LSN"));
        let (hi, lo) = s.trim().split_once('/').ok_or_else(bad)?;
        let hi = u32::from_str_radix(hi, 16).map_err(|_| bad())?;
        let lo = u32::from_str_radix(lo, 16).map_err(|_| bad())?;
        Ok(Lsn((u64::from(hi) << 32) | u64::from(lo)))
    }
}

impl Cluster {
    /// Makes a hot standby of `primary` with `pg_basebackup -R -X stream` and starts it;
    /// returns once it accepts read-only connections.
    ///
    /// From `opts` come the port, directory, `max_connections` and extra settings. The
    /// version, auth method and TLS come from the primary (pg_hba.conf and the certificate
    /// are part of the copy), so `opts.version` must match and `opts.auth`/`opts.ssl` are
    /// not used. `max_connections` must be at least the primary's, as a standby requires.
    /// Fails with [`HarnessError::Unsupported`] when the primary's binaries have no
    /// `pg_basebackup`.
    pub fn start_replica(primary: &Cluster, opts: ClusterOptions) -> Result<Cluster, HarnessError> {
        if opts.version != primary.version() {
            return Err(HarnessError::InvalidOption(format!(
                "a replica must run the primary's version ({}), not {}",
                primary.version(),
                opts.version
            )));
        }
        let basebackup = primary.bin_dir().join("pg_basebackup");
        if !basebackup.is_file() {
            // No fallback to another version's tool: pg_basebackup refuses other server majors.
            return Err(HarnessError::Unsupported(format!(
                "no pg_basebackup in {}, so PostgreSQL {} here cannot make replicas",
                primary.bin_dir().display(),
                primary.version()
            )));
        }
        let primary_max: u32 = primary.psql("postgres", "SHOW max_connections")?.parse().map_err(|_| {
            HarnessError::InvalidOption("the primary's max_connections is not a number".into())
        })?;
        if opts.max_connections < primary_max {
            return Err(HarnessError::InvalidOption(format!(
                "a standby needs max_connections >= the primary's ({primary_max}), got {}",
                opts.max_connections
            )));
        }

        let (dir, tmp) = cluster_dir(&opts)?;
        let meta = Meta { port: 0, ..primary.meta.clone() };
        // Same OS identity as the primary: pg_basebackup writes files the server must own.
        let mut replica = Cluster { dir, tmp, meta, run_as: primary.run_as.clone(), detached: true };
        replica.make_dirs()?;

        let name = replica.dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let mut cmd = replica.run_as.command(&basebackup);
        cmd.arg("-D")
            .arg(replica.data_dir())
            // -R writes standby.signal and primary_conninfo (this same connection string);
            // -X stream copies the WAL written meanwhile; -c fast skips waiting for a spread checkpoint.
            .args(["-R", "-X", "stream", "-c", "fast", "--no-sync", "-d"])
            .arg(format!(
                "host={} port={} user={SUPERUSER} application_name={name}",
                primary.socket_dir().display(),
                primary.port()
            ));
        run(&mut cmd)?;

        replica.detached = false;
        let mut settings = vec![
            ("hot_standby".to_owned(), "on".to_owned()),
            // Keeps the primary's vacuum from removing rows a standby query still reads, which
            // would otherwise cancel that query or hold replay back (max_standby_streaming_delay).
            ("hot_standby_feedback".to_owned(), "on".to_owned()),
        ];
        settings.extend(opts.settings.iter().cloned());
        replica.launch(&ClusterOptions { settings, ..opts })?;
        Ok(replica)
    }

    /// `pg_is_in_recovery()`: true on a standby, false on a primary.
    pub fn is_in_recovery(&self) -> Result<bool, HarnessError> {
        Ok(self.psql("postgres", "SELECT pg_is_in_recovery()")? == "t")
    }

    /// `pg_ctl promote`, then waits until the server leaves recovery and takes writes.
    pub fn promote(&self) -> Result<(), HarnessError> {
        let mut cmd = self.run_as.command(&self.meta.bin_dir.join("pg_ctl"));
        cmd.arg("promote").args(["-w", "-t", "60", "-D"]).arg(self.data_dir());
        run(&mut cmd)?;
        self.wait_for("the promoted server to leave recovery", DEFAULT_WAIT, || Ok(!self.is_in_recovery()?))
    }

    /// Stops the server at once (`pg_ctl stop -m immediate`: a crash, as far as the server
    /// knows), keeping its data, directory and port for [`Cluster::start_again`].
    pub fn stop_now(&self) -> Result<(), HarnessError> {
        self.pg_ctl_stop("immediate")
    }

    /// Stops the server cleanly (`pg_ctl stop -m fast`: sessions are told 57P01 and rolled
    /// back) and keeps it for [`Cluster::start_again`], as an operator's restart would.
    pub fn stop_fast(&self) -> Result<(), HarnessError> {
        self.pg_ctl_stop("fast")
    }

    /// Starts a stopped server again, on the same port and data dir (a replica resumes
    /// streaming from its primary); returns once it accepts connections.
    pub fn start_again(&self) -> Result<(), HarnessError> {
        let mut cmd = self.run_as.command(&self.meta.bin_dir.join("pg_ctl"));
        cmd.arg("start").args(["-w", "-t", "60", "-D"]).arg(self.data_dir()).arg("-l").arg(self.log_path());
        run(&mut cmd).map(drop).map_err(|e| self.start_error(e))
    }

    /// `pg_wal_replay_pause()`, waiting until the standby reports replay as paused.
    pub fn pause_replay(&self) -> Result<(), HarnessError> {
        self.psql("postgres", "SELECT pg_wal_replay_pause()")?;
        self.wait_for("WAL replay to pause", DEFAULT_WAIT, || {
            Ok(self.psql("postgres", "SELECT pg_get_wal_replay_pause_state()")? == "paused")
        })
    }

    /// `pg_wal_replay_resume()`.
    pub fn resume_replay(&self) -> Result<(), HarnessError> {
        self.psql("postgres", "SELECT pg_wal_replay_resume()").map(drop)
    }

    /// `pg_current_wal_lsn()` of a primary.
    pub fn current_wal_lsn(&self) -> Result<Lsn, HarnessError> {
        self.psql("postgres", "SELECT pg_current_wal_lsn()")?.parse()
    }

    /// `pg_last_wal_replay_lsn()` of a standby.
    pub fn replay_lsn(&self) -> Result<Lsn, HarnessError> {
        self.psql("postgres", "SELECT pg_last_wal_replay_lsn()")?.parse()
    }

    /// Waits (up to 30 s) until this standby has replayed everything `primary` committed
    /// before the call.
    pub fn wait_caught_up(&self, primary: &Cluster) -> Result<(), HarnessError> {
        self.wait_caught_up_within(primary, DEFAULT_WAIT)
    }

    pub fn wait_caught_up_within(&self, primary: &Cluster, timeout: Duration) -> Result<(), HarnessError> {
        // The harness runs with synchronous_commit off, so a commit may not be flushed (and
        // so not streamed) yet. A synchronous commit of a transaction that wrote WAL (an xid
        // alone is not enough: such a commit is still asynchronous) flushes the WAL up to
        // its own commit record, which follows every earlier commit; the flush LSN after it
        // is the target. A transactional logical message is the smallest such write.
        let out = primary.psql(
            "postgres",
            "SET synchronous_commit = on;\n\
             SELECT pg_logical_emit_message(true, 'pgvia-harness', 'catch-up');\n\
             SELECT pg_current_wal_flush_lsn();",
        )?;
        let target: Lsn = out.lines().last().unwrap_or_default().parse()?;
        let what = format!("replica on port {} to replay up to {target}", self.port());
        self.wait_for(&what, timeout, || Ok(self.replay_lsn()? >= target))
    }

    /// Polls `done` until it says yes or `timeout` passes; its errors end the wait.
    fn wait_for(
        &self,
        what: &str,
        timeout: Duration,
        mut done: impl FnMut() -> Result<bool, HarnessError>,
    ) -> Result<(), HarnessError> {
        let start = Instant::now();
        loop {
            if done()? {
                return Ok(());
            }
            if start.elapsed() >= timeout {
                return Err(HarnessError::Timeout { what: what.to_owned(), waited: start.elapsed() });
            }
            std::thread::sleep(POLL);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lsn_text() {
        let lsn: Lsn = "16/B374D848".parse().expect("parse");
        assert_eq!(lsn, Lsn(0x16_B374_D848));
        assert_eq!(lsn.to_string(), "16/B374D848");
        assert!("0/0".parse::<Lsn>().expect("zero") < lsn);
        for bad in ["", "16", "x/1", "1/100000000"] {
            assert!(bad.parse::<Lsn>().is_err(), "{bad}");
        }
    }
}
