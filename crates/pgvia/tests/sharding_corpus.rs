//! The differential corpus (issue 34): every item of `tests/corpus/*.sql` and a generated
//! corpus run through pgvia over four real shards and directly on a reference PostgreSQL
//! holding every row, in the simple, extended and prepared protocols. Each answer must be the
//! reference's (rows, order where fixed, column names and types, command tag, SQLSTATE,
//! transaction status) or a 0A000 refusal, counted per construct; after every write the
//! tables it named are compared shard by shard with the reference.
//!
//! `PGVIA_CORPUS_SEED` (printed) seeds the generated corpus, `PGVIA_CORPUS_SECONDS` (default
//! 30) and `PGVIA_CORPUS_COUNT` (default 100,000) bound it; a generated item answered wrongly
//! is appended to `tests/corpus/regressions.sql`, which the fixed corpus replays first.

#![allow(clippy::unwrap_used)]

mod common;
mod corpus_support;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::shards;
use common::{direct_conninfo, TestProxy, DB, PASSWORD, USER};
use corpus_support::gen::Generator;
use corpus_support::items::{self, Item, Kind};
use corpus_support::wire::{Outcome, Protocol, Wire};
use corpus_support::{data, Runner, TABLES};

/// `customers`, `orders` and `order_items` share a key type and function (co-located);
/// `accounts` (text) and `events` (uuid) are each alone; `products` is listed nowhere, so it
/// is on every shard.
use corpus_support::KEYS;

fn corpus_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/corpus")
}

fn config(c: &shards::ShardClusters) -> String {
    let mut toml = shards::config(c, &[]);
    let mut tables = String::new();
    for (name, column, ty) in KEYS {
        tables.push_str(&format!(
            "[[databases.sharded_tables]]\nname = \"{name}\"\ncolumn = \"{column}\"\ntype = \"{ty}\"\n\n"
        ));
    }
    let at = toml.find("[[users]]").expect("users");
    toml.insert_str(at, &tables);
    toml
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn differential_corpus_matches_the_reference() {
    let started = Instant::now();
    let schema = std::fs::read_to_string(corpus_dir().join("schema.sql")).unwrap();
    let c = shards::start(&schema);
    c.reference.psql(DB, &corpus_support::placement_tables()).expect("placement tables");
    let proxy = TestProxy::start_toml(&config(&c)).await;
    let via = proxy.connect(USER, PASSWORD, DB).await;
    let direct_ref = common::connect(&direct_conninfo(&c.reference, USER, PASSWORD, DB)).await.unwrap();
    let mut direct_shards = Vec::new();
    for s in &c.shards {
        direct_shards.push(common::connect(&direct_conninfo(s, USER, PASSWORD, DB)).await.unwrap());
    }
    // pgvia places the rows; the reference gets the same statements.
    for sql in data::inserts() {
        via.simple_query(&sql).await.unwrap_or_else(|e| panic!("load through pgvia: {e:?}"));
        direct_ref.simple_query(&sql).await.unwrap();
    }
    let ref_addr = SocketAddr::from(([127, 0, 0, 1], c.reference.port()));
    let mut runner = Runner::new(
        Wire::connect(proxy.addr).await,
        Wire::connect(ref_addr).await,
        direct_ref,
        direct_shards,
        Wire::connect(proxy.addr).await,
    );
    let mut load_diffs = Vec::new();
    for t in TABLES {
        if let Some(d) = runner.compare_table(t).await {
            load_diffs.push(d);
        }
    }
    assert!(load_diffs.is_empty(), "the load through pgvia differs: {load_diffs:?}");

    let corpus = items::load(&corpus_dir());
    let constructs: std::collections::BTreeSet<&str> = corpus.iter().map(|i| i.construct.as_str()).collect();
    println!("fixed corpus: {} items in {} constructs", corpus.len(), constructs.len());
    for protocol in Protocol::ALL {
        for item in &corpus {
            if item.simple_only && protocol != Protocol::Simple {
                continue;
            }
            runner.check(item, protocol).await;
        }
    }
    // Fetched from a portal a few rows at a time: the queries whose order is fixed, where
    // rows handed out in pieces must still come in the reference's order (not COPY or
    // FETCH, which PostgreSQL does not run that way).
    let query =
        |sql: &str| ["SELECT", "WITH", "VALUES"].iter().any(|k| sql.to_ascii_uppercase().starts_with(k));
    for item in corpus.iter().filter(|i| i.ordered && !i.simple_only && query(&i.sql)) {
        runner.check(item, Protocol::Portal).await;
    }
    let fixed = std::mem::take(&mut runner.tally);
    let fixed_report = fixed.report("fixed corpus");
    println!("{fixed_report}");

    let seed = env_u64("PGVIA_CORPUS_SEED").unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(34)
    });
    let seconds = env_u64("PGVIA_CORPUS_SECONDS").unwrap_or(30);
    let count = env_u64("PGVIA_CORPUS_COUNT").unwrap_or(100_000);
    println!("generated corpus: PGVIA_CORPUS_SEED={seed} PGVIA_CORPUS_SECONDS={seconds} PGVIA_CORPUS_COUNT={count}");
    let generated_started = Instant::now();
    let mut generator = Generator::new(seed);
    let mut choose = data::Rng::new(seed ^ 0x5eed);
    let mut ran = 0u64;
    let mut found = Vec::new();
    while ran < count && generated_started.elapsed() < Duration::from_secs(seconds) {
        ran += 1;
        let item = generator.next_item(ran);
        let protocols: Vec<Protocol> = if items::kind(&item.sql) == Kind::Read {
            Protocol::ALL.to_vec()
        } else {
            vec![*choose.pick(&Protocol::ALL)]
        };
        for p in protocols {
            if runner.check(&item, p).await == corpus_support::Verdict::Wrong {
                let why = runner.tally.wrong.last().map(|w| w.why.clone()).unwrap_or_default();
                found.push((item.clone(), why));
                break;
            }
        }
    }
    let generated = std::mem::take(&mut runner.tally);
    let ref_driver = common::connect(&direct_conninfo(&c.reference, USER, PASSWORD, DB)).await.unwrap();
    corpus_support::copy::run(&mut runner, &proxy.conninfo(USER, PASSWORD, DB), &ref_driver).await;
    let copies = std::mem::take(&mut runner.tally);
    let copies_report = copies.report("COPY FROM STDIN");
    println!("{copies_report}");
    let generated_report = generated.report(&format!("generated corpus (seed {seed}, {ran} statements)"));
    println!("{generated_report}");
    save_regressions(&found, seed);
    println!("whole run: {:?}", started.elapsed());

    // The session must still answer after all that.
    let check = runner.via.run(Protocol::Simple, "SELECT count(*) FROM products", &[]).await;
    assert!(matches!(check.first(), Some(Outcome::Answer { .. })), "pgvia after the corpus: {check:?}");
    let wrong = fixed.wrong.len() + generated.wrong.len() + copies.wrong.len();
    let diffs = fixed.table_diffs.len() + generated.table_diffs.len() + copies.table_diffs.len();
    assert!(
        wrong == 0 && diffs == 0,
        "{wrong} wrong answers and {diffs} table differences:\n{fixed_report}\n{generated_report}\n{copies_report}"
    );
    proxy.stop().await;
}

/// Appends each wrongly answered generated item to `regressions.sql`, under a header naming
/// its construct, with the seed that found it; one whose construct and way of failing are
/// already there is left out (the same defect would otherwise be added on every run).
fn save_regressions(found: &[(Item, String)], seed: u64) {
    if found.is_empty() {
        return;
    }
    let path = corpus_dir().join("regressions.sql");
    let mut text = std::fs::read_to_string(&path).unwrap_or_default();
    let mut added = 0;
    for (item, why) in found {
        let mark = format!("-- {}: {why};", item.construct);
        if text.contains(&mark) {
            continue;
        }
        let flag = if item.ordered { " -- ordered" } else { "" };
        text.push_str(&format!(
            "\n## regression: {}\n{mark} found by PGVIA_CORPUS_SEED={seed} ({})\n{}{flag}\n",
            item.construct, item.place, item.sql
        ));
        added += 1;
    }
    std::fs::write(&path, text).unwrap();
    println!("{added} new regression items saved in {}", path.display());
}
