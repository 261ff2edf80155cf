//! The three small text formats a PgBouncer setup is written in: its INI file, the libpq-style
//! `key=value` strings of its `[databases]` and `[users]` entries, and `userlist.txt`.
//!
//! Parsing is lenient where PgBouncer is (comments, blank lines, case of section names) and
//! reports everything else as an [`IniError`] naming the line, since a half-read file would
//! produce a configuration that silently differs from the original.

/// One `key = value` line of an INI file, with where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The section, lower-cased (`pgbouncer`, `databases`, `users`, `peers`).
    pub section: String,
    /// The key as written (database and user names are case-sensitive).
    pub key: String,
    /// The value with surrounding spaces removed.
    pub value: String,
    /// 1-based line number.
    pub line: usize,
}

/// Why a file could not be read as PgBouncer writes it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IniError {
    #[error("line {line}: expected `key = value` or `[section]`, found {text:?}")]
    Syntax { line: usize, text: String },
    #[error("line {line}: `{key}` appears before any [section]")]
    NoSection { line: usize, key: String },
    #[error("{what} {text:?}: {why}")]
    Value { what: &'static str, text: String, why: &'static str },
    #[error("userlist line {line}: expected two double-quoted fields, found {text:?}")]
    Userlist { line: usize, text: String },
}

/// Reads an INI file into its entries, in file order.
pub fn parse(text: &str) -> Result<Vec<Entry>, IniError> {
    let mut section: Option<String> = None;
    let mut entries = Vec::new();
    for (index, raw) in text.lines().enumerate() {
        let line = index + 1;
        let trimmed = raw.trim();
        if trimmed.is_empty() || trimmed.starts_with(';') || trimmed.starts_with('#') {
            continue;
        }
        if let Some(name) = trimmed.strip_prefix('[').and_then(|s| s.strip_suffix(']')) {
            section = Some(name.trim().to_ascii_lowercase());
            continue;
        }
        let Some((key, value)) = trimmed.split_once('=') else {
            // `%include file` is PgBouncer's own directive, kept as a key with no value so
            // that the mapping can say it was not followed.
            if let Some(file) = trimmed.strip_prefix("%include") {
                entries.push(Entry {
                    section: section.clone().unwrap_or_default(),
                    key: "%include".into(),
                    value: file.trim().into(),
                    line,
                });
                continue;
            }
            return Err(IniError::Syntax { line, text: trimmed.into() });
        };
        let key = key.trim();
        let Some(section) = &section else {
            return Err(IniError::NoSection { line, key: key.into() });
        };
        entries.push(Entry { section: section.clone(), key: key.into(), value: value.trim().into(), line });
    }
    Ok(entries)
}

/// Splits a libpq-style connection string (`host=db1 port=5432 password='a b'`) into its
/// pairs. Values may be single-quoted, with `\'` and `\\` escapes inside, as libpq reads them.
pub fn conn_pairs(text: &str) -> Result<Vec<(String, String)>, IniError> {
    let err = |why| IniError::Value { what: "connection string", text: text.into(), why };
    let mut pairs = Vec::new();
    let mut rest = text.trim_start();
    while !rest.is_empty() {
        let eq = rest.find('=').ok_or_else(|| err("a word without `=value`"))?;
        let key = rest[..eq].trim();
        if key.is_empty() || key.contains(char::is_whitespace) {
            return Err(err("a key is missing or has spaces in it"));
        }
        rest = rest[eq + 1..].trim_start();
        let mut value = String::new();
        if let Some(quoted) = rest.strip_prefix('\'') {
            let mut chars = quoted.char_indices();
            let mut end = None;
            while let Some((i, c)) = chars.next() {
                match c {
                    '\\' => match chars.next() {
                        Some((_, escaped)) => value.push(escaped),
                        None => return Err(err("a backslash at the end")),
                    },
                    '\'' => {
                        end = Some(i + 1);
                        break;
                    }
                    c => value.push(c),
                }
            }
            let end = end.ok_or_else(|| err("an unterminated quote"))?;
            rest = &quoted[end..];
        } else {
            let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
            value.push_str(&rest[..end]);
            rest = &rest[end..];
        }
        pairs.push((key.to_owned(), value));
        rest = rest.trim_start();
    }
    Ok(pairs)
}

/// Reads PgBouncer's `auth_file`: one `"user" "password"` per line (a `""` inside a field is
/// a literal quote); lines starting with `;` or `#` and blank lines are skipped.
pub fn userlist(text: &str) -> Result<Vec<(String, String)>, IniError> {
    let mut users = Vec::new();
    for (index, raw) in text.lines().enumerate() {
        let trimmed = raw.trim();
        if trimmed.is_empty() || trimmed.starts_with(';') || trimmed.starts_with('#') {
            continue;
        }
        let bad = || IniError::Userlist { line: index + 1, text: trimmed.into() };
        let (user, rest) = quoted_field(trimmed).ok_or_else(bad)?;
        let (password, rest) = quoted_field(rest.trim_start()).ok_or_else(bad)?;
        // PgBouncer ignores anything after the second field.
        let _ = rest;
        users.push((user, password));
    }
    Ok(users)
}

/// One `"..."` field at the start of `text`, and what follows it.
fn quoted_field(text: &str) -> Option<(String, &str)> {
    let body = text.strip_prefix('"')?;
    let mut value = String::new();
    let mut chars = body.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        if c != '"' {
            value.push(c);
        } else if chars.peek().map(|&(_, next)| next) == Some('"') {
            value.push('"');
            chars.next();
        } else {
            return Some((value, &body[i + 1..]));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sections_comments_and_includes() {
        let text = "; top\n[PgBouncer]\nlisten_port = 6432\n# c\n\n[databases]\napp = host=h dbname=a\n%include extra.ini\n";
        let entries = parse(text).expect("parse");
        let keys: Vec<_> =
            entries.iter().map(|e| (e.section.as_str(), e.key.as_str(), e.value.as_str())).collect();
        assert_eq!(
            keys,
            [
                ("pgbouncer", "listen_port", "6432"),
                ("databases", "app", "host=h dbname=a"),
                ("databases", "%include", "extra.ini")
            ]
        );
        assert_eq!(entries[1].line, 7);
    }

    #[test]
    fn a_key_outside_a_section_or_a_stray_word_is_an_error() {
        assert!(matches!(parse("x = 1"), Err(IniError::NoSection { line: 1, .. })));
        assert!(matches!(parse("[pgbouncer]\nnonsense"), Err(IniError::Syntax { line: 2, .. })));
    }

    #[test]
    fn connection_strings_with_quotes() {
        let pairs = conn_pairs(r"host=db1  port=5433 password='it\'s a b' dbname=x").expect("pairs");
        assert_eq!(
            pairs,
            [("host", "db1"), ("port", "5433"), ("password", "it's a b"), ("dbname", "x")]
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
        );
        assert!(conn_pairs("host").is_err());
        assert!(conn_pairs("host='x").is_err());
        assert_eq!(conn_pairs("").expect("empty"), []);
    }

    #[test]
    fn userlist_fields() {
        let users =
            userlist("\"app\" \"secret\"\n; c\n\"we\"\"ird\" \"md5abc\" trailing\n").expect("userlist");
        assert_eq!(users, [("app".into(), "secret".into()), ("we\"ird".into(), "md5abc".into())]);
        assert!(matches!(userlist("app secret"), Err(IniError::Userlist { line: 1, .. })));
    }
}
