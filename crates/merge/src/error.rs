//! The merge engine's one error type, each variant with the SQLSTATE the client gets.

use thiserror::Error;

/// Why a statement cannot be merged, or why a merge stopped.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum MergeError {
    /// A construct the engine cannot merge exactly; the message names it (SQLSTATE 0A000).
    #[error("cross-shard query not supported: {0}")]
    Unsupported(String),
    /// The statement did not parse, or is not one SELECT.
    #[error("cannot plan cross-shard query: {0}")]
    Syntax(String),
    /// Grouping, sorting or distinct state grew past the configured budget (SQLSTATE 53200,
    /// `out_of_memory`: the merge ran out of the memory it was allowed, not the machine's).
    #[error(
        "cross-shard merge needs more than its memory budget of {budget} bytes (setting merge_memory_budget; spilling to disk is off: merge_spill)"
    )]
    MemoryBudget { budget: usize },
    /// Spilling is on, but one group's state (a `count(DISTINCT)` set, an `array_agg` list)
    /// alone outgrew the budget: it cannot be split across files (SQLSTATE 53200).
    #[error(
        "cross-shard merge needs more than its memory budget of {budget} bytes (setting merge_memory_budget) even spilling to disk: one group's aggregate state is larger"
    )]
    GroupTooLarge { budget: usize },
    /// Writing or reading a spill file failed (SQLSTATE 58030).
    #[error("cross-shard merge could not use its spill file: {0}")]
    Spill(String),
    /// Two shards described a column with different types (SQLSTATE 42804).
    #[error("shards disagree on the type of column {column}: type OID {first} vs {other} (schema drift?)")]
    TypeMismatch { column: usize, first: u32, other: u32 },
    /// A value a shard sent could not be read as its declared type (SQLSTATE 22P02).
    #[error("cannot read a shard's value of type {oid}: {why}")]
    BadValue { oid: u32, why: String },
    /// Merged value out of its type's range, e.g. a bigint sum (SQLSTATE 22003).
    #[error("{0} out of range")]
    OutOfRange(&'static str),
    /// A scalar subquery computed first returned more than one row (SQLSTATE 21000, as
    /// PostgreSQL reports it).
    #[error("more than one row returned by a subquery used as an expression")]
    Cardinality,
    /// The caller broke the feeding protocol (a row before the description, an unknown shard).
    #[error("merge fed out of order: {0}")]
    Protocol(String),
}

impl MergeError {
    /// The SQLSTATE to put in the client's `ErrorResponse`.
    pub fn sqlstate(&self) -> &'static str {
        match self {
            MergeError::Unsupported(_) => "0A000",
            MergeError::Syntax(_) => "42601",
            MergeError::MemoryBudget { .. } | MergeError::GroupTooLarge { .. } => "53200",
            MergeError::Spill(_) => "58030",
            MergeError::TypeMismatch { .. } => "42804",
            MergeError::BadValue { .. } => "22P02",
            MergeError::OutOfRange(_) => "22003",
            MergeError::Cardinality => "21000",
            MergeError::Protocol(_) => "XX000",
        }
    }

    pub(crate) fn unsupported(what: impl Into<String>) -> MergeError {
        MergeError::Unsupported(what.into())
    }
}
