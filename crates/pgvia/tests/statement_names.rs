//! pgvia's own statement names (`pgvia_<n>`) are out of clients' reach, and no client can
//! make the statement registry grow without bound: a name a client did not prepare gets
//! PostgreSQL's own "does not exist" (compared with the same request sent straight to
//! PostgreSQL), and a flood of prepares meets a cap with a clear error while other clients
//! go on.
//!
//! In session mode pgvia does not rename statements at all (the client's names are the
//! server's, exactly as PostgreSQL has them), so only transaction mode is tested here.

// Helpers outside #[test] functions unwrap too: a failed step is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::{Buf, BytesMut};
use common::raw::{self, summary, Msg, RawConn};
use common::{start_pg, ConfigBuilder, TestProxy, DB, PASSWORD, USER};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn transaction_config(pg: &harness::Cluster) -> ConfigBuilder {
    // One server: the intruder's requests reach the very server that holds the victim's
    // statement.
    ConfigBuilder::new(pg).pool("pool_mode = \"transaction\"").pool("pool_size = 1")
}

/// Sends `bytes` and reads up to the `readies`-th ReadyForQuery.
async fn exchange(conn: &mut RawConn, bytes: &[u8], readies: usize) -> Vec<String> {
    conn.send(bytes).await;
    let mut out = Vec::new();
    for _ in 0..readies {
        out.extend(conn.until_ready().await.iter().filter_map(summary));
    }
    out
}

/// The victim's statement still answers through pgvia.
async fn victim_still_works(victim: &mut RawConn) {
    let sent = [raw::bind("", "s1", &[]), raw::execute("", 0), raw::sync()].concat();
    let got = exchange(victim, &sent, 1).await;
    assert_eq!(got, ["2", "D |\u{1}|||\u{2}42", "C SELECT 1|", "Z I"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_cannot_reach_statements_by_pgvia_names() {
    let pg = start_pg();
    let proxy = TestProxy::start(&transaction_config(&pg)).await;
    let direct_addr: SocketAddr = format!("{}:{}", pg.host(), pg.port()).parse().unwrap();

    let mut victim = RawConn::login(proxy.addr, USER, PASSWORD, DB).await.unwrap();
    let prepare = [raw::parse("s1", "SELECT 42"), raw::sync()].concat();
    assert_eq!(exchange(&mut victim, &prepare, 1).await, ["1", "Z I"]);
    // Its first use parses it on the server (the prepare was answered without one).
    victim_still_works(&mut victim).await;
    let injected = proxy.app.statements.snapshot().injected_parses;
    let statements = proxy.app.statements.statements();
    assert_eq!(statements.len(), 1);
    let name = statements[0].server_name().to_owned();
    assert!(name.starts_with("pgvia_"), "{name}");

    let mut intruder = RawConn::login(proxy.addr, USER, PASSWORD, DB).await.unwrap();
    let mut direct = RawConn::login(direct_addr, USER, PASSWORD, DB).await.unwrap();
    let cases: Vec<(&str, Vec<u8>, usize)> = vec![
        ("Bind", [raw::bind("", &name, &[]), raw::execute("", 0), raw::sync()].concat(), 1),
        ("Describe", [raw::describe_statement(&name), raw::sync()].concat(), 1),
        ("Close", [raw::close_statement(&name), raw::sync()].concat(), 1),
        ("EXECUTE", raw::query(&format!("EXECUTE {name}")), 1),
        ("DEALLOCATE", raw::query(&format!("DEALLOCATE {name}")), 1),
        ("DEALLOCATE PREPARE", raw::query(&format!("DeAllocate Prepare \"{name}\"")), 1),
        // Inside a transaction block: the error aborts it, as PostgreSQL's does.
        (
            "Bind in a transaction",
            [
                raw::query("BEGIN"),
                raw::bind("", &name, &[]),
                raw::execute("", 0),
                raw::sync(),
                raw::query("ROLLBACK"),
            ]
            .concat(),
            3,
        ),
        // Several statements in one query go to the server as they came: still refused.
        ("EXECUTE among others", raw::query(&format!("EXECUTE {name}; SELECT 1")), 1),
        // pgvia never names portals, so a portal of that name is the client's own business.
        ("Describe portal", [raw::describe_portal(&name), raw::sync()].concat(), 1),
    ];
    for (what, bytes, readies) in cases {
        let expected = exchange(&mut direct, &bytes, readies).await;
        let got = exchange(&mut intruder, &bytes, readies).await;
        assert_eq!(got, expected, "{what}: through pgvia as straight to PostgreSQL");
        victim_still_works(&mut victim).await;
    }
    // A query of several statements is refused whole: unlike PostgreSQL, the statements
    // before the one naming pgvia's statement do not run (the error is the same).
    for sql in
        [format!("SELECT 1 WHERE false; DEALLOCATE {name}"), format!("SELECT 1; PREPARE {name} AS SELECT 2")]
    {
        let got = exchange(&mut intruder, &raw::query(&sql), 1).await;
        let error = if sql.contains("PREPARE") {
            format!("E 42P05 prepared statement \"{name}\" already exists")
        } else {
            format!("E 26000 prepared statement \"{name}\" does not exist")
        };
        assert_eq!(got, [error.as_str(), "Z I"], "{sql}");
        victim_still_works(&mut victim).await;
    }
    // The statement pgvia made was never touched: the server still holds it under its name.
    let snapshot = proxy.app.statements.snapshot();
    assert_eq!(snapshot.injected_parses, injected, "the victim's statement never had to be made again");
    for conn in [&mut victim, &mut intruder] {
        conn.send(&raw::terminate()).await;
    }
    proxy.assert_no_leaks().await;
    proxy.stop().await;
}

/// Parameter types chosen against the fixed hash seed pgvia used before (see the unit test
/// `three_chosen_parameter_types_no_longer_make_every_statement_collide`).
const CHOSEN_TYPES: [u32; 3] = [0xc97c_50dd, 0xc0ac_29b7, 23];

/// Every message in `buf` that is whole, by tag and body.
fn take_messages(buf: &mut BytesMut, out: &mut Vec<Msg>) {
    while buf.len() >= 5 {
        let len = i32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]) as usize;
        if buf.len() < 1 + len {
            return;
        }
        let tag = buf[0];
        buf.advance(5);
        out.push(Msg { tag, body: buf.split_to(len - 4).freeze() });
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_lone_prepares_hits_the_cap_while_others_keep_working() {
    const FLOOD: usize = 200_000;
    let pg = start_pg();
    let config = transaction_config(&pg).pool("pool_size = 2");
    let proxy = TestProxy::start(&config).await;
    let cap = proxy.app.statements.caps.per_client();
    assert_eq!(cap, 10_000, "the default");

    // Another client keeps running a prepared statement all along.
    let other = proxy.connect(USER, PASSWORD, DB).await;
    let (stop_tx, mut stop_rx) = tokio::sync::oneshot::channel::<()>();
    let bystander = tokio::spawn(async move {
        let stmt = other.prepare("SELECT $1::int + 1").await.unwrap();
        let mut runs = 0i32;
        while stop_rx.try_recv().is_err() {
            let row = other.query_one(&stmt, &[&runs]).await.unwrap();
            assert_eq!(row.get::<_, i32>(0), runs + 1);
            runs += 1;
        }
        runs
    });

    // The flood: distinct statements, each a lone Parse + Sync, written while the replies are
    // read (a client that does not read is not read either).
    let conn = RawConn::login(proxy.addr, USER, PASSWORD, DB).await.unwrap();
    let (mut rd, mut wr) = conn.stream.into_split();
    let started = Instant::now();
    let writer = tokio::spawn(async move {
        let mut chunk = Vec::new();
        for i in 0..FLOOD {
            chunk.extend(raw::parse_typed(&format!("s{i}"), &format!("SELECT {i}"), &CHOSEN_TYPES));
            chunk.extend(raw::sync());
            if chunk.len() > 64 * 1024 {
                wr.write_all(&chunk).await.unwrap();
                chunk.clear();
            }
        }
        wr.write_all(&chunk).await.unwrap();
        wr
    });
    let mut buf = BytesMut::with_capacity(1 << 16);
    let mut msgs = Vec::new();
    let (mut readies, mut completes, mut first_error) = (0usize, 0usize, None::<(usize, Msg)>);
    let mut errors = 0usize;
    while readies < FLOOD {
        let n = tokio::time::timeout(Duration::from_secs(60), rd.read_buf(&mut buf)).await.unwrap().unwrap();
        assert!(n > 0, "pgvia closed the flooding client after {readies} answers");
        take_messages(&mut buf, &mut msgs);
        for m in msgs.drain(..) {
            match m.tag {
                b'1' => completes += 1,
                b'Z' => {
                    assert_eq!(&m.body[..], b"I");
                    readies += 1;
                }
                b'E' => {
                    errors += 1;
                    first_error.get_or_insert((readies, m));
                }
                other => panic!("unexpected {:?}", char::from(other)),
            }
        }
    }
    let flood_time = started.elapsed();
    let mut wr = writer.await.unwrap();
    assert_eq!(completes, cap, "every prepare up to the cap succeeds");
    assert_eq!(errors, FLOOD - cap, "every one past it is refused");
    let (at, error) = first_error.unwrap();
    assert_eq!(at, cap);
    let f = error.fields();
    assert_eq!(f[&'S'], "ERROR");
    assert_eq!(f[&'C'], "53400");
    assert_eq!(
        f[&'M'],
        "too many prepared statements in this session (max_prepared_statements_per_client = 10000)"
    );
    assert!(f[&'H'].contains("max_prepared_statements_per_client"), "{:?}", f.get(&'H'));
    assert!(proxy.app.statements.snapshot().statements <= cap + 1, "the registry did not grow past the cap");

    // The session goes on: closing a statement makes room for another.
    let more = [
        raw::parse("fresh", "SELECT 'fresh'"),
        raw::sync(),
        raw::close_statement("s0"),
        raw::parse("fresh", "SELECT 'fresh'"),
        raw::bind("", "fresh", &[]),
        raw::execute("", 0),
        raw::sync(),
    ]
    .concat();
    wr.write_all(&more).await.unwrap();
    let mut got = Vec::new();
    while got.iter().filter(|m: &&Msg| m.tag == b'Z').count() < 2 {
        tokio::time::timeout(Duration::from_secs(10), rd.read_buf(&mut buf)).await.unwrap().unwrap();
        take_messages(&mut buf, &mut got);
    }
    let summaries: Vec<String> = got.iter().filter_map(summary).collect();
    let refused =
        "E 53400 too many prepared statements in this session (max_prepared_statements_per_client = 10000)";
    assert_eq!(summaries, [refused, "Z I", "3", "1", "2", "D |\u{1}|||\u{5}fresh", "C SELECT 1|", "Z I"]);

    stop_tx.send(()).unwrap();
    let runs = bystander.await.unwrap();
    assert!(runs > 0, "the other client ran while the flood went on");
    eprintln!("flood of {FLOOD} answered in {flood_time:?}; the other client ran {runs} queries");
    drop((rd, wr));
    proxy.assert_no_leaks().await;
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_total_cap_holds_for_all_clients_together() {
    let pg = start_pg();
    let config = transaction_config(&pg)
        .general("max_prepared_statements_per_client = 1000")
        .general("max_prepared_statements_total = 3");
    let proxy = TestProxy::start(&config).await;
    let mut alice = RawConn::login(proxy.addr, USER, PASSWORD, DB).await.unwrap();
    let mut bob = RawConn::login(proxy.addr, USER, PASSWORD, DB).await.unwrap();
    for i in 0..3 {
        let sent = [raw::parse(&format!("a{i}"), &format!("SELECT {i}")), raw::sync()].concat();
        assert_eq!(exchange(&mut alice, &sent, 1).await, ["1", "Z I"]);
    }
    let refused = "E 53400 too many prepared statements in pgvia (max_prepared_statements_total = 3)";
    // A new statement, by either protocol, in or out of a transaction, is refused...
    let sent = [raw::parse("b0", "SELECT 'new'"), raw::sync()].concat();
    assert_eq!(exchange(&mut bob, &sent, 1).await, [refused, "Z I"]);
    let sent = raw::query("PREPARE b1 AS SELECT 'new'");
    assert_eq!(exchange(&mut bob, &sent, 1).await, [refused, "Z I"]);
    let sent =
        [raw::query("BEGIN"), raw::parse("b2", "SELECT 'new'"), raw::sync(), raw::query("ROLLBACK")].concat();
    assert_eq!(exchange(&mut bob, &sent, 3).await, ["C BEGIN|", "Z T", refused, "Z E", "C ROLLBACK|", "Z I"]);
    // ... while one already registered is shared as before.
    let sent =
        [raw::parse("b3", "SELECT 1"), raw::bind("", "b3", &[]), raw::execute("", 0), raw::sync()].concat();
    assert_eq!(exchange(&mut bob, &sent, 1).await, ["1", "2", "D |\u{1}|||\u{1}1", "C SELECT 1|", "Z I"]);
    // Once alice leaves, the statements nobody uses make room.
    alice.send(&raw::terminate()).await;
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let sent = [raw::parse("b4", "SELECT 'new'"), raw::sync()].concat();
        let got = exchange(&mut bob, &sent, 1).await;
        if got == ["1", "Z I"] {
            break;
        }
        assert_eq!(got, [refused, "Z I"]);
        assert!(Instant::now() < deadline, "room was made once the statements were unused");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    bob.send(&raw::terminate()).await;
    proxy.assert_no_leaks().await;
    proxy.stop().await;
}
