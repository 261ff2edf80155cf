//! Key values from where a statement keeps them: literals in the analysis, Bind parameters
//! in text or binary format (scalars and one-dimensional arrays), or, for a simple query
//! that shares its shape's analysis, the constants of its own text standing in for `$n`.

use std::borrow::Cow;
use std::ops::Range;

use shard::{KeyError, KeyType, Value};

/// The values of a statement's `$n` parameters.
#[derive(Debug, Clone, Copy)]
pub enum Params<'a> {
    /// No parameters (a simple query analysed as it is).
    None,
    /// A Bind message's parameters: per PostgreSQL's rules no format code means all text,
    /// one applies to all, else one per parameter; `None` is SQL NULL.
    Bind { formats: &'a [i16], values: &'a [Option<&'a [u8]>] },
    /// A simple query analysed through its shape: `$k` is the `k`-th constant of `sql`
    /// (`route::constants`), as written.
    Constants { sql: &'a str, ranges: &'a [Range<usize>] },
}

/// One parameter's value as found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Raw<'a> {
    Null,
    /// Borrowed, but for a string constant with doubled quotes in it.
    Text(Cow<'a, [u8]>),
    Binary(&'a [u8]),
    /// A constant that is not a plain number or string (`E'...'`, `B'...'`): not read.
    Unreadable,
}

impl<'a> Params<'a> {
    /// Parameter `number` (from 1); `None` when there is no such parameter.
    pub fn get(&self, number: u32) -> Option<Raw<'a>> {
        let i = (number as usize).checked_sub(1)?;
        match *self {
            Params::None => None,
            Params::Bind { formats, values } => {
                let Some(value) = *values.get(i)? else {
                    return Some(Raw::Null);
                };
                let format = match formats.len() {
                    0 => 0,
                    1 => formats[0],
                    _ => *formats.get(i)?,
                };
                Some(if format == 1 { Raw::Binary(value) } else { Raw::Text(Cow::Borrowed(value)) })
            }
            Params::Constants { sql, ranges } => Some(constant(sql.get(ranges.get(i)?.clone())?)),
        }
    }
}

/// A constant as the shape scanner found it: a number, a `'...'` string (quotes doubled
/// inside), a `$tag$...$tag$` string, or something not worth reading.
fn constant(text: &str) -> Raw<'_> {
    let b = text.as_bytes();
    match b.first() {
        Some(b'\'') if b.len() >= 2 && b[b.len() - 1] == b'\'' => {
            let body = &text[1..text.len() - 1];
            if body.contains("''") {
                // The one case that copies: a key with a quote in it.
                Raw::Text(Cow::Owned(body.replace("''", "'").into_bytes()))
            } else {
                Raw::Text(Cow::Borrowed(body.as_bytes()))
            }
        }
        Some(b'$') => match text[1..].find('$') {
            Some(end) => {
                let tag_len = end + 2;
                text.get(tag_len..text.len().saturating_sub(tag_len))
                    .map_or(Raw::Unreadable, |s| Raw::Text(Cow::Borrowed(s.as_bytes())))
            }
            None => Raw::Unreadable,
        },
        Some(c) if c.is_ascii_digit() || *c == b'-' || *c == b'.' => Raw::Text(Cow::Borrowed(b)),
        _ => Raw::Unreadable,
    }
}

/// Why a value could not be read as a key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ValueError {
    #[error(transparent)]
    Key(#[from] KeyError),
    #[error("a binary array parameter is malformed")]
    BadArray,
    #[error("an array of {0} dimensions cannot be read as keys")]
    Dimensions(i32),
    #[error("the value is not a constant pgvia can read")]
    Unreadable,
}

/// The key type a parameter type oid stands for, when it is one.
pub fn key_type_of_oid(oid: u32) -> Option<KeyType> {
    Some(match oid {
        21 => KeyType::SmallInt,
        23 => KeyType::Integer,
        20 => KeyType::BigInt,
        25 | 1043 => KeyType::Text,
        2950 => KeyType::Uuid,
        1082 => KeyType::Date,
        1114 => KeyType::Timestamp,
        1184 => KeyType::TimestampTz,
        _ => return None,
    })
}

/// The element type oid of an array type oid we can read.
fn element_oid(array_oid: u32) -> Option<u32> {
    Some(match array_oid {
        1005 => 21,
        1007 => 23,
        1016 => 20,
        1009 => 25,
        1015 => 1043,
        2951 => 2950,
        1182 => 1082,
        1115 => 1114,
        1185 => 1184,
        _ => return None,
    })
}

/// Reads one scalar parameter as a key of type `key`. A binary value is decoded by its
/// declared type when it has one (an `int4` parameter compared with a `bigint` key), else
/// as the key's own type, which is what PostgreSQL infers for an untyped parameter.
pub fn read_scalar(raw: Raw<'_>, type_oid: u32, key: KeyType) -> Result<Option<Value>, ValueError> {
    match raw {
        Raw::Null => Ok(None),
        Raw::Unreadable => Err(ValueError::Unreadable),
        Raw::Text(t) => Ok(Some(key.parse_text(&t)?)),
        Raw::Binary(b) => {
            let declared = key_type_of_oid(type_oid).filter(|t| compatible(*t, key)).unwrap_or(key);
            Ok(Some(declared.parse_binary(b)?))
        }
    }
}

/// Whether a value of type `a` compares with a key of type `b` as the same `Value` kind.
fn compatible(a: KeyType, b: KeyType) -> bool {
    let int = |t| matches!(t, KeyType::SmallInt | KeyType::Integer | KeyType::BigInt);
    a == b || (int(a) && int(b))
}

/// Reads an array parameter (`= ANY($1)`) as keys; NULL elements are left out (they match
/// nothing).
pub fn read_array(raw: Raw<'_>, type_oid: u32, key: KeyType) -> Result<Vec<Value>, ValueError> {
    match raw {
        Raw::Null => Ok(Vec::new()),
        Raw::Unreadable => Err(ValueError::Unreadable),
        Raw::Text(t) => text_array(&t)?.into_iter().flatten().map(|e| Ok(key.parse_text(&e)?)).collect(),
        Raw::Binary(b) => binary_array(b, type_oid, key),
    }
}

/// PostgreSQL's binary array: ndim, has-null flag, element oid, (length, lower bound) per
/// dimension, then each element as a length (-1 for NULL) and its bytes.
fn binary_array(b: &[u8], type_oid: u32, key: KeyType) -> Result<Vec<Value>, ValueError> {
    let mut r = Reader(b);
    let ndim = r.i32()?;
    let _has_null = r.i32()?;
    let elem_oid = r.i32()? as u32;
    match ndim {
        0 => return Ok(Vec::new()),
        1 => {}
        n => return Err(ValueError::Dimensions(n)),
    }
    let len = r.i32()?;
    let _lower = r.i32()?;
    let oid = if elem_oid != 0 { elem_oid } else { element_oid(type_oid).unwrap_or(0) };
    let mut out = Vec::with_capacity(len.clamp(0, 1024) as usize);
    for _ in 0..len.max(0) {
        let n = r.i32()?;
        if n < 0 {
            continue;
        }
        let bytes = r.take(n as usize)?;
        if let Some(v) = read_scalar(Raw::Binary(bytes), oid, key)? {
            out.push(v);
        }
    }
    Ok(out)
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], ValueError> {
        if self.0.len() < n {
            return Err(ValueError::BadArray);
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn i32(&mut self) -> Result<i32, ValueError> {
        let b = self.take(4)?;
        Ok(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }
}

/// PostgreSQL's text array form, one dimension: `{1,2,"a b",NULL}`; elements unquoted and
/// unescaped, `None` for NULL.
fn text_array(t: &[u8]) -> Result<Vec<Option<Vec<u8>>>, ValueError> {
    let s = t.trim_ascii();
    let inner = s.strip_prefix(b"{").and_then(|s| s.strip_suffix(b"}")).ok_or(ValueError::Unreadable)?;
    let mut out = Vec::new();
    let mut i = 0;
    if inner.trim_ascii().is_empty() {
        return Ok(out);
    }
    loop {
        while inner.get(i).is_some_and(u8::is_ascii_whitespace) {
            i += 1;
        }
        let mut element = Vec::new();
        let quoted = inner.get(i) == Some(&b'"');
        if quoted {
            i += 1;
            loop {
                match inner.get(i) {
                    None => return Err(ValueError::Unreadable),
                    Some(b'"') => {
                        i += 1;
                        break;
                    }
                    Some(b'\\') => {
                        element.push(*inner.get(i + 1).ok_or(ValueError::Unreadable)?);
                        i += 2;
                    }
                    Some(&c) => {
                        element.push(c);
                        i += 1;
                    }
                }
            }
        } else {
            while let Some(&c) = inner.get(i) {
                match c {
                    b',' => break,
                    b'{' | b'"' => return Err(ValueError::Unreadable),
                    b'\\' => {
                        element.push(*inner.get(i + 1).ok_or(ValueError::Unreadable)?);
                        i += 2;
                    }
                    _ => {
                        element.push(c);
                        i += 1;
                    }
                }
            }
            let trimmed = element.trim_ascii().to_vec();
            element = trimmed;
        }
        let is_null = !quoted && element.eq_ignore_ascii_case(b"null");
        out.push((!is_null).then_some(element));
        while inner.get(i).is_some_and(u8::is_ascii_whitespace) {
            i += 1;
        }
        match inner.get(i) {
            None => return Ok(out),
            Some(b',') => i += 1,
            Some(_) => return Err(ValueError::Unreadable),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_follow_the_bind_rules() {
        let values = [Some(&b"1"[..]), None, Some(&[0u8, 0, 0, 7][..])];
        let all_text = Params::Bind { formats: &[], values: &values };
        assert_eq!(all_text.get(1), Some(Raw::Text(Cow::Borrowed(b"1"))));
        let per_param = Params::Bind { formats: &[0, 0, 1], values: &values };
        assert_eq!(per_param.get(2), Some(Raw::Null));
        assert_eq!(per_param.get(3), Some(Raw::Binary(&[0, 0, 0, 7])));
        assert_eq!(per_param.get(4), None);
        assert_eq!(per_param.get(0), None);
        let v = read_scalar(Raw::Binary(&[0, 0, 0, 7]), 23, KeyType::BigInt).expect("int4 as bigint");
        assert_eq!(v, Some(Value::Int(7)));
    }

    #[test]
    fn constants_of_the_text() {
        let sql = "SELECT * FROM t WHERE a = 42 AND b = 'x y' AND c = $$z$$ AND d = E'q' AND e = 'it''s'";
        let ranges = route::constants(sql);
        let p = Params::Constants { sql, ranges: &ranges };
        let text = |t: &'static [u8]| Some(Raw::Text(Cow::Borrowed(t)));
        assert_eq!(p.get(1), text(b"42"));
        assert_eq!(p.get(2), text(b"x y"));
        assert_eq!(p.get(3), text(b"z"));
        assert_eq!(p.get(4), Some(Raw::Unreadable));
        assert_eq!(p.get(5), text(b"it's"));
    }

    #[test]
    fn arrays_in_both_formats() {
        let keys = read_array(Raw::Text(Cow::Borrowed(br#"{1, 2 ,NULL,"3"}"#)), 0, KeyType::BigInt)
            .expect("text array");
        assert_eq!(keys, [Value::Int(1), Value::Int(2), Value::Int(3)]);
        let words = read_array(Raw::Text(Cow::Borrowed(br#"{"a,b",c\,d,"e\"f"}"#)), 0, KeyType::Text)
            .expect("text array");
        assert_eq!(
            words,
            [
                Value::Text(b"a,b"[..].into()),
                Value::Text(b"c,d"[..].into()),
                Value::Text(br#"e"f"#[..].into())
            ]
        );
        assert!(read_array(Raw::Text(Cow::Borrowed(b"{{1,2}}")), 0, KeyType::BigInt).is_err());
        let mut bin = Vec::new();
        for v in [1i32, 0, 20, 3, 1] {
            bin.extend_from_slice(&v.to_be_bytes());
        }
        for v in [Some(5i64), None, Some(-6)] {
            match v {
                Some(v) => {
                    bin.extend_from_slice(&8i32.to_be_bytes());
                    bin.extend_from_slice(&v.to_be_bytes());
                }
                None => bin.extend_from_slice(&(-1i32).to_be_bytes()),
            }
        }
        assert_eq!(
            read_array(Raw::Binary(&bin), 1016, KeyType::BigInt),
            Ok(vec![Value::Int(5), Value::Int(-6)])
        );
        assert_eq!(
            read_array(Raw::Binary(&bin[..bin.len() - 1]), 1016, KeyType::BigInt),
            Err(ValueError::BadArray)
        );
    }
}
