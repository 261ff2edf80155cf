//! The admin console: the virtual databases `pgvia` and `pgbouncer`, reached by users with
//! `admin = true`. pgvia answers simple-protocol commands itself, with PgBouncer's `SHOW`
//! layouts (same columns in the same order, pgvia's extra columns after them) and its
//! commands (`PAUSE`, `RESUME`, `RECONNECT`, `RELOAD`, `KILL`, `KILL_CLIENT`, `WAIT_CLOSE`,
//! `SHUTDOWN`). No server is involved.

pub mod census;
mod commands;
pub(crate) mod rows;
mod show;
mod show_config;
mod show_hosts;
mod show_shards;
mod show_stats;

use bytes::BytesMut;
use thiserror::Error;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use wire::backend::TransactionStatus;
use wire::build::Severity;
use wire::build::{self, ErrorFields};
use wire::frontend::{tag, FrontendMessage};
use wire::sqlstate::SqlState;
use wire::FrameDecoder;

use crate::app::{App, Phase};
use crate::clients::ClientInfo;
use crate::net::ClientStream;
pub use rows::{Kind, RowSet, Value};

const CLIENT_LEFT: &str = "client closed the connection";

/// Largest command accepted on the console.
const MAX_COMMAND: usize = 64 * 1024;

/// How an admin console connection ended in error (the session layer logs it).
#[derive(Debug, Error)]
pub enum ConsoleError {
    #[error("client I/O error: {0}")]
    ClientIo(#[from] std::io::Error),
    #[error("invalid message from client: {0}")]
    Protocol(#[from] wire::WireError),
}

/// What a command produced.
pub enum Reply {
    Rows(RowSet),
    /// CommandComplete with this tag.
    Done(&'static str),
}

/// Why a command failed, for the client's ErrorResponse.
#[derive(Debug)]
pub struct AdminError {
    pub code: SqlState,
    pub message: String,
}

impl AdminError {
    pub fn new(code: SqlState, message: impl Into<String>) -> Self {
        Self { code, message: message.into() }
    }
}

/// Serves an authenticated admin client until it leaves; returns why it ended.
pub async fn serve(
    app: &App,
    stream: &mut ClientStream,
    buf: &mut BytesMut,
    out: &mut BytesMut,
    me: &std::sync::Arc<ClientInfo>,
) -> Result<&'static str, ConsoleError> {
    build::authentication_ok(out);
    let version = format!("{} (pgvia)", env!("CARGO_PKG_VERSION"));
    for (name, value) in [
        ("server_version", version.as_str()),
        ("server_encoding", "UTF8"),
        ("client_encoding", "UTF8"),
        ("DateStyle", "ISO"),
        ("integer_datetimes", "on"),
        ("standard_conforming_strings", "on"),
        ("application_name", me.who.application_name()),
    ] {
        build::parameter_status(out, name, value);
    }
    build::ready_for_query(out, TransactionStatus::Idle.as_byte());
    flush(stream, out).await?;
    let decoder = FrameDecoder::new(MAX_COMMAND);
    let mut phase = me.phase_watch();
    // After an extended-protocol message, everything up to Sync is skipped.
    let mut skipping = false;
    loop {
        while let Some(frame) = decoder.decode(buf)? {
            match frame.tag() {
                tag::TERMINATE => return Ok(CLIENT_LEFT),
                tag::SYNC => {
                    skipping = false;
                    build::ready_for_query(out, TransactionStatus::Idle.as_byte());
                }
                tag::QUERY => {
                    let FrontendMessage::Query { sql } =
                        FrontendMessage::parse_body(frame.tag(), frame.body())?
                    else {
                        continue;
                    };
                    // The console speaks UTF-8; other bytes read as U+FFFD and match nothing.
                    run_query(app, me, &String::from_utf8_lossy(sql), out).await;
                    build::ready_for_query(out, TransactionStatus::Idle.as_byte());
                }
                _ if skipping => {}
                _ => {
                    skipping = true;
                    ErrorFields::error(
                        SqlState::FEATURE_NOT_SUPPORTED,
                        "the pgvia admin console accepts only simple queries (SHOW ..., PAUSE, ...)",
                    )
                    .write(out);
                }
            }
        }
        flush(stream, out).await?;
        tokio::select! {
            r = stream.read_buf(buf) => {
                if r? == 0 {
                    return Ok(CLIENT_LEFT);
                }
            }
            changed = phase.changed() => {
                if changed.is_err() || phase.now() != Phase::Running {
                    // The caller sends `out` before closing.
                    ErrorFields::with_code(
                        Severity::Fatal,
                        SqlState::ADMIN_SHUTDOWN.0,
                        "terminating connection: pgvia is shutting down",
                    )
                    .write(out);
                    return Ok("shutdown or killed by the admin console");
                }
            }
        }
    }
}

async fn flush(stream: &mut ClientStream, out: &mut BytesMut) -> std::io::Result<()> {
    if !out.is_empty() {
        stream.write_all(out).await?;
        stream.flush().await?;
        out.clear();
    }
    Ok(())
}

/// Runs each `;`-separated command of a simple query; stops at the first error, as
/// PostgreSQL does for a multi-statement query.
async fn run_query(app: &App, me: &ClientInfo, sql: &str, out: &mut BytesMut) {
    let commands: Vec<&str> = sql.split(';').map(str::trim).filter(|c| !c.is_empty()).collect();
    if commands.is_empty() {
        // EmptyQueryResponse.
        build::frame(out, b'I', |_| {});
        return;
    }
    for command in commands {
        match execute(app, me, command).await {
            Ok(Reply::Rows(rows)) => rows.write(out, "SHOW"),
            Ok(Reply::Done(tag)) => build::command_complete(out, tag),
            Err(e) => {
                ErrorFields::error(e.code, &e.message).write(out);
                return;
            }
        }
    }
}

/// Parses and runs one console command.
pub async fn execute(app: &App, me: &ClientInfo, command: &str) -> Result<Reply, AdminError> {
    // `SHOW ROUTE` takes a whole statement after it.
    let trimmed = command.trim_start();
    if trimmed.len() > 10
        && trimmed[..10].eq_ignore_ascii_case("SHOW ROUTE")
        && trimmed.as_bytes()[10].is_ascii_whitespace()
    {
        return show_shards::route(app, &trimmed[11..])
            .map(Reply::Rows)
            .map_err(|e| AdminError::new(SqlState::FEATURE_NOT_SUPPORTED, e));
    }
    let mut words = command.split_whitespace();
    let verb = words.next().unwrap_or_default().to_ascii_uppercase();
    let arg = words.next();
    if words.next().is_some() {
        return Err(unknown(command));
    }
    let arg = arg.map(|a| a.trim_matches('"'));
    let reply = match verb.as_str() {
        "SHOW" => {
            let what = arg.ok_or_else(|| unknown(command))?.to_ascii_uppercase();
            Reply::Rows(show::show(app, &what).ok_or_else(|| unknown(command))?)
        }
        _ => commands::run(app, me, &verb, arg).await?,
    };
    Ok(reply)
}

fn unknown(command: &str) -> AdminError {
    AdminError::new(
        SqlState::SYNTAX_ERROR,
        format!(
            "unknown admin console command: \"{command}\"; try SHOW HELP (commands: SHOW, PAUSE, RESUME, \
             RECONNECT, RELOAD, KILL, KILL_CLIENT, WAIT_CLOSE, SHUTDOWN)"
        ),
    )
}
