//! The client a checkout serves, as the pool sees it: told when it starts waiting, when it is
//! served (and how long it waited) and when its server is gone again. The pool knows clients
//! only through this, so it needs nothing from the layers above it.

use std::sync::Arc;
use std::time::Duration;

pub trait Patron: Send + Sync {
    /// Waiting for a server (or for a paused pool to resume).
    fn waiting(&self);
    /// Holding a server, after waiting `waited` for it.
    fn served(&self, waited: Duration);
    /// Holding no server any more (given back, closed, or the checkout failed).
    fn unserved(&self);
}

/// A shared patron, as checkouts keep it.
pub type PatronRef = Arc<dyn Patron>;
