//! Which shards can hold the rows a condition on the key selects.
//!
//! The routing layer reads a statement's `WHERE` clause into a [`KeyCond`] per sharded table
//! (values already parsed into the key's type) and asks the table's function for a
//! [`ShardSet`]. The answer is never smaller than the set of shards holding matching rows:
//! what the condition does not say about the key ([`KeyCond::Any`]) narrows nothing, `AND`
//! intersects, `OR` unites, and ranges narrow only range-sharded tables, as PostgreSQL's
//! own partition pruning does.

use std::fmt;
use std::ops::Bound;

use crate::function::{ShardError, ShardFunction, ShardId};
use crate::value::Value;

/// The most shards one database may have: a [`ShardSet`] is one machine word.
pub const MAX_SHARDS: usize = 64;

/// A set of shards, as a bitset.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct ShardSet(u64);

impl ShardSet {
    pub const EMPTY: ShardSet = ShardSet(0);

    /// Shards `0..count` (`count` capped at [`MAX_SHARDS`]).
    pub fn all(count: usize) -> ShardSet {
        match count {
            0 => ShardSet(0),
            n if n >= MAX_SHARDS => ShardSet(u64::MAX),
            n => ShardSet((1u64 << n) - 1),
        }
    }

    /// Just `shard` (empty when it is not below [`MAX_SHARDS`]).
    pub fn one(shard: ShardId) -> ShardSet {
        ShardSet(1u64.checked_shl(shard as u32).unwrap_or(0))
    }

    pub fn insert(&mut self, shard: ShardId) {
        *self = self.union(ShardSet::one(shard));
    }

    pub fn contains(self, shard: ShardId) -> bool {
        self.intersection(ShardSet::one(shard)) != ShardSet::EMPTY
    }

    pub fn union(self, other: ShardSet) -> ShardSet {
        ShardSet(self.0 | other.0)
    }

    pub fn intersection(self, other: ShardSet) -> ShardSet {
        ShardSet(self.0 & other.0)
    }

    pub fn len(self) -> usize {
        self.0.count_ones() as usize
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The lowest shard in the set.
    pub fn first(self) -> Option<ShardId> {
        (self.0 != 0).then(|| self.0.trailing_zeros() as ShardId)
    }

    /// The shards, in ascending order.
    pub fn iter(self) -> impl Iterator<Item = ShardId> {
        let bits = self.0;
        (0..MAX_SHARDS).filter(move |s| bits & (1u64 << s) != 0)
    }
}

impl FromIterator<ShardId> for ShardSet {
    fn from_iter<I: IntoIterator<Item = ShardId>>(iter: I) -> ShardSet {
        let mut set = ShardSet::EMPTY;
        for s in iter {
            set.insert(s);
        }
        set
    }
}

impl fmt::Display for ShardSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("{")?;
        for (i, s) in self.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{s}")?;
        }
        f.write_str("}")
    }
}

impl fmt::Debug for ShardSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// What a condition says about one table's key column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyCond {
    /// Nothing: any key can match (no predicate on the key, `NOT`, a function call...).
    Any,
    /// The key is one of these (`=`, `IN`, `= ANY`). Empty when no key can match
    /// (`key = NULL`).
    OneOf(Vec<Value>),
    /// The key lies between two bounds (`<`, `<=`, `>`, `>=`, `BETWEEN`).
    Between(Bound<Value>, Bound<Value>),
    /// All of these hold.
    And(Vec<KeyCond>),
    /// At least one of these holds.
    Or(Vec<KeyCond>),
}

impl KeyCond {
    /// Whether anything in the condition is about the key at all.
    pub fn mentions_key(&self) -> bool {
        match self {
            KeyCond::Any => false,
            KeyCond::OneOf(_) | KeyCond::Between(..) => true,
            KeyCond::And(c) | KeyCond::Or(c) => c.iter().any(KeyCond::mentions_key),
        }
    }
}

impl ShardFunction {
    /// The shards that can hold rows whose key satisfies `cond`. A key value the function
    /// maps to no shard (a list value without a default, a value outside every range) is an
    /// error, unless the rest of an `AND` already rules it out.
    pub fn shards_for(&self, cond: &KeyCond, shard_count: usize) -> Result<ShardSet, ShardError> {
        let all = ShardSet::all(shard_count);
        match cond {
            KeyCond::Any => Ok(all),
            KeyCond::OneOf(values) => self.shards_of(values.iter()),
            KeyCond::Between(lo, hi) => Ok(self.shards_in(bound_ref(lo), bound_ref(hi), shard_count)),
            KeyCond::Or(children) => {
                let mut out = ShardSet::EMPTY;
                for c in children {
                    out = out.union(self.shards_for(c, shard_count)?);
                }
                Ok(out)
            }
            KeyCond::And(children) => self.shards_for_all(children, shard_count),
        }
    }

    /// `AND`: the equalities and ranges among the children are merged first (so
    /// `k >= 10 AND k < 20` asks for one interval, and `k = 1 AND k = 2` for nothing), then
    /// intersected with what the other children allow.
    fn shards_for_all(&self, children: &[KeyCond], shard_count: usize) -> Result<ShardSet, ShardError> {
        let mut keys: Option<Vec<&Value>> = None;
        let mut lower: Bound<&Value> = Bound::Unbounded;
        let mut upper: Bound<&Value> = Bound::Unbounded;
        let mut ranged = false;
        let mut out = ShardSet::all(shard_count);
        for c in children {
            match c {
                KeyCond::OneOf(values) => {
                    keys = Some(match keys {
                        None => values.iter().collect(),
                        Some(prev) => prev.into_iter().filter(|v| values.contains(v)).collect(),
                    });
                }
                KeyCond::Between(lo, hi) => {
                    ranged = true;
                    lower = tighter_lower(lower, bound_ref(lo));
                    upper = tighter_upper(upper, bound_ref(hi));
                }
                other => out = out.intersection(self.shards_for(other, shard_count)?),
            }
        }
        let narrowed = match keys {
            Some(keys) => self.shards_of(keys.into_iter().filter(|k| within(k, lower, upper)))?,
            None if ranged => self.shards_in(lower, upper, shard_count),
            None => return Ok(out),
        };
        Ok(out.intersection(narrowed))
    }

    fn shards_of<'v>(&self, values: impl Iterator<Item = &'v Value>) -> Result<ShardSet, ShardError> {
        let mut out = ShardSet::EMPTY;
        for v in values {
            out.insert(self.shard_of(v)?);
        }
        Ok(out)
    }

    fn shards_in(&self, lower: Bound<&Value>, upper: Bound<&Value>, shard_count: usize) -> ShardSet {
        if is_empty_interval(lower, upper) {
            return ShardSet::EMPTY;
        }
        self.shards_between(lower, upper, shard_count).into_iter().collect()
    }
}

fn bound_ref(b: &Bound<Value>) -> Bound<&Value> {
    b.as_ref()
}

fn tighter_lower<'v>(a: Bound<&'v Value>, b: Bound<&'v Value>) -> Bound<&'v Value> {
    match (a, b) {
        (Bound::Unbounded, x) | (x, Bound::Unbounded) => x,
        (Bound::Included(x), Bound::Included(y)) => Bound::Included(x.max(y)),
        (Bound::Excluded(x), Bound::Excluded(y)) => Bound::Excluded(x.max(y)),
        (Bound::Included(i), Bound::Excluded(e)) | (Bound::Excluded(e), Bound::Included(i)) => {
            if i > e {
                Bound::Included(i)
            } else {
                Bound::Excluded(e)
            }
        }
    }
}

fn tighter_upper<'v>(a: Bound<&'v Value>, b: Bound<&'v Value>) -> Bound<&'v Value> {
    match (a, b) {
        (Bound::Unbounded, x) | (x, Bound::Unbounded) => x,
        (Bound::Included(x), Bound::Included(y)) => Bound::Included(x.min(y)),
        (Bound::Excluded(x), Bound::Excluded(y)) => Bound::Excluded(x.min(y)),
        (Bound::Included(i), Bound::Excluded(e)) | (Bound::Excluded(e), Bound::Included(i)) => {
            if i < e {
                Bound::Included(i)
            } else {
                Bound::Excluded(e)
            }
        }
    }
}

fn within(v: &Value, lower: Bound<&Value>, upper: Bound<&Value>) -> bool {
    let above = match lower {
        Bound::Unbounded => true,
        Bound::Included(lo) => v >= lo,
        Bound::Excluded(lo) => v > lo,
    };
    let below = match upper {
        Bound::Unbounded => true,
        Bound::Included(hi) => v <= hi,
        Bound::Excluded(hi) => v < hi,
    };
    above && below
}

/// `k > 5 AND k < 3`, `k > 5 AND k <= 5`: no value can satisfy both.
fn is_empty_interval(lower: Bound<&Value>, upper: Bound<&Value>) -> bool {
    match (lower, upper) {
        (Bound::Included(lo), Bound::Included(hi)) => lo > hi,
        (Bound::Included(lo) | Bound::Excluded(lo), Bound::Excluded(hi))
        | (Bound::Excluded(lo), Bound::Included(hi)) => lo >= hi,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::function::RangeRule;

    fn int(v: i64) -> Value {
        Value::Int(v)
    }

    fn ranges() -> ShardFunction {
        // Shard 0 holds two ranges, so intersecting per-predicate answers would be too wide.
        let rule = |lo: i64, hi: i64, shard| RangeRule { lower: Some(int(lo)), upper: Some(int(hi)), shard };
        ShardFunction::range(vec![rule(0, 5, 0), rule(5, 30, 1), rule(30, 40, 0), rule(40, 100, 2)], 3)
            .expect("valid")
    }

    fn between(lo: Bound<i64>, hi: Bound<i64>) -> KeyCond {
        KeyCond::Between(lo.map(int), hi.map(int))
    }

    #[test]
    fn sets() {
        let s: ShardSet = [0, 2, 63].into_iter().collect();
        assert_eq!(s.to_string(), "{0, 2, 63}");
        assert_eq!((s.len(), s.first(), s.contains(2), s.contains(1)), (3, Some(0), true, false));
        assert_eq!(ShardSet::all(4).to_string(), "{0, 1, 2, 3}");
        assert_eq!(ShardSet::all(64).len(), 64);
        assert!(ShardSet::one(64).is_empty());
        assert_eq!(ShardSet::all(0), ShardSet::EMPTY);
    }

    #[test]
    fn and_merges_ranges_before_asking() {
        let f = ranges();
        let c = KeyCond::And(vec![
            between(Bound::Included(10), Bound::Unbounded),
            between(Bound::Unbounded, Bound::Excluded(20)),
        ]);
        assert_eq!(f.shards_for(&c, 3), Ok(ShardSet::one(1)));
        let c = KeyCond::And(vec![
            between(Bound::Excluded(50), Bound::Unbounded),
            between(Bound::Unbounded, Bound::Included(50)),
        ]);
        assert_eq!(f.shards_for(&c, 3), Ok(ShardSet::EMPTY));
        let c = KeyCond::And(vec![
            KeyCond::OneOf(vec![int(1), int(35)]),
            between(Bound::Included(30), Bound::Unbounded),
        ]);
        assert_eq!(f.shards_for(&c, 3), Ok(ShardSet::one(0)));
        let c = KeyCond::And(vec![KeyCond::OneOf(vec![int(1)]), KeyCond::OneOf(vec![int(2)])]);
        assert_eq!(f.shards_for(&c, 3), Ok(ShardSet::EMPTY));
        let c = KeyCond::And(vec![KeyCond::Any, KeyCond::OneOf(vec![int(50)])]);
        assert_eq!(f.shards_for(&c, 3), Ok(ShardSet::one(2)));
    }

    #[test]
    fn or_unites_and_any_widens() {
        let f = ranges();
        let c =
            KeyCond::Or(vec![KeyCond::OneOf(vec![int(1)]), between(Bound::Included(45), Bound::Unbounded)]);
        assert_eq!(f.shards_for(&c, 3).map(|s| s.to_string()), Ok("{0, 2}".into()));
        let c = KeyCond::Or(vec![KeyCond::OneOf(vec![int(1)]), KeyCond::Any]);
        assert_eq!(f.shards_for(&c, 3), Ok(ShardSet::all(3)));
        assert_eq!(f.shards_for(&KeyCond::OneOf(vec![]), 3), Ok(ShardSet::EMPTY));
    }

    #[test]
    fn unmatched_values_are_errors_not_broadcasts() {
        let f = ranges();
        assert_eq!(f.shards_for(&KeyCond::OneOf(vec![int(100)]), 3), Err(ShardError::NoRange("100".into())));
        // Ruled out by the rest of the AND first: no error.
        let c = KeyCond::And(vec![
            KeyCond::OneOf(vec![int(100), int(3)]),
            between(Bound::Unbounded, Bound::Excluded(50)),
        ]);
        assert_eq!(f.shards_for(&c, 3), Ok(ShardSet::one(0)));
    }

    #[test]
    fn hash_ignores_ranges() {
        let f = ShardFunction::Hash { shards: 4 };
        assert_eq!(f.shards_for(&between(Bound::Included(1), Bound::Included(2)), 4), Ok(ShardSet::all(4)));
        let one = f.shards_for(&KeyCond::OneOf(vec![int(1)]), 4).expect("hash");
        assert_eq!(one.len(), 1);
        let c =
            KeyCond::And(vec![KeyCond::OneOf(vec![int(1)]), between(Bound::Included(5), Bound::Unbounded)]);
        assert_eq!(f.shards_for(&c, 4), Ok(ShardSet::EMPTY));
    }
}
