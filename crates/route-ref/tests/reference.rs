//! The reference check: every statement of PostgreSQL's regression suite (the 233 files
//! shipped in `pg_raw_parse`'s copy of libpg_query) analysed by `route` and by `pg_query`
//! (the Protobuf path, run as the `route-ref` subprocess), comparing whether each parses,
//! the statement types and the table sets.
//!
//! Every disagreement must be listed, with its category, in
//! `tests/reference-disagreements.txt`, whose header explains each category. The test
//! fails on a disagreement that is not listed and on a listed one that no longer occurs.
//! After a deliberate change, regenerate the list with
//! `ROUTE_REF_BLESS=1 cargo test -p route-ref --test reference` and review the diff.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use route::{Analysis, Analyzer, AnalyzerOptions, Outcome, StatementKind};

const LIST: &str = "tests/reference-disagreements.txt";

/// The regression SQL inside the `pg_raw_parse` package, found through `cargo metadata`
/// so it works wherever cargo keeps its sources.
fn corpus_dir() -> PathBuf {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../Cargo.toml");
    let metadata = |offline: bool| {
        let mut cmd = Command::new(&cargo);
        cmd.args(["metadata", "--format-version", "1", "--manifest-path"]).arg(&manifest);
        if offline {
            cmd.arg("--offline");
        }
        cmd.output().expect("cargo metadata runs")
    };
    // Offline first: the sources are on disk once this test is built. Online only if some
    // package of the workspace was never downloaded.
    let mut output = metadata(true);
    if !output.status.success() {
        output = metadata(false);
    }
    assert!(output.status.success(), "cargo metadata: {}", String::from_utf8_lossy(&output.stderr));
    let meta: serde_json::Value = serde_json::from_slice(&output.stdout).expect("metadata is JSON");
    let package = meta["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .find(|p| p["name"] == "pg_raw_parse")
        .expect("pg_raw_parse is a dependency");
    let manifest_path = PathBuf::from(package["manifest_path"].as_str().expect("manifest_path"));
    manifest_path.parent().expect("package dir").join("libpg_query/test/sql/postgres_regress")
}

fn corpus_files() -> Vec<PathBuf> {
    let dir = corpus_dir();
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "sql"))
        .collect();
    files.sort();
    files
}

/// One disagreement: `(category, "file:n")` → detail.
type Found = BTreeMap<(String, String), String>;

fn compare(analyzer: &Analyzer, line: &str, found: &mut Found, stats: &mut BTreeMap<&'static str, usize>) {
    let v: serde_json::Value = serde_json::from_str(line).expect("route-ref prints JSON");
    let at = format!("{}:{}", v["file"].as_str().unwrap_or("?"), v["n"]);
    let sql = v["sql"].as_str().unwrap_or("");
    let ours = analyzer.analyze_uncached(sql, &[]);
    let theirs_ok = v["ok"].as_bool().unwrap_or(false);
    let mut add = |cat: &str, detail: String| {
        found.insert((cat.to_owned(), at.clone()), detail);
    };
    match (theirs_ok, ours.outcome()) {
        (true, Outcome::Parsed) => {}
        (false, Outcome::ParseError) => {
            *stats.entry("both rejected").or_default() += 1;
            return;
        }
        (true, other) => {
            add("outcome", format!("pg_query parsed it, route: {}", other.as_str()));
            return;
        }
        (false, other) => {
            add("outcome", format!("pg_query rejected it, route: {}", other.as_str()));
            return;
        }
    }
    *stats.entry("both parsed").or_default() += 1;

    let their_types: Vec<&str> =
        v["types"].as_array().map(|a| a.iter().filter_map(|t| t.as_str()).collect()).unwrap_or_default();
    let our_types: Vec<&str> = ours.statements().map(|s| s.tag()).collect();
    // prost spells a few node names differently (`AlterTsconfigurationStmt`).
    let same_types = their_types.len() == our_types.len()
        && their_types.iter().zip(&our_types).all(|(a, b)| a.eq_ignore_ascii_case(b));
    if !same_types {
        add("kind", format!("pg_query {their_types:?}, route {our_types:?}"));
    } else {
        *stats.entry("same statement types").or_default() += 1;
    }

    let theirs: BTreeSet<String> = v["tables"]
        .as_array()
        .map(|a| a.iter().filter_map(|t| t.as_str().map(str::to_owned)).collect())
        .unwrap_or_default();
    let mine: BTreeSet<String> = ours.statements().flat_map(|s| s.tables().map(|t| t.to_string())).collect();
    if theirs == mine {
        *stats.entry("same tables").or_default() += 1;
        return;
    }
    let missing: Vec<&String> = theirs.difference(&mine).collect();
    let extra: Vec<&String> = mine.difference(&theirs).collect();
    let category = categorize(&ours, sql, &missing, &extra);
    add(category, format!("pg_query only {missing:?}, route only {extra:?}"));
}

/// Names the reason for a table-set difference where it can be recognised mechanically;
/// the header of the list file explains each category.
fn categorize(ours: &Analysis, sql: &str, missing: &[&String], extra: &[&String]) -> &'static str {
    let lower = sql.to_ascii_lowercase();
    if !missing.is_empty() && extra.is_empty() {
        let all_ctes = missing.iter().all(|m| lower.contains(&format!("{m} as")));
        return if all_ctes && lower.contains("with") { "tables-cte-scoping" } else { "tables-other" };
    }
    if !missing.is_empty() {
        return "tables-other";
    }
    let kinds: Vec<StatementKind> =
        ours.statements().flat_map(|s| std::iter::once(s.kind()).chain(s.target())).collect();
    if kinds.iter().any(|k| matches!(k, StatementKind::DeclareCursor { .. })) {
        "tables-unwalked-declare"
    } else if kinds.contains(&StatementKind::Prepare) {
        "tables-unwalked-prepare"
    } else if lower.contains("tablesample") {
        "tables-unwalked-tablesample"
    } else if lower.replace("insert into", "").replace("merge into", "").contains(" into ") {
        "tables-unwalked-select-into"
    } else {
        "tables-unwalked-subquery"
    }
}

#[test]
fn regression_suite_agrees_with_pg_query() {
    let files = corpus_files();
    assert_eq!(files.len(), 233, "the regression corpus has 233 files");
    let output = Command::new(env!("CARGO_BIN_EXE_route-ref")).args(&files).output().expect("route-ref runs");
    assert!(output.status.success(), "route-ref: {}", String::from_utf8_lossy(&output.stderr));
    let stdout = String::from_utf8(output.stdout).expect("UTF-8 JSON");

    let analyzer =
        Analyzer::new(AnalyzerOptions { cache_entries: 0, ..Default::default() }).expect("options");
    let mut found = Found::new();
    let mut stats = BTreeMap::new();
    let mut total = 0;
    for line in stdout.lines() {
        total += 1;
        compare(&analyzer, line, &mut found, &mut stats);
    }
    let mut by_category: BTreeMap<&str, usize> = BTreeMap::new();
    for (cat, _) in found.keys() {
        *by_category.entry(cat).or_default() += 1;
    }
    println!("{total} statements; {stats:?}; disagreements by category: {by_category:?}");
    assert!(total > 40_000, "expected the whole corpus, got {total} statements");

    let list_path = Path::new(env!("CARGO_MANIFEST_DIR")).join(LIST);
    let listed = std::fs::read_to_string(&list_path).unwrap_or_default();
    if std::env::var_os("ROUTE_REF_BLESS").is_some() {
        bless(&list_path, &listed, &found);
        return;
    }
    let expected: BTreeSet<(String, String)> = listed
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| {
            let mut parts = l.split('\t');
            Some((parts.next()?.to_owned(), parts.next()?.to_owned()))
        })
        .collect();
    let actual: BTreeSet<(String, String)> = found.keys().cloned().collect();
    let new: Vec<String> =
        actual.difference(&expected).map(|k| format!("{}\t{}\t{}", k.0, k.1, found[k])).collect();
    let gone: Vec<&(String, String)> = expected.difference(&actual).collect();
    assert!(
        new.is_empty() && gone.is_empty(),
        "reference check changed ({} new, {} no longer occurring); review and bless with \
         ROUTE_REF_BLESS=1.\nnew:\n{}\ngone:\n{:?}",
        new.len(),
        gone.len(),
        new.join("\n"),
        gone
    );
}

/// Rewrites the list, keeping its header (the category explanations).
fn bless(path: &Path, old: &str, found: &Found) {
    let mut out: String = old
        .lines()
        .take_while(|l| l.starts_with('#') || l.trim().is_empty())
        .map(|l| format!("{l}\n"))
        .collect();
    for ((cat, at), detail) in found {
        out.push_str(&format!("{cat}\t{at}\t{detail}\n"));
    }
    std::fs::write(path, out).expect("write the disagreement list");
}
