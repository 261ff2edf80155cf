//! A client's statement names on a sharded database behave as on one PostgreSQL: a name is
//! taken when a server accepts its Parse, a Parse under a name in use gets 42P05 (and the
//! rest of its batch is skipped), a refused Parse leaves its name free, `DEALLOCATE` and Close
//! free a name, and the unnamed statement is replaced by every Parse. Each sequence is sent
//! through pgvia (four shards) and straight to the reference cluster, and the replies are
//! compared message for message (an error by its SQLSTATE and message). The same session
//! also holds at most `max_prepared_statements_per_client` names.

// Helpers outside #[test] functions unwrap too: a failed step is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::net::SocketAddr;

use common::raw::{
    self, bind, close_statement, describe_statement, execute, parse, query, summary, sync, RawConn,
};
use common::{TestProxy, DB, PASSWORD, USER};

const SCHEMA: &str = "CREATE TABLE items (id bigint PRIMARY KEY, name text NOT NULL);
ALTER TABLE items OWNER TO app;";
/// Rows 1 to 40, as one multi-row INSERT (pgvia splits it by shard).
fn rows() -> String {
    let values: Vec<String> = (1..=40).map(|k| format!("({k}, 'n{k}')")).collect();
    format!("INSERT INTO items (id, name) VALUES {}", values.join(", "))
}
const BY_ID: &str = "SELECT name FROM items WHERE id = $1";

/// One request and how many ReadyForQuery messages end its replies.
type Step = (Vec<u8>, usize);

fn step(parts: &[Vec<u8>]) -> Step {
    let bytes = parts.concat();
    let readies = parts.iter().filter(|p| p[0] == b'S' || p[0] == b'Q').count();
    (bytes, readies)
}

/// The sequences, each run on a fresh connection.
fn cases() -> Vec<(&'static str, Vec<Step>)> {
    let run = |name: &str, params: &[Option<&str>]| step(&[bind("", name, params), execute("", 0), sync()]);
    vec![
        (
            "a simple Query destroys the unnamed statement, not a named one",
            vec![
                step(&[parse("", "SELECT 11"), parse("kept", "SELECT 12"), sync()]),
                run("", &[]),
                step(&[query("SELECT 13")]),
                run("", &[]),
                step(&[describe_statement(""), sync()]),
                run("kept", &[]),
            ],
        ),
        (
            "a Bind of a name shaped like pgvia's: what came before it in the batch runs",
            vec![
                step(&[parse("before", "SELECT 21"), bind("", "pgvia_1", &[]), execute("", 0), sync()]),
                run("before", &[]),
                step(&[describe_statement("pgvia_2"), sync()]),
            ],
        ),
        (
            "a name in use gets 42P05 and keeps its statement",
            vec![
                step(&[parse("s1", "SELECT 1"), sync()]),
                step(&[parse("s1", "SELECT 2"), sync()]),
                step(&[parse("s1", "SELECT 1"), sync()]),
                run("s1", &[]),
            ],
        ),
        (
            "a refused Parse leaves its name free: its Bind gets 26000",
            vec![
                step(&[parse("s2", "SELEC 1"), sync()]),
                run("s2", &[]),
                step(&[describe_statement("s2"), sync()]),
            ],
        ),
        (
            "a refused Parse, then the same name parsed again",
            vec![
                step(&[parse("s3", "SELECT * FROM no_such_table"), sync()]),
                step(&[parse("s3", BY_ID), sync()]),
                run("s3", &[Some("3")]),
            ],
        ),
        (
            "Parse, Bind and Execute in one batch, the Parse refused",
            vec![
                step(&[
                    parse("s4", "SELECT nope FROM items WHERE id = $1"),
                    bind("", "s4", &[Some("4")]),
                    execute("", 0),
                    sync(),
                ]),
                run("s4", &[Some("4")]),
                step(&[parse("s4", BY_ID), bind("", "s4", &[Some("4")]), execute("", 0), sync()]),
                run("s4", &[Some("5")]),
            ],
        ),
        (
            "a Bind that fails after an accepted Parse: the name is taken",
            vec![
                step(&[parse("s5", BY_ID), bind("", "s5", &[Some("x")]), execute("", 0), sync()]),
                step(&[parse("s5", BY_ID), sync()]),
                run("s5", &[Some("6")]),
            ],
        ),
        (
            "a name parsed twice in one batch",
            vec![
                step(&[parse("d", "SELECT 5"), parse("d", "SELECT 6"), sync()]),
                run("d", &[]),
                step(&[parse("d2", "SELECT 7"), close_statement("d2"), parse("d2", "SELECT 8"), sync()]),
                run("d2", &[]),
            ],
        ),
        (
            "a duplicate after a write in the batch: the write is rolled back",
            vec![
                step(&[
                    parse("w", "INSERT INTO items (id, name) VALUES ($1, 'w')"),
                    bind("", "w", &[Some("500")]),
                    execute("", 0),
                    parse("w", "SELECT 1"),
                    sync(),
                ]),
                step(&[query("SELECT count(*) FROM items WHERE id = 500")]),
                run("w", &[Some("501")]),
                step(&[query("SELECT name FROM items WHERE id IN (500, 501) ORDER BY id")]),
                step(&[query("DELETE FROM items WHERE id > 40")]),
            ],
        ),
        (
            "DEALLOCATE frees a name; DEALLOCATE of an unknown name is 26000",
            vec![
                step(&[parse("x", "SELECT 7"), sync()]),
                step(&[query("DEALLOCATE x")]),
                step(&[query("DEALLOCATE x")]),
                run("x", &[]),
                step(&[parse("x", "SELECT 8"), sync()]),
                run("x", &[]),
                step(&[close_statement("x"), sync()]),
                step(&[parse("x", "SELECT 9"), sync()]),
                run("x", &[]),
            ],
        ),
        (
            "the unnamed statement is replaced by every Parse, and gone after a refused one",
            vec![
                step(&[parse("", "SELECT 10"), sync()]),
                step(&[parse("", "SELECT 11"), sync()]),
                run("", &[]),
                step(&[parse("", "SELECT 11"), bind("", "", &[]), execute("", 0), sync()]),
                step(&[parse("", "SELEC 12"), sync()]),
                run("", &[]),
                step(&[describe_statement(""), sync()]),
            ],
        ),
        (
            "a pipeline of two statements, the second refused",
            vec![
                step(&[
                    parse("p1", "SELECT 1"),
                    bind("", "p1", &[]),
                    execute("", 0),
                    parse("p2", "SELECT * FROM no_such_table"),
                    bind("", "p2", &[]),
                    execute("", 0),
                    sync(),
                ]),
                run("p1", &[]),
                run("p2", &[]),
                step(&[parse("p2", "SELECT 2"), sync()]),
            ],
        ),
        (
            "a statement that reads every shard (merged), then its name again",
            vec![
                step(&[
                    parse("m", "SELECT name FROM items ORDER BY id LIMIT 3"),
                    bind("", "m", &[]),
                    execute("", 0),
                    sync(),
                ]),
                run("m", &[]),
                step(&[parse("m", "SELECT 1"), sync()]),
                step(&[
                    parse("m2", "SELECT nope FROM items ORDER BY id"),
                    bind("", "m2", &[]),
                    execute("", 0),
                    sync(),
                ]),
                step(&[
                    parse("m2", "SELECT count(*) FROM items"),
                    bind("", "m2", &[]),
                    execute("", 0),
                    sync(),
                ]),
            ],
        ),
        (
            "an UPDATE that moves a row (run twice by pgvia) takes its name once",
            vec![
                step(&[
                    parse("k", "UPDATE items SET id = $1 WHERE id = $2"),
                    bind("", "k", &[Some("1010"), Some("10")]),
                    execute("", 0),
                    sync(),
                ]),
                run("k", &[Some("10"), Some("1010")]),
                step(&[parse("k", "SELECT 1"), sync()]),
                step(&[query("SELECT id, name FROM items WHERE id IN (10, 1010)")]),
            ],
        ),
        (
            "inside a transaction, a duplicate aborts it",
            vec![
                step(&[query("BEGIN")]),
                step(&[parse("t", "SELECT 1"), sync()]),
                step(&[parse("t", "SELECT 2"), sync()]),
                run("t", &[]),
                step(&[query("ROLLBACK")]),
                run("t", &[]),
            ],
        ),
        (
            // pgx prepares with Parse, Describe and Sync, and after a failed prepare prepares
            // the same name again.
            "a driver's prepare (Parse, Describe) that fails, then succeeds",
            vec![
                step(&[
                    parse("stmtcache_1", "SELECT nope FROM items WHERE id = $1"),
                    describe_statement("stmtcache_1"),
                    sync(),
                ]),
                step(&[parse("stmtcache_1", BY_ID), describe_statement("stmtcache_1"), sync()]),
                run("stmtcache_1", &[Some("7")]),
            ],
        ),
    ]
}

async fn replies(addr: SocketAddr, steps: &[Step]) -> Vec<Vec<String>> {
    let mut conn = RawConn::login(addr, USER, PASSWORD, DB).await.unwrap();
    let mut out = Vec::new();
    for (bytes, readies) in steps {
        conn.send(bytes).await;
        let mut got = Vec::new();
        for _ in 0..*readies {
            got.extend(conn.until_ready().await.iter().filter_map(summary));
        }
        out.push(got);
    }
    conn.send(&raw::terminate()).await;
    out
}

async fn start(
    more: impl FnOnce(common::ConfigBuilder) -> common::ConfigBuilder,
) -> (common::shards::ShardClusters, TestProxy, SocketAddr) {
    let c = common::shards::start(SCHEMA);
    let toml = common::shards::config_with(&c, &["items"], more);
    let proxy = TestProxy::start_toml(&toml).await;
    let via = proxy.connect(USER, PASSWORD, DB).await;
    via.batch_execute(&rows()).await.unwrap();
    c.reference.psql(DB, &rows()).unwrap();
    let direct: SocketAddr = format!("{}:{}", c.reference.host(), c.reference.port()).parse().unwrap();
    (c, proxy, direct)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statement_names_answer_as_postgres_does() {
    let (_c, proxy, direct) = start(|b| b).await;
    for (what, steps) in cases() {
        let want = replies(direct, &steps).await;
        let got = replies(proxy.addr, &steps).await;
        assert_eq!(got.len(), want.len(), "{what}");
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g, w, "{what}: step {i}");
        }
    }
    // The sequences above did see both outcomes.
    let all: Vec<String> = {
        let mut v = Vec::new();
        for (_, steps) in cases() {
            v.extend(replies(direct, &steps).await.into_iter().flatten());
        }
        v
    };
    assert!(all.iter().any(|m| m.starts_with("E 42P05")));
    assert!(all.iter().any(|m| m.starts_with("E 26000")));
    proxy.assert_no_leaks().await;
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sharded_session_holds_at_most_the_configured_names() {
    let (_c, proxy, _direct) = start(|b| b.general("max_prepared_statements_per_client = 3")).await;
    let limit =
        "E 53400 too many prepared statements in this session (max_prepared_statements_per_client = 3)";
    let steps = vec![
        step(&[parse("a", "SELECT 1"), parse("b", "SELECT 2"), parse("", "SELECT 0"), sync()]),
        // The third name fits; the fourth, in the same batch, does not (and the name parsed
        // before it in the batch stays).
        step(&[parse("c", "SELECT 3"), parse("d", "SELECT 4"), sync()]),
        step(&[parse("d", "SELECT 4"), sync()]),
        // The unnamed statement does not count.
        step(&[parse("", "SELECT 5"), bind("", "", &[]), execute("", 0), sync()]),
        // Closing a name makes room; a refused Parse takes none.
        step(&[close_statement("a"), sync()]),
        step(&[parse("e", "SELEC 6"), sync()]),
        step(&[parse("d", "SELECT 4"), bind("", "d", &[]), execute("", 0), sync()]),
        step(&[parse("f", "SELECT 7"), sync()]),
        step(&[query("DEALLOCATE b")]),
        step(&[parse("f", "SELECT 7"), sync()]),
    ];
    let got = replies(proxy.addr, &steps).await;
    let want: Vec<Vec<&str>> = vec![
        vec!["1", "1", "1", "Z I"],
        vec!["1", limit, "Z I"],
        vec![limit, "Z I"],
        vec!["1", "2", "D |\u{1}|||\u{1}5", "C SELECT 1|", "Z I"],
        vec!["3", "Z I"],
        vec!["E 42601 syntax error at or near \"SELEC\"", "Z I"],
        vec!["1", "2", "D |\u{1}|||\u{1}4", "C SELECT 1|", "Z I"],
        vec![limit, "Z I"],
        vec!["C DEALLOCATE|", "Z I"],
        vec!["1", "Z I"],
    ];
    assert_eq!(got, want);
    proxy.stop().await;
}
