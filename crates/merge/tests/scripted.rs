//! The merger driven by scripted shard replies (no PostgreSQL): the feeding protocol, the
//! k-way merge's waiting rule, the memory budget and the errors.

mod common;

use bytes::BytesMut;
use common::{frames, outcome};
use merge::{Drained, MemStore, MergeError, MergeOptions, MergePlan, Merger, TextOrder};

/// A RowDescription body for columns (name, type OID).
fn desc(cols: &[(&str, u32)]) -> Vec<u8> {
    let mut b = (cols.len() as i16).to_be_bytes().to_vec();
    for (name, oid) in cols {
        b.extend_from_slice(name.as_bytes());
        b.push(0);
        b.extend_from_slice(&0u32.to_be_bytes());
        b.extend_from_slice(&0i16.to_be_bytes());
        b.extend_from_slice(&oid.to_be_bytes());
        b.extend_from_slice(&(-1i16).to_be_bytes());
        b.extend_from_slice(&(-1i32).to_be_bytes());
        b.extend_from_slice(&0i16.to_be_bytes());
    }
    b
}

/// A DataRow body.
fn row(cells: &[Option<&str>]) -> Vec<u8> {
    let mut b = (cells.len() as i16).to_be_bytes().to_vec();
    for c in cells {
        match c {
            Some(v) => {
                b.extend_from_slice(&(v.len() as i32).to_be_bytes());
                b.extend_from_slice(v.as_bytes());
            }
            None => b.extend_from_slice(&(-1i32).to_be_bytes()),
        }
    }
    b
}

fn plan(sql: &str) -> MergePlan {
    MergePlan::for_select(sql).expect(sql)
}

#[test]
fn kway_merge_waits_for_every_unfinished_shard() {
    let p = plan("SELECT k FROM t ORDER BY k DESC NULLS LAST LIMIT 4");
    assert_eq!(p.shard_sql(), "SELECT k FROM t ORDER BY k DESC NULLS LAST LIMIT 4");
    let mut m = Merger::new(&p, 3, MergeOptions::default());
    let d = desc(&[("k", 23)]);
    let mut out = BytesMut::new();
    for s in 0..3 {
        m.row_description(s, &d).expect("describe");
    }
    m.data_row(0, &row(&[Some("9")])).expect("row");
    m.data_row(1, &row(&[Some("7")])).expect("row");
    // Shard 2 has sent nothing yet: nothing can be emitted, and only shard 2 is waited on.
    assert_eq!(m.drain(&mut out).expect("drain"), Drained::NeedInput);
    assert!(!m.needs_input(0) && !m.needs_input(1) && m.needs_input(2));
    m.data_row(2, &row(&[Some("8")])).expect("row");
    assert_eq!(m.drain(&mut out).expect("drain"), Drained::NeedInput);
    assert!(m.needs_input(0), "shard 0's 9 went out; its next row is needed");
    m.data_row(0, &row(&[None])).expect("row");
    m.shard_done(0).expect("done");
    m.data_row(1, &row(&[Some("1")])).expect("row");
    m.shard_done(1).expect("done");
    m.shard_done(2).expect("done");
    assert_eq!(m.drain(&mut out).expect("drain"), Drained::Finished);
    let o = outcome(&frames(&out)).expect("outcome");
    let ks: Vec<_> = o.rows.iter().map(|r| r[0].clone()).collect();
    assert_eq!(ks, [Some("9".into()), Some("8".into()), Some("7".into()), Some("1".into())]);
    assert_eq!(o.tag, "SELECT 4");
    assert_eq!(o.columns, [("k".to_string(), 23, 0)]);
}

#[test]
fn aggregates_merge_with_postgres_types_and_hidden_columns_stripped() {
    let p = plan("SELECT g, avg(x), count(*) AS n FROM t GROUP BY g HAVING sum(x) > 2 ORDER BY g");
    assert_eq!(p.shard_sql(), "SELECT g, sum(x), count(*) AS n, sum(x), count(x) FROM t GROUP BY g");
    let mut m = Merger::new(&p, 2, MergeOptions::default());
    let d = desc(&[("g", 23), ("sum", 20), ("n", 20), ("sum", 20), ("count", 20)]);
    m.row_description(0, &d).expect("describe");
    m.row_description(1, &d).expect("describe");
    m.data_row(0, &row(&[Some("1"), Some("1"), Some("1"), Some("1"), Some("1")])).expect("row");
    m.data_row(1, &row(&[Some("1"), Some("2"), Some("2"), Some("2"), Some("2")])).expect("row");
    m.data_row(1, &row(&[Some("2"), Some("1"), Some("1"), Some("1"), Some("1")])).expect("row");
    m.shard_done(0).expect("done");
    m.shard_done(1).expect("done");
    let mut out = BytesMut::new();
    assert_eq!(m.drain(&mut out).expect("drain"), Drained::Finished);
    let o = outcome(&frames(&out)).expect("outcome");
    assert_eq!(o.columns, [("g".into(), 23, 0), ("avg".into(), 1700, 0), ("n".into(), 20, 0)]);
    // Group 2's sum(x) = 1 fails HAVING; group 1: avg 3/3.
    assert_eq!(o.rows, [vec![Some("1".into()), Some("1.00000000000000000000".into()), Some("3".into())]]);
}

#[test]
fn memory_budget_is_enforced() {
    let p = plan("SELECT g, count(*) FROM t GROUP BY g");
    let mut m = Merger::new(&p, 1, MergeOptions { memory_budget: 4096, text_order: TextOrder::Bytes });
    m.row_description(0, &desc(&[("g", 25), ("count", 20)])).expect("describe");
    let mut err = None;
    for i in 0..1000 {
        if let Err(e) = m.data_row(0, &row(&[Some(&format!("group-{i}")), Some("1")])) {
            err = Some(e);
            break;
        }
    }
    let e = err.expect("the budget must run out");
    assert_eq!(e, MergeError::MemoryBudget { budget: 4096 });
    assert_eq!(e.sqlstate(), "53200");
    assert!(e.to_string().contains("merge_memory_budget"));
}

#[test]
fn schema_drift_and_protocol_errors_are_reported() {
    let p = plan("SELECT k FROM t ORDER BY k");
    let mut m = Merger::new(&p, 2, MergeOptions::default());
    assert!(matches!(m.data_row(0, &row(&[Some("1")])), Err(MergeError::Protocol(_))));
    m.row_description(0, &desc(&[("k", 23)])).expect("describe");
    let e = m.row_description(1, &desc(&[("k", 20)])).expect_err("drift");
    assert_eq!(e.sqlstate(), "42804");
    assert!(matches!(m.data_row(9, &row(&[Some("1")])), Err(MergeError::Protocol(_))));
    assert!(matches!(m.data_row(0, &row(&[Some("1"), Some("2")])), Err(MergeError::Protocol(_))));
    assert!(matches!(m.data_row(0, &[0xff]), Err(MergeError::Protocol(_))));
}

#[test]
fn ordinal_past_the_select_list_is_an_error_not_a_panic() {
    for sql in [
        "SELECT * FROM t ORDER BY 3",
        "SELECT g, count(*) FROM t GROUP BY 5",
        "SELECT DISTINCT ON (4) a FROM t",
    ] {
        let p = plan(sql);
        let mut m = Merger::new(&p, 1, MergeOptions::default());
        let e = m.row_description(0, &desc(&[("a", 23), ("count", 20)])).expect_err(sql);
        assert_eq!(e.sqlstate(), "42601", "{sql}");
    }
}

#[test]
fn text_order_refused_under_other_collations() {
    let p = plan("SELECT s FROM t ORDER BY s");
    let mut m = Merger::new(&p, 1, MergeOptions { memory_budget: 1 << 20, text_order: TextOrder::Refuse });
    let e = m.row_description(0, &desc(&[("s", 25)])).expect_err("refused");
    assert_eq!(e.sqlstate(), "0A000");
    // Integers still merge under any collation.
    let p = plan("SELECT k FROM t ORDER BY k");
    let mut m = Merger::new(&p, 1, MergeOptions { memory_budget: 1 << 20, text_order: TextOrder::Refuse });
    m.row_description(0, &desc(&[("k", 23)])).expect("ints are fine");
}

#[test]
fn overflowing_bigint_sum_is_an_error_not_a_wrap() {
    let p = plan("SELECT sum(k) FROM t");
    let mut m = Merger::new(&p, 2, MergeOptions::default());
    for s in 0..2 {
        m.row_description(s, &desc(&[("sum", 20)])).expect("describe");
        m.data_row(s, &row(&[Some("9223372036854775807")])).expect("row");
        m.shard_done(s).expect("done");
    }
    let e = m.drain(&mut BytesMut::new()).expect_err("overflow");
    assert_eq!(e.sqlstate(), "22003");
}

#[test]
fn random_bytes_never_panic() {
    let p = plan("SELECT g, min(s), avg(n) FROM t GROUP BY g ORDER BY 2");
    let mut seed = 0x9e37_79b9_u64;
    for _ in 0..2000 {
        let mut m = Merger::new(&p, 1, MergeOptions::default());
        let _ = m.row_description(0, &desc(&[("g", 23), ("min", 25), ("sum", 1700), ("count", 20)]));
        let len = (seed % 40) as usize;
        let body: Vec<u8> = (0..len)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                seed as u8
            })
            .collect();
        let _ = m.data_row(0, &body);
        let _ = m.shard_done(0);
        let _ = m.drain(&mut BytesMut::new());
    }
}

#[test]
fn limit_parameters_must_be_bound() {
    let p = plan("SELECT k FROM t ORDER BY k LIMIT $1 OFFSET $2");
    assert_eq!(p.limit_params(), (Some(1), Some(2)));
    let mut m = Merger::new(&p, 1, MergeOptions::default());
    m.row_description(0, &desc(&[("k", 23)])).expect("describe");
    for k in ["1", "2", "3", "4"] {
        m.data_row(0, &row(&[Some(k)])).expect("row");
    }
    m.shard_done(0).expect("done");
    assert!(matches!(m.drain(&mut BytesMut::new()), Err(MergeError::Protocol(_))));
    // LIMIT 2 (binary int8) OFFSET 1 (text).
    m.bind_params(&[(Some(&2i64.to_be_bytes()[..]), true), (Some(&b"1"[..]), false)]).expect("bind");
    let mut out = BytesMut::new();
    assert_eq!(m.drain(&mut out).expect("drain"), Drained::Finished);
    let o = outcome(&frames(&out)).expect("outcome");
    assert_eq!(o.rows, [vec![Some("2".to_string())], vec![Some("3".to_string())]]);
}

/// Feeds `rows` (shard, cells) and drains to the end, slices included.
fn run(
    m: &mut Merger,
    shards: usize,
    cols: &[(&str, u32)],
    rows: &[(usize, Vec<String>)],
) -> Vec<Vec<Option<String>>> {
    let d = desc(cols);
    for s in 0..shards {
        m.row_description(s, &d).expect("describe");
    }
    let mut out = BytesMut::new();
    for (s, cells) in rows {
        let cells: Vec<Option<&str>> = cells.iter().map(|c| Some(c.as_str())).collect();
        m.data_row(*s, &row(&cells)).expect("row");
        assert_ne!(m.drain(&mut out).expect("drain"), Drained::Finished);
    }
    for s in 0..shards {
        m.shard_done(s).expect("done");
    }
    loop {
        match m.drain(&mut out).expect("drain") {
            Drained::Finished => break,
            Drained::Full => continue,
            Drained::NeedInput => panic!("input is over"),
        }
    }
    outcome(&frames(&out)).expect("outcome").rows
}

#[test]
fn grouping_past_the_budget_spills_and_sorts_in_runs() {
    let p = plan("SELECT g, count(*) FROM t GROUP BY g ORDER BY count(*) DESC, g");
    let small = MergeOptions { memory_budget: 64 << 10, text_order: TextOrder::Bytes };
    // 6000 groups; group i has 1 + i % 3 rows over two shards.
    let mut rows = Vec::new();
    for i in 0..6000 {
        for r in 0..=(i % 3) {
            rows.push((r % 2, vec![format!("{i:05}"), "1".to_string()]));
        }
    }
    let cols = [("g", 25), ("count", 20)];
    let mut without = Merger::new(&p, 2, small);
    let d = desc(&cols);
    without.row_description(0, &d).expect("describe");
    let e = rows
        .iter()
        .filter(|(s, _)| *s == 0)
        .find_map(|(_, c)| without.data_row(0, &row(&[Some(&c[0]), Some(&c[1])])).err())
        .expect("past the budget without spilling");
    assert_eq!(e.sqlstate(), "53200");
    assert!(e.to_string().contains("merge_spill"), "{e}");

    let store = MemStore::default();
    let mut m = Merger::new(&p, 2, small);
    m.set_spill(Box::new(store.clone()));
    let got = run(&mut m, 2, &cols, &rows);
    assert!(m.spilled_bytes() > 64 << 10, "spilled {}", m.spilled_bytes());
    assert!(store.files.load(std::sync::atomic::Ordering::Relaxed) > 16);
    let mut want: Vec<(u64, String)> = (0..6000).map(|i| (1 + i % 3, format!("{i:05}"))).collect();
    want.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    let want: Vec<Vec<Option<String>>> =
        want.into_iter().map(|(n, g)| vec![Some(g), Some(n.to_string())]).collect();
    assert_eq!(got, want);
}

#[test]
fn distinct_past_the_budget_spills_or_resets_per_sort_key() {
    let rows: Vec<(usize, Vec<String>)> =
        (0..8000).map(|i| (i % 3, vec![((i * 7919) % 5000).to_string()])).collect();
    let cols = [("k", 23)];
    let budget = MergeOptions { memory_budget: 32 << 10, text_order: TextOrder::Bytes };
    // Unsorted: the keys spill to partitions, each deduplicated alone.
    let store = MemStore::default();
    let mut m = Merger::new(&plan("SELECT DISTINCT k FROM t"), 3, budget);
    m.set_spill(Box::new(store));
    let mut got: Vec<i64> =
        run(&mut m, 3, &cols, &rows).into_iter().map(|r| r[0].as_deref().unwrap().parse().unwrap()).collect();
    got.sort();
    assert_eq!(got, (0..5000).collect::<Vec<i64>>());
    assert!(m.spilled_bytes() > 0);
    // Sorted: duplicates share their sort key, so the set spans one key at a time and the
    // budget holds without spilling. Each shard's rows come sorted.
    let mut sorted = rows.clone();
    sorted.sort_by_key(|(_, c)| c[0].parse::<i64>().unwrap());
    let mut m = Merger::new(&plan("SELECT DISTINCT k FROM t ORDER BY k"), 3, budget);
    let got: Vec<i64> = run(&mut m, 3, &cols, &sorted)
        .into_iter()
        .map(|r| r[0].as_deref().unwrap().parse().unwrap())
        .collect();
    assert_eq!(got, (0..5000).collect::<Vec<i64>>());
}

/// Throughput of the merge itself (run in release: `cargo test --release -p merge --test
/// scripted -- --ignored --nocapture`).
#[test]
#[ignore]
fn merge_throughput() {
    const SHARDS: usize = 4;
    const PER_SHARD: usize = 250_000;
    let timed = |sql: &str, cols: &[(&str, u32)], make: &dyn Fn(usize, usize) -> Vec<u8>| {
        let p = plan(sql);
        let mut m =
            Merger::new(&p, SHARDS, MergeOptions { memory_budget: 1 << 30, text_order: TextOrder::Bytes });
        let rows: Vec<Vec<Vec<u8>>> =
            (0..SHARDS).map(|s| (0..PER_SHARD).map(|i| make(s, i)).collect()).collect();
        let d = desc(cols);
        let start = std::time::Instant::now();
        let mut out = BytesMut::new();
        let mut next = [0usize; SHARDS];
        for s in 0..SHARDS {
            m.row_description(s, &d).expect("describe");
        }
        let mut emitted = 0usize;
        loop {
            if m.drain(&mut out).expect("drain") == Drained::Finished {
                break;
            }
            emitted += out.len();
            out.clear();
            for s in 0..SHARDS {
                // Feed in batches, as a socket read would deliver them.
                for _ in 0..64 {
                    if !m.needs_input(s) && next[s] > 0 {
                        break;
                    }
                    match rows[s].get(next[s]) {
                        Some(r) => m.data_row(s, r).expect("row"),
                        None => {
                            m.shard_done(s).expect("done");
                            break;
                        }
                    }
                    next[s] += 1;
                }
            }
        }
        let secs = start.elapsed().as_secs_f64();
        let n = SHARDS * PER_SHARD;
        println!(
            "{sql}: {n} rows in {secs:.3} s = {:.0} rows/s ({} output bytes)",
            n as f64 / secs,
            emitted + out.len()
        );
    };
    timed("SELECT id, s FROM t ORDER BY id", &[("id", 20), ("s", 25)], &|s, i| {
        let id = (i * SHARDS + s).to_string();
        row(&[Some(&id), Some("some payload text")])
    });
    timed(
        "SELECT g, count(*), sum(n), avg(n) FROM t GROUP BY g",
        &[("g", 23), ("count", 20), ("sum", 1700), ("sum", 1700), ("count", 20)],
        &|s, i| {
            let g = (i % 1000).to_string();
            let n = format!("{}.{:010}", i * 7 + s, i);
            row(&[Some(&g), Some("3"), Some(&n), Some(&n), Some("3")])
        },
    );
}
