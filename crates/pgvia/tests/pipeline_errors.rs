//! An error in the middle of a pipeline reaches the client exactly as PostgreSQL sends it, and
//! the connection carries on. Each pipeline goes to pgvia and, on a second connection,
//! straight to PostgreSQL; the replies must be the same messages, byte for byte.

// Helpers outside #[test] functions unwrap too: a failed step is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::net::SocketAddr;

use common::raw::{bind, describe, describe_portal, execute, parse, query, sync, Msg, RawConn};
use common::{sqlstate, start_pg, ConfigBuilder, TestProxy, DB, PASSWORD, USER};
use futures_util::future::join_all;

struct Pair {
    via: RawConn,
    direct: RawConn,
}

impl Pair {
    async fn open(proxy: SocketAddr, pg: SocketAddr) -> Pair {
        let via = RawConn::login(proxy, USER, PASSWORD, DB).await.expect("login through pgvia");
        let direct = RawConn::login(pg, USER, PASSWORD, DB).await.expect("login to PostgreSQL");
        Pair { via, direct }
    }

    /// Sends `frames` as one write to both and returns pgvia's replies up to ReadyForQuery,
    /// after checking they equal PostgreSQL's.
    async fn exchange(&mut self, frames: &[Vec<u8>]) -> Vec<Msg> {
        let bytes: Vec<u8> = frames.concat();
        self.via.send(&bytes).await;
        self.direct.send(&bytes).await;
        let via = self.via.until_ready().await;
        let direct = self.direct.until_ready().await;
        assert_eq!(
            describe(&via),
            describe(&direct),
            "replies through pgvia (left) differ from PostgreSQL's own (right)"
        );
        assert!(via == direct, "replies match field by field but not byte for byte");
        via
    }
}

fn tags(msgs: &[Msg]) -> String {
    msgs.iter().map(|m| char::from(m.tag)).collect()
}

fn errors(msgs: &[Msg]) -> Vec<String> {
    msgs.iter().filter(|m| m.tag == b'E').map(|m| m.sqlstate().unwrap_or_default()).collect()
}

fn ready_status(msgs: &[Msg]) -> u8 {
    let last = msgs.last().expect("at least ReadyForQuery");
    assert_eq!(last.tag, b'Z');
    last.body[0]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extended_pipeline_error_matches_postgres_and_next_pipeline_works() {
    let pg = start_pg();
    let proxy = TestProxy::start(&ConfigBuilder::new(&pg)).await;
    let pg_addr: SocketAddr = format!("{}:{}", pg.host(), pg.port()).parse().unwrap();
    let mut pair = Pair::open(proxy.addr, pg_addr).await;

    // Three Parse/Bind/Execute, the middle one failing, then one Sync.
    let pipeline = [
        parse("", "select $1::int + 1 as answer"),
        bind("", "", &[Some("41")]),
        describe_portal(""),
        execute("", 0),
        parse("", "select 1/0"),
        bind("", "", &[]),
        execute("", 0),
        parse("", "select 'never reached'"),
        bind("", "", &[]),
        execute("", 0),
        sync(),
    ];
    let replies = pair.exchange(&pipeline).await;
    // ParseComplete, BindComplete, RowDescription, DataRow, CommandComplete, ParseComplete,
    // then the error (constant folding at Bind); the third query is skipped up to the Sync.
    assert_eq!(tags(&replies), "12TDC1EZ");
    assert_eq!(errors(&replies), ["22012"]);
    let error = replies.iter().find(|m| m.tag == b'E').unwrap().fields();
    assert_eq!(error.get(&'S').map(String::as_str), Some("ERROR"));
    assert_eq!(error.get(&'M').map(String::as_str), Some("division by zero"));
    assert_eq!(ready_status(&replies), b'I');

    // The next pipeline on the same connections works: a named statement executed twice.
    let replies = pair
        .exchange(&[
            parse("twice", "select $1::int * 2"),
            bind("p1", "twice", &[Some("21")]),
            execute("p1", 0),
            bind("", "twice", &[Some("-4")]),
            execute("", 0),
            sync(),
        ])
        .await;
    assert_eq!(tags(&replies), "12DC2DCZ");
    assert_eq!(&replies[2].body[..], b"\x00\x01\x00\x00\x00\x0242");
    assert_eq!(&replies[5].body[..], b"\x00\x01\x00\x00\x00\x02-8");

    // A syntax error at Parse, with its position, in the middle of the pipeline.
    let replies = pair
        .exchange(&[
            parse("", "select 1"),
            bind("", "", &[]),
            execute("", 0),
            parse("", "select 1 from from"),
            bind("", "", &[]),
            execute("", 0),
            sync(),
            parse("", "select 'after sync'"),
            bind("", "", &[]),
            execute("", 0),
            sync(),
        ])
        .await;
    assert_eq!(tags(&replies), "12DCEZ");
    assert_eq!(replies[4].fields().get(&'P').map(String::as_str), Some("15"), "error position");
    let replies = pair.via.until_ready().await;
    let direct = pair.direct.until_ready().await;
    assert!(replies == direct);
    assert_eq!(tags(&replies), "12DCZ");

    drop(pair);
    proxy.assert_no_leaks().await;
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_transaction_in_pipeline_and_simple_query_errors() {
    let pg = start_pg();
    let proxy = TestProxy::start(&ConfigBuilder::new(&pg)).await;
    let pg_addr: SocketAddr = format!("{}:{}", pg.host(), pg.port()).parse().unwrap();
    let mut pair = Pair::open(proxy.addr, pg_addr).await;
    // A temp table each: the two sessions cannot block each other.
    pair.exchange(&[query("create temp table t (id int primary key)")]).await;

    // Inside a transaction, a failing statement aborts it.
    let replies = pair
        .exchange(&[
            parse("", "begin"),
            bind("", "", &[]),
            execute("", 0),
            parse("ins", "insert into t values ($1::int)"),
            bind("", "ins", &[Some("1")]),
            execute("", 0),
            parse("", "select 1/0"),
            bind("", "", &[]),
            execute("", 0),
            sync(),
        ])
        .await;
    assert_eq!(tags(&replies), "12C12C1EZ");
    assert_eq!(ready_status(&replies), b'E', "transaction is aborted");

    // The next pipeline is refused in the aborted transaction until ROLLBACK.
    let replies = pair
        .exchange(&[parse("", "select 1"), bind("", "", &[]), execute("", 0), sync(), query("rollback")])
        .await;
    assert_eq!(errors(&replies), ["25P02"]);
    let replies = {
        let via = pair.via.until_ready().await;
        let direct = pair.direct.until_ready().await;
        assert!(via == direct, "{:?} vs {:?}", describe(&via), describe(&direct));
        via
    };
    assert_eq!(tags(&replies), "CZ");
    assert_eq!(ready_status(&replies), b'I');

    // A multi-statement simple query failing in its middle: the rest is not run.
    let replies = pair.exchange(&[query("select 1; select 1/0; select 3")]).await;
    assert_eq!(tags(&replies), "TDCEZ");
    let replies = pair.exchange(&[query("select 'next query works'")]).await;
    assert_eq!(tags(&replies), "TDCZ");

    let replies = pair.exchange(&[query("select count(*) from t")]).await;
    assert_eq!(&replies[1].body[..], b"\x00\x01\x00\x00\x00\x010", "the insert was rolled back");
    drop(pair);
    proxy.assert_no_leaks().await;
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokio_postgres_concurrent_queries_with_one_failing() {
    let pg = start_pg();
    let proxy = TestProxy::start(&ConfigBuilder::new(&pg)).await;
    let via = proxy.connect(USER, PASSWORD, DB).await;
    let direct = common::connect(&common::direct_conninfo(&pg, USER, PASSWORD, DB)).await.unwrap();

    let sqls = ["select 1::int", "select 1/0", "select 3::int", "select nosuch", "select 5::int"];
    let (a, b) = futures_util::join!(
        join_all(sqls.iter().map(|s| via.query(*s, &[]))),
        join_all(sqls.iter().map(|s| direct.query(*s, &[])))
    );
    for (i, (via_r, direct_r)) in a.iter().zip(&b).enumerate() {
        match (via_r, direct_r) {
            (Ok(v), Ok(d)) => {
                assert_eq!(v.len(), 1);
                assert_eq!(v[0].get::<_, i32>(0), d[0].get::<_, i32>(0));
            }
            (Err(v), Err(d)) => {
                let (v, d) = (v.as_db_error().unwrap(), d.as_db_error().unwrap());
                assert_eq!(v.code(), d.code(), "query {i}");
                assert_eq!(v.message(), d.message(), "query {i}");
                assert_eq!(v.severity(), d.severity(), "query {i}");
                assert_eq!(v.position(), d.position(), "query {i}");
                assert_eq!(v.routine(), d.routine(), "query {i}");
            }
            _ => panic!("query {i}: through pgvia {via_r:?}, directly {direct_r:?}"),
        }
    }
    assert_eq!(sqlstate(a[1].as_ref().unwrap_err()).as_deref(), Some("22012"));
    assert_eq!(sqlstate(a[3].as_ref().unwrap_err()).as_deref(), Some("42703"));
    assert_eq!(a[4].as_ref().unwrap()[0].get::<_, i32>(0), 5);
    // And the connection is fine afterwards.
    assert_eq!(via.query_one("select 7::int", &[]).await.unwrap().get::<_, i32>(0), 7);

    drop(via);
    proxy.assert_no_leaks().await;
    proxy.stop().await;
}
