//! psql through pgvia behaves exactly as psql straight to PostgreSQL: same output for queries,
//! multi-statement strings and errors (SQLSTATE, LINE, position), and `\copy` moves 100,000
//! rows in and out intact, in text and CSV.

// Helpers outside #[test] functions unwrap too: a failed step is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::fmt::Write as _;
use std::path::Path;

use common::{
    assert_success, direct_conninfo, psql, start_pg, text, ConfigBuilder, TestProxy, DB, PASSWORD, USER,
};
use harness::Cluster;

/// What psql printed and how it exited.
#[derive(Debug, PartialEq, Eq)]
struct Run {
    status: Option<i32>,
    stdout: String,
    stderr: String,
}

async fn run_psql(pg: &Cluster, conninfo: &str, args: &[&str], stdin: Option<&str>) -> Run {
    let out = psql(pg, conninfo, args, stdin).await;
    Run { status: out.status.code(), stdout: text(&out.stdout), stderr: text(&out.stderr) }
}

/// Runs the same psql command through pgvia and directly; both must print the same.
async fn same_both_ways(pg: &Cluster, proxy: &TestProxy, args: &[&str], stdin: Option<&str>) -> Run {
    let via = run_psql(pg, &proxy.conninfo(USER, PASSWORD, DB), args, stdin).await;
    let direct = run_psql(pg, &direct_conninfo(pg, USER, PASSWORD, DB), args, stdin).await;
    assert_eq!(via, direct, "psql {args:?} differs through pgvia (left) and directly (right)");
    via
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queries_multi_statements_and_errors_match_direct() {
    let pg = start_pg();
    let proxy = TestProxy::start(&ConfigBuilder::new(&pg)).await;

    let r =
        same_both_ways(&pg, &proxy, &["-c", "select 1 as one, 'two' as two, null::int as three"], None).await;
    assert_eq!(r.status, Some(0));
    assert!(r.stdout.contains(" one | two | three"), "{r:?}");
    assert!(r.stdout.contains("(1 row)"), "{r:?}");

    // One Query message carrying two statements: both results come back.
    let r = same_both_ways(&pg, &proxy, &["-At", "-c", "select 1; select 2"], None).await;
    assert_eq!(r.stdout, "1\n2\n");

    // A larger result, several round trips and a temp table (per session, so both runs are
    // independent).
    let script = "create temp table t(id int, s text);\n\
                  insert into t select g, repeat('x', g % 50) from generate_series(1, 5000) g;\n\
                  select count(*), sum(length(s)) from t;\n\
                  select id, s from t where id % 1000 = 0 order by id;\n\
                  begin;\nupdate t set s = 'y' where id < 10;\nrollback;\n\
                  select count(*) from t where s = 'y';\n";
    let r = same_both_ways(&pg, &proxy, &["-f", "-"], Some(script)).await;
    assert_eq!(r.status, Some(0), "{r:?}");
    assert!(r.stdout.contains("INSERT 0 5000"), "{r:?}");
    assert!(r.stdout.contains(" 5000 | 122500"), "{r:?}");

    // A syntax error: SQLSTATE, the offending line and the caret position.
    let bad = "select 1 from from t";
    let r = same_both_ways(&pg, &proxy, &["-v", "VERBOSITY=verbose", "-c", bad], None).await;
    assert_eq!(r.status, Some(1));
    assert!(r.stderr.contains("ERROR:  42601: syntax error at or near \"from\""), "{r:?}");
    // The caret sits under the second `from` (character 15 of the statement).
    let caret = format!("LINE 1: {bad}\n{}^", " ".repeat("LINE 1: ".len() + "select 1 from ".len()));
    assert!(r.stderr.contains(&caret), "{r:?}");

    // An error on a later line of a multi-line statement, and a run-time error, in a script
    // that carries on after each error.
    let script = "\\set VERBOSITY verbose\n\
                  select 1,\n  2,\n  nosuchcolumn;\n\
                  select 1/0;\n\
                  select 'after the errors' as still_working;\n";
    let r = same_both_ways(&pg, &proxy, &["-f", "-"], Some(script)).await;
    assert!(r.stderr.contains("ERROR:  42703: column \"nosuchcolumn\" does not exist"), "{r:?}");
    assert!(r.stderr.contains("LINE 3:   nosuchcolumn;"), "{r:?}");
    assert!(r.stderr.contains("ERROR:  22012: division by zero"), "{r:?}");
    assert!(r.stdout.contains("after the errors"), "{r:?}");

    // An error in the middle of a multi-statement string stops the rest of it.
    let r = same_both_ways(
        &pg,
        &proxy,
        &["-At", "-v", "VERBOSITY=verbose", "-c", "select 1; select x; select 3"],
        None,
    )
    .await;
    assert_eq!(r.stdout, "1\n");
    assert!(r.stderr.contains("ERROR:  42703"), "{r:?}");

    proxy.assert_no_leaks().await;
    proxy.stop().await;
}

/// Deterministic rows exercising escaping: tabs, newlines, backslashes, quotes, commas,
/// NULLs, empty strings and non-ASCII text.
fn generate_rows(n: u32, csv: bool) -> String {
    let specials =
        ["plain", "tab\there", "new\nline", "back\\slash", "quote\"d", "com,ma", "", "é ü 漢字", "\\N"];
    let mut out = String::with_capacity(n as usize * 60);
    for id in 1..=n {
        let s = format!("{}-{id}", specials[id as usize % specials.len()]);
        let s = if id % 7 == 0 {
            None
        } else if id % 11 == 0 {
            Some(String::new())
        } else {
            Some(s)
        };
        let f = f64::from(id) / 4.0;
        let b = if id % 2 == 0 { "t" } else { "f" };
        let n = i64::from(id) * 1_000_003 - 500_000_000;
        let field = |v: &Option<String>| match (v, csv) {
            (None, true) => String::new(),
            (None, false) => "\\N".to_owned(),
            (Some(v), true) => format!("\"{}\"", v.replace('"', "\"\"")),
            (Some(v), false) => {
                v.replace('\\', "\\\\").replace('\t', "\\t").replace('\n', "\\n").replace('\r', "\\r")
            }
        };
        let sep = if csv { "," } else { "\t" };
        writeln!(out, "{id}{sep}{n}{sep}{}{sep}{f}{sep}{b}", field(&s)).expect("write to string");
    }
    out
}

/// Loads a file with `\copy` (through pgvia or directly), returning `(count, md5)` of the
/// ordered rows as seen through the same path.
async fn copy_in(pg: &Cluster, conninfo: &str, table: &str, file: &Path, opts: &str) -> (String, String) {
    let script = format!(
        "create table {table} (id int primary key, n bigint, s text, f float8, b bool);\n\
         \\copy {table} from '{}' {opts}\n\
         select count(*) from {table};\n\
         select md5(string_agg(t::text, ',' order by id)) from {table} t;\n",
        file.display()
    );
    let out = psql(pg, conninfo, &["-At", "-v", "ON_ERROR_STOP=1", "-f", "-"], Some(&script)).await;
    assert_success("\\copy from", &out);
    let stdout = text(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 4, "unexpected psql output: {stdout:?}");
    assert_eq!(lines[0], "CREATE TABLE");
    assert_eq!(lines[1], "COPY 100000", "psql's report of the load");
    (lines[2].to_owned(), lines[3].to_owned())
}

async fn copy_out(pg: &Cluster, conninfo: &str, table: &str, file: &Path, opts: &str) -> Vec<u8> {
    let cmd = format!("\\copy (select * from {table} order by id) to '{}' {opts}", file.display());
    let out = psql(pg, conninfo, &["-At", "-v", "ON_ERROR_STOP=1", "-c", &cmd], None).await;
    assert_success("\\copy to", &out);
    assert_eq!(text(&out.stdout).trim(), "COPY 100000");
    std::fs::read(file).expect("read copied-out file")
}

async fn copy_round_trip(csv: bool) {
    const ROWS: u32 = 100_000;
    let pg = start_pg();
    let proxy = TestProxy::start(&ConfigBuilder::new(&pg)).await;
    let via = proxy.conninfo(USER, PASSWORD, DB);
    let direct = direct_conninfo(&pg, USER, PASSWORD, DB);
    let (ext, opts) = if csv { ("csv", "with (format csv)") } else { ("txt", "") };
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join(format!("data.{ext}"));
    std::fs::write(&data, generate_rows(ROWS, csv)).expect("write data file");

    let (n_via, md5_via) = copy_in(&pg, &via, "t_via", &data, opts).await;
    let (n_direct, md5_direct) = copy_in(&pg, &direct, "t_direct", &data, opts).await;
    assert_eq!(n_via, ROWS.to_string());
    assert_eq!(n_direct, ROWS.to_string());
    assert_eq!(md5_via, md5_direct, "rows loaded through pgvia differ from rows loaded directly");
    // And as PostgreSQL itself sees the table loaded through pgvia.
    let check =
        pg.psql(DB, "select count(*), md5(string_agg(t::text, ',' order by id)) from t_via t").expect("psql");
    assert_eq!(check, format!("{n_via}|{md5_via}"));

    let out_via = copy_out(&pg, &via, "t_direct", &dir.path().join("out_via"), opts).await;
    let out_direct = copy_out(&pg, &direct, "t_direct", &dir.path().join("out_direct"), opts).await;
    assert_eq!(out_via.len(), out_direct.len(), "size of the copied-out file");
    assert!(out_via == out_direct, "\\copy to through pgvia differs from a direct \\copy to");
    let lines = out_via.iter().filter(|&&b| b == b'\n').count();
    if csv {
        assert!(lines >= ROWS as usize, "{lines} lines"); // quoted newlines add lines
    } else {
        assert_eq!(lines, ROWS as usize);
    }

    proxy.assert_no_leaks().await;
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_text_100k_rows_in_and_out() {
    copy_round_trip(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_csv_100k_rows_in_and_out() {
    copy_round_trip(true).await;
}
