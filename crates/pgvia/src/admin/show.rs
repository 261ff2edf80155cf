//! `SHOW` commands about pools, clients, servers and configuration.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime};

use super::census::{server_counts, Census};
use super::rows::{timestamp, Kind, RowSet, Value};
use crate::app::App;
use crate::clients::ClientState;
use crate::config::ADMIN_DATABASES;
use crate::pool::PinReason;

use Kind::{Int, Text};

/// The rows for `SHOW what`, or `None` when there is no such list.
pub fn show(app: &App, what: &str) -> Option<RowSet> {
    Some(match what {
        "POOLS" => pools(app),
        "STATS" | "STATS_TOTALS" | "STATS_AVERAGES" => super::show_stats::stats(app, what),
        "CLIENTS" => clients(app),
        "SERVERS" => servers(app),
        "DATABASES" => databases(app),
        "USERS" => users(app),
        "CONFIG" => super::show_config::config(app),
        "LISTS" => lists(app),
        "VERSION" => version(),
        "PREPARED" => prepared(app),
        "ANALYSIS_CACHE" => analysis_cache(app),
        "PINS" => pins(app),
        "HOSTS" => super::show_hosts::hosts(app),
        "SHARDS" => super::show_shards::shards(app),
        "SHARD_FANOUTS" => super::show_shards::fanouts(app),
        "HELP" => help(),
        _ => return None,
    })
}

fn micros(d: Duration) -> (i64, i64) {
    (d.as_secs() as i64, i64::from(d.subsec_micros()))
}

fn pools(app: &App) -> RowSet {
    let mut rs = RowSet::new(&[
        ("database", Text),
        ("user", Text),
        ("cl_active", Int),
        ("cl_waiting", Int),
        ("cl_active_cancel_req", Int),
        ("cl_waiting_cancel_req", Int),
        ("sv_active", Int),
        ("sv_active_cancel", Int),
        ("sv_being_canceled", Int),
        ("sv_idle", Int),
        ("sv_used", Int),
        ("sv_tested", Int),
        ("sv_login", Int),
        ("maxwait", Int),
        ("maxwait_us", Int),
        ("pool_mode", Text),
        // pgvia's own, after PgBouncer's: cl_active split into clients holding a server
        // (cl_linked) and clients between transactions (cl_idle).
        ("cl_linked", Int),
        ("cl_idle", Int),
        ("pool_size", Int),
        ("paused", Int),
        ("sv_closing", Int),
    ]);
    let census = Census::take(app);
    for (p, c) in &census.pools {
        let (active, idle, login) = server_counts(p);
        let (wait_s, wait_us) = micros(c.max_wait);
        rs.push(vec![
            p.key.database.as_str().into(),
            p.key.user.as_str().into(),
            (c.active + c.idle).into(),
            c.waiting.into(),
            0u64.into(),
            0u64.into(),
            active.into(),
            0u64.into(),
            0u64.into(),
            idle.into(),
            0u64.into(),
            0u64.into(),
            login.into(),
            wait_s.into(),
            wait_us.into(),
            p.settings.pool_mode.to_string().into(),
            c.active.into(),
            c.idle.into(),
            p.settings.pool_size.into(),
            p.is_paused().into(),
            p.stats.servers_stale.load(Ordering::Relaxed).into(),
        ]);
    }
    // The console's own clients, as PgBouncer lists its admin pool.
    let mut admin: std::collections::BTreeMap<(&str, &str), usize> = Default::default();
    for c in census.clients.iter().filter(|c| c.who.admin) {
        *admin.entry((c.who.database(), c.who.user())).or_default() += 1;
    }
    for ((db, user), n) in admin {
        let mut row: Vec<Value> = vec![db.into(), user.into(), n.into()];
        row.extend(std::iter::repeat_n(Value::Int(0), 12));
        row.push("statement".into());
        row.extend([n.into(), 0u64.into(), 0u64.into(), 0u64.into(), 0u64.into()]);
        rs.push(row);
    }
    rs
}

/// Columns shared by `SHOW CLIENTS` and `SHOW SERVERS`, PgBouncer's order.
const CONNECTION_COLUMNS: [(&str, Kind); 18] = [
    ("type", Text),
    ("user", Text),
    ("database", Text),
    ("state", Text),
    ("addr", Text),
    ("port", Int),
    ("local_addr", Text),
    ("local_port", Int),
    ("connect_time", Text),
    ("request_time", Text),
    ("wait", Int),
    ("wait_us", Int),
    ("close_needed", Int),
    ("ptr", Text),
    ("link", Text),
    ("remote_pid", Int),
    ("tls", Text),
    ("application_name", Text),
];

/// How `ptr`/`link` name a client: its id in hex.
fn client_ptr(id: u64) -> String {
    format!("c{id:x}")
}

/// How `ptr`/`link` name a server: its backend process id in hex.
fn server_ptr(pid: u32) -> String {
    format!("s{pid:x}")
}

fn wall_clock(at: Instant) -> SystemTime {
    SystemTime::now() - at.elapsed()
}

fn clients(app: &App) -> RowSet {
    let mut columns = CONNECTION_COLUMNS.to_vec();
    columns.extend([("id", Int), ("pgvia_state", Text)]);
    let mut rs = RowSet::new(&columns);
    for c in app.clients.all() {
        let state = c.state();
        let wait = micros(c.waiting_for().unwrap_or_default());
        let server = c.server();
        rs.push(vec![
            "C".into(),
            c.who.user().into(),
            c.who.database().into(),
            // PgBouncer's states: a client between transactions is "active" too.
            if state == ClientState::Waiting { "waiting" } else { "active" }.into(),
            c.who.peer.addr_text().into(),
            c.who.peer.port().into(),
            c.who.local.map(|a| a.ip().to_string()).into(),
            c.who.local.map(|a| a.port()).into(),
            timestamp(c.connected_at).into(),
            timestamp(c.last_request()).into(),
            wait.0.into(),
            wait.1.into(),
            0u64.into(),
            client_ptr(c.id).into(),
            server.as_ref().map(|s| server_ptr(s.process_id)).into(),
            0u64.into(),
            if c.who.tls { "TLS" } else { "" }.into(),
            c.who.application_name().into(),
            c.id.into(),
            match state {
                ClientState::Idle => "idle",
                ClientState::Waiting => "waiting",
                ClientState::Active => "active",
            }
            .into(),
        ]);
    }
    rs
}

/// One `SHOW SERVERS` row.
struct ServerLine<'a> {
    user: &'a str,
    database: &'a str,
    state: &'a str,
    peer: crate::net::ServerEndpoint,
    pid: u32,
    connect_time: Option<String>,
    request_time: Option<String>,
    link: Option<String>,
    close_needed: bool,
}

impl ServerLine<'_> {
    fn row(self) -> Vec<Value> {
        vec![
            "S".into(),
            self.user.into(),
            self.database.into(),
            self.state.into(),
            self.peer.addr_text().into(),
            self.peer.port().into(),
            Value::Null,
            Value::Null,
            self.connect_time.into(),
            self.request_time.into(),
            0u64.into(),
            0u64.into(),
            self.close_needed.into(),
            server_ptr(self.pid).into(),
            self.link.into(),
            self.pid.into(),
            "".into(),
            "".into(),
        ]
    }
}

fn servers(app: &App) -> RowSet {
    let mut rs = RowSet::new(&CONNECTION_COLUMNS);
    // Checked-out servers, found through the clients holding them.
    for c in app.clients.all() {
        let Some(s) = c.server() else { continue };
        rs.push(
            ServerLine {
                user: c.who.user(),
                database: c.who.database(),
                state: "active",
                peer: s.server.clone(),
                pid: s.process_id,
                connect_time: None,
                request_time: None,
                link: Some(client_ptr(c.id)),
                close_needed: false,
            }
            .row(),
        );
    }
    for p in app.pools.all() {
        for s in p.idle_servers() {
            rs.push(
                ServerLine {
                    user: &p.key.user,
                    database: &p.key.database,
                    state: "idle",
                    peer: s.peer,
                    pid: s.process_id,
                    connect_time: Some(timestamp(wall_clock(s.created))),
                    request_time: Some(timestamp(wall_clock(s.last_used))),
                    link: None,
                    close_needed: false,
                }
                .row(),
            );
        }
    }
    rs
}

fn databases(app: &App) -> RowSet {
    let mut rs = RowSet::new(&[
        ("name", Text),
        ("host", Text),
        ("port", Int),
        ("database", Text),
        ("force_user", Text),
        ("pool_size", Int),
        ("min_pool_size", Int),
        ("reserve_pool", Int),
        ("pool_mode", Text),
        ("max_connections", Int),
        ("current_connections", Int),
        ("paused", Int),
        ("disabled", Int),
    ]);
    let config = app.config();
    let pools = app.pools.all();
    for db in &config.databases {
        let servers: usize =
            pools.iter().filter(|p| p.key.database == db.name).map(|p| p.server_count()).sum();
        let (host, port) = db.first_server();
        rs.push(vec![
            db.name.as_str().into(),
            host.into(),
            port.into(),
            db.server_dbname().into(),
            Value::Null,
            db.pool_size.unwrap_or(config.pool.pool_size).into(),
            db.min_idle.unwrap_or(config.pool.min_idle).into(),
            0u64.into(),
            db.pool_mode.unwrap_or(config.pool.pool_mode).to_string().into(),
            db.max_client_connections.unwrap_or(0).into(),
            servers.into(),
            app.is_paused(&db.name).into(),
            0u64.into(),
        ]);
    }
    for name in ADMIN_DATABASES {
        rs.push(vec![
            name.into(),
            Value::Null,
            config.general.listen_port.into(),
            name.into(),
            Value::Null,
            0u64.into(),
            0u64.into(),
            0u64.into(),
            "statement".into(),
            0u64.into(),
            0u64.into(),
            0u64.into(),
            0u64.into(),
        ]);
    }
    rs
}

fn users(app: &App) -> RowSet {
    let mut rs = RowSet::new(&[("name", Text), ("pool_mode", Text), ("admin", Int)]);
    for u in &app.config().users {
        rs.push(vec![u.name.as_str().into(), u.pool_mode.map(|m| m.to_string()).into(), u.admin.into()]);
    }
    rs
}

fn lists(app: &App) -> RowSet {
    let mut rs = RowSet::new(&[("list", Text), ("items", Int)]);
    let config = app.config();
    let pools = app.pools.all();
    let clients = app.clients.len();
    let (mut used, mut free) = (0usize, 0usize);
    for p in &pools {
        let (active, idle, _) = server_counts(p);
        used += active;
        free += idle;
    }
    let items: [(&str, usize); 12] = [
        ("databases", config.databases.len() + ADMIN_DATABASES.len()),
        ("users", config.users.len()),
        ("pools", pools.len()),
        ("free_clients", 0),
        ("used_clients", clients),
        ("login_clients", app.active_sessions().saturating_sub(clients)),
        ("free_servers", free),
        ("used_servers", used),
        ("dns_names", 0),
        ("dns_zones", 0),
        ("dns_queries", 0),
        ("dns_pending", 0),
    ];
    for (name, n) in items {
        rs.push(vec![name.into(), n.into()]);
    }
    rs
}

fn version() -> RowSet {
    let mut rs = RowSet::new(&[("version", Text)]);
    rs.push(vec![format!("pgvia {}", env!("CARGO_PKG_VERSION")).into()]);
    rs
}

/// Prepared statements in the shared registry (transaction-mode pools): the name pgvia
/// gives them on servers, the text (literals removed, cut to 200 bytes), parameter types
/// given at Parse, and how many client names and server connections refer to each.
fn prepared(app: &App) -> RowSet {
    let mut rs = RowSet::new(&[
        ("name", Text),
        ("query", Text),
        ("parameters", Int),
        ("client_refs", Int),
        ("server_refs", Int),
    ]);
    let mut statements = app.statements.statements();
    statements.sort_by_key(|s| s.id);
    for s in statements {
        rs.push(vec![
            s.server_name().into(),
            crate::logging::scrub_sql(&String::from_utf8_lossy(&s.query), 200).into(),
            s.param_types.len().into(),
            s.client_refs().into(),
            s.server_refs().into(),
        ]);
    }
    rs
}

fn analysis_cache(app: &App) -> RowSet {
    let s = app.analyzer.stats();
    let mut rs = RowSet::new(&[
        ("analyzed", Int),
        ("cache_hits", Int),
        ("cache_misses", Int),
        ("cache_inserts", Int),
        ("cache_not_admitted", Int),
        ("cache_entries", Int),
        ("cache_bytes", Int),
        ("too_long", Int),
        ("too_complex", Int),
        ("parse_errors", Int),
        ("failures", Int),
        ("shape_hits", Int),
        ("hit_ratio", Text),
    ]);
    let lookups = s.cache_hits + s.cache_misses;
    let ratio = if lookups == 0 { 0.0 } else { s.cache_hits as f64 / lookups as f64 };
    rs.push(vec![
        s.analyzed.into(),
        s.cache_hits.into(),
        s.cache_misses.into(),
        s.cache_inserts.into(),
        s.cache_not_admitted.into(),
        s.cache_entries.into(),
        s.cache_bytes.into(),
        s.too_long.into(),
        s.too_complex.into(),
        s.parse_errors.into(),
        s.failures.into(),
        s.shape_hits.into(),
        format!("{ratio:.4}").into(),
    ]);
    rs
}

fn pins(app: &App) -> RowSet {
    let mut rs = RowSet::new(&[("database", Text), ("user", Text), ("reason", Text), ("pins", Int)]);
    for p in app.pools.all() {
        for reason in PinReason::ALL {
            let n = p.stats.pins[reason.index()].load(Ordering::Relaxed);
            rs.push(vec![
                p.key.database.as_str().into(),
                p.key.user.as_str().into(),
                reason.as_str().into(),
                n.into(),
            ]);
        }
    }
    rs
}

fn help() -> RowSet {
    let mut rs = RowSet::new(&[("command", Text), ("description", Text)]);
    let lines = [
        ("SHOW POOLS|STATS|STATS_TOTALS|STATS_AVERAGES", "pools and traffic, PgBouncer's columns"),
        ("SHOW CLIENTS|SERVERS|DATABASES|USERS|CONFIG|LISTS|VERSION", "connections and settings"),
        ("SHOW PREPARED|ANALYSIS_CACHE|PINS|HOSTS|SHARDS|SHARD_FANOUTS", "pgvia's own"),
        ("SHOW ROUTE [database] <sql>", "which shards a statement goes to, and why"),
        ("PAUSE [db]", "let transactions finish, then hold new ones"),
        ("RESUME [db]", "undo PAUSE or KILL"),
        ("RECONNECT [db]", "replace server connections as they come back"),
        ("RELOAD", "re-read the configuration file"),
        ("KILL db", "close every client and server of a database, and pause it"),
        ("KILL_CLIENT id", "close one client (id from SHOW CLIENTS)"),
        ("WAIT_CLOSE [db]", "wait until servers from RECONNECT or RELOAD are closed"),
        ("SHUTDOWN", "stop pgvia as SIGTERM does"),
    ];
    for (c, d) in lines {
        rs.push(vec![c.into(), d.into()]);
    }
    rs
}
