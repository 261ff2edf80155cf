//! SQL-level `PREPARE`, `EXECUTE` and `DEALLOCATE`: where the statement name sits in the text,
//! so it can be swapped for pgvia's name without re-printing the rest.
//!
//! The parser has already accepted the statement and given its (case-folded) name; this only
//! finds the byte range of that name after the leading keywords, skipping whitespace and
//! comments as PostgreSQL's lexer does.

use std::ops::Range;

/// Prefix that keeps SQL-level statements apart from protocol-level ones in the registry:
/// the same text prepared both ways is two different server statements (`PREPARE` names its
/// parameter types by name, Parse by OID). No query from the wire can contain a NUL.
pub const SQL_PREPARE_KEY: &str = "\0PREPARE";

/// The byte range of the statement name in `sql`, which starts (after whitespace and
/// comments) with `keyword` and, for `DEALLOCATE`, an optional `PREPARE`.
pub fn name_span(sql: &str, keyword: &str) -> Option<Range<usize>> {
    let b = sql.as_bytes();
    let mut pos = skip_blank(b, 0);
    pos = keyword_at(b, pos, keyword)?;
    pos = skip_blank(b, pos);
    if keyword.eq_ignore_ascii_case("DEALLOCATE") {
        if let Some(after) = keyword_at(b, pos, "PREPARE") {
            pos = skip_blank(b, after);
        }
    }
    let start = pos;
    if b.get(pos) == Some(&b'"') {
        pos += 1;
        loop {
            match b.get(pos)? {
                b'"' if b.get(pos + 1) == Some(&b'"') => pos += 2,
                b'"' => return Some(start..pos + 1),
                _ => pos += 1,
            }
        }
    }
    while b.get(pos).is_some_and(|&c| c.is_ascii_alphanumeric() || c == b'_' || c == b'$' || c >= 0x80) {
        pos += 1;
    }
    (pos > start).then_some(start..pos)
}

/// Past `keyword` at `pos` (case-insensitive, not followed by an identifier character).
fn keyword_at(b: &[u8], pos: usize, keyword: &str) -> Option<usize> {
    let end = pos + keyword.len();
    let word = b.get(pos..end)?;
    if !word.eq_ignore_ascii_case(keyword.as_bytes()) {
        return None;
    }
    match b.get(end) {
        Some(&c) if c.is_ascii_alphanumeric() || c == b'_' || c == b'$' || c >= 0x80 => None,
        _ => Some(end),
    }
}

/// Skips whitespace, `-- line` and (nested) `/* block */` comments.
fn skip_blank(b: &[u8], mut pos: usize) -> usize {
    loop {
        match (b.get(pos), b.get(pos + 1)) {
            (Some(c), _) if c.is_ascii_whitespace() => pos += 1,
            (Some(b'-'), Some(b'-')) => {
                while b.get(pos).is_some_and(|&c| c != b'\n') {
                    pos += 1;
                }
            }
            (Some(b'/'), Some(b'*')) => {
                let mut depth = 0usize;
                while pos < b.len() {
                    if b[pos..].starts_with(b"/*") {
                        depth += 1;
                        pos += 2;
                    } else if b[pos..].starts_with(b"*/") {
                        depth -= 1;
                        pos += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        pos += 1;
                    }
                }
            }
            _ => return pos,
        }
    }
}

/// The byte range, in `sql` (one statement's text), of the statement name that follows the
/// word `EXECUTE` and folds to `name` (the parser's case-folded spelling): the name in
/// `EXECUTE name`, `EXPLAIN ... EXECUTE name`, `CREATE TABLE ... AS EXECUTE name`. Words
/// inside parentheses, string literals, quoted identifiers and comments are skipped, and an
/// `EXECUTE` followed by anything else (a table called `execute`) is passed over.
pub fn executed_name_span(sql: &str, name: &str) -> Option<Range<usize>> {
    let b = sql.as_bytes();
    let mut tokens = Tokens { b, pos: 0, depth: 0 };
    let mut after_execute = false;
    while let Some((token, depth)) = tokens.next() {
        if after_execute && depth == 0 && folds_to(&b[token.clone()], name) {
            return Some(token);
        }
        after_execute = depth == 0 && b[token].eq_ignore_ascii_case(b"EXECUTE");
    }
    None
}

/// Whether an identifier token, as written, is `folded` once PostgreSQL's lexer has read it:
/// a quoted one with its doubled quotes undone, an unquoted one lower-cased (ASCII only, as
/// for UTF-8 text).
fn folds_to(token: &[u8], folded: &str) -> bool {
    match token.strip_prefix(b"\"").and_then(|t| t.strip_suffix(b"\"")) {
        Some(inner) => {
            let mut unescaped = Vec::with_capacity(inner.len());
            let mut i = 0;
            while i < inner.len() {
                unescaped.push(inner[i]);
                i += if inner[i] == b'"' { 2 } else { 1 };
            }
            unescaped == folded.as_bytes()
        }
        None => {
            token.len() == folded.len()
                && token.iter().zip(folded.bytes()).all(|(a, b)| a.to_ascii_lowercase() == b)
        }
    }
}

/// The tokens of a statement's text that matter for finding a name: words and quoted
/// identifiers, each with the parenthesis depth it is at; everything else is skipped.
struct Tokens<'a> {
    b: &'a [u8],
    pos: usize,
    depth: usize,
}

impl Tokens<'_> {
    fn next(&mut self) -> Option<(Range<usize>, usize)> {
        let b = self.b;
        loop {
            self.pos = skip_blank(b, self.pos);
            let start = self.pos;
            let c = *b.get(start)?;
            match c {
                b'(' => self.depth += 1,
                b')' => self.depth = self.depth.saturating_sub(1),
                b'\'' => {
                    self.pos = end_of_string(b, start + 1, false);
                    continue;
                }
                b'"' => {
                    let mut pos = start + 1;
                    loop {
                        match b.get(pos) {
                            None => break,
                            Some(b'"') if b.get(pos + 1) == Some(&b'"') => pos += 2,
                            Some(b'"') => {
                                pos += 1;
                                break;
                            }
                            Some(_) => pos += 1,
                        }
                    }
                    self.pos = pos;
                    return Some((start..pos, self.depth));
                }
                b'$' => {
                    self.pos = end_of_dollar(b, start);
                    continue;
                }
                c if is_ident_start(c) => {
                    let mut pos = start + 1;
                    while b.get(pos).is_some_and(|&c| is_ident_start(c) || c.is_ascii_digit() || c == b'$') {
                        pos += 1;
                    }
                    // E'...' takes backslash escapes.
                    if pos == start + 1 && c.eq_ignore_ascii_case(&b'E') && b.get(pos) == Some(&b'\'') {
                        self.pos = end_of_string(b, pos + 1, true);
                        continue;
                    }
                    self.pos = pos;
                    return Some((start..pos, self.depth));
                }
                _ => {}
            }
            self.pos = start + 1;
        }
    }
}

fn is_ident_start(c: u8) -> bool {
    c.is_ascii_alphabetic() || c == b'_' || c >= 0x80
}

/// Past the closing quote of a string literal whose text starts at `pos`.
fn end_of_string(b: &[u8], mut pos: usize, backslash: bool) -> usize {
    while let Some(&c) = b.get(pos) {
        match c {
            b'\\' if backslash => pos += 2,
            b'\'' if b.get(pos + 1) == Some(&b'\'') => pos += 2,
            b'\'' => return pos + 1,
            _ => pos += 1,
        }
    }
    pos
}

/// Past a dollar-quoted string starting at `start` (`$tag$ ... $tag$`), or past a lone `$`
/// (a parameter such as `$1`).
fn end_of_dollar(b: &[u8], start: usize) -> usize {
    let mut pos = start + 1;
    while b.get(pos).is_some_and(|&c| is_ident_start(c) || (pos > start + 1 && c.is_ascii_digit())) {
        pos += 1;
    }
    if b.get(pos) != Some(&b'$') {
        return start + 1;
    }
    let delimiter = &b[start..=pos];
    let body = pos + 1;
    match b[body..].windows(delimiter.len()).position(|w| w == delimiter) {
        Some(at) => body + at + delimiter.len(),
        None => b.len(),
    }
}

/// A query that is one SQL-level prepared-statement command pgvia maps onto its registry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SqlStatement<'a> {
    /// `PREPARE name ...`; `span` is where the name is in the text.
    Prepare {
        name: &'a str,
        span: Range<usize>,
    },
    Execute {
        name: &'a str,
        span: Range<usize>,
    },
    /// `DEALLOCATE name`, or `DEALLOCATE ALL` (`None`).
    Deallocate {
        name: Option<&'a str>,
    },
}

impl<'a> SqlStatement<'a> {
    /// Recognises a query made of exactly one such command (anything else, such as several
    /// statements in one query, goes to the server unchanged).
    pub fn of(sql: &str, analysis: &'a route::Analysis) -> Option<Self> {
        if analysis.is_conservative() || analysis.len() != 1 {
            return None;
        }
        let stmt = analysis.statement(0)?;
        Some(match stmt.kind() {
            route::StatementKind::Prepare => {
                Self::Prepare { name: stmt.name()?, span: name_span(sql, "PREPARE")? }
            }
            route::StatementKind::Execute => {
                Self::Execute { name: stmt.name()?, span: name_span(sql, "EXECUTE")? }
            }
            route::StatementKind::Deallocate => Self::Deallocate { name: stmt.name() },
            _ => return None,
        })
    }
}

/// `sql` with the byte range `span` replaced by `name`.
pub fn with_name(sql: &str, span: &Range<usize>, name: &str) -> String {
    let mut out = String::with_capacity(sql.len() + name.len());
    out.push_str(&sql[..span.start]);
    out.push_str(name);
    out.push_str(&sql[span.end..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name<'a>(sql: &'a str, kw: &str) -> Option<&'a str> {
        name_span(sql, kw).map(|r| &sql[r])
    }

    #[test]
    fn finds_the_name_after_keywords_and_comments() {
        assert_eq!(name("PREPARE foo AS SELECT 1", "PREPARE"), Some("foo"));
        assert_eq!(
            name("  /* a /* nested */ c */ prepare\n-- x\n Foo_2(int) AS SELECT $1", "PREPARE"),
            Some("Foo_2")
        );
        assert_eq!(name("EXECUTE \"we\"\"ird\"(1)", "EXECUTE"), Some("\"we\"\"ird\""));
        assert_eq!(name("DEALLOCATE PREPARE p1", "DEALLOCATE"), Some("p1"));
        assert_eq!(name("deallocate p1;", "DEALLOCATE"), Some("p1"));
        assert_eq!(name("DEALLOCATE prepared_one", "DEALLOCATE"), Some("prepared_one"));
        assert_eq!(name("EXECUTEx foo", "EXECUTE"), None);
        assert_eq!(name("EXECUTE (1)", "EXECUTE"), None);
        let sql = "EXECUTE foo(1)";
        assert_eq!(with_name(sql, &name_span(sql, "EXECUTE").unwrap(), "pgvia_7"), "EXECUTE pgvia_7(1)");
    }

    #[test]
    fn finds_the_executed_name_inside_other_statements() {
        let find = |sql: &'static str, name: &str| executed_name_span(sql, name).map(|r| &sql[r]);
        assert_eq!(find(" EXECUTE Foo(1, 'EXECUTE foo')", "foo"), Some("Foo"));
        assert_eq!(
            find("EXPLAIN (ANALYZE, FORMAT 'execute') EXECUTE \"Q\"\"x\"", "Q\"x"),
            Some("\"Q\"\"x\"")
        );
        assert_eq!(find("EXPLAIN /* EXECUTE q */ EXECUTE q", "q"), Some("q"));
        assert_eq!(find("CREATE TABLE execute AS EXECUTE q WITH NO DATA", "q"), Some("q"));
        assert_eq!(find("CREATE TABLE \"execute\" (a) AS EXECUTE q", "q"), Some("q"));
        assert_eq!(find("SELECT $x$ EXECUTE q $x$; EXECUTE q", "q"), Some("q"));
        assert_eq!(find("SELECT E'\\' EXECUTE q'", "q"), None);
        assert_eq!(find("SELECT $1, (EXECUTE q)", "q"), None);
        assert_eq!(find("EXECUTE other", "q"), None);
    }
}
