//! Aggregates split into a shard part and a merge part.
//!
//! Each supported aggregate call becomes one or more expressions the shards compute (its
//! "parts") and a rule the merger applies to the parts' values from all shards. DISTINCT
//! aggregates push the shard's distinct values (`array_agg(DISTINCT x)`) so the merge is
//! exact however the values are spread.

use pg_raw_parse::nodes::FuncCall;
use pg_raw_parse::Node;

use crate::error::MergeError;
use crate::lex::{self, Kind, Tok};

/// How one aggregate merges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AggKind {
    /// `count(...)`: the shards' counts summed.
    Count,
    /// `sum(x)`: the shards' sums summed, in the sum's own type.
    Sum,
    Min,
    Max,
    /// `bool_and`/`every`.
    And,
    /// `bool_or`.
    Or,
    /// `avg(x)`: parts `sum(x)`, `count(x)`.
    Avg,
    /// `count(DISTINCT x)`, `sum(DISTINCT x)`, `avg(DISTINCT x)`: part `array_agg(DISTINCT x)`.
    CountDistinct,
    SumDistinct,
    AvgDistinct,
    /// `string_agg`, `array_agg`, `jsonb_agg`, `json_agg`: parts `array_agg(value ORDER BY
    /// ...)` and one `array_agg(key ORDER BY ...)` per ordering key; the merge interleaves
    /// the shards' runs by the keys.
    List,
    /// The stddev/variance family: parts count, sum, sum of squares (numeric), var_pop.
    Var {
        sample: bool,
        sqrt: bool,
    },
}

/// Which list aggregate, and its ordering.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ListAgg {
    pub func: ListFunc,
    /// `string_agg`'s delimiter (a constant).
    pub delim: String,
    /// Per ORDER BY key: (descending, nulls first).
    pub order: Vec<(bool, bool)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ListFunc {
    String,
    Array,
    Jsonb,
    Json,
}

/// One aggregate call, planned.
#[derive(Debug, Clone)]
pub(crate) struct AggSpec {
    pub kind: AggKind,
    /// Expressions the shards compute, in order.
    pub parts: Vec<String>,
    /// The column name PostgreSQL would give the call (its function name).
    pub func: String,
    pub list: Option<ListAgg>,
}

/// Built-in aggregate names: a call to any of these is an aggregate, so one we cannot merge
/// is refused instead of being evaluated per shard.
const AGGREGATES: &[&str] = &[
    "count",
    "sum",
    "avg",
    "min",
    "max",
    "bool_and",
    "bool_or",
    "every",
    "stddev",
    "stddev_samp",
    "stddev_pop",
    "variance",
    "var_samp",
    "var_pop",
    "string_agg",
    "array_agg",
    "json_agg",
    "jsonb_agg",
    "json_agg_strict",
    "jsonb_agg_strict",
    "json_object_agg",
    "jsonb_object_agg",
    "json_object_agg_strict",
    "jsonb_object_agg_strict",
    "json_object_agg_unique",
    "jsonb_object_agg_unique",
    "json_objectagg",
    "json_arrayagg",
    "xmlagg",
    "bit_and",
    "bit_or",
    "bit_xor",
    "corr",
    "covar_pop",
    "covar_samp",
    "regr_avgx",
    "regr_avgy",
    "regr_count",
    "regr_intercept",
    "regr_r2",
    "regr_slope",
    "regr_sxx",
    "regr_sxy",
    "regr_syy",
    "percentile_cont",
    "percentile_disc",
    "mode",
    "range_agg",
    "range_intersect_agg",
    "any_value",
];

/// The lowercased function name if `f` is an aggregate call (not a window call).
pub(crate) fn aggregate_name(f: &FuncCall) -> Option<String> {
    let mut schema = None;
    let mut name = None;
    for part in f.funcname() {
        schema = name;
        name = part.as_str();
    }
    let name = name?.to_ascii_lowercase();
    let builtin = matches!(schema, None | Some("pg_catalog")) && AGGREGATES.contains(&name.as_str());
    let agg_syntax = f.agg_star || f.agg_distinct || f.agg_within_group || !f.agg_order().is_empty();
    (builtin || agg_syntax || !matches!(f.agg_filter(), Node::None)).then_some(name)
}

/// Plans an aggregate call whose text is `toks` (the call, optionally with `FILTER (...)`).
pub(crate) fn plan_call(f: &FuncCall, name: &str, sql: &str, toks: &[Tok]) -> Result<AggSpec, MergeError> {
    if f.over().is_some() {
        return Err(MergeError::unsupported(format!("window function {name}() across shards")));
    }
    if f.agg_within_group {
        return Err(MergeError::unsupported(format!("ordered-set aggregate {name}() WITHIN GROUP")));
    }
    let depth = toks.first().map_or(0, |t| t.depth);
    let open = toks
        .iter()
        .position(|t| t.kind == Kind::Open && t.depth == depth)
        .ok_or_else(|| MergeError::Syntax(format!("cannot find the arguments of {name}()")))?;
    let close = open
        + toks[open..]
            .iter()
            .position(|t| t.kind == Kind::Close && t.depth == depth)
            .ok_or_else(|| MergeError::Syntax(format!("cannot find the end of {name}()")))?;
    let whole = lex::text(sql, toks);
    let mut inner = &toks[open + 1..close];
    if f.agg_distinct {
        inner = inner.get(1..).unwrap_or_default();
    }
    let args = lex::text(sql, inner);
    // `FILTER (WHERE ...)` applies to every part alike.
    let rest = &toks[close + 1..];
    let filter = lex::text(sql, rest);
    if !rest.is_empty() && !rest[0].is_word(sql, "filter") {
        return Err(MergeError::unsupported(format!("{name}() followed by {filter:?}")));
    }
    let tail = if filter.is_empty() { String::new() } else { format!(" {filter}") };
    let one_arg = f.args().len() == 1;
    let distinct_part = || format!("array_agg(DISTINCT {args}){tail}");
    let (kind, parts) = match (name, f.agg_distinct) {
        ("count", false) => (AggKind::Count, vec![whole.to_string()]),
        ("count", true) if one_arg => (AggKind::CountDistinct, vec![distinct_part()]),
        ("sum", false) => (AggKind::Sum, vec![whole.to_string()]),
        ("sum", true) if one_arg => (AggKind::SumDistinct, vec![distinct_part()]),
        ("min", _) => (AggKind::Min, vec![whole.to_string()]),
        ("max", _) => (AggKind::Max, vec![whole.to_string()]),
        ("bool_and" | "every", _) => (AggKind::And, vec![whole.to_string()]),
        ("bool_or", _) => (AggKind::Or, vec![whole.to_string()]),
        ("avg", false) => (AggKind::Avg, vec![format!("sum({args}){tail}"), format!("count({args}){tail}")]),
        ("avg", true) if one_arg => (AggKind::AvgDistinct, vec![distinct_part()]),
        (_, false) if crate::variance::parts(name, args, &tail).is_some() => {
            let (sample, sqrt, parts) = crate::variance::parts(name, args, &tail).unwrap_or_default();
            (AggKind::Var { sample, sqrt }, parts)
        }
        ("string_agg" | "array_agg" | "jsonb_agg" | "json_agg", false) => {
            let (list, parts) = list_parts(f, name, sql, &toks[open + 1..close], &tail)?;
            return Ok(AggSpec { kind: AggKind::List, parts, func: name.to_string(), list: Some(list) });
        }
        _ => {
            let d = if f.agg_distinct { "DISTINCT " } else { "" };
            return Err(MergeError::unsupported(format!("aggregate {name}({d}...) across shards")));
        }
    };
    Ok(AggSpec { kind, parts, func: name.to_string(), list: None })
}

/// The shard parts of a list aggregate whose parenthesised tokens are `inner`.
fn list_parts(
    f: &FuncCall,
    name: &str,
    sql: &str,
    inner: &[Tok],
    tail: &str,
) -> Result<(ListAgg, Vec<String>), MergeError> {
    let depth = inner.first().map_or(0, |t| t.depth);
    let order_at = inner.iter().enumerate().position(|(i, t)| {
        t.depth == depth && t.is_word(sql, "order") && inner.get(i + 1).is_some_and(|n| n.is_word(sql, "by"))
    });
    let (args, order) = match order_at {
        Some(i) => (&inner[..i], &inner[i + 2..]),
        None => (inner, &[][..]),
    };
    let arg_spans = lex::split_commas(args, depth);
    let arg = |i: usize| arg_spans.get(i).map(|r| lex::text(sql, &args[r.clone()]));
    let value = arg(0).ok_or_else(|| MergeError::Syntax(format!("{name}() without an argument")))?;
    let func = match name {
        "string_agg" => ListFunc::String,
        "array_agg" => ListFunc::Array,
        "jsonb_agg" => ListFunc::Jsonb,
        _ => ListFunc::Json,
    };
    let delim = if func == ListFunc::String {
        match f.args().get(1) {
            Some(Node::A_Const(c)) => match c.val() {
                Some(pg_raw_parse::ConstValue::String(d)) => d.to_string(),
                _ => {
                    return Err(MergeError::unsupported(
                        "string_agg with a non-string delimiter across shards",
                    ))
                }
            },
            _ => {
                return Err(MergeError::unsupported(
                    "string_agg whose delimiter is not a constant across shards",
                ))
            }
        }
    } else {
        String::new()
    };
    if arg_spans.len() != if func == ListFunc::String { 2 } else { 1 } {
        return Err(MergeError::Syntax(format!("unexpected arguments to {name}()")));
    }
    let value = match func {
        ListFunc::Jsonb => format!("to_jsonb({value})"),
        ListFunc::Json => format!("to_json({value})"),
        _ => value.to_string(),
    };
    let order_text = lex::text(sql, order);
    let by = if order_text.is_empty() { String::new() } else { format!(" ORDER BY {order_text}") };
    let mut parts = vec![format!("array_agg({value}{by}){tail}")];
    let mut dirs = Vec::new();
    let sorts: Vec<_> = f.agg_order().iter().collect();
    let items = lex::split_commas(order, depth);
    if items.len() != sorts.len() {
        return Err(MergeError::Syntax(format!("cannot delimit ORDER BY in {name}()")));
    }
    for (sb, r) in sorts.into_iter().zip(items) {
        use pg_raw_parse::nodes::{SortByDir, SortByNulls};
        let mut key = &order[r];
        if key.len() > 2 && key[key.len() - 2].is_word(sql, "nulls") {
            key = &key[..key.len() - 2];
        }
        if key.len() > 1 && ["asc", "desc"].iter().any(|w| key[key.len() - 1].is_word(sql, w)) {
            key = &key[..key.len() - 1];
        }
        if sb.sortby_dir == SortByDir::SORTBY_USING {
            return Err(MergeError::unsupported(format!("ORDER BY ... USING in {name}() across shards")));
        }
        let desc = sb.sortby_dir == SortByDir::SORTBY_DESC;
        let nulls_first = match sb.sortby_nulls {
            SortByNulls::SORTBY_NULLS_FIRST => true,
            SortByNulls::SORTBY_NULLS_LAST => false,
            _ => desc,
        };
        dirs.push((desc, nulls_first));
        parts.push(format!("array_agg({}{by}){tail}", lex::text(sql, key)));
    }
    Ok((ListAgg { func, delim, order: dirs }, parts))
}
