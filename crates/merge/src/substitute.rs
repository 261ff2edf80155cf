//! Uncorrelated subqueries over sharded tables, computed first and substituted.
//!
//! `WHERE x > (SELECT avg(x) FROM t)` needs every shard's rows before any shard can filter.
//! PostgreSQL itself runs such a subquery once (an InitPlan) and uses its value; the merge
//! does the same across shards: the caller runs each subquery [`uncorrelated_subqueries`]
//! finds through the merge on every shard, turns its result into literals of the result's
//! type ([`replacement`]) and plans the query again with them in place ([`substitute`]).
//!
//! Only subqueries in the outer query's WHERE are taken, as a scalar `(SELECT ...)` or as
//! `x [NOT] IN (SELECT ...)`, and only without parameters; each runs behind the statement's
//! WITH, so a CTE's name means the CTE there too. Whether one is uncorrelated is
//! learnt by running it alone: a subquery that refers to the outer query fails there (the
//! outer names are not in scope) and the caller keeps the original refusal; one that runs
//! alone means what it meant inside, since PostgreSQL resolves a name in the innermost scope
//! that has it. The meaning is kept: a scalar subquery of no row is NULL, of more than one
//! row error 21000 (as PostgreSQL); an empty IN list stays an empty set, so `x IN` it is
//! false and `x NOT IN` it true even for a NULL `x`; NULLs in the list keep IN's
//! three-valued logic.

use std::ops::Range;

use pg_raw_parse::nodes::{SubLink, SubLinkType};
use pg_raw_parse::Node;

use crate::error::MergeError;
use crate::lex::{self, Kind, Tok};
use crate::scan;

/// Most rows an IN subquery may return to be substituted; past it the query is refused.
pub const MAX_SUBSTITUTED_ROWS: usize = 10_000;
/// Most bytes of literals substituted for one subquery.
pub const MAX_SUBSTITUTED_BYTES: usize = 1 << 20;

/// How a subquery's result is used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SubqueryKind {
    /// `(SELECT ...)` as a value.
    Scalar,
    /// `x IN (SELECT ...)` or `x NOT IN (SELECT ...)`.
    In,
}

/// A subquery to compute first.
#[derive(Debug, Clone)]
pub struct Subquery {
    /// Its own SELECT, as the shards can run it alone.
    pub sql: String,
    pub kind: SubqueryKind,
    /// Its text in the outer query, parentheses included.
    range: Range<usize>,
}

/// The scalar and IN subqueries of the statement's WHERE that take no parameter, in text
/// order; empty when there are none (or the text is not one SELECT).
pub fn uncorrelated_subqueries(sql: &str) -> Result<Vec<Subquery>, MergeError> {
    let parsed = pg_raw_parse::parse(sql).map_err(|e| MergeError::Syntax(e.to_string()))?;
    let mut stmts = parsed.iter();
    let (Some(raw), None) = (stmts.next(), stmts.next()) else { return Ok(Vec::new()) };
    let Node::SelectStmt(s) = raw.stmt() else { return Ok(Vec::new()) };
    let toks = lex::tokens(sql)?;
    // The statement's CTEs go in front of each subquery run alone: a name that means a
    // CTE in the statement must not mean a table there.
    let prefix = crate::with_clause::with_prefix(sql, &toks, s);
    // One with parameters cannot run before the Bind, and without it the names of its CTEs
    // could mean tables: nothing is taken.
    if prefix.as_deref().map(crate::with_clause::has_params).transpose()? == Some(true) {
        return Ok(Vec::new());
    }
    let mut found = Vec::new();
    scan::walk(s.where_clause(), 0, &mut |n| {
        if let Node::SubLink(l) = n {
            found.extend(candidate(sql, &toks, l, prefix.as_deref()));
            // Not into its SELECT: a nested one is its own query's business.
            return Ok(false);
        }
        Ok(true)
    })?;
    Ok(found)
}

fn candidate(sql: &str, toks: &[Tok], l: &SubLink, prefix: Option<&str>) -> Option<Subquery> {
    let at = usize::try_from(l.location).ok()?;
    if !matches!(l.subselect(), Node::SelectStmt(_)) {
        return None;
    }
    let i = toks.iter().position(|t| t.start == at)?;
    let (kind, open) = match l.sub_link_type {
        SubLinkType::EXPR_SUBLINK if toks[i].kind == Kind::Open => (SubqueryKind::Scalar, i),
        // IN (not `= ANY`): the grammar leaves its operator name empty and points at IN (or
        // at the NOT of NOT IN).
        SubLinkType::ANY_SUBLINK if l.oper_name().is_empty() => {
            let j = if toks[i].is_word(sql, "not") { i + 1 } else { i };
            if !toks.get(j)?.is_word(sql, "in") || toks.get(j + 1)?.kind != Kind::Open {
                return None;
            }
            (SubqueryKind::In, j + 1)
        }
        _ => return None,
    };
    let depth = toks[open].depth;
    let close = open + 1 + toks[open + 1..].iter().position(|t| t.kind == Kind::Close && t.depth == depth)?;
    // `$n` inside: the subquery cannot run alone, before the execution's Bind.
    if toks[open + 1..close].iter().any(|t| sql[t.start..t.end].starts_with('$')) {
        return None;
    }
    let inner = sql[toks[open].end..toks[close].start].trim();
    let inner = match prefix {
        // Its own WITH cannot follow the statement's: left refused.
        Some(_) if toks.get(open + 1).is_some_and(|t| t.is_word(sql, "with")) => return None,
        Some(p) => format!("{p}{inner}"),
        None => inner.to_owned(),
    };
    Some(Subquery { sql: inner, kind, range: toks[open].start..toks[close].end })
}

/// The SQL type name of a result column, with its modifier where it changes the value's
/// reading (`numeric(p,s)`, `varchar(n)`, `char(n)`); `None` for types not substituted.
pub(crate) fn type_name(oid: u32, typmod: i32) -> Option<String> {
    let base = match oid {
        16 => "boolean",
        17 => "bytea",
        19 => "name",
        20 => "bigint",
        21 => "smallint",
        23 => "integer",
        25 => "text",
        26 => "oid",
        114 => "json",
        700 => "real",
        701 => "double precision",
        1042 => "character",
        1043 => "character varying",
        1082 => "date",
        1083 => "time without time zone",
        1114 => "timestamp without time zone",
        1184 => "timestamp with time zone",
        1186 => "interval",
        1700 => "numeric",
        2950 => "uuid",
        3802 => "jsonb",
        _ => return None,
    };
    Some(match oid {
        1700 if typmod >= 4 => {
            format!("numeric({},{})", ((typmod - 4) >> 16) & 0xffff, (typmod - 4) & 0xffff)
        }
        1042 | 1043 if typmod >= 4 => format!("{base}({})", typmod - 4),
        _ => base.to_owned(),
    })
}

/// `v` as a literal of `ty`: an `E''` string (read the same whatever
/// `standard_conforming_strings` is) cast to the type, or a typed NULL.
pub(crate) fn literal(v: Option<&str>, ty: &str) -> String {
    match v {
        None => format!("NULL::{ty}"),
        Some(v) => format!("E'{}'::{ty}", v.replace('\\', "\\\\").replace('\'', "\\'")),
    }
}

/// The text that replaces a subquery, from its result: its columns' (type OID, type
/// modifier) and its rows as text (NULL as `None`).
pub fn replacement(
    kind: SubqueryKind,
    columns: &[(u32, i32)],
    rows: &[Vec<Option<String>>],
) -> Result<String, MergeError> {
    let &[(oid, typmod)] = columns else {
        return Err(match kind {
            // PostgreSQL's own error for the query as written.
            SubqueryKind::Scalar => MergeError::Syntax("subquery must return only one column".into()),
            SubqueryKind::In => {
                MergeError::unsupported("IN over a subquery of several columns across shards")
            }
        });
    };
    let ty = type_name(oid, typmod).ok_or_else(|| {
        MergeError::unsupported(format!("a subquery across shards whose result has type OID {oid}"))
    })?;
    fn cell(r: &[Option<String>]) -> Option<&str> {
        r.first().and_then(|c| c.as_deref())
    }
    let text = match kind {
        SubqueryKind::Scalar => match rows {
            [] => format!("({})", literal(None, &ty)),
            [row] => format!("({})", literal(cell(row), &ty)),
            _ => return Err(MergeError::Cardinality),
        },
        SubqueryKind::In if rows.is_empty() => format!("(SELECT {} WHERE false)", literal(None, &ty)),
        SubqueryKind::In if rows.len() > MAX_SUBSTITUTED_ROWS => {
            return Err(MergeError::unsupported(format!(
                "an IN subquery across shards of more than {MAX_SUBSTITUTED_ROWS} rows"
            )))
        }
        SubqueryKind::In => {
            let items: Vec<String> = rows.iter().map(|r| literal(cell(r), &ty)).collect();
            format!("({})", items.join(", "))
        }
    };
    if text.len() > MAX_SUBSTITUTED_BYTES {
        return Err(MergeError::unsupported(format!(
            "a subquery across shards whose result is more than {MAX_SUBSTITUTED_BYTES} bytes of text"
        )));
    }
    Ok(text)
}

/// `sql` with each subquery replaced by its text.
pub fn substitute(sql: &str, done: &[(Subquery, String)]) -> String {
    let mut ordered: Vec<&(Subquery, String)> = done.iter().collect();
    ordered.sort_by_key(|(s, _)| std::cmp::Reverse(s.range.start));
    let mut out = sql.to_owned();
    for (s, text) in ordered {
        out.replace_range(s.range.clone(), text);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_scalar_and_in_subqueries_of_the_where_clause_only() {
        let sql = "SELECT (SELECT 1), id FROM t WHERE k > (SELECT avg(k) FROM t) AND g NOT IN (SELECT g FROM w) \
                   AND h = ANY (SELECT h FROM w) AND EXISTS (SELECT 1 FROM w) AND s IN (SELECT s FROM w WHERE x = $1)";
        let found = uncorrelated_subqueries(sql).expect("parse");
        let got: Vec<(&str, SubqueryKind)> = found.iter().map(|s| (s.sql.as_str(), s.kind)).collect();
        assert_eq!(
            got,
            [("SELECT avg(k) FROM t", SubqueryKind::Scalar), ("SELECT g FROM w", SubqueryKind::In)]
        );
        let done = vec![
            (found[0].clone(), "(E'5'::numeric)".to_owned()),
            (found[1].clone(), "(E'1'::integer)".to_owned()),
        ];
        let out = substitute(sql, &done);
        assert!(out.contains("k > (E'5'::numeric) AND g NOT IN (E'1'::integer) AND h = ANY"), "{out}");
    }

    #[test]
    fn replacements_keep_the_meaning() {
        let one = |v: Option<&str>| vec![v.map(str::to_owned)];
        let int = [(23, -1)];
        assert_eq!(replacement(SubqueryKind::Scalar, &int, &[]).unwrap(), "(NULL::integer)");
        assert_eq!(replacement(SubqueryKind::Scalar, &int, &[one(Some("7"))]).unwrap(), "(E'7'::integer)");
        assert_eq!(
            replacement(SubqueryKind::Scalar, &int, &[one(Some("7")), one(Some("8"))]),
            Err(MergeError::Cardinality)
        );
        assert_eq!(replacement(SubqueryKind::In, &int, &[]).unwrap(), "(SELECT NULL::integer WHERE false)");
        assert_eq!(
            replacement(SubqueryKind::In, &[(25, -1)], &[one(Some("O'B\\x")), one(None)]).unwrap(),
            "(E'O\\'B\\\\x'::text, NULL::text)"
        );
        let numeric = [(1700, ((30 << 16) | 10) + 4)];
        assert_eq!(
            replacement(SubqueryKind::Scalar, &numeric, &[one(Some("1.5"))]).unwrap(),
            "(E'1.5'::numeric(30,10))"
        );
        assert_eq!(
            replacement(SubqueryKind::In, &[(23, -1), (23, -1)], &[]).unwrap_err().sqlstate(),
            "0A000"
        );
        assert_eq!(replacement(SubqueryKind::Scalar, &[(600, -1)], &[]).unwrap_err().sqlstate(), "0A000");
        let many: Vec<Vec<Option<String>>> =
            (0..=MAX_SUBSTITUTED_ROWS).map(|i| one(Some(&i.to_string()))).collect();
        assert_eq!(replacement(SubqueryKind::In, &int, &many).unwrap_err().sqlstate(), "0A000");
    }
}
