//! CTEs over sharded tables, computed first and substituted as constant relations.
//!
//! `WITH c AS (SELECT g, count(*) AS n FROM t GROUP BY g) SELECT ... FROM c JOIN w ...`
//! needs every shard's rows of `t` before any shard can use `c`. A non-recursive CTE of the
//! statement's own WITH depends on nothing outside it (it cannot name the outer query's
//! columns), and PostgreSQL evaluates it as one query whose rows every reference reads, so
//! its result is what it means: the caller runs [`Cte::sql`] across the shards through the
//! merge and [`Cte::replacement`] writes that result back as a typed constant relation
//! (`c(g, n) AS (VALUES (E'1'::integer, E'5'::bigint), ...)`), which is on every shard.
//!
//! Refused (0A000 naming the construct): `WITH RECURSIVE` and data-modifying WITH (the
//! planner's own refusals stand), a body with `FOR UPDATE/SHARE` (its locks would be taken
//! and released by a statement of its own), one calling a volatile built-in function
//! (`random()`, `nextval()`...: each shard would draw its own values or advance its own
//! sequence), a body with its own WITH after other CTEs, and results past the
//! substitution limits or of a type not substituted.

use std::ops::Range;

use pg_raw_parse::Node;

use crate::colocate::{self, CtePlace, Placement};
use crate::error::MergeError;
use crate::lex::{self, Kind, Tok};
use crate::substitute::{literal, type_name, MAX_SUBSTITUTED_BYTES, MAX_SUBSTITUTED_ROWS};
use crate::with_clause::{has_params, span, Span};

/// Which CTEs [`next_cte`] takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CteChoice {
    /// Only those the planner refuses (they would run per shard).
    Refused,
    /// Also co-located ones over sharded tables: the query is refused for how it uses them
    /// (joined off the key, say), and as constants they join anything.
    Sharded,
}

/// A CTE to compute first.
#[derive(Debug, Clone)]
pub struct Cte {
    /// Its body as the shards can run it alone, behind the CTEs before it.
    pub sql: String,
    /// Its text in the statement, from its name to its body's closing parenthesis.
    range: Range<usize>,
    /// Its name as written.
    name: String,
    /// Its column list as written (may name fewer columns than the body has).
    aliases: Vec<(String, String)>,
}

/// Built-in functions whose values differ per call or that change state: across shards
/// each shard would draw its own values or advance its own sequence.
const VOLATILE: &[&str] = &[
    "random",
    "random_normal",
    "setseed",
    "nextval",
    "setval",
    "currval",
    "lastval",
    "gen_random_uuid",
    "uuid_generate_v1",
    "uuid_generate_v1mc",
    "uuid_generate_v4",
    "clock_timestamp",
    "timeofday",
    "txid_current",
    "pg_current_xact_id",
    "pg_sleep",
    "pg_sleep_for",
    "pg_sleep_until",
    "dblink",
    "dblink_exec",
];

/// The first CTE of the statement's WITH that `choice` takes, or `None` (no WITH, `WITH
/// RECURSIVE`, a data-modifying CTE, or none to take). A taken CTE that cannot be computed
/// first is an error naming why.
pub fn next_cte(sql: &str, placement: &Placement, choice: CteChoice) -> Result<Option<Cte>, MergeError> {
    let parsed = pg_raw_parse::parse(sql).map_err(|e| MergeError::Syntax(e.to_string()))?;
    let mut stmts = parsed.iter();
    let (Some(raw), None) = (stmts.next(), stmts.next()) else { return Ok(None) };
    let Node::SelectStmt(s) = raw.stmt() else { return Ok(None) };
    let Some(w) = s.with_clause() else { return Ok(None) };
    if w.recursive || w.ctes().iter().any(|c| !matches!(c.ctequery(), Node::SelectStmt(_))) {
        return Ok(None);
    }
    let places = colocate::cte_places(s, placement);
    let wanted = |p: CtePlace| match choice {
        CteChoice::Refused => p == CtePlace::Refused,
        CteChoice::Sharded => matches!(p, CtePlace::Refused | CtePlace::Local),
    };
    let Some(at) = places.iter().position(|p| wanted(*p)) else { return Ok(None) };
    let toks = lex::tokens(sql)?;
    let spans: Vec<Span> = w.ctes().iter().map(|c| span(&toks, c.location)).collect::<Result<_, _>>()?;
    let Some(cte) = w.ctes().iter().nth(at) else { return Ok(None) };
    let Node::SelectStmt(q) = cte.ctequery() else { return Ok(None) };
    let here = &spans[at];
    let name = sql[toks[here.name].start..toks[here.name].end].to_owned();
    if !q.locking_clause().is_empty() {
        return Err(MergeError::unsupported(format!(
            "FOR UPDATE/SHARE in CTE {name} over sharded tables (it would be computed first across shards)"
        )));
    }
    let body_toks = &toks[here.open + 1..here.close];
    if let Some(f) = body_toks.windows(2).find_map(|p| {
        let word = &sql[p[0].start..p[0].end];
        (p[0].kind == Kind::Word
            && p[1].kind == Kind::Open
            && VOLATILE.iter().any(|v| v.eq_ignore_ascii_case(word)))
        .then(|| word.to_ascii_lowercase())
    }) {
        return Err(MergeError::unsupported(format!(
            "volatile function {f}() in CTE {name} over sharded tables (computed first across shards, each shard would give its own values)"
        )));
    }
    let body = sql[toks[here.open].end..toks[here.close].start].trim();
    let before = &spans[..at];
    let sql_alone = match (before.first(), before.last()) {
        (Some(first), Some(last)) => {
            if body_toks.first().is_some_and(|t| t.is_word(sql, "with")) {
                return Err(MergeError::unsupported(format!(
                    "CTE {name} over sharded tables with its own WITH after other CTEs"
                )));
            }
            let earlier = &sql[toks[first.name].start..toks[last.close].end];
            format!("WITH {earlier} {body}")
        }
        _ => body.to_owned(),
    };
    if has_params(&sql_alone)? {
        return Err(MergeError::unsupported(format!(
            "CTE {name} over sharded tables with parameters ($n): computed first, it would run before their values are bound"
        )));
    }
    let aliases = here.aliases.iter().map(|t| (sql[t.start..t.end].to_owned(), ident(sql, t))).collect();
    let range = toks[here.name].start..toks[here.close].end;
    Ok(Some(Cte { sql: sql_alone, range, name, aliases }))
}

/// An identifier token as PostgreSQL reads it: unquoted folded to lower case.
fn ident(sql: &str, t: &Tok) -> String {
    let text = &sql[t.start..t.end];
    match t.kind {
        Kind::Quoted => text.trim_matches('"').replace("\"\"", "\""),
        _ => text.to_lowercase(),
    }
}

fn quote(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

impl Cte {
    /// The CTE's text with its result in place of its body: a typed constant relation
    /// named as before, from the result's columns (name, type OID, type modifier) and rows
    /// as text (NULL as `None`).
    pub fn replacement(
        &self,
        columns: &[(String, u32, i32)],
        rows: &[Vec<Option<String>>],
    ) -> Result<String, MergeError> {
        if rows.len() > MAX_SUBSTITUTED_ROWS {
            return Err(MergeError::unsupported(format!(
                "CTE {} across shards of more than {MAX_SUBSTITUTED_ROWS} rows",
                self.name
            )));
        }
        let mut names = Vec::with_capacity(columns.len());
        let mut seen = Vec::with_capacity(columns.len());
        let mut types = Vec::with_capacity(columns.len());
        for (i, (name, oid, typmod)) in columns.iter().enumerate() {
            let (written, read) = match self.aliases.get(i) {
                Some((written, read)) => (written.clone(), read.clone()),
                None => (quote(name), name.clone()),
            };
            if seen.contains(&read) {
                return Err(MergeError::unsupported(format!(
                    "CTE {} across shards with two columns named {read}",
                    self.name
                )));
            }
            seen.push(read);
            names.push(written);
            types.push(type_name(*oid, *typmod).ok_or_else(|| {
                MergeError::unsupported(format!(
                    "CTE {} across shards whose column {name} has type OID {oid}",
                    self.name
                ))
            })?);
        }
        let body = if rows.is_empty() {
            let nulls: Vec<String> = types.iter().map(|t| literal(None, t)).collect();
            format!("SELECT {} WHERE false", nulls.join(", "))
        } else {
            let tuples: Vec<String> = rows
                .iter()
                .map(|r| {
                    let cells: Vec<String> = types
                        .iter()
                        .enumerate()
                        .map(|(i, t)| literal(r.get(i).and_then(|c| c.as_deref()), t))
                        .collect();
                    format!("({})", cells.join(", "))
                })
                .collect();
            format!("VALUES {}", tuples.join(", "))
        };
        if body.len() > MAX_SUBSTITUTED_BYTES {
            return Err(MergeError::unsupported(format!(
                "CTE {} across shards whose result is more than {MAX_SUBSTITUTED_BYTES} bytes of text",
                self.name
            )));
        }
        Ok(format!("{}({}) AS ({body})", self.name, names.join(", ")))
    }

    /// `sql` (the text [`next_cte`] read) with this CTE replaced by `text`.
    pub fn substitute(&self, sql: &str, text: &str) -> String {
        let mut out = sql.to_owned();
        out.replace_range(self.range.clone(), text);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::colocate::ShardedTable;

    fn placement() -> Placement {
        let t = |name: &str| ShardedTable {
            schema: None,
            name: name.into(),
            column: "id".into(),
            colocation: "hash bigint".into(),
        };
        Placement { sharded: vec![t("t"), t("w")], others_everywhere: true }
    }

    #[test]
    fn takes_the_refused_cte_and_runs_it_behind_the_earlier_ones() {
        let sql =
            "WITH k AS (SELECT g FROM kinds), c (a) AS MATERIALIZED (SELECT g, count(*) FROM t GROUP BY g) \
                   SELECT * FROM c JOIN k ON k.g = c.a";
        let c = next_cte(sql, &placement(), CteChoice::Refused).unwrap().expect("a CTE");
        assert_eq!(c.sql, "WITH k AS (SELECT g FROM kinds) SELECT g, count(*) FROM t GROUP BY g");
        let cols = [("g".to_owned(), 23, -1), ("count".to_owned(), 20, -1)];
        let rows = vec![vec![Some("1".to_owned()), Some("5".to_owned())], vec![None, Some("2".to_owned())]];
        let text = c.replacement(&cols, &rows).unwrap();
        assert_eq!(
            text,
            "c(a, \"count\") AS (VALUES (E'1'::integer, E'5'::bigint), (NULL::integer, E'2'::bigint))"
        );
        let out = c.substitute(sql, &text);
        assert!(out.starts_with("WITH k AS (SELECT g FROM kinds), c(a, \"count\") AS (VALUES"), "{out}");
        // Now a constant, on every shard: nothing more to take.
        assert!(next_cte(&out, &placement(), CteChoice::Sharded).unwrap().is_none());
        let empty = c.replacement(&cols, &[]).unwrap();
        assert_eq!(empty, "c(a, \"count\") AS (SELECT NULL::integer, NULL::bigint WHERE false)");
    }

    #[test]
    fn co_located_ctes_only_when_asked() {
        let sql = "WITH c AS (SELECT id, k FROM t) SELECT count(*) FROM c JOIN w ON w.x = c.k";
        assert!(next_cte(sql, &placement(), CteChoice::Refused).unwrap().is_none());
        let c = next_cte(sql, &placement(), CteChoice::Sharded).unwrap().expect("a CTE");
        assert_eq!(c.sql, "SELECT id, k FROM t");
    }

    #[test]
    fn a_cte_over_a_table_of_unknown_placement_is_not_taken() {
        let p = Placement { others_everywhere: false, ..placement() };
        let sql = "WITH c AS (SELECT relname FROM pg_class ORDER BY 1 LIMIT 3) SELECT count(*) FROM t JOIN c ON true";
        assert!(next_cte(sql, &p, CteChoice::Sharded).unwrap().is_none());
        // Over sharded tables it is, whatever the other tables are.
        let sql = "WITH c AS (SELECT g, count(*) FROM t GROUP BY g) SELECT * FROM c";
        assert!(next_cte(sql, &p, CteChoice::Refused).unwrap().is_some());
    }

    #[test]
    fn a_query_over_constants_alone_takes_one_shards_rows() {
        let unknown = Placement { others_everywhere: false, ..placement() };
        for p in [placement(), unknown.clone()] {
            let plan = crate::MergePlan::for_select_placed(
                "WITH c(a, n) AS (VALUES (E'1'::integer, E'2'::bigint)) SELECT sum(n) FROM c",
                &p,
            )
            .unwrap();
            assert!(plan.one_shard());
            let plan = crate::MergePlan::for_select_placed("SELECT sum(k) FROM t", &p).unwrap();
            assert!(!plan.one_shard());
        }
        let plan = crate::MergePlan::for_select_placed("SELECT count(*) FROM kinds", &unknown).unwrap();
        assert!(!plan.one_shard(), "nothing is known of kinds");
    }

    #[test]
    fn refusals_name_the_construct() {
        let p = placement();
        for (sql, what) in [
            ("WITH c AS (SELECT g, random() AS r FROM t GROUP BY g) SELECT * FROM c", "random()"),
            ("WITH c AS (SELECT id FROM t ORDER BY id LIMIT 3 FOR UPDATE) SELECT * FROM c", "FOR UPDATE"),
        ] {
            let e = next_cte(sql, &p, CteChoice::Refused).unwrap_err();
            assert_eq!(e.sqlstate(), "0A000");
            assert!(e.to_string().contains(what), "{e}");
        }
        let e = next_cte(
            "WITH c AS (SELECT g, count(*) FROM t WHERE k > $1 GROUP BY g) SELECT * FROM c",
            &p,
            CteChoice::Refused,
        )
        .unwrap_err();
        assert!(e.to_string().contains("parameters"), "{e}");
        for sql in [
            "WITH RECURSIVE r AS (SELECT id FROM t UNION SELECT id + 1 FROM r WHERE id < 3) SELECT count(*) FROM r",
            "WITH d AS (DELETE FROM t RETURNING id) SELECT count(*) FROM d",
        ] {
            assert!(next_cte(sql, &p, CteChoice::Sharded).unwrap().is_none(), "{sql}");
        }
        let c = next_cte("WITH c AS (SELECT g, g FROM t LIMIT 2) SELECT * FROM c", &p, CteChoice::Refused)
            .unwrap()
            .expect("a CTE");
        let cols = [("g".to_owned(), 23, -1), ("g".to_owned(), 23, -1)];
        assert_eq!(c.replacement(&cols, &[]).unwrap_err().sqlstate(), "0A000");
    }
}
