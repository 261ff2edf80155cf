//! The pools of one (database, user) across the database's servers, and the checkout that
//! picks the server for a transaction.

use std::sync::Arc;
use std::time::Instant;

use super::{Hosts, Target};
use crate::pool::{Checkout, PatronRef, Pool, PoolError};

/// One pool per server of the database, in the order of [`Hosts::all`].
#[derive(Debug)]
pub struct PoolGroup {
    pub hosts: Arc<Hosts>,
    pub pools: Box<[Arc<Pool>]>,
}

impl PoolGroup {
    /// A database with one server: nothing to choose.
    pub fn is_single(&self) -> bool {
        self.pools.len() == 1
    }

    /// The pool a client is welcomed through and whose settings and statistics its session
    /// uses: the primary's when one is known, else the first server in rotation.
    pub fn home(&self) -> Arc<Pool> {
        let i = self.hosts.primary().or_else(|| self.hosts.pick(Target::Replica, |_| 0)).unwrap_or(0);
        self.pools[i.min(self.pools.len() - 1)].clone()
    }

    /// Checks out a server of the kind `target` asks for. A server that cannot be reached
    /// is banned and another one tried; with no primary known, waits for the health checker
    /// to find one, up to the pool's checkout timeout.
    pub async fn checkout(&self, target: Target, patron: Option<&PatronRef>) -> Result<Checkout, PoolError> {
        if self.is_single() {
            let taken = self.pools[0].checkout(patron).await;
            match &taken {
                Ok(_) => self.hosts.reached(0, Ok(())),
                Err(PoolError::Connect { source, .. }) => self.hosts.reached(0, Err(&source.to_string())),
                Err(_) => {}
            }
            return taken;
        }
        let waited = self.pools[0].settings.checkout_timeout;
        let deadline = Instant::now() + waited;
        loop {
            let picked = self.hosts.pick(target, |i| self.pools.get(i).map_or(usize::MAX, |p| p.load()));
            let Some(i) = picked.filter(|&i| i < self.pools.len()) else {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() || self.hosts.is_retired() {
                    return Err(PoolError::NoPrimary { database: self.hosts.database.clone(), waited });
                }
                self.hosts.changed(left).await;
                continue;
            };
            match self.pools[i].checkout(patron).await {
                Ok(c) => {
                    self.hosts.reached(i, Ok(()));
                    return Ok(c);
                }
                Err(PoolError::Connect { source, .. }) if Instant::now() < deadline => {
                    self.hosts.ban(i, &source.to_string());
                }
                Err(e) => return Err(e),
            }
        }
    }
}
