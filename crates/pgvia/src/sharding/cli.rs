//! `pgvia route`: which shards a statement goes to and why, from the configuration alone
//! (no server is contacted). The admin console's `SHOW ROUTE` is meant to print the same.

use std::fmt::Write as _;
use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use route::Analyzer;

use super::{plan, Params, SessionHints, StatementRoute, Target};
use crate::config::Config;

/// What the command was asked.
#[derive(Debug, Clone, Default)]
pub struct RouteRequest {
    /// The sharded database; default: the only sharded one.
    pub database: Option<String>,
    /// Parameter values `$1, $2, ...` in text format (as a Bind would carry them); `None` is
    /// NULL. Given, the statement is analysed as a Parse would be.
    pub params: Option<Vec<Option<String>>>,
    /// Parameter type oids, as a Parse would declare them.
    pub param_types: Vec<u32>,
    /// `search_path`'s value.
    pub search_path: String,
    pub sql: String,
}

/// Runs the command: the route on standard output, exit code 0; problems on standard error,
/// exit code 1.
pub fn command(config_path: &Path, request: &RouteRequest) -> ExitCode {
    match route_text(config_path, request) {
        Ok(text) => {
            let _ = std::io::stdout().lock().write_all(text.as_bytes());
            ExitCode::SUCCESS
        }
        Err(message) => {
            let _ = writeln!(std::io::stderr().lock(), "pgvia route: {message}");
            ExitCode::FAILURE
        }
    }
}

/// The route as printed, or why there is none.
pub fn route_text(config_path: &Path, request: &RouteRequest) -> Result<String, String> {
    let config = Config::load(config_path).map_err(|e| e.to_string())?;
    let sharded: Vec<(usize, &crate::config::Database)> =
        config.databases.iter().enumerate().filter(|(_, d)| d.is_sharded()).collect();
    let (index, db) = match &request.database {
        Some(name) => sharded
            .iter()
            .find(|(_, d)| &d.name == name)
            .copied()
            .ok_or_else(|| format!("no sharded database is called {name:?}"))?,
        None => match sharded.as_slice() {
            [only] => *only,
            [] => return Err("the configuration has no sharded database".into()),
            _ => return Err("several databases are sharded: name one with --database".into()),
        },
    };
    let rules = db
        .sharding_rules(index)
        .map_err(|p| format!("{p:?}"))?
        .ok_or_else(|| format!("database {:?} is not sharded", db.name))?;
    let analyzer = Analyzer::new(config.analyzer_options()).map_err(|e| e.to_string())?;
    let search_path = shard::parse_search_path(&request.search_path);
    let session = SessionHints { shard: None, sharding_key: None, search_path: &search_path, explain: true };
    let mut scratch = String::new();
    let (analysis, routes) = match &request.params {
        Some(values) => {
            let analysis = analyzer.analyze(&request.sql, &request.param_types);
            let values: Vec<Option<&[u8]>> = values.iter().map(|v| v.as_deref().map(str::as_bytes)).collect();
            let routes = plan(&rules, &analysis, &Params::Bind { formats: &[], values: &values }, &session);
            (analysis, routes)
        }
        None => {
            let analysis = analyzer.analyze_query(&request.sql, &mut scratch);
            let ranges = route::constants(&request.sql);
            let routes =
                plan(&rules, &analysis, &Params::Constants { sql: &request.sql, ranges: &ranges }, &session);
            (analysis, routes)
        }
    };
    let routes = routes.map_err(|e| format!("ERROR {}: {e}", e.sqlstate()))?;
    let mut text = render(&routes);
    if let Some((code, message)) = refusal(&rules, &analysis, &request.sql, &routes) {
        let _ = writeln!(text, "refused: ERROR {code}: {message}");
    }
    Ok(text)
}

/// What the session refuses of a routed statement for want of a placement proof: the same
/// judgement (`super::prove_placement`, the merge planner for a SELECT on several shards,
/// whose uncorrelated subqueries may still be computed first).
fn refusal(
    rules: &crate::config::ShardingRules,
    analysis: &route::Analysis,
    sql: &str,
    routes: &[StatementRoute],
) -> Option<(String, String)> {
    let [route] = routes else { return None };
    let shards = match route.target {
        Target::Shards(s) => s.len(),
        Target::AnyOf(_) | Target::NoRows => 1,
    };
    let select =
        analysis.statement(0).is_some_and(|s| matches!(s.kind(), route::StatementKind::Select { .. }));
    if select && shards > 1 {
        let placement = super::merge_placement(rules);
        merge::MergePlan::for_select_placed(sql, &placement).err()?;
        return merge::ComputeFirst::new(sql, &placement).step().err();
    }
    let e = super::prove_placement(rules, analysis, sql.as_bytes(), shards).err()?;
    Some((e.sqlstate().to_owned(), e.to_string()))
}

/// One block per statement: target, then the reasons.
pub fn render(routes: &[StatementRoute]) -> String {
    let mut out = String::new();
    for (i, r) in routes.iter().enumerate() {
        let target = match r.target {
            Target::Shards(s) => format!("shards {s}"),
            Target::AnyOf(s) => format!("any one of shards {s}"),
            Target::NoRows => "no shard holds matching rows (any one answers)".into(),
        };
        let _ = writeln!(out, "statement {}: {target}", i + 1);
        for reason in r.reasons.iter() {
            let _ = writeln!(out, "  - {reason}");
        }
        if !r.rows.is_empty() {
            let rows: Vec<String> =
                r.rows.iter().enumerate().map(|(n, s)| format!("{}→{s}", n + 1)).collect();
            let _ = writeln!(out, "  rows: {}", rows.join(" "));
        }
        let flags = [
            (r.key_update, "key update"),
            (r.upsert, "upsert"),
            (r.returning, "returning"),
            (r.missing_key, "missing key"),
        ];
        let flags: Vec<&str> = flags.iter().filter(|(on, _)| *on).map(|(_, f)| *f).collect();
        if !flags.is_empty() {
            let _ = writeln!(out, "  flags: {}", flags.join(", "));
        }
    }
    out
}
