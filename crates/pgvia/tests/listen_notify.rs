//! LISTEN/NOTIFY in transaction mode: listeners share a few servers (LISTEN does not pin),
//! get exactly the notifications of their channels, none after UNLISTEN, none from
//! rolled-back transactions.

mod common;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::*;
use futures_util::future::join_all;
use tokio::sync::mpsc;
use tokio_postgres::Notification;

fn transaction_config(pg: &harness::Cluster) -> ConfigBuilder {
    ConfigBuilder::new(pg)
        .pool("pool_mode = \"transaction\"")
        .pool("pool_size = 5")
        .pool("checkout_timeout = \"10s\"")
}

/// Receives `n` notifications (10 s limit). Returns (channel, payload) pairs in arrival order.
async fn receive_exactly(rx: &mut mpsc::UnboundedReceiver<Notification>, n: usize) -> Vec<(String, String)> {
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while got.len() < n {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, rx.recv()).await {
            Ok(Some(m)) => got.push((m.channel().to_owned(), m.payload().to_owned())),
            _ => panic!("got {} of {n} notifications: {got:?}", got.len()),
        }
    }
    got
}

/// After a pause for stragglers, no listener has anything more.
async fn assert_nothing_more<'a>(
    receivers: impl Iterator<Item = (usize, &'a mut mpsc::UnboundedReceiver<Notification>)>,
) {
    tokio::time::sleep(Duration::from_millis(500)).await;
    for (i, rx) in receivers {
        if let Ok(extra) = rx.try_recv() {
            panic!("listener {i}: one notification too many: {} {:?}", extra.channel(), extra.payload());
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_listeners_over_three_channels_get_exactly_theirs() {
    const LISTENERS: usize = 100;
    const FIRST: usize = 20;
    const SECOND: usize = 10;
    let pg = start_pg();
    let proxy = TestProxy::start(&transaction_config(&pg)).await;
    let channels = ["jobs", "Mixed Case", "events"];
    let conninfo = proxy.conninfo(USER, PASSWORD, DB);

    // Every listener subscribes, some in autocommit, some inside a transaction, some after a
    // LISTEN that was rolled back. With 5 servers for 100 clients, any pinning would stall.
    let mut listeners = join_all((0..LISTENERS).map(|i| {
        let conninfo = conninfo.clone();
        async move {
            let (client, rx) = notified_client(&conninfo).await;
            let channel = channels[i % 3];
            let other = channels[(i + 1) % 3];
            let ident = format!("\"{channel}\"");
            match i % 4 {
                0 => client.batch_execute(&format!("LISTEN {ident}")).await.unwrap(),
                1 => client.batch_execute(&format!("BEGIN; LISTEN {ident}; COMMIT")).await.unwrap(),
                2 => {
                    client.batch_execute(&format!("BEGIN; LISTEN \"{other}\"; ROLLBACK")).await.unwrap();
                    client.batch_execute(&format!("LISTEN {ident}")).await.unwrap();
                }
                _ => {
                    client.batch_execute("BEGIN").await.unwrap();
                    client.batch_execute(&format!("SELECT 1; LISTEN {ident}")).await.unwrap();
                    client.batch_execute("COMMIT").await.unwrap();
                }
            }
            (i, client, rx)
        }
    }))
    .await;
    let pool = proxy.app.pools.all().pop().expect("a pool");
    let listen_pins = pool.stats.pins[pgvia::pool::PinReason::Listen.index()].load(Ordering::Relaxed);
    assert_eq!(listen_pins, 0, "LISTEN must not pin in transaction mode");
    let hub = proxy.app.notify.all().pop().expect("a notification hub");
    assert_eq!(hub.channel_count(), 3);

    let notifier = proxy.connect(USER, PASSWORD, DB).await;
    for k in 0..FIRST {
        for channel in channels {
            notifier
                .execute("SELECT pg_notify($1, $2)", &[&channel, &format!("{channel}-{k}")])
                .await
                .unwrap();
        }
        if k % 5 == 0 {
            // Never delivered: rolled back.
            notifier
                .batch_execute(&format!("BEGIN; NOTIFY jobs, 'rolled back {k}'; ROLLBACK"))
                .await
                .unwrap();
        }
    }
    for (i, _, rx) in &mut listeners {
        let channel = channels[*i % 3];
        let got = receive_exactly(rx, FIRST).await;
        let expected: Vec<_> = (0..FIRST).map(|k| (channel.to_owned(), format!("{channel}-{k}"))).collect();
        assert_eq!(got, expected, "listener {i}");
    }
    assert_nothing_more(listeners.iter_mut().map(|(i, _, rx)| (*i, rx))).await;

    // Half unsubscribe, by name or with UNLISTEN *; they get nothing more, the rest get all.
    for (i, client, _) in &listeners {
        if i % 2 == 0 {
            let sql =
                if i % 4 == 0 { format!("UNLISTEN \"{}\"", channels[i % 3]) } else { "UNLISTEN *".into() };
            client.batch_execute(&sql).await.unwrap();
        }
    }
    for k in 0..SECOND {
        notifier
            .batch_execute(&format!(
                "BEGIN; NOTIFY jobs, 'second-{k}'; NOTIFY \"Mixed Case\", 'second-{k}'; NOTIFY events, 'second-{k}'; COMMIT"
            ))
            .await
            .unwrap();
    }
    for (i, _, rx) in &mut listeners {
        let channel = channels[*i % 3];
        let n = if *i % 2 == 0 { 0 } else { SECOND };
        let got = receive_exactly(rx, n).await;
        let expected: Vec<_> = (0..n).map(|k| (channel.to_owned(), format!("second-{k}"))).collect();
        assert_eq!(got, expected, "listener {i} after UNLISTEN round");
    }
    assert_nothing_more(listeners.iter_mut().map(|(i, _, rx)| (*i, rx))).await;

    // Leaving unsubscribes; the hub stops listening once nobody is left.
    drop(listeners);
    let deadline = Instant::now() + Duration::from_secs(5);
    while hub.channel_count() > 0 {
        assert!(Instant::now() < deadline, "subscriptions left after every listener left");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(notifier);
    proxy.assert_no_leaks().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notifications_reach_a_client_inside_a_transaction_and_its_own() {
    let pg = start_pg();
    let proxy = TestProxy::start(&transaction_config(&pg)).await;
    let conninfo = proxy.conninfo(USER, PASSWORD, DB);
    let (a, mut rx) = notified_client(&conninfo).await;
    a.batch_execute("LISTEN news").await.unwrap();
    // The client's own NOTIFY comes back to it, as on a dedicated server, with the pid of the
    // server that ran it.
    a.batch_execute("NOTIFY news, 'mine'").await.unwrap();
    let own = tokio::time::timeout(Duration::from_secs(5), rx.recv()).await.unwrap().unwrap();
    assert_eq!(own.payload(), "mine");
    assert_ne!(own.process_id(), 0);

    // While the listener holds a server inside a transaction.
    a.batch_execute("BEGIN; SELECT 1").await.unwrap();
    let b = proxy.connect(USER, PASSWORD, DB).await;
    b.batch_execute("NOTIFY news, 'while busy'").await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(5), rx.recv()).await.unwrap().unwrap();
    assert_eq!(got.payload(), "while busy");
    a.batch_execute("COMMIT").await.unwrap();

    // A LISTEN in a rolled-back transaction subscribes to nothing.
    a.batch_execute("BEGIN; LISTEN other; ROLLBACK").await.unwrap();
    b.batch_execute("NOTIFY other, 'nobody'; NOTIFY news, 'last'").await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(5), rx.recv()).await.unwrap().unwrap();
    assert_eq!((got.channel(), got.payload()), ("news", "last"));

    drop((a, b));
    proxy.assert_no_leaks().await;
}

/// The process id a notification carries, read from the first NotificationResponse `conn`
/// gets (5 s limit), after the messages `seen` it already has.
async fn notifying_pid(conn: &mut common::raw::RawConn, seen: Vec<common::raw::Msg>) -> i32 {
    let mut pending = seen.into_iter();
    loop {
        let msg = match pending.next() {
            Some(m) => m,
            None => conn.recv_within(Duration::from_secs(5)).await.expect("a notification"),
        };
        if msg.tag == b'A' {
            return i32::from_be_bytes(msg.body[..4].try_into().expect("a process id"));
        }
    }
}

/// A sender and another client both listen; the sender notifies. Says whether each sees the
/// notification as coming from the process id the sender was told at login.
async fn notification_pids(addr: std::net::SocketAddr) -> Vec<String> {
    use common::raw::{query, RawConn};
    let mut sender = RawConn::login(addr, USER, PASSWORD, DB).await.expect("sender");
    let mut other = RawConn::login(addr, USER, PASSWORD, DB).await.expect("other");
    for conn in [&mut sender, &mut other] {
        conn.send(&query("LISTEN pid_ch")).await;
        conn.until_ready().await;
    }
    let told = sender.key.expect("a cancel key").0;
    sender.send(&query("NOTIFY pid_ch, 'from the sender'")).await;
    let seen = sender.until_ready().await;
    let own = notifying_pid(&mut sender, seen).await;
    let to_other = notifying_pid(&mut other, Vec::new()).await;
    // LISTEN and NOTIFY in one transaction: the sender's own server has it for the sender.
    sender.send(&query("LISTEN own_ch; NOTIFY own_ch, 'to itself'")).await;
    let seen = sender.until_ready().await;
    let in_one = notifying_pid(&mut sender, seen).await;
    vec![
        format!("the sender sees itself: {}", own == told),
        format!("the other sees the sender: {}", to_other == told),
        format!("the sender sees itself in one transaction: {}", in_one == told),
    ]
}

/// A client that checks whether a notification is its own (drivers' tests do) compares its
/// pid with the one it was told at login, as directly against PostgreSQL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notifications_carry_the_pid_the_sender_was_told() {
    let pg = start_pg();
    let direct: std::net::SocketAddr = format!("{}:{}", pg.host(), pg.port()).parse().expect("address");
    let expected = notification_pids(direct).await;
    assert!(expected.iter().all(|e| e.ends_with("true")), "{expected:?}");
    let proxy = TestProxy::start(&transaction_config(&pg)).await;
    assert_eq!(notification_pids(proxy.addr).await, expected);
    proxy.assert_no_leaks().await;
    proxy.stop().await;
}
