//! The exchange driven by scripted frames, no PostgreSQL: the test plays the client and the
//! server, feeds each side's bytes to a turn, and checks what pgvia would write to each side
//! and whether it would let the server go.

use std::sync::Arc;

use bytes::{BufMut, BytesMut};
use wire::backend::TransactionStatus;
use wire::build::{self, ErrorFields};
use wire::sqlstate::SqlState;
use wire::FrameDecoder;

use super::super::exchange::{Buffers, Held, RelayEnd, Tracking};
use super::super::memo::QueryMemo;
use super::super::state::SessionState;
use super::{Exchange, Next};
use crate::config::RolePreference;
use crate::pool::PoolStats;
use crate::prepared::{ClientStatements, PurgePolicy, Registry, ServerStatements};
use crate::server::ServerConn;

/// One session's exchange with one scripted server.
struct Script {
    bufs: Buffers,
    decoder: FrameDecoder,
    server: ServerConn,
    /// The server's end of the socket: never read or written (the turns do no I/O).
    _peer: tokio::net::TcpStream,
    analyzer: route::Analyzer,
    memo: QueryMemo,
    state: SessionState,
    stats: PoolStats,
    statements: Option<ClientStatements>,
    role: RolePreference,
    statement_mode: bool,
    held: Option<Held>,
    open_batch: bool,
    server_fatal: bool,
}

impl Script {
    /// Transaction pooling; `follow_statements` as a pool with `max_prepared_statements > 0`.
    async fn new(follow_statements: bool) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (conn, accepted) = tokio::join!(tokio::net::TcpStream::connect(addr), listener.accept());
        let mut server = ServerConn::over(conn.expect("connect"), 1 << 20).expect("peer address");
        let registry = Arc::new(Registry::new(PurgePolicy::default()));
        if follow_statements {
            server.statements = ServerStatements::new(Some(registry.clone()), 100);
        }
        Script {
            bufs: Buffers::default(),
            decoder: FrameDecoder::new(1 << 20),
            server,
            _peer: accepted.expect("accept").0,
            analyzer: route::Analyzer::new(route::AnalyzerOptions::default()).expect("default options"),
            memo: QueryMemo::default(),
            state: SessionState::new(Vec::new()),
            stats: PoolStats::default(),
            statements: follow_statements.then(|| ClientStatements::new(registry)),
            role: RolePreference::Auto,
            statement_mode: false,
            held: None,
            open_batch: false,
            server_fatal: false,
        }
    }

    /// The session's parts as a turn takes them, borrowed at once.
    fn parts(&mut self) -> (Tracking<'_>, &mut Buffers, &FrameDecoder, &mut ServerConn, &mut bool) {
        let tracking = Tracking {
            analyzer: &self.analyzer,
            memo: &mut self.memo,
            state: &mut self.state,
            pool_name: "db/user",
            pool_stats: &self.stats,
            statements: self.statements.as_mut(),
            refuse_transactions: self.statement_mode,
            held: self.held,
            open_batch: self.open_batch,
            role: &mut self.role,
            replica_split: None,
            notifier: None,
        };
        (tracking, &mut self.bufs, &self.decoder, &mut self.server, &mut self.server_fatal)
    }

    /// Runs one turn of the session's exchange, keeping what it learned for the next.
    fn turn(&mut self, turn: impl FnOnce(&mut Exchange<'_, '_>) -> Next) -> Next {
        let (t, bufs, decoder, server, fatal) = self.parts();
        let mut ex = Exchange::new(bufs, decoder, server, Some(t));
        let next = turn(&mut ex);
        *fatal |= ex.server_explained();
        let kept = ex.tracking.as_ref().map(|t| (t.held, t.open_batch));
        if let Some(kept) = kept {
            (self.held, self.open_batch) = kept;
        }
        next
    }

    /// The client sent `frames`.
    fn client(&mut self, frames: &[u8]) -> Next {
        self.bufs.from_client.extend_from_slice(frames);
        self.turn(|ex| ex.client_frames())
    }

    /// The server sent `frames`.
    fn server(&mut self, frames: &[u8]) -> Next {
        self.server.read_buf.extend_from_slice(frames);
        self.turn(|ex| ex.server_read())
    }

    /// What pgvia wrote to the server so far (as a write to the socket would take it).
    fn sent_to_server(&mut self) -> Vec<(u8, Vec<u8>)> {
        let out = frames(&self.bufs.to_server);
        self.bufs.to_server.clear();
        super::Exchange::new(&mut self.bufs, &self.decoder, &mut self.server, None).server_written();
        out
    }

    fn sent_to_client(&mut self) -> Vec<(u8, Vec<u8>)> {
        let out = frames(&self.bufs.to_client);
        self.bufs.to_client.clear();
        out
    }
}

fn tags(frames: &[(u8, Vec<u8>)]) -> String {
    frames.iter().map(|(t, _)| char::from(*t)).collect()
}

/// Splits whole frames into (tag, body).
fn frames(buf: &[u8]) -> Vec<(u8, Vec<u8>)> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos + 5 <= buf.len() {
        let len = u32::from_be_bytes([buf[pos + 1], buf[pos + 2], buf[pos + 3], buf[pos + 4]]) as usize;
        out.push((buf[pos], buf[pos + 5..pos + 1 + len].to_vec()));
        pos += 1 + len;
    }
    assert_eq!(pos, buf.len(), "whole frames only");
    out
}

// Frontend messages.
fn parse(name: &str, sql: &str) -> BytesMut {
    let mut b = BytesMut::new();
    build::frame(&mut b, b'P', |b| {
        build::put_cstr(b, name.as_bytes());
        build::put_cstr(b, sql.as_bytes());
        b.put_u16(0);
    });
    b
}
fn bind(statement: &str) -> BytesMut {
    let mut b = BytesMut::new();
    build::frame(&mut b, b'B', |b| {
        build::put_cstr(b, b"");
        build::put_cstr(b, statement.as_bytes());
        b.put_u16(0);
        b.put_u16(0);
        b.put_u16(0);
    });
    b
}
fn execute() -> BytesMut {
    let mut b = BytesMut::new();
    build::frame(&mut b, b'E', |b| {
        build::put_cstr(b, b"");
        b.put_u32(0);
    });
    b
}
fn flush() -> BytesMut {
    let mut b = BytesMut::new();
    build::frame(&mut b, b'H', |_| {});
    b
}
fn sync() -> BytesMut {
    let mut b = BytesMut::new();
    build::sync(&mut b);
    b
}
fn query(sql: &str) -> BytesMut {
    let mut b = BytesMut::new();
    build::query(&mut b, sql);
    b
}
fn copy_data(data: &[u8]) -> BytesMut {
    let mut b = BytesMut::new();
    build::frame(&mut b, b'd', |b| b.extend_from_slice(data));
    b
}
fn copy_done() -> BytesMut {
    let mut b = BytesMut::new();
    build::frame(&mut b, b'c', |_| {});
    b
}
fn extended(name: &str, sql: &str) -> BytesMut {
    let mut b = parse(name, sql);
    b.extend_from_slice(&bind(name));
    b.extend_from_slice(&execute());
    b.extend_from_slice(&sync());
    b
}

// Backend messages.
fn ready(status: TransactionStatus) -> BytesMut {
    let mut b = BytesMut::new();
    build::ready_for_query(&mut b, status.as_byte());
    b
}
fn reply(tags: &str, tag_text: &str, status: TransactionStatus) -> BytesMut {
    let mut b = BytesMut::new();
    for t in tags.bytes() {
        match t {
            b'1' => build::parse_complete(&mut b),
            b'2' => build::frame(&mut b, b'2', |_| {}),
            b'D' => build::frame(&mut b, b'D', |b| {
                b.put_u16(1);
                b.put_i32(1);
                b.put_u8(b'1');
            }),
            b'C' => build::command_complete(&mut b, tag_text),
            b'G' => build::frame(&mut b, b'G', |b| {
                b.put_u8(0);
                b.put_u16(0);
            }),
            b'E' => ErrorFields::error(SqlState::SYNTAX_ERROR, "syntax error").write(&mut b),
            other => panic!("no builder for {}", char::from(other)),
        }
    }
    b.extend_from_slice(&ready(status));
    b
}

fn is_quiescent(next: &Next) -> bool {
    matches!(next, Next::End(RelayEnd::Quiescent))
}

#[tokio::test]
async fn a_pipeline_with_an_error_midway_is_released_only_after_its_last_ready() {
    let mut s = Script::new(false).await;
    let mut pipeline = extended("", "SELECT 1");
    pipeline.extend_from_slice(&extended("", "SELEC 2"));
    pipeline.extend_from_slice(&extended("", "SELECT 3"));
    assert!(matches!(s.client(&pipeline), Next::Relay));
    assert_eq!(tags(&s.sent_to_server()), "PBESPBESPBES", "unnamed statements go as they came");

    let first = reply("12DC", "SELECT 1", TransactionStatus::Idle);
    assert!(matches!(s.server(&first), Next::Relay), "two Syncs are still unanswered");
    // The second exchange fails at its Parse; the server skips its Bind and Execute.
    let mut rest = reply("E", "", TransactionStatus::Idle);
    rest.extend_from_slice(&reply("12DC", "SELECT 1", TransactionStatus::Idle));
    assert!(is_quiescent(&s.server(&rest)), "every Sync answered, no transaction open");
    assert_eq!(tags(&s.sent_to_client()), "12DCZEZ12DCZ", "replies reach the client as the server sent them");
    assert!(!s.server_fatal);
}

#[tokio::test]
async fn copy_in_keeps_the_server_until_the_copy_ends() {
    let mut s = Script::new(false).await;
    assert!(matches!(s.client(&query("COPY t FROM STDIN")), Next::Relay));
    let mut copy_in = BytesMut::new();
    build::frame(&mut copy_in, b'G', |b| {
        b.put_u8(0);
        b.put_u16(0);
    });
    assert!(matches!(s.server(&copy_in), Next::Relay), "COPY IN is open");
    let mut rows = copy_data(b"1\n");
    rows.extend_from_slice(&copy_data(b"2\n"));
    rows.extend_from_slice(&copy_done());
    assert!(matches!(s.client(&rows), Next::Relay));
    assert_eq!(tags(&s.sent_to_server()), "Qddc", "COPY data goes as it came");
    assert!(is_quiescent(&s.server(&reply("C", "COPY 2", TransactionStatus::Idle))));
    assert_eq!(tags(&s.sent_to_client()), "GCZ");
}

#[tokio::test]
async fn copy_out_is_passed_on_as_it_came_and_released_at_its_ready() {
    let mut s = Script::new(false).await;
    assert!(matches!(s.client(&query("COPY t TO STDOUT")), Next::Relay));
    assert_eq!(tags(&s.sent_to_server()), "Q");
    let mut copy_out = BytesMut::new();
    build::frame(&mut copy_out, b'H', |b| {
        b.put_u8(0);
        b.put_u16(0);
    });
    copy_out.extend_from_slice(&copy_data(b"1\n"));
    // The server's rows arrive over several reads; none of them lets the server go.
    assert!(matches!(s.server(&copy_out), Next::Relay), "COPY OUT is under way");
    let mut rest = copy_data(b"2\n");
    rest.extend_from_slice(&copy_done());
    assert!(matches!(s.server(&rest), Next::Relay), "the COPY's CommandComplete has not come");
    assert!(is_quiescent(&s.server(&reply("C", "COPY 2", TransactionStatus::Idle))));
    let sent = s.sent_to_client();
    assert_eq!(tags(&sent), "HddcCZ", "every frame goes to the client in order");
    assert_eq!(sent[1].1, b"1\n");
    assert_eq!(sent[2].1, b"2\n");
}

#[tokio::test]
async fn a_transaction_block_keeps_the_server_until_it_ends() {
    let mut s = Script::new(false).await;
    s.client(&query("BEGIN"));
    s.sent_to_server();
    assert!(matches!(s.server(&reply("C", "BEGIN", TransactionStatus::InTransaction)), Next::Relay));
    s.client(&query("INSERT INTO t VALUES (1)"));
    s.sent_to_server();
    assert!(matches!(s.server(&reply("C", "INSERT 0 1", TransactionStatus::InTransaction)), Next::Relay));
    s.client(&query("COMMIT"));
    s.sent_to_server();
    assert!(is_quiescent(&s.server(&reply("C", "COMMIT", TransactionStatus::Idle))));
}

#[tokio::test]
async fn an_unsynced_batch_is_never_released() {
    let mut s = Script::new(false).await;
    let mut batch = parse("", "INSERT INTO t VALUES (1)");
    batch.extend_from_slice(&bind(""));
    batch.extend_from_slice(&execute());
    batch.extend_from_slice(&flush());
    s.client(&batch);
    assert_eq!(tags(&s.sent_to_server()), "PBEH");
    assert!(s.open_batch, "no Sync yet: PostgreSQL's implicit transaction is open");
    let mut answered = BytesMut::new();
    build::parse_complete(&mut answered);
    build::frame(&mut answered, b'2', |_| {});
    build::command_complete(&mut answered, "INSERT 0 1");
    assert!(matches!(s.server(&answered), Next::Relay), "every reply arrived, but nothing is committed yet");
    s.client(&sync());
    assert_eq!(tags(&s.sent_to_server()), "S");
    assert!(!s.open_batch);
    assert!(is_quiescent(&s.server(&ready(TransactionStatus::Idle))));
}

#[tokio::test]
async fn named_statements_are_renamed_and_a_known_one_is_not_parsed_again() {
    let mut s = Script::new(true).await;
    s.client(&parse("s1", "SELECT 1"));
    s.client(&sync());
    let sent = s.sent_to_server();
    assert_eq!(tags(&sent), "PS");
    let name = sent[0].1.split(|&b| b == 0).next().map(<[u8]>::to_vec).unwrap_or_default();
    assert!(name.starts_with(b"pgvia_"), "the server sees pgvia's name, not the client's: {name:?}");
    let mut replied = BytesMut::new();
    build::parse_complete(&mut replied);
    replied.extend_from_slice(&ready(TransactionStatus::Idle));
    assert!(is_quiescent(&s.server(&replied)));
    assert_eq!(tags(&s.sent_to_client()), "1Z");

    // The same text under another name of the client's: the server already has it.
    let mut again = parse("s2", "SELECT 1");
    again.extend_from_slice(&bind("s2"));
    again.extend_from_slice(&execute());
    again.extend_from_slice(&sync());
    s.client(&again);
    let sent = s.sent_to_server();
    assert_eq!(tags(&sent), "BES", "no second Parse reaches the server");
    assert!(sent[0].1.windows(name.len()).any(|w| w == name.as_slice()), "the Bind names pgvia's statement");
    s.server(&reply("2DC", "SELECT 1", TransactionStatus::Idle));
    assert_eq!(tags(&s.sent_to_client()), "12DCZ", "pgvia's ParseComplete lands where the server's would");
}

#[tokio::test]
async fn a_statement_missing_on_the_server_is_parsed_ahead_of_the_bind() {
    let mut s = Script::new(true).await;
    s.client(&parse("s1", "SELECT 1"));
    s.client(&sync());
    s.sent_to_server();
    let mut replied = BytesMut::new();
    build::parse_complete(&mut replied);
    replied.extend_from_slice(&ready(TransactionStatus::Idle));
    s.server(&replied);
    s.sent_to_client();
    // The client's statement lives on with it; this server has lost it (as another server would lack it).
    s.server.statements = ServerStatements::new(s.server.statements.registry().cloned(), 100);
    let mut use_it = bind("s1");
    use_it.extend_from_slice(&execute());
    use_it.extend_from_slice(&sync());
    s.client(&use_it);
    assert_eq!(tags(&s.sent_to_server()), "PBES", "an injected Parse goes first");
    s.server(&reply("12DC", "SELECT 1", TransactionStatus::Idle));
    assert_eq!(tags(&s.sent_to_client()), "2DCZ", "the injected Parse's reply is not passed on");
}

#[tokio::test]
async fn statement_mode_holds_a_transaction_block_back() {
    let mut s = Script::new(false).await;
    s.statement_mode = true;
    let next = s.client(&query("BEGIN"));
    assert!(is_quiescent(&next), "the server owes nothing: the refusal is answered in its place");
    assert_eq!(s.held, Some(Held::Refused));
    assert!(s.sent_to_server().is_empty(), "the server never hears it");
}

#[tokio::test]
async fn terminate_ends_the_relay_after_what_came_before_it() {
    let mut s = Script::new(false).await;
    let mut frames = query("SELECT 1");
    build::terminate(&mut frames);
    assert!(matches!(s.client(&frames), Next::EndAfterServerWrite(RelayEnd::ClientDone)));
    assert_eq!(tags(&s.sent_to_server()), "Q", "the query goes; the Terminate is pgvia's to act on");
}

#[tokio::test]
async fn an_invalid_frame_ends_the_session_with_a_protocol_error() {
    let mut s = Script::new(false).await;
    let mut frames = BytesMut::new();
    // A Query whose text has no terminating NUL.
    build::frame(&mut frames, b'Q', |b| b.extend_from_slice(b"SELECT 1"));
    match s.client(&frames) {
        Next::EndAfterServerWrite(RelayEnd::Error(e)) => {
            let (code, _) = e.client_error().expect("the client is told");
            assert_eq!(code, SqlState::PROTOCOL_VIOLATION.0);
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_reply_that_answers_nothing_ends_the_relay() {
    let mut s = Script::new(false).await;
    let next = s.server(&reply("C", "SELECT 1", TransactionStatus::Idle));
    assert!(
        matches!(next, Next::EndAfterClientWrite(RelayEnd::ServerLost { .. })),
        "a server out of step is not trusted: {next:?}"
    );
    assert!(s.server.is_broken());
}
