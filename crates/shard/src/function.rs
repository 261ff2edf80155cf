//! How a sharded table maps a key to a shard: PostgreSQL's hash partitioning, an explicit list
//! of values, or ranges. A key that no rule covers is an error naming the value, never a silent
//! broadcast.

use std::ops::Bound;

use crate::hash::partition_of;
use crate::value::{KeyType, Value};

/// A shard's position in the database's ordered list of shards.
pub type ShardId = usize;

/// One range of a range-sharded table: `[lower, upper)`, either end open when `None`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RangeRule {
    pub lower: Option<Value>,
    pub upper: Option<Value>,
    pub shard: ShardId,
}

/// The sharding function of one table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShardFunction {
    /// PostgreSQL's `PARTITION BY HASH` with modulus = the shard count.
    Hash { shards: usize },
    /// Each listed value to its shard; anything else to `default`, or an error without one.
    List { values: Vec<(Value, ShardId)>, default: Option<ShardId> },
    /// Non-overlapping ranges (validated when built), sorted by lower bound.
    Range { ranges: Vec<RangeRule> },
}

/// Why a key has no shard, or a function cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShardError {
    #[error("no shard is listed for value {0}")]
    NotListed(String),
    #[error("value {0} falls in no configured range")]
    NoRange(String),
    #[error("ranges for shards {0} and {1} overlap")]
    Overlap(ShardId, ShardId),
    #[error("a range's lower bound must be below its upper bound (shard {0})")]
    EmptyRange(ShardId),
    #[error("shard {shard} does not exist (there are {count})")]
    NoSuchShard { shard: ShardId, count: usize },
    #[error("hash sharding is not defined for type {0}")]
    Unhashable(KeyType),
    #[error("a sharded table needs at least one shard")]
    NoShards,
}

impl ShardFunction {
    /// A range function, its ranges sorted and checked against each other and the shard count.
    pub fn range(mut ranges: Vec<RangeRule>, shard_count: usize) -> Result<ShardFunction, ShardError> {
        for r in &ranges {
            if r.shard >= shard_count {
                return Err(ShardError::NoSuchShard { shard: r.shard, count: shard_count });
            }
            if let (Some(lo), Some(hi)) = (&r.lower, &r.upper) {
                if lo >= hi {
                    return Err(ShardError::EmptyRange(r.shard));
                }
            }
        }
        // An open lower bound sorts first (`None < Some`).
        ranges.sort_by(|a, b| a.lower.cmp(&b.lower));
        for pair in ranges.windows(2) {
            let (a, b) = (&pair[0], &pair[1]);
            let overlaps = match (&a.upper, &b.lower) {
                (None, _) | (_, None) => true,
                (Some(hi), Some(lo)) => hi > lo,
            };
            if overlaps {
                return Err(ShardError::Overlap(a.shard, b.shard));
            }
        }
        Ok(ShardFunction::Range { ranges })
    }

    /// The shard that holds rows with this key.
    pub fn shard_of(&self, key: &Value) -> Result<ShardId, ShardError> {
        match self {
            ShardFunction::Hash { shards } => {
                if *shards == 0 {
                    return Err(ShardError::NoShards);
                }
                Ok(partition_of(key, *shards as u64) as ShardId)
            }
            ShardFunction::List { values, default } => values
                .iter()
                .find(|(v, _)| v == key)
                .map(|(_, s)| *s)
                .or(*default)
                .ok_or_else(|| ShardError::NotListed(describe(key))),
            ShardFunction::Range { ranges } => ranges
                .iter()
                .find(|r| contains(r, key))
                .map(|r| r.shard)
                .ok_or_else(|| ShardError::NoRange(describe(key))),
        }
    }

    /// Every shard that can hold a key between `lower` and `upper`: for a range function the
    /// ranges that meet the interval, for the others every shard (hash and list order nothing).
    pub fn shards_between(
        &self,
        lower: Bound<&Value>,
        upper: Bound<&Value>,
        shard_count: usize,
    ) -> Vec<ShardId> {
        match self {
            ShardFunction::Range { ranges } => {
                let mut out: Vec<ShardId> =
                    ranges.iter().filter(|r| meets(r, lower, upper)).map(|r| r.shard).collect();
                out.sort_unstable();
                out.dedup();
                out
            }
            _ => (0..shard_count).collect(),
        }
    }
}

fn contains(r: &RangeRule, key: &Value) -> bool {
    r.lower.as_ref().is_none_or(|lo| key >= lo) && r.upper.as_ref().is_none_or(|hi| key < hi)
}

/// Whether `[r.lower, r.upper)` meets the interval given by two bounds.
fn meets(r: &RangeRule, lower: Bound<&Value>, upper: Bound<&Value>) -> bool {
    let above_lower = match (lower, &r.upper) {
        (Bound::Unbounded, _) | (_, None) => true,
        (Bound::Included(lo) | Bound::Excluded(lo), Some(hi)) => lo < hi,
    };
    let below_upper = match (upper, &r.lower) {
        (Bound::Unbounded, _) | (_, None) => true,
        (Bound::Included(hi), Some(lo)) => hi >= lo,
        (Bound::Excluded(hi), Some(lo)) => hi > lo,
    };
    above_lower && below_upper
}

/// A value as a user would write it, for error messages.
fn describe(key: &Value) -> String {
    match key {
        Value::Int(v) => v.to_string(),
        Value::Text(b) => format!("'{}'", String::from_utf8_lossy(b)),
        Value::Uuid(u) => {
            let hex: String = u.iter().map(|b| format!("{b:02x}")).collect();
            format!("'{}-{}-{}-{}-{}'", &hex[..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..])
        }
        Value::Date(d) => format!("'{}'", civil(i64::from(*d))),
        Value::Timestamp(t) => {
            let (days, micros) = (t.div_euclid(86_400_000_000), t.rem_euclid(86_400_000_000));
            let secs = micros / 1_000_000;
            let frac = micros % 1_000_000;
            let time = format!("{:02}:{:02}:{:02}", secs / 3600, secs / 60 % 60, secs % 60);
            let frac = if frac == 0 { String::new() } else { format!(".{frac:06}") };
            format!("'{} {time}{frac}'", civil(days))
        }
    }
}

/// `YYYY-MM-DD` of a day counted from 2000-01-01 (Howard Hinnant's civil_from_days).
fn civil(days_from_2000: i64) -> String {
    let z = days_from_2000 + 10_957 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn int(v: i64) -> Value {
        Value::Int(v)
    }

    fn rule(lower: Option<i64>, upper: Option<i64>, shard: ShardId) -> RangeRule {
        RangeRule { lower: lower.map(int), upper: upper.map(int), shard }
    }

    #[test]
    fn ranges_route_and_refuse_what_they_do_not_cover() {
        let f = ShardFunction::range(
            vec![rule(Some(100), Some(200), 1), rule(None, Some(100), 0), rule(Some(300), None, 2)],
            3,
        )
        .expect("valid");
        assert_eq!(f.shard_of(&int(-5)), Ok(0));
        assert_eq!(f.shard_of(&int(100)), Ok(1));
        assert_eq!(f.shard_of(&int(199)), Ok(1));
        assert_eq!(f.shard_of(&int(250)), Err(ShardError::NoRange("250".into())));
        assert_eq!(f.shard_of(&int(i64::MAX)), Ok(2));
        assert_eq!(f.shards_between(Bound::Included(&int(150)), Bound::Excluded(&int(301)), 3), [1, 2]);
        assert_eq!(f.shards_between(Bound::Included(&int(150)), Bound::Excluded(&int(300)), 3), [1]);
        assert_eq!(f.shards_between(Bound::Unbounded, Bound::Included(&int(100)), 3), [0, 1]);
        assert_eq!(f.shards_between(Bound::Excluded(&int(199)), Bound::Unbounded, 3), [1, 2]);
    }

    #[test]
    fn overlapping_or_empty_ranges_are_refused() {
        assert_eq!(
            ShardFunction::range(vec![rule(None, Some(10), 0), rule(Some(5), None, 1)], 2),
            Err(ShardError::Overlap(0, 1))
        );
        assert_eq!(ShardFunction::range(vec![rule(Some(5), Some(5), 0)], 1), Err(ShardError::EmptyRange(0)));
        assert_eq!(
            ShardFunction::range(vec![rule(None, None, 3)], 2),
            Err(ShardError::NoSuchShard { shard: 3, count: 2 })
        );
    }

    #[test]
    fn ranges_of_every_ordered_key_type() {
        let read = |ty: KeyType, s: &str| ty.parse_text(s.as_bytes()).expect("valid");
        for (ty, bounds, inside, outside) in [
            (KeyType::Text, ["a", "m", "t"], ["apple", "mango"], "zebra"),
            (
                KeyType::Date,
                ["2024-01-01", "2025-01-01", "2026-01-01"],
                ["2024-12-31", "2025-06-01"],
                "2023-12-31",
            ),
            (
                KeyType::Timestamp,
                ["2024-01-01 00:00", "2024-01-01 12:00", "2024-01-02 00:00"],
                ["2024-01-01 11:59:59.999999", "2024-01-01 12:00"],
                "2024-01-02 00:00",
            ),
            (
                KeyType::Uuid,
                [
                    "00000000-0000-0000-0000-000000000000",
                    "80000000-0000-0000-0000-000000000000",
                    "c0000000-0000-0000-0000-000000000000",
                ],
                ["7fffffff-ffff-ffff-ffff-ffffffffffff", "80000000-0000-0000-0000-000000000001"],
                "c0000000-0000-0000-0000-000000000001",
            ),
        ] {
            let b: Vec<Value> = bounds.iter().map(|s| read(ty, s)).collect();
            let f = ShardFunction::range(
                vec![
                    RangeRule { lower: Some(b[0].clone()), upper: Some(b[1].clone()), shard: 0 },
                    RangeRule { lower: Some(b[1].clone()), upper: Some(b[2].clone()), shard: 1 },
                ],
                2,
            )
            .expect("valid");
            assert_eq!(f.shard_of(&read(ty, inside[0])), Ok(0), "{ty}");
            assert_eq!(f.shard_of(&read(ty, inside[1])), Ok(1), "{ty}");
            let shown = match f.shard_of(&read(ty, outside)) {
                Err(ShardError::NoRange(shown)) => shown,
                other => panic!("{ty}: {other:?}"),
            };
            // Errors show the value as it was written.
            let written = if ty == KeyType::Timestamp {
                "'2024-01-02 00:00:00'".into()
            } else {
                format!("'{outside}'")
            };
            assert_eq!(shown, written, "{ty}");
        }
    }

    #[test]
    fn lists_with_and_without_a_default() {
        let values = vec![(Value::Text(b"eu"[..].into()), 0), (Value::Text(b"us"[..].into()), 1)];
        let strict = ShardFunction::List { values: values.clone(), default: None };
        assert_eq!(strict.shard_of(&Value::Text(b"us"[..].into())), Ok(1));
        assert_eq!(
            strict.shard_of(&Value::Text(b"apac"[..].into())),
            Err(ShardError::NotListed("'apac'".into()))
        );
        let lenient = ShardFunction::List { values, default: Some(1) };
        assert_eq!(lenient.shard_of(&Value::Text(b"apac"[..].into())), Ok(1));
    }
}
