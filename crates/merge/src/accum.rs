//! Merge-side aggregate state: one accumulator per aggregate per group, fed the shards'
//! partial values (their text), finished into the value a single node would print.

use std::collections::HashMap;

use crate::agg::{AggKind, AggSpec};
use crate::array_text::{element_of, parse_array};
use crate::error::MergeError;
use crate::listagg::ListAcc;
use crate::numeric::Numeric;
use crate::value::{self, format_f32, format_f64, Class, Value};
use crate::variance::VarAcc;

/// Approximate bytes one accumulator holds, for the memory budget.
pub(crate) const ACC_BYTES: usize = 64;

/// A running sum in the type the shards' sums have.
#[derive(Debug, Clone)]
pub(crate) enum Sum {
    Int(Option<i128>),
    Num(Option<Numeric>),
    F4(Option<f32>),
    F8(Option<f64>),
}

impl Sum {
    fn for_type(oid: u32) -> Result<Sum, MergeError> {
        Ok(match Class::of(oid) {
            Class::Int => Sum::Int(None),
            Class::Numeric => Sum::Num(None),
            Class::Float4 => Sum::F4(None),
            Class::Float8 => Sum::F8(None),
            _ => return Err(MergeError::unsupported(format!("sum/avg of type OID {oid} across shards"))),
        })
    }

    fn add(&mut self, text: &[u8], oid: u32) -> Result<(), MergeError> {
        let v = value::decode(Class::of(oid), oid, text)?;
        match (self, v) {
            (Sum::Int(s), Value::Int(x)) => *s = Some(s.unwrap_or(0) + i128::from(x)),
            (Sum::Num(s), Value::Num(x)) => {
                *s = Some(match s.take() {
                    Some(a) => a.add(&x),
                    None => x,
                })
            }
            (Sum::Num(s), Value::Int(x)) => {
                let x = Numeric::from_i64(x);
                *s = Some(s.take().map_or(x.clone(), |a| a.add(&x)));
            }
            (Sum::F4(s), Value::Float(x)) => *s = Some(s.unwrap_or(0.0) + x as f32),
            (Sum::F8(s), Value::Float(x)) => *s = Some(s.unwrap_or(0.0) + x),
            _ => return Err(MergeError::BadValue { oid, why: "unexpected value for a sum".into() }),
        }
        Ok(())
    }

    /// The sum printed in its own type (`int8` sums must fit in 64 bits).
    fn finish(&self) -> Result<Option<String>, MergeError> {
        Ok(match self {
            Sum::Int(s) => match s {
                Some(v) => Some(i64::try_from(*v).map_err(|_| MergeError::OutOfRange("bigint"))?.to_string()),
                None => None,
            },
            Sum::Num(s) => s.as_ref().map(Numeric::to_string),
            Sum::F4(s) => s.map(format_f32),
            Sum::F8(s) => s.map(format_f64),
        })
    }

    /// `avg`: the sum divided by `n` (numeric for integer and numeric inputs).
    fn avg(&self, n: i128) -> Result<Option<String>, MergeError> {
        let Ok(n) = u64::try_from(n) else { return Ok(None) };
        if n == 0 {
            return Ok(None);
        }
        Ok(match self {
            Sum::Int(Some(v)) => Some(Numeric::parse(&v.to_string())?.div_count(n).to_string()),
            Sum::Num(Some(v)) => Some(v.div_count(n).to_string()),
            Sum::F4(Some(v)) => Some(format_f64(f64::from(*v) / n as f64)),
            Sum::F8(Some(v)) => Some(format_f64(v / n as f64)),
            _ => None,
        })
    }
}

#[derive(Debug, Clone)]
pub(crate) enum Acc {
    Count(i128),
    Sum(Sum, u32),
    /// The best value so far and its text as the shard printed it.
    Best {
        max: bool,
        class: Class,
        oid: u32,
        best: Option<(Value, Vec<u8>)>,
    },
    Bool {
        and: bool,
        acc: Option<bool>,
    },
    Avg {
        sum: Sum,
        sum_oid: u32,
        count: i128,
    },
    Distinct {
        kind: AggKind,
        elem: u32,
        set: HashMap<Vec<u8>, Vec<u8>>,
    },
    List(Box<ListAcc>),
    Var(Box<VarAcc>),
}

impl Acc {
    /// A fresh accumulator for an aggregate whose parts have the type OIDs `parts`.
    pub fn new(spec: &AggSpec, parts: &[u32]) -> Result<Acc, MergeError> {
        let kind = spec.kind;
        let first = *parts.first().ok_or_else(|| MergeError::Protocol("aggregate without parts".into()))?;
        Ok(match kind {
            AggKind::Count => Acc::Count(0),
            AggKind::Sum => Acc::Sum(Sum::for_type(first)?, first),
            AggKind::Min | AggKind::Max => {
                let class = Class::of(first);
                if class == Class::Opaque || class == Class::Canonical {
                    return Err(MergeError::unsupported(format!(
                        "min/max of type OID {first} across shards"
                    )));
                }
                Acc::Best { max: kind == AggKind::Max, class, oid: first, best: None }
            }
            AggKind::And | AggKind::Or => Acc::Bool { and: kind == AggKind::And, acc: None },
            AggKind::Avg => Acc::Avg { sum: Sum::for_type(first)?, sum_oid: first, count: 0 },
            AggKind::Var { sample, sqrt } => Acc::Var(Box::new(VarAcc::new(sample, sqrt, parts)?)),
            AggKind::List => {
                let list = spec
                    .list
                    .as_ref()
                    .ok_or_else(|| MergeError::Protocol("list aggregate without its spec".into()))?;
                Acc::List(Box::new(ListAcc::new(list, parts)?))
            }
            AggKind::CountDistinct | AggKind::SumDistinct | AggKind::AvgDistinct => {
                let elem = element_of(first).ok_or_else(|| {
                    MergeError::unsupported(format!("DISTINCT aggregate over type OID {first} across shards"))
                })?;
                if kind != AggKind::CountDistinct {
                    // Checks the element type can be summed.
                    Sum::for_type(elem)?;
                }
                Acc::Distinct { kind, elem, set: HashMap::new() }
            }
        })
    }

    /// The client-facing type (OID, length) when it differs from the first part's.
    pub fn out_type(&self) -> Option<(u32, i16)> {
        let numeric_or_f8 = |oid: u32| match Class::of(oid) {
            Class::Float4 | Class::Float8 => (701, 8),
            _ => (1700, -1),
        };
        match self {
            Acc::Avg { sum_oid, .. } => Some(numeric_or_f8(*sum_oid)),
            Acc::List(l) => l.out_type(),
            Acc::Var(v) => Some(v.out_type()),
            Acc::Distinct { kind: AggKind::CountDistinct, .. } => Some((20, 8)),
            Acc::Distinct { kind: AggKind::AvgDistinct, elem, .. } => Some(numeric_or_f8(*elem)),
            Acc::Distinct { elem, .. } => Some(match *elem {
                21 | 23 => (20, 8),
                700 => (700, 4),
                701 => (701, 8),
                _ => (1700, -1),
            }),
            _ => None,
        }
    }

    /// Adds one shard's partial values; returns the bytes of state it added.
    pub fn add(&mut self, parts: &[Option<&[u8]>], oids: &[u32]) -> Result<usize, MergeError> {
        let Some(&first) = parts.first() else { return Ok(0) };
        match self {
            Acc::Count(n) => {
                if let Some(t) = first {
                    let Value::Int(v) = value::decode(Class::Int, 20, t)? else { return Ok(0) };
                    *n += i128::from(v);
                }
            }
            Acc::Sum(sum, oid) => {
                if let Some(t) = first {
                    sum.add(t, *oid)?;
                }
            }
            Acc::Best { max, class, oid, best } => {
                if let Some(t) = first {
                    let v = value::decode(*class, *oid, t)?;
                    let better = match best {
                        None => true,
                        Some((b, _)) => {
                            let ord = value::compare(&v, b);
                            if *max {
                                ord.is_gt()
                            } else {
                                ord.is_lt()
                            }
                        }
                    };
                    if better {
                        *best = Some((v, t.to_vec()));
                    }
                }
            }
            Acc::Bool { and, acc } => {
                if let Some(t) = first {
                    let Value::Bool(b) = value::decode(Class::Bool, 16, t)? else { return Ok(0) };
                    *acc = Some(match acc {
                        None => b,
                        Some(a) if *and => *a && b,
                        Some(a) => *a || b,
                    });
                }
            }
            Acc::Avg { sum, sum_oid, count } => {
                if let Some(t) = first {
                    sum.add(t, *sum_oid)?;
                }
                if let Some(Some(c)) = parts.get(1) {
                    let Value::Int(v) = value::decode(Class::Int, 20, c)? else { return Ok(0) };
                    *count += i128::from(v);
                }
            }
            Acc::List(l) => return l.add(parts, oids),
            Acc::Var(v) => v.add(parts)?,
            Acc::Distinct { elem, set, .. } => {
                let Some(t) = first else { return Ok(0) };
                let class = Class::of(*elem);
                let mut added = 0;
                for e in parse_array(t, oids.first().copied().unwrap_or(0))?.into_iter().flatten() {
                    let mut key = Vec::new();
                    value::push_key(&mut key, class, Some(&e))?;
                    if let std::collections::hash_map::Entry::Vacant(slot) = set.entry(key) {
                        added += slot.key().len() + e.len() + 48;
                        slot.insert(e);
                    }
                }
                return Ok(added);
            }
        }
        Ok(0)
    }

    /// The merged value's text, `None` for NULL.
    pub fn finish(&self) -> Result<Option<Vec<u8>>, MergeError> {
        let text = match self {
            Acc::Count(n) => {
                Some(i64::try_from(*n).map_err(|_| MergeError::OutOfRange("bigint"))?.to_string())
            }
            Acc::Sum(sum, _) => sum.finish()?,
            Acc::Best { best, .. } => return Ok(best.as_ref().map(|(_, t)| t.clone())),
            Acc::Bool { acc, .. } => acc.map(|b| (if b { "t" } else { "f" }).to_string()),
            Acc::Avg { sum, count, .. } => sum.avg(*count)?,
            Acc::List(l) => return l.finish(),
            Acc::Var(v) => v.finish()?,
            Acc::Distinct { kind, elem, set } => {
                if *kind == AggKind::CountDistinct {
                    Some(set.len().to_string())
                } else {
                    // int2/int4 sum as int8; int8 sums as numeric, like PostgreSQL.
                    let sum_oid = if *elem == 20 { 1700 } else { *elem };
                    let mut sum = Sum::for_type(sum_oid)?;
                    for v in set.values() {
                        sum.add(v, if sum_oid == 1700 && *elem == 20 { 20 } else { *elem })?;
                    }
                    if *kind == AggKind::SumDistinct {
                        sum.finish()?
                    } else {
                        sum.avg(set.len() as i128)?
                    }
                }
            }
        };
        Ok(text.map(String::into_bytes))
    }
}
