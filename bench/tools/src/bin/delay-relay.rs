//! Usage: delay-relay --route NAME=LISTEN_PORT:TARGET_PORT:DELAY_MS [--route ...] [--max-seconds 900]
//!
//! A TCP relay on 127.0.0.1 that simulates a slow link. Each route listens on LISTEN_PORT and
//! forwards every accepted connection to TARGET_PORT. Every chunk read from either side is
//! forwarded, in order, once it is DELAY_MS old: chunks are not serialised behind each other's
//! delay, so pipelined bytes keep their pipelining and a round trip costs 2 x DELAY_MS.
//!
//! Round trips are counted as client-to-server *bursts*: bytes from the client side that follow
//! bytes from the server side (or open the connection). Each burst is logged on stdout as
//!
//! `burst EPOCH_MICROS ROUTE CONN`
//!
//! where EPOCH_MICROS is when the relay received its first chunk (the clock pgbench's --log uses).
//! `ready` is printed once every route listens. The relay exits by itself after --max-seconds.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bench_tools::{epoch_micros, IoContext, ToolError};
use bytes::{Bytes, BytesMut};
use clap::Parser;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::time::Instant;

#[derive(Parser, Debug)]
#[command(about = "Delaying TCP relay on loopback that counts client-to-server bursts")]
struct Args {
    /// NAME=LISTEN_PORT:TARGET_PORT:DELAY_MS (LISTEN_PORT 0 picks a free port, reported on stdout).
    #[arg(long = "route", required = true)]
    routes: Vec<String>,
    /// Exit after this many seconds whatever happens.
    #[arg(long, default_value_t = 900)]
    max_seconds: u64,
}

#[derive(Debug, Clone)]
struct Route {
    name: String,
    listen_port: u16,
    target_port: u16,
    delay: Duration,
}

fn parse_route(spec: &str) -> Result<Route, ToolError> {
    let bad = || ToolError::Args(format!("route `{spec}`: expected NAME=LISTEN_PORT:TARGET_PORT:DELAY_MS"));
    let (name, rest) = spec.split_once('=').ok_or_else(bad)?;
    let parts: Vec<&str> = rest.split(':').collect();
    let [listen, target, delay] = parts.as_slice() else {
        return Err(bad());
    };
    if name.is_empty() || name.contains(char::is_whitespace) {
        return Err(bad());
    }
    Ok(Route {
        name: name.to_owned(),
        listen_port: listen.parse().map_err(|_| bad())?,
        target_port: target.parse().map_err(|_| bad())?,
        delay: Duration::from_millis(delay.parse().map_err(|_| bad())?),
    })
}

/// Chunks in flight per direction before the reader waits for the writer.
const QUEUE_CHUNKS: usize = 1024;
const READ_SIZE: usize = 64 * 1024;
/// How early the coarse tokio timer fires before a chunk is due.
const TIMER_SLACK: Duration = Duration::from_millis(2);

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("delay-relay: tokio runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("delay-relay: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<(), ToolError> {
    let routes = args.routes.iter().map(|s| parse_route(s)).collect::<Result<Vec<_>, _>>()?;
    let mut listeners = Vec::with_capacity(routes.len());
    for route in routes {
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, route.listen_port));
        let listener = TcpListener::bind(addr).await.ctx(|| format!("bind {addr}"))?;
        let port = listener.local_addr().ctx(|| "local_addr".into())?.port();
        println!("listen {} {port}", route.name);
        listeners.push((route, listener));
    }
    println!("ready");

    let conn_ids = Arc::new(AtomicU64::new(0));
    let mut accept_loops = tokio::task::JoinSet::new();
    for (route, listener) in listeners {
        accept_loops.spawn(accept_loop(Arc::new(route), listener, Arc::clone(&conn_ids)));
    }
    let lifetime = tokio::time::sleep(Duration::from_secs(args.max_seconds));
    tokio::select! {
        () = lifetime => Ok(()),
        Some(done) = accept_loops.join_next() => match done {
            Ok(result) => result,
            Err(e) => Err(ToolError::Task(format!("accept loop: {e}"))),
        },
    }
}

async fn accept_loop(route: Arc<Route>, listener: TcpListener, ids: Arc<AtomicU64>) -> Result<(), ToolError> {
    loop {
        let (client, _) = listener.accept().await.ctx(|| format!("accept on route {}", route.name))?;
        let id = ids.fetch_add(1, Ordering::Relaxed);
        let route = Arc::clone(&route);
        tokio::spawn(async move {
            if let Err(e) = relay(&route, id, client).await {
                eprintln!("delay-relay: route {} conn {id}: {e}", route.name);
            }
        });
    }
}

async fn relay(route: &Route, id: u64, client: TcpStream) -> Result<(), ToolError> {
    let target = SocketAddr::from((Ipv4Addr::LOCALHOST, route.target_port));
    let server = TcpStream::connect(target).await.ctx(|| format!("connect {target}"))?;
    for s in [&client, &server] {
        s.set_nodelay(true).ctx(|| "set TCP_NODELAY".into())?;
    }
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    // True while the latest bytes seen came from the client: the next client chunk is then part
    // of the same burst, not a new round trip.
    let client_spoke_last = Arc::new(AtomicBool::new(false));
    let upstream = Direction::ClientToServer { route: route.name.as_str(), conn: id };
    let (up, down) = tokio::join!(
        pump(client_read, server_write, route.delay, upstream, &client_spoke_last),
        pump(server_read, client_write, route.delay, Direction::ServerToClient, &client_spoke_last),
    );
    up.and(down)
}

#[derive(Clone, Copy)]
enum Direction<'a> {
    ClientToServer { route: &'a str, conn: u64 },
    ServerToClient,
}

/// Reads chunks from one side and writes each to the other once it is `delay` old.
async fn pump(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    delay: Duration,
    direction: Direction<'_>,
    client_spoke_last: &AtomicBool,
) -> Result<(), ToolError> {
    let (tx, mut rx) = mpsc::channel::<(Instant, Bytes)>(QUEUE_CHUNKS);
    let reader = async move {
        let mut buf = BytesMut::with_capacity(READ_SIZE);
        loop {
            buf.reserve(READ_SIZE);
            let n = from.read_buf(&mut buf).await.ctx(|| "read".into())?;
            if n == 0 {
                return Ok::<(), ToolError>(());
            }
            let now = Instant::now();
            match direction {
                Direction::ClientToServer { route, conn } => {
                    if !client_spoke_last.swap(true, Ordering::Relaxed) {
                        println!("burst {} {route} {conn}", epoch_micros());
                    }
                }
                Direction::ServerToClient => client_spoke_last.store(false, Ordering::Relaxed),
            }
            if tx.send((now, buf.split().freeze())).await.is_err() {
                // The writer stopped (peer gone): nothing more to forward.
                return Ok(());
            }
        }
    };
    let writer = async move {
        while let Some((received, chunk)) = rx.recv().await {
            wait_until(received + delay).await?;
            to.write_all(&chunk).await.ctx(|| "write".into())?;
        }
        // The reader saw end of file: pass it on.
        to.shutdown().await.ctx(|| "shutdown".into())
    };
    let (read_result, write_result) = tokio::join!(reader, writer);
    read_result.and(write_result)
}

/// tokio's timer wakes up to a millisecond late, which would add a few milliseconds to every
/// round trip through two relays. So: the timer up to shortly before the deadline, then the
/// precise remainder as a thread sleep on the blocking pool.
async fn wait_until(deadline: Instant) -> Result<(), ToolError> {
    if let Some(coarse) = deadline.checked_sub(TIMER_SLACK) {
        tokio::time::sleep_until(coarse).await;
    }
    let rest = deadline.saturating_duration_since(Instant::now());
    if !rest.is_zero() {
        tokio::task::spawn_blocking(move || std::thread::sleep(rest))
            .await
            .map_err(|e| ToolError::Task(format!("precise sleep: {e}")))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_parse() {
        let r = parse_route("direct=0:5432:20").expect("valid");
        assert_eq!((r.name.as_str(), r.listen_port, r.target_port), ("direct", 0, 5432));
        assert_eq!(r.delay, Duration::from_millis(20));
        for bad in ["direct", "=1:2:3", "a=1:2", "a=1:2:3:4", "a=x:2:3", "a b=1:2:3"] {
            assert!(parse_route(bad).is_err(), "{bad}");
        }
    }
}
