//! `route-ref FILE...`: pg_query's view of the SQL statements in psql script files, one
//! JSON object per line:
//!
//! ```text
//! {"file":"insert.sql","n":3,"sql":"...","ok":true,"types":["InsertStmt"],"tables":["t"]}
//! ```
//!
//! Scripts are cleaned of psql meta-commands and inline `COPY ... FROM stdin` data, then
//! split into statements with PostgreSQL's parser (falling back to its scanner when a
//! syntax error stops the parser). `types` are the top-level parse node names, `tables`
//! what `pg_query::ParseResult::tables` reports, sorted.
//!
//! This is the reference side of the `route` crate's reference check: `pg_query` (the
//! Protobuf path) lives only in this binary, since it cannot be linked together with
//! `pg_raw_parse`.

use std::fmt::{self, Write as _};
use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::process::ExitCode;

fn main() -> ExitCode {
    let stdout = io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    for path in std::env::args().skip(1) {
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) => {
                eprintln!("route-ref: {path}: {e}");
                return ExitCode::FAILURE;
            }
        };
        let text = String::from_utf8_lossy(&bytes);
        let file = Path::new(&path).file_name().map_or(path.clone(), |f| f.to_string_lossy().into_owned());
        for (n, sql) in statements(&clean_psql(&text)).into_iter().enumerate() {
            if writeln!(out, "{}", describe(&file, n, &sql)).is_err() {
                return ExitCode::FAILURE;
            }
        }
    }
    if out.flush().is_err() {
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

/// Drops what only psql understands: backslash meta-commands (a trailing `\g`-style
/// command ends the statement like `;`) and the data lines of `COPY ... FROM stdin`.
fn clean_psql(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut in_copy_data = false;
    for line in text.lines() {
        if in_copy_data {
            if line.trim_end() == "\\." {
                in_copy_data = false;
            }
            continue;
        }
        let trimmed = line.trim_start();
        if trimmed.starts_with('\\') {
            out.push('\n');
            continue;
        }
        let line = match line.find(" \\g") {
            Some(p) => {
                out.push_str(&line[..p]);
                out.push_str(";\n");
                continue;
            }
            None => line,
        };
        let lower = line.to_ascii_lowercase();
        if lower.contains("from stdin")
            && lower.trim_start().starts_with("copy")
            && lower.trim_end().ends_with(';')
        {
            in_copy_data = true;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// Splits a script into statements the way the server would see them.
fn statements(script: &str) -> Vec<String> {
    let pieces = match pg_query::split_with_parser(script) {
        Ok(p) => p,
        Err(_) => pg_query::split_with_scanner(script).unwrap_or_default(),
    };
    pieces.into_iter().map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned).collect()
}

fn describe(file: &str, n: usize, sql: &str) -> String {
    let mut obj = serde_json::Map::new();
    obj.insert("file".into(), file.into());
    obj.insert("n".into(), n.into());
    obj.insert("sql".into(), sql.into());
    match pg_query::parse(sql, pg_query::ParserOptions::DEFAULT) {
        Ok(result) => {
            let types: Vec<String> = result
                .protobuf
                .stmts
                .iter()
                .map(|s| s.stmt.as_ref().and_then(|n| n.node.as_ref()).map_or_else(String::new, variant_name))
                .collect();
            let mut tables = result.tables();
            tables.sort();
            obj.insert("ok".into(), true.into());
            obj.insert("types".into(), types.into());
            obj.insert("tables".into(), tables.into());
        }
        Err(e) => {
            obj.insert("ok".into(), false.into());
            obj.insert("error".into(), e.to_string().into());
        }
    }
    serde_json::Value::Object(obj).to_string()
}

/// The enum variant's name, from its `Debug` output, stopping at the first `(` so a large
/// tree is not formatted.
fn variant_name(node: &pg_query::NodeEnum) -> String {
    struct UpToParen(String);
    impl fmt::Write for UpToParen {
        fn write_str(&mut self, s: &str) -> fmt::Result {
            match s.find('(') {
                Some(p) => {
                    self.0.push_str(&s[..p]);
                    Err(fmt::Error)
                }
                None => {
                    self.0.push_str(s);
                    Ok(())
                }
            }
        }
    }
    let mut w = UpToParen(String::new());
    // Stopping early is the point: the error is expected.
    let _ = write!(w, "{node:?}");
    w.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn psql_noise_is_removed() {
        let script = "\\set x 1\nSELECT 1;\nCOPY t FROM stdin;\n1\t2\n\\.\nSELECT 2 \\gset\nSELECT 3;\n";
        let cleaned = clean_psql(script);
        assert_eq!(statements(&cleaned), ["SELECT 1", "COPY t FROM stdin", "SELECT 2", "SELECT 3"]);
    }

    #[test]
    fn describes_a_statement() {
        let line = describe("f.sql", 0, "SELECT * FROM b JOIN a USING (id)");
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["types"], serde_json::json!(["SelectStmt"]));
        assert_eq!(v["tables"], serde_json::json!(["a", "b"]));
    }
}
