use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::OwnedSemaphorePermit;

use super::{PatronRef, Pool};
use crate::server::{FirstRequest, ServerConn};

/// A server checked out of a pool. Give it back with [`Checkout::release`], which resets it;
/// dropping the guard instead closes the connection, so a server whose state is unknown can
/// never reach another client.
pub struct Checkout {
    pool: Arc<Pool>,
    conn: Option<ServerConn>,
    /// Told when the server is gone again (by any of the ways a checkout ends).
    patron: Option<PatronRef>,
    /// Held while the server is out; goes back with it (`Pool::put_back`), or is dropped.
    permit: Option<OwnedSemaphorePermit>,
}

impl Checkout {
    pub(super) fn new(
        pool: Arc<Pool>,
        mut conn: ServerConn,
        patron: Option<PatronRef>,
        permit: OwnedSemaphorePermit,
    ) -> Self {
        conn.first_request = FirstRequest::Unsent;
        Self { pool, conn: Some(conn), patron, permit: Some(permit) }
    }

    /// Serves `patron` from now on (a server taken before its client was registered).
    pub fn attach(&mut self, patron: PatronRef) {
        patron.served(Duration::ZERO);
        self.patron = Some(patron);
    }

    fn unserved(&self) {
        if let Some(p) = &self.patron {
            p.unserved();
        }
    }

    pub fn pool(&self) -> &Arc<Pool> {
        &self.pool
    }

    /// The connection. Present until the guard is consumed.
    pub fn conn(&mut self) -> &mut ServerConn {
        // Only `release` and `Drop` take the connection out, and both consume the guard.
        #[allow(clippy::unwrap_used)]
        self.conn.as_mut().unwrap()
    }

    pub fn conn_ref(&self) -> &ServerConn {
        #[allow(clippy::unwrap_used)]
        self.conn.as_ref().unwrap()
    }

    /// Resets the server and returns it to the pool, or closes it if it cannot be made clean.
    /// `unsent`: see [`ServerConn::reset`].
    pub async fn release(mut self, unsent: &[u8], reset_query: &str, reset_timeout: Duration) {
        let Some(mut conn) = self.conn.take() else { return };
        self.unserved();
        self.pool.stats.servers_active.fetch_sub(1, Ordering::Relaxed);
        match conn.reset(unsent, reset_query, reset_timeout).await {
            Ok(()) => self.give_to_pool(conn),
            Err(e) => {
                self.pool.stats.resets_failed.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(pool = %self.pool.name, server = conn.id, error = %e, "could not reset server connection; closing it");
                self.pool.close_conn(conn, "reset failed");
            }
        }
    }

    /// Gives a clean server back with this checkout's permit.
    fn give_to_pool(&mut self, conn: ServerConn) {
        match self.permit.take() {
            Some(permit) => self.pool.put_back(conn, permit),
            None => self.pool.put_idle(conn),
        }
    }
}

impl Checkout {
    /// Returns a server no client has touched straight to the idle list; anything else goes
    /// through [`Checkout::release`] or is closed.
    pub fn give_back_unused(self) {
        self.give_back(|c| c.condition() == crate::server::Condition::Clean)
    }

    /// Transaction pooling: returns a server between transactions without a reset; the
    /// next client's settings are brought over when it is assigned.
    pub fn give_back_idle(self) {
        self.give_back(|_| true)
    }

    fn give_back(mut self, clean_enough: impl FnOnce(&ServerConn) -> bool) {
        let Some(conn) = self.conn.take() else { return };
        self.unserved();
        self.pool.stats.servers_active.fetch_sub(1, Ordering::Relaxed);
        if conn.is_broken() || !conn.tracker.is_quiescent() || !clean_enough(&conn) {
            self.pool.close_conn(conn, "given back in use");
        } else {
            self.give_to_pool(conn);
        }
    }
}

impl Drop for Checkout {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            self.unserved();
            self.pool.stats.servers_active.fetch_sub(1, Ordering::Relaxed);
            self.pool.close_conn(conn, "released without reset");
        }
    }
}
