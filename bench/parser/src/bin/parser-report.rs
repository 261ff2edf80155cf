//! Prints the parser benchmark results as Markdown: time and queries/second per engine
//! and class, each engine's speed relative to `pg_query::parse` measured in the same run,
//! and allocations per query.
//!
//! Reads criterion's estimates from `$CRITERION_HOME` (default `<out>/criterion`) and the
//! allocation counts the bench binaries wrote to `<out>` (`$PARSER_BENCH_OUT`).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use parser_bench::{load_class, out_dir, CLASSES};

const ENGINES: &[(&str, &str)] = &[
    ("pg_query_parse", "pg_query::parse"),
    ("pg_query_fingerprint", "pg_query::fingerprint"),
    ("route_cold", "route, cold"),
    ("route_cache_hit", "route, cache hit"),
];

fn main() -> ExitCode {
    let out = out_dir();
    let criterion = std::env::var_os("CRITERION_HOME").map_or_else(|| out.join("criterion"), PathBuf::from);
    let allocs = read_allocs(&out);

    // ns per query, [class][engine].
    let mut ns: Vec<Vec<Option<f64>>> = Vec::new();
    for class in CLASSES {
        let n = load_class(class).len() as f64;
        ns.push(ENGINES.iter().map(|(id, _)| median_ns(&criterion, class, id).map(|t| t / n)).collect());
    }
    if ns.iter().flatten().all(Option::is_none) {
        eprintln!("no criterion results under {}; run bench/parser.sh", criterion.display());
        return ExitCode::FAILURE;
    }

    let header = |first: &str| {
        let mut h = format!("| {first} |");
        let mut rule = String::from("|---|");
        for (_, name) in ENGINES {
            h.push_str(&format!(" {name} |"));
            rule.push_str("---:|");
        }
        println!("{h}\n{rule}");
    };

    println!("Time per query (median of criterion's samples) and queries per second, one thread:\n");
    header("class (queries)");
    for (ci, class) in CLASSES.iter().enumerate() {
        let mut row = format!("| {class} ({}) |", load_class(class).len());
        for t in &ns[ci] {
            row.push_str(&match t {
                Some(t) => format!(" {} ({}/s) |", time(*t), rate(1e9 / t)),
                None => " – |".to_owned(),
            });
        }
        println!("{row}");
    }

    println!("\nSpeed relative to `pg_query::parse` in the same run (higher is faster):\n");
    header("class");
    let mut ratios: Vec<Vec<f64>> = vec![Vec::new(); ENGINES.len()];
    for (ci, class) in CLASSES.iter().enumerate() {
        let mut row = format!("| {class} |");
        for (ei, t) in ns[ci].iter().enumerate() {
            match (ns[ci][0], t) {
                (Some(base), Some(t)) => {
                    let r = base / t;
                    ratios[ei].push(r);
                    row.push_str(&format!(" {} |", ratio(r)));
                }
                _ => row.push_str(" – |"),
            }
        }
        println!("{row}");
    }
    let mut row = String::from("| **median class** |");
    for r in &mut ratios {
        row.push_str(&match median(r) {
            Some(m) => format!(" **{}** |", ratio(m)),
            None => " – |".to_owned(),
        });
    }
    println!("{row}");

    println!("\nAllocations per query (Rust heap; libpg_query's own memory contexts are not counted):\n");
    header("class");
    for class in CLASSES {
        let mut row = format!("| {class} |");
        for (id, _) in ENGINES {
            row.push_str(&match allocs.get(&format!("{class}/{id}")).and_then(serde_json::Value::as_f64) {
                Some(a) => format!(" {a:.1} |"),
                None => " – |".to_owned(),
            });
        }
        println!("{row}");
    }
    ExitCode::SUCCESS
}

fn median_ns(criterion: &Path, class: &str, engine: &str) -> Option<f64> {
    let path = criterion.join(class).join(engine).join("new/estimates.json");
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()?;
    v["median"]["point_estimate"].as_f64()
}

fn read_allocs(out: &Path) -> serde_json::Map<String, serde_json::Value> {
    let mut all = serde_json::Map::new();
    for binary in ["pg_query", "route"] {
        let path = out.join(format!("allocs-{binary}.json"));
        if let Some(serde_json::Value::Object(m)) =
            std::fs::read_to_string(path).ok().and_then(|t| serde_json::from_str(&t).ok())
        {
            all.extend(m);
        }
    }
    all
}

fn median(v: &mut [f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    Some(if v.len() % 2 == 1 { v[mid] } else { (v[mid - 1] + v[mid]) / 2.0 })
}

fn time(ns: f64) -> String {
    if ns >= 1_000.0 {
        format!("{:.1} µs", ns / 1_000.0)
    } else {
        format!("{ns:.0} ns")
    }
}

fn rate(per_sec: f64) -> String {
    if per_sec >= 1e6 {
        format!("{:.1} M", per_sec / 1e6)
    } else {
        format!("{:.0} k", per_sec / 1e3)
    }
}

fn ratio(r: f64) -> String {
    if r >= 10.0 {
        format!("{r:.0}×")
    } else {
        format!("{r:.1}×")
    }
}
