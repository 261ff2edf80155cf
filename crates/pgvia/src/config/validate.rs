//! Semantic checks run after a file deserialized cleanly.
//!
//! Every check runs and every problem is collected, so an operator fixes a file in one pass
//! instead of one restart per mistake. Messages never quote passwords.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::time::Duration;

/// The largest `max_message_size`: PostgreSQL allocates no message above 1 GiB, and a limit
/// well below `i32::MAX` leaves room for what pgvia adds when it rewrites a message (a longer
/// statement name in a Bind), so lengths never wrap in the protocol's signed 32-bit field.
pub const MAX_MESSAGE_SIZE: u32 = 1 << 30;

use super::database::Database;
use super::error::Problem;
use super::file::Config;
use super::model::{AuthMethod, PasswordFormat, ServerTlsMode, TlsMode, TlsNegotiation, User};
use super::resolve::{Layer, Stack};
use super::routing::ServerRole;

/// `host:port`, with the port a number and the host not empty (`[::1]:9930` for IPv6).
fn check_host_port(addr: &str) -> Result<(), String> {
    let bad = || format!("expected host:port, such as \"127.0.0.1:9930\", got {addr:?}");
    let (host, port) = addr.rsplit_once(':').ok_or_else(bad)?;
    if host.is_empty() || host.contains(char::is_whitespace) || port.parse::<u16>().is_err() {
        return Err(bad());
    }
    Ok(())
}

/// All problems with `config`, in no particular order and without line numbers.
pub(crate) fn validate(config: &Config) -> Vec<Problem> {
    let mut v = Validator { problems: Vec::new() };
    v.general(config);
    let pool = Layer::pool(&config.pool);
    let databases: Vec<Layer> =
        config.databases.iter().enumerate().map(|(i, d)| Layer::database(i, d)).collect();
    let users: Vec<Layer> = config.users.iter().enumerate().map(|(i, u)| Layer::user(i, u)).collect();
    for layer in std::iter::once(&pool).chain(&databases).chain(&users) {
        v.layer(layer);
    }
    v.databases(config);
    v.users(config);
    v.min_idle_within_pool_size(config, &pool, &databases, &users);
    v.analysis(config);
    for (key, message) in super::limits::problems(&config.limits, &config.general) {
        v.report(key, message);
    }
    for (key, message) in config.auth_query.iter().flat_map(|aq| super::auth_query::problems(aq, config)) {
        v.report(key, message);
    }
    for (key, message) in super::gateway::problems(&config.gateway, &config.general) {
        v.report(key, message);
    }
    v.problems
}

struct Validator {
    problems: Vec<Problem>,
}

impl Validator {
    fn report(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.problems.push(Problem::new(path, message));
    }

    fn general(&mut self, config: &Config) {
        let g = &config.general;
        if g.listen_addr.is_empty() || g.listen_addr.contains(char::is_whitespace) {
            self.report(
                "general.listen_addr",
                format!("expected an IP address or a hostname, got {:?}", g.listen_addr),
            );
        }
        if g.max_client_connections == 0 {
            self.report("general.max_client_connections", "must be at least 1");
        }
        if g.worker_threads == Some(0) {
            self.report("general.worker_threads", "must be at least 1 (leave it out for one per CPU)");
        }
        for (key, cap) in [
            ("max_prepared_statements_per_client", g.max_prepared_statements_per_client),
            ("max_prepared_statements_total", g.max_prepared_statements_total),
        ] {
            if cap == 0 {
                self.report(format!("general.{key}"), "must be at least 1");
            }
        }
        if g.max_message_size < 1024 || g.max_message_size > MAX_MESSAGE_SIZE {
            self.report(
                "general.max_message_size",
                format!(
                    "must be between 1024 and {MAX_MESSAGE_SIZE} (1 GiB, PostgreSQL's own limit), got {}",
                    g.max_message_size
                ),
            );
        }
        if g.server_reset_timeout.is_zero() {
            self.report("general.server_reset_timeout", "must be more than 0s");
        }
        if let Err(message) = check_log_level(&g.log_level) {
            self.report("general.log_level", message);
        }
        if g.metrics_auth_token.as_deref().is_some_and(|t| t.is_empty() || t.contains(char::is_whitespace)) {
            self.report("general.metrics_auth_token", "must be non-empty and contain no spaces");
        }
        if let Some(addr) = &g.metrics_listen {
            if let Err(message) = check_host_port(addr) {
                self.report("general.metrics_listen", message);
            }
        }
        if g.server_scram_max_iterations == 0 {
            self.report("general.server_scram_max_iterations", "must be at least 1");
        }
        match (&g.client_tls_ca_file, g.tls_mode) {
            (None, TlsMode::VerifyCa | TlsMode::VerifyFull) => self.report(
                "general.client_tls_ca_file",
                format!("required when tls_mode is \"{}\"", g.tls_mode),
            ),
            (Some(_), TlsMode::Disable) => {
                self.report("general.client_tls_ca_file", "needs TLS: tls_mode is \"disable\"")
            }
            (Some(file), _) => {
                if let Err(e) = crate::net::server_tls::roots(file) {
                    self.report("general.client_tls_ca_file", e.to_string());
                }
            }
            (None, _) => {}
        }
        if g.tls_mode != TlsMode::Disable {
            let files = [("tls_cert_file", &g.tls_cert_file), ("tls_key_file", &g.tls_key_file)];
            for (key, file) in files {
                let path = format!("general.{key}");
                match file {
                    None => self.report(path, format!("required when tls_mode is \"{}\"", g.tls_mode)),
                    Some(file) => {
                        if let Err(message) = check_readable(file) {
                            self.report(path, message);
                        }
                    }
                }
            }
        }
    }

    /// Checks on the pool keys a layer sets itself.
    fn layer(&mut self, layer: &Layer) {
        let at = |key: &str| format!("{}.{key}", layer.path);
        if layer.pool_size == Some(0) {
            self.report(at("pool_size"), "must be at least 1");
        }
        let must_be_positive =
            [("connect_timeout", layer.connect_timeout), ("checkout_timeout", layer.checkout_timeout)];
        for (key, value) in must_be_positive {
            if value.is_some_and(|d: Duration| d.is_zero()) {
                self.report(at(key), "must be more than 0s");
            }
        }
    }

    /// The analyzer checks its own options; its messages name the key.
    fn analysis(&mut self, config: &Config) {
        for problem in config.analyzer_options().problems() {
            let key = problem.key();
            let message = problem.to_string();
            // The path already names the key.
            let message = message.strip_prefix(key).map_or(message.as_str(), str::trim_start);
            self.report(format!("analysis.{key}"), message);
        }
    }

    fn databases(&mut self, config: &Config) {
        let mut seen = HashMap::new();
        for (i, db) in config.databases.iter().enumerate() {
            let at = |key: &str| format!("databases[{i}].{key}");
            self.name(&at("name"), &db.name, "database", &mut seen);
            if Config::is_admin_database(&db.name) {
                self.report(at("name"), format!("{:?} is reserved for the admin console", db.name));
            }
            self.servers(i, db, config);
            if !db.is_sharded() {
                self.sharding_rules(i, db);
            }
            if db.name == super::FALLBACK_DATABASE {
                // Each client's database is its own name on the server; several servers would
                // need health checks per database no one listed.
                if db.dbname.is_some() {
                    self.report(at("dbname"), "the fallback entry \"*\" cannot rename databases: each client's database name is used as it is");
                }
                if !db.servers.is_empty() {
                    self.report(
                        at("servers"),
                        "the fallback entry \"*\" takes host and port, not [[databases.servers]]",
                    );
                }
            }
            if let Some(dbname) = &db.dbname {
                if dbname.is_empty() || dbname.contains('\0') {
                    self.report(at("dbname"), "must be a non-empty name without NUL characters");
                }
            }
            if db.max_client_connections == Some(0) {
                self.report(at("max_client_connections"), "must be at least 1");
            }
            self.server_tls(i, db);
        }
    }

    /// The `server_tls_*` keys: what each mode needs, and files that load.
    fn server_tls(&mut self, i: usize, db: &Database) {
        let at = |key: &str| format!("databases[{i}].{key}");
        let mode = db.server_tls_mode;
        if db.server_tls_cert_file.is_some() != db.server_tls_key_file.is_some() {
            self.report(
                at("server_tls_cert_file"),
                "give server_tls_cert_file and server_tls_key_file together",
            );
            return;
        }
        if db.server_tls_negotiation == TlsNegotiation::Direct && !mode.requires_tls() {
            self.report(
                at("server_tls_negotiation"),
                format!("\"direct\" needs server_tls_mode require or stronger, not \"{mode}\""),
            );
        }
        if mode == ServerTlsMode::Disable {
            return;
        }
        // Builds the rustls configuration once, so a missing CA or unreadable key is
        // reported now rather than at the first connection.
        if let Err(e) = db.server_tls().client_config() {
            self.report(at("server_tls_mode"), e.to_string());
        }
    }

    /// `host` or `[[databases.servers]]`, and the keys that say how they are used.
    fn servers(&mut self, i: usize, db: &Database, config: &Config) {
        let at = |key: &str| format!("databases[{i}].{key}");
        if db.is_sharded() {
            self.shards(i, db);
        } else {
            self.hosts(i, db);
        }
        let positive = [
            ("health_check_interval", db.health_check_interval),
            ("health_check_timeout", db.health_check_timeout),
            ("ban_time", db.ban_time),
        ];
        for (key, value) in positive {
            if value.is_some_and(|d| d.is_zero()) {
                self.report(at(key), "must be more than 0s");
            }
        }
        if let Some(user) = &db.health_check_user {
            if config.user(user).is_none() {
                self.report(at("health_check_user"), format!("no [[users]] entry is called {user:?}"));
            }
        }
    }

    /// `host`/`port` or `[[databases.servers]]` of a database that is not sharded.
    fn hosts(&mut self, i: usize, db: &Database) {
        let at = |key: &str| format!("databases[{i}].{key}");
        let bad_host = |h: &str| h.is_empty() || h.contains(char::is_whitespace);
        match (&db.host, db.servers.is_empty()) {
            (None, true) => self.report(at("host"), "required key is missing"),
            (Some(_), false) => {
                self.report(at("host"), "give either host/port or [[databases.servers]], not both")
            }
            (Some(host), true) if bad_host(host) => {
                self.report(at("host"), format!("expected an IP address or a hostname, got {host:?}"));
            }
            _ => {}
        }
        let mut seen = HashSet::new();
        for (j, server) in db.servers.iter().enumerate() {
            let at = |key: &str| format!("databases[{i}].servers[{j}].{key}");
            if bad_host(&server.host) {
                self.report(
                    at("host"),
                    format!("expected an IP address or a hostname, got {:?}", server.host),
                );
            }
            if !seen.insert((&server.host, server.port)) {
                self.report(at("host"), format!("{}:{} is listed twice", server.host, server.port));
            }
        }
        let primaries = db.servers.iter().filter(|s| s.role == ServerRole::Primary).count();
        if primaries > 1 {
            self.report(at("servers"), "more than one server has role \"primary\"");
        }
        if !db.servers.is_empty() && db.servers.iter().all(|s| s.role == ServerRole::Replica) {
            self.report(at("servers"), "no server can take writes: give one role \"primary\" or \"auto\"");
        }
    }

    /// A sharded database: `[[databases.shards]]` instead of `host`/`servers`, each shard
    /// checked like a database's servers, and the sharded tables and schemas compiled.
    fn shards(&mut self, i: usize, db: &Database) {
        let at = |key: &str| format!("databases[{i}].{key}");
        if db.host.is_some() || !db.servers.is_empty() {
            let key = if db.host.is_some() { "host" } else { "servers" };
            self.report(at(key), "a sharded database lists its servers per shard, in [[databases.shards]]");
        }
        if db.name == super::FALLBACK_DATABASE {
            self.report(at("shards"), "the fallback entry \"*\" cannot be sharded");
        }
        let bad_host = |h: &str| h.is_empty() || h.contains(char::is_whitespace);
        let mut seen = HashSet::new();
        for (j, shard) in db.shards.iter().enumerate() {
            let at = |key: &str| format!("databases[{i}].shards[{j}].{key}");
            match (&shard.host, shard.servers.is_empty()) {
                (None, true) => {
                    self.report(at("host"), "required key is missing (or give servers)");
                    continue;
                }
                (Some(_), false) => self.report(at("host"), "give either host/port or servers, not both"),
                _ => {}
            }
            for server in shard.servers() {
                if bad_host(&server.host) {
                    self.report(
                        at("host"),
                        format!("expected an IP address or a hostname, got {:?}", server.host),
                    );
                } else if !seen.insert((server.host.clone(), server.port)) {
                    self.report(at("host"), format!("{}:{} is listed twice", server.host, server.port));
                }
            }
            let servers = &shard.servers;
            if servers.iter().filter(|s| s.role == ServerRole::Primary).count() > 1 {
                self.report(at("servers"), "more than one server has role \"primary\"");
            }
            if !servers.is_empty() && servers.iter().all(|s| s.role == ServerRole::Replica) {
                self.report(
                    at("servers"),
                    "no server can take writes: give one role \"primary\" or \"auto\"",
                );
            }
        }
        self.sharding_rules(i, db);
    }

    fn sharding_rules(&mut self, i: usize, db: &Database) {
        if let Err(problems) = db.sharding_rules(i) {
            for (path, message) in problems {
                self.report(path, message);
            }
        }
    }

    fn users(&mut self, config: &Config) {
        let mut seen = HashMap::new();
        // Reported once, not once per user inheriting it.
        let mut general_cleartext_reported = false;
        for (i, user) in config.users.iter().enumerate() {
            self.name(&format!("users[{i}].name"), &user.name, "user", &mut seen);
            if user.max_client_connections == Some(0) {
                self.report(format!("users[{i}].max_client_connections"), "must be at least 1");
            }
            let inherited = user.auth_method.is_none();
            let method = user.auth_method.unwrap_or(config.general.auth_method);
            let method_path =
                if inherited { "general.auth_method".to_owned() } else { format!("users[{i}].auth_method") };
            if method == AuthMethod::Cleartext
                && config.general.tls_mode == TlsMode::Disable
                && !config.general.allow_cleartext_without_tls
                && !(inherited && general_cleartext_reported)
            {
                general_cleartext_reported |= inherited;
                self.report(
                    method_path.clone(),
                    "cleartext passwords are refused without TLS and tls_mode is \"disable\": \
                     enable TLS or set general.allow_cleartext_without_tls = true",
                );
            }
            if method == AuthMethod::Cert && config.general.client_tls_ca_file.is_none() {
                self.report(method_path, "\"cert\" needs general.client_tls_ca_file (and TLS)");
            }
            self.password(i, user, method);
        }
    }

    fn password(&mut self, i: usize, user: &User, method: AuthMethod) {
        let at = |key: &str| format!("users[{i}].{key}");
        match &user.password {
            None if !matches!(method, AuthMethod::Trust | AuthMethod::Cert) => {
                self.report(at("password"), format!("required because auth_method is \"{method}\""));
            }
            None => {}
            Some(p) if p.is_empty() && method != AuthMethod::Trust => {
                self.report(at("password"), "is empty");
            }
            Some(p) => match PasswordFormat::of(p) {
                PasswordFormat::ScramSha256 => {
                    if let Err(why) = check_scram_verifier(p) {
                        self.report(at("password"), format!("malformed SCRAM-SHA-256 verifier: {why}"));
                    } else if method == AuthMethod::Md5 {
                        self.report(
                            at("password"),
                            "a SCRAM-SHA-256 verifier cannot check an md5 login (PostgreSQL has the \
                             same rule); give the plaintext password or use auth_method \"scram-sha-256\"",
                        );
                    }
                }
                PasswordFormat::Md5 if method == AuthMethod::ScramSha256 => {
                    self.report(
                        at("password"),
                        "an MD5 hash cannot check a scram-sha-256 login (PostgreSQL has the same \
                         rule); give the plaintext password or a SCRAM-SHA-256 verifier, or use \
                         auth_method \"md5\"",
                    );
                }
                PasswordFormat::Plaintext if PasswordFormat::is_near_md5(p) => {
                    self.report(
                        at("password"),
                        "looks like an MD5 hash, but PostgreSQL's form is \"md5\" followed by 32 \
                         lower-case hexadecimal digits, and anything else would be taken as a \
                         plaintext password; write the hash in lower case",
                    );
                }
                PasswordFormat::Md5 | PasswordFormat::Plaintext => {}
            },
        }
        if let Some(p) = &user.server_password {
            if p.is_empty() {
                self.report(at("server_password"), "is empty");
            } else if PasswordFormat::of(p) == PasswordFormat::ScramSha256 {
                self.report(
                    at("server_password"),
                    "must be the plaintext password: a SCRAM-SHA-256 verifier cannot answer the server",
                );
            }
        }
    }

    /// Names travel in startup packets as C strings, so NUL cannot be part of one.
    fn name(&mut self, path: &str, name: &str, what: &str, seen: &mut HashMap<String, String>) {
        if name.is_empty() || name.contains('\0') {
            self.report(path, "must be a non-empty name without NUL characters");
        } else if let Some(first) = seen.get(name) {
            self.report(path, format!("duplicate {what} name {name:?} (first at {first})"));
        } else {
            seen.insert(name.to_owned(), path.trim_end_matches(".name").to_owned());
        }
    }

    /// Pools exist per (database, user), so `min_idle <= pool_size` must hold for every pair
    /// after overrides. Each contradiction is reported once, at the more specific of the two
    /// keys involved, rather than once per pair it breaks.
    fn min_idle_within_pool_size(&mut self, config: &Config, pool: &Layer, dbs: &[Layer], users: &[Layer]) {
        let mut stacks: Vec<(Stack<'_>, String)> = vec![(Stack([None, None, Some(pool)]), String::new())];
        for (db, d) in dbs.iter().zip(&config.databases) {
            stacks.push((Stack([None, Some(db), Some(pool)]), String::new()));
            for (user, u) in users.iter().zip(&config.users) {
                let pair = format!(" for database {:?} and user {:?}", d.name, u.name);
                stacks.push((Stack([Some(user), Some(db), Some(pool)]), pair));
            }
        }
        for user in users {
            stacks.push((Stack([Some(user), None, Some(pool)]), String::new()));
        }
        let mut reported = HashSet::new();
        for (stack, pair) in stacks {
            let (Some((size, size_at)), Some((idle, idle_at))) =
                (stack.pick(|l| l.pool_size), stack.pick(|l| l.min_idle))
            else {
                continue;
            };
            if size == 0 || idle <= size || !reported.insert((size_at.path.clone(), idle_at.path.clone())) {
                continue;
            }
            let pair = if size_at.path.starts_with("users") || idle_at.path.starts_with("users") {
                pair
            } else {
                String::new()
            };
            if specificity(&idle_at.path) >= specificity(&size_at.path) {
                let from = if idle_at.path == size_at.path {
                    String::new()
                } else {
                    format!(" (set at {}.pool_size)", size_at.path)
                };
                self.report(
                    format!("{}.min_idle", idle_at.path),
                    format!("min_idle {idle} is larger than pool_size {size}{from}{pair}"),
                );
            } else {
                self.report(
                    format!("{}.pool_size", size_at.path),
                    format!(
                        "pool_size {size} is smaller than min_idle {idle} (set at {}.min_idle){pair}",
                        idle_at.path
                    ),
                );
            }
        }
    }
}

fn specificity(layer_path: &str) -> u8 {
    if layer_path.starts_with("users") {
        2
    } else if layer_path.starts_with("databases") {
        1
    } else {
        0
    }
}

fn check_readable(path: &Path) -> Result<(), String> {
    let shown = path.display();
    let file = std::fs::File::open(path).map_err(|e| format!("cannot read {shown}: {e}"))?;
    match file.metadata() {
        Ok(m) if m.is_file() => Ok(()),
        Ok(_) => Err(format!("{shown} is not a file")),
        Err(e) => Err(format!("cannot read {shown}: {e}")),
    }
}

const LEVELS: [&str; 6] = ["off", "error", "warn", "info", "debug", "trace"];

/// Accepts a level or `level,target=level,...`. A bare word that is not a level would be
/// taken by tracing as a target name with everything enabled, which is never what a typo
/// such as `"infp"` meant, so it is refused here.
fn check_log_level(filter: &str) -> Result<(), String> {
    let is_level = |s: &str| LEVELS.iter().any(|l| l.eq_ignore_ascii_case(s.trim()));
    let ok = !filter.trim().is_empty()
        && filter.split(',').all(|directive| match directive.rsplit_once('=') {
            Some((target, level)) => !target.trim().is_empty() && is_level(level),
            None => is_level(directive),
        })
        && tracing_subscriber::EnvFilter::try_new(filter).is_ok();
    if ok {
        Ok(())
    } else {
        Err(format!(
            "expected a level (error, warn, info, debug, trace, off) or directives such as \
             \"info,pgvia::pool=debug\", got {filter:?}"
        ))
    }
}

/// Checks `SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>`, the `rolpassword`
/// format, with base64 salt and 32-byte base64 keys.
pub(crate) fn check_scram_verifier(verifier: &str) -> Result<(), &'static str> {
    const SHAPE: &str =
        "expected SCRAM-SHA-256$<iterations>:<base64 salt>$<base64 StoredKey>:<base64 ServerKey>";
    let rest = verifier.strip_prefix("SCRAM-SHA-256$").ok_or(SHAPE)?;
    let (params, keys) = rest.split_once('$').ok_or(SHAPE)?;
    let (iterations, salt) = params.split_once(':').ok_or(SHAPE)?;
    let (stored_key, server_key) = keys.split_once(':').ok_or(SHAPE)?;
    if iterations.is_empty() || !iterations.bytes().all(|b| b.is_ascii_digit()) {
        return Err("the iteration count is not a number");
    }
    if !iterations.parse::<u32>().is_ok_and(|n| n >= 1) {
        return Err("the iteration count must be between 1 and 4294967295");
    }
    if matches!(base64_decoded_len(salt), None | Some(0)) {
        return Err("the salt is not base64");
    }
    if base64_decoded_len(stored_key) != Some(32) || base64_decoded_len(server_key) != Some(32) {
        return Err("StoredKey and ServerKey must each be 32 bytes in base64");
    }
    Ok(())
}

/// Length of the bytes a padded standard-alphabet base64 string decodes to, or `None` if it
/// is not one.
fn base64_decoded_len(text: &str) -> Option<usize> {
    let bytes = text.as_bytes();
    if bytes.is_empty() || !bytes.chunks_exact(4).remainder().is_empty() {
        return None;
    }
    let padding = bytes.iter().rev().take_while(|&&b| b == b'=').count();
    if padding > 2 {
        return None;
    }
    let body = &bytes[..bytes.len() - padding];
    if !body.iter().all(|&b| b.is_ascii_alphanumeric() || b == b'+' || b == b'/') {
        return None;
    }
    Some(bytes.len() / 4 * 3 - padding)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A real verifier, made by the same code tokio-postgres uses for `ALTER ROLE ... PASSWORD`.
    fn verifier() -> String {
        postgres_protocol::password::scram_sha_256(b"secret")
    }

    #[test]
    fn verifier_shape() {
        let verifier = verifier();
        assert_eq!(check_scram_verifier(&verifier), Ok(()));
        let (params, keys) = verifier.split_at(verifier.rfind('$').unwrap_or(0));
        assert!(check_scram_verifier("SCRAM-SHA-256$").is_err());
        assert!(check_scram_verifier("SCRAM-SHA-256$4096:c2FsdA==$abc:def").is_err());
        assert!(check_scram_verifier(&verifier.replace("$4096:", "$x:")).is_err());
        assert!(check_scram_verifier(&verifier.replace("$4096:", "$0:")).is_err());
        assert!(check_scram_verifier(&verifier.replace("$4096:", "$4096:*")).is_err());
        assert!(check_scram_verifier(&format!("{params}{}", keys.replacen(':', "", 1))).is_err());
        assert!(check_scram_verifier(&format!("{params}{}", &keys[..keys.len() - 4])).is_err());
    }

    #[test]
    fn base64_lengths() {
        assert_eq!(base64_decoded_len("c2FsdA=="), Some(4));
        assert_eq!(base64_decoded_len("YWJj"), Some(3));
        assert_eq!(base64_decoded_len("YWJ"), None);
        assert_eq!(base64_decoded_len("Y==="), None);
        assert_eq!(base64_decoded_len("YW=j"), None);
        assert_eq!(base64_decoded_len(""), None);
    }

    #[test]
    fn password_formats() {
        assert_eq!(PasswordFormat::of(&verifier()), PasswordFormat::ScramSha256);
        assert_eq!(PasswordFormat::of("md5c4b3d2f7ad7bed32c7b2e9c3e4f5a6b1"), PasswordFormat::Md5);
        assert_eq!(PasswordFormat::of("md5c4b3d2f7ad7bed32c7b2e9c3e4f5a6b"), PasswordFormat::Plaintext);
        assert_eq!(PasswordFormat::of("md5secret"), PasswordFormat::Plaintext);
        // PostgreSQL's rule: lower-case hex only; the rest is plaintext, which validation
        // refuses when it is an MD5 hash in the wrong case.
        assert_eq!(PasswordFormat::of("md5C4B3D2F7AD7BED32C7B2E9C3E4F5A6B1"), PasswordFormat::Plaintext);
        assert_eq!(PasswordFormat::of("MD5c4b3d2f7ad7bed32c7b2e9c3e4f5a6b1"), PasswordFormat::Plaintext);
        assert!(PasswordFormat::is_near_md5("md5C4B3D2F7AD7BED32C7B2E9C3E4F5A6B1"));
        assert!(PasswordFormat::is_near_md5("MD5c4b3d2f7ad7bed32c7b2e9c3e4f5a6b1"));
        assert!(!PasswordFormat::is_near_md5("md5c4b3d2f7ad7bed32c7b2e9c3e4f5a6b1"));
        assert!(!PasswordFormat::is_near_md5("md5secret"));
        assert_eq!(PasswordFormat::of("SCRAM-SHA-256"), PasswordFormat::Plaintext);
    }

    #[test]
    fn log_levels() {
        for ok in ["info", "DEBUG", "off", "info,pgvia::pool=debug", "warn,pgvia=trace"] {
            assert_eq!(check_log_level(ok), Ok(()), "{ok}");
        }
        for bad in ["", "infp", "info,pgvia", "pgvia=loud", "=info"] {
            assert!(check_log_level(bad).is_err(), "{bad}");
        }
    }
}
