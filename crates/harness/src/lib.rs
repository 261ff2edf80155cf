//! Throwaway PostgreSQL clusters for pgvia's tests, benchmarks and quick start.
//!
//! ```no_run
//! use harness::{Cluster, ClusterOptions, HbaAuth};
//!
//! let pg = Cluster::start(ClusterOptions::default().auth(HbaAuth::ScramSha256))?;
//! pg.create_user("app", "secret")?;
//! pg.create_database("app", "app")?;
//! let url = pg.url("app", "secret", "app");
//! # let _ = url;
//! # Ok::<(), harness::HarnessError>(())
//! ```
//!
//! Replicas: [`Cluster::start_replica`] makes a streaming hot standby of a cluster
//! (`pg_basebackup -R`), which can be paused, stopped, started again and promoted.
//!
//! The server version comes from `PGVIA_TEST_PG` (15, the default, or 18).
//! When running as root, servers run as the `postgres` OS user.

mod bins;
mod cluster;
mod conf;
mod dirs;
mod error;
mod lifecycle;
mod meta;
mod os;
mod replication;

pub use bins::{bin_dir, pg_bin, supports_ssl, PgVersion, VERSION_ENV};
pub use cluster::{Cluster, ClusterOptions};
pub use conf::{parse_setting, HbaAuth};
pub use dirs::KEEP_ENV;
pub use error::HarnessError;
pub use os::LIBPQ_ENV;
pub use replication::Lsn;
