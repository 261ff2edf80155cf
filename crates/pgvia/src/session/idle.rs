//! The wait of a client that holds no server: for its next request, for the end of its
//! idle time, for a notification, or for shutdown.
//!
//! This wait is what an idle client keeps for as long as it is idle, so it is kept small
//! (issue 19, `docs/benchmarks.md`). On a plain TCP or Unix socket the session writes what
//! is waiting for the client and reads without waiting (`try_write`, `try_read_buf`), and in
//! between waits on the socket's readiness alone, holding no buffer: its per-request parts
//! (work.rs) go back to the worker before the wait and are taken again when the client is
//! readable. A TLS or in-memory client has no readiness to wait on apart from a read; its
//! wait reads and writes through the stream, in a future of its own on the heap, and keeps its
//! parts.

use bytes::Buf;
use std::task::Poll;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::client::{parts, Session};
use super::deferred::DeferredBegin;
use super::exchange::{self, RelayEnd};
use super::relay;
use super::timeouts::Wait;
use crate::app::Phase;
use crate::net::ClientStream;
use crate::routing::decide;

/// How one round of the wait ended.
enum Woke {
    /// Something happened (bytes read or written, a notification): look again.
    Again,
    /// The session ends.
    End(RelayEnd),
}

impl Session<'_> {
    /// Waits, holding no server, until the client has sent a whole message that needs one.
    /// Returns `Some` when the session ends instead.
    pub(super) async fn wait_for_work(&mut self) -> Option<RelayEnd> {
        self.timers.restart();
        loop {
            // A BEGIN answered locally is a transaction as far as the client knows.
            self.timers.enter(if self.deferred_begin.is_some() {
                Wait::IdleInTransaction
            } else {
                Wait::ClientIdle
            });
            let waiting = self.work.peek().map_or(Ok(None), |p| self.decoder.peek_len(&p.bufs.from_client));
            match waiting {
                Ok(Some(len)) => {
                    let local = match self.local_answer_for(len) {
                        Ok(local) => local,
                        Err(end) => return Some(end),
                    };
                    let failed = matches!(self.deferred_begin, Some(DeferredBegin::Failed(_)));
                    // Answers without a server come without a read of the socket per
                    // message: charge each to the task's budget, so a client pipelining
                    // them (a flood of lone prepares) yields its worker now and then.
                    if local.is_none() && !failed && self.answer_statement_command(len) {
                        tokio::task::consume_budget().await;
                        continue;
                    }
                    match local {
                        Some(local) => {
                            self.answer_locally(local, len);
                            tokio::task::consume_budget().await;
                            continue;
                        }
                        // Where a batch runs is decided on the whole batch: read on.
                        None if self.routes_transactions()
                            && decide::needs_more(&parts!(self).bufs.from_client, &self.decoder) => {}
                        None => return None,
                    }
                }
                Ok(None) => {}
                Err(e) => return Some(RelayEnd::Error(e.into())),
            }
            if self.shutdown.now() != Phase::Running {
                return Some(RelayEnd::Shutdown);
            }
            let woke = match &*self.client {
                ClientStream::Plain(_) | ClientStream::Unix(_) => self.wait_ready().await,
                // Boxed: inline, its futures would size every idle client's task.
                ClientStream::Tls(_) | ClientStream::Memory(..) => Box::pin(self.wait_io()).await,
            };
            if let Woke::End(end) = woke {
                return Some(end);
            }
        }
    }

    /// Before a read: the large-message budget, and whether the client may be read at all (a
    /// client that sends without reading what pgvia answered locally is not read further until
    /// it does: its answers cannot pile up without bound). Without parts, nothing is held.
    fn read_allowed(&mut self) -> Result<bool, RelayEnd> {
        let Some(parts) = self.work.peek_mut() else { return Ok(true) };
        let bufs = &mut parts.bufs;
        bufs.read_limits.before_read(&bufs.from_client, &self.decoder).map_err(RelayEnd::Error)?;
        Ok(bufs.read_limits.may_read(&bufs.to_client, &bufs.from_client, &self.decoder))
    }

    /// One round of the wait on a plain TCP or Unix socket.
    async fn wait_ready(&mut self) -> Woke {
        // Replies of the last transaction (or local answers) still waiting for the client go
        // out now; a socket nearly always takes them whole, and the wait below is then on
        // reads alone.
        if let Some(parts) = self.work.peek_mut() {
            let out = &mut parts.bufs.to_client;
            if !out.is_empty() {
                match try_write(self.client, out) {
                    Ok(n) => out.advance(n),
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    Err(_) => return Woke::End(RelayEnd::ClientDone),
                }
            }
        }
        // After the write: what it took may let the client be read again.
        let readable = match self.read_allowed() {
            Ok(readable) => readable,
            Err(end) => return Woke::End(end),
        };
        self.work.release_if_clean();
        let writing = self.work.peek().is_some_and(|p| !p.bufs.to_client.is_empty());
        let mut inbox = self.inbox.as_deref_mut();
        tokio::select! {
            biased;
            changed = self.shutdown.changed() => {
                if changed.is_err() {
                    return Woke::End(RelayEnd::Shutdown);
                }
            }
            // Boxed: few clients listen, and inline its future was 56 bytes of every idle
            // client's task.
            frame = async { Box::pin(relay::next_notification(&mut inbox)).await }, if inbox.is_some() => {
                let out = &mut parts!(self).bufs.to_client;
                out.extend_from_slice(&frame);
                if let Some(inbox) = inbox.as_mut() {
                    inbox.drain_into(out, exchange::IDLE_READ * 32);
                }
            }
            wait = self.timers.expired(), if self.timers.armed() => {
                return Woke::End(RelayEnd::Error(self.timers.closing_error(wait)));
            }
            ready = ready(self.client, readable, writing), if readable || writing => match ready {
                // Written at the top of the next round.
                Ok(Direction::Write) => {}
                Ok(Direction::Read) => {
                    let bufs = &mut parts!(self).bufs;
                    // A client that never sent anything after its login gets a small buffer
                    // with its first read (64 bytes of room); one that did, room for a
                    // useful read.
                    if bufs.from_client.capacity() > 0 {
                        exchange::ensure_room(&mut bufs.from_client, exchange::IDLE_READ);
                    }
                    match read_now(self.client, &mut bufs.from_client) {
                        Ok(0) => return Woke::End(RelayEnd::ClientDone),
                        Ok(n) => {
                            bufs.meter.client_bytes(n);
                            self.timers.restart();
                        }
                        // The readiness was stale (and is cleared): wait again.
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                        Err(_) => return Woke::End(RelayEnd::ClientDone),
                    }
                }
                Err(_) => return Woke::End(RelayEnd::ClientDone),
            },
        }
        Woke::Again
    }

    /// One round of the wait on a TLS or in-memory stream: reads and writes through it.
    async fn wait_io(&mut self) -> Woke {
        let readable = match self.read_allowed() {
            Ok(readable) => readable,
            Err(end) => return Woke::End(end),
        };
        let bufs = &mut self.work.get(self.app, self.shutdown.client()).bufs;
        if bufs.from_client.capacity() > 0 {
            exchange::ensure_room(&mut bufs.from_client, exchange::IDLE_READ);
        }
        // Replies of the last transaction may still be on their way to the client.
        let (mut reader, mut writer) = self.client.split();
        let mut inbox = self.inbox.as_deref_mut();
        tokio::select! {
            biased;
            changed = self.shutdown.changed() => {
                if changed.is_err() {
                    return Woke::End(RelayEnd::Shutdown);
                }
            }
            frame = relay::next_notification(&mut inbox), if inbox.is_some() => {
                bufs.to_client.extend_from_slice(&frame);
                if let Some(inbox) = inbox.as_mut() {
                    inbox.drain_into(&mut bufs.to_client, exchange::IDLE_READ * 32);
                }
            }
            wait = self.timers.expired(), if self.timers.armed() => {
                return Woke::End(RelayEnd::Error(self.timers.closing_error(wait)));
            }
            r = reader.read_buf(&mut bufs.from_client), if readable => match r {
                Ok(0) | Err(_) => return Woke::End(RelayEnd::ClientDone),
                Ok(n) => {
                    bufs.meter.client_bytes(n);
                    self.timers.restart();
                }
            },
            r = writer.write(&bufs.to_client), if !bufs.to_client.is_empty() => match r {
                Ok(n) => {
                    bufs.to_client.advance(n);
                    if bufs.to_client.is_empty() && writer.flush().await.is_err() {
                        return Woke::End(RelayEnd::ClientDone);
                    }
                }
                Err(_) => return Woke::End(RelayEnd::ClientDone),
            },
        }
        Woke::Again
    }
}

/// Waits until a plain or Unix socket is readable (`read`) or writable (`write`); never for
/// another stream. Polls the socket's own readiness: tokio's `ready()` future carries a
/// waiter of its own, 136 bytes of every idle client's task, where this keeps two references.
fn ready<'s>(
    stream: &'s ClientStream,
    read: bool,
    write: bool,
) -> impl std::future::Future<Output = std::io::Result<Direction>> + 's {
    std::future::poll_fn(move |cx| {
        let (read_ready, write_ready) = match stream {
            ClientStream::Plain(tcp) => (
                if read { tcp.poll_read_ready(cx) } else { Poll::Pending },
                if write { tcp.poll_write_ready(cx) } else { Poll::Pending },
            ),
            ClientStream::Unix(unix) => (
                if read { unix.poll_read_ready(cx) } else { Poll::Pending },
                if write { unix.poll_write_ready(cx) } else { Poll::Pending },
            ),
            ClientStream::Tls(_) | ClientStream::Memory(..) => (Poll::Pending, Poll::Pending),
        };
        match (read_ready, write_ready) {
            (Poll::Ready(Err(e)), _) | (_, Poll::Ready(Err(e))) => Poll::Ready(Err(e)),
            (Poll::Ready(Ok(())), _) => Poll::Ready(Ok(Direction::Read)),
            (_, Poll::Ready(Ok(()))) => Poll::Ready(Ok(Direction::Write)),
            (Poll::Pending, Poll::Pending) => Poll::Pending,
        }
    })
}

/// Which way a socket became ready.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Direction {
    Read,
    Write,
}

/// Writes what a plain or Unix socket takes now, without waiting.
fn try_write(stream: &ClientStream, out: &[u8]) -> std::io::Result<usize> {
    match stream {
        ClientStream::Plain(tcp) => tcp.try_write(out),
        ClientStream::Unix(unix) => unix.try_write(out),
        ClientStream::Tls(_) | ClientStream::Memory(..) => Err(std::io::ErrorKind::WouldBlock.into()),
    }
}

/// Reads what a plain or Unix socket has now, without waiting (`WouldBlock` if nothing).
/// Through `poll_read`, not `try_read_buf`: a short read through `poll_read` tells the runtime
/// the socket is drained, so the relay's first read of the request's socket waits for
/// readiness instead of asking the kernel; with `try_read_buf` every request cost a
/// `recvfrom` that returned EAGAIN (three reads per round trip where PgBouncer makes two).
/// Polled once with a no-op waker rather than awaited: an `.await` here made the idle wait's
/// future 40 bytes larger. A `WouldBlock` leaves the no-op waker registered, which the wait's
/// next poll of the socket's readiness replaces with the task's own.
fn read_now(stream: &mut ClientStream, buf: &mut bytes::BytesMut) -> std::io::Result<usize> {
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    let polled = match stream {
        ClientStream::Plain(tcp) => tokio_util::io::poll_read_buf(std::pin::Pin::new(tcp), &mut cx, buf),
        ClientStream::Unix(unix) => tokio_util::io::poll_read_buf(std::pin::Pin::new(unix), &mut cx, buf),
        ClientStream::Tls(_) | ClientStream::Memory(..) => Poll::Pending,
    };
    match polled {
        Poll::Pending => Err(std::io::ErrorKind::WouldBlock.into()),
        Poll::Ready(done) => done,
    }
}
