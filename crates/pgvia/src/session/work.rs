//! What a session needs only while it has something to do: its buffers (with the meter, the
//! read limits and the copy of the first request) and the query memo.
//!
//! An idle client does not keep them (issue 19, `docs/benchmarks.md`). They are taken at the
//! client's first request and given back when its socket goes quiet with nothing held in them
//! (`Session::wait_for_work`); the next request takes them again. Given back, they go to a
//! free list of the worker thread, buffers and all, so a busy session takes warm buffers and
//! the hot path allocates nothing here: one pop and one push per transaction. The list is
//! bounded ([`SPARE_PER_THREAD`]) and so are the buffers kept in it ([`KEPT_CAPACITY`]).
//!
//! The meter and the read limits belong to one client: they are set up at each take, with the
//! values the configuration had when the session started ([`Terms`]; a reload applies them to
//! sessions that start after it, as before).

use std::cell::RefCell;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;

use super::backpressure::ReadLimits;
use super::exchange::Buffers;
use super::memo::QueryMemo;
use super::meter::Meter;
use crate::app::App;
use crate::clients::ClientInfo;

/// Free parts kept per worker thread. Idle clients keep none, busy ones hold their own, so
/// this only needs to cover the clients of one thread that go quiet and come back at once.
const SPARE_PER_THREAD: usize = 32;

/// A buffer larger than this is not kept in the free list (a large result made it so); the
/// next user grows its own.
const KEPT_CAPACITY: usize = 16 * 1024;

/// A session's per-request parts.
#[derive(Default)]
pub struct Parts {
    pub bufs: Buffers,
    pub memo: QueryMemo,
}

thread_local! {
    // Boxes, not the parts themselves: a session holds its parts in a box, and taking one
    // from here must not allocate it.
    #[allow(clippy::vec_box)]
    static SPARE: RefCell<Vec<Box<Parts>>> = const { RefCell::new(Vec::new()) };
}

/// A session's slot for its parts: empty while the client is idle.
pub struct Work(Option<Box<Parts>>, Terms);

/// What a session's parts are set up with: the configuration's values when it started.
#[derive(Debug, Clone, Copy)]
pub struct Terms {
    /// `general.slow_query_threshold`.
    slow_query_threshold: Duration,
    /// `limits.client_backlog_bytes`.
    backlog: usize,
    /// `limits.max_buffered_message_bytes`.
    message_budget: u64,
}

impl Terms {
    pub fn of(config: &crate::config::Config) -> Terms {
        Terms {
            slow_query_threshold: config.general.slow_query_threshold,
            backlog: config.limits.client_backlog_bytes as usize,
            message_budget: config.limits.max_buffered_message_bytes,
        }
    }
}

impl Work {
    /// A session's slot, empty.
    pub fn new(terms: Terms) -> Work {
        Work(None, terms)
    }

    /// Starts with parts already in use (the client sent more than its login).
    pub fn with(parts: Box<Parts>, terms: Terms) -> Work {
        Work(Some(parts), terms)
    }

    /// The parts, taken from the worker's free list (or made) and set up for `client` if the
    /// session holds none.
    pub fn get(&mut self, app: &App, client: &Arc<ClientInfo>) -> &mut Parts {
        let terms = self.1;
        self.0.get_or_insert_with(|| Parts::take(app, client, terms))
    }

    /// The parts, if the session holds them.
    pub fn peek(&self) -> Option<&Parts> {
        self.0.as_deref()
    }

    /// The parts, if the session holds them.
    pub fn peek_mut(&mut self) -> Option<&mut Parts> {
        self.0.as_deref_mut()
    }

    /// Gives the parts back to the worker's free list if nothing in them belongs to the
    /// client any more: no bytes waiting either way, no request kept for a retry, no query
    /// or transaction being timed, no large message being received.
    pub fn release_if_clean(&mut self) {
        let clean = self.0.as_deref().is_some_and(|p| {
            let b = &p.bufs;
            b.from_client.is_empty()
                && b.to_client.is_empty()
                && b.to_server.is_empty()
                && !b.first.retrying()
                && b.meter.is_idle()
                && b.read_limits.holds_nothing()
        });
        if clean {
            if let Some(parts) = self.0.take() {
                parts.give_back();
            }
        }
    }
}

impl Parts {
    /// Free parts of this worker, or new ones, with `client`'s meter and read limits.
    pub fn take(app: &App, client: &Arc<ClientInfo>, terms: Terms) -> Box<Parts> {
        let spare = SPARE.try_with(|s| s.borrow_mut().pop()).ok().flatten();
        let mut parts = spare.unwrap_or_default();
        parts.bufs.meter = Meter::new(client.clone(), terms.slow_query_threshold);
        parts.bufs.read_limits = ReadLimits::with(app.admission.clone(), terms.backlog, terms.message_budget);
        parts
    }

    /// Clears what was the client's and keeps the rest on this worker's free list.
    fn give_back(mut self: Box<Self>) {
        self.bufs.meter = Meter::default();
        self.bufs.read_limits = ReadLimits::default();
        self.bufs.first.forget();
        self.memo.forget();
        for buf in [&mut self.bufs.from_client, &mut self.bufs.to_client, &mut self.bufs.to_server] {
            buf.clear();
            if buf.capacity() > KEPT_CAPACITY {
                *buf = BytesMut::new();
            }
        }
        // Not kept (dropped here) when the list is full or the thread is ending.
        let _ = SPARE.try_with(|s| {
            let mut spare = s.borrow_mut();
            (spare.len() < SPARE_PER_THREAD).then(|| spare.push(self))
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn terms() -> Terms {
        Terms { slow_query_threshold: Duration::ZERO, backlog: 1 << 20, message_budget: 1 << 30 }
    }

    fn spare() -> Option<Box<Parts>> {
        SPARE.with(|s| s.borrow_mut().pop())
    }

    #[test]
    fn parts_holding_bytes_stay_and_clean_parts_go_back_warm() {
        while spare().is_some() {}
        let mut parts = Box::<Parts>::default();
        parts.bufs.from_client.extend_from_slice(b"Q\0\0\0\x0dSELECT 1\0");
        parts.bufs.to_client.reserve(64 * 1024);
        let mut work = Work::with(parts, terms());
        // A request waits in the buffer: the parts are the client's.
        work.release_if_clean();
        assert!(work.peek().is_some());
        assert!(spare().is_none());

        let held = work.peek_mut().map(|p| {
            p.bufs.from_client.clear();
            p.bufs.from_client.reserve(2048);
            p as *const Parts
        });
        work.release_if_clean();
        assert!(work.peek().is_none(), "clean parts are given back");
        let back = spare().expect("kept on this thread's free list");
        assert_eq!(Some(&*back as *const Parts), held, "the same box, not a copy");
        // Emptied; a small buffer keeps its room, an oversized one does not.
        assert!(back.bufs.from_client.is_empty() && back.bufs.from_client.capacity() >= 2048);
        assert_eq!(back.bufs.to_client.capacity(), 0);
        assert!(back.bufs.meter.is_idle());
    }

    #[test]
    fn the_free_list_is_bounded() {
        while spare().is_some() {}
        for _ in 0..SPARE_PER_THREAD + 8 {
            Box::<Parts>::default().give_back();
        }
        assert_eq!(SPARE.with(|s| s.borrow().len()), SPARE_PER_THREAD);
        while spare().is_some() {}
    }
}
