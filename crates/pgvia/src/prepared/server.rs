//! The statements one server connection holds under pgvia's names, in a bounded LRU, and
//! which statement its unnamed slot holds.

use std::sync::Arc;

use lru::LruCache;

use super::registry::{Registry, Statement};

pub struct ServerStatements {
    registry: Option<Arc<Registry>>,
    /// By statement id: the statement, and its plan epoch when the server parsed it.
    held: LruCache<u64, (Arc<Statement>, u64)>,
    capacity: usize,
    /// The statement the server's unnamed slot holds, by id, if pgvia knows it.
    pub unnamed: Option<u64>,
}

impl Default for ServerStatements {
    /// Tracks nothing: for servers of pools that pass statements through unchanged.
    fn default() -> Self {
        Self::new(None, 1)
    }
}

impl ServerStatements {
    pub fn new(registry: Option<Arc<Registry>>, capacity: usize) -> Self {
        let capacity = capacity.max(1);
        Self { registry, held: LruCache::unbounded(), capacity, unnamed: None }
    }

    /// Whether the server holds `stmt`; marks it recently used.
    pub fn holds(&mut self, stmt: &Statement) -> bool {
        self.held.get(&stmt.id).is_some_and(|(_, epoch)| *epoch == stmt.epoch())
    }

    /// Records that the server now holds `stmt` (a Parse under its name was sent). Returns a
    /// statement to close on the server when the cache is over its capacity.
    pub fn insert(&mut self, stmt: &Arc<Statement>) -> Option<Arc<Statement>> {
        if self.held.put(stmt.id, (stmt.clone(), stmt.epoch())).is_none() {
            if let Some(r) = &self.registry {
                r.add_server_ref(stmt);
            }
        }
        if self.held.len() > self.capacity {
            // The entry just inserted is the most recent, so never the one evicted.
            let (_, (evicted, _)) = self.held.pop_lru()?;
            if let Some(r) = &self.registry {
                r.release_server(&evicted);
                r.stats.evictions.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            return Some(evicted);
        }
        None
    }

    /// The statement with this id, if the server holds it, and the epoch of its plan here.
    pub fn get_with_epoch(&self, id: u64) -> Option<(&Arc<Statement>, u64)> {
        self.held.peek(&id).map(|(s, epoch)| (s, *epoch))
    }

    /// Takes out `stmt` if the server holds it with a plan older than the statement's epoch
    /// (another server reported it stale): the caller closes it there before parsing again.
    pub fn take_stale(&mut self, stmt: &Statement) -> Option<Arc<Statement>> {
        if self.held.peek(&stmt.id).is_none_or(|(_, epoch)| *epoch == stmt.epoch()) {
            return None;
        }
        let (s, _) = self.held.pop(&stmt.id)?;
        if let Some(r) = &self.registry {
            r.release_server(&s);
        }
        Some(s)
    }

    /// Undoes [`Self::insert`]: the Parse did not happen on the server.
    pub fn forget(&mut self, id: u64) {
        if let Some((s, _)) = self.held.pop(&id) {
            if let Some(r) = &self.registry {
                r.release_server(&s);
            }
        }
    }

    /// Undoes an eviction: the Close did not happen on the server.
    pub fn restore(&mut self, stmt: Arc<Statement>) {
        // The plan's epoch is no longer known: the next use parses it afresh.
        if self.held.put(stmt.id, (stmt.clone(), u64::MAX)).is_none() {
            if let Some(r) = &self.registry {
                r.add_server_ref(&stmt);
            }
        }
    }

    /// The server dropped every prepared statement (`DISCARD ALL`, `DEALLOCATE ALL`).
    pub fn clear(&mut self) {
        while let Some((_, (s, _))) = self.held.pop_lru() {
            if let Some(r) = &self.registry {
                r.release_server(&s);
            }
        }
        self.unnamed = None;
    }

    /// Gives back a client's reference whose client has gone (see [`super::settle`]).
    pub fn release_client_ref(&self, stmt: &Statement) {
        if let Some(r) = &self.registry {
            r.release_client(stmt);
        }
    }

    pub fn registry(&self) -> Option<&Arc<Registry>> {
        self.registry.as_ref()
    }

    pub fn len(&self) -> usize {
        self.held.len()
    }

    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }
}

impl Drop for ServerStatements {
    fn drop(&mut self) {
        self.clear();
    }
}
