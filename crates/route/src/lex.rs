//! Byte-level steps of PostgreSQL's lexer (with `standard_conforming_strings` on) shared by
//! the code that reads SQL text without parsing it: the shape of a query (`shape.rs`) and the
//! scrubbing of literals for logs in pgvia. Each returns where the thing starting at `start`
//! ends, or `None` when it does not end in the text.

/// The end of a `'...'` string starting at `start`; `backslash` for E'' strings.
pub fn skip_string(b: &[u8], start: usize, backslash: bool) -> Option<usize> {
    let mut i = start + 1;
    while i < b.len() {
        match b[i] {
            b'\\' if backslash => i += 2,
            b'\'' if b.get(i + 1) == Some(&b'\'') => i += 2,
            b'\'' => return Some(i + 1),
            _ => i += 1,
        }
    }
    None
}

/// The end of a `"..."` identifier starting at `start`.
pub fn skip_quoted_identifier(b: &[u8], start: usize) -> Option<usize> {
    let mut i = start + 1;
    while i < b.len() {
        if b[i] == b'"' {
            if b.get(i + 1) == Some(&b'"') {
                i += 2;
                continue;
            }
            return Some(i + 1);
        }
        i += 1;
    }
    None
}

/// The end of a `/* ... */` comment starting at `start`; they nest in PostgreSQL.
pub fn skip_block_comment(b: &[u8], start: usize) -> Option<usize> {
    let mut depth = 0usize;
    let mut i = start;
    while i + 1 < b.len() {
        if b[i] == b'/' && b[i + 1] == b'*' {
            depth += 1;
            i += 2;
        } else if b[i] == b'*' && b[i + 1] == b'/' {
            depth -= 1;
            i += 2;
            if depth == 0 {
                return Some(i);
            }
        } else {
            i += 1;
        }
    }
    None
}

/// If a dollar-quote tag (`$$` or `$tag$`) starts at `i`, the index just past it; `None` for
/// anything else after a `$` (a parameter).
pub fn dollar_tag_end(b: &[u8], i: usize) -> Option<usize> {
    let mut j = i + 1;
    if b.get(j).is_some_and(u8::is_ascii_digit) {
        return None;
    }
    while j < b.len() && (b[j].is_ascii_alphanumeric() || b[j] == b'_' || b[j] >= 0x80) {
        j += 1;
    }
    (b.get(j) == Some(&b'$')).then_some(j + 1)
}

/// Where `needle` first occurs in `hay` at or after `from`.
pub fn find(hay: &[u8], from: usize, needle: &[u8]) -> Option<usize> {
    hay.get(from..)?.windows(needle.len()).position(|w| w == needle).map(|p| p + from)
}
