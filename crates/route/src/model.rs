//! The small vocabulary an [`Analysis`](crate::Analysis) is written in.
//!
//! Everything here is `Copy` and free of strings: names and values live in the analysis and
//! are handed out as borrowed `&str` by the views in [`crate::analysis`].

/// What one statement of a query string is.
///
/// Coarse on purpose: a pooler needs to tell reads from writes, transaction boundaries from
/// session changes, and little else. [`Statement::tag`](crate::Statement::tag) gives the
/// PostgreSQL parse node name when finer detail is wanted (logs, statistics).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StatementKind {
    /// `SELECT`, `VALUES`, `TABLE`, set operations; `locking` is the strongest row lock
    /// (`FOR UPDATE`, `FOR SHARE`, ...) taken anywhere in it.
    Select { locking: Option<RowLock> },
    /// `INSERT`.
    Insert { returning: bool },
    /// `UPDATE`.
    Update { returning: bool },
    /// `DELETE`.
    Delete { returning: bool },
    /// `MERGE`.
    Merge { returning: bool },
    /// `COPY`; `stdio` when the data flows through the connection (`STDIN`/`STDOUT`) rather
    /// than a server-side file or program.
    Copy { direction: CopyDirection, stdio: bool },
    /// `CREATE [TEMP] TABLE`, `CREATE TABLE ... AS`, `SELECT ... INTO`.
    CreateTable { temporary: bool, as_select: bool },
    /// Any other schema, catalog or cluster change: `CREATE`, `ALTER`, `DROP`, `GRANT`,
    /// `COMMENT`, `TRUNCATE`, `REINDEX`, `CLUSTER`, `REFRESH MATERIALIZED VIEW`,
    /// `ALTER SYSTEM`, `CREATE DATABASE`, roles, ... Always a write.
    Ddl,
    /// `BEGIN` or `START TRANSACTION`, with the options it was given.
    Begin(TransactionOptions),
    /// `COMMIT` / `END`; `chain` for `AND CHAIN`.
    Commit { chain: bool },
    /// `ROLLBACK` / `ABORT`; `chain` for `AND CHAIN`.
    Rollback { chain: bool },
    /// `SAVEPOINT name`.
    Savepoint,
    /// `RELEASE [SAVEPOINT] name`.
    Release,
    /// `ROLLBACK TO [SAVEPOINT] name`.
    RollbackToSavepoint,
    /// `PREPARE TRANSACTION 'gid'`.
    PrepareTransaction,
    /// `COMMIT PREPARED 'gid'`.
    CommitPrepared,
    /// `ROLLBACK PREPARED 'gid'`.
    RollbackPrepared,
    /// `SET [SESSION | LOCAL] name ...`, `SET ROLE`, `SET SESSION AUTHORIZATION`,
    /// `SET TIME ZONE`, `SET SCHEMA`, `SET NAMES`, `SET SESSION CHARACTERISTICS`.
    Set { scope: SetScope },
    /// `SET TRANSACTION ...`: applies to the current transaction only.
    SetTransaction(TransactionOptions),
    /// `RESET name` / `RESET ALL`.
    Reset,
    /// `SHOW name`.
    Show,
    /// `DISCARD ALL | PLANS | SEQUENCES | TEMP`.
    Discard(DiscardTarget),
    /// `LISTEN channel`.
    Listen,
    /// `UNLISTEN channel` / `UNLISTEN *`.
    Unlisten,
    /// `NOTIFY channel [, payload]`.
    Notify,
    /// `PREPARE name AS ...` (SQL level, not the protocol's Parse).
    Prepare,
    /// `EXECUTE name (...)`.
    Execute,
    /// `DEALLOCATE [PREPARE] name | ALL`.
    Deallocate,
    /// `DECLARE name CURSOR ...`; `hold` for `WITH HOLD`.
    DeclareCursor { hold: bool },
    /// `FETCH` / `MOVE`.
    Fetch,
    /// `CLOSE name | ALL`.
    CloseCursor,
    /// `LOCK [TABLE] ...`.
    Lock,
    /// `VACUUM`, with or without `ANALYZE`.
    Vacuum,
    /// `ANALYZE` on its own.
    Analyze,
    /// `CALL procedure(...)`.
    Call,
    /// `DO $$ ... $$`.
    Do,
    /// `EXPLAIN [ANALYZE]`; [`Statement::target`](crate::Statement::target) is the explained
    /// statement's kind. Without `ANALYZE` nothing runs: it does not write and has no session
    /// effects, whatever it explains.
    Explain { analyze: bool },
    /// `LOAD 'library'`.
    Load,
    /// `CHECKPOINT`.
    Checkpoint,
    /// A statement node these bindings do not know; treated as a write.
    Other,
}

/// Row-level lock strength of `SELECT ... FOR ...`, weakest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RowLock {
    /// `FOR KEY SHARE`.
    KeyShare,
    /// `FOR SHARE`.
    Share,
    /// `FOR NO KEY UPDATE`.
    NoKeyUpdate,
    /// `FOR UPDATE`.
    Update,
}

/// Which way a `COPY` moves data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CopyDirection {
    /// `COPY ... FROM`: rows go into a table.
    From,
    /// `COPY ... TO`: rows come out of a table or query.
    To,
}

/// Whether a `SET` lasts for the session or for the current transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SetScope {
    /// `SET` or `SET SESSION`.
    Session,
    /// `SET LOCAL`.
    Local,
}

/// What `DISCARD` throws away.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DiscardTarget {
    /// `DISCARD ALL`.
    All,
    /// `DISCARD PLANS`.
    Plans,
    /// `DISCARD SEQUENCES`.
    Sequences,
    /// `DISCARD TEMP`.
    Temp,
}

/// Options of `BEGIN`, `START TRANSACTION` and `SET TRANSACTION`; `None` where not given.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct TransactionOptions {
    /// `ISOLATION LEVEL ...`.
    pub isolation: Option<IsolationLevel>,
    /// `READ ONLY` (true) or `READ WRITE` (false).
    pub read_only: Option<bool>,
    /// `DEFERRABLE` (true) or `NOT DEFERRABLE` (false).
    pub deferrable: Option<bool>,
}

/// Transaction isolation levels as PostgreSQL spells them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IsolationLevel {
    /// `READ UNCOMMITTED` (behaves as read committed in PostgreSQL).
    ReadUncommitted,
    /// `READ COMMITTED`.
    ReadCommitted,
    /// `REPEATABLE READ`.
    RepeatableRead,
    /// `SERIALIZABLE`.
    Serializable,
}

/// How a statement uses a table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Access {
    /// Only read.
    Read,
    /// Changed: rows written, or the table's definition created, altered, locked or dropped.
    Write,
    /// Both read and changed in the same statement (e.g. `UPDATE t ... FROM t`).
    ReadWrite,
}

impl Access {
    pub(crate) fn merge(self, other: Access) -> Access {
        if self == other {
            self
        } else {
            Access::ReadWrite
        }
    }

    /// True for [`Access::Write`] and [`Access::ReadWrite`].
    pub fn writes(self) -> bool {
        !matches!(self, Access::Read)
    }
}

/// Whether an advisory lock lives until the session ends or until the transaction ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LockScope {
    /// `pg_advisory_lock*`, `pg_try_advisory_lock*`, `pg_advisory_unlock*`.
    Session,
    /// `pg_advisory_xact_lock*`, `pg_try_advisory_xact_lock*`.
    Transaction,
}

/// What an advisory lock function does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LockOp {
    /// Takes (or, for the `try` variants, may take) a lock.
    Acquire,
    /// Releases one lock.
    Release,
    /// `pg_advisory_unlock_all()`.
    ReleaseAll,
}

/// How a predicate compares its column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PredicateOp {
    /// `column = value` (either side).
    Equals,
    /// `column IN (v1, v2, ...)` or `column = ANY(ARRAY[v1, v2, ...])`.
    In,
    /// `column = ANY(value)` where the value is one array (typically `$1`).
    AnyArray,
    /// `column < value` (or `value > column`).
    Less,
    /// `column <= value`, and the upper half of `BETWEEN`.
    LessEq,
    /// `column > value`.
    Greater,
    /// `column >= value`, and the lower half of `BETWEEN`.
    GreaterEq,
}

/// Where a hint asks the query to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// `role=primary`.
    Primary,
    /// `role=replica`.
    Replica,
}

/// How far analysis got. Anything but [`Outcome::Parsed`] is a conservative decision: the
/// analysis says "writes" and names no tables, effects or predicates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// Parsed and summarised.
    Parsed,
    /// PostgreSQL's parser rejected the text; the server will report the error itself.
    ParseError,
    /// Longer than `max_query_length`: not parsed.
    TooLong,
    /// Nested deeper, or bigger, than analysis is allowed to walk.
    TooComplex,
    /// An internal failure (a panic in the parser bindings) was caught.
    Failed,
    /// Not read: the text has a backslash and the session's `standard_conforming_strings`
    /// is off (or may be), so PostgreSQL reads its strings with rules the parser here does
    /// not follow (see [`Analyzer::for_session`](crate::Analyzer::for_session)).
    NonstandardStrings,
}

impl Outcome {
    /// A short lowercase name for logs and statistics.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Parsed => "parsed",
            Outcome::ParseError => "parse_error",
            Outcome::TooLong => "too_long",
            Outcome::TooComplex => "too_complex",
            Outcome::Failed => "failed",
            Outcome::NonstandardStrings => "nonstandard_strings",
        }
    }
}

/// The kind of a data-modifying statement inside another (a `WITH` query, a subquery, the
/// body of `EXPLAIN ANALYZE` or `COPY (...)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NestedKind {
    Insert,
    Update,
    Delete,
    Merge,
}
