//! Where a statement's WITH clause and each of its CTEs sit in the statement's text, read from
//! its tokens: what both computing a CTE first and running a subquery alone need.

use crate::error::MergeError;
use crate::lex::{self, Kind, Tok};

/// The statement's WITH clause as a prefix for one of its subqueries run alone
/// (`WITH a AS (...), b AS (...) `), so names of its CTEs mean there what they mean in the
/// statement; `None` when it has no WITH (or one the tokens cannot place).
pub(crate) fn with_prefix(sql: &str, toks: &[Tok], s: &pg_raw_parse::nodes::SelectStmt) -> Option<String> {
    let w = s.with_clause()?;
    let spans: Vec<Span> = w.ctes().iter().map(|c| span(toks, c.location)).collect::<Result<_, _>>().ok()?;
    let (first, last) = (spans.first()?, spans.last()?);
    let recursive = if w.recursive { "RECURSIVE " } else { "" };
    Some(format!("WITH {recursive}{} ", &sql[toks[first.name].start..toks[last.close].end]))
}

/// Whether `sql` holds a parameter (`$1`): it cannot run alone before the Bind.
pub(crate) fn has_params(sql: &str) -> Result<bool, MergeError> {
    Ok(lex::tokens(sql)?.iter().any(|t| t.kind == Kind::Other && sql[t.start..t.end].starts_with('$')))
}

/// Token indexes of one CTE: its name, its column list's names, its body's parentheses.
pub(crate) struct Span {
    pub name: usize,
    pub aliases: Vec<Tok>,
    pub open: usize,
    pub close: usize,
}

pub(crate) fn span(toks: &[Tok], location: i32) -> Result<Span, MergeError> {
    let bad = || MergeError::Syntax("cannot place a CTE in the statement text".into());
    let at = usize::try_from(location).map_err(|_| bad())?;
    let name = toks.iter().position(|t| t.start == at).ok_or_else(bad)?;
    let close_of = |open: usize| {
        let depth = toks[open].depth;
        toks[open + 1..].iter().position(|t| t.kind == Kind::Close && t.depth == depth).map(|i| open + 1 + i)
    };
    let mut i = name + 1;
    let mut aliases = Vec::new();
    if toks.get(i).is_some_and(|t| t.kind == Kind::Open) {
        let close = close_of(i).ok_or_else(bad)?;
        aliases.extend(toks[i + 1..close].iter().filter(|t| t.kind != Kind::Comma).copied());
        i = close + 1;
    }
    // AS [NOT] [MATERIALIZED] (
    while toks.get(i).is_some_and(|t| t.kind == Kind::Word) {
        i += 1;
    }
    if toks.get(i).is_none_or(|t| t.kind != Kind::Open) {
        return Err(bad());
    }
    let close = close_of(i).ok_or_else(bad)?;
    Ok(Span { name, aliases, open: i, close })
}
