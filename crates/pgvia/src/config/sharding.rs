//! The keys of a sharded database: its shards in order, its sharded tables (key column, type
//! and function), its sharded schemas, and what happens to tables it does not list.
//!
//! The values live on [`Database`](super::Database), which hands them here as [`ShardingKeys`]; the types,
//! their checks and the compiled form the shard planner runs on are here. Checking and
//! compiling are one function, so a configuration that validates always compiles.

use std::collections::HashSet;
use std::fmt;

use serde::Deserialize;
use shard::{KeyType, RangeRule, SchemaShards, ShardFunction, ShardId, Value, MAX_SHARDS};

use super::routing::{ServerEntry, ServerRole};
use super::values;

/// One `[[databases.shards]]` entry: one server (`host`/`port`) or a primary with replicas
/// (`servers`, as for an unsharded database).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShardEntry {
    /// The shard's one server. Required unless `servers` is given.
    #[serde(default)]
    pub host: Option<String>,
    /// Its port. Default 5432.
    #[serde(default = "default_port", deserialize_with = "values::port")]
    pub port: u16,
    /// A primary and its replicas, instead of `host`/`port`.
    #[serde(default)]
    pub servers: Vec<ServerEntry>,
}

impl ShardEntry {
    /// The shard's servers; `host`/`port` become the one primary.
    pub fn servers(&self) -> Vec<ServerEntry> {
        if self.servers.is_empty() {
            let host = self.host.clone().unwrap_or_default();
            vec![ServerEntry { host, port: self.port, role: ServerRole::Primary, weight: 1 }]
        } else {
            self.servers.clone()
        }
    }
}

fn default_port() -> u16 {
    5432
}

/// How a sharded table maps its key to a shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FunctionKind {
    /// PostgreSQL's `PARTITION BY HASH` with modulus = the number of shards.
    Hash,
    /// `values` lists which keys live on which shard.
    List,
    /// `ranges` give each shard key ranges.
    Range,
}

impl fmt::Display for FunctionKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FunctionKind::Hash => "hash",
            FunctionKind::List => "list",
            FunctionKind::Range => "range",
        })
    }
}

/// A key value as written in the file: a number or a string, read with the key's type.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum KeyLiteral {
    Int(i64),
    Text(String),
}

impl KeyLiteral {
    fn read(&self, ty: KeyType) -> Result<Value, String> {
        let text = match self {
            KeyLiteral::Int(i) => i.to_string(),
            KeyLiteral::Text(s) => s.clone(),
        };
        ty.parse_text(text.as_bytes()).map_err(|e| e.to_string())
    }
}

/// One entry of a list-sharded table's `values`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListEntry {
    /// The shard these keys live on.
    pub shard: usize,
    /// The keys.
    pub values: Vec<KeyLiteral>,
}

/// One entry of a range-sharded table's `ranges`: keys from `from` (included) to `to`
/// (excluded) live on `shard`; a missing end is open.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RangeEntry {
    pub shard: usize,
    #[serde(default)]
    pub from: Option<KeyLiteral>,
    #[serde(default)]
    pub to: Option<KeyLiteral>,
}

/// One `[[databases.sharded_tables]]` entry.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShardedTable {
    /// The table's schema; default: the table is matched by name in any schema.
    #[serde(default)]
    pub schema: Option<String>,
    /// The table's name. Required.
    pub name: String,
    /// The sharding key column. Required.
    pub column: String,
    /// The key column's type: `bigint`, `integer`, `smallint`, `text`, `varchar`, `uuid`,
    /// `date`, `timestamp`, `timestamptz`. Required.
    #[serde(rename = "type")]
    pub key_type: String,
    /// `hash`, `list` or `range`. Default `hash`.
    #[serde(default = "default_function")]
    pub function: FunctionKind,
    /// For `list`: which keys live on which shard.
    #[serde(default)]
    pub values: Vec<ListEntry>,
    /// For `list`: the shard of keys not listed; without it they are an error.
    #[serde(default)]
    pub default_shard: Option<usize>,
    /// For `range`: the shards' key ranges; a key in none of them is an error.
    #[serde(default)]
    pub ranges: Vec<RangeEntry>,
}

fn default_function() -> FunctionKind {
    FunctionKind::Hash
}

/// One `[[databases.sharded_schemas]]` entry: every table in the schema lives on `shard`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShardedSchema {
    pub name: String,
    pub shard: usize,
}

/// What a statement on a table that is neither sharded nor in a sharded schema does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum UnshardedTables {
    /// The table has the same rows on every shard: reads go to one shard, writes to all.
    Omnisharded,
    /// The statement is refused with an error naming the table.
    Refuse,
}

impl fmt::Display for UnshardedTables {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            UnshardedTables::Omnisharded => "omnisharded",
            UnshardedTables::Refuse => "refuse",
        })
    }
}

/// A sharded table, compiled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableRule {
    pub schema: Option<String>,
    pub name: String,
    pub column: String,
    pub key_type: KeyType,
    pub function: ShardFunction,
}

impl TableRule {
    /// Whether a statement's table reference (schema as written, if any) is this table.
    pub fn matches(&self, schema: Option<&str>, name: &str) -> bool {
        self.name == name && (self.schema.is_none() || schema.is_none() || self.schema.as_deref() == schema)
    }
}

/// A sharded database's rules, compiled: what the shard planner runs on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardingRules {
    pub shard_count: usize,
    pub tables: Vec<TableRule>,
    pub schemas: SchemaShards,
    pub unsharded: UnshardedTables,
}

impl ShardingRules {
    /// The rule of a table, if it is sharded.
    pub fn table(&self, schema: Option<&str>, name: &str) -> Option<&TableRule> {
        self.tables.iter().find(|t| t.matches(schema, name))
    }
}

/// The sharding keys of one `[[databases]]` entry, as the file gave them.
pub struct ShardingKeys<'a> {
    pub shards: &'a [ShardEntry],
    pub sharded_tables: &'a [ShardedTable],
    pub sharded_schemas: &'a [ShardedSchema],
    pub unsharded_tables: Option<UnshardedTables>,
}

impl ShardingKeys<'_> {
    pub fn rules(&self, db_index: usize) -> Result<Option<ShardingRules>, Vec<(String, String)>> {
        let mut problems = Vec::new();
        let at = |key: String| format!("databases[{db_index}].{key}");
        let count = self.shards.len();
        if count == 0 {
            for (key, used) in [
                ("sharded_tables", !self.sharded_tables.is_empty()),
                ("sharded_schemas", !self.sharded_schemas.is_empty()),
                ("unsharded_tables", self.unsharded_tables.is_some()),
            ] {
                if used {
                    problems.push((
                        at(key.into()),
                        "only a sharded database (with [[databases.shards]]) takes this key".into(),
                    ));
                }
            }
            return if problems.is_empty() { Ok(None) } else { Err(problems) };
        }
        if count > MAX_SHARDS {
            problems.push((at("shards".into()), format!("at most {MAX_SHARDS} shards, got {count}")));
        }
        let mut tables = Vec::new();
        let mut seen = HashSet::new();
        for (j, t) in self.sharded_tables.iter().enumerate() {
            let at_t = |key: &str| at(format!("sharded_tables[{j}].{key}"));
            if t.name.is_empty() {
                problems.push((at_t("name"), "must not be empty".into()));
            } else if !seen.insert((t.schema.clone(), t.name.clone())) {
                problems.push((at_t("name"), format!("table {:?} is listed twice", t.name)));
            }
            if t.column.is_empty() {
                problems.push((at_t("column"), "must not be empty".into()));
            }
            match compile_table(t, count) {
                Ok(rule) => tables.push(rule),
                Err((key, message)) => problems.push((at_t(key), message)),
            }
        }
        let mut schemas = Vec::new();
        for (j, s) in self.sharded_schemas.iter().enumerate() {
            let at_s = |key: &str| at(format!("sharded_schemas[{j}].{key}"));
            if s.name.is_empty() {
                problems.push((at_s("name"), "must not be empty".into()));
            } else if schemas.iter().any(|(n, _)| n == &s.name) {
                problems.push((at_s("name"), format!("schema {:?} is listed twice", s.name)));
            }
            if s.shard >= count {
                problems.push((at_s("shard"), no_such_shard(s.shard, count)));
            }
            schemas.push((s.name.clone(), s.shard));
        }
        if !problems.is_empty() {
            return Err(problems);
        }
        Ok(Some(ShardingRules {
            shard_count: count,
            tables,
            schemas: SchemaShards::new(schemas),
            unsharded: self.unsharded_tables.unwrap_or(UnshardedTables::Refuse),
        }))
    }
}

fn no_such_shard(shard: ShardId, count: usize) -> String {
    format!("shard {shard} does not exist: shards are numbered from 0 to {}", count.saturating_sub(1))
}

/// Compiles one table; the first problem found, with the key it is about.
fn compile_table(t: &ShardedTable, count: usize) -> Result<TableRule, (&'static str, String)> {
    let key_type = KeyType::from_sql_name(&t.key_type).ok_or_else(|| {
        let supported = "bigint, integer, smallint, text, varchar, uuid, date, timestamp, timestamptz";
        ("type", format!("unsupported key type {:?}; expected one of {supported}", t.key_type))
    })?;
    let misplaced = |key: &'static str, used: bool| -> Result<(), (&'static str, String)> {
        if used {
            Err((key, format!("does not apply to function \"{}\"", t.function)))
        } else {
            Ok(())
        }
    };
    let function = match t.function {
        FunctionKind::Hash => {
            misplaced("values", !t.values.is_empty())?;
            misplaced("default_shard", t.default_shard.is_some())?;
            misplaced("ranges", !t.ranges.is_empty())?;
            ShardFunction::Hash { shards: count }
        }
        FunctionKind::List => {
            misplaced("ranges", !t.ranges.is_empty())?;
            if t.values.is_empty() {
                return Err(("values", "a list-sharded table needs at least one entry".into()));
            }
            let mut values: Vec<(Value, ShardId)> = Vec::new();
            for entry in &t.values {
                if entry.shard >= count {
                    return Err(("values", no_such_shard(entry.shard, count)));
                }
                for literal in &entry.values {
                    let v = literal.read(key_type).map_err(|e| ("values", e))?;
                    if values.iter().any(|(seen, _)| seen == &v) {
                        return Err(("values", format!("value {literal:?} is listed twice")));
                    }
                    values.push((v, entry.shard));
                }
            }
            if let Some(d) = t.default_shard {
                if d >= count {
                    return Err(("default_shard", no_such_shard(d, count)));
                }
            }
            ShardFunction::List { values, default: t.default_shard }
        }
        FunctionKind::Range => {
            misplaced("values", !t.values.is_empty())?;
            misplaced("default_shard", t.default_shard.is_some())?;
            if t.ranges.is_empty() {
                return Err(("ranges", "a range-sharded table needs at least one range".into()));
            }
            let mut rules = Vec::new();
            for r in &t.ranges {
                let read = |b: &Option<KeyLiteral>| b.as_ref().map(|l| l.read(key_type)).transpose();
                let lower = read(&r.from).map_err(|e| ("ranges", e))?;
                let upper = read(&r.to).map_err(|e| ("ranges", e))?;
                rules.push(RangeRule { lower, upper, shard: r.shard });
            }
            ShardFunction::range(rules, count).map_err(|e| ("ranges", e.to_string()))?
        }
    };
    Ok(TableRule {
        schema: t.schema.clone(),
        name: t.name.clone(),
        column: t.column.clone(),
        key_type,
        function,
    })
}

/// Between a sharded database's name and a shard's number in the name of the shard's pools
/// and servers (`app#2`): pools, health checks and `SHOW POOLS` treat each shard as a
/// database of its own.
pub const SHARD_MARK: char = '#';

impl super::Database {
    /// Shard `index` of this sharded database as a database of its own: the shard's servers,
    /// the database's other settings, named `name#index`, with the same server database name.
    pub fn shard_view(&self, index: usize) -> Option<super::Database> {
        let entry = self.shards.get(index)?;
        let mut db = self.clone();
        db.dbname = Some(self.server_dbname().to_owned());
        db.name = format!("{}{SHARD_MARK}{index}", self.name);
        db.shards = Vec::new();
        db.sharded_tables = Vec::new();
        db.sharded_schemas = Vec::new();
        db.unsharded_tables = None;
        match entry.servers.as_slice() {
            [] => {
                db.host = entry.host.clone();
                db.port = entry.port;
                db.servers = Vec::new();
            }
            servers => {
                db.host = None;
                db.servers = servers.to_vec();
            }
        }
        Some(db)
    }
}

impl super::Config {
    /// The database a shard's pool belongs to, from its name (`app#2`).
    pub fn shard_view(&self, name: &str) -> Option<super::Database> {
        let (base, index) = name.rsplit_once(SHARD_MARK)?;
        self.database(base)?.shard_view(index.parse().ok()?)
    }
}
