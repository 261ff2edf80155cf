//! The relations a `WHERE` clause can name columns of, and what a column's qualifier resolves
//! to among them.

use pg_raw_parse::list::NodeList;
use pg_raw_parse::nodes::{ColumnRef, RangeVar};
use pg_raw_parse::Node;

/// The relations a `WHERE` clause can name columns of: the statement's target (for
/// `UPDATE`/`DELETE`) and its top-level `FROM`/`USING` items.
#[derive(Clone, Copy)]
pub(crate) struct FromScope<'t> {
    pub target: Option<&'t RangeVar>,
    pub from: &'t NodeList,
}

/// A relation a column qualifier resolved to: a table, or something that is not one (a
/// subquery, a function, a CTE).
pub(crate) enum Resolved<'t> {
    Table(&'t RangeVar),
    NotATable,
    Unknown,
}

impl<'t> FromScope<'t> {
    /// Calls `f` with each relation visible in the scope and the name it is visible under
    /// (its alias, else its name); `None` for a relation that is not a plain table.
    fn each(&self, f: &mut impl FnMut(Option<&'t RangeVar>, Option<&'t str>) -> bool) -> bool {
        if let Some(t) = self.target {
            if f(Some(t), visible_name(t)) {
                return true;
            }
        }
        self.from.iter().any(|n| from_names(n, f, 0))
    }

    pub(crate) fn resolve(
        &self,
        is_cte: &dyn Fn(&str) -> bool,
        qualifier: Option<(Option<&str>, &str)>,
    ) -> Resolved<'t> {
        let table_or_cte = |rv: &'t RangeVar| {
            if rv.schemaname().is_none() && rv.relname().is_some_and(is_cte) {
                Resolved::NotATable
            } else {
                Resolved::Table(rv)
            }
        };
        match qualifier {
            Some((schema, q)) => {
                let mut hit = None;
                self.each(&mut |rv, visible| {
                    let schema_ok = schema.is_none() || rv.and_then(|r| r.schemaname()) == schema;
                    if visible == Some(q) && schema_ok {
                        hit = Some(rv);
                        true
                    } else {
                        false
                    }
                });
                match hit {
                    Some(Some(rv)) => table_or_cte(rv),
                    Some(None) => Resolved::NotATable,
                    None => Resolved::Unknown,
                }
            }
            // An unqualified column is certain only with exactly one relation in scope.
            None => {
                let mut only = None;
                let mut count = 0;
                self.each(&mut |rv, _| {
                    count += 1;
                    only = rv;
                    count > 1
                });
                match (count, only) {
                    (1, Some(rv)) => table_or_cte(rv),
                    (1, None) => Resolved::NotATable,
                    _ => Resolved::Unknown,
                }
            }
        }
    }
}

fn visible_name(rv: &RangeVar) -> Option<&str> {
    rv.alias().and_then(|a| a.aliasname()).or_else(|| rv.relname())
}

/// Walks a `FROM` item's relations without recursing into subqueries.
fn from_names<'t>(
    node: Node<'t>,
    f: &mut impl FnMut(Option<&'t RangeVar>, Option<&'t str>) -> bool,
    depth: u32,
) -> bool {
    // JOIN trees nest one level per join; a long chain of joins is legal but deep ones are
    // not worth resolving columns through.
    if depth > 64 {
        return f(None, None);
    }
    match node {
        Node::RangeVar(rv) => f(Some(rv), visible_name(rv)),
        Node::JoinExpr(j) => match j.alias().and_then(|a| a.aliasname()) {
            Some(alias) => f(None, Some(alias)),
            None => from_names(j.larg(), f, depth + 1) || from_names(j.rarg(), f, depth + 1),
        },
        Node::RangeSubselect(s) => f(None, s.alias().and_then(|a| a.aliasname())),
        Node::RangeFunction(r) => f(None, r.alias().and_then(|a| a.aliasname())),
        _ => f(None, None),
    }
}

/// `(schema, table)` qualifying a column, when the query wrote one.
pub(crate) type Qualifier<'t> = Option<(Option<&'t str>, &'t str)>;

/// `(schema, table qualifier, column)` of a column reference; `None` for `t.*` and for
/// references into composite values.
pub(crate) fn column_parts<'t>(c: &'t ColumnRef) -> Option<(Qualifier<'t>, &'t str)> {
    let mut parts: [Option<&'t str>; 3] = [None; 3];
    let mut n = 0;
    for f in c.fields() {
        let s = f.as_str()?;
        if n == 3 {
            return None;
        }
        parts[n] = Some(s);
        n += 1;
    }
    match (n, parts) {
        (1, [Some(col), _, _]) => Some((None, col)),
        (2, [Some(t), Some(col), _]) => Some((Some((None, t)), col)),
        (3, [Some(s), Some(t), Some(col)]) => Some((Some((Some(s), t)), col)),
        _ => None,
    }
}
