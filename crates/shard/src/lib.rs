//! pgvia's sharding functions, with no I/O: key values read from PostgreSQL's text and binary
//! forms, PostgreSQL's own hash partitioning (so a key's shard equals the partition a
//! `PARTITION BY HASH` table with `MODULUS <shards>` would pick), list and range rules.
//!
//! The routing layer feeds it keys it found in the SQL analysis, Bind parameters and COPY rows.

pub mod function;
pub mod hash;
mod lookup3;
pub mod plan;
pub mod schema;
pub mod value;

pub use function::{RangeRule, ShardError, ShardFunction, ShardId};
pub use hash::{partition_of, row_hash, HASH_PARTITION_SEED};
pub use lookup3::{hash_bytes_extended, hash_combine64, hash_uint32_extended};
pub use plan::{KeyCond, ShardSet, MAX_SHARDS};
pub use schema::{parse_search_path, SchemaShards};
pub use value::{KeyError, KeyType, Value};
