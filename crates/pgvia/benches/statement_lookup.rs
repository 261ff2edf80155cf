//! The Bind path's statement lookup, pgvia's design against a global-lock design, with 1, 2, 4
//! and 8 threads each acting as one client that binds its statements over and over.
//!
//! - `pgvia`: each client resolves its name in its own map (no lock, no reference-count change)
//!   and checks its server's own LRU, as `prepared::forward` does.
//! - `global_rwlock`: one `RwLock<BTreeMap<(client, name), Arc<Statement>>>` shared by every
//!   client, read-locked per Bind, the statement cloned out (a reference count increment and
//!   decrement), as a pooler with one shared statement table does.
//!
//! One iteration is one Bind on every thread at once, so a design that scales keeps the time per
//! iteration flat as threads are added (up to the number of cores).

use std::collections::BTreeMap;
use std::hint::black_box;
use std::sync::{Arc, Barrier, RwLock};
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use pgvia::prepared::{ClientStatements, PurgePolicy, Registry, ServerStatements, Statement};
use wire::frontend::Oids;

const NAMES: usize = 32;

fn names() -> Vec<String> {
    (0..NAMES).map(|i| format!("S_{i}")).collect()
}

/// Runs `work(thread, iters)` on `threads` threads at once; returns the wall time.
fn parallel(threads: usize, iters: u64, work: impl Fn(usize, u64) + Sync) -> Duration {
    let barrier = Barrier::new(threads + 1);
    std::thread::scope(|s| {
        for t in 0..threads {
            let (barrier, work) = (&barrier, &work);
            s.spawn(move || {
                barrier.wait();
                work(t, iters);
                barrier.wait();
            });
        }
        barrier.wait();
        let start = Instant::now();
        barrier.wait();
        start.elapsed()
    })
}

/// Per thread: a client map with NAMES statements and a server that holds them all.
struct Client {
    statements: ClientStatements,
    server: ServerStatements,
}

fn pgvia_clients(threads: usize, analyzer: &route::Analyzer) -> Vec<std::sync::Mutex<Client>> {
    let registry = Arc::new(Registry::new(PurgePolicy::default()));
    (0..threads)
        .map(|_| {
            let mut statements = ClientStatements::new(registry.clone());
            let mut server = ServerStatements::new(Some(registry.clone()), NAMES * 2);
            for (i, name) in names().iter().enumerate() {
                let sql = format!("SELECT abalance FROM pgbench_accounts WHERE aid = $1 + {i}");
                let stmt = statements
                    .resolve(sql.as_bytes(), Oids::new(&[]), || analyzer.analyze(&sql, &[]))
                    .expect("below the caps");
                server.insert(&stmt);
                statements.bind_name(name, stmt).expect("fresh name");
            }
            std::sync::Mutex::new(Client { statements, server })
        })
        .collect()
}

type GlobalMap = RwLock<BTreeMap<(usize, String), Arc<Statement>>>;

fn global_map(threads: usize, analyzer: &route::Analyzer) -> GlobalMap {
    let registry = Arc::new(Registry::new(PurgePolicy::default()));
    let mut client = ClientStatements::new(registry);
    let mut map = BTreeMap::new();
    for t in 0..threads {
        for (i, name) in names().iter().enumerate() {
            let sql = format!("SELECT abalance FROM pgbench_accounts WHERE aid = $1 + {i}");
            let stmt = client
                .resolve(sql.as_bytes(), Oids::new(&[]), || analyzer.analyze(&sql, &[]))
                .expect("below the caps");
            map.insert((t, name.clone()), stmt);
        }
    }
    RwLock::new(map)
}

fn bind_lookup(c: &mut Criterion) {
    let analyzer = route::Analyzer::new(route::AnalyzerOptions::default()).expect("analyzer");
    let names = names();
    let mut group = c.benchmark_group("bind_lookup");
    for threads in [1usize, 2, 4, 8] {
        let clients = pgvia_clients(threads, &analyzer);
        group.bench_with_input(BenchmarkId::new("pgvia", threads), &threads, |b, &threads| {
            b.iter_custom(|iters| {
                parallel(threads, iters, |t, iters| {
                    // Each thread owns its client; the mutex is taken once, outside the loop.
                    let mut client = clients[t].lock().unwrap_or_else(|e| e.into_inner());
                    let Client { statements, server } = &mut *client;
                    for i in 0..iters {
                        let name = &names[i as usize % NAMES];
                        let stmt = statements.get(name).expect("bound");
                        black_box(server.holds(stmt));
                    }
                })
            })
        });
        let global = global_map(threads, &analyzer);
        group.bench_with_input(BenchmarkId::new("global_rwlock", threads), &threads, |b, &threads| {
            b.iter_custom(|iters| {
                parallel(threads, iters, |t, iters| {
                    let mut key = (t, String::with_capacity(8));
                    for i in 0..iters {
                        key.1.clear();
                        key.1.push_str(&names[i as usize % NAMES]);
                        let stmt = global.read().unwrap_or_else(|e| e.into_inner()).get(&key).cloned();
                        black_box(stmt);
                    }
                })
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bind_lookup);
criterion_main!(benches);
