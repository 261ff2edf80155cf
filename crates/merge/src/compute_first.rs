//! The order in which a refused cross-shard SELECT has its CTEs and subqueries computed
//! first, with no I/O: the caller asks [`ComputeFirst::step`] what to do, runs each query it
//! is given across the shards through the merge, hands the result to
//! [`ComputeFirst::answer`], and ends with a plan of the query with every result in place
//! or an error for the client.
//!
//! 1. CTEs the planner refuses (they would run per shard), one at a time in text order, each
//!    run behind the CTEs before it and replaced by a constant relation (`cte.rs`);
//! 2. then, once, the scalar and `[NOT] IN` subqueries of the WHERE (`substitute.rs`), each
//!    run behind the statement's WITH;
//! 3. then co-located CTEs over sharded tables, when the query is still refused for how it
//!    uses them (joined off the key).
//!
//! The query is planned again after each; the first plan that succeeds is the answer.

use crate::colocate::Placement;
use crate::cte::{next_cte, Cte, CteChoice};
use crate::error::MergeError;
use crate::plan::MergePlan;
use crate::substitute::{replacement, substitute, uncorrelated_subqueries, Subquery};

/// A query computed first: its columns (name, type OID, type modifier) and rows as text.
#[derive(Debug, Clone, Default)]
pub struct Computed {
    pub columns: Vec<(String, u32, i32)>,
    pub rows: Vec<Vec<Option<String>>>,
}

/// An error for the client: (SQLSTATE, message).
pub type Failure = (String, String);

/// What to do next.
#[derive(Debug)]
pub enum Step {
    /// Run this SELECT across the shards through the merge and give its result to
    /// [`ComputeFirst::answer`].
    Run(String),
    /// The query with every computed result in place, planned; its text is the plan's.
    Planned(MergePlan),
}

#[derive(Debug)]
enum Waiting {
    Nothing,
    Cte(Cte),
    Subqueries { todo: Vec<Subquery>, done: Vec<(Subquery, String)> },
}

/// SQLSTATEs of a subquery that names what only the outer query has (a correlated one).
const OUTER_REFERENCE: [&str; 2] = ["42703", "42P01"];

/// The computation of one refused statement.
#[derive(Debug)]
pub struct ComputeFirst<'p> {
    text: String,
    placement: &'p Placement,
    waiting: Waiting,
    subqueries_tried: bool,
}

fn failure(e: &MergeError) -> Failure {
    (e.sqlstate().to_owned(), e.to_string())
}

impl<'p> ComputeFirst<'p> {
    pub fn new(sql: &str, placement: &'p Placement) -> ComputeFirst<'p> {
        ComputeFirst { text: sql.to_owned(), placement, waiting: Waiting::Nothing, subqueries_tried: false }
    }

    /// The next query to run, or the final plan, or the error for the client (the latest
    /// refusal when nothing more can be computed first).
    pub fn step(&mut self) -> Result<Step, Failure> {
        loop {
            match &self.waiting {
                Waiting::Cte(c) => return Ok(Step::Run(c.sql.clone())),
                Waiting::Subqueries { todo, .. } if !todo.is_empty() => {
                    return Ok(Step::Run(todo[0].sql.clone()))
                }
                Waiting::Subqueries { .. } | Waiting::Nothing => {}
            }
            if let Waiting::Subqueries { done, .. } = std::mem::replace(&mut self.waiting, Waiting::Nothing) {
                self.text = substitute(&self.text, &done);
            }
            let refusal = match MergePlan::for_select_placed(&self.text, self.placement) {
                Ok(plan) => return Ok(Step::Planned(plan)),
                Err(e) if e.sqlstate() == "0A000" => e,
                Err(e) => return Err(failure(&e)),
            };
            let next = |choice| next_cte(&self.text, self.placement, choice).map_err(|e| failure(&e));
            if let Some(c) = next(CteChoice::Refused)? {
                self.waiting = Waiting::Cte(c);
                continue;
            }
            if !self.subqueries_tried {
                self.subqueries_tried = true;
                let todo = uncorrelated_subqueries(&self.text).map_err(|e| failure(&e))?;
                if !todo.is_empty() {
                    self.waiting = Waiting::Subqueries { todo, done: Vec::new() };
                    continue;
                }
            }
            if let Some(c) = next(CteChoice::Sharded)? {
                self.waiting = Waiting::Cte(c);
                continue;
            }
            return Err(failure(&refusal));
        }
    }

    /// The result (or error) of the query [`ComputeFirst::step`] last gave.
    pub fn answer(&mut self, result: Result<Computed, Failure>) -> Result<(), Failure> {
        match std::mem::replace(&mut self.waiting, Waiting::Nothing) {
            Waiting::Nothing => {
                Err(("XX000".into(), "a result computed first that was not asked for".into()))
            }
            Waiting::Cte(c) => {
                let r = result?;
                let text = c.replacement(&r.columns, &r.rows).map_err(|e| failure(&e))?;
                self.text = c.substitute(&self.text, &text);
                Ok(())
            }
            Waiting::Subqueries { mut todo, mut done } => {
                let sub = todo.remove(0);
                let r = match result {
                    Ok(r) => r,
                    // Correlated: it cannot run alone; the WHERE's subqueries stay as written
                    // and the query goes on to the next stage (or its refusal).
                    Err((code, _)) if OUTER_REFERENCE.contains(&code.as_str()) => return Ok(()),
                    Err(e) => return Err(e),
                };
                let columns: Vec<(u32, i32)> = r.columns.iter().map(|c| (c.1, c.2)).collect();
                let text = replacement(sub.kind, &columns, &r.rows).map_err(|e| failure(&e))?;
                done.push((sub, text));
                self.waiting = Waiting::Subqueries { todo, done };
                Ok(())
            }
        }
    }
}
