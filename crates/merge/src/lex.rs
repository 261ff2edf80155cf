//! A small SQL tokenizer, only for cutting the statement text into clauses and items.
//!
//! The raw parse tree tells us *what* a SELECT means but gives only start offsets (and for
//! operators, the operator's offset), never where an expression ends. The shard query is
//! made by text surgery, so we need the spans: tokens with their nesting depth let us split
//! the target list at top-level commas and find the top-level clause keywords. Quoting rules
//! follow PostgreSQL's scanner (standard strings, `E''` escapes, dollar quotes, quoted
//! identifiers, nested block comments).

use crate::error::MergeError;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// An unquoted identifier or keyword.
    Word,
    /// A `"quoted identifier"`.
    Quoted,
    /// A string constant of any kind, or a number.
    Literal,
    /// `(`, `[`
    Open,
    /// `)`, `]`
    Close,
    Comma,
    Semicolon,
    /// Operators and other punctuation (`::`, `.`, `+`, `$1`...).
    Other,
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct Tok {
    pub kind: Kind,
    pub start: usize,
    pub end: usize,
    /// Nesting depth the token sits at (an `Open` and its `Close` sit at the outer depth).
    pub depth: u32,
}

impl Tok {
    pub fn is_word(&self, sql: &str, word: &str) -> bool {
        self.kind == Kind::Word && sql[self.start..self.end].eq_ignore_ascii_case(word)
    }
}

/// Tokenizes `sql`; errors on an unterminated quote or unbalanced parentheses.
pub(crate) fn tokens(sql: &str) -> Result<Vec<Tok>, MergeError> {
    let b = sql.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    let mut depth: u32 = 0;
    let unterminated = || MergeError::Syntax("unterminated quote or comment".into());
    while i < b.len() {
        let c = b[i];
        let start = i;
        let kind = match c {
            b' ' | b'\t' | b'\n' | b'\r' | b'\x0c' => {
                i += 1;
                continue;
            }
            b'-' if b.get(i + 1) == Some(&b'-') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
                continue;
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                let mut nest = 0u32;
                loop {
                    if i + 1 >= b.len() {
                        return Err(unterminated());
                    }
                    if b[i] == b'/' && b[i + 1] == b'*' {
                        nest += 1;
                        i += 2;
                    } else if b[i] == b'*' && b[i + 1] == b'/' {
                        nest -= 1;
                        i += 2;
                        if nest == 0 {
                            break;
                        }
                    } else {
                        i += 1;
                    }
                }
                continue;
            }
            b'\'' => {
                i = quoted(b, i + 1, b'\'', false).ok_or_else(unterminated)?;
                Kind::Literal
            }
            b'"' => {
                i = quoted(b, i + 1, b'"', false).ok_or_else(unterminated)?;
                Kind::Quoted
            }
            b'$' if b.get(i + 1).is_some_and(u8::is_ascii_digit) => {
                i += 1;
                while i < b.len() && b[i].is_ascii_digit() {
                    i += 1;
                }
                Kind::Other
            }
            b'$' => {
                // A dollar quote `$tag$...$tag$`.
                let mut j = i + 1;
                while j < b.len() && (b[j].is_ascii_alphanumeric() || b[j] == b'_') {
                    j += 1;
                }
                if b.get(j) != Some(&b'$') {
                    return Err(MergeError::Syntax("stray '$'".into()));
                }
                let tag = &sql[i..=j];
                let body = j + 1;
                let close = sql[body..].find(tag).ok_or_else(unterminated)?;
                i = body + close + tag.len();
                Kind::Literal
            }
            b'(' | b'[' => {
                i += 1;
                out.push(Tok { kind: Kind::Open, start, end: i, depth });
                depth += 1;
                continue;
            }
            b')' | b']' => {
                i += 1;
                depth = depth.checked_sub(1).ok_or_else(|| MergeError::Syntax("unbalanced ')'".into()))?;
                out.push(Tok { kind: Kind::Close, start, end: i, depth });
                continue;
            }
            b',' => {
                i += 1;
                Kind::Comma
            }
            b';' => {
                i += 1;
                Kind::Semicolon
            }
            c if c.is_ascii_digit() || (c == b'.' && b.get(i + 1).is_some_and(u8::is_ascii_digit)) => {
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'.' || b[i] == b'_') {
                    // An exponent's sign belongs to the number.
                    if (b[i] == b'e' || b[i] == b'E') && matches!(b.get(i + 1), Some(b'+' | b'-')) {
                        i += 1;
                    }
                    i += 1;
                }
                Kind::Literal
            }
            c if c.is_ascii_alphabetic() || c == b'_' || c >= 0x80 => {
                // E'..', B'..', X'..', U&'..' prefixes make string constants.
                let prefixed = match (c.to_ascii_lowercase(), b.get(i + 1), b.get(i + 2)) {
                    (b'e' | b'b' | b'x' | b'n', Some(b'\''), _) => {
                        Some((i + 2, c.eq_ignore_ascii_case(&b'e')))
                    }
                    (b'u', Some(b'&'), Some(b'\'')) => Some((i + 3, false)),
                    _ => None,
                };
                if let Some((body, escapes)) = prefixed {
                    i = quoted(b, body, b'\'', escapes).ok_or_else(unterminated)?;
                    Kind::Literal
                } else {
                    while i < b.len()
                        && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] == b'$' || b[i] >= 0x80)
                    {
                        i += 1;
                    }
                    Kind::Word
                }
            }
            _ => {
                // Operator characters run together (`::`, `<=`, `||`); anything else is one byte.
                const OPS: &[u8] = b"+-*/<>=~!@#%^&|`?:.";
                if OPS.contains(&c) {
                    while i < b.len() && OPS.contains(&b[i]) {
                        if b[i] == b'-' && b.get(i + 1) == Some(&b'-')
                            || b[i] == b'/' && b.get(i + 1) == Some(&b'*')
                        {
                            break;
                        }
                        i += 1;
                    }
                    if i == start {
                        i += 1;
                    }
                } else {
                    i += 1;
                }
                Kind::Other
            }
        };
        out.push(Tok { kind, start, end: i, depth });
    }
    if depth != 0 {
        return Err(MergeError::Syntax("unbalanced '('".into()));
    }
    Ok(out)
}

/// The index just past the closing `quote` of a quoted run starting at `i` (after the
/// opening quote); doubled quotes stay inside; `escapes` honours backslashes (`E''`).
fn quoted(b: &[u8], mut i: usize, quote: u8, escapes: bool) -> Option<usize> {
    while i < b.len() {
        if escapes && b[i] == b'\\' {
            i += 2;
            continue;
        }
        if b[i] == quote {
            if b.get(i + 1) == Some(&quote) {
                i += 2;
                continue;
            }
            return Some(i + 1);
        }
        i += 1;
    }
    None
}

/// Splits tokens `toks` (all at `depth` or deeper) at commas at `depth`: the index ranges
/// of the items.
pub(crate) fn split_commas(toks: &[Tok], depth: u32) -> Vec<std::ops::Range<usize>> {
    let mut items = Vec::new();
    let mut from = 0;
    for (i, t) in toks.iter().enumerate() {
        if t.kind == Kind::Comma && t.depth == depth {
            items.push(from..i);
            from = i + 1;
        }
    }
    if from < toks.len() {
        items.push(from..toks.len());
    }
    items
}

/// The text covered by a run of tokens.
pub(crate) fn text<'s>(sql: &'s str, toks: &[Tok]) -> &'s str {
    match (toks.first(), toks.last()) {
        (Some(a), Some(z)) => &sql[a.start..z.end],
        _ => "",
    }
}

/// Whitespace- and case-insensitive comparison key for expression texts: tokens joined by
/// one space, words lowercased, quoted parts kept as written.
pub(crate) fn normalized(sql: &str, toks: &[Tok]) -> String {
    let mut s = String::new();
    for t in toks {
        if !s.is_empty() {
            s.push(' ');
        }
        let part = &sql[t.start..t.end];
        if t.kind == Kind::Word {
            s.push_str(&part.to_ascii_lowercase());
        } else {
            s.push_str(part);
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_items_and_tracks_depth() {
        let sql = "SELECT a, f(b, 'x,y'), \"c,d\" -- c, d\n FROM t";
        let toks = tokens(sql).expect("lex");
        let from = toks.iter().position(|t| t.is_word(sql, "from")).expect("from");
        let items = split_commas(&toks[1..from], 0);
        let texts: Vec<_> = items.iter().map(|r| text(sql, &toks[1..from][r.clone()])).collect();
        assert_eq!(texts, ["a", "f(b, 'x,y')", "\"c,d\""]);
    }

    #[test]
    fn quotes_and_comments() {
        for sql in ["SELECT $$a)b$$", "SELECT E'a\\'b'", "SELECT /* ( /* ) */ */ 1", "SELECT 'it''s'"] {
            let toks = tokens(sql).expect(sql);
            assert_eq!(toks.len(), 2, "{sql}");
        }
        assert!(tokens("SELECT 'open").is_err());
        assert!(tokens("SELECT (1").is_err());
    }
}
