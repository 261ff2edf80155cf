//! SQL analysis for pgvia: what a query does, read from PostgreSQL's own parser.
//!
//! [`Analyzer::analyze`] turns query text (and, for a Parse message, its parameter types)
//! into an immutable, shareable [`Analysis`]: per statement its [kind](StatementKind),
//! whether it must run on the primary, the [session state](SessionEffect) it changes, the
//! [tables](TableRef) it touches, the [equality predicates](Predicate), the
//! `WHERE` clause as a [condition tree](Condition) and
//! [inserted values](InsertValues) shard routing needs; and [comment hints](Hints).
//!
//! The parser is libpg_query's raw parse tree, read in place through `pg_raw_parse` (no
//! Protobuf), and only the summary is kept. Results are cached by text. Untrusted input is
//! guarded: over-long queries are not parsed, deep or huge trees stop the walk, parse
//! errors and panics in the bindings are caught; all of these get the conservative answer
//! (writes, no shard key) and are counted in [`AnalyzerStats`]. No I/O happens here.
//!
//! ```
//! use route::{Analyzer, AnalyzerOptions, PredicateOp, SessionEffect, StatementKind, Value};
//!
//! let analyzer = Analyzer::new(AnalyzerOptions::default()).expect("default options are valid");
//!
//! // A Parse message: text plus parameter types (20 = int8).
//! let a = analyzer.analyze("UPDATE accounts SET balance = balance - $2 WHERE id = $1", &[20, 1700]);
//! assert!(a.writes());
//! let update = a.statement(0).unwrap();
//! assert_eq!(update.kind(), StatementKind::Update { returning: false });
//! let key = update.predicates().next().unwrap();
//! assert_eq!((key.column(), key.op()), ("id", PredicateOp::Equals));
//! assert_eq!(key.values().next(), Some(Value::Param { number: 1, type_oid: 20 }));
//!
//! // A simple Query with two statements; the SET outlives the transaction.
//! let a = analyzer.analyze("SET search_path = app; SELECT * FROM users", &[]);
//! assert!(!a.writes());
//! let effects: Vec<_> = a.session_effects().collect();
//! assert_eq!(effects, [SessionEffect::Set { name: Some("search_path"), value: Some("app") }]);
//! ```

mod analysis;
mod analyzer;
mod cache;
mod control;
mod exprs;
mod functions;
mod guard;
mod hints;
mod kind;
pub mod lex;
mod model;
mod options;
mod predicates;
mod scope;
mod scratch;
mod shape;
mod shard_keys;
mod stats;
mod store;
mod tag;
mod user_functions;
mod walk;

pub use analysis::{
    Analysis, Children, Condition, Hints, InsertValues, NestedWrite, Predicate, SessionEffect, Statement,
    TableRef, Value,
};
pub use analyzer::Analyzer;
pub use model::{
    Access, CopyDirection, DiscardTarget, IsolationLevel, LockOp, LockScope, NestedKind, Outcome,
    PredicateOp, Role, RowLock, SetScope, StatementKind, TransactionOptions,
};
pub use options::{Admission, AnalyzerOptions, OptionsError};
pub use shape::constants;
pub use stats::AnalyzerStats;
