//! The reply tracker against a reference model of the protocol (differential).
//!
//! Input: a script, one byte per step: the client sends a message (with the outcome the
//! server will give it), or the server's next frames reach pgvia, or the server sends a
//! notice. The reference backend ([`model::Server`]) turns what the client sends into what
//! PostgreSQL would answer; `ReplyTracker` sees both directions as the relay shows them, the
//! server's frames arriving whenever the script says. A client that starts COPY FROM STDIN
//! sends its copy data and CopyDone/CopyFail next (pipelined, as postgres.js does, or not),
//! as every driver does.
//!
//! The tracker must agree with the model after every step on the release decision
//! (`is_quiescent`), and on every frame: never out of step (`Desync`), every frame forwarded,
//! ReadyForQuery reporting its status and whether anything is still owed, FATAL seen as
//! such, and the COPY state once nothing is in flight.

pub mod model;

use model::{Action, Msg, Server};
use pgvia::server::tracker::Fate;
use pgvia::server::{CopyState, ReplyTracker, ServerEvent};
use wire::backend::TransactionStatus;

const ACTIONS: [Action; 9] = [
    Action::Ok,
    Action::Error,
    Action::Begin,
    Action::Commit,
    Action::CopyIn,
    Action::CopyOut,
    Action::Empty,
    Action::Suspend,
    Action::Fatal,
];

enum Step {
    Send(Msg),
    Deliver(usize),
    Async(u8),
}

/// What one script byte means; `copy_tail` when the client owes the end of a COPY IN.
fn step(b: u8, copy_tail: bool) -> Step {
    let kind = b & 0x1f;
    let arg = b >> 5;
    let ok = arg != 0;
    if copy_tail && (kind <= 14 || kind == 30) {
        return Step::Send(match kind % 5 {
            0 | 1 => Msg::CopyData,
            2 => Msg::CopyDone,
            3 => Msg::CopyFail,
            _ if arg.is_multiple_of(2) => Msg::Sync,
            _ => Msg::Flush,
        });
    }
    let action = |base: u8| ACTIONS[usize::from(arg + 8 * (kind - base)) % ACTIONS.len()];
    Step::Send(match kind {
        0..=2 => Msg::Query(action(0)),
        3..=5 => Msg::Execute(action(3)),
        6 => Msg::Parse { ok },
        7 => Msg::Bind { ok },
        8 => Msg::DescribeStatement { ok },
        9 => Msg::DescribePortal { ok },
        10 => Msg::Close { ok },
        11 | 12 => Msg::Sync,
        13 => Msg::Flush,
        14 => Msg::FunctionCall { ok },
        28 | 29 => return Step::Deliver(usize::MAX),
        30 => return Step::Async(arg),
        _ => return Step::Deliver(usize::from(arg) + 1),
    })
}

pub fn tracker(data: &[u8]) {
    let mut server = Server::default();
    let mut tracker = ReplyTracker::default();
    let mut copy_tail = false;
    let mut ended = false;
    let steps = data.iter().map(Some).chain(std::iter::once(None));
    for b in steps {
        let step = match b {
            Some(&b) => step(b, copy_tail),
            None => Step::Deliver(usize::MAX),
        };
        match step {
            Step::Send(msg) => {
                let (tag, body) = msg.frame();
                tracker.client_sent(tag, body);
                server.receive(msg);
                copy_tail = match msg {
                    Msg::Query(Action::CopyIn) | Msg::Execute(Action::CopyIn) => true,
                    Msg::CopyDone | Msg::CopyFail => false,
                    _ => copy_tail,
                };
            }
            Step::Async(which) => server.asynchronous(which),
            Step::Deliver(n) => {
                for _ in 0..n {
                    let Some(out) = server.out.pop_front() else { break };
                    let (event, fate) = tracker.server_sent(out.tag, &out.body);
                    assert_eq!(fate, Fate::Forward, "a frame of the client's own request was not forwarded");
                    match out.tag {
                        b'E' if out.body == model::FATAL => {
                            assert_eq!(event, ServerEvent::Fatal);
                            ended = true;
                            break;
                        }
                        b'Z' => {
                            let status = TransactionStatus::from_byte(out.body[0]);
                            let owed = server.owes() || server.in_copy_in();
                            match event {
                                ServerEvent::Ready { status: s, quiescent } => {
                                    assert_eq!(Some(s), status);
                                    assert_eq!(
                                        quiescent, !owed,
                                        "ReadyForQuery: tracker says quiescent={quiescent}"
                                    );
                                }
                                other => panic!("ReadyForQuery gave {other:?}"),
                            }
                        }
                        _ => assert_eq!(event, ServerEvent::Other, "frame {:?}", char::from(out.tag)),
                    }
                }
            }
        }
        if ended || server.is_closed() && server.out.is_empty() {
            return;
        }
        assert_eq!(
            tracker.is_quiescent(),
            server.quiescent(),
            "release decision differs: tracker {tracker:?}, model {server:?}"
        );
        if !server.owes() {
            let copy = if server.in_copy_in() { CopyState::In } else { CopyState::None };
            assert_eq!(tracker.copy_state(), copy, "COPY state with nothing in flight");
        }
    }
}
