//! Binary-format values: converted to their text form when the merge must read them, and
//! back when a merged value goes to a binary-format column. Cells the merge only passes
//! through are never converted.
//!
//! Timestamps with time zone come out as UTC (`+00`); that text is only ever read back by
//! this module or compared as an instant, never sent to a client.

use crate::array_text::{element_of, parse_array, quote_element};
use crate::error::MergeError;
use crate::numeric::Numeric;
use crate::value::{self, format_f32, format_f64, Class};

/// Days between 1970-01-01 and PostgreSQL's epoch 2000-01-01.
const EPOCH_DAYS: i64 = 10_957;
const DAY_MICROS: i64 = 86_400_000_000;

fn bad(oid: u32, why: &str) -> MergeError {
    MergeError::BadValue { oid, why: format!("binary value: {why}") }
}

fn unsupported(oid: u32) -> MergeError {
    MergeError::unsupported(format!("binary format of type OID {oid} in a merged cross-shard query"))
}

fn be<const N: usize>(b: &[u8], oid: u32) -> Result<[u8; N], MergeError> {
    b.try_into().map_err(|_| bad(oid, "wrong length"))
}

/// Whether both conversions exist for `oid`.
pub(crate) fn supported(oid: u32) -> bool {
    matches!(
        oid,
        16 | 17
            | 18
            | 19
            | 20
            | 21
            | 23
            | 25
            | 26
            | 114
            | 700
            | 701
            | 1042
            | 1043
            | 1082
            | 1114
            | 1184
            | 1700
            | 2950
            | 3802
    ) || element_of(oid).is_some_and(supported)
}

/// A binary value's text form.
pub(crate) fn to_text(oid: u32, b: &[u8]) -> Result<Vec<u8>, MergeError> {
    Ok(match oid {
        16 => match b {
            [0] => b"f".to_vec(),
            [_] => b"t".to_vec(),
            _ => return Err(bad(oid, "bool length")),
        },
        21 => i16::from_be_bytes(be(b, oid)?).to_string().into_bytes(),
        23 => i32::from_be_bytes(be(b, oid)?).to_string().into_bytes(),
        20 => i64::from_be_bytes(be(b, oid)?).to_string().into_bytes(),
        26 => u32::from_be_bytes(be(b, oid)?).to_string().into_bytes(),
        700 => format_f32(f32::from_be_bytes(be(b, oid)?)).into_bytes(),
        701 => format_f64(f64::from_be_bytes(be(b, oid)?)).into_bytes(),
        18 | 19 | 25 | 114 | 1042 | 1043 => b.to_vec(),
        3802 => match b.split_first() {
            Some((1, rest)) => rest.to_vec(),
            _ => return Err(bad(oid, "jsonb version")),
        },
        17 => {
            let mut s = b"\\x".to_vec();
            for x in b {
                s.extend_from_slice(format!("{x:02x}").as_bytes());
            }
            s
        }
        2950 => {
            let b: [u8; 16] = be(b, oid)?;
            let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
            format!("{}-{}-{}-{}-{}", &h[..8], &h[8..12], &h[12..16], &h[16..20], &h[20..]).into_bytes()
        }
        1082 => {
            let d = i32::from_be_bytes(be(b, oid)?);
            match d {
                i32::MAX => b"infinity".to_vec(),
                i32::MIN => b"-infinity".to_vec(),
                _ => date_text(i64::from(d) + EPOCH_DAYS).into_bytes(),
            }
        }
        1114 | 1184 => {
            let t = i64::from_be_bytes(be(b, oid)?);
            match t {
                i64::MAX => b"infinity".to_vec(),
                i64::MIN => b"-infinity".to_vec(),
                _ => {
                    let t = t + EPOCH_DAYS * DAY_MICROS;
                    let (days, micros) = (t.div_euclid(DAY_MICROS), t.rem_euclid(DAY_MICROS));
                    let secs = micros / 1_000_000;
                    let mut s = format!(
                        "{} {:02}:{:02}:{:02}",
                        date_text(days),
                        secs / 3600,
                        secs / 60 % 60,
                        secs % 60
                    );
                    let frac = micros % 1_000_000;
                    if frac != 0 {
                        s.push_str(format!(".{frac:06}").trim_end_matches('0'));
                    }
                    if oid == 1184 {
                        s.push_str("+00");
                    }
                    // A BC date's suffix goes last.
                    if let Some(p) = s.find(" BC") {
                        s = s[..p].to_string() + &s[p + 3..] + " BC";
                    }
                    s.into_bytes()
                }
            }
        }
        1700 => numeric_text(b)?.into_bytes(),
        _ => match element_of(oid) {
            Some(elem) => array_text(b, oid, elem)?,
            None => return Err(unsupported(oid)),
        },
    })
}

/// A text value's binary form (the inverse of [`to_text`]).
pub(crate) fn from_text(oid: u32, t: &[u8]) -> Result<Vec<u8>, MergeError> {
    let s = || std::str::from_utf8(t).map_err(|_| bad(oid, "not UTF-8"));
    let int = || s()?.parse::<i64>().map_err(|_| bad(oid, "integer"));
    Ok(match oid {
        16 => vec![u8::from(t == b"t")],
        21 => i16::try_from(int()?).map_err(|_| MergeError::OutOfRange("smallint"))?.to_be_bytes().to_vec(),
        23 => i32::try_from(int()?).map_err(|_| MergeError::OutOfRange("integer"))?.to_be_bytes().to_vec(),
        20 => int()?.to_be_bytes().to_vec(),
        26 => u32::try_from(int()?).map_err(|_| MergeError::OutOfRange("oid"))?.to_be_bytes().to_vec(),
        700 | 701 => {
            let v = match value::decode(Class::Float8, oid, t)? {
                value::Value::Float(v) => v,
                _ => return Err(bad(oid, "float")),
            };
            if oid == 700 {
                (v as f32).to_be_bytes().to_vec()
            } else {
                v.to_be_bytes().to_vec()
            }
        }
        18 | 19 | 25 | 114 | 1042 | 1043 => t.to_vec(),
        3802 => [&[1u8][..], t].concat(),
        17 => {
            let hex = t.strip_prefix(b"\\x").ok_or_else(|| bad(oid, "bytea hex"))?;
            hex.chunks(2)
                .map(|p| std::str::from_utf8(p).ok().and_then(|h| u8::from_str_radix(h, 16).ok()))
                .collect::<Option<Vec<u8>>>()
                .ok_or_else(|| bad(oid, "bytea hex"))?
        }
        2950 => {
            let hex: Vec<u8> = t.iter().copied().filter(|c| *c != b'-').collect();
            hex.chunks(2)
                .map(|p| std::str::from_utf8(p).ok().and_then(|h| u8::from_str_radix(h, 16).ok()))
                .collect::<Option<Vec<u8>>>()
                .filter(|v| v.len() == 16)
                .ok_or_else(|| bad(oid, "uuid"))?
        }
        1082 | 1114 | 1184 => {
            let class = Class::of(oid);
            let value::Value::Time(v) = value::decode(class, oid, t)? else { return Err(bad(oid, "time")) };
            if oid == 1082 {
                let d = match v {
                    i64::MAX => i32::MAX,
                    i64::MIN => i32::MIN,
                    _ => i32::try_from(v - EPOCH_DAYS).map_err(|_| MergeError::OutOfRange("date"))?,
                };
                d.to_be_bytes().to_vec()
            } else {
                let m = match v {
                    i64::MAX | i64::MIN => v,
                    _ => v - EPOCH_DAYS * DAY_MICROS,
                };
                m.to_be_bytes().to_vec()
            }
        }
        1700 => numeric_binary(&Numeric::parse(s()?)?),
        _ => match element_of(oid) {
            Some(elem) => array_binary(t, oid, elem)?,
            None => return Err(unsupported(oid)),
        },
    })
}

fn date_text(days: i64) -> String {
    // Civil from days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    if y <= 0 {
        format!("{:04}-{m:02}-{d:02} BC", 1 - y)
    } else {
        format!("{y:04}-{m:02}-{d:02}")
    }
}

fn numeric_text(b: &[u8]) -> Result<String, MergeError> {
    let u16_at = |i: usize| {
        b.get(i..i + 2).map(|p| u16::from_be_bytes([p[0], p[1]])).ok_or_else(|| bad(1700, "short"))
    };
    let ndigits = usize::from(u16_at(0)?);
    let weight = i64::from(u16_at(2)? as i16);
    let sign = u16_at(4)?;
    let dscale = usize::from(u16_at(6)?);
    match sign {
        0xC000 => return Ok("NaN".into()),
        0xD000 => return Ok("Infinity".into()),
        0xF000 => return Ok("-Infinity".into()),
        0 | 0x4000 => {}
        _ => return Err(bad(1700, "sign")),
    }
    let digits: Vec<u16> = (0..ndigits).map(|i| u16_at(8 + 2 * i)).collect::<Result<_, _>>()?;
    let digit = |w: i64| -> u16 {
        let i = weight - w;
        if i >= 0 && (i as usize) < digits.len() {
            digits[i as usize]
        } else {
            0
        }
    };
    let mut int = String::new();
    for w in (0..=weight.max(0)).rev() {
        if int.is_empty() {
            if digit(w) != 0 || w == 0 {
                int = digit(w).to_string();
            }
        } else {
            int.push_str(&format!("{:04}", digit(w)));
        }
    }
    let mut frac = String::new();
    let mut w = -1;
    while frac.len() < dscale {
        frac.push_str(&format!("{:04}", digit(w)));
        w -= 1;
    }
    frac.truncate(dscale);
    let neg = sign == 0x4000 && digits.iter().any(|d| *d != 0);
    let mut s = if neg { format!("-{int}") } else { int };
    if dscale > 0 {
        s.push('.');
        s.push_str(&frac);
    }
    Ok(s)
}

fn numeric_binary(n: &Numeric) -> Vec<u8> {
    let (sign, text) = match n {
        Numeric::NaN => (0xC000u16, String::new()),
        Numeric::PosInf => (0xD000, String::new()),
        Numeric::NegInf => (0xF000, String::new()),
        Numeric::Finite(_) => {
            let s = n.to_string();
            match s.strip_prefix('-') {
                Some(rest) => (0x4000, rest.to_string()),
                None => (0, s),
            }
        }
    };
    let (int, frac) = text.split_once('.').unwrap_or((&text, ""));
    let dscale = frac.len() as u16;
    let int = int.trim_start_matches('0');
    let pad_left = (4 - int.len() % 4) % 4;
    let int_padded = "0".repeat(pad_left) + int;
    let pad_right = (4 - frac.len() % 4) % 4;
    let frac_padded = frac.to_string() + &"0".repeat(pad_right);
    let group = |s: &str| {
        s.as_bytes()
            .chunks(4)
            .map(|c| c.iter().fold(0u16, |a, d| a * 10 + u16::from(d - b'0')))
            .collect::<Vec<_>>()
    };
    let mut digits = group(&int_padded);
    let mut weight = digits.len() as i64 - 1;
    digits.extend(group(&frac_padded));
    // Strip leading and trailing zero groups, as PostgreSQL stores it.
    let lead = digits.iter().take_while(|d| **d == 0).count();
    digits.drain(..lead);
    weight -= lead as i64;
    while digits.last() == Some(&0) {
        digits.pop();
    }
    let (sign, weight) = if digits.is_empty() && sign < 0xC000 { (0, 0) } else { (sign, weight) };
    let mut out = Vec::with_capacity(8 + 2 * digits.len());
    out.extend_from_slice(&(digits.len() as u16).to_be_bytes());
    out.extend_from_slice(&(weight as i16).to_be_bytes());
    out.extend_from_slice(&sign.to_be_bytes());
    out.extend_from_slice(&(if sign >= 0xC000 { 0 } else { dscale }).to_be_bytes());
    for d in digits {
        out.extend_from_slice(&d.to_be_bytes());
    }
    out
}

/// A one-dimensional binary array as array text.
fn array_text(b: &[u8], oid: u32, elem: u32) -> Result<Vec<u8>, MergeError> {
    let i32_at = |i: usize| {
        b.get(i..i + 4)
            .map(|p| i32::from_be_bytes([p[0], p[1], p[2], p[3]]))
            .ok_or_else(|| bad(oid, "short array"))
    };
    let ndim = i32_at(0)?;
    if ndim == 0 {
        return Ok(b"{}".to_vec());
    }
    if ndim != 1 {
        return Err(MergeError::unsupported("aggregating multi-dimensional arrays across shards"));
    }
    let len = usize::try_from(i32_at(12)?).map_err(|_| bad(oid, "length"))?;
    let mut p = 20;
    let mut out = b"{".to_vec();
    for i in 0..len {
        if i > 0 {
            out.push(b',');
        }
        let n = i32_at(p)?;
        p += 4;
        if n < 0 {
            out.extend_from_slice(b"NULL");
            continue;
        }
        let e = b.get(p..p + n as usize).ok_or_else(|| bad(oid, "element"))?;
        p += n as usize;
        quote_element(&mut out, &to_text(elem, e)?);
    }
    out.push(b'}');
    Ok(out)
}

fn array_binary(t: &[u8], oid: u32, elem: u32) -> Result<Vec<u8>, MergeError> {
    let elems = parse_array(t, oid)?;
    let mut out = Vec::new();
    if elems.is_empty() {
        out.extend_from_slice(&0i32.to_be_bytes());
        out.extend_from_slice(&0i32.to_be_bytes());
        out.extend_from_slice(&elem.to_be_bytes());
        return Ok(out);
    }
    out.extend_from_slice(&1i32.to_be_bytes());
    out.extend_from_slice(&i32::from(elems.iter().any(Option::is_none)).to_be_bytes());
    out.extend_from_slice(&elem.to_be_bytes());
    out.extend_from_slice(&(elems.len() as i32).to_be_bytes());
    out.extend_from_slice(&1i32.to_be_bytes());
    for e in elems {
        match e {
            None => out.extend_from_slice(&(-1i32).to_be_bytes()),
            Some(v) => {
                let b = from_text(elem, &v)?;
                out.extend_from_slice(&(b.len() as i32).to_be_bytes());
                out.extend_from_slice(&b);
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        let cases: &[(u32, &str)] = &[
            (1700, "0"),
            (1700, "0.000"),
            (1700, "-12345.6789"),
            (1700, "100000000.0000000001"),
            (1700, "0.0001"),
            (1700, "NaN"),
            (20, "-9223372036854775808"),
            (701, "1.5e+300"),
            (700, "0.1"),
            (1082, "2024-02-29"),
            (1082, "0044-03-15 BC"),
            (1114, "1999-12-31 23:59:59.5"),
            (1184, "2030-01-01 00:00:00+00"),
            (2950, "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"),
            (17, "\\x00ff10"),
            (3802, "{\"a\": 1}"),
            (1009, "{a,NULL,\"b c\"}"),
            (1231, "{1.50,-2}"),
        ];
        for (oid, text) in cases {
            let b = from_text(*oid, text.as_bytes()).expect(text);
            assert_eq!(String::from_utf8(to_text(*oid, &b).expect(text)).expect("utf8"), *text, "{oid}");
        }
    }
}
