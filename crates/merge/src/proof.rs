//! The placement proof for a statement the shards run each on its own rows: `Ok` when what
//! the shards compute together is what one PostgreSQL holding every row computes, else 0A000
//! naming the construct. One judgement ([`crate::colocate`]'s scopes) for reads on one shard
//! and for writes on one shard or many; a cross-shard read is judged by the merge planner
//! with the same rules ([`crate::MergePlan::for_select_placed`]).
//!
//! A write changes exactly PostgreSQL's rows when each shard chooses its rows from rows it
//! holds whole: its target and the relations of its FROM/USING (MERGE's source) joined key to
//! key within one co-location class, or on every shard; its subqueries correlated on the
//! target's key or over tables on every shard. A table on every shard is written on every
//! shard, so what chooses its rows must be the same on each: tables on every shard only.

use pg_raw_parse::nodes::{RangeVar, ReturningClause, SelectStmt, WithClause};
use pg_raw_parse::Node;

use crate::colocate::{self, refuse, Cx, Named, Placement, Rel, Spread};
use crate::error::MergeError;

const EVERYWHERE_WRITTEN: &str = "change of a table on every shard chosen from a sharded table's rows (each shard's copy would change differently)";

/// Judges every statement of `sql` run on `spread` shards ([`Spread::Many`] SELECTs are the
/// merge planner's; here they are judged as it judges them).
pub fn prove_placement(sql: &str, placement: &Placement, spread: Spread) -> Result<(), MergeError> {
    let parsed = pg_raw_parse::parse(sql).map_err(|e| MergeError::Syntax(e.to_string()))?;
    for raw in parsed.iter() {
        match raw.stmt() {
            Node::SelectStmt(s) => match spread {
                Spread::One => colocate::check_one_shard(s, placement)?,
                Spread::Many => colocate::check(s, placement).map(|_| ())?,
            },
            Node::UpdateStmt(u) => {
                let mut exprs: Vec<Node<'_>> = u.target_list().iter().map(|t| t.val()).collect();
                exprs.extend(returning(u.returning_clause()));
                let write = Write {
                    target: u.relation(),
                    with: u.with_clause(),
                    from: u.from_clause().iter().collect(),
                    conds: vec![u.where_clause()],
                    exprs,
                    source: None,
                };
                write.judge(placement, spread)?;
            }
            Node::DeleteStmt(d) => {
                let write = Write {
                    target: d.relation(),
                    with: d.with_clause(),
                    from: d.using_clause().iter().collect(),
                    conds: vec![d.where_clause()],
                    exprs: returning(d.returning_clause()).collect(),
                    source: None,
                };
                write.judge(placement, spread)?;
            }
            Node::MergeStmt(m) => {
                let mut exprs = Vec::new();
                for w in m.merge_when_clauses() {
                    exprs.push(w.condition());
                    exprs.extend(w.target_list().iter());
                    exprs.extend(w.values().iter());
                }
                exprs.extend(returning(m.returning_clause()));
                let write = Write {
                    target: m.relation(),
                    with: m.with_clause(),
                    from: vec![m.source_relation()],
                    conds: vec![m.join_condition()],
                    exprs,
                    source: None,
                };
                write.judge(placement, spread)?;
            }
            Node::InsertStmt(i) => {
                let mut exprs: Vec<Node<'_>> = returning(i.returning_clause()).collect();
                if let Some(c) = i.on_conflict_clause() {
                    exprs.extend(c.target_list().iter().map(|t| t.val()));
                    exprs.push(c.where_clause());
                }
                let source = match i.select_stmt() {
                    Node::SelectStmt(q) => Some(q),
                    _ => None,
                };
                let write = Write {
                    target: i.relation(),
                    with: i.with_clause(),
                    from: Vec::new(),
                    conds: Vec::new(),
                    exprs,
                    source,
                };
                write.judge(placement, spread)?;
            }
            // `COPY (SELECT ...) TO`: the shards' rows are streamed as they come.
            Node::CopyStmt(c) => {
                if let Node::SelectStmt(s) = c.query() {
                    match spread {
                        Spread::One => colocate::check_one_shard(s, placement)?,
                        Spread::Many => colocate::check(s, placement).map(|_| ())?,
                    }
                }
            }
            _ => {}
        }
    }
    Ok(())
}

fn returning(r: Option<&ReturningClause>) -> impl Iterator<Item = Node<'_>> + '_ {
    r.into_iter().flat_map(|r| r.exprs().iter())
}

/// A write's parts, as the proof needs them.
struct Write<'a> {
    target: Option<&'a RangeVar>,
    with: Option<&'a WithClause>,
    /// FROM, USING, MERGE's source.
    from: Vec<Node<'a>>,
    /// Conditions whose AND terms may join the relations (WHERE, MERGE's ON).
    conds: Vec<Node<'a>>,
    /// Other expressions that may hold subqueries (SET, RETURNING, MERGE's actions).
    exprs: Vec<Node<'a>>,
    /// INSERT's SELECT or VALUES.
    source: Option<&'a SelectStmt>,
}

impl Write<'_> {
    fn judge(&self, placement: &Placement, spread: Spread) -> Result<(), MergeError> {
        let Some(target) = self.target else { return Ok(()) };
        let mut cx = Cx::new(placement, spread);
        if let Some(w) = self.with {
            cx.with_ctes(w)?;
        }
        let mut rels = vec![cx.table(target)?];
        for f in &self.from {
            cx.add_from_item(*f, &mut rels)?;
        }
        let conds: Vec<Node<'_>> = self.conds.iter().flat_map(|c| colocate::conjuncts(*c)).collect();
        colocate::pin(&mut rels, &conds);
        let mut roots = self.conds.clone();
        roots.extend(self.exprs.iter().copied());
        colocate::from_roots(self.from.iter().copied(), &mut roots);
        let (mut subs, mut windows) = (Vec::new(), Vec::new());
        if let Some(q) = self.source {
            if q.values_lists().is_empty() {
                // INSERT ... SELECT into a sharded table is the router's to refuse (its rows'
                // shards are not known); into a table on every shard, each shard inserts
                // what it selects.
                if rels[0].rel == Rel::Everywhere && !cx.everywhere(q)? {
                    return Err(refuse(EVERYWHERE_WRITTEN));
                }
            } else {
                roots.extend(q.values_lists().iter());
            }
        }
        colocate::collect_in(roots, &mut subs, &mut windows)?;
        if rels[0].rel == Rel::Everywhere {
            if rels.iter().any(|n| n.rel != Rel::Everywhere) {
                return Err(refuse(EVERYWHERE_WRITTEN));
            }
            for sub in subs {
                if !cx.everywhere(sub)? {
                    return Err(refuse(EVERYWHERE_WRITTEN));
                }
            }
            return Ok(());
        }
        colocate::joined_on_keys(&rels, &self.from, conds)?;
        let locals: Vec<&Named> = rels.iter().filter(|n| matches!(n.rel, Rel::Local { .. })).collect();
        for sub in subs {
            if cx.everywhere(sub)? {
                continue;
            }
            // Beside a join, a subquery is proven only when it reads tables on every shard.
            if locals.len() != 1 {
                return Err(refuse(colocate::NOT_COLOCATED));
            }
            cx.subquery(sub, &locals)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::colocate::ShardedTable;
    use crate::MergePlan;

    /// `a` and `b` co-located on `k`, `c` sharded otherwise; other tables on every shard.
    fn placement() -> Placement {
        let t = |name: &str, class: &str| ShardedTable {
            schema: None,
            name: name.into(),
            column: "k".into(),
            colocation: class.into(),
        };
        Placement { sharded: vec![t("a", "x"), t("b", "x"), t("c", "y")], others_everywhere: true }
    }

    fn one(sql: &str) -> &'static str {
        prove_placement(sql, &placement(), Spread::One).map_or_else(|e| e.sqlstate(), |_| "ok")
    }

    fn many(sql: &str) -> &'static str {
        let proof = prove_placement(sql, &placement(), Spread::Many).map_or_else(|e| e.sqlstate(), |_| "ok");
        if sql.starts_with("SELECT") {
            let planned =
                MergePlan::for_select_placed(sql, &placement()).map_or_else(|e| e.sqlstate(), |_| "ok");
            assert_eq!(proof, planned, "{sql}: the planner and the proof disagree");
        }
        proof
    }

    #[test]
    fn joins_are_judged_by_keys_and_classes() {
        for sql in [
            "SELECT * FROM a JOIN b ON b.k = a.k",
            "SELECT * FROM a JOIN b USING (k)",
            "SELECT * FROM a NATURAL JOIN b",
            "SELECT * FROM a LEFT JOIN b USING (k) LEFT JOIN kinds USING (z) WHERE a.k > 3",
            "SELECT * FROM kinds JOIN a USING (z) FULL JOIN b USING (k)",
            "SELECT * FROM a JOIN kinds ON kinds.z = a.z",
            "SELECT * FROM a LEFT JOIN kinds ON kinds.z = a.z",
            "SELECT * FROM a, (SELECT k, count(*) FROM b GROUP BY k) s WHERE s.k = a.k",
            "SELECT a.k, (SELECT max(v) FROM (VALUES (1), (2)) t(v)) FROM a",
        ] {
            assert_eq!(many(sql), "ok", "{sql}");
            assert_eq!(one(sql), "ok", "{sql}");
        }
        for sql in [
            "SELECT * FROM a JOIN b ON b.z = a.k",
            "SELECT * FROM a JOIN c ON c.k = a.k",
            "SELECT * FROM a JOIN c USING (k)",
            "SELECT * FROM a, b",
            "SELECT * FROM a JOIN b ON b.k = a.k OR b.z = 1",
            "SELECT * FROM kinds LEFT JOIN a ON a.z = kinds.z",
            "SELECT * FROM a RIGHT JOIN kinds ON a.z = kinds.z",
            "SELECT * FROM a FULL JOIN kinds ON a.z = kinds.z",
            "SELECT * FROM a, generate_series(1, (SELECT count(*) FROM c)) g",
        ] {
            assert_eq!(many(sql), "0A000", "{sql}");
            assert_eq!(one(sql), "0A000", "{sql}");
        }
    }

    #[test]
    fn writes_choose_their_rows_from_rows_the_shard_holds_whole() {
        for sql in [
            "UPDATE a SET z = 1 FROM b WHERE b.k = a.k AND b.z = 2",
            "UPDATE a SET z = b.z FROM b JOIN kinds USING (z) WHERE a.k = b.k",
            "DELETE FROM a USING kinds WHERE kinds.z = a.z",
            "DELETE FROM a WHERE EXISTS (SELECT 1 FROM b WHERE b.k = a.k)",
            "UPDATE a x SET z = (SELECT count(*) FROM b WHERE b.k = x.k)",
            "UPDATE a SET z = (SELECT max(z) FROM kinds)",
            "MERGE INTO a USING b ON b.k = a.k WHEN MATCHED THEN UPDATE SET z = b.z",
            "UPDATE kinds SET z = 1 WHERE z IN (SELECT z FROM other)",
            "INSERT INTO kinds SELECT * FROM other",
            "INSERT INTO a (k, z) VALUES (1, (SELECT max(z) FROM kinds))",
            "UPDATE a SET z = 1 FROM b WHERE a.k = 3 AND b.k = 3 AND b.z = a.z",
        ] {
            assert_eq!(many(sql), "ok", "{sql}");
            assert_eq!(one(sql), "ok", "{sql}");
        }
        // Pinned to one constant: one shard, and (there only) a subquery pinned alike.
        for sql in [
            "SELECT * FROM a JOIN b ON b.z = a.z WHERE a.k = 3 AND b.k = 3",
            "SELECT * FROM a JOIN b ON b.z = a.z WHERE a.k = $1 AND b.k = $1",
        ] {
            assert_eq!(many(sql), "ok", "{sql}");
            assert_eq!(one(sql), "ok", "{sql}");
        }
        for sql in [
            "DELETE FROM a WHERE k = 3 AND z IN (SELECT z FROM b WHERE b.k = 3)",
            "SELECT a.z, (SELECT count(*) FROM b WHERE k = 3) FROM a WHERE a.k = 3",
        ] {
            assert_eq!(many(sql), "ok", "{sql}");
            assert_eq!(one(sql), "ok", "{sql}");
        }
        // Under an aggregate without GROUP BY, judged as a whole (a WHERE subquery could be
        // let through; it is computed first instead).
        for sql in [
            "SELECT count(*), (SELECT count(*) FROM b WHERE b.k = 3) FROM a WHERE a.k = 3",
            "SELECT count(*) FROM a WHERE a.k = $2 AND EXISTS (SELECT 1 FROM b WHERE b.k = $2)",
        ] {
            assert_eq!(many(sql), "0A000", "{sql}");
            assert_eq!(one(sql), "ok", "{sql}");
        }
        for sql in [
            "SELECT * FROM a JOIN b ON b.z = a.z WHERE a.k = 3 AND b.k = 4",
            "SELECT * FROM a JOIN b ON b.z = a.z WHERE a.k = 3 AND b.k = '3'",
            "SELECT * FROM a JOIN c ON c.z = a.z WHERE a.k = 3 AND c.k = 3",
            "SELECT * FROM a JOIN b ON b.z = a.z WHERE a.k = 3 OR b.k = 3",
            "DELETE FROM a WHERE k = 3 AND z IN (SELECT z FROM b WHERE b.k = 4)",
            "DELETE FROM a WHERE k = 3 AND z IN (SELECT z FROM c WHERE c.k = 3)",
        ] {
            assert_eq!(many(sql), "0A000", "{sql}");
            assert_eq!(one(sql), "0A000", "{sql}");
        }
        for sql in [
            "UPDATE a SET z = 1 FROM c WHERE c.k = a.k",
            "UPDATE a SET z = 1 FROM b WHERE b.z = a.k",
            "DELETE FROM a USING c WHERE c.k = a.k",
            "DELETE FROM a WHERE z IN (SELECT z FROM b)",
            "DELETE FROM a WHERE z > (SELECT avg(z) FROM a)",
            "DELETE FROM a WHERE EXISTS (SELECT 1 FROM c WHERE c.k = a.k)",
            "UPDATE a SET (z, y) = (SELECT count(*), 1 FROM c)",
            "UPDATE a SET z = 1 FROM b WHERE b.k = a.k AND a.z IN (SELECT z FROM b)",
            "MERGE INTO a USING c ON c.k = a.k WHEN MATCHED THEN UPDATE SET z = c.z",
            "UPDATE kinds SET z = 1 WHERE z IN (SELECT z FROM a)",
            "UPDATE kinds SET z = 1 FROM a WHERE a.z = kinds.z",
            "INSERT INTO kinds SELECT z FROM a",
            "INSERT INTO a (k, z) VALUES (1, (SELECT count(*) FROM a))",
        ] {
            assert_eq!(many(sql), "0A000", "{sql}");
            assert_eq!(one(sql), "0A000", "{sql}");
        }
    }
}
