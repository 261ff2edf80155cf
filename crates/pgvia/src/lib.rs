//! pgvia: a PostgreSQL connection pooler and proxy.
//!
//! Folders follow concerns: `net` (sockets, TLS), `session` (one client), `server` (one
//! PostgreSQL connection), `pool` (sharing servers), `prepared` (statements that follow clients across servers), `auth`, `config`, `cancel`; `app` holds
//! what they share and `proxy` runs the accept loop.

pub mod app;
pub mod auth;
pub mod cancel;
pub mod config;
pub mod net;
pub mod pool;
pub mod prepared;
pub mod proxy;
pub mod server;
pub mod session;

pub use proxy::Proxy;
