//! A client's first request on a server that turns out dead runs on another server.
//!
//! A server can die while idle in the pool (`pg_terminate_backend`, `idle_session_timeout`,
//! a restart, a failover) a moment before, or just as, it is handed to a client; the pool's
//! checkout drops the ones already seen dead, and this covers the rest. The request goes to
//! another server only where the dead one can have kept nothing of it (see
//! [`FirstRequest`]): nothing was written to it yet, or its first reply was the FATAL error
//! PostgreSQL sends when it is terminated. Anything else reaches the client as it would
//! directly.

use bytes::BytesMut;

use super::deferred::DeferredBegin;

use crate::server::{FirstRequest, ServerConn, ServerError};

/// First requests larger than this are not kept, and so not retried: a copy per checkout
/// must stay cheap.
const MAX_KEPT: usize = 64 * 1024;

/// Servers one request may be tried on: each one tried is dead and dropped, so this only
/// stops a loop when every server that can be had dies the same way (a database going down).
const MAX_TRIES: u32 = 8;

/// The client's first request to the server it was just given, as it was before the relay
/// sent it (and what the client pipelined behind it before the server answered), kept until
/// that server answers.
#[derive(Default)]
pub struct FirstAttempt {
    request: BytesMut,
    begin: Option<DeferredBegin>,
    kept: Kept,
    tries: u32,
}

#[derive(Default, Clone, Copy, PartialEq, Eq)]
enum Kept {
    /// Nothing kept: a failure reaches the client.
    #[default]
    No,
    Yes,
    /// Kept, and being sent again to another server.
    Retrying,
}

impl FirstAttempt {
    /// Keeps bytes the client sent behind its first request before the server answered;
    /// false when they make the request too large to keep (it then cannot be retried).
    pub(super) fn keep_more(&mut self, more: &[u8]) -> bool {
        if self.kept != Kept::Yes || self.request.len() + more.len() > MAX_KEPT {
            self.kept = Kept::No;
            return false;
        }
        self.request.extend_from_slice(more);
        true
    }

    /// Keeps what the client sent before it is given a server (and the `BEGIN` pgvia answered
    /// for it, which the server hears first).
    pub(super) fn keep(&mut self, from_client: &BytesMut, begin: Option<&DeferredBegin>) {
        if self.kept == Kept::Retrying {
            self.kept = Kept::Yes;
            return;
        }
        self.tries = 0;
        self.request.clear();
        self.begin = begin.cloned();
        if from_client.len() <= MAX_KEPT {
            self.request.extend_from_slice(from_client);
            self.kept = Kept::Yes;
        } else {
            self.kept = Kept::No;
        }
        // A large request once must not pin its memory for the rest of the session.
        if self.request.capacity() > 4 * 1024 && self.request.is_empty() {
            self.request = BytesMut::new();
        }
    }
}

/// Tried servers beyond the first, over every session (for tests and logs).
pub static FIRST_REQUEST_RETRIES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

impl FirstAttempt {
    /// After `conn` failed with `error`: whether the first request can have left nothing on it
    /// and may go to another server. If so it is marked as being retried (the next [`keep`]
    /// keeps it as it is) and counted.
    ///
    /// [`keep`]: FirstAttempt::keep
    pub(super) fn begin_retry(&mut self, pool: &str, conn: &ServerConn, error: &ServerError) -> bool {
        if self.kept != Kept::Yes || !conn.first_request.may_retry() || self.tries + 1 >= MAX_TRIES {
            tracing::debug!(pool, first_request = ?conn.first_request, tries = self.tries, %error, buffered = conn.read_buf.len(), pid = conn.key.process_id, age_ms = conn.created.elapsed().as_millis() as u64, "the request cannot go to another server");
            return false;
        }
        self.tries += 1;
        self.kept = Kept::Retrying;
        FIRST_REQUEST_RETRIES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let sent = conn.first_request != FirstRequest::Unsent;
        tracing::info!(
            pool,
            server = conn.id,
            pid = conn.key.process_id,
            %error,
            sent,
            "server connection died before answering the client's first request; running it on another server"
        );
        true
    }

    /// The kept request, and the `BEGIN` pgvia answered ahead of it.
    /// Whether the kept request is about to go to another server.
    pub(super) fn retrying(&self) -> bool {
        self.kept == Kept::Retrying
    }

    /// Drops the kept request, keeping the buffer's room (the session went idle).
    pub(super) fn forget(&mut self) {
        self.request.clear();
        self.begin = None;
        self.kept = Kept::No;
        self.tries = 0;
    }

    pub(super) fn kept(&self) -> (&[u8], Option<&DeferredBegin>) {
        (&self.request, self.begin.as_ref())
    }
}
