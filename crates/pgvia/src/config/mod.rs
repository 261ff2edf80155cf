//! Configuration: `pgvia.toml` parsed into plain data and validated as a whole.
//!
//! Loading is parse → deserialize (first type error stops it, as serde must) → validate
//! (every semantic problem collected). The result is plain data with no globals, so callers
//! can build snapshots from it and tests can load as many configurations as they like.
//! The file format is documented for operators in `docs/configuration.md`.

pub(crate) mod auth_query;
mod database;
mod error;
mod file;
pub(crate) mod gateway;
pub(crate) mod limits;
mod model;
mod resolve;
mod routing;
mod sharding;
mod spans;
mod validate;
mod values;

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

pub use auth_query::AuthQuery;
pub use database::Database;
pub use error::{ConfigError, Problem};
pub use file::Config;
pub use gateway::{Gateway, GatewayToken};
pub use limits::Limits;
pub use model::{
    AnalysisSettings, AuthMethod, CacheAdmission, General, LogFormat, PasswordFormat, PoolDefaults, PoolMode,
    PoolSettings, ServerTlsMode, ThreadLayout, TlsMode, TlsNegotiation, User,
};
pub use routing::{LoadBalance, ReadWriteSplit, RolePreference, RoutingSettings, ServerEntry, ServerRole};
pub use sharding::{
    FunctionKind, KeyLiteral, ListEntry, RangeEntry, ShardEntry, ShardedSchema, ShardedTable, ShardingRules,
    TableRule, UnshardedTables, SHARD_MARK,
};
pub use values::{parse_duration, Password};

/// Databases that reach the admin console instead of a server.
pub const ADMIN_DATABASES: [&str; 2] = ["pgvia", "pgbouncer"];

/// The name of the fallback `[[databases]]` entry, which serves every database not listed.
pub const FALLBACK_DATABASE: &str = "*";

impl Config {
    /// Reads and validates the file at `path`.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| ConfigError::Io { path: path.to_owned(), source })?;
        Config::parse(&text, path)
    }

    /// Parses and validates `text`. `origin` is the file it came from: it names the file in
    /// messages, and relative TLS paths are resolved against its folder.
    pub fn parse(text: &str, origin: &Path) -> Result<Config, ConfigError> {
        let invalid = |problems| ConfigError::Invalid { file: origin.to_owned(), problems };
        let mut config: Config = serde_path_to_error::deserialize(toml::Deserializer::new(text))
            .map_err(|e| invalid(vec![deserialize_problem(text, e)]))?;
        config.resolve_paths(origin);
        config.origin = origin.to_owned();

        let mut problems = validate::validate(&config);
        if problems.is_empty() {
            return Ok(config);
        }
        let spans = spans::Spans::new(text);
        for p in &mut problems {
            p.line = spans.line_of(&p.path);
        }
        // File order reads best; stable, so problems on one line keep the order they were found.
        problems.sort_by_key(|p| p.line.unwrap_or(usize::MAX));
        Err(invalid(problems))
    }

    /// Options for the SQL analyzer (`route::Analyzer::new`), from `[analysis]`. Validation
    /// has already checked them.
    pub fn analyzer_options(&self) -> route::AnalyzerOptions {
        self.analysis.analyzer_options()
    }

    /// The `[[databases]]` entry clients call `name`.
    pub fn database(&self, name: &str) -> Option<&Database> {
        self.databases.iter().find(|d| d.name == name)
    }

    /// The database a client asking for `name` gets: its own `[[databases]]` entry, or else
    /// the fallback entry (`name = "*"`) with `name` as both the database's name and its real
    /// name on the server. A client cannot ask for the fallback entry itself.
    pub fn database_for_client(&self, name: &str) -> Option<std::borrow::Cow<'_, Database>> {
        if name == FALLBACK_DATABASE {
            return None;
        }
        if let Some(db) = self.database(name) {
            return Some(std::borrow::Cow::Borrowed(db));
        }
        let mut db = self.database(FALLBACK_DATABASE)?.clone();
        db.name = name.to_owned();
        db.dbname = Some(name.to_owned());
        Some(std::borrow::Cow::Owned(db))
    }

    /// Whether `name` is served only through the fallback entry (no entry of its own).
    pub fn is_fallback_database(&self, name: &str) -> bool {
        name != FALLBACK_DATABASE
            && self.database(name).is_none()
            && self.database(FALLBACK_DATABASE).is_some()
    }

    /// Whether `name` is one of the admin console's virtual databases.
    pub fn is_admin_database(name: &str) -> bool {
        ADMIN_DATABASES.contains(&name)
    }

    /// The `[[users]]` entry called `name`.
    pub fn user(&self, name: &str) -> Option<&User> {
        self.users.iter().find(|u| u.name == name)
    }

    /// The authentication method for `user`: its own, else `general.auth_method`.
    pub fn auth_method(&self, user: &User) -> AuthMethod {
        user.auth_method.unwrap_or(self.general.auth_method)
    }

    /// Settings of the (`db`, `user`) pool: each key from the user if set there, else from
    /// the database, else from `[pool]`.
    pub fn pool_settings(&self, db: &Database, user: &User) -> PoolSettings {
        resolve::pool_settings(&self.pool, db, user)
    }

    fn resolve_paths(&mut self, origin: &Path) {
        let base = origin.parent().unwrap_or(Path::new(""));
        let general = [
            &mut self.general.tls_cert_file,
            &mut self.general.tls_key_file,
            &mut self.general.client_tls_ca_file,
        ];
        let per_db = self.databases.iter_mut().flat_map(|d| {
            [&mut d.server_tls_ca_file, &mut d.server_tls_cert_file, &mut d.server_tls_key_file]
        });
        for file in general.into_iter().chain(per_db).flatten() {
            if file.is_relative() {
                *file = base.join(&*file);
            }
        }
    }
}

/// Turns the one error serde stops at into a problem with a path and, when toml knows the
/// span, a line.
fn deserialize_problem(text: &str, err: serde_path_to_error::Error<toml::de::Error>) -> Problem {
    let mut path = err.path().to_string();
    if path == "." {
        path.clear();
    }
    let inner = err.into_inner();
    let line = inner.span().map(|span| spans::line_at(text, span.start));
    // toml's syntax messages span several lines; a problem is one line.
    let mut message = inner.message().trim().lines().collect::<Vec<_>>().join("; ");
    // serde reports a missing key at its table; point at the key itself.
    if let Some(key) = message.strip_prefix("missing field `").and_then(|m| m.strip_suffix('`')) {
        path = if path.is_empty() { key.to_owned() } else { format!("{path}.{key}") };
        message = "required key is missing".to_owned();
    }
    Problem { path, line, message }
}

/// `pgvia check --config FILE`: prints `configuration OK` to stdout and returns success, or
/// prints every problem to stderr, one per line, and returns exit code 1.
pub fn check_command(path: &Path) -> ExitCode {
    let code = check(path, &mut std::io::stdout().lock(), &mut std::io::stderr().lock());
    ExitCode::from(code)
}

fn check(path: &Path, out: &mut dyn Write, err: &mut dyn Write) -> u8 {
    // A closed stdout or stderr must not turn a verdict into a panic; the exit code still says it.
    match Config::load(path) {
        Ok(_) => {
            let _ = writeln!(out, "configuration OK");
            0
        }
        Err(e) => {
            let _ = writeln!(err, "{e}");
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_shows_passwords() {
        let toml = "[general]\nauth_method = \"md5\"\n[[users]]\nname = \"u\"\npassword = \"hunter2\"\nserver_password = \"s3cret\"\n";
        let config = Config::parse(toml, std::path::Path::new("/tmp/x.toml")).expect("valid");
        let shown = format!("{config:?}");
        assert!(!shown.contains("hunter2") && !shown.contains("s3cret"), "{shown}");
        assert!(shown.contains("<redacted>"), "{shown}");
        let user = config.user("u").expect("user");
        assert_eq!(user.password.as_deref(), Some("hunter2"));
    }

    #[test]
    fn check_reports_ok_and_problems() {
        let dir = tempfile::tempdir().expect("tempdir");
        let good = dir.path().join("good.toml");
        std::fs::write(&good, "[general]\nauth_method = \"trust\"\n").expect("write");
        let (mut out, mut err) = (Vec::new(), Vec::new());
        assert_eq!(check(&good, &mut out, &mut err), 0);
        assert_eq!(String::from_utf8_lossy(&out), "configuration OK\n");
        assert!(err.is_empty());

        let bad = dir.path().join("bad.toml");
        std::fs::write(&bad, "[pool]\npool_size = 0\nmin_idle = 1\n").expect("write");
        let (mut out, mut err) = (Vec::new(), Vec::new());
        assert_eq!(check(&bad, &mut out, &mut err), 1);
        assert!(out.is_empty());
        assert_eq!(
            String::from_utf8_lossy(&err),
            format!("{}:2: pool.pool_size: must be at least 1\n", bad.display())
        );

        // PostgreSQL's limit on a message is 1 GiB; lengths above it would wrap pgvia's
        // signed 32-bit length fields when it rewrites a message.
        let huge = dir.path().join("huge.toml");
        std::fs::write(&huge, "[general]\nauth_method = \"trust\"\nmax_message_size = 2147483647\n")
            .expect("write");
        let (mut out, mut err) = (Vec::new(), Vec::new());
        assert_eq!(check(&huge, &mut out, &mut err), 1);
        let err = String::from_utf8_lossy(&err).into_owned();
        assert!(err.contains("general.max_message_size: must be between 1024 and 1073741824"), "{err}");

        // An MD5 hash in upper case would be a plaintext password to PostgreSQL: refused.
        let upper = dir.path().join("upper.toml");
        let user = "[[users]]\nname = \"u\"\npassword = \"md5C4B3D2F7AD7BED32C7B2E9C3E4F5A6B1\"\n";
        std::fs::write(&upper, format!("[general]\nauth_method = \"md5\"\n{user}")).expect("write");
        let (mut out, mut err) = (Vec::new(), Vec::new());
        assert_eq!(check(&upper, &mut out, &mut err), 1);
        let err = String::from_utf8_lossy(&err).into_owned();
        assert!(err.contains("users[0].password: looks like an MD5 hash"), "{err}");

        let missing = dir.path().join("missing.toml");
        let (mut out, mut err) = (Vec::new(), Vec::new());
        assert_eq!(check(&missing, &mut out, &mut err), 1);
        assert!(String::from_utf8_lossy(&err).starts_with(&format!("{}: cannot read", missing.display())));
    }
}
