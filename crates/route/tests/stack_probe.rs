//! TEMPORARY probe (not committed): STACK_KB, SHAPE, N from env.
use route::{Analyzer, AnalyzerOptions};

#[test]
#[ignore]
fn probe() {
    let kb: usize = std::env::var("STACK_KB").unwrap().parse().unwrap();
    let n: usize = std::env::var("N").unwrap().parse().unwrap();
    let shape = std::env::var("SHAPE").unwrap();
    let sql = match shape.as_str() {
        "sum" => format!("SELECT {}", vec!["1"; n].join(" + ")),
        "concat" => format!("SELECT {}", vec!["'a'"; n].join(" || ")),
        "json" => format!("SELECT j{} FROM t", " -> 'k'".repeat(n)),
        "paren" => format!("SELECT {}1{}", "(".repeat(n), ")".repeat(n)),
        "sub" => format!("SELECT {}1{}", "(SELECT ".repeat(n), ")".repeat(n)),
        "from" => format!("SELECT * FROM {}t{}", "(SELECT * FROM ".repeat(n), ") s".repeat(n)),
        "abs" => format!("SELECT {}1{}", "abs(".repeat(n), ")".repeat(n)),
        "arr" => format!("SELECT {}1{}", "ARRAY[".repeat(n), "]".repeat(n)),
        "not" => format!("SELECT * FROM t WHERE {}true", "NOT ".repeat(n)),
        "case" => format!("SELECT {}1{}", "CASE WHEN x THEN ".repeat(n), " END".repeat(n)),
        "minus" => format!("SELECT {}1", "-".repeat(n).chars().map(|c| format!("{c} ")).collect::<String>()),
        "insel" => format!("SELECT * FROM t WHERE a IN {}1{}", "(SELECT ".repeat(n), ")".repeat(n)),
        _ => panic!("shape"),
    };
    let out = std::thread::Builder::new()
        .stack_size(kb * 1024)
        .spawn(move || {
            let a = Analyzer::new(AnalyzerOptions {
                cache_entries: 0,
                max_nesting: 10_000,
                ..Default::default()
            })
            .unwrap();
            a.analyze(&sql, &[]).outcome()
        })
        .unwrap()
        .join()
        .unwrap();
    println!("OUTCOME {out:?}");
}
