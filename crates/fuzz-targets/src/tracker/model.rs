//! A reference PostgreSQL backend, small enough to read against the protocol documentation.
//!
//! It takes the client's messages one at a time, each with the outcome the fuzzer chose for it
//! (the SQL is abstract: "this Execute begins a transaction", "this Parse fails"), and appends
//! the frames PostgreSQL would send to an outbound queue. It follows the rules the tracker must
//! know without sharing its code: after an error in the extended protocol everything up to Sync
//! is ignored; Query, Sync and FunctionCall end with ReadyForQuery carrying the transaction
//! status; a failed transaction refuses everything but its end; during COPY FROM STDIN only
//! CopyData/CopyDone/CopyFail count and Flush/Sync are ignored; copy messages outside COPY are
//! ignored; unsynced extended messages form an implicit transaction only Sync (or a Query)
//! closes; FATAL ends the connection.
//!
//! Its answer to "may this server be given to another client now" is [`Server::quiescent`]:
//! nothing owed in flight, no COPY, no transaction, no open batch, not skipping.

use std::collections::VecDeque;

/// What a Query or Execute does when the server runs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Rows or a plain command.
    Ok,
    Error,
    Begin,
    /// COMMIT or ROLLBACK: the transaction ends (a failed one is rolled back).
    Commit,
    CopyIn,
    CopyOut,
    Empty,
    /// Execute with a row limit that stops short (PortalSuspended); a Query treats it as Ok.
    Suspend,
    Fatal,
}

/// One client message with the outcome chosen for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Msg {
    Query(Action),
    Execute(Action),
    FunctionCall { ok: bool },
    Parse { ok: bool },
    Bind { ok: bool },
    DescribeStatement { ok: bool },
    DescribePortal { ok: bool },
    Close { ok: bool },
    Sync,
    Flush,
    CopyData,
    CopyDone,
    CopyFail,
}

impl Msg {
    /// The tag and body the tracker is shown for this message.
    pub fn frame(self) -> (u8, &'static [u8]) {
        match self {
            Msg::Query(_) => (b'Q', b"select\0"),
            Msg::Execute(_) => (b'E', b"\0\0\0\0\0"),
            Msg::FunctionCall { .. } => (b'F', b""),
            Msg::Parse { .. } => (b'P', b""),
            Msg::Bind { .. } => (b'B', b""),
            Msg::DescribeStatement { .. } => (b'D', b"S\0"),
            Msg::DescribePortal { .. } => (b'D', b"P\0"),
            Msg::Close { .. } => (b'C', b"S\0"),
            Msg::Sync => (b'S', b""),
            Msg::Flush => (b'H', b""),
            Msg::CopyData => (b'd', b"1\n"),
            Msg::CopyDone => (b'c', b""),
            Msg::CopyFail => (b'f', b"stop\0"),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tx {
    Idle,
    InBlock,
    Failed,
}

impl Tx {
    pub fn byte(self) -> u8 {
        match self {
            Tx::Idle => b'I',
            Tx::InBlock => b'T',
            Tx::Failed => b'E',
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Protocol {
    Simple,
    Extended,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Normal,
    /// An extended-protocol error: everything but Sync is ignored.
    Skipping,
    CopyIn(Protocol),
    /// A FATAL error was sent; the connection is gone.
    Closed,
}

pub const ERROR: &[u8] = b"SERROR\0VERROR\0C42000\0Mfuzz error\0\0";
pub const FATAL: &[u8] = b"SFATAL\0VFATAL\0C57P01\0Mterminating connection\0\0";

/// A frame in flight to pgvia, and whether it answers a request (asynchronous messages do
/// not: a notice in flight is owed nothing).
#[derive(Debug, Clone)]
pub struct Out {
    pub tag: u8,
    pub body: Vec<u8>,
    pub owed: bool,
}

#[derive(Debug)]
pub struct Server {
    tx: Tx,
    mode: Mode,
    batch_open: bool,
    pub out: VecDeque<Out>,
}

impl Default for Server {
    fn default() -> Self {
        Self { tx: Tx::Idle, mode: Mode::Normal, batch_open: false, out: VecDeque::new() }
    }
}

impl Server {
    pub fn is_closed(&self) -> bool {
        self.mode == Mode::Closed
    }

    pub fn in_copy_in(&self) -> bool {
        matches!(self.mode, Mode::CopyIn(_))
    }

    /// Whether a frame that answers a request is still in flight.
    pub fn owes(&self) -> bool {
        self.out.iter().any(|o| o.owed)
    }

    /// The reference release decision.
    pub fn quiescent(&self) -> bool {
        !self.owes() && self.tx == Tx::Idle && self.mode == Mode::Normal && !self.batch_open
    }

    /// A notice, parameter change or notification, which may come at any time.
    pub fn asynchronous(&mut self, which: u8) {
        let (tag, body): (u8, &[u8]) = match which % 3 {
            0 => (b'N', b"SNOTICE\0VNOTICE\0C00000\0Mnote\0\0"),
            1 => (b'S', b"application_name\0fuzz\0"),
            _ => (b'A', b"\0\0\0\x01chan\0payload\0"),
        };
        if self.mode != Mode::Closed {
            self.out.push_back(Out { tag, body: body.to_vec(), owed: false });
        }
    }

    fn send(&mut self, tag: u8, body: &[u8]) {
        self.out.push_back(Out { tag, body: body.to_vec(), owed: true });
    }

    fn ready(&mut self) {
        let status = [self.tx.byte()];
        self.send(b'Z', &status);
    }

    /// An ERROR: a transaction block fails; in the extended protocol the server then skips
    /// to the next Sync.
    fn error(&mut self, protocol: Protocol) {
        self.send(b'E', ERROR);
        if self.tx == Tx::InBlock {
            self.tx = Tx::Failed;
        }
        if protocol == Protocol::Extended {
            self.mode = Mode::Skipping;
        }
    }

    /// Handles one message as it arrives.
    pub fn receive(&mut self, msg: Msg) {
        match self.mode {
            Mode::Closed => {}
            Mode::CopyIn(protocol) => self.copy_in(protocol, msg),
            Mode::Skipping => {
                if msg == Msg::Sync {
                    self.mode = Mode::Normal;
                    self.sync();
                }
            }
            Mode::Normal => self.normal(msg),
        }
    }

    fn copy_in(&mut self, protocol: Protocol, msg: Msg) {
        match msg {
            Msg::CopyData | Msg::Sync | Msg::Flush => {}
            Msg::CopyDone => {
                self.send(b'C', b"COPY 1\0");
                self.mode = Mode::Normal;
                if protocol == Protocol::Simple {
                    self.ready();
                }
            }
            Msg::CopyFail => {
                self.mode = Mode::Normal;
                self.error(protocol);
                if protocol == Protocol::Simple {
                    self.ready();
                }
            }
            other => unreachable!("the script sends nothing but copy messages during COPY IN: {other:?}"),
        }
    }

    fn sync(&mut self) {
        // The implicit transaction ends; an explicit block stays open (or failed).
        self.batch_open = false;
        self.ready();
    }

    fn normal(&mut self, msg: Msg) {
        match msg {
            Msg::Query(action) => {
                self.batch_open = false;
                if self.run(action, Protocol::Simple) {
                    self.ready();
                }
            }
            Msg::FunctionCall { ok } => {
                self.batch_open = false;
                if ok && self.tx != Tx::Failed {
                    self.send(b'V', b"\xff\xff\xff\xff");
                } else {
                    self.send(b'E', ERROR);
                    if self.tx == Tx::InBlock {
                        self.tx = Tx::Failed;
                    }
                }
                self.ready();
            }
            Msg::Execute(action) => {
                self.batch_open = true;
                self.run(action, Protocol::Extended);
            }
            Msg::Parse { ok } => self.step(ok, b'1', &[]),
            Msg::Bind { ok } => self.step(ok, b'2', &[]),
            Msg::DescribeStatement { ok } => self.step(ok, b't', b"T"),
            Msg::DescribePortal { ok } => self.step(ok, b'n', &[]),
            Msg::Close { ok } => self.step(ok, b'3', &[]),
            Msg::Sync => self.sync(),
            // Flush only pushes output; copy messages outside COPY are ignored.
            Msg::Flush | Msg::CopyData | Msg::CopyDone | Msg::CopyFail => {}
        }
    }

    /// A Parse, Bind, Describe or Close: its reply (and, for a statement Describe, the row
    /// description after the parameter description), or an error.
    fn step(&mut self, ok: bool, reply: u8, then: &[u8]) {
        self.batch_open = true;
        if !ok {
            self.error(Protocol::Extended);
            return;
        }
        self.send(reply, &[]);
        for &t in then {
            self.send(t, &[]);
        }
    }

    /// Runs a statement; false when the connection ended (no ReadyForQuery follows) or
    /// COPY IN began (it follows the copy).
    fn run(&mut self, action: Action, protocol: Protocol) -> bool {
        // A failed transaction refuses everything but its end.
        let action = match (self.tx, action) {
            (Tx::Failed, Action::Commit | Action::Fatal) => action,
            (Tx::Failed, _) => Action::Error,
            _ => action,
        };
        match action {
            Action::Ok | Action::Suspend if protocol == Protocol::Simple => {
                self.send(b'T', &[]);
                self.send(b'D', &[]);
                self.send(b'C', b"SELECT 1\0");
            }
            Action::Ok => {
                self.send(b'D', &[]);
                self.send(b'C', b"SELECT 1\0");
            }
            Action::Suspend => {
                self.send(b'D', &[]);
                self.send(b's', &[]);
            }
            Action::Empty => self.send(b'I', &[]),
            Action::Error => self.error(protocol),
            Action::Begin => {
                self.tx = Tx::InBlock;
                self.send(b'C', b"BEGIN\0");
            }
            Action::Commit => {
                self.tx = Tx::Idle;
                self.send(b'C', b"COMMIT\0");
            }
            Action::CopyOut => {
                self.send(b'H', b"\0\0\0");
                self.send(b'd', b"1\n");
                self.send(b'c', &[]);
                self.send(b'C', b"COPY 1\0");
            }
            Action::CopyIn => {
                self.send(b'G', b"\0\0\0");
                self.mode = Mode::CopyIn(protocol);
                return false;
            }
            Action::Fatal => {
                self.send(b'E', FATAL);
                self.mode = Mode::Closed;
                return false;
            }
        }
        true
    }
}
