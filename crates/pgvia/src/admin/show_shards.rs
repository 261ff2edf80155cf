//! `SHOW SHARDS`, `SHOW SHARD_FANOUTS` and `SHOW ROUTE <sql>`: the shards of sharded
//! databases, the statements that went to all of them for want of a key, and where a
//! statement would go and why.

use std::sync::atomic::Ordering;

use super::rows::{Kind, RowSet};
use crate::app::App;
use crate::config::SHARD_MARK;

pub fn shards(app: &App) -> RowSet {
    use Kind::{Int, Text};
    let mut rs = RowSet::new(&[
        ("database", Text),
        ("shard", Int),
        ("host", Text),
        ("port", Int),
        ("role", Text),
        ("state", Text),
        ("sv_active", Int),
        ("sv_idle", Int),
        ("routed", Int),
    ]);
    let config = app.config();
    let pools = app.pools.all();
    for db in config.databases.iter().filter(|d| d.is_sharded()) {
        for i in 0..db.shards.len() {
            let Some(view) = db.shard_view(i) else { continue };
            let hosts = app.hosts_for(&view);
            let name = format!("{}{SHARD_MARK}{i}", db.name);
            let (mut active, mut idle) = (0i64, 0i64);
            for p in pools.iter().filter(|p| p.key.database == name) {
                active += p.stats.servers_active.load(Ordering::Relaxed) as i64;
                idle += p.stats.servers_idle.load(Ordering::Relaxed) as i64;
            }
            for h in hosts.all() {
                rs.push(vec![
                    db.name.as_str().into(),
                    (i as i64).into(),
                    h.entry.host.as_str().into(),
                    h.entry.port.into(),
                    h.role().as_str().into(),
                    h.state().as_str().into(),
                    active.into(),
                    idle.into(),
                    h.routed.load(Ordering::Relaxed).into(),
                ]);
            }
        }
    }
    rs
}

pub fn fanouts(app: &App) -> RowSet {
    use Kind::{Int, Text};
    let mut rs = RowSet::new(&[("database", Text), ("statement", Text), ("count", Int)]);
    for (db, shape, n) in app.fanouts.snapshot() {
        rs.push(vec![db.into(), shape.into(), n.into()]);
    }
    rs
}

/// `SHOW ROUTE [database] <sql>`: one row per line of `pgvia route`'s explanation. The
/// database may be left out when there is one sharded database.
pub fn route(app: &App, rest: &str) -> Result<RowSet, String> {
    let config = app.config();
    let sharded: Vec<_> = config.databases.iter().filter(|d| d.is_sharded()).collect();
    let rest = rest.trim();
    let (db, sql) = match sharded.iter().find(|d| {
        rest.split_once(char::is_whitespace).is_some_and(|(first, _)| first.trim_matches('"') == d.name)
    }) {
        Some(d) => (*d, rest.split_once(char::is_whitespace).map_or("", |(_, s)| s)),
        None => match sharded.as_slice() {
            [only] => (*only, rest),
            [] => return Err("no database is sharded".into()),
            _ => return Err("several databases are sharded: name one, SHOW ROUTE <database> <sql>".into()),
        },
    };
    let rules = db.sharding_rules(0).ok().flatten().ok_or("the database's sharding rules are invalid")?;
    let analysis = app.analyzer.analyze(sql, &[]);
    let hints = crate::sharding::SessionHints { explain: true, ..Default::default() };
    let text = match crate::sharding::plan(&rules, &analysis, &crate::sharding::Params::None, &hints) {
        Ok(routes) => crate::sharding::cli::render(&routes),
        Err(e) => format!("ERROR {}: {e}\n", e.sqlstate()),
    };
    let mut rs = RowSet::new(&[("route", Kind::Text)]);
    for line in text.lines() {
        rs.push(vec![line.into()]);
    }
    Ok(rs)
}
