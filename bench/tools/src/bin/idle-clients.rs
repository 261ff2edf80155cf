//! Usage: idle-clients --port PORT --pid PID [--count 10000] [--user idle] [--database bench]
//!                     [--concurrency 200] [--timeout-secs 120] [--settle-ms 1500] [--hold-secs 0]
//!                     [--query SQL]
//!
//! Opens COUNT client connections to a pooler on 127.0.0.1:PORT, completes the login of each
//! (the user must use trust authentication: no password is sent), keeps them all open and idle,
//! and reports the growth of process PID's resident memory (VmRSS) per client. Prints one line of
//! `key=value` pairs:
//!
//! `clients=N failed=N rss_before_kib=N rss_after_kib=N kib_per_client=F seconds=F`
//!
//! With `--query SQL` each client runs that simple query once after its login (reading the whole
//! reply) before it goes idle: what a client that did some work costs once it is idle.
//!
//! Every connection is closed when the tool exits; the logins are bounded by --timeout-secs.
//! With `--hold-secs N` (the soak, scripts/soak) the connections then stay open and idle for N
//! more seconds, and a second line `held=N closed_by_peer=N` says how many were still open at
//! the end: an idle client must survive reloads and server restarts.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bench_tools::{rss_kib, IoContext, ToolError};
use bytes::{Buf, BytesMut};
use clap::Parser;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

#[derive(Parser, Debug)]
#[command(about = "Open many idle, logged-in client connections and report the pooler's RSS per client")]
struct Args {
    /// Pooler port on 127.0.0.1.
    #[arg(long)]
    port: u16,
    /// Pooler process whose VmRSS is measured.
    #[arg(long)]
    pid: u32,
    /// Connections to open.
    #[arg(long, default_value_t = 10_000)]
    count: usize,
    /// User name (must be allowed in with trust authentication).
    #[arg(long, default_value = "idle")]
    user: String,
    /// Database name.
    #[arg(long, default_value = "bench")]
    database: String,
    /// Logins in flight at once.
    #[arg(long, default_value_t = 200)]
    concurrency: usize,
    /// Upper bound for the whole run.
    #[arg(long, default_value_t = 120)]
    timeout_secs: u64,
    /// Pause after the last login before reading RSS, so the pooler settles.
    #[arg(long, default_value_t = 1500)]
    settle_ms: u64,
    /// Keep the connections open this long after the report, then say how many the pooler closed.
    #[arg(long, default_value_t = 0)]
    hold_secs: u64,
    /// A simple query each client runs once after its login, before it goes idle.
    #[arg(long)]
    query: Option<String>,
}

/// Longest message accepted during login (ParameterStatus values are short).
const MAX_LOGIN_MESSAGE: usize = 64 * 1024;

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("idle-clients: tokio runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("idle-clients: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<(), ToolError> {
    if args.count == 0 || args.concurrency == 0 {
        return Err(ToolError::Args("--count and --concurrency must be at least 1".into()));
    }
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, args.port));
    let deadline = Instant::now() + Duration::from_secs(args.timeout_secs);
    let started = Instant::now();
    let before = rss_kib(args.pid)?;

    let gate = Arc::new(Semaphore::new(args.concurrency));
    let mut logins = JoinSet::new();
    for _ in 0..args.count {
        let gate = Arc::clone(&gate);
        let (user, database, query) = (args.user.clone(), args.database.clone(), args.query.clone());
        logins.spawn(async move {
            let _permit = gate.acquire_owned().await.map_err(|_| ToolError::Login("gate closed".into()))?;
            let login = connect_and_login(addr, &user, &database, query.as_deref());
            tokio::time::timeout_at(deadline.into(), login)
                .await
                .map_err(|_| ToolError::Timeout("login".into()))?
        });
    }

    let mut open = Vec::with_capacity(args.count);
    let mut failed = 0usize;
    let mut first_error = None;
    while let Some(joined) = logins.join_next().await {
        match joined {
            Ok(Ok(stream)) => open.push(stream),
            Ok(Err(e)) => {
                failed += 1;
                first_error.get_or_insert_with(|| e.to_string());
            }
            Err(e) => {
                failed += 1;
                first_error.get_or_insert_with(|| e.to_string());
            }
        }
    }
    if let Some(e) = &first_error {
        eprintln!("idle-clients: {failed} logins failed; first error: {e}");
    }
    if open.is_empty() {
        return Err(ToolError::Login("no connection completed its login".into()));
    }

    tokio::time::sleep(Duration::from_millis(args.settle_ms)).await;
    let after = rss_kib(args.pid)?;
    let per_client = after.saturating_sub(before) as f64 / open.len() as f64;
    println!(
        "clients={} failed={failed} rss_before_kib={before} rss_after_kib={after} kib_per_client={per_client:.2} seconds={:.1}",
        open.len(),
        started.elapsed().as_secs_f64()
    );
    if args.hold_secs > 0 {
        use std::io::Write as _;
        // The soak reads the first line while the connections are held.
        let _ = std::io::stdout().flush();
        tokio::time::sleep(Duration::from_secs(args.hold_secs)).await;
        let held = open.len();
        let closed = open.into_iter().map(closed_by_peer).filter(|&c| c).count();
        println!("held={held} closed_by_peer={closed}");
        return Ok(());
    }
    drop(open);
    Ok(())
}

/// True when the pooler closed (or reset) an idle connection: a peek returns EOF or an error.
/// An idle client is sent nothing, so a byte waiting is a message it did not expect (such as a
/// FATAL before a close) and counts as closed too. The peek is a real system call on the
/// socket, not tokio's cached readiness.
fn closed_by_peer(stream: TcpStream) -> bool {
    let Ok(stream) = stream.into_std() else { return true };
    if stream.set_nonblocking(true).is_err() {
        return true;
    }
    let mut byte = [0u8; 1];
    !matches!(stream.peek(&mut byte), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
}

/// Connects, sends a StartupMessage and reads until ReadyForQuery; then runs `query`, if any,
/// and reads until its ReadyForQuery. Returns the open stream.
async fn connect_and_login(
    addr: SocketAddr,
    user: &str,
    database: &str,
    mut query: Option<&str>,
) -> Result<TcpStream, ToolError> {
    let mut stream = TcpStream::connect(addr).await.ctx(|| format!("connect {addr}"))?;
    stream.set_nodelay(true).ctx(|| "set TCP_NODELAY".into())?;

    let mut out = BytesMut::with_capacity(64);
    wire::build::startup_message(&mut out, [("user", user), ("database", database)])
        .map_err(|e| ToolError::Login(e.to_string()))?;
    stream.write_all(&out).await.ctx(|| "send StartupMessage".into())?;

    let mut buf = BytesMut::with_capacity(1024);
    loop {
        // One whole message: tag, 4-byte length (counting itself), body.
        while buf.len() >= 5 {
            let len = u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]) as usize;
            if !(4..=MAX_LOGIN_MESSAGE).contains(&len) {
                return Err(ToolError::Login(format!("message length {len} out of range")));
            }
            if buf.len() < 1 + len {
                break;
            }
            let tag = buf[0];
            let body = buf.split_to(1 + len).split_off(5);
            match tag {
                b'R' => {
                    if body.len() < 4 {
                        return Err(ToolError::Login("short Authentication message".into()));
                    }
                    let code = body.clone().get_u32();
                    if code != 0 {
                        return Err(ToolError::Login(format!(
                            "server asked for authentication (code {code}); use a trust user"
                        )));
                    }
                }
                b'E' => return Err(ToolError::Login(error_message(&body))),
                b'Z' => match query.take() {
                    Some(sql) => {
                        out.clear();
                        wire::build::query(&mut out, sql);
                        stream.write_all(&out).await.ctx(|| "send the query".into())?;
                    }
                    None => return Ok(stream),
                },
                // ParameterStatus, BackendKeyData, NoticeResponse, NegotiateProtocolVersion,
                // and the query's rows.
                _ => {}
            }
        }
        let n = stream.read_buf(&mut buf).await.ctx(|| "read login reply".into())?;
        if n == 0 {
            return Err(ToolError::Login("connection closed during login".into()));
        }
    }
}

/// The `M` (message) field of an ErrorResponse body, for the report.
fn error_message(body: &[u8]) -> String {
    body.split(|&b| b == 0)
        .find_map(|field| field.strip_prefix(b"M"))
        .map(|m| String::from_utf8_lossy(m).into_owned())
        .unwrap_or_else(|| "error without message".into())
}
