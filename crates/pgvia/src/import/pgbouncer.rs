//! PgBouncer's settings, one by one, as pgvia's: what carries over, what pgvia does without,
//! and what it cannot do (each of those becomes a [`Note`] the user sees).
//!
//! Where PgBouncer's default differs from pgvia's (pool mode, client limit, timeouts), the
//! output states PgBouncer's value, so an imported setup behaves as it did before the move.

use super::ini::{self, Entry};
use super::toml_out::{Document, Table, Value};
use super::Note;

/// How one `[pgbouncer]` key is carried over.
enum Rule {
    /// Into `[general]`, converted as the [`Conv`] says.
    General(&'static str, Conv),
    /// Into `[pool]`.
    Pool(&'static str, Conv),
    /// Read by the importer itself (authentication, admin users, listen address...).
    Special,
    /// pgvia has no counterpart; the reason is shown.
    Unsupported(&'static str),
    /// pgvia needs no counterpart; the reason is shown only for a value that is not the default.
    NotNeeded(&'static str),
}

/// How a PgBouncer value becomes a pgvia value.
#[derive(Clone, Copy)]
enum Conv {
    Int,
    /// Seconds (PgBouncer accepts fractions) to a pgvia duration; `zero` says what 0 means.
    Seconds {
        zero: Zero,
    },
    Str,
}

/// What PgBouncer means by 0 for a time setting, against what pgvia means.
#[derive(Clone, Copy, PartialEq)]
enum Zero {
    /// 0 turns the limit off in both.
    Off,
    /// pgvia has no "off" (or 0 means something else): 0 is not carried over, with this reason.
    NoEquivalent(&'static str),
}

fn rule(key: &str) -> Rule {
    use Conv::*;
    use Rule::*;
    let seconds = Seconds { zero: Zero::Off };
    match key {
        "listen_addr"
        | "auth_type"
        | "auth_file"
        | "admin_users"
        | "pool_mode"
        | "client_tls_sslmode"
        | "log_connections"
        | "log_disconnections"
        | "max_packet_size"
        | "unix_socket_dir"
        | "%include"
        | "server_tls_sslmode"
        | "server_tls_ca_file"
        | "server_tls_cert_file"
        | "server_tls_key_file" => Special,
        "listen_port" => General("listen_port", Int),
        "max_client_conn" => General("max_client_connections", Int),
        "server_reset_query" => General("server_reset_query", Str),
        "client_tls_cert_file" => General("tls_cert_file", Str),
        "client_tls_key_file" => General("tls_key_file", Str),
        "client_tls_ca_file" => General("client_tls_ca_file", Str),
        "default_pool_size" => Pool("pool_size", Int),
        "min_pool_size" => Pool("min_idle", Int),
        "max_prepared_statements" => Pool("max_prepared_statements", Int),
        "server_idle_timeout" => Pool("idle_timeout", seconds),
        "server_lifetime" => Pool(
            "max_lifetime",
            Seconds {
                zero: Zero::NoEquivalent(
                    "PgBouncer closes a server after one use at 0; pgvia's 0 means never",
                ),
            },
        ),
        "server_connect_timeout" => Pool(
            "connect_timeout",
            Seconds { zero: Zero::NoEquivalent("pgvia needs a connect time limit above 0") },
        ),
        "query_wait_timeout" => Pool(
            "checkout_timeout",
            Seconds {
                zero: Zero::NoEquivalent("pgvia needs a checkout time limit above 0 (use a large one)"),
            },
        ),
        "query_timeout" => Pool("query_timeout", seconds),
        "autodb_idle_timeout" => General(
            "fallback_idle_timeout",
            Seconds {
                zero: Zero::NoEquivalent(
                    "pgvia keeps a database's pools at least until its last client leaves",
                ),
            },
        ),
        "client_idle_timeout" => Pool("client_idle_timeout", seconds),
        "idle_transaction_timeout" => Pool("idle_in_transaction_timeout", seconds),
        "auth_query" | "auth_user" | "auth_dbname" => {
            Unsupported("pgvia does not fetch passwords from PostgreSQL yet: list the users in userlist.txt")
        }
        "auth_hba_file" | "auth_ident_file" => {
            Unsupported("pgvia has no HBA rules: one auth_method per user")
        }
        "stats_users" => Unsupported(
            "pgvia has no read-only console role: list such users in admin_users to give them the console",
        ),
        "reserve_pool_size" | "reserve_pool_timeout" => {
            Unsupported("pgvia has no reserve pool: raise pool_size instead")
        }
        "max_db_connections" | "max_user_connections" => {
            Unsupported("pgvia limits servers per (database, user) pool only (pool_size)")
        }
        "server_tls_protocols" | "server_tls_ciphers" => {
            Unsupported("pgvia's TLS towards PostgreSQL uses rustls's defaults (TLS 1.2 and 1.3)")
        }
        "client_tls_protocols" | "client_tls_ciphers" | "client_tls_ecdhcurve" | "client_tls_dheparams" => {
            Unsupported("pgvia's client TLS uses rustls's defaults (TLS 1.2 and 1.3)")
        }
        "server_check_query" | "server_check_delay" => NotNeeded(
            "pgvia checks an idle server when it is handed out and health-checks hosts with routing",
        ),
        "server_reset_query_always" => {
            NotNeeded("pgvia resets a server whenever a client leaves it dirty, in every pool mode")
        }
        "ignore_startup_parameters" | "track_extra_parameters" => {
            NotNeeded("pgvia applies every startup parameter the client sends on each server it gets")
        }
        "client_login_timeout" => {
            NotNeeded("pgvia's login time limit is limits.startup_timeout (60 s unless set, as PostgreSQL's)")
        }
        "pkt_buf" | "sbuf_loopcnt" | "tcp_defer_accept" | "tcp_socket_buffer" | "tcp_keepalive"
        | "tcp_keepcnt" | "tcp_keepidle" | "tcp_keepintvl" | "tcp_user_timeout" | "so_reuseport" => {
            NotNeeded("pgvia sizes its buffers and sets its socket options itself")
        }
        "logfile" | "pidfile" | "syslog" | "syslog_ident" | "syslog_facility" | "log_stats"
        | "stats_period" | "verbose" | "log_pooler_errors" => {
            NotNeeded("pgvia logs to standard output (log_level, log_format); run it under a service manager")
        }
        "user" => NotNeeded("run pgvia as the user you want it to run as"),
        "dns_max_ttl" | "dns_nxdomain_ttl" | "dns_zone_check_period" | "resolv_conf" => {
            NotNeeded("pgvia resolves host names when it connects")
        }
        "application_name_add_host" => Unsupported("pgvia does not rewrite application_name"),
        "server_round_robin"
        | "server_fast_close"
        | "server_login_retry"
        | "suspend_timeout"
        | "disable_pqexec"
        | "cancel_wait_timeout"
        | "query_wait_notify"
        | "peer_id"
        | "service_name"
        | "job_name"
        | "conffile" => Unsupported("no pgvia counterpart"),
        _ => Unsupported("not a PgBouncer setting pgvia knows"),
    }
}

/// Builds the document from the INI's entries and the users of `auth_file`.
pub fn convert(entries: &[Entry], users: Option<&[(String, String)]>, notes: &mut Vec<Note>) -> Document {
    let mut doc = Document::default();
    // PgBouncer's defaults where they differ from pgvia's.
    doc.general.set("listen_addr", Value::Str("127.0.0.1".into()));
    doc.general.set("listen_port", Value::Int(6432));
    doc.general.set("max_client_connections", Value::Int(100));
    doc.pool.set("pool_mode", Value::Str("session".into()));
    doc.pool.set("connect_timeout", Value::Str("15s".into()));
    doc.pool.set("checkout_timeout", Value::Str("120s".into()));

    let setting = |key: &str| entries.iter().rev().find(|e| e.section == "pgbouncer" && e.key == key);
    let auth_type = setting("auth_type").map_or("md5", |e| e.value.as_str());
    let admins: Vec<&str> = setting("admin_users")
        .map(|e| e.value.split(',').map(str::trim).filter(|s| !s.is_empty()).collect())
        .unwrap_or_default();

    for entry in entries {
        match entry.section.as_str() {
            "pgbouncer" => general_setting(entry, &mut doc, notes),
            "databases" => database(entry, &mut doc, notes),
            "users" => {}
            "peers" => notes.push(Note::of(
                entry,
                "pgvia has no peers: cancels reach the instance that holds the client",
            )),
            _ => notes.push(Note::of(entry, "not a PgBouncer section")),
        }
    }
    if setting("listen_addr").is_none() {
        notes.push(Note::new(
            "[pgbouncer] listen_addr",
            "not set, so PgBouncer listened on its Unix socket only; pgvia listens on TCP 127.0.0.1",
        ));
    }
    server_tls(&setting, &mut doc, notes);
    users_from(users, auth_type, &admins, entries, &mut doc, notes);
    doc
}

/// PgBouncer's `server_tls_*` apply to every server; pgvia sets them per database.
fn server_tls<'e>(setting: &impl Fn(&str) -> Option<&'e Entry>, doc: &mut Document, notes: &mut Vec<Note>) {
    let mode = match setting("server_tls_sslmode").map(|e| (e, e.value.as_str())) {
        None | Some((_, "disable")) => return,
        Some((_, m @ ("prefer" | "require" | "verify-ca" | "verify-full"))) => m,
        Some((e, "allow")) => {
            notes.push(Note::of(
                e,
                "pgvia has no \"allow\" (plain first, TLS if refused): \"prefer\" is used",
            ));
            "prefer"
        }
        Some((e, _)) => return notes.push(Note::of(e, "not a TLS mode")),
    };
    let files = [
        ("server_tls_ca_file", "server_tls_ca_file"),
        ("server_tls_cert_file", "server_tls_cert_file"),
        ("server_tls_key_file", "server_tls_key_file"),
    ];
    for db in &mut doc.databases {
        db.set("server_tls_mode", Value::Str(mode.into()));
        for (from, to) in files {
            if let Some(e) = setting(from).filter(|e| !e.value.is_empty()) {
                db.set(to, Value::Str(e.value.clone()));
            }
        }
    }
}

fn general_setting(entry: &Entry, doc: &mut Document, notes: &mut Vec<Note>) {
    let value = entry.value.as_str();
    match rule(&entry.key) {
        Rule::General(key, conv) => put(&mut doc.general, key, conv, entry, notes),
        Rule::Pool(key, conv) => put(&mut doc.pool, key, conv, entry, notes),
        Rule::Unsupported(why) => notes.push(Note::of(entry, why)),
        Rule::NotNeeded(why) => notes.push(Note::of(entry, why)),
        Rule::Special => match entry.key.as_str() {
            "listen_addr" => {
                let mut addrs = value.split(',').map(str::trim).filter(|a| !a.is_empty());
                let first = addrs.next().unwrap_or("127.0.0.1");
                let first = if first == "*" { "0.0.0.0" } else { first };
                doc.general.set("listen_addr", Value::Str(first.into()));
                if addrs.next().is_some() {
                    notes.push(Note::of(entry, "pgvia listens on one address: the first one was kept"));
                }
            }
            "pool_mode" => match value {
                "session" | "transaction" | "statement" => {
                    doc.pool.set("pool_mode", Value::Str(value.into()))
                }
                _ => notes.push(Note::of(entry, "not a pool mode")),
            },
            "client_tls_sslmode" => {
                let (mode, why) = match value {
                    "disable" => ("disable", None),
                    "allow" | "prefer" => ("allow", None),
                    "require" => ("require", None),
                    // PgBouncer's verify-full checks the certificate, not whose it is: pgvia's
                    // verify-ca. (pgvia's verify-full also wants the user name as the CN.)
                    "verify-ca" | "verify-full" => ("verify-ca", None),
                    _ => return notes.push(Note::of(entry, "not a TLS mode")),
                };
                doc.general.set("tls_mode", Value::Str(mode.into()));
                if let Some(why) = why {
                    notes.push(Note::of(entry, why));
                }
            }

            "log_connections" | "log_disconnections" => {
                // pgvia has one switch for both lines; either one on turns it on.
                let on = value == "1" || value.eq_ignore_ascii_case("true");
                let was = matches!(doc.general.get("log_connections"), Some(Value::Bool(true)));
                doc.general.set("log_connections", Value::Bool(on || was));
            }
            "max_packet_size" => match value.parse::<i64>() {
                Ok(n) if (1024..=1 << 30).contains(&n) => doc.general.set("max_message_size", Value::Int(n)),
                Ok(_) => notes.push(Note::of(
                    entry,
                    "outside 1 KiB - 1 GiB (PostgreSQL's own message limit): pgvia's default (64 MiB) kept",
                )),
                Err(_) => notes.push(Note::of(entry, "not an integer")),
            },
            "unix_socket_dir" if !value.is_empty() => {
                doc.general.set("unix_socket_dir", Value::Str(value.into()))
            }
            "%include" => {
                notes.push(Note::of(entry, "included files are not read: import them and merge by hand"))
            }
            // auth_type, auth_file and admin_users are read with the users; server_tls_* go
            // to every database once all are read.
            "server_tls_sslmode" | "server_tls_ca_file" | "server_tls_cert_file" | "server_tls_key_file" => {}
            _ => {}
        },
    }
}

/// Sets `key` from a PgBouncer value, or explains why it was not.
fn put(table: &mut Table, key: &'static str, conv: Conv, entry: &Entry, notes: &mut Vec<Note>) {
    let value = entry.value.as_str();
    let converted = match conv {
        Conv::Int => value.parse::<i64>().map(Value::Int).map_err(|_| "not an integer"),
        Conv::Str => Ok(Value::Str(value.into())),
        Conv::Seconds { zero } => match seconds_to_duration(value) {
            None => Err("not a number of seconds"),
            Some(d) if d == "0s" => match zero {
                Zero::Off => Ok(Value::Str(d)),
                Zero::NoEquivalent(why) => Err(why),
            },
            Some(d) => Ok(Value::Str(d)),
        },
    };
    match converted {
        Ok(v) => table.set(key, v),
        Err(why) => notes.push(Note::of(entry, why)),
    }
}

/// `"1.5"` → `"1500ms"`, `"30"` → `"30s"`; PgBouncer's time settings are seconds.
fn seconds_to_duration(text: &str) -> Option<String> {
    let seconds: f64 = text.trim().parse().ok()?;
    if !seconds.is_finite() || seconds < 0.0 {
        return None;
    }
    let ms = (seconds * 1000.0).round();
    if ms > u32::MAX as f64 {
        return None;
    }
    let ms = ms as u64;
    Some(if ms.is_multiple_of(1000) { format!("{}s", ms / 1000) } else { format!("{ms}ms") })
}

fn database(entry: &Entry, doc: &mut Document, notes: &mut Vec<Note>) {
    if entry.key == "%include" {
        return notes.push(Note::of(entry, "included files are not read: import them and merge by hand"));
    }
    let pairs = match ini::conn_pairs(&entry.value) {
        Ok(p) => p,
        Err(e) => return notes.push(Note::of(entry, &format!("not read: {e}"))),
    };
    let mut table = Table::default();
    table.set("name", Value::Str(entry.key.clone()));
    let mut host = None;
    for (key, value) in &pairs {
        let mut skip = |why: &str| notes.push(Note::new(&format!("[databases] {} {key}", entry.key), why));
        match key.as_str() {
            "host" => host = Some(value.clone()),
            "port" => match value.parse::<i64>() {
                Ok(p) => table.set("port", Value::Int(p)),
                Err(_) => skip("not a port"),
            },
            "dbname" if entry.key == "*" => skip("the fallback entry uses each client's database name as it is"),
            "dbname" => table.set("dbname", Value::Str(value.clone())),
            "pool_size" => int_into(&mut table, "pool_size", value, &mut skip),
            "min_pool_size" => int_into(&mut table, "min_idle", value, &mut skip),
            "max_db_client_connections" => int_into(&mut table, "max_client_connections", value, &mut skip),
            "pool_mode" => match value.as_str() {
                "session" | "transaction" | "statement" => table.set("pool_mode", Value::Str(value.clone())),
                _ => skip("not a pool mode"),
            },
            "user" | "password" | "auth_user" => {
                skip("pgvia logs in to PostgreSQL as the client's own user; a forced user or password is not supported")
            }
            "reserve_pool" | "reserve_pool_size" => skip("pgvia has no reserve pool"),
            "max_db_connections" => skip("pgvia limits servers per (database, user) pool only (pool_size)"),
            "connect_query" => skip("pgvia runs no query on a new server connection"),
            "client_encoding" | "datestyle" | "timezone" | "application_name" => {
                skip("per-database defaults are not supported: set them on the database (ALTER DATABASE ... SET) or in the client")
            }
            _ => skip("not a database option pgvia knows"),
        }
    }
    let host = match host {
        Some(h) if h.is_empty() => {
            notes.push(Note::of(entry, "an empty host: pgvia connects to 127.0.0.1 over TCP"));
            "127.0.0.1".to_owned()
        }
        Some(h) if h.contains(',') => {
            notes.push(Note::of(
                entry,
                "several hosts: pgvia's [[databases.servers]] treat them as primary and replicas, not as equals; the first host was kept",
            ));
            h.split(',').next().unwrap_or_default().trim().to_owned()
        }
        Some(h) => h,
        None => {
            notes.push(Note::of(
                entry,
                "no host, so PgBouncer used the Unix socket: pgvia connects to 127.0.0.1 over TCP",
            ));
            "127.0.0.1".to_owned()
        }
    };
    // `name` first, then where it is, then the rest as written.
    let mut ordered = Table::default();
    ordered.set("name", Value::Str(entry.key.clone()));
    ordered.set("host", Value::Str(host));
    for key in ["port", "dbname", "pool_mode", "pool_size", "min_idle", "max_client_connections"] {
        if let Some(v) = table.get(key) {
            ordered.set(key, v.clone());
        }
    }
    doc.databases.push(ordered);
}

fn int_into(table: &mut Table, key: &'static str, value: &str, skip: &mut impl FnMut(&str)) {
    match value.parse::<i64>() {
        Ok(n) => table.set(key, Value::Int(n)),
        Err(_) => skip("not an integer"),
    }
}

/// What a stored password is, by PostgreSQL's own rules.
#[derive(Clone, Copy, PartialEq)]
enum Stored {
    Plain,
    Md5,
    Scram,
}

fn stored(password: &str) -> Stored {
    let md5 = password.len() == 35
        && password.starts_with("md5")
        && password[3..].bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    if password.starts_with("SCRAM-SHA-256$") {
        Stored::Scram
    } else if md5 {
        Stored::Md5
    } else {
        Stored::Plain
    }
}

fn users_from(
    users: Option<&[(String, String)]>,
    auth_type: &str,
    admins: &[&str],
    entries: &[Entry],
    doc: &mut Document,
    notes: &mut Vec<Note>,
) {
    let method = match auth_type {
        "trust" => Some("trust"),
        "plain" => Some("cleartext"),
        // Needs client_tls_ca_file, which pgvia's validation asks for if it is missing.
        "cert" => Some("cert"),
        "md5" => Some("md5"),
        "scram-sha-256" => Some("scram-sha-256"),
        other => {
            notes.push(Note::new(
                "[pgbouncer] auth_type",
                &format!("{other:?} is not supported (pgvia has trust, cleartext, md5, scram-sha-256, cert): scram-sha-256 is used"),
            ));
            Some("scram-sha-256")
        }
    };
    if let Some(m) = method {
        doc.general.set("auth_method", Value::Str(m.into()));
    }
    if auth_type == "plain" {
        doc.general.set("allow_cleartext_without_tls", Value::Bool(true));
    }
    let Some(users) = users else {
        notes
            .push(Note::new("[pgbouncer] auth_file", "no user list was read: add [[users]] entries by hand"));
        return;
    };
    let overrides = |name: &str| entries.iter().rev().find(|e| e.section == "users" && e.key == name);
    for (name, password) in users {
        let mut table = Table::default();
        table.set("name", Value::Str(name.clone()));
        let kind = stored(password);
        if !password.is_empty() {
            table.set("password", Value::Str(password.clone()));
        }
        // PgBouncer's md5 mode asks a user stored as a SCRAM verifier for SCRAM; pgvia's
        // configuration says so per user.
        if auth_type == "md5" && kind == Stored::Scram {
            table.set("auth_method", Value::Str("scram-sha-256".into()));
        }
        if kind != Stored::Plain {
            notes.push(Note::new(
                &format!("user {name}"),
                "stored as a hash: pgvia checks clients with it and passes it through to PostgreSQL (an MD5 hash answers MD5; a SCRAM verifier answers SCRAM once a client has logged in, if PostgreSQL stores the same verifier); otherwise set server_password (plaintext)",
            ));
        }
        if admins.contains(&name.as_str()) {
            table.set("admin", Value::Bool(true));
        }
        if let Some(entry) = overrides(name) {
            user_overrides(entry, &mut table, notes);
            keep_min_idle_within(&mut table, doc, notes);
        }
        doc.users.push(table);
    }
    for admin in admins {
        if !users.iter().any(|(n, _)| n == admin) {
            notes.push(Note::new(
                "[pgbouncer] admin_users",
                &format!(
                    "{admin} is not in the user list: pgvia needs a [[users]] entry with a password for it"
                ),
            ));
        }
    }
    for entry in entries.iter().filter(|e| e.section == "users") {
        if !users.iter().any(|(n, _)| *n == entry.key) {
            notes.push(Note::of(entry, "this user is not in the user list: add a [[users]] entry for it"));
        }
    }
}

/// A user's smaller `pool_size` caps PgBouncer's `min_pool_size` silently; pgvia refuses a
/// `min_idle` above a pool's size, so this user's pools keep no idle servers.
fn keep_min_idle_within(user: &mut Table, doc: &Document, notes: &mut Vec<Note>) {
    let Some(Value::Int(size)) = user.get("pool_size") else { return };
    let min_idle = |t: &Table| match t.get("min_idle") {
        Some(Value::Int(n)) => *n,
        _ => 0,
    };
    let highest = doc.databases.iter().map(min_idle).chain([min_idle(&doc.pool)]).max().unwrap_or(0);
    if highest > *size {
        let name = match user.get("name") {
            Some(Value::Str(n)) => n.clone(),
            _ => String::new(),
        };
        user.set("min_idle", Value::Int(0));
        notes.push(Note::new(
            &format!("[users] {name} pool_size"),
            "smaller than a min_pool_size: this user's pools keep no idle servers (min_idle = 0)",
        ));
    }
}

fn user_overrides(entry: &Entry, table: &mut Table, notes: &mut Vec<Note>) {
    let pairs = match ini::conn_pairs(&entry.value) {
        Ok(p) => p,
        Err(e) => return notes.push(Note::of(entry, &format!("not read: {e}"))),
    };
    for (key, value) in &pairs {
        let mut skip = |why: &str| notes.push(Note::new(&format!("[users] {} {key}", entry.key), why));
        match key.as_str() {
            "pool_mode" => match value.as_str() {
                "session" | "transaction" | "statement" => table.set("pool_mode", Value::Str(value.clone())),
                _ => skip("not a pool mode"),
            },
            "pool_size" => int_into(table, "pool_size", value, &mut skip),
            "max_user_client_connections" => int_into(table, "max_client_connections", value, &mut skip),
            "max_user_connections" => skip("pgvia limits servers per (database, user) pool only (pool_size)"),
            _ => skip("not a user option pgvia knows"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_become_durations() {
        assert_eq!(seconds_to_duration("30").as_deref(), Some("30s"));
        assert_eq!(seconds_to_duration("1.5").as_deref(), Some("1500ms"));
        assert_eq!(seconds_to_duration("0").as_deref(), Some("0s"));
        assert_eq!(seconds_to_duration("-1"), None);
        assert_eq!(seconds_to_duration("ten"), None);
    }

    #[test]
    fn stored_passwords_by_postgres_rules() {
        assert!(stored("md5abcdef0123456789abcdef0123456789") == Stored::Md5);
        assert!(stored("MD5ABCDEF0123456789ABCDEF0123456789") == Stored::Plain);
        assert!(stored("SCRAM-SHA-256$4096:c2FsdA==$a:b") == Stored::Scram);
        assert!(stored("secret") == Stored::Plain);
    }
}
