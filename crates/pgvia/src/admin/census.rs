//! One consistent count of clients and traffic per pool, read by the admin console and the
//! metrics endpoint. Taken under the client registry's lock, so a client leaving (whose
//! counts move into its pool's totals in the same step) is counted exactly once.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use crate::app::App;
use crate::clients::{ClientInfo, ClientState};
use crate::pool::{Pool, PoolKey};
use crate::stats::Totals;

/// Clients and traffic of one pool.
#[derive(Debug, Default, Clone)]
pub struct PoolCensus {
    /// Clients holding a server.
    pub active: usize,
    /// Clients waiting for a server.
    pub waiting: usize,
    /// Clients holding no server and not asking for one.
    pub idle: usize,
    /// Longest current wait.
    pub max_wait: Duration,
    /// Traffic of clients that left plus clients still here.
    pub totals: Totals,
}

/// Everything counted at one moment.
pub struct Census {
    /// Current pools, by key, with what was counted for them.
    pub pools: Vec<(Arc<Pool>, PoolCensus)>,
    /// Logged-in clients (admin console clients included).
    pub clients: Vec<Arc<ClientInfo>>,
}

impl Census {
    pub fn take(app: &App) -> Census {
        let pools = app.pools.all();
        let mut by_key: BTreeMap<PoolKey, PoolCensus> = pools
            .iter()
            .map(|p| {
                let c = PoolCensus { totals: p.totals.load(), ..Default::default() };
                (p.key.clone(), c)
            })
            .collect();
        let clients = app.clients.locked(|map| {
            for c in map.values().filter(|c| !c.who.admin) {
                // A database with several servers counts its clients under its first server.
                let key = PoolKey {
                    database: c.who.database().to_owned(),
                    user: c.who.user().to_owned(),
                    server: None,
                };
                let key = if by_key.contains_key(&key) { key } else { PoolKey { server: Some(0), ..key } };
                let Some(entry) = by_key.get_mut(&key) else { continue };
                match c.state() {
                    ClientState::Active => entry.active += 1,
                    ClientState::Idle => entry.idle += 1,
                    ClientState::Waiting => {
                        entry.waiting += 1;
                        entry.max_wait = entry.max_wait.max(c.waiting_for().unwrap_or_default());
                    }
                }
                entry.totals.add(&c.counters.load());
            }
            map.values().cloned().collect()
        });
        let pools = pools
            .into_iter()
            .map(|p| {
                let c = by_key.remove(&p.key).unwrap_or_default();
                (p, c)
            })
            .collect();
        Census { pools, clients }
    }

    /// Traffic totals per database.
    pub fn by_database(&self) -> BTreeMap<String, Totals> {
        let mut out: BTreeMap<String, Totals> = BTreeMap::new();
        for (p, c) in &self.pools {
            out.entry(p.key.database.clone()).or_default().add(&c.totals);
        }
        out
    }
}

/// Servers of a pool by state: (active, idle, connecting).
pub fn server_counts(p: &Pool) -> (usize, usize, usize) {
    (
        p.stats.servers_active.load(Ordering::Relaxed),
        p.stats.servers_idle.load(Ordering::Relaxed),
        p.stats.servers_connecting.load(Ordering::Relaxed),
    )
}
