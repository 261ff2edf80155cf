//! The client's statement names on a sharded database, kept as PostgreSQL keeps them: a name
//! is the client's once a server has accepted its Parse, not when the Parse goes out. A
//! batch's Parses wait in [`Pending`] until its replies say how many the servers accepted
//! (the client's ParseCompletes, counted per lane by the fan-out); a refused Parse leaves its
//! name free. A Parse under a name the client holds, or one name past
//! `max_prepared_statements_per_client`, is refused before anything from it on is sent, in
//! the place PostgreSQL puts the error: what comes before it runs, the rest up to the Sync is
//! skipped.

use bytes::{Bytes, BytesMut};
use wire::frontend::{tag as fe, FrontendMessage, Target as Which};

use super::{ClientStatement, Part, ShardedSession};
use crate::prepared::{duplicate_statement, StatementLimit};
use crate::session::error::SessionError;

/// What a Parse of the batch gives its name once the servers accept it.
enum Held {
    /// A statement of its own.
    New(ClientStatement),
    /// Nothing new: the name already holds this very text (the unnamed statement parsed
    /// again with the same text and types).
    Same,
    /// A Close later in the batch let the name go again.
    Closed,
}

/// One client Parse of the batch, in order.
struct Parsed {
    name: String,
    held: Held,
    /// A Bind, Describe or Execute came between the previous Parse (or the batch's start) and
    /// this one: a failed batch may have failed there, before this Parse ran.
    after_other: bool,
}

/// A batch's Parses, waiting for the servers' answers.
#[derive(Default)]
pub(super) struct Pending {
    parsed: Vec<Parsed>,
    /// A Bind, Describe or Execute since the last Parse.
    other: bool,
}

impl Pending {
    /// Empty again, keeping its room (a batch's buffers are reused).
    pub fn clear(&mut self) {
        self.parsed.clear();
        self.other = false;
    }

    /// A Parse of `name` whose statement is `statement` (`None`: the name holds it already).
    pub fn parse(&mut self, name: &str, statement: Option<ClientStatement>) {
        let held = statement.map_or(Held::Same, Held::New);
        let after_other = std::mem::take(&mut self.other);
        self.parsed.push(Parsed { name: name.to_owned(), held, after_other });
    }

    /// A Bind, Describe or Execute: it may fail before the Parses after it run.
    pub fn other(&mut self) {
        self.other = true;
    }

    /// A Close of `name`: the batch's earlier Parses of it no longer give it a statement.
    pub fn close(&mut self, name: &str) {
        for p in self.parsed.iter_mut().filter(|p| p.name == name) {
            p.held = Held::Closed;
        }
    }

    /// The statement the batch's latest Parse of `name` made, if that Parse made one.
    fn get(&self, name: &str) -> Option<&ClientStatement> {
        match &self.parsed.iter().rev().find(|p| p.name == name)?.held {
            Held::New(s) => Some(s),
            Held::Same | Held::Closed => None,
        }
    }
}

impl ShardedSession<'_> {
    /// The statement `name` means at this point of a batch: the batch's own Parse of it
    /// first, else the client's. A batch without Parses costs the one lookup it always did.
    pub(super) fn statement<'s>(&'s self, pending: &'s Pending, name: &str) -> Option<&'s ClientStatement> {
        if pending.parsed.is_empty() {
            return self.statements.get(name);
        }
        pending.get(name).or_else(|| self.statements.get(name))
    }

    /// The first Parse of `frames` refused before any server sees it, with the client's
    /// error: a name the client holds (or an earlier Parse of the batch took, and no Close
    /// let go of since) gets PostgreSQL's 42P05; a new name past
    /// `max_prepared_statements_per_client` gets 53400. The unnamed statement is replaced by
    /// every Parse and never counts. Only Parse and Close frames are read.
    pub(super) fn refused_parse(&self, frames: &[Bytes]) -> Option<(usize, Bytes)> {
        let mut fresh: Vec<&str> = Vec::new();
        let mut closed: Vec<&str> = Vec::new();
        let held =
            |name: &str, closed: &[&str]| self.statements.contains_key(name) && !closed.contains(&name);
        for (at, frame) in frames.iter().enumerate() {
            if frame[0] != fe::PARSE && frame[0] != fe::CLOSE {
                continue;
            }
            match FrontendMessage::parse_body(frame[0], &frame[5..]) {
                Ok(FrontendMessage::Parse(p)) if !p.name.is_empty() => {
                    if fresh.contains(&p.name) || held(p.name, &closed) {
                        return Some((at, duplicate_statement(p.name)));
                    }
                    let cap = self.app.statements.caps.per_client();
                    let named = self.statements.named_len();
                    if named - closed.len() + fresh.len() >= cap {
                        let mut out = BytesMut::new();
                        StatementLimit::PerClient(cap).write_error(&mut out);
                        return Some((at, out.freeze()));
                    }
                    fresh.push(p.name);
                }
                Ok(FrontendMessage::Close { target: Which::Statement, name }) if !name.is_empty() => {
                    fresh.retain(|n| *n != name);
                    if held(name, &closed) {
                        closed.push(name);
                    }
                }
                _ => {}
            }
        }
        None
    }

    /// A batch whose message at `at` is refused with `error` (a Parse, or a Bind or Describe
    /// of an unnamed statement the client does not have): the messages before it run as a
    /// batch of their own, then the error, inside one implicit transaction (rolled back, as
    /// PostgreSQL's error aborts the messages before it); the rest is skipped.
    pub(super) async fn refuse_at(
        &mut self,
        frames: &[Bytes],
        at: usize,
        error: Bytes,
    ) -> Result<(), SessionError> {
        if at == 0 {
            self.fail_with(&error);
            return Ok(());
        }
        let mut before = frames[..at].to_vec();
        let mut sync = BytesMut::new();
        wire::build::sync(&mut sync);
        before.push(sync.freeze());
        Box::pin(self.in_implicit_transaction(vec![Part::Batch(before), Part::Error(error)])).await
    }

    /// `DEALLOCATE name` of a statement the client holds: the name goes (pgvia's copies on
    /// the servers stay for other clients) and pgvia answers. A name the client does not hold
    /// goes on to a shard, whose server has no such statement either and answers with
    /// PostgreSQL's 26000.
    pub(super) fn deallocated(&mut self, analysis: &route::Analysis) -> bool {
        let Some(stmt) = analysis.statement(0).filter(|_| analysis.len() == 1) else { return false };
        if !matches!(stmt.kind(), route::StatementKind::Deallocate) {
            return false;
        }
        let Some(name) = stmt.name() else { return false };
        if self.statements.remove(name).is_none() {
            return false;
        }
        wire::build::command_complete(&mut self.to_client, "DEALLOCATE");
        self.ready();
        true
    }

    /// After a batch's exchange (`parses_answered` and `errored` set by it): the names whose
    /// Parse the servers accepted are the client's now; the others stay as they were, except
    /// that a failed Parse of the unnamed statement leaves none, as PostgreSQL drops the old
    /// one before it parses the new.
    pub(super) fn settle_names(&mut self, pending: &mut Pending) {
        let accepted = self.parses_answered;
        pending.other = false;
        for (i, p) in pending.parsed.drain(..).enumerate() {
            if i >= accepted {
                if self.errored && !p.after_other && p.name.is_empty() {
                    self.statements.remove("");
                }
                break;
            }
            if let Held::New(statement) = p.held {
                self.statements.insert_owned(p.name, statement);
            }
        }
    }
}
