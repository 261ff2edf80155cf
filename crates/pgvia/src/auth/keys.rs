//! ClientKeys recovered from clients' SCRAM proofs, so that pgvia can log in to PostgreSQL
//! as a user configured with nothing but a SCRAM verifier (SCRAM pass-through).
//!
//! A ClientKey is as good as the password for logging in wherever the same verifier is
//! stored, so it lives in memory only, in one [`KeySlot`] per user, and only while that user
//! has pools: every pool's server address holds the slot (an `Arc`), [`ClientKeys`] holds it
//! too so that the login that learns a key and the pool made just after find the same slot,
//! and [`ClientKeys::sweep`] forgets a slot no pool holds any more. The key bytes are
//! overwritten when the slot is dropped.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use wire::scram::ScramVerifier;

/// How long a key learned by a login is kept without a pool holding it: more than the time
/// between a client's authentication and its session making the user's pools.
const UNCLAIMED_GRACE: Duration = Duration::from_secs(10);

/// One user's ClientKey, once a client has logged in with SCRAM.
#[derive(Default)]
pub struct KeySlot {
    learned: Mutex<Option<Learned>>,
}

struct Learned {
    key: [u8; 32],
    at: Instant,
}

impl Drop for Learned {
    fn drop(&mut self) {
        self.key.fill(0);
        // Keeps the compiler from dropping the overwrite of memory about to be freed.
        std::hint::black_box(&self.key);
    }
}

impl KeySlot {
    /// The key, if one was learned and it belongs to `verifier` (H(ClientKey) = StoredKey):
    /// after a reload changed the verifier, an old key is useless until the next login.
    pub fn key_for(&self, verifier: &ScramVerifier) -> Option<[u8; 32]> {
        let learned = self.learned.lock().unwrap_or_else(PoisonError::into_inner);
        let key = learned.as_ref()?.key;
        verifier.is_client_key(&key).then_some(key)
    }

    fn set(&self, key: [u8; 32]) {
        *self.learned.lock().unwrap_or_else(PoisonError::into_inner) =
            Some(Learned { key, at: Instant::now() });
    }

    /// Learned within the grace period, so a pool may be about to claim it.
    fn is_fresh(&self, now: Instant) -> bool {
        self.learned
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .is_some_and(|l| now.duration_since(l.at) < UNCLAIMED_GRACE)
    }
}

impl std::fmt::Debug for KeySlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KeySlot(..)")
    }
}

/// Every user's [`KeySlot`], by user name.
#[derive(Debug, Default)]
pub struct ClientKeys {
    slots: Mutex<HashMap<String, Arc<KeySlot>>>,
}

impl ClientKeys {
    /// The slot of `user`, made empty if there is none: for a pool being built.
    pub fn slot(&self, user: &str) -> Arc<KeySlot> {
        self.lock().entry(user.to_owned()).or_default().clone()
    }

    /// Keeps the ClientKey a client of `user` just proved it has. Called for every SCRAM
    /// login of a user whose server login depends on it; the latest key wins (after a
    /// password change, the latest is the one that works).
    pub fn learn(&self, user: &str, key: [u8; 32]) {
        let mut slots = self.lock();
        Self::sweep_locked(&mut slots, Instant::now());
        slots.entry(user.to_owned()).or_default().set(key);
    }

    /// Forgets the slots no pool holds (only this map does), unless a login put a key there
    /// moments ago. Run at each login and by the periodic maintenance.
    pub fn sweep(&self) {
        Self::sweep_locked(&mut self.lock(), Instant::now());
    }

    /// Forgets the slots of `users`, whose pools are being closed (`[auth_query]` users
    /// retired when idle): the key goes when the last of those pools does.
    pub fn forget(&self, users: &[String]) {
        let mut slots = self.lock();
        for u in users {
            slots.remove(u);
        }
    }

    /// Users with a slot (with a key or waiting for one).
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether a key for `user` is held.
    pub fn holds_key(&self, user: &str) -> bool {
        self.lock()
            .get(user)
            .is_some_and(|s| s.learned.lock().unwrap_or_else(PoisonError::into_inner).is_some())
    }

    fn sweep_locked(slots: &mut HashMap<String, Arc<KeySlot>>, now: Instant) {
        slots.retain(|_, slot| Arc::strong_count(slot) > 1 || slot.is_fresh(now));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<KeySlot>>> {
        self.slots.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// A verifier whose ClientKey is `key`: the StoredKey is all `key_for` reads.
    fn verifier_for(key: [u8; 32]) -> ScramVerifier {
        use sha2::Digest;
        let mut v = ScramVerifier::from_password("x", b"salt", 1);
        v.stored_key = sha2::Sha256::digest(key).into();
        v
    }

    #[test]
    fn keys_live_while_pools_hold_the_slot() {
        let keys = ClientKeys::default();
        let pool_slot = keys.slot("alice");
        keys.learn("alice", [7; 32]);
        assert_eq!(pool_slot.key_for(&verifier_for([7; 32])), Some([7; 32]));
        // Another verifier (a reload changed it): the old key is not offered.
        assert_eq!(pool_slot.key_for(&verifier_for([8; 32])), None);
        keys.sweep();
        assert!(keys.holds_key("alice"));
        drop(pool_slot);
        // Fresh keys wait for their pool; an empty slot without a pool goes at once.
        keys.sweep();
        assert!(keys.holds_key("alice"));
        let _ = keys.slot("bob");
        keys.sweep();
        assert_eq!(keys.len(), 1);
        let later = Instant::now() + UNCLAIMED_GRACE + Duration::from_secs(1);
        ClientKeys::sweep_locked(&mut keys.lock(), later);
        assert!(keys.is_empty());
    }
}
