//! The corpus files: `## construct` header lines name the construct of the items under them;
//! every other non-blank line that is not a `--` comment is one item (one statement), with
//! optional trailing flags `-- ordered` (its ORDER BY fixes the row order, so rows are
//! compared in order) and `-- simple` (a multi-statement text, simple protocol only).

use std::path::Path;

#[derive(Debug, Clone)]
pub struct Item {
    pub construct: String,
    pub sql: String,
    pub ordered: bool,
    pub simple_only: bool,
    /// `file:line`, for reports.
    pub place: String,
}

/// Reads every `*.sql` item file in `dir` except the schema, `regressions.sql` first.
pub fn load(dir: &Path) -> Vec<Item> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .expect("corpus dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "sql"))
        .filter(|p| p.file_name().is_some_and(|n| n != "schema.sql"))
        .collect();
    files.sort_by_key(|p| (p.file_name().is_none_or(|n| n != "regressions.sql"), p.clone()));
    let mut out = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).expect("corpus file");
        out.extend(parse(
            &text,
            &f.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
        ));
    }
    out
}

pub fn parse(text: &str, file: &str) -> Vec<Item> {
    let mut construct = String::from("(none)");
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if let Some(h) = line.strip_prefix("## ") {
            construct = h.trim().to_owned();
            continue;
        }
        if line.is_empty() || line.starts_with("--") {
            continue;
        }
        let (sql, flags) = split_flags(line);
        out.push(Item {
            construct: construct.clone(),
            sql: sql.to_owned(),
            ordered: flags.contains(&"ordered"),
            simple_only: flags.contains(&"simple"),
            place: format!("{file}:{}", n + 1),
        });
    }
    out
}

/// `sql -- ordered simple` into the statement and its flags (a trailing comment whose words
/// are all flags; any other comment stays part of the statement).
fn split_flags(line: &str) -> (&str, Vec<&str>) {
    if let Some(i) = line.rfind(" -- ") {
        let words: Vec<&str> = line[i + 4..].split_whitespace().collect();
        if !words.is_empty() && words.iter().all(|w| matches!(*w, "ordered" | "simple")) {
            return (line[..i].trim_end(), words);
        }
    }
    (line, Vec::new())
}

/// What a statement does to the tables, by its first keyword.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Read,
    Write,
    Control,
}

pub fn kind(sql: &str) -> Kind {
    let upper = sql.trim_start().to_ascii_uppercase();
    let first = upper.split(|c: char| !c.is_ascii_alphabetic()).next().unwrap_or("");
    match first {
        "COPY" if !upper.contains(" FROM STDIN") => Kind::Read,
        "INSERT" | "UPDATE" | "DELETE" | "MERGE" | "TRUNCATE" | "COPY" => Kind::Write,
        "BEGIN" | "START" | "COMMIT" | "END" | "ROLLBACK" | "SAVEPOINT" | "RELEASE" | "ABORT" => {
            Kind::Control
        }
        "WITH" if ["INSERT ", "UPDATE ", "DELETE "].iter().any(|w| upper.contains(w)) => Kind::Write,
        _ if upper.contains(';') => Kind::Write,
        _ => Kind::Read,
    }
}

/// Tables named in `sql`, of `tables` (whole words, case-insensitive).
pub fn tables_named<'a>(sql: &str, tables: &[&'a str]) -> Vec<&'a str> {
    let lower = sql.to_ascii_lowercase();
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    tables
        .iter()
        .copied()
        .filter(|t| {
            lower.match_indices(t).any(|(i, _)| {
                let before = lower[..i].chars().next_back().is_none_or(|c| !word(c));
                let after = lower[i + t.len()..].chars().next().is_none_or(|c| !word(c));
                before && after
            })
        })
        .collect()
}

/// The prepared form of `sql`: literals after a comparison operator, `LIMIT` or `OFFSET`
/// become `$n` parameters (their text sent in text format, the type inferred by the server).
/// Both sides get the same statement and values, so whatever the parameters change in its
/// meaning (a type PostgreSQL infers otherwise) is the same on both; ordinals (`ORDER BY 1`)
/// are never after such a token, so a fixed order stays fixed.
pub fn parameterize(sql: &str) -> (String, Vec<Option<String>>) {
    if sql.trim_start().get(..4).is_some_and(|w| w.eq_ignore_ascii_case("copy")) {
        // PostgreSQL takes no parameters in a COPY, not even in its query: as written.
        return (sql.to_owned(), Vec::new());
    }
    let b = sql.as_bytes();
    let mut out = String::with_capacity(sql.len());
    let mut params = Vec::new();
    let mut i = 0;
    // The last token outside strings, upper-cased, to tell where a literal stands.
    let mut last = String::new();
    while i < b.len() {
        let c = b[i] as char;
        if c == '\'' {
            let start = i;
            let mut value = String::new();
            i += 1;
            while i < b.len() {
                if b[i] == b'\'' {
                    if b.get(i + 1) == Some(&b'\'') {
                        value.push('\'');
                        i += 2;
                        continue;
                    }
                    break;
                }
                let ch = sql[i..].chars().next().unwrap_or(' ');
                value.push(ch);
                i += ch.len_utf8();
            }
            i += 1;
            let prefixed = start > 0 && (b[start - 1] as char).is_ascii_alphanumeric();
            if is_slot(&last) && !prefixed {
                params.push(Some(value));
                out.push_str(&format!("${}", params.len()));
            } else {
                out.push_str(&sql[start..i.min(sql.len())]);
            }
            last = "'".into();
            continue;
        }
        if c.is_ascii_digit() && (i == 0 || !is_word(b[i - 1] as char)) {
            let start = i;
            while i < b.len() && ((b[i] as char).is_ascii_digit() || b[i] == b'.') {
                i += 1;
            }
            let glued = i < b.len() && is_word(b[i] as char);
            if is_slot(&last) && !glued {
                params.push(Some(sql[start..i].to_owned()));
                out.push_str(&format!("${}", params.len()));
            } else {
                out.push_str(&sql[start..i]);
            }
            last = "0".into();
            continue;
        }
        if is_word(c) {
            let start = i;
            while i < b.len() && is_word(b[i] as char) {
                i += 1;
            }
            out.push_str(&sql[start..i]);
            last = sql[start..i].to_ascii_uppercase();
            continue;
        }
        if "=<>!".contains(c) {
            let start = i;
            while i < b.len() && "=<>!".contains(b[i] as char) {
                i += 1;
            }
            out.push_str(&sql[start..i]);
            last = sql[start..i].to_owned();
            continue;
        }
        let ch = sql[i..].chars().next().unwrap_or(' ');
        out.push(ch);
        if !ch.is_whitespace() {
            last = ch.to_string();
        }
        i += ch.len_utf8();
    }
    (out, params)
}

fn is_word(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '$'
}

fn is_slot(last: &str) -> bool {
    matches!(last, "=" | "<>" | "!=" | "<" | ">" | "<=" | ">=" | "LIMIT" | "OFFSET")
}

#[test]
fn parameterize_keeps_ordinals_and_strings() {
    let (s, p) = parameterize("SELECT a FROM t WHERE a = 5 AND b <> 'x''y' AND c > E'q' ORDER BY 1 LIMIT 3");
    assert_eq!(s, "SELECT a FROM t WHERE a = $1 AND b <> $2 AND c > E'q' ORDER BY 1 LIMIT $3");
    assert_eq!(p, vec![Some("5".into()), Some("x'y".into()), Some("3".into())]);
    let (s, p) = parameterize("SELECT t2.x FROM t2 WHERE x=1.5::numeric");
    assert_eq!((s.as_str(), p.len()), ("SELECT t2.x FROM t2 WHERE x=$1::numeric", 1));
}
