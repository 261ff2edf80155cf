//! One client's prepared statements: its own names, each pointing at a shared [`Statement`].
//!
//! Bind, Describe and Close resolve here with one lookup and no lock. The map lives and dies
//! with the session; dropping it gives back the references it took.

use std::collections::HashMap;
use std::hash::RandomState;
use std::sync::Arc;

use super::registry::{Registry, Statement, StatementLimit, SERVER_NAME_PREFIX};

/// Keyed by names the client chooses, so hashed with a random seed: a client cannot pick
/// names that all land in one bucket.
type Names = HashMap<Box<str>, Arc<Statement>, RandomState>;

/// Whether `name` has the shape of pgvia's own statement names (`pgvia_<digits>`). A client
/// that names one it has not prepared itself must get PostgreSQL's "does not exist", never
/// reach the statement pgvia made on the server for others.
pub fn is_reserved_name(name: &str) -> bool {
    name.strip_prefix(SERVER_NAME_PREFIX)
        .is_some_and(|id| !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()))
}

/// How many recently parsed statements a client remembers by identity, so re-parsing the same
/// text (a driver's unnamed statement, a new name for a known query) takes no lock.
const RECENT: usize = 8;

pub struct ClientStatements {
    registry: Arc<Registry>,
    /// The exchange being recorded for a retry after a stale plan.
    pub replay: super::replay::Replay,
    named: Names,
    unnamed: Option<Arc<Statement>>,
    recent: [Option<Arc<Statement>>; RECENT],
    next_recent: usize,
}

/// A Parse for a name the client already uses.
#[derive(Debug)]
pub struct DuplicateName;

impl ClientStatements {
    pub fn new(registry: Arc<Registry>) -> Self {
        Self {
            registry,
            replay: Default::default(),
            named: Names::default(),
            unnamed: None,
            recent: Default::default(),
            next_recent: 0,
        }
    }

    pub fn registry(&self) -> &Arc<Registry> {
        &self.registry
    }

    /// The statement a client name (empty for the unnamed statement) refers to.
    pub fn get(&self, name: &str) -> Option<&Arc<Statement>> {
        if name.is_empty() {
            self.unnamed.as_ref()
        } else {
            self.named.get(name)
        }
    }

    /// Whether the client may bind `name` by a Parse or `PREPARE`: a new name past
    /// `max_prepared_statements_per_client` is refused. Checked before the statement is
    /// resolved, so a refused one costs no analysis and no lock. (A name in use is let
    /// through: it gets PostgreSQL's 42P05 from [`Self::bind_name`].)
    pub fn admit(&self, name: &str) -> Result<(), StatementLimit> {
        let cap = self.registry.caps.per_client();
        if name.is_empty() || self.named.len() < cap || self.named.contains_key(name) {
            Ok(())
        } else {
            Err(StatementLimit::PerClient(cap))
        }
    }

    /// Finds or registers the statement for a Parse, in three tiers: this client's recent
    /// statements (no lock), the registry (read lock), a new registration (write lock).
    pub fn resolve(
        &mut self,
        query: &[u8],
        param_types: wire::frontend::Oids<'_>,
        analyze: impl FnOnce() -> Arc<route::Analysis>,
    ) -> Result<Arc<Statement>, StatementLimit> {
        let hash = self.registry.hash(query, param_types);
        let recent = self.recent.iter().flatten().find(|s| s.matches(hash, query, param_types));
        if let Some(found) = recent {
            self.registry.stats.client_hits.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let found = found.clone();
            self.registry.add_client_ref(&found);
            // A Parse is fresh whichever tier finds it: on a dedicated server it parses against
            // the catalog as it is now, so server copies from before a schema change must not
            // describe or run it (the registry tier does the same).
            found.require_generation(self.registry.schema_generation());
            return Ok(found);
        }
        let stmt = self.registry.acquire(query, param_types, hash, analyze)?;
        self.recent[self.next_recent] = Some(stmt.clone());
        self.next_recent = (self.next_recent + 1) % RECENT;
        Ok(stmt)
    }

    /// Maps `name` to `stmt`, whose client reference the caller took (by [`Self::resolve`]).
    /// Returns what the name meant before (the unnamed statement is simply replaced), for
    /// undoing. A name already in use is refused, as PostgreSQL does, and the reference given
    /// back.
    pub fn bind_name(
        &mut self,
        name: &str,
        stmt: Arc<Statement>,
    ) -> Result<Option<Arc<Statement>>, DuplicateName> {
        if name.is_empty() {
            return Ok(self.unnamed.replace(stmt));
        }
        if self.named.contains_key(name) {
            self.registry.release_client(&stmt);
            return Err(DuplicateName);
        }
        self.named.insert(name.into(), stmt);
        Ok(None)
    }

    /// Forgets a name (Close). Returns the statement it meant; the caller owns its reference
    /// (to keep for undoing, or to release).
    pub fn unbind(&mut self, name: &str) -> Option<Arc<Statement>> {
        if name.is_empty() {
            self.unnamed.take()
        } else {
            self.named.remove(name)
        }
    }

    /// Puts a name back to what it meant before an undone Parse or Close.
    pub fn restore(&mut self, name: &str, prev: Option<Arc<Statement>>) {
        let current = match (name.is_empty(), prev) {
            (true, prev) => std::mem::replace(&mut self.unnamed, prev),
            (false, Some(prev)) => self.named.insert(name.into(), prev),
            (false, None) => self.named.remove(name),
        };
        if let Some(s) = current {
            self.registry.release_client(&s);
        }
    }

    /// Gives back a reference the caller held (a closed statement whose Close succeeded).
    pub fn release(&self, stmt: &Statement) {
        self.registry.release_client(stmt);
    }

    /// Forgets every name (`DEALLOCATE ALL`, `DISCARD ALL`).
    pub fn clear(&mut self) {
        for (_, s) in self.named.drain() {
            self.registry.release_client(&s);
        }
        if let Some(s) = self.unnamed.take() {
            self.registry.release_client(&s);
        }
    }

    /// The simple-query protocol replaces the unnamed statement.
    pub fn drop_unnamed(&mut self) {
        if let Some(s) = self.unnamed.take() {
            self.registry.release_client(&s);
        }
    }

    pub fn len(&self) -> usize {
        self.named.len() + usize::from(self.unnamed.is_some())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Drop for ClientStatements {
    fn drop(&mut self) {
        self.clear();
    }
}
