//! One-dimensional arrays in PostgreSQL's text form: the element type of an array type, reading
//! `{a,"b c",NULL}` into its elements and quoting an element as `array_out` does. Shared by the
//! accumulators that read shards' arrays and those that print merged ones.

use crate::error::MergeError;

/// The element type of an array type's OID (the arrays `array_agg(DISTINCT x)` returns).
pub(crate) fn element_of(array: u32) -> Option<u32> {
    Some(match array {
        1005 => 21,
        1007 => 23,
        1016 => 20,
        1028 => 26,
        1231 => 1700,
        1021 => 700,
        1022 => 701,
        1000 => 16,
        1009 => 25,
        1015 => 1043,
        1014 => 1042,
        1182 => 1082,
        1115 => 1114,
        1185 => 1184,
        2951 => 2950,
        1001 => 17,
        3807 => 3802,
        199 => 114,
        _ => return None,
    })
}

/// A one-dimensional array in PostgreSQL's text form: `{a,"b c",NULL}`.
pub(crate) fn parse_array(text: &[u8], oid: u32) -> Result<Vec<Option<Vec<u8>>>, MergeError> {
    let bad = || MergeError::BadValue { oid, why: "malformed array".into() };
    let start = text.iter().position(|&c| c == b'{').ok_or_else(bad)?;
    let body = text.get(start + 1..text.len().saturating_sub(1)).ok_or_else(bad)?;
    if text.last() != Some(&b'}') {
        return Err(bad());
    }
    let mut out = Vec::new();
    if body.is_empty() {
        return Ok(out);
    }
    let mut i = 0;
    loop {
        if body.get(i) == Some(&b'"') {
            let mut e = Vec::new();
            i += 1;
            loop {
                match body.get(i) {
                    Some(b'\\') => {
                        e.push(*body.get(i + 1).ok_or_else(bad)?);
                        i += 2;
                    }
                    Some(b'"') => {
                        i += 1;
                        break;
                    }
                    Some(&c) => {
                        e.push(c);
                        i += 1;
                    }
                    None => return Err(bad()),
                }
            }
            out.push(Some(e));
        } else {
            if body.get(i) == Some(&b'{') {
                return Err(MergeError::unsupported("aggregating multi-dimensional arrays across shards"));
            }
            let end = body[i..].iter().position(|&c| c == b',').map_or(body.len(), |p| i + p);
            let e = &body[i..end];
            if e.eq_ignore_ascii_case(b"NULL") {
                out.push(None);
            } else {
                out.push(Some(e.to_vec()));
            }
            i = end;
        }
        match body.get(i) {
            Some(b',') => i += 1,
            None => break,
            Some(_) => return Err(bad()),
        }
    }
    Ok(out)
}

/// An array element as `array_out` prints it: quoted when empty, `NULL`-like, or holding
/// quotes, backslashes, braces, commas or white space.
pub(crate) fn quote_element(out: &mut Vec<u8>, v: &[u8]) {
    let needs = v.is_empty()
        || v.eq_ignore_ascii_case(b"NULL")
        || v.iter().any(|c| {
            matches!(c, b'"' | b'\\' | b'{' | b'}' | b',' | b' ' | b'\t' | b'\n' | b'\r' | b'\x0b' | b'\x0c')
        });
    if !needs {
        out.extend_from_slice(v);
        return;
    }
    out.push(b'"');
    for &c in v {
        if c == b'"' || c == b'\\' {
            out.push(b'\\');
        }
        out.push(c);
    }
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrays_parse() {
        let a = parse_array(br#"{1,NULL,"a,b","q\"x"}"#, 1009).expect("array");
        assert_eq!(a, vec![Some(b"1".to_vec()), None, Some(b"a,b".to_vec()), Some(b"q\"x".to_vec())]);
        assert!(parse_array(b"{}", 1009).expect("empty").is_empty());
        assert!(parse_array(b"{\"open", 1009).is_err());
    }
}
