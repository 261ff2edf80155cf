//! The reply tracker driven by hand: requests as the client sends them, replies as the server
//! gives them.

use super::*;

fn client(t: &mut ReplyTracker, tags: &[u8]) {
    tags.iter().for_each(|&g| t.client_sent(g, b""));
}

fn ready(t: &mut ReplyTracker, s: u8) -> ServerEvent {
    t.server_sent(b'Z', &[s]).0
}

#[test]
fn simple_and_pipelined_queries() {
    let mut t = ReplyTracker::default();
    client(&mut t, b"Q");
    assert_eq!(ready(&mut t, b'I'), ServerEvent::Ready { status: TransactionStatus::Idle, quiescent: true });
    client(&mut t, b"PBDESPBDES");
    for tag in [b'1', b'2', b'T', b'D', b'C'] {
        t.server_sent(tag, b"");
    }
    assert!(matches!(ready(&mut t, b'I'), ServerEvent::Ready { quiescent: false, .. }));
    for tag in [b'1', b'2', b'T', b'D', b'C'] {
        t.server_sent(tag, b"");
    }
    assert!(matches!(ready(&mut t, b'T'), ServerEvent::Ready { quiescent: true, .. }));
    assert!(!t.is_quiescent(), "a transaction is open");
}

#[test]
fn error_mid_pipeline_skips_to_sync() {
    let mut t = ReplyTracker::default();
    client(&mut t, b"PBEPBEPBES");
    t.server_sent(b'1', b"");
    t.server_sent(b'2', b"");
    t.server_sent(b'C', b"");
    t.server_sent(b'E', b"SERROR\0VERROR\0C22012\0Mdivision by zero\0\0");
    assert!(matches!(ready(&mut t, b'I'), ServerEvent::Ready { quiescent: true, .. }));
}

#[test]
fn extended_copy_in_ignores_the_sync_sent_with_execute() {
    let mut t = ReplyTracker::default();
    client(&mut t, b"PBES");
    t.server_sent(b'1', b"");
    t.server_sent(b'2', b"");
    t.server_sent(b'G', b"");
    assert_eq!(t.copy_state(), CopyState::In);
    client(&mut t, b"ddcS");
    t.server_sent(b'C', b"");
    assert!(matches!(ready(&mut t, b'I'), ServerEvent::Ready { quiescent: true, .. }));
}

#[test]
fn extended_copy_in_with_data_already_sent() {
    let mut t = ReplyTracker::default();
    client(&mut t, b"PBESddcS");
    t.server_sent(b'1', b"");
    t.server_sent(b'2', b"");
    t.server_sent(b'G', b"");
    t.server_sent(b'C', b"");
    assert!(matches!(ready(&mut t, b'I'), ServerEvent::Ready { quiescent: true, .. }));
}

#[test]
fn simple_copy_out_then_next_execute() {
    let mut t = ReplyTracker::default();
    client(&mut t, b"Q");
    t.server_sent(b'H', b"");
    t.server_sent(b'd', b"");
    t.server_sent(b'c', b"");
    t.server_sent(b'C', b"");
    assert!(matches!(ready(&mut t, b'I'), ServerEvent::Ready { quiescent: true, .. }));
}

#[test]
fn open_execute_needs_sync_and_stray_ready_is_desync() {
    let mut t = ReplyTracker::default();
    client(&mut t, b"PBEH");
    assert!(t.needs_sync());
    for tag in [b'1', b'2', b'C'] {
        t.server_sent(tag, b"");
    }
    assert!(!t.has_pending());
    assert_eq!(ready(&mut t, b'I'), ServerEvent::Desync);
}

#[test]
fn an_unsynced_batch_stays_open_until_its_sync() {
    let mut t = ReplyTracker::default();
    client(&mut t, b"PBEH");
    for tag in [b'1', b'2', b'C'] {
        t.server_sent(tag, b"");
    }
    // Every reply is in, but the implicit transaction is not over.
    assert_eq!(t.batch(), Batch::Open);
    assert!(t.needs_sync() && !t.is_quiescent() && !t.at_idle_boundary());
    // A Query the server skips after an error does not close it; the Sync does.
    client(&mut t, b"B");
    t.server_sent(b'E', b"SERROR\0VERROR\0C26000\0Mno such statement\0\0");
    client(&mut t, b"Q");
    assert_eq!(t.batch(), Batch::Open);
    client(&mut t, b"S");
    assert_eq!(t.batch(), Batch::Closed);
    assert!(matches!(ready(&mut t, b'I'), ServerEvent::Ready { quiescent: true, .. }));
    assert!(t.is_quiescent() && t.at_idle_boundary());
    // A simple query ends the batch as PostgreSQL's own commit of it does.
    client(&mut t, b"PBEQ");
    assert_eq!(t.batch(), Batch::Closed);
}

#[test]
fn copy_fail_after_the_copy_is_ignored_as_postgres_does() {
    let mut t = ReplyTracker::default();
    client(&mut t, b"Q");
    t.server_sent(b'G', b"");
    client(&mut t, b"dc");
    t.server_sent(b'C', b"");
    assert!(matches!(ready(&mut t, b'I'), ServerEvent::Ready { quiescent: true, .. }));
    client(&mut t, b"fPS");
    assert_eq!(t.server_sent(b'1', b"").0, ServerEvent::Other);
    assert!(matches!(ready(&mut t, b'I'), ServerEvent::Ready { quiescent: true, .. }));
}

#[test]
fn copy_end_behind_a_refused_copy_is_owed_nothing() {
    let error = b"SERROR\0VERROR\0C42P01\0Mrelation does not exist\0\0";
    // Simple query: COPY refused, its CopyDone (or CopyFail) and a pipelined query behind.
    for end in [b"c", b"f"] {
        let mut t = ReplyTracker::default();
        client(&mut t, b"Q");
        client(&mut t, end);
        client(&mut t, b"PBES");
        t.server_sent(b'E', error);
        assert!(matches!(ready(&mut t, b'I'), ServerEvent::Ready { quiescent: false, .. }));
        for tag in [b'1', b'2', b'D', b'C'] {
            assert_eq!(t.server_sent(tag, b"").0, ServerEvent::Other, "{}", char::from(tag));
        }
        assert!(matches!(ready(&mut t, b'I'), ServerEvent::Ready { quiescent: true, .. }));
    }
    // Alone: the server is quiescent at once.
    let mut t = ReplyTracker::default();
    client(&mut t, b"Qc");
    t.server_sent(b'E', error);
    assert!(matches!(ready(&mut t, b'I'), ServerEvent::Ready { quiescent: true, .. }));
    // Extended protocol, CopyDone after the Sync; the Execute fails.
    let mut t = ReplyTracker::default();
    client(&mut t, b"PBESc");
    t.server_sent(b'1', b"");
    t.server_sent(b'2', b"");
    t.server_sent(b'E', error);
    assert!(matches!(ready(&mut t, b'I'), ServerEvent::Ready { quiescent: true, .. }));
    // The COPY starts: then the CopyDone is its end, and the CommandComplete follows.
    let mut t = ReplyTracker::default();
    client(&mut t, b"QcPBES");
    t.server_sent(b'G', b"");
    t.server_sent(b'C', b"");
    assert!(matches!(ready(&mut t, b'I'), ServerEvent::Ready { quiescent: false, .. }));
    for tag in [b'1', b'2', b'C'] {
        assert_eq!(t.server_sent(tag, b"").0, ServerEvent::Other);
    }
    assert!(matches!(ready(&mut t, b'I'), ServerEvent::Ready { quiescent: true, .. }));
}

#[test]
fn fatal_error_is_reported() {
    let mut t = ReplyTracker::default();
    client(&mut t, b"Q");
    assert_eq!(t.server_sent(b'E', b"SFATAL\0VFATAL\0C57P01\0Mbye\0\0").0, ServerEvent::Fatal);
}

#[test]
fn a_sync_pipelined_into_an_extended_copy_in_does_not_close_it() {
    // Found by fuzzing: Parse/Bind/Execute of COPY FROM STDIN with a Sync right behind, then
    // CopyData and CopyFail. PostgreSQL ignores that Sync (it arrives during COPY IN), so after
    // the CopyFail's error it skips to the next Sync, its implicit transaction still open.
    let error = b"SERROR\0VERROR\0C57014\0MCOPY from stdin failed\0\0";
    let mut t = ReplyTracker::default();
    client(&mut t, b"PBESdf");
    t.server_sent(b'1', b"");
    t.server_sent(b'2', b"");
    t.server_sent(b'G', b"");
    assert_eq!(t.batch(), Batch::Open, "the Sync sent during COPY IN closes nothing");
    assert_eq!(t.server_sent(b'E', error), (ServerEvent::Other, Fate::Forward));
    assert!(!t.is_quiescent(), "the server waits for a Sync");
    assert!(t.needs_sync());
    client(&mut t, b"S");
    assert!(matches!(ready(&mut t, b'I'), ServerEvent::Ready { quiescent: true, .. }));
    assert!(t.is_quiescent());
}

#[test]
fn a_sync_after_an_extended_copy_failed_counts_again() {
    // The server rejects the copied data before the client ends the copy: the COPY is over,
    // so the Sync the client sends next is the one the server waits for.
    let error = b"SERROR\0VERROR\0C22P04\0Mbad copy data\0\0";
    let mut t = ReplyTracker::default();
    client(&mut t, b"PBES");
    t.server_sent(b'1', b"");
    t.server_sent(b'2', b"");
    t.server_sent(b'G', b"");
    client(&mut t, b"d");
    t.server_sent(b'E', error);
    assert!(!t.is_quiescent());
    client(&mut t, b"cS");
    assert!(matches!(ready(&mut t, b'I'), ServerEvent::Ready { quiescent: true, .. }));
}
