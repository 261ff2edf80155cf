//! `COPY` on a sharded database, with psql as the client: a million rows loaded in text, CSV
//! (with a header and quoted fields) and binary are split by key, each row landing on the
//! shard PostgreSQL's own hash partitioning picks; `COPY ... TO STDOUT` returns every row, and
//! its binary stream loads into a plain PostgreSQL table.

mod common;

use common::shards::{self, ShardClusters};
use common::{assert_success, direct_conninfo, psql, text, TestProxy, DB, PASSWORD, USER};

const ROWS: u64 = 1_000_000;

const SCHEMA: &str = "CREATE TABLE items_text (id bigint PRIMARY KEY, name text, qty int);
CREATE TABLE items_csv (id bigint PRIMARY KEY, name text, qty int);
CREATE TABLE items_bin (id bigint PRIMARY KEY, name text, qty int);
CREATE TABLE back (id bigint PRIMARY KEY, name text, qty int);";

async fn one_value(c: &ShardClusters, pg_index: Option<usize>, sql: &str) -> String {
    let pg = pg_index.map_or(&c.reference, |i| &c.shards[i]);
    let out = psql(pg, &direct_conninfo(pg, USER, PASSWORD, DB), &["-At", "-c", sql], None).await;
    assert_success(sql, &out);
    text(&out.stdout).trim().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_million_rows_in_each_format_land_on_their_shards() {
    let c = shards::start(SCHEMA);
    let proxy = TestProxy::start_toml(&shards::config(&c, &["items_text", "items_csv", "items_bin"])).await;
    let via = proxy.conninfo(USER, PASSWORD, DB);
    let dir = tempfile::tempdir().expect("tempdir");

    // The data: text made here; CSV and binary written by PostgreSQL itself from it.
    let text_file = dir.path().join("rows.txt");
    let mut data = String::with_capacity(ROWS as usize * 24);
    for id in 1..=ROWS {
        use std::fmt::Write;
        let _ = writeln!(data, "{id}\tname, \"{id}\"\\twith tab\t{}", id % 100);
    }
    std::fs::write(&text_file, data).expect("write rows");
    let reference = direct_conninfo(&c.reference, USER, PASSWORD, DB);
    let (csv_file, bin_file) = (dir.path().join("rows.csv"), dir.path().join("rows.bin"));
    let script = format!(
        "\\copy back from '{t}'\n\\copy back to '{c}' with (format csv, header)\n\\copy back to '{b}' with (format binary)\n\
         INSERT INTO placed SELECT id FROM back;\n",
        t = text_file.display(),
        c = csv_file.display(),
        b = bin_file.display()
    );
    let out = psql(&c.reference, &reference, &["-v", "ON_ERROR_STOP=1", "-f", "-"], Some(&script)).await;
    assert_success("reference load", &out);

    for (table, file, opts) in [
        ("items_text", &text_file, ""),
        ("items_csv", &csv_file, "with (format csv, header)"),
        ("items_bin", &bin_file, "with (format binary)"),
    ] {
        let cmd = format!("\\copy {table} from '{}' {opts}", file.display());
        let out = psql(&c.reference, &via, &["-v", "ON_ERROR_STOP=1", "-c", &cmd], None).await;
        assert_success(&cmd, &out);
        assert_eq!(text(&out.stdout).trim(), format!("COPY {ROWS}"), "{table}");
        // Each shard holds exactly the rows of its hash partition, and they are the rows sent.
        for shard in 0..shards::SHARDS {
            let placed = one_value(&c, None, &format!("SELECT count(*) FROM placed_{shard}")).await;
            let held = one_value(&c, Some(shard), &format!("SELECT count(*) FROM {table}")).await;
            assert_eq!(held, placed, "{table} on shard {shard}");
            let ids = "SELECT coalesce(sum(hashint8(id)::bigint), 0) FROM ";
            let want = one_value(&c, None, &format!("{ids}placed_{shard}")).await;
            assert_eq!(
                one_value(&c, Some(shard), &format!("{ids}{table}")).await,
                want,
                "ids of {table} on shard {shard}"
            );
        }
    }
    // The contents match the reference, row for row (a digest per shard, summed).
    let digest = |t: &str| format!("SELECT coalesce(sum(hashtext(t::text)::bigint), 0) FROM {t} t");
    let want = one_value(&c, None, &digest("back")).await;
    for table in ["items_text", "items_csv", "items_bin"] {
        let mut sum: i128 = 0;
        for shard in 0..shards::SHARDS {
            sum += one_value(&c, Some(shard), &digest(table)).await.parse::<i128>().expect("digest");
        }
        assert_eq!(sum.to_string(), want, "{table} differs from the reference");
    }

    // COPY TO through pgvia: every row, in text and binary.
    let out_text = dir.path().join("out.txt");
    let cmd = format!("\\copy items_text to '{}'", out_text.display());
    let out = psql(&c.reference, &via, &["-v", "ON_ERROR_STOP=1", "-c", &cmd], None).await;
    assert_success(&cmd, &out);
    assert_eq!(text(&out.stdout).trim(), format!("COPY {ROWS}"));
    assert_eq!(std::fs::read_to_string(&out_text).expect("read").lines().count() as u64, ROWS);
    let out_bin = dir.path().join("out.bin");
    let cmd = format!("\\copy items_bin to '{}' with (format binary)", out_bin.display());
    let out = psql(&c.reference, &via, &["-v", "ON_ERROR_STOP=1", "-c", &cmd], None).await;
    assert_success(&cmd, &out);
    let reload = format!("TRUNCATE back;\n\\copy back from '{}' with (format binary)\n", out_bin.display());
    let out = psql(&c.reference, &reference, &["-v", "ON_ERROR_STOP=1", "-f", "-"], Some(&reload)).await;
    assert_success("binary stream from pgvia loads into PostgreSQL", &out);
    assert_eq!(one_value(&c, None, &digest("back")).await, want);

    // A row whose key is not a bigint: the COPY fails on every shard, nothing is kept.
    let bad = dir.path().join("bad.txt");
    std::fs::write(&bad, "5000001\ta\t1\nnot-a-number\tb\t2\n").expect("write");
    let cmd = format!("\\copy items_text from '{}'", bad.display());
    let out = psql(&c.reference, &via, &["-c", &cmd], None).await;
    assert!(!out.status.success(), "a bad key must fail the COPY");
    assert!(text(&out.stderr).contains("row 2"), "{}", text(&out.stderr));
    for shard in 0..shards::SHARDS {
        assert_eq!(
            one_value(&c, Some(shard), "SELECT count(*) FROM items_text WHERE id = 5000001").await,
            "0"
        );
    }
    proxy.stop().await;
}
