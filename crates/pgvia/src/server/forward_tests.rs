//! The statement registry, the per-client and per-server maps, and the rewriting of a
//! pipeline, without sockets: frames go into a buffer and server replies are fed by hand.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut, BytesMut};
use wire::frontend::{FrontendMessage, Oids};

use super::*;
use crate::prepared::{PurgePolicy, Registry, SERVER_NAME_PREFIX};
use crate::server::tracker::Fate;

fn registry(policy: PurgePolicy) -> Arc<Registry> {
    Arc::new(Registry::new(policy))
}

fn analyzer() -> route::Analyzer {
    route::Analyzer::new(route::AnalyzerOptions::default()).expect("default options")
}

fn no_types() -> Oids<'static> {
    Oids::new(&[])
}

fn resolve(client: &mut ClientStatements, a: &route::Analyzer, sql: &str) -> Arc<Statement> {
    client.resolve(sql.as_bytes(), no_types(), || a.analyze(sql, &[])).expect("below the caps")
}

#[test]
fn parse_resolves_in_three_tiers() {
    let reg = registry(PurgePolicy::default());
    let a = analyzer();
    let mut alice = ClientStatements::new(reg.clone());
    let mut bob = ClientStatements::new(reg.clone());

    let first = resolve(&mut alice, &a, "SELECT 1");
    assert_eq!(reg.snapshot().registered, 1, "a new statement takes the write path");
    let again = resolve(&mut alice, &a, "SELECT 1");
    assert!(Arc::ptr_eq(&first, &again));
    assert_eq!(reg.snapshot().client_hits, 1, "the client's own recent statements need no lock");
    let other = resolve(&mut bob, &a, "SELECT 1");
    assert!(Arc::ptr_eq(&first, &other));
    assert_eq!(reg.snapshot().registry_hits, 1, "another client's statement is found under the read lock");
    assert_eq!(reg.snapshot().statements, 1);
    // Same text, different declared parameter types: a different statement.
    let typed = alice
        .resolve(b"SELECT 1", Oids::new(&23u32.to_be_bytes()), || a.analyze("SELECT 1", &[23]))
        .expect("below the caps");
    assert!(!Arc::ptr_eq(&first, &typed));
    assert_eq!(first.client_refs(), 3);
    for s in [&first, &again, &other, &typed] {
        reg.release_client(s);
    }
    assert_eq!(reg.snapshot().unreferenced, 2);
}

#[test]
fn purge_is_checked_without_the_lock_and_keeps_what_is_referenced() {
    let policy = PurgePolicy { max_statements: 2, min_unreferenced: 2, min_interval: Duration::ZERO };
    let reg = registry(policy);
    let a = analyzer();
    let mut client = ClientStatements::new(reg.clone());
    let mut server = ServerStatements::new(Some(reg.clone()), 10);

    let kept = resolve(&mut client, &a, "SELECT 'kept by a server'");
    server.insert(&kept);
    reg.release_client(&kept);
    let named = resolve(&mut client, &a, "SELECT 'kept by a client name'");
    client.bind_name("n", named).expect("new name");
    let dropped = resolve(&mut client, &a, "SELECT 'dropped'");
    reg.release_client(&dropped);
    assert_eq!(reg.snapshot().statements, 3);
    assert_eq!(reg.snapshot().purges, 0, "one unreferenced statement is not worth the write lock");

    let also_dropped = resolve(&mut client, &a, "SELECT 'also dropped'");
    reg.release_client(&also_dropped);
    // The next registration finds two unreferenced statements past the limit and purges.
    let trigger = resolve(&mut client, &a, "SELECT 'trigger'");
    let snap = reg.snapshot();
    assert_eq!(snap.purges, 1);
    assert_eq!(snap.purged, 2);
    let left: Vec<String> =
        reg.statements().iter().map(|s| String::from_utf8_lossy(&s.query).into_owned()).collect();
    assert!(left.contains(&"SELECT 'kept by a server'".to_owned()), "{left:?}");
    assert!(left.contains(&"SELECT 'kept by a client name'".to_owned()), "{left:?}");
    assert!(left.contains(&"SELECT 'trigger'".to_owned()), "{left:?}");
    assert_eq!(left.len(), 3);
    reg.release_client(&trigger);
    drop(server);
    drop(client);
    assert_eq!(reg.snapshot().unreferenced, 3, "dropping the maps gives every reference back");
}

/// A Parse frame as a client would send it.
fn parse_frame(name: &str, sql: &str) -> BytesMut {
    let mut b = BytesMut::new();
    wire::build::frame(&mut b, b'P', |b| {
        wire::build::put_cstr(b, name.as_bytes());
        wire::build::put_cstr(b, sql.as_bytes());
        b.put_i16(0);
    });
    b
}

fn bind_frame(statement: &str) -> BytesMut {
    let mut b = BytesMut::new();
    wire::build::frame(&mut b, b'B', |b| {
        wire::build::put_cstr(b, b"");
        wire::build::put_cstr(b, statement.as_bytes());
        b.put_i16(0);
        b.put_i16(0);
        b.put_i16(0);
    });
    b
}

/// The messages pgvia wrote for the server, as (tag, name) pairs: the statement name of a
/// Parse, Bind or Close.
fn sent(out: &[u8]) -> Vec<(char, String)> {
    let mut out = out;
    let mut msgs = Vec::new();
    while out.len() >= 5 {
        let len = u32::from_be_bytes([out[1], out[2], out[3], out[4]]) as usize;
        let (tag, body) = (out[0], &out[5..1 + len]);
        let name = match FrontendMessage::parse_body(tag, body).expect("valid frame") {
            FrontendMessage::Parse(p) => p.name.to_owned(),
            FrontendMessage::Bind(b) => b.statement.to_owned(),
            FrontendMessage::Close { name, .. } | FrontendMessage::Describe { name, .. } => name.to_owned(),
            _ => String::new(),
        };
        msgs.push((char::from(tag), name));
        out = &out[1 + len..];
    }
    msgs
}

struct Rig {
    analyzer: route::Analyzer,
    client: ClientStatements,
    tracker: ReplyTracker,
    statements: ServerStatements,
    out: BytesMut,
}

impl Rig {
    fn new(capacity: usize) -> Self {
        let reg = registry(PurgePolicy::default());
        Rig {
            analyzer: analyzer(),
            client: ClientStatements::new(reg.clone()),
            tracker: ReplyTracker::default(),
            statements: ServerStatements::new(Some(reg), capacity),
            out: BytesMut::new(),
        }
    }

    fn forward(&mut self) -> Forward<'_> {
        Forward {
            client: &mut self.client,
            server: ServerSide { tracker: &mut self.tracker, statements: &mut self.statements },
            out: &mut self.out,
            analyzer: &self.analyzer,
        }
    }

    fn parse(&mut self, name: &str, sql: &str) -> Sent {
        let frame = parse_frame(name, sql);
        let Ok(FrontendMessage::Parse(p)) = FrontendMessage::parse_body(b'P', &frame[5..]) else { panic!() };
        let sent = self.forward().parse(&[], &p).0;
        if sent == Sent::AsIs {
            self.out.extend_from_slice(&frame);
        }
        sent
    }

    fn bind(&mut self, name: &str) -> Sent {
        let frame = bind_frame(name);
        let sent = self.forward().bind(&[], &frame, name);
        if sent == Sent::AsIs {
            self.out.extend_from_slice(&frame);
        }
        sent
    }

    fn plain(&mut self, tag: u8) {
        wire::build::frame(&mut self.out, tag, |b| {
            if tag == b'E' {
                b.put_u8(0);
                b.put_i32(0);
            }
        });
        self.tracker.client_sent(tag, &[]);
    }

    /// Feeds server replies; returns each one's fate and the answers pgvia gives itself.
    fn replies(&mut self, tags: &[u8]) -> Vec<String> {
        let mut seen = Vec::new();
        let error = b"SERROR\0VERROR\0C22012\0Mdivision by zero\0\0";
        for &tag in tags {
            let body: &[u8] = match tag {
                b'Z' => b"I",
                b'E' => error,
                _ => b"",
            };
            let (_, fate) = self.tracker.server_sent(tag, body);
            seen.push(format!("{}{}", char::from(tag), if fate == Fate::Drop { "-" } else { "" }));
            while let Some(answer) = self.tracker.take_answered() {
                let crate::server::tracker::Answer::Empty(t) = answer else { panic!("{answer:?}") };
                seen.push(format!("{}*", char::from(t)));
            }
            settle(self.tracker.take_finished(), &mut self.statements, Some(&mut self.client));
        }
        seen
    }
}

fn holds(rig: &mut Rig, sql: &str) -> bool {
    let stmt = resolve(&mut rig.client, &rig.analyzer, sql);
    let held = rig.statements.holds(&stmt);
    rig.client.release(&stmt);
    held
}

#[test]
fn eviction_and_reinjection_within_one_pipeline() {
    let mut rig = Rig::new(2);
    rig.parse("a", "SELECT 'a'");
    rig.parse("b", "SELECT 'b'");
    rig.parse("c", "SELECT 'c'");
    rig.bind("a");
    rig.plain(b'E');
    rig.plain(b'S');
    let names = sent(&rig.out);
    let tags: String = names.iter().map(|(t, _)| *t).collect();
    // c evicts a; binding a brings it back (evicting b) ahead of the Bind.
    assert_eq!(tags, "PPCPCPBES", "{names:?}");
    let pa = &names[0].1;
    let pb = &names[1].1;
    assert!(pa.starts_with(SERVER_NAME_PREFIX) && pa != pb, "{names:?}");
    assert_eq!(&names[2].1, pa, "the least recently used statement is closed");
    assert_eq!(&names[4].1, pb);
    assert_eq!(&names[5].1, pa, "the evicted statement is parsed again before its Bind");
    assert_eq!(&names[6].1, pa, "the Bind is renamed");

    let seen = rig.replies(b"1131312CZ");
    // Replies to pgvia's own Close and re-Parse are dropped; the client's three
    // ParseCompletes, its BindComplete, CommandComplete and ReadyForQuery go through.
    assert_eq!(seen, ["1", "1", "3-", "1", "3-", "1-", "2", "C", "Z"]);
    assert!(holds(&mut rig, "SELECT 'a'") && holds(&mut rig, "SELECT 'c'"));
    assert!(!holds(&mut rig, "SELECT 'b'"));
    assert_eq!(rig.statements.len(), 2);
}

#[test]
fn a_parse_the_server_already_holds_is_answered_in_order() {
    let mut rig = Rig::new(10);
    rig.parse("a", "SELECT 'a'");
    rig.plain(b'S');
    assert_eq!(rig.replies(b"1Z"), ["1", "Z"]);
    if let Some(s) = rig.client.unbind("a") {
        rig.client.release(&s);
    }
    rig.out.clear();
    // A pipeline: Bind of another statement first, then the Parse the server can skip.
    rig.parse("x", "SELECT 'x'");
    rig.bind("x");
    rig.plain(b'E');
    assert_eq!(rig.parse("a", "SELECT 'a'"), Sent::Replaced);
    rig.bind("a");
    rig.plain(b'E');
    rig.plain(b'S');
    let tags: String = sent(&rig.out).iter().map(|(t, _)| *t).collect();
    assert_eq!(tags, "PBEBES", "the second Parse never reaches the server");
    // pgvia's ParseComplete comes after the first Execute's result, before the next Bind's.
    assert_eq!(rig.replies(b"12C2CZ"), ["1", "2", "C", "1*", "2", "C", "Z"]);
    assert_eq!(rig.client.registry().snapshot().parses_skipped, 1);
}

#[test]
fn what_the_server_skipped_after_an_error_is_undone() {
    let mut rig = Rig::new(10);
    rig.parse("bad", "SELECT 1/0");
    rig.bind("bad");
    rig.plain(b'E');
    rig.parse("later", "SELECT 'later'");
    rig.bind("later");
    rig.plain(b'E');
    rig.plain(b'S');
    // The division fails at Execute; the rest up to Sync is skipped by the server.
    let seen = rig.replies(b"12EZ");
    assert_eq!(seen, ["1", "2", "E", "Z"]);
    assert!(rig.client.get("bad").is_some(), "what succeeded stays");
    assert!(rig.client.get("later").is_none(), "a Parse the server skipped never bound the name");
    assert!(!holds(&mut rig, "SELECT 'later'"), "nor is the statement on the server");
    assert!(holds(&mut rig, "SELECT 1/0"));

    // A duplicate name fails like PostgreSQL's, and the server skips to Sync with it.
    rig.out.clear();
    assert_eq!(rig.parse("bad", "SELECT 2"), Sent::Replaced);
    rig.bind("bad");
    rig.plain(b'S');
    let tags: String = sent(&rig.out).iter().map(|(t, _)| *t).collect();
    assert_eq!(tags, "DBS", "a failing Describe stands in for the duplicate Parse");
    let (_, fate) = rig.tracker.server_sent(b'E', b"SERROR\0C26000\0Mno such statement\0\0");
    let Fate::Replace(error) = fate else { panic!("the error is replaced: {fate:?}") };
    assert!(String::from_utf8_lossy(&error).contains("prepared statement \"bad\" already exists"));
    assert!(rig.tracker.is_skipping() || rig.tracker.has_pending());
    assert_eq!(rig.client.registry().stats.injected_parses.load(Ordering::Relaxed), 0);
}
