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
/// tables (or one twice), a subquery, a join, or a FROM (USING) list in a write can fail: the
/// others cost a byte scan, not a parse.
pub fn prove_placement(
    rules: &ShardingRules,
    analysis: &Analysis,
    sql: &[u8],
    shards: usize,
) -> Result<(), merge::MergeError> {
    if rules.shard_count < 2 || analysis.len() != 1 {
        return Ok(());
    }
    let hints = analysis.hints();
    if hints.shard.is_some() || hints.shard_key.is_some() {
        // The client named the shard: its answer is the one asked for (the way out every
        // refusal below suggests).
        return Ok(());
    }
    let Some(stmt) = analysis.statement(0) else { return Ok(()) };
    if !stmt.tables().any(|t| rules.table(t.schema, t.name).is_some()) {
        // Tables on every shard, or in a schema pinned to the one shard it runs on.
        return Ok(());
    }
    // The analysis names each table once: a self-join shows as its name written twice.
    let several = stmt.tables().nth(1).is_some()
        || stmt.tables().next().is_some_and(|t| count_word(sql, t.name.as_bytes()) > 1);
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

/// Whether `sql` has `word` (any case) as a word, in a literal too (then a parse tells).
fn has_word(sql: &[u8], word: &[u8]) -> bool {
    count_word(sql, word) > 0
}

/// How many times `word` (any case) is in `sql` as a word of its own (not inside a longer
/// name: a table `t` is not in `SELECT`), and not qualifying a column (`"orders"."id"`, as
/// ORMs write single-table queries), stopping at two.
fn count_word(sql: &[u8], word: &[u8]) -> usize {
    let part = |b: u8| b.is_ascii_alphanumeric() || b == b'_' || b == b'$' || b >= 0x80;
    if word.is_empty() {
        return 0;
    }
    sql.windows(word.len())
        .enumerate()
        .filter(|(at, w)| {
            w.eq_ignore_ascii_case(word)
                && !at.checked_sub(1).and_then(|i| sql.get(i)).is_some_and(|b| part(*b))
                && !sql.get(at + word.len()).is_some_and(|b| part(*b))
                && !qualifies(&sql[at + word.len()..])
        })
        .take(2)
        .count()
}

/// Whether what follows a name makes it a qualifier: `.` or `".`.
fn qualifies(after: &[u8]) -> bool {
    matches!(after, [b'.', ..] | [b'"', b'.', ..])
}

#[cfg(test)]
mod tests {
    use super::count_word;

    #[test]
    fn words_are_counted_whole() {
        assert_eq!(count_word(b"SELECT * FROM t WHERE t.id = 1", b"t"), 1);
        assert_eq!(count_word(br#"SELECT "t"."id" FROM "t" WHERE "t"."id" = 1"#, b"t"), 1);
        assert_eq!(count_word(b"SELECT * FROM t a, t b", b"t"), 2);
        assert_eq!(count_word(b"SELECT * FROM public.t a, public.t b", b"t"), 2);
        assert_eq!(count_word(b"SELECT * FROM t WHERE id = 1", b"t"), 1);
        assert_eq!(count_word(b"SELECT joined FROM x JOIN y", b"join"), 1);
        assert_eq!(count_word(b"select * from orders o, orders_old p", b"orders"), 1);
        assert_eq!(count_word(b"", b"t"), 0);
    }
}
