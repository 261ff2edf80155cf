//! Shared by the parser benchmarks: the corpus, a counting allocator, and where results go.
//!
//! Neither `pg_query` nor `route` is used here, so each bench binary links only the engine
//! it measures.

pub mod alloc;

use std::path::{Path, PathBuf};

/// The query classes, in report order; each is a file `bench/corpus/<class>.sql`.
pub const CLASSES: &[&str] = &["pgbench", "orm", "tpch", "ddl", "multi"];

/// Reads one class: queries separated by blank lines; chunks that are only comments
/// (file headers) are skipped.
pub fn load_class(class: &str) -> Vec<String> {
    let path = corpus_dir().join(format!("{class}.sql"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    split_queries(&text)
}

pub fn split_queries(text: &str) -> Vec<String> {
    text.split("\n\n")
        .map(str::trim)
        .filter(|q| !q.is_empty() && !q.lines().all(|l| l.trim_start().starts_with("--")))
        .map(str::to_owned)
        .collect()
}

pub fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../corpus")
}

/// Where bench binaries write allocation counts and the report reads them:
/// `$PARSER_BENCH_OUT`, else `target/parser-bench` in the workspace.
pub fn out_dir() -> PathBuf {
    match std::env::var_os("PARSER_BENCH_OUT") {
        Some(d) => PathBuf::from(d),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/parser-bench"),
    }
}

/// Counts allocations per query for each (class, engine) by running `f` over the class'
/// queries `rounds` times after one warm-up round, and writes them to
/// `<out>/allocs-<binary>.json` as `{"class/engine": allocations per query}`.
pub fn write_allocations(binary: &str, results: &[(String, f64)]) {
    let dir = out_dir();
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let map: serde_json::Map<String, serde_json::Value> =
        results.iter().map(|(k, v)| (k.clone(), serde_json::json!(v))).collect();
    let path = dir.join(format!("allocs-{binary}.json"));
    std::fs::write(&path, serde_json::Value::Object(map).to_string())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
}

/// Allocations per query of `f` over `queries`.
pub fn allocations_per_query(queries: &[String], mut f: impl FnMut(&str)) -> f64 {
    for q in queries {
        f(q);
    }
    const ROUNDS: u64 = 20;
    let before = alloc::allocations();
    for _ in 0..ROUNDS {
        for q in queries {
            f(q);
        }
    }
    (alloc::allocations() - before) as f64 / (ROUNDS as f64 * queries.len() as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_class_loads() {
        for class in CLASSES {
            let queries = load_class(class);
            assert!(queries.len() >= 3, "{class}: {}", queries.len());
            assert!(queries.iter().all(|q| !q.starts_with("--")), "{class}: header kept");
        }
    }

    #[test]
    fn splitting() {
        assert_eq!(split_queries("-- header\n\nSELECT 1\n\n\nSELECT\n2\n"), ["SELECT 1", "SELECT\n2"]);
    }
}
