//! The fault tests' clients: ledger writers, a bystander, the heal probe and the dirty-server
//! probe. Every client call is bounded by [`OP_TIMEOUT`], so a client left hanging shows up as
//! a `hang`, never as a stuck test.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::net::TcpStream;
use tokio::task::JoinHandle;
use tokio_postgres::Client;

use crate::common::connect;
use crate::tap::Tapped;

/// The longest any client call may take: pgvia's own bounds (connect_timeout 2 s,
/// checkout_timeout 5 s, query_timeout 2 s, the cancel's own timeout) fit well inside it.
pub const OP_TIMEOUT: Duration = Duration::from_secs(12);
pub const WRITERS: i32 = 4;

/// What one client call ended with, when it did not succeed.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Failure {
    /// An ErrorResponse with this SQLSTATE.
    Sql(String),
    /// The connection closed or reset without an ErrorResponse.
    Closed,
    /// No answer within OP_TIMEOUT.
    Hang,
}

impl Failure {
    pub fn of(e: &tokio_postgres::Error) -> Failure {
        match e.as_db_error() {
            Some(d) => Failure::Sql(d.code().code().to_owned()),
            None => Failure::Closed,
        }
    }

    pub fn label(&self) -> String {
        match self {
            Failure::Sql(code) => code.clone(),
            Failure::Closed => "closed".into(),
            Failure::Hang => "hang".into(),
        }
    }
}

/// Acknowledged commits and commits whose outcome the client cannot know.
#[derive(Default)]
pub struct Ledger {
    pub acked: BTreeSet<(i32, i32)>,
    pub unknown: BTreeSet<(i32, i32)>,
}

#[derive(Default)]
pub struct Tally {
    pub ok: u64,
    pub failures: Vec<(Failure, Duration)>,
    /// What the client library said about failures without a SQLSTATE (for the report).
    pub bare: Vec<String>,
}

impl Tally {
    pub fn slowest_failure(&self) -> Duration {
        self.failures.iter().map(|(_, d)| *d).max().unwrap_or_default()
    }
}

pub struct Writers {
    stop: Arc<AtomicBool>,
    tasks: Vec<JoinHandle<()>>,
    pub ledger: Arc<Mutex<Ledger>>,
    pub tally: Arc<Mutex<Tally>>,
}

async fn bounded<T>(
    fut: impl std::future::Future<Output = Result<T, tokio_postgres::Error>>,
) -> Result<T, (Failure, String)> {
    match tokio::time::timeout(OP_TIMEOUT, fut).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err((Failure::of(&e), format!("{e:?}"))),
        Err(_) => Err((Failure::Hang, "no answer".into())),
    }
}

impl Tally {
    fn fail(&mut self, what: &str, (f, text): (Failure, String), took: Duration) {
        if !matches!(f, Failure::Sql(_)) {
            let at = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
            self.bare.push(format!("{what} at {:.3} after {took:?}: {text}", at.as_secs_f64()));
        }
        self.failures.push((f, took));
    }
}

const INSERT: &str = "INSERT INTO ledger VALUES ($1, $2, $3)";

/// One transaction of writer `w`: INSERT its next sequence number with a statement prepared
/// once per connection, and COMMIT. Ok only when COMMIT was acknowledged.
///
/// The statement is kept, not prepared per call: tokio-postgres closes a dropped statement
/// with a Close+Sync whose reply nobody waits for, and when a connection then ends, the
/// server's (or pgvia's) FATAL is taken as that orphan's reply and the caller sees a bare
/// `Closed` instead of the SQLSTATE that was sent.
async fn write_one(
    client: &mut Client,
    insert: &tokio_postgres::Statement,
    scenario: &str,
    w: i32,
    seq: i32,
) -> Result<(), tokio_postgres::Error> {
    let tx = client.transaction().await?;
    tx.execute(insert, &[&scenario, &w, &seq]).await?;
    tx.commit().await
}

/// How a writer's connection task ended: the SQLSTATE, if an ErrorResponse ended it, and
/// the error's text.
type Ended = Arc<Mutex<Option<(Option<String>, String)>>>;

/// A writer's connection. tokio-postgres hands an ErrorResponse that arrives while no call
/// waits (a FATAL sent between transactions) to the connection task, not to a call, and the
/// next call then sees a bare `Closed`; `ended` keeps what the task saw, so the SQLSTATE that
/// was sent is still counted, and anything else (a silent close, an unexpected message) is
/// reported with its cause.
struct WriterConn {
    client: Client,
    insert: tokio_postgres::Statement,
    ended: Ended,
}

async fn connect_writer(conninfo: &str) -> Result<WriterConn, tokio_postgres::Error> {
    let config: tokio_postgres::Config = conninfo.parse()?;
    let (host, port) = match (config.get_hosts().first(), config.get_ports().first()) {
        (Some(tokio_postgres::config::Host::Tcp(host)), Some(port)) => (host.clone(), *port),
        _ => panic!("the fault test connects over TCP: {conninfo}"),
    };
    let socket = match TcpStream::connect((host.as_str(), port)).await {
        Ok(socket) => socket,
        // tokio-postgres makes no error from an io::Error for us: it reports its own attempt.
        Err(_) => {
            let failed = tokio_postgres::connect(conninfo, tokio_postgres::NoTls).await.err();
            return Err(failed.unwrap_or_else(tokio_postgres::Error::__private_api_timeout));
        }
    };
    socket.set_nodelay(true).ok();
    let (socket, last_error) = Tapped::new(socket);
    let (client, conn) = config.connect_raw(socket, tokio_postgres::NoTls).await?;
    let ended: Ended = Arc::default();
    tokio::spawn({
        let ended = ended.clone();
        async move {
            let end = match conn.await {
                Ok(()) => (None, "the connection closed without an error".to_owned()),
                Err(e) => match e.as_db_error() {
                    Some(d) => (Some(d.code().code().to_owned()), format!("{e:?}")),
                    // The error was read but handed to a request nobody waits for (see tap.rs).
                    None => match last_error.lock().unwrap().clone() {
                        Some(code) => (Some(code), format!("{e:?} after an error nobody waited for")),
                        None => (None, format!("{e:?}")),
                    },
                },
            };
            *ended.lock().unwrap() = Some(end);
        }
    });
    let insert = client.prepare(INSERT).await?;
    Ok(WriterConn { client, insert, ended })
}

impl WriterConn {
    /// A bare `Closed` explained by how the connection ended (waiting briefly for its task,
    /// which records the end just after the call saw the channel close).
    async fn explain(&self, (f, text): (Failure, String)) -> (Failure, String) {
        if f != Failure::Closed {
            return (f, text);
        }
        for _ in 0..20 {
            if let Some((code, why)) = self.ended.lock().unwrap().clone() {
                return match code {
                    Some(code) => (Failure::Sql(code), format!("{text}; sent between calls: {why}")),
                    None => (f, format!("{text}; connection task: {why}")),
                };
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        (f, format!("{text}; connection task still running"))
    }
}

impl Writers {
    pub fn start(conninfo: String, scenario: &str) -> Writers {
        let stop = Arc::new(AtomicBool::new(false));
        let ledger = Arc::new(Mutex::new(Ledger::default()));
        let tally = Arc::new(Mutex::new(Tally::default()));
        let tasks = (0..WRITERS)
            .map(|w| {
                let (stop, ledger, tally) = (stop.clone(), ledger.clone(), tally.clone());
                let (conninfo, scenario) = (conninfo.clone(), scenario.to_owned());
                tokio::spawn(async move {
                    let mut client: Option<WriterConn> = None;
                    let mut seq = 0;
                    while !stop.load(Ordering::Relaxed) {
                        let started = Instant::now();
                        let c = match client.as_mut() {
                            Some(c) if !c.client.is_closed() => c,
                            _ => match bounded(connect_writer(&conninfo)).await {
                                Ok(c) => client.insert(c),
                                Err(f) => {
                                    tally.lock().unwrap().fail("connect", f, started.elapsed());
                                    tokio::time::sleep(Duration::from_millis(100)).await;
                                    continue;
                                }
                            },
                        };
                        seq += 1;
                        let started = Instant::now();
                        match bounded(write_one(&mut c.client, &c.insert, &scenario, w, seq)).await {
                            Ok(()) => {
                                ledger.lock().unwrap().acked.insert((w, seq));
                                tally.lock().unwrap().ok += 1;
                            }
                            Err(f) => {
                                let f = c.explain(f).await;
                                ledger.lock().unwrap().unknown.insert((w, seq));
                                if f.0 != Failure::Sql("57014".into()) {
                                    client = None;
                                }
                                tally.lock().unwrap().fail("transaction", f, started.elapsed());
                                tokio::time::sleep(Duration::from_millis(50)).await;
                            }
                        }
                    }
                })
            })
            .collect();
        Writers { stop, tasks, ledger, tally }
    }

    pub async fn stop(self) -> (Arc<Mutex<Ledger>>, Arc<Mutex<Tally>>) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.tasks {
            t.await.unwrap();
        }
        (self.ledger, self.tally)
    }
}

/// A client on a path the fault does not touch, querying every 20 ms.
pub struct Bystander {
    stop: Arc<AtomicBool>,
    task: JoinHandle<(Tally, Duration)>,
}

impl Bystander {
    pub async fn start(conninfo: String) -> Bystander {
        let stop = Arc::new(AtomicBool::new(false));
        let client = connect(&conninfo).await.expect("bystander connects");
        let task = tokio::spawn({
            let stop = stop.clone();
            async move {
                let mut tally = Tally::default();
                let mut slowest = Duration::ZERO;
                while !stop.load(Ordering::Relaxed) {
                    let started = Instant::now();
                    match bounded(client.simple_query("SELECT 1")).await {
                        Ok(_) => tally.ok += 1,
                        Err(f) => tally.fail("query", f, started.elapsed()),
                    }
                    slowest = slowest.max(started.elapsed());
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                (tally, slowest)
            }
        });
        Bystander { stop, task }
    }

    /// (its calls, its slowest call)
    pub async fn stop(self) -> (Tally, Duration) {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.unwrap()
    }
}

/// Time until a brand-new client gets a connection, a query and a committed write through.
pub async fn time_to_heal(conninfo: &str, scenario: &str, limit: Duration) -> Option<Duration> {
    let started = Instant::now();
    while started.elapsed() < limit {
        let attempt = async {
            let mut c = connect_writer(conninfo).await?;
            c.client.simple_query("SELECT 1").await?;
            write_one(&mut c.client, &c.insert, scenario, 1000, 1).await
        };
        if let Ok(Ok(())) = tokio::time::timeout(Duration::from_secs(3), attempt).await {
            return Some(started.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}

/// Takes every server of the pool at once (`clients` concurrent clients, each holding its
/// server for 300 ms) and asks each whether it is clean: inside a fresh implicit transaction
/// (`now() = statement_timestamp()`, no transaction id yet), not aborted (no 25P02), with
/// no listen, no temp table and no advisory lock left. Returns how many were not.
pub async fn dirty_servers(conninfo: &str, clients: usize) -> usize {
    let sql = "SELECT pg_sleep(0.3), now() = statement_timestamp() \
               AND txid_current_if_assigned() IS NULL \
               AND NOT EXISTS (SELECT 1 FROM pg_listening_channels()) \
               AND NOT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid())";
    let probes = (0..clients).map(|_| {
        let conninfo = conninfo.to_owned();
        tokio::spawn(async move {
            let c = connect(&conninfo).await.expect("probe connects after healing");
            let rows = c.simple_query(sql).await;
            match rows {
                Ok(msgs) => msgs.iter().any(|m| match m {
                    tokio_postgres::SimpleQueryMessage::Row(r) => r.get(1) != Some("t"),
                    _ => false,
                }),
                Err(e) => {
                    eprintln!("dirty-server probe failed: {e:?}");
                    true
                }
            }
        })
    });
    let mut dirty = 0;
    for p in probes.collect::<Vec<_>>() {
        if p.await.unwrap() {
            dirty += 1;
        }
    }
    dirty
}
