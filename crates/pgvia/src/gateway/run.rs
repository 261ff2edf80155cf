//! One `POST /sql` from the session's welcome to the response's last byte.
//!
//! Statements go as Parse/Bind/Describe/Execute with one Sync at the end (a batch between
//! a hidden BEGIN and COMMIT), parameters always as Bind values. Replies are turned into
//! the response as they arrive. The head waits for the first row in the streaming formats
//! (whose errors after rows have a documented trailer) and, for JSON, until the answer ends
//! or outgrows `gateway.json_buffer_bytes`: Neon's clients read the status only, so a JSON
//! answer that fails after its head went is aborted, never ended as if whole. When the client goes
//! away, the running query is cancelled through pgvia's cancel registry and the session is
//! read to its ReadyForQuery, so its server goes back to the pool clean.

use std::collections::VecDeque;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use hyper::StatusCode;
use wire::backend::{BackendMessage, TransactionStatus};
use wire::Frame;

use super::document::Document;
use super::json::ValueText;
use super::request::{Format, Work};
use super::results;
use super::sink::{Gone, Sink};
use super::tunnel::{Tunnel, TunnelError};
use crate::app::App;

/// What a request asks for beyond its statements.
pub struct Job {
    pub work: Work,
    pub format: Format,
    pub text: ValueText,
    /// `gateway.max_response_rows` and `max_response_bytes` (0: no limit).
    pub max_rows: u64,
    pub max_bytes: u64,
}

/// Whose reply the next frames are.
enum Unit {
    /// BEGIN or COMMIT around a batch: its replies are not shown.
    Hidden,
    /// The n-th statement of the request.
    Query(usize),
}

/// How the exchange ended, for the answer.
enum Outcome {
    Done,
    /// An error the client is told about (already written when the head had gone).
    Failed {
        status: StatusCode,
        body: Bytes,
    },
    /// An error after the head of an answer with no place for it (JSON): the body is
    /// broken off so that the client cannot take what it got for the whole answer.
    Aborted,
}

/// Runs the request, answering through `sink`. Never panics on what the session sends.
pub async fn run(app: Arc<App>, mut tunnel: Tunnel, job: Job, mut sink: Sink) {
    let outcome = exchange(&app, &mut tunnel, &job, &mut sink).await;
    match outcome {
        Ok(Outcome::Done) => {
            let _ = sink.finish().await;
            tunnel.close().await;
        }
        Ok(Outcome::Failed { status, body }) => {
            if !sink.committed() {
                let _ = sink.answer(status, body);
            } else {
                let _ = sink.finish().await;
            }
            tunnel.close().await;
        }
        Ok(Outcome::Aborted) => {
            tracing::debug!("gateway: a JSON answer failed after its head; aborting the response");
            drop(sink);
            tunnel.close().await;
        }
        Err(Stop::Gone) => {
            tracing::debug!("gateway: client went away; cancelling its query");
            tunnel.abandon();
            tunnel.cancel(&app).await;
            if tunnel.drain().await.is_ok() {
                tunnel.close().await;
            }
        }
        Err(Stop::Tunnel(e)) => {
            tracing::warn!(error = %e, "gateway: session failed");
            let mut body = BytesMut::new();
            results::own_error_into(&mut body, "08006", &format!("pgvia's session failed: {e}"));
            // Once the head has gone, dropping the sink aborts the body.
            if !sink.committed() {
                let _ = sink.answer(StatusCode::BAD_GATEWAY, body.freeze());
            }
        }
    }
}

enum Stop {
    Gone,
    Tunnel(TunnelError),
}

impl From<Gone> for Stop {
    fn from(_: Gone) -> Self {
        Stop::Gone
    }
}

impl From<TunnelError> for Stop {
    fn from(e: TunnelError) -> Self {
        Stop::Tunnel(e)
    }
}

/// The HTTP status for an error the server (or the session) raised before any row.
fn status_for(code: &[u8]) -> StatusCode {
    match code {
        b"53300" | b"57P01" | b"57P03" | b"08006" => StatusCode::SERVICE_UNAVAILABLE,
        c if c.starts_with(b"28") => StatusCode::UNAUTHORIZED,
        _ => StatusCode::BAD_REQUEST,
    }
}

/// Waits for the next frame, handing buffered output over when it is due, and noticing
/// a client that went away.
async fn next(tunnel: &mut Tunnel, sink: &mut Sink) -> Result<Frame, Stop> {
    loop {
        if let Some(f) = tunnel.next_frame()? {
            return Ok(f);
        }
        let deadline = sink.deadline();
        tokio::select! {
            r = tunnel.fill() => r?,
            () = sink.gone() => return Err(Stop::Gone),
            () = sleep_until(deadline) => sink.flush().await?,
        }
    }
}

async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

async fn exchange(app: &App, tunnel: &mut Tunnel, job: &Job, sink: &mut Sink) -> Result<Outcome, Stop> {
    // The welcome: ParameterStatus, BackendKeyData, ReadyForQuery, or why the login failed.
    loop {
        let f = next(tunnel, sink).await?;
        match BackendMessage::parse(&f).map_err(TunnelError::from)? {
            BackendMessage::ReadyForQuery(_) => break,
            BackendMessage::ErrorResponse(fields) => {
                let mut body = BytesMut::new();
                results::error_into(&mut body, &fields);
                let status = status_for(fields.get_bytes(b'C').unwrap_or_default());
                return Ok(Outcome::Failed { status, body: body.freeze() });
            }
            _ => {}
        }
    }

    let queries = job.work.queries();
    let mut out = BytesMut::new();
    let mut units = VecDeque::with_capacity(queries.len() + 2);
    // Queued per statement and written while replies are read (see `tunnel`).
    if let Work::Batch { begin, .. } = &job.work {
        hidden(&mut out, begin);
        tunnel.queue(&mut out);
        units.push_back(Unit::Hidden);
    }
    for (i, q) in queries.iter().enumerate() {
        wire::build::parse_unnamed(&mut out, &q.sql);
        wire::build::bind_text(&mut out, q.params.iter().map(|p| p.as_deref().map(str::as_bytes)));
        wire::build::describe_portal(&mut out);
        wire::build::execute_all(&mut out);
        tunnel.queue(&mut out);
        units.push_back(Unit::Query(i));
    }
    let batch = matches!(job.work, Work::Batch { .. });
    if batch {
        hidden(&mut out, "COMMIT");
        tunnel.queue(&mut out);
        units.push_back(Unit::Hidden);
    }
    wire::build::sync(&mut out);
    tunnel.queue(&mut out);

    // The streaming formats commit to 200 at their first row; JSON only once it outgrows
    // the sink's hold (its status then exact for every answer that fits).
    let streams = job.format != Format::Json;
    let mut doc = Document::new(job.format, batch, job.text);
    doc.open(&mut sink.buf);
    let mut rows: u64 = 0;
    let mut failed: Option<(StatusCode, Bytes)> = None;
    let status = loop {
        let f = next(tunnel, sink).await?;
        let msg = BackendMessage::parse(&f).map_err(TunnelError::from)?;
        // After an error (or past a cap, once the query is cancelled) what still comes
        // up to ReadyForQuery is dropped.
        if failed.is_some() && !matches!(msg, BackendMessage::ReadyForQuery(_)) {
            continue;
        }
        match msg {
            BackendMessage::RowDescription(desc) => {
                if let Some(Unit::Query(i)) = units.front() {
                    doc.result_start(&mut sink.buf, Some(&desc), queries[*i].row_as)
                        .map_err(TunnelError::from)?;
                }
            }
            BackendMessage::NoData => {
                if let Some(Unit::Query(i)) = units.front() {
                    doc.result_start(&mut sink.buf, None, queries[*i].row_as).map_err(TunnelError::from)?;
                }
            }
            BackendMessage::DataRow(row) => {
                rows += 1;
                doc.row(&mut sink.buf, &row).map_err(TunnelError::from)?;
                let over_rows = job.max_rows > 0 && rows > job.max_rows;
                let over_bytes = job.max_bytes > 0 && sink.sent + sink.buf.len() as u64 > job.max_bytes;
                if over_rows || over_bytes {
                    let what =
                        if over_rows { "gateway.max_response_rows" } else { "gateway.max_response_bytes" };
                    let message =
                        format!("the response is larger than {what} allows; the query was cancelled");
                    // Neon answers 507 past its response cap.
                    let (s, body) = fail(&mut doc, sink, |b| results::own_error_into(b, "54000", &message));
                    let s = if s == StatusCode::BAD_REQUEST { StatusCode::INSUFFICIENT_STORAGE } else { s };
                    failed = Some((s, body));
                    tunnel.cancel(app).await;
                    continue;
                }
                if streams && !sink.committed() {
                    sink.commit()?;
                }
            }
            BackendMessage::CommandComplete { tag } => {
                if let Some(Unit::Query(_)) = units.pop_front() {
                    doc.result_end(&mut sink.buf, tag);
                }
            }
            BackendMessage::EmptyQueryResponse => {
                if let Some(Unit::Query(_)) = units.pop_front() {
                    doc.result_end(&mut sink.buf, "");
                }
            }
            BackendMessage::ErrorResponse(fields) => {
                let status = status_for(fields.get_bytes(b'C').unwrap_or_default());
                let (s, body) = fail(&mut doc, sink, |b| results::error_into(b, &fields));
                failed = Some((if sink.committed() { s } else { status }, body));
            }
            BackendMessage::ReadyForQuery(status) => break status,
            _ => {}
        }
        if sink.full() {
            sink.flush().await?;
        }
    };
    if status != TransactionStatus::Idle {
        // A batch that failed inside its transaction: roll it back before the session is
        // given up (transaction pooling would otherwise keep the server for it).
        wire::build::query(&mut out, "ROLLBACK");
        tunnel.send(&mut out).await?;
        tunnel.drain().await?;
    }
    match failed {
        Some(_) if sink.committed() && !job.format.has_error_trailer() => Ok(Outcome::Aborted),
        Some((status, body)) => Ok(Outcome::Failed { status, body }),
        None => {
            doc.close(&mut sink.buf);
            Ok(Outcome::Done)
        }
    }
}

/// Records an error: written into the stream if the head has gone (and the format has an
/// error trailer; else the answer is aborted), or kept as the whole answer (and what was
/// buffered dropped).
fn fail(doc: &mut Document, sink: &mut Sink, error: impl Fn(&mut BytesMut)) -> (StatusCode, Bytes) {
    if sink.committed() {
        doc.close_with_error(&mut sink.buf, &error);
        (StatusCode::OK, Bytes::new())
    } else {
        sink.buf.clear();
        let mut body = BytesMut::new();
        error(&mut body);
        (StatusCode::BAD_REQUEST, body.freeze())
    }
}

/// A statement whose replies are not shown (BEGIN, COMMIT), without Describe.
fn hidden(out: &mut BytesMut, sql: &str) {
    wire::build::parse_unnamed(out, sql);
    wire::build::bind_text(out, std::iter::empty());
    wire::build::execute_all(out);
}
