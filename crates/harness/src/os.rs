//! Who runs PostgreSQL, and how to run commands as them.
//!
//! The server refuses to start as root, and CI runs as root, so in that case
//! every server-side command (initdb, pg_ctl) goes through `runuser` to the
//! `postgres` OS account, and directories it must write are chowned to it.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use crate::error::{HarnessError, IoContext};

/// libpq variables from the caller's environment that would silently redirect or alter a
/// client tool's connection (the harness's own, and the tests' psql/pgbench runs).
pub const LIBPQ_ENV: &[&str] = &[
    "PGHOST",
    "PGHOSTADDR",
    "PGPORT",
    "PGUSER",
    "PGDATABASE",
    "PGPASSWORD",
    "PGPASSFILE",
    "PGSERVICE",
    "PGSERVICEFILE",
    "PGOPTIONS",
    "PGSSLMODE",
    "PGSSLROOTCERT",
    "PGCHANNELBINDING",
    "PGAPPNAME",
    "PGDATA",
    "PGTZ",
    "PGCLIENTENCODING",
];

/// The identity server-side commands run as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RunAs {
    /// Not root: the server can run as whoever we are.
    Current,
    /// Root: drop to this account.
    User { name: String, uid: u32, gid: u32 },
}

impl RunAs {
    pub(crate) fn detect() -> Result<RunAs, HarnessError> {
        if effective_uid()? != 0 {
            return Ok(RunAs::Current);
        }
        let (uid, gid) = lookup_user("postgres")?.ok_or(HarnessError::NoPostgresUser)?;
        Ok(RunAs::User { name: "postgres".to_owned(), uid, gid })
    }

    /// A command that runs `program` under this identity, with a libpq-neutral environment.
    pub(crate) fn command(&self, program: &Path) -> Command {
        let mut cmd = match self {
            RunAs::Current => Command::new(program),
            RunAs::User { name, .. } => {
                let mut c = Command::new("runuser");
                c.args(["-u", name, "--"]).arg(program);
                c
            }
        };
        scrub_env(&mut cmd);
        cmd
    }

    /// Hands `path` to the server's account so it can write there.
    pub(crate) fn give(&self, path: &Path) -> Result<(), HarnessError> {
        if let RunAs::User { uid, gid, .. } = self {
            std::os::unix::fs::chown(path, Some(*uid), Some(*gid))
                .ctx(|| format!("chown {} to postgres", path.display()))?;
        }
        Ok(())
    }
}

pub(crate) fn scrub_env(cmd: &mut Command) {
    for var in LIBPQ_ENV {
        cmd.env_remove(var);
    }
}

/// The owner of `/proc/self` is the process's effective uid; reading it avoids `libc::geteuid`.
pub(crate) fn effective_uid() -> Result<u32, HarnessError> {
    Ok(fs::metadata("/proc/self").ctx(|| "stat /proc/self".to_owned())?.uid())
}

/// (uid, gid) of a local account from /etc/passwd.
fn lookup_user(name: &str) -> Result<Option<(u32, u32)>, HarnessError> {
    let passwd = fs::read_to_string("/etc/passwd").ctx(|| "read /etc/passwd".to_owned())?;
    Ok(passwd.lines().find_map(|line| {
        let mut fields = line.split(':');
        if fields.next()? != name {
            return None;
        }
        let _password = fields.next()?;
        let uid = fields.next()?.parse().ok()?;
        let gid = fields.next()?.parse().ok()?;
        Some((uid, gid))
    }))
}

/// Runs to completion, turning a non-zero exit into an error that carries stderr.
pub(crate) fn run(cmd: &mut Command) -> Result<Output, HarnessError> {
    run_with_stdin(cmd, None)
}

pub(crate) fn run_with_stdin(cmd: &mut Command, stdin: Option<&str>) -> Result<Output, HarnessError> {
    let described = describe(cmd);
    cmd.stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().ctx(|| format!("spawn `{described}`"))?;
    if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
        use std::io::Write;
        // Dropping the pipe right after writing is what signals EOF to the child.
        pipe.write_all(input.as_bytes()).ctx(|| format!("write stdin of `{described}`"))?;
    }
    let output = child.wait_with_output().ctx(|| format!("wait for `{described}`"))?;
    if !output.status.success() {
        return Err(HarnessError::Command {
            command: described,
            status: output.status.to_string(),
            stderr: String::from_utf8_lossy(&output.stderr).trim_end().to_owned(),
        });
    }
    Ok(output)
}

pub(crate) fn describe(cmd: &Command) -> String {
    std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(|s| s.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn postgres_account_exists_when_root() {
        if effective_uid().expect("euid") == 0 {
            assert!(matches!(RunAs::detect().expect("detect"), RunAs::User { .. }));
        }
    }
}
