//! Servers handed from the client that gives one back to a client waiting on the same thread.
//!
//! Waiting clients queue on the pool's fair semaphore, which wakes the longest waiter on
//! whichever thread it is; under thread per core that waiter then moves the server to its own
//! thread (two `epoll_ctl` calls) and was woken across threads (an `eventfd` write). With more
//! clients than servers that was a third of all checkouts. So a waiting client also queues on
//! its thread's handoff queue, and a server given back on a thread goes straight, with its
//! permit, to the longest waiter there, unless a waiter on another thread has waited
//! [`MAX_SKEW`] longer: then it takes the semaphore's way, oldest first, as before. A thread
//! whose clients hold every server thus cannot starve the others by more than that.

use std::collections::VecDeque;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::{oneshot, OwnedSemaphorePermit};

use super::Pool;
use crate::server::ServerConn;

/// How much longer than the local one a waiter elsewhere may have waited before a server
/// given back here goes to the longest waiter overall instead.
const MAX_SKEW: Duration = Duration::from_millis(2);

/// A server with the permit it counts against.
pub(super) type Handed = (ServerConn, OwnedSemaphorePermit);

struct Waiter<T> {
    since: Instant,
    tx: oneshot::Sender<T>,
}

/// One queue of waiting clients per client thread; what is handed is a [`Handed`] (generic for
/// the tests).
pub(super) struct Handoffs<T = Handed> {
    queues: Box<[Mutex<VecDeque<Waiter<T>>>]>,
}

impl<T> Handoffs<T> {
    pub(super) fn new(threads: usize) -> Self {
        Self { queues: (0..threads).map(|_| Mutex::new(VecDeque::new())).collect() }
    }

    fn queue(&self, thread: usize) -> std::sync::MutexGuard<'_, VecDeque<Waiter<T>>> {
        // A panic while holding this lock cannot leave the queue inconsistent.
        self.queues[thread % self.queues.len()].lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues a client of thread `here` (`cores::current`); what it is handed arrives on the
    /// returned receiver.
    pub(super) fn wait(&self, here: usize, since: Instant) -> oneshot::Receiver<T> {
        let (tx, rx) = oneshot::channel();
        let mut queue = self.queue(here);
        // Entries of clients served by the semaphore or gone leave as they reach the front.
        live_front(&mut queue);
        queue.push_back(Waiter { since, tx });
        rx
    }

    /// Hands `handed` to the longest waiter on thread `here` (`cores::current`), unless none
    /// waits there or one on another thread has waited [`MAX_SKEW`] longer; gives it back
    /// when not handed.
    pub(super) fn offer(&self, here: usize, mut handed: T) -> Option<T> {
        let here = here % self.queues.len();
        loop {
            // Read before this thread's queue is locked: one queue lock at a time, so two
            // threads offering at once cannot wait on each other.
            let oldest_elsewhere = self.oldest_elsewhere(here);
            let waiter = {
                let mut queue = self.queue(here);
                let since = live_front(&mut queue).map(|w| w.since);
                match since {
                    Some(since) if oldest_elsewhere.is_none_or(|o| o + MAX_SKEW >= since) => {
                        queue.pop_front()
                    }
                    _ => None,
                }
            };
            let Some(waiter) = waiter else { return Some(handed) };
            // Fails only when the client stopped waiting in between; then the next one.
            match waiter.tx.send(handed) {
                Ok(()) => return None,
                Err(back) => handed = back,
            }
        }
    }

    /// Since when the longest waiter on a thread other than `here` has waited.
    fn oldest_elsewhere(&self, here: usize) -> Option<Instant> {
        (0..self.queues.len())
            .filter(|&t| t != here)
            .filter_map(|t| live_front(&mut self.queue(t)).map(|w| w.since))
            .min()
    }
}

/// The queue's first client still waiting, after dropping the entries of those that stopped.
fn live_front<T>(queue: &mut VecDeque<Waiter<T>>) -> Option<&Waiter<T>> {
    while queue.front().is_some_and(|w| w.tx.is_closed()) {
        queue.pop_front();
    }
    queue.front()
}

/// A client's place in its thread's handoff queue. Dropped without being handed a server
/// (served by the semaphore, timed out, disconnected), it gives back a server handed to it in
/// the meantime, so none is lost.
pub(super) struct Place<'a> {
    pub(super) pool: &'a Pool,
    pub(super) rx: oneshot::Receiver<Handed>,
}

impl Drop for Place<'_> {
    fn drop(&mut self) {
        self.rx.close();
        if let Ok((conn, permit)) = self.rx.try_recv() {
            self.pool.put_back(conn, permit);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_is_handed_when_no_one_waits() {
        let h = Handoffs::<u32>::new(2);
        assert_eq!(h.offer(0, 7), Some(7));
    }

    #[test]
    fn the_longest_waiter_of_the_thread_is_handed_first() {
        let h = Handoffs::<u32>::new(2);
        let t = Instant::now();
        let mut first = h.wait(1, t);
        let mut second = h.wait(1, t + Duration::from_millis(1));
        let mut elsewhere = h.wait(0, t + Duration::from_millis(1));
        assert_eq!(h.offer(1, 1), None);
        assert_eq!(h.offer(1, 2), None);
        assert_eq!(first.try_recv().ok(), Some(1));
        assert_eq!(second.try_recv().ok(), Some(2));
        assert!(elsewhere.try_recv().is_err(), "a server given back on thread 1 went to thread 0");
    }

    #[test]
    fn clients_that_stopped_waiting_are_passed_over() {
        let h = Handoffs::<u32>::new(1);
        let t = Instant::now();
        let gone = h.wait(0, t);
        let mut closed = h.wait(0, t);
        closed.close();
        let mut waiting = h.wait(0, t);
        drop(gone);
        assert_eq!(h.offer(0, 5), None);
        assert_eq!(waiting.try_recv().ok(), Some(5));
        assert_eq!(h.offer(0, 6), Some(6), "the queue still holds a client that left");
    }

    #[test]
    fn a_much_longer_waiter_elsewhere_gets_its_turn_through_the_semaphore() {
        let h = Handoffs::<u32>::new(2);
        let t = Instant::now();
        let _old = h.wait(0, t);
        let mut young = h.wait(1, t + MAX_SKEW * 2);
        assert_eq!(h.offer(1, 3), Some(3), "handed on thread 1 past a longer waiter on thread 0");
        assert!(young.try_recv().is_err());
        // Within the skew, the local waiter is served.
        let h = Handoffs::<u32>::new(2);
        let _old = h.wait(0, t);
        let mut young = h.wait(1, t + MAX_SKEW / 2);
        assert_eq!(h.offer(1, 4), None);
        assert_eq!(young.try_recv().ok(), Some(4));
    }
}
