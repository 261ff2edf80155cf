//! pgvia survives hostile input: 1,000 malformed startup packets and 1,000 garbage frames
//! after a successful login, from 40 concurrent tasks, while a well-behaved client keeps
//! running queries without a single error. Afterwards a new client works, no session or
//! server is left behind, and no pgvia task panicked.
//!
//! The input is random but reproducible: the seed is printed, and `PGVIA_FUZZ_SEED=<n>`
//! replays a run.

// Helpers outside #[test] functions unwrap too: a failed step is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BufMut;
use common::raw::{self, query, sync, RawConn, CANCEL_CODE, GSSENC_CODE, PROTOCOL_3_0, SSL_CODE};
use common::{start_pg, ConfigBuilder, TestProxy, DB, PASSWORD, USER};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::io::AsyncWriteExt;

const TASKS: u64 = 20;
const PER_TASK: usize = 50;
const FUZZ_USER: &str = "fuzz";
const FUZZ_PASSWORD: &str = "fuzz-pass";

/// Panics on pgvia's runtime threads. A panicking session task would not stop the proxy, so
/// it must be counted to be noticed.
static WORKER_PANICS: AtomicUsize = AtomicUsize::new(0);

fn count_worker_panics() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if std::thread::current().name().is_some_and(|n| n.starts_with("tokio-runtime-worker")) {
            WORKER_PANICS.fetch_add(1, Ordering::SeqCst);
        }
        default(info);
    }));
}

/// Random bytes, as many as a random pick from `len`.
fn bytes(rng: &mut StdRng, len: std::ops::Range<usize>) -> Vec<u8> {
    let n = rng.gen_range(len);
    (0..n).map(|_| rng.gen()).collect()
}

fn cstrings(parts: &[&[u8]]) -> Vec<u8> {
    let mut v = Vec::new();
    for p in parts {
        v.extend_from_slice(p);
        v.push(0);
    }
    v
}

/// One malformed packet for the untagged startup phase.
fn bad_startup(rng: &mut StdRng) -> Vec<u8> {
    match rng.gen_range(0..12) {
        // Length fields that cannot be right: below 4, below 8, negative.
        0 => {
            let mut v = rng.gen_range(0..4i32).to_be_bytes().to_vec();
            v.extend(bytes(rng, 0..8));
            v
        }
        1 => {
            let mut v = rng.gen_range(4..8i32).to_be_bytes().to_vec();
            v.extend(bytes(rng, 4..5));
            v
        }
        2 => {
            let mut v = rng.gen_range(i32::MIN..0).to_be_bytes().to_vec();
            v.extend(bytes(rng, 8..9));
            v
        }
        // Huge, and then only a few bytes.
        3 => {
            let mut v = rng.gen_range(20_000..=i32::MAX).to_be_bytes().to_vec();
            v.put_i32(PROTOCOL_3_0);
            v.extend(bytes(rng, 0..64));
            v
        }
        // Truncated: a plausible length, part of the body.
        4 => {
            let full = raw::startup(&[("user", "someone"), ("database", DB)]);
            full[..rng.gen_range(1..full.len())].to_vec()
        }
        // Random request codes with random bodies.
        5 => raw::untagged(rng.gen(), &bytes(rng, 0..100)),
        // Unsupported protocol versions.
        6 => {
            let code = [0x0002_0000, 0x0003_0063, 0x0004_0000, rng.gen()][rng.gen_range(0..4)];
            raw::untagged(code, &cstrings(&[b"user", b"someone", b""]))
        }
        // Protocol 3.0 with broken parameter lists.
        7 => {
            let rest: Vec<u8> = match rng.gen_range(0..6) {
                0 => b"user\0someone".to_vec(),                               // no terminators
                1 => cstrings(&[b"user", b"a", b"database"]), // odd number of strings, no final NUL
                2 => cstrings(&[b"user", b"", b""]),          // empty user
                3 => cstrings(&[b"database", DB.as_bytes(), b""]), // no user
                4 => cstrings(&[b"user", &[0xff, 0xfe, 0xc3], b""]), // not UTF-8
                _ => cstrings(&[b"user", b"nobody", b"options", b"-c", b""]), // bad options
            };
            raw::untagged(PROTOCOL_3_0, &rest)
        }
        // CancelRequests of the wrong size, or with a random key.
        8 => {
            let n = [0, 4, 12, rng.gen_range(13..64)][rng.gen_range(0..4)];
            raw::untagged(CANCEL_CODE, &bytes(rng, n..n + 1))
        }
        // SSLRequest with bytes glued on, GSSENCRequest twice, SSLRequest of the wrong size.
        9 => {
            let mut v = raw::untagged(SSL_CODE, &[]);
            v.extend(bytes(rng, 1..40));
            v
        }
        10 => {
            let mut v = raw::untagged(GSSENC_CODE, &[]);
            v.extend(raw::untagged(GSSENC_CODE, &[]));
            v.extend(raw::untagged(SSL_CODE, &bytes(rng, 4..5)));
            v
        }
        // Noise.
        _ => bytes(rng, 1..300),
    }
}

/// One garbage frame for a logged-in session.
fn garbage_frame(rng: &mut StdRng) -> Vec<u8> {
    const TAGS: &[u8] = b"QPBEDCSHFdcfpX";
    match rng.gen_range(0..8) {
        0 | 1 => raw::frame(rng.gen(), &bytes(rng, 0..64)),
        2 | 3 => raw::frame(TAGS[rng.gen_range(0..TAGS.len())], &bytes(rng, 0..48)),
        // Length below 4, or negative.
        4 => {
            let mut v = vec![TAGS[rng.gen_range(0..TAGS.len())]];
            v.put_i32(if rng.gen() { rng.gen_range(0..4) } else { rng.gen_range(i32::MIN..0) });
            v
        }
        // Bigger than max_message_size.
        5 => {
            let mut v = vec![TAGS[rng.gen_range(0..TAGS.len())]];
            v.put_i32(rng.gen_range(64 * 1024 * 1024 + 1..=i32::MAX));
            v.extend(bytes(rng, 16..17));
            v
        }
        // Well-framed nonsense SQL: the server complains, the session goes on.
        6 => {
            let sql: String =
                (0..rng.gen_range(1..40)).map(|_| char::from(rng.gen_range(b' '..=b'~'))).collect();
            query(&sql)
        }
        // A string-bearing message with its NUL missing.
        _ => raw::frame(TAGS[rng.gen_range(0..3)], b"no terminator"),
    }
}

/// Sends malformed startup packets; pgvia must close every one of these connections.
async fn startup_storm(proxy: std::net::SocketAddr, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    for i in 0..PER_TASK {
        let packet = bad_startup(&mut rng);
        let mut conn = RawConn::connect(proxy).await.expect("pgvia accepts connections");
        let _ = conn.try_send(&packet).await;
        let _ = conn.stream.shutdown().await;
        let closed = conn.until_closed(Duration::from_secs(10)).await;
        assert!(closed.is_some(), "seed {seed}, packet {i} {packet:02x?}: pgvia kept the connection open");
    }
}

/// Logs in and sends garbage frames, each batch followed by Sync and a probe query; counts
/// sessions that survived a batch.
async fn frame_storm(proxy: std::net::SocketAddr, seed: u64, survived: Arc<AtomicUsize>) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut sent = 0;
    while sent < PER_TASK {
        let mut conn =
            RawConn::login(proxy, FUZZ_USER, FUZZ_PASSWORD, DB).await.expect("login stays possible");
        loop {
            let n = rng.gen_range(1..=4).min(PER_TASK - sent);
            let batch: Vec<Vec<u8>> = (0..n).map(|_| garbage_frame(&mut rng)).collect();
            sent += n;
            let mut bytes = batch.concat();
            bytes.extend(sync());
            bytes.extend(query("select 'alive'"));
            if conn.try_send(&bytes).await.is_err() {
                break;
            }
            match probe(&mut conn).await {
                Probe::Alive => survived.fetch_add(1, Ordering::Relaxed),
                Probe::Closed => break,
                Probe::Stuck => {
                    // A frame that claims more bytes than were sent swallows what follows;
                    // pgvia rightly waits for the rest. Hanging up must end the session.
                    let _ = conn.stream.shutdown().await;
                    let closed = conn.until_closed(Duration::from_secs(10)).await;
                    assert!(closed.is_some(), "seed {seed}: session stayed open after EOF: {batch:02x?}");
                    break;
                }
            };
            if sent >= PER_TASK {
                let _ = conn.try_send(&raw::terminate()).await;
                break;
            }
        }
    }
}

enum Probe {
    Alive,
    Closed,
    Stuck,
}

/// Reads until the probe's row and the ReadyForQuery after it, or the end of the connection.
async fn probe(conn: &mut RawConn) -> Probe {
    let read = async {
        let mut seen_row = false;
        while let Some(m) = conn.recv().await {
            if m.tag == b'D' && m.body.ends_with(b"alive") {
                seen_row = true;
            }
            if m.tag == b'Z' && seen_row {
                return Probe::Alive;
            }
        }
        Probe::Closed
    };
    tokio::time::timeout(Duration::from_secs(3), read).await.unwrap_or(Probe::Stuck)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_startups_and_garbage_frames_do_not_hurt_other_clients() {
    count_worker_panics();
    let seed: u64 =
        std::env::var("PGVIA_FUZZ_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(rand::random);
    println!("PGVIA_FUZZ_SEED={seed}");
    let pg = start_pg();
    pg.create_user(FUZZ_USER, FUZZ_PASSWORD).unwrap();
    pg.psql(DB, "grant connect on database app to public").unwrap();
    let config = ConfigBuilder::new(&pg)
        .user(&format!("name = \"{FUZZ_USER}\"\npassword = \"{FUZZ_PASSWORD}\"\nauth_method = \"trust\""));
    let proxy = TestProxy::start(&config).await;

    // The well-behaved client, on its own pool, queries in a loop throughout.
    let client = proxy.connect(USER, PASSWORD, DB).await;
    let stop = Arc::new(AtomicBool::new(false));
    let good = {
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut rounds = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let i = (rounds % 100_000) as i32;
                let row = client.query_one("select $1::int4 + 1", &[&i]).await.expect("good client query");
                assert_eq!(row.get::<_, i32>(0), i + 1);
                let msgs = client.simple_query("select 'ok'").await.expect("good client simple query");
                assert_eq!(msgs.len(), 3, "RowDescription, Row, CommandComplete");
                rounds += 1;
            }
            rounds
        })
    };

    let started = Instant::now();
    let survived = Arc::new(AtomicUsize::new(0));
    let mut storm = Vec::new();
    for t in 0..TASKS {
        storm.push(tokio::spawn(startup_storm(proxy.addr, seed.wrapping_add(t))));
        storm.push(tokio::spawn(frame_storm(proxy.addr, seed.wrapping_add(1000 + t), survived.clone())));
    }
    for task in storm {
        task.await.unwrap_or_else(|e| panic!("seed {seed}: storm task failed: {e}"));
    }
    stop.store(true, Ordering::Relaxed);
    let rounds = good.await.unwrap_or_else(|e| panic!("seed {seed}: the well-behaved client failed: {e}"));
    println!(
        "storm took {:?}; good client ran {rounds} rounds; {} garbage batches left their session usable",
        started.elapsed(),
        survived.load(Ordering::Relaxed)
    );
    assert!(rounds > 0);

    // A new client still gets in and works.
    let fresh = proxy.connect(USER, PASSWORD, DB).await;
    let n: i64 = fresh.query_one("select count(*) from generate_series(1, 10)", &[]).await.unwrap().get(0);
    assert_eq!(n, 10);
    // The servers the garbage went to are clean when handed out again: take them all at once.
    let clients =
        futures_util::future::join_all((0..20).map(|_| proxy.connect(FUZZ_USER, FUZZ_PASSWORD, DB))).await;
    for c in &clients {
        let msgs = c
            .simple_query("select (select count(*) from pg_prepared_statements) || '/' || (select count(*) from pg_cursors)")
            .await
            .unwrap();
        let Some(tokio_postgres::SimpleQueryMessage::Row(row)) = msgs.get(1) else { panic!("{msgs:?}") };
        assert_eq!(row.get(0), Some("0/0"), "a reused server kept state");
        c.batch_execute("begin; create temp table t(x int); commit").await.unwrap();
    }
    drop((fresh, clients));

    proxy.assert_no_leaks().await;
    let deadline = Instant::now() + Duration::from_secs(5);
    while proxy.app.active_sessions() != 0 {
        assert!(Instant::now() < deadline, "{} sessions still running", proxy.app.active_sessions());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for pool in proxy.app.pools.all() {
        assert!(pool.server_count() <= pool.settings.pool_size as usize, "{}", pool.name);
    }
    assert_eq!(WORKER_PANICS.load(Ordering::SeqCst), 0, "seed {seed}: a pgvia task panicked (see output)");
    proxy.stop().await;
}
