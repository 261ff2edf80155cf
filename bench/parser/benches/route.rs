//! pgvia's analysis: cold (parse and summarise every time, no cache) and a cache hit, on
//! every corpus class.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use parser_bench::{alloc::Counting, allocations_per_query, load_class, write_allocations, CLASSES};
use route::{Admission, Analyzer, AnalyzerOptions, Outcome};

#[global_allocator]
static ALLOC: Counting = Counting;

fn bench(c: &mut Criterion) {
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
        let analyze_hit = |q: &str| {
            std::hint::black_box(cached.analyze(q, &[]).writes());
        };
        allocs.push((format!("{class}/route_cold"), allocations_per_query(&queries, analyze_cold)));
        allocs.push((format!("{class}/route_cache_hit"), allocations_per_query(&queries, analyze_hit)));
        let mut group = c.benchmark_group(*class);
        group.throughput(Throughput::Elements(queries.len() as u64));
        group.bench_function(BenchmarkId::from_parameter("route_cold"), |b| {
            b.iter(|| queries.iter().for_each(|q| analyze_cold(q)))
        });
        group.bench_function(BenchmarkId::from_parameter("route_cache_hit"), |b| {
            b.iter(|| queries.iter().for_each(|q| analyze_hit(q)))
        });
        group.finish();
    }
    write_allocations("route", &allocs);
}

criterion_group!(benches, bench);
criterion_main!(benches);
