//! pgvia's analysis: cold (parse and summarise every time, no cache) and a cache hit, on
//! every corpus class; and, for reference, `pg_raw_parse::parse` alone, the floor under the
//! cold analysis.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use parser_bench::cputime::CpuTime;
use parser_bench::{alloc::Counting, allocations_per_query, load_class, write_allocations, CLASSES};
use route::{Admission, Analyzer, AnalyzerOptions, Outcome};

#[global_allocator]
static ALLOC: Counting = Counting;

fn bench(c: &mut Criterion<CpuTime>) {
    let cold = Analyzer::new(AnalyzerOptions { cache_entries: 0, ..Default::default() }).expect("options");
    let cached = Analyzer::new(AnalyzerOptions { cache_admission: Admission::Always, ..Default::default() })
        .expect("options");
    let mut allocs = Vec::new();
    for class in CLASSES {
        let queries = load_class(class);
        for q in &queries {
            let outcome = cold.analyze_uncached(q, &[]).outcome();
            assert_eq!(outcome, Outcome::Parsed, "{class}: {q}");
            cached.analyze(q, &[]);
        }
        let analyze_cold = |q: &str| {
            std::hint::black_box(cold.analyze_uncached(q, &[]).writes());
        };
        let raw_parse = |q: &str| {
            std::hint::black_box(pg_raw_parse::parse(q).is_ok());
        };
        let analyze_hit = |q: &str| {
            std::hint::black_box(cached.analyze(q, &[]).writes());
        };
        allocs.push((format!("{class}/raw_parse"), allocations_per_query(&queries, raw_parse)));
        allocs.push((format!("{class}/route_cold"), allocations_per_query(&queries, analyze_cold)));
        allocs.push((format!("{class}/route_cache_hit"), allocations_per_query(&queries, analyze_hit)));
        let mut group = c.benchmark_group(*class);
        group.throughput(Throughput::Elements(queries.len() as u64));
        group.bench_function(BenchmarkId::from_parameter("raw_parse"), |b| {
            b.iter(|| queries.iter().for_each(|q| raw_parse(q)))
        });
        group.bench_function(BenchmarkId::from_parameter("route_cold"), |b| {
            b.iter(|| queries.iter().for_each(|q| analyze_cold(q)))
        });
        group.bench_function(BenchmarkId::from_parameter("route_cache_hit"), |b| {
            b.iter(|| queries.iter().for_each(|q| analyze_hit(q)))
        });
        group.finish();
    }
    write_allocations("route", &allocs);
    admission(c);
}

/// The cache under a stream of one-off queries (inline literals, each text seen once)
/// mixed with a hot set: CPU per one-off query for each admission policy, and, outside
/// criterion, how much of the hot set stays cached and how many one-offs get inserted.
fn admission(c: &mut Criterion<CpuTime>) {
    let one_offs: Vec<String> =
        (0..200_000).map(|i| format!("SELECT abalance FROM pgbench_accounts WHERE aid = {i}")).collect();
    let hot: Vec<String> = (0..1_000).map(|i| format!("SELECT * FROM hot_{i} WHERE id = $1")).collect();
    let mut group = c.benchmark_group("admission");
    group.throughput(Throughput::Elements(1));
    let mut report = Vec::new();
    for (name, policy) in [("always", Admission::Always), ("second_sight", Admission::SecondSight)] {
        let options = AnalyzerOptions { cache_admission: policy, ..Default::default() };
        let a = Analyzer::new(options.clone()).expect("options");
        let mut next = 0;
        group.bench_function(BenchmarkId::from_parameter(name), |b| {
            b.iter(|| {
                next = (next + 1) % one_offs.len();
                std::hint::black_box(a.analyze(&one_offs[next], &[]).writes())
            })
        });

        // Four one-offs for every hot query, 1,000 hot queries, a cache of 10,000 entries.
        let a = Analyzer::new(options).expect("options");
        let (mut hot_hits, mut hot_total) = (0u64, 0u64);
        for i in 0..100_000 {
            if i % 5 == 0 {
                let before = a.stats().cache_hits;
                a.analyze(&hot[(i / 5) % hot.len()], &[]);
                if i >= 50_000 {
                    hot_total += 1;
                    hot_hits += a.stats().cache_hits - before;
                }
            } else {
                a.analyze(&one_offs[i], &[]);
            }
        }
        let s = a.stats();
        report.push((format!("admission/{name}/hot_hit_rate"), hot_hits as f64 / hot_total as f64));
        report.push((format!("admission/{name}/inserts"), s.cache_inserts as f64));
        report.push((format!("admission/{name}/one_offs"), 80_000.0));
    }
    group.finish();
    write_allocations("admission", &report);
}

criterion_group! {
    name = benches;
    config = Criterion::default().with_measurement(CpuTime);
    targets = bench
}
criterion_main!(benches);
