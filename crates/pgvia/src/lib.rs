//! pgvia: a PostgreSQL connection pooler and proxy.
//!
//! Folders follow concerns: `net` (sockets, TLS), `session` (one client), `server` (one
//! PostgreSQL connection), `pool` (sharing servers), `prepared` (statements that follow clients
//! across servers), `notify` (LISTEN/NOTIFY fan-out), `auth`, `config`, `cancel`; `sharding` (which shards a statement goes to, as a pure function);
//! `app` holds
//! what they share and `proxy` runs the accept loop. `import` converts PgBouncer's configuration.

pub mod admin;
pub mod app;
pub mod auth;
pub mod auth_query;
pub mod cancel;
pub mod clients;
pub mod config;
pub mod cores;
pub mod fdlimit;
pub mod gateway;
pub mod import;
pub mod logging;
pub mod metrics;
pub mod net;
pub mod notify;
pub mod pool;
pub mod prepared;
pub mod proxy;
pub mod reload;
pub mod routing;
pub mod server;
pub mod session;
pub mod sharding;
pub mod spill;
pub mod stats;

pub use proxy::Proxy;
