//! The reference: `pg_query::parse` (libpg_query → Protobuf → Rust structs) and
//! `pg_query::fingerprint`, on every corpus class.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use parser_bench::{alloc::Counting, allocations_per_query, load_class, write_allocations, CLASSES};

#[global_allocator]
static ALLOC: Counting = Counting;

fn parse(q: &str) {
    std::hint::black_box(pg_query::parse(q, pg_query::ParserOptions::DEFAULT).is_ok());
}

fn fingerprint(q: &str) {
    std::hint::black_box(pg_query::fingerprint(q, 0, 0).is_ok());
}

fn bench(c: &mut Criterion) {
    let mut allocs = Vec::new();
    for class in CLASSES {
        let queries = load_class(class);
        allocs.push((format!("{class}/pg_query_parse"), allocations_per_query(&queries, parse)));
        allocs.push((format!("{class}/pg_query_fingerprint"), allocations_per_query(&queries, fingerprint)));
        let mut group = c.benchmark_group(*class);
        group.throughput(Throughput::Elements(queries.len() as u64));
        group.bench_function(BenchmarkId::from_parameter("pg_query_parse"), |b| {
            b.iter(|| queries.iter().for_each(|q| parse(q)))
        });
        group.bench_function(BenchmarkId::from_parameter("pg_query_fingerprint"), |b| {
            b.iter(|| queries.iter().for_each(|q| fingerprint(q)))
        });
        group.finish();
    }
    write_allocations("pg_query", &allocs);
}

criterion_group!(benches, bench);
criterion_main!(benches);
