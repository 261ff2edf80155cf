//! Traffic counters: what `SHOW STATS` and `/metrics` report.
//!
//! Each client counts its own traffic (the session's meter adds to the client's own
//! [`Counters`], a cache line no other session writes), and a client's counts are folded
//! into its pool's totals when it leaves. A read sums the pool totals and the live clients:
//! the hot path never writes a location another session writes.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Traffic counters of one client, or the totals of a pool.
///
/// Not cache-line aligned: a client's counters are written by its own session only, and a
/// pool's totals once per client that leaves, so there is little false sharing to avoid,
/// while the alignment made every client's registry entry a 128-byte-aligned allocation of
/// 640 bytes, most of it padding, that an idle client kept (issue 19).
#[derive(Debug, Default)]
pub struct Counters {
    /// Transactions ended (each ReadyForQuery with status idle).
    pub xacts: AtomicU64,
    /// Queries answered (each ReadyForQuery).
    pub queries: AtomicU64,
    /// Bytes read from the client.
    pub received: AtomicU64,
    /// Bytes read from the server (and passed to the client).
    pub sent: AtomicU64,
    /// Microseconds spent in transactions.
    pub xact_us: AtomicU64,
    /// Microseconds spent in queries.
    pub query_us: AtomicU64,
    /// Microseconds clients waited for a server.
    pub wait_us: AtomicU64,
    /// Servers handed to clients (the waits `wait_us` adds up).
    pub waits: AtomicU64,
    /// Errors (ErrorResponse) the server sent, by SQLSTATE class; see [`error_class_index`].
    pub errors: ErrorCounters,
}

/// Errors by SQLSTATE class, allocated at the first one: most clients never see an error, and
/// inline the twelve counters were 96 bytes of every client's registry entry (issue 19).
#[derive(Debug, Default)]
pub struct ErrorCounters(std::sync::OnceLock<Box<[AtomicU64; ERROR_CLASSES.len()]>>);

impl ErrorCounters {
    /// Adds `n` errors of class `index` ([`error_class_index`]).
    pub fn add(&self, index: usize, n: u64) {
        if let Some(counter) = self.0.get_or_init(Box::default).get(index) {
            counter.fetch_add(n, Ordering::Relaxed);
        }
    }

    pub fn load(&self) -> [u64; ERROR_CLASSES.len()] {
        match self.0.get() {
            Some(counters) => std::array::from_fn(|i| counters[i].load(Ordering::Relaxed)),
            None => [0; ERROR_CLASSES.len()],
        }
    }
}

/// SQLSTATE classes counted separately; everything else is "other".
pub const ERROR_CLASSES: [&str; 12] =
    ["08", "0A", "22", "23", "25", "28", "3D", "40", "42", "53", "57", "other"];

pub fn error_class_index(code: &[u8]) -> usize {
    let class = code.get(..2).unwrap_or_default();
    ERROR_CLASSES.iter().position(|c| c.as_bytes() == class).unwrap_or(ERROR_CLASSES.len() - 1)
}

/// A plain copy of [`Counters`], for arithmetic.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Totals {
    pub xacts: u64,
    pub queries: u64,
    pub received: u64,
    pub sent: u64,
    pub xact_us: u64,
    pub query_us: u64,
    pub wait_us: u64,
    pub waits: u64,
    pub errors: [u64; ERROR_CLASSES.len()],
}

impl Counters {
    /// A client waited `wait` for a server.
    pub fn add_wait(&self, wait: Duration) {
        self.wait_us.fetch_add(wait.as_micros() as u64, Ordering::Relaxed);
        self.waits.fetch_add(1, Ordering::Relaxed);
    }

    pub fn load(&self) -> Totals {
        let r = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Totals {
            xacts: r(&self.xacts),
            queries: r(&self.queries),
            received: r(&self.received),
            sent: r(&self.sent),
            xact_us: r(&self.xact_us),
            query_us: r(&self.query_us),
            wait_us: r(&self.wait_us),
            waits: r(&self.waits),
            errors: self.errors.load(),
        }
    }

    /// Adds `t` (a departing client's counts) to these totals.
    pub fn absorb(&self, t: &Totals) {
        let add = |a: &AtomicU64, v: u64| {
            if v != 0 {
                a.fetch_add(v, Ordering::Relaxed);
            }
        };
        add(&self.xacts, t.xacts);
        add(&self.queries, t.queries);
        add(&self.received, t.received);
        add(&self.sent, t.sent);
        add(&self.xact_us, t.xact_us);
        add(&self.query_us, t.query_us);
        add(&self.wait_us, t.wait_us);
        add(&self.waits, t.waits);
        for (i, v) in t.errors.into_iter().enumerate() {
            if v != 0 {
                self.errors.add(i, v);
            }
        }
    }
}

impl Totals {
    pub fn add(&mut self, o: &Totals) {
        self.xacts += o.xacts;
        self.queries += o.queries;
        self.received += o.received;
        self.sent += o.sent;
        self.xact_us += o.xact_us;
        self.query_us += o.query_us;
        self.wait_us += o.wait_us;
        self.waits += o.waits;
        for (a, b) in self.errors.iter_mut().zip(o.errors) {
            *a += b;
        }
    }

    /// `self - earlier`, saturating (a reload may retire a pool's counts).
    pub fn since(&self, earlier: &Totals) -> Totals {
        Totals {
            xacts: self.xacts.saturating_sub(earlier.xacts),
            queries: self.queries.saturating_sub(earlier.queries),
            received: self.received.saturating_sub(earlier.received),
            sent: self.sent.saturating_sub(earlier.sent),
            xact_us: self.xact_us.saturating_sub(earlier.xact_us),
            query_us: self.query_us.saturating_sub(earlier.query_us),
            wait_us: self.wait_us.saturating_sub(earlier.wait_us),
            waits: self.waits.saturating_sub(earlier.waits),
            errors: std::array::from_fn(|i| self.errors[i].saturating_sub(earlier.errors[i])),
        }
    }
}

/// The last two samples of per-database totals, for `SHOW STATS_AVERAGES` (rates over the
/// last sampling period, as PgBouncer's `stats_period`).
#[derive(Debug, Default)]
pub struct History {
    samples: std::sync::Mutex<[Option<Sample>; 2]>,
}

/// Per-database totals at one instant.
type Sample = (Instant, BTreeMap<String, Totals>);

/// How often [`History`] is sampled.
pub const STATS_PERIOD: Duration = Duration::from_secs(15);

impl History {
    pub fn push(&self, totals: BTreeMap<String, Totals>) {
        let mut s = self.samples.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        s[0] = s[1].take();
        s[1] = Some((Instant::now(), totals));
    }

    /// Per database, what happened between the last two samples and how many seconds apart
    /// they were. Empty until two samples exist.
    pub fn last_period(&self) -> (BTreeMap<String, Totals>, f64) {
        let s = self.samples.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let (Some((t0, a)), Some((t1, b))) = (&s[0], &s[1]) else { return (BTreeMap::new(), 0.0) };
        let secs = t1.duration_since(*t0).as_secs_f64();
        let deltas = b
            .iter()
            .map(|(db, now)| (db.clone(), now.since(&a.get(db).copied().unwrap_or_default())))
            .collect();
        (deltas, secs)
    }
}

/// Upper bounds, in seconds, of the wait-time histogram buckets.
pub const WAIT_BUCKETS: [f64; 10] = [0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0];

/// How long clients waited for a server: a histogram updated once per checkout.
#[derive(Debug, Default)]
pub struct WaitHistogram {
    /// Counts per bucket of [`WAIT_BUCKETS`], plus one for +Inf (not cumulative).
    buckets: [AtomicU64; WAIT_BUCKETS.len() + 1],
    sum_us: AtomicU64,
}

impl WaitHistogram {
    pub fn observe(&self, waited: Duration) {
        let secs = waited.as_secs_f64();
        let i = WAIT_BUCKETS.iter().position(|b| secs <= *b).unwrap_or(WAIT_BUCKETS.len());
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
        self.sum_us.fetch_add(waited.as_micros() as u64, Ordering::Relaxed);
    }

    /// (sum in seconds, count, buckets as (upper bound, count in that bucket alone)), the
    /// form the OpenMetrics encoder takes (it accumulates). The count is the buckets' sum, so
    /// the two agree even while checkouts happen.
    pub fn snapshot(&self) -> (f64, u64, Vec<(f64, u64)>) {
        let out: Vec<(f64, u64)> = self
            .buckets
            .iter()
            .enumerate()
            .map(|(i, b)| (WAIT_BUCKETS.get(i).copied().unwrap_or(f64::INFINITY), b.load(Ordering::Relaxed)))
            .collect();
        let count = out.iter().map(|b| b.1).sum();
        let sum = self.sum_us.load(Ordering::Relaxed) as f64 / 1e6;
        (sum, count, out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_classes() {
        assert_eq!(ERROR_CLASSES[error_class_index(b"42P01")], "42");
        assert_eq!(ERROR_CLASSES[error_class_index(b"XX000")], "other");
        assert_eq!(ERROR_CLASSES[error_class_index(b"")], "other");
    }

    #[test]
    fn histogram_buckets() {
        let h = WaitHistogram::default();
        h.observe(Duration::from_micros(50));
        h.observe(Duration::from_millis(2));
        h.observe(Duration::from_secs(10));
        let (_, count, buckets) = h.snapshot();
        assert_eq!(count, 3);
        assert_eq!(buckets[0], (0.0001, 1));
        assert_eq!(buckets[3], (0.005, 1));
        assert_eq!(buckets.last().copied(), Some((f64::INFINITY, 1)));
    }
}
