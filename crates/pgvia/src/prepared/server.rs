//! The statements one server connection holds under pgvia's names, in a bounded LRU, and
//! which statement its unnamed slot holds.

use std::sync::Arc;

use lru::LruCache;

use super::registry::{Registry, Statement};

pub struct ServerStatements {
    registry: Option<Arc<Registry>>,
    held: LruCache<u64, Arc<Statement>>,
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
        self.held.get(&stmt.id).is_some()
    }

    /// Records that the server now holds `stmt` (a Parse under its name was sent). Returns a
    /// statement to close on the server when the cache is over its capacity.
    pub fn insert(&mut self, stmt: &Arc<Statement>) -> Option<Arc<Statement>> {
        if self.held.put(stmt.id, stmt.clone()).is_none() {
            if let Some(r) = &self.registry {
                r.add_server_ref(stmt);
            }
        }
        if self.held.len() > self.capacity {
            // The entry just inserted is the most recent, so never the one evicted.
            let (_, evicted) = self.held.pop_lru()?;
            if let Some(r) = &self.registry {
                r.release_server(&evicted);
                r.stats.evictions.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            return Some(evicted);
        }
        None
    }

    /// Undoes [`Self::insert`]: the Parse did not happen on the server.
    pub fn forget(&mut self, id: u64) {
        if let Some(s) = self.held.pop(&id) {
            if let Some(r) = &self.registry {
                r.release_server(&s);
            }
        }
    }

    /// Undoes an eviction: the Close did not happen on the server.
    pub fn restore(&mut self, stmt: Arc<Statement>) {
        if self.held.put(stmt.id, stmt.clone()).is_none() {
            if let Some(r) = &self.registry {
                r.add_server_ref(&stmt);
            }
        }
    }

    /// The server dropped every prepared statement (`DISCARD ALL`, `DEALLOCATE ALL`).
    pub fn clear(&mut self) {
        while let Some((_, s)) = self.held.pop_lru() {
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
