//! The boundary between untrusted input and the parser: length limit, panic catching,
//! parse errors, and the walk's depth and work limits, all turned into an [`Outcome`].
//!
//! Nothing below this boundary may take the proxy down: `pg_raw_parse` 0.1.0 panics on some
//! trees (typed list accessors meeting an unexpected node), so every parse and walk runs
//! under `catch_unwind`, and whatever goes wrong becomes the conservative decision.

use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::analysis::Analysis;
use crate::hints;
use crate::model::Outcome;
use crate::scratch::Scratch;
use crate::store::HintData;
use crate::user_functions::UserFunctions;
use crate::walk::{Abort, Limits, Walker};

/// Everything analysis needs besides the query: compiled from the options once.
pub(crate) struct Engine {
    pub fns: UserFunctions,
    pub limits: Limits,
    pub max_query_length: usize,
}

/// Work units allowed per byte of query: generous for any real query (a node costs one),
/// small enough that adversarial nesting or CTE fan-out stays linear in the query size.
const BUDGET_PER_BYTE: u64 = 64;
const BUDGET_BASE: u64 = 100_000;

impl Engine {
    /// Analyses `sql`; never panics, never fails.
    pub fn analyze(&self, sql: &str, param_oids: &[u32]) -> Analysis {
        guarded(|| Scratch::with(|s| self.analyze_in(s, sql, param_oids)))
    }

    fn analyze_in(&self, s: &mut Scratch, sql: &str, param_oids: &[u32]) -> Analysis {
        let hints = hints::scan(sql, s);
        if sql.len() > self.max_query_length {
            return s.finish_conservative(Outcome::TooLong, hints);
        }
        let hints_end = s.arena.len();
        let walked = catch_unwind(AssertUnwindSafe(|| parse_and_walk(self, s, sql, param_oids)));
        let outcome = match walked {
            Ok(Ok(())) => return s.finish(Outcome::Parsed, hints),
            Ok(Err(outcome)) => outcome,
            Err(_) => Outcome::Failed,
        };
        s.arena.truncate(hints_end);
        s.finish_conservative(outcome, hints)
    }
}

/// Runs `f`, turning a panic into the conservative decision.
fn guarded(f: impl FnOnce() -> Analysis) -> Analysis {
    catch_unwind(AssertUnwindSafe(f))
        .unwrap_or_else(|_| Analysis::conservative(Outcome::Failed, HintData::default(), Box::default()))
}

fn parse_and_walk(engine: &Engine, s: &mut Scratch, sql: &str, param_oids: &[u32]) -> Result<(), Outcome> {
    // A NUL byte (which the protocol cannot carry anyway) is reported as a parse error too.
    let tree = pg_raw_parse::parse(sql).map_err(|_| Outcome::ParseError)?;
    let budget = BUDGET_BASE + BUDGET_PER_BYTE * sql.len() as u64;
    let mut w = Walker::new(s, &engine.fns, param_oids, engine.limits, budget);
    for raw in tree.iter() {
        let start = usize::try_from(raw.stmt_location).unwrap_or(0).min(sql.len());
        let end = match usize::try_from(raw.stmt_len) {
            Ok(0) | Err(_) => sql.len(),
            Ok(len) => (start + len).min(sql.len()),
        };
        w.statement(raw.stmt(), (start as u32, end as u32))
            .map_err(|Abort::TooComplex| Outcome::TooComplex)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::user_functions::UserFunctions;

    fn engine() -> Engine {
        Engine {
            fns: UserFunctions::default(),
            limits: Limits { max_depth: 100, max_values: 100 },
            max_query_length: 1000,
        }
    }

    #[test]
    fn a_panic_becomes_the_conservative_decision() {
        let a = guarded(|| panic!("a defect in the bindings"));
        assert_eq!(a.outcome(), Outcome::Failed);
        assert!(a.writes() && a.is_empty());
    }

    #[test]
    fn the_scratch_survives_a_panic_half_way() {
        let r = catch_unwind(|| {
            Scratch::with(|s| {
                s.intern("left behind");
                s.stmts.clear();
                panic!("mid-walk");
            })
        });
        assert!(r.is_err());
        let a = engine().analyze("SELECT * FROM t WHERE id = 1", &[]);
        assert_eq!(a.outcome(), Outcome::Parsed);
        assert_eq!(a.statement(0).map(|s| s.tables().count()), Some(1));
        assert!(!a.text.contains("left behind"));
    }
}
