//! Where a sharded database's tables live, as the merge planner needs it to push co-located
//! subqueries, CTEs and window functions down to the shards (`merge::Placement`).

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
