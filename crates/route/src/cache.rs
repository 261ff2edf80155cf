//! The analysis cache: query text (and parameter types) → `Arc<Analysis>`.
//!
//! Built on `quick_cache`: sharded, a hit takes one shard's read lock and clones an `Arc`,
//! lookups borrow the caller's text (no key is built on a hit), and its Clock-PRO eviction
//! keeps frequently used entries when one-off queries stream through.
//!
//! Both bounds hold at once: every entry weighs at least `cache_bytes / cache_entries`, so
//! the byte budget also caps the entry count.
//!
//! Admission ([`Admission::SecondSight`]) keeps queries with inline literals — each text
//! seen once — from paying for an insertion (a key copy, an eviction) that will never be
//! hit: a miss is stored only if a small bitmap says the same text missed recently. The
//! bitmap (64 bits per cache entry, two bits per key) is cleared once an eighth of it is
//! set, so "recently" means roughly the last `4 × cache_entries` distinct misses and at
//! most 1.6% of one-off queries slip through as false positives.

use std::hash::{BuildHasher, Hash};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use quick_cache::sync::Cache;
use quick_cache::{DefaultHashBuilder, Equivalent, Weighter};

use crate::analysis::Analysis;
use crate::options::Admission;

/// An owned cache key.
#[derive(Debug, Hash, PartialEq, Eq)]
pub(crate) struct Key {
    text: Box<str>,
    oids: Box<[u32]>,
}

/// The same key, borrowed from the caller; hashes identically to [`Key`].
#[derive(Debug, Hash)]
pub(crate) struct KeyRef<'a> {
    text: &'a str,
    oids: &'a [u32],
}

impl Equivalent<Key> for KeyRef<'_> {
    fn equivalent(&self, key: &Key) -> bool {
        *self.text == *key.text && *self.oids == *key.oids
    }
}

impl<'a> KeyRef<'a> {
    pub fn new(text: &'a str, oids: &'a [u32]) -> KeyRef<'a> {
        KeyRef { text, oids }
    }

    fn to_owned_key(&self) -> Key {
        Key { text: self.text.into(), oids: self.oids.into() }
    }
}

/// Per-entry bookkeeping the weight does not otherwise see (the cache's own slot, the
/// `Arc` header, allocator rounding).
const ENTRY_OVERHEAD: u64 = 96;

#[derive(Clone)]
struct ByteWeighter {
    min_weight: u64,
}

impl Weighter<Key, Arc<Analysis>> for ByteWeighter {
    fn weight(&self, key: &Key, val: &Arc<Analysis>) -> u64 {
        let bytes = key.text.len() + key.oids.len() * 4 + val.heap_size();
        (bytes as u64 + ENTRY_OVERHEAD).max(self.min_weight)
    }
}

pub(crate) struct AnalysisCache {
    cache: Cache<Key, Arc<Analysis>, ByteWeighter>,
    doorkeeper: Option<Doorkeeper>,
}

/// What happened to a miss offered to the cache.
pub(crate) enum Stored {
    Inserted,
    NotAdmitted,
}

impl AnalysisCache {
    pub fn new(entries: usize, bytes: usize, admission: Admission) -> AnalysisCache {
        let entries = entries.max(1);
        let weighter = ByteWeighter { min_weight: (bytes / entries) as u64 };
        let cache = Cache::with_weighter(entries, bytes as u64, weighter);
        let doorkeeper = match admission {
            Admission::Always => None,
            Admission::SecondSight => Some(Doorkeeper::new(entries)),
        };
        AnalysisCache { cache, doorkeeper }
    }

    pub fn get(&self, key: &KeyRef<'_>) -> Option<Arc<Analysis>> {
        self.cache.get(key)
    }

    pub fn offer(&self, key: &KeyRef<'_>, analysis: &Arc<Analysis>) -> Stored {
        if let Some(d) = &self.doorkeeper {
            if !d.seen_before(key) {
                return Stored::NotAdmitted;
            }
        }
        self.cache.insert(key.to_owned_key(), Arc::clone(analysis));
        Stored::Inserted
    }

    pub fn len(&self) -> usize {
        self.cache.len()
    }

    pub fn weight(&self) -> u64 {
        self.cache.weight()
    }
}

/// A two-hash bitmap of recently missed keys (a Bloom filter that forgets by clearing).
struct Doorkeeper {
    bits: Box<[AtomicU64]>,
    mask: u64,
    hasher: DefaultHashBuilder,
    /// Bits set since the last clear.
    set: AtomicUsize,
}

impl Doorkeeper {
    fn new(entries: usize) -> Doorkeeper {
        let n_bits = (entries.max(256) * 64).next_power_of_two() as u64;
        let words = (n_bits / 64) as usize;
        Doorkeeper {
            bits: (0..words).map(|_| AtomicU64::new(0)).collect(),
            mask: n_bits - 1,
            hasher: DefaultHashBuilder::default(),
            set: AtomicUsize::new(0),
        }
    }

    /// True if `key` was offered before (probably); otherwise remembers it.
    fn seen_before<K: Hash>(&self, key: &K) -> bool {
        let h = self.hasher.hash_one(key);
        let a = h & self.mask;
        let b = h.rotate_right(32) & self.mask;
        let was_a = self.test_and_set(a);
        let was_b = self.test_and_set(b);
        if was_a && was_b {
            return true;
        }
        let newly = usize::from(!was_a) + usize::from(!was_b);
        let total = self.set.fetch_add(newly, Ordering::Relaxed) + newly;
        if total as u64 > self.mask / 8 {
            self.clear();
        }
        false
    }

    fn test_and_set(&self, bit: u64) -> bool {
        let word = &self.bits[(bit / 64) as usize];
        let m = 1u64 << (bit % 64);
        word.fetch_or(m, Ordering::Relaxed) & m != 0
    }

    fn clear(&self) {
        self.set.store(0, Ordering::Relaxed);
        for w in self.bits.iter() {
            w.store(0, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doorkeeper_admits_on_second_sight_and_forgets() {
        let d = Doorkeeper::new(1024);
        let k = KeyRef::new("SELECT 1", &[]);
        assert!(!d.seen_before(&k));
        assert!(d.seen_before(&k));
        for i in 0..10_000 {
            let text = format!("SELECT {i}");
            d.seen_before(&KeyRef::new(&text, &[]));
        }
        // Cleared at least once since; the key has to be seen twice again.
        let fresh = KeyRef::new("SELECT 'fresh'", &[]);
        assert!(!d.seen_before(&fresh));
    }

    #[test]
    fn borrowed_and_owned_keys_hash_alike() {
        let h = DefaultHashBuilder::default();
        let r = KeyRef::new("SELECT $1", &[23]);
        assert_eq!(h.hash_one(&r), h.hash_one(r.to_owned_key()));
        assert!(r.equivalent(&r.to_owned_key()));
        assert!(!KeyRef::new("SELECT $1", &[20]).equivalent(&r.to_owned_key()));
    }
}
