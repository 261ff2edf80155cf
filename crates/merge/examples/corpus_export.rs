//! Writes the differential corpus of `tests/merge_diff.rs` for the driver suites in
//! `compat/` (psycopg 3, pgx), which run it in the extended protocol with parameters:
//!
//! ```text
//! cargo run -p merge --example corpus_export -- DIR
//! ```
//!
//! The queries are the corpus, its uncorrelated subqueries that pgvia computes first, and its
//! parameterized queries. `DIR/reference.sql` fills the reference database (every row),
//! `DIR/shard<N>.sql` shard N
//! (the rows PostgreSQL's hash partitioning puts there), and `DIR/queries.json` lists the
//! queries: `{"sql", "params", "compare", "source"}`, where `sql` has `$n` parameters made
//! out of the source query's literals (as text values; the server infers their types), and
//! `compare` is how its rows compare (`ordered`, `unordered`, `approx`, `count`).
//!
//! A literal stays a literal where a parameter would change the query's meaning or is not
//! merged across shards: an ordinal in ORDER BY / GROUP BY (`ORDER BY 1` sorts by the first
//! column, `ORDER BY $1` by a constant), a HAVING operand (HAVING is evaluated by the merge,
//! which takes constants only), and `string_agg`'s delimiter (a constant string only).

#[path = "../tests/corpus/mod.rs"]
mod corpus;

use std::path::PathBuf;

use corpus::{corpus, database_sql, Compare, PARAMETERIZED, SHARDS, SUBSTITUTED};
use serde_json::json;

/// The previous token of `before` (a word, or one punctuation character), upper-cased.
fn prev_token(before: &str) -> String {
    let t = before.trim_end();
    let word: String = t.chars().rev().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
    if word.is_empty() {
        t.chars().last().map(String::from).unwrap_or_default()
    } else {
        word.chars().rev().collect::<String>().to_uppercase()
    }
}

/// The next token of `after`, upper-cased.
fn next_token(after: &str) -> String {
    let t = after.trim_start();
    let word: String = t.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
    if word.is_empty() {
        t.chars().next().map(String::from).unwrap_or_default()
    } else {
        word.to_uppercase()
    }
}

/// Whether the literal at `start..end` of `sql` must stay a literal (see the module comment).
fn keep_literal(sql: &str, start: usize, end: usize) -> bool {
    let (before, text, after) = (&sql[..start], &sql[start..end], &sql[end..]);
    let upper = before.to_uppercase();
    let numeric = text.starts_with(|c: char| c.is_ascii_digit() || c == '-' || c == '.');
    let (prev, next) = (prev_token(before), next_token(after));
    let ordinal = numeric
        && (prev == "BY" || prev == ",")
        && ["", ",", "DESC", "ASC", "NULLS", "LIMIT", "OFFSET", "ORDER", "HAVING", ";"]
            .contains(&next.as_str())
        && {
            // A `,` continues an ORDER BY / GROUP BY list only after such a clause started.
            let by = upper.rfind(" BY ").unwrap_or(0);
            prev == "BY"
                || ["SELECT", "WHERE", "(", "FILTER"].iter().all(|k| upper.rfind(k).is_none_or(|p| p < by))
        };
    let in_having = upper.rfind(" HAVING ").is_some_and(|h| {
        [" ORDER BY ", " LIMIT ", " OFFSET "].iter().all(|k| upper.rfind(k).is_none_or(|p| p < h))
    });
    let delimiter = text.starts_with('\'')
        && prev == ","
        && before.rfind("string_agg(").is_some_and(|p| before.rfind(')').is_none_or(|q| q < p));
    ordinal || in_having || delimiter
}

/// `sql` with its replaceable literals as `$n`, and their values as text.
fn parameterize(sql: &str) -> (String, Vec<Option<String>>) {
    let mut out = String::new();
    let mut params = Vec::new();
    let mut copied = 0;
    for r in route::constants(sql) {
        if keep_literal(sql, r.start, r.end) {
            continue;
        }
        out.push_str(&sql[copied..r.start]);
        let lit = &sql[r.clone()];
        let value = match lit.strip_prefix('\'').and_then(|l| l.strip_suffix('\'')) {
            Some(inner) => inner.replace("''", "'"),
            None => lit.to_owned(),
        };
        params.push(Some(value));
        out.push_str(&format!("${}", params.len()));
        copied = r.end;
    }
    out.push_str(&sql[copied..]);
    (out, params)
}

fn compare_name(c: Compare) -> &'static str {
    match c {
        Compare::Ordered => "ordered",
        Compare::Unordered => "unordered",
        Compare::Approx => "approx",
        Compare::CountOnly => "count",
    }
}

fn main() -> std::io::Result<()> {
    let Some(dir) = std::env::args().nth(1).map(PathBuf::from) else {
        eprintln!("usage: corpus_export DIR");
        std::process::exit(2);
    };
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join("reference.sql"), database_sql(None))?;
    for s in 0..SHARDS {
        std::fs::write(dir.join(format!("shard{s}.sql")), database_sql(Some(s as u64)))?;
    }
    let mut queries = Vec::new();
    for (sql, how) in corpus() {
        let (param_sql, params) = parameterize(&sql);
        queries
            .push(json!({"sql": param_sql, "params": params, "compare": compare_name(how), "source": sql}));
    }
    // CTEs and subqueries computed first: as written (one with parameters is not computed
    // first, so their literals stay).
    for (sql, how) in SUBSTITUTED {
        let no_params: [Option<String>; 0] = [];
        queries.push(json!({"sql": sql, "params": no_params, "compare": compare_name(*how), "source": sql}));
    }
    for (sql, params, how) in PARAMETERIZED {
        queries.push(json!({"sql": sql, "params": params, "compare": compare_name(*how), "source": sql}));
    }
    let with_params =
        queries.iter().filter(|q| q["params"].as_array().is_some_and(|p| !p.is_empty())).count();
    let text = serde_json::to_string_pretty(&queries).map_err(std::io::Error::other)?;
    std::fs::write(dir.join("queries.json"), text)?;
    println!("{} queries ({with_params} with parameters) in {}", queries.len(), dir.display());
    Ok(())
}
