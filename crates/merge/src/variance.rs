//! Merging the `stddev`/`variance` families.
//!
//! Each shard sends `count(x)`, `sum(x::numeric)`, `sum(x::numeric * x::numeric)` and
//! `var_pop(x)`; the last one's type tells integer/numeric input (numeric result) from float
//! input (float8 result). Numeric results are exact: the summed count, sum and sum of squares
//! go through PostgreSQL's own formula (`(N*Sxx - Sx*Sx) / (N*(N-1))` at the scale its
//! division picks, then a square root rounded to the same scale). Float results combine the
//! shards' (N, Sx, Sxx) with the pairwise formula PostgreSQL uses for parallel aggregation,
//! so the last bits may differ from a single server's sequential pass.

use crate::error::MergeError;
use crate::numeric::Numeric;
use crate::value::{self, format_f64, Class, Value};

#[derive(Debug, Clone)]
pub(crate) struct VarAcc {
    sample: bool,
    sqrt: bool,
    float: bool,
    n: u64,
    sx: Option<Numeric>,
    sxx: Option<Numeric>,
    /// Float path: (N, Sx, Sxx) combined pairwise.
    f: (f64, f64, f64),
}

/// The shard parts of `name(args) FILTER...` (`tail`), and whether it is sample/sqrt.
pub(crate) fn parts(name: &str, args: &str, tail: &str) -> Option<(bool, bool, Vec<String>)> {
    let (sample, sqrt) = match name {
        "stddev" | "stddev_samp" => (true, true),
        "stddev_pop" => (false, true),
        "variance" | "var_samp" => (true, false),
        "var_pop" => (false, false),
        _ => return None,
    };
    let x = format!("({args})::numeric");
    Some((
        sample,
        sqrt,
        vec![
            format!("count({args}){tail}"),
            format!("sum({x}){tail}"),
            format!("sum({x} * {x}){tail}"),
            format!("var_pop({args}){tail}"),
        ],
    ))
}

impl VarAcc {
    pub fn new(sample: bool, sqrt: bool, oids: &[u32]) -> Result<VarAcc, MergeError> {
        let float = match oids.get(3) {
            Some(701) => true,
            Some(1700) => false,
            other => {
                return Err(MergeError::unsupported(format!("variance over type {other:?} across shards")))
            }
        };
        Ok(VarAcc { sample, sqrt, float, n: 0, sx: None, sxx: None, f: (0.0, 0.0, 0.0) })
    }

    pub fn out_type(&self) -> (u32, i16) {
        if self.float {
            (701, 8)
        } else {
            (1700, -1)
        }
    }

    pub fn add(&mut self, parts: &[Option<&[u8]>]) -> Result<(), MergeError> {
        let get = |i: usize, class: Class, oid: u32| -> Result<Option<Value>, MergeError> {
            parts.get(i).copied().flatten().map(|t| value::decode(class, oid, t)).transpose()
        };
        let Some(Value::Int(n)) = get(0, Class::Int, 20)? else { return Ok(()) };
        if n == 0 {
            return Ok(());
        }
        let n =
            u64::try_from(n).map_err(|_| MergeError::BadValue { oid: 20, why: "negative count".into() })?;
        let (Some(Value::Num(sx)), Some(Value::Num(sxx))) =
            (get(1, Class::Numeric, 1700)?, get(2, Class::Numeric, 1700)?)
        else {
            return Err(MergeError::Protocol("variance parts missing".into()));
        };
        if self.float {
            let Some(Value::Float(var_pop)) = get(3, Class::Float8, 701)? else {
                return Err(MergeError::Protocol("var_pop part missing".into()));
            };
            let (n2, sx2, m2) = (n as f64, sx.to_f64(), var_pop * n as f64);
            let (n1, sx1, m1) = self.f;
            self.f = if n1 == 0.0 {
                (n2, sx2, m2)
            } else {
                let total = n1 + n2;
                let d = sx1 / n1 - sx2 / n2;
                (total, sx1 + sx2, m1 + m2 + n1 * n2 * d * d / total)
            };
        }
        self.n += n;
        self.sx = Some(self.sx.take().map_or(sx.clone(), |a| a.add(&sx)));
        self.sxx = Some(self.sxx.take().map_or(sxx.clone(), |a| a.add(&sxx)));
        Ok(())
    }

    pub fn finish(&self) -> Result<Option<String>, MergeError> {
        let n = self.n;
        if n == 0 || (self.sample && n == 1) {
            return Ok(None);
        }
        if self.float {
            let (fnn, _, m2) = self.f;
            let var = m2 / if self.sample { fnn - 1.0 } else { fnn };
            return Ok(Some(format_f64(if self.sqrt { var.sqrt() } else { var })));
        }
        let (Some(sx), Some(sxx)) = (&self.sx, &self.sxx) else { return Ok(None) };
        if !sx.is_finite() || !sxx.is_finite() {
            return Ok(Some("NaN".into()));
        }
        let den = if self.sample { n.checked_mul(n - 1) } else { n.checked_mul(n) }
            .ok_or_else(|| MergeError::unsupported("variance over more than 4 billion rows per group"))?;
        let numer = Numeric::from_i64(n as i64).mul(sxx).add(&sx.mul(sx).neg());
        if !numer.is_positive() {
            return Ok(Some("0".into()));
        }
        let var = numer.div_count(den);
        Ok(Some(if self.sqrt { var.sqrt_round(var.scale()).to_string() } else { var.to_string() }))
    }
}
