//! The hash PostgreSQL's `PARTITION BY HASH` computes for a row, per key type, so that pgvia's
//! shard for a key equals the partition PostgreSQL picks with `MODULUS <shard count>`.
//!
//! PostgreSQL calls each key column's extended hash function with the fixed seed
//! `HASH_PARTITION_SEED`, folds the column hashes with `hash_combine64` starting from 0, and
//! takes the row's hash modulo the modulus (`compute_partition_hash_value`,
//! `get_partition_for_tuple`).

use crate::lookup3::{hash_bytes_extended, hash_combine64, hash_uint32_extended};
use crate::value::Value;

/// PostgreSQL's `HASH_PARTITION_SEED`.
pub const HASH_PARTITION_SEED: u64 = 0x7A5B_2236_7996_DCFD;

/// The extended hash of one key value, as its type's hash opclass computes it.
pub fn hash_value(value: &Value, seed: u64) -> u64 {
    match value {
        // hashint2extended and hashint4extended hash the value as a uint32; hashint8extended
        // folds the high half into the low one so that values in int4's range hash alike.
        Value::Int(v) => hash_int8(*v, seed),
        Value::Text(bytes) => hash_bytes_extended(bytes, seed),
        Value::Uuid(bytes) => hash_bytes_extended(bytes, seed),
        // date_hash_extended is hashint4extended; timestamp(tz)_hash_extended is hashint8extended.
        Value::Date(days) => hash_uint32_extended(*days as u32, seed),
        Value::Timestamp(micros) => hash_int8(*micros, seed),
    }
}

fn hash_int8(v: i64, seed: u64) -> u64 {
    let lo = v as u32;
    let hi = (v >> 32) as u32;
    let folded = if v >= 0 { lo ^ hi } else { lo ^ !hi };
    hash_uint32_extended(folded, seed)
}

/// The row hash of a (single- or multi-column) key, NULL columns skipped as PostgreSQL does.
pub fn row_hash<'a>(columns: impl IntoIterator<Item = Option<&'a Value>>) -> u64 {
    columns
        .into_iter()
        .flatten()
        .fold(0, |row, value| hash_combine64(row, hash_value(value, HASH_PARTITION_SEED)))
}

/// The partition (remainder) PostgreSQL picks for a single-column key among `modulus`
/// partitions of equal modulus.
pub fn partition_of(value: &Value, modulus: u64) -> u64 {
    row_hash([Some(value)]) % modulus.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integer_widths_hash_alike_in_int4_range() {
        // PostgreSQL keeps int2/int4/int8 hashes equal for equal values, so cross-type
        // hash joins work; the fold must preserve that for negative values too.
        for v in [0i64, 1, -1, 42, i64::from(i32::MIN), i64::from(i32::MAX)] {
            assert_eq!(hash_int8(v, 7), hash_uint32_extended(v as i32 as u32, 7), "{v}");
        }
    }
}
