use bytes::{Bytes, BytesMut};

use super::*;

fn frame(t: u8, body: &[u8]) -> Bytes {
    let mut b = BytesMut::new();
    wire::build::frame(&mut b, t, |b| b.extend_from_slice(body));
    b.freeze()
}

fn complete(text: &str) -> Bytes {
    let mut b = BytesMut::new();
    wire::build::command_complete(&mut b, text);
    b.freeze()
}

fn ready(status: u8) -> Bytes {
    frame(b'Z', &[status])
}

fn row(v: &str) -> Bytes {
    let mut body = vec![0, 1];
    body.extend_from_slice(&(v.len() as i32).to_be_bytes());
    body.extend_from_slice(v.as_bytes());
    frame(b'D', &body)
}

/// The tags of the frames in `out`, in order.
fn tags(out: &[u8]) -> String {
    let mut s = String::new();
    let mut i = 0;
    while i + 5 <= out.len() {
        s.push(out[i] as char);
        let len = u32::from_be_bytes([out[i + 1], out[i + 2], out[i + 3], out[i + 4]]) as usize;
        i += 1 + len;
    }
    s
}

#[test]
fn rows_of_every_lane_flow_and_counts_are_summed() {
    let mut f = FanOut::new(2, Combine::Concat);
    let mut out = BytesMut::new();
    let desc = frame(b'T', b"\0\0");
    f.push(0, desc.clone(), &mut out).unwrap();
    assert!(out.is_empty(), "a barrier waits for every lane");
    f.push(1, desc, &mut out).unwrap();
    assert_eq!(tags(&out), "T");
    f.push(1, row("a"), &mut out).unwrap();
    f.push(0, row("b"), &mut out).unwrap();
    f.push(0, complete("SELECT 1"), &mut out).unwrap();
    f.push(1, row("c"), &mut out).unwrap();
    f.push(1, complete("SELECT 2"), &mut out).unwrap();
    f.push(0, ready(b'I'), &mut out).unwrap();
    assert!(f.finished().is_none());
    f.push(1, ready(b'I'), &mut out).unwrap();
    assert_eq!(tags(&out), "TDDDC");
    assert!(out.ends_with(&complete("SELECT 3")));
    assert_eq!(f.finished(), Some(Finished { failed: false, in_transaction: false }));
}

#[test]
fn rows_after_a_lanes_barrier_wait_for_the_others() {
    // Two statements in one query: lane 0 is already on the second one's rows.
    let mut f = FanOut::new(2, Combine::Concat);
    let mut out = BytesMut::new();
    for t in [frame(b'T', b"\0\0"), complete("SELECT 0"), frame(b'T', b"\0\0"), row("x")] {
        f.push(0, t, &mut out).unwrap();
    }
    assert_eq!(tags(&out), "");
    f.push(1, frame(b'T', b"\0\0"), &mut out).unwrap();
    assert_eq!(tags(&out), "T");
    f.push(1, complete("SELECT 0"), &mut out).unwrap();
    assert_eq!(tags(&out), "TC");
    f.push(1, frame(b'T', b"\0\0"), &mut out).unwrap();
    assert_eq!(tags(&out), "TCTD", "the held row follows its RowDescription");
}

#[test]
fn the_first_error_wins_and_the_rest_is_dropped() {
    let mut f = FanOut::new(3, Combine::Concat);
    let mut out = BytesMut::new();
    let err = frame(b'E', b"SERROR\0C23505\0Mdup\0\0");
    f.push(1, err.clone(), &mut out).unwrap();
    f.push(0, complete("INSERT 0 1"), &mut out).unwrap();
    f.push(2, complete("INSERT 0 1"), &mut out).unwrap();
    assert_eq!(tags(&out), "E");
    for lane in 0..3 {
        f.push(lane, ready(b'T'), &mut out).unwrap();
    }
    assert_eq!(tags(&out), "E");
    assert_eq!(f.finished(), Some(Finished { failed: true, in_transaction: true }));
}

/// An error past every barrier is the answer at once, whatever the other lanes are still
/// sending (an ORDER BY merge may never read them again); one behind a barrier the other
/// lanes have not reached waits for it, so the client sees that barrier first.
#[test]
fn an_error_past_every_barrier_ends_the_exchange_at_once() {
    let mut f = FanOut::new(2, Combine::Concat);
    let mut out = BytesMut::new();
    let err = frame(b'E', b"SERROR\0C22003\0Mout of range\0\0");
    let parsed = frame(b'1', b"");
    f.push(0, parsed.clone(), &mut out).unwrap();
    f.push(0, err.clone(), &mut out).unwrap();
    assert!(out.is_empty(), "the error waits behind lane 1's ParseComplete");
    assert!(!f.failed());
    f.push(1, parsed, &mut out).unwrap();
    assert_eq!(tags(&out), "1E", "the barrier, then the error, without lane 1's rows");
    assert!(f.failed());
    assert!(f.owes(0) && f.owes(1));
    f.push(1, row("late"), &mut out).unwrap();
    f.push(0, ready(b'I'), &mut out).unwrap();
    assert!(!f.owes(0));
    f.push(1, complete("SELECT 1"), &mut out).unwrap();
    f.push(1, ready(b'I'), &mut out).unwrap();
    assert_eq!(tags(&out), "1E");
    assert_eq!(f.finished(), Some(Finished { failed: true, in_transaction: false }));
}

#[test]
fn injected_replies_are_dropped() {
    let mut f = FanOut::new(1, Combine::Concat);
    let mut out = BytesMut::new();
    f.lane_mut(0).skip_replies = 1;
    f.lane_mut(0).parse_drops.extend([true, false]);
    for t in [complete("BEGIN"), ready(b'T'), frame(b'1', b""), frame(b'1', b""), frame(b'2', b"")] {
        f.push(0, t, &mut out).unwrap();
    }
    assert_eq!(tags(&out), "12");
}

#[test]
fn mismatched_replies_are_reported() {
    let mut f = FanOut::new(2, Combine::Concat);
    let mut out = BytesMut::new();
    f.push(0, frame(b'n', b""), &mut out).unwrap();
    assert!(f.push(1, frame(b'T', b"\0\0"), &mut out).is_err());
}

#[test]
fn tags_without_counts_come_from_the_first_lane() {
    let mut out = BytesMut::new();
    merged_command_complete(&[complete("CREATE TABLE"), complete("CREATE TABLE")], &mut out);
    assert_eq!(&out[..], &complete("CREATE TABLE")[..]);
    out.clear();
    merged_command_complete(&[complete("UPDATE 2"), complete("UPDATE 5")], &mut out);
    assert_eq!(&out[..], &complete("UPDATE 7")[..]);
}

#[test]
fn one_lane_passes_replies_as_they_come_and_drops_pgvia_s_own() {
    let mut f = FanOut::new(1, Combine::Concat);
    let mut out = BytesMut::new();
    // A statement the server lacked was parsed and one evicted closed (both pgvia's), then
    // the client's own Close, Bind and rows.
    f.lane_mut(0).parse_drops.extend([true]);
    f.lane_mut(0).close_drops.extend([true, false]);
    for t in [
        frame(b'3', b""),
        frame(b'1', b""),
        frame(b'3', b""),
        frame(b'2', b""),
        row("a"),
        complete("SELECT 1"),
    ] {
        f.push(0, t, &mut out).unwrap();
    }
    assert_eq!(tags(&out), "32DC");
    assert!(out.ends_with(&complete("SELECT 1")), "the count as the server wrote it");
    assert!(f.finished().is_none());
    f.push(0, ready(b'T'), &mut out).unwrap();
    assert_eq!(tags(&out), "32DC", "the ReadyForQuery is the session's to write");
    assert_eq!(f.finished(), Some(Finished { failed: false, in_transaction: true }));
}

#[test]
fn one_lane_error_ends_the_exchange_up_to_ready() {
    let mut f = FanOut::new(1, Combine::Concat);
    let mut out = BytesMut::new();
    f.lane_mut(0).parse_drops.extend([true, true]);
    let error = frame(b'E', b"SERROR\0C42601\0Mbad\0\0");
    for t in [error.clone(), frame(b'2', b""), row("x"), ready(b'E')] {
        f.push(0, t, &mut out).unwrap();
    }
    assert_eq!(tags(&out), "E");
    assert_eq!(f.finished(), Some(Finished { failed: true, in_transaction: true }));
    assert!(f.lanes()[0].parse_drops.is_empty());
}

#[test]
fn the_client_parses_accepted_are_those_every_lane_accepted() {
    // Per lane: the client's Parse, pgvia's Parse (dropped), then the client's second Parse.
    let mut f = FanOut::new(2, Combine::Concat);
    for i in 0..2 {
        f.lane_mut(i).parse_drops.extend([false, true, false]);
    }
    let mut out = BytesMut::new();
    let parsed = frame(b'1', b"");
    let error = frame(b'E', b"SERROR\0C42601\0Msyntax error\0\0");
    for _ in 0..3 {
        f.push(0, parsed.clone(), &mut out).unwrap();
    }
    // Lane 1 refuses the client's second Parse.
    f.push(1, parsed.clone(), &mut out).unwrap();
    f.push(1, parsed, &mut out).unwrap();
    f.push(1, error, &mut out).unwrap();
    f.push(0, ready(b'I'), &mut out).unwrap();
    f.push(1, ready(b'I'), &mut out).unwrap();
    assert_eq!(tags(&out), "1E");
    assert_eq!(f.client_parses(), 1);
    assert!(f.finished().is_some_and(|d| d.failed));
}

/// A write to an omnisharded table: one copy's rows and tag reach the client, whatever order
/// each copy returned its rows in; copies whose rows or counts differ fail it with 0A000.
#[test]
fn replicated_writes_answer_once_and_refuse_copies_that_differ() {
    let run = |second: &[Bytes]| {
        let mut f = FanOut::new(2, Combine::Replicated);
        let mut out = BytesMut::new();
        for frame in [row("a"), row("b"), complete("INSERT 0 2"), ready(b'I')] {
            f.push(0, frame, &mut out).unwrap();
        }
        for frame in second {
            f.push(1, frame.clone(), &mut out).unwrap();
        }
        (tags(&out), out, f.finished())
    };
    let (t, out, done) = run(&[row("b"), row("a"), complete("INSERT 0 2"), ready(b'I')]);
    assert_eq!(t, "DDC");
    assert!(out.ends_with(&complete("INSERT 0 2")));
    assert_eq!(done, Some(Finished { failed: false, in_transaction: false }));
    for differing in [
        vec![row("a"), row("c"), complete("INSERT 0 2"), ready(b'I')],
        vec![row("a"), complete("INSERT 0 1"), ready(b'I')],
    ] {
        let (t, out, done) = run(&differing);
        assert_eq!(t, "DDE", "the first copy's rows, then the error");
        let text = String::from_utf8_lossy(&out);
        assert!(text.contains("0A000") && text.contains("omnisharded"), "{text}");
        assert_eq!(done, Some(Finished { failed: true, in_transaction: false }));
    }
}
