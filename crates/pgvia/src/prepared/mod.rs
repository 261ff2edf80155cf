//! Prepared statements in transaction mode: clients keep their own statement names while
//! servers come and go.
//!
//! A statement is registered once ([`Registry`]) as immutable metadata shared by pointer;
//! each client maps its names to those ([`ClientStatements`]); each server connection holds
//! statements under pgvia's names in a bounded LRU ([`ServerStatements`]). The relay
//! rewrites the client's Parse/Bind/Describe/Close to pgvia's names ([`forward`]), injects a
//! Parse where the chosen server lacks the statement, and answers a Parse or Close itself
//! where the server need not hear it. Every injected or answered message has its place in
//! the server's expected-reply queue, so replies reach the client in order, and what pgvia
//! recorded for a request the server skipped is undone ([`settle`]).

mod client;
pub mod forward;
#[cfg(test)]
mod limits_tests;
mod registry;
pub mod replay;
mod server;
pub mod sql;
#[cfg(test)]
mod tests;

use std::sync::Arc;

pub use client::{is_reserved_name, ClientStatements, DuplicateName};
pub use registry::{
    Caps, PurgePolicy, Registry, RegistrySnapshot, Statement, StatementLimit, SERVER_NAME_PREFIX,
};
pub use server::ServerStatements;

use crate::server::tracker::Finished;

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

/// Applies the outcome of settled requests: what succeeded gives back the references it no
/// longer needs; what the server failed or skipped is undone, newest first. Without a client
/// (it has left), only the references are given back.
pub fn settle(
    finished: impl DoubleEndedIterator<Item = Finished>,
    server: &mut ServerStatements,
    mut client: Option<&mut ClientStatements>,
) {
    for f in finished.rev() {
        if !f.ok {
            match f.server_effect {
                Some(ServerEffect::Prepared(id)) => server.forget(id),
                Some(ServerEffect::Evicted(stmt)) => server.restore(stmt),
                Some(ServerEffect::Unnamed { prev }) => server.unnamed = prev,
                Some(ServerEffect::ReplayFrom { .. }) | None => {}
            }
        }
        let Some(effect) = f.client_effect else { continue };
        match (effect, f.ok, client.as_deref_mut()) {
            (ClientEffect::Bound { name, prev }, false, Some(c)) => c.restore(&name, prev),
            (ClientEffect::Closed { name, stmt }, false, Some(c)) => c.restore(&name, Some(stmt)),
            (ClientEffect::Bound { prev: Some(stmt), .. } | ClientEffect::Closed { stmt, .. }, _, _) => {
                server.release_client_ref(&stmt)
            }
            (ClientEffect::Bound { prev: None, .. }, _, _) => {}
        }
    }
}
