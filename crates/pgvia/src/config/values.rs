//! Scalar value types of the configuration file: ports, durations and secrets.
//!
//! Both accept any TOML value at the serde level and reject the wrong ones with a message
//! that echoes what was written, because serde's stock "invalid type: string, expected u16"
//! does not tell an operator which value they have to fix or what a good one looks like.

use std::fmt;
use std::time::Duration;

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};

/// Whatever the file held where a scalar was expected, kept only so it can be shown back.
#[derive(Debug, Clone, PartialEq)]
enum Raw {
    Int(i64),
    Float(f64),
    Bool(bool),
    Str(String),
    Table,
    Array,
}

impl fmt::Display for Raw {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Raw::Int(v) => write!(f, "{v}"),
            Raw::Float(v) => write!(f, "{v:?}"),
            Raw::Bool(v) => write!(f, "{v}"),
            Raw::Str(v) => write!(f, "{v:?}"),
            Raw::Table => f.write_str("a table"),
            Raw::Array => f.write_str("an array"),
        }
    }
}

struct RawVisitor;

impl<'de> Visitor<'de> for RawVisitor {
    type Value = Raw;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a TOML value")
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Raw, E> {
        Ok(Raw::Bool(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Raw, E> {
        Ok(Raw::Int(v))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Raw, E> {
        // TOML integers are i64, so this only triggers for other formats; saturate for display.
        Ok(Raw::Int(i64::try_from(v).unwrap_or(i64::MAX)))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Raw, E> {
        Ok(Raw::Float(v))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Raw, E> {
        Ok(Raw::Str(v.to_owned()))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Raw, A::Error> {
        // Drain so the deserializer stays consistent; the content itself is irrelevant.
        while map.next_entry::<de::IgnoredAny, de::IgnoredAny>()?.is_some() {}
        Ok(Raw::Table)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Raw, A::Error> {
        while seq.next_element::<de::IgnoredAny>()?.is_some() {}
        Ok(Raw::Array)
    }
}

fn raw<'de, D: Deserializer<'de>>(d: D) -> Result<Raw, D::Error> {
    d.deserialize_any(RawVisitor)
}

/// Deserializes a TCP port: an integer from 1 to 65535.
pub(crate) fn port<'de, D: Deserializer<'de>>(d: D) -> Result<u16, D::Error> {
    let value = raw(d)?;
    match value {
        Raw::Int(n) => match u16::try_from(n) {
            Ok(p) if p != 0 => Ok(p),
            _ => Err(de::Error::custom(format!("expected an integer 1-65535, got {value}"))),
        },
        other => Err(de::Error::custom(format!("expected an integer 1-65535, got {other}"))),
    }
}

/// Deserializes a duration written as a string such as `"250ms"`, `"5s"`, `"10m"` or `"1h"`.
pub(crate) fn duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    match raw(d)? {
        Raw::Str(s) => parse_duration(&s).map_err(de::Error::custom),
        other => {
            Err(de::Error::custom(format!("expected a duration such as \"5s\" or \"250ms\", got {other}")))
        }
    }
}

/// Like [`duration`], for keys that may be absent (per-database and per-user overrides).
pub(crate) fn opt_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    duration(d).map(Some)
}

/// Parses `<integer><unit>` where unit is `ms`, `s`, `m` or `h`.
///
/// Deliberately tiny: one number, one unit, no spaces and no fractions, so every accepted
/// spelling has exactly one meaning.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let bad = || format!("expected a duration such as \"5s\" or \"250ms\", got {text:?}");
    let split = text.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
    let (digits, unit) = text.split_at(split);
    if digits.is_empty() {
        return Err(bad());
    }
    let millis_per_unit: u64 = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        _ => return Err(bad()),
    };
    let too_large = || format!("duration {text:?} is too large");
    let n: u64 = digits.parse().map_err(|_| too_large())?;
    let millis = n.checked_mul(millis_per_unit).ok_or_else(too_large)?;
    Ok(Duration::from_millis(millis))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("5s"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_duration("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("0s"), Ok(Duration::ZERO));
    }

    #[test]
    fn bad_durations_are_rejected_with_the_input_shown() {
        for bad in ["", "5", "s", "5 s", "5S", "1.5s", "-1s", "5sec", "1h30m", " 5s"] {
            let err = parse_duration(bad).expect_err(bad);
            assert_eq!(err, format!("expected a duration such as \"5s\" or \"250ms\", got {bad:?}"));
        }
        assert_eq!(
            parse_duration("99999999999999999999h"),
            Err("duration \"99999999999999999999h\" is too large".to_owned())
        );
        assert!(parse_duration("18446744073709551615h").is_err());
    }

    #[derive(Debug, serde::Deserialize)]
    struct Holder {
        #[serde(deserialize_with = "port")]
        p: u16,
    }

    fn port_err(value: &str) -> String {
        match toml::from_str::<Holder>(&format!("p = {value}")) {
            Ok(h) => panic!("accepted {h:?}"),
            Err(e) => e.message().to_owned(),
        }
    }

    #[test]
    fn ports_show_the_rejected_value() {
        assert_eq!(port_err("\"x\""), "expected an integer 1-65535, got \"x\"");
        assert_eq!(port_err("0"), "expected an integer 1-65535, got 0");
        assert_eq!(port_err("65536"), "expected an integer 1-65535, got 65536");
        assert_eq!(port_err("-1"), "expected an integer 1-65535, got -1");
        assert_eq!(port_err("5432.0"), "expected an integer 1-65535, got 5432.0");
        assert_eq!(port_err("true"), "expected an integer 1-65535, got true");
        assert_eq!(port_err("[1]"), "expected an integer 1-65535, got an array");
        assert_eq!(port_err("{ a = 1 }"), "expected an integer 1-65535, got a table");
        assert!(toml::from_str::<Holder>("p = 65535").is_ok_and(|h| h.p == 65535));
    }
}

/// A secret from the configuration file (a password, a hash or a verifier): read as the text
/// it is, never shown by `Debug`, so a configuration printed for debugging leaks nothing.
#[derive(Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(transparent)]
pub struct Password(String);

impl Password {
    pub fn new(s: impl Into<String>) -> Self {
        Self(s.into())
    }
}

impl std::ops::Deref for Password {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Password {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("\"<redacted>\"")
    }
}
