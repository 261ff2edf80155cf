//! The serve loop: bytes between a client and the server it holds. It owns the sockets, the
//! time limits and the notifications; what to do with the bytes is decided by `turns.rs`.
//!
//! One task owns both sockets. Whatever is readable is read first; complete frames are
//! checked (client side) or observed (server side) in place and moved whole into the other
//! side's write buffer, so a round trip costs one read and one write per direction however
//! many messages it carries. Frames are forwarded as the same bytes; nothing is re-encoded.

use bytes::Buf;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use wire::FrameDecoder;

use super::exchange::{ensure_room, Buffers, RelayEnd, Tracking, RELAY_READ};
use super::timeouts::{Timers, Wait};
use super::turns::{Exchange, Next};
use crate::app::Phase;
use crate::net::ClientStream;
use crate::server::{ServerConn, ServerError};

/// Stop reading a side while this much is waiting to be written to the other: the slower
/// peer sets the pace and memory per session stays bounded.
const HIGH_WATER: usize = 256 * 1024;

/// What a relay waits on besides the two sockets: the session's time limits and the
/// notifications of the channels it listens to.
pub struct Waits<'a> {
    pub timers: &'a mut Timers,
    pub inbox: Option<&'a mut crate::notify::Inbox>,
}

/// Carries out what a turn decided: `None` to go on relaying.
async fn carry_out<W: tokio::io::AsyncWrite + Unpin>(
    next: Next,
    bufs: &mut Buffers,
    server: &mut ServerConn,
    client: Option<&mut W>,
) -> Option<RelayEnd> {
    match next {
        Next::Relay => None,
        Next::End(end) => Some(end),
        Next::EndAfterServerWrite(end) => {
            if let Err(e) = server.stream.write_all(&bufs.to_server).await {
                server.mark_broken();
                tracing::debug!(error = %e, "server write failed while client was leaving");
            }
            bufs.to_server.clear();
            Some(end)
        }
        Next::EndAfterClientWrite(end) => {
            if let Some(client) = client {
                let _ = client.write_all(&bufs.to_client).await;
                // Written: the session's last words must not send them a second time.
                bufs.to_client.clear();
            }
            Some(end)
        }
    }
}

/// Relays until one side is done. The server stays usable unless the result says otherwise;
/// the caller resets or closes it.
pub async fn relay(
    client: &mut ClientStream,
    server: &mut ServerConn,
    bufs: &mut Buffers,
    decoder: &FrameDecoder,
    shutdown: &mut crate::clients::PhaseWatch,
    mut tracking: Option<Tracking<'_>>,
    waits: Waits<'_>,
) -> RelayEnd {
    let Waits { timers, mut inbox } = waits;
    let mut draining = shutdown.now() != Phase::Running;
    // The client may have sent more than the message that got it this server; the routing
    // decision was made on all of it, so none of it is held for the primary.
    let replica_split = tracking.as_mut().and_then(|t| t.replica_split.take());
    let mut ex = Exchange::new(bufs, decoder, server, tracking);
    let next = ex.client_frames();
    if let Some(end) = carry_out::<ClientStream>(next, ex.bufs, ex.server, None).await {
        return end;
    }
    if let Some(t) = ex.tracking.as_mut() {
        t.replica_split = replica_split;
    }
    let (mut cr, mut cw) = client.split();
    loop {
        if draining
            && ex.server.tracker.is_quiescent()
            && ex.bufs.to_client.is_empty()
            && ex.bufs.to_server.is_empty()
        {
            return RelayEnd::Shutdown;
        }
        // Replies the client does not read stop the server's too (HIGH_WATER): then the
        // session waits on the client, whose idle limits apply.
        let client_stalled = ex.bufs.to_client.len() >= HIGH_WATER;
        timers.enter(Wait::holding(ex.server, client_stalled));
        ensure_room(&mut ex.server.read_buf, RELAY_READ);
        ensure_room(&mut ex.bufs.from_client, RELAY_READ);
        if let Err(e) = ex.bufs.read_limits.before_read(&ex.bufs.from_client, ex.decoder) {
            return RelayEnd::Error(e);
        }
        let client_readable = ex.bufs.to_server.len() < HIGH_WATER
            && ex.bufs.read_limits.may_read(&ex.bufs.to_client, &ex.bufs.from_client, ex.decoder);
        // Borrow the socket halves and the server's fields separately so one select can wait
        // on all four directions.
        let (mut sr, mut sw) = ex.server.stream.split();
        tokio::select! {
            biased;
            changed = shutdown.changed() => {
                if changed.is_err() || shutdown.now() == Phase::Terminating {
                    return RelayEnd::Shutdown;
                }
                draining = true;
            }
            // Notifications from the pool's LISTEN connection; to_client holds whole frames
            // only, so each lands between two messages of the server's.
            frame = next_notification(&mut inbox), if inbox.is_some() && ex.bufs.to_client.len() < HIGH_WATER => {
                ex.bufs.to_client.extend_from_slice(&frame);
                if let Some(inbox) = inbox.as_mut() {
                    inbox.drain_into(&mut ex.bufs.to_client, HIGH_WATER);
                }
            }
            wait = timers.expired(), if timers.armed() => match wait {
                // to_client holds whole frames only, so the warning lands between messages.
                Wait::Server => timers.cancel_request(ex.server, &mut ex.bufs.to_client),
                // Not even the cancel got an answer: the server is unreachable. It is closed
                // (its state is unknown) and the client told, rather than left waiting for a
                // network that may never come back.
                Wait::Cancelled => {
                    ex.server.mark_broken();
                    return RelayEnd::ServerLost { error: timers.unanswered(), told_client: false };
                }
                _ => return RelayEnd::Error(timers.closing_error(wait)),
            },
            r = sr.read_buf(&mut ex.server.read_buf), if ex.bufs.to_client.len() < HIGH_WATER => {
                match r {
                    Ok(0) => {
                        ex.server.mark_broken();
                        return RelayEnd::ServerLost { error: ServerError::Closed, told_client: ex.server_explained() };
                    }
                    Err(e) => {
                        ex.server.mark_broken();
                        return RelayEnd::ServerLost { error: e.into(), told_client: ex.server_explained() };
                    }
                    Ok(n) => ex.bufs.meter.server_bytes(n),
                }
                let next = ex.server_read();
                if let Some(end) = carry_out(next, ex.bufs, ex.server, Some(&mut cw)).await {
                    return end;
                }
            }
            r = cr.read_buf(&mut ex.bufs.from_client), if client_readable => {
                let n = match r {
                    Ok(0) | Err(_) => return RelayEnd::ClientDone,
                    Ok(n) => n,
                };
                let next = ex.client_read(n);
                if let Some(end) = carry_out(next, ex.bufs, ex.server, Some(&mut cw)).await {
                    return end;
                }
            }
            r = sw.write(&ex.bufs.to_server), if !ex.bufs.to_server.is_empty() => {
                match r {
                    Ok(n) => {
                        ex.bufs.to_server.advance(n);
                        ex.server_written();
                    }
                    Err(e) => {
                        ex.server.mark_broken();
                        return RelayEnd::ServerLost { error: e.into(), told_client: false };
                    }
                }
            }
            r = cw.write(&ex.bufs.to_client), if !ex.bufs.to_client.is_empty() => {
                match r {
                    Ok(n) => ex.bufs.to_client.advance(n),
                    Err(_) => return RelayEnd::ClientDone,
                }
                if client_stalled {
                    // A client reading slowly is not idle.
                    timers.restart();
                }
                // TLS may hold the last records inside the session until flushed; for plain
                // TCP this is free.
                if ex.bufs.to_client.is_empty() && cw.flush().await.is_err() {
                    return RelayEnd::ClientDone;
                }
            }
        }
    }
}

/// The next notification for a session that listens; pending forever for one that does not.
pub async fn next_notification(inbox: &mut Option<&mut crate::notify::Inbox>) -> bytes::Bytes {
    match inbox {
        Some(inbox) => inbox.next().await,
        None => std::future::pending().await,
    }
}
