//! The SQL each shard runs: the user's statement with its target list replaced (aggregates
//! by their shard parts, hidden columns appended) and its tail adjusted (ORDER BY kept and
//! LIMIT pushed as `LIMIT n+offset` without aggregates; HAVING, ORDER BY and LIMIT dropped
//! with them: they apply after the merge). FROM/WHERE/GROUP BY are copied as written.

use crate::error::MergeError;
use crate::lex::Kind;
use crate::plan::{Clauses, Item, OutCol, Planner};

impl Planner<'_> {
    pub(crate) fn shard_sql(
        &self,
        items: &[Item<'_>],
        c: &Clauses,
        grouping: bool,
        cols: &mut Vec<OutCol>,
        tail: &str,
    ) -> Result<String, MergeError> {
        let mut targets: Vec<String> = Vec::new();
        let mut extras: Vec<String> = Vec::new();
        let first_extra = items.len() + self.hidden.len();
        for (i, item) in items.iter().enumerate() {
            match cols.get_mut(i) {
                Some(OutCol::Agg { spec, extra, .. }) => {
                    // The alias names the column when the first part is the aggregate itself.
                    targets.push(spec.parts[0].clone() + &self.alias_text(item));
                    for p in &spec.parts[1..] {
                        extra.push(first_extra + extras.len());
                        extras.push(p.clone());
                    }
                }
                // Plain items keep their text and alias (GROUP BY may name the alias).
                _ => targets
                    .push(self.tok_text(item.expr.start..item.expr.end).to_string() + &self.alias_text(item)),
            }
        }
        for h in &self.hidden {
            match &h.agg {
                Some(spec) => {
                    targets.push(spec.parts[0].clone());
                    let extra = spec.parts[1..]
                        .iter()
                        .map(|p| {
                            extras.push(p.clone());
                            first_extra + extras.len() - 1
                        })
                        .collect();
                    cols.push(OutCol::Agg { spec: spec.clone(), name: None, extra });
                }
                // The ORDER BY copied into the shard query (without grouping) must name the
                // client's columns, never this one: a name no client column has (`SELECT
                // u::text ... ORDER BY u` would otherwise have two columns named u).
                None if !grouping => {
                    targets.push(format!("{} AS \"?pgvia_sort_{}\"", h.text, targets.len() + 1));
                    cols.push(OutCol::Plain);
                }
                None => {
                    targets.push(h.text.clone());
                    cols.push(OutCol::Plain);
                }
            }
        }
        targets.extend(extras);
        let mut sql = String::from("SELECT ");
        if !grouping && c.targets > 1 {
            sql.push_str(self.tok_text(1..c.targets));
            sql.push(' ');
        }
        sql.push_str(&targets.join(", "));
        let body_end = if grouping {
            [c.having, c.window, c.order, c.limit, c.locking]
        } else {
            [c.order, c.limit, c.locking, None, None]
        }
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(c.end);
        let body_start = c.from.unwrap_or(body_end).min(body_end);
        if body_start < body_end {
            sql.push(' ');
            sql.push_str(self.tok_text(body_start..body_end));
        }
        if !grouping {
            if let Some(order) = c.order {
                let end = [c.limit, c.locking].into_iter().flatten().min().unwrap_or(c.end);
                sql.push(' ');
                sql.push_str(self.tok_text(order..end));
            }
        }
        sql.push_str(tail);
        Ok(sql)
    }

    pub(crate) fn alias_text(&self, item: &Item<'_>) -> String {
        if item.res.name().is_none() {
            return String::new();
        }
        // Tokens after the expression up to the item's end are the alias (`AS x` / `x`).
        let mut end = item.expr.end;
        while end < self.toks.len()
            && !(self.toks[end].depth == 0 && self.toks[end].kind == Kind::Comma)
            && end < item.expr.end + 2
        {
            let t = self.toks[end];
            if t.depth == 0 && (t.kind == Kind::Word || t.kind == Kind::Quoted) {
                end += 1;
                if t.kind == Kind::Quoted || !t.is_word(self.sql, "as") {
                    break;
                }
            } else {
                break;
            }
        }
        if end == item.expr.end {
            return String::new();
        }
        format!(" {}", self.tok_text(item.expr.end..end))
    }
}
