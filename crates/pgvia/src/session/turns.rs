//! One turn of the exchange, each side, without the sockets: what the relay does with bytes
//! it read, and what it must do next. `relay.rs` owns the sockets, the timers and the
//! notifications, and calls these; everything here is synchronous, so the exchange can be
//! driven by scripted frames (`turns_tests.rs`).

use wire::FrameDecoder;

use super::client_scan::scan_client;
use super::error::SessionError;
use super::exchange::{Buffers, RelayEnd, Tracking};
use super::pipelined::release_hold_in_open_block;
use super::server_scan::{answer_in_servers_place, first_reply, scan_server};
use crate::server::forward::write_close;
use crate::server::tracker::Replies;
use crate::server::{FirstRequest, ServerConn};

/// One client's exchange with the server it holds, without the sockets: the relay tells it
/// what each socket did (bytes read from either side, bytes written to the server) and it
/// says what the relay does next. Frames the client sent are checked, held, answered by
/// pgvia or moved to the server's write buffer; the server's replies move to the client's,
/// and the exchange decides when the server may go back. `turns_tests.rs` drives it with
/// scripted frames and no PostgreSQL.
pub(super) struct Exchange<'a, 't> {
    pub(super) bufs: &'a mut Buffers,
    pub(super) decoder: &'a FrameDecoder,
    pub(super) server: &'a mut ServerConn,
    /// Transaction pooling's bookkeeping; `None` for a session that keeps its server.
    pub(super) tracking: Option<Tracking<'t>>,
    /// The server's own FATAL has reached the client.
    server_fatal: bool,
}

impl<'a, 't> Exchange<'a, 't> {
    pub(super) fn new(
        bufs: &'a mut Buffers,
        decoder: &'a FrameDecoder,
        server: &'a mut ServerConn,
        tracking: Option<Tracking<'t>>,
    ) -> Self {
        Exchange { bufs, decoder, server, tracking, server_fatal: false }
    }

    /// The client's frames already buffered (what came with the request that got this
    /// server, or is left from an earlier turn).
    pub(super) fn client_frames(&mut self) -> Next {
        client_frames(self.bufs, self.decoder, self.server, self.tracking.as_mut())
    }

    /// `n` more bytes arrived from the client (at the end of `bufs.from_client`).
    pub(super) fn client_read(&mut self, n: usize) -> Next {
        client_read(self.bufs, self.server, n);
        self.client_frames()
    }

    /// Bytes arrived from the server (in `server.read_buf`).
    pub(super) fn server_read(&mut self) -> Next {
        server_bytes(self.bufs, self.decoder, self.server, self.tracking.as_mut(), &mut self.server_fatal)
    }

    /// Bytes were written to the server.
    pub(super) fn server_written(&mut self) {
        server_written(self.server);
    }

    /// Whether the server's own FATAL already told the client why it is going.
    pub(super) fn server_explained(&self) -> bool {
        self.server_fatal
    }
}

/// What the relay does after a turn.
#[derive(Debug)]
pub(super) enum Next {
    /// Go on relaying.
    Relay,
    /// The relay ends now.
    End(RelayEnd),
    /// The client is leaving (Terminate, an invalid frame): what came before it goes to the
    /// server first; the reset that follows collects the replies.
    EndAfterServerWrite(RelayEnd),
    /// The server fell out of step: what the client is owed goes to it first.
    EndAfterClientWrite(RelayEnd),
}

/// The client's whole, valid frames read so far go to the server's write buffer (or are held,
/// or answered by pgvia).
fn client_frames(
    bufs: &mut Buffers,
    decoder: &FrameDecoder,
    server: &mut ServerConn,
    mut tracking: Option<&mut Tracking<'_>>,
) -> Next {
    if bufs.from_client.is_empty() {
        return Next::Relay;
    }
    server.mark_used();
    bufs.meter.request(&bufs.from_client);
    let mut scan = scan_client(bufs, decoder, server, tracking.as_deref_mut());
    if release_hold_in_open_block(server, &bufs.to_server, tracking.as_deref_mut()) {
        scan = scan_client(bufs, decoder, server, tracking.as_deref_mut());
    }
    let releasable = tracking.as_ref().is_some_and(|t| t.may_release());
    if tracking.as_ref().is_some_and(|t| t.held.is_some())
        && bufs.to_server.is_empty()
        && !server.tracker.has_pending()
    {
        // Statement mode stopped at a refused message and the server owes nothing more: the
        // refusal is answered now (client.rs). A transaction open on the server (SQL the
        // analysis could not read began one) would never end by itself.
        if !server.tracker.is_quiescent() {
            return Next::End(RelayEnd::Error(super::statement_mode::fatal_refusal()));
        }
        return Next::End(RelayEnd::Quiescent);
    }
    if !scan.terminated && scan.error.is_none() {
        // pgvia answered the client's query itself and the server owes nothing: it can go
        // back now rather than wait for the client's next message.
        let done = server.tracker.is_quiescent() && bufs.to_server.is_empty() && bufs.from_client.is_empty();
        return if releasable && scan.answered_query && done {
            Next::End(RelayEnd::Quiescent)
        } else {
            Next::Relay
        };
    }
    Next::EndAfterServerWrite(match scan.error {
        Some(e) => RelayEnd::Error(e),
        None => RelayEnd::ClientDone,
    })
}

/// `n` more bytes arrived from the client (at the end of `bufs.from_client`): what the client
/// pipelines behind its first request goes with it, if the request goes to another server.
fn client_read(bufs: &mut Buffers, server: &mut ServerConn, n: usize) {
    bufs.meter.client_bytes(n);
    if matches!(server.first_request, FirstRequest::Unsent | FirstRequest::Awaiting) {
        let more = &bufs.from_client[bufs.from_client.len() - n..];
        if !bufs.first.keep_more(more) {
            server.first_request = FirstRequest::Answered;
            answer_in_servers_place(server, &mut bufs.to_client);
        }
    }
}

/// Bytes were written to the server: its first request is on its way.
fn server_written(server: &mut ServerConn) {
    if server.first_request == FirstRequest::Unsent {
        server.first_request = FirstRequest::Awaiting;
    }
}

/// The server's bytes read so far (in `server.read_buf`): replies move to the client, the
/// statement bookkeeping settles, and the server may be done for this client.
/// `server_fatal` is set once the server's own FATAL reached the client.
fn server_bytes(
    bufs: &mut Buffers,
    decoder: &FrameDecoder,
    server: &mut ServerConn,
    mut tracking: Option<&mut Tracking<'_>>,
    server_fatal: &mut bool,
) -> Next {
    if let Some(end) = first_reply(server, &mut bufs.to_client) {
        return Next::End(end);
    }
    let mut read_buf = std::mem::take(&mut server.read_buf);
    // A pinned client's server holds its session: that session ends as it would.
    let pooled = tracking.as_ref().is_some_and(|t| t.state.pins.is_empty());
    let told_pid = tracking.as_ref().and_then(|t| t.notifier).map(|(_, told)| told);
    let scan = scan_server(&mut read_buf, &mut bufs.to_client, server, &mut bufs.meter, pooled, told_pid);
    server.read_buf = read_buf;
    *server_fatal |= scan.fatal;
    // A server that said FATAL is closing; it must not go back to the pool.
    if scan.fatal || scan.died_idle {
        server.mark_broken();
    }
    if scan.died_idle && bufs.to_server.is_empty() {
        return Next::End(RelayEnd::Quiescent);
    }
    server.settle_statements(tracking.as_deref_mut().and_then(|t| t.statements.as_deref_mut()));
    if let Some(error) = scan.error {
        server.mark_broken();
        return Next::EndAfterClientWrite(RelayEnd::ServerLost { error, told_client: false });
    }
    if let Some(id) = scan.stale_plan {
        let next = retry_stale_plan(bufs, decoder, server, tracking.as_deref_mut(), id);
        if !matches!(next, Next::Relay) {
            return next;
        }
    }
    if release_hold_in_open_block(server, &bufs.to_server, tracking.as_deref_mut()) {
        let next = client_frames(bufs, decoder, server, tracking.as_deref_mut());
        if !matches!(next, Next::Relay) {
            return next;
        }
    }
    let releasable = tracking.as_ref().is_some_and(|t| t.may_release());
    // Every Sync the client sent is answered and nothing of its is half-received.
    let held = tracking.as_ref().is_some_and(|t| t.held.is_some());
    let done =
        server.tracker.is_quiescent() && bufs.to_server.is_empty() && (bufs.from_client.is_empty() || held);
    if releasable && scan.ready && done {
        return Next::End(RelayEnd::Quiescent);
    }
    Next::Relay
}

/// Sends again an exchange whose first Bind failed only because the server's plan of a shared
/// statement went stale (see `prepared::replay`): the statement is closed on the server and the
/// client's recorded frames go through the exchange again, so the statement is parsed afresh
/// ahead of them. The client sees only the second attempt.
fn retry_stale_plan(
    bufs: &mut Buffers,
    decoder: &FrameDecoder,
    server: &mut ServerConn,
    mut tracking: Option<&mut Tracking<'_>>,
    id: u64,
) -> Next {
    let statements = tracking.as_deref_mut().and_then(|t| t.statements.as_deref_mut());
    let Some((frames, statements)) = statements.and_then(|s| Some((s.replay.take()?, s))) else {
        // The tracker asks only for an exchange recorded to its Sync; without it the client
        // would never hear how the exchange ended.
        return Next::End(RelayEnd::Error(SessionError::ProtocolState(
            "a stale-plan retry found no recorded exchange",
        )));
    };
    statements.registry().stats.stale_plan_retries.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    statements.registry().schema_changed();
    if let Some((stmt, epoch)) = server.statements.get_with_epoch(id) {
        stmt.plan_went_stale(epoch);
        let stmt = stmt.clone();
        tracing::debug!(
            statement = stmt.server_name(),
            "plan went stale after DDL; parsing it again and retrying"
        );
        let name = stmt.server_name_cstr();
        write_close(&mut server.tracker, &mut bufs.to_server, name, Replies::DropSuccess, None);
        server.statements.forget(id);
    }
    // The exchange goes again, ahead of anything the client sent after it.
    let mut again = frames;
    again.extend_from_slice(&bufs.from_client);
    bufs.from_client = again;
    client_frames(bufs, decoder, server, tracking)
}

#[cfg(test)]
#[path = "turns_tests.rs"]
mod tests;
