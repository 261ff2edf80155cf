//! A query's shape: its text with the constants replaced by parameters.
//!
//! Simple-protocol clients inline their values (`... WHERE aid = 4711`), so every text is new
//! and the text-keyed cache never hits: each one was parsed. What routing and session
//! tracking read from a data statement does not depend on its constants, so texts that differ
//! only in them can share one analysis, found by the shape (`... WHERE aid = $1`), much as
//! `pg_stat_statements` groups queries.
//!
//! The scanner follows PostgreSQL's lexer (with `standard_conforming_strings` on, as the
//! parser we use assumes) only as far as it needs to find constants and to step over
//! comments, quoted identifiers and strings. It refuses, and the text is analysed as it is,
//! whenever it is unsure: parameters already in the text, Unicode-escape strings, an
//! unterminated quote or comment, a number running into a name. A string right after a word
//! (`DATE '2026-01-01'`, `INTERVAL '1 day'`, `AS $$ ... $$`) is kept, because the grammar wants
//! a literal there; a shape that still does not parse is simply not shared (see
//! `Analyzer::analyze_query`).

use std::ops::Range;

use crate::lex::{dollar_tag_end, find, skip_block_comment, skip_quoted_identifier, skip_string};

#[cfg(test)]
pub(crate) fn normalize(sql: &str, out: &mut String) -> usize {
    normalize_noting(sql, out, None)
}

/// Writes the shape of `sql` into `out` (cleared first) and returns how many constants it
/// replaced; 0 when there were none or the text is not one to normalise. With `ranges`,
/// notes where each constant was (cleared first; empty when 0 is returned), in the same pass.
pub(crate) fn normalize_noting(
    sql: &str,
    out: &mut String,
    mut ranges: Option<&mut Vec<Range<usize>>>,
) -> usize {
    out.clear();
    if let Some(r) = ranges.as_deref_mut() {
        r.clear();
    }
    let mut copied = 0;
    let mut count = 0;
    let scanned = scan(sql, |range| {
        count += 1;
        out.push_str(&sql[copied..range.start]);
        out.push('$');
        push_number(out, count);
        copied = range.end;
        if let Some(r) = ranges.as_deref_mut() {
            r.push(range);
        }
    });
    if scanned.is_none() || count == 0 {
        out.clear();
        if let Some(r) = ranges {
            r.clear();
        }
        return 0;
    }
    out.push_str(&sql[copied..]);
    count
}

/// The byte ranges of the constants that the shape of `sql` replaces, in order: constant `k`
/// (from 0) became parameter `$k+1`. Empty when the text has no shape of its own.
pub fn constants(sql: &str) -> Vec<Range<usize>> {
    let mut found = Vec::new();
    match scan(sql, |r| found.push(r)) {
        Some(()) => found,
        None => Vec::new(),
    }
}

fn push_number(out: &mut String, n: usize) {
    use std::fmt::Write;
    // Writing to a String cannot fail.
    let _ = write!(out, "{n}");
}

/// Calls `constant` with the range of each replaceable constant; `None` when the text should
/// be analysed as it is.
fn scan(sql: &str, mut constant: impl FnMut(Range<usize>)) -> Option<()> {
    let b = sql.as_bytes();
    let mut i = 0;
    // The last token was a name or keyword: a string after it is probably a typed literal.
    let mut after_word = false;
    // The last byte of the last token: whether a `-` is a sign or a subtraction.
    let mut last = b'(';
    while i < b.len() {
        let c = b[i];
        let token_start = i;
        match c {
            b' ' | b'\t' | b'\n' | b'\r' | b'\x0c' => i += 1,
            b'-' if b.get(i + 1) == Some(&b'-') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => i = skip_block_comment(b, i)?,
            b'\'' => {
                let end = skip_string(b, i, false)?;
                string_constant(i..end, after_word, &mut constant);
                i = end;
                after_word = false;
            }
            b'"' => {
                i = skip_quoted_identifier(b, i)?;
                after_word = true;
            }
            b'$' => {
                // `$1` (a parameter) cannot appear in a simple query PostgreSQL accepts, and
                // numbering ours after it is not worth the trouble.
                let tag_end = dollar_tag_end(b, i)?;
                let tag = &b[i..tag_end];
                let body_end = find(b, tag_end, tag)?;
                let end = body_end + tag.len();
                string_constant(i..end, after_word, &mut constant);
                i = end;
                after_word = false;
            }
            // A digit right after a name is part of it (`t1`); that is handled with the name,
            // so one here follows something else.
            b'0'..=b'9' => {
                let end = number_end(b, i)?;
                constant(i..end);
                i = end;
                after_word = false;
            }
            // A sign belongs to its number where PostgreSQL folds it into the constant
            // (`= -5`, `(-5`, `, -5`), so the shape's value is a parameter, not an expression.
            b'-' if b"(,=<>+-*/%^[".contains(&last)
                && (b.get(i + 1).is_some_and(u8::is_ascii_digit)
                    || (b.get(i + 1) == Some(&b'.') && b.get(i + 2).is_some_and(u8::is_ascii_digit))) =>
            {
                let end = number_end(b, i + 1)?;
                constant(i..end);
                i = end;
                after_word = false;
            }
            b'.' if b.get(i + 1).is_some_and(u8::is_ascii_digit) => {
                // `t.1` would become `t$1`, a different name.
                if i > 0 && is_word_byte(b[i - 1]) {
                    return None;
                }
                let end = number_end(b, i)?;
                constant(i..end);
                i = end;
                after_word = false;
            }
            c if c.is_ascii_alphabetic() || c == b'_' || c >= 0x80 => {
                let quote = b.get(i + 1) == Some(&b'\'');
                match c.to_ascii_lowercase() {
                    // E'...' (backslash escapes), B'...' and X'...' (bit strings), N'...'.
                    b'e' if quote => {
                        let end = skip_string(b, i + 1, true)?;
                        string_constant(i..end, after_word, &mut constant);
                        i = end;
                        after_word = false;
                        continue;
                    }
                    b'b' | b'x' | b'n' if quote => {
                        let end = skip_string(b, i + 1, false)?;
                        string_constant(i..end, after_word, &mut constant);
                        i = end;
                        after_word = false;
                        continue;
                    }
                    // U&'...' and U&"..." with their UESCAPE clause: left to the parser.
                    b'u' if b.get(i + 1) == Some(&b'&') => return None,
                    _ => {}
                }
                let start = i;
                while i < b.len() && is_word_byte(b[i]) {
                    i += 1;
                }
                if sql[start..i].eq_ignore_ascii_case("uescape") {
                    return None;
                }
                after_word = true;
                if starts_operand(&sql[start..i]) {
                    // `WHERE -3 = id`: the sign belongs to the number, as after `(`.
                    last = b'(';
                    continue;
                }
            }
            _ => {
                i += 1;
                after_word = false;
            }
        }
        let comment_or_space =
            c.is_ascii_whitespace() || matches!(&b[token_start..i], [b'-', b'-', ..] | [b'/', b'*', ..]);
        if !comment_or_space {
            last = b[i - 1];
        }
    }
    Some(())
}

fn string_constant(range: Range<usize>, after_word: bool, constant: &mut impl FnMut(Range<usize>)) {
    if !after_word {
        constant(range);
    }
}

/// Reserved words after which an operand starts, so a `-` that follows is a sign (they
/// cannot be column names unquoted, so nothing before the `-` can be subtracted from).
fn starts_operand(word: &str) -> bool {
    const WORDS: [&str; 14] = [
        "where",
        "and",
        "or",
        "not",
        "select",
        "when",
        "then",
        "else",
        "on",
        "having",
        "limit",
        "offset",
        "returning",
        "case",
    ];
    word.len() <= 9 && WORDS.iter().any(|w| w.eq_ignore_ascii_case(word))
}

fn is_word_byte(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c == b'$' || c >= 0x80
}

/// The end of a numeric constant at `start`: decimal with optional fraction and exponent,
/// or 0x/0o/0b integers, with `_` separators. `None` when a name or another dot follows it
/// directly, which PostgreSQL reads in ways not worth copying.
fn number_end(b: &[u8], start: usize) -> Option<usize> {
    let digits = |mut i: usize, ok: fn(u8) -> bool| {
        while i < b.len() && (ok(b[i]) || b[i] == b'_') {
            i += 1;
        }
        i
    };
    let mut i = start;
    if b[i] == b'0' && matches!(b.get(i + 1), Some(b'x' | b'X' | b'o' | b'O' | b'b' | b'B')) {
        i = digits(i + 2, |c| c.is_ascii_hexdigit());
    } else {
        i = digits(i, |c| c.is_ascii_digit());
        if b.get(i) == Some(&b'.') && b.get(i + 1) != Some(&b'.') {
            i = digits(i + 1, |c| c.is_ascii_digit());
        }
        if matches!(b.get(i), Some(b'e' | b'E')) {
            let mut j = i + 1;
            if matches!(b.get(j), Some(b'+' | b'-')) {
                j += 1;
            }
            if b.get(j).is_some_and(u8::is_ascii_digit) {
                i = digits(j, |c| c.is_ascii_digit());
            }
        }
    }
    if b.get(i).is_some_and(|&c| is_word_byte(c) || c == b'.') {
        return None;
    }
    Some(i)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(sql: &str) -> Option<String> {
        let mut out = String::new();
        (normalize(sql, &mut out) > 0).then_some(out)
    }

    #[test]
    fn constants_become_parameters() {
        let cases = [
            ("SELECT abalance FROM pgbench_accounts WHERE aid = 4711;", "SELECT abalance FROM pgbench_accounts WHERE aid = $1;"),
            (
                "UPDATE t SET a = a + -5, b = 'it''s', c = E'x\\'y' WHERE id IN (1, 2.5, .5, 1e-3) AND a - 1 > 0",
                "UPDATE t SET a = a + $1, b = $2, c = $3 WHERE id IN ($4, $5, $6, $7) AND a - $8 > $9",
            ),
            ("INSERT INTO \"T 1\" VALUES ($$a$$, $q$b$q$, X'1F', B'01', 0x1F, 1_000)", "INSERT INTO \"T 1\" VALUES ($1, $2, $3, $4, $5, $6)"),
            ("/* pgvia: role=replica */ SELECT '5'::int -- 7\n", "/* pgvia: role=replica */ SELECT '5'::int -- 7\n"),
            ("SELECT x FROM t WHERE d > DATE '2026-01-01' AND n = 3", "SELECT x FROM t WHERE d > DATE '2026-01-01' AND n = $1"),
            ("SELECT /* a /* nested */ 1 */ 2", "SELECT /* a /* nested */ 1 */ $1"),
            ("SELECT -1 FROM t WHERE -3 = id OR -4 = id AND x - 1 > 0", "SELECT $1 FROM t WHERE $2 = id OR $3 = id AND x - $4 > $5"),
        ];
        for (sql, want) in cases {
            let got = shape(sql).unwrap_or_else(|| sql.to_owned());
            assert_eq!(got, want, "{sql}");
        }
    }

    #[test]
    fn unsure_texts_have_no_shape() {
        for sql in [
            "SELECT $1::int, 5",
            "SELECT U&'d\\0061t\\+000061', 5",
            "SELECT 'a' UESCAPE '!', 5",
            "SELECT 'unterminated, 5",
            "SELECT 5 /* unterminated",
            "SELECT 123abc",
            "SELECT 1.2.3",
            "SELECT a FROM t",
        ] {
            assert_eq!(shape(sql), None, "{sql}");
        }
    }

    #[test]
    fn constants_are_listed_in_order() {
        let sql = "SELECT * FROM t WHERE a = 12 AND b = 'x'";
        let found: Vec<&str> = constants(sql).into_iter().map(|r| &sql[r]).collect();
        assert_eq!(found, ["12", "'x'"]);
    }

    proptest::proptest! {
        #[test]
        fn never_panics(sql in ".{0,200}") {
            let mut out = String::new();
            let n = normalize(&sql, &mut out);
            proptest::prop_assert_eq!(n, constants(&sql).len());
        }
    }
}
