//! Per-server metrics of databases with several servers: state, lag, traffic routed.

use std::fmt;
use std::sync::atomic::Ordering;

use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType;

use super::family::family;
use crate::app::App;
use crate::routing::HostState;

pub(super) fn encode(app: &App, enc: &mut DescriptorEncoder<'_>) -> fmt::Result {
    let all = app.all_hosts();
    let rows: Vec<_> = all
        .iter()
        .flat_map(|hs| hs.all().iter().map(move |h| (hs.database.as_str(), h.label(), h)))
        .collect();
    // Label values are borrowed from `rows`, which outlives the encoder calls.
    let up = rows.iter().map(|(db, server, h)| {
        let healthy = matches!(h.state(), HostState::Healthy | HostState::Unknown);
        (
            vec![("database", *db), ("server", server.as_str()), ("role", h.role().as_str())],
            u64::from(healthy),
        )
    });
    family(
        enc,
        "host_up",
        "1 when the server is in rotation (healthy), 0 when banned or lagging.",
        MetricType::Gauge,
        up,
    )?;
    let lag = rows
        .iter()
        .map(|(db, server, h)| (vec![("database", *db), ("server", server.as_str())], h.lag_bytes()));
    family(
        enc,
        "host_lag_bytes",
        "WAL bytes a replica's replay is behind the primary.",
        MetricType::Gauge,
        lag,
    )?;
    let lag_ms =
        rows.iter().map(|(db, server, h)| (vec![("database", *db), ("server", server.as_str())], h.lag_ms()));
    family(
        enc,
        "host_lag_ms",
        "Age of a lagging replica's last replayed transaction, ms.",
        MetricType::Gauge,
        lag_ms,
    )?;
    let routed = rows.iter().map(|(db, server, h)| {
        (vec![("database", *db), ("server", server.as_str())], h.routed.load(Ordering::Relaxed))
    });
    family(
        enc,
        "host_routed",
        "Transactions (session mode: sessions) routed to the server.",
        MetricType::Counter,
        routed,
    )
}
