//! LISTEN/NOTIFY without pinning: one listening server connection per (database, user) pool
//! holds the union of its clients' channels, and fans notifications out to them.
//!
//! A client's `LISTEN`/`UNLISTEN` runs on its own server as any statement does, so its reply,
//! its place inside a transaction and PostgreSQL's rule that it takes effect at commit are
//! exactly PostgreSQL's. When the transaction is over, the session moves what the server now
//! listens to into this registry (the hub `LISTEN`s first, then the client's server runs
//! `UNLISTEN *`), so servers in the pool never listen and nothing pins the client. See
//! `session::client::Session::move_listens`.
//!
//! The registry (channel → subscribed sessions) is locked only on LISTEN, UNLISTEN, a
//! session's exit and a notification's fan-out; a notification frame is passed on as the
//! same bytes PostgreSQL sent (the notifying backend's pid included) to each subscriber's
//! bounded inbox, which the session drains at message boundaries. The pid is the one the
//! sending client was told when pgvia knows which client that is (`senders.rs`).

mod listener;
mod senders;

pub use senders::{pid_of, with_pid, Senders};

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};

use crate::pool::{Pool, PoolKey};
use crate::server::ServerAddress;

/// Notifications waiting for one client before more are dropped (and counted): a client that
/// never reads must not grow pgvia's memory without bound.
pub const INBOX_CAPACITY: usize = 4096;

/// Counters for logs, the admin console and metrics.
#[derive(Debug, Default)]
pub struct HubStats {
    /// Notifications received on the listening connection.
    pub received: AtomicU64,
    /// Notification frames queued to clients.
    pub delivered: AtomicU64,
    /// Notifications dropped because a client's inbox was full.
    pub dropped: AtomicU64,
    /// Times the listening connection was (re)opened.
    pub connects: AtomicU64,
}

type Subscribers = Vec<(u64, mpsc::Sender<Bytes>)>;

/// What the listening connection is asked to do.
enum Command {
    /// `LISTEN`; the sender is told once the server has confirmed it.
    Listen(String, oneshot::Sender<()>),
    Unlisten(String),
}

/// The registry and listening connection of one pool.
pub struct Hub {
    pub name: String,
    addr: ServerAddress,
    connect_timeout: Duration,
    max_frame: usize,
    channels: Mutex<HashMap<String, Subscribers>>,
    commands: mpsc::UnboundedSender<Command>,
    next_id: AtomicU64,
    /// Shutdown: the listening connection closes.
    closed: tokio::sync::Notify,
    pub stats: HubStats,
    senders: Arc<Senders>,
}

impl Hub {
    fn new(pool: &Pool, max_frame: usize, senders: Arc<Senders>) -> Arc<Hub> {
        let (commands, rx) = mpsc::unbounded_channel();
        let hub = Arc::new(Hub {
            name: pool.name.clone(),
            addr: pool.server_address().clone(),
            connect_timeout: pool.settings.connect_timeout,
            max_frame,
            channels: Mutex::new(HashMap::new()),
            commands,
            next_id: AtomicU64::new(1),
            closed: tokio::sync::Notify::new(),
            stats: HubStats::default(),
            senders,
        });
        listener::spawn(Arc::downgrade(&hub), rx);
        hub
    }

    fn registry(&self) -> std::sync::MutexGuard<'_, HashMap<String, Subscribers>> {
        self.channels.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// How many channels have at least one subscriber.
    pub fn channel_count(&self) -> usize {
        self.registry().len()
    }

    /// Channels someone listens to, for re-issuing `LISTEN` on a new listening connection.
    fn channel_names(&self) -> Vec<String> {
        self.registry().keys().cloned().collect()
    }

    /// Passes one NotificationResponse frame, received from `server`, to every subscriber of
    /// its channel.
    fn fan_out(&self, channel: &str, frame: &Bytes, server: &crate::net::ServerEndpoint) {
        self.stats.received.fetch_add(1, Ordering::Relaxed);
        let frame = &self.senders.attributed(server, frame);
        let registry = self.registry();
        let Some(subscribers) = registry.get(channel) else { return };
        for (_, tx) in subscribers {
            match tx.try_send(frame.clone()) {
                Ok(()) => self.stats.delivered.fetch_add(1, Ordering::Relaxed),
                Err(mpsc::error::TrySendError::Full(_)) => self.stats.dropped.fetch_add(1, Ordering::Relaxed),
                // The session is ending; its unsubscribe is on the way.
                Err(mpsc::error::TrySendError::Closed(_)) => 0,
            };
        }
    }
}

/// One hub per pool, made on a pool's first listener.
#[derive(Default)]
pub struct Hubs {
    map: Mutex<HashMap<PoolKey, Arc<Hub>>>,
    /// Who sent what the hubs' servers notify, shared by every hub and session.
    pub senders: Arc<Senders>,
}

impl Hubs {
    pub fn hub_for(&self, pool: &Pool, max_frame: usize) -> Arc<Hub> {
        let mut map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        self.senders.listened_to();
        let senders = &self.senders;
        map.entry(pool.key.clone()).or_insert_with(|| Hub::new(pool, max_frame, senders.clone())).clone()
    }

    pub fn all(&self) -> Vec<Arc<Hub>> {
        self.map.lock().unwrap_or_else(PoisonError::into_inner).values().cloned().collect()
    }

    /// Shutdown: every listening connection closes (a permit is stored, so a connection
    /// being opened right now closes as soon as it is up).
    pub fn close_all(&self) {
        for hub in self.all() {
            hub.closed.notify_one();
        }
    }
}

/// A session's subscriptions and the inbox its notifications arrive in. Dropping it
/// unsubscribes from every channel.
pub struct Inbox {
    hub: Arc<Hub>,
    id: u64,
    tx: mpsc::Sender<Bytes>,
    rx: mpsc::Receiver<Bytes>,
    /// The channels this session listens to (few; a Vec beats a set here).
    channels: Vec<String>,
}

impl Inbox {
    pub fn new(hub: Arc<Hub>) -> Inbox {
        let (tx, rx) = mpsc::channel(INBOX_CAPACITY);
        let id = hub.next_id.fetch_add(1, Ordering::Relaxed);
        Inbox { hub, id, tx, rx, channels: Vec::new() }
    }

    pub fn channels(&self) -> &[String] {
        &self.channels
    }

    /// Subscribes to `channel`. When this is the channel's first subscriber, waits (up to
    /// `timeout`) until the listening connection has run `LISTEN`, so nothing committed from
    /// now on is missed. False if that confirmation did not come in time.
    pub async fn listen(&mut self, channel: &str, timeout: Duration) -> bool {
        if self.channels.iter().any(|c| c == channel) {
            return true;
        }
        self.channels.push(channel.to_owned());
        let ack = {
            let mut registry = self.hub.registry();
            let subscribers = registry.entry(channel.to_owned()).or_default();
            subscribers.push((self.id, self.tx.clone()));
            if subscribers.len() > 1 {
                None
            } else {
                let (ack, done) = oneshot::channel();
                let _ = self.hub.commands.send(Command::Listen(channel.to_owned(), ack));
                Some(done)
            }
        };
        match ack {
            None => true,
            Some(done) => matches!(tokio::time::timeout(timeout, done).await, Ok(Ok(()))),
        }
    }

    /// Unsubscribes from `channel`, or from every channel when `None` (`UNLISTEN *`).
    pub fn unlisten(&mut self, channel: Option<&str>) {
        let gone: Vec<String> = match channel {
            Some(c) => {
                let Some(i) = self.channels.iter().position(|x| x == c) else { return };
                vec![self.channels.swap_remove(i)]
            }
            None => std::mem::take(&mut self.channels),
        };
        let mut registry = self.hub.registry();
        for channel in gone {
            let Some(subscribers) = registry.get_mut(&channel) else { continue };
            subscribers.retain(|(id, _)| *id != self.id);
            if subscribers.is_empty() {
                registry.remove(&channel);
                let _ = self.hub.commands.send(Command::Unlisten(channel));
            }
        }
    }

    /// The next notification frame. Never completes while nothing arrives.
    pub async fn next(&mut self) -> Bytes {
        match self.rx.recv().await {
            Some(frame) => frame,
            // Cannot happen while `self.tx` lives; wait forever rather than spin.
            None => std::future::pending().await,
        }
    }

    /// Appends the notifications already waiting to `out`, up to about `limit` bytes in it, so
    /// a burst costs one wake-up rather than one per notification.
    pub fn drain_into(&mut self, out: &mut bytes::BytesMut, limit: usize) {
        while out.len() < limit {
            match self.rx.try_recv() {
                Ok(frame) => out.extend_from_slice(&frame),
                Err(_) => return,
            }
        }
    }
}

impl Drop for Inbox {
    fn drop(&mut self) {
        self.unlisten(None);
    }
}

/// `name` as a quoted SQL identifier.
pub fn quote_ident(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 2);
    out.push('"');
    for c in name.chars() {
        if c == '"' {
            out.push('"');
        }
        out.push(c);
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn identifiers_are_quoted() {
        assert_eq!(super::quote_ident("Jobs"), "\"Jobs\"");
        assert_eq!(super::quote_ident("a\"b"), "\"a\"\"b\"");
    }
}
