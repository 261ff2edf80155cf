//! `SHOW STATS`, `SHOW STATS_TOTALS`, `SHOW STATS_AVERAGES`: traffic per database, with
//! PgBouncer's columns and units (bytes, microseconds; averages per second over the last
//! sampling period, times per transaction or query).

use std::collections::BTreeMap;

use super::census::Census;
use super::rows::{Kind, RowSet, Value};
use crate::app::App;
use crate::stats::Totals;

const TOTAL_NAMES: [&str; 7] =
    ["xact_count", "query_count", "bytes_received", "bytes_sent", "xact_time", "query_time", "wait_time"];
const STATS_TOTAL_NAMES: [&str; 7] = [
    "total_xact_count",
    "total_query_count",
    "total_received",
    "total_sent",
    "total_xact_time",
    "total_query_time",
    "total_wait_time",
];
const STATS_AVG_NAMES: [&str; 7] = [
    "avg_xact_count",
    "avg_query_count",
    "avg_recv",
    "avg_sent",
    "avg_xact_time",
    "avg_query_time",
    "avg_wait_time",
];

/// Totals of every configured database (zeros before any traffic), keyed by name.
pub fn totals_by_database(app: &App) -> BTreeMap<String, Totals> {
    let mut out = Census::take(app).by_database();
    for db in &app.config().databases {
        out.entry(db.name.clone()).or_default();
    }
    out
}

fn total_values(t: &Totals) -> [Value; 7] {
    [
        t.xacts.into(),
        t.queries.into(),
        t.received.into(),
        t.sent.into(),
        t.xact_us.into(),
        t.query_us.into(),
        t.wait_us.into(),
    ]
}

fn average_values(d: &Totals, secs: f64) -> [Value; 7] {
    let per_sec =
        |v: u64| if secs > 0.0 { Value::Int((v as f64 / secs).round() as i64) } else { Value::Int(0) };
    let per = |v: u64, n: u64| Value::Int(v.checked_div(n).unwrap_or(0) as i64);
    [
        per_sec(d.xacts),
        per_sec(d.queries),
        per_sec(d.received),
        per_sec(d.sent),
        per(d.xact_us, d.xacts),
        per(d.query_us, d.queries),
        per(d.wait_us, d.waits),
    ]
}

pub fn stats(app: &App, what: &str) -> RowSet {
    let names: Vec<&'static str> = match what {
        "STATS" => STATS_TOTAL_NAMES.iter().chain(&STATS_AVG_NAMES).copied().collect(),
        _ => TOTAL_NAMES.to_vec(),
    };
    let mut columns = vec![("database", Kind::Text)];
    columns.extend(names.iter().map(|n| (*n, Kind::Int)));
    let mut rs = RowSet::new(&columns);
    let totals = totals_by_database(app);
    let (deltas, secs) = app.stats_history.last_period();
    for (db, t) in &totals {
        let d = deltas.get(db).copied().unwrap_or_default();
        let mut row: Vec<Value> = vec![db.as_str().into()];
        match what {
            "STATS" => {
                row.extend(total_values(t));
                row.extend(average_values(&d, secs));
            }
            "STATS_TOTALS" => row.extend(total_values(t)),
            _ => row.extend(average_values(&d, secs)),
        }
        rs.push(row);
    }
    rs
}
