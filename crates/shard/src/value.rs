//! Sharding key values: read from the text form (SQL literals, Bind parameters in text format,
//! COPY text) or the binary form (Bind parameters in binary format, binary COPY) of the key
//! column's type, into one comparable, hashable value.
//!
//! Parsing is as strict as PostgreSQL's input functions for the forms it accepts, and refuses
//! anything it does not understand rather than guessing: a wrong key would mean a wrong shard.

use std::fmt;

/// The type of a sharding key column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KeyType {
    SmallInt,
    Integer,
    BigInt,
    /// `text` and `varchar` (the same hash opclass in PostgreSQL).
    Text,
    Uuid,
    Date,
    /// `timestamp without time zone`.
    Timestamp,
    /// `timestamp with time zone`: a text value must carry its UTC offset.
    TimestampTz,
}

/// A key value, normalised so that equal values of one type compare and hash equal.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Value {
    /// Every integer type (PostgreSQL hashes them alike).
    Int(i64),
    /// The bytes, in the database's encoding; compared byte-wise (as `COLLATE "C"`).
    Text(Box<[u8]>),
    Uuid([u8; 16]),
    /// Days since 2000-01-01, PostgreSQL's own representation.
    Date(i32),
    /// Microseconds since 2000-01-01 00:00:00 (UTC for `timestamptz`).
    Timestamp(i64),
}

/// Why a key value could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("invalid input syntax for type {ty}: \"{text}\"")]
    Syntax { ty: KeyType, text: String },
    #[error("value \"{text}\" is out of range for type {ty}")]
    OutOfRange { ty: KeyType, text: String },
    #[error("a binary {ty} value must be {expected} bytes, not {got}")]
    BinaryLength { ty: KeyType, expected: usize, got: usize },
}

impl fmt::Display for KeyType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            KeyType::SmallInt => "smallint",
            KeyType::Integer => "integer",
            KeyType::BigInt => "bigint",
            KeyType::Text => "text",
            KeyType::Uuid => "uuid",
            KeyType::Date => "date",
            KeyType::Timestamp => "timestamp without time zone",
            KeyType::TimestampTz => "timestamp with time zone",
        })
    }
}

impl KeyType {
    /// The type named as in SQL (`int8`, `bigint`, `varchar`, `timestamptz`...).
    pub fn from_sql_name(name: &str) -> Option<KeyType> {
        Some(match name.trim().to_ascii_lowercase().as_str() {
            "smallint" | "int2" => KeyType::SmallInt,
            "integer" | "int" | "int4" => KeyType::Integer,
            "bigint" | "int8" => KeyType::BigInt,
            "text" | "varchar" | "character varying" => KeyType::Text,
            "uuid" => KeyType::Uuid,
            "date" => KeyType::Date,
            "timestamp" | "timestamp without time zone" => KeyType::Timestamp,
            "timestamptz" | "timestamp with time zone" => KeyType::TimestampTz,
            _ => return None,
        })
    }

    /// Reads the text form of a value of this type.
    pub fn parse_text(self, text: &[u8]) -> Result<Value, KeyError> {
        let syntax = || KeyError::Syntax { ty: self, text: String::from_utf8_lossy(text).into_owned() };
        if self == KeyType::Text {
            return Ok(Value::Text(text.into()));
        }
        let s = std::str::from_utf8(text).map_err(|_| syntax())?;
        match self {
            KeyType::SmallInt | KeyType::Integer | KeyType::BigInt => self.parse_int(s).map(Value::Int),
            KeyType::Uuid => parse_uuid(s).map(Value::Uuid).ok_or_else(syntax),
            KeyType::Date => parse_date(s.trim()).map(Value::Date).ok_or_else(syntax),
            KeyType::Timestamp => parse_timestamp(s.trim(), false).map(Value::Timestamp).ok_or_else(syntax),
            KeyType::TimestampTz => parse_timestamp(s.trim(), true).map(Value::Timestamp).ok_or_else(syntax),
            KeyType::Text => Ok(Value::Text(text.into())),
        }
    }

    fn parse_int(self, s: &str) -> Result<i64, KeyError> {
        let t = s.trim();
        let digits = t.strip_prefix(['+', '-']).unwrap_or(t);
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Err(KeyError::Syntax { ty: self, text: s.into() });
        }
        let out_of_range = || KeyError::OutOfRange { ty: self, text: s.into() };
        let v: i64 = t.parse().map_err(|_| out_of_range())?;
        let (lo, hi) = match self {
            KeyType::SmallInt => (i64::from(i16::MIN), i64::from(i16::MAX)),
            KeyType::Integer => (i64::from(i32::MIN), i64::from(i32::MAX)),
            _ => (i64::MIN, i64::MAX),
        };
        if v < lo || v > hi {
            return Err(out_of_range());
        }
        Ok(v)
    }

    /// Reads the binary (network byte order) form of a value of this type.
    pub fn parse_binary(self, bytes: &[u8]) -> Result<Value, KeyError> {
        let exact = |n: usize| -> Result<&[u8], KeyError> {
            if bytes.len() == n {
                Ok(bytes)
            } else {
                Err(KeyError::BinaryLength { ty: self, expected: n, got: bytes.len() })
            }
        };
        Ok(match self {
            KeyType::SmallInt => Value::Int(i64::from(i16::from_be_bytes(array(exact(2)?)))),
            KeyType::Integer => Value::Int(i64::from(i32::from_be_bytes(array(exact(4)?)))),
            KeyType::BigInt => Value::Int(i64::from_be_bytes(array(exact(8)?))),
            KeyType::Text => Value::Text(bytes.into()),
            KeyType::Uuid => Value::Uuid(array(exact(16)?)),
            KeyType::Date => Value::Date(i32::from_be_bytes(array(exact(4)?))),
            KeyType::Timestamp | KeyType::TimestampTz => {
                Value::Timestamp(i64::from_be_bytes(array(exact(8)?)))
            }
        })
    }
}

/// A fixed-size array from a slice already checked to have that length.
fn array<const N: usize>(bytes: &[u8]) -> [u8; N] {
    let mut out = [0u8; N];
    out.copy_from_slice(&bytes[..N]);
    out
}

/// PostgreSQL's uuid input: 32 hex digits, optionally in braces, with a hyphen allowed after
/// any group of four digits.
fn parse_uuid(s: &str) -> Option<[u8; 16]> {
    let s = s.trim();
    let s = match s.strip_prefix('{') {
        Some(inner) => inner.strip_suffix('}')?,
        None => s,
    };
    let mut out = [0u8; 16];
    let mut digits = 0usize;
    let bytes = s.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b == b'-' {
            // A hyphen only after a group of four, never first, last or doubled.
            if digits == 0 || !digits.is_multiple_of(4) || digits == 32 || bytes.get(i + 1) == Some(&b'-') {
                return None;
            }
            i += 1;
            continue;
        }
        let v = (b as char).to_digit(16)? as u8;
        if digits >= 32 {
            return None;
        }
        out[digits / 2] |= if digits.is_multiple_of(2) { v << 4 } else { v };
        digits += 1;
        i += 1;
    }
    (digits == 32).then_some(out)
}

/// Days from 2000-01-01 to `y-m-d` in the proleptic Gregorian calendar.
fn days_from_2000(y: i64, m: u32, d: u32) -> Option<i64> {
    if !(1..=12).contains(&m) || d == 0 || d > days_in_month(y, m) {
        return None;
    }
    // Howard Hinnant's days_from_civil, shifted from 1970 to 2000 (10,957 days).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = i64::from((m + 9) % 12);
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    Some(era * 146_097 + doe - 719_468 - 10_957)
}

fn days_in_month(y: i64, m: u32) -> u32 {
    match m {
        4 | 6 | 9 | 11 => 30,
        2 if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        2 => 28,
        _ => 31,
    }
}

/// `YYYY-MM-DD` (ISO, the form PostgreSQL prints with `DateStyle = ISO`).
fn parse_date(s: &str) -> Option<i32> {
    let mut parts = s.splitn(3, '-');
    let y: i64 = parse_digits(parts.next()?, 4, 4)?;
    let m: u32 = parse_digits(parts.next()?, 1, 2)?;
    let d: u32 = parse_digits(parts.next()?, 1, 2)?;
    i32::try_from(days_from_2000(y, m, d)?).ok()
}

fn parse_digits<T: std::str::FromStr>(s: &str, min: usize, max: usize) -> Option<T> {
    (s.len() >= min && s.len() <= max && s.bytes().all(|b| b.is_ascii_digit())).then(|| s.parse().ok())?
}

/// `YYYY-MM-DD[ T]HH:MM[:SS[.ffffff]]`, and for `timestamptz` a required offset: `Z`, `±HH`,
/// `±HH:MM` or `±HHMM`. Returns microseconds since 2000-01-01 (UTC for `timestamptz`).
fn parse_timestamp(s: &str, with_zone: bool) -> Option<i64> {
    let (date, rest) = s.split_at(s.find([' ', 'T'])?);
    let days = i64::from(parse_date(date)?);
    let rest = &rest[1..];
    let (time, offset_seconds) = if with_zone { split_offset(rest)? } else { (rest, 0) };
    let mut fields = time.splitn(3, ':');
    let h: i64 = parse_digits(fields.next()?, 1, 2)?;
    let mi: i64 = parse_digits(fields.next()?, 2, 2)?;
    let (sec, micros) = match fields.next() {
        None => (0, 0),
        Some(sec) => {
            let (whole, frac) = sec.split_once('.').unwrap_or((sec, ""));
            let whole: i64 = parse_digits(whole, 2, 2)?;
            if frac.len() > 6 || !frac.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            let micros = if frac.is_empty() { 0 } else { format!("{frac:0<6}").parse::<i64>().ok()? };
            (whole, micros)
        }
    };
    if h > 24 || mi > 59 || sec > 59 || (h == 24 && (mi, sec, micros) != (0, 0, 0)) {
        return None;
    }
    let seconds = days * 86_400 + h * 3600 + mi * 60 + sec - offset_seconds;
    seconds.checked_mul(1_000_000)?.checked_add(micros)
}

/// Splits `HH:MM:SS+02:00` into the time and the offset in seconds east of UTC.
fn split_offset(s: &str) -> Option<(&str, i64)> {
    if let Some(time) = s.strip_suffix(['Z', 'z']) {
        return Some((time, 0));
    }
    let at = s.rfind(['+', '-'])?;
    let (time, offset) = s.split_at(at);
    let sign = if offset.starts_with('-') { -1 } else { 1 };
    let digits: String = offset[1..].chars().filter(|c| *c != ':').collect();
    let (h, m) = match digits.len() {
        1 | 2 => (parse_digits::<i64>(&digits, 1, 2)?, 0),
        4 => (parse_digits::<i64>(&digits[..2], 2, 2)?, parse_digits::<i64>(&digits[2..], 2, 2)?),
        _ => return None,
    };
    if h > 15 || m > 59 {
        return None;
    }
    Some((time, sign * (h * 3600 + m * 60)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_as_postgres_reads_them() {
        assert_eq!(KeyType::Integer.parse_text(b" +42 "), Ok(Value::Int(42)));
        assert_eq!(KeyType::SmallInt.parse_text(b"-32768"), Ok(Value::Int(-32768)));
        assert!(matches!(KeyType::SmallInt.parse_text(b"32768"), Err(KeyError::OutOfRange { .. })));
        assert!(matches!(
            KeyType::BigInt.parse_text(b"9223372036854775808"),
            Err(KeyError::OutOfRange { .. })
        ));
        assert!(matches!(KeyType::Integer.parse_text(b"4 2"), Err(KeyError::Syntax { .. })));
        assert!(matches!(KeyType::Integer.parse_text(b"1e3"), Err(KeyError::Syntax { .. })));
        assert_eq!(KeyType::BigInt.parse_binary(&(-5i64).to_be_bytes()), Ok(Value::Int(-5)));
        assert!(KeyType::Integer.parse_binary(&[0, 1]).is_err());
    }

    #[test]
    fn uuids_in_every_accepted_form() {
        let want = KeyType::Uuid.parse_text(b"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11").expect("uuid");
        for form in [
            "A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11",
            "{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}",
            "a0eebc999c0b4ef8bb6d6bb9bd380a11",
            "a0ee-bc99-9c0b-4ef8-bb6d-6bb9-bd38-0a11",
            "{a0eebc99-9c0b4ef8-bb6d6bb9-bd380a11}",
        ] {
            assert_eq!(KeyType::Uuid.parse_text(form.as_bytes()).as_ref(), Ok(&want), "{form}");
        }
        for bad in [
            "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a1",
            "-a0eebc999c0b4ef8bb6d6bb9bd380a11",
            "a0eebc99--9c0b4ef8bb6d6bb9bd380a11",
            "a0eeb-c999c0b4ef8bb6d6bb9bd380a11",
            "a0eebc999c0b4ef8bb6d6bb9bd380a11-",
        ] {
            assert!(KeyType::Uuid.parse_text(bad.as_bytes()).is_err(), "{bad}");
        }
    }

    #[test]
    fn dates_and_timestamps_count_from_2000() {
        assert_eq!(KeyType::Date.parse_text(b"2000-01-01"), Ok(Value::Date(0)));
        assert_eq!(KeyType::Date.parse_text(b"1999-12-31"), Ok(Value::Date(-1)));
        assert_eq!(KeyType::Date.parse_text(b"2024-02-29"), Ok(Value::Date(8825)));
        assert!(KeyType::Date.parse_text(b"2023-02-29").is_err());
        assert_eq!(
            KeyType::Timestamp.parse_text(b"2000-01-02 00:00:01.5"),
            Ok(Value::Timestamp(86_401_500_000))
        );
        assert_eq!(
            KeyType::TimestampTz.parse_text(b"2000-01-01 02:00:00+02"),
            KeyType::TimestampTz.parse_text(b"2000-01-01T00:00:00Z")
        );
        assert!(KeyType::TimestampTz.parse_text(b"2000-01-01 00:00:00").is_err());
    }
}
