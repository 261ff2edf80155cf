//! Which role a transaction needs, decided from the messages the client has sent before it
//! was given a server.
//!
//! A server is chosen once per transaction (transaction mode), so the decision has to hold
//! for everything the transaction will do. It goes to a replica only when that is certain
//! from what is in hand: every statement reads, and either no transaction block is left open
//! (autocommit statements, or a whole `BEGIN ... COMMIT` in one batch) or the block was
//! declared `READ ONLY`. Anything else (a write, DDL, `FOR UPDATE`, a writing function, an
//! open read-write block, COPY, a function call message, a query analysis could not read)
//! goes to the primary.

use std::sync::Arc;

use route::{Analysis, Role, SessionEffect, StatementKind};
use wire::frontend::{self, FrontendMessage};
use wire::FrameDecoder;

use crate::config::{ReadWriteSplit, RolePreference};
use crate::prepared::ClientStatements;

/// The kind of server a transaction needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Primary,
    Replica,
}

/// A routing decision and what it rests on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    pub target: Target,
    /// A comment hint chose the role; it overrides the session's preference.
    pub hinted: bool,
    /// The transaction writes (or may): the client's next reads must see it.
    pub writes: bool,
}

impl Decision {
    const fn primary(writes: bool) -> Decision {
        Decision { target: Target::Primary, hinted: false, writes }
    }
}

/// Extended-protocol batches are decided only once they are complete (a Sync or Flush is
/// in), up to this many bytes: a Parse of a read followed, in the same implicit transaction,
/// by a Parse of a write must not be split across servers.
pub const MAX_WAIT_FOR_SYNC: usize = 64 * 1024;

/// Whether the buffered client bytes are an extended-protocol batch whose end has not
/// arrived yet, so the decision should wait for more.
pub fn needs_more(buf: &[u8], decoder: &FrameDecoder) -> bool {
    if buf.len() >= MAX_WAIT_FOR_SYNC {
        return false;
    }
    let mut pos = 0;
    let mut extended = false;
    while let Ok(Some(len)) = decoder.peek_len(&buf[pos..]) {
        match buf[pos] {
            frontend::tag::SYNC | frontend::tag::FLUSH => return false,
            frontend::tag::PARSE
            | frontend::tag::BIND
            | frontend::tag::DESCRIBE
            | frontend::tag::EXECUTE
            | frontend::tag::CLOSE => extended = true,
            _ => return false,
        }
        pos += len;
    }
    extended
}

/// What the analysis of the statements seen so far says.
struct Walk<'a, Q> {
    analyzer: &'a route::Analyzer,
    /// Analyses a simple query's text (the session's memo, so the relay does not parse it
    /// again).
    query: Q,
    statements: Option<&'a ClientStatements>,
    split: ReadWriteSplit,
    /// A transaction block is open (a BEGIN seen, no COMMIT/ROLLBACK yet).
    open: bool,
    read_only: bool,
    /// The unnamed statement a Parse in this batch defined.
    unnamed: Option<Arc<Analysis>>,
}

impl<Q: FnMut(&[u8]) -> Arc<Analysis>> Walk<'_, Q> {
    /// `Some` when this analysis settles the decision.
    fn statement(&mut self, analysis: &Analysis) -> Option<Decision> {
        match analysis.hints().role {
            Some(Role::Primary) => {
                return Some(Decision { target: Target::Primary, hinted: true, writes: false })
            }
            Some(Role::Replica) => {
                return Some(Decision { target: Target::Replica, hinted: true, writes: false })
            }
            None => {}
        }
        if analysis.is_conservative() {
            return Some(Decision::primary(true));
        }
        if self.split == ReadWriteSplit::Conservative && analysis.calls_unlisted_functions() {
            return Some(Decision::primary(true));
        }
        for s in analysis.statements() {
            match s.kind() {
                StatementKind::Begin(o) => {
                    self.open = true;
                    self.read_only = o.read_only == Some(true);
                }
                StatementKind::SetTransaction(o) if self.open && o.read_only == Some(true) => {
                    self.read_only = true
                }
                StatementKind::Commit { chain: false } | StatementKind::Rollback { chain: false } => {
                    self.open = false;
                    self.read_only = false;
                }
                // A write in a READ ONLY block fails on the primary as it does on a replica.
                _ if s.writes() && !(self.open && self.read_only) => return Some(Decision::primary(true)),
                // The session would stay on this server for what follows, writes included.
                _ if s.session_effects().any(|e| may_pin(&e)) => return Some(Decision::primary(true)),
                _ => {}
            }
        }
        None
    }

    fn frame(&mut self, tag: u8, body: &[u8]) -> Option<Decision> {
        match FrontendMessage::parse_body(tag, body) {
            Ok(FrontendMessage::Query { sql }) => {
                let analysis = (self.query)(sql);
                self.statement(&analysis)
            }
            Ok(FrontendMessage::Parse(p)) => {
                let analysis = analyze_parse(self.analyzer, &p);
                let decided = self.statement(&analysis);
                if p.name.is_empty() {
                    self.unnamed = Some(analysis);
                }
                decided
            }
            Ok(FrontendMessage::Bind(b)) => {
                if b.statement.is_empty() && self.unnamed.is_some() {
                    // Its Parse was in this batch and has been looked at.
                    return None;
                }
                let known = self.statements.and_then(|s| s.get(b.statement)).map(|s| s.analysis.clone());
                match known {
                    Some(analysis) => self.statement(&analysis),
                    // A statement pgvia does not follow (pass-through): cannot tell.
                    None => Some(Decision::primary(true)),
                }
            }
            Ok(
                FrontendMessage::Describe { .. }
                | FrontendMessage::Execute { .. }
                | FrontendMessage::Sync
                | FrontendMessage::Flush
                | FrontendMessage::Close { .. },
            ) => None,
            // COPY data, function calls, anything else: the primary.
            _ => Some(Decision::primary(true)),
        }
    }
}

/// The session setting that chooses where transactions go; pgvia answers it itself.
pub const ROLE_SETTING: &str = "pgvia.role";

/// `SET pgvia.role = ...` / `RESET pgvia.role` alone in a query: the role (`None` for a value
/// that is not one) and the command tag to answer with; `None` for any other query.
pub fn role_setting(analysis: &Analysis) -> Option<(Option<RolePreference>, &'static str)> {
    if analysis.len() != 1 {
        return None;
    }
    let statement = analysis.statement(0)?;
    let kind = statement.kind();
    if !matches!(kind, StatementKind::Set { .. } | StatementKind::Reset)
        || !statement.name().is_some_and(|n| n.eq_ignore_ascii_case(ROLE_SETTING))
    {
        return None;
    }
    Some(match kind {
        StatementKind::Reset => (Some(RolePreference::Auto), "RESET"),
        _ => (statement.value().and_then(RolePreference::parse), "SET"),
    })
}

/// `SHOW pgvia.role` alone in a query (answered by pgvia: the server never saw the SET).
pub fn shows_role(analysis: &Analysis) -> bool {
    analysis.len() == 1
        && analysis.statement(0).is_some_and(|s| {
            s.kind() == StatementKind::Show && s.name().is_some_and(|n| n.eq_ignore_ascii_case(ROLE_SETTING))
        })
}

/// Effects that can keep a client on its server after the transaction (`session::state`
/// pins for them); writing ones (advisory locks, temporary tables, LISTEN) go to the primary
/// anyway.
fn may_pin(effect: &SessionEffect<'_>) -> bool {
    match effect {
        SessionEffect::Set { name, .. } | SessionEffect::Reset { name } => name.is_none_or(|n| {
            n.eq_ignore_ascii_case("role") || n.eq_ignore_ascii_case("session_authorization")
        }),
        SessionEffect::HoldCursor { .. } | SessionEffect::Load | SessionEffect::Prepare { .. } => true,
        _ => false,
    }
}

/// Decides where the transaction starting with `deferred_begin` (a BEGIN pgvia answered
/// itself) and the whole frames in `buf` should run. `query` analyses simple queries;
/// `analyzer` the rest.
pub fn decide(
    analyzer: &route::Analyzer,
    query: impl FnMut(&[u8]) -> Arc<Analysis>,
    decoder: &FrameDecoder,
    statements: Option<&ClientStatements>,
    split: ReadWriteSplit,
    deferred_begin: Option<&[u8]>,
    buf: &[u8],
) -> Decision {
    let mut walk = Walk { analyzer, query, statements, split, open: false, read_only: false, unnamed: None };
    for bytes in deferred_begin.into_iter().chain(std::iter::once(buf)) {
        let mut pos = 0;
        while let Ok(Some(len)) = decoder.peek_len(&bytes[pos..]) {
            if let Some(d) = walk.frame(bytes[pos], &bytes[pos + 5..pos + len]) {
                return d;
            }
            pos += len;
        }
    }
    if split == ReadWriteSplit::Off {
        return Decision::primary(false);
    }
    if walk.open && !walk.read_only {
        // A read-write block whose rest is still to come may write.
        return Decision::primary(true);
    }
    Decision { target: Target::Replica, hinted: false, writes: false }
}

/// Analyses a Parse. Parse carries few parameter types; they stay on the stack on this
/// per-message path, allocating only for unusually many.
pub fn analyze_parse(analyzer: &route::Analyzer, p: &frontend::Parse<'_>) -> std::sync::Arc<route::Analysis> {
    let mut stack = [0u32; 32];
    let n = p.param_types.len();
    if n <= stack.len() {
        for (slot, oid) in stack.iter_mut().zip(p.param_types.iter()) {
            *slot = oid;
        }
        analyzer.analyze_bytes(p.query, &stack[..n])
    } else {
        let oids: Vec<u32> = p.param_types.iter().collect();
        analyzer.analyze_bytes(p.query, &oids)
    }
}
