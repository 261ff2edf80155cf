//! Bookkeeping for pools made on demand: those of users found by `[auth_query]`, which come
//! and go (short-lived, Vault-style roles) and must not accumulate pools.
//!
//! This only remembers, per such user, when it was last seen with a client; deciding which
//! users' pools to close (idle for `pool_idle_timeout`, or the least recently used idle ones
//! when `max_pools` is reached) is a pure function of that and the current client counts,
//! and closing them is the caller's (`auth_query::pools`).

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Users with on-demand pools, by name: when each was last seen with a client.
#[derive(Debug, Default)]
pub struct OnDemandUsers {
    last_seen: Mutex<HashMap<String, Instant>>,
}

impl OnDemandUsers {
    /// A client of `user` logged in now.
    pub fn seen(&self, user: &str, now: Instant) {
        self.lock().insert(user.to_owned(), now);
    }

    /// Users whose pools are to close now: those without clients (`clients(name) == 0`)
    /// last seen `idle_timeout` ago or more. A user with clients is seen now.
    pub fn idle(&self, clients: impl Fn(&str) -> usize, idle_timeout: Duration, now: Instant) -> Vec<String> {
        let mut map = self.lock();
        let mut out = Vec::new();
        for (name, seen) in map.iter_mut() {
            if clients(name) > 0 {
                *seen = now;
            } else if now.duration_since(*seen) >= idle_timeout {
                out.push(name.clone());
            }
        }
        out.sort();
        out
    }

    /// Up to `n` users without clients, least recently seen first, whatever their idle
    /// time: room for a new user when the cap is reached. `except` is never chosen.
    pub fn least_recent_idle(&self, clients: impl Fn(&str) -> usize, n: usize, except: &str) -> Vec<String> {
        let map = self.lock();
        let mut idle: Vec<(&String, &Instant)> =
            map.iter().filter(|(name, _)| name.as_str() != except && clients(name) == 0).collect();
        idle.sort_by_key(|(name, seen)| (**seen, name.as_str()));
        idle.into_iter().take(n).map(|(name, _)| name.clone()).collect()
    }

    /// The users' pools are closed: forget them.
    pub fn forget(&self, users: &[String]) {
        let mut map = self.lock();
        for u in users {
            map.remove(u);
        }
    }

    pub fn contains(&self, user: &str) -> bool {
        self.lock().contains_key(user)
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Instant>> {
        self.last_seen.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_users_and_the_least_recent_ones() {
        let users = OnDemandUsers::default();
        let t0 = Instant::now();
        users.seen("a", t0);
        users.seen("b", t0 + Duration::from_secs(1));
        users.seen("c", t0 + Duration::from_secs(2));
        let clients = |n: &str| usize::from(n == "b");
        let later = t0 + Duration::from_secs(10);
        assert_eq!(users.idle(clients, Duration::from_secs(9), later), ["a"]);
        assert_eq!(users.idle(clients, Duration::from_secs(5), later), ["a", "c"]);
        // b has a client: never chosen, and its idle time starts again.
        assert_eq!(users.least_recent_idle(clients, 5, "x"), ["a", "c"]);
        assert_eq!(users.least_recent_idle(clients, 1, "a"), ["c"]);
        assert!(users.idle(|_| 0, Duration::from_secs(5), later).iter().all(|n| n != "b"));
        users.forget(&["a".to_owned(), "c".to_owned()]);
        assert_eq!(users.len(), 1);
        assert!(users.contains("b"));
    }
}
