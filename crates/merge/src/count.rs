//! A cross-shard SELECT's LIMIT and OFFSET: the merge needs their values (each shard returns
//! `LIMIT + OFFSET` rows, the merge skips and limits). PostgreSQL folds a constant
//! expression there before it runs the query (`LIMIT '15'::int8`, `LIMIT 2 + 3`), so the
//! same constants are folded here, with PostgreSQL's integer rules; a parameter is bound per
//! execution; anything else is refused rather than guessed.

use pg_raw_parse::nodes::A_Expr_Kind;
use pg_raw_parse::{ConstValue, Node};

use crate::error::MergeError;

/// A LIMIT or OFFSET: absent (or `ALL`/NULL), a constant, or a parameter (`$n`, 1-based).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Count {
    Absent,
    Const(u64),
    Param(usize),
}

impl Count {
    pub(crate) fn value(self) -> Option<u64> {
        match self {
            Count::Const(n) => Some(n),
            _ => None,
        }
    }

    /// As SQL in the shard's `LIMIT`: parameters cast the way PostgreSQL types them.
    pub(crate) fn sql(self) -> String {
        match self {
            Count::Const(n) => n.to_string(),
            Count::Param(p) => format!("${p}::int8"),
            Count::Absent => "0".into(),
        }
    }
}

pub(crate) fn count_of(node: Node<'_>, what: &str) -> Result<Count, MergeError> {
    match node {
        Node::None => Ok(Count::Absent),
        Node::A_Const(c) if c.isnull => Ok(Count::Absent),
        Node::ParamRef(p) => usize::try_from(p.number)
            .ok()
            .filter(|n| *n >= 1)
            .map(Count::Param)
            .ok_or_else(|| MergeError::Syntax(format!("bad parameter in {what}"))),
        Node::TypeCast(t) if matches!(t.arg(), Node::ParamRef(_)) => count_of(t.arg(), what),
        _ => {
            let n =
                fold(node).map_err(|why| MergeError::unsupported(format!("{what} {why} across shards")))?;
            u64::try_from(n)
                .map(Count::Const)
                .map_err(|_| MergeError::unsupported(format!("negative {what} across shards")))
        }
    }
}

/// The value of a constant integer expression: integer literals, string literals PostgreSQL
/// reads as integers, casts to `smallint`/`integer`/`bigint` (range-checked as PostgreSQL
/// does), unary minus and `+ - * / %` on integers. `Err` says what is not folded.
fn fold(node: Node<'_>) -> Result<i64, &'static str> {
    match node {
        Node::A_Const(c) => match c.val() {
            Some(ConstValue::Integer(n)) => Ok(i64::from(n)),
            // Integer literals past int4 are parsed as Float; a fraction is not folded here.
            Some(ConstValue::Float(s) | ConstValue::String(s)) => {
                integer_text(s).ok_or("that is not an integer")
            }
            _ => Err("that is not an integer"),
        },
        Node::TypeCast(t) => {
            let value = fold(t.arg())?;
            let target = t
                .type_name()
                .filter(|t| t.array_bounds().is_empty())
                .and_then(|t| t.names().iter().next_back().and_then(|n| n.sval()));
            let fits = match target {
                Some("int2") => i16::try_from(value).is_ok(),
                Some("int4") => i32::try_from(value).is_ok(),
                Some("int8") => true,
                _ => return Err("cast to a type other than smallint, integer or bigint"),
            };
            fits.then_some(value).ok_or("out of its type's range")
        }
        Node::A_Expr(e) if e.kind == A_Expr_Kind::AEXPR_OP => {
            let name: Vec<_> = e.name().iter().filter_map(|n| n.as_str()).collect();
            let right = fold(e.rexpr())?;
            if matches!(e.lexpr(), Node::None) {
                return match name.as_slice() {
                    ["-"] => right.checked_neg().ok_or("out of range"),
                    ["+"] => Ok(right),
                    _ => Err("with an operator other than + - * / %"),
                };
            }
            let left = fold(e.lexpr())?;
            let value = match name.as_slice() {
                ["+"] => left.checked_add(right),
                ["-"] => left.checked_sub(right),
                ["*"] => left.checked_mul(right),
                // PostgreSQL's integer division and modulo truncate toward zero, as Rust's.
                ["/"] if right != 0 => left.checked_div(right),
                ["%"] if right != 0 => left.checked_rem(right),
                ["/" | "%"] => return Err("dividing by zero"),
                _ => return Err("with an operator other than + - * / %"),
            };
            value.ok_or("out of range")
        }
        _ => Err("that is neither a constant nor a parameter"),
    }
}

/// Text PostgreSQL's `int8in` reads as an integer: optional blanks and sign around decimal
/// digits.
fn integer_text(s: &str) -> Option<i64> {
    let t = s.trim_matches(|c: char| c.is_ascii_whitespace());
    let digits = t.strip_prefix(['+', '-']).unwrap_or(t);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    t.strip_prefix('+').unwrap_or(t).parse().ok()
}

#[cfg(test)]
mod tests {
    use crate::plan::MergePlan;

    fn shard(sql: &str) -> String {
        MergePlan::for_select(sql).expect(sql).shard_sql().to_string()
    }

    #[test]
    fn constant_limits_are_folded_as_postgresql_folds_them() {
        assert_eq!(
            shard("SELECT a FROM t ORDER BY a LIMIT '15'::int8"),
            "SELECT a FROM t ORDER BY a LIMIT 15"
        );
        assert_eq!(
            shard("SELECT a FROM t ORDER BY a LIMIT CAST(' 4' AS integer) OFFSET '3'::smallint"),
            "SELECT a FROM t ORDER BY a LIMIT 7"
        );
        assert_eq!(
            shard("SELECT a FROM t ORDER BY a LIMIT 2 + 3 * 2 OFFSET 10 - 2 * 5"),
            "SELECT a FROM t ORDER BY a LIMIT 8"
        );
        assert_eq!(shard("SELECT a FROM t ORDER BY a LIMIT '5'"), "SELECT a FROM t ORDER BY a LIMIT 5");
        for refused in [
            "SELECT a FROM t ORDER BY a LIMIT '40000'::int2",
            "SELECT a FROM t ORDER BY a LIMIT '1.5'::int8",
            "SELECT a FROM t ORDER BY a LIMIT 1 / 0",
            "SELECT a FROM t ORDER BY a LIMIT '3'::numeric",
            "SELECT a FROM t ORDER BY a LIMIT -(2)",
        ] {
            let e = MergePlan::for_select(refused).expect_err(refused);
            assert_eq!(e.sqlstate(), "0A000", "{refused}: {e}");
        }
    }
}
