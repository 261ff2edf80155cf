//! pgvia's merge engine for cross-shard reads, with no I/O: a SELECT is planned into the
//! query each shard runs and a merge that turns the shards' rows into exactly what one
//! PostgreSQL holding all the rows would return (rows, order, column types, `SELECT n`).
//!
//! ```text
//! let plan = MergePlan::for_select_placed(sql, &placement)?; // Unsupported(..) => 0A000
//! send plan.shard_sql() to every shard;               // plan.is_plain(): nothing to merge
//! let mut m = Merger::new(&plan, shards, MergeOptions::default());
//! m.set_spill(Box::new(DirStore::new(spill_dir)));    // optional: spill past the budget
//! if LIMIT/OFFSET are parameters (plan.limit_params()): m.bind_params(&bind_values)?
//! per shard:  RowDescription body -> m.row_description(shard, body)?
//!             DataRow body        -> m.data_row(shard, body)?
//!             CommandComplete     -> m.shard_done(shard)?
//! after feeding: m.drain(&mut out)? writes finished frames (RowDescription once, DataRows,
//!             CommandComplete at the end) and returns NeedInput, Finished, or Full (a
//!             slice of rows is ready: send it, then drain again);
//!             m.needs_input(shard) says whose rows it waits for (an ORDER BY merge waits
//!             only for shards with nothing buffered, so read those first).
//! ```
//!
//! The RowDescription comes first, as soon as one shard has described its columns: in the
//! extended protocol it is the answer to Describe (a session whose client did not Describe
//! drops that frame), and Execute's output is the DataRows and CommandComplete after it.
//!
//! Every error carries its SQLSTATE ([`MergeError::sqlstate`]). Supported: plain
//! concatenation; ORDER BY on columns and expressions (hidden sort columns), ASC/DESC, NULLS
//! FIRST/LAST; LIMIT/OFFSET constants or parameters (pushed as `LIMIT n+offset`); DISTINCT, DISTINCT ON;
//! `count`, `count(DISTINCT)`, `sum`, `sum(DISTINCT)`, `min`, `max`, `avg`, `avg(DISTINCT)`,
//! `bool_and`, `bool_or`, `every`, the `stddev`/`variance` family, `string_agg`/`array_agg`/`jsonb_agg`/`json_agg` with their
//! ORDER BY (all with FILTER); GROUP BY on columns and expressions;
//! HAVING of comparisons over aggregates, grouping columns and constants; subqueries, CTEs
//! and window functions co-located on the shard key ([`Placement`]) pushed down whole; CTEs
//! and WHERE subqueries that need other shards computed first and substituted
//! ([`ComputeFirst`]: the caller runs each query it asks for through a merge).
//! Past the memory budget, grouping, the sort after grouping and DISTINCT spill to a
//! [`SpillStore`]. See `docs/sharding.md` for what is refused and why.

mod accum;
mod agg;
mod array_text;
mod binary;
mod colocate;
mod column;
mod compute_first;
mod count;
mod cte;
mod error;
mod having;
mod joins;
mod lex;
mod listagg;
mod merger;
mod numeric;
mod plan;
mod proof;
mod rewrite;
mod scan;
mod spill;
mod spill_dir;
mod spill_file;
mod substitute;
mod value;
mod variance;
mod with_clause;

pub use colocate::{Placement, ShardedTable, Spread};
pub use compute_first::{ComputeFirst, Computed, Failure, Step};
pub use cte::{next_cte, Cte, CteChoice};
pub use error::MergeError;
pub use merger::{Drained, MergeOptions, Merger, TextOrder};
pub use plan::MergePlan;
pub use proof::prove_placement;
pub use spill::{MemStore, SpillFile, SpillStore};
pub use spill_dir::{remove_leftovers, Leftover, SpillDir};
pub use spill_file::DirStore;
pub use substitute::{
    replacement, substitute, uncorrelated_subqueries, Subquery, SubqueryKind, MAX_SUBSTITUTED_BYTES,
    MAX_SUBSTITUTED_ROWS,
};
