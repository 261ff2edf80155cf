//! The statements one server connection holds under pgvia's names, in a bounded LRU, and
//! which statement its unnamed slot holds.

use std::sync::Arc;

use lru::LruCache;

use super::registry::{Registry, Statement};

pub struct ServerStatements {
    registry: Option<Arc<Registry>>,
    /// By statement id: the statement and when the server parsed it.
    held: LruCache<u64, (Arc<Statement>, Parsed)>,
    capacity: usize,
    /// The statement the server's unnamed slot holds, by id, if pgvia knows it.
    pub unnamed: Option<u64>,
    /// The schema generation the unnamed slot was parsed in.
    unnamed_generation: u64,
    /// A query that may change the schema ran here in a transaction not yet ended: its end
    /// is a schema change too (what it did becomes visible to every other server then).
    schema: SchemaChange,
}

/// When a server parsed its copy of a statement: the statement's plan epoch and the
/// registry's schema generation at the time the Parse was sent (never later than the server
/// parsed it, so a copy is never thought newer than it is).
#[derive(Debug, Clone, Copy)]
struct Parsed {
    epoch: u64,
    generation: u64,
}

impl Parsed {
    /// Unknown: the copy may not exist, or be of any age. It never serves; the next use
    /// closes it (harmless if absent) and parses again.
    const UNKNOWN: Parsed = Parsed { epoch: u64::MAX, generation: 0 };

    fn serves(&self, stmt: &Statement) -> bool {
        self.epoch == stmt.epoch() && self.generation >= stmt.fresh_from()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SchemaChange {
    None,
    /// Sent inside a transaction (explicit or implicit) that has not ended yet.
    Open,
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
        Self {
            registry,
            held: LruCache::unbounded(),
            capacity,
            unnamed: None,
            unnamed_generation: 0,
            schema: SchemaChange::None,
        }
    }

    fn generation(&self) -> u64 {
        self.registry.as_ref().map_or(0, |r| r.schema_generation())
    }

    /// Whether the server holds `stmt` in a copy that may serve it; marks it recently used.
    pub fn holds(&mut self, stmt: &Statement) -> bool {
        self.held.get(&stmt.id).is_some_and(|(_, parsed)| parsed.serves(stmt))
    }

    /// Whether the server's unnamed slot holds `stmt` in a copy that may serve it.
    pub fn holds_unnamed(&self, stmt: &Statement) -> bool {
        self.unnamed == Some(stmt.id) && self.unnamed_generation >= stmt.fresh_from()
    }

    /// Records a Parse of `id` into the unnamed slot; returns what it held before.
    pub fn set_unnamed(&mut self, id: u64) -> Option<u64> {
        self.unnamed_generation = self.generation();
        self.unnamed.replace(id)
    }

    /// Undoes [`Self::set_unnamed`]; the restored copy's age is unknown, so it counts as old.
    pub fn restore_unnamed(&mut self, prev: Option<u64>) {
        self.unnamed = prev;
        self.unnamed_generation = 0;
    }

    /// A query that may change the schema was sent here: it is a schema change now (for
    /// what later queries on other servers may see of it) and again when its transaction
    /// ends ([`Self::transaction_ended`]).
    pub fn schema_change_sent(&mut self) {
        if let Some(r) = &self.registry {
            r.schema_changed();
            self.schema = SchemaChange::Open;
        }
    }

    /// The server reported it is outside any transaction.
    pub fn transaction_ended(&mut self) {
        if self.schema == SchemaChange::Open {
            self.schema = SchemaChange::None;
            if let Some(r) = &self.registry {
                r.schema_changed();
            }
        }
    }

    /// Records that the server now holds `stmt` (a Parse under its name was sent). Returns a
    /// statement to close on the server when the cache is over its capacity.
    pub fn insert(&mut self, stmt: &Arc<Statement>) -> Option<Arc<Statement>> {
        let parsed = Parsed { epoch: stmt.epoch(), generation: self.generation() };
        if self.held.put(stmt.id, (stmt.clone(), parsed)).is_none() {
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
        self.held.peek(&id).map(|(s, parsed)| (s, parsed.epoch))
    }

    /// Takes out `stmt` if the server holds a copy that may not serve it (a plan older than
    /// the statement's epoch, which another server reported stale; a copy parsed before a
    /// schema change that a client's fresh Parse must not see; or one of unknown state): the
    /// caller closes it there before parsing again.
    pub fn take_stale(&mut self, stmt: &Statement) -> Option<Arc<Statement>> {
        if self.held.peek(&stmt.id).is_none_or(|(_, parsed)| parsed.serves(stmt)) {
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

    /// Undoes an eviction: the Close did not happen on the server. Also records a statement
    /// the server may or may not hold (a query that PREPAREs or DEALLOCATEs it under pgvia's
    /// name may have stopped before it).
    pub fn restore(&mut self, stmt: Arc<Statement>) {
        // The plan's age is no longer known: the next use parses it afresh.
        if self.held.put(stmt.id, (stmt.clone(), Parsed::UNKNOWN)).is_none() {
            if let Some(r) = &self.registry {
                r.add_server_ref(&stmt);
            }
        }
    }

    /// A query that may have dropped the server's statements was sent (`DISCARD ALL`,
    /// `DEALLOCATE ALL`, whose success is not awaited): every copy is of unknown state, closed
    /// (harmless if absent) and parsed again at its next use.
    pub fn assume_unknown(&mut self) {
        for (_, (_, parsed)) in self.held.iter_mut() {
            *parsed = Parsed::UNKNOWN;
        }
        self.unnamed = None;
    }

    /// Whether the server has any copy of `stmt`, whatever its state.
    pub fn has_copy(&self, stmt: &Statement) -> bool {
        self.held.contains(&stmt.id)
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
