//! Routing hints in comments: `/* pgvia: role=primary shard=3 shard_key=42 */` or
//! `-- pgvia: role=replica`. The marker `pgvia:` is lower case; keys and `role` values
//! are not case-sensitive.
//!
//! PostgreSQL's parser throws comments away, so they are found by a small scanner that
//! knows just enough SQL lexing to skip string literals, quoted identifiers and
//! dollar-quoted bodies (a `/* pgvia: ... */` inside a string is data, not a hint). Queries
//! without the word `pgvia` cost one `memmem` pass.

use std::sync::LazyLock;

use crate::model::Role;
use crate::scratch::Scratch;
use crate::store::HintData;

const MARKER: &str = "pgvia";

/// Built once: constructing a searcher per query costs more than the search itself.
static FINDER: LazyLock<memchr::memmem::Finder<'static>> =
    LazyLock::new(|| memchr::memmem::Finder::new(MARKER.as_bytes()));

/// Finds the hints in `text`, copying any string values into the scratch.
pub(crate) fn scan(text: &str, s: &mut Scratch) -> HintData {
    let mut hints = HintData::default();
    if FINDER.find(text.as_bytes()).is_none() {
        return hints;
    }
    for_each_comment(text, |body| {
        let body = body.trim_start();
        let Some(rest) = body.strip_prefix(MARKER) else {
            return;
        };
        // The one-key forms other sharding proxies use: `pgvia_shard: 2`,
        // `pgvia_sharding_key: 42`.
        for (form, key) in [("_sharding_key", "shard_key"), ("_shard", "shard")] {
            if let Some(value) = rest.strip_prefix(form).and_then(|r| r.trim_start().strip_prefix(':')) {
                let (value, _) = read_value(value.trim());
                apply_one(key, value, &mut hints, s);
                return;
            }
        }
        let Some(rest) = rest.trim_start().strip_prefix(':') else {
            return;
        };
        apply(rest, &mut hints, s);
    });
    hints
}

/// Reads `key=value` pairs separated by spaces or commas; the first value given for a key
/// wins.
fn apply(mut rest: &str, hints: &mut HintData, s: &mut Scratch) {
    loop {
        rest = rest.trim_start_matches(|c: char| c.is_whitespace() || c == ',');
        if rest.is_empty() {
            return;
        }
        let key_end = rest.find(|c: char| c == '=' || c.is_whitespace() || c == ',').unwrap_or(rest.len());
        let key = &rest[..key_end];
        rest = rest[key_end..].trim_start();
        let Some(after_eq) = rest.strip_prefix('=') else {
            hints.unrecognized = true;
            continue;
        };
        let (value, after) = read_value(after_eq.trim_start());
        rest = after;
        apply_one(key, value, hints, s);
    }
}

/// One `key=value`; the first value given for a key wins.
fn apply_one(key: &str, value: &str, hints: &mut HintData, s: &mut Scratch) {
    match key.to_ascii_lowercase().as_str() {
        "role" => match value.to_ascii_lowercase().as_str() {
            "primary" => hints.role = hints.role.or(Some(Role::Primary)),
            "replica" => hints.role = hints.role.or(Some(Role::Replica)),
            _ => hints.unrecognized = true,
        },
        "shard" => match value.parse::<u32>() {
            Ok(n) => hints.shard = hints.shard.or(Some(n)),
            Err(_) => hints.unrecognized = true,
        },
        "shard_key" => {
            if hints.shard_key.is_none() {
                hints.shard_key = Some(s.intern(value));
            }
        }
        _ => hints.unrecognized = true,
    }
}

/// A bare word or a value in single or double quotes (doubled quotes escape themselves
/// only in the sense that the value ends at the first lone quote).
fn read_value(rest: &str) -> (&str, &str) {
    match rest.as_bytes().first() {
        Some(&q @ (b'\'' | b'"')) => {
            let body = &rest[1..];
            match body.find(q as char) {
                Some(end) => (&body[..end], &body[end + 1..]),
                None => (body, ""),
            }
        }
        _ => {
            let end = rest.find(|c: char| c.is_whitespace() || c == ',').unwrap_or(rest.len());
            (&rest[..end], &rest[end..])
        }
    }
}

fn is_ident_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'$' || b >= 0x80
}

/// Calls `f` with the body of every comment outside literals and quoted identifiers.
pub(crate) fn for_each_comment(text: &str, mut f: impl FnMut(&str)) {
    let b = text.as_bytes();
    let n = b.len();
    let mut i = 0;
    while i < n {
        match b[i] {
            b'-' if b.get(i + 1) == Some(&b'-') => {
                let end = memchr::memchr(b'\n', &b[i + 2..]).map_or(n, |p| i + 2 + p);
                f(&text[i + 2..end]);
                i = end;
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                let (body_end, next) = block_comment_end(b, i + 2);
                f(&text[i + 2..body_end]);
                i = next;
            }
            b'\'' => {
                let escapes = i > 0 && matches!(b[i - 1], b'e' | b'E') && (i < 2 || !is_ident_byte(b[i - 2]));
                i = quoted_end(b, i + 1, b'\'', escapes);
            }
            b'"' => i = quoted_end(b, i + 1, b'"', false),
            b'$' if i == 0 || !is_ident_byte(b[i - 1]) => i = dollar_end(b, i),
            _ => i += 1,
        }
    }
}

/// Block comments nest in PostgreSQL. Returns (end of body, index after `*/`).
fn block_comment_end(b: &[u8], mut i: usize) -> (usize, usize) {
    let mut depth = 1;
    while i + 1 < b.len() {
        match (b[i], b[i + 1]) {
            (b'/', b'*') => {
                depth += 1;
                i += 2;
            }
            (b'*', b'/') => {
                depth -= 1;
                if depth == 0 {
                    return (i, i + 2);
                }
                i += 2;
            }
            _ => i += 1,
        }
    }
    (b.len(), b.len())
}

/// Index after the closing quote; a doubled quote is an escaped quote.
fn quoted_end(b: &[u8], mut i: usize, quote: u8, backslash_escapes: bool) -> usize {
    while i < b.len() {
        if backslash_escapes && b[i] == b'\\' {
            i += 2;
        } else if b[i] == quote {
            if b.get(i + 1) == Some(&quote) {
                i += 2;
            } else {
                return i + 1;
            }
        } else {
            i += 1;
        }
    }
    b.len()
}

/// `$tag$ ... $tag$` (tag possibly empty). `$1` and a lone `$` are not dollar quotes.
fn dollar_end(b: &[u8], start: usize) -> usize {
    let mut j = start + 1;
    if b.get(j).is_some_and(|c| c.is_ascii_digit()) {
        return j;
    }
    while j < b.len() && b[j] != b'$' && (b[j].is_ascii_alphanumeric() || b[j] == b'_' || b[j] >= 0x80) {
        j += 1;
    }
    if b.get(j) != Some(&b'$') {
        return start + 1;
    }
    let tag = &b[start..=j];
    match memchr::memmem::find(&b[j + 1..], tag) {
        Some(p) => j + 1 + p + tag.len(),
        None => b.len(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn comments(text: &str) -> Vec<String> {
        let mut out = Vec::new();
        for_each_comment(text, |c| out.push(c.to_owned()));
        out
    }

    fn hints(text: &str) -> (HintData, Scratch) {
        let mut s = Scratch::default();
        let h = scan(text, &mut s);
        (h, s)
    }

    #[test]
    fn comments_outside_literals_only() {
        assert_eq!(comments("SELECT 1 -- a\n/* b /* c */ d */ 'x -- y' \"/*z*/\""), [" a", " b /* c */ d "]);
        assert_eq!(comments("SELECT $$ -- no $$, $t$ /* no */ $t$ -- yes"), [" yes"]);
        assert_eq!(comments("SELECT E'\\' -- no' -- yes"), [" yes"]);
        assert_eq!(comments("SELECT 'it''s -- no' -- yes"), [" yes"]);
        assert_eq!(comments("SELECT a$b FROM t WHERE x = $1 -- yes"), [" yes"]);
        assert_eq!(comments("SELECT '/* unterminated"), Vec::<String>::new());
        assert_eq!(comments("/* unterminated"), [" unterminated"]);
    }

    #[test]
    fn hint_keys() {
        let (h, s) = hints("/* pgvia: role=primary, shard=3 shard_key='a b' */ SELECT 1");
        assert_eq!(h.role, Some(Role::Primary));
        assert_eq!(h.shard, Some(3));
        assert_eq!(h.shard_key.map(|k| s.str(k)), Some("a b"));
        assert!(!h.unrecognized);

        let (h, _) = hints("SELECT 1 -- pgvia : ROLE=Replica");
        assert_eq!(h.role, Some(Role::Replica));

        // The marker itself is lower case, so the fast path can look for it with memmem.
        let (h, _) = hints("SELECT 1 -- PGVIA: role=replica");
        assert_eq!(h.role, None);

        let (h, _) = hints("SELECT '/* pgvia: role=primary */'");
        assert_eq!(h.role, None);

        let (h, _) = hints("/* pgvia: role=leader colour=blue shard=x */ SELECT 1");
        assert_eq!((h.role, h.shard, h.unrecognized), (None, None, true));

        let (h, _) = hints("/* pgvia: role=replica */ /* pgvia: role=primary */ SELECT 1");
        assert_eq!(h.role, Some(Role::Replica));

        let (h, s) = hints("/* pgvia_shard: 2 */ SELECT 1 /* pgvia_sharding_key: 'a b' */");
        assert_eq!((h.shard, h.shard_key.map(|k| s.str(k))), (Some(2), Some("a b")));
        let (h, s) = hints("-- pgvia_sharding_key : 42\nSELECT 1");
        assert_eq!((h.shard, h.shard_key.map(|k| s.str(k)), h.unrecognized), (None, Some("42"), false));
        let (h, _) = hints("/* pgvia_shard: two */ SELECT 1");
        assert_eq!((h.shard, h.unrecognized), (None, true));
    }
}
