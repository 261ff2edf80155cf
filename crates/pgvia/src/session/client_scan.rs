//! The client side of a relay turn: every complete client frame checked once, then held
//! back, answered by pgvia, or moved to the server's write buffer (rewritten where prepared
//! statements need it), with the session state and the server's expected replies updated.

use bytes::Buf;
use wire::frontend::{self, FrontendMessage};
use wire::FrameDecoder;

use super::error::SessionError;
use super::exchange::{move_prefix, Buffers, Held, Tracking};
use super::pipelined::Pipelined;
use super::server_scan::answer_in_servers_place;
use crate::server::forward::Sent;
use crate::server::{FirstRequest, ServerConn};

/// How a batch of client bytes ended.
pub(super) struct ClientScan {
    pub terminated: bool,
    pub error: Option<SessionError>,
    /// pgvia answered a whole query (ReadyForQuery included) in the server's place.
    pub answered_query: bool,
}

/// Checks the whole client frames read so far and moves them to the server's write buffer,
/// rewritten where prepared statements need it; pgvia's own answers go to the client's.
pub(super) fn scan_client(
    bufs: &mut Buffers,
    decoder: &FrameDecoder,
    server: &mut ServerConn,
    mut tracking: Option<&mut Tracking<'_>>,
) -> ClientScan {
    let Buffers { from_client, to_server, to_client, .. } = bufs;
    let buf = &from_client[..];
    let mut pos = 0;
    // Start of the frames not yet moved: runs of frames that go as they came move in one copy.
    let mut run_start = 0;
    let mut end = loop {
        let len = match decoder.peek_len(&buf[pos..]) {
            Ok(Some(len)) => len,
            Ok(None) => break ClientScan { terminated: false, error: None, answered_query: false },
            Err(e) => break ClientScan { terminated: false, error: Some(e.into()), answered_query: false },
        };
        let tag = buf[pos];
        let frame = &buf[pos..pos + len];
        if tag == frontend::tag::TERMINATE {
            break ClientScan { terminated: true, error: None, answered_query: false };
        }
        // CopyData bodies are opaque; every other message is checked before a server sees it,
        // and read here once for everything below.
        let message = if tag == frontend::tag::COPY_DATA {
            None
        } else {
            match FrontendMessage::parse_body(tag, &frame[5..]) {
                Ok(message) => Some(message),
                Err(e) => {
                    break ClientScan { terminated: false, error: Some(e.into()), answered_query: false }
                }
            }
        };
        if let Some(t) = tracking.as_deref_mut() {
            if t.replica_split.is_some() && !t.open_batch && matches!(tag, b'P' | b'B' | b'Q') {
                match t.pipelined_target(decoder, &buf[pos..]) {
                    Pipelined::Here => {}
                    Pipelined::Incomplete => {
                        break ClientScan { terminated: false, error: None, answered_query: false }
                    }
                    Pipelined::Primary => {
                        t.held = Some(Held::ForPrimary);
                        break ClientScan { terminated: false, error: None, answered_query: false };
                    }
                }
            }
            if t.refuse_transactions && message.as_ref().is_some_and(|m| t.refuses(m, server)) {
                // Refused in statement mode: answered in order once the server is done, or,
                // inside an unsynced batch the server already has part of, not at all.
                if t.open_batch {
                    let error = Some(super::statement_mode::fatal_refusal());
                    break ClientScan { terminated: false, error, answered_query: false };
                }
                t.held = Some(Held::Refused);
                break ClientScan { terminated: false, error: None, answered_query: false };
            }
            t.note_batch(tag);
        }
        let sent = match (tracking.as_deref_mut(), message) {
            (Some(t), Some(message)) if matches!(tag, b'P' | b'B' | b'D' | b'C' | b'Q') => {
                t.send(server, to_server, &buf[run_start..pos], frame, message)
            }
            _ => {
                server.tracker.client_sent(tag, &frame[5..]);
                Sent::AsIs
            }
        };
        tracing::trace!(tag = %char::from(tag), ?sent, "client frame");
        if let Some(statements) = tracking.as_deref_mut().and_then(|t| t.statements.as_deref_mut()) {
            if statements.replay.is_recording() && !statements.replay.record(frame) {
                server.tracker.clear_replay_start();
            }
        }
        pos += len;
        if sent == Sent::Replaced {
            run_start = pos;
        }
    };
    if run_start == 0 {
        move_prefix(from_client, to_server, pos);
    } else {
        to_server.extend_from_slice(&from_client[run_start..pos]);
        from_client.advance(pos);
    }
    end.answered_query = if defers_answers(server, to_server, from_client) {
        false
    } else {
        answer_in_servers_place(server, to_client)
    };
    server.settle_statements(tracking.and_then(|t| t.statements.as_deref_mut()));
    end
}

/// Whether replies pgvia owes in the server's place wait for the server's first reply: while
/// a server just taken has answered nothing, the client's first request can still go to
/// another server if this one turns out dead (session/retry.rs), so the client must not have
/// heard anything of it yet. PostgreSQL itself answers nothing before a Sync or a Flush, so
/// a client cannot be waiting for these replies until it has sent one of those; after a
/// Flush it may be (and the server need not answer anything), so then they go at once, as
/// they do when nothing at all goes to the server (pgvia answered the whole of it).
fn defers_answers(server: &ServerConn, to_server: &[u8], from_client: &[u8]) -> bool {
    matches!(server.first_request, FirstRequest::Unsent | FirstRequest::Awaiting)
        && !has_flush(to_server)
        && !(to_server.is_empty() && from_client.is_empty())
}

/// Whether the whole frames in `buf` include a Flush.
fn has_flush(buf: &[u8]) -> bool {
    let mut pos = 0;
    while let Some(header) = buf.get(pos..pos + 5) {
        if header[0] == frontend::tag::FLUSH {
            return true;
        }
        let len = u32::from_be_bytes([header[1], header[2], header[3], header[4]]) as usize;
        let Some(next) = pos.checked_add(1 + len.max(4)) else { return false };
        pos = next;
    }
    false
}
