//! pgvia: a PostgreSQL connection pooler and proxy.
//!
//! Folders follow concerns: `net` (sockets, TLS), `session` (one client), `server` (one
//! PostgreSQL connection), `pool` (sharing servers), `auth`, `config`, `cancel`, `notify` (LISTEN/NOTIFY fan-out); `app` holds
//! what they share and `proxy` runs the accept loop.

pub mod app;
pub mod auth;
pub mod cancel;
pub mod config;
pub mod net;
pub mod notify;
pub mod pool;
pub mod proxy;
pub mod server;
pub mod session;

pub use proxy::Proxy;
