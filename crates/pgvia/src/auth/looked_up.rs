//! Secrets found by `[auth_query]`, cached for `cache_ttl` so that a login costs no query
//! while the entry is fresh, and a password changed in PostgreSQL takes over once it is not.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::Secret;

/// A role's stored secret as the query returned it, and parsed.
#[derive(Debug)]
pub struct LookedUp {
    /// The text (`SCRAM-SHA-256$...` or `md5...`), which becomes the user's `password`.
    pub stored: String,
    pub secret: Arc<Secret>,
}

/// What a lookup found: a role's secret, or that there is no such role (cached as well, so
/// probing for names costs PostgreSQL one query per name and TTL).
pub type Found = Option<Arc<LookedUp>>;

/// Entries kept before expired ones are purged.
const PURGE_AT: usize = 16_384;

/// Looked-up secrets by user name.
#[derive(Debug, Default)]
pub struct SecretCache {
    entries: Mutex<HashMap<String, (Found, Instant)>>,
}

impl SecretCache {
    /// The entry for `user` if it was fetched less than `ttl` ago.
    pub fn get(&self, user: &str, ttl: Duration, now: Instant) -> Option<Found> {
        let entries = self.lock();
        let (found, at) = entries.get(user)?;
        (now.duration_since(*at) < ttl).then(|| found.clone())
    }

    pub fn put(&self, user: &str, found: Found, ttl: Duration, now: Instant) {
        let mut entries = self.lock();
        if entries.len() >= PURGE_AT {
            entries.retain(|_, (_, at)| now.duration_since(*at) < ttl);
            // Still full of fresh entries (a flood of names): start over rather than grow.
            if entries.len() >= PURGE_AT {
                entries.clear();
            }
        }
        entries.insert(user.to_owned(), (found, now));
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Found, Instant)>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_expire_after_the_ttl() {
        let cache = SecretCache::default();
        let t0 = Instant::now();
        let ttl = Duration::from_secs(10);
        cache.put("ghost", None, ttl, t0);
        assert!(matches!(cache.get("ghost", ttl, t0 + Duration::from_secs(9)), Some(None)));
        assert!(cache.get("ghost", ttl, t0 + ttl).is_none());
        assert!(cache.get("other", ttl, t0).is_none());
    }
}
