//! The listening connection of one hub: a server connection of its own (not one of the pool's
//! `pool_size`), opened at the first `LISTEN`, reopened after a failure with every channel
//! listened to again.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Weak;
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::AsyncReadExt;
use tokio::sync::{mpsc, oneshot};
use wire::backend::{tag, BackendMessage};

use super::{quote_ident, Command, Hub};
use crate::server::{ServerConn, ServerError};

/// Pause before reconnecting after the listening connection failed.
const RECONNECT_DELAY: Duration = Duration::from_secs(1);

pub(super) fn spawn(hub: Weak<Hub>, mut commands: mpsc::UnboundedReceiver<Command>) {
    tokio::spawn(async move {
        // Nothing to listen to until the first command.
        let Some(first) = commands.recv().await else { return };
        let mut first = Some(first);
        loop {
            let Some(h) = hub.upgrade() else { return };
            let connected = ServerConn::connect(&h.addr, h.connect_timeout, h.max_frame).await;
            let name = h.name.clone();
            drop(h);
            let mut conn = match connected {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!(pool = %name, error = %e, "could not open the LISTEN connection; retrying");
                    tokio::time::sleep(RECONNECT_DELAY).await;
                    continue;
                }
            };
            match listen(&hub, &mut conn, &mut commands, first.take()).await {
                Ok(()) => return,
                Err(e) => {
                    tracing::warn!(pool = %name, error = %e, "LISTEN connection lost; reopening it");
                    tokio::time::sleep(RECONNECT_DELAY).await;
                }
            }
        }
    });
}

/// Serves one listening connection until it fails (`Err`) or the hub is gone (`Ok`).
async fn listen(
    hub: &Weak<Hub>,
    conn: &mut ServerConn,
    commands: &mut mpsc::UnboundedReceiver<Command>,
    first: Option<Command>,
) -> Result<(), ServerError> {
    // One entry per query sent, answered by its ReadyForQuery.
    let mut acks: VecDeque<Option<oneshot::Sender<()>>> = VecDeque::new();
    let mut out = BytesMut::new();
    {
        let Some(h) = hub.upgrade() else { return Ok(()) };
        h.stats.connects.fetch_add(1, Ordering::Relaxed);
        // After a reconnect, everything subscribed so far (LISTEN is idempotent, so a channel
        // also waiting in `commands` does no harm).
        for channel in h.channel_names() {
            wire::build::query(&mut out, &format!("LISTEN {}", quote_ident(&channel)));
            acks.push_back(None);
        }
    }
    if let Some(command) = first {
        queue(command, &mut out, &mut acks);
    }
    loop {
        if !out.is_empty() {
            conn.write_all(&out).await?;
            out.clear();
        }
        let Some(h) = hub.upgrade() else { return Ok(()) };
        tokio::select! {
            () = h.closed.notified() => {
                out.clear();
                wire::build::terminate(&mut out);
                let _ = conn.write_all(&out).await;
                return Ok(());
            }
            command = commands.recv() => match command {
                Some(c) => queue(c, &mut out, &mut acks),
                None => return Ok(()),
            },
            read = conn.stream.read_buf(&mut conn.read_buf) => {
                if read? == 0 {
                    return Err(ServerError::Closed);
                }
                while let Some(frame) = conn.decoder.decode(&mut conn.read_buf)? {
                    match frame.tag() {
                        tag::NOTIFICATION_RESPONSE => {
                            let Some(h) = hub.upgrade() else { return Ok(()) };
                            let whole = frame.clone().into_bytes();
                            if let BackendMessage::NotificationResponse { channel, .. } =
                                BackendMessage::parse(&frame)?
                            {
                                h.fan_out(channel, &whole, &conn.peer);
                            }
                        }
                        tag::READY_FOR_QUERY => {
                            if let Some(Some(ack)) = acks.pop_front() {
                                let _ = ack.send(());
                            }
                        }
                        tag::ERROR_RESPONSE => {
                            let error = ServerError::from_error_body(frame.body(), false);
                            if crate::server::tracker::is_fatal(frame.body()) {
                                return Err(error);
                            }
                            tracing::warn!(error = %error, "LISTEN connection: a command failed");
                        }
                        _ => {}
                    }
                }
            }
        }
    }
}

fn queue(command: Command, out: &mut BytesMut, acks: &mut VecDeque<Option<oneshot::Sender<()>>>) {
    match command {
        Command::Listen(channel, ack) => {
            wire::build::query(out, &format!("LISTEN {}", quote_ident(&channel)));
            acks.push_back(Some(ack));
        }
        Command::Unlisten(channel) => {
            wire::build::query(out, &format!("UNLISTEN {}", quote_ident(&channel)));
            acks.push_back(None);
        }
    }
}
