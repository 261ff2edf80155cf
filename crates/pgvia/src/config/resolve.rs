//! Resolving pool settings through their three layers: user, then database, then `[pool]`.
//!
//! Validation needs to know not only the resolved value but which layer it came from, to
//! point at the key that has to change; hence one place that does both.

use std::time::Duration;

use super::database::Database;
use super::model::{PoolDefaults, PoolSettings, User};

/// The pool keys one layer sets, plus where that layer sits in the file.
#[derive(Debug, Clone)]
pub(crate) struct Layer {
    /// `pool`, `databases[2]` or `users[0]`.
    pub path: String,
    pub pool_size: Option<u32>,
    pub min_idle: Option<u32>,
    pub connect_timeout: Option<Duration>,
    pub checkout_timeout: Option<Duration>,
}

impl Layer {
    pub(crate) fn pool(p: &PoolDefaults) -> Layer {
        Layer {
            path: "pool".to_owned(),
            pool_size: Some(p.pool_size),
            min_idle: Some(p.min_idle),
            connect_timeout: Some(p.connect_timeout),
            checkout_timeout: Some(p.checkout_timeout),
        }
    }

    pub(crate) fn database(index: usize, d: &Database) -> Layer {
        Layer {
            path: format!("databases[{index}]"),
            pool_size: d.pool_size,
            min_idle: d.min_idle,
            connect_timeout: d.connect_timeout,
            checkout_timeout: d.checkout_timeout,
        }
    }

    pub(crate) fn user(index: usize, u: &User) -> Layer {
        Layer {
            path: format!("users[{index}]"),
            pool_size: u.pool_size,
            min_idle: u.min_idle,
            connect_timeout: u.connect_timeout,
            checkout_timeout: u.checkout_timeout,
        }
    }
}

/// Layers from most to least specific, absent ones as `None`.
pub(crate) struct Stack<'a>(pub [Option<&'a Layer>; 3]);

impl<'a> Stack<'a> {
    /// The first layer that sets a key, and the value it sets.
    pub(crate) fn pick<T: Copy>(&self, key: impl Fn(&Layer) -> Option<T>) -> Option<(T, &'a Layer)> {
        self.0.iter().flatten().find_map(|layer| key(layer).map(|v| (v, *layer)))
    }
}

/// Resolves the settings of the (database, user) pool.
pub(crate) fn pool_settings(pool: &PoolDefaults, db: &Database, user: &User) -> PoolSettings {
    fn or<T>(user: Option<T>, db: Option<T>, pool: T) -> T {
        user.or(db).unwrap_or(pool)
    }
    PoolSettings {
        pool_mode: or(user.pool_mode, db.pool_mode, pool.pool_mode),
        pool_size: or(user.pool_size, db.pool_size, pool.pool_size),
        min_idle: or(user.min_idle, db.min_idle, pool.min_idle),
        connect_timeout: or(user.connect_timeout, db.connect_timeout, pool.connect_timeout),
        checkout_timeout: or(user.checkout_timeout, db.checkout_timeout, pool.checkout_timeout),
        idle_timeout: or(user.idle_timeout, db.idle_timeout, pool.idle_timeout),
        max_lifetime: or(user.max_lifetime, db.max_lifetime, pool.max_lifetime),
        client_idle_timeout: or(user.client_idle_timeout, db.client_idle_timeout, pool.client_idle_timeout),
        idle_in_transaction_timeout: or(
            user.idle_in_transaction_timeout,
            db.idle_in_transaction_timeout,
            pool.idle_in_transaction_timeout,
        ),
        query_timeout: or(user.query_timeout, db.query_timeout, pool.query_timeout),
        max_prepared_statements: or(
            user.max_prepared_statements,
            db.max_prepared_statements,
            pool.max_prepared_statements,
        ),
    }
}
