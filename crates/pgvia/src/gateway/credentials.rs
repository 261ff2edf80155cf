//! Who an HTTP request is: from `Neon-Connection-String`, HTTP Basic, or a configured
//! bearer token; checked against pgvia's own users and secrets as a wire login is.
//!
//! Every failure is the same 401, whether the user exists or not (an unknown user's
//! password is checked against a stand-in SCRAM verifier, so it costs the same). A cleartext password
//! checked against a SCRAM verifier costs PBKDF2, run on the blocking pool behind the
//! process-wide hashing permit (as wire logins do); a password verified once is remembered
//! for `gateway.credential_cache_ttl` as a SHA-256 digest, tied to the secret it was
//! checked against (a reload that changes the secret forgets it).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use base64::Engine as _;
use hyper::header::{HeaderMap, AUTHORIZATION};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::app::App;
use crate::auth::{AuthMethod, Secret};
use crate::net::Carrier;
use crate::session::transport::{check_method, Transport};
use crate::session::SessionError;

/// Remembered verifications past which the cache starts over (bounds its memory).
const CACHE_ENTRIES: usize = 10_000;

/// How the request proved who it is.
pub enum Proof {
    Password(String),
    /// A configured bearer token (already matched).
    Token,
}

/// A request's claimed identity.
pub struct Credentials {
    pub user: String,
    pub database: String,
    pub proof: Proof,
    /// `application_name` from the connection string, if given.
    pub application_name: Option<String>,
}

/// The request is not authenticated: 401, and why (for the log only).
#[derive(Debug)]
pub struct Denied(pub &'static str);

/// Why [`Verifier::check`] let a request not in.
#[derive(Debug)]
pub enum Refused {
    /// 401, one answer whatever the reason (which is for the log only).
    Unauthenticated(Denied),
    /// Refused by the rules that tie a login to TLS (`allow_cleartext_without_tls`), the same
    /// rules and words as for a wire login.
    Transport(SessionError),
}

impl From<Denied> for Refused {
    fn from(d: Denied) -> Self {
        Refused::Unauthenticated(d)
    }
}

/// Reads the credentials from the headers: `Neon-Connection-String` first, then
/// `Authorization` (Basic, with the database from `Pgvia-Database` or the user's name; or
/// Bearer, one of `gateway.tokens`).
pub fn from_headers(headers: &HeaderMap, app: &App) -> Result<Credentials, Denied> {
    if let Some(cs) = headers.get("neon-connection-string") {
        return connection_string(cs.to_str().map_err(|_| Denied("connection string is not text"))?);
    }
    let auth = headers.get(AUTHORIZATION).ok_or(Denied("no credentials"))?;
    let auth = auth.to_str().map_err(|_| Denied("Authorization is not text"))?;
    if let Some(b64) = auth.strip_prefix("Basic ") {
        let raw = base64::engine::general_purpose::STANDARD
            .decode(b64.trim())
            .map_err(|_| Denied("Basic credentials are not base64"))?;
        let raw = String::from_utf8(raw).map_err(|_| Denied("Basic credentials are not UTF-8"))?;
        let (user, password) = raw.split_once(':').ok_or(Denied("Basic credentials lack a ':'"))?;
        let database = match headers.get("pgvia-database") {
            Some(d) => d.to_str().map_err(|_| Denied("Pgvia-Database is not text"))?.to_owned(),
            None => user.to_owned(),
        };
        return Ok(Credentials {
            user: user.to_owned(),
            database,
            proof: Proof::Password(password.to_owned()),
            application_name: None,
        });
    }
    if let Some(token) = auth.strip_prefix("Bearer ") {
        let config = app.config();
        let token = token.trim().as_bytes();
        // Every token is compared, in constant time, so timing does not say which matched.
        let mut found = None;
        for t in &config.gateway.tokens {
            if bool::from(t.token.as_bytes().ct_eq(token)) {
                found = Some((t.user.clone(), t.database.clone()));
            }
        }
        let (user, database) = found.ok_or(Denied("unknown bearer token"))?;
        return Ok(Credentials { user, database, proof: Proof::Token, application_name: None });
    }
    Err(Denied("unsupported Authorization scheme"))
}

/// `postgres[ql]://user:password@host[:port]/database[?application_name=...]`.
fn connection_string(s: &str) -> Result<Credentials, Denied> {
    let rest = s
        .strip_prefix("postgresql://")
        .or_else(|| s.strip_prefix("postgres://"))
        .ok_or(Denied("connection string is not a postgresql:// URL"))?;
    let (authority, path) = rest.split_once('/').ok_or(Denied("connection string names no database"))?;
    let (userinfo, _host) = authority.rsplit_once('@').ok_or(Denied("connection string names no user"))?;
    let (user, password) = userinfo.split_once(':').ok_or(Denied("connection string has no password"))?;
    let (database, query) = path.split_once('?').unwrap_or((path, ""));
    let application_name = query
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == "application_name")
        .map(|(_, v)| decode(v))
        .transpose()?;
    let user = decode(user)?;
    if user.is_empty() || database.is_empty() {
        return Err(Denied("connection string lacks a user or database"));
    }
    Ok(Credentials {
        user,
        database: decode(database)?,
        proof: Proof::Password(decode(password)?),
        application_name,
    })
}

/// Percent-decoding (`%40` → `@`; `+` is left alone, as in a URL's path).
fn decode(s: &str) -> Result<String, Denied> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = b.get(i + 1..i + 3).ok_or(Denied("bad percent-encoding"))?;
            let hex = std::str::from_utf8(hex).map_err(|_| Denied("bad percent-encoding"))?;
            out.push(u8::from_str_radix(hex, 16).map_err(|_| Denied("bad percent-encoding"))?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| Denied("connection string is not UTF-8"))
}

/// A verification remembered: the password's digest and the secret it matched.
struct Remembered {
    digest: [u8; 32],
    secret: Arc<Secret>,
    at: Instant,
}

/// Checks credentials, remembering recent successes.
pub struct Verifier {
    cache: Mutex<HashMap<String, Remembered>>,
    /// Salts the stand-in verifier an unknown user's password is checked against, so that
    /// it costs what a real SCRAM check costs and timing does not tell the two apart.
    mock_key: [u8; 32],
}

impl Default for Verifier {
    fn default() -> Self {
        Verifier { cache: Mutex::default(), mock_key: rand::random() }
    }
}

impl Verifier {
    /// Whether `c`, a request carried over `carrier` (which `tls_mode` let through), may
    /// log in, by the rules of a wire login (`session::transport`) for the user's
    /// authentication method: `trust` needs only a known user; `cert` cannot be used over HTTP (no client
    /// certificate); every other method checks the password against the stored secret, and,
    /// as the password (or a token) crosses the connection in clear, counts as a `cleartext`
    /// login for `allow_cleartext_without_tls`.
    pub async fn check(&self, app: &App, c: &Credentials, carrier: Carrier) -> Result<(), Refused> {
        let transport = Transport::http(carrier);
        let (method, known, ttl) = {
            let config = app.config();
            let user = config.user(&c.user);
            let method = user.map_or(config.general.auth_method, |u| config.auth_method(u));
            let shown_in_clear = match (&c.proof, method) {
                (Proof::Password(_), AuthMethod::Trust | AuthMethod::Cert) => method,
                _ => AuthMethod::Cleartext,
            };
            match check_method(&config.general, shown_in_clear, user.is_some(), &c.user, &transport) {
                Ok(_) => {}
                Err(SessionError::Auth { .. }) => {
                    return Err(Denied("certificate logins cannot be used over HTTP").into())
                }
                Err(e) => return Err(Refused::Transport(e)),
            }
            (method, user.is_some(), config.gateway.credential_cache_ttl)
        };
        let password = match &c.proof {
            Proof::Token if known => return Ok(()),
            Proof::Token => return Err(Denied("the token's user is not configured").into()),
            Proof::Password(p) => p,
        };
        if method == AuthMethod::Trust && known {
            return Ok(());
        }
        let (secret, real) = match app.secret(&c.user).filter(|_| known) {
            Some(s) => (s, true),
            None => {
                (Arc::new(Secret::Scram(wire::scram::ScramVerifier::mock(&c.user, &self.mock_key))), false)
            }
        };
        let digest: [u8; 32] = Sha256::digest(password.as_bytes()).into();
        if real && !ttl.is_zero() {
            let cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(r) = cache.get(&c.user) {
                if r.at.elapsed() < ttl
                    && Arc::ptr_eq(&r.secret, &secret)
                    && bool::from(r.digest.ct_eq(&digest))
                {
                    return Ok(());
                }
            }
        }
        let ok = if matches!(*secret, Secret::Scram(_)) {
            // PBKDF2: off the async workers, a few at a time, as for wire logins.
            let permit = app.admission.hashing_permit().await;
            let (user, password, s) = (c.user.clone(), password.clone(), secret.clone());
            let ok = tokio::task::spawn_blocking(move || s.verify_plaintext(&user, &password))
                .await
                .unwrap_or(false);
            drop(permit);
            ok
        } else {
            secret.verify_plaintext(&c.user, password)
        };
        if !real {
            return Err(Denied("unknown user").into());
        }
        if !ok {
            return Err(Denied("wrong password").into());
        }
        if !ttl.is_zero() {
            let mut cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
            if cache.len() >= CACHE_ENTRIES {
                cache.clear();
            }
            cache.insert(c.user.clone(), Remembered { digest, secret, at: Instant::now() });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_strings() {
        let c = connection_string(
            "postgresql://app:p%40ss@localhost:4444/my%20db?sslmode=require&application_name=x",
        )
        .unwrap_or_else(|e| panic!("{}", e.0));
        assert_eq!((c.user.as_str(), c.database.as_str()), ("app", "my db"));
        assert!(matches!(c.proof, Proof::Password(ref p) if p == "p@ss"));
        assert_eq!(c.application_name.as_deref(), Some("x"));
        assert!(connection_string("mysql://a:b@h/d").is_err());
        assert!(connection_string("postgresql://a@h/d").is_err());
    }
}
