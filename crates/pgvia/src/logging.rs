//! Log setup (`log_level`, `log_format`) and the slow-query log's SQL scrubbing.

use std::io::IsTerminal;

use route::lex;

use crate::config::LogFormat;

/// Installs the global subscriber. `RUST_LOG`, when set, wins over `level`.
pub fn init(level: &str, format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .or_else(|_| tracing_subscriber::EnvFilter::try_new(level))
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Colour codes only help a terminal; in a log file they hide the level from grep.
    let builder =
        tracing_subscriber::fmt().with_env_filter(filter).with_ansi(std::io::stdout().is_terminal());
    match format {
        LogFormat::Text => builder.with_target(false).fmt_fields(text_fields()).init(),
        // Targets stay in JSON: they let a log pipeline route `pgvia::slow_query` lines.
        LogFormat::Json => builder.json().with_current_span(false).init(),
    }
}

/// The text format's field writer: as tracing's default (`name=value`, the message bare),
/// with control characters in values escaped. Values clients choose (user, database and
/// application names) could otherwise start a line that looks like pgvia's own.
pub fn text_fields() -> impl for<'w> tracing_subscriber::fmt::FormatFields<'w> + 'static {
    use tracing_subscriber::field::MakeExt;
    tracing_subscriber::fmt::format::debug_fn(|w, field, value| {
        let text = format!("{value:?}");
        if field.name() == "message" {
            write!(w, "{}", escape_controls(&text))
        } else {
            write!(w, "{}={}", field.name(), escape_controls(&text))
        }
    })
    .delimited(" ")
}

/// `s` with control characters written as escapes (`\n`, `\r`, `\t`, `\u{1b}`), so one log
/// record stays one line whatever it quotes.
pub fn escape_controls(s: &str) -> std::borrow::Cow<'_, str> {
    if !s.chars().any(char::is_control) {
        return std::borrow::Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&c.escape_unicode().to_string()),
            c => out.push(c),
        }
    }
    std::borrow::Cow::Owned(out)
}

/// Longest query text written to the slow-query log, in bytes.
pub const SLOW_QUERY_TEXT: usize = 500;

/// `sql` with its literals replaced by `?` (strings, escape strings, dollar-quoted strings,
/// numbers), comments dropped and whitespace runs collapsed, cut to `max` bytes: what a log
/// may keep of a query without keeping its data.
pub fn scrub_sql(sql: &str, max: usize) -> String {
    let b = sql.as_bytes();
    let mut out = String::with_capacity(sql.len().min(max + 3));
    let mut i = 0;
    let mut last_space = true;
    let push = |out: &mut String, s: &str, last_space: &mut bool| {
        out.push_str(s);
        *last_space = false;
    };
    while i < b.len() && out.len() < max {
        let c = b[i];
        // Identifiers and keywords (which may contain digits and `$`) are kept whole.
        if c.is_ascii_alphabetic() || c == b'_' || c >= 0x80 {
            let start = i;
            // An escape string E'...' is a literal.
            if (c == b'e' || c == b'E') && b.get(i + 1) == Some(&b'\'') {
                i = lex::skip_string(b, i + 1, true).unwrap_or(b.len());
                push(&mut out, "?", &mut last_space);
                continue;
            }
            while i < b.len()
                && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] == b'$' || b[i] >= 0x80)
            {
                i += 1;
            }
            push(&mut out, &sql[start..i], &mut last_space);
            continue;
        }
        match c {
            b'\'' => {
                i = lex::skip_string(b, i, false).unwrap_or(b.len());
                push(&mut out, "?", &mut last_space);
            }
            b'"' => {
                let start = i;
                i = lex::skip_quoted_identifier(b, i).unwrap_or(b.len());
                push(&mut out, &sql[start..i], &mut last_space);
            }
            b'$' if b.get(i + 1).is_some_and(u8::is_ascii_digit) => {
                // A parameter ($1) is kept.
                let start = i;
                i += 1;
                while i < b.len() && b[i].is_ascii_digit() {
                    i += 1;
                }
                push(&mut out, &sql[start..i], &mut last_space);
            }
            b'$' => match lex::dollar_tag_end(b, i) {
                Some(tag_end) => {
                    let tag = &b[i..tag_end];
                    let body = tag_end;
                    i = lex::find(b, body, tag).map_or(b.len(), |p| p + tag.len());
                    push(&mut out, "?", &mut last_space);
                }
                None => {
                    push(&mut out, "$", &mut last_space);
                    i += 1;
                }
            },
            b'0'..=b'9' => {
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'.' || b[i] == b'_') {
                    i += 1;
                }
                push(&mut out, "?", &mut last_space);
            }
            b'.' if b.get(i + 1).is_some_and(u8::is_ascii_digit) => {
                i += 1;
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                    i += 1;
                }
                push(&mut out, "?", &mut last_space);
            }
            b'-' if b.get(i + 1) == Some(&b'-') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                i = lex::skip_block_comment(b, i).unwrap_or(b.len());
            }
            c if c.is_ascii_whitespace() => {
                if !last_space {
                    out.push(' ');
                    last_space = true;
                }
                i += 1;
            }
            _ => {
                out.push(c as char);
                last_space = false;
                i += 1;
            }
        }
    }
    let mut cut = out.trim_end().len().min(max);
    while !out.is_char_boundary(cut) {
        cut -= 1;
    }
    let truncated = cut < out.trim_end().len() || i < b.len();
    out.truncate(cut);
    if truncated {
        out.push_str("...");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_are_removed() {
        let cases = [
            ("SELECT * FROM t WHERE a = 'secret' AND b = 42", "SELECT * FROM t WHERE a = ? AND b = ?"),
            ("select 'it''s', E'a\\'b', 1.5e3, .5", "select ?, ?, ?, ?"),
            ("SELECT $$x$$ || $tag$ y $ z $tag$, $1, t2.c3", "SELECT ? || ?, $1, t2.c3"),
            (
                "UPDATE \"T 1\" SET x = -7 -- comment 'no'\n WHERE id=3",
                "UPDATE \"T 1\" SET x = -? WHERE id=?",
            ),
            ("/* hi */ SELECT  \n\t1", "SELECT ?"),
            ("/* a /* nested 'x' */ still comment */ SELECT 2", "SELECT ?"),
            ("INSERT INTO t VALUES ('unterminated", "INSERT INTO t VALUES (?"),
        ];
        for (sql, want) in cases {
            assert_eq!(scrub_sql(sql, 500), want, "{sql}");
        }
    }

    #[test]
    fn text_logs_escape_control_characters() {
        use std::sync::{Arc, Mutex};
        #[derive(Clone, Default)]
        struct Sink(Arc<Mutex<Vec<u8>>>);
        impl std::io::Write for Sink {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let sink = Sink::default();
        let writer = sink.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_target(false)
            .fmt_fields(text_fields())
            .with_writer(move || writer.clone())
            .finish();
        let user = "eve\n2026-01-01T00:00:00Z  INFO client connected user=admin\r\t\u{1b}[31m";
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!(user = %user, database = "app", "client connected");
        });
        let out = String::from_utf8(sink.0.lock().map(|b| b.clone()).unwrap_or_default()).unwrap_or_default();
        assert_eq!(out.lines().count(), 1, "{out}");
        assert!(
            out.contains("client connected user=eve\\n2026-01-01T00:00:00Z  INFO client connected user=admin\\r\\t\\u{1b}[31m database=\"app\""),
            "{out}"
        );
    }

    #[test]
    fn truncates_on_char_boundary() {
        let sql = format!("SELECT {}", "é".repeat(400));
        let s = scrub_sql(&sql, 20);
        assert!(s.ends_with("...") && s.len() <= 23, "{s}");
    }

    proptest::proptest! {
        #[test]
        fn never_panics(sql in ".{0,200}") {
            let s = scrub_sql(&sql, 50);
            proptest::prop_assert!(s.len() <= 53);
        }
    }
}
