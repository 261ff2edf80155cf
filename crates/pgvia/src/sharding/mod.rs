//! Which shards a statement goes to, and why: a pure function of the statement's analysis,
//! the database's sharding rules, the statement's parameters and the session's sharding
//! settings. No I/O; the multi-server session calls it per statement, `pgvia route` prints
//! it, and the admin's `SHOW ROUTE` will.
//!
//! Every answer can only be wider than the set of shards holding the rows: a condition the
//! planner cannot read routes everywhere (and says so), never nowhere. Writes it cannot place
//! exactly (an `INSERT` row without a readable key) and tables the configuration does not
//! know (with `unsharded_tables = "refuse"`) are errors with a SQLSTATE, never a guess.

pub mod cli;
pub mod copy;
mod copy_text;
pub mod doors;
mod fanouts;
pub mod key_move;
mod keys;
pub mod params;
mod placement;
pub mod split;

use route::{Access, Analysis, CopyDirection, NestedKind, Outcome, Statement, StatementKind, TableRef};
use shard::{KeyCond, ShardError, ShardId, ShardSet};

use crate::config::{ShardingRules, TableRule, UnshardedTables};
pub use fanouts::Fanouts;
pub use keys::literal;
pub use params::{Params, Raw};
pub use placement::{merge_placement, prove_placement};

/// The session's sharding settings (`SET pgvia.shard`, `SET pgvia.sharding_key`,
/// `search_path`). A comment hint in the statement wins over them.
#[derive(Debug, Clone, Copy, Default)]
pub struct SessionHints<'a> {
    pub shard: Option<ShardId>,
    pub sharding_key: Option<&'a str>,
    /// The schemas of `search_path`, in order (see [`shard::parse_search_path`]).
    pub search_path: &'a [String],
    /// Collect the reasons (`pgvia route`, `SHOW ROUTE`); off on the hot path, where
    /// formatting them for every statement would cost more than routing it.
    pub explain: bool,
}

/// Why a statement goes where it goes, one line per decision; empty unless asked for
/// ([`SessionHints::explain`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reasons {
    explain: bool,
    lines: Vec<String>,
}

impl Reasons {
    /// Records a reason, formatting it only when reasons are being collected.
    pub fn add(&mut self, line: impl FnOnce() -> String) {
        if self.explain {
            self.lines.push(line());
        }
    }
}

impl std::ops::Deref for Reasons {
    type Target = [String];

    fn deref(&self) -> &[String] {
        &self.lines
    }
}

/// Where a statement runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// On every one of these shards (its rows, or its changes, may be on each).
    Shards(ShardSet),
    /// On any single one of these: the statement reads only tables that are the same on
    /// every shard (omnisharded tables, the catalog) or none at all.
    AnyOf(ShardSet),
    /// No shard can hold a matching row (`key = 1 AND key = 2`): any single shard answers,
    /// with no rows.
    NoRows,
}

/// The route of one statement and the reasons for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatementRoute {
    pub target: Target,
    /// Human-readable, one per decision, in the order they were made (when asked for).
    pub reasons: Reasons,
    /// For `INSERT ... VALUES` into a sharded table: each row's shard, in order, so the
    /// statement can be split into one `INSERT` per shard.
    pub rows: Vec<ShardId>,
    /// An `UPDATE` that assigns a sharded table's key column: the row may have to move.
    pub key_update: bool,
    /// `INSERT ... ON CONFLICT`.
    pub upsert: bool,
    /// `INSERT`/`UPDATE`/`DELETE ... RETURNING`.
    pub returning: bool,
    /// True when a sharded table's conditions left every shard in (what users count to find
    /// their missing keys); false when they narrowed it, a hint chose, or the statement goes
    /// everywhere by its nature (DDL, omnisharded writes).
    pub missing_key: bool,
    /// A write to omnisharded tables only: every shard applies the same change, so one
    /// shard's row count is the statement's (not their sum).
    pub replicated: bool,
}

/// Why a statement cannot be routed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RouteError {
    #[error(
        "table {table} is not sharded and unsharded_tables is \"refuse\": list it in sharded_tables or sharded_schemas, or set unsharded_tables = \"omnisharded\""
    )]
    Refused { table: String },
    #[error("{table}.{column}: {source}")]
    NoShard {
        table: String,
        column: String,
        #[source]
        source: ShardError,
    },
    #[error("cannot tell the shard of row {row} of INSERT into {table}: {why}")]
    InsertKey { table: String, row: usize, why: String },
    #[error("shard {shard} does not exist: there are {count} shards")]
    NoSuchShard { shard: ShardId, count: usize },
    #[error("sharding key {value:?} cannot be used: {why}")]
    BadHintKey { value: String, why: String },
    #[error("the statement could not be analysed ({outcome}); name its shard with /* pgvia_shard: N */")]
    NotAnalysed { outcome: &'static str },
    /// A write whose shards cannot be told exactly: running it anywhere would be a guess.
    #[error("{construct} is not supported on sharded table {table}: {why}")]
    Unplaceable { construct: &'static str, table: String, why: &'static str },
}

impl RouteError {
    /// The SQLSTATE the client's `ErrorResponse` carries.
    pub fn sqlstate(&self) -> &'static str {
        match self {
            // As PostgreSQL reports a row that fits no partition.
            RouteError::NoShard { .. } => "23514",
            RouteError::InsertKey { .. }
            | RouteError::NotAnalysed { .. }
            | RouteError::Refused { .. }
            | RouteError::Unplaceable { .. } => "0A000",
            RouteError::NoSuchShard { .. } | RouteError::BadHintKey { .. } => "22023",
        }
    }
}

/// How a table named by a statement is placed.
enum Placement<'r> {
    /// `pg_catalog`, `information_schema`, `pg_*`: the same on every shard.
    Catalog,
    Sharded(&'r TableRule),
    /// In a sharded schema: all of it on one shard.
    Schema(ShardId),
    Unsharded,
}

fn placement<'r>(rules: &'r ShardingRules, t: &TableRef<'_>, search_path: &[String]) -> Placement<'r> {
    let catalog_schema = matches!(t.schema, Some("pg_catalog" | "information_schema"));
    if catalog_schema || (t.schema.is_none() && t.name.starts_with("pg_")) {
        return Placement::Catalog;
    }
    if let Some(rule) = rules.table(t.schema, t.name) {
        return Placement::Sharded(rule);
    }
    match rules.schemas.shard_of(t.schema, search_path.iter().map(String::as_str)) {
        Some(shard) => Placement::Schema(shard),
        None => Placement::Unsharded,
    }
}

/// The value of `SET pgvia.shard`: a shard number of this database.
pub fn shard_setting(rules: &ShardingRules, value: &str) -> Result<ShardId, RouteError> {
    let bad =
        || RouteError::BadHintKey { value: value.to_owned(), why: "pgvia.shard takes a shard number".into() };
    let shard: ShardId = value.trim().parse().map_err(|_| bad())?;
    if shard >= rules.shard_count {
        return Err(RouteError::NoSuchShard { shard, count: rules.shard_count });
    }
    Ok(shard)
}

/// Routes every statement of `analysis`.
pub fn plan(
    rules: &ShardingRules,
    analysis: &Analysis,
    params: &Params<'_>,
    session: &SessionHints<'_>,
) -> Result<Vec<StatementRoute>, RouteError> {
    let hints = analysis.hints();
    let hinted_shard = hints.shard.map(|s| s as ShardId).or(session.shard);
    let hinted_key = hints.shard_key.or(session.sharding_key);
    if analysis.is_conservative() {
        let mut route = base_route(Target::AnyOf(ShardSet::all(rules.shard_count)), session.explain);
        return match (hinted_shard, analysis.outcome()) {
            (Some(s), _) => Ok(vec![hinted(rules, s, route)?]),
            // The server will report the syntax error itself; any shard can.
            (None, Outcome::ParseError) => {
                route.reasons.add(|| "the text does not parse: any shard reports the error".into());
                Ok(vec![route])
            }
            (None, outcome) => Err(RouteError::NotAnalysed { outcome: outcome.as_str() }),
        };
    }
    analysis
        .statements()
        .map(|stmt| {
            let route = base_route(Target::AnyOf(ShardSet::all(rules.shard_count)), session.explain);
            if let Some(s) = hinted_shard {
                return hinted(rules, s, flags(&stmt, route));
            }
            if let Some(key) = hinted_key {
                return by_key_hint(rules, &stmt, key, flags(&stmt, route), session);
            }
            statement(rules, &stmt, params, session)
        })
        .collect()
}

fn base_route(target: Target, explain: bool) -> StatementRoute {
    StatementRoute {
        target,
        reasons: Reasons { explain, lines: Vec::new() },
        rows: Vec::new(),
        key_update: false,
        upsert: false,
        returning: false,
        missing_key: false,
        replicated: false,
    }
}

fn flags(stmt: &Statement<'_>, mut route: StatementRoute) -> StatementRoute {
    route.upsert = stmt.on_conflict();
    route.returning = matches!(
        stmt.kind(),
        StatementKind::Insert { returning: true }
            | StatementKind::Update { returning: true }
            | StatementKind::Delete { returning: true }
            | StatementKind::Merge { returning: true }
    );
    route
}

fn hinted(
    rules: &ShardingRules,
    shard: ShardId,
    mut route: StatementRoute,
) -> Result<StatementRoute, RouteError> {
    if shard >= rules.shard_count {
        return Err(RouteError::NoSuchShard { shard, count: rules.shard_count });
    }
    route.target = Target::Shards(ShardSet::one(shard));
    route.reasons.add(|| format!("hint: shard {shard}"));
    Ok(route)
}

/// `pgvia_sharding_key`: the key of the statement's sharded table, or of the database's
/// only sharded table.
fn by_key_hint(
    rules: &ShardingRules,
    stmt: &Statement<'_>,
    key: &str,
    mut route: StatementRoute,
    session: &SessionHints<'_>,
) -> Result<StatementRoute, RouteError> {
    let bad = |why: String| RouteError::BadHintKey { value: key.to_owned(), why };
    let rule = stmt
        .tables()
        .find_map(|t| match placement(rules, &t, session.search_path) {
            Placement::Sharded(rule) => Some(rule),
            _ => None,
        })
        .or(match rules.tables.as_slice() {
            [only] => Some(only),
            _ => None,
        })
        .ok_or_else(|| bad("the statement names no sharded table to read it for".into()))?;
    let value = rule.key_type.parse_text(key.as_bytes()).map_err(|e| bad(e.to_string()))?;
    let shard = rule.function.shard_of(&value).map_err(|e| bad(e.to_string()))?;
    route.target = Target::Shards(ShardSet::one(shard));
    route.reasons.add(|| format!("hint: sharding key {key} of {} → shard {shard}", rule.name));
    Ok(route)
}

fn statement(
    rules: &ShardingRules,
    stmt: &Statement<'_>,
    params: &Params<'_>,
    session: &SessionHints<'_>,
) -> Result<StatementRoute, RouteError> {
    let all = ShardSet::all(rules.shard_count);
    let mut route = flags(stmt, base_route(Target::AnyOf(all), session.explain));
    let nested = nested_writes(rules, stmt, params, session, &mut route)?;
    let data = matches!(
        stmt.kind(),
        StatementKind::Select { .. }
            | StatementKind::Insert { .. }
            | StatementKind::Update { .. }
            | StatementKind::Delete { .. }
            | StatementKind::Merge { .. }
            // Its rows land where its table is: every shard for an omnisharded one.
            | StatementKind::Copy { direction: CopyDirection::From, .. }
    ) || reads_rows(stmt);
    if !data {
        let mut route = utility(stmt, route, all);
        if let Some(n) = nested {
            with_nested(&mut route, n)?;
        }
        return Ok(route);
    }
    // A sharded table only written inside is placed by those writes' own conditions (above),
    // not by the outer statement's.
    let inside: Vec<TableRef<'_>> = stmt
        .written_only_inside()
        .filter(|t| matches!(placement(rules, t, session.search_path), Placement::Sharded(_)))
        .collect();
    let tables: Vec<TableRef<'_>> = stmt.tables().filter(|t| !inside.contains(t)).collect();
    let only_table = tables.len() == 1;
    let mut shards = ShardSet::EMPTY;
    let mut placed = false;
    // Set by an omnisharded table written; cleared below if a sharded table is written too.
    let mut replicated = false;
    let mut sharded_write = false;
    for t in &tables {
        match placement(rules, t, session.search_path) {
            Placement::Catalog => {}
            Placement::Schema(s) => {
                placed = true;
                shards.insert(s);
                route.reasons.add(|| format!("{t}: in sharded schema → shard {s}"));
            }
            Placement::Unsharded => match rules.unsharded {
                UnshardedTables::Refuse => return Err(RouteError::Refused { table: t.to_string() }),
                UnshardedTables::Omnisharded if t.access != Access::Read => {
                    placed = true;
                    replicated = true;
                    shards = shards.union(all);
                    route.reasons.add(|| format!("{t}: omnisharded table written → every shard"));
                }
                UnshardedTables::Omnisharded => route.reasons.add(|| format!("{t}: omnisharded → any shard")),
            },
            Placement::Sharded(rule) => {
                placed = true;
                sharded_write |= t.access != Access::Read;
                let set = sharded_table(rules, stmt, t, rule, params, only_table, &mut route)?;
                shards = shards.union(set);
            }
        }
    }
    if replicated {
        // Each shard would write its copy from the rows it holds of the others: the copies
        // would differ (a sharded table read, or written alongside, on some shards only).
        let placed_elsewhere = |t: &TableRef<'_>| {
            matches!(placement(rules, t, session.search_path), Placement::Sharded(_) | Placement::Schema(_))
        };
        if let Some(t) = tables.iter().chain(&inside).find(|t| placed_elsewhere(t)) {
            return Err(RouteError::Unplaceable {
                construct: "a write to an omnisharded table that reads or writes a sharded table",
                table: t.to_string(),
                why: "every shard's copy would be written from the rows that shard alone holds; compute the rows first, then write them",
            });
        }
    }
    route.replicated = replicated && !sharded_write;
    route.target = match (placed, shards.is_empty()) {
        (false, _) => {
            if tables.is_empty() {
                route.reasons.add(|| "no tables → any shard".into());
            }
            Target::AnyOf(all)
        }
        (true, true) => {
            route.reasons.add(|| "no shard can hold matching rows → any one shard answers".into());
            Target::NoRows
        }
        (true, false) => Target::Shards(shards),
    };
    if let Some(n) = nested {
        with_nested(&mut route, n)?;
    }
    Ok(route)
}

/// `DECLARE ... CURSOR FOR SELECT` and `COPY (SELECT ...) TO` / `COPY table TO` read rows as
/// the query inside them does: they go where its rows are, not to every shard (the session
/// merges them when that is several, `session/sharded/doors.rs`).
fn reads_rows(stmt: &Statement<'_>) -> bool {
    match stmt.kind() {
        StatementKind::DeclareCursor { .. } => matches!(stmt.target(), Some(StatementKind::Select { .. })),
        StatementKind::Copy { direction: CopyDirection::To, .. } => !stmt.writes(),
        _ => false,
    }
}

/// Writes inside the statement (a data-modifying `WITH` query at any depth, a subquery, the
/// body of `EXPLAIN ANALYZE` or `COPY (...)`) have conditions and rows of their own that the
/// outer statement's route does not account for. The shards those on sharded tables need, from
/// their own conditions; refused when that cannot be told (an `INSERT` or `MERGE` inside, an
/// `UPDATE` of the key inside). `None` when there are none.
fn nested_writes(
    rules: &ShardingRules,
    stmt: &Statement<'_>,
    params: &Params<'_>,
    session: &SessionHints<'_>,
    route: &mut StatementRoute,
) -> Result<Option<(ShardSet, String, &'static str)>, RouteError> {
    let construct = match stmt.kind() {
        // Neither runs its statement.
        StatementKind::Prepare | StatementKind::Explain { analyze: false } => return Ok(None),
        StatementKind::Explain { analyze: true } => "EXPLAIN ANALYZE of a write",
        StatementKind::Copy { .. } => "COPY of a data-modifying query",
        _ => "a data-modifying statement in WITH or in a subquery",
    };
    let mut need: Option<(ShardSet, String, &'static str)> = None;
    for w in stmt.nested_write_statements() {
        let (schema, name) = w.table();
        let t = TableRef { schema, name, access: Access::Write };
        let Placement::Sharded(rule) = placement(rules, &t, session.search_path) else {
            continue;
        };
        let refuse = |why: &'static str| RouteError::Unplaceable { construct, table: t.to_string(), why };
        match w.kind() {
            NestedKind::Insert | NestedKind::Merge => {
                return Err(refuse(
                    "the shards of its rows cannot be told before it runs; send it as a statement of its own, or name the shard with /* pgvia_shard: N */",
                ))
            }
            NestedKind::Update if w.updated_columns().any(|c| c == rule.column) => {
                return Err(refuse(
                    "it changes the sharding key and would leave rows on their old shard; a plain UPDATE moves them",
                ))
            }
            NestedKind::Update | NestedKind::Delete => {}
        }
        let cond = match w.condition() {
            Some(c) => keys::key_cond(c, rule, params, false, &mut route.reasons),
            None => KeyCond::Any,
        };
        let set = rule.function.shards_for(&cond, rules.shard_count).map_err(|source| {
            RouteError::NoShard { table: t.to_string(), column: rule.column.clone(), source }
        })?;
        route.reasons.add(|| format!("{t}: written inside the statement → shards {set}"));
        let union = need.as_ref().map_or(set, |n| n.0.union(set));
        need = Some((union, need.map_or_else(|| t.to_string(), |n| n.1), construct));
    }
    Ok(need)
}

/// The statement and the writes inside it must all be on one shard: that shard runs it.
fn with_nested(
    route: &mut StatementRoute,
    nested: (ShardSet, String, &'static str),
) -> Result<(), RouteError> {
    let (need, table, construct) = nested;
    let outer = match route.target {
        Target::Shards(s) => s,
        Target::AnyOf(_) | Target::NoRows => ShardSet::EMPTY,
    };
    let both = outer.union(need);
    match both.len() {
        // Nothing anywhere can match: the route stands.
        0 => Ok(()),
        1 => {
            route.target = Target::Shards(both);
            route.missing_key = false;
            Ok(())
        }
        _ => Err(RouteError::Unplaceable {
            construct,
            table,
            why: "it and the statement around it are not proven to be on one shard (by their key conditions); send them as statements of their own, or name the shard with /* pgvia_shard: N */",
        }),
    }
}

/// DDL and other statements that are not about rows: they go to every shard, except those
/// any one shard can answer.
fn utility(stmt: &Statement<'_>, mut route: StatementRoute, all: ShardSet) -> StatementRoute {
    match stmt.kind() {
        StatementKind::Show | StatementKind::Other if !stmt.writes() => {
            route.reasons.add(|| "reads no table → any shard".into());
        }
        kind => {
            route.target = Target::Shards(all);
            route.reasons.add(|| format!("{} goes to every shard", describe_kind(kind)));
        }
    }
    route
}

fn describe_kind(kind: StatementKind) -> &'static str {
    match kind {
        StatementKind::Begin(_)
        | StatementKind::Commit { .. }
        | StatementKind::Rollback { .. }
        | StatementKind::Savepoint
        | StatementKind::Release
        | StatementKind::RollbackToSavepoint => "transaction control",
        StatementKind::Set { .. } | StatementKind::Reset | StatementKind::SetTransaction(_) => "a setting",
        StatementKind::Copy { .. } => "COPY (split by key later)",
        _ => "a schema or utility statement",
    }
}

/// The shards one sharded table of a data statement needs.
fn sharded_table(
    rules: &ShardingRules,
    stmt: &Statement<'_>,
    t: &TableRef<'_>,
    rule: &TableRule,
    params: &Params<'_>,
    only_table: bool,
    route: &mut StatementRoute,
) -> Result<ShardSet, RouteError> {
    let no_shard = |source: ShardError| RouteError::NoShard {
        table: t.to_string(),
        column: rule.column.clone(),
        source,
    };
    let inserting = matches!(stmt.kind(), StatementKind::Insert { .. }) && t.access != Access::Read;
    if inserting {
        return insert_rows(stmt, t, rule, params, route).map_err(|e| match e {
            RowError::Route(e) => e,
            RowError::Shard(source) => no_shard(source),
        });
    }
    if matches!(stmt.kind(), StatementKind::Merge { .. }) && t.access != Access::Read {
        merge_actions(stmt, t, rule)?;
    }
    if matches!(stmt.kind(), StatementKind::Update { .. })
        && t.access != Access::Read
        && stmt.updated_columns().any(|c| c == rule.column)
    {
        route.key_update = true;
        route.reasons.add(|| format!("{t}: UPDATE assigns key column {} (the row may move)", rule.column));
    }
    let cond = match stmt.condition() {
        Some(c) => keys::key_cond(c, rule, params, only_table, &mut route.reasons),
        None => KeyCond::Any,
    };
    let set = rule.function.shards_for(&cond, rules.shard_count).map_err(no_shard)?;
    if set == ShardSet::all(rules.shard_count) && rules.shard_count > 1 {
        route.missing_key = true;
    }
    if cond.mentions_key() {
        route.reasons.add(|| format!("{t}: condition on key {} → shards {set}", rule.column));
    } else {
        route.reasons.add(|| format!("{t}: no usable condition on key {} → every shard", rule.column));
    }
    Ok(set)
}

/// `MERGE` into a sharded table runs on every shard, each matching its own rows: exact for
/// `UPDATE` and `DELETE` actions that keep the key, not for an `INSERT` (every shard without
/// a match would insert the row) nor for a key change (the row would stay on its old shard).
fn merge_actions(stmt: &Statement<'_>, t: &TableRef<'_>, rule: &TableRule) -> Result<(), RouteError> {
    if stmt.merge_inserts() {
        return Err(RouteError::Unplaceable {
            construct: "MERGE ... WHEN NOT MATCHED THEN INSERT",
            table: t.to_string(),
            why: "every shard without a matching row would insert it; use INSERT ... ON CONFLICT, whose rows are placed by key",
        });
    }
    if stmt.updated_columns().any(|c| c == rule.column) {
        return Err(RouteError::Unplaceable {
            construct: "MERGE ... THEN UPDATE SET of the sharding key",
            table: t.to_string(),
            why: "the row would stay on its old shard; change the key with a plain UPDATE, which moves rows",
        });
    }
    Ok(())
}

enum RowError {
    Route(RouteError),
    Shard(ShardError),
}

/// `INSERT ... VALUES`: each row's shard from its key value.
fn insert_rows(
    stmt: &Statement<'_>,
    t: &TableRef<'_>,
    rule: &TableRule,
    params: &Params<'_>,
    route: &mut StatementRoute,
) -> Result<ShardSet, RowError> {
    let err = |row: usize, why: &str| {
        RowError::Route(RouteError::InsertKey { table: t.to_string(), row, why: why.to_owned() })
    };
    let Some(values) = stmt.insert_values() else {
        return Err(err(1, "only INSERT ... VALUES can be routed by key"));
    };
    if stmt.values_truncated() {
        return Err(err(values.rows() + 1, "more values than analysis records (analysis.max_values)"));
    }
    let Some(position) = values.columns().position(|c| c == rule.column) else {
        return Err(err(1, &format!("the column list must name the key column {}", rule.column)));
    };
    let mut shards = ShardSet::EMPTY;
    for (row, v) in values.column(position).enumerate() {
        let key = literal(v, rule.key_type, params).map_err(|e| err(row + 1, &e.to_string()))?;
        let shard = match key {
            Some(k) => rule.function.shard_of(&k).map_err(RowError::Shard)?,
            // PostgreSQL's hash partitioning puts a NULL key in the partition of remainder 0.
            None if matches!(rule.function, shard::ShardFunction::Hash { .. }) => 0,
            None => return Err(err(row + 1, "the key is NULL")),
        };
        shards.insert(shard);
        route.rows.push(shard);
    }
    route
        .reasons
        .add(|| format!("{t}: {} row(s) by key {} → shards {shards}", route.rows.len(), rule.column));
    if stmt.upsert_assigned_columns().any(|c| c == rule.column) {
        return Err(RowError::Route(RouteError::Unplaceable {
            construct: "INSERT ... ON CONFLICT DO UPDATE SET of the sharding key",
            table: t.to_string(),
            why: "the updated row would stay on its old key's shard; the key may only be set to itself (EXCLUDED.key when the conflict is on the key)",
        }));
    }
    if stmt.on_conflict() {
        route.reasons.add(|| "ON CONFLICT is resolved on each row's shard".into());
    }
    Ok(shards)
}
