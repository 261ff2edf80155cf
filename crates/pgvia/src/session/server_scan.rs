//! The server side of the relay: what a batch of server bytes holds, the replies pgvia
//! gives in the server's place, and a first reply that means the request never ran.

use bytes::{Buf, BytesMut};

use super::meter::Meter;
use crate::server::forward::write_answer;
use crate::server::tracker::{Answer, Fate};
use crate::server::{FirstReply, FirstRequest, ServerConn, ServerError, ServerEvent};

use super::exchange::{move_prefix, RelayEnd};

/// Gives the replies pgvia owes in the server's place whose turn has come.
/// Returns whether the last of them answered a whole query.
pub(super) fn answer_in_servers_place(server: &mut ServerConn, to_client: &mut BytesMut) -> bool {
    let mut whole_query = false;
    while let Some(answer) = server.tracker.take_answered() {
        // The client has been answered: the request can no longer go to another server.
        server.first_request = FirstRequest::Answered;
        whole_query = matches!(answer, Answer::Command(..));
        write_answer(to_client, answer);
    }
    whole_query
}

/// What a batch of server bytes held.
pub(super) struct ServerScan {
    pub(super) fatal: bool,
    /// Transaction pooling: the server was terminated while it owed the client nothing (its
    /// FATAL, dropped, came after the last reply): the client's transaction is complete and
    /// the server is gone, which is no concern of the client's.
    pub(super) died_idle: bool,
    /// A ReadyForQuery was among the frames.
    pub(super) ready: bool,
    /// The recorded exchange failed on a stale plan of this statement and must be sent again.
    pub(super) stale_plan: Option<u64>,
    pub(super) error: Option<ServerError>,
}

/// Moves the whole server frames read so far to the client's write buffer, dropping replies
/// to pgvia's own messages and adding the replies pgvia gives in the server's place.
/// `told_pid` is the pid the client was told at login when it is not its server's (transaction
/// pooling): a notification its own server's backend sent is the client's own, and shows it.
pub(super) fn scan_server(
    read_buf: &mut BytesMut,
    to_client: &mut BytesMut,
    server: &mut ServerConn,
    meter: &mut Meter,
    pooled: bool,
    told_pid: Option<u32>,
) -> ServerScan {
    let decoder = server.decoder;
    let mut scan = ServerScan { fatal: false, died_idle: false, ready: false, stale_plan: None, error: None };
    let buf = &read_buf[..];
    let mut pos = 0;
    let mut run_start = 0;
    loop {
        let len = match decoder.peek_len(&buf[pos..]) {
            Ok(Some(len)) => len,
            Ok(None) => break,
            Err(e) => {
                scan.error = Some(e.into());
                break;
            }
        };
        let tag = buf[pos];
        let body = &buf[pos + 5..pos + len];
        if pooled
            && tag == wire::backend::tag::ERROR_RESPONSE
            && server.tracker.is_quiescent()
            && matches!(
                crate::server::first_reply(&buf[pos..pos + len], &decoder),
                FirstReply::Terminating(_)
            )
        {
            // Nothing of what follows is the client's: the server is closing.
            tracing::info!(
                server = server.id,
                pid = server.key.process_id,
                "server connection terminated between transactions; closing it"
            );
            scan.died_idle = true;
            break;
        }
        if tag == wire::backend::tag::PARAMETER_STATUS {
            if let Err(e) = server.observe_body(tag, body) {
                scan.error = Some(e);
                break;
            }
        }
        let (event, mut fate) = server.tracker.server_sent(tag, body);
        if tag == wire::backend::tag::NOTIFICATION_RESPONSE && matches!(fate, Fate::Forward) {
            let frame = &buf[pos..pos + len];
            if let Some(told) =
                told_pid.filter(|_| crate::notify::pid_of(frame) == Some(server.key.process_id))
            {
                fate = Fate::Replace(crate::notify::with_pid(frame, told));
            }
        }
        tracing::trace!(tag = %char::from(tag), ?fate, ?event, "server frame");
        // Replies to pgvia's own messages are not the client's traffic.
        let forwarded = !matches!(fate, Fate::Drop);
        match event {
            ServerEvent::Fatal => scan.fatal = true,
            ServerEvent::Desync => {
                scan.error = Some(ServerError::Desync("a reply that answers no pending request"));
                break;
            }
            ServerEvent::Ready { status, .. } => {
                scan.ready = true;
                if status == wire::backend::TransactionStatus::Idle {
                    server.statements.transaction_ended();
                }
                if forwarded {
                    meter.ready(1, status == wire::backend::TransactionStatus::Idle);
                }
            }
            ServerEvent::StalePlan(id) => scan.stale_plan = Some(id),
            ServerEvent::StaleSeen(id) => {
                if let Some((stmt, epoch)) = server.statements.get_with_epoch(id) {
                    stmt.plan_went_stale(epoch);
                }
                // The schema changed in a way pgvia did not see (another connection, a
                // function): fresh Parses elsewhere must not meet copies from before it.
                if let Some(r) = server.statements.registry() {
                    r.schema_changed();
                }
            }
            ServerEvent::Other => {}
        }
        if tag == wire::backend::tag::ERROR_RESPONSE {
            if forwarded {
                meter.error(wire::backend::Fields::new(body).code().unwrap_or_default().as_bytes());
            }
            if names_a_lost_statement(body) {
                // Something pgvia did not see (a `DEALLOCATE` run by a function or a DO block)
                // dropped pgvia's statements on this server. Counted as held, each would fail
                // for every client this server serves until it closes; of unknown state, each
                // is closed and parsed again at its next use.
                tracing::info!(server = server.id, "a statement pgvia keeps on this server was dropped behind its back; parsing its statements again");
                server.statements.assume_unknown();
            }
        }
        let answered = server.tracker.take_answered();
        match fate {
            Fate::Forward if answered.is_none() => pos += len,
            Fate::Forward => {
                pos += len;
                to_client.extend_from_slice(&buf[run_start..pos]);
                run_start = pos;
            }
            Fate::Drop | Fate::Replace(_) => {
                to_client.extend_from_slice(&buf[run_start..pos]);
                if let Fate::Replace(frame) = fate {
                    to_client.extend_from_slice(&frame);
                }
                pos += len;
                run_start = pos;
            }
        }
        if let Some(answer) = answered {
            write_answer(to_client, answer);
            answer_in_servers_place(server, to_client);
        }
    }
    if run_start == 0 {
        move_prefix(read_buf, to_client, pos);
    } else {
        to_client.extend_from_slice(&read_buf[run_start..pos]);
        read_buf.advance(pos);
    }
    scan
}

/// A server's first reply to a client's first request: a FATAL it sends when terminated
/// from outside ends the relay before the client sees it, so the session can run the request
/// on another server (`FirstRequest::Refused`). Anything else, and the request is answered.
pub(super) fn first_reply(server: &mut ServerConn, to_client: &mut BytesMut) -> Option<RelayEnd> {
    if !matches!(server.first_request, FirstRequest::Unsent | FirstRequest::Awaiting) {
        return None;
    }
    match crate::server::first_reply(&server.read_buf, &server.decoder) {
        FirstReply::Incomplete => None,
        FirstReply::Terminating(error) => {
            server.first_request = FirstRequest::Refused;
            server.mark_broken();
            Some(RelayEnd::ServerLost { error, told_client: false })
        }
        FirstReply::Other => {
            server.first_request = FirstRequest::Answered;
            // Replies pgvia held back for this moment go first, in their turn.
            answer_in_servers_place(server, to_client);
            None
        }
    }
}

/// Whether an error is PostgreSQL's 26000 for one of pgvia's own statements on the server
/// (other than the name no statement has, which pgvia's refusals ask for on purpose).
fn names_a_lost_statement(body: &[u8]) -> bool {
    let fields = wire::backend::Fields::new(body);
    fields.code() == Some("26000")
        && fields
            .message()
            .and_then(|m| m.strip_prefix("prepared statement \""))
            .and_then(|m| m.split('"').next())
            .is_some_and(|name| {
                crate::prepared::is_reserved_name(name)
                    && name != crate::server::forward::NO_SUCH_STATEMENT_NAME
            })
}
