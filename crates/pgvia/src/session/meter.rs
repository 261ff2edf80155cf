//! One session's meter: what its relay adds to its own client's counters (bytes, queries,
//! transactions, errors) and the slow-query log.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::clients::ClientInfo;
use crate::stats::{error_class_index, Counters};

/// Counts one session's traffic in the relay: bytes per read, queries and transactions per
/// ReadyForQuery. Writes only the session's own client entry.
#[derive(Debug, Default)]
pub struct Meter {
    client: Option<Arc<ClientInfo>>,
    query_start: Option<Instant>,
    xact_start: Option<Instant>,
    /// `slow_query_threshold`, when the slow-query log is on.
    slow: Option<Duration>,
    /// The start of the current query's text, kept only while the slow-query log is on (a
    /// reused buffer: no allocation per query once it has grown).
    text: String,
}

impl Meter {
    pub fn new(client: Arc<ClientInfo>, slow_query_threshold: Duration) -> Self {
        let slow = (!slow_query_threshold.is_zero()).then_some(slow_query_threshold);
        Self { client: Some(client), query_start: None, xact_start: None, slow, text: String::new() }
    }

    fn counters(&self) -> Option<&Counters> {
        self.client.as_deref().map(|c| &c.counters)
    }

    /// Whether no query or transaction is being timed.
    pub fn is_idle(&self) -> bool {
        self.query_start.is_none() && self.xact_start.is_none()
    }

    /// `n` bytes arrived from the client.
    #[inline]
    pub fn client_bytes(&mut self, n: usize) {
        if let Some(c) = self.counters() {
            c.received.fetch_add(n as u64, Ordering::Relaxed);
        }
    }

    /// `n` bytes arrived from the server.
    #[inline]
    pub fn server_bytes(&mut self, n: usize) {
        if let Some(c) = self.counters() {
            c.sent.fetch_add(n as u64, Ordering::Relaxed);
        }
    }

    /// Client messages (starting at the front of `frames`) are about to go to the server: a
    /// query (and maybe a transaction) starts unless one is already running.
    #[inline]
    pub fn request(&mut self, frames: &[u8]) {
        if self.client.is_none() || self.query_start.is_some() {
            return;
        }
        let now = Instant::now();
        self.query_start = Some(now);
        self.xact_start.get_or_insert(now);
        if let Some(c) = &self.client {
            c.set_request(now);
        }
        if self.slow.is_some() {
            self.remember_text(frames);
        }
    }

    /// Keeps the first bytes of the query text of the first message in `frames`.
    fn remember_text(&mut self, frames: &[u8]) {
        self.text.clear();
        // The frames are not yet checked here: a length below 4 (the length field's own
        // size) or beyond what arrived leaves no text to keep.
        let Some(declared) = frames.get(1..5).map(|l| u32::from_be_bytes([l[0], l[1], l[2], l[3]]) as usize)
        else {
            return;
        };
        if declared < 4 {
            return;
        }
        let Some(body) = frames.get(5..declared + 1) else { return };
        let sql = match wire::frontend::FrontendMessage::parse_body(frames[0], body) {
            Ok(wire::frontend::FrontendMessage::Query { sql }) => sql,
            Ok(wire::frontend::FrontendMessage::Parse(p)) => p.query,
            _ => {
                self.text.push_str("(extended protocol: Bind/Execute of a prepared statement)");
                return;
            }
        };
        // Room for the scrubbed form, which is never longer than the text plus "...". Text in
        // a client encoding other than UTF-8 is logged as far as it reads.
        let sql = String::from_utf8_lossy(sql);
        let mut cut = sql.len().min(crate::logging::SLOW_QUERY_TEXT * 4);
        while !sql.is_char_boundary(cut) {
            cut -= 1;
        }
        self.text.push_str(&sql[..cut]);
    }

    /// The server sent `readies` ReadyForQuery messages, the last with transaction status
    /// idle when `idle`; `errors` holds SQLSTATEs of ErrorResponses seen.
    pub fn ready(&mut self, readies: u32, idle: bool) {
        let Some(c) = self.client.as_deref() else { return };
        if readies == 0 {
            return;
        }
        let now = Instant::now();
        c.counters.queries.fetch_add(u64::from(readies), Ordering::Relaxed);
        if let Some(start) = self.query_start.take() {
            let took = now.duration_since(start);
            c.counters.query_us.fetch_add(took.as_micros() as u64, Ordering::Relaxed);
            if self.slow.is_some_and(|t| took >= t) {
                tracing::warn!(
                    target: "pgvia::slow_query",
                    client = c.id,
                    user = %c.who.user(),
                    database = %c.who.database(),
                    duration_ms = took.as_millis() as u64,
                    query = %crate::logging::scrub_sql(&self.text, crate::logging::SLOW_QUERY_TEXT),
                    "slow query"
                );
            }
        }
        if idle {
            c.counters.xacts.fetch_add(1, Ordering::Relaxed);
            if let Some(start) = self.xact_start.take() {
                c.counters.xact_us.fetch_add(now.duration_since(start).as_micros() as u64, Ordering::Relaxed);
            }
        }
    }

    /// The server sent an ErrorResponse with this SQLSTATE.
    pub fn error(&mut self, code: &[u8]) {
        if let Some(c) = self.counters() {
            c.errors.add(error_class_index(code), 1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slow_query_text_of_malformed_frames() {
        let mut meter = Meter { slow: Some(Duration::from_millis(1)), ..Meter::default() };
        // Declared lengths below 4 (0..=3), one past the bytes present, and a header cut short.
        for declared in 0u32..4 {
            let mut frame = vec![b'Q'];
            frame.extend_from_slice(&declared.to_be_bytes());
            meter.remember_text(&frame);
            assert!(meter.text.is_empty());
        }
        meter.remember_text(&[b'Q', 0, 0, 0, 9, b'x']);
        assert!(meter.text.is_empty());
        meter.remember_text(&[b'Q', 0, 0]);
        assert!(meter.text.is_empty());
        meter.remember_text(b"Q\0\0\0\x0dSELECT 1\0");
        assert_eq!(meter.text, "SELECT 1");
    }
}
