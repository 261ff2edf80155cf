//! Column values from a DataRow (text format) written straight into a JSON buffer.
//!
//! Nothing here allocates: each value's bytes go from the server's frame into the output
//! through a 256-entry escape table, and a column's [`Shape`] is decided once per result
//! from its type. The mapping is Neon's: `bool` as true/false, `int2`/`int4` and finite
//! `float4`/`float8` as numbers (PostgreSQL's text for them is valid JSON), `json`/`jsonb`
//! embedded, arrays of those recursively, everything else (`int8`, `numeric`, timestamps,
//! `uuid`, `bytea`...) as a string of PostgreSQL's text. In raw-text mode every value is a
//! string of PostgreSQL's text, arrays included (Neon's `Neon-Raw-Text-Output`, which its
//! driver always sends and parses with its own type parsers).

use bytes::{BufMut, BytesMut};

/// How one column's values are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    Scalar(Scalar),
    /// An array whose elements are written as `Scalar`.
    Array(Scalar),
}

/// How one scalar (a value, or an array's element) is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scalar {
    Bool,
    /// Integers: PostgreSQL's text is the JSON number.
    Integer,
    /// Floats: a number when finite, else the string `"NaN"`, `"Infinity"`, `"-Infinity"`.
    Float,
    /// `json`/`jsonb`: embedded as it is.
    Json,
    Text,
}

/// Whether values keep their JSON types or are all PostgreSQL's text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueText {
    Typed,
    Raw,
}

/// The shape for a column of type `oid`. Types pgvia does not know (user types, enums,
/// domains) are text, which is what PostgreSQL sends for them anyway.
pub fn shape_of(oid: u32, text: ValueText) -> Shape {
    if text == ValueText::Raw {
        return Shape::Scalar(Scalar::Text);
    }
    if let Some(s) = scalar_of(oid) {
        return Shape::Scalar(s);
    }
    match array_element(oid) {
        Some(elem) => Shape::Array(scalar_of(elem).unwrap_or(Scalar::Text)),
        None => Shape::Scalar(Scalar::Text),
    }
}

fn scalar_of(oid: u32) -> Option<Scalar> {
    Some(match oid {
        16 => Scalar::Bool,
        21 | 23 => Scalar::Integer,
        700 | 701 => Scalar::Float,
        114 | 3802 => Scalar::Json,
        // Array types are not scalars; everything else without a JSON type is text.
        _ if array_element(oid).is_some() => return None,
        _ => Scalar::Text,
    })
}

/// The element type of the built-in array types whose text uses `,` between elements
/// (every built-in but `box[]`, which uses `;` and is written as text).
fn array_element(oid: u32) -> Option<u32> {
    Some(match oid {
        1000 => 16,   // bool
        1001 => 17,   // bytea
        1002 => 18,   // char
        1003 => 19,   // name
        1005 => 21,   // int2
        1007 => 23,   // int4
        1009 => 25,   // text
        1014 => 1042, // bpchar
        1015 => 1043, // varchar
        1016 => 20,   // int8
        1021 => 700,  // float4
        1022 => 701,  // float8
        1028 => 26,   // oid
        1115 => 1114, // timestamp
        1182 => 1082, // date
        1183 => 1083, // time
        1185 => 1184, // timestamptz
        1187 => 1186, // interval
        1231 => 1700, // numeric
        1270 => 1266, // timetz
        199 => 114,   // json
        3807 => 3802, // jsonb
        2951 => 2950, // uuid
        1041 => 869,  // inet
        651 => 650,   // cidr
        _ => return None,
    })
}

/// What each byte becomes inside a JSON string: 0 = itself, `u` = `\u00XX`, else `\` and
/// that byte. Bytes from 0x80 up are UTF-8 and pass through.
static ESCAPE: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut i = 0;
    while i < 0x20 {
        t[i] = b'u';
        i += 1;
    }
    t[b'"' as usize] = b'"';
    t[b'\\' as usize] = b'\\';
    t[0x08] = b'b';
    t[0x0c] = b'f';
    t[b'\n' as usize] = b'n';
    t[b'\r' as usize] = b'r';
    t[b'\t' as usize] = b't';
    t
};

const HEX: &[u8; 16] = b"0123456789abcdef";

/// Appends `s` as the inside of a JSON string (no quotes), escaping as needed: runs of
/// plain bytes are copied at once.
pub fn escape_into(out: &mut BytesMut, s: &[u8]) {
    let mut start = 0;
    for (i, &b) in s.iter().enumerate() {
        let e = ESCAPE[b as usize];
        if e == 0 {
            continue;
        }
        out.extend_from_slice(&s[start..i]);
        escape_byte(out, b, e);
        start = i + 1;
    }
    out.extend_from_slice(&s[start..]);
}

fn escape_byte(out: &mut BytesMut, b: u8, e: u8) {
    if e == b'u' {
        out.extend_from_slice(&[b'\\', b'u', b'0', b'0', HEX[(b >> 4) as usize], HEX[(b & 15) as usize]]);
    } else {
        out.extend_from_slice(&[b'\\', e]);
    }
}

/// Appends `s` as a JSON string, quotes included.
pub fn string_into(out: &mut BytesMut, s: &[u8]) {
    out.put_u8(b'"');
    escape_into(out, s);
    out.put_u8(b'"');
}

/// Appends one column value (`None` is SQL NULL) in the column's shape.
pub fn value_into(out: &mut BytesMut, shape: Shape, value: Option<&[u8]>) {
    let Some(v) = value else {
        out.extend_from_slice(b"null");
        return;
    };
    match shape {
        Shape::Scalar(s) => scalar_into(out, s, v),
        Shape::Array(elem) => {
            let mark = out.len();
            if array_into(out, elem, v).is_none() {
                // Not the array text PostgreSQL writes: say what it was rather than guess.
                out.truncate(mark);
                string_into(out, v);
            }
        }
    }
}

fn scalar_into(out: &mut BytesMut, s: Scalar, v: &[u8]) {
    match s {
        Scalar::Bool => out.extend_from_slice(if v == b"t" { b"true" } else { b"false" }),
        Scalar::Integer => out.extend_from_slice(v),
        Scalar::Float => match v {
            b"NaN" | b"Infinity" | b"-Infinity" => string_into(out, v),
            _ => out.extend_from_slice(v),
        },
        Scalar::Json => json_into(out, v),
        Scalar::Text => string_into(out, v),
    }
}

/// Embeds a `json`/`jsonb` value. Its text is valid JSON already; a `json` value keeps the
/// whitespace it was written with, and line breaks (only ever outside strings, where JSON
/// forbids them raw) become spaces so that each NDJSON record stays on one line.
fn json_into(out: &mut BytesMut, v: &[u8]) {
    let mut start = 0;
    for (i, &b) in v.iter().enumerate() {
        if b == b'\n' || b == b'\r' {
            out.extend_from_slice(&v[start..i]);
            out.put_u8(b' ');
            start = i + 1;
        }
    }
    out.extend_from_slice(&v[start..]);
}

/// Writes PostgreSQL's array text (`{1,2,NULL}`, `{"a b","c\"d"}`, `{{1,2},{3,4}}`,
/// `[0:1]={1,2}`) as nested JSON arrays. `None` if the text is not well formed.
fn array_into(out: &mut BytesMut, elem: Scalar, v: &[u8]) -> Option<()> {
    // Dimension bounds other than 1 come first, as `[lo:hi]...=`; JSON has no place for them.
    let body = if v.first() == Some(&b'[') { &v[v.iter().position(|&b| b == b'=')? + 1..] } else { v };
    let mut p = Parser { s: body, at: 0 };
    p.array(out, elem, 0)?;
    (p.at == body.len()).then_some(())
}

/// PostgreSQL allows at most 6 array dimensions.
const MAX_DIMS: u32 = 6;

struct Parser<'a> {
    s: &'a [u8],
    at: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.at).copied()
    }

    fn array(&mut self, out: &mut BytesMut, elem: Scalar, depth: u32) -> Option<()> {
        if depth > MAX_DIMS || self.peek()? != b'{' {
            return None;
        }
        self.at += 1;
        out.put_u8(b'[');
        if self.peek()? == b'}' {
            self.at += 1;
            out.put_u8(b']');
            return Some(());
        }
        loop {
            match self.peek()? {
                b'{' => self.array(out, elem, depth + 1)?,
                b'"' => self.quoted(out, elem)?,
                _ => self.unquoted(out, elem)?,
            }
            match self.peek()? {
                b',' => {
                    self.at += 1;
                    out.put_u8(b',');
                }
                b'}' => {
                    self.at += 1;
                    out.put_u8(b']');
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    fn unquoted(&mut self, out: &mut BytesMut, elem: Scalar) -> Option<()> {
        let start = self.at;
        while !matches!(self.peek()?, b',' | b'}') {
            self.at += 1;
        }
        let v = &self.s[start..self.at];
        if v.is_empty() {
            return None;
        }
        if v.eq_ignore_ascii_case(b"NULL") {
            out.extend_from_slice(b"null");
        } else {
            scalar_into(out, elem, v);
        }
        Some(())
    }

    /// A quoted element: `\` escapes the next byte. Text is re-escaped for JSON as it is
    /// read; other shapes (a quoted json element, a quoted number) are unescaped in place.
    fn quoted(&mut self, out: &mut BytesMut, elem: Scalar) -> Option<()> {
        self.at += 1;
        let start = self.at;
        // Most elements have no escapes: find the end first and take the fast path.
        let mut escaped = false;
        loop {
            match self.peek()? {
                b'\\' => {
                    escaped = true;
                    self.at += 2;
                }
                b'"' => break,
                _ => self.at += 1,
            }
        }
        let raw = self.s.get(start..self.at)?;
        self.at += 1;
        if !escaped {
            scalar_into(out, elem, raw);
            return Some(());
        }
        let text = elem == Scalar::Text || (elem == Scalar::Float && !is_finite_text(raw));
        if text {
            out.put_u8(b'"');
        }
        let mut i = 0;
        while i < raw.len() {
            let mut b = raw[i];
            if b == b'\\' {
                i += 1;
                b = *raw.get(i)?;
            }
            if text && ESCAPE[b as usize] != 0 {
                escape_byte(out, b, ESCAPE[b as usize]);
            } else if elem == Scalar::Json && (b == b'\n' || b == b'\r') {
                out.put_u8(b' ');
            } else {
                out.put_u8(b);
            }
            i += 1;
        }
        if text {
            out.put_u8(b'"');
        }
        Some(())
    }
}

fn is_finite_text(v: &[u8]) -> bool {
    !matches!(v, b"NaN" | b"Infinity" | b"-Infinity")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enc(oid: u32, v: &[u8]) -> String {
        let mut out = BytesMut::new();
        value_into(&mut out, shape_of(oid, ValueText::Typed), Some(v));
        String::from_utf8(out.to_vec()).unwrap_or_default()
    }

    #[test]
    fn scalars() {
        assert_eq!(enc(16, b"t"), "true");
        assert_eq!(enc(23, b"-42"), "-42");
        assert_eq!(enc(20, b"9223372036854775807"), "\"9223372036854775807\"");
        assert_eq!(enc(701, b"1e+100"), "1e+100");
        assert_eq!(enc(701, b"-Infinity"), "\"-Infinity\"");
        assert_eq!(enc(25, b"a\"b\\c\n\x01\xc3\xa9"), "\"a\\\"b\\\\c\\n\\u0001\u{e9}\"");
        assert_eq!(enc(114, b"{\"a\":\n1}"), "{\"a\": 1}");
    }

    #[test]
    fn arrays() {
        assert_eq!(enc(1007, b"{1,NULL,3}"), "[1,null,3]");
        assert_eq!(enc(1007, b"{{1,2},{3,4}}"), "[[1,2],[3,4]]");
        assert_eq!(enc(1009, b"{\"a b\",\"c\\\"d\",NULL,\"NULL\"}"), "[\"a b\",\"c\\\"d\",null,\"NULL\"]");
        assert_eq!(enc(3807, b"{\"{\\\"a\\\": 1}\",\"[1, 2]\"}"), "[{\"a\": 1},[1, 2]]");
        assert_eq!(enc(1022, b"{NaN,1.5,-Infinity}"), "[\"NaN\",1.5,\"-Infinity\"]");
        assert_eq!(enc(1007, b"[0:1]={1,2}"), "[1,2]");
        assert_eq!(enc(1007, b"{}"), "[]");
        assert_eq!(enc(1007, b"{1,2"), "\"{1,2\"");
    }
}
