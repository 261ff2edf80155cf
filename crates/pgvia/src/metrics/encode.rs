//! `/metrics`: one scrape, read from the pools, the clients and the analyzer.

use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, NoLabelSet};
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use super::family::{family, Labels};
use crate::admin::census::{server_counts, Census, PoolCensus};
use crate::app::App;
use crate::pool::PinReason;
use crate::pool::Pool;
use crate::stats::ERROR_CLASSES;

/// The whole exposition, OpenMetrics text.
pub fn encode(app: &Arc<App>) -> Result<String, fmt::Error> {
    let mut registry = Registry::with_prefix("pgvia");
    registry.register_collector(Box::new(Scrape(app.clone())));
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, &registry)?;
    Ok(out)
}

struct Scrape(Arc<App>);

impl fmt::Debug for Scrape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Scrape")
    }
}

fn pool_labels(p: &Pool) -> Labels<'_> {
    let mut labels = vec![("database", p.key.database.as_str()), ("user", p.key.user.as_str())];
    // A database with several servers has one pool per server.
    if let Some(server) = p.server_label() {
        labels.push(("host", server));
    }
    labels
}

impl Collector for Scrape {
    fn encode(&self, mut enc: DescriptorEncoder<'_>) -> fmt::Result {
        let app = &self.0;
        let census = Census::take(app);
        let pools: &[(Arc<Pool>, PoolCensus)] = &census.pools;
        let gauge = MetricType::Gauge;
        let counter = MetricType::Counter;

        let clients = pools.iter().flat_map(|(p, c)| {
            [("active", c.active), ("waiting", c.waiting), ("idle", c.idle)].map(|(state, n)| {
                let mut l = pool_labels(p);
                l.push(("state", state));
                (l, n as u64)
            })
        });
        family(&mut enc, "clients", "Clients by pool and state (active: holding a server).", gauge, clients)?;

        let servers: Vec<(Vec<(&str, String)>, i64)> = pools
            .iter()
            .flat_map(|(p, _)| {
                let (active, idle, login) = server_counts(p);
                let closing = p.stats.servers_stale.load(Ordering::Relaxed);
                let server = format!("{}:{}", p.server_address().host, p.server_address().port);
                [("active", active), ("idle", idle), ("connecting", login), ("closing", closing)].map(
                    |(s, n)| {
                        let labels = vec![
                            ("database", p.key.database.clone()),
                            ("user", p.key.user.clone()),
                            ("server", server.clone()),
                            ("state", s.to_owned()),
                        ];
                        (labels, n as i64)
                    },
                )
            })
            .collect();
        let mut metric = enc.encode_descriptor(
            "servers",
            "Server connections by pool, server and state (closing: replaced by RECONNECT or a reload).",
            None,
            gauge,
        )?;
        for (labels, n) in &servers {
            ConstGauge::new(*n).encode(metric.encode_family(labels)?)?;
        }

        let each =
            |f: fn(&Pool, &PoolCensus) -> u64| pools.iter().map(move |(p, c)| (pool_labels(p), f(p, c)));
        family(
            &mut enc,
            "clients_waiting",
            "Clients waiting for a server.",
            gauge,
            each(|_, c| c.waiting as u64),
        )?;
        family(
            &mut enc,
            "pool_size",
            "Most servers per pool.",
            gauge,
            each(|p, _| u64::from(p.settings.pool_size)),
        )?;
        family(
            &mut enc,
            "pool_paused",
            "1 while the pool is paused.",
            gauge,
            each(|p, _| u64::from(p.is_paused())),
        )?;
        family(&mut enc, "transactions", "Transactions ended.", counter, each(|_, c| c.totals.xacts))?;
        family(
            &mut enc,
            "queries",
            "Queries answered (ReadyForQuery).",
            counter,
            each(|_, c| c.totals.queries),
        )?;
        family(
            &mut enc,
            "received_bytes",
            "Bytes received from clients.",
            counter,
            each(|_, c| c.totals.received),
        )?;
        family(&mut enc, "sent_bytes", "Bytes sent to clients.", counter, each(|_, c| c.totals.sent))?;
        family(
            &mut enc,
            "transaction_microseconds",
            "Time in transactions.",
            counter,
            each(|_, c| c.totals.xact_us),
        )?;
        family(&mut enc, "query_microseconds", "Time in queries.", counter, each(|_, c| c.totals.query_us))?;
        let stat = |f: fn(&Pool) -> u64| pools.iter().map(move |(p, _)| (pool_labels(p), f(p)));
        family(
            &mut enc,
            "checkouts",
            "Servers handed to clients.",
            counter,
            stat(|p| p.stats.checkouts.load(Ordering::Relaxed)),
        )?;
        family(
            &mut enc,
            "checkout_timeouts",
            "Clients that gave up waiting (53300).",
            counter,
            stat(|p| p.stats.checkout_timeouts.load(Ordering::Relaxed)),
        )?;
        family(
            &mut enc,
            "server_connections_opened",
            "Server connections opened.",
            counter,
            stat(|p| p.stats.servers_created.load(Ordering::Relaxed)),
        )?;
        family(
            &mut enc,
            "server_connections_closed",
            "Server connections closed.",
            counter,
            stat(|p| p.stats.servers_closed.load(Ordering::Relaxed)),
        )?;
        family(
            &mut enc,
            "server_resets_failed",
            "Server resets that failed (server closed).",
            counter,
            stat(|p| p.stats.resets_failed.load(Ordering::Relaxed)),
        )?;
        family(
            &mut enc,
            "server_connections_moved",
            "Idle server connections moved from one client thread to another (thread_layout per_core).",
            counter,
            stat(|p| p.stats.servers_moved.load(Ordering::Relaxed)),
        )?;

        let errors = pools.iter().flat_map(|(p, c)| {
            ERROR_CLASSES.iter().zip(c.totals.errors).map(move |(class, n)| {
                let mut l = pool_labels(p);
                l.push(("class", class));
                (l, n)
            })
        });
        family(
            &mut enc,
            "server_errors",
            "ErrorResponses from servers, by SQLSTATE class.",
            counter,
            errors,
        )?;
        let pins = pools.iter().flat_map(|(p, _)| {
            PinReason::ALL.iter().map(move |r| {
                let mut l = pool_labels(p);
                l.push(("reason", r.as_str()));
                (l, p.stats.pins[r.index()].load(Ordering::Relaxed))
            })
        });
        family(
            &mut enc,
            "pins",
            "Clients pinned to their server in transaction mode, by reason.",
            counter,
            pins,
        )?;

        let mut waits = enc.encode_descriptor(
            "wait_seconds",
            "Time clients waited for a server.",
            None,
            MetricType::Histogram,
        )?;
        for (p, _) in pools {
            let (sum, count, buckets) = p.wait_histogram.snapshot();
            waits
                .encode_family(&pool_labels(p))?
                .encode_histogram::<NoLabelSet>(sum, count, &buckets, None)?;
        }

        let a = app.analyzer.stats();
        let none = || Vec::<(&'static str, &'static str)>::new();
        family(
            &mut enc,
            "analysis_cache_hits",
            "SQL analysis cache hits.",
            counter,
            [(none(), a.cache_hits)],
        )?;
        family(
            &mut enc,
            "analysis_cache_misses",
            "SQL analysis cache misses.",
            counter,
            [(none(), a.cache_misses)],
        )?;
        family(&mut enc, "analysis_parses", "Queries parsed and analysed.", counter, [(none(), a.analyzed)])?;
        family(
            &mut enc,
            "analysis_shape_hits",
            "Simple queries served by the analysis of their shape (constants as parameters).",
            counter,
            [(none(), a.shape_hits)],
        )?;
        family(
            &mut enc,
            "analysis_cache_entries",
            "Entries in the SQL analysis cache.",
            gauge,
            [(none(), a.cache_entries)],
        )?;
        let ps = app.statements.snapshot();
        family(
            &mut enc,
            "prepared_statements",
            "Statements in the shared prepared-statement registry.",
            gauge,
            [(none(), ps.statements as u64)],
        )?;
        family(
            &mut enc,
            "prepared_client_hits",
            "Parses answered from the client's own statement map.",
            counter,
            [(none(), ps.client_hits)],
        )?;
        family(
            &mut enc,
            "prepared_registry_hits",
            "Parses found in the shared registry.",
            counter,
            [(none(), ps.registry_hits)],
        )?;
        family(
            &mut enc,
            "prepared_registered",
            "Parses that registered a new statement (misses).",
            counter,
            [(none(), ps.registered)],
        )?;
        family(
            &mut enc,
            "prepared_injected_parses",
            "Parses pgvia sent ahead of a Bind because the server lacked the statement.",
            counter,
            [(none(), ps.injected_parses)],
        )?;
        family(
            &mut enc,
            "prepared_parses_skipped",
            "Client Parses answered without the server.",
            counter,
            [(none(), ps.parses_skipped)],
        )?;
        family(
            &mut enc,
            "prepared_evictions",
            "Statements closed on servers to bound their caches.",
            counter,
            [(none(), ps.evictions)],
        )?;
        family(
            &mut enc,
            "client_connections",
            "Client connections (logging in or logged in).",
            gauge,
            [(none(), app.active_sessions() as u64)],
        )?;
        let admission = &app.admission;
        family(
            &mut enc,
            "pending_logins",
            "Connections accepted and not yet logged in.",
            gauge,
            [(none(), admission.pending() as u64)],
        )?;
        let refused = admission.refused_total();
        family(
            &mut enc,
            "connections_refused",
            "Connections refused at accept by [limits], by reason.",
            counter,
            crate::net::limits::Refusal::REASONS.iter().zip(refused).map(|(r, n)| (vec![("reason", *r)], n)),
        )?;
        family(
            &mut enc,
            "buffered_message_bytes",
            "Bytes of large client messages being received (limits.max_buffered_message_bytes).",
            gauge,
            [(none(), admission.buffered())],
        )?;
        family(
            &mut enc,
            "cancels_dropped",
            "Cancel requests dropped by limits.cancel_requests_per_second.",
            counter,
            [(none(), admission.cancels_dropped())],
        )?;
        super::hosts::encode(app, &mut enc)
    }
}
