//! Whether the sharded relations of one query scope are joined so that each shard's join is
//! exact: key to key, within one co-location class (see [`joined_on_keys`]).

use pg_raw_parse::Node;

use crate::colocate::{conjuncts, equality, is_key, refuse, Named, Rel};
use crate::error::MergeError;

/// Several sharded relations in one scope must be of one co-location class and joined, key
/// to key, into one group: by `a.key = b.key` (in `conds`, a JOIN's ON), `USING (key)` or
/// NATURAL (both sides' keys have the name). Then every row of the join is made on the shard
/// of its key, outer joins' too, except the rows an outer join keeps from a table on every
/// shard without a match on a sharded one: each shard would add them. `rels` are the scope's
/// relations, those of `from` last (a write's target comes before them).
pub(crate) fn joined_on_keys<'a>(
    rels: &[Named],
    from: &[Node<'a>],
    mut conds: Vec<Node<'a>>,
) -> Result<(), MergeError> {
    const WHY: &str = "join of sharded relations not on their shard keys (or of tables sharded differently)";
    let leaves: usize = from.iter().map(|f| leaf_count(*f)).sum();
    let mut joins = Joins { rels, group: (0..rels.len()).collect(), at: rels.len().saturating_sub(leaves) };
    for f in from {
        joins.tree(*f, &mut conds)?;
    }
    for c in conds {
        let Some((a, b)) = equality(c) else { continue };
        let side =
            |x: Node<'_>| rels.iter().position(|n| key_of(n).is_some_and(|(_, k)| is_key(x, n, k, false)));
        if let (Some(i), Some(j)) = (side(a), side(b)) {
            joins.union(i, j);
        }
    }
    // Keys equal to the same constant are equal to each other.
    for i in 0..rels.len() {
        for j in (i + 1)..rels.len() {
            if rels[i].pins.iter().any(|p| rels[j].pins.contains(p)) {
                joins.union(i, j);
            }
        }
    }
    let locals: Vec<usize> = (0..rels.len()).filter(|i| matches!(rels[*i].rel, Rel::Local { .. })).collect();
    let [first, _, ..] = locals.as_slice() else { return Ok(()) };
    let first = *first;
    let class = key_of(&rels[first]).map(|(c, _)| c);
    let root = joins.root(first);
    for i in locals {
        if joins.root(i) != root || class.is_none() || key_of(&rels[i]).map(|(c, _)| c) != class {
            return Err(refuse(WHY));
        }
    }
    Ok(())
}

fn key_of(n: &Named) -> Option<(&str, &str)> {
    match &n.rel {
        Rel::Local { class, key: Some(k) } => Some((class.as_str(), k.as_str())),
        _ => None,
    }
}

/// The relations a FROM item adds (as `Cx::add_from_item` adds them).
fn leaf_count(n: Node<'_>) -> usize {
    match n {
        Node::JoinExpr(j) => leaf_count(j.larg()) + leaf_count(j.rarg()),
        _ => 1,
    }
}

/// Union-find over a scope's relations, by the joins that put their keys equal.
struct Joins<'r> {
    rels: &'r [Named],
    group: Vec<usize>,
    /// The next FROM relation's index in `rels`.
    at: usize,
}

impl Joins<'_> {
    fn root(&mut self, mut i: usize) -> usize {
        while self.group[i] != i {
            i = self.group[i];
        }
        i
    }

    fn union(&mut self, i: usize, j: usize) {
        let (ri, rj) = (self.root(i), self.root(j));
        self.group[ri] = rj;
    }

    /// The relations of a FROM item; its joins' ON terms go to `conds`.
    fn tree<'a>(
        &mut self,
        n: Node<'a>,
        conds: &mut Vec<Node<'a>>,
    ) -> Result<std::ops::Range<usize>, MergeError> {
        let Node::JoinExpr(j) = n else {
            let i = self.at;
            self.at += 1;
            return Ok(i..(i + 1).min(self.rels.len()));
        };
        let (l, r) = (self.tree(j.larg(), conds)?, self.tree(j.rarg(), conds)?);
        conds.extend(conjuncts(j.quals()));
        let using: Vec<&str> = j.using_clause().iter().filter_map(|c| c.sval()).collect();
        for a in l.clone() {
            for b in r.clone() {
                let (Some((_, ka)), Some((_, kb))) = (key_of(&self.rels[a]), key_of(&self.rels[b])) else {
                    continue;
                };
                if ka == kb && (j.is_natural || using.contains(&ka)) {
                    self.union(a, b);
                }
            }
        }
        let sharded = |range: &std::ops::Range<usize>| {
            self.rels[range.clone()].iter().any(|n| matches!(n.rel, Rel::Local { .. }))
        };
        let (left_sharded, right_sharded) = (sharded(&l), sharded(&r));
        // PostgreSQL's JoinType: 1 LEFT, 2 FULL, 3 RIGHT.
        let keeps_unsharded = match j.jointype {
            1 => !left_sharded && right_sharded,
            3 => left_sharded && !right_sharded,
            2 => left_sharded != right_sharded,
            _ => false,
        };
        if keeps_unsharded {
            return Err(refuse(
                "outer join that keeps rows of a table on every shard unmatched by a sharded table (each shard would add them)",
            ));
        }
        Ok(l.start..r.end)
    }
}
