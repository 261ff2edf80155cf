//! What routing a statement to its shards costs on top of its analysis: `sharding::plan` for
//! a key in a binary Bind parameter, for a simple query read through its shape's shared
//! analysis (the constants of its own text), and for a 10-row INSERT; and, for scale, the
//! analysis cache hit each of them starts with.

use std::hint::black_box;
use std::path::Path;

use criterion::{criterion_group, criterion_main, Criterion};
use pgvia::config::Config;
use pgvia::sharding::{plan, Params, SessionHints};
use route::{Analyzer, AnalyzerOptions};

const CONFIG: &str = r#"
[[users]]
name = "u"
auth_method = "trust"
[[databases]]
name = "db"
unsharded_tables = "omnisharded"
[[databases.shards]]
host = "a"
[[databases.shards]]
host = "b"
[[databases.shards]]
host = "c"
[[databases.shards]]
host = "d"
[[databases.sharded_tables]]
name = "pgbench_accounts"
column = "aid"
type = "integer"
"#;

fn bench(c: &mut Criterion) {
    let config = Config::parse(CONFIG, Path::new("pgvia.toml")).expect("valid");
    let rules = config.databases[0].sharding_rules(0).expect("valid").expect("sharded");
    let analyzer = Analyzer::new(AnalyzerOptions::default()).expect("analyzer");
    let session = SessionHints::default();

    let bind_sql = "SELECT abalance FROM pgbench_accounts WHERE aid = $1";
    let key = 4711i32.to_be_bytes();
    let values = [Some(&key[..])];
    c.bench_function("analysis cache hit, Bind", |b| b.iter(|| black_box(analyzer.analyze(bind_sql, &[23]))));
    let analysis = analyzer.analyze(bind_sql, &[23]);
    c.bench_function("plan: key in a binary Bind parameter", |b| {
        b.iter(|| {
            plan(&rules, black_box(&analysis), &Params::Bind { formats: &[1], values: &values }, &session)
        })
    });

    let simple = "SELECT abalance FROM pgbench_accounts WHERE aid = 4711";
    let mut scratch = String::new();
    c.bench_function("analysis shape hit, simple query", |b| {
        b.iter(|| black_box(analyzer.analyze_query(black_box(simple), &mut scratch)))
    });
    let analysis = analyzer.analyze_query(simple, &mut scratch);
    c.bench_function("plan: key in the text (shape constants)", |b| {
        b.iter(|| {
            let ranges = route::constants(black_box(simple));
            plan(&rules, &analysis, &Params::Constants { sql: simple, ranges: &ranges }, &session)
        })
    });

    let insert = format!(
        "INSERT INTO pgbench_accounts (aid, bid, abalance, filler) VALUES {}",
        (1..=10).map(|i| format!("({i}, 1, 0, '')")).collect::<Vec<_>>().join(", ")
    );
    let analysis = analyzer.analyze_query(&insert, &mut scratch);
    c.bench_function("plan: 10-row INSERT (shape constants)", |b| {
        b.iter(|| {
            let ranges = route::constants(black_box(&insert));
            plan(&rules, &analysis, &Params::Constants { sql: &insert, ranges: &ranges }, &session)
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
