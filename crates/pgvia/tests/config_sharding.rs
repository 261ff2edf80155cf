//! The sharding keys of `pgvia.toml`: shards, sharded tables and schemas, the policy for
//! other tables, and the problems reported, with key paths and lines, for bad ones.

use std::path::Path;

use pgvia::config::{Config, ConfigError, ServerRole, UnshardedTables};
use shard::{KeyType, ShardFunction, Value};

fn parse(text: &str) -> Result<Config, ConfigError> {
    Config::parse(text, Path::new("pgvia.toml"))
}

fn problems(text: &str) -> Vec<String> {
    match parse(text) {
        Ok(c) => panic!("expected problems, got {c:#?}"),
        Err(ConfigError::Invalid { problems, .. }) => problems
            .iter()
            .map(|p| format!("{}: {p}", p.line.map_or("-".to_owned(), |l| l.to_string())))
            .collect(),
        Err(e) => panic!("expected Invalid, got {e}"),
    }
}

const USERS: &str = "[[users]]\nname = \"u\"\nauth_method = \"trust\"\n";

#[test]
fn a_sharded_database_compiles() {
    let text = format!(
        r#"{USERS}
[[databases]]
name = "app"
unsharded_tables = "omnisharded"

[[databases.shards]]
host = "10.0.0.1"

[[databases.shards]]
servers = [{{ host = "10.0.1.1", role = "primary" }}, {{ host = "10.0.1.2", port = 5433, role = "replica" }}]

[[databases.shards]]
host = "10.0.2.1"
port = 6432

[[databases.sharded_tables]]
name = "orders"
column = "customer_id"
type = "bigint"

[[databases.sharded_tables]]
schema = "geo"
name = "users"
column = "region"
type = "text"
function = "list"
values = [{{ shard = 0, values = ["eu", "uk"] }}, {{ shard = 2, values = ["us"] }}]
default_shard = 1

[[databases.sharded_tables]]
name = "events"
column = "day"
type = "date"
function = "range"
ranges = [{{ shard = 0, to = "2025-01-01" }}, {{ shard = 1, from = "2025-01-01", to = "2026-01-01" }}, {{ shard = 2, from = "2026-01-01" }}]

[[databases.sharded_schemas]]
name = "tenant_a"
shard = 1
"#
    );
    let config = parse(&text).unwrap_or_else(|e| panic!("{e}"));
    let db = &config.databases[0];
    assert!(db.is_sharded());
    // Not served as one server: no shard is "the" server of a sharded database.
    assert_eq!(db.first_server(), ("", 5432));
    assert_eq!(db.shards[1].servers()[1].role, ServerRole::Replica);
    assert_eq!(db.shards[2].servers()[0].port, 6432);
    let rules = db.sharding_rules(0).expect("valid").expect("sharded");
    assert_eq!(rules.shard_count, 3);
    assert_eq!(rules.unsharded, UnshardedTables::Omnisharded);
    assert_eq!(rules.schemas.shard_of_schema("tenant_a"), Some(1));
    let orders = rules.table(Some("public"), "orders").expect("orders");
    assert_eq!((orders.key_type, &orders.function), (KeyType::BigInt, &ShardFunction::Hash { shards: 3 }));
    let users = rules.table(None, "users").expect("users");
    assert_eq!(users.function.shard_of(&Value::Text(b"us"[..].into())), Ok(2));
    assert_eq!(users.function.shard_of(&Value::Text(b"jp"[..].into())), Ok(1));
    assert!(rules.table(Some("other"), "users").is_none());
    let events = rules.table(None, "events").expect("events");
    let day = |s: &str| KeyType::Date.parse_text(s.as_bytes()).expect("date");
    assert_eq!(events.function.shard_of(&day("2025-07-01")), Ok(1));
    assert_eq!(events.function.shard_of(&day("2030-01-01")), Ok(2));
}

#[test]
fn the_default_policy_is_refuse() {
    let text = format!("{USERS}[[databases]]\nname = \"app\"\n[[databases.shards]]\nhost = \"a\"\n");
    let config = parse(&text).unwrap_or_else(|e| panic!("{e}"));
    let rules = config.databases[0].sharding_rules(0).expect("valid").expect("sharded");
    assert_eq!(rules.unsharded, UnshardedTables::Refuse);
    assert!(rules.tables.is_empty());
}

#[test]
fn every_problem_has_a_key_path_and_a_line() {
    let text = format!(
        r#"{USERS}
[[databases]]
name = "app"
host = "h"

[[databases.shards]]
host = "a"

[[databases.shards]]
port = 5433

[[databases.shards]]
host = "a"

[[databases.sharded_tables]]
name = "t1"
column = "id"
type = "numeric"

[[databases.sharded_tables]]
name = "t2"
column = "region"
type = "text"
function = "list"
values = [{{ shard = 5, values = ["eu"] }}]

[[databases.sharded_tables]]
name = "t3"
column = "id"
type = "integer"
function = "range"
ranges = [{{ shard = 0, to = 100 }}, {{ shard = 1, from = 50 }}]

[[databases.sharded_tables]]
name = "t4"
column = "id"
type = "integer"
ranges = [{{ shard = 0, to = 100 }}]

[[databases.sharded_tables]]
name = "t5"
column = "id"
type = "integer"
function = "range"
ranges = [{{ shard = 0, to = "ten" }}]

[[databases.sharded_schemas]]
name = "s"
shard = 3

[[databases]]
name = "plain"
host = "p"
unsharded_tables = "refuse"
"#
    );
    assert_eq!(
        problems(&text),
        [
            "7: databases[0].host: a sharded database lists its servers per shard, in [[databases.shards]]",
            "12: databases[0].shards[1].host: required key is missing (or give servers)",
            "16: databases[0].shards[2].host: a:5432 is listed twice",
            "21: databases[0].sharded_tables[0].type: unsupported key type \"numeric\"; expected one of bigint, integer, smallint, text, varchar, uuid, date, timestamp, timestamptz",
            "28: databases[0].sharded_tables[1].values: shard 5 does not exist: shards are numbered from 0 to 2",
            "35: databases[0].sharded_tables[2].ranges: ranges for shards 0 and 1 overlap",
            "41: databases[0].sharded_tables[3].ranges: does not apply to function \"hash\"",
            "48: databases[0].sharded_tables[4].ranges: invalid input syntax for type integer: \"ten\"",
            "52: databases[0].sharded_schemas[0].shard: shard 3 does not exist: shards are numbered from 0 to 2",
            "57: databases[1].unsharded_tables: only a sharded database (with [[databases.shards]]) takes this key",
        ]
    );
}

#[test]
fn the_binary_explains_a_route_from_the_configuration_alone() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("pgvia.toml");
    let text = format!(
        "{USERS}[[databases]]\nname = \"shop\"\n[[databases.shards]]\nhost = \"127.0.0.1\"\n\
         [[databases.shards]]\nhost = \"127.0.0.2\"\n[[databases.sharded_tables]]\nname = \"orders\"\ncolumn = \"id\"\ntype = \"bigint\"\n"
    );
    std::fs::write(&path, text).expect("write");
    let bin = env!("CARGO_BIN_EXE_pgvia");
    let out = std::process::Command::new(bin)
        .args(["route", "--config"])
        .arg(&path)
        .args(["--types", "20", "--param", "NULL", "SELECT * FROM orders WHERE id = $1 OR id = 5"])
        .output()
        .expect("run pgvia route");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.starts_with("statement 1: shards {"), "{stdout}");
    let out = std::process::Command::new(bin)
        .args(["route", "--config"])
        .arg(&path)
        .arg("SELECT * FROM customers")
        .output()
        .expect("run pgvia route");
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("ERROR 0A000: table customers is not sharded"));
}
