//! Exact decimal arithmetic for `numeric`: sums across shards and `avg`'s division, with the
//! result scale PostgreSQL itself picks, so merged values are textually identical to a
//! single node's.
//!
//! A value is a sign, a magnitude in base 10^9 limbs (least significant first) and a display
//! scale (digits after the point, PostgreSQL's `dscale`). Only what merging needs is here:
//! parse, print, add, compare, and division by a row count.

use std::cmp::Ordering;

use crate::error::MergeError;

const LIMB: u64 = 1_000_000_000;

/// A `numeric` value as PostgreSQL prints it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Numeric {
    Finite(Dec),
    PosInf,
    NegInf,
    NaN,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Dec {
    neg: bool,
    /// Base 10^9, least significant limb first, no zero limbs at the top.
    mag: Vec<u32>,
    scale: u32,
}

fn bad(text: &str) -> MergeError {
    MergeError::BadValue { oid: 1700, why: format!("not a numeric: {text:?}") }
}

impl Numeric {
    pub fn parse(text: &str) -> Result<Numeric, MergeError> {
        match text {
            "NaN" => return Ok(Numeric::NaN),
            "Infinity" => return Ok(Numeric::PosInf),
            "-Infinity" => return Ok(Numeric::NegInf),
            _ => {}
        }
        let (neg, body) = match text.as_bytes().first() {
            Some(b'-') => (true, &text[1..]),
            Some(b'+') => (false, &text[1..]),
            _ => (false, text),
        };
        let (int, frac) = body.split_once('.').unwrap_or((body, ""));
        if int.is_empty() && frac.is_empty()
            || !int.bytes().all(|c| c.is_ascii_digit())
            || !frac.bytes().all(|c| c.is_ascii_digit())
        {
            return Err(bad(text));
        }
        let scale = u32::try_from(frac.len()).map_err(|_| bad(text))?;
        let mut mag = Vec::new();
        for c in int.bytes().chain(frac.bytes()) {
            mul_small(&mut mag, 10, u32::from(c - b'0'));
        }
        Ok(Numeric::Finite(Dec { neg: neg && !mag.is_empty(), mag, scale }))
    }

    pub fn from_i64(v: i64) -> Numeric {
        let mut mag = Vec::new();
        let mut u = v.unsigned_abs();
        while u > 0 {
            mag.push((u % LIMB) as u32);
            u /= LIMB;
        }
        Numeric::Finite(Dec { neg: v < 0, mag, scale: 0 })
    }

    pub fn add(&self, other: &Numeric) -> Numeric {
        use Numeric::*;
        match (self, other) {
            (NaN, _) | (_, NaN) | (PosInf, NegInf) | (NegInf, PosInf) => NaN,
            (PosInf, _) | (_, PosInf) => PosInf,
            (NegInf, _) | (_, NegInf) => NegInf,
            (Finite(a), Finite(b)) => Finite(a.add(b)),
        }
    }

    /// PostgreSQL's order: NaN above everything, then +Infinity.
    pub fn cmp(&self, other: &Numeric) -> Ordering {
        use Numeric::*;
        let rank = |n: &Numeric| match n {
            NegInf => 0,
            Finite(_) => 1,
            PosInf => 2,
            NaN => 3,
        };
        match (self, other) {
            (Finite(a), Finite(b)) => a.cmp(b),
            _ => rank(self).cmp(&rank(other)),
        }
    }

    /// `avg`'s final step: `self / n` at the scale PostgreSQL's `numeric_div` picks
    /// (`select_div_scale`), rounded half away from zero like its `div_var`.
    pub fn div_count(&self, n: u64) -> Numeric {
        match self {
            Numeric::Finite(d) => Numeric::Finite(d.div_count(n)),
            other => other.clone(),
        }
    }

    /// Exact product (scale: the sum of the scales); non-finite operands give NaN.
    pub fn mul(&self, other: &Numeric) -> Numeric {
        match (self, other) {
            (Numeric::Finite(a), Numeric::Finite(b)) => Numeric::Finite(Dec {
                neg: (a.neg != b.neg) && !a.mag.is_empty() && !b.mag.is_empty(),
                mag: mul_mag(&a.mag, &b.mag),
                scale: a.scale + b.scale,
            }),
            _ => Numeric::NaN,
        }
    }

    pub fn neg(&self) -> Numeric {
        match self {
            Numeric::Finite(d) => Numeric::Finite(Dec { neg: !d.neg && !d.mag.is_empty(), ..d.clone() }),
            Numeric::PosInf => Numeric::NegInf,
            Numeric::NegInf => Numeric::PosInf,
            Numeric::NaN => Numeric::NaN,
        }
    }

    pub fn is_finite(&self) -> bool {
        matches!(self, Numeric::Finite(_))
    }

    /// `> 0`.
    pub fn is_positive(&self) -> bool {
        match self {
            Numeric::Finite(d) => !d.neg && !d.mag.is_empty(),
            Numeric::PosInf => true,
            _ => false,
        }
    }

    /// The display scale (digits after the point).
    pub fn scale(&self) -> u32 {
        match self {
            Numeric::Finite(d) => d.scale,
            _ => 0,
        }
    }

    /// Square root rounded half up to `rscale` digits, like PostgreSQL's `sqrt_var`
    /// (for a non-negative finite value).
    pub fn sqrt_round(&self, rscale: u32) -> Numeric {
        let Numeric::Finite(d) = self else { return Numeric::NaN };
        if d.neg {
            return Numeric::NaN;
        }
        // floor(sqrt(v) * 10^(rscale+1)) = isqrt(V * 10^(2*rscale + 2 - scale)).
        let mut m = d.mag.clone();
        let shift = 2 * i64::from(rscale) + 2 - i64::from(d.scale);
        if shift >= 0 {
            mul_pow10(&mut m, shift as u32);
        } else {
            for _ in 0..-shift {
                m = div_small(&m, 10).0;
            }
        }
        let root = isqrt(&m);
        let (mut q, last) = div_small(&root, 10);
        if last >= 5 {
            q = add_mag(&q, &[1]);
        }
        Numeric::Finite(Dec { neg: false, mag: q, scale: rscale })
    }

    /// The value as the nearest float (through its decimal text).
    pub fn to_f64(&self) -> f64 {
        match self {
            Numeric::NaN => f64::NAN,
            Numeric::PosInf => f64::INFINITY,
            Numeric::NegInf => f64::NEG_INFINITY,
            Numeric::Finite(_) => self.to_string().parse().unwrap_or(f64::NAN),
        }
    }

    /// A text form equal for equal values (`1.50` and `1.5`), for grouping and DISTINCT.
    pub fn key(&self) -> String {
        let s = self.to_string();
        if s.contains('.') {
            let t = s.trim_end_matches('0').trim_end_matches('.');
            if t == "-0" {
                "0".into()
            } else {
                t.to_string()
            }
        } else {
            s
        }
    }
}

impl std::fmt::Display for Numeric {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Numeric::NaN => f.write_str("NaN"),
            Numeric::PosInf => f.write_str("Infinity"),
            Numeric::NegInf => f.write_str("-Infinity"),
            Numeric::Finite(d) => {
                let digits = mag_digits(&d.mag);
                let scale = d.scale as usize;
                let padded = if digits.len() <= scale {
                    "0".repeat(scale + 1 - digits.len()) + &digits
                } else {
                    digits
                };
                let (int, frac) = padded.split_at(padded.len() - scale);
                if d.neg {
                    f.write_str("-")?;
                }
                f.write_str(int)?;
                if scale > 0 {
                    f.write_str(".")?;
                    f.write_str(frac)?;
                }
                Ok(())
            }
        }
    }
}

impl Dec {
    /// The magnitude at a larger-or-equal scale; borrowed when the scale is already right
    /// (the common case: a column's values share one scale).
    fn rescaled(&self, scale: u32) -> std::borrow::Cow<'_, [u32]> {
        if scale == self.scale {
            return std::borrow::Cow::Borrowed(&self.mag);
        }
        let mut mag = self.mag.clone();
        mul_pow10(&mut mag, scale - self.scale);
        std::borrow::Cow::Owned(mag)
    }

    fn add(&self, other: &Dec) -> Dec {
        let scale = self.scale.max(other.scale);
        let a = self.rescaled(scale);
        let b = other.rescaled(scale);
        if self.neg == other.neg {
            return Dec { neg: self.neg, mag: add_mag(&a, &b), scale };
        }
        match cmp_mag(&a, &b) {
            Ordering::Equal => Dec { neg: false, mag: Vec::new(), scale },
            Ordering::Greater => Dec { neg: self.neg, mag: sub_mag(&a, &b), scale },
            Ordering::Less => Dec { neg: other.neg, mag: sub_mag(&b, &a), scale },
        }
    }

    fn cmp(&self, other: &Dec) -> Ordering {
        let scale = self.scale.max(other.scale);
        let (a, b) = (self.rescaled(scale), other.rescaled(scale));
        let (an, bn) = (self.neg && !a.is_empty(), other.neg && !b.is_empty());
        match (an, bn) {
            (false, true) => Ordering::Greater,
            (true, false) => Ordering::Less,
            (false, false) => cmp_mag(&a, &b),
            (true, true) => cmp_mag(&b, &a),
        }
    }

    /// PostgreSQL's weight (in base-10000 digits) and first base-10000 digit; (0, 0) for zero.
    fn weight_first(&self) -> (i64, u32) {
        let digits = mag_digits(&self.mag);
        if self.mag.is_empty() {
            return (0, 0);
        }
        // Decimal exponent of the leading digit.
        let e = digits.len() as i64 - 1 - i64::from(self.scale);
        let weight = e.div_euclid(4);
        let mut first = 0u32;
        for p in (4 * weight..4 * weight + 4).rev() {
            // Index into `digits` of the digit at decimal exponent p.
            let idx = digits.len() as i64 - 1 - (p + i64::from(self.scale));
            let d = if idx >= 0 && (idx as usize) < digits.len() {
                u32::from(digits.as_bytes()[idx as usize] - b'0')
            } else {
                0
            };
            first = first * 10 + d;
        }
        (weight, first)
    }

    fn div_count(&self, n: u64) -> Dec {
        // select_div_scale(self, n): at least 16 significant digits, at least the
        // dividend's scale, at most 1000.
        let (w1, f1) = self.weight_first();
        let mut w2 = 0i64;
        let mut top = n;
        while top >= 10_000 {
            top /= 10_000;
            w2 += 1;
        }
        let f2 = top as u32;
        let mut qweight = w1 - w2;
        if f1 <= f2 {
            qweight -= 1;
        }
        let rscale = (16 - qweight * 4).max(i64::from(self.scale)).clamp(0, 1000) as u32;
        // One extra digit, then round half away from zero.
        let mut m = self.mag.clone();
        mul_pow10(&mut m, rscale - self.scale + 1);
        let (mut q, _) = div_small(&m, n);
        let last = div_small(&q, 10).1;
        q = div_small(&q, 10).0;
        if last >= 5 {
            q = add_mag(&q, &[1]);
        }
        let neg = self.neg && !q.is_empty();
        Dec { neg, mag: q, scale: rscale }
    }
}

fn trim(mag: &mut Vec<u32>) {
    while mag.last() == Some(&0) {
        mag.pop();
    }
}

/// mag = mag * m + add, for small m.
fn mul_small(mag: &mut Vec<u32>, m: u32, add: u32) {
    let mut carry = u64::from(add);
    for limb in mag.iter_mut() {
        let v = u64::from(*limb) * u64::from(m) + carry;
        *limb = (v % LIMB) as u32;
        carry = v / LIMB;
    }
    while carry > 0 {
        mag.push((carry % LIMB) as u32);
        carry /= LIMB;
    }
    trim(mag);
}

fn mul_pow10(mag: &mut Vec<u32>, mut k: u32) {
    if mag.is_empty() {
        return;
    }
    while k >= 9 {
        mag.insert(0, 0);
        k -= 9;
    }
    if k > 0 {
        mul_small(mag, 10u32.pow(k), 0);
    }
}

fn div_small(mag: &[u32], d: u64) -> (Vec<u32>, u64) {
    let mut q = vec![0u32; mag.len()];
    let mut rem: u128 = 0;
    for i in (0..mag.len()).rev() {
        let cur = rem * u128::from(LIMB) + u128::from(mag[i]);
        q[i] = (cur / u128::from(d)) as u32;
        rem = cur % u128::from(d);
    }
    trim(&mut q);
    (q, rem as u64)
}

fn add_mag(a: &[u32], b: &[u32]) -> Vec<u32> {
    let mut out = Vec::with_capacity(a.len().max(b.len()) + 1);
    let mut carry = 0u64;
    for i in 0..a.len().max(b.len()) {
        let v = u64::from(*a.get(i).unwrap_or(&0)) + u64::from(*b.get(i).unwrap_or(&0)) + carry;
        out.push((v % LIMB) as u32);
        carry = v / LIMB;
    }
    if carry > 0 {
        out.push(carry as u32);
    }
    trim(&mut out);
    out
}

/// a - b, for a >= b.
fn sub_mag(a: &[u32], b: &[u32]) -> Vec<u32> {
    let mut out = Vec::with_capacity(a.len());
    let mut borrow = 0i64;
    for (i, &limb) in a.iter().enumerate() {
        let mut v = i64::from(limb) - i64::from(*b.get(i).unwrap_or(&0)) - borrow;
        borrow = 0;
        if v < 0 {
            v += LIMB as i64;
            borrow = 1;
        }
        out.push(v as u32);
    }
    trim(&mut out);
    out
}

fn cmp_mag(a: &[u32], b: &[u32]) -> Ordering {
    a.len().cmp(&b.len()).then_with(|| a.iter().rev().cmp(b.iter().rev()))
}

fn mul_mag(a: &[u32], b: &[u32]) -> Vec<u32> {
    if a.is_empty() || b.is_empty() {
        return Vec::new();
    }
    let mut acc = vec![0u64; a.len() + b.len() + 1];
    for (i, &x) in a.iter().enumerate() {
        let mut carry = 0u64;
        for (j, &y) in b.iter().enumerate() {
            let v = acc[i + j] + u64::from(x) * u64::from(y) + carry;
            acc[i + j] = v % LIMB;
            carry = v / LIMB;
        }
        let mut k = i + b.len();
        while carry > 0 {
            let v = acc[k] + carry;
            acc[k] = v % LIMB;
            carry = v / LIMB;
            k += 1;
        }
    }
    let mut out: Vec<u32> = acc.into_iter().map(|v| v as u32).collect();
    trim(&mut out);
    out
}

/// floor(sqrt(m)), digit by digit in base 100 on the decimal digits.
fn isqrt(m: &[u32]) -> Vec<u32> {
    let digits = mag_digits(m);
    let digits = if digits.len() % 2 == 1 { format!("0{digits}") } else { digits };
    let mut rem: Vec<u32> = Vec::new();
    let mut root: Vec<u32> = Vec::new();
    for pair in digits.as_bytes().chunks(2) {
        let v = u32::from(pair[0] - b'0') * 10 + u32::from(pair[1] - b'0');
        mul_small(&mut rem, 100, v);
        // Largest d with (20 * root + d) * d <= rem.
        let mut base = root.clone();
        mul_small(&mut base, 20, 0);
        let mut digit = 0;
        let mut take = Vec::new();
        for d in (1..10u32).rev() {
            let mut t = add_mag(&base, &[d]);
            mul_small(&mut t, d, 0);
            if cmp_mag(&t, &rem) != Ordering::Greater {
                digit = d;
                take = t;
                break;
            }
        }
        if digit > 0 {
            rem = sub_mag(&rem, &take);
        }
        mul_small(&mut root, 10, digit);
    }
    root
}

fn mag_digits(mag: &[u32]) -> String {
    let mut s = String::new();
    for (i, limb) in mag.iter().rev().enumerate() {
        if i == 0 {
            s.push_str(&limb.to_string());
        } else {
            s.push_str(&format!("{limb:09}"));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(s: &str) -> Numeric {
        Numeric::parse(s).expect("numeric")
    }

    #[test]
    fn adds_exactly_and_prints_scale() {
        assert_eq!(n("1.50").add(&n("-0.5")).to_string(), "1.00");
        assert_eq!(n("-1.5").add(&n("1.5")).to_string(), "0.0");
        assert_eq!(
            n("99999999999999999999.9999999999").add(&n("0.0000000001")).to_string(),
            "100000000000000000000.0000000000"
        );
        assert_eq!(n("0.001").to_string(), "0.001");
        assert_eq!(n("1.50").key(), "1.5");
        assert_eq!(n("1.50").cmp(&n("1.5")), Ordering::Equal);
        assert_eq!(n("-2").cmp(&n("1")), Ordering::Less);
    }

    #[test]
    fn divides_like_postgres() {
        // Checked against PostgreSQL 15: SELECT avg(x) over the same values.
        assert_eq!(n("6").div_count(3).to_string(), "2.0000000000000000");
        assert_eq!(n("10").div_count(4).to_string(), "2.5000000000000000");
        assert_eq!(n("1").div_count(3).to_string(), "0.33333333333333333333");
        assert_eq!(n("-2").div_count(3).to_string(), "-0.66666666666666666667");
        assert_eq!(n("0").div_count(5).to_string(), "0.00000000000000000000");
        assert_eq!(n("12345").div_count(1).to_string(), "12345.0000000000000000");
        assert_eq!(n("1.5").mul(&n("-2.25")).to_string(), "-3.375");
        assert_eq!(n("2").sqrt_round(20).to_string(), "1.41421356237309504880");
        assert_eq!(n("0.25").sqrt_round(3).to_string(), "0.500");
        assert_eq!(n("99999999999999999999").sqrt_round(0).to_string(), "10000000000");
    }
}
