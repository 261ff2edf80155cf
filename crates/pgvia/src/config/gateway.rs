//! `[gateway]`: SQL over HTTP (`POST /sql`, Neon's format) and the wire protocol over
//! WebSocket (`/v2`), on a listener of their own.
//!
//! Off unless `listen` is set. Each key but `listen` and `tls` is read per request from the
//! current snapshot, so a reload applies it to the next request.

use std::time::Duration;

use serde::Deserialize;

use super::values::{self, Password};

/// `[gateway]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Gateway {
    /// Where to serve HTTP, as `host:port` (e.g. `"127.0.0.1:4444"`). Default: none (off).
    /// Restart.
    pub listen: Option<String>,
    /// Serve HTTPS with the wire listener's certificate (`general.tls_cert_file` and
    /// `tls_key_file`, which must then be set). Default false. Restart.
    pub tls: bool,
    /// Largest request body accepted, in bytes; a larger one gets 413. Default 10485760
    /// (10 MiB), at least 1024.
    pub max_body_bytes: u32,
    /// Most rows one response may carry (all queries of a batch together); 0 means no limit.
    /// Past it the query is cancelled and the response ends with an error. Default 0.
    pub max_response_rows: u64,
    /// Most bytes of JSON one response may carry; 0 means no limit. Default 0.
    pub max_response_bytes: u64,
    /// How much of a JSON (`application/json`) answer, batch or not, is held before its
    /// status goes: an answer that ends within it gets its exact status (400 for an error
    /// after rows, as Neon answers); a longer one is streamed with 200, and an error after
    /// that aborts the response (its chunked body is not terminated). Bounds the memory of
    /// every answer. Default 10485760 (10 MiB), at least 512.
    pub json_buffer_bytes: u64,
    /// `statement_timeout` given to every gateway session (as a startup setting); `"0s"`
    /// leaves the server's own. Default `"0s"`.
    #[serde(deserialize_with = "values::duration")]
    pub statement_timeout: Duration,
    /// A streamed response is handed to the connection whenever this many bytes are
    /// waiting. Default 65536, at least 512.
    pub flush_bytes: u32,
    /// ... or when bytes have waited this long. Default `"50ms"`, more than zero.
    #[serde(deserialize_with = "values::duration")]
    pub flush_interval: Duration,
    /// Web origins allowed to use the gateway: answered with CORS headers, and let through
    /// when a request (or a WebSocket upgrade) carries their `Origin`; a request from any
    /// other origin is refused (403) before it runs. `"*"` allows every origin, as Neon does;
    /// it must be asked for. Default empty: no web page may use the gateway (requests with no
    /// `Origin`, from programs rather than browsers, are unaffected).
    pub cors_allowed_origins: Vec<String>,
    /// How long a verified (user, password) is remembered, so that a request does not pay
    /// for PBKDF2 each time; `"0s"` checks every request. Default `"60s"`.
    #[serde(deserialize_with = "values::duration")]
    pub credential_cache_ttl: Duration,
    /// Most HTTP connections open at once; more get 503 and are closed. Default 1000.
    pub max_connections: u32,
    /// How long a client may take to send its request headers. Default `"10s"`.
    #[serde(deserialize_with = "values::duration")]
    pub header_timeout: Duration,
    /// Bearer tokens (`Authorization: Bearer <token>`) standing for a user and database.
    /// Default: none.
    pub tokens: Vec<GatewayToken>,
}

/// `[[gateway.tokens]]`: a bearer token that logs in as `user` to `database`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GatewayToken {
    pub token: Password,
    /// A user of `[[users]]`.
    pub user: String,
    /// A database of `[[databases]]` (or one the `*` entry serves).
    pub database: String,
}

impl Default for Gateway {
    fn default() -> Self {
        Gateway {
            listen: None,
            tls: false,
            max_body_bytes: 10 * 1024 * 1024,
            max_response_rows: 0,
            max_response_bytes: 0,
            json_buffer_bytes: 10 * 1024 * 1024,
            statement_timeout: Duration::ZERO,
            flush_bytes: 64 * 1024,
            flush_interval: Duration::from_millis(50),
            cors_allowed_origins: Vec::new(),
            credential_cache_ttl: Duration::from_secs(60),
            max_connections: 1000,
            header_timeout: Duration::from_secs(10),
            tokens: Vec::new(),
        }
    }
}

/// Problems with `[gateway]`, as (key, message).
pub fn problems(gateway: &Gateway, general: &super::General) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    if gateway.max_body_bytes < 1024 {
        out.push(("gateway.max_body_bytes", "must be at least 1024".to_owned()));
    }
    if gateway.json_buffer_bytes < 512 {
        out.push(("gateway.json_buffer_bytes", "must be at least 512".to_owned()));
    }
    if gateway.flush_bytes < 512 {
        out.push(("gateway.flush_bytes", "must be at least 512".to_owned()));
    }
    if gateway.flush_interval.is_zero() {
        out.push(("gateway.flush_interval", "must be more than zero".to_owned()));
    }
    if gateway.header_timeout.is_zero() {
        out.push(("gateway.header_timeout", "must be more than zero".to_owned()));
    }
    if gateway.max_connections == 0 {
        out.push(("gateway.max_connections", "must be at least 1".to_owned()));
    }
    if gateway.tls && (general.tls_cert_file.is_none() || general.tls_key_file.is_none()) {
        out.push((
            "gateway.tls",
            "needs general.tls_cert_file and general.tls_key_file (the gateway uses the wire listener's certificate)"
                .to_owned(),
        ));
    }
    for t in &gateway.tokens {
        if t.token.len() < 16 {
            out.push((
                "gateway.tokens",
                format!("the token for user \"{}\" must be at least 16 characters", t.user),
            ));
        }
    }
    out
}
