//! `[analysis]`: defaults, every key, and the problems reported for bad values.

use std::path::Path;

use pgvia::config::{CacheAdmission, Config, ConfigError};

fn parse(text: &str) -> Result<Config, ConfigError> {
    Config::parse(text, Path::new("/etc/pgvia/pgvia.toml"))
}

fn problems(text: &str) -> Vec<String> {
    match parse(text) {
        Ok(c) => panic!("expected problems, got {c:#?}"),
        Err(e) => e.problems().iter().map(|p| format!("{}: {p}", p.line.map_or(0, |l| l))).collect(),
    }
}

#[test]
fn defaults_are_the_analyzers() {
    let c = parse("").expect("empty file");
    assert_eq!(c.analyzer_options(), route::AnalyzerOptions::default());
    assert_eq!(c.analysis.cache_admission, CacheAdmission::SecondSight);
}

#[test]
fn every_key() {
    let c = parse(
        r#"
[analysis]
max_query_length = 65536
cache_entries = 0
cache_bytes = 0
cache_admission = "always"
write_functions = ["audit.log_event", "bump"]
max_nesting = 200
max_values = 10
"#,
    )
    .expect("valid");
    let o = c.analyzer_options();
    assert_eq!(o.max_query_length, 65536);
    assert_eq!((o.cache_entries, o.cache_bytes), (0, 0));
    assert_eq!(o.cache_admission, route::Admission::Always);
    assert_eq!(o.write_functions, ["audit.log_event", "bump"]);
    assert_eq!((o.max_nesting, o.max_values), (200, 10));
    route::Analyzer::new(o).expect("the analyzer accepts what validation accepted");
}

#[test]
fn the_shipped_example_sets_a_write_function() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/pgvia.toml");
    let c = Config::load(&path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.analyzer_options().write_functions, ["audit.log_event"]);
}

#[test]
fn bad_values_are_reported_by_key() {
    let text = r#"
[analysis]
max_query_length = 0
cache_bytes = 100
write_functions = ["ok", "a.b.c"]
max_nesting = 5
"#;
    assert_eq!(
        problems(text),
        [
            "3: analysis.max_query_length: must be between 1 and 1073741824 bytes, not 0",
            "4: analysis.cache_bytes: must be at least 65536 when the cache is enabled, not 100",
            "5: analysis.write_functions: entry \"a.b.c\" is not `name` or `schema.name`",
            "6: analysis.max_nesting: must be between 16 and 10000, not 5",
        ]
    );
    assert_eq!(
        problems("[analysis]\ncache_admission = \"sometimes\"\n"),
        ["2: analysis.cache_admission: unknown variant `sometimes`, expected `always` or `second_sight`"]
    );
    assert_eq!(
        problems("[analysis]\ncache_size = 1\n"),
        ["2: analysis.cache_size: unknown field `cache_size`, expected one of `max_query_length`, `cache_entries`, `cache_bytes`, `cache_admission`, `write_functions`, `session_neutral_functions`, `max_nesting`, `max_values`"]
    );
}
