//! Which client a notification came from. PostgreSQL puts the notifying backend's pid in
//! every NotificationResponse, but a transaction-mode client was told a pid of pgvia's own at
//! login, and a client that checks whether a notification is its own (drivers' tests do)
//! compares with that one. So a session about to send something that may notify records
//! which pid its client was told for its server's backend, and the hub shows that pid to the
//! listeners instead.
//!
//! A record lasts until the server is taken by a client again: notifications that server
//! sends from then on are another transaction's. One that reaches the hub only after that
//! (or that a trigger sent, unseen) carries the backend's own pid, as before.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};

use bytes::{BufMut, Bytes, BytesMut};

use crate::net::ServerEndpoint;

/// A backend: the server it runs on and its pid there.
type Backend = (ServerEndpoint, u32);

#[derive(Default)]
pub struct Senders {
    /// A hub exists: until someone listens through pgvia, nothing is recorded.
    listened: AtomicBool,
    /// How many records `told` holds, so taking a server costs no lock when it is none.
    len: AtomicUsize,
    told: Mutex<HashMap<Backend, u32>>,
}

impl Senders {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<Backend, u32>> {
        self.told.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(super) fn listened_to(&self) {
        self.listened.store(true, Ordering::Relaxed);
    }

    /// Whether sessions should record what may notify: someone listens through pgvia.
    pub fn wanted(&self) -> bool {
        self.listened.load(Ordering::Relaxed)
    }

    /// The client told `told` is about to send what may notify through backend `pid` of
    /// `server`.
    pub fn record(&self, server: &ServerEndpoint, pid: u32, told: u32) {
        if !self.listened.load(Ordering::Relaxed) || pid == told {
            return;
        }
        let mut map = self.map();
        if map.insert((server.clone(), pid), told).is_none() {
            self.len.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A client takes backend `pid` of `server`: what it sends is no longer the last one's.
    pub fn server_taken(&self, server: &ServerEndpoint, pid: u32) {
        if self.len.load(Ordering::Relaxed) == 0 {
            return;
        }
        let mut map = self.map();
        if map.remove(&(server.clone(), pid)).is_some() {
            self.len.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// `frame`, a whole NotificationResponse from `server`, with the pid its sender's client
    /// was told, when pgvia knows it.
    pub(super) fn attributed(&self, server: &ServerEndpoint, frame: &Bytes) -> Bytes {
        if self.len.load(Ordering::Relaxed) == 0 {
            return frame.clone();
        }
        let Some(pid) = pid_of(frame) else { return frame.clone() };
        match self.map().get(&(server.clone(), pid)).copied() {
            Some(told) => with_pid(frame, told),
            None => frame.clone(),
        }
    }
}

/// The pid a whole NotificationResponse `frame` carries.
pub fn pid_of(frame: &[u8]) -> Option<u32> {
    frame.get(5..9).and_then(|b| <[u8; 4]>::try_from(b).ok()).map(u32::from_be_bytes)
}

/// A whole NotificationResponse `frame` with `pid` in place of the one it carries.
pub fn with_pid(frame: &[u8], pid: u32) -> Bytes {
    let mut out = BytesMut::with_capacity(frame.len());
    out.put_slice(&frame[..5.min(frame.len())]);
    out.put_u32(pid);
    out.put_slice(frame.get(9..).unwrap_or_default());
    out.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn notification(pid: u32) -> Bytes {
        let mut f = BytesMut::new();
        f.put_u8(b'A');
        f.put_u32(4 + 4 + 3 + 2);
        f.put_u32(pid);
        f.put_slice(b"ch\0x\0");
        f.freeze()
    }

    #[test]
    fn the_senders_told_pid_replaces_the_backends_until_the_server_is_taken_again() {
        let server = ServerEndpoint::Tcp("127.0.0.1:5432".parse().expect("address"));
        let senders = Senders::default();
        senders.record(&server, 100, 7);
        assert_eq!(senders.attributed(&server, &notification(100)), notification(100), "nobody listens yet");
        senders.listened_to();
        senders.record(&server, 100, 7);
        assert_eq!(senders.attributed(&server, &notification(100)), notification(7));
        assert_eq!(senders.attributed(&server, &notification(101)), notification(101));
        senders.server_taken(&server, 100);
        assert_eq!(senders.attributed(&server, &notification(100)), notification(100));
    }
}
