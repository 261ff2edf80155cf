//! Small load tools for pgvia's benchmark suite (`scripts/bench`).
//!
//! - `idle-clients`: opens many client connections to a pooler, completes the login of each (trust
//!   authentication), and reports how much the pooler's resident memory grew per client.
//! - `delay-relay`: a TCP relay on loopback that delays every chunk by a fixed time without
//!   serialising pipelined bytes, and logs each client-to-server "burst" (bytes sent after a reply)
//!   so round trips can be counted.
//!
//! Both talk to 127.0.0.1 only and stop by themselves after a bounded time.

use std::io;
use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

/// Everything that can go wrong in the tools.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: io::Error,
    },
    #[error("cannot read VmRSS from {path}: {why}")]
    Rss { path: PathBuf, why: String },
    #[error("login failed: {0}")]
    Login(String),
    #[error("timed out: {0}")]
    Timeout(String),
    #[error("bad argument: {0}")]
    Args(String),
    #[error("task failed: {0}")]
    Task(String),
}

/// Attaches a description of what was being done to an I/O error.
pub trait IoContext<T> {
    fn ctx(self, context: impl FnOnce() -> String) -> Result<T, ToolError>;
}

impl<T> IoContext<T> for Result<T, io::Error> {
    fn ctx(self, context: impl FnOnce() -> String) -> Result<T, ToolError> {
        self.map_err(|source| ToolError::Io { context: context(), source })
    }
}

/// Resident set size of a process in KiB, from `/proc/<pid>/status`.
pub fn rss_kib(pid: u32) -> Result<u64, ToolError> {
    let path = PathBuf::from(format!("/proc/{pid}/status"));
    let text = std::fs::read_to_string(&path)
        .map_err(|e| ToolError::Rss { path: path.clone(), why: e.to_string() })?;
    parse_vm_rss(&text).ok_or_else(|| ToolError::Rss { path, why: "no VmRSS line".into() })
}

/// The `VmRSS:    1234 kB` value of a `/proc/<pid>/status` text.
pub fn parse_vm_rss(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Microseconds since the Unix epoch, the clock pgbench's `--log` uses.
pub fn epoch_micros() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_micros()).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vm_rss_is_found() {
        let status = "Name:\tpgvia\nVmPeak:\t  9000 kB\nVmRSS:\t    1234 kB\nThreads:\t3\n";
        assert_eq!(parse_vm_rss(status), Some(1234));
        assert_eq!(parse_vm_rss("Name:\tx\n"), None);
    }

    #[test]
    fn own_rss_is_readable() {
        let rss = rss_kib(std::process::id()).expect("own status");
        assert!(rss > 0);
    }
}
