//! The client frames of the current exchange, kept so that an exchange whose first Bind fails
//! only because the server's plan of a shared statement went stale (`cached plan must not change
//! result type`, after DDL) can be sent again on a freshly parsed statement.
//!
//! Only an exchange that starts with a Bind outside any transaction is recorded, and only up to
//! its Sync: when that Bind fails, the server has done nothing for the exchange, so sending it
//! again is what the client would have got had the statement been parsed after the DDL.

use bytes::BytesMut;

/// Exchanges larger than this are not kept (and so not retried).
const MAX_RECORDED: usize = 64 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Off,
    Recording,
    /// Recorded up to and including its Sync.
    Complete,
}

#[derive(Debug)]
pub struct Replay {
    frames: BytesMut,
    state: State,
    /// The exchange asks for a description of its results, so its client takes them in
    /// whatever shape they now have; without one, the client decodes by a shape it learnt
    /// earlier, and a retry would hand it rows it cannot read.
    describes: bool,
}

impl Default for Replay {
    fn default() -> Self {
        Self { frames: BytesMut::new(), state: State::Off, describes: false }
    }
}

impl Replay {
    /// Starts recording at an exchange's first frame.
    pub fn start(&mut self) {
        self.frames.clear();
        self.state = State::Recording;
        self.describes = false;
    }

    pub fn is_recording(&self) -> bool {
        self.state == State::Recording
    }

    /// Records a client frame of the exchange being recorded. Returns false when the
    /// exchange will not be retried: too large to keep, or complete without a Describe.
    pub fn record(&mut self, frame: &[u8]) -> bool {
        if self.state != State::Recording {
            return true;
        }
        if self.frames.len() + frame.len() > MAX_RECORDED {
            self.state = State::Off;
            self.frames.clear();
            return false;
        }
        self.frames.extend_from_slice(frame);
        match frame.first() {
            Some(&wire::frontend::tag::DESCRIBE) => self.describes = true,
            Some(&wire::frontend::tag::SYNC) if self.describes => self.state = State::Complete,
            Some(&wire::frontend::tag::SYNC) => {
                self.state = State::Off;
                self.frames.clear();
                return false;
            }
            _ => {}
        }
        true
    }

    /// The recorded exchange, if complete; recording stops.
    pub fn take(&mut self) -> Option<BytesMut> {
        let complete = self.state == State::Complete;
        self.state = State::Off;
        complete.then(|| std::mem::take(&mut self.frames))
    }
}
