//! `[auth_query]` at run time: a login by a name the file does not list looks the role's
//! stored secret up in PostgreSQL (through a pool of the configured login user), caches it
//! for `cache_ttl`, and, once the client is authenticated, puts the user into the
//! configuration in use so that its pools are made like any user's (`pools.rs` closes them
//! again when idle, under `max_pools`).
//!
//! Placed above `app` (it drives pools and the snapshot) and below the session, whose login
//! calls [`lookup`] and [`pools::admit`].

pub mod pools;

use std::sync::Arc;
use std::time::Instant;

use thiserror::Error;

use crate::app::App;
use crate::auth::{Found, LookedUp, Secret};
use crate::config::PasswordFormat;
use crate::pool::PoolError;
use crate::server::{Rows, ServerError};

/// Why a role could not be looked up (PostgreSQL unreachable, the query failing).
#[derive(Debug, Error)]
pub enum LookupError {
    #[error("auth_query could not get a server: {0}")]
    Pool(#[from] PoolError),
    #[error("auth_query failed: {0}")]
    Query(#[from] ServerError),
}

/// The stored secret of `user`, from the cache while it is fresh, else from PostgreSQL.
/// `Ok(None)`: no such role (or one without a usable secret); that is cached too.
pub async fn lookup(app: &App, user: &str) -> Result<Found, LookupError> {
    let (aq, pool) = {
        let config = app.config();
        let Some(aq) = config.auth_query.clone() else { return Ok(None) };
        if let Some(found) = app.looked_up.get(user, aq.cache_ttl, Instant::now()) {
            return Ok(found);
        }
        // Validation guarantees both entries.
        let (Some(db), Some(login)) = (config.database(&aq.database), config.user(&aq.user)) else {
            return Ok(None);
        };
        (aq.clone(), app.group_for(db, login).home())
    };
    let mut checkout = pool.checkout(None).await?;
    // On error the checkout is dropped, which closes that server: it may be out of step.
    let rows = checkout.conn().query_rows(&aq.query_for(user), aq.timeout).await?;
    checkout.give_back_idle();
    let found = read_row(user, rows).map(Arc::new);
    app.looked_up.put(user, found.clone(), aq.cache_ttl, Instant::now());
    Ok(found)
}

/// The secret in the query's first row: (name, secret), the name being `user`'s. A
/// plaintext secret is refused: `pg_authid` never holds one, and deriving a verifier from it
/// would cost key stretching on every lookup.
fn read_row(user: &str, rows: Rows) -> Option<LookedUp> {
    let row = rows.into_iter().next()?;
    let [Some(name), Some(stored)] = row.as_slice() else { return None };
    if name != user {
        tracing::warn!(user, returned = %name, "auth_query returned another role's row; the user cannot log in");
        return None;
    }
    if PasswordFormat::of(stored) == PasswordFormat::Plaintext {
        tracing::warn!(user, "auth_query returned a secret that is neither a SCRAM verifier nor an MD5 hash; the user cannot log in");
        return None;
    }
    match Secret::parse(stored) {
        Ok(secret) => Some(LookedUp { stored: stored.clone(), secret: Arc::new(secret) }),
        Err(e) => {
            tracing::warn!(user, error = %e, "auth_query returned an unusable secret; the user cannot log in");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(name: &str, secret: Option<&str>) -> Rows {
        vec![vec![Some(name.to_owned()), secret.map(str::to_owned)]]
    }

    #[test]
    fn reads_the_first_row() {
        let md5 = "md5".to_owned() + &"a".repeat(32);
        assert!(read_row("bob", row("bob", Some(&md5))).is_some());
        assert!(read_row("bob", row("bob", None)).is_none());
        assert!(read_row("bob", row("alice", Some(&md5))).is_none());
        assert!(read_row("bob", row("bob", Some("plaintext"))).is_none());
        assert!(read_row("bob", row("bob", Some("SCRAM-SHA-256$broken"))).is_none());
        assert!(read_row("bob", Vec::new()).is_none());
    }
}
