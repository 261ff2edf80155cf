//! Where a sharded database's tables live, as the merge planner needs it to push co-located
//! subqueries, CTEs and window functions down to the shards (`merge::Placement`).

use route::{Analysis, StatementKind};

use crate::config::{ShardingRules, UnshardedTables};

/// The merge planner's placement from the compiled rules. Two sharded tables are co-located
/// when their key type and sharding function are the same (equal keys, same shard). Tables
/// listed nowhere hold every row on every shard only when such tables are omnisharded and no
/// schema is pinned to one shard (an unqualified name could be a pinned schema's table).
pub fn merge_placement(rules: &ShardingRules) -> merge::Placement {
    let sharded = rules
        .tables
        .iter()
        .map(|t| merge::ShardedTable {
            schema: t.schema.clone(),
            name: t.name.clone(),
            column: t.column.clone(),
            colocation: format!("{:?} {:?}", t.key_type, t.function),
        })
        .collect();
    let others_everywhere = rules.unsharded == UnshardedTables::Omnisharded && rules.schemas.is_empty();
    merge::Placement { sharded, others_everywhere }
}

/// Whether what `shards` shards compute from their own rows is the answer of the analysed
/// statement (`merge::prove_placement`), else 0A000 naming the construct: a read on one
/// shard, or a write on one shard or many, whose join or subquery reads tables sharded
/// otherwise would be computed per shard. A SELECT on several shards is the merge planner's,
/// judged by the same rules. Only a statement naming a sharded table and either several
/// tables, a subquery, a join, or a FROM (USING) list in a write can fail: the others cost a
/// byte scan, not a parse.
pub fn prove_placement(
    rules: &ShardingRules,
    analysis: &Analysis,
    sql: &[u8],
    shards: usize,
) -> Result<(), merge::MergeError> {
    if rules.shard_count < 2 || analysis.len() != 1 {
        return Ok(());
    }
    let Some(stmt) = analysis.statement(0) else { return Ok(()) };
    if !stmt.tables().any(|t| rules.table(t.schema, t.name).is_some()) {
        // Tables on every shard, or in a schema pinned to the one shard it runs on.
        return Ok(());
    }
    let several = stmt.tables().nth(1).is_some();
    // `COPY (SELECT ...)` holds one SELECT: a second is a subquery.
    let judged = match stmt.kind() {
        StatementKind::Select { .. } => {
            shards < 2 && (several || nested_select(sql) || has_word(sql, b"join"))
        }
        StatementKind::Update { .. } => several || has_word(sql, b"select") || has_word(sql, b"from"),
        StatementKind::Delete { .. } => several || has_word(sql, b"select") || has_word(sql, b"using"),
        StatementKind::Insert { .. } => several || has_word(sql, b"select"),
        StatementKind::Merge { .. } => true,
        StatementKind::Copy { .. } => several || has_word(sql, b"join") || nested_select(sql),
        _ => false,
    };
    if !judged {
        return Ok(());
    }
    let text = std::str::from_utf8(sql)
        .map_err(|_| merge::MergeError::Unsupported("a sharded query that is not valid UTF-8".into()))?;
    let spread = if shards > 1 { merge::Spread::Many } else { merge::Spread::One };
    merge::prove_placement(text, &merge_placement(rules), spread)
}

/// Whether `sql` has a second `SELECT` (any case): a subquery, CTE or derived table.
fn nested_select(sql: &[u8]) -> bool {
    sql.windows(6).filter(|w| w.eq_ignore_ascii_case(b"select")).nth(1).is_some()
}

/// Whether `sql` has `word` (any case) anywhere, in a literal too (then a parse tells).
fn has_word(sql: &[u8], word: &[u8]) -> bool {
    sql.windows(word.len()).any(|w| w.eq_ignore_ascii_case(word))
}
