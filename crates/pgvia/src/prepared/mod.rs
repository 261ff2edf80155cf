//! Prepared statements in transaction mode: clients keep their own statement names while
//! servers come and go.
//!
//! A statement is registered once ([`Registry`]) as immutable metadata shared by pointer;
//! each client maps its names to those ([`ClientStatements`]); each server connection holds
//! statements under pgvia's names in a bounded LRU ([`ServerStatements`]). The relay
//! rewrites the client's Parse/Bind/Describe/Close to pgvia's names (`server::forward`), injects a
//! Parse where the chosen server lacks the statement, and answers a Parse or Close itself
//! where the server need not hear it. Every injected or answered message has its place in
//! the server's expected-reply queue, so replies reach the client in order, and what pgvia
//! recorded for a request the server skipped is undone (`server::forward::settle`).

mod client;
mod errors;
#[cfg(test)]
mod limits_tests;
mod registry;
pub mod replay;
mod server;
pub mod sql;

use std::sync::Arc;

pub use client::{is_reserved_name, ClientStatements, DuplicateName};
pub use errors::{duplicate_statement, no_such_statement};
pub use registry::{
    Caps, PurgePolicy, Registry, RegistrySnapshot, Statement, StatementLimit, SERVER_NAME_PREFIX,
};
pub use server::ServerStatements;

/// Bookkeeping on a server's statements made when a request was sent.
#[derive(Debug)]
pub enum ServerEffect {
    /// A Parse under pgvia's name for this statement id.
    Prepared(u64),
    /// A Close of this statement, evicted from the server's cache.
    Evicted(Arc<Statement>),
    /// A Parse into the server's unnamed slot, which held `prev` before.
    Unnamed { prev: Option<u64> },
    /// Not bookkeeping: marks the Bind or Describe of this statement that began an exchange
    /// pgvia recorded, so a stale-plan failure of it is noticed and, when `replay` (the
    /// exchange describes its results, so the client learns their new shape), retried.
    ReplayFrom { id: u64, replay: bool },
}

/// Bookkeeping on a client's names made when a request was sent (or answered by pgvia).
#[derive(Debug)]
pub enum ClientEffect {
    /// A Parse bound `name`, which meant `prev` before.
    Bound { name: Box<str>, prev: Option<Arc<Statement>> },
    /// A Close unbound `name`, which meant `stmt`.
    Closed { name: Box<str>, stmt: Arc<Statement> },
}

/// Whether a query may change the schema that statements were parsed against: DDL, and
/// what pgvia cannot see into (`DO`, `CALL`, statements the analysis does not know, SQL it
/// could not read). Such a query starts a new schema generation (see
/// [`ServerStatements::schema_change_sent`]). Functions called from ordinary queries are not
/// counted: DDL inside them is not seen (docs/compatibility.md).
pub fn changes_schema(analysis: &route::Analysis) -> bool {
    use route::StatementKind as K;
    analysis.is_conservative()
        || analysis.statements().any(|s| {
            matches!(s.kind(), K::Ddl | K::CreateTable { .. } | K::Do | K::Call | K::Other)
                || matches!(s.target(), Some(K::Ddl | K::CreateTable { .. } | K::Do | K::Call))
                    && matches!(s.kind(), K::Explain { analyze: true })
        })
}
